//! The SVG charts against the JSON they draw: one bar per pipeline rank whose segments add up
//! to `per_rank_peak_gib`, a step-time bar that adds up to `step_time_s`, triage waterfalls
//! whose steps add up to after − before; human labels with units; the CLI's --svg and --html.

mod svg_support;

use std::collections::BTreeMap;

use moe_skills::catalog::Catalog;
use moe_skills::charts::{self, page};
use moe_skills::model::TrainingConfig;
use moe_skills::tools::{feasibility, plan, triage};
use serde_json::json;
use svg_support::{elements, texts, with_role};

fn catalog() -> Catalog {
    Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new())
}

/// Qwen3-235B at 128K on 256 H100, PP 8 with VPP 4 (the README's check example).
fn qwen3_235b_128k() -> TrainingConfig {
    serde_json::from_value(json!({
        "model": "qwen3-235b-a22b", "hardware": "h100", "num_gpus": 256, "seq_length": 131072,
        "tp": 4, "cp": 8, "pp": 8, "vpp": 4, "ep": 8, "sequence_parallel": true,
        "global_batch_size": 32, "recompute_granularity": "selective",
        "recompute_modules": ["layernorm", "moe"]
    }))
    .expect("valid configuration")
}

fn chart<'a>(charts: &'a [charts::Chart], name: &str) -> &'a charts::Chart {
    charts
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} chart"))
}

#[test]
fn memory_bars_are_one_per_pipeline_rank_and_add_up_to_each_ranks_peak() {
    let config = qwen3_235b_128k();
    let out = feasibility::check_feasibility(&catalog(), config.clone()).expect("check");
    let charts = charts::for_check(&config, &out);
    let svg = &chart(&charts, "memory").svg;
    let mut per_rank: BTreeMap<u32, (f64, Vec<String>)> = BTreeMap::new();
    for segment in with_role(svg, "segment") {
        let rank = segment.number("data-rank") as u32;
        let entry = per_rank.entry(rank).or_default();
        entry.0 += segment.number("data-gib");
        entry
            .1
            .push(segment.get("data-term").unwrap_or_default().to_string());
    }
    let peaks = &out.estimate.memory.per_rank_peak_gib;
    assert_eq!(peaks.len(), 8, "PP 8");
    assert_eq!(per_rank.len(), peaks.len(), "one bar per pipeline rank");
    for (rank, (total, _)) in &per_rank {
        let expected = peaks[*rank as usize];
        assert!(
            (total - expected).abs() < 0.01,
            "rank {rank}: segments {total:.3} GiB, per_rank_peak_gib {expected:.3}"
        );
    }
    // The worst rank is itemised term by term, in the JSON's field names.
    let worst = out.estimate.memory.worst_rank.pipeline_rank;
    let terms = &per_rank[&worst].1;
    let b = &out.estimate.memory.breakdown_gib;
    for (term, value) in [
        ("weights", b.weights),
        ("gradients", b.gradients),
        ("optimizer", b.optimizer),
        ("activations", b.activations),
        ("fixed_reserve", b.fixed_reserve),
    ] {
        assert!(
            value > 0.0 && terms.iter().any(|t| t == term),
            "{term} missing: {terms:?}"
        );
    }
}

