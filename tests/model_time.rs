//! Step-time terms with a closed form or a clear direction: FP8 fused attention and the
//! compute bound on 1F1B all-to-all overlap.

mod model_support;

use model_support::{arch, cfg, constants, constants_with_bands, hw};
use moe_skills::model::{evaluate, CostConstants, Estimate, Hardware, Precision, TimeBreakdown};

/// `actual` within `tolerance` of `expected`, relatively.
fn assert_relatively_close(actual: f64, expected: f64, tolerance: f64, what: &str) {
    assert!(
        (actual / expected - 1.0).abs() < tolerance,
        "{what}: {actual} vs {expected}"
    );
}

fn qwen30b(hardware: &str, gpus: u32, extra: &str, k: &CostConstants) -> Estimate {
    let yaml = format!(
        "{{num_gpus: {gpus}, seq_length: 4096, micro_batch_size: 1, global_batch_size: 512,
          tp: 1, pp: 1, ep: {gpus}, {extra}}}"
    );
    evaluate(&arch("qwen3-30b-a3b"), &hw(hardware), k, &cfg(&yaml))
}

#[test]
fn fp8_attention_divides_attention_time_by_the_card_speedup_without_fp8_curves() {
    // The H100 card has no FP8 attention curves: FP8 attention is the BF16 curves × the
    // constant.
    let k = constants();
    let attention = |extra: &str| {
        qwen30b("h100", 8, extra, &k)
            .performance
            .breakdown_s
            .attention
    };
    let bf16_attention = attention("precision: fp8-tensorwise");
    let fp8_attention = attention("precision: fp8-tensorwise, fp8_dot_product_attention: true");
    assert!(bf16_attention > 0.0);
    let ratio = bf16_attention / fp8_attention;
    assert!(
        (ratio - k.fp8_attention_speedup).abs() < 1e-9,
        "{ratio} vs {}",
        k.fp8_attention_speedup
    );
    // In a BF16 run the flag changes nothing: there is no FP8 recipe to run attention in.
    let plain = qwen30b("gb200", 8, "precision: bf16", &k);
    let flagged = qwen30b(
        "gb200",
        8,
        "precision: bf16, fp8_dot_product_attention: true",
        &k,
    );
    assert_eq!(
        plain.performance.breakdown_s.attention,
        flagged.performance.breakdown_s.attention
    );
}

#[test]
fn fp8_attention_reads_the_cards_curves_of_the_recipes_type() {
    // Qwen3-30B (head dim 128) at 4K, no CP: one causal call of 4096 tokens, priced at the
    // GB200 table's exact 4096 column. MXFP8 attention under the MXFP8 recipe reads the MXFP8
    // curves: attention time is the BF16 time × (1/f + 2.5/b) over the BF16 (1/f + 2.5/b).
    use moe_skills::model::kernels::{AttentionDtype, CurveSet, KernelPass};
    let k = constants();
    let card = hw("gb200");
    let table = card
        .attention_kernels
        .as_ref()
        .expect("gb200 attention table");
    let call = |dtype| {
        let set = CurveSet {
            dtype,
            window: None,
        };
        let f = table.tflops_in(set, 128.0, true, KernelPass::Fwd, 4096.0);
        let b = table.tflops_in(set, 128.0, true, KernelPass::Bwd, 4096.0);
        1.0 / f.expect("forward") + 2.5 / b.expect("backward")
    };
    let expected = call(AttentionDtype::Mxfp8) / call(AttentionDtype::Bf16);
    let attention = |extra: &str| {
        qwen30b("gb200", 8, extra, &k)
            .performance
            .breakdown_s
            .attention
    };
    let ratio = attention("precision: mxfp8, fp8_dot_product_attention: true")
        / attention("precision: mxfp8");
    assert!((ratio - expected).abs() < 1e-9, "{ratio} vs {expected}");
    // As published, MXFP8 attention at 4K is no faster than BF16 (backward slower), and the
    // constant's 1.5x is not applied on top.
    assert!(ratio > 0.95, "{ratio}");
}

#[test]
fn ep_overlap_hides_all_to_all_up_to_the_covering_compute() {
    let k = constants();
    // EP32 on H100 spans four nodes: the plain all-to-all is large next to the compute.
    let base = "precision: fp8-tensorwise, moe_token_dispatcher_type: alltoall";
    let exposed = |extra: &str, k: &CostConstants| {
        qwen30b("h100", 32, &format!("{base}, {extra}"), k)
            .performance
            .breakdown_s
            .ep_comm
    };
    let none = exposed("overlap_moe_expert_parallel_comm: false", &k);
    let overlap = exposed("overlap_moe_expert_parallel_comm: true", &k);
    let delayed = exposed(
        "overlap_moe_expert_parallel_comm: true, delay_wgrad_compute: true",
        &k,
    );
    assert!(none > 0.0);
    assert!(overlap < none, "{overlap} vs {none}");
    // Deferred weight gradients move compute from beside the forward dispatch to beside the
    // backward one: never worse.
    assert!(delayed <= overlap, "{delayed} vs {overlap}");
    // Comm-bound here: something stays exposed, and more SMs for the dispatcher change
    // nothing (the schedule already waits on the transfers).
    assert!(delayed > 0.0);
    let more_sms = exposed(
        "overlap_moe_expert_parallel_comm: true, delay_wgrad_compute: true, moe_flex_dispatcher_num_sms: 64",
        &k,
    );
    assert_eq!(more_sms, delayed);
    // On one NVL72 rack the same all-to-all is small and mostly hidden: what stays is the
    // compute the dispatcher's SMs take (24 of 148 for HybridEP) and the unpaired passes.
    let rack = qwen30b(
        "gb200",
        8,
        "precision: mxfp8, overlap_moe_expert_parallel_comm: true, delay_wgrad_compute: true",
        &k,
    );
    let rack_plain = qwen30b("gb200", 8, "precision: mxfp8", &k);
    // Compute-bound there: the dispatcher's SMs are what the hidden transfers cost, so more
    // of them cost more.
    let rack_more_sms = qwen30b(
        "gb200",
        8,
        "precision: mxfp8, overlap_moe_expert_parallel_comm: true, delay_wgrad_compute: true, moe_flex_dispatcher_num_sms: 64",
        &k,
    );
    assert!(
        rack_more_sms.performance.breakdown_s.ep_comm > rack.performance.breakdown_s.ep_comm,
        "{} vs {}",
        rack_more_sms.performance.breakdown_s.ep_comm,
        rack.performance.breakdown_s.ep_comm
    );
    assert!(rack_plain.performance.breakdown_s.ep_comm > 0.0);
    assert!(
        rack.performance.breakdown_s.ep_comm < 0.25 * rack_plain.performance.breakdown_s.ep_comm,
        "{} vs {}",
        rack.performance.breakdown_s.ep_comm,
        rack_plain.performance.breakdown_s.ep_comm
    );
}

#[test]
fn gradient_reduction_is_exposed_when_few_microbatches_hide_it() {
    let k = constants();
    let dp_comm = |gbs: u32| {
        let yaml = format!(
            "{{num_gpus: 16, seq_length: 1024, micro_batch_size: 1, global_batch_size: {gbs},
              tp: 1, pp: 1, ep: 8, precision: bf16}}"
        );
        evaluate(&arch("qwen3-30b-a3b"), &hw("h100"), &k, &cfg(&yaml))
            .performance
            .breakdown_s
            .dp_comm
    };
    // The same reduction once per step either way, hidden only behind the last microbatch's
    // backward: short 1K-token microbatches cannot cover the expert gradients' reduce-scatter
    // across two nodes, and more microbatches per step do not expose more of it.
    let one = dp_comm(16);
    let many = dp_comm(1024);
    assert!(one > 0.0, "one microbatch leaves the reduction exposed");
    assert!(many <= one, "{many} vs {one}");
}

/// DeepSeek-V3 at 64K with CP16 over two 8-GPU H100 nodes, one microbatch per step and no
/// MTP, so every one of the 61 layers runs once per step on every rank.
fn dsv3_cp16(extra: &str) -> Estimate {
    let yaml = format!(
        "{{num_gpus: 16, seq_length: 65536, micro_batch_size: 1, global_batch_size: 1,
          tp: 1, pp: 1, cp: 16, ep: 16, mtp_num_layers: 0, precision: bf16, {extra}}}"
    );
    evaluate(&arch("deepseek-v3"), &hw("h100"), &constants(), &cfg(&yaml))
}

#[test]
fn mla_ring_circulates_per_head_keys_and_values_across_nodes() {
    let k = constants();
    let h = hw("h100");
    let e = dsv3_cp16("cp_comm_type: p2p");
    let b = &e.performance.breakdown_s;
    let layers = 61.0;
    // Transformer Engine's ring sends K (128 heads x 192) and V (128 heads x 128) of the
    // 4096 local tokens, BF16: 335.5 MB per step, over InfiniBand (the ring leaves the node).
    let kv_bytes = 4096.0 * 128.0 * (192.0 + 128.0) * 2.0;
    let step_s = kv_bytes / (h.network_gb_per_s * 1e9 * h.efficiency.collective_network);
    // 15 steps forward (K, V) and backward (K, V and dK, dV), each hidden behind that step's
    // kernel (1/16 of the layer's attention) up to the card's overlap fraction. Here every
    // transfer outlasts its kernel, so the forward/backward split of the kernel time cancels.
    let attn_step = b.attention / layers / 16.0;
    assert!(
        step_s > k.cp_overlap_fraction * attn_step,
        "transfers outlast the kernels"
    );
    let per_layer = 15.0 * (3.0 * step_s - k.cp_overlap_fraction * attn_step);
    let expected = layers * per_layer;
    assert!(
        (b.cp_comm - expected).abs() < 1e-6 * expected,
        "{} vs {expected}",
        b.cp_comm
    );
    // All-to-all inside each node and a ring of two across them moves the same bytes per
    // ring step but takes one step instead of fifteen.
    let hierarchical =
        dsv3_cp16("cp_comm_type: a2a+p2p, hierarchical_context_parallel_sizes: [8, 2]");
    assert!(
        hierarchical.performance.breakdown_s.cp_comm < 0.2 * b.cp_comm,
        "{} vs {}",
        hierarchical.performance.breakdown_s.cp_comm,
        b.cp_comm
    );
}

#[test]
fn ring_merges_each_step_in_memory_and_all_to_all_does_not() {
    let h = hw("h100");
    let ring = dsv3_cp16("cp_comm_type: p2p");
    let a2a = dsv3_cp16("cp_comm_type: a2a");
    // Per ring step: the partial output merged (o), and dQ, dK, dV accumulated, each read
    // twice and written once in BF16: 3 x 2 bytes x (o + q + k + v) elements of 4096 tokens,
    // 16 steps, 61 layers.
    let elems = 4096.0 * 128.0 * (128.0 + 192.0 + 192.0 + 128.0);
    let merge = 61.0 * 16.0 * 3.0 * 2.0 * elems / (h.hbm_tb_per_s * 1e12 * h.efficiency.hbm);
    let extra = ring.performance.breakdown_s.elementwise - a2a.performance.breakdown_s.elementwise;
    assert!((extra - merge).abs() < 1e-6 * merge, "{extra} vs {merge}");
}

/// Llama-3-8B at 64K with CP over 8-GPU H100 nodes (CP16: two of them), TP1, one
/// microbatch per step, on `card`: no tensor- or expert-parallel traffic.
fn llama_cp_on(card: &Hardware, cp: u32, extra: &str) -> TimeBreakdown {
    let yaml = format!(
        "{{num_gpus: {cp}, seq_length: 65536, micro_batch_size: 1, global_batch_size: 1,
          tp: 1, pp: 1, cp: {cp}, precision: bf16, {extra}}}"
    );
    evaluate(&arch("llama3-8b"), card, &constants(), &cfg(&yaml))
        .performance
        .breakdown_s
}

