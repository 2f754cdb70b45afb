//! Reading the configuration change a commit makes, from any unified diff: `git diff`,
//! `git show` / `git format-patch` output (commit header and all), or plain `diff -u` with
//! timestamps, over one file or several. Parsing the diff is `diffy`'s job; this file only
//! decides how each side of each file is read.
//!
//! Each file's hunks are split into the text before and after the change (context plus removed
//! lines, context plus added lines). Each side is then read the way its file type is written and
//! the two readings are compared setting by setting, so only what the commit really changed
//! counts.

use diffy::patch_set::{FileOperation, ParseOptions, PatchSet};
use serde_json::{Map, Value};
use thiserror::Error;

use super::launch_script::read_launch_script;
use super::overrides::{is_launcher_alias, near_miss, read_value};
use super::python_fragment::{fragment_settings, FragmentSettings};
use super::python_recipe::RecipeFile;
use super::yaml_document::parse_yaml_document;
use crate::model::config::{
    is_known_key, merge_cuda_graph_names, ConfigError, IgnoredSetting, TrainingConfig,
};

#[derive(Debug, Error, PartialEq)]
pub enum DiffError {
    #[error("field `diff`: no hunk found; pass a unified diff (`git diff`, `git show`, `diff -u`: lines starting with `@@`, `+`, `-`)")]
    NoHunks,
    #[error("field `diff`: the change touches no training setting this server models (files: {files}; it reads Megatron-LM flags such as `--context-parallel-size`, Hydra overrides such as `model.context_parallel_size=8` and YAML/JSON keys such as `context_parallel_size:`); pass `after` as a full configuration instead")]
    NoSettingsChanged { files: String },
    #[error("field `recipe`: the diff changes no recipe named `{recipe}` (recipes it changes: {changed})")]
    UnknownRecipe { recipe: String, changed: String },
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
    /// The hunks as written, for readers that attribute lines to what encloses them.
    pub hunks: Vec<HunkLines>,
}

/// One hunk: the function or statement git names in its header, and its lines.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HunkLines {
    pub context: Option<String>,
    pub lines: Vec<DiffLine>,
}

/// A hunk line and which side(s) it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub enum DiffLine {
    Context(String),
    Removed(String),
    Added(String),
}

/// Splits a unified diff into per-file old/new texts. Context lines go to both sides. A diff
/// with `diff --git` headers is read as git's format, anything else as plain unified diff.
pub fn split_unified_diff(diff: &str) -> Result<Vec<FileChange>, DiffError> {
    let files = parse_patch_set(diff);
    if !files.is_empty() {
        return Ok(files);
    }
    // Diffs trimmed or written by hand (agents do both) often carry hunk headers whose line
    // counts no longer match; read them once more with the counts taken from the hunk bodies.
    let files = parse_patch_set(&recount_hunks(diff));
    if files.is_empty() {
        return Err(DiffError::NoHunks);
    }
    Ok(files)
}

/// How `diffy` should read `diff`: git's format where it has `diff --git` headers, plain
/// unified diff otherwise.
pub(super) fn parse_options(diff: &str) -> ParseOptions {
    if diff.lines().any(|line| line.starts_with("diff --git ")) {
        ParseOptions::gitdiff()
    } else {
        ParseOptions::unidiff()
    }
}

fn parse_patch_set(diff: &str) -> Vec<FileChange> {
    let mut files = Vec::new();
    for patch in PatchSet::parse(diff, parse_options(diff)) {
        let Ok(patch) = patch else {
            continue;
        };
        let Some(text) = patch.patch().as_text() else {
            continue;
        };
        let mut file = FileChange {
            path: file_path(patch.operation()),
            ..FileChange::default()
        };
        for hunk in text.hunks() {
            file.hunks.push(HunkLines {
                context: hunk.function_context().map(|c| c.trim().to_string()),
                lines: hunk
                    .lines()
                    .iter()
                    .map(|line| match line {
                        diffy::Line::Context(l) => DiffLine::Context(l.to_string()),
                        diffy::Line::Delete(l) => DiffLine::Removed(l.to_string()),
                        diffy::Line::Insert(l) => DiffLine::Added(l.to_string()),
                    })
                    .collect(),
            });
            for line in hunk.lines() {
                match line {
                    diffy::Line::Context(l) => {
                        file.old_text.push_str(l);
                        file.new_text.push_str(l);
                    }
                    diffy::Line::Delete(l) => file.old_text.push_str(l),
                    diffy::Line::Insert(l) => file.new_text.push_str(l),
                }
                for side in [&mut file.old_text, &mut file.new_text] {
                    if !side.is_empty() && !side.ends_with('\n') {
                        side.push('\n');
                    }
                }
            }
        }
        if !text.hunks().is_empty() {
            files.push(file);
        }
    }
    files
}

