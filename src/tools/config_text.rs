//! A configuration sent to a tool as a file's text beside fields (MCP `check_feasibility`'s
//! `config_text`): the text read as `moe-skills check --config FILE` reads a file (YAML/JSON,
//! a Bridge override file, a launch script, Megatron-LM arguments, a Bridge Python recipe with
//! the modules it imports given as texts, a training log), then the fields given beside it
//! set over it, as the command line's flags do.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::common::ToolError;
use crate::inputs::diff::{apply_changes, set_fields, SettingChange};
use crate::inputs::python_recipe::{
    callee_defined_outside, ModuleLoader, ModuleTexts, MODULE_NOT_READ,
};
use crate::inputs::read_value;
use crate::inputs::source::read_config_text_for_model;
use crate::model::config::{IgnoredSetting, ModelSpec};
use crate::model::limits::{CONFIG_TEXT, MODULE_KEY, MODULE_TEXT};
use crate::model::TrainingConfig;

/// The argument names a tool takes this input under.
pub const TEXT_FIELD: &str = "config_text";
pub const RECIPE_FIELD: &str = "recipe";
pub const MODULES_FIELD: &str = "modules";

/// Most modules one call may send: a recipe package's files, with room to spare.
pub const MAX_MODULES: usize = 256;

/// A file's text, the recipe to read from a Python file, and the modules it imports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigText {
    pub text: String,
    pub recipe: Option<String>,
    pub modules: BTreeMap<String, String>,
}

/// Checks the modules a client sent: how many, how long their names and texts are.
pub fn check_modules(modules: &BTreeMap<String, String>) -> Result<(), ToolError> {
    if modules.len() > MAX_MODULES {
        return Err(ToolError::field(
            MODULES_FIELD,
            format!(
                "{} modules given; at most {MAX_MODULES} are read",
                modules.len()
            ),
            "send the modules the recipe imports (an answer lists those it could not read)",
        ));
    }
    for (key, text) in modules {
        MODULE_KEY.check("", Some(key))?;
        MODULE_TEXT.check("", Some(text))?;
    }
    Ok(())
}

/// The modules given, as a loader, when any are.
pub fn module_texts(modules: &BTreeMap<String, String>) -> Option<ModuleTexts> {
    (!modules.is_empty()).then(|| {
        ModuleTexts::new(
            None,
            modules
                .iter()
                .map(|(key, text)| (key.clone(), text.clone()))
                .collect(),
        )
    })
}

/// The notes for modules sent that no read imported.
pub fn unread_modules(texts: &ModuleTexts, reason: &str) -> Vec<IgnoredSetting> {
    texts
        .unread()
        .into_iter()
        .map(|key| IgnoredSetting::new(format!("{MODULES_FIELD}: {key}"), reason))
        .collect()
}

fn text_of(value: Value, field: &str, what: &str) -> Result<String, ToolError> {
    match value {
        Value::String(text) => Ok(text),
        other => Err(ToolError::field(
            field,
            format!(
                "expected {what}, got {}",
                super::common::clip(&other.to_string())
            ),
            format!("give `{field}` as a string"),
        )),
    }
}

/// A Python recipe whose sequence length or model only other files set (its base recipe,
/// its helpers) cannot be evaluated from its text: say which calls reach outside it and what
/// would supply them (`fix`: send `modules` over MCP, run inside the checkout on the command
/// line), instead of a bare "seq_length missing".
pub fn missing_from_other_files(
    config: &TrainingConfig,
    field: &str,
    fix: &str,
) -> Result<(), ToolError> {
    let missing: Vec<&str> = [
        ("seq_length", config.seq_length.is_none()),
        ("model", config.model.is_none()),
    ]
    .into_iter()
    .filter_map(|(field, absent)| absent.then_some(field))
    .collect();
    // The calls the reader could not follow, and the modules its loader could not read.
    let outside: Vec<String> = config
        .ignored_settings
        .iter()
        .filter_map(|i| {
            if let Some(callee) = callee_defined_outside(&i.reason) {
                return Some(format!("`{callee}`"));
            }
            i.reason
                .contains(MODULE_NOT_READ)
                .then(|| i.key.rsplit(": ").next().unwrap_or(&i.key).to_owned())
        })
        .fold(Vec::new(), |mut names, name| {
            if !names.contains(&name) {
                names.push(name);
            }
            names
        });
    if missing.is_empty() || outside.is_empty() {
        return Ok(());
    }
    Err(ToolError::field(
        field,
        format!(
            "the recipe text alone does not set {}: it starts from or calls what other files define ({})",
            missing.join(" or "),
            outside.join(", ")
        ),
        fix,
    ))
}

