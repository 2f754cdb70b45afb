//! Fused-attention speed tables: achieved TFLOP/s by sequence length per call, head
//! dimension, mask, pass, data type and sliding window, interpolated in log(length) and
//! linearly in head dimension, clamped (flat) outside the measured range.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{interp_log, positive};

/// Forward or backward pass of a fused-attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KernelPass {
    Fwd,
    Bwd,
}

/// Data type of a fused-attention kernel: BF16, or FP8 attention (`fp8_dot_product_attention`)
/// with per-tensor scales (the delayed and current scaling recipes) or MX block scales.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttentionDtype {
    #[default]
    Bf16,
    Fp8,
    Mxfp8,
}

impl AttentionDtype {
    pub fn is_bf16(&self) -> bool {
        *self == AttentionDtype::Bf16
    }
}

/// Which curves a lookup reads: a data type, and a sliding window (`None`: full attention).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CurveSet {
    pub dtype: AttentionDtype,
    pub window: Option<u64>,
}

impl CurveSet {
    /// Whether `curve` belongs to this set (same data type and window).
    fn holds(&self, curve: &AttentionCurve) -> bool {
        curve.sliding_window == self.window && curve.dtype == self.dtype
    }
}

/// One measured curve: achieved TFLOP/s at each of the table's sequence lengths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttentionCurve {
    /// Query/key head dimension.
    pub head_dim: u32,
    pub causal: bool,
    pub pass: KernelPass,
    /// Sliding-window size of a windowed curve (causal, each query attending to at most
    /// this many keys, FLOPs counted over the window); absent for full attention. Windowed
    /// curves price only layers with exactly this window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u64>,
    /// Data type the kernel computed in (absent: BF16).
    #[serde(default, skip_serializing_if = "AttentionDtype::is_bf16")]
    pub dtype: AttentionDtype,
    /// TFLOP/s in the benchmarks' FLOP count (causal: only the unmasked score elements;
    /// backward: [`backward_flops_per_forward`] times the forward), one per entry of
    /// `seq_lengths`.
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
    /// Dense BF16 peak (TFLOP/s) of the GPU the curves were measured on, when that is another
    /// product of the same die (GB200 for B200): the speeds scale by this card's peak over it,
    /// the datasheets' peaks carrying the clock and power difference. Absent: measured on
    /// this GPU or one with the same peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_peak_bf16_tflops: Option<f64>,
    /// Sequence lengths (query = key length per call) of the columns, increasing.
    pub seq_lengths: Vec<f64>,
    pub curves: Vec<AttentionCurve>,
}

/// Backward FLOPs per forward FLOP of fused attention with query/key head dimension `d_qk`
/// and value head dimension `d_v`: the forward runs two GEMMs over the unmasked score
/// elements (QKᵀ over d_qk, PV over d_v), the backward five (the recomputed scores, dQ and dK
/// over d_qk; dP and dV over d_v). FlashAttention-2/3's benchmarks count 2.5 for d_qk = d_v;
/// cuDNN's training benchmark (cudnn-frontend `benchmark/sdpa_benchmark_training/
/// benchmark_single_sdpa.py`, `flops`) counts (3·d_qk + 2·d_v) / (d_qk + d_v), the same rule.
pub fn backward_flops_per_forward(d_qk: f64, d_v: f64) -> f64 {
    if d_qk + d_v > 0.0 {
        (3.0 * d_qk + 2.0 * d_v) / (d_qk + d_v)
    } else {
        2.5
    }
}

impl AttentionKernelTable {
    /// Achieved BF16 TFLOP/s for one full-attention kernel call (see [`Self::tflops_in`]).
    pub fn tflops(&self, head_dim: f64, causal: bool, pass: KernelPass, len: f64) -> Option<f64> {
        self.tflops_in(CurveSet::default(), head_dim, causal, pass, len)
    }

