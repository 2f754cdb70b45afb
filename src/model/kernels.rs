//! Published kernel and network speeds as data, and their interpolation: the
//! `attention_kernels` table of a hardware card (log-space in the sequence length a kernel
//! call sees, linear in head dimension), the `linear_attention_kernel` timings (Gated
//! DeltaNet: a latency-bound state pass per chunk plus per-head-token work) and the
//! `expert_dispatch` table (achieved MoE dispatch/combine bandwidth by expert-parallel span);
//! the tables clamped (flat) outside the measured range.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::config::FlexBackend;

/// Forward or backward pass of a fused-attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KernelPass {
    Fwd,
    Bwd,
}

/// Data type of a fused-attention kernel: BF16, or FP8 attention (`fp8_dot_product_attention`)
/// with per-tensor scales (the delayed and current scaling recipes) or MX block scales.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttentionDtype {
    #[default]
    Bf16,
    Fp8,
    Mxfp8,
}

impl AttentionDtype {
    pub fn is_bf16(&self) -> bool {
        *self == AttentionDtype::Bf16
    }
}

/// Which curves a lookup reads: a data type, and a sliding window (`None`: full attention).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CurveSet {
    pub dtype: AttentionDtype,
    pub window: Option<u64>,
}

/// One measured curve: achieved TFLOP/s at each of the table's sequence lengths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttentionCurve {
    /// Query/key head dimension.
    pub head_dim: u32,
    pub causal: bool,
    pub pass: KernelPass,
    /// Sliding-window size of a windowed curve (causal, each query attending to at most
    /// this many keys, FLOPs counted over the window); absent for full attention. Windowed
    /// curves price only layers with exactly this window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u64>,
    /// Data type the kernel computed in (absent: BF16).
    #[serde(default, skip_serializing_if = "AttentionDtype::is_bf16")]
    pub dtype: AttentionDtype,
    /// TFLOP/s in the benchmarks' FLOP count (causal: only the unmasked score elements;
    /// backward: [`backward_flops_per_forward`] times the forward), one per entry of
    /// `seq_lengths`.
    pub tflops: Vec<f64>,
    /// Where the numbers come from (paper, figure, panel).
    pub source: String,
}

/// Fused-attention speed of one GPU by sequence length, head dimension, mask and pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttentionKernelTable {
    /// The kernel measured (it should be the one the training stack runs).
    pub kernel: String,
    /// Dense BF16 peak (TFLOP/s) of the GPU the curves were measured on, when that is another
    /// product of the same die (GB200 for B200): the speeds scale by this card's peak over it,
    /// the datasheets' peaks carrying the clock and power difference. Absent: measured on
    /// this GPU or one with the same peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_peak_bf16_tflops: Option<f64>,
    /// Sequence lengths (query = key length per call) of the columns, increasing.
    pub seq_lengths: Vec<f64>,
    pub curves: Vec<AttentionCurve>,
}

/// Backward FLOPs per forward FLOP of fused attention with query/key head dimension `d_qk`
/// and value head dimension `d_v`: the forward runs two GEMMs over the unmasked score
/// elements (QKᵀ over d_qk, PV over d_v), the backward five (the recomputed scores, dQ and dK
/// over d_qk; dP and dV over d_v). FlashAttention-2/3's benchmarks count 2.5 for d_qk = d_v;
/// cuDNN's training benchmark (cudnn-frontend `benchmark/sdpa_benchmark_training/
/// benchmark_single_sdpa.py`, `flops`) counts (3·d_qk + 2·d_v) / (d_qk + d_v), the same rule.
pub fn backward_flops_per_forward(d_qk: f64, d_v: f64) -> f64 {
    if d_qk + d_v > 0.0 {
        (3.0 * d_qk + 2.0 * d_v) / (d_qk + d_v)
    } else {
        2.5
    }
}

/// Positive and finite (NaN fails).
fn positive(v: f64) -> bool {
    v > 0.0 && v.is_finite()
}

