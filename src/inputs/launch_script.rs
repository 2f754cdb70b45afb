//! Launch scripts and command lines as people write them: Megatron-LM flags
//! (`--context-parallel-size 8`), Megatron-Bridge / Hydra overrides
//! (`model.context_parallel_size=8`, `+train.x=1`), environment assignments and the launcher
//! words around them (`torchrun`, `python`, script paths), over continued lines and comments.

use serde_json::{Map, Value};

use super::bridge_launcher::{
    is_bridge_shell_launcher, launcher_for_script, read_launcher_options,
};
use super::bridge_recipe_name::recipe_name_settings;
use super::megatron_args::parse_megatron_args_for_model;
use super::overrides::read_value;
use super::shell::{scalar_value, shell_quote, shell_words};
use super::shell_script::training_command;
use crate::model::config::{
    merge_cuda_graph_names, AssumedDefault, ConfigError, IgnoredSetting, ModelSpec, TrainingConfig,
};

/// Reads a launch script or command line. Flags go through the Megatron-LM reader, or through
/// the Megatron-Bridge launcher reader when the script run is one of Bridge's launchers
/// (`setup_experiment.py`, `run_script.py`, `run_recipe.py`); Hydra overrides go through the
/// Megatron-Bridge override reader (they win where both set a field, as the override is
/// applied last); environment assignments are listed as ignored, but for Transformer Engine's
/// attention switches, which Megatron-Core checks (`attention_env`).
pub fn read_launch_script(text: &str) -> Result<TrainingConfig, ConfigError> {
    read_launch_script_for_model(text, None)
}

