//! Megatron-Bridge performance-table rows of models outside the calibration half, as held-out
//! checks, each row replayed with the settings its own release's code gave it: the dense
//! pre-training rows (Llama-3 8B/70B, Llama-3.1 405B at 8K, releases 25.09 to 26.06) and the
//! hybrid ones (Nemotron 3 Nano: Mamba-2, attention and MoE layers, 8K, releases 26.02.01 to
//! 26.08). Nothing is fitted on them and they stay out of the regime bands; an answer for a
//! model like theirs quotes what they reached beside its band (the bands' `dense_pretraining`
//! and `mamba_hybrid` conditions).

use serde::Serialize;

use crate::catalog::Catalog;
use crate::model::calibration::{
    abs_median, parse_perf_summary, parse_release_counting, parse_release_settings, replay,
    signed_median, ReplayReport, ReplayRow, RunSettings,
};
use crate::model::{CostConstants, Hardware};

use super::common::ToolError;

/// One held-out set of table rows: the rows, the settings each was measured with as its own
/// release configured them, and how the validation report introduces them.
pub struct TableRowSet {
    /// The rows' file under `data/calibration/`.
    pub rows_file: &'static str,
    pub rows: &'static str,
    /// The settings' file under `data/calibration/`.
    pub settings_file: &'static str,
    pub settings: &'static str,
    /// The section's heading in `docs/validation.md`.
    pub heading: &'static str,
    /// What the rows are, for the section's first sentence.
    pub description: &'static str,
    /// Why the set stays out of the bands and what quotes it.
    pub use_in_answers: &'static str,
}

/// Megatron-Bridge's Llama pre-training rows.
pub const DENSE: TableRowSet = TableRowSet {
    rows_file: "perf-summary-dense.psv",
    rows: include_str!("../../data/calibration/perf-summary-dense.psv"),
    settings_file: "perf-release-settings-dense.yaml",
    settings: include_str!("../../data/calibration/perf-release-settings-dense.yaml"),
    heading: "Megatron-Bridge dense pre-training rows",
    description: "Megatron-Bridge's Llama pre-training rows: Llama-3 8B and 70B, Llama-3.1 405B, \
                  8K tokens, releases 25.09 to 26.06, H100 to GB300, FP8 current scaling, MXFP8 \
                  and NVFP4",
    use_in_answers: "they stay out of the regime bands (every run behind the bands trains an MoE \
                     model), and an answer for a model without experts below 16K tokens quotes \
                     what they reached beside its band",
};

/// Megatron-Bridge's Nemotron 3 Nano pre-training rows.
pub const HYBRID: TableRowSet = TableRowSet {
    rows_file: "perf-summary-hybrid.psv",
    rows: include_str!("../../data/calibration/perf-summary-hybrid.psv"),
    settings_file: "perf-release-settings-hybrid.yaml",
    settings: include_str!("../../data/calibration/perf-release-settings-hybrid.yaml"),
    heading: "Megatron-Bridge hybrid Mamba-MoE pre-training rows",
    description: "Megatron-Bridge's Nemotron 3 Nano pre-training rows (23 Mamba-2, 23 MoE and 6 \
                  attention layers): 8K tokens, releases 26.02.01 to 26.08, H100 in FP8 current \
                  scaling and B200 to GB300 in MXFP8",
    use_in_answers: "they stay out of the regime bands (no run behind the bands has a Mamba-2 \
                     layer), and an answer for a model with Mamba-2 layers quotes what they \
                     reached beside its band",
};

/// The rows of one GPU and precision recipe, summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowGroup {
    pub hardware: String,
    pub precision: String,
    /// Counted rows (no newer release re-measured the same run).
    pub rows: usize,
    /// Median (predicted − measured) / measured, signed: which way the model errs there.
    pub median_signed_error: f64,
    pub median_abs_error: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableRowsReport {
    /// The replay: every row, the counted rows' median and p90, the verified subset's.
    pub replay: ReplayReport,
    /// By GPU and precision recipe, over the counted rows.
    pub groups: Vec<RowGroup>,
}

/// Parse the shipped rows of `set` and the settings behind them.
pub fn rows_and_settings(
    set: &TableRowSet,
) -> Result<(Vec<crate::model::calibration::PerfRow>, RunSettings), ToolError> {
    let infeasible = |e: crate::model::calibration::CalibrationError| {
        ToolError::Infeasible(format!("{}: {e}", set.rows_file))
    };
    let rows = parse_perf_summary(set.rows).map_err(infeasible)?;
    let known = RunSettings {
        release_rows: parse_release_settings(set.settings).map_err(infeasible)?,
        recipes: Vec::new(),
        counting: parse_release_counting(set.settings).map_err(infeasible)?,
    };
    Ok((rows, known))
}

/// Replay every row of `set` through the cost model with the catalog's model cards and the GPU
/// cards `hardware_of` gives (a cluster calibration replaces its GPU's, as in the calibration
/// half).
pub fn table_rows_report<'a>(
    set: &TableRowSet,
    catalog: &'a Catalog,
    k: &CostConstants,
    hardware_of: impl Fn(&str) -> Option<&'a Hardware>,
) -> Result<TableRowsReport, ToolError> {
    let cards = catalog.cost();
    let (rows, known) = rows_and_settings(set)?;
    let replay = replay(
        &rows,
        &known,
        &[],
        |id| cards.models.get(id),
        hardware_of,
        k,
    );
    let groups = groups_of(&replay.perf_rows);
    Ok(TableRowsReport { replay, groups })
}

