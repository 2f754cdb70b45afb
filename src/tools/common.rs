//! What every cost-model tool shares: typed errors that name the field and the fix, model and
//! hardware resolution against the catalog, evaluation, summaries and citations.

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::catalog::{Catalog, CostCards};
use crate::model::config::CpCommType;
use crate::model::{
    evaluate, Architecture, CostConstants, Estimate, Hardware, ModelSpec, TrainingConfig,
};

/// A tool input the server cannot answer for. Every message names the field and a fix.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ToolError {
    #[error("field `{field}`: {problem}; {fix}")]
    InvalidField {
        field: String,
        problem: String,
        fix: String,
    },
    #[error("field `model`: unknown model `{given}`; use one of the model card ids (closest: {closest}) or pass a HuggingFace config.json object")]
    UnknownModel { given: String, closest: String },
    #[error("field `model`: `{given}` is a vision-language model, and the cost model has no vision encoder (it prices decoder-only language models); `{language_card}` is the card of the language model its name names: give that to price the language model alone, knowing the vision encoder's time and memory are then not counted")]
    VisionLanguageModel {
        given: String,
        language_card: String,
    },
    #[error("field `model`: the HuggingFace config could not be read: {0}")]
    BadHfConfig(String),
    #[error("field `hardware`: unknown hardware `{given}`; use one of: {known}")]
    UnknownHardware { given: String, known: String },
    #[error("the catalog has no cost-model constants card (cards/cost-model.yaml); restore it or add one under a --skills-dir root")]
    NoConstants,
    /// A configuration that does not read; the message names the key.
    #[error("{0}; use the Megatron field names (or aliases) of the input schema")]
    BadConfig(String),
    #[error("{0}")]
    Infeasible(String),
    /// A size or string outside its range (`crate::model::limits`).
    #[error(transparent)]
    Limit(#[from] crate::model::limits::LimitError),
}

impl ToolError {
    pub fn field(field: &str, problem: impl Into<String>, fix: impl Into<String>) -> ToolError {
        ToolError::InvalidField {
            field: field.to_string(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

/// Reads a tool's JSON input. Type errors name the offending field by its path
/// (`config.tensor_model_parallel_size`), which plain serde errors do not.
pub fn parse_input<T: serde::de::DeserializeOwned>(
    arguments: serde_json::Map<String, serde_json::Value>,
) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(serde_json::Value::Object(arguments)).map_err(|error| {
        let path = error.path().to_string();
        let field = if path == "." {
            "arguments".to_string()
        } else {
            path
        };
        ToolError::field(
            &clip(&field),
            clip(&error.inner().to_string()),
            "give a value of the type the tool's input schema lists (sizes are positive integers)",
        )
    })
}

/// Longest piece of user input an error message quotes.
const QUOTED_CHARS: usize = 200;

/// A shipped file of measured runs (`runs:` and whatever heads it), read into `T`; `what`
/// names the file in the error.
pub fn parse_measured_runs<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
) -> Result<Vec<T>, ToolError> {
    #[derive(Deserialize)]
    struct RunsFile<T> {
        runs: Vec<T>,
    }
    serde_yaml::from_str::<RunsFile<T>>(text)
        .map(|f| f.runs)
        .map_err(|e| ToolError::Infeasible(format!("{what}: {e}")))
}

/// Shortens a message that may quote user input (serde quotes a wrong value whole), so that an
/// error never echoes a large input back.
pub fn clip(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((end, _)) => format!("{}… ({} bytes in all)", &text[..end], text.len()),
        None => text.to_string(),
    }
}

/// A skill section a rule or recipe came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Citation {
    pub skill: String,
    /// Heading path, " > "-separated.
    pub section: String,
    pub uri: String,
}

