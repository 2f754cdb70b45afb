//! `completion/complete` for prompt arguments and resource-template variables.

use rmcp::model::{CompleteRequestParams, Reference};

use super::prompts::{static_prompts, QUESTION_ARGUMENT};
use crate::catalog::Catalog;

/// The most values one completion reply may carry (MCP limit).
pub const MAX_VALUES: usize = 100;

/// Candidates that start with `typed` (case-insensitive), then those that contain it.
pub fn filter_candidates<'a>(
    candidates: impl IntoIterator<Item = &'a str>,
    typed: &str,
) -> Vec<String> {
    let typed = typed.to_lowercase();
    let mut prefix = Vec::new();
    let mut contains = Vec::new();
    for candidate in candidates {
        let lower = candidate.to_lowercase();
        if lower.starts_with(&typed) {
            prefix.push(candidate.to_owned());
        } else if lower.contains(&typed) {
            contains.push(candidate.to_owned());
        }
    }
    prefix.extend(contains);
    prefix.dedup();
    prefix
}

/// Completion values (at most [`MAX_VALUES`]) and the total number of matches.
pub fn complete(catalog: &Catalog, request: &CompleteRequestParams) -> (Vec<String>, usize) {
    let argument = request.argument.name.as_str();
    let typed = request.argument.value.as_str();
    let context_value = |name: &str| {
        request
            .context
            .as_ref()
            .and_then(|context| context.get_argument(name))
            .cloned()
    };
    let mut values: Vec<String> = match &request.r#ref {
        Reference::Prompt(prompt) => {
            if let Some(fixed) = static_prompts().iter().find(|p| p.name == prompt.name) {
                (fixed.complete)(catalog, argument, typed)
            } else if argument == QUESTION_ARGUMENT {
                catalog
                    .skill(&prompt.name)
                    .map(|skill| {
                        filter_candidates(skill.triggers.iter().map(String::as_str), typed)
                    })
                    .unwrap_or_default()
            } else {
                Vec::new()
            }
        }
        Reference::Resource(_) => {
            let skill_name = context_value("skill");
            let skill = skill_name.as_deref().and_then(|name| catalog.skill(name));
            match argument {
                "skill" => filter_candidates(catalog.skill_names(), typed),
                "path" => skill
                    .map(|skill| {
                        filter_candidates(skill.files.iter().map(|f| f.path.as_str()), typed)
                    })
                    .unwrap_or_default(),
                "section" => skill
                    .map(|skill| {
                        filter_candidates(skill.sections.headed().map(|s| s.anchor.as_str()), typed)
                    })
                    .unwrap_or_default(),
                _ => Vec::new(),
            }
        }
        _ => Vec::new(),
    };
    let total = values.len();
    values.truncate(MAX_VALUES);
    (values, total)
}
