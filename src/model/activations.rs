//! Saved activations of one decoder layer, per token of the local (CP-sharded) sequence,
//! tensor by tensor (following the per-tensor accounting of Megatron's MoE/MLA memory
//! tools), and what each recompute or offload option removes.

use schemars::JsonSchema;
use serde::Serialize;

use super::arch::{
    layer_kind_of, Architecture, AttentionKind, FfnKind, GatedDeltaNetDims, MambaDims,
};
use super::config::{RecomputeModule, TrainingConfig};
use super::constants::{ScoreBytes, SoftmaxPath};

/// Bytes per local token saved by one layer, by module.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, JsonSchema)]
pub struct ActivationParts {
    /// The layer input (kept for the residual; the only tensor kept under full recompute).
    pub layer_input: f64,
    /// Outputs of the input and pre-MLP norms.
    pub layernorm: f64,
    /// Attention (or Gated DeltaNet) internals, the attention residual output and CP buffers.
    pub attention: f64,
    /// The attention probabilities (and dropout's tensors) of a backend that materialises the
    /// score matrix (`attention_backend` unfused or local); zero for fused attention.
    #[serde(default)]
    pub attention_scores: f64,
    /// Dense MLP internals (fc1 output, activation output).
    pub mlp: f64,
    /// Router probabilities and routing map, dispatched tokens, routed probabilities kept by
    /// the expert activation.
    pub moe_dispatch: f64,
    /// Routed-expert fc1 and activation outputs.
    pub moe_experts: f64,
    /// Shared-expert fc1 and activation outputs.
    pub shared_experts: f64,
}

impl ActivationParts {
    pub fn total(&self) -> f64 {
        self.layer_input
            + self.layernorm
            + self.attention
            + self.attention_scores
            + self.mlp
            + self.moe_dispatch
            + self.moe_experts
            + self.shared_experts
    }

    pub fn scaled(&self, factor: f64) -> ActivationParts {
        ActivationParts {
            layer_input: self.layer_input * factor,
            layernorm: self.layernorm * factor,
            attention: self.attention * factor,
            attention_scores: self.attention_scores * factor,
            mlp: self.mlp * factor,
            moe_dispatch: self.moe_dispatch * factor,
            moe_experts: self.moe_experts * factor,
            shared_experts: self.shared_experts * factor,
        }
    }

    pub fn add(&mut self, other: &ActivationParts) {
        self.layer_input += other.layer_input;
        self.layernorm += other.layernorm;
        self.attention += other.attention;
        self.attention_scores += other.attention_scores;
        self.mlp += other.mlp;
        self.moe_dispatch += other.moe_dispatch;
        self.moe_experts += other.moe_experts;
        self.shared_experts += other.shared_experts;
    }
}

/// Inputs that decide which tensors are kept, resolved once per evaluation.
#[derive(Debug, Clone, Copy)]
pub struct ActivationOptions {
    pub tp: f64,
    /// Divisor for tensors sharded by sequence parallelism (TP with SP, else 1).
    pub sp_div: f64,
    pub cp: u32,
    /// Expert tensor parallelism: each GPU receives every token routed to its experts from
    /// all ETP shards of them (k·ETP copies per local token).
    pub etp: f64,
    /// Bytes per element of tensors that GEMMs may save in FP8 (1) or BF16 (2).
    pub gemm_input_bytes: f64,
    pub recompute_core_attn: bool,
    pub recompute_mla_up_proj: bool,
    pub recompute_layernorm: bool,
    pub recompute_moe_act: bool,
    pub recompute_moe: bool,
    pub recompute_mlp: bool,
    pub recompute_shared_experts: bool,
    pub recompute_gdn_norm_out: bool,
    pub offload_expert_fc1: bool,
    pub offload_moe_act: bool,
    /// Fine-grained activation offloading of the attention part (`offload_modules`): what
    /// each module saves inside its offload scope goes to the host (`attn_norm`: the input
    /// norm's input; `qkv_linear`: everything the QKV projections save, a fused norm's input
    /// and output included; `core_attn`: everything the core attention saves; `attn_proj`: the
    /// output projection's input; `mlp_norm`: the pre-MLP norm's input).
    pub offload_attention: AttentionOffload,
    /// The score matrix a materialising attention backend computes, `None` for fused
    /// attention (set by the estimate, which holds the byte counts).
    pub score_matrix: Option<ScoreMatrix>,
}

/// The fine-grained activation offloading modules (`offload_modules`) the memory model
/// prices: `offload_expert_fc1`, `offload_moe_act` and `offload_attention` below.
pub(crate) const PRICED_OFFLOAD_MODULES: &[&str] = &[
    "expert_fc1",
    "moe_act",
    "attn_norm",
    "qkv_linear",
    "core_attn",
    "attn_proj",
    "mlp_norm",
];

/// The attention-side modules of Megatron-Core's fine-grained activation offloading
/// (`TransformerLayer._set_offload_modules`, `Attention` / `MLASelfAttention.forward`,
/// Megatron-LM d98e8a64).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttentionOffload {
    pub attn_norm: bool,
    pub qkv_linear: bool,
    pub core_attn: bool,
    pub attn_proj: bool,
    pub mlp_norm: bool,
}

impl AttentionOffload {
    fn from_config(cfg: &TrainingConfig) -> AttentionOffload {
        AttentionOffload {
            attn_norm: cfg.offloads("attn_norm"),
            qkv_linear: cfg.offloads("qkv_linear"),
            // A checkpointed core attention runs outside the offload scope (the `core_attn`
            // manager wraps only the plain forward), so its inputs stay on the GPU.
            core_attn: cfg.offloads("core_attn") && !cfg.has_recompute(&RecomputeModule::CoreAttn),
            attn_proj: cfg.offloads("attn_proj"),
            mlp_norm: cfg.offloads("mlp_norm"),
        }
    }
}

