//! A configuration as the user holds it: an object of fields (flat, or a Megatron-Bridge override
//! tree), or the text of a file in any format this module reads, told apart by content:
//! a Megatron-Bridge Python recipe (with the recipe's name when the file defines several), a
//! YAML/JSON document, a Megatron training log (its argument dump), or a launch script /
//! Megatron-LM argument list.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::bridge_recipe_name::{base_recipe_model, recipe_name_settings};
use super::launch_script::read_launch_script_for_model;
use super::megatron_log::read_megatron_log;
use super::megatron_recipe::{is_megatron_run_file, read_megatron_run_file_for_model};
use super::overrides::read_value;
use super::python_recipe::{ModuleLoader, RecipeFile};
use super::yaml_document::parse_yaml_document;
use crate::model::config::{
    AssumedDefault, ConfigError, FlexBackend, IgnoredSetting, ModelSpec, TokenDispatcher,
    TrainingConfig,
};

/// A configuration given as fields or as the text of a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ConfigSource {
    /// The text of a YAML/JSON file, a Megatron-Bridge override file, Megatron-LM's `vars(args)`
    /// or a wandb run's config.yaml, a launch script, a Megatron-LM argument list, a
    /// Megatron-Bridge Python recipe file, or a training log.
    Text(String),
    /// Configuration fields (Megatron names or aliases, Megatron-LM's `vars(args)`), or a
    /// Megatron-Bridge override tree.
    Fields(Map<String, Value>),
}

impl JsonSchema for ConfigSource {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ConfigSource".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let fields = generator.subschema_for::<TrainingConfig>();
        schemars::json_schema!({
            "description": "A training configuration: an object of fields (Megatron names or aliases, or a Megatron-Bridge override tree with `model:`/`train:` sections), or the text of a file: YAML/JSON, a launch script or Megatron-LM argument list, a Megatron-Bridge Python recipe file (name the recipe in `recipe` when it defines several), or a Megatron-LM / Bridge training log (its argument dump).",
            "anyOf": [fields, {"type": "string"}]
        })
    }
}

impl From<TrainingConfig> for ConfigSource {
    fn from(config: TrainingConfig) -> ConfigSource {
        match serde_json::to_value(&config) {
            Ok(Value::Object(map)) => ConfigSource::Fields(map),
            _ => ConfigSource::Fields(Map::new()),
        }
    }
}

/// The formats a configuration text can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    /// A Megatron-LM / Megatron-Bridge training log with its argument dump.
    MegatronLog,
    PythonRecipe,
    /// A Megatron-LM YAML run file (`examples/moe_recipes/`, functional-test `model_config.yaml`).
    MegatronRunFile,
    YamlOrJson,
    CommandLine,
}

/// Tells a text's format by its content. Python is recognised by module-level statements
/// (`def`, `import`, `from ... import`, `NAME = replace(`/`NAME = Config(`); YAML/JSON by
/// parsing to a mapping; everything else is a command line or launch script.
pub fn detect_format(text: &str) -> TextFormat {
    if text.contains("------------------------ arguments ------------------------") {
        return TextFormat::MegatronLog;
    }
    // A shebang says what runs the file: a shell script may embed Python in a heredoc.
    let first = text.trim_start().lines().next().unwrap_or("");
    if let Some(interpreter) = first.strip_prefix("#!") {
        if interpreter.contains("python") {
            return TextFormat::PythonRecipe;
        }
        if interpreter.contains("sh") {
            return TextFormat::CommandLine;
        }
    }
    let python = text.lines().any(|line| {
        line.starts_with("def ")
            || line.starts_with("async def ")
            || line.starts_with("import ")
            || (line.starts_with("from ") && line.contains(" import "))
            || line.starts_with('@')
            || line.split_once(" = ").is_some_and(|(name, value)| {
                !name.contains(' ')
                    && !name.starts_with('-')
                    && value.trim_start().contains('(')
                    && !value.contains("$(")
            })
    });
    if python {
        return TextFormat::PythonRecipe;
    }
    match parse_yaml_document(text) {
        Ok(value) if is_megatron_run_file(&value) => TextFormat::MegatronRunFile,
        Ok(Value::Object(_)) => TextFormat::YamlOrJson,
        _ => TextFormat::CommandLine,
    }
}

