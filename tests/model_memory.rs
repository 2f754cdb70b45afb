//! Memory terms against hand-computed values.

mod model_support;

use model_support::{arch, cfg, constants, hw};
use moe_skills::model::evaluate;
use moe_skills::model::params::total_params;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

#[test]
fn published_parameter_counts() {
    // DeepSeek-V3: 671B + 14B MTP = 685B; Qwen3-235B-A22B: 235B; Qwen3-30B-A3B: 30.5B;
    // Llama-3-70B / -8B: 70.6B / 8.03B; GPT-OSS-120B / -20B: 116.8B / 20.9B (OpenAI's model card,
    // arXiv 2508.10925).
    let within =
        |got: f64, want: f64, rel: f64| assert!((got / want - 1.0).abs() < rel, "{got} vs {want}");
    within(total_params(&arch("deepseek-v3"), 1) / 1e9, 685.0, 0.01);
    within(total_params(&arch("deepseek-v3"), 0) / 1e9, 671.0, 0.01);
    within(total_params(&arch("qwen3-235b-a22b"), 0) / 1e9, 235.1, 0.01);
    within(total_params(&arch("qwen3-30b-a3b"), 0) / 1e9, 30.5, 0.01);
    within(total_params(&arch("llama3-70b"), 0) / 1e9, 70.6, 0.01);
    within(total_params(&arch("llama3-8b"), 0) / 1e9, 8.03, 0.005);
    within(total_params(&arch("gpt-oss-120b"), 0) / 1e9, 116.8, 0.005);
    within(total_params(&arch("gpt-oss-20b"), 0) / 1e9, 20.9, 0.005);
}

#[test]
fn fused_logits_on_the_last_stage_match_hand_count() {
    // Seed baseline shape: 131072 tokens, CP2, TP2 -> 65536 local tokens × 124160 vocab
    // columns; fused CE keeps the bf16 logits = 2 bytes each.
    let e = evaluate(
        &arch("qwen3.5-35b-a3b"),
        &hw("h100"),
        &constants(),
        &cfg(
            "{num_gpus: 32, seq_length: 131072, global_batch_size: 32, tp: 2, pp: 4, ep: 8, cp: 2,
              recompute_granularity: full, cross_entropy_loss_fusion: true, mtp_num_layers: 0}",
        ),
    );
    let expected = 65536.0 * 124160.0 * 2.0 / GIB;
    let last = e.memory.per_rank_peak_gib.len() - 1;
    assert_eq!(e.memory.worst_rank.pipeline_rank as usize, last);
    assert!((e.memory.breakdown_gib.logits_loss - expected).abs() < 1e-6);
}

#[test]
fn distributed_optimizer_bytes_per_parameter() {
    // Dense Llama-3-70B on 8 GPUs, TP8 PP1: 6 + 12/DP bytes per parameter with DP = 1 -> 18.
    let e = evaluate(
        &arch("llama3-70b"),
        &hw("h200"),
        &constants(),
        &cfg("{num_gpus: 16, seq_length: 4096, global_batch_size: 16, tp: 8}"),
    );
    let params = e.memory.worst_rank.params_billion * 1e9;
    let b = &e.memory.breakdown_gib;
    assert!((b.weights * GIB / params - 2.0).abs() < 1e-9);
    assert!((b.gradients * GIB / params - 4.0).abs() < 1e-9);
    // DP = 2: optimizer 12/2 = 6 bytes per parameter.
    assert!((b.optimizer * GIB / params - 6.0).abs() < 1e-9);
    // Precision-aware optimizer with BF16 moments: 8/2 = 4; with Megatron-Core's fp32
    // defaults for unset buffers: 12/2 = 6.
    let pa = evaluate(&arch("llama3-70b"), &hw("h200"), &constants(),
        &cfg("{num_gpus: 16, seq_length: 4096, global_batch_size: 16, tp: 8, use_precision_aware_optimizer: true, exp_avg_dtype: bf16, exp_avg_sq_dtype: bf16}"));
    assert!((pa.memory.breakdown_gib.optimizer * GIB / params - 4.0).abs() < 1e-9);
    let pa_default = evaluate(&arch("llama3-70b"), &hw("h200"), &constants(),
        &cfg("{num_gpus: 16, seq_length: 4096, global_batch_size: 16, tp: 8, use_precision_aware_optimizer: true}"));
    assert!((pa_default.memory.breakdown_gib.optimizer * GIB / params - 6.0).abs() < 1e-9);
    // Full CPU offload keeps the fp32 master shard on the GPU (4/2 = 2 bytes per parameter).
    let off = evaluate(&arch("llama3-70b"), &hw("h200"), &constants(),
        &cfg("{num_gpus: 16, seq_length: 4096, global_batch_size: 16, tp: 8, optimizer_cpu_offload: true}"));
    assert!((off.memory.breakdown_gib.optimizer * GIB / params - 2.0).abs() < 1e-9);
}

