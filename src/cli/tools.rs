//! CLI subcommands for the cost-model tools. Each reads the same input the MCP tool takes,
//! from flags, `--config FILE` (YAML or JSON) or `--megatron-args`, and prints the tool's
//! output as text or, with `--json`, exactly the MCP tool's structured output.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::output::emit;
use super::pictures::PictureArgs;
use super::python_modules::CheckoutModules;
use super::{CliError, GlobalArgs};
use crate::inputs::megatron_args::parse_megatron_args_for_model;
use crate::inputs::megatron_log::{read_megatron_log, MegatronLog};
use crate::inputs::python_recipe::ModuleLoader;
use crate::inputs::source::read_config_text_for_model;
use crate::inputs::{read_value, ConfigSource};
use crate::model::config::{IgnoredSetting, ModelSpec};
use crate::model::TrainingConfig;
use crate::tools;
use crate::tools::common::InputNotes;

/// Where a training configuration comes from on the command line.
#[derive(Debug, Clone, Default, Args)]
pub struct ConfigArgs {
    /// A training configuration file in any format: YAML/JSON (Megatron field names, aliases,
    /// a Megatron-Bridge override file, Megatron-LM's `vars(args)` or a wandb run's config.yaml),
    /// a launch script or Megatron-LM argument list, a Megatron-Bridge Python recipe (with
    /// --recipe when it defines several), or a training log.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The recipe (function or constant name) to read from a Python --config file.
    #[arg(long, value_name = "NAME")]
    pub recipe: Option<String>,
    /// A Megatron-LM / Megatron-Bridge training log: its argument dump is the configuration
    /// (read first; the other flags override it), and `check` compares the prediction with the
    /// memory and step times it measured.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// A Megatron-LM argument list, e.g. "--tensor-model-parallel-size 2 --seq-length 131072".
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub megatron_args: Option<String>,
    /// Model card id, or a path to a HuggingFace config.json.
    #[arg(long)]
    pub model: Option<String>,
    /// Hardware card id (h100, h200, b200, b300, gb200, gb300).
    #[arg(long)]
    pub hardware: Option<String>,
    /// Total GPU count.
    #[arg(long)]
    pub num_gpus: Option<u32>,
    /// Sequence length in tokens, e.g. 131072.
    #[arg(long)]
    pub seq_length: Option<u64>,
    /// Precision (bf16, fp8-tensorwise, fp8-delayed, fp8-blockwise, mxfp8, nvfp4).
    #[arg(long)]
    pub precision: Option<String>,
    /// Any other field as key=value (repeatable), e.g. --set context_parallel_size=16.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Evaluate one configuration: fits, violations, memory breakdown, performance.
    ///
    /// Exit status: 0 when the configuration fits and has no violations, 1 when it does not
    /// fit or has violations (the answer is printed either way), 2 on an error.
    Check {
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        pictures: PictureArgs,
    },
    /// How large CP should be for a sequence length.
    SizeCp {
        #[command(flatten)]
        config: ConfigArgs,
        /// Fix TP.
        #[arg(long)]
        tp: Option<u32>,
    },
    /// The documented recipes nearest to a request.
    LookupRecipe {
        #[command(flatten)]
        config: ConfigArgs,
        /// How many recipes to return, nearest first.
        #[arg(long)]
        limit: Option<u32>,
    },
    /// The cheapest recompute setting that fits a memory budget.
    ChooseRecompute {
        #[command(flatten)]
        config: ConfigArgs,
        /// Memory budget per GPU in GiB (default and cap: the GPU's usable memory).
        #[arg(long)]
        memory_budget_gib: Option<f64>,
    },
    /// Search the layout space and rank what fits.
    PlanLayouts {
        #[command(flatten)]
        config: ConfigArgs,
        /// Global batch size in sequences (default: the configuration's, else the tool's).
        #[arg(long)]
        global_batch_size: Option<u32>,
        /// How many layouts to return, best first.
        #[arg(long)]
        top_k: Option<u32>,
        /// Constraints as JSON, e.g. '{"tp": 1, "max_pp": 8}'.
        #[arg(long)]
        constraints: Option<String>,
        #[command(flatten)]
        pictures: PictureArgs,
    },
    /// Why a change made a run OOM or slow: before/after files or before + a unified diff.
    TriageOom {
        /// The configuration before the change, in any format --config reads.
        #[arg(long, value_name = "FILE")]
        before: PathBuf,
        /// The configuration after the change, in any format --config reads.
        #[arg(long, value_name = "FILE", conflicts_with = "diff")]
        after: Option<PathBuf>,
        /// A unified diff (`git show`, `git diff`, `diff -u`) of launch scripts, override files
        /// or Python recipes ("-" for stdin).
        #[arg(long, value_name = "FILE")]
        diff: Option<PathBuf>,
        /// The recipe to read from Python files and to triage when the diff changes several.
        #[arg(long, value_name = "NAME")]
        recipe: Option<String>,
        /// Model card id or config.json path, when the files do not name it.
        #[arg(long)]
        model: Option<String>,
        /// Hardware card id, when the files do not name it.
        #[arg(long)]
        hardware: Option<String>,
        /// GPU count, when the files do not give it.
        #[arg(long)]
        num_gpus: Option<u32>,
        #[command(flatten)]
        pictures: PictureArgs,
    },
    /// The model cards with their key numbers.
    Models,
    /// The hardware cards with their key numbers.
    Hardware,
    /// Replay the calibration rows: measured vs predicted throughput and memory.
    Calibrate {
        /// Print the Markdown table (docs/validation.md).
        #[arg(long)]
        markdown: bool,
        /// Re-fit the time model's constants on the calibration rows and print them next to
        /// the cards' values (the cards are not changed).
        #[arg(long, conflicts_with = "markdown")]
        fit: bool,
        /// Calibrate to your own cluster instead: a Megatron-LM / Megatron-Bridge training log
        /// of one of its runs (repeatable; more runs identify more factors and give a
        /// leave-one-out check). Needs --hardware.
        #[arg(long = "log", value_name = "FILE", conflicts_with_all = ["markdown", "fit", "bands"])]
        logs: Vec<PathBuf>,
        /// With --log: the GPU the runs used (logs do not name it), a hardware card id.
        #[arg(long, requires = "logs")]
        hardware: Option<String>,
        /// With --log: model card id or config.json path, when the argument dumps lack the
        /// architecture.
        #[arg(long, requires = "logs")]
        model: Option<String>,
        /// With --log: a name for the cluster, shown in answers that use the calibration.
        #[arg(long, requires = "logs")]
        cluster: Option<String>,
        /// With --log: write the calibration card to FILE (use it with --calibration FILE).
        #[arg(long, value_name = "FILE", requires = "logs")]
        write: Option<PathBuf>,
        /// Print the error bands by regime (cards/time-uncertainty.yaml) from the residuals.
        #[arg(long, conflicts_with_all = ["markdown", "fit"])]
        bands: bool,
    },
}

