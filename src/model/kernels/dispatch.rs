//! Achieved MoE dispatch/combine bandwidth of the deduplicating dispatchers (DeepEP,
//! HybridEP): per leg (NVLink, RDMA), as a link fraction, by EP span, or by EP span and SMs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::super::config::FlexBackend;
use super::{interp_log, positive};

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
    /// The source's FP8-dispatch figures, recorded and checked but not priced: Megatron-Core
    /// hands DeepEP and HybridEP BF16 tokens (`fused_a2a.py`: DeepEP's `buffer.dispatch` takes
    /// the hidden states as they are, HybridEP asserts `not fp8_dispatch`).
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

    /// Achieved bytes/s (dispatch, combine) of BF16 tokens at `span` EP ranks on `sms` SMs.
    pub fn bytes_per_s(&self, span: f64, sms: f64) -> Option<(f64, f64)> {
        Some((
            self.at(&self.dispatch_bf16, span, sms)?,
            self.at(&self.combine, span, sms)?,
        ))
    }

    /// Every figure times `factor` (a cluster's measured bandwidth over the published one).
    pub fn scale(&mut self, factor: f64) {
        self.dispatch_bf16
            .iter_mut()
            .chain(self.dispatch_fp8.iter_mut())
            .chain(self.combine.iter_mut())
            .flatten()
            .for_each(|v| *v *= factor);
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
    ) -> Option<(f64, f64)> {
        if let Some(t) = &self.nvlink_by_span {
            return t.bytes_per_s(span, sms);
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
    /// SMs, BF16 tokens.
    pub fn rdma_bytes_per_s_at(&self, span: f64, sms: f64) -> Option<(f64, f64)> {
        match &self.rdma_by_span {
            Some(t) => t.bytes_per_s(span, sms),
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
        let at = |span, sms| t.bytes_per_s(span, sms).unwrap_or((0.0, 0.0));
        // Log midpoint of 8..32 is 16; SM midpoint 24.
        assert!((at(16.0, 16.0).0 - 450e9).abs() < 1.0);
        assert!((at(16.0, 24.0).0 - 500e9).abs() < 1.0);
        assert!((at(8.0, 24.0).1 - 500e9).abs() < 1.0);
        // Clamped outside both axes.
        assert_eq!(at(4.0, 8.0), at(8.0, 16.0));
        assert_eq!(at(72.0, 64.0), at(32.0, 32.0));
        let mut faster = t.clone();
        faster.scale(2.0);
        let (d, c) = faster.bytes_per_s(16.0, 24.0).unwrap_or((0.0, 0.0));
        assert!(
            (d - 1000e9).abs() < 1.0 && (c - 900e9).abs() < 1.0,
            "{d} {c}"
        );
        let mut broken = t.clone();
        broken.combine = vec![vec![450.0]];
        assert_eq!(broken.problems("nvlink_by_span").len(), 1);
        assert!(broken.problems("rdma_by_span")[0].starts_with("rdma_by_span.combine"));
        assert_eq!(broken.bytes_per_s(16.0, 16.0), None);
    }
}
