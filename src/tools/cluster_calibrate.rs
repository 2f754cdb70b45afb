//! `moe-skills calibrate --log A.log --log B.log …`: fits the few physical factors the user's
//! own runs can identify (see `model::cluster_fit`), measures allocator fragmentation from the
//! logs' memory lines, and writes a calibration card the user owns (`--calibration FILE`).

use serde::Serialize;

use crate::catalog::Catalog;
use crate::inputs::megatron_log::read_megatron_log;
use crate::model::cluster_calibration::ClusterCalibration;
use crate::model::cluster_fit::{fit_cluster, ClusterFit, FitRun};
use crate::model::{evaluate, Architecture, ModelSpec, TrainingConfig};

use super::common::{constants, resolve, resolve_hardware, ToolError};
use super::log_compare::{pipeline_stage, MIB_PER_GIB};

/// Ranks whose predicted fragmentation is below this many GiB say nothing about it.
const MIN_FRAGMENTATION_GIB: f64 = 0.05;

/// One log to calibrate on: a name for answers and its text.
#[derive(Debug, Clone)]
pub struct LogText {
    pub name: String,
    pub text: String,
}

/// What every log shares and the logs cannot say.
#[derive(Debug, Clone, Default)]
pub struct CalibrateInput {
    pub logs: Vec<LogText>,
    /// Model card id or config.json, when the argument dumps do not carry the architecture.
    pub model: Option<ModelSpec>,
    /// The GPU the runs used (logs do not name it).
    pub hardware: Option<String>,
    pub cluster: Option<String>,
}

/// Allocator fragmentation measured from `max reserved - max allocated`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FragmentationFit {
    pub card_fraction: f64,
    pub measured_fraction: f64,
    /// Ranks (over all logs) whose memory lines were used.
    pub ranks: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationOutcome {
    pub calibration: ClusterCalibration,
    pub fit: ClusterFit,
    pub fragmentation: Option<FragmentationFit>,
    /// Logs or ranks that could not be used, and why.
    pub notes: Vec<String>,
    /// The calibration card as YAML, ready to write.
    pub card_yaml: String,
}

/// Reads each log's configuration and measurements and fits the cluster's factors.
pub fn calibrate_from_logs(
    catalog: &Catalog,
    input: CalibrateInput,
) -> Result<CalibrationOutcome, ToolError> {
    let cards = catalog.cost();
    if input.logs.is_empty() {
        return Err(ToolError::field(
            "log",
            "no log given",
            "give one or more training logs with --log FILE",
        ));
    }
    // The fit starts from the cards as shipped, never from an earlier calibration.
    let hardware = resolve_hardware(cards, input.hardware.as_deref())?;
    let constants = constants(cards)?;
    let mut notes = Vec::new();
    let mut timed: Vec<(String, TrainingConfig, f64, Architecture)> = Vec::new();
    let mut gaps: Vec<f64> = Vec::new();
    for log in &input.logs {
        let read = read_megatron_log(&log.text, input.model.as_ref())
            .map_err(|e| ToolError::field("log", format!("{}: {e}", log.name), "give a Megatron-LM or Megatron-Bridge training log with its argument dump and iteration lines"))?;
        let Some(mut config) = read.config.clone() else {
            notes.push(format!(
                "{}: no argument dump, so its configuration is unknown; not used",
                log.name
            ));
            continue;
        };
        if let Some(model) = &input.model {
            config.model = Some(model.clone());
        }
        config.hardware = Some(hardware.id.clone());
        let resolved = match resolve(cards, &config) {
            Ok(resolved) => resolved,
            Err(error) => {
                notes.push(format!("{}: {error}; not used", log.name));
                continue;
            }
        };
        if !config.ignored_settings.is_empty() {
            let keys: Vec<&str> = config
                .ignored_settings
                .iter()
                .map(|i| i.key.as_str())
                .collect();
            notes.push(format!(
                "{}: settings the cost model does not use (`check --log` gives the reasons): {}",
                log.name,
                keys.join(", ")
            ));
        }
        let estimate = evaluate(&resolved.arch, hardware, constants, &config);
        // Fragmentation: what the allocator reserved beyond what it handed out, against the
        // model's fragmentation term on the same pipeline stage.
        let outside = estimate.memory.breakdown_gib.fixed_reserve
            + estimate.memory.breakdown_gib.dispatcher_buffers;
        for report in read.peak_memory_by_rank() {
            let stage = pipeline_stage(&config, report.rank) as usize;
            let (Some(peak), Some(allocated)) = (
                estimate.memory.per_rank_peak_gib.get(stage),
                estimate.memory.per_rank_allocated_gib.get(stage),
            ) else {
                continue;
            };
            let predicted = peak - allocated - outside;
            if predicted > MIN_FRAGMENTATION_GIB {
                let measured = (report.max_reserved_mib - report.max_allocated_mib) / MIB_PER_GIB;
                gaps.push(measured.max(0.0) / predicted);
            }
        }
        let arch = resolved.arch.into_owned();
        match read.step_statistics() {
            Some(steps) => timed.push((
                log.name.clone(),
                config,
                steps.median_step_ms / 1000.0,
                arch,
            )),
            None => notes.push(format!(
                "{}: no iteration lines past warm-up; its step time is not used",
                log.name
            )),
        }
    }
    let runs: Vec<FitRun> = timed
        .iter()
        .map(|(name, config, step, arch)| FitRun {
            name: name.clone(),
            arch,
            config: config.clone(),
            measured_step_s: *step,
        })
        .collect();
    let fit = fit_cluster(&runs, hardware, constants);
    notes.extend(fit.excluded.iter().cloned());

    let fragmentation = (!gaps.is_empty()).then(|| {
        gaps.sort_by(f64::total_cmp);
        let ratio = gaps[gaps.len() / 2];
        FragmentationFit {
            card_fraction: constants.fragmentation_fraction,
            measured_fraction: ((constants.fragmentation_fraction * ratio).clamp(0.0, 1.0)
                * 1000.0)
                .round()
                / 1000.0,
            ranks: gaps.len(),
        }
    });
    if fragmentation.is_none() {
        notes.push("no memory lines (`[Rank N] … memory (MB)`) with a fragmentation the model predicts: allocator fragmentation is not calibrated".into());
    }
    let names: Vec<&str> = input.logs.iter().map(|l| l.name.as_str()).collect();
    let calibration = ClusterCalibration {
        hardware: hardware.id.clone(),
        cluster: input.cluster.clone(),
        runs: u32::try_from(runs.len()).unwrap_or(u32::MAX),
        source: format!("moe-skills calibrate --log {}", names.join(" --log ")),
        factors: fit.factors,
        fragmentation_fraction: fragmentation.as_ref().map(|f| f.measured_fraction),
        fit: serde_json::to_value(FitSummary::of(&fit)).ok(),
        // The factors were fitted against the hardware card's own attention table.
        attention_kernels: None,
    };
    let card_yaml = card_yaml(&calibration, &fit)?;
    Ok(CalibrationOutcome {
        calibration,
        fit,
        fragmentation,
        notes,
        card_yaml,
    })
}

