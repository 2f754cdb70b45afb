//! `moe-skills calibrate`: replays the measured rows shipped with the binary
//! (`data/calibration/`) through the cost model with the catalog's cards, then checks the
//! model on the documented recipes it was not fitted on (held out).

use serde::Serialize;

use crate::catalog::{Catalog, Recipe};
use crate::model::calibration::{
    abs_median, parse_memory_stages, parse_perf_recipes, parse_perf_summary,
    parse_release_counting, parse_release_settings, render_markdown, replay, superseded_rows,
    MemoryView, ReplayReport, RunSettings,
};
use crate::model::fit::{fit, FitReport};
use crate::model::uncertainty::{
    dense_long_sequence, precision_class, Residual, RunCondition, UncertaintyTable,
};
use crate::model::{evaluate, CostConstants, Hardware};

use super::bridge_table_rows::{table_rows_report, TableRowsReport, DENSE, HYBRID};
use super::common::{constants, replay_with, resolve, ToolError};
use super::functional_tests::{
    functional_test_report, parse_functional_tests, FunctionalTestReport, MEGATRON_FUNCTIONAL_TESTS,
};
use super::gemm_kernel_check::{
    gemm_check_report, parse_gemm_cases, GemmCheckReport, PUBLISHED_GEMM_TIMINGS,
};
use super::long_sequence_runs::{
    long_sequence_report, parse_long_sequence_runs, LongSequenceReport, NEMO_LONG_SEQUENCE,
};
use super::moe_layer_perf::{
    moe_layer_perf_report, parse_moe_layer_perf, MoeLayerPerfReport, MEGATRON_MOE_LAYER_PERF,
};
use super::offload_runs::{offload_report, parse_offload_runs, OffloadReport, BRIDGE_CPU_OFFLOAD};
use super::verification_runs::{
    parse_verification_runs, verification_report, VerificationReport, BRIDGE_VERIFICATION_RUNS,
};

/// Megatron-Bridge performance rows (TFLOP/s per GPU with full layouts).
pub const PERF_SUMMARY: &str = include_str!("../../data/calibration/perf-summary.psv");
/// The settings of Megatron-Bridge's performance recipes behind those rows.
pub const PERF_RECIPES: &str = include_str!("../../data/calibration/perf-recipes.yaml");
/// The settings each row was measured with, as its own release configured them.
pub const PERF_RELEASE_SETTINGS: &str =
    include_str!("../../data/calibration/perf-release-settings.yaml");
/// The long-context RL write-up's five measured stages (peak memory and TFLOP/s).
pub const MEMORY_STAGES: &str =
    include_str!("../../data/calibration/qwen35-35b-a3b-128k-stages.yaml");

/// A documented recipe with measured TFLOP/s that the constants were not fitted on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldOutRow {
    pub recipe: String,
    pub source: String,
    pub measured_tflops: f64,
    pub approximate: bool,
    pub predicted_tflops: f64,
    pub tflops_error: f64,
    pub fits: bool,
    /// Regime keys of the run, for the error bands.
    #[serde(skip)]
    pub regime: Option<Residual>,
}

/// A long-context CP-scaling series a skill card documents (`cp_scaling_data` entries that name
/// their `recipes`), with the held-out error of each of its recipes in the series' order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesErrors {
    /// The skill whose card documents the series.
    pub skill: String,
    /// The series' name in the card (`series`, else `model` and `hardware`).
    pub series: String,
    /// `(recipe id, (predicted − measured) / measured)` for each recipe of the series that
    /// has a measured TFLOP/s.
    pub tflops_errors: Vec<(String, f64)>,
}

