//! Step time of the slowest pipeline rank: compute, exposed communication, bubble, host
//! overhead and the optimizer step, as named terms that sum to the step.

use super::super::activations::BF16;
use super::super::arch::{layer_kind_of, AttentionKind, LAYER_KINDS};
use super::super::config::{
    CpCommType, CudaGraphScope, FsdpStrategy, Precision, RecomputeModule, ResolvedDispatcher,
};
use super::super::flops::mtp_extra_per_layer;
use super::super::hardware::Hardware;
use super::super::kernels::{
    backward_flops_per_forward, AttentionDtype, CollectiveOp, CurveSet, KernelPass,
    LinearAttentionCall,
};
use super::super::routing;
use super::super::uncertainty::{run_condition, RunRegime};
use super::memory::RankMemory;
use super::step_costs::{step_costs, StepInputs};
use super::{Ctx, EpNetworkReach, Performance, TimeBreakdown};

impl Ctx<'_> {
    /// Achieved bytes/s of NCCL traffic for a group of `span` GPUs: NVLink inside one
    /// domain, the NIC beyond it.
    pub(super) fn link_bytes_per_s(&self, span: u32) -> f64 {
        if span <= self.hw.nvlink_domain_size {
            self.nvlink_bytes_per_s()
        } else {
            self.network_bytes_per_s()
        }
    }

    /// Achieved bytes/s of an NCCL `op` over a group of `group` GPUs laid over `span`
    /// consecutive ranks, moving messages of `message_bytes` (an all-gather's gathered
    /// output, a reduce-scatter's full input, one rank's all-to-all buffer), on the same
    /// footing as `link_bytes_per_s`. Inside the NVLink domain the card's measured curve
    /// (of the span's size) scales the large-message rate. Across it, all-gathers and
    /// reduce-scatters take NCCL's own latency model (`nccl_latency`) with the group spread
    /// over the nodes its span covers, at the ring rate of its GPUs' NICs side by side;
    /// all-to-alls send their remote share through each GPU's own NIC at the large-message
    /// rate (no by-size figure over the network is on the cards).
    pub(super) fn collective_bytes_per_s(
        &self,
        op: CollectiveOp,
        group: u32,
        span: u32,
        message_bytes: f64,
    ) -> f64 {
        let link = self.link_bytes_per_s(span);
        if span > self.hw.nvlink_domain_size {
            return self.network_collective_bytes_per_s(op, group, span, message_bytes, link);
        }
        let Some(table) = self.hw.nccl_nvlink_by_size.as_ref() else {
            return link;
        };
        // Every layer kind asks the same few questions: answer each once per evaluation.
        let key = (op, span, message_bytes.to_bits());
        if let Some(fraction) = self.collective_memo.borrow().get(key) {
            return link * fraction;
        }
        let fraction = table.size_fraction(op, span, message_bytes);
        self.collective_memo.borrow_mut().insert(key, fraction);
        link * fraction
    }

    /// Parameters per data-parallel bucket (one reduce-scatter and one all-gather each),
    /// sized as Megatron-LM's `resolve_ddp_bucket_size` does: the rank's `local_params` over
    /// `ddp_num_buckets`, else the configured size, else max(40M, 1M × DP·CP); without
    /// overlap_grad_reduce the whole buffer is one bucket.
    pub(super) fn ddp_bucket_params(&self, local_params: f64) -> f64 {
        if !self.cfg.overlap_grad_reduce.unwrap_or(true) {
            return local_params.max(1.0);
        }
        if let Some(count) = self.cfg.ddp_num_buckets {
            return (local_params / count.max(1) as f64).floor().max(1.0);
        }
        match self.cfg.ddp_bucket_size {
            Some(params) => params as f64,
            None => self.k.ddp_bucket_params_min.max(
                self.k.ddp_bucket_params_per_dp_rank * f64::from(self.dense_dp_group().max(1)),
            ),
        }
    }

    /// The dense parameters' data-parallel group (DP·CP GPUs) and the consecutive ranks it
    /// is laid over (one pipeline stage's worth).
    fn dense_dp_group(&self) -> u32 {
        self.l.dp.saturating_mul(self.l.cp)
    }
    fn dp_span(&self) -> u32 {
        self.l.world / self.l.pp.max(1)
    }

    /// Nodes (NVLink domains) a group of `group` GPUs laid over `span` consecutive ranks
    /// covers: at least 2 when called for a span beyond one domain, at most one per GPU.
    fn nodes_spanned(&self, group: u32, span: u32) -> u32 {
        span.div_ceil(self.hw.nvlink_domain_size.max(1))
            .clamp(2, group.max(2))
    }

    /// What the answer says when the data-parallel group spans nodes and each bucket's
    /// gradient reduce-scatter spends more time in NCCL's ring latency than in moving its
    /// bytes (Megatron-Core's default bucket grows with DP for that reason).
    pub(super) fn latency_bound_bucket_warning(&self, local_params: f64) -> Option<String> {
        // Under half the large-message rate: the latency outweighs the transfer.
        const LATENCY_BOUND_RATE_FRACTION: f64 = 0.5;
        let (group, span) = (self.dense_dp_group(), self.dp_span());
        if group < 2 || span <= self.hw.nvlink_domain_size || local_params <= 0.0 {
            return None;
        }
        let bucket = self.ddp_bucket_params(local_params);
        let message = bucket * self.cfg.gradient_bytes();
        let link = self.network_ring_bytes_per_s(group, span);
        let rate = self.collective_bytes_per_s(CollectiveOp::ReduceScatter, group, span, message);
        let fraction = rate / link;
        (fraction < LATENCY_BOUND_RATE_FRACTION).then(|| {
            let nodes = self.nodes_spanned(group, span);
            format!(
                "data-parallel buckets of {:.1}M parameters over {group} GPUs on {nodes} nodes \
                 are latency-bound: each gradient reduce-scatter reaches {:.0}% of the ring's \
                 large-message rate (NCCL's ring latency grows with the group); a larger \
                 ddp_bucket_size or fewer ddp_num_buckets amortises it (Megatron-LM's default is \
                 max(40M, 1M x DP·CP) parameters)",
                bucket / 1e6,
                fraction * 100.0
            )
        })
    }

    /// Across nodes: the ring's traffic per GPU over NCCL's modelled time for it.
    fn network_collective_bytes_per_s(
        &self,
        op: CollectiveOp,
        group: u32,
        span: u32,
        message_bytes: f64,
        link: f64,
    ) -> f64 {
        if group < 2 || message_bytes <= 0.0 {
            return link;
        }
        if op == CollectiveOp::AllToAll {
            return self.network_all_to_all_bytes_per_s(group, span, link);
        }
        let nodes = self.nodes_spanned(group, span);
        let ring = self.network_ring_bytes_per_s(group, span);
        let n = f64::from(group);
        let traffic = message_bytes * (n - 1.0) / n;
        let seconds = self.k.nccl_latency.seconds(group, nodes, traffic, ring);
        if seconds > 0.0 {
            traffic / seconds
        } else {
            ring
        }
    }

    /// Rate of an all-to-all over `group` GPUs laid over `span` consecutive ranks beyond one
    /// NVLink domain, on the all-to-all's whole traffic ((n − 1)/n of a rank's buffer): the
    /// share bound for the group's GPUs on other nodes leaves through the GPU's own NIC, the
    /// share for its node-mates over NVLink at the same time, and the slower of the two sets
    /// the time (`link` is one NIC's rate).
    fn network_all_to_all_bytes_per_s(&self, group: u32, span: u32, link: f64) -> f64 {
        let n = f64::from(group);
        let nodes = self.nodes_spanned(group, span);
        let per_node = (n / f64::from(nodes)).max(1.0);
        let remote = (n - per_node) / n;
        let local = (per_node - 1.0) / n;
        let per = |share: f64, rate: f64| if rate > 0.0 { share / rate } else { 0.0 };
        let seconds_per_byte = per(remote, link).max(per(local, self.nvlink_bytes_per_s()));
        if seconds_per_byte > 0.0 {
            ((n - 1.0) / n) / seconds_per_byte
        } else {
            link
        }
    }

    /// Large-message rate, per GPU, of an all-gather or reduce-scatter ring over `group`
    /// GPUs laid over `span` consecutive ranks beyond one NVLink domain. NCCL spreads its ring
    /// channels over the NICs next to the group's GPUs of each node (`busBw = nChannels ×
    /// bwInter`, `graph/tuning.cc`), so with `k` of the group's GPUs per node, each with its
    /// own NIC, the ring's network hops run `k` NICs side by side: the per-GPU rate is `k`
    /// times one NIC's, up to the NVLink rate its intra-node hops run at. One GPU per node
    /// leaves one NIC (all-to-alls and point-to-point sends already use every GPU's own NIC).
    fn network_ring_bytes_per_s(&self, group: u32, span: u32) -> f64 {
        let nic = self.network_bytes_per_s();
        let nodes = self.nodes_spanned(group, span);
        let per_node = (f64::from(group) / f64::from(nodes)).max(1.0);
        (nic * per_node).min(self.nvlink_bytes_per_s().max(nic))
    }

    /// Seconds per byte of one activation crossing every pipeline boundary once. Stages are
    /// the outermost of Megatron's rank order: a stage is `world / pp` consecutive ranks and
    /// rank r sends to rank r + stage, so a boundary runs over NVLink when every such pair
    /// shares a domain and over the network (each rank through its own NIC, the slowest pair
    /// setting the pace) when any pair straddles a domain's edge.
    fn pipeline_boundary_seconds_per_byte(&self) -> f64 {
        let l = self.l;
        let domain = u64::from(self.hw.nvlink_domain_size.max(1));
        let stage = u64::from(l.world / l.pp.max(1)).max(1);
        let (mut crossing, mut inside) = (0.0, 0.0);
        for boundary in 1..u64::from(l.pp) {
            // Senders (boundary − 1)·stage … boundary·stage − 1, receivers one stage on.
            let first_sender = (boundary - 1) * stage;
            let last_receiver = (boundary + 1) * stage - 1;
            if first_sender / domain == last_receiver / domain {
                inside += 1.0;
            } else {
                crossing += 1.0;
            }
        }
        let per = |rate: f64| if rate > 0.0 { 1.0 / rate } else { 0.0 };
        crossing * per(self.network_bytes_per_s()) + inside * per(self.nvlink_bytes_per_s())
    }

    fn nvlink_bytes_per_s(&self) -> f64 {
        self.hw.nvlink_gb_per_s * 1e9 * self.hw.efficiency.collective_nvlink
    }

    fn network_bytes_per_s(&self) -> f64 {
        self.hw.network_gb_per_s * 1e9 * self.hw.efficiency.collective_network
    }

    /// Fraction of the large-GEMM rate a GEMM reaches given its token (M) dimension and its
    /// smallest weight dimension: small tiles fill fewer SMs and amortise less of each
    /// kernel's prologue, so each factor halves at its calibrated size.
    pub(super) fn gemm_shape_factor(&self, m_tokens: f64, weight_dim: f64) -> f64 {
        let by_tokens = m_tokens / (m_tokens + self.k.gemm_half_efficiency_tokens);
        let by_weights = weight_dim / (weight_dim + self.k.gemm_half_efficiency_dim);
        by_tokens * by_weights
    }

    /// Dense GEMMs (projections, dense MLPs, shared experts): the smallest weight dimension
    /// is the hidden size split over TP.
    pub(super) fn dense_gemm_rate(&self) -> f64 {
        let dim = self.arch.hidden_size as f64 / self.l.tp as f64;
        self.gemm_rate(self.tokens, dim)
    }

    pub(super) fn gemm_rate(&self, m_tokens: f64, weight_dim: f64) -> f64 {
        self.large_gemm_rate() * self.gemm_shape_factor(m_tokens, weight_dim)
    }

    /// The large-GEMM rate at the run's precision, FLOP/s.
    fn large_gemm_rate(&self) -> f64 {
        self.hw.gemm_peak_tflops(self.precision) * 1e12 * self.hw.gemm_efficiency(self.precision)
    }

    /// Grouped expert GEMMs: the card's measured table by tokens per expert and expert width
    /// where it has one (its BF16 shape taken for every precision: no FP8 backward was
    /// measured), else the fitted half-efficiency sizes.
    pub(super) fn expert_gemm_rate(&self, tokens_per_expert: f64, weight_dim: f64) -> f64 {
        let measured = self
            .hw
            .grouped_gemm_kernels
            .as_ref()
            .and_then(|t| t.shape_factor(tokens_per_expert, weight_dim));
        match measured {
            Some(shape) => self.large_gemm_rate() * shape,
            None => self.gemm_rate(tokens_per_expert, weight_dim),
        }
    }

    pub(super) fn attention_rate(&self) -> f64 {
        let fp8_attention = self.cfg.fp8_dot_product_attention.unwrap_or(false)
            && self.precision.is_low_precision();
        let speedup = if fp8_attention {
            self.k.fp8_attention_speedup
        } else {
            1.0
        };
        self.hw.peak_tflops.bf16 * 1e12 * self.hw.efficiency.attention * speedup
    }

    /// Seconds (fwd+bwd, and the forward alone) of the softmax core attention of one layer
    /// and microbatch on one GPU, `flops` being its model FLOPs (Megatron's count: forward
    /// ×3). With the card's kernel table, each kernel call is priced at the published speed
    /// for the length it sees: without CP one causal call over the local sequence; with
    /// load-balanced ring CP the diagonal step (1/CP of the work) is causal over s/CP and
    /// the other steps are unmasked calls of s/CP queries against s/(2·CP) keys, priced at
    /// the key length. Backward FLOPs are `kernels::backward_flops_per_forward` (by head
    /// dims) × forward.
    fn softmax_attention_seconds(&self, flops: f64, kind: AttentionKind) -> (f64, f64) {
        if flops <= 0.0 {
            return (0.0, 0.0);
        }
        // Full attention's per-FLOP cost is the same for every layer: computed once per
        // evaluation (`Ctx::full_attention_per_flop`).
        let per_flop = if kind == AttentionKind::Sliding {
            self.attention_seconds_per_flop(kind)
        } else {
            self.full_attention_per_flop
        };
        match per_flop {
            Some((total, fwd)) => (flops * total, flops * fwd),
            None => {
                let total = flops / self.attention_rate();
                (total, total / 3.0)
            }
        }
    }

    /// Seconds per model FLOP (fwd+bwd, and the forward alone) of softmax attention layers
    /// of `kind` from the card's kernel table; `None` without a usable table.
    ///
    /// The kernel calls follow Transformer Engine's CP implementations
    /// (`attention/dot_product_attention/context_parallel.py`): an all-to-all group of size
    /// A turns s/CP tokens of all heads into A·s/CP tokens of 1/A of the heads; a ring of R
    /// ranks then runs, per step, the diagonal block causally (1/R of the work) and the
    /// other R−1 blocks unmasked as s/R queries against s/(2R) keys (load-balanced
    /// halves). `allgather` runs the local queries against the gathered keys: on average
    /// s/2 keys per query, unmasked.
    pub(super) fn attention_seconds_per_flop(&self, kind: AttentionKind) -> Option<(f64, f64)> {
        let table = self.hw.attention_kernels.as_ref()?;
        let (head_dim, head_dim_v) = match &self.arch.mla {
            Some(m) => (
                (m.qk_head_dim + m.qk_pos_emb_head_dim) as f64,
                m.v_head_dim as f64,
            ),
            None => (self.arch.head_dim() as f64, self.arch.head_dim() as f64),
        };
        let backward_per_forward = backward_flops_per_forward(head_dim, head_dim_v);
        // FP8 attention reads the table's curves of its own data type where the table has
        // them; otherwise the BF16 curves times `fp8_attention_speedup`.
        let wanted = self.attention_dtype();
        let full = CurveSet {
            dtype: wanted,
            window: None,
        };
        let (dtype, dtype_speedup) = if wanted.is_bf16() || table.has(full) {
            (wanted, 1.0)
        } else {
            (AttentionDtype::Bf16, self.fp8_attention_speedup())
        };
        let sliding = (kind == AttentionKind::Sliding)
            .then_some(self.arch.sliding_window)
            .flatten();
        // A window the table measured is priced from its own curves at the call's length;
        // otherwise a windowed call is priced as a full call as long as the window.
        let windowed = CurveSet {
            dtype,
            window: sliding,
        };
        let set = if sliding.is_some() && table.has(windowed) {
            windowed
        } else {
            CurveSet {
                dtype,
                window: None,
            }
        };
        let window = match (sliding, set.window) {
            (Some(w), None) => w as f64,
            _ => f64::INFINITY,
        };
        let seq = self.l.seq as f64;
        let speedup = dtype_speedup * table.peak_scale(self.hw.peak_tflops.bf16);
        // Megatron counts forward ×3.
        let fwd_flops = 1.0 / 3.0;
        let call = |causal: bool, len: f64, share: f64| -> Option<(f64, f64)> {
            let len = len.min(window);
            // Windowed curves are causal by construction.
            let causal = causal || set.window.is_some();
            let speed = |pass| table.tflops_in(set, head_dim, causal, pass, len);
            let f = speed(KernelPass::Fwd)? * 1e12 * speedup;
            let b = speed(KernelPass::Bwd)? * 1e12 * speedup;
            let fwd = share * fwd_flops / f;
            Some((fwd + share * backward_per_forward * fwd_flops / b, fwd))
        };
        if self.l.cp > 1 && self.cfg.cp_comm_type == Some(CpCommType::Allgather) {
            return call(false, seq / 2.0, 1.0);
        }
        let (_, ring) = self.cfg.cp_groups();
        let ring = ring.max(1) as f64;
        let block = seq / ring;
        if ring <= 1.0 {
            call(true, block, 1.0)
        } else {
            call(true, block, 1.0 / ring).and_then(|(t0, f0)| {
                call(false, block / 2.0, 1.0 - 1.0 / ring).map(|(t1, f1)| (t0 + t1, f0 + f1))
            })
        }
    }

    /// Seconds (fwd+bwd, forward) of the Gated DeltaNet core of one layer and microbatch on
    /// one GPU, `flops` being its model FLOPs. With the card's `linear_attention_kernel`
    /// timings: the microbatch's sequences walked over the full sequence for this GPU's value
    /// heads (1/TP of them, and 1/CP after Megatron's sequence-to-head all-to-all); without:
    /// the FLOPs at `efficiency.attention`.
    fn linear_attention_seconds(&self, flops: f64) -> (f64, f64) {
        let (Some(kernel), Some(g)) = (
            self.hw
                .linear_attention_kernel
                .as_ref()
                .filter(|k| k.usable()),
            self.arch.linear_attention.as_ref(),
        ) else {
            let total = flops / self.attention_rate();
            return (total, total / 3.0);
        };
        let shards = (self.l.tp.max(1) as f64) * (self.l.cp.max(1) as f64);
        kernel.seconds(&LinearAttentionCall {
            sequences: self.l.mbs.max(1) as f64,
            seq_len: self.l.seq as f64,
            value_heads: g.num_value_heads as f64 / shards,
            key_head_dim: g.key_head_dim as f64,
            value_head_dim: g.value_head_dim as f64,
            sm_count: self.hw.sm_count.unwrap_or(0) as f64,
        })
    }

    /// The data type fused attention runs in: BF16 unless `fp8_dot_product_attention` is set
    /// in an FP8/FP4 run; then MXFP8 attention under the MXFP8 recipe and per-tensor FP8 under
    /// the others, Transformer Engine's defaults (`dot_product_attention.py`, the table of
    /// linear and attention recipes: MXFP8 linear runs MXFP8 attention; FP8 delayed/current
    /// scaling run their own; NVFP4 linear layers pair with FP8 attention).
    fn attention_dtype(&self) -> AttentionDtype {
        if !self.fp8_attention_active() {
            return AttentionDtype::Bf16;
        }
        match self.precision {
            Precision::Mxfp8 => AttentionDtype::Mxfp8,
            _ => AttentionDtype::Fp8,
        }
    }

    /// Whether fused attention runs in FP8: the flag in an FP8/FP4 run.
    fn fp8_attention_active(&self) -> bool {
        self.cfg.fp8_dot_product_attention.unwrap_or(false) && self.precision.is_low_precision()
    }

    fn fp8_attention_speedup(&self) -> f64 {
        if self.fp8_attention_active() {
            self.k.fp8_attention_speedup
        } else {
            1.0
        }
    }

    /// Share of the GPU's SMs the dispatcher's communication kernels hold while they run: the
    /// configuration's SM count for its backend, else the backend's default (0 when the
    /// hardware card gives no SM count).
    fn dispatcher_sm_share(&self) -> f64 {
        let Some(sms) = self.hw.sm_count.filter(|&n| n > 0) else {
            return 0.0;
        };
        (self.dispatcher_comm_sms() / sms as f64).clamp(0.0, 1.0)
    }

    /// SMs the dispatcher's communication kernels run on: the configuration's count for its
    /// backend, else the backend's default.
    pub(super) fn dispatcher_comm_sms(&self) -> f64 {
        let defaults = &self.k.dispatcher_comm_sms;
        match self.cfg.dispatcher_num_sms(self.dispatcher) {
            Some(configured) => configured as f64,
            None => match self.dispatcher {
                ResolvedDispatcher::Deepep => defaults.deepep,
                ResolvedDispatcher::Hybridep => defaults.hybridep,
                _ => defaults.nccl_all_to_all,
            },
        }
    }

    /// Fraction of a layer's forward and backward passes that 1F1B all-to-all overlap cannot
    /// pair with another microbatch's: the first pipeline rank's warm-up forwards and
    /// cool-down backwards (its in-flight microbatch·chunks, the most of any rank), of all
    /// its microbatch·chunks.
    fn unpaired_layer_pass_fraction(&self) -> f64 {
        let units = self.l.microbatches.saturating_mul(self.l.vpp.max(1)).max(1) as f64;
        (self.inflight_units(0) / units).clamp(0.0, 1.0)
    }

    /// What one token sends across the network in the expert group's all-to-all: `None` when
    /// the group stays inside one NVLink domain (or the allgather dispatcher runs).
    ///
    /// The deduplicating dispatchers send one copy per remote node holding any of its experts
    /// (the nodes its experts land on, under the model's group-limited routing where it has
    /// one, less its own node by symmetry); the others send every copy to a remote expert.
    /// Routing groups map onto nodes only when the expert group fills whole nodes; a
    /// part-filled last node leaves the groups straddling, priced as uniform routing.
    pub(super) fn ep_network_reach(&self) -> Option<EpNetworkReach> {
        let m = self.arch.moe.as_ref()?;
        let group = self.l.ep.saturating_mul(self.l.etp);
        if group <= 1 || self.dispatcher == ResolvedDispatcher::Allgather {
            return None;
        }
        let per_domain = self.hw.nvlink_domain_size.max(1).min(group);
        let g = group as f64;
        let nodes = (g / per_domain as f64).ceil();
        if nodes <= 1.0 {
            return None;
        }
        let k = m.top_k as f64;
        let deduplicated = self.dispatcher.flex_backend().is_some();
        let router_groups = m
            .router_groups
            .filter(|_| deduplicated && group.is_multiple_of(per_domain));
        let remote_copies_per_token = if deduplicated {
            routing::nodes_reached(k, nodes, router_groups) * (nodes - 1.0) / nodes
        } else {
            k * (g - per_domain as f64) / g
        };
        Some(EpNetworkReach {
            nodes: nodes as u32,
            top_k: m.top_k,
            deduplicated,
            remote_copies_per_token,
            router_groups,
        })
    }

    /// The four EP all-to-all transfers of one MoE layer and one microbatch, seconds, before
    /// overlap.
    ///
    /// Placement follows Megatron's rank order (`parallel_state`: expert ranks ETP fastest,
    /// then EP), so an expert group of ETP·EP ranks fills NVLink domains in order and spans
    /// ⌈ETP·EP / domain⌉ of them. Forward dispatch (FP8 with DeepEP/HybridEP under an FP8
    /// recipe) and combine, and their backward (BF16 both) move k copies of each token;
    /// NCCL all-to-all sends every copy, while DeepEP/HybridEP send one copy per token per
    /// remote node and forward it over NVLink there. With the card's `expert_dispatch`
    /// table the deduplicating dispatchers run at its published achieved bandwidths.
    pub(super) fn ep_transfers(&self) -> EpTransfers {
        let none = EpTransfers::default();
        let Some(m) = &self.arch.moe else { return none };
        let l = self.l;
        let h = self.arch.hidden_size as f64;
        let k = m.top_k as f64;
        let group = l.ep.saturating_mul(l.etp);
        if group <= 1 {
            return none;
        }
        let backend = self.dispatcher.flex_backend();
        let deep = backend.is_some();
        let dispatch_bytes = if self.precision.is_low_precision() && deep {
            1.0
        } else {
            2.0
        };
        let g = group as f64;
        let per_domain = self.hw.nvlink_domain_size.max(1).min(group) as f64;
        let link_net = self.network_bytes_per_s();
        if self.dispatcher == ResolvedDispatcher::Allgather {
            // Gather all tokens of the EP group, reduce-scatter back; fwd and bwd.
            // One NCCL ring over the whole EP group: inside one domain at the measured NVLink
            // rate, across domains at the rate of its GPUs' NICs side by side.
            let bytes = self.gpu_tokens * h * 2.0 * (g - 1.0) * 2.0;
            let gathered = self.gpu_tokens * h * 2.0 * g;
            let rate = |op| self.collective_bytes_per_s(op, group, group, gathered);
            let total = bytes / 2.0
                * (1.0 / rate(CollectiveOp::AllGather) + 1.0 / rate(CollectiveOp::ReduceScatter));
            return EpTransfers::uniform(total);
        }
        // Dispatch-like transfers (forward dispatch, backward of the combine) go the way
        // tokens go; combine-like ones (forward combine, backward of the dispatch) come back.
        let tokens_h = self.gpu_tokens * h;
        // NVLink: every copy that leaves the GPU (local experts directly, remote ones
        // forwarded on the receiving node by the deduplicating dispatchers). DeepEP and
        // HybridEP send a token once per GPU holding any of its experts, g·(1 − (1 − 1/g)^k)
        // GPUs rather than k copies; counting that (with the published tables' received rows)
        // worsened leave-one-family-out cross-validation from 6.1% to 7.7% when first tried,
        // and the held-out runs from 8.3% to 10.6% on top of node-limited routing
        // (docs/validation.md), so the k-copy count stays until what else those runs pay for
        // is found.
        let nv_copies = if deep {
            k * (g - 1.0) / g
        } else {
            k * (per_domain - 1.0) / g
        };
        let net_copies = self
            .ep_reach
            .as_ref()
            .map_or(0.0, |r| r.remote_copies_per_token);
        // Each leg from the first of the card's tables that covers the backend and gives it.
        let nvlink_table = backend.and_then(|b| self.hw.dispatch_nvlink_table(b));
        let rdma_table = backend.and_then(|b| self.hw.dispatch_rdma_table(b));
        // NVLink rates: the forward dispatch in its own dtype, the BF16 transfers in the
        // dispatch and combine directions.
        let sms = self.dispatcher_comm_sms();
        let fp8_dispatch = dispatch_bytes < 2.0;
        // NCCL's all-to-all (no dispatcher table): one rank's buffer is its k routed copies.
        let nccl_nv = |bytes_per_elem: f64| {
            self.collective_bytes_per_s(
                CollectiveOp::AllToAll,
                per_domain as u32,
                per_domain as u32,
                tokens_h * k * bytes_per_elem,
            )
        };
        let nvlink = |fp8: bool| {
            nvlink_table
                .and_then(|t| t.nvlink_bytes_per_s(self.hw.nvlink_gb_per_s, per_domain, sms, fp8))
                .unwrap_or_else(|| {
                    let rate = nccl_nv(if fp8 { dispatch_bytes } else { 2.0 });
                    (rate, rate)
                })
        };
        let (nv_d, nv_c) = nvlink(false);
        let nv_dispatch_fwd = if fp8_dispatch { nvlink(true).0 } else { nv_d };
        let rdma = |fp8: bool| {
            rdma_table
                .and_then(|t| t.rdma_bytes_per_s_at(g, sms, fp8))
                .unwrap_or((link_net, link_net))
        };
        let (net_d, net_c) = rdma(false);
        let net_dispatch_fwd = if fp8_dispatch { rdma(true).0 } else { net_d };
        // Each transfer is bound by the slower of its NVLink and network legs.
        let transfer = |bytes_per_elem: f64, nv_bw: f64, net_bw: f64| {
            let per_elem = tokens_h * bytes_per_elem;
            (per_elem * nv_copies / nv_bw).max(per_elem * net_copies / net_bw)
        };
        EpTransfers {
            dispatch_fwd: transfer(dispatch_bytes, nv_dispatch_fwd, net_dispatch_fwd),
            combine_bwd: transfer(2.0, nv_d, net_d),
            combine_fwd: transfer(2.0, nv_c, net_c),
            dispatch_bwd: transfer(2.0, nv_c, net_c),
        }
    }

    /// Context-parallel seconds (fwd+bwd) of one layer and microbatch: the exposed
    /// communication, and the ring's per-step merges in HBM. `attn` / `attn_fwd` are the
    /// layer's core attention time (fwd+bwd, forward), which a ring's transfers hide behind.
    ///
    /// What moves follows Transformer Engine's `context_parallel.py` and Megatron-Core's
    /// attention modules: the ring circulates each rank's K and V as the attention kernel
    /// takes them (for MLA the up-projected per-head K and V, `multi_latent_attention.py`,
    /// not the compressed latent), forward once and backward together with dK/dV; each step's
    /// transfer overlaps that step's kernel. An all-to-all re-shards q, k, v from sequence to
    /// heads and the output back, forward and backward, with nothing to hide behind. Linear
    /// attention (Gated DeltaNet) re-shards heads by all-to-all whatever the type.
    fn cp_seconds(&self, attention: AttentionKind, attn: f64, attn_fwd: f64) -> (f64, f64) {
        let l = self.l;
        let tp = l.tp.max(1) as f64;
        let tokens = self.tokens;
        let elems = |heads: f64, dim: f64| tokens * heads * dim / tp;
        if attention == AttentionKind::Linear {
            let width = self
                .arch
                .linear_attention
                .as_ref()
                .map(|g| {
                    (2 * g.key_head_dim * g.num_key_heads
                        + 2 * g.value_head_dim * g.num_value_heads) as f64
                })
                .unwrap_or(0.0);
            let cp = l.cp as f64;
            // One buffer (q, k, v, z, beta, alpha together) per direction.
            let message = tokens * width / tp * BF16;
            let span = l.tp.saturating_mul(l.cp);
            let bw = self.collective_bytes_per_s(CollectiveOp::AllToAll, l.cp, span, message);
            return (2.0 * message * (cp - 1.0) / cp / bw, 0.0);
        }
        let heads = self.arch.num_attention_heads as f64;
        // Elements per local token of q, k, v and the output o, as the kernel takes them.
        let (q, k, v, o) = match &self.arch.mla {
            Some(m) => {
                let qk = (m.qk_head_dim + m.qk_pos_emb_head_dim) as f64;
                let dv = m.v_head_dim as f64;
                (
                    elems(heads, qk),
                    elems(heads, qk),
                    elems(heads, dv),
                    elems(heads, dv),
                )
            }
            None => {
                let d = self.arch.head_dim() as f64;
                let g = self.arch.kv_heads() as f64;
                (elems(heads, d), elems(g, d), elems(g, d), elems(heads, d))
            }
        };
        let hbm = self.hw.hbm_tb_per_s * 1e12 * self.hw.efficiency.hbm;
        if self.cfg.cp_comm_type == Some(CpCommType::Allgather) {
            // K and V gathered forward, their gradients reduce-scattered backward.
            let cp = l.cp as f64;
            let span = l.tp.saturating_mul(l.cp);
            let gathered = (k + v) * BF16 * cp;
            let per_rank = (k + v) * BF16 * (cp - 1.0);
            let rate = |op| self.collective_bytes_per_s(op, l.cp, span, gathered);
            let gather = rate(CollectiveOp::AllGather);
            let scatter = rate(CollectiveOp::ReduceScatter);
            return (per_rank / gather + per_rank / scatter, 0.0);
        }
        let (a2a, ring) = self.cfg.cp_groups();
        let mut comm = 0.0;
        if a2a > 1 {
            // q, k, v in and o out forward; dO in and dq, dk, dv out backward. Each rank keeps
            // 1/A of every tensor; the group spans TP·A consecutive ranks.
            // One call per tensor (Transformer Engine's `flash_attn_a2a_communicate`).
            let a = a2a as f64;
            let span = l.tp.saturating_mul(a2a);
            for tensor in [q, k, v, o] {
                let message = tensor * BF16;
                let bw = self.collective_bytes_per_s(CollectiveOp::AllToAll, a2a, span, message);
                comm += 2.0 * message * (a - 1.0) / a / bw;
            }
        }
        let mut merge = 0.0;
        if ring > 1 {
            // After the all-to-all a rank holds A times the tokens of 1/A of the heads: the
            // same bytes per ring step. The ring spans all of CP (TP·CP ranks).
            let r = ring as f64;
            let bw = self.link_bytes_per_s(l.tp.saturating_mul(l.cp));
            let kv_step = (k + v) * BF16 / bw;
            // Per step: forward K,V against the forward kernel; backward K,V and dK,dV
            // against the backward kernel.
            let fwd_step = attn_fwd / r;
            let bwd_step = (attn - attn_fwd) / r;
            let overlap = self.k.cp_overlap_fraction;
            comm += (r - 1.0)
                * ((kv_step - overlap * fwd_step).max(0.0)
                    + (2.0 * kv_step - overlap * bwd_step).max(0.0));
            // Each step's partial output is merged into the running output (read both,
            // write one) forward, and each step's dQ, dK, dV added into the accumulators
            // backward, all in the activations' dtype.
            merge = r * 3.0 * BF16 * (o + q + k + v) / hbm;
        }
        (comm, merge)
    }

    /// Time of one layer of `kind` for one microbatch on one GPU, by component.
    pub(super) fn layer_time(&self, kind: usize) -> TimeBreakdown {
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
            f.experts * n / self.expert_gemm_rate(expert_tokens, expert_dim)
        } else {
            0.0
        };
        t.gemm = dense_gemm + expert_gemm;
        let (softmax, softmax_fwd) = self.softmax_attention_seconds(f.attn_core * n, attention);
        let (linear, linear_fwd) = if attention == AttentionKind::Linear {
            self.linear_attention_seconds(f.linear_core * n)
        } else {
            (0.0, 0.0)
        };
        let attn = softmax + linear;
        let attn_fwd = softmax_fwd + linear_fwd;
        t.attention = attn;
        let hbm = self.hw.hbm_tb_per_s * 1e12 * self.hw.efficiency.hbm;
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
        t.elementwise = elementwise_bytes * self.tokens / hbm;
        if moe {
            t.elementwise += self.expert_eager_bytes(n) / hbm;
        }

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
            // Half all-gathers, half reduce-scatters of the sequence-parallel activations.
            let message = self.tokens * h * 2.0;
            let bytes = message * (l.tp - 1) as f64 / l.tp as f64;
            let rate = |op| self.collective_bytes_per_s(op, l.tp, l.tp, message);
            tp_fwd = collectives / 2.0
                * bytes
                * (1.0 / rate(CollectiveOp::AllGather) + 1.0 / rate(CollectiveOp::ReduceScatter));
            let mut tp = 2.0 * tp_fwd;
            if self.cfg.tp_comm_overlap.unwrap_or(false) {
                tp *= 1.0 - self.k.tp_overlap_fraction;
            }
            t.tp_comm = tp;
        }

        // Context parallel.
        if l.cp > 1 {
            let (comm, merge) = self.cp_seconds(attention, attn, attn_fwd);
            t.cp_comm = comm;
            t.elementwise += merge;
        }

        // Exposed host time: launch latency stalls the GPU once per layer and microbatch,
        // whatever the layer's size (the dropless MoE's device-to-host sync is one cause); an
        // FP8/FP4 recipe launches its quantizers too.
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
        let mut host_overhead = host;

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
                let a = &self.act_full[kind];
                let moe_act = a.moe_dispatch + a.moe_experts;
                let total_act = a.total();
                let moe_share = if total_act > 0.0 {
                    moe_act / total_act
                } else {
                    0.0
                };
                let experts_elementwise = t.elementwise * moe_share;
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
                r += attn_fwd;
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

        t.host_overhead = host_overhead;
        t
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
        // Applied to the rank's whole GEMM time, after recompute was priced from the full
        // forward (a recomputed forward is the same with frozen weights).
        t.gemm *= self.frozen_weight_gemm_share();
        t
    }
}

