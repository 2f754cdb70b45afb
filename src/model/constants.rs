//! Global calibrated constants of the cost model (`cards/cost-model.yaml`).
//! Each has a physical meaning; none is specific to one model or one measurement.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::config::{AttentionBackend, Precision};
use super::kernels::NcclLatencyModel;
use super::uncertainty::UncertaintyTable;

/// SMs taken by each dispatcher's communication kernels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatcherCommSms {
    pub deepep: f64,
    pub hybridep: f64,
    pub nccl_all_to_all: f64,
}

/// DeepEP's normal-mode buffer sizing (`cards/cost-model.yaml`, `dispatcher_buffers.deepep`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeepepBufferSizing {
    /// Receive tokens per channel and peer, by EP size (ascending).
    pub configs: Vec<DeepepConfigEntry>,
    pub nvl_peers: u32,
    pub max_topk: f64,
    pub max_scales: f64,
    pub source_meta_bytes: f64,
    pub rdma_margin_bytes: f64,
    pub workspace_bytes: f64,
    pub nvshmem_granularity_bytes: f64,
}

/// One row of DeepEP's per-EP-size configuration tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeepepConfigEntry {
    pub ep: u32,
    pub nvl_recv_tokens: f64,
    pub rdma_recv_tokens: f64,
}

/// HybridEP's buffer sizing (`dispatcher_buffers.hybridep`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HybridepBufferSizing {
    /// Hidden elements per fp32 scale.
    pub scale_block: f64,
}

/// HBM bytes a low-precision recipe's quantizer moves per element of a linear layer's input
/// (forward) or output gradient (backward): reads of the BF16 tensor, the quantized copies it
/// writes (row-wise and, where the GEMMs need it, column-wise) and their scales.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuantizationBytes {
    pub fp8_tensorwise: f64,
    pub fp8_delayed: f64,
    pub fp8_blockwise: f64,
    pub mxfp8: f64,
    pub nvfp4: f64,
}

impl QuantizationBytes {
    /// Bytes per quantized element under `precision` (none in BF16).
    pub fn per_element(&self, precision: Precision) -> f64 {
        match precision {
            Precision::Bf16 => 0.0,
            Precision::Fp8Tensorwise => self.fp8_tensorwise,
            Precision::Fp8Delayed => self.fp8_delayed,
            Precision::Fp8Blockwise => self.fp8_blockwise,
            Precision::Mxfp8 => self.mxfp8,
            Precision::Nvfp4 => self.nvfp4,
        }
    }
}

/// Bytes per element of the [queries, keys] score matrix that unfused attention keeps, holds
/// during its backward and moves through HBM, by softmax path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnfusedAttentionBytes {
    /// Longest key row each backend's fused softmax kernel takes; longer rows take the
    /// PyTorch fallback.
    pub fused_softmax_max_keys: FusedSoftmaxMaxKeys,
    /// The fused softmax kernel's path.
    pub kernel: ScoreBytes,
    /// PyTorch's softmax in FP32.
    pub fallback: ScoreBytes,
    /// What dropout with p > 0 adds.
    pub dropout: ScoreBytes,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FusedSoftmaxMaxKeys {
    /// Transformer Engine's `UnfusedDotProductAttention`.
    pub unfused: f64,
    /// Megatron-Core's `DotProductAttention`.
    pub local: f64,
}

/// The softmax a materialising attention backend runs over a score row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftmaxPath {
    /// The fused scale-mask-softmax CUDA kernel (BF16 in and out).
    FusedKernel,
    /// PyTorch's softmax in FP32, past the kernel's row length.
    TorchFp32,
}

/// Bytes per score element: kept for backward, alive besides those during one layer's
/// backward, and moved through HBM in the forward and in the backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScoreBytes {
    pub saved: f64,
    pub backward_transient: f64,
    pub forward_traffic: f64,
    pub backward_traffic: f64,
}

impl ScoreBytes {
    fn plus(self, other: ScoreBytes) -> ScoreBytes {
        ScoreBytes {
            saved: self.saved + other.saved,
            backward_transient: self.backward_transient + other.backward_transient,
            forward_traffic: self.forward_traffic + other.forward_traffic,
            backward_traffic: self.backward_traffic + other.backward_traffic,
        }
    }
}

