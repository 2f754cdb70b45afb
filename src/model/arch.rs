//! Model architecture at the HuggingFace level, as stored in `cards/models/<id>.yaml`
//! or mapped from a user's `config.json` the way Megatron-Bridge maps it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Sequence mixer of one decoder layer: an attention flavour, a Mamba-2 state-space mixer, or
/// none (an MLP-only or MoE-only layer of a hybrid model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKind {
    /// Causal softmax attention over the whole sequence (GQA, MHA or MLA).
    Full,
    /// Gated DeltaNet linear attention (no s² term).
    Linear,
    /// Causal softmax attention limited to `sliding_window` previous tokens.
    Sliding,
    /// Mamba-2 state-space mixer (no s² term).
    Mamba,
    /// No sequence mixer: a hybrid model's MLP-only or MoE-only layer.
    Absent,
}

impl AttentionKind {
    /// Whether the layer runs softmax attention (full or sliding window).
    pub fn is_softmax(self) -> bool {
        matches!(self, AttentionKind::Full | AttentionKind::Sliding)
    }
}

/// Feed-forward block of one decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FfnKind {
    /// A dense MLP.
    Dense,
    /// A mixture-of-experts block (routed experts, and shared experts where the model has them).
    Moe,
    /// No feed-forward block: a hybrid model's mixer-only layer.
    Absent,
}

/// Mamba-2 mixer dimensions (Megatron-Core's `MambaMixer`; HF `nemotron_h`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MambaDims {
    /// SSM heads (`mamba_num_heads`).
    pub num_heads: u64,
    /// Channels per head (`mamba_head_dim`).
    pub head_dim: u64,
    /// State size per group (`mamba_state_dim`, HF `ssm_state_size`).
    pub state_dim: u64,
    /// Groups sharing B and C (`mamba_num_groups`, HF `n_groups`).
    pub num_groups: u64,
    /// Depthwise convolution width (HF `conv_kernel`).
    #[serde(default = "default_conv_kernel")]
    pub conv_kernel_dim: u64,
}

fn default_conv_kernel() -> u64 {
    4
}

impl MambaDims {
    /// Inner width: heads × head dim (x, z and the output each have this width).
    pub fn inner_width(&self) -> f64 {
        (self.num_heads * self.head_dim) as f64
    }

    /// Width of B and C together: two per group of `state_dim`.
    pub fn state_width(&self) -> f64 {
        2.0 * (self.num_groups * self.state_dim) as f64
    }

    /// Output width of the input projection: z, x, B, C and one dt per head.
    pub fn in_proj_width(&self) -> f64 {
        2.0 * self.inner_width() + self.state_width() + self.num_heads as f64
    }

    /// Channels of the depthwise convolution: x, B and C.
    pub fn conv_channels(&self) -> f64 {
        self.inner_width() + self.state_width()
    }
}

/// Multi-head latent attention ranks (DeepSeek-V3 style).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MlaDims {
    /// Query down-projection rank; `None` means a direct h -> heads·(nope+rope) projection.
    #[serde(default)]
    pub q_lora_rank: Option<u64>,
    pub kv_lora_rank: u64,
    /// Non-rotary part of the query/key head dimension.
    pub qk_head_dim: u64,
    /// Rotary part of the query/key head dimension.
    pub qk_pos_emb_head_dim: u64,
    pub v_head_dim: u64,
}

impl MlaDims {
    /// Query/key head dim: the non-rotary and rotary parts together.
    pub fn qk_width(&self) -> f64 {
        (self.qk_head_dim + self.qk_pos_emb_head_dim) as f64
    }
}

/// Gated DeltaNet (linear attention) dimensions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GatedDeltaNetDims {
    pub num_key_heads: u64,
    pub num_value_heads: u64,
    pub key_head_dim: u64,
    pub value_head_dim: u64,
    pub conv_kernel_dim: u64,
}

impl GatedDeltaNetDims {
    /// Query (and key) width: key heads × key head dim.
    pub fn key_width(&self) -> f64 {
        (self.key_head_dim * self.num_key_heads) as f64
    }

    /// Value width: value heads × value head dim.
    pub fn value_width(&self) -> f64 {
        (self.value_head_dim * self.num_value_heads) as f64
    }

    /// Output width of the input projection: q, k, v, the output gate z (value width), and β
    /// and α (one per value head).
    pub fn in_proj_width(&self) -> f64 {
        2.0 * self.key_width() + 2.0 * self.value_width() + 2.0 * self.num_value_heads as f64
    }
}

