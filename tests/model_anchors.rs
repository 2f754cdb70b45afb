//! Sanity anchors from the long-context skill (not fitted per row): layouts that are known
//! to fit or not fit, and DeepSeek-V3's flat throughput under CP scaling.

mod model_support;

use model_support::{arch, cfg, constants, hw};
use moe_skills::model::{evaluate, Estimate};

fn run(model: &str, hardware: &str, yaml: &str) -> Estimate {
    evaluate(&arch(model), &hw(hardware), &constants(), &cfg(yaml))
}

fn dsv3_long(seq: u64, cp: u32, gpus: u32, gbs: u32) -> Estimate {
    // A CP group that leaves the 8-GPU node runs all-to-all inside it and a ring across
    // nodes (`a2a+p2p`), as Megatron-Bridge's performance guide prefers for big CP.
    let comm = if cp > 8 {
        format!(
            "cp_comm_type: a2a+p2p, hierarchical_context_parallel_sizes: [8, {}]",
            cp / 8
        )
    } else {
        "cp_comm_type: p2p".to_string()
    };
    dsv3_long_with(seq, cp, gpus, gbs, &comm)
}

fn dsv3_long_with(seq: u64, cp: u32, gpus: u32, gbs: u32, comm: &str) -> Estimate {
    run(
        "deepseek-v3",
        "h100",
        &format!(
            "{{num_gpus: {gpus}, seq_length: {seq}, global_batch_size: {gbs}, precision: fp8-blockwise,
              tp: 1, cp: {cp}, ep: 32, pp: 8, vpp: 4,
              recompute_granularity: selective, recompute_modules: [mla_up_proj, layernorm, moe, mlp],
              optimizer_cpu_offload: true, use_precision_aware_optimizer: true,
              moe_token_dispatcher_type: flex, moe_flex_dispatcher_backend: deepep, {comm}}}"
        ),
    )
}

#[test]
fn dsv3_128k_on_256_h100_fits() {
    let e = dsv3_long(131072, 32, 256, 64);
    assert!(e.violations.is_empty(), "{:?}", e.violations);
    assert!(e.fits);
    assert!(e.memory.peak_gib < 79.6, "{}", e.memory.peak_gib);
}

#[test]
fn dsv3_256k_on_512_h100_fits_with_edp2() {
    let e = dsv3_long(262144, 64, 512, 64);
    assert_eq!(e.layout.edp, 2);
    assert!(e.violations.is_empty(), "{:?}", e.violations);
    assert!(e.fits);
}

#[test]
fn dsv3_long_context_throughput_in_published_band() {
    // Published ~300-320 TFLOP/s from 4K to 256K. The model reproduces it at 64K and 128K
    // (attention-dominated); at 4K-32K it under-predicts (known gap, docs/validation.md), so
    // here we check the long end and that throughput does not fall as CP grows.
    let mut values = Vec::new();
    for (seq, cp) in [
        (4096u64, 1u32),
        (16384, 4),
        (32768, 8),
        (65536, 16),
        (131072, 32),
    ] {
        let dp = 256 / (cp * 8);
        let e = dsv3_long(seq, cp, 256, 32 * dp);
        assert!(e.violations.is_empty(), "{seq}: {:?}", e.violations);
        values.push(e.performance.model_tflops_per_gpu);
    }
    for v in &values[3..] {
        assert!((225.0..=400.0).contains(v), "{values:?}");
    }
    for pair in values.windows(2) {
        assert!(
            pair[1] >= pair[0] * 0.9,
            "throughput falls with CP: {values:?}"
        );
    }
}

#[test]
fn dsv3_plain_ring_across_nodes_is_bound_by_its_transfers() {
    // A p2p ring over 32 ranks on four nodes circulates MLA's per-head K and V (80 KB per
    // token) over InfiniBand every step: the measured ~300 TFLOP/s is out of its reach.
    let ring = dsv3_long_with(131072, 32, 256, 64, "cp_comm_type: p2p");
    let hierarchical = dsv3_long(131072, 32, 256, 64);
    let (r, h) = (&ring.performance, &hierarchical.performance);
    assert!(
        r.breakdown_s.cp_comm > 0.5 * r.step_time_s,
        "{:?}",
        r.breakdown_s
    );
    assert!(r.model_tflops_per_gpu < 0.5 * h.model_tflops_per_gpu);
}