fn llama_cp(cp: u32, extra: &str) -> TimeBreakdown {
    llama_cp_on(&hw("h100"), cp, extra)
}

/// Links so fast that CP's transfers cost only their latency.
fn instant_links() -> Hardware {
    let mut card = hw("h100");
    card.nvlink_gb_per_s *= 1e9;
    card.network_gb_per_s *= 1e9;
    card
}

/// What a full recompute runs again of the context-parallel forward, and the step's CP time,
/// both above what they are on `instant_links`: the recompute's excess over a third of the
/// compute, less the same excess there (what a third of the step's compute counts that the
/// layers' recompute does not, such as the output layer, is the same in both).
fn recomputed_cp_forward(cp: u32, cp_comm_type: &str) -> (f64, f64) {
    let full = format!(
        "cp_comm_type: {cp_comm_type}, recompute_granularity: full, recompute_method: uniform, \
         recompute_num_layers: 1"
    );
    let excess = |t: &TimeBreakdown| t.recompute - (t.gemm + t.attention + t.elementwise) / 3.0;
    let fast = llama_cp_on(&instant_links(), cp, &full);
    let plain = llama_cp(cp, &format!("cp_comm_type: {cp_comm_type}"));
    assert!(plain.cp_comm > 2.0 * fast.cp_comm, "{plain:?} {fast:?}");
    (
        excess(&llama_cp(cp, &full)) - excess(&fast),
        plain.cp_comm - fast.cp_comm,
    )
}

#[test]
fn recompute_runs_context_parallel_forward_communication_again() {
    // All-gather CP (Transformer Engine's AttnFuncWithCPAndKVAllGather): K and V gathered
    // forward, gathered again backward, their gradients reduce-scattered. The recompute
    // repeats the forward gather; the rest of the step's CP time is one more gather and the
    // reduce-scatter.
    let (again, comm) = recomputed_cp_forward(16, "allgather");
    assert!(again > 0.0, "the recompute gathers again: {again}");
    let scatter = comm - 2.0 * again;
    assert!(
        scatter > 0.0,
        "one reduce-scatter besides two gathers: {scatter} of {comm}"
    );
    // All-to-all CP (8 ranks: Llama-3-8B has 8 KV heads): q, k, v in and o out forward, their
    // gradients backward, the same bytes.
    let (again, comm) = recomputed_cp_forward(8, "a2a");
    assert_relatively_close(again, comm / 2.0, 1e-9, "a2a forward");
    // Ring: the forward's K, V sends, less what the forward kernels hide (the backward's
    // sends, twice the bytes, hide behind a longer kernel).
    let (again, comm) = recomputed_cp_forward(16, "p2p");
    assert!(again > 0.0 && again < comm, "{again} of {comm}");
    // Selective core-attention recompute re-runs Transformer Engine's whole CP forward too.
    let core_attn =
        "cp_comm_type: a2a, recompute_granularity: selective, recompute_modules: [core_attn]";
    let core = llama_cp(8, core_attn);
    let fast = llama_cp_on(&instant_links(), 8, core_attn);
    assert_relatively_close(
        core.recompute - fast.recompute,
        (core.cp_comm - fast.cp_comm) / 2.0,
        1e-9,
        "core_attn recompute with its all-to-alls",
    );
}

#[test]
fn deepep_across_b200_nodes_runs_at_the_nic_bound_rate_of_h100() {
    // DGX B200 has the same CX7 400 Gb/s NIC per GPU as DGX H100, and DeepEP's internode
    // path is bound by it (DeepEP's V2 table: the same RDMA figures on SM90 and SM100), so the
    // B200 card carries the H100 card's RDMA rows.
    let k = constants();
    use moe_skills::model::config::FlexBackend;
    let (b200, h100) = (hw("b200"), hw("h100"));
    let (b, h) = (
        b200.dispatch_rdma_table(FlexBackend::Deepep)
            .expect("b200 dispatch table"),
        h100.dispatch_rdma_table(FlexBackend::Deepep)
            .expect("h100 dispatch table"),
    );
    assert_eq!(b.rdma_spans, h.rdma_spans);
    assert_eq!(b.rdma_gb_per_s.dispatch, h.rdma_gb_per_s.dispatch);
    assert_eq!(b.rdma_gb_per_s.combine, h.rdma_gb_per_s.combine);
    // EP32 over four nodes: the network leg dominates on both GPUs, so the all-to-all time is
    // the same, and faster than link bandwidth x efficiency.collective_network on B200.
    let deepep =
        "precision: bf16, moe_token_dispatcher_type: flex, moe_flex_dispatcher_backend: deepep";
    let ep = |hw_id: &str, card: Option<&moe_skills::model::Hardware>| {
        let yaml = format!(
            "{{num_gpus: 32, seq_length: 4096, micro_batch_size: 1, global_batch_size: 512,
              tp: 1, pp: 1, ep: 32, {deepep}}}"
        );
        let card = card.cloned().unwrap_or_else(|| hw(hw_id));
        evaluate(&arch("qwen3-30b-a3b"), &card, &k, &cfg(&yaml))
            .performance
            .breakdown_s
            .ep_comm
    };
    let on_b200 = ep("b200", None);
    let on_h100 = ep("h100", None);
    assert!(on_b200 > 0.0);
    assert_relatively_close(on_b200, on_h100, 1e-9, "EP seconds, B200 against H100");
    let mut untabled = hw("b200");
    untabled.expert_dispatch.clear();
    let generic = ep("b200", Some(&untabled));
    assert!(on_b200 < generic, "{on_b200} vs {generic}");
}

#[test]
fn node_limited_routing_sends_each_token_to_its_groups_nodes_only() {
    // DeepSeek-V3 routes each token within 4 of 8 expert groups (HF n_group 8, topk_group 4).
    // With EP64 over 8 H100 nodes a group is one node, so DeepEP sends a token to 4 · 7/8 = 3.5
    // remote nodes on average, where uniform top-8 routing would reach 7 · (1 − (7/8)^8). The
    // network leg binds every transfer here, so the exposed all-to-all scales by that ratio.
    let k = constants();
    let yaml = "{num_gpus: 512, seq_length: 4096, micro_batch_size: 1, global_batch_size: 512,
        tp: 1, pp: 8, ep: 64, precision: bf16, moe_token_dispatcher_type: flex,
        moe_flex_dispatcher_backend: deepep, overlap_moe_expert_parallel_comm: false}";
    let grouped = arch("deepseek-v3");
    assert!(grouped
        .moe
        .as_ref()
        .is_some_and(|m| m.router_groups.is_some()));
    let mut uniform = grouped.clone();
    if let Some(m) = uniform.moe.as_mut() {
        m.router_groups = None;
    }
    let ep = |a: &moe_skills::model::Architecture| {
        evaluate(a, &hw("h100"), &k, &cfg(yaml))
            .performance
            .breakdown_s
            .ep_comm
    };
    let (limited, spread) = (ep(&grouped), ep(&uniform));
    assert!(limited > 0.0);
    let expected = 3.5 / (7.0 * (1.0 - (7.0_f64 / 8.0).powi(8)));
    assert!(
        (limited / spread - expected).abs() < 1e-9,
        "{limited} / {spread} vs {expected}"
    );
}

#[test]
fn hierarchical_all_to_all_must_divide_the_kv_heads() {
    // Qwen3-Next has 2 KV heads: an all-to-all over 4 of the 8 CP ranks cannot split them, an
    // all-to-all over 2 can.
    let run = |sizes: &str| {
        let yaml = format!(
            "{{num_gpus: 64, seq_length: 65536, micro_batch_size: 1, global_batch_size: 8,
              tp: 1, pp: 1, cp: 8, ep: 8, precision: bf16, cp_comm_type: a2a+p2p,
              hierarchical_context_parallel_sizes: {sizes}}}"
        );
        evaluate(
            &arch("qwen3-next-80b-a3b"),
            &hw("h100"),
            &constants(),
            &cfg(&yaml),
        )
    };
    let codes = |e: &Estimate| {
        e.violations
            .iter()
            .map(|v| v.code.clone())
            .collect::<Vec<_>>()
    };
    assert!(codes(&run("[4, 2]")).contains(&"cp_exceeds_kv_heads".to_string()));
    assert!(!codes(&run("[2, 4]")).contains(&"cp_exceeds_kv_heads".to_string()));
}

#[test]
fn static_moe_shapes_silence_the_full_iteration_graph_warning_and_say_what_they_size() {
    let k = constants();
    let graphed = "precision: mxfp8, moe_token_dispatcher_type: flex, moe_flex_dispatcher_backend: hybridep, cuda_graph_impl: full_iteration";
    let dropless = qwen30b("gb200", 8, graphed, &k);
    assert!(
        dropless
            .warnings
            .iter()
            .any(|w| w.contains("full_iteration CUDA graphs need static MoE shapes")),
        "{:?}",
        dropless.warnings
    );
    let budgeted = qwen30b(
        "gb200",
        8,
        &format!("{graphed}, moe_expert_rank_capacity_factor: 1.5, moe_paged_stash: true"),
        &k,
    );
    assert!(budgeted.violations.is_empty(), "{:?}", budgeted.violations);
    assert!(!budgeted
        .warnings
        .iter()
        .any(|w| w.contains("full_iteration CUDA graphs need")));
    // The budget is read, and the answer says the estimate counts the balanced load.
    assert!(budgeted
        .warnings
        .iter()
        .any(|w| w.contains("moe_expert_rank_capacity_factor 1.5")));
}

#[test]
fn deepep_and_hybridep_on_nvl72_run_at_their_published_bandwidths() {
    // EP32 inside one GB200 NVL72 domain: DeepEP's table (scoped to DeepEP) gives ~400 GB/s
    // dispatch and ~190 GB/s combine; HybridEP's own published table (by EP span and SMs)
    // gives ~480 / ~440 at 24 SMs, so its all-to-all is shorter.
    use moe_skills::model::config::FlexBackend;
    let k = constants();
    let gb200 = hw("gb200");
    let deepep_table = gb200
        .dispatch_nvlink_table(FlexBackend::Deepep)
        .expect("gb200 DeepEP table");
    let hybridep_table = gb200
        .dispatch_nvlink_table(FlexBackend::Hybridep)
        .expect("gb200 HybridEP table");
    assert!(deepep_table.rdma_spans.is_empty() && hybridep_table.rdma_spans.is_empty());
    let sms = k.dispatcher_comm_sms.hybridep;
    let (d_h, c_h) = hybridep_table
        .nvlink_bytes_per_s(gb200.nvlink_gb_per_s, 32.0, sms)
        .expect("HybridEP EP32 figures");
    let (d_d, c_d) = deepep_table
        .nvlink_bytes_per_s(gb200.nvlink_gb_per_s, 32.0, sms)
        .expect("DeepEP figures");
    assert!(d_h > d_d && c_h > c_d);
    let ep = |backend: &str| {
        qwen30b(
            "gb200",
            32,
            &format!(
                "precision: bf16, moe_token_dispatcher_type: flex, moe_flex_dispatcher_backend: {backend}"
            ),
            &k,
        )
        .performance
        .breakdown_s
        .ep_comm
    };
    let (deepep, hybridep) = (ep("deepep"), ep("hybridep"));
    assert!(
        hybridep > 0.0 && deepep > hybridep,
        "{deepep} vs {hybridep}"
    );
    // Same bytes and nothing overlapped, so the exposed all-to-all grows by at least the
    // smaller of the two bandwidth ratios.
    let bound = (d_h / d_d).min(c_h / c_d);
    assert!(
        deepep / hybridep > bound,
        "{deepep} vs {hybridep}, bound {bound}"
    );
}