#[test]
fn muon_hands_the_embedding_and_output_layer_to_adam() {
    // Megatron-LM routes the embedding and output layer to `muon_scalar_optimizer` (Adam):
    // 12 bytes each where Muon keeps 8 (fp32 master + one fp32 momentum). Llama-3-8B, TP1 PP1
    // on 8 GPUs, plain Muon without the distributed optimizer (every rank keeps the whole
    // state): 8 bytes per parameter plus 4 more per embedding and output element
    // (2 × 128256 × 4096, untied).
    let run = |optimizer: &str| {
        evaluate(
            &arch("llama3-8b"),
            &hw("h100"),
            &constants(),
            &cfg(&format!(
                "{{num_gpus: 8, seq_length: 4096, global_batch_size: 8, optimizer: {optimizer},
                  use_distributed_optimizer: false}}"
            )),
        )
    };
    let muon = run("muon");
    let params = muon.memory.worst_rank.params_billion * 1e9;
    let vocab_params = 2.0 * 128256.0 * 4096.0;
    let want = (8.0 * params + 4.0 * vocab_params) / GIB;
    assert!((muon.memory.breakdown_gib.optimizer - want).abs() < 1e-9);
    // Adam steps them itself: 12 bytes for every parameter.
    let adam = run("adam");
    assert!((adam.memory.breakdown_gib.optimizer - 12.0 * params / GIB).abs() < 1e-9);
    // The layer-wise distributed Muon shards both over the 8 data-parallel ranks.
    let dist = run("dist_muon");
    assert!((dist.memory.breakdown_gib.optimizer - want / 8.0).abs() < 1e-9);
}

#[test]
fn distributed_optimizer_copies_shard_over_their_share_of_the_ranks() {
    // Llama-3-70B, TP8 on 64 GPUs: DP 8, 12/8 = 1.5 bytes of Adam state per parameter. Two
    // copies shard over 4 ranks each: 3 bytes; weights and gradients do not change.
    let run = |extra: &str| {
        evaluate(
            &arch("llama3-70b"),
            &hw("h200"),
            &constants(),
            &cfg(&format!(
                "{{num_gpus: 64, seq_length: 4096, global_batch_size: 64, tp: 8{extra}}}"
            )),
        )
    };
    let one = run("");
    let params = one.memory.worst_rank.params_billion * 1e9;
    assert!((one.memory.breakdown_gib.optimizer * GIB / params - 1.5).abs() < 1e-9);
    let two = run(", num_distributed_optimizer_instances: 2");
    let b = &two.memory.breakdown_gib;
    assert!((b.optimizer * GIB / params - 3.0).abs() < 1e-9);
    assert_eq!(b.weights, one.memory.breakdown_gib.weights);
    assert_eq!(b.gradients, one.memory.breakdown_gib.gradients);
    assert!(two.violations.is_empty(), "{:?}", two.violations);
    // Hybrid FSDP (Megatron FSDP with two copies): weights, gradients and optimizer state
    // shard over the 4 ranks of a copy; `optim` across the copies shards the optimizer state
    // over all 8 again.
    let fsdp = run(", use_megatron_fsdp: true");
    let hsdp = run(", use_megatron_fsdp: true, num_distributed_optimizer_instances: 2");
    let (f, h) = (&fsdp.memory.breakdown_gib, &hsdp.memory.breakdown_gib);
    assert!((h.weights / f.weights - 2.0).abs() < 1e-9);
    assert!((h.gradients / f.gradients - 2.0).abs() < 1e-9);
    assert!((h.optimizer / f.optimizer - 2.0).abs() < 1e-9);
    let outer = run(
        ", use_megatron_fsdp: true, num_distributed_optimizer_instances: 2,
        outer_dp_sharding_strategy: optim",
    );
    let o = &outer.memory.breakdown_gib;
    assert!((o.optimizer - f.optimizer).abs() < 1e-12);
    assert!((o.weights / f.weights - 2.0).abs() < 1e-9);
    // Three copies do not divide DP 8: Megatron-Core asserts it.
    let three = run(", num_distributed_optimizer_instances: 3");
    assert!(
        three
            .violations
            .iter()
            .any(|v| v.code == "optimizer_instances_not_divisible"),
        "{:?}",
        three.violations
    );
}

