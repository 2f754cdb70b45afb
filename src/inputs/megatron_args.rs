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
//!
//! This file holds the argument list and the reading of words into flags; `modelled.rs` applies
//! the flags that set configuration fields, `architecture.rs` builds the model from the
//! architecture flags.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::layer_pattern::eval_layer_pattern;
use super::megatron_scripts::{
    check_hybrid_pattern, check_trainer, fixed_tokenizer, script_tokenizer,
};
use super::shell::{scalar_value, shell_words};
use crate::model::config::{
    describe_serde_error, AssumedDefault, ConfigError, IgnoredSetting, ModelSpec, TrainingConfig,
};

mod architecture;
pub mod defaults;
mod modelled;

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
    "moe_shared_expert_overlap",
    "delay_wgrad_compute",
    "tp_comm_overlap",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "ddp_bucket_size",
    "ddp_num_buckets",
    "use_distributed_optimizer",
    "use_megatron_fsdp",
    "data_parallel_sharding_strategy",
    "num_distributed_optimizer_instances",
    "outer_dp_sharding_strategy",
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
    "fp4_param_gather",
    "fp4",
    "fp4_recipe",
    "bf16",
    "fp16",
    "attention_backend",
    "attention_dropout",
    "cuda_graph_impl",
    "cuda_graph_modules",
    "cuda_graph_scope_deprecated",
    "enable_cuda_graph",
    "external_cuda_graph",
    "fine_grained_activation_offloading",
    "offload_modules",
    "activation_offload_fraction",
    "cpu_offloading_num_layers",
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
    "experimental_attention_variant",
    "linear_attention_freq",
    "linear_conv_kernel_dim",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "hybrid_layer_pattern",
    "hybrid_override_pattern",
    "is_hybrid_model",
    "mamba_state_dim",
    "mamba_head_dim",
    "mamba_num_groups",
    "mamba_num_heads",
];

/// Architecture flags whose effect the reader cannot express in an [`Architecture`]
/// built from flags.
const UNSUPPORTED_ARCHITECTURE: &[&str] = &[
    "heterogeneous_layers_config_path",
    "heterogeneous_layers_config_encoded_json",
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
    read_command(text, model, false)
}

/// Read the complete argument list of a run (a Megatron-LM run file's map, which its launcher
/// passes to the training script as it stands, or a log's argument dump): flags it leaves out
/// take Megatron-LM's defaults, as on a command line that names its script.
pub fn parse_whole_megatron_arguments(
    text: &str,
    model: Option<&ModelSpec>,
) -> Result<TrainingConfig, ConfigError> {
    read_command(text, model, true)
}

fn read_command(
    text: &str,
    model: Option<&ModelSpec>,
    whole_command: bool,
) -> Result<TrainingConfig, ConfigError> {
    let list = megatron_arguments()?;
    let words = shell_words(text);
    let mut reader = Reader {
        whole_command,
        ..Reader::default()
    };
    reader.read_flags(list, &words)?;
    let mut config = reader.finish(model)?;
    crate::inputs::environment::take_attention_switches(&mut config);
    Ok(config)
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
    /// The line is a whole Megatron-LM command: it names its training script, or it is a run
    /// file's complete argument map. A flag it leaves out then runs at Megatron-LM's default.
    whole_command: bool,
    /// The training script the line names (`pretrain_gpt.py`), if it names one.
    script: Option<String>,
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
        self.whole_command |= script.is_some();
        self.script = script.and_then(|at| words.get(at)).cloned();
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
                    .push(ignore(word, crate::inputs::environment::UNREAD));
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
        let experts_possible = self.get("num_experts").is_some() || model.is_some();
        self.apply_megatron_defaults(experts_possible)?;
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

    /// `--tokenizer-type`'s name, vocabulary and source when it is a fixed tokenizer. Without
    /// the flag, a whole command line with a `--vocab-file` builds its training script's own
    /// default (`pretrain_gpt.py`'s GPT-2 BPE; a run file without a script is what
    /// Megatron-LM's functional tests pass to `pretrain_gpt.py`).
    fn fixed_tokenizer_vocab(&self) -> Result<Option<(String, u64, String)>, ConfigError> {
        if let Some(name) = self.get("tokenizer_type").and_then(|g| g.value.first()) {
            return Ok(
                fixed_tokenizer(name)?.map(|t| (name.to_string(), t.vocab_size, t.source.clone()))
            );
        }
        if !self.whole_command || self.get("vocab_file").is_none() {
            return Ok(None);
        }
        let script = self.script.as_deref().unwrap_or("pretrain_gpt.py");
        let Some(default) = script_tokenizer(script)? else {
            return Ok(None);
        };
        Ok(fixed_tokenizer(&default.tokenizer_type)?.map(|t| {
            (
                default.tokenizer_type.clone(),
                t.vocab_size,
                format!(
                    "{}; the training script's default, as the line gives no --tokenizer-type: {}",
                    t.source, default.source
                ),
            )
        }))
    }

    fn assume(&mut self, key: &str, value: impl Into<Value>, why: &str) {
        self.assumed.push(AssumedDefault {
            key: key.to_string(),
            value: value.into(),
            why: why.to_string(),
        });
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
