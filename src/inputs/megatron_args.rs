//! Megatron-LM command lines (`torchrun ... pretrain_gpt.py --flag value ...`).
//!
//! Every option string is looked up in Megatron-LM's own argument list
//! (`data/inputs/megatron-lm-arguments.yaml`, generated from `arguments.py` by
//! `scripts/megatron-arguments.py`) and parsed with argparse's rules for it (store_true and
//! store_false take no value, `nargs` lists, `--flag=value`; Megatron sets
//! `allow_abbrev=False`, so prefixes are not accepted). Each flag is then one of:
//! - modelled: it sets a [`TrainingConfig`] field, possibly under another name or through
//!   Megatron's own rule (`--recompute-activations` is selective `core_attn` recompute);
//! - architecture: with no model named elsewhere, the flags build a HuggingFace-style
//!   `config.json` object that [`Architecture::from_hf_config`] maps like any other, so a
//!   command line and the equivalent `config.json` share one code path;
//! - known but unused: listed in `ignored_settings` with the reason;
//! - unknown: an error naming the closest real option.
//!
//! Words that are not Megatron arguments (launcher, script, environment assignments,
//! shell variables, redirections) are listed in `ignored_settings` with a reason.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::layer_pattern::eval_layer_pattern;
use super::megatron_scripts::{check_hybrid_pattern, check_trainer, fixed_tokenizer};
use super::shell::{scalar_value, shell_words};
use crate::model::config::{
    describe_serde_error, AssumedDefault, ConfigError, IgnoredSetting, ModelSpec, TrainingConfig,
};

/// Megatron-LM's argument list, generated from its `arguments.py` (the file names the commit).
pub const MEGATRON_ARGUMENTS_YAML: &str =
    include_str!("../../data/inputs/megatron-lm-arguments.yaml");

/// Reason given for Megatron-LM flags that exist but do not change the cost model.
pub const UNUSED_REASON: &str = "Megatron-LM argument the cost model does not use";

/// One Megatron-LM argument as argparse defines it.
#[derive(Debug, Clone, Deserialize)]
pub struct MegatronArgument {
    /// Every option string that selects it (aliases and `--no-` forms included).
    pub options: Vec<String>,
    pub dest: String,
    /// `store`, `store_true`, `store_false` or `boolean_optional`.
    pub action: String,
    /// argparse `nargs`: absent, `"+"`, `"*"`, `"?"` or a count.
    #[serde(default)]
    pub nargs: Option<Value>,
    /// The argparse `type` as written in Megatron-LM (`int`, `float`, `str`, a function).
    #[serde(default, rename = "type")]
    pub value_type: Option<String>,
    #[serde(default)]
    pub default: Option<Value>,
    /// Allowed values when Megatron-LM lists them (an object when they are computed).
    #[serde(default)]
    pub choices: Option<Value>,
}

#[derive(Deserialize)]
struct ArgumentFile {
    source: ArgumentSource,
    allow_abbrev: Option<bool>,
    arguments: Vec<MegatronArgument>,
}

#[derive(Deserialize)]
struct ArgumentSource {
    commit: String,
}

/// The argument list with an index by option string.
pub struct MegatronArguments {
    pub commit: String,
    /// Megatron-LM builds its parser with `allow_abbrev=False`.
    pub allow_abbrev: bool,
    pub arguments: Vec<MegatronArgument>,
    by_option: HashMap<String, usize>,
}

impl MegatronArguments {
    pub fn get(&self, option: &str) -> Option<&MegatronArgument> {
        self.by_option.get(option).map(|&i| &self.arguments[i])
    }

    /// The argument that stores into `dest` (argparse's attribute name), when one does.
    pub fn by_dest(&self, dest: &str) -> Option<&MegatronArgument> {
        self.arguments.iter().find(|a| a.dest == dest)
    }

    /// The real option string closest to a misspelt one.
    pub fn closest(&self, option: &str) -> Option<String> {
        closest_option(option, self.by_option.keys())
    }
}

/// Of `options`, the one closest to a misspelt `option` (ties go to the alphabetically first).
pub(super) fn closest_option<'a>(
    option: &str,
    options: impl Iterator<Item = &'a String>,
) -> Option<String> {
    options
        .map(|k| (strsim::jaro_winkler(option, k), k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| b.1.cmp(a.1)))
        .map(|(_, k)| k.clone())
}

/// The embedded argument list (parsed once).
pub fn megatron_arguments() -> Result<&'static MegatronArguments, ConfigError> {
    static LIST: OnceLock<Result<MegatronArguments, String>> = OnceLock::new();
    LIST.get_or_init(|| {
        let file: ArgumentFile =
            serde_yaml::from_str(MEGATRON_ARGUMENTS_YAML).map_err(|e| e.to_string())?;
        let mut by_option = HashMap::new();
        for (i, arg) in file.arguments.iter().enumerate() {
            for option in &arg.options {
                by_option.insert(option.clone(), i);
            }
        }
        Ok(MegatronArguments {
            commit: file.source.commit,
            allow_abbrev: file.allow_abbrev.unwrap_or(true),
            arguments: file.arguments,
            by_option,
        })
    })
    .as_ref()
    .map_err(|e| ConfigError::Parse(format!("embedded Megatron-LM argument list: {e}")))
}

/// How the reader uses a Megatron-LM argument (by its `dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MegatronUse {
    /// Sets a training-configuration field.
    Modelled,
    /// Describes the model; used to build the architecture when no model is named.
    Architecture,
    /// Changes the model in a way the command-line reader cannot build; a model card or
    /// `config.json` must be named instead.
    UnsupportedArchitecture,
    /// Megatron-LM refuses it at start-up.
    Rejected,
    /// Known to Megatron-LM, not used by the cost model.
    Unused,
}

