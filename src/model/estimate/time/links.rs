//! Achieved rates of NCCL traffic by where a group lands: NVLink inside one domain; across
//! domains, rings over the NICs of the group's GPUs on each node, all-to-alls through each
//! GPU's own NIC, pipeline boundaries by whether a sender and its receiver straddle a domain's
//! edge (Megatron's rank order); the data-parallel bucket those collectives move; and the
//! GPU-host link activation offloading copies over.

use crate::model::estimate::Ctx;
use crate::model::kernels::CollectiveOp;

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
    pub(super) fn dense_dp_group(&self) -> u32 {
        self.l.dp.saturating_mul(self.l.cp)
    }
    pub(super) fn dp_span(&self) -> u32 {
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
    pub(in crate::model::estimate) fn latency_bound_bucket_warning(
        &self,
        local_params: f64,
    ) -> Option<String> {
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
    pub(super) fn pipeline_boundary_seconds_per_byte(&self) -> f64 {
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

    /// Bytes per second of one GPU's activation copies to or from the host in each direction:
    /// its own GPU-host link, or its share of the node's host memory bandwidth, which every GPU
    /// of the job on the node draws on, whichever is slower, both streamed at the fraction the
    /// CPU-offloaded optimizer step uses (`host_bandwidth_efficiency`). `both_directions`:
    /// offloads and reloads cross at once (fine-grained offloading, one microbatch's offloads
    /// beside another's reloads: the link's two-way rate, half the memory share), or one
    /// direction at a time (whole-layer offloading: the forward offloads, the backward reloads).
    pub(in crate::model::estimate) fn activation_copy_bytes_per_s(
        &self,
        both_directions: bool,
    ) -> f64 {
        let efficiency = self.k.host_bandwidth_efficiency;
        let (link, directions) = if both_directions {
            (self.hw.host_link_both_ways_bytes_per_s(efficiency), 2.0)
        } else {
            (self.hw.host_link_bytes_per_s(efficiency), 1.0)
        };
        let sharing = f64::from(self.l.world.min(self.hw.gpus_per_node).max(1));
        let memory_share = self.hw.host_memory_gb_per_s * 1e9 * efficiency / (directions * sharing);
        link.min(memory_share)
    }

    fn nvlink_bytes_per_s(&self) -> f64 {
        self.hw.nvlink_gb_per_s * 1e9 * self.hw.efficiency.collective_nvlink
    }

    pub(super) fn network_bytes_per_s(&self) -> f64 {
        self.hw.network_gb_per_s * 1e9 * self.hw.efficiency.collective_network
    }
}
