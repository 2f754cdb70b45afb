//! Work done once per step, outside the microbatch loop: zeroing the gradient buffers,
//! gradient clipping, and the optimizer step — on the GPU as bytes touched ÷ HBM bandwidth,
//! offloaded to the host as copies over the GPU-host link plus a host step bound by the
//! node's memory bandwidth, which every GPU of the node shares.

use super::super::config::{FsdpStrategy, TrainingConfig};

/// What one GPU holds and the bandwidths its step runs at, bytes and bytes per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct StepInputs {
    /// Parameters whose optimizer state this GPU owns (its distributed-optimizer shard).
    pub shard_params: f64,
    /// Parameters on this GPU (its model-parallel slice, not sharded over data parallel).
    pub local_params: f64,
    /// Achieved HBM bandwidth.
    pub hbm: f64,
    /// Achieved GPU-host link bandwidth per GPU per direction.
    pub host_link: f64,
    /// Achieved host memory bandwidth of the node.
    pub host_memory: f64,
    /// GPUs of this job on one node, each running its own offloaded step at once.
    pub gpus_sharing_host: f64,
}

/// Seconds of the per-step work, by part; all of it is exposed (the next forward needs the
/// updated weights, and these kernels run between the last backward and it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct StepCosts {
    /// `zero_grad_buffer`: the gradient buffers cleared before the first microbatch.
    pub zero_grads: f64,
    /// Gradient clipping over this GPU's shard of the gradients: the norm read and the
    /// in-place rescale (the all-reduce of one scalar is latency only and left out).
    pub grad_clip: f64,
    /// The optimizer step of the part kept on the GPU.
    pub gpu_optimizer: f64,
    /// The offloaded part: gradient copies to the host, the host step, parameter copies back
    /// (pipelined with `overlap_cpu_optimizer_d2h_h2d`, one after the other otherwise), and
    /// the returned fp32 values written into the model weights on the GPU.
    pub host_optimizer: f64,
}

impl StepCosts {
    pub fn total(&self) -> f64 {
        self.zero_grads + self.grad_clip + self.gpu_optimizer + self.host_optimizer
    }
}

pub(super) fn step_costs(cfg: &TrainingConfig, x: &StepInputs) -> StepCosts {
    let per = |bytes: f64, bw: f64| if bw > 0.0 { bytes / bw } else { 0.0 };
    let grad = cfg.gradient_bytes();
    // FSDP with sharded gradients keeps only the shard's gradient buffer.
    let grads_held = match cfg.fsdp_strategy() {
        Some(FsdpStrategy::OptimGrads | FsdpStrategy::OptimGradsParams) => x.shard_params,
        _ => x.local_params,
    };
    let offload = cfg.offload_fraction();
    let on_host = x.shard_params * offload;
    let host_optimizer = if on_host > 0.0 {
        let copy = per(on_host * cfg.host_link_bytes_per_direction(), x.host_link);
        let step = per(
            on_host * x.gpus_sharing_host * cfg.host_optimizer_step_bytes(),
            x.host_memory,
        );
        let write_back = per(on_host * cfg.offloaded_write_back_bytes(), x.hbm);
        let moved = if cfg.overlaps_cpu_optimizer_copies() {
            // Per-parameter pipeline: copies in both directions run beside the host step.
            copy.max(step)
        } else {
            copy + step + copy
        };
        moved + write_back
    } else {
        0.0
    };
    StepCosts {
        zero_grads: per(grads_held * grad, x.hbm),
        grad_clip: per(x.shard_params * cfg.grad_clip_bytes(), x.hbm),
        gpu_optimizer: per(
            x.shard_params * (1.0 - offload) * cfg.gpu_optimizer_step_bytes(),
            x.hbm,
        ),
        host_optimizer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: serde_json::Value) -> TrainingConfig {
        TrainingConfig::from_fields(&json).expect("test config parses")
    }

    fn inputs() -> StepInputs {
        StepInputs {
            shard_params: 2e9,
            local_params: 4e9,
            hbm: 2e12,
            host_link: 50e9,
            host_memory: 400e9,
            gpus_sharing_host: 8.0,
        }
    }

    #[test]
    fn gpu_step_is_bytes_over_hbm() {
        let c = step_costs(&cfg(serde_json::json!({})), &inputs());
        // 4e9 params × 4 B fp32 gradient buffer / 2 TB/s.
        assert!((c.zero_grads - 8e-3).abs() < 1e-12);
        // 2e9 shard × (4 read + 4 read + 4 write) B / 2 TB/s.
        assert!((c.grad_clip - 12e-3).abs() < 1e-12);
        // 2e9 × 34 B / 2 TB/s.
        assert!((c.gpu_optimizer - 34e-3).abs() < 1e-12);
        assert_eq!(c.host_optimizer, 0.0);
    }

    #[test]
    fn offloaded_step_shares_the_host_between_the_node_gpus() {
        let off = serde_json::json!({"optimizer_cpu_offload": true,
            "use_precision_aware_optimizer": true});
        let c = step_costs(&cfg(off), &inputs());
        // Copies: 2e9 × 4 B / 50 GB/s = 0.16 s each way. Host: 2e9 × 8 GPUs × 36 B / 400 GB/s
        // = 1.44 s. Not pipelined: 0.16 + 1.44 + 0.16, plus the write-back 2e9 × 6 B / 2 TB/s.
        let wb = 6e-3;
        assert!(
            (c.host_optimizer - 1.76 - wb).abs() < 1e-9,
            "{}",
            c.host_optimizer
        );
        assert_eq!(c.gpu_optimizer, 0.0);
        let piped = serde_json::json!({"optimizer_cpu_offload": true,
            "use_precision_aware_optimizer": true, "overlap_cpu_optimizer_d2h_h2d": true});
        assert!((step_costs(&cfg(piped), &inputs()).host_optimizer - 1.44 - wb).abs() < 1e-9);
        // Half offloaded: half of each; the GPU steps the other half at 34 B.
        let half = serde_json::json!({"optimizer_cpu_offload": true,
            "use_precision_aware_optimizer": true, "optimizer_offload_fraction": 0.5});
        let h = step_costs(&cfg(half), &inputs());
        assert!((h.host_optimizer - 0.88 - wb / 2.0).abs() < 1e-9);
        assert!((h.gpu_optimizer - 1e9 * 34.0 / 2e12).abs() < 1e-12);
    }
}