impl ToolCommand {
    /// The MCP name of the tool a subcommand runs (for errors).
    pub fn tool_name(&self) -> &'static str {
        match self {
            ToolCommand::Check { .. } => "check_feasibility",
            ToolCommand::SizeCp { .. } => "size_cp",
            ToolCommand::LookupRecipe { .. } => "lookup_recipe",
            ToolCommand::ChooseRecompute { .. } => "choose_recompute",
            ToolCommand::PlanLayouts { .. } => "plan_layouts",
            ToolCommand::TriageOom { .. } => "triage_oom",
            ToolCommand::Models => "list_models",
            ToolCommand::Hardware => "list_hardware",
            ToolCommand::Calibrate { .. } => "calibrate",
        }
    }
}

fn read_file(path: &Path) -> Result<String, CliError> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| CliError::Input(format!("stdin: {e}")))?;
        return Ok(text);
    }
    std::fs::read_to_string(path).map_err(|e| CliError::Input(format!("{}: {e}", path.display())))
}

/// `model` is the model named beside the file (`--model`), which a Megatron-LM command line,
/// run file or log takes instead of building one from its architecture flags.
fn parse_config_file(
    path: &Path,
    recipe: Option<&str>,
    model: Option<&ModelSpec>,
) -> Result<TrainingConfig, CliError> {
    let text = read_file(path)?;
    // A Python recipe's imports are read from the checkout it sits in (not for stdin).
    let modules = (path != Path::new("-")).then(|| CheckoutModules::for_recipe(path));
    read_config_text_for_model(
        &text,
        recipe,
        modules.as_ref().map(|m| m as &dyn ModuleLoader),
        model,
    )
    .map_err(|e| CliError::Input(format!("{}: {e}", path.display())))
}

