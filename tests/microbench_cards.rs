//! The measured attention tables (data/calibration/microbench/*.calibration.yaml, cluster
//! calibration cards written by scripts/microbench-to-card.py) and the hardware cards' measured
//! GEMM, Gated DeltaNet and host-copy figures stay equal to (or, for fitted figures, within
//! their stated error of) the raw microbenchmark rows they name (*.jsonl, written by
//! scripts/gpu-microbench.py on a lent GPU), and `--calibration` prices fused attention with
//! them in answers and in the replay.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use moe_skills::model::kernels::{LinearAttentionCall, LinearAttentionKernel};
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The microbenchmark shape measured for each head dim the cards key (MLA: query/key 192,
/// value 128), as scripts/microbench-to-card.py maps them.
fn shape_for_head_dim(head_dim: u64) -> Option<&'static str> {
    match head_dim {
        64 => Some("mha-d64"),
        128 => Some("mha-d128"),
        192 => Some("mla-d192/128"),
        256 => Some("mha-d256"),
        _ => None,
    }
}

/// (shape, causal, pass, length) -> TFLOP/s of the cuDNN rows of one run.
fn cudnn_rows(path: &Path) -> BTreeMap<(String, bool, String, u64), f64> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (named by a card curve)", path.display()));
    let mut rows = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let row: Json = serde_json::from_str(line).expect("a JSON object per line");
        if row["kind"] != "attention" || row["backend"] != "cudnn" {
            continue;
        }
        for pass in ["fwd", "bwd"] {
            rows.insert(
                (
                    row["shape"].as_str().expect("shape").to_string(),
                    row["causal"].as_bool().expect("causal"),
                    pass.to_string(),
                    row["seq"].as_u64().expect("seq"),
                ),
                row[format!("tflops_{pass}").as_str()]
                    .as_f64()
                    .expect("tflops"),
            );
        }
    }
    rows
}

fn check_card(card: &str) -> usize {
    let path = calibration_card(card);
    let yaml: Yaml =
        serde_yaml::from_str(&std::fs::read_to_string(&path).expect("card")).expect("card YAML");
    let table = &yaml["attention_kernels"];
    let lengths: Vec<u64> = table["seq_lengths"]
        .as_sequence()
        .expect("seq_lengths")
        .iter()
        .map(|v| v.as_u64().expect("integer length"))
        .collect();
    let mut checked = 0;
    for curve in table["curves"].as_sequence().expect("curves") {
        let source = curve["source"].as_str().expect("source");
        let Some(file) = source.split(':').next().filter(|f| f.ends_with(".jsonl")) else {
            panic!("{card}: a curve names no microbench file: {source}");
        };
        let rows = cudnn_rows(&Path::new(ROOT).join(file));
        let head_dim = curve["head_dim"].as_u64().expect("head_dim");
        let shape = shape_for_head_dim(head_dim).expect("a measured head dim");
        let causal = curve["causal"].as_bool().expect("causal");
        let pass = curve["pass"].as_str().expect("pass");
        let values = curve["tflops"].as_sequence().expect("tflops");
        assert_eq!(values.len(), lengths.len(), "{card}: {source}");
        for (len, value) in lengths.iter().zip(values) {
            let key = (shape.to_string(), causal, pass.to_string(), *len);
            let measured = rows
                .get(&key)
                .unwrap_or_else(|| panic!("{card}: {file} has no row {key:?}"));
            let card_value = value.as_f64().expect("number");
            assert!(
                (card_value - measured.round()).abs() < 0.5,
                "{card}: {source} at {len}: card {card_value}, measured {measured:.1}"
            );
        }
        checked += 1;
    }
    checked
}

fn calibration_card(name: &str) -> PathBuf {
    Path::new(ROOT)
        .join("data/calibration/microbench")
        .join(name)
}

#[test]
fn hopper_attention_tables_equal_their_measured_rows() {
    // 4 head dims x 2 masks x 2 passes, less the unmasked MLA backward the cards leave out.
    assert_eq!(check_card("h100-cudnn-9.19.calibration.yaml"), 15);
    assert_eq!(check_card("h200-cudnn-9.19.calibration.yaml"), 15);
}

/// The hardware card's YAML.
fn hardware_card(id: &str) -> Yaml {
    let path = Path::new(ROOT).join(format!("cards/hardware/{id}.yaml"));
    serde_yaml::from_str(&std::fs::read_to_string(&path).expect("card")).expect("card YAML")
}

/// The microbenchmark runs a card row's source names (`data/calibration/microbench/*.jsonl`),
/// as paths from the repository root.
fn named_runs(source: &str) -> Vec<&str> {
    source
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')' || c == '"')
        .filter(|word| word.starts_with("data/calibration/microbench/") && word.ends_with(".jsonl"))
        .collect()
}

