//! Published kernel and network speeds as data, and their interpolation: fused attention
//! (`attention`), the Gated DeltaNet kernels (`linear_attention`), the Mamba-2 scan
//! (`mamba_scan`), grouped expert GEMMs by
//! tokens per expert and expert width (`grouped_gemm`), the MoE dispatchers' achieved
//! bandwidth (`dispatch`) and NCCL collectives by message size inside the NVLink domain
//! (`collectives`), each read from a hardware card's tables and clamped (flat)
//! outside the measured range; and NCCL's own latency model for collectives across nodes
//! (`nccl_latency`, from the cost-model card).

mod attention;
mod collectives;
mod dispatch;
mod grouped_gemm;
mod linear_attention;
mod mamba_scan;
mod nccl_latency;

pub use attention::{
    backward_flops_per_forward, AttentionCurve, AttentionDtype, AttentionKernelTable, CurveSet,
    KernelPass,
};
pub use collectives::{CollectiveCurve, CollectiveOp, CollectiveSizeTable};
pub use dispatch::{DispatchCombine, DispatchCombineColumns, DispatchTable, SpanTable};
pub use grouped_gemm::{GroupedGemmCurve, GroupedGemmTable};
pub use linear_attention::{LinearAttentionCall, LinearAttentionKernel};
pub use mamba_scan::{MambaScanCall, MambaScanKernel};
pub use nccl_latency::{NcclLatencyModel, PatLatency, RingProtocol};

/// Positive and finite (NaN fails).
fn positive(v: f64) -> bool {
    v > 0.0 && v.is_finite()
}

/// "`name` must be positive" for each named figure of a scalar kernel table that is not.
fn non_positive_fields(fields: &[(&'static str, f64)]) -> Vec<String> {
    fields
        .iter()
        .filter(|(_, v)| !positive(*v))
        .map(|(name, _)| format!("{name} must be positive"))
        .collect()
}

/// Piecewise-linear in log(x), clamped to the end values outside `xs`. `None` when the
/// curve is malformed (lengths differ, empty, non-positive or unsorted x).
fn interp_log(xs: &[f64], ys: &[f64], x: f64) -> Option<f64> {
    if xs.is_empty() || xs.len() != ys.len() || !positive(x) {
        return None;
    }
    // One pass (the layout search calls this millions of times): check the knots and find
    // the first at or above x.
    let mut upper = None;
    let mut previous = 0.0;
    for (i, &knot) in xs.iter().enumerate() {
        if !positive(knot) || knot <= previous {
            return None;
        }
        if upper.is_none() && knot >= x {
            upper = Some(i);
        }
        previous = knot;
    }
    match upper {
        None => ys.last().copied(),
        Some(0) => Some(ys[0]),
        Some(i) => {
            let t = (x / xs[i - 1]).ln() / (xs[i] / xs[i - 1]).ln();
            Some(ys[i - 1] + t * (ys[i] - ys[i - 1]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::interp_log;

    #[test]
    fn log_interpolation_is_linear_in_log_x_and_flat_outside() {
        let xs = [1.0, 10.0, 100.0];
        let ys = [0.0, 1.0, 3.0];
        assert_eq!(interp_log(&xs, &ys, 0.5), Some(0.0));
        assert_eq!(interp_log(&xs, &ys, 1.0), Some(0.0));
        assert_eq!(interp_log(&xs, &ys, 1e3), Some(3.0));
        let at = |x: f64| interp_log(&xs, &ys, x).unwrap_or(f64::NAN);
        assert!((at(10.0) - 1.0).abs() < 1e-12);
        assert!((at(10f64.sqrt()) - 0.5).abs() < 1e-12);
        assert!((at(10f64.powf(1.25)) - 1.5).abs() < 1e-12);
    }

    #[test]
    fn malformed_curves_give_nothing() {
        assert_eq!(interp_log(&[], &[], 1.0), None);
        assert_eq!(interp_log(&[1.0, 2.0], &[1.0], 1.5), None);
        assert_eq!(interp_log(&[2.0, 1.0], &[1.0, 2.0], 1.5), None);
        assert_eq!(interp_log(&[1.0, 1.0], &[1.0, 2.0], 1.5), None);
        assert_eq!(interp_log(&[0.0, 1.0], &[1.0, 2.0], 0.5), None);
        assert_eq!(interp_log(&[1.0, f64::NAN], &[1.0, 2.0], 0.5), None);
        assert_eq!(interp_log(&[1.0, 2.0], &[1.0, 2.0], -1.0), None);
    }
}
