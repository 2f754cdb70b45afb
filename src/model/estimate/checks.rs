//! Layout rules: the cost model's own divisibility and support checks, and Megatron-LM's
//! start-up checks applied as violations or warnings.

use super::super::activations::{ScoreMatrix, PRICED_OFFLOAD_MODULES};
use super::super::arch::{Architecture, AttentionKind};
use super::super::config::{
    AttentionBackend, CudaGraphScope, Precision, RecomputeModule, ResolvedDispatcher,
    TrainingConfig,
};
use super::super::constants::SoftmaxPath;
use super::super::hardware::Hardware;
use super::super::kernels::{backward_flops_per_forward, KernelPass};
use super::super::layout::ResolvedLayout;
use super::super::megatron_rules::{self, Outcome, RuleInput};
use super::{violation, Estimate, Performance, Violation};

/// Megatron-LM's own start-up checks (`megatron_rules`): refusals become violations, settings
/// Megatron ignores or overrides become warnings, each with its fix and citation.
/// Which of Megatron-LM's rules to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RuleOutcomes {
    All,
    /// Only the refusals (a candidate that is dropped needs no warnings).
    Violations,
}

pub(super) fn apply_megatron_rules(
    arch: &Architecture,
    cfg: &TrainingConfig,
    l: &ResolvedLayout,
    dispatcher: ResolvedDispatcher,
    mtp_layers: u32,
    outcomes: RuleOutcomes,
    est: &mut Estimate,
) {
    let input = RuleInput {
        vpp: l.vpp,
        dispatcher,
        mtp_layers,
        stages: &l.stages,
        ..RuleInput::new(cfg, arch)
    };
    let only = match outcomes {
        RuleOutcomes::All => None,
        RuleOutcomes::Violations => Some(Outcome::Violation),
    };
    for f in megatron_rules::check_outcomes(&input, only) {
        match f.outcome {
            Outcome::Violation => est.violations.push(Violation {
                code: f.code.to_string(),
                message: f.message,
                fix: f.fix,
                source: Some(f.source.to_string()),
            }),
            Outcome::Warning => est.warnings.push(f.warning_text()),
        }
    }
}

