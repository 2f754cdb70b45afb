//! Measured memory stages (the seed's staged runs): what each measured and how it is read.

use super::*;

/// Measured values attached to a memory stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageMeasured {
    pub model_tflops_per_gpu: f64,
    pub peak_memory_gb: f64,
    /// Pipeline rank whose peak the source reports, when it reports one rank rather than the
    /// worst (a training log printed by global rank 0 shows the first pipeline stage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_pipeline_rank: Option<u32>,
    /// Which memory view the measured figure is: `reserved` (nvidia-smi, device memory
    /// used; the default) or `allocated` (`torch.cuda.max_memory_allocated`, the
    /// `max allocated` of Megatron's `report_memory` line).
    #[serde(default)]
    pub memory_view: MemoryView,
}

/// The two memory views an estimate reports (`MemoryReport::peak_gib` / `allocated_gib`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryView {
    #[default]
    Reserved,
    Allocated,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryStage {
    pub id: String,
    pub title: String,
    pub config: serde_json::Value,
    pub measured: StageMeasured,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StageFile {
    stages: Vec<MemoryStage>,
}

/// Parse the measured-stages YAML (`qwen35-35b-a3b-128k-stages.yaml`).
pub fn parse_memory_stages(
    yaml: &str,
) -> Result<Vec<(MemoryStage, TrainingConfig)>, CalibrationError> {
    let file: StageFile =
        serde_yaml::from_str(yaml).map_err(|e| CalibrationError::Stages(e.to_string()))?;
    file.stages
        .into_iter()
        .map(|s| {
            let cfg = TrainingConfig::from_fields(&s.config)
                .map_err(|e| CalibrationError::Stages(format!("stage {}: {e}", s.id)))?;
            Ok((s, cfg))
        })
        .collect()
}
