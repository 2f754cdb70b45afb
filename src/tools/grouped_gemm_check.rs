//! Published grouped-GEMM timings on B200 as a held-out check of the time model's expert GEMM
//! price on a GPU whose card has no measured grouped-GEMM table: PyTorch's torchao MXFP8
//! MoE-training prototype timed `torch._grouped_mm` (BF16) and its MXFP8 scaled grouped GEMM at
//! DeepSeek-V3 and Llama 4 Scout expert shapes, in three campaigns of different software
//! (`data/calibration/torchao-b200-grouped-gemm.yaml`). Each case is priced as the step prices
//! its experts ([`expert_gemm_flops_per_s`]) and, where the benchmark quantized on every call,
//! with the quantizers' HBM traffic the step charges (`quantization_bytes_per_element`). Nothing
//! is fitted on it.

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::model::calibration::{abs_median, signed_median};
use crate::model::config::Precision;
use crate::model::estimate::{achieved_hbm_bytes_per_s, expert_gemm_flops_per_s};
use crate::model::CostConstants;

use super::common::ToolError;

/// The shipped cases.
pub const TORCHAO_B200_GROUPED_GEMM: &str =
    include_str!("../../data/calibration/torchao-b200-grouped-gemm.yaml");

/// One GEMM of a grouped GEMM's training step.
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

/// One timed case.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupedGemmCase {
    pub id: String,
    /// Key of the file's `campaigns`: the software it ran on.
    pub campaign: String,
    /// The model whose expert shape it is.
    pub shape: String,
    /// Tokens over all groups (the GEMM's M).
    pub tokens: u64,
    /// Groups (experts on the GPU); the tokens split evenly over them.
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
    /// Measured milliseconds.
    pub ms: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    #[allow(dead_code)]
    source: serde_yaml::Value,
    gpu: String,
    campaigns: std::collections::BTreeMap<String, String>,
    cases: Vec<GroupedGemmCase>,
}

/// The shipped file, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupedGemmCases {
    /// Hardware card id the cases ran on.
    pub gpu: String,
    /// Campaign key and the software it names, in the file's key order.
    pub campaigns: Vec<(String, String)>,
    pub cases: Vec<GroupedGemmCase>,
}

/// Reads the cases, refusing a case whose campaign the file does not describe, a non-positive
/// size or time, and a quantized case that does not cover all three passes (its quantizers
/// are priced per training step).
pub fn parse_grouped_gemm_cases(text: &str) -> Result<GroupedGemmCases, ToolError> {
    let what = "torchao B200 grouped GEMM timings";
    let file: CasesFile =
        serde_yaml::from_str(text).map_err(|e| ToolError::Infeasible(format!("{what}: {e}")))?;
    for case in &file.cases {
        let refuse =
            |why: &str| ToolError::Infeasible(format!("{what}: case `{}`: {why}", case.id));
        if !file.campaigns.contains_key(&case.campaign) {
            return Err(refuse("its campaign is not described under `campaigns`"));
        }
        if [case.tokens, case.groups, case.in_dim, case.out_dim].contains(&0)
            || !(case.ms > 0.0 && case.ms.is_finite())
            || case.passes.is_empty()
        {
            return Err(refuse(
                "tokens, groups, in_dim, out_dim, passes and ms must be positive",
            ));
        }
        if case.quantization && case.passes.len() != 3 {
            return Err(refuse(
                "a time with quantization must cover fwd, dgrad and wgrad",
            ));
        }
    }
    Ok(GroupedGemmCases {
        gpu: file.gpu,
        campaigns: file.campaigns.into_iter().collect(),
        cases: file.cases,
    })
}

/// One case replayed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupedGemmCheckRow {
    pub id: String,
    pub campaign: String,
    pub shape: String,
    pub precision: String,
    pub passes: Vec<GemmPass>,
    pub tokens_per_expert: f64,
    /// The expert's smaller weight dimension, what the shape factor keys on.
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

/// The cases of one campaign, summarised by precision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupedGemmCampaign {
    pub campaign: String,
    pub software: String,
    pub cases: usize,
    /// Signed median error of its BF16 cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bf16_median_error: Option<f64>,
    /// Of its MXFP8 GEMMs timed alone, and of its MXFP8 times with the quantizers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mxfp8_gemm_median_error: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mxfp8_with_quantization_median_error: Option<f64>,
}

/// The replayed cases and their summaries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupedGemmCheckReport {
    pub gpu: String,
    pub rows: Vec<GroupedGemmCheckRow>,
    pub campaigns: Vec<GroupedGemmCampaign>,
    /// Median |error| over the cases without quantization (the GEMMs alone).
    pub gemm_median_abs_error: f64,
}