/// Mixture-of-experts feed-forward settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MoeDims {
    pub num_experts: u64,
    pub top_k: u64,
    /// FFN width of one routed expert.
    pub moe_ffn_hidden_size: u64,
    /// Total FFN width of the shared expert(s); 0 when there is none.
    #[serde(default)]
    pub shared_expert_ffn_hidden_size: u64,
    /// Leading layers that use the dense FFN instead of MoE (`first_k_dense_replace`).
    #[serde(default)]
    pub first_k_dense_layers: u32,
    /// Routed experts carry biases on both linear layers (GPT-OSS). Megatron-Core adds the
    /// second one after the grouped GEMM, scaled by the routing probability, per local expert
    /// in FP32 (`TEGroupedMLP._apply_bias`).
    #[serde(default)]
    pub expert_bias: bool,
    /// Group-limited routing (HF `n_group` / `topk_group`, Megatron-Core's
    /// `moe_router_num_groups` / `moe_router_group_topk`): each token's experts come from its
    /// best few groups of experts; `None` routes over all experts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_groups: Option<RouterGroups>,
}

/// Experts split into `num_groups` equal groups in expert order (so in EP-rank order); each
/// token takes its top-k experts from its `group_topk` best groups (Megatron-Core's
/// `group_limited_topk`). DeepSeek-V3 sets one group per node so that a token reaches at most
/// `group_topk` nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouterGroups {
    pub num_groups: u64,
    pub group_topk: u64,
}

/// Group-limited routing from HF's `n_group` / `topk_group`: one group (`n_group: 1`, what
/// Megatron-Bridge writes for "not set") or every group selected limits nothing.
fn router_groups(
    num_groups: Option<u64>,
    group_topk: Option<u64>,
) -> Result<Option<RouterGroups>, ArchError> {
    match (num_groups, group_topk) {
        (Some(num_groups), Some(group_topk)) if num_groups > 1 && group_topk < num_groups => {
            Ok(Some(RouterGroups {
                num_groups,
                group_topk,
            }))
        }
        (Some(num_groups), None) if num_groups > 1 => Err(ArchError::Missing {
            field: "topk_group".into(),
            hint: format!(
                "n_group {num_groups} sets group-limited routing; give topk_group (the groups each token may use), or n_group 1 for none"
            ),
        }),
        _ => Ok(None),
    }
}

/// Activation of the MLP and experts (of the gate, in a gated unit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MlpActivation {
    /// SiLU (SwiGLU when gated): Llama, Qwen, DeepSeek, Mixtral.
    #[default]
    Silu,
    /// x·sigmoid(1.702·x) (a GEGLU variant when gated): GPT-OSS as Megatron builds it.
    QuickGelu,
    /// GELU (GEGLU when gated).
    Gelu,
    /// ReLU squared, in a two-matrix MLP (Nemotron-H, Nemotron 3: HF `relu2`).
    SquaredRelu,
}

/// Architecture of a decoder-only transformer (dense or MoE).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Architecture {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub family: String,
    #[serde(default)]
    pub display_name: String,
    #[serde(default)]
    pub source: String,
    /// Other names the model goes by, such as the prefix of Megatron-Bridge's recipe names
    /// when it is not the card's id (`moonlight_16b_pretrain_config`: `moonlight_16b`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    pub num_layers: u32,
    pub hidden_size: u64,
    pub vocab_size: u64,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    pub num_attention_heads: u64,
    /// KV heads (GQA groups); `None` means one KV head per query head.
    #[serde(default)]
    pub num_query_groups: Option<u64>,
    /// Per-head dimension (`kv_channels`); `None` means hidden / heads.
    #[serde(default)]
    pub head_dim: Option<u64>,
    /// Sigmoid output gate on attention (Qwen3-Next, Qwen3.5): one extra heads·head_dim projection.
    #[serde(default)]
    pub attention_output_gate: bool,
    #[serde(default)]
    pub mla: Option<MlaDims>,
    #[serde(default)]
    pub linear_attention: Option<GatedDeltaNetDims>,
    /// Mamba-2 mixer dimensions (`mamba` layers of the attention pattern, `M` of a hybrid
    /// pattern).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba: Option<MambaDims>,
    /// Attention kind per layer, repeated over the depth; empty means all `full`.
    #[serde(default)]
    pub attention_pattern: Vec<AttentionKind>,
    /// A hybrid model's layers, one symbol each, as Megatron-Core's `hybrid_layer_pattern`
    /// (HF `hybrid_override_pattern`) writes them: `M` a Mamba-2 mixer, `*` softmax attention,
    /// `-` a dense MLP, `E` an MoE block, each a layer of its own
    /// (megatron/core/models/hybrid/hybrid_layer_allocation.py `Symbols`). Its length is
    /// `num_layers`; it replaces `attention_pattern` and `first_k_dense_layers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hybrid_layer_pattern: Option<String>,
    #[serde(default)]
    pub sliding_window: Option<u64>,
    /// Dense FFN width (dense layers only).
    #[serde(default)]
    pub ffn_hidden_size: u64,
    /// SwiGLU-style gated MLP (three matrices) rather than two.
    #[serde(default = "default_true")]
    pub gated_linear_unit: bool,
    /// The MLP's activation. It does not change the FLOPs, but some FLOPs counters depend on it
    /// (`flops::CountingRules`).
    #[serde(default)]
    pub mlp_activation: MlpActivation,
    /// Clamp of the gated unit's inputs before the activation (GPT-OSS: 7.0, `swiglu_limit`;
    /// Megatron-Core's `activation_func_clamp_value`), run as separate element-wise kernels.
    /// The time model prices it in the routed experts only (a dense MLP's clamp is not
    /// counted; no card has one).
    #[serde(default)]
    pub activation_clamp: Option<f64>,
    #[serde(default)]
    pub moe: Option<MoeDims>,
    /// Multi-token-prediction layers (each a copy of the last layer's type).
    #[serde(default)]
    pub mtp_num_layers: u32,
}

