//! Memory of one pipeline rank, in both views (allocated and reserved), by component.

use super::super::activations::{
    attention_scores_backward_transient, cp_ring_backward_buffers,
    gated_delta_net_backward_transient, mtp_extra_activation, ActivationOptions, ActivationParts,
};
use super::super::arch::{layer_kind_of, Architecture, FfnKind, LAYER_KINDS};
use super::super::config::{FsdpStrategy, RecomputeMethod, ResolvedDispatcher, TrainingConfig};
use super::super::layout::ResolvedLayout;
use super::super::params::mtp_extra_params;
use super::dispatcher_buffers::{deepep_buffer_bytes, hybridep_buffer_bytes, DispatcherGroup};
use super::{Ctx, MemoryBreakdown, GIB};

pub(super) struct RankMemory {
    pub(super) b: MemoryBreakdown,
    pub(super) modules: ActivationParts,
    pub(super) layers: u32,
    pub(super) chunks: u32,
    pub(super) inflight: f64,
    pub(super) embedding: bool,
    pub(super) output: bool,
    pub(super) mtp: u32,
    pub(super) params: f64,
    pub(super) dense_params: f64,
    pub(super) expert_params: f64,
}

fn ceil_div(a: u32, b: u32) -> u32 {
    a.div_ceil(b.max(1))
}

