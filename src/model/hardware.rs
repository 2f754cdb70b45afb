//! One GPU type and its system, as stored in `cards/hardware/<id>.yaml`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::config::{FlexBackend, Precision, ResolvedDispatcher, TokenDispatcher};
use super::kernels::{
    AttentionKernelTable, CollectiveSizeTable, DispatchTable, GroupedGemmTable,
    LinearAttentionKernel, MambaScanKernel,
};

/// Dense (no 2:4 sparsity) peak throughput per GPU, TFLOP/s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PeakTflops {
    pub bf16: f64,
    pub fp8: f64,
    /// 0 when the GPU has no FP4 tensor cores.
    #[serde(default)]
    pub fp4: f64,
}

/// Calibrated efficiencies the step-time model uses (fractions of the matching peak).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Efficiencies {
    /// Large BF16 GEMMs, fraction of the BF16 peak.
    pub gemm_bf16: f64,
    /// Large FP8 GEMMs (tensorwise/delayed/blockwise/MXFP8), fraction of the FP8 peak.
    pub gemm_fp8: f64,
    /// Large FP4 GEMMs, fraction of the FP4 peak.
    #[serde(default)]
    pub gemm_fp4: f64,
    /// Fused (flash) attention forward+backward, fraction of the BF16 peak, where the card
    /// has no `attention_kernels` table; the Gated DeltaNet kernels' where it has no
    /// `linear_attention_kernel`.
    pub attention: f64,
    /// Achieved fraction of the NVLink bandwidth for NCCL collectives and point-to-point
    /// traffic inside the NVLink domain (protocol overhead).
    pub collective_nvlink: f64,
    /// Achieved fraction of the scale-out NIC bandwidth per GPU for NCCL traffic between
    /// NVLink domains.
    pub collective_network: f64,
    /// Achieved fraction of HBM bandwidth for memory-bound element-wise kernels.
    pub hbm: f64,
}

/// Head dims whose fused-attention backward cuDNN releases before `cudnn_from` refuse on this
/// GPU: Transformer Engine then runs those layers on another backend. The attention tables
/// price the newer release; answers for such layers say what an older stack runs instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttentionBackwardLimit {
    /// The largest query/key head dim the older releases run the backward for.
    pub max_head_dim: u32,
    /// The first cuDNN release that runs the larger ones.
    pub cudnn_from: String,
    pub source: String,
    /// The fallback backend's measured speed on this GPU, where one is published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackAttentionSpeed>,
}

/// Where Transformer Engine's FP8 fused attention runs on this GPU: the run recipes it has an
/// FP8 attention kernel for (without `NVTE_DPA_FP8_RECIPE`), and the query/key and value head
/// dims it trains with; other recipes and head dims have none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fp8AttentionSupport {
    /// The GEMM recipes whose own FP8 attention runs here.
    pub recipes: Vec<Precision>,
    /// Largest query/key head dim.
    pub max_qk: u32,
    /// Largest value head dim.
    pub max_v: u32,
    /// Only exactly `max_qk` / `max_v` (Hopper's training path), not everything up to them.
    #[serde(default)]
    pub exact: bool,
    pub source: String,
}

impl Fp8AttentionSupport {
    /// Whether a layer with these head dims has an FP8 attention kernel here.
    pub fn accepts(&self, qk: u64, v: u64) -> bool {
        let (max_qk, max_v) = (u64::from(self.max_qk), u64::from(self.max_v));
        if self.exact {
            qk == max_qk && v == max_v
        } else {
            qk <= max_qk && v <= max_v
        }
    }

    /// The accepted head dims in words ("exactly 128/128", "up to 192/128").
    pub fn describe(&self) -> String {
        let which = if self.exact { "exactly" } else { "up to" };
        format!("{which} {}/{}", self.max_qk, self.max_v)
    }
}

/// One measured forward+backward speed of a fallback attention backend, with its shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FallbackAttentionSpeed {
    pub backend: String,
    pub head_dim: f64,
    pub seq_len: f64,
    pub causal: bool,
    /// Forward+backward TFLOP/s, the backward counted at 2.5 forward FLOPs.
    pub tflops_fwd_bwd: f64,
    pub source: String,
}

