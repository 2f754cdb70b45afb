//! Reading the configuration change a commit makes, from a unified diff of a launch script,
//! a Megatron-LM argument list or a YAML override file.
//!
//! The diff is split into the text before and after the change (context plus removed lines,
//! context plus added lines). Each side is then read the way its file type is written and the
//! two readings are compared setting by setting, so only what the commit really changed counts.

use serde_json::{Map, Value};
use thiserror::Error;

use crate::model::config::{parse_megatron_args, TrainingConfig};

#[derive(Debug, Error, PartialEq)]
pub enum DiffError {
    #[error("field `diff`: no hunk found; pass a unified diff (lines starting with `@@`, `+`, `-`), e.g. the output of `git diff`")]
    NoHunks,
    #[error("field `diff`: the change touches no training setting this server models (looked for Megatron-LM flags such as `--context-parallel-size` and YAML keys such as `context_parallel_size:`); pass `after` as a full configuration instead")]
    NoSettingsChanged,
    #[error("field `diff`: {side} side of {file} could not be read: {message}")]
    Unreadable {
        side: &'static str,
        file: String,
        message: String,
    },
}

/// One file's worth of a unified diff, with the text on each side of the change.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FileChange {
    pub path: String,
    pub old_text: String,
    pub new_text: String,
}

/// Splits a unified diff into per-file old/new texts. Context lines go to both sides.
pub fn split_unified_diff(diff: &str) -> Result<Vec<FileChange>, DiffError> {
    let mut files: Vec<FileChange> = Vec::new();
    let mut in_hunk = false;
    let mut saw_hunk = false;
    for line in diff.lines() {
        if let Some(path) = line.strip_prefix("+++ ") {
            let path = path.trim().trim_start_matches("b/").to_string();
            match files.last_mut() {
                Some(last) if last.path.is_empty() => last.path = path,
                _ => files.push(FileChange {
                    path,
                    ..FileChange::default()
                }),
            }
            in_hunk = false;
            continue;
        }
        if line.starts_with("--- ") && !in_hunk {
            files.push(FileChange::default());
            continue;
        }
        if line.starts_with("diff --git") || line.starts_with("index ") {
            in_hunk = false;
            continue;
        }
        if line.starts_with("@@") {
            in_hunk = true;
            saw_hunk = true;
            if files.is_empty() {
                files.push(FileChange::default());
            }
            continue;
        }
        if !in_hunk {
            continue;
        }
        let Some(file) = files.last_mut() else {
            continue;
        };
        if let Some(removed) = line.strip_prefix('-') {
            push_line(&mut file.old_text, removed);
        } else if let Some(added) = line.strip_prefix('+') {
            push_line(&mut file.new_text, added);
        } else if line.starts_with('\\') {
            // "\ No newline at end of file"
        } else {
            let context = line.strip_prefix(' ').unwrap_or(line);
            push_line(&mut file.old_text, context);
            push_line(&mut file.new_text, context);
        }
    }
    if !saw_hunk {
        return Err(DiffError::NoHunks);
    }
    Ok(files)
}

fn push_line(text: &mut String, line: &str) {
    text.push_str(line);
    text.push('\n');
}

fn is_yaml_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml")
}

