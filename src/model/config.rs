//! The shared training configuration: Megatron field names, short aliases, and readers for
//! flat YAML/JSON, Megatron-Bridge nested override files and Megatron-LM command lines.
//!
//! Unknown keys: at the top level of a flat config they are rejected with an error that
//! names the key and the closest valid name. Inside Megatron-Bridge sections (`train:`,
//! `optimizer:`, ...) and on Megatron command lines, settings the cost model does not use
//! are collected in [`TrainingConfig::ignored_keys`] and reported as warnings.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Numeric format of the GEMMs (attention core and optimizer stay in higher precision).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    #[default]
    Bf16,
    #[serde(alias = "fp8-cs", alias = "fp8-current-scaling", alias = "tensorwise")]
    Fp8Tensorwise,
    #[serde(alias = "delayed")]
    Fp8Delayed,
    #[serde(alias = "fp8-block", alias = "fp8", alias = "blockwise")]
    Fp8Blockwise,
    #[serde(alias = "fp8-mx", alias = "mxfp8-block")]
    Mxfp8,
    #[serde(alias = "fp4", alias = "nvfp4-block")]
    Nvfp4,
}

impl Precision {
    pub fn is_low_precision(self) -> bool {
        self != Precision::Bf16
    }

    /// Parse a label as used in tables ("FP8-MX", "MXFP8", "FP8-CS", "BF16", ...).
    pub fn from_label(label: &str) -> Option<Precision> {
        let norm = label.trim().to_ascii_lowercase().replace('_', "-");
        serde_json::from_value(Value::String(norm)).ok()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecomputeGranularity {
    Selective,
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecomputeMethod {
    Uniform,
    Block,
}

/// A selective-recompute module name (Megatron's names; `up_proj` and `norm` are aliases).
/// Unknown names are kept as `Other` so that they are reported as a violation with a fix.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecomputeModule {
    CoreAttn,
    MlaUpProj,
    Layernorm,
    MoeAct,
    Moe,
    Mlp,
    SharedExperts,
    GdnNormOut,
    Other(String),
}

impl RecomputeModule {
    pub const KNOWN: [&'static str; 8] = [
        "core_attn",
        "mla_up_proj",
        "layernorm",
        "moe_act",
        "moe",
        "mlp",
        "shared_experts",
        "gdn_norm_out",
    ];

    pub fn parse(name: &str) -> RecomputeModule {
        match name.trim() {
            "core_attn" => Self::CoreAttn,
            "mla_up_proj" | "up_proj" => Self::MlaUpProj,
            "layernorm" | "norm" => Self::Layernorm,
            "moe_act" | "act" => Self::MoeAct,
            "moe" => Self::Moe,
            "mlp" => Self::Mlp,
            "shared_experts" => Self::SharedExperts,
            "gdn_norm_out" => Self::GdnNormOut,
            other => Self::Other(other.to_string()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Self::CoreAttn => "core_attn",
            Self::MlaUpProj => "mla_up_proj",
            Self::Layernorm => "layernorm",
            Self::MoeAct => "moe_act",
            Self::Moe => "moe",
            Self::Mlp => "mlp",
            Self::SharedExperts => "shared_experts",
            Self::GdnNormOut => "gdn_norm_out",
            Self::Other(s) => s,
        }
    }
}

impl Serialize for RecomputeModule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for RecomputeModule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(RecomputeModule::parse(&name))
    }
}

impl JsonSchema for RecomputeModule {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RecomputeModule".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "Selective recompute module (aliases: up_proj -> mla_up_proj, norm -> layernorm)",
            "enum": ["core_attn", "mla_up_proj", "layernorm", "moe_act", "moe", "mlp",
                     "shared_experts", "gdn_norm_out", "up_proj", "norm"]
        })
    }
}

/// `moe_token_dispatcher_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenDispatcher {
    Alltoall,
    Allgather,
    Flex,
}

/// The contract name for the dispatcher type.
pub type Dispatcher = TokenDispatcher;

/// `moe_flex_dispatcher_backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FlexBackend {
    Deepep,
    Hybridep,
}