pub(super) fn recompute_flops_per_token(ctx: &Ctx) -> f64 {
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

pub(super) fn performance(ctx: &Ctx, worst_mem: &RankMemory, per_token: f64) -> Performance {
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
        b.pp_comm = 2.0 * bytes * ctx.pipeline_boundary_seconds_per_byte();
    }

    // Data-parallel gradient reduction and parameter gather, per step: (reduce-scatter or
    // all-reduce seconds, parameter all-gather seconds).
    let dense_group = ctx.dense_dp_group();
    let expert_group = l.edp;
    let fsdp = ctx.cfg.fsdp_strategy();
    // Bytes per parameter a sharded optimizer's all-gather moves.
    let param_gather_bytes = if ctx.cfg.fp8_param_gather.unwrap_or(false) {
        1.0
    } else {
        BF16
    };
    let dp_bytes = |params: f64, group: u32| -> (f64, f64) {
        // Frozen base weights (PEFT) have no gradients to reduce and no sharded update.
        if group <= 1 || ctx.cfg.frozen_base_weights() {
            return (0.0, 0.0);
        }
        let frac = (group - 1) as f64 / group as f64;
        // Gradients are reduce-scattered (all-reduced without sharding) in their buffer dtype.
        let grad = ctx.cfg.gradient_bytes();
        let (reduce, gather) = match fsdp {
            Some(FsdpStrategy::OptimGradsParams) => (grad, 4.0 * m),
            Some(_) => (grad, 2.0),
            // Sharded optimizers (distributed Adam, distributed Muon) reduce-scatter gradients
            // and all-gather parameters.
            None if ctx.cfg.optimizer_sharded() => (grad, param_gather_bytes),
            None => (2.0 * grad, 0.0),
        };
        (params * reduce * frac, params * gather * frac)
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
        // FSDP gathers and reduces every unit in every microbatch, overlapped throughout.
        (reduce_s + gather_s) * (1.0 - ctx.k.dp_overlap_fraction)
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
    let shard_params = if ctx.cfg.frozen_base_weights() {
        0.0
    } else {
        worst_mem.dense_params / dense_group.max(1) as f64
            + worst_mem.expert_params / expert_group.max(1) as f64
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
        hbm: ctx.hw.hbm_tb_per_s * 1e12 * ctx.hw.efficiency.hbm,
        host_link: ctx.hw.host_link_gb_per_s * host,
        host_memory: ctx.hw.host_memory_gb_per_s * host,
        gpus_sharing_host: l.world.min(ctx.hw.gpus_per_node).max(1) as f64,
    };
    b.optimizer = step_costs(ctx.cfg, &step_inputs).total();

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
                condition: run_condition(ctx.cfg, ctx.has_moe()),
            },
            model_tflops,
        ),
    }
}

