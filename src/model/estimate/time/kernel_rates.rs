//! Compute rates of one layer's kernels: dense and grouped GEMMs by shape, fused softmax
//! attention from the card's kernel tables (by the call lengths context parallelism makes),
//! Gated DeltaNet from its measured timings, and the data type attention runs in.

use crate::model::activations::ScoreMatrix;
use crate::model::arch::AttentionKind;
use crate::model::config::{CpCommType, Precision};
use crate::model::estimate::Ctx;
use crate::model::kernels::{
    backward_flops_per_forward, AttentionDtype, CurveSet, KernelPass, LinearAttentionCall,
    MambaScanCall,
};
use crate::model::{CostConstants, Hardware};

/// Fraction of the large-GEMM rate a GEMM reaches given its token (M) dimension and its
/// smallest weight dimension: small tiles fill fewer SMs and amortise less of each kernel's
/// prologue, so each factor halves at its calibrated size.
fn gemm_shape_factor(k: &CostConstants, m_tokens: f64, weight_dim: f64) -> f64 {
    let by_tokens = m_tokens / (m_tokens + k.gemm_half_efficiency_tokens);
    let by_weights = weight_dim / (weight_dim + k.gemm_half_efficiency_dim);
    by_tokens * by_weights
}

/// The large-GEMM rate of `hw` at `precision` and its scaling recipe, FLOP/s.
fn large_gemm_flops_per_s(hw: &Hardware, precision: Precision) -> f64 {
    hw.gemm_peak_tflops(precision)
        * 1e12
        * hw.gemm_efficiency(precision)
        * hw.gemm_recipe_factor(precision)
}

/// Rate of a grouped expert GEMM on `hw` at `precision`, FLOP/s, with `tokens_per_expert`
/// tokens and `weight_dim` the expert's smaller weight dimension: the card's measured table
/// by tokens per expert and expert width where it has one (its BF16 shape taken for every
/// precision: no FP8 backward was measured), else the fitted half-efficiency sizes. The step
/// prices its experts with it, and the kernel checks replay published timings with it.
pub fn expert_gemm_flops_per_s(
    hw: &Hardware,
    k: &CostConstants,
    precision: Precision,
    tokens_per_expert: f64,
    weight_dim: f64,
) -> f64 {
    let shape = hw
        .grouped_gemm_kernels
        .as_ref()
        .and_then(|t| t.shape_factor(tokens_per_expert, weight_dim))
        .unwrap_or_else(|| gemm_shape_factor(k, tokens_per_expert, weight_dim));
    large_gemm_flops_per_s(hw, precision) * shape
}

/// Rate of a dense GEMM on `hw` at `precision`, FLOP/s, with `m_tokens` rows and `weight_dim`
/// the smaller weight dimension: the large-GEMM rate times the fitted half-efficiency shape.
pub fn dense_gemm_flops_per_s(
    hw: &Hardware,
    k: &CostConstants,
    precision: Precision,
    m_tokens: f64,
    weight_dim: f64,
) -> f64 {
    large_gemm_flops_per_s(hw, precision) * gemm_shape_factor(k, m_tokens, weight_dim)
}

/// Achieved HBM bandwidth of memory-bound kernels on `hw`, bytes/s.
pub fn achieved_hbm_bytes_per_s(hw: &Hardware) -> f64 {
    hw.hbm_tb_per_s * 1e12 * hw.efficiency.hbm
}