/// Piecewise-linear in log(x), clamped to the end values outside `xs`. `None` when the
/// curve is malformed (lengths differ, empty, non-positive or unsorted x).
fn interp_log(xs: &[f64], ys: &[f64], x: f64) -> Option<f64> {
    if xs.is_empty() || xs.len() != ys.len() || !positive(x) {
        return None;
    }
    if xs.iter().any(|v| !positive(*v)) || xs.windows(2).any(|w| w[1] <= w[0]) {
        return None;
    }
    let (first, last) = (xs[0], xs[xs.len() - 1]);
    if x <= first {
        return Some(ys[0]);
    }
    if x >= last {
        return Some(ys[ys.len() - 1]);
    }
    let i = xs.iter().position(|v| *v >= x)?.max(1);
    let (x0, x1) = (xs[i - 1].ln(), xs[i].ln());
    let t = (x.ln() - x0) / (x1 - x0);
    Some(ys[i - 1] + t * (ys[i] - ys[i - 1]))
}

impl AttentionKernelTable {
    /// TFLOP/s of the measured curves of `set` with this mask and pass, at `len`, interpolated
    /// linearly between the bracketing head dimensions (clamped outside them).
    fn measured_in(
        &self,
        set: CurveSet,
        head_dim: f64,
        causal: bool,
        pass: KernelPass,
        len: f64,
    ) -> Option<f64> {
        // The nearest measured head dims at or below and at or above (no allocation: this
        // runs inside every `evaluate`).
        let mut below: Option<(f64, &AttentionCurve)> = None;
        let mut above: Option<(f64, &AttentionCurve)> = None;
        for c in self.curves.iter().filter(|c| {
            c.causal == causal
                && c.pass == pass
                && c.sliding_window == set.window
                && c.dtype == set.dtype
        }) {
            let d = c.head_dim as f64;
            if d <= head_dim && below.is_none_or(|(b, _)| d > b) {
                below = Some((d, c));
            }
            if d >= head_dim && above.is_none_or(|(a, _)| d < a) {
                above = Some((d, c));
            }
        }
        let at = |c: &AttentionCurve| interp_log(&self.seq_lengths, &c.tflops, len);
        match (below, above) {
            (Some((a, ca)), Some((b, cb))) if b > a => {
                let (ya, yb) = (at(ca)?, at(cb)?);
                Some(ya + (head_dim - a) / (b - a) * (yb - ya))
            }
            (Some((_, c)), _) | (None, Some((_, c))) => at(c),
            (None, None) => None,
        }
    }

    /// Achieved BF16 TFLOP/s for one full-attention kernel call (see [`Self::tflops_in`]).
    pub fn tflops(&self, head_dim: f64, causal: bool, pass: KernelPass, len: f64) -> Option<f64> {
        self.tflops_in(CurveSet::default(), head_dim, causal, pass, len)
    }

    /// Achieved TFLOP/s for one kernel call from the curves of `set`. A combination the
    /// sources do not give (the causal backward, typically) is derived: the other mask's
    /// speed for that pass, times the ratio of the two masks' forward speeds at the same
    /// length (the masking overhead is taken to be the same in both passes).
    pub fn tflops_in(
        &self,
        set: CurveSet,
        head_dim: f64,
        causal: bool,
        pass: KernelPass,
        len: f64,
    ) -> Option<f64> {
        if let Some(v) = self.measured_in(set, head_dim, causal, pass, len) {
            return Some(v).filter(|v| *v > 0.0);
        }
        let other = self.measured_in(set, head_dim, !causal, pass, len)?;
        let fwd_this = self.measured_in(set, head_dim, causal, KernelPass::Fwd, len)?;
        let fwd_other = self.measured_in(set, head_dim, !causal, KernelPass::Fwd, len)?;
        if fwd_other > 0.0 {
            Some(other * fwd_this / fwd_other).filter(|v| *v > 0.0)
        } else {
            None
        }
    }

    /// Whether any curve belongs to `set`.
    pub fn has(&self, set: CurveSet) -> bool {
        self.curves
            .iter()
            .any(|c| c.sliding_window == set.window && c.dtype == set.dtype)
    }

    /// Factor from the measured speeds to a GPU whose dense BF16 peak is `card_peak_bf16`.
    pub fn peak_scale(&self, card_peak_bf16: f64) -> f64 {
        match self.measured_peak_bf16_tflops {
            Some(measured) if positive(measured) && positive(card_peak_bf16) => {
                card_peak_bf16 / measured
            }
            _ => 1.0,
        }
    }