#[test]
fn optimizer_offload_sweep_frees_only_the_moments() {
    // Megatron's HybridDeviceOptimizer behind the DistributedOptimizer: the fp32 main-param
    // shard stays on the GPU, the offloaded fraction's Adam moments leave. Llama-3-70B TP8 on
    // 16 GPUs (DP 2): 12/2 = 6 bytes per parameter on the GPU without offload; at fraction f,
    // (4 + (1 − f)·8)/2 — a full offload frees 4 of the 6 bytes (2/3).
    let params_and_opt = |extra: &str| {
        let e = evaluate(
            &arch("llama3-70b"),
            &hw("h200"),
            &constants(),
            &cfg(&format!(
                "{{num_gpus: 16, seq_length: 4096, global_batch_size: 16, tp: 8{extra}}}"
            )),
        );
        (
            e.memory.worst_rank.params_billion * 1e9,
            e.memory.breakdown_gib.optimizer * GIB,
            e.memory.peak_gib,
        )
    };
    let (params, none, peak_none) = params_and_opt("");
    assert!((none / params - 6.0).abs() < 1e-9);
    for (f, want) in [(0.0, 6.0), (0.25, 5.0), (0.5, 4.0), (0.75, 3.0), (1.0, 2.0)] {
        let (_, opt, peak) = params_and_opt(&format!(
            ", optimizer_cpu_offload: true, optimizer_offload_fraction: {f}"
        ));
        assert!(
            (opt / params - want).abs() < 1e-9,
            "fraction {f}: {}",
            opt / params
        );
        // Freed bytes are 2/3 of the optimizer state per offloaded fraction.
        let freed = (none - opt) / params;
        assert!((freed - 2.0 / 3.0 * 6.0 * f).abs() < 1e-9);
        assert!(peak <= peak_none + 1e-9);
    }
    // Precision-aware optimizer: the offloaded part leaves whole (fp32 master cloned on the
    // CPU), the GPU part keeps an fp32 master and fp32 moments: (1 − f)·12/2.
    for (f, want) in [(0.5, 3.0), (1.0, 0.0)] {
        let (_, opt, _) = params_and_opt(&format!(
            ", use_precision_aware_optimizer: true, optimizer_cpu_offload: true, optimizer_offload_fraction: {f}"
        ));
        assert!((opt / params - want).abs() < 1e-9, "aware, fraction {f}");
    }
}

#[test]
fn interleaved_inflight_microbatches_on_first_stage() {
    // PP8 VPP4: 2·(PP−1) + (VPP−1)·PP + 1 = 14 + 24 + 1 = 39 chunk activations on rank 0.
    let e = evaluate(
        &arch("deepseek-v3"),
        &hw("h100"),
        &constants(),
        &cfg(
            "{num_gpus: 256, seq_length: 4096, global_batch_size: 1024, ep: 32, pp: 8, vpp: 4,
              precision: fp8-blockwise, pipeline_model_parallel_layout: 'Et|(tt|)*30mL'}",
        ),
    );
    assert!(
        e.violations.iter().all(|v| v.code == "out_of_memory"),
        "{:?}",
        e.violations
    );
    if e.memory.worst_rank.pipeline_rank == 0 {
        assert_eq!(e.memory.worst_rank.inflight_microbatch_chunks, 39.0);
    }
    assert_eq!(e.layout.layers_per_virtual_stage[0], 1);
    assert_eq!(e.layout.layers_per_virtual_stage[31], 0);
    // Without VPP: rank 0 holds PP microbatches.
    let f = evaluate(
        &arch("deepseek-v3"),
        &hw("h100"),
        &constants(),
        &cfg("{num_gpus: 256, seq_length: 4096, global_batch_size: 1024, ep: 32, pp: 8, precision: fp8-blockwise,
              recompute_granularity: full, linear_cross_entropy: true, mtp_num_layers: 0}"),
    );
    assert_eq!(f.memory.per_rank_peak_gib.len(), 8);
    // 1F1B: rank r holds PP − r microbatches.
    let rank = f.memory.worst_rank.pipeline_rank;
    assert_eq!(
        f.memory.worst_rank.inflight_microbatch_chunks,
        (8 - rank) as f64
    );
}

