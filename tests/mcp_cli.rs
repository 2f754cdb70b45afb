//! The CLI (`moe-skills skills ...`), the embedded catalog, and parser robustness.

mod mcp_support;

use std::process::Command;

use mcp_support::{fixture_arg, BIN};
use moe_skills::catalog::{
    parse_card, parse_sections, parse_skill_markdown, Catalog, RootSource, Severity,
};
use proptest::prelude::*;

fn run(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(BIN)
        .args(args)
        .output()
        .expect("run moe-skills");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn every_embedded_skill_loads_without_errors() {
    let catalog = Catalog::load(&[RootSource::Embedded]);
    let errors: Vec<String> = catalog
        .diagnostics()
        .iter()
        .filter(|diagnostic| diagnostic.severity == Severity::Error)
        .map(ToString::to_string)
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    for skill in catalog.skills() {
        assert!(!skill.description.is_empty(), "{}", skill.name);
        assert_eq!(skill.files[0].path, "SKILL.md");
        let entry = moe_skills::server::resources::skill_entry(skill);
        rmcp::model::validate_skills(&[entry]).expect("valid Skills-extension entry");
    }
    let (ok, _, stderr) = run(&["skills", "validate"]);
    assert!(ok, "{stderr}");
}

#[test]
fn validate_reports_broken_skills_with_file_and_line_and_fails() {
    let (ok, stdout, _) = run(&["skills", "validate", &fixture_arg("catalog")]);
    assert!(!ok);
    assert!(stdout.contains("broken-yaml/SKILL.md:"), "{stdout}");
    assert!(
        stdout.contains("no-description/SKILL.md:4: required field `description` is missing"),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 skills (2 with cards), 1 model cards, 1 hardware cards: 2 errors"),
        "{stdout}"
    );

    let (ok, stdout, _) = run(&["--json", "skills", "validate", &fixture_arg("catalog")]);
    assert!(!ok);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("json report");
    assert_eq!(report["errors"], 2);
    assert_eq!(report["diagnostics"][0]["severity"], "error");

    let (ok, _, stderr) = run(&["skills", "validate", &fixture_arg("override")]);
    assert!(ok, "{stderr}");
}

#[test]
fn list_show_and_search_in_text_and_json() {
    let dir = fixture_arg("catalog");
    let (ok, stdout, _) = run(&["--skills-dir", &dir, "skills", "list"]);
    assert!(ok);
    assert!(stdout.contains("good-skill") && stdout.contains("mb-style-skill"));

    let (ok, stdout, _) = run(&["--skills-dir", &dir, "--json", "skills", "list"]);
    assert!(ok);
    let list: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert!(list["skills"]
        .as_array()
        .is_some_and(|skills| skills.len() >= 2));

    let (ok, stdout, _) = run(&[
        "--skills-dir",
        &dir,
        "skills",
        "show",
        "good-skill",
        "--section",
        "Troubleshooting",
    ]);
    assert!(ok);
    assert!(stdout.starts_with("# Troubleshooting"), "{stdout}");

    let (ok, stdout, _) = run(&[
        "--skills-dir",
        &dir,
        "skills",
        "show",
        "mb-style-skill",
        "--card",
    ]);
    assert!(ok);
    assert!(
        stdout.contains("tflops: ~300"),
        "card printed as written: {stdout}"
    );

    let (ok, stdout, _) = run(&[
        "--skills-dir",
        &dir,
        "--json",
        "skills",
        "search",
        "dispatcher deepep",
    ]);
    assert!(ok);
    let found: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(found["results"][0]["skill"], "mb-style-skill");

    let (ok, _, stderr) = run(&["--skills-dir", &dir, "skills", "show", "good-skil"]);
    assert!(!ok);
    assert!(stderr.contains("closest: good-skill"), "{stderr}");
}

#[test]
fn data_cards_are_collected_and_overridable() {
    let catalog = Catalog::load(&[RootSource::Directory(mcp_support::fixture("catalog"))]);
    let models: Vec<&str> = catalog
        .data_cards(moe_skills::catalog::DataCardKind::Model)
        .map(|card| card.id.as_str())
        .collect();
    assert_eq!(models, ["tiny-moe"]);
    let gpu = catalog
        .data_card(moe_skills::catalog::DataCardKind::Hardware, "test-gpu")
        .expect("hardware card");
    assert_eq!(gpu.value["memory_gb_nominal"], serde_yaml::Value::from(80));
    // The typed cards convert too, so a user root can add a model and a GPU.
    assert!(catalog.cost().models.contains_key("tiny-moe"));
    assert!(catalog.cost().hardware.contains_key("test-gpu"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsers_never_panic_on_arbitrary_text(text in any::<String>()) {
        let body = match parse_skill_markdown(&text) {
            Ok(parsed) => parsed.body.to_owned(),
            Err(error) => { prop_assert!(error.line() >= 1); text.clone() }
        };
        let tree = parse_sections(&body);
        for section in &tree.sections {
            prop_assert!(tree.find(&section.display_path()).is_ok() || section.level == 0);
        }
        let _ = tree.find(&text);
        let _ = parse_card(&text);
    }

    #[test]
    fn parsers_never_panic_on_markdown_like_text(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("---".to_owned()),
                Just("name: x".to_owned()),
                Just("description: >-".to_owned()),
                Just("  folded".to_owned()),
                "#{1,7} [a-zA-Z >/#|`]{0,12}",
                "\\|[ a-z|]{0,10}\\|",
                Just("```".to_owned()),
                "[ -~]{0,20}",
            ],
            0..40,
        )
    ) {
        let text = lines.join("\n");
        if let Ok(parsed) = parse_skill_markdown(&text) {
            prop_assert!(!parsed.description.is_empty());
            let tree = parse_sections(parsed.body);
            for section in tree.headed() {
                prop_assert!(parsed.body.contains(section.markdown.lines().next().unwrap_or_default()));
            }
        }
        let _ = parse_sections(&text);
    }
}

/// `check`'s exit status gates CI: 0 fits, 1 does not fit or has violations (with the answer
/// printed, text or JSON), 2 an error.
#[test]
fn check_exit_status_tells_fits_from_does_not_fit_from_error() {
    let status = |extra: &[&str]| {
        let mut args = vec![
            "check",
            "--model",
            "qwen3-30b-a3b",
            "--hardware",
            "h100",
            "--num-gpus",
            "16",
            "--set",
            "ep=8",
        ];
        args.extend_from_slice(extra);
        let output = Command::new(BIN)
            .args(&args)
            .output()
            .expect("run moe-skills");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    let (code, out) = status(&["--seq-length", "4096"]);
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = status(&["--seq-length", "1048576"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("DOES NOT FIT"), "{out}");
    let (code, out) = status(&["--seq-length", "1048576", "--json"]);
    assert_eq!(code, Some(1), "{out}");
    let body: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(body["fits"], false);
    let (code, out) = status(&["--seq-length", "4096", "--set", "tp=3"]);
    assert_eq!(code, Some(1), "a layout violation");
    // Refused by Megatron, not out of memory: the verdict says which.
    assert!(
        out.starts_with("INVALID (") && !out.starts_with("DOES NOT FIT"),
        "{out}"
    );
    let (code, _) = status(&["--seq-length", "4096", "--hardware", "tpu-v5"]);
    assert_eq!(code, Some(2), "an error");
    let (code, _) = status(&["--seq-length", "4096", "--seq-length", "8192"]);
    assert_eq!(code, Some(2), "a usage error");
}

/// A reader that stops early (`| head`) ends the command quietly, not with "Broken pipe".
#[test]
fn a_closed_stdout_is_not_an_error() {
    let mut child = Command::new(BIN)
        // More than a pipe buffer holds, so the write meets the closed pipe.
        .args(["calibrate", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn moe-skills");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.to_lowercase().contains("broken pipe"), "{stderr}");
}

/// Text a person reads names values as they are written (`fp8-blockwise`, `deepep`, `unset`),
/// never as Rust or JSON spells them, and prints each note once.
#[test]
fn text_uses_the_names_users_write() {
    let check = Command::new(BIN)
        .args([
            "check",
            "--model",
            "deepseek-v3",
            "--hardware",
            "h100",
            "--num-gpus",
            "256",
            "--seq-length",
            "131072",
            "--precision",
            "fp8-blockwise",
            "--set",
            "tp=2",
            "--set",
            "cp=8",
            "--set",
            "pp=8",
            "--set",
            "ep=32",
        ])
        .output()
        .expect("run moe-skills");
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(text.contains("precision fp8-blockwise"), "{text}");
    assert!(text.contains("dispatcher deepep"), "{text}");
    for rust in ["Fp8Blockwise", "Deepep", "= null", "{\""] {
        assert!(!text.contains(rust), "{rust} in {text}");
    }
    let note = "global_batch_size not set";
    assert_eq!(text.matches(note).count(), 1, "{text}");
    // MFU names its peak: FP8 for an FP8 run, with the BF16-peak figure beside it.
    assert!(text.contains("MFU of the FP8 peak"), "{text}");
    assert!(text.contains("% of the BF16 peak"), "{text}");

    let dir = std::env::temp_dir().join(format!("moe-skills-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let common = "model: qwen3-235b-a22b\nhardware: h100\nnum_gpus: 256\nseq_length: 131072\n\
                  tp: 4\ncp: 8\npp: 8\nvpp: 4\nep: 8\nglobal_batch_size: 32\n";
    let before = dir.join("before.yaml");
    let after = dir.join("after.yaml");
    std::fs::write(&before, common).expect("write before");
    std::fs::write(
        &after,
        format!("{common}recompute_granularity: selective\nrecompute_modules: [layernorm]\n"),
    )
    .expect("write after");
    let triage = Command::new(BIN)
        .args(["triage-oom", "--before"])
        .arg(&before)
        .arg("--after")
        .arg(&after)
        .output()
        .expect("run moe-skills");
    let text = String::from_utf8_lossy(&triage.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        triage.status.success(),
        "{}",
        String::from_utf8_lossy(&triage.stderr)
    );
    assert!(text.contains("unset → "), "{text}");
    assert!(!text.contains("null"), "{text}");
}

/// A user's card that does not load is named on stderr with its problem, not silently absent.
#[test]
fn a_card_that_does_not_load_is_named_on_stderr() {
    let root = std::env::temp_dir().join(format!("moe-skills-broken-card-{}", std::process::id()));
    let hardware = root.join("cards").join("hardware");
    std::fs::create_dir_all(&hardware).expect("temp dir");
    std::fs::create_dir_all(root.join("skills")).expect("temp dir");
    let card = include_str!("../cards/hardware/h100.yaml")
        .replace("id: h100", "id: my-gpu")
        .lines()
        .filter(|line| !line.starts_with("host_link_gb_per_s"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(hardware.join("my-gpu.yaml"), card).expect("write card");
    let dir = root.to_string_lossy().into_owned();
    let (ok, _, stderr) = run(&[
        "check",
        "--skills-dir",
        &dir,
        "--model",
        "qwen3-30b-a3b",
        "--hardware",
        "my-gpu",
        "--num-gpus",
        "8",
        "--seq-length",
        "4096",
    ]);
    let _ = std::fs::remove_dir_all(&root);
    assert!(!ok);
    assert!(stderr.contains("my-gpu.yaml"), "{stderr}");
    assert!(stderr.contains("host_link_gb_per_s"), "{stderr}");
}
