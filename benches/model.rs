//! Criterion bench: one evaluation of DeepSeek-V3 at 256K on 512 H100.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use moe_skills::model::{evaluate, Architecture, CostConstants, Hardware};

fn bench_evaluate(c: &mut Criterion) {
    let arch: Architecture =
        serde_yaml::from_str(include_str!("../cards/models/deepseek-v3.yaml")).expect("card");
    let hw: Hardware =
        serde_yaml::from_str(include_str!("../cards/hardware/h100.yaml")).expect("card");
    let k: CostConstants =
        serde_yaml::from_str(include_str!("../cards/cost-model.yaml")).expect("card");
    let cfg = moe_skills::inputs::read_yaml(
        "{num_gpus: 512, seq_length: 262144, global_batch_size: 64, precision: fp8-blockwise,
          tp: 1, cp: 64, ep: 32, pp: 8, vpp: 4,
          recompute_granularity: selective, recompute_modules: [mla_up_proj, layernorm, moe, mlp],
          optimizer_cpu_offload: true, use_precision_aware_optimizer: true}",
    )
    .expect("config");
    c.bench_function("evaluate_dsv3_256k_512xh100", |b| {
        b.iter(|| {
            evaluate(
                black_box(&arch),
                black_box(&hw),
                black_box(&k),
                black_box(&cfg),
            )
        })
    });
}

criterion_group!(benches, bench_evaluate);
criterion_main!(benches);