/// Cites the first section of `skill` whose heading path contains every word of `heading`
/// (case-insensitive); falls back to the skill itself. Missing skills cite nothing.
pub fn cite(catalog: &Catalog, skill: &str, heading: &str) -> Option<Citation> {
    let found = catalog.skill(skill)?;
    let words: Vec<String> = heading
        .split_whitespace()
        .map(|w| w.to_ascii_lowercase())
        .collect();
    let section = found.sections.headed().find(|section| {
        let path = section.display_path().to_ascii_lowercase();
        words.iter().all(|w| path.contains(w.as_str()))
    });
    Some(match section {
        Some(section) => Citation {
            skill: found.name.clone(),
            section: section.display_path(),
            uri: found.section_uri(section),
        },
        None => Citation {
            skill: found.name.clone(),
            section: String::new(),
            uri: found.uri(),
        },
    })
}

/// Collects citations, skipping the ones the catalog cannot resolve and duplicates.
pub fn citations(catalog: &Catalog, wanted: &[(&str, &str)]) -> Vec<Citation> {
    let mut out: Vec<Citation> = Vec::new();
    for (skill, heading) in wanted {
        if let Some(c) = cite(catalog, skill, heading) {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// The catalog's cards resolved for one configuration.
pub struct Resolved<'a> {
    pub arch: Cow<'a, Architecture>,
    pub hardware: &'a Hardware,
    pub constants: &'a CostConstants,
}

pub fn resolve_model<'a>(
    cards: &'a CostCards,
    spec: Option<&ModelSpec>,
) -> Result<Cow<'a, Architecture>, ToolError> {
    match spec {
        None => Err(ToolError::field(
            "model",
            "missing",
            format!(
                "set it to a model card id ({}) or a HuggingFace config.json object",
                known_list(cards.models.keys())
            ),
        )),
        Some(ModelSpec::Id(id)) => {
            crate::model::limits::MODEL_ID.check("", Some(id))?;
            let key = id.trim().to_ascii_lowercase();
            if let Some(arch) = cards.models.get(&key) {
                return Ok(Cow::Borrowed(arch));
            }
            // Accept display names and family-less spellings ("DeepSeek-V3", "deepseek_v3"),
            // then the same without separators, as Megatron-Bridge spells its recipe names
            // (`llama31_405b`, `qwen35_35b_a3b` for llama3.1-405b, qwen3.5-35b-a3b).
            fn normal(s: &str) -> String {
                s.to_ascii_lowercase().replace(['_', ' '], "-")
            }
            fn bare(s: &str) -> String {
                normal(s).replace(['-', '.'], "")
            }
            for key in [normal, bare] {
                let wanted = key(id);
                if let Some(arch) = cards.models.values().find(|a| {
                    key(&a.display_name) == wanted
                        || key(&a.id) == wanted
                        || a.aliases.iter().any(|alias| key(alias) == wanted)
                }) {
                    return Ok(Cow::Borrowed(arch));
                }
            }
            // A HuggingFace repository id (`Qwen/Qwen3-235B-A22B`, what Bridge recipes pass to
            // `AutoBridge.from_hf_pretrained`): the card whose source is that repository's
            // config.json, else the card its name part spells.
            if let Some((_, name)) = id.trim().split_once('/') {
                let repo = format!("hf {}", id.trim().to_ascii_lowercase());
                let names_repo = |source: &str| {
                    let source = source.to_ascii_lowercase();
                    source.match_indices(&repo).any(|(at, _)| {
                        let after = source[at + repo.len()..].chars().next();
                        !after.is_some_and(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                    })
                };
                if let Some(arch) = cards.models.values().find(|a| names_repo(&a.source)) {
                    return Ok(Cow::Borrowed(arch));
                }
                // The base, instruct and chat checkpoints of a model share its architecture.
                let lower = name.to_ascii_lowercase();
                let stem = ["-base", "-instruct", "-chat", "-hf"]
                    .iter()
                    .find_map(|suffix| lower.strip_suffix(suffix))
                    .unwrap_or(&lower);
                for candidate in [lower.as_str(), stem] {
                    if candidate.is_empty() || candidate.contains('/') {
                        continue;
                    }
                    let spec = ModelSpec::Id(candidate.to_owned());
                    if let Ok(arch) = resolve_model(cards, Some(&spec)) {
                        return Ok(arch);
                    }
                }
            }
            // A vision-language checkpoint (`qwen3_vl_30b_a3b`, `Qwen/Qwen3-VL-30B-A3B`) whose
            // name without its `vl` part is a card: refused naming that card, never priced as it
            // silently (its vision encoder would go uncounted).
            if let Some(language) = without_vision_token(id) {
                if let Ok(arch) = resolve_model(cards, Some(&ModelSpec::Id(language))) {
                    return Err(ToolError::VisionLanguageModel {
                        given: clip(id),
                        language_card: arch.id.clone(),
                    });
                }
            }
            Err(ToolError::UnknownModel {
                given: id.clone(),
                closest: Catalog::closest(id, cards.models.keys().map(String::as_str), 3)
                    .join(", "),
            })
        }
        Some(ModelSpec::HfConfig(value)) => Architecture::from_hf_config(value)
            .map(Cow::Owned)
            .map_err(|e| ToolError::BadHfConfig(e.to_string())),
    }
}

/// `id` without its `vl` token (`qwen3_vl_30b_a3b` → `qwen3_30b_a3b`, `Org/Qwen3-VL-30B` →
/// `Org/Qwen3-30B`); `None` when it has none.
fn without_vision_token(id: &str) -> Option<String> {
    let id = id.trim();
    let (org, name) = match id.rsplit_once('/') {
        Some((org, name)) => (Some(org), name),
        None => (None, id),
    };
    let tokens: Vec<&str> = name.split(['_', '-', ' ']).collect();
    let kept: Vec<&str> = tokens
        .iter()
        .copied()
        .filter(|t| !t.eq_ignore_ascii_case("vl"))
        .collect();
    if kept.len() == tokens.len() || kept.is_empty() {
        return None;
    }
    let joiner = if name.contains('-') { "-" } else { "_" };
    let name = kept.join(joiner);
    Some(match org {
        Some(org) => format!("{org}/{name}"),
        None => name,
    })
}

pub fn resolve_hardware<'a>(
    cards: &'a CostCards,
    id: Option<&str>,
) -> Result<&'a Hardware, ToolError> {
    let Some(id) = id else {
        return Err(ToolError::field(
            "hardware",
            "missing",
            format!("set it to one of: {}", known_list(cards.hardware.keys())),
        ));
    };
    crate::model::limits::HARDWARE_ID.check("", Some(id))?;
    cards
        .hardware
        .get(&id.trim().to_ascii_lowercase())
        .ok_or_else(|| ToolError::UnknownHardware {
            given: id.to_string(),
            known: known_list(cards.hardware.keys()),
        })
}

