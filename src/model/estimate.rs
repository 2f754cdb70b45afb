//! `evaluate`: one training configuration -> layout checks, FLOPs, memory on the worst
//! pipeline rank, step time and throughput. Pure arithmetic; never panics.

use schemars::JsonSchema;
use serde::Serialize;

use super::activations::{
    layer_activation, mtp_extra_activation, ActivationOptions, ActivationParts,
};
use super::arch::{layer_kind_of, Architecture, AttentionKind, LAYER_KINDS};
use super::config::{
    CpCommType, CudaGraphScope, FsdpStrategy, Precision, RecomputeMethod, RecomputeModule,
    ResolvedDispatcher, TrainingConfig,
};
use super::constants::CostConstants;
use super::flops::{kind_table, model_flops_from_table, mtp_extra_per_layer, LayerFlops};
use super::hardware::Hardware;
use super::layout::{resolve, ResolvedLayout};
use super::megatron_rules::{self, Outcome, RuleInput};
use super::params::{kind_params, mtp_extra_params, total_params, LayerParams};

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
}

/// Step time by component, seconds; sums to `step_time_s`. Communication entries are the
/// exposed (not overlapped) part.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct TimeBreakdown {
    pub gemm: f64,
    pub attention: f64,
    pub elementwise: f64,
    pub recompute: f64,
    pub host_overhead: f64,
    pub tp_comm: f64,
    pub cp_comm: f64,
    pub ep_comm: f64,
    pub pp_comm: f64,
    pub dp_comm: f64,
    pub pipeline_bubble: f64,
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
}

impl Performance {
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
    act: [ActivationParts; LAYER_KINDS],
    act_full: [ActivationParts; LAYER_KINDS],
    /// Tokens of the local (CP-sharded) sequence per microbatch.
    tokens: f64,
    /// Tokens whose FLOPs one GPU computes per microbatch (tokens / TP).
    gpu_tokens: f64,
    full_recompute: bool,
    recompute_group: u32,
}

struct RankMemory {
    b: MemoryBreakdown,
    modules: ActivationParts,
    layers: u32,
    chunks: u32,
    inflight: f64,
    embedding: bool,
    output: bool,
    mtp: u32,
    params: f64,
    dense_params: f64,
    expert_params: f64,
}

fn ceil_div(a: u32, b: u32) -> u32 {
    a.div_ceil(b.max(1))
}