/// `--model`: a card id, or the path of a HuggingFace config.json.
fn model_spec(model: &str) -> Result<ModelSpec, CliError> {
    let path = Path::new(model);
    if path.is_file() {
        let text = read_file(path)?;
        let value = serde_json::from_str::<Value>(&text)
            .map_err(|e| CliError::Input(format!("{}: not a JSON config: {e}", path.display())))?;
        return Ok(ModelSpec::HfConfig(value));
    }
    Ok(ModelSpec::Id(model.to_string()))
}

/// A `--set` value: JSON/YAML scalars and lists, else a string.
fn parse_value(text: &str) -> Value {
    serde_yaml::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// The training configuration the flags describe (file, then Megatron args, then flags).
/// The log named by `--log`, read.
fn read_log(args: &ConfigArgs) -> Result<Option<MegatronLog>, CliError> {
    let Some(path) = &args.log else {
        return Ok(None);
    };
    let model = args.model.as_deref().map(model_spec).transpose()?;
    let text = read_file(path)?;
    read_megatron_log(&text, model.as_ref())
        .map(Some)
        .map_err(|e| CliError::Input(format!("{}: {e}", path.display())))
}

pub fn training_config(args: &ConfigArgs) -> Result<TrainingConfig, CliError> {
    training_config_with_log(args, read_log(args)?.as_ref())
}

fn training_config_with_log(
    args: &ConfigArgs,
    log: Option<&MegatronLog>,
) -> Result<TrainingConfig, CliError> {
    let mut map: Map<String, Value> = Map::new();
    // What each reader ignored or assumed travels past the merge, which keeps only fields.
    let mut ignored = Vec::new();
    let mut assumed = Vec::new();
    let mut merge = |cfg: &TrainingConfig| -> Result<(), CliError> {
        if let Value::Object(fields) =
            serde_json::to_value(cfg).map_err(|e| CliError::Input(e.to_string()))?
        {
            map.extend(fields.into_iter().filter(|(_, v)| !v.is_null()));
        }
        ignored.extend(cfg.ignored_settings.iter().cloned());
        assumed.extend(cfg.assumed_defaults.iter().cloned());
        Ok(())
    };
    let model = args.model.as_deref().map(model_spec).transpose()?;
    if let Some(logged) = log.and_then(|l| l.config.as_ref()) {
        merge(logged)?;
    }
    if let Some(path) = &args.config {
        merge(&parse_config_file(
            path,
            args.recipe.as_deref(),
            model.as_ref(),
        )?)?;
    } else if let Some(recipe) = &args.recipe {
        let mut note = TrainingConfig::default();
        note.ignored_settings.push(IgnoredSetting::new(
            format!("--recipe {recipe}"),
            "no --config file to read the recipe from",
        ));
        merge(&note)?;
    }
    if let Some(line) = &args.megatron_args {
        let parsed = parse_megatron_args_for_model(line, model.as_ref())
            .map_err(|e| CliError::Input(e.to_string()))?;
        merge(&parsed)?;
    }
    let mut flags: Vec<(String, Value)> = Vec::new();
    if let Some(model) = &model {
        flags.push((
            "model".into(),
            serde_json::to_value(model).map_err(|e| CliError::Input(e.to_string()))?,
        ));
    }
    if let Some(v) = &args.hardware {
        flags.push(("hardware".into(), Value::String(v.clone())));
    }
    if let Some(v) = args.num_gpus {
        flags.push(("num_gpus".into(), Value::from(v)));
    }
    if let Some(v) = args.seq_length {
        flags.push(("seq_length".into(), Value::from(v)));
    }
    if let Some(v) = &args.precision {
        flags.push(("precision".into(), Value::String(v.clone())));
    }
    for pair in &args.set {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(CliError::Input(format!(
                "--set {pair}: expected KEY=VALUE, e.g. --set context_parallel_size=16"
            )));
        };
        flags.push((key.trim().to_string(), parse_value(value.trim())));
    }
    // A value a reader only assumed (a recipe's name, a tokenizer) gives way to a flag.
    assumed.retain(|a| flags.iter().all(|(key, _)| *key != a.key));
    map.extend(flags);
    let mut config = read_value(&Value::Object(map)).map_err(|e| CliError::Input(e.to_string()))?;
    config.ignored_settings.splice(0..0, ignored);
    config.assumed_defaults.splice(0..0, assumed);
    crate::tools::config_text::missing_from_other_files(
        &config,
        "--config",
        "keep the recipe file inside its checkout (its imports are found from the file's folder, as Python finds them), or give --seq-length / --model",
    )
    .map_err(|e| CliError::Input(e.to_string()))?;
    Ok(config)
}

