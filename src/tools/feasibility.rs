//! `check_feasibility`: one configuration through the cost model, with which of the three
//! walls (memory, communication, compute/host) binds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    citations, evaluate_config, layout_label, layout_violations, recompute_label, Citation,
    InputNotes, ToolError,
};
use crate::catalog::Catalog;
use crate::model::{Estimate, TrainingConfig};

/// The name the communication wall gives the MoE all-to-all.
const EP_ALL_TO_ALL: &str = "EP all-to-all";
/// Exposed communication above this share of the step makes communication the binding wall.
const COMMUNICATION_WALL_SHARE: f64 = 0.20;
/// Host overhead plus bubble above this share makes the compute/host wall bind; so does the
/// once-per-step optimizer work.
const HOST_WALL_SHARE: f64 = 0.15;
/// Less free memory than this fraction of capacity counts as pressing on the memory wall.
pub const MEMORY_WALL_HEADROOM: f64 = 0.05;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Wall {
    Memory,
    Communication,
    ComputeHost,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WallReport {
    pub binding: Wall,
    /// Share of peak memory in use.
    pub memory_used_fraction: f64,
    /// Exposed communication over step time.
    pub communication_share: f64,
    /// Host overhead and pipeline bubble over step time.
    pub host_and_bubble_share: f64,
    /// The once-per-step work (gradient zeroing and clipping, the optimizer step, its
    /// CPU-offloaded part included) over step time.
    pub optimizer_share: f64,
    /// GEMM, attention and elementwise compute (with recompute) over step time.
    pub compute_share: f64,
    pub explanation: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CheckFeasibilityOutput {
    #[serde(flatten)]
    pub notes: InputNotes,
    #[serde(flatten)]
    pub estimate: Estimate,
    pub walls: WallReport,
    pub rationale: String,
    pub citations: Vec<Citation>,
    /// The configuration evaluated, as read from what was given (a file, an argument list,
    /// fields): what a reviewer checks the reader against.
    pub configuration: TrainingConfig,
}

pub fn walls(estimate: &Estimate, config: &TrainingConfig) -> WallReport {
    let b = &estimate.performance.breakdown_s;
    let step = estimate.performance.step_time_s.max(f64::MIN_POSITIVE);
    let comm = b.tp_comm + b.cp_comm + b.ep_comm + b.pp_comm + b.dp_comm + b.offload_copies;
    let host = b.host_overhead + b.pipeline_bubble;
    let compute = b.gemm + b.attention + b.elementwise + b.recompute;
    let used = estimate.memory.peak_gib / estimate.memory.capacity_gib.max(f64::MIN_POSITIVE);
    let communication_share = comm / step;
    let host_and_bubble_share = host / step;
    let optimizer_share = b.optimizer / step;
    let (binding, explanation) = if !estimate.fits || used > 1.0 - MEMORY_WALL_HEADROOM {
        (
            Wall::Memory,
            format!(
                "memory: {:.1} of {:.1} GiB on pipeline rank {} ({})",
                estimate.memory.peak_gib,
                estimate.memory.capacity_gib,
                estimate.memory.worst_rank.pipeline_rank,
                estimate.memory.worst_rank.reason
            ),
        )
    } else if optimizer_share >= HOST_WALL_SHARE
        && optimizer_share >= communication_share
        && optimizer_share >= host_and_bubble_share
    {
        (
            Wall::ComputeHost,
            optimizer_wall(config, optimizer_share, b.optimizer),
        )
    } else if communication_share >= COMMUNICATION_WALL_SHARE
        && communication_share >= host_and_bubble_share
    {
        let (name, seconds) = [
            (EP_ALL_TO_ALL, b.ep_comm),
            ("CP ring", b.cp_comm),
            ("TP collectives", b.tp_comm),
            ("DP gradient/parameter collectives", b.dp_comm),
            ("PP sends", b.pp_comm),
            (
                "activation offload copies over the GPU-host link",
                b.offload_copies,
            ),
        ]
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or(("communication", comm));
        let mut explanation = format!(
            "communication: {:.0}% of the step is exposed communication, mostly {name} ({seconds:.2} s)",
            communication_share * 100.0
        );
        if let (EP_ALL_TO_ALL, Some(reach)) = (name, &estimate.performance.ep_network) {
            explanation.push_str(&format!("; {}", reach.text()));
        }
        (Wall::Communication, explanation)
    } else if host_and_bubble_share >= HOST_WALL_SHARE {
        (
            Wall::ComputeHost,
            format!(
                "host/launch overhead and pipeline bubble take {:.0}% of the step ({:.2} s host, {:.2} s bubble)",
                host_and_bubble_share * 100.0,
                b.host_overhead,
                b.pipeline_bubble
            ),
        )
    } else {
        (
            Wall::ComputeHost,
            format!(
                "compute: {:.0}% of the step is GEMM, attention and elementwise work; {}",
                compute / step * 100.0,
                compute_advice(estimate, step)
            ),
        )
    };
    WallReport {
        binding,
        memory_used_fraction: (used * 1000.0).round() / 1000.0,
        communication_share: (communication_share * 1000.0).round() / 1000.0,
        host_and_bubble_share: (host_and_bubble_share * 1000.0).round() / 1000.0,
        optimizer_share: (optimizer_share * 1000.0).round() / 1000.0,
        compute_share: (compute / step * 1000.0).round() / 1000.0,
        explanation,
    }
}

/// The wall a step binds on when its once-per-step work dominates: what shortens it depends on
/// whether part of the optimizer steps on the host.
fn optimizer_wall(config: &TrainingConfig, share: f64, seconds: f64) -> String {
    let offload = config.offload_fraction();
    let spread = "a larger global batch (more microbatches per step) spreads it over more tokens";
    if offload > 0.0 {
        let shorten = if config.overlap_cpu_optimizer_d2h_h2d.unwrap_or(false) {
            "offloading less (`optimizer_offload_fraction`) shortens it"
        } else {
            "offloading less (`optimizer_offload_fraction`) or overlapping its copies with the host step (`overlap_cpu_optimizer_d2h_h2d`) shortens it"
        };
        format!(
            "the optimizer step: {:.0}% of the step ({seconds:.2} s), with {:.0}% of the optimizer state stepped on the host; {shorten}, {spread}, and the host step's pace depends on the CPU threads each rank gets (the optimizer CPU offload note says how)",
            share * 100.0,
            offload * 100.0,
        )
    } else {
        format!(
            "the optimizer step: {:.0}% of the step ({seconds:.2} s of gradient zeroing, clipping and the optimizer update, once per step); {spread}",
            share * 100.0,
        )
    }
}

/// What context parallelism does to a model with Gated DeltaNet layers: Megatron re-shards
/// them from sequence to heads (`gdn.py`, `a2a_cp_to_hp`), so each CP rank walks the whole
/// sequence chunk by chunk for its share of the heads, and more CP does not shorten them.
fn linear_attention_under_cp(estimate: &Estimate) -> Option<String> {
    let layout = &estimate.layout;
    let gdn_flops = estimate
        .flops
        .breakdown_gflop_per_token
        .linear_attention_core;
    if gdn_flops <= 0.0 || layout.cp <= 1 {
        return None;
    }
    Some(format!(
        "Gated DeltaNet under CP{cp}: Megatron re-shards these layers from sequence to heads, so every CP rank walks the whole {seq}-token sequence, chunk after chunk in the state pass, for 1/{cp} of the heads; their time does not fall with CP, and it is part of the {attn:.2} s attention term. Fewer CP ranks (the GPUs moved to TP or DP), or a GDN backend with a parallel state pass, shorten it.",
        cp = layout.cp,
        seq = layout.seq_length,
        attn = estimate.performance.breakdown_s.attention,
    ))
}

/// Advice for a compute-bound step, from the term that dominates it (advice about GEMM
/// precision does not help a step that attention dominates).
fn compute_advice(estimate: &Estimate, step: f64) -> String {
    let b = &estimate.performance.breakdown_s;
    let share = |seconds: f64| seconds / step * 100.0;
    let terms = [
        ("attention", b.attention),
        ("GEMM", b.gemm),
        ("recompute", b.recompute),
        ("elementwise", b.elementwise),
    ];
    let (largest, seconds) = terms
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or(("GEMM", b.gemm));
    match largest {
        "attention" => format!(
            "attention dominates ({:.0}% of the step; GEMMs {:.0}%): the fused-attention kernel sets the pace, so GEMM precision will not move it; FP8 attention (`fp8_dot_product_attention`) where the recipe allows it, or a faster attention backend, would",
            share(seconds),
            share(b.gemm)
        ),
        "recompute" => format!(
            "recompute is {:.0}% of the step: recompute less where memory allows (`choose_recompute`)",
            share(seconds)
        ),
        "elementwise" => format!(
            "elementwise work is {:.0}% of the step: fused kernels (Transformer Engine fusions, cross-entropy fusion) cut it{}",
            share(seconds),
            if estimate.performance.mfu_peak == "BF16" {
                ""
            } else {
                "; it includes the low-precision recipe's quantizers on every linear input and output gradient (FP8 current scaling reads each tensor twice, blockwise and MXFP8 once)"
            }
        ),
        _ if estimate.performance.mfu_peak == "BF16" => format!(
            "GEMMs are {:.0}% of the step: FP8 GEMMs would speed them up",
            share(seconds)
        ),
        _ => format!(
            "GEMMs are {:.0}% of the step and already run in {}: larger GEMMs (fewer TP/EP splits, a larger micro-batch) raise their efficiency",
            share(seconds),
            estimate.performance.mfu_peak
        ),
    }
}

pub fn check_feasibility(
    catalog: &Catalog,
    config: TrainingConfig,
) -> Result<CheckFeasibilityOutput, ToolError> {
    let estimate = evaluate_config(catalog.cost(), &config)?;
    let walls = walls(&estimate, &config);
    let mut text = String::new();
    if layout_violations(&estimate).next().is_none() {
        text.push_str(&format!(
            "**{}** with recompute {}: {} — peak {:.1} of {:.1} GiB on pipeline rank {} ({}); {:.1} GiB of it allocated by PyTorch (the log's `max allocated`).",
            layout_label(&estimate),
            recompute_label(&config),
            if estimate.fits {
                "fits"
            } else {
                "does NOT fit"
            },
            estimate.memory.peak_gib,
            estimate.memory.capacity_gib,
            estimate.memory.worst_rank.pipeline_rank,
            estimate.memory.worst_rank.reason,
            estimate.memory.allocated_gib,
        ));
        let bd = &estimate.memory.breakdown_gib;
        text.push_str(&format!(
            "\n\nLargest terms: weights {:.1}, gradients {:.1}, optimizer {:.1}, activations {:.1}, logits/loss {:.1}, MoE dispatch {:.1}; outside the allocated count: fragmentation {:.1}, DeepEP/HybridEP buffers {:.1}, reserve {:.1} GiB.",
            bd.weights, bd.gradients, bd.optimizer, bd.activations, bd.logits_loss, bd.moe_dispatch, bd.fragmentation, bd.dispatcher_buffers, bd.fixed_reserve
        ));
        text.push_str(&format!(
            "\n\nPredicted {:.0} TFLOP/s/GPU{} ({}), {:.0} tokens/s/GPU, {:.2} s per step of {} sequences{}.",
            estimate.performance.model_tflops_per_gpu,
            estimate.performance.band_text(),
            estimate.performance.mfu_text(),
            estimate.performance.tokens_per_second_per_gpu,
            estimate.performance.step_time_s,
            estimate.layout.global_batch_size,
            estimate.performance.step_band_text(),
        ));
        text.push_str(&format!("\n\nBinding wall: {}.", walls.explanation));
        if let Some(note) = linear_attention_under_cp(&estimate) {
            text.push_str(&format!("\n\n{note}"));
        }
    } else {
        text.push_str("The layout is invalid:");
        for v in layout_violations(&estimate) {
            text.push_str(&format!("\n- `{}`: {} Fix: {}", v.code, v.message, v.fix));
        }
    }
    for w in &estimate.warnings {
        text.push_str(&format!("\n\nNote: {w}"));
    }
    let mut wanted = vec![
        ("moe-optimization-workflow", "three walls"),
        ("moe-memory-triage", "reading the memory breakdown"),
    ];
    if estimate.layout.cp > 1 {
        wanted.push(("moe-long-context", "cp sizing"));
    }
    if !estimate.fits {
        wanted.push(("moe-parallelism-and-recompute", "recompute modules"));
    }
    let hardware = catalog.cost().hardware.get(
        &config
            .hardware
            .clone()
            .unwrap_or_default()
            .to_ascii_lowercase(),
    );
    let mut notes = InputNotes::for_config(catalog.cost(), &config, hardware);
    notes.note_calibration(catalog.cost(), config.hardware.as_deref());
    text.push_str(&notes.markdown());
    Ok(CheckFeasibilityOutput {
        notes,
        citations: citations(catalog, &wanted),
        walls,
        rationale: text,
        estimate,
        configuration: config,
    })
}