/// The first microbenchmark run a card row's source names.
fn named_run(source: &str) -> PathBuf {
    let file = named_runs(source)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no microbench run named in {source}"));
    Path::new(ROOT).join(file)
}

fn numbers(value: &Yaml) -> Vec<f64> {
    value
        .as_sequence()
        .expect("a list")
        .iter()
        .map(|v| v.as_f64().expect("a number"))
        .collect()
}

/// The H100 and H200 cards' grouped-GEMM tables are their runs' rows: each curve the forward +
/// backward TFLOP/s of the expert shape whose smaller weight dimension it names, the reference
/// the same run's BF16 8192^3 GEMM.
#[test]
fn hopper_grouped_gemm_tables_equal_their_measured_rows() {
    for id in ["h100", "h200"] {
        let card = hardware_card(id);
        let table = &card["grouped_gemm_kernels"];
        let tokens = numbers(&table["tokens_per_expert"]);
        let curves = table["curves"].as_sequence().expect("curves");
        assert_eq!(curves.len(), 6, "{id}: the catalog's six expert shapes");
        for curve in curves {
            let run = named_run(curve["source"].as_str().expect("source"));
            let text = std::fs::read_to_string(&run).expect("the named run");
            let rows: Vec<Json> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
                .collect();
            let ceiling = rows
                .iter()
                .find(|r| r["kind"] == "gemm_ceiling" && r["precision"] == "bf16")
                .and_then(|r| r["tflops"].as_f64())
                .expect("a BF16 ceiling row");
            let reference = table["reference_tflops"].as_f64().expect("reference");
            assert!((reference - ceiling.round()).abs() < 0.5, "{id}: {ceiling}");
            let width = curve["weight_dim"].as_f64().expect("weight_dim");
            let values = numbers(&curve["tflops"]);
            assert_eq!(values.len(), tokens.len(), "{id} width {width}");
            for (t, value) in tokens.iter().zip(values) {
                let measured = rows
                    .iter()
                    .find(|r| {
                        r["kind"] == "grouped_gemm"
                            && r["tokens_per_expert"].as_f64() == Some(*t)
                            && r["hidden"]
                                .as_f64()
                                .zip(r["ffn"].as_f64())
                                .is_some_and(|(h, f)| h.min(f) == width)
                    })
                    .and_then(|r| r["tflops_fwd_bwd"].as_f64())
                    .unwrap_or_else(|| panic!("{id}: no row for width {width} at {t} tokens"));
                assert!(
                    (value - measured.round()).abs() < 0.5,
                    "{id} width {width} at {t}: card {value}, measured {measured:.1}"
                );
            }
        }
    }
}

/// The Hopper cards' head-dim-256 backward curves are their head-dim-128 unmasked backward
/// times the ratio the named cuDNN run measured at each length.
#[test]
fn hopper_head_dim_256_backward_is_the_measured_ratio_times_the_cards_128_backward() {
    for id in ["h100", "h200"] {
        let card = hardware_card(id);
        let table = &card["attention_kernels"];
        let lengths: Vec<u64> = numbers(&table["seq_lengths"])
            .into_iter()
            .map(|l| l as u64)
            .collect();
        let curves = table["curves"].as_sequence().expect("curves");
        let find = |head_dim: u64, causal: bool| {
            curves.iter().find(|c| {
                c["head_dim"].as_u64() == Some(head_dim)
                    && c["causal"].as_bool() == Some(causal)
                    && c["pass"] == "bwd"
            })
        };
        let base = numbers(&find(128, false).expect("head dim 128 unmasked backward")["tflops"]);
        for causal in [false, true] {
            let curve = find(256, causal).expect("a head-dim-256 backward");
            let rows = cudnn_rows(&named_run(curve["source"].as_str().expect("source")));
            let values = numbers(&curve["tflops"]);
            for ((len, value), card_128) in lengths.iter().zip(values).zip(&base) {
                let at = |shape: &str, causal: bool| {
                    rows.get(&(shape.to_string(), causal, "bwd".to_string(), *len))
                        .copied()
                        .unwrap_or_else(|| panic!("{id}: no {shape} row at {len}"))
                };
                let expected = card_128 * at("mha-d256", causal) / at("mha-d128", false);
                assert!(
                    (value - expected.round()).abs() < 0.5,
                    "{id} causal {causal} at {len}: card {value}, expected {expected:.1}"
                );
            }
        }
    }
}

