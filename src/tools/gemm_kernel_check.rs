//! Published GEMM timings as a held-out check of the time model's GEMM prices against kernels
//! that ran (`data/calibration/published-gemm-timings.yaml`), by campaign: one publication's
//! measurements on one GPU with one software stack. PyTorch's torchao timed BF16 and MXFP8
//! grouped GEMMs on B200, whose card has no measured grouped-GEMM table; DeepSeek's DeepGEMM
//! timed FP8 blockwise grouped and dense GEMMs on H800 (H100's compute). Each case is priced as
//! the step prices the same GEMM ([`expert_gemm_flops_per_s`] for an MoE layer's experts,
//! [`dense_gemm_flops_per_s`] for a linear layer) and, where the benchmark quantized on every
//! call, with the quantizers' HBM traffic the step charges (`quantization_bytes_per_element`).
//! Nothing is fitted on it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::model::calibration::{abs_median, signed_median};
use crate::model::config::Precision;
use crate::model::estimate::{
    achieved_hbm_bytes_per_s, dense_gemm_flops_per_s, expert_gemm_flops_per_s,
};
use crate::model::uncertainty::precision_class;
use crate::model::CostConstants;

use super::common::ToolError;

/// The shipped cases.
pub const PUBLISHED_GEMM_TIMINGS: &str =
    include_str!("../../data/calibration/published-gemm-timings.yaml");

/// One GEMM of a linear layer's training step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GemmPass {
    /// The forward product.
    Fwd,
    /// The input gradient.
    Dgrad,
    /// The weight gradient.
    Wgrad,
}

impl GemmPass {
    fn name(self) -> &'static str {
        match self {
            GemmPass::Fwd => "fwd",
            GemmPass::Dgrad => "dgrad",
            GemmPass::Wgrad => "wgrad",
        }
    }
}

/// Which of the step's GEMMs a case is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GemmKind {
    /// An MoE layer's experts: one GEMM per group, the tokens split evenly over the groups.
    Grouped,
    /// A linear layer (`groups` is 1).
    Dense,
}

/// One publication's measurements.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmCampaign {
    /// Hardware card id the cases are priced on.
    pub gpu: String,
    /// The software it ran ("not stated" where the source does not say).
    pub software: String,
    /// Where its figures are published.
    pub source: String,
}

/// One timed case.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmCase {
    pub id: String,
    /// Key of the file's `campaigns`.
    pub campaign: String,
    pub kind: GemmKind,
    /// The model whose shape it is.
    pub shape: String,
    /// Tokens over all groups (the GEMM's M).
    pub tokens: u64,
    /// Groups (experts on the GPU); 1 for a dense GEMM.
    pub groups: u64,
    /// The activation's width (K).
    pub in_dim: u64,
    /// The output's width (N).
    pub out_dim: u64,
    pub precision: Precision,
    /// The passes the time covers.
    pub passes: Vec<GemmPass>,
    /// Whether the time includes quantizing activations, weights and output gradients.
    pub quantization: bool,
    /// Measured milliseconds, or the measured rate in TFLOP/s: exactly one, as published.
    #[serde(default)]
    pub ms: Option<f64>,
    #[serde(default)]
    pub tflops: Option<f64>,
}

impl GemmCase {
    /// FLOPs of the passes the case covers.
    fn flops(&self) -> f64 {
        2.0 * self.tokens as f64
            * self.in_dim as f64
            * self.out_dim as f64
            * self.passes.len() as f64
    }