fn known_list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names.map(String::as_str).collect::<Vec<_>>().join(", ")
}

pub fn constants(cards: &CostCards) -> Result<&CostConstants, ToolError> {
    cards.constants.as_ref().ok_or(ToolError::NoConstants)
}

/// A measured run replayed with constants `k` (the cards', or a fit's): what it resolved to
/// and its estimate, or `None` when the catalog lacks its model or GPU (a held-out file may
/// name runs it cannot price; the reports count only what they replay).
pub fn replay_with<'a>(
    cards: &'a CostCards,
    k: &CostConstants,
    cfg: &TrainingConfig,
) -> Option<(Resolved<'a>, Estimate)> {
    let r = resolve(cards, cfg).ok()?;
    let estimate = crate::model::evaluate(&r.arch, r.hardware, k, cfg);
    Some((r, estimate))
}

/// Checks the fields every evaluation needs and resolves the cards they name.
pub fn resolve<'a>(cards: &'a CostCards, cfg: &TrainingConfig) -> Result<Resolved<'a>, ToolError> {
    let missing = |e| naming_unread_input(e, cfg);
    let arch = resolve_model(cards, cfg.model.as_ref()).map_err(missing)?;
    let hardware = resolve_hardware(cards, cfg.hardware.as_deref()).map_err(missing)?;
    let constants = constants(cards)?;
    require_positive(
        "num_gpus",
        cfg.num_gpus.map(u64::from),
        "the total GPU count, e.g. 256",
    )
    .map_err(missing)?;
    require_positive(
        "seq_length",
        cfg.seq_length,
        "the sequence length in tokens, e.g. 131072",
    )
    .map_err(missing)?;
    for (field, value) in [
        ("tensor_model_parallel_size", cfg.tensor_model_parallel_size),
        (
            "pipeline_model_parallel_size",
            cfg.pipeline_model_parallel_size,
        ),
        ("context_parallel_size", cfg.context_parallel_size),
        ("expert_model_parallel_size", cfg.expert_model_parallel_size),
        (
            "expert_tensor_parallel_size",
            cfg.expert_tensor_parallel_size,
        ),
        (
            "virtual_pipeline_model_parallel_size",
            cfg.virtual_pipeline_model_parallel_size,
        ),
        ("micro_batch_size", cfg.micro_batch_size),
        ("global_batch_size", cfg.global_batch_size),
    ] {
        if value == Some(0) {
            return Err(ToolError::field(
                field,
                "must be at least 1",
                "use 1 to turn that dimension off",
            ));
        }
    }
    if let Some(fraction) = cfg.optimizer_offload_fraction {
        if !(0.0..=1.0).contains(&fraction) || fraction.is_nan() {
            return Err(ToolError::field(
                "optimizer_offload_fraction",
                format!("{fraction} is outside 0..1"),
                "use a fraction such as 0.5 or 1.0",
            ));
        }
    }
    crate::model::limits::check_config(cfg, "")?;
    // The user's cluster calibration replaces the card's values for its GPU.
    if let Some(calibrated) = cards
        .calibration
        .as_ref()
        .filter(|c| c.hardware.id == hardware.id)
    {
        return Ok(Resolved {
            arch,
            hardware: &calibrated.hardware,
            constants: &calibrated.constants,
        });
    }
    Ok(Resolved {
        arch,
        hardware,
        constants,
    })
}