/// Rewrites every `@@ -a,b +c,d @@` header with the counts of the body that follows it: the
/// lines up to the next header, file header or a line that is not part of a hunk body.
fn recount_hunks(diff: &str) -> String {
    let lines: Vec<&str> = diff.lines().collect();
    let mut out = String::with_capacity(diff.len() + 64);
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        let Some(header) = line.strip_prefix("@@ ") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let (ranges, context) = header.split_once(" @@").unwrap_or((header, ""));
        let mut starts = ranges.split_whitespace().map(|r| {
            r.trim_start_matches(['-', '+'])
                .split(',')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(1)
        });
        let (old_start, new_start) = (starts.next().unwrap_or(1), starts.next().unwrap_or(1));
        let body_end = (i..lines.len())
            .find(|&j| {
                let l = lines[j];
                l.starts_with("@@ ")
                    || l.starts_with("diff --git ")
                    || (l.starts_with("--- ")
                        && lines.get(j + 1).is_some_and(|n| n.starts_with("+++ ")))
                    || !(l.is_empty() || l.starts_with([' ', '+', '-', '\\']))
            })
            .unwrap_or(lines.len());
        let body = &lines[i..body_end];
        let old_count = body.iter().filter(|l| !l.starts_with(['+', '\\'])).count();
        let new_count = body.iter().filter(|l| !l.starts_with(['-', '\\'])).count();
        out.push_str(&format!(
            "@@ -{old_start},{old_count} +{new_start},{new_count} @@{context}\n"
        ));
        for body_line in body {
            // An empty line inside a hunk is an empty context line whose space was trimmed.
            out.push_str(if body_line.is_empty() { " " } else { body_line });
            out.push('\n');
        }
        i = body_end;
    }
    out
}

/// The path a file patch changes, without git's `a/` `b/` prefixes or `diff -u`'s timestamp.
pub(super) fn file_path(operation: &FileOperation<'_, str>) -> String {
    let raw: &str = match operation {
        FileOperation::Delete(path) | FileOperation::Create(path) => path,
        FileOperation::Modify { modified, .. } => modified,
        FileOperation::Rename { to, .. } | FileOperation::Copy { to, .. } => to,
    };
    let path = raw.split('\t').next().unwrap_or(raw).trim();
    path.strip_prefix("b/")
        .or_else(|| path.strip_prefix("a/"))
        .unwrap_or(path)
        .to_string()
}

fn has_extension(path: &str, extensions: &[&str]) -> bool {
    let lower = path.to_ascii_lowercase();
    extensions.iter().any(|ext| lower.ends_with(ext))
}

/// A setting the change touched: its Megatron field name and its JSON value on each side
/// (`None` = not set on that side, i.e. the default applies).
#[derive(Debug, Clone, PartialEq)]
pub struct SettingChange {
    pub field: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// What a diff changes: the settings, and what was read but not used, with the reason.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DiffReading {
    /// What the diff changes: its non-Python files, plus the one recipe a Python diff changes
    /// (or the one selected).
    pub changes: Vec<SettingChange>,
    pub ignored: Vec<IgnoredSetting>,
    pub files: Vec<String>,
    /// Every recipe (Python function or constant) the diff changes, each on its own; never
    /// merged into `changes` when there are several and none is selected.
    pub recipes: Vec<RecipeChange>,
}

/// The settings one recipe of a Python file changes.
#[derive(Debug, Clone, PartialEq)]
pub struct RecipeChange {
    pub file: String,
    pub recipe: String,
    pub changes: Vec<SettingChange>,
    /// What the hunks of this recipe hold that the diff alone cannot evaluate.
    pub unevaluated: Vec<IgnoredSetting>,
}

