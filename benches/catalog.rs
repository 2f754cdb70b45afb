//! Catalog cold start (load + index) and skill reads, the two costs a client waits on.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use moe_skills::catalog::{Catalog, RootSource};
use moe_skills::server::resources::read_resource;
use moe_skills::tools::skills::{read_skill, search_skills, ReadSkillInput, SearchSkillsInput};

fn fixture_roots() -> Vec<RootSource> {
    vec![
        RootSource::Embedded,
        RootSource::Directory(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/catalog").into(),
        ),
    ]
}

fn benches(c: &mut Criterion) {
    let roots = fixture_roots();
    c.bench_function("catalog_build_embedded_plus_fixtures", |b| {
        b.iter(|| black_box(Catalog::load(black_box(&roots))))
    });
    // Optional: a real skills folder, e.g. Megatron-Bridge's, via MOE_SKILLS_BENCH_DIR.
    if let Ok(dir) = std::env::var("MOE_SKILLS_BENCH_DIR") {
        let extra = vec![RootSource::Embedded, RootSource::Directory(dir.into())];
        c.bench_function("catalog_build_bench_dir", |b| {
            b.iter(|| black_box(Catalog::load(black_box(&extra))))
        });
    }

    let catalog = Catalog::load(&roots);
    c.bench_function("read_resource_skill_md", |b| {
        b.iter(|| {
            black_box(read_resource(
                &catalog,
                black_box("skill://good-skill/SKILL.md"),
            ))
        })
    });
    c.bench_function("read_resource_section", |b| {
        b.iter(|| {
            black_box(read_resource(
                &catalog,
                black_box("skill://good-skill/SKILL.md#cp-sizing-rules-of-thumb"),
            ))
        })
    });
    let input = ReadSkillInput {
        name: "mb-style-skill".into(),
        section: None,
        card: Some(true),
        file: None,
        offset: None,
    };
    c.bench_function("read_skill_card_tool", |b| {
        b.iter(|| black_box(read_skill(&catalog, black_box(&input))))
    });
    let query = SearchSkillsInput {
        query: "context parallel sizing for long sequences".into(),
        limit: Some(10),
    };
    c.bench_function("search_skills_tool", |b| {
        b.iter(|| black_box(search_skills(&catalog, black_box(&query))))
    });
}

criterion_group!(catalog_benches, benches);
criterion_main!(catalog_benches);