/// Destinations that set training-configuration fields (directly or through a rule below).
const MODELLED: &[&str] = &[
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "num_virtual_stages_per_pipeline_rank",
    "num_layers_per_virtual_pipeline_stage",
    "seq_length",
    "micro_batch_size",
    "global_batch_size",
    "cp_comm_type",
    "hierarchical_context_parallel_sizes",
    "sequence_parallel",
    "recompute_granularity",
    "recompute_modules",
    "recompute_method",
    "recompute_num_layers",
    "recompute_activations",
    "moe_layer_recompute",
    "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend",
    "moe_enable_deepep",
    "moe_router_force_load_balancing",
    "overlap_moe_expert_parallel_comm",
    "moe_flex_dispatcher_num_sms",
    "moe_deepep_num_sms",
    "moe_hybridep_num_sms",
    "moe_expert_capacity_factor",
    "moe_pad_expert_input_to_capacity",
    "moe_expert_rank_capacity_factor",
    "moe_paged_stash",
    "delay_wgrad_compute",
    "tp_comm_overlap",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "ddp_bucket_size",
    "ddp_num_buckets",
    "use_distributed_optimizer",
    "use_megatron_fsdp",
    "data_parallel_sharding_strategy",
    "use_precision_aware_optimizer",
    "accumulate_allreduce_grads_in_fp32",
    "grad_reduce_in_bf16",
    "optimizer",
    "main_params_dtype",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "optimizer_cpu_offload",
    "optimizer_offload_fraction",
    "overlap_cpu_optimizer_d2h_h2d",
    "cross_entropy_loss_fusion",
    "mtp_num_layers",
    "fp8",
    "fp8_recipe",
    "fp8_param_gather",
    "fp4",
    "fp4_recipe",
    "bf16",
    "fp16",
    "cuda_graph_impl",
    "cuda_graph_modules",
    "cuda_graph_scope_deprecated",
    "enable_cuda_graph",
    "external_cuda_graph",
    "fine_grained_activation_offloading",
    "offload_modules",
    "pipeline_model_parallel_layout",
    "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
];

/// Destinations that describe the architecture.
const ARCHITECTURE: &[&str] = &[
    "num_layers",
    "decoder_num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "group_query_attention",
    "num_query_groups",
    "kv_channels",
    "multi_latent_attention",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "num_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_layer_freq",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "vocab_size",
    "padded_vocab_size",
    "make_vocab_size_divisible_by",
    "untie_embeddings_and_output_weights",
    "swiglu",
    "squared_relu",
    "quick_geglu",
    "add_bias_linear",
    "activation_func_clamp_value",
    "attention_output_gate",
    "max_position_embeddings",
    "tokenizer_type",
];

/// Architecture flags whose effect the reader cannot express in an [`Architecture`]
/// built from flags.
const UNSUPPORTED_ARCHITECTURE: &[&str] = &[
    "hybrid_layer_pattern",
    "hybrid_override_pattern",
    "heterogeneous_layers_config_path",
    "heterogeneous_layers_config_encoded_json",
    "linear_attention_freq",
    "experimental_attention_variant",
    "window_size",
    "window_attn_skip_freq",
    "moe_latent_size",
    "yaml_cfg",
];

/// Flags Megatron-LM refuses in `validate_args`, with its message.
const REJECTED: &[(&str, &str)] = &[
    (
        "checkpoint_activations",
        "Megatron-LM exits on it: use --recompute-activations, or --recompute-granularity and --recompute-method",
    ),
    (
        "model_parallel_size",
        "Megatron-LM refuses it: use --tensor-model-parallel-size",
    ),
];

/// How the reader uses the argument with this `dest`.
pub fn megatron_use(dest: &str) -> MegatronUse {
    if MODELLED.contains(&dest) {
        MegatronUse::Modelled
    } else if ARCHITECTURE.contains(&dest) {
        MegatronUse::Architecture
    } else if UNSUPPORTED_ARCHITECTURE.contains(&dest) {
        MegatronUse::UnsupportedArchitecture
    } else if REJECTED.iter().any(|(d, _)| *d == dest) {
        MegatronUse::Rejected
    } else {
        MegatronUse::Unused
    }
}

/// The `dest`s this reader maps specially (for tests: each must exist in Megatron-LM).
pub fn mapped_dests() -> impl Iterator<Item = &'static str> {
    MODELLED
        .iter()
        .chain(ARCHITECTURE)
        .chain(UNSUPPORTED_ARCHITECTURE)
        .copied()
        .chain(REJECTED.iter().map(|(d, _)| *d))
}

/// Read a Megatron-LM command line. Architecture flags build the model when the line
/// carries a whole architecture (`--num-layers`, `--hidden-size`, `--num-attention-heads`).
pub fn parse_megatron_args(text: &str) -> Result<TrainingConfig, ConfigError> {
    parse_megatron_args_for_model(text, None)
}

/// Read a Megatron-LM command line for a model named elsewhere (a card id or a
/// `config.json`): that model wins, and the line's architecture flags are listed in
/// `ignored_settings`. With `None` this is [`parse_megatron_args`].
pub fn parse_megatron_args_for_model(
    text: &str,
    model: Option<&ModelSpec>,
) -> Result<TrainingConfig, ConfigError> {
    let list = megatron_arguments()?;
    let words = shell_words(text);
    let mut reader = Reader::default();
    reader.read_flags(list, &words)?;
    reader.finish(model)
}

/// A flag's parsed value.
#[derive(Debug, Clone)]
enum ArgValue {
    /// store_true / store_false / boolean_optional: the value stored.
    Switch(bool),
    One(String),
    Many(Vec<String>),
}

impl ArgValue {
    fn first(&self) -> Option<&str> {
        match self {
            ArgValue::One(s) => Some(s),
            ArgValue::Many(v) => v.first().map(String::as_str),
            ArgValue::Switch(_) => None,
        }
    }
}

/// One flag as written.
#[derive(Debug, Clone)]
struct Given {
    option: String,
    dest: String,
    value: ArgValue,
}

#[derive(Default)]
struct Reader {
    flat: Map<String, Value>,
    ignored: Vec<IgnoredSetting>,
    assumed: Vec<AssumedDefault>,
    /// Flags by dest, last one wins (argparse).
    given: Vec<Given>,
    launcher_nproc: Option<u64>,
    launcher_nnodes: Option<u64>,
    script_seen: bool,
}

fn ignore(key: impl Into<String>, reason: impl Into<String>) -> IgnoredSetting {
    IgnoredSetting::new(key, reason)
}

fn is_env_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

fn is_shell_variable(word: &str) -> bool {
    word.starts_with('$') || word.starts_with("\"$")
}

fn is_shell_operator(word: &str) -> bool {
    matches!(
        word,
        "|" | "||" | "&&" | ";" | "&" | ">" | ">>" | "<" | "2>&1" | "|&"
    ) || word.starts_with("2>")
        || word.starts_with("1>")
        || word.starts_with('>')
}

/// argparse treats a word as an option when it starts with `-` and is not a number.
fn looks_like_option(word: &str) -> bool {
    word.starts_with('-') && word.len() > 1 && word.parse::<f64>().is_err()
}

