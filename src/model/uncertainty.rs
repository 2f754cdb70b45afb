//! The error band of a predicted throughput, from the validation residuals of its regime
//! (GPU × GEMM precision × sequence band × scale, the GPU widening to its generation). The
//! table is data: `moe-skills calibrate --bands` computes it from the measured rows and writes
//! `cards/time-uncertainty.yaml`; the catalog hands it to `evaluate` inside the cost constants.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::calibration::{abs_median, abs_percentile, sorted_abs};
use super::config::{Precision, TrainingConfig};
use super::report::tokens_label;

/// Fewest residuals a regime needs before its own band is quoted; sparser regimes borrow the
/// band of the next wider one (see [`widening`]).
pub const MIN_ROWS: usize = 3;

/// Confidence of the upper bound quoted as a regime's typical error (see
/// [`Band::typical_abs_error`]).
pub const TYPICAL_CONFIDENCE: f64 = 0.8;

/// The 1-based rank k of the order statistic that bounds a population median from above
/// with probability `confidence` given `n` samples: the smallest k with
/// P(Binomial(n, ½) ≤ k − 1) ≥ `confidence`; `n` (the largest) when no rank reaches it.
fn median_upper_bound_rank(n: usize, confidence: f64) -> usize {
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
fn typical_abs_error(errors: &[f64]) -> f64 {
    let abs = sorted_abs(errors);
    if abs.is_empty() {
        return 0.0;
    }
    let k = median_upper_bound_rank(abs.len(), TYPICAL_CONFIDENCE);
    abs[k.clamp(1, abs.len()) - 1]
}

/// Smallest median signed error (either way) that an answer reports as a lean: in a regime
/// whose measured runs mostly ran faster (or slower) than predicted, the band says which way,
/// so a reader does not take a symmetric band for an unbiased one.
pub const LEAN_REPORTED: f64 = 0.05;

/// Precision class of a run's GEMMs: BF16, FP8 (every FP8 recipe, MXFP8 included) or FP4.
/// BF16 and FP8 runs of one GPU have erred differently (the BF16 GEMM efficiency is fitted on
/// GPT-OSS's rows alone, the FP8 one on every model's), so each quotes its own runs' band.
pub fn precision_class(precision: Precision) -> &'static str {
    match precision {
        Precision::Bf16 => "bf16",
        Precision::Fp8Tensorwise
        | Precision::Fp8Delayed
        | Precision::Fp8Blockwise
        | Precision::Mxfp8 => "fp8",
        Precision::Nvfp4 => "fp4",
    }
}

/// Sequence bands: below 16K, 16K up to 64K, 64K and above.
pub fn seq_band(seq: u64) -> &'static str {
    if seq < 16_384 {
        "<16K"
    } else if seq < 65_536 {
        "16K-64K"
    } else {
        ">=64K"
    }
}

/// Scale: the whole run inside one NVLink domain, or across several.
pub fn scale(num_gpus: u32, nvlink_domain: u32) -> &'static str {
    if num_gpus <= nvlink_domain.max(1) {
        "one NVLink domain"
    } else {
        "multi-node"
    }
}

/// One regime's residual statistics. Empty `gpu`/`generation`/`precision`/`seq_band`/`scale`
/// mean "any".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Band {
    /// Hardware card id: runs on one product, whose software matured on its own schedule
    /// (the B300 rows of early 2026 releases err far more than the GB200 ones).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gpu: String,
    #[serde(default)]
    pub generation: String,
    /// Precision class ([`precision_class`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub precision: String,
    #[serde(default)]
    pub seq_band: String,
    #[serde(default)]
    pub scale: String,
    /// Measured runs in the regime.
    pub rows: usize,
    /// Median |predicted − measured| / measured.
    pub median_abs_error: f64,
    /// The typical error a prediction quotes: an upper bound on the regime's median
    /// |error| at `TYPICAL_CONFIDENCE` (distribution-free: the order statistic of the
    /// sample that bounds the population median with that probability), so a regime with few
    /// runs does not claim a tighter band than its runs can show. The sample median when
    /// absent (cards written before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typical_abs_error: Option<f64>,
    /// 90th percentile (nearest rank) of the same.
    pub p90_abs_error: f64,
    /// 5th and 95th percentiles (nearest rank) of measured / predicted throughput over the
    /// regime's runs: 90% of them measured inside this range of their prediction. Errors are
    /// lopsided (a run measured at half its prediction is +100%, one at double it −50%), so
    /// the range is read from the runs on each side, not from ±`p90_abs_error`. Absent in
    /// cards written before these fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_ratio_low: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_ratio_high: Option<f64>,
    /// Median signed error (positive: the model over-predicts in this regime).
    pub median_error: f64,
    /// Longest sequence, in tokens, of the regime's runs: a prediction for a longer one is
    /// past what the band's runs show (0: not recorded, cards written before this field).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub longest_seq: u64,
    /// Most GPUs of the regime's runs, likewise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub most_gpus: u64,
    /// Shortest predicted step, in milliseconds, of the regime's runs: a shorter step is past
    /// what they show, since per-step costs the model does not price (launches, logging,
    /// synchronisation) weigh more in it (0: not recorded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shortest_step_ms: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// A quantity of a run that lies past every measured run of the band it quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MeasuredQuantity {
    /// Sequence length, tokens.
    SeqLength,
    /// GPUs in the job.
    NumGpus,
    /// Predicted step time, milliseconds: past the band's runs when shorter than all of theirs.
    StepTimeMs,
}

