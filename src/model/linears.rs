//! The linear layers of one decoder layer as the elements that flow through them per token of
//! the local (CP-sharded) sequence: each layer's input (what a low-precision recipe quantizes in
//! the forward pass) and its output (whose gradient it quantizes in the backward pass). The same
//! layers `flops.rs` counts; the router and the output layer stay in BF16 in Megatron-Core (its
//! Transformer Engine autocast covers the decoder's linear layers only), so they are not here.

use super::arch::{layer_kind_of, Architecture, AttentionKind, FfnKind};

/// Elements per local token through one layer's linear layers, summed over the layers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinearElements {
    /// Inputs of the linear layers (quantized in the forward pass).
    pub inputs: f64,
    /// Outputs of the linear layers (their gradients are quantized in the backward pass).
    pub outputs: f64,
}

impl LinearElements {
    pub fn total(&self) -> f64 {
        self.inputs + self.outputs
    }

    /// One linear layer of `input` and `output` elements per token.
    fn add(&mut self, input: f64, output: f64) {
        self.inputs += input;
        self.outputs += output;
    }
}

/// Elements per local token through the linear layers of one layer of kind `kind` on one rank.
/// `tp` splits the column-parallel outputs and row-parallel inputs; `sp_div` (TP with sequence
/// parallelism, else 1) splits the hidden-size tensors on either side, as `activations.rs`
/// counts them. Routed experts see `top_k` copies of each token.
pub fn linear_elements(arch: &Architecture, kind: usize, tp: f64, sp_div: f64) -> LinearElements {
    let (attention, ffn) = layer_kind_of(kind);
    let h = arch.hidden_size as f64;
    let hidden = h / sp_div;
    let n_a = arch.num_attention_heads as f64;
    let mut e = LinearElements::default();
    match attention {
        AttentionKind::Absent => {}
        AttentionKind::Mamba => {
            if let Some(m) = &arch.mamba {
                e.add(hidden, m.in_proj_width() / tp); // in_proj
                e.add(m.inner_width() / tp, hidden); // out_proj
            }
        }
        AttentionKind::Linear => {
            if let Some(g) = &arch.linear_attention {
                e.add(hidden, g.in_proj_width() / tp); // in_proj
                e.add(g.value_width() / tp, hidden); // out_proj
            }
        }
        AttentionKind::Full | AttentionKind::Sliding => {
            if let Some(m) = &arch.mla {
                let queries = n_a * m.qk_width() / tp;
                match m.q_lora_rank {
                    Some(q_lora) => {
                        let q_lora = q_lora as f64 / sp_div;
                        e.add(hidden, q_lora); // q down-projection
                        e.add(q_lora, queries); // q up-projection
                    }
                    None => e.add(hidden, queries),
                }
                // kv down-projection (the latent and the shared rotary key), then the up-projection
                // to per-head non-rotary keys and values.
                let kv_latent = m.kv_lora_rank as f64 / sp_div;
                e.add(hidden, kv_latent + m.qk_pos_emb_head_dim as f64 / sp_div);
                let per_head_kv = (m.qk_head_dim + m.v_head_dim) as f64;
                e.add(kv_latent, n_a * per_head_kv / tp);
                e.add(n_a * m.v_head_dim as f64 / tp, hidden); // output projection
            } else {
                e.add(hidden, arch.qkv_width() / tp); // qkv
                e.add(n_a * arch.head_dim() as f64 / tp, hidden); // output projection
            }
        }
    }
    let fc1_width = arch.mlp_matrices() - 1.0; // 2 for gated units (gate and up), 1 otherwise
    match (&arch.moe, ffn) {
        (_, FfnKind::Absent) => {}
        (Some(m), FfnKind::Moe) => {
            let k = m.top_k as f64;
            let f_e = m.moe_ffn_hidden_size as f64;
            e.add(k * hidden, k * fc1_width * f_e / sp_div); // experts' fc1
            e.add(k * f_e / sp_div, k * hidden); // experts' fc2
            let f_sh = m.shared_expert_ffn_hidden_size as f64;
            if f_sh > 0.0 {
                e.add(hidden, fc1_width * f_sh / tp);
                e.add(f_sh / tp, hidden);
            }
        }
        _ => {
            let f = arch.ffn_hidden_size as f64;
            e.add(hidden, fc1_width * f / tp);
            e.add(f / tp, hidden);
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::{layer_kind_index, FfnKind};

    fn card(text: &str) -> Architecture {
        serde_yaml::from_str(text).expect("embedded card parses")
    }

    #[test]
    fn a_dense_gqa_layer_counts_each_linear_once() {
        // Llama-3-8B: hidden 4096, 32 heads of 128, 8 KV heads, SwiGLU 14336.
        let a = card(include_str!("../../cards/models/llama3-8b.yaml"));
        let dense = layer_kind_index(AttentionKind::Full, FfnKind::Dense);
        let e = linear_elements(&a, dense, 1.0, 1.0);
        // qkv 4096 -> 6144, proj 4096 -> 4096, fc1 4096 -> 28672, fc2 14336 -> 4096.
        assert_eq!(e.inputs, 4096.0 + 4096.0 + 4096.0 + 14336.0);
        assert_eq!(e.outputs, 6144.0 + 4096.0 + 28672.0 + 4096.0);
        // TP2 with sequence parallelism halves every tensor.
        let split = linear_elements(&a, dense, 2.0, 2.0);
        assert_eq!(split.total() * 2.0, e.total());
    }

    #[test]
    fn routed_experts_see_top_k_copies_of_each_token() {
        // Qwen3-30B-A3B: hidden 2048, 32 heads of 128, 4 KV heads, 128 experts top-8 of 768.
        let a = card(include_str!("../../cards/models/qwen3-30b-a3b.yaml"));
        let moe = linear_elements(
            &a,
            layer_kind_index(AttentionKind::Full, FfnKind::Moe),
            1.0,
            1.0,
        );
        let attention_in = 2048.0 + 4096.0;
        let attention_out = (4096.0 + 1024.0) + 2048.0;
        assert_eq!(moe.inputs - attention_in, 8.0 * (2048.0 + 768.0));
        assert_eq!(moe.outputs - attention_out, 8.0 * (1536.0 + 2048.0));
    }

    #[test]
    fn mla_counts_its_down_and_up_projections() {
        // DeepSeek-V3: q_lora 1536, kv_lora 512, 128 heads of 128 + 64 rope, v 128; one
        // shared expert of 2048 beside 8 routed of 2048.
        let a = card(include_str!("../../cards/models/deepseek-v3.yaml"));
        let e = linear_elements(
            &a,
            layer_kind_index(AttentionKind::Full, FfnKind::Moe),
            1.0,
            1.0,
        );
        let attention_in = 7168.0 + 1536.0 + 7168.0 + 512.0 + 128.0 * 128.0;
        let attention_out = 1536.0 + 128.0 * 192.0 + (512.0 + 64.0) + 128.0 * 256.0 + 7168.0;
        let experts_in = 8.0 * (7168.0 + 2048.0) + 7168.0 + 2048.0;
        let experts_out = 8.0 * (4096.0 + 7168.0) + 4096.0 + 7168.0;
        assert_eq!(e.inputs, attention_in + experts_in);
        assert_eq!(e.outputs, attention_out + experts_out);
    }
}