/// The dispatcher implementation after defaults are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResolvedDispatcher {
    Alltoall,
    Allgather,
    Deepep,
    Hybridep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CpCommType {
    #[serde(rename = "p2p")]
    P2p,
    #[serde(rename = "a2a")]
    A2a,
    #[serde(rename = "allgather", alias = "all_gather")]
    Allgather,
    #[serde(rename = "a2a+p2p")]
    A2aP2p,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FsdpStrategy {
    NoShard,
    Optim,
    OptimGrads,
    OptimGradsParams,
}

/// Element type of an optimizer buffer (Megatron's precision-aware optimizer settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BufferDtype {
    #[serde(alias = "fp32", alias = "torch.float32")]
    Float32,
    #[serde(alias = "bf16", alias = "torch.bfloat16")]
    Bfloat16,
    #[serde(alias = "fp16", alias = "torch.float16")]
    Float16,
    #[serde(alias = "fp8", alias = "uint8")]
    Float8,
}

impl BufferDtype {
    pub fn bytes(self) -> f64 {
        match self {
            BufferDtype::Float32 => 4.0,
            BufferDtype::Bfloat16 | BufferDtype::Float16 => 2.0,
            BufferDtype::Float8 => 1.0,
        }
    }
}

/// Optimizer algorithm (Megatron's `optimizer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    Adam,
    Sgd,
    Muon,
    /// Muon with its state distributed layer-wise over the data-parallel ranks.
    DistMuon,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CudaGraphImpl {
    None,
    Local,
    TransformerEngine,
    /// One graph over the whole forward and backward (Megatron-Core's name for `local` with
    /// the `full_iteration` scope).
    FullIteration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CudaGraphScope {
    Attn,
    Mlp,
    Moe,
    MoeRouter,
    MoePreprocess,
    Mamba,
    FullIteration,
}

/// A model card id, or a HuggingFace `config.json` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ModelSpec {
    Id(String),
    HfConfig(Value),
}

/// One training configuration. Every field is optional; defaults follow Megatron and the
/// skills (see the accessor methods).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_distributed_optimizer: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_megatron_fsdp: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_sharding_strategy: Option<FsdpStrategy>,
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
    /// Precision-aware optimizer buffer types (fp32 master weights and BF16 moments when
    /// `use_precision_aware_optimizer` is on and these are unset).
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
    /// Core attention in FP8 (Transformer Engine's FP8 fused attention); only meaningful with
    /// an FP8 precision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_dot_product_attention: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_graph_impl: Option<CudaGraphImpl>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_graph_scope: Option<Vec<CudaGraphScope>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload_modules: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    /// Settings read from a command line or override file that the cost model does not use.
    #[serde(skip)]
    #[schemars(skip)]
    pub ignored_keys: Vec<String>,
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
    "delay_wgrad_compute",
    "tp_comm_overlap",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "use_distributed_optimizer",
    "use_megatron_fsdp",
    "data_parallel_sharding_strategy",
    "use_precision_aware_optimizer",
    "grad_reduce_in_fp32",
    "accumulate_allreduce_grads_in_fp32",
    "optimizer",
    "main_params_dtype",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "optimizer_cpu_offload",
    "optimizer_offload_fraction",
    "linear_cross_entropy",
    "cross_entropy_loss_fusion",
    "mtp_num_layers",
    "fp8_param_gather",
    "fp8_param",
    "fp8_dot_product_attention",
    "cuda_graph_impl",
    "cuda_graph_scope",
    "offload_modules",
    "pipeline_model_parallel_layout",
    "num_layers_in_first_pipeline_stage",
    "decoder_first_pipeline_num_layers",
    "num_layers_in_last_pipeline_stage",
    "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
];

const LIST_KEYS: &[&str] = &["recompute_modules", "cuda_graph_scope", "offload_modules"];

