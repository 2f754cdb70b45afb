//! `triage_oom`: why a commit made a long-context run go out of memory or slow down.
//!
//! The change is attributed field by field: each changed setting is applied alone to the
//! `before` configuration and evaluated, so every cause carries its own memory and step-time
//! delta. The component deltas (before vs after) show where the memory went. When `after`
//! no longer fits, candidate fixes are evaluated on `after` and ranked by predicted cost.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::common::InputNotes;
use super::common::{
    citations, evaluate_config, layout_violations, recompute_label, resolve, round, value_text,
    Citation, ToolError,
};
use super::config_text::{check_modules, module_texts, unread_modules};
use super::recompute::{choose_recompute, ChooseRecomputeInput};
use crate::catalog::{Catalog, CostCards};
use crate::inputs::diff::{
    apply_changes, config_changes, read_diff_for_recipe, set_fields, SettingChange,
};
use crate::inputs::megatron_log::read_megatron_log;
use crate::inputs::python_recipe::ModuleLoader;
use crate::inputs::source::{
    apply_beside, detect_format, read_config_source_for_model, ConfigSource, TextFormat,
};
use crate::model::config::{
    CudaGraphImpl, CudaGraphScope, FsdpStrategy, IgnoredSetting, ModelSpec, RecomputeModule,
};
use crate::model::{Estimate, TrainingConfig};

mod fixes;
mod rationale;
mod whole_files;

use fixes::fixes_for;
use rationale::triage_rationale;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct TriageOomInput {
    /// Configuration before the commit: fields, or a file's text (YAML/JSON, Bridge override,
    /// launch script, Megatron-LM arguments, Megatron-Bridge Python recipe).
    pub before: ConfigSource,
    /// Configuration after the commit, in the same forms (or give `diff`).
    #[serde(default)]
    pub after: Option<ConfigSource>,
    /// Unified diff (`git diff`, `git show`, `format-patch`, `diff -u`) of launch scripts,
    /// Megatron-LM argument lists, YAML/JSON override files or Megatron-Bridge Python recipes.
    /// When its hunks apply to a Python `before` file, they are applied and the whole file is
    /// read on both sides (the recipe found by the lines it changes).
    #[serde(default)]
    pub diff: Option<String>,
    /// The recipe (Python function or constant name) to read from a Python `before`/`after`
    /// file, and to triage when the diff changes several; without it each changed recipe is
    /// triaged separately.
    #[serde(default)]
    pub recipe: Option<String>,
    /// Model card id or HuggingFace config.json, when the configuration does not name it
    /// (a Bridge override's `model:` is a section, not a card).
    #[serde(default)]
    pub model: Option<ModelSpec>,
    /// Hardware card id, when the configuration does not name it.
    #[serde(default)]
    pub hardware: Option<String>,
    /// GPU count, when the configuration does not give it.
    #[serde(default)]
    pub num_gpus: Option<u32>,
    /// The Python modules a `before`/`after` recipe file imports, as texts keyed by their path
    /// in the checkout (`src/megatron/bridge/perf_recipes/deepseek/common.py`) or dotted
    /// module name: base recipes and helpers are then evaluated where they are defined, and a
    /// diff's changes to them applied. An answer names the modules imported but not given.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub modules: BTreeMap<String, String>,
}

