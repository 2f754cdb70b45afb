//! Predicted vs measured for a run whose Megatron log the user has: memory per reporting rank
//! (the rank's pipeline stage under Megatron's default rank order, where the pipeline
//! dimension is outermost), steady-state step time and TFLOP/s, and the terms that can explain
//! each gap.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::inputs::megatron_log::{read_megatron_log, MegatronLog, StepStatistics};
use crate::model::flops::{model_flops_per_token_counted, CountingRules};
use crate::model::uncertainty::Uncertainty;
use crate::model::{Architecture, Estimate, ModelSpec, TrainingConfig};

use super::common::{resolve_model, ToolError};
use super::feasibility::{check_feasibility, CheckFeasibilityOutput};

pub(crate) const MIB_PER_GIB: f64 = 1024.0;
/// `max reserved` this far above `max allocated` points at the caching allocator (cached
/// blocks and fragmentation) rather than at what the model counts.
const RESERVED_OVER_ALLOCATED: f64 = 1.15;
/// Without an error band (a catalog with no `cards/time-uncertainty.yaml`), a step-time gap
/// beyond this many percent is explained; smaller ones are within the time model's usual error
/// (docs/validation.md). With a band, its step-time range decides.
const STEP_GAP_EXPLAINED_PCT: f64 = 15.0;
/// Relative gap between the FLOPs per token a log's throughput implies and a count, beyond
/// which they are different counts (the log rounds its TFLOP/s and step time).
const FLOPS_COUNT_TOLERANCE: f64 = 0.05;

/// Megatron-LM's FLOPs per token for the run, GFLOP, where it differs from the model's own
/// count (`predicted`) by more than rounding: `num_floating_point_operations`
/// (`megatron/training/training.py`) stacks three FFN matrices only with `--swiglu`, which a
/// quick-GEGLU run leaves off, and has no sliding-window term.
fn megatron_lm_gflop_per_token(
    arch: &Architecture,
    config: &TrainingConfig,
    seq: u64,
    predicted: f64,
) -> Option<f64> {
    let mtp = config.mtp_num_layers.unwrap_or(arch.mtp_num_layers);
    let rules = CountingRules {
        gated_mlp_needs_silu: true,
        sliding_window_as_full: true,
        causal_attention_unmasked: false,
        mamba_inner_as_twice_hidden: true,
    };
    let counted = model_flops_per_token_counted(arch, mtp, seq, rules) / 1e9;
    (predicted > 0.0 && ((counted - predicted) / predicted).abs() > 1e-3).then_some(counted)
}

/// One rank's memory, measured and predicted.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RankMemory {
    pub rank: u32,
    pub pipeline_rank: u32,
    pub measured_max_allocated_gib: f64,
    pub measured_max_reserved_gib: f64,
    /// The model's allocated view for that stage (compares with `max allocated`).
    pub predicted_allocated_gib: f64,
    /// The model's peak for that pipeline stage (the reserved view, which fitting uses).
    pub predicted_peak_gib: f64,
    /// Predicted minus measured `max allocated`, over measured.
    pub allocated_error_pct: f64,
    /// Predicted peak minus measured `max reserved`, over measured.
    pub error_pct: f64,
}

/// The comparison, with what may explain each difference.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct LogComparison {
    pub memory: Vec<RankMemory>,
    pub steps: Option<StepStatistics>,
    pub predicted_step_time_s: f64,
    pub predicted_tflops_per_gpu: f64,
    pub step_time_error_pct: Option<f64>,
    /// The step times the prediction's error band gives (where its regime's measured runs
    /// landed against their predictions), seconds, shortest first; none without a band.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_step_range_s: Option<[f64; 2]>,
    /// Whether the measured step lies inside that range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_step_inside_range: Option<bool>,
    /// Model FLOPs per token the log's own throughput implies (Megatron's
    /// `num_floating_point_operations` over the tokens of a step), GFLOP.
    pub log_gflop_per_token: Option<f64>,
    /// The cost model's count for the same configuration, GFLOP.
    pub predicted_gflop_per_token: f64,
    /// Megatron-LM's count for the same configuration (`num_floating_point_operations`, which
    /// Megatron-Bridge's counter also was before v0.5.0), GFLOP, where it differs from the
    /// model's: it counts a gated MLP's third matrix only for SwiGLU and has no sliding-window
    /// term, so GPT-OSS (quick-GELU experts, 128-token windows) reads differently.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub megatron_lm_gflop_per_token: Option<f64>,
    pub explanations: Vec<String>,
}

