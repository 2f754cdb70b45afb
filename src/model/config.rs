//! The shared training configuration: Megatron field names and short aliases, the defaults
//! the cost model applies, and the arithmetic on them. Reading the formats users hold (flat
//! YAML/JSON, Megatron-Bridge overrides and recipes, Megatron-LM command lines, diffs) lives in
//! `crate::inputs`; this file only knows the type.
//!
//! This file holds the type, its field names and the records of settings not used or assumed;
//! `options.rs` the named choices a setting makes, `derived.rs` the defaults and arithmetic.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod derived;
mod options;
pub use options::*;

/// One training configuration. Every field is optional; defaults follow Megatron and the
/// skills (see the accessor methods).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct TrainingConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_gpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batch_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_batch_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    #[serde(default, alias = "tp", skip_serializing_if = "Option::is_none")]
    pub tensor_model_parallel_size: Option<u32>,
    #[serde(default, alias = "pp", skip_serializing_if = "Option::is_none")]
    pub pipeline_model_parallel_size: Option<u32>,
    #[serde(default, alias = "vpp", skip_serializing_if = "Option::is_none")]
    pub virtual_pipeline_model_parallel_size: Option<u32>,
    #[serde(default, alias = "cp", skip_serializing_if = "Option::is_none")]
    pub context_parallel_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cp_comm_type: Option<CpCommType>,
    /// `a2a+p2p` group sizes, inner (all-to-all) first: `[8, 4]` is an all-to-all over 8
    /// consecutive CP ranks inside a ring of 4 such groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hierarchical_context_parallel_sizes: Option<Vec<u32>>,
    #[serde(default, alias = "ep", skip_serializing_if = "Option::is_none")]
    pub expert_model_parallel_size: Option<u32>,
    #[serde(default, alias = "etp", skip_serializing_if = "Option::is_none")]
    pub expert_tensor_parallel_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_parallel: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_granularity: Option<RecomputeGranularity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_modules: Option<Vec<RecomputeModule>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_method: Option<RecomputeMethod>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_num_layers: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_token_dispatcher_type: Option<TokenDispatcher>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_flex_dispatcher_backend: Option<FlexBackend>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_router_force_load_balancing: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_moe_expert_parallel_comm: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_ep_overlap_chunks: Option<u32>,
    /// SMs the flex dispatcher's communication kernels run on (Megatron-Core's
    /// `moe_flex_dispatcher_num_sms`; unset leaves each backend its default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_flex_dispatcher_num_sms: Option<u32>,
    /// The per-backend forms of the same knob in earlier Megatron-Core releases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_deepep_num_sms: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_hybridep_num_sms: Option<u32>,
    /// Token dropping (Megatron-Core's `moe_expert_capacity_factor`): each expert takes at
    /// most this multiple of its balanced share; with `moe_pad_expert_input_to_capacity` every
    /// expert's input is padded to that capacity (static shapes, no token-count sync).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_expert_capacity_factor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_pad_expert_input_to_capacity: Option<bool>,
    /// Per expert-rank token budget as a multiple of the balanced load
    /// (`moe_expert_rank_capacity_factor`, HybridEP/NCCL-EP): fixed receive buffers, what
    /// full-iteration CUDA graphs capture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_expert_rank_capacity_factor: Option<f64>,
    /// Routed-expert activations kept for backward in paged buffers (`moe_paged_stash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_paged_stash: Option<bool>,
    /// The shared experts run on a side stream beside the routed tokens' all-to-all
    /// (Megatron-Core's `moe_shared_expert_overlap`: fc1 beside the dispatch, fc2 beside the
    /// combine, and their backward beside the transfers' backward).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_shared_expert_overlap: Option<bool>,
    /// Weight-gradient GEMMs deferred so they can run under the backward all-to-all of the
    /// EP overlap schedule (Megatron-Core's `delay_wgrad_compute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_wgrad_compute: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp_comm_overlap: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_grad_reduce: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_param_gather: Option<bool>,
    /// Parameters per data-parallel bucket (Megatron-LM `--ddp-bucket-size`, Megatron-Bridge
    /// `ddp.bucket_size`): one reduce-scatter and one all-gather per bucket. Unset, Megatron-LM
    /// takes max(40M, 1M × DP·CP) (`training.py` `resolve_ddp_bucket_size`); with
    /// `overlap_grad_reduce` off the whole buffer is one bucket.
    #[serde(
        default,
        alias = "bucket_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub ddp_bucket_size: Option<u64>,
    /// Data-parallel buckets per rank instead of a size (Megatron-LM `--ddp-num-buckets`,
    /// Megatron-Bridge `ddp.num_buckets`): the bucket is the rank's parameters over it, and it
    /// wins over `ddp_bucket_size` as in `resolve_ddp_bucket_size` (Megatron-Core refuses both
    /// set).
    #[serde(
        default,
        alias = "num_buckets",
        skip_serializing_if = "Option::is_none"
    )]
    pub ddp_num_buckets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_distributed_optimizer: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_megatron_fsdp: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_sharding_strategy: Option<FsdpStrategy>,
    /// Copies of the distributed optimizer across the data-parallel ranks (Megatron-LM
    /// `--num-distributed-optimizer-instances`, Megatron-Bridge `ddp.num_distributed_optimizer_instances`;
    /// 1 unless given): each shards its state over DP·CP / N ranks (and expert DP / N), and the
    /// gradients are all-reduced across the copies. Under Megatron FSDP, N > 1 is hybrid
    /// sharding (HSDP): `data_parallel_sharding_strategy` applies within a copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_distributed_optimizer_instances: Option<u32>,
    /// HSDP's sharding across the copies: `no_shard` (replicas; Megatron-LM's default) or
    /// `optim` (the optimizer state sharded over every data-parallel rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outer_dp_sharding_strategy: Option<FsdpStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_precision_aware_optimizer: Option<bool>,
    /// Gradient buffers (accumulation and reduction) in fp32. Megatron-LM forces this on for
    /// BF16 training; Megatron-Bridge's DDP config can turn it off (its performance recipes
    /// do), which halves gradient memory and gradient reduce-scatter bytes.
    #[serde(
        default,
        alias = "accumulate_allreduce_grads_in_fp32",
        skip_serializing_if = "Option::is_none"
    )]
    pub grad_reduce_in_fp32: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<OptimizerKind>,
    /// Precision-aware optimizer buffer types (fp32 each when `use_precision_aware_optimizer`
    /// is on and these are unset, as Megatron-Core's OptimizerConfig defaults them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_params_dtype: Option<BufferDtype>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp_avg_dtype: Option<BufferDtype>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp_avg_sq_dtype: Option<BufferDtype>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_cpu_offload: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_offload_fraction: Option<f64>,
    /// Pipeline the offloaded optimizer's gradient copies, host steps and parameter copies
    /// (Megatron-LM `--overlap-cpu-optimizer-d2h-h2d`; off by default there and in
    /// Megatron-Bridge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_cpu_optimizer_d2h_h2d: Option<bool>,
    /// Parameter-efficient fine-tuning (Megatron-Bridge's `peft` section: LoRA, DoRA): the
    /// base weights are frozen, so they have no gradients, optimizer state or weight-gradient
    /// GEMMs. Given as a flag or as the scheme name (`lora`, `dora`; `none` is off).
    #[serde(
        default,
        deserialize_with = "peft_flag",
        skip_serializing_if = "Option::is_none"
    )]
    pub peft: Option<bool>,
    /// Samples are packed documents that attend only within themselves (Transformer Engine's
    /// THD layout with `cu_seqlens`): Megatron-Bridge's offline or in-batch packing. The
    /// attention is still priced as one causal sequence per sample, and the answer says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_packing: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_cross_entropy: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_entropy_loss_fusion: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtp_num_layers: Option<u32>,
    /// Weights kept in FP8 (Megatron-Bridge's mixed-precision `fp8_param`, which it keeps
    /// equal to `fp8_param_gather`).
    #[serde(default, alias = "fp8_param", skip_serializing_if = "Option::is_none")]
    pub fp8_param_gather: Option<bool>,
    /// Weights kept in NVFP4 under the NVFP4 recipe (Megatron-Core `fp4_param`, Megatron-LM
    /// `--fp4-param-gather`; Megatron-Bridge's `bf16_with_nvfp4_mixed` sets both from v0.4.2).
    #[serde(default, alias = "fp4_param", skip_serializing_if = "Option::is_none")]
    pub fp4_param_gather: Option<bool>,
    /// Core attention in FP8 (Transformer Engine's FP8 fused attention); only meaningful with
    /// an FP8 precision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_dot_product_attention: Option<bool>,
    /// The core-attention kernel (Megatron-Core `attention_backend`); `AttnBackend.fused`
    /// spellings name their member. Unset is `auto`.
    #[serde(
        default,
        deserialize_with = "attention_backend_name",
        skip_serializing_if = "Option::is_none"
    )]
    pub attention_backend: Option<AttentionBackend>,
    /// Dropout probability on the attention probabilities (Megatron-Core `attention_dropout`).
    /// It keeps tensors only where the scores are materialised (`unfused`, `local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_dropout: Option<f64>,
    /// Transformer Engine's attention switches the launch sets in the environment
    /// (`NVTE_FLASH_ATTN`, `NVTE_FUSED_ATTN`, `NVTE_UNFUSED_ATTN`), which Megatron-Core checks
    /// against `attention_backend`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_env: Option<AttentionEnv>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_graph_impl: Option<CudaGraphImpl>,
    /// The per-layer capture regions, read as Megatron-Core reads them (TransformerConfig,
    /// Megatron-LM d98e8a64): a list, or a string (one scope, or several joined by commas);
    /// `"full"` (deprecated there) and an empty list mean whole layers; enum spellings
    /// (`CudaGraphModule.attn`) name their member. `cuda_graph_modules` is Megatron-Core's
    /// current name for the field, `cuda_graph_scope` the deprecated one Bridge recipes still set.
    #[serde(
        default,
        deserialize_with = "graph_scopes",
        skip_serializing_if = "Option::is_none"
    )]
    pub cuda_graph_scope: Option<Vec<CudaGraphScope>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload_modules: Option<Vec<String>>,
    /// The share of fine-grained offloading's eligible module groups that go to the host, the
    /// first ones in forward order (Megatron-LM `--activation-offload-fraction`, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_offload_fraction: Option<f64>,
    /// Megatron-Core's whole-layer activation offloading (`cpu_offloading`, Transformer
    /// Engine's `get_cpu_offload_context`): the saved activations of the model's first
    /// `cpu_offloading_num_layers` layers go to the host. Megatron-LM's
    /// `--cpu-offloading-num-layers N` turns it on for N > 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_offloading: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_offloading_num_layers: Option<u32>,
    /// Whether whole-layer offloading moves activations (Megatron-Core's default, true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_offloading_activations: Option<bool>,
    /// Megatron-Core's layer layout: the string form (`"Et|(tt|)*30mL"`), or the list form
    /// (one list of layer-type names per virtual stage, `[["embedding", "decoder"], …]`),
    /// which is kept in the string form.
    #[serde(
        default,
        deserialize_with = "layout_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub pipeline_model_parallel_layout: Option<String>,
    #[serde(
        default,
        alias = "decoder_first_pipeline_num_layers",
        skip_serializing_if = "Option::is_none"
    )]
    pub num_layers_in_first_pipeline_stage: Option<u32>,
    #[serde(
        default,
        alias = "decoder_last_pipeline_num_layers",
        skip_serializing_if = "Option::is_none"
    )]
    pub num_layers_in_last_pipeline_stage: Option<u32>,
    /// The input embedding counts as one layer when layers are split over pipeline stages
    /// (the first stage then builds one decoder layer fewer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_for_embedding_in_pipeline_split: Option<bool>,
    /// The output layer and loss count as one layer in the pipeline split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_for_loss_in_pipeline_split: Option<bool>,
    /// Settings a reader saw that the cost model does not use, each with the reason. Kept out
    /// of (de)serialisation: readers fill it, tools report it as `ignored_settings`.
    #[serde(skip)]
    #[schemars(skip)]
    pub ignored_settings: Vec<IgnoredSetting>,
    /// Settings the input did not give that a reader filled with the source's own default
    /// (Megatron-LM's ETP = TP, ...), each with the value and why. Not (de)serialised.
    #[serde(skip)]
    #[schemars(skip)]
    pub assumed_defaults: Vec<AssumedDefault>,
}

