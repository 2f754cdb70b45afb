//! Property: nothing a user gives is dropped or changed without a note. A random configuration
//! (known fields, as flat keys or inside Megatron-Bridge sections, plus random keys this server
//! does not know) is read and checked; every given setting is then either used as given or
//! listed in `ignored_settings`, and every setting the model needed and was not given is listed
//! in `assumed_defaults`.

use moe_skills::catalog::Catalog;
use moe_skills::inputs::diff::set_fields;
use moe_skills::inputs::overrides::near_miss;
use moe_skills::inputs::read_value;
use moe_skills::model::TrainingConfig;
use moe_skills::tools::feasibility::check_feasibility;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Known settings with values the cost model accepts, and the Bridge section each lives in.
fn known_setting() -> impl Strategy<Value = (&'static str, &'static str, Value)> {
    prop_oneof![
        prop::sample::select(vec![1u32, 2, 4, 8]).prop_map(|v| (
            "model",
            "tensor_model_parallel_size",
            json!(v)
        )),
        prop::sample::select(vec![1u32, 2, 4, 8]).prop_map(|v| (
            "model",
            "context_parallel_size",
            json!(v)
        )),
        prop::sample::select(vec![1u32, 2, 4, 8]).prop_map(|v| (
            "model",
            "pipeline_model_parallel_size",
            json!(v)
        )),
        prop::sample::select(vec![1u32, 8, 16, 32]).prop_map(|v| (
            "model",
            "expert_model_parallel_size",
            json!(v)
        )),
        prop::sample::select(vec![4096u64, 32768, 131072]).prop_map(|v| (
            "model",
            "seq_length",
            json!(v)
        )),
        prop::sample::select(vec![1u32, 2]).prop_map(|v| ("train", "micro_batch_size", json!(v))),
        prop::sample::select(vec![256u32, 1024]).prop_map(|v| (
            "train",
            "global_batch_size",
            json!(v)
        )),
        any::<bool>().prop_map(|v| ("model", "sequence_parallel", json!(v))),
        prop::sample::select(vec![
            json!(["moe_act"]),
            json!(["layernorm", "moe_act"]),
            json!(["mla_up_proj"]),
        ])
        .prop_map(|v| ("model", "recompute_modules", v)),
        any::<bool>().prop_map(|v| ("ddp", "overlap_grad_reduce", json!(v))),
        any::<bool>().prop_map(|v| ("optimizer", "use_distributed_optimizer", json!(v))),
    ]
}

/// Keys no configuration has and that are no typo of one (random words with a prefix).
fn unknown_key() -> impl Strategy<Value = String> {
    "[a-z]{3,8}"
        .prop_map(|word| format!("zz_{word}"))
        .prop_filter("not a near miss", |k| near_miss(k).is_none())
}

