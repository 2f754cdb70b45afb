//! Megatron-Bridge's measurements of optimizer CPU offloading as a held-out check
//! (`data/calibration/bridge-cpu-offload.yaml`): one run without offload and variants that
//! change only the optimizer's offload settings, each with its step time and allocated
//! memory. What a variant adds to the baseline's step is the offloaded optimizer step's own
//! cost (`estimate/step_costs.rs`), which the baseline's routing does not change; what it
//! frees is the optimizer state the memory model moves to the host. Nothing is fitted on
//! them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::Catalog;
use crate::model::calibration::abs_median;
use crate::model::config::TrainingConfig;
use crate::model::uncertainty::{run_condition, RunCondition};
use crate::model::{evaluate, CostConstants, Estimate};

use super::common::{resolve, ToolError};

/// The shipped measurements.
pub const BRIDGE_CPU_OFFLOAD: &str = include_str!("../../data/calibration/bridge-cpu-offload.yaml");

/// Bytes per GiB over bytes per GB: the sources print decimal GB, the model reports GiB.
const GB_PER_GIB: f64 = 1.073_741_824;

/// What one run measured.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Measured {
    /// Mean step time, seconds.
    step_time_s: f64,
    /// `torch.cuda.max_memory_allocated`, decimal GB.
    allocated_gb: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct BaselineEntry {
    /// The source's job id for the run.
    job: String,
    /// Training-configuration fields, as `check --config` reads them.
    config: Map<String, Value>,
    measured: Measured,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantEntry {
    id: String,
    job: String,
    /// The fields the variant sets on top of the baseline's configuration.
    settings: Map<String, Value>,
    measured: Measured,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct OffloadFile {
    source: String,
    baseline: BaselineEntry,
    variants: Vec<VariantEntry>,
}

/// One measured run with the configuration it ran.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    id: String,
    job: String,
    config: TrainingConfig,
    measured: Measured,
}

/// The measurements: a baseline run and its variants, each variant's configuration the
/// baseline's with its settings written over it.
#[derive(Debug, Clone, PartialEq)]
pub struct OffloadRuns {
    source: String,
    baseline: Run,
    variants: Vec<Run>,
}

/// Reads the shipped measurements (or another file of the same shape). A setting the
/// configuration schema does not know is an error naming the run it belongs to.
pub fn parse_offload_runs(text: &str) -> Result<OffloadRuns, ToolError> {
    let file: OffloadFile = serde_yaml::from_str(text)
        .map_err(|e| ToolError::Infeasible(format!("offload measurements: {e}")))?;
    let config_of = |fields: Map<String, Value>, what: &str| {
        TrainingConfig::from_fields(&Value::Object(fields))
            .map_err(|e| ToolError::Infeasible(format!("offload measurements, {what}: {e}")))
    };
    let baseline = Run {
        id: "baseline".into(),
        job: file.baseline.job,
        config: config_of(file.baseline.config.clone(), "baseline")?,
        measured: file.baseline.measured,
    };
    let variants = file
        .variants
        .into_iter()
        .map(|v| {
            let mut fields = file.baseline.config.clone();
            fields.extend(v.settings);
            Ok(Run {
                config: config_of(fields, &v.id)?,
                id: v.id,
                job: v.job,
                measured: v.measured,
            })
        })
        .collect::<Result<Vec<_>, ToolError>>()?;
    Ok(OffloadRuns {
        source: file.source,
        baseline,
        variants,
    })
}

/// One variant replayed against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffloadRow {
    pub id: String,
    pub job: String,
    pub measured_step_s: f64,
    pub predicted_step_s: f64,
    /// Seconds the variant adds to the baseline's step, measured and predicted: the offload's
    /// own cost, which the baseline's routing does not change.
    pub measured_added_s: f64,
    pub predicted_added_s: f64,
    /// predicted / measured added seconds − 1: negative where the model prices the offload
    /// short.
    pub added_error: f64,
    pub measured_allocated_gb: f64,
    pub predicted_allocated_gb: f64,
    /// Allocated memory the variant frees against the baseline, decimal GB.
    pub measured_freed_gb: f64,
    pub predicted_freed_gb: f64,
    pub freed_error: f64,
}

/// The replayed measurements.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffloadReport {
    pub source: String,
    pub baseline_job: String,
    pub baseline_measured_step_s: f64,
    pub baseline_predicted_step_s: f64,
    pub baseline_measured_allocated_gb: f64,
    pub baseline_predicted_allocated_gb: f64,
    /// The baseline's condition the error bands' runs do not share (its routing), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<RunCondition>,
    pub rows: Vec<OffloadRow>,
    /// Median absolute error of the added seconds over the variants.
    pub added_median_abs_error: f64,
}

fn allocated_gb(estimate: &Estimate) -> f64 {
    estimate.memory.allocated_gib * GB_PER_GIB
}

