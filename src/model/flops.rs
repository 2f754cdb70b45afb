//! Model FLOPs per token, exactly as Megatron's `num_floating_point_operations` counts them
//! (forward + backward = 6 FLOPs per multiply-accumulate; causal attention halved; router,
//! norms and recompute not counted). Split by the kind of kernel that runs them, because
//! FP8/FP4 speed up GEMMs but not attention.

use serde::{Deserialize, Serialize};

use super::arch::{
    layer_kind_index, layer_kind_of, Architecture, AttentionKind, FfnKind, MambaDims,
    MlpActivation, LAYER_KINDS,
};

/// Forward + backward FLOPs per multiply-accumulate.
const FWD_BWD: f64 = 6.0;

/// FLOPs per token of one decoder layer, by kernel type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LayerFlops {
    /// Attention-side token-linear GEMMs (QKV/MLA/GDN projections, output projection).
    pub attn_proj: f64,
    /// The MLA up-projection part of `attn_proj` (what `mla_up_proj` recompute repeats).
    pub mla_up_proj: f64,
    /// The output-projection part of `attn_proj` (the `attn_proj` offloading group's module).
    pub out_proj: f64,
    /// Softmax attention (QKᵀ and PV), causal-halved; grows with the sequence.
    pub attn_core: f64,
    /// Gated DeltaNet convolution and recurrence.
    pub linear_core: f64,
    /// Dense MLP or shared experts.
    pub mlp: f64,
    /// Routed experts (top-k of them).
    pub experts: f64,
}

impl LayerFlops {
    pub fn total(&self) -> f64 {
        self.attn_proj + self.attn_core + self.linear_core + self.mlp + self.experts
    }
    pub fn gemm(&self) -> f64 {
        self.attn_proj + self.mlp + self.experts
    }
}

/// Mean number of keys each query attends to under a causal mask.
pub fn causal_keys_per_query(kind: AttentionKind, seq: f64, window: Option<u64>) -> f64 {
    match (kind, window) {
        (AttentionKind::Sliding, Some(w)) if (w as f64) < seq => {
            let w = w as f64;
            // Σ_i min(i, w) / s for i = 1..s, continuous form.
            w - w * w / (2.0 * seq)
        }
        _ => seq / 2.0,
    }
}

/// FLOPs per token of a layer of kind `kind` at sequence length `seq`.
pub fn layer_flops(arch: &Architecture, kind: usize, seq: u64) -> LayerFlops {
    let (attention, ffn) = layer_kind_of(kind);
    let h = arch.hidden_size as f64;
    let s = seq as f64;
    let n_a = arch.num_attention_heads as f64;
    let mut f = LayerFlops::default();
    match attention {
        AttentionKind::Absent => {}
        AttentionKind::Mamba => {
            if let Some(m) = &arch.mamba {
                mamba_flops(&mut f, h, m, m.inner_width());
            }
        }
        AttentionKind::Linear => {
            if let Some(g) = &arch.linear_attention {
                let q = g.key_width();
                let v = g.value_width();
                let n_v = g.num_value_heads as f64;
                let conv = g.conv_kernel_dim as f64;
                let d_v = g.value_head_dim as f64;
                f.attn_proj = FWD_BWD * (h * g.in_proj_width() + h * v);
                f.out_proj = FWD_BWD * h * v;
                f.linear_core = FWD_BWD * (conv * (2.0 * q + v) + 4.0 * n_v * d_v * d_v);
            }
        }
        AttentionKind::Full | AttentionKind::Sliding => {
            let keys = causal_keys_per_query(attention, s, arch.sliding_window);
            if let Some(m) = &arch.mla {
                let qk = m.qk_width();
                let v = m.v_head_dim as f64;
                let rope = m.qk_pos_emb_head_dim as f64;
                let kv_lora = m.kv_lora_rank as f64;
                let (q_term, q_up) = match m.q_lora_rank {
                    Some(q_lora) => {
                        let q_lora = q_lora as f64;
                        (q_lora * (h + n_a * qk + 1.0), q_lora * n_a * qk)
                    }
                    None => (h * n_a * qk, 0.0),
                };
                let kv_term = kv_lora * (h + n_a * (m.qk_head_dim as f64 + v) + 1.0);
                f.attn_proj = FWD_BWD * (q_term + kv_term + h * rope + n_a * v * h);
                f.mla_up_proj = FWD_BWD * (q_up + kv_lora * n_a * (m.qk_head_dim as f64 + v));
                f.out_proj = FWD_BWD * n_a * v * h;
                f.attn_core = FWD_BWD * keys * n_a * (qk + v);
            } else {
                let d = arch.head_dim() as f64;
                f.attn_proj = FWD_BWD * (h * arch.qkv_width() + n_a * d * h);
                f.out_proj = FWD_BWD * n_a * d * h;
                f.attn_core = FWD_BWD * keys * n_a * 2.0 * d;
            }
        }
    }
    let gamma = arch.mlp_matrices();
    match (&arch.moe, ffn) {
        (_, FfnKind::Absent) => {}
        (Some(m), FfnKind::Moe) => {
            f.experts = FWD_BWD * h * gamma * (m.moe_ffn_hidden_size * m.top_k) as f64;
            f.mlp = FWD_BWD * h * gamma * m.shared_expert_ffn_hidden_size as f64;
        }
        _ => {
            f.mlp = FWD_BWD * h * gamma * arch.ffn_hidden_size as f64;
        }
    }
    f
}

