//! Parameter counts per layer kind, split into the three placement buckets Megatron uses:
//! TP-sharded, replicated (within the TP group), and routed experts (sharded by EP·ETP).

use super::arch::{layer_kind_of, Architecture, AttentionKind, FfnKind, LAYER_KINDS};

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LayerParams {
    /// Split across the TP group (attention/GDN projections, dense MLP, shared experts).
    pub tp_sharded: f64,
    /// Held whole by every TP rank (norms, router, MLA down-projections, shared gate).
    pub replicated: f64,
    /// Routed experts (all of them; split across EP·ETP).
    pub experts: f64,
}

pub fn layer_params(arch: &Architecture, kind: usize) -> LayerParams {
    let (attention, ffn) = layer_kind_of(kind);
    let h = arch.hidden_size as f64;
    let n_a = arch.num_attention_heads as f64;
    // The input norm (before the mixer) and the pre-MLP norm, each where its block is.
    let norms = [attention != AttentionKind::Absent, ffn != FfnKind::Absent]
        .iter()
        .filter(|&&present| present)
        .count() as f64;
    let mut p = LayerParams {
        replicated: norms * h,
        ..LayerParams::default()
    };
    match attention {
        AttentionKind::Absent => {}
        AttentionKind::Mamba => {
            if let Some(m) = &arch.mamba {
                let heads = m.num_heads as f64;
                // in_proj, the convolution's weights and bias, A_log, D and dt_bias per head,
                // the gated norm's weight, out_proj (`MambaMixer.__init__`).
                p.tp_sharded = h * m.in_proj_width()
                    + (m.conv_kernel_dim as f64 + 1.0) * m.conv_channels()
                    + 3.0 * heads
                    + m.inner_width()
                    + m.inner_width() * h;
            }
        }
        AttentionKind::Linear => {
            if let Some(g) = &arch.linear_attention {
                let q = g.key_width();
                let v = g.value_width();
                let n_v = g.num_value_heads as f64;
                p.tp_sharded = h * g.in_proj_width()
                    + h * v
                    + g.conv_kernel_dim as f64 * (2.0 * q + v)
                    + 2.0 * n_v;
                p.replicated += g.value_head_dim as f64;
            }
        }
        AttentionKind::Full | AttentionKind::Sliding => {
            if let Some(m) = &arch.mla {
                let qk = m.qk_width();
                let v = m.v_head_dim as f64;
                let kv_lora = m.kv_lora_rank as f64;
                let rope = m.qk_pos_emb_head_dim as f64;
                match m.q_lora_rank {
                    Some(q_lora) => {
                        let q_lora = q_lora as f64;
                        p.replicated += h * q_lora + q_lora;
                        p.tp_sharded += q_lora * n_a * qk;
                    }
                    None => p.tp_sharded += h * n_a * qk,
                }
                p.replicated += h * (kv_lora + rope) + kv_lora;
                p.tp_sharded += kv_lora * n_a * (m.qk_head_dim as f64 + v) + n_a * v * h;
            } else {
                let d = arch.head_dim() as f64;
                p.tp_sharded = h * arch.qkv_width() + n_a * d * h;
            }
        }
    }
    let gamma = arch.mlp_matrices();
    match (&arch.moe, ffn) {
        (_, FfnKind::Absent) => {}
        (Some(m), FfnKind::Moe) => {
            p.experts = gamma * h * (m.moe_ffn_hidden_size * m.num_experts) as f64;
            p.tp_sharded += gamma * h * m.shared_expert_ffn_hidden_size as f64;
            p.replicated += h * m.num_experts as f64;
            if m.shared_expert_ffn_hidden_size > 0 {
                p.replicated += h; // shared-expert gate
            }
        }
        _ => p.tp_sharded += gamma * h * arch.ffn_hidden_size as f64,
    }
    p
}

pub fn kind_params(arch: &Architecture) -> [LayerParams; LAYER_KINDS] {
    let mut t = [LayerParams::default(); LAYER_KINDS];
    for (k, e) in t.iter_mut().enumerate() {
        *e = layer_params(arch, k);
    }
    t
}

/// Extra parameters of one MTP block beyond its decoder layer: the 2h→h projection and
/// two norms (the embedding and output layer are shared with the main model).
pub fn mtp_extra_params(arch: &Architecture) -> (f64, f64) {
    let h = arch.hidden_size as f64;
    (2.0 * h * h, 3.0 * h)
}

/// Total parameters of the model (embedding counted once if tied), including `mtp` layers.
pub fn total_params(arch: &Architecture, mtp: u32) -> f64 {
    let table = kind_params(arch);
    let counts = arch.count_kinds(0, arch.num_layers);
    total_params_from(arch, &table, &counts, mtp)
}

/// [`total_params`] from the per-kind table and the model's layer counts by kind, when the
/// caller already holds them.
pub fn total_params_from(
    arch: &Architecture,
    table: &[LayerParams; LAYER_KINDS],
    counts: &[u32; LAYER_KINDS],
    mtp: u32,
) -> f64 {
    let mut total = 0.0;
    for (p, &n) in table.iter().zip(counts.iter()) {
        total += (p.tp_sharded + p.replicated + p.experts) * n as f64;
    }
    let last = table[arch.mtp_layer_kind()];
    let (proj, norms) = mtp_extra_params(arch);
    total += mtp as f64 * (last.tp_sharded + last.replicated + last.experts + proj + norms);
    let emb = (arch.vocab_size * arch.hidden_size) as f64;
    total += if arch.tie_word_embeddings {
        emb
    } else {
        2.0 * emb
    };
    total + arch.hidden_size as f64 // final norm
}