/// The four all-to-all transfers of one MoE layer and microbatch, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct EpTransfers {
    pub dispatch_fwd: f64,
    pub combine_fwd: f64,
    /// Backward of the dispatch: gradients return the way the combine goes.
    pub dispatch_bwd: f64,
    /// Backward of the combine: gradients go the way the dispatch goes.
    pub combine_bwd: f64,
}

/// Exposed seconds of one layer pair under 1F1B all-to-all overlap: the CPU's issue time the
/// compute stream waits for, and the transfers' waits (or the SMs they take).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct OverlapExposed {
    pub host: f64,
    pub transfers: f64,
}

/// Compute of one part of a layer for one microbatch, fwd+bwd seconds: GEMMs (forward a
/// third, data and weight gradients a third each) and the rest, of which `other_fwd` runs
/// in the forward.
pub(super) struct LayerCompute {
    pub gemm: f64,
    pub other: f64,
    pub other_fwd: f64,
}

impl EpTransfers {
    fn uniform(total: f64) -> Self {
        let quarter = total / 4.0;
        EpTransfers {
            dispatch_fwd: quarter,
            combine_fwd: quarter,
            dispatch_bwd: quarter,
            combine_bwd: quarter,
        }
    }

    pub fn total(&self) -> f64 {
        self.dispatch_fwd + self.combine_fwd + self.dispatch_bwd + self.combine_bwd
    }

