//! What Megatron-Bridge's recipe names say. Bridge names its library and performance recipes
//! `<model>_<task>_<N>gpu_<gpu>_<dtype>[_<variant>…]_config`
//! (`gpt_oss_120b_pretrain_64gpu_b300_fp8mx_config`, `llama3_8b_pretrain_64gpu_h100_bf16_128k_config`
//! in src/megatron/bridge/recipes and src/megatron/bridge/perf_recipes, Megatron-Bridge v0.6.0),
//! and each starts from the model's base recipe, `<model>_pretrain_config()`, defined in another
//! file. A recipe read from one file therefore names its model, GPU count, GPU and precision
//! only in those names; this module reads them, and the caller fills a setting from them only
//! where the file's own lines leave it unset, saying so.

use serde_json::Value;

use crate::model::config::{AssumedDefault, TrainingConfig};
use crate::model::Precision;

/// Tasks Bridge's recipe names carry between the model and the rest.
const TASKS: &[&str] = &["pretrain", "sft", "peft", "finetune"];

/// The model a base-recipe call names: `deepseek_v3_pretrain_config` → `deepseek_v3`,
/// `_qwen3_30b_a3b_default_pretrain_config` → `qwen3_30b_a3b`; `None` for any other callee.
pub fn base_recipe_model(callee: &str) -> Option<String> {
    let last = callee.rsplit('.').next().unwrap_or(callee);
    let stem = last.trim_start_matches('_').strip_suffix("_config")?;
    let model = TASKS
        .iter()
        .find_map(|task| stem.strip_suffix(&format!("_{task}")))?;
    let model = model.strip_suffix("_default").unwrap_or(model);
    // Bridge's `default_peft_config(scheme)` (recipes/utils/dataset_utils.py) builds a PEFT
    // section, not a model's recipe.
    if model == "default" {
        return None;
    }
    let plausible = !model.is_empty()
        && model
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    plausible.then(|| model.to_owned())
}

/// The model any recipe name states before its task: the base and performance shapes above,
/// and the variants Bridge appends after the task without a GPU count
/// (`qwen3_600m_sft_128k_config`, `deepseek_v4_flash_pretrain_mxfp8_config`; the recipe index,
/// skills/nemo-mbridge-recipe-recommender/references/recipe-index.md). `None` when no task
/// token follows a plausible model name.
pub fn recipe_model(name: &str) -> Option<String> {
    if let Some(settings) = recipe_name_settings(name) {
        return Some(settings.model);
    }
    if let Some(model) = base_recipe_model(name) {
        return Some(model);
    }
    let last = name.rsplit('.').next().unwrap_or(name);
    let stem = last.trim_start_matches('_').strip_suffix("_config")?;
    let tokens: Vec<&str> = stem.split('_').collect();
    let task_at = tokens.iter().position(|t| TASKS.contains(t))?;
    let model = tokens.get(..task_at)?.join("_");
    let plausible = !model.is_empty()
        && model != "default"
        && model
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    plausible.then_some(model)
}

/// Settings a recipe's own name states.
#[derive(Debug, Clone, PartialEq)]
pub struct RecipeNameSettings {
    pub model: String,
    /// The `<N>gpu` token; the performance configs' constant names carry none.
    pub num_gpus: Option<u32>,
    /// The GPU token as written (`b300`); the catalog decides whether it knows it.
    pub hardware: String,
    pub precision: Option<Precision>,
    /// From a `<N>k` variant (`128k`): N × 1024 tokens.
    pub seq_length: Option<u64>,
    /// `pretrain`, `sft`, `peft` or `finetune`.
    pub task: String,
}

/// Reads `<model>_<task>_<N>gpu_<gpu>_<dtype>[_<variant>…]_config`, or a performance config
/// constant of Megatron-Bridge 26.02–26.06 (`<MODEL>_<TASK>_CONFIG_<GPU>_<DTYPE>[_V<n>]`,
/// `LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2` in scripts/performance/configs/*/
/// *_workload_base_configs.py, v0.3.0–v0.5.0); `None` when the name follows neither shape (the
/// GPU, and in the first shape the GPU count, are required).
pub fn recipe_name_settings(name: &str) -> Option<RecipeNameSettings> {
    recipe_function_settings(name).or_else(|| workload_constant_settings(name))
}

