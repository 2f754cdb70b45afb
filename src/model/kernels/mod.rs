//! Published kernel and network speeds as data, and their interpolation: fused attention
//! (`attention`), the Gated DeltaNet kernels (`linear_attention`) and the MoE dispatchers'
//! achieved bandwidth (`dispatch`), each read from a hardware card's tables and clamped
//! (flat) outside the measured range.

mod attention;
mod dispatch;
mod linear_attention;

pub use attention::{
    backward_flops_per_forward, AttentionCurve, AttentionDtype, AttentionKernelTable, CurveSet,
    KernelPass,
};
pub use dispatch::{DispatchCombine, DispatchCombineColumns, DispatchTable, SpanTable};
pub use linear_attention::{LinearAttentionCall, LinearAttentionKernel};

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