    /// Exposed seconds of these transfers under 1F1B all-to-all overlap
    /// (`overlap_moe_expert_parallel_comm`), where one microbatch's forward of a layer runs
    /// beside another's backward of it, as Megatron-Core issues it
    /// (`models/common/model_chunk_schedule_plan.py`, `TransformerLayerSchedulePlan.run`,
    /// Megatron-LM d98e8a64): two streams, each in order,
    ///
    /// - computation: pre-dispatch forward (attention, router, shared experts), experts
    ///   backward (data gradients; weight gradients too unless deferred), the deferred expert
    ///   weight gradients, experts forward, pre-dispatch backward;
    /// - communication: combine backward, dispatch forward, dispatch backward, combine forward;
    ///
    /// each operation also waiting for the one on the other stream it consumes (experts
    /// backward for the combine backward, dispatch forward for the pre-dispatch forward,
    /// dispatch backward for the experts backward, experts forward for the dispatch forward,
    /// combine forward for the experts forward, pre-dispatch backward for the dispatch
    /// backward). The next layer waits for both streams. What the schedule takes beyond the
    /// compute is exposed. While a transfer runs beside compute its kernels hold
    /// `comm_sm_share` of the SMs, so the compute needs that share of the hidden transfer
    /// time more: exposed = max(schedule − compute, hidden × share). The CPU issues the pair
    /// in step with the GPU (`pair_makespan`, `host` seconds of issue time): what that adds to
    /// the schedule is the pair's exposed host time.
    pub fn exposed_under_1f1b_overlap(
        &self,
        pre_dispatch: &LayerCompute,
        experts: &LayerCompute,
        delay_wgrad: bool,
        comm_sm_share: f64,
        host: f64,
    ) -> OverlapExposed {
        let third = 1.0 / 3.0;
        let pre_fwd = pre_dispatch.gemm * third + pre_dispatch.other_fwd;
        let pre_bwd = (pre_dispatch.gemm + pre_dispatch.other - pre_fwd).max(0.0);
        let experts_fwd = experts.gemm * third + experts.other_fwd;
        let experts_wgrad = experts.gemm * third;
        let experts_dgrad = (experts.gemm * third + experts.other - experts.other_fwd).max(0.0);
        let (experts_bwd, deferred) = if delay_wgrad {
            (experts_dgrad, experts_wgrad)
        } else {
            (experts_dgrad + experts_wgrad, 0.0)
        };
        let ops = PairOps {
            pre_fwd,
            experts_bwd,
            deferred,
            experts_fwd,
            pre_bwd,
        };
        let compute = pre_fwd + experts_bwd + deferred + experts_fwd + pre_bwd;
        let exposed = (self.pair_makespan(&ops, 0.0) - compute).max(0.0);
        let hidden = (self.total() - exposed).max(0.0);
        // The compute slowed beside the hidden transfers needs `hidden × share` more; a
        // schedule that already waits on the transfers absorbs that much.
        let transfers = exposed.max(hidden * comm_sm_share);
        // What the CPU's issue time adds on top: where the compute stream waits for a
        // transfer anyway, the CPU issues behind that wait.
        let with_host = (self.pair_makespan(&ops, host.max(0.0)) - compute).max(0.0);
        OverlapExposed {
            host: (with_host - exposed).max(0.0),
            transfers,
        }
    }

