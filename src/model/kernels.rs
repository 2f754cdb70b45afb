//! Published kernel and network speeds as data, and their interpolation: the
//! `attention_kernels` table of a hardware card (log-space in the sequence length a kernel
//! call sees, linear in head dimension) and the `expert_dispatch` table (achieved MoE
//! dispatch/combine bandwidth by expert-parallel span); both clamped (flat) outside the
//! measured range.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::config::FlexBackend;

/// Forward or backward pass of a fused-attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KernelPass {
    Fwd,
    Bwd,
}

/// One measured curve: achieved TFLOP/s at each of the table's sequence lengths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttentionCurve {
    /// Query/key head dimension.
    pub head_dim: u32,
    pub causal: bool,
    pub pass: KernelPass,
    /// TFLOP/s (FlashAttention's FLOP count: causal halved, backward 2.5× forward), one per
    /// entry of `seq_lengths`.
    pub tflops: Vec<f64>,
    /// Where the numbers come from (paper, figure, panel).
    pub source: String,
}

/// Fused-attention speed of one GPU by sequence length, head dimension, mask and pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttentionKernelTable {
    /// The kernel measured (it should be the one the training stack runs).
    pub kernel: String,
    /// Backward FLOPs per forward FLOP in the count the published backward speeds use
    /// (FlashAttention's: the recomputed scores, dS and three gradient GEMMs, 2.5).
    pub backward_flops_per_forward: f64,
    /// Sequence lengths (query = key length per call) of the columns, increasing.
    pub seq_lengths: Vec<f64>,
    pub curves: Vec<AttentionCurve>,
}

/// Positive and finite (NaN fails).
fn positive(v: f64) -> bool {
    v > 0.0 && v.is_finite()
}

/// Piecewise-linear in log(x), clamped to the end values outside `xs`. `None` when the
/// curve is malformed (lengths differ, empty, non-positive or unsorted x).
fn interp_log(xs: &[f64], ys: &[f64], x: f64) -> Option<f64> {
    if xs.is_empty() || xs.len() != ys.len() || !positive(x) {
        return None;
    }
    if xs.iter().any(|v| !positive(*v)) || xs.windows(2).any(|w| w[1] <= w[0]) {
        return None;
    }
    let (first, last) = (xs[0], xs[xs.len() - 1]);
    if x <= first {
        return Some(ys[0]);
    }
    if x >= last {
        return Some(ys[ys.len() - 1]);
    }
    let i = xs.iter().position(|v| *v >= x)?.max(1);
    let (x0, x1) = (xs[i - 1].ln(), xs[i].ln());
    let t = (x.ln() - x0) / (x1 - x0);
    Some(ys[i - 1] + t * (ys[i] - ys[i - 1]))
}

impl AttentionKernelTable {
    /// TFLOP/s of the measured curves with this mask and pass, at `len`, interpolated
    /// linearly between the bracketing head dimensions (clamped outside them).
    fn measured(&self, head_dim: f64, causal: bool, pass: KernelPass, len: f64) -> Option<f64> {
        // The nearest measured head dims at or below and at or above (no allocation: this
        // runs inside every `evaluate`).
        let mut below: Option<(f64, &AttentionCurve)> = None;
        let mut above: Option<(f64, &AttentionCurve)> = None;
        for c in self
            .curves
            .iter()
            .filter(|c| c.causal == causal && c.pass == pass)
        {
            let d = c.head_dim as f64;
            if d <= head_dim && below.is_none_or(|(b, _)| d > b) {
                below = Some((d, c));
            }
            if d >= head_dim && above.is_none_or(|(a, _)| d < a) {
                above = Some((d, c));
            }
        }
        let at = |c: &AttentionCurve| interp_log(&self.seq_lengths, &c.tflops, len);
        match (below, above) {
            (Some((a, ca)), Some((b, cb))) if b > a => {
                let (ya, yb) = (at(ca)?, at(cb)?);
                Some(ya + (head_dim - a) / (b - a) * (yb - ya))
            }
            (Some((_, c)), _) | (None, Some((_, c))) => at(c),
            (None, None) => None,
        }
    }

