//! Mamba-2 state-space scan timings: per-head-token work of the chunked SSD kernels.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{non_positive_fields, positive};

/// Speed of the chunked Mamba-2 scan Megatron-Core trains with (mamba_ssm's
/// `mamba_split_conv1d_scan_combined`: the causal convolution, the chunk cumulative sum, chunk
/// states, state passing, the C·Bᵀ product and the chunk scan, Triton), from published
/// timings. Every kernel but the state passing runs in parallel over chunks and heads, so the
/// time is priced per (token × head) at a reference state size (head dim × state dim), the
/// way large batches measure it; the state passing's sequential walk over the chunks is not
/// priced (no measurement separates it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MambaScanKernel {
    /// The kernels measured.
    pub kernel: String,
    /// Seconds ×1e-9 per (token × head) at the reference state size, forward.
    pub forward_ns_per_head_token: f64,
    /// The backward's time over the forward's (recompute of the forward's chunk work
    /// included).
    pub backward_over_forward: f64,
    /// Head dim × state dim the forward was measured at; other shapes scale by theirs.
    pub reference_state_elems: f64,
    pub source: String,
}

/// One Mamba-2 mixer's scan as a GPU runs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MambaScanCall {
    /// Tokens × heads this GPU walks (after any TP and CP re-sharding).
    pub head_tokens: f64,
    pub head_dim: f64,
    pub state_dim: f64,
}

impl MambaScanKernel {
    /// Seconds of one call: (forward + backward, forward).
    pub fn seconds(&self, call: &MambaScanCall) -> (f64, f64) {
        if call.head_tokens.is_nan() || call.head_tokens <= 0.0 {
            return (0.0, 0.0);
        }
        let state = call.head_dim * call.state_dim / self.reference_state_elems;
        let forward = call.head_tokens * state * self.forward_ns_per_head_token * 1e-9;
        (forward * (1.0 + self.backward_over_forward), forward)
    }

    fn fields(&self) -> [(&'static str, f64); 3] {
        [
            ("forward_ns_per_head_token", self.forward_ns_per_head_token),
            ("backward_over_forward", self.backward_over_forward),
            ("reference_state_elems", self.reference_state_elems),
        ]
    }

    /// Whether every figure is positive; a table that is not is never read (the time model
    /// falls back to the FLOPs at `efficiency.attention`).
    pub fn usable(&self) -> bool {
        self.fields().iter().all(|(_, v)| positive(*v))
    }

    pub fn problems(&self) -> Vec<String> {
        non_positive_fields(&self.fields())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel() -> MambaScanKernel {
        MambaScanKernel {
            kernel: "test".into(),
            forward_ns_per_head_token: 1.0,
            backward_over_forward: 2.5,
            reference_state_elems: 8192.0,
            source: String::new(),
        }
    }

    #[test]
    fn time_scales_with_head_tokens_and_state_size() {
        let k = kernel();
        let call = MambaScanCall {
            head_tokens: 1e6,
            head_dim: 64.0,
            state_dim: 128.0,
        };
        let (total, forward) = k.seconds(&call);
        // 1e6 head-tokens at 1 ns: 1 ms forward, 3.5 ms with the backward.
        assert!((forward - 1e-3).abs() < 1e-12);
        assert!((total - 3.5e-3).abs() < 1e-12);
        let wider = MambaScanCall {
            state_dim: 256.0,
            ..call
        };
        assert!((k.seconds(&wider).1 - 2e-3).abs() < 1e-12);
        assert_eq!(
            k.seconds(&MambaScanCall {
                head_tokens: 0.0,
                ..call
            }),
            (0.0, 0.0)
        );
    }

    #[test]
    fn a_table_with_a_missing_figure_is_not_read() {
        let mut k = kernel();
        assert!(k.usable());
        k.backward_over_forward = 0.0;
        assert!(!k.usable());
        assert_eq!(k.problems(), vec!["backward_over_forward must be positive"]);
    }
}
