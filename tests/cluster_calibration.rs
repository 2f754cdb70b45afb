//! Calibrating to a user's cluster from its logs, on a synthetic "cluster": Megatron logs
//! written from the cost model with altered physical factors plus noise. The fit must recover
//! the altered factors, improve runs it did not see, and refuse what the runs cannot identify.

use std::path::{Path, PathBuf};
use std::process::Command;

use moe_skills::catalog::{Catalog, RootSource};
use moe_skills::inputs::megatron_log::read_megatron_log;
use moe_skills::model::cluster_calibration::CalibrationFactors;
use moe_skills::model::cluster_fit::{fit_cluster, FitRun};
use moe_skills::model::{evaluate, ModelSpec, TrainingConfig};

const MODEL: &str = "qwen3-30b-a3b";
const GPU: &str = "h100";

/// The synthetic cluster: GEMMs run at 80% of what the card says, the network delivers half.
fn truth() -> CalibrationFactors {
    CalibrationFactors {
        gemm_throughput: 0.8,
        network_bandwidth: 0.5,
        ..CalibrationFactors::default()
    }
}

/// The synthetic cluster's allocator fragments this many times what the cost-model card says.
const FRAGMENTATION_RATIO: f64 = 2.4;

/// Deterministic measurement noise, within ±1.5%.
const NOISE: [f64; 9] = [
    0.010, -0.015, 0.005, -0.008, 0.012, -0.003, 0.007, -0.011, 0.004,
];

/// Runs of one model on the cluster: (GPUs, TP, CP, EP, PP, sequence, global batch).
const RUNS: [(u32, u32, u32, u32, u32, u64, u32); 9] = [
    (8, 1, 1, 8, 1, 4096, 64),
    (16, 1, 1, 16, 1, 4096, 128),
    (32, 1, 1, 32, 1, 4096, 256),
    (32, 1, 2, 8, 2, 32768, 64),
    (64, 2, 4, 16, 1, 65536, 32),
    (16, 1, 2, 8, 1, 16384, 64),
    (64, 1, 1, 32, 2, 8192, 256),
    (8, 1, 2, 4, 1, 16384, 32),
    (128, 2, 8, 32, 1, 131072, 32),
];

/// A Megatron-LM argument dump and iteration lines, as `training.py` prints them.
fn argument_dump(run: (u32, u32, u32, u32, u32, u64, u32)) -> String {
    let (gpus, tp, cp, ep, pp, seq, gbs) = run;
    let mut text =
        String::from("[default0]:------------------------ arguments ------------------------\n");
    for (name, value) in [
        ("bf16", "True".to_owned()),
        ("context_parallel_size", cp.to_string()),
        ("expert_model_parallel_size", ep.to_string()),
        ("global_batch_size", gbs.to_string()),
        ("micro_batch_size", "1".to_owned()),
        ("moe_token_dispatcher_type", "alltoall".to_owned()),
        ("overlap_grad_reduce", "True".to_owned()),
        ("overlap_param_gather", "True".to_owned()),
        ("pipeline_model_parallel_size", pp.to_string()),
        ("recompute_granularity", "full".to_owned()),
        ("recompute_method", "uniform".to_owned()),
        ("recompute_num_layers", "1".to_owned()),
        ("seq_length", seq.to_string()),
        (
            "sequence_parallel",
            if tp > 1 { "True" } else { "False" }.to_owned(),
        ),
        ("tensor_model_parallel_size", tp.to_string()),
        ("use_distributed_optimizer", "True".to_owned()),
        ("world_size", gpus.to_string()),
    ] {
        let dots = ".".repeat(48usize.saturating_sub(name.len()));
        text.push_str(&format!("[default0]:  {name} {dots} {value}\n"));
    }
    text.push_str("[default0]:-------------------- end of arguments ---------------------\n");
    text
}

fn iteration_lines(step_s: f64, last_rank: u32) -> String {
    let mut text = String::new();
    for iteration in 1..=20u32 {
        // Warm-up iterations are slow; the reader skips them.
        let ms = if iteration <= 2 {
            step_s * 4000.0
        } else {
            step_s * 1000.0
        };
        text.push_str(&format!(
            "[default{last_rank}]: [2026-11-02 10:{iteration:02}:00.000000] iteration {iteration:>8}/      20 | consumed samples: {:>12} | elapsed time per iteration (ms): {ms:.1} | learning rate: 3.0E-04 | global batch size: 64 | lm loss: 2.1E+00 |\n",
            iteration * 64
        ));
    }
    text
}

