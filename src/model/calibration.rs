//! Calibration data and replay: parse the Megatron-Bridge performance rows
//! (`perf-summary.psv`) and the measured memory stages, turn each into a training
//! configuration, evaluate it, and report measured vs predicted. Pure: takes text and
//! lookup functions, does no I/O.
//!
//! This file reads the rows and the settings behind them; `stages.rs` the memory stages,
//! `replay.rs` the replay and its statistics, `markdown.rs` the validation page's tables.

use serde::{Deserialize, Serialize};

use super::config::{Precision, TrainingConfig};
use super::flops::{model_flops_per_token, model_flops_per_token_counted, CountingRules};
use super::{evaluate, Architecture, CostConstants, Hardware, TimeBreakdown};

mod markdown;
mod replay;
mod stages;
pub use markdown::{perf_rows_table, render_markdown};
pub use replay::*;
pub use stages::*;

/// One row of `perf-summary.psv`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerfRow {
    pub release: String,
    pub model_label: String,
    pub model_id: String,
    pub mtp_layers: Option<u32>,
    pub hardware: String,
    pub num_gpus: u32,
    pub precision_label: String,
    pub precision: Precision,
    pub global_batch_size: u32,
    pub micro_batch_size: u32,
    pub seq_length: u64,
    pub fsdp: bool,
    pub tp: u32,
    pub pp: u32,
    pub cp: u32,
    pub vpp: u32,
    pub ep: u32,
    pub tokens_per_second_per_gpu: f64,
    pub model_tflops_per_gpu: f64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrationError {
    #[error("line {line}: {message}")]
    Row { line: usize, message: String },
    #[error("stage file: {0}")]
    Stages(String),
    #[error("perf-recipes.yaml: {0}")]
    Recipes(String),
    #[error("perf-release-settings.yaml: {0}")]
    ReleaseSettings(String),
}

/// First number in a cell such as `4 (8)` or `338 (330)`.
fn leading_number(cell: &str) -> Option<f64> {
    cell.split_whitespace().next()?.trim().parse().ok()
}

fn model_id(label: &str) -> Option<(&'static str, Option<u32>)> {
    let l = label.to_ascii_lowercase();
    if l.starts_with("deepseekv3") {
        Some((
            "deepseek-v3",
            if l.contains("w/o mtp") { Some(0) } else { None },
        ))
    } else if l.starts_with("gpt oss 120b") {
        Some(("gpt-oss-120b", None))
    } else if l.starts_with("qwen3_30b") {
        Some(("qwen3-30b-a3b", None))
    } else if l.starts_with("qwen3_235b") {
        Some(("qwen3-235b-a22b", None))
    } else if l.starts_with("kimi_k2") {
        Some(("kimi-k2", None))
    } else if l.starts_with("llama3_8b") {
        Some(("llama3-8b", None))
    } else if l.starts_with("llama3_70b") {
        Some(("llama3-70b", None))
    } else if l.starts_with("llama3.1_405b") {
        Some(("llama3.1-405b", None))
    } else if l.starts_with("nemotron_3_nano") {
        Some(("nemotron-3-nano-30b-a3b", None))
    } else {
        None
    }
}

/// Precision of a table cell. `-` (column absent in that release) is read as the FP8 recipe
/// of the era: MXFP8 on Blackwell, FP8 current scaling on Hopper (the release settings'
/// `precision_resolved` corrects a row where that era read is wrong). Plain `FP8` is current
/// (per-tensor) scaling on every GPU: the H100 rows match Megatron-Bridge's `fp8_cs` recipes,
/// its launcher offers no other 8-bit recipe there, release 25.11 labels the same runs FP8-CS,
/// and the Blackwell tables that say `FP8` list MXFP8 and NVFP4 beside it.
fn precision_of(label: &str, hardware: &str) -> Option<Precision> {
    let hopper = hardware.starts_with('h');
    match label.trim().to_ascii_uppercase().as_str() {
        "-" => Some(if hopper {
            Precision::Fp8Tensorwise
        } else {
            Precision::Mxfp8
        }),
        "FP8" => Some(Precision::Fp8Tensorwise),
        other => Precision::from_label(other),
    }
}

/// Release label as comparable numbers (`26.04.01` -> [26, 4, 1]).
fn release_key(release: &str) -> Vec<u32> {
    release
        .split('.')
        .map(|part| part.trim().parse().unwrap_or(0))
        .collect()
}

