//! moe-skills: an MCP skill server and cost model for long-context Mixture-of-Experts training.
//!
//! Data flows one way: edges (`server`, `cli`) -> `tools` -> (`catalog`, `model`).
//! `model` is pure arithmetic with no I/O; `catalog` owns every file read.

pub mod catalog;
pub mod charts;
pub mod cli;
pub mod inputs;
pub mod model;
pub mod server;
pub mod tools;
