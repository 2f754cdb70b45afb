use super::stats::{median_upper_bound_rank, round4};
use super::table::band;
use super::*;

const FP8: Precision = Precision::Fp8Blockwise;

fn run(
    generation: &str,
    precision: Precision,
    seq: u64,
    num_gpus: u32,
    nvlink_domain: u32,
) -> RunRegime<'_> {
    RunRegime {
        gpu: gpu_of(generation),
        generation,
        precision,
        seq,
        num_gpus,
        nvlink_domain,
        condition: None,
    }
}

/// The GPU of a test run: one card per generation unless a test says otherwise.
fn gpu_of(generation: &str) -> &'static str {
    if generation == "hopper" {
        "h100"
    } else {
        "b200"
    }
}

fn r(generation: &str, seq: u64, num_gpus: u32, error: f64) -> Residual {
    Residual {
        gpu: gpu_of(generation).into(),
        generation: generation.into(),
        precision: "fp8".into(),
        seq,
        num_gpus,
        nvlink_domain: 8,
        error,
        step_time_s: 10.0,
    }
}

#[test]
fn the_typical_error_bounds_the_median_from_above() {
    // P(Bin(10, ½) ≤ 5) = 0.623, ≤ 6 = 0.828: the 7th of 10; P(Bin(8, ½) ≤ 5) = 0.855:
    // the 6th of 8; three runs cannot bound it below their largest.
    assert_eq!(median_upper_bound_rank(10, 0.8), 7);
    assert_eq!(median_upper_bound_rank(8, 0.8), 6);
    assert_eq!(median_upper_bound_rank(3, 0.8), 3);
    assert_eq!(median_upper_bound_rank(1, 0.8), 1);
    assert_eq!(median_upper_bound_rank(0, 0.8), 0);
    // Large samples approach the median from above.
    let k = median_upper_bound_rank(1000, 0.8);
    assert!((500..=530).contains(&k), "{k}");
    let runs: Vec<Residual> = [0.01, -0.02, 0.03, -0.04, 0.05, 0.06, -0.07, 0.08]
        .iter()
        .map(|&e| r("hopper", 131072, 256, e))
        .collect();
    let runs: Vec<&Residual> = runs.iter().collect();
    let b = band(["h100", "hopper", "fp8", ">=64K", "multi-node"], &runs);
    assert!((b.median_abs_error - 0.045).abs() < 1e-9);
    assert_eq!(b.typical_abs_error, Some(0.06));
}

#[test]
fn a_run_past_every_measured_run_says_so() {
    let residuals = vec![
        r("hopper", 65536, 256, 0.1),
        r("hopper", 131072, 512, -0.1),
        r("hopper", 262144, 128, 0.05),
    ];
    let t = UncertaintyTable::from_residuals("test", &residuals);
    let b = &t.bands[0];
    assert_eq!((b.longest_seq, b.most_gpus), (262144, 512));
    // Inside the runs: nothing to say.
    let inside = t.lookup(run("hopper", FP8, 262144, 512, 8), 300.0, 10.0);
    assert_eq!(inside.map(|u| u.beyond_measured), Some(Vec::new()));
    // 1M tokens on 1024 GPUs: past both, and the text names both.
    let Some(past) = t.lookup(run("hopper", FP8, 1 << 20, 1024, 8), 300.0, 10.0) else {
        panic!("the hopper band answers");
    };
    assert_eq!(
        past.beyond_measured,
        vec![
            BeyondMeasured {
                quantity: MeasuredQuantity::SeqLength,
                run: 1 << 20,
                largest_measured: 262144
            },
            BeyondMeasured {
                quantity: MeasuredQuantity::NumGpus,
                run: 1024,
                largest_measured: 512
            },
        ]
    );
    let text = past.text();
    assert!(
        text.contains("a 1M sequence against the longest measured 256K")
            && text.contains("1024 GPUs against at most 512 measured"),
        "{text}"
    );
    // A card written before the fields existed records nothing and claims nothing.
    let mut old = t.clone();
    for b in &mut old.bands {
        (b.longest_seq, b.most_gpus) = (0, 0);
    }
    let quiet = old.lookup(run("hopper", FP8, 1 << 20, 1024, 8), 300.0, 10.0);
    assert_eq!(quiet.map(|u| u.beyond_measured), Some(Vec::new()));
}