#[test]
fn chunked_ep_halves_the_moe_transient() {
    let base = "{num_gpus: 32, seq_length: 131072, global_batch_size: 32, ep: 8, cp: 4,
                recompute_granularity: full, linear_cross_entropy: true, mtp_num_layers: 0";
    let k = constants();
    let one = evaluate(
        &arch("qwen3.5-35b-a3b"),
        &hw("h100"),
        &k,
        &cfg(&format!("{base}}}")),
    );
    let two = evaluate(
        &arch("qwen3.5-35b-a3b"),
        &hw("h100"),
        &k,
        &cfg(&format!("{base}, moe_ep_overlap_chunks: 2}}")),
    );
    // The DeepEP buffers are their own term (outside the allocator), sized by the EP group
    // and not by the tokens, so chunking leaves them alone.
    assert!(one.memory.breakdown_gib.dispatcher_buffers > 0.0);
    assert_eq!(
        one.memory.breakdown_gib.dispatcher_buffers,
        two.memory.breakdown_gib.dispatcher_buffers
    );
    let t1 = one.memory.breakdown_gib.moe_dispatch;
    let t2 = two.memory.breakdown_gib.moe_dispatch;
    assert!((t1 / t2 - 2.0).abs() < 1e-9);
    // 32768 local tokens × top-8 × hidden 2048 routed elements.
    let routed = 32768.0 * 8.0 * 2048.0;
    assert!((t1 * GIB / routed - k.moe_transient_bytes_per_routed_element).abs() < 1e-9);
}

#[test]
fn allocated_view_excludes_exactly_the_terms_outside_the_allocator() {
    // Qwen3-30B-A3B on 16 H100 with the DeepEP default: every rank's reserved peak exceeds its
    // allocated peak by fragmentation + dispatcher buffers + fixed reserve, nothing else.
    let k = constants();
    let e = evaluate(
        &arch("qwen3-30b-a3b"),
        &hw("h100"),
        &k,
        &cfg("{num_gpus: 16, seq_length: 4096, global_batch_size: 64, ep: 8, pp: 2}"),
    );
    let m = &e.memory;
    let b = &m.breakdown_gib;
    assert_eq!(m.per_rank_allocated_gib.len(), m.per_rank_peak_gib.len());
    for (a, p) in m.per_rank_allocated_gib.iter().zip(&m.per_rank_peak_gib) {
        assert!(a < p, "allocated {a} vs peak {p}");
    }
    assert!(m.allocated_gib < m.peak_gib);
    let outside = b.fragmentation + b.dispatcher_buffers + b.fixed_reserve;
    assert!((m.peak_gib - m.allocated_gib - outside).abs() < 1e-9);
    let rank = m.worst_rank.pipeline_rank as usize;
    assert!((m.per_rank_peak_gib[rank] - m.peak_gib).abs() < 1e-9);
    assert!((m.per_rank_allocated_gib[rank] - m.allocated_gib).abs() < 1e-9);
    // The card terms, by hand: DeepEP's EP8 buffer for hidden 2048 with its default 20 SMs,
    // 10 channels × 8 ranks × (5 ints + 256 tokens × (4096 + 8 + 2048)) bytes plus its 32 MiB
    // workspace (deep_ep/buffer.py, csrc/config.hpp), and the fixed reserve as the card states
    // it; fragmentation is the card's fraction of what the allocator serves per step.
    let deepep = (10.0 * 8.0 * (20.0 + 256.0 * 6152.0) + 33_554_432.0) / (1u64 << 30) as f64;
    assert!((b.dispatcher_buffers - deepep).abs() < 1e-12);
    assert!((b.fixed_reserve - k.fixed_reserve_gib).abs() < 1e-12);
    let dynamic = b.activations + b.backward_working_set + b.logits_loss + b.moe_dispatch;
    assert!((b.fragmentation - k.fragmentation_fraction * dynamic).abs() < 1e-9);
    // The allocated view is the sum of the allocator's terms.
    let allocated = b.weights
        + b.gradients
        + b.optimizer
        + b.fsdp_buffers
        + b.fp8_weight_copies
        + b.activations
        + b.backward_working_set
        + b.logits_loss
        + b.moe_dispatch
        + b.cuda_graph_pool;
    assert!((m.allocated_gib - allocated).abs() < 1e-9);
}

