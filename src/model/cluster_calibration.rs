//! A user's cluster calibration: a few physical multipliers fitted on the user's own runs
//! (`moe-skills calibrate --log …`), applied on top of the GPU card and the cost-model card.
//!
//! Each factor scales one physical quantity the cards state for every cluster of that GPU:
//! how fast GEMMs and fused attention run, what bandwidth the scale-out network and NVLink
//! deliver, how much host time a layer costs, how much the caching allocator fragments. A
//! cluster's software release, network and data pipeline move those quantities; nothing here
//! is specific to a model or a run.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::kernels::AttentionKernelTable;
use super::{CostConstants, Hardware};

/// A calibration of one GPU type on one cluster. Factors are multipliers of the card's value
/// (1 = the card is right for this cluster); a factor the runs could not identify stays 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterCalibration {
    /// The hardware card this calibration applies to (`h100`, `gb200`, …).
    pub hardware: String,
    /// A name for the cluster, shown in answers.
    #[serde(default)]
    pub cluster: Option<String>,
    /// How many runs (logs) the factors were fitted on.
    pub runs: u32,
    /// What produced it (the command and the logs).
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub factors: CalibrationFactors,
    /// Allocator fragmentation measured as `max reserved - max allocated` over the model's
    /// dynamic allocations; replaces the cost-model card's `fragmentation_fraction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragmentation_fraction: Option<f64>,
    /// How well the calibration did on the runs it was fitted on (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<serde_json::Value>,
    /// Fused-attention speeds measured on this cluster's GPU and software stack (written by
    /// `scripts/gpu-microbench.py` and `scripts/microbench-to-card.py`): they replace the
    /// hardware card's `attention_kernels` table, before `attention_throughput` scales it.
    /// A kernel library release moves these speeds, so they belong to a cluster, not a GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_kernels: Option<AttentionKernelTable>,
}

/// The physical multipliers a calibration can set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalibrationFactors {
    /// Achieved GEMM throughput (dense and grouped, every precision).
    #[serde(default = "one")]
    pub gemm_throughput: f64,
    /// Achieved fused-attention throughput.
    #[serde(default = "one")]
    pub attention_throughput: f64,
    /// Achieved scale-out (inter-node) network bandwidth.
    #[serde(default = "one")]
    pub network_bandwidth: f64,
    /// Achieved NVLink bandwidth.
    #[serde(default = "one")]
    pub nvlink_bandwidth: f64,
    /// Host (launch and synchronisation) time per layer.
    #[serde(default = "one")]
    pub host_time: f64,
}

fn one() -> f64 {
    1.0
}

impl Default for CalibrationFactors {
    fn default() -> Self {
        CalibrationFactors {
            gemm_throughput: 1.0,
            attention_throughput: 1.0,
            network_bandwidth: 1.0,
            nvlink_bandwidth: 1.0,
            host_time: 1.0,
        }
    }
}

/// One calibratable factor: its name in the card, what it means, and how to read and set it.
#[derive(Debug, Clone, Copy)]
pub struct Factor {
    pub name: &'static str,
    pub meaning: &'static str,
    get: fn(&CalibrationFactors) -> f64,
    set: fn(&mut CalibrationFactors, f64),
}

impl Factor {
    pub fn get(&self, factors: &CalibrationFactors) -> f64 {
        (self.get)(factors)
    }
    pub fn set(&self, factors: &mut CalibrationFactors, value: f64) {
        (self.set)(factors, value)
    }
}

/// Every step-time factor, in the order the fit considers them when two are equally
/// identifiable.
pub const TIME_FACTORS: [Factor; 5] = [
    Factor {
        name: "gemm_throughput",
        meaning: "GEMM throughput",
        get: |f| f.gemm_throughput,
        set: |f, v| f.gemm_throughput = v,
    },
    Factor {
        name: "attention_throughput",
        meaning: "fused-attention throughput",
        get: |f| f.attention_throughput,
        set: |f, v| f.attention_throughput = v,
    },
    Factor {
        name: "network_bandwidth",
        meaning: "scale-out network bandwidth",
        get: |f| f.network_bandwidth,
        set: |f, v| f.network_bandwidth = v,
    },
    Factor {
        name: "nvlink_bandwidth",
        meaning: "NVLink bandwidth",
        get: |f| f.nvlink_bandwidth,
        set: |f, v| f.nvlink_bandwidth = v,
    },
    Factor {
        name: "host_time",
        meaning: "host time per layer",
        get: |f| f.host_time,
        set: |f, v| f.host_time = v,
    },
];