    /// Makespan of one layer pair as Megatron-Core issues it
    /// (`TransformerLayerSchedulePlan.run`): the CPU issues, in program order, combine
    /// backward, pre-dispatch forward, experts backward, dispatch forward, the deferred weight
    /// gradients, dispatch backward, experts forward, combine forward, pre-dispatch backward;
    /// the four compute operations take a quarter of `host` CPU time each to issue (the
    /// transfers and the deferred weight gradients are a few launches). Before it issues the
    /// dispatch forward the CPU waits for the router's output on the GPU: the token counts
    /// the dispatcher needs on the host (the all-to-all's split sizes, DeepEP's and HybridEP's
    /// receive counts). A GPU operation starts once its inputs are ready, its stream is free
    /// and the CPU has begun issuing it, and ends no sooner than the CPU is done issuing it.
    fn pair_makespan(&self, ops: &PairOps, host: f64) -> f64 {
        let issue = host / 4.0;
        let mut cpu = 0.0_f64;
        let mut compute_free = 0.0_f64;
        let mut comm_free = 0.0_f64;
        // A compute operation of `duration` whose inputs are ready at `ready`: its end.
        let mut compute_op = |cpu: &mut f64, ready: f64, duration: f64, issue: f64| -> f64 {
            let start = ready.max(compute_free).max(*cpu);
            *cpu += issue;
            let end = (start + duration).max(*cpu);
            compute_free = end;
            end
        };
        let mut comm_op = |cpu: f64, ready: f64, duration: f64| -> f64 {
            let end = ready.max(comm_free).max(cpu) + duration;
            comm_free = end;
            end
        };
        let combine_bwd_end = comm_op(cpu, 0.0, self.combine_bwd);
        let pre_fwd_end = compute_op(&mut cpu, 0.0, ops.pre_fwd, issue);
        let experts_bwd_end = compute_op(&mut cpu, combine_bwd_end, ops.experts_bwd, issue);
        cpu = cpu.max(pre_fwd_end);
        let dispatch_fwd_end = comm_op(cpu, pre_fwd_end, self.dispatch_fwd);
        let deferred_end = compute_op(&mut cpu, experts_bwd_end, ops.deferred, 0.0);
        let dispatch_bwd_end = comm_op(cpu, experts_bwd_end, self.dispatch_bwd);
        let experts_fwd_end = compute_op(
            &mut cpu,
            dispatch_fwd_end.max(deferred_end),
            ops.experts_fwd,
            issue,
        );
        let combine_fwd_end = comm_op(cpu, experts_fwd_end, self.combine_fwd);
        let pre_bwd_end = compute_op(&mut cpu, dispatch_bwd_end, ops.pre_bwd, issue);
        combine_fwd_end.max(pre_bwd_end)
    }
}

