//! The cost model's data, read from the catalog's cards: model architectures, GPUs, the
//! calibrated constants and the recipes that skill cards carry. Built once per snapshot.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Catalog, DataCardKind, Diagnostic, Severity};
use crate::model::cluster_calibration::ClusterCalibration;
use crate::model::uncertainty::UncertaintyTable;
use crate::model::{Architecture, CostConstants, Hardware, TrainingConfig};

/// A documented training configuration from a skill card's `recipes:` list
/// (schema: `cards/README.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Recipe {
    pub id: String,
    #[serde(default)]
    pub title: Option<String>,
    /// Model family used for nearest matches (`deepseek-v3`, `qwen3`, ...).
    #[serde(default)]
    pub family: Option<String>,
    /// Where the configuration and its numbers come from.
    pub source: String,
    /// measured | documented | derived | recipe_seed
    #[serde(default)]
    pub validation: Option<String>,
    pub config: TrainingConfig,
    /// Measured results as the source gives them; units are in the key names.
    #[serde(default)]
    pub measured: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    pub notes: Option<String>,
    /// Settings as the source publishes them, for each field the card's `config` changed or
    /// filled in (`null`: the source gives none, so Megatron's default applies).
    /// `lookup_recipe` evaluates them and states the disagreement with both numbers.
    #[serde(default)]
    pub published: Option<serde_json::Map<String, serde_json::Value>>,
    /// `config` fields the source publishes no value for and whose Megatron default is not
    /// what the source ran, so the card chose one (the `notes` say from where). Only
    /// `global_batch_size` is priced by `lookup_recipe`, at half and twice the card's value.
    #[serde(default)]
    pub assumed: Vec<String>,
    /// The skill whose card holds this recipe (filled in by the catalog).
    #[serde(default)]
    pub skill: String,
}

/// Typed cost-model cards.
#[derive(Debug, Clone, Default)]
pub struct CostCards {
    pub models: BTreeMap<String, Architecture>,
    pub hardware: BTreeMap<String, Hardware>,
    pub constants: Option<CostConstants>,
    pub recipes: Vec<Recipe>,
    /// The user's cluster calibration, when a root holds one: the GPU card and constants as
    /// that cluster runs them, used for every configuration on that GPU.
    pub calibration: Option<Calibrated>,
}

/// A cluster calibration applied to the card it names.
#[derive(Debug, Clone)]
pub struct Calibrated {
    pub card: ClusterCalibration,
    /// Where it was read from.
    pub file: String,
    pub hardware: Hardware,
    pub constants: CostConstants,
}

impl Calibrated {
    /// The sentence answers carry: "calibrated on 4 runs of your cluster for `h100` (…)
    /// from FILE".
    pub fn describe(&self) -> String {
        format!("{} from {}", self.card.describe(), self.file)
    }
}

