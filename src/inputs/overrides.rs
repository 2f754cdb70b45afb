//! Flat YAML/JSON configurations and Megatron-Bridge style override files (`model:`,
//! `train:`, `mixed_precision:` sections): the keys the cost model knows are lifted into one
//! flat [`TrainingConfig`]; every other key is listed in `ignored_settings` with the reason.
//! A mapping in Megatron-LM's argument names, or wrapped as wandb writes it, goes to
//! `argument_dump`.

use serde_json::{Map, Value};

use super::argument_dump::{is_megatron_dest, read_argument_namespace, unwrap_wandb_config};
use super::yaml_document::parse_yaml_document;

use crate::model::config::{
    closest_key, describe_serde_error, is_known_key, merge_cuda_graph_names, ConfigError,
    IgnoredSetting, Precision, TrainingConfig,
};

/// Megatron-Bridge top-level sections whose known keys are lifted into the flat config (the
/// fields of `ConfigContainer`, `src/megatron/bridge/training/config.py`, Megatron-Bridge 067f987d).
const BRIDGE_SECTIONS: &[&str] = &[
    "model",
    "train",
    "optimizer",
    "ddp",
    "dataset",
    "comm_overlap",
    "mixed_precision",
    "checkpoint",
    "logger",
    "scheduler",
    "dist",
    "tokenizer",
    "rng",
    "profiling",
    "ft",
    "straggler",
    "nvrx_straggler",
    "rerun_state_machine",
    "inprocess_restart",
    "peft",
    "validation",
    "env_vars",
    "optimizer_config_override_provider",
    "tensor_inspect",
];

/// HuggingFace config.json)?
fn is_bridge_model_section(obj: &Map<String, Value>) -> bool {
    if obj.contains_key("num_hidden_layers") || obj.contains_key("architectures") {
        return false;
    }
    obj.keys()
        .any(|k| k != "model" && (is_known_key(k) || near_miss(k).is_some()))
        || obj.contains_key("num_layers")
}

/// Map Megatron-Bridge `mixed_precision` recipe names to a precision.
fn precision_from_recipe_name(name: &str) -> Option<Precision> {
    let n = name.to_ascii_lowercase();
    if n.contains("nvfp4") || n.contains("fp4") {
        Some(Precision::Nvfp4)
    } else if n.contains("mx") {
        Some(Precision::Mxfp8)
    } else if n.contains("block") || n.contains("sc") && n.contains("fp8") && n.contains("sub") {
        Some(Precision::Fp8Blockwise)
    } else if n.contains("current") || n.contains("_cs") || n.contains("tensorwise") {
        Some(Precision::Fp8Tensorwise)
    } else if n.contains("delayed") {
        Some(Precision::Fp8Delayed)
    } else if n.contains("fp8") {
        Some(Precision::Fp8Blockwise)
    } else if n.contains("bf16") {
        Some(Precision::Bf16)
    } else {
        None
    }
}

