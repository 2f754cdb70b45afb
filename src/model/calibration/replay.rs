//! Replaying the measured rows and stages through the cost model: measured against predicted,
//! and the error statistics every report quotes.

use super::*;

/// Measured vs predicted for one replayed configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayRow {
    pub label: String,
    /// As published.
    pub measured_tflops: f64,
    /// The published figure in the model's FLOPs count, where the row's release counted
    /// otherwise (`RunSettings::model_count_factor`); the error is against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_tflops_model_count: Option<f64>,
    pub predicted_tflops: f64,
    /// (predicted − measured) / measured.
    pub tflops_error: f64,
    pub measured_peak_gb: Option<f64>,
    pub predicted_peak_gb: Option<f64>,
    pub memory_error: Option<f64>,
    pub fits: bool,
    pub violations: Vec<String>,
    /// Where the settings the table does not give came from (performance rows only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<SettingsSource>,
    /// A newer release measured the same run; this row is shown but not counted.
    #[serde(default)]
    pub superseded: bool,
    /// Predicted step time and where it goes, seconds (to see which term an error sits in).
    pub predicted_step_time_s: f64,
    pub predicted_breakdown_s: TimeBreakdown,
    /// The configuration replayed; `moe-skills check --config` on it reproduces the row.
    pub config: TrainingConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    pub perf_rows: Vec<ReplayRow>,
    pub memory_stages: Vec<ReplayRow>,
    /// Over the rows no newer release re-measured.
    pub tflops_median_abs_error: f64,
    pub tflops_p90_abs_error: f64,
    pub counted_rows: usize,
    /// The same over the counted rows whose settings are verified
    /// (`SettingsSource::is_verified`).
    pub verified_tflops_median_abs_error: f64,
    pub verified_tflops_p90_abs_error: f64,
    pub verified_rows: usize,
    pub stage_tflops_median_abs_error: f64,
    pub stage_memory_median_abs_error: f64,
    pub stage_memory_max_abs_error: f64,
    pub skipped: Vec<String>,
}

