//! `evaluate`: one training configuration -> layout checks, FLOPs, memory on the worst
//! pipeline rank, step time and throughput. Pure arithmetic; never panics.
//!
//! `evaluate` and the report types live here; `memory.rs` prices each pipeline rank's memory,
//! `time/` the step time (`step_costs.rs` its once-per-step part), `checks.rs` the layout
//! rules.

mod checks;
mod dispatcher_buffers;
mod memory;
mod step_costs;
mod time;

use schemars::JsonSchema;
use serde::Serialize;

use super::activations::{
    layer_activation, offloaded_by_group, ActivationOptions, ActivationParts, OffloadGroups,
    ScoreMatrix, BF16,
};
use super::arch::{Architecture, AttentionKind, RouterGroups, ValidArchitecture, LAYER_KINDS};
use super::config::{Precision, ResolvedDispatcher, TrainingConfig};
use super::constants::CostConstants;
use super::flops::{kind_table, model_flops_from_table, LayerFlops};
use super::hardware::Hardware;
use super::kernels::CollectiveOp;
use super::layout::{resolve, ResolvedLayout};
use super::linears::linear_elements;
use super::params::{kind_params, total_params_from, LayerParams};
use super::uncertainty::{MoeBlockBand, Uncertainty};
use checks::{
    apply_megatron_rules, check_rules, check_warnings, host_optimizer_warning,
    offload_copies_warning, packed_sequences_warning, RuleOutcomes,
};
use memory::{oom_fix, worst_reason, RankMemory};
pub use time::{achieved_hbm_bytes_per_s, dense_gemm_flops_per_s, expert_gemm_flops_per_s};
use time::{performance, recompute_flops_per_token};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A configuration problem that makes the layout invalid, with a concrete fix.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Violation {
    pub code: String,
    pub message: String,
    pub fix: String,
    /// The Megatron-LM file and function that refuses the setting, for rules taken from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Memory of one GPU by component, GiB. The components sum to `MemoryReport::peak_gib`;
/// all but `fragmentation`, `dispatcher_buffers` and `fixed_reserve` sum to
/// `MemoryReport::allocated_gib`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct MemoryBreakdown {
    pub weights: f64,
    pub gradients: f64,
    pub optimizer: f64,
    /// Un-sharded FSDP units (parameter all-gather and gradient reduce-scatter buffers).
    pub fsdp_buffers: f64,
    /// FP8 cast copies of GEMM weights.
    pub fp8_weight_copies: f64,
    /// Activations saved by all in-flight microbatches on this rank.
    pub activations: f64,
    /// Tensors alive while one layer (or one recompute group) runs its backward.
    pub backward_working_set: f64,
    /// Logits and loss intermediates on the last stage.
    pub logits_loss: f64,
    /// The MoE layer's transient working set (permute buffers, expert intermediates).
    pub moe_dispatch: f64,
    pub cuda_graph_pool: f64,
    /// Caching-allocator fragmentation of the dynamic memory: reserved by PyTorch's
    /// allocator but not handed out (`max reserved` minus `max allocated`).
    pub fragmentation: f64,
    /// DeepEP / HybridEP communication buffers, allocated with cudaMalloc outside
    /// PyTorch's allocator.
    pub dispatcher_buffers: f64,
    /// CUDA context, NCCL communicators and library workspaces outside PyTorch's allocator.
    pub fixed_reserve: f64,
}

impl MemoryBreakdown {
    /// The reserved view: what the device holds for this process.
    pub fn total(&self) -> f64 {
        self.allocated() + self.not_allocated()
    }
    /// What `torch.cuda.max_memory_allocated` counts: every tensor PyTorch's caching
    /// allocator hands out.
    pub fn allocated(&self) -> f64 {
        self.weights
            + self.gradients
            + self.optimizer
            + self.fsdp_buffers
            + self.fp8_weight_copies
            + self.activations
            + self.backward_working_set
            + self.logits_loss
            + self.moe_dispatch
            + self.cuda_graph_pool
    }
    /// Terms in the reserved view and not in the allocated one: fragmentation inside the
    /// allocator, and what lives outside it (dispatcher buffers, context, NCCL).
    pub fn not_allocated(&self) -> f64 {
        self.fragmentation + self.dispatcher_buffers + self.fixed_reserve
    }
    /// Every term divided by `divisor` (bytes to GiB).
    pub fn divided_by(&self, divisor: f64) -> MemoryBreakdown {
        MemoryBreakdown {
            weights: self.weights / divisor,
            gradients: self.gradients / divisor,
            optimizer: self.optimizer / divisor,
            fsdp_buffers: self.fsdp_buffers / divisor,
            fp8_weight_copies: self.fp8_weight_copies / divisor,
            activations: self.activations / divisor,
            backward_working_set: self.backward_working_set / divisor,
            logits_loss: self.logits_loss / divisor,
            moe_dispatch: self.moe_dispatch / divisor,
            cuda_graph_pool: self.cuda_graph_pool / divisor,
            fragmentation: self.fragmentation / divisor,
            dispatcher_buffers: self.dispatcher_buffers / divisor,
            fixed_reserve: self.fixed_reserve / divisor,
        }
    }
    /// Weights, gradients, optimizer and their buffers (what does not scale with tokens).
    pub fn static_total(&self) -> f64 {
        self.weights + self.gradients + self.optimizer + self.fsdp_buffers + self.fp8_weight_copies
    }
}