fn default_true() -> bool {
    true
}

/// An architecture [`Architecture::validate`] accepted. A layout search evaluates one
/// architecture thousands of times: it checks it once and evaluates this.
#[derive(Debug, Clone, Copy)]
pub struct ValidArchitecture<'a>(&'a Architecture);

impl<'a> ValidArchitecture<'a> {
    pub fn check(arch: &'a Architecture) -> Result<Self, ArchError> {
        arch.validate().map(|()| Self(arch))
    }

    pub fn get(&self) -> &'a Architecture {
        self.0
    }
}

/// Errors from reading or checking an architecture.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArchError {
    #[error("model config is missing `{field}`: {hint}")]
    Missing { field: String, hint: String },
    #[error("model config field `{field}` is invalid: {reason}")]
    Invalid { field: String, reason: String },
}

/// Number of distinct layer kinds: sequence mixer (5) × feed-forward block (3).
pub const LAYER_KINDS: usize = 15;

const MIXERS: [AttentionKind; 5] = [
    AttentionKind::Full,
    AttentionKind::Linear,
    AttentionKind::Sliding,
    AttentionKind::Mamba,
    AttentionKind::Absent,
];
const FFNS: [FfnKind; 3] = [FfnKind::Dense, FfnKind::Moe, FfnKind::Absent];

/// Index of a layer kind in `[u32; LAYER_KINDS]` tables.
pub fn layer_kind_index(attention: AttentionKind, ffn: FfnKind) -> usize {
    let a = MIXERS.iter().position(|&m| m == attention).unwrap_or(0);
    let f = FFNS.iter().position(|&k| k == ffn).unwrap_or(0);
    a * FFNS.len() + f
}

/// Inverse of [`layer_kind_index`].
pub fn layer_kind_of(index: usize) -> (AttentionKind, FfnKind) {
    (
        MIXERS[(index / FFNS.len()).min(MIXERS.len() - 1)],
        FFNS[index % FFNS.len()],
    )
}

/// A hybrid pattern symbol's layer (Megatron-Core's `Symbols`), `None` for a symbol this model
/// does not price.
pub fn hybrid_symbol_kind(symbol: u8) -> Option<(AttentionKind, FfnKind)> {
    match symbol {
        b'M' => Some((AttentionKind::Mamba, FfnKind::Absent)),
        b'*' => Some((AttentionKind::Full, FfnKind::Absent)),
        b'-' => Some((AttentionKind::Absent, FfnKind::Dense)),
        b'E' => Some((AttentionKind::Absent, FfnKind::Moe)),
        _ => None,
    }
}

impl Architecture {
    /// Output width of standard attention's fused QKV projection: the query heads, keys and
    /// values of the KV groups, and the output gate where the model has one.
    pub fn qkv_width(&self) -> f64 {
        let n_a = self.num_attention_heads as f64;
        let d = self.head_dim() as f64;
        let gate = if self.attention_output_gate {
            n_a * d
        } else {
            0.0
        };
        n_a * d + 2.0 * self.kv_heads() as f64 * d + gate
    }