struct Cluster {
    catalog: Catalog,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            catalog: Catalog::load(&[RootSource::Embedded]),
        }
    }

    fn config_of(&self, dump: &str) -> TrainingConfig {
        let mut config = read_megatron_log(dump, Some(&ModelSpec::Id(MODEL.into())))
            .expect("dump reads")
            .config
            .expect("dump has a configuration");
        config.model = Some(ModelSpec::Id(MODEL.into()));
        config.hardware = Some(GPU.into());
        config
    }

    /// The step the synthetic cluster "measures" for a configuration.
    fn measured_step(&self, config: &TrainingConfig, noise: f64) -> f64 {
        let cards = self.catalog.cost();
        let (hw, k) = truth().apply(
            &cards.hardware[GPU],
            cards.constants.as_ref().expect("constants"),
        );
        let step = evaluate(&cards.models[MODEL], &hw, &k, config)
            .performance
            .step_time_s;
        assert!(step > 0.0, "the synthetic run has a step time");
        step * (1.0 + noise)
    }

    /// The run's log: argument dump, iteration lines, and rank 0's memory line with the
    /// cluster's allocator fragmenting [`FRAGMENTATION_RATIO`] times what the card says.
    fn log(&self, index: usize) -> String {
        let dump = argument_dump(RUNS[index]);
        let config = self.config_of(&dump);
        let step = self.measured_step(&config, NOISE[index]);
        let cards = self.catalog.cost();
        let estimate = evaluate(
            &cards.models[MODEL],
            &cards.hardware[GPU],
            cards.constants.as_ref().expect("constants"),
            &config,
        );
        let memory = &estimate.memory;
        let allocated = memory.per_rank_allocated_gib[0];
        let fragmentation = memory.per_rank_peak_gib[0]
            - allocated
            - memory.breakdown_gib.fixed_reserve
            - memory.breakdown_gib.dispatcher_buffers;
        let reserved = allocated + fragmentation * FRAGMENTATION_RATIO;
        format!(
            "{dump}[default0]:[Rank 0] (after 10 iterations) memory (MB) | allocated: {:.2} | max allocated: {:.2} | reserved: {:.2} | max reserved: {:.2}\n{}",
            allocated * 800.0,
            allocated * 1024.0,
            reserved * 1024.0,
            reserved * 1024.0,
            iteration_lines(step, RUNS[index].0 - 1)
        )
    }
}

#[test]
fn the_fit_recovers_the_altered_factors_and_improves_runs_it_did_not_see() {
    let cluster = Cluster::new();
    let cards = cluster.catalog.cost();
    let arch = &cards.models[MODEL];
    let runs: Vec<FitRun> = (0..RUNS.len())
        .map(|index| {
            let config = cluster.config_of(&argument_dump(RUNS[index]));
            FitRun {
                name: format!("run{index}"),
                arch,
                measured_step_s: cluster.measured_step(&config, NOISE[index]),
                config,
            }
        })
        .collect();
    let (fitted_on, held_out) = runs.split_at(6);
    let hw = &cards.hardware[GPU];
    let k = cards.constants.as_ref().expect("constants");
    let fit = fit_cluster(fitted_on, hw, k);
    let verdict = |name: &str| {
        fit.verdicts
            .iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("verdict for {name}"))
    };
    let gemm = verdict("gemm_throughput")
        .fitted
        .expect("GEMM throughput is identifiable");
    assert!(
        (gemm - 0.8).abs() < 0.8 * 0.08,
        "GEMM factor {gemm}, truth 0.8: {fit:#?}"
    );
    let network = verdict("network_bandwidth")
        .fitted
        .expect("multi-node EP runs identify the network");
    assert!(
        (network - 0.5).abs() < 0.5 * 0.25,
        "network factor {network}, truth 0.5: {fit:#?}"
    );
    assert!(fit.median_abs_error_after_pct < fit.median_abs_error_before_pct);
    assert!(fit.median_abs_held_out_error_pct.is_some());

    // Runs the fit never saw get closer to what the cluster measured.
    let calibrated = fit.factors.apply(hw, k);
    for run in held_out {
        let before = evaluate(arch, hw, k, &run.config).performance.step_time_s;
        let after = evaluate(arch, &calibrated.0, &calibrated.1, &run.config)
            .performance
            .step_time_s;
        let error = |p: f64| ((p - run.measured_step_s) / run.measured_step_s).abs();
        assert!(
            error(after) < error(before) && error(after) < 0.06,
            "{}: before {:.1}%, after {:.1}%",
            run.name,
            error(before) * 100.0,
            error(after) * 100.0
        );
    }
}