#[test]
fn dispatcher_buffers_move_the_reserved_view_only() {
    // A bigger DeepEP buffer (twice the receive tokens in the card's EP8 row) raises the
    // reserved peak by exactly the difference (it is cudaMalloc'd, so no fragmentation on it)
    // and leaves the allocated view alone.
    let model = arch("qwen3-30b-a3b");
    let config = cfg("{num_gpus: 16, seq_length: 4096, global_batch_size: 64, ep: 8}");
    let k = constants();
    let mut bigger = k.clone();
    for row in &mut bigger.dispatcher_buffers.deepep.configs {
        row.nvl_recv_tokens *= 2.0;
    }
    let a = evaluate(&model, &hw("h100"), &k, &config);
    let b = evaluate(&model, &hw("h100"), &bigger, &config);
    let grown =
        b.memory.breakdown_gib.dispatcher_buffers - a.memory.breakdown_gib.dispatcher_buffers;
    assert!(grown > 0.1);
    assert!((b.memory.peak_gib - a.memory.peak_gib - grown).abs() < 1e-9);
    assert!((b.memory.allocated_gib - a.memory.allocated_gib).abs() < 1e-9);
    // Without DeepEP (alltoall dispatcher) there is no dispatcher buffer at all.
    let plain = evaluate(
        &model,
        &hw("h100"),
        &k,
        &cfg(
            "{num_gpus: 16, seq_length: 4096, global_batch_size: 64, ep: 8,
               moe_token_dispatcher_type: alltoall}",
        ),
    );
    assert_eq!(plain.memory.breakdown_gib.dispatcher_buffers, 0.0);
}

#[test]
fn dense_model_reserved_minus_allocated_by_hand() {
    // Llama-3-70B, TP8, 4K, no MoE: reserved − allocated = 3 GiB fixed reserve
    // + 5% of (activations + backward working set + logits) — the card's values.
    let e = evaluate(
        &arch("llama3-70b"),
        &hw("h200"),
        &constants(),
        &cfg("{num_gpus: 16, seq_length: 4096, global_batch_size: 16, tp: 8}"),
    );
    let b = &e.memory.breakdown_gib;
    assert_eq!(b.dispatcher_buffers, 0.0);
    let want = 3.0 + 0.05 * (b.activations + b.backward_working_set + b.logits_loss);
    assert!((e.memory.peak_gib - e.memory.allocated_gib - want).abs() < 1e-9);
}

#[test]
fn ep_overlap_keeps_one_more_layer_before_its_experts() {
    // Qwen3-30B-A3B, BF16, TP1 PP1 EP8, 4096 local tokens. 1F1B A2A overlap pairs the forward
    // of layer i with the backward of layer L−1−i: one chunk of layers plus one layer's
    // tensors up to its dispatch stay alive. Per token: layer input 2·2048, both norm outputs
    // 2·2·2048, attention 4096 + 10240 + 8192 + 128 (residual, q/k/v, output, LSE), router
    // (4 + 1)·128 + dispatched tokens 2·8·2048 + routed probabilities 4·8.
    let config = |overlap: bool| {
        cfg(&format!(
            "{{num_gpus: 8, seq_length: 4096, global_batch_size: 8, ep: 8,
               moe_token_dispatcher_type: alltoall, overlap_moe_expert_parallel_comm: {overlap}}}"
        ))
    };
    let run = |overlap: bool| {
        evaluate(
            &arch("qwen3-30b-a3b"),
            &hw("h100"),
            &constants(),
            &config(overlap),
        )
    };
    let (plain, overlap) = (run(false), run(true));
    let per_token =
        4096.0 + 8192.0 + (4096.0 + 10240.0 + 8192.0 + 128.0) + (640.0 + 32768.0 + 32.0);
    let expected = per_token * 4096.0 / GIB;
    let delta = overlap.memory.breakdown_gib.activations - plain.memory.breakdown_gib.activations;
    assert!((delta - expected).abs() < 1e-9, "{delta} vs {expected}");
    // Nothing else that PyTorch allocates moves.
    let allocated = overlap.memory.allocated_gib - plain.memory.allocated_gib;
    assert!(
        (allocated - expected).abs() < 1e-9,
        "{allocated} vs {expected}"
    );
}

