//! `check --log`: the configuration from a Megatron log's argument dump, and the prediction
//! compared with what the log measured (the fixture's numbers are synthetic: this checks the
//! mechanics, not accuracy).

use std::process::Command;

#[test]
fn check_reads_a_log_and_compares_per_rank() {
    let log = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/logs/qwen3-30b-a3b-32k-32gpu.log"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .args([
            "--json",
            "check",
            "--log",
            log,
            "--model",
            "qwen3-30b-a3b",
            "--hardware",
            "h100",
        ])
        .output()
        .expect("run moe-skills");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let answer: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&output.stderr)));
    let comparison = &answer["log_comparison"];
    let ranks: Vec<u64> = comparison["memory"]
        .as_array()
        .expect("memory rows")
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, [0, 16]);
    // PP2 over 32 GPUs: rank 16 is the second pipeline stage.
    assert_eq!(comparison["memory"][1]["pipeline_rank"], 1);
    assert_eq!(comparison["steps"]["warmup_skipped"], 2);
    assert!(comparison["predicted_step_time_s"].as_f64().unwrap() > 0.0);
    // The measured step is read against the step times the prediction's error band gives.
    let range: Vec<f64> = comparison["predicted_step_range_s"]
        .as_array()
        .expect("a band's step range")
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    assert!(
        range.len() == 2 && 0.0 < range[0] && range[0] <= range[1],
        "{range:?}"
    );
    let measured = comparison["steps"]["median_step_ms"].as_f64().unwrap() / 1000.0;
    let inside = range[0] <= measured && measured <= range[1];
    assert_eq!(comparison["measured_step_inside_range"], inside);
    let explanations = comparison["explanations"].to_string();
    let error = comparison["step_time_error_pct"].as_f64().unwrap().abs();
    if !inside {
        assert!(explanations.contains("outside the"), "{explanations}");
    } else if error > 15.0 {
        assert!(explanations.contains("inside the"), "{explanations}");
    }
    // The dump's settings are the configuration; what the model does not use is listed.
    let ignored = answer["ignored_settings"].as_array().expect("notes");
    assert!(
        ignored.iter().any(|i| i["key"] == "--train-iters"),
        "{ignored:?}"
    );
}

#[test]
fn check_refuses_a_file_that_is_no_log() {
    let dir = std::env::temp_dir().join(format!("moe-skills-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notes.txt");
    std::fs::write(&path, "just some notes\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .args(["check", "--log"])
        .arg(&path)
        .args(["--model", "qwen3-30b-a3b", "--hardware", "h100"])
        .output()
        .expect("run moe-skills");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no Megatron log line found"), "{stderr}");
}

fn check_json(args: &[&str]) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .arg("--json")
        .arg("check")
        .args(args)
        .output()
        .expect("run moe-skills");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&output.stderr)))
}

/// A measured step far outside the band's range is explained, and said to be outside it: the
/// H100 log's step read as if the run had used B200s, which the model prices far faster than
/// any B200 run of its band measured against its prediction.
#[test]
fn a_step_outside_the_bands_range_says_so() {
    let log = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/logs/qwen3-30b-a3b-32k-32gpu-full-dump.log"
    );
    let answer = check_json(&["--log", log, "--hardware", "b200"]);
    let comparison = &answer["log_comparison"];
    assert_eq!(
        comparison["measured_step_inside_range"], false,
        "{comparison}"
    );
    let high = comparison["predicted_step_range_s"][1]
        .as_f64()
        .unwrap_or(f64::NAN);
    let measured = comparison["steps"]["median_step_ms"]
        .as_f64()
        .unwrap_or(0.0)
        / 1000.0;
    assert!(measured > high, "{measured} vs {high}");
    let explanations = comparison["explanations"].to_string();
    assert!(
        explanations.contains("less than the measured step")
            && explanations.contains("outside the")
            && explanations.contains("measured runs of its band (b200"),
        "{explanations}"
    );
}