#[test]
fn gated_deltanet_walks_the_whole_sequence_on_every_cp_rank() {
    // Qwen3-Next at 64K on 64 GB200, the same 32-sequence batch with CP4 (2 microbatches per
    // GPU) and CP16 (8): each GPU holds the same tokens per step either way, so attention
    // priced by FLOPs costs about the same. Megatron's GDN re-shards sequence to heads, so
    // every CP rank walks all 1024 chunks of each sequence (for fewer heads): CP16 walks
    // four times as many sequences per step, and its attention costs far more.
    let run = |cp: u32, card: &moe_skills::model::Hardware| {
        let yaml = format!(
            "{{num_gpus: 64, seq_length: 65536, micro_batch_size: 1, global_batch_size: 32,
              tp: 1, pp: 1, cp: {cp}, ep: 16, precision: bf16, cp_comm_type: p2p}}"
        );
        evaluate(&arch("qwen3-next-80b-a3b"), card, &constants(), &cfg(&yaml))
            .performance
            .breakdown_s
            .attention
    };
    let card = hw("gb200");
    assert!(card.linear_attention_kernel.is_some());
    let with_kernel = run(4, &card) / run(16, &card);
    let mut flops_only = card.clone();
    flops_only.linear_attention_kernel = None;
    let without = run(4, &flops_only) / run(16, &flops_only);
    // About the same work per GPU: only the softmax layers differ, their CP16 ring steps (4K
    // tokens) running a little slower than CP4's (16K) on the card's head-dim-256 curves.
    assert!(
        without > 0.75,
        "FLOP pricing: the same work per GPU: {without}"
    );
    // A malformed table is not read: the FLOP pricing answers, as with no table.
    let mut broken = card.clone();
    if let Some(k) = broken.linear_attention_kernel.as_mut() {
        k.forward_step_us = -1.0;
    }
    assert_eq!(run(16, &broken), run(16, &flops_only));
    assert!(
        with_kernel < 0.6,
        "the state pass walks 4x the sequences: {with_kernel}"
    );
}

#[test]
fn gated_deltanet_context_parallel_moves_its_projection_in_and_its_output_back() {
    // Qwen3-Next with every layer Gated DeltaNet, CP4 inside one GB200 NVL72 domain priced at
    // the large-message NVLink rate (no by-size table), one 32K sequence per step, no MTP:
    // each of the 48 layers runs one all-to-all of its in_proj output (q, k: 16 heads x 128;
    // v, z: 32 x 128; beta, alpha: 32) from sequence to heads and one of its gated-norm output
    // (32 x 128) back, forward and backward; a rank keeps 1/4 of each.
    let mut model = arch("qwen3-next-80b-a3b");
    model.attention_pattern = vec![moe_skills::model::arch::AttentionKind::Linear];
    let mut card = hw("gb200");
    card.nccl_nvlink_by_size = None;
    let yaml = "{num_gpus: 4, seq_length: 32768, micro_batch_size: 1, global_batch_size: 1,
                 tp: 1, pp: 1, cp: 4, ep: 4, mtp_num_layers: 0, precision: bf16}";
    let e = evaluate(&model, &card, &constants(), &cfg(yaml));
    let tokens = 32768.0 / 4.0;
    let in_width = 2.0 * 16.0 * 128.0 + 2.0 * 32.0 * 128.0 + 2.0 * 32.0;
    let out_width = 32.0 * 128.0;
    let rate = card.nvlink_gb_per_s * 1e9 * card.efficiency.collective_nvlink;
    let per_layer = 2.0 * tokens * (in_width + out_width) * 2.0 * 0.75 / rate;
    assert_relatively_close(
        e.performance.breakdown_s.cp_comm,
        48.0 * per_layer,
        1e-9,
        "GDN all-to-all seconds",
    );
}

#[test]
fn shared_experts_beside_the_all_to_all_hide_their_own_seconds_of_it() {
    // DeepSeek-V3 on 32 H100 (four nodes), EP32 with NCCL's all-to-all: every transfer
    // outlasts the shared expert's GEMMs beside it, so `moe_shared_expert_overlap` takes
    // exactly those GEMMs' seconds off the exposed all-to-all, no more. Their seconds are what
    // the same run spends in GEMMs with the shared expert over without it.
    let card = hw("h100");
    let k = constants();
    let run = |arch: &moe_skills::model::Architecture, extra: &str| {
        let yaml = format!(
            "{{num_gpus: 32, seq_length: 4096, micro_batch_size: 1, global_batch_size: 8,
              tp: 1, pp: 1, ep: 32, precision: bf16, moe_token_dispatcher_type: alltoall,
              recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1
              {extra}}}"
        );
        evaluate(arch, &card, &k, &cfg(&yaml))
            .performance
            .breakdown_s
    };
    let dsv3 = arch("deepseek-v3");
    let mut unshared = dsv3.clone();
    if let Some(m) = unshared.moe.as_mut() {
        m.shared_expert_ffn_hidden_size = 0;
    }
    let plain = run(&dsv3, "");
    let overlapped = run(&dsv3, ", moe_shared_expert_overlap: true");
    let shared_gemm = plain.gemm - run(&unshared, "").gemm;
    assert!(shared_gemm > 0.0);
    assert_eq!(overlapped.gemm, plain.gemm);
    assert_relatively_close(
        plain.ep_comm - overlapped.ep_comm,
        shared_gemm,
        1e-9,
        "all-to-all seconds the shared experts hide",
    );
    // The recomputed forward runs them beside its two transfers again: their forward third.
    assert_relatively_close(
        plain.recompute - overlapped.recompute,
        shared_gemm / 3.0,
        1e-9,
        "recomputed all-to-all seconds the shared experts hide",
    );
    // With the allgather dispatcher Megatron-Core refuses the overlap; nothing is hidden.
    let gathered = |extra: &str| {
        let yaml = format!(
            "{{num_gpus: 32, seq_length: 4096, micro_batch_size: 1, global_batch_size: 8,
              tp: 1, pp: 1, ep: 32, precision: bf16, moe_token_dispatcher_type: allgather,
              recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1
              {extra}}}"
        );
        evaluate(&dsv3, &card, &k, &cfg(&yaml))
    };
    let refused = gathered(", moe_shared_expert_overlap: true");
    assert_eq!(
        refused.performance.breakdown_s.ep_comm,
        gathered("").performance.breakdown_s.ep_comm
    );
    assert!(refused
        .violations
        .iter()
        .any(|v| v.code == "shared_expert_overlap_with_allgather"));
}

#[test]
fn the_allgather_dispatcher_gathers_and_scatters_both_ways() {
    // Qwen3-30B-A3B on one 8-GPU H100 node, EP8, one microbatch, at the large-message NVLink
    // rate (no by-size table). Per MoE layer, over the 8 ranks: forward all-gathers of the
    // tokens (BF16), router probabilities (BF16) and routing map (bool, 128 experts) and a
    // reduce-scatter of the outputs; backward a reduce-scatter of the tokens' and
    // probabilities' gradients and an all-gather of the outputs' gradient. A rank receives
    // 7/8 of every gathered buffer and sends 7/8 of every scattered one.
    let mut card = hw("h100");
    card.nccl_nvlink_by_size = None;
    let yaml = "{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 1,
                 tp: 1, pp: 1, cp: 1, ep: 8, precision: bf16,
                 moe_token_dispatcher_type: allgather}";
    let e = evaluate(&arch("qwen3-30b-a3b"), &card, &constants(), &cfg(yaml));
    let (tokens, hidden, experts) = (4096.0, 2048.0, 128.0);
    let gathered = 2.0 * hidden * 2.0 + experts * 2.0 + experts;
    let scattered = 2.0 * hidden * 2.0 + experts * 2.0;
    let rate = card.nvlink_gb_per_s * 1e9 * card.efficiency.collective_nvlink;
    let per_layer = tokens * 7.0 * (gathered + scattered) / rate;
    assert_relatively_close(
        e.performance.breakdown_s.ep_comm,
        48.0 * per_layer,
        1e-9,
        "allgather dispatcher seconds",
    );
}

#[test]
fn expert_tensor_parallelism_sends_each_token_to_every_shard_of_its_experts() {
    // Qwen3-30B-A3B on 8 H100 with TP2 and sequence parallelism: EP8 ETP1 against EP4 ETP2,
    // the same 8-rank expert group. DeepEP sends k·ETP copies of each token (Megatron-Core's
    // flex dispatcher: router_topk = tp_size × moe_router_topk), so ETP2 moves twice the
    // bytes at the same rates; NCCL's all-to-all runs over EP and adds an ETP all-gather and
    // reduce-scatter of the received tokens. Each GPU then runs its experts' half-width
    // shards over twice the tokens per expert.
    let run = |ep: u32, etp: u32, dispatcher: &str| {
        let yaml = format!(
            "{{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 8,
              tp: 2, sequence_parallel: true, pp: 1, cp: 1, ep: {ep},
              expert_tensor_parallel_size: {etp}, precision: bf16, {dispatcher}}}"
        );
        evaluate(
            &arch("qwen3-30b-a3b"),
            &hw("h100"),
            &constants(),
            &cfg(&yaml),
        )
        .performance
        .breakdown_s
    };
    let deepep = "moe_token_dispatcher_type: flex, moe_flex_dispatcher_backend: deepep";
    assert_relatively_close(
        run(4, 2, deepep).ep_comm,
        2.0 * run(8, 1, deepep).ep_comm,
        1e-9,
        "DeepEP with ETP2",
    );
    let alltoall = "moe_token_dispatcher_type: alltoall";
    let (etp1, etp2) = (run(8, 1, alltoall).ep_comm, run(4, 2, alltoall).ep_comm);
    assert!(
        etp2 > 1.5 * etp1,
        "the ETP leg adds to the all-to-all: {etp2} vs {etp1}"
    );
}

#[test]
fn a_cluster_calibration_scales_every_dispatch_figure_on_its_link() {
    // Half the network and half the NVLink: every dispatcher leg, however its card gives it
    // (a link fraction, RDMA columns, or a table by span and SMs), halves.
    use moe_skills::model::cluster_calibration::CalibrationFactors;
    use moe_skills::model::config::FlexBackend;
    let factors = CalibrationFactors {
        network_bandwidth: 0.5,
        nvlink_bandwidth: 0.5,
        ..CalibrationFactors::default()
    };
    let k = constants();
    let legs = |card: &moe_skills::model::Hardware, backend| {
        let nvlink = card
            .dispatch_nvlink_table(backend)
            .and_then(|t| t.nvlink_bytes_per_s(card.nvlink_gb_per_s, 8.0, 24.0));
        let rdma = card
            .dispatch_rdma_table(backend)
            .and_then(|t| t.rdma_bytes_per_s_at(32.0, 16.0));
        (nvlink, rdma)
    };
    let mut checked = 0;
    for id in ["h100", "b200", "gb200"] {
        let card = hw(id);
        let (scaled, _) = factors.apply(&card, &k);
        for backend in [FlexBackend::Deepep, FlexBackend::Hybridep] {
            let (before, after) = (legs(&card, backend), legs(&scaled, backend));
            for (b, a) in [(before.0, after.0), (before.1, after.1)] {
                if let (Some(b), Some(a)) = (b, a) {
                    assert!((a.0 / b.0 - 0.5).abs() < 1e-12, "{id} {backend:?}");
                    assert!((a.1 / b.1 - 0.5).abs() < 1e-12, "{id} {backend:?}");
                    checked += 1;
                }
            }
        }
    }
    // h100: both backends' NVLink (fraction) and RDMA (columns, HybridEP's span table); b200
    // likewise with HybridEP's NVLink span table; gb200: both NVLink legs, no RDMA table.
    assert_eq!(checked, 10);
}