/// Megatron-Core's fine-grained offloading groups in the order a layer's forward runs them
/// (`TransformerLayer` and its attention and MoE modules, d98e8a64); `OffloadGroups` holds one
/// entry per group in this order.
pub const OFFLOAD_GROUP_ORDER: [&str; 7] = [
    "attn_norm",
    "qkv_linear",
    "core_attn",
    "attn_proj",
    "mlp_norm",
    "expert_fc1",
    "moe_act",
];

/// Bytes per local token each offloading group of one layer sends to the host, in
/// `OFFLOAD_GROUP_ORDER`.
pub type OffloadGroups = [f64; OFFLOAD_GROUP_ORDER.len()];

impl ActivationOptions {
    /// These options with only the first `groups` offloading groups (forward order) kept on.
    fn with_first_offload_groups(&self, groups: usize) -> ActivationOptions {
        let on = |name: &str| OFFLOAD_GROUP_ORDER[..groups].contains(&name);
        let a = self.offload_attention;
        ActivationOptions {
            offload_attention: AttentionOffload {
                attn_norm: a.attn_norm && on("attn_norm"),
                qkv_linear: a.qkv_linear && on("qkv_linear"),
                core_attn: a.core_attn && on("core_attn"),
                attn_proj: a.attn_proj && on("attn_proj"),
                mlp_norm: a.mlp_norm && on("mlp_norm"),
            },
            offload_expert_fc1: self.offload_expert_fc1 && on("expert_fc1"),
            offload_moe_act: self.offload_moe_act && on("moe_act"),
            ..*self
        }
    }
}

/// What each offloading group of one layer of `kind` takes to the host, bytes per local token,
/// in forward order: each group's share is what the layer keeps with the groups before it
/// offloaded less what it keeps with this one offloaded too, so a tensor two groups could
/// claim (the core attention's output, `attn_proj`'s input) is counted once, with the first,
/// and the shares sum to everything offloaded.
pub fn offloaded_by_group(
    arch: &Architecture,
    kind: usize,
    o: &ActivationOptions,
) -> OffloadGroups {
    let mut groups = [0.0; OFFLOAD_GROUP_ORDER.len()];
    if !o.offloads_anything() {
        return groups;
    }
    let mut kept = layer_activation(arch, kind, &o.without_offloads()).total();
    for (i, share) in groups.iter_mut().enumerate() {
        let next = layer_activation(arch, kind, &o.with_first_offload_groups(i + 1)).total();
        *share = (kept - next).max(0.0);
        kept = next;
    }
    groups
}

/// One softmax-attention layer's score matrix on a backend that materialises it: the keys
/// every query row holds (the whole sequence: causal and window masks are applied inside the
/// softmax) and the bytes per score element.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreMatrix {
    pub keys: f64,
    pub bytes: ScoreBytes,
    pub softmax: SoftmaxPath,
}

impl ScoreMatrix {
    /// Score elements of one layer and microbatch on one GPU: every local query row of every
    /// local head holds `keys` scores.
    pub fn elements(&self, arch: &Architecture, tp: u32, mbs: u32, queries: f64) -> f64 {
        let heads = arch.num_attention_heads as f64 / tp.max(1) as f64;
        mbs as f64 * heads * queries * self.keys
    }
}

impl ActivationOptions {
    pub fn from_config(cfg: &TrainingConfig, tp: u32, cp: u32, sp: bool) -> ActivationOptions {
        ActivationOptions {
            tp: tp as f64,
            sp_div: if sp { tp as f64 } else { 1.0 },
            cp,
            etp: cfg.etp().max(1) as f64,
            gemm_input_bytes: if cfg.precision().is_low_precision() {
                1.0
            } else {
                2.0
            },
            recompute_core_attn: cfg.has_recompute(&RecomputeModule::CoreAttn),
            recompute_mla_up_proj: cfg.has_recompute(&RecomputeModule::MlaUpProj),
            recompute_layernorm: cfg.has_recompute(&RecomputeModule::Layernorm),
            recompute_moe_act: cfg.has_recompute(&RecomputeModule::MoeAct),
            recompute_moe: cfg.has_recompute(&RecomputeModule::Moe),
            recompute_mlp: cfg.has_recompute(&RecomputeModule::Mlp),
            recompute_shared_experts: cfg.has_recompute(&RecomputeModule::SharedExperts),
            recompute_gdn_norm_out: cfg.has_recompute(&RecomputeModule::GdnNormOut),
            offload_expert_fc1: cfg.offloads("expert_fc1"),
            offload_moe_act: cfg.offloads("moe_act"),
            offload_attention: AttentionOffload::from_config(cfg),
            score_matrix: None,
        }
    }

    /// Whether any fine-grained offloading module sends activations to the host.
    pub fn offloads_anything(&self) -> bool {
        self.offload_expert_fc1
            || self.offload_moe_act
            || self.offload_attention != AttentionOffload::default()
    }

    /// The same recompute with nothing offloaded: what the offloaded options keep minus what
    /// these keep is what goes over the GPU-host link.
    pub fn without_offloads(&self) -> ActivationOptions {
        self.with_first_offload_groups(0)
    }

    /// The same options with nothing recomputed or offloaded (the full working set).
    pub fn without_savings(&self) -> ActivationOptions {
        ActivationOptions {
            recompute_core_attn: false,
            recompute_mla_up_proj: false,
            recompute_layernorm: false,
            recompute_moe_act: false,
            recompute_moe: false,
            recompute_mlp: false,
            recompute_shared_experts: false,
            recompute_gdn_norm_out: false,
            offload_expert_fc1: false,
            offload_moe_act: false,
            offload_attention: AttentionOffload::default(),
            ..*self
        }
    }
}