    /// Problems with the table, for the card loader's diagnostics.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.measured_peak_bf16_tflops.is_some_and(|v| !positive(v)) {
            out.push("measured_peak_bf16_tflops must be positive".to_string());
        }
        let xs = &self.seq_lengths;
        if xs.is_empty() || xs.iter().any(|v| !positive(*v)) || xs.windows(2).any(|w| w[1] <= w[0])
        {
            out.push("seq_lengths must be positive and increasing".to_string());
        }
        for c in &self.curves {
            if c.tflops.len() != xs.len() || c.tflops.iter().any(|v| !positive(*v)) {
                out.push(format!(
                    "curve head_dim {} causal {} {:?}: needs {} positive TFLOP/s values",
                    c.head_dim,
                    c.causal,
                    c.pass,
                    xs.len()
                ));
            }
        }
        out
    }
}

/// Speed of the chunked Gated DeltaNet kernels (flash-linear-attention's
/// `chunk_gated_delta_rule`, which Megatron-Core's GDN layer calls), from published timings.
///
/// The kernels split the sequence into chunks; all but one run in parallel over chunks and
/// heads, priced per head-token. The state pass (`chunk_gated_delta_rule_fwd_h`, and in the
/// backward its recompute and `chunk_gated_delta_rule_bwd_dhu`) walks the chunks one after
/// another with one CTA per (sequence, head, value block): with few heads per GPU it is
/// latency-bound, a fixed time per chunk whatever the work, so its time grows with the full
/// sequence length, not with the tokens a GPU holds. Under context parallelism Megatron
/// re-shards GDN from sequence to heads (`a2a_cp_to_hp`), so every CP rank walks the whole
/// sequence for its share of the heads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinearAttentionKernel {
    /// The kernels measured.
    pub kernel: String,
    /// Tokens per chunk (the sequential state pass takes one step per chunk).
    pub chunk_tokens: f64,
    /// Value-dimension block of the state pass: CTAs = sequences × heads × d_v / this.
    pub value_block: f64,
    /// Seconds ×1e-6 per chunk of the state pass while its CTAs fit in one wave: the
    /// forward's pass, and the backward's passes together.
    pub forward_step_us: f64,
    pub backward_step_us: f64,
    /// Seconds ×1e-9 per (token × value head) of the parallel kernels at the reference
    /// state size, forward and backward.
    pub forward_ns_per_head_token: f64,
    pub backward_ns_per_head_token: f64,
    /// State size d_k × d_v the per-head-token figures were measured at; other head dims
    /// scale them by their state size.
    pub reference_state_elems: f64,
    pub source: String,
}

/// One Gated DeltaNet call as a GPU runs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearAttentionCall {
    /// Sequences in the call (the microbatch).
    pub sequences: f64,
    /// Full sequence length each sequence is walked over.
    pub seq_len: f64,
    /// Value heads this GPU runs.
    pub value_heads: f64,
    pub key_head_dim: f64,
    pub value_head_dim: f64,
    /// Streaming multiprocessors of the GPU (one CTA each per wave); 0 = unknown (one wave).
    pub sm_count: f64,
}

impl LinearAttentionKernel {
    /// Seconds of one call: (forward + backward, forward).
    pub fn seconds(&self, call: &LinearAttentionCall) -> (f64, f64) {
        if !(call.sequences > 0.0 && call.seq_len > 0.0 && call.value_heads > 0.0) {
            return (0.0, 0.0);
        }
        let chunks = (call.seq_len / self.chunk_tokens.max(1.0)).ceil();
        let ctas = call.sequences
            * call.value_heads
            * (call.value_head_dim / self.value_block.max(1.0))
                .ceil()
                .max(1.0);
        let waves = if call.sm_count > 0.0 {
            (ctas / call.sm_count).ceil().max(1.0)
        } else {
            1.0
        };
        let steps = chunks * waves * 1e-6;
        let head_tokens = call.sequences
            * call.seq_len
            * call.value_heads
            * (call.key_head_dim * call.value_head_dim / self.reference_state_elems)
            * 1e-9;
        let forward = steps * self.forward_step_us + head_tokens * self.forward_ns_per_head_token;
        let backward =
            steps * self.backward_step_us + head_tokens * self.backward_ns_per_head_token;
        (forward + backward, forward)
    }