/// [`read_launch_script`] for a model named elsewhere (a card id or a `config.json`): that
/// model wins over a Megatron-LM command's architecture flags, which are listed as ignored
/// (so a flag the reader cannot build an architecture from does not stop the read).
pub fn read_launch_script_for_model(
    text: &str,
    model: Option<&ModelSpec>,
) -> Result<TrainingConfig, ConfigError> {
    // A script that builds its command in variables, arrays and `if` blocks is evaluated
    // first; its training command is then read like a command line.
    let evaluated = match training_command(text) {
        Ok(command) => Some(command),
        // A script that starts other programs and no Python script (a conversion wrapper, a
        // launcher of its own) holds no training command to read; reading its text as one
        // would report its first option as an unknown setting.
        Err(none) if !none.programs.is_empty() => {
            return Err(ConfigError::Parse(format!(
                "the script runs no Python training command (it runs {}): send the script \
                 or command line that starts the training (pretrain_gpt.py, Megatron-Bridge's \
                 run_recipe.py or a recipe file), or give the settings as fields",
                quoted_list(&none.programs)
            )));
        }
        // Nothing ran but what other files hold (`. CONFIG.sh`, then `exit`).
        Err(none) if !none.unread.is_empty() => {
            let unread: Vec<String> = none.unread.iter().map(IgnoredSetting::quoted).collect();
            return Err(ConfigError::Parse(format!(
                "the script runs no training command itself; it may come from what could not \
                 be followed: {}; send that file, or the command line the run uses",
                unread.join("; ")
            )));
        }
        // Variables of flags and no command: a file another script sources
        // (`MODEL_ARGS="--num-layers 48 …"`).
        Err(none) if !none.flag_variables.is_empty() => {
            return Err(ConfigError::Parse(format!(
                "the script runs no training command that could be followed; its variables {} \
                 hold flags (for a script that sources this one, or for a command built in a \
                 way not followed here): send the command line the run uses",
                quoted_list(&none.flag_variables)
            )));
        }
        // Only function definitions: a library another script sources and calls.
        Err(none) if !none.uncalled_functions.is_empty() => {
            return Err(ConfigError::Parse(format!(
                "the script runs no command; it defines functions it never calls ({}), for a \
                 script that sources it: send the script or command line that starts the \
                 training",
                quoted_list(&none.uncalled_functions)
            )));
        }
        Err(none) if !none.utilities.is_empty() => {
            return Err(ConfigError::Parse(format!(
                "the script runs no training command (only {}): send the script or command \
                 line that starts the training",
                quoted_list(&none.utilities)
            )));
        }
        Err(_) => None,
    };
    let rebuilt: String;
    let text = match &evaluated {
        Some(command) => {
            rebuilt = command
                .words
                .iter()
                .map(|w| shell_quote(w))
                .collect::<Vec<_>>()
                .join(" ");
            rebuilt.as_str()
        }
        None => text,
    };
    let joined: String = text
        .lines()
        .map(|line| line.trim())
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.trim_end_matches('\\').trim())
        .collect::<Vec<_>>()
        .join(" ");
    let words = shell_words(&joined);
    let script = words.iter().position(|w| {
        (w.ends_with(".py") && !w.starts_with('-') && !w.contains('='))
            || is_bridge_shell_launcher(w)
    });
    let launcher = match script {
        Some(at) => launcher_for_script(&words[at])?,
        None => None,
    };
    let mut flags: Vec<String> = Vec::new();
    let mut overrides = Map::new();
    let mut ignored = Vec::new();
    for (at, word) in words.iter().enumerate() {
        if launcher.is_some() && script.is_some_and(|s| at <= s) {
            let reason = if Some(at) == script {
                "Megatron-Bridge launcher script; its options follow it"
            } else {
                "launcher word before the Megatron-Bridge script"
            };
            ignored.push(IgnoredSetting::new(word.clone(), reason));
            continue;
        }
        match classify(word) {
            Word::HydraOverride(path, value) => insert_path(&mut overrides, &path, value),
            Word::Environment => ignored.push(IgnoredSetting::new(
                word.clone(),
                crate::inputs::environment::UNREAD,
            )),
            Word::Other => flags.push(word.clone()),
        }
    }
    let mut recipe = None;
    let mut config = match launcher {
        Some(launcher) => {
            let read = read_launcher_options(launcher, &flags)?;
            ignored.extend(read.ignored);
            recipe = read.recipe;
            let mut config = read_value(&Value::Object(read.fields))?;
            ignored.append(&mut config.ignored_settings);
            config
        }
        None => {
            let quoted: Vec<String> = flags.iter().map(|w| shell_quote(w)).collect();
            parse_megatron_args_for_model(&quoted.join(" "), model)?
        }
    };
    if !overrides.is_empty() {
        let from_overrides = read_value(&Value::Object(overrides))?;
        config = overlay(&config, &from_overrides)?;
        ignored.extend(from_overrides.ignored_settings);
    }
    config.ignored_settings.extend(ignored);
    // What the recipe's name states fills what the command line leaves unset.
    if let Some((name, settings)) = recipe
        .as_deref()
        .and_then(|r| recipe_name_settings(r).map(|s| (r, s)))
    {
        let noted = settings.fill_unset(&mut config, name);
        config.assumed_defaults.extend(noted);
    }
    // The recipe's own layout lives in its Python file: an answer at Megatron's defaults is
    // not that recipe's, and says so first among its assumptions.
    if let (Some(name), false) = (recipe.as_deref(), config.sets_parallel_sizes()) {
        config.assumed_defaults.insert(
            0,
            AssumedDefault::new(
                "recipe",
                Value::String(name.to_owned()),
                "the recipe sets its parallel layout, recompute and dispatcher in its Python \
                 file, which the command line does not carry: the layout below is Megatron's \
                 defaults, not the recipe's; give the recipe's file (`--config <file> --recipe \
                 <name>` inside a Bridge checkout) or the sizes",
            ),
        );
    }
    if let Some(command) = evaluated {
        config.ignored_settings.extend(command.notes);
        let sbatch = command
            .sbatch_gpus
            .and_then(|(gpus, directives)| Some((u32::try_from(gpus).ok()?, directives)));
        if let (None, Some((gpus, directives))) = (config.num_gpus, sbatch) {
            config.num_gpus = Some(gpus);
            config.assumed_defaults.push(AssumedDefault::new(
                "num_gpus",
                Value::from(gpus),
                format!("the sbatch directives `{directives}`: one training rank per Slurm task"),
            ));
        }
    }
    crate::inputs::environment::take_attention_switches(&mut config);
    Ok(config)
}

/// `a`, `b`: names as the messages quote them.
fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

enum Word {
    HydraOverride(Vec<String>, Value),
    Environment,
    Other,
}

fn classify(word: &str) -> Word {
    if word.starts_with('-') {
        return Word::Other;
    }
    let Some((key, value)) = word.split_once('=') else {
        return Word::Other;
    };
    // Hydra's `+key=value` adds and `++key=value` forces a key; both set it.
    let key = key.trim_start_matches('+');
    if !is_identifier_path(key) {
        return Word::Other;
    }
    if !key.contains('.')
        && key
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        return Word::Environment;
    }
    let path = key.split('.').map(str::to_string).collect();
    Word::HydraOverride(path, override_value(value))
}

