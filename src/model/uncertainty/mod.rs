//! The error band of a predicted throughput, from the validation residuals of its regime
//! (GPU × GEMM precision × sequence band × scale, the GPU widening to its generation). The
//! table is data: `moe-skills calibrate --bands` computes it from the measured rows and writes
//! `cards/time-uncertainty.yaml`; the catalog hands it to `evaluate` inside the cost constants.
//!
//! This file holds the regime keys and the types the card and the answers carry; `stats.rs` the
//! order statistics, `table.rs` the table's making and its lookup, `text.rs` the band in words.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::config::{Precision, TrainingConfig};

mod stats;
mod table;
#[cfg(test)]
mod tests;
mod text;

/// Fewest residuals a regime needs before its own band is quoted; sparser regimes borrow the
/// band of the next wider one (see [`widening`]).
pub const MIN_ROWS: usize = 3;

/// Confidence of the upper bound quoted as a regime's typical error (see
/// [`Band::typical_abs_error`]).
pub const TYPICAL_CONFIDENCE: f64 = 0.8;

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

/// Whether a dense run's sequence is past the shortest sequence band, where the
/// `DenseLongSequence` condition applies.
pub fn dense_long_sequence(seq: u64) -> bool {
    seq_band(seq) != seq_band(0)
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

/// A condition of a run that the regime bands' runs do not share: those force balanced
/// routing on mock data and train every weight, as the calibration table's runs do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunCondition {
    /// The router's own routing (`moe_router_force_load_balancing` off).
    NaturalRouting,
    /// Adapters trained on frozen base weights (PEFT: LoRA, DoRA).
    Peft,
    /// A model without experts at 16K tokens or more (past the shortest sequence band): every
    /// run behind the bands trains an MoE model, and the dense runs measured that long are
    /// NeMo's long-sequence series.
    DenseLongSequence,
    /// A model without experts below 16K tokens: the dense runs measured there are
    /// Megatron-Bridge's Llama pre-training rows at 8K.
    DensePretraining,
    /// A model with Mamba-2 layers: every run behind the bands has only attention and Gated
    /// DeltaNet mixers, and the hybrid runs measured are Megatron-Bridge's Nemotron 3 Nano
    /// rows at 8K.
    MambaHybrid,
}

impl RunCondition {
    pub fn words(self) -> &'static str {
        match self {
            RunCondition::NaturalRouting => "runs with the router's own routing",
            RunCondition::Peft => "PEFT runs",
            RunCondition::DenseLongSequence => {
                "runs of models without experts at 16K tokens or more (NeMo's long-sequence series on 2024-25 software, the only such runs measured)"
            }
            RunCondition::DensePretraining => {
                "runs of models without experts (Megatron-Bridge's Llama pre-training rows at 8K, releases 25.09 to 26.06)"
            }
            RunCondition::MambaHybrid => {
                "runs of models with Mamba-2 layers (Megatron-Bridge's Nemotron 3 Nano rows at 8K, releases 26.02.01 to 26.08)"
            }
        }
    }
}

/// The condition of a run that the error bands' runs do not share: adapters on frozen weights,
/// a model without experts (past the shortest sequence band or within it), an MoE router left to
/// its own routing (`moe_router_force_load_balancing: false`; the calibration runs force
/// balance), or a model with Mamba-2 layers (`mamba`).
pub fn run_condition(cfg: &TrainingConfig, moe: bool, mamba: bool) -> Option<RunCondition> {
    if cfg.frozen_base_weights() {
        Some(RunCondition::Peft)
    } else if !moe {
        Some(if dense_long_sequence(cfg.seq_length.unwrap_or(0)) {
            RunCondition::DenseLongSequence
        } else {
            RunCondition::DensePretraining
        })
    } else if cfg.moe_router_force_load_balancing == Some(false) {
        Some(RunCondition::NaturalRouting)
    } else if mamba {
        Some(RunCondition::MambaHybrid)
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
