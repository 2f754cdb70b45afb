//! Grouped (MoE expert) GEMM speed by shape: a measured table of the forward and backward
//! GEMMs of an expert MLP by tokens per expert and expert width, read as the fraction of the
//! same run's large dense GEMM rate each shape reaches. Narrow experts fed few tokens fill
//! few SMs and their weight gradients reduce over short groups, so they reach a small
//! fraction; the table says how small, where two fitted half-efficiency sizes had guessed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{interp_log, positive};

/// One expert shape: forward + backward TFLOP/s (three times the forward FLOPs over the time
/// of the forward, data-gradient and weight-gradient GEMMs) at each of the table's
/// `tokens_per_expert`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupedGemmCurve {
    /// The expert's smaller weight dimension, min(hidden, FFN width on one GPU): the key the
    /// model looks curves up by.
    pub weight_dim: f64,
    /// The expert shape measured, for the reader (hidden size, FFN width, whose experts).
    pub shape: String,
    pub tflops: Vec<f64>,
    pub source: String,
}

/// Measured grouped-GEMM speed of one GPU, as a shape factor of its large-GEMM rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupedGemmTable {
    /// The kernel measured, and what the model assumes of the kernel a training run uses.
    pub kernel: String,
    /// The same run's BF16 8192x8192x8192 GEMM, TFLOP/s: the large-GEMM rate the curves are
    /// read against (the card's `efficiency.gemm_*` prices that rate).
    pub reference_tflops: f64,
    /// Tokens per expert, ascending.
    pub tokens_per_expert: Vec<f64>,
    /// Curves by ascending `weight_dim`.
    pub curves: Vec<GroupedGemmCurve>,
}

impl GroupedGemmTable {
    /// Fraction of the large-GEMM rate an expert GEMM of `weight_dim` fed `tokens_per_expert`
    /// reaches: each curve interpolated in log(tokens), then the two curves around
    /// `weight_dim` in log(width); held flat outside the measured tokens and widths. `None`
    /// when the table is malformed (`problems` says how) or an input is not positive.
    pub fn shape_factor(&self, tokens_per_expert: f64, weight_dim: f64) -> Option<f64> {
        let widths_ascend = self.curves.iter().all(|c| positive(c.weight_dim))
            && self
                .curves
                .windows(2)
                .all(|w| w[1].weight_dim > w[0].weight_dim);
        if !positive(self.reference_tflops) || !positive(weight_dim) || !widths_ascend {
            return None;
        }
        let at = |curve: &GroupedGemmCurve| {
            interp_log(&self.tokens_per_expert, &curve.tflops, tokens_per_expert)
                .filter(|t| positive(*t))
        };
        let upper = self.curves.iter().position(|c| c.weight_dim >= weight_dim);
        let tflops = match upper {
            None => at(self.curves.last()?)?,
            Some(0) => at(&self.curves[0])?,
            Some(i) => {
                let (narrow, wide) = (&self.curves[i - 1], &self.curves[i]);
                let dims = [narrow.weight_dim, wide.weight_dim];
                interp_log(&dims, &[at(narrow)?, at(wide)?], weight_dim)?
            }
        };
        Some(tflops / self.reference_tflops)
    }