/// A documented recipe with a measured peak memory, compared in the view its source reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldOutMemoryRow {
    pub recipe: String,
    pub measured_gb: f64,
    pub approximate: bool,
    /// `reserved` (device memory used; the default for a documented peak) or `allocated`.
    pub view: MemoryView,
    pub predicted_gb: f64,
    pub error: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationReport {
    /// The cluster calibration the rows of its GPU were replayed with (`--calibration`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibrated_with: Option<String>,
    /// The calibration half: performance-table rows and the seed's memory stages.
    pub calibration: ReplayReport,
    /// Documented recipes from other sources (skill cards, long-context series).
    pub held_out: Vec<HeldOutRow>,
    pub held_out_tflops_median_abs_error: f64,
    /// The held-out recipes the skill cards' long-context CP-scaling series name, by series.
    pub long_context_series: Vec<SeriesErrors>,
    /// Median absolute TFLOP/s error over every recipe of those series (`None` without one).
    pub long_context_series_median_abs_error: Option<f64>,
    /// Documented recipes with a measured peak memory (the seed's stages are in
    /// `calibration.memory_stages`).
    pub held_out_memory: Vec<HeldOutMemoryRow>,
    /// Megatron-Bridge's model verification cards' measured runs.
    pub verification: VerificationReport,
    /// Megatron-LM's functional tests with experts: the last rank's memory and the step times
    /// their golden values keep.
    pub functional_tests: FunctionalTestReport,
    /// Megatron-LM's MoE layer performance test: one MoE layer's forward and backward on 8
    /// H100 GPUs against the time model's MoE block.
    pub moe_layer_perf: MoeLayerPerfReport,
    /// Published GEMM timings (torchao on B200, DeepGEMM on H800) against the prices the step
    /// pays for the same GEMMs.
    pub gemm_kernels: GemmCheckReport,
    /// NeMo's dense long-sequence series (4K to 1M tokens with CP), held out of the bands.
    pub long_sequence: LongSequenceReport,
    /// Megatron-Bridge's dense (Llama) pre-training rows at 8K, each with its release's
    /// settings; held out of the fit and the bands.
    pub dense_pretraining: TableRowsReport,
    /// Megatron-Bridge's hybrid (Nemotron 3 Nano: Mamba-2, attention and MoE layers)
    /// pre-training rows at 8K, each with its release's settings; held out of the fit and the
    /// bands.
    pub hybrid_pretraining: TableRowsReport,
    /// Megatron-Bridge's optimizer CPU-offload measurements: the seconds and memory each
    /// offload setting adds or frees against the same run without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadReport>,
}

/// The shipped settings sources: per-release settings of each row, then the current recipes.
pub fn run_settings() -> Result<RunSettings, ToolError> {
    Ok(RunSettings {
        release_rows: parse_release_settings(PERF_RELEASE_SETTINGS)
            .map_err(|e| ToolError::Infeasible(e.to_string()))?,
        recipes: parse_perf_recipes(PERF_RECIPES)
            .map_err(|e| ToolError::Infeasible(e.to_string()))?,
        counting: parse_release_counting(PERF_RELEASE_SETTINGS)
            .map_err(|e| ToolError::Infeasible(e.to_string()))?,
    })
}

/// Recipes whose numbers come from the performance table are the calibration rows again.
fn is_calibration_row(recipe: &Recipe) -> bool {
    recipe.source.contains("performance-summary") || recipe.source.contains("perf-summary")
}

/// The documented recipes that are neither calibration rows nor the RL stages (those are the
/// calibration half's memory stages).
fn held_out_recipes(catalog: &Catalog) -> impl Iterator<Item = &Recipe> {
    catalog
        .cost()
        .recipes
        .iter()
        .filter(|r| !is_calibration_row(r) && r.skill != "long-context-moe-rl")
}

/// A number a recipe's `measured` block gives.
fn measured_value(recipe: &Recipe, key: &str) -> Option<f64> {
    recipe
        .measured
        .as_ref()
        .and_then(|m| m.get(key))
        .and_then(serde_json::Value::as_f64)
}

