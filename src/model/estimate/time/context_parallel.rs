//! Context parallelism's exposed communication and the ring's per-step merges, as
//! Transformer Engine runs it.

use super::kernel_rates::achieved_hbm_bytes_per_s;
use crate::model::activations::BF16;
use crate::model::arch::AttentionKind;
use crate::model::config::{CpCommType, Precision};
use crate::model::estimate::Ctx;
use crate::model::kernels::CollectiveOp;

/// Context-parallel seconds of one layer and microbatch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct CpSeconds {
    /// Exposed communication, forward and backward.
    pub comm: f64,
    /// The forward's part of it, which a recompute of the attention runs again.
    pub comm_fwd: f64,
    /// The ring's per-step merges in HBM (element-wise time).
    pub merge: f64,
}

impl Ctx<'_> {
    /// Context-parallel seconds (fwd+bwd) of one layer and microbatch: the exposed
    /// communication (and its forward part), and the ring's per-step merges in HBM. `attn` /
    /// `attn_fwd` are the layer's core attention time (fwd+bwd, forward), which a ring's
    /// transfers hide behind.
    ///
    /// What moves follows Transformer Engine's `context_parallel.py` and Megatron-Core's
    /// attention modules: the ring circulates each rank's K and V as the attention kernel
    /// takes them (for MLA the up-projected per-head K and V, `multi_latent_attention.py`,
    /// not the compressed latent), forward once and backward together with dK/dV; each step's
    /// transfer overlaps that step's kernel. An all-to-all re-shards q, k, v from sequence to
    /// heads and the output back, forward and backward, with nothing to hide behind. Linear
    /// attention (Gated DeltaNet) re-shards heads by all-to-all whatever the type: its in_proj
    /// output in and its gated-norm output back.
    pub(super) fn cp_seconds(
        &self,
        attention: AttentionKind,
        attn: f64,
        attn_fwd: f64,
    ) -> CpSeconds {
        let l = self.l;
        let tp = l.tp.max(1) as f64;
        let tokens = self.tokens;
        let elems = |heads: f64, dim: f64| tokens * heads * dim / tp;
        // Megatron-Core's GDN (`gated_delta_net/common.py`) and Mamba-2 mixer
        // (`ssm/mamba_context_parallel.py`): one all-to-all takes the in_proj output from
        // sequence to heads, another takes the mixer's output back; the backward moves their
        // gradients the other way.
        let resharded = match attention {
            AttentionKind::Absent => return CpSeconds::default(),
            AttentionKind::Linear => self
                .arch
                .linear_attention
                .as_ref()
                .map(|g| [g.in_proj_width(), g.value_width()]),
            AttentionKind::Mamba => self
                .arch
                .mamba
                .as_ref()
                .map(|m| [m.in_proj_width(), m.inner_width()]),
            AttentionKind::Full | AttentionKind::Sliding => None,
        };
        if !attention.is_softmax() {
            let Some(widths) = resharded else {
                return CpSeconds::default();
            };
            let cp = l.cp as f64;
            let span = l.tp.saturating_mul(l.cp);
            let mut comm = 0.0;
            for width in widths {
                let message = tokens * width / tp * BF16;
                let bw = self.collective_bytes_per_s(CollectiveOp::AllToAll, l.cp, span, message);
                comm += 2.0 * message * (cp - 1.0) / cp / bw;
            }
            // The forward moves the in_proj output and the output; the backward their
            // gradients, the same bytes.
            return CpSeconds {
                comm,
                comm_fwd: comm / 2.0,
                merge: 0.0,
            };
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
        let hbm = achieved_hbm_bytes_per_s(self.hw);
        if self.cfg.cp_comm_type == Some(CpCommType::Allgather) {
            // K and V gathered forward; the backward gathers them again and reduce-scatters
            // their gradients (Transformer Engine's `AttnFuncWithCPAndKVAllGather`: the
            // backward re-runs the all-gather of K and V before the per-step kernels).
            let cp = l.cp as f64;
            let span = l.tp.saturating_mul(l.cp);
            let gathered = (k + v) * BF16 * cp;
            let per_rank = (k + v) * BF16 * (cp - 1.0);
            let rate = |op| self.collective_bytes_per_s(op, l.cp, span, gathered);
            let gather = rate(CollectiveOp::AllGather);
            let scatter = rate(CollectiveOp::ReduceScatter);
            let forward = per_rank / gather;
            return CpSeconds {
                comm: 2.0 * forward + per_rank / scatter,
                comm_fwd: forward,
                merge: 0.0,
            };
        }
        let (a2a, ring) = self.cfg.cp_groups();
        let mut comm = 0.0;
        let mut comm_fwd = 0.0;
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
                comm_fwd += message * (a - 1.0) / a / bw;
            }
        }
        let mut merge = 0.0;
        if ring > 1 {
            // After the all-to-all a rank holds A times the tokens of 1/A of the heads: the
            // same bytes per ring step. The ring spans all of CP (TP·CP ranks).
            let r = ring as f64;
            let span = l.tp.saturating_mul(l.cp);
            let bw = self.link_bytes_per_s(span);
            // FP8 attention with delayed or current scaling quantizes q, k, v before the ring,
            // so K and V travel as FP8 bytes, and its backward sends dK, dV (FP8) to their
            // owners by one all-to-all at the last step instead of around the ring (Transformer
            // Engine's `AttnFuncWithCPAndKVP2P`, `context_parallel.py`, d0067d0d: uint8 ring
            // buffers, `dkv_send_buffer` of CP copies of K and V); MXFP8 keeps them BF16.
            let fp8_ring = self.cfg.fp8_attention()
                && matches!(
                    self.precision,
                    Precision::Fp8Delayed | Precision::Fp8Tensorwise
                );
            let kv_bytes = if fp8_ring { 1.0 } else { BF16 };
            let kv_step = (k + v) * kv_bytes / bw;
            // Per step: forward K,V against the forward kernel; backward K,V (with dK,dV in a
            // BF16 ring) against the backward kernel.
            let fwd_step = attn_fwd / r;
            let bwd_step = (attn - attn_fwd) / r;
            let overlap = self.k.cp_overlap_fraction;
            let exposed_fwd = (r - 1.0) * (kv_step - overlap * fwd_step).max(0.0);
            let exposed_bwd = if fp8_ring {
                // The gradients' all-to-all runs beside the last step's kernel.
                let message = (k + v) * r;
                let a2a_bw =
                    self.collective_bytes_per_s(CollectiveOp::AllToAll, ring, span, message);
                let gradients = message * (r - 1.0) / r / a2a_bw;
                (r - 1.0) * (kv_step - overlap * bwd_step).max(0.0)
                    + (gradients - overlap * bwd_step).max(0.0)
            } else {
                (r - 1.0) * (2.0 * kv_step - overlap * bwd_step).max(0.0)
            };
            comm += exposed_fwd + exposed_bwd;
            comm_fwd += exposed_fwd;
            // Each step's partial output is merged into the running output (read both,
            // write one) forward, and each step's dQ, dK, dV added into the accumulators
            // backward, all in the activations' dtype.
            merge = r * 3.0 * BF16 * (o + q + k + v) / hbm;
        }
        CpSeconds {
            comm,
            comm_fwd,
            merge,
        }
    }
}
