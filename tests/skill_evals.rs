//! Every embedded skill's `evals/evals.json` (the Megatron-Bridge format: id, question,
//! expected_skill, expected_script, ground_truth, expected_behavior) is well formed and names
//! its own skill; each skill has worked examples under `references/`; and every
//! tool-answerable item (`tool_call` + `expect`) is replayed against the tool function and its
//! structured answer checked (`equals`, `min`/`max`, `contains` at a JSON pointer). The items
//! and examples are written by `scripts/skill-references.py` from the binary's answers.

use std::path::{Path, PathBuf};

use moe_skills::catalog::Catalog;
use moe_skills::tools::{feasibility, plan, recipe, recompute, size_cp, triage};
use serde_json::Value;

fn skills_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")
}

fn skill_folders() -> Vec<PathBuf> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(skills_root())
        .expect("skills/")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.join("SKILL.md").is_file())
        .collect();
    folders.sort();
    folders
}

/// The structured answer of `tool` for `arguments`, as MCP's `structuredContent` carries it.
fn call(catalog: &Catalog, tool: &str, arguments: Value) -> Result<Value, String> {
    fn input<T: serde::de::DeserializeOwned>(arguments: Value) -> Result<T, String> {
        serde_json::from_value(arguments).map_err(|error| error.to_string())
    }
    fn answer<T: serde::Serialize, E: std::fmt::Display>(
        out: Result<T, E>,
    ) -> Result<Value, String> {
        out.map_err(|error| error.to_string())
            .and_then(|out| serde_json::to_value(out).map_err(|error| error.to_string()))
    }
    match tool {
        "size_cp" => answer(size_cp::size_cp(catalog, input(arguments)?)),
        "lookup_recipe" => answer(recipe::lookup_recipe(catalog, input(arguments)?)),
        "choose_recompute" => answer(recompute::choose_recompute(catalog, input(arguments)?)),
        "check_feasibility" => answer(feasibility::check_feasibility(catalog, input(arguments)?)),
        "plan_layouts" => answer(plan::plan_layouts(catalog, input(arguments)?)),
        "triage_oom" => answer(triage::triage_oom(catalog, input(arguments)?)),
        other => Err(format!("unknown tool `{other}`")),
    }
}

/// The problems of one expectation against the answer, if any.
fn check_expectation(answer: &Value, expect: &Value) -> Option<String> {
    let path = expect["path"].as_str()?;
    let Some(value) = answer.pointer(path) else {
        return Some(format!("{path}: not in the answer"));
    };
    if let Some(wanted) = expect.get("equals") {
        if value != wanted {
            return Some(format!("{path}: {value} != {wanted}"));
        }
    }
    if let Some(low) = expect.get("min").and_then(Value::as_f64) {
        if value.as_f64().is_none_or(|v| v < low) {
            return Some(format!("{path}: {value} < {low}"));
        }
    }
    if let Some(high) = expect.get("max").and_then(Value::as_f64) {
        if value.as_f64().is_none_or(|v| v > high) {
            return Some(format!("{path}: {value} > {high}"));
        }
    }
    if let Some(text) = expect.get("contains").and_then(Value::as_str) {
        if !value.as_str().is_some_and(|v| v.contains(text)) {
            return Some(format!("{path}: does not contain {text:?}"));
        }
    }
    None
}

#[test]
fn every_skill_has_worked_examples_and_evals_that_hold() {
    let catalog = Catalog::load_with_embedded(Vec::<PathBuf>::new());
    let folders = skill_folders();
    assert!(folders.len() >= 5, "{folders:?}");
    let mut ids = std::collections::BTreeSet::new();
    let mut replayed = 0;
    let mut problems = Vec::new();
    for folder in &folders {
        let skill = folder
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let references: Vec<String> = std::fs::read_dir(folder.join("references"))
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            references.iter().any(|name| name.ends_with(".md")),
            "{skill}: no worked example in references/"
        );
        let text = std::fs::read_to_string(folder.join("evals/evals.json"))
            .unwrap_or_else(|error| panic!("{skill}: evals/evals.json: {error}"));
        // The binary serves the same files (include_dir takes every subfolder).
        let embedded = catalog.skill(skill).expect("skill in the embedded catalog");
        for path in references
            .iter()
            .map(|name| format!("references/{name}"))
            .chain(["evals/evals.json".to_string()])
        {
            let on_disk = std::fs::read_to_string(folder.join(&path)).expect("readable");
            assert_eq!(
                embedded.file(&path).and_then(|f| f.text()),
                Some(on_disk.as_str()),
                "{skill}: the embedded catalog lacks {path} or holds another version"
            );
        }
        let items: Vec<Value> = serde_json::from_str(&text).expect("evals.json is a JSON list");
        assert!(!items.is_empty(), "{skill}: no evals");
        for item in &items {
            let id = item["id"].as_str().expect("id");
            assert!(ids.insert(id.to_string()), "duplicate eval id {id}");
            for key in ["question", "ground_truth"] {
                assert!(
                    item[key].as_str().is_some_and(|t| !t.is_empty()),
                    "{id}: {key}"
                );
            }
            assert_eq!(item["expected_skill"], skill, "{id}");
            assert!(
                item.get("expected_script").is_some(),
                "{id}: expected_script"
            );
            let behaviour = item["expected_behavior"]
                .as_array()
                .expect("expected_behavior");
            assert!(
                !behaviour.is_empty() && behaviour.iter().all(Value::is_string),
                "{id}"
            );
            if let Some(reference) = item.get("reference").and_then(Value::as_str) {
                assert!(
                    folder.join(reference).is_file(),
                    "{id}: {reference} missing"
                );
            }
            let Some(tool_call) = item.get("tool_call") else {
                continue;
            };
            let tool = tool_call["tool"].as_str().expect("tool_call.tool");
            let expects = item["expect"].as_array().expect("expect with tool_call");
            assert!(!expects.is_empty(), "{id}: nothing expected");
            match call(&catalog, tool, tool_call["arguments"].clone()) {
                Ok(answer) => {
                    replayed += 1;
                    problems.extend(
                        expects
                            .iter()
                            .filter_map(|e| check_expectation(&answer, e))
                            .map(|p| format!("{id} ({tool}): {p}")),
                    );
                }
                Err(error) => problems.push(format!("{id} ({tool}): {error}")),
            }
        }
    }
    assert!(
        replayed >= folders.len(),
        "only {replayed} tool-answerable evals"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn an_expectation_can_fail() {
    let answer = serde_json::json!({"fits": true, "peak": 70.0, "text": "activations +3"});
    let e = |v: Value| check_expectation(&answer, &v);
    assert!(e(serde_json::json!({"path": "/fits", "equals": true})).is_none());
    assert!(e(serde_json::json!({"path": "/fits", "equals": false})).is_some());
    assert!(e(serde_json::json!({"path": "/peak", "min": 71.0, "max": 90.0})).is_some());
    assert!(e(serde_json::json!({"path": "/peak", "min": 60.0, "max": 69.0})).is_some());
    assert!(e(serde_json::json!({"path": "/text", "contains": "weights"})).is_some());
    assert!(e(serde_json::json!({"path": "/missing", "equals": 1})).is_some());
}