impl Ctx<'_> {
    /// Dense GEMMs (projections, dense MLPs, shared experts): the smallest weight dimension
    /// is the hidden size split over TP.
    pub(super) fn dense_gemm_rate(&self) -> f64 {
        let dim = self.arch.hidden_size as f64 / self.l.tp as f64;
        self.gemm_rate(self.tokens, dim)
    }

    pub(super) fn gemm_rate(&self, m_tokens: f64, weight_dim: f64) -> f64 {
        dense_gemm_flops_per_s(self.hw, self.k, self.precision, m_tokens, weight_dim)
    }

    /// Grouped expert GEMMs ([`expert_gemm_flops_per_s`] at the run's precision).
    pub(super) fn expert_gemm_rate(&self, tokens_per_expert: f64, weight_dim: f64) -> f64 {
        expert_gemm_flops_per_s(
            self.hw,
            self.k,
            self.precision,
            tokens_per_expert,
            weight_dim,
        )
    }

    pub(super) fn attention_rate(&self) -> f64 {
        self.hw.peak_tflops.bf16
            * 1e12
            * self.hw.efficiency.attention
            * self.fp8_attention_speedup()
    }

    /// Seconds (fwd+bwd, and the forward alone) of the softmax core attention of one layer
    /// and microbatch on one GPU, `flops` being its model FLOPs (Megatron's count: forward
    /// ×3). With the card's kernel table, each kernel call is priced at the published speed
    /// for the length it sees: without CP one causal call over the local sequence; with
    /// load-balanced ring CP the diagonal step (1/CP of the work) is causal over s/CP and
    /// the other steps are unmasked calls of s/CP queries against s/(2·CP) keys, priced at
    /// the key length. Backward FLOPs are `kernels::backward_flops_per_forward` (by head
    /// dims) × forward.
    pub(super) fn softmax_attention_seconds(&self, flops: f64, kind: AttentionKind) -> (f64, f64) {
        if flops <= 0.0 {
            return (0.0, 0.0);
        }
        if let Some(scores) = self.act_options.score_matrix {
            return self.materialised_attention_seconds(scores);
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

    /// Seconds (fwd+bwd, forward) of one layer's core attention for one microbatch on a backend
    /// that materialises the score matrix (`attention_backend` unfused or local): two batched
    /// GEMMs over the whole query × key matrix (the mask removes no work) and the softmax,
    /// each pass at the slower of its GEMM work at the dense GEMM rate and its HBM traffic
    /// (`unfused_attention` in cards/cost-model.yaml): with the head dim as the GEMMs' inner
    /// dimension they are bound by the score matrix they write and read.
    fn materialised_attention_seconds(&self, scores: ScoreMatrix) -> (f64, f64) {
        let l = self.l;
        let queries = l.seq as f64 / l.cp.max(1) as f64;
        let elements = scores.elements(self.arch, l.tp, l.mbs, queries);
        let (head_dim, head_dim_v) = self.arch.attention_head_dims();
        // Q·Kᵀ and P·V forward; dP, dV, dQ and dK backward.
        let fwd_flops = 2.0 * elements * (head_dim + head_dim_v) as f64;
        let rate = self.gemm_rate(queries, scores.keys);
        let hbm = achieved_hbm_bytes_per_s(self.hw);
        let traffic = |bytes: f64| bytes * elements / hbm;
        let fwd = (fwd_flops / rate).max(traffic(scores.bytes.forward_traffic));
        let bwd = (2.0 * fwd_flops / rate).max(traffic(scores.bytes.backward_traffic));
        (fwd + bwd, fwd)
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
    pub(in crate::model::estimate) fn attention_seconds_per_flop(
        &self,
        kind: AttentionKind,
    ) -> Option<(f64, f64)> {
        let table = self.hw.attention_kernels.as_ref()?;
        let (head_dim, head_dim_v) = self.arch.attention_head_dims();
        let (head_dim, head_dim_v) = (head_dim as f64, head_dim_v as f64);
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
    pub(super) fn linear_attention_seconds(&self, flops: f64) -> (f64, f64) {
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

    /// Seconds (fwd+bwd, forward) of one Mamba-2 mixer's scan for one microbatch: the card's
    /// measured kernel speed per head-token, or the Megatron-counted FLOPs at
    /// `efficiency.attention` on a card without one. Under TP each rank runs its share of the
    /// heads; under CP Megatron-Core re-shards the mixer from sequence to heads, so each rank
    /// walks the whole sequence for its share: the same head-tokens.
    pub(super) fn mamba_scan_seconds(&self, flops: f64) -> (f64, f64) {
        let (Some(kernel), Some(m)) = (
            self.hw.mamba_scan_kernel.as_ref().filter(|k| k.usable()),
            self.arch.mamba.as_ref(),
        ) else {
            let total = flops / self.attention_rate();
            return (total, total / 3.0);
        };
        kernel.seconds(&MambaScanCall {
            head_tokens: self.tokens * m.num_heads as f64 / self.l.tp.max(1) as f64,
            head_dim: m.head_dim as f64,
            state_dim: m.state_dim as f64,
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

    /// Whether fused attention runs in FP8: the recipe runs it (`TrainingConfig::fp8_attention`)
    /// and the GPU has an FP8 attention kernel for the model's head dims (a run without one
    /// stops; without the flag it runs BF16, which is what is priced).
    fn fp8_attention_active(&self) -> bool {
        self.cfg.fp8_attention()
            && self
                .hw
                .has_fp8_attention_kernel(self.arch.softmax_head_dims())
    }

    fn fp8_attention_speedup(&self) -> f64 {
        if self.fp8_attention_active() {
            self.k.fp8_attention_speedup
        } else {
            1.0
        }
    }
}