#[test]
fn the_overlap_schedules_cpu_time_shows_inside_a_node_and_hides_across_nodes() {
    // Megatron-Bridge turned 1F1B all-to-all overlap off where the expert all-to-all stays
    // inside a node "due to CPU overhead" (PR #1760), while across two H100 nodes the same
    // overlap made Qwen3-30B-A3B 15% faster (its expert-parallel-overlap skill's A/B). The
    // model gives both directions from one mechanism: the schedule's CPU time is issued
    // behind long transfers and exposed beside short ones.
    let k = constants_with_bands();
    let warned = |e: &Estimate| {
        e.warnings
            .iter()
            .any(|w| w.contains("expert all-to-all inside one node"))
    };
    let step = |e: &Estimate| e.performance.step_time_s;
    let fp8 = "precision: fp8-tensorwise";
    let overlap = "precision: fp8-tensorwise, overlap_moe_expert_parallel_comm: true";
    let intra_off = qwen30b("h100", 8, fp8, &k);
    let intra_on = qwen30b("h100", 8, overlap, &k);
    assert!(
        step(&intra_on) > step(&intra_off),
        "{} vs {}",
        step(&intra_on),
        step(&intra_off)
    );
    assert!(
        intra_on.performance.breakdown_s.host_overhead
            > intra_off.performance.breakdown_s.host_overhead
    );
    assert!(warned(&intra_on), "{:?}", intra_on.warnings);
    assert!(intra_on.warnings.iter().any(|w| w.contains("#1760")));
    // The answer quotes an ordinary band: the cost is priced, not flagged.
    assert!(intra_on
        .performance
        .band_text()
        .contains("typically within"));
    let hybridep = "precision: bf16, moe_token_dispatcher_type: flex, \
                    moe_flex_dispatcher_backend: hybridep";
    let cross_off = qwen30b("h100", 16, hybridep, &k);
    let cross_on = qwen30b(
        "h100",
        16,
        &format!("{hybridep}, overlap_moe_expert_parallel_comm: true"),
        &k,
    );
    assert!(
        step(&cross_on) < step(&cross_off),
        "{} vs {}",
        step(&cross_on),
        step(&cross_off)
    );
    assert!(!warned(&cross_on));
    // A full-iteration CUDA graph removes the launches: no warning inside a node either.
    let graphed = qwen30b(
        "h100",
        8,
        &format!(
            "{overlap}, cuda_graph_impl: transformer_engine, cuda_graph_scope: [full_iteration]"
        ),
        &k,
    );
    assert!(!warned(&graphed), "{:?}", graphed.warnings);
}

#[test]
fn tensor_parallel_collectives_of_small_messages_run_at_the_cards_measured_fraction() {
    use moe_skills::model::kernels::CollectiveOp;
    let k = constants();
    let with_sizes = hw("h100");
    let table = with_sizes
        .nccl_nvlink_by_size
        .clone()
        .expect("the H100 card measures NCCL by message size");
    let mut large_only = with_sizes.clone();
    large_only.nccl_nvlink_by_size = None;
    // Qwen3-30B (hidden 2048) at TP4 inside one node: each sequence-parallel all-gather's
    // output and reduce-scatter's input is the microbatch's activations, tokens x 2048 x 2 B.
    let tp_comm = |hardware, seq: u64| {
        let yaml = format!(
            "{{num_gpus: 8, seq_length: {seq}, micro_batch_size: 1, global_batch_size: 8,
              tp: 4, pp: 1, ep: 8, sequence_parallel: true, precision: bf16}}"
        );
        evaluate(&arch("qwen3-30b-a3b"), hardware, &k, &cfg(&yaml))
            .performance
            .breakdown_s
            .tp_comm
    };
    for seq in [4096u64, 65536] {
        let message = seq as f64 * 2048.0 * 2.0;
        let ag = table.size_fraction(CollectiveOp::AllGather, 4, message);
        let rs = table.size_fraction(CollectiveOp::ReduceScatter, 4, message);
        // Half the transfers are all-gathers and half reduce-scatters, each slowed by its
        // own curve.
        let expected = 0.5 * (1.0 / ag + 1.0 / rs);
        let ratio = tp_comm(&with_sizes, seq) / tp_comm(&large_only, seq);
        assert!(
            (ratio - expected).abs() < 1e-9,
            "{seq}: {ratio} vs {expected}"
        );
    }
    // A 16 MiB message reaches well under the large-message rate; a 256 MiB one nearly all.
    let small = table.size_fraction(CollectiveOp::AllGather, 4, 4096.0 * 2048.0 * 2.0);
    let large = table.size_fraction(CollectiveOp::AllGather, 4, 65536.0 * 2048.0 * 2.0);
    assert!(small < 0.7 && large > 0.85, "{small} {large}");
}

/// One NIC's and NVLink's achieved large-message rates on a card, bytes/s.
fn achieved_nic_and_nvlink(card: &Hardware) -> (f64, f64) {
    (
        card.network_gb_per_s * 1e9 * card.efficiency.collective_network,
        card.nvlink_gb_per_s * 1e9 * card.efficiency.collective_nvlink,
    )
}

/// The constants with every NCCL latency zeroed and every protocol at the full rate: across
/// nodes a collective then takes its traffic over the large-message rate.
fn without_nccl_latency(k: &CostConstants) -> CostConstants {
    let mut plain = k.clone();
    for p in &mut plain.nccl_latency.ring {
        p.base_us = 0.0;
        p.intra_step_us = 0.0;
        p.network_step_us = 0.0;
        p.lone_network_step_us = 0.0;
        p.bandwidth_fraction = 1.0;
    }
    let pat = &mut plain.nccl_latency.pat;
    pat.base_us = 0.0;
    pat.per_rank_us = 0.0;
    pat.log_network_step_us = 0.0;
    pat.bandwidth_fraction = 1.0;
    plain
}

#[test]
fn collectives_beyond_the_nvlink_domain_pay_nccls_ring_latency_not_the_nvlink_table() {
    let k = constants();
    let with_sizes = hw("h100");
    let mut large_only = with_sizes.clone();
    large_only.nccl_nvlink_by_size = None;
    // TP16 spans two H100 nodes: the table (measured inside one node) does not apply.
    let yaml = "{num_gpus: 16, seq_length: 4096, micro_batch_size: 1, global_batch_size: 16,
                 tp: 16, pp: 1, ep: 16, sequence_parallel: true, precision: bf16}";
    let tp_comm = |hardware, k: &CostConstants| {
        evaluate(&arch("deepseek-v3"), hardware, k, &cfg(yaml))
            .performance
            .breakdown_s
            .tp_comm
    };
    let (a, b) = (tp_comm(&with_sizes, &k), tp_comm(&large_only, &k));
    assert!(a > 0.0 && (a - b).abs() < 1e-12 * a, "{a} vs {b}");

    // Against the same model with every NCCL latency zeroed, each all-gather and
    // reduce-scatter (one microbatch's activations, 4096 x 7168 x 2 B) takes the ring's
    // latency more. 16 GPUs on 2 nodes, 8 of the group per node: the ring runs 8 NICs side
    // by side, up to the NVLink rate (8 x 50 x 0.97 = 388 > 450 x 0.82 = 369 GB/s). By hand
    // from the card: Simple 8.4 + 14 x 3.4 + 1 x 14 = 70 us at the full rate, LL128
    // 14 + 14 x 1.9 + 4 = 44.6 us at 0.92 of it, LL 6.6 + 14 + 2.7 = 23.3 us at half of it:
    // at this size LL128 is the fastest.
    let no_latency = without_nccl_latency(&k);
    let (nic, nvlink) = achieved_nic_and_nvlink(&with_sizes);
    let ring = (8.0 * nic).min(nvlink);
    assert!(ring == nvlink, "{ring}");
    let traffic = 4096.0 * 7168.0 * 2.0 * 15.0 / 16.0;
    let plain = traffic / ring;
    let simple = 70e-6 + plain;
    let ll128 = 44.6e-6 + plain / 0.92;
    let ll = 23.3e-6 + plain / 0.5;
    assert!(ll128 < simple && ll128 < ll);
    let ratio = tp_comm(&with_sizes, &k) / tp_comm(&with_sizes, &no_latency);
    assert!(
        (ratio - ll128 / plain).abs() < 1e-9,
        "{ratio} vs {}",
        ll128 / plain
    );
}

/// Beyond one node an all-gather or reduce-scatter ring runs as many NICs side by side as
/// the group has GPUs on each node (NCCL spreads its channels over them): a 16-GPU
/// data-parallel group on 2 nodes (8 per node) reduces its gradients at several times the
/// rate of one spread one GPU per node over 16 nodes, where every hop crosses one NIC.
#[test]
fn a_ring_across_nodes_runs_one_nic_per_gpu_of_the_group_on_each_node() {
    let no_latency = without_nccl_latency(&constants());
    let h100 = hw("h100");
    let (nic, nvlink) = achieved_nic_and_nvlink(&h100);
    // A dense model, reduction and gather not overlapped: the whole of both is exposed.
    let run = |gpus: u32, tp: u32| {
        let yaml = format!(
            "{{num_gpus: {gpus}, seq_length: 4096, micro_batch_size: 1,
              global_batch_size: 16, tp: {tp}, pp: 1, precision: bf16,
              overlap_grad_reduce: false, overlap_param_gather: false}}"
        );
        evaluate(&arch("llama3-8b"), &h100, &no_latency, &cfg(&yaml))
    };
    // 16 GPUs at TP1: the group is all 16 (8 per node). 128 GPUs at TP8: 16 GPUs, one
    // per node. Their slices differ by TP: compare seconds per gradient byte held.
    let per_byte = |e: &Estimate| {
        e.performance.breakdown_s.dp_comm / e.memory.per_rank_breakdown_gib[0].gradients
    };
    let (packed, spread) = (run(16, 1), run(128, 8));
    assert!(packed.performance.breakdown_s.dp_comm > 0.0);
    let ratio = per_byte(&spread) / per_byte(&packed);
    let expected = (8.0 * nic).min(nvlink) / nic;
    assert_relatively_close(
        ratio,
        expected,
        0.02,
        "spread against packed seconds per gradient byte",
    );
}

#[test]
fn a_data_parallel_reduction_over_many_nodes_pays_more_latency_per_bucket() {
    // The same per-GPU model slice and bucket over data-parallel groups spread over 2 and
    // over 16 H100 nodes (TP4: two GPUs of each dense group per node; one microbatch
    // leaves the reduction exposed): the ring's steps grow with the group.
    let k = constants();
    let no_latency = without_nccl_latency(&k);
    let dp_comm = |gpus: u32, k: &CostConstants| {
        let yaml = format!(
            "{{num_gpus: {gpus}, seq_length: 4096, micro_batch_size: 1,
              global_batch_size: {}, tp: 4, pp: 1, ep: 8, precision: bf16}}",
            gpus / 4
        );
        evaluate(&arch("qwen3-30b-a3b"), &hw("h100"), k, &cfg(&yaml))
            .performance
            .breakdown_s
            .dp_comm
    };
    let extra = |gpus| dp_comm(gpus, &k) / dp_comm(gpus, &no_latency);
    let (two_nodes, sixteen_nodes) = (extra(16), extra(128));
    assert!(two_nodes > 1.0, "{two_nodes}");
    assert!(sixteen_nodes > two_nodes, "{sixteen_nodes} vs {two_nodes}");
}