/// The compute operations of one layer pair under 1F1B all-to-all overlap, seconds.
struct PairOps {
    pre_fwd: f64,
    experts_bwd: f64,
    deferred: f64,
    experts_fwd: f64,
    pre_bwd: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transfers() -> EpTransfers {
        EpTransfers {
            dispatch_fwd: 2.0,
            combine_fwd: 3.0,
            dispatch_bwd: 3.0,
            combine_bwd: 2.0,
        }
    }

    // Pre-dispatch: GEMMs 3 (forward 1) and 3 of other work (forward 1): 2 forward, 4
    // backward. Experts: GEMMs 6: forward, data gradients and weight gradients 2 each.
    const PRE: LayerCompute = LayerCompute {
        gemm: 3.0,
        other: 3.0,
        other_fwd: 1.0,
    };
    const EXPERTS: LayerCompute = LayerCompute {
        gemm: 6.0,
        other: 0.0,
        other_fwd: 0.0,
    };

    #[test]
    fn each_transfer_hides_behind_its_partner_in_megatrons_schedule() {
        let t = transfers();
        assert_eq!(t.total(), 10.0);
        // Compute: pre fwd 0-2, experts bwd 2-6, experts fwd 6-8, pre bwd 9-13 (it waits
        // for the dispatch bwd). Communication: combine bwd 0-2, dispatch fwd 2-4, dispatch
        // bwd 6-9 (it waits for the experts bwd), combine fwd 9-12. 13 s for 12 of compute.
        assert_eq!(
            t.exposed_under_1f1b_overlap(&PRE, &EXPERTS, false, 0.0, 0.0)
                .transfers,
            1.0
        );
        // Deferred: experts dgrad 2-4, dispatch bwd 4-7 beside the weight gradients 4-6 and
        // the experts fwd 6-8; pre bwd 8-12, combine fwd 8-11: nothing waits.
        assert_eq!(
            t.exposed_under_1f1b_overlap(&PRE, &EXPERTS, true, 0.0, 0.0)
                .transfers,
            0.0
        );
    }