    /// The measured time, milliseconds (from the rate where the source gives one).
    fn measured_ms(&self) -> f64 {
        match (self.ms, self.tflops) {
            (Some(ms), _) => ms,
            (None, Some(tflops)) => self.flops() / (tflops * 1e12) * 1e3,
            (None, None) => f64::NAN,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    /// The repositories and commits the campaigns cite: for the file's reader, not the replay.
    #[serde(rename = "source")]
    _source: serde::de::IgnoredAny,
    campaigns: BTreeMap<String, GemmCampaign>,
    cases: Vec<GemmCase>,
}

/// The shipped file, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmCases {
    /// Campaigns by key, in key order.
    pub campaigns: Vec<(String, GemmCampaign)>,
    pub cases: Vec<GemmCase>,
}

/// Reads the cases, refusing a case whose campaign the file does not describe, a zero size, a
/// time not given exactly once (`ms` or `tflops`, positive), a dense case with groups, and a
/// quantized case that does not cover all three passes (its quantizers are priced per step).
pub fn parse_gemm_cases(text: &str) -> Result<GemmCases, ToolError> {
    let what = "published GEMM timings";
    let file: CasesFile =
        serde_yaml::from_str(text).map_err(|e| ToolError::Infeasible(format!("{what}: {e}")))?;
    let positive = |v: Option<f64>| v.is_some_and(|v| v > 0.0 && v.is_finite());
    for case in &file.cases {
        let refuse =
            |why: &str| ToolError::Infeasible(format!("{what}: case `{}`: {why}", case.id));
        if !file.campaigns.contains_key(&case.campaign) {
            return Err(refuse("its campaign is not described under `campaigns`"));
        }
        if [case.tokens, case.groups, case.in_dim, case.out_dim].contains(&0)
            || case.passes.is_empty()
        {
            return Err(refuse(
                "tokens, groups, in_dim, out_dim and passes must be positive",
            ));
        }
        if case.ms.is_some() == case.tflops.is_some()
            || !(positive(case.ms) || positive(case.tflops))
        {
            return Err(refuse("give exactly one positive `ms` or `tflops`"));
        }
        if case.kind == GemmKind::Dense && case.groups != 1 {
            return Err(refuse("a dense GEMM has one group"));
        }
        if case.quantization && case.passes.len() != 3 {
            return Err(refuse(
                "a time with quantization must cover fwd, dgrad and wgrad",
            ));
        }
    }
    Ok(GemmCases {
        campaigns: file.campaigns.into_iter().collect(),
        cases: file.cases,
    })
}

/// One case replayed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GemmCheckRow {
    pub id: String,
    pub campaign: String,
    /// Hardware card id it is priced on.
    pub gpu: String,
    pub kind: GemmKind,
    pub shape: String,
    pub precision: String,
    /// BF16, FP8 or FP4 (`uncertainty::precision_class`).
    pub precision_class: String,
    pub passes: Vec<GemmPass>,
    /// Tokens of each group's GEMM (all of them for a dense GEMM).
    pub tokens_per_group: f64,
    /// The smaller weight dimension, what the shape factor keys on.
    pub weight_dim: f64,
    pub quantization: bool,
    pub measured_ms: f64,
    pub predicted_ms: f64,
    /// Of the prediction: the GEMMs, and the quantizers' traffic.
    pub predicted_gemm_ms: f64,
    pub predicted_quantization_ms: f64,
    /// Predicted over measured, − 1 (positive: the model is slower than the kernel).
    pub error: f64,
    /// The GEMMs' FLOPs over the measured time, TFLOP/s.
    pub measured_tflops: f64,
}

/// The cases of one campaign, summarised by precision class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GemmCampaignSummary {
    pub campaign: String,
    pub gpu: String,
    pub software: String,
    pub source: String,
    pub cases: usize,
    /// Signed median error of its BF16 cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bf16_median_error: Option<f64>,
    /// Of its FP8 GEMMs timed alone (any FP8 recipe), and of its FP8 times with the quantizers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp8_gemm_median_error: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp8_with_quantization_median_error: Option<f64>,
}

/// The replayed cases and their summaries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GemmCheckReport {
    pub rows: Vec<GemmCheckRow>,
    pub campaigns: Vec<GemmCampaignSummary>,
    /// Median |error| over the cases without quantization (the GEMMs alone).
    pub gemm_median_abs_error: f64,
}