/// Every accepted top-level key (field names and aliases).
pub const KNOWN_KEYS: &[&str] = &[
    "model",
    "hardware",
    "num_gpus",
    "seq_length",
    "micro_batch_size",
    "global_batch_size",
    "precision",
    "tensor_model_parallel_size",
    "tp",
    "pipeline_model_parallel_size",
    "pp",
    "virtual_pipeline_model_parallel_size",
    "vpp",
    "context_parallel_size",
    "cp",
    "cp_comm_type",
    "hierarchical_context_parallel_sizes",
    "expert_model_parallel_size",
    "ep",
    "expert_tensor_parallel_size",
    "etp",
    "sequence_parallel",
    "recompute_granularity",
    "recompute_modules",
    "recompute_method",
    "recompute_num_layers",
    "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend",
    "moe_router_force_load_balancing",
    "overlap_moe_expert_parallel_comm",
    "moe_ep_overlap_chunks",
    "moe_flex_dispatcher_num_sms",
    "moe_deepep_num_sms",
    "moe_hybridep_num_sms",
    "moe_expert_capacity_factor",
    "moe_pad_expert_input_to_capacity",
    "moe_expert_rank_capacity_factor",
    "moe_paged_stash",
    "moe_shared_expert_overlap",
    "delay_wgrad_compute",
    "tp_comm_overlap",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "ddp_bucket_size",
    "bucket_size",
    "ddp_num_buckets",
    "num_buckets",
    "use_distributed_optimizer",
    "use_megatron_fsdp",
    "data_parallel_sharding_strategy",
    "num_distributed_optimizer_instances",
    "outer_dp_sharding_strategy",
    "use_precision_aware_optimizer",
    "grad_reduce_in_fp32",
    "accumulate_allreduce_grads_in_fp32",
    "optimizer",
    "main_params_dtype",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "optimizer_cpu_offload",
    "optimizer_offload_fraction",
    "overlap_cpu_optimizer_d2h_h2d",
    "peft",
    "sequence_packing",
    "linear_cross_entropy",
    "cross_entropy_loss_fusion",
    "mtp_num_layers",
    "fp8_param_gather",
    "fp8_param",
    "fp4_param_gather",
    "fp4_param",
    "fp8_dot_product_attention",
    "attention_backend",
    "attention_dropout",
    "attention_env",
    "cuda_graph_impl",
    "cuda_graph_scope",
    "cuda_graph_modules",
    "offload_modules",
    "activation_offload_fraction",
    "cpu_offloading",
    "cpu_offloading_num_layers",
    "cpu_offloading_activations",
    "pipeline_model_parallel_layout",
    "num_layers_in_first_pipeline_stage",
    "decoder_first_pipeline_num_layers",
    "num_layers_in_last_pipeline_stage",
    "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
];

