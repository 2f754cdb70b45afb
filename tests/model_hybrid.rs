//! Hybrid Mamba-2 models (Nemotron-H, Nemotron 3): the layer pattern, the Mamba-2 mixer's
//! parameters, FLOPs, saved activations and scan time, and the readers that build them from a
//! HuggingFace config or a Megatron-LM command line.

mod model_support;

use model_support::{arch, cfg, constants, constants_with_bands, hw};
use moe_skills::model::arch::{layer_kind_index, AttentionKind, FfnKind};
use moe_skills::model::flops::{
    model_flops_per_token, model_flops_per_token_counted, CountingRules,
};
use moe_skills::model::{evaluate, Architecture, Estimate, Hardware};

const NANO: &str = "nemotron-3-nano-30b-a3b";

fn nano_gb300(extra: &str) -> Estimate {
    nano_on(&hw("gb300"), extra, &constants())
}

/// Nemotron 3 Nano as Megatron-Bridge's GB300 performance config runs it, on `hardware`.
fn nano_on(hardware: &Hardware, extra: &str, k: &moe_skills::model::CostConstants) -> Estimate {
    evaluate(
        &arch(NANO),
        hardware,
        k,
        &cfg(&format!(
            "{{num_gpus: 8, seq_length: 8192, micro_batch_size: 4, global_batch_size: 512,
              tp: 1, ep: 8, precision: mxfp8, fp8_param: true,
              moe_token_dispatcher_type: flex, moe_flex_dispatcher_backend: hybridep,
              moe_router_force_load_balancing: true{extra}}}"
        )),
    )
}

#[test]
fn the_pattern_gives_each_layer_one_block() {
    let a = arch(NANO);
    let counts = a.count_kinds(0, a.num_layers);
    assert_eq!(
        counts[layer_kind_index(AttentionKind::Mamba, FfnKind::Absent)],
        23
    );
    assert_eq!(
        counts[layer_kind_index(AttentionKind::Absent, FfnKind::Moe)],
        23
    );
    assert_eq!(
        counts[layer_kind_index(AttentionKind::Full, FfnKind::Absent)],
        6
    );
    assert_eq!(counts.iter().sum::<u32>(), 52);
    // A stage holds the symbols of its layers: the first four are M E M E.
    let first = a.count_kinds(0, 4);
    assert_eq!(
        first[layer_kind_index(AttentionKind::Mamba, FfnKind::Absent)],
        2
    );
    assert_eq!(
        first[layer_kind_index(AttentionKind::Absent, FfnKind::Moe)],
        2
    );
    assert!(a.has_softmax_attention());
    assert!(!a.has_dense_mlp_layers());
}

#[test]
fn parameters_match_a_hand_count_of_the_mixers_and_blocks() {
    // in_proj 2688 → 2·4096 + 2·8·128 + 64 = 10304, conv (4 + bias) over 4096 + 2048 channels,
    // A_log, D and dt_bias per head, the gated norm over 4096, out_proj 4096 → 2688, the fused
    // input norm; attention 32 heads of 128, 2 KV groups; MoE: 128 two-matrix experts of 1856,
    // a 3712 shared expert, the router, the shared expert's gate and the pre-MLP norm.
    let h = 2688.0_f64;
    let mamba = h * 10304.0 + 5.0 * 6144.0 + 3.0 * 64.0 + 4096.0 + 4096.0 * h + h;
    let attention = h * (32.0 * 128.0 + 2.0 * 2.0 * 128.0) + 32.0 * 128.0 * h + h;
    let moe = 2.0 * h * 1856.0 * 128.0 + 2.0 * h * 3712.0 + h * 128.0 + h + h;
    let embeddings = 2.0 * 131072.0 * h;
    let expected = 23.0 * mamba + 6.0 * attention + 23.0 * moe + embeddings + h;
    let counted = moe_skills::model::params::total_params(&arch(NANO), 0);
    assert!(
        (counted - expected).abs() < 1.0,
        "{counted} against {expected}"
    );
    // 31.58 billion, what the model's name and Megatron-Bridge's export say (the router's
    // expert bias, 23 × 128, aside).
    assert!((counted / 1e9 - 31.58).abs() < 0.01, "{counted}");
}