impl Ctx<'_> {
    fn has_moe(&self) -> bool {
        self.arch.moe.is_some()
    }

    /// Activation-set units (microbatch × chunk) alive at the peak on `rank`.
    fn inflight_units(&self, rank: u32) -> f64 {
        let pp = self.l.pp;
        let m = self.l.microbatches;
        if self.l.vpp <= 1 {
            m.min(pp - rank.min(pp - 1)) as f64
        } else {
            let warmup = (2 * (pp - 1 - rank.min(pp - 1)))
                .saturating_add((self.l.vpp - 1).saturating_mul(pp))
                .saturating_add(1);
            warmup.min(m.saturating_mul(self.l.vpp)) as f64
        }
    }

    /// Bytes per local token saved for `n` layers of `kind` in one chunk.
    fn saved_per_token(&self, kind: usize, n: u32, out: &mut ActivationParts) {
        if n == 0 {
            return;
        }
        if self.full_recompute {
            let group = self.recompute_group.max(1);
            match self.cfg.recompute_method {
                Some(RecomputeMethod::Block) => {
                    let recomputed = group.min(n);
                    let input_only = ActivationParts {
                        layer_input: self.act[kind].layer_input,
                        ..ActivationParts::default()
                    };
                    out.add(&input_only.scaled(recomputed as f64));
                    out.add(&self.act[kind].scaled((n - recomputed) as f64));
                }
                _ => {
                    let input_only = ActivationParts {
                        layer_input: self.act[kind].layer_input,
                        ..ActivationParts::default()
                    };
                    out.add(&input_only.scaled(ceil_div(n, group) as f64));
                }
            }
        } else {
            out.add(&self.act[kind].scaled(n as f64));
        }
    }

    fn rank_memory(&self, rank: u32) -> RankMemory {
        let arch = self.arch;
        let l = self.l;
        let h = arch.hidden_size as f64;
        let vocab_shard = (arch.vocab_size * arch.hidden_size) as f64 / l.tp as f64;
        let mut counts = [0u32; LAYER_KINDS];
        let mut modules = ActivationParts::default();
        let mut embedding = false;
        let mut output = false;
        let mut mtp = 0;
        let mut chunks = 0;
        let units_total = self.inflight_units(rank);
        let units_per_chunk = units_total / l.vpp.max(1) as f64;
        for (_, stage) in l.rank_stages(rank) {
            chunks += 1;
            embedding |= stage.embedding;
            output |= stage.loss;
            if stage.mtp {
                mtp = self.mtp_layers;
            }
            let c = arch.count_kinds(stage.first_layer, stage.first_layer + stage.num_layers);
            let mut chunk_parts = ActivationParts::default();
            for (kind, &n) in c.iter().enumerate() {
                counts[kind] += n;
                self.saved_per_token(kind, n, &mut chunk_parts);
            }
            modules.add(&chunk_parts.scaled(units_per_chunk * self.tokens));
        }
        let layers: u32 = counts.iter().sum();

        // Parameters on this GPU.
        let mut tp_params = 0.0;
        let mut replicated = 0.0;
        let mut experts = 0.0;
        let mut largest_unit: f64 = 0.0;
        let expert_div = (l.ep.saturating_mul(l.etp)) as f64;
        for (kind, &n) in counts.iter().enumerate() {
            let p = &self.params[kind];
            tp_params += p.tp_sharded * n as f64 / l.tp as f64;
            replicated += p.replicated * n as f64;
            experts += p.experts * n as f64 / expert_div;
            if n > 0 {
                largest_unit = largest_unit
                    .max(p.tp_sharded / l.tp as f64 + p.replicated + p.experts / expert_div);
            }
        }
        let mut embedding_params = 0.0;
        if embedding {
            embedding_params += vocab_shard;
        }
        if output && (!arch.tie_word_embeddings || l.pp > 1) {
            embedding_params += vocab_shard;
        }
        if mtp > 0 {
            let p = &self.params[arch.mtp_layer_kind()];
            let (proj, norms) = mtp_extra_params(arch);
            tp_params += mtp as f64 * (p.tp_sharded + proj) / l.tp as f64;
            replicated += mtp as f64 * (p.replicated + norms);
            experts += mtp as f64 * p.experts / expert_div;
            if !embedding && l.pp > 1 {
                embedding_params += vocab_shard; // MTP needs the embedding on the last stage
            }
            let (_, moe) = layer_kind_of(arch.mtp_layer_kind());
            if moe || p.tp_sharded > 0.0 {
                largest_unit = largest_unit.max(
                    (p.tp_sharded + proj) / l.tp as f64 + p.replicated + p.experts / expert_div,
                );
            }
        }
        if embedding || output {
            largest_unit = largest_unit.max(vocab_shard);
        }
        let dense = tp_params + replicated + embedding_params;
        let params = dense + experts;

        let low = self.precision.is_low_precision();
        let fp8_params = low && self.cfg.fp8_param_gather.unwrap_or(false);
        let weight_bytes = if fp8_params { 1.0 } else { 2.0 };
        let dense_shard = (l.dp.saturating_mul(l.cp)) as f64;
        let expert_shard = l.edp as f64;
        let fsdp = self.cfg.fsdp_strategy();
        let (shard_params, shard_grads, shard_opt) = match fsdp {
            Some(FsdpStrategy::OptimGradsParams) => (true, true, true),
            Some(FsdpStrategy::OptimGrads) => (false, true, true),
            Some(FsdpStrategy::Optim) => (false, false, true),
            Some(FsdpStrategy::NoShard) => (false, false, false),
            None => (false, false, self.cfg.optimizer_sharded()),
        };
        let sharded = |bytes: f64, shard: bool| -> f64 {
            if shard {
                bytes * (dense / dense_shard + experts / expert_shard)
            } else {
                bytes * params
            }
        };
        let mut b = MemoryBreakdown {
            weights: sharded(weight_bytes, shard_params),
            gradients: sharded(self.cfg.gradient_bytes(), shard_grads),
            ..MemoryBreakdown::default()
        };
        // CPU offload keeps the fp32 master shard on the GPU unless the precision-aware
        // optimizer is on (see `gpu_optimizer_state_bytes` for the Megatron-LM source).
        b.optimizer = sharded(self.cfg.gpu_optimizer_state_bytes(), shard_opt);
        b.fsdp_buffers = match fsdp {
            // Parameters all-gathered for `fsdp_unsharded_units` units (current and
            // prefetched); gradients of one unit before its reduce-scatter.
            Some(FsdpStrategy::OptimGradsParams) => {
                largest_unit
                    * (self.k.fsdp_unsharded_units * weight_bytes + self.cfg.gradient_bytes())
            }
            Some(FsdpStrategy::OptimGrads) => largest_unit * self.cfg.gradient_bytes(),
            _ => 0.0,
        };
        if low && !fp8_params {
            b.fp8_weight_copies = self.k.fp8_weight_copy_bytes * (tp_params + experts);
        }

        // Activations: in-flight microbatches, plus MTP on the last stage.
        if mtp > 0 {
            let kind = arch.mtp_layer_kind();
            let mut parts = ActivationParts::default();
            self.saved_per_token(kind, mtp, &mut parts);
            let extra = if self.full_recompute {
                0.0
            } else {
                mtp as f64 * mtp_extra_activation(arch, &self.act_options())
            };
            parts.layer_input += extra;
            // The loss stage runs each microbatch's backward right after its forward.
            modules.add(&parts.scaled(self.tokens));
        }
        b.activations = modules.total();

        // Backward working set: the largest layer (or recompute group) fully materialised,
        // without the MoE part, which `moe_dispatch` covers.
        let mut working: f64 = 0.0;
        let mut has_moe_layer = false;
        for (kind, &n) in counts.iter().enumerate() {
            if n == 0 && !(mtp > 0 && kind == arch.mtp_layer_kind()) {
                continue;
            }
            let f = &self.act_full[kind];
            has_moe_layer |= layer_kind_of(kind).1 && self.has_moe();
            working = working.max(f.total() - f.moe_dispatch - f.moe_experts);
        }
        let group = if self.full_recompute {
            self.recompute_group.max(1) as f64
        } else {
            1.0
        };
        b.backward_working_set = working * group * self.tokens;

        if output {
            let ce_bytes = if self.cfg.linear_cross_entropy.unwrap_or(false) {
                0.0
            } else if self.cfg.cross_entropy_loss_fusion.unwrap_or(true) {
                self.k.logits_bytes_fused_ce
            } else {
                self.k.logits_bytes_standard_ce
            };
            b.logits_loss = self.tokens * arch.vocab_size as f64 / l.tp as f64 * ce_bytes;
        }

        if has_moe_layer {
            if let Some(m) = &arch.moe {
                let routed = self.gpu_tokens * m.top_k as f64 * h;
                let chunks = self.cfg.ep_overlap_chunks() as f64;
                b.moe_dispatch = self.k.moe_transient_bytes_per_routed_element * routed / chunks;
                b.dispatcher_buffers = GIB
                    * match self.dispatcher {
                        ResolvedDispatcher::Deepep => self.k.deepep_buffer_gib,
                        ResolvedDispatcher::Hybridep => self.k.hybridep_buffer_gib,
                        _ => 0.0,
                    };
            }
        }
        if !self.cfg.cuda_graph_scopes().is_empty() {
            b.cuda_graph_pool = self.k.cuda_graph_pool_fraction * b.activations;
        }
        // Fragmentation of what the caching allocator serves per step; the dispatcher
        // buffers and the fixed reserve are outside the allocator.
        b.fragmentation = self.k.fragmentation_fraction
            * (b.activations + b.backward_working_set + b.logits_loss + b.moe_dispatch);
        b.fixed_reserve = self.k.fixed_reserve_gib * GIB;

        RankMemory {
            b,
            modules,
            layers,
            chunks,
            inflight: units_total,
            embedding,
            output,
            mtp,
            params,
            dense_params: dense,
            expert_params: experts,
        }
    }

    fn act_options(&self) -> ActivationOptions {
        ActivationOptions::from_config(self.cfg, self.l.tp, self.l.cp, self.l.sequence_parallel)
    }

    // ---- time ----

    fn link_bytes_per_s(&self, span: u32) -> f64 {
        let gbps = if span <= self.hw.nvlink_domain_size {
            self.hw.nvlink_gb_per_s
        } else {
            self.hw.network_gb_per_s
        };
        gbps * 1e9 * self.hw.efficiency.collective
    }

    /// Fraction of the large-GEMM rate a GEMM reaches given its token (M) dimension and its
    /// smallest weight dimension: small tiles fill fewer SMs and amortise less of each
    /// kernel's prologue, so each factor halves at its calibrated size.
    fn gemm_shape_factor(&self, m_tokens: f64, weight_dim: f64) -> f64 {
        let by_tokens = m_tokens / (m_tokens + self.k.expert_gemm_half_efficiency_tokens);
        let by_weights = weight_dim / (weight_dim + self.k.gemm_half_efficiency_dim);
        by_tokens * by_weights
    }

    /// Dense GEMMs (projections, dense MLPs, shared experts): the smallest weight dimension
    /// is the hidden size split over TP.
    fn dense_gemm_rate(&self) -> f64 {
        let dim = self.arch.hidden_size as f64 / self.l.tp as f64;
        self.gemm_rate(self.tokens, dim)
    }

    fn gemm_rate(&self, m_tokens: f64, weight_dim: f64) -> f64 {
        self.hw.gemm_peak_tflops(self.precision)
            * 1e12
            * self.hw.gemm_efficiency(self.precision)
            * self.gemm_shape_factor(m_tokens, weight_dim)
    }

    fn attention_rate(&self) -> f64 {
        let fp8_attention = self.cfg.fp8_dot_product_attention.unwrap_or(false)
            && self.precision.is_low_precision();
        let speedup = if fp8_attention {
            self.k.fp8_attention_speedup
        } else {
            1.0
        };
        self.hw.peak_tflops.bf16 * 1e12 * self.hw.efficiency.attention * speedup
    }

    /// EP all-to-all seconds (fwd+bwd) for one MoE layer and one microbatch, before overlap.
    fn ep_comm_seconds(&self) -> f64 {
        let Some(m) = &self.arch.moe else { return 0.0 };
        let l = self.l;
        let h = self.arch.hidden_size as f64;
        let k = m.top_k as f64;
        let group = l.ep.saturating_mul(l.etp);
        if group <= 1 {
            return 0.0;
        }
        let dispatch_bytes = if self.precision.is_low_precision()
            && matches!(
                self.dispatcher,
                ResolvedDispatcher::Deepep | ResolvedDispatcher::Hybridep
            ) {
            1.0
        } else {
            2.0
        };
        let leaving = (group - 1) as f64 / group as f64;
        let bytes = match self.dispatcher {
            ResolvedDispatcher::Allgather => {
                // Gather all tokens of the EP group, reduce-scatter back; fwd and bwd.
                self.gpu_tokens * h * 2.0 * (group - 1) as f64 * 2.0
            }
            _ => self.gpu_tokens * k * h * (dispatch_bytes + 2.0 + 2.0 + 2.0) * leaving,
        };
        let domain = self.hw.nvlink_domain_size;
        let on_node = (domain.min(group) as f64) / group as f64;
        let intra = bytes * on_node;
        let mut inter = bytes * (1.0 - on_node);
        if matches!(
            self.dispatcher,
            ResolvedDispatcher::Deepep | ResolvedDispatcher::Hybridep
        ) {
            inter *= self.k.deep_dispatch_internode_factor;
        }
        let nv = self.hw.nvlink_gb_per_s * 1e9 * self.hw.efficiency.collective;
        let net = self.hw.network_gb_per_s * 1e9 * self.hw.efficiency.collective;
        (intra / nv).max(inter / net)
    }

    /// Time of one layer of `kind` for one microbatch on one GPU, by component.
    fn layer_time(&self, kind: usize) -> TimeBreakdown {
        let (attention, moe) = layer_kind_of(kind);
        let moe = moe && self.has_moe();
        let f = &self.flops[kind];
        let l = self.l;
        let h = self.arch.hidden_size as f64;
        let n = self.gpu_tokens;
        let mut t = TimeBreakdown::default();
        let dense_gemm = (f.attn_proj + f.mlp) * n / self.dense_gemm_rate();
        let expert_tokens = match &self.arch.moe {
            Some(m) => n * m.top_k as f64 * l.ep as f64 / m.num_experts as f64,
            None => 0.0,
        };
        let expert_dim = match &self.arch.moe {
            Some(m) => (self.arch.hidden_size as f64)
                .min(m.moe_ffn_hidden_size as f64 / l.etp.max(1) as f64),
            None => self.arch.hidden_size as f64,
        };
        let expert_gemm = if moe {
            f.experts * n / self.gemm_rate(expert_tokens, expert_dim)
        } else {
            0.0
        };
        t.gemm = dense_gemm + expert_gemm;
        let attn = (f.attn_core + f.linear_core) * n / self.attention_rate();
        t.attention = attn;
        let hbm = self.hw.hbm_tb_per_s * 1e12 * self.hw.efficiency.hbm;
        let act_bytes = self.act_full[kind].total() * self.tokens;
        t.elementwise = act_bytes * self.k.elementwise_traffic_per_activation_byte / hbm;

        // Tensor parallel: AG + RS around attention and around the dense MLP / shared
        // experts, forward and backward.
        let mut tp_fwd = 0.0;
        if l.tp > 1 {
            let collectives = if !moe
                || self
                    .arch
                    .moe
                    .as_ref()
                    .map(|m| m.shared_expert_ffn_hidden_size > 0)
                    .unwrap_or(false)
            {
                4.0
            } else {
                2.0
            };
            let bytes = self.tokens * h * 2.0 * (l.tp - 1) as f64 / l.tp as f64;
            tp_fwd = collectives * bytes / self.link_bytes_per_s(l.tp);
            let mut tp = 2.0 * tp_fwd;
            if self.cfg.tp_comm_overlap.unwrap_or(false) {
                tp *= 1.0 - self.k.tp_overlap_fraction;
            }
            t.tp_comm = tp;
        }

        // Context parallel.
        if l.cp > 1 {
            let span = l.tp.saturating_mul(l.cp);
            let bw = self.link_bytes_per_s(span);
            let cp = l.cp as f64;
            let comm = match attention {
                AttentionKind::Linear => {
                    // Head-parallel all-to-all of q, k, v in and the output back, fwd and bwd.
                    let g = self.arch.linear_attention.as_ref();
                    let width = g
                        .map(|g| {
                            (2 * g.key_head_dim * g.num_key_heads
                                + 2 * g.value_head_dim * g.num_value_heads)
                                as f64
                        })
                        .unwrap_or(0.0);
                    2.0 * n * width * 2.0 * (cp - 1.0) / cp / bw
                }
                _ => {
                    // MLA circulates its compressed latent (kv_lora + rope) and expands it
                    // locally: measured DSV3 throughput at CP 32-64 over InfiniBand is only
                    // consistent with latent-sized transfers.
                    let kv_width = match &self.arch.mla {
                        Some(m) => (m.kv_lora_rank + m.qk_pos_emb_head_dim) as f64,
                        None => {
                            2.0 * (self.arch.kv_heads() * self.arch.head_dim()) as f64 / l.tp as f64
                        }
                    };
                    let chunk = self.tokens * kv_width * 2.0;
                    let q_width =
                        (self.arch.num_attention_heads * self.arch.head_dim()) as f64 / l.tp as f64;
                    match self.cfg.cp_comm_type.unwrap_or(CpCommType::P2p) {
                        CpCommType::A2a => {
                            // q, k, v and o re-sharded from sequence to heads and back.
                            2.0 * self.tokens * (2.0 * q_width + kv_width) * 2.0 * (cp - 1.0)
                                / cp
                                / bw
                        }
                        CpCommType::Allgather => 2.0 * chunk * (cp - 1.0) / bw,
                        _ => {
                            // Ring: KV forward, KV + dKV backward, overlapped with attention.
                            let ring = 3.0 * chunk * (cp - 1.0) / bw;
                            (ring - self.k.cp_overlap_fraction * attn).max(0.0)
                        }
                    }
                }
            };
            t.cp_comm = comm;
        }

        // Expert parallel.
        let mut ep_fwd = 0.0;
        if moe {
            let ep = self.ep_comm_seconds();
            ep_fwd = ep / 2.0;
            let compute = t.gemm + attn + t.elementwise;
            let mut exposed = ep;
            if self.cfg.overlap_moe_expert_parallel_comm.unwrap_or(false) {
                // The other microbatch's layer runs while this one's all-to-all is in
                // flight; its weight-gradient GEMMs (a third of the GEMM time) only cover
                // when they are deferred.
                let wgrad = t.gemm / 3.0;
                let covering = if self.cfg.delay_wgrad_compute.unwrap_or(false) {
                    compute
                } else {
                    compute - wgrad
                };
                exposed -= ep.min(self.k.ep_overlap_compute_fraction * covering);
            }
            let chunks = self.cfg.ep_overlap_chunks();
            if chunks > 1 {
                let chunked = (1.0 - 1.0 / chunks as f64) * self.k.ep_chunk_overlap_efficiency;
                exposed -= (exposed * chunked).min(compute);
            }
            t.ep_comm = exposed.max(0.0);
        }

        // Recompute: forward work of the recomputed modules again.
        let third = 1.0 / 3.0;
        if self.full_recompute {
            t.recompute = (t.gemm + t.attention + t.elementwise) * third + tp_fwd + ep_fwd;
        } else {
            let cfg = self.cfg;
            let mut r = 0.0;
            if cfg.has_recompute(&RecomputeModule::CoreAttn) {
                r += attn * third;
            }
            if cfg.has_recompute(&RecomputeModule::MlaUpProj) {
                r += f.mla_up_proj * n / self.dense_gemm_rate() * third;
            }
            if moe && cfg.has_recompute(&RecomputeModule::Moe) {
                r += expert_gemm * third + ep_fwd;
            }
            if !moe && cfg.has_recompute(&RecomputeModule::Mlp) {
                r += f.mlp * n / self.dense_gemm_rate() * third;
            }
            if moe && cfg.has_recompute(&RecomputeModule::SharedExperts) {
                r += f.mlp * n / self.dense_gemm_rate() * third;
            }
            let a = &self.act_full[kind];
            let norm_like = (if cfg.has_recompute(&RecomputeModule::Layernorm) {
                a.layernorm
            } else {
                0.0
            }) + (if cfg.has_recompute(&RecomputeModule::MoeAct) {
                a.moe_experts / 3.0
            } else {
                0.0
            });
            r += norm_like * self.tokens * 2.0 / hbm;
            t.recompute = r;
        }

        // Exposed host time: the dropless MoE's device-to-host sync and the launch latency
        // behind it stall the GPU once per layer and microbatch, whatever the layer's size.
        let scopes = self.cfg.cuda_graph_scopes();
        let host_factor = if scopes.contains(&CudaGraphScope::FullIteration) {
            0.05
        } else if scopes.is_empty() {
            1.0
        } else {
            1.0 - self.k.cuda_graph_host_saving
        };
        t.host_overhead = self.k.host_seconds_per_layer * host_factor;
        t
    }

    fn rank_time(&self, rank: u32, kind_times: &[TimeBreakdown; LAYER_KINDS]) -> TimeBreakdown {
        let mut counts = [0u32; LAYER_KINDS];
        let mut output = false;
        let mut mtp = 0;
        for (_, stage) in self.l.rank_stages(rank) {
            let c = self
                .arch
                .count_kinds(stage.first_layer, stage.first_layer + stage.num_layers);
            for (a, b) in counts.iter_mut().zip(c.iter()) {
                *a += b;
            }
            output |= stage.loss;
            if stage.mtp {
                mtp = self.mtp_layers;
            }
        }
        let mut t = TimeBreakdown::default();
        for (kind, &n) in counts.iter().enumerate() {
            if n > 0 {
                t.add_scaled(&kind_times[kind], n as f64);
            }
        }
        if mtp > 0 {
            t.add_scaled(&kind_times[self.arch.mtp_layer_kind()], mtp as f64);
            t.gemm += mtp as f64 * mtp_extra_per_layer(self.arch) * self.gpu_tokens
                / self.dense_gemm_rate();
        }
        if output {
            let logits_flops =
                6.0 * (self.arch.hidden_size * self.arch.vocab_size) as f64 * (1 + mtp) as f64;
            let rate = self.hw.peak_tflops.bf16
                * 1e12
                * self.hw.efficiency.gemm_bf16
                * self.gemm_shape_factor(self.tokens, self.arch.hidden_size as f64);
            let logits = logits_flops * self.gpu_tokens / rate;
            t.gemm += logits;
            if self.cfg.linear_cross_entropy.unwrap_or(false) {
                t.recompute += logits * (self.k.linear_ce_loss_slowdown - 1.0);
            }
        }
        t
    }
}