/// Replays the baseline and every variant; `None` when the catalog lacks the run's model or
/// GPU, or a prediction has no step time.
pub fn offload_report(
    catalog: &Catalog,
    k: &CostConstants,
    runs: &OffloadRuns,
) -> Option<OffloadReport> {
    let cards = catalog.cost();
    let replay = |cfg: &TrainingConfig| -> Option<(Estimate, Option<RunCondition>)> {
        let r = resolve(cards, cfg).ok()?;
        let estimate = evaluate(&r.arch, r.hardware, k, cfg);
        let condition = run_condition(cfg, r.arch.moe.is_some(), r.arch.has_mamba_layers());
        (estimate.performance.step_time_s > 0.0).then_some((estimate, condition))
    };
    let (base, condition) = replay(&runs.baseline.config)?;
    let base_step = base.performance.step_time_s;
    let base_gb = allocated_gb(&base);
    let measured_base = &runs.baseline.measured;
    let relative_error = |predicted: f64, measured: f64| {
        if measured > 0.0 {
            predicted / measured - 1.0
        } else {
            0.0
        }
    };
    let mut rows = Vec::new();
    for v in &runs.variants {
        let (estimate, _) = replay(&v.config)?;
        let predicted_step_s = estimate.performance.step_time_s;
        let predicted_allocated_gb = allocated_gb(&estimate);
        let measured_added_s = v.measured.step_time_s - measured_base.step_time_s;
        let predicted_added_s = predicted_step_s - base_step;
        let measured_freed_gb = measured_base.allocated_gb - v.measured.allocated_gb;
        let predicted_freed_gb = base_gb - predicted_allocated_gb;
        rows.push(OffloadRow {
            id: v.id.clone(),
            job: v.job.clone(),
            measured_step_s: v.measured.step_time_s,
            predicted_step_s,
            measured_added_s,
            predicted_added_s,
            added_error: relative_error(predicted_added_s, measured_added_s),
            measured_allocated_gb: v.measured.allocated_gb,
            predicted_allocated_gb,
            measured_freed_gb,
            predicted_freed_gb,
            freed_error: relative_error(predicted_freed_gb, measured_freed_gb),
        });
    }
    let added: Vec<f64> = rows.iter().map(|r| r.added_error).collect();
    Some(OffloadReport {
        source: runs.source.clone(),
        baseline_job: runs.baseline.job.clone(),
        baseline_measured_step_s: measured_base.step_time_s,
        baseline_predicted_step_s: base_step,
        baseline_measured_allocated_gb: measured_base.allocated_gb,
        baseline_predicted_allocated_gb: base_gb,
        condition,
        added_median_abs_error: abs_median(&added),
        rows,
    })
}

/// The report's section of `docs/validation.md`.
pub fn markdown(report: &OffloadReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## Held out: optimizer CPU offload against the same run without it\n\n\
         {} (`data/calibration/bridge-cpu-offload.yaml`): step time and allocated memory (decimal GB) of a run without offload and of variants that \
         change only the offload settings. The run without offload (job {}) measured {:.2} s and \
         {:.1} GB; predicted {:.2} s and {:.1} GB.{} The seconds a variant adds are the offload's \
         own cost: median absolute error **{:.1}%** over {} variants.\n",
        report.source,
        report.baseline_job,
        report.baseline_measured_step_s,
        report.baseline_measured_allocated_gb,
        report.baseline_predicted_step_s,
        report.baseline_predicted_allocated_gb,
        match report.condition {
            Some(c) => format!(
                " These are {}, which the model prices as balanced: that, not the offload, \
                 separates the baselines' step times.",
                c.words()
            ),
            None => String::new(),
        },
        report.added_median_abs_error * 100.0,
        report.rows.len(),
    );
    let _ = writeln!(
        out,
        "| variant | job | measured step s | predicted | measured added s | predicted | error | measured GB freed | predicted | error |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &report.rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:+.1}% | {:.1} | {:.1} | {:+.1}% |",
            row.id,
            row.job,
            row.measured_step_s,
            row.predicted_step_s,
            row.measured_added_s,
            row.predicted_added_s,
            row.added_error * 100.0,
            row.measured_freed_gb,
            row.predicted_freed_gb,
            row.freed_error * 100.0,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_measurements_replay_every_variant() {
        let runs = parse_offload_runs(BRIDGE_CPU_OFFLOAD).unwrap_or_else(|e| panic!("{e}"));
        let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
        let k = crate::tools::common::constants(catalog.cost()).unwrap_or_else(|e| panic!("{e}"));
        let report = offload_report(&catalog, k, &runs).unwrap_or_else(|| panic!("replays"));
        assert_eq!(report.rows.len(), runs.variants.len());
        for row in &report.rows {
            // Offload costs time, and the memory it frees is the optimizer state the model
            // moves to the host: the source's 3.8 GB per 25% of the fraction.
            assert!(row.predicted_added_s > 0.0, "{row:?}");
            assert!(row.freed_error.abs() < 0.05, "{row:?}");
        }
        // Overlapping the copies with the host step makes the step shorter, as measured.
        let step = |id: &str| {
            report
                .rows
                .iter()
                .find(|r| r.id == id)
                .map(|r| r.predicted_step_s)
                .unwrap_or_else(|| panic!("{id} replayed"))
        };
        assert!(step("optimizer-offload-100-overlap") < step("optimizer-offload-100"));
        assert_eq!(report.condition, Some(RunCondition::NaturalRouting));
    }

    #[test]
    fn a_setting_the_configuration_does_not_know_names_the_variant() {
        let bad = BRIDGE_CPU_OFFLOAD.replacen(
            "optimizer_offload_fraction: 0.25",
            "optimizer_offload_share: 0.25",
            1,
        );
        let err = parse_offload_runs(&bad)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("optimizer-offload-25"), "{err}");
    }

    #[test]
    fn a_field_the_schema_lacks_is_refused() {
        let bad =
            BRIDGE_CPU_OFFLOAD.replacen("\n    allocated_gb: 47.2", "\n    allocated_gib: 47.2", 1);
        assert!(parse_offload_runs(&bad).is_err());
    }
}