/// Whether the recipe's source gives its numbers as approximate (`~`).
fn is_approximate(recipe: &Recipe) -> bool {
    recipe
        .measured
        .as_ref()
        .and_then(|m| m.get("approximate"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// Measured vs predicted for every calibration row and every held-out recipe.
pub fn calibrate(catalog: &Catalog) -> Result<CalibrationReport, ToolError> {
    let cards = catalog.cost();
    let k = constants(cards)?;
    let rows =
        parse_perf_summary(PERF_SUMMARY).map_err(|e| ToolError::Infeasible(e.to_string()))?;
    let stages =
        parse_memory_stages(MEMORY_STAGES).map_err(|e| ToolError::Infeasible(e.to_string()))?;
    let known = run_settings()?;
    // A cluster calibration (`--calibration`) replaces its GPU's card here as in every
    // answer. The replay shares one set of constants across GPUs, so a calibration that also
    // changes constants (host time, fragmentation) cannot be replayed for its GPU alone.
    let calibrated = cards.calibration.as_ref();
    if let Some(c) = calibrated.filter(|c| &c.constants != k) {
        return Err(ToolError::field(
            "calibration",
            format!(
                "{} changes host time or allocator fragmentation, which the replay cannot apply to one GPU's rows",
                c.describe()
            ),
            "replay with a calibration that changes only the GPU card (throughput and bandwidth factors, a measured attention table), or without --calibration",
        ));
    }
    let hardware_of = |id: &str| match calibrated {
        Some(c) if c.hardware.id == id => Some(&c.hardware),
        _ => cards.hardware.get(id),
    };
    let calibration = replay(
        &rows,
        &known,
        &stages,
        |id| cards.models.get(id),
        hardware_of,
        k,
    );
    let held_out = held_out_rows(catalog, k, hardware_of);
    let errors: Vec<f64> = held_out.iter().map(|r| r.tflops_error).collect();
    let long_context_series = series_errors(catalog, &held_out);
    let series_error_values: Vec<f64> = long_context_series
        .iter()
        .flat_map(|s| s.tflops_errors.iter().map(|(_, e)| *e))
        .collect();
    let runs = parse_verification_runs(BRIDGE_VERIFICATION_RUNS)?;
    let offload = parse_offload_runs(BRIDGE_CPU_OFFLOAD)?;
    let functional_tests = parse_functional_tests(MEGATRON_FUNCTIONAL_TESTS)?;
    let moe_layer_runs = parse_moe_layer_perf(MEGATRON_MOE_LAYER_PERF)?;
    let gemm_cases = parse_gemm_cases(PUBLISHED_GEMM_TIMINGS)?;
    let long_sequence = parse_long_sequence_runs(NEMO_LONG_SEQUENCE)?;
    Ok(CalibrationReport {
        calibrated_with: calibrated.map(|c| c.describe()),
        calibration,
        held_out_tflops_median_abs_error: abs_median(&errors),
        long_context_series_median_abs_error: (!series_error_values.is_empty())
            .then(|| abs_median(&series_error_values)),
        long_context_series,
        held_out,
        held_out_memory: held_out_memory_rows(catalog, k),
        verification: verification_report(catalog, k, &runs),
        functional_tests: functional_test_report(catalog, k, &functional_tests),
        moe_layer_perf: moe_layer_perf_report(catalog, k, &moe_layer_runs),
        gemm_kernels: gemm_check_report(catalog, k, &gemm_cases),
        long_sequence: long_sequence_report(catalog, k, &long_sequence),
        dense_pretraining: table_rows_report(&DENSE, catalog, k, hardware_of)?,
        hybrid_pretraining: table_rows_report(&HYBRID, catalog, k, hardware_of)?,
        offload: offload_report(catalog, k, &offload),
    })
}

/// The long-context series the skill cards document (`cp_scaling_data` entries with a `recipes`
/// list of recipe ids), each with the held-out errors of its recipes. A recipe the series names
/// that has no held-out row (no measured TFLOP/s, or a configuration that does not resolve) is
/// left out of its series.
fn series_errors(catalog: &Catalog, held_out: &[HeldOutRow]) -> Vec<SeriesErrors> {
    let mut series = Vec::new();
    for skill in catalog.skills() {
        let Some(card) = &skill.card else { continue };
        let Some(entries) = card.json.get("cp_scaling_data").and_then(|v| v.as_array()) else {
            continue;
        };
        for entry in entries {
            let Some(ids) = entry.get("recipes").and_then(|v| v.as_array()) else {
                continue;
            };
            let text = |key: &str| entry.get(key).and_then(|v| v.as_str());
            let name = text("series").map(str::to_string).unwrap_or_else(|| {
                [text("model"), text("hardware")]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" on ")
            });
            let tflops_errors = ids
                .iter()
                .filter_map(|id| id.as_str())
                .filter_map(|id| held_out.iter().find(|r| r.recipe == id))
                .map(|r| (r.recipe.clone(), r.tflops_error))
                .collect();
            series.push(SeriesErrors {
                skill: skill.name.clone(),
                series: name,
                tflops_errors,
            });
        }
    }
    series
}

/// The documented recipes with a measured peak memory (GB, decimal, as sources print it),
/// outside the seed's stages, against the view the recipe names (`memory_view`, reserved by
/// default) on the worst pipeline rank.
fn held_out_memory_rows(catalog: &Catalog, k: &CostConstants) -> Vec<HeldOutMemoryRow> {
    let cards = catalog.cost();
    let mut rows = Vec::new();
    for recipe in held_out_recipes(catalog) {
        let Some(measured_gb) = measured_value(recipe, "peak_memory_gb").filter(|gb| *gb > 0.0)
        else {
            continue;
        };
        let view = recipe
            .measured
            .as_ref()
            .and_then(|m| m.get("memory_view"))
            .and_then(|v| serde_json::from_value::<MemoryView>(v.clone()).ok())
            .unwrap_or_default();
        let Some((_, estimate)) = replay_with(cards, k, &recipe.config) else {
            continue;
        };
        let gib = match view {
            MemoryView::Reserved => estimate.memory.peak_gib,
            MemoryView::Allocated => estimate.memory.allocated_gib,
        };
        let predicted_gb = gib * 1.073_741_824;
        rows.push(HeldOutMemoryRow {
            recipe: recipe.id.clone(),
            measured_gb,
            approximate: is_approximate(recipe),
            view,
            predicted_gb,
            error: predicted_gb / measured_gb - 1.0,
        });
    }
    rows
}

/// The documented recipes with a measured TFLOP/s that are not calibration rows, evaluated
/// with the given constants and hardware cards.
fn held_out_rows<'a>(
    catalog: &'a Catalog,
    k: &CostConstants,
    hw_of: impl Fn(&str) -> Option<&'a Hardware>,
) -> Vec<HeldOutRow> {
    let cards = catalog.cost();
    let mut held_out = Vec::new();
    for recipe in held_out_recipes(catalog) {
        let Some(measured) = measured_value(recipe, "model_tflops_per_gpu") else {
            continue;
        };
        let Ok(r) = resolve(cards, &recipe.config) else {
            continue;
        };
        let Some(hardware) = hw_of(&r.hardware.id) else {
            continue;
        };
        let estimate = evaluate(&r.arch, hardware, k, &recipe.config);
        let predicted = estimate.performance.model_tflops_per_gpu;
        held_out.push(HeldOutRow {
            recipe: recipe.id.clone(),
            source: recipe.source.clone(),
            measured_tflops: measured,
            approximate: is_approximate(recipe),
            predicted_tflops: predicted,
            tflops_error: (predicted - measured) / measured,
            fits: estimate.fits,
            regime: Some(Residual {
                gpu: hardware.id.clone(),
                generation: hardware.generation.clone(),
                precision: precision_class(recipe.config.precision()).to_string(),
                seq: estimate.layout.seq_length,
                num_gpus: estimate.layout.num_gpus,
                nvlink_domain: hardware.nvlink_domain_size,
                error: (predicted - measured) / measured,
                step_time_s: estimate.performance.step_time_s,
            }),
        });
    }
    held_out
}

/// A re-fit of the time model's constants on the calibration rows, with the held-out error
/// before and after: evidence for a change to the cards, never applied automatically.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitOutcome {
    pub fit: FitReport,
    pub held_out_median_abs_error_before: f64,
    pub held_out_median_abs_error_after: f64,
}