    #[test]
    fn deferred_weight_gradients_fill_a_long_forward_dispatch() {
        // Dispatch fwd 2-6 outlasts the experts' data gradients (2-4); the deferred weight
        // gradients run 4-6 beside it, so nothing waits: experts fwd 6-8, dispatch bwd 6-7,
        // combine fwd 8-9, pre bwd 8-12 = the 12 s of compute.
        let t = EpTransfers {
            dispatch_fwd: 4.0,
            combine_fwd: 1.0,
            dispatch_bwd: 1.0,
            combine_bwd: 2.0,
        };
        assert_eq!(
            t.exposed_under_1f1b_overlap(&PRE, &EXPERTS, true, 0.0, 0.0)
                .transfers,
            0.0
        );
        // Thinner experts, not deferred: the experts wait for the dispatch.
        let thin = LayerCompute {
            gemm: 3.0,
            other: 0.0,
            other_fwd: 0.0,
        };
        // Experts: 1 s each. Pre fwd 0-2, experts bwd 2-4, dispatch fwd 2-6, experts fwd
        // 6-7, dispatch bwd 6-7, combine fwd 7-8, pre bwd 7-11: 11 s for 9 s of compute.
        assert_eq!(
            t.exposed_under_1f1b_overlap(&PRE, &thin, false, 0.0, 0.0)
                .transfers,
            2.0
        );
    }