/// Reads the settings a diff changes. YAML and JSON files are read as override files;
/// everything else (shell launch scripts, argument lists) as Megatron-LM command lines and
/// Hydra-style `section.key=value` overrides.
pub fn settings_changed_by_diff(diff: &str) -> Result<Vec<SettingChange>, DiffError> {
    read_diff(diff).map(|reading| reading.changes)
}

/// [`settings_changed_by_diff`] with the settings each side read and did not use.
pub fn read_diff(diff: &str) -> Result<DiffReading, DiffError> {
    read_diff_for_recipe(diff, None)
}

/// [`read_diff`], taking one recipe of a Python diff (`recipe`: its function or constant
/// name) as the change when the diff touches several.
pub fn read_diff_for_recipe(diff: &str, recipe: Option<&str>) -> Result<DiffReading, DiffError> {
    let mut reading = DiffReading::default();
    let files = split_unified_diff(diff)?;
    let several_files = files.len() > 1;
    let mut first_error = None;
    for file in files {
        let read = if has_extension(&file.path, &[".py"]) {
            read_python_file(&file).map(|recipes| {
                reading.recipes.extend(recipes);
                None
            })
        } else {
            read_file_sides(&file).map(Some)
        };
        match read {
            Ok(Some((old, new))) => {
                for change in compare_settings(&old.0, &new.0) {
                    reading
                        .changes
                        .retain(|existing| existing.field != change.field);
                    reading.changes.push(change);
                }
                // A setting the new side adds and the model ignores is worth saying; one both
                // sides share is context.
                for ignored in new.1 {
                    if !old.1.contains(&ignored) && !reading.ignored.contains(&ignored) {
                        reading.ignored.push(IgnoredSetting::new(
                            format!("{}: {}", file.path, ignored.key),
                            ignored.reason,
                        ));
                    }
                }
            }
            Ok(None) => {}
            // In a whole commit, a file that is no configuration (a model card, a test) must
            // not hide the files that are; it is listed, and its error returned only if nothing
            // else was read.
            Err(error) if several_files => {
                reading.ignored.push(IgnoredSetting::new(
                    file.path.clone(),
                    format!("not read as a configuration: {error}"),
                ));
                first_error.get_or_insert(error);
            }
            Err(error) => return Err(error),
        }
        reading.files.push(file.path);
    }
    // A recipe whose only changes cannot be modelled is named with what they are.
    for quiet in reading
        .recipes
        .iter()
        .filter(|r| r.changes.is_empty() && recipe.is_none())
    {
        let what: Vec<String> = quiet
            .unevaluated
            .iter()
            .map(|i| format!("`{}` ({})", i.key, i.reason))
            .collect();
        reading.ignored.push(IgnoredSetting::new(
            quiet.recipe.clone(),
            format!(
                "changes no setting the cost model reads: {}",
                what.join("; ")
            ),
        ));
    }
    reading.recipes.retain(|r| !r.changes.is_empty());
    select_recipe(&mut reading, recipe)?;
    if reading.changes.is_empty() && reading.recipes.is_empty() {
        return Err(first_error.unwrap_or(DiffError::NoSettingsChanged {
            files: reading.files.join(", "),
        }));
    }
    Ok(reading)
}

/// Folds the selected recipe (or the only one) into `changes`.
fn select_recipe(reading: &mut DiffReading, recipe: Option<&str>) -> Result<(), DiffError> {
    let chosen = match recipe {
        Some(name) => match reading.recipes.iter().find(|r| r.recipe == name) {
            Some(found) => Some(found.clone()),
            None => {
                let names: Vec<&str> = reading.recipes.iter().map(|r| r.recipe.as_str()).collect();
                return Err(DiffError::UnknownRecipe {
                    recipe: name.to_string(),
                    changed: if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    },
                });
            }
        },
        None if reading.recipes.len() == 1 => reading.recipes.first().cloned(),
        None => None,
    };
    if let Some(chosen) = chosen {
        for change in chosen.changes {
            reading.changes.retain(|c| c.field != change.field);
            reading.changes.push(change);
        }
        reading.ignored.extend(chosen.unevaluated);
    }
    Ok(())
}