#[test]
fn gated_delta_net_backward_states_count_beyond_the_moe_working_set() {
    // Qwen3.5-35B-A3B, TP1, 4096 local tokens. The GDN kernel backward holds 57344 bytes per
    // token (chunk states h, dh and the recomputed w, u, v_new); it runs after the layer's MoE
    // backward, so only what exceeds the MoE transient (12 bytes × top-8 × 2048 per token,
    // divided by the chunked-EP chunks) adds to the working set.
    let run = |chunks: u32| {
        evaluate(
            &arch("qwen3.5-35b-a3b"),
            &hw("h100"),
            &constants(),
            &cfg(&format!(
                "{{num_gpus: 8, seq_length: 4096, global_batch_size: 8, ep: 8, mtp_num_layers: 0,
                   moe_ep_overlap_chunks: {chunks}}}"
            )),
        )
    };
    let tokens = 4096.0;
    let (one, eight) = (run(1), run(8));
    let moe_eight = 12.0 * 8.0 * 2048.0 / 8.0 * tokens / GIB;
    assert!((eight.memory.breakdown_gib.moe_dispatch - moe_eight).abs() < 1e-9);
    let extra = (57344.0 - 12.0 * 8.0 * 2048.0 / 8.0) * tokens / GIB;
    let delta = eight.memory.breakdown_gib.backward_working_set
        - one.memory.breakdown_gib.backward_working_set;
    assert!((delta - extra).abs() < 1e-9, "{delta} vs {extra}");
}

#[test]
fn mtp_layers_keep_their_own_logits_on_the_loss_stage() {
    // Qwen3.5-35B-A3B, TP1 PP1, 4096 tokens, vocabulary 248320, fused cross entropy (2 bytes
    // per logit). `process_mtp_loss` builds one more set of logits per MTP layer through the
    // output layer, also when linear cross entropy drops the main head's.
    let run = |extra: &str| {
        evaluate(
            &arch("qwen3.5-35b-a3b"),
            &hw("h100"),
            &constants(),
            &cfg(&format!(
                "{{num_gpus: 8, seq_length: 4096, global_batch_size: 8, ep: 8, {extra}}}"
            )),
        )
    };
    let one_head = 4096.0 * 248320.0 * 2.0 / GIB;
    let logits = |e: &moe_skills::model::Estimate| e.memory.breakdown_gib.logits_loss;
    assert!((logits(&run("mtp_num_layers: 0")) - one_head).abs() < 1e-9);
    assert!((logits(&run("mtp_num_layers: 1")) - 2.0 * one_head).abs() < 1e-9);
    let linear = run("mtp_num_layers: 1, linear_cross_entropy: true");
    assert!((logits(&linear) - one_head).abs() < 1e-9);
    let linear_no_mtp = run("mtp_num_layers: 0, linear_cross_entropy: true");
    assert_eq!(logits(&linear_no_mtp), 0.0);
}