/// Adds notes to a tool's output notes and rationale.
fn add_notes(notes: &mut InputNotes, rationale: &mut String, extra: InputNotes) {
    let mut fresh = InputNotes::default();
    for i in extra.ignored_settings {
        if !notes.ignored_settings.contains(&i) {
            notes.ignored_settings.push(i.clone());
            fresh.ignored_settings.push(i);
        }
    }
    for a in extra.assumed_defaults {
        if !notes.assumed_defaults.iter().any(|n| n.key == a.key) {
            notes.assumed_defaults.push(a.clone());
            fresh.assumed_defaults.push(a);
        }
    }
    rationale.push_str(&fresh.markdown());
}

/// Builds a tool input from selected configuration fields plus tool-specific ones.
fn tool_input<T: DeserializeOwned>(
    cfg: &TrainingConfig,
    fields: &[&str],
    extra: Vec<(&str, Option<Value>)>,
) -> Result<T, CliError> {
    let mut map = Map::new();
    if let Value::Object(all) =
        serde_json::to_value(cfg).map_err(|e| CliError::Input(e.to_string()))?
    {
        for field in fields {
            if let Some(v) = all.get(*field) {
                map.insert((*field).to_string(), v.clone());
            }
        }
    }
    for (key, value) in extra {
        if let Some(value) = value {
            map.insert(key.to_string(), value);
        }
    }
    serde_json::from_value(Value::Object(map)).map_err(|e| CliError::Input(e.to_string()))
}

/// The configuration fields each layout-choosing tool takes (it searches or chooses the rest).
const SIZE_CP_FIELDS: [&str; 7] = [
    "model",
    "seq_length",
    "hardware",
    "num_gpus",
    "precision",
    "global_batch_size",
    "tensor_model_parallel_size",
];
const LOOKUP_FIELDS: [&str; 5] = ["model", "seq_length", "hardware", "num_gpus", "precision"];
const PLAN_FIELDS: [&str; 6] = [
    "model",
    "hardware",
    "num_gpus",
    "seq_length",
    "precision",
    "global_batch_size",
];

/// `check`'s answer: the tool's output, and with `--log` the comparison with the log.
#[derive(Serialize)]
struct CheckAnswer {
    #[serde(flatten)]
    check: tools::feasibility::CheckFeasibilityOutput,
    #[serde(skip_serializing_if = "Option::is_none")]
    log_comparison: Option<tools::log_compare::LogComparison>,
}

fn show<T: Serialize>(global: &GlobalArgs, value: &T, rationale: &str) -> Result<(), CliError> {
    emit(global.json, value, |_| rationale.to_string())
}