fn recipe_function_settings(name: &str) -> Option<RecipeNameSettings> {
    let stem = name.strip_suffix("_config")?;
    let tokens: Vec<&str> = stem.split('_').collect();
    let gpus_at = tokens
        .iter()
        .position(|t| t.strip_suffix("gpu").is_some_and(is_number))?;
    let task_at = gpus_at.checked_sub(1)?;
    if !TASKS.contains(&tokens[task_at]) || task_at == 0 {
        return None;
    }
    let num_gpus: u32 = tokens[gpus_at].strip_suffix("gpu")?.parse().ok()?;
    let hardware = tokens.get(gpus_at + 1).filter(|t| is_gpu_token(t))?;
    let rest = tokens.get(gpus_at + 2..).unwrap_or_default();
    let precision = rest.first().and_then(|t| precision_token(t));
    let seq_length = rest
        .iter()
        .find_map(|t| t.strip_suffix('k').filter(|n| is_number(n)))
        .and_then(|n| n.parse::<u64>().ok())
        .and_then(|k| k.checked_mul(1024));
    Some(RecipeNameSettings {
        model: tokens[..task_at].join("_"),
        num_gpus: Some(num_gpus),
        hardware: (*hardware).to_owned(),
        precision,
        seq_length,
        task: tokens[task_at].to_owned(),
    })
}

/// Tasks the performance config constants name before `_CONFIG_`.
const CONSTANT_TASKS: &[(&str, &str)] =
    &[("PRETRAIN", "pretrain"), ("SFT", "sft"), ("LORA", "peft")];

/// `<MODEL>_<TASK>_CONFIG_<GPU>_<DTYPE>[_LARGE_SCALE][_V<n>]`: the model (lower-cased, as the
/// lower-case names spell it), the GPU and the precision.
fn workload_constant_settings(name: &str) -> Option<RecipeNameSettings> {
    let plausible = name
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !plausible {
        return None;
    }
    let name = name.trim_start_matches('_');
    let (model, task, rest) = CONSTANT_TASKS.iter().find_map(|(upper, task)| {
        let (model, rest) = name.split_once(&format!("_{upper}_CONFIG_"))?;
        Some((model, *task, rest))
    })?;
    let tokens: Vec<String> = rest.split('_').map(str::to_ascii_lowercase).collect();
    let is_version = |t: &str| t.strip_prefix('v').is_some_and(is_number);
    let hardware = tokens
        .first()
        .filter(|t| is_gpu_token(t) && !is_version(t))?;
    // The dtype is the tokens up to a version or variant token, joined as the lower-case
    // names write it (`FP8_CS` → `fp8cs`).
    let dtype: String = tokens[1..]
        .iter()
        .take_while(|t| !is_version(t) && *t != "large")
        .map(String::as_str)
        .collect();
    if model.is_empty() {
        return None;
    }
    Some(RecipeNameSettings {
        model: model.to_ascii_lowercase(),
        num_gpus: None,
        hardware: hardware.clone(),
        precision: precision_token(&dtype),
        seq_length: None,
        task: task.to_owned(),
    })
}

