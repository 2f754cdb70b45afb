//! Real Megatron-Bridge commits that change recompute, CP, EP, MBS, the MoE dispatcher or
//! activation offload in recipe and performance-config Python files, reduced to their setting
//! lines (tests/fixtures/bridge-commits/README.md lists them). For every recipe of each
//! before/after pair, the reader's settings must differ in exactly the fields the commit
//! changed, with the commit's values.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use moe_skills::inputs::python_recipe::RecipeFile;
use serde_json::Value;

const UNSET: &str = "<unset>";

fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Object(_) if prefix.is_empty() => {}
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

fn leaves(file: &RecipeFile, recipe: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    if let Ok(settings) = file.settings(recipe) {
        flatten("", &settings.tree, &mut out);
    }
    out
}

#[test]
fn each_commit_changes_exactly_the_fields_it_changed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bridge-commits");
    let expected: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    assert!(expected.len() >= 3);
    for commit in &expected {
        let fixture = commit["fixture"].as_str().unwrap();
        let read = |side: &str| {
            let text = std::fs::read_to_string(dir.join(format!("{fixture}.{side}.py"))).unwrap();
            RecipeFile::parse(&text).unwrap_or_else(|e| panic!("{fixture}.{side}: {e}"))
        };
        let (before, after) = (read("before"), read("after"));
        let names: BTreeSet<String> = before
            .recipes()
            .into_iter()
            .chain(after.recipes())
            .map(|s| s.name)
            .collect();
        let changes = commit["changes"].as_object().unwrap();
        for name in &names {
            let (old, new) = (leaves(&before, name), leaves(&after, name));
            let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
            let mut got: Vec<(String, Value, Value)> = keys
                .into_iter()
                .filter(|k| old.get(*k) != new.get(*k))
                .map(|k| {
                    let side = |m: &BTreeMap<String, Value>| {
                        m.get(k).cloned().unwrap_or_else(|| Value::from(UNSET))
                    };
                    (k.clone(), side(&old), side(&new))
                })
                .collect();
            let mut want: Vec<(String, Value, Value)> = changes
                .get(name)
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .map(|c| {
                            (
                                c[0].as_str().unwrap().to_owned(),
                                c[1].clone(),
                                c[2].clone(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            got.sort_by(|a, b| a.0.cmp(&b.0));
            want.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(got, want, "{fixture}: recipe `{name}`");
        }
        for name in changes.keys() {
            assert!(
                names.contains(name),
                "{fixture}: `{name}` is not in the fixture"
            );
        }
    }
}

#[test]
fn changed_lines_fall_in_the_recipe_that_holds_them() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bridge-commits");
    let text = std::fs::read_to_string(dir.join("ecfcd8460-dsv3-b300-vpp-mbs.after.py")).unwrap();
    let file = RecipeFile::parse(&text).unwrap();
    let line_of = |needle: &str, nth: usize| {
        text.lines()
            .enumerate()
            .filter(|(_, l)| l.contains(needle))
            .nth(nth)
            .map(|(i, _)| i + 1)
            .unwrap()
    };
    let at = |line| file.recipe_at_line(line).map(|s| s.name);
    assert_eq!(
        at(line_of("virtual_pipeline_model_parallel_size = 2", 0)).as_deref(),
        Some("deepseek_v3_pretrain_256gpu_b300_bf16_config")
    );
    assert_eq!(
        at(line_of("micro_batch_size = 1", 1)).as_deref(),
        Some("deepseek_v3_pretrain_256gpu_b300_fp8mx_config")
    );
}