fn pct(predicted: f64, measured: f64) -> f64 {
    if measured.abs() < f64::EPSILON {
        0.0
    } else {
        ((predicted - measured) / measured * 1000.0).round() / 10.0
    }
}

/// The pipeline stage of a global rank under Megatron's default rank order, where the pipeline
/// dimension is outermost (consecutive blocks of GPUs / PP ranks share a stage).
pub(crate) fn pipeline_stage(config: &TrainingConfig, rank: u32) -> u32 {
    let pp = config.pp().max(1);
    let ranks_per_stage = (config.num_gpus.unwrap_or(1) / pp).max(1);
    (rank / ranks_per_stage).min(pp - 1)
}

/// `catalog` resolves the run's architecture for the counts a log's throughput may use.
pub fn compare_with_log(
    catalog: &Catalog,
    config: &TrainingConfig,
    estimate: &Estimate,
    log: &MegatronLog,
) -> LogComparison {
    let gpus = config.num_gpus.unwrap_or(1).max(1);
    let mut explanations = Vec::new();
    let memory: Vec<RankMemory> = log
        .peak_memory_by_rank()
        .into_iter()
        .map(|report| {
            let pipeline_rank = pipeline_stage(config, report.rank);
            let predicted = estimate
                .memory
                .per_rank_peak_gib
                .get(pipeline_rank as usize)
                .copied()
                .unwrap_or(estimate.memory.peak_gib);
            let predicted_allocated = estimate
                .memory
                .per_rank_allocated_gib
                .get(pipeline_rank as usize)
                .copied()
                .unwrap_or(estimate.memory.allocated_gib);
            let allocated = report.max_allocated_mib / MIB_PER_GIB;
            let reserved = report.max_reserved_mib / MIB_PER_GIB;
            if reserved > allocated * RESERVED_OVER_ALLOCATED {
                explanations.push(format!(
                    "rank {}: `max reserved` is {:.1} GiB above `max allocated`: allocator caching and fragmentation (try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
                    report.rank,
                    reserved - allocated
                ));
            }
            RankMemory {
                rank: report.rank,
                pipeline_rank,
                measured_max_allocated_gib: (allocated * 100.0).round() / 100.0,
                measured_max_reserved_gib: (reserved * 100.0).round() / 100.0,
                predicted_allocated_gib: (predicted_allocated * 100.0).round() / 100.0,
                predicted_peak_gib: (predicted * 100.0).round() / 100.0,
                allocated_error_pct: pct(predicted_allocated, allocated),
                error_pct: pct(predicted, reserved),
            }
        })
        .collect();
    let steps = log.step_statistics();
    let predicted_step = estimate.performance.step_time_s;
    let step_time_error_pct = steps
        .as_ref()
        .map(|s| pct(predicted_step, s.median_step_ms / 1000.0));
    // The step times the band's measured runs give this prediction, and the measured step
    // read against them.
    let band = estimate.performance.uncertainty.as_ref();
    let predicted_step_range_s = band.map(|u| [u.step_time_low_s, u.step_time_high_s]);
    let measured_step = steps.as_ref().map(|s| s.median_step_ms / 1000.0);
    let measured_step_inside_range = band
        .zip(measured_step)
        .map(|(u, measured)| (u.step_time_low_s..=u.step_time_high_s).contains(&measured));
    if let (Some(measured), Some(err)) = (measured_step, step_time_error_pct) {
        let b = &estimate.performance.breakdown_s;
        // Past the band's range, or past the fixed threshold where there is no band.
        let (slower, faster) = match band {
            Some(u) => (measured > u.step_time_high_s, measured < u.step_time_low_s),
            None => (err < -STEP_GAP_EXPLAINED_PCT, err > STEP_GAP_EXPLAINED_PCT),
        };
        let runs_give = |u: &Uncertainty| {
            format!(
                "the {:.2}–{:.2} s that the {} measured runs of its band ({}) give",
                u.step_time_low_s, u.step_time_high_s, u.rows, u.regime
            )
        };
        let range = band
            .map(|u| format!(", outside {}", runs_give(u)))
            .unwrap_or_default();
        if slower {
            explanations.push(format!(
                "the model predicts {:.0}% less than the measured step ({measured:.2} s){range}: look at what the model hides or does not see (exposed communication predicted {:.2} s, host time {:.2} s; data loading, straggler ranks and allocator retries are not modelled)",
                -err,
                b.tp_comm + b.cp_comm + b.ep_comm + b.pp_comm + b.dp_comm,
                b.host_overhead
            ));
        } else if faster {
            explanations.push(format!(
                "the model predicts {:.0}% more than the measured step ({measured:.2} s){range}: the kernels or the overlap ran better than the model's efficiencies (compute predicted {:.2} s)",
                err,
                b.gemm + b.attention + b.elementwise + b.recompute
            ));
        } else if let Some(u) = band.filter(|_| err.abs() > STEP_GAP_EXPLAINED_PCT) {
            explanations.push(format!(
                "the measured step ({measured:.2} s) is {:.0}% from the prediction but inside {}: a gap the model has shown on runs like this one, so the gap alone does not point at a problem in the run",
                err.abs(),
                runs_give(u)
            ));
        }
    }
    // Megatron prints TFLOP/s = FLOPs of a step / (step time × world size); undoing that gives
    // the FLOPs per token its own formula counted.
    let tokens_per_step =
        f64::from(estimate.layout.global_batch_size) * estimate.layout.seq_length as f64;
    let log_gflop_per_token = steps.as_ref().and_then(|s| {
        let tflops = s.median_tflops_per_gpu?;
        (tokens_per_step > 0.0).then(|| {
            let gflop =
                tflops * 1e3 * (s.median_step_ms / 1000.0) * f64::from(gpus) / tokens_per_step;
            (gflop * 10.0).round() / 10.0
        })
    });
    let predicted_gflop = estimate.flops.gflop_per_token;
    // The configuration was evaluated, so its model resolves.
    let megatron_lm_gflop = resolve_model(catalog.cost(), config.model.as_ref())
        .ok()
        .and_then(|arch| {
            megatron_lm_gflop_per_token(&arch, config, estimate.layout.seq_length, predicted_gflop)
        });
    let near = |logged: f64, count: f64| {
        count > 0.0 && ((logged - count) / count).abs() <= FLOPS_COUNT_TOLERANCE
    };
    if let Some(logged) = log_gflop_per_token.filter(|l| !near(*l, predicted_gflop)) {
        match megatron_lm_gflop.filter(|count| near(logged, *count)) {
            Some(count) => explanations.push(format!(
                "the log's throughput implies {logged:.1} GFLOP per token: Megatron-LM's formula (and Megatron-Bridge's before v0.5.0) counts {count:.1} for this model, the model {predicted_gflop:.1} (that formula counts a gated MLP's third matrix only with SwiGLU and has no sliding-window term); the log's TFLOP/s are {:.2}x in the model's count, and the step time compares as it is",
                predicted_gflop / count
            )),
            None if predicted_gflop > 0.0 => explanations.push(format!(
                "the log's throughput implies {logged:.1} GFLOP per token and the model counts {predicted_gflop:.1}{}: Megatron's formula and the configuration read from the log disagree (a different architecture, vocabulary or recompute counting); check the model before comparing TFLOP/s",
                megatron_lm_gflop
                    .map(|c| format!(" (Megatron-LM's formula {c:.1})"))
                    .unwrap_or_default()
            )),
            None => {}
        }
    }
    if let Some(oom) = &log.out_of_memory {
        explanations.push(format!(
            "the run went out of memory{}: it tried to allocate {} with {} free; the model predicts {:.1} of {:.1} GiB",
            oom.rank.map(|r| format!(" on rank {r}")).unwrap_or_default(),
            oom.tried_to_allocate_gib.map_or("?".into(), |g| format!("{g:.2} GiB")),
            oom.free_gib.map_or("?".into(), |g| format!("{g:.2} GiB")),
            estimate.memory.peak_gib,
            estimate.memory.capacity_gib
        ));
    }
    LogComparison {
        memory,
        steps,
        predicted_step_time_s: predicted_step,
        predicted_tflops_per_gpu: estimate.performance.model_tflops_per_gpu,
        step_time_error_pct,
        predicted_step_range_s,
        measured_step_inside_range,
        log_gflop_per_token,
        predicted_gflop_per_token: predicted_gflop,
        megatron_lm_gflop_per_token: megatron_lm_gflop,
        explanations,
    }
}

