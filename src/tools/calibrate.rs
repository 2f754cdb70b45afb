//! `moe-skills calibrate`: replays the measured rows shipped with the binary
//! (`data/calibration/`) through the cost model with the catalog's cards.

use crate::catalog::Catalog;
use crate::model::calibration::{
    parse_memory_stages, parse_perf_summary, render_markdown, replay, ReplayReport,
};

use super::common::{constants, ToolError};

/// Megatron-Bridge performance rows (TFLOP/s per GPU with full layouts).
pub const PERF_SUMMARY: &str = include_str!("../../data/calibration/perf-summary.psv");
/// The long-context RL write-up's five measured stages (peak memory and TFLOP/s).
pub const MEMORY_STAGES: &str =
    include_str!("../../data/calibration/qwen35-35b-a3b-128k-stages.yaml");

/// Measured vs predicted for every calibration row, with the error summary.
pub fn calibrate(catalog: &Catalog) -> Result<ReplayReport, ToolError> {
    let cards = catalog.cost();
    let k = constants(cards)?;
    let rows =
        parse_perf_summary(PERF_SUMMARY).map_err(|e| ToolError::Infeasible(e.to_string()))?;
    let stages =
        parse_memory_stages(MEMORY_STAGES).map_err(|e| ToolError::Infeasible(e.to_string()))?;
    Ok(replay(
        &rows,
        &stages,
        |id| cards.models.get(id),
        |id| cards.hardware.get(id),
        k,
    ))
}

/// The report as the Markdown of `docs/validation.md`.
pub fn markdown(report: &ReplayReport) -> String {
    render_markdown(report)
}