#[test]
fn the_cards_bands_quote_bf16_and_fp8_runs_from_their_own_precision() {
    // The generated table splits regimes by GEMM precision class: the same layout in BF16
    // and in FP8 quotes two different bands, each naming its precision, and a GPU with no
    // runs of its own (H200) quotes its generation's.
    let k = constants_with_bands();
    let regime = |hardware: &str, precision: &str| {
        qwen30b(hardware, 16, &format!("precision: {precision}"), &k)
            .performance
            .uncertainty
            .map(|u| u.regime)
            .unwrap_or_default()
    };
    let bf16 = regime("h100", "bf16");
    let fp8 = regime("h100", "fp8-blockwise");
    assert!(bf16.contains("bf16"), "{bf16}");
    assert!(fp8.contains("fp8"), "{fp8}");
    assert_ne!(bf16, fp8);
    let h200 = regime("h200", "fp8-blockwise");
    assert!(h200.starts_with("hopper, fp8"), "{h200}");
}

/// No measured run used FP4 GEMMs: an NVFP4 answer quotes a band of other precisions and
/// says so; an MXFP8 answer on the same GPU has runs of its own precision and does not.
#[test]
fn an_fp4_answer_says_no_measured_run_behind_its_band_used_fp4() {
    let k = constants_with_bands();
    let band = |precision: &str| {
        qwen30b("gb200", 8, &format!("precision: {precision}"), &k)
            .performance
            .uncertainty
            .expect("GB200 has measured runs")
    };
    let fp4 = band("nvfp4");
    assert_eq!(fp4.unmeasured_precision.as_deref(), Some("fp4"));
    assert!(
        fp4.text().contains("none of them ran FP4 GEMMs"),
        "{}",
        fp4.text()
    );
    let fp8 = band("mxfp8");
    assert_eq!(fp8.unmeasured_precision, None);
    assert!(!fp8.text().contains("none of them"), "{}", fp8.text());
}

#[test]
fn gpt_oss_expert_biases_and_clamp_add_their_counted_traffic() {
    // GPT-OSS's experts carry biases (Megatron-Core adds fc2's per local expert in FP32) and a
    // clamp before the activation; each is element-wise HBM traffic counted from the code,
    // per routed token: 64 bytes per fc2 output element (hidden 2880), 18 per fc1 output
    // element (2 x 2880, gated).
    let k = constants();
    let gpu = hw("h100");
    let with = arch("gpt-oss-120b");
    let mut without = with.clone();
    without.activation_clamp = None;
    if let Some(m) = without.moe.as_mut() {
        m.expert_bias = false;
    }
    let run = cfg(
        "{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 64,
                   tp: 1, pp: 1, ep: 8, precision: bf16}",
    );
    let elementwise = |a| {
        evaluate(a, &gpu, &k, &run)
            .performance
            .breakdown_s
            .elementwise
    };
    // 4096 tokens x top-4 routed copies per layer and microbatch, 36 layers, 8 microbatches.
    let routed = 4096.0 * 4.0;
    let per_layer = routed * (2880.0 * 64.0 + 2.0 * 2880.0 * 18.0);
    let hbm = gpu.hbm_tb_per_s * 1e12 * gpu.efficiency.hbm;
    let expected = per_layer * 36.0 * 8.0 / hbm;
    let added = elementwise(&with) - elementwise(&without);
    assert_relatively_close(
        added,
        expected,
        1e-9,
        "element-wise seconds added against counted",
    );
}

/// A low-precision recipe adds its quantizers' traffic, counted per element of every decoder
/// linear layer's input and output gradient, to the element-wise work of the BF16 working set
/// (which does not shrink because the GEMM inputs are kept in FP8). Llama-3-8B on one H100 at
/// 4K: per token and layer, inputs 4096 (qkv) + 4096 (proj) + 4096 (fc1) + 14336 (fc2) and
/// outputs 6144 + 4096 + 28672 + 4096; 32 layers, 8 microbatches; the router and output layer
/// stay BF16.
#[test]
fn low_precision_recipes_add_their_quantizer_traffic_to_the_bf16_element_wise_work() {
    let k = constants();
    let gpu = hw("h100");
    let model = arch("llama3-8b");
    let elementwise = |precision: &str| {
        let run = cfg(&format!(
            "{{num_gpus: 1, seq_length: 4096, micro_batch_size: 1, global_batch_size: 8,
              tp: 1, pp: 1, precision: {precision}}}"
        ));
        evaluate(&model, &gpu, &k, &run)
            .performance
            .breakdown_s
            .elementwise
    };
    let elements_per_token = (4096.0 * 3.0 + 14336.0) + (6144.0 + 4096.0 + 28672.0 + 4096.0);
    let hbm = gpu.hbm_tb_per_s * 1e12 * gpu.efficiency.hbm;
    let seconds_per_byte = 4096.0 * elements_per_token * 32.0 * 8.0 / hbm;
    let bf16 = elementwise("bf16");
    for (precision, bytes) in [
        (
            "fp8-tensorwise",
            k.quantization_bytes_per_element.fp8_tensorwise,
        ),
        ("fp8-delayed", k.quantization_bytes_per_element.fp8_delayed),
        (
            "fp8-blockwise",
            k.quantization_bytes_per_element.fp8_blockwise,
        ),
    ] {
        let added = elementwise(precision) - bf16;
        let expected = bytes * seconds_per_byte;
        assert_relatively_close(added, expected, 1e-9, precision);
    }
    // Current scaling reads each tensor twice (amax, then the cast): the dearest FP8 recipe.
    assert!(elementwise("fp8-tensorwise") > elementwise("fp8-blockwise"));
}

/// Expert GEMMs on a card with a measured grouped-GEMM table run at the large-GEMM rate times
/// the table's fraction of its reference: Qwen3-30B at EP8, 4K tokens, top-8 of 128 experts
/// feeds each local expert 4096 x 8 x 8 / 128 = 2048 tokens, and its experts are 768 wide, a
/// grid point of the H100 table (495 of 783 TFLOP/s). The GEMM term is linear in the expert
/// time, so the table's factor shows against a flat table at the reference (factor 1).
#[test]
fn expert_gemms_read_the_cards_measured_grouped_table_at_their_shape() {
    let k = constants();
    let card = hw("h100");
    let gemm_seconds = |h: &moe_skills::model::Hardware| {
        let yaml = "{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 64,
                     tp: 1, pp: 1, ep: 8}";
        evaluate(&arch("qwen3-30b-a3b"), h, &k, &cfg(yaml))
            .performance
            .breakdown_s
            .gemm
    };
    let table = card
        .grouped_gemm_kernels
        .clone()
        .expect("the H100 card has a measured grouped-GEMM table");
    let with_curves = |figure: &dyn Fn(f64) -> f64| {
        let mut h = card.clone();
        let mut t = table.clone();
        for curve in &mut t.curves {
            curve.tflops.iter_mut().for_each(|v| *v = figure(*v));
        }
        h.grouped_gemm_kernels = Some(t);
        gemm_seconds(&h)
    };
    let reference = table.reference_tflops;
    let measured = table
        .curves
        .iter()
        .find(|c| c.weight_dim == 768.0)
        .map(|c| c.tflops[5])
        .expect("width 768 at 2048 tokens");
    assert_eq!(table.tokens_per_expert[5], 2048.0);
    let as_measured = with_curves(&|v| v);
    let flat = with_curves(&|_| reference);
    let flat_half = with_curves(&|_| 2.0 * reference);
    // Doubling every figure halves the expert time: flat - flat_half is half of it.
    let experts_at_reference = 2.0 * (flat - flat_half);
    assert!(experts_at_reference > 0.0);
    let expected = experts_at_reference * (reference / measured - 1.0);
    assert!(
        ((as_measured - flat) - expected).abs() < 1e-9 * as_measured,
        "measured {as_measured}, flat {flat}, expected extra {expected}"
    );
    // Without the table the fitted half-efficiency sizes price the experts instead.
    let mut fitted = card.clone();
    fitted.grouped_gemm_kernels = None;
    let without = gemm_seconds(&fitted);
    assert!((without - as_measured).abs() > 1e-6 * as_measured);
}

#[test]
fn latency_bound_data_parallel_buckets_are_named_with_the_fix() {
    // Qwen3-30B on 1024 H100 (DP 1024 over 128 nodes): Megatron-LM's default bucket grows
    // with DP (max(40M, 1M x DP·CP) = 1024M parameters) and stays bandwidth-bound; 4M
    // buckets spend most of each reduce-scatter in NCCL's ring latency, and the answer says so.
    let k = constants();
    let run = |extra: &str| {
        let yaml = format!(
            "{{num_gpus: 1024, seq_length: 4096, micro_batch_size: 1, global_batch_size: 1024,
              tp: 1, pp: 1, ep: 8, precision: bf16{extra}}}"
        );
        evaluate(&arch("qwen3-30b-a3b"), &hw("h100"), &k, &cfg(&yaml))
    };
    let said = |e: &Estimate| e.warnings.iter().any(|w| w.contains("latency-bound"));
    let default = run("");
    let small = run(", ddp_bucket_size: 4000000");
    assert!(!said(&default), "{:?}", default.warnings);
    assert!(said(&small), "{:?}", small.warnings);
    assert!(small.performance.breakdown_s.dp_comm > 2.0 * default.performance.breakdown_s.dp_comm);
    // Inside one node there is no ring latency to warn about.
    let yaml = "{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 8,
                 tp: 1, pp: 1, ep: 8, precision: bf16, ddp_bucket_size: 4000000}";
    let node = evaluate(&arch("qwen3-30b-a3b"), &hw("h100"), &k, &cfg(yaml));
    assert!(!said(&node), "{:?}", node.warnings);
}

/// The FP8 efficiency is fitted on per-tensor runs; where the GPU card records the measured
/// blockwise and per-tensor 8192³ GEMMs, a blockwise run's GEMMs (dense and grouped) run at
/// their ratio (H100: 1189 / 1489 = 0.80, so 1.25× the seconds) and the answer says so; a
/// per-tensor run, and a card without the measurement, are priced and described as before.
#[test]
fn blockwise_fp8_gemms_run_at_the_measured_blockwise_over_per_tensor_ceiling() {
    let k = constants();
    let run = |hardware: &str, precision: &str| {
        qwen30b(hardware, 8, &format!("precision: {precision}"), &k)
    };
    let note = |e: &Estimate| {
        e.warnings
            .iter()
            .find(|w| w.contains("blockwise GEMM"))
            .cloned()
    };
    let (blockwise, tensorwise) = (run("h100", "fp8-blockwise"), run("h100", "fp8-tensorwise"));
    let h100 = hw("h100");
    assert_relatively_close(
        h100.gemm_recipe_factor(Precision::Fp8Blockwise),
        1189.0 / 1489.0,
        1e-12,
        "H100 blockwise factor",
    );
    assert_eq!(h100.gemm_recipe_factor(Precision::Fp8Tensorwise), 1.0);
    // The decoder's GEMMs take the factor; the output layer runs in BF16 and does not, so the
    // GEMM term grows by less than 1489 / 1189 but by most of it.
    let gemm_ratio =
        blockwise.performance.breakdown_s.gemm / tensorwise.performance.breakdown_s.gemm;
    assert!(
        gemm_ratio > 1.15 && gemm_ratio < 1489.0 / 1189.0,
        "{gemm_ratio}"
    );
    let said = note(&blockwise).expect("a blockwise answer on H100 says how it is priced");
    assert!(
        said.contains("0.80×") && said.contains("1189 TFLOP/s against 1489"),
        "{said}"
    );
    assert!(note(&tensorwise).is_none());
    // No measured ceilings on the B200 card: both recipes take the fitted FP8 rate.
    let (b_blockwise, b_tensorwise) = (run("b200", "fp8-blockwise"), run("b200", "fp8-tensorwise"));
    assert_relatively_close(
        b_blockwise.performance.breakdown_s.gemm,
        b_tensorwise.performance.breakdown_s.gemm,
        1e-12,
        "B200 blockwise GEMM seconds",
    );
    assert!(note(&b_blockwise).is_none());
}