pub fn run(global: &GlobalArgs, command: &ToolCommand) -> Result<(), CliError> {
    let catalog = global.load_catalog();
    match command {
        ToolCommand::Check {
            config: args,
            pictures,
        } => {
            let log = read_log(args)?;
            let cfg = training_config_with_log(args, log.as_ref())?;
            let out = tools::feasibility::check_feasibility(&catalog, cfg.clone())?;
            let comparison = log.as_ref().map(|log| {
                tools::log_compare::compare_with_log(&catalog, &cfg, &out.estimate, log)
            });
            pictures.write(
                "moe-skills check",
                &crate::charts::Subject::of(&cfg, &out.estimate).line(),
                &format!(
                    "{}{}",
                    out.rationale,
                    comparison
                        .as_ref()
                        .map(|c| c.markdown())
                        .unwrap_or_default()
                ),
                &cfg,
                || Ok(crate::charts::for_check(&cfg, &out)),
            )?;
            let answer = CheckAnswer {
                check: out,
                log_comparison: comparison,
            };
            emit(global.json, &answer, |a| {
                format!(
                    "{}\n\n{}{}",
                    crate::model::report::render_text(&a.check.estimate),
                    a.check.rationale,
                    a.log_comparison
                        .as_ref()
                        .map(|c| c.markdown())
                        .unwrap_or_default()
                )
            })?;
            // The answer is printed either way; the exit status lets CI gate on it.
            if answer.check.estimate.fits && answer.check.estimate.violations.is_empty() {
                Ok(())
            } else {
                Err(CliError::DoesNotFit)
            }
        }
        ToolCommand::SizeCp { config, tp } => {
            let cfg = training_config(config)?;
            let input: tools::size_cp::SizeCpInput = tool_input(
                &cfg,
                &SIZE_CP_FIELDS,
                vec![(
                    "tensor_model_parallel_size",
                    tp.or(cfg.tensor_model_parallel_size).map(Value::from),
                )],
            )?;
            let mut out = tools::size_cp::size_cp(&catalog, input)?;
            let extra = InputNotes::beside_tool_input(catalog.cost(), &cfg, &SIZE_CP_FIELDS);
            add_notes(&mut out.notes, &mut out.rationale, extra);
            show(global, &out, &out.rationale)
        }
        ToolCommand::LookupRecipe { config, limit } => {
            let cfg = training_config(config)?;
            let input: tools::recipe::LookupRecipeInput = tool_input(
                &cfg,
                &LOOKUP_FIELDS,
                vec![("limit", limit.map(Value::from))],
            )?;
            let mut out = tools::recipe::lookup_recipe(&catalog, input)?;
            add_notes(
                &mut out.notes,
                &mut out.rationale,
                InputNotes::beside_tool_input(catalog.cost(), &cfg, &LOOKUP_FIELDS),
            );
            show(global, &out, &out.rationale)
        }
        ToolCommand::ChooseRecompute {
            config,
            memory_budget_gib,
        } => {
            let cfg = training_config(config)?;
            let out = tools::recompute::choose_recompute(
                &catalog,
                tools::recompute::ChooseRecomputeInput {
                    config: cfg,
                    memory_budget_gib: *memory_budget_gib,
                },
            )?;
            show(global, &out, &out.rationale)
        }
        ToolCommand::PlanLayouts {
            config,
            global_batch_size,
            top_k,
            constraints,
            pictures,
        } => {
            let cfg = training_config(config)?;
            let constraints = match constraints {
                Some(text) => Some(
                    serde_json::from_str::<Value>(text)
                        .map_err(|e| CliError::Input(format!("--constraints: {e}")))?,
                ),
                None => None,
            };
            let input: tools::plan::PlanLayoutsInput = tool_input(
                &cfg,
                &PLAN_FIELDS,
                vec![
                    (
                        "global_batch_size",
                        global_batch_size.or(cfg.global_batch_size).map(Value::from),
                    ),
                    ("top_k", top_k.map(Value::from)),
                    ("constraints", constraints),
                ],
            )?;
            let mut out = tools::plan::plan_layouts(&catalog, input.clone())?;
            add_notes(
                &mut out.notes,
                &mut out.rationale,
                InputNotes::beside_tool_input(catalog.cost(), &cfg, &PLAN_FIELDS),
            );
            pictures.write(
                "moe-skills plan-layouts",
                out.candidates
                    .first()
                    .map(|c| c.layout.as_str())
                    .unwrap_or("no layout fits"),
                &out.rationale,
                &input,
                || Ok(crate::charts::for_plan(&catalog, &out)?),
            )?;
            emit(global.json, &out, |o| {
                let mut text = o.rationale.clone();
                for c in &o.candidates {
                    text.push_str(&format!(
                        "\n{:>2}. {:<44} {:<40} {:<42} {:>6.1} TFLOP/s {:>7.0} tok/s {:>6.1} GiB",
                        c.rank,
                        c.layout,
                        c.recompute,
                        c.levers,
                        c.predicted.model_tflops_per_gpu,
                        c.predicted.tokens_per_second_per_gpu,
                        c.predicted.peak_gib
                    ));
                }
                text
            })
        }
        ToolCommand::TriageOom {
            before,
            after,
            diff,
            recipe,
            model,
            hardware,
            num_gpus,
            pictures,
        } => {
            let (before_path, after_path) = (before.as_path(), after.as_deref());
            let before = ConfigSource::Text(read_file(before)?);
            let after = after
                .as_deref()
                .map(read_file)
                .transpose()?
                .map(ConfigSource::Text);
            let diff = diff.as_deref().map(read_file).transpose()?;
            let input = tools::triage::TriageOomInput {
                before,
                after,
                diff,
                recipe: recipe.clone(),
                model: model.as_deref().map(model_spec).transpose()?,
                hardware: hardware.clone(),
                num_gpus: *num_gpus,
                modules: Default::default(),
            };
            // Python recipes in a checkout are read with what they import, as `check` does.
            let modules_of =
                |path: &Path| (path != Path::new("-")).then(|| CheckoutModules::for_recipe(path));
            let before_modules = modules_of(before_path);
            let after_modules = after_path.and_then(modules_of);
            let out = tools::triage::triage_oom_with(
                &catalog,
                input.clone(),
                tools::triage::SideModules {
                    before: before_modules.as_ref().map(|m| m as &dyn ModuleLoader),
                    after: after_modules.as_ref().map(|m| m as &dyn ModuleLoader),
                },
            )?;
            pictures.write(
                "moe-skills triage-oom",
                &crate::charts::triage_subject(&out).line(),
                &out.rationale,
                &input,
                || Ok(crate::charts::for_triage(&out)),
            )?;
            show(global, &out, &out.rationale)
        }
        ToolCommand::Models => {
            let out = tools::listing::list_models(&catalog);
            emit(global.json, &out, |o| {
                // The id column is as wide as the longest id.
                let width = o
                    .models
                    .iter()
                    .map(|m| m.id.len())
                    .max()
                    .unwrap_or(0)
                    .max(20);
                let mut text = format!(
                    "{:<width$} {:>6} {:>7} {:>8} {:>6} {:>9} {:>11}\n",
                    "id", "layers", "hidden", "experts", "top-k", "params B", "GFLOP/tok@4K"
                );
                for m in &o.models {
                    text.push_str(&format!(
                        "{:<width$} {:>6} {:>7} {:>8} {:>6} {:>9.1} {:>11.1}\n",
                        m.id,
                        m.num_layers,
                        m.hidden_size,
                        m.num_experts,
                        m.top_k,
                        m.total_params_billion,
                        m.gflop_per_token_at_4k
                    ));
                }
                text
            })
        }
        ToolCommand::Hardware => {
            let out = tools::listing::list_hardware(&catalog);
            emit(global.json, &out, |o| {
                let mut text = format!(
                    "{:<7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8}  {}\n",
                    "id",
                    "mem GiB",
                    "BF16 TF",
                    "FP8 TF",
                    "FP4 TF",
                    "NVL GB/s",
                    "domain",
                    "net GB/s",
                    "dispatcher"
                );
                for h in &o.hardware {
                    text.push_str(&format!(
                        "{:<7} {:>8.1} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>7} {:>8.0}  {}\n",
                        h.id,
                        h.memory_gib_usable,
                        h.bf16_tflops,
                        h.fp8_tflops,
                        h.fp4_tflops,
                        h.nvlink_gb_per_s,
                        h.nvlink_domain_size,
                        h.network_gb_per_s,
                        h.default_dispatcher
                    ));
                }
                text
            })
        }
        ToolCommand::Calibrate {
            logs,
            hardware,
            model,
            cluster,
            write,
            ..
        } if !logs.is_empty() => {
            let mut texts = Vec::new();
            for path in logs {
                texts.push(tools::cluster_calibrate::LogText {
                    name: path.display().to_string(),
                    text: read_file(path)?,
                });
            }
            let input = tools::cluster_calibrate::CalibrateInput {
                logs: texts,
                model: model.as_deref().map(model_spec).transpose()?,
                hardware: hardware.clone(),
                cluster: cluster.clone(),
            };
            let outcome = tools::cluster_calibrate::calibrate_from_logs(&catalog, input)?;
            if let Some(path) = write {
                std::fs::write(path, &outcome.card_yaml).map_err(|e| {
                    CliError::Input(format!("cannot write {}: {e}", path.display()))
                })?;
            }
            emit(global.json, &outcome, |o| {
                let mut text = o.markdown();
                if let Some(path) = write {
                    text.push_str(&format!(
                        "\n\nWrote {}: pass it as `--calibration {}` (or keep it as cards/calibration.yaml in a --skills-dir).",
                        path.display(),
                        path.display()
                    ));
                }
                text
            })
        }
        ToolCommand::Calibrate { fit: true, .. } => {
            let outcome = tools::calibrate::fit_constants(&catalog)?;
            emit(global.json, &outcome, tools::calibrate::fit_text)
        }
        ToolCommand::Calibrate { bands: true, .. } => {
            let report = tools::calibrate::calibrate(&catalog)?;
            let table = tools::calibrate::bands(&catalog, &report);
            emit(global.json, &table, |t| {
                serde_yaml::to_string(t).unwrap_or_default()
            })
        }
        ToolCommand::Calibrate { markdown, .. } => {
            let report = tools::calibrate::calibrate(&catalog)?;
            emit(
                global.json && !markdown,
                &report,
                tools::calibrate::markdown,
            )
        }
    }
}