/// The largest square GEMM (8192³) measured on the GPU by recipe, TFLOP/s, with its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GemmCeilings {
    pub bf16: f64,
    pub fp8_tensorwise: f64,
    pub fp8_blockwise: f64,
    pub source: String,
}

impl GemmCeilings {
    /// The blockwise FP8 GEMM's speed as a fraction of the per-tensor one; `None` where either
    /// figure is not positive.
    pub fn blockwise_over_tensorwise(&self) -> Option<f64> {
        (self.fp8_tensorwise > 0.0 && self.fp8_blockwise > 0.0)
            .then(|| self.fp8_blockwise / self.fp8_tensorwise)
    }
}

/// Default MoE token dispatcher on this system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DefaultDispatcher {
    pub moe_token_dispatcher_type: TokenDispatcher,
    #[serde(default)]
    pub moe_flex_dispatcher_backend: Option<FlexBackend>,
}

impl DefaultDispatcher {
    /// The implementation this default names (flex without a backend is DeepEP, Megatron-Core's
    /// default backend).
    pub fn resolved(&self) -> ResolvedDispatcher {
        match (
            self.moe_token_dispatcher_type,
            self.moe_flex_dispatcher_backend,
        ) {
            (TokenDispatcher::Alltoall, _) => ResolvedDispatcher::Alltoall,
            (TokenDispatcher::Allgather, _) => ResolvedDispatcher::Allgather,
            (_, Some(FlexBackend::Hybridep)) => ResolvedDispatcher::Hybridep,
            _ => ResolvedDispatcher::Deepep,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    pub id: String,
    #[serde(default)]
    pub display_name: String,
    #[serde(default)]
    pub source: String,
    /// GPU architecture generation (`hopper`, `blackwell`); recipes from the same generation
    /// are near matches.
    pub generation: String,
    /// Memory a training process can use, GiB (what the allocator sees).
    pub memory_gib_usable: f64,
    /// Marketing capacity, decimal GB.
    pub memory_gb_nominal: f64,
    pub peak_tflops: PeakTflops,
    /// HBM bandwidth, TB/s.
    pub hbm_tb_per_s: f64,
    /// NVLink bandwidth per GPU per direction, GB/s.
    pub nvlink_gb_per_s: f64,
    /// GPUs in one NVLink domain (8 for HGX, 72 for NVL72).
    pub nvlink_domain_size: u32,
    /// GPUs per host (GB200/GB300: 4).
    pub gpus_per_node: u32,
    /// Scale-out network bandwidth per GPU per direction, GB/s.
    pub network_gb_per_s: f64,
    /// GPU-host link bandwidth per GPU per direction, GB/s (PCIe on x86 hosts, NVLink-C2C on
    /// Grace): what the CPU-offloaded optimizer's gradient and parameter copies cross.
    pub host_link_gb_per_s: f64,
    /// Measured copy-engine rates over that link for one GPU copying alone, GB/s per
    /// direction: where a card has them, they replace the nominal link rate × the streaming
    /// efficiency (`host_bandwidth_efficiency`). The node's shared host memory still bounds
    /// GPUs copying at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_copy_gb_per_s: Option<HostCopyRates>,
    /// Host (CPU) memory bandwidth of one node, GB/s, shared by its `gpus_per_node` GPUs:
    /// what bounds the CPU-offloaded optimizer step.
    pub host_memory_gb_per_s: f64,
    /// Streaming multiprocessors per GPU: what communication kernels that occupy SMs take a
    /// share of. Without it, overlapped communication is taken to cost compute nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_count: Option<u32>,
    /// Whether FP8 block scaling runs natively (MXFP8 needs Blackwell).
    #[serde(default)]
    pub supports_mxfp8: bool,
    pub default_dispatcher: DefaultDispatcher,
    pub efficiency: Efficiencies,
    /// Published fused-attention speeds by sequence length, head dimension, mask and pass;
    /// when present they replace `efficiency.attention` for softmax attention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_kernels: Option<AttentionKernelTable>,
    /// Published Gated DeltaNet kernel timings; when present they replace
    /// `efficiency.attention` for linear-attention layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_attention_kernel: Option<LinearAttentionKernel>,
    /// Published Mamba-2 scan timings; when present they replace `efficiency.attention` for
    /// Mamba-2 mixers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba_scan_kernel: Option<MambaScanKernel>,
    /// Measured grouped (expert) GEMM speed by tokens per expert and expert width; when
    /// present it replaces the fitted half-efficiency sizes for the experts' GEMMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grouped_gemm_kernels: Option<GroupedGemmTable>,
    /// Measured largest-GEMM speed by recipe: the blockwise / per-tensor FP8 ratio prices the
    /// blockwise recipe (`gemm_recipe_factor`); the BF16 figure is quoted only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_ceilings: Option<GemmCeilings>,
    /// Head dims older cuDNN releases refuse the fused-attention backward for on this GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_backward_limit: Option<AttentionBackwardLimit>,
    /// Recipes and head dims FP8 fused attention (`fp8_dot_product_attention`) runs with
    /// here; without it every recipe and head dim is taken to have a kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_attention: Option<Fp8AttentionSupport>,
    /// Published achieved bandwidth of the deduplicating MoE dispatchers (DeepEP/HybridEP),
    /// one table or a list (each scoped to its `backends`; each leg, NVLink and RDMA, is read
    /// from the first table that covers the dispatcher and gives that leg); it replaces link
    /// bandwidth × `efficiency.collective_nvlink` / `collective_network` for them.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(with = "Vec<DispatchTable>")]
    pub expert_dispatch: Vec<DispatchTable>,
    /// Measured NCCL collective speed inside the NVLink domain by message size: a message
    /// reaches the fraction of the large-message rate (`efficiency.collective_nvlink`) its
    /// curve gives. Without it every message runs at the large-message rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_nvlink_by_size: Option<CollectiveSizeTable>,
}

/// A single table, or a list of them.
fn one_or_many<'de, D>(deserializer: D) -> Result<Vec<DispatchTable>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(Box<DispatchTable>),
        Many(Vec<DispatchTable>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(t) => vec![*t],
        OneOrMany::Many(v) => v,
    })
}