pub(super) fn check_rules(
    arch: &Architecture,
    hw: &Hardware,
    cfg: &TrainingConfig,
    l: &ResolvedLayout,
    precision: Precision,
    est: &mut Estimate,
) {
    let v = &mut est.violations;
    let tp = l.tp as u64;
    if !hw.supports(precision) {
        v.push(violation(
            "precision_unsupported",
            format!("{} cannot run {} GEMMs", hw.id, precision),
            match precision {
                Precision::Mxfp8 => {
                    "use fp8-blockwise on Hopper, or a Blackwell GPU for mxfp8".into()
                }
                _ => "use bf16 or an FP8 recipe this GPU supports".into(),
            },
        ));
    }
    if !arch.num_attention_heads.is_multiple_of(tp) {
        v.push(violation(
            "heads_not_divisible_by_tp",
            format!(
                "{} attention heads are not divisible by TP={tp}",
                arch.num_attention_heads
            ),
            format!("use a TP that divides {}", arch.num_attention_heads),
        ));
    }
    let uses_softmax = arch.has_softmax_attention();
    if let Some(backend) = cfg
        .attention_backend
        .filter(|b| b.materialises_scores() && l.cp > 1 && uses_softmax)
    {
        let refusal = match backend {
            AttentionBackend::Local => "Megatron-Core's DotProductAttention asserts \"Context parallelism is only supported by TEDotProductAttention!\" (megatron/core/transformer/dot_product_attention.py, Megatron-LM d98e8a64)",
            _ => "Transformer Engine runs context parallelism only with FusedAttention or FlashAttention (get_attention_backend, transformer_engine/pytorch/attention/dot_product_attention/utils.py, d0067d0d), so it stops with \"No dot product attention backend is available\"",
        };
        v.push(violation(
            "materialised_attention_with_context_parallel",
            format!("attention_backend {backend} with CP={}: {refusal}", l.cp),
            "use attention_backend auto (or fused / flash), whose kernels run the CP ring; or CP 1"
                .into(),
        ));
    }
    if arch.mla.is_none() && uses_softmax && !arch.kv_heads().is_multiple_of(tp) {
        v.push(violation(
            "kv_heads_not_divisible_by_tp",
            format!(
                "{} KV heads (query groups) are not divisible by TP={tp}",
                arch.kv_heads()
            ),
            format!("use TP ≤ {} that divides it", arch.kv_heads()),
        ));
    }
    if let Some(m) = arch.mamba.as_ref().filter(|_| arch.has_mamba_layers()) {
        // Megatron-Core's MambaMixer asserts both (megatron/core/ssm/mamba_mixer.py, d98e8a64).
        if !m.num_heads.is_multiple_of(tp) || !m.num_groups.is_multiple_of(tp) {
            v.push(violation(
                "mamba_heads_not_divisible_by_tp",
                format!(
                    "Mamba-2 heads ({}) and groups ({}) must both divide by TP={tp}",
                    m.num_heads, m.num_groups
                ),
                format!("use a TP that divides {}", m.num_groups),
            ));
        }
        // MambaContextParallel: heads split over CP, groups repeated when fewer
        // (megatron/core/ssm/mamba_context_parallel.py).
        let heads = m.num_heads / tp.max(1);
        let groups = m.num_groups / tp.max(1);
        let cp = l.cp as u64;
        let groups_fit = groups >= cp || (groups > 0 && cp.is_multiple_of(groups));
        if l.cp > 1 && (heads == 0 || !heads.is_multiple_of(cp) || !groups_fit) {
            v.push(violation(
                "cp_exceeds_heads",
                format!(
                    "CP={} cannot split {heads} Mamba-2 heads and {groups} groups per TP rank (its context parallelism is head-parallel)",
                    l.cp
                ),
                format!("use CP dividing {heads}, or trade CP for TP"),
            ));
        }
    }
    if let Some(g) = &arch.linear_attention {
        if g.num_key_heads % tp != 0 || g.num_value_heads % tp != 0 {
            v.push(violation(
                "linear_heads_not_divisible_by_tp",
                format!(
                    "Gated DeltaNet heads ({} key, {} value) are not divisible by TP={tp}",
                    g.num_key_heads, g.num_value_heads
                ),
                format!("use a TP that divides {}", g.num_key_heads),
            ));
        }
        let per_tp = g.num_key_heads / tp.max(1);
        if l.cp > 1 && (per_tp == 0 || !per_tp.is_multiple_of(l.cp as u64)) {
            v.push(violation(
                "cp_exceeds_heads",
                format!(
                    "CP={} cannot split {} Gated DeltaNet key heads per TP rank (its context parallelism is head-parallel)",
                    l.cp, per_tp
                ),
                format!("use CP dividing {per_tp}, or trade CP for TP"),
            ));
        }
    }
    match &arch.moe {
        Some(m) => {
            if m.num_experts % l.ep as u64 != 0 {
                v.push(violation(
                    "experts_not_divisible_by_ep",
                    format!("{} experts are not divisible by EP={}", m.num_experts, l.ep),
                    format!("use an EP that divides {}", m.num_experts),
                ));
            }
        }
        None => {
            if l.ep > 1 {
                v.push(violation(
                    "ep_without_experts",
                    format!("EP={} but {} is a dense model", l.ep, arch.display_name),
                    "set expert_model_parallel_size to 1".into(),
                ));
            }
        }
    }
    if l.cp > 1 {
        let div = 2u64.saturating_mul(l.cp as u64).saturating_mul(tp);
        if !l.seq.is_multiple_of(div) {
            v.push(violation(
                "seq_not_divisible",
                format!("seq_length {} is not divisible by 2·CP·TP = {div}", l.seq),
                format!("use a seq_length that is a multiple of {div}"),
            ));
        }
        // Transformer Engine's all-to-all splits the heads over the all-to-all group (all of
        // CP for `a2a`, the inner level for `a2a+p2p`).
        let a2a = cfg.cp_groups().0 as u64;
        if a2a > 1 && uses_softmax && !arch.all_to_all_splits_heads(tp, a2a) {
            v.push(violation(
                "cp_exceeds_kv_heads",
                format!(
                    "all-to-all CP over {a2a} ranks needs the {} query heads and {} KV heads per TP rank to divide by {a2a}",
                    arch.num_attention_heads / tp.max(1),
                    arch.kv_heads() / tp.max(1)
                ),
                "use cp_comm_type p2p, or a2a+p2p with an all-to-all size that divides the heads, or a smaller CP".into(),
            ));
        }
    } else if l.sequence_parallel && !l.seq.is_multiple_of(tp) {
        v.push(violation(
            "seq_not_divisible",
            format!("seq_length {} is not divisible by TP={tp}", l.seq),
            format!("use a multiple of {tp}"),
        ));
    }
    for module in cfg.recompute_modules() {
        if let RecomputeModule::Other(name) = module {
            let closest = RecomputeModule::KNOWN
                .iter()
                .map(|k| (strsim::jaro_winkler(name, k), *k))
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, k)| k)
                .unwrap_or("layernorm");
            v.push(violation(
                "unknown_recompute_module",
                format!("unknown recompute module `{name}`"),
                format!(
                    "did you mean `{closest}`? valid: {}",
                    RecomputeModule::KNOWN.join(", ")
                ),
            ));
        }
    }
    if let Some(f) = cfg.optimizer_offload_fraction {
        if !(0.0..=1.0).contains(&f) || f.is_nan() {
            v.push(violation(
                "invalid_offload_fraction",
                format!("optimizer_offload_fraction {f} is outside [0, 1]"),
                "use a fraction between 0 and 1".into(),
            ));
        }
    }
}

