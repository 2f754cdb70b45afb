//! `lookup_recipe`: the documented recipes nearest to a request, each with its measured
//! numbers and the cost model's prediction, adapted when the request differs.
//!
//! Distance: a different model costs most (same family less), then sequence length (per
//! doubling), hardware (same generation less), GPU count (per doubling) and precision.
//! Adapting keeps the recipe's structure: CP follows the sequence length, DP/EDP absorb a
//! different GPU count, and if the result breaks a rule or stops fitting, the layout search
//! is run around the recipe (its TP fixed) and its best layout is offered instead.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    citations, evaluate_config, layout_label, layout_violations, next_power_of_two,
    recompute_label, resolve, value_text, Citation, InputNotes, Prediction, ToolError,
};
use super::plan::{search, LayoutConstraints, SearchRequest};
use crate::catalog::{Catalog, CostCards, Recipe};
use crate::model::{Architecture, ModelSpec, Precision, TrainingConfig};

const MODEL_MISMATCH: f64 = 8.0;
const FAMILY_MISMATCH: f64 = 3.0;
const PER_SEQUENCE_DOUBLING: f64 = 0.5;
const HARDWARE_MISMATCH: f64 = 1.0;
const GENERATION_MISMATCH: f64 = 0.5;
const PER_GPU_DOUBLING: f64 = 0.25;
const PRECISION_MISMATCH: f64 = 0.25;

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AdaptedLayout {
    pub config: TrainingConfig,
    pub layout: String,
    pub predicted: Prediction,
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
    pub predicted: Option<Prediction>,
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
        predicted: estimate.as_ref().map(Prediction::of),
        adapted,
        notes: recipe.notes.clone(),
        uri,
    }
}

fn json<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

/// Moves a recipe to the request: model, hardware, sequence length and GPU count.
fn adapt(
    catalog: &Catalog,
    recipe: &Recipe,
    input: &LookupRecipeInput,
    requested: &Architecture,
) -> Option<AdaptedLayout> {
    let cards = catalog.cost();
    let mut cfg = recipe.config.clone();
    let mut changes = Vec::new();
    let recipe_model = recipe_model_id(recipe).unwrap_or("");
    if recipe_model != requested.id {
        changes.push(Change {
            field: "model".into(),
            from: json(&recipe_model),
            to: json(&input.model),
            why: "the request names another model; the layout is carried over as a starting point"
                .into(),
        });
        cfg.model = Some(input.model.clone());
    }
    if let Some(hw) = &input.hardware {
        let hw = hw.to_ascii_lowercase();
        if cfg.hardware.as_deref() != Some(hw.as_str()) {
            changes.push(Change {
                field: "hardware".into(),
                from: json(&cfg.hardware),
                to: json(&hw),
                why: "requested hardware".into(),
            });
            cfg.hardware = Some(hw);
            // The dispatcher default follows the platform unless the recipe is alltoall.
            if cfg.moe_flex_dispatcher_backend.is_some() {
                cfg.moe_flex_dispatcher_backend = None;
                cfg.moe_token_dispatcher_type = None;
            }
        }
    }
    if let Some(p) = input.precision {
        if cfg.precision != Some(p) {
            changes.push(Change {
                field: "precision".into(),
                from: json(&cfg.precision),
                to: json(&p),
                why: "requested precision".into(),
            });
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
        changes.push(Change {
            field: "seq_length".into(),
            from: json(&recipe_seq),
            to: json(&input.seq_length),
            why: "requested sequence length".into(),
        });
        if new_cp != old_cp {
            changes.push(Change {
                field: "context_parallel_size".into(),
                from: json(&old_cp),
                to: json(&new_cp),
                why: format!(
                    "keeps the recipe's {} tokens per CP rank",
                    recipe_seq / u64::from(old_cp.max(1))
                ),
            });
            cfg.context_parallel_size = Some(new_cp);
        }
        cfg.seq_length = Some(input.seq_length);
        // Keep tokens per step: sequences scale inversely with length.
        if let Some(gbs) = cfg.global_batch_size {
            let sequences =
                (u64::from(gbs).saturating_mul(recipe_seq) / input.seq_length.max(1)).max(1);
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
    if Some(gpus) != cfg.num_gpus {
        changes.push(Change {
            field: "num_gpus".into(),
            from: json(&cfg.num_gpus),
            to: json(&gpus),
            why: if input.num_gpus.is_some() {
                "requested GPU count; DP and EDP absorb the difference".into()
            } else {
                "CP changed with the sequence; the recipe's DP is kept".into()
            },
        });
        cfg.num_gpus = Some(gpus);
    }
    // Global batch: a multiple of DP·MBS.
    let dp = (u64::from(gpus) / model_parallel).max(1);
    let step = dp.saturating_mul(u64::from(cfg.mbs())).max(1);
    if let Some(gbs) = cfg.global_batch_size {
        if u64::from(gbs) % step != 0 {
            let fixed = u32::try_from(u64::from(gbs).div_ceil(step).saturating_mul(step)).ok()?;
            changes.push(Change {
                field: "global_batch_size".into(),
                from: json(&gbs),
                to: json(&fixed),
                why: format!("rounded up to a multiple of DP·MBS = {step}"),
            });
            cfg.global_batch_size = Some(fixed);
        }
    }
    let estimate = evaluate_config(cards, &cfg).ok()?;
    if estimate.violations.is_empty() && estimate.fits {
        return Some(AdaptedLayout {
            layout: layout_label(&estimate),
            predicted: Prediction::of(&estimate),
            config: cfg,
            changes,
        });
    }
    // The straight adaptation breaks a rule or does not fit: search around it.
    let resolved = resolve(cards, &cfg).ok()?;
    let why = match layout_violations(&estimate).next() {
        Some(v) => format!("the straight adaptation breaks a rule ({})", v.code),
        None => format!(
            "the straight adaptation needs {:.1} GiB of {:.1}",
            estimate.memory.peak_gib, estimate.memory.capacity_gib
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
    });
    let (best_cfg, best_est) = outcome.ranked.into_iter().next()?;
    changes.push(Change {
        field: "layout".into(),
        from: json(&layout_label(&estimate)),
        to: json(&layout_label(&best_est)),
        why: format!("{why}; best layout the search finds with the recipe's TP"),
    });
    Some(AdaptedLayout {
        layout: layout_label(&best_est),
        predicted: Prediction::of(&best_est),
        config: best_cfg,
        changes,
    })
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
                text.push_str(&format!(" Measured {t} TFLOP/s/GPU."));
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