/// Bytes per element.
pub(crate) const BF16: f64 = 2.0;
pub(crate) const FP32: f64 = 4.0;

/// Bytes saved per local token by one layer of kind `kind` under selective (or no) recompute.
pub fn layer_activation(
    arch: &Architecture,
    kind: usize,
    o: &ActivationOptions,
) -> ActivationParts {
    let (attention, ffn) = layer_kind_of(kind);
    let moe = ffn == FfnKind::Moe;
    let has_mixer = attention != AttentionKind::Absent;
    let has_ffn = ffn != FfnKind::Absent;
    let h = arch.hidden_size as f64;
    let n_a = arch.num_attention_heads as f64;
    let tp = o.tp;
    let sp = o.sp_div;
    let a = o.gemm_input_bytes;
    let off = o.offload_attention;
    let mut p = ActivationParts::default();
    // The two norm outputs, each saved as the input of the GEMM that follows it. `layernorm`
    // recompute frees only a norm that is a module of its own: Megatron-Core recomputes
    // `input_layernorm` / `pre_mlp_layernorm` only when they are not `IdentityOp`
    // (transformer_layer.py), and its Transformer Engine specs fuse the norm into the next
    // GEMM (`TELayerNormColumnParallelLinear`, which saves its normed input itself) except
    // before MLA's separate down projections and before a MoE block (router and experts share
    // the normed input) (gpt_layer_specs.py, experimental_attention_variant_module_specs.py;
    // Megatron-LM d98e8a64).
    // A hybrid model's layer holds one block: a mixer-only layer has no pre-MLP norm, and an
    // MLP-only or MoE-only layer no input norm, its input being the pre-MLP norm's input
    // (Megatron-Core's `MambaLayer` and the hybrid model's attention-only and MLP-only
    // `TransformerLayer`s).
    let input_norm_separate = arch.mla.is_some() && attention.is_softmax();
    let pre_mlp_norm_separate = moe && arch.moe.is_some();
    let softmax_attention = attention.is_softmax();
    // The layer input, saved by the input norm: offloaded with it when the norm is a module
    // of its own (`attn_norm`), else with the fused norm-and-QKV projection (`qkv_linear`).
    let input_offloaded = if has_mixer {
        softmax_attention
            && if input_norm_separate {
                off.attn_norm
            } else {
                off.qkv_linear
            }
    } else {
        pre_mlp_norm_separate && off.mlp_norm
    };
    if !input_offloaded {
        p.layer_input = BF16 * h / sp;
    }
    // The input norm's output is the QKV projections' input.
    let input_norm_recomputed = input_norm_separate && o.recompute_layernorm;
    let input_norm_offloaded = softmax_attention && off.qkv_linear;
    let input_norm_kept = has_mixer && !(input_norm_recomputed || input_norm_offloaded);
    let pre_mlp_norm_kept = has_ffn && !(pre_mlp_norm_separate && o.recompute_layernorm);
    let kept_norms = [input_norm_kept, pre_mlp_norm_kept]
        .iter()
        .filter(|&&kept| kept)
        .count() as f64;
    p.layernorm = kept_norms * a * h / sp;
    // Attention residual output (input of the pre-MLP norm; `mlp_norm` offloads it when that
    // norm is a module of its own), in a layer with both blocks.
    if has_mixer && has_ffn && !(pre_mlp_norm_separate && off.mlp_norm) {
        p.attention = BF16 * h / sp;
    }
    match attention {
        AttentionKind::Absent => {}
        AttentionKind::Mamba => {
            if let Some(m) = &arch.mamba {
                p.attention += mamba_mixer_saved(m, o);
            }
        }
        AttentionKind::Linear => {
            if let Some(g) = &arch.linear_attention {
                p.attention += gated_delta_net_saved(g, o);
            }
        }
        AttentionKind::Full | AttentionKind::Sliding => {
            if let Some(m) = &arch.mla {
                let qk = m.qk_width();
                let v = m.v_head_dim as f64;
                let kv_lora = m.kv_lora_rank as f64;
                let rope = m.qk_pos_emb_head_dim as f64;
                // The down projections' outputs and norms, inside `qkv_linear`'s scope.
                if !off.qkv_linear {
                    if let Some(q_lora) = m.q_lora_rank {
                        let q_lora = q_lora as f64;
                        p.attention += (BF16 + a) * q_lora / sp; // q_down output and q_norm output
                    }
                    p.attention += BF16 * (kv_lora + rope) / sp + a * kv_lora / sp;
                }
                // q, k and v, which the core attention saves.
                let qkv_up = BF16 * (2.0 * n_a * qk + n_a * v) / tp;
                if !o.recompute_mla_up_proj && !off.core_attn {
                    p.attention += qkv_up;
                }
                p.attention += core_attention_output(n_a * v, n_a, false, o);
            } else {
                let d = arch.head_dim() as f64;
                let g = arch.kv_heads() as f64;
                if !off.core_attn {
                    p.attention += BF16 * (n_a * d + 2.0 * g * d) / tp;
                }
                if arch.attention_output_gate {
                    p.attention += BF16 * n_a * d / tp;
                }
                p.attention += core_attention_output(n_a * d, n_a, arch.attention_output_gate, o);
                // Grouped-query K and V repeated to every query head (`repeat_interleave`) are
                // new tensors the first and second GEMMs keep.
                if o.score_matrix.is_some() && !o.recompute_core_attn && !off.core_attn && g < n_a {
                    p.attention += BF16 * 2.0 * n_a * d / tp;
                }
            }
            if let (Some(m), false, false) = (o.score_matrix, o.recompute_core_attn, off.core_attn)
            {
                p.attention_scores += m.bytes.saved * n_a * m.keys / tp;
            }
        }
    }
    let ffn_matrices = arch.mlp_matrices();
    let fc1_width = ffn_matrices - 1.0; // 2 for SwiGLU (gate and up), 1 otherwise
    match (&arch.moe, ffn) {
        (_, FfnKind::Absent) => {}
        (Some(m), FfnKind::Moe) => {
            if !o.recompute_moe {
                let e = m.num_experts as f64;
                let k = m.top_k as f64;
                let f_e = m.moe_ffn_hidden_size as f64;
                // fp32 router probabilities and a boolean routing map.
                p.moe_dispatch += (FP32 + 1.0) * e / sp;
                if !o.offload_expert_fc1 {
                    p.moe_dispatch += a * k * o.etp * h / sp;
                }
                // The routing probabilities are applied inside the expert activation function
                // (Megatron-Core >= 0.13), which keeps them per routed copy; the unpermute is a
                // plain scatter-add whose backward needs no saved expert output.
                p.moe_dispatch += FP32 * k * o.etp / sp;
                // k·ETP copies each through 1/ETP of the expert's width.
                p.moe_experts += BF16 * fc1_width * k * f_e / sp;
                if !o.recompute_moe_act && !o.offload_moe_act {
                    p.moe_experts += a * k * f_e / sp;
                }
                let f_sh = m.shared_expert_ffn_hidden_size as f64;
                if f_sh > 0.0 && !o.recompute_shared_experts {
                    p.shared_experts += BF16 * fc1_width * f_sh / tp;
                    if !o.recompute_moe_act {
                        p.shared_experts += a * f_sh / tp;
                    }
                }
            }
        }
        _ => {
            if !o.recompute_mlp {
                let f = arch.ffn_hidden_size as f64;
                p.mlp += BF16 * fc1_width * f / tp + a * f / tp;
            }
        }
    }
    p
}

