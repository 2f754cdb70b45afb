//! Property tests of the cost model's invariants.

mod model_support;

use model_support::{arch, constants, hw, HARDWARE_IDS, MODEL_IDS};
use moe_skills::model::config::{FsdpStrategy, RecomputeModule};
use moe_skills::model::{
    evaluate, Precision, RecomputeGranularity, TrainingConfig, ValidArchitecture,
};
use moe_skills::tools::plan::{apply_levers, recompute_presets, LeverSet};
use proptest::prelude::*;

fn base_config() -> impl Strategy<Value = (usize, usize, TrainingConfig)> {
    (
        0..MODEL_IDS.len(),
        0..HARDWARE_IDS.len(),
        prop::sample::select(vec![1u32, 2, 4, 8]),
        prop::sample::select(vec![1u32, 2, 4, 8, 16]),
        prop::sample::select(vec![1u32, 2, 4, 8]),
        prop::sample::select(vec![1u32, 2, 4]),
        prop::sample::select(vec![1u32, 8, 16, 32]),
        prop::sample::select(vec![4096u64, 16384, 65536, 131072]),
        prop::sample::select(vec![1u32, 2]),
        any::<bool>(),
    )
        .prop_map(|(m, h, tp, cp, pp, vpp, ep, seq, mbs, fp8)| {
            let cfg = TrainingConfig {
                num_gpus: Some(tp * cp * pp * ep * 2),
                seq_length: Some(seq),
                micro_batch_size: Some(mbs),
                global_batch_size: Some(mbs * 64 * ep),
                tensor_model_parallel_size: Some(tp),
                context_parallel_size: Some(cp),
                pipeline_model_parallel_size: Some(pp),
                virtual_pipeline_model_parallel_size: Some(if pp > 1 { vpp } else { 1 }),
                expert_model_parallel_size: Some(ep),
                precision: Some(if fp8 {
                    Precision::Fp8Blockwise
                } else {
                    Precision::Bf16
                }),
                ..TrainingConfig::default()
            };
            (m, h, cfg)
        })
}

fn est(m: usize, h: usize, cfg: &TrainingConfig) -> moe_skills::model::Estimate {
    evaluate(&arch(MODEL_IDS[m]), &hw(HARDWARE_IDS[h]), &constants(), cfg)
}