impl PerfRow {
    /// Same model label, system, size, precision, layout and batch as `other`.
    fn same_run_as(&self, other: &PerfRow) -> bool {
        self.model_label == other.model_label
            && self.hardware == other.hardware
            && self.num_gpus == other.num_gpus
            && self.precision == other.precision
            && (self.tp, self.pp, self.vpp, self.cp, self.ep)
                == (other.tp, other.pp, other.vpp, other.cp, other.ep)
            && (
                self.micro_batch_size,
                self.global_batch_size,
                self.seq_length,
            ) == (
                other.micro_batch_size,
                other.global_batch_size,
                other.seq_length,
            )
    }
}

/// Indices of rows that a newer release re-measured with the identical run. The software
/// changed between releases (the same Qwen3-30B layout on 8 GB200 reads 547, 599 and 936
/// TFLOP/s over three releases), the recipe settings describe the current one, and the model
/// predicts the current one: only the newest measurement of a run counts in the statistics.
/// A newer row counts as the identical run only where its own release configured exactly the
/// table's layout (`SettingsSource::is_verified`): otherwise the table's layout columns may
/// have been carried over from the older row while the release ran another layout (26.02.01
/// Qwen3-30B on 16 H100 repeats 26.02's PP2 VP12 EP8, while v0.3.1 configures EP16 PP1, and
/// its 208 TFLOP/s is what 26.04 measured for EP16 PP1).
pub fn superseded_rows(rows: &[PerfRow], known: &RunSettings) -> Vec<bool> {
    let verified: Vec<bool> = rows
        .iter()
        .map(|row| row.to_config_with(known).1.is_verified())
        .collect();
    rows.iter()
        .map(|row| {
            rows.iter().zip(&verified).any(|(other, &verified)| {
                verified
                    && other.same_run_as(row)
                    && release_key(&other.release) > release_key(&row.release)
            })
        })
        .collect()
}

/// Parse `perf-summary.psv` text. Comment lines start with `#`; the header starts with `rel|`.
pub fn parse_perf_summary(text: &str) -> Result<Vec<PerfRow>, CalibrationError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("rel|") {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let err = |message: String| CalibrationError::Row {
            line: line_no,
            message,
        };
        if cells.len() != 18 {
            return Err(err(format!("expected 18 columns, found {}", cells.len())));
        }
        let num = |idx: usize, name: &str| -> Result<f64, CalibrationError> {
            leading_number(cells[idx]).ok_or_else(|| err(format!("bad {name} `{}`", cells[idx])))
        };
        let (id, mtp) =
            model_id(cells[2]).ok_or_else(|| err(format!("unknown model `{}`", cells[2])))?;
        let hardware = cells[3].to_ascii_lowercase();
        let precision = precision_of(cells[5], &hardware)
            .ok_or_else(|| err(format!("unknown precision `{}`", cells[5])))?;
        // `n/a`: no virtual pipeline; no experts (dense models' tables).
        let size_or_one = |idx: usize, name: &str| -> Result<f64, CalibrationError> {
            if cells[idx] == "n/a" {
                Ok(1.0)
            } else {
                num(idx, name)
            }
        };
        let vpp = size_or_one(13, "VP")?;
        rows.push(PerfRow {
            release: cells[0].to_string(),
            model_label: cells[2].to_string(),
            model_id: id.to_string(),
            mtp_layers: mtp,
            hardware,
            num_gpus: num(4, "gpus")? as u32,
            precision_label: cells[5].to_string(),
            precision,
            global_batch_size: num(6, "GBS")? as u32,
            micro_batch_size: num(7, "MBS")? as u32,
            seq_length: num(8, "seq")? as u64,
            fsdp: !matches!(cells[9], "-" | "0"),
            tp: num(10, "TP")? as u32,
            pp: num(11, "PP")? as u32,
            cp: num(12, "CP")? as u32,
            vpp: vpp as u32,
            ep: size_or_one(14, "EP")? as u32,
            tokens_per_second_per_gpu: num(16, "tok/s/GPU")?,
            model_tflops_per_gpu: num(17, "TFLOP/s/GPU")?,
        });
    }
    Ok(rows)
}

