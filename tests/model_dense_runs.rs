//! What dense pre-training recipes run with and the model now prices: Transformer Engine's
//! TP communication overlap, Megatron-Core's whole-layer activation offloading
//! (`cpu_offloading`), and a pipeline split that gives the embedding and the loss a stage
//! slot each.

mod model_support;

use model_support::{arch, cfg, constants, hw};
use moe_skills::model::{evaluate, Estimate};

/// Llama-3-70B FP8 on 64 H100 as Megatron-Bridge's performance config runs it: TP4 PP8 VP5,
/// sequence parallel, one 8K sequence per microbatch.
fn llama70b_h100(extra: &str) -> Estimate {
    evaluate(
        &arch("llama3-70b"),
        &hw("h100"),
        &constants(),
        &cfg(&format!(
            "{{num_gpus: 64, seq_length: 8192, micro_batch_size: 1, global_batch_size: 256,
              tp: 4, pp: 8, vpp: 5, sequence_parallel: true, precision: fp8-cs{extra}}}"
        )),
    )
}

#[test]
fn tp_overlap_leaves_only_the_rings_last_reduce_scatter_step_behind_long_gemms() {
    // Without overlap the forward's and the backward's collectives show in full (2 × F per
    // layer); with it, 70B's GEMMs outlast both directions' collectives, so only the last ring
    // step of the forward's reduce-scatters (half of F, over TP steps) shows: F / (2 · TP).
    // The ratio is 1 / (4 · TP) = 1/16 at TP4 whatever F is.
    let plain = llama70b_h100("");
    let overlapped = llama70b_h100(", tp_comm_overlap: true");
    let without = plain.performance.breakdown_s.tp_comm;
    let with = overlapped.performance.breakdown_s.tp_comm;
    assert!(without > 0.0);
    assert!(
        (with / without - 1.0 / 16.0).abs() < 1e-9,
        "{with} s exposed with overlap against {without} s without"
    );
    // The compute does not move (the pipeline bubble, made of the ranks' whole times, does).
    let compute = |e: &Estimate| {
        let b = &e.performance.breakdown_s;
        b.gemm + b.attention + b.elementwise
    };
    assert!((compute(&plain) - compute(&overlapped)).abs() < 1e-9);
}

/// Llama-3-70B FP8 on 64 GB200 with Megatron-FSDP as Megatron-Bridge's performance config
/// runs it (TP1, two 8K sequences per microbatch), offloading `layers` whole layers.
fn llama70b_gb200_fsdp(extra: &str) -> Estimate {
    evaluate(
        &arch("llama3-70b"),
        &hw("gb200"),
        &constants(),
        &cfg(&format!(
            "{{num_gpus: 64, seq_length: 8192, micro_batch_size: 2, global_batch_size: 256,
              tp: 1, pp: 1, precision: fp8-cs, use_megatron_fsdp: true{extra}}}"
        )),
    )
}

#[test]
fn whole_layer_offloading_keeps_only_the_layers_past_the_offloaded_ones() {
    // Transformer Engine's schedule holds (layers − offloaded) layers' saved activations at the
    // peak; Llama has one layer kind, so the activations scale by (80 − N) / 80.
    let kept = |extra: &str| llama70b_gb200_fsdp(extra).memory.breakdown_gib.activations;
    let all = kept("");
    for offloaded in [20u32, 40, 79] {
        let with = kept(&format!(
            ", cpu_offloading: true, cpu_offloading_num_layers: {offloaded}"
        ));
        let expected = all * f64::from(80 - offloaded) / 80.0;
        assert!(
            (with - expected).abs() < 1e-6 * all,
            "{offloaded} layers offloaded: {with} GiB, expected {expected}"
        );
    }
    // Offloading weights only, or a layer count without the switch, offloads nothing.
    assert_eq!(
        kept(", cpu_offloading: true, cpu_offloading_num_layers: 40, cpu_offloading_activations: false"),
        all
    );
    let without_switch = llama70b_gb200_fsdp(", cpu_offloading_num_layers: 40");
    assert_eq!(without_switch.memory.breakdown_gib.activations, all);
    assert!(without_switch
        .warnings
        .iter()
        .any(|w| w.contains("cpu_offloading_num_layers 40 without cpu_offloading")));
}