    /// Whether some decoder layer has a dense MLP (dense models, or MoE models whose first
    /// layers are dense); `mlp` recompute only does something then.
    pub fn has_dense_mlp_layers(&self) -> bool {
        if let Some(pattern) = &self.hybrid_layer_pattern {
            return pattern.contains('-');
        }
        self.ffn_hidden_size > 0 && self.moe.as_ref().is_none_or(|m| m.first_k_dense_layers > 0)
    }

    /// Whether an all-to-all CP group of `a2a` ranks can split the heads each TP rank holds:
    /// Transformer Engine's all-to-all gives every rank 1/`a2a` of the query heads and of the
    /// KV groups (MLA expands K and V per query head, so its groups are its heads).
    pub fn all_to_all_splits_heads(&self, tp: u64, a2a: u64) -> bool {
        let tp = tp.max(1);
        let heads = self.num_attention_heads / tp;
        let groups = if self.mla.is_some() {
            heads
        } else {
            self.kv_heads() / tp
        };
        heads > 0 && groups > 0 && heads.is_multiple_of(a2a) && groups.is_multiple_of(a2a)
    }

    pub fn kv_heads(&self) -> u64 {
        self.num_query_groups
            .unwrap_or(self.num_attention_heads)
            .max(1)
    }

    pub fn head_dim(&self) -> u64 {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Whether any layer runs softmax attention (not every layer Gated DeltaNet or Mamba).
    pub fn has_softmax_attention(&self) -> bool {
        if let Some(pattern) = &self.hybrid_layer_pattern {
            return pattern.contains('*');
        }
        self.attention_pattern.is_empty() || self.attention_pattern.iter().any(|k| k.is_softmax())
    }

    /// Whether some layer runs a Mamba-2 mixer.
    pub fn has_mamba_layers(&self) -> bool {
        self.mamba.is_some()
            && (self.attention_pattern.contains(&AttentionKind::Mamba)
                || self
                    .hybrid_layer_pattern
                    .as_ref()
                    .is_some_and(|p| p.contains('M')))
    }

    /// The query/key and value head dims the softmax-attention kernel takes (MLA: nope + rope
    /// for query/key, the value head dim).
    pub fn attention_head_dims(&self) -> (u64, u64) {
        match &self.mla {
            Some(m) => (m.qk_head_dim + m.qk_pos_emb_head_dim, m.v_head_dim),
            None => (self.head_dim(), self.head_dim()),
        }
    }

    /// [`Self::attention_head_dims`], or `None` when every layer is linear attention.
    pub fn softmax_head_dims(&self) -> Option<(u64, u64)> {
        self.has_softmax_attention()
            .then(|| self.attention_head_dims())
    }

    /// 3 for gated (SwiGLU) MLPs, 2 otherwise.
    pub fn mlp_matrices(&self) -> f64 {
        if self.gated_linear_unit {
            3.0
        } else {
            2.0
        }
    }

    /// The hybrid pattern's layer `layer`, when the model has a (valid) pattern.
    fn hybrid_layer(&self, layer: u32) -> Option<(AttentionKind, FfnKind)> {
        let pattern = self.hybrid_layer_pattern.as_ref()?;
        pattern
            .as_bytes()
            .get(layer as usize)
            .and_then(|&symbol| hybrid_symbol_kind(symbol))
    }

    pub fn attention_kind(&self, layer: u32) -> AttentionKind {
        if let Some((mixer, _)) = self.hybrid_layer(layer) {
            return mixer;
        }
        if self.attention_pattern.is_empty() {
            AttentionKind::Full
        } else {
            self.attention_pattern[layer as usize % self.attention_pattern.len()]
        }
    }

    /// The feed-forward block of decoder layer `layer` (0-based).
    pub fn ffn_kind(&self, layer: u32) -> FfnKind {
        if let Some((_, ffn)) = self.hybrid_layer(layer) {
            return ffn;
        }
        match &self.moe {
            Some(m) if layer >= m.first_k_dense_layers => FfnKind::Moe,
            _ => FfnKind::Dense,
        }
    }

    pub fn is_moe_layer(&self, layer: u32) -> bool {
        self.ffn_kind(layer) == FfnKind::Moe
    }

    /// Kind index of decoder layer `layer` (0-based).
    pub fn layer_kind(&self, layer: u32) -> usize {
        layer_kind_index(self.attention_kind(layer), self.ffn_kind(layer))
    }

    /// Kind of the MTP layers: a copy of the last decoder layer.
    pub fn mtp_layer_kind(&self) -> usize {
        self.layer_kind(self.num_layers.saturating_sub(1))
    }

    /// Count of each layer kind in decoder layers `[start, end)`: [`Self::layer_kind`] of
    /// every layer, counted per position of the attention pattern on each side of the first
    /// MoE layer (every evaluation counts each pipeline stage's layers this way).
    pub fn count_kinds(&self, start: u32, end: u32) -> [u32; LAYER_KINDS] {
        let mut counts = [0u32; LAYER_KINDS];
        let end = end.min(self.num_layers);
        if self.hybrid_layer_pattern.is_some() {
            for layer in start..end {
                counts[self.layer_kind(layer)] += 1;
            }
            return counts;
        }
        let first_moe = self
            .moe
            .as_ref()
            .map_or(u32::MAX, |m| m.first_k_dense_layers);
        let period = self.attention_pattern.len().max(1) as u32;
        // Layers below `x` whose index is `position` modulo the pattern's length.
        let below = |x: u32, position: u32| {
            if x > position {
                (x - position - 1) / period + 1
            } else {
                0
            }
        };
        for (lo, hi, moe) in [
            (start, end.min(first_moe), false),
            (start.max(first_moe), end, true),
        ] {
            if lo >= hi {
                continue;
            }
            for position in 0..period {
                let n = below(hi, position) - below(lo, position);
                let ffn = if moe { FfnKind::Moe } else { FfnKind::Dense };
                counts[layer_kind_index(self.attention_kind(position), ffn)] += n;
            }
        }
        counts
    }

    /// Structural checks every card and HF mapping must pass.
    pub fn validate(&self) -> Result<(), ArchError> {
        super::limits::check_architecture(self).map_err(|e| ArchError::Invalid {
            field: "model".into(),
            reason: e.to_string(),
        })?;
        let positive = [
            ("num_layers", u64::from(self.num_layers)),
            ("hidden_size", self.hidden_size),
            ("vocab_size", self.vocab_size),
            ("num_attention_heads", self.num_attention_heads),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ArchError::Invalid {
                    field: field.into(),
                    reason: "must be positive".into(),
                });
            }
        }
        if let Some(m) = &self.moe {
            if m.num_experts == 0 || m.top_k == 0 || m.top_k > m.num_experts {
                return Err(ArchError::Invalid {
                    field: "moe".into(),
                    reason: format!(
                        "need 0 < top_k ({}) <= num_experts ({})",
                        m.top_k, m.num_experts
                    ),
                });
            }
            if let Some(g) = &m.router_groups {
                if g.num_groups < 2
                    || g.group_topk == 0
                    || g.group_topk >= g.num_groups
                    || !m.num_experts.is_multiple_of(g.num_groups)
                {
                    return Err(ArchError::Invalid {
                        field: "moe.router_groups".into(),
                        reason: format!(
                            "need 0 < group_topk ({}) < num_groups ({}) and num_experts ({}) a multiple of num_groups; omit it for routing over all experts",
                            g.group_topk, g.num_groups, m.num_experts
                        ),
                    });
                }
            }
            if m.moe_ffn_hidden_size == 0 {
                return Err(ArchError::Invalid {
                    field: "moe.moe_ffn_hidden_size".into(),
                    reason: "must be positive".into(),
                });
            }
            if m.first_k_dense_layers > 0
                && self.ffn_hidden_size == 0
                && self.hybrid_layer_pattern.is_none()
            {
                return Err(ArchError::Invalid {
                    field: "ffn_hidden_size".into(),
                    reason:
                        "dense layers exist (first_k_dense_layers > 0) but ffn_hidden_size is 0"
                            .into(),
                });
            }
        } else if self.ffn_hidden_size == 0 && self.hybrid_layer_pattern.is_none() {
            return Err(ArchError::Invalid {
                field: "ffn_hidden_size".into(),
                reason: "a dense model needs a positive ffn_hidden_size".into(),
            });
        }
        self.validate_mixers()?;
        if self.attention_pattern.contains(&AttentionKind::Linear)
            && self.linear_attention.is_none()
        {
            return Err(ArchError::Missing {
                field: "linear_attention".into(),
                hint: "attention_pattern uses `linear` layers; give the Gated DeltaNet dims".into(),
            });
        }
        if self.attention_pattern.contains(&AttentionKind::Sliding)
            && self.sliding_window.unwrap_or(0) == 0
        {
            return Err(ArchError::Missing {
                field: "sliding_window".into(),
                hint: "attention_pattern uses `sliding` layers; give the window length".into(),
            });
        }
        let kv = self.kv_heads();
        if self.mla.is_none() && !self.num_attention_heads.is_multiple_of(kv) {
            return Err(ArchError::Invalid {
                field: "num_query_groups".into(),
                reason: format!(
                    "{} attention heads are not a multiple of {} KV heads",
                    self.num_attention_heads, kv
                ),
            });
        }
        Ok(())
    }

    /// Checks of the Mamba dims, the hybrid pattern and the attention pattern's mixers.
    fn validate_mixers(&self) -> Result<(), ArchError> {
        if self.attention_pattern.contains(&AttentionKind::Absent) {
            return Err(ArchError::Invalid {
                field: "attention_pattern".into(),
                reason: "`absent` is for a hybrid model's MLP-only layers; write such a model as `hybrid_layer_pattern`".into(),
            });
        }
        if let Some(m) = &self.mamba {
            let dims = [
                ("mamba.num_heads", m.num_heads),
                ("mamba.head_dim", m.head_dim),
                ("mamba.state_dim", m.state_dim),
                ("mamba.num_groups", m.num_groups),
                ("mamba.conv_kernel_dim", m.conv_kernel_dim),
            ];
            if let Some((field, _)) = dims.iter().find(|(_, v)| *v == 0) {
                return Err(ArchError::Invalid {
                    field: (*field).into(),
                    reason: "must be positive".into(),
                });
            }
            if !m.num_heads.is_multiple_of(m.num_groups) {
                return Err(ArchError::Invalid {
                    field: "mamba.num_groups".into(),
                    reason: format!(
                        "{} heads are not a multiple of {} groups",
                        m.num_heads, m.num_groups
                    ),
                });
            }
        }
        let mut mixers: Vec<AttentionKind> = self.attention_pattern.clone();
        let mut ffns: Vec<FfnKind> = Vec::new();
        if let Some(pattern) = &self.hybrid_layer_pattern {
            if !self.attention_pattern.is_empty() {
                return Err(ArchError::Invalid {
                    field: "attention_pattern".into(),
                    reason: "a model with a hybrid_layer_pattern takes each layer's mixer from it; leave attention_pattern empty".into(),
                });
            }
            if pattern.len() != self.num_layers as usize {
                return Err(ArchError::Invalid {
                    field: "hybrid_layer_pattern".into(),
                    reason: format!(
                        "{} symbols for {} layers; a hybrid model has one layer per symbol",
                        pattern.len(),
                        self.num_layers
                    ),
                });
            }
            for (i, symbol) in pattern.bytes().enumerate() {
                let Some((mixer, ffn)) = hybrid_symbol_kind(symbol) else {
                    return Err(ArchError::Invalid {
                        field: format!("hybrid_layer_pattern[{i}]"),
                        reason: format!(
                            "`{}` is not a layer this model prices (M Mamba-2, * attention, - MLP, E MoE)",
                            char::from(symbol)
                        ),
                    });
                };
                mixers.push(mixer);
                ffns.push(ffn);
            }
        }
        if mixers.contains(&AttentionKind::Mamba) && self.mamba.is_none() {
            return Err(ArchError::Missing {
                field: "mamba".into(),
                hint: "the model has Mamba-2 layers; give the mixer dims (num_heads, head_dim, state_dim, num_groups)".into(),
            });
        }
        if ffns.contains(&FfnKind::Moe) && self.moe.is_none() {
            return Err(ArchError::Missing {
                field: "moe".into(),
                hint: "hybrid_layer_pattern has MoE layers (`E`); give the experts".into(),
            });
        }
        if ffns.contains(&FfnKind::Dense) && self.ffn_hidden_size == 0 {
            return Err(ArchError::Invalid {
                field: "ffn_hidden_size".into(),
                reason: "hybrid_layer_pattern has MLP layers (`-`); give their width".into(),
            });
        }
        Ok(())
    }

    /// Map a HuggingFace `config.json` (optionally with a nested `text_config`) to an
    /// architecture, following Megatron-Bridge's field mapping.
    pub fn from_hf_config(config: &Value) -> Result<Architecture, ArchError> {
        let top = config.as_object().ok_or_else(|| ArchError::Invalid {
            field: "model".into(),
            reason: "a HuggingFace config must be a JSON object".into(),
        })?;
        let text = top.get("text_config").and_then(Value::as_object);
        let get = |key: &str| -> Option<&Value> {
            text.and_then(|t| t.get(key))
                .filter(|v| !v.is_null())
                .or_else(|| top.get(key).filter(|v| !v.is_null()))
        };
        let get_u64 = |key: &str| -> Option<u64> {
            get(key).and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f as u64)))
        };
        let first_u64 = |keys: &[&str]| keys.iter().find_map(|k| get_u64(k));
        let require = |key: &str| -> Result<u64, ArchError> {
            get_u64(key).ok_or_else(|| ArchError::Missing {
                field: key.into(),
                hint: "expected in the HuggingFace config.json (or its text_config)".into(),
            })
        };

        let num_layers = require("num_hidden_layers")?;
        // Checked before the narrowing below; the other dimensions are checked by `validate`.
        let layers = super::limits::LAYERS;
        layers
            .check("", Some(num_layers))
            .map_err(|e| ArchError::Invalid {
                field: "num_hidden_layers".into(),
                reason: e.to_string(),
            })?;
        let hidden_size = require("hidden_size")?;
        let vocab_size = require("vocab_size")?;
        let num_attention_heads = require("num_attention_heads")?;
        let model_type = get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("custom")
            .to_string();
        let display_name = get("_name_or_path")
            .and_then(Value::as_str)
            .or_else(|| {
                get("architectures")
                    .and_then(Value::as_array)
                    .and_then(|a| a.first())
                    .and_then(Value::as_str)
            })
            .unwrap_or(&model_type)
            .to_string();

        let num_experts = first_u64(&["n_routed_experts", "num_experts", "num_local_experts"]);
        let moe = match num_experts {
            Some(e) if e > 1 => {
                let expert_ffn = first_u64(&["moe_intermediate_size", "intermediate_size"])
                    .ok_or_else(|| ArchError::Missing {
                        field: "moe_intermediate_size".into(),
                        hint: "needed for MoE models".into(),
                    })?;
                let shared = first_u64(&[
                    "shared_expert_intermediate_size",
                    "moe_shared_expert_intermediate_size",
                ])
                .unwrap_or_else(|| {
                    get_u64("n_shared_experts")
                        .unwrap_or(0)
                        .saturating_mul(expert_ffn)
                });
                Some(MoeDims {
                    num_experts: e,
                    top_k: first_u64(&["num_experts_per_tok", "moe_topk"]).ok_or_else(|| {
                        ArchError::Missing {
                            field: "num_experts_per_tok".into(),
                            hint: "needed for MoE models".into(),
                        }
                    })?,
                    moe_ffn_hidden_size: expert_ffn,
                    shared_expert_ffn_hidden_size: shared,
                    first_k_dense_layers: get_u64("first_k_dense_replace")
                        .unwrap_or(0)
                        .min(num_layers) as u32,
                    // HF GPT-OSS experts hold `gate_up_proj_bias` and `down_proj_bias`;
                    // other families say so with `mlp_bias`.
                    expert_bias: get("mlp_bias")
                        .and_then(Value::as_bool)
                        .unwrap_or(model_type.starts_with("gpt_oss")),
                    router_groups: router_groups(get_u64("n_group"), get_u64("topk_group"))?,
                })
            }
            _ => None,
        };

        // Latent MoE (Nemotron 3 Super: the routed experts work on a projection of the hidden
        // state, `fc1_latent_proj` / `fc2_latent_proj` around the dispatch) is not priced.
        if get_u64("moe_latent_size").is_some() {
            return Err(ArchError::Invalid {
                field: "moe_latent_size".into(),
                reason: "latent MoE (experts on a projection of the hidden state) is not modelled, so this model cannot be priced".into(),
            });
        }
        let mla = match get_u64("kv_lora_rank") {
            Some(kv_lora_rank) => Some(MlaDims {
                q_lora_rank: get_u64("q_lora_rank"),
                kv_lora_rank,
                qk_head_dim: require("qk_nope_head_dim")?,
                qk_pos_emb_head_dim: require("qk_rope_head_dim")?,
                v_head_dim: require("v_head_dim")?,
            }),
            None => None,
        };

        let linear_attention = match get_u64("linear_num_value_heads") {
            Some(num_value_heads) => Some(GatedDeltaNetDims {
                num_key_heads: require("linear_num_key_heads")?,
                num_value_heads,
                key_head_dim: require("linear_key_head_dim")?,
                value_head_dim: require("linear_value_head_dim")?,
                conv_kernel_dim: get_u64("linear_conv_kernel_dim").unwrap_or(4),
            }),
            None => None,
        };

        let mut attention_pattern = Vec::new();
        if let Some(types) = get("layer_types").and_then(Value::as_array) {
            for (i, t) in types.iter().enumerate() {
                let kind = match t.as_str().unwrap_or("") {
                    "full_attention" | "attention" => AttentionKind::Full,
                    "linear_attention" => AttentionKind::Linear,
                    "sliding_attention" => AttentionKind::Sliding,
                    other => {
                        return Err(ArchError::Invalid {
                            field: format!("layer_types[{i}]"),
                            reason: format!(
                                "unknown layer type `{other}` (expected full_attention, linear_attention or sliding_attention)"
                            ),
                        })
                    }
                };
                attention_pattern.push(kind);
            }
        } else if let Some(interval) = get_u64("full_attention_interval") {
            // A pattern longer than the model repeats nothing; the bound keeps the
            // allocation below the layer limit.
            if interval > num_layers {
                return Err(ArchError::Invalid {
                    field: "full_attention_interval".into(),
                    reason: format!("{interval} is more than the {num_layers} layers"),
                });
            }
            if interval > 1 {
                attention_pattern = vec![AttentionKind::Linear; interval as usize - 1];
                attention_pattern.push(AttentionKind::Full);
            }
        }
        if attention_pattern.iter().all(|k| *k == AttentionKind::Full) {
            attention_pattern.clear();
        }
        let sliding_window = if attention_pattern.contains(&AttentionKind::Sliding) {
            get_u64("sliding_window")
        } else {
            None
        };

        let attention_output_gate = get("attn_output_gate")
            .and_then(Value::as_bool)
            .unwrap_or(model_type.starts_with("qwen3_next") || model_type.starts_with("qwen3_5"));
        // Nemotron-H names the MLP's activation `mlp_hidden_act` (`hidden_act` is the Mamba
        // mixer's there).
        let hidden_act = get("mlp_hidden_act")
            .or_else(|| get("hidden_act"))
            .and_then(Value::as_str)
            .unwrap_or("silu");
        let gated_linear_unit = !(hidden_act.starts_with("gelu") || hidden_act.starts_with("relu"))
            || model_type.contains("gemma");
        // GPT-OSS's config says "silu", but its gate is x·sigmoid(1.702·x) with the linear half
        // offset by 1, which Megatron builds as quick_gelu (Megatron-Bridge's GPT-OSS bridge).
        let mlp_activation = if model_type.starts_with("gpt_oss") {
            MlpActivation::QuickGelu
        } else if hidden_act.starts_with("gelu") {
            MlpActivation::Gelu
        } else if hidden_act == "relu2" {
            MlpActivation::SquaredRelu
        } else {
            MlpActivation::Silu
        };

        // Nemotron-H's Mamba-2 mixer and its layer pattern (Megatron-Bridge's `nemotron_h`
        // bridge: `mamba_num_heads`, `mamba_head_dim`, `ssm_state_size`, `n_groups`,
        // `conv_kernel`, `hybrid_override_pattern`).
        let mamba = match get_u64("mamba_num_heads") {
            Some(num_heads) => Some(MambaDims {
                num_heads,
                head_dim: require("mamba_head_dim")?,
                state_dim: require("ssm_state_size")?,
                num_groups: get_u64("n_groups").unwrap_or(1),
                conv_kernel_dim: get_u64("conv_kernel").unwrap_or(4),
            }),
            None => None,
        };
        let hybrid_layer_pattern = get("hybrid_override_pattern")
            .and_then(Value::as_str)
            .map(str::to_string);
        if hybrid_layer_pattern.is_some() {
            attention_pattern.clear();
        }
        let arch = Architecture {
            id: String::new(),
            family: model_type,
            display_name,
            source: "HuggingFace config.json".into(),
            aliases: Vec::new(),
            num_layers: num_layers as u32,
            hidden_size,
            vocab_size,
            tie_word_embeddings: get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            num_attention_heads,
            num_query_groups: get_u64("num_key_value_heads"),
            head_dim: first_u64(&["head_dim", "kv_channels"]),
            attention_output_gate,
            mla,
            linear_attention,
            mamba,
            attention_pattern,
            hybrid_layer_pattern,
            sliding_window,
            ffn_hidden_size: get_u64("intermediate_size").unwrap_or(0),
            gated_linear_unit,
            mlp_activation,
            activation_clamp: get("swiglu_limit")
                .and_then(Value::as_f64)
                .filter(|v| v.is_finite() && *v > 0.0),
            moe,
            mtp_num_layers: first_u64(&["num_nextn_predict_layers", "mtp_num_hidden_layers"])
                .unwrap_or(0)
                .min(u64::from(u32::MAX)) as u32,
        };
        arch.validate()?;
        Ok(arch)
    }
}