/// Measured GPU-host copy rates of one GPU alone, GB/s, with where they come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostCopyRates {
    pub gpu_to_host: f64,
    pub host_to_gpu: f64,
    /// Each direction's rate while the GPU copies both ways at once, where measured: what
    /// activation offloading's steady state runs at (one microbatch's offloads beside
    /// another's reloads). A link that is not full duplex in practice shows here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub each_way_both_directions: Option<f64>,
    pub source: String,
}

impl HostCopyRates {
    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let rates = [
            ("gpu_to_host", Some(self.gpu_to_host)),
            ("host_to_gpu", Some(self.host_to_gpu)),
            ("each_way_both_directions", self.each_way_both_directions),
        ];
        for (name, rate) in rates {
            if let Some(rate) = rate {
                if !(rate.is_finite() && rate > 0.0) {
                    out.push(format!("{name} must be a positive GB/s figure, got {rate}"));
                }
            }
        }
        out
    }
}

impl Hardware {
    /// The measured copy rates, unless malformed (reported by `problems`, then not read).
    fn measured_host_copies(&self) -> Option<&HostCopyRates> {
        self.host_copy_gb_per_s
            .as_ref()
            .filter(|rates| rates.problems().is_empty())
    }

    /// Bytes per second one GPU copies to or from the host over its own link, the slower
    /// direction: the measured rate where the card has one, else the nominal rate at
    /// `efficiency` (the fraction host streaming reaches).
    pub fn host_link_bytes_per_s(&self, efficiency: f64) -> f64 {
        match self.measured_host_copies() {
            Some(measured) => measured.gpu_to_host.min(measured.host_to_gpu) * 1e9,
            None => self.host_link_gb_per_s * efficiency * 1e9,
        }
    }

    /// Bytes per second each way while one GPU copies to and from the host at once: the
    /// measured two-way rate where the card has one (never above the one-way rate), else the
    /// one-way rate (the link taken as full duplex).
    pub fn host_link_both_ways_bytes_per_s(&self, efficiency: f64) -> f64 {
        let one_way = self.host_link_bytes_per_s(efficiency);
        match self
            .measured_host_copies()
            .and_then(|m| m.each_way_both_directions)
        {
            Some(each_way) => (each_way * 1e9).min(one_way),
            None => one_way,
        }
    }

    /// The table that prices `backend`'s NVLink leg: the first covering it with NVLink figures.
    pub fn dispatch_nvlink_table(&self, backend: FlexBackend) -> Option<&DispatchTable> {
        self.expert_dispatch
            .iter()
            .find(|t| t.covers(backend) && t.has_nvlink())
    }

