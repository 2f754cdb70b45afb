//! Megatron-LM command lines: every argument of Megatron-LM is classified, misspellings
//! name the real flag, and a whole `pretrain_gpt.py` line builds the same model as the
//! equivalent HuggingFace config.json.

use moe_skills::inputs::megatron_args::{
    megatron_arguments, parse_megatron_args, parse_megatron_args_for_model, MegatronArgument,
    UNUSED_REASON,
};
use moe_skills::model::arch::AttentionKind;
use moe_skills::model::flops::model_flops_per_token;
use moe_skills::model::{
    Architecture, ConfigError, ModelSpec, Precision, RecomputeGranularity, RecomputeModule,
    TrainingConfig,
};
use serde_json::{json, Value};

/// A value argparse accepts for this argument (and the cost model's enums accept).
fn sample_values(arg: &MegatronArgument) -> Vec<String> {
    let special = match arg.dest.as_str() {
        "cp_comm_type" => Some("p2p"),
        "recompute_modules" | "offload_modules" => Some("core_attn"),
        "cuda_graph_modules" | "cuda_graph_scope_deprecated" => Some("attn"),
        _ => None,
    };
    let one = if let Some(s) = special {
        s.to_string()
    } else if let Some(Value::Array(choices)) = &arg.choices {
        match &choices[0] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    } else {
        match arg.value_type.as_deref() {
            Some("int")
            | Some("moe_freq_type")
            | Some("no_rope_freq_type")
            | Some("la_freq_type") => "2".to_string(),
            Some("float") => "0.5".to_string(),
            Some("bool") => "True".to_string(),
            Some("tuple_type") => "(128,0)".to_string(),
            Some("signal.Signals") => "SIGTERM".to_string(),
            _ => "x".to_string(),
        }
    };
    let count = match &arg.nargs {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(1) as usize,
        _ => 1,
    };
    vec![one; count]
}

/// Flags that only mean something next to another flag.
fn context(dest: &str) -> &'static str {
    match dest {
        "num_layers_per_virtual_pipeline_stage" => {
            "--num-layers 8 --pipeline-model-parallel-size 2"
        }
        _ => "",
    }
}

