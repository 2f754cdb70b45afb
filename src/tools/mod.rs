//! Tools: one function per tool, shared by the MCP server and the CLI.

pub mod bridge_table_rows;
pub mod calibrate;
pub mod cluster_calibrate;
pub mod common;
pub mod config_text;
pub mod feasibility;
pub mod functional_tests;
pub mod gemm_kernel_check;
pub mod guard;
pub mod listing;
pub mod log_compare;
pub mod long_sequence_runs;
pub mod moe_layer_perf;
pub mod offload_runs;
pub mod pagination;
pub mod plan;
pub mod recipe;
pub mod recompute;
pub mod size_cp;
pub mod skills;
pub mod triage;
pub mod verification_runs;
