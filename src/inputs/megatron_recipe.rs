//! Megatron-LM's YAML run files: the MoE recipes of `examples/moe_recipes/` (`ARGS`, with
//! `ENV_VARS` and `DEPENDENCIES`) and the functional tests' `model_config.yaml` (`MODEL_ARGS`).
//! Their argument maps are the command line Megatron-LM runs: the test launcher
//! (`tests/functional_tests/shell_test_utils/_run_training.sh`) passes each key as a flag, a
//! `true` value as the bare flag and any other value after it. They are read here as that
//! command line by the Megatron-LM argument reader.

use serde_json::{Map, Value};

use super::environment::take_attention_switches;
use super::megatron_args::{megatron_arguments, parse_whole_megatron_arguments, MegatronArguments};
use super::shell::{shell_quote, shell_words};
use crate::model::config::{ConfigError, IgnoredSetting, ModelSpec, TrainingConfig};

/// The keys that hold the argument map, in the order they are looked for.
const ARGUMENT_KEYS: &[&str] = &["ARGS", "MODEL_ARGS"];

/// Top-level keys of the run files that hold no training setting, with why they are skipped.
const NON_SETTING_KEYS: &[(&str, &str)] = &[
    (
        "DEPENDENCIES",
        "the container image and Dockerfile the run was built with; the cost model reads no software versions",
    ),
    ("ENV_VARS", super::environment::UNREAD),
    ("BEFORE_SCRIPT", "a shell script run before training"),
    ("AFTER_SCRIPT", "a shell script run after training"),
    ("LAUNCHER", "the process launcher"),
    ("TEST_TYPE", "a functional-test setting"),
    ("MODE", "a functional-test setting"),
    ("SPEC", "a functional-test setting"),
];

/// Whether `value` is one of these run files: a mapping whose argument map is a mapping.
pub fn is_megatron_run_file(value: &Value) -> bool {
    argument_map(value).is_some()
}

fn argument_map(value: &Value) -> Option<(&'static str, &Map<String, Value>)> {
    let obj = value.as_object()?;
    ARGUMENT_KEYS
        .iter()
        .find_map(|key| obj.get(*key).and_then(Value::as_object).map(|m| (*key, m)))
}

/// Reads a Megatron-LM run file as the command line its launcher builds.
pub fn read_megatron_run_file(value: &Value) -> Result<TrainingConfig, ConfigError> {
    read_megatron_run_file_for_model(value, None)
}

/// [`read_megatron_run_file`] for a model named elsewhere (a card id or a `config.json`): that
/// model wins, and the file's architecture arguments are listed as ignored.
pub fn read_megatron_run_file_for_model(
    value: &Value,
    model: Option<&ModelSpec>,
) -> Result<TrainingConfig, ConfigError> {
    let Some((args_key, args)) = argument_map(value) else {
        return Err(ConfigError::Parse(
            "a Megatron-LM run file needs an `ARGS` (or `MODEL_ARGS`) mapping of arguments".into(),
        ));
    };
    let mut ignored = Vec::new();
    if let Some(obj) = value.as_object() {
        for key in obj.keys().filter(|k| k.as_str() != args_key) {
            let reason = NON_SETTING_KEYS
                .iter()
                .find(|(name, _)| name == key)
                .map_or("not an argument map of the run file", |(_, why)| *why);
            match obj.get(key).and_then(Value::as_object) {
                // One entry per variable, so the ones the cost model reads can be taken back.
                Some(section) if key == "ENV_VARS" => {
                    for (name, v) in section {
                        let shown = format!("{name}={}", scalar_text(v));
                        ignored.push(IgnoredSetting::new(shown, reason));
                    }
                }
                _ => ignored.push(IgnoredSetting::new(key.clone(), reason)),
            }
        }
    }
    let table = megatron_arguments()?;
    let mut words = Vec::new();
    for (key, value) in args {
        words.extend(argument_words(table, key, value));
    }
    let quoted: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
    let mut config = parse_whole_megatron_arguments(&quoted.join(" "), model)?;
    config.ignored_settings.extend(ignored);
    take_attention_switches(&mut config);
    Ok(config)
}