impl RecipeNameSettings {
    /// Fills the settings `config` leaves unset from the name of the recipe `recipe`, and
    /// says which (the GPU count, GPU, precision, a `<N>k` sequence length, PEFT).
    pub fn fill_unset(self, config: &mut TrainingConfig, recipe: &str) -> Vec<AssumedDefault> {
        let mut noted = Vec::new();
        let why = if self.num_gpus.is_some() {
            format!(
                "named in the recipe's name `{recipe}` (Bridge names recipes \
                 <model>_<task>_<N>gpu_<gpu>_<dtype>_config)"
            )
        } else {
            format!(
                "named in the performance config's name `{recipe}` (Bridge 26.02–26.06 names \
                 them <MODEL>_<TASK>_CONFIG_<GPU>_<DTYPE>_V<n>)"
            )
        };
        if let (None, Some(gpus)) = (config.num_gpus, self.num_gpus) {
            noted.push(AssumedDefault::new("num_gpus", gpus.into(), why.as_str()));
            config.num_gpus = Some(gpus);
        }
        if config.hardware.is_none() {
            noted.push(AssumedDefault::new(
                "hardware",
                Value::String(self.hardware.clone()),
                why.as_str(),
            ));
            config.hardware = Some(self.hardware);
        }
        if let (None, Some(precision)) = (config.precision, self.precision) {
            noted.push(AssumedDefault::new(
                "precision",
                serde_json::to_value(precision).unwrap_or_default(),
                why.as_str(),
            ));
            config.precision = Some(precision);
        }
        if let (None, Some(seq)) = (config.seq_length, self.seq_length) {
            noted.push(AssumedDefault::new("seq_length", seq.into(), why.as_str()));
            config.seq_length = Some(seq);
        }
        if config.peft.is_none() && self.task == "peft" {
            noted.push(AssumedDefault::new(
                "peft",
                Value::Bool(true),
                "a `peft` recipe (Bridge's LoRA/DoRA fine-tuning): the base weights are frozen",
            ));
            config.peft = Some(true);
        }
        noted
    }
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_digit())
}

/// A GPU token is letters then digits (`h100`, `gb300`, `vr200`).
fn is_gpu_token(token: &str) -> bool {
    let digits = token.trim_start_matches(|c: char| c.is_ascii_lowercase());
    digits.len() < token.len() && is_number(digits)
}