/// Megatron-Core's two names for the CUDA-graph scopes in one flat configuration, merged as its
/// `TransformerConfig.__post_init__` does (Megatron-LM d98e8a64): the deprecated
/// `cuda_graph_scope`, when set, wins over a `cuda_graph_modules` left at whole layers; both
/// set to different regions is refused there and here.
pub fn merge_cuda_graph_names(flat: &mut Map<String, Value>) -> Result<(), ConfigError> {
    let Some(modules) = flat.remove("cuda_graph_modules") else {
        return Ok(());
    };
    let whole_layers = |v: &Value| match v {
        Value::Null => true,
        Value::String(s) => s.is_empty() || s == "full",
        Value::Array(items) => items.iter().all(|i| i.as_str() == Some("full")),
        _ => false,
    };
    match flat.get("cuda_graph_scope") {
        None | Some(Value::Null) => {
            flat.insert("cuda_graph_scope".into(), modules);
        }
        Some(_) if whole_layers(&modules) => {}
        Some(scope) if whole_layers(scope) => {
            flat.insert("cuda_graph_scope".into(), modules);
        }
        Some(scope) => {
            return Err(ConfigError::InvalidValue {
                key: "cuda_graph_modules".into(),
                message: format!(
                    "set together with `cuda_graph_scope` ({scope}), which Megatron-Core refuses; \
                     keep one of them (`cuda_graph_modules` is the current name)"
                ),
            })
        }
    }
    Ok(())
}