impl Reader {
    /// Index of the training script (`pretrain_gpt.py`), if the line names one.
    fn find_script(&mut self, words: &[String]) -> Option<usize> {
        let script = words
            .iter()
            .position(|w| w.ends_with(".py") && !w.starts_with('-') && !is_env_assignment(w));
        self.script_seen = script.is_some();
        script
    }

    /// A launcher option before the script (`--nproc_per_node 8`): listed as ignored, and
    /// the GPU count taken from `--nproc_per_node` × `--nnodes`. Returns the words used.
    fn launcher_option(&mut self, words: &[String], end: usize) -> usize {
        let word = &words[0];
        let (name, inline) = match word.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (word.as_str(), None),
        };
        let takes_value = !matches!(name, "--standalone" | "--no-python" | "--no_python" | "-m");
        let mut used = 1;
        let value = match inline {
            Some(v) => Some(v),
            None if takes_value && end > 1 && !looks_like_option(&words[1]) => {
                used = 2;
                Some(words[1].clone())
            }
            None => None,
        };
        let count = value.as_deref().and_then(|v| v.parse::<u64>().ok());
        match name.replace('-', "_").as_str() {
            "__nproc_per_node" => self.launcher_nproc = count,
            "__nnodes" => self.launcher_nnodes = count,
            _ => {}
        }
        let shown = match &value {
            Some(v) => format!("{name} {v}"),
            None => name.to_string(),
        };
        self.ignored.push(ignore(
            shown,
            "launcher argument before the training script (not a Megatron-LM argument)",
        ));
        used
    }

    fn read_flags(
        &mut self,
        list: &MegatronArguments,
        words: &[String],
    ) -> Result<(), ConfigError> {
        let script = self.find_script(words);
        if let Some(at) = script {
            check_trainer(&words[at])?;
        }
        let mut i = 0;
        while i < words.len() {
            let word = &words[i];
            if Some(i) == script {
                self.ignored.push(ignore(
                    word,
                    "training script; the Megatron-LM arguments follow it",
                ));
                i += 1;
                continue;
            }
            let before_script = script.is_some_and(|s| i < s);
            if is_env_assignment(word) {
                self.ignored
                    .push(ignore(word, "environment variable assignment"));
                i += 1;
                continue;
            }
            if before_script && looks_like_option(word) {
                // Launcher options (`torchrun --nproc_per_node 8`) come before the script;
                // Megatron-LM flags there (a variable assigned on an earlier line) still count.
                let option = word.split_once('=').map_or(word.as_str(), |(o, _)| o);
                if list.get(option).is_none() {
                    let end = script.unwrap_or(words.len()) - i;
                    i += self.launcher_option(&words[i..], end);
                    continue;
                }
            }
            i += 1;
            if before_script
                && !looks_like_option(word)
                && !is_shell_operator(word)
                && !is_shell_variable(word)
            {
                self.ignored
                    .push(ignore(word, "launcher word before the training script"));
                continue;
            }
            if is_shell_operator(word) && !before_script {
                let rest = words[i - 1..].join(" ");
                self.ignored.push(ignore(
                    rest,
                    "shell redirection or pipe after the command; not part of it",
                ));
                break;
            }
            if is_shell_operator(word) && before_script {
                self.ignored
                    .push(ignore(word, "shell operator before the training script"));
                continue;
            }
            if is_shell_variable(word) {
                self.ignored.push(IgnoredSetting::unread(
                    word,
                    "unexpanded shell variable: the flags it holds are not read (expand it first)",
                ));
                continue;
            }
            if !looks_like_option(word) {
                self.ignored.push(ignore(
                    word,
                    "word not attached to any flag (argparse would reject it)",
                ));
                continue;
            }
            let (option, inline) = match word.split_once('=') {
                Some((o, v)) => (o.to_string(), Some(v.to_string())),
                None => (word.clone(), None),
            };
            let Some(arg) = list.get(&option) else {
                // A script other than Megatron-LM's GPT trainer adds arguments of its own
                // (`extra_args_provider`): say so rather than suggest a look-alike.
                let custom = script
                    .map(|at| words[at].as_str())
                    .filter(|s| s.rsplit('/').next() != Some("pretrain_gpt.py"));
                if let (Some(custom), false) = (custom, i < script.unwrap_or(0)) {
                    return Err(ConfigError::InvalidValue {
                        key: option.clone(),
                        message: format!(
                            "not a Megatron-LM argument: `{custom}` is not Megatron-LM's \
                             pretrain_gpt.py and adds arguments of its own, which the cost \
                             model cannot read (it prices decoder-only models as pretrain_gpt.py \
                             trains them); give the model and the settings as fields instead"
                        ),
                    });
                }
                // Megatron-LM's parser has allow_abbrev=False: no prefix matching.
                return Err(ConfigError::UnknownKey {
                    key: option.clone(),
                    suggestion: list.closest(&option),
                });
            };
            let value = match arg.action.as_str() {
                "store_true" | "store_false" | "boolean_optional" => {
                    if let Some(v) = inline {
                        return Err(ConfigError::InvalidValue {
                            key: option,
                            message: format!("takes no value (got `={v}`)"),
                        });
                    }
                    let on = match arg.action.as_str() {
                        "store_true" => true,
                        "store_false" => false,
                        _ => !option.starts_with("--no-"),
                    };
                    ArgValue::Switch(on)
                }
                _ => {
                    let mut values: Vec<String> = inline.into_iter().collect();
                    let (min, max) = match arg.nargs.as_ref() {
                        None => (1, 1),
                        Some(Value::String(s)) if s == "+" => (1, usize::MAX),
                        Some(Value::String(s)) if s == "*" => (0, usize::MAX),
                        Some(Value::String(s)) if s == "?" => (0, 1),
                        Some(n) => {
                            let n = n.as_u64().unwrap_or(1) as usize;
                            (n, n)
                        }
                    };
                    while values.len() < max
                        && i < words.len()
                        && !looks_like_option(&words[i])
                        && !is_shell_operator(&words[i])
                    {
                        values.push(words[i].clone());
                        i += 1;
                    }
                    if values.len() < min {
                        return Err(ConfigError::InvalidValue {
                            key: option,
                            message: if min == 1 {
                                "expected a value".to_string()
                            } else {
                                format!("expected {min} values, got {}", values.len())
                            },
                        });
                    }
                    check_values(arg, &option, &values)?;
                    if arg.nargs.is_none() && values.len() == 1 {
                        ArgValue::One(values.remove(0))
                    } else {
                        ArgValue::Many(values)
                    }
                }
            };
            self.given.retain(|g| g.dest != arg.dest);
            self.given.push(Given {
                option,
                dest: arg.dest.clone(),
                value,
            });
        }
        Ok(())
    }

    fn get(&self, dest: &str) -> Option<&Given> {
        self.given.iter().find(|g| g.dest == dest)
    }

    fn switch(&self, dest: &str) -> bool {
        matches!(
            self.get(dest).map(|g| &g.value),
            Some(ArgValue::Switch(true))
        )
    }

    fn finish(mut self, model: Option<&ModelSpec>) -> Result<TrainingConfig, ConfigError> {
        let given = self.given.clone();
        for g in &given {
            if matches!(
                g.dest.as_str(),
                "hybrid_layer_pattern" | "hybrid_override_pattern"
            ) {
                check_hybrid_pattern(&g.option, g.value.first().unwrap_or_default())?;
            }
        }
        let mut arch_given = Vec::new();
        for g in &given {
            match megatron_use(&g.dest) {
                MegatronUse::Modelled => {}
                MegatronUse::Architecture => arch_given.push(g.clone()),
                MegatronUse::UnsupportedArchitecture => arch_given.push(g.clone()),
                MegatronUse::Rejected => {
                    let message = REJECTED
                        .iter()
                        .find(|(d, _)| *d == g.dest)
                        .map(|(_, m)| *m)
                        .unwrap_or("Megatron-LM refuses it");
                    return Err(ConfigError::InvalidValue {
                        key: g.option.clone(),
                        message: message.to_string(),
                    });
                }
                MegatronUse::Unused => self.ignored.push(ignore(&g.option, UNUSED_REASON)),
            }
        }
        self.apply_modelled(&given)?;
        match model {
            Some(spec) => {
                for g in &arch_given {
                    self.ignored.push(ignore(
                        &g.option,
                        "architecture flag: the model named separately is used instead",
                    ));
                }
                self.flat.insert(
                    "model".into(),
                    serde_json::to_value(spec).map_err(|e| ConfigError::Parse(e.to_string()))?,
                );
            }
            None => self.build_architecture(&arch_given)?,
        }
        if let Some(nproc) = self.launcher_nproc {
            let gpus = nproc.saturating_mul(self.launcher_nnodes.unwrap_or(1));
            self.flat.insert("num_gpus".into(), Value::from(gpus));
        }
        let mut cfg: TrainingConfig = serde_json::from_value(Value::Object(self.flat.clone()))
            .map_err(|e| describe_serde_error(&self.flat, e))?;
        cfg.ignored_settings.extend(self.ignored);
        cfg.assumed_defaults.extend(self.assumed);
        Ok(cfg)
    }

    fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.flat.insert(key.to_string(), value.into());
    }

    /// `--tokenizer-type`'s name, vocabulary and source when it is a fixed tokenizer.
    fn fixed_tokenizer_vocab(&self) -> Result<Option<(String, u64, String)>, ConfigError> {
        let Some(name) = self.get("tokenizer_type").and_then(|g| g.value.first()) else {
            return Ok(None);
        };
        Ok(fixed_tokenizer(name)?.map(|t| (name.to_string(), t.vocab_size, t.source.clone())))
    }

    fn assume(&mut self, key: &str, value: impl Into<Value>, why: &str) {
        self.assumed.push(AssumedDefault {
            key: key.to_string(),
            value: value.into(),
            why: why.to_string(),
        });
    }

    fn apply_modelled(&mut self, given: &[Given]) -> Result<(), ConfigError> {
        for g in given {
            if megatron_use(&g.dest) != MegatronUse::Modelled {
                continue;
            }
            if g.value.first().is_some_and(is_shell_variable) {
                self.ignored.push(ignore(
                    &g.option,
                    "value is an unexpanded shell variable; expand it to model this setting",
                ));
                continue;
            }
            let scalar = |g: &Given| g.value.first().map(scalar_value).unwrap_or(Value::Null);
            let list = |g: &Given| match &g.value {
                ArgValue::Many(v) => Value::Array(v.iter().cloned().map(Value::String).collect()),
                ArgValue::One(s) => Value::Array(vec![Value::String(s.clone())]),
                ArgValue::Switch(_) => Value::Array(Vec::new()),
            };
            let switch = |g: &Given| matches!(g.value, ArgValue::Switch(true));
            match g.dest.as_str() {
                "num_virtual_stages_per_pipeline_rank" => {
                    self.set("virtual_pipeline_model_parallel_size", scalar(g))
                }
                "num_layers_per_virtual_pipeline_stage" => self.vpp_from_layers(g)?,
                "decoder_first_pipeline_num_layers" => {
                    self.set("num_layers_in_first_pipeline_stage", scalar(g))
                }
                "decoder_last_pipeline_num_layers" => {
                    self.set("num_layers_in_last_pipeline_stage", scalar(g))
                }
                "cp_comm_type" => {
                    let types = match &g.value {
                        ArgValue::Many(v) => v.clone(),
                        other => other
                            .first()
                            .map(|s| vec![s.to_string()])
                            .unwrap_or_default(),
                    };
                    match types.first() {
                        Some(first) if types.iter().all(|t| t == first) => {
                            self.set("cp_comm_type", first.clone())
                        }
                        _ => self.ignored.push(ignore(
                            &g.option,
                            "per-layer CP communication types; the cost model takes one type for all layers",
                        )),
                    }
                }
                "recompute_modules" | "offload_modules" => self.set(&g.dest, list(g)),
                "hierarchical_context_parallel_sizes" => {
                    let sizes: Vec<Value> = match &g.value {
                        ArgValue::Many(v) => v.iter().map(|s| scalar_value(s)).collect(),
                        ArgValue::One(s) => vec![scalar_value(s)],
                        ArgValue::Switch(_) => Vec::new(),
                    };
                    self.set(&g.dest, Value::Array(sizes))
                }
                "cuda_graph_modules" | "cuda_graph_scope_deprecated" => {
                    // `full` (whole layers) is dropped where the field is read, as any spelling.
                    let scopes = match list(g) {
                        Value::Array(v) => v,
                        _ => Vec::new(),
                    };
                    self.set("cuda_graph_scope", Value::Array(scopes));
                }
                "enable_cuda_graph" if switch(g) => self.set("cuda_graph_impl", "local"),
                "external_cuda_graph" if switch(g) => {
                    self.set("cuda_graph_impl", "transformer_engine")
                }
                "moe_enable_deepep" if switch(g) => {
                    self.set("moe_token_dispatcher_type", "flex");
                    self.set("moe_flex_dispatcher_backend", "deepep");
                }
                "accumulate_allreduce_grads_in_fp32" if switch(g) => {
                    self.set("grad_reduce_in_fp32", true)
                }
                "grad_reduce_in_bf16" if switch(g) => self.set("grad_reduce_in_fp32", false),
                "recompute_activations"
                | "moe_layer_recompute"
                | "fp8"
                | "fp8_recipe"
                | "fp4"
                | "fp4_recipe"
                | "bf16"
                | "fp16"
                | "fine_grained_activation_offloading" => {
                    // Combined below.
                }
                "enable_cuda_graph"
                | "external_cuda_graph"
                | "moe_enable_deepep"
                | "accumulate_allreduce_grads_in_fp32"
                | "grad_reduce_in_bf16" => {}
                dest => match &g.value {
                    ArgValue::Switch(on) => self.set(dest, *on),
                    _ => self.set(dest, scalar(g)),
                },
            }
        }
        self.apply_recompute()?;
        self.apply_precision();
        self.apply_offloading();
        self.apply_expert_tensor_parallel();
        Ok(())
    }

    /// Megatron-LM: VPP = (layers / PP) / layers-per-virtual-stage, where the embedding
    /// and loss count as layers when `--account-for-*-in-pipeline-split` is set.
    fn vpp_from_layers(&mut self, g: &Given) -> Result<(), ConfigError> {
        let per_stage = parse_u64(&g.option, g.value.first())?;
        let layers = self
            .get("num_layers")
            .or_else(|| self.get("decoder_num_layers"))
            .map(|l| parse_u64(&l.option, l.value.first()))
            .transpose()?;
        let Some(mut layers) = layers else {
            return Err(ConfigError::InvalidValue {
                key: g.option.clone(),
                message: "converting layers per virtual stage to a VPP degree needs --num-layers; \
                          add it or give --num-virtual-stages-per-pipeline-rank"
                    .into(),
            });
        };
        layers += u64::from(self.switch("account_for_embedding_in_pipeline_split"));
        layers += u64::from(self.switch("account_for_loss_in_pipeline_split"));
        let pp = match self.get("pipeline_model_parallel_size") {
            Some(p) => parse_u64(&p.option, p.value.first())?,
            None => 1,
        };
        if pp == 0 || per_stage == 0 || layers % pp != 0 || (layers / pp) % per_stage != 0 {
            return Err(ConfigError::InvalidValue {
                key: g.option.clone(),
                message: format!(
                    "{layers} layers over {pp} pipeline stages do not split into virtual stages of {per_stage} layers (Megatron-LM requires both divisions to be exact)"
                ),
            });
        }
        self.set(
            "virtual_pipeline_model_parallel_size",
            (layers / pp) / per_stage,
        );
        Ok(())
    }

    /// `--recompute-activations` is selective recompute (Megatron-LM's validate_args);
    /// `--moe-layer-recompute` adds `moe` to the selective modules (TransformerConfig), whose
    /// default list is `[core_attn]`.
    fn apply_recompute(&mut self) -> Result<(), ConfigError> {
        let activations = self.switch("recompute_activations");
        let moe_layer = self.switch("moe_layer_recompute");
        if !activations && !moe_layer {
            return Ok(());
        }
        if self
            .flat
            .get("recompute_granularity")
            .and_then(Value::as_str)
            == Some("full")
        {
            let option = if moe_layer {
                "--moe-layer-recompute"
            } else {
                "--recompute-activations"
            };
            if moe_layer {
                return Err(ConfigError::InvalidValue {
                    key: option.into(),
                    message: "Megatron-LM refuses it with --recompute-granularity full".into(),
                });
            }
        }
        self.set("recompute_granularity", "selective");
        let mut modules: Vec<Value> = match self.flat.get("recompute_modules") {
            Some(Value::Array(v)) => v.clone(),
            _ => {
                self.assume(
                    "recompute_modules",
                    Value::from(vec!["core_attn"]),
                    "Megatron-LM's default selective-recompute module list",
                );
                vec![Value::from("core_attn")]
            }
        };
        if moe_layer && !modules.iter().any(|m| m.as_str() == Some("moe")) {
            modules.push(Value::from("moe"));
        }
        self.set("recompute_modules", Value::Array(modules));
        Ok(())
    }

    /// FP8 is on only with `--fp8-format`; its recipe defaults to `delayed`. FP4 likewise
    /// with `--fp4-format` (recipe `nvfp4`).
    fn apply_precision(&mut self) {
        let recipe = |r: &Reader, dest: &str| {
            r.get(dest)
                .and_then(|g| g.value.first())
                .map(str::to_string)
        };
        let fp8 = self.get("fp8").is_some();
        let fp4 = self.get("fp4").is_some();
        let fp8_recipe = recipe(self, "fp8_recipe");
        let fp4_recipe = recipe(self, "fp4_recipe");
        if fp4 {
            self.set("precision", "nvfp4");
            if fp4_recipe.is_none() {
                self.assume(
                    "fp4_recipe",
                    "nvfp4",
                    "Megatron-LM's default FP4 recipe when --fp4-format is given",
                );
            }
        } else if fp8 {
            let name = fp8_recipe.clone().unwrap_or_else(|| {
                self.assume(
                    "fp8_recipe",
                    "delayed",
                    "Megatron-LM's default FP8 recipe when --fp8-format is given",
                );
                "delayed".to_string()
            });
            let precision = match name.as_str() {
                "tensorwise" => "fp8-tensorwise",
                "blockwise" => "fp8-blockwise",
                "mxfp8" => "mxfp8",
                "delayed" => "fp8-delayed",
                other => other,
            };
            self.set("precision", precision);
        } else if self.switch("bf16") || self.switch("fp16") {
            self.set("precision", "bf16");
        } else if self.script_seen {
            self.assume(
                "precision",
                "bf16",
                "the command line sets none of --bf16, --fp16, --fp8-format, --fp4-format \
                 (Megatron-LM would train in fp32, which the cost model does not model)",
            );
        }
        if self.switch("fp16") && !fp8 && !fp4 {
            self.ignored.push(ignore(
                "--fp16",
                "FP16 is modelled as BF16 (same element size; loss scaling is not modelled)",
            ));
        }
        if !fp8 {
            if let Some(g) = self.get("fp8_recipe").cloned() {
                self.ignored.push(ignore(
                    g.option,
                    "has no effect without --fp8-format (Megatron-LM enables FP8 only with it)",
                ));
            }
        }
        if !fp4 {
            if let Some(g) = self.get("fp4_recipe").cloned() {
                self.ignored.push(ignore(
                    g.option,
                    "has no effect without --fp4-format (Megatron-LM enables FP4 only with it)",
                ));
            }
        }
    }

    /// `--offload-modules` acts only with `--fine-grained-activation-offloading`.
    fn apply_offloading(&mut self) {
        if self.switch("fine_grained_activation_offloading")
            && !self.flat.contains_key("offload_modules")
        {
            self.ignored.push(ignore(
                "--fine-grained-activation-offloading",
                "offloads nothing without --offload-modules",
            ));
        }
        if self.flat.contains_key("offload_modules")
            && !self.switch("fine_grained_activation_offloading")
        {
            self.flat.remove("offload_modules");
            if let Some(g) = self.get("offload_modules").cloned() {
                self.ignored.push(ignore(
                    g.option,
                    "has no effect without --fine-grained-activation-offloading",
                ));
            }
        }
    }

    /// Megatron-LM sets ETP to TP when `--expert-tensor-parallel-size` is absent.
    fn apply_expert_tensor_parallel(&mut self) {
        // Only when the line sets TP: otherwise both are 1, the cost model's own default.
        if self.flat.contains_key("expert_tensor_parallel_size") {
            return;
        }
        let Some(tp) = self.flat.get("tensor_model_parallel_size").cloned() else {
            return;
        };
        self.assume(
            "expert_tensor_parallel_size",
            tp.clone(),
            "Megatron-LM sets ETP to TP when --expert-tensor-parallel-size is absent",
        );
        self.flat.insert("expert_tensor_parallel_size".into(), tp);
    }

    /// Build the HuggingFace-style config from the architecture flags (when the line has
    /// the three that define a transformer); otherwise list them as unused.
    fn build_architecture(&mut self, arch: &[Given]) -> Result<(), ConfigError> {
        if arch.is_empty() {
            return Ok(());
        }
        let core = ["hidden_size", "num_attention_heads"];
        let has_layers =
            self.get("num_layers").is_some() || self.get("decoder_num_layers").is_some();
        let missing: Vec<String> = core
            .iter()
            .filter(|d| self.get(d).is_none())
            .map(|d| format!("--{}", d.replace('_', "-")))
            .chain((!has_layers).then(|| "--num-layers".to_string()))
            .collect();
        if !missing.is_empty() {
            for g in arch {
                self.ignored.push(ignore(
                    &g.option,
                    format!(
                        "architecture flag; the line lacks {} to build a model, so a model card or config.json must be named",
                        missing.join(", ")
                    ),
                ));
            }
            return Ok(());
        }
        if let Some(g) = arch
            .iter()
            .find(|g| megatron_use(&g.dest) == MegatronUse::UnsupportedArchitecture)
        {
            return Err(ConfigError::InvalidValue {
                key: g.option.clone(),
                message:
                    "the architecture cannot be built from Megatron-LM flags with this option; \
                          name a model card or give the model's config.json as `model`"
                        .into(),
            });
        }
        if let Some((repo, name)) = self.tokenizer_named_model() {
            // Without the vocabulary the flags do not define the model; the HuggingFace
            // tokenizer names it (`Qwen/Qwen3-30B-A3B`), as the card of that name.
            for g in arch {
                self.ignored.push(ignore(
                    &g.option,
                    format!(
                        "architecture flag: the vocabulary size is unknown (--tokenizer-model {repo} \
                         holds it in tokenizer files this reader does not open), so the model \
                         card named after the tokenizer, `{name}`, is used; add --vocab-size N \
                         to use the line's architecture instead"
                    ),
                ));
            }
            self.flat.insert("model".into(), Value::String(name));
            return Ok(());
        }
        let hf = self.hf_config()?;
        self.flat.insert("model".into(), hf);
        Ok(())
    }

    /// With no vocabulary size on the line, the HuggingFace repository of
    /// `--tokenizer-model` (`org/name`) and its model name; `None` otherwise.
    fn tokenizer_named_model(&self) -> Option<(String, String)> {
        if self.get("padded_vocab_size").is_some() || self.get("vocab_size").is_some() {
            return None;
        }
        let repo = self
            .get("tokenizer_model")?
            .value
            .first()?
            .trim()
            .to_string();
        let (org, name) = repo.split_once('/')?;
        let plain = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        (plain(org) && plain(name)).then(|| (repo.clone(), name.to_string()))
    }

    fn u64_of(&self, dest: &str) -> Result<Option<u64>, ConfigError> {
        match self.get(dest) {
            Some(g) => parse_u64(&g.option, g.value.first()).map(Some),
            None => Ok(None),
        }
    }

    /// The HuggingFace `config.json` keys [`crate::model::Architecture::from_hf_config`]
    /// reads, filled from Megatron-LM flags and Megatron-LM's defaults for absent ones.
    fn hf_config(&mut self) -> Result<Value, ConfigError> {
        let mut hf = Map::new();
        let layers = match self.u64_of("num_layers")? {
            Some(l) => l,
            None => self.u64_of("decoder_num_layers")?.unwrap_or(0),
        };
        let hidden = self.u64_of("hidden_size")?.unwrap_or(0);
        let heads = self.u64_of("num_attention_heads")?.unwrap_or(0);
        hf.insert("model_type".into(), "megatron-lm".into());
        hf.insert("_name_or_path".into(), "Megatron-LM command line".into());
        hf.insert("num_hidden_layers".into(), layers.into());
        hf.insert("hidden_size".into(), hidden.into());
        hf.insert("num_attention_heads".into(), heads.into());

        // Vocabulary: --padded-vocab-size is used as given; --vocab-size is padded to a
        // multiple of make_vocab_size_divisible_by × TP (megatron/training/vocab_utils.py).
        let vocab = match (
            self.u64_of("padded_vocab_size")?,
            self.u64_of("vocab_size")?,
        ) {
            (Some(v), _) => v,
            (None, given) => {
                // The size before padding: --vocab-size, else a fixed tokenizer's vocabulary.
                let (raw, why) = match (given, self.fixed_tokenizer_vocab()?) {
                    (Some(v), _) => (v, "--vocab-size".to_string()),
                    (None, Some((name, v, source))) => (
                        v,
                        format!("--tokenizer-type {name} has {v} tokens ({source}), which"),
                    ),
                    (None, None) => {
                        let tokenizer = self
                            .get("tokenizer_type")
                            .and_then(|g| g.value.first())
                            .map(|t| format!(" (--tokenizer-type {t} reads it from tokenizer files this reader does not open)"))
                            .unwrap_or_default();
                        return Err(ConfigError::InvalidValue {
                            key: "--vocab-size".into(),
                            message: format!(
                                "the vocabulary size is unknown{tokenizer}; add --vocab-size N or --padded-vocab-size N, or name a model card"
                            ),
                        });
                    }
                };
                let divisible = self.u64_of("make_vocab_size_divisible_by")?.unwrap_or(128);
                let tp = self
                    .flat
                    .get("tensor_model_parallel_size")
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                let multiple = divisible.saturating_mul(tp).max(1);
                let padded = raw.div_ceil(multiple).saturating_mul(multiple);
                // A size the line gave and padding left alone needs no note.
                if padded != raw || given.is_none() {
                    self.assume(
                        "padded_vocab_size",
                        padded,
                        &format!(
                            "Megatron-LM pads {why} to a multiple of --make-vocab-size-divisible-by (128 by default) times TP"
                        ),
                    );
                }
                padded
            }
        };
        hf.insert("vocab_size".into(), vocab.into());
        hf.insert(
            "tie_word_embeddings".into(),
            (!self.switch("untie_embeddings_and_output_weights")).into(),
        );

        // Attention heads: query groups count only with --group-query-attention.
        if self.switch("group_query_attention") {
            let groups = match self.u64_of("num_query_groups")? {
                Some(g) => g,
                None => {
                    self.assume(
                        "num_query_groups",
                        1,
                        "Megatron-LM's default with --group-query-attention",
                    );
                    1
                }
            };
            hf.insert("num_key_value_heads".into(), groups.into());
        } else {
            if let Some(g) = self.get("num_query_groups").cloned() {
                self.ignored.push(ignore(
                    g.option,
                    "has no effect without --group-query-attention (Megatron-LM uses one KV head per query head)",
                ));
            }
            hf.insert("num_key_value_heads".into(), heads.into());
        }
        if let Some(kv) = self.u64_of("kv_channels")? {
            hf.insert("head_dim".into(), kv.into());
        }
        if self.switch("attention_output_gate") {
            hf.insert("attn_output_gate".into(), true.into());
        }

        // MLP: Megatron-LM's default FFN width is 4h, or int(8h/3 / 64)·64 with SwiGLU.
        let gated = self.switch("swiglu") || self.switch("quick_geglu");
        let ffn = match self.u64_of("ffn_hidden_size")? {
            Some(f) => f,
            None => {
                let f = if gated {
                    hidden.saturating_mul(8) / 3 / 64 * 64
                } else {
                    hidden.saturating_mul(4)
                };
                self.assume(
                    "ffn_hidden_size",
                    f,
                    "Megatron-LM's default: 4 × hidden, or ⌊8·hidden/3/64⌋·64 with --swiglu",
                );
                f
            }
        };
        hf.insert("intermediate_size".into(), ffn.into());
        let act = if gated {
            "silu"
        } else if self.switch("squared_relu") {
            "relu"
        } else {
            "gelu"
        };
        hf.insert("hidden_act".into(), act.into());
        if let Some(g) = self.get("activation_func_clamp_value").cloned() {
            hf.insert(
                "swiglu_limit".into(),
                scalar_value(g.value.first().unwrap_or_default()),
            );
        }

        // MLA.
        if self.switch("multi_latent_attention") {
            if let Some(q) = self.u64_of("q_lora_rank")? {
                hf.insert("q_lora_rank".into(), q.into());
            }
            for (dest, key, default) in [
                ("kv_lora_rank", "kv_lora_rank", 32),
                ("qk_head_dim", "qk_nope_head_dim", 128),
                ("qk_pos_emb_head_dim", "qk_rope_head_dim", 64),
                ("v_head_dim", "v_head_dim", 128),
            ] {
                let value = match self.u64_of(dest)? {
                    Some(v) => v,
                    None => {
                        self.assume(
                            dest,
                            default,
                            "Megatron-LM's default with --multi-latent-attention",
                        );
                        default
                    }
                };
                hf.insert(key.into(), value.into());
            }
        } else {
            for dest in [
                "q_lora_rank",
                "kv_lora_rank",
                "qk_head_dim",
                "qk_pos_emb_head_dim",
                "v_head_dim",
            ] {
                if let Some(g) = self.get(dest).cloned() {
                    self.ignored.push(ignore(
                        g.option,
                        "has no effect without --multi-latent-attention",
                    ));
                }
            }
        }

        // MoE.
        let experts = self.u64_of("num_experts")?.unwrap_or(0);
        if experts > 1 {
            hf.insert("num_experts".into(), experts.into());
            let topk = match self.u64_of("moe_router_topk")? {
                Some(k) => k,
                None => {
                    self.assume("moe_router_topk", 2, "Megatron-LM's default router top-k");
                    2
                }
            };
            hf.insert("num_experts_per_tok".into(), topk.into());
            let expert_ffn = match self.u64_of("moe_ffn_hidden_size")? {
                Some(f) => f,
                None => {
                    self.assume(
                        "moe_ffn_hidden_size",
                        ffn,
                        "Megatron-LM uses --ffn-hidden-size for experts when --moe-ffn-hidden-size is absent",
                    );
                    ffn
                }
            };
            hf.insert("moe_intermediate_size".into(), expert_ffn.into());
            // Linear layers, the experts' included, carry biases unless --disable-bias-linear
            // (TransformerConfig.add_bias_linear defaults to true); Megatron-Core then adds the
            // experts' second bias per local expert in FP32, which the time model prices.
            let biased = !matches!(
                self.get("add_bias_linear").map(|g| &g.value),
                Some(ArgValue::Switch(false))
            );
            if biased {
                self.assume(
                    "add_bias_linear",
                    true,
                    "Megatron-LM's default: the experts' linear layers carry biases (--disable-bias-linear turns them off)",
                );
            }
            hf.insert("mlp_bias".into(), biased.into());
            if let Some(shared) = self.u64_of("moe_shared_expert_intermediate_size")? {
                hf.insert("shared_expert_intermediate_size".into(), shared.into());
            }
            let dense = self.leading_dense_layers(layers)?;
            hf.insert("first_k_dense_replace".into(), dense.into());
            // Group-limited routing, under the HF names the architecture reader takes.
            for (dest, hf_key) in [
                ("moe_router_num_groups", "n_group"),
                ("moe_router_group_topk", "topk_group"),
            ] {
                if let Some(v) = self.u64_of(dest)? {
                    hf.insert(hf_key.into(), v.into());
                }
            }
        } else {
            for dest in [
                "moe_router_topk",
                "moe_ffn_hidden_size",
                "moe_shared_expert_intermediate_size",
                "moe_layer_freq",
                "moe_router_num_groups",
                "moe_router_group_topk",
            ] {
                if let Some(g) = self.get(dest).cloned() {
                    self.ignored
                        .push(ignore(g.option, "has no effect without --num-experts"));
                }
            }
        }
        if let Some(mtp) = self.u64_of("mtp_num_layers")? {
            hf.insert("num_nextn_predict_layers".into(), mtp.into());
        }
        if let Some(g) = self.get("max_position_embeddings").cloned() {
            hf.insert(
                "max_position_embeddings".into(),
                scalar_value(g.value.first().unwrap_or_default()),
            );
            self.ignored.push(ignore(
                g.option,
                "sizes the position-embedding table only; the cost model does not count position embeddings",
            ));
        }
        // Used above (a fixed tokenizer's vocabulary) only when no size is given.
        let sized = self.get("padded_vocab_size").is_some() || self.get("vocab_size").is_some();
        if let Some(g) = self.get("tokenizer_type").cloned() {
            if sized || self.fixed_tokenizer_vocab()?.is_none() {
                self.ignored.push(ignore(
                    g.option,
                    "the vocabulary size comes from --vocab-size/--padded-vocab-size",
                ));
            }
        }
        let config = Value::Object(hf);
        crate::model::Architecture::from_hf_config(&config).map_err(|e| {
            ConfigError::InvalidValue {
                key: "model".into(),
                message: format!("the architecture from the Megatron-LM flags is invalid: {e}"),
            }
        })?;
        Ok(config)
    }

    /// `--moe-layer-freq`: N means layer i is MoE when i % N == 0; a list pattern gives one
    /// 0/1 per layer. The cost model represents leading dense layers followed by MoE layers.
    fn leading_dense_layers(&self, layers: u64) -> Result<u64, ConfigError> {
        let Some(g) = self.get("moe_layer_freq") else {
            return Ok(0);
        };
        let text = g.value.first().unwrap_or_default();
        let pattern: Vec<u64> = if text.contains('[') {
            let p = eval_layer_pattern(text).map_err(|message| ConfigError::InvalidValue {
                key: g.option.clone(),
                message,
            })?;
            if p.len() as u64 != layers {
                return Err(ConfigError::InvalidValue {
                    key: g.option.clone(),
                    message: format!(
                        "the pattern has {} entries but the model has {layers} layers",
                        p.len()
                    ),
                });
            }
            p
        } else {
            let n = parse_u64(&g.option, Some(text))?;
            if n == 0 {
                return Err(ConfigError::InvalidValue {
                    key: g.option.clone(),
                    message: "must be positive".into(),
                });
            }
            (0..layers).map(|i| u64::from(i % n == 0)).collect()
        };
        let dense = pattern.iter().take_while(|&&x| x == 0).count();
        if pattern[dense..].iter().any(|&x| x != 1) {
            return Err(ConfigError::InvalidValue {
                key: g.option.clone(),
                message: "dense layers between MoE layers are not modelled (only leading dense layers followed by MoE layers); name a model card instead".into(),
            });
        }
        Ok(dense as u64)
    }
}