    /// Achieved TFLOP/s for one kernel call from the curves of `set`, interpolated linearly
    /// between the nearest head dims that have a speed for this mask and pass (clamped
    /// outside them). A head dim measured for the other mask only (the causal backward,
    /// typically) has a derived speed: the other mask's, times the ratio of the two masks'
    /// forward speeds at the same length (the masking overhead is taken to be the same in
    /// both passes). So a curve measured at one head dim never stands in for another head dim
    /// whose speed can be derived from its own measurements.
    pub fn tflops_in(
        &self,
        set: CurveSet,
        head_dim: f64,
        causal: bool,
        pass: KernelPass,
        len: f64,
    ) -> Option<f64> {
        // A head dim the table has a speed for is its own nearest on both sides (the search
        // below would find it, after interpolating its neighbours).
        if head_dim > 0.0 && head_dim.fract() == 0.0 && head_dim <= f64::from(u32::MAX) {
            if let Some(v) = self.at_head_dim(set, head_dim as u32, causal, pass, len) {
                return Some(v).filter(|v| *v > 0.0);
            }
        }
        // The nearest head dims at or below and at or above that have a speed (no
        // allocation: this runs inside every `evaluate`).
        let mut below: Option<(f64, f64)> = None;
        let mut above: Option<(f64, f64)> = None;
        for c in self
            .curves
            .iter()
            .filter(|c| c.pass == pass && set.holds(c))
        {
            let d = c.head_dim as f64;
            let wanted_below = d <= head_dim && below.is_none_or(|(b, _)| d > b);
            let wanted_above = d >= head_dim && above.is_none_or(|(a, _)| d < a);
            if !(wanted_below || wanted_above) {
                continue;
            }
            let Some(v) = self.at_head_dim(set, c.head_dim, causal, pass, len) else {
                continue;
            };
            if wanted_below {
                below = Some((d, v));
            }
            if wanted_above {
                above = Some((d, v));
            }
        }
        let v = match (below, above) {
            (Some((a, ya)), Some((b, yb))) if b > a => ya + (head_dim - a) / (b - a) * (yb - ya),
            (Some((_, y)), _) | (None, Some((_, y))) => y,
            (None, None) => return None,
        };
        Some(v).filter(|v| *v > 0.0)
    }

    /// Speed at exactly `head_dim`: its curve for this mask and pass, or, for the backward,
    /// the other mask's curve there times the forward mask ratio (see [`Self::tflops_in`]).
    fn at_head_dim(
        &self,
        set: CurveSet,
        head_dim: u32,
        causal: bool,
        pass: KernelPass,
        len: f64,
    ) -> Option<f64> {
        let curve = |causal: bool| {
            self.curves.iter().find(|c| {
                c.head_dim == head_dim && c.causal == causal && c.pass == pass && set.holds(c)
            })
        };
        let at = |c: &AttentionCurve| interp_log(&self.seq_lengths, &c.tflops, len);
        if let Some(c) = curve(causal) {
            return at(c);
        }
        if pass == KernelPass::Fwd {
            return None;
        }
        let other = at(curve(!causal)?)?;
        let d = head_dim as f64;
        let fwd_this = self.tflops_in(set, d, causal, KernelPass::Fwd, len)?;
        let fwd_other = self.tflops_in(set, d, !causal, KernelPass::Fwd, len)?;
        (fwd_other > 0.0).then(|| other * fwd_this / fwd_other)
    }

    /// Whether any curve belongs to `set`.
    pub fn has(&self, set: CurveSet) -> bool {
        self.curves.iter().any(|c| set.holds(c))
    }

    /// Factor from the measured speeds to a GPU whose dense BF16 peak is `card_peak_bf16`.
    pub fn peak_scale(&self, card_peak_bf16: f64) -> f64 {
        match self.measured_peak_bf16_tflops {
            Some(measured) if positive(measured) && positive(card_peak_bf16) => {
                card_peak_bf16 / measured
            }
            _ => 1.0,
        }
    }