/// Where Transformer Engine has no FP8 attention kernel for the run (the card's `fp8_attention`,
/// read from `get_attention_backend` and `nvte_get_fused_attn_backend`; FlashAttention and
/// unfused attention are off for FP8 attention, so such a run raises "No dot product attention
/// backend is available"). For head dims nothing helps: the run needs the flag dropped, and
/// attention is priced in BF16. For the recipe, `NVTE_DPA_FP8_RECIPE` gives attention a recipe
/// of its own (dot_product_attention.py), which the configuration does not carry, so the answer
/// is priced as FP8 attention and says what the run needs.
fn fp8_attention_backend_note(
    arch: &Architecture,
    hw: &Hardware,
    cfg: &TrainingConfig,
) -> Option<String> {
    let support = hw.fp8_attention.as_ref().filter(|_| cfg.fp8_attention())?;
    const STOPS: &str = "with FlashAttention and unfused attention off for FP8 attention it stops with \"No dot product attention backend is available\"";
    if let Some((qk, v)) = arch
        .softmax_head_dims()
        .filter(|&(qk, v)| !support.accepts(qk, v))
    {
        return Some(format!(
            "fp8_dot_product_attention with head dims {qk}/{v} (query-key/value) on {gpu}: Transformer Engine's FP8 attention trains only with head dims {accepted} there ({src}), and {STOPS}. Fix: drop fp8_dot_product_attention; attention is priced in BF16, as that run would be",
            gpu = hw.id,
            accepted = support.describe(),
            src = support.source,
        ));
    }
    let precision = cfg.precision();
    (!support.recipes.contains(&precision)).then(|| {
        let recipes: Vec<String> = support.recipes.iter().map(|r| r.to_string()).collect();
        format!(
            "fp8_dot_product_attention under {precision} on {gpu}: Transformer Engine has an FP8 attention kernel there only for {recipes} ({src}), and {STOPS} unless NVTE_DPA_FP8_RECIPE gives attention one of those recipes (DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling) or F16 (BF16 attention). Priced as FP8 attention",
            gpu = hw.id,
            recipes = recipes.join(", "),
            src = support.source,
        )
    })
}

