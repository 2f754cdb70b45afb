//! `lookup_recipe`: the documented recipes nearest to a request, each with its measured
//! numbers and the cost model's prediction, adapted when the request differs.
//!
//! Distance: a different model costs most (same family less), then sequence length (per
//! doubling), hardware (same generation less), GPU count (per doubling) and precision.
//! Adapting keeps the recipe's structure: CP follows the sequence length, DP/EDP absorb a
//! different GPU count, and if the result breaks a rule or stops fitting, the layout search
//! is run around the recipe (its TP fixed) and its best layout is offered instead.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    citations, evaluate_config, layout_label, layout_violations, next_power_of_two,
    recompute_label, resolve, round, value_text, Citation, InputNotes, Prediction, ToolError,
};
use super::plan::{search, LayoutConstraints, SearchRequest};
use crate::catalog::{Catalog, CostCards, Recipe};
use crate::model::{Architecture, Estimate, ModelSpec, Precision, TrainingConfig};

const MODEL_MISMATCH: f64 = 8.0;
const FAMILY_MISMATCH: f64 = 3.0;
const PER_SEQUENCE_DOUBLING: f64 = 0.5;
const HARDWARE_MISMATCH: f64 = 1.0;
const GENERATION_MISMATCH: f64 = 0.5;
const PER_GPU_DOUBLING: f64 = 0.25;
const PRECISION_MISMATCH: f64 = 0.25;
/// Relative gap between measured and predicted throughput (or memory) above which the answer
/// states the disagreement: beyond the model's ~10% band (docs/validation.md).
const DISAGREEMENT: f64 = 0.15;
/// Bytes of a GiB over bytes of a GB.
const GIB_IN_GB: f64 = 1.073_741_824;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct LookupRecipeInput {
    /// Model card id or HuggingFace config.json object.
    pub model: ModelSpec,
    pub seq_length: u64,
    #[serde(default)]
    pub hardware: Option<String>,
    #[serde(default)]
    pub num_gpus: Option<u32>,
    #[serde(default)]
    pub precision: Option<Precision>,
    /// How many recipes to return (default 3, at most 20).
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Change {
    pub field: String,
    pub from: serde_json::Value,
    pub to: serde_json::Value,
    pub why: String,
}

/// Where the recipe's card and its source, or the measurement and the model, disagree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Disagreement {
    /// `published_setting` (the card changed a setting the source gives), `throughput` or
    /// `memory` (measured and predicted differ by more than 15%).
    pub kind: String,
    /// The settings (comma-separated) or the measured key.
    pub field: String,
    /// The published settings (an object of field → value, `null` where the source gives
    /// none), or the measured number.
    pub source: serde_json::Value,
    /// The card's settings (an object of the same fields), or the predicted number.
    pub model: serde_json::Value,
    /// Both numbers and what the model thinks causes the gap: the memory term that makes the
    /// published setting not fit, or the dominant term of the predicted step.
    pub explanation: String,
}

/// A setting the recipe's source does not publish, which its card chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssumedSetting {
    pub field: String,
    /// The card's value.
    pub value: serde_json::Value,
    /// The recipe predicted with other values of the field, where the model can price them
    /// and the layout stays valid (`global_batch_size`: half and twice the card's value).
    #[serde(default)]
    pub alternatives: Vec<AlternativePrediction>,
}

