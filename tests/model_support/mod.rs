//! Shared helpers for the cost-model integration tests: the embedded cards.
#![allow(dead_code)]

use moe_skills::model::{Architecture, CostConstants, Hardware, TrainingConfig};

pub fn arch(id: &str) -> Architecture {
    let text = match id {
        "deepseek-v3" => include_str!("../../cards/models/deepseek-v3.yaml"),
        "kimi-k2" => include_str!("../../cards/models/kimi-k2.yaml"),
        "qwen3-30b-a3b" => include_str!("../../cards/models/qwen3-30b-a3b.yaml"),
        "qwen3-235b-a22b" => include_str!("../../cards/models/qwen3-235b-a22b.yaml"),
        "qwen3-next-80b-a3b" => include_str!("../../cards/models/qwen3-next-80b-a3b.yaml"),
        "qwen3.5-35b-a3b" => include_str!("../../cards/models/qwen3.5-35b-a3b.yaml"),
        "qwen3.5-397b-a17b" => include_str!("../../cards/models/qwen3.5-397b-a17b.yaml"),
        "gpt-oss-120b" => include_str!("../../cards/models/gpt-oss-120b.yaml"),
        "gpt-oss-20b" => include_str!("../../cards/models/gpt-oss-20b.yaml"),
        "mixtral-8x22b" => include_str!("../../cards/models/mixtral-8x22b.yaml"),
        "llama3-70b" => include_str!("../../cards/models/llama3-70b.yaml"),
        "llama3-8b" => include_str!("../../cards/models/llama3-8b.yaml"),
        "llama3.1-405b" => include_str!("../../cards/models/llama3.1-405b.yaml"),
        "nemotron-3-nano-30b-a3b" => {
            include_str!("../../cards/models/nemotron-3-nano-30b-a3b.yaml")
        }
        other => panic!("no model card {other}"),
    };
    serde_yaml::from_str(text).expect("model card parses")
}

pub const MODEL_IDS: [&str; 14] = [
    "deepseek-v3",
    "kimi-k2",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "qwen3-next-80b-a3b",
    "qwen3.5-35b-a3b",
    "qwen3.5-397b-a17b",
    "gpt-oss-120b",
    "gpt-oss-20b",
    "mixtral-8x22b",
    "llama3-70b",
    "llama3-8b",
    "llama3.1-405b",
    "nemotron-3-nano-30b-a3b",
];

pub const HARDWARE_IDS: [&str; 6] = ["h100", "h200", "b200", "b300", "gb200", "gb300"];

pub fn hw(id: &str) -> Hardware {
    let text = match id {
        "h100" => include_str!("../../cards/hardware/h100.yaml"),
        "h200" => include_str!("../../cards/hardware/h200.yaml"),
        "b200" => include_str!("../../cards/hardware/b200.yaml"),
        "b300" => include_str!("../../cards/hardware/b300.yaml"),
        "gb200" => include_str!("../../cards/hardware/gb200.yaml"),
        "gb300" => include_str!("../../cards/hardware/gb300.yaml"),
        other => panic!("no hardware card {other}"),
    };
    serde_yaml::from_str(text).expect("hardware card parses")
}

pub fn constants() -> CostConstants {
    serde_yaml::from_str(include_str!("../../cards/cost-model.yaml")).expect("constants parse")
}

/// The cost constants with the generated error bands (`cards/time-uncertainty.yaml`).
pub fn constants_with_bands() -> CostConstants {
    let mut k = constants();
    k.time_uncertainty = serde_yaml::from_str(include_str!("../../cards/time-uncertainty.yaml"))
        .expect("bands parse");
    k
}

pub fn cfg(yaml: &str) -> TrainingConfig {
    moe_skills::inputs::read_yaml(yaml).expect("config parses")
}