impl PerfRow {
    /// The training configuration of this row. Settings the table does not give follow the
    /// performance recipes' common choices, identically for every row: ETP 1, the GPU's
    /// default dispatcher, 1F1B EP overlap when EP > 1, TP comm overlap when TP > 1,
    /// DP overlap, BF16 gradient buffers (benchmark mode), fused cross entropy, TE-scoped CUDA
    /// graphs on Blackwell, no recompute. `to_config_with` overlays the real recipe's settings.
    pub fn to_config(&self) -> TrainingConfig {
        let blackwell = !self.hardware.starts_with('h');
        TrainingConfig {
            model: Some(super::ModelSpec::Id(self.model_id.clone())),
            hardware: Some(self.hardware.clone()),
            num_gpus: Some(self.num_gpus),
            seq_length: Some(self.seq_length),
            micro_batch_size: Some(self.micro_batch_size),
            global_batch_size: Some(self.global_batch_size),
            precision: Some(self.precision),
            tensor_model_parallel_size: Some(self.tp),
            pipeline_model_parallel_size: Some(self.pp),
            virtual_pipeline_model_parallel_size: Some(self.vpp),
            context_parallel_size: Some(self.cp),
            expert_model_parallel_size: Some(self.ep),
            expert_tensor_parallel_size: Some(1),
            mtp_num_layers: self.mtp_layers,
            overlap_moe_expert_parallel_comm: Some(self.ep > 1 && self.pp > 1),
            tp_comm_overlap: Some(self.tp > 1),
            overlap_grad_reduce: Some(true),
            // Megatron-Bridge's benchmark mode keeps gradient buffers in BF16.
            grad_reduce_in_fp32: Some(false),
            overlap_param_gather: Some(true),
            cross_entropy_loss_fusion: Some(true),
            use_megatron_fsdp: Some(self.fsdp),
            cuda_graph_impl: blackwell.then_some(super::config::CudaGraphImpl::TransformerEngine),
            cuda_graph_scope: blackwell.then(|| {
                use super::config::CudaGraphScope::*;
                vec![Attn, MoeRouter, MoePreprocess]
            }),
            ..TrainingConfig::default()
        }
    }

    pub fn label(&self) -> String {
        format!(
            "{} {} {}×{} {} TP{} PP{} VP{} CP{} EP{} MBS{} GBS{}",
            self.release,
            self.model_label,
            self.num_gpus,
            self.hardware.to_ascii_uppercase(),
            self.precision_label,
            self.tp,
            self.pp,
            self.vpp,
            self.cp,
            self.ep,
            self.micro_batch_size,
            self.global_batch_size
        )
    }
}

/// The settings of one Megatron-Bridge performance recipe (`perf-recipes.yaml`): what the
/// measured run really used where the table is silent (recompute, CUDA graphs, dispatcher,
/// overlaps, gradient dtype, optimizer precision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerfRecipe {
    pub function: String,
    pub model: String,
    pub hardware: String,
    pub num_gpus: u32,
    pub precision: String,
    #[serde(default)]
    pub settings: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub notes: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PerfRecipeFile {
    recipes: Vec<PerfRecipe>,
}

/// Parse `perf-recipes.yaml`.
pub fn parse_perf_recipes(yaml: &str) -> Result<Vec<PerfRecipe>, CalibrationError> {
    let file: PerfRecipeFile =
        serde_yaml::from_str(yaml).map_err(|e| CalibrationError::Recipes(e.to_string()))?;
    Ok(file.recipes)
}

/// The settings one table row was measured with, as configured in Megatron-Bridge at that
/// row's release (`perf-release-settings.yaml`). Keys and conventions are those of
/// `PerfRecipe::settings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseRowSettings {
    pub release: String,
    /// The table's model column, verbatim.
    pub model: String,
    /// The table's system column (GPU), verbatim.
    pub system: String,
    pub gpus: u32,
    /// The table's precision column, verbatim.
    pub precision: String,
    pub tp: u32,
    pub pp: u32,
    pub cp: u32,
    pub vp: u32,
    pub ep: u32,
    pub mbs: u32,
    pub gbs: u32,
    /// Where in that release's code the settings come from.
    pub source: String,
    /// Whether that release had a configuration with exactly this row's layout.
    pub layout_match: bool,
    /// The recipe the row's figure was measured with, where the table's column leaves it
    /// open (25.09 `-`: its unparenthesised figures are FP8 current scaling on every GPU).
    #[serde(default)]
    pub precision_resolved: Option<String>,
    #[serde(default)]
    pub settings: serde_json::Map<String, serde_json::Value>,
}

