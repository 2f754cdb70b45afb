//! Real Megatron-Bridge commits (`git show` of the recipe file, in
//! `tests/fixtures/bridge-commits/*.diff`): the diff reader finds every recipe they change and,
//! in each, every modelled field with its value before and after (`expected.json`).

use std::path::Path;

use moe_skills::inputs::diff::read_diff;
use moe_skills::model::config::is_known_key;
use serde_json::Value;

fn fixtures() -> (std::path::PathBuf, Vec<Value>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bridge-commits");
    let expected = serde_json::from_str(
        &std::fs::read_to_string(dir.join("expected.json")).expect("expected.json"),
    )
    .expect("expected.json is JSON");
    (dir, expected)
}

#[test]
fn each_real_commit_diff_names_every_modelled_change_per_recipe() {
    let (dir, expected) = fixtures();
    for commit in &expected {
        let fixture = commit["fixture"].as_str().unwrap();
        let diff = std::fs::read_to_string(dir.join(format!("{fixture}.diff"))).unwrap();
        let reading = read_diff(&diff).unwrap_or_else(|e| panic!("{fixture}: {e}"));
        for (recipe, changes) in commit["changes"].as_object().unwrap() {
            let found = reading
                .recipes
                .iter()
                .find(|r| &r.recipe == recipe)
                .unwrap_or_else(|| {
                    let names: Vec<&str> =
                        reading.recipes.iter().map(|r| r.recipe.as_str()).collect();
                    panic!("{fixture}: recipe {recipe} not found among {names:?}")
                });
            for change in changes.as_array().unwrap() {
                let key = change[0].as_str().unwrap();
                let field = key.rsplit('.').next().unwrap();
                let side = |v: &Value| (!v.is_null() && v != "<unset>").then(|| v.clone());
                // `None` written over an inherited value reads as "not set" on both sides.
                if !is_known_key(field) || side(&change[1]) == side(&change[2]) {
                    continue;
                }
                // A deleted line leaves the recipe with a value it inherits, which the diff
                // does not show: the reader lists the field as not modelled instead.
                let shown_before = diff
                    .lines()
                    .any(|l| l.starts_with('-') && !l.starts_with("---") && l.contains(field));
                // `= None` over a value the recipe inherits: the diff shows no earlier value,
                // so it cannot tell a reset from a no-op.
                if change[2].is_null() && !shown_before {
                    continue;
                }
                if change[2] == "<unset>" {
                    assert!(
                        found
                            .unevaluated
                            .iter()
                            .any(|u| u.key.ends_with(&format!(": {field}"))),
                        "{fixture}/{recipe}: deleted {field} not listed; got {:?}",
                        found.unevaluated
                    );
                    continue;
                }
                let got = found
                    .changes
                    .iter()
                    .find(|c| c.field == field)
                    .unwrap_or_else(|| {
                        panic!(
                            "{fixture}/{recipe}: {field} not reported; got {:?}",
                            found.changes
                        )
                    });
                // A value the recipe inherits from its base recipe is not in the diff: the diff
                // alone cannot know it (triage takes it from `before`). One the diff shows must match.
                if shown_before || got.before.is_some() {
                    assert_eq!(
                        got.before,
                        side(&change[1]),
                        "{fixture}/{recipe}/{field} before"
                    );
                }
                assert_eq!(
                    got.after,
                    side(&change[2]),
                    "{fixture}/{recipe}/{field} after"
                );
            }
        }
    }
}

#[test]
fn a_whole_commit_reads_its_recipe_past_the_model_card_and_tests() {
    let (dir, _) = fixtures();
    let diff = std::fs::read_to_string(dir.join("46990b42c-whole-commit.diff")).unwrap();
    let reading = read_diff(&diff).unwrap();
    assert_eq!(reading.files.len(), 3, "{:?}", reading.files);
    let fields: Vec<&str> = reading.changes.iter().map(|c| c.field.as_str()).collect();
    for field in [
        "recompute_granularity",
        "recompute_method",
        "recompute_num_layers",
    ] {
        assert!(fields.contains(&field), "{field} not in {fields:?}");
    }
    assert_eq!(reading.recipes.len(), 1, "{:?}", reading.recipes);
}

/// Each real commit triages without error from its `git show` alone, against a `before` given
/// as text with the model and hardware beside it, and names the modelled fields it changes.
#[test]
fn each_real_commit_triages() {
    use moe_skills::catalog::Catalog;
    use moe_skills::inputs::ConfigSource;
    use moe_skills::model::config::ModelSpec;
    use moe_skills::tools::triage::{triage_oom, TriageOomInput};

    let (dir, expected) = fixtures();
    let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
    let before = "model:\n  tensor_model_parallel_size: 1\n  pipeline_model_parallel_size: 4\n  \
                  expert_model_parallel_size: 8\n  seq_length: 8192\ntrain:\n  global_batch_size: 256\n";
    for commit in &expected {
        let fixture = commit["fixture"].as_str().unwrap();
        let diff = std::fs::read_to_string(dir.join(format!("{fixture}.diff"))).unwrap();
        let out = triage_oom(
            &catalog,
            TriageOomInput {
                before: ConfigSource::Text(before.into()),
                after: None,
                diff: Some(diff),
                recipe: None,
                model: Some(ModelSpec::Id("qwen3-30b-a3b".into())),
                hardware: Some("h100".into()),
                num_gpus: Some(64),
                modules: Default::default(),
            },
        )
        .unwrap_or_else(|e| panic!("{fixture}: {e}"));
        let triaged: Vec<&str> = std::iter::once(&out)
            .chain(&out.other_recipes)
            .filter_map(|o| o.recipe.as_deref())
            .collect();
        assert!(!triaged.is_empty(), "{fixture}: no recipe triaged");
        for each in std::iter::once(&out).chain(&out.other_recipes) {
            assert!(
                !each.causes.is_empty(),
                "{fixture}/{:?}: no cause",
                each.recipe
            );
            // Every cause is a field the diff changed, with different values on each side.
            for cause in &each.causes {
                assert_ne!(
                    cause.before, cause.after,
                    "{fixture}/{:?}: {cause:?}",
                    each.recipe
                );
            }
        }
    }
}
