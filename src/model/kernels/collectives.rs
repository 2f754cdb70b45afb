//! NCCL collectives inside the NVLink domain by message size: a small message reaches a
//! fraction of the large-message rate (per-call latency, fewer channels in flight), and
//! the fraction comes from a measured table on the card.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{interp_log, positive};

/// The collective a transfer is, as the measured table names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveOp {
    AllGather,
    ReduceScatter,
    AllToAll,
}

/// One measured curve: achieved algorithm bandwidth (message bytes / time, nccl-tests'
/// `algbw`) of one collective over one group size, by message size. The message is the
/// gathered output of an all-gather, the full input of a reduce-scatter and one rank's
/// buffer of an all-to-all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CollectiveCurve {
    pub op: CollectiveOp,
    /// GPUs in one group.
    pub group: u32,
    /// Message sizes, bytes, ascending.
    pub message_bytes: Vec<f64>,
    /// Achieved algorithm bandwidth at each size, GB/s.
    pub gb_per_s: Vec<f64>,
}

/// Measured NCCL collective speed inside one NVLink domain, by message size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CollectiveSizeTable {
    pub source: String,
    pub curves: Vec<CollectiveCurve>,
}

impl CollectiveSizeTable {
    /// Fraction of the large-message rate a message of `bytes` reaches in `op` over `group`
    /// GPUs: the curve's rate at that size over its highest rate, from the curve whose group
    /// is nearest `group` (in log2; the smaller one on a tie). Held flat outside the measured
    /// sizes; 1 when the table has no curve for `op` or the curve is malformed.
    pub fn size_fraction(&self, op: CollectiveOp, group: u32, bytes: f64) -> f64 {
        let Some(curve) = self.curve_for(op, group) else {
            return 1.0;
        };
        let best = curve.gb_per_s.iter().copied().fold(0.0, f64::max);
        match interp_log(&curve.message_bytes, &curve.gb_per_s, bytes) {
            Some(rate) if positive(best) && positive(rate) => (rate / best).min(1.0),
            _ => 1.0,
        }
    }

    fn curve_for(&self, op: CollectiveOp, group: u32) -> Option<&CollectiveCurve> {
        // The larger-over-smaller ratio orders groups as their log2 distance does.
        let wanted = f64::from(group.max(1));
        let distance = |c: &CollectiveCurve| {
            let have = f64::from(c.group.max(1));
            have.max(wanted) / have.min(wanted)
        };
        self.curves.iter().filter(|c| c.op == op).min_by(|a, b| {
            distance(a)
                .total_cmp(&distance(b))
                .then(a.group.cmp(&b.group))
        })
    }

    /// What is wrong with the table, if anything (a malformed curve prices its collective at
    /// the large-message rate).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in &self.curves {
            let name = format!("{:?} over {} GPUs", c.op, c.group);
            if c.group < 2 {
                out.push(format!("{name}: a group needs at least 2 GPUs"));
            }
            if c.message_bytes.is_empty() || c.message_bytes.len() != c.gb_per_s.len() {
                out.push(format!(
                    "{name}: message_bytes and gb_per_s must be non-empty and of equal length"
                ));
            }
            if c.message_bytes.windows(2).any(|w| w[1] <= w[0]) {
                out.push(format!("{name}: message_bytes must be ascending"));
            }
            if c.message_bytes
                .iter()
                .chain(c.gb_per_s.iter())
                .any(|v| !positive(*v))
            {
                out.push(format!("{name}: every size and rate must be positive"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(op: CollectiveOp, group: u32, gb: &[f64]) -> CollectiveCurve {
        CollectiveCurve {
            op,
            group,
            message_bytes: vec![1e6, 1e7, 1e8, 1e9],
            gb_per_s: gb.to_vec(),
        }
    }

    fn table() -> CollectiveSizeTable {
        CollectiveSizeTable {
            source: "test".into(),
            curves: vec![
                curve(CollectiveOp::AllGather, 8, &[40.0, 200.0, 360.0, 400.0]),
                curve(CollectiveOp::AllGather, 64, &[10.0, 100.0, 300.0, 400.0]),
                curve(CollectiveOp::AllToAll, 8, &[20.0, 150.0, 390.0, 380.0]),
            ],
        }
    }

    #[test]
    fn fraction_of_the_best_rate_interpolated_in_log_size() {
        let t = table();
        // At a measured point: 200 of 400.
        assert!((t.size_fraction(CollectiveOp::AllGather, 8, 1e7) - 0.5).abs() < 1e-12);
        // Half-way in log between 1e7 and 1e8: (200 + 360) / 2 of 400.
        let mid = 10f64.powf(7.5);
        assert!((t.size_fraction(CollectiveOp::AllGather, 8, mid) - 0.7).abs() < 1e-12);
        // The best rate need not be the last one; no fraction exceeds 1.
        assert!((t.size_fraction(CollectiveOp::AllToAll, 8, 1e8) - 1.0).abs() < 1e-12);
        assert!((t.size_fraction(CollectiveOp::AllToAll, 8, 1e9) - 380.0 / 390.0).abs() < 1e-12);
    }

    #[test]
    fn held_flat_outside_the_measured_sizes() {
        let t = table();
        assert!((t.size_fraction(CollectiveOp::AllGather, 8, 1.0) - 0.1).abs() < 1e-12);
        assert!((t.size_fraction(CollectiveOp::AllGather, 8, 1e12) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn nearest_group_in_log2_and_no_curve_means_no_change() {
        let t = table();
        // 16 is nearer 8 than 64 in log2; 32 is nearer 64.
        assert!((t.size_fraction(CollectiveOp::AllGather, 16, 1e7) - 0.5).abs() < 1e-12);
        assert!((t.size_fraction(CollectiveOp::AllGather, 32, 1e7) - 0.25).abs() < 1e-12);
        assert_eq!(t.size_fraction(CollectiveOp::ReduceScatter, 8, 1e6), 1.0);
    }

    #[test]
    fn malformed_curves_are_reported_and_ignored() {
        let mut t = table();
        t.curves[0].gb_per_s.pop();
        t.curves[2].message_bytes[1] = 1e5;
        let problems = t.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(t.size_fraction(CollectiveOp::AllGather, 8, 1e6), 1.0);
        assert_eq!(t.size_fraction(CollectiveOp::AllToAll, 8, 1e6), 1.0);
    }
}