/// Bytes per local token one Mamba-2 mixer keeps for backward. Megatron-Core's `MambaMixer`
/// trains through mamba_ssm's `mamba_split_conv1d_scan_combined` without its norm
/// (megatron/core/ssm/mamba_mixer.py, Megatron-LM d98e8a64), which saves the in_proj output
/// (z, x, B, C, dt) and the scan's output before the gate, and recomputes the convolution and
/// the chunk states in backward (mamba_ssm ops/triton/ssd_combined.py,
/// `MambaSplitConv1dScanCombinedFn`). The mixer's gated RMSNorm then keeps its input (the
/// gated output) and an fp32 rstd per group, and the out_proj keeps the normed output (BF16,
/// or its quantized copy under FP8/FP4).
fn mamba_mixer_saved(m: &MambaDims, o: &ActivationOptions) -> f64 {
    let inner = m.inner_width();
    let bytes = BF16 * m.in_proj_width()
        + BF16 * 2.0 * inner
        + FP32 * m.num_groups as f64
        + o.gemm_input_bytes * inner;
    bytes / o.tp
}

/// Token chunk of the Gated DeltaNet chunked kernel: `chunk_gated_delta_rule_fwd` runs
/// `chunk_local_cumsum` and the WY representation with `chunk_size=64`
/// (fla-org/flash-linear-attention fla/ops/gated_delta_rule/chunk.py, 92396f25).
const GDN_CHUNK: f64 = 64.0;

/// Bytes per local token one Gated DeltaNet block keeps for backward, tensor by tensor, as
/// Megatron-LM's `GatedDeltaNet.forward` (megatron/core/ssm/gated_delta_net/gdn.py and
/// common.py, d98e8a64) and the FLA kernels it calls leave them. With CP > 1 the in_proj output
/// is all-to-all'ed to the full sequence on CP⁻¹ of the heads, which is the same bytes per
/// local token.
/// - the in_proj output (q, k, v, z, β, α): FLA's `causal_conv1d` saves its input, a view of
///   it, and recomputes the convolution in backward (fla/modules/conv/triton/ops.py,
///   0119bf55), so the whole projection output stays and the conv output does not;
/// - the L2-normalised q and k (`l2norm` saves its output and an fp32 rstd per head;
///   fla/modules/l2norm.py, 5274b428);
/// - the kernel's own inputs: q and k repeated to the value heads and v as contiguous copies,
///   the fp32 cumulative decay g, β, and the chunk-local WY matrix A (64 bf16 per token and
///   head) (`ChunkGatedDeltaRuleFunction.forward`, chunk.py); the chunk states are
///   recomputed in backward (`gated_delta_net_backward_transient`);
/// - the gated output norm (`_apply_gated_norm`, compiled around Transformer Engine's RMSNorm):
///   its input (the kernel output), an fp32 rstd per head, the normed output and the gate z
///   that the multiply saves;
/// - the out_proj input. `gdn_norm_out` recompute (`CheckpointWithoutOutput`) keeps the norm's
///   inputs and frees its rstd, normed output and the out_proj input.
fn gated_delta_net_saved(g: &GatedDeltaNetDims, o: &ActivationOptions) -> f64 {
    let n_k = g.num_key_heads as f64;
    let n_v = g.num_value_heads as f64;
    let q = g.key_head_dim as f64 * n_k;
    let v = g.value_head_dim as f64 * n_v;
    let q_per_value_head = g.key_head_dim as f64 * n_v;
    let mut bytes = BF16 * g.in_proj_width(); // in_proj output
    bytes += BF16 * 2.0 * q + FP32 * 2.0 * n_k; // L2-normalised q, k and rstd
    bytes += BF16 * (2.0 * q_per_value_head + v); // kernel q, k (repeated) and v
    bytes += FP32 * n_v + BF16 * n_v + BF16 * GDN_CHUNK * n_v; // g, beta, A
    bytes += BF16 * 2.0 * v; // kernel output (norm input) and the gate z
    if !o.recompute_gdn_norm_out {
        bytes += FP32 * n_v + BF16 * v + o.gemm_input_bytes * v;
    }
    bytes / o.tp
}