#[test]
fn memory_chart_is_labelled_for_people() {
    let config = qwen3_235b_128k();
    let out = feasibility::check_feasibility(&catalog(), config.clone()).expect("check");
    let charts = charts::for_check(&config, &out);
    let svg = &chart(&charts, "memory").svg;
    let labels = texts(svg).join("\n");
    for wanted in [
        "memory per GPU (GiB)",
        "pipeline rank",
        "usable capacity",
        "activations",
        "optimizer",
        "qwen3-235b-a22b · 256 × H100 · 128K tokens",
        "TP4 CP8 EP8 PP8 VPP4",
    ] {
        assert!(labels.contains(wanted), "{wanted:?} not in\n{labels}");
    }
    // No fonts or files are fetched: one generic family, no references out of the document.
    assert!(svg.contains(r#"font-family="sans-serif""#));
    for outside in ["@font-face", "href", "url(", "<image"] {
        assert!(!svg.contains(outside), "{outside} in the SVG");
    }
}

#[test]
fn time_bar_adds_up_to_the_step_time() {
    let config = qwen3_235b_128k();
    let out = feasibility::check_feasibility(&catalog(), config.clone()).expect("check");
    let charts = charts::for_check(&config, &out);
    let svg = &chart(&charts, "time").svg;
    let segments = with_role(svg, "segment");
    let total: f64 = segments.iter().map(|s| s.number("data-s")).sum();
    let step = out.estimate.performance.step_time_s;
    assert!((total - step).abs() < 1e-3, "{total} vs {step}");
    let attention = segments
        .iter()
        .find(|s| s.get("data-term") == Some("attention"))
        .expect("attention segment");
    assert!(
        (attention.number("data-s") - out.estimate.performance.breakdown_s.attention).abs() < 1e-3
    );
    let labels = texts(svg).join("\n");
    for wanted in [
        "time per step (s)",
        "attention",
        "GEMM",
        "EP comm (exposed)",
        "pipeline bubble",
    ] {
        assert!(labels.contains(wanted), "{wanted:?} not in\n{labels}");
    }
    // The subtitle carries the step range the error band gives (it wraps, so read it whole).
    let u = out
        .estimate
        .performance
        .uncertainty
        .as_ref()
        .expect("a band");
    let range = format!(
        "put the step at {:.1}–{:.1} s",
        u.step_time_low_s, u.step_time_high_s
    );
    assert!(
        labels.replace('\n', " ").contains(&range),
        "{range:?} not in\n{labels}"
    );
}

#[test]
fn an_invalid_layout_draws_no_chart() {
    let mut config = qwen3_235b_128k();
    config.num_gpus = Some(100);
    let out = feasibility::check_feasibility(&catalog(), config.clone()).expect("check");
    assert!(!out.estimate.violations.is_empty());
    assert!(charts::for_check(&config, &out).is_empty());
}

fn dsv3_b300_triage() -> triage::TriageOomOutput {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let diff = std::fs::read_to_string(
        root.join("tests/fixtures/bridge-commits/ecfcd8460-dsv3-b300-vpp-mbs.diff"),
    )
    .expect("fixture");
    let before =
        std::fs::read_to_string(root.join("examples/dsv3-b300-before.yaml")).expect("example");
    triage::triage_oom(
        &catalog(),
        triage::TriageOomInput {
            before: moe_skills::inputs::ConfigSource::Text(before),
            after: None,
            diff: Some(diff),
            recipe: Some("deepseek_v3_pretrain_256gpu_b300_bf16_config".into()),
            model: Some(moe_skills::model::ModelSpec::Id("deepseek-v3".into())),
            hardware: Some("b300".into()),
            num_gpus: Some(256),
            modules: Default::default(),
        },
    )
    .expect("triage")
}

/// The steps of a waterfall add up to its end minus its start, which are the JSON totals.
fn check_waterfall(svg: &str, before: f64, after: f64, causes: usize) {
    let start = with_role(svg, "start");
    let end = with_role(svg, "end");
    let steps = with_role(svg, "step");
    assert_eq!((start.len(), end.len()), (1, 1));
    assert!((start[0].number("data-value") - before).abs() < 1e-3);
    assert!((end[0].number("data-value") - after).abs() < 1e-3);
    let sum: f64 = steps.iter().map(|s| s.number("data-delta")).sum();
    assert!(
        (sum - (after - before)).abs() < 1e-3,
        "steps sum to {sum}, after - before = {}",
        after - before
    );
    // One step per changed setting, plus at most one for their interaction.
    assert!(
        steps.len() == causes || steps.len() == causes + 1,
        "{} steps, {causes} causes",
        steps.len()
    );
}

#[test]
fn triage_waterfalls_add_up_to_the_change() {
    let out = dsv3_b300_triage();
    assert!(out.causes.len() >= 2, "{:?}", out.causes);
    let charts = charts::for_triage(&out);
    let memory = &chart(&charts, "triage-memory").svg;
    check_waterfall(
        memory,
        out.before.peak_gib,
        out.after.peak_gib,
        out.causes.len(),
    );
    let time = &chart(&charts, "triage-time").svg;
    check_waterfall(
        time,
        out.before.step_time_s,
        out.after.step_time_s,
        out.causes.len(),
    );
    let labels = texts(memory).join("\n");
    for wanted in [
        "micro_batch_size 2 → 1",
        "virtual_pipeline_model_parallel_size unset → 2",
        "peak memory per GPU (GiB)",
        "usable capacity",
    ] {
        assert!(labels.contains(wanted), "{wanted:?} not in\n{labels}");
    }
    let time_labels = texts(time).join("\n");
    assert!(time_labels.contains("time per step (s)"));
    // The time waterfall's subtitle carries both sides' error-band step ranges.
    let (b, a) = (
        out.before.uncertainty.as_ref().expect("band before"),
        out.after.uncertainty.as_ref().expect("band after"),
    );
    let ranges = format!(
        "put the step at {:.1}–{:.1} s before, {:.1}–{:.1} s after",
        b.step_time_low_s, b.step_time_high_s, a.step_time_low_s, a.step_time_high_s
    );
    assert!(
        time_labels.replace('\n', " ").contains(&ranges),
        "{ranges:?} not in\n{time_labels}"
    );
    assert!(!labels.contains("error bands"), "{labels}");
}

#[test]
fn plan_charts_draw_the_best_layout() {
    let catalog = catalog();
    let input: plan::PlanLayoutsInput = serde_json::from_value(json!({
        "model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 64, "seq_length": 65536, "top_k": 2
    }))
    .expect("input");
    let out = plan::plan_layouts(&catalog, input).expect("plan");
    let best = out.candidates.first().expect("a layout fits");
    let charts = charts::for_plan(&catalog, &out).expect("charts");
    let svg = &chart(&charts, "memory").svg;
    let ranks: std::collections::BTreeSet<String> = with_role(svg, "segment")
        .iter()
        .filter_map(|s| s.get("data-rank").map(str::to_string))
        .collect();
    let pp = best.config.pipeline_model_parallel_size.unwrap_or(1) as usize;
    assert_eq!(
        ranks.len(),
        pp,
        "one bar per pipeline rank of {}",
        best.layout
    );
    assert!(
        texts(svg).join("\n").contains(&best.layout),
        "title names the layout"
    );
}

#[test]
fn html_page_holds_rationale_charts_and_inputs() {
    let config = qwen3_235b_128k();
    let out = feasibility::check_feasibility(&catalog(), config.clone()).expect("check");
    let charts = charts::for_check(&config, &out);
    let inputs = serde_json::to_value(&config).expect("json");
    let html = page::html_page(
        "moe-skills check",
        "qwen3-235b-a22b",
        &out.rationale,
        &charts,
        &inputs,
    );
    assert!(
        html.contains("<strong>TP4 CP8 EP8"),
        "rationale rendered as HTML"
    );
    assert_eq!(html.matches("<svg ").count(), charts.len());
    assert!(
        html.contains("&quot;seq_length&quot;: 131072"),
        "inputs shown"
    );
    let stacked = page::stacked_svg(&charts);
    let all = elements(&stacked);
    assert_eq!(
        all.iter().filter(|e| e.tag == "svg").count(),
        charts.len() + 1
    );
}

#[test]
fn cli_writes_svg_and_html() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("check.svg");
    let html = dir.path().join("check.html");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .args([
            "check",
            "--model",
            "qwen3-235b-a22b",
            "--hardware",
            "h100",
            "--num-gpus",
            "256",
            "--seq-length",
            "131072",
            "--set",
            "tp=4",
            "--set",
            "cp=8",
            "--set",
            "pp=8",
            "--set",
            "vpp=4",
            "--set",
            "ep=8",
            "--set",
            "sequence_parallel=true",
            "--set",
            "global_batch_size=32",
            "--json",
        ])
        .arg("--svg")
        .arg(&svg)
        .arg("--html")
        .arg(&html)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run");
    assert!(
        status.code() == Some(0) || status.code() == Some(1),
        "{status}"
    );
    let svg = std::fs::read_to_string(&svg).expect("svg written");
    let bars: std::collections::BTreeSet<String> = with_role(&svg, "segment")
        .iter()
        .filter_map(|s| s.get("data-rank").map(str::to_string))
        .collect();
    assert_eq!(bars.len(), 8);
    assert!(elements(&svg)
        .iter()
        .any(|e| e.get("data-chart") == Some("time")));
    let html = std::fs::read_to_string(&html).expect("html written");
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<section id=\"inputs\">"));
}

