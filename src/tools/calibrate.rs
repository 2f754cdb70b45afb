//! `moe-skills calibrate`: replays the measured rows shipped with the binary
//! (`data/calibration/`) through the cost model with the catalog's cards, then checks the
//! model on the documented recipes it was not fitted on (held out).

use serde::Serialize;

use crate::catalog::{Catalog, Recipe};
use crate::model::calibration::{
    abs_median, parse_memory_stages, parse_perf_summary, render_markdown, replay, ReplayReport,
};
use crate::model::evaluate;

use super::common::{constants, resolve, ToolError};

/// Megatron-Bridge performance rows (TFLOP/s per GPU with full layouts).
pub const PERF_SUMMARY: &str = include_str!("../../data/calibration/perf-summary.psv");
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
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationReport {
    /// The calibration half: performance-table rows and the seed's memory stages.
    pub calibration: ReplayReport,
    /// Documented recipes from other sources (skill cards, long-context series).
    pub held_out: Vec<HeldOutRow>,
    pub held_out_tflops_median_abs_error: f64,
}

/// Recipes whose numbers come from the performance table are the calibration rows again.
fn is_calibration_row(recipe: &Recipe) -> bool {
    recipe.source.contains("performance-summary") || recipe.source.contains("perf-summary")
}

/// Measured vs predicted for every calibration row and every held-out recipe.
pub fn calibrate(catalog: &Catalog) -> Result<CalibrationReport, ToolError> {
    let cards = catalog.cost();
    let k = constants(cards)?;
    let rows =
        parse_perf_summary(PERF_SUMMARY).map_err(|e| ToolError::Infeasible(e.to_string()))?;
    let stages =
        parse_memory_stages(MEMORY_STAGES).map_err(|e| ToolError::Infeasible(e.to_string()))?;
    let calibration = replay(
        &rows,
        &stages,
        |id| cards.models.get(id),
        |id| cards.hardware.get(id),
        k,
    );
    let mut held_out = Vec::new();
    for recipe in cards.recipes.iter().filter(|r| !is_calibration_row(r)) {
        // The RL stages are already in the calibration half (memory stages).
        if recipe.skill == "long-context-moe-rl" {
            continue;
        }
        let Some(measured) = recipe
            .measured
            .as_ref()
            .and_then(|m| m.get("model_tflops_per_gpu"))
            .and_then(serde_json::Value::as_f64)
        else {
            continue;
        };
        let Ok(r) = resolve(cards, &recipe.config) else {
            continue;
        };
        let estimate = evaluate(&r.arch, r.hardware, r.constants, &recipe.config);
        let predicted = estimate.performance.model_tflops_per_gpu;
        held_out.push(HeldOutRow {
            recipe: recipe.id.clone(),
            source: recipe.source.clone(),
            measured_tflops: measured,
            approximate: recipe
                .measured
                .as_ref()
                .and_then(|m| m.get("approximate"))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            predicted_tflops: predicted,
            tflops_error: (predicted - measured) / measured,
            fits: estimate.fits,
        });
    }
    let errors: Vec<f64> = held_out.iter().map(|r| r.tflops_error).collect();
    Ok(CalibrationReport {
        calibration,
        held_out_tflops_median_abs_error: abs_median(&errors),
        held_out,
    })
}

/// The report as the Markdown body of `docs/validation.md`.
pub fn markdown(report: &CalibrationReport) -> String {
    use std::fmt::Write;
    let mut out = render_markdown(&report.calibration);
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
    out
}