/// `peft` as a flag, a scheme name (`lora`, `dora`, any adapter name: on; `none`, ``: off) or
/// a Bridge `peft` section (an object: on).
fn peft_flag<'de, D>(deserializer: D) -> Result<Option<bool>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => None,
        Some(Value::Bool(on)) => Some(on),
        Some(Value::String(scheme)) => {
            let scheme = scheme.trim().to_ascii_lowercase();
            Some(!(scheme.is_empty() || scheme == "none" || scheme == "false"))
        }
        Some(Value::Object(_)) => Some(true),
        Some(other) => {
            return Err(serde::de::Error::custom(format!(
                "expected true/false or a PEFT scheme such as \"lora\", not {other}"
            )))
        }
    })
}

/// CUDA-graph scopes in any spelling Megatron-Core accepts (see `cuda_graph_scope`): each name
/// is the part after the last dot, `full` is dropped (whole layers, like an empty list).
/// `pipeline_model_parallel_layout` as Megatron-Core's `PipelineParallelLayerLayout` takes it
/// (Megatron-LM `megatron/core/transformer/pipeline_parallel_layer_layout.py`): a string, or a
/// list of stages, each a list of `LayerType` names (case and a `LayerType.` prefix ignored),
/// written here in the string form's letters (embedding `E`, decoder `t`, mtp `m`, loss `L`).
fn layout_text<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let stages = match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) => return Ok(Some(text)),
        Some(Value::Array(stages)) => stages,
        Some(other) => {
            return Err(serde::de::Error::custom(format!(
            "expected a layout string such as \"Et|(tt|)*30mL\" or a list of stages, not {other}"
        )))
        }
    };
    let mut text = Vec::with_capacity(stages.len());
    for stage in stages {
        let Value::Array(layers) = stage else {
            return Err(serde::de::Error::custom(format!(
                "each stage of a list layout must be a list of layer types, not {stage}"
            )));
        };
        let mut letters = String::new();
        for layer in layers {
            let name = layer.as_str().map(|n| n.trim().to_ascii_lowercase());
            let name = name.as_deref().map(enum_member);
            letters.push(match name {
                Some("embedding") => 'E',
                Some("decoder") => 't',
                Some("mtp") => 'm',
                Some("loss") => 'L',
                _ => {
                    return Err(serde::de::Error::custom(format!(
                        "layer type {layer} is not one the layout models (embedding, decoder, mtp, loss)"
                    )))
                }
            });
        }
        text.push(letters);
    }
    Ok(Some(text.join("|")))
}