/// The recipe's prediction with one assumed setting changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AlternativePrediction {
    pub value: serde_json::Value,
    pub model_tflops_per_gpu: f64,
    pub step_time_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AdaptedLayout {
    pub config: TrainingConfig,
    pub layout: String,
    pub predicted: Prediction,
    /// Every field of the adapted configuration that differs from the recipe's (a
    /// field-by-field diff of the two configurations), each with why.
    pub changes: Vec<Change>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecipeMatch {
    pub id: String,
    pub title: Option<String>,
    pub skill: String,
    pub source: String,
    pub validation: Option<String>,
    /// True when model, sequence, hardware (and GPU count/precision when given) all match.
    pub exact: bool,
    pub distance: f64,
    pub layout: String,
    pub recompute: String,
    pub config: TrainingConfig,
    pub measured: Option<serde_json::Map<String, serde_json::Value>>,
    /// The measured TFLOP/s in this server's FLOPs count, where the source's own count differs
    /// by more than 1%: the measured tokens per second (which no FLOPs count touches) times
    /// the model's FLOPs per token. Comparisons use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_tflops_model_count: Option<f64>,
    pub predicted: Option<Prediction>,
    /// Published settings the card changed, and measured numbers the model misses by more
    /// than 15%, each with both values and the model's explanation.
    #[serde(default)]
    pub disagreements: Vec<Disagreement>,
    /// Settings the source does not publish that the card chose, with what the prediction
    /// becomes at other values: how much the prediction rests on the card's choice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assumed: Vec<AssumedSetting>,
    /// The recipe moved to the request's sequence length / GPU count, when they differ.
    pub adapted: Option<AdaptedLayout>,
    pub notes: Option<String>,
    pub uri: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LookupRecipeOutput {
    #[serde(flatten)]
    pub notes: InputNotes,
    pub recipes: Vec<RecipeMatch>,
    pub rationale: String,
    pub citations: Vec<Citation>,
}

fn log2_ratio(a: f64, b: f64) -> f64 {
    (a.max(1.0) / b.max(1.0)).log2().abs()
}

fn recipe_model_id(recipe: &Recipe) -> Option<&str> {
    match &recipe.config.model {
        Some(ModelSpec::Id(id)) => Some(id.as_str()),
        _ => None,
    }
}

fn distance(
    cards: &CostCards,
    recipe: &Recipe,
    input: &LookupRecipeInput,
    requested: &Architecture,
) -> f64 {
    let generation = |id: &str| cards.hardware.get(id).map(|hw| hw.generation.as_str());
    let mut d = 0.0;
    let recipe_model = recipe_model_id(recipe).unwrap_or("");
    if recipe_model != requested.id {
        let family = recipe.family.as_deref().unwrap_or(recipe_model);
        d += if family == requested.family || recipe_model.starts_with(&requested.family) {
            FAMILY_MISMATCH
        } else {
            MODEL_MISMATCH
        };
    }
    let recipe_seq = recipe.config.seq_length.unwrap_or(4096) as f64;
    d += PER_SEQUENCE_DOUBLING * log2_ratio(recipe_seq, input.seq_length as f64);
    if let Some(hw) = &input.hardware {
        let recipe_hw = recipe.config.hardware.as_deref().unwrap_or("");
        if recipe_hw != hw.to_ascii_lowercase() {
            let same_generation = generation(recipe_hw).is_some()
                && generation(recipe_hw) == generation(&hw.to_ascii_lowercase());
            d += if same_generation {
                GENERATION_MISMATCH
            } else {
                HARDWARE_MISMATCH
            };
        }
    }
    if let Some(gpus) = input.num_gpus {
        d += PER_GPU_DOUBLING
            * log2_ratio(
                f64::from(recipe.config.num_gpus.unwrap_or(1)),
                f64::from(gpus),
            );
    }
    if let Some(p) = input.precision {
        if recipe.config.precision != Some(p) {
            d += PRECISION_MISMATCH;
        }
    }
    d
}

pub fn lookup_recipe(
    catalog: &Catalog,
    input: LookupRecipeInput,
) -> Result<LookupRecipeOutput, ToolError> {
    let cards = catalog.cost();
    if input.seq_length > 0 {
        crate::model::limits::SEQ_LENGTH.check("", Some(input.seq_length))?;
    }
    if input.num_gpus != Some(0) {
        crate::model::limits::NUM_GPUS.check("", input.num_gpus.map(u64::from))?;
    }
    if input.seq_length == 0 {
        return Err(ToolError::field(
            "seq_length",
            "must be positive",
            "set it to the sequence length in tokens, e.g. 262144",
        ));
    }
    if input.num_gpus == Some(0) {
        return Err(ToolError::field(
            "num_gpus",
            "must be positive",
            "give the GPU count or leave it out",
        ));
    }
    let requested = super::common::resolve_model(cards, Some(&input.model))?;
    if let Some(hw) = &input.hardware {
        super::common::resolve_hardware(cards, Some(hw))?;
    }
    let limit = input.limit.unwrap_or(3).clamp(1, 20) as usize;
    let mut scored: Vec<(f64, &Recipe)> = cards
        .recipes
        .iter()
        .map(|r| (distance(cards, r, &input, &requested), r))
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.id.cmp(&b.1.id)));
    let mut matches = Vec::new();
    for (d, recipe) in scored.into_iter().take(limit) {
        matches.push(match_for(catalog, recipe, d, &input, &requested));
    }
    if matches.is_empty() {
        return Err(ToolError::Infeasible(
            "the catalog holds no recipes; add skill cards with a `recipes:` list".into(),
        ));
    }
    let mut notes = InputNotes::default();
    if input.precision.is_none() {
        notes.assume(
            "precision",
            serde_json::Value::String("any".into()),
            "recipes of every precision are matched, each shown with its own",
        );
    }
    let rationale = lookup_rationale(&input, &requested, &matches) + &notes.markdown();
    Ok(LookupRecipeOutput {
        notes,
        recipes: matches,
        rationale,
        citations: citations(
            catalog,
            &[
                ("moe-long-context", "representative config"),
                ("moe-long-context", "cp sizing"),
                ("moe-optimization-workflow", "best measured"),
            ],
        ),
    })
}

