//! Calibration data and replay: parse the Megatron-Bridge performance rows
//! (`perf-summary.psv`) and the measured memory stages, turn each into a training
//! configuration, evaluate it, and report measured vs predicted. Pure: takes text and
//! lookup functions, does no I/O.

use serde::{Deserialize, Serialize};

use super::config::{Precision, TrainingConfig};
use super::{evaluate, Architecture, CostConstants, Hardware};

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
    } else {
        None
    }
}

/// Precision of a table cell. `-` (column absent in that release) is read as the FP8 recipe
/// of the era: MXFP8 on Blackwell, blockwise FP8 on Hopper. Plain `FP8` on Hopper is blockwise.
fn precision_of(label: &str, hardware: &str) -> Option<Precision> {
    let hopper = hardware.starts_with('h');
    match label.trim().to_ascii_uppercase().as_str() {
        "-" | "FP8" => Some(if hopper {
            Precision::Fp8Blockwise
        } else {
            Precision::Mxfp8
        }),
        other => Precision::from_label(other),
    }
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
        let vpp = if cells[13] == "n/a" {
            1.0
        } else {
            num(13, "VP")?
        };
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
            ep: num(14, "EP")? as u32,
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
    /// DP overlap, fused cross entropy, TE-scoped CUDA graphs on Blackwell, no recompute.
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

/// Measured values attached to a memory stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageMeasured {
    pub model_tflops_per_gpu: f64,
    pub peak_memory_gb: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryStage {
    pub id: String,
    pub title: String,
    pub config: serde_json::Value,
    pub measured: StageMeasured,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StageFile {
    stages: Vec<MemoryStage>,
}

/// Parse the measured-stages YAML (`qwen35-35b-a3b-128k-stages.yaml`).
pub fn parse_memory_stages(
    yaml: &str,
) -> Result<Vec<(MemoryStage, TrainingConfig)>, CalibrationError> {
    let file: StageFile =
        serde_yaml::from_str(yaml).map_err(|e| CalibrationError::Stages(e.to_string()))?;
    file.stages
        .into_iter()
        .map(|s| {
            let cfg = TrainingConfig::from_json_value(&s.config)
                .map_err(|e| CalibrationError::Stages(format!("stage {}: {e}", s.id)))?;
            Ok((s, cfg))
        })
        .collect()
}

/// Measured vs predicted for one replayed configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayRow {
    pub label: String,
    pub measured_tflops: f64,
    pub predicted_tflops: f64,
    /// (predicted − measured) / measured.
    pub tflops_error: f64,
    pub measured_peak_gb: Option<f64>,
    pub predicted_peak_gb: Option<f64>,
    pub memory_error: Option<f64>,
    pub fits: bool,
    pub violations: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    pub perf_rows: Vec<ReplayRow>,
    pub memory_stages: Vec<ReplayRow>,
    pub tflops_median_abs_error: f64,
    pub tflops_p90_abs_error: f64,
    pub stage_tflops_median_abs_error: f64,
    pub stage_memory_median_abs_error: f64,
    pub stage_memory_max_abs_error: f64,
    pub skipped: Vec<String>,
}

/// Percentile (0..=1) of absolute values, nearest-rank.
pub fn abs_percentile(values: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = values
        .iter()
        .map(|x| x.abs())
        .filter(|x| x.is_finite())
        .collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Median of absolute values (mean of the two middle values for even counts).
pub fn abs_median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values
        .iter()
        .map(|x| x.abs())
        .filter(|x| x.is_finite())
        .collect();
    signed_median(&mut v)
}

/// Evaluate every row and stage. `arch_of` and `hw_of` resolve card ids.
pub fn replay<'a>(
    rows: &[PerfRow],
    stages: &[(MemoryStage, TrainingConfig)],
    arch_of: impl Fn(&str) -> Option<&'a Architecture>,
    hw_of: impl Fn(&str) -> Option<&'a Hardware>,
    k: &CostConstants,
) -> ReplayReport {
    let mut skipped = Vec::new();
    let mut perf_rows = Vec::new();
    for row in rows {
        let (Some(a), Some(h)) = (arch_of(&row.model_id), hw_of(&row.hardware)) else {
            skipped.push(format!("{}: unknown model or hardware card", row.label()));
            continue;
        };
        let est = evaluate(a, h, k, &row.to_config());
        perf_rows.push(ReplayRow {
            label: row.label(),
            measured_tflops: row.model_tflops_per_gpu,
            predicted_tflops: est.performance.model_tflops_per_gpu,
            tflops_error: est.performance.model_tflops_per_gpu / row.model_tflops_per_gpu - 1.0,
            measured_peak_gb: None,
            predicted_peak_gb: Some(est.memory.peak_gib * 1.073_741_824),
            memory_error: None,
            fits: est.fits,
            violations: est.violations.iter().map(|v| v.code.clone()).collect(),
        });
    }
    let mut memory_stages = Vec::new();
    for (stage, cfg) in stages {
        let model = match &cfg.model {
            Some(super::ModelSpec::Id(id)) => id.as_str(),
            _ => "",
        };
        let (Some(a), Some(h)) = (arch_of(model), hw_of(cfg.hardware.as_deref().unwrap_or("")))
        else {
            skipped.push(format!(
                "stage {}: unknown model or hardware card",
                stage.id
            ));
            continue;
        };
        let est = evaluate(a, h, k, cfg);
        let predicted_gb = est.memory.peak_gib * 1.073_741_824;
        memory_stages.push(ReplayRow {
            label: format!("{}: {}", stage.id, stage.title),
            measured_tflops: stage.measured.model_tflops_per_gpu,
            predicted_tflops: est.performance.model_tflops_per_gpu,
            tflops_error: est.performance.model_tflops_per_gpu
                / stage.measured.model_tflops_per_gpu
                - 1.0,
            measured_peak_gb: Some(stage.measured.peak_memory_gb),
            predicted_peak_gb: Some(predicted_gb),
            memory_error: Some(predicted_gb / stage.measured.peak_memory_gb - 1.0),
            fits: est.fits,
            violations: est.violations.iter().map(|v| v.code.clone()).collect(),
        });
    }
    let perf_errors: Vec<f64> = perf_rows.iter().map(|r| r.tflops_error).collect();
    let stage_tflops: Vec<f64> = memory_stages.iter().map(|r| r.tflops_error).collect();
    let stage_mem: Vec<f64> = memory_stages
        .iter()
        .filter_map(|r| r.memory_error)
        .collect();
    ReplayReport {
        tflops_median_abs_error: abs_median(&perf_errors),
        tflops_p90_abs_error: abs_percentile(&perf_errors, 0.9),
        stage_tflops_median_abs_error: abs_median(&stage_tflops),
        stage_memory_median_abs_error: abs_median(&stage_mem),
        stage_memory_max_abs_error: abs_percentile(&stage_mem, 1.0),
        perf_rows,
        memory_stages,
        skipped,
    }
}

