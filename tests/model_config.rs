//! Reading training configurations and HuggingFace configs.

mod model_support;

use model_support::arch;
use moe_skills::inputs::parse_megatron_args;
use moe_skills::model::config::{CpCommType, FsdpStrategy};
use moe_skills::model::{
    Architecture, ConfigError, ModelSpec, Precision, RecomputeGranularity, RecomputeModule,
};
use serde_json::json;

#[test]
fn aliases_and_recompute_module_aliases() {
    let c = moe_skills::inputs::read_yaml(
        "model: deepseek-v3\nhardware: h100\ntp: 2\npp: 8\nvpp: 4\ncp: 4\nep: 32\netp: 1\n\
         recompute_granularity: selective\nrecompute_modules: [up_proj, norm, moe]\n\
         precision: fp8-blockwise\ncp_comm_type: a2a+p2p\n",
    )
    .unwrap();
    assert_eq!(c.model, Some(ModelSpec::Id("deepseek-v3".into())));
    assert_eq!(
        (c.tp(), c.pp(), c.vpp(), c.cp(), c.ep(), c.etp()),
        (2, 8, 4, 4, 32, 1)
    );
    assert_eq!(c.precision(), Precision::Fp8Blockwise);
    assert_eq!(c.cp_comm_type, Some(CpCommType::A2aP2p));
    assert_eq!(
        c.recompute_modules(),
        &[
            RecomputeModule::MlaUpProj,
            RecomputeModule::Layernorm,
            RecomputeModule::Moe
        ]
    );
}

