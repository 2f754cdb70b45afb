//! `list_models` and `list_hardware`: the cost model's cards with their key numbers.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::round;
use crate::catalog::Catalog;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelSummary {
    pub id: String,
    pub display_name: String,
    pub family: String,
    pub num_layers: u32,
    pub hidden_size: u64,
    pub attention: String,
    pub num_experts: u64,
    pub top_k: u64,
    pub vocab_size: u64,
    pub mtp_num_layers: u32,
    pub total_params_billion: f64,
    pub gflop_per_token_at_4k: f64,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListModelsOutput {
    pub models: Vec<ModelSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HardwareSummary {
    pub id: String,
    pub display_name: String,
    pub generation: String,
    pub memory_gib_usable: f64,
    pub bf16_tflops: f64,
    pub fp8_tflops: f64,
    pub fp4_tflops: f64,
    pub hbm_tb_per_s: f64,
    pub nvlink_gb_per_s: f64,
    pub nvlink_domain_size: u32,
    pub network_gb_per_s: f64,
    pub default_dispatcher: String,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListHardwareOutput {
    pub hardware: Vec<HardwareSummary>,
}

impl ListModelsOutput {
    /// The models as a Markdown table (the MCP text block).
    pub fn markdown(&self) -> String {
        let mut text = format!(
            "{} model cards; use the id as `model`.\n\n\
             | id | model | layers | hidden | experts | top-k | params (B) | GFLOP/token at 4K | attention |\n\
             |---|---|--:|--:|--:|--:|--:|--:|---|\n",
            self.models.len()
        );
        for m in &self.models {
            text.push_str(&format!(
                "| `{}` | {} | {} | {} | {} | {} | {:.1} | {:.1} | {} |\n",
                m.id,
                m.display_name,
                m.num_layers,
                m.hidden_size,
                m.num_experts,
                m.top_k,
                m.total_params_billion,
                m.gflop_per_token_at_4k,
                m.attention
            ));
        }
        text
    }
}

impl ListHardwareOutput {
    /// The GPUs as a Markdown table (the MCP text block).
    pub fn markdown(&self) -> String {
        let mut text = format!(
            "{} hardware cards; use the id as `hardware`. Peaks are dense TFLOP/s per GPU.\n\n\
             | id | GPU | usable GiB | BF16 | FP8 | FP4 | HBM TB/s | NVLink GB/s | NVLink domain | network GB/s | default dispatcher |\n\
             |---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n",
            self.hardware.len()
        );
        for h in &self.hardware {
            text.push_str(&format!(
                "| `{}` | {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} | {:.0} | {} | {:.0} | {} |\n",
                h.id,
                h.display_name,
                h.memory_gib_usable,
                h.bf16_tflops,
                h.fp8_tflops,
                h.fp4_tflops,
                h.hbm_tb_per_s,
                h.nvlink_gb_per_s,
                h.nvlink_domain_size,
                h.network_gb_per_s,
                h.default_dispatcher
            ));
        }
        text
    }
}

pub fn list_models(catalog: &Catalog) -> ListModelsOutput {
    let models = catalog
        .cost()
        .models
        .values()
        .map(|a| {
            let attention = if a.mla.is_some() {
                format!("MLA, {} heads", a.num_attention_heads)
            } else {
                format!(
                    "{} heads / {} KV, head dim {}{}",
                    a.num_attention_heads,
                    a.kv_heads(),
                    a.head_dim(),
                    if a.linear_attention.is_some() {
                        ", with Gated DeltaNet layers"
                    } else {
                        ""
                    }
                )
            };
            ModelSummary {
                id: a.id.clone(),
                display_name: a.display_name.clone(),
                family: a.family.clone(),
                num_layers: a.num_layers,
                hidden_size: a.hidden_size,
                attention,
                num_experts: a.moe.as_ref().map_or(0, |m| m.num_experts),
                top_k: a.moe.as_ref().map_or(0, |m| m.top_k),
                vocab_size: a.vocab_size,
                mtp_num_layers: a.mtp_num_layers,
                total_params_billion: round(
                    crate::model::params::total_params(a, a.mtp_num_layers) / 1e9,
                    1,
                ),
                gflop_per_token_at_4k: round(
                    crate::model::flops::model_flops_per_token(a, a.mtp_num_layers, 4096).total()
                        / 1e9,
                    1,
                ),
                source: a.source.clone(),
            }
        })
        .collect();
    ListModelsOutput { models }
}

pub fn list_hardware(catalog: &Catalog) -> ListHardwareOutput {
    let hardware = catalog
        .cost()
        .hardware
        .values()
        .map(|h| HardwareSummary {
            id: h.id.clone(),
            display_name: h.display_name.clone(),
            generation: h.generation.clone(),
            memory_gib_usable: h.memory_gib_usable,
            bf16_tflops: h.peak_tflops.bf16,
            fp8_tflops: h.peak_tflops.fp8,
            fp4_tflops: h.peak_tflops.fp4,
            hbm_tb_per_s: h.hbm_tb_per_s,
            nvlink_gb_per_s: h.nvlink_gb_per_s,
            nvlink_domain_size: h.nvlink_domain_size,
            network_gb_per_s: h.network_gb_per_s,
            default_dispatcher: match h.default_dispatcher.moe_flex_dispatcher_backend {
                Some(b) => format!("{}+{b}", h.default_dispatcher.moe_token_dispatcher_type),
                None => h.default_dispatcher.moe_token_dispatcher_type.to_string(),
            },
            source: h.source.clone(),
        })
        .collect();
    ListHardwareOutput { hardware }
}
