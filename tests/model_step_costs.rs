//! Once-per-step costs against hand-computed values: the CPU-offloaded optimizer step priced
//! from the same shard the memory model offloads, and the edge DDP bucket that no compute hides.

mod model_support;

use model_support::{arch, cfg, constants, hw};
use moe_skills::model::{evaluate, Estimate};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

#[test]
fn offloaded_step_is_copies_plus_the_shared_host_step_of_the_offloaded_shard() {
    let k = constants();
    let h100 = hw("h100");
    let base = "num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 64,
        tp: 1, pp: 1, ep: 8, use_precision_aware_optimizer: true, optimizer_cpu_offload: true";
    let run = |fraction: f64| {
        evaluate(
            &arch("qwen3-30b-a3b"),
            &h100,
            &k,
            &cfg(&format!(
                "{{{base}, optimizer_offload_fraction: {fraction}}}"
            )),
        )
    };
    let on_gpu = run(0.0);
    let offloaded = run(1.0);
    // Fraction 0 keeps fp32 master + two fp32 moments (12 B) per shard parameter on the GPU:
    // the memory model's shard.
    let shard = on_gpu.memory.breakdown_gib.optimizer * GIB / 12.0;
    assert!(shard > 1e8);
    assert_eq!(offloaded.memory.breakdown_gib.optimizer, 0.0);
    let eff = k.host_bandwidth_efficiency;
    // Gradients down and parameters up, 4 B each way over PCIe.
    let copies = 2.0 * shard * 4.0 / (h100.host_link_gb_per_s * 1e9 * eff);
    // The host AdamW: the 8 GPUs of the node stream 36 B per parameter at once through its
    // memory, and each rank steps no faster than one rank's measured rate; the slower wins.
    let node_bound = shard * 8.0 * 36.0 / (h100.host_memory_gb_per_s * 1e9 * eff);
    let rank_bound = shard / k.host_optimizer_params_per_s_per_rank;
    let host = node_bound.max(rank_bound);
    // With the card's rate, on a DGX H100 host the rank's own rate binds.
    assert!(rank_bound > node_bound, "{rank_bound} vs {node_bound}");
    // The GPU step it replaces: 34 B per parameter over HBM; the returned fp32 values are
    // written into the bf16 weights (read 4, write 2).
    let hbm = h100.hbm_tb_per_s * 1e12 * h100.efficiency.hbm;
    let gpu = shard * 34.0 / hbm;
    let write_back = shard * 6.0 / hbm;
    let delta =
        offloaded.performance.breakdown_s.optimizer - on_gpu.performance.breakdown_s.optimizer;
    let expected = copies + host + write_back - gpu;
    assert!(
        (delta - expected).abs() < 1e-9 * expected.abs().max(1.0),
        "{delta} vs {expected}"
    );
    // Pipelining the copies leaves the longest of the three.
    let piped = evaluate(
        &arch("qwen3-30b-a3b"),
        &h100,
        &k,
        &cfg(&format!(
            "{{{base}, optimizer_offload_fraction: 1.0, overlap_cpu_optimizer_d2h_h2d: true}}"
        )),
    );
    let saved =
        offloaded.performance.breakdown_s.optimizer - piped.performance.breakdown_s.optimizer;
    assert!((saved - copies).abs() < 1e-9, "{saved} vs {copies}");
    // The answer reports both bounds of the host step, and none without offload.
    let Some(bounds) = offloaded.performance.host_optimizer else {
        panic!("an offloaded step reports its host bounds");
    };
    assert!((bounds.offloaded_params / shard - 1.0).abs() < 1e-9);
    assert!((bounds.rank_rate_bound_s - rank_bound).abs() < 1e-9);
    assert!((bounds.node_bandwidth_bound_s - node_bound).abs() < 1e-9);
    assert!((bounds.copy_s - copies / 2.0).abs() < 1e-9);
    assert_eq!(on_gpu.performance.host_optimizer, None);
    // The host step's pace depends on the threads each rank gets: the answer says so, with
    // what the bandwidth bound would leave, and only when something is offloaded.
    let names_the_rate = |e: &Estimate| {
        e.warnings.iter().any(|w| {
            w.starts_with("optimizer CPU offload")
                && w.contains("host_optimizer_params_per_s_per_rank")
                && w.contains(&format!("it would take {node_bound:.2} s"))
        })
    };
    assert!(names_the_rate(&offloaded) && names_the_rate(&piped));
    assert!(!names_the_rate(&on_gpu), "{:?}", on_gpu.warnings);
}

