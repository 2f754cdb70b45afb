//! Step time of the slowest pipeline rank: compute, exposed communication, bubble, host
//! overhead and the optimizer step, as named terms that sum to the step.
//!
//! `links.rs` prices where NCCL traffic runs, `kernel_rates.rs` the compute kernels,
//! `expert_parallel.rs` and `ep_overlap.rs` the MoE all-to-alls and their 1F1B overlap,
//! `context_parallel.rs` CP's communication, `offload.rs` activation offloading's reloads,
//! `layer.rs` one layer, `step.rs` the step.

mod context_parallel;
mod ep_overlap;
mod expert_parallel;
mod kernel_rates;
mod layer;
mod links;
mod offload;
mod step;

pub use kernel_rates::{achieved_hbm_bytes_per_s, dense_gemm_flops_per_s, expert_gemm_flops_per_s};
pub(super) use step::{performance, recompute_flops_per_token};