/// The part of the fit a card keeps, so that a reader of the card sees how good it is.
#[derive(Debug, Serialize)]
struct FitSummary {
    median_abs_error_before_pct: f64,
    median_abs_error_after_pct: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    median_abs_held_out_error_pct: Option<f64>,
    refused: Vec<String>,
}

impl FitSummary {
    fn of(fit: &ClusterFit) -> FitSummary {
        FitSummary {
            median_abs_error_before_pct: fit.median_abs_error_before_pct,
            median_abs_error_after_pct: fit.median_abs_error_after_pct,
            median_abs_held_out_error_pct: fit.median_abs_held_out_error_pct,
            refused: fit
                .verdicts
                .iter()
                .filter(|v| v.fitted.is_none())
                .map(|v| format!("{}: {}", v.name, v.reason))
                .collect(),
        }
    }
}

fn card_yaml(calibration: &ClusterCalibration, fit: &ClusterFit) -> Result<String, ToolError> {
    let body = serde_yaml::to_string(calibration)
        .map_err(|e| ToolError::Infeasible(format!("cannot write the calibration card: {e}")))?;
    let fitted: Vec<&str> = fit
        .verdicts
        .iter()
        .filter(|v| v.fitted.is_some())
        .map(|v| v.name)
        .collect();
    Ok(format!(
        "# Cluster calibration for moe-skills, fitted on your own runs. Yours to keep and edit.\n\
         # Use it with `--calibration FILE`, or save it as cards/calibration.yaml in a --skills-dir.\n\
         # Factors multiply the `{}` hardware card's values (1 = the card is right); fitted: {}.\n{body}",
        calibration.hardware,
        if fitted.is_empty() { "none".to_owned() } else { fitted.join(", ") }
    ))
}

impl CalibrationOutcome {
    /// The outcome as Markdown: what was fitted, what was refused and why, and the errors
    /// before, after and held out.
    pub fn markdown(&self) -> String {
        let fit = &self.fit;
        let mut text = format!(
            "## Cluster calibration for `{}` on {} run{}\n\n| factor | value | change per 10% | verdict |\n|---|---|---|---|",
            self.calibration.hardware,
            fit.runs.len(),
            if fit.runs.len() == 1 { "" } else { "s" }
        );
        for v in &fit.verdicts {
            text.push_str(&format!(
                "\n| {} | {} | {:.1}% | {} |",
                v.meaning,
                v.fitted
                    .map_or("1 (refused)".into(), |f| format!("×{f:.3}")),
                v.sensitivity * 10.0,
                v.reason
            ));
        }
        if let Some(f) = &self.fragmentation {
            text.push_str(&format!(
                "\n| allocator fragmentation | {:.1}% (card {:.1}%) | | measured on {} rank{} as `max reserved − max allocated` |",
                f.measured_fraction * 100.0,
                f.card_fraction * 100.0,
                f.ranks,
                if f.ranks == 1 { "" } else { "s" }
            ));
        }
        text.push_str(
            "\n\n| run | measured step | cards | calibrated | held out |\n|---|---|---|---|---|",
        );
        for run in &fit.runs {
            text.push_str(&format!(
                "\n| {} | {:.2} s | {:.2} s ({:+.1}%) | {:.2} s ({:+.1}%) | {} |",
                run.name,
                run.measured_step_s,
                run.predicted_before_s,
                run.error_before_pct,
                run.predicted_after_s,
                run.error_after_pct,
                match (run.held_out_predicted_s, run.held_out_error_pct) {
                    (Some(s), Some(e)) => format!("{s:.2} s ({e:+.1}%)"),
                    _ => "—".into(),
                }
            ));
        }
        text.push_str(&format!(
            "\n\nMedian absolute step-time error: {:.1}% with the cards, {:.1}% calibrated",
            fit.median_abs_error_before_pct, fit.median_abs_error_after_pct
        ));
        match fit.median_abs_held_out_error_pct {
            Some(held) => text.push_str(&format!(
                ", {held:.1}% on each run left out of its own fit (leave-one-out)."
            )),
            None => text.push_str(
                "; with one run there is no run left to check the fit on: add runs before trusting it.",
            ),
        }
        for note in &self.notes {
            text.push_str(&format!("\n- {note}"));
        }
        text
    }
}