fn read_file_sides(file: &FileChange) -> Result<(Side, Side), DiffError> {
    if has_extension(&file.path, &[".yaml", ".yml", ".json"]) {
        Ok((
            read_yaml_side(&file.old_text, "before", &file.path)?,
            read_yaml_side(&file.new_text, "after", &file.path)?,
        ))
    } else {
        Ok((
            read_args_side(&file.old_text, "before", &file.path)?,
            read_args_side(&file.new_text, "after", &file.path)?,
        ))
    }
}

/// The lines of each recipe a Python diff touches, per side: a line belongs to the recipe git
/// names in the hunk header until a line at column 0 on the same side opens another
/// (`def name(`, `NAME = ...`). Removed lines move only the old side, added lines only the new
/// one, so a definition the commit replaces does not capture the lines added after it.
fn python_recipe_lines(file: &FileChange) -> Vec<(Option<String>, String, String)> {
    let mut sides: Vec<(Option<String>, String, String)> = Vec::new();
    let slot =
        |sides: &mut Vec<(Option<String>, String, String)>, recipe: &Option<String>| match sides
            .iter()
            .position(|(r, _, _)| r == recipe)
        {
            Some(i) => i,
            None => {
                sides.push((recipe.clone(), String::new(), String::new()));
                sides.len() - 1
            }
        };
    for hunk in &file.hunks {
        let header = hunk.context.as_deref().and_then(top_level_name);
        let mut current = [header.clone(), header];
        for line in &hunk.lines {
            let (text, on_sides) = match line {
                DiffLine::Context(t) => (t, [true, true]),
                DiffLine::Removed(t) => (t, [true, false]),
                DiffLine::Added(t) => (t, [false, true]),
            };
            let opens =
                !text.starts_with([' ', '\t', '#', ')', ']', '}', '@']) && !text.trim().is_empty();
            for side in 0..2 {
                if !on_sides[side] {
                    continue;
                }
                if opens {
                    current[side] = top_level_name(text);
                }
                let index = slot(&mut sides, &current[side]);
                let buffer = if side == 0 {
                    &mut sides[index].1
                } else {
                    &mut sides[index].2
                };
                buffer.push_str(text.trim_end_matches('\n'));
                buffer.push('\n');
            }
        }
        // Hunks are apart in the file: a statement never continues across them.
        for (_, before, after) in sides.iter_mut() {
            before.push('\n');
            after.push('\n');
        }
    }
    sides
}

/// `NAME = OTHER` at column 0: the constant is another name for `OTHER`.
fn alias_target(text: &str) -> Option<(String, String)> {
    let (left, right) = text.trim().split_once('=')?;
    let is_name = |t: &str| {
        !t.is_empty()
            && !t.starts_with(|c: char| c.is_ascii_digit())
            && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let (left, right) = (left.trim(), right.trim());
    (is_name(left) && is_name(right)).then(|| (left.to_string(), right.to_string()))
}

/// Resolves `NAME = OTHER` recipes to what the diff shows of `OTHER` on the same side.
fn resolve_aliases(
    sides: &mut [(Option<String>, FragmentSettings, FragmentSettings)],
    texts: &[(Option<String>, String, String)],
) {
    for side in 0..2 {
        let mut changed = true;
        let mut rounds = 0;
        while changed && rounds < 8 {
            changed = false;
            rounds += 1;
            for (recipe, before, after) in texts {
                let text = if side == 0 { before } else { after };
                let Some((_, target)) = alias_target(text) else {
                    continue;
                };
                let Some(source) = sides
                    .iter()
                    .find(|(r, _, _)| r.as_deref() == Some(target.as_str()))
                    .map(|(_, b, a)| if side == 0 { b.clone() } else { a.clone() })
                else {
                    continue;
                };
                if let Some(entry) = sides.iter_mut().find(|(r, _, _)| r == recipe) {
                    let slot = if side == 0 {
                        &mut entry.1
                    } else {
                        &mut entry.2
                    };
                    if slot.tree != source.tree {
                        *slot = FragmentSettings {
                            tree: source.tree,
                            unevaluated: source.unevaluated,
                        };
                        changed = true;
                    }
                }
            }
        }
    }
}

/// `def name(...)` / `async def name(` / `NAME = ...` / `NAME: T = ...` at column 0.
fn top_level_name(line: &str) -> Option<String> {
    let rest = line
        .strip_prefix("async def ")
        .or_else(|| line.strip_prefix("def "));
    let identifier = |text: &str| -> Option<String> {
        let name: String = text
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit())).then_some(name)
    };
    if let Some(rest) = rest {
        return identifier(rest.trim_start());
    }
    let name = identifier(line)?;
    let after = line[name.len()..].trim_start();
    let is_assignment = (after.starts_with('=') && !after.starts_with("=="))
        || (after.starts_with(':') && after.contains('='));
    is_assignment.then_some(name)
}