fn run(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .args(args)
        .output()
        .expect("run the binary");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn predicted(report: &Json, recipe: &str) -> f64 {
    report["held_out"]
        .as_array()
        .expect("held_out")
        .iter()
        .find(|row| row["recipe"] == recipe)
        .and_then(|row| row["predicted_tflops"].as_f64())
        .unwrap_or_else(|| panic!("no held-out row {recipe}"))
}

/// The replay prices the calibrated GPU's rows with the measured table and every other GPU's
/// with the cards, and says so.
#[test]
fn the_replay_uses_a_measured_attention_calibration_for_its_gpu_only() {
    let card = calibration_card("h100-cudnn-9.19.calibration.yaml");
    let plain: Json = serde_json::from_str(&run(&["calibrate", "--json"])).expect("json");
    let measured: Json = serde_json::from_str(&run(&[
        "calibrate",
        "--json",
        "--calibration",
        card.to_str().expect("utf-8 path"),
    ]))
    .expect("json");
    assert!(plain.get("calibrated_with").is_none());
    let named = measured["calibrated_with"].as_str().expect("named");
    assert!(named.contains("measured on cluster"), "{named}");
    assert!(
        named.contains("fused attention from its measured table"),
        "{named}"
    );
    // DeepSeek-V3 at 128K on H100: attention is most of the step, priced differently.
    let (before, after) = (
        predicted(&plain, "dsv3-128k-h100"),
        predicted(&measured, "dsv3-128k-h100"),
    );
    assert!((after / before - 1.0).abs() > 0.02, "{before} -> {after}");
    // A GB200 recipe is untouched.
    assert_eq!(
        predicted(&plain, "qwen3-next-64k-gb200"),
        predicted(&measured, "qwen3-next-64k-gb200")
    );
}

/// An answer for the calibrated GPU names the calibration it used.
#[test]
fn an_answer_names_the_measured_attention_table() {
    let card = calibration_card("h100-cudnn-9.19.calibration.yaml");
    let recipe = Path::new(ROOT).join("skills/moe-long-context/references/dsv3-128k-h100.yaml");
    let text = run(&[
        "check",
        "--config",
        recipe.to_str().expect("utf-8 path"),
        "--calibration",
        card.to_str().expect("utf-8 path"),
    ]);
    assert!(
        text.contains("measured on cluster `H100 SXM, cuDNN 9.19 (2026-11-24)`"),
        "{text}"
    );
}

/// The H100 and H200 cards' largest-GEMM figures by recipe are their named runs' 8192³ rows.
#[test]
fn hopper_gemm_ceilings_equal_their_measured_rows() {
    for id in ["h100", "h200"] {
        let card = hardware_card(id);
        let ceilings = &card["gemm_ceilings"];
        let rows = rows_of_kind(
            &named_run(ceilings["source"].as_str().expect("source")),
            "gemm_ceiling",
        );
        for precision in ["bf16", "fp8_tensorwise", "fp8_blockwise"] {
            let measured = rows
                .iter()
                .find(|r| r["precision"] == precision)
                .and_then(|r| r["tflops"].as_f64())
                .unwrap_or_else(|| panic!("{id}: no {precision} ceiling row"));
            let card_value = ceilings[precision].as_f64().expect("a number");
            assert!(
                (card_value - measured.round()).abs() < 0.5,
                "{id} {precision}: card {card_value}, measured {measured:.1}"
            );
        }
    }
}

/// The JSON rows of `kind` in a microbenchmark run.
fn rows_of_kind(run: &Path, kind: &str) -> Vec<Json> {
    std::fs::read_to_string(run)
        .unwrap_or_else(|e| panic!("{}: {e}", run.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Json>(l).expect("a JSON object per line"))
        .filter(|r| r["kind"] == kind)
        .collect()
}

fn gdn_kernel(card: &Yaml) -> LinearAttentionKernel {
    serde_yaml::from_value(card["linear_attention_kernel"].clone()).expect("a GDN kernel table")
}

/// Calls at least this long are the ones the H200 card's Gated DeltaNet figures are fitted to
/// (scripts/microbench-to-card.py GDN_MIN_MS): shorter ones ran at the test machine's kernel
/// launch rate.
const GDN_FITTED_MIN_MS: f64 = 2.5;

/// The H200 card's Gated DeltaNet kernel, as the time model evaluates it, gives every measured
/// call it was fitted to within 7%, and no shorter call more time than it took (those waited
/// on the host's launches, which the model prices elsewhere).
#[test]
fn h200_gated_deltanet_kernel_prices_its_measured_calls() {
    let card = hardware_card("h200");
    let kernel = gdn_kernel(&card);
    let sms = card["sm_count"].as_f64().expect("sm_count");
    let sources: Vec<PathBuf> = named_runs(&kernel.source)
        .into_iter()
        .map(|run| Path::new(ROOT).join(run))
        .collect();
    assert_eq!(
        sources.len(),
        2,
        "the card names both runs: {}",
        kernel.source
    );
    let (mut fitted_fwd, mut fitted_bwd) = (0, 0);
    for row in sources.iter().flat_map(|run| rows_of_kind(run, "gdn")) {
        let field = |name: &str| {
            row[name]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}: {row}"))
        };
        let call = LinearAttentionCall {
            sequences: field("batch"),
            seq_len: field("seq"),
            value_heads: field("value_heads"),
            key_head_dim: field("qk_dim"),
            value_head_dim: field("v_dim"),
            sm_count: sms,
        };
        let (both, forward) = kernel.seconds(&call);
        for (pass, predicted_ms, fitted) in [
            ("ms_fwd", forward * 1e3, &mut fitted_fwd),
            ("ms_bwd", (both - forward) * 1e3, &mut fitted_bwd),
        ] {
            let measured = field(pass);
            if measured >= GDN_FITTED_MIN_MS {
                *fitted += 1;
                let error = predicted_ms / measured - 1.0;
                assert!(
                    error.abs() <= 0.07,
                    "{pass} {row}: predicted {predicted_ms:.3} ms"
                );
            } else {
                assert!(
                    predicted_ms <= measured * 1.05,
                    "{pass} {row}: a launch-bound call predicted {predicted_ms:.3} ms"
                );
            }
        }
    }
    assert_eq!((fitted_fwd, fitted_bwd), (13, 23));
}

/// H100 has no measured Gated DeltaNet backward: its card's backward is its published forward
/// times the backward/forward ratios measured on H200 (same SMs), to the card's two decimals.
#[test]
fn h100_gated_deltanet_backward_is_its_forward_times_the_h200_ratios() {
    let h100 = gdn_kernel(&hardware_card("h100"));
    let h200 = gdn_kernel(&hardware_card("h200"));
    let round2 = |x: f64| (x * 100.0).round() / 100.0;
    assert_eq!(
        h100.backward_step_us,
        round2(h100.forward_step_us * h200.backward_step_us / h200.forward_step_us)
    );
    assert_eq!(
        h100.backward_ns_per_head_token,
        round2(
            h100.forward_ns_per_head_token * h200.backward_ns_per_head_token
                / h200.forward_ns_per_head_token
        )
    );
    assert!(h100.source.contains("h200-2026-11-30-gdn-a.jsonl"));
}

/// The H200 card's host copy rates are its run's 512 MiB pinned copies.
#[test]
fn h200_host_copy_rates_equal_their_measured_rows() {
    let card = hardware_card("h200");
    let rates = &card["host_copy_gb_per_s"];
    let run = named_run(rates["source"].as_str().expect("source"));
    let largest = rows_of_kind(&run, "host_copy")
        .into_iter()
        .max_by_key(|r| r["bytes"].as_u64().expect("bytes"))
        .expect("host_copy rows");
    for (card_field, row_field) in [
        ("gpu_to_host", "gb_per_s_d2h"),
        ("host_to_gpu", "gb_per_s_h2d"),
        ("each_way_both_directions", "gb_per_s_both_each_way"),
    ] {
        let card_value = rates[card_field].as_f64().expect("a number");
        let measured = largest[row_field].as_f64().expect("a number");
        assert!(
            (card_value - (measured * 100.0).round() / 100.0).abs() < 0.005,
            "{card_field}: card {card_value}, measured {measured:.3}"
        );
    }
}

/// The H200 card's Gated DeltaNet figures are what `scripts/microbench-to-card.py gdn` fits to
/// the runs the card names (Python 3, standard library only; CI's machine has it).
#[test]
fn h200_gated_deltanet_card_is_what_the_fit_script_prints() {
    let card = hardware_card("h200");
    let kernel = &card["linear_attention_kernel"];
    let runs = named_runs(kernel["source"].as_str().expect("source"));
    let output = Command::new("python3")
        .current_dir(ROOT)
        .args([
            "scripts/microbench-to-card.py",
            "gdn",
            &runs.join(","),
            "H200",
        ])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Yaml = serde_yaml::from_slice(&output.stdout).expect("the script prints YAML");
    let fitted = &printed["linear_attention_kernel"];
    for field in [
        "chunk_tokens",
        "value_block",
        "forward_step_us",
        "backward_step_us",
        "forward_ns_per_head_token",
        "backward_ns_per_head_token",
        "reference_state_elems",
    ] {
        assert_eq!(
            fitted[field].as_f64(),
            kernel[field].as_f64(),
            "{field}: the script prints {:?}, the card holds {:?}",
            fitted[field],
            kernel[field]
        );
    }
}
