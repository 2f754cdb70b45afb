//! One test per rule: a configuration that breaks it and a close one that does not.

use serde_json::{json, Value};

use super::*;

fn cfg(v: Value) -> TrainingConfig {
    TrainingConfig::from_fields(&v).expect("test configuration parses")
}

/// A 48-layer MoE model without MLA or Gated DeltaNet.
fn input(c: &TrainingConfig) -> RuleInput<'_> {
    RuleInput {
        cfg: c,
        num_layers: 48,
        is_moe: true,
        has_mla: false,
        has_gated_deltanet: false,
        has_shared_experts: true,
        mtp_layers: c.mtp_num_layers.unwrap_or(0),
        vpp: c.vpp(),
        dispatcher: c.dispatcher(ResolvedDispatcher::Alltoall),
        stages: &[],
    }
}

fn findings(v: Value) -> Vec<Finding> {
    let c = cfg(v);
    check(&input(&c))
}

fn fires(code: &str, v: Value) -> Finding {
    let all = findings(v.clone());
    all.iter()
        .find(|f| f.code == code)
        .cloned()
        .unwrap_or_else(|| panic!("{code} did not fire for {v}; got {all:?}"))
}

fn quiet(code: &str, v: Value) {
    let all = findings(v.clone());
    assert!(
        all.iter().all(|f| f.code != code),
        "{code} fired for {v}: {all:?}"
    );
}

#[test]
fn every_rule_cites_megatron_and_has_a_unique_code() {
    let mut codes: Vec<&str> = RULES.iter().map(|r| r.code).collect();
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(codes.len(), RULES.len());
    assert!(RULES
        .iter()
        .all(|r| r.source.starts_with("megatron/") && r.source.contains(".py:")));
}