    /// Achieved TFLOP/s for one kernel call. A combination the sources do not give (the
    /// causal backward, typically) is derived: the other mask's speed for that pass, times
    /// the ratio of the two masks' forward speeds at the same length (the masking overhead
    /// is taken to be the same in both passes).
    pub fn tflops(&self, head_dim: f64, causal: bool, pass: KernelPass, len: f64) -> Option<f64> {
        if let Some(v) = self.measured(head_dim, causal, pass, len) {
            return Some(v).filter(|v| *v > 0.0);
        }
        let other = self.measured(head_dim, !causal, pass, len)?;
        let fwd_this = self.measured(head_dim, causal, KernelPass::Fwd, len)?;
        let fwd_other = self.measured(head_dim, !causal, KernelPass::Fwd, len)?;
        if fwd_other > 0.0 {
            Some(other * fwd_this / fwd_other).filter(|v| *v > 0.0)
        } else {
            None
        }
    }

    /// Problems with the table, for the card loader's diagnostics.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !positive(self.backward_flops_per_forward) {
            out.push("backward_flops_per_forward must be positive".to_string());
        }
        let xs = &self.seq_lengths;
        if xs.is_empty() || xs.iter().any(|v| !positive(*v)) || xs.windows(2).any(|w| w[1] <= w[0])
        {
            out.push("seq_lengths must be positive and increasing".to_string());
        }
        for c in &self.curves {
            if c.tflops.len() != xs.len() || c.tflops.iter().any(|v| !positive(*v)) {
                out.push(format!(
                    "curve head_dim {} causal {} {:?}: needs {} positive TFLOP/s values",
                    c.head_dim,
                    c.causal,
                    c.pass,
                    xs.len()
                ));
            }
        }
        out
    }
}

/// Achieved bandwidth of a deduplicating MoE dispatcher (DeepEP/HybridEP normal kernels).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatchTable {
    /// The kernels measured.
    pub kernel: String,
    /// The dispatcher backends the figures are for; empty: both DeepEP and HybridEP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<FlexBackend>,
    /// Within one NVLink domain: achieved fraction of `nvlink_gb_per_s` (bytes a GPU sends
    /// over NVLink per second).
    pub nvlink_fraction: DispatchCombine,
    /// Across nodes: EP spans (GPUs in the expert group) of the RDMA columns, increasing;
    /// empty when no RDMA figure was published (the link rate × the card's network fraction
    /// is used then).
    #[serde(default)]
    pub rdma_spans: Vec<f64>,
    /// Achieved RDMA GB/s per GPU at each span: bytes each GPU sends to other nodes, one copy
    /// per token per destination node (the dispatcher's deduplication), per second.
    #[serde(default)]
    pub rdma_gb_per_s: DispatchCombineColumns,
    pub source: String,
}

/// One figure for dispatch and one for combine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatchCombine {
    pub dispatch: f64,
    pub combine: f64,
}

/// Dispatch and combine columns, one value per span.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatchCombineColumns {
    pub dispatch: Vec<f64>,
    pub combine: Vec<f64>,
}

impl DispatchTable {
    /// Whether the figures apply to `backend`.
    pub fn covers(&self, backend: FlexBackend) -> bool {
        self.backends.is_empty() || self.backends.contains(&backend)
    }