/// A factor outside this range is not a calibration of the same GPU but a broken run or a
/// wrong hardware card; the card refuses it and the fit stops at it.
pub const FACTOR_RANGE: (f64, f64) = (0.2, 5.0);

impl CalibrationFactors {
    /// The GPU card and constants as this cluster runs them.
    pub fn apply(&self, hw: &Hardware, constants: &CostConstants) -> (Hardware, CostConstants) {
        let mut hw = hw.clone();
        let mut constants = constants.clone();
        hw.efficiency.gemm_bf16 *= self.gemm_throughput;
        hw.efficiency.gemm_fp8 *= self.gemm_throughput;
        hw.efficiency.gemm_fp4 *= self.gemm_throughput;
        // Attention: the fitted efficiency (Gated DeltaNet, cards without a kernel table) and
        // every published fused-attention speed alike.
        hw.efficiency.attention *= self.attention_throughput;
        if let Some(table) = hw.attention_kernels.as_mut() {
            for curve in &mut table.curves {
                curve
                    .tflops
                    .iter_mut()
                    .for_each(|t| *t *= self.attention_throughput);
            }
        }
        if let Some(gdn) = hw.linear_attention_kernel.as_mut() {
            gdn.forward_step_us /= self.attention_throughput;
            gdn.forward_ns_per_head_token /= self.attention_throughput;
        }
        if let Some(scan) = hw.mamba_scan_kernel.as_mut() {
            scan.forward_ns_per_head_token /= self.attention_throughput;
        }
        // Network and NVLink: the links and the dispatchers' achieved bandwidths on them (a
        // figure given as a fraction of the NVLink link scales with the link).
        hw.network_gb_per_s *= self.network_bandwidth;
        hw.nvlink_gb_per_s *= self.nvlink_bandwidth;
        for dispatch in hw.expert_dispatch.iter_mut() {
            let columns = &mut dispatch.rdma_gb_per_s;
            columns
                .dispatch
                .iter_mut()
                .chain(columns.combine.iter_mut())
                .for_each(|g| *g *= self.network_bandwidth);
            if let Some(t) = dispatch.rdma_by_span.as_mut() {
                t.scale(self.network_bandwidth);
            }
            if let Some(t) = dispatch.nvlink_by_span.as_mut() {
                t.scale(self.nvlink_bandwidth);
            }
        }
        constants.host_seconds_per_layer *= self.host_time;
        constants.low_precision_host_seconds_per_layer *= self.host_time;
        (hw, constants)
    }

    /// The factors that differ from 1, as `name ×value` for answers.
    pub fn changed(&self) -> Vec<String> {
        TIME_FACTORS
            .iter()
            .filter(|factor| (factor.get(self) - 1.0).abs() > 1e-9)
            .map(|factor| format!("{} ×{:.2}", factor.meaning, factor.get(self)))
            .collect()
    }
}

/// Why a calibration card cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrationError {
    #[error("calibration factor `{name}` = {value} is outside {low}..{high}; it does not describe the same GPU (refit with `moe-skills calibrate --log …`)")]
    FactorOutOfRange {
        name: &'static str,
        value: f64,
        low: f64,
        high: f64,
    },
    #[error("calibration `fragmentation_fraction` = {0} must be between 0 and 1")]
    Fragmentation(f64),
    #[error(
        "calibration `hardware` is empty; name the hardware card it was fitted on (`h100`, …)"
    )]
    NoHardware,
    #[error(
        "calibration `attention_kernels`: {0} (regenerate it with scripts/microbench-to-card.py)"
    )]
    AttentionTable(String),
}

impl ClusterCalibration {
    /// Checks every value is usable; a card that fails is reported and not applied.
    pub fn validate(&self) -> Result<(), CalibrationError> {
        if self.hardware.trim().is_empty() {
            return Err(CalibrationError::NoHardware);
        }
        let (low, high) = FACTOR_RANGE;
        for factor in TIME_FACTORS {
            let value = factor.get(&self.factors);
            if !(low..=high).contains(&value) {
                return Err(CalibrationError::FactorOutOfRange {
                    name: factor.name,
                    value,
                    low,
                    high,
                });
            }
        }
        if let Some(fraction) = self.fragmentation_fraction {
            if !(0.0..=1.0).contains(&fraction) {
                return Err(CalibrationError::Fragmentation(fraction));
            }
        }
        if let Some(table) = &self.attention_kernels {
            let problems = table.problems();
            if !problems.is_empty() {
                return Err(CalibrationError::AttentionTable(problems.join("; ")));
            }
        }
        Ok(())
    }