fn match_for(
    catalog: &Catalog,
    recipe: &Recipe,
    distance: f64,
    input: &LookupRecipeInput,
    requested: &Architecture,
) -> RecipeMatch {
    let cards = catalog.cost();
    let estimate = evaluate_config(cards, &recipe.config).ok();
    let exact = distance == 0.0;
    let measured_tflops_model_count = estimate
        .as_ref()
        .and_then(|e| measured_in_model_count(recipe, e));
    let disagreements = disagreements(
        cards,
        recipe,
        estimate.as_ref(),
        measured_tflops_model_count,
    );
    let adapted = if exact {
        None
    } else {
        adapt(catalog, recipe, input, requested)
    };
    let uri = catalog
        .skill(&recipe.skill)
        .map(|s| s.file_uri("card.yaml"))
        .unwrap_or_default();
    RecipeMatch {
        id: recipe.id.clone(),
        title: recipe.title.clone(),
        skill: recipe.skill.clone(),
        source: recipe.source.clone(),
        validation: recipe.validation.clone(),
        exact,
        distance: (distance * 100.0).round() / 100.0,
        layout: estimate.as_ref().map(layout_label).unwrap_or_default(),
        recompute: recompute_label(&recipe.config),
        config: recipe.config.clone(),
        measured: recipe.measured.clone(),
        measured_tflops_model_count,
        predicted: estimate.as_ref().map(Prediction::of),
        disagreements,
        assumed: assumed_settings(cards, recipe),
        adapted,
        notes: recipe.notes.clone(),
        uri,
    }
}

/// The card's assumed settings with their values and, for the global batch, the recipe
/// predicted at half and twice it: a batch the source does not publish moves every per-step
/// cost's share (an offloaded optimizer step, the pipeline bubble).
fn assumed_settings(cards: &CostCards, recipe: &Recipe) -> Vec<AssumedSetting> {
    let config = serde_json::to_value(&recipe.config).unwrap_or_default();
    recipe
        .assumed
        .iter()
        .map(|field| {
            let value = config
                .get(field)
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            let alternatives = match (field.as_str(), recipe.config.global_batch_size) {
                ("global_batch_size", Some(batch)) => [batch / 2, batch.saturating_mul(2)]
                    .into_iter()
                    .filter(|&other| other > 0 && other != batch)
                    .filter_map(|other| {
                        let mut cfg = recipe.config.clone();
                        cfg.global_batch_size = Some(other);
                        let estimate = evaluate_config(cards, &cfg).ok()?;
                        if layout_violations(&estimate).next().is_some() {
                            return None;
                        }
                        Some(AlternativePrediction {
                            value: serde_json::Value::from(other),
                            model_tflops_per_gpu: round(
                                estimate.performance.model_tflops_per_gpu,
                                1,
                            ),
                            step_time_s: round(estimate.performance.step_time_s, 2),
                        })
                    })
                    .collect(),
                _ => Vec::new(),
            };
            AssumedSetting {
                field: field.clone(),
                value,
                alternatives,
            }
        })
        .collect()
}

