//! Prompts: fixed prompts from [`static_prompts`] plus one prompt per skill.
//!
//! To add a prompt, append a [`StaticPrompt`] to the list returned by [`static_prompts`]
//! (its `render` function gets the catalog snapshot and the string arguments). A static
//! prompt hides a skill prompt of the same name.

use std::collections::HashMap;

use rmcp::model::{GetPromptResult, Prompt, PromptArgument, PromptMessage, Role};
use rmcp::ErrorData as McpError;

use crate::catalog::{Catalog, Skill};
use crate::tools::skills::{text_window, MAX_TEXT_BYTES};

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
    vec![
        StaticPrompt {
            name: "recipe",
            title: "Long-context MoE recipe",
            description: "Walks through getting a training recipe for a MoE model at long context: documented recipe, CP sizing, feasibility, and a layout search when nothing documented fits.",
            arguments: &[
                StaticPromptArgument { name: "model", description: "Model card id, see list_models (e.g. deepseek-v3)", required: true },
                StaticPromptArgument { name: "seq_length", description: "Sequence length in tokens, e.g. 262144", required: true },
                StaticPromptArgument { name: "hardware", description: "Hardware card id (list_hardware), e.g. h100", required: false },
                StaticPromptArgument { name: "num_gpus", description: "GPUs available (optional)", required: false },
            ],
            render: render_recipe,
            complete: complete_cards,
        },
        StaticPrompt {
            name: "triage",
            title: "Triage a long-context OOM or slowdown",
            description: "Walks through triaging a commit that made a long-context MoE run go out of memory or slow down: triage_oom on before/after or a diff, reading the breakdown, choosing the cheapest fix.",
            arguments: &[
                StaticPromptArgument { name: "before", description: "The configuration before the commit (YAML/JSON or a Megatron-LM command line)", required: false },
                StaticPromptArgument { name: "diff", description: "The commit's unified diff of the launch script or override file", required: false },
                StaticPromptArgument { name: "symptom", description: "What went wrong (OOM at step N, tokens/s dropped by X%)", required: false },
            ],
            render: render_triage,
            complete: |_, _, _| Vec::new(),
        },
        StaticPrompt {
            name: "log",
            title: "Why did my run go out of memory or run slow?",
            description: "Walks through reading a Megatron training log with the cost model: compare_with_log for what the run measured against what the model predicts, triage_oom when a run that worked and one that failed are both at hand, and calibrating to the cluster when step times are off on several runs.",
            arguments: &[
                StaticPromptArgument { name: "log", description: "The training log's text (from its start: rank 0 prints the arguments)", required: true },
                StaticPromptArgument { name: "hardware", description: "The GPU the run used, a hardware card id (logs do not name it), e.g. h100", required: true },
                StaticPromptArgument { name: "before_log", description: "The log of the last run that worked, if this one is a failing change", required: false },
                StaticPromptArgument { name: "symptom", description: "What went wrong (OOM at step N, tokens/s dropped by X%)", required: false },
            ],
            render: render_log,
            complete: complete_cards,
        },
    ]
}

/// Model and hardware ids for the `recipe` prompt's arguments.
fn complete_cards(catalog: &Catalog, argument: &str, prefix: &str) -> Vec<String> {
    let cost = catalog.cost();
    let names: Vec<&String> = match argument {
        "model" => cost.models.keys().collect(),
        "hardware" => cost.hardware.keys().collect(),
        _ => Vec::new(),
    };
    names
        .into_iter()
        .filter(|name| name.starts_with(&prefix.to_ascii_lowercase()))
        .cloned()
        .collect()
}

fn argument<'a>(arguments: &'a PromptArguments, name: &str) -> Option<&'a str> {
    arguments
        .get(name)
        .map(String::as_str)
        .filter(|v| !v.trim().is_empty())
}

fn render_recipe(
    catalog: &Catalog,
    arguments: &PromptArguments,
) -> Result<GetPromptResult, McpError> {
    let model = argument(arguments, "model").ok_or_else(|| {
        McpError::invalid_params(
            format!(
                "argument `model` is required; one of: {}",
                catalog
                    .cost()
                    .models
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None,
        )
    })?;
    let seq = argument(arguments, "seq_length").ok_or_else(|| {
        McpError::invalid_params("argument `seq_length` is required, e.g. 131072", None)
    })?;
    let hardware = argument(arguments, "hardware").unwrap_or("h100");
    let gpus = argument(arguments, "num_gpus")
        .map(|g| format!(" on {g} GPUs"))
        .unwrap_or_default();
    let text = format!(
        "I need a training recipe for {model} at {seq} tokens on {hardware}{gpus}.\n\n\
Work through the moe-skills tools in this order and show the numbers at each step:\n\
1. `lookup_recipe` with model, seq_length, hardware (and num_gpus if given). If an exact documented recipe exists, start from it; otherwise take the adapted layout of the nearest one and say what changed.\n\
2. `size_cp` to confirm the context-parallel size and the local sequence length per GPU.\n\
3. `check_feasibility` on the final configuration: report peak memory on the worst rank against capacity, tokens/s and TFLOP/s per GPU, and the binding wall.\n\
4. If it does not fit or the margin is under 5%, call `choose_recompute` (prefer selective modules; avoid core_attn at long context), then `plan_layouts` if it still does not fit.\n\
Answer with the layout (TP/CP/EP/ETP/PP/VPP/DP/EDP), precision, dispatcher, recompute, offload, optimizer sharding, GPU count, predicted memory and throughput, and cite the skill sections the tools returned. Say which numbers are measured and which are predicted."
    );
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
            .with_description(format!("Recipe for {model} at {seq} tokens")),
    )
}