/// Replays every case whose campaign's GPU the catalog has a card for.
pub fn gemm_check_report(
    catalog: &Catalog,
    k: &CostConstants,
    cases: &GemmCases,
) -> GemmCheckReport {
    let campaigns: BTreeMap<&str, &GemmCampaign> = cases
        .campaigns
        .iter()
        .map(|(key, c)| (key.as_str(), c))
        .collect();
    let hardware = &catalog.cost().hardware;
    let mut rows = Vec::new();
    for case in &cases.cases {
        let Some(hw) = campaigns
            .get(case.campaign.as_str())
            .and_then(|c| hardware.get(&c.gpu))
        else {
            continue;
        };
        let tokens = case.tokens as f64;
        let (in_dim, out_dim) = (case.in_dim as f64, case.out_dim as f64);
        let tokens_per_group = tokens / case.groups as f64;
        let weight_dim = in_dim.min(out_dim);
        let rate = match case.kind {
            GemmKind::Grouped => {
                expert_gemm_flops_per_s(hw, k, case.precision, tokens_per_group, weight_dim)
            }
            GemmKind::Dense => dense_gemm_flops_per_s(hw, k, case.precision, tokens, weight_dim),
        };
        let flops = case.flops();
        let gemm_s = flops / rate;
        // The step's quantizers cast each activation and output gradient once for both
        // directions; the benchmark also casts the weights on every call, which training does
        // once per step, so they are added at the same bytes per element.
        let quantization_s = if case.quantization {
            let elements = tokens * (in_dim + out_dim) + case.groups as f64 * in_dim * out_dim;
            elements * k.quantization_bytes_per_element.per_element(case.precision)
                / achieved_hbm_bytes_per_s(hw)
        } else {
            0.0
        };
        let measured_ms = case.measured_ms();
        let predicted_ms = (gemm_s + quantization_s) * 1e3;
        rows.push(GemmCheckRow {
            id: case.id.clone(),
            campaign: case.campaign.clone(),
            gpu: hw.id.clone(),
            kind: case.kind,
            shape: case.shape.clone(),
            precision: case.precision.to_string(),
            precision_class: precision_class(case.precision).to_string(),
            passes: case.passes.clone(),
            tokens_per_group,
            weight_dim,
            quantization: case.quantization,
            measured_ms,
            predicted_ms,
            predicted_gemm_ms: gemm_s * 1e3,
            predicted_quantization_ms: quantization_s * 1e3,
            error: predicted_ms / measured_ms - 1.0,
            measured_tflops: flops / (measured_ms * 1e-3) / 1e12,
        });
    }
    let median_of = |campaign: &str, class: &str, quantization: bool| {
        let mut errors: Vec<f64> = rows
            .iter()
            .filter(|r| {
                r.campaign == campaign
                    && r.precision_class == class
                    && r.quantization == quantization
            })
            .map(|r| r.error)
            .collect();
        (!errors.is_empty()).then(|| signed_median(&mut errors))
    };
    let bf16 = precision_class(Precision::Bf16);
    let fp8 = precision_class(Precision::Mxfp8);
    let summaries = cases
        .campaigns
        .iter()
        .map(|(key, c)| GemmCampaignSummary {
            campaign: key.clone(),
            gpu: c.gpu.clone(),
            software: c.software.clone(),
            source: c.source.clone(),
            cases: rows.iter().filter(|r| &r.campaign == key).count(),
            bf16_median_error: median_of(key, bf16, false),
            fp8_gemm_median_error: median_of(key, fp8, false),
            fp8_with_quantization_median_error: median_of(key, fp8, true),
        })
        .collect();
    let gemm_errors: Vec<f64> = rows
        .iter()
        .filter(|r| !r.quantization)
        .map(|r| r.error)
        .collect();
    GemmCheckReport {
        gemm_median_abs_error: abs_median(&gemm_errors),
        campaigns: summaries,
        rows,
    }
}