/// Reads a configuration text in any format; `recipe` names the function or constant of a
/// Python recipe file (needed when the file defines several).
pub fn read_config_text(text: &str, recipe: Option<&str>) -> Result<TrainingConfig, ConfigError> {
    read_config_text_for_model(text, recipe, None, None)
}

/// [`read_config_text`], reading a Python recipe's imported helpers and base recipes from the
/// modules `loader` provides (see [`RecipeFile::settings_with`]), for a model named beside the
/// text: a Megatron-LM command line, run file or log then takes that model instead of building
/// one from its architecture flags (which it lists as ignored), so a flag the readers cannot
/// build an architecture from does not stop the read. Other formats read the same; the caller
/// sets the model over them.
pub fn read_config_text_for_model(
    text: &str,
    recipe: Option<&str>,
    loader: Option<&dyn ModuleLoader>,
    model: Option<&ModelSpec>,
) -> Result<TrainingConfig, ConfigError> {
    match detect_format(text) {
        TextFormat::MegatronLog => {
            let log =
                read_megatron_log(text, model).map_err(|e| ConfigError::Parse(e.to_string()))?;
            let config = log.config.ok_or_else(|| {
                ConfigError::Parse(
                    "the log has no argument dump to read the configuration from".into(),
                )
            })?;
            with_recipe_unused(config, recipe)
        }
        TextFormat::PythonRecipe => read_python_recipe_with(text, recipe, loader),
        TextFormat::MegatronRunFile => {
            let value: Value =
                parse_yaml_document(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
            with_recipe_unused(read_megatron_run_file_for_model(&value, model)?, recipe)
        }
        TextFormat::YamlOrJson => with_recipe_unused(super::read_yaml(text)?, recipe),
        TextFormat::CommandLine => {
            with_recipe_unused(read_launch_script_for_model(text, model)?, recipe)
        }
    }
}

fn with_recipe_unused(
    mut config: TrainingConfig,
    recipe: Option<&str>,
) -> Result<TrainingConfig, ConfigError> {
    if let Some(name) = recipe {
        config.ignored_settings.push(IgnoredSetting::new(
            format!("recipe={name}"),
            "the configuration is not a Python recipe file, so no recipe is selected",
        ));
    }
    Ok(config)
}

/// One recipe of a Megatron-Bridge Python file, as a configuration.
pub fn read_python_recipe(text: &str, recipe: Option<&str>) -> Result<TrainingConfig, ConfigError> {
    read_python_recipe_with(text, recipe, None)
}

/// [`read_python_recipe`], following the file's imports into the modules `loader` provides.
pub fn read_python_recipe_with(
    text: &str,
    recipe: Option<&str>,
    loader: Option<&dyn ModuleLoader>,
) -> Result<TrainingConfig, ConfigError> {
    let parse_error = |e: super::python_recipe::PythonRecipeError| ConfigError::InvalidValue {
        key: "recipe".into(),
        message: e.to_string(),
    };
    let file = RecipeFile::parse(text).map_err(parse_error)?;
    let name = match recipe {
        Some(name) => name.to_string(),
        None => {
            let recipes = file.recipes();
            match recipes.as_slice() {
                [only] => only.name.clone(),
                _ => {
                    let names: Vec<&str> = recipes.iter().map(|r| r.name.as_str()).collect();
                    return Err(ConfigError::InvalidValue {
                        key: "recipe".into(),
                        message: format!(
                            "the Python file defines {} recipes; name one in `recipe` ({})",
                            names.len(),
                            names.join(", ")
                        ),
                    });
                }
            }
        }
    };
    let settings = file.settings_with(&name, loader).map_err(parse_error)?;
    let mut config = read_value(&settings.tree)?;
    config
        .ignored_settings
        .extend(settings.unevaluated.into_iter().map(|(key, reason)| {
            IgnoredSetting::new(
                format!("{name}: {key}"),
                format!("not evaluated from the recipe file: {reason}"),
            )
        }));
    fill_from_recipe_names(
        &mut config,
        settings.defined_as.as_deref().unwrap_or(&name),
        settings.hf_checkpoint.as_deref(),
        settings.base_recipe.as_deref(),
        !settings.modules_read.is_empty(),
    );
    if let Some(backend) = settings.flex_backend_helper {
        flex_helper_fallback(&mut config, backend);
    }
    if !settings.modules_read.is_empty() {
        config.assumed_defaults.push(AssumedDefault::new(
            "recipe_imports",
            Value::from(settings.modules_read.clone()),
            format!(
                "`{name}` was read together with the modules it imports (its base recipe and \
                 helpers), found beside the file"
            ),
        ));
    }
    Ok(config)
}

/// Megatron-Bridge's `apply_flex_dispatcher_backend` selects the flex dispatcher only on a GPU
/// its backend runs on (`training/flex_dispatcher_backend.py`, Bridge 79308d0d: DeepEP on
/// Ampere, Hopper, B200 and B300; HybridEP on those and GB200/GB300) and falls back to
/// `alltoall` elsewhere. Where the reading names the GPU the fallback is applied; where it
/// does not, the answer says the choice depends on it.
fn flex_helper_fallback(config: &mut TrainingConfig, backend: FlexBackend) {
    // Only DeepEP has GPUs to fall back from, and a later line of the recipe that set the
    // dispatcher itself is what runs.
    let helper_choice_stands = backend == FlexBackend::Deepep
        && config.moe_token_dispatcher_type == Some(TokenDispatcher::Flex)
        && config.moe_flex_dispatcher_backend == Some(FlexBackend::Deepep);
    if !helper_choice_stands {
        return;
    }
    let grace_blackwell = matches!(
        config
            .hardware
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("gb200" | "gb300")
    );
    let helper = "Megatron-Bridge's `apply_flex_dispatcher_backend(..., \"deepep\")`";
    if grace_blackwell {
        config.moe_token_dispatcher_type = Some(TokenDispatcher::Alltoall);
        config.moe_flex_dispatcher_backend = None;
        config.assumed_defaults.push(AssumedDefault::new(
            "moe_token_dispatcher_type",
            Value::String("alltoall".into()),
            format!("{helper} falls back to it on GB200 and GB300 (DeepEP runs on Ampere, Hopper, B200 and B300)"),
        ));
    } else if config.hardware.is_none() {
        config.assumed_defaults.push(AssumedDefault::new(
            "moe_token_dispatcher_type",
            Value::String("flex".into()),
            format!("{helper} selects it with DeepEP on Ampere, Hopper, B200 and B300, and falls back to alltoall on GB200 and GB300: the GPU decides"),
        ));
    }
}

/// What the file's lines leave unset but Bridge's names state: the model of the base recipe
/// it starts from, and the GPU count, GPU, precision and sequence of the recipe's own name.
/// Each value taken is listed with where it came from.
/// Nothing is filled when the file's lines give no parallel size at all: the layout then lives
/// in code outside the file, and an answer for Megatron's defaults would not be this recipe's.
fn fill_from_recipe_names(
    config: &mut TrainingConfig,
    recipe: &str,
    checkpoint: Option<&str>,
    base: Option<&str>,
    imports_read: bool,
) {
    if !config.sets_parallel_sizes() {
        return;
    }
    let from_name = recipe_name_settings(recipe);
    let mut noted = Vec::new();
    if config.model.is_none() {
        let from_checkpoint = checkpoint.map(|repo| {
            (
                repo.to_owned(),
                format!(
                    "the recipe builds its model from the HuggingFace checkpoint `{repo}` \
                     (`AutoBridge.from_hf_pretrained`); what the model provider sets beyond the \
                     architecture is defined outside this file"
                ),
            )
        });
        let from_base = || {
            let base = base?;
            base_recipe_model(base).map(|m| {
                let why = if imports_read {
                    format!(
                        "the recipe starts from Megatron-Bridge's base recipe `{base}()`, which \
                         builds this model"
                    )
                } else {
                    format!(
                        "the recipe starts from Megatron-Bridge's base recipe `{base}()`, which \
                         builds this model; what else it sets (recompute, MTP, pipeline split, \
                         ...) is defined there, and where this file does not set it the answer \
                         takes the defaults listed here"
                    )
                };
                (m, why)
            })
        };
        let model = from_checkpoint.or_else(from_base).or_else(|| {
            from_name.as_ref().map(|n| {
                (
                    n.model.clone(),
                    format!("named in the recipe's name `{recipe}`"),
                )
            })
        });
        if let Some((model, why)) = model {
            noted.push(AssumedDefault::new(
                "model",
                Value::String(model.clone()),
                why,
            ));
            config.model = Some(ModelSpec::Id(model));
        }
    }
    if let Some(n) = from_name {
        noted.extend(n.fill_unset(config, recipe));
    }
    config.assumed_defaults.splice(0..0, noted);
}

/// Reads a [`ConfigSource`].
pub fn read_config_source(
    source: &ConfigSource,
    recipe: Option<&str>,
) -> Result<TrainingConfig, ConfigError> {
    read_config_source_for_model(source, recipe, None, None)
}

/// [`read_config_source`], a Python recipe's imports read through `loader`, for a model named
/// beside the source (see [`read_config_text_for_model`]).
pub fn read_config_source_for_model(
    source: &ConfigSource,
    recipe: Option<&str>,
    loader: Option<&dyn ModuleLoader>,
    model: Option<&ModelSpec>,
) -> Result<TrainingConfig, ConfigError> {
    match source {
        ConfigSource::Text(text) => read_config_text_for_model(text, recipe, loader, model),
        ConfigSource::Fields(map) => read_value(&Value::Object(map.clone())),
    }
}

/// Settings given beside a file (`model`, `hardware`, `num_gpus`) win over the file's; a value
/// they replace is noted.
pub fn apply_beside(
    config: &mut TrainingConfig,
    model: Option<&ModelSpec>,
    hardware: Option<&str>,
    num_gpus: Option<u32>,
) {
    let mut replaced = Vec::new();
    if let Some(model) = model {
        if config.model.as_ref().is_some_and(|m| m != model) {
            replaced.push("model");
        }
        config.model = Some(model.clone());
    }
    if let Some(hardware) = hardware {
        if config.hardware.as_deref().is_some_and(|h| h != hardware) {
            replaced.push("hardware");
        }
        config.hardware = Some(hardware.to_string());
    }
    if let Some(gpus) = num_gpus {
        if config.num_gpus.is_some_and(|n| n != gpus) {
            replaced.push("num_gpus");
        }
        config.num_gpus = Some(gpus);
    }
    for key in replaced {
        // A value the reader only took from a recipe's name gives way without a note.
        let before = config.assumed_defaults.len();
        config.assumed_defaults.retain(|a| a.key != key);
        if config.assumed_defaults.len() != before {
            continue;
        }
        config.ignored_settings.push(IgnoredSetting::new(
            key,
            format!("the configuration's own `{key}` is replaced by the one given beside it"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_each_format() {
        assert_eq!(
            detect_format("def recipe():\n    cfg = base()\n    return cfg\n"),
            TextFormat::PythonRecipe
        );
        assert_eq!(
            detect_format("X = replace(BASE, tensor_model_parallel_size=2)\n"),
            TextFormat::PythonRecipe
        );
        assert_eq!(
            detect_format("model:\n  context_parallel_size: 4\n"),
            TextFormat::YamlOrJson
        );
        assert_eq!(
            detect_format("{\"context_parallel_size\": 4}"),
            TextFormat::YamlOrJson
        );
        assert_eq!(
            detect_format("torchrun pretrain_gpt.py --context-parallel-size 4"),
            TextFormat::CommandLine
        );
        // A shell script that embeds Python in a heredoc is a shell script.
        assert_eq!(
            detect_format(
                "#!/bin/bash\npython - <<'PY'\nimport os\nPY\ntorchrun pretrain_gpt.py\n"
            ),
            TextFormat::CommandLine
        );
        assert_eq!(
            detect_format("#!/usr/bin/env python3\nimport os\n"),
            TextFormat::PythonRecipe
        );
        assert_eq!(
            detect_format("OUT=$(date)\npython pretrain_gpt.py --tensor-model-parallel-size 2\n"),
            TextFormat::CommandLine
        );
    }

    #[test]
    fn a_python_recipe_needs_its_name_when_it_defines_several() {
        let text = "\
A = replace(BASE, tensor_model_parallel_size=2, context_parallel_size=4)
B = replace(A, context_parallel_size=8)
";
        let err = read_config_text(text, None).unwrap_err().to_string();
        assert!(err.contains("A, B"), "{err}");
        let b = read_config_text(text, Some("B")).unwrap();
        assert_eq!((b.tp(), b.cp()), (2, 8));
        assert!(!b.ignored_settings.is_empty(), "BASE is outside the file");
    }

    #[test]
    fn beside_values_win_and_say_so() {
        let mut config = read_config_text("hardware: h100\nnum_gpus: 64\n", None).unwrap();
        apply_beside(&mut config, None, Some("b200"), Some(64));
        assert_eq!(config.hardware.as_deref(), Some("b200"));
        assert_eq!(config.ignored_settings.len(), 1);
        assert_eq!(config.ignored_settings[0].key, "hardware");
    }

    // The shape of Bridge v0.6.0's src/megatron/bridge/perf_recipes/gpt_oss/b300/gpt_oss.py.
    const PERF_RECIPE: &str = r#"
def gpt_oss_120b_pretrain_64gpu_b300_fp8mx_config():
    cfg = gpt_oss_120b_pretrain_config()
    cfg.mixed_precision = _perf_precision("fp8_mx")
    cfg.model.tensor_model_parallel_size = 1
    cfg.model.expert_model_parallel_size = 8
    _benchmark_common(cfg)
    return cfg
"#;

    #[test]
    fn a_perf_recipe_names_its_model_gpus_and_gpu_and_says_so() {
        let c = read_config_text(PERF_RECIPE, None).unwrap();
        assert_eq!(c.model, Some(ModelSpec::Id("gpt_oss_120b".into())));
        assert_eq!(c.hardware.as_deref(), Some("b300"));
        assert_eq!(c.num_gpus, Some(64));
        // The precision comes from `_perf_precision`, not from the name.
        assert_eq!(c.precision, Some(crate::model::Precision::Mxfp8));
        assert_eq!(c.grad_reduce_in_fp32, Some(false));
        let noted: Vec<&str> = c.assumed_defaults.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(noted, ["model", "num_gpus", "hardware"]);
        assert!(c.assumed_defaults[0]
            .why
            .contains("gpt_oss_120b_pretrain_config()"));
        assert!(c.assumed_defaults[1].why.contains("recipe's name"));
    }

    #[test]
    fn a_name_fills_the_precision_only_where_the_file_names_none() {
        let text = PERF_RECIPE.replace(
            "    cfg.mixed_precision = _perf_precision(\"fp8_mx\")\n",
            "",
        );
        let c = read_config_text(&text, None).unwrap();
        assert_eq!(c.precision, Some(crate::model::Precision::Mxfp8));
        assert!(c.assumed_defaults.iter().any(|a| a.key == "precision"));
    }

    #[test]
    fn a_recipe_whose_layout_lives_elsewhere_takes_nothing_from_its_name() {
        let text = "def qwen3_30b_a3b_pretrain_64gpu_b200_bf16_config():
    cfg = _with_global_batch_size(qwen3_30b_a3b_pretrain_config(), 4096)
    return cfg
";
        let c = read_config_text(text, None).unwrap();
        assert_eq!(
            (c.model.as_ref(), c.hardware.as_deref(), c.num_gpus),
            (None, None, None)
        );
    }

    #[test]
    fn values_given_beside_replace_what_a_name_said_without_a_note() {
        let mut c = read_config_text(PERF_RECIPE, None).unwrap();
        apply_beside(&mut c, None, Some("gb300"), None);
        assert_eq!(c.hardware.as_deref(), Some("gb300"));
        assert!(c.ignored_settings.iter().all(|i| i.key != "hardware"));
        assert!(c.assumed_defaults.iter().all(|a| a.key != "hardware"));
    }
}
