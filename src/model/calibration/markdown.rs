//! The replay rendered as Markdown: the generated tail of `docs/validation.md`.

use super::*;

/// Render the replay as Markdown (the body of `docs/validation.md`).
pub fn render_markdown(report: &ReplayReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let pct = |x: f64| format!("{:+.1}%", x * 100.0);
    let _ = writeln!(out, "## Throughput: Megatron-Bridge performance rows\n");
    let _ = writeln!(
        out,
        "Model TFLOP/s per GPU (Megatron's count). Median absolute error **{:.1}%**, 90th percentile **{:.1}%** over the {} rows no newer release re-measured ({} rows in all; a superseded row is marked and not counted: the software changed between releases and the model predicts the current one). The error of a row whose release counted FLOPs otherwise (Megatron-Bridge before v0.5.0 counted GPT-OSS's quick-GELU experts as two matrices and its sliding-window layers as full attention: `flops_counters` in `data/calibration/perf-release-settings.yaml`) is taken against its figure in the model's count, given in the notes.\n",
        report.tflops_median_abs_error * 100.0,
        report.tflops_p90_abs_error * 100.0,
        report.counted_rows,
        report.perf_rows.len()
    );
    let _ = writeln!(
        out,
        "Over the {} of those rows whose settings are verified (the row's release configured \
         exactly its layout, or a recipe with exactly its layout exists; not `release's \
         layout`, `settings of` or `assumed`): median **{:.1}%**, 90th percentile **{:.1}%**. \
         The other {} rows are replayed at a layout inferred from their release's code or with \
         settings made for another run, so their error is partly that of the inference.\n",
        report.verified_rows,
        report.verified_tflops_median_abs_error * 100.0,
        report.verified_tflops_p90_abs_error * 100.0,
        report.counted_rows.saturating_sub(report.verified_rows)
    );
    let predicted_oom = report
        .perf_rows
        .iter()
        .filter(|r| r.violations.iter().any(|v| v == "out_of_memory"))
        .count();
    let _ = writeln!(
        out,
        "Settings the table does not give (recompute, CUDA graphs, dispatcher, overlaps, FP8 \
         attention, gradient dtype) come from the Megatron-Bridge code of the row's own release \
         (`release <tag> <config>`; `release's layout` when that release configured the row's \
         model, GPU and precision with another layout than the table's columns: the row is \
         replayed at the code's layout, given in the notes, because every row where the \
         measurements can tell the two apart matches the code: `OverlayScope` in \
         src/model/calibration.rs), else from today's performance \
         recipe with the row's layout (`recipe`), else from the recipe for the same model, GPU \
         and precision (`settings of`), else from common defaults (`assumed`). Every row is a \
         run that fitted, so each `out_of_memory` is a miss of the memory model: \
         **{predicted_oom}** of {} rows.\n",
        report.perf_rows.len()
    );
    out.push_str(&perf_rows_table(&report.perf_rows));
    let _ = writeln!(
        out,
        "\n## Memory and throughput: Qwen3.5-35B-A3B, 32×H100, 128K (five tuning stages)\n"
    );
    let _ = writeln!(
        out,
        "Peak memory median absolute error **{:.1}%** (max {:.1}%); TFLOP/s median absolute error **{:.1}%**.\n",
        report.stage_memory_median_abs_error * 100.0,
        report.stage_memory_max_abs_error * 100.0,
        report.stage_tflops_median_abs_error * 100.0
    );
    let _ = writeln!(
        out,
        "| stage | measured GB | predicted GB | error | measured TFLOP/s | predicted | error |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    for r in &report.memory_stages {
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.2} | {} | {:.1} | {:.1} | {} |",
            r.label,
            r.measured_peak_gb.unwrap_or(0.0),
            r.predicted_peak_gb.unwrap_or(0.0),
            pct(r.memory_error.unwrap_or(0.0)),
            r.measured_tflops,
            r.predicted_tflops,
            pct(r.tflops_error)
        );
    }
    if !report.skipped.is_empty() {
        let _ = writeln!(out, "\nSkipped: {}", report.skipped.join("; "));
    }
    out
}

/// The table of replayed performance rows: configuration, measured, predicted, error, where
/// the settings came from and what the replay noted.
pub fn perf_rows_table(rows: &[ReplayRow]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let pct = |x: f64| format!("{:+.1}%", x * 100.0);
    let _ = writeln!(
        out,
        "| configuration | measured | predicted | error | settings | notes |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---|---|");
    for r in rows {
        let mut notes: Vec<String> = r.violations.clone();
        if let Some(m) = r.measured_tflops_model_count {
            notes.insert(
                0,
                format!("{m:.0} in the model's FLOPs count (its release counted fewer)"),
            );
        }
        if let Some(SettingsSource::Release {
            layout_match: false,
            ..
        }) = &r.settings
        {
            notes.insert(0, format!("replayed at {}", layout_summary(&r.config)));
        }
        if r.superseded {
            notes.insert(0, "superseded".to_string());
        }
        let notes = notes.join(", ");
        let settings = r
            .settings
            .as_ref()
            .map(SettingsSource::label)
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {} | {} | {} |",
            r.label,
            r.measured_tflops,
            r.predicted_tflops,
            pct(r.tflops_error),
            settings,
            notes
        );
    }
    out
}