/// Across models, pipeline depths (1 to 32), fitting and not: every chart parses, every rank
/// has its bar, bars add up to the JSON, the time bar to the step time.
#[test]
fn charts_add_up_across_layouts() {
    let catalog = catalog();
    let cases = [
        json!({"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 8, "seq_length": 32768, "ep": 8, "global_batch_size": 8}),
        json!({"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 32, "seq_length": 32768, "tp": 2, "cp": 2, "pp": 2, "ep": 8, "global_batch_size": 64}),
        json!({"model": "deepseek-v3", "hardware": "h100", "num_gpus": 1024, "seq_length": 131072, "pp": 32, "ep": 32, "global_batch_size": 64}),
        json!({"model": "deepseek-v3", "hardware": "b300", "num_gpus": 256, "seq_length": 4096, "pp": 16, "vpp": 2, "ep": 16, "global_batch_size": 4096}),
        json!({"model": "kimi-k2", "hardware": "gb200", "num_gpus": 512, "seq_length": 262144, "cp": 16, "pp": 4, "ep": 32, "global_batch_size": 32}),
    ];
    let mut drawn = 0;
    for case in cases {
        let config: TrainingConfig = serde_json::from_value(case.clone()).expect("config");
        let out = feasibility::check_feasibility(&catalog, config.clone()).expect("check");
        let charts = charts::for_check(&config, &out);
        if out
            .estimate
            .violations
            .iter()
            .any(|v| !v.code.contains("memory"))
            && charts.is_empty()
        {
            continue;
        }
        assert_eq!(charts.len(), 2, "{case}");
        let memory = &chart(&charts, "memory").svg;
        let mut totals: BTreeMap<usize, f64> = BTreeMap::new();
        for segment in with_role(memory, "segment") {
            *totals
                .entry(segment.number("data-rank") as usize)
                .or_default() += segment.number("data-gib");
        }
        let peaks = &out.estimate.memory.per_rank_peak_gib;
        assert_eq!(totals.len(), peaks.len(), "{case}");
        for (rank, total) in totals {
            assert!(
                (total - peaks[rank]).abs() < 0.01,
                "{case}: rank {rank} {total} vs {}",
                peaks[rank]
            );
        }
        let time: f64 = with_role(&chart(&charts, "time").svg, "segment")
            .iter()
            .map(|s| s.number("data-s"))
            .sum();
        assert!(
            (time - out.estimate.performance.step_time_s).abs() < 1e-3,
            "{case}"
        );
        elements(&page::stacked_svg(&charts));
        drawn += 1;
    }
    assert!(drawn >= 4, "only {drawn} layouts drawn");
}

#[test]
fn cli_triage_writes_both_waterfalls() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("triage.svg");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .arg("triage-oom")
        .arg("--before")
        .arg(root.join("examples/dsv3-b300-before.yaml"))
        .arg("--diff")
        .arg(root.join("tests/fixtures/bridge-commits/ecfcd8460-dsv3-b300-vpp-mbs.diff"))
        .args([
            "--model",
            "deepseek-v3",
            "--hardware",
            "b300",
            "--num-gpus",
            "256",
        ])
        .args(["--recipe", "deepseek_v3_pretrain_256gpu_b300_bf16_config"])
        .arg("--svg")
        .arg(&svg)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run");
    assert!(status.success(), "{status}");
    let svg = std::fs::read_to_string(&svg).expect("svg written");
    let kinds: Vec<String> = elements(&svg)
        .iter()
        .filter_map(|e| e.get("data-chart").map(str::to_string))
        .collect();
    assert_eq!(kinds, ["triage-memory", "triage-time"]);
    assert_eq!(with_role(&svg, "start").len(), 2);
}