    /// Problems with the table, for the card loader's diagnostics.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.measured_peak_bf16_tflops.is_some_and(|v| !positive(v)) {
            out.push("measured_peak_bf16_tflops must be positive".to_string());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> AttentionKernelTable {
        let curve = |head_dim, causal, pass, tflops: [f64; 3]| AttentionCurve {
            head_dim,
            causal,
            pass,
            sliding_window: None,
            dtype: AttentionDtype::Bf16,
            tflops: tflops.to_vec(),
            source: "test".into(),
        };
        AttentionKernelTable {
            kernel: "test".into(),
            measured_peak_bf16_tflops: None,
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
    fn a_derived_head_dim_is_not_replaced_by_another_measured_one() {
        // A causal backward measured at 192 only (an MLA curve): 128 keeps its own derived
        // speed, 160 interpolates between the derived 128 and the measured 192, and 256 holds
        // the nearest (192).
        let mut t = table();
        t.curves.push(AttentionCurve {
            head_dim: 192,
            causal: true,
            pass: KernelPass::Bwd,
            sliding_window: None,
            dtype: AttentionDtype::Bf16,
            tflops: vec![60.0, 120.0, 180.0],
            source: "test".into(),
        });
        let at = |d| t.tflops(d, true, KernelPass::Bwd, 4000.0).unwrap_or(0.0);
        let derived_128 = 250.0 * 200.0 / 300.0;
        assert!((at(128.0) - derived_128).abs() < 1e-9);
        assert!((at(160.0) - (derived_128 + 120.0) / 2.0).abs() < 1e-9);
        assert!((at(256.0) - 120.0).abs() < 1e-9);
        // The other direction too: the unmasked backward at 192 comes from the causal one
        // there, times the unmasked/causal forward ratio at 192 (300/300 at 4K).
        assert_eq!(t.tflops(192.0, false, KernelPass::Bwd, 4000.0), Some(120.0));
    }

    #[test]
    fn windowed_curves_price_only_their_window() {
        let mut t = table();
        t.curves.push(AttentionCurve {
            head_dim: 64,
            causal: true,
            pass: KernelPass::Fwd,
            sliding_window: Some(128),
            dtype: AttentionDtype::Bf16,
            tflops: vec![10.0, 20.0, 40.0],
            source: "test".into(),
        });
        let window = |w| CurveSet {
            dtype: AttentionDtype::Bf16,
            window: Some(w),
        };
        assert!(t.has(window(128)) && !t.has(window(1024)));
        assert_eq!(
            t.tflops_in(window(128), 64.0, true, KernelPass::Fwd, 4000.0),
            Some(20.0)
        );
        assert_eq!(
            t.tflops_in(window(1024), 64.0, true, KernelPass::Fwd, 4000.0),
            None
        );
        // Full-attention lookups never see the windowed curve.
        assert_eq!(t.tflops(64.0, true, KernelPass::Fwd, 4000.0), Some(200.0));
    }

    #[test]
    fn fp8_curves_are_read_only_for_their_data_type() {
        let mut t = table();
        let fp8 = CurveSet {
            dtype: AttentionDtype::Fp8,
            window: None,
        };
        assert!(!t.has(fp8));
        t.curves.push(AttentionCurve {
            head_dim: 128,
            causal: true,
            pass: KernelPass::Fwd,
            sliding_window: None,
            dtype: AttentionDtype::Fp8,
            tflops: vec![150.0, 300.0, 450.0],
            source: "test".into(),
        });
        assert!(t.has(fp8));
        assert_eq!(
            t.tflops_in(fp8, 128.0, true, KernelPass::Fwd, 4000.0),
            Some(300.0)
        );
        // BF16 lookups never see it; an FP8 pass the table lacks is not invented.
        assert_eq!(t.tflops(128.0, true, KernelPass::Fwd, 4000.0), Some(200.0));
        assert_eq!(t.tflops_in(fp8, 128.0, true, KernelPass::Bwd, 4000.0), None);
    }

    #[test]
    fn backward_flop_ratio_follows_the_head_dims() {
        // FlashAttention's 2.5 for equal head dims; DeepSeek-V3's MLA (192/128): 832/320.
        assert!((backward_flops_per_forward(128.0, 128.0) - 2.5).abs() < 1e-12);
        assert!((backward_flops_per_forward(192.0, 128.0) - 2.6).abs() < 1e-12);
    }

    #[test]
    fn speeds_measured_on_another_product_of_the_die_scale_by_peak() {
        let mut t = table();
        assert_eq!(t.peak_scale(2250.0), 1.0);
        t.measured_peak_bf16_tflops = Some(2500.0);
        assert!((t.peak_scale(2250.0) - 0.9).abs() < 1e-12);
        assert!(t.problems().is_empty());
        t.measured_peak_bf16_tflops = Some(0.0);
        assert_eq!(t.peak_scale(2250.0), 1.0);
        assert!(!t.problems().is_empty());
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
