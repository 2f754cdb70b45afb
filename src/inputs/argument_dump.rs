//! A Megatron-LM argument namespace (`vars(args)` after start-up), in the two forms users hold:
//! - the dump a training log prints (`name ..... value` lines, split out by `megatron_log`);
//! - the same namespace written as a YAML/JSON mapping: a wandb run's `config.yaml`
//!   (Megatron-LM passes `vars(args)` as the run's config, `megatron/training/global_vars.py`
//!   `_set_wandb_writer`, d98e8a64; wandb writes each value under `value:`, older releases
//!   beside `desc:`), or `vars(args)` saved as JSON.
//!
//! Each argument becomes the flag that sets it and the command-line reader reads them, so every
//! argument is classified exactly as that flag would be (modelled, architecture, known but
//! unused); what is not an argument is listed as ignored with the reason.

use serde_json::{Map, Value};

use super::megatron_args::defaults::set_switch_off;
use super::megatron_args::{megatron_arguments, parse_megatron_args_for_model};
use super::shell::shell_quote;
use crate::model::config::{is_known_key, ConfigError, IgnoredSetting, ModelSpec, TrainingConfig};

/// Arguments Megatron-LM computes at start-up (not flags); `world_size` is the GPU count.
const DERIVED: &[&str] = &[
    "rank",
    "local_rank",
    "data_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "params_dtype",
    "consumed_train_samples",
    "consumed_valid_samples",
    "skipped_train_samples",
    "variable_seq_lengths",
    "model_parallel_size",
];

/// The dump as a Megatron-LM command line, read by the command-line reader.
pub fn read_argument_dump(
    entries: &[(String, String)],
    model: Option<&ModelSpec>,
) -> Result<TrainingConfig, ConfigError> {
    let list = megatron_arguments()?;
    let mut words: Vec<String> = Vec::new();
    let mut ignored = Vec::new();
    let mut world_size = None;
    for (dest, value) in entries {
        if dest == "world_size" {
            world_size = value.parse::<u32>().ok();
            continue;
        }
        let Some(arg) = list.arguments.iter().find(|a| &a.dest == dest) else {
            let reason = if DERIVED.contains(&dest.as_str()) {
                "computed by Megatron-LM at start-up from the other arguments"
            } else {
                "not a Megatron-LM command-line argument (set by the launcher or a newer release)"
            };
            ignored.push(IgnoredSetting::new(format!("{dest} = {value}"), reason));
            continue;
        };
        if value == "None" {
            continue;
        }
        let positive = arg
            .options
            .iter()
            .find(|o| !o.starts_with("--no-") && !o.starts_with("--disable-"));
        let negative = arg
            .options
            .iter()
            .find(|o| o.starts_with("--no-") || o.starts_with("--disable-"));
        match (arg.action.as_str(), value.as_str()) {
            ("store_true", "True") | ("boolean_optional", "True") => {
                words.extend(positive.or(arg.options.first()).cloned())
            }
            ("store_false", "False") => words.extend(arg.options.first().cloned()),
            ("boolean_optional", "False") => words.extend(negative.cloned()),
            ("store_true" | "store_false" | "boolean_optional", _) => {}
            _ => {
                let Some(option) = arg.options.first() else {
                    continue;
                };
                let items = python_list_items(value);
                if items.is_empty() {
                    continue;
                }
                words.push(option.clone());
                words.extend(items);
            }
        }
    }
    let quoted: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
    let mut config = parse_megatron_args_for_model(&quoted.join(" "), model)?;
    // A switch the dump prints as False is off, though no flag says so; where the cost model
    // would otherwise assume it on, it is set off here. (A switch the dump leaves out, as an
    // abridged dump does, keeps the cost model's assumption, listed as such.)
    for (dest, value) in entries {
        if value == "False" {
            set_switch_off(&mut config, dest);
        }
    }
    // Without grouped GEMMs Megatron-Core runs the local experts' GEMMs one after another
    // (SequentialMLP), which the time model does not price; a dump of a model with experts that
    // prints the switch off says so, as a whole command line without the flag does.
    let has_experts = entries
        .iter()
        .any(|(d, v)| d == "num_experts" && v.parse::<u64>().is_ok_and(|n| n > 1));
    if has_experts
        && entries
            .iter()
            .any(|(d, v)| d == "moe_grouped_gemm" && v == "False")
    {
        ignored.push(IgnoredSetting::new(
            "moe_grouped_gemm = False",
            "the local experts run one after another (SequentialMLP), each with its own GEMMs \
             and launches; the step time is priced for grouped GEMMs (TEGroupedMLP), so it is \
             optimistic for this run",
        ));
    }
    if let Some(gpus) = world_size {
        config.num_gpus = Some(gpus);
    }
    config.ignored_settings.extend(ignored);
    Ok(config)
}