/// A setting the change touched: its Megatron field name and its JSON value on each side
/// (`None` = not set on that side, i.e. the default applies).
#[derive(Debug, Clone, PartialEq)]
pub struct SettingChange {
    pub field: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// Reads the settings a diff changes. YAML files are read as override files; everything else
/// (shell launch scripts, argument lists) as Megatron-LM command lines.
pub fn settings_changed_by_diff(diff: &str) -> Result<Vec<SettingChange>, DiffError> {
    let mut changes: Vec<SettingChange> = Vec::new();
    for file in split_unified_diff(diff)? {
        let (old, new) = if is_yaml_path(&file.path) {
            (
                read_yaml_side(&file.old_text, "before", &file.path)?,
                read_yaml_side(&file.new_text, "after", &file.path)?,
            )
        } else {
            (
                read_args_side(&file.old_text, "before", &file.path)?,
                read_args_side(&file.new_text, "after", &file.path)?,
            )
        };
        for change in compare_settings(&old, &new) {
            changes.retain(|existing| existing.field != change.field);
            changes.push(change);
        }
    }
    if changes.is_empty() {
        return Err(DiffError::NoSettingsChanged);
    }
    Ok(changes)
}

fn read_args_side(
    text: &str,
    side: &'static str,
    file: &str,
) -> Result<Map<String, Value>, DiffError> {
    // Launch scripts continue lines with a trailing backslash and often quote the whole list.
    let joined: String = text
        .lines()
        .map(|line| line.trim().trim_end_matches('\\').trim())
        .filter(|line| !line.starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ")
        .replace(['"', '\''], " ");
    let config = parse_megatron_args(&joined).map_err(|error| DiffError::Unreadable {
        side,
        file: file.to_string(),
        message: error.to_string(),
    })?;
    Ok(set_fields(&config))
}

fn read_yaml_side(
    text: &str,
    side: &'static str,
    file: &str,
) -> Result<Map<String, Value>, DiffError> {
    let flat = flatten_yaml_settings(text);
    let config: TrainingConfig =
        serde_json::from_value(Value::Object(flat)).map_err(|error| DiffError::Unreadable {
            side,
            file: file.to_string(),
            message: error.to_string(),
        })?;
    Ok(set_fields(&config))
}

/// Pulls `key: value` settings out of a YAML fragment whatever their nesting (Megatron-Bridge
/// override files nest them under `model:` or `train:`), keeping only keys the configuration
/// knows. Block lists (`- moe`) under a key become that key's list.
fn flatten_yaml_settings(text: &str) -> Map<String, Value> {
    let known = crate::model::config::KNOWN_KEYS;
    let mut settings = Map::new();
    let mut open_list: Option<String> = None;
    for raw in text.lines() {
        let line = raw.split(" #").next().unwrap_or("").trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(item) = line.strip_prefix("- ") {
            if let Some(key) = &open_list {
                let entry = settings
                    .entry(key.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(items) = entry {
                    items.push(scalar_value(item));
                }
            }
            continue;
        }
        open_list = None;
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        // Dotted Hydra-style keys (`model.context_parallel_size`) name the field last.
        let key = key.trim().rsplit('.').next().unwrap_or("").trim();
        let Some(field) = known.iter().find(|name| **name == key) else {
            continue;
        };
        let value = value.trim();
        if value.is_empty() {
            open_list = Some(field.to_string());
            continue;
        }
        settings.insert(field.to_string(), yaml_value(value));
    }
    settings
}

fn yaml_value(text: &str) -> Value {
    serde_yaml::from_str::<Value>(text).unwrap_or_else(|_| scalar_value(text))
}

fn scalar_value(text: &str) -> Value {
    let text = text.trim().trim_matches(['"', '\'']);
    serde_yaml::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// The fields a configuration sets explicitly, as JSON (unset options are left out).
pub fn set_fields(config: &TrainingConfig) -> Map<String, Value> {
    match serde_json::to_value(config) {
        Ok(Value::Object(map)) => map.into_iter().filter(|(_, v)| !v.is_null()).collect(),
        _ => Map::new(),
    }
}

pub fn compare_settings(old: &Map<String, Value>, new: &Map<String, Value>) -> Vec<SettingChange> {
    let mut fields: Vec<&String> = old.keys().chain(new.keys()).collect();
    fields.sort();
    fields.dedup();
    fields
        .into_iter()
        .filter_map(|field| {
            let before = old.get(field).cloned();
            let after = new.get(field).cloned();
            (before != after).then(|| SettingChange {
                field: field.clone(),
                before,
                after,
            })
        })
        .collect()
}

/// The settings that differ between two full configurations.
pub fn config_changes(before: &TrainingConfig, after: &TrainingConfig) -> Vec<SettingChange> {
    compare_settings(&set_fields(before), &set_fields(after))
}

/// Applies changes to a configuration: each field takes its `after` value, or goes back to the
/// default when the change removed it.
pub fn apply_changes(
    base: &TrainingConfig,
    changes: &[SettingChange],
) -> Result<TrainingConfig, serde_json::Error> {
    let mut value = serde_json::to_value(base)?;
    if let Value::Object(map) = &mut value {
        for change in changes {
            match &change.after {
                Some(after) => {
                    map.insert(change.field.clone(), after.clone());
                }
                None => {
                    map.remove(&change.field);
                }
            }
        }
    }
    serde_json::from_value(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT_DIFF: &str = "\
diff --git a/train_qwen3_235b.sh b/train_qwen3_235b.sh
index 1111111..2222222 100644
--- a/train_qwen3_235b.sh
+++ b/train_qwen3_235b.sh
@@ -10,8 +10,6 @@ torchrun $DIST \\
     --context-parallel-size 8 \\
     --expert-model-parallel-size 8 \\
-    --recompute-granularity selective \\
-    --recompute-modules layernorm moe \\
     --seq-length 131072 \\
";

    #[test]
    fn splits_old_and_new_sides() {
        let files = split_unified_diff(SCRIPT_DIFF).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "train_qwen3_235b.sh");
        assert!(files[0]
            .old_text
            .contains("--recompute-modules layernorm moe"));
        assert!(!files[0].new_text.contains("--recompute-modules"));
        assert!(files[0].new_text.contains("--seq-length 131072"));
    }

    #[test]
    fn finds_removed_recompute_in_a_launch_script() {
        let changes = settings_changed_by_diff(SCRIPT_DIFF).unwrap();
        let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
        assert!(fields.contains(&"recompute_granularity"), "{fields:?}");
        assert!(fields.contains(&"recompute_modules"), "{fields:?}");
        assert!(!fields.contains(&"context_parallel_size"), "{fields:?}");
        let modules = changes
            .iter()
            .find(|c| c.field == "recompute_modules")
            .unwrap();
        assert!(modules.after.is_none());
        assert_eq!(
            modules.before,
            Some(serde_json::json!(["layernorm", "moe"]))
        );
    }

    #[test]
    fn reads_nested_yaml_overrides() {
        let diff = "\
--- a/conf/long.yaml
+++ b/conf/long.yaml
@@ -1,5 +1,5 @@
 model:
-  context_parallel_size: 8
+  context_parallel_size: 4
   tensor_model_parallel_size: 4
   recompute_modules:
     - moe
";
        let changes = settings_changed_by_diff(diff).unwrap();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].field, "context_parallel_size");
        assert_eq!(changes[0].before, Some(serde_json::json!(8)));
        assert_eq!(changes[0].after, Some(serde_json::json!(4)));
    }

    #[test]
    fn rejects_text_without_hunks() {
        assert_eq!(
            settings_changed_by_diff("just some words"),
            Err(DiffError::NoHunks)
        );
    }

    #[test]
    fn reports_diffs_that_change_no_setting() {
        let diff = "--- a/x.sh\n+++ b/x.sh\n@@ -1 +1 @@\n-echo hi\n+echo hello\n";
        assert_eq!(
            settings_changed_by_diff(diff),
            Err(DiffError::NoSettingsChanged)
        );
    }
}
