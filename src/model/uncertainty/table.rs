//! The table's making from residuals (every regime and its wider ones) and the lookup that
//! attaches a regime's band to one prediction.

use super::stats::{median_signed, ratio_percentile, round4, typical_abs_error, RatioSpread};
use super::{
    precision_class, scale, seq_band, Band, BeyondMeasured, ConditionBand, MeasuredQuantity,
    MoeBlockBand, Residual, RunCondition, RunRegime, Uncertainty, UncertaintyTable, MIN_ROWS,
};
use crate::model::calibration::{abs_median, abs_percentile};
use crate::model::config::Precision;

/// A regime's key: GPU, generation, precision class, sequence band, scale (empty: any).
type RegimeKey<'a> = [&'a str; 5];

/// The regimes a prediction may quote, narrowest first: its GPU's runs of its precision,
/// sequence band and scale, then scale and sequence band dropped; then the same over the GPU's
/// generation; then the generation's runs of any precision, then every run.
fn widening<'a>(
    gpu: &'a str,
    generation: &'a str,
    precision: &'a str,
    seq: &'a str,
    scale: &'a str,
) -> [RegimeKey<'a>; 8] {
    [
        [gpu, generation, precision, seq, scale],
        [gpu, generation, precision, seq, ""],
        [gpu, generation, precision, "", ""],
        ["", generation, precision, seq, scale],
        ["", generation, precision, seq, ""],
        ["", generation, precision, "", ""],
        ["", generation, "", "", ""],
        ["", "", "", "", ""],
    ]
}

pub(super) fn band(key: RegimeKey<'_>, runs: &[&Residual]) -> Band {
    let [gpu, generation, precision, seq_band, scale] = key;
    let errors: Vec<f64> = runs.iter().map(|r| r.error).collect();
    Band {
        gpu: gpu.to_string(),
        generation: generation.to_string(),
        precision: precision.to_string(),
        seq_band: seq_band.to_string(),
        scale: scale.to_string(),
        rows: errors.len(),
        median_abs_error: round4(abs_median(&errors)),
        typical_abs_error: Some(round4(typical_abs_error(&errors))),
        p90_abs_error: round4(abs_percentile(&errors, 0.9)),
        measured_ratio_low: ratio_percentile(&errors, 0.05).map(round4),
        measured_ratio_high: ratio_percentile(&errors, 0.95).map(round4),
        median_error: round4(median_signed(&errors)),
        longest_seq: runs.iter().map(|r| r.seq).max().unwrap_or(0),
        most_gpus: runs
            .iter()
            .map(|r| u64::from(r.num_gpus))
            .max()
            .unwrap_or(0),
        shortest_step_ms: runs
            .iter()
            .map(|r| r.step_time_s)
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(|s| (s * 1000.0).round() as u64)
            .min()
            .unwrap_or(0),
    }
}