/// Input an unread part of a script may have set, named in a missing-field error.
const UNREAD_NAMED: usize = 3;

/// A missing setting's error, with the input the reader could not see into (a sourced file,
/// an unexpanded variable): the setting may be there, and the user can send it.
fn naming_unread_input(error: ToolError, cfg: &TrainingConfig) -> ToolError {
    let ToolError::InvalidField {
        field,
        problem,
        fix,
    } = error
    else {
        return error;
    };
    let unread: Vec<String> = cfg
        .ignored_settings
        .iter()
        .filter(|s| s.unread)
        .take(UNREAD_NAMED)
        .map(crate::model::config::IgnoredSetting::quoted)
        .collect();
    let fix = if problem == "missing" && !unread.is_empty() {
        format!(
            "{fix}. The input left unread what may set it: {}; send that part expanded, or \
             give the field",
            unread.join("; ")
        )
    } else {
        fix
    };
    ToolError::InvalidField {
        field,
        problem,
        fix,
    }
}

fn require_positive(field: &str, value: Option<u64>, what: &str) -> Result<u64, ToolError> {
    match value {
        None => Err(ToolError::field(
            field,
            "missing",
            format!("set it to {what}"),
        )),
        Some(0) => Err(ToolError::field(
            field,
            "must be positive",
            format!("set it to {what}"),
        )),
        Some(v) => Ok(v),
    }
}

/// Resolves and evaluates one configuration.
pub fn evaluate_config(cards: &CostCards, cfg: &TrainingConfig) -> Result<Estimate, ToolError> {
    let r = resolve(cards, cfg)?;
    Ok(evaluate(&r.arch, r.hardware, r.constants, cfg))
}

/// The code the cost model uses for "peak memory above capacity". It is reported as a
/// violation (with a fix) in `check`, but the tools treat it as "does not fit" rather than as
/// a broken layout: a layout that only runs out of memory can still be rescued by levers.
pub const OUT_OF_MEMORY: &str = "out_of_memory";