#[test]
fn hybridep_buffers_grow_with_the_tokens_deepep_buffers_do_not() {
    // HybridEP sizes its buffer for every token of the EP group landing on one rank, so twice
    // the microbatch doubles it; DeepEP's buffer is a fixed ring of chunks whatever the
    // tokens. Both stay outside the allocated view.
    let model = arch("deepseek-v3");
    let k = constants();
    let run = |backend: &str, mbs: u32| {
        let yaml = format!(
            "{{num_gpus: 256, seq_length: 4096, micro_batch_size: {mbs}, global_batch_size: 2048,
              pp: 4, ep: 64, recompute_granularity: full, moe_token_dispatcher_type: flex,
              moe_flex_dispatcher_backend: {backend}}}"
        );
        evaluate(&model, &hw("gb200"), &k, &cfg(&yaml)).memory
    };
    let (h1, h2) = (run("hybridep", 1), run("hybridep", 2));
    let (d1, d2) = (run("deepep", 1), run("deepep", 2));
    let buffers = |m: &moe_skills::model::MemoryReport| m.breakdown_gib.dispatcher_buffers;
    assert!((buffers(&h2) / buffers(&h1) - 2.0).abs() < 1e-9);
    assert_eq!(buffers(&d1), buffers(&d2));
    // One GB200 NVL72 domain holds the EP64 group: HybridEP's 4096 tokens × 64 ranks ×
    // (14336 + 256·4 + 56·4) bytes, by hand.
    let by_hand = 4096.0 * 64.0 * (14336.0 + 1024.0 + 224.0) / GIB;
    assert!((buffers(&h1) - by_hand).abs() < 1e-9, "{}", buffers(&h1));
    for m in [&h1, &h2, &d1, &d2] {
        let outside = m.breakdown_gib.fragmentation + buffers(m) + m.breakdown_gib.fixed_reserve;
        assert!((m.peak_gib - m.allocated_gib - outside).abs() < 1e-9);
    }
}

/// The fix an estimate's out-of-memory violation suggests (empty when it fits).
fn out_of_memory_fix(estimate: &moe_skills::model::Estimate) -> String {
    estimate
        .violations
        .iter()
        .find(|v| v.code == "out_of_memory")
        .map(|v| v.fix.clone())
        .unwrap_or_default()
}

#[test]
fn out_of_memory_fix_names_only_what_the_model_has() {
    // The suggested recompute modules and sharding follow the architecture: no MLA module for
    // a model without MLA, no expert parallelism for a dense model.
    let k = constants();
    let fix = |model: &str, yaml: &str| {
        out_of_memory_fix(&evaluate(&arch(model), &hw("h100"), &k, &cfg(yaml)))
    };
    let qwen = fix(
        "qwen3-30b-a3b",
        "{num_gpus: 32, seq_length: 8192, micro_batch_size: 2, global_batch_size: 256, ep: 16}",
    );
    assert!(qwen.contains("[layernorm, moe_act, moe]"), "{qwen}");
    let dsv3 = fix(
        "deepseek-v3",
        "{num_gpus: 256, seq_length: 8192, global_batch_size: 256, ep: 32, pp: 8}",
    );
    assert!(dsv3.contains("mla_up_proj"), "{dsv3}");
    let llama = fix(
        "llama3-70b",
        "{num_gpus: 8, seq_length: 8192, global_batch_size: 8, tp: 8}",
    );
    assert!(
        !llama.is_empty() && !llama.contains("EP") && !llama.contains("expert"),
        "{llama}"
    );
}

#[test]
fn an_unsharded_optimizer_is_the_first_fix_for_static_memory() {
    // Qwen3-30B-A3B on 32 H100 at 4K, EP8, no recompute: with the distributed optimizer the
    // state fits; without it (Megatron-LM's default) every rank holds 12 bytes per local
    // parameter, and the fix says to shard it first.
    let k = constants();
    let run = |sharded: bool| {
        let yaml = format!(
            "{{num_gpus: 32, seq_length: 4096, global_batch_size: 256, ep: 8, \
              use_distributed_optimizer: {sharded}}}"
        );
        evaluate(&arch("qwen3-30b-a3b"), &hw("h100"), &k, &cfg(&yaml))
    };
    let (sharded, unsharded) = (run(true), run(false));
    assert!(sharded.fits);
    let ratio = unsharded.memory.breakdown_gib.optimizer / sharded.memory.breakdown_gib.optimizer;
    assert!(ratio > 4.0, "{ratio}");
    let fix = out_of_memory_fix(&unsharded);
    assert!(
        fix.starts_with("set use_distributed_optimizer: true") && fix.contains("DP32"),
        "{fix}"
    );
}