impl TriageOomInput {
    /// Configurations given as fields, nothing beside them.
    pub fn from_configs(
        before: TrainingConfig,
        after: Option<TrainingConfig>,
        diff: Option<String>,
    ) -> TriageOomInput {
        TriageOomInput {
            before: before.into(),
            after: after.map(ConfigSource::from),
            diff,
            recipe: None,
            model: None,
            hardware: None,
            num_gpus: None,
            modules: Default::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckSummary {
    pub fits: bool,
    pub peak_gib: f64,
    pub capacity_gib: f64,
    pub step_time_s: f64,
    pub model_tflops_per_gpu: f64,
    pub tokens_per_second_per_gpu: f64,
    pub worst_rank: u32,
    pub breakdown_gib: Map<String, Value>,
    pub violations: Vec<String>,
    /// The error band of `model_tflops_per_gpu` and `step_time_s` from measured runs of its
    /// regime (absent when the catalog has no `cards/time-uncertainty.yaml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<crate::model::uncertainty::Uncertainty>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Cause {
    pub field: String,
    pub before: Value,
    pub after: Value,
    /// Peak memory change from applying this change alone to `before`, GiB.
    pub memory_delta_gib: f64,
    /// Step-time change from applying this change alone, seconds.
    pub step_time_delta_s: f64,
    pub explanation: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ComponentDelta {
    pub component: String,
    pub before_gib: f64,
    pub after_gib: f64,
    pub delta_gib: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Fix {
    pub description: String,
    /// Settings to change on `after`.
    pub settings: Map<String, Value>,
    pub fits: bool,
    pub peak_gib: f64,
    /// Step time against `after`, seconds (positive = slower).
    pub step_time_delta_s: f64,
    pub model_tflops_per_gpu: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TriageOomOutput {
    pub before: CheckSummary,
    pub after: CheckSummary,
    /// Ranked, root cause first.
    pub causes: Vec<Cause>,
    pub memory_delta_gib: f64,
    pub step_time_delta_s: f64,
    /// Per-component memory change on the worst rank, largest first.
    pub components: Vec<ComponentDelta>,
    /// Cheapest first among those that fit.
    pub fixes: Vec<Fix>,
    /// The `after` configuration the analysis used (from `after` or `before` + `diff`).
    pub after_config: TrainingConfig,
    /// The Python recipe this triage is about, when the change is to a recipe file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<String>,
    /// Each further recipe the diff changes, triaged on its own (pass `recipe` to pick one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_recipes: Vec<TriageOomOutput>,
    /// What the logs measured, when `before`/`after` are Megatron logs, and whether the
    /// model's attribution agrees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<MeasuredRuns>,
    #[serde(flatten)]
    pub notes: InputNotes,
    pub rationale: String,
    pub citations: Vec<Citation>,
}

/// One run as its log measured it (worst reporting rank).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MeasuredRun {
    pub max_allocated_gib: Option<f64>,
    pub max_reserved_gib: Option<f64>,
    pub median_step_time_s: Option<f64>,
    /// The failed allocation, when the run went out of memory.
    pub out_of_memory_tried_gib: Option<f64>,
    pub out_of_memory_rank: Option<u32>,
    pub went_out_of_memory: bool,
}

/// The measured runs beside the prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MeasuredRuns {
    pub before: Option<MeasuredRun>,
    pub after: Option<MeasuredRun>,
    /// Whether what the logs measured agrees with the model's prediction, and how far apart.
    pub agreement: String,
}

fn measured_run(source: &ConfigSource) -> Option<MeasuredRun> {
    let ConfigSource::Text(text) = source else {
        return None;
    };
    if detect_format(text) != TextFormat::MegatronLog {
        return None;
    }
    let log = read_megatron_log(text, None).ok()?;
    let peaks = log.peak_memory_by_rank();
    let worst = peaks
        .iter()
        .max_by(|a, b| a.max_reserved_mib.total_cmp(&b.max_reserved_mib));
    Some(MeasuredRun {
        max_allocated_gib: worst.map(|w| round(w.max_allocated_mib / 1024.0, 2)),
        max_reserved_gib: worst.map(|w| round(w.max_reserved_mib / 1024.0, 2)),
        median_step_time_s: log
            .step_statistics()
            .map(|s| round(s.median_step_ms / 1000.0, 3)),
        out_of_memory_tried_gib: log
            .out_of_memory
            .as_ref()
            .and_then(|o| o.tried_to_allocate_gib),
        out_of_memory_rank: log.out_of_memory.as_ref().and_then(|o| o.rank),
        went_out_of_memory: log.out_of_memory.is_some(),
    })
}

/// Sets `measured` from the logs among the inputs and says whether the model agrees.
fn attach_measurements(
    out: &mut TriageOomOutput,
    before: &ConfigSource,
    after: Option<&ConfigSource>,
) {
    let before_run = measured_run(before);
    let after_run = after.and_then(measured_run);
    if before_run.is_none() && after_run.is_none() {
        return;
    }
    let mut findings = Vec::new();
    for (side, run, predicted) in [
        ("before", &before_run, &out.before),
        ("after", &after_run, &out.after),
    ] {
        let Some(run) = run else { continue };
        if run.went_out_of_memory {
            findings.push(if predicted.fits {
                format!(
                    "{side}: the log shows an out-of-memory error{} but the model predicts {:.1} of {:.1} GiB, a fit: the model under-counts this run",
                    run.out_of_memory_tried_gib.map(|g| format!(" (tried to allocate {g:.2} GiB)")).unwrap_or_default(),
                    predicted.peak_gib,
                    predicted.capacity_gib
                )
            } else {
                format!("{side}: the log shows an out-of-memory error and the model predicts it does not fit: they agree")
            });
        } else if let Some(reserved) = run.max_reserved_gib {
            findings.push(format!(
                "{side}: measured max reserved {reserved:.1} GiB (max allocated {:.1}), predicted {:.1} GiB ({:+.0}%)",
                run.max_allocated_gib.unwrap_or(0.0),
                predicted.peak_gib,
                (predicted.peak_gib - reserved) / reserved.max(f64::MIN_POSITIVE) * 100.0
            ));
        }
    }
    if let (Some(b), Some(a)) = (&before_run, &after_run) {
        if let (Some(rb), Some(ra)) = (b.max_reserved_gib, a.max_reserved_gib) {
            let measured = ra - rb;
            let predicted = out.memory_delta_gib;
            let agrees = (measured >= 0.0) == (predicted >= 0.0);
            findings.push(format!(
                "the change: measured {measured:+.1} GiB, predicted {predicted:+.1} GiB ({})",
                if agrees {
                    "same direction"
                } else {
                    "opposite directions: the attribution is suspect"
                }
            ));
        }
    }
    let agreement = findings.join("; ");
    out.rationale
        .push_str(&format!("\n\n**What the logs measured**: {agreement}."));
    out.measured = Some(MeasuredRuns {
        before: before_run,
        after: after_run,
        agreement,
    });
}

fn summary(est: &Estimate) -> CheckSummary {
    let breakdown = match serde_json::to_value(&est.memory.breakdown_gib) {
        Ok(Value::Object(map)) => map.into_iter().map(|(k, v)| (k, json_round(&v))).collect(),
        _ => Map::new(),
    };
    CheckSummary {
        fits: est.fits,
        peak_gib: round(est.memory.peak_gib, 2),
        capacity_gib: round(est.memory.capacity_gib, 2),
        step_time_s: round(est.performance.step_time_s, 3),
        model_tflops_per_gpu: round(est.performance.model_tflops_per_gpu, 1),
        tokens_per_second_per_gpu: round(est.performance.tokens_per_second_per_gpu, 1),
        worst_rank: est.memory.worst_rank.pipeline_rank,
        breakdown_gib: breakdown,
        violations: est.violations.iter().map(|v| v.code.clone()).collect(),
        uncertainty: est.performance.uncertainty.clone(),
    }
}

fn json_round(v: &Value) -> Value {
    v.as_f64()
        .map(|f| Value::from(round(f, 2)))
        .unwrap_or_else(|| v.clone())
}

/// Memory components of the worst rank, with the activations also split by module
/// (`activations.moe_dispatch`, ...), so a delta shows which tensors grew.
fn component_deltas(before: &Estimate, after: &Estimate) -> Vec<ComponentDelta> {
    let to_map = |e: &Estimate| {
        let mut map = match serde_json::to_value(&e.memory.breakdown_gib) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        if let Ok(Value::Object(modules)) = serde_json::to_value(e.memory.activations_by_module_gib)
        {
            for (module, value) in modules {
                map.insert(format!("activations.{module}"), value);
            }
        }
        map
    };
    let (b, a) = (to_map(before), to_map(after));
    let mut out: Vec<ComponentDelta> = b
        .iter()
        .filter_map(|(k, bv)| {
            let bv = bv.as_f64()?;
            let av = a.get(k).and_then(Value::as_f64)?;
            Some(ComponentDelta {
                component: k.clone(),
                before_gib: round(bv, 2),
                after_gib: round(av, 2),
                delta_gib: round(av - bv, 2),
            })
        })
        .filter(|d| d.delta_gib.abs() >= 0.01)
        .collect();
    out.sort_by(|x, y| y.delta_gib.abs().total_cmp(&x.delta_gib.abs()));
    out
}

/// Settings that only mean something together are attributed together.
fn group_of(field: &str) -> &str {
    match field {
        "recompute_granularity"
        | "recompute_modules"
        | "recompute_method"
        | "recompute_num_layers" => "recompute",
        "moe_token_dispatcher_type" | "moe_flex_dispatcher_backend" => "dispatcher",
        "optimizer_cpu_offload" | "optimizer_offload_fraction" => "optimizer_offload",
        "use_megatron_fsdp" | "data_parallel_sharding_strategy" => "fsdp",
        other => other,
    }
}

fn explain(
    field: &str,
    before_est: &Estimate,
    alone: &Estimate,
    memory_delta: f64,
    time_delta: f64,
) -> String {
    let deltas = component_deltas(before_est, alone);
    let top: Vec<String> = deltas
        .iter()
        .take(3)
        .map(|d| {
            format!(
                "{} {:+.1} GiB ({:.1} → {:.1})",
                d.component, d.delta_gib, d.before_gib, d.after_gib
            )
        })
        .collect();
    let what = match group_of(field) {
        "recompute" => {
            if memory_delta > 0.0 {
                "less is recomputed, so every in-flight microbatch keeps those activations resident"
            } else {
                "more is recomputed, so fewer activations stay resident and the backward pass repeats forward work"
            }
        }
        "context_parallel_size" => "CP changed, so each GPU holds a different share of the sequence (activations scale with seq/CP)",
        "seq_length" => "the sequence length changed; activations grow linearly and attention work quadratically with it",
        "micro_batch_size" => "the micro-batch size changed; activations scale with it",
        "optimizer_offload" => "optimizer state moved between host and GPU",
        "fsdp" => "parameter, gradient and optimizer sharding changed",
        "linear_cross_entropy" | "cross_entropy_loss_fusion" => "the loss now materialises (or streams) the logits over the vocabulary",
        "dispatcher" => "the MoE dispatcher changed its buffers and its communication",
        "cuda_graph_impl" | "cuda_graph_scope" => "CUDA graphs keep private memory pools and cut launch overhead",
        "pipeline_model_parallel_size" | "virtual_pipeline_model_parallel_size" => "the pipeline split changed the layers and in-flight microbatches per rank",
        "tensor_model_parallel_size" | "sequence_parallel" => "TP/SP sharding of weights and activations changed",
        "expert_model_parallel_size" | "expert_tensor_parallel_size" => "expert sharding changed the expert weights per GPU and the all-to-all",
        "global_batch_size" => "more microbatches per step change the pipeline bubble, not the memory per microbatch",
        _ => "this setting changed",
    };
    format!(
        "{what}: peak {:+.1} GiB, step time {:+.2} s{}",
        memory_delta,
        time_delta,
        if top.is_empty() {
            String::new()
        } else {
            format!("; {}", top.join(", "))
        }
    )
}

pub fn triage_oom(catalog: &Catalog, input: TriageOomInput) -> Result<TriageOomOutput, ToolError> {
    triage_oom_with(catalog, input, SideModules::default())
}

/// Where the modules a Python `before` / `after` recipe imports are read from (the checkout
/// each file sits in, for the command line); without them a recipe's imports stay unread.
#[derive(Clone, Copy, Default)]
pub struct SideModules<'a> {
    pub before: Option<&'a dyn ModuleLoader>,
    pub after: Option<&'a dyn ModuleLoader>,
}

/// [`triage_oom`], Python recipes read with their imports through `modules` (the command
/// line's checkouts); without those, through the texts the input's `modules` gives.
pub fn triage_oom_with(
    catalog: &Catalog,
    input: TriageOomInput,
    modules: SideModules<'_>,
) -> Result<TriageOomOutput, ToolError> {
    check_modules(&input.modules)?;
    let on_disk = modules.before.is_some() || modules.after.is_some();
    let given = module_texts(&input.modules);
    let sides = match &given {
        Some(texts) if !on_disk => SideModules {
            before: Some(texts),
            after: Some(texts),
        },
        _ => modules,
    };
    let mut out = triage_with_loaders(catalog, input, sides)?;
    if let Some(texts) = &given {
        let mut extra = InputNotes::default();
        let reason = if on_disk {
            "the recipe's modules were read from its checkout"
        } else {
            "no recipe read imports it"
        };
        for note in unread_modules(texts, reason) {
            extra.ignore(note.key, note.reason);
        }
        if !extra.ignored_settings.is_empty() {
            out.rationale.push_str(&extra.markdown());
            out.notes.ignored_settings.extend(extra.ignored_settings);
        }
    }
    Ok(out)
}

fn triage_with_loaders(
    catalog: &Catalog,
    input: TriageOomInput,
    modules: SideModules<'_>,
) -> Result<TriageOomOutput, ToolError> {
    crate::model::limits::DIFF.check("", input.diff.as_deref())?;
    let recipe = input.recipe.as_deref();
    let read_side = |field: &'static str,
                     source: &ConfigSource,
                     recipe: Option<&str>,
                     loader: Option<&dyn ModuleLoader>| {
        // The recipe selector is for Python files; a diff's recipe does not apply to YAML.
        let is_python = matches!(source, ConfigSource::Text(text)
            if detect_format(text) == TextFormat::PythonRecipe);
        let recipe = recipe.filter(|_| is_python);
        let mut config = read_config_source_for_model(source, recipe, loader, input.model.as_ref())
            .map_err(|e| {
                ToolError::field(
                    field,
                    e.to_string(),
                    "fix the configuration, or pass it as fields",
                )
            })?;
        apply_beside(
            &mut config,
            input.model.as_ref(),
            input.hardware.as_deref(),
            input.num_gpus,
        );
        crate::model::limits::check_config(&config, &format!("{field}."))?;
        Ok::<TrainingConfig, ToolError>(config)
    };
    match (&input.after, &input.diff) {
        (Some(after), _) => {
            let before = read_side("before", &input.before, recipe, modules.before)?;
            let after = read_side("after", after, recipe, modules.after)?;
            let changes = config_changes(&before, &after);
            let mut notes = InputNotes::default();
            if input.diff.is_some() {
                notes.ignore("diff", "`after` was given, so the diff is not read");
            }
            let mut out =
                triage_change(catalog, &before, after, changes, recipe.map(str::to_string), notes)?;
            attach_measurements(&mut out, &input.before, input.after.as_ref());
            Ok(out)
        }
        (None, Some(diff)) => {
            if let Some(out) =
                whole_files::triage_patched_recipe(catalog, &input, diff, modules, &read_side)?
            {
                return Ok(out);
            }
            if let Some(out) =
                whole_files::triage_patched_script(catalog, &input, diff, &read_side)?
            {
                return Ok(out);
            }
            let reading = read_diff_for_recipe(diff, recipe).map_err(|e| {
                ToolError::field(
                    "diff",
                    e.to_string(),
                    "pass a unified diff of the launch script, override file or recipe, or `after` as a full configuration",
                )
            })?;
            // One change to triage, or several recipes each on its own.
            let mut runs: Vec<(Option<String>, Vec<SettingChange>, Vec<IgnoredSetting>)> =
                Vec::new();
            if reading.recipes.len() > 1 && recipe.is_none() {
                for changed in &reading.recipes {
                    let mut changes = reading.changes.clone();
                    for change in &changed.changes {
                        changes.retain(|c| c.field != change.field);
                        changes.push(change.clone());
                    }
                    let mut ignored = reading.ignored.clone();
                    ignored.extend(changed.unevaluated.iter().cloned());
                    runs.push((Some(changed.recipe.clone()), changes, ignored));
                }
            } else {
                let name = recipe
                    .map(str::to_string)
                    .or_else(|| reading.recipes.first().map(|r| r.recipe.clone()));
                runs.push((name, reading.changes.clone(), reading.ignored.clone()));
            }
            let mut outputs = Vec::new();
            let mut unchanged: Vec<IgnoredSetting> = Vec::new();
            for (name, changes, ignored) in runs {
                // A Python `before` file is read at the recipe being triaged.
                let before = read_side(
                    "before",
                    &input.before,
                    name.as_deref().or(recipe),
                    modules.before,
                )?;
                let mut notes = InputNotes::default();
                for i in ignored {
                    notes.ignore(i.key, i.reason);
                }
                let changes = against_before(&before, changes, &mut notes);
                if changes.is_empty() {
                    let what: Vec<String> =
                        notes.ignored_settings.iter().map(|i| format!("`{}`", i.key)).collect();
                    unchanged.push(IgnoredSetting::new(
                        name.clone().unwrap_or_else(|| "the diff".into()),
                        format!(
                            "changes no setting the cost model reads against `before`{}",
                            if what.is_empty() {
                                String::new()
                            } else {
                                format!(" (what it changes that is not modelled: {})", what.join(", "))
                            }
                        ),
                    ));
                    continue;
                }
                let after = apply_changes(&before, &changes).map_err(|e| {
                    ToolError::field(
                        "diff",
                        format!("the changed settings do not form a valid configuration: {e}"),
                        "check the values the diff sets",
                    )
                })?;
                outputs.push(triage_change(catalog, &before, after, changes, name, notes)?);
            }
            if outputs.is_empty() {
                let detail: Vec<String> =
                    unchanged.iter().map(|u| format!("{}: {}", u.key, u.reason)).collect();
                return Err(ToolError::field(
                    "diff",
                    format!("nothing the diff changes differs from `before` in a setting the cost model reads — {}", detail.join("; ")),
                    "check that `before` is the configuration the diff applies to, or pass `after` as a full configuration",
                ));
            }
            let first = outputs.remove(0);
            let mut first = combine_recipes(first, outputs, unchanged);
            attach_measurements(&mut first, &input.before, None);
            Ok(first)
        }
        (None, None) => Err(ToolError::field(
            "after",
            "neither `after` nor `diff` was given",
            "pass the configuration after the commit as `after`, or the commit's unified diff as `diff`",
        )),
    }
}

/// One answer for a diff that changes several recipes: the first recipe's, the others in
/// `other_recipes` and their rationales appended; what changed nothing is listed.
fn combine_recipes(
    mut first: TriageOomOutput,
    outputs: Vec<TriageOomOutput>,
    unchanged: Vec<IgnoredSetting>,
) -> TriageOomOutput {
    if !unchanged.is_empty() {
        let mut extra = InputNotes::default();
        for u in unchanged {
            extra.ignore(u.key, u.reason);
        }
        first.rationale.push_str(&extra.markdown());
        first.notes.ignored_settings.extend(extra.ignored_settings);
    }
    if !outputs.is_empty() {
        let names: Vec<String> = std::iter::once(&first)
            .chain(&outputs)
            .filter_map(|o| o.recipe.clone())
            .collect();
        let mut text = format!(
            "**This diff changes {} recipes** ({}); each is triaged on its own below. Pass `recipe` to triage one.\n\n### `{}`\n\n{}",
            names.len(),
            names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "),
            names.first().map(String::as_str).unwrap_or(""),
            first.rationale
        );
        for other in &outputs {
            text.push_str(&format!(
                "\n\n### `{}`\n\n{}",
                other.recipe.as_deref().unwrap_or(""),
                other.rationale
            ));
        }
        first.rationale = text;
        first.other_recipes = outputs;
    }
    first
}

/// The diff's changes measured against the `before` configuration actually given: its value
/// is the one changed from (a diff hunk may not show a value the recipe inherits), and a diff
/// whose old value disagrees with `before` is noted.
fn against_before(
    before: &TrainingConfig,
    changes: Vec<SettingChange>,
    notes: &mut InputNotes,
) -> Vec<SettingChange> {
    let set = set_fields(before);
    changes
        .into_iter()
        .filter_map(|mut change| {
            let actual = set.get(&change.field).cloned();
            if change.before.is_some() && change.before != actual {
                notes.ignore(
                    format!("diff: {} was {}", change.field, change.before.clone().unwrap_or(Value::Null)),
                    format!(
                        "`before` has {}; the diff was written against another configuration, `before` is used",
                        actual.clone().map_or_else(|| "it unset".to_string(), |v| v.to_string())
                    ),
                );
            }
            change.before = actual;
            (change.before != change.after).then_some(change)
        })
        .collect()
}

fn triage_change(
    catalog: &Catalog,
    before: &TrainingConfig,
    after_cfg: TrainingConfig,
    changes: Vec<SettingChange>,
    recipe: Option<String>,
    mut notes: InputNotes,
) -> Result<TriageOomOutput, ToolError> {
    let cards = catalog.cost();
    notes.note_calibration(cards, after_cfg.hardware.as_deref());
    let before_notes = InputNotes::for_config(cards, before, None);
    let after_notes = InputNotes::for_config(cards, &after_cfg, None);
    for i in before_notes.ignored_settings {
        notes.ignore(format!("before: {}", i.key), i.reason);
    }
    for i in after_notes.ignored_settings {
        if !notes
            .ignored_settings
            .iter()
            .any(|n| n.key.ends_with(&i.key))
        {
            notes.ignore(format!("after: {}", i.key), i.reason);
        }
    }
    for a in before_notes.assumed_defaults {
        notes.assume(&a.key, a.value, a.why);
    }
    let before_est = evaluate_config(cards, before)
        .map_err(|e| ToolError::field("before", e.to_string(), "fix the `before` configuration"))?;
    let after_est = evaluate_config(cards, &after_cfg)
        .map_err(|e| ToolError::field("after", e.to_string(), "fix the `after` configuration"))?;
    if changes.is_empty() {
        return Err(ToolError::field(
            "after",
            "it is identical to `before`",
            "pass the configuration the commit produced",
        ));
    }

    // Group related fields, apply each group alone to `before`.
    let mut groups: Vec<(String, Vec<SettingChange>)> = Vec::new();
    for change in &changes {
        let group = group_of(&change.field).to_string();
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, list)) => list.push(change.clone()),
            None => groups.push((group, vec![change.clone()])),
        }
    }
    let mut causes = Vec::new();
    for (_, group) in &groups {
        let Ok(alone_cfg) = apply_changes(before, group) else {
            continue;
        };
        let Ok(alone) = evaluate_config(cards, &alone_cfg) else {
            continue;
        };
        let memory_delta = alone.memory.peak_gib - before_est.memory.peak_gib;
        let time_delta = alone.performance.step_time_s - before_est.performance.step_time_s;
        for change in group {
            causes.push(Cause {
                field: change.field.clone(),
                before: change.before.clone().unwrap_or(Value::Null),
                after: change.after.clone().unwrap_or(Value::Null),
                memory_delta_gib: round(memory_delta, 2),
                step_time_delta_s: round(time_delta, 3),
                explanation: explain(&change.field, &before_est, &alone, memory_delta, time_delta),
            });
        }
    }
    let memory_regression = after_est.memory.peak_gib > before_est.memory.peak_gib;
    causes.sort_by(|a, b| {
        if memory_regression || !after_est.fits {
            b.memory_delta_gib.total_cmp(&a.memory_delta_gib)
        } else {
            b.step_time_delta_s.total_cmp(&a.step_time_delta_s)
        }
        .then(a.field.cmp(&b.field))
    });

    let fixes = if after_est.fits {
        Vec::new()
    } else {
        fixes_for(catalog, &after_cfg, &after_est, &causes)
    };
    let components = component_deltas(&before_est, &after_est);
    let rationale = triage_rationale(&before_est, &after_est, &causes, &components, &fixes);
    Ok(TriageOomOutput {
        before: summary(&before_est),
        after: summary(&after_est),
        memory_delta_gib: round(after_est.memory.peak_gib - before_est.memory.peak_gib, 2),
        step_time_delta_s: round(
            after_est.performance.step_time_s - before_est.performance.step_time_s,
            3,
        ),
        causes,
        components,
        fixes,
        after_config: after_cfg,
        recipe,
        other_recipes: Vec::new(),
        measured: None,
        rationale: format!("{rationale}{}", notes.markdown()),
        notes,
        citations: citations(
            catalog,
            &[
                ("moe-memory-triage", "triage steps"),
                ("moe-memory-triage", "usual culprits"),
                ("moe-memory-triage", "reading the memory breakdown"),
                ("moe-parallelism-and-recompute", "recompute modules"),
            ],
        ),
    })
}