/// The finite absolute values of `values`, ascending.
pub fn sorted_abs(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values
        .iter()
        .map(|x| x.abs())
        .filter(|x| x.is_finite())
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Percentile (0..=1) of absolute values, nearest-rank.
pub fn abs_percentile(values: &[f64], p: f64) -> f64 {
    let v = sorted_abs(values);
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Median of absolute values (mean of the two middle values for even counts).
pub fn abs_median(values: &[f64]) -> f64 {
    signed_median(&mut sorted_abs(values))
}

/// Evaluate every row and stage. `arch_of` and `hw_of` resolve card ids.
pub fn replay<'a>(
    rows: &[PerfRow],
    known: &RunSettings,
    stages: &[(MemoryStage, TrainingConfig)],
    arch_of: impl Fn(&str) -> Option<&'a Architecture>,
    hw_of: impl Fn(&str) -> Option<&'a Hardware>,
    k: &CostConstants,
) -> ReplayReport {
    let mut skipped = Vec::new();
    let mut perf_rows = Vec::new();
    let superseded = superseded_rows(rows, known);
    for (row, &superseded) in rows.iter().zip(&superseded) {
        let (Some(a), Some(h)) = (arch_of(&row.model_id), hw_of(&row.hardware)) else {
            skipped.push(format!("{}: unknown model or hardware card", row.label()));
            continue;
        };
        let (cfg, settings) = row.to_config_with(known);
        let est = evaluate(a, h, k, &cfg);
        let factor = known.model_count_factor(row, a, &cfg);
        let measured = row.model_tflops_per_gpu * factor;
        perf_rows.push(ReplayRow {
            label: row.label(),
            measured_tflops: row.model_tflops_per_gpu,
            measured_tflops_model_count: ((factor - 1.0).abs() > 1e-9).then_some(measured),
            predicted_tflops: est.performance.model_tflops_per_gpu,
            tflops_error: est.performance.model_tflops_per_gpu / measured - 1.0,
            measured_peak_gb: None,
            predicted_peak_gb: Some(est.memory.peak_gib * 1.073_741_824),
            memory_error: None,
            fits: est.fits,
            violations: est.violations.iter().map(|v| v.code.clone()).collect(),
            settings: Some(settings),
            superseded,
            predicted_step_time_s: est.performance.step_time_s,
            predicted_breakdown_s: est.performance.breakdown_s.clone(),
            config: cfg,
        });
    }
    let mut memory_stages = Vec::new();
    for (stage, cfg) in stages {
        let model = match &cfg.model {
            Some(crate::model::ModelSpec::Id(id)) => id.as_str(),
            _ => "",
        };
        let (Some(a), Some(h)) = (arch_of(model), hw_of(cfg.hardware.as_deref().unwrap_or("")))
        else {
            skipped.push(format!(
                "stage {}: unknown model or hardware card",
                stage.id
            ));
            continue;
        };
        let est = evaluate(a, h, k, cfg);
        let (per_rank, worst) = match stage.measured.memory_view {
            MemoryView::Reserved => (&est.memory.per_rank_peak_gib, est.memory.peak_gib),
            MemoryView::Allocated => (&est.memory.per_rank_allocated_gib, est.memory.allocated_gib),
        };
        let reported_gib = stage
            .measured
            .reported_pipeline_rank
            .and_then(|rank| per_rank.get(rank as usize).copied())
            .unwrap_or(worst);
        let predicted_gb = reported_gib * 1.073_741_824;
        let label = match stage.measured.reported_pipeline_rank {
            Some(rank) => format!(
                "{}: {} (pipeline rank {rank} as reported)",
                stage.id, stage.title
            ),
            None => format!("{}: {}", stage.id, stage.title),
        };
        memory_stages.push(ReplayRow {
            label,
            measured_tflops: stage.measured.model_tflops_per_gpu,
            measured_tflops_model_count: None,
            predicted_tflops: est.performance.model_tflops_per_gpu,
            tflops_error: est.performance.model_tflops_per_gpu
                / stage.measured.model_tflops_per_gpu
                - 1.0,
            measured_peak_gb: Some(stage.measured.peak_memory_gb),
            predicted_peak_gb: Some(predicted_gb),
            memory_error: Some(predicted_gb / stage.measured.peak_memory_gb - 1.0),
            fits: est.fits,
            violations: est.violations.iter().map(|v| v.code.clone()).collect(),
            settings: None,
            superseded: false,
            predicted_step_time_s: est.performance.step_time_s,
            predicted_breakdown_s: est.performance.breakdown_s.clone(),
            config: cfg.clone(),
        });
    }
    let perf_errors: Vec<f64> = perf_rows
        .iter()
        .filter(|r| !r.superseded)
        .map(|r| r.tflops_error)
        .collect();
    let verified_errors: Vec<f64> = perf_rows
        .iter()
        .filter(|r| !r.superseded)
        .filter(|r| r.settings.as_ref().is_some_and(SettingsSource::is_verified))
        .map(|r| r.tflops_error)
        .collect();
    let stage_tflops: Vec<f64> = memory_stages.iter().map(|r| r.tflops_error).collect();
    let stage_mem: Vec<f64> = memory_stages
        .iter()
        .filter_map(|r| r.memory_error)
        .collect();
    ReplayReport {
        tflops_median_abs_error: abs_median(&perf_errors),
        tflops_p90_abs_error: abs_percentile(&perf_errors, 0.9),
        counted_rows: perf_errors.len(),
        verified_tflops_median_abs_error: abs_median(&verified_errors),
        verified_tflops_p90_abs_error: abs_percentile(&verified_errors, 0.9),
        verified_rows: verified_errors.len(),
        stage_tflops_median_abs_error: abs_median(&stage_tflops),
        stage_memory_median_abs_error: abs_median(&stage_mem),
        stage_memory_max_abs_error: abs_percentile(&stage_mem, 1.0),
        perf_rows,
        memory_stages,
        skipped,
    }
}

/// Median of the values as they are (signed); 0 for none. Sorts them in place.
pub fn signed_median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}