/// A Mamba-2 mixer's FLOPs per token at inner width `inner`: in_proj (z and x at that width,
/// B, C and dt), out_proj, and the state-space scan as Megatron counts it, `7 · d_inner ·
/// state_dim` forward FLOPs (`hybrid_flops` in megatron/training/training.py, Megatron-LM
/// d98e8a64; Megatron-Bridge's training/utils/flop_utils.py the same). The depthwise
/// convolution is not counted, as the norms are not.
fn mamba_flops(f: &mut LayerFlops, h: f64, m: &MambaDims, inner: f64) {
    let in_proj = 2.0 * inner + m.state_width() + m.num_heads as f64;
    f.attn_proj = FWD_BWD * (h * in_proj + inner * h);
    f.out_proj = FWD_BWD * inner * h;
    f.linear_core = FWD_BWD * 3.5 * inner * m.state_dim as f64;
}

/// Model FLOPs per token for the whole network, by component.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ModelFlops {
    /// Decoder layers (sum over layers).
    pub decoder: LayerFlops,
    /// MTP layers including their projection.
    pub mtp: f64,
    /// Output layer (and the MTP heads' output layers).
    pub logits: f64,
}

impl ModelFlops {
    pub fn total(&self) -> f64 {
        self.decoder.total() + self.mtp + self.logits
    }
}

/// Per-kind FLOPs table for one sequence length.
pub fn kind_table(arch: &Architecture, seq: u64) -> [LayerFlops; LAYER_KINDS] {
    let mut table = [LayerFlops::default(); LAYER_KINDS];
    for (kind, entry) in table.iter_mut().enumerate() {
        *entry = layer_flops(arch, kind, seq);
    }
    table
}

/// Sum `table` weighted by layer counts.
pub fn sum_layers(table: &[LayerFlops; LAYER_KINDS], counts: &[u32; LAYER_KINDS]) -> LayerFlops {
    let mut acc = LayerFlops::default();
    for (f, &n) in table.iter().zip(counts.iter()) {
        let n = n as f64;
        acc.attn_proj += f.attn_proj * n;
        acc.mla_up_proj += f.mla_up_proj * n;
        acc.out_proj += f.out_proj * n;
        acc.attn_core += f.attn_core * n;
        acc.linear_core += f.linear_core * n;
        acc.mlp += f.mlp * n;
        acc.experts += f.experts * n;
    }
    acc
}

/// FLOPs of one MTP layer beyond its decoder layer (projection of [h; e] to h, norms).
pub fn mtp_extra_per_layer(arch: &Architecture) -> f64 {
    let h = arch.hidden_size as f64;
    FWD_BWD * (3.0 * h + 2.0 * h * h)
}

/// Model FLOPs per token with `mtp_layers` MTP layers at sequence length `seq`.
pub fn model_flops_per_token(arch: &Architecture, mtp_layers: u32, seq: u64) -> ModelFlops {
    let table = kind_table(arch, seq);
    let counts = arch.count_kinds(0, arch.num_layers);
    model_flops_from_table(arch, &table, &counts, mtp_layers)
}

