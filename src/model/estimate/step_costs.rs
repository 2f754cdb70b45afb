//! Work done once per step, outside the microbatch loop: zeroing the gradient buffers,
//! gradient clipping, and the optimizer step — on the GPU as bytes touched ÷ HBM bandwidth,
//! offloaded to the host as copies over the GPU-host link plus a host step bound by the
//! rank's own optimizer rate or by the node's memory bandwidth, which every GPU of the node
//! shares, whichever is slower.

use super::super::config::{BufferDtype, FsdpStrategy, TrainingConfig};
use super::HostOptimizerStep;

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
    /// Parameters per second one rank's host optimizer steps (its own threads' rate).
    pub host_optimizer_params_per_s: f64,
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
    /// The host step's bounds, when anything is offloaded.
    pub host_bounds: Option<HostOptimizerStep>,
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
    let (host_optimizer, host_bounds) = if on_host > 0.0 {
        let copy = per(on_host * host_link_bytes_per_direction(), x.host_link);
        // The node's ranks step at once: each at its own rate, together within the
        // node's memory bandwidth. The rate is AdamW's; an optimizer that touches fewer
        // bytes per parameter streams them at the same bytes per second.
        let bytes = host_optimizer_step_bytes(cfg);
        let rank_bytes_per_s = x.host_optimizer_params_per_s * host_step_bytes(ADAM_MOMENTS);
        let bounds = HostOptimizerStep {
            offloaded_params: on_host,
            rank_rate_bound_s: per(on_host * bytes, rank_bytes_per_s),
            node_bandwidth_bound_s: per(on_host * x.gpus_sharing_host * bytes, x.host_memory),
            copy_s: copy,
        };
        let step = bounds.priced_s();
        let write_back = per(on_host * offloaded_write_back_bytes(cfg), x.hbm);
        let moved = if cfg.overlaps_cpu_optimizer_copies() {
            // Per-parameter pipeline: copies in both directions run beside the host step.
            copy.max(step)
        } else {
            copy + step + copy
        };
        (moved + write_back, Some(bounds))
    } else {
        (0.0, None)
    };
    StepCosts {
        zero_grads: per(grads_held * grad, x.hbm),
        grad_clip: per(x.shard_params * grad_clip_bytes(cfg), x.hbm),
        gpu_optimizer: per(
            x.shard_params * (1.0 - offload) * gpu_optimizer_step_bytes(cfg),
            x.hbm,
        ),
        host_optimizer,
        host_bounds,
    }
}