/// Each recipe a Python diff touches. When each side of the hunks is valid Python on its own
/// (module-level constants such as `X = replace(BASE, ...)` and their aliases), the sides are
/// evaluated as files, so an alias sees the constant it names; otherwise each recipe's lines
/// are read as fragments.
fn read_python_file(file: &FileChange) -> Result<Vec<RecipeChange>, DiffError> {
    let by_line = python_recipe_lines(file);
    let parsed = match (
        RecipeFile::parse(&file.old_text),
        RecipeFile::parse(&file.new_text),
    ) {
        (Ok(old), Ok(new)) => {
            let mut names: Vec<String> = Vec::new();
            for span in old.recipes().into_iter().chain(new.recipes()) {
                if !names.contains(&span.name) {
                    names.push(span.name);
                }
            }
            // Hunks inside function bodies parse too (as indented statements), but their
            // recipe is only in the hunk header: those are read as fragments.
            let whole = by_line
                .iter()
                .all(|(recipe, _, _)| recipe.as_ref().is_none_or(|r| names.contains(r)));
            whole.then_some((old, new, names))
        }
        _ => None,
    };
    let sides: Vec<(Option<String>, FragmentSettings, FragmentSettings)> = match parsed {
        Some((old, new, names)) => {
            let evaluate = |file: &RecipeFile, name: &str| match file.settings(name) {
                Ok(settings) => FragmentSettings {
                    tree: settings.tree,
                    unevaluated: settings.unevaluated,
                },
                Err(_) => FragmentSettings::default(),
            };
            names
                .into_iter()
                .map(|name| {
                    let before = evaluate(&old, &name);
                    let after = evaluate(&new, &name);
                    (Some(name), before, after)
                })
                .collect()
        }
        None => {
            let mut out = Vec::new();
            for (recipe, before, after) in &by_line {
                let read = |text: &str, side| {
                    fragment_settings(text).map_err(|e| unreadable(side, &file.path, e))
                };
                out.push((
                    recipe.clone(),
                    read(before, "before")?,
                    read(after, "after")?,
                ));
            }
            resolve_aliases(&mut out, &by_line);
            out
        }
    };
    let mut out = Vec::new();
    for (recipe, before, after) in sides {
        let explicit_nulls = null_fields(&after.tree);
        let old = python_side_settings(before, "before", &file.path)?;
        let new = python_side_settings(after, "after", &file.path)?;
        let mut unevaluated: Vec<IgnoredSetting> = Vec::new();
        // A line the commit deletes leaves the recipe with what it inherits (its base recipe,
        // a helper), which the diff does not show; only `= None` written out resets a field.
        let changes: Vec<SettingChange> = compare_settings(&old.0, &new.0)
            .into_iter()
            .filter(|change| {
                let removed = change.after.is_none() && !explicit_nulls.contains(&change.field);
                if removed {
                    unevaluated.push(IgnoredSetting::new(
                        format!("{}: {}", file.path, change.field),
                        "no longer set in this recipe; the value it inherits instead is not in the diff, so this change is not modelled",
                    ));
                }
                !removed
            })
            .collect();
        for entry in new.1 {
            if !old.1.contains(&entry) && !unevaluated.contains(&entry) {
                unevaluated.push(IgnoredSetting::new(
                    format!("{}: {}", file.path, entry.key),
                    entry.reason,
                ));
            }
        }
        if changes.is_empty() && unevaluated.is_empty() {
            continue;
        }
        out.push(RecipeChange {
            file: file.path.clone(),
            recipe: recipe.unwrap_or_else(|| "(module level)".to_string()),
            changes,
            unevaluated,
        });
    }
    Ok(out)
}

