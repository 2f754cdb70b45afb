//! Global calibrated constants of the cost model (`cards/cost-model.yaml`).
//! Each has a physical meaning; none is specific to one model or one measurement.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CostConstants {
    // ---- memory ----
    /// CUDA context, NCCL communicators and library workspaces, GiB per GPU (outside
    /// PyTorch's allocator: reserved view only).
    pub fixed_reserve_gib: f64,
    /// Allocator fragmentation, as a fraction of the dynamic (activation + transient) bytes
    /// (reserved view only).
    pub fragmentation_fraction: f64,
    /// Pre-registered dispatcher buffers per GPU, GiB (cudaMalloc: reserved view only).
    pub deepep_buffer_gib: f64,
    pub hybridep_buffer_gib: f64,
    /// Live bytes of the MoE layer working set (dispatch/permute buffers, expert
    /// intermediates and their gradients, alive together while one MoE layer runs its
    /// backward) per routed token per hidden element.
    pub moe_transient_bytes_per_routed_element: f64,
    /// Loss-side bytes per logit element: standard cross entropy keeps bf16 logits and an
    /// fp32 copy; the fused kernel keeps only the bf16 logits.
    pub logits_bytes_standard_ce: f64,
    pub logits_bytes_fused_ce: f64,
    /// Un-sharded FSDP units kept at once (double buffering for prefetch and reduce).
    pub fsdp_unsharded_units: f64,
    /// CUDA-graph private pool as a fraction of the captured scopes' activations.
    pub cuda_graph_pool_fraction: f64,
    /// Extra bytes per GEMM weight element for the FP8 cast cache (when weights are not
    /// kept in FP8 themselves).
    pub fp8_weight_copy_bytes: f64,
    // ---- time ----
    /// Element-wise HBM traffic (norms, activations, permutation, residuals; forward and
    /// backward) per byte of activations saved by a layer without recompute.
    pub elementwise_traffic_per_activation_byte: f64,
    /// Host time to launch one layer's kernels for one microbatch, forward+backward, seconds.
    pub host_seconds_per_layer: f64,
    /// Fraction of that host time a TE-scoped CUDA graph removes (full_iteration removes all).
    pub cuda_graph_host_saving: f64,
    /// Tokens per expert GEMM at which grouped GEMMs reach half their large-GEMM efficiency.
    pub expert_gemm_half_efficiency_tokens: f64,
    /// Smallest weight dimension (hidden or FFN width on one GPU) at which a GEMM reaches
    /// half its large-GEMM efficiency.
    pub gemm_half_efficiency_dim: f64,
    /// 1F1B A2A overlap (`overlap_moe_expert_parallel_comm`): fraction of the other
    /// microbatch's layer compute during which all-to-all makes progress. Hidden all-to-all =
    /// min(all-to-all, this × covering compute); weight-gradient GEMMs cover only with
    /// `delay_wgrad_compute`.
    pub ep_overlap_compute_fraction: f64,
    /// Hidden fraction of EP all-to-all gained per extra chunk of chunked EP overlap
    /// (`moe_ep_overlap_chunks`): hidden = 1 - 1/chunks scaled by this.
    pub ep_chunk_overlap_efficiency: f64,
    /// Hidden fraction of TP collectives with `tp_comm_overlap`.
    pub tp_overlap_fraction: f64,
    /// Hidden fraction of DP gradient reduce-scatter / param all-gather with overlap on.
    pub dp_overlap_fraction: f64,
    /// Fraction of CP ring transfers hidden behind attention compute of the previous chunk.
    pub cp_overlap_fraction: f64,
    /// Seconds per billion parameters of the CPU optimizer step left exposed.
    pub cpu_optimizer_seconds_per_gparam: f64,
    /// Slowdown of the loss layer under linear (vocabulary-streaming) cross entropy.
    pub linear_ce_loss_slowdown: f64,
    /// Core-attention throughput of FP8 fused attention (`fp8_dot_product_attention`)
    /// relative to BF16 attention on the same GPU.
    pub fp8_attention_speedup: f64,
}
