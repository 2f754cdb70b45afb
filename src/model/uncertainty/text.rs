//! The band in words: what an answer's text says after a TFLOP/s figure and a step time.

use super::{BeyondMeasured, MeasuredQuantity, MoeBlockBand, Uncertainty, LEAN_REPORTED};
use crate::model::report::tokens_label;

impl BeyondMeasured {
    pub(super) fn words(&self) -> String {
        match self.quantity {
            MeasuredQuantity::SeqLength => format!(
                "a {} sequence against the longest measured {}",
                tokens_label(self.run),
                tokens_label(self.largest_measured)
            ),
            MeasuredQuantity::NumGpus => format!(
                "{} GPUs against at most {} measured",
                self.run, self.largest_measured
            ),
            MeasuredQuantity::StepTimeMs => format!(
                "a {} step against the shortest measured {} (per-step costs the model does not price weigh more in a short step)",
                seconds_label(self.run),
                seconds_label(self.largest_measured)
            ),
        }
    }
}

impl MoeBlockBand {
    /// "Megatron-LM's MoE layer test on h100: 6 bf16 layers took 0.70–0.83× this (median 0.77×)".
    pub fn text(&self) -> String {
        format!(
            "{} on {}: {} {} layers took {:.2}–{:.2}× this (median {:.2}×)",
            self.source,
            self.gpu,
            self.rows,
            self.precision,
            self.low_ratio,
            self.high_ratio,
            self.median_ratio
        )
    }
}

impl Uncertainty {
    /// The band in words, to follow a TFLOP/s figure: " (typically within ±12% for hopper,
    /// >=64K, multi-node, 9 measured runs; 90% within ±20%: 270–400)".
    pub fn text(&self) -> String {
        // error = predicted / measured − 1, so measured = predicted / (1 + error).
        let lean = if self.median_error <= -LEAN_REPORTED {
            format!(
                ", which ran a median {:.0}% faster than predicted",
                (1.0 / (1.0 + self.median_error) - 1.0) * 100.0
            )
        } else if self.median_error >= LEAN_REPORTED {
            format!(
                ", which ran a median {:.0}% slower than predicted",
                (1.0 - 1.0 / (1.0 + self.median_error)) * 100.0
            )
        } else {
            String::new()
        };
        let condition = match &self.condition {
            Some(c) => format!(
                "; {} are not in that band: {} measured reached {:.2}–{:.2}× the predicted \
                 throughput, median {:.2}×",
                c.condition.words(),
                c.rows,
                c.low_ratio,
                c.high_ratio,
                c.median_ratio
            ),
            None => String::new(),
        };
        let beyond = if self.beyond_measured.is_empty() {
            String::new()
        } else {
            let what: Vec<String> = self.beyond_measured.iter().map(|b| b.words()).collect();
            format!(
                "; past those runs: {}, so the band may understate the error",
                what.join(" and ")
            )
        };
        let unmeasured = match &self.unmeasured_precision {
            Some(class) => format!(
                "; none of them ran {} GEMMs (no run behind the bands did), so the band may understate the error",
                class.to_uppercase()
            ),
            None => String::new(),
        };
        // Below 20 runs the 5th and 95th percentiles (nearest rank) are the extremes.
        let share = if self.rows < 20 {
            format!("all {}", self.rows)
        } else {
            "90% of them".to_string()
        };
        format!(
            " (typically within ±{:.0}% for {}, {} measured run{}{}; {share} measured \
             {:.2}–{:.2}× their prediction: {:.0}–{:.0} here{}{}{})",
            self.typical_abs_error * 100.0,
            self.regime,
            self.rows,
            if self.rows == 1 { "" } else { "s" },
            lean,
            self.measured_ratio_low,
            self.measured_ratio_high,
            self.tflops_low,
            self.tflops_high,
            condition,
            beyond,
            unmeasured
        )
    }

    /// The step-time range in words, to follow a step time: " (18.20–24.90 s by the same runs)".
    pub fn step_text(&self) -> String {
        format!(
            " ({:.2}–{:.2} s by the same runs)",
            self.step_time_low_s, self.step_time_high_s
        )
    }
}

/// A duration in milliseconds as words: "0.35 s", "12 s".
pub(super) fn seconds_label(ms: u64) -> String {
    let s = ms as f64 / 1000.0;
    if s < 10.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.0} s")
    }
}