pub fn fit_constants(catalog: &Catalog) -> Result<FitOutcome, ToolError> {
    let cards = catalog.cost();
    let k = constants(cards)?;
    let rows =
        parse_perf_summary(PERF_SUMMARY).map_err(|e| ToolError::Infeasible(e.to_string()))?;
    let known = run_settings()?;
    let superseded = superseded_rows(&rows, &known);
    let configured: Vec<_> = rows
        .into_iter()
        .zip(superseded)
        .filter(|(_, superseded)| !superseded)
        .map(|(mut r, _)| {
            let (cfg, _) = r.to_config_with(&known);
            // The fit compares in the model's FLOPs count, as the replay does.
            if let Some(arch) = cards.models.get(&r.model_id) {
                r.model_tflops_per_gpu *= known.model_count_factor(&r, arch, &cfg);
            }
            (r, cfg)
        })
        .collect();
    let mut hardware: Vec<Hardware> = cards.hardware.values().cloned().collect();
    hardware.sort_by(|a, b| a.id.cmp(&b.id));
    let fit = fit(&configured, |id| cards.models.get(id), &hardware, k);
    let before: Vec<f64> = held_out_rows(catalog, k, |id| cards.hardware.get(id))
        .iter()
        .map(|r| r.tflops_error)
        .collect();
    let after: Vec<f64> = held_out_rows(catalog, &fit.constants, |id| {
        fit.hardware.iter().find(|h| h.id == id)
    })
    .iter()
    .map(|r| r.tflops_error)
    .collect();
    Ok(FitOutcome {
        held_out_median_abs_error_before: abs_median(&before),
        held_out_median_abs_error_after: abs_median(&after),
        fit,
    })
}