/// Violations of layout rules (divisibility, limits), leaving out running out of memory.
pub fn layout_violations(estimate: &Estimate) -> impl Iterator<Item = &crate::model::Violation> {
    estimate
        .violations
        .iter()
        .filter(|v| v.code != OUT_OF_MEMORY)
}

/// The headline numbers of an estimate, for candidate lists and comparisons.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Prediction {
    pub fits: bool,
    pub peak_gib: f64,
    pub capacity_gib: f64,
    pub headroom_gib: f64,
    pub step_time_s: f64,
    pub model_tflops_per_gpu: f64,
    pub tokens_per_second_per_gpu: f64,
    /// Model TFLOP/s over the dense peak of the GEMM precision (the FP8 peak for FP8 runs;
    /// `check_feasibility` names the peak and gives the BF16-peak figure too).
    pub mfu: f64,
    /// Violation codes, if the layout is invalid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<String>,
    /// The error band of `model_tflops_per_gpu` from measured runs of its regime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<crate::model::uncertainty::Uncertainty>,
}

impl Prediction {
    /// The error band in words, to follow the TFLOP/s figure; empty without one.
    pub fn band_text(&self) -> String {
        self.uncertainty
            .as_ref()
            .map(crate::model::uncertainty::Uncertainty::text)
            .unwrap_or_default()
    }

    pub fn of(estimate: &Estimate) -> Prediction {
        Prediction {
            fits: estimate.fits,
            peak_gib: round(estimate.memory.peak_gib, 2),
            capacity_gib: round(estimate.memory.capacity_gib, 2),
            headroom_gib: round(estimate.memory.headroom_gib, 2),
            step_time_s: round(estimate.performance.step_time_s, 3),
            model_tflops_per_gpu: round(estimate.performance.model_tflops_per_gpu, 1),
            tokens_per_second_per_gpu: round(estimate.performance.tokens_per_second_per_gpu, 1),
            mfu: round(estimate.performance.mfu, 4),
            violations: estimate.violations.iter().map(|v| v.code.clone()).collect(),
            uncertainty: estimate.performance.uncertainty.clone(),
        }
    }
}

pub fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// "TP1 CP32 EP32 PP8 VPP4 DP1 EDP1" for a configuration and its estimate.
pub fn layout_label(estimate: &Estimate) -> String {
    let l = &estimate.layout;
    let mut parts = vec![
        format!("TP{}", l.tp),
        format!("CP{}", l.cp),
        format!("EP{}", l.ep),
    ];
    if l.etp > 1 {
        parts.push(format!("ETP{}", l.etp));
    }
    parts.push(format!("PP{}", l.pp));
    if l.vpp > 1 {
        parts.push(format!("VPP{}", l.vpp));
    }
    parts.push(format!("DP{}", l.dp));
    parts.push(format!("EDP{}", l.edp));
    parts.push(format!("MBS{}", l.micro_batch_size));
    parts.push(format!("GBS{}", l.global_batch_size));
    parts.join(" ")
}