/// A whole argument dump (architecture flags, and the tokenizer's padded vocabulary printed
/// after it) is enough: no model card is named, and the configuration and FLOPs per token are
/// those of the model card for the same run.
#[test]
fn a_log_alone_gives_the_configuration_and_flops_of_the_run() {
    let log = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/logs/qwen3-30b-a3b-32k-32gpu-full-dump.log"
    );
    let from_log = check_json(&["--log", log, "--hardware", "h100"]);
    let with_card = check_json(&[
        "--log",
        log,
        "--hardware",
        "h100",
        "--model",
        "qwen3-30b-a3b",
    ]);
    assert_eq!(from_log["layout"], with_card["layout"]);
    let gflop = |v: &serde_json::Value| v["flops"]["gflop_per_token"].as_f64().unwrap_or(-1.0);
    assert!(gflop(&from_log) > 50.0, "{}", from_log["flops"]);
    assert!(
        (gflop(&from_log) - gflop(&with_card)).abs() < 1e-9,
        "log alone {} vs card {}",
        from_log["flops"],
        with_card["flops"]
    );
    assert_eq!(
        from_log["flops"]["total_params_billion"],
        with_card["flops"]["total_params_billion"]
    );
    // The log's own throughput implies the same FLOPs per token (Megatron's formula).
    let comparison = &from_log["log_comparison"];
    let implied = comparison["log_gflop_per_token"].as_f64().unwrap_or(-1.0);
    assert!(
        (implied - gflop(&from_log)).abs() / gflop(&from_log) < 0.01,
        "{comparison}"
    );
    assert_eq!(comparison["memory"].as_array().map(Vec::len), Some(2));
}

/// Triage from two logs: the run that worked and the one that died with a CUDA OOM. The
/// configurations come from the argument dumps; the answer says whether the model's
/// attribution agrees with what the logs measured.
#[test]
fn triage_from_the_log_that_worked_and_the_one_that_died() {
    let fixture = |name: &str| format!("{}/tests/fixtures/logs/{name}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .args([
            "triage-oom",
            "--before",
            &fixture("qwen3-30b-a3b-32k-32gpu-full-dump.log"),
            "--after",
            &fixture("qwen3-30b-a3b-32k-32gpu-oom.log"),
            "--hardware",
            "h100",
        ])
        .output()
        .expect("run moe-skills");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("**no longer fits**"), "{text}");
    assert!(
        text.contains("Root cause: **recompute_granularity** full → selective"),
        "{text}"
    );
    assert!(
        text.contains("the log shows an out-of-memory error and the model predicts it does not fit: they agree"),
        "{text}"
    );
    assert!(text.contains("Reverting the change"), "{text}");
}

/// The run's argument namespace as a user may hold it instead of the log: `vars(args)` written
/// as JSON, and the `config.yaml` wandb writes from it (Megatron-LM logs `vars(args)` as the
/// wandb run's config). Each reads as the log's own dump does: same layout, FLOPs and
/// prediction, and the arguments the model does not use are listed, not refused.
#[test]
fn a_wandb_config_or_an_args_json_reads_as_the_logs_dump() {
    let fixture = |name: &str| format!("{}/tests/fixtures/logs/{name}", env!("CARGO_MANIFEST_DIR"));
    let from_log = check_json(&[
        "--config",
        &fixture("qwen3-30b-a3b-32k-32gpu-full-dump.log"),
        "--hardware",
        "h100",
    ]);
    for file in [
        "qwen3-30b-a3b-32k-32gpu-wandb-config.yaml",
        "qwen3-30b-a3b-32k-32gpu-args.json",
    ] {
        let answer = check_json(&["--config", &fixture(file), "--hardware", "h100"]);
        assert_eq!(answer["layout"], from_log["layout"], "{file}");
        assert_eq!(answer["flops"], from_log["flops"], "{file}");
        assert_eq!(answer["performance"], from_log["performance"], "{file}");
        let ignored = answer["ignored_settings"].to_string();
        assert!(
            ignored.contains("--lr") && ignored.contains("data_parallel_size = 8"),
            "{file}: {ignored}"
        );
        assert_eq!(
            ignored.contains("\"_wandb\""),
            file.ends_with(".yaml"),
            "{file}: {ignored}"
        );
    }
}