/// What a non-default `attention_backend` changes. A backend that materialises the score
/// matrix keeps it (and, with dropout, its mask) per layer and microbatch and is priced at the
/// traffic its softmax moves; `flash` is priced with the card's fused-attention curves.
fn attention_backend_note(
    arch: &Architecture,
    hw: &Hardware,
    cfg: &TrainingConfig,
    l: &ResolvedLayout,
    scores: Option<ScoreMatrix>,
) -> Option<String> {
    let backend = cfg.attention_backend?;
    if !arch.has_softmax_attention() {
        return None;
    }
    if backend == AttentionBackend::Flash {
        let kernel = hw
            .attention_kernels
            .as_ref()
            .map(|t| t.kernel.as_str())
            .unwrap_or("the card's fitted attention efficiency");
        return Some(format!(
            "attention_backend flash: priced with this card's fused-attention speeds ({kernel}); FlashAttention's own speed on {gpu} is not on the card",
            gpu = hw.id,
        ));
    }
    let m = scores?;
    let heads = arch.num_attention_heads as f64 / l.tp.max(1) as f64;
    let queries = l.seq as f64 / l.cp.max(1) as f64;
    let per_layer = m.elements(arch, l.tp, l.mbs, queries);
    let gib = |bytes: f64| bytes * per_layer / (1u64 << 30) as f64;
    let softmax = match m.softmax {
        SoftmaxPath::TorchFp32 => {
            "PyTorch's FP32 softmax (the rows are longer than the fused softmax kernel takes)"
        }
        SoftmaxPath::FusedKernel => "the fused softmax kernel",
    };
    let dropout = cfg.attention_dropout.unwrap_or(0.0);
    let dropout_text = if dropout > 0.0 {
        format!(", with attention_dropout {dropout} keeping its mask and the dropped probabilities")
    } else {
        String::new()
    };
    let kept = if cfg.has_recompute(&RecomputeModule::CoreAttn) || cfg.full_recompute() {
        "recomputed in the backward, not kept".to_string()
    } else {
        format!(
            "{:.2} GiB kept per layer and microbatch",
            gib(m.bytes.saved)
        )
    };
    Some(format!(
        "attention_backend {backend} materialises the attention scores: {queries:.0} queries × {keys:.0} keys × {heads:.0} heads per microbatch and layer on each GPU, computed whole whatever the mask, through {softmax}{dropout_text}: {kept}, {transient:.2} GiB more while a layer's backward runs; priced as two batched GEMMs and the softmax's HBM traffic. Fused attention (attention_backend auto) keeps none of it",
        keys = m.keys,
        transient = gib(m.bytes.backward_transient),
    ))
}