    /// Whether every figure is positive; a table that is not is never read (the time model
    /// falls back to the FLOPs at `efficiency.attention`), as with the other tables.
    pub fn usable(&self) -> bool {
        self.fields().iter().all(|(_, v)| positive(*v))
    }

    fn fields(&self) -> [(&'static str, f64); 7] {
        [
            ("chunk_tokens", self.chunk_tokens),
            ("value_block", self.value_block),
            ("forward_step_us", self.forward_step_us),
            ("backward_step_us", self.backward_step_us),
            ("forward_ns_per_head_token", self.forward_ns_per_head_token),
            (
                "backward_ns_per_head_token",
                self.backward_ns_per_head_token,
            ),
            ("reference_state_elems", self.reference_state_elems),
        ]
    }

    pub fn problems(&self) -> Vec<String> {
        self.fields()
            .iter()
            .filter(|(_, v)| !positive(*v))
            .map(|(name, _)| format!("{name} must be positive"))
            .collect()
    }
}

/// Achieved bandwidth of a dispatcher on one leg (NVLink inside a domain, or RDMA across
/// nodes), by EP span and the SMs it runs on: GB/s per GPU (the bytes its benchmark counts per
/// second, FP8 bytes for an FP8 dispatch). Interpolated in log(span) and linearly in SMs,
/// clamped outside both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpanTable {
    /// EP ranks (inside the domain for the NVLink leg, the whole group for RDMA), increasing.
    pub spans: Vec<f64>,
    /// SM counts of the rows, increasing.
    pub sms: Vec<f64>,
    /// One row per SM count, one value per span.
    pub dispatch_bf16: Vec<Vec<f64>>,
    pub dispatch_fp8: Vec<Vec<f64>>,
    pub combine: Vec<Vec<f64>>,
}

impl SpanTable {
    fn at(&self, rows: &[Vec<f64>], span: f64, sms: f64) -> Option<f64> {
        if rows.len() != self.sms.len() || self.sms.is_empty() {
            return None;
        }
        let mut by_sm = [(0.0, 0.0); 2];
        // The bracketing SM rows (or the nearest one twice, outside them).
        let upper = self.sms.iter().position(|s| *s >= sms);
        let (i0, i1) = match upper {
            Some(0) => (0, 0),
            Some(i) => (i - 1, i),
            None => (self.sms.len() - 1, self.sms.len() - 1),
        };
        for (slot, i) in by_sm.iter_mut().zip([i0, i1]) {
            *slot = (self.sms[i], interp_log(&self.spans, &rows[i], span)?);
        }
        let [(s0, v0), (s1, v1)] = by_sm;
        let v = if s1 > s0 {
            v0 + (sms.clamp(s0, s1) - s0) / (s1 - s0) * (v1 - v0)
        } else {
            v0
        };
        positive(v).then_some(v * 1e9)
    }

    /// Achieved bytes/s (dispatch, combine) at `span` EP ranks in the domain on `sms` SMs;
    /// the dispatch at FP8's rate when `fp8_dispatch`.
    pub fn bytes_per_s(&self, span: f64, sms: f64, fp8_dispatch: bool) -> Option<(f64, f64)> {
        let dispatch = if fp8_dispatch {
            &self.dispatch_fp8
        } else {
            &self.dispatch_bf16
        };
        Some((
            self.at(dispatch, span, sms)?,
            self.at(&self.combine, span, sms)?,
        ))
    }

    /// Problems, each prefixed with `name` (the field the table sits in).
    pub fn problems(&self, name: &str) -> Vec<String> {
        let increasing = |v: &[f64]| {
            !v.is_empty() && v.iter().all(|x| positive(*x)) && v.windows(2).all(|w| w[1] > w[0])
        };
        let mut out = Vec::new();
        if !increasing(&self.spans) || !increasing(&self.sms) {
            out.push(format!(
                "{name}: spans and sms must be positive and increasing"
            ));
        }
        for (column, rows) in [
            ("dispatch_bf16", &self.dispatch_bf16),
            ("dispatch_fp8", &self.dispatch_fp8),
            ("combine", &self.combine),
        ] {
            let shaped = rows.len() == self.sms.len()
                && rows
                    .iter()
                    .all(|r| r.len() == self.spans.len() && r.iter().all(|v| positive(*v)));
            if !shaped {
                out.push(format!(
                    "{name}.{column}: needs {} rows (one per SM count) of {} positive GB/s (one per span)",
                    self.sms.len(),
                    self.spans.len()
                ));
            }
        }
        out
    }
}