    /// What is wrong with the table, if anything (a malformed table leaves the expert GEMMs to
    /// the fitted half-efficiency sizes).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !positive(self.reference_tflops) {
            out.push("reference_tflops must be positive".into());
        }
        let tokens = &self.tokens_per_expert;
        if tokens.is_empty() || tokens.iter().any(|t| !positive(*t)) {
            out.push("tokens_per_expert must be non-empty and positive".into());
        }
        if tokens.windows(2).any(|w| w[1] <= w[0]) {
            out.push("tokens_per_expert must be ascending".into());
        }
        if self.curves.is_empty() {
            out.push("at least one curve is needed".into());
        }
        if self
            .curves
            .windows(2)
            .any(|w| w[1].weight_dim <= w[0].weight_dim)
        {
            out.push("curves must be in ascending weight_dim, one per width".into());
        }
        for c in &self.curves {
            if !positive(c.weight_dim) {
                out.push(format!("{}: weight_dim must be positive", c.shape));
            }
            if c.tflops.len() != tokens.len() {
                out.push(format!(
                    "{}: {} tflops for {} tokens_per_expert",
                    c.shape,
                    c.tflops.len(),
                    tokens.len()
                ));
            }
            if c.tflops.iter().any(|t| !positive(*t)) {
                out.push(format!("{}: every tflops must be positive", c.shape));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(weight_dim: f64, tflops: &[f64]) -> GroupedGemmCurve {
        GroupedGemmCurve {
            weight_dim,
            shape: format!("width {weight_dim}"),
            tflops: tflops.to_vec(),
            source: "test".into(),
        }
    }

    fn table() -> GroupedGemmTable {
        GroupedGemmTable {
            kernel: "test".into(),
            reference_tflops: 800.0,
            tokens_per_expert: vec![128.0, 512.0, 2048.0],
            curves: vec![
                curve(512.0, &[40.0, 160.0, 480.0]),
                curve(2048.0, &[160.0, 400.0, 640.0]),
            ],
        }
    }

    fn factor(t: &GroupedGemmTable, tokens: f64, dim: f64) -> f64 {
        t.shape_factor(tokens, dim).unwrap_or(f64::NAN)
    }

    #[test]
    fn grid_points_are_the_measured_fractions_of_the_reference() {
        let t = table();
        assert!(t.problems().is_empty(), "{:?}", t.problems());
        assert!((factor(&t, 512.0, 512.0) - 0.2).abs() < 1e-12);
        assert!((factor(&t, 2048.0, 2048.0) - 0.8).abs() < 1e-12);
        assert!((factor(&t, 128.0, 2048.0) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn between_points_it_is_linear_in_log_tokens_and_log_width() {
        let t = table();
        // 256 tokens is halfway from 128 to 512 in log: width 512 gives (40 + 160) / 2 = 100.
        assert!((factor(&t, 256.0, 512.0) - 100.0 / 800.0).abs() < 1e-12);
        // Width 1024 is halfway from 512 to 2048 in log: at 512 tokens (160 + 400) / 2 = 280.
        assert!((factor(&t, 512.0, 1024.0) - 280.0 / 800.0).abs() < 1e-12);
        // Both at once: width 512 at 256 tokens 100, width 2048 at 256 tokens 280; mean 190.
        assert!((factor(&t, 256.0, 1024.0) - 190.0 / 800.0).abs() < 1e-12);
    }

    #[test]
    fn outside_the_measured_shapes_it_holds_the_nearest_edge() {
        let t = table();
        assert!((factor(&t, 16.0, 512.0) - 40.0 / 800.0).abs() < 1e-12);
        assert!((factor(&t, 1e6, 2048.0) - 0.8).abs() < 1e-12);
        assert!((factor(&t, 2048.0, 64.0) - 0.6).abs() < 1e-12);
        assert!((factor(&t, 2048.0, 16384.0) - 0.8).abs() < 1e-12);
    }

    #[test]
    fn a_malformed_table_says_what_is_wrong_and_prices_nothing() {
        let mut t = table();
        t.curves[1].tflops.pop();
        assert!(t.problems().iter().any(|p| p.contains("2 tflops for 3")));
        assert_eq!(t.shape_factor(2048.0, 2048.0), None);
        let mut t = table();
        t.curves.reverse();
        assert!(t
            .problems()
            .iter()
            .any(|p| p.contains("ascending weight_dim")));
        assert_eq!(t.shape_factor(512.0, 1024.0), None);
        let mut t = table();
        t.reference_tflops = 0.0;
        assert!(!t.problems().is_empty());
        assert_eq!(t.shape_factor(512.0, 512.0), None);
        assert_eq!(table().shape_factor(0.0, 512.0), None);
        assert_eq!(table().shape_factor(512.0, f64::NAN), None);
    }
}
