//! Time of one layer of each kind for one microbatch on one GPU, by component: GEMMs,
//! attention, element-wise work, TP/CP/EP communication (with 1F1B all-to-all overlap),
//! host time, recompute and activation offload copies.

use super::ep_overlap::{LayerCompute, SharedExpertPasses};
use super::kernel_rates::achieved_hbm_bytes_per_s;
use super::offload::{layer_stretches, reload_stall_s};
use crate::model::activations::ActivationParts;
use crate::model::arch::{layer_kind_of, AttentionKind, FfnKind};
use crate::model::config::{CudaGraphScope, RecomputeModule, ResolvedDispatcher};
use crate::model::estimate::{Ctx, MoeBlockTime, TimeBreakdown};
use crate::model::kernels::CollectiveOp;

/// Seconds (fwd+bwd) of one layer's GEMMs for one microbatch on one GPU.
struct LayerGemms {
    /// Attention projections and the dense MLP or shared experts.
    dense: f64,
    /// The dense MLP, or in an MoE layer its shared experts.
    mlp: f64,
    /// The routed experts' grouped GEMMs.
    experts: f64,
}

impl Ctx<'_> {
    /// Time of one layer of `kind` for one microbatch on one GPU, by component.
    pub(super) fn layer_time(&self, kind: usize) -> TimeBreakdown {
        let (attention, ffn) = layer_kind_of(kind);
        let moe = ffn == FfnKind::Moe && self.has_moe();
        let f = &self.flops[kind];
        let l = self.l;
        let h = self.arch.hidden_size as f64;
        let n = self.gpu_tokens;
        let mut t = TimeBreakdown::default();
        let LayerGemms {
            dense: dense_gemm,
            mlp: mlp_gemm,
            experts: expert_gemm,
        } = self.layer_gemms(kind);
        t.gemm = dense_gemm + expert_gemm;
        let (softmax, softmax_fwd) = self.softmax_attention_seconds(f.attn_core * n, attention);
        let (linear, linear_fwd) = match attention {
            AttentionKind::Linear => self.linear_attention_seconds(f.linear_core * n),
            AttentionKind::Mamba => self.mamba_scan_seconds(f.linear_core * n),
            _ => (0.0, 0.0),
        };
        let attn = softmax + linear;
        let attn_fwd = softmax_fwd + linear_fwd;
        t.attention = attn;
        let hbm = achieved_hbm_bytes_per_s(self.hw);
        t.elementwise = self.layer_elementwise_seconds(kind);

        // Tensor parallel: AG + RS around attention and around the dense MLP / shared
        // experts, forward and backward.
        let mut tp_fwd = 0.0;
        if l.tp > 1 {
            // An all-gather and a reduce-scatter around the mixer and around a dense MLP or
            // shared experts, where the layer has them.
            let tp_sharded_ffn = match ffn {
                FfnKind::Dense => true,
                FfnKind::Moe => {
                    !moe || self
                        .arch
                        .moe
                        .as_ref()
                        .is_some_and(|m| m.shared_expert_ffn_hidden_size > 0)
                }
                FfnKind::Absent => false,
            };
            let collectives =
                2.0 * ((attention != AttentionKind::Absent) as u8 + tp_sharded_ffn as u8) as f64;
            // Half all-gathers, half reduce-scatters of the sequence-parallel activations.
            let message = self.tokens * h * 2.0;
            let bytes = message * (l.tp - 1) as f64 / l.tp as f64;
            let rate = |op| self.collective_bytes_per_s(op, l.tp, l.tp, message);
            tp_fwd = collectives / 2.0
                * bytes
                * (1.0 / rate(CollectiveOp::AllGather) + 1.0 / rate(CollectiveOp::ReduceScatter));
            t.tp_comm = if self.cfg.tp_comm_overlap.unwrap_or(false) {
                tp_overlap_exposed_seconds(tp_fwd, dense_gemm, l.tp)
            } else {
                2.0 * tp_fwd
            };
        }

        // Context parallel.
        let mut cp_fwd = 0.0;
        if l.cp > 1 {
            let cp = self.cp_seconds(attention, attn, attn_fwd);
            t.cp_comm = cp.comm;
            cp_fwd = cp.comm_fwd;
            t.elementwise += cp.merge;
        }

        // Exposed host time: an MoE block keeps the GPU waiting on the CPU once per layer and
        // microbatch, whatever the layer's size (the dropless dispatch's device-to-host sync of
        // token counts drains the launch queue, and the calibration's token-drop rows, whose
        // padded dispatch has no sync point, need the same time); an FP8/FP4 recipe launches
        // its quantizers too. A layer without an MoE block the CPU issues ahead of the GPU: only
        // what its issue time exceeds of the layer's GPU work shows.
        let scopes = self.cfg.cuda_graph_scopes();
        let host_factor = if scopes.contains(&CudaGraphScope::FullIteration) {
            1.0 - self.k.full_iteration_graph_host_saving
        } else if scopes.is_empty() {
            1.0
        } else {
            1.0 - self.k.cuda_graph_host_saving
        };
        let host_per_layer = self.k.host_seconds_per_layer
            + if self.precision.is_low_precision() {
                self.k.low_precision_host_seconds_per_layer
            } else {
                0.0
            };
        let host = host_per_layer * host_factor;
        let mut host_overhead = if moe {
            host
        } else {
            let gpu_busy = t.gemm + t.attention + t.elementwise + t.tp_comm + t.cp_comm;
            (host - gpu_busy).max(0.0)
        };

        // Expert parallel.
        let mut ep_fwd = 0.0;
        if moe {
            let transfers = self.ep_transfers();
            let ep = transfers.total();
            ep_fwd = transfers.dispatch_fwd + transfers.combine_fwd;
            let compute = t.gemm + attn + t.elementwise;
            let mut exposed = ep;
            if self.cfg.overlap_moe_expert_parallel_comm.unwrap_or(false) {
                // Element-wise work splits between the two parts as the activations they
                // touch do.
                let experts_elementwise = t.elementwise
                    * self.elementwise_share(kind, |a| a.moe_dispatch + a.moe_experts);
                let pre_elementwise = t.elementwise - experts_elementwise;
                let experts = LayerCompute {
                    gemm: expert_gemm,
                    other: experts_elementwise,
                    other_fwd: experts_elementwise / 3.0,
                };
                // The TP and CP collectives of the attention part keep the compute stream busy
                // beside it (forward half the TP, a third of the CP).
                let pre_dispatch = LayerCompute {
                    gemm: dense_gemm,
                    other: attn + pre_elementwise + t.tp_comm + t.cp_comm,
                    other_fwd: attn_fwd + pre_elementwise / 3.0 + t.tp_comm / 2.0 + t.cp_comm / 3.0,
                };
                let paired = transfers.exposed_under_1f1b_overlap(
                    &pre_dispatch,
                    &experts,
                    self.cfg.delay_wgrad_compute.unwrap_or(false),
                    self.dispatcher_sm_share(),
                    host * self.k.ep_overlap_host_factor,
                );
                // Warm-up forwards and cool-down backwards have no partner.
                let unpaired = self.unpaired_layer_pass_fraction();
                exposed = unpaired * ep + (1.0 - unpaired) * paired.transfers;
                host_overhead = unpaired * host + (1.0 - unpaired) * paired.host;
            } else if self.cfg.moe_shared_expert_overlap.unwrap_or(false)
                && self.dispatcher != ResolvedDispatcher::Allgather
            {
                // The shared experts' GEMMs on their side stream.
                let shared = SharedExpertPasses::split(mlp_gemm, self.arch.mlp_matrices());
                let share = self.dispatcher_sm_share();
                exposed = transfers.exposed_beside_shared_experts(&shared, share);
                ep_fwd = transfers.forward_exposed_beside_shared_experts(&shared, share);
            }
            let chunks = self.cfg.ep_overlap_chunks();
            if chunks > 1 {
                let chunked = (1.0 - 1.0 / chunks as f64) * self.k.ep_chunk_overlap_efficiency;
                exposed -= (exposed * chunked).min(compute);
            }
            t.ep_comm = exposed.max(0.0);
        }

        // Recompute: forward work of the recomputed modules again, the checkpointed core
        // attention's and MLA up-projections' kept apart for the offload reloads below.
        let third = 1.0 / 3.0;
        let (mut recompute_core, mut recompute_up) = (0.0, 0.0);
        if self.full_recompute {
            // The layer's forward runs again, its communication with it (Transformer Engine's
            // CP ring or all-to-all included).
            t.recompute = (t.gemm + t.attention + t.elementwise) * third + tp_fwd + ep_fwd + cp_fwd;
        } else {
            let cfg = self.cfg;
            let mut r = 0.0;
            if cfg.has_recompute(&RecomputeModule::CoreAttn) && attention != AttentionKind::Mamba {
                // The checkpointed core attention is Transformer Engine's whole CP forward. A
                // Mamba-2 layer has no core attention to checkpoint (`MambaLayer`).
                recompute_core = attn_fwd + cp_fwd;
            }
            if cfg.has_recompute(&RecomputeModule::MlaUpProj) {
                recompute_up = f.mla_up_proj * n / self.dense_gemm_rate() * third;
            }
            r += recompute_core + recompute_up;
            if moe && cfg.has_recompute(&RecomputeModule::Moe) {
                // The checkpointed MoE layer (`MoELayer.forward`'s `custom_forward`) holds the
                // router, both transfers, the routed experts and the shared experts.
                r += (expert_gemm + mlp_gemm) * third + ep_fwd;
            }
            if !moe && cfg.has_recompute(&RecomputeModule::Mlp) {
                r += mlp_gemm * third;
            }
            if moe && cfg.has_recompute(&RecomputeModule::SharedExperts) {
                r += mlp_gemm * third;
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

        t.host_overhead = host_overhead;

        // Fine-grained activation offloading: the reloads past the backward that covers them
        // (`offload.rs`). The layer's backward by stretch, in forward order: GEMMs at two
        // thirds of their time, the attention backward, recompute where it runs, and the
        // exposed TP (four collectives) and EP (four transfers) seconds spread over the
        // stretches that hold them; element-wise kernels are left out of the cover (errs slow).
        let offloaded = &self.offloaded_per_token[kind];
        if offloaded.iter().any(|&bytes| bytes > 0.0) {
            let rate = self.activation_copy_bytes_per_s(true);
            let reload_s = offloaded.map(|bytes| bytes * self.tokens / rate);
            let dense = |flops: f64| flops * n / self.dense_gemm_rate() * 2.0 * third;
            let tp = t.tp_comm / 2.0 / 4.0;
            let ep = t.ep_comm / 4.0;
            let fc1_matrices = self.arch.mlp_matrices() - 1.0;
            let fc1_share = fc1_matrices / self.arch.mlp_matrices();
            let experts = expert_gemm * 2.0 * third;
            let moe_recompute = t.recompute - recompute_core - recompute_up;
            // In `LAYER_STRETCHES` order.
            let stretches = layer_stretches([
                0.0,
                dense(f.attn_proj - f.out_proj - f.mla_up_proj) + tp,
                dense(f.mla_up_proj) + recompute_up,
                (attn - attn_fwd) + t.cp_comm * 2.0 * third + recompute_core,
                dense(f.out_proj) + tp,
                0.0,
                ep + tp + moe_recompute,
                experts * fc1_share,
                0.0,
                experts * (1.0 - fc1_share) + mlp_gemm * 2.0 * third + ep + tp,
            ]);
            t.offload_copies = reload_stall_s(&stretches, &reload_s);
        }
        t
    }

    /// Seconds (fwd+bwd) of one layer's GEMMs of `kind` for one microbatch on one GPU.
    fn layer_gemms(&self, kind: usize) -> LayerGemms {
        let moe = layer_kind_of(kind).1 == FfnKind::Moe;
        let f = &self.flops[kind];
        let l = self.l;
        let n = self.gpu_tokens;
        // `f.mlp`: the dense MLP, or in an MoE layer its shared experts.
        let mlp = f.mlp * n / self.dense_gemm_rate();
        let dense = f.attn_proj * n / self.dense_gemm_rate() + mlp;
        let experts = match &self.arch.moe {
            Some(m) if moe => {
                // Each GPU runs its experts' shard (1/ETP of the FFN width) over every token
                // routed to them from the ETP·EP group.
                let tokens_per_expert =
                    n * m.top_k as f64 * l.ep as f64 * l.etp.max(1) as f64 / m.num_experts as f64;
                let expert_dim = (self.arch.hidden_size as f64)
                    .min(m.moe_ffn_hidden_size as f64 / l.etp.max(1) as f64);
                f.experts * n / self.expert_gemm_rate(tokens_per_expert, expert_dim)
            }
            _ => 0.0,
        };
        LayerGemms {
            dense,
            mlp,
            experts,
        }
    }

    /// Seconds (fwd+bwd) of one layer's memory-bound kernels of `kind` for one microbatch.
    fn layer_elementwise_seconds(&self, kind: usize) -> f64 {
        let moe = layer_kind_of(kind).1 == FfnKind::Moe;
        // Norms, activations, permutes and residuals scale with the BF16 working set; a
        // low-precision recipe adds its quantizers' traffic on every linear input and output
        // gradient (counted from Transformer Engine, not fitted).
        let elementwise_bytes = self.elementwise_basis[kind]
            * self.k.elementwise_traffic_per_activation_byte
            + self.quantized_elements[kind]
                * self
                    .k
                    .quantization_bytes_per_element
                    .per_element(self.precision);
        let mut bytes = elementwise_bytes * self.tokens;
        if moe && self.has_moe() {
            bytes += self.expert_eager_bytes(self.gpu_tokens);
        }
        bytes / achieved_hbm_bytes_per_s(self.hw)
    }

    /// Share of a layer's element-wise work that falls on the activations `part` picks: the
    /// work splits as the activations it touches do (the score matrix of a materialising
    /// backend aside, which the attention's own time carries).
    fn elementwise_share(&self, kind: usize, part: impl Fn(&ActivationParts) -> f64) -> f64 {
        let a = &self.act_full[kind];
        let total = a.total() - a.attention_scores;
        if total > 0.0 {
            (part(a) / total).clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    /// The MoE block of one layer of `kind` (router to combine, shared experts included) for
    /// one microbatch on one GPU, as a single-layer benchmark times it: GPU work and the four
    /// transfers, before any overlap and without host time. `None` for a layer without one.
    pub(super) fn moe_block_time(&self, kind: usize) -> Option<MoeBlockTime> {
        let moe = layer_kind_of(kind).1 == FfnKind::Moe;
        if !moe || !self.has_moe() {
            return None;
        }
        let gemms = self.layer_gemms(kind);
        let elementwise = self.layer_elementwise_seconds(kind)
            * self.elementwise_share(kind, |a| a.moe_dispatch + a.moe_experts + a.shared_experts);
        let transfers = self.ep_transfers();
        // GEMMs: the forward a third, data and weight gradients a third each; the element-wise
        // kernels' backward reads what the forward wrote and writes its gradients.
        let third = 1.0 / 3.0;
        let compute = gemms.experts + gemms.mlp + elementwise;
        Some(MoeBlockTime {
            forward_s: compute * third + transfers.dispatch_fwd + transfers.combine_fwd,
            backward_s: compute * 2.0 * third + transfers.dispatch_bwd + transfers.combine_bwd,
            routed_expert_gemm_s: gemms.experts,
            shared_expert_gemm_s: gemms.mlp,
            elementwise_s: elementwise,
            all_to_all_s: transfers.total(),
            measured_against: self
                .k
                .time_uncertainty
                .moe_block_band(&self.hw.id, self.precision)
                .cloned(),
        })
    }

    /// HBM bytes of the experts' eager element-wise kernels outside the fused activation for
    /// `tokens` tokens of one layer on this GPU (each routed to top-k experts): the FP32
    /// per-expert bias path of experts with biases, and the clamp before a clamped gated unit.
    fn expert_eager_bytes(&self, tokens: f64) -> f64 {
        let Some(m) = &self.arch.moe else { return 0.0 };
        let routed = tokens * m.top_k as f64;
        let mut bytes = 0.0;
        if m.expert_bias {
            bytes +=
                routed * self.arch.hidden_size as f64 * self.k.expert_bias_bytes_per_output_element;
        }
        if self.arch.activation_clamp.is_some() {
            let units = if self.arch.gated_linear_unit {
                2.0
            } else {
                1.0
            };
            let fc1_width = units * m.moe_ffn_hidden_size as f64 / self.l.etp.max(1) as f64;
            bytes += routed * fc1_width * self.k.activation_clamp_bytes_per_fc1_element;
        }
        bytes
    }
}

/// Exposed seconds of one layer's TP collectives (`collectives_fwd` each way: the backward
/// moves what the forward does) under `tp_comm_overlap`, beside `dense_gemm` seconds (fwd+bwd)
/// of the TP-sharded GEMMs (attention projections, dense MLP or shared experts).
///
/// Transformer Engine's userbuffers overlap (the layouts Megatron-Bridge's `userbuffers_*`
/// configs choose: `training/comm_overlap.py`) runs the forward all-gathers and reduce-scatters
/// and the backward dgrad exchanges as a ring of `tp` steps, each step's transfer beside the
/// GEMM chunk of the step before, and the backward's remaining input all-gather and dgrad
/// reduce-scatter in bulk beside the other backward GEMM. A direction's collectives therefore
/// show only where they outlast its GEMMs (the forward runs a third of the GEMM work, the
/// backward two thirds), and a ring's last reduce-scatter step, 1/tp of the forward's
/// reduce-scatters (half its collectives), has no GEMM left to hide behind. The SMs the bulk
/// transfers take (2 to 32 in those configs, a mean of about 8 on H100 and 12 on B200) are not
/// charged: about 0.05 s of Llama-3-70B's 21 s step on 64 H100 at TP4.
fn tp_overlap_exposed_seconds(collectives_fwd: f64, dense_gemm: f64, tp: u32) -> f64 {
    let last_step = collectives_fwd / 2.0 / f64::from(tp.max(1));
    let forward = (collectives_fwd - dense_gemm / 3.0).max(last_step);
    let backward = (collectives_fwd - dense_gemm * 2.0 / 3.0).max(0.0);
    forward + backward
}