#[test]
fn flops_count_the_mixer_as_megatron_does_and_bridges_count_takes_twice_the_hidden() {
    let a = arch(NANO);
    let f = model_flops_per_token(&a, 0, 8192);
    // Forward per token of one Mamba layer: in_proj 2·h·10304, scan 7·4096·128, out_proj
    // 2·4096·h; forward and backward three times that.
    let h = 2688.0_f64;
    let mamba_layer = 3.0 * (2.0 * h * 10304.0 + 7.0 * 4096.0 * 128.0 + 2.0 * 4096.0 * h);
    let mamba_kind = layer_kind_index(AttentionKind::Mamba, FfnKind::Absent);
    let table = moe_skills::model::flops::kind_table(&a, 8192);
    assert!((table[mamba_kind].total() - mamba_layer).abs() < 1.0);
    // Megatron's counter (`hybrid_flops`, d_in = 2·h = 5376): in_proj 2·h·(2·5376 + 2·8·128 +
    // 64), scan 7·5376·128, out_proj 2·5376·h.
    let counted_layer =
        3.0 * (2.0 * h * (2.0 * 5376.0 + 2048.0 + 64.0) + 7.0 * 5376.0 * 128.0 + 2.0 * 5376.0 * h);
    let rules = CountingRules {
        mamba_inner_as_twice_hidden: true,
        ..CountingRules::default()
    };
    let counted = model_flops_per_token_counted(&a, 0, 8192, rules);
    let expected = f.total() + 23.0 * (counted_layer - mamba_layer);
    assert!(
        (counted - expected).abs() < 1.0,
        "{counted} against {expected}"
    );
    // Megatron-Bridge's 26.08 row: 901 TFLOP/s at 39936 tokens/s/GPU, 22.56 GFLOP per token in
    // its count; its tables round both, and its other releases imply 22.1 to 22.3.
    assert!((counted / 1e9 - 22.3).abs() < 0.3, "{}", counted / 1e9);
}

#[test]
fn a_mamba_layer_keeps_its_projection_output_scan_output_and_norm() {
    use moe_skills::model::activations::{layer_activation, ActivationOptions};
    let a = arch(NANO);
    let c = cfg("{num_gpus: 8, seq_length: 8192}");
    let o = ActivationOptions::from_config(&c, 1, 1, false);
    let kind = layer_kind_index(AttentionKind::Mamba, FfnKind::Absent);
    let p = layer_activation(&a, kind, &o);
    // Layer input and the fused norm's output (2 × h, BF16), then the in_proj output (10304),
    // the scan's output and the gated output (2 × 4096), an fp32 rstd per group (8) and the
    // normed out_proj input (4096), BF16 per token.
    let h = 2688.0;
    let expected = 2.0 * 2.0 * h + 2.0 * 10304.0 + 2.0 * 2.0 * 4096.0 + 4.0 * 8.0 + 2.0 * 4096.0;
    assert!(
        (p.total() - expected).abs() < 1e-9,
        "{} against {expected}",
        p.total()
    );
    // A MoE-only layer keeps no attention residual: its input is the pre-MLP norm's input.
    let moe = layer_activation(
        &a,
        layer_kind_index(AttentionKind::Absent, FfnKind::Moe),
        &o,
    );
    assert_eq!(moe.attention, 0.0);
    assert_eq!(moe.layer_input, 2.0 * h);
}

#[test]
fn the_scan_is_priced_from_the_cards_kernel_table() {
    let with_table = nano_gb300("");
    let mut bare = hw("gb300");
    bare.mamba_scan_kernel = None;
    let without = nano_on(&bare, "", &constants());
    // 23 layers × 16 microbatches × 8192·4 tokens × 64 heads at 0.89 ns, times 1 + 2.76 for the
    // backward: 2.58 s of scan the Megatron-counted FLOPs at the fused-attention efficiency
    // would price at a twentieth of that.
    let scan = 23.0 * 16.0 * 32768.0 * 64.0 * 0.89e-9 * 3.76;
    let added =
        with_table.performance.breakdown_s.attention - without.performance.breakdown_s.attention;
    assert!(added > 0.9 * scan && added < scan, "{added} against {scan}");
    // Megatron-Bridge's 26.08 measurement, 39936 tokens/s/GPU, lies within 10% of the
    // prediction with the table, not without it.
    let measured = 39936.0;
    let error = |e: &Estimate| e.performance.tokens_per_second_per_gpu / measured - 1.0;
    assert!(error(&with_table).abs() < 0.10, "{}", error(&with_table));
    assert!(error(&without) > 0.10, "{}", error(&without));
}

