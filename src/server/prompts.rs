//! Prompts: fixed prompts from [`static_prompts`] plus one prompt per skill.
//!
//! To add a prompt, append a [`StaticPrompt`] to the list returned by [`static_prompts`]
//! (its `render` function gets the catalog snapshot and the string arguments). A static
//! prompt hides a skill prompt of the same name.

use std::collections::HashMap;

use rmcp::model::{GetPromptResult, Prompt, PromptArgument, PromptMessage, Role};
use rmcp::ErrorData as McpError;

use crate::catalog::{Catalog, Skill};

/// Arguments of a prompt call (all strings on the wire).
pub type PromptArguments = HashMap<String, String>;

/// One argument of a static prompt.
#[derive(Debug, Clone, Copy)]
pub struct StaticPromptArgument {
    pub name: &'static str,
    pub description: &'static str,
    pub required: bool,
}

/// A prompt whose name does not depend on the catalog.
#[derive(Debug, Clone, Copy)]
pub struct StaticPrompt {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub arguments: &'static [StaticPromptArgument],
    /// Builds the messages; errors should name the bad argument and list valid choices.
    pub render: fn(&Catalog, &PromptArguments) -> Result<GetPromptResult, McpError>,
    /// Completion values for an argument: `(catalog, argument name, typed prefix)`.
    pub complete: fn(&Catalog, &str, &str) -> Vec<String>,
}

/// Prompts that exist whatever skills are loaded. Add new fixed prompts here.
pub fn static_prompts() -> Vec<StaticPrompt> {
    Vec::new()
}

/// The optional argument every skill prompt takes.
pub const QUESTION_ARGUMENT: &str = "question";

fn skill_prompt(skill: &Skill) -> Prompt {
    Prompt::new(
        skill.name.clone(),
        Some(skill.description.clone()),
        Some(vec![PromptArgument::new(QUESTION_ARGUMENT)
            .with_description("What to do or answer with this skill (optional)")
            .with_required(false)]),
    )
    .with_title(skill.name.clone())
}

/// Every prompt: static prompts first, then one per skill, sorted by name within each group.
pub fn list_prompts(catalog: &Catalog) -> Vec<Prompt> {
    let statics = static_prompts();
    let mut prompts: Vec<Prompt> = statics
        .iter()
        .map(|prompt| {
            Prompt::new(
                prompt.name,
                Some(prompt.description),
                Some(
                    prompt
                        .arguments
                        .iter()
                        .map(|argument| {
                            PromptArgument::new(argument.name)
                                .with_description(argument.description)
                                .with_required(argument.required)
                        })
                        .collect(),
                ),
            )
            .with_title(prompt.title)
        })
        .collect();
    prompts.extend(
        catalog
            .skills()
            .filter(|skill| !statics.iter().any(|prompt| prompt.name == skill.name))
            .map(skill_prompt),
    );
    prompts
}

/// The messages a skill prompt injects: the skill's instructions, then the question.
pub fn render_skill_prompt(skill: &Skill, question: Option<&str>) -> GetPromptResult {
    let mut text = format!(
        "Follow the skill `{}` below. Its files are readable as resources under {}; its card (if any) with read_skill and card: true.\n\n{}",
        skill.name,
        skill.file_uri(""),
        skill.skill_md()
    );
    if let Some(question) = question
        .map(str::trim)
        .filter(|question| !question.is_empty())
    {
        text.push_str("\n\n---\n\nTask: ");
        text.push_str(question);
    }
    GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
        .with_description(skill.description.clone())
}

/// `prompts/get`.
pub fn get_prompt(
    catalog: &Catalog,
    name: &str,
    arguments: &PromptArguments,
) -> Result<GetPromptResult, McpError> {
    let statics = static_prompts();
    if let Some(prompt) = statics.iter().find(|prompt| prompt.name == name) {
        for argument in prompt.arguments.iter().filter(|argument| argument.required) {
            if arguments
                .get(argument.name)
                .is_none_or(|value| value.trim().is_empty())
            {
                return Err(McpError::invalid_params(
                    format!(
                        "prompt `{name}` needs the argument `{}`: {}",
                        argument.name, argument.description
                    ),
                    None,
                ));
            }
        }
        return (prompt.render)(catalog, arguments);
    }
    if let Some(skill) = catalog.skill(name) {
        if let Some(unknown) = arguments
            .keys()
            .find(|key| key.as_str() != QUESTION_ARGUMENT)
        {
            return Err(McpError::invalid_params(
                format!("prompt `{name}` takes only the argument `{QUESTION_ARGUMENT}`, not `{unknown}`"),
                None,
            ));
        }
        return Ok(render_skill_prompt(
            skill,
            arguments.get(QUESTION_ARGUMENT).map(String::as_str),
        ));
    }
    let names = statics
        .iter()
        .map(|prompt| prompt.name)
        .chain(catalog.skill_names());
    let closest = Catalog::closest(name, names, 5);
    Err(McpError::invalid_params(
        format!(
            "no prompt named `{name}`; closest: {}",
            if closest.is_empty() {
                "(none)".to_owned()
            } else {
                closest.join(", ")
            }
        ),
        None,
    ))
}