/// Evaluate one configuration. Never panics; problems are returned as violations.
pub fn evaluate(
    arch: &Architecture,
    hw: &Hardware,
    k: &CostConstants,
    cfg: &TrainingConfig,
) -> Estimate {
    let mut est = Estimate::default();
    if let Err(e) = arch.validate() {
        est.violations.push(violation(
            "invalid_architecture",
            e.to_string(),
            "fix the model card or config.json field named in the message".into(),
        ));
        return est;
    }
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
    let default_dispatcher = match (
        hw.default_dispatcher.moe_token_dispatcher_type,
        hw.default_dispatcher.moe_flex_dispatcher_backend,
    ) {
        (super::config::TokenDispatcher::Alltoall, _) => ResolvedDispatcher::Alltoall,
        (super::config::TokenDispatcher::Allgather, _) => ResolvedDispatcher::Allgather,
        (_, Some(super::config::FlexBackend::Hybridep)) => ResolvedDispatcher::Hybridep,
        _ => ResolvedDispatcher::Deepep,
    };
    let dispatcher = cfg.dispatcher(default_dispatcher);
    check_rules(arch, hw, cfg, l, precision, &mut est);
    apply_megatron_rules(arch, cfg, l, dispatcher, mtp_layers, &mut est);

    let full_recompute = cfg.full_recompute();
    let recompute_group = cfg.recompute_num_layers.unwrap_or(1).max(1);
    let opts = ActivationOptions::from_config(cfg, l.tp, l.cp, l.sequence_parallel);
    let full_opts = opts.without_savings();
    let mut act = [ActivationParts::default(); LAYER_KINDS];
    let mut act_full = [ActivationParts::default(); LAYER_KINDS];
    for kind in 0..LAYER_KINDS {
        act[kind] = layer_activation(arch, kind, &opts);
        act_full[kind] = layer_activation(arch, kind, &full_opts);
    }
    let tokens = l.seq as f64 * l.mbs as f64 / l.cp as f64;
    let ctx = Ctx {
        arch,
        hw,
        k,
        cfg,
        l,
        precision,
        dispatcher,
        mtp_layers,
        flops: kind_table(arch, l.seq),
        params: kind_params(arch),
        act,
        act_full,
        tokens,
        gpu_tokens: tokens / l.tp as f64,
        full_recompute,
        recompute_group,
    };

    // FLOPs.
    let counts = arch.count_kinds(0, arch.num_layers);
    let mf = model_flops_from_table(arch, &ctx.flops, &counts, mtp_layers);
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
        total_params_billion: total_params(arch, mtp_layers) / 1e9,
    };

    // Memory: every pipeline rank, keep the worst.
    let mut worst: Option<RankMemory> = None;
    let mut worst_rank = 0;
    let mut per_rank = Vec::with_capacity(l.pp as usize);
    let mut per_rank_allocated = Vec::with_capacity(l.pp as usize);
    for rank in 0..l.pp {
        let m = ctx.rank_memory(rank);
        let total = m.b.total();
        per_rank.push(total / GIB);
        per_rank_allocated.push(m.b.allocated() / GIB);
        if worst.as_ref().map(|w| total > w.b.total()).unwrap_or(true) {
            worst = Some(m);
            worst_rank = rank;
        }
    }
    if let Some(w) = worst {
        let peak = w.b.total() / GIB;
        let reason = worst_reason(l, worst_rank, &w, &per_rank);
        let to_gib = |x: f64| x / GIB;
        let b = &w.b;
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
            breakdown_gib: MemoryBreakdown {
                weights: to_gib(b.weights),
                gradients: to_gib(b.gradients),
                optimizer: to_gib(b.optimizer),
                fsdp_buffers: to_gib(b.fsdp_buffers),
                fp8_weight_copies: to_gib(b.fp8_weight_copies),
                activations: to_gib(b.activations),
                backward_working_set: to_gib(b.backward_working_set),
                logits_loss: to_gib(b.logits_loss),
                moe_dispatch: to_gib(b.moe_dispatch),
                cuda_graph_pool: to_gib(b.cuda_graph_pool),
                fragmentation: to_gib(b.fragmentation),
                dispatcher_buffers: to_gib(b.dispatcher_buffers),
                fixed_reserve: to_gib(b.fixed_reserve),
            },
            activations_by_module_gib: w.modules.scaled(1.0 / GIB),
            per_rank_peak_gib: per_rank,
            per_rank_allocated_gib: per_rank_allocated,
        };
        // Make the reported totals exactly the sums of the reported parts.
        est.memory.peak_gib = est.memory.breakdown_gib.total();
        est.memory.allocated_gib = est.memory.breakdown_gib.allocated();
        est.memory.headroom_gib = hw.memory_gib_usable - est.memory.peak_gib;
        est.performance = performance(&ctx, &w, per_token);
        est.flops.recompute_gflop_per_token = recompute_flops_per_token(&ctx) / 1e9;
        if est.performance.step_time_s > 0.0 {
            est.performance.hardware_tflops_per_gpu = (per_token
                + est.flops.recompute_gflop_per_token * 1e9)
                * est.performance.tokens_per_second_per_gpu
                / 1e12;
        }
    }

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
        precision: Some(precision),
        dispatcher: arch.moe.as_ref().map(|_| dispatcher),
        mtp_layers,
        layers_per_pipeline_rank: layers_per_rank,
        layers_per_virtual_stage: l.stages.iter().map(|s| s.num_layers).collect(),
        uneven_pipeline: l.uneven,
        tp_on_nvlink: l.tp <= hw.nvlink_domain_size,
        cp_on_nvlink: l.tp.saturating_mul(l.cp) <= hw.nvlink_domain_size,
        ep_on_nvlink: l.ep.saturating_mul(l.etp) <= hw.nvlink_domain_size,
    };

    if est.memory.peak_gib > hw.memory_gib_usable {
        est.violations.push(violation(
            "out_of_memory",
            format!(
                "peak memory {:.1} GiB on pipeline rank {} exceeds the {:.1} GiB usable on {}",
                est.memory.peak_gib,
                est.memory.worst_rank.pipeline_rank,
                hw.memory_gib_usable,
                hw.id
            ),
            oom_fix(cfg, &est.memory.breakdown_gib),
        ));
    }
    est.fits = est.violations.is_empty();
    est
}