#[test]
fn an_answer_for_a_mamba_model_quotes_the_hybrid_runs_beside_its_band() {
    let e = nano_on(&hw("gb300"), "", &constants_with_bands());
    let u = e
        .performance
        .uncertainty
        .as_ref()
        .unwrap_or_else(|| panic!("a band"));
    let condition = u
        .condition
        .as_ref()
        .unwrap_or_else(|| panic!("the hybrid runs' condition"));
    assert_eq!(
        condition.condition,
        moe_skills::model::uncertainty::RunCondition::MambaHybrid
    );
    assert!(condition.rows >= 5, "{condition:?}");
}

#[test]
fn core_attention_recompute_does_not_repeat_the_mamba_scan() {
    let plain = nano_gb300("");
    let recomputed =
        nano_gb300(", recompute_granularity: selective, recompute_modules: [core_attn]");
    let added =
        recomputed.performance.breakdown_s.recompute - plain.performance.breakdown_s.recompute;
    // Six attention layers' forward, far less than the 23 Mamba layers' scan forward.
    let scan_forward = 23.0 * 16.0 * 32768.0 * 64.0 * 0.89e-9;
    assert!(added > 0.0 && added < 0.5 * scan_forward, "{added}");
}

fn nemotron_h_config() -> serde_json::Value {
    serde_json::json!({
        "model_type": "nemotron_h",
        "architectures": ["NemotronHForCausalLM"],
        "num_hidden_layers": 52,
        "hidden_size": 2688,
        "vocab_size": 131072,
        "tie_word_embeddings": false,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "intermediate_size": 1856,
        "mlp_hidden_act": "relu2",
        "mamba_hidden_act": "silu",
        "mamba_num_heads": 64,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
        "n_routed_experts": 128,
        "num_experts_per_tok": 6,
        "moe_intermediate_size": 1856,
        "moe_shared_expert_intermediate_size": 3712,
        "n_group": 1,
        "topk_group": 1
    })
}

/// The fields that decide the cost, without the card's names and sources.
fn shape(a: &Architecture) -> Architecture {
    Architecture {
        id: String::new(),
        family: String::new(),
        display_name: String::new(),
        source: String::new(),
        aliases: Vec::new(),
        ..a.clone()
    }
}

#[test]
fn a_nemotron_h_config_json_builds_the_cards_architecture() {
    let from_hf = Architecture::from_hf_config(&nemotron_h_config()).unwrap();
    assert_eq!(shape(&from_hf), shape(&arch(NANO)));
}

#[test]
fn the_pattern_and_the_mixer_dims_are_checked() {
    let with = |key: &str, value: serde_json::Value| {
        let mut c = nemotron_h_config();
        c[key] = value;
        Architecture::from_hf_config(&c)
    };
    let short = with("num_hidden_layers", 51.into())
        .unwrap_err()
        .to_string();
    assert!(short.contains("51 layers"), "{short}");
    let gdn = with("hybrid_override_pattern", "G".repeat(52).into())
        .unwrap_err()
        .to_string();
    assert!(gdn.contains("hybrid_layer_pattern[0]"), "{gdn}");
    let mut c = nemotron_h_config();
    c.as_object_mut().map(|o| o.remove("mamba_num_heads"));
    let err = Architecture::from_hf_config(&c).unwrap_err().to_string();
    assert!(err.contains("mamba"), "{err}");
    let groups = with("n_groups", 7.into()).unwrap_err().to_string();
    assert!(groups.contains("mamba.num_groups"), "{groups}");
}

