//! Megatron-LM's own start-up checks, applied to a `TrainingConfig` before it is costed.
//!
//! Each rule mirrors one check in Megatron-LM (read at commit d98e8a64 of NVIDIA/Megatron-LM,
//! 2026-08-22) and names the function it lives in. A setting Megatron refuses becomes a
//! violation (the estimate is invalid); a setting Megatron accepts but ignores, overrides or
//! only warns about becomes a warning. Both carry a fix. A few refusals are reported as
//! warnings on purpose, and their text says so: the cost model already assumes the value a
//! working recipe would write (full recompute without a method, an uneven pipeline split), or
//! only Megatron-LM's argument checks refuse it while Megatron-Core, which Megatron-Bridge
//! builds directly, accepts it. Violations are kept for what Megatron-Core itself refuses.

use super::arch::Architecture;
use super::config::{
    AttentionBackend, CpCommType, CudaGraphImpl, CudaGraphScope, FsdpStrategy, OptimizerKind,
    Precision, RecomputeGranularity, RecomputeModule, ResolvedDispatcher, TokenDispatcher,
    TrainingConfig,
};
use super::layout::VirtualStage;

/// What the estimate does with a broken rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Megatron refuses the setting at start-up: the layout is invalid.
    Violation,
    /// Megatron runs, but not with what the setting says (or refuses only on one path).
    Warning,
}

/// One broken rule: what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub code: &'static str,
    pub outcome: Outcome,
    pub message: String,
    pub fix: String,
    /// Megatron-LM file and function holding the check.
    pub source: &'static str,
}

/// What the rules read: the configuration plus the few resolved facts they depend on.
#[derive(Debug, Clone)]
pub struct RuleInput<'a> {
    pub cfg: &'a TrainingConfig,
    pub num_layers: u32,
    pub is_moe: bool,
    pub has_mla: bool,
    pub has_gated_deltanet: bool,
    /// The MoE layers have shared experts (`moe_shared_expert_intermediate_size` set).
    pub has_shared_experts: bool,
    /// MTP depth trained (configuration, else the model card).
    pub mtp_layers: u32,
    /// Virtual stages per pipeline rank after a pipeline layout string is applied.
    pub vpp: u32,
    /// The dispatcher after the hardware default is applied.
    pub dispatcher: ResolvedDispatcher,
    /// The modelled stage map (empty when not resolved), quoted by the pipeline-split rule.
    pub stages: &'a [VirtualStage],
}