/// Megatron-LM's own start-up checks (`megatron_rules`): refusals become violations, settings
/// Megatron ignores or overrides become warnings, each with its fix and citation.
fn apply_megatron_rules(
    arch: &Architecture,
    cfg: &TrainingConfig,
    l: &ResolvedLayout,
    dispatcher: ResolvedDispatcher,
    mtp_layers: u32,
    est: &mut Estimate,
) {
    let input = RuleInput {
        vpp: l.vpp,
        dispatcher,
        mtp_layers,
        stages: &l.stages,
        ..RuleInput::new(cfg, arch)
    };
    for f in megatron_rules::check(&input) {
        match f.outcome {
            Outcome::Violation => est.violations.push(Violation {
                code: f.code.to_string(),
                message: f.message,
                fix: f.fix,
                source: Some(f.source.to_string()),
            }),
            Outcome::Warning => est.warnings.push(f.warning_text()),
        }
    }
}

fn oom_fix(cfg: &TrainingConfig, b: &MemoryBreakdown) -> String {
    let dynamic = b.activations + b.backward_working_set;
    let static_mem = b.static_total();
    if b.logits_loss > dynamic.max(static_mem) * 0.5 && !cfg.linear_cross_entropy.unwrap_or(false) {
        return "set linear_cross_entropy: true (or cross_entropy_loss_fusion) to stop materialising logits, or raise TP/CP".into();
    }
    if dynamic >= static_mem {
        if cfg.recompute_granularity.is_none() {
            "enable selective recompute (recompute_granularity: selective, recompute_modules: [layernorm, moe_act, mla_up_proj, moe]) or raise context_parallel_size".into()
        } else if !cfg.full_recompute() {
            "recompute more modules (moe, mlp) or use full recompute, or raise context_parallel_size".into()
        } else {
            "raise context_parallel_size or pipeline_model_parallel_size".into()
        }
    } else if !cfg.optimizer_cpu_offload.unwrap_or(false) {
        "set optimizer_cpu_offload: true (with use_precision_aware_optimizer), or shard further (larger EP/PP, or Megatron-FSDP)".into()
    } else {
        "shard weights further: larger expert_model_parallel_size or pipeline_model_parallel_size, or use_megatron_fsdp".into()
    }
}