/// Bytes per local token that one Gated DeltaNet layer's backward allocates on top of its
/// saved tensors: `chunk_gated_delta_rule_bwd` (fla/ops/gated_delta_rule/chunk.py) recomputes
/// the WY outputs w and u, the chunk states h with the new values v_new
/// (`chunk_gated_delta_rule_fwd_h`), then the state gradients dh
/// (`chunk_gated_delta_rule_bwd_dhu`, fla/ops/common/chunk_delta_h.py, 0080966f), each state
/// a bf16 key-dim × value-dim matrix per head and 64-token chunk, and holds them together.
pub fn gated_delta_net_backward_transient(arch: &Architecture, kind: usize, tp: f64) -> f64 {
    let (attention, _) = layer_kind_of(kind);
    match (&arch.linear_attention, attention) {
        (Some(g), AttentionKind::Linear) => {
            let n_v = g.num_value_heads as f64;
            let d_k = g.key_head_dim as f64;
            let d_v = g.value_head_dim as f64;
            let states = 2.0 * BF16 * n_v * d_k * d_v / GDN_CHUNK; // h and dh
            let recomputed = BF16 * n_v * (d_k + 2.0 * d_v); // w, u, v_new
            (states + recomputed) / tp.max(1.0)
        }
        _ => 0.0,
    }
}

/// Bytes per local token the context-parallel ring allocates for one softmax-attention layer's
/// backward in BF16 (`AttnFuncWithCPAndKVP2P.backward`, Transformer Engine
/// pytorch/attention/dot_product_attention/context_parallel.py, d0067d0d): a dq accumulator
/// the size of q and two double buffers `(2, *kv.shape)` for the KV blocks it receives and the
/// dKV blocks it sends, four KV-sized tensors. Zero at CP = 1 and for Gated DeltaNet layers.
pub fn cp_ring_backward_buffers(arch: &Architecture, kind: usize, o: &ActivationOptions) -> f64 {
    let (attention, _) = layer_kind_of(kind);
    if o.cp <= 1 || !attention.is_softmax() {
        return 0.0;
    }
    let n_a = arch.num_attention_heads as f64;
    let (q, kv) = match &arch.mla {
        Some(m) => {
            let qk = m.qk_width();
            (n_a * qk, n_a * (qk + m.v_head_dim as f64))
        }
        None => {
            let d = arch.head_dim() as f64;
            (n_a * d, 2.0 * arch.kv_heads() as f64 * d)
        }
    };
    BF16 * (q + 4.0 * kv) / o.tp
}

/// Bytes per local token that one softmax-attention layer's backward holds, besides what it
/// saved, on a backend that materialises the score matrix: the gradients of the probabilities
/// and of the scores (`unfused_attention` in cards/cost-model.yaml). Zero for fused attention
/// and Gated DeltaNet layers.
pub fn attention_scores_backward_transient(
    arch: &Architecture,
    kind: usize,
    o: &ActivationOptions,
) -> f64 {
    let (attention, _) = layer_kind_of(kind);
    match (attention, o.score_matrix) {
        (AttentionKind::Full | AttentionKind::Sliding, Some(m)) => {
            m.bytes.backward_transient * arch.num_attention_heads as f64 * m.keys / o.tp
        }
        _ => 0.0,
    }
}

/// Bytes per local token of the core attention's output, its softmax statistics and the
/// output projection's saved input, for `width` = heads·v-head-dim output elements and
/// `heads` local attention heads (before the TP split).
///
/// Transformer Engine's fused attention saves `q, k, v, out` and the fp32 softmax LSE
/// (`FusedAttnFunc.forward`, attention/dot_product_attention/backends.py); with CP > 1 the
/// ring (`AttnFuncWithCPAndKVP2P.forward`, context_parallel.py) saves `q`, the last KV
/// buffer received in place of the local `k, v`, `out` and the LSE, and returns the tensor it
/// saves, so CP keeps nothing more. TE's `Linear` saves its BF16 input as is
/// (`cast_if_needed` returns the same tensor; module/linear.py), so without an output gate the
/// output projection holds the very tensor the kernel saved: it is counted once, and
/// `core_attn` recompute then frees only the LSE. With an output gate the projection input is
/// the gated product, a tensor of its own (`Attention._apply_output_gate`,
/// megatron/core/transformer/attention.py); with FP8 linears the projection saves a 1-byte
/// quantized copy. MLA passes the kernel output straight to `linear_proj` the same way
/// (multi_latent_attention.py). Transformer Engine d0067d0d, Megatron-LM d98e8a64.
fn core_attention_output(width: f64, heads: f64, gated: bool, o: &ActivationOptions) -> f64 {
    let shared = !gated && o.gemm_input_bytes == BF16;
    let off = o.offload_attention;
    let mut bytes = 0.0;
    // The fused kernels' softmax statistics; a materialising backend keeps its
    // probabilities instead (`attention_scores`).
    if !o.recompute_core_attn && o.score_matrix.is_none() && !off.core_attn {
        bytes += FP32 * heads;
    }
    // The kernel's output: kept by the kernel unless recomputed or offloaded with the core
    // attention, and by the projection when it is the projection's input too, unless
    // offloaded with it.
    let kernel_keeps = !o.recompute_core_attn && !off.core_attn;
    let projection_keeps = shared && !off.attn_proj;
    if kernel_keeps || projection_keeps {
        bytes += BF16 * width;
    }
    if !shared && !off.attn_proj {
        bytes += o.gemm_input_bytes * width; // the projection's own input
    }
    bytes / o.tp
}