/// The dtype tokens of Bridge's names (`_perf_precision`'s compute dtypes without the
/// underscore: perf_recipes/_common.py, v0.6.0).
fn precision_token(token: &str) -> Option<Precision> {
    match token {
        "bf16" => Some(Precision::Bf16),
        "fp8cs" => Some(Precision::Fp8Tensorwise),
        "fp8mx" => Some(Precision::Mxfp8),
        "nvfp4" => Some(Precision::Nvfp4),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_recipe_calls_name_their_model() {
        assert_eq!(
            base_recipe_model("gpt_oss_120b_pretrain_config").as_deref(),
            Some("gpt_oss_120b")
        );
        assert_eq!(
            base_recipe_model("_qwen3_30b_a3b_default_pretrain_config").as_deref(),
            Some("qwen3_30b_a3b")
        );
        assert_eq!(
            base_recipe_model("recipes.deepseek_v3_sft_config").as_deref(),
            Some("deepseek_v3")
        );
        assert_eq!(base_recipe_model("_perf_precision"), None);
        assert_eq!(base_recipe_model("pretrain_config"), None);
        assert_eq!(base_recipe_model("Qwen3_pretrain_config"), None);
    }

    #[test]
    fn recipe_names_with_variants_after_the_task_name_their_model() {
        assert_eq!(
            recipe_model("qwen3_600m_sft_128k_config").as_deref(),
            Some("qwen3_600m")
        );
        assert_eq!(
            recipe_model("deepseek_v4_flash_pretrain_mxfp8_config").as_deref(),
            Some("deepseek_v4_flash")
        );
        assert_eq!(
            recipe_model("gpt_oss_120b_pretrain_64gpu_b300_fp8mx_config").as_deref(),
            Some("gpt_oss_120b")
        );
        assert_eq!(
            recipe_model("qwen3_30b_a3b_pretrain_config").as_deref(),
            Some("qwen3_30b_a3b")
        );
        assert_eq!(recipe_model("default_sft_config"), None);
        assert_eq!(recipe_model("sft_128k_config"), None);
        assert_eq!(recipe_model("Qwen3_sft_128k_config"), None);
        assert_eq!(recipe_model("qwen3_600m_128k_config"), None);
    }

    #[test]
    fn performance_recipe_names_give_gpus_gpu_precision_and_sequence() {
        let s = recipe_name_settings("gpt_oss_120b_pretrain_64gpu_b300_fp8mx_config").unwrap();
        assert_eq!(s.model, "gpt_oss_120b");
        assert_eq!(s.num_gpus, Some(64));
        assert_eq!(s.hardware, "b300");
        assert_eq!(s.precision, Some(Precision::Mxfp8));
        assert_eq!(s.seq_length, None);

        let s = recipe_name_settings("llama3_8b_pretrain_64gpu_h100_bf16_128k_config").unwrap();
        assert_eq!((s.num_gpus, s.seq_length), (Some(64), Some(131_072)));
        assert_eq!(s.precision, Some(Precision::Bf16));

        let s = recipe_name_settings("deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config");
        assert_eq!(
            s.map(|s| (s.model, s.seq_length)),
            Some(("deepseek_v3".into(), None))
        );

        let s = recipe_name_settings("gpt_oss_20b_pretrain_16gpu_h100_fp8cs_config").unwrap();
        assert_eq!(s.precision, Some(Precision::Fp8Tensorwise));
    }

    proptest::proptest! {
        /// Any identifier reads without panicking; a name read back gives its own GPU count.
        #[test]
        fn any_identifier_reads_and_counts_round_trip(
            model in "[a-z][a-z0-9_]{0,20}",
            gpus in 1u32..100_000,
            gpu in "[a-z]{1,3}[0-9]{1,4}",
            rest in "[a-z0-9_]{0,20}",
        ) {
            let name = format!("{model}_pretrain_{gpus}gpu_{gpu}_{rest}_config");
            if let Some(s) = recipe_name_settings(&name) {
                // A lower-case name always gives its GPU count, and only its own.
                proptest::prop_assert!(s.num_gpus.is_some_and(|n| n >= 1));
                let stated = name
                    .split('_')
                    .any(|t| t.strip_suffix("gpu").and_then(|d| d.parse::<u32>().ok()) == s.num_gpus);
                proptest::prop_assert!(stated, "{} does not state {:?} GPUs", name, s.num_gpus);
            }
            let _ = base_recipe_model(&name);
            let _ = recipe_name_settings(&rest);
        }
    }

    #[test]
    fn performance_config_constants_give_model_gpu_and_precision() {
        // scripts/performance/configs/llama/*_workload_base_configs.py (Bridge v0.5.0).
        let s = recipe_name_settings("LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2").unwrap();
        assert_eq!(s.model, "llama3_70b");
        assert_eq!(s.hardware, "gb200");
        assert_eq!(s.precision, Some(Precision::Fp8Tensorwise));
        assert_eq!((s.num_gpus, s.task.as_str()), (None, "pretrain"));
        let s =
            recipe_name_settings("DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_LARGE_SCALE").unwrap();
        assert_eq!(
            (s.model.as_str(), s.precision),
            ("deepseek_v3", Some(Precision::Mxfp8))
        );
        let s = recipe_name_settings("LLAMA31_405B_PRETRAIN_CONFIG_H100_NVFP4_V1").unwrap();
        assert_eq!(
            (s.hardware.as_str(), s.precision),
            ("h100", Some(Precision::Nvfp4))
        );
        let s = recipe_name_settings("_LLAMA3_70B_LORA_CONFIG_H100_BF16").unwrap();
        assert_eq!(
            (s.task.as_str(), s.precision),
            ("peft", Some(Precision::Bf16))
        );
        // A base constant names no GPU: nothing.
        assert_eq!(recipe_name_settings("BASE_LLAMA3_70B_CONFIG_GBS256"), None);
        assert_eq!(recipe_name_settings("LLAMA3_70B_PRETRAIN_CONFIG_V2"), None);
    }

    #[test]
    fn other_names_state_nothing() {
        assert_eq!(base_recipe_model("default_peft_config"), None);
        assert_eq!(recipe_name_settings("pretrain_config"), None);
        assert_eq!(recipe_name_settings("my_recipe"), None);
        assert_eq!(recipe_name_settings("qwen3_pretrain_8gpu_config"), None);
        assert_eq!(recipe_name_settings("pretrain_8gpu_h100_bf16_config"), None);
        // A GPU count that does not fit is not a name this module reads.
        assert_eq!(
            recipe_name_settings("m_pretrain_99999999999gpu_h100_bf16_config"),
            None
        );
        // An unknown dtype token leaves the precision to the file.
        let s = recipe_name_settings("m_pretrain_8gpu_h100_fp6_config").unwrap();
        assert_eq!(s.precision, None);
    }
}