/// Dispatcher and the static-memory levers of a configuration, e.g. "deepep, optimizer offload".
pub fn levers_label(cfg: &TrainingConfig, estimate: &Estimate) -> String {
    let mut parts = Vec::new();
    if let Some(dispatcher) = estimate.layout.dispatcher {
        parts.push(
            serde_json::to_value(dispatcher)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        );
    }
    if cfg.cp() > 1 {
        match (cfg.cp_comm_type, cfg.hierarchical_cp_sizes()) {
            (Some(CpCommType::A2aP2p), Some((a2a, ring))) => {
                parts.push(format!("CP a2a{a2a}+p2p{ring}"))
            }
            (Some(kind), _) => parts.push(format!(
                "CP {}",
                serde_json::to_value(kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            )),
            (None, _) => {}
        }
    }
    if cfg.optimizer_cpu_offload == Some(true) {
        parts.push(format!(
            "optimizer offload {:.0}%",
            cfg.offload_fraction() * 100.0
        ));
    }
    if let Some(strategy) = cfg.fsdp_strategy() {
        let name = serde_json::to_value(strategy)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        parts.push(format!("FSDP {name}"));
    } else if cfg.distributed_optimizer() {
        parts.push("distributed optimizer".into());
    }
    parts.join(", ")
}

/// A setting's value as a person reads it: `unset` for none, strings without quotes, lists
/// and objects spelled out (JSON syntax is for `structuredContent`).
pub fn value_text(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "unset".into(),
        Value::String(text) => text.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(value_text).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(fields) => fields
            .iter()
            .map(|(key, value)| format!("{key}={}", value_text(value)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// Short description of the recompute setting of a configuration.
pub fn recompute_label(cfg: &TrainingConfig) -> String {
    if cfg.full_recompute() {
        let method = cfg
            .recompute_method
            .map(|m| m.to_string())
            .unwrap_or_else(|| "uniform".into());
        let layers = cfg.recompute_num_layers.unwrap_or(1);
        return format!("full ({method}, {layers} layer(s) per group)");
    }
    let modules = cfg.recompute_modules();
    if modules.is_empty() {
        "none".into()
    } else if cfg.recompute_granularity.is_none() {
        // Megatron applies the modules only with selective granularity.
        "none (recompute_modules given without recompute_granularity)".into()
    } else {
        let names: Vec<&str> = modules.iter().map(|m| m.name()).collect();
        format!("selective [{}]", names.join(", "))
    }
}

/// Power of two at or above `value` (1 for 0).
pub fn next_power_of_two(value: u64) -> u64 {
    value.max(1).next_power_of_two()
}

/// What an answer did with the settings it was given: the ones it did not use and the ones it
/// had to assume. Every cost-model tool's output carries both, and its rationale lists them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InputNotes {
    /// Settings given that this answer does not use, each with the reason.
    pub ignored_settings: Vec<crate::model::config::IgnoredSetting>,
    /// Settings not given that this answer needed: the value taken and why.
    pub assumed_defaults: Vec<crate::model::config::AssumedDefault>,
    /// The user's cluster calibration this answer used, when one applies to its GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
}

/// Assumed settings only a model with experts uses: a dense model's answer does not list them.
const EXPERT_ONLY_SETTINGS: &[&str] = &[
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend",
    "moe_router_force_load_balancing",
    "moe_grouped_gemm",
];

/// Whether `key` is a setting only a model with experts uses.
fn is_expert_only_setting(key: &str) -> bool {
    EXPERT_ONLY_SETTINGS.contains(&key)
}

/// Whether the configuration's model resolves, with `cards`, to a model without experts.
fn is_dense_model(cards: &CostCards, cfg: &TrainingConfig) -> bool {
    resolve_model(cards, cfg.model.as_ref()).is_ok_and(|arch| arch.moe.is_none())
}

impl InputNotes {
    /// The notes for one evaluated configuration: what its reader ignored, the configuration's
    /// own defaults, and the dispatcher the hardware card chose. The expert settings' defaults
    /// are left out for a model without experts (when `cards` resolve the model).
    pub fn for_config(
        cards: &CostCards,
        cfg: &TrainingConfig,
        hardware: Option<&Hardware>,
    ) -> InputNotes {
        let mut assumed = cfg.assumed_defaults();
        if let Some(hw) = hardware {
            if cfg.moe_token_dispatcher_type.is_none() && cfg.moe_flex_dispatcher_backend.is_none()
            {
                let chosen = &hw.default_dispatcher;
                // The configuration's own resolution says where the card's default gives way.
                let (value, why) = if cfg.dispatcher(chosen.resolved()) != chosen.resolved() {
                    (
                        serde_json::json!({"moe_token_dispatcher_type": "alltoall"}),
                        format!(
                            "the `{}` hardware card's default is flex with DeepEP, which Megatron-Core refuses unless the experts are split (expert TP × EP > 1); with one expert group alltoall moves no tokens",
                            hw.id
                        ),
                    )
                } else {
                    (
                        serde_json::to_value(chosen).unwrap_or_default(),
                        format!("the default dispatcher of the `{}` hardware card", hw.id),
                    )
                };
                assumed.push(crate::model::config::AssumedDefault::new(
                    "moe_token_dispatcher_type",
                    value,
                    why,
                ));
            }
        }
        if is_dense_model(cards, cfg) {
            assumed.retain(|a| !is_expert_only_setting(&a.key));
        }
        InputNotes {
            ignored_settings: cfg.ignored_settings.clone(),
            assumed_defaults: assumed,
            calibration: None,
        }
    }

    /// What a tool taking only `fields` does not receive from the configuration: the fields
    /// it does not take, and what the readers of the configuration noted. For a dense model,
    /// the expert settings a reader filled in (a whole command line's Megatron-LM defaults)
    /// are neither assumed nor ignored: they do not apply.
    pub fn beside_tool_input(
        cards: &CostCards,
        cfg: &TrainingConfig,
        fields: &[&str],
    ) -> InputNotes {
        let dense = is_dense_model(cards, cfg);
        let reader_filled = |key: &str| cfg.assumed_defaults.iter().any(|a| a.key == key);
        let not_applicable = |key: &str| dense && is_expert_only_setting(key) && reader_filled(key);
        let mut notes = InputNotes {
            ignored_settings: cfg.ignored_settings.clone(),
            assumed_defaults: cfg.assumed_defaults.clone(),
            calibration: None,
        };
        notes.assumed_defaults.retain(|a| !not_applicable(&a.key));
        for (key, _) in crate::inputs::diff::set_fields(cfg) {
            if !fields.contains(&key.as_str()) && !not_applicable(&key) {
                // A value a reader filled in is not used either: listed once, as not taken.
                notes.assumed_defaults.retain(|a| a.key != key);
                notes.ignore(key, "this tool does not take this setting (it chooses or searches it, or it does not change its answer)");
            }
        }
        notes
    }

    /// Names the cluster calibration used for the GPU `hardware`, if the catalog has one for it.
    pub fn note_calibration(&mut self, cards: &CostCards, hardware: Option<&str>) {
        let gpu = hardware.unwrap_or_default().trim();
        if let Some(calibrated) = cards
            .calibration
            .as_ref()
            .filter(|c| c.hardware.id.eq_ignore_ascii_case(gpu))
        {
            self.calibration = Some(calibrated.describe());
        }
    }

    pub fn ignore(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.ignored_settings
            .push(crate::model::config::IgnoredSetting::new(key, reason));
    }

    pub fn assume(&mut self, key: &str, value: serde_json::Value, why: impl Into<String>) {
        if !self.assumed_defaults.iter().any(|a| a.key == key) {
            self.assumed_defaults
                .push(crate::model::config::AssumedDefault::new(key, value, why));
        }
    }

    /// The Markdown the rationale ends with; empty when there is nothing to say.
    pub fn markdown(&self) -> String {
        let mut text = String::new();
        if let Some(calibration) = &self.calibration {
            text.push_str(&format!("\n\n**Calibration**: {calibration}."));
        }
        if !self.ignored_settings.is_empty() {
            text.push_str("\n\n**Ignored settings** (given, not used):");
            for i in &self.ignored_settings {
                text.push_str(&format!("\n- `{}`: {}", i.key, i.reason));
            }
        }
        if !self.assumed_defaults.is_empty() {
            text.push_str("\n\n**Assumed defaults** (not given):");
            for a in &self.assumed_defaults {
                text.push_str(&format!(
                    "\n- `{}` = {}: {}",
                    a.key,
                    value_text(&a.value),
                    a.why
                ));
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dense_model_lists_no_expert_settings_among_its_assumptions() {
        let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
        // A whole Megatron-LM line for a model named by card id: the reader cannot tell a
        // dense model and assumes the MoE defaults; the answer leaves them out for one.
        let line = "pretrain_gpt.py --tensor-model-parallel-size 2 --bf16";
        let keys = |model: &str| {
            let mut cfg = crate::inputs::megatron_args::parse_megatron_args_for_model(
                line,
                Some(&ModelSpec::Id(model.into())),
            )
            .unwrap();
            cfg.hardware = Some("h100".into());
            let hw = catalog.cost().hardware.get("h100");
            InputNotes::for_config(catalog.cost(), &cfg, hw)
                .assumed_defaults
                .into_iter()
                .map(|a| a.key)
                .collect::<Vec<_>>()
        };
        let dense = keys("llama3-8b");
        assert!(
            dense.contains(&"use_distributed_optimizer".to_string()),
            "{dense:?}"
        );
        for key in EXPERT_ONLY_SETTINGS {
            assert!(!dense.iter().any(|k| k == key), "{key}: {dense:?}");
        }
        let moe = keys("qwen3-30b-a3b");
        for key in [
            "moe_token_dispatcher_type",
            "moe_router_force_load_balancing",
            "moe_grouped_gemm",
        ] {
            assert!(moe.iter().any(|k| k == key), "{key}: {moe:?}");
        }
    }

    #[test]
    fn model_ids_resolve_as_cards_display_names_and_bridge_spell_them() {
        let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
        let id = |given: &str| {
            resolve_model(catalog.cost(), Some(&ModelSpec::Id(given.into()))).map(|a| a.id.clone())
        };
        assert_eq!(id("deepseek-v3").as_deref(), Ok("deepseek-v3"));
        assert_eq!(id("DeepSeek_V3").as_deref(), Ok("deepseek-v3"));
        // Megatron-Bridge's recipe names drop the dots: llama31_405b, qwen35_35b_a3b.
        assert_eq!(id("llama31_405b").as_deref(), Ok("llama3.1-405b"));
        assert_eq!(id("qwen35_35b_a3b").as_deref(), Ok("qwen3.5-35b-a3b"));
        assert_eq!(id("llama3_8b").as_deref(), Ok("llama3-8b"));
        assert_eq!(id("meta-llama/Meta-Llama-3-8B").as_deref(), Ok("llama3-8b"));
        assert!(matches!(
            id("llama32_1b"),
            Err(ToolError::UnknownModel { .. })
        ));
        // Vision-language checkpoints are refused, naming their language model's card.
        for given in ["qwen3_vl_30b_a3b", "Qwen/Qwen3-VL-30B-A3B-Instruct"] {
            match id(given) {
                Err(ToolError::VisionLanguageModel { language_card, .. }) => {
                    assert_eq!(language_card, "qwen3-30b-a3b", "{given}")
                }
                other => panic!("{given}: {other:?}"),
            }
        }
        assert!(matches!(
            id("qwen35_vl_122b_a10b"),
            Err(ToolError::UnknownModel { .. })
        ));
        // HuggingFace repository ids, as Bridge recipes name their checkpoints.
        assert_eq!(id("Qwen/Qwen3-235B-A22B").as_deref(), Ok("qwen3-235b-a22b"));
        assert_eq!(
            id("Qwen/Qwen3-Next-80B-A3B-Instruct").as_deref(),
            Ok("qwen3-next-80b-a3b")
        );
        assert_eq!(id("deepseek-ai/DeepSeek-V3").as_deref(), Ok("deepseek-v3"));
        // A repository that only starts like a card's is another model.
        assert!(matches!(
            id("deepseek-ai/DeepSeek-V3-Lite"),
            Err(ToolError::UnknownModel { .. })
        ));
        assert!(matches!(
            id("Qwen/Qwen3-8B"),
            Err(ToolError::UnknownModel { .. })
        ));
        assert_eq!(
            id("Qwen/Qwen3.5-35B-A3B-Base").as_deref(),
            Ok("qwen3.5-35b-a3b")
        );
    }
}