impl Ctx<'_> {
    /// Activation-set units (microbatch × chunk) alive at the peak on `rank`.
    pub(super) fn inflight_units(&self, rank: u32) -> f64 {
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

    /// The activations 1F1B A2A overlap (`overlap_moe_expert_parallel_comm`) keeps alive beyond
    /// the in-flight microbatch·chunks, per local token: one layer's saved tensors except its
    /// expert (or dense MLP) intermediates, for the largest layer kind on the rank.
    ///
    /// Megatron-LM's combined 1F1B (`TransformerModelChunkSchedulePlan.run`,
    /// core/models/common/model_chunk_schedule_plan.py) pairs the forward of layer i of one
    /// microbatch with the backward of layer L−1−i of another, so the two together hold one
    /// chunk's L layers at every layer boundary (the interleaved warm-up runs one extra forward,
    /// `get_pp_rank_microbatches` in pipeline_parallel/schedules.py, so the count of whole
    /// chunks alive is that of plain 1F1B). Inside a pair (`TransformerLayerSchedulePlan.run`)
    /// the forward's attention, router and dispatch (`pre_dispatch_computation`, `moe_dispatch`,
    /// models/gpt/fine_grained_callables.py) run before the backward layer's expert backward
    /// and its attention backward, so one layer's attention-side tensors and dispatched tokens
    /// are alive on top (Megatron-LM d98e8a64).
    fn ep_overlap_extra_layer(&self, counts: &[u32; LAYER_KINDS]) -> Option<ActivationParts> {
        if !self.cfg.overlap_moe_expert_parallel_comm.unwrap_or(false)
            || self.full_recompute
            || !self.has_moe()
        {
            return None;
        }
        counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(kind, _)| ActivationParts {
                moe_experts: 0.0,
                mlp: 0.0,
                ..self.act[kind]
            })
            .max_by(|a, b| a.total().total_cmp(&b.total()))
    }

    /// Bytes per local token saved for `n` layers of `kind` in one chunk.
    pub(super) fn saved_per_token(&self, kind: usize, n: u32, out: &mut ActivationParts) {
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

    pub(super) fn rank_memory(&self, rank: u32) -> RankMemory {
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
            let end = stage.first_layer + stage.num_layers;
            let c = arch.count_kinds(stage.first_layer, end);
            // Whole-layer offloading keeps none of the first `offloaded_layers` layers' saved
            // activations at the peak: Transformer Engine's schedule (`OffloadSynchronizer.
            // _default_offload_sync_init`) finishes each offload before the forward that
            // would exceed (layers - offloaded) layers' worth and starts each reload only as
            // the backward frees as much.
            let resident_from = stage.first_layer.max(self.cfg.offloaded_layers()).min(end);
            let resident = arch.count_kinds(resident_from, end);
            let mut chunk_parts = ActivationParts::default();
            for (kind, (&n, &kept)) in c.iter().zip(&resident).enumerate() {
                counts[kind] += n;
                self.saved_per_token(kind, kept, &mut chunk_parts);
            }
            modules.add(&chunk_parts.scaled(units_per_chunk * self.tokens));
        }
        let layers: u32 = counts.iter().sum();
        if let Some(extra) = self.ep_overlap_extra_layer(&counts) {
            modules.add(&extra.scaled(self.tokens));
        }

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
            if moe == FfnKind::Moe || p.tp_sharded > 0.0 {
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

        let weight_bytes = self.cfg.weight_bytes();
        let dense_shard = (l.dp.saturating_mul(l.cp)) as f64;
        let expert_shard = l.edp as f64;
        let fsdp = self.cfg.fsdp_strategy();
        let (shard_params, shard_grads) = match fsdp {
            Some(FsdpStrategy::OptimGradsParams) => (true, true),
            Some(FsdpStrategy::OptimGrads) => (false, true),
            _ => (false, false),
        };
        let shard_opt = self.cfg.optimizer_state_sharded();
        // Each distributed-optimizer copy (hybrid FSDP's too) shards over its share of DP·CP
        // and expert DP; the optimizer state may be split over fewer groups
        // (`optimizer_state_copies`).
        let sharded = |bytes: f64, shard: bool, copies: u32| -> f64 {
            if shard {
                let per_copy = |ranks: f64| (ranks / copies as f64).max(1.0);
                bytes * (dense / per_copy(dense_shard) + experts / per_copy(expert_shard))
            } else {
                bytes * params
            }
        };
        let copies = self.cfg.optimizer_instances();
        let state_copies = self.cfg.optimizer_state_copies();
        let mut b = MemoryBreakdown {
            weights: sharded(weight_bytes, shard_params, copies),
            gradients: sharded(self.cfg.gradient_bytes(), shard_grads, copies),
            ..MemoryBreakdown::default()
        };
        // CPU offload keeps the fp32 master shard on the GPU unless the precision-aware
        // optimizer is on (see `gpu_optimizer_state_bytes` for the Megatron-LM source).
        b.optimizer = sharded(
            self.cfg.gpu_optimizer_state_bytes(),
            shard_opt,
            state_copies,
        );
        // The Muon family hands the embedding and output layer (dense parameters) to Adam,
        // whose state is larger; the norms it also hands over are too small to count.
        let scalar_extra =
            self.cfg.gpu_scalar_param_state_bytes() - self.cfg.gpu_optimizer_state_bytes();
        if scalar_extra != 0.0 {
            let ranks = if shard_opt {
                (dense_shard / state_copies as f64).max(1.0)
            } else {
                1.0
            };
            b.optimizer += scalar_extra * embedding_params / ranks;
        }
        if self.cfg.frozen_base_weights() {
            // PEFT: only the adapters train, and their share of the weights is small (LoRA
            // rank 8-64 on a few projections); the frozen base holds neither.
            b.gradients = 0.0;
            b.optimizer = 0.0;
        }
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
        // FP8 runs whose weights stay BF16 keep FP8 cast copies of them.
        if self.precision.is_low_precision() && weight_bytes > 1.0 {
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
        // The attention side's backward buffers (Gated DeltaNet chunk states and their
        // gradients, the CP ring's KV/dKV buffers) are allocated after the layer's MoE
        // backward has finished, so they add only what exceeds the MoE working set.
        let options = self.act_options();
        let group = if self.full_recompute {
            self.recompute_group.max(1) as f64
        } else {
            1.0
        };
        let mut working_by_kind = [(0.0, 0.0); LAYER_KINDS];
        let mut has_moe_layer = false;
        for (kind, &n) in counts.iter().enumerate() {
            if n == 0 && !(mtp > 0 && kind == arch.mtp_layer_kind()) {
                continue;
            }
            let f = &self.act_full[kind];
            has_moe_layer |= layer_kind_of(kind).1 == FfnKind::Moe && self.has_moe();
            working_by_kind[kind] = (
                (f.total() - f.moe_dispatch - f.moe_experts) * group * self.tokens,
                (gated_delta_net_backward_transient(arch, kind, l.tp as f64)
                    + cp_ring_backward_buffers(arch, kind, &options)
                    + attention_scores_backward_transient(arch, kind, &options))
                    * self.tokens,
            );
        }

        if output {
            let logits_ce_bytes = if self.cfg.cross_entropy_loss_fusion.unwrap_or(true) {
                self.k.logits_bytes_fused_ce
            } else {
                self.k.logits_bytes_standard_ce
            };
            let main_bytes = if self.cfg.linear_cross_entropy.unwrap_or(false) {
                0.0
            } else {
                logits_ce_bytes
            };
            // Each MTP layer's loss materialises its own logits through `output_layer` and
            // `compute_language_model_loss` (`process_mtp_loss`,
            // megatron/core/transformer/multi_token_prediction.py, Megatron-LM d98e8a64), before
            // and apart from the main head's `output_processor` (gpt_model.py), where a linear
            // cross entropy plugs in; their cross-entropy state stays until the backward
            // reaches `MTPLossAutoScaler`.
            let mtp_bytes = mtp as f64 * logits_ce_bytes;
            b.logits_loss =
                self.tokens * arch.vocab_size as f64 / l.tp as f64 * (main_bytes + mtp_bytes);
        }

        if has_moe_layer {
            if let Some(m) = &arch.moe {
                // Every ETP shard of an expert receives its tokens.
                let routed = self.gpu_tokens * m.top_k as f64 * self.l.etp.max(1) as f64 * h;
                let chunks = self.cfg.ep_overlap_chunks() as f64;
                b.moe_dispatch = self.k.moe_transient_bytes_per_routed_element * routed / chunks;
                b.dispatcher_buffers = self.dispatcher_buffer_bytes(m.num_experts as f64);
            }
        }
        b.backward_working_set = working_by_kind
            .iter()
            .map(|&(layer, gdn)| layer + (gdn - b.moe_dispatch).max(0.0))
            .fold(0.0, f64::max);
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

    /// The DeepEP / HybridEP buffers of the expert group (ETP·EP ranks, placed in Megatron's
    /// rank order, so they fill NVLink domains in order); none for the NCCL dispatchers.
    fn dispatcher_buffer_bytes(&self, num_experts: f64) -> f64 {
        let ranks = self.l.ep.saturating_mul(self.l.etp);
        if ranks <= 1 {
            return 0.0;
        }
        let group = DispatcherGroup {
            ranks,
            ranks_per_domain: self.hw.nvlink_domain_size.max(1).min(ranks),
            hidden: self.arch.hidden_size as f64,
            tokens_per_rank: self.gpu_tokens,
            num_experts,
            comm_sms: self.dispatcher_comm_sms(),
        };
        let sizing = &self.k.dispatcher_buffers;
        match self.dispatcher {
            ResolvedDispatcher::Deepep => deepep_buffer_bytes(&sizing.deepep, &group),
            ResolvedDispatcher::Hybridep => hybridep_buffer_bytes(&sizing.hybridep, &group),
            _ => 0.0,
        }
    }

    pub(super) fn act_options(&self) -> ActivationOptions {
        self.act_options
    }
}

/// The selective-recompute modules that free memory on this architecture, cheapest first.
fn selective_recompute_modules(arch: &Architecture) -> String {
    let mut modules = vec!["layernorm"];
    if arch.moe.is_some() {
        modules.push("moe_act");
    }
    if arch.mla.is_some() {
        modules.push("mla_up_proj");
    }
    modules.push(if arch.moe.is_some() { "moe" } else { "mlp" });
    modules.join(", ")
}

/// `data_parallel` is the dense and the expert data-parallel size: what a sharded optimizer
/// would split the dense and the expert state over.
pub(super) fn oom_fix(
    arch: &Architecture,
    cfg: &TrainingConfig,
    b: &MemoryBreakdown,
    data_parallel: (u32, u32),
) -> String {
    let (dp, edp) = data_parallel;
    let moe = arch.moe.is_some();
    let dynamic = b.activations + b.backward_working_set;
    let static_mem = b.static_total();
    if b.logits_loss > dynamic.max(static_mem) * 0.5 && !cfg.linear_cross_entropy.unwrap_or(false) {
        return "set linear_cross_entropy: true (or cross_entropy_loss_fusion) to stop materialising logits, or raise TP/CP".into();
    }
    if dynamic >= static_mem {
        // A materialising attention backend's score matrix grows with the square of the
        // sequence: the fused kernels keep none of it (and CP needs them).
        if let Some(backend) = cfg.attention_backend.filter(|b| b.materialises_scores()) {
            return format!(
                "use attention_backend auto (fused attention keeps no score matrix; attention_backend {backend} keeps queries × keys per head, and refuses context parallelism)"
            );
        }
        if cfg.recompute_granularity.is_none() {
            format!(
                "enable selective recompute (recompute_granularity: selective, recompute_modules: [{}]) or raise context_parallel_size",
                selective_recompute_modules(arch)
            )
        } else if !cfg.full_recompute() {
            let more = if moe { "moe, mlp" } else { "mlp" };
            format!("recompute more modules ({more}) or use full recompute, or raise context_parallel_size")
        } else {
            "raise context_parallel_size or pipeline_model_parallel_size".into()
        }
    } else if !cfg.optimizer_sharded()
        && cfg.fsdp_strategy().is_none()
        && b.optimizer > 0.0
        && dp.max(edp) > 1
    {
        // Every data-parallel rank holds the whole optimizer state (Megatron-LM's default
        // without --use-distributed-optimizer): sharding it is the cheapest cut.
        format!("set use_distributed_optimizer: true (Megatron-LM --use-distributed-optimizer) to shard the optimizer state over the data-parallel ranks (DP{dp}, expert DP{edp}); beyond that, optimizer_cpu_offload or further sharding")
    } else if !cfg.optimizer_cpu_offload.unwrap_or(false) {
        let shard = if moe { "larger EP/PP" } else { "larger PP" };
        format!("set optimizer_cpu_offload: true (with use_precision_aware_optimizer), or shard further ({shard}, or Megatron-FSDP)")
    } else {
        let ep = if moe {
            "expert_model_parallel_size or "
        } else {
            ""
        };
        format!(
            "shard weights further: larger {ep}pipeline_model_parallel_size, or use_megatron_fsdp"
        )
    }
}

pub(super) fn worst_reason(
    l: &ResolvedLayout,
    rank: u32,
    w: &RankMemory,
    per_rank: &[f64],
) -> String {
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
