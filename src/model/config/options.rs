//! The named choices a configuration makes (precision recipes, recompute, dispatchers, CP
//! communication, FSDP, buffer dtypes, optimizers, CUDA graphs, the model) and the names users
//! write for them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The name a user writes for a setting's value: its serde name (`fp8-blockwise`, `deepep`,
/// `optim_grads`), never the Rust one, for every text a person reads.
pub fn user_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// `Display` as the user-facing (serde) name.
macro_rules! display_as_user_name {
    ($($kind:ty),* $(,)?) => {$(
        impl std::fmt::Display for $kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&user_name(self))
            }
        }
    )*};
}

display_as_user_name!(
    Precision,
    RecomputeGranularity,
    RecomputeMethod,
    TokenDispatcher,
    FlexBackend,
    ResolvedDispatcher,
    CpCommType,
    FsdpStrategy,
    BufferDtype,
    OptimizerKind,
    CudaGraphImpl,
    CudaGraphScope,
    AttentionBackend,
);

/// Bytes an NVFP4 value takes: 4 bits, plus one FP8 (E4M3) scale per block of 16 values
/// (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", developer
/// blog, 2025; the per-tensor FP32 scale is negligible).
pub const NVFP4_BYTES_PER_VALUE: f64 = 0.5 + 1.0 / 16.0;

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

impl ResolvedDispatcher {
    /// The flex backend this dispatcher is (the deduplicating DeepEP/HybridEP kernels); `None`
    /// for the NCCL all-to-all and all-gather dispatchers.
    pub fn flex_backend(self) -> Option<FlexBackend> {
        match self {
            ResolvedDispatcher::Deepep => Some(FlexBackend::Deepep),
            ResolvedDispatcher::Hybridep => Some(FlexBackend::Hybridep),
            ResolvedDispatcher::Alltoall | ResolvedDispatcher::Allgather => None,
        }
    }
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

/// Megatron-Core's `attention_backend` (`AttnBackend`): which kernel runs the core attention.
/// `auto`, `fused` and `flash` run Transformer Engine's fused kernels; `unfused` runs Transformer
/// Engine's `UnfusedDotProductAttention` and `local` Megatron-Core's own `DotProductAttention`,
/// both of which materialise the attention scores (megatron/core/models/common/language_module/
/// language_module.py `_set_attention_backend`, Megatron-LM d98e8a64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttentionBackend {
    Flash,
    Fused,
    Unfused,
    Local,
    Auto,
}

impl AttentionBackend {
    /// Whether the backend computes the whole query × key score matrix in memory (a batched
    /// GEMM, a softmax, a batched GEMM) instead of a fused flash-style kernel.
    pub fn materialises_scores(self) -> bool {
        matches!(self, AttentionBackend::Unfused | AttentionBackend::Local)
    }

    /// The values Megatron-Core sets Transformer Engine's switches to for this backend, and
    /// requires of any the environment already sets (`NVTE_FLASH_ATTN`, `NVTE_FUSED_ATTN`,
    /// `NVTE_UNFUSED_ATTN`; `LanguageModule._set_attention_backend`).
    pub fn te_switches(self) -> [(&'static str, &'static str); 3] {
        let (flash, fused, unfused) = match self {
            AttentionBackend::Auto => ("1", "1", "1"),
            AttentionBackend::Flash => ("1", "0", "0"),
            AttentionBackend::Fused => ("0", "1", "0"),
            AttentionBackend::Unfused => ("0", "0", "1"),
            AttentionBackend::Local => ("0", "0", "0"),
        };
        [
            (ATTENTION_SWITCHES[0], flash),
            (ATTENTION_SWITCHES[1], fused),
            (ATTENTION_SWITCHES[2], unfused),
        ]
    }
}

/// Transformer Engine's attention-backend switches, the environment variables Megatron-Core
/// checks against `attention_backend`.
pub const ATTENTION_SWITCHES: [&str; 3] =
    ["NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN"];

/// The attention switches a launch sets in the environment, as written (Megatron-Core compares
/// the text: only `0` and `1` can match).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttentionEnv {
    #[serde(
        rename = "NVTE_FLASH_ATTN",
        default,
        deserialize_with = "env_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub flash: Option<String>,
    #[serde(
        rename = "NVTE_FUSED_ATTN",
        default,
        deserialize_with = "env_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub fused: Option<String>,
    #[serde(
        rename = "NVTE_UNFUSED_ATTN",
        default,
        deserialize_with = "env_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub unfused: Option<String>,
}

impl AttentionEnv {
    /// The switch named `name`, if it is one.
    pub fn slot(&mut self, name: &str) -> Option<&mut Option<String>> {
        let at = ATTENTION_SWITCHES.iter().position(|n| *n == name)?;
        [&mut self.flash, &mut self.fused, &mut self.unfused]
            .into_iter()
            .nth(at)
    }

    /// The switches that are set, by name.
    pub fn set(&self) -> Vec<(&'static str, &str)> {
        ATTENTION_SWITCHES
            .iter()
            .zip([&self.flash, &self.fused, &self.unfused])
            .filter_map(|(name, value)| value.as_deref().map(|v| (*name, v)))
            .collect()
    }
}

/// An environment value as its text: a string as is, a number or boolean as written.
fn env_text<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(Value::Bool(b)) => Ok(Some(b.to_string())),
        Some(other) => Err(serde::de::Error::custom(format!(
            "an environment variable's value is text such as \"0\", not {other}"
        ))),
    }
}

/// A model card id, or a HuggingFace `config.json` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ModelSpec {
    Id(String),
    HfConfig(Value),
}