/// The command-line words for one `key: value` of the argument map. A key is an option
/// string without its dashes (`--key-name`, the launcher's reading); a key that is no option
/// but an argument's `dest` (`overlap_p2p_comm`, the attribute `--no-overlap-p2p-communication`
/// stores into) sets that attribute: a boolean picks the option string that stores it, or
/// none when it is the default.
fn argument_words(table: &MegatronArguments, key: &str, value: &Value) -> Vec<String> {
    let name = key.trim_start_matches('-');
    let flag = format!("--{}", name.replace('_', "-"));
    let by_dest = table
        .get(&flag)
        .is_none()
        .then(|| table.by_dest(&name.replace('-', "_")));
    if let Some(Some(arg)) = by_dest {
        let set = match value {
            Value::Bool(b) => Some(*b),
            _ => None,
        };
        let option = |positive: bool| {
            arg.options
                .iter()
                .find(|o| o.starts_with("--no-") != positive)
                .or_else(|| arg.options.first())
                .cloned()
        };
        match (arg.action.as_str(), set) {
            ("store_true", Some(true)) => return option(true).into_iter().collect(),
            ("store_false", Some(false)) => return option(false).into_iter().collect(),
            ("store_true", Some(false)) | ("store_false", Some(true)) => return Vec::new(),
            ("boolean_optional", Some(b)) => return option(b).into_iter().collect(),
            _ => {}
        }
        let mut words = arg.options.first().cloned().into_iter().collect::<Vec<_>>();
        words.extend(value_words(value));
        return words;
    }
    let known = table.get(&flag).is_some();
    match value {
        // A store-true flag left off: the argument's default, as the launcher passes it.
        Value::Bool(false) | Value::Null if known => Vec::new(),
        // A key that is no argument at all is passed on, so the reader names the closest one
        // instead of the value being dropped unseen.
        Value::Bool(_) | Value::Null => vec![flag],
        Value::String(s) if s.is_empty() => vec![flag],
        other => std::iter::once(flag).chain(value_words(other)).collect(),
    }
}

/// The words a value becomes. The launcher writes `--key=value` unquoted into the command
/// line, so a string splits where the shell splits it (`cuda_graph_scope: moe_router
/// moe_preprocess` is two values); a string wrapped in brackets (`"[layernorm mlp]"`) has them
/// stripped first, as the functional tests' launcher does (`_run_training.sh`: "value is
/// wrapped in [ ]", Megatron-LM d98e8a64).
fn value_words(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) => items.iter().map(scalar_text).collect(),
        Value::Null => Vec::new(),
        Value::String(s) => {
            let trimmed = s.trim();
            let inner = trimmed
                .strip_prefix('[')
                .and_then(|v| v.strip_suffix(']'))
                .filter(|v| !v.is_empty() && !v.contains(']'));
            shell_words(inner.unwrap_or(s))
        }
        other => vec![scalar_text(other)],
    }
}