/// Megatron-Bridge top-level sections whose known keys are lifted into the flat config.
const BRIDGE_SECTIONS: &[&str] = &[
    "model",
    "train",
    "optimizer",
    "ddp",
    "dataset",
    "comm_overlap",
    "mixed_precision",
    "checkpoint",
    "logger",
    "scheduler",
    "dist",
    "tokenizer",
    "rng",
    "profiling",
    "ft",
    "straggler",
    "nvrx_straggler",
    "rerun_state_machine",
    "inprocess_restart",
    "peft",
];

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

fn is_known(key: &str) -> bool {
    KNOWN_KEYS.contains(&key)
}

/// Does this `model:` object look like a Megatron-Bridge model section (as opposed to a
/// HuggingFace config.json)?
fn is_bridge_model_section(obj: &Map<String, Value>) -> bool {
    if obj.contains_key("num_hidden_layers") || obj.contains_key("architectures") {
        return false;
    }
    obj.keys()
        .any(|k| is_known(k) && k != "seq_length" && k != "model")
        || obj.contains_key("num_layers")
}

/// Map Megatron-Bridge `mixed_precision` recipe names to a precision.
fn precision_from_recipe_name(name: &str) -> Option<Precision> {
    let n = name.to_ascii_lowercase();
    if n.contains("nvfp4") || n.contains("fp4") {
        Some(Precision::Nvfp4)
    } else if n.contains("mx") {
        Some(Precision::Mxfp8)
    } else if n.contains("block") || n.contains("sc") && n.contains("fp8") && n.contains("sub") {
        Some(Precision::Fp8Blockwise)
    } else if n.contains("current") || n.contains("_cs") || n.contains("tensorwise") {
        Some(Precision::Fp8Tensorwise)
    } else if n.contains("delayed") {
        Some(Precision::Fp8Delayed)
    } else if n.contains("fp8") {
        Some(Precision::Fp8Blockwise)
    } else if n.contains("bf16") {
        Some(Precision::Bf16)
    } else {
        None
    }
}

impl TrainingConfig {
    /// Read a flat config or a Megatron-Bridge style nested override file from YAML.
    pub fn from_yaml_str(text: &str) -> Result<TrainingConfig, ConfigError> {
        let value: Value =
            serde_yaml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        Self::from_json_value(&value)
    }

    /// Read a flat config or a Megatron-Bridge style nested override object.
    pub fn from_json_value(value: &Value) -> Result<TrainingConfig, ConfigError> {
        let obj = match value {
            Value::Object(o) => o,
            Value::Null => return Ok(TrainingConfig::default()),
            _ => {
                return Err(ConfigError::Parse(
                    "a training configuration must be a mapping of keys to values".into(),
                ))
            }
        };
        let mut flat = Map::new();
        let mut ignored = Vec::new();
        for (key, val) in obj {
            let section = BRIDGE_SECTIONS.contains(&key.as_str()) && val.is_object();
            let nested_model = key == "model"
                && val
                    .as_object()
                    .map(is_bridge_model_section)
                    .unwrap_or(false);
            if section && (key != "model" || nested_model) {
                if let Some(inner) = val.as_object() {
                    lift_section(key, inner, &mut flat, &mut ignored);
                }
            } else if key == "mixed_precision" {
                if let Some(p) = val.as_str().and_then(precision_from_recipe_name) {
                    flat.insert(
                        "precision".into(),
                        serde_json::to_value(p).unwrap_or_default(),
                    );
                } else {
                    ignored.push(format!("mixed_precision={val}"));
                }
            } else if is_known(key) {
                flat.insert(key.clone(), val.clone());
            } else {
                return Err(ConfigError::UnknownKey {
                    key: key.clone(),
                    suggestion: closest_key(key),
                });
            }
        }
        let mut cfg: TrainingConfig = serde_json::from_value(Value::Object(flat.clone()))
            .map_err(|e| describe_serde_error(&flat, e))?;
        cfg.ignored_keys = ignored;
        Ok(cfg)
    }