/// How far a run lies past the band's measured runs in one quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BeyondMeasured {
    pub quantity: MeasuredQuantity,
    /// The run's value.
    pub run: u64,
    /// The bound of the band's measured runs the run lies past: their largest value, or for
    /// the step time their shortest.
    pub largest_measured: u64,
}

impl BeyondMeasured {
    fn words(&self) -> String {
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

/// A condition of a run that the regime bands' runs do not share: those force balanced
/// routing on mock data and train every weight, as the calibration table's runs do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunCondition {
    /// The router's own routing (`moe_router_force_load_balancing` off).
    NaturalRouting,
    /// Adapters trained on frozen base weights (PEFT: LoRA, DoRA).
    Peft,
}

impl RunCondition {
    pub fn words(self) -> &'static str {
        match self {
            RunCondition::NaturalRouting => "runs with the router's own routing",
            RunCondition::Peft => "PEFT runs",
        }
    }
}

/// The condition of a run that the error bands' runs do not share: adapters on frozen weights,
/// or an MoE router left to its own routing (`moe_router_force_load_balancing: false`; the
/// calibration runs force balance).
pub fn run_condition(cfg: &TrainingConfig, moe: bool) -> Option<RunCondition> {
    if cfg.frozen_base_weights() {
        Some(RunCondition::Peft)
    } else if moe && cfg.moe_router_force_load_balancing == Some(false) {
        Some(RunCondition::NaturalRouting)
    } else {
        None
    }
}

/// What measured runs under one condition reached, as measured / predicted throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConditionBand {
    pub condition: RunCondition,
    /// Measured runs under the condition.
    pub rows: usize,
    pub median_ratio: f64,
    /// 10th and 90th percentiles (nearest rank) of the ratio.
    pub low_ratio: f64,
    pub high_ratio: f64,
}

/// What single-layer measurements of the MoE block took against `performance.moe_block`, for
/// one GPU and precision class: measured / predicted forward + backward time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoeBlockBand {
    /// Hardware card id of the measurements.
    pub gpu: String,
    /// Precision class ([`precision_class`]).
    pub precision: String,
    /// Layers measured.
    pub rows: usize,
    pub median_ratio: f64,
    /// 10th and 90th percentiles (nearest rank) of the ratio.
    pub low_ratio: f64,
    pub high_ratio: f64,
    /// Where the measurements come from.
    pub source: String,
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

/// The generated table (`cards/time-uncertainty.yaml`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UncertaintyTable {
    /// How the table was made (command, rows used).
    #[serde(default)]
    pub source: String,
    pub bands: Vec<Band>,
    /// Runs under conditions the bands' runs do not share (Megatron-Bridge's verification
    /// runs): an answer for such a run quotes them beside its band.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ConditionBand>,
    /// Single-layer measurements of the MoE block (`performance.moe_block`), by GPU and
    /// precision class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moe_block: Vec<MoeBlockBand>,
}

/// One measured residual with the regime keys of its run.
#[derive(Debug, Clone, PartialEq)]
pub struct Residual {
    /// Hardware card id.
    pub gpu: String,
    pub generation: String,
    /// Precision class ([`precision_class`]).
    pub precision: String,
    pub seq: u64,
    pub num_gpus: u32,
    pub nvlink_domain: u32,
    /// (predicted − measured) / measured.
    pub error: f64,
    /// Predicted step time, seconds (0: not known).
    pub step_time_s: f64,
}