#[test]
fn a_step_shorter_than_every_measured_step_says_so() {
    let residuals: Vec<Residual> = [(0.1, 12.0), (-0.1, 3.5), (0.05, 40.0)]
        .iter()
        .map(|&(e, step)| Residual {
            step_time_s: step,
            ..r("hopper", 4096, 64, e)
        })
        .collect();
    let t = UncertaintyTable::from_residuals("test", &residuals);
    assert_eq!(t.bands[0].shortest_step_ms, 3500);
    // A 4 s step is inside the runs; a 0.06 s one is past all of them.
    let inside = t.lookup(run("hopper", FP8, 4096, 64, 8), 300.0, 4.0);
    assert_eq!(inside.map(|u| u.beyond_measured), Some(Vec::new()));
    let Some(short) = t.lookup(run("hopper", FP8, 4096, 64, 8), 300.0, 0.06) else {
        panic!("the hopper band answers");
    };
    assert_eq!(
        short.beyond_measured,
        vec![BeyondMeasured {
            quantity: MeasuredQuantity::StepTimeMs,
            run: 60,
            largest_measured: 3500
        }]
    );
    let text = short.text();
    assert!(
        text.contains("a 0.06 s step against the shortest measured 3.50 s"),
        "{text}"
    );
}

#[test]
fn regimes_with_few_rows_borrow_a_wider_band() {
    let residuals = vec![
        r("hopper", 4096, 256, 0.1),
        r("hopper", 4096, 256, -0.2),
        r("hopper", 4096, 256, 0.3),
        r("hopper", 131072, 32, 0.5),
        r("blackwell", 4096, 256, 0.05),
    ];
    let t = UncertaintyTable::from_residuals("test", &residuals);
    let own = t.lookup(run("hopper", FP8, 4096, 512, 8), 100.0, 10.0);
    assert_eq!(own.as_ref().map(|u| u.rows), Some(3));
    assert_eq!(
        own.as_ref().map(|u| u.regime.as_str()),
        Some("h100, fp8, <16K, multi-node")
    );
    // One long-context run: falls back to all Hopper runs (4).
    let wide = t.lookup(run("hopper", FP8, 131072, 32, 8), 100.0, 10.0);
    assert_eq!(wide.as_ref().map(|u| u.rows), Some(4));
    // Blackwell has one run: falls back to all runs.
    let all = t.lookup(run("blackwell", FP8, 4096, 256, 8), 100.0, 10.0);
    assert_eq!(all.map(|u| u.regime), Some("all measured runs".to_string()));
}

#[test]
fn the_range_is_where_the_bands_runs_measured() {
    let residuals: Vec<Residual> = (0..5)
        .map(|i| r("hopper", 4096, 8, 0.1 * i as f64))
        .collect();
    let t = UncertaintyTable::from_residuals("test", &residuals);
    let u = t
        .lookup(run("hopper", FP8, 4096, 8, 8), 100.0, 10.0)
        .unwrap_or_default();
    // Every run measured at or below its prediction (errors 0 to +40%): the range is
    // 1/1.4–1.0 of it, not a band around it.
    assert!((u.measured_ratio_low - 0.7143).abs() < 1e-9, "{u:?}");
    assert_eq!(u.measured_ratio_high, 1.0);
    assert!((u.tflops_low - 71.43).abs() < 1e-9 && u.tflops_high == 100.0);
    // The slowest measured step goes with the lowest throughput.
    assert!((u.step_time_high_s - 14.0).abs() < 1e-3 && u.step_time_low_s == 10.0);
    assert!(u
        .text()
        .contains("all 5 measured 0.71–1.00× their prediction: 71–100 here"));
    assert_eq!(u.step_text(), " (10.00–14.00 s by the same runs)");
    // From 20 runs on, the 5th and 95th percentiles leave the extremes out: errors
    // −0.19…0.19 give measured / predicted 0.84…1.23; the 1st and 19th of 20 sorted ratios.
    let many: Vec<Residual> = (0..20)
        .map(|i| r("hopper", 4096, 8, 0.02 * i as f64 - 0.19))
        .collect();
    let u20 = UncertaintyTable::from_residuals("test", &many)
        .lookup(run("hopper", FP8, 4096, 8, 8), 100.0, 10.0)
        .unwrap_or_default();
    assert!(
        (u20.measured_ratio_low - 1.0 / 1.19).abs() < 1e-4,
        "{u20:?}"
    );
    assert!(
        (u20.measured_ratio_high - 1.0 / 0.83).abs() < 1e-4,
        "{u20:?}"
    );
    assert!(
        u20.text().contains("90% of them measured 0.84–1.20×"),
        "{}",
        u20.text()
    );
    // Median 0.2; the 80% upper bound of five runs is the 4th: P(Bin(5, ½) ≤ 3) = 0.81.
    assert!((u.typical_abs_error - 0.3).abs() < 1e-12);
    assert!(UncertaintyTable::default()
        .lookup(run("hopper", FP8, 4096, 8, 8), 1.0, 1.0)
        .is_none());
}