/// Achieved bandwidth of a deduplicating MoE dispatcher (DeepEP/HybridEP normal kernels).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatchTable {
    /// The kernels measured.
    pub kernel: String,
    /// The dispatcher backends the figures are for; empty: both DeepEP and HybridEP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<FlexBackend>,
    /// Within one NVLink domain: achieved fraction of `nvlink_gb_per_s` (bytes a GPU sends
    /// over NVLink per second), where no `nvlink_by_span` table is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_fraction: Option<DispatchCombine>,
    /// Within one NVLink domain: achieved GB/s by EP span and SMs; replaces
    /// `nvlink_fraction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_by_span: Option<SpanTable>,
    /// Across nodes: EP spans (GPUs in the expert group) of the RDMA columns, increasing;
    /// empty when no RDMA figure was published (the link rate × the card's network fraction
    /// is used then).
    #[serde(default)]
    pub rdma_spans: Vec<f64>,
    /// Achieved RDMA GB/s per GPU at each span: bytes each GPU sends to other nodes, one copy
    /// per token per destination node (the dispatcher's deduplication), per second.
    #[serde(default)]
    pub rdma_gb_per_s: DispatchCombineColumns,
    /// Across nodes: achieved GB/s by EP span and SMs (the bytes sent to other nodes, one
    /// copy per token per destination node); replaces the RDMA columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_by_span: Option<SpanTable>,
    pub source: String,
}

/// One figure for dispatch and one for combine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatchCombine {
    pub dispatch: f64,
    pub combine: f64,
}

/// Dispatch and combine columns, one value per span.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatchCombineColumns {
    pub dispatch: Vec<f64>,
    pub combine: Vec<f64>,
}

impl DispatchTable {
    /// Whether the figures apply to `backend`.
    pub fn covers(&self, backend: FlexBackend) -> bool {
        self.backends.is_empty() || self.backends.contains(&backend)
    }

    /// Whether the table gives the NVLink leg.
    pub fn has_nvlink(&self) -> bool {
        self.nvlink_fraction.is_some() || self.nvlink_by_span.is_some()
    }

    /// Achieved NVLink bytes/s (dispatch, combine) inside a domain whose link is
    /// `link_gb_per_s`, for `span` EP ranks in the domain on `sms` SMs; `None` when the table
    /// gives neither form.
    pub fn nvlink_bytes_per_s(
        &self,
        link_gb_per_s: f64,
        span: f64,
        sms: f64,
        fp8_dispatch: bool,
    ) -> Option<(f64, f64)> {
        if let Some(t) = &self.nvlink_by_span {
            return t.bytes_per_s(span, sms, fp8_dispatch);
        }
        let f = self.nvlink_fraction.as_ref()?;
        let bw = link_gb_per_s * 1e9;
        Some((bw * f.dispatch, bw * f.combine))
    }

    /// Whether the table gives the RDMA leg.
    pub fn has_rdma(&self) -> bool {
        !self.rdma_spans.is_empty() || self.rdma_by_span.is_some()
    }

    /// Achieved RDMA bytes/s (dispatch, combine) for an expert group of `span` GPUs on `sms`
    /// SMs, the dispatch at FP8's rate when `fp8_dispatch` and the table gives one.
    pub fn rdma_bytes_per_s_at(
        &self,
        span: f64,
        sms: f64,
        fp8_dispatch: bool,
    ) -> Option<(f64, f64)> {
        match &self.rdma_by_span {
            Some(t) => t.bytes_per_s(span, sms, fp8_dispatch),
            None => self.rdma_bytes_per_s(span),
        }
    }