/// How the releases listed counted the model FLOPs behind their TFLOP/s figures, where that
/// differs from the model's count (`perf-release-settings.yaml`, `flops_counters`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseCounting {
    pub releases: Vec<String>,
    pub rules: CountingRules,
    /// Where in that release's code the counter shows it.
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ReleaseSettingsFile {
    rows: Vec<ReleaseRowSettings>,
    #[serde(default)]
    flops_counters: Vec<ReleaseCounting>,
}

fn parse_release_file(yaml: &str) -> Result<ReleaseSettingsFile, CalibrationError> {
    serde_yaml::from_str(yaml).map_err(|e| CalibrationError::ReleaseSettings(e.to_string()))
}

/// Parse `perf-release-settings.yaml`.
pub fn parse_release_settings(yaml: &str) -> Result<Vec<ReleaseRowSettings>, CalibrationError> {
    Ok(parse_release_file(yaml)?.rows)
}

/// Parse the FLOPs-counting rules of `perf-release-settings.yaml` (`flops_counters`).
pub fn parse_release_counting(yaml: &str) -> Result<Vec<ReleaseCounting>, CalibrationError> {
    Ok(parse_release_file(yaml)?.flops_counters)
}

/// Where the settings a table does not give come from: the row's own release first, then
/// the current performance recipes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSettings {
    pub release_rows: Vec<ReleaseRowSettings>,
    pub recipes: Vec<PerfRecipe>,
    /// Releases whose FLOPs counter differs from the model's.
    pub counting: Vec<ReleaseCounting>,
}

impl RunSettings {
    /// The factor that turns `row`'s published TFLOP/s into the model's FLOPs count: the
    /// model's FLOPs per token over those its release's counter counted (1 where the release
    /// counted as the model does).
    pub fn model_count_factor(
        &self,
        row: &PerfRow,
        arch: &Architecture,
        cfg: &TrainingConfig,
    ) -> f64 {
        let Some(counting) = self
            .counting
            .iter()
            .find(|c| c.releases.iter().any(|r| r == &row.release))
        else {
            return 1.0;
        };
        let mtp = cfg.mtp_num_layers.unwrap_or(arch.mtp_num_layers);
        let model = model_flops_per_token(arch, mtp, row.seq_length).total();
        let counted = model_flops_per_token_counted(arch, mtp, row.seq_length, counting.rules);
        if model > 0.0 && counted > 0.0 {
            model / counted
        } else {
            1.0
        }
    }
}

/// How a table row found the settings it is replayed with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SettingsSource {
    /// The row's own release configured this run (the source names the code location). With
    /// `layout_match` false that release configured this model, GPU and precision with
    /// another layout than the table's columns, and the row is replayed at the release's
    /// layout: where the two disagree, the measurement matches the code (see `overlay`).
    Release { source: String, layout_match: bool },
    /// A recipe with this row's model, GPU, precision and exact layout.
    Recipe(String),
    /// No recipe with this layout (an older release); the recipe for the same model, GPU and
    /// precision lends its non-layout settings.
    SameModelGpuPrecision(String),
    /// No recipe for this model, GPU and precision: the common defaults of `to_config`.
    Assumed,
}

impl SettingsSource {
    /// Whether the replay knows the settings the row ran with: its own release configured
    /// exactly this layout, or a recipe with exactly this layout lends them. A row whose
    /// table layout disagrees with its release's code is replayed at the code's layout, an
    /// inference from the evidence in `overlay`, so its error measures that inference as
    /// much as the model.
    pub fn is_verified(&self) -> bool {
        match self {
            SettingsSource::Release { layout_match, .. } => *layout_match,
            SettingsSource::Recipe(_) => true,
            SettingsSource::SameModelGpuPrecision(_) | SettingsSource::Assumed => false,
        }
    }