/// Reads a flat config or a Megatron-Bridge style nested override file from YAML.
pub fn read_yaml(text: &str) -> Result<TrainingConfig, ConfigError> {
    let value: Value = parse_yaml_document(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
    read_value(&value)
}

/// Reads a flat config or a Megatron-Bridge style nested override object.
///
/// Keys are judged where they stand: a field (or alias) of the configuration is used; a
/// Megatron-Bridge performance-launcher name is translated; a key one typo away from a field
/// is an error naming the field, at any nesting level; any other key inside a Bridge section
/// is a Bridge setting the cost model does not use and is listed in `ignored_settings`.
pub fn read_value(value: &Value) -> Result<TrainingConfig, ConfigError> {
    let obj = match value {
        Value::Object(o) => o,
        Value::Null => return Ok(TrainingConfig::default()),
        _ => {
            return Err(ConfigError::Parse(
                "a training configuration must be a mapping of keys to values".into(),
            ))
        }
    };
    if let Some(unwrapped) = unwrap_wandb_config(obj) {
        let mut config = read_value(&Value::Object(unwrapped))?;
        config.ignored_settings.push(IgnoredSetting::new(
            "_wandb",
            "a wandb run's config.yaml: its settings are read from under their `value:` keys, and wandb's own run metadata is not a setting",
        ));
        return Ok(config);
    }
    if is_argument_namespace(obj) {
        return read_argument_namespace(obj);
    }
    let mut flat = Map::new();
    let mut ignored = Vec::new();
    for (key, val) in obj {
        let section = BRIDGE_SECTIONS.contains(&key.as_str()) && val.is_object();
        let nested_model = key == "model"
            && val
                .as_object()
                .map(is_bridge_model_section)
                .unwrap_or(false);
        if section && (key != "model" || nested_model) {
            if key == "peft" {
                // A PEFT section (LoRA, DoRA) freezes the base weights, whatever its fields.
                flat.insert("peft".into(), Value::Bool(true));
            }
            if let Some(inner) = val.as_object() {
                lift_section(key, inner, &mut flat, &mut ignored)?;
            }
        } else if val.is_null() && key != "model" && BRIDGE_SECTIONS.contains(&key.as_str()) {
            // `cfg.comm_overlap = None` (Bridge recipes switch a section off this way).
            ignored.push(IgnoredSetting::new(
                key.clone(),
                "a Megatron-Bridge section set to None: none of its settings are given, so \
                 the defaults listed apply",
            ));
        } else if key == "mixed_precision" {
            match val.as_str().and_then(precision_from_recipe_name) {
                Some(p) => set_precision(&mut flat, p),
                None => ignored.push(IgnoredSetting::new(
                    format!("mixed_precision={val}"),
                    "not a mixed-precision recipe name this server knows (bf16_mixed, bf16_with_fp8_current_scaling_mixed, bf16_with_mxfp8_mixed, ...); BF16 assumed unless `precision` is given",
                )),
            }
        } else if let Some(field) = launcher_alias(key) {
            insert_alias(&mut flat, key, field, val)?;
        } else if is_known_key(key) {
            flat.insert(canonical_key(key).to_owned(), val.clone());
        } else if let Some(reason) = perf_config_field_reason(key) {
            ignored.push(IgnoredSetting::new(key.clone(), reason));
        } else {
            return Err(ConfigError::UnknownKey {
                key: key.clone(),
                suggestion: closest_key(key),
            });
        }
    }
    merge_cuda_graph_names(&mut flat)?;
    let mut cfg: TrainingConfig = serde_json::from_value(Value::Object(flat.clone()))
        .map_err(|e| describe_serde_error(&flat, e))?;
    cfg.ignored_settings = ignored;
    Ok(cfg)
}

/// A flat mapping holding a Megatron-LM argument (by its `dest`) that is no configuration field,
/// no Bridge section, launcher name or performance-config field: `vars(args)` written out, or
/// a configuration in Megatron-LM's own names. Such a mapping is read as an argument namespace.
fn is_argument_namespace(obj: &Map<String, Value>) -> bool {
    obj.iter().any(|(key, val)| {
        !is_known_key(key)
            && !(BRIDGE_SECTIONS.contains(&key.as_str()) && (val.is_object() || val.is_null()))
            && launcher_alias(key).is_none()
            && perf_config_field_reason(key).is_none()
            && is_megatron_dest(key)
    })
}

/// Names the Megatron-Bridge performance launcher uses for configuration fields
/// (`scripts/performance/argument_parser.py` and `utils/utils.py` `WorkloadBaseConfig`,
/// Megatron-Bridge 067f987d).
const LAUNCHER_ALIASES: &[(&str, &str)] = &[
    ("moe_a2a_overlap", "overlap_moe_expert_parallel_comm"),
    ("pp_layout", "pipeline_model_parallel_layout"),
    ("compute_dtype", "precision"),
];

/// Fields of Megatron-Bridge's flat performance configs (`WorkloadBaseConfig` in
/// `scripts/performance/utils/utils.py`, Megatron-Bridge 067f987d) that set nothing the cost
/// model reads; the others are configuration fields or launcher aliases.
const PERF_CONFIG_UNUSED: &[(&str, &str)] = &[
    (
        "gtp_weight_remat_size",
        "generalized TP weight rematerialisation is not modelled",
    ),
    (
        "expert_gtp_weight_remat_size",
        "generalized TP weight rematerialisation is not modelled",
    ),
    (
        "env_vars",
        "environment variables; not read from a performance config (the cost model reads Transformer Engine's attention switches from launch scripts and command lines only)",
    ),
    ("nccl_ub", "NCCL user buffers are not modelled"),
    (
        "fine_grained_activation_offloading",
        "the switch for `offload_modules`, which alone selects what is offloaded here",
    ),
    (
        "cutedsl_fused_grouped_mlp",
        "kernel choice; the kernel tables price grouped GEMMs without it",
    ),
    ("peft", "parameter-efficient fine-tuning is not modelled"),
    (
        "te_precision_config_file",
        "per-module precision files are not read",
    ),
];

fn perf_config_field_reason(key: &str) -> Option<String> {
    PERF_CONFIG_UNUSED
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, why)| format!("Megatron-Bridge performance-config field: {why}"))
}

/// Whether `key` is a Megatron-Bridge launcher name for a configuration field.
pub fn is_launcher_alias(key: &str) -> bool {
    launcher_alias(key).is_some()
}

fn launcher_alias(key: &str) -> Option<&'static str> {
    LAUNCHER_ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map(|(_, field)| *field)
}

fn insert_alias(
    flat: &mut Map<String, Value>,
    alias: &str,
    field: &str,
    value: &Value,
) -> Result<(), ConfigError> {
    if field == "precision" {
        let precision = value
            .as_str()
            .and_then(precision_from_recipe_name)
            .ok_or_else(|| ConfigError::InvalidValue {
                key: alias.to_string(),
                message: format!("`{value}` is not one of bf16, fp8_cs, fp8_mx, fp8_sc, nvfp4"),
            })?;
        set_precision(flat, precision);
    } else {
        flat.insert(field.to_string(), value.clone());
    }
    Ok(())
}