/// `['a', 'b']` / `[1, 2]` / a scalar, as argument words.
fn python_list_items(value: &str) -> Vec<String> {
    let trimmed = value.trim();
    // Enum members print as `AttnBackend.auto`; the flag takes the member's name.
    let unquote = |s: &str| {
        let s = s.trim().trim_matches(['\'', '"']);
        match s.split_once('.') {
            Some((class, member))
                if class.starts_with(|c: char| c.is_ascii_uppercase())
                    && !member.is_empty()
                    && member
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                member.to_string()
            }
            _ => s.to_string(),
        }
    };
    match trimmed.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        Some(inner) => inner
            .split(',')
            .map(unquote)
            .filter(|s| !s.is_empty())
            .collect(),
        None => vec![unquote(trimmed)],
    }
}

/// Whether `key` is a Megatron-LM argument's `dest` (its name in `vars(args)`).
pub fn is_megatron_dest(key: &str) -> bool {
    megatron_arguments().is_ok_and(|list| list.by_dest(key).is_some())
}

/// Keys wandb writes beside a run's config in its `config.yaml`.
const WANDB_KEYS: &[&str] = &["_wandb", "wandb_version"];

/// A wandb `config.yaml`'s values, unwrapped (`key: {value: X}` or, before wandb 0.19,
/// `key: {desc: null, value: X}`), without wandb's own keys; `None` when `obj` is not one.
pub fn unwrap_wandb_config(obj: &Map<String, Value>) -> Option<Map<String, Value>> {
    let wrapped = |v: &Value| {
        v.as_object().is_some_and(|o| {
            o.contains_key("value") && o.keys().all(|k| k == "value" || k == "desc")
        })
    };
    let settings: Vec<(&String, &Value)> = obj
        .iter()
        .filter(|(k, _)| !WANDB_KEYS.contains(&k.as_str()))
        .collect();
    let marked = obj.contains_key("_wandb") || obj.contains_key("wandb_version");
    if settings.is_empty() || !settings.iter().all(|(_, v)| wrapped(v)) {
        return None;
    }
    // Without wandb's own keys, one wrapped value alone is too little to tell the form by.
    if !marked && settings.len() < 2 {
        return None;
    }
    Some(
        settings
            .into_iter()
            .map(|(k, v)| (k.clone(), v.get("value").cloned().unwrap_or(Value::Null)))
            .collect(),
    )
}

/// A value of `vars(args)` as the log's dump prints it (Python's `repr`), or `None` for a
/// mapping, which no argument holds.
fn dump_text(value: &Value) -> Option<String> {
    let scalar = |v: &Value, quote: bool| match v {
        Value::Null => Some("None".to_owned()),
        Value::Bool(true) => Some("True".to_owned()),
        Value::Bool(false) => Some("False".to_owned()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) if quote => Some(format!("'{s}'")),
        Value::String(s) => Some(s.clone()),
        Value::Array(_) | Value::Object(_) => None,
    };
    match value {
        Value::Array(items) => {
            let items: Option<Vec<String>> = items.iter().map(|v| scalar(v, true)).collect();
            items.map(|items| format!("[{}]", items.join(", ")))
        }
        other => scalar(other, false),
    }
}

