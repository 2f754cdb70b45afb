//! The four EP all-to-all transfers of one MoE layer and how much of them overlap leaves
//! exposed: 1F1B all-to-all overlap, as Megatron-Core schedules a layer pair on two streams
//! with the CPU issuing it, and the shared experts run beside the transfers on a side stream.

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

/// The shared experts' GEMMs of one layer and microbatch, seconds, split as
/// `moe_shared_expert_overlap` pairs them with the transfers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct SharedExpertPasses {
    pub fc1_fwd: f64,
    pub fc2_fwd: f64,
    /// Data and weight gradients of fc1.
    pub fc1_bwd: f64,
    pub fc2_bwd: f64,
}

impl SharedExpertPasses {
    /// Split `gemm` seconds (forward and backward, the backward twice the forward) over fc1
    /// and fc2 by their weights: a gated unit's fc1 holds two of its three matrices.
    pub fn split(gemm: f64, mlp_matrices: f64) -> Self {
        let fc1 = if mlp_matrices > 1.0 {
            (mlp_matrices - 1.0) / mlp_matrices
        } else {
            0.5
        };
        let third = 1.0 / 3.0;
        SharedExpertPasses {
            fc1_fwd: gemm * fc1 * third,
            fc2_fwd: gemm * (1.0 - fc1) * third,
            fc1_bwd: gemm * fc1 * 2.0 * third,
            fc2_bwd: gemm * (1.0 - fc1) * 2.0 * third,
        }
    }
}

impl EpTransfers {
    pub(super) fn uniform(total: f64) -> Self {
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

    /// Exposed seconds of these transfers with `moe_shared_expert_overlap`: Megatron-Core
    /// issues the shared experts on their own stream right behind each transfer
    /// (`SharedExpertMLP`, `shared_experts.py`; the dispatchers' `token_dispatch` and
    /// `token_combine`, `token_dispatcher.py`, Megatron-LM d98e8a64): fc1 and its activation
    /// beside the forward dispatch, fc2 beside the forward combine, and in the backward
    /// (their autograd sequence numbers put the transfer first) fc2's gradients beside the
    /// combine's backward and fc1's beside the dispatch's. Each transfer waits only for what
    /// its partner does not cover; the covered part still holds `comm_sm_share` of the SMs
    /// the shared experts need, as under 1F1B overlap: exposed = max(waits, hidden × share).
    pub fn exposed_beside_shared_experts(
        &self,
        shared: &SharedExpertPasses,
        comm_sm_share: f64,
    ) -> f64 {
        let pairs = [
            (self.dispatch_fwd, shared.fc1_fwd),
            (self.combine_fwd, shared.fc2_fwd),
            (self.combine_bwd, shared.fc2_bwd),
            (self.dispatch_bwd, shared.fc1_bwd),
        ];
        let waits: f64 = pairs.iter().map(|&(t, c)| (t - c).max(0.0)).sum();
        let hidden: f64 = pairs.iter().map(|&(t, c)| t.min(c).max(0.0)).sum();
        waits.max(hidden * comm_sm_share)
    }

    /// The forward transfers' share of `exposed_beside_shared_experts`: what a recomputed
    /// forward pays again, the shared experts running beside it as in the first forward.
    pub fn forward_exposed_beside_shared_experts(
        &self,
        shared: &SharedExpertPasses,
        comm_sm_share: f64,
    ) -> f64 {
        let forward = EpTransfers {
            dispatch_fwd: self.dispatch_fwd,
            combine_fwd: self.combine_fwd,
            ..EpTransfers::default()
        };
        let forward_only = SharedExpertPasses {
            fc1_fwd: shared.fc1_fwd,
            fc2_fwd: shared.fc2_fwd,
            ..SharedExpertPasses::default()
        };
        forward.exposed_beside_shared_experts(&forward_only, comm_sm_share)
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
    fn shared_experts_hide_the_transfer_each_runs_beside() {
        // A gated shared expert of 3 s (fwd+bwd): fc1 holds 2 s (forward 2/3, backward 4/3),
        // fc2 1 s (forward 1/3, backward 2/3).
        let shared = SharedExpertPasses::split(3.0, 3.0);
        assert!((shared.fc1_fwd - 2.0 / 3.0).abs() < 1e-12);
        assert!((shared.fc1_bwd - 4.0 / 3.0).abs() < 1e-12);
        assert!((shared.fc2_fwd - 1.0 / 3.0).abs() < 1e-12);
        assert!((shared.fc2_bwd - 2.0 / 3.0).abs() < 1e-12);
        let t = transfers();
        // Dispatch fwd 2 − 2/3, combine fwd 3 − 1/3, combine bwd 2 − 2/3, dispatch bwd
        // 3 − 4/3: 10 − 3 = 7 s still wait.
        let exposed = t.exposed_beside_shared_experts(&shared, 0.0);
        assert!((exposed - 7.0).abs() < 1e-12, "{exposed}");
        // Shared experts longer than every transfer hide them all, less the SMs the
        // transfers hold from them.
        let long = SharedExpertPasses::split(30.0, 3.0);
        assert_eq!(t.exposed_beside_shared_experts(&long, 0.0), 0.0);
        let slowed = t.exposed_beside_shared_experts(&long, 0.1);
        assert!((slowed - 1.0).abs() < 1e-12, "{slowed}");
        // A recomputed forward pays its two transfers less fc1's and fc2's forward:
        // (2 − 2/3) + (3 − 1/3) = 4 s.
        let forward = t.forward_exposed_beside_shared_experts(&shared, 0.0);
        assert!((forward - 4.0).abs() < 1e-12, "{forward}");
        // No shared experts: everything is exposed.
        let none = SharedExpertPasses::default();
        assert_eq!(t.exposed_beside_shared_experts(&none, 0.2), t.total());
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