/// Render the replay as Markdown (the body of `docs/validation.md`).
pub fn render_markdown(report: &ReplayReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let pct = |x: f64| format!("{:+.1}%", x * 100.0);
    let _ = writeln!(out, "## Throughput: Megatron-Bridge performance rows\n");
    let _ = writeln!(
        out,
        "Model TFLOP/s per GPU (Megatron's count). Median absolute error **{:.1}%**, 90th percentile **{:.1}%** over {} rows.\n",
        report.tflops_median_abs_error * 100.0,
        report.tflops_p90_abs_error * 100.0,
        report.perf_rows.len()
    );
    let _ = writeln!(
        out,
        "| configuration | measured | predicted | error | notes |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---|");
    for r in &report.perf_rows {
        let notes = if r.violations.is_empty() {
            String::new()
        } else {
            r.violations.join(", ")
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {} | {} |",
            r.label,
            r.measured_tflops,
            r.predicted_tflops,
            pct(r.tflops_error),
            notes
        );
    }
    let _ = writeln!(
        out,
        "\n## Memory and throughput: Qwen3.5-35B-A3B, 32×H100, 128K (five tuning stages)\n"
    );
    let _ = writeln!(
        out,
        "Peak memory median absolute error **{:.1}%** (max {:.1}%); TFLOP/s median absolute error **{:.1}%**.\n",
        report.stage_memory_median_abs_error * 100.0,
        report.stage_memory_max_abs_error * 100.0,
        report.stage_tflops_median_abs_error * 100.0
    );
    let _ = writeln!(
        out,
        "| stage | measured GB | predicted GB | error | measured TFLOP/s | predicted | error |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    for r in &report.memory_stages {
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.2} | {} | {:.1} | {:.1} | {} |",
            r.label,
            r.measured_peak_gb.unwrap_or(0.0),
            r.predicted_peak_gb.unwrap_or(0.0),
            pct(r.memory_error.unwrap_or(0.0)),
            r.measured_tflops,
            r.predicted_tflops,
            pct(r.tflops_error)
        );
    }
    if !report.skipped.is_empty() {
        let _ = writeln!(out, "\nSkipped: {}", report.skipped.join("; "));
    }
    out
}

/// GEMM precision class a row calibrates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GemmClass {
    Bf16,
    Fp8,
}

/// A fitted large-GEMM efficiency for one GPU and precision class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FittedEfficiency {
    pub hardware: String,
    pub class: GemmClass,
    pub efficiency: f64,
    pub rows: usize,
}

fn signed_median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// For each (GPU, precision class) group of rows, find the large-GEMM efficiency that makes
/// the group's median signed TFLOP/s error zero (bisection; efficiency kept in 0.05..0.95).
/// The other constants stay as given. This is how the hardware cards' `gemm_*` values are
/// fitted; the result is a suggestion, the cards remain the source of truth.
pub fn fit_gemm_efficiencies<'a>(
    rows: &[PerfRow],
    arch_of: impl Fn(&str) -> Option<&'a Architecture>,
    hardware: &[Hardware],
    k: &CostConstants,
) -> Vec<FittedEfficiency> {
    let mut out = Vec::new();
    for hw in hardware {
        for class in [GemmClass::Bf16, GemmClass::Fp8] {
            let group: Vec<&PerfRow> = rows
                .iter()
                .filter(|r| r.hardware == hw.id)
                .filter(|r| (r.precision == Precision::Bf16) == (class == GemmClass::Bf16))
                .collect();
            if group.is_empty() {
                continue;
            }
            let median_error = |eff: f64| -> f64 {
                let mut h = hw.clone();
                match class {
                    GemmClass::Bf16 => h.efficiency.gemm_bf16 = eff,
                    GemmClass::Fp8 => h.efficiency.gemm_fp8 = eff,
                }
                let mut errors: Vec<f64> = group
                    .iter()
                    .filter_map(|r| {
                        let a = arch_of(&r.model_id)?;
                        let est = evaluate(a, &h, k, &r.to_config());
                        Some(est.performance.model_tflops_per_gpu / r.model_tflops_per_gpu - 1.0)
                    })
                    .collect();
                signed_median(&mut errors)
            };
            let (mut lo, mut hi) = (0.05, 0.95);
            for _ in 0..30 {
                let mid = 0.5 * (lo + hi);
                if median_error(mid) > 0.0 {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            out.push(FittedEfficiency {
                hardware: hw.id.clone(),
                class,
                efficiency: 0.5 * (lo + hi),
                rows: group.len(),
            });
        }
    }
    out
}
