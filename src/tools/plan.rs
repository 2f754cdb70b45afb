//! `plan_layouts`: search the layout space with the cost model and rank what fits.
//!
//! The space is the product of the structural dimensions (TP, CP, PP, VPP, EP, ETP, MBS,
//! dispatcher) and the memory levers (recompute preset, optimizer offload, optimizer
//! sharding). Structural combinations that break a divisibility rule are counted and dropped
//! before any arithmetic. For each remaining structure the memory levers are tried from the
//! cheapest up; a lever set that only adds savings on top of one that already fits is
//! dominated (it cannot be faster) and is skipped. The search uses every core.
//!
//! This file holds the tool's input and output and the answer built from a search;
//! `search.rs` the search.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    citations, layout_label, levers_label, recompute_label, resolve, round, Citation, InputNotes,
    Prediction, Resolved, ToolError,
};
use crate::catalog::{Catalog, CostCards};
use crate::model::{Hardware, ModelSpec, Precision, TrainingConfig};

mod search;
pub use search::*;

/// Tokens per optimizer step used to pick a global batch size when none is given (about the
/// 4M tokens of the published 4K recipes); the batch is rounded up to a multiple of DP·MBS.
pub const DEFAULT_TOKENS_PER_STEP: u64 = 4 * 1024 * 1024;

/// Relative throughput difference below which two layouts count as equally fast.
const THROUGHPUT_TIE: f64 = 0.005;