/// Replays every case on the catalog's card for the file's GPU; `None` without that card.
pub fn grouped_gemm_check_report(
    catalog: &Catalog,
    k: &CostConstants,
    cases: &GroupedGemmCases,
) -> Option<GroupedGemmCheckReport> {
    let hw = catalog.cost().hardware.get(&cases.gpu)?;
    let hbm = achieved_hbm_bytes_per_s(hw);
    let rows: Vec<GroupedGemmCheckRow> = cases
        .cases
        .iter()
        .map(|case| {
            let tokens = case.tokens as f64;
            let (in_dim, out_dim) = (case.in_dim as f64, case.out_dim as f64);
            let tokens_per_expert = tokens / case.groups as f64;
            let weight_dim = in_dim.min(out_dim);
            let flops = 2.0 * tokens * in_dim * out_dim * case.passes.len() as f64;
            let rate =
                expert_gemm_flops_per_s(hw, k, case.precision, tokens_per_expert, weight_dim);
            let gemm_s = flops / rate;
            // The step's quantizers cast each activation and output gradient once for both
            // directions; the benchmark also casts the weights on every call, which training
            // does once per step, so they are added at the same bytes per element.
            let quantization_s = if case.quantization {
                let elements = tokens * (in_dim + out_dim) + case.groups as f64 * in_dim * out_dim;
                elements * k.quantization_bytes_per_element.per_element(case.precision) / hbm
            } else {
                0.0
            };
            let predicted_ms = (gemm_s + quantization_s) * 1e3;
            GroupedGemmCheckRow {
                id: case.id.clone(),
                campaign: case.campaign.clone(),
                shape: case.shape.clone(),
                precision: case.precision.to_string(),
                passes: case.passes.clone(),
                tokens_per_expert,
                weight_dim,
                quantization: case.quantization,
                measured_ms: case.ms,
                predicted_ms,
                predicted_gemm_ms: gemm_s * 1e3,
                predicted_quantization_ms: quantization_s * 1e3,
                error: predicted_ms / case.ms - 1.0,
                measured_tflops: flops / (case.ms * 1e-3) / 1e12,
            }
        })
        .collect();
    let median_of = |campaign: &str, precision: Precision, quantization: bool| {
        let mut errors: Vec<f64> = rows
            .iter()
            .filter(|r| {
                r.campaign == campaign
                    && r.precision == precision.to_string()
                    && r.quantization == quantization
            })
            .map(|r| r.error)
            .collect();
        (!errors.is_empty()).then(|| signed_median(&mut errors))
    };
    let campaigns = cases
        .campaigns
        .iter()
        .map(|(campaign, software)| GroupedGemmCampaign {
            campaign: campaign.clone(),
            software: software.clone(),
            cases: rows.iter().filter(|r| &r.campaign == campaign).count(),
            bf16_median_error: median_of(campaign, Precision::Bf16, false),
            mxfp8_gemm_median_error: median_of(campaign, Precision::Mxfp8, false),
            mxfp8_with_quantization_median_error: median_of(campaign, Precision::Mxfp8, true),
        })
        .collect();
    let gemm_errors: Vec<f64> = rows
        .iter()
        .filter(|r| !r.quantization)
        .map(|r| r.error)
        .collect();
    Some(GroupedGemmCheckReport {
        gpu: cases.gpu.clone(),
        gemm_median_abs_error: abs_median(&gemm_errors),
        campaigns,
        rows,
    })
}