/// FP8 attention exists only where Megatron-Core passes the flag and Transformer Engine has a
/// kernel for the recipe: the blockwise recipe is built without it (attention stays BF16 and is
/// priced so, with the rule's warning); per-tensor current scaling on Hopper and NVFP4 have no
/// kernel of their own (Transformer Engine stops unless NVTE_DPA_FP8_RECIPE picks one), which
/// the answer says while pricing FP8 attention; delayed scaling on Hopper and current scaling
/// on Blackwell say nothing.
#[test]
fn fp8_attention_is_priced_and_described_where_megatron_and_te_run_it() {
    let k = constants();
    let run = |hardware: &str, precision: &str, flag: bool| {
        qwen30b(
            hardware,
            8,
            &format!("precision: {precision}, fp8_dot_product_attention: {flag}"),
            &k,
        )
    };
    let said = |e: &Estimate, what: &str| e.warnings.iter().any(|w| w.contains(what));
    let blockwise = run("h100", "fp8-blockwise", true);
    assert_eq!(
        blockwise.performance.breakdown_s.attention,
        run("h100", "fp8-blockwise", false)
            .performance
            .breakdown_s
            .attention
    );
    assert!(
        said(&blockwise, "fp8_attention_without_effect"),
        "{:?}",
        blockwise.warnings
    );

    let no_kernel = "No dot product attention backend is available";
    let hopper_current = run("h100", "fp8-tensorwise", true);
    assert!(
        said(&hopper_current, no_kernel),
        "{:?}",
        hopper_current.warnings
    );
    assert!(
        hopper_current.performance.breakdown_s.attention
            < run("h100", "fp8-tensorwise", false)
                .performance
                .breakdown_s
                .attention
    );
    assert!(said(&run("b200", "nvfp4", true), "NVTE_DPA_FP8_RECIPE"));
    for (hardware, precision) in [
        ("h100", "fp8-delayed"),
        ("b200", "fp8-tensorwise"),
        ("b200", "mxfp8"),
    ] {
        let quiet = run(hardware, precision, true);
        assert!(
            !said(&quiet, no_kernel) && !said(&quiet, "fp8_attention_without_effect"),
            "{hardware} {precision}: {:?}",
            quiet.warnings
        );
    }
}

/// Whatever the recipe, Transformer Engine's FP8 attention takes only some head dims (the
/// card's `fp8_attention`): Hopper trains it at 128/128 only, Blackwell up to
/// 192/128. Outside them the answer says the run stops and prices BF16 attention.
#[test]
fn fp8_attention_outside_the_cards_head_dims_is_named_and_priced_in_bf16() {
    let k = constants();
    let run = |model: &str, hardware: &str, precision: &str, flag: bool| {
        let yaml = format!(
            "{{num_gpus: 64, seq_length: 8192, micro_batch_size: 1, global_batch_size: 64,
              tp: 1, pp: 4, ep: 16, precision: {precision}, fp8_dot_product_attention: {flag}}}"
        );
        evaluate(&arch(model), &hw(hardware), &k, &cfg(&yaml))
    };
    let note = |e: &Estimate| {
        e.warnings
            .iter()
            .find(|w| w.contains("FP8 attention trains only with head dims"))
            .cloned()
    };
    // Qwen3-Next's full-attention layers have head dim 256: no FP8 kernel on GB200.
    let next = run("qwen3-next-80b-a3b", "gb200", "mxfp8", true);
    let said = note(&next).expect("head dim 256 on GB200 is named");
    assert!(
        said.contains("256/256") && said.contains("up to 192/128"),
        "{said}"
    );
    assert_eq!(
        next.performance.breakdown_s.attention,
        run("qwen3-next-80b-a3b", "gb200", "mxfp8", false)
            .performance
            .breakdown_s
            .attention
    );
    // DeepSeek-V3's MLA (192/128): Blackwell has the kernel, Hopper's training path does not.
    let blackwell_mla = run("deepseek-v3", "gb200", "mxfp8", true);
    assert!(
        note(&blackwell_mla).is_none(),
        "{:?}",
        blackwell_mla.warnings
    );
    assert!(
        blackwell_mla.performance.breakdown_s.attention
            < run("deepseek-v3", "gb200", "mxfp8", false)
                .performance
                .breakdown_s
                .attention
    );
    let hopper_mla = run("deepseek-v3", "h100", "fp8-delayed", true);
    let said = note(&hopper_mla).expect("MLA on H100 is named");
    assert!(
        said.contains("192/128") && said.contains("exactly 128/128"),
        "{said}"
    );
    // Head dim 128 with delayed scaling on Hopper: the kernel exists, nothing is said.
    assert!(note(&run("qwen3-235b-a22b", "h100", "fp8-delayed", true)).is_none());
}

/// Pipeline stages are the outermost of Megatron's rank order: with 2-GPU stages on 8-GPU
/// nodes, 6 of 7 boundaries stay inside a node (NVLink) and one crosses the network; with
/// 8-GPU stages every boundary crosses.
#[test]
fn pipeline_sends_cross_the_network_only_at_node_edges() {
    let k = constants();
    let h100 = hw("h100");
    let (nic, nvlink) = achieved_nic_and_nvlink(&h100);
    let pp_comm = |gpus: u32, ep: u32| {
        let yaml = format!(
            "{{num_gpus: {gpus}, seq_length: 4096, micro_batch_size: 1,
              global_batch_size: 64, tp: 1, pp: 8, ep: {ep}, precision: bf16}}"
        );
        evaluate(&arch("qwen3-30b-a3b"), &h100, &k, &cfg(&yaml))
            .performance
            .breakdown_s
            .pp_comm
    };
    // One microbatch's activations (4096 tokens x 2048 wide, BF16), forward and backward.
    let bytes = 4096.0 * 2048.0 * 2.0;
    let small_stages = pp_comm(16, 2);
    let expected = 2.0 * bytes * (1.0 / nic + 6.0 / nvlink);
    assert_relatively_close(small_stages, expected, 1e-9, "pipeline sends, 2-GPU stages");
    let node_stages = pp_comm(64, 8);
    let expected = 2.0 * bytes * 7.0 / nic;
    assert_relatively_close(node_stages, expected, 1e-9, "pipeline sends, 8-GPU stages");
    // 3-GPU stages on 8-GPU nodes (Llama-3-8B, 24 GPUs, DP3): a boundary crosses when any
    // sender and its receiver straddle a node edge. Senders→receivers 0-2→3-5 (inside),
    // 3-5→6-8, 6-8→9-11 (cross), 9-11→12-14 (inside), 12-14→15-17, 15-17→18-20 (cross),
    // 18-20→21-23 (inside): 4 crossing, 3 inside.
    let yaml = "{num_gpus: 24, seq_length: 4096, micro_batch_size: 1, global_batch_size: 24,
                 tp: 1, pp: 8, precision: bf16}";
    let straddling = evaluate(&arch("llama3-8b"), &h100, &k, &cfg(yaml))
        .performance
        .breakdown_s
        .pp_comm;
    let bytes = 4096.0 * 4096.0 * 2.0;
    let expected = 2.0 * bytes * (4.0 / nic + 3.0 / nvlink);
    assert_relatively_close(straddling, expected, 1e-9, "pipeline sends, 3-GPU stages");
}

/// An all-to-all across nodes sends only its share for GPUs on other nodes through each GPU's
/// NIC, the node-mates' share over NVLink at the same time: DeepSeek-V3's 16-way all-to-all
/// CP over two 8-GPU H100 nodes runs at (15/16) / max((8/16)/NIC, (7/16)/NVLink), 1.875 NICs'
/// rate, not one NIC's for the whole traffic. Against the same run with a 16-GPU NVLink domain
/// (every byte over NVLink; the by-size table removed from both), the CP time scales by the
/// ratio of the two rates.
#[test]
fn an_all_to_all_across_nodes_sends_only_its_remote_share_over_the_network() {
    let k = constants();
    let mut two_nodes = hw("h100");
    two_nodes.nccl_nvlink_by_size = None;
    let mut one_domain = two_nodes.clone();
    one_domain.nvlink_domain_size = 16;
    let cp_comm = |h: &Hardware| {
        let yaml = "{num_gpus: 16, seq_length: 65536, micro_batch_size: 1, global_batch_size: 1,
                     tp: 1, pp: 1, cp: 16, ep: 16, mtp_num_layers: 0, precision: bf16,
                     cp_comm_type: a2a}";
        evaluate(&arch("deepseek-v3"), h, &k, &cfg(yaml))
            .performance
            .breakdown_s
            .cp_comm
    };
    let (nic, nvlink) = achieved_nic_and_nvlink(&two_nodes);
    let across = (15.0 / 16.0) / (0.5 / nic).max((7.0 / 16.0) / nvlink);
    assert!((across / nic - 1.875).abs() < 1e-9, "{}", across / nic);
    let (a, b) = (cp_comm(&two_nodes), cp_comm(&one_domain));
    assert!(a > 0.0 && b > 0.0);
    assert_relatively_close(
        a / b,
        nvlink / across,
        1e-9,
        "time ratio against rate ratio",
    );
}

/// The allgather dispatcher is one NCCL all-gather (and reduce-scatter) ring over the expert
/// group: across two 8-GPU H100 nodes the ring runs 8 NICs side by side, up to NVLink's rate,
/// which is the rate it has inside one 16-GPU NVLink domain (NCCL latencies zeroed and the
/// by-size table removed, so only the rates differ).
#[test]
fn the_allgather_dispatcher_across_nodes_is_one_ring_at_its_nics_rate() {
    let no_latency = without_nccl_latency(&constants());
    let mut two_nodes = hw("h100");
    two_nodes.nccl_nvlink_by_size = None;
    let mut one_domain = two_nodes.clone();
    one_domain.nvlink_domain_size = 16;
    let ep_comm = |h: &Hardware| {
        let yaml = "{num_gpus: 16, seq_length: 4096, micro_batch_size: 1, global_batch_size: 16,
                     tp: 1, pp: 1, ep: 16, precision: bf16,
                     moe_token_dispatcher_type: allgather}";
        evaluate(&arch("qwen3-30b-a3b"), h, &no_latency, &cfg(yaml))
            .performance
            .breakdown_s
            .ep_comm
    };
    let (nic, nvlink) = achieved_nic_and_nvlink(&two_nodes);
    let ring = (8.0 * nic).min(nvlink);
    let (a, b) = (ep_comm(&two_nodes), ep_comm(&one_domain));
    assert!(a > 0.0 && b > 0.0);
    assert_relatively_close(a / b, nvlink / ring, 1e-9, "time ratio against rate ratio");
}