impl UnfusedAttentionBytes {
    /// Bytes per score element of `backend` with rows of `keys` keys and attention dropout
    /// `dropout`, and the softmax that runs: the fused softmax kernel up to the backend's
    /// limit, PyTorch's FP32 softmax beyond; dropout's tensors on top when p > 0. `None` for
    /// the fused backends.
    pub fn per_score(
        &self,
        backend: AttentionBackend,
        keys: f64,
        dropout: f64,
    ) -> Option<(ScoreBytes, SoftmaxPath)> {
        let limit = match backend {
            AttentionBackend::Unfused => self.fused_softmax_max_keys.unfused,
            AttentionBackend::Local => self.fused_softmax_max_keys.local,
            AttentionBackend::Auto | AttentionBackend::Fused | AttentionBackend::Flash => {
                return None
            }
        };
        let (softmax, path) = if keys <= limit {
            (self.kernel, SoftmaxPath::FusedKernel)
        } else {
            (self.fallback, SoftmaxPath::TorchFp32)
        };
        let bytes = if dropout > 0.0 {
            softmax.plus(self.dropout)
        } else {
            softmax
        };
        Some((bytes, path))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatcherBufferSizing {
    pub deepep: DeepepBufferSizing,
    pub hybridep: HybridepBufferSizing,
}

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
    /// How DeepEP and HybridEP size the communication buffers they allocate outside the
    /// allocator (reserved view only).
    pub dispatcher_buffers: DispatcherBufferSizing,
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
    /// backward) per byte of activations saved by a layer without recompute, counted with
    /// BF16 GEMM inputs under every recipe (quantizers are `quantization_bytes_per_element`).
    pub elementwise_traffic_per_activation_byte: f64,
    /// HBM bytes per element of the experts' second linear output that Megatron-Core's
    /// per-expert FP32 bias path moves, forward + backward (experts with biases only).
    pub expert_bias_bytes_per_output_element: f64,
    /// HBM bytes per element of the experts' first linear output that the clamp before a
    /// clamped gated activation moves, forward + backward.
    pub activation_clamp_bytes_per_fc1_element: f64,
    /// HBM bytes per element a low-precision recipe's quantizers move for every linear layer's
    /// input and output gradient, by recipe.
    pub quantization_bytes_per_element: QuantizationBytes,
    /// Exposed host time of one layer and microbatch, forward+backward, seconds, in BF16.
    pub host_seconds_per_layer: f64,
    /// Fraction of that host time a TE-scoped CUDA graph removes.
    pub cuda_graph_host_saving: f64,
    /// Fraction of that host time a full-iteration CUDA graph (the whole step one graph)
    /// removes.
    pub full_iteration_graph_host_saving: f64,
    /// More host time per layer and microbatch under an FP8/FP4 recipe: the quantizers each
    /// linear layer runs on its inputs and gradients.
    pub low_precision_host_seconds_per_layer: f64,
    /// CPU time to issue one layer pair under the 1F1B all-to-all overlap schedule
    /// (`overlap_moe_expert_parallel_comm`), in units of the plain schedule's host time per
    /// layer: the plain schedule issues most of a layer's kernels ahead of the GPU, the
    /// overlap schedule issues every sub-module in step with it.
    pub ep_overlap_host_factor: f64,
    /// Tokens (M) of a GEMM at which it reaches half its large-GEMM efficiency: per expert
    /// for grouped GEMMs (where the card has no measured grouped table), per microbatch
    /// slice for dense GEMMs. Cards written before the rename say
    /// `expert_gemm_half_efficiency_tokens`.
    #[serde(alias = "expert_gemm_half_efficiency_tokens")]
    pub gemm_half_efficiency_tokens: f64,
    /// Smallest weight dimension (hidden or FFN width on one GPU) at which a GEMM reaches
    /// half its large-GEMM efficiency.
    pub gemm_half_efficiency_dim: f64,
    /// SMs the MoE dispatcher's communication kernels occupy while they run (DeepEP,
    /// HybridEP, NCCL all-to-all): compute overlapped with them runs on the rest of the GPU.
    pub dispatcher_comm_sms: DispatcherCommSms,
    /// Hidden fraction of EP all-to-all gained per extra chunk of chunked EP overlap
    /// (`moe_ep_overlap_chunks`): hidden = 1 - 1/chunks scaled by this.
    pub ep_chunk_overlap_efficiency: f64,
    /// Hidden fraction of FSDP's per-microbatch gathers / reduce-scatters with overlap on.
    pub dp_overlap_fraction: f64,
    /// Fraction of CP ring transfers hidden behind attention compute of the previous chunk.
    pub cp_overlap_fraction: f64,
    /// NCCL's latency model for all-gathers and reduce-scatters whose group spans nodes
    /// (inside one NVLink domain the hardware cards' measured size tables apply).
    pub nccl_latency: NcclLatencyModel,
    /// Achieved fraction of the nominal host memory and GPU-host link bandwidths (the
    /// hardware cards' `host_memory_gb_per_s`, `host_link_gb_per_s`) for the CPU-offloaded
    /// optimizer's streaming step and copies.
    pub host_bandwidth_efficiency: f64,
    /// Parameters per second one rank's CPU optimizer steps, whatever bandwidth the node has
    /// left: the offloaded step of a node is the slower of this and its shared memory
    /// bandwidth.
    pub host_optimizer_params_per_s_per_rank: f64,
    /// Megatron-LM's default gradient bucket: `max(min, per_dp_rank × DP)` parameters. The
    /// last bucket's reduce-scatter (and the first one's parameter all-gather) has no
    /// compute left to hide behind.
    pub ddp_bucket_params_min: f64,
    pub ddp_bucket_params_per_dp_rank: f64,
    /// Slowdown of the loss layer under linear (vocabulary-streaming) cross entropy.
    pub linear_ce_loss_slowdown: f64,
    /// Core-attention throughput of FP8 fused attention (`fp8_dot_product_attention`)
    /// relative to BF16 attention on the same GPU.
    pub fp8_attention_speedup: f64,
    /// Bytes per attention-score element of the backends that materialise the scores
    /// (`attention_backend` unfused or local), counted from their code.
    pub unfused_attention: UnfusedAttentionBytes,
    /// Error bands by regime, from `cards/time-uncertainty.yaml` (generated by
    /// `moe-skills calibrate --bands`; not part of this card).
    #[serde(skip)]
    #[schemars(skip)]
    pub time_uncertainty: UncertaintyTable,
}

#[cfg(test)]
mod tests {
    use super::{AttentionBackend, CostConstants, SoftmaxPath};