#[test]
fn every_expert_tensor_parallel_shard_keeps_the_tokens_routed_to_its_experts() {
    // Qwen3-30B-A3B on 8 H100, TP2 with sequence parallelism: EP8 ETP1 against EP4 ETP2.
    // With ETP2 each GPU receives k·2 copies of every local token (both shards of an expert
    // take its tokens), so the dispatched tokens it keeps for backward (BF16, 2048 wide, and
    // their FP32 routing probabilities) and the dispatcher's transient buffer double; the
    // expert FFN activations (k·ETP copies of 1/ETP of the width) and the router's own
    // probabilities and map (one row per local token) do not change.
    let run = |ep: u32, etp: u32| {
        let yaml = format!(
            "{{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 64,
              tp: 2, sequence_parallel: true, pp: 1, cp: 1, ep: {ep},
              expert_tensor_parallel_size: {etp}, precision: bf16}}"
        );
        evaluate(
            &arch("qwen3-30b-a3b"),
            &hw("h100"),
            &constants(),
            &cfg(&yaml),
        )
        .memory
    };
    let (etp1, etp2) = (run(8, 1), run(4, 2));
    let layers = 48.0;
    // Per layer and local token (2048 of 4096 under SP): 8 copies x (2048 x 2 bytes + 4).
    let dispatched_gib = layers * 2048.0 * 8.0 * (2048.0 * 2.0 + 4.0) / (1u64 << 30) as f64;
    let by_module = |m: &moe_skills::model::MemoryReport| m.activations_by_module_gib.moe_dispatch;
    let grown = by_module(&etp2) - by_module(&etp1);
    assert!(
        (grown - dispatched_gib).abs() < 1e-9 * dispatched_gib,
        "{grown} vs {dispatched_gib}"
    );
    assert_eq!(
        etp1.activations_by_module_gib.moe_experts,
        etp2.activations_by_module_gib.moe_experts
    );
    assert!(
        (etp2.breakdown_gib.moe_dispatch - 2.0 * etp1.breakdown_gib.moe_dispatch).abs() < 1e-12,
        "{} vs {}",
        etp2.breakdown_gib.moe_dispatch,
        etp1.breakdown_gib.moe_dispatch
    );
}

#[test]
fn offload_modules_free_what_they_offload_and_the_unpriced_ones_are_named() {
    let base = "{num_gpus: 8, seq_length: 4096, global_batch_size: 8, ep: 8";
    let run = |modules: &str| {
        evaluate(
            &arch("qwen3-30b-a3b"),
            &hw("h100"),
            &constants(),
            &cfg(&format!("{base}, offload_modules: {modules}}}")),
        )
    };
    let unpriced_note = |e: &moe_skills::model::Estimate| {
        e.warnings
            .iter()
            .find(|w| w.starts_with("offload_modules"))
            .cloned()
    };
    // The experts' fc1 input, then the whole attention part, are taken off the GPU.
    let experts = run("[expert_fc1]");
    assert_eq!(unpriced_note(&experts), None);
    let attention = run("[expert_fc1, attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm]");
    assert_eq!(unpriced_note(&attention), None);
    assert!(
        attention.memory.allocated_gib < experts.memory.allocated_gib,
        "{} vs {}",
        attention.memory.allocated_gib,
        experts.memory.allocated_gib
    );
    // A checkpointed core attention runs outside the core_attn offload scope: offloading it
    // then changes nothing.
    let recomputed = |modules: &str| {
        evaluate(
            &arch("qwen3-30b-a3b"),
            &hw("h100"),
            &constants(),
            &cfg(&format!(
                "{base}, recompute_granularity: selective, recompute_modules: [core_attn], \
                 offload_modules: {modules}}}"
            )),
        )
        .memory
        .allocated_gib
    };
    assert_eq!(recomputed("[core_attn]"), recomputed("[]"));
    // A module the model does not price is named, and changes nothing in the estimate.
    let fused = run("[expert_fc1, gdp_qkv]");
    let note = unpriced_note(&fused).expect("gdp_qkv is named");
    assert!(note.contains("gdp_qkv are not priced"), "{note}");
    assert_eq!(fused.memory.allocated_gib, experts.memory.allocated_gib);
}
