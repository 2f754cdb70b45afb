//! Replays the calibration data: Megatron-Bridge throughput rows and the Qwen3.5-35B-A3B
//! memory stages. Asserts the accuracy targets.

mod model_support;

use model_support::{arch, constants, hw, HARDWARE_IDS, MODEL_IDS};
use moe_skills::model::calibration::{
    parse_memory_stages, parse_perf_recipes, parse_perf_summary, render_markdown, replay,
};
use moe_skills::model::{Architecture, Hardware};

fn report() -> moe_skills::model::calibration::ReplayReport {
    let archs: Vec<(String, Architecture)> = MODEL_IDS
        .iter()
        .map(|id| (id.to_string(), arch(id)))
        .collect();
    let hws: Vec<(String, Hardware)> = HARDWARE_IDS
        .iter()
        .map(|id| (id.to_string(), hw(id)))
        .collect();
    let rows = parse_perf_summary(include_str!("../data/calibration/perf-summary.psv")).unwrap();
    let stages = parse_memory_stages(include_str!(
        "../data/calibration/qwen35-35b-a3b-128k-stages.yaml"
    ))
    .unwrap();
    let recipes =
        parse_perf_recipes(include_str!("../data/calibration/perf-recipes.yaml")).unwrap();
    let k = constants();
    replay(
        &rows,
        &recipes,
        &stages,
        |id| archs.iter().find(|(i, _)| i == id).map(|(_, a)| a),
        |id| hws.iter().find(|(i, _)| i == id).map(|(_, h)| h),
        &k,
    )
}

#[test]
fn psv_rows_all_parse() {
    let rows = parse_perf_summary(include_str!("../data/calibration/perf-summary.psv")).unwrap();
    assert_eq!(rows.len(), 69);
    assert!(rows.iter().all(|r| r.model_tflops_per_gpu > 0.0));
}

#[test]
fn print_validation_table() {
    let r = report();
    println!("{}", render_markdown(&r));
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
}

/// The target is 10% median error. Replayed with the settings the measured runs really
/// used (Megatron-Bridge's performance recipes) and counting only the newest measurement of
/// each run, the current constants reach 15.8% (docs/validation.md). This guards against
/// regressions until the time model closes the gap; tighten it when it does.
#[test]
fn throughput_median_error_does_not_regress() {
    let r = report();
    assert!(
        r.tflops_median_abs_error <= 0.16,
        "median |error| {:.1}%",
        r.tflops_median_abs_error * 100.0
    );
    assert_eq!(r.counted_rows, 39);
}

/// Every table row is a run that fitted in memory: the memory model must say so for (almost)
/// all of them. 12 rows are still flagged (docs/validation.md lists them).
#[test]
fn measured_runs_mostly_fit_in_the_memory_model() {
    let r = report();
    let flagged = r
        .perf_rows
        .iter()
        .filter(|row| row.violations.iter().any(|v| v == "out_of_memory"))
        .count();
    assert!(
        flagged <= 12,
        "{flagged} measured runs predicted out of memory"
    );
}

#[test]
fn rows_take_settings_from_matching_recipes() {
    use moe_skills::model::calibration::{superseded_rows, SettingsSource};
    let rows = parse_perf_summary(include_str!("../data/calibration/perf-summary.psv")).unwrap();
    let recipes =
        parse_perf_recipes(include_str!("../data/calibration/perf-recipes.yaml")).unwrap();
    assert_eq!(recipes.len(), 134);
    let sources: Vec<SettingsSource> = rows.iter().map(|r| r.to_config_with(&recipes).1).collect();
    let exact = sources
        .iter()
        .filter(|s| matches!(s, SettingsSource::Recipe(_)))
        .count();
    assert!(exact >= 18, "{exact} rows matched a recipe exactly");
    // The newest DeepSeek-V3 GB300 row is its recipe, with that recipe's recompute and graphs.
    let (cfg, source) = rows[0].to_config_with(&recipes);
    assert_eq!(
        source,
        SettingsSource::Recipe("deepseek_v3_pretrain_256gpu_gb300_fp8mx_config".into())
    );
    assert_eq!(cfg.grad_reduce_in_fp32, Some(false));
    assert!(cfg.use_precision_aware_optimizer.unwrap_or(false));
    // Older releases of the same run are superseded, the newest is not.
    let superseded = superseded_rows(&rows);
    assert!(!superseded[0]);
    let older = rows
        .iter()
        .position(|r| r.release == "26.06.01" && r.model_label == rows[0].model_label)
        .unwrap();
    assert!(superseded[older]);
}

#[test]
fn seed_memory_stages_within_target() {
    let r = report();
    assert!(
        r.stage_memory_median_abs_error <= 0.10,
        "median memory |error| {:.1}%",
        r.stage_memory_median_abs_error * 100.0
    );
    assert!(
        r.stage_memory_max_abs_error <= 0.28,
        "max memory |error| {:.1}%",
        r.stage_memory_max_abs_error * 100.0
    );
    assert!(r.stage_tflops_median_abs_error <= 0.25);
}

/// The source's own arithmetic puts the baseline's last-stage logits alone at 32.55 GB, so its
/// 42.91 GB is the first stage's peak: compared there, the baseline is within 10%.
#[test]
fn seed_baseline_matches_on_the_reported_rank() {
    let r = report();
    let baseline = &r.memory_stages[0];
    assert!(baseline.label.starts_with("baseline"));
    assert!(
        baseline.memory_error.unwrap().abs() <= 0.10,
        "{:?}",
        baseline.memory_error
    );
}

/// The joint fit never leaves the cards' objective worse and keeps every constant inside its
/// physical bounds.
#[test]
fn fit_improves_or_keeps_the_objective_within_bounds() {
    use moe_skills::model::fit::fit;
    let archs: Vec<(String, Architecture)> = MODEL_IDS
        .iter()
        .map(|id| (id.to_string(), arch(id)))
        .collect();
    let hws: Vec<Hardware> = HARDWARE_IDS.iter().map(|id| hw(id)).collect();
    let rows = parse_perf_summary(include_str!("../data/calibration/perf-summary.psv")).unwrap();
    let recipes =
        parse_perf_recipes(include_str!("../data/calibration/perf-recipes.yaml")).unwrap();
    // A subset keeps the debug-build test quick; the fit itself is deterministic.
    let configured: Vec<_> = rows
        .into_iter()
        .step_by(3)
        .map(|r| {
            let (cfg, _) = r.to_config_with(&recipes);
            (r, cfg)
        })
        .collect();
    let report = fit(
        &configured,
        |id| archs.iter().find(|(i, _)| i == id).map(|(_, a)| a),
        &hws,
        &constants(),
    );
    let score = |median: f64, p90: f64| median + 0.05 * p90;
    assert!(
        score(report.median_abs_error_after, report.p90_abs_error_after)
            <= score(report.median_abs_error_before, report.p90_abs_error_before) + 1e-12
    );
    for k in &report.knobs {
        assert!(
            k.after >= k.lower - 1e-12 && k.after <= k.upper + 1e-12,
            "{k:?}"
        );
    }
}