impl LogComparison {
    /// The comparison as Markdown.
    pub fn markdown(&self) -> String {
        let mut text = String::from("\n\n**Measured (log) vs predicted**");
        if !self.memory.is_empty() {
            text.push_str("\n\n| rank | PP stage | max allocated (log) | allocated (model) | error | max reserved (log) | peak (model) | error |\n|---|---|---|---|---|---|---|---|");
            for m in &self.memory {
                text.push_str(&format!(
                    "\n| {} | {} | {:.2} GiB | {:.2} GiB | {:+.1}% | {:.2} GiB | {:.2} GiB | {:+.1}% |",
                    m.rank,
                    m.pipeline_rank,
                    m.measured_max_allocated_gib,
                    m.predicted_allocated_gib,
                    m.allocated_error_pct,
                    m.measured_max_reserved_gib,
                    m.predicted_peak_gib,
                    m.error_pct
                ));
            }
            text.push_str("\n\n`max allocated` compares with the model's allocated view; `max reserved` with its peak, which also counts memory outside PyTorch's allocator (context, DeepEP/HybridEP buffers) and is what fitting uses.");
        }
        if let Some(stats) = &self.steps {
            text.push_str(&format!(
                "\n\nStep time: measured median {:.2} s over {} iterations ({} warm-up skipped), predicted {:.2} s ({:+.1}%{}).",
                stats.median_step_ms / 1000.0,
                stats.iterations_used,
                stats.warmup_skipped,
                self.predicted_step_time_s,
                self.step_time_error_pct.unwrap_or(0.0),
                self.predicted_step_range_s
                    .map(|[low, high]| format!("; its band gives {low:.2}–{high:.2} s"))
                    .unwrap_or_default()
            ));
            if let Some(tflops) = stats.median_tflops_per_gpu {
                text.push_str(&format!(
                    " Throughput: measured {tflops:.1} TFLOP/s/GPU (Megatron's own count), predicted {:.1}.",
                    self.predicted_tflops_per_gpu
                ));
            }
            if let Some(gflop) = self.log_gflop_per_token {
                text.push_str(&format!(
                    " FLOPs per token: {gflop:.1} GFLOP by the log's throughput, {:.1} by the model.",
                    self.predicted_gflop_per_token
                ));
            }
        }
        for e in &self.explanations {
            text.push_str(&format!("\n- {e}"));
        }
        text
    }
}