/// The layout rules' warnings: said only for answers that are described (a search's
/// candidate that does not fit is dropped without them).
pub(super) fn check_warnings(
    arch: &Architecture,
    hw: &Hardware,
    cfg: &TrainingConfig,
    l: &ResolvedLayout,
    scores: Option<ScoreMatrix>,
    est: &mut Estimate,
) {
    let w = &mut est.warnings;
    if let Some(note) = attention_backend_note(arch, hw, cfg, l, scores) {
        w.push(note);
    }
    if let Some((ratio, c)) = hw
        .gemm_ceilings
        .as_ref()
        .filter(|_| cfg.precision() == Precision::Fp8Blockwise)
        .and_then(|c| Some((c.blockwise_over_tensorwise()?, c)))
        .filter(|(ratio, _)| *ratio < 1.0)
    {
        w.push(format!(
            "FP8 blockwise GEMMs are priced at {ratio:.2}× the FP8 rate fitted on per-tensor runs: on {gpu} a measured 8192³ blockwise GEMM runs {bw:.0} TFLOP/s against {tw:.0} per tensor ({src}); that ratio is taken for every GEMM shape, the grouped expert GEMMs included (no blockwise GEMM was timed by shape on this card)",
            gpu = hw.id,
            bw = c.fp8_blockwise,
            tw = c.fp8_tensorwise,
            src = c.source,
        ));
    }
    if let Some(note) = attention_backward_limit_note(arch, hw) {
        w.push(note);
    }
    let mtp = cfg.mtp_num_layers.unwrap_or(arch.mtp_num_layers);
    if arch.hybrid_layer_pattern.is_some() && mtp > 0 {
        w.push(format!(
            "the {mtp} MTP layer(s) of this hybrid model are priced as copies of its last layer; Megatron-Core builds each MTP depth from its own pattern (`/` in hybrid_layer_pattern), which the cost model does not read"
        ));
    }
    if let Some(note) = unpriced_offload_note(cfg) {
        w.push(note);
    }
    if let Some(note) = idle_offload_fraction_note(cfg) {
        w.push(note);
    }
    if let Some(note) = fp8_attention_backend_note(arch, hw, cfg) {
        w.push(note);
    }
    if cfg.has_recompute(&RecomputeModule::Mlp)
        && arch
            .moe
            .as_ref()
            .map(|m| m.first_k_dense_layers == 0)
            .unwrap_or(false)
    {
        w.push("mlp recompute has no effect on pure-MoE layers".into());
    }
    if l.vpp > 1 && !l.microbatches.is_multiple_of(l.pp) {
        w.push(format!(
            "interleaved 1F1B with {} microbatches, not a multiple of PP={}; Megatron may refuse this",
            l.microbatches, l.pp
        ));
    }
    if l.tp > hw.nvlink_domain_size {
        w.push(format!(
            "TP={} spans beyond one NVLink domain ({} GPUs); TP collectives go over the network",
            l.tp, hw.nvlink_domain_size
        ));
    }
    if cfg
        .cuda_graph_scopes()
        .contains(&CudaGraphScope::FullIteration)
        && arch.moe.is_some()
        && !cfg.moe_static_shapes()
    {
        w.push("full_iteration CUDA graphs need static MoE shapes: set moe_expert_rank_capacity_factor (HybridEP), or moe_expert_capacity_factor with moe_pad_expert_input_to_capacity".into());
    }
    if let Some(f) = cfg
        .moe_expert_rank_capacity_factor
        .filter(|_| arch.moe.is_some())
    {
        w.push(format!(
            "moe_expert_rank_capacity_factor {f} fixes each expert rank's token buffers at {f}x the balanced load (HybridEP drops tokens beyond it); the memory and time estimates count the balanced load"
        ));
    }
    if let Some(f) = cfg.moe_capacity_factor().filter(|_| arch.moe.is_some()) {
        w.push(format!(
            "moe_expert_capacity_factor {f}: experts drop tokens beyond {f}x their balanced share; the estimates count the balanced load (routing is taken as balanced)"
        ));
    }
    if let Some(warning) = intra_node_ep_overlap_warning(arch, hw, cfg, l) {
        w.push(warning);
    }
    if cfg.ep_overlap_chunks() > 1 && l.ep == 1 {
        w.push("moe_ep_overlap_chunks > 1 has no effect without expert parallelism".into());
    }
    if cfg.data_parallel_sharding_strategy.is_some() && !cfg.use_megatron_fsdp.unwrap_or(false) {
        w.push(
            "data_parallel_sharding_strategy is ignored unless use_megatron_fsdp is true".into(),
        );
    }
    if !cfg.moe_router_force_load_balancing.unwrap_or(true) && arch.moe.is_some() {
        w.push("routing is not force-balanced: the estimate prices balanced experts, and the router's own routing (far from balance early in training) makes the busiest expert-parallel rank set the pace and hold more tokens; the throughput band says what measured runs with it reached".into());
    }
    if cfg.frozen_base_weights() {
        w.push("PEFT: the base weights are frozen, so they hold no gradients or optimizer state and skip their weight-gradient GEMMs; the adapters' own weights, gradients and optimizer state (a small fraction at LoRA ranks 8-64) are not counted".into());
    }
}