impl UncertaintyTable {
    /// Every regime (and every wider regime) that has residuals, narrowest first.
    pub fn from_residuals(source: &str, residuals: &[Residual]) -> Self {
        let mut keys: Vec<[String; 5]> = Vec::new();
        for r in residuals {
            for key in widening(
                &r.gpu,
                &r.generation,
                &r.precision,
                seq_band(r.seq),
                scale(r.num_gpus, r.nvlink_domain),
            ) {
                let key = key.map(str::to_string);
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        // Narrowest first, then by name.
        keys.sort_by_key(|k| (k.clone().map(|w| w.is_empty()), k.clone()));
        let bands = keys
            .iter()
            .map(|[u, g, p, s, c]| {
                let runs: Vec<&Residual> = residuals
                    .iter()
                    .filter(|r| u.is_empty() || &r.gpu == u)
                    .filter(|r| g.is_empty() || &r.generation == g)
                    .filter(|r| p.is_empty() || &r.precision == p)
                    .filter(|r| s.is_empty() || seq_band(r.seq) == s)
                    .filter(|r| c.is_empty() || scale(r.num_gpus, r.nvlink_domain) == c)
                    .collect();
                band([u, g, p, s, c], &runs)
            })
            .collect();
        UncertaintyTable {
            source: source.to_string(),
            bands,
            conditions: Vec::new(),
            moe_block: Vec::new(),
        }
    }

    /// The table with what single-layer measurements of the MoE block took: `(gpu, precision
    /// class, (predicted − measured) / measured time)` per layer, from `source`.
    pub fn with_moe_block(mut self, source: &str, residuals: &[(String, String, f64)]) -> Self {
        let mut keys: Vec<(&String, &String)> = residuals.iter().map(|(g, p, _)| (g, p)).collect();
        keys.sort();
        keys.dedup();
        for (gpu, precision) in keys {
            let errors: Vec<f64> = residuals
                .iter()
                .filter(|(g, p, _)| g == gpu && p == precision)
                .map(|(_, _, e)| *e)
                .collect();
            let Some(spread) = RatioSpread::of(&errors) else {
                continue;
            };
            self.moe_block.push(MoeBlockBand {
                gpu: gpu.clone(),
                precision: precision.clone(),
                rows: spread.rows,
                median_ratio: spread.median,
                low_ratio: spread.low,
                high_ratio: spread.high,
                source: source.to_string(),
            });
        }
        self
    }

    /// The single-layer measurements of the MoE block for a run on `gpu` in `precision`: the
    /// GPU's own, else those of another GPU in the same precision class.
    pub fn moe_block_band(&self, gpu: &str, precision: Precision) -> Option<&MoeBlockBand> {
        let class = precision_class(precision);
        let same_class = || self.moe_block.iter().filter(|b| b.precision == class);
        same_class()
            .find(|b| b.gpu == gpu)
            .or_else(|| same_class().next())
    }

    /// The table with what measured runs under each condition reached: `(condition,
    /// (predicted − measured) / measured)` per run.
    pub fn with_conditions(mut self, residuals: &[(RunCondition, f64)]) -> Self {
        for condition in [
            RunCondition::NaturalRouting,
            RunCondition::Peft,
            RunCondition::DenseLongSequence,
            RunCondition::DensePretraining,
            RunCondition::MambaHybrid,
        ] {
            let errors: Vec<f64> = residuals
                .iter()
                .filter(|(c, _)| *c == condition)
                .map(|(_, e)| *e)
                .collect();
            let Some(spread) = RatioSpread::of(&errors) else {
                continue;
            };
            self.conditions.push(ConditionBand {
                condition,
                rows: spread.rows,
                median_ratio: spread.median,
                low_ratio: spread.low,
                high_ratio: spread.high,
            });
        }
        self
    }

    /// The band for a prediction: its own regime if it has `MIN_ROWS` runs, else the next
    /// wider one that does. `None` when the table is empty.
    pub fn lookup(&self, run: RunRegime<'_>, tflops: f64, step_time_s: f64) -> Option<Uncertainty> {
        let class = precision_class(run.precision);
        let tries = widening(
            run.gpu,
            run.generation,
            class,
            seq_band(run.seq),
            scale(run.num_gpus, run.nvlink_domain),
        );
        let found = tries.iter().find_map(|[u, g, p, s, c]| {
            self.bands
                .iter()
                .find(|b| {
                    b.gpu == *u
                        && b.generation == *g
                        && b.precision == *p
                        && b.seq_band == *s
                        && b.scale == *c
                })
                .filter(|b| b.rows >= MIN_ROWS)
        })?;
        // One allocation: this runs inside every `evaluate`. A GPU's band names the GPU, not
        // also its generation.
        let mut regime = String::with_capacity(56);
        let generation = if found.gpu.is_empty() {
            &found.generation
        } else {
            &found.gpu
        };
        for w in [generation, &found.precision, &found.seq_band, &found.scale] {
            if !w.is_empty() {
                if !regime.is_empty() {
                    regime.push_str(", ");
                }
                regime.push_str(w);
            }
        }
        if regime.is_empty() {
            regime.push_str("all measured runs");
        }
        // Cards without the measured range: ±p90 of the error, measured = predicted / (1 + e).
        let e = found.p90_abs_error.clamp(0.0, 0.95);
        let low = found.measured_ratio_low.unwrap_or(1.0 / (1.0 + e));
        let high = found.measured_ratio_high.unwrap_or(1.0 / (1.0 - e));
        let mut beyond_measured = Vec::new();
        for (quantity, value, largest) in [
            (MeasuredQuantity::SeqLength, run.seq, found.longest_seq),
            (
                MeasuredQuantity::NumGpus,
                u64::from(run.num_gpus),
                found.most_gpus,
            ),
        ] {
            if largest > 0 && value > largest {
                beyond_measured.push(BeyondMeasured {
                    quantity,
                    run: value,
                    largest_measured: largest,
                });
            }
        }
        let step_ms = (step_time_s * 1000.0).round();
        if found.shortest_step_ms > 0
            && step_ms.is_finite()
            && step_ms >= 0.0
            && (step_ms as u64) < found.shortest_step_ms
        {
            beyond_measured.push(BeyondMeasured {
                quantity: MeasuredQuantity::StepTimeMs,
                run: step_ms as u64,
                largest_measured: found.shortest_step_ms,
            });
        }
        Some(Uncertainty {
            regime,
            rows: found.rows,
            typical_abs_error: found.typical_abs_error.unwrap_or(found.median_abs_error),
            p90_abs_error: found.p90_abs_error,
            measured_ratio_low: low,
            measured_ratio_high: high,
            tflops_low: tflops * low,
            tflops_high: tflops * high,
            step_time_low_s: if high > 0.0 { step_time_s / high } else { 0.0 },
            step_time_high_s: if low > 0.0 { step_time_s / low } else { 0.0 },
            median_error: found.median_error,
            condition: run.condition.and_then(|wanted| {
                self.conditions
                    .iter()
                    .find(|c| c.condition == wanted && c.rows >= MIN_ROWS)
                    .cloned()
            }),
            beyond_measured,
            // Only a band widened past the precision can lack it; then ask the whole table.
            unmeasured_precision: (found.precision != class
                && !self.bands.iter().any(|b| b.precision == class))
            .then(|| class.to_string()),
        })
    }
}