#[test]
fn moe_tp_without_sequence_parallel() {
    let f = fires(
        "moe_tp_without_sequence_parallel",
        json!({"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8, "sequence_parallel": false}),
    );
    assert_eq!(f.outcome, Outcome::Violation);
    assert!(f.fix.contains("sequence_parallel: true"));
    quiet(
        "moe_tp_without_sequence_parallel",
        json!({"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8}),
    );
}

#[test]
fn moe_tp_without_sequence_parallel_ep1() {
    let f = fires(
        "moe_tp_without_sequence_parallel_ep1",
        json!({"tensor_model_parallel_size": 4, "sequence_parallel": false}),
    );
    assert_eq!(f.outcome, Outcome::Warning);
    quiet(
        "moe_tp_without_sequence_parallel_ep1",
        json!({"tensor_model_parallel_size": 4, "sequence_parallel": true}),
    );
}

#[test]
fn sequence_parallel_without_tp() {
    fires(
        "sequence_parallel_without_tp",
        json!({"sequence_parallel": true}),
    );
    quiet(
        "sequence_parallel_without_tp",
        json!({"sequence_parallel": true, "tensor_model_parallel_size": 2}),
    );
}

#[test]
fn tp_comm_overlap_without_sequence_parallel() {
    let f = fires(
        "tp_comm_overlap_without_sequence_parallel",
        json!({"tp_comm_overlap": true}),
    );
    assert!(f.fix.contains("TP=1"));
    quiet(
        "tp_comm_overlap_without_sequence_parallel",
        json!({"tp_comm_overlap": true, "tensor_model_parallel_size": 2}),
    );
}

#[test]
fn recompute_modules_ignored() {
    let f = fires(
        "recompute_modules_ignored",
        json!({"recompute_granularity": "full", "recompute_method": "uniform",
               "recompute_num_layers": 1, "recompute_modules": ["moe_act", "layernorm"]}),
    );
    assert!(f.message.contains("moe_act, layernorm"));
    assert!(f.fix.contains("selective"));
    fires(
        "recompute_modules_ignored",
        json!({"recompute_modules": ["core_attn"]}),
    );
    quiet(
        "recompute_modules_ignored",
        json!({"recompute_granularity": "selective", "recompute_modules": ["moe_act"]}),
    );
}

#[test]
fn recompute_method_with_selective() {
    let f = fires(
        "recompute_method_with_selective",
        json!({"recompute_granularity": "selective", "recompute_method": "block"}),
    );
    assert_eq!(f.outcome, Outcome::Warning);
    quiet(
        "recompute_method_with_selective",
        json!({"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 2}),
    );
}

#[test]
fn recompute_num_layers_with_selective() {
    fires(
        "recompute_num_layers_with_selective",
        json!({"recompute_granularity": "selective", "recompute_num_layers": 2}),
    );
    quiet(
        "recompute_num_layers_with_selective",
        json!({"recompute_granularity": "selective"}),
    );
}

#[test]
fn full_recompute_without_method() {
    let f = fires(
        "full_recompute_without_method",
        json!({"recompute_granularity": "full"}),
    );
    assert_eq!(f.outcome, Outcome::Warning);
    assert!(f.fix.contains("recompute_method: uniform"));
    quiet(
        "full_recompute_without_method",
        json!({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}),
    );
}

#[test]
fn recompute_module_not_in_model() {
    let v = json!({"recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"]});
    fires("recompute_module_not_in_model", v.clone());
    let c = cfg(v);
    let mla = RuleInput {
        has_mla: true,
        ..input(&c)
    };
    assert!(check(&mla)
        .iter()
        .all(|f| f.code != "recompute_module_not_in_model"));
    fires(
        "recompute_module_not_in_model",
        json!({"recompute_granularity": "selective", "recompute_modules": ["gdn_norm_out"]}),
    );
}

#[test]
fn fp8_delayed_recompute() {
    let f = fires(
        "fp8_delayed_recompute",
        json!({"precision": "fp8-delayed", "recompute_granularity": "selective",
               "recompute_modules": ["moe_act"]}),
    );
    assert!(f.message.contains("moe_act"));
    quiet(
        "fp8_delayed_recompute",
        json!({"precision": "fp8-tensorwise", "recompute_granularity": "selective",
               "recompute_modules": ["moe_act"]}),
    );
}

#[test]
fn fp8_attention_without_effect() {
    let f = fires(
        "fp8_attention_without_effect",
        json!({"precision": "fp8-blockwise", "fp8_dot_product_attention": true}),
    );
    assert!(f.message.contains("BF16"), "{}", f.message);
    for quiet_precision in ["fp8-delayed", "fp8-tensorwise", "mxfp8", "nvfp4"] {
        quiet(
            "fp8_attention_without_effect",
            json!({"precision": quiet_precision, "fp8_dot_product_attention": true}),
        );
    }
    quiet(
        "fp8_attention_without_effect",
        json!({"precision": "fp8-blockwise"}),
    );
}

#[test]
fn attention_env_conflicts_with_backend() {
    // `auto` (the default) requires every switch the environment sets to be 1.
    let f = fires(
        "attention_env_conflicts_with_backend",
        json!({"attention_env": {"NVTE_FUSED_ATTN": "0"}}),
    );
    assert!(
        f.message.contains("NVTE_FUSED_ATTN=0 (it requires 1)") && f.message.contains("auto"),
        "{}",
        f.message
    );
    // `flash` sets FlashAttention on and the other two off.
    quiet(
        "attention_env_conflicts_with_backend",
        json!({"attention_backend": "flash",
               "attention_env": {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": 0}}),
    );
    let f = fires(
        "attention_env_conflicts_with_backend",
        json!({"attention_backend": "local", "attention_env": {"NVTE_UNFUSED_ATTN": "1"}}),
    );
    assert!(
        f.message.contains("NVTE_UNFUSED_ATTN=1 (it requires 0)"),
        "{}",
        f.message
    );
    // Megatron-Core compares the text: `true` is not `1`.
    fires(
        "attention_env_conflicts_with_backend",
        json!({"attention_env": {"NVTE_FLASH_ATTN": "true"}}),
    );
    quiet("attention_env_conflicts_with_backend", json!({}));
}

#[test]
fn cuda_graph_full_recompute() {
    let full = json!({"recompute_granularity": "full", "recompute_method": "uniform",
                      "recompute_num_layers": 1, "cuda_graph_impl": "transformer_engine"});
    fires("cuda_graph_full_recompute", full);
    quiet(
        "cuda_graph_full_recompute",
        json!({"recompute_granularity": "full", "recompute_method": "uniform",
               "recompute_num_layers": 1, "cuda_graph_impl": "full_iteration"}),
    );
}

#[test]
fn offload_fraction_without_offload() {
    let f = fires(
        "offload_fraction_without_offload",
        json!({"optimizer_offload_fraction": 0.5}),
    );
    assert!(f.fix.contains("optimizer_cpu_offload: true"));
    quiet(
        "offload_fraction_without_offload",
        json!({"optimizer_offload_fraction": 0.5, "optimizer_cpu_offload": true}),
    );
    // Megatron-Bridge's performance recipes write 0.0 beside offload off: consistent.
    quiet(
        "offload_fraction_without_offload",
        json!({"optimizer_offload_fraction": 0.0, "optimizer_cpu_offload": false}),
    );
}

#[test]
fn offload_without_precision_aware_optimizer() {
    fires(
        "offload_without_precision_aware_optimizer",
        json!({"optimizer_cpu_offload": true}),
    );
    quiet(
        "offload_without_precision_aware_optimizer",
        json!({"optimizer_cpu_offload": true, "use_precision_aware_optimizer": true}),
    );
}

#[test]
fn optimizer_dtypes_without_precision_aware_optimizer() {
    let f = fires(
        "optimizer_dtypes_without_precision_aware_optimizer",
        json!({"exp_avg_dtype": "bf16", "main_params_dtype": "fp32"}),
    );
    assert!(f.message.starts_with("exp_avg_dtype"));
    quiet(
        "optimizer_dtypes_without_precision_aware_optimizer",
        json!({"exp_avg_dtype": "bf16", "use_precision_aware_optimizer": true}),
    );
}

#[test]
fn precision_aware_optimizer_needs_adam() {
    fires(
        "precision_aware_optimizer_needs_adam",
        json!({"use_precision_aware_optimizer": true, "optimizer": "muon"}),
    );
    quiet(
        "precision_aware_optimizer_needs_adam",
        json!({"use_precision_aware_optimizer": true}),
    );
}

#[test]
fn flex_backend_without_flex_dispatcher() {
    let f = fires(
        "flex_backend_without_flex_dispatcher",
        json!({"moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": "hybridep"}),
    );
    assert!(f.message.contains("hybridep") && f.message.contains("alltoall"));
    assert!(f.fix.contains("moe_token_dispatcher_type: flex"));
    quiet(
        "flex_backend_without_flex_dispatcher",
        json!({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}),
    );
}

fn ep_overlap(extra: Value) -> Value {
    let mut v = json!({"overlap_moe_expert_parallel_comm": true, "expert_model_parallel_size": 8,
                       "moe_token_dispatcher_type": "alltoall"});
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v
}

#[test]
fn ep_overlap_baseline_is_clean() {
    assert_eq!(findings(ep_overlap(json!({}))), vec![]);
}

#[test]
fn ep_overlap_without_ep() {
    fires(
        "ep_overlap_without_ep",
        ep_overlap(json!({"expert_model_parallel_size": 1})),
    );
    quiet("ep_overlap_without_ep", ep_overlap(json!({})));
}

#[test]
fn ep_overlap_dispatcher() {
    fires(
        "ep_overlap_dispatcher",
        ep_overlap(json!({"moe_token_dispatcher_type": "allgather"})),
    );
    quiet(
        "ep_overlap_dispatcher",
        ep_overlap(json!({"moe_token_dispatcher_type": "flex"})),
    );
}

#[test]
fn ep_overlap_needs_vpp() {
    fires(
        "ep_overlap_needs_vpp",
        ep_overlap(json!({"pipeline_model_parallel_size": 4})),
    );
    quiet(
        "ep_overlap_needs_vpp",
        ep_overlap(
            json!({"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 2}),
        ),
    );
}

#[test]
fn ep_overlap_with_layer_recompute() {
    let f = fires(
        "ep_overlap_with_layer_recompute",
        ep_overlap(
            json!({"recompute_granularity": "full", "recompute_method": "uniform",
                          "recompute_num_layers": 1}),
        ),
    );
    assert!(f
        .message
        .contains("recompute_granularity full, recompute_method, recompute_num_layers"));
    quiet(
        "ep_overlap_with_layer_recompute",
        ep_overlap(json!({"recompute_granularity": "selective", "recompute_modules": ["moe_act"]})),
    );
}

#[test]
fn moe_recompute_with_ep_overlap() {
    fires(
        "moe_recompute_with_ep_overlap",
        ep_overlap(json!({"recompute_granularity": "selective", "recompute_modules": ["moe"]})),
    );
    quiet(
        "moe_recompute_with_ep_overlap",
        ep_overlap(json!({"recompute_granularity": "selective", "recompute_modules": ["moe_act"]})),
    );
}

#[test]
fn ep_overlap_mtp_layers() {
    fires(
        "ep_overlap_mtp_layers",
        ep_overlap(json!({"mtp_num_layers": 2})),
    );
    quiet(
        "ep_overlap_mtp_layers",
        ep_overlap(json!({"mtp_num_layers": 1})),
    );
}

#[test]
fn ep_overlap_cuda_graph_scope() {
    fires(
        "ep_overlap_cuda_graph_scope",
        ep_overlap(
            json!({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn", "moe"]}),
        ),
    );
    quiet(
        "ep_overlap_cuda_graph_scope",
        ep_overlap(json!({"cuda_graph_impl": "transformer_engine",
                          "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"]})),
    );
}

#[test]
fn delay_wgrad_without_ep_overlap() {
    fires(
        "delay_wgrad_without_ep_overlap",
        json!({"delay_wgrad_compute": true}),
    );
    quiet(
        "delay_wgrad_without_ep_overlap",
        ep_overlap(json!({"delay_wgrad_compute": true})),
    );
}

#[test]
fn fine_grained_offload_rules() {
    fires(
        "attn_proj_offload_without_core_attn",
        json!({"offload_modules": ["attn_proj"]}),
    );
    quiet(
        "attn_proj_offload_without_core_attn",
        json!({"offload_modules": ["core_attn", "attn_proj"]}),
    );
    let f = fires(
        "expert_offload_with_moe_recompute",
        json!({"offload_modules": ["expert_fc1", "core_attn"], "recompute_granularity": "selective",
               "recompute_modules": ["moe"]}),
    );
    assert!(f.message.contains("expert_fc1"), "{}", f.message);
    assert!(!f.message.contains("core_attn"), "{}", f.message);
    quiet(
        "expert_offload_with_moe_recompute",
        json!({"offload_modules": ["expert_fc1"], "recompute_granularity": "selective",
               "recompute_modules": ["moe_act"]}),
    );
}

#[test]
fn shared_expert_overlap_rules() {
    let overlap = json!({"moe_shared_expert_overlap": true, "expert_model_parallel_size": 8});
    quiet("shared_expert_overlap_with_ep_overlap", overlap.clone());
    quiet("shared_expert_overlap_with_allgather", overlap.clone());
    quiet(
        "shared_expert_overlap_without_shared_experts",
        overlap.clone(),
    );
    fires(
        "shared_expert_overlap_with_ep_overlap",
        ep_overlap(overlap.clone()),
    );
    fires(
        "shared_expert_overlap_with_allgather",
        json!({"moe_shared_expert_overlap": true, "moe_token_dispatcher_type": "allgather"}),
    );
    quiet(
        "shared_expert_overlap_with_allgather",
        json!({"moe_shared_expert_overlap": true, "moe_token_dispatcher_type": "flex"}),
    );
    let recompute = json!({
        "moe_shared_expert_overlap": true,
        "recompute_granularity": "selective",
        "recompute_modules": ["shared_experts"],
    });
    fires(
        "shared_expert_overlap_with_shared_experts_recompute",
        recompute.clone(),
    );
    quiet(
        "shared_expert_overlap_with_shared_experts_recompute",
        json!({"recompute_granularity": "selective", "recompute_modules": ["shared_experts"]}),
    );
    // A model without shared experts builds nothing to overlap: a warning, and the
    // dispatcher and recompute refusals (which sit under Megatron's shared-expert check) stay
    // quiet.
    let c = cfg(json!({
        "moe_shared_expert_overlap": true,
        "moe_token_dispatcher_type": "allgather",
    }));
    let no_shared = RuleInput {
        has_shared_experts: false,
        ..input(&c)
    };
    let codes: Vec<&str> = check(&no_shared).iter().map(|f| f.code).collect();
    assert!(codes.contains(&"shared_expert_overlap_without_shared_experts"));
    assert!(!codes.contains(&"shared_expert_overlap_with_allgather"));
}

#[test]
fn cp_comm_type_without_cp() {
    fires("cp_comm_type_without_cp", json!({"cp_comm_type": "a2a"}));
    quiet(
        "cp_comm_type_without_cp",
        json!({"cp_comm_type": "a2a", "context_parallel_size": 2}),
    );
}

#[test]
fn a2a_p2p_needs_hierarchical_cp() {
    let f = fires(
        "a2a_p2p_needs_hierarchical_cp",
        json!({"cp_comm_type": "a2a+p2p", "context_parallel_size": 8}),
    );
    assert!(f.fix.contains("product is 8"));
    quiet(
        "a2a_p2p_needs_hierarchical_cp",
        json!({"cp_comm_type": "p2p", "context_parallel_size": 8}),
    );
    quiet(
        "a2a_p2p_needs_hierarchical_cp",
        json!({"cp_comm_type": "a2a+p2p", "context_parallel_size": 8,
               "hierarchical_context_parallel_sizes": [4, 2]}),
    );
    let f = fires(
        "a2a_p2p_needs_hierarchical_cp",
        json!({"cp_comm_type": "a2a+p2p", "context_parallel_size": 8,
               "hierarchical_context_parallel_sizes": [4, 4]}),
    );
    assert!(f.message.contains("multiply to 16"));
    // A product past u64 is a mismatch, not an overflow.
    let f = fires(
        "a2a_p2p_needs_hierarchical_cp",
        json!({"cp_comm_type": "a2a+p2p", "context_parallel_size": 8,
               "hierarchical_context_parallel_sizes": [1048576, 1048576, 1048576, 1048576]}),
    );
    assert!(f.message.contains("more than any"), "{}", f.message);
}

#[test]
fn pipeline_split_conflict() {
    fires(
        "pipeline_split_conflict",
        json!({"pipeline_model_parallel_size": 4, "pipeline_model_parallel_layout": "Et*12|t*12|t*12|t*12L",
               "account_for_loss_in_pipeline_split": true}),
    );
    fires(
        "pipeline_split_conflict",
        json!({"pipeline_model_parallel_size": 4, "num_layers_in_first_pipeline_stage": 10,
               "account_for_embedding_in_pipeline_split": true}),
    );
    quiet(
        "pipeline_split_conflict",
        json!({"pipeline_model_parallel_size": 4, "num_layers_in_first_pipeline_stage": 10}),
    );
}

#[test]
fn layers_not_divisible_by_pipeline() {
    // 48 layers: PP 4 × VPP 3 = 12 divides, PP 4 × VPP 5 does not.
    quiet(
        "layers_not_divisible_by_pipeline",
        json!({"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 3}),
    );
    let f = fires(
        "layers_not_divisible_by_pipeline",
        json!({"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 5}),
    );
    assert!(f.message.contains("4·5 = 20"));
    assert!(f.fix.contains("num_layers_in_first_pipeline_stage"));
    // The embedding and loss slots count: 48 + 2 = 50 does not divide by 4.
    fires(
        "layers_not_divisible_by_pipeline",
        json!({"pipeline_model_parallel_size": 4, "account_for_embedding_in_pipeline_split": true,
               "account_for_loss_in_pipeline_split": true}),
    );
    // An explicit split is Megatron's way to be uneven.
    quiet(
        "layers_not_divisible_by_pipeline",
        json!({"pipeline_model_parallel_size": 5, "num_layers_in_first_pipeline_stage": 8}),
    );
}

#[test]
fn overlap_param_gather_prerequisites() {
    fires(
        "overlap_param_gather_prerequisites",
        json!({"overlap_param_gather": true, "use_distributed_optimizer": false}),
    );
    fires(
        "overlap_param_gather_prerequisites",
        json!({"overlap_param_gather": true, "overlap_grad_reduce": false}),
    );
    quiet(
        "overlap_param_gather_prerequisites",
        json!({"overlap_param_gather": true, "overlap_grad_reduce": true}),
    );
}

#[test]
fn ddp_bucket_size_and_num_buckets() {
    fires(
        "ddp_bucket_size_and_num_buckets",
        json!({"ddp_bucket_size": 134217728, "ddp_num_buckets": 8}),
    );
    quiet(
        "ddp_bucket_size_and_num_buckets",
        json!({"ddp_bucket_size": 134217728}),
    );
    quiet("ddp_bucket_size_and_num_buckets", json!({"num_buckets": 8}));
}

#[test]
fn fp8_param_gather_needs_sharded_optimizer() {
    fires(
        "fp8_param_gather_needs_sharded_optimizer",
        json!({"fp8_param_gather": true, "use_distributed_optimizer": false}),
    );
    quiet(
        "fp8_param_gather_needs_sharded_optimizer",
        json!({"fp8_param_gather": true, "use_distributed_optimizer": false, "use_megatron_fsdp": true}),
    );
}

#[test]
fn warning_text_names_fix_code_and_source() {
    let f = fires(
        "flex_backend_without_flex_dispatcher",
        json!({"moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": "deepep"}),
    );
    let t = f.warning_text();
    assert!(t.contains("Fix: set moe_token_dispatcher_type: flex"));
    assert!(t.contains("[flex_backend_without_flex_dispatcher; Megatron-LM megatron/core/transformer/moe/moe_layer.py:MoELayer.__init__]"));
}

#[test]
fn pad_to_capacity_without_capacity_factor() {
    let code = "pad_to_capacity_without_capacity_factor";
    fires(code, json!({"moe_pad_expert_input_to_capacity": true}));
    // A negative factor is dropless to Megatron-Core: still nothing to pad to.
    fires(
        code,
        json!({"moe_pad_expert_input_to_capacity": true, "moe_expert_capacity_factor": -1.0}),
    );
    quiet(
        code,
        json!({"moe_pad_expert_input_to_capacity": true, "moe_expert_capacity_factor": 1.0}),
    );
}

#[test]
fn pad_to_capacity_with_deepep() {
    let code = "pad_to_capacity_with_deepep";
    let padded = |backend: &str| {
        json!({"moe_pad_expert_input_to_capacity": true, "moe_expert_capacity_factor": 1.0,
               "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": backend})
    };
    fires(code, padded("deepep"));
    quiet(code, padded("hybridep"));
}

#[test]
fn deepep_needs_split_experts() {
    let code = "deepep_needs_split_experts";
    let deepep = |ep: u32, etp: u32| {
        json!({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep",
               "expert_model_parallel_size": ep, "expert_tensor_parallel_size": etp})
    };
    let f = fires(code, deepep(1, 1));
    assert_eq!(f.outcome, Outcome::Violation);
    assert!(f.fix.contains("alltoall"), "{}", f.fix);
    quiet(code, deepep(2, 1));
    quiet(code, deepep(1, 2));
    quiet(
        code,
        json!({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}),
    );
    // A run that names no dispatcher on a DeepEP card takes alltoall where its experts are
    // not split, so the rule has nothing to refuse.
    let unnamed = cfg(json!({"expert_model_parallel_size": 1}));
    assert_eq!(
        unnamed.dispatcher(ResolvedDispatcher::Deepep),
        ResolvedDispatcher::Alltoall
    );
    let split = cfg(json!({"expert_model_parallel_size": 8}));
    assert_eq!(
        split.dispatcher(ResolvedDispatcher::Deepep),
        ResolvedDispatcher::Deepep
    );
}

#[test]
fn rank_capacity_needs_hybridep() {
    let code = "rank_capacity_needs_hybridep";
    fires(
        code,
        json!({"moe_expert_rank_capacity_factor": 1.5, "moe_token_dispatcher_type": "flex",
               "moe_flex_dispatcher_backend": "deepep"}),
    );
    quiet(
        code,
        json!({"moe_expert_rank_capacity_factor": 1.5, "moe_token_dispatcher_type": "flex",
               "moe_flex_dispatcher_backend": "hybridep"}),
    );
}

#[test]
fn paged_stash_without_rank_capacity() {
    let code = "paged_stash_without_rank_capacity";
    let hybridep = json!({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
                          "moe_paged_stash": true});
    fires(code, hybridep.clone());
    let mut with_budget = hybridep;
    with_budget["moe_expert_rank_capacity_factor"] = json!(1.5);
    quiet(code, with_budget);
}

#[test]
fn paged_stash_with_expert_offload() {
    let code = "paged_stash_with_expert_offload";
    let stash = |modules: Value| {
        json!({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
               "moe_paged_stash": true, "moe_expert_rank_capacity_factor": 1.5,
               "offload_modules": modules})
    };
    let f = fires(code, stash(json!(["expert_fc1", "attn_norm"])));
    assert!(
        f.message.contains("expert_fc1") && !f.message.contains("attn_norm"),
        "{}",
        f.message
    );
    quiet(code, stash(json!(["attn_norm"])));
}

#[test]
fn outer_dp_sharding_strategy_choice() {
    let code = "outer_dp_sharding_strategy_choice";
    let outer = |strategy: &str| {
        json!({"use_megatron_fsdp": true, "num_distributed_optimizer_instances": 2,
               "outer_dp_sharding_strategy": strategy})
    };
    let f = fires(code, outer("optim_grads_params"));
    assert_eq!(f.outcome, Outcome::Violation);
    quiet(code, outer("optim"));
    quiet(code, outer("no_shard"));
}

#[test]
fn outer_dp_sharding_without_hsdp() {
    let code = "outer_dp_sharding_without_hsdp";
    let f = fires(
        code,
        json!({"use_megatron_fsdp": true, "outer_dp_sharding_strategy": "optim"}),
    );
    assert_eq!(f.outcome, Outcome::Warning);
    fires(
        code,
        json!({"num_distributed_optimizer_instances": 2, "outer_dp_sharding_strategy": "optim"}),
    );
    quiet(
        code,
        json!({"use_megatron_fsdp": true, "num_distributed_optimizer_instances": 2,
               "outer_dp_sharding_strategy": "optim"}),
    );
}

#[test]
fn layer_wise_optimizer_with_instances() {
    let code = "layer_wise_optimizer_with_instances";
    let f = fires(
        code,
        json!({"optimizer": "dist_muon", "num_distributed_optimizer_instances": 2}),
    );
    assert_eq!(f.outcome, Outcome::Violation);
    quiet(code, json!({"optimizer": "dist_muon"}));
    quiet(
        code,
        json!({"optimizer": "muon", "num_distributed_optimizer_instances": 2}),
    );
}