#[test]
fn peft_drops_the_frozen_weights_gradients_optimizer_and_weight_gradient_gemms() {
    let k = constants();
    let h100 = hw("h100");
    let base = "num_gpus: 16, seq_length: 4096, micro_batch_size: 1, global_batch_size: 64,
        tp: 2, pp: 1, ep: 8";
    let run = |peft: &str| {
        evaluate(
            &arch("qwen3-30b-a3b"),
            &h100,
            &k,
            &cfg(&format!("{{{base}, peft: {peft}}}")),
        )
    };
    let full = run("false");
    let lora = run("lora");
    let (f, l) = (&full.memory.breakdown_gib, &lora.memory.breakdown_gib);
    assert!(f.gradients > 1.0 && f.optimizer > 1.0);
    assert_eq!((l.gradients, l.optimizer), (0.0, 0.0));
    // The frozen weights and the activations the backward needs stay.
    assert_eq!(l.weights, f.weights);
    assert_eq!(l.activations, f.activations);
    // Forward and input-gradient GEMMs run, the weight-gradient third does not.
    let (ft, lt) = (&full.performance.breakdown_s, &lora.performance.breakdown_s);
    assert!((lt.gemm - ft.gemm * 2.0 / 3.0).abs() < 1e-9 * ft.gemm.max(1.0));
    assert_eq!(lt.dp_comm, 0.0);
    assert!(lt.optimizer < ft.optimizer);
    assert!(lora.performance.step_time_s < full.performance.step_time_s);
    // A recomputed forward is the same with frozen weights.
    let recomputed = |peft: &str| {
        evaluate(
            &arch("qwen3-30b-a3b"),
            &h100,
            &k,
            &cfg(&format!(
                "{{{base}, peft: {peft}, recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1}}"
            )),
        )
        .performance
        .breakdown_s
        .recompute
    };
    assert!(recomputed("false") > 0.0);
    assert_eq!(recomputed("lora"), recomputed("false"));
    // The answer says what it left out.
    assert!(lora.warnings.iter().any(|w| w.starts_with("PEFT")));
    assert!(!full.warnings.iter().any(|w| w.starts_with("PEFT")));
}

/// A dense 70B at TP8 DP2 over two H100 nodes, 32 microbatches (`extra` adds settings): the
/// estimate, the parameters on one GPU, and the seconds its data-parallel traffic takes at
/// the network's large-message rate (fp32 gradients reduce-scattered and bf16 weights
/// gathered over DP 2, half of each crossing).
fn dense_70b_over_two_nodes(extra: &str) -> (Estimate, f64, f64) {
    let h100 = hw("h100");
    let e = evaluate(
        &arch("llama3-70b"),
        &h100,
        &constants(),
        &cfg(&format!(
            "{{num_gpus: 16, seq_length: 4096, micro_batch_size: 1, global_batch_size: 64,
              tp: 8, pp: 1, precision: bf16{extra}}}"
        )),
    );
    let local = e.memory.breakdown_gib.weights * GIB / 2.0;
    let bw = h100.network_gb_per_s * 1e9 * h100.efficiency.collective_network;
    let traffic = local * (4.0 + 2.0) * 0.5 / bw;
    (e, local, traffic)
}

/// NCCL's latency for each exposed call of that group (one GPU of it per node, one ring
/// step): Simple's 8.4 + 14 = 22.4 us beats LL128 (14 + 8.5 us at 0.92 of the rate) and PAT
/// (8 + 4 + 2 x 2.8 = 17.6 us at 0.75 of it) at these messages of 80 MB and more.
const CALL_LATENCY_S: f64 = 22.4e-6;

#[test]
fn the_edge_gradient_bucket_stays_exposed_however_many_microbatches() {
    // 32 microbatches hide everything but the last reduce-scatter bucket and the first
    // all-gather bucket, each paying one call's latency.
    let k = constants();
    let (e, local, traffic) = dense_70b_over_two_nodes("");
    let bucket = k
        .ddp_bucket_params_min
        .max(k.ddp_bucket_params_per_dp_rank * 2.0);
    let expected = traffic * bucket / local + 2.0 * CALL_LATENCY_S;
    let dp = e.performance.breakdown_s.dp_comm;
    assert!((dp - expected).abs() < 1e-9, "{dp} vs {expected}");
}