fn worst_reason(l: &ResolvedLayout, rank: u32, w: &RankMemory, per_rank: &[f64]) -> String {
    if l.pp == 1 {
        return "single pipeline stage: holds every layer, the embedding and the loss".into();
    }
    let mut parts = Vec::new();
    if rank == 0 {
        parts.push(format!(
            "first stage: holds the embedding and the most in-flight microbatch activations ({:.0} microbatch·chunks)",
            w.inflight
        ));
    }
    if w.output {
        let mut s = "last stage: holds the output layer and the logits/loss".to_string();
        if w.mtp > 0 {
            s.push_str(&format!(" plus {} MTP layer(s)", w.mtp));
        }
        parts.push(s);
    }
    let max_layers = (0..l.pp).map(|r| l.layers_on_rank(r)).max().unwrap_or(0);
    if l.uneven && w.layers == max_layers {
        parts.push(format!(
            "holds the most decoder layers ({}) in the uneven split",
            w.layers
        ));
    }
    if parts.is_empty() {
        parts.push(format!(
            "stage {rank} holds {} layers with {:.0} in-flight microbatch·chunks",
            w.layers, w.inflight
        ));
    }
    let min = per_rank.iter().cloned().fold(f64::INFINITY, f64::min);
    format!("{} (lightest stage: {:.1} GiB)", parts.join("; "), min)
}