/// Bytes per local token of one MTP block/// Bytes per local token of one MTP block beyond its decoder layer, as
/// `MultiTokenPredictionLayer._concat_embeddings` (megatron/core/transformer/
/// multi_token_prediction.py, Megatron-LM d98e8a64) leaves them: the two norms save their
/// inputs (the shifted tokens' embedding and the decoder output) and an fp32 rstd each; the
/// concatenation of their outputs is `eh_proj`'s saved input (a 1-byte copy with FP8 linears),
/// the norm outputs themselves are not kept (`torch.cat` needs nothing for backward); the
/// projection output is the MTP decoder layer's input, counted with that layer.
pub fn mtp_extra_activation(arch: &Architecture, o: &ActivationOptions) -> f64 {
    let h = arch.hidden_size as f64;
    (BF16 * 2.0 * h + FP32 * 2.0 + o.gemm_input_bytes * 2.0 * h) / o.sp_div
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::{layer_kind_index, FfnKind};

    /// A model card of the catalog.
    fn card(yaml: &str) -> Architecture {
        serde_yaml::from_str(yaml).expect("card")
    }

    #[test]
    fn moe_dispatch_bytes_per_token_by_hand() {
        let arch = card(include_str!("../../cards/models/deepseek-v3.yaml"));
        let cfg = TrainingConfig::from_fields(&serde_json::json!({"precision": "mxfp8"}))
            .expect("config parses");
        let options = ActivationOptions::from_config(&cfg, 1, 1, false);
        let moe_layer = layer_kind_index(AttentionKind::Full, FfnKind::Moe);
        let parts = layer_activation(&arch, moe_layer, &options);
        // 256 experts: fp32 probabilities + boolean map = 5 × 256; top-8 FP8 copies of the
        // 7168-wide token = 8 × 7168; fp32 routed probabilities kept by the activation = 4 × 8.
        assert_eq!(parts.moe_dispatch, 5.0 * 256.0 + 8.0 * 7168.0 + 4.0 * 8.0);
        // Recomputing the MoE block keeps none of it.
        let cfg = TrainingConfig::from_fields(&serde_json::json!({
            "precision": "mxfp8", "recompute_granularity": "selective",
            "recompute_modules": ["moe"]}))
        .expect("config parses");
        let options = ActivationOptions::from_config(&cfg, 1, 1, false);
        assert_eq!(
            layer_activation(&arch, moe_layer, &options).moe_dispatch,
            0.0
        );
    }

    /// `layernorm` recompute frees a norm output only where the norm is its own module: before
    /// MLA's down projections and before a MoE block. Fused norms (standard attention's
    /// LayerNormLinear, a dense MLP's fc1) keep theirs.
    #[test]
    fn layernorm_recompute_frees_only_separate_norms() {
        let dsv3 = card(include_str!("../../cards/models/deepseek-v3.yaml"));
        let qwen = card(include_str!("../../cards/models/qwen3-30b-a3b.yaml"));
        let plain = ActivationOptions::from_config(&TrainingConfig::default(), 1, 1, false);
        let recompute = ActivationOptions {
            recompute_layernorm: true,
            ..plain
        };
        let h_mla = dsv3.hidden_size as f64;
        let h = qwen.hidden_size as f64;
        let moe_full = layer_kind_index(AttentionKind::Full, FfnKind::Moe);
        let dense_full = layer_kind_index(AttentionKind::Full, FfnKind::Dense);
        // Without recompute both norm outputs are kept (bf16: 2 bytes each).
        assert_eq!(
            layer_activation(&dsv3, moe_full, &plain).layernorm,
            2.0 * 2.0 * h_mla
        );
        // MLA + MoE: both norms are separate modules, both freed.
        assert_eq!(layer_activation(&dsv3, moe_full, &recompute).layernorm, 0.0);
        // MLA dense layer: the input norm is freed, the pre-MLP norm is fused into fc1.
        assert_eq!(
            layer_activation(&dsv3, dense_full, &recompute).layernorm,
            2.0 * h_mla
        );
        // Standard attention + MoE: the input norm is fused into the QKV GEMM.
        assert_eq!(
            layer_activation(&qwen, moe_full, &recompute).layernorm,
            2.0 * h
        );
    }

    /// The fused-attention output and the output projection's input are one tensor in BF16
    /// without an output gate: counted once, and `core_attn` recompute frees only the fp32 LSE.
    #[test]
    fn core_attention_output_counted_once_by_hand() {
        let qwen = card(include_str!("../../cards/models/qwen3-30b-a3b.yaml"));
        let gated = card(include_str!("../../cards/models/qwen3.5-35b-a3b.yaml"));
        let dsv3 = card(include_str!("../../cards/models/deepseek-v3.yaml"));
        let full = layer_kind_index(AttentionKind::Full, FfnKind::Moe);
        let bf16 = ActivationOptions::from_config(&TrainingConfig::default(), 1, 1, false);
        let fp8 = ActivationOptions {
            gemm_input_bytes: 1.0,
            ..bf16
        };
        let recompute = |o: ActivationOptions| ActivationOptions {
            recompute_core_attn: true,
            ..o
        };
        let attn =
            |arch: &Architecture, o: ActivationOptions| layer_activation(arch, full, &o).attention;
        // Qwen3-30B-A3B: 32 heads × 128, 4 KV groups, h = 2048. Residual 2·2048, q/k/v
        // 2·(4096 + 2·512), output 2·4096 (shared with the projection), LSE 4·32.
        assert_eq!(attn(&qwen, bf16), 4096.0 + 10240.0 + 8192.0 + 128.0);
        assert_eq!(attn(&qwen, recompute(bf16)), 4096.0 + 10240.0 + 8192.0);
        // CP > 1 keeps q, the last received KV buffer (instead of k, v), out and the LSE.
        let cp2 = ActivationOptions { cp: 2, ..bf16 };
        assert_eq!(attn(&qwen, cp2), attn(&qwen, bf16));
        // FP8 linears: the projection keeps its own 1-byte copy; recompute frees out and LSE.
        assert_eq!(attn(&qwen, fp8), 4096.0 + 10240.0 + 8192.0 + 128.0 + 4096.0);
        assert_eq!(attn(&qwen, recompute(fp8)), 4096.0 + 10240.0 + 4096.0);
        // Qwen3.5 gated attention: 16 heads × 256, 2 groups. The gate (2·4096) and the gated
        // product the projection saves (2·4096) are tensors of their own.
        assert_eq!(
            attn(&gated, bf16),
            4096.0 + 10240.0 + 8192.0 + 8192.0 + 64.0 + 8192.0
        );
        assert_eq!(
            attn(&gated, recompute(bf16)),
            4096.0 + 10240.0 + 8192.0 + 8192.0
        );
        // DeepSeek-V3 MLA (128 heads, v 128): residual 2·7168, q down + q norm 4·1536,
        // kv down 2·576 + kv norm 2·512, q/k/v up 2·(2·128·192 + 128·128), out 2·16384, LSE 4·128.
        let mla = 14336.0 + 6144.0 + 1152.0 + 1024.0 + 131072.0 + 32768.0;
        assert_eq!(attn(&dsv3, bf16), mla + 512.0);
        assert_eq!(attn(&dsv3, recompute(bf16)), mla);
    }

    #[test]
    fn each_offload_group_carries_what_it_frees_beyond_the_groups_before_it() {
        let qwen = card(include_str!("../../cards/models/qwen3-30b-a3b.yaml"));
        let full = layer_kind_index(AttentionKind::Full, FfnKind::Moe);
        let mut o = ActivationOptions::from_config(&TrainingConfig::default(), 1, 1, false);
        o.offload_attention.core_attn = true;
        o.offload_attention.attn_proj = true;
        o.offload_expert_fc1 = true;
        // Qwen3-30B-A3B per token: core attention's q, k, v (10240) and LSE (128); the
        // output (8192), which the projection keeps until `attn_proj` offloads it; fc1's input,
        // eight routed copies of 2048 BF16 values (32768).
        let groups = offloaded_by_group(&qwen, full, &o);
        assert_eq!(groups, [0.0, 0.0, 10368.0, 8192.0, 0.0, 32768.0, 0.0]);
        let kept = layer_activation(&qwen, full, &o.without_offloads()).total();
        let offloaded = layer_activation(&qwen, full, &o).total();
        assert_eq!(groups.iter().sum::<f64>(), kept - offloaded);
    }

    /// Fine-grained offloading of the attention modules, tensor by tensor: each module's
    /// scope takes what is saved inside it off the GPU.
    #[test]
    fn attention_offload_modules_free_what_their_scopes_save_by_hand() {
        let qwen = card(include_str!("../../cards/models/qwen3-30b-a3b.yaml"));
        let dsv3 = card(include_str!("../../cards/models/deepseek-v3.yaml"));
        let full = layer_kind_index(AttentionKind::Full, FfnKind::Moe);
        let plain = ActivationOptions::from_config(&TrainingConfig::default(), 1, 1, false);
        let offload = |f: fn(&mut AttentionOffload)| {
            let mut o = plain;
            f(&mut o.offload_attention);
            o
        };
        let parts = |arch: &Architecture, o: ActivationOptions| layer_activation(arch, full, &o);
        // Qwen3-30B-A3B (h 2048): core_attn frees q/k/v (10240) and the LSE (128); the output
        // (8192) stays while the projection keeps it as its input, and goes with attn_proj.
        let core = offload(|a| a.core_attn = true);
        assert_eq!(parts(&qwen, core).attention, 4096.0 + 8192.0);
        let both = offload(|a| {
            a.core_attn = true;
            a.attn_proj = true;
        });
        assert_eq!(parts(&qwen, both).attention, 4096.0);
        // Its input norm is fused into the QKV projection: qkv_linear frees the layer input
        // (4096) and the norm output (4096); attn_norm, for a norm that is no module of its
        // own, frees nothing.
        let qkv = offload(|a| a.qkv_linear = true);
        assert_eq!(parts(&qwen, qkv).layer_input, 0.0);
        assert_eq!(
            parts(&qwen, plain).layernorm - parts(&qwen, qkv).layernorm,
            4096.0
        );
        let norm = offload(|a| a.attn_norm = true);
        assert_eq!(parts(&qwen, norm), parts(&qwen, plain));
        // The pre-MLP norm of a MoE layer is separate: mlp_norm frees its input, the
        // attention's residual output (4096).
        let mlp_norm = offload(|a| a.mlp_norm = true);
        assert_eq!(
            parts(&qwen, plain).attention - parts(&qwen, mlp_norm).attention,
            4096.0
        );
        // DeepSeek-V3 (h 7168): the separate input norm's input goes with attn_norm (14336);
        // qkv_linear frees the norm output (14336) and the down projections' outputs and norms
        // (6144 + 1152 + 1024), not q/k/v, which the core attention saves.
        let norm = offload(|a| a.attn_norm = true);
        assert_eq!(parts(&dsv3, norm).layer_input, 0.0);
        let qkv = offload(|a| a.qkv_linear = true);
        assert_eq!(parts(&dsv3, qkv).layer_input, 14336.0);
        assert_eq!(
            parts(&dsv3, plain).attention - parts(&dsv3, qkv).attention,
            6144.0 + 1152.0 + 1024.0
        );
        assert_eq!(
            parts(&dsv3, plain).layernorm - parts(&dsv3, qkv).layernorm,
            14336.0
        );
    }

    /// Gated DeltaNet (Qwen3.5-35B-A3B: 16 key heads × 128, 32 value heads × 128, h = 2048),
    /// BF16, TP1, tensor by tensor as Megatron-LM and the FLA kernels keep them.
    #[test]
    fn gated_delta_net_saved_tensors_by_hand() {
        let arch = card(include_str!("../../cards/models/qwen3.5-35b-a3b.yaml"));
        let linear = layer_kind_index(AttentionKind::Linear, FfnKind::Moe);
        let plain = ActivationOptions::from_config(&TrainingConfig::default(), 1, 1, false);
        let in_proj = 2.0 * (2.0 * 2048.0 + 2.0 * 4096.0 + 2.0 * 32.0);
        let l2norm = 2.0 * 4096.0 + 4.0 * 32.0;
        let kernel_inputs =
            2.0 * (2.0 * 4096.0 + 4096.0) + 4.0 * 32.0 + 2.0 * 32.0 + 2.0 * 64.0 * 32.0;
        let norm_inputs = 2.0 * 4096.0 * 2.0; // kernel output and gate z
        let norm_and_proj = 4.0 * 32.0 + 2.0 * 4096.0 + 2.0 * 4096.0; // rstd, normed, out_proj input
        let residual = 2.0 * 2048.0;
        let saved = in_proj + l2norm + kernel_inputs + norm_inputs;
        assert_eq!(
            layer_activation(&arch, linear, &plain).attention,
            residual + saved + norm_and_proj
        );
        let recompute = ActivationOptions {
            recompute_gdn_norm_out: true,
            ..plain
        };
        assert_eq!(
            layer_activation(&arch, linear, &recompute).attention,
            residual + saved
        );
        // Backward: h and dh, 2 × 2·32·128·128/64 bytes per token, plus w, u, v_new
        // 2·32·(128 + 2·128); halved at TP2; none for a full-attention layer.
        let transient = 2.0 * 2.0 * 32.0 * 128.0 * 128.0 / 64.0 + 2.0 * 32.0 * 384.0;
        assert_eq!(
            gated_delta_net_backward_transient(&arch, linear, 1.0),
            transient
        );
        assert_eq!(
            gated_delta_net_backward_transient(&arch, linear, 2.0),
            transient / 2.0
        );
        let full = layer_kind_index(AttentionKind::Full, FfnKind::Moe);
        assert_eq!(gated_delta_net_backward_transient(&arch, full, 1.0), 0.0);
    }

    /// CP ring backward buffers: a dq accumulator plus four KV-sized buffers, BF16.
    #[test]
    fn cp_ring_backward_buffers_by_hand() {
        let qwen = card(include_str!("../../cards/models/qwen3-30b-a3b.yaml"));
        let dsv3 = card(include_str!("../../cards/models/deepseek-v3.yaml"));
        let full = layer_kind_index(AttentionKind::Full, FfnKind::Moe);
        let cp1 = ActivationOptions::from_config(&TrainingConfig::default(), 1, 1, false);
        let cp2 = ActivationOptions { cp: 2, ..cp1 };
        assert_eq!(cp_ring_backward_buffers(&qwen, full, &cp1), 0.0);
        // Qwen3-30B-A3B: q 32·128 = 4096, kv 2·4·128 = 1024.
        assert_eq!(
            cp_ring_backward_buffers(&qwen, full, &cp2),
            2.0 * (4096.0 + 4.0 * 1024.0)
        );
        // TP2 halves it.
        let tp2 = ActivationOptions { tp: 2.0, ..cp2 };
        assert_eq!(
            cp_ring_backward_buffers(&qwen, full, &tp2),
            4096.0 + 4.0 * 1024.0
        );
        // DeepSeek-V3 MLA: q 128·192, k and v 128·(192 + 128).
        assert_eq!(
            cp_ring_backward_buffers(&dsv3, full, &cp2),
            2.0 * (24576.0 + 4.0 * 40960.0)
        );
    }

    /// MTP block extras: embedding and decoder output (norm inputs), two fp32 rstd, and the
    /// 2h concatenation eh_proj saves; SP shards them all.
    #[test]
    fn mtp_extra_activation_by_hand() {
        let arch = card(include_str!("../../cards/models/deepseek-v3.yaml"));
        let bf16 = ActivationOptions::from_config(&TrainingConfig::default(), 1, 1, false);
        assert_eq!(
            mtp_extra_activation(&arch, &bf16),
            2.0 * 2.0 * 7168.0 + 8.0 + 2.0 * 2.0 * 7168.0
        );
        let fp8_sp = ActivationOptions {
            gemm_input_bytes: 1.0,
            sp_div: 2.0,
            ..bf16
        };
        assert_eq!(
            mtp_extra_activation(&arch, &fp8_sp),
            (2.0 * 2.0 * 7168.0 + 8.0 + 2.0 * 7168.0) / 2.0
        );
    }
}