/// Moves a recipe to the request: model, hardware, sequence length and GPU count. The
/// changes reported are a field-by-field diff of the recipe's configuration and the adapted
/// one, so nothing the adaptation (or the layout search) touched goes unlisted.
fn adapt(
    catalog: &Catalog,
    recipe: &Recipe,
    input: &LookupRecipeInput,
    requested: &Architecture,
) -> Option<AdaptedLayout> {
    let cards = catalog.cost();
    let mut cfg = recipe.config.clone();
    let mut why: BTreeMap<&'static str, String> = BTreeMap::new();
    let recipe_model = recipe_model_id(recipe).unwrap_or("");
    if recipe_model != requested.id {
        why.insert(
            "model",
            "the request names another model; the layout is carried over as a starting point"
                .into(),
        );
        cfg.model = Some(input.model.clone());
    }
    if let Some(hw) = &input.hardware {
        let hw = hw.to_ascii_lowercase();
        if cfg.hardware.as_deref() != Some(hw.as_str()) {
            why.insert("hardware", "requested hardware".into());
            cfg.hardware = Some(hw);
            // The dispatcher default follows the platform unless the recipe is alltoall.
            if cfg.moe_flex_dispatcher_backend.is_some() {
                let platform = "the recipe's dispatcher backend belongs to its hardware; the new platform's default applies";
                why.insert("moe_flex_dispatcher_backend", platform.into());
                why.insert("moe_token_dispatcher_type", platform.into());
                cfg.moe_flex_dispatcher_backend = None;
                cfg.moe_token_dispatcher_type = None;
            }
        }
    }
    if let Some(p) = input.precision {
        if cfg.precision != Some(p) {
            why.insert("precision", "requested precision".into());
            cfg.precision = Some(p);
        }
    }
    let recipe_seq = cfg.seq_length.unwrap_or(4096);
    if recipe_seq != input.seq_length {
        let old_cp = cfg.cp();
        // CP scales with the sequence; the sequence limit keeps the product inside u64 and
        // the result inside u32 (saturating keeps a bad card from wrapping).
        let scaled =
            (u64::from(old_cp).saturating_mul(input.seq_length) / recipe_seq.max(1)).max(1);
        let new_cp = u32::try_from(next_power_of_two(scaled)).ok()?;
        why.insert("seq_length", "requested sequence length".into());
        why.insert(
            "context_parallel_size",
            format!(
                "keeps the recipe's {} tokens per CP rank",
                recipe_seq / u64::from(old_cp.max(1))
            ),
        );
        cfg.context_parallel_size = Some(new_cp);
        cfg.seq_length = Some(input.seq_length);
        // Keep tokens per step: sequences scale inversely with length.
        if let Some(gbs) = cfg.global_batch_size {
            let sequences =
                (u64::from(gbs).saturating_mul(recipe_seq) / input.seq_length.max(1)).max(1);
            why.insert(
                "global_batch_size",
                format!(
                    "keeps the recipe's {} tokens per step",
                    u64::from(gbs) * recipe_seq
                ),
            );
            cfg.global_batch_size = Some(u32::try_from(sequences).ok()?);
        }
    }
    // Layout products in u64: CP follows the request's sequence and may be large. A layout
    // that does not fit in u32 GPUs cannot be adapted (it would be far beyond the GPU limit).
    let product = |c: &TrainingConfig| {
        u64::from(c.tp())
            .saturating_mul(u64::from(c.cp()))
            .saturating_mul(u64::from(c.pp()))
            .max(1)
    };
    let model_parallel = product(&cfg);
    let gpus = match input.num_gpus {
        Some(gpus) => gpus,
        None => {
            // Without a GPU count keep DP as the recipe has it.
            let recipe_dp =
                u64::from(recipe.config.num_gpus.unwrap_or(1)) / product(&recipe.config);
            u32::try_from(model_parallel.saturating_mul(recipe_dp.max(1))).ok()?
        }
    };
    why.insert(
        "num_gpus",
        if input.num_gpus.is_some() {
            "requested GPU count; DP and EDP absorb the difference".into()
        } else {
            "CP changed with the sequence; the recipe's DP is kept".into()
        },
    );
    cfg.num_gpus = Some(gpus);
    // Global batch: a multiple of DP·MBS.
    let dp = (u64::from(gpus) / model_parallel).max(1);
    let step = dp.saturating_mul(u64::from(cfg.mbs())).max(1);
    if let Some(gbs) = cfg.global_batch_size {
        if u64::from(gbs) % step != 0 {
            let fixed = u32::try_from(u64::from(gbs).div_ceil(step).saturating_mul(step)).ok()?;
            let before = why.remove("global_batch_size");
            why.insert(
                "global_batch_size",
                match before {
                    Some(first) => format!("{first}, rounded up to a multiple of DP·MBS = {step}"),
                    None => format!("rounded up to a multiple of DP·MBS = {step}"),
                },
            );
            cfg.global_batch_size = Some(fixed);
        }
    }
    let estimate = evaluate_config(cards, &cfg).ok()?;
    if estimate.violations.is_empty() && estimate.fits {
        return Some(AdaptedLayout {
            layout: layout_label(&estimate),
            predicted: Prediction::of(&estimate),
            changes: config_changes(&recipe.config, &cfg, &cfg, &why, ""),
            config: cfg,
        });
    }
    // The straight adaptation breaks a rule or does not fit: search around it.
    let resolved = resolve(cards, &cfg).ok()?;
    let reason = match layout_violations(&estimate).next() {
        Some(v) => format!(
            "the straight adaptation ({}) breaks a rule ({})",
            layout_label(&estimate),
            v.code
        ),
        None => format!(
            "the straight adaptation ({}) needs {:.1} GiB of {:.1}",
            layout_label(&estimate),
            estimate.memory.peak_gib,
            estimate.memory.capacity_gib
        ),
    };
    let mut base = cfg.clone();
    base.recompute_granularity = None;
    base.recompute_modules = None;
    base.optimizer_cpu_offload = None;
    let outcome = search(&SearchRequest {
        resolved: &resolved,
        base,
        constraints: LayoutConstraints {
            tensor_model_parallel_size: Some(cfg.tp()),
            ..LayoutConstraints::default()
        },
        global_batch_size: None,
        describe_best: 1,
    });
    let (best_cfg, best_est) = outcome.ranked.into_iter().next()?;
    let searched =
        format!("{reason}; set by the best layout the search finds with the recipe's TP");
    Some(AdaptedLayout {
        layout: layout_label(&best_est),
        predicted: Prediction::of(&best_est),
        changes: config_changes(&recipe.config, &cfg, &best_cfg, &why, &searched),
        config: best_cfg,
    })
}