/// The note of an answer with part of the optimizer stepped on the host: what the host step
/// was priced at, and what more CPU threads per rank could make of it.
pub(super) fn host_optimizer_warning(perf: &Performance) -> Option<String> {
    let h = perf.host_optimizer?;
    let source = "(`host_optimizer_params_per_s_per_rank`, cards/cost-model.yaml; it held on Megatron-Bridge's measured offload runs, docs/validation.md)";
    let threads = "torchrun starts several ranks per node with OMP_NUM_THREADS=1";
    Some(if h.rank_rate_bound_s >= h.node_bandwidth_bound_s {
        format!(
            "optimizer CPU offload: this rank's host Adam over {:.2}B parameters is priced at {:.2} s, the rate one rank's CPU optimizer reached in a measured run {source}; that rate depends on the CPU threads each rank gets ({threads}): with threads enough to reach the node's memory bandwidth, shared by its GPUs, it would take {:.2} s",
            h.offloaded_params / 1e9,
            h.rank_rate_bound_s,
            h.node_bandwidth_bound_s,
        )
    } else {
        format!(
            "optimizer CPU offload: this rank's host Adam over {:.2}B parameters is priced at {:.2} s, the node's memory bandwidth shared by its GPUs, which binds before the rate one rank's CPU optimizer reached in a measured run ({:.2} s) {source}",
            h.offloaded_params / 1e9,
            h.node_bandwidth_bound_s,
            h.rank_rate_bound_s,
        )
    })
}

/// An answer for packed sequences: the attention term prices each sample as one causal sequence,
/// while packed documents attend only within themselves (Transformer Engine's THD layout with
/// `cu_seqlens`), so that term bounds theirs from above; how much it falls depends on the
/// documents' lengths, which no configuration states.
pub(super) fn packed_sequences_warning(
    perf: &Performance,
    packing: bool,
    seq_length: u64,
) -> Option<String> {
    let attention = perf.breakdown_s.attention;
    if !packing || perf.step_time_s <= 0.0 || attention <= 0.0 {
        return None;
    }
    Some(format!(
        "sequence packing: the attention term ({attention:.2} s, {:.0}% of the step) prices each sample as one causal {seq_length}-token sequence; packed documents attend only within themselves (Transformer Engine's THD layout, `cu_seqlens`), so its softmax-attention part falls toward (mean document length ÷ {seq_length}) of that and the step is shorter than predicted, by up to that term; the FLOPs behind this TFLOP/s count full sequences, as Megatron-LM's formula does",
        attention / perf.step_time_s * 100.0,
    ))
}

/// Activation offloading whose copies outlast the work they overlap (fine-grained offloading's
/// reloads, or whole-layer offloading's copies of `offloaded_layers` layers): how much of the
/// step waits on them, at what rate, and that no measured run checks it.
pub(super) fn offload_copies_warning(
    perf: &Performance,
    offloaded_layers: u32,
    bytes_per_s: f64,
) -> Option<String> {
    let exposed = perf.breakdown_s.offload_copies;
    if exposed <= 0.0 || perf.step_time_s <= 0.0 {
        return None;
    }
    let share = format!(
        "{exposed:.2} s of the {:.2} s step ({:.0}%)",
        perf.step_time_s,
        exposed / perf.step_time_s * 100.0
    );
    let rate = bytes_per_s / 1e9;
    Some(if offloaded_layers > 0 {
        format!(
            "whole-layer activation offloading: {share} waits on the copies of the first {offloaded_layers} layers, at {rate:.1} GB/s one way per GPU (the slower of its host link and its share of the node's host memory; Transformer Engine 2.10 and later run a direction's copies one after another beside the other layers' work, and the step waits for what they outlast); no measured run checks this term (docs/validation.md). Offloading fewer layers (cpu_offloading_num_layers) trades memory back for time"
        )
    } else {
        format!(
            "fine-grained activation offloading: {share} waits on reloads from the host, at {rate:.1} GB/s each way per GPU (the slower of its host link and its share of the node's host memory, with offloads and reloads running at once; Megatron-Core brings a group back only when the backward leaves the next offloaded one, so modules offloaded side by side, such as core_attn and attn_proj, hide nothing of each other's reloads); none of the measured runs behind the error band offloads activations past what its backward hides, so the band does not cover this term. Megatron-LM's two offloading functional tests (small MLA MoE runs whose other per-step costs the model also misses) ran well past their predicted step (docs/validation.md). Offloading fewer groups (activation_offload_fraction) or modules trades memory back for time"
        )
    })
}