fn graph_scopes<'de, D>(deserializer: D) -> Result<Option<Vec<CudaGraphScope>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let names: Vec<String> = match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) => text.split(',').map(str::to_owned).collect(),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(name) => Ok(name),
                other => Err(serde::de::Error::custom(format!(
                    "a CUDA-graph scope must be a name such as \"attn\", not {other}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(serde::de::Error::custom(format!(
                "expected a list of scopes or a string, not {other}"
            )))
        }
    };
    let scopes = names
        .iter()
        .map(|name| name.trim())
        .map(enum_member)
        .filter(|name| !name.is_empty() && *name != "full")
        .map(|name| Value::String(name.to_owned()))
        .collect();
    serde_json::from_value(Value::Array(scopes))
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// The member an enum spelling names (`AttnBackend.fused`, `LayerType.decoder`: what Bridge
/// recipes write and Megatron's argument dump prints); a plain name is itself.
fn enum_member(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// `attention_backend` as a name (`fused`), an enum spelling (`AttnBackend.fused`, as Bridge
/// recipes and Megatron's argument dump write it) or null (auto).
fn attention_backend_name<'de, D>(deserializer: D) -> Result<Option<AttentionBackend>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => {
            let name = text.trim();
            serde_json::from_value(Value::String(enum_member(name).to_ascii_lowercase()))
                .map(Some)
                .map_err(|_| {
                    serde::de::Error::custom(format!(
                        "unknown attention backend `{name}`; expected flash, fused, unfused, local or auto"
                    ))
                })
        }
        Some(other) => Err(serde::de::Error::custom(format!(
            "an attention backend must be a name such as \"fused\", not {other}"
        ))),
    }
}