/// Every field whose value differs between the recipe's configuration and the adapted one,
/// in the configuration's field order. A field the layout search moved away from the straight
/// adaptation gets the search's reason; otherwise the adaptation step's own reason.
fn config_changes(
    recipe: &TrainingConfig,
    straight: &TrainingConfig,
    adapted: &TrainingConfig,
    why: &BTreeMap<&'static str, String>,
    searched: &str,
) -> Vec<Change> {
    let fields = |c: &TrainingConfig| match serde_json::to_value(c) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (from, middle, to) = (fields(recipe), fields(straight), fields(adapted));
    let null = serde_json::Value::Null;
    let mut names: Vec<&String> = from.keys().chain(to.keys()).collect();
    names.sort_by_key(|name| field_order(name));
    names.dedup();
    let mut search_named = false;
    names
        .into_iter()
        .filter_map(|name| {
            let (a, m, b) = (
                from.get(name).unwrap_or(&null),
                middle.get(name).unwrap_or(&null),
                to.get(name).unwrap_or(&null),
            );
            if a == b {
                return None;
            }
            let reason = if m != b || !why.contains_key(name.as_str()) {
                if searched.is_empty() {
                    "follows from the changes above".to_string()
                } else if search_named {
                    "set by the same layout search".to_string()
                } else {
                    search_named = true;
                    searched.to_string()
                }
            } else {
                why.get(name.as_str()).cloned().unwrap_or_default()
            };
            Some(Change {
                field: name.clone(),
                from: a.clone(),
                to: b.clone(),
                why: reason,
            })
        })
        .collect()
}

/// A field's position in the configuration (the order a person reads a recipe in).
fn field_order(name: &str) -> (usize, String) {
    let position = crate::model::config::KNOWN_KEYS
        .iter()
        .position(|key| *key == name)
        .unwrap_or(usize::MAX);
    (position, name.to_string())
}