    #[test]
    fn a_cpu_slower_than_the_compute_sets_the_pace_of_the_pair() {
        // No transfers, 12 s of compute, 24 s of CPU issue time (6 s before each of the four
        // compute operations): the CPU issues pre fwd 0-6, experts bwd 6-12 (waiting for the
        // router at 6: done), experts fwd 12-18, pre bwd 18-24; each ends no sooner than its
        // issue does. 24 s for 12 s of compute: 12 s of host time exposed.
        let none = EpTransfers::default();
        let pair = none.exposed_under_1f1b_overlap(&PRE, &EXPERTS, false, 0.0, 24.0);
        assert_eq!(pair.host, 12.0);
        assert_eq!(pair.transfers, 0.0);
        // A CPU that keeps ahead (8 s, 2 s per operation) costs nothing.
        let ahead = none.exposed_under_1f1b_overlap(&PRE, &EXPERTS, false, 0.0, 8.0);
        assert_eq!(ahead.host, 0.0);
    }

    #[test]
    fn the_cpu_issues_behind_a_transfer_the_compute_waits_for() {
        // 16 s of CPU, 4 s per operation. Pre fwd 0-4 (issued 0-4), experts bwd 4-8 (after the
        // combine bwd 0-2; issued 4-8), the CPU waits for the router (done at 4), dispatch fwd
        // 8-10, dispatch bwd 10-13, experts fwd 10-12 (issued 8-12), combine fwd 13-16, pre bwd
        // 13-17 (issued 12-16, behind the dispatch bwd it waits for). 17 s where the transfers
        // alone give 13: 4 of the 16 s of CPU time are exposed.
        let t = transfers();
        let pair = t.exposed_under_1f1b_overlap(&PRE, &EXPERTS, false, 0.0, 16.0);
        assert_eq!(pair.transfers, 1.0);
        assert_eq!(pair.host, 4.0);
    }

    #[test]
    fn hidden_transfers_still_cost_the_sms_they_hold() {
        let t = transfers();
        let share = 0.1;
        // Deferred: all 10 s of transfer hidden, each second costing 0.1 s of compute.
        let delayed = t
            .exposed_under_1f1b_overlap(&PRE, &EXPERTS, true, share, 0.0)
            .transfers;
        assert!((delayed - 1.0).abs() < 1e-12, "{delayed}");
        // Not deferred: the schedule already waits 1 s, more than the 0.9 s the SMs cost...
        let plain = t
            .exposed_under_1f1b_overlap(&PRE, &EXPERTS, false, share, 0.0)
            .transfers;
        assert!((plain - 1.0).abs() < 1e-12, "{plain}");
        // ...but not more than the 1.8 s they cost at twice the share.
        let plain = t
            .exposed_under_1f1b_overlap(&PRE, &EXPERTS, false, 2.0 * share, 0.0)
            .transfers;
        assert!((plain - 1.8).abs() < 1e-12, "{plain}");
    }
}