#[test]
fn an_outlier_far_above_its_prediction_does_not_open_the_range_past_reason() {
    // One run measured at 0.41× its prediction (+144%) and others near it: ±p90 of the
    // error would put the upper end at prediction / (1 − 1.44), past infinity.
    let residuals: Vec<Residual> = [1.44, 0.3, 0.1, -0.05, -0.16, 0.02]
        .iter()
        .map(|&e| r("blackwell", 65536, 32, e))
        .collect();
    let t = UncertaintyTable::from_residuals("test", &residuals);
    let quote = |table: &UncertaintyTable| {
        table
            .lookup(
                run("blackwell", Precision::Bf16, 65536, 32, 72),
                900.0,
                20.0,
            )
            .unwrap_or_default()
    };
    let u = quote(&t);
    assert!((u.measured_ratio_low - 1.0 / 2.44).abs() < 1e-4, "{u:?}");
    assert!((u.measured_ratio_high - 1.0 / 0.84).abs() < 1e-4, "{u:?}");
    assert!(u.tflops_high < 1100.0 && u.tflops_low > 360.0, "{u:?}");
    // A card without the measured range falls back to ±p90, held finite.
    let mut old = t.clone();
    for b in &mut old.bands {
        (b.measured_ratio_low, b.measured_ratio_high) = (None, None);
    }
    let u = quote(&old);
    assert!(u.tflops_high.is_finite() && u.tflops_low < 900.0, "{u:?}");
}

#[test]
fn bf16_and_fp8_runs_quote_their_own_bands() {
    let mut residuals: Vec<Residual> = [0.02, -0.03, 0.04]
        .iter()
        .map(|e| r("blackwell", 4096, 64, *e))
        .collect();
    for e in [-0.30, -0.25, -0.35] {
        residuals.push(Residual {
            precision: "bf16".into(),
            ..r("blackwell", 4096, 64, e)
        });
    }
    let t = UncertaintyTable::from_residuals("test", &residuals);
    let low = t
        .lookup(run("blackwell", Precision::Mxfp8, 4096, 64, 8), 100.0, 10.0)
        .unwrap_or_default();
    let bf16 = t
        .lookup(run("blackwell", Precision::Bf16, 4096, 64, 8), 100.0, 10.0)
        .unwrap_or_default();
    assert_eq!(low.regime, "b200, fp8, <16K, multi-node");
    assert_eq!(bf16.regime, "b200, bf16, <16K, multi-node");
    assert!((low.typical_abs_error - 0.04).abs() < 1e-12);
    assert!((bf16.typical_abs_error - 0.35).abs() < 1e-12);
    // The BF16 runs all ran faster than predicted: the text says so, by the measured
    // speed (1 / (1 − 0.30) − 1 = 43%); the FP8 runs lean neither way.
    assert!((bf16.median_error + 0.30).abs() < 1e-12);
    assert!(
        bf16.text()
            .contains("which ran a median 43% faster than predicted"),
        "{}",
        bf16.text()
    );
    assert!(!low.text().contains("than predicted"), "{}", low.text());
    // No FP4 run: the generation's band, both precisions together.
    let fp4 = t
        .lookup(run("blackwell", Precision::Nvfp4, 4096, 64, 8), 100.0, 10.0)
        .unwrap_or_default();
    assert_eq!((fp4.regime.as_str(), fp4.rows), ("blackwell", 6));
}

#[test]
fn a_regime_of_slow_runs_says_they_ran_slower() {
    let residuals: Vec<Residual> = [0.2, 0.25, 0.3]
        .iter()
        .map(|e| r("hopper", 4096, 8, *e))
        .collect();
    let u = UncertaintyTable::from_residuals("test", &residuals)
        .lookup(run("hopper", FP8, 4096, 8, 8), 100.0, 10.0)
        .unwrap_or_default();
    // Measured = predicted / 1.25: 20% slower.
    assert!(
        u.text()
            .contains("which ran a median 20% slower than predicted"),
        "{}",
        u.text()
    );
}