    pub fn label(&self) -> String {
        match self {
            SettingsSource::Release {
                source,
                layout_match,
            } => {
                // "v0.3.0:path/to/file.py CONFIG_NAME (...)" -> "v0.3.0 `CONFIG_NAME`".
                let (tag, rest) = source.split_once(':').unwrap_or(("", source.as_str()));
                let name = rest.split_whitespace().nth(1).unwrap_or(rest);
                let other = if *layout_match {
                    ""
                } else {
                    ", release's layout"
                };
                format!("release {tag} `{name}`{other}")
            }
            SettingsSource::Recipe(f) => format!("recipe `{f}`"),
            SettingsSource::SameModelGpuPrecision(f) => format!("settings of `{f}`"),
            SettingsSource::Assumed => "assumed".to_string(),
        }
    }
}

/// Keys the table itself gives for a row and a recipe never overrides: what was run, where.
const TABLE_RUN_KEYS: &[&str] = &["model", "hardware", "num_gpus", "seq_length", "precision"];

/// The table's layout keys (parallel sizes and batch): a recipe never overrides them either,
/// except that a release's own layout replaces the table's
/// (`OverlayScope::ReleaseReplacesTable`).
const TABLE_LAYOUT_KEYS: &[&str] = &[
    "micro_batch_size",
    "global_batch_size",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
];

/// Layout keys that only hold for the recipe's own layout.
const LAYOUT_KEYS: &[&str] = &[
    "pipeline_model_parallel_layout",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "sequence_parallel",
];

fn setting_u32(recipe: &PerfRecipe, key: &str) -> Option<u32> {
    recipe.settings.get(key)?.as_u64().map(|v| v as u32)
}

impl PerfRow {
    fn layout_matches(&self, r: &PerfRecipe) -> bool {
        let vpp = setting_u32(r, "virtual_pipeline_model_parallel_size")
            .unwrap_or(1)
            .max(1);
        r.num_gpus == self.num_gpus
            && setting_u32(r, "tensor_model_parallel_size") == Some(self.tp)
            && setting_u32(r, "pipeline_model_parallel_size") == Some(self.pp)
            && vpp == self.vpp.max(1)
            && setting_u32(r, "context_parallel_size").unwrap_or(1) == self.cp
            && setting_u32(r, "expert_model_parallel_size") == Some(self.ep)
            && setting_u32(r, "micro_batch_size") == Some(self.micro_batch_size)
    }

    fn is_row_of(&self, r: &ReleaseRowSettings) -> bool {
        r.release == self.release
            && r.model == self.model_label
            && r.system.eq_ignore_ascii_case(&self.hardware)
            && r.gpus == self.num_gpus
            && r.precision == self.precision_label
            && (r.tp, r.pp, r.cp, r.vp.max(1), r.ep)
                == (self.tp, self.pp, self.cp, self.vpp.max(1), self.ep)
            && (r.mbs, r.gbs) == (self.micro_batch_size, self.global_batch_size)
    }

    /// The row's configuration with the settings it was measured with overlaid: those of its
    /// own release where known, else those of the current Megatron-Bridge recipe (see
    /// `SettingsSource`). Keys the cost model does not read are dropped.
    pub fn to_config_with(&self, known: &RunSettings) -> (TrainingConfig, SettingsSource) {
        let base = self.to_config();
        if let Some(r) = known.release_rows.iter().find(|r| self.is_row_of(r)) {
            let source = SettingsSource::Release {
                source: r.source.clone(),
                layout_match: r.layout_match,
            };
            let scope = if r.layout_match {
                OverlayScope::WithLayoutDetails
            } else {
                OverlayScope::ReleaseReplacesTable
            };
            if let Some(mut cfg) = overlay(&base, &r.settings, scope) {
                if let Some(p) = r
                    .precision_resolved
                    .as_deref()
                    .and_then(Precision::from_label)
                {
                    cfg.precision = Some(p);
                }
                return (cfg, source);
            }
        }
        let same_kind: Vec<&PerfRecipe> = known
            .recipes
            .iter()
            .filter(|r| r.model == self.model_id && r.hardware == self.hardware)
            .filter(|r| Precision::from_label(&r.precision) == Some(self.precision))
            .collect();
        let exact = same_kind.iter().find(|r| self.layout_matches(r));
        // Prefer the recipe with the same GPU count, then the first listed.
        let nearest = same_kind
            .iter()
            .find(|r| r.num_gpus == self.num_gpus)
            .or_else(|| same_kind.first());
        let (recipe, source) = match (exact, nearest) {
            (Some(r), _) => (*r, SettingsSource::Recipe(r.function.clone())),
            (None, Some(r)) => (
                *r,
                SettingsSource::SameModelGpuPrecision(r.function.clone()),
            ),
            (None, None) => return (base, SettingsSource::Assumed),
        };
        let scope = if matches!(source, SettingsSource::Recipe(_)) {
            OverlayScope::WithLayoutDetails
        } else {
            OverlayScope::SettingsOnly
        };
        match overlay(&base, &recipe.settings, scope) {
            Some(cfg) => (cfg, source),
            None => (base, SettingsSource::Assumed),
        }
    }
}