/// The pipeline rank with the highest memory, and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct WorstRank {
    pub pipeline_rank: u32,
    pub reason: String,
    pub decoder_layers: u32,
    pub virtual_stages: u32,
    /// Microbatch·model-chunk activation sets alive at the peak (1F1B / interleaved 1F1B).
    pub inflight_microbatch_chunks: f64,
    pub holds_embedding: bool,
    pub holds_output_layer: bool,
    pub mtp_layers: u32,
    /// Parameters resident on this GPU (after TP/EP/PP, before any FSDP sharding), billions.
    pub params_billion: f64,
}

/// Memory in two views. `peak_gib` (reserved) is what the device holds: PyTorch's reserved
/// pool plus what lives outside it (context, NCCL, DeepEP/HybridEP buffers); fitting
/// decisions use it. `allocated_gib` is what `torch.cuda.max_memory_allocated` reports (the
/// `max allocated` of Megatron's `report_memory` line).
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct MemoryReport {
    /// Reserved view on the worst rank, GiB (compare with nvidia-smi, or Megatron's
    /// `total device memory used`).
    pub peak_gib: f64,
    /// Allocated view on the same rank, GiB (compare with `max allocated`; `max reserved`
    /// is this plus `breakdown_gib.fragmentation`).
    pub allocated_gib: f64,
    pub capacity_gib: f64,
    pub headroom_gib: f64,
    pub worst_rank: WorstRank,
    pub breakdown_gib: MemoryBreakdown,
    /// The `activations` component split by module, GiB.
    pub activations_by_module_gib: ActivationParts,
    /// Reserved-view peak of every pipeline rank, GiB.
    pub per_rank_peak_gib: Vec<f64>,
    /// Allocated-view peak of every pipeline rank, GiB.
    pub per_rank_allocated_gib: Vec<f64>,
    /// Every pipeline rank's peak by component, GiB (each sums to its `per_rank_peak_gib`).
    pub per_rank_breakdown_gib: Vec<MemoryBreakdown>,
}

/// Step time by component, seconds; sums to `step_time_s`. Communication entries are the
/// exposed (not overlapped) part.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct TimeBreakdown {
    pub gemm: f64,
    pub attention: f64,
    /// Memory-bound kernels: norms, activations, permutes, residuals and, under an FP8/FP4
    /// recipe, its quantizers.
    pub elementwise: f64,
    pub recompute: f64,
    pub host_overhead: f64,
    pub tp_comm: f64,
    pub cp_comm: f64,
    pub ep_comm: f64,
    pub pp_comm: f64,
    pub dp_comm: f64,
    /// Fine-grained activation offloading's copies over the GPU-host link that the compute
    /// does not hide: reloads slower than the backward they overlap.
    pub offload_copies: f64,
    pub pipeline_bubble: f64,
    /// Once per step (`step_costs.rs`): gradient zeroing, gradient clipping and the
    /// optimizer step, its CPU-offloaded part included.
    pub optimizer: f64,
}