/// Characters of an ignored setting's key an error quotes ([`IgnoredSetting::quoted`]).
pub const QUOTED_KEY_CHARS: usize = 80;

/// A setting given by the user that the answer does not use, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IgnoredSetting {
    /// The key as the user wrote it (`train.train_iters`, `--lr`, `model.num_layers`).
    pub key: String,
    pub reason: String,
    /// Input the reader could not see into (a sourced file, an unexpanded variable, a branch
    /// decided on the machine), which may hold settings: an error for a missing setting
    /// names it.
    #[serde(skip)]
    #[schemars(skip)]
    pub unread: bool,
}

impl IgnoredSetting {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> IgnoredSetting {
        IgnoredSetting {
            key: key.into(),
            reason: reason.into(),
            unread: false,
        }
    }

    /// `` `key` (reason) ``, the key cut at [`QUOTED_KEY_CHARS`] (a skipped statement can be
    /// long): how an error names a setting or input it left unread.
    pub fn quoted(&self) -> String {
        let key: String = self.key.chars().take(QUOTED_KEY_CHARS).collect();
        let cut = if key.len() < self.key.len() {
            "…"
        } else {
            ""
        };
        format!("`{key}{cut}` ({})", self.reason)
    }

    /// Input left unread that may hold settings ([`IgnoredSetting::unread`]).
    pub fn unread(key: impl Into<String>, reason: impl Into<String>) -> IgnoredSetting {
        IgnoredSetting {
            unread: true,
            ..IgnoredSetting::new(key, reason)
        }
    }
}

/// A setting the user did not give that the answer needed, the value it took and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssumedDefault {
    pub key: String,
    pub value: Value,
    pub why: String,
}

impl AssumedDefault {
    pub fn new(key: impl Into<String>, value: Value, why: impl Into<String>) -> AssumedDefault {
        AssumedDefault {
            key: key.into(),
            value,
            why: why.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown configuration key `{key}`{}", suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownKey {
        key: String,
        suggestion: Option<String>,
    },
    #[error("invalid value for `{key}`: {message}")]
    InvalidValue { key: String, message: String },
    #[error("could not parse configuration: {0}")]
    Parse(String),
}

/// Closest known key to `key`, if reasonably close.
pub fn closest_key(key: &str) -> Option<String> {
    KNOWN_KEYS
        .iter()
        .map(|k| (strsim::jaro_winkler(key, k), *k))
        .filter(|(score, _)| *score > 0.75)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.to_string())
}

/// Whether `key` is a field name or alias of [`TrainingConfig`].
pub fn is_known_key(key: &str) -> bool {
    KNOWN_KEYS.contains(&key)
}