pub fn model_flops_from_table(
    arch: &Architecture,
    table: &[LayerFlops; LAYER_KINDS],
    counts: &[u32; LAYER_KINDS],
    mtp_layers: u32,
) -> ModelFlops {
    let decoder = sum_layers(table, counts);
    let m = mtp_layers as f64;
    let mtp = m * (table[arch.mtp_layer_kind()].total() + mtp_extra_per_layer(arch));
    let logits = FWD_BWD * (arch.hidden_size * arch.vocab_size) as f64 * (1.0 + m);
    ModelFlops {
        decoder,
        mtp,
        logits,
    }
}

/// Where another FLOPs counter departs from this module's count: older Megatron-Bridge
/// releases (`training/utils/flop_utils.py` before v0.5.0) counted some architectures
/// differently, and a throughput they reported is in their count. Both flags off: this
/// module's count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountingRules {
    /// A gated MLP counts its third matrix only when its activation is SiLU
    /// (`gated_linear_multiplier = 3/2 if activation_func == F.silu else 1`): a gated unit
    /// with another activation (GPT-OSS's quick-GELU) is counted as two matrices.
    #[serde(default)]
    pub gated_mlp_needs_silu: bool,
    /// Sliding-window layers are counted as full causal attention (no window term).
    #[serde(default)]
    pub sliding_window_as_full: bool,
    /// Causal softmax attention is counted over every key, as if unmasked (twice this
    /// module's causal count): NeMo 2.0's `flops_formulas.llama2`/`llama3` (`12 * s / h`).
    #[serde(default)]
    pub causal_attention_unmasked: bool,
    /// A Mamba-2 mixer's inner width is counted as twice the hidden size (`d_in = 2 * h` in
    /// `hybrid_flops`, megatron/training/training.py, Megatron-LM d98e8a64, and Megatron-Bridge's
    /// flop_utils.py, v0.3.0 to v0.6.0), whatever its heads × head dim: its projections and
    /// scan are counted at that width, its dt at the real head count.
    #[serde(default)]
    pub mamba_inner_as_twice_hidden: bool,
}