    const CARD: &str = include_str!("../../cards/cost-model.yaml");

    #[test]
    fn the_card_parses_and_its_nccl_latency_model_is_well_formed() {
        let k: CostConstants = serde_yaml::from_str(CARD).expect("cost-model card");
        assert!(k.nccl_latency.problems().is_empty());
        assert_eq!(k.nccl_latency.ring.len(), 3);
        // Only LL has a bus-bandwidth ceiling across nodes (NCCL's llMaxBws).
        let capped: Vec<&str> = k
            .nccl_latency
            .ring
            .iter()
            .filter(|p| p.max_bus_gb_per_s.is_some())
            .map(|p| p.protocol.as_str())
            .collect();
        assert_eq!(capped, ["ll"]);
    }

    #[test]
    fn a_card_with_the_old_gemm_token_key_still_loads() {
        let new: CostConstants = serde_yaml::from_str(CARD).expect("cost-model card");
        let renamed = CARD.replace(
            "\ngemm_half_efficiency_tokens:",
            "\nexpert_gemm_half_efficiency_tokens:",
        );
        assert_ne!(renamed, CARD);
        let old: CostConstants = serde_yaml::from_str(&renamed).expect("old key");
        assert_eq!(
            old.gemm_half_efficiency_tokens,
            new.gemm_half_efficiency_tokens
        );
    }

    #[test]
    fn each_backend_leaves_its_fused_softmax_at_its_own_row_length() {
        let k: CostConstants = serde_yaml::from_str(CARD).expect("cost-model card");
        let u = &k.unfused_attention;
        let path = |backend, keys| u.per_score(backend, keys, 0.0).map(|(_, p)| p);
        // Transformer Engine: 16 < keys < 16384; Megatron-Core: 16 < keys <= 4096.
        assert_eq!(
            path(AttentionBackend::Unfused, 16383.0),
            Some(SoftmaxPath::FusedKernel)
        );
        assert_eq!(
            path(AttentionBackend::Unfused, 16384.0),
            Some(SoftmaxPath::TorchFp32)
        );
        assert_eq!(
            path(AttentionBackend::Local, 4096.0),
            Some(SoftmaxPath::FusedKernel)
        );
        assert_eq!(
            path(AttentionBackend::Local, 4097.0),
            Some(SoftmaxPath::TorchFp32)
        );
        for fused in [
            AttentionBackend::Auto,
            AttentionBackend::Fused,
            AttentionBackend::Flash,
        ] {
            assert_eq!(path(fused, 4096.0), None);
        }
        // Dropout adds its mask and dropped copy on either path; the counts add up.
        let (plain, _) = u.per_score(AttentionBackend::Unfused, 4096.0, 0.0).unwrap();
        let (dropped, _) = u.per_score(AttentionBackend::Unfused, 4096.0, 0.1).unwrap();
        assert_eq!(plain.saved, 2.0);
        assert_eq!(dropped.saved, 5.0);
        assert_eq!(plain.forward_traffic + plain.backward_traffic, 22.0);
        assert_eq!(
            dropped.forward_traffic + dropped.backward_traffic,
            22.0 + 10.0
        );
        let (long, _) = u
            .per_score(AttentionBackend::Unfused, 32768.0, 0.0)
            .unwrap();
        assert_eq!(
            (long.saved, long.forward_traffic + long.backward_traffic),
            (6.0, 72.0)
        );
    }
}