#[test]
fn unknown_key_names_closest_valid_key() {
    let err = moe_skills::inputs::read_yaml("tensor_model_paralel_size: 2").unwrap_err();
    match err {
        ConfigError::UnknownKey { key, suggestion } => {
            assert_eq!(key, "tensor_model_paralel_size");
            assert_eq!(suggestion.as_deref(), Some("tensor_model_parallel_size"));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn bad_value_names_the_field() {
    let err = moe_skills::inputs::read_yaml("precision: fp7\ntp: 2").unwrap_err();
    assert!(
        matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "precision"),
        "{err}"
    );
}

#[test]
fn megatron_command_line() {
    let c = parse_megatron_args(
        "torchrun pretrain_gpt.py --tensor-model-parallel-size 2 --seq-length 131072 \\\n \
         --recompute-granularity selective --recompute-modules moe layernorm \
         --optimizer-cpu-offload --use-distributed-optimizer --fp8-format e4m3 --fp8-recipe blockwise \
         --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep \
         --decoder-first-pipeline-num-layers 3 --lr 1e-4 --overlap-grad-reduce \
         --pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2",
    )
    .unwrap();
    assert_eq!(c.tp(), 2);
    assert_eq!((c.pp(), c.vpp()), (4, 2));
    assert_eq!(c.seq_length, Some(131072));
    assert_eq!(
        c.recompute_granularity,
        Some(RecomputeGranularity::Selective)
    );
    assert_eq!(
        c.recompute_modules(),
        &[RecomputeModule::Moe, RecomputeModule::Layernorm]
    );
    assert_eq!(c.optimizer_cpu_offload, Some(true));
    assert_eq!(c.precision(), Precision::Fp8Blockwise);
    assert_eq!(c.num_layers_in_first_pipeline_stage, Some(3));
    assert_eq!(c.overlap_grad_reduce, Some(true));
    let ignored: Vec<&str> = c.ignored_settings.iter().map(|i| i.key.as_str()).collect();
    assert!(ignored.iter().any(|k| k.starts_with("--lr")), "{ignored:?}");
    assert!(ignored.contains(&"torchrun"), "{ignored:?}");
    assert!(c.ignored_settings.iter().all(|i| !i.reason.is_empty()));
}

#[test]
fn bridge_nested_override_file() {
    let c = moe_skills::inputs::read_yaml(
        "model:\n  tensor_model_parallel_size: 4\n  context_parallel_size: 8\n  seq_length: 131072\n  num_layers: 94\n\
         train:\n  global_batch_size: 64\n  micro_batch_size: 1\n  train_iters: 100\n\
         ddp:\n  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: optim_grads_params\n\
         mixed_precision: bf16_with_mxfp8_mixed\n",
    )
    .unwrap();
    assert_eq!(c.tp(), 4);
    assert_eq!(c.cp(), 8);
    assert_eq!(c.global_batch_size, Some(64));
    assert_eq!(c.fsdp_strategy(), Some(FsdpStrategy::OptimGradsParams));
    assert_eq!(c.precision(), Precision::Mxfp8);
    let ignored: Vec<&str> = c.ignored_settings.iter().map(|i| i.key.as_str()).collect();
    assert!(ignored.contains(&"train.train_iters"), "{ignored:?}");
    assert!(ignored.contains(&"model.num_layers"), "{ignored:?}");
}

// Bridge v0.6.0's performance recipes set `fp8_param` and `fp8_param_gather` together and
// NVFP4 recipes set `fp4_param` (perf_recipes/deepseek/h100/deepseek_v3.py, common.py).
#[test]
fn bridge_mixed_precision_fields_for_fp8_and_fp4_weights_read() {
    let c = moe_skills::inputs::read_yaml(
        "mixed_precision:\n  fp8_recipe: blockwise\n  fp8_param: true\n  fp8_param_gather: true\n  fp4_param: false\n",
    )
    .unwrap();
    assert_eq!(c.fp8_param_gather, Some(true));
    assert_eq!(
        c.fp4_param_gather,
        Some(false),
        "fp4_param is its own field, not a typo of fp8_param"
    );
    assert_eq!(c.precision(), Precision::Fp8Blockwise);
    // An NVFP4 recipe that keeps its weights in NVFP4 (`bf16_with_nvfp4_mixed` from Bridge
    // v0.4.2 sets fp4_param and fp4_param_gather) stores 4 bits and an FP8 scale per 16.
    let nvfp4 = moe_skills::inputs::read_yaml(
        "mixed_precision:\n  fp4: nvfp4\n  fp4_recipe: nvfp4\n  fp4_param: true\n  fp4_param_gather: true\n",
    )
    .unwrap();
    assert_eq!(nvfp4.precision(), Precision::Nvfp4);
    assert_eq!(nvfp4.weight_bytes(), 0.5625);
    // A real typo still gets the suggestion.
    let err = moe_skills::inputs::read_yaml("mixed_precision:\n  fp8_parm: true\n").unwrap_err();
    assert!(err.to_string().contains("fp8_param"), "{err}");
}

// Megatron-Bridge's Qwen3-30B H100 recipe (recipes/qwen/h100/qwen3_moe.py, 3a9559f0) sets
// `cfg.model.moe_a2a_overlap = False`, which nothing reads, and its performance recipe then
// turns `cfg.comm_overlap.overlap_moe_expert_parallel_comm` on: the run overlapped.
#[test]
fn a_models_moe_a2a_overlap_attribute_does_not_override_the_comm_overlap_setting() {
    for text in [
        "model:\n  expert_model_parallel_size: 8\n  moe_a2a_overlap: false\ncomm_overlap:\n  overlap_moe_expert_parallel_comm: true\n",
        "comm_overlap:\n  overlap_moe_expert_parallel_comm: true\nmodel:\n  moe_a2a_overlap: false\n  expert_model_parallel_size: 8\n",
    ] {
        let c = moe_skills::inputs::read_yaml(text).unwrap();
        assert_eq!(c.overlap_moe_expert_parallel_comm, Some(true), "{text}");
        let ignored = c
            .ignored_settings
            .iter()
            .find(|i| i.key == "model.moe_a2a_overlap")
            .expect("the dead attribute is named");
        assert!(
            ignored.reason.contains("comm_overlap.overlap_moe_expert_parallel_comm"),
            "{}",
            ignored.reason
        );
    }
    // The launcher's own flat name still sets the field.
    let c = moe_skills::inputs::read_yaml("moe_a2a_overlap: true\n").unwrap();
    assert_eq!(c.overlap_moe_expert_parallel_comm, Some(true));
}

#[test]
fn hf_config_is_kept_as_model_object() {
    let c = moe_skills::inputs::read_value(&json!({
        "model": {"num_hidden_layers": 2, "hidden_size": 64, "architectures": ["X"]},
        "tp": 1
    }))
    .unwrap();
    assert!(matches!(c.model, Some(ModelSpec::HfConfig(_))));
}

#[test]
fn hf_deepseek_v3_maps_to_the_card() {
    let hf = json!({
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "num_hidden_layers": 61, "hidden_size": 7168, "vocab_size": 129280,
        "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
        "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "num_nextn_predict_layers": 1, "tie_word_embeddings": false, "hidden_act": "silu",
        "n_group": 8, "topk_group": 4
    });
    let a = Architecture::from_hf_config(&hf).unwrap();
    let card = arch("deepseek-v3");
    assert_eq!(a.mla, card.mla);
    assert_eq!(a.moe, card.moe);
    assert_eq!(a.mtp_num_layers, 1);
    let f = |x: &Architecture| moe_skills::model::flops::model_flops_per_token(x, 1, 4096).total();
    assert!((f(&a) - f(&card)).abs() < 1.0);
}

#[test]
fn hf_group_limited_routing_needs_both_fields_and_one_group_limits_nothing() {
    let with = |extra: serde_json::Value| {
        let mut hf = json!({
            "model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 1024,
            "vocab_size": 32000, "num_attention_heads": 8, "intermediate_size": 4096,
            "moe_intermediate_size": 512, "n_routed_experts": 64, "num_experts_per_tok": 6
        });
        if let (Some(o), Some(e)) = (hf.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        Architecture::from_hf_config(&hf)
    };
    let groups = |extra| with(extra).unwrap().moe.unwrap().router_groups;
    // One group is no limit: what Megatron-Bridge writes for "not set" (deepseek_v3_bridge.py).
    assert_eq!(groups(json!({"n_group": 1, "topk_group": 1})), None);
    assert_eq!(groups(json!({})), None);
    let g = groups(json!({"n_group": 8, "topk_group": 3})).unwrap();
    assert_eq!((g.num_groups, g.group_topk), (8, 3));
    // A group count without how many groups a token may use is not dropped silently.
    let err = with(json!({"n_group": 8})).unwrap_err().to_string();
    assert!(err.contains("topk_group"), "{err}");
    // Groups must split the experts evenly.
    let err = with(json!({"n_group": 7, "topk_group": 3}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("router_groups"), "{err}");
}

#[test]
fn hf_gpt_oss_maps_its_expert_biases_and_clamp_to_the_card() {
    // openai/gpt-oss-120b config.json (the keys the mapping reads).
    let layer_types: Vec<&str> = (0..36)
        .map(|i| {
            if i % 2 == 0 {
                "sliding_attention"
            } else {
                "full_attention"
            }
        })
        .collect();
    let hf = json!({
        "model_type": "gpt_oss", "num_hidden_layers": 36, "hidden_size": 2880,
        "vocab_size": 201088, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
        "num_experts_per_tok": 4, "sliding_window": 128, "layer_types": layer_types,
        "swiglu_limit": 7.0, "hidden_act": "silu", "tie_word_embeddings": false
    });
    let a = Architecture::from_hf_config(&hf).unwrap();
    let card = arch("gpt-oss-120b");
    assert_eq!(a.activation_clamp, Some(7.0));
    assert_eq!(a.activation_clamp, card.activation_clamp);
    assert!(a.moe.as_ref().unwrap().expert_bias);
    assert_eq!(a.moe, card.moe);
    // Another family has neither.
    let dsv3 = arch("deepseek-v3");
    assert_eq!(dsv3.activation_clamp, None);
    assert!(!dsv3.moe.unwrap().expert_bias);
}

#[test]
fn hf_qwen35_nested_text_config_with_layer_types() {
    let mut types = Vec::new();
    for i in 0..40 {
        types.push(if i % 4 == 3 {
            "full_attention"
        } else {
            "linear_attention"
        });
    }
    let hf = json!({
        "model_type": "qwen3_5_moe",
        "text_config": {
            "num_hidden_layers": 40, "hidden_size": 2048, "vocab_size": 248320,
            "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
            "moe_intermediate_size": 512, "num_experts": 256, "num_experts_per_tok": 8,
            "shared_expert_intermediate_size": 512, "layer_types": types,
            "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "attn_output_gate": true
        }
    });
    let a = Architecture::from_hf_config(&hf).unwrap();
    let card = arch("qwen3.5-35b-a3b");
    assert_eq!(a.count_kinds(0, 40), card.count_kinds(0, 40));
    let f =
        |x: &Architecture| moe_skills::model::flops::model_flops_per_token(x, 0, 131072).total();
    assert!((f(&a) / f(&card) - 1.0).abs() < 1e-12);
}

#[test]
fn hf_missing_field_is_named() {
    let err = Architecture::from_hf_config(&json!({"hidden_size": 8})).unwrap_err();
    assert!(err.to_string().contains("num_hidden_layers"), "{err}");
}

#[test]
fn all_cards_validate() {
    for id in model_support::MODEL_IDS {
        arch(id).validate().unwrap();
    }
    for id in model_support::HARDWARE_IDS {
        let h = model_support::hw(id);
        assert!(
            h.memory_gib_usable > 0.0 && h.memory_gb_nominal > 0.0,
            "{id}"
        );
        assert!(h.peak_tflops.fp8 >= 2.0 * h.peak_tflops.bf16 * 0.99, "{id}");
        assert!(
            h.efficiency.gemm_bf16 <= 1.0 && h.efficiency.gemm_fp8 <= 1.0,
            "{id}"
        );
    }
}

#[test]
fn a_typo_inside_a_bridge_section_is_an_error_naming_the_field() {
    let err =
        moe_skills::inputs::read_yaml("model:\n  context_paralel_size: 4\n  num_layers: 61\n")
            .unwrap_err()
            .to_string();
    assert!(err.contains("model.context_paralel_size"), "{err}");
    assert!(err.contains("model.context_parallel_size"), "{err}");
}

#[test]
fn bridge_performance_launcher_names_are_aliases() {
    let c = moe_skills::inputs::read_yaml(
        "moe_a2a_overlap: true\ncompute_dtype: fp8_mx\npp_layout: \"Et|(tt|)*30mL\"\n",
    )
    .unwrap();
    assert_eq!(c.overlap_moe_expert_parallel_comm, Some(true));
    assert_eq!(c.precision(), Precision::Mxfp8);
    assert_eq!(
        c.pipeline_model_parallel_layout.as_deref(),
        Some("Et|(tt|)*30mL")
    );
}

#[test]
fn bridge_perf_config_fields_are_read_or_noted() {
    let config = moe_skills::inputs::read_value(&serde_json::json!({
        "tensor_model_parallel_size": 2,
        "pp_layout": "Et|(tt|)*30mL",
        "nccl_ub": true,
        "fine_grained_activation_offloading": true,
        "offload_modules": ["expert_fc1"]
    }))
    .unwrap();
    assert_eq!(config.tp(), 2);
    let keys: Vec<&str> = config
        .ignored_settings
        .iter()
        .map(|i| i.key.as_str())
        .collect();
    assert!(
        keys.contains(&"nccl_ub") && keys.contains(&"fine_grained_activation_offloading"),
        "{keys:?}"
    );
}

/// Megatron-Core's list form of the layer layout (one list of layer types per virtual stage)
/// reads as its string form; a layer type the layout does not model names itself.
#[test]
fn a_list_layout_reads_as_the_layout_string() {
    let c = moe_skills::inputs::read_yaml(
        "pipeline_model_parallel_layout: [[embedding, decoder, decoder], [Decoder, LayerType.decoder], [decoder, mtp, loss]]",
    )
    .expect("list layout");
    assert_eq!(
        c.pipeline_model_parallel_layout.as_deref(),
        Some("Ett|tt|tmL")
    );
    let err =
        moe_skills::inputs::read_yaml("pipeline_model_parallel_layout: [[embedding, encoder]]")
            .unwrap_err();
    assert!(err.to_string().contains("encoder"), "{err}");
    let err = moe_skills::inputs::read_yaml("pipeline_model_parallel_layout: 1").unwrap_err();
    assert!(
        err.to_string().contains("pipeline_model_parallel_layout"),
        "{err}"
    );
}

/// Megatron-Bridge's packing switches (`dataset.enable_offline_packing`, in-batch packing, the
/// older `packed_sequence_specs` whose default size of -1 does not pack) set `sequence_packing`
/// instead of being listed as unused, and one switch on is packing whatever the others say.
#[test]
fn bridge_packing_switches_set_sequence_packing() {
    let read = |dataset: &str| {
        moe_skills::inputs::read_yaml(&format!("model:\n  seq_length: 32768\ndataset:\n{dataset}"))
            .unwrap()
    };
    let offline = read(
        "  enable_offline_packing: true\n  offline_packing_specs: {packed_sequence_size: 32768}\n",
    );
    assert_eq!(offline.sequence_packing, Some(true));
    assert!(
        offline
            .ignored_settings
            .iter()
            .all(|i| i.key != "dataset.enable_offline_packing"),
        "{:?}",
        offline.ignored_settings
    );
    assert_eq!(
        read("  enable_in_batch_packing: true\n").sequence_packing,
        Some(true)
    );
    assert_eq!(
        read("  enable_offline_packing: false\n").sequence_packing,
        Some(false)
    );
    assert_eq!(
        read("  packed_sequence_specs: {packed_sequence_size: 8192}\n").sequence_packing,
        Some(true)
    );
    assert_eq!(
        read("  packed_sequence_specs: {packed_sequence_size: -1}\n").sequence_packing,
        Some(false)
    );
    assert_eq!(
        read("  enable_in_batch_packing: true\n  enable_offline_packing: false\n").sequence_packing,
        Some(true)
    );
    assert_eq!(read("  seq_length: 32768\n").sequence_packing, None);
}