#[test]
fn a_gpu_with_enough_runs_quotes_its_own_band_and_others_its_generation() {
    let mut residuals: Vec<Residual> = [0.01, -0.02, 0.03]
        .iter()
        .map(|e| r("blackwell", 4096, 64, *e))
        .collect();
    for e in [0.4, -0.25, 0.55] {
        residuals.push(Residual {
            gpu: "b300".into(),
            ..r("blackwell", 4096, 64, e)
        });
    }
    let t = UncertaintyTable::from_residuals("test", &residuals);
    let on = |gpu: &str| {
        let u = t
            .lookup(
                RunRegime {
                    gpu,
                    ..run("blackwell", FP8, 4096, 64, 8)
                },
                100.0,
                10.0,
            )
            .unwrap_or_default();
        (u.regime, u.rows, u.typical_abs_error)
    };
    assert_eq!(
        on("b300"),
        ("b300, fp8, <16K, multi-node".to_string(), 3, 0.55)
    );
    // A GPU without runs of its own: its generation's, all six.
    let (regime, rows, _) = on("gb200");
    assert_eq!(
        (regime.as_str(), rows),
        ("blackwell, fp8, <16K, multi-node", 6)
    );
}

#[test]
fn a_run_under_a_condition_quotes_what_measured_runs_under_it_reached() {
    let residuals: Vec<Residual> = (0..4)
        .map(|i| r("hopper", 4096, 64, 0.01 * i as f64))
        .collect();
    // Errors +100%, +25%, 0%, −20%: measured / predicted 0.5, 0.8, 1.0, 1.25.
    let t = UncertaintyTable::from_residuals("test", &residuals).with_conditions(&[
        (RunCondition::NaturalRouting, 1.0),
        (RunCondition::NaturalRouting, 0.25),
        (RunCondition::NaturalRouting, 0.0),
        (RunCondition::NaturalRouting, -0.2),
        (RunCondition::Peft, 1.0),
    ]);
    let band = &t.conditions[0];
    assert_eq!(band.rows, 4);
    assert_eq!(
        (band.low_ratio, band.median_ratio, band.high_ratio),
        (0.5, 0.9, 1.25)
    );
    // PEFT has too few runs to be quoted.
    assert_eq!(t.conditions[1].rows, 1);
    let quoted = |condition| {
        t.lookup(
            RunRegime {
                condition,
                ..run("hopper", FP8, 4096, 64, 8)
            },
            100.0,
            10.0,
        )
        .unwrap_or_default()
    };
    let natural = quoted(Some(RunCondition::NaturalRouting));
    assert_eq!(natural.condition.as_ref().map(|c| c.rows), Some(4));
    assert!(
        natural
            .text()
            .contains("router's own routing are not in that band: 4 measured reached 0.50–1.25×"),
        "{}",
        natural.text()
    );
    assert!(quoted(Some(RunCondition::Peft)).condition.is_none());
    assert!(quoted(None).condition.is_none());
}

#[test]
fn moe_block_bands_are_by_gpu_and_precision_class_and_fall_back_to_another_gpu() {
    let residuals = [
        ("h100".to_string(), "bf16".to_string(), 0.25),
        ("h100".to_string(), "bf16".to_string(), 0.5),
        ("h100".to_string(), "bf16".to_string(), 0.0),
        ("h100".to_string(), "fp8".to_string(), -0.2),
    ];
    let t = UncertaintyTable::default().with_moe_block("a test", &residuals);
    assert_eq!(t.moe_block.len(), 2);
    let bf16 = t
        .moe_block_band("h100", Precision::Bf16)
        .expect("an h100 bf16 band");
    // Measured / predicted time: 1/1.5, 1/1.25, 1/1.0.
    assert_eq!(bf16.rows, 3);
    assert_eq!(bf16.median_ratio, 0.8);
    assert_eq!(bf16.low_ratio, round4(1.0 / 1.5));
    assert_eq!(bf16.high_ratio, 1.0);
    let fp8 = t
        .moe_block_band("h100", Precision::Fp8Tensorwise)
        .expect("the fp8 class");
    assert_eq!(fp8.median_ratio, 1.25);
    assert_eq!(t.moe_block_band("gb200", Precision::Bf16), Some(bf16));
    assert_eq!(t.moe_block_band("h100", Precision::Nvfp4), None);
    assert!(bf16
        .text()
        .starts_with("a test on h100: 3 bf16 layers took 0.67–1.00×"));
}