/// A YAML scalar as the launcher prints it (`yq ... | tostring`).
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<TrainingConfig, ConfigError> {
        let value: Value =
            serde_yaml::from_str(yaml).map_err(|e| ConfigError::Parse(e.to_string()))?;
        read_megatron_run_file(&value)
    }

    #[test]
    fn arguments_become_flags_and_the_rest_is_listed() {
        let cfg = read(
            "DEPENDENCIES:\n  pytorch_base_image: nvcr.io/nvidia/pytorch:26.03-py3\n\
             ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: '1'\n\
             ARGS:\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\n  \
             finetune: false\n  recompute_modules: [mla_up_proj, mlp]\n  seq_length: 4096\n",
        )
        .unwrap();
        assert_eq!(cfg.tensor_model_parallel_size, Some(2));
        assert_eq!(cfg.sequence_parallel, Some(true));
        assert_eq!(cfg.seq_length, Some(4096));
        let modules = cfg.recompute_modules.clone().unwrap_or_default();
        assert_eq!(modules.len(), 2, "{modules:?}");
        let ignored: Vec<&str> = cfg
            .ignored_settings
            .iter()
            .map(|s| s.key.as_str())
            .collect();
        assert!(ignored.contains(&"DEPENDENCIES"), "{ignored:?}");
        assert!(
            ignored.contains(&"CUDA_DEVICE_MAX_CONNECTIONS=1"),
            "{ignored:?}"
        );
    }

    #[test]
    fn the_attention_switches_of_env_vars_are_read() {
        // The shape of Megatron-LM's functional test
        // tests/functional_tests/test_cases/moe/gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_fine_grained_offloading
        // (d98e8a64): unfused attention, with the fused kernels switched off in ENV_VARS.
        let cfg = read(
            "ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 32\n  NVTE_FUSED_ATTN: 0\n\
             MODEL_ARGS:\n  --attention-backend: unfused\n  --seq-length: 4096\n",
        )
        .unwrap();
        let env = cfg.attention_env.clone().expect("switch read");
        assert_eq!(env.fused.as_deref(), Some("0"));
        let ignored: Vec<&str> = cfg
            .ignored_settings
            .iter()
            .map(|s| s.key.as_str())
            .collect();
        assert!(
            ignored.contains(&"CUDA_DEVICE_MAX_CONNECTIONS=32"),
            "{ignored:?}"
        );
        assert!(
            !ignored.iter().any(|k| k.contains("NVTE_FUSED_ATTN")),
            "{ignored:?}"
        );
    }

    #[test]
    fn a_bracketed_list_string_loses_its_brackets_as_the_launcher_strips_them() {
        // Megatron-LM's functional test
        // tests/functional_tests/test_cases/moe/gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_fine_grained_offloading
        // (d98e8a64) writes the modules as one bracketed string.
        let cfg = read(
            "MODEL_ARGS:\n  --recompute-granularity: selective\n  \
             --recompute-modules: \"[layernorm mla_up_proj mlp moe_act]\"\n  --seq-length: 4096\n",
        )
        .unwrap();
        let modules: Vec<String> = cfg
            .recompute_modules
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                serde_json::to_value(m)
                    .unwrap()
                    .as_str()
                    .unwrap_or("")
                    .to_owned()
            })
            .collect();
        assert_eq!(modules, ["layernorm", "mla_up_proj", "mlp", "moe_act"]);
    }

    #[test]
    fn a_run_file_is_a_whole_command_line() {
        // The launcher passes the map as it stands, so what it leaves out runs at
        // Megatron-LM's default.
        let cfg = read("ARGS:\n  --num-experts: 8\n  --bf16: true\n").unwrap();
        assert_eq!(cfg.use_distributed_optimizer, Some(false));
        assert_eq!(cfg.overlap_grad_reduce, Some(false));
        assert!(cfg
            .assumed_defaults
            .iter()
            .any(|d| d.key == "moe_router_force_load_balancing"));
    }

    #[test]
    fn functional_test_keys_keep_their_dashes() {
        let cfg = read(
            "MODEL_ARGS:\n  --context-parallel-size: 4\n  --use-distributed-optimizer: true\n",
        )
        .unwrap();
        assert_eq!(cfg.context_parallel_size, Some(4));
        assert_eq!(cfg.use_distributed_optimizer, Some(true));
    }

    #[test]
    fn a_key_that_is_an_attribute_sets_it() {
        // `overlap_p2p_comm` is the dest of `--no-overlap-p2p-communication` (store_false):
        // true is its default, false passes the flag.
        let table = megatron_arguments().unwrap();
        assert!(argument_words(table, "overlap_p2p_comm", &Value::Bool(true)).is_empty());
        assert_eq!(
            argument_words(table, "overlap_p2p_comm", &Value::Bool(false)),
            vec!["--no-overlap-p2p-communication".to_string()]
        );
        assert_eq!(
            argument_words(
                table,
                "cuda_graph_scope",
                &Value::from("moe_router moe_preprocess")
            ),
            ["--cuda-graph-scope", "moe_router", "moe_preprocess"]
        );
        assert_eq!(
            argument_words(table, "seq_length", &Value::from(4096)),
            vec!["--seq-length".to_string(), "4096".to_string()]
        );
    }

    #[test]
    fn a_misspelt_key_is_an_error_whatever_its_value() {
        let err = read("ARGS:\n  sequence_paralel: false\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--sequence-parallel"), "{err}");
    }

    #[test]
    fn a_mapping_without_arguments_is_not_a_run_file() {
        let value: Value = serde_yaml::from_str("ENV_VARS:\n  A: '1'\n").unwrap();
        assert!(!is_megatron_run_file(&value));
        assert!(read_megatron_run_file(&value).is_err());
    }
}