const MODULE_LADDER: [&[&str]; 4] = [
    &[],
    &["layernorm"],
    &["layernorm", "moe_act", "mla_up_proj", "core_attn"],
    &[
        "layernorm",
        "moe_act",
        "mla_up_proj",
        "core_attn",
        "moe",
        "mlp",
        "shared_experts",
        "gdn_norm_out",
    ],
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn breakdowns_sum_to_totals((m, h, cfg) in base_config()) {
        let e = est(m, h, &cfg);
        let b = &e.memory.breakdown_gib;
        prop_assert!((b.total() - e.memory.peak_gib).abs() < 1e-9 * e.memory.peak_gib.max(1.0));
        let a = &e.memory.activations_by_module_gib;
        prop_assert!((a.total() - b.activations).abs() < 1e-6 * b.activations.max(1.0));
        let t = &e.performance.breakdown_s;
        prop_assert!((t.total() - e.performance.step_time_s).abs() < 1e-9 * e.performance.step_time_s.max(1.0));
        prop_assert!(e.memory.peak_gib.is_finite() && e.performance.step_time_s.is_finite());
        // Every pipeline rank's components sum to that rank's peak and allocated figures.
        prop_assert_eq!(e.memory.per_rank_breakdown_gib.len(), e.memory.per_rank_peak_gib.len());
        for ((rank, peak), allocated) in e
            .memory
            .per_rank_breakdown_gib
            .iter()
            .zip(&e.memory.per_rank_peak_gib)
            .zip(&e.memory.per_rank_allocated_gib)
        {
            prop_assert!((rank.total() - peak).abs() < 1e-9 * peak.max(1.0));
            prop_assert!((rank.allocated() - allocated).abs() < 1e-9 * allocated.max(1.0));
        }
    }

    #[test]
    fn memory_first_evaluation_matches_the_full_one((m, h, cfg) in base_config()) {
        let full = est(m, h, &cfg);
        let model = arch(MODEL_IDS[m]);
        let valid = ValidArchitecture::check(&model).expect("catalog cards are valid");
        let first = moe_skills::model::evaluate_memory_first(
            valid, &hw(HARDWARE_IDS[h]), &constants(), &cfg,
        );
        // The same memory, verdict and violations always (without the text a search does
        // not read: the worst rank's reason, the out-of-memory message); the same step
        // whenever it fits.
        let mut memory = full.memory.clone();
        memory.worst_rank.reason.clear();
        let mut violations = full.violations.clone();
        for v in violations.iter_mut().filter(|v| v.code == "out_of_memory") {
            v.message.clear();
            v.fix.clear();
        }
        prop_assert_eq!(&memory, &first.memory);
        prop_assert_eq!(full.fits, first.fits);
        prop_assert_eq!(&violations, &first.violations);
        prop_assert_eq!(&full.layout, &first.layout);
        if full.memory.headroom_gib >= 0.0 {
            prop_assert_eq!(&full.performance, &first.performance);
        } else {
            prop_assert_eq!(first.performance.step_time_s, 0.0);
        }
    }

    #[test]
    fn more_recompute_never_raises_memory((m, h, cfg) in base_config()) {
        let mut previous = f64::INFINITY;
        let mut levels: Vec<TrainingConfig> = Vec::new();
        for modules in MODULE_LADDER {
            let mut c = cfg.clone();
            c.recompute_granularity = Some(RecomputeGranularity::Selective);
            c.recompute_modules = Some(modules.iter().map(|s| RecomputeModule::parse(s)).collect());
            levels.push(c);
        }
        let mut full = cfg.clone();
        full.recompute_granularity = Some(RecomputeGranularity::Full);
        levels.push(full);
        for c in &levels {
            let peak = est(m, h, c).memory.peak_gib;
            prop_assert!(peak <= previous + 1e-9, "memory rose from {previous} to {peak}");
            previous = peak;
        }
    }

    #[test]
    fn larger_cp_never_raises_per_gpu_activations((m, h, cfg) in base_config()) {
        let mut c2 = cfg.clone();
        let cp = cfg.context_parallel_size.unwrap_or(1);
        c2.context_parallel_size = Some(cp * 2);
        c2.num_gpus = cfg.num_gpus.map(|n| n * 2);
        c2.global_batch_size = cfg.global_batch_size;
        let a1 = est(m, h, &cfg).memory.breakdown_gib.activations;
        let a2 = est(m, h, &c2).memory.breakdown_gib.activations;
        prop_assert!(a2 <= a1 + 1e-9, "CP {cp}->{}: {a1} -> {a2}", cp * 2);
    }

    #[test]
    fn fsdp_never_holds_more_optimizer_state((m, h, cfg) in base_config()) {
        // One pipeline stage: the breakdown is the worst rank's, and sharding can move which
        // rank is worst, so only a single-rank pipeline compares like with like.
        let mut cfg = cfg;
        cfg.pipeline_model_parallel_size = Some(1);
        cfg.virtual_pipeline_model_parallel_size = None;
        let mut dist = cfg.clone();
        dist.use_distributed_optimizer = Some(true);
        let mut fsdp = cfg.clone();
        fsdp.use_megatron_fsdp = Some(true);
        for s in [FsdpStrategy::Optim, FsdpStrategy::OptimGrads, FsdpStrategy::OptimGradsParams] {
            fsdp.data_parallel_sharding_strategy = Some(s);
            let o_fsdp = est(m, h, &fsdp).memory.breakdown_gib.optimizer;
            let o_dist = est(m, h, &dist).memory.breakdown_gib.optimizer;
            prop_assert!(o_fsdp <= o_dist + 1e-9);
        }
    }

    #[test]
    fn offload_never_raises_gpu_memory((m, h, cfg) in base_config(), fraction in 0.0f64..=1.0) {
        let mut off = cfg.clone();
        off.optimizer_cpu_offload = Some(true);
        off.optimizer_offload_fraction = Some(fraction);
        let mut more = off.clone();
        more.optimizer_offload_fraction = Some((fraction + 0.25).min(1.0));
        let base = est(m, h, &cfg).memory.peak_gib;
        let p1 = est(m, h, &off).memory.peak_gib;
        let p2 = est(m, h, &more).memory.peak_gib;
        prop_assert!(p1 <= base + 1e-9 && p2 <= p1 + 1e-9);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary (often invalid) configurations: evaluate never panics and never returns NaN.
    #[test]
    fn evaluate_never_panics(
        m in 0..MODEL_IDS.len(),
        h in 0..HARDWARE_IDS.len(),
        sizes in prop::collection::vec(prop::option::of(0u32..70), 10),
        seq in prop::option::of(0u64..300_000),
        fraction in prop::option::of(-1.0f64..2.0),
        layout in prop::option::of("[Etm|L()*0-9]{0,16}"),
        full in any::<bool>(),
    ) {
        let cfg = TrainingConfig {
            num_gpus: sizes[0],
            tensor_model_parallel_size: sizes[1],
            context_parallel_size: sizes[2],
            pipeline_model_parallel_size: sizes[3],
            virtual_pipeline_model_parallel_size: sizes[4],
            expert_model_parallel_size: sizes[5],
            expert_tensor_parallel_size: sizes[6],
            micro_batch_size: sizes[7],
            global_batch_size: sizes[8],
            recompute_num_layers: sizes[9],
            seq_length: seq,
            optimizer_cpu_offload: fraction.map(|_| true),
            optimizer_offload_fraction: fraction,
            pipeline_model_parallel_layout: layout,
            recompute_granularity: full.then_some(RecomputeGranularity::Full),
            ..TrainingConfig::default()
        };
        let e = est(m, h, &cfg);
        prop_assert!(!e.memory.peak_gib.is_nan());
        prop_assert!(!e.performance.step_time_s.is_nan());
        let _ = moe_skills::model::report::render_text(&e);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Extreme sizes (up to u32::MAX) must not overflow or allocate without bound.
    #[test]
    fn evaluate_survives_extreme_sizes(
        m in 0..MODEL_IDS.len(),
        sizes in prop::collection::vec(prop::option::of(any::<u32>()), 9),
        seq in prop::option::of(any::<u64>()),
    ) {
        let cfg = TrainingConfig {
            num_gpus: sizes[0],
            tensor_model_parallel_size: sizes[1],
            context_parallel_size: sizes[2],
            pipeline_model_parallel_size: sizes[3],
            virtual_pipeline_model_parallel_size: sizes[4],
            expert_model_parallel_size: sizes[5],
            expert_tensor_parallel_size: sizes[6],
            micro_batch_size: sizes[7],
            global_batch_size: sizes[8],
            seq_length: seq,
            ..TrainingConfig::default()
        };
        let e = est(m, 0, &cfg);
        prop_assert!(!e.memory.peak_gib.is_nan());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The layout search counts a lever set as out of memory, without evaluating it, when one
    /// that needs no more memory is (`tools::plan`): on the same structure and sharding, a
    /// later selective preset and the optimizer offload never raise the peak.
    #[test]
    fn search_levers_order_memory((m, h, cfg) in base_config(), fsdp in any::<bool>()) {
        let model = arch(MODEL_IDS[m]);
        let presets = recompute_presets(&model, true);
        let peak = |level: usize, offload: bool| {
            let mut c = cfg.clone();
            apply_levers(&mut c, &presets[level], &LeverSet { recompute_level: level, offload, fsdp });
            est(m, h, &c).memory.peak_gib
        };
        let selective: Vec<usize> = (0..presets.len())
            .filter(|&i| presets[i].recompute_granularity != Some(RecomputeGranularity::Full))
            .collect();
        for offload in [false, true] {
            let mut previous = f64::INFINITY;
            for &level in &selective {
                let p = peak(level, offload);
                prop_assert!(p <= previous + 1e-9, "preset {level} (offload {offload}) rose from {previous} to {p} GiB");
                previous = p;
            }
        }
        for level in 0..presets.len() {
            let (kept, offloaded) = (peak(level, false), peak(level, true));
            prop_assert!(offloaded <= kept + 1e-9, "offload raised preset {level} from {kept} to {offloaded} GiB");
        }
    }

    /// Kind counts over any range of layers equal counting layer by layer.
    #[test]
    fn layer_kinds_count_as_layer_by_layer(m in 0..MODEL_IDS.len(), a in 0u32..200, b in 0u32..200) {
        let model = arch(MODEL_IDS[m]);
        let (start, end) = (a.min(b), a.max(b));
        let mut expected = [0u32; moe_skills::model::arch::LAYER_KINDS];
        for layer in start..end.min(model.num_layers) {
            expected[model.layer_kind(layer)] += 1;
        }
        prop_assert_eq!(model.count_kinds(start, end), expected);
    }
}

proptest! {
    /// A measured grouped-GEMM table prices any expert shape within what it measured: the
    /// factor lies between the table's slowest and fastest figures over its reference, for
    /// any tokens per expert and width (held flat outside), and never more than the fastest.
    #[test]
    fn grouped_gemm_factors_stay_within_the_measured_figures(
        id in prop::sample::select(vec!["h100", "h200"]),
        log_tokens in 0.0f64..20.0,
        log_width in 5.0f64..15.0,
    ) {
        let table = hw(id).grouped_gemm_kernels.expect("a measured grouped-GEMM table");
        let figures = table.curves.iter().flat_map(|c| c.tflops.iter().copied());
        let (lo, hi) = figures.fold((f64::INFINITY, 0.0f64), |(lo, hi), t| (lo.min(t), hi.max(t)));
        let factor = table
            .shape_factor(log_tokens.exp2(), log_width.exp2())
            .expect("a well-formed table answers every positive shape");
        prop_assert!(factor >= lo / table.reference_tflops - 1e-12, "{factor}");
        prop_assert!(factor <= hi / table.reference_tflops + 1e-12, "{factor}");
    }
}