/// The counted rows grouped by GPU and precision recipe, in the order they first appear.
fn groups_of(rows: &[ReplayRow]) -> Vec<RowGroup> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in rows.iter().filter(|r| !r.superseded) {
        let key = (
            r.config.hardware.clone().unwrap_or_default(),
            precision_name(r),
        );
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.into_iter()
        .map(|(hardware, precision)| {
            let mut errors: Vec<f64> = rows
                .iter()
                .filter(|r| !r.superseded)
                .filter(|r| r.config.hardware.as_deref() == Some(hardware.as_str()))
                .filter(|r| precision_name(r) == precision)
                .map(|r| r.tflops_error)
                .collect();
            RowGroup {
                rows: errors.len(),
                median_abs_error: abs_median(&errors),
                median_signed_error: signed_median(&mut errors),
                hardware,
                precision,
            }
        })
        .collect()
}

/// The recipe a row ran, by its configuration name (`fp8-tensorwise`, `mxfp8`, `nvfp4`).
fn precision_name(row: &ReplayRow) -> String {
    serde_json::to_value(row.config.precision())
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The check as a section of `docs/validation.md`.
pub fn markdown(set: &TableRowSet, report: &TableRowsReport) -> String {
    use std::fmt::Write;
    let r = &report.replay;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## Held out: {}\n\n\
         {} (`data/calibration/{}`), each replayed with the settings its own release's code gave \
         it (`data/calibration/{}`). Nothing is fitted on them; {}. Median absolute error \
         **{:.1}%**, 90th percentile {:.1}% over the {} rows no newer release re-measured ({} \
         rows in all); **{:.1}%** over the {} of them whose release configured exactly the \
         table's layout.\n",
        set.heading,
        set.description,
        set.rows_file,
        set.settings_file,
        set.use_in_answers,
        r.tflops_median_abs_error * 100.0,
        r.tflops_p90_abs_error * 100.0,
        r.counted_rows,
        r.perf_rows.len(),
        r.verified_tflops_median_abs_error * 100.0,
        r.verified_rows,
    );
    let _ = writeln!(
        out,
        "| GPU | precision | rows | median error (signed) | median absolute error |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|");
    for g in &report.groups {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:+.1}% | {:.1}% |",
            g.hardware.to_ascii_uppercase(),
            g.precision,
            g.rows,
            g.median_signed_error * 100.0,
            g.median_abs_error * 100.0
        );
    }
    out.push('\n');
    out.push_str(&crate::model::calibration::perf_rows_table(&r.perf_rows));
    if !r.skipped.is_empty() {
        let _ = writeln!(out, "\nSkipped: {}", r.skipped.join("; "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(set: &TableRowSet) -> TableRowsReport {
        let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
        let k = crate::tools::common::constants(catalog.cost()).unwrap_or_else(|e| panic!("{e}"));
        table_rows_report(set, &catalog, k, |id| catalog.cost().hardware.get(id))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn every_dense_row_replays_and_the_groups_hold_the_counted_ones() {
        let report = report(&DENSE);
        let r = &report.replay;
        assert_eq!(r.perf_rows.len(), 80);
        assert!(r.skipped.is_empty(), "{:?}", r.skipped);
        assert!(
            r.counted_rows < r.perf_rows.len(),
            "re-measured runs are superseded"
        );
        assert_eq!(
            report.groups.iter().map(|g| g.rows).sum::<usize>(),
            r.counted_rows
        );
        for row in &r.perf_rows {
            assert!(
                row.predicted_tflops > 0.0 && row.tflops_error.is_finite(),
                "{row:?}"
            );
        }
        // Seven GPU-and-recipe groups at least: H100 FP8, and FP8 / MXFP8 / NVFP4 on GB200 and GB300.
        assert!(report.groups.len() >= 7, "{:?}", report.groups);
        // Every row is a run that fitted. The memory model misses only NVFP4 runs whose weights
        // stay BF16 beside their NVFP4 copies (`fp4_param` off, releases before 26.04.01).
        for row in r.perf_rows.iter().filter(|row| !row.fits) {
            assert_eq!(
                row.config.precision(),
                crate::model::Precision::Nvfp4,
                "{}",
                row.label
            );
            assert_ne!(row.config.fp4_param_gather, Some(true), "{}", row.label);
        }
    }

    #[test]
    fn the_section_names_its_files_and_every_row() {
        for set in [&DENSE, &HYBRID] {
            let report = report(set);
            let text = markdown(set, &report);
            assert!(text.contains(&format!("data/calibration/{}", set.rows_file)));
            assert!(text.contains(&format!("data/calibration/{}", set.settings_file)));
            for row in &report.replay.perf_rows {
                assert!(text.contains(&row.label), "{}", row.label);
            }
        }
    }

    #[test]
    fn every_hybrid_row_replays_in_megatron_bridges_count() {
        let report = report(&HYBRID);
        let r = &report.replay;
        assert_eq!(r.perf_rows.len(), 20);
        assert!(r.skipped.is_empty(), "{:?}", r.skipped);
        assert_eq!(
            r.verified_rows, r.counted_rows,
            "every layout is its release's"
        );
        for row in &r.perf_rows {
            assert!(row.fits, "{}: the run ran", row.label);
            assert!(
                row.predicted_tflops > 0.0 && row.tflops_error.is_finite(),
                "{row:?}"
            );
        }
        // Four groups: H100 FP8 and MXFP8 on B200, B300, GB200 and GB300.
        assert!(report.groups.len() >= 4, "{:?}", report.groups);
    }
}