/// The band attached to one prediction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Uncertainty {
    /// The regime the band comes from, as words ("hopper, >=64K, multi-node"); wider than
    /// the prediction's own regime when that had too few measured runs.
    pub regime: String,
    /// Measured runs behind the band.
    pub rows: usize,
    /// Typical error, fraction: an upper confidence bound on the regime's median absolute
    /// error (see [`Band::typical_abs_error`]).
    pub typical_abs_error: f64,
    /// 90th-percentile absolute error, fraction.
    pub p90_abs_error: f64,
    /// Where 90% of the band's runs measured, as measured / predicted throughput (5th and
    /// 95th percentiles; from ±`p90_abs_error` for cards without them). Defaults keep answers
    /// serialized before these fields readable.
    #[serde(default)]
    pub measured_ratio_low: f64,
    #[serde(default)]
    pub measured_ratio_high: f64,
    /// That range applied to this prediction: model TFLOP/s per GPU…
    pub tflops_low: f64,
    pub tflops_high: f64,
    /// …and step time, seconds (the shortest step goes with the highest throughput).
    #[serde(default)]
    pub step_time_low_s: f64,
    #[serde(default)]
    pub step_time_high_s: f64,
    /// Median signed error of the regime's runs, fraction: negative when they ran faster than
    /// predicted. The text names the lean when it is at least `LEAN_REPORTED` either way.
    #[serde(default)]
    pub median_error: f64,
    /// The run's condition the band's runs do not share, with what measured runs under it
    /// reached (measured / predicted throughput).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<ConditionBand>,
    /// The run's sequence length or GPU count where it lies past every run of the band: the
    /// band then shows how the model erred on smaller runs, not how far it errs on this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub beyond_measured: Vec<BeyondMeasured>,
    /// The run's GEMM precision class ([`precision_class`]) where no measured run behind any
    /// band used it (FP4 today): the band then comes from runs of other precisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmeasured_precision: Option<String>,
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
                "; none of them ran {} GEMMs (no measured run did), so the band may understate the error",
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

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