/// Limits on the search.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct LayoutConstraints {
    /// Fix TP.
    #[serde(default, alias = "tp")]
    pub tensor_model_parallel_size: Option<u32>,
    /// Fix CP.
    #[serde(default, alias = "cp")]
    pub context_parallel_size: Option<u32>,
    /// Fix PP.
    #[serde(default, alias = "pp")]
    pub pipeline_model_parallel_size: Option<u32>,
    /// Fix EP.
    #[serde(default, alias = "ep")]
    pub expert_model_parallel_size: Option<u32>,
    /// Fix the micro-batch size.
    #[serde(default, alias = "mbs")]
    pub micro_batch_size: Option<u32>,
    #[serde(default)]
    pub max_tp: Option<u32>,
    #[serde(default)]
    pub max_pp: Option<u32>,
    #[serde(default)]
    pub max_cp: Option<u32>,
    #[serde(default)]
    pub max_ep: Option<u32>,
    /// Keep at least this much memory free per GPU, GiB (default 0).
    #[serde(default)]
    pub min_headroom_gib: Option<f64>,
    /// Allow full recompute (default true).
    #[serde(default)]
    pub allow_full_recompute: Option<bool>,
    /// Allow optimizer CPU offload (default true).
    #[serde(default)]
    pub allow_optimizer_offload: Option<bool>,
    /// Allow Megatron-FSDP parameter+gradient+optimizer sharding (default true).
    #[serde(default)]
    pub allow_fsdp: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct PlanLayoutsInput {
    /// Model card id (see `list_models`) or a HuggingFace config.json object.
    pub model: ModelSpec,
    /// Hardware card id (see `list_hardware`).
    pub hardware: String,
    pub num_gpus: u32,
    pub seq_length: u64,
    /// Global batch size in sequences; when absent each layout gets about 4M tokens per step.
    #[serde(default)]
    pub global_batch_size: Option<u32>,
    /// GEMM precision; default BF16, as in every tool (FP8 and FP4 only when asked).
    #[serde(default)]
    pub precision: Option<Precision>,
    #[serde(default)]
    pub constraints: LayoutConstraints,
    /// Settings applied to every candidate (e.g. `{"linear_cross_entropy": true}`).
    #[serde(default)]
    pub base: Option<TrainingConfig>,
    /// How many candidates to return (default 5, at most 50).
    #[serde(default)]
    pub top_k: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Candidate {
    pub rank: u32,
    /// "TP1 CP32 EP32 PP8 VPP4 DP1 EDP1 MBS1 GBS16"
    pub layout: String,
    pub recompute: String,
    /// Dispatcher, optimizer offload and sharding.
    pub levers: String,
    pub config: TrainingConfig,
    pub predicted: Prediction,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanLayoutsOutput {
    #[serde(flatten)]
    pub notes: InputNotes,
    /// Best first, by predicted tokens/s per GPU among layouts that fit.
    pub candidates: Vec<Candidate>,
    /// Every combination of the search space.
    pub considered: u64,
    /// Combinations the cost model evaluated.
    pub evaluated: u64,
    /// Evaluated layouts that fit.
    pub feasible: u64,
    /// Combinations skipped because a cheaper lever set already fit the same structure.
    pub dominated: u64,
    /// Listed candidates after the best whose predicted tokens/s lies within the best's typical
    /// error (its band's ±): the model does not separate them from the best, so the answer
    /// names the one of them that leaves the most memory free.
    #[serde(default)]
    pub ties_with_best: u32,
    /// Rejections by reason (divisibility rules before evaluation; violations and
    /// out-of-memory after).
    pub rejected: BTreeMap<String, u64>,
    pub rationale: String,
    pub citations: Vec<Citation>,
}

/// What a search answer assumed: the searched layout fields are the answer, not defaults, so
/// only the settings the search did not choose are listed (precision, optimizer, ...), plus the
/// hardware card when the tool picked it.
pub fn search_notes(
    cards: &CostCards,
    chosen: &TrainingConfig,
    defaulted_hardware: Option<&Hardware>,
) -> InputNotes {
    let mut notes = InputNotes::for_config(cards, chosen, None);
    notes.assumed_defaults.retain(|a| {
        !matches!(
            a.key.as_str(),
            "tensor_model_parallel_size"
                | "pipeline_model_parallel_size"
                | "virtual_pipeline_model_parallel_size"
                | "context_parallel_size"
                | "expert_model_parallel_size"
                | "expert_tensor_parallel_size"
                | "sequence_parallel"
                | "micro_batch_size"
                | "recompute_granularity"
                | "optimizer_cpu_offload"
                | "use_distributed_optimizer"
        )
    });
    if let Some(hw) = defaulted_hardware {
        notes.assume(
            "hardware",
            serde_json::Value::String(hw.id.clone()),
            "not given; the most common training GPU is assumed",
        );
    }
    notes
}

/// The base configuration of a search request from the tool's flat inputs.
pub fn search_base(
    model: &ModelSpec,
    hardware: &str,
    num_gpus: u32,
    seq_length: u64,
    precision: Option<Precision>,
    base: Option<&TrainingConfig>,
) -> TrainingConfig {
    let mut cfg = base.cloned().unwrap_or_default();
    cfg.model = Some(model.clone());
    cfg.hardware = Some(hardware.to_string());
    cfg.num_gpus = Some(num_gpus);
    cfg.seq_length = Some(seq_length);
    // Unset stays unset: the configuration's default (BF16) applies and is reported as assumed.
    cfg.precision = precision.or(cfg.precision);
    cfg
}

pub fn plan_layouts(
    catalog: &Catalog,
    input: PlanLayoutsInput,
) -> Result<PlanLayoutsOutput, ToolError> {
    check_plan_input(&input)?;
    let cards = catalog.cost();
    let mut probe = TrainingConfig {
        model: Some(input.model.clone()),
        hardware: Some(input.hardware.clone()),
        num_gpus: Some(input.num_gpus),
        seq_length: Some(input.seq_length),
        global_batch_size: input.global_batch_size,
        ..TrainingConfig::default()
    };
    let resolved = resolve(cards, &probe)?;
    let top_k = input.top_k.unwrap_or(5).clamp(1, 50) as usize;
    probe = search_base(
        &input.model,
        &input.hardware,
        input.num_gpus,
        input.seq_length,
        input.precision,
        input.base.as_ref(),
    );
    let outcome = search(&SearchRequest {
        resolved: &resolved,
        base: probe,
        constraints: input.constraints.clone(),
        global_batch_size: input.global_batch_size,
        describe_best: top_k,
    });
    let feasible = outcome.feasible;
    let candidates: Vec<Candidate> = outcome
        .ranked
        .iter()
        .take(top_k)
        .enumerate()
        .map(|(i, (cfg, est))| Candidate {
            rank: i as u32 + 1,
            layout: layout_label(est),
            recompute: recompute_label(cfg),
            levers: levers_label(cfg, est),
            config: cfg.clone(),
            predicted: Prediction::of(est),
        })
        .collect();
    let mut notes = match outcome.ranked.first() {
        Some((best, _)) => search_notes(catalog.cost(), best, None),
        None => InputNotes::default(),
    };
    notes.note_calibration(cards, Some(&resolved.hardware.id));
    let ties = ties_with_best(&candidates);
    let rationale =
        plan_rationale(&resolved, &input, &outcome, &candidates, ties.as_ref()) + &notes.markdown();
    let ties_count = ties.map_or(0, |(_, tied)| tied.len() as u32);
    if candidates.is_empty() {
        return Err(ToolError::Infeasible(rationale));
    }
    Ok(PlanLayoutsOutput {
        notes,
        candidates,
        considered: outcome.considered,
        evaluated: outcome.evaluated,
        feasible,
        dominated: outcome.dominated,
        ties_with_best: ties_count,
        rejected: outcome.rejected,
        rationale,
        citations: citations(
            catalog,
            &[
                ("moe-parallelism-and-recompute", "choosing"),
                ("moe-optimization-workflow", "parallel folding"),
                ("moe-long-context", "cp sizing"),
            ],
        ),
    })
}

/// The sizes of a plan request against `crate::model::limits` (the search's own products
/// stay in range only if its inputs do).
fn check_plan_input(input: &PlanLayoutsInput) -> Result<(), ToolError> {
    use crate::model::limits::{self as l, check_config};
    l::NUM_GPUS.check("", Some(u64::from(input.num_gpus)))?;
    l::SEQ_LENGTH.check("", Some(input.seq_length))?;
    l::GLOBAL_BATCH_SIZE.check("", input.global_batch_size.map(u64::from))?;
    l::HARDWARE_ID.check("", Some(&input.hardware))?;
    let c = &input.constraints;
    let p = "constraints.";
    let size = |v: Option<u32>| v.map(u64::from);
    l::TENSOR_PARALLEL.check(p, size(c.tensor_model_parallel_size))?;
    l::CONTEXT_PARALLEL.check(p, size(c.context_parallel_size))?;
    l::PIPELINE_PARALLEL.check(p, size(c.pipeline_model_parallel_size))?;
    l::EXPERT_PARALLEL.check(p, size(c.expert_model_parallel_size))?;
    l::MICRO_BATCH_SIZE.check(p, size(c.micro_batch_size))?;
    for (limit, field, value) in [
        (l::TENSOR_PARALLEL, "max_tp", c.max_tp),
        (l::PIPELINE_PARALLEL, "max_pp", c.max_pp),
        (l::CONTEXT_PARALLEL, "max_cp", c.max_cp),
        (l::EXPERT_PARALLEL, "max_ep", c.max_ep),
    ] {
        l::Limit { field, ..limit }.check(p, size(value))?;
    }
    l::MIN_HEADROOM_GIB.check_f64(p, c.min_headroom_gib)?;
    if let Some(base) = &input.base {
        check_config(base, "base.")?;
    }
    Ok(())
}

/// The best's typical error and the candidates after the best whose predicted tokens/s per GPU
/// lies within it: ties, as far as the model can tell. `None` without a band.
fn ties_with_best(candidates: &[Candidate]) -> Option<(f64, Vec<&Candidate>)> {
    let best = candidates.first()?;
    let typical = best.predicted.uncertainty.as_ref()?.typical_abs_error;
    let rate = best.predicted.tokens_per_second_per_gpu;
    let ties = candidates[1..]
        .iter()
        .filter(|c| rate > 0.0 && (rate - c.predicted.tokens_per_second_per_gpu) / rate <= typical)
        .collect();
    Some((typical, ties))
}

/// What the ties mean for the choice: the tied layout that leaves the most memory free.
fn ties_text(candidates: &[Candidate], ties: Option<&(f64, Vec<&Candidate>)>) -> String {
    let (Some(best), Some((typical, ties))) = (candidates.first(), ties) else {
        return String::new();
    };
    if ties.is_empty() {
        return String::new();
    }
    let roomiest = ties
        .iter()
        .copied()
        .chain(std::iter::once(best))
        .max_by(|a, b| {
            a.predicted
                .headroom_gib
                .total_cmp(&b.predicted.headroom_gib)
        })
        .unwrap_or(best);
    let choice = if std::ptr::eq(roomiest, best) {
        "the best also leaves the most memory free".to_string()
    } else {
        format!(
            "of them, #{} **{}** leaves the most memory free ({:.1} GiB, against {:.1} for the best)",
            roomiest.rank, roomiest.layout, roomiest.predicted.headroom_gib, best.predicted.headroom_gib
        )
    };
    format!(
        "\n\n{} more of the {} listed predict within {:.0}% of it, the model's typical error for this regime, so it cannot rank them (that error is on absolute throughput; how well it ranks close layouts has not been measured): read them as ties; {choice}.",
        ties.len(),
        candidates.len(),
        typical * 100.0
    )
}

fn plan_rationale(
    resolved: &Resolved<'_>,
    input: &PlanLayoutsInput,
    outcome: &SearchOutcome,
    candidates: &[Candidate],
    ties: Option<&(f64, Vec<&Candidate>)>,
) -> String {
    let mut text = format!(
        "Searched {} layouts of {} on {} × {} at {} tokens: {} evaluated, {} fit, {} skipped as dominated.",
        outcome.considered,
        resolved.arch.display_name,
        input.num_gpus,
        resolved.hardware.display_name,
        input.seq_length,
        outcome.evaluated,
        outcome.feasible,
        outcome.dominated,
    );
    if let Some(best) = candidates.first() {
        text.push_str(&format!(
            "\n\nBest: **{}**, recompute {}, predicted {:.0} TFLOP/s/GPU{}, {:.0} tokens/s/GPU, peak {:.1} of {:.1} GiB.",
            best.layout,
            best.recompute,
            best.predicted.model_tflops_per_gpu,
            best.predicted.band_text(),
            best.predicted.tokens_per_second_per_gpu,
            best.predicted.peak_gib,
            best.predicted.capacity_gib
        ));
        text.push_str(&ties_text(candidates, ties));
    } else if let Some((cfg, est)) = &outcome.closest_miss {
        text.push_str(&format!(
            "\n\nNothing fits. The lowest-memory layout evaluated, {} with recompute {}, needs {:.1} GiB of {:.1} GiB: add GPUs, allow more levers, or shorten the sequence.",
            layout_label(est),
            recompute_label(cfg),
            round(est.memory.peak_gib, 1),
            est.memory.capacity_gib
        ));
    } else {
        text.push_str("\n\nNo layout passed the divisibility rules: check num_gpus against the model's heads, experts and layers.");
    }
    let mut reasons: Vec<(&String, &u64)> = outcome.rejected.iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(a.1));
    if !reasons.is_empty() {
        let listed: Vec<String> = reasons
            .iter()
            .take(5)
            .map(|(reason, count)| format!("{reason} {count}"))
            .collect();
        text.push_str(&format!("\n\nRejected: {}.", listed.join(", ")));
    }
    text
}