    /// The table that prices `backend`'s RDMA leg: the first covering it with RDMA columns.
    pub fn dispatch_rdma_table(&self, backend: FlexBackend) -> Option<&DispatchTable> {
        self.expert_dispatch
            .iter()
            .find(|t| t.covers(backend) && t.has_rdma())
    }

    /// Peak TFLOP/s used for GEMMs at `precision`.
    pub fn gemm_peak_tflops(&self, precision: Precision) -> f64 {
        match precision {
            Precision::Bf16 => self.peak_tflops.bf16,
            Precision::Nvfp4 => self.peak_tflops.fp4,
            _ => self.peak_tflops.fp8,
        }
    }

    /// The name of the peak [`Hardware::gemm_peak_tflops`] uses for `precision`.
    pub fn gemm_peak_name(precision: Precision) -> &'static str {
        match precision {
            Precision::Bf16 => "BF16",
            Precision::Nvfp4 => "FP4",
            _ => "FP8",
        }
    }

    /// How fast a recipe's large GEMM runs against the one its efficiency was fitted on: FP8
    /// blockwise scaling runs at the card's measured blockwise / per-tensor 8192³ ratio (the
    /// FP8 efficiency is fitted on per-tensor runs), every other recipe at 1.
    pub fn gemm_recipe_factor(&self, precision: Precision) -> f64 {
        match precision {
            Precision::Fp8Blockwise => self
                .gemm_ceilings
                .as_ref()
                .and_then(GemmCeilings::blockwise_over_tensorwise)
                .unwrap_or(1.0),
            _ => 1.0,
        }
    }

    /// Whether FP8 fused attention has a kernel for softmax head dims (query/key, value) here:
    /// cards without `fp8_attention`, and models without softmax attention, say yes.
    pub fn has_fp8_attention_kernel(&self, head_dims: Option<(u64, u64)>) -> bool {
        match (&self.fp8_attention, head_dims) {
            (Some(dims), Some((qk, v))) => dims.accepts(qk, v),
            _ => true,
        }
    }

    /// Calibrated large-GEMM efficiency at `precision`.
    pub fn gemm_efficiency(&self, precision: Precision) -> f64 {
        match precision {
            Precision::Bf16 => self.efficiency.gemm_bf16,
            Precision::Nvfp4 => self.efficiency.gemm_fp4,
            _ => self.efficiency.gemm_fp8,
        }
    }

    /// Problems with the card's tables (the lookups ignore a malformed table).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(rates) = &self.host_copy_gb_per_s {
            out.extend(
                rates
                    .problems()
                    .into_iter()
                    .map(|p| format!("host_copy_gb_per_s: {p}")),
            );
        }
        if let Some(t) = &self.attention_kernels {
            out.extend(
                t.problems()
                    .into_iter()
                    .map(|p| format!("attention_kernels: {p}")),
            );
        }
        if let Some(t) = &self.linear_attention_kernel {
            out.extend(
                t.problems()
                    .into_iter()
                    .map(|p| format!("linear_attention_kernel: {p}")),
            );
        }
        if let Some(t) = &self.mamba_scan_kernel {
            out.extend(
                t.problems()
                    .into_iter()
                    .map(|p| format!("mamba_scan_kernel: {p}")),
            );
        }
        if let Some(t) = &self.grouped_gemm_kernels {
            out.extend(
                t.problems()
                    .into_iter()
                    .map(|p| format!("grouped_gemm_kernels: {p}")),
            );
        }
        for t in &self.expert_dispatch {
            out.extend(
                t.problems()
                    .into_iter()
                    .map(|p| format!("expert_dispatch: {p}")),
            );
        }
        if let Some(t) = &self.nccl_nvlink_by_size {
            out.extend(
                t.problems()
                    .into_iter()
                    .map(|p| format!("nccl_nvlink_by_size: {p}")),
            );
        }
        out
    }

    /// Whether the GPU can run `precision` at all.
    pub fn supports(&self, precision: Precision) -> bool {
        match precision {
            Precision::Bf16 => true,
            Precision::Nvfp4 => self.peak_tflops.fp4 > 0.0,
            Precision::Mxfp8 => self.supports_mxfp8,
            _ => self.peak_tflops.fp8 > 0.0,
        }
    }
}