/// The fit as a readable table.
pub fn fit_text(outcome: &FitOutcome) -> String {
    use std::fmt::Write;
    let f = &outcome.fit;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Joint fit over {} calibration rows (objective: median |error| + 0.05 x p90 |error|).",
        f.rows
    );
    let _ = writeln!(
        out,
        "calibration rows: median {:.1}% -> {:.1}%, p90 {:.1}% -> {:.1}%",
        f.median_abs_error_before * 100.0,
        f.median_abs_error_after * 100.0,
        f.p90_abs_error_before * 100.0,
        f.p90_abs_error_after * 100.0
    );
    let _ = writeln!(
        out,
        "leave-one-model-family-out: median {:.1}%, p90 {:.1}% over the rows of each family \
         predicted by a fit without that family",
        f.cv_median_abs_error * 100.0,
        f.cv_p90_abs_error * 100.0
    );
    for c in &f.cross_validation {
        let _ = write!(
            out,
            "  {:<24} {:>3} rows: median {:.1}%, p90 {:.1}%",
            c.family,
            c.rows,
            c.median_abs_error * 100.0,
            c.p90_abs_error * 100.0
        );
        if !c.knobs_fitted_on_this_family.is_empty() {
            let (them, they_keep) = if c.knobs_fitted_on_this_family.len() == 1 {
                ("it", "it keeps the cards' value")
            } else {
                ("them", "they keep the cards' values")
            };
            let _ = write!(
                out,
                " (in-sample for {}: no other family's rows constrain {them}, so {they_keep}, \
                 fitted with this family)",
                c.knobs_fitted_on_this_family.join(", ")
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "held-out recipes:  median {:.1}% -> {:.1}% (never fitted on)\n",
        outcome.held_out_median_abs_error_before * 100.0,
        outcome.held_out_median_abs_error_after * 100.0
    );
    let _ = writeln!(
        out,
        "{:<48} {:>10} {:>10}   bounds",
        "constant", "card", "fitted"
    );
    for k in &f.knobs {
        let _ = writeln!(
            out,
            "{:<48} {:>10.4} {:>10.4}   [{}, {}]",
            k.knob, k.before, k.after, k.lower, k.upper
        );
    }
    let _ = writeln!(
        out,
        "\nThe cards are not changed: copy the values you accept into cards/cost-model.yaml and\n\
         cards/hardware/*.yaml, then refresh docs/validation.md."
    );
    out
}

/// The report as the Markdown body of `docs/validation.md`.
pub fn markdown(report: &CalibrationReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if let Some(calibration) = &report.calibrated_with {
        let _ = writeln!(
            out,
            "**Replayed with a cluster calibration**: {calibration}; its GPU's rows are priced \
             with it, every other row with the cards.\n"
        );
    }
    out.push_str(&render_markdown(&report.calibration));
    if let Some(median) = report.long_context_series_median_abs_error {
        let count: usize = report
            .long_context_series
            .iter()
            .map(|s| s.tflops_errors.len())
            .sum();
        let _ = writeln!(
            out,
            "\n## Held out: long-context CP-scaling series\n\n\
             The recipes the skill cards' `cp_scaling_data` series name, in the series' order \
             (each is also in the next table). Median absolute error **{:.1}%** over {count} \
             recipes.\n",
            median * 100.0
        );
        let _ = writeln!(
            out,
            "| series | skill | errors (predicted − measured) / measured |"
        );
        let _ = writeln!(out, "|---|---|---|");
        for series in &report.long_context_series {
            let errors: Vec<String> = series
                .tflops_errors
                .iter()
                .map(|(recipe, e)| format!("{recipe} {:+.1}%", e * 100.0))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                series.series,
                series.skill,
                errors.join(", ")
            );
        }
    }
    let _ = writeln!(
        out,
        "\n## Held out: documented recipes the constants were not fitted on\n"
    );
    let _ = writeln!(
        out,
        "Recipes from the skill cards whose numbers come from other sources (long-context CP \
         scaling series, hardware best configurations, overlap A/B runs). `~` marks values the \
         source gives as approximate. Median absolute error **{:.1}%** over {} recipes.\n",
        report.held_out_tflops_median_abs_error * 100.0,
        report.held_out.len()
    );
    let _ = writeln!(
        out,
        "| recipe | measured TFLOP/s | predicted | error | fits in the model |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---|");
    for row in &report.held_out {
        let _ = writeln!(
            out,
            "| {} | {}{:.0} | {:.0} | {:+.1}% | {} |",
            row.recipe,
            if row.approximate { "~" } else { "" },
            row.measured_tflops,
            row.predicted_tflops,
            row.tflops_error * 100.0,
            if row.fits { "yes" } else { "no" }
        );
    }
    if !report.held_out_memory.is_empty() {
        let errors: Vec<f64> = report.held_out_memory.iter().map(|r| r.error).collect();
        let _ = writeln!(
            out,
            "\n## Held out: measured peak memory of documented recipes\n\n\
             Every other measured-memory row the project has, against the view its source \
             reports (`reserved`: device memory used, as nvidia-smi shows; `allocated`: \
             PyTorch's `max allocated`), worst pipeline rank, GB. Median absolute error \
             **{:.1}%** over {} recipes.\n",
            abs_median(&errors) * 100.0,
            errors.len()
        );
        let _ = writeln!(
            out,
            "| recipe | view | measured GB | predicted GB | error |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|");
        for row in &report.held_out_memory {
            let view = match row.view {
                MemoryView::Reserved => "reserved",
                MemoryView::Allocated => "allocated",
            };
            let _ = writeln!(
                out,
                "| {} | {view} | {}{:.1} | {:.1} | {:+.1}% |",
                row.recipe,
                if row.approximate { "~" } else { "" },
                row.measured_gb,
                row.predicted_gb,
                row.error * 100.0
            );
        }
    }
    out.push_str(&super::verification_runs::markdown(&report.verification));
    out.push_str(&super::functional_tests::markdown(&report.functional_tests));
    out.push_str(&super::moe_layer_perf::markdown(&report.moe_layer_perf));
    out.push_str(&super::gemm_kernel_check::markdown(&report.gemm_kernels));
    out.push_str(&super::long_sequence_runs::markdown(&report.long_sequence));
    out.push_str(&super::bridge_table_rows::markdown(
        &DENSE,
        &report.dense_pretraining,
    ));
    out.push_str(&super::bridge_table_rows::markdown(
        &HYBRID,
        &report.hybrid_pretraining,
    ));
    if let Some(offload) = &report.offload {
        out.push_str(&super::offload_runs::markdown(offload));
    }
    out
}