/// Reads `vars(args)` given as a mapping (see the module notes). Keys that are configuration
/// fields and not Megatron-LM arguments (`model`, `hardware`, `num_gpus`, `precision`) are
/// applied over what the arguments give, as settings given beside a file are; a `model` there
/// is the model, and the arguments' architecture is then listed as ignored.
pub fn read_argument_namespace(obj: &Map<String, Value>) -> Result<TrainingConfig, ConfigError> {
    let mut entries = Vec::new();
    let mut beside = Map::new();
    let mut ignored = Vec::new();
    for (key, value) in obj {
        if !is_megatron_dest(key) && is_known_key(key) {
            beside.insert(key.clone(), value.clone());
            continue;
        }
        match dump_text(value) {
            Some(text) => entries.push((key.clone(), text)),
            None => ignored.push(IgnoredSetting::new(
                key.clone(),
                "a nested value: no Megatron-LM argument holds one",
            )),
        }
    }
    let model: Option<ModelSpec> = beside
        .get("model")
        .map(|m| serde_json::from_value(m.clone()))
        .transpose()
        .map_err(|e| ConfigError::InvalidValue {
            key: "model".into(),
            message: e.to_string(),
        })?;
    let mut config = read_argument_dump(&entries, model.as_ref())?;
    if !beside.is_empty() {
        let Ok(Value::Object(mut fields)) = serde_json::to_value(&config) else {
            return Err(ConfigError::Parse(
                "the arguments' configuration could not be merged".into(),
            ));
        };
        fields.retain(|_, v| !v.is_null());
        // What the arguments only assumed gives way to a value given beside them.
        config
            .assumed_defaults
            .retain(|a| !beside.contains_key(&a.key));
        fields.extend(beside);
        let mut merged = super::overrides::read_value(&Value::Object(fields))?;
        merged
            .ignored_settings
            .splice(0..0, config.ignored_settings);
        merged
            .assumed_defaults
            .splice(0..0, config.assumed_defaults);
        config = merged;
    }
    config.ignored_settings.extend(ignored);
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::read_value;
    use serde_json::json;

    fn read(value: Value) -> Result<TrainingConfig, ConfigError> {
        read_value(&value)
    }

    fn ignored_keys(config: &TrainingConfig) -> Vec<String> {
        config
            .ignored_settings
            .iter()
            .map(|i| i.key.clone())
            .collect()
    }

    /// A configuration written in Megatron-LM's names (`vars(args)`) reads as those flags would:
    /// a field of this server beside them (`model`, `hardware`) still counts, and the arguments
    /// the model does not use are listed, not refused as unknown keys.
    #[test]
    fn megatron_names_in_a_mapping_read_as_their_flags() {
        let config = read(json!({
            "model": "qwen3-30b-a3b",
            "hardware": "h100",
            "world_size": 32,
            "tensor_model_parallel_size": 2,
            "context_parallel_size": 4,
            "expert_model_parallel_size": 8,
            "recompute_granularity": "selective",
            "recompute_modules": ["moe_act", "layernorm"],
            "sequence_parallel": true,
            "log_interval": 1,
            "min_offloaded_tensor_size": 1048576,
            "hidden_size": 4096,
        }))
        .expect("reads");
        assert_eq!((config.tp(), config.cp(), config.ep()), (2, 4, 8));
        assert_eq!(config.num_gpus, Some(32));
        assert_eq!(config.hardware.as_deref(), Some("h100"));
        assert_eq!(config.model, Some(ModelSpec::Id("qwen3-30b-a3b".into())));
        assert_eq!(
            config.recompute_modules,
            read(json!({"recompute_modules": ["moe_act", "layernorm"]}))
                .expect("fields read")
                .recompute_modules
        );
        let ignored = ignored_keys(&config);
        for flag in [
            "--log-interval",
            "--min-offloaded-tensor-size",
            "--hidden-size",
        ] {
            assert!(ignored.iter().any(|k| k == flag), "{flag}: {ignored:?}");
        }
    }

    /// wandb's `config.yaml`, in both of its forms, reads as the mapping it wraps; its own
    /// metadata is listed as such.
    #[test]
    fn a_wandb_config_reads_as_the_values_it_wraps() {
        let plain = json!({
            "model": "qwen3-30b-a3b",
            "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 4,
            "log_interval": 10,
        });
        let expected = read(plain.clone()).expect("plain reads");
        let Value::Object(fields) = plain else {
            panic!("an object")
        };
        let old: Map<String, Value> = fields
            .iter()
            .map(|(k, v)| (k.clone(), json!({"desc": null, "value": v})))
            .chain([
                ("wandb_version".to_owned(), json!(1)),
                (
                    "_wandb".to_owned(),
                    json!({"desc": null, "value": {"cli_version": "0.16.6"}}),
                ),
            ])
            .collect();
        let new: Map<String, Value> = fields
            .iter()
            .map(|(k, v)| (k.clone(), json!({ "value": v })))
            .chain([(
                "_wandb".to_owned(),
                json!({"value": {"cli_version": "0.19.1"}}),
            )])
            .collect();
        for wrapped in [old, new] {
            let config = read(Value::Object(wrapped)).expect("wandb config reads");
            assert_eq!((config.tp(), config.pp()), (expected.tp(), expected.pp()));
            assert_eq!(config.model, expected.model);
            let ignored = ignored_keys(&config);
            assert!(ignored.iter().any(|k| k == "--log-interval"), "{ignored:?}");
            assert!(ignored.iter().any(|k| k == "_wandb"), "{ignored:?}");
        }
    }

    /// Megatron-Bridge logs its whole configuration to wandb by section (`cfg.to_dict()`):
    /// unwrapped, it is a Bridge configuration and reads as one.
    #[test]
    fn a_bridge_runs_wandb_config_reads_by_section() {
        let config = read(json!({
            "_wandb": {"value": {"cli_version": "0.19.1"}},
            "model": {"value": {"tensor_model_parallel_size": 4, "context_parallel_size": 2,
                                "seq_length": 65536}},
            "train": {"value": {"global_batch_size": 128, "micro_batch_size": 1}},
        }))
        .expect("reads");
        assert_eq!((config.tp(), config.cp()), (4, 2));
        assert_eq!(config.seq_length, Some(65536));
        assert_eq!(config.global_batch_size, Some(128));
    }

    /// What is not a namespace stays as it was: a typo of a field is refused with the field
    /// named, and the Bridge performance configs' own fields (some of which are Megatron-LM
    /// argument names too) keep their reading.
    #[test]
    fn typos_and_bridge_performance_fields_keep_their_reading() {
        let err = read(json!({"tensor_model_paralel_size": 2}))
            .expect_err("a typo is refused")
            .to_string();
        assert!(err.contains("tensor_model_parallel_size"), "{err}");
        let config = read(json!({
            "tensor_model_parallel_size": 2,
            "nccl_ub": true,
        }))
        .expect("a performance config reads");
        assert!(
            config
                .ignored_settings
                .iter()
                .any(|i| i.key == "nccl_ub" && i.reason.contains("not modelled")),
            "{:?}",
            config.ignored_settings
        );
    }

    /// A nested mapping is no argument's value: it is listed, not passed on as a flag.
    #[test]
    fn a_nested_value_in_a_namespace_is_listed() {
        let config = read(json!({
            "tensor_model_parallel_size": 2,
            "log_interval": 1,
            "kitchen_config": {"a": 1},
        }))
        .expect("reads");
        assert!(
            ignored_keys(&config).iter().any(|k| k == "kitchen_config"),
            "{:?}",
            config.ignored_settings
        );
    }

    /// A dump of a model with experts that prints `moe_grouped_gemm False` says the step is
    /// priced for grouped GEMMs; a dense model's dump does not.
    #[test]
    fn experts_without_grouped_gemm_are_said() {
        let noted = |experts: &str| {
            let entries: Vec<(String, String)> = [
                ("num_experts", experts),
                ("moe_grouped_gemm", "False"),
                ("tensor_model_parallel_size", "1"),
            ]
            .iter()
            .map(|(d, v)| (d.to_string(), v.to_string()))
            .collect();
            read_argument_dump(&entries, Some(&ModelSpec::Id("qwen3-30b-a3b".into())))
                .expect("reads")
                .ignored_settings
                .iter()
                .any(|i| i.key == "moe_grouped_gemm = False" && i.reason.contains("SequentialMLP"))
        };
        assert!(noted("128"));
        assert!(!noted("None"));
    }

    #[test]
    fn values_print_as_the_logs_dump_prints_them() {
        assert_eq!(dump_text(&json!(true)).as_deref(), Some("True"));
        assert_eq!(dump_text(&json!(null)).as_deref(), Some("None"));
        assert_eq!(dump_text(&json!(0.0003)).as_deref(), Some("0.0003"));
        assert_eq!(
            dump_text(&json!(["moe_act", "layernorm"])).as_deref(),
            Some("['moe_act', 'layernorm']")
        );
        assert_eq!(dump_text(&json!([8, 2])).as_deref(), Some("[8, 2]"));
        assert_eq!(dump_text(&json!({"a": 1})), None);
        assert_eq!(dump_text(&json!([[1]])), None);
    }
}
