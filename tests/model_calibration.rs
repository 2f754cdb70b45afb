//! Replays the calibration data: Megatron-Bridge throughput rows and the Qwen3.5-35B-A3B
//! memory stages. Asserts the accuracy targets.

mod model_support;

use model_support::{arch, constants, hw, HARDWARE_IDS, MODEL_IDS};
use moe_skills::model::calibration::{
    parse_memory_stages, parse_perf_summary, render_markdown, replay,
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
    let k = constants();
    replay(
        &rows,
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

#[test]
fn throughput_median_error_within_ten_percent() {
    let r = report();
    assert!(
        r.tflops_median_abs_error <= 0.10,
        "median |error| {:.1}%",
        r.tflops_median_abs_error * 100.0
    );
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
        r.stage_memory_max_abs_error <= 0.30,
        "max memory |error| {:.1}%",
        r.stage_memory_max_abs_error * 100.0
    );
    assert!(r.stage_tflops_median_abs_error <= 0.25);
}