impl TimeBreakdown {
    pub fn total(&self) -> f64 {
        self.gemm
            + self.attention
            + self.elementwise
            + self.recompute
            + self.host_overhead
            + self.tp_comm
            + self.cp_comm
            + self.ep_comm
            + self.pp_comm
            + self.dp_comm
            + self.offload_copies
            + self.pipeline_bubble
            + self.optimizer
    }
    fn add_scaled(&mut self, o: &TimeBreakdown, f: f64) {
        self.gemm += o.gemm * f;
        self.attention += o.attention * f;
        self.elementwise += o.elementwise * f;
        self.recompute += o.recompute * f;
        self.host_overhead += o.host_overhead * f;
        self.tp_comm += o.tp_comm * f;
        self.cp_comm += o.cp_comm * f;
        self.ep_comm += o.ep_comm * f;
        self.pp_comm += o.pp_comm * f;
        self.dp_comm += o.dp_comm * f;
        self.offload_copies += o.offload_copies * f;
        self.pipeline_bubble += o.pipeline_bubble * f;
        self.optimizer += o.optimizer * f;
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct Performance {
    /// Megatron's model FLOPs (no recompute) per GPU per second, TFLOP/s.
    pub model_tflops_per_gpu: f64,
    /// Including recompute FLOPs.
    pub hardware_tflops_per_gpu: f64,
    pub tokens_per_second_per_gpu: f64,
    pub step_time_s: f64,
    /// Model TFLOP/s over the dense peak of the GEMM precision, named in `mfu_peak`: the FP8
    /// peak for FP8 runs (half the BF16-peak figure on Hopper and Blackwell), the FP4 peak for
    /// NVFP4, the BF16 peak for BF16.
    pub mfu: f64,
    /// Which dense peak `mfu` is measured against: `BF16`, `FP8` or `FP4`.
    pub mfu_peak: &'static str,
    /// That peak, TFLOP/s per GPU.
    pub mfu_peak_tflops: f64,
    /// Model TFLOP/s over the dense BF16 peak whatever the precision, comparable across
    /// precisions and with MFU figures quoted against BF16; equals `mfu` for BF16 runs.
    pub mfu_bf16: f64,
    pub breakdown_s: TimeBreakdown,
    /// Pipeline rank that sets the pace.
    pub bottleneck_rank: u32,
    /// What one token sends across the network in the MoE all-to-all (absent when the expert
    /// group stays inside one NVLink domain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ep_network: Option<EpNetworkReach>,
    /// How far off predictions in this regime have been on measured runs (absent when the
    /// catalog has no `cards/time-uncertainty.yaml`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<Uncertainty>,
    /// The host part of a CPU-offloaded optimizer step and the two bounds it is the slower of
    /// (absent when nothing is offloaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_optimizer: Option<HostOptimizerStep>,
    /// One MoE layer's MoE block alone (absent for a model without experts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe_block: Option<MoeBlockTime>,
}

/// The MoE block of one MoE layer (router, dispatch, routed experts, combine and shared
/// experts) for one microbatch on one GPU, seconds: its GPU work and its four all-to-all
/// transfers before any overlap hides them, without host time. What a single-layer benchmark
/// (Megatron-LM's `moe_perf` test) times; the step's terms above price the same work inside
/// the whole layer, overlap and host time included.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct MoeBlockTime {
    pub forward_s: f64,
    pub backward_s: f64,
    /// Forward and backward of the routed experts' grouped GEMMs.
    pub routed_expert_gemm_s: f64,
    /// Forward and backward of the shared experts' GEMMs.
    pub shared_expert_gemm_s: f64,
    /// Router, permutes, activation, quantizers and the rest of the block's memory-bound work.
    pub elementwise_s: f64,
    /// Dispatch and combine, forward and backward.
    pub all_to_all_s: f64,
    /// What single-layer measurements in this precision class took against this pricing (the
    /// run's GPU's where there are some, else another GPU's, which `gpu` names); absent when
    /// the catalog has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_against: Option<MoeBlockBand>,
}

/// One rank's host optimizer step under `optimizer_cpu_offload`: it runs at the slower of the
/// rank's own rate and its share of the node's memory bandwidth, so the pair says how much a
/// rank given more CPU threads could gain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, JsonSchema)]
pub struct HostOptimizerStep {
    /// Parameters this rank steps on the host.
    pub offloaded_params: f64,
    /// Seconds at the rate one rank's CPU optimizer reached in a measured run
    /// (`host_optimizer_params_per_s_per_rank`).
    pub rank_rate_bound_s: f64,
    /// Seconds if every rank of the node streamed at once at the node's achieved memory
    /// bandwidth (`host_memory_gb_per_s` × `host_bandwidth_efficiency`).
    pub node_bandwidth_bound_s: f64,
    /// Each GPU-host copy (gradients down, parameters up), seconds.
    pub copy_s: f64,
}

impl HostOptimizerStep {
    /// The host step priced: the slower bound.
    pub fn priced_s(&self) -> f64 {
        self.rank_rate_bound_s.max(self.node_bandwidth_bound_s)
    }
}

/// The network side of the expert group's all-to-all, per token.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct EpNetworkReach {
    /// Nodes (NVLink domains) the expert group spans, in Megatron's rank order.
    pub nodes: u32,
    /// Routed experts per token.
    pub top_k: u64,
    /// DeepEP/HybridEP: one copy per remote node holding any of the token's experts, forwarded
    /// over NVLink there; otherwise every copy for a remote expert crosses the network.
    pub deduplicated: bool,
    /// Copies of one token sent to other nodes, on average.
    pub remote_copies_per_token: f64,
    /// The model's group-limited routing where it bounds the nodes a token reaches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router_groups: Option<RouterGroups>,
}