fn median_signed(values: &[f64]) -> f64 {
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
fn sorted_ratios(errors: &[f64]) -> Vec<f64> {
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
struct RatioSpread {
    rows: usize,
    median: f64,
    low: f64,
    high: f64,
}

impl RatioSpread {
    /// From `(predicted − measured) / measured` per run; `None` without a usable run.
    fn of(errors: &[f64]) -> Option<Self> {
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
fn nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    let k = (p * sorted.len() as f64).ceil() as usize;
    sorted.get(k.clamp(1, sorted.len().max(1)) - 1).copied()
}

/// The `p` percentile (nearest rank) of measured / predicted throughput over `errors`.
fn ratio_percentile(errors: &[f64], p: f64) -> Option<f64> {
    nearest_rank(&sorted_ratios(errors), p)
}

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

/// The regime of one prediction, the lookup's key.
#[derive(Debug, Clone, Copy)]
pub struct RunRegime<'a> {
    /// Hardware card id.
    pub gpu: &'a str,
    pub generation: &'a str,
    pub precision: Precision,
    pub seq: u64,
    pub num_gpus: u32,
    pub nvlink_domain: u32,
    /// A condition the bands' runs do not share, if the run has one.
    pub condition: Option<RunCondition>,
}

fn band(key: RegimeKey<'_>, runs: &[&Residual]) -> Band {
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

/// A duration in milliseconds as words: "0.35 s", "12 s".
fn seconds_label(ms: u64) -> String {
    let s = ms as f64 / 1000.0;
    if s < 10.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.0} s")
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
        for condition in [RunCondition::NaturalRouting, RunCondition::Peft] {
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

#[cfg(test)]
mod tests {
    use super::*;

    const FP8: Precision = Precision::Fp8Blockwise;

    fn run(
        generation: &str,
        precision: Precision,
        seq: u64,
        num_gpus: u32,
        nvlink_domain: u32,
    ) -> RunRegime<'_> {
        RunRegime {
            gpu: gpu_of(generation),
            generation,
            precision,
            seq,
            num_gpus,
            nvlink_domain,
            condition: None,
        }
    }

    /// The GPU of a test run: one card per generation unless a test says otherwise.
    fn gpu_of(generation: &str) -> &'static str {
        if generation == "hopper" {
            "h100"
        } else {
            "b200"
        }
    }

    fn r(generation: &str, seq: u64, num_gpus: u32, error: f64) -> Residual {
        Residual {
            gpu: gpu_of(generation).into(),
            generation: generation.into(),
            precision: "fp8".into(),
            seq,
            num_gpus,
            nvlink_domain: 8,
            error,
            step_time_s: 10.0,
        }
    }

    #[test]
    fn the_typical_error_bounds_the_median_from_above() {
        // P(Bin(10, ½) ≤ 5) = 0.623, ≤ 6 = 0.828: the 7th of 10; P(Bin(8, ½) ≤ 5) = 0.855:
        // the 6th of 8; three runs cannot bound it below their largest.
        assert_eq!(median_upper_bound_rank(10, 0.8), 7);
        assert_eq!(median_upper_bound_rank(8, 0.8), 6);
        assert_eq!(median_upper_bound_rank(3, 0.8), 3);
        assert_eq!(median_upper_bound_rank(1, 0.8), 1);
        assert_eq!(median_upper_bound_rank(0, 0.8), 0);
        // Large samples approach the median from above.
        let k = median_upper_bound_rank(1000, 0.8);
        assert!((500..=530).contains(&k), "{k}");
        let runs: Vec<Residual> = [0.01, -0.02, 0.03, -0.04, 0.05, 0.06, -0.07, 0.08]
            .iter()
            .map(|&e| r("hopper", 131072, 256, e))
            .collect();
        let runs: Vec<&Residual> = runs.iter().collect();
        let b = band(["h100", "hopper", "fp8", ">=64K", "multi-node"], &runs);
        assert!((b.median_abs_error - 0.045).abs() < 1e-9);
        assert_eq!(b.typical_abs_error, Some(0.06));
    }

    #[test]
    fn a_run_past_every_measured_run_says_so() {
        let residuals = vec![
            r("hopper", 65536, 256, 0.1),
            r("hopper", 131072, 512, -0.1),
            r("hopper", 262144, 128, 0.05),
        ];
        let t = UncertaintyTable::from_residuals("test", &residuals);
        let b = &t.bands[0];
        assert_eq!((b.longest_seq, b.most_gpus), (262144, 512));
        // Inside the runs: nothing to say.
        let inside = t.lookup(run("hopper", FP8, 262144, 512, 8), 300.0, 10.0);
        assert_eq!(inside.map(|u| u.beyond_measured), Some(Vec::new()));
        // 1M tokens on 1024 GPUs: past both, and the text names both.
        let Some(past) = t.lookup(run("hopper", FP8, 1 << 20, 1024, 8), 300.0, 10.0) else {
            panic!("the hopper band answers");
        };
        assert_eq!(
            past.beyond_measured,
            vec![
                BeyondMeasured {
                    quantity: MeasuredQuantity::SeqLength,
                    run: 1 << 20,
                    largest_measured: 262144
                },
                BeyondMeasured {
                    quantity: MeasuredQuantity::NumGpus,
                    run: 1024,
                    largest_measured: 512
                },
            ]
        );
        let text = past.text();
        assert!(
            text.contains("a 1M sequence against the longest measured 256K")
                && text.contains("1024 GPUs against at most 512 measured"),
            "{text}"
        );
        // A card written before the fields existed records nothing and claims nothing.
        let mut old = t.clone();
        for b in &mut old.bands {
            (b.longest_seq, b.most_gpus) = (0, 0);
        }
        let quiet = old.lookup(run("hopper", FP8, 1 << 20, 1024, 8), 300.0, 10.0);
        assert_eq!(quiet.map(|u| u.beyond_measured), Some(Vec::new()));
    }

    #[test]
    fn a_step_shorter_than_every_measured_step_says_so() {
        let residuals: Vec<Residual> = [(0.1, 12.0), (-0.1, 3.5), (0.05, 40.0)]
            .iter()
            .map(|&(e, step)| Residual {
                step_time_s: step,
                ..r("hopper", 4096, 64, e)
            })
            .collect();
        let t = UncertaintyTable::from_residuals("test", &residuals);
        assert_eq!(t.bands[0].shortest_step_ms, 3500);
        // A 4 s step is inside the runs; a 0.06 s one is past all of them.
        let inside = t.lookup(run("hopper", FP8, 4096, 64, 8), 300.0, 4.0);
        assert_eq!(inside.map(|u| u.beyond_measured), Some(Vec::new()));
        let Some(short) = t.lookup(run("hopper", FP8, 4096, 64, 8), 300.0, 0.06) else {
            panic!("the hopper band answers");
        };
        assert_eq!(
            short.beyond_measured,
            vec![BeyondMeasured {
                quantity: MeasuredQuantity::StepTimeMs,
                run: 60,
                largest_measured: 3500
            }]
        );
        let text = short.text();
        assert!(
            text.contains("a 0.06 s step against the shortest measured 3.50 s"),
            "{text}"
        );
    }

    #[test]
    fn regimes_with_few_rows_borrow_a_wider_band() {
        let residuals = vec![
            r("hopper", 4096, 256, 0.1),
            r("hopper", 4096, 256, -0.2),
            r("hopper", 4096, 256, 0.3),
            r("hopper", 131072, 32, 0.5),
            r("blackwell", 4096, 256, 0.05),
        ];
        let t = UncertaintyTable::from_residuals("test", &residuals);
        let own = t.lookup(run("hopper", FP8, 4096, 512, 8), 100.0, 10.0);
        assert_eq!(own.as_ref().map(|u| u.rows), Some(3));
        assert_eq!(
            own.as_ref().map(|u| u.regime.as_str()),
            Some("h100, fp8, <16K, multi-node")
        );
        // One long-context run: falls back to all Hopper runs (4).
        let wide = t.lookup(run("hopper", FP8, 131072, 32, 8), 100.0, 10.0);
        assert_eq!(wide.as_ref().map(|u| u.rows), Some(4));
        // Blackwell has one run: falls back to all runs.
        let all = t.lookup(run("blackwell", FP8, 4096, 256, 8), 100.0, 10.0);
        assert_eq!(all.map(|u| u.regime), Some("all measured runs".to_string()));
    }

    #[test]
    fn the_range_is_where_the_bands_runs_measured() {
        let residuals: Vec<Residual> = (0..5)
            .map(|i| r("hopper", 4096, 8, 0.1 * i as f64))
            .collect();
        let t = UncertaintyTable::from_residuals("test", &residuals);
        let u = t
            .lookup(run("hopper", FP8, 4096, 8, 8), 100.0, 10.0)
            .unwrap_or_default();
        // Every run measured at or below its prediction (errors 0 to +40%): the range is
        // 1/1.4–1.0 of it, not a band around it.
        assert!((u.measured_ratio_low - 0.7143).abs() < 1e-9, "{u:?}");
        assert_eq!(u.measured_ratio_high, 1.0);
        assert!((u.tflops_low - 71.43).abs() < 1e-9 && u.tflops_high == 100.0);
        // The slowest measured step goes with the lowest throughput.
        assert!((u.step_time_high_s - 14.0).abs() < 1e-3 && u.step_time_low_s == 10.0);
        assert!(u
            .text()
            .contains("all 5 measured 0.71–1.00× their prediction: 71–100 here"));
        assert_eq!(u.step_text(), " (10.00–14.00 s by the same runs)");
        // From 20 runs on, the 5th and 95th percentiles leave the extremes out: errors
        // −0.19…0.19 give measured / predicted 0.84…1.23; the 1st and 19th of 20 sorted ratios.
        let many: Vec<Residual> = (0..20)
            .map(|i| r("hopper", 4096, 8, 0.02 * i as f64 - 0.19))
            .collect();
        let u20 = UncertaintyTable::from_residuals("test", &many)
            .lookup(run("hopper", FP8, 4096, 8, 8), 100.0, 10.0)
            .unwrap_or_default();
        assert!(
            (u20.measured_ratio_low - 1.0 / 1.19).abs() < 1e-4,
            "{u20:?}"
        );
        assert!(
            (u20.measured_ratio_high - 1.0 / 0.83).abs() < 1e-4,
            "{u20:?}"
        );
        assert!(
            u20.text().contains("90% of them measured 0.84–1.20×"),
            "{}",
            u20.text()
        );
        // Median 0.2; the 80% upper bound of five runs is the 4th: P(Bin(5, ½) ≤ 3) = 0.81.
        assert!((u.typical_abs_error - 0.3).abs() < 1e-12);
        assert!(UncertaintyTable::default()
            .lookup(run("hopper", FP8, 4096, 8, 8), 1.0, 1.0)
            .is_none());
    }

    #[test]
    fn an_outlier_far_above_its_prediction_does_not_open_the_range_past_reason() {
        // One run measured at 0.41× its prediction (+144%) and others near it: ±p90 of the
        // error would put the upper end at prediction / (1 − 1.44), past infinity.
        let residuals: Vec<Residual> = [1.44, 0.3, 0.1, -0.05, -0.16, 0.02]
            .iter()
            .map(|&e| r("blackwell", 65536, 32, e))
            .collect();
        let t = UncertaintyTable::from_residuals("test", &residuals);
        let quote = |table: &UncertaintyTable| {
            table
                .lookup(
                    run("blackwell", Precision::Bf16, 65536, 32, 72),
                    900.0,
                    20.0,
                )
                .unwrap_or_default()
        };
        let u = quote(&t);
        assert!((u.measured_ratio_low - 1.0 / 2.44).abs() < 1e-4, "{u:?}");
        assert!((u.measured_ratio_high - 1.0 / 0.84).abs() < 1e-4, "{u:?}");
        assert!(u.tflops_high < 1100.0 && u.tflops_low > 360.0, "{u:?}");
        // A card without the measured range falls back to ±p90, held finite.
        let mut old = t.clone();
        for b in &mut old.bands {
            (b.measured_ratio_low, b.measured_ratio_high) = (None, None);
        }
        let u = quote(&old);
        assert!(u.tflops_high.is_finite() && u.tflops_low < 900.0, "{u:?}");
    }

    #[test]
    fn bf16_and_fp8_runs_quote_their_own_bands() {
        let mut residuals: Vec<Residual> = [0.02, -0.03, 0.04]
            .iter()
            .map(|e| r("blackwell", 4096, 64, *e))
            .collect();
        for e in [-0.30, -0.25, -0.35] {
            residuals.push(Residual {
                precision: "bf16".into(),
                ..r("blackwell", 4096, 64, e)
            });
        }
        let t = UncertaintyTable::from_residuals("test", &residuals);
        let low = t
            .lookup(run("blackwell", Precision::Mxfp8, 4096, 64, 8), 100.0, 10.0)
            .unwrap_or_default();
        let bf16 = t
            .lookup(run("blackwell", Precision::Bf16, 4096, 64, 8), 100.0, 10.0)
            .unwrap_or_default();
        assert_eq!(low.regime, "b200, fp8, <16K, multi-node");
        assert_eq!(bf16.regime, "b200, bf16, <16K, multi-node");
        assert!((low.typical_abs_error - 0.04).abs() < 1e-12);
        assert!((bf16.typical_abs_error - 0.35).abs() < 1e-12);
        // The BF16 runs all ran faster than predicted: the text says so, by the measured
        // speed (1 / (1 − 0.30) − 1 = 43%); the FP8 runs lean neither way.
        assert!((bf16.median_error + 0.30).abs() < 1e-12);
        assert!(
            bf16.text()
                .contains("which ran a median 43% faster than predicted"),
            "{}",
            bf16.text()
        );
        assert!(!low.text().contains("than predicted"), "{}", low.text());
        // No FP4 run: the generation's band, both precisions together.
        let fp4 = t
            .lookup(run("blackwell", Precision::Nvfp4, 4096, 64, 8), 100.0, 10.0)
            .unwrap_or_default();
        assert_eq!((fp4.regime.as_str(), fp4.rows), ("blackwell", 6));
    }

    #[test]
    fn a_regime_of_slow_runs_says_they_ran_slower() {
        let residuals: Vec<Residual> = [0.2, 0.25, 0.3]
            .iter()
            .map(|e| r("hopper", 4096, 8, *e))
            .collect();
        let u = UncertaintyTable::from_residuals("test", &residuals)
            .lookup(run("hopper", FP8, 4096, 8, 8), 100.0, 10.0)
            .unwrap_or_default();
        // Measured = predicted / 1.25: 20% slower.
        assert!(
            u.text()
                .contains("which ran a median 20% slower than predicted"),
            "{}",
            u.text()
        );
    }

    #[test]
    fn a_gpu_with_enough_runs_quotes_its_own_band_and_others_its_generation() {
        let mut residuals: Vec<Residual> = [0.01, -0.02, 0.03]
            .iter()
            .map(|e| r("blackwell", 4096, 64, *e))
            .collect();
        for e in [0.4, -0.25, 0.55] {
            residuals.push(Residual {
                gpu: "b300".into(),
                ..r("blackwell", 4096, 64, e)
            });
        }
        let t = UncertaintyTable::from_residuals("test", &residuals);
        let on = |gpu: &str| {
            let u = t
                .lookup(
                    RunRegime {
                        gpu,
                        ..run("blackwell", FP8, 4096, 64, 8)
                    },
                    100.0,
                    10.0,
                )
                .unwrap_or_default();
            (u.regime, u.rows, u.typical_abs_error)
        };
        assert_eq!(
            on("b300"),
            ("b300, fp8, <16K, multi-node".to_string(), 3, 0.55)
        );
        // A GPU without runs of its own: its generation's, all six.
        let (regime, rows, _) = on("gb200");
        assert_eq!(
            (regime.as_str(), rows),
            ("blackwell, fp8, <16K, multi-node", 6)
        );
    }

    #[test]
    fn a_run_under_a_condition_quotes_what_measured_runs_under_it_reached() {
        let residuals: Vec<Residual> = (0..4)
            .map(|i| r("hopper", 4096, 64, 0.01 * i as f64))
            .collect();
        // Errors +100%, +25%, 0%, −20%: measured / predicted 0.5, 0.8, 1.0, 1.25.
        let t = UncertaintyTable::from_residuals("test", &residuals).with_conditions(&[
            (RunCondition::NaturalRouting, 1.0),
            (RunCondition::NaturalRouting, 0.25),
            (RunCondition::NaturalRouting, 0.0),
            (RunCondition::NaturalRouting, -0.2),
            (RunCondition::Peft, 1.0),
        ]);
        let band = &t.conditions[0];
        assert_eq!(band.rows, 4);
        assert_eq!(
            (band.low_ratio, band.median_ratio, band.high_ratio),
            (0.5, 0.9, 1.25)
        );
        // PEFT has too few runs to be quoted.
        assert_eq!(t.conditions[1].rows, 1);
        let quoted = |condition| {
            t.lookup(
                RunRegime {
                    condition,
                    ..run("hopper", FP8, 4096, 64, 8)
                },
                100.0,
                10.0,
            )
            .unwrap_or_default()
        };
        let natural = quoted(Some(RunCondition::NaturalRouting));
        assert_eq!(natural.condition.as_ref().map(|c| c.rows), Some(4));
        assert!(
            natural.text().contains(
                "router's own routing are not in that band: 4 measured reached 0.50–1.25×"
            ),
            "{}",
            natural.text()
        );
        assert!(quoted(Some(RunCondition::Peft)).condition.is_none());
        assert!(quoted(None).condition.is_none());
    }

    #[test]
    fn moe_block_bands_are_by_gpu_and_precision_class_and_fall_back_to_another_gpu() {
        let residuals = [
            ("h100".to_string(), "bf16".to_string(), 0.25),
            ("h100".to_string(), "bf16".to_string(), 0.5),
            ("h100".to_string(), "bf16".to_string(), 0.0),
            ("h100".to_string(), "fp8".to_string(), -0.2),
        ];
        let t = UncertaintyTable::default().with_moe_block("a test", &residuals);
        assert_eq!(t.moe_block.len(), 2);
        let bf16 = t
            .moe_block_band("h100", Precision::Bf16)
            .expect("an h100 bf16 band");
        // Measured / predicted time: 1/1.5, 1/1.25, 1/1.0.
        assert_eq!(bf16.rows, 3);
        assert_eq!(bf16.median_ratio, 0.8);
        assert_eq!(bf16.low_ratio, round4(1.0 / 1.5));
        assert_eq!(bf16.high_ratio, 1.0);
        let fp8 = t
            .moe_block_band("h100", Precision::Fp8Tensorwise)
            .expect("the fp8 class");
        assert_eq!(fp8.median_ratio, 1.25);
        assert_eq!(t.moe_block_band("gb200", Precision::Bf16), Some(bf16));
        assert_eq!(t.moe_block_band("h100", Precision::Nvfp4), None);
        assert!(bf16
            .text()
            .starts_with("a test on h100: 3 bf16 layers took 0.67–1.00×"));
    }
}
