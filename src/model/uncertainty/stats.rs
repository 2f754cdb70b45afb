//! Order statistics of the residuals: the typical error's confidence bound, medians and the
//! nearest-rank percentiles of measured / predicted throughput.

use super::TYPICAL_CONFIDENCE;
use crate::model::calibration::sorted_abs;

/// The 1-based rank k of the order statistic that bounds a population median from above
/// with probability `confidence` given `n` samples: the smallest k with
/// P(Binomial(n, ½) ≤ k − 1) ≥ `confidence`; `n` (the largest) when no rank reaches it.
pub(super) fn median_upper_bound_rank(n: usize, confidence: f64) -> usize {
    let mut term = 0.5f64.powi(n.min(i32::MAX as usize) as i32); // P(B = 0)
    let mut cumulative = 0.0;
    for k in 1..=n {
        cumulative += term;
        if cumulative >= confidence {
            return k;
        }
        // P(B = k) from P(B = k − 1): × (n − k + 1) / k.
        term *= (n - k + 1) as f64 / k as f64;
    }
    n
}

/// Upper confidence bound on the median |error| of `errors` (see
/// [`Band::typical_abs_error`]); 0 without errors.
pub(super) fn typical_abs_error(errors: &[f64]) -> f64 {
    let abs = sorted_abs(errors);
    if abs.is_empty() {
        return 0.0;
    }
    let k = median_upper_bound_rank(abs.len(), TYPICAL_CONFIDENCE);
    abs[k.clamp(1, abs.len()) - 1]
}

pub(super) fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

pub(super) fn median_signed(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Measured / predicted throughput, 1 / (1 + error), of each run whose error allows one,
/// sorted.
pub(super) fn sorted_ratios(errors: &[f64]) -> Vec<f64> {
    let mut ratios: Vec<f64> = errors
        .iter()
        .filter(|e| e.is_finite() && **e > -1.0)
        .map(|e| 1.0 / (1.0 + e))
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios
}

/// Measured / predicted over a set of runs: how many, the median and the 10th and 90th
/// percentiles (nearest rank), rounded as the generated table keeps them.
pub(super) struct RatioSpread {
    pub(super) rows: usize,
    pub(super) median: f64,
    pub(super) low: f64,
    pub(super) high: f64,
}

impl RatioSpread {
    /// From `(predicted − measured) / measured` per run; `None` without a usable run.
    pub(super) fn of(errors: &[f64]) -> Option<Self> {
        let ratios = sorted_ratios(errors);
        Some(RatioSpread {
            rows: ratios.len(),
            median: round4(median_signed(&ratios)),
            low: round4(nearest_rank(&ratios, 0.1)?),
            high: round4(nearest_rank(&ratios, 0.9)?),
        })
    }
}

/// The `p` percentile (nearest rank) of a sorted sample; `None` when it is empty.
pub(super) fn nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    let k = (p * sorted.len() as f64).ceil() as usize;
    sorted.get(k.clamp(1, sorted.len().max(1)) - 1).copied()
}

/// The `p` percentile (nearest rank) of measured / predicted throughput over `errors`.
pub(super) fn ratio_percentile(errors: &[f64], p: f64) -> Option<f64> {
    nearest_rank(&sorted_ratios(errors), p)
}