/// Links so slow that CP's transfers dwarf the attention they would hide behind.
fn slow_links(card: &str) -> Hardware {
    let mut card = hw(card);
    card.nvlink_gb_per_s /= 1e4;
    card.network_gb_per_s /= 1e4;
    card
}

#[test]
fn fp8_attention_rings_carry_fp8_and_return_gradients_by_one_all_to_all() {
    // Transformer Engine's ring under FP8 attention with current scaling: K and V travel as
    // FP8 bytes forward and backward, and dK, dV (FP8) go back by one all-to-all of CP - 1
    // copies of K and V: (1 + 1 + 1) / (2 + 2·2) = half the BF16 ring's bytes, all exposed on
    // links this slow (the all-to-all runs at the NCCL rate, within a few percent of the
    // ring's link rate here).
    let cp = 8;
    let ring = |card: &Hardware, precision: &str, fp8_attention: bool| {
        llama_cp_on(
            card,
            cp,
            &format!("precision: {precision}, fp8_dot_product_attention: {fp8_attention}"),
        )
        .cp_comm
    };
    let h100 = slow_links("h100");
    let ratio = ring(&h100, "fp8-tensorwise", true) / ring(&h100, "fp8-tensorwise", false);
    assert!(
        (0.48..0.58).contains(&ratio),
        "FP8 ring over BF16 ring: {ratio}"
    );
    // MXFP8 attention keeps the ring's tensors BF16.
    let b200 = slow_links("b200");
    let ratio = ring(&b200, "mxfp8", true) / ring(&b200, "mxfp8", false);
    assert_relatively_close(ratio, 1.0, 1e-3, "MXFP8 ring");
}

#[test]
fn offloaded_activations_stall_the_backward_by_their_reload_past_its_compute() {
    // Qwen3-30B-A3B on 8 H100 (TP1, EP8, 4K tokens per microbatch, 4 microbatches) with
    // `expert_fc1` offloaded: each MoE layer sends fc1's input to the host, the dispatched
    // tokens, top-8 copies of 2048 BF16 values per token (32 KiB). On a host link slow enough
    // that every reload outlasts its backward, the stall grows by exactly those bytes over the
    // slower rate: 48 layers × 4 microbatches × 4096 tokens × 32 KiB.
    let run = |host_link_gb_per_s: f64, offload: bool| {
        let mut card = hw("h100");
        card.host_link_gb_per_s = host_link_gb_per_s;
        let modules = if offload { "[expert_fc1]" } else { "[]" };
        let yaml = format!(
            "{{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 32,
              tp: 1, pp: 1, ep: 8, precision: bf16, offload_modules: {modules}}}"
        );
        evaluate(&arch("qwen3-30b-a3b"), &card, &constants(), &cfg(&yaml))
    };
    let efficiency = constants().host_bandwidth_efficiency * 1e9;
    let bytes = 48.0 * 4.0 * 4096.0 * 8.0 * 2048.0 * 2.0;
    let (slow, slower) = (run(0.5, true), run(0.25, true));
    assert_relatively_close(
        slower.performance.breakdown_s.offload_copies - slow.performance.breakdown_s.offload_copies,
        bytes * (1.0 / (0.25 * efficiency) - 1.0 / (0.5 * efficiency)),
        1e-9,
        "reload seconds past the backward",
    );
    // The compute itself is the same with or without the copies.
    let kept = run(0.5, false);
    assert_eq!(kept.performance.breakdown_s.offload_copies, 0.0);
    assert_eq!(
        slow.performance.breakdown_s.gemm,
        kept.performance.breakdown_s.gemm
    );
    // Past the PCIe link the eight GPUs share the node's host memory both ways: on the card's
    // own 64 GB/s links each copy runs at 614.4 GB/s × 0.7 / 16 = 26.9 GB/s, so a link four
    // times faster changes nothing.
    let (pcie, faster) = (run(64.0, true), run(256.0, true));
    assert!(pcie.performance.breakdown_s.offload_copies > 0.0);
    assert_eq!(
        pcie.performance.breakdown_s.offload_copies,
        faster.performance.breakdown_s.offload_copies
    );
    // The memory the copies buy: the same bytes per microbatch in flight, fewer.
    assert!(pcie.memory.peak_gib < kept.memory.peak_gib);
}

#[test]
fn an_activation_offload_fraction_offloads_that_share_of_the_groups() {
    // `activation_offload_fraction` f: the first f of each chunk's groups go to the host, the
    // rest stay. Half of Qwen3-30B-A3B's offloaded fc1 inputs: the saved activations lie
    // halfway between offloading all and none, and on a host link slow enough that every
    // reload stalls, the stall is half the full reload's seconds shorter.
    let run = |fraction: f64| {
        let mut card = hw("h100");
        card.host_link_gb_per_s = 0.5;
        let yaml = format!(
            "{{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 32,
              tp: 1, pp: 1, ep: 8, precision: bf16, offload_modules: [expert_fc1],
              activation_offload_fraction: {fraction}}}"
        );
        evaluate(&arch("qwen3-30b-a3b"), &card, &constants(), &cfg(&yaml))
    };
    let (all, half, none) = (run(1.0), run(0.5), run(0.0));
    let saved = |e: &Estimate| e.memory.breakdown_gib.activations;
    assert!(saved(&all) < saved(&none));
    assert_relatively_close(
        saved(&half),
        (saved(&all) + saved(&none)) / 2.0,
        1e-9,
        "activations at half the groups offloaded",
    );
    assert_eq!(none.performance.breakdown_s.offload_copies, 0.0);
    let bytes = 48.0 * 4.0 * 4096.0 * 8.0 * 2048.0 * 2.0;
    let rate = 0.5 * constants().host_bandwidth_efficiency * 1e9;
    assert_relatively_close(
        all.performance.breakdown_s.offload_copies - half.performance.breakdown_s.offload_copies,
        bytes / 2.0 / rate,
        1e-9,
        "reload seconds of the groups left on the GPU",
    );
}

#[test]
fn grace_host_copies_run_at_the_measured_c2c_rate_until_the_node_memory_binds() {
    // GB300's card carries nvbandwidth's copy-engine rates (one GPU alone: 193.48 GB/s to the
    // host, 211.46 back), which replace 225 GB/s × the streaming efficiency; PCIe cards keep
    // the nominal rate × efficiency. A GPU alone on its tray copies at the slower measured
    // direction; four copying both ways share the tray's 1024 GB/s of LPDDR5X instead.
    let gb300 = hw("gb300");
    let efficiency = constants().host_bandwidth_efficiency;
    assert_eq!(gb300.host_link_bytes_per_s(efficiency), 193.48e9);
    let h100 = hw("h100");
    assert_eq!(
        h100.host_link_bytes_per_s(efficiency),
        64.0 * efficiency * 1e9
    );
    // The reload stall of the same offloaded bytes scales with 1 / rate: on one GPU the link
    // binds, on four the shared memory, 1024 × efficiency / (2 × 4) each way.
    let stall = |gpus: u32, card: &Hardware| {
        let yaml = format!(
            "{{num_gpus: {gpus}, seq_length: 4096, micro_batch_size: 1, global_batch_size: {gpus},
              tp: 1, pp: 1, ep: 1, precision: bf16, offload_modules: [core_attn, attn_proj],
              attention_backend: unfused}}"
        );
        evaluate(&arch("llama3-8b"), card, &constants(), &cfg(&yaml))
            .performance
            .breakdown_s
            .offload_copies
    };
    // Slow each bound a thousand and two thousand times, so that every reload stalls: the
    // stall grows by the same bytes over the bound's rate. One GPU: the measured link,
    // 193.48 GB/s. Four on one tray: the shared memory, 1024 × efficiency / (2 × 4).
    let slowed_link = |factor: f64| {
        let mut card = hw("gb300");
        if let Some(rates) = card.host_copy_gb_per_s.as_mut() {
            rates.gpu_to_host /= factor;
            rates.host_to_gpu /= factor;
        }
        card
    };
    let slowed_memory = |factor: f64| {
        let mut card = hw("gb300");
        card.host_memory_gb_per_s /= factor;
        card
    };
    let per_link_second = stall(1, &slowed_link(2000.0)) - stall(1, &slowed_link(1000.0));
    let per_memory_second = stall(4, &slowed_memory(2000.0)) - stall(4, &slowed_memory(1000.0));
    let memory_share = 1024.0 * efficiency / 8.0;
    assert_relatively_close(
        per_memory_second / per_link_second,
        193.48 / memory_share,
        1e-9,
        "four GPUs' shared memory against one GPU's measured link",
    );
}

#[test]
fn offload_copies_run_at_the_measured_two_way_rate_where_a_card_has_one() {
    // H200's card: 55.17 / 55.09 GB/s one way and 41.60 each way with both directions at once
    // (pinned copies on one machine). Activation offloading's steady state copies both ways,
    // the offloaded optimizer's phases one way at a time; a card with no two-way figure takes
    // its link as full duplex.
    let efficiency = constants().host_bandwidth_efficiency;
    let h200 = hw("h200");
    assert_eq!(h200.host_link_bytes_per_s(efficiency), 55.09e9);
    assert_eq!(h200.host_link_both_ways_bytes_per_s(efficiency), 41.60e9);
    let gb300 = hw("gb300");
    assert_eq!(
        gb300.host_link_both_ways_bytes_per_s(efficiency),
        gb300.host_link_bytes_per_s(efficiency)
    );
    // A two-way figure above the one-way rate is capped there; one that is not a positive rate
    // is a card problem.
    let with_two_way = |each_way: f64| {
        let mut card = hw("h200");
        if let Some(rates) = card.host_copy_gb_per_s.as_mut() {
            rates.each_way_both_directions = Some(each_way);
        }
        card
    };
    assert_eq!(
        with_two_way(80.0).host_link_both_ways_bytes_per_s(efficiency),
        55.09e9
    );
    assert!(h200.problems().is_empty(), "{:?}", h200.problems());
    let malformed = with_two_way(-1.0);
    let problems = malformed.problems();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("host_copy_gb_per_s") && p.contains("each_way_both_directions")),
        "{problems:?}"
    );
    // Like the other tables, malformed measured rates are not read: the nominal link answers.
    assert_eq!(
        malformed.host_link_both_ways_bytes_per_s(efficiency),
        64.0 * efficiency * 1e9
    );
    // One GPU's reload stall grows by the same bytes over the two-way rate.
    let stall = |card: &Hardware| {
        let yaml = "{num_gpus: 1, seq_length: 4096, micro_batch_size: 1, global_batch_size: 1,
              tp: 1, pp: 1, ep: 1, precision: bf16, offload_modules: [core_attn, attn_proj],
              attention_backend: unfused}";
        evaluate(&arch("llama3-8b"), card, &constants(), &cfg(yaml))
            .performance
            .breakdown_s
            .offload_copies
    };
    let per_second = stall(&with_two_way(41.60 / 2000.0)) - stall(&with_two_way(41.60 / 1000.0));
    let per_second_one_way = {
        let slow = |factor: f64| {
            let mut card = hw("h200");
            if let Some(rates) = card.host_copy_gb_per_s.as_mut() {
                rates.each_way_both_directions = None;
                rates.gpu_to_host = 55.09 / factor;
                rates.host_to_gpu = 55.09 / factor;
            }
            card
        };
        stall(&slow(2000.0)) - stall(&slow(1000.0))
    };
    assert_relatively_close(
        per_second / per_second_one_way,
        55.09 / 41.60,
        1e-9,
        "the two-way rate against the one-way rate",
    );
}