impl EpNetworkReach {
    /// One clause for an answer: where a token's copies go.
    pub fn text(&self) -> String {
        let others = self.nodes.saturating_sub(1);
        if !self.deduplicated {
            return format!(
                "the all-to-all sends {:.2} of each token's {} expert copies to the other {others} nodes",
                self.remote_copies_per_token, self.top_k
            );
        }
        let mut text = format!(
            "DeepEP/HybridEP send each token to {:.2} of the other {others} nodes",
            self.remote_copies_per_token
        );
        if let Some(g) = &self.router_groups {
            text.push_str(&format!(
                " (group-limited routing: each token's experts come from {} of {} expert groups)",
                g.group_topk, g.num_groups
            ));
        }
        text
    }
}

impl Performance {
    /// The error band in words, to follow a TFLOP/s figure; empty without a band.
    pub fn band_text(&self) -> String {
        self.uncertainty
            .as_ref()
            .map(Uncertainty::text)
            .unwrap_or_default()
    }

    /// The step-time range the error band implies, to follow a step time; empty without a
    /// band.
    pub fn step_band_text(&self) -> String {
        self.uncertainty
            .as_ref()
            .map(Uncertainty::step_text)
            .unwrap_or_default()
    }

    /// MFU as a person should read it: with the peak it is measured against, and the BF16-peak
    /// figure beside it when that peak is not BF16.
    pub fn mfu_text(&self) -> String {
        let mut text = format!("{:.1}% MFU of the {} peak", self.mfu * 100.0, self.mfu_peak);
        if self.mfu_peak != Hardware::gemm_peak_name(Precision::Bf16) {
            text.push_str(&format!(", {:.1}% of the BF16 peak", self.mfu_bf16 * 100.0));
        }
        text
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct FlopsBreakdown {
    /// Attention/GDN projections, dense MLPs and shared experts.
    pub dense_gemm: f64,
    pub routed_experts: f64,
    pub attention_core: f64,
    pub linear_attention_core: f64,
    pub mtp: f64,
    pub logits: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct FlopsReport {
    pub gflop_per_token: f64,
    pub breakdown_gflop_per_token: FlopsBreakdown,
    /// Recompute adds this many GFLOP per token (not in the model count).
    pub recompute_gflop_per_token: f64,
    pub model_pflop_per_step: f64,
    pub total_params_billion: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct LayoutReport {
    pub num_gpus: u32,
    pub tp: u32,
    pub cp: u32,
    pub pp: u32,
    pub vpp: u32,
    pub ep: u32,
    pub etp: u32,
    pub dp: u32,
    pub edp: u32,
    pub micro_batch_size: u32,
    pub global_batch_size: u32,
    pub microbatches: u32,
    pub seq_length: u64,
    /// Tokens of one sequence each GPU holds (seq / (CP·TP) with SP, seq / CP without).
    pub local_tokens_per_gpu: u64,
    pub sequence_parallel: bool,
    pub precision: Option<Precision>,
    pub dispatcher: Option<ResolvedDispatcher>,
    pub mtp_layers: u32,
    pub layers_per_pipeline_rank: Vec<u32>,
    pub layers_per_virtual_stage: Vec<u32>,
    pub uneven_pipeline: bool,
    pub tp_on_nvlink: bool,
    pub cp_on_nvlink: bool,
    pub ep_on_nvlink: bool,
    /// How the CP ranks run attention: an all-to-all group of this size (1: none) inside a
    /// ring of `cp_ring_size` ranks (1: none), from `cp_comm_type` and
    /// `hierarchical_context_parallel_sizes`.
    pub cp_all_to_all_size: u32,
    pub cp_ring_size: u32,
}

/// Everything the cost model says about one configuration (`moe-skills check --json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct Estimate {
    pub fits: bool,
    pub violations: Vec<Violation>,
    pub warnings: Vec<String>,
    pub memory: MemoryReport,
    pub performance: Performance,
    pub flops: FlopsReport,
    pub layout: LayoutReport,
}

fn violation(code: &str, message: String, fix: String) -> Violation {
    Violation {
        code: code.to_string(),
        message,
        fix,
        source: None,
    }
}

/// Per-evaluation resolved quantities shared by the memory and time models.
struct Ctx<'a> {
    arch: &'a Architecture,
    hw: &'a Hardware,
    k: &'a CostConstants,
    cfg: &'a TrainingConfig,
    l: &'a ResolvedLayout,
    precision: Precision,
    dispatcher: ResolvedDispatcher,
    mtp_layers: u32,
    flops: [LayerFlops; LAYER_KINDS],
    params: [LayerParams; LAYER_KINDS],
    /// What the configuration recomputes and offloads, read once per evaluation.
    act_options: ActivationOptions,
    act: [ActivationParts; LAYER_KINDS],
    act_full: [ActivationParts; LAYER_KINDS],
    /// Bytes per local token of one layer of each kind that fine-grained activation offloading
    /// copies to the host in the forward and back in the backward, by offloading group.
    offloaded_per_token: [OffloadGroups; LAYER_KINDS],
    /// Bytes per local token the element-wise kernels scale with: the full working set with
    /// BF16 GEMM inputs (norms, activations and residuals run in BF16 under any recipe; a
    /// low-precision recipe's quantized copies are priced as quantizer traffic instead).
    elementwise_basis: [f64; LAYER_KINDS],
    /// Elements per local token a low-precision recipe quantizes in one layer (linear inputs
    /// and output gradients); zero in BF16.
    quantized_elements: [f64; LAYER_KINDS],
    /// Tokens of the local (CP-sharded) sequence per microbatch.
    tokens: f64,
    /// Tokens whose FLOPs one GPU computes per microbatch (tokens / TP).
    gpu_tokens: f64,
    full_recompute: bool,
    recompute_group: u32,
    /// Seconds per model FLOP of full softmax attention (fwd+bwd, fwd) from the card's
    /// kernel table, once per evaluation; `None` without one.
    full_attention_per_flop: Option<(f64, f64)>,
    /// What one token sends across the network in the MoE all-to-all, once per priced
    /// evaluation (`Ctx::ep_network_reach`).
    ep_reach: Option<EpNetworkReach>,
    /// NCCL size fractions already looked up in this evaluation.
    collective_memo: std::cell::RefCell<CollectiveMemo>,
}

/// A few (collective, group, message size) → fraction answers, kept for one evaluation (the
/// layout search prices thousands of candidates, each asking the same questions per layer
/// kind).
#[derive(Default)]
struct CollectiveMemo {
    entries: [Option<(CollectiveKey, f64)>; 8],
}

/// A collective, its group size and the bits of its message size.
type CollectiveKey = (CollectiveOp, u32, u64);

impl CollectiveMemo {
    fn get(&self, key: CollectiveKey) -> Option<f64> {
        self.entries
            .iter()
            .flatten()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// Keeps the first eight answers; later ones are recomputed when asked.
    fn insert(&mut self, key: CollectiveKey, fraction: f64) {
        if let Some(slot) = self.entries.iter_mut().find(|e| e.is_none()) {
            *slot = Some((key, fraction));
        }
    }
}

impl Ctx<'_> {
    fn has_moe(&self) -> bool {
        self.arch.moe.is_some()
    }
}

/// Evaluate one configuration. Never panics; problems are returned as violations.
pub fn evaluate(
    arch: &Architecture,
    hw: &Hardware,
    k: &CostConstants,
    cfg: &TrainingConfig,
) -> Estimate {
    if let Err(e) = arch.validate() {
        let mut est = Estimate::default();
        est.violations.push(violation(
            "invalid_architecture",
            e.to_string(),
            "fix the model card or config.json field named in the message".into(),
        ));
        return est;
    }
    evaluate_scoped(arch, hw, k, cfg, TimeScope::Always)
}

/// As [`evaluate`], for a layout search: when the memory peak already exceeds the GPU the step
/// is not priced (zero), since the search discards those candidates on memory alone and most
/// of its candidates are such; and no text is built (the worst rank's reason, the layout
/// rules' warnings, the out-of-memory message), since the search ranks on numbers and
/// evaluates the candidates it reports again with [`evaluate`].
pub fn evaluate_memory_first(
    arch: ValidArchitecture<'_>,
    hw: &Hardware,
    k: &CostConstants,
    cfg: &TrainingConfig,
) -> Estimate {
    evaluate_scoped(arch.get(), hw, k, cfg, TimeScope::WhenMemoryFits)
}

/// As [`evaluate_memory_first`], without pricing the step even when the memory fits: a search
/// probes lever sets for their memory verdict and prices only the candidates it keeps.
pub fn evaluate_memory_only(
    arch: ValidArchitecture<'_>,
    hw: &Hardware,
    k: &CostConstants,
    cfg: &TrainingConfig,
) -> Estimate {
    evaluate_scoped(arch.get(), hw, k, cfg, TimeScope::Never)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TimeScope {
    Always,
    WhenMemoryFits,
    Never,
}

/// Evaluates an architecture the caller has validated.
fn evaluate_scoped(
    arch: &Architecture,
    hw: &Hardware,
    k: &CostConstants,
    cfg: &TrainingConfig,
    scope: TimeScope,
) -> Estimate {
    let mut est = Estimate::default();
    let mut issues = Vec::new();
    let mtp_layers = cfg.mtp_num_layers.unwrap_or(arch.mtp_num_layers);
    let seq_for_balance = cfg.seq_length.unwrap_or(4096).max(1);
    let balance_flops = kind_table(arch, seq_for_balance);
    let all_counts = arch.count_kinds(0, arch.num_layers);
    let whole = model_flops_from_table(arch, &balance_flops, &all_counts, mtp_layers);
    let avg_layer = whole.decoder.total() / arch.num_layers.max(1) as f64;
    let loss_stage_layers = if avg_layer > 0.0 {
        (whole.logits + whole.mtp) / avg_layer
    } else {
        0.0
    };
    let layout = resolve(
        arch,
        cfg,
        mtp_layers,
        loss_stage_layers,
        &mut issues,
        &mut est.warnings,
    );
    for (code, message, fix) in issues {
        est.violations.push(violation(code, message, fix));
    }
    let l = &layout;
    let precision = cfg.precision();
    let dispatcher = cfg.dispatcher(hw.default_dispatcher.resolved());
    check_rules(arch, hw, cfg, l, precision, &mut est);

    let full_recompute = cfg.full_recompute();
    let recompute_group = cfg.recompute_num_layers.unwrap_or(1).max(1);
    let mut opts = ActivationOptions::from_config(cfg, l.tp, l.cp, l.sequence_parallel);
    opts.score_matrix = score_matrix(cfg, k, l.seq as f64);
    let full_opts = opts.without_savings();
    let mut act = [ActivationParts::default(); LAYER_KINDS];
    let mut act_full = [ActivationParts::default(); LAYER_KINDS];
    // Bytes per local token each layer kind sends to the host and reloads (fine-grained
    // activation offloading), by group; a fully recomputed layer saves only its input, so none.
    let mut offloaded = [OffloadGroups::default(); LAYER_KINDS];
    let offloading = opts.offloads_anything() && !full_recompute;
    // `activation_offload_fraction` f offloads the first f of each model chunk's groups in
    // forward order and keeps the rest (`post_warmup_callback`); every layer holds the same
    // groups, so on average a layer keeps f of the offloaded layout and 1 − f of the kept one.
    let offload_fraction = cfg
        .activation_offload_fraction
        .unwrap_or(1.0)
        .clamp(0.0, 1.0);
    // Only the kinds the model has (the MTP layers copy the last decoder layer's kind): the
    // others are counted zero times.
    for kind in (0..LAYER_KINDS).filter(|&kind| all_counts[kind] > 0) {
        act[kind] = layer_activation(arch, kind, &opts);
        act_full[kind] = layer_activation(arch, kind, &full_opts);
        if offloading {
            offloaded[kind] = offloaded_by_group(arch, kind, &opts).map(|b| b * offload_fraction);
            if offload_fraction < 1.0 {
                let kept = layer_activation(arch, kind, &opts.without_offloads());
                let mut mixed = act[kind].scaled(offload_fraction);
                mixed.add(&kept.scaled(1.0 - offload_fraction));
                act[kind] = mixed;
            }
        }
    }
    let tokens = l.seq as f64 * l.mbs as f64 / l.cp as f64;
    let mut ctx = Ctx {
        arch,
        hw,
        k,
        cfg,
        l,
        precision,
        dispatcher,
        mtp_layers,
        flops: if l.seq == seq_for_balance {
            balance_flops
        } else {
            kind_table(arch, l.seq)
        },
        params: kind_params(arch),
        act_options: opts,
        act,
        act_full,
        offloaded_per_token: offloaded,
        // Filled only where the step is priced (`elementwise_work_per_token`).
        elementwise_basis: [0.0; LAYER_KINDS],
        quantized_elements: [0.0; LAYER_KINDS],
        tokens,
        gpu_tokens: tokens / l.tp as f64,
        full_recompute,
        recompute_group,
        full_attention_per_flop: None,
        // Filled only where the step is priced.
        ep_reach: None,
        collective_memo: Default::default(),
    };

    // FLOPs.
    let counts = all_counts;
    let mf = if l.seq == seq_for_balance {
        whole
    } else {
        model_flops_from_table(arch, &ctx.flops, &counts, mtp_layers)
    };
    let per_token = mf.total();
    est.flops = FlopsReport {
        gflop_per_token: per_token / 1e9,
        breakdown_gflop_per_token: FlopsBreakdown {
            dense_gemm: (mf.decoder.attn_proj + mf.decoder.mlp) / 1e9,
            routed_experts: mf.decoder.experts / 1e9,
            attention_core: mf.decoder.attn_core / 1e9,
            linear_attention_core: mf.decoder.linear_core / 1e9,
            mtp: mf.mtp / 1e9,
            logits: mf.logits / 1e9,
        },
        recompute_gflop_per_token: 0.0,
        model_pflop_per_step: per_token * l.gbs as f64 * l.seq as f64 / 1e15,
        total_params_billion: total_params_from(arch, &ctx.params, &counts, mtp_layers) / 1e9,
    };

    // Memory: every pipeline rank, keep the worst.
    let mut worst: Option<RankMemory> = None;
    let mut worst_rank = 0;
    let mut per_rank = Vec::with_capacity(l.pp as usize);
    let mut per_rank_allocated = Vec::with_capacity(l.pp as usize);
    let mut per_rank_breakdown = Vec::with_capacity(l.pp as usize);
    for rank in 0..l.pp {
        let m = ctx.rank_memory(rank);
        let total = m.b.total();
        per_rank.push(total / GIB);
        per_rank_allocated.push(m.b.allocated() / GIB);
        per_rank_breakdown.push(m.b.divided_by(GIB));
        if worst.as_ref().map(|w| total > w.b.total()).unwrap_or(true) {
            worst = Some(m);
            worst_rank = rank;
        }
    }
    // PP is at least 1, so some rank is the worst; without one there is nothing to report.
    let Some(w) = worst else {
        return finish(est, &ctx, true);
    };
    let peak = w.b.total() / GIB;
    let breakdown_gib = w.b.divided_by(GIB);
    // A search drops a candidate that does not fit without reading why its worst rank is the
    // worst, Megatron-LM's warnings about it, or its step time; only kept answers say them.
    let search = scope != TimeScope::Always;
    let unpriced = match scope {
        TimeScope::Always => false,
        TimeScope::WhenMemoryFits => breakdown_gib.total() > hw.memory_gib_usable,
        TimeScope::Never => true,
    };
    // A search ranks its candidates on numbers and describes only those it reports (it
    // evaluates them again in full), so it builds none of the text.
    let describe = !search;
    let reason = if describe {
        worst_reason(l, worst_rank, &w, &per_rank)
    } else {
        String::new()
    };
    let outcomes = if describe {
        RuleOutcomes::All
    } else {
        RuleOutcomes::Violations
    };
    if describe {
        check_warnings(arch, hw, cfg, l, opts.score_matrix, &mut est);
    }
    apply_megatron_rules(arch, cfg, l, dispatcher, mtp_layers, outcomes, &mut est);
    est.memory = MemoryReport {
        peak_gib: peak,
        allocated_gib: 0.0,
        capacity_gib: hw.memory_gib_usable,
        headroom_gib: hw.memory_gib_usable - peak,
        worst_rank: WorstRank {
            pipeline_rank: worst_rank,
            reason,
            decoder_layers: w.layers,
            virtual_stages: w.chunks,
            inflight_microbatch_chunks: w.inflight,
            holds_embedding: w.embedding,
            holds_output_layer: w.output,
            mtp_layers: w.mtp,
            params_billion: w.params / 1e9,
        },
        breakdown_gib,
        activations_by_module_gib: w.modules.scaled(1.0 / GIB),
        per_rank_peak_gib: per_rank,
        per_rank_allocated_gib: per_rank_allocated,
        per_rank_breakdown_gib: per_rank_breakdown,
    };
    // Make the reported totals exactly the sums of the reported parts.
    est.memory.peak_gib = est.memory.breakdown_gib.total();
    est.memory.allocated_gib = est.memory.breakdown_gib.allocated();
    est.memory.headroom_gib = hw.memory_gib_usable - est.memory.peak_gib;
    if !unpriced {
        ctx.full_attention_per_flop = ctx.attention_seconds_per_flop(AttentionKind::Full);
        ctx.ep_reach = ctx.ep_network_reach();
        (ctx.elementwise_basis, ctx.quantized_elements) =
            elementwise_work_per_token(&ctx, &all_counts);
        est.performance = performance(&ctx, &w, per_token);
        if describe {
            let local_params = w.dense_params + w.expert_params;
            if let Some(warning) = ctx.latency_bound_bucket_warning(local_params) {
                est.warnings.push(warning);
            }
            if let Some(warning) = host_optimizer_warning(&est.performance) {
                est.warnings.push(warning);
            }
            if let Some(warning) = packed_sequences_warning(
                &est.performance,
                cfg.sequence_packing == Some(true),
                l.seq,
            ) {
                est.warnings.push(warning);
            }
            let whole_layers = cfg.offloaded_layers();
            let copy_rate = ctx.activation_copy_bytes_per_s(whole_layers == 0);
            if let Some(warning) = offload_copies_warning(&est.performance, whole_layers, copy_rate)
            {
                est.warnings.push(warning);
            }
        }
        est.flops.recompute_gflop_per_token = recompute_flops_per_token(&ctx) / 1e9;
        if est.performance.step_time_s > 0.0 {
            est.performance.hardware_tflops_per_gpu = (per_token
                + est.flops.recompute_gflop_per_token * 1e9)
                * est.performance.tokens_per_second_per_gpu
                / 1e12;
        }
    }
    finish(est, &ctx, describe)
}

/// The score matrix of a backend that materialises it (`attention_backend` unfused or local):
/// every query row holds the whole sequence's keys.
fn score_matrix(cfg: &TrainingConfig, k: &CostConstants, keys: f64) -> Option<ScoreMatrix> {
    let backend = cfg.attention_backend?;
    let dropout = cfg.attention_dropout.unwrap_or(0.0);
    k.unfused_attention
        .per_score(backend, keys, dropout)
        .map(|(bytes, softmax)| ScoreMatrix {
            keys,
            bytes,
            softmax,
        })
}

/// Per layer kind, the bytes per local token the element-wise kernels scale with (the full
/// working set with BF16 GEMM inputs) and the elements a low-precision recipe quantizes (none
/// in BF16). Only a priced step needs them, so a memory-only search probe skips them.
fn elementwise_work_per_token(
    ctx: &Ctx,
    counts: &[u32; LAYER_KINDS],
) -> ([f64; LAYER_KINDS], [f64; LAYER_KINDS]) {
    let mut basis = [0.0; LAYER_KINDS];
    let mut quantized = [0.0; LAYER_KINDS];
    let bf16_opts = ActivationOptions {
        gemm_input_bytes: BF16,
        ..ctx.act_options.without_savings()
    };
    for kind in (0..LAYER_KINDS).filter(|&kind| counts[kind] > 0) {
        basis[kind] = if ctx.precision.is_low_precision() {
            quantized[kind] =
                linear_elements(ctx.arch, kind, ctx.l.tp as f64, ctx.act_options.sp_div).total();
            let parts = layer_activation(ctx.arch, kind, &bf16_opts);
            parts.total() - parts.attention_scores
        } else {
            ctx.act_full[kind].total() - ctx.act_full[kind].attention_scores
        };
    }
    (basis, quantized)
}

/// The layout report and the out-of-memory verdict, the same whether or not the step was
/// priced.
fn finish(mut est: Estimate, ctx: &Ctx, describe: bool) -> Estimate {
    let (arch, hw, cfg, l) = (ctx.arch, ctx.hw, ctx.cfg, ctx.l);
    let (cp_all_to_all_size, cp_ring_size) = if l.cp > 1 { cfg.cp_groups() } else { (1, 1) };
    let layers_per_rank: Vec<u32> = (0..l.pp).map(|r| l.layers_on_rank(r)).collect();
    est.layout = LayoutReport {
        num_gpus: l.world,
        tp: l.tp,
        cp: l.cp,
        pp: l.pp,
        vpp: l.vpp,
        ep: l.ep,
        etp: l.etp,
        dp: l.dp,
        edp: l.edp,
        micro_batch_size: l.mbs,
        global_batch_size: l.gbs,
        microbatches: l.microbatches,
        seq_length: l.seq,
        local_tokens_per_gpu: if l.sequence_parallel {
            l.seq / (l.cp as u64).saturating_mul(l.tp as u64).max(1)
        } else {
            l.seq / (l.cp as u64).max(1)
        },
        sequence_parallel: l.sequence_parallel,
        precision: Some(ctx.precision),
        dispatcher: arch.moe.as_ref().map(|_| ctx.dispatcher),
        mtp_layers: ctx.mtp_layers,
        layers_per_pipeline_rank: layers_per_rank,
        layers_per_virtual_stage: l.stages.iter().map(|s| s.num_layers).collect(),
        uneven_pipeline: l.uneven,
        tp_on_nvlink: l.tp <= hw.nvlink_domain_size,
        cp_on_nvlink: l.tp.saturating_mul(l.cp) <= hw.nvlink_domain_size,
        ep_on_nvlink: l.ep.saturating_mul(l.etp) <= hw.nvlink_domain_size,
        cp_all_to_all_size,
        cp_ring_size,
    };

    if est.memory.peak_gib > hw.memory_gib_usable {
        // A search's candidate is dropped on the code alone (and evaluated again in full if
        // it is reported); formatting its message is most of what it would cost.
        let (message, fix) = if describe {
            (
                format!(
                    "peak memory {:.1} GiB on pipeline rank {} exceeds the {:.1} GiB usable on {}",
                    est.memory.peak_gib,
                    est.memory.worst_rank.pipeline_rank,
                    hw.memory_gib_usable,
                    hw.id
                ),
                oom_fix(arch, cfg, &est.memory.breakdown_gib, (l.dp, l.edp)),
            )
        } else {
            (String::new(), String::new())
        };
        est.violations
            .push(violation("out_of_memory", message, fix));
    }
    est.fits = est.violations.is_empty();
    est
}