/// The report's section of `docs/validation.md`.
pub fn markdown(report: &GroupedGemmCheckReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let percent =
        |e: Option<f64>| e.map_or_else(|| "—".to_string(), |e| format!("{:+.1}%", e * 100.0));
    let _ = writeln!(
        out,
        "\n## Held out: grouped GEMMs on {} (torchao's published timings)\n\n\
         The {} card has no measured grouped-GEMM table, so its experts' GEMMs are priced at the \
         fitted large-GEMM efficiency times the fitted half-efficiency shape. PyTorch's torchao \
         MXFP8 MoE-training prototype published what `torch._grouped_mm` (BF16) and its MXFP8 \
         scaled grouped GEMM took on one B200 at DeepSeek-V3 (7168 → 2048) and Llama 4 Scout \
         (5120 → 8192) expert shapes, 16K–128K tokens per expert, in three campaigns of \
         different software (`data/calibration/torchao-b200-grouped-gemm.yaml`; the figure's \
         values are read off by pixel). Each case is priced as the step prices its experts; \
         cases timed with MXFP8 quantization add the quantizers' traffic the step charges (the \
         benchmark casts activations row- and column-wise in separate kernels and rearranges \
         scales in more, which Transformer Engine fuses). Positive errors: the model is slower \
         than the kernel. Median |error| of the GEMMs alone **{:.1}%** over {} cases.\n",
        report.gpu.to_uppercase(),
        report.gpu.to_uppercase(),
        report.gemm_median_abs_error * 100.0,
        report.rows.iter().filter(|r| !r.quantization).count(),
    );
    let _ = writeln!(
        out,
        "| campaign | software | cases | BF16 median error | MXFP8 GEMMs median error | MXFP8 with quantizers median error |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|");
    for c in &report.campaigns {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            c.campaign,
            c.software,
            c.cases,
            percent(c.bf16_median_error),
            percent(c.mxfp8_gemm_median_error),
            percent(c.mxfp8_with_quantization_median_error),
        );
    }
    let _ = writeln!(
        out,
        "\n| case | campaign | passes | tokens per expert | measured ms | measured TFLOP/s | predicted ms (GEMMs + quantizers) | error |"
    );
    let _ = writeln!(out, "|---|---|---|---:|---:|---:|---:|---:|");
    for row in &report.rows {
        let passes: Vec<&str> = row
            .passes
            .iter()
            .map(|p| match p {
                GemmPass::Fwd => "fwd",
                GemmPass::Dgrad => "dgrad",
                GemmPass::Wgrad => "wgrad",
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.2} | {:.0} | {:.2} ({:.2} + {:.2}) | {:+.1}% |",
            row.id,
            row.campaign,
            passes.join("+"),
            row.tokens_per_expert,
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

    fn shipped() -> (Catalog, GroupedGemmCases) {
        let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
        let cases =
            parse_grouped_gemm_cases(TORCHAO_B200_GROUPED_GEMM).unwrap_or_else(|e| panic!("{e}"));
        (catalog, cases)
    }

    #[test]
    fn every_shipped_case_replays_on_the_b200_card() {
        let (catalog, cases) = shipped();
        assert_eq!(cases.cases.len(), 32);
        let k = crate::tools::common::constants(catalog.cost()).unwrap_or_else(|e| panic!("{e}"));
        let report =
            grouped_gemm_check_report(&catalog, k, &cases).unwrap_or_else(|| panic!("no b200"));
        assert_eq!(report.rows.len(), cases.cases.len());
        for row in &report.rows {
            let parts = row.predicted_gemm_ms + row.predicted_quantization_ms;
            assert!((parts / row.predicted_ms - 1.0).abs() < 1e-12, "{}", row.id);
            assert_eq!(row.predicted_quantization_ms > 0.0, row.quantization);
            assert!((row.error - (row.predicted_ms / row.measured_ms - 1.0)).abs() < 1e-12);
        }
        // Every campaign is summarised, each with the precisions it timed.
        assert_eq!(report.campaigns.len(), 3);
        let by_pass = report
            .campaigns
            .iter()
            .find(|c| c.campaign == "by_pass")
            .unwrap_or_else(|| panic!("no by_pass campaign"));
        assert_eq!(by_pass.cases, 4);
        assert!(by_pass.bf16_median_error.is_none());
        assert!(by_pass.mxfp8_gemm_median_error.is_some());
        assert!(by_pass.mxfp8_with_quantization_median_error.is_some());
    }

    #[test]
    fn the_price_is_the_steps_expert_gemm_rate_by_hand() {
        // DeepSeek-V3's expert on B200 in BF16 at 16384 tokens per expert: the card's large-GEMM
        // rate (peak × gemm_bf16) times the half-efficiency factors of 16384 tokens and of the
        // smaller weight dimension 2048.
        let (catalog, cases) = shipped();
        let k = crate::tools::common::constants(catalog.cost()).unwrap_or_else(|e| panic!("{e}"));
        let hw = &catalog.cost().hardware["b200"];
        let rate = hw.peak_tflops.bf16
            * 1e12
            * hw.efficiency.gemm_bf16
            * (16384.0 / (16384.0 + k.gemm_half_efficiency_tokens))
            * (2048.0 / (2048.0 + k.gemm_half_efficiency_dim));
        let report =
            grouped_gemm_check_report(&catalog, k, &cases).unwrap_or_else(|| panic!("no b200"));
        let row = report
            .rows
            .iter()
            .find(|r| r.id == "deepseek-v3-g8-bf16-fwd-figure")
            .unwrap_or_else(|| panic!("case missing"));
        let by_hand_ms = 2.0 * 131072.0 * 7168.0 * 2048.0 / rate * 1e3;
        assert!((row.predicted_ms / by_hand_ms - 1.0).abs() < 1e-12);
    }

    #[test]
    fn malformed_cases_are_refused_with_the_case_named() {
        let unknown_campaign =
            TORCHAO_B200_GROUPED_GEMM.replacen("campaign: by_pass", "campaign: elsewhere", 1);
        let err = parse_grouped_gemm_cases(&unknown_campaign)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("deepseek-v3-g8-mxfp8-fwd"), "{err}");
        let partial = TORCHAO_B200_GROUPED_GEMM.replacen(
            "passes: [fwd, dgrad, wgrad], quantization: true",
            "passes: [fwd], quantization: true",
            1,
        );
        assert!(parse_grouped_gemm_cases(&partial).is_err());
        let zero = TORCHAO_B200_GROUPED_GEMM.replacen("ms: 43.1402", "ms: 0", 1);
        assert!(parse_grouped_gemm_cases(&zero).is_err());
        let unknown_field = TORCHAO_B200_GROUPED_GEMM.replacen("ms: 43.1402", "seconds: 0.04", 1);
        assert!(parse_grouped_gemm_cases(&unknown_field).is_err());
    }
}
