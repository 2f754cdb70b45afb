//! Criterion benches of the tools that search: the full layout search for DeepSeek-V3 at
//! 256K on 1024 H100 (the speed target: well under a second) and CP sizing at 128K.

use criterion::{criterion_group, criterion_main, Criterion};
use moe_skills::catalog::Catalog;
use moe_skills::model::ModelSpec;
use moe_skills::tools::plan::{plan_layouts, LayoutConstraints, PlanLayoutsInput};
use moe_skills::tools::size_cp::{size_cp, SizeCpInput};

fn bench_search(c: &mut Criterion) {
    let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
    let mut group = c.benchmark_group("search");
    group.sample_size(10);
    group.bench_function("plan_layouts_dsv3_256k_1024xh100", |b| {
        b.iter(|| {
            plan_layouts(
                &catalog,
                PlanLayoutsInput {
                    model: ModelSpec::Id("deepseek-v3".into()),
                    hardware: "h100".into(),
                    num_gpus: 1024,
                    seq_length: 262_144,
                    global_batch_size: None,
                    precision: None,
                    constraints: LayoutConstraints::default(),
                    base: None,
                    top_k: Some(5),
                },
            )
            .expect("plan")
        })
    });
    group.bench_function("size_cp_dsv3_128k_256xh100", |b| {
        b.iter(|| {
            size_cp(
                &catalog,
                SizeCpInput {
                    model: ModelSpec::Id("deepseek-v3".into()),
                    seq_length: 131_072,
                    hardware: Some("h100".into()),
                    num_gpus: 256,
                    tensor_model_parallel_size: None,
                    precision: None,
                    global_batch_size: None,
                },
            )
            .expect("size_cp")
        })
    });
    group.finish();
}

criterion_group!(benches, bench_search);
criterion_main!(benches);