#[test]
fn whole_layer_offloads_wait_only_where_they_outlast_the_other_layers_work() {
    // Over GB200's C2C link the copies of 20 layers fit beside the other layers' forwards;
    // over H100's PCIe link, the copies of 60 of 80 layers do not, and the step waits for what
    // they outlast, forward and backward.
    let gb200 = llama70b_gb200_fsdp(", cpu_offloading: true, cpu_offloading_num_layers: 20");
    assert_eq!(gb200.performance.breakdown_s.offload_copies, 0.0);
    let h100 = |layers: u32| {
        evaluate(
            &arch("llama3-70b"),
            &hw("h100"),
            &constants(),
            &cfg(&format!(
                "{{num_gpus: 64, seq_length: 8192, micro_batch_size: 1, global_batch_size: 64,
                  tp: 8, pp: 1, sequence_parallel: true, precision: fp8-cs,
                  cpu_offloading: true, cpu_offloading_num_layers: {layers}}}"
            )),
        )
    };
    let few = h100(2).performance.breakdown_s.offload_copies;
    let many = h100(60).performance.breakdown_s.offload_copies;
    assert_eq!(few, 0.0);
    assert!(many > 0.0, "60 layers over PCIe hide completely");
    // More offloaded layers never wait less.
    assert!(h100(70).performance.breakdown_s.offload_copies >= many);
}

#[test]
fn megatron_core_refuses_whole_layer_offloading_with_pipelines_recompute_or_every_layer() {
    let codes = |extra: &str| -> Vec<String> {
        llama70b_gb200_fsdp(extra)
            .violations
            .iter()
            .map(|v| v.code.clone())
            .collect()
    };
    let on = ", cpu_offloading: true, cpu_offloading_num_layers: 20";
    assert!(!codes(on).iter().any(|c| c.starts_with("cpu_offloading")));
    assert!(codes(&format!("{on}, pp: 2")).contains(&"cpu_offloading_with_pipeline".to_string()));
    assert!(codes(&format!(
        "{on}, recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1"
    ))
    .contains(&"cpu_offloading_with_recompute".to_string()));
    assert!(
        codes(", cpu_offloading: true, cpu_offloading_num_layers: 80")
            .contains(&"cpu_offloading_layers".to_string())
    );
    assert!(codes(&format!("{on}, offload_modules: [core_attn]"))
        .contains(&"cpu_offloading_with_fine_grained_offloading".to_string()));
}

#[test]
fn embedding_and_loss_slots_let_126_layers_fill_128_stages() {
    // Llama-3.1 405B on PP16 VP8 (Megatron-Bridge's GB200 recipes): 126 layers plus the
    // embedding's and the loss's slots fill 128 virtual stages; without those slots they
    // cannot.
    let run = |extra: &str| {
        evaluate(
            &arch("llama3.1-405b"),
            &hw("gb200"),
            &constants(),
            &cfg(&format!(
                "{{num_gpus: 256, seq_length: 8192, micro_batch_size: 1, global_batch_size: 1536,
                  tp: 4, pp: 16, vpp: 8, sequence_parallel: true, precision: mxfp8{extra}}}"
            )),
        )
    };
    let accounted = run(
        ", account_for_embedding_in_pipeline_split: true, account_for_loss_in_pipeline_split: true",
    );
    assert!(
        accounted
            .violations
            .iter()
            .all(|v| v.code != "too_many_stages"),
        "{:?}",
        accounted.violations
    );
    assert_eq!(accounted.layout.layers_per_virtual_stage[0], 0);
    assert_eq!(
        accounted
            .layout
            .layers_per_virtual_stage
            .iter()
            .sum::<u32>(),
        126
    );
    let plain = run("");
    assert!(plain.violations.iter().any(|v| v.code == "too_many_stages"));
}