/// A tool's arguments as one configuration: the file in `config_text` with the fields over
/// it, or the fields alone.
pub fn config_from_arguments(
    mut arguments: Map<String, Value>,
) -> Result<TrainingConfig, ToolError> {
    match ConfigText::take(&mut arguments)? {
        Some(file) => file.read(arguments),
        None => read_value(&Value::Object(arguments)).map_err(|e| {
            ToolError::field(
                "arguments",
                super::common::clip(&e.to_string()),
                "use the Megatron field names of the input schema",
            )
        }),
    }
}

impl ConfigText {
    /// Takes `config_text` (and with it `recipe` and `modules`) out of a tool's arguments;
    /// `None` without `config_text`, the arguments then untouched.
    pub fn take(arguments: &mut Map<String, Value>) -> Result<Option<ConfigText>, ToolError> {
        let Some(text) = arguments.remove(TEXT_FIELD) else {
            return Ok(None);
        };
        let text = text_of(text, TEXT_FIELD, "the text of a configuration file")?;
        CONFIG_TEXT.check("", Some(&text))?;
        let recipe = match arguments.remove(RECIPE_FIELD) {
            None | Some(Value::Null) => None,
            Some(name) => Some(text_of(name, RECIPE_FIELD, "a recipe's name")?),
        };
        let modules = match arguments.remove(MODULES_FIELD) {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(map)) => map
                .into_iter()
                .map(|(key, text)| {
                    let field = format!("{MODULES_FIELD}.{key}");
                    text_of(text, &field, "the module's text").map(|text| (key, text))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(ToolError::field(
                    MODULES_FIELD,
                    format!(
                        "expected an object, got {}",
                        super::common::clip(&other.to_string())
                    ),
                    "map each module's path in the checkout (or dotted name) to its text",
                ))
            }
        };
        check_modules(&modules)?;
        Ok(Some(ConfigText {
            text,
            recipe,
            modules,
        }))
    }

    /// The configuration: the text read, then each of `fields` set over it (a null field is
    /// noted, not applied: it cannot unset what the text sets).
    pub fn read(&self, fields: Map<String, Value>) -> Result<TrainingConfig, ToolError> {
        let texts = module_texts(&self.modules);
        // A model named beside the text is the one a Megatron-LM command line takes instead of
        // building one from its architecture flags.
        let model = fields
            .get("model")
            .filter(|v| !v.is_null())
            .and_then(|v| serde_json::from_value::<ModelSpec>(v.clone()).ok());
        let base = read_config_text_for_model(
            &self.text,
            self.recipe.as_deref(),
            texts.as_ref().map(|t| t as &dyn ModuleLoader),
            model.as_ref(),
        )
        .map_err(|e| {
            ToolError::field(
                TEXT_FIELD,
                e.to_string(),
                "fix the file, name the recipe of a Python file in `recipe`, or send fields",
            )
        })?;
        let mut notes: Vec<IgnoredSetting> = Vec::new();
        let (nulls, given): (Map<String, Value>, Map<String, Value>) =
            fields.into_iter().partition(|(_, v)| v.is_null());
        for key in nulls.keys() {
            notes.push(IgnoredSetting::new(
                key.clone(),
                "null beside `config_text` does not unset what the file sets; edit the text",
            ));
        }
        let mut config = if given.is_empty() {
            base.clone()
        } else {
            let overrides = read_value(&Value::Object(given)).map_err(|e| {
                ToolError::field(
                    "arguments",
                    super::common::clip(&e.to_string()),
                    "use the Megatron field names of the input schema beside `config_text`",
                )
            })?;
            let changes: Vec<SettingChange> = set_fields(&overrides)
                .into_iter()
                .map(|(field, value)| SettingChange {
                    field,
                    before: None,
                    after: Some(value),
                })
                .collect();
            let mut config = apply_changes(&base, &changes).map_err(|e| {
                ToolError::field(
                    "arguments",
                    format!("the fields do not combine with the file: {e}"),
                    "check the values given beside `config_text`",
                )
            })?;
            // The readers' notes are not serialised: keep the file's, less what the fields set.
            config.ignored_settings = base.ignored_settings.clone();
            config
                .ignored_settings
                .extend(overrides.ignored_settings.iter().cloned());
            config.assumed_defaults = base
                .assumed_defaults
                .iter()
                .filter(|a| !changes.iter().any(|c| c.field == a.key))
                .cloned()
                .collect();
            config
        };
        config.ignored_settings.extend(notes);
        missing_from_other_files(
            &config,
            MODULES_FIELD,
            "send the texts of the modules it imports in `modules` (keyed by their path in the checkout), or set the fields beside `config_text`",
        )?;
        if let Some(texts) = &texts {
            config.ignored_settings.extend(unread_modules(
                texts,
                "no module the recipe reads imports it",
            ));
        }
        Ok(config)
    }
}