fn recompute_flops_per_token(ctx: &Ctx) -> f64 {
    let counts = ctx.arch.count_kinds(0, ctx.arch.num_layers);
    let mut total = 0.0;
    for (kind, &n) in counts.iter().enumerate() {
        let f = &ctx.flops[kind];
        let moe = layer_kind_of(kind).1 && ctx.has_moe();
        let r = if ctx.full_recompute {
            f.total() / 3.0
        } else {
            let cfg = ctx.cfg;
            let mut r = 0.0;
            if cfg.has_recompute(&RecomputeModule::CoreAttn) {
                r += (f.attn_core + f.linear_core) / 3.0;
            }
            if cfg.has_recompute(&RecomputeModule::MlaUpProj) {
                r += f.mla_up_proj / 3.0;
            }
            if moe && cfg.has_recompute(&RecomputeModule::Moe) {
                r += f.experts / 3.0;
            }
            if (!moe && cfg.has_recompute(&RecomputeModule::Mlp))
                || (moe && cfg.has_recompute(&RecomputeModule::SharedExperts))
            {
                r += f.mlp / 3.0;
            }
            r
        };
        total += r * n as f64;
    }
    total
}

fn performance(ctx: &Ctx, worst_mem: &RankMemory, per_token: f64) -> Performance {
    let l = ctx.l;
    let mut kind_times: [TimeBreakdown; LAYER_KINDS] = Default::default();
    for (kind, t) in kind_times.iter_mut().enumerate() {
        *t = ctx.layer_time(kind);
    }
    let mut slowest = TimeBreakdown::default();
    let mut slowest_rank = 0;
    let mut slowest_total = -1.0;
    for rank in 0..l.pp {
        let t = ctx.rank_time(rank, &kind_times);
        let total = t.total();
        if total > slowest_total {
            slowest_total = total;
            slowest = t;
            slowest_rank = rank;
        }
    }
    let m = l.microbatches as f64;
    let mut b = TimeBreakdown::default();
    b.add_scaled(&slowest, m);
    b.pipeline_bubble = slowest_total * (l.pp - 1) as f64 / l.vpp.max(1) as f64;
    if l.pp > 1 {
        let bytes = ctx.gpu_tokens * ctx.arch.hidden_size as f64 * 2.0;
        let bw = ctx.link_bytes_per_s(if l.world <= ctx.hw.nvlink_domain_size {
            1
        } else {
            u32::MAX
        });
        b.pp_comm = 2.0 * (l.pp - 1) as f64 * bytes / bw;
    }

    // Data-parallel gradient reduction and parameter gather, per step.
    let dense_group = l.dp.saturating_mul(l.cp);
    let expert_group = l.edp;
    let dp_bytes = |params: f64, group: u32| -> f64 {
        if group <= 1 {
            return 0.0;
        }
        let frac = (group - 1) as f64 / group as f64;
        // Gradients are reduce-scattered (all-reduced without sharding) in their buffer dtype.
        let grad = ctx.cfg.gradient_bytes();
        let per_param = match ctx.cfg.fsdp_strategy() {
            Some(FsdpStrategy::OptimGradsParams) => 4.0 * m + grad,
            Some(_) => grad + 2.0,
            // Sharded optimizers (distributed Adam, distributed Muon) reduce-scatter gradients
            // and all-gather parameters.
            None if ctx.cfg.optimizer_sharded() => {
                grad + if ctx.cfg.fp8_param_gather.unwrap_or(false) {
                    1.0
                } else {
                    2.0
                }
            }
            None => 2.0 * grad,
        };
        params * per_param * frac
    };
    let dense_span = l.world / l.pp.max(1);
    let dp_time = dp_bytes(worst_mem.dense_params, dense_group) / ctx.link_bytes_per_s(dense_span)
        + dp_bytes(worst_mem.expert_params, expert_group) / ctx.link_bytes_per_s(dense_span);
    let overlapped = ctx.cfg.overlap_grad_reduce.unwrap_or(true);
    b.dp_comm = if overlapped {
        dp_time * (1.0 - ctx.k.dp_overlap_fraction)
    } else {
        dp_time
    };

    // Optimizer step: GPU part is HBM-bound; the offloaded part runs on the host.
    let shard_params = worst_mem.dense_params / dense_group.max(1) as f64
        + worst_mem.expert_params / expert_group.max(1) as f64;
    let offload = ctx.cfg.offload_fraction();
    let hbm = ctx.hw.hbm_tb_per_s * 1e12 * ctx.hw.efficiency.hbm;
    b.optimizer = shard_params * (1.0 - offload) * 32.0 / hbm
        + shard_params * offload * ctx.k.cpu_optimizer_seconds_per_gparam / 1e9;

    let step = b.total();
    let tokens = l.gbs as f64 * l.seq as f64;
    let tps = if step > 0.0 {
        tokens / (l.world as f64 * step)
    } else {
        0.0
    };
    let model_tflops = per_token * tps / 1e12;
    let peak = ctx.hw.gemm_peak_tflops(ctx.precision);
    let bf16_peak = ctx.hw.gemm_peak_tflops(Precision::Bf16);
    let over = |peak: f64| if peak > 0.0 { model_tflops / peak } else { 0.0 };
    Performance {
        model_tflops_per_gpu: model_tflops,
        hardware_tflops_per_gpu: model_tflops,
        tokens_per_second_per_gpu: tps,
        step_time_s: step,
        mfu: over(peak),
        mfu_peak: Hardware::gemm_peak_name(ctx.precision),
        mfu_peak_tflops: peak,
        mfu_bf16: over(bf16_peak),
        breakdown_s: b,
        bottleneck_rank: slowest_rank,
    }
}

