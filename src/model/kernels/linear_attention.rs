//! Gated DeltaNet kernel timings: a latency-bound state pass per chunk plus per-head-token
//! work.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{non_positive_fields, positive};

/// Speed of the chunked Gated DeltaNet kernels (flash-linear-attention's
/// `chunk_gated_delta_rule`, which Megatron-Core's GDN layer calls), from published timings.
///
/// The kernels split the sequence into chunks; all but one run in parallel over chunks and
/// heads, priced per head-token. The state pass (`chunk_gated_delta_rule_fwd_h`, and in the
/// backward its recompute and `chunk_gated_delta_rule_bwd_dhu`) walks the chunks one after
/// another with one CTA per (sequence, head, value block): with few heads per GPU it is
/// latency-bound, a fixed time per chunk whatever the work, so its time grows with the full
/// sequence length, not with the tokens a GPU holds. Under context parallelism Megatron
/// re-shards GDN from sequence to heads (`a2a_cp_to_hp`), so every CP rank walks the whole
/// sequence for its share of the heads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinearAttentionKernel {
    /// The kernels measured.
    pub kernel: String,
    /// Tokens per chunk (the sequential state pass takes one step per chunk).
    pub chunk_tokens: f64,
    /// Value-dimension block of the state pass: CTAs = sequences × heads × d_v / this.
    pub value_block: f64,
    /// Seconds ×1e-6 per chunk of the state pass while its CTAs fit in one wave: the
    /// forward's pass, and the backward's passes together.
    pub forward_step_us: f64,
    pub backward_step_us: f64,
    /// Seconds ×1e-9 per (token × value head) of the parallel kernels at the reference
    /// state size, forward and backward.
    pub forward_ns_per_head_token: f64,
    pub backward_ns_per_head_token: f64,
    /// State size d_k × d_v the per-head-token figures were measured at; other head dims
    /// scale them by their state size.
    pub reference_state_elems: f64,
    pub source: String,
}

/// One Gated DeltaNet call as a GPU runs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearAttentionCall {
    /// Sequences in the call (the microbatch).
    pub sequences: f64,
    /// Full sequence length each sequence is walked over.
    pub seq_len: f64,
    /// Value heads this GPU runs.
    pub value_heads: f64,
    pub key_head_dim: f64,
    pub value_head_dim: f64,
    /// Streaming multiprocessors of the GPU (one CTA each per wave); 0 = unknown (one wave).
    pub sm_count: f64,
}

impl LinearAttentionKernel {
    /// Seconds of one call: (forward + backward, forward).
    pub fn seconds(&self, call: &LinearAttentionCall) -> (f64, f64) {
        if !(call.sequences > 0.0 && call.seq_len > 0.0 && call.value_heads > 0.0) {
            return (0.0, 0.0);
        }
        let chunks = (call.seq_len / self.chunk_tokens.max(1.0)).ceil();
        let ctas = call.sequences
            * call.value_heads
            * (call.value_head_dim / self.value_block.max(1.0))
                .ceil()
                .max(1.0);
        let waves = if call.sm_count > 0.0 {
            (ctas / call.sm_count).ceil().max(1.0)
        } else {
            1.0
        };
        let steps = chunks * waves * 1e-6;
        let head_tokens = call.sequences
            * call.seq_len
            * call.value_heads
            * (call.key_head_dim * call.value_head_dim / self.reference_state_elems)
            * 1e-9;
        let forward = steps * self.forward_step_us + head_tokens * self.forward_ns_per_head_token;
        let backward =
            steps * self.backward_step_us + head_tokens * self.backward_ns_per_head_token;
        (forward + backward, forward)
    }

    /// Whether every figure is positive; a table that is not is never read (the time model
    /// falls back to the FLOPs at `efficiency.attention`), as with the other tables.
    pub fn usable(&self) -> bool {
        self.fields().iter().all(|(_, v)| positive(*v))
    }

    fn fields(&self) -> [(&'static str, f64); 7] {
        [
            ("chunk_tokens", self.chunk_tokens),
            ("value_block", self.value_block),
            ("forward_step_us", self.forward_step_us),
            ("backward_step_us", self.backward_step_us),
            ("forward_ns_per_head_token", self.forward_ns_per_head_token),
            (
                "backward_ns_per_head_token",
                self.backward_ns_per_head_token,
            ),
            ("reference_state_elems", self.reference_state_elems),
        ]
    }

    pub fn problems(&self) -> Vec<String> {
        non_positive_fields(&self.fields())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gdn_kernel() -> LinearAttentionKernel {
        LinearAttentionKernel {
            kernel: "test".into(),
            chunk_tokens: 64.0,
            value_block: 64.0,
            forward_step_us: 1.0,
            backward_step_us: 2.0,
            forward_ns_per_head_token: 1.0,
            backward_ns_per_head_token: 2.0,
            reference_state_elems: 128.0 * 128.0,
            source: "test".into(),
        }
    }

    #[test]
    fn gdn_state_pass_grows_with_the_full_sequence_not_the_heads() {
        let k = gdn_kernel();
        let call = |heads: f64, seq: f64| LinearAttentionCall {
            sequences: 1.0,
            seq_len: seq,
            value_heads: heads,
            key_head_dim: 128.0,
            value_head_dim: 128.0,
            sm_count: 132.0,
        };
        // 8192 tokens: 128 chunk steps of 1 µs; 8 heads × 8192 head-tokens of 1 ns.
        let (total, fwd) = k.seconds(&call(8.0, 8192.0));
        assert!((fwd - (128e-6 + 65536e-9)).abs() < 1e-12);
        assert!((total - fwd - (2.0 * 128e-6 + 2.0 * 65536e-9)).abs() < 1e-12);
        // A sixteenth of the heads over the same sequence keeps the whole state pass.
        let (_, fwd_few) = k.seconds(&call(0.5, 8192.0));
        assert!(fwd_few > 128e-6 && fwd_few < fwd);
        // 132 SMs hold 66 heads × 2 value blocks; 67 heads need a second wave.
        let (_, one_wave) = k.seconds(&call(66.0, 8192.0));
        let (_, two_waves) = k.seconds(&call(67.0, 8192.0));
        assert!(two_waves - one_wave > 127e-6);
        assert!(k.problems().is_empty());
        let mut broken = gdn_kernel();
        broken.chunk_tokens = 0.0;
        assert_eq!(broken.problems().len(), 1);
        assert!(k.usable() && !broken.usable());
        assert_eq!(k.seconds(&call(0.0, 8192.0)), (0.0, 0.0));
    }
}