impl CostCards {
    /// Converts the raw data cards and the skill cards' `recipes:` lists. A card that does
    /// not convert becomes an error diagnostic naming its file; the others still load.
    pub fn from_catalog(catalog: &Catalog) -> (CostCards, Vec<Diagnostic>) {
        let mut cards = CostCards::default();
        let mut diagnostics = Vec::new();
        let mut problem = |file: &str, message: String| {
            diagnostics.push(Diagnostic {
                severity: Severity::Error,
                file: file.to_string(),
                line: None,
                message,
            })
        };
        for card in catalog.data_cards(DataCardKind::Model) {
            match serde_yaml::from_value::<Architecture>(card.value.clone()) {
                Ok(mut arch) => {
                    if arch.id.is_empty() {
                        arch.id = card.id.clone();
                    }
                    match arch.validate() {
                        Ok(()) => {
                            cards.models.insert(card.id.clone(), arch);
                        }
                        Err(error) => problem(&card.file, format!("model card: {error}")),
                    }
                }
                Err(error) => problem(&card.file, format!("model card: {error}")),
            }
        }
        for card in catalog.data_cards(DataCardKind::Hardware) {
            match serde_yaml::from_value::<Hardware>(card.value.clone()) {
                Ok(mut hw) => {
                    if hw.id.is_empty() {
                        hw.id = card.id.clone();
                    }
                    // A malformed table is never read (lookups fall back), but say so.
                    for p in hw.problems() {
                        problem(&card.file, format!("hardware card: {p}"));
                    }
                    cards.hardware.insert(card.id.clone(), hw);
                }
                Err(error) => problem(&card.file, format!("hardware card: {error}")),
            }
        }
        if let Some(card) = catalog.data_cards(DataCardKind::CostModel).last() {
            match serde_yaml::from_value::<CostConstants>(card.value.clone()) {
                Ok(constants) => {
                    // A malformed protocol is skipped when pricing (see its `problems`).
                    for p in constants.nccl_latency.problems() {
                        problem(&card.file, format!("cost-model card: nccl_latency: {p}"));
                    }
                    cards.constants = Some(constants);
                }
                Err(error) => problem(&card.file, format!("cost-model card: {error}")),
            }
        }
        // The generated error bands ride with the constants into `evaluate`.
        if let Some(card) = catalog.data_cards(DataCardKind::TimeUncertainty).last() {
            match serde_yaml::from_value::<UncertaintyTable>(card.value.clone()) {
                Ok(table) => {
                    if let Some(k) = cards.constants.as_mut() {
                        k.time_uncertainty = table;
                    }
                }
                Err(error) => problem(&card.file, format!("time-uncertainty card: {error}")),
            }
        }
        if let Some(card) = catalog.data_cards(DataCardKind::Calibration).last() {
            let parsed = serde_yaml::from_value::<ClusterCalibration>(card.value.clone())
                .map_err(|error| error.to_string())
                .and_then(|cal| cal.validate().map(|()| cal).map_err(|e| e.to_string()));
            match (parsed, cards.constants.as_ref()) {
                (Ok(cal), Some(constants)) => {
                    match cards
                        .hardware
                        .get(&cal.hardware.trim().to_ascii_lowercase())
                    {
                        Some(hw) => {
                            let (hardware, constants) = cal.apply(hw, constants);
                            cards.calibration = Some(Calibrated {
                                card: cal,
                                file: card.file.clone(),
                                hardware,
                                constants,
                            });
                        }
                        None => problem(
                            &card.file,
                            format!(
                                "calibration card: no hardware card `{}`; known: {}",
                                cal.hardware,
                                cards
                                    .hardware
                                    .keys()
                                    .cloned()
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        ),
                    }
                }
                (Ok(_), None) => problem(
                    &card.file,
                    "calibration card: there is no cost-model card to apply it to".into(),
                ),
                (Err(error), _) => problem(&card.file, format!("calibration card: {error}")),
            }
        }
        for skill in catalog.skills() {
            let Some(card) = &skill.card else { continue };
            let Some(list) = card.raw.get("recipes") else {
                continue;
            };
            let Some(items) = list.as_sequence() else {
                problem(
                    &skill.location,
                    "card.yaml: `recipes` must be a list".into(),
                );
                continue;
            };
            for (index, item) in items.iter().enumerate() {
                match serde_yaml::from_value::<Recipe>(item.clone()) {
                    Ok(mut recipe) => {
                        recipe.skill = skill.name.clone();
                        let set = serde_json::to_value(&recipe.config).unwrap_or_default();
                        let (known, unknown): (Vec<String>, Vec<String>) = recipe
                            .assumed
                            .drain(..)
                            .partition(|field| set.get(field).is_some());
                        recipe.assumed = known;
                        for field in unknown {
                            problem(
                                &skill.location,
                                format!(
                                    "card.yaml: recipes[{index}] ({}): `assumed` names `{field}`, which its `config` does not set; name a field the config sets (e.g. global_batch_size), or drop it",
                                    recipe.id
                                ),
                            );
                        }
                        cards.recipes.retain(|r| r.id != recipe.id);
                        cards.recipes.push(recipe);
                    }
                    Err(error) => problem(
                        &skill.location,
                        format!("card.yaml: recipes[{index}]: {error}"),
                    ),
                }
            }
        }
        (cards, diagnostics)
    }
}