fn check_rules(
    arch: &Architecture,
    hw: &Hardware,
    cfg: &TrainingConfig,
    l: &ResolvedLayout,
    precision: Precision,
    est: &mut Estimate,
) {
    let v = &mut est.violations;
    let w = &mut est.warnings;
    let tp = l.tp as u64;
    if !hw.supports(precision) {
        v.push(violation(
            "precision_unsupported",
            format!("{} cannot run {} GEMMs", hw.id, precision),
            match precision {
                Precision::Mxfp8 => {
                    "use fp8-blockwise on Hopper, or a Blackwell GPU for mxfp8".into()
                }
                _ => "use bf16 or an FP8 recipe this GPU supports".into(),
            },
        ));
    }
    if !arch.num_attention_heads.is_multiple_of(tp) {
        v.push(violation(
            "heads_not_divisible_by_tp",
            format!(
                "{} attention heads are not divisible by TP={tp}",
                arch.num_attention_heads
            ),
            format!("use a TP that divides {}", arch.num_attention_heads),
        ));
    }
    let uses_softmax = arch.attention_pattern.is_empty()
        || arch
            .attention_pattern
            .iter()
            .any(|k| *k != AttentionKind::Linear);
    if arch.mla.is_none() && uses_softmax && !arch.kv_heads().is_multiple_of(tp) {
        v.push(violation(
            "kv_heads_not_divisible_by_tp",
            format!(
                "{} KV heads (query groups) are not divisible by TP={tp}",
                arch.kv_heads()
            ),
            format!("use TP ≤ {} that divides it", arch.kv_heads()),
        ));
    }
    if let Some(g) = &arch.linear_attention {
        if g.num_key_heads % tp != 0 || g.num_value_heads % tp != 0 {
            v.push(violation(
                "linear_heads_not_divisible_by_tp",
                format!(
                    "Gated DeltaNet heads ({} key, {} value) are not divisible by TP={tp}",
                    g.num_key_heads, g.num_value_heads
                ),
                format!("use a TP that divides {}", g.num_key_heads),
            ));
        }
        let per_tp = g.num_key_heads / tp.max(1);
        if l.cp > 1 && (per_tp == 0 || !per_tp.is_multiple_of(l.cp as u64)) {
            v.push(violation(
                "cp_exceeds_heads",
                format!(
                    "CP={} cannot split {} Gated DeltaNet key heads per TP rank (its context parallelism is head-parallel)",
                    l.cp, per_tp
                ),
                format!("use CP dividing {per_tp}, or trade CP for TP"),
            ));
        }
    }
    match &arch.moe {
        Some(m) => {
            if m.num_experts % l.ep as u64 != 0 {
                v.push(violation(
                    "experts_not_divisible_by_ep",
                    format!("{} experts are not divisible by EP={}", m.num_experts, l.ep),
                    format!("use an EP that divides {}", m.num_experts),
                ));
            }
        }
        None => {
            if l.ep > 1 {
                v.push(violation(
                    "ep_without_experts",
                    format!("EP={} but {} is a dense model", l.ep, arch.display_name),
                    "set expert_model_parallel_size to 1".into(),
                ));
            }
        }
    }
    if l.cp > 1 {
        let div = 2u64.saturating_mul(l.cp as u64).saturating_mul(tp);
        if !l.seq.is_multiple_of(div) {
            v.push(violation(
                "seq_not_divisible",
                format!("seq_length {} is not divisible by 2·CP·TP = {div}", l.seq),
                format!("use a seq_length that is a multiple of {div}"),
            ));
        }
        if matches!(cfg.cp_comm_type, Some(CpCommType::A2a)) && uses_softmax {
            let per_tp = arch.kv_heads() / tp.max(1);
            if arch.mla.is_none() && (per_tp == 0 || !per_tp.is_multiple_of(l.cp as u64)) {
                v.push(violation(
                    "cp_exceeds_kv_heads",
                    format!(
                        "all-to-all CP={} needs the {} KV heads per TP rank to divide by CP",
                        l.cp, per_tp
                    ),
                    "use cp_comm_type p2p or a2a+p2p, or a smaller CP".into(),
                ));
            }
        }
    } else if l.sequence_parallel && !l.seq.is_multiple_of(tp) {
        v.push(violation(
            "seq_not_divisible",
            format!("seq_length {} is not divisible by TP={tp}", l.seq),
            format!("use a multiple of {tp}"),
        ));
    }
    for module in cfg.recompute_modules() {
        if let RecomputeModule::Other(name) = module {
            let closest = RecomputeModule::KNOWN
                .iter()
                .map(|k| (strsim::jaro_winkler(name, k), *k))
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, k)| k)
                .unwrap_or("layernorm");
            v.push(violation(
                "unknown_recompute_module",
                format!("unknown recompute module `{name}`"),
                format!(
                    "did you mean `{closest}`? valid: {}",
                    RecomputeModule::KNOWN.join(", ")
                ),
            ));
        }
    }
    if cfg.has_recompute(&RecomputeModule::Mlp)
        && arch
            .moe
            .as_ref()
            .map(|m| m.first_k_dense_layers == 0)
            .unwrap_or(false)
    {
        w.push("mlp recompute has no effect on pure-MoE layers".into());
    }
    if let Some(f) = cfg.optimizer_offload_fraction {
        if !(0.0..=1.0).contains(&f) || f.is_nan() {
            v.push(violation(
                "invalid_offload_fraction",
                format!("optimizer_offload_fraction {f} is outside [0, 1]"),
                "use a fraction between 0 and 1".into(),
            ));
        }
    }
    if l.vpp > 1 && !l.microbatches.is_multiple_of(l.pp) {
        w.push(format!(
            "interleaved 1F1B with {} microbatches, not a multiple of PP={}; Megatron may refuse this",
            l.microbatches, l.pp
        ));
    }
    if l.tp > hw.nvlink_domain_size {
        w.push(format!(
            "TP={} spans beyond one NVLink domain ({} GPUs); TP collectives go over the network",
            l.tp, hw.nvlink_domain_size
        ));
    }
    if cfg
        .cuda_graph_scopes()
        .contains(&CudaGraphScope::FullIteration)
        && arch.moe.is_some()
    {
        w.push("full_iteration CUDA graphs need drop-and-pad MoE (or paged stashing) for dropless routing".into());
    }
    if cfg.ep_overlap_chunks() > 1 && l.ep == 1 {
        w.push("moe_ep_overlap_chunks > 1 has no effect without expert parallelism".into());
    }
    if cfg.data_parallel_sharding_strategy.is_some() && !cfg.use_megatron_fsdp.unwrap_or(false) {
        w.push(
            "data_parallel_sharding_strategy is ignored unless use_megatron_fsdp is true".into(),
        );
    }
    if !cfg.moe_router_force_load_balancing.unwrap_or(true) && arch.moe.is_some() {
        w.push("routing is not force-balanced: expert load imbalance will add memory and time beyond this estimate".into());
    }
}