pub fn describe_serde_error(flat: &Map<String, Value>, err: serde_json::Error) -> ConfigError {
    let message = err.to_string();
    // serde names the offending field only for unknown fields; find the key whose value
    // fails on its own to name it for other errors.
    for (k, v) in flat {
        let mut single = Map::new();
        single.insert(k.clone(), v.clone());
        if let Err(e) = serde_json::from_value::<TrainingConfig>(Value::Object(single)) {
            return ConfigError::InvalidValue {
                key: k.clone(),
                message: e.to_string(),
            };
        }
    }
    ConfigError::Parse(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: serde_json::Value) -> TrainingConfig {
        TrainingConfig::from_fields(&json).expect("test config parses")
    }

    #[test]
    fn cp_groups_follow_the_communication_type() {
        let groups = |v: serde_json::Value| cfg(v).cp_groups();
        assert_eq!(groups(serde_json::json!({"cp": 8})), (1, 8));
        assert_eq!(
            groups(serde_json::json!({"cp": 8, "cp_comm_type": "a2a"})),
            (8, 1)
        );
        assert_eq!(
            groups(serde_json::json!({"cp": 8, "cp_comm_type": "allgather"})),
            (1, 8)
        );
        let hierarchical = |sizes: serde_json::Value| {
            groups(serde_json::json!({"cp": 32, "cp_comm_type": "a2a+p2p",
                "hierarchical_context_parallel_sizes": sizes}))
        };
        assert_eq!(hierarchical(serde_json::json!([8, 4])), (8, 4));
        assert_eq!(hierarchical(serde_json::json!([2, 4, 4])), (2, 16));
        // Sizes that do not multiply to CP, or are missing: one ring, as before the check.
        assert_eq!(hierarchical(serde_json::json!([8, 8])), (1, 32));
        assert_eq!(hierarchical(serde_json::json!([32])), (1, 32));
        assert_eq!(hierarchical(serde_json::json!([0, 32])), (1, 32));
        assert_eq!(hierarchical(serde_json::Value::Null), (1, 32));
    }

    #[test]
    fn cpu_offload_keeps_the_fp32_master_on_the_gpu() {
        // Adam without the precision-aware optimizer: 4 (master) + (1 − f)·8 (moments).
        let off = |f: f64, extra: serde_json::Value| {
            let mut v = serde_json::json!({"optimizer_cpu_offload": true,
                "optimizer_offload_fraction": f});
            if let (Some(m), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
                m.extend(e);
            }
            cfg(v).gpu_optimizer_state_bytes()
        };
        assert_eq!(off(1.0, serde_json::json!({})), 4.0);
        assert_eq!(off(0.5, serde_json::json!({})), 8.0);
        assert_eq!(off(0.0, serde_json::json!({})), 12.0);
        // SGD: one fp32 momentum leaves.
        assert_eq!(off(1.0, serde_json::json!({"optimizer": "sgd"})), 4.0);
        assert_eq!(off(0.0, serde_json::json!({"optimizer": "sgd"})), 8.0);
        // Precision-aware: the offloaded part leaves whole; the rest is fp32 master + moments.
        let aware = serde_json::json!({"use_precision_aware_optimizer": true});
        assert_eq!(off(1.0, aware.clone()), 0.0);
        assert_eq!(off(0.25, aware), 9.0);
        // No offload: the full state.
        assert_eq!(cfg(serde_json::json!({})).gpu_optimizer_state_bytes(), 12.0);
    }

    #[test]
    fn optimizer_state_bytes_follow_algorithm_and_dtypes() {
        // Plain Adam: fp32 master weights + two fp32 moments.
        assert_eq!(cfg(serde_json::json!({})).optimizer_state_bytes(), 12.0);
        // Precision-aware with nothing set: Megatron-Core's fp32 defaults for every buffer.
        let aware = cfg(serde_json::json!({"use_precision_aware_optimizer": true}));
        assert_eq!(aware.optimizer_state_bytes(), 12.0);
        // BF16 moments as Megatron-Bridge's recipes set them.
        let bf16_moments = cfg(serde_json::json!({"use_precision_aware_optimizer": true,
            "exp_avg_dtype": "bfloat16", "exp_avg_sq_dtype": "bfloat16"}));
        assert_eq!(bf16_moments.optimizer_state_bytes(), 8.0);
        // Explicit dtypes as Megatron-Bridge writes them.
        let explicit = cfg(serde_json::json!({"use_precision_aware_optimizer": true,
            "main_params_dtype": "float32", "exp_avg_dtype": "float32",
            "exp_avg_sq_dtype": "bfloat16"}));
        assert_eq!(explicit.optimizer_state_bytes(), 10.0);
        // Dtypes without the precision-aware optimizer are ignored, as in Megatron.
        let ignored = cfg(serde_json::json!({"exp_avg_dtype": "bf16"}));
        assert_eq!(ignored.optimizer_state_bytes(), 12.0);
        // Muon keeps one moment; the distributed variant shards it without the distributed
        // optimizer.
        let muon = cfg(serde_json::json!({"optimizer": "dist_muon",
            "use_distributed_optimizer": false}));
        assert_eq!(muon.optimizer_state_bytes(), 8.0);
        assert!(muon.optimizer_sharded());
        assert!(!cfg(serde_json::json!({"use_distributed_optimizer": false})).optimizer_sharded());
    }

    #[test]
    fn gradient_buffers_are_fp32_unless_turned_off() {
        assert_eq!(cfg(serde_json::json!({})).gradient_bytes(), 4.0);
        let bridge = cfg(serde_json::json!({"grad_reduce_in_fp32": false}));
        assert_eq!(bridge.gradient_bytes(), 2.0);
        let megatron = cfg(serde_json::json!({"accumulate_allreduce_grads_in_fp32": false}));
        assert_eq!(megatron.gradient_bytes(), 2.0);
    }

    #[test]
    fn cuda_graph_scopes_follow_megatron_core() {
        assert!(cfg(serde_json::json!({})).cuda_graph_scopes().is_empty());
        let whole = cfg(serde_json::json!({"cuda_graph_impl": "transformer_engine"}));
        assert!(whole.cuda_graph_scopes().contains(&CudaGraphScope::Moe));
        let scoped = cfg(serde_json::json!({"cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router"]}));
        assert_eq!(scoped.cuda_graph_scopes(), &[CudaGraphScope::MoeRouter]);
        let full = cfg(serde_json::json!({"cuda_graph_impl": "full_iteration"}));
        assert_eq!(full.cuda_graph_scopes(), &[CudaGraphScope::FullIteration]);
        let fp8 = cfg(serde_json::json!({"fp8_param": true}));
        assert_eq!(fp8.fp8_param_gather, Some(true));
        // One scope given alone, as Bridge recipes write it, is a one-item list.
        let alone = cfg(serde_json::json!({"cuda_graph_scope": "full_iteration"}));
        assert_eq!(
            alone.cuda_graph_scope,
            Some(vec![CudaGraphScope::FullIteration])
        );
        let none = cfg(serde_json::json!({"cuda_graph_scope": null}));
        assert_eq!(none.cuda_graph_scope, None);
        let bad: Result<TrainingConfig, _> =
            serde_json::from_value(serde_json::json!({"cuda_graph_scope": "everything"}));
        let err = bad.expect_err("an unknown scope is refused").to_string();
        assert!(err.contains("full_iteration"), "{err}");
    }

    #[test]
    fn cuda_graph_scopes_read_every_megatron_core_spelling() {
        let scopes = |v: serde_json::Value| cfg(v).cuda_graph_scope;
        // "full" (deprecated) and "" mean whole layers, as an empty list does.
        let whole = Some(Vec::new());
        assert_eq!(
            scopes(serde_json::json!({"cuda_graph_scope": "full"})),
            whole
        );
        assert_eq!(scopes(serde_json::json!({"cuda_graph_scope": ""})), whole);
        assert_eq!(
            scopes(serde_json::json!({"cuda_graph_scope": ["full"]})),
            whole
        );
        let te = serde_json::json!({"cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": "full"});
        assert!(cfg(te).cuda_graph_scopes().contains(&CudaGraphScope::Moe));
        // Comma-joined strings, enum spellings and the current field name.
        let routed = Some(vec![
            CudaGraphScope::MoeRouter,
            CudaGraphScope::MoePreprocess,
        ]);
        assert_eq!(
            scopes(serde_json::json!({"cuda_graph_scope": "moe_router,moe_preprocess"})),
            routed
        );
        assert_eq!(
            scopes(serde_json::json!({"cuda_graph_modules":
                ["CudaGraphModule.moe_router", "CudaGraphScope.moe_preprocess"]})),
            routed
        );
        let bad: Result<TrainingConfig, _> =
            serde_json::from_value(serde_json::json!({"cuda_graph_modules": [3]}));
        assert!(bad.is_err());
    }
}