fn qwen235_128k_h100(recompute: &str) -> Estimate {
    run(
        "qwen3-235b-a22b",
        "h100",
        &format!(
            "{{num_gpus: 256, seq_length: 131072, global_batch_size: 64, precision: fp8-blockwise,
              tp: 4, cp: 8, pp: 8, vpp: 4, ep: 8, {recompute}
              optimizer_cpu_offload: true, use_precision_aware_optimizer: true}}"
        ),
    )
}

#[test]
fn qwen3_235b_128k_h100_fits_with_selective_recompute() {
    let e =
        qwen235_128k_h100("recompute_granularity: selective, recompute_modules: [layernorm, moe],");
    assert!(e.fits, "{:?} peak {}", e.violations, e.memory.peak_gib);
    assert!(
        e.warnings.iter().any(|w| w.contains("uneven")),
        "{:?}",
        e.warnings
    );
}

#[test]
fn qwen3_235b_128k_h100_without_recompute_does_not_fit() {
    let with =
        qwen235_128k_h100("recompute_granularity: selective, recompute_modules: [layernorm, moe],");
    let without = qwen235_128k_h100("");
    assert!(!without.fits);
    assert!(without.violations.iter().any(|v| v.code == "out_of_memory"));
    assert!(without.memory.breakdown_gib.activations > with.memory.breakdown_gib.activations);
}

#[test]
fn qwen3_235b_128k_gb200_uneven_evaluates_without_violations() {
    let e = run(
        "qwen3-235b-a22b",
        "gb200",
        "{num_gpus: 128, seq_length: 131072, global_batch_size: 64, precision: bf16,
          tp: 4, cp: 4, ep: 32, pp: 4, vpp: 12,
          recompute_granularity: selective, recompute_modules: [layernorm, moe]}",
    );
    assert!(e.violations.is_empty(), "{:?}", e.violations);
    assert!(e.warnings.iter().any(|w| w.contains("uneven")));
    assert_eq!(e.layout.layers_per_virtual_stage.iter().sum::<u32>(), 94);
    assert_eq!(e.layout.layers_per_virtual_stage.len(), 48);
    assert!(e.performance.model_tflops_per_gpu > 0.0);
}

#[test]
fn embedding_and_loss_take_a_layer_slot_each_in_the_pipeline_split() {
    // Qwen3-235B-A22B: 94 layers + embedding + loss = 96 slots over PP8 × VPP4 = 32 stages,
    // 3 slots each: the first and last virtual stages build 2 decoder layers, the rest 3.
    let e = run(
        "qwen3-235b-a22b",
        "h100",
        "{num_gpus: 256, seq_length: 4096, global_batch_size: 8192, precision: fp8-tensorwise,
          tp: 2, pp: 8, vpp: 4, ep: 32, sequence_parallel: true,
          account_for_embedding_in_pipeline_split: true,
          account_for_loss_in_pipeline_split: true}",
    );
    let stages = &e.layout.layers_per_virtual_stage;
    assert_eq!(stages.len(), 32);
    assert_eq!(stages.iter().sum::<u32>(), 94);
    assert_eq!((stages[0], stages[31]), (2, 2));
    assert!(stages[1..31].iter().all(|&n| n == 3), "{stages:?}");
    // The split is what Megatron builds from these settings: no uneven-split warning.
    assert!(
        !e.warnings.iter().any(|w| w.contains("uneven")),
        "{:?}",
        e.warnings
    );
    // Only the embedding slot: 95 slots do not divide by 32, so the model warns.
    let e = run(
        "qwen3-235b-a22b",
        "h100",
        "{num_gpus: 256, seq_length: 4096, global_batch_size: 8192, precision: fp8-tensorwise,
          tp: 2, pp: 8, vpp: 4, ep: 32, account_for_embedding_in_pipeline_split: true}",
    );
    assert_eq!(e.layout.layers_per_virtual_stage.iter().sum::<u32>(), 94);
    assert!(e.warnings.iter().any(|w| w.contains("embedding/loss slot")));
}