/// `a`, `a.b_c.d`: dot-separated identifiers, as Hydra override keys and environment names are.
pub(super) fn is_identifier_path(key: &str) -> bool {
    !key.is_empty()
        && key.split('.').all(|part| {
            !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// Hydra values: YAML-like scalars and `[a,b]` lists.
fn override_value(text: &str) -> Value {
    match serde_yaml::from_str::<Value>(text) {
        Ok(value @ (Value::Array(_) | Value::Bool(_) | Value::Number(_) | Value::Null)) => value,
        _ => scalar_value(text),
    }
}

fn insert_path(tree: &mut Map<String, Value>, path: &[String], value: Value) {
    match path {
        [] => {}
        [last] => {
            tree.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let entry = tree
                .entry(first.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            if let Value::Object(inner) = entry {
                insert_path(inner, rest, value);
            }
        }
    }
}

/// `base` with every field `top` sets written over it.
fn overlay(base: &TrainingConfig, top: &TrainingConfig) -> Result<TrainingConfig, ConfigError> {
    let to_map = |c: &TrainingConfig| match serde_json::to_value(c) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Ok(Map::new()),
        Err(e) => Err(ConfigError::Parse(e.to_string())),
    };
    let mut merged = to_map(base)?;
    let set_by_top: Map<String, Value> = to_map(top)?
        .into_iter()
        .filter(|(_, v)| !v.is_null())
        .collect();
    // The script's own CUDA-graph scopes replace the base's, under either of their names.
    if set_by_top.contains_key("cuda_graph_modules") {
        merged.remove("cuda_graph_scope");
    }
    merged.extend(set_by_top.clone());
    merge_cuda_graph_names(&mut merged)?;
    let mut config: TrainingConfig = serde_json::from_value(Value::Object(merged))
        .map_err(|e| ConfigError::Parse(e.to_string()))?;
    config.ignored_settings = base.ignored_settings.clone();
    config.assumed_defaults = base.assumed_defaults.clone();
    // A default the base assumed no longer holds where the overrides set the field.
    config
        .assumed_defaults
        .retain(|a| !set_by_top.contains_key(&a.key));
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flags_hydra_overrides_and_environment() {
        let script = "\
# Qwen3 long-context launch
CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc-per-node 8 pretrain_gpt.py \\
    --tensor-model-parallel-size 4 \\
    --context-parallel-size 8 \\
    model.expert_model_parallel_size=16 +train.micro_batch_size=2 \\
    'model.recompute_modules=[moe_act,layernorm]'
";
        let config = read_launch_script(script).unwrap();
        assert_eq!(config.tp(), 4);
        assert_eq!(config.cp(), 8);
        assert_eq!(config.ep(), 16);
        assert_eq!(config.micro_batch_size, Some(2));
        let modules: Vec<&str> = config
            .recompute_modules()
            .iter()
            .map(|m| m.name())
            .collect();
        assert_eq!(modules, ["moe_act", "layernorm"]);
        let ignored: Vec<&str> = config
            .ignored_settings
            .iter()
            .map(|i| i.key.as_str())
            .collect();
        assert!(
            ignored.contains(&"CUDA_DEVICE_MAX_CONNECTIONS=1"),
            "{ignored:?}"
        );
        assert!(ignored.contains(&"torchrun"), "{ignored:?}");
    }

    #[test]
    fn reads_a_megatron_bridge_performance_launch() {
        let script = "\
python scripts/performance/setup_experiment.py -a acct -p batch -g h100 -ng 256 \\
    -m deepseek -mr deepseek_v3 -c fp8_mx -tp 1 -pp 8 -cp 2 -ep 32 -vp 4 \\
    --recompute_modules mla_up_proj,moe_act --moe_a2a_overlap true \\
    model.seq_length=65536 train.global_batch_size=512
";
        let config = read_launch_script(script).unwrap();
        assert_eq!(config.hardware.as_deref(), Some("h100"));
        assert_eq!(config.num_gpus, Some(256));
        assert_eq!(
            (config.tp(), config.pp(), config.cp(), config.ep()),
            (1, 8, 2, 32)
        );
        assert_eq!(config.seq_length, Some(65536));
        assert_eq!(config.global_batch_size, Some(512));
        let ignored: Vec<&str> = config
            .ignored_settings
            .iter()
            .map(|i| i.key.as_str())
            .collect();
        for key in ["-a acct", "-mr deepseek_v3", "python"] {
            assert!(ignored.contains(&key), "{key} not in {ignored:?}");
        }
        let err = read_launch_script("python run_recipe.py --recipe x --cp 2")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--cp"), "{err}");
    }

    #[test]
    fn a_typo_in_a_hydra_override_is_an_error() {
        let err = read_launch_script("python run.py model.context_paralel_size=4")
            .unwrap_err()
            .to_string();
        assert!(err.contains("model.context_parallel_size"), "{err}");
    }
}
