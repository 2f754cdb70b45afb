//! Readers of the formats users hold, one file per format, each producing the same
//! [`TrainingConfig`](crate::model::TrainingConfig) with the settings it did not use listed in
//! its `ignored_settings`:
//! - `overrides`: flat YAML/JSON and Megatron-Bridge override files;
//! - `megatron_args`: Megatron-LM command lines (`shell` splits them as a shell would);
//! - `launch_script`: whole launch scripts: Megatron-LM flags, Hydra overrides, environment;
//! - `shell_script`: bash evaluated far enough to find a script's training command
//!   (variables, arrays, `if` blocks, `bash -c` strings);
//! - `megatron_recipe`: Megatron-LM's YAML run files (MoE recipes, functional-test configs);
//! - `megatron_scripts`: what a command line leaves to Megatron-LM's files (the kind of model
//!   its training script trains, the vocabulary of fixed tokenizers);
//! - `bridge_launcher`: options of Megatron-Bridge's launcher scripts (`setup_experiment.py`);
//! - `python_recipe`: Megatron-Bridge recipe and performance-config Python files;
//! - `bridge_recipe_name`: what Bridge's recipe names state (model, GPUs, GPU, precision);
//! - `python_fragment`: the lines of a recipe a diff hunk shows;
//! - `diff`: the settings a unified diff changes, in any of the formats above;
//! - `megatron_log`: Megatron-LM / Bridge training logs (argument dump, iterations, memory, OOM);
//! - `argument_dump`: a Megatron-LM argument namespace (`vars(args)`): a log's dump, or the same
//!   as YAML/JSON (a wandb run's `config.yaml`, whose wrapping it also removes for Bridge runs);
//! - `source`: a configuration as fields or as a file's text, its format told by content;
//! - `environment`: the environment variables a launch sets that the cost model reads
//!   (Transformer Engine's attention switches);
//! - `yaml_document`: a YAML/JSON document with its merge keys applied, as every reader of a
//!   whole file takes it.

pub mod argument_dump;
pub mod bridge_launcher;
pub mod bridge_recipe_name;
pub mod diff;
pub mod diff_apply;
pub mod environment;
pub mod launch_script;
pub mod layer_pattern;
pub mod megatron_args;
pub mod megatron_log;
pub mod megatron_recipe;
pub mod megatron_scripts;
pub mod overrides;
pub mod python_fragment;
pub mod python_recipe;
pub mod shell;
pub mod shell_script;
pub mod source;
pub mod yaml_document;

pub use launch_script::read_launch_script;
pub use megatron_args::parse_megatron_args;
pub use overrides::{read_value, read_yaml};
pub use source::{read_config_source, read_config_text, ConfigSource};