    /// Achieved RDMA bytes/s (dispatch, combine) for an expert group of `span` GPUs,
    /// interpolated in log(span), clamped outside the measured spans.
    pub fn rdma_bytes_per_s(&self, span: f64) -> Option<(f64, f64)> {
        let d = interp_log(&self.rdma_spans, &self.rdma_gb_per_s.dispatch, span)?;
        let c = interp_log(&self.rdma_spans, &self.rdma_gb_per_s.combine, span)?;
        (d > 0.0 && c > 0.0).then_some((d * 1e9, c * 1e9))
    }

    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let n = self.rdma_spans.len();
        let no_rdma = n == 0
            && self.rdma_gb_per_s.dispatch.is_empty()
            && self.rdma_gb_per_s.combine.is_empty();
        if !no_rdma
            && (self
                .rdma_bytes_per_s(self.rdma_spans.first().copied().unwrap_or(0.0))
                .is_none()
                || self.rdma_gb_per_s.dispatch.len() != n
                || self.rdma_gb_per_s.combine.len() != n)
        {
            out.push(format!(
                "rdma_spans must be positive and increasing, with {n} positive dispatch and combine values"
            ));
        }
        if let Some(t) = &self.rdma_by_span {
            out.extend(t.problems("rdma_by_span"));
        }
        match (&self.nvlink_fraction, &self.nvlink_by_span) {
            (_, Some(t)) => out.extend(t.problems("nvlink_by_span")),
            (Some(f), None) => {
                if !(f.dispatch > 0.0 && f.dispatch <= 1.0 && f.combine > 0.0 && f.combine <= 1.0) {
                    out.push("nvlink_fraction values must be in (0, 1]".to_string());
                }
            }
            (None, None) if !self.has_rdma() => out.push(
                "needs nvlink_fraction, nvlink_by_span, RDMA columns or rdma_by_span".to_string(),
            ),
            (None, None) => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> AttentionKernelTable {
        let curve = |head_dim, causal, pass, tflops: [f64; 3]| AttentionCurve {
            head_dim,
            causal,
            pass,
            sliding_window: None,
            dtype: AttentionDtype::Bf16,
            tflops: tflops.to_vec(),
            source: "test".into(),
        };
        AttentionKernelTable {
            kernel: "test".into(),
            measured_peak_bf16_tflops: None,
            seq_lengths: vec![1000.0, 4000.0, 16000.0],
            curves: vec![
                curve(128, true, KernelPass::Fwd, [100.0, 200.0, 300.0]),
                curve(256, true, KernelPass::Fwd, [200.0, 400.0, 600.0]),
                curve(128, false, KernelPass::Fwd, [200.0, 300.0, 400.0]),
                curve(128, false, KernelPass::Bwd, [150.0, 250.0, 350.0]),
            ],
        }
    }

    #[test]
    fn interpolates_in_log_length_and_clamps() {
        let t = table();
        let at = |len| t.tflops(128.0, true, KernelPass::Fwd, len).unwrap_or(0.0);
        assert!((at(2000.0) - 150.0).abs() < 1e-9, "log midpoint of 1K..4K");
        assert_eq!(at(100.0), 100.0);
        assert_eq!(at(1e6), 300.0);
    }

    #[test]
    fn interpolates_head_dim_and_clamps() {
        let t = table();
        let v = t
            .tflops(192.0, true, KernelPass::Fwd, 4000.0)
            .unwrap_or(0.0);
        assert!((v - 300.0).abs() < 1e-9);
        assert_eq!(t.tflops(64.0, true, KernelPass::Fwd, 4000.0), Some(200.0));
        assert_eq!(t.tflops(512.0, true, KernelPass::Fwd, 4000.0), Some(400.0));
    }

    #[test]
    fn causal_backward_is_derived_from_the_forward_ratio() {
        let t = table();
        // 250 × 200/300 at 4K.
        let v = t
            .tflops(128.0, true, KernelPass::Bwd, 4000.0)
            .unwrap_or(0.0);
        assert!((v - 250.0 * 200.0 / 300.0).abs() < 1e-9);
    }

    #[test]
    fn windowed_curves_price_only_their_window() {
        let mut t = table();
        t.curves.push(AttentionCurve {
            head_dim: 64,
            causal: true,
            pass: KernelPass::Fwd,
            sliding_window: Some(128),
            dtype: AttentionDtype::Bf16,
            tflops: vec![10.0, 20.0, 40.0],
            source: "test".into(),
        });
        let window = |w| CurveSet {
            dtype: AttentionDtype::Bf16,
            window: Some(w),
        };
        assert!(t.has(window(128)) && !t.has(window(1024)));
        assert_eq!(
            t.tflops_in(window(128), 64.0, true, KernelPass::Fwd, 4000.0),
            Some(20.0)
        );
        assert_eq!(
            t.tflops_in(window(1024), 64.0, true, KernelPass::Fwd, 4000.0),
            None
        );
        // Full-attention lookups never see the windowed curve.
        assert_eq!(t.tflops(64.0, true, KernelPass::Fwd, 4000.0), Some(200.0));
    }

    #[test]
    fn fp8_curves_are_read_only_for_their_data_type() {
        let mut t = table();
        let fp8 = CurveSet {
            dtype: AttentionDtype::Fp8,
            window: None,
        };
        assert!(!t.has(fp8));
        t.curves.push(AttentionCurve {
            head_dim: 128,
            causal: true,
            pass: KernelPass::Fwd,
            sliding_window: None,
            dtype: AttentionDtype::Fp8,
            tflops: vec![150.0, 300.0, 450.0],
            source: "test".into(),
        });
        assert!(t.has(fp8));
        assert_eq!(
            t.tflops_in(fp8, 128.0, true, KernelPass::Fwd, 4000.0),
            Some(300.0)
        );
        // BF16 lookups never see it; an FP8 pass the table lacks is not invented.
        assert_eq!(t.tflops(128.0, true, KernelPass::Fwd, 4000.0), Some(200.0));
        assert_eq!(t.tflops_in(fp8, 128.0, true, KernelPass::Bwd, 4000.0), None);
    }

    #[test]
    fn backward_flop_ratio_follows_the_head_dims() {
        // FlashAttention's 2.5 for equal head dims; DeepSeek-V3's MLA (192/128): 832/320.
        assert!((backward_flops_per_forward(128.0, 128.0) - 2.5).abs() < 1e-12);
        assert!((backward_flops_per_forward(192.0, 128.0) - 2.6).abs() < 1e-12);
    }

    #[test]
    fn speeds_measured_on_another_product_of_the_die_scale_by_peak() {
        let mut t = table();
        assert_eq!(t.peak_scale(2250.0), 1.0);
        t.measured_peak_bf16_tflops = Some(2500.0);
        assert!((t.peak_scale(2250.0) - 0.9).abs() < 1e-12);
        assert!(t.problems().is_empty());
        t.measured_peak_bf16_tflops = Some(0.0);
        assert_eq!(t.peak_scale(2250.0), 1.0);
        assert!(!t.problems().is_empty());
    }

    fn gdn_kernel() -> LinearAttentionKernel {
        LinearAttentionKernel {
            kernel: "test".into(),
            chunk_tokens: 64.0,
            value_block: 64.0,
            forward_step_us: 1.0,
            backward_step_us: 2.0,
            forward_ns_per_head_token: 1.0,
            backward_ns_per_head_token: 2.0,
            reference_state_elems: 128.0 * 128.0,
            source: "test".into(),
        }
    }

    #[test]
    fn gdn_state_pass_grows_with_the_full_sequence_not_the_heads() {
        let k = gdn_kernel();
        let call = |heads: f64, seq: f64| LinearAttentionCall {
            sequences: 1.0,
            seq_len: seq,
            value_heads: heads,
            key_head_dim: 128.0,
            value_head_dim: 128.0,
            sm_count: 132.0,
        };
        // 8192 tokens: 128 chunk steps of 1 µs; 8 heads × 8192 head-tokens of 1 ns.
        let (total, fwd) = k.seconds(&call(8.0, 8192.0));
        assert!((fwd - (128e-6 + 65536e-9)).abs() < 1e-12);
        assert!((total - fwd - (2.0 * 128e-6 + 2.0 * 65536e-9)).abs() < 1e-12);
        // A sixteenth of the heads over the same sequence keeps the whole state pass.
        let (_, fwd_few) = k.seconds(&call(0.5, 8192.0));
        assert!(fwd_few > 128e-6 && fwd_few < fwd);
        // 132 SMs hold 66 heads × 2 value blocks; 67 heads need a second wave.
        let (_, one_wave) = k.seconds(&call(66.0, 8192.0));
        let (_, two_waves) = k.seconds(&call(67.0, 8192.0));
        assert!(two_waves - one_wave > 127e-6);
        assert!(k.problems().is_empty());
        let mut broken = gdn_kernel();
        broken.chunk_tokens = 0.0;
        assert_eq!(broken.problems().len(), 1);
        assert!(k.usable() && !broken.usable());
        assert_eq!(k.seconds(&call(0.0, 8192.0)), (0.0, 0.0));
    }

    #[test]
    fn dispatch_bandwidth_interpolates_by_span_and_clamps() {
        let t = DispatchTable {
            kernel: "test".into(),
            backends: Vec::new(),
            nvlink_fraction: Some(DispatchCombine {
                dispatch: 0.9,
                combine: 0.9,
            }),
            nvlink_by_span: None,
            rdma_spans: vec![16.0, 64.0],
            rdma_gb_per_s: DispatchCombineColumns {
                dispatch: vec![40.0, 60.0],
                combine: vec![40.0, 50.0],
            },
            rdma_by_span: None,
            source: "test".into(),
        };
        let d = |span| t.rdma_bytes_per_s(span).map(|v| v.0).unwrap_or(0.0);
        assert!((d(32.0) - 50e9).abs() < 1.0, "log midpoint");
        assert_eq!(d(8.0), 40e9);
        assert_eq!(d(256.0), 60e9);
        assert!(t.problems().is_empty());
        assert!(t.covers(FlexBackend::Deepep) && t.covers(FlexBackend::Hybridep));
    }

    #[test]
    fn a_table_without_rdma_columns_is_valid_and_scoped_to_its_backends() {
        let t = DispatchTable {
            kernel: "test".into(),
            backends: vec![FlexBackend::Deepep],
            nvlink_fraction: Some(DispatchCombine {
                dispatch: 0.444,
                combine: 0.211,
            }),
            nvlink_by_span: None,
            rdma_spans: Vec::new(),
            rdma_gb_per_s: DispatchCombineColumns::default(),
            rdma_by_span: None,
            source: "test".into(),
        };
        assert!(t.problems().is_empty(), "{:?}", t.problems());
        assert_eq!(t.rdma_bytes_per_s(32.0), None);
        assert!(t.covers(FlexBackend::Deepep));
        assert!(!t.covers(FlexBackend::Hybridep));
        // Columns without spans are still a malformed table.
        let mut half = t.clone();
        half.rdma_gb_per_s.dispatch = vec![40.0];
        assert!(!half.problems().is_empty());
    }

    #[test]
    fn nvlink_span_table_interpolates_span_and_sms() {
        let t = SpanTable {
            spans: vec![8.0, 32.0],
            sms: vec![16.0, 32.0],
            dispatch_bf16: vec![vec![500.0, 400.0], vec![600.0, 500.0]],
            dispatch_fp8: vec![vec![300.0, 200.0], vec![400.0, 300.0]],
            combine: vec![vec![450.0, 350.0], vec![550.0, 450.0]],
        };
        assert!(t.problems("nvlink_by_span").is_empty());
        let at = |span, sms, fp8| t.bytes_per_s(span, sms, fp8).unwrap_or((0.0, 0.0));
        // Log midpoint of 8..32 is 16; SM midpoint 24.
        assert!((at(16.0, 16.0, false).0 - 450e9).abs() < 1.0);
        assert!((at(16.0, 24.0, false).0 - 500e9).abs() < 1.0);
        assert!((at(16.0, 24.0, true).0 - 300e9).abs() < 1.0);
        assert!((at(8.0, 24.0, false).1 - 500e9).abs() < 1.0);
        // Clamped outside both axes.
        assert_eq!(at(4.0, 8.0, false), at(8.0, 16.0, false));
        assert_eq!(at(72.0, 64.0, false), at(32.0, 32.0, false));
        let mut broken = t.clone();
        broken.combine = vec![vec![450.0]];
        assert_eq!(broken.problems("nvlink_by_span").len(), 1);
        assert!(broken.problems("rdma_by_span")[0].starts_with("rdma_by_span.combine"));
        assert_eq!(broken.bytes_per_s(16.0, 16.0, false), None);
    }

    #[test]
    fn malformed_tables_answer_none_and_say_why() {
        let mut t = table();
        t.seq_lengths = vec![4000.0, 1000.0, 16000.0];
        assert_eq!(t.tflops(128.0, true, KernelPass::Fwd, 2000.0), None);
        assert!(!t.problems().is_empty());
        assert!(table().problems().is_empty());
    }
}