    // ---- resolved values (defaults applied) ----
    pub fn tp(&self) -> u32 {
        self.tensor_model_parallel_size.unwrap_or(1)
    }
    pub fn pp(&self) -> u32 {
        self.pipeline_model_parallel_size.unwrap_or(1)
    }
    pub fn vpp(&self) -> u32 {
        self.virtual_pipeline_model_parallel_size.unwrap_or(1)
    }
    pub fn cp(&self) -> u32 {
        self.context_parallel_size.unwrap_or(1)
    }
    pub fn ep(&self) -> u32 {
        self.expert_model_parallel_size.unwrap_or(1)
    }
    /// Defaults to 1 (the MoE recipes' choice), not Megatron-LM's fallback to TP.
    pub fn etp(&self) -> u32 {
        self.expert_tensor_parallel_size.unwrap_or(1)
    }
    pub fn mbs(&self) -> u32 {
        self.micro_batch_size.unwrap_or(1)
    }
    pub fn precision(&self) -> Precision {
        self.precision.unwrap_or_default()
    }
    pub fn sequence_parallel(&self) -> bool {
        self.sequence_parallel.unwrap_or(self.tp() > 1)
    }
    pub fn recompute_modules(&self) -> &[RecomputeModule] {
        self.recompute_modules.as_deref().unwrap_or(&[])
    }
    pub fn has_recompute(&self, module: &RecomputeModule) -> bool {
        self.recompute_granularity == Some(RecomputeGranularity::Selective)
            && self.recompute_modules().contains(module)
    }
    pub fn full_recompute(&self) -> bool {
        self.recompute_granularity == Some(RecomputeGranularity::Full)
    }
    pub fn distributed_optimizer(&self) -> bool {
        self.use_distributed_optimizer.unwrap_or(true)
    }
    /// Optimizer state bytes per parameter: master weights plus the algorithm's moments.
    pub fn optimizer_state_bytes(&self) -> f64 {
        let aware = self.use_precision_aware_optimizer.unwrap_or(false);
        let pick = |set: Option<BufferDtype>, aware_default: f64| -> f64 {
            match set {
                Some(d) if aware => d.bytes(),
                _ if aware => aware_default,
                _ => 4.0,
            }
        };
        let master = pick(self.main_params_dtype, 4.0);
        match self.optimizer.unwrap_or(OptimizerKind::Adam) {
            OptimizerKind::Adam => {
                master + pick(self.exp_avg_dtype, 2.0) + pick(self.exp_avg_sq_dtype, 2.0)
            }
            // One momentum buffer.
            OptimizerKind::Sgd | OptimizerKind::Muon | OptimizerKind::DistMuon => {
                master + pick(self.exp_avg_dtype, 2.0)
            }
        }
    }
    /// Whether optimizer state is sharded over data-parallel ranks without FSDP.
    pub fn optimizer_sharded(&self) -> bool {
        self.distributed_optimizer() || self.optimizer == Some(OptimizerKind::DistMuon)
    }
    /// Bytes per gradient element in the gradient buffers (fp32 unless turned off).
    pub fn gradient_bytes(&self) -> f64 {
        if self.grad_reduce_in_fp32.unwrap_or(true) {
            4.0
        } else {
            2.0
        }
    }
    pub fn fsdp_strategy(&self) -> Option<FsdpStrategy> {
        if self.use_megatron_fsdp.unwrap_or(false) {
            Some(
                self.data_parallel_sharding_strategy
                    .unwrap_or(FsdpStrategy::OptimGradsParams),
            )
        } else {
            None
        }
    }
    /// Fraction of optimizer state moved to host memory.
    pub fn offload_fraction(&self) -> f64 {
        if self.optimizer_cpu_offload.unwrap_or(false) {
            self.optimizer_offload_fraction
                .unwrap_or(1.0)
                .clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
    pub fn ep_overlap_chunks(&self) -> u32 {
        self.moe_ep_overlap_chunks.unwrap_or(1).max(1)
    }
    pub fn offloads(&self, module: &str) -> bool {
        self.offload_modules
            .as_deref()
            .unwrap_or(&[])
            .iter()
            .any(|m| m == module)
    }
    /// What CUDA graphs capture. An implementation with no scope list captures whole layers
    /// (Megatron-Core's default); `full_iteration` captures everything.
    pub fn cuda_graph_scopes(&self) -> &[CudaGraphScope] {
        const WHOLE_LAYER: &[CudaGraphScope] = &[
            CudaGraphScope::Attn,
            CudaGraphScope::Mlp,
            CudaGraphScope::Moe,
        ];
        const FULL_ITERATION: &[CudaGraphScope] = &[CudaGraphScope::FullIteration];
        match self.cuda_graph_impl {
            Some(CudaGraphImpl::Local) | Some(CudaGraphImpl::TransformerEngine) => {
                match self.cuda_graph_scope.as_deref() {
                    None | Some([]) => WHOLE_LAYER,
                    Some(scopes) => scopes,
                }
            }
            Some(CudaGraphImpl::FullIteration) => FULL_ITERATION,
            _ => &[],
        }
    }
    /// Resolved dispatcher, given the hardware's default.
    pub fn dispatcher(&self, default: ResolvedDispatcher) -> ResolvedDispatcher {
        match self.moe_token_dispatcher_type {
            Some(TokenDispatcher::Alltoall) => ResolvedDispatcher::Alltoall,
            Some(TokenDispatcher::Allgather) => ResolvedDispatcher::Allgather,
            Some(TokenDispatcher::Flex) => match self.moe_flex_dispatcher_backend {
                Some(FlexBackend::Hybridep) => ResolvedDispatcher::Hybridep,
                Some(FlexBackend::Deepep) => ResolvedDispatcher::Deepep,
                None => match default {
                    ResolvedDispatcher::Hybridep => ResolvedDispatcher::Hybridep,
                    _ => ResolvedDispatcher::Deepep,
                },
            },
            None => match self.moe_flex_dispatcher_backend {
                Some(FlexBackend::Hybridep) => ResolvedDispatcher::Hybridep,
                Some(FlexBackend::Deepep) => ResolvedDispatcher::Deepep,
                None => default,
            },
        }
    }
}

fn lift_section(
    section: &str,
    inner: &Map<String, Value>,
    flat: &mut Map<String, Value>,
    ignored: &mut Vec<String>,
) {
    for (k, v) in inner {
        if section == "mixed_precision" && (k == "fp8_recipe" || k == "fp8") {
            if let Some(p) = v.as_str().and_then(|s| {
                let s = s.to_ascii_lowercase();
                match s.as_str() {
                    "delayed" => Some(Precision::Fp8Delayed),
                    "tensorwise" => Some(Precision::Fp8Tensorwise),
                    "blockwise" => Some(Precision::Fp8Blockwise),
                    "mxfp8" => Some(Precision::Mxfp8),
                    _ => None,
                }
            }) {
                flat.insert(
                    "precision".into(),
                    serde_json::to_value(p).unwrap_or_default(),
                );
                continue;
            }
        }
        if section == "mixed_precision" && (k == "fp4" || k == "fp4_recipe") && !v.is_null() {
            flat.insert(
                "precision".into(),
                serde_json::to_value(Precision::Nvfp4).unwrap_or_default(),
            );
            continue;
        }
        if k != "model" && is_known(k) {
            flat.insert(k.clone(), v.clone());
        } else {
            ignored.push(format!("{section}.{k}"));
        }
    }
}

fn describe_serde_error(flat: &Map<String, Value>, err: serde_json::Error) -> ConfigError {
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

/// Split a command line into words (handles quotes and backslash-newline continuations).
fn shell_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => current.push(c),
            (None, '\'') | (None, '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(next) = chars.next() {
                    if next != '\n' {
                        current.push(next);
                        in_word = true;
                    }
                }
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            (None, c) => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(current);
    }
    words
}

fn scalar_value(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    if let Ok(f) = text.parse::<f64>() {
        return Value::from(f);
    }
    match text {
        "true" | "True" => Value::Bool(true),
        "false" | "False" => Value::Bool(false),
        "null" | "None" => Value::Null,
        _ => Value::String(text.to_string()),
    }
}

/// Read a Megatron-LM command line (`--tensor-model-parallel-size 2 --seq-length 131072 ...`).
/// Flags the cost model does not use are listed in `ignored_keys`.
pub fn parse_megatron_args(text: &str) -> Result<TrainingConfig, ConfigError> {
    let words = shell_words(text);
    let mut flat = Map::new();
    let mut ignored = Vec::new();
    let mut fp8_recipe: Option<String> = None;
    let mut fp8_format = false;
    let mut fp4 = false;
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        i += 1;
        let Some(flag) = word.strip_prefix("--") else {
            ignored.push(word.clone());
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.replace('-', "_"), Some(v.to_string())),
            None => (flag.replace('-', "_"), None),
        };
        let mut values: Vec<String> = inline.into_iter().collect();
        while i < words.len() && !words[i].starts_with("--") {
            values.push(words[i].clone());
            i += 1;
        }
        let key = match name.as_str() {
            "world_size" => "num_gpus".to_string(),
            // Megatron-LM's current name for the interleaving degree.
            "num_virtual_stages_per_pipeline_rank" => {
                "virtual_pipeline_model_parallel_size".to_string()
            }
            "moe_enable_deepep" => {
                flat.insert("moe_token_dispatcher_type".into(), "flex".into());
                flat.insert("moe_flex_dispatcher_backend".into(), "deepep".into());
                continue;
            }
            "fp8_recipe" => {
                fp8_recipe = values.first().cloned();
                continue;
            }
            "fp8_format" | "fp8" => {
                fp8_format = true;
                continue;
            }
            "fp4_format" | "fp4_recipe" | "fp4" => {
                fp4 = true;
                continue;
            }
            "bf16" => {
                continue;
            }
            "cross_entropy_fusion_impl" => {
                flat.insert("cross_entropy_loss_fusion".into(), Value::Bool(true));
                continue;
            }
            _ => name.clone(),
        };
        if let Some(positive) = key.strip_prefix("no_") {
            if is_known(positive) {
                flat.insert(positive.to_string(), Value::Bool(false));
                continue;
            }
        }
        if !is_known(&key) || key == "model" {
            let shown = if values.is_empty() {
                format!("--{}", flag)
            } else {
                format!("--{} {}", flag, values.join(" "))
            };
            ignored.push(shown);
            continue;
        }
        let value = if LIST_KEYS.contains(&key.as_str()) {
            Value::Array(values.iter().map(|v| Value::String(v.clone())).collect())
        } else if values.is_empty() {
            Value::Bool(true)
        } else if values.len() == 1 {
            scalar_value(&values[0])
        } else {
            return Err(ConfigError::InvalidValue {
                key: format!("--{}", flag),
                message: format!("expected one value, got {}", values.join(" ")),
            });
        };
        flat.insert(key, value);
    }
    if fp4 {
        flat.insert("precision".into(), "nvfp4".into());
    } else if fp8_format || fp8_recipe.is_some() {
        let p = match fp8_recipe.as_deref().unwrap_or("delayed") {
            "tensorwise" => "fp8-tensorwise",
            "blockwise" => "fp8-blockwise",
            "mxfp8" => "mxfp8",
            _ => "fp8-delayed",
        };
        flat.insert("precision".into(), p.into());
    }
    let mut cfg: TrainingConfig = serde_json::from_value(Value::Object(flat.clone()))
        .map_err(|e| describe_serde_error(&flat, e))?;
    cfg.ignored_keys = ignored;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: serde_json::Value) -> TrainingConfig {
        TrainingConfig::from_json_value(&json).expect("test config parses")
    }

    #[test]
    fn optimizer_state_bytes_follow_algorithm_and_dtypes() {
        // Plain Adam: fp32 master weights + two fp32 moments.
        assert_eq!(cfg(serde_json::json!({})).optimizer_state_bytes(), 12.0);
        // Precision-aware with nothing set: fp32 master + bf16 moments.
        let aware = cfg(serde_json::json!({"use_precision_aware_optimizer": true}));
        assert_eq!(aware.optimizer_state_bytes(), 8.0);
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
    }
}