#[test]
fn a_reload_next_to_another_offloaded_module_has_nothing_to_hide_behind() {
    // Megatron-Core reloads a group when the backward leaves the next offloaded one: core
    // attention's inputs come back after `attn_proj`'s backward and are needed at once when
    // both are offloaded, but behind the MoE block's backward when only core attention and the
    // experts are. Qwen3-30B-A3B on 8 H100 at 4K.
    let run = |modules: &str| {
        let yaml = format!(
            "{{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 32,
              tp: 1, pp: 1, ep: 8, precision: bf16, offload_modules: {modules}}}"
        );
        evaluate(
            &arch("qwen3-30b-a3b"),
            &hw("h100"),
            &constants(),
            &cfg(&yaml),
        )
    };
    let pair = run("[core_attn, attn_proj, expert_fc1]");
    let apart = run("[core_attn, expert_fc1]");
    let stall = |e: &Estimate| e.performance.breakdown_s.offload_copies;
    assert!(
        stall(&pair) > stall(&apart),
        "{} vs {}",
        stall(&pair),
        stall(&apart)
    );
    assert!(pair.memory.breakdown_gib.activations < apart.memory.breakdown_gib.activations);
}

/// Packed sequences keep the price of one causal sequence per sample, and the answer says that
/// its attention term is an upper bound for packed documents, with that term's seconds.
#[test]
fn packed_sequences_say_their_attention_is_priced_as_whole_sequences() {
    let k = constants_with_bands();
    let note = |e: &Estimate| {
        e.warnings
            .iter()
            .find(|w| w.starts_with("sequence packing"))
            .cloned()
    };
    let plain = qwen30b("h100", 8, "", &k);
    let packed = qwen30b("h100", 8, "sequence_packing: true", &k);
    assert_eq!(note(&plain), None);
    let text = note(&packed).expect("a packed run carries the note");
    assert!(
        text.contains(&format!(
            "{:.2} s",
            packed.performance.breakdown_s.attention
        )) && text.contains("4096-token"),
        "{text}"
    );
    // The note changes no number.
    assert_eq!(
        packed.performance.step_time_s,
        plain.performance.step_time_s
    );
}

#[test]
fn the_moe_block_is_its_parts_split_forward_and_backward_before_overlap() {
    let k = constants();
    let plain = qwen30b("h100", 8, "precision: bf16", &k);
    let block = plain
        .performance
        .moe_block
        .expect("an MoE model has an MoE block");
    let parts = block.routed_expert_gemm_s
        + block.shared_expert_gemm_s
        + block.elementwise_s
        + block.all_to_all_s;
    assert_relatively_close(block.forward_s + block.backward_s, parts, 1e-12, "parts");
    // The GEMMs' backward is two passes of the forward's FLOPs; of the four transfers (BF16
    // tokens both ways) the forward holds the dispatch and the combine.
    let compute = block.routed_expert_gemm_s + block.shared_expert_gemm_s + block.elementwise_s;
    assert_relatively_close(
        block.forward_s,
        compute / 3.0 + block.all_to_all_s / 2.0,
        1e-9,
        "forward",
    );
    assert!(block.all_to_all_s > 0.0 && block.routed_expert_gemm_s > 0.0);
    // Qwen3-30B-A3B has no shared expert.
    assert_eq!(block.shared_expert_gemm_s, 0.0);
    // Alone means before overlap: 1F1B all-to-all overlap hides part of the step's exposed
    // all-to-all, not the block's transfers.
    let overlapped = qwen30b(
        "h100",
        8,
        "precision: bf16, overlap_moe_expert_parallel_comm: true",
        &k,
    );
    assert_eq!(overlapped.performance.moe_block, Some(block.clone()));
    assert!(
        overlapped.performance.breakdown_s.ep_comm < plain.performance.breakdown_s.ep_comm,
        "{} vs {}",
        overlapped.performance.breakdown_s.ep_comm,
        plain.performance.breakdown_s.ep_comm
    );
    // The routed experts' FLOPs per token at the time model's grouped-GEMM rate: doubling
    // the tokens per expert doubles the FLOPs and raises the rate, so the GEMM time less than
    // doubles.
    let long = evaluate(
        &arch("qwen3-30b-a3b"),
        &hw("h100"),
        &k,
        &cfg(
            "{num_gpus: 8, seq_length: 8192, micro_batch_size: 1, global_batch_size: 512,
              tp: 1, pp: 1, ep: 8, precision: bf16}",
        ),
    );
    let long_block = long.performance.moe_block.expect("block");
    let ratio = long_block.routed_expert_gemm_s / block.routed_expert_gemm_s;
    assert!(ratio > 1.0 && ratio < 2.0, "{ratio}");
    // A dense model has none.
    let dense = evaluate(
        &arch("llama3-8b"),
        &hw("h100"),
        &k,
        &cfg("{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 64, tp: 1, pp: 1}"),
    );
    assert!(dense.performance.step_time_s > 0.0);
    assert_eq!(dense.performance.moe_block, None);
}

#[test]
fn the_moe_block_quotes_the_single_layer_measurements_of_its_precision() {
    let k = constants_with_bands();
    let block = |hardware: &str, precision: &str| {
        qwen30b(hardware, 8, &format!("precision: {precision}"), &k)
            .performance
            .moe_block
            .expect("an MoE model has an MoE block")
            .measured_against
            .expect("the generated bands hold Megatron-LM's MoE layer test")
    };
    let bf16 = block("h100", "bf16");
    assert_eq!(
        (bf16.gpu.as_str(), bf16.precision.as_str()),
        ("h100", "bf16")
    );
    assert!(bf16.rows >= 3);
    assert!(bf16.low_ratio <= bf16.median_ratio && bf16.median_ratio <= bf16.high_ratio);
    let fp8 = block("h100", "fp8-blockwise");
    assert_eq!(fp8.precision, "fp8");
    // Measured only on H100: another GPU quotes those, naming them.
    let elsewhere = block("gb200", "bf16");
    assert_eq!(elsewhere, bf16);
    assert!(elsewhere.text().contains("on h100"), "{}", elsewhere.text());
    // Without the generated table there is nothing to quote.
    let bare = qwen30b("h100", 8, "precision: bf16", &constants());
    assert_eq!(
        bare.performance.moe_block.and_then(|b| b.measured_against),
        None
    );
}

#[test]
fn host_time_shows_in_full_in_moe_layers_and_beyond_the_gpu_work_in_dense_ones() {
    // An MoE layer keeps the GPU waiting on the CPU once per layer and microbatch (its small
    // kernels, the dropless dispatch's sync of token counts): its host time shows whatever the
    // layer's size. A dense layer the CPU issues ahead of the GPU: only what its issue time
    // exceeds of the layer's GPU work shows.
    let k = constants();
    let per_layer_microbatch = |e: &Estimate, layers: u32| {
        let microbatches = 512.0 / e.layout.dp as f64;
        e.performance.breakdown_s.host_overhead / (layers as f64 * microbatches)
    };
    let dense = |seq: u32| {
        let yaml = format!(
            "{{num_gpus: 8, seq_length: {seq}, micro_batch_size: 1, global_batch_size: 512,
              tp: 1, pp: 1, precision: bf16}}"
        );
        evaluate(&arch("llama3-8b"), &hw("h100"), &k, &cfg(&yaml))
    };
    // Llama-3-8B layers at 4K run far longer on the GPU than the CPU takes to issue them.
    let long = dense(4096);
    assert_eq!(long.performance.breakdown_s.host_overhead, 0.0);
    assert!(long.performance.breakdown_s.gemm > 0.0);
    // A 512-wide layer at 1K tokens runs shorter on the GPU than its issue time: the
    // difference shows, never more than the whole host time.
    let tiny: moe_skills::model::Architecture = serde_yaml::from_str(
        "{num_layers: 4, hidden_size: 512, vocab_size: 32000, num_attention_heads: 8,
          num_query_groups: 8, head_dim: 64, ffn_hidden_size: 2048}",
    )
    .unwrap();
    let yaml = "{num_gpus: 8, seq_length: 1024, micro_batch_size: 1, global_batch_size: 512,
                 tp: 1, pp: 1, precision: bf16}";
    let short = evaluate(&tiny, &hw("h100"), &k, &cfg(yaml));
    let shown = per_layer_microbatch(&short, 4);
    assert!(shown > 0.0 && shown < k.host_seconds_per_layer, "{shown}");
    // The step's GPU work per layer and microbatch also holds the output layer and loss,
    // so it bounds the layers' own from above.
    let b = &short.performance.breakdown_s;
    let gpu_per_layer = (b.gemm + b.attention + b.elementwise + b.tp_comm + b.cp_comm)
        / (4.0 * 512.0 / short.layout.dp as f64);
    assert!(
        shown >= k.host_seconds_per_layer - gpu_per_layer,
        "{shown} vs {} - {gpu_per_layer}",
        k.host_seconds_per_layer
    );
    // An MoE layer keeps its whole host time, however long its GPU work.
    let moe = qwen30b("h100", 8, "precision: bf16", &k);
    assert_relatively_close(
        per_layer_microbatch(&moe, 48),
        k.host_seconds_per_layer,
        1e-9,
        "MoE host time",
    );
}

#[test]
fn a_model_without_experts_quotes_the_dense_runs_of_its_length_beside_its_band() {
    // Every run behind the regime bands trains an MoE model; NeMo's dense long-sequence series
    // from 16K on is the bands' `dense_long_sequence` condition, Megatron-Bridge's Llama rows
    // below it `dense_pretraining`, quoted beside the band of a dense answer of that length.
    use moe_skills::model::uncertainty::RunCondition;
    let k = constants_with_bands();
    let dense = |seq: u32, gpus: u32, cp: u32| {
        let yaml = format!(
            "{{num_gpus: {gpus}, seq_length: {seq}, micro_batch_size: 1, global_batch_size: 4,
              tp: 4, cp: {cp}, precision: fp8-delayed}}"
        );
        evaluate(&arch("llama3-8b"), &hw("b200"), &k, &cfg(&yaml))
    };
    let long = dense(1_048_576, 256, 16);
    let band = long.performance.uncertainty.as_ref().expect("a band");
    let condition = band.condition.as_ref().expect("the dense runs quoted");
    assert_eq!(condition.condition, RunCondition::DenseLongSequence);
    assert!(condition.rows >= 14, "{condition:?}");
    // Those runs all ran slower than predicted.
    assert!(condition.high_ratio < 1.0, "{condition:?}");
    let text = band.text();
    assert!(
        text.contains("models without experts at 16K tokens or more"),
        "{text}"
    );
    // At 8K a dense run quotes Megatron-Bridge's Llama pre-training rows instead: current
    // software, which ran on both sides of the prediction, not slower the way those did.
    let short = dense(8192, 8, 1);
    let short_band = short.performance.uncertainty.as_ref().expect("a band");
    let short_condition = short_band
        .condition
        .as_ref()
        .expect("the 8K dense runs quoted");
    assert_eq!(short_condition.condition, RunCondition::DensePretraining);
    assert!(short_condition.rows >= 30, "{short_condition:?}");
    assert!(
        short_condition.low_ratio < 1.0 && short_condition.high_ratio > 1.0,
        "{short_condition:?}"
    );
    assert!(
        short_band
            .text()
            .contains("Megatron-Bridge's Llama pre-training rows"),
        "{}",
        short_band.text()
    );
    // Nor is an MoE model's answer at any length.
    let moe = qwen30b("b200", 8, "precision: mxfp8", &k);
    let moe_band = moe.performance.uncertainty.as_ref().expect("a band");
    assert!(moe_band.condition.is_none(), "{moe_band:?}");
}