/// Model FLOPs per token as a counter following `rules` counts them (the model's own count,
/// [`model_flops_per_token`], when neither rule applies).
pub fn model_flops_per_token_counted(
    arch: &Architecture,
    mtp_layers: u32,
    seq: u64,
    rules: CountingRules,
) -> f64 {
    let mut table = kind_table(arch, seq);
    if rules.sliding_window_as_full {
        for (kind, entry) in table.iter_mut().enumerate() {
            let (attention, ffn) = layer_kind_of(kind);
            if attention == AttentionKind::Sliding {
                *entry = layer_flops(arch, layer_kind_index(AttentionKind::Full, ffn), seq);
            }
        }
    }
    if rules.causal_attention_unmasked {
        for (kind, entry) in table.iter_mut().enumerate() {
            // Full layers attend to seq / 2 keys on average (`causal_keys_per_query`); a
            // window (a sliding layer counted as full included) is left as counted above.
            if layer_kind_of(kind).0 == AttentionKind::Full {
                entry.attn_core *= 2.0;
            }
        }
    }
    if let (true, Some(m)) = (rules.mamba_inner_as_twice_hidden, &arch.mamba) {
        let h = arch.hidden_size as f64;
        for (kind, entry) in table.iter_mut().enumerate() {
            if layer_kind_of(kind).0 == AttentionKind::Mamba {
                mamba_flops(entry, h, m, 2.0 * h);
            }
        }
    }
    if rules.gated_mlp_needs_silu
        && arch.gated_linear_unit
        && arch.mlp_activation != MlpActivation::Silu
    {
        let two_matrices = 2.0 / arch.mlp_matrices();
        for entry in table.iter_mut() {
            entry.mlp *= two_matrices;
            entry.experts *= two_matrices;
        }
    }
    let counts = arch.count_kinds(0, arch.num_layers);
    model_flops_from_table(arch, &table, &counts, mtp_layers).total()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPT-OSS-120B's shape (cards/models/gpt-oss-120b.yaml).
    fn gpt_oss() -> Architecture {
        let card = "num_layers: 36\nhidden_size: 2880\nvocab_size: 201088\n\
                    num_attention_heads: 64\nnum_query_groups: 8\nhead_dim: 64\n\
                    attention_pattern: [sliding, full]\nsliding_window: 128\n\
                    mlp_activation: quick_gelu\n\
                    moe: {num_experts: 128, top_k: 4, moe_ffn_hidden_size: 2880}\n";
        serde_yaml::from_str(card).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn counting_rules_reproduce_an_older_counter_by_hand() {
        let arch = gpt_oss();
        // Per token at 4K, × 6 per multiply-accumulate: projections 2880·(4096+1024+4096),
        // experts 3·2880·2880·4 (two matrices: 2·…), full attention 2048 keys × 64 heads ×
        // 128, windowed 128 − 128²/8192 = 126 keys, logits 2880·201088.
        let proj = 6.0 * 2880.0 * 9216.0;
        let experts = 6.0 * 3.0 * 2880.0 * 2880.0 * 4.0;
        let full = 6.0 * 2048.0 * 64.0 * 128.0;
        let window = 6.0 * 126.0 * 64.0 * 128.0;
        let logits = 6.0 * 2880.0 * 201088.0;
        let model = 36.0 * (proj + experts) + 18.0 * (full + window) + logits;
        let own = model_flops_per_token(&arch, 0, 4096).total();
        assert!((own / model - 1.0).abs() < 1e-12, "{own} vs {model}");
        let neither = model_flops_per_token_counted(&arch, 0, 4096, CountingRules::default());
        assert!((neither / model - 1.0).abs() < 1e-12);
        let old = CountingRules {
            gated_mlp_needs_silu: true,
            sliding_window_as_full: true,
            ..CountingRules::default()
        };
        let counted = model_flops_per_token_counted(&arch, 0, 4096, old);
        let by_hand = 36.0 * (proj + experts * 2.0 / 3.0 + full) + logits;
        assert!(
            (counted / by_hand - 1.0).abs() < 1e-12,
            "{counted} vs {by_hand}"
        );
        // About a sixth fewer FLOPs: those releases' TFLOP/s read ×1.20 in the model's count.
        assert!((model / counted - 1.2012).abs() < 1e-3);
        // A SiLU model is counted alike by both rules.
        let mut silu = arch;
        silu.mlp_activation = MlpActivation::Silu;
        silu.attention_pattern = vec![AttentionKind::Full];
        let a = model_flops_per_token(&silu, 0, 4096).total();
        let b = model_flops_per_token_counted(&silu, 0, 4096, old);
        assert!((a / b - 1.0).abs() < 1e-12);
    }

    #[test]
    fn unmasked_counting_reproduces_nemo_llama_formula() {
        // Llama-3-8B (cards/models/llama3-8b.yaml) at 8K, by NeMo 2.0's `flops_formulas.llama3`
        // per token: L·h²·(12 + 12·g/a + 18·f/h + 12·s/h) + 6·V·h.
        let card = "num_layers: 32\nhidden_size: 4096\nvocab_size: 128256\n\
                    num_attention_heads: 32\nnum_query_groups: 8\nhead_dim: 128\n\
                    ffn_hidden_size: 14336\n";
        let arch: Architecture = serde_yaml::from_str(card).unwrap_or_else(|e| panic!("{e}"));
        let (l, h, s) = (32.0, 4096.0, 8192.0);
        let nemo = l * h * h * (12.0 + 12.0 * 8.0 / 32.0 + 18.0 * 14336.0 / h + 12.0 * s / h)
            + 6.0 * 128256.0 * h;
        let rules = CountingRules {
            causal_attention_unmasked: true,
            ..CountingRules::default()
        };
        let counted = model_flops_per_token_counted(&arch, 0, 8192, rules);
        assert!((counted / nemo - 1.0).abs() < 1e-12, "{counted} vs {nemo}");
        // This module's causal count has half that attention term.
        let own = model_flops_per_token(&arch, 0, 8192).total();
        let attention = l * h * h * 12.0 * s / h;
        assert!(((nemo - own) / (attention / 2.0) - 1.0).abs() < 1e-12);
    }
}