/// `compare_with_log`: a training log, and what the log cannot say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct CompareWithLogInput {
    /// The log's text (Megatron-LM or Megatron-Bridge; launcher prefixes, interleaved ranks
    /// and truncated files are fine): its argument dump is the configuration, its iteration,
    /// `report_memory` and CUDA OOM lines are the measurements.
    pub log: String,
    /// Model card id or HuggingFace config.json object, when the argument dump does not carry
    /// the whole architecture.
    #[serde(default)]
    pub model: Option<ModelSpec>,
    /// The GPU the run used (logs do not name it): a hardware card id.
    #[serde(default)]
    pub hardware: Option<String>,
    /// The GPU count, when the log has no `world_size`.
    #[serde(default)]
    pub num_gpus: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CompareWithLogOutput {
    /// The configuration read from the log, checked like `check_feasibility`.
    pub check: CheckFeasibilityOutput,
    /// Measured against predicted, per reporting rank and per step, with explanations.
    pub comparison: LogComparison,
    pub rationale: String,
}

/// Reads a log, checks the configuration it ran, and compares the prediction with what it
/// measured.
pub fn compare_log(
    catalog: &Catalog,
    input: CompareWithLogInput,
) -> Result<CompareWithLogOutput, ToolError> {
    crate::model::limits::LOG.check("", Some(&input.log))?;
    let log = read_megatron_log(&input.log, input.model.as_ref()).map_err(|e| {
        ToolError::field(
            "log",
            e.to_string(),
            "give the text of a Megatron-LM or Megatron-Bridge training log (with its argument dump)",
        )
    })?;
    let mut config = log.config.clone().ok_or_else(|| {
        ToolError::field(
            "log",
            "the log has no argument dump (`---- arguments ----` … `end of arguments`), so the configuration it ran is unknown",
            "give the log from its start (rank 0 prints the arguments), or call check_feasibility with the configuration",
        )
    })?;
    if let Some(model) = input.model {
        config.model = Some(model);
    }
    if input.hardware.is_some() {
        config.hardware = input.hardware;
    }
    if input.num_gpus.is_some() {
        config.num_gpus = input.num_gpus;
    }
    let check = check_feasibility(catalog, config.clone())?;
    let comparison = compare_with_log(catalog, &config, &check.estimate, &log);
    let rationale = format!("{}{}", check.rationale, comparison.markdown());
    Ok(CompareWithLogOutput {
        check,
        comparison,
        rationale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Megatron-LM log of GPT-OSS-120B on 64 GPUs whose iteration lines print `TFLOP/s`
    /// in `count` GFLOP per token at `step_ms` per step.
    fn gpt_oss_log(count: f64, step_ms: f64) -> String {
        let tokens_per_step = 64.0 * 4096.0;
        let tflops = count * 1e9 * tokens_per_step / (step_ms / 1000.0) / 64.0 / 1e12;
        let mut log = String::from(
            "using world size: 64, data-parallel size: 8, context-parallel size: 1\n\
             ------------------------ arguments ------------------------\n\
             \x20 bf16 ............................................ True\n\
             \x20 expert_model_parallel_size ...................... 8\n\
             \x20 global_batch_size ............................... 64\n\
             \x20 micro_batch_size ................................ 1\n\
             \x20 pipeline_model_parallel_size .................... 1\n\
             \x20 seq_length ...................................... 4096\n\
             \x20 tensor_model_parallel_size ...................... 1\n\
             \x20 world_size ...................................... 64\n\
             -------------------- end of arguments ---------------------\n",
        );
        for i in 1..=6 {
            log.push_str(&format!(
                " iteration {i:>8}/     100 | consumed samples: {:>12} | elapsed time per iteration (ms): {step_ms:.1} | throughput per GPU (TFLOP/s/GPU): {tflops:.1} | global batch size:    64 |\n",
                i * 64
            ));
        }
        log
    }

    fn compare(count: f64) -> LogComparison {
        let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
        let input = CompareWithLogInput {
            log: gpt_oss_log(count, 5000.0),
            model: Some(ModelSpec::Id("gpt-oss-120b".into())),
            hardware: Some("h100".into()),
            num_gpus: None,
        };
        match compare_log(&catalog, input) {
            Ok(out) => out.comparison,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_gpt_oss_throughput_in_megatron_lms_count_is_named_not_called_a_disagreement() {
        // Megatron-LM counts GPT-OSS's quick-GEGLU experts as two matrices and its windowed
        // layers as full attention: 27.2 GFLOP per token at 4K against the model's 32.6.
        let model_count = compare(1.0).predicted_gflop_per_token;
        let megatron = compare(1.0)
            .megatron_lm_gflop_per_token
            .unwrap_or_else(|| panic!("GPT-OSS counts differently in Megatron-LM"));
        assert!((megatron - 27.2).abs() < 0.1, "{megatron}");
        assert!((model_count - 32.6).abs() < 0.1, "{model_count}");
        let in_megatron_lm = compare(megatron);
        let said = in_megatron_lm.explanations.join("\n");
        assert!(said.contains("Megatron-LM's formula"), "{said}");
        assert!(!said.contains("disagree"), "{said}");
        // A log in the model's own count (Megatron-Bridge from v0.5.0) raises nothing.
        let in_model = compare(model_count);
        assert!(
            !in_model.explanations.iter().any(|e| e.contains("GFLOP")),
            "{:?}",
            in_model.explanations
        );
        // A count that is neither is still called out, naming both counts.
        let other = compare(0.6 * megatron).explanations.join("\n");
        assert!(other.contains("disagree"), "{other}");
        assert!(other.contains("Megatron-LM's formula 27.2"), "{other}");
    }
}