    /// Achieved RDMA bytes/s (dispatch, combine) for an expert group of `span` GPUs,
    /// interpolated in log(span), clamped outside the measured spans.
    pub fn rdma_bytes_per_s(&self, span: f64) -> Option<(f64, f64)> {
        let d = interp_log(&self.rdma_spans, &self.rdma_gb_per_s.dispatch, span)?;
        let c = interp_log(&self.rdma_spans, &self.rdma_gb_per_s.combine, span)?;
        (d > 0.0 && c > 0.0).then_some((d * 1e9, c * 1e9))
    }

    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let n = self.rdma_spans.len();
        let no_rdma = n == 0
            && self.rdma_gb_per_s.dispatch.is_empty()
            && self.rdma_gb_per_s.combine.is_empty();
        if !no_rdma
            && (self
                .rdma_bytes_per_s(self.rdma_spans.first().copied().unwrap_or(0.0))
                .is_none()
                || self.rdma_gb_per_s.dispatch.len() != n
                || self.rdma_gb_per_s.combine.len() != n)
        {
            out.push(format!(
                "rdma_spans must be positive and increasing, with {n} positive dispatch and combine values"
            ));
        }
        let f = &self.nvlink_fraction;
        if !(f.dispatch > 0.0 && f.dispatch <= 1.0 && f.combine > 0.0 && f.combine <= 1.0) {
            out.push("nvlink_fraction values must be in (0, 1]".to_string());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> AttentionKernelTable {
        let curve = |head_dim, causal, pass, tflops: [f64; 3]| AttentionCurve {
            head_dim,
            causal,
            pass,
            tflops: tflops.to_vec(),
            source: "test".into(),
        };
        AttentionKernelTable {
            kernel: "test".into(),
            backward_flops_per_forward: 2.5,
            seq_lengths: vec![1000.0, 4000.0, 16000.0],
            curves: vec![
                curve(128, true, KernelPass::Fwd, [100.0, 200.0, 300.0]),
                curve(256, true, KernelPass::Fwd, [200.0, 400.0, 600.0]),
                curve(128, false, KernelPass::Fwd, [200.0, 300.0, 400.0]),
                curve(128, false, KernelPass::Bwd, [150.0, 250.0, 350.0]),
            ],
        }
    }

    #[test]
    fn interpolates_in_log_length_and_clamps() {
        let t = table();
        let at = |len| t.tflops(128.0, true, KernelPass::Fwd, len).unwrap_or(0.0);
        assert!((at(2000.0) - 150.0).abs() < 1e-9, "log midpoint of 1K..4K");
        assert_eq!(at(100.0), 100.0);
        assert_eq!(at(1e6), 300.0);
    }

    #[test]
    fn interpolates_head_dim_and_clamps() {
        let t = table();
        let v = t
            .tflops(192.0, true, KernelPass::Fwd, 4000.0)
            .unwrap_or(0.0);
        assert!((v - 300.0).abs() < 1e-9);
        assert_eq!(t.tflops(64.0, true, KernelPass::Fwd, 4000.0), Some(200.0));
        assert_eq!(t.tflops(512.0, true, KernelPass::Fwd, 4000.0), Some(400.0));
    }

    #[test]
    fn causal_backward_is_derived_from_the_forward_ratio() {
        let t = table();
        // 250 × 200/300 at 4K.
        let v = t
            .tflops(128.0, true, KernelPass::Bwd, 4000.0)
            .unwrap_or(0.0);
        assert!((v - 250.0 * 200.0 / 300.0).abs() < 1e-9);
    }

    #[test]
    fn dispatch_bandwidth_interpolates_by_span_and_clamps() {
        let t = DispatchTable {
            kernel: "test".into(),
            backends: Vec::new(),
            nvlink_fraction: DispatchCombine {
                dispatch: 0.9,
                combine: 0.9,
            },
            rdma_spans: vec![16.0, 64.0],
            rdma_gb_per_s: DispatchCombineColumns {
                dispatch: vec![40.0, 60.0],
                combine: vec![40.0, 50.0],
            },
            source: "test".into(),
        };
        let d = |span| t.rdma_bytes_per_s(span).map(|v| v.0).unwrap_or(0.0);
        assert!((d(32.0) - 50e9).abs() < 1.0, "log midpoint");
        assert_eq!(d(8.0), 40e9);
        assert_eq!(d(256.0), 60e9);
        assert!(t.problems().is_empty());
        assert!(t.covers(FlexBackend::Deepep) && t.covers(FlexBackend::Hybridep));
    }

    #[test]
    fn a_table_without_rdma_columns_is_valid_and_scoped_to_its_backends() {
        let t = DispatchTable {
            kernel: "test".into(),
            backends: vec![FlexBackend::Deepep],
            nvlink_fraction: DispatchCombine {
                dispatch: 0.444,
                combine: 0.211,
            },
            rdma_spans: Vec::new(),
            rdma_gb_per_s: DispatchCombineColumns::default(),
            source: "test".into(),
        };
        assert!(t.problems().is_empty(), "{:?}", t.problems());
        assert_eq!(t.rdma_bytes_per_s(32.0), None);
        assert!(t.covers(FlexBackend::Deepep));
        assert!(!t.covers(FlexBackend::Hybridep));
        // Columns without spans are still a malformed table.
        let mut half = t.clone();
        half.rdma_gb_per_s.dispatch = vec![40.0];
        assert!(!half.problems().is_empty());
    }

    #[test]
    fn malformed_tables_answer_none_and_say_why() {
        let mut t = table();
        t.seq_lengths = vec![4000.0, 1000.0, 16000.0];
        assert_eq!(t.tflops(128.0, true, KernelPass::Fwd, 2000.0), None);
        assert!(!t.problems().is_empty());
        assert!(table().problems().is_empty());
    }
}