fn render_triage(
    catalog: &Catalog,
    arguments: &PromptArguments,
) -> Result<GetPromptResult, McpError> {
    let mut text = String::from(
        "A commit made a long-context MoE training run go out of memory or slow down. Triage it with the moe-skills tools:\n\
1. Build the `before` configuration (Megatron field names; a launch script's flags work via `diff`).\n\
2. Call `triage_oom` with `before` plus `after`, or `before` plus the commit's unified `diff`.\n\
3. Report the root cause (the first entry of `causes`) with its memory and step-time delta, and the component deltas (activations, logits, optimizer...).\n\
4. Recommend the cheapest fix from `fixes` that fits, with its predicted peak memory and step-time cost; confirm with `check_feasibility`.\n\
Cite the moe-memory-triage sections the tool returns.",
    );
    if let Some(symptom) = argument(arguments, "symptom") {
        text.push_str(&format!("\n\nSymptom: {symptom}"));
    }
    if let Some(before) = argument(arguments, "before") {
        text.push_str(&format!("\n\nBefore:\n```\n{before}\n```"));
    }
    if let Some(diff) = argument(arguments, "diff") {
        text.push_str(&format!("\n\nDiff:\n```diff\n{diff}\n```"));
    }
    let mut messages = vec![PromptMessage::new_text(Role::User, text)];
    if let Some(skill) = catalog.skill("moe-memory-triage") {
        messages.push(PromptMessage::new_text(
            Role::User,
            format!("Reference (skill moe-memory-triage):\n\n{}", skill.body()),
        ));
    }
    Ok(GetPromptResult::new(messages).with_description("Triage a long-context OOM or slowdown"))
}

fn render_log(catalog: &Catalog, arguments: &PromptArguments) -> Result<GetPromptResult, McpError> {
    let log = argument(arguments, "log").ok_or_else(|| {
        McpError::invalid_params(
            "argument `log` is required: the text of the training log, from its start",
            None,
        )
    })?;
    let hardware = argument(arguments, "hardware").ok_or_else(|| {
        let known: Vec<&str> = catalog.cost().hardware.keys().map(String::as_str).collect();
        McpError::invalid_params(
            format!(
                "argument `hardware` is required (logs do not name the GPU): one of {}",
                known.join(", ")
            ),
            None,
        )
    })?;
    let mut text = format!(
        "Here is a Megatron training log from `{hardware}` GPUs. Explain what happened with the moe-skills tools:\n\
1. Call `compare_with_log` with `log` (the text below) and `hardware: {hardware}`; add `model` only if it says the argument dump lacks the architecture.\n\
2. Memory: compare each rank's `max allocated` with the model's allocated view and `max reserved` with its peak. A large `max reserved − max allocated` is the caching allocator (try `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`); a CUDA OOM message says how much was asked for and how much was free. Name the largest terms of the memory breakdown.\n\
3. Speed: compare the measured step with the predicted one and its breakdown (compute, exposed communication, bubble, host). Say which wall binds and what the explanations list.\n\
4. If a run that worked is at hand (`before_log`), call `triage_oom` with both logs as `before` and `after`: it ranks the settings that changed by their memory and step-time effect and proposes fixes, reverting included.\n\
5. Recommend the cheapest fix that fits (`choose_recompute`, `size_cp`, `plan_layouts`), with its predicted memory and step time; confirm it with `check_feasibility`.\n\
6. If predicted and measured step times disagree on several runs of this cluster, suggest `moe-skills calibrate --log A.log --log B.log … --hardware {hardware} --write cluster.yaml` and `--calibration cluster.yaml`: it fits only what the runs can identify and checks each fit on a run it did not see.\n\
Quote numbers from the tool answers only."
    );
    if let Some(symptom) = argument(arguments, "symptom") {
        text.push_str(&format!("\n\nSymptom: {symptom}"));
    }
    if let Some(before) = argument(arguments, "before_log") {
        text.push_str(&format!(
            "\n\nLog of the run that worked:\n```\n{before}\n```"
        ));
    }
    text.push_str(&format!("\n\nLog:\n```\n{log}\n```"));
    let mut messages = vec![PromptMessage::new_text(Role::User, text)];
    if let Some(skill) = catalog.skill("moe-memory-triage") {
        messages.push(PromptMessage::new_text(
            Role::User,
            format!("Reference (skill moe-memory-triage):\n\n{}", skill.body()),
        ));
    }
    Ok(GetPromptResult::new(messages).with_description("Read a training log with the cost model"))
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
/// SKILL.md longer than [`MAX_TEXT_BYTES`] is cut there (at a line end) with a note on how
/// to read the rest, as `read_skill` does.
pub fn render_skill_prompt(skill: &Skill, question: Option<&str>) -> GetPromptResult {
    let markdown = skill.skill_md();
    let (shown, cut_at) = text_window(markdown, 0, MAX_TEXT_BYTES);
    let mut text = format!(
        "Follow the skill `{}` below. Its files are readable as resources under {}; its card (if any) with read_skill and card: true.\n\n{shown}",
        skill.name,
        skill.file_uri(""),
    );
    if let Some(next) = cut_at {
        text.push_str(&format!(
            "\n\n[SKILL.md is cut here, at byte {next} of {}; read on with read_skill (name `{}`, offset {next}) or the resource {}]",
            markdown.len(),
            skill.name,
            skill.uri()
        ));
    }
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