/// Fields a recipe side sets to `None` explicitly (at any nesting).
fn null_fields(tree: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Value::Object(map) = tree {
        for (key, value) in map {
            match value {
                Value::Null => out.push(key.clone()),
                Value::Object(_) => out.extend(null_fields(value)),
                _ => {}
            }
        }
    }
    out
}

fn python_side_settings(
    read: FragmentSettings,
    side: &'static str,
    file: &str,
) -> Result<Side, DiffError> {
    // Top-level names a fragment assigns are either cut-off keyword arguments (settings) or
    // locals and module constants (not settings); only the first kind, and near misses of it
    // (typos, which `read_value` then refuses), are read as settings.
    let mut tree = Map::new();
    let mut locals = Vec::new();
    if let Value::Object(entries) = read.tree {
        for (key, value) in entries {
            if value.is_object()
                || is_known_key(&key)
                || is_launcher_alias(&key)
                || near_miss(&key).is_some()
            {
                tree.insert(key, value);
            } else {
                locals.push(IgnoredSetting::new(
                    key,
                    "a local or module name, not a configuration field",
                ));
            }
        }
    }
    let config = read_value(&Value::Object(tree)).map_err(|e| unreadable(side, file, e))?;
    let mut ignored = config.ignored_settings.clone();
    ignored.extend(locals);
    ignored.extend(read.unevaluated.into_iter().map(|(key, reason)| {
        IgnoredSetting::new(key, format!("not evaluated from the diff: {reason}"))
    }));
    Ok((set_fields(&config), ignored))
}

type Side = (Map<String, Value>, Vec<IgnoredSetting>);

fn unreadable(side: &'static str, file: &str, error: impl ToString) -> DiffError {
    DiffError::Unreadable {
        side,
        file: file.to_string(),
        message: error.to_string(),
    }
}

fn read_args_side(text: &str, side: &'static str, file: &str) -> Result<Side, DiffError> {
    let config = read_launch_script(text).map_err(|e| unreadable(side, file, e))?;
    Ok((set_fields(&config), config.ignored_settings))
}

/// A side of a YAML/JSON diff is read as a whole document when it is one (so nesting, Bridge
/// sections and typos are judged as in a file); a fragment cut out of its nesting is read key
/// by key.
fn read_yaml_side(text: &str, side: &'static str, file: &str) -> Result<Side, DiffError> {
    if let Ok(document) = parse_yaml_document(text) {
        if document.is_object() {
            let config = read_value(&document).map_err(|e| unreadable(side, file, e))?;
            return Ok((set_fields(&config), config.ignored_settings));
        }
    }
    let (mut flat, ignored) = flatten_yaml_settings(text).map_err(|e| unreadable(side, file, e))?;
    merge_cuda_graph_names(&mut flat).map_err(|e| unreadable(side, file, e))?;
    let config: TrainingConfig =
        serde_json::from_value(Value::Object(flat)).map_err(|e| unreadable(side, file, e))?;
    Ok((set_fields(&config), ignored))
}

/// Pulls `key: value` settings out of a YAML fragment whatever their nesting (Megatron-Bridge
/// override files nest them under `model:` or `train:`). Keys the configuration knows are
/// kept, near misses are errors, the rest are listed as ignored. Block lists (`- moe`) under a
/// key become that key's list.
fn flatten_yaml_settings(
    text: &str,
) -> Result<(Map<String, Value>, Vec<IgnoredSetting>), ConfigError> {
    let known = crate::model::config::KNOWN_KEYS;
    let mut settings = Map::new();
    let mut ignored = Vec::new();
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
                    items.push(yaml_scalar(item));
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
        let value = value.trim();
        let Some(field) = known.iter().find(|name| **name == key) else {
            if let Some(suggestion) = near_miss(key) {
                return Err(ConfigError::UnknownKey {
                    key: key.to_string(),
                    suggestion: Some(suggestion),
                });
            }
            if !value.is_empty() {
                ignored.push(IgnoredSetting::new(
                    key,
                    "not a setting the cost model uses",
                ));
            }
            continue;
        };
        if value.is_empty() {
            open_list = Some(field.to_string());
            continue;
        }
        settings.insert(field.to_string(), yaml_value(value));
    }
    Ok((settings, ignored))
}