const NANO_LINE: &str =
    "--hybrid-override-pattern MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME \
    --hidden-size 2688 --num-attention-heads 32 --group-query-attention --num-query-groups 2 \
    --kv-channels 128 --ffn-hidden-size 1856 --squared-relu --mamba-num-heads 64 \
    --mamba-head-dim 64 --mamba-state-dim 128 --mamba-num-groups 8 --num-experts 128 \
    --moe-router-topk 6 --moe-ffn-hidden-size 1856 --moe-shared-expert-intermediate-size 3712 \
    --vocab-size 131072 --untie-embeddings-and-output-weights --seq-length 8192";

#[test]
fn a_megatron_lm_hybrid_line_builds_the_cards_architecture() {
    let c = moe_skills::inputs::parse_megatron_args(NANO_LINE).unwrap();
    let Some(moe_skills::model::config::ModelSpec::HfConfig(model)) = c.model.clone() else {
        panic!("a model from the line: {:?}", c.model)
    };
    let a = Architecture::from_hf_config(&model).unwrap();
    assert_eq!(a.hybrid_layer_pattern, arch(NANO).hybrid_layer_pattern);
    assert_eq!(a.mamba, arch(NANO).mamba);
    assert_eq!(a.num_layers, 52);
    assert_eq!(
        moe_skills::model::params::total_params(&a, 0),
        moe_skills::model::params::total_params(&arch(NANO), 0)
    );
}

#[test]
fn a_megatron_lm_line_with_unpriced_hybrid_layers_is_refused() {
    for (pattern, says) in [("M*M*/*-", "multi-token"), ("MGMG", "`G`")] {
        let line = format!(
            "--hybrid-layer-pattern {pattern} --hidden-size 1024 --num-attention-heads 8 \
             --vocab-size 32000 --seq-length 4096"
        );
        let err = moe_skills::inputs::parse_megatron_args(&line)
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{pattern}: {err}");
    }
}

#[test]
fn mamba_heads_and_groups_bound_tp_and_cp() {
    let run = |extra: &str| {
        evaluate(
            &arch(NANO),
            &hw("h100"),
            &constants(),
            &cfg(&format!(
                "{{num_gpus: 64, seq_length: 65536, micro_batch_size: 1, global_batch_size: 64,
                  ep: 8{extra}}}"
            )),
        )
    };
    let rules = |e: &Estimate| {
        e.violations
            .iter()
            .map(|v| v.code.clone())
            .collect::<Vec<_>>()
    };
    // 8 groups: TP 16 cannot split them (MambaMixer's assert), TP 2 can.
    assert!(rules(&run(", tp: 16, sequence_parallel: true"))
        .contains(&"mamba_heads_not_divisible_by_tp".to_string()));
    assert!(!rules(&run(", tp: 2, sequence_parallel: true"))
        .contains(&"mamba_heads_not_divisible_by_tp".to_string()));
    // 64 heads over CP 8: 8 each; CP 64 would leave one head per rank and fewer groups than
    // the CP ranks divide (8 groups, 64 ranks: repeated 8 times), which MambaContextParallel
    // accepts; 3 does not divide 64.
    assert!(!rules(&run(", cp: 8")).contains(&"cp_exceeds_heads".to_string()));
    let odd = evaluate(
        &arch(NANO),
        &hw("h100"),
        &constants(),
        &cfg(
            "{num_gpus: 24, seq_length: 49152, micro_batch_size: 1, global_batch_size: 8,
               ep: 8, cp: 3}",
        ),
    );
    assert!(
        rules(&odd).contains(&"cp_exceeds_heads".to_string()),
        "{:?}",
        rules(&odd)
    );
}

#[test]
fn latent_moe_is_refused_and_hybrid_mtp_is_said_to_be_approximate() {
    let mut c = nemotron_h_config();
    c["moe_latent_size"] = 1024.into();
    let err = Architecture::from_hf_config(&c).unwrap_err().to_string();
    assert!(err.contains("latent MoE"), "{err}");
    let plain = nano_gb300("");
    let said = |e: &Estimate| e.warnings.iter().any(|w| w.contains("MTP layer"));
    assert!(!said(&plain));
    assert!(said(&nano_gb300(", mtp_num_layers: 1")));
}