#[test]
fn every_megatron_argument_is_modelled_or_ignored_with_a_reason() {
    let list = megatron_arguments().unwrap();
    let baseline = parse_megatron_args("").unwrap();
    let mut failures = Vec::new();
    let mut modelled = 0;
    let mut ignored = 0;
    let mut rejected = 0;
    for arg in &list.arguments {
        for option in &arg.options {
            let line = match arg.action.as_str() {
                "store_true" | "store_false" | "boolean_optional" => {
                    format!("{} {option}", context(&arg.dest))
                }
                _ => format!(
                    "{} {option} {}",
                    context(&arg.dest),
                    sample_values(arg).join(" ")
                ),
            };
            match parse_megatron_args(&line) {
                Ok(cfg) => {
                    let listed = cfg.ignored_settings.iter().any(|s| &s.key == option);
                    let mut bare = cfg.clone();
                    bare.ignored_settings.clear();
                    bare.assumed_defaults.clear();
                    let mut base = baseline.clone();
                    base.ignored_settings.clear();
                    base.assumed_defaults.clear();
                    if listed {
                        ignored += 1;
                    } else if bare != base {
                        modelled += 1;
                    } else {
                        failures.push(format!("{line}: neither modelled nor listed as ignored"));
                    }
                }
                // Megatron-LM itself refuses these two at start-up.
                Err(ConfigError::InvalidValue { key, .. })
                    if key == "--checkpoint-activations" || key == "--model-parallel-size" =>
                {
                    rejected += 1
                }
                Err(e) => failures.push(format!("{line}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The list is Megatron-LM's whole parser, not a sample.
    assert!(modelled >= 50, "{modelled} modelled");
    eprintln!("{modelled} modelled, {ignored} ignored with a reason, {rejected} refused");
    assert!(ignored >= 700, "{ignored} ignored");
    assert_eq!(rejected, 2);
}

#[test]
fn unused_flags_carry_the_reason() {
    let c =
        parse_megatron_args("--lr 1e-4 --train-iters 100 --tensor-model-parallel-size 2").unwrap();
    for key in ["--lr", "--train-iters"] {
        let s = c.ignored_settings.iter().find(|s| s.key == key).unwrap();
        assert_eq!(s.reason, UNUSED_REASON);
    }
    assert_eq!(c.tp(), 2);
}

fn unknown(line: &str) -> (String, Option<String>) {
    match parse_megatron_args(line) {
        Err(ConfigError::UnknownKey { key, suggestion }) => (key, suggestion),
        other => panic!("{line}: expected an unknown-key error, got {other:?}"),
    }
}

#[test]
fn misspelt_flags_name_the_intended_flag() {
    let cases = [
        ("--context-paralel-size 4", "--context-parallel-size"),
        (
            "--tensor-model-paralel-size 2",
            "--tensor-model-parallel-size",
        ),
        ("--num-layer 61", "--num-layers"),
        ("--recompute-granularty full", "--recompute-granularity"),
        ("--moe-router-top-k 8", "--moe-router-topk"),
        ("--sequence-paralel", "--sequence-parallel"),
        ("--use-distributed-optimiser", "--use-distributed-optimizer"),
    ];
    for (line, intended) in cases {
        let (key, suggestion) = unknown(line);
        assert_eq!(key, line.split(' ').next().unwrap());
        assert_eq!(suggestion.as_deref(), Some(intended), "{line}");
    }
    // allow_abbrev=False: a prefix is not the flag.
    let (key, suggestion) = unknown("--context-parallel 4");
    assert_eq!(key, "--context-parallel");
    assert_eq!(suggestion.as_deref(), Some("--context-parallel-size"));
    // Megatron-LM has no `--no-` form of a store_true flag.
    let (_, suggestion) = unknown("--no-overlap-grad-reduce");
    assert!(suggestion.is_some());
    let err = parse_megatron_args("--context-paralel-size 4")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("did you mean `--context-parallel-size`"),
        "{err}"
    );
}

#[test]
fn argparse_rules_apply() {
    // store_true takes no value.
    let err = parse_megatron_args("--sequence-parallel=true").unwrap_err();
    assert!(
        matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "--sequence-parallel")
    );
    // `=`-joined values, store_false `--no-` flags, nargs '+'.
    let c = parse_megatron_args(
        "--tensor-model-parallel-size=4 --no-gradient-accumulation-fusion \
         --recompute-granularity selective --recompute-modules moe_act layernorm --bf16",
    )
    .unwrap();
    assert_eq!(c.tp(), 4);
    assert_eq!(
        c.recompute_modules(),
        &[RecomputeModule::MoeAct, RecomputeModule::Layernorm]
    );
    assert!(c
        .ignored_settings
        .iter()
        .any(|s| s.key == "--no-gradient-accumulation-fusion"));
    // Types and choices are argparse's.
    let err = parse_megatron_args("--tensor-model-parallel-size two").unwrap_err();
    assert!(
        err.to_string().contains("--tensor-model-parallel-size"),
        "{err}"
    );
    let err = parse_megatron_args("--recompute-granularity selectiv").unwrap_err();
    assert!(
        err.to_string().contains("did you mean `selective`"),
        "{err}"
    );
    // A missing value is an error naming the flag.
    let err = parse_megatron_args("--seq-length --bf16").unwrap_err();
    assert!(err.to_string().contains("--seq-length"), "{err}");
    // Megatron-LM refuses --checkpoint-activations.
    let err = parse_megatron_args("--checkpoint-activations").unwrap_err();
    assert!(err.to_string().contains("--recompute-activations"), "{err}");
}

#[test]
fn issue_examples_are_modelled_not_dropped() {
    let c = parse_megatron_args(
        "--num-layers 48 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 3",
    )
    .unwrap();
    // 48 layers / PP4 = 12 per stage; 12 / 3 = 4 virtual stages.
    assert_eq!(c.vpp(), 4);
    let c = parse_megatron_args("--recompute-activations").unwrap();
    assert_eq!(
        c.recompute_granularity,
        Some(RecomputeGranularity::Selective)
    );
    assert_eq!(c.recompute_modules(), &[RecomputeModule::CoreAttn]);
    assert!(c
        .assumed_defaults
        .iter()
        .any(|d| d.key == "recompute_modules"));
    let c = parse_megatron_args("--moe-layer-recompute").unwrap();
    assert_eq!(
        c.recompute_granularity,
        Some(RecomputeGranularity::Selective)
    );
    // TransformerConfig appends `moe` to the default `[core_attn]`.
    assert_eq!(
        c.recompute_modules(),
        &[RecomputeModule::CoreAttn, RecomputeModule::Moe]
    );
    let c = parse_megatron_args(
        "--recompute-granularity selective --recompute-modules moe_act --moe-layer-recompute",
    )
    .unwrap();
    assert_eq!(
        c.recompute_modules(),
        &[RecomputeModule::MoeAct, RecomputeModule::Moe]
    );
    let err =
        parse_megatron_args("--recompute-granularity full --moe-layer-recompute").unwrap_err();
    assert!(err.to_string().contains("--moe-layer-recompute"), "{err}");
}

#[test]
fn expert_tensor_parallel_defaults_to_tp_and_says_so() {
    let c = parse_megatron_args("--tensor-model-parallel-size 4").unwrap();
    assert_eq!(c.etp(), 4);
    let d = c
        .assumed_defaults
        .iter()
        .find(|d| d.key == "expert_tensor_parallel_size")
        .unwrap();
    assert_eq!(d.value, json!(4));
    let c = parse_megatron_args("--tensor-model-parallel-size 4 --expert-tensor-parallel-size 1")
        .unwrap();
    assert_eq!(c.etp(), 1);
    assert!(c.assumed_defaults.is_empty());
}

/// A whole command line (it names its training script) runs Megatron-LM's default for every
/// flag it leaves out: unsharded optimizer, data-parallel traffic not overlapped, unfused cross
/// entropy, and for MoE the allgather dispatcher and the router's own routing. A fragment of
/// flags leaves them to the cost model's own defaults.
#[test]
fn a_whole_command_line_takes_megatron_lm_defaults_for_what_it_leaves_out() {
    let whole = "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 \
                 --num-experts 64 --bf16";
    let c = parse_megatron_args(whole).unwrap();
    assert_eq!(c.use_distributed_optimizer, Some(false));
    assert!(!c.optimizer_sharded());
    assert_eq!(c.overlap_grad_reduce, Some(false));
    assert_eq!(c.overlap_param_gather, Some(false));
    assert_eq!(c.cross_entropy_loss_fusion, Some(false));
    assert_eq!(c.moe_router_force_load_balancing, Some(false));
    assert_eq!(
        serde_json::to_value(c.moe_token_dispatcher_type).unwrap(),
        json!("allgather")
    );
    let said = |key: &str| {
        c.assumed_defaults
            .iter()
            .find(|d| d.key == key)
            .unwrap_or_else(|| panic!("`{key}` is not listed as assumed"))
            .why
            .clone()
    };
    assert!(said("use_distributed_optimizer").contains("--use-distributed-optimizer"));
    assert!(said("overlap_grad_reduce").contains("--overlap-grad-reduce"));
    assert!(said("moe_token_dispatcher_type").contains("Megatron-LM's default"));
    assert!(said("moe_grouped_gemm").contains("SequentialMLP"));

    // Given flags win and nothing is assumed for them.
    let given = parse_megatron_args(&format!(
        "{whole} --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
         --cross-entropy-loss-fusion --moe-router-force-load-balancing \
         --moe-token-dispatcher-type flex --moe-grouped-gemm"
    ))
    .unwrap();
    assert_eq!(given.use_distributed_optimizer, Some(true));
    assert_eq!(given.overlap_grad_reduce, Some(true));
    assert_eq!(given.moe_router_force_load_balancing, Some(true));
    for key in [
        "use_distributed_optimizer",
        "overlap_grad_reduce",
        "moe_token_dispatcher_type",
    ] {
        assert!(given.assumed_defaults.iter().all(|d| d.key != key), "{key}");
    }

    // A dense line gets no MoE defaults; Megatron-FSDP shards the optimizer itself.
    let dense = parse_megatron_args("pretrain_gpt.py --use-megatron-fsdp --bf16").unwrap();
    assert_eq!(dense.use_distributed_optimizer, None);
    assert_eq!(dense.moe_token_dispatcher_type, None);
    assert_eq!(dense.moe_router_force_load_balancing, None);
    assert_eq!(dense.overlap_grad_reduce, Some(false));
    let fsdp2 = parse_megatron_args("pretrain_gpt.py --use-torch-fsdp2 --bf16").unwrap();
    assert_eq!(fsdp2.use_distributed_optimizer, None);

    // A fragment of flags says nothing about the rest.
    let fragment = parse_megatron_args("--tensor-model-parallel-size 2 --num-experts 64").unwrap();
    assert_eq!(fragment.use_distributed_optimizer, None);
    assert_eq!(fragment.overlap_grad_reduce, None);
    assert_eq!(fragment.moe_token_dispatcher_type, None);
}

#[test]
fn precision_flags_follow_megatron() {
    let p = |line: &str| parse_megatron_args(line).unwrap();
    assert_eq!(
        p("--fp8-format e4m3 --fp8-recipe blockwise").precision(),
        Precision::Fp8Blockwise
    );
    assert_eq!(
        p("--fp8-format hybrid --fp8-recipe mxfp8").precision(),
        Precision::Mxfp8
    );
    let delayed = p("--fp8-format e4m3");
    assert_eq!(delayed.precision(), Precision::Fp8Delayed);
    assert!(delayed
        .assumed_defaults
        .iter()
        .any(|d| d.key == "fp8_recipe"));
    // A recipe without a format does not turn FP8 on in Megatron-LM.
    let recipe_only = p("--bf16 --fp8-recipe blockwise");
    assert_eq!(recipe_only.precision(), Precision::Bf16);
    assert!(recipe_only
        .ignored_settings
        .iter()
        .any(|s| s.key == "--fp8-recipe"));
    assert_eq!(p("--fp4-format e2m1 --bf16").precision(), Precision::Nvfp4);
    // A whole command line with an FP8 recipe and no --bf16 keeps fp32 parameters in
    // Megatron-LM; the estimate prices bf16 and says so. With --bf16 nothing is assumed.
    let whole =
        "torchrun pretrain_gpt.py --num-experts 8 --fp8-format e4m3 --fp8-recipe tensorwise";
    let fp32_params = p(whole);
    let said = fp32_params
        .assumed_defaults
        .iter()
        .find(|d| d.key == "params_dtype")
        .unwrap_or_else(|| panic!("{:?}", fp32_params.assumed_defaults));
    assert!(said.why.contains("--bf16"), "{}", said.why);
    let with_bf16 = p(&format!("{whole} --bf16"));
    assert!(with_bf16
        .assumed_defaults
        .iter()
        .all(|d| d.key != "params_dtype"));
    // A fragment of flags says nothing about the rest.
    assert!(p("--fp8-format e4m3 --fp8-recipe tensorwise")
        .assumed_defaults
        .iter()
        .all(|d| d.key != "params_dtype"));
}

#[test]
fn launcher_words_and_environment_are_ignored_with_reasons() {
    let c = parse_megatron_args(
        "CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \
         --tensor-model-parallel-size 2 $EXTRA_ARGS --bf16 2>&1 | tee log.txt",
    )
    .unwrap();
    assert_eq!(c.num_gpus, Some(16));
    let keys: Vec<&str> = c.ignored_settings.iter().map(|s| s.key.as_str()).collect();
    for key in [
        "CUDA_DEVICE_MAX_CONNECTIONS=1",
        "torchrun",
        "--nproc_per_node 8",
        "pretrain_gpt.py",
        "$EXTRA_ARGS",
        "2>&1 | tee log.txt",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    assert!(c.ignored_settings.iter().all(|s| !s.reason.is_empty()));
}

#[test]
fn megatron_flags_assigned_before_the_launcher_are_read() {
    // A launch script that keeps the flags in a variable, flattened to one line.
    let c = parse_megatron_args(
        "MODEL_ARGS= --context-parallel-size 4 --seq-length 65536 \
         torchrun --nproc-per-node=4 --master_port 6000 pretrain_gpt.py $MODEL_ARGS --bf16",
    )
    .unwrap();
    assert_eq!(c.cp(), 4);
    assert_eq!(c.seq_length, Some(65536));
    assert_eq!(c.num_gpus, Some(4));
    assert!(c
        .ignored_settings
        .iter()
        .any(|s| s.key == "--master_port 6000"));
}

/// DeepSeek-V2-Lite (MLA, 64 routed + 2 shared experts, one leading dense layer), written
/// the way Megatron-LM's example scripts launch MoE models. Not in the catalog.
const DEEPSEEK_V2_LITE_LINE: &str = r#"
export CUDA_DEVICE_MAX_CONNECTIONS=1
CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node 8 --nnodes 1 --node_rank 0 \
    --master_addr localhost --master_port 6000 pretrain_gpt.py \
    --num-layers 27 --hidden-size 2048 --ffn-hidden-size 10944 --num-attention-heads 16 \
    --multi-latent-attention --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 \
    --v-head-dim 128 --qk-layernorm \
    --num-experts 64 --moe-router-topk 6 --moe-ffn-hidden-size 1408 \
    --moe-shared-expert-intermediate-size 2816 --moe-layer-freq "([0]*1+[1]*26)" \
    --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-3 \
    --moe-grouped-gemm --moe-token-dispatcher-type alltoall --moe-router-score-function softmax \
    --swiglu --normalization RMSNorm --disable-bias-linear --position-embedding-type rope \
    --rotary-base 10000 --untie-embeddings-and-output-weights \
    --vocab-size 102400 --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model deepseek-ai/DeepSeek-V2-Lite \
    --seq-length 4096 --max-position-embeddings 163840 \
    --micro-batch-size 1 --global-batch-size 256 \
    --lr 1e-4 --min-lr 1e-5 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 \
    --train-iters 10000 --lr-warmup-iters 100 \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
    --expert-model-parallel-size 8 --use-distributed-optimizer --bf16 \
    --recompute-granularity selective --recompute-modules mla_up_proj moe_act \
    --data-path $DATA_PATH --split 99,1,0 --log-interval 10 --save-interval 1000 \
    --eval-interval 1000 --eval-iters 10 --save /ckpt --load /ckpt \
    --tensorboard-dir /tb 2>&1 | tee train.log
"#;

/// DeepSeek-V2-Lite's HuggingFace config.json (the fields the mapping reads).
fn deepseek_v2_lite_hf() -> Value {
    json!({
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
        "num_hidden_layers": 27, "hidden_size": 2048, "intermediate_size": 10944,
        "moe_intermediate_size": 1408, "num_attention_heads": 16, "num_key_value_heads": 16,
        "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
        "first_k_dense_replace": 1, "q_lora_rank": null, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 102400, "tie_word_embeddings": false, "hidden_act": "silu",
        "max_position_embeddings": 163840, "n_group": 1, "topk_group": 1
    })
}

#[test]
fn group_limited_routing_flags_reach_the_architecture() {
    let line = |extra: &str| {
        format!(
            "pretrain_gpt.py --num-layers 4 --hidden-size 1024 --ffn-hidden-size 4096 \
             --num-attention-heads 8 --num-experts 64 --moe-router-topk 8 \
             --moe-ffn-hidden-size 512 --vocab-size 32000 --seq-length 4096 {extra}"
        )
    };
    let cfg =
        parse_megatron_args(&line("--moe-router-num-groups 8 --moe-router-group-topk 4")).unwrap();
    let groups = arch_of(&cfg).moe.and_then(|m| m.router_groups).unwrap();
    assert_eq!((groups.num_groups, groups.group_topk), (8, 4));
    // Read, so not listed among the settings the answer ignores.
    assert!(cfg
        .ignored_settings
        .iter()
        .all(|s| !s.key.contains("router-num-groups") && !s.key.contains("router-group-topk")));
    let plain = parse_megatron_args(&line("")).unwrap();
    assert_eq!(arch_of(&plain).moe.and_then(|m| m.router_groups), None);
}

/// Mixtral-8x7B (GQA, 8 experts top-2, every layer MoE). Not in the catalog.
const MIXTRAL_8X7B_LINE: &str = "torchrun --nproc_per_node 8 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \
    --group-query-attention --num-query-groups 8 --num-experts 8 --moe-router-topk 2 \
    --swiglu --normalization RMSNorm --disable-bias-linear --position-embedding-type rope \
    --untie-embeddings-and-output-weights --vocab-size 32000 --make-vocab-size-divisible-by 128 \
    --seq-length 8192 --max-position-embeddings 32768 --tensor-model-parallel-size 2 \
    --sequence-parallel --expert-model-parallel-size 4 --micro-batch-size 1 \
    --global-batch-size 128 --bf16 --recompute-activations";

fn mixtral_8x7b_hf() -> Value {
    json!({
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8,
        "num_experts_per_tok": 2, "vocab_size": 32000, "tie_word_embeddings": false,
        "hidden_act": "silu", "max_position_embeddings": 32768
    })
}

fn arch_of(cfg: &TrainingConfig) -> Architecture {
    match &cfg.model {
        Some(ModelSpec::HfConfig(v)) => Architecture::from_hf_config(v).unwrap(),
        other => panic!("expected an architecture from the flags, got {other:?}"),
    }
}

/// The parts of an architecture that do not name its source.
fn shape(a: &Architecture) -> Architecture {
    let mut a = a.clone();
    a.id.clear();
    a.family.clear();
    a.display_name.clear();
    a.source.clear();
    a
}

#[test]
fn full_pretrain_gpt_lines_give_the_flops_of_the_hf_config() {
    for (line, hf, seq) in [
        (DEEPSEEK_V2_LITE_LINE, deepseek_v2_lite_hf(), 4096),
        (MIXTRAL_8X7B_LINE, mixtral_8x7b_hf(), 8192),
    ] {
        let cfg = parse_megatron_args(line).unwrap();
        assert_eq!(cfg.seq_length, Some(seq));
        let from_flags = arch_of(&cfg);
        let from_hf = Architecture::from_hf_config(&hf).unwrap();
        assert_eq!(shape(&from_flags), shape(&from_hf));
        for s in [4096, 131072] {
            let f = |a: &Architecture| model_flops_per_token(a, a.mtp_num_layers, s).total();
            let (a, b) = (f(&from_flags), f(&from_hf));
            assert!(a > 0.0 && (a - b).abs() <= 1e-9 * b, "seq {s}: {a} vs {b}");
        }
    }
    // Settings of the DeepSeek line that the cost model uses.
    let c = parse_megatron_args(DEEPSEEK_V2_LITE_LINE).unwrap();
    assert_eq!((c.tp(), c.ep(), c.mbs()), (1, 8, 1));
    assert_eq!(c.num_gpus, Some(8));
    assert_eq!(c.global_batch_size, Some(256));
    assert_eq!(
        c.recompute_modules(),
        &[RecomputeModule::MlaUpProj, RecomputeModule::MoeAct]
    );
    for key in [
        "--lr",
        "--train-iters",
        "--qk-layernorm",
        "--max-position-embeddings",
    ] {
        assert!(c.ignored_settings.iter().any(|s| s.key == key), "{key}");
    }
    // Mixtral: ETP follows TP, the expert FFN follows --ffn-hidden-size.
    let m = parse_megatron_args(MIXTRAL_8X7B_LINE).unwrap();
    assert_eq!(m.etp(), 2);
    let keys: Vec<&str> = m.assumed_defaults.iter().map(|d| d.key.as_str()).collect();
    assert!(keys.contains(&"expert_tensor_parallel_size"), "{keys:?}");
    assert!(keys.contains(&"moe_ffn_hidden_size"), "{keys:?}");
}

#[test]
fn vocabulary_must_be_given_or_the_error_names_the_flag() {
    let err = parse_megatron_args(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 \
         --tokenizer-type HuggingFaceTokenizer --tokenizer-model /data/tokenizer",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("--vocab-size"), "{err}");
    assert!(err.contains("HuggingFaceTokenizer"), "{err}");
    // A HuggingFace repository as the tokenizer names the model card instead, and says so.
    let c = parse_megatron_args(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 \
         --tokenizer-type HuggingFaceTokenizer --tokenizer-model some/model",
    )
    .unwrap();
    assert_eq!(c.model, Some(ModelSpec::Id("model".into())));
    let note = c
        .ignored_settings
        .iter()
        .find(|s| s.key == "--hidden-size")
        .unwrap();
    assert!(note.reason.contains("--vocab-size N"), "{}", note.reason);
    // --vocab-size is padded like Megatron-LM: 50257 -> multiple of 128·TP2 = 50432.
    let c = parse_megatron_args(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 50257 \
         --tensor-model-parallel-size 2",
    )
    .unwrap();
    assert_eq!(arch_of(&c).vocab_size, 50432);
    // Megatron-LM's default dense FFN is 4h without SwiGLU.
    assert_eq!(arch_of(&c).ffn_hidden_size, 256);
    assert!(!arch_of(&c).gated_linear_unit);
}

#[test]
fn a_model_named_elsewhere_wins_over_the_architecture_flags() {
    let card = ModelSpec::Id("deepseek-v3".into());
    let c = parse_megatron_args_for_model(DEEPSEEK_V2_LITE_LINE, Some(&card)).unwrap();
    assert_eq!(c.model, Some(card));
    let s = c
        .ignored_settings
        .iter()
        .find(|s| s.key == "--num-layers")
        .unwrap();
    assert!(s.reason.contains("model named separately"), "{}", s.reason);
}

#[test]
fn interleaved_dense_and_moe_layers_are_refused_with_the_reason() {
    let err = parse_megatron_args(
        "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 \
         --num-experts 4 --moe-router-topk 1 --moe-layer-freq 2",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("--moe-layer-freq"), "{err}");
}

#[test]
fn hierarchical_context_parallel_sizes_are_read_as_integers() {
    let c = parse_megatron_args(
        "--context-parallel-size 32 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 8 4",
    )
    .unwrap();
    assert_eq!(c.hierarchical_context_parallel_sizes, Some(vec![8, 4]));
    assert_eq!(c.cp_groups(), (8, 4));
}

#[test]
fn dispatcher_sm_counts_are_read_and_the_unified_knob_wins() {
    use moe_skills::model::config::ResolvedDispatcher;
    let c = parse_megatron_args("--moe-hybridep-num-sms 32 --moe-deepep-num-sms 20").unwrap();
    assert_eq!(c.dispatcher_num_sms(ResolvedDispatcher::Hybridep), Some(32));
    assert_eq!(c.dispatcher_num_sms(ResolvedDispatcher::Deepep), Some(20));
    assert_eq!(c.dispatcher_num_sms(ResolvedDispatcher::Alltoall), None);
    let c =
        parse_megatron_args("--moe-hybridep-num-sms 32 --moe-flex-dispatcher-num-sms 16").unwrap();
    assert_eq!(c.dispatcher_num_sms(ResolvedDispatcher::Hybridep), Some(16));
    let zero = parse_megatron_args("--moe-flex-dispatcher-num-sms 0").unwrap();
    let err = moe_skills::model::limits::check_config(&zero, "").unwrap_err();
    assert!(
        err.to_string().contains("moe_flex_dispatcher_num_sms"),
        "{err}"
    );
}

/// A Megatron-LM YAML run file (`examples/moe_recipes/` layout) reads as the command line its
/// launcher builds: keys become flags, a space-separated string is several values, a key that
/// is an attribute name sets it, and a HuggingFace tokenizer without a vocabulary size names
/// the model card.
#[test]
fn a_megatron_run_file_reads_as_its_command_line() {
    use moe_skills::inputs::read_config_text;
    use moe_skills::model::config::CudaGraphScope;
    let text = include_str!("fixtures/megatron-run-file/qwen3-30b-recipe.yaml");
    let cfg = read_config_text(text, None).unwrap();
    assert_eq!(cfg.model, Some(ModelSpec::Id("Qwen3-30B-A3B".into())));
    assert_eq!(cfg.expert_model_parallel_size, Some(8));
    assert_eq!(cfg.global_batch_size, Some(256));
    assert_eq!(
        cfg.cuda_graph_scope,
        Some(vec![
            CudaGraphScope::MoeRouter,
            CudaGraphScope::MoePreprocess
        ])
    );
    let notes: Vec<(&str, &str)> = cfg
        .ignored_settings
        .iter()
        .map(|s| (s.key.as_str(), s.reason.as_str()))
        .collect();
    let reason = |key: &str| {
        notes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, r)| *r)
            .unwrap_or_else(|| panic!("{key} not listed: {notes:?}"))
    };
    assert!(reason("--hidden-size").contains("named after the tokenizer"));
    assert!(reason("DEPENDENCIES").contains("container image"));
    assert!(reason("CUDA_DEVICE_MAX_CONNECTIONS=1").contains("environment"));
    // The recipe's `NVTE_FUSED_ATTN: 1` is Transformer Engine's attention switch, read (it
    // matches the default backend, which sets it to 1).
    assert_eq!(
        cfg.attention_env.as_ref().and_then(|e| e.fused.as_deref()),
        Some("1")
    );
}

#[test]
fn a_whole_line_without_a_tokenizer_type_builds_its_scripts_default() {
    // pretrain_gpt.py sets --tokenizer-type GPT2BPETokenizer itself (`args_defaults`): with
    // a --vocab-file and no --tokenizer-type, its 50257 tokens padded to 128 × TP.
    let flags = "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 \
                 --num-experts 8 --moe-router-topk 2 --tensor-model-parallel-size 2 \
                 --vocab-file /data/bpe/vocab.json --merge-file /data/bpe/merges.txt --bf16";
    let c = parse_megatron_args(&format!(
        "torchrun --nproc_per_node 8 pretrain_gpt.py {flags}"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let padded = c
        .assumed_defaults
        .iter()
        .find(|d| d.key == "padded_vocab_size")
        .unwrap_or_else(|| panic!("{:?}", c.assumed_defaults));
    assert_eq!(padded.value, 50432, "50257 up to a multiple of 256");
    assert!(padded.why.contains("GPT2BPETokenizer"), "{}", padded.why);
    assert!(padded.why.contains("pretrain_gpt.py"), "{}", padded.why);
    // A functional test's MODEL_ARGS map, which its harness passes to pretrain_gpt.py.
    let run_file = "MODEL_ARGS:\n  --num-layers: 4\n  --hidden-size: 512\n  \
                    --num-attention-heads: 8\n  --seq-length: 1024\n  --num-experts: 8\n  \
                    --vocab-file: ${DATA_PATH}/bpe/vocab.json\n  \
                    --merge-file: ${DATA_PATH}/bpe/merges.txt\n  --bf16: true\n";
    let c = moe_skills::inputs::read_config_text(run_file, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(c
        .assumed_defaults
        .iter()
        .any(|d| d.key == "padded_vocab_size" && d.value == 50304));
    // A bare flag list (no script) or a custom trainer names no default: the size is asked for.
    let bare = parse_megatron_args(flags).unwrap_err().to_string();
    assert!(bare.contains("--vocab-size"), "{bare}");
    let custom = parse_megatron_args(&format!("python my_trainer.py {flags}"))
        .unwrap_err()
        .to_string();
    assert!(custom.contains("--vocab-size"), "{custom}");
}

#[test]
fn a_fixed_tokenizer_gives_the_vocabulary_and_other_trainers_are_refused() {
    // Megatron-LM's Mixtral example: the Llama-2 tokenizer's 32000 tokens, padded to 128 × TP.
    let line = "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 \
                --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention \
                --num-query-groups 8 --swiglu --untie-embeddings-and-output-weights \
                --num-experts 8 --moe-router-topk 2 --seq-length 4096 \
                --tensor-model-parallel-size 2 --tokenizer-type Llama2Tokenizer \
                --tokenizer-model /tokenizers/tokenizer.model --bf16";
    let c = parse_megatron_args(line).unwrap_or_else(|e| panic!("{e}"));
    let padded = c
        .assumed_defaults
        .iter()
        .find(|d| d.key == "padded_vocab_size")
        .unwrap_or_else(|| panic!("{:?}", c.assumed_defaults));
    assert_eq!(padded.value, 32000);
    assert!(padded.why.contains("Llama2Tokenizer has 32000 tokens"));
    assert!(!c
        .ignored_settings
        .iter()
        .any(|s| s.key == "--tokenizer-type"));
    let t5 = parse_megatron_args("torchrun pretrain_t5.py --num-layers 12 --hidden-size 768")
        .unwrap_err()
        .to_string();
    assert!(t5.contains("encoder-decoder"), "{t5}");
}

#[test]
fn an_unknown_flag_of_a_custom_trainer_names_the_script_not_a_look_alike() {
    let custom = parse_megatron_args("torchrun examples/multimodal/train.py --use-te --bf16")
        .unwrap_err()
        .to_string();
    assert!(custom.contains("adds arguments of its own"), "{custom}");
    assert!(custom.contains("examples/multimodal/train.py"), "{custom}");
    // After Megatron-LM's own trainer an unknown flag is a typo, with the closest spelling.
    let typo = parse_megatron_args("torchrun pretrain_gpt.py --context-paralel-size 2")
        .unwrap_err()
        .to_string();
    assert!(
        typo.contains("did you mean `--context-parallel-size`"),
        "{typo}"
    );
}

#[test]
fn a_hybrid_pattern_builds_mamba_layers_with_megatrons_defaults() {
    // Megatron-LM's examples/mamba/train.sh (pretrain_hybrid.py, 800M pattern).
    let c = parse_megatron_args(
        "torchrun pretrain_hybrid.py --hybrid-layer-pattern M-M-M--M-*M-M --hidden-size 1024 \
         --num-attention-heads 16 --seq-length 4096 --vocab-size 131072 --bf16",
    )
    .unwrap();
    let Some(moe_skills::model::config::ModelSpec::HfConfig(model)) = c.model.clone() else {
        panic!("a model from the line: {:?}", c.model)
    };
    let a = moe_skills::model::Architecture::from_hf_config(&model).unwrap();
    assert_eq!(a.num_layers, 13);
    assert_eq!(a.hybrid_layer_pattern.as_deref(), Some("M-M-M--M-*M-M"));
    // Without --mamba-num-heads, MambaMixer's inner width is twice the hidden size: 2048 over
    // the default head dim 64, 32 heads; state 128, 8 groups by default.
    let m = a.mamba.clone().unwrap();
    assert_eq!(
        (m.num_heads, m.head_dim, m.state_dim, m.num_groups),
        (32, 64, 128, 8)
    );
    let assumed: Vec<&str> = c.assumed_defaults.iter().map(|d| d.key.as_str()).collect();
    assert!(assumed.contains(&"mamba_num_heads"), "{assumed:?}");
    // A pattern with layers the model does not price is refused by name.
    let gdn = parse_megatron_args(
        "torchrun pretrain_hybrid.py --hybrid-layer-pattern MGMG --hidden-size 1024 \
         --num-attention-heads 16 --seq-length 4096 --vocab-size 131072 --bf16",
    )
    .unwrap_err()
    .to_string();
    assert!(
        gdn.contains("`G`") && gdn.contains("--hybrid-layer-pattern"),
        "{gdn}"
    );
    // Mamba flags without a pattern build nothing, and the answer says so.
    let plain = parse_megatron_args(
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --vocab-size 32000 \
         --seq-length 4096 --mamba-state-dim 64",
    )
    .unwrap();
    assert!(
        plain
            .ignored_settings
            .iter()
            .any(|i| i.key == "--mamba-state-dim" && i.reason.contains("--hybrid-layer-pattern")),
        "{:?}",
        plain.ignored_settings
    );
}

#[test]
fn expert_biases_follow_megatrons_default_and_the_clamp_its_flag() {
    // Megatron-LM's linear layers carry biases unless --disable-bias-linear: the experts'
    // second bias is then added per local expert in FP32, which the time model prices.
    let biased_line = MIXTRAL_8X7B_LINE.replace("--disable-bias-linear", "")
        + " --activation-func-clamp-value 7.0";
    let cfg = parse_megatron_args(&biased_line).unwrap();
    let a = arch_of(&cfg);
    assert!(a.moe.as_ref().unwrap().expert_bias);
    assert_eq!(a.activation_clamp, Some(7.0));
    let assumed = cfg
        .assumed_defaults
        .iter()
        .find(|d| d.key == "add_bias_linear")
        .expect("the default is stated");
    assert!(
        assumed.why.contains("--disable-bias-linear"),
        "{}",
        assumed.why
    );
    // The line as written turns them off and sets no clamp.
    let plain = arch_of(&parse_megatron_args(MIXTRAL_8X7B_LINE).unwrap());
    assert!(!plain.moe.as_ref().unwrap().expert_bias);
    assert_eq!(plain.activation_clamp, None);
}

#[test]
fn the_data_parallel_bucket_size_is_read_under_both_names() {
    // Megatron-LM's --ddp-bucket-size (parameters per bucket) is modelled, not ignored.
    let c = parse_megatron_args("--ddp-bucket-size 134217728").unwrap();
    assert_eq!(c.ddp_bucket_size, Some(134_217_728));
    // So is --ddp-num-buckets (Megatron-Bridge's Nemotron-H performance recipe sets 48).
    let n = parse_megatron_args("--ddp-num-buckets 48").unwrap();
    assert_eq!(n.ddp_num_buckets, Some(48));
    assert!(!n
        .ignored_settings
        .iter()
        .any(|s| s.key == "--ddp-num-buckets"));
    assert!(!c
        .ignored_settings
        .iter()
        .any(|s| s.key == "--ddp-bucket-size"));
    // A Megatron-Bridge override tree's `ddp.bucket_size` (its GPT-OSS performance recipes
    // set 768M) is the same setting, read, not listed as ignored.
    let bridge =
        moe_skills::inputs::read_value(&serde_json::json!({"ddp": {"bucket_size": 768000000}}))
            .unwrap();
    assert_eq!(bridge.ddp_bucket_size, Some(768_000_000));
    assert!(
        bridge.ignored_settings.is_empty(),
        "{:?}",
        bridge.ignored_settings
    );
}

/// Megatron-LM's functional-test run files share arguments through YAML merge keys
/// (`gpt3_mcore_reruns_resume_check_grads`: `MODEL_ARGS: {<<: *BASE_MODEL_ARGS, …}`): the
/// anchored mapping's flags are read under the ones written beside them, as PyYAML loads them,
/// and the anchor's own section is listed, not read.
#[test]
fn run_files_read_their_merge_keys() {
    let run_file = "BASE_MODEL_ARGS: &BASE_MODEL_ARGS\n  --num-layers: 4\n  --hidden-size: 512\n  \
                    --num-attention-heads: 8\n  --seq-length: 1024\n  --num-experts: 8\n  \
                    --tensor-model-parallel-size: 1\n  --vocab-size: 32000\n  --bf16: true\n\
                    MODEL_ARGS:\n  <<: *BASE_MODEL_ARGS\n  --tensor-model-parallel-size: 2\n";
    let c = moe_skills::inputs::read_config_text(run_file, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.seq_length, Some(1024), "merged from the anchor");
    assert_eq!(
        c.tensor_model_parallel_size,
        Some(2),
        "the key beside the merge wins"
    );
    assert!(c
        .ignored_settings
        .iter()
        .any(|i| i.key == "BASE_MODEL_ARGS"));
    assert!(c.ignored_settings.iter().all(|i| !i.key.contains("<<")));
}

/// Gated DeltaNet from Megatron-LM's flags (`--experimental-attention-variant gdn`, as
/// Megatron-LM's `gpt3_mcore_te_tp2_pp1_gdn` functional test trains it): `--linear-attention-freq
/// N` puts softmax attention on every N-th layer, and the GDN widths Megatron-Core leaves at its
/// defaults are noted. Other variants and a missing pattern are refused, naming the flag.
#[test]
fn gated_deltanet_layers_are_built_from_the_flags() {
    let base = "torchrun pretrain_gpt.py --num-layers 6 --hidden-size 512 \
                --num-attention-heads 8 --group-query-attention --num-query-groups 2 \
                --kv-channels 64 --attention-output-gate --num-experts 32 --moe-router-topk 8 \
                --moe-ffn-hidden-size 64 --swiglu --vocab-size 32000 --bf16 --seq-length 1024";
    let c = parse_megatron_args(&format!(
        "{base} --experimental-attention-variant gdn --linear-attention-freq 3 \
         --linear-key-head-dim 64 --linear-value-head-dim 64 --linear-num-key-heads 4 \
         --linear-num-value-heads 8"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let arch = arch_of(&c);
    let kinds = |a: &Architecture| -> Vec<AttentionKind> {
        (0..a.num_layers)
            .map(|layer| a.attention_kind(layer))
            .collect()
    };
    let linear = kinds(&arch)
        .into_iter()
        .filter(|k| *k == AttentionKind::Linear)
        .count();
    assert_eq!(
        linear, 4,
        "layers 3 and 6 are softmax attention, the rest Gated DeltaNet"
    );
    let gdn = arch
        .linear_attention
        .as_ref()
        .unwrap_or_else(|| panic!("no Gated DeltaNet dims"));
    assert_eq!((gdn.num_key_heads, gdn.num_value_heads), (4, 8));
    assert_eq!((gdn.key_head_dim, gdn.value_head_dim), (64, 64));
    let conv = c
        .assumed_defaults
        .iter()
        .find(|d| d.key == "linear_conv_kernel_dim")
        .unwrap_or_else(|| panic!("{:?}", c.assumed_defaults));
    assert_eq!(conv.value, json!(4));
    // A list pattern: 1 marks Gated DeltaNet, 0 softmax attention.
    let listed = parse_megatron_args(&format!(
        "{base} --experimental-attention-variant gated_delta_net \
         --linear-attention-freq ([0]+[1]*5)"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let listed_kinds = kinds(&arch_of(&listed));
    assert_eq!(listed_kinds[0], AttentionKind::Full);
    assert!(listed_kinds[1..]
        .iter()
        .all(|k| *k == AttentionKind::Linear));
    // Refusals name the flag.
    let dsa = parse_megatron_args(&format!("{base} --experimental-attention-variant dsa"))
        .unwrap_err()
        .to_string();
    assert!(dsa.contains("--experimental-attention-variant"), "{dsa}");
    let no_pattern = parse_megatron_args(&format!("{base} --experimental-attention-variant gdn"))
        .unwrap_err()
        .to_string();
    assert!(
        no_pattern.contains("--linear-attention-freq"),
        "{no_pattern}"
    );
    // Widths without the variant change nothing and say so.
    let stray = parse_megatron_args(&format!("{base} --linear-num-key-heads 4"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(stray
        .ignored_settings
        .iter()
        .any(|i| i.key == "--linear-num-key-heads" && i.reason.contains("gdn")));
}

/// Qwen3-Next-80B-A3B written as Megatron-LM flags: the same FLOPs per token and parameters as
/// its HuggingFace config.json (48 layers, every 4th softmax attention, Gated DeltaNet with 16
/// key and 32 value heads of 128, 512 experts top-10).
#[test]
fn a_gated_deltanet_line_gives_the_flops_of_its_hf_config() {
    let line = "torchrun pretrain_gpt.py --num-layers 48 --hidden-size 2048 \
                --num-attention-heads 16 --group-query-attention --num-query-groups 2 \
                --kv-channels 256 --attention-output-gate --experimental-attention-variant gdn \
                --linear-attention-freq 4 --linear-num-key-heads 16 --linear-num-value-heads 32 \
                --linear-key-head-dim 128 --linear-value-head-dim 128 --linear-conv-kernel-dim 4 \
                --num-experts 512 --moe-router-topk 10 --moe-ffn-hidden-size 512 \
                --moe-shared-expert-intermediate-size 512 --swiglu --disable-bias-linear \
                --untie-embeddings-and-output-weights --padded-vocab-size 151936 --bf16 \
                --seq-length 4096";
    let hf = json!({
        "model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048,
        "intermediate_size": 5120, "num_attention_heads": 16, "num_key_value_heads": 2,
        "head_dim": 256, "full_attention_interval": 4, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
        "vocab_size": 151936, "tie_word_embeddings": false, "hidden_act": "silu"
    });
    let from_flags = arch_of(&parse_megatron_args(line).unwrap_or_else(|e| panic!("{e}")));
    let from_hf = Architecture::from_hf_config(&hf).unwrap_or_else(|e| panic!("{e}"));
    for s in [4096, 131072] {
        let f = |a: &Architecture| model_flops_per_token(a, 0, s).total();
        let (a, b) = (f(&from_flags), f(&from_hf));
        assert!(a > 0.0 && (a - b).abs() <= 1e-9 * b, "seq {s}: {a} vs {b}");
    }
    let params = |a: &Architecture| moe_skills::model::params::total_params(a, 0);
    assert_eq!(params(&from_flags), params(&from_hf));
}

/// A layer count past the architecture limit is refused before any per-layer pattern is built
/// (a `--moe-layer-freq` or `--linear-attention-freq` interval over 10^11 layers would need
/// 800 GB).
#[test]
fn a_huge_layer_count_is_refused_before_its_patterns_are_built() {
    let err = parse_megatron_args(
        "torchrun pretrain_gpt.py --num-layers 100000000000 --hidden-size 512 \
         --num-attention-heads 8 --num-experts 8 --moe-layer-freq 2 --vocab-size 1000 \
         --experimental-attention-variant gdn --linear-attention-freq 4",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("--num-layers") && err.contains("4096"),
        "{err}"
    );
}

#[test]
fn cpu_offloading_num_layers_switches_whole_layer_offloading_on() {
    // Megatron-LM's validate_args: `args.cpu_offloading = True` when the count is above 0.
    let c = parse_megatron_args("--cpu-offloading-num-layers 20").unwrap();
    assert_eq!(c.cpu_offloading, Some(true));
    assert_eq!(c.cpu_offloading_num_layers, Some(20));
    assert_eq!(c.offloaded_layers(), 20);
    let off = parse_megatron_args("--cpu-offloading-num-layers 0").unwrap();
    assert_eq!(off.cpu_offloading, None);
    assert_eq!(off.offloaded_layers(), 0);
}