/// HBM bytes the GPU optimizer step touches per parameter of the part stepped on the
/// GPU (`1 − offload_fraction` of the rank's optimizer shard): the gradient read, the
/// master weight and every moment read and written, and the model weight written back.
/// - Without the precision-aware optimizer, `DistributedOptimizer::
///   _copy_model_grads_to_main_grads` hands Adam `main_grad.float()` (a new fp32 copy when
///   the buffer is bf16: read 2, write 4), and `_copy_main_params_to_model_params` copies
///   the fp32 master into the model weight in a kernel of its own (read 4, write 2, or 1
///   for FP8 weights).
/// - With it, TE's `FusedAdam(master_weights=True)` reads the gradient in its buffer dtype
///   and writes the bf16 weight in the same kernel. Under CPU offload the
///   `HybridDeviceOptimizer`'s GPU part steps an fp32 clone with fp32 moments and copies it
///   back in a post-step hook (read 4, write 2), as the non-fused path.
fn gpu_optimizer_step_bytes(cfg: &TrainingConfig) -> f64 {
    let fp32 = BufferDtype::Float32.bytes();
    let offload = cfg.optimizer_cpu_offload.unwrap_or(false);
    let aware = cfg.use_precision_aware_optimizer.unwrap_or(false);
    let grad = cfg.gradient_bytes();
    let weight = cfg.weight_bytes();
    let state = if offload {
        fp32 * (1.0 + cfg.optimizer_moments())
    } else {
        cfg.optimizer_state_bytes()
    };
    let fused = aware && !offload && !cfg.fp8_param_gather.unwrap_or(false);
    let grad_read = if aware || grad >= fp32 {
        grad
    } else {
        grad + fp32 + fp32
    };
    let write_back = if fused { weight } else { fp32 + weight };
    grad_read + 2.0 * state + write_back
}
/// Host memory bytes the CPU-offloaded optimizer step touches per offloaded parameter.
/// Megatron-LM's `HybridDeviceOptimizer` steps a pinned fp32 copy with
/// `torch.optim.AdamW(fused=True)` (or `torch.optim.SGD`), fp32 moments: the fp32
/// gradient read, master and moments read and written; plus the pinned gradient written
/// and the parameter read by the two DMA copies.
fn host_optimizer_step_bytes(cfg: &TrainingConfig) -> f64 {
    host_step_bytes(cfg.optimizer_moments())
}
/// Adam's two moments, the optimizer whose host rate the cost card gives.
const ADAM_MOMENTS: f64 = 2.0;
/// Host memory bytes per offloaded parameter of an optimizer keeping `moments` fp32 moments.
fn host_step_bytes(moments: f64) -> f64 {
    let fp32 = BufferDtype::Float32.bytes();
    let step = fp32 + 2.0 * fp32 * (1.0 + moments);
    step + host_link_bytes_per_direction() + host_link_bytes_per_direction()
}
/// HBM bytes per shard parameter of gradient clipping (`clip_grad`, 1.0 by default):
/// `get_grad_norm_fp32` reads the main gradients once (`multi_tensor_l2norm`), and with
/// Transformer Engine installed the norm stays a tensor, so `clip_grad_by_total_norm_fp32`
/// always rescales them in place (`multi_tensor_scale_tensor` with the coefficient clamped
/// at 1: read and write) — `core/optimizer/clip_grads.py`. The main gradients are the
/// buffer's dtype with the precision-aware optimizer, fp32 copies without it.
fn grad_clip_bytes(cfg: &TrainingConfig) -> f64 {
    let main_grad = if cfg.use_precision_aware_optimizer.unwrap_or(false) {
        cfg.gradient_bytes()
    } else {
        BufferDtype::Float32.bytes()
    };
    // Norm read, scale read, scale write.
    3.0 * main_grad
}
/// HBM bytes per offloaded parameter when its update lands on the GPU: the fp32 value
/// read (the staging copy `copy_kernel_cuda` converts, or the GPU fp32 master that
/// `_copy_main_params_to_model_params` copies) and the model weight written.
fn offloaded_write_back_bytes(cfg: &TrainingConfig) -> f64 {
    BufferDtype::Float32.bytes() + cfg.weight_bytes()
}
/// Bytes per offloaded parameter copied over the GPU-host link in each direction: the
/// gradient to the host, the updated parameter back. Both copies are `non_blocking`,
/// which makes PyTorch convert dtypes on the GPU (`copy_kernel_cuda`), so both cross in
/// the fp32 of the host copy whatever the GPU buffers hold.
fn host_link_bytes_per_direction() -> f64 {
    BufferDtype::Float32.bytes()
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
            // Fast enough that the node's shared bandwidth binds (1.44 s below; 0.2 s here).
            host_optimizer_params_per_s: 1e10,
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

    #[test]
    fn a_rank_alone_on_its_host_steps_at_its_own_rate() {
        let off = serde_json::json!({"optimizer_cpu_offload": true,
            "use_precision_aware_optimizer": true, "overlap_cpu_optimizer_d2h_h2d": true});
        let alone = StepInputs {
            gpus_sharing_host: 1.0,
            host_optimizer_params_per_s: 6.4e8,
            ..inputs()
        };
        // The node's bandwidth would allow 2e9 × 36 B / 400 GB/s = 0.18 s; the rank's own
        // rate takes 2e9 / 6.4e8 = 3.125 s, and the copies (0.16 s) run beside it.
        let c = step_costs(&cfg(off), &alone);
        assert!(
            (c.host_optimizer - 3.125 - 6e-3).abs() < 1e-9,
            "{}",
            c.host_optimizer
        );
        // SGD streams 28 of Adam's 36 bytes per parameter at the same bytes per second.
        let sgd = serde_json::json!({"optimizer": "sgd", "optimizer_cpu_offload": true,
            "overlap_cpu_optimizer_d2h_h2d": true});
        let s = step_costs(&cfg(sgd), &alone);
        // SGD's GPU write-back is the same 6 B per parameter.
        let expected = 3.125 * 28.0 / 36.0 + 6e-3;
        assert!(
            (s.host_optimizer - expected).abs() < 1e-9,
            "{}",
            s.host_optimizer
        );
    }

    #[test]
    fn optimizer_step_bytes_follow_the_megatron_code_path() {
        // Plain Adam, fp32 gradient buffer: grad 4 + (master + 2 moments) read and written
        // 2·12 + separate master→bf16 copy (4 + 2).
        assert_eq!(gpu_optimizer_step_bytes(&cfg(serde_json::json!({}))), 34.0);
        // bf16 gradient buffer without precision-aware: .float() copy (2 + 4) then read 4.
        let bf16_grads = cfg(serde_json::json!({"grad_reduce_in_fp32": false}));
        assert_eq!(gpu_optimizer_step_bytes(&bf16_grads), 10.0 + 24.0 + 6.0);
        // Precision-aware, bf16 moments, fused write-back: 4 + 2·8 + 2.
        let aware = cfg(serde_json::json!({"use_precision_aware_optimizer": true,
            "exp_avg_dtype": "bfloat16", "exp_avg_sq_dtype": "bfloat16"}));
        assert_eq!(gpu_optimizer_step_bytes(&aware), 22.0);
        // Megatron-Core's fp32 default moments: 4 + 2·12 + 2.
        let default_moments = cfg(serde_json::json!({"use_precision_aware_optimizer": true}));
        assert_eq!(gpu_optimizer_step_bytes(&default_moments), 30.0);
        // Offload: the GPU part keeps fp32 moments and copies back in a hook.
        let off = cfg(serde_json::json!({"use_precision_aware_optimizer": true,
            "optimizer_cpu_offload": true, "optimizer_offload_fraction": 0.5}));
        assert_eq!(gpu_optimizer_step_bytes(&off), 4.0 + 24.0 + 6.0);
        // Host: fp32 AdamW 4 + 2·12, plus the two DMA copies 4 + 4.
        assert_eq!(host_optimizer_step_bytes(&off), 36.0);
        let sgd = cfg(serde_json::json!({"optimizer": "sgd", "optimizer_cpu_offload": true}));
        assert_eq!(host_optimizer_step_bytes(&sgd), 4.0 + 16.0 + 8.0);
        assert!(!off.overlaps_cpu_optimizer_copies());
        assert_eq!(offloaded_write_back_bytes(&off), 6.0);
        // Clipping: norm read + in-place rescale of the main gradients.
        assert_eq!(grad_clip_bytes(&cfg(serde_json::json!({}))), 12.0);
        assert_eq!(grad_clip_bytes(&bf16_grads), 12.0);
        let aware_bf16 = cfg(serde_json::json!({"use_precision_aware_optimizer": true,
            "grad_reduce_in_fp32": false}));
        assert_eq!(grad_clip_bytes(&aware_bf16), 6.0);
    }
}