/// 1F1B all-to-all overlap (`overlap_moe_expert_parallel_comm`) where the expert all-to-all
/// stays inside one node and the launches are not captured by a full-iteration CUDA graph:
/// the transfers are too short for the CPU to issue the schedule's compute behind them, so
/// the schedule's CPU time (`ep_overlap_host_factor`) shows in the step.
fn intra_node_ep_overlap(
    arch: &Architecture,
    hw: &Hardware,
    cfg: &TrainingConfig,
    ep: u32,
    etp: u32,
) -> bool {
    arch.moe.is_some()
        && cfg.overlap_moe_expert_parallel_comm.unwrap_or(false)
        && ep > 1
        && ep.saturating_mul(etp) <= hw.gpus_per_node
        && !cfg
            .cuda_graph_scopes()
            .contains(&CudaGraphScope::FullIteration)
}

/// What the answer says about such a run: where its time goes and what to compare with.
fn intra_node_ep_overlap_warning(
    arch: &Architecture,
    hw: &Hardware,
    cfg: &TrainingConfig,
    l: &ResolvedLayout,
) -> Option<String> {
    intra_node_ep_overlap(arch, hw, cfg, l.ep, l.etp).then(|| {
        format!(
            "overlap_moe_expert_parallel_comm with the expert all-to-all inside one node \
             (EP x ETP = {} of {} GPUs per node) and no full_iteration CUDA graph: the \
             overlap schedule's CPU time is exposed (host_overhead), because the transfers are \
             too short for the CPU to issue the compute behind them; Megatron-Bridge turned the \
             overlap off in such recipes for that CPU overhead (issue #1705, PR #1760: \
             Qwen3-235B on B200), so compare with overlap_moe_expert_parallel_comm: false",
            l.ep.saturating_mul(l.etp),
            hw.gpus_per_node
        )
    })
}

/// What an older cuDNN does to softmax-attention layers whose head dim its fused backward
/// refuses on this GPU (the card's `attention_backward_limit`): they are priced with the
/// release that runs them, and the note gives the fallback's measured speed against the
/// card's cuDNN curves at the same shape, where the card has both.
fn attention_backward_limit_note(arch: &Architecture, hw: &Hardware) -> Option<String> {
    let limit = hw.attention_backward_limit.as_ref()?;
    let (head_dim, _) = arch.attention_head_dims();
    let softmax_layers = (0..arch.num_layers)
        .filter(|&layer| arch.attention_kind(layer) != AttentionKind::Linear)
        .count();
    if head_dim <= u64::from(limit.max_head_dim) || softmax_layers == 0 {
        return None;
    }
    let mut note = format!(
        "head dim {head_dim} attention ({softmax_layers} softmax-attention layers) is priced with cuDNN {from} or later on {gpu}, the first release that runs its fused backward there ({source}); with an older cuDNN, Transformer Engine runs these layers on another backend (FlashAttention 2 where installed; without context parallelism possibly PyTorch's unfused attention), which this prediction does not price",
        from = limit.cudnn_from,
        gpu = hw.id,
        source = limit.source,
    );
    if let Some(f) = &limit.fallback {
        note.push_str(&format!(
            ": {backend} measured {fallback:.0} TFLOP/s forward+backward at head dim {hd:.0}, {len:.0} tokens{mask} ({src})",
            backend = f.backend,
            fallback = f.tflops_fwd_bwd,
            hd = f.head_dim,
            len = f.seq_len,
            mask = if f.causal { ", causal" } else { "" },
            src = f.source,
        ));
        let cudnn = hw.attention_kernels.as_ref().and_then(|table| {
            let fwd = table.tflops(f.head_dim, f.causal, KernelPass::Fwd, f.seq_len)?;
            let bwd = table.tflops(f.head_dim, f.causal, KernelPass::Bwd, f.seq_len)?;
            let per_forward = backward_flops_per_forward(f.head_dim, f.head_dim);
            (fwd > 0.0 && bwd > 0.0).then(|| (1.0 + per_forward) / (1.0 / fwd + per_forward / bwd))
        });
        if let Some(cudnn) = cudnn.filter(|c| *c > f.tflops_fwd_bwd && f.tflops_fwd_bwd > 0.0) {
            note.push_str(&format!(
                ", against {cudnn:.0} for cuDNN at that shape on this card ({ratio:.1}x slower at head dim {hd:.0})",
                hd = f.head_dim,
                ratio = cudnn / f.tflops_fwd_bwd,
            ));
        }
    }
    Some(note)
}