fn input() -> impl Strategy<Value = (Value, Vec<(&'static str, Value)>, Vec<String>, bool)> {
    (
        prop::collection::vec(known_setting(), 0..8),
        prop::collection::vec(unknown_key(), 0..4),
        any::<bool>(),
    )
        .prop_map(|(known, unknown, nested)| {
            let mut root = Map::new();
            root.insert("model".into(), json!({}));
            let mut given: Vec<(&'static str, Value)> = Vec::new();
            for (section, key, value) in known {
                given.retain(|(k, _)| *k != key);
                given.push((key, value.clone()));
                if nested {
                    let entry = root.entry(section.to_string()).or_insert_with(|| json!({}));
                    if let Value::Object(s) = entry {
                        s.insert(key.into(), value);
                    }
                } else {
                    root.insert(key.into(), value);
                }
            }
            // Unknown keys go inside a Bridge section (top-level unknown keys are errors).
            let logger = root
                .entry("logger".to_string())
                .or_insert_with(|| json!({}));
            if let Value::Object(s) = logger {
                for key in &unknown {
                    s.insert(key.clone(), json!(1));
                }
            }
            if !nested {
                root.remove("model");
            }
            (Value::Object(root), given, unknown, nested)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn every_setting_is_used_as_given_or_noted((value, given, unknown, _nested) in input()) {
        let mut config: TrainingConfig = match read_value(&value) {
            Ok(c) => c,
            Err(e) => return Err(TestCaseError::fail(format!("{value}: {e}"))),
        };
        let used = set_fields(&config);
        for (key, expected) in &given {
            let noted = config.ignored_settings.iter().any(|i| i.key.ends_with(key));
            prop_assert!(
                used.get(*key) == Some(expected) || noted,
                "{key}={expected} neither used ({:?}) nor noted in {value}", used.get(*key)
            );
        }
        for key in &unknown {
            prop_assert!(
                config.ignored_settings.iter().any(|i| i.key.contains(key.as_str())),
                "unknown key {key} not noted: {:?}", config.ignored_settings
            );
        }
        config.model = Some(moe_skills::model::config::ModelSpec::Id("qwen3-30b-a3b".into()));
        config.hardware = Some("h100".into());
        config.num_gpus = Some(256);
        let out = match check_feasibility(&Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new()), config.clone()) {
            Ok(out) => out,
            // A layout the model refuses is an error that names it: not silent.
            Err(_) => return Ok(()),
        };
        for ignored in &config.ignored_settings {
            prop_assert!(out.notes.ignored_settings.contains(ignored), "{ignored:?} lost");
        }
        // Every default the configuration's own accessors fall back to is stated, and none
        // of them is a setting the user gave.
        let defaults = TrainingConfig::default().assumed_defaults();
        for default in &defaults {
            let was_given = given.iter().any(|(k, _)| *k == default.key);
            let stated = out.notes.assumed_defaults.iter().any(|a| a.key == default.key);
            prop_assert!(was_given != stated,
                "{}: given {was_given}, stated {stated}", default.key);
        }
        prop_assert!(out.rationale.contains("Assumed defaults") || out.notes.assumed_defaults.is_empty());
    }
}

/// Megatron-LM arguments no configuration field names, with values of their own type.
fn megatron_only_argument() -> impl Strategy<Value = (&'static str, Value)> {
    prop_oneof![
        (1u32..100).prop_map(|v| ("log_interval", json!(v))),
        (1u32..10_000).prop_map(|v| ("seed", json!(v))),
        prop::sample::select(vec![1e-4, 3e-4]).prop_map(|v| ("lr", json!(v))),
        // On: a switch left off is Megatron-LM's default, not a setting to note.
        Just(("log_throughput", json!(true))),
        prop::sample::select(vec![1_048_576u64, 4_194_304])
            .prop_map(|v| ("min_offloaded_tensor_size", json!(v))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// A flat mapping in Megatron-LM's argument names (`vars(args)` written out, or a wandb run's
    /// config.yaml of it) reads every setting as given or notes it, and the wandb wrapping reads
    /// the same as the plain mapping.
    #[test]
    fn an_argument_namespace_is_used_as_given_or_noted(
        known in prop::collection::vec(known_setting(), 0..8),
        extra in prop::collection::vec(megatron_only_argument(), 1..4),
    ) {
        let mut flat = Map::new();
        let mut given: Vec<(&'static str, Value)> = Vec::new();
        for (_, key, value) in known {
            given.retain(|(k, _)| *k != key);
            given.push((key, value.clone()));
            flat.insert(key.into(), value);
        }
        for (key, value) in &extra {
            flat.insert((*key).into(), value.clone());
        }
        let config = match read_value(&Value::Object(flat.clone())) {
            Ok(c) => c,
            Err(e) => return Err(TestCaseError::fail(format!("{flat:?}: {e}"))),
        };
        let used = set_fields(&config);
        for (key, expected) in &given {
            let noted = config.ignored_settings.iter().any(|i| i.key.contains(&key.replace('_', "-")));
            prop_assert!(
                used.get(*key) == Some(expected) || noted,
                "{key}={expected} neither used ({:?}) nor noted", used.get(*key)
            );
        }
        for (key, _) in &extra {
            let flag = format!("--{}", key.replace('_', "-"));
            prop_assert!(
                config.ignored_settings.iter().any(|i| i.key == flag),
                "{flag} not noted: {:?}", config.ignored_settings
            );
        }
        let wrapped: Map<String, Value> = flat
            .iter()
            .map(|(k, v)| (k.clone(), json!({ "value": v })))
            .chain([("_wandb".to_owned(), json!({"value": {"cli_version": "0.19.1"}}))])
            .collect();
        let from_wandb = match read_value(&Value::Object(wrapped)) {
            Ok(c) => c,
            Err(e) => return Err(TestCaseError::fail(format!("wandb form: {e}"))),
        };
        prop_assert_eq!(set_fields(&from_wandb), used);
    }
}