#[test]
fn a_configured_bucket_sets_what_stays_exposed_and_no_overlap_makes_one_bucket() {
    let (base, local, traffic) = dense_70b_over_two_nodes("");
    // Megatron-Bridge's 128 Mi-parameter buckets (CommOverlapConfig) leave 128 Mi of the
    // gradients and weights exposed, not the 40M default.
    let (bigger, ..) = dense_70b_over_two_nodes(", ddp_bucket_size: 134217728");
    let bigger = bigger.performance.breakdown_s.dp_comm;
    let expected = traffic * 134_217_728.0 / local + 2.0 * CALL_LATENCY_S;
    assert!((bigger - expected).abs() < 1e-9, "{bigger} vs {expected}");
    assert!(bigger > base.performance.breakdown_s.dp_comm);
    // Four buckets (--ddp-num-buckets 4): a quarter of the rank's parameters each.
    let (four, ..) = dense_70b_over_two_nodes(", ddp_num_buckets: 4");
    let four = four.performance.breakdown_s.dp_comm;
    let expected = traffic * (local / 4.0).floor() / local + 2.0 * CALL_LATENCY_S;
    assert!((four - expected).abs() < 1e-9, "{four} vs {expected}");
    // Without overlap_grad_reduce the whole buffer is one bucket and nothing is hidden.
    let (serial, ..) =
        dense_70b_over_two_nodes(", overlap_grad_reduce: false, overlap_param_gather: false");
    let serial = serial.performance.breakdown_s.dp_comm;
    let expected = traffic + 2.0 * CALL_LATENCY_S;
    assert!((serial - expected).abs() < 1e-9, "{serial} vs {expected}");
}

#[test]
fn megatron_fsdp_reduce_scatters_sharded_gradients_every_microbatch() {
    // Llama-3-70B over two nodes, DP 2, 32 microbatches, no overlap so every byte shows.
    // Megatron-FSDP's optim_grads and optim_grads_params reduce-scatter the gradients after
    // every backward (`grad_reduce_every_bprop`); optim reduces once, on the last
    // microbatch; no_shard all-reduces once (twice a reduce-scatter's bytes) and gathers
    // nothing.
    let dp = |strategy: &str| {
        dense_70b_over_two_nodes(&format!(
            ", use_megatron_fsdp: true, data_parallel_sharding_strategy: {strategy}, \
             overlap_grad_reduce: false, overlap_param_gather: false"
        ))
        .0
        .performance
        .breakdown_s
        .dp_comm
    };
    let reduce_once = dp("no_shard") / 2.0;
    let optim = dp("optim");
    let gather = optim - reduce_once;
    assert!(gather > 0.0, "optim gathers its parameters: {gather}");
    let microbatches = 32.0;
    let expected = microbatches * reduce_once + gather;
    let optim_grads = dp("optim_grads");
    assert!(
        (optim_grads - expected).abs() < 1e-9 * expected,
        "{optim_grads} vs {expected}"
    );
}

#[test]
fn without_a_sharded_optimizer_every_rank_steps_all_its_parameters() {
    // Megatron-Core's Float16OptimizerWithFloat16Params steps every local parameter; the
    // distributed optimizer steps 1/DP of them. Over DP 2 the unsharded step costs more; with
    // one data-parallel rank the two are the same.
    let optimizer = |extra: &str| {
        dense_70b_over_two_nodes(extra)
            .0
            .performance
            .breakdown_s
            .optimizer
    };
    let sharded = optimizer(", use_distributed_optimizer: true");
    let unsharded = optimizer(", use_distributed_optimizer: false");
    assert!(unsharded > 1.3 * sharded, "{unsharded} vs {sharded}");
    let one_rank = |sharded: bool| {
        evaluate(
            &arch("llama3-70b"),
            &hw("h100"),
            &constants(),
            &cfg(&format!(
                "{{num_gpus: 8, seq_length: 4096, micro_batch_size: 1, global_batch_size: 64,
                  tp: 8, pp: 1, precision: bf16, use_distributed_optimizer: {sharded}}}"
            )),
        )
        .performance
        .breakdown_s
        .optimizer
    };
    assert_eq!(one_rank(true), one_rank(false));
}