impl<'a> RuleInput<'a> {
    /// Facts taken from the configuration and the architecture alone; `evaluate` overrides
    /// `vpp`, `dispatcher` and `stages` with the resolved layout's.
    pub fn new(cfg: &'a TrainingConfig, arch: &Architecture) -> RuleInput<'a> {
        RuleInput {
            cfg,
            num_layers: arch.num_layers,
            is_moe: arch.moe.is_some(),
            has_mla: arch.mla.is_some(),
            has_gated_deltanet: arch.linear_attention.is_some(),
            has_shared_experts: arch
                .moe
                .as_ref()
                .is_some_and(|m| m.shared_expert_ffn_hidden_size > 0),
            mtp_layers: cfg.mtp_num_layers.unwrap_or(arch.mtp_num_layers),
            vpp: cfg.vpp(),
            dispatcher: cfg.dispatcher(ResolvedDispatcher::Alltoall),
            stages: &[],
        }
    }
}

/// One Megatron check: its code, what the estimate does when it fails, where Megatron has
/// it, and the test itself (which returns the message and the fix).
pub struct Rule {
    pub code: &'static str,
    pub outcome: Outcome,
    pub source: &'static str,
    check: fn(&RuleInput<'_>) -> Option<(String, String)>,
}

const ARGS: &str = "megatron/training/arguments.py:validate_args";
const TC: &str = "megatron/core/transformer/transformer_config.py:TransformerConfig.__post_init__";
const MPC: &str = "megatron/core/model_parallel_config.py:ModelParallelConfig.__post_init__";
const OPT: &str = "megatron/core/optimizer/optimizer_config.py:OptimizerConfig.__post_init__";
const MOE_LAYER: &str = "megatron/core/transformer/moe/moe_layer.py:MoELayer.__init__";

/// The rules, in the order their findings are reported.
pub const RULES: &[Rule] = &[
    Rule {
        code: "moe_tp_without_sequence_parallel",
        outcome: Outcome::Violation,
        source: MPC,
        check: moe_tp_without_sp,
    },
    Rule {
        code: "moe_tp_without_sequence_parallel_ep1",
        outcome: Outcome::Warning,
        source: "megatron/training/yaml_arguments.py:validate_yaml",
        check: moe_tp_without_sp_ep1,
    },
    Rule {
        code: "sequence_parallel_without_tp",
        outcome: Outcome::Warning,
        source: ARGS,
        check: sp_without_tp,
    },
    Rule {
        code: "tp_comm_overlap_without_sequence_parallel",
        outcome: Outcome::Warning,
        source: ARGS,
        check: tp_overlap_without_sp,
    },
    Rule {
        code: "recompute_modules_ignored",
        outcome: Outcome::Warning,
        source: TC,
        check: recompute_modules_ignored,
    },
    Rule {
        code: "recompute_method_with_selective",
        outcome: Outcome::Warning,
        source: ARGS,
        check: method_with_selective,
    },
    Rule {
        code: "recompute_num_layers_with_selective",
        outcome: Outcome::Violation,
        source: TC,
        check: num_layers_with_selective,
    },
    Rule {
        code: "full_recompute_without_method",
        outcome: Outcome::Warning,
        source: TC,
        check: full_without_method,
    },
    Rule {
        code: "recompute_module_not_in_model",
        outcome: Outcome::Violation,
        source: TC,
        check: module_not_in_model,
    },
    Rule {
        code: "fp8_delayed_recompute",
        outcome: Outcome::Violation,
        source: TC,
        check: fp8_delayed_recompute,
    },
    Rule {
        code: "attention_env_conflicts_with_backend",
        outcome: Outcome::Violation,
        source: "megatron/core/models/common/language_module/language_module.py:LanguageModule._set_attention_backend",
        check: attention_env_conflict,
    },
    Rule {
        code: "fp8_attention_without_effect",
        outcome: Outcome::Warning,
        source: "megatron/core/fp8_utils.py:get_fp8_recipe",
        check: fp8_attention_without_effect,
    },
    Rule {
        code: "cuda_graph_full_recompute",
        outcome: Outcome::Violation,
        source: TC,
        check: cuda_graph_full_recompute,
    },
    Rule {
        code: "offload_fraction_without_offload",
        outcome: Outcome::Warning,
        source: "megatron/core/optimizer/__init__.py:_get_megatron_optimizer_based_on_param_groups",
        check: fraction_without_offload,
    },
    Rule {
        code: "offload_without_precision_aware_optimizer",
        outcome: Outcome::Warning,
        source: ARGS,
        check: offload_without_precision_aware,
    },
    Rule {
        code: "optimizer_dtypes_without_precision_aware_optimizer",
        outcome: Outcome::Violation,
        source: OPT,
        check: dtypes_without_precision_aware,
    },
    Rule {
        code: "precision_aware_optimizer_needs_adam",
        outcome: Outcome::Violation,
        source: OPT,
        check: precision_aware_needs_adam,
    },
    Rule {
        code: "flex_backend_without_flex_dispatcher",
        outcome: Outcome::Warning,
        source: "megatron/core/transformer/moe/moe_layer.py:MoELayer.__init__",
        check: flex_backend_ignored,
    },
    Rule {
        code: "ep_overlap_without_ep",
        outcome: Outcome::Violation,
        source: TC,
        check: ep_overlap_without_ep,
    },
    Rule {
        code: "ep_overlap_dispatcher",
        outcome: Outcome::Violation,
        source: TC,
        check: ep_overlap_dispatcher,
    },
    Rule {
        code: "ep_overlap_needs_vpp",
        outcome: Outcome::Violation,
        source: TC,
        check: ep_overlap_needs_vpp,
    },
    Rule {
        code: "ep_overlap_with_layer_recompute",
        outcome: Outcome::Violation,
        source: TC,
        check: ep_overlap_layer_recompute,
    },
    Rule {
        code: "moe_recompute_with_ep_overlap",
        outcome: Outcome::Violation,
        source: TC,
        check: ep_overlap_moe_recompute,
    },
    Rule {
        code: "ep_overlap_mtp_layers",
        outcome: Outcome::Violation,
        source: TC,
        check: ep_overlap_mtp,
    },
    Rule {
        code: "ep_overlap_cuda_graph_scope",
        outcome: Outcome::Violation,
        source: TC,
        check: ep_overlap_cuda_graph,
    },
    Rule {
        code: "shared_expert_overlap_with_ep_overlap",
        outcome: Outcome::Violation,
        source: TC,
        check: shared_expert_overlap_with_ep_overlap,
    },
    Rule {
        code: "shared_expert_overlap_with_allgather",
        outcome: Outcome::Violation,
        source: TC,
        check: shared_expert_overlap_with_allgather,
    },
    Rule {
        code: "shared_expert_overlap_with_shared_experts_recompute",
        outcome: Outcome::Violation,
        source: TC,
        check: shared_expert_overlap_with_recompute,
    },
    Rule {
        code: "shared_expert_overlap_without_shared_experts",
        outcome: Outcome::Warning,
        source: MOE_LAYER,
        check: shared_expert_overlap_without_shared_experts,
    },
    Rule {
        code: "delay_wgrad_without_ep_overlap",
        outcome: Outcome::Violation,
        source: TC,
        check: delay_wgrad_without_overlap,
    },
    Rule {
        code: "pad_to_capacity_without_capacity_factor",
        outcome: Outcome::Violation,
        source: TC,
        check: pad_without_capacity,
    },
    Rule {
        code: "pad_to_capacity_with_deepep",
        outcome: Outcome::Violation,
        source: TC,
        check: pad_with_deepep,
    },
    Rule {
        code: "deepep_needs_split_experts",
        outcome: Outcome::Violation,
        source: "megatron/core/transformer/moe/token_dispatcher.py:MoEFlexTokenDispatcher.__init__",
        check: deepep_needs_split_experts,
    },
    Rule {
        code: "outer_dp_sharding_strategy_choice",
        outcome: Outcome::Violation,
        source: "megatron/training/arguments.py:_add_distributed_args",
        check: outer_dp_sharding_choice,
    },
    Rule {
        code: "outer_dp_sharding_without_hsdp",
        outcome: Outcome::Warning,
        source: "megatron/core/distributed/fsdp/mcore_fsdp_adapter.py:FullyShardedDataParallel",
        check: outer_dp_sharding_without_hsdp,
    },
    Rule {
        code: "layer_wise_optimizer_with_instances",
        outcome: Outcome::Violation,
        source: "megatron/core/optimizer/layer_wise_optimizer.py:LayerWiseDistributedOptimizer.__init__",
        check: layer_wise_optimizer_with_instances,
    },
    Rule {
        code: "rank_capacity_needs_hybridep",
        outcome: Outcome::Violation,
        source: TC,
        check: rank_capacity_backend,
    },
    Rule {
        code: "paged_stash_without_rank_capacity",
        outcome: Outcome::Violation,
        source: TC,
        check: paged_stash_without_rank_capacity,
    },
    Rule {
        code: "paged_stash_with_expert_offload",
        outcome: Outcome::Violation,
        source: TC,
        check: paged_stash_with_expert_offload,
    },
    Rule {
        code: "attn_proj_offload_without_core_attn",
        outcome: Outcome::Violation,
        source: TC,
        check: attn_proj_offload_without_core_attn,
    },
    Rule {
        code: "expert_offload_with_moe_recompute",
        outcome: Outcome::Violation,
        source: TC,
        check: expert_offload_with_moe_recompute,
    },
    Rule {
        code: "cpu_offloading_with_pipeline",
        outcome: Outcome::Violation,
        source: TC,
        check: cpu_offloading_with_pipeline,
    },
    Rule {
        code: "cpu_offloading_with_recompute",
        outcome: Outcome::Violation,
        source: TC,
        check: cpu_offloading_with_recompute,
    },
    Rule {
        code: "cpu_offloading_layers",
        outcome: Outcome::Violation,
        source: TC,
        check: cpu_offloading_layers,
    },
    Rule {
        code: "cpu_offloading_layers_without_cpu_offloading",
        outcome: Outcome::Warning,
        source: MPC,
        check: offloading_layers_without_switch,
    },
    Rule {
        code: "cpu_offloading_with_fine_grained_offloading",
        outcome: Outcome::Violation,
        source: TC,
        check: cpu_offloading_with_fine_grained,
    },
    Rule {
        code: "cp_comm_type_without_cp",
        outcome: Outcome::Warning,
        source: "megatron/core/extensions/transformer_engine.py:TEDotProductAttention.__init__",
        check: cp_comm_type_without_cp,
    },
    Rule {
        code: "a2a_p2p_needs_hierarchical_cp",
        outcome: Outcome::Violation,
        source: ARGS,
        check: a2a_p2p_hierarchical,
    },
    Rule {
        code: "pipeline_split_conflict",
        outcome: Outcome::Violation,
        source: TC,
        check: pipeline_split_conflict,
    },
    Rule {
        code: "layers_not_divisible_by_pipeline",
        outcome: Outcome::Warning,
        source: "megatron/core/transformer/transformer_block.py:get_num_layers_to_build",
        check: layers_not_divisible,
    },
    Rule {
        code: "overlap_param_gather_prerequisites",
        outcome: Outcome::Warning,
        source: ARGS,
        check: overlap_param_gather,
    },
    Rule {
        code: "ddp_bucket_size_and_num_buckets",
        outcome: Outcome::Violation,
        source: "megatron/core/distributed/distributed_data_parallel_config.py:DistributedDataParallelConfig.__post_init__",
        check: bucket_size_and_count,
    },
    Rule {
        code: "fp8_param_gather_needs_sharded_optimizer",
        outcome: Outcome::Warning,
        source: ARGS,
        check: fp8_param_gather_sharded,
    },
];

/// Every rule the configuration breaks, in table order.
pub fn check(input: &RuleInput<'_>) -> Vec<Finding> {
    check_outcomes(input, None)
}

/// The rules of one outcome only (`None`: all of them).
pub fn check_outcomes(input: &RuleInput<'_>, only: Option<Outcome>) -> Vec<Finding> {
    RULES
        .iter()
        .filter(|rule| only.is_none_or(|o| rule.outcome == o))
        .filter_map(|rule| {
            (rule.check)(input).map(|(message, fix)| Finding {
                code: rule.code,
                outcome: rule.outcome,
                message,
                fix,
                source: rule.source,
            })
        })
        .collect()
}

impl Finding {
    /// The one-line form used in `Estimate::warnings`.
    pub fn warning_text(&self) -> String {
        format!(
            "{}. Fix: {} [{}; Megatron-LM {}]",
            self.message.trim_end_matches('.'),
            self.fix,
            self.code,
            self.source
        )
    }
}

type Check = Option<(String, String)>;

fn found(message: impl Into<String>, fix: impl Into<String>) -> Check {
    Some((message.into(), fix.into()))
}

fn ep_overlap(i: &RuleInput<'_>) -> bool {
    i.cfg.overlap_moe_expert_parallel_comm.unwrap_or(false)
}

fn selective(i: &RuleInput<'_>) -> bool {
    i.cfg.recompute_granularity == Some(RecomputeGranularity::Selective)
}

fn listed(i: &RuleInput<'_>, module: &RecomputeModule) -> bool {
    i.cfg.recompute_modules().contains(module)
}

fn moe_tp_without_sp(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    (c.ep() > 1 && c.tp() > 1 && c.sequence_parallel == Some(false)).then(|| {
        (
            format!(
                "expert_model_parallel_size {} with tensor_model_parallel_size {} and sequence_parallel false: Megatron-Core before 0.15 refuses this at start-up, and later releases warn that training must use sequence parallelism",
                c.ep(),
                c.tp()
            ),
            "set sequence_parallel: true (or tensor_model_parallel_size: 1)".into(),
        )
    })
}

fn moe_tp_without_sp_ep1(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    (i.is_moe && c.ep() == 1 && c.tp() > 1 && c.sequence_parallel == Some(false)).then(|| {
        (
            format!(
                "an MoE model with tensor_model_parallel_size {} and sequence_parallel false: Megatron's YAML launcher refuses it, and every layer then holds the whole sequence's activations on each TP rank",
                c.tp()
            ),
            "set sequence_parallel: true".into(),
        )
    })
}

fn sp_without_tp(i: &RuleInput<'_>) -> Check {
    (i.cfg.sequence_parallel == Some(true) && i.cfg.tp() == 1).then(|| {
        (
            "sequence_parallel true with tensor_model_parallel_size 1: Megatron-LM turns sequence parallelism off before building the model, while Megatron-Core's ModelParallelConfig, built directly by Megatron-Bridge, refuses it; either way it has no effect".into(),
            "drop sequence_parallel, or raise tensor_model_parallel_size".into(),
        )
    })
}

fn tp_overlap_without_sp(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    let sp = c.sequence_parallel() && c.tp() > 1;
    (c.tp_comm_overlap == Some(true) && !sp).then(|| {
        (
            format!(
                "tp_comm_overlap true without sequence parallelism (TP={}, sequence_parallel {}): Megatron-LM refuses it at start-up and Megatron-Bridge turns the overlap off; no TP overlap is modelled",
                c.tp(),
                c.sequence_parallel()
            ),
            if c.tp() == 1 {
                "drop tp_comm_overlap (there is no TP communication at TP=1)".into()
            } else {
                "set sequence_parallel: true, or drop tp_comm_overlap".into()
            },
        )
    })
}

fn recompute_modules_ignored(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    let modules = c.recompute_modules();
    if modules.is_empty() || selective(i) {
        return None;
    }
    let names: Vec<&str> = modules.iter().map(|m| m.name()).collect();
    let (what, fix) = match c.recompute_granularity {
        Some(RecomputeGranularity::Full) => (
            "recompute_granularity full recomputes whole layers",
            "drop recompute_modules, or set recompute_granularity: selective to recompute only those modules",
        ),
        _ => (
            "recompute_granularity is not set, so nothing is recomputed",
            "set recompute_granularity: selective, or drop recompute_modules",
        ),
    };
    found(
        format!(
            "recompute_modules [{}] are ignored: {what}",
            names.join(", ")
        ),
        fix,
    )
}

fn method_with_selective(i: &RuleInput<'_>) -> Check {
    (selective(i) && i.cfg.recompute_method.is_some()).then(|| {
        (
            "recompute_method is set with recompute_granularity selective: Megatron-LM refuses it at start-up, and Megatron-Core (Megatron-Bridge) ignores the method, which applies to full recompute only".into(),
            "drop recompute_method, or use recompute_granularity: full".into(),
        )
    })
}

fn num_layers_with_selective(i: &RuleInput<'_>) -> Check {
    (selective(i) && i.cfg.recompute_num_layers.is_some()).then(|| {
        (
            "recompute_num_layers is set with recompute_granularity selective; Megatron-Core requires it to be unset".into(),
            "drop recompute_num_layers, or use recompute_granularity: full".into(),
        )
    })
}

fn full_without_method(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    let full = c.recompute_granularity == Some(RecomputeGranularity::Full);
    (full && (c.recompute_method.is_none() || c.recompute_num_layers.is_none())).then(|| {
        (
            "recompute_granularity full without recompute_method and recompute_num_layers: Megatron-Core refuses it at start-up; this estimate assumes uniform over 1 layer".into(),
            "add recompute_method: uniform and recompute_num_layers: 1".into(),
        )
    })
}

fn module_not_in_model(i: &RuleInput<'_>) -> Check {
    if !selective(i) {
        return None;
    }
    if listed(i, &RecomputeModule::MlaUpProj) && !i.has_mla {
        return found(
            "recompute module mla_up_proj needs multi-latent attention, which this model does not have; Megatron-Core refuses it",
            "drop mla_up_proj from recompute_modules (core_attn or layernorm recompute attention inputs here)",
        );
    }
    if listed(i, &RecomputeModule::GdnNormOut) && !i.has_gated_deltanet {
        return found(
            "recompute module gdn_norm_out needs Gated DeltaNet layers, which this model does not have; Megatron-Core refuses it",
            "drop gdn_norm_out from recompute_modules",
        );
    }
    None
}

fn fp8_delayed_recompute(i: &RuleInput<'_>) -> Check {
    if !(selective(i) && i.cfg.precision() == Precision::Fp8Delayed) {
        return None;
    }
    let hit: Vec<&str> = [RecomputeModule::MoeAct, RecomputeModule::Layernorm]
        .iter()
        .filter(|m| listed(i, m))
        .map(|m| m.name())
        .collect();
    (!hit.is_empty()).then(|| {
        (
            format!(
                "FP8 delayed scaling cannot recompute {}; Megatron-Core refuses it",
                hit.join(" and ")
            ),
            "use an FP8 current-scaling or blockwise recipe, or drop moe_act/layernorm from recompute_modules".into(),
        )
    })
}

/// Megatron-Core sets Transformer Engine's three attention switches from `attention_backend`
/// and asserts that any the environment already set hold that value.
fn attention_env_conflict(i: &RuleInput<'_>) -> Check {
    let env = i.cfg.attention_env.as_ref()?;
    let backend = i.cfg.attention_backend.unwrap_or(AttentionBackend::Auto);
    let expected = backend.te_switches();
    let conflicts: Vec<String> = env
        .set()
        .into_iter()
        .filter_map(|(name, value)| {
            let (_, want) = expected.iter().find(|(n, _)| *n == name)?;
            (value != *want).then(|| format!("{name}={value} (it requires {want})"))
        })
        .collect();
    (!conflicts.is_empty()).then(|| {
        (
            format!(
                "{} with attention_backend {backend}: Megatron-Core sets NVTE_FLASH_ATTN, NVTE_FUSED_ATTN and NVTE_UNFUSED_ATTN from attention_backend and asserts that any the environment set already match, so the run stops when the model is built",
                conflicts.join(", ")
            ),
            "unset NVTE_FLASH_ATTN, NVTE_FUSED_ATTN and NVTE_UNFUSED_ATTN and choose the kernel with attention_backend (flash, fused, unfused or local; auto lets Transformer Engine pick)".into(),
        )
    })
}

fn fp8_attention_without_effect(i: &RuleInput<'_>) -> Check {
    (i.cfg.fp8_dot_product_attention == Some(true) && i.cfg.precision() == Precision::Fp8Blockwise)
        .then(|| {
            (
                "fp8_dot_product_attention under fp8-blockwise: Megatron-Core builds Transformer Engine's Float8BlockScaling recipe without fp8_dpa (the delayed, current-scaling, MXFP8 and NVFP4 recipes pass it), and Transformer Engine has no FP8 attention for block scaling, so attention runs in BF16 and is priced so".into(),
                "drop fp8_dot_product_attention; FP8 attention needs a recipe and head dims the GPU's FP8 attention kernel takes (the hardware card's `fp8_attention` lists both)".into(),
            )
        })
}

/// Per-layer CUDA graphs (not one graph over the whole iteration).
fn per_layer_graphs(i: &RuleInput<'_>) -> bool {
    matches!(
        i.cfg.cuda_graph_impl,
        Some(CudaGraphImpl::Local) | Some(CudaGraphImpl::TransformerEngine)
    ) && !i
        .cfg
        .cuda_graph_scopes()
        .contains(&CudaGraphScope::FullIteration)
}

fn cuda_graph_full_recompute(i: &RuleInput<'_>) -> Check {
    (i.cfg.full_recompute() && per_layer_graphs(i)).then(|| {
        (
            "recompute_granularity full with per-layer CUDA graphs: Megatron-Core supports full recompute only with the full-iteration CUDA graph".into(),
            "use selective recompute, or cuda_graph_impl: full_iteration, or turn CUDA graphs off".into(),
        )
    })
}

fn fraction_without_offload(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    match c.optimizer_offload_fraction {
        Some(f) if f > 0.0 && c.optimizer_cpu_offload != Some(true) => found(
            format!(
                "optimizer_offload_fraction {f} has no effect without optimizer_cpu_offload: true; the optimizer state stays on the GPU"
            ),
            "set optimizer_cpu_offload: true to offload, or drop optimizer_offload_fraction",
        ),
        _ => None,
    }
}

fn offload_without_precision_aware(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    (c.optimizer_cpu_offload == Some(true) && c.use_precision_aware_optimizer != Some(true)).then(|| {
        (
            "optimizer_cpu_offload without use_precision_aware_optimizer: Megatron-LM refuses it at start-up (its hybrid CPU/GPU optimizer runs on the precision-aware code path); Megatron-Bridge does not check it".into(),
            "set use_precision_aware_optimizer: true".into(),
        )
    })
}

fn dtypes_without_precision_aware(i: &RuleInput<'_>) -> Check {
    use super::config::BufferDtype::Float32;
    let c = i.cfg;
    if c.use_precision_aware_optimizer == Some(true) {
        return None;
    }
    let lowered: Vec<&str> = [
        ("main_params_dtype", c.main_params_dtype),
        ("exp_avg_dtype", c.exp_avg_dtype),
        ("exp_avg_sq_dtype", c.exp_avg_sq_dtype),
    ]
    .iter()
    .filter(|(_, d)| matches!(d, Some(d) if *d != Float32))
    .map(|(name, _)| *name)
    .collect();
    (!lowered.is_empty()).then(|| {
        (
            format!(
                "{} below fp32 without use_precision_aware_optimizer: Megatron-Core's optimizer refuses it (the estimate would otherwise count fp32 state)",
                lowered.join(", ")
            ),
            "set use_precision_aware_optimizer: true, or drop the dtype settings".into(),
        )
    })
}

fn precision_aware_needs_adam(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    let algo = c.optimizer.unwrap_or(OptimizerKind::Adam);
    (c.use_precision_aware_optimizer == Some(true) && algo != OptimizerKind::Adam).then(|| {
        (
            format!(
                "use_precision_aware_optimizer with optimizer {algo}: Megatron-Core supports it only with adam"
            ),
            "drop use_precision_aware_optimizer, or use optimizer: adam".into(),
        )
    })
}

fn flex_backend_ignored(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    match (c.moe_token_dispatcher_type, c.moe_flex_dispatcher_backend) {
        (Some(t @ (TokenDispatcher::Alltoall | TokenDispatcher::Allgather)), Some(b))
            if i.is_moe =>
        {
            let t = if t == TokenDispatcher::Alltoall {
                "alltoall"
            } else {
                "allgather"
            };
            let b = b.to_string();
            found(
                format!(
                    "moe_flex_dispatcher_backend {b} is ignored: moe_token_dispatcher_type is {t}, and Megatron uses the backend only with the flex dispatcher; modelled as {t}"
                ),
                format!("set moe_token_dispatcher_type: flex to use {b}, or drop moe_flex_dispatcher_backend"),
            )
        }
        _ => None,
    }
}

fn ep_overlap_without_ep(i: &RuleInput<'_>) -> Check {
    (ep_overlap(i) && i.cfg.ep() <= 1).then(|| {
        (
            "overlap_moe_expert_parallel_comm needs expert parallelism, but expert_model_parallel_size is 1".into(),
            "drop overlap_moe_expert_parallel_comm, or use expert_model_parallel_size > 1".into(),
        )
    })
}

fn ep_overlap_dispatcher(i: &RuleInput<'_>) -> Check {
    (ep_overlap(i) && i.dispatcher == ResolvedDispatcher::Allgather).then(|| {
        (
            "overlap_moe_expert_parallel_comm works only with the alltoall or flex token dispatcher, not allgather".into(),
            "set moe_token_dispatcher_type: alltoall (or flex)".into(),
        )
    })
}

fn pad_without_capacity(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    (c.moe_pad_expert_input_to_capacity.unwrap_or(false) && c.moe_capacity_factor().is_none())
        .then(|| {
            (
                "moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor".into(),
                "set moe_expert_capacity_factor (e.g. 1.0), or drop moe_pad_expert_input_to_capacity for dropless routing".into(),
            )
        })
}

fn pad_with_deepep(i: &RuleInput<'_>) -> Check {
    (i.cfg.moe_pad_expert_input_to_capacity.unwrap_or(false)
        && i.dispatcher == ResolvedDispatcher::Deepep)
        .then(|| {
            (
                "the flex dispatcher's DeepEP backend does not support moe_pad_expert_input_to_capacity".into(),
                "use moe_token_dispatcher_type: alltoall for drop-and-pad, or moe_expert_rank_capacity_factor with HybridEP".into(),
            )
        })
}

fn deepep_needs_split_experts(i: &RuleInput<'_>) -> Check {
    (i.is_moe && i.dispatcher == ResolvedDispatcher::Deepep && !i.cfg.experts_split()).then(|| {
        (
            "the flex dispatcher's DeepEP backend needs the experts split over GPUs (expert_tensor_parallel_size × expert_model_parallel_size > 1; Megatron-Core asserts \"DeepEP dispatcher requires TPxEP > 1\"), and both are 1".into(),
            "set moe_token_dispatcher_type: alltoall (with one expert group no tokens move), or expert_model_parallel_size > 1".into(),
        )
    })
}

fn outer_dp_sharding_choice(i: &RuleInput<'_>) -> Check {
    let name = match i.cfg.outer_dp_sharding_strategy? {
        FsdpStrategy::NoShard | FsdpStrategy::Optim => return None,
        FsdpStrategy::OptimGrads => "optim_grads",
        FsdpStrategy::OptimGradsParams => "optim_grads_params",
    };
    Some((
        format!(
            "outer_dp_sharding_strategy {name}: Megatron-LM accepts only no_shard (replicas) or optim (the optimizer state sharded across the copies)"
        ),
        "set outer_dp_sharding_strategy: optim or no_shard".into(),
    ))
}

fn outer_dp_sharding_without_hsdp(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    let hybrid = c.fsdp_strategy().is_some() && c.optimizer_instances() > 1;
    (c.outer_dp_sharding_strategy == Some(FsdpStrategy::Optim) && !hybrid).then(|| {
        (
            "outer_dp_sharding_strategy optim without hybrid FSDP: it applies only under Megatron FSDP with num_distributed_optimizer_instances > 1, so nothing is sharded across copies".into(),
            "set use_megatron_fsdp: true and num_distributed_optimizer_instances > 1, or drop outer_dp_sharding_strategy".into(),
        )
    })
}

fn layer_wise_optimizer_with_instances(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    (c.optimizer == Some(OptimizerKind::DistMuon) && c.optimizer_instances() > 1).then(|| {
        (
            format!(
                "dist_muon with num_distributed_optimizer_instances {}: Megatron-Core's layer-wise distributed optimizer asserts one copy (each copy would update parameters whose gradients it does not hold)",
                c.optimizer_instances()
            ),
            "set num_distributed_optimizer_instances: 1, or use optimizer: muon with the distributed optimizer".into(),
        )
    })
}

fn rank_capacity_backend(i: &RuleInput<'_>) -> Check {
    (i.cfg.moe_expert_rank_capacity_factor.is_some()
        && i.dispatcher != ResolvedDispatcher::Hybridep)
        .then(|| {
            (
                "moe_expert_rank_capacity_factor needs moe_flex_dispatcher_backend hybridep (or ncclep)".into(),
                "set moe_token_dispatcher_type: flex and moe_flex_dispatcher_backend: hybridep, or drop moe_expert_rank_capacity_factor".into(),
            )
        })
}

fn paged_stash_without_rank_capacity(i: &RuleInput<'_>) -> Check {
    (i.cfg.moe_paged_stash.unwrap_or(false) && i.cfg.moe_expert_rank_capacity_factor.is_none())
        .then(|| {
            (
                "moe_paged_stash needs moe_expert_rank_capacity_factor".into(),
                "set moe_expert_rank_capacity_factor (the recipes use 1.5), or drop moe_paged_stash".into(),
            )
        })
}

fn paged_stash_with_expert_offload(i: &RuleInput<'_>) -> Check {
    if !i.cfg.moe_paged_stash.unwrap_or(false) {
        return None;
    }
    let conflict = offloaded_among(i, &["expert_fc1", "moe_act", "fused_group_mlp"]);
    (!conflict.is_empty()).then(|| {
        (
            format!(
                "moe_paged_stash already keeps the routed-expert activations; offload_modules must not also offload {}",
                conflict.join(", ")
            ),
            format!("remove {} from offload_modules", conflict.join(", ")),
        )
    })
}

/// Those of `modules` the configuration offloads, in the given order.
fn offloaded_among<'m>(i: &RuleInput<'_>, modules: &[&'m str]) -> Vec<&'m str> {
    modules
        .iter()
        .copied()
        .filter(|m| i.cfg.offloads(m))
        .collect()
}

fn attn_proj_offload_without_core_attn(i: &RuleInput<'_>) -> Check {
    (i.cfg.offloads("attn_proj") && !i.cfg.offloads("core_attn")).then(|| {
        (
            "offload_modules has attn_proj without core_attn: the projection's input is the core attention's output, which core_attn's backward needs on the GPU; Megatron-Core refuses it".into(),
            "add core_attn to offload_modules, or drop attn_proj".into(),
        )
    })
}

fn expert_offload_with_moe_recompute(i: &RuleInput<'_>) -> Check {
    if !(selective(i) && listed(i, &RecomputeModule::Moe)) {
        return None;
    }
    let inside = offloaded_among(i, &["moe_act", "expert_fc1", "fused_group_mlp"]);
    (!inside.is_empty()).then(|| {
        (
            format!(
                "offload_modules {} lie inside the MoE layer that moe recompute checkpoints whole; Megatron-Core refuses offloading inside it",
                inside.join(", ")
            ),
            format!("remove {} from offload_modules, or moe from recompute_modules", inside.join(", ")),
        )
    })
}

fn ep_overlap_needs_vpp(i: &RuleInput<'_>) -> Check {
    let pp = i.cfg.pp();
    (ep_overlap(i) && pp > 1 && i.vpp <= 1).then(|| {
        (
            format!(
                "overlap_moe_expert_parallel_comm with pipeline_model_parallel_size {pp} needs the interleaved schedule, but virtual_pipeline_model_parallel_size is not set"
            ),
            "set virtual_pipeline_model_parallel_size ≥ 2 (or a pipeline_model_parallel_layout with several stages per rank)".into(),
        )
    })
}

fn ep_overlap_layer_recompute(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    if !ep_overlap(i) {
        return None;
    }
    let mut set = Vec::new();
    if c.full_recompute() {
        set.push("recompute_granularity full");
    }
    if c.recompute_method.is_some() {
        set.push("recompute_method");
    }
    if c.recompute_num_layers.is_some() {
        set.push("recompute_num_layers");
    }
    (!set.is_empty()).then(|| {
        (
            format!(
                "overlap_moe_expert_parallel_comm cannot run with {}; Megatron-Core refuses it",
                set.join(", ")
            ),
            "use selective recompute without recompute_method/recompute_num_layers, or turn off the EP overlap".into(),
        )
    })
}

fn ep_overlap_moe_recompute(i: &RuleInput<'_>) -> Check {
    (ep_overlap(i) && listed(i, &RecomputeModule::Moe)).then(|| {
        (
            "recomputing `moe` is incompatible with overlap_moe_expert_parallel_comm".into(),
            "drop `moe` from recompute_modules (use moe_act) or turn off the EP overlap".into(),
        )
    })
}

fn ep_overlap_mtp(i: &RuleInput<'_>) -> Check {
    (ep_overlap(i) && i.mtp_layers > 1).then(|| {
        (
            format!(
                "overlap_moe_expert_parallel_comm supports at most one MTP layer; {} are trained",
                i.mtp_layers
            ),
            "set mtp_num_layers to 0 or 1, or turn off the EP overlap".into(),
        )
    })
}

fn ep_overlap_cuda_graph(i: &RuleInput<'_>) -> Check {
    let scopes = i.cfg.cuda_graph_scopes();
    let graphed = scopes.contains(&CudaGraphScope::Moe) || scopes.contains(&CudaGraphScope::Mlp);
    (ep_overlap(i)
        && i.cfg.cuda_graph_impl == Some(CudaGraphImpl::TransformerEngine)
        && graphed)
        .then(|| {
            (
                "transformer_engine CUDA graphs over the moe/mlp scope cannot run with overlap_moe_expert_parallel_comm".into(),
                "restrict cuda_graph_scope to attn, moe_router and moe_preprocess, or turn off the EP overlap".into(),
            )
        })
}

fn shared_expert_overlap(i: &RuleInput<'_>) -> bool {
    i.cfg.moe_shared_expert_overlap.unwrap_or(false)
}

fn shared_expert_overlap_with_ep_overlap(i: &RuleInput<'_>) -> Check {
    (shared_expert_overlap(i) && ep_overlap(i)).then(|| {
        (
            "moe_shared_expert_overlap cannot run with overlap_moe_expert_parallel_comm; Megatron-Core refuses the pair".into(),
            "drop moe_shared_expert_overlap (the EP overlap schedule already runs the shared experts beside another microbatch's all-to-all), or turn off overlap_moe_expert_parallel_comm".into(),
        )
    })
}

fn shared_expert_overlap_with_allgather(i: &RuleInput<'_>) -> Check {
    (shared_expert_overlap(i)
        && i.has_shared_experts
        && i.dispatcher == ResolvedDispatcher::Allgather)
        .then(|| {
            (
                "moe_shared_expert_overlap only works with the alltoall or flex dispatcher, and this run uses allgather; Megatron-Core refuses it".into(),
                "set moe_token_dispatcher_type: alltoall (or flex), or drop moe_shared_expert_overlap".into(),
            )
        })
}

fn shared_expert_overlap_with_recompute(i: &RuleInput<'_>) -> Check {
    (shared_expert_overlap(i)
        && i.has_shared_experts
        && selective(i)
        && listed(i, &RecomputeModule::SharedExperts))
    .then(|| {
        (
            "recompute module shared_experts cannot run with moe_shared_expert_overlap; Megatron-Core refuses it".into(),
            "drop shared_experts from recompute_modules, or drop moe_shared_expert_overlap".into(),
        )
    })
}

fn shared_expert_overlap_without_shared_experts(i: &RuleInput<'_>) -> Check {
    (shared_expert_overlap(i) && !i.has_shared_experts).then(|| {
        (
            "moe_shared_expert_overlap has no effect: this model has no shared experts, so Megatron-Core builds nothing to overlap".into(),
            "drop moe_shared_expert_overlap".into(),
        )
    })
}

fn delay_wgrad_without_overlap(i: &RuleInput<'_>) -> Check {
    (i.cfg.delay_wgrad_compute == Some(true) && !ep_overlap(i)).then(|| {
        (
            "delay_wgrad_compute needs overlap_moe_expert_parallel_comm".into(),
            "set overlap_moe_expert_parallel_comm: true, or drop delay_wgrad_compute".into(),
        )
    })
}

fn cp_comm_type_without_cp(i: &RuleInput<'_>) -> Check {
    (i.cfg.cp_comm_type.is_some() && i.cfg.cp() == 1).then(|| {
        (
            "cp_comm_type is set but context_parallel_size is 1, so there is no context-parallel communication to choose".into(),
            "drop cp_comm_type, or set context_parallel_size > 1".into(),
        )
    })
}

fn a2a_p2p_hierarchical(i: &RuleInput<'_>) -> Check {
    let cp = i.cfg.cp();
    let sizes = i.cfg.hierarchical_context_parallel_sizes.as_deref();
    // A product past u64 cannot equal CP: `None` below reads as a mismatch.
    let product = sizes.map(|s| {
        s.iter()
            .try_fold(1u64, |acc, &x| acc.checked_mul(u64::from(x)))
    });
    // Built only when the rule fires: every evaluation of a layout search runs this rule.
    let fix = || {
        format!(
            "set hierarchical_context_parallel_sizes to sizes whose product is {cp}, all-to-all group first (for example [8, {}] for an all-to-all inside an 8-GPU NVLink node and a ring across nodes), or use cp_comm_type p2p",
            (cp / 8).max(1)
        )
    };
    match (sizes, product) {
        (Some(s), Some(p)) if p != Some(cp as u64) => Some((
            match p {
                Some(p) => format!(
                    "hierarchical_context_parallel_sizes {s:?} multiply to {p}, not context_parallel_size {cp}; Megatron-LM asserts they are equal"
                ),
                None => format!(
                    "hierarchical_context_parallel_sizes {s:?} multiply to more than any context_parallel_size; Megatron-LM asserts their product equals {cp}"
                ),
            },
            fix(),
        )),
        (None, _) if i.cfg.cp_comm_type == Some(CpCommType::A2aP2p) && cp > 1 => Some((
            "cp_comm_type a2a+p2p needs hierarchical_context_parallel_sizes (an all-to-all group inside a ring), which Megatron-LM refuses to start without; this estimate models the CP ranks as one ring".into(),
            fix(),
        )),
        _ => None,
    }
}

fn pipeline_split_conflict(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    let first_last = c.num_layers_in_first_pipeline_stage.is_some()
        || c.num_layers_in_last_pipeline_stage.is_some();
    let account = c.account_for_embedding_in_pipeline_split == Some(true)
        || c.account_for_loss_in_pipeline_split == Some(true);
    if c.pipeline_model_parallel_layout.is_some() && (first_last || account) {
        return found(
            "pipeline_model_parallel_layout cannot be combined with num_layers_in_first/last_pipeline_stage or account_for_embedding/loss_in_pipeline_split",
            "keep only the layout string (it places every layer already)",
        );
    }
    if first_last && account {
        return found(
            "num_layers_in_first/last_pipeline_stage cannot be combined with account_for_embedding/loss_in_pipeline_split",
            "use one of the two ways to unbalance the pipeline",
        );
    }
    None
}

fn layers_not_divisible(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    let pp = c.pp();
    if pp <= 1
        || c.pipeline_model_parallel_layout.is_some()
        || c.num_layers_in_first_pipeline_stage.is_some()
        || c.num_layers_in_last_pipeline_stage.is_some()
    {
        return None;
    }
    let extra = u32::from(c.account_for_embedding_in_pipeline_split == Some(true))
        + u32::from(c.account_for_loss_in_pipeline_split == Some(true));
    let slots = i.num_layers.saturating_add(extra);
    let vpp = i.vpp.max(1);
    let stages = pp.saturating_mul(vpp);
    if slots.is_multiple_of(stages) {
        return None;
    }
    let what = if extra > 0 {
        format!(
            "{} layers plus {extra} embedding/loss slot(s)",
            i.num_layers
        )
    } else {
        format!("{} layers", i.num_layers)
    };
    let modelled = if i.stages.is_empty() {
        String::new()
    } else {
        let counts: Vec<String> = i.stages.iter().map(|s| s.num_layers.to_string()).collect();
        let short = if counts.len() > 12 {
            format!(
                "{} … {}",
                counts[..6].join(","),
                counts[counts.len() - 6..].join(",")
            )
        } else {
            counts.join(",")
        };
        format!("; modelled as the uneven split a recipe would write ({short} layers per virtual stage)")
    };
    found(
        format!(
            "{what} do not divide into PP·VPP = {pp}·{vpp} = {stages} stages: Megatron refuses an even split that does not divide{modelled}"
        ),
        "write the split explicitly: num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage, or a pipeline_model_parallel_layout string",
    )
}

fn overlap_param_gather(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    if c.overlap_param_gather != Some(true) {
        return None;
    }
    let sharded = c.use_distributed_optimizer != Some(false)
        || c.use_megatron_fsdp == Some(true)
        || c.optimizer == Some(OptimizerKind::DistMuon);
    if !sharded {
        return found(
            "overlap_param_gather without the distributed optimizer, Megatron FSDP or dist_muon: Megatron-LM refuses it at start-up; elsewhere there is no parameter all-gather to overlap",
            "set use_distributed_optimizer: true, or drop overlap_param_gather",
        );
    }
    (c.overlap_grad_reduce == Some(false)).then(|| {
        (
            "overlap_param_gather with overlap_grad_reduce false: Megatron-LM refuses it at start-up; Megatron-Bridge runs it (its DeepSeek-V3 performance recipes do)".into(),
            "set overlap_grad_reduce: true, or drop overlap_param_gather".into(),
        )
    })
}

fn bucket_size_and_count(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    (c.ddp_bucket_size.is_some() && c.ddp_num_buckets.is_some()).then(|| {
        (
            "ddp_bucket_size and ddp_num_buckets both set: Megatron-Core refuses it at start-up (\"Cannot specify both num_buckets and bucket_size\")".into(),
            "keep one of ddp_bucket_size (parameters per bucket) or ddp_num_buckets".into(),
        )
    })
}

fn fp8_param_gather_sharded(i: &RuleInput<'_>) -> Check {
    let c = i.cfg;
    (c.fp8_param_gather == Some(true)
        && c.use_distributed_optimizer == Some(false)
        && c.use_megatron_fsdp != Some(true))
    .then(|| {
        (
            "fp8_param_gather without the distributed optimizer or Megatron FSDP: Megatron-LM refuses it at start-up; Megatron-Bridge does not check it".into(),
            "set use_distributed_optimizer: true, or drop fp8_param_gather".into(),
        )
    })
}

#[cfg(test)]
mod tests;

fn cpu_offloading(i: &RuleInput<'_>) -> bool {
    i.cfg.cpu_offloading.unwrap_or(false)
}

fn cpu_offloading_with_pipeline(i: &RuleInput<'_>) -> Check {
    let pp = i.cfg.pp();
    (cpu_offloading(i) && pp > 1).then(|| {
        (
            format!("cpu_offloading with pipeline_model_parallel_size {pp}: Megatron-Core has no pipeline-parallel support for whole-layer offloading"),
            "use pipeline_model_parallel_size 1, or fine-grained offloading (offload_modules), which works with pipelines".into(),
        )
    })
}

fn cpu_offloading_with_recompute(i: &RuleInput<'_>) -> Check {
    (cpu_offloading(i) && i.cfg.recompute_granularity.is_some()).then(|| {
        (
            "cpu_offloading with activation recompute: Megatron-Core refuses the two together".into(),
            "drop recompute_granularity, or offload with offload_modules (fine-grained offloading works with selective recompute)".into(),
        )
    })
}

fn cpu_offloading_layers(i: &RuleInput<'_>) -> Check {
    let layers = i.cfg.cpu_offloading_num_layers.unwrap_or(0);
    (cpu_offloading(i) && layers >= i.num_layers).then(|| {
        (
            format!(
                "cpu_offloading_num_layers {layers} with {} layers: only layers before the last can be offloaded",
                i.num_layers
            ),
            format!("use cpu_offloading_num_layers ≤ {}", i.num_layers.saturating_sub(1)),
        )
    })
}

fn cpu_offloading_with_fine_grained(i: &RuleInput<'_>) -> Check {
    let fine_grained = i
        .cfg
        .offload_modules
        .as_ref()
        .is_some_and(|m| !m.is_empty());
    (cpu_offloading(i) && fine_grained).then(|| {
        (
            "cpu_offloading together with offload_modules: fine-grained activation offloading cannot be enabled with cpu_offloading".into(),
            "choose one: cpu_offloading (whole layers) or offload_modules (chosen modules)".into(),
        )
    })
}

fn offloading_layers_without_switch(i: &RuleInput<'_>) -> Check {
    let layers = i.cfg.cpu_offloading_num_layers.unwrap_or(0);
    (layers > 0 && i.cfg.cpu_offloading.is_none()).then(|| {
        (
            format!("cpu_offloading_num_layers {layers} without cpu_offloading: Megatron-Core offloads nothing unless cpu_offloading is true (Megatron-LM's --cpu-offloading-num-layers and Megatron-Bridge's performance launcher switch it on for a count above 0; the estimate offloads nothing)"),
            "set cpu_offloading: true if the run offloads these layers".into(),
        )
    })
}
