//! Triage of a Python recipe and a commit's diff read as whole files: the diff applied to the
//! `before` file and to the modules it imports, the recipes read on both sides.

use super::{
    attach_measurements, combine_recipes, config_changes, triage_change, SideModules,
    TriageOomInput, TriageOomOutput,
};
use crate::catalog::Catalog;
use crate::inputs::diff_apply::{apply_to_text, changed_recipes, PatchedModules};
use crate::inputs::python_recipe::{ModuleLoader, RecipeFile};
use crate::inputs::source::{detect_format, ConfigSource, TextFormat};
use crate::model::config::IgnoredSetting;
use crate::model::TrainingConfig;
use crate::tools::common::{InputNotes, ToolError};

/// Reads one side of a change (`before` or `after`) as `triage_with_loaders` does: the field
/// name for errors, the text, the recipe to read from a Python file and its module loader.
pub(super) type ReadSide<'a> = dyn Fn(
        &'static str,
        &ConfigSource,
        Option<&str>,
        Option<&dyn ModuleLoader>,
    ) -> Result<TrainingConfig, ToolError>
    + 'a;

/// A Python `before` recipe and a diff of it (or of the modules it imports): the diff is
/// applied to the whole files and the recipe read on both sides, so what the commit changes
/// is read as Python runs it, inherited settings and helper bodies included. Without a
/// `recipe`, the recipes whose lines the diff changes are triaged, or, when it changes only
/// what they import, every recipe of the file it changes. `None` when the diff applies to
/// neither the file nor its imports (it is then read hunk by hunk).
pub(super) fn triage_patched_recipe(
    catalog: &Catalog,
    input: &TriageOomInput,
    diff: &str,
    modules: SideModules<'_>,
    read_side: &ReadSide<'_>,
) -> Result<Option<TriageOomOutput>, ToolError> {
    let ConfigSource::Text(before_text) = &input.before else {
        return Ok(None);
    };
    if detect_format(before_text) != TextFormat::PythonRecipe {
        return Ok(None);
    }
    let applied = apply_to_text(diff, before_text);
    let patched = modules.before.map(|inner| PatchedModules::new(inner, diff));
    if applied.is_empty() && patched.is_none() {
        return Ok(None);
    }
    let after_text = applied
        .first()
        .map_or_else(|| before_text.clone(), |(_, text)| text.clone());
    let after_source = ConfigSource::Text(after_text.clone());
    let after_loader = patched
        .as_ref()
        .map(|m| m as &dyn ModuleLoader)
        .or(modules.before);
    let chosen = input.recipe.is_some();
    let candidates: Vec<String> = match &input.recipe {
        Some(recipe) => vec![recipe.clone()],
        None => {
            let changed = changed_recipes(before_text, &after_text);
            if changed.is_empty() {
                RecipeFile::parse(before_text)
                    .map(|file| {
                        file.recipes()
                            .into_iter()
                            .map(|span| span.name)
                            .filter(|name| !name.starts_with('_'))
                            .collect()
                    })
                    .unwrap_or_default()
            } else {
                changed
            }
        }
    };
    let mut outputs = Vec::new();
    let mut unchanged = Vec::new();
    for name in candidates {
        // A name that does not read as a recipe before the change is not one.
        let Ok(before) = read_side("before", &input.before, Some(&name), modules.before) else {
            if chosen {
                return Ok(None);
            }
            continue;
        };
        let after = match read_side("after", &after_source, Some(&name), after_loader) {
            Ok(after) => after,
            Err(error) if chosen => return Err(error),
            Err(error) => {
                unchanged.push(IgnoredSetting::new(
                    name,
                    format!("not read after the diff: {error}"),
                ));
                continue;
            }
        };
        let changes = config_changes(&before, &after);
        if changes.is_empty() {
            unchanged.push(IgnoredSetting::new(
                name,
                "the diff changes no setting of it that the cost model reads",
            ));
            continue;
        }
        let mut notes = InputNotes::default();
        for path in patched.as_ref().map(|p| p.failed()).unwrap_or_default() {
            notes.ignore(
                format!("diff: {path}"),
                "changes a module the recipe imports, but its hunks do not apply to the checkout's copy: that module is read unchanged",
            );
        }
        outputs.push(triage_change(
            catalog,
            &before,
            after,
            changes,
            Some(name),
            notes,
        )?);
    }
    let mut read_files: Vec<String> = applied.iter().map(|(path, _)| path.clone()).collect();
    read_files.extend(patched.as_ref().map(|p| p.patched()).unwrap_or_default());
    if read_files.is_empty() {
        return Ok(None);
    }
    if outputs.is_empty() {
        let detail: Vec<String> = unchanged
            .iter()
            .map(|u| format!("`{}`: {}", u.key, u.reason))
            .collect();
        return Err(ToolError::field(
            "diff",
            format!(
                "applied to {}, the diff changes no setting the cost model reads ({})",
                read_files.join(", "),
                detail.join("; ")
            ),
            "check that `before` is the file the diff applies to, or name the recipe with `recipe`",
        ));
    }
    let first = outputs.remove(0);
    let mut out = combine_recipes(first, outputs, unchanged);
    out.rationale = format!(
        "**Read as whole files**: the diff applied to {}, and the recipes read before and after it{}.\n\n{}",
        read_files
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", "),
        if modules.before.is_some() {
            " with the modules they import"
        } else {
            ""
        },
        out.rationale
    );
    attach_measurements(&mut out, &input.before, None);
    Ok(Some(out))
}

/// A launch script and a diff of it: the diff is applied to the whole script and both sides
/// evaluated (`inputs::shell_script`), so a commit that changes a variable the command
/// expands (`MICRO_BATCH_SIZE=1` → `2`) is read as the flag it sets. `None` when `before` is
/// not a script or the diff does not apply to it (it is then read hunk by hunk).
pub(super) fn triage_patched_script(
    catalog: &Catalog,
    input: &TriageOomInput,
    diff: &str,
    read_side: &ReadSide<'_>,
) -> Result<Option<TriageOomOutput>, ToolError> {
    let ConfigSource::Text(before_text) = &input.before else {
        return Ok(None);
    };
    if detect_format(before_text) != TextFormat::CommandLine {
        return Ok(None);
    }
    let applied = apply_to_text(diff, before_text);
    let Some((path, after_text)) = applied.into_iter().next() else {
        return Ok(None);
    };
    let before = read_side("before", &input.before, None, None)?;
    let after_source = ConfigSource::Text(after_text);
    let after = read_side("after", &after_source, None, None)?;
    let changes = config_changes(&before, &after);
    if changes.is_empty() {
        return Err(ToolError::field(
            "diff",
            format!(
                "applied to `{path}` and both sides evaluated, the diff changes no setting the cost model reads"
            ),
            "check that `before` is the script the diff applies to, or pass `after` as a full configuration",
        ));
    }
    let mut out = triage_change(
        catalog,
        &before,
        after,
        changes,
        None,
        InputNotes::default(),
    )?;
    out.rationale = format!(
        "**Read as whole files**: the diff applied to `{path}`, and the script evaluated before and after it.\n\n{}",
        out.rationale
    );
    attach_measurements(&mut out, &input.before, Some(&after_source));
    Ok(Some(out))
}