#[test]
fn one_run_fits_at_most_one_factor_and_says_why_the_others_are_refused() {
    let cluster = Cluster::new();
    let cards = cluster.catalog.cost();
    let config = cluster.config_of(&argument_dump(RUNS[4]));
    let run = FitRun {
        name: "only".into(),
        arch: &cards.models[MODEL],
        measured_step_s: cluster.measured_step(&config, 0.0),
        config,
    };
    let fit = fit_cluster(
        &[run],
        &cards.hardware[GPU],
        cards.constants.as_ref().expect("constants"),
    );
    let fitted: Vec<_> = fit.verdicts.iter().filter(|v| v.fitted.is_some()).collect();
    assert!(fitted.len() <= 1, "{fit:#?}");
    let refused: Vec<_> = fit.verdicts.iter().filter(|v| v.fitted.is_none()).collect();
    assert!(refused.len() >= 4, "{fit:#?}");
    assert!(refused.iter().all(|v| !v.reason.is_empty()));
    assert!(
        refused
            .iter()
            .any(|v| v.reason.contains("one run cannot tell")
                || v.reason.contains("can identify at most")),
        "{fit:#?}"
    );
    assert!(fit.median_abs_held_out_error_pct.is_none());
}

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_moe-skills")
}

fn run_cli(args: &[&str]) -> String {
    let output = Command::new(binary())
        .args(args)
        .output()
        .expect("run moe-skills");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() || args.first() == Some(&"check"),
        "{args:?} failed: {}{}",
        text,
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

fn write_logs(dir: &Path, cluster: &Cluster, indices: &[usize]) -> Vec<PathBuf> {
    indices
        .iter()
        .map(|&index| {
            let path = dir.join(format!("run{index}.log"));
            std::fs::write(&path, cluster.log(index)).expect("write log");
            path
        })
        .collect()
}

#[test]
fn calibrate_writes_a_card_that_check_uses_and_names() {
    let cluster = Cluster::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = write_logs(dir.path(), &cluster, &[0, 1, 2, 3, 4, 5, 6]);
    let card = dir.path().join("my-cluster.yaml");
    let mut args: Vec<String> = vec!["calibrate".into()];
    for log in &logs[..6] {
        args.push("--log".into());
        args.push(log.display().to_string());
    }
    for extra in [
        "--hardware",
        GPU,
        "--model",
        MODEL,
        "--cluster",
        "lab-a",
        "--write",
    ] {
        args.push(extra.into());
    }
    args.push(card.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = run_cli(&args);
    eprintln!("{text}");
    assert!(text.contains("GEMM throughput"), "{text}");
    assert!(text.contains("leave-one-out"), "{text}");
    let yaml = std::fs::read_to_string(&card).expect("card written");
    let card_fraction = Cluster::new()
        .catalog
        .cost()
        .constants
        .as_ref()
        .expect("constants")
        .fragmentation_fraction;
    let written: serde_yaml::Value = serde_yaml::from_str(&yaml).expect("card is YAML");
    let fragmentation = written["fragmentation_fraction"]
        .as_f64()
        .expect("fragmentation fitted");
    assert!(
        (fragmentation - card_fraction * FRAGMENTATION_RATIO).abs() < 0.01,
        "fragmentation {fragmentation}, truth {}",
        card_fraction * FRAGMENTATION_RATIO
    );
    assert!(
        yaml.contains("hardware: h100") && yaml.contains("gemm_throughput"),
        "{yaml}"
    );

    // The held-out run, checked with and without the calibration.
    let held_out = logs[6].display().to_string();
    let check = |extra: &[&str]| {
        let mut args = vec![
            "check",
            "--log",
            &held_out,
            "--hardware",
            GPU,
            "--model",
            MODEL,
        ];
        args.extend_from_slice(extra);
        run_cli(&args)
    };
    let error_of = |text: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with("Step time: measured"))
            .unwrap_or_else(|| panic!("no step line in {text}"));
        let inside = line.split('(').nth(2).and_then(|s| s.split('%').next());
        inside
            .and_then(|s| s.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no error in {line}"))
            .abs()
    };
    let plain = check(&[]);
    let calibrated = check(&["--calibration", &card.display().to_string()]);
    eprintln!("{calibrated}");
    assert!(!plain.contains("**Calibration**"), "{plain}");
    assert!(
        calibrated.contains("**Calibration**: calibrated on 6 runs of cluster `lab-a` for `h100`"),
        "{calibrated}"
    );
    assert!(
        error_of(&calibrated) < error_of(&plain),
        "calibrated {calibrated}\nplain {plain}"
    );

    // The same card from a --skills-dir, as cards/calibration.yaml.
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("cards")).expect("mkdir");
    std::fs::copy(&card, root.join("cards/calibration.yaml")).expect("copy");
    let from_dir = check(&["--skills-dir", &root.display().to_string()]);
    assert!(from_dir.contains("**Calibration**"), "{from_dir}");
}

#[test]
fn a_calibration_card_with_impossible_factors_is_reported_not_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let card = dir.path().join("bad.yaml");
    std::fs::write(
        &card,
        "hardware: h100\nruns: 2\nfactors: {gemm_throughput: 40}\n",
    )
    .expect("write");
    let output = Command::new(binary())
        .args([
            "skills",
            "validate",
            "--calibration",
            &card.display().to_string(),
        ])
        .output()
        .expect("run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("gemm_throughput"), "{text}");
}