    /// The hardware card and constants as this cluster runs them.
    pub fn apply(&self, hw: &Hardware, constants: &CostConstants) -> (Hardware, CostConstants) {
        let mut hw = hw.clone();
        if let Some(table) = &self.attention_kernels {
            hw.attention_kernels = Some(table.clone());
        }
        let (hw, mut constants) = self.factors.apply(&hw, constants);
        if let Some(fraction) = self.fragmentation_fraction {
            constants.fragmentation_fraction = fraction;
        }
        (hw, constants)
    }

    /// One line for answers: "calibrated on 4 runs of cluster `x` (GEMM throughput ×0.87, …)".
    pub fn describe(&self) -> String {
        let mut changed = self.factors.changed();
        if let Some(fraction) = self.fragmentation_fraction {
            changed.push(format!("allocator fragmentation {:.0}%", fraction * 100.0));
        }
        if let Some(table) = &self.attention_kernels {
            changed.push(format!(
                "fused attention from its measured table ({})",
                table.kernel
            ));
        }
        let cluster = self
            .cluster
            .as_deref()
            .map(|name| format!("cluster `{name}`"))
            .unwrap_or_else(|| "your cluster".into());
        let basis = match self.runs {
            0 => format!("measured on {cluster}"),
            1 => format!("calibrated on 1 run of {cluster}"),
            n => format!("calibrated on {n} runs of {cluster}"),
        };
        let what = if changed.is_empty() {
            "no factor changed".to_owned()
        } else {
            changed.join(", ")
        };
        // How well it predicted runs it was not fitted on: the band that matters for this
        // cluster, beside the generic one every answer quotes.
        let held_out = self
            .fit
            .as_ref()
            .and_then(|fit| fit.get("median_abs_held_out_error_pct"))
            .and_then(serde_json::Value::as_f64)
            .map(|pct| format!("; median step-time error {pct:.1}% on runs left out of the fit"))
            .unwrap_or_default();
        format!("{basis} for `{}` ({what}{held_out})", self.hardware)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> ClusterCalibration {
        serde_yaml::from_str(
            "hardware: h100\nruns: 4\nfactors: {gemm_throughput: 0.8, network_bandwidth: 0.5}\nfragmentation_fraction: 0.1\n",
        )
        .expect("card")
    }

    #[test]
    fn unnamed_factors_stay_one_and_describe_names_the_changed_ones() {
        let cal = card();
        assert_eq!(cal.factors.host_time, 1.0);
        assert_eq!(cal.factors.attention_throughput, 1.0);
        let text = cal.describe();
        assert!(text.contains("calibrated on 4 runs"), "{text}");
        assert!(text.contains("GEMM throughput ×0.80"), "{text}");
        assert!(text.contains("scale-out network bandwidth ×0.50"), "{text}");
        assert!(!text.contains("host time"), "{text}");
        let mut with_fit = cal.clone();
        with_fit.fit = Some(serde_json::json!({"median_abs_held_out_error_pct": 2.1}));
        let text = with_fit.describe();
        assert!(text.contains("2.1% on runs left out of the fit"), "{text}");
        assert!(cal.validate().is_ok());
    }

    #[test]
    fn out_of_range_factors_are_refused_with_their_name() {
        let mut cal = card();
        cal.factors.host_time = 40.0;
        let error = cal.validate().expect_err("refused").to_string();
        assert!(error.contains("host_time"), "{error}");
        cal.factors.host_time = 1.0;
        cal.fragmentation_fraction = Some(2.0);
        assert!(cal.validate().is_err());
    }

    #[test]
    fn a_measured_attention_table_is_checked_and_named() {
        let mut cal: ClusterCalibration = serde_yaml::from_str(
            "hardware: h100\nruns: 0\nattention_kernels:\n  kernel: cuDNN 9.19\n  seq_lengths: [4096, 2048]\n  curves:\n    - {head_dim: 128, causal: true, pass: fwd, tflops: [500, 520], source: run.jsonl}\n",
        )
        .expect("card");
        let error = cal
            .validate()
            .expect_err("lengths must increase")
            .to_string();
        assert!(error.contains("attention_kernels"), "{error}");
        if let Some(table) = cal.attention_kernels.as_mut() {
            table.seq_lengths = vec![2048.0, 4096.0];
        }
        assert!(cal.validate().is_ok());
        let text = cal.describe();
        assert!(
            text.starts_with("measured on your cluster for `h100`"),
            "{text}"
        );
        assert!(
            text.contains("fused attention from its measured table (cuDNN 9.19)"),
            "{text}"
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let error = serde_yaml::from_str::<ClusterCalibration>(
            "hardware: h100\nruns: 1\nfactors: {gemm_speed: 2}\n",
        )
        .expect_err("unknown factor");
        assert!(error.to_string().contains("gemm_speed"), "{error}");
    }
}