/// The error bands by regime from every measured run the report replays (counted table rows,
/// the seed's stages, the held-out recipes): the body of `cards/time-uncertainty.yaml`.
pub fn bands(catalog: &Catalog, report: &CalibrationReport) -> UncertaintyTable {
    let cards = catalog.cost();
    let cal = &report.calibration;
    let mut residuals = Vec::new();
    for row in cal.perf_rows.iter().chain(cal.memory_stages.iter()) {
        if row.superseded || !row.tflops_error.is_finite() || row.measured_tflops <= 0.0 {
            continue;
        }
        let cfg = &row.config;
        let Some(hw) = cfg.hardware.as_ref().and_then(|id| cards.hardware.get(id)) else {
            continue;
        };
        residuals.push(Residual {
            gpu: hw.id.clone(),
            generation: hw.generation.clone(),
            precision: precision_class(cfg.precision()).to_string(),
            seq: cfg.seq_length.unwrap_or(4096),
            num_gpus: cfg.num_gpus.unwrap_or(1),
            nvlink_domain: hw.nvlink_domain_size,
            error: row.tflops_error,
            step_time_s: row.predicted_step_time_s,
        });
    }
    residuals.extend(report.held_out.iter().filter_map(|r| r.regime.clone()));
    let mut conditions: Vec<_> = report
        .verification
        .rows
        .iter()
        .filter_map(|r| r.condition.map(|c| (c, r.tflops_error)))
        .collect();
    // Models without experts past the shortest sequence band: NeMo's long-sequence series,
    // kept out of the regime bands.
    conditions.extend(report.long_sequence.series.iter().flat_map(|s| {
        s.rows
            .iter()
            .filter(|r| dense_long_sequence(r.seq_length))
            .map(|r| (RunCondition::DenseLongSequence, r.tflops_error))
    }));
    // Models without experts below that band (Megatron-Bridge's Llama pre-training rows) and
    // models with Mamba-2 layers (its Nemotron 3 Nano rows): the newest measurement of each run.
    for (rows, condition) in [
        (&report.dense_pretraining, RunCondition::DensePretraining),
        (&report.hybrid_pretraining, RunCondition::MambaHybrid),
    ] {
        conditions.extend(
            rows.replay
                .perf_rows
                .iter()
                .filter(|r| !r.superseded && r.tflops_error.is_finite())
                .map(|r| (condition, r.tflops_error)),
        );
    }
    UncertaintyTable::from_residuals(
        &format!(
            "generated by `moe-skills calibrate --bands` from {} measured runs: the counted \
             Megatron-Bridge rows, the seed's five 128K stages and the held-out recipes \
             (data/calibration/, skill-card recipes); errors are (predicted - measured) / measured \
             of model TFLOP/s per GPU with the cards of this commit; typical_abs_error, what a \
             prediction quotes as typical, is the 80% upper confidence bound of the regime's \
             median |error| (an order statistic of its runs), p90_abs_error the runs' 90th \
             percentile, measured_ratio_low/high the 5th and 95th percentiles of measured / \
             predicted (the range an answer quotes); conditions: what the runs under each condition \
             the bands' runs do not share ({} runs: Megatron-Bridge's verification runs with the \
             router's own routing or PEFT, NeMo's long-sequence runs of models without experts at 16K tokens or more, \
             Megatron-Bridge's Llama pre-training rows below it) \
             reached, as measured / predicted throughput (median, 10th and 90th percentiles); moe_block: what \
             Megatron-LM's MoE layer test took against `performance.moe_block` ({} layers), as \
             measured / predicted time by GPU and precision class",
            residuals.len(),
            conditions.len(),
            report.moe_layer_perf.rows.len()
        ),
        &residuals,
    )
    .with_conditions(&conditions)
    .with_moe_block(
        "Megatron-LM's MoE layer test",
        &report
            .moe_layer_perf
            .rows
            .iter()
            .map(|r| (r.hardware.clone(), r.precision_class.clone(), r.error))
            .collect::<Vec<_>>(),
    )
}