fn parse_u64(option: &str, value: Option<&str>) -> Result<u64, ConfigError> {
    value
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| ConfigError::InvalidValue {
            key: option.to_string(),
            message: format!(
                "expected a non-negative integer, got `{}`",
                value.unwrap_or("")
            ),
        })
}

/// argparse's checks on a flag's values: `int`/`float` types and literal choices.
fn check_values(
    arg: &MegatronArgument,
    option: &str,
    values: &[String],
) -> Result<(), ConfigError> {
    for v in values {
        if is_shell_variable(v) {
            continue;
        }
        let ok = match arg.value_type.as_deref() {
            Some("int") => v.parse::<i64>().is_ok(),
            Some("float") => v.parse::<f64>().is_ok(),
            _ => true,
        };
        if !ok {
            return Err(ConfigError::InvalidValue {
                key: option.to_string(),
                message: format!(
                    "`{v}` is not {}",
                    if arg.value_type.as_deref() == Some("int") {
                        "an integer"
                    } else {
                        "a number"
                    }
                ),
            });
        }
        if let Some(Value::Array(choices)) = &arg.choices {
            let matches = choices.iter().any(|c| match c {
                Value::String(s) => s == v,
                Value::Number(n) => v.parse::<f64>().ok() == n.as_f64(),
                other => other.as_str() == Some(v.as_str()),
            });
            if !matches {
                let names: Vec<String> = choices
                    .iter()
                    .map(|c| {
                        c.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| c.to_string())
                    })
                    .collect();
                let closest = names
                    .iter()
                    .map(|n| (strsim::jaro_winkler(v, n), n))
                    .filter(|(s, _)| *s > 0.75)
                    .max_by(|a, b| a.0.total_cmp(&b.0))
                    .map(|(_, n)| format!("; did you mean `{n}`?"))
                    .unwrap_or_default();
                return Err(ConfigError::InvalidValue {
                    key: option.to_string(),
                    message: format!("`{v}` is not one of {}{closest}", names.join(", ")),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_list_is_megatron_lm_with_allow_abbrev_off() {
        let list = megatron_arguments().unwrap();
        assert_eq!(list.commit.len(), 40);
        assert!(!list.allow_abbrev);
        assert!(list.arguments.len() > 500);
        let nl = list.get("--no-persist-layer-norm").unwrap();
        assert_eq!(nl.action, "store_true");
        for dest in mapped_dests() {
            assert!(
                list.arguments.iter().any(|a| a.dest == dest),
                "`{dest}` is mapped but not a Megatron-LM argument"
            );
        }
    }
}