fn set_precision(flat: &mut Map<String, Value>, precision: Precision) {
    if let Ok(value) = serde_json::to_value(precision) {
        flat.insert("precision".into(), value);
    }
}

/// A key that is almost a configuration field (one or two typos) is an error, wherever it
/// stands: reading it as an unused Bridge setting would drop what the user meant silently.
pub fn near_miss(key: &str) -> Option<String> {
    let best = closest_key(key)?;
    (strsim::damerau_levenshtein(key, &best) <= 2).then_some(best)
}

fn fp8_recipe_precision(name: &str) -> Option<Precision> {
    match name.to_ascii_lowercase().as_str() {
        "delayed" => Some(Precision::Fp8Delayed),
        "tensorwise" => Some(Precision::Fp8Tensorwise),
        "blockwise" => Some(Precision::Fp8Blockwise),
        "mxfp8" => Some(Precision::Mxfp8),
        _ => None,
    }
}

/// The field name a key is stored under when the schema also accepts it as an alias:
/// Bridge's mixed-precision `fp8_param` is kept equal to `fp8_param_gather`, and recipes set
/// both, which must not read as the same field given twice.
fn canonical_key(key: &str) -> &str {
    match key {
        "fp8_param" => "fp8_param_gather",
        "fp4_param" => "fp4_param_gather",
        _ => key,
    }
}

/// Fields of Megatron-Bridge's config sections that look like a known key one or two letters
/// away but are fields of their own, or that carry a launcher name without being what the
/// launcher sets.
fn bridge_section_field_reason(section: &str, key: &str) -> Option<String> {
    let why = match (section, key) {
        // Bridge recipes set `cfg.model.moe_a2a_overlap`, a name no Megatron-Core config
        // defines and nothing reads; the performance launcher's `--moe_a2a_overlap` writes
        // `comm_overlap.overlap_moe_expert_parallel_comm` (scripts/performance/utils/
        // overrides.py, Megatron-Bridge 3a9559f0). Read as that field, it overrode the
        // recipe's own EP-overlap setting.
        ("model", "moe_a2a_overlap") => {
            "an attribute nothing reads (Megatron-Core has no field of that name); the expert-\
             parallel overlap is `comm_overlap.overlap_moe_expert_parallel_comm`"
        }
        _ => return None,
    };
    Some(format!("Megatron-Bridge `{section}` setting: {why}"))
}

/// Whether a Megatron-Bridge `dataset` field switches sequence packing on or off (`None` for
/// other fields): `enable_offline_packing` and `enable_in_batch_packing` (GPTSFTDatasetConfig,
/// `training/config.py` checks them, Megatron-Bridge 067f987d), Energon's `packing_buffer_size`,
/// and the older `packed_sequence_specs`, whose `packed_sequence_size` packs when positive (its
/// default, -1, does not).
fn packing_switch(key: &str, value: &Value) -> Option<bool> {
    match key {
        "enable_offline_packing" | "enable_in_batch_packing" => value.as_bool(),
        "packing_buffer_size" => Some(!value.is_null()),
        "packed_sequence_specs" => Some(match value {
            Value::Null => false,
            Value::Object(specs) => specs
                .get("packed_sequence_size")
                .and_then(Value::as_i64)
                .is_some_and(|size| size > 0),
            _ => false,
        }),
        _ => None,
    }
}

fn lift_section(
    section: &str,
    inner: &Map<String, Value>,
    flat: &mut Map<String, Value>,
    ignored: &mut Vec<IgnoredSetting>,
) -> Result<(), ConfigError> {
    for (k, v) in inner {
        let path = format!("{section}.{k}");
        if section == "mixed_precision" && (k == "fp8_recipe" || k == "fp8") {
            if let Some(p) = v.as_str().and_then(fp8_recipe_precision) {
                set_precision(flat, p);
                continue;
            }
        }
        if section == "mixed_precision" && (k == "fp4" || k == "fp4_recipe") && !v.is_null() {
            set_precision(flat, Precision::Nvfp4);
            continue;
        }
        if section == "dataset" {
            if let Some(packed) = packing_switch(k, v) {
                // One switch on is packing, whichever the others say.
                if packed || !flat.contains_key("sequence_packing") {
                    flat.insert("sequence_packing".into(), Value::Bool(packed));
                }
                continue;
            }
        }
        if let Some(why) = bridge_section_field_reason(section, k) {
            ignored.push(IgnoredSetting::new(path, why));
        } else if let Some(field) = launcher_alias(k) {
            insert_alias(flat, &path, field, v)?;
        } else if k != "model" && is_known_key(k) {
            flat.insert(canonical_key(k).to_owned(), v.clone());
        } else if let Some(suggestion) = near_miss(k) {
            return Err(ConfigError::UnknownKey {
                key: path,
                suggestion: Some(format!("{section}.{suggestion}")),
            });
        } else {
            ignored.push(IgnoredSetting::new(
                path,
                format!("Megatron-Bridge `{section}` setting the cost model does not use"),
            ));
        }
    }
    Ok(())
}