fn yaml_value(text: &str) -> Value {
    serde_yaml::from_str::<Value>(text).unwrap_or_else(|_| yaml_scalar(text))
}

/// A YAML scalar as written in a fragment, quotes stripped.
fn yaml_scalar(text: &str) -> Value {
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
            Err(DiffError::NoSettingsChanged {
                files: "x.sh".into()
            })
        );
    }

    #[test]
    fn reads_plain_diff_u_with_timestamps() {
        let diff = "--- a.yaml\t2026-01-01 10:00:00.000000000 +0100\n\
+++ b.yaml\t2026-01-02 10:00:00.000000000 +0100\n\
@@ -1,3 +1,3 @@\n model:\n-  context_parallel_size: 8\n+  context_parallel_size: 4\n   tensor_model_parallel_size: 2\n";
        let reading = read_diff(diff).unwrap();
        assert_eq!(reading.files, ["b.yaml"]);
        assert_eq!(reading.changes.len(), 1, "{:?}", reading.changes);
        assert_eq!(reading.changes[0].field, "context_parallel_size");
        assert_eq!(reading.changes[0].before, Some(serde_json::json!(8)));
        assert_eq!(reading.changes[0].after, Some(serde_json::json!(4)));
    }

    #[test]
    fn reads_git_show_output_over_several_files() {
        let diff = "\
commit 0123456789abcdef0123456789abcdef01234567
Author: A Person <a@example.com>
Date:   Mon Nov 2 10:00:00 2026 +0000

    Lower CP and move EP into the launch script

diff --git a/conf/long.yaml b/conf/long.yaml
index 1111111..2222222 100644
--- a/conf/long.yaml
+++ b/conf/long.yaml
@@ -1,3 +1,3 @@
 model:
-  context_parallel_size: 8
+  context_parallel_size: 4
   tensor_model_parallel_size: 2
diff --git a/launch.sh b/launch.sh
index 3333333..4444444 100755
--- a/launch.sh
+++ b/launch.sh
@@ -3,3 +3,3 @@ torchrun pretrain_gpt.py \\
     --seq-length 131072 \\
-    --expert-model-parallel-size 8 \\
+    --expert-model-parallel-size 16 \\
     --micro-batch-size 1
";
        let reading = read_diff(diff).unwrap();
        assert_eq!(reading.files, ["conf/long.yaml", "launch.sh"]);
        let field = |name: &str| reading.changes.iter().find(|c| c.field == name).cloned();
        let cp = field("context_parallel_size").unwrap();
        assert_eq!((cp.before, cp.after), (Some(8.into()), Some(4.into())));
        let ep = field("expert_model_parallel_size").unwrap();
        assert_eq!((ep.before, ep.after), (Some(8.into()), Some(16.into())));
        assert_eq!(reading.changes.len(), 2, "{:?}", reading.changes);
    }

    #[test]
    fn reads_format_patch_mail_with_hydra_overrides() {
        let diff = "\
From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001
From: A Person <a@example.com>
Date: Mon, 2 Nov 2026 10:00:00 +0000
Subject: [PATCH] Recompute only the MoE activation

---
 run.sh | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/run.sh b/run.sh
index 5555555..6666666 100644
--- a/run.sh
+++ b/run.sh
@@ -1,2 +1,2 @@
 python run_recipe.py --recipe qwen3_235b \\
-  model.recompute_granularity=selective 'model.recompute_modules=[moe,layernorm]'
+  model.recompute_granularity=selective 'model.recompute_modules=[moe_act]'
-- 
2.43.0
";
        let changes = settings_changed_by_diff(diff).unwrap();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].field, "recompute_modules");
        assert_eq!(
            changes[0].before,
            Some(serde_json::json!(["moe", "layernorm"]))
        );
        assert_eq!(changes[0].after, Some(serde_json::json!(["moe_act"])));
    }
}