/// "TP1 PP1 VP1 CP1 EP64 MBS4 GBS512": the layout a row is replayed at, in the table's terms.
fn layout_summary(cfg: &TrainingConfig) -> String {
    let size = |v: Option<u32>| v.unwrap_or(1);
    format!(
        "TP{} PP{} VP{} CP{} EP{} MBS{} GBS{}",
        size(cfg.tensor_model_parallel_size),
        size(cfg.pipeline_model_parallel_size),
        size(cfg.virtual_pipeline_model_parallel_size),
        size(cfg.context_parallel_size),
        size(cfg.expert_model_parallel_size),
        size(cfg.micro_batch_size),
        cfg.global_batch_size
            .map_or_else(|| "?".to_string(), |g| g.to_string()),
    )
}

/// Which of a recipe's settings replace the row's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OverlayScope {
    /// Settings made for another layout: none of the layout-specific keys.
    SettingsOnly,
    /// Settings made for the row's exact layout: the layout-specific keys too.
    WithLayoutDetails,
    /// The row's own release configured another layout than the table's columns: its layout
    /// (parallel sizes, micro and global batch) replaces the table's. Every such row where
    /// the evidence can tell the two apart sides with the code: 26.02.01 Qwen3-30B on 16 H100
    /// (table PP2 VP12 EP8, code EP16 PP1) measured 208 TFLOP/s, as 26.04 did at EP16 PP1;
    /// 25.11 GPT-OSS on 64 B200 (table EP8, code EP64) measured 223, as 26.02 did at EP64
    /// (219), where the EP8 runs of later releases are far faster; 25.11 GPT-OSS on 64 H100
    /// (table MBS 4, code MBS 1) does not fit in memory at MBS 4 by the memory model that
    /// misses no other MoE row. None of the MoE rows sides with the table. Megatron-Bridge's
    /// dense rows (held out) do, three of their ten: 25.11's Llama-3.1 405B on 256 GB200 and
    /// GB300 ran the layouts of the next release's presets (and measured what those measured),
    /// 25.11's Llama-3-8B on 8 H100 the previous release's FSDP config; such rows stay outside
    /// the verified subset, whose error is the model's alone.
    ReleaseReplacesTable,
}

/// `base` with the known settings of a recipe written over it, as far as `scope` allows.
/// The model, GPU, GPU count, sequence length and precision always stay the table's.
fn overlay(
    base: &TrainingConfig,
    settings: &serde_json::Map<String, serde_json::Value>,
    scope: OverlayScope,
) -> Option<TrainingConfig> {
    let Ok(serde_json::Value::Object(mut merged)) = serde_json::to_value(base) else {
        return None;
    };
    for (key, value) in settings {
        let key_str = key.as_str();
        let known = super::config::KNOWN_KEYS.contains(&key_str);
        let table_layout = TABLE_LAYOUT_KEYS.contains(&key_str);
        let table = TABLE_RUN_KEYS.contains(&key_str) || table_layout;
        let release_layout = scope == OverlayScope::ReleaseReplacesTable && table_layout;
        let layout_only = LAYOUT_KEYS.contains(&key_str) && scope == OverlayScope::SettingsOnly;
        // Python's `None` for the virtual pipeline size means no interleaving.
        if release_layout && key_str == "virtual_pipeline_model_parallel_size" && value.is_null() {
            merged.insert(key.clone(), serde_json::Value::from(1));
            continue;
        }
        let unknown_value = value.is_null() || value.as_str() == Some("unknown");
        if known && (!table || release_layout) && !layout_only && !unknown_value {
            merged.insert(key.clone(), value.clone());
        }
    }
    TrainingConfig::from_fields(&serde_json::Value::Object(merged)).ok()
}