/// An `activation_offload_fraction` with nothing to take a share of.
fn idle_offload_fraction_note(cfg: &TrainingConfig) -> Option<String> {
    let modules = cfg.offload_modules.as_deref().unwrap_or(&[]);
    let f = cfg
        .activation_offload_fraction
        .filter(|_| modules.is_empty())?;
    Some(format!(
        "activation_offload_fraction {f} has no effect: no offload_modules are given, so nothing is offloaded"
    ))
}

/// The `offload_modules` entries the memory model does not take off the GPU, named so an answer
/// for such a run says its memory is high by what they hold.
fn unpriced_offload_note(cfg: &TrainingConfig) -> Option<String> {
    let unpriced: Vec<&str> = cfg
        .offload_modules
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .map(String::as_str)
        .filter(|m| !PRICED_OFFLOAD_MODULES.contains(m))
        .collect();
    (!unpriced.is_empty()).then(|| {
        format!(
            "offload_modules {} are not priced: the memory estimate keeps what they offload on the GPU, so it is high by that much; the priced modules are {}",
            unpriced.join(", "),
            PRICED_OFFLOAD_MODULES.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::estimate::HostOptimizerStep;

    fn with_host(rank_rate_bound_s: f64, node_bandwidth_bound_s: f64) -> Performance {
        Performance {
            host_optimizer: Some(HostOptimizerStep {
                offloaded_params: 2e9,
                rank_rate_bound_s,
                node_bandwidth_bound_s,
                copy_s: 0.2,
            }),
            ..Performance::default()
        }
    }

    #[test]
    fn the_offload_copies_note_gives_the_stall_its_share_and_the_rate() {
        assert_eq!(
            offload_copies_warning(&Performance::default(), 0, 26.9e9),
            None
        );
        let mut perf = Performance {
            step_time_s: 0.96,
            ..Performance::default()
        };
        perf.breakdown_s.offload_copies = 0.67;
        let note = offload_copies_warning(&perf, 0, 26.88e9).unwrap_or_default();
        assert!(
            note.contains("0.67 s of the 0.96 s step (70%)") && note.contains("26.9 GB/s"),
            "{note}"
        );
        assert!(note.contains("the band does not cover this term"), "{note}");
        // Whole-layer offloading's copies are its own term, one direction at a time.
        let layers = offload_copies_warning(&perf, 60, 44.8e9).unwrap_or_default();
        assert!(
            layers.starts_with("whole-layer activation offloading: 0.67 s of the 0.96 s step")
                && layers.contains("first 60 layers, at 44.8 GB/s one way"),
            "{layers}"
        );
        assert!(!layers.contains("fine-grained"), "{layers}");
    }

    #[test]
    fn the_offload_note_names_the_bound_that_binds_and_the_other() {
        assert_eq!(host_optimizer_warning(&Performance::default()), None);
        let rank_binds = host_optimizer_warning(&with_host(3.1, 1.3)).unwrap_or_default();
        assert!(
            rank_binds.contains("over 2.00B parameters is priced at 3.10 s")
                && rank_binds.contains("it would take 1.30 s"),
            "{rank_binds}"
        );
        let node_binds = host_optimizer_warning(&with_host(0.5, 1.3)).unwrap_or_default();
        assert!(
            node_binds.contains("priced at 1.30 s, the node's memory bandwidth")
                && node_binds.contains("(0.50 s)"),
            "{node_binds}"
        );
    }
}