/// The report's section of `docs/validation.md`.
pub fn markdown(report: &GemmCheckReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let percent =
        |e: Option<f64>| e.map_or_else(|| "—".to_string(), |e| format!("{:+.1}%", e * 100.0));
    let _ = writeln!(
        out,
        "\n## Held out: published GEMM timings\n\n\
         Kernels that ran, against the prices the step pays for the same GEMMs \
         (`data/calibration/published-gemm-timings.yaml`: each campaign one publication on one \
         GPU with one software stack; the file's header says what each measured and why it is \
         priced on its card). Grouped cases are priced as the step prices an MoE layer's \
         experts, dense ones as it prices a linear layer, each at the card's fitted large-GEMM \
         efficiency times its shape factor (the measured grouped-GEMM table where the card has \
         one, else the fitted half-efficiency sizes); cases timed with quantization add the \
         quantizers' traffic the step charges for Transformer Engine's fused casts. Positive \
         errors: the model is slower than the kernel. Median |error| of the GEMMs alone \
         **{:.1}%** over {} cases.\n",
        report.gemm_median_abs_error * 100.0,
        report.rows.iter().filter(|r| !r.quantization).count(),
    );
    let _ = writeln!(
        out,
        "| campaign | GPU card | software | source | cases | BF16 median error | FP8 GEMMs median error | FP8 with quantizers median error |"
    );
    let _ = writeln!(out, "|---|---|---|---|---:|---:|---:|---:|");
    for c in &report.campaigns {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            c.campaign,
            c.gpu,
            c.software,
            c.source,
            c.cases,
            percent(c.bf16_median_error),
            percent(c.fp8_gemm_median_error),
            percent(c.fp8_with_quantization_median_error),
        );
    }
    let _ = writeln!(
        out,
        "\n| case | campaign | precision | passes | tokens per group | measured ms | measured TFLOP/s | predicted ms (GEMMs + quantizers) | error |"
    );
    let _ = writeln!(out, "|---|---|---|---|---:|---:|---:|---:|---:|");
    for row in &report.rows {
        let passes: Vec<&str> = row.passes.iter().map(|p| p.name()).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.3} | {:.0} | {:.3} ({:.3} + {:.3}) | {:+.1}% |",
            row.id,
            row.campaign,
            row.precision,
            passes.join("+"),
            row.tokens_per_group,
            row.measured_ms,
            row.measured_tflops,
            row.predicted_ms,
            row.predicted_gemm_ms,
            row.predicted_quantization_ms,
            row.error * 100.0,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> (Catalog, GemmCases) {
        let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
        let cases = parse_gemm_cases(PUBLISHED_GEMM_TIMINGS).unwrap_or_else(|e| panic!("{e}"));
        (catalog, cases)
    }

    fn report() -> GemmCheckReport {
        let (catalog, cases) = shipped();
        let k = crate::tools::common::constants(catalog.cost()).unwrap_or_else(|e| panic!("{e}"));
        gemm_check_report(&catalog, k, &cases)
    }

    fn row<'a>(report: &'a GemmCheckReport, id: &str) -> &'a GemmCheckRow {
        report
            .rows
            .iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("case {id} missing"))
    }

    #[test]
    fn every_shipped_case_replays_on_its_campaigns_card() {
        let (_, cases) = shipped();
        assert_eq!(cases.cases.len(), 42);
        let report = report();
        assert_eq!(report.rows.len(), cases.cases.len());
        for row in &report.rows {
            let parts = row.predicted_gemm_ms + row.predicted_quantization_ms;
            assert!((parts / row.predicted_ms - 1.0).abs() < 1e-12, "{}", row.id);
            assert_eq!(row.predicted_quantization_ms > 0.0, row.quantization);
            assert!((row.error - (row.predicted_ms / row.measured_ms - 1.0)).abs() < 1e-12);
            let expected_gpu = if row.campaign == "deepgemm" {
                "h100"
            } else {
                "b200"
            };
            assert_eq!(row.gpu, expected_gpu, "{}", row.id);
        }
        // Every campaign is summarised, each with the precision classes it timed.
        assert_eq!(report.campaigns.len(), 4);
        let by_pass = report
            .campaigns
            .iter()
            .find(|c| c.campaign == "torchao-by-pass")
            .unwrap_or_else(|| panic!("no by-pass campaign"));
        assert_eq!(by_pass.cases, 4);
        assert!(by_pass.bf16_median_error.is_none());
        assert!(by_pass.fp8_gemm_median_error.is_some());
        assert!(by_pass.fp8_with_quantization_median_error.is_some());
    }

    #[test]
    fn a_grouped_case_is_priced_at_the_steps_expert_rate_by_hand() {
        // DeepSeek-V3's expert on B200 in BF16 at 16384 tokens per expert: the card's large-GEMM
        // rate (peak × gemm_bf16) times the half-efficiency factors of 16384 tokens and of the
        // smaller weight dimension 2048.
        let (catalog, _) = shipped();
        let k = crate::tools::common::constants(catalog.cost()).unwrap_or_else(|e| panic!("{e}"));
        let hw = &catalog.cost().hardware["b200"];
        let rate = hw.peak_tflops.bf16
            * 1e12
            * hw.efficiency.gemm_bf16
            * (16384.0 / (16384.0 + k.gemm_half_efficiency_tokens))
            * (2048.0 / (2048.0 + k.gemm_half_efficiency_dim));
        let report = report();
        let row = row(&report, "deepseek-v3-g8-bf16-fwd-figure");
        let by_hand_ms = 2.0 * 131072.0 * 7168.0 * 2048.0 / rate * 1e3;
        assert!((row.predicted_ms / by_hand_ms - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_dense_case_given_as_a_rate_is_timed_and_priced_by_hand() {
        // DeepGEMM's 4096 × 7168 × 2048 (M × N × K) FP8 blockwise GEMM at 1168 TFLOP/s; H100's
        // dense price: the FP8 large-GEMM rate times the blockwise / per-tensor ceiling ratio,
        // times the half-efficiency factors of 4096 tokens and of the smaller dimension 2048.
        let (catalog, _) = shipped();
        let k = crate::tools::common::constants(catalog.cost()).unwrap_or_else(|e| panic!("{e}"));
        let hw = &catalog.cost().hardware["h100"];
        let flops = 2.0 * 4096.0 * 7168.0 * 2048.0;
        let report = report();
        let row = row(&report, "deepgemm-dense-7168x2048");
        assert!((row.measured_ms / (flops / 1168e12 * 1e3) - 1.0).abs() < 1e-12);
        assert!((row.measured_tflops / 1168.0 - 1.0).abs() < 1e-12);
        let ceilings = hw
            .gemm_ceilings
            .as_ref()
            .unwrap_or_else(|| panic!("h100 has gemm ceilings"));
        let rate = hw.peak_tflops.fp8
            * 1e12
            * hw.efficiency.gemm_fp8
            * (ceilings.fp8_blockwise / ceilings.fp8_tensorwise)
            * (4096.0 / (4096.0 + k.gemm_half_efficiency_tokens))
            * (2048.0 / (2048.0 + k.gemm_half_efficiency_dim));
        assert!((row.predicted_ms / (flops / rate * 1e3) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn malformed_cases_are_refused_with_the_case_named() {
        let refused = |text: &str| {
            parse_gemm_cases(text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let unknown_campaign =
            PUBLISHED_GEMM_TIMINGS.replacen("campaign: torchao-by-pass", "campaign: elsewhere", 1);
        assert!(refused(&unknown_campaign).contains("deepseek-v3-g8-mxfp8-fwd"));
        let partial = PUBLISHED_GEMM_TIMINGS.replacen(
            "passes: [fwd, dgrad, wgrad], quantization: true",
            "passes: [fwd], quantization: true",
            1,
        );
        assert!(refused(&partial).contains("quantization"));
        let zero = PUBLISHED_GEMM_TIMINGS.replacen("ms: 43.1402", "ms: 0", 1);
        assert!(refused(&zero).contains("exactly one"));
        let both = PUBLISHED_GEMM_TIMINGS.replacen("ms: 43.1402", "ms: 43.1402, tflops: 700", 1);
        assert!(refused(&both).contains("exactly one"));
        let grouped_dense = PUBLISHED_GEMM_TIMINGS.replacen(
            "kind: dense, shape: deepseek-v3, tokens: 4096, groups: 1",
            "kind: dense, shape: deepseek-v3, tokens: 4096, groups: 2",
            1,
        );
        assert!(refused(&grouped_dense).contains("one group"));
        let unknown_field = PUBLISHED_GEMM_TIMINGS.replacen("ms: 43.1402", "seconds: 0.04", 1);
        assert!(!refused(&unknown_field).is_empty());
    }
}