/// A measured number of the recipe's `measured` map.
fn measured_number(recipe: &Recipe, key: &str) -> Option<f64> {
    recipe
        .measured
        .as_ref()
        .and_then(|m| m.get(key))
        .and_then(serde_json::Value::as_f64)
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// The measured TFLOP/s in this server's FLOPs count when the source counted otherwise
/// (Megatron-Bridge before v0.5.0 counted GPT-OSS's quick-GELU experts as two matrices and its
/// sliding-window layers as full attention): measured tokens/s × the model's FLOPs per token.
/// `None` where the source gives no tokens/s or counts within 1% of the model.
fn measured_in_model_count(recipe: &Recipe, estimate: &Estimate) -> Option<f64> {
    let published = measured_number(recipe, "model_tflops_per_gpu")?;
    let tokens = measured_number(recipe, "tokens_per_second_per_gpu")?;
    let p = &estimate.performance;
    if !(p.tokens_per_second_per_gpu > 0.0 && p.model_tflops_per_gpu > 0.0) {
        return None;
    }
    let in_model_count = tokens * p.model_tflops_per_gpu / p.tokens_per_second_per_gpu;
    ((in_model_count / published - 1.0).abs() > 0.01).then_some(round(in_model_count, 1))
}

/// Settings the card changed from the published ones, and measured numbers the model misses
/// (throughput compared in the model's FLOPs count: `recounted`, where the source counted
/// otherwise).
fn disagreements(
    cards: &CostCards,
    recipe: &Recipe,
    estimate: Option<&Estimate>,
    recounted: Option<f64>,
) -> Vec<Disagreement> {
    let mut found = Vec::new();
    if let (Some(published), Some(card_estimate)) = (&recipe.published, estimate) {
        if let Some(d) = published_disagreement(cards, recipe, published, card_estimate) {
            found.extend(d);
        }
    }
    let Some(estimate) = estimate else {
        return found;
    };
    let number = |key: &str| measured_number(recipe, key);
    if let Some(published) = number("model_tflops_per_gpu") {
        let tflops = recounted.unwrap_or(published);
        let predicted = round(estimate.performance.model_tflops_per_gpu, 1);
        if (predicted - tflops).abs() / tflops > DISAGREEMENT {
            let mut explanation = throughput_explanation(recipe, estimate, tflops);
            if recounted.is_some() {
                explanation.push_str(&format!(
                    " (measured {published:.0} as published, in its source's FLOPs count; {tflops:.0} in this server's, from the measured tokens/s)"
                ));
            }
            found.push(Disagreement {
                kind: "throughput".into(),
                field: "model_tflops_per_gpu".into(),
                source: serde_json::Value::from(tflops),
                model: serde_json::Value::from(round(predicted, 1)),
                explanation,
            });
        }
    }
    if let Some(gb) = number("peak_memory_gb").filter(|m| *m > 0.0) {
        // The card gives decimal GB as reported; the model works in GiB.
        let predicted = estimate.memory.peak_gib * GIB_IN_GB;
        if (predicted - gb).abs() / gb > DISAGREEMENT {
            found.push(Disagreement {
                kind: "memory".into(),
                field: "peak_memory_gb".into(),
                source: serde_json::Value::from(gb),
                model: serde_json::Value::from(round(predicted, 1)),
                explanation: format!(
                    "measured peak {gb} GB, predicted {predicted:.0} GB ({:.1} GiB) on pipeline rank {}: its largest term is {}",
                    estimate.memory.peak_gib,
                    estimate.memory.worst_rank.pipeline_rank,
                    largest_memory_term(estimate)
                ),
            });
        }
    }
    found
}

/// The card's settings against the published ones: the published configuration is evaluated
/// and both peaks are given, with the term that makes the published one not fit.
fn published_disagreement(
    cards: &CostCards,
    recipe: &Recipe,
    published: &serde_json::Map<String, serde_json::Value>,
    card: &Estimate,
) -> Option<Vec<Disagreement>> {
    let mut fields = match serde_json::to_value(&recipe.config).ok()? {
        serde_json::Value::Object(map) => map,
        _ => return None,
    };
    for (key, value) in published {
        if value.is_null() {
            fields.remove(key);
        } else {
            fields.insert(key.clone(), value.clone());
        }
    }
    let published_cfg: TrainingConfig =
        serde_json::from_value(serde_json::Value::Object(fields)).ok()?;
    let source = evaluate_config(cards, &published_cfg).ok()?;
    let outcome = if source.fits {
        format!(
            "the model predicts the published setting fits too ({:.1} of {:.1} GiB, {:.0} TFLOP/s/GPU)",
            source.memory.peak_gib,
            source.memory.capacity_gib,
            source.performance.model_tflops_per_gpu
        )
    } else {
        format!(
            "the model predicts the published setting does not fit: {:.1} GiB of {:.1} on pipeline rank {}, its largest term {}",
            source.memory.peak_gib,
            source.memory.capacity_gib,
            source.memory.worst_rank.pipeline_rank,
            largest_memory_term(&source)
        )
    };
    let card_json = serde_json::to_value(&recipe.config).ok()?;
    // One disagreement for the whole published set: the settings were evaluated together.
    let card_values: serde_json::Map<String, serde_json::Value> = published
        .keys()
        .map(|field| {
            (
                field.clone(),
                card_json.get(field).cloned().unwrap_or_default(),
            )
        })
        .collect();
    let describe = |values: &serde_json::Map<String, serde_json::Value>| {
        values
            .iter()
            .map(|(field, value)| format!("`{field}` = {}", value_text(value)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let given: serde_json::Map<String, serde_json::Value> = published
        .iter()
        .filter(|(_, value)| !value.is_null())
        .map(|(field, value)| (field.clone(), value.clone()))
        .collect();
    let silent: Vec<String> = published
        .iter()
        .filter(|(_, value)| value.is_null())
        .map(|(field, _)| format!("`{field}`"))
        .collect();
    let mut source_text = Vec::new();
    if !given.is_empty() {
        source_text.push(format!("the source gives {}", describe(&given)));
    }
    if !silent.is_empty() {
        source_text.push(format!(
            "the source does not give {} (Megatron's default applies)",
            silent.join(", ")
        ));
    }
    // What the published configuration draws that the card's does not: a refusal or a
    // warning (an uneven pipeline split Megatron will not build) is why a card fills a gap.
    let drawn: Vec<String> = source
        .violations
        .iter()
        .filter(|v| v.code != "out_of_memory" && !card.violations.iter().any(|c| c.code == v.code))
        .map(|v| format!("{} [{}]", v.message, v.code))
        .chain(
            source
                .warnings
                .iter()
                .filter(|w| !card.warnings.contains(w))
                .cloned(),
        )
        .collect();
    let drawn = if drawn.is_empty() {
        String::new()
    } else {
        format!("; as published it also draws: {}", drawn.join("; "))
    };
    Some(vec![Disagreement {
        kind: "published_setting".into(),
        field: published.keys().cloned().collect::<Vec<_>>().join(", "),
        source: serde_json::Value::Object(published.clone()),
        model: serde_json::Value::Object(card_values.clone()),
        explanation: format!(
            "{}; the card runs {}: {outcome}{drawn}; with the card's setting {:.1} GiB ({})",
            source_text.join("; "),
            describe(&card_values),
            card.memory.peak_gib,
            if card.fits {
                "fits"
            } else {
                "does not fit either"
            }
        ),
    }])
}

/// "activations 120.3 GiB (55% of the peak)".
fn largest_memory_term(estimate: &Estimate) -> String {
    let b = &estimate.memory.breakdown_gib;
    let terms = [
        ("weights", b.weights),
        ("gradients", b.gradients),
        ("optimizer state", b.optimizer),
        ("FSDP buffers", b.fsdp_buffers),
        ("activations", b.activations),
        ("backward working set", b.backward_working_set),
        ("logits and loss", b.logits_loss),
        ("MoE dispatch", b.moe_dispatch),
        ("CUDA graph pool", b.cuda_graph_pool),
        ("fragmentation", b.fragmentation),
        ("dispatcher buffers", b.dispatcher_buffers),
        ("fixed reserve", b.fixed_reserve),
    ];
    let (name, gib) = terms
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or(("activations", b.activations));
    let share = gib / estimate.memory.peak_gib.max(f64::MIN_POSITIVE) * 100.0;
    format!("{name} {gib:.1} GiB ({share:.0}% of the peak)")
}

/// Both numbers, the ratio and the dominant term of the predicted step.
fn throughput_explanation(recipe: &Recipe, estimate: &Estimate, measured: f64) -> String {
    let b = &estimate.performance.breakdown_s;
    let step = estimate.performance.step_time_s.max(f64::MIN_POSITIVE);
    let terms = [
        ("GEMM", b.gemm),
        ("attention", b.attention),
        ("elementwise", b.elementwise),
        ("recompute", b.recompute),
        ("host overhead", b.host_overhead),
        ("TP communication", b.tp_comm),
        ("CP communication", b.cp_comm),
        ("EP communication", b.ep_comm),
        ("PP communication", b.pp_comm),
        ("DP communication", b.dp_comm),
        ("activation offload copies", b.offload_copies),
        ("pipeline bubble", b.pipeline_bubble),
        ("optimizer", b.optimizer),
    ];
    let (name, seconds) = terms
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or(("GEMM", b.gemm));
    let predicted = round(estimate.performance.model_tflops_per_gpu, 1);
    let direction = if predicted > measured {
        format!(
            "the model is {:.1}× too optimistic",
            predicted / measured.max(f64::MIN_POSITIVE)
        )
    } else {
        format!(
            "the model is {:.1}× too pessimistic",
            measured / predicted.max(f64::MIN_POSITIVE)
        )
    };
    let derived = if recipe.validation.as_deref() == Some("derived") {
        "; the recipe's layout is partly filled in by the card (validation: derived), so the measured run may have used other settings"
    } else {
        ""
    };
    format!(
        "measured {measured:.0}, predicted {predicted:.0} TFLOP/s/GPU: {direction}. The predicted {step:.2} s step is dominated by {name} ({seconds:.2} s, {:.0}%), the term the model would have to misjudge to explain the gap{derived}",
        seconds / step * 100.0
    )
}

fn lookup_rationale(
    input: &LookupRecipeInput,
    requested: &Architecture,
    matches: &[RecipeMatch],
) -> String {
    let mut text = format!(
        "Request: {} at {} tokens{}{}.",
        requested.display_name,
        input.seq_length,
        input
            .hardware
            .as_ref()
            .map(|h| format!(" on {h}"))
            .unwrap_or_default(),
        input
            .num_gpus
            .map(|g| format!(", {g} GPUs"))
            .unwrap_or_default()
    );
    if let Some(best) = matches.first() {
        text.push_str(&format!(
            "\n\n{} match: **{}** ({}), {} on {} GPUs, recompute {}.",
            if best.exact { "Exact" } else { "Nearest" },
            best.id,
            best.source,
            best.layout,
            best.config.num_gpus.unwrap_or(0),
            best.recompute
        ));
        if let Some(m) = &best.measured {
            if let Some(t) = m.get("model_tflops_per_gpu") {
                text.push_str(&format!(" Measured {t} TFLOP/s/GPU"));
                if let Some(recounted) = best.measured_tflops_model_count {
                    text.push_str(&format!(
                        " in its source's FLOPs count, {recounted:.0} in this server's (from the measured tokens/s)"
                    ));
                }
                text.push('.');
            }
        }
        if let Some(p) = &best.predicted {
            text.push_str(&format!(
                " Predicted {:.0} TFLOP/s/GPU{}, peak {:.1} of {:.1} GiB ({}).",
                p.model_tflops_per_gpu,
                p.band_text(),
                p.peak_gib,
                p.capacity_gib,
                if p.fits { "fits" } else { "does not fit" }
            ));
        }
        for d in &best.disagreements {
            text.push_str(&format!(
                "\n\n**Disagreement ({}, `{}`)**: {}.",
                d.kind.replace('_', " "),
                d.field,
                d.explanation
            ));
        }
        text.push_str(&assumed_text(best));
        if let Some(a) = &best.adapted {
            text.push_str(&format!(
                "\n\nAdapted to the request: **{}**, predicted {:.0} TFLOP/s/GPU{}, {:.1} GiB. Changes: {}.",
                a.layout,
                a.predicted.model_tflops_per_gpu,
                a.predicted.band_text(),
                a.predicted.peak_gib,
                a.changes
                    .iter()
                    .map(|c| {
                        format!(
                            "{} {} → {} ({})",
                            c.field,
                            value_text(&c.from),
                            value_text(&c.to),
                            c.why
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    text
}

/// "Not published" paragraph for a match's assumed settings; empty without any.
fn assumed_text(best: &RecipeMatch) -> String {
    if best.assumed.is_empty() {
        return String::new();
    }
    let settings: Vec<String> = best
        .assumed
        .iter()
        .map(|a| {
            let mut part = format!("`{}` = {}", a.field, value_text(&a.value));
            if !a.alternatives.is_empty() {
                let at: Vec<String> = a
                    .alternatives
                    .iter()
                    .map(|alt| {
                        format!(
                            "{:.0} TFLOP/s/GPU at {} ({:.2} s per step)",
                            alt.model_tflops_per_gpu,
                            value_text(&alt.value),
                            alt.step_time_s
                        )
                    })
                    .collect();
                part.push_str(&format!(": the model predicts {}", at.join(", ")));
            }
            part
        })
        .collect();
    format!(
        "\n\n**Not published, chosen by the card** (its notes say from where): {}.",
        settings.join("; ")
    )
}
