//! The step: each pipeline rank's layers summed, the slowest rank times the microbatches, the
//! bubble, pipeline sends, the data-parallel gradient reduction and parameter gather left
//! exposed, the once-per-step work, and the throughput with its uncertainty band.

use super::super::memory::RankMemory;
use super::super::step_costs::{step_costs, StepInputs};
use super::kernel_rates::{achieved_hbm_bytes_per_s, dense_gemm_flops_per_s};
use crate::model::arch::{layer_kind_of, AttentionKind, FfnKind, LAYER_KINDS};
use crate::model::config::{FsdpStrategy, Precision, RecomputeModule};
use crate::model::estimate::{Ctx, Performance, TimeBreakdown};
use crate::model::flops::mtp_extra_per_layer;
use crate::model::hardware::Hardware;
use crate::model::kernels::CollectiveOp;
use crate::model::uncertainty::{run_condition, RunRegime};

impl Ctx<'_> {
    /// The share of a linear layer's GEMM time it spends: all of it, or, with frozen base
    /// weights (PEFT), the forward and input-gradient GEMMs without the weight gradient (two
    /// of three equal-FLOP GEMMs).
    fn frozen_weight_gemm_share(&self) -> f64 {
        if self.cfg.frozen_base_weights() {
            2.0 / 3.0
        } else {
            1.0
        }
    }

    pub(super) fn rank_time(
        &self,
        rank: u32,
        kind_times: &[TimeBreakdown; LAYER_KINDS],
    ) -> TimeBreakdown {
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
        t.offload_copies += self.layer_offload_stall_s(rank, &t);
        if mtp > 0 {
            t.add_scaled(&kind_times[self.arch.mtp_layer_kind()], mtp as f64);
            t.gemm += mtp as f64 * mtp_extra_per_layer(self.arch) * self.gpu_tokens
                / self.dense_gemm_rate();
        }
        if output {
            let logits_flops =
                6.0 * (self.arch.hidden_size * self.arch.vocab_size) as f64 * (1 + mtp) as f64;
            // The output layer stays in BF16 under every recipe.
            let rate = dense_gemm_flops_per_s(
                self.hw,
                self.k,
                Precision::Bf16,
                self.tokens,
                self.arch.hidden_size as f64,
            );
            let logits = logits_flops * self.gpu_tokens / rate;
            t.gemm += logits;
            if self.cfg.linear_cross_entropy.unwrap_or(false) {
                t.recompute += logits * (self.k.linear_ce_loss_slowdown - 1.0);
            }
        }
        // Applied to the rank's whole GEMM time, after recompute was priced from the full
        // forward (a recomputed forward is the same with frozen weights).
        t.gemm *= self.frozen_weight_gemm_share();
        t
    }
}

impl Ctx<'_> {
    /// Seconds one microbatch on `rank` waits on whole-layer offloading (`cpu_offloading`),
    /// given the rank's layers' time `layers`. Transformer Engine (2.10 on,
    /// `OffloadSynchronizer._default_offload_sync_init`) offloads the first N of the L layers
    /// one after another on a side stream from the end of layer 0's forward, and needs layer
    /// i's copy done before layer L − N + i's forward: the N copies have the forwards of layers
    /// 1 … L − 2 to run beside. The reloads start as the backward reaches layer L − 1 − N + i and
    /// have the backwards of layers L − 2 … 1. A direction waits for what its copies outlast of
    /// that cover (the forward taken as a third of a layer's time, the backward as two thirds).
    /// Earlier Transformer Engine releases (before 2.10, `cpu_offload_v1`) made each layer's
    /// offload finish within the next layer's forward, which hides less.
    fn layer_offload_stall_s(&self, rank: u32, layers: &TimeBreakdown) -> f64 {
        let offloaded = self.cfg.offloaded_layers();
        if offloaded == 0 || self.full_recompute {
            return 0.0;
        }
        let mut total_layers = 0u32;
        let mut copy_bytes = 0.0;
        for (_, stage) in self.l.rank_stages(rank) {
            let end = stage.first_layer + stage.num_layers;
            total_layers += stage.num_layers;
            let counts = self
                .arch
                .count_kinds(stage.first_layer, end.min(offloaded).max(stage.first_layer));
            for (kind, &n) in counts.iter().enumerate() {
                copy_bytes += n as f64 * self.act[kind].total() * self.tokens;
            }
        }
        let rate = self.activation_copy_bytes_per_s(false);
        if total_layers < 3 || copy_bytes <= 0.0 || rate <= 0.0 {
            return 0.0;
        }
        let copies = copy_bytes / rate;
        let cover = layers.total() * f64::from(total_layers - 2) / f64::from(total_layers);
        (copies - cover / 3.0).max(0.0) + (copies - cover * 2.0 / 3.0).max(0.0)
    }
}

pub(in crate::model::estimate) fn recompute_flops_per_token(ctx: &Ctx) -> f64 {
    let counts = ctx.arch.count_kinds(0, ctx.arch.num_layers);
    let mut total = 0.0;
    for (kind, &n) in counts.iter().enumerate() {
        let f = &ctx.flops[kind];
        let moe = layer_kind_of(kind).1 == FfnKind::Moe && ctx.has_moe();
        let r = if ctx.full_recompute {
            f.total() / 3.0
        } else {
            let cfg = ctx.cfg;
            let mut r = 0.0;
            // A Mamba-2 layer has no core attention to checkpoint.
            if cfg.has_recompute(&RecomputeModule::CoreAttn)
                && layer_kind_of(kind).0 != AttentionKind::Mamba
            {
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

pub(in crate::model::estimate) fn performance(
    ctx: &Ctx,
    worst_mem: &RankMemory,
    per_token: f64,
) -> Performance {
    let l = ctx.l;
    let mut kind_times: [TimeBreakdown; LAYER_KINDS] = Default::default();
    for (kind, t) in kind_times.iter_mut().enumerate() {
        *t = ctx.layer_time(kind);
    }
    let mut slowest = TimeBreakdown::default();
    let mut slowest_rank = 0;
    let mut slowest_total = -1.0;
    let mut all_ranks_total = 0.0;
    for rank in 0..l.pp {
        let t = ctx.rank_time(rank, &kind_times);
        let total = t.total();
        all_ranks_total += total;
        if total > slowest_total {
            slowest_total = total;
            slowest = t;
            slowest_rank = rank;
        }
    }
    let m = l.microbatches as f64;
    let mut b = TimeBreakdown::default();
    b.add_scaled(&slowest, m);
    // 1F1B fills and drains through every other rank once (a step is the slowest rank's
    // microbatches plus one microbatch of each other rank), interleaving divides that by the
    // model chunks: with even stages (PP − 1)/VPP of one microbatch.
    b.pipeline_bubble = (all_ranks_total - slowest_total).max(0.0) / l.vpp.max(1) as f64;
    if l.pp > 1 {
        let bytes = ctx.gpu_tokens * ctx.arch.hidden_size as f64 * 2.0;
        b.pp_comm = 2.0 * bytes * ctx.pipeline_boundary_seconds_per_byte();
    }

    // Data-parallel gradient reduction and parameter gather, per step: (reduce-scatter or
    // all-reduce seconds, parameter all-gather seconds).
    let dense_group = ctx.dense_dp_group();
    let expert_group = l.edp;
    let fsdp = ctx.cfg.fsdp_strategy();
    // Bytes per parameter a sharded optimizer's all-gather moves.
    let param_gather_bytes = ctx.cfg.weight_bytes();
    let dp_bytes = |params: f64, group: u32| -> (f64, f64) {
        // Frozen base weights (PEFT) have no gradients to reduce and no sharded update.
        if group <= 1 || ctx.cfg.frozen_base_weights() {
            return (0.0, 0.0);
        }
        // Several distributed-optimizer copies (HSDP under FSDP) reduce-scatter and gather
        // within a copy's ranks, then all-reduce each gradient shard across the copies once
        // per step (`inter_distributed_optimizer_instance_group`, param_and_grad_buffer.py).
        let copies = if ctx.cfg.optimizer_state_sharded() {
            ctx.cfg.optimizer_instances().min(group).max(1)
        } else {
            1
        };
        let within = (group / copies).max(1);
        let frac = (within - 1) as f64 / within as f64;
        // Gradients are reduce-scattered (all-reduced without sharding) in their buffer dtype.
        let grad = ctx.cfg.gradient_bytes();
        let across_copies = if copies > 1 {
            2.0 * (copies - 1) as f64 / copies as f64 * grad * params / within as f64
        } else {
            0.0
        };
        // Megatron-FSDP reduce-scatters sharded gradients after every microbatch's backward
        // (`grad_reduce_every_bprop` for optim_grads and optim_grads_params, megatron_fsdp.py),
        // and gathers sharded parameters for every forward and backward.
        let (reduce, gather) = match fsdp {
            Some(FsdpStrategy::OptimGradsParams) => (grad * m, 4.0 * m),
            Some(FsdpStrategy::OptimGrads) => (grad * m, 2.0),
            Some(FsdpStrategy::Optim) => (grad, 2.0),
            // Unsharded: one all-reduce of the gradients on the last microbatch.
            Some(FsdpStrategy::NoShard) => (2.0 * grad, 0.0),
            // Sharded optimizers (distributed Adam, distributed Muon) reduce-scatter gradients
            // and all-gather parameters.
            None if ctx.cfg.optimizer_sharded() => (grad, param_gather_bytes),
            None => (2.0 * grad, 0.0),
        };
        (
            params * reduce * frac + across_copies,
            params * gather * frac,
        )
    };
    let dense_span = ctx.dp_span();
    let local_params = worst_mem.dense_params + worst_mem.expert_params;
    let overlapped = ctx.cfg.overlap_grad_reduce.unwrap_or(true);
    let bucket = ctx.ddp_bucket_params(local_params);
    // Seconds of the reduce-scatters and all-gathers of one data-parallel group's bytes,
    // one bucket per collective (across nodes each call pays NCCL's latency).
    let dp_seconds = |(reduce, gather): (f64, f64), group: u32| {
        let rate = |op, message| ctx.collective_bytes_per_s(op, group, dense_span, message);
        let reduce_bw = rate(
            CollectiveOp::ReduceScatter,
            bucket * ctx.cfg.gradient_bytes(),
        );
        let gather_bw = rate(CollectiveOp::AllGather, bucket * param_gather_bytes);
        let per = |bytes: f64, bw: f64| if bytes > 0.0 { bytes / bw } else { 0.0 };
        (per(reduce, reduce_bw), per(gather, gather_bw))
    };
    let (dense_reduce_s, dense_gather_s) =
        dp_seconds(dp_bytes(worst_mem.dense_params, dense_group), dense_group);
    let (expert_reduce_s, expert_gather_s) = dp_seconds(
        dp_bytes(worst_mem.expert_params, expert_group),
        expert_group,
    );
    let reduce_s = dense_reduce_s + expert_reduce_s;
    let gather_s = dense_gather_s + expert_gather_s;
    b.dp_comm = if !overlapped {
        reduce_s + gather_s
    } else if fsdp.is_some() {
        // FSDP gathers and reduces every unit in every microbatch, overlapped throughout, but
        // only behind the compute there is: traffic beyond the step's compute stays exposed.
        let traffic = reduce_s + gather_s;
        (traffic * (1.0 - ctx.k.dp_overlap_fraction)).max(traffic - slowest_total * m)
    } else {
        // Gradients accumulate over the microbatches and are only complete during the last
        // one's backward (about 2/3 of a microbatch's work): the reduce-scatter hides behind
        // that much at most, and never its last bucket, whose gradients are complete only
        // when the backward ends. Parameters are gathered behind the first microbatch's
        // forward (about 1/3) with overlap_param_gather, except the first bucket, which the
        // forward waits for. A step of one or few microbatches leaves the rest exposed.
        let edge = if local_params > 0.0 {
            (bucket / local_params).min(1.0)
        } else {
            0.0
        };
        let covered_reduce = (reduce_s - slowest_total * 2.0 / 3.0).max(reduce_s * edge);
        let covered_gather = if ctx.cfg.overlap_param_gather.unwrap_or(true) {
            (gather_s - slowest_total / 3.0).max(gather_s * edge)
        } else {
            gather_s
        };
        covered_reduce + covered_gather
    };

    // Once per step: gradient zeroing, gradient clipping and the optimizer step, on the
    // GPU and (offloaded) on the host the node's GPUs share.
    // Without a sharded optimizer (Megatron-Core's Float16OptimizerWithFloat16Params, or FSDP's
    // no_shard) every rank steps all of its parameters.
    // A copy of the distributed optimizer steps over its own share of the ranks.
    let copies = ctx.cfg.optimizer_state_copies();
    let owners = |group: u32| (group / copies).max(1) as f64;
    let shard_params = if ctx.cfg.frozen_base_weights() {
        0.0
    } else if !ctx.cfg.optimizer_state_sharded() {
        worst_mem.dense_params + worst_mem.expert_params
    } else {
        worst_mem.dense_params / owners(dense_group)
            + worst_mem.expert_params / owners(expert_group)
    };
    let host = ctx.k.host_bandwidth_efficiency * 1e9;
    let step_inputs = StepInputs {
        shard_params,
        // Gradient zeroing and clipping touch the trained weights' gradients only.
        local_params: if ctx.cfg.frozen_base_weights() {
            0.0
        } else {
            local_params
        },
        hbm: achieved_hbm_bytes_per_s(ctx.hw),
        host_link: ctx
            .hw
            .host_link_bytes_per_s(ctx.k.host_bandwidth_efficiency),
        host_memory: ctx.hw.host_memory_gb_per_s * host,
        host_optimizer_params_per_s: ctx.k.host_optimizer_params_per_s_per_rank,
        gpus_sharing_host: l.world.min(ctx.hw.gpus_per_node).max(1) as f64,
    };
    let once_per_step = step_costs(ctx.cfg, &step_inputs);
    b.optimizer = once_per_step.total();

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
        ep_network: ctx.ep_reach.clone(),
        uncertainty: ctx.k.time_uncertainty.lookup(
            RunRegime {
                gpu: &ctx.hw.id,
                generation: &ctx.hw.generation,
                precision: ctx.precision,
                seq: l.seq,
                num_gpus: l.world,
                nvlink_domain: ctx.hw.nvlink_domain_size,
                condition: run_condition(ctx.cfg, ctx.has_moe(), ctx.arch.has_mamba_layers()),
            },
            model_tflops,
            step,
        ),
        host_optimizer: once_per_step.host_bounds,
        moe_block: {
            let counts = ctx.arch.count_kinds(0, ctx.arch.num_layers);
            (0..LAYER_KINDS)
                .filter(|&kind| counts[kind] > 0)
                .find_map(|kind| ctx.moe_block_time(kind))
        },
    }
}
