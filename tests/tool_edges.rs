//! Edge numbers in every size field of every tool, through the tool functions the MCP server
//! and the CLI call: each must give an error result or a sane answer, never a panic. Values
//! past a limit must be refused with an error that names the field.

use std::panic::{catch_unwind, AssertUnwindSafe};

use moe_skills::catalog::Catalog;
use moe_skills::tools::common::{parse_input, ToolError};
use moe_skills::tools::{feasibility, plan, recipe, recompute, size_cp, skills, triage};
use serde::Serialize;
use serde_json::{json, Map, Value};

fn catalog() -> Catalog {
    Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new())
}

/// 0, 1, 2, 2^31, 2^32-1, u64::MAX, a negative number and a huge float.
fn integer_edges() -> Vec<Value> {
    vec![
        json!(0),
        json!(1),
        json!(2),
        json!(1u64 << 31),
        json!(u32::MAX),
        json!(u64::MAX),
        json!(-1),
        json!(1e300),
    ]
}

fn float_edges() -> Vec<Value> {
    vec![
        json!(0.0),
        json!(-1.0),
        json!(1e-300),
        json!(0.5),
        json!(1e300),
        json!(f64::MAX),
        json!(18446744073709551616.0),
        json!(u64::MAX),
    ]
}

/// One tool call from JSON arguments: the summary of a sane answer, or the error text.
type Call = fn(&Catalog, Map<String, Value>) -> Result<String, String>;

fn answer<T: Serialize, E: std::fmt::Display>(result: Result<T, E>) -> Result<String, String> {
    match result {
        // A sane answer serialises.
        Ok(output) => Ok(serde_json::to_string(&output).expect("the answer serialises")),
        Err(error) => Err(error.to_string()),
    }
}

fn typed<T: serde::de::DeserializeOwned, O: Serialize>(
    arguments: Map<String, Value>,
    tool: impl FnOnce(T) -> Result<O, ToolError>,
) -> Result<String, String> {
    answer(parse_input(arguments).and_then(tool))
}

fn call_size_cp(catalog: &Catalog, arguments: Map<String, Value>) -> Result<String, String> {
    typed(arguments, |input| size_cp::size_cp(catalog, input))
}
fn call_lookup_recipe(catalog: &Catalog, arguments: Map<String, Value>) -> Result<String, String> {
    typed(arguments, |input| recipe::lookup_recipe(catalog, input))
}
fn call_plan_layouts(catalog: &Catalog, arguments: Map<String, Value>) -> Result<String, String> {
    typed(arguments, |input| plan::plan_layouts(catalog, input))
}
fn call_choose_recompute(
    catalog: &Catalog,
    arguments: Map<String, Value>,
) -> Result<String, String> {
    typed(arguments, |input| {
        recompute::choose_recompute(catalog, input)
    })
}
fn call_triage_oom(catalog: &Catalog, arguments: Map<String, Value>) -> Result<String, String> {
    typed(arguments, |input| triage::triage_oom(catalog, input))
}
fn call_check_feasibility(
    catalog: &Catalog,
    arguments: Map<String, Value>,
) -> Result<String, String> {
    // As the MCP adapter reads it: every input format is accepted.
    match moe_skills::inputs::read_value(&Value::Object(arguments)) {
        Ok(cfg) => answer(feasibility::check_feasibility(catalog, cfg)),
        Err(error) => Err(error.to_string()),
    }
}

/// A small MoE configuration that fits, for the fields the table varies.
fn small_config() -> Value {
    json!({
        "model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 16, "seq_length": 32768,
        "tp": 1, "cp": 2, "pp": 2, "ep": 8, "etp": 1, "micro_batch_size": 1,
        "global_batch_size": 16
    })
}

/// The size fields of a training configuration.
const CONFIG_FIELDS: &[&str] = &[
    "num_gpus",
    "seq_length",
    "micro_batch_size",
    "global_batch_size",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "recompute_num_layers",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "mtp_num_layers",
    "moe_ep_overlap_chunks",
];

/// Sets `path` (dot-separated) in `base` to `value`.
fn with(base: &Value, path: &str, value: Value) -> Map<String, Value> {
    let mut root = base.clone();
    let mut slot = &mut root;
    let parts: Vec<&str> = path.split('.').collect();
    for part in &parts[..parts.len() - 1] {
        slot = slot
            .as_object_mut()
            .expect("object")
            .entry(part.to_string())
            .or_insert_with(|| json!({}));
    }
    slot.as_object_mut()
        .expect("object")
        .insert(parts[parts.len() - 1].to_string(), value);
    match root {
        Value::Object(map) => map,
        _ => unreachable!("the bases are objects"),
    }
}

/// Runs one call; a panic fails the test naming the tool, field and value.
fn run(catalog: &Catalog, tool: &str, call: Call, field: &str, value: &Value, base: &Value) {
    let arguments = with(base, field, value.clone());
    let outcome = catch_unwind(AssertUnwindSafe(|| call(catalog, arguments)));
    let outcome = outcome.unwrap_or_else(|_| panic!("{tool} panicked on {field} = {value}"));
    // Past the limit, the error names the field (its last path segment at least).
    let beyond = value.as_f64().is_some_and(|v| v >= 2f64.powi(31)) && !field.ends_with("gib");
    let leaf = field.rsplit('.').next().unwrap_or(field);
    if beyond && !matches!(leaf, "limit" | "top_k") {
        let error = outcome.expect_err(&format!("{tool}: {field} = {value} must be refused"));
        // Aliases are reported under the field they stand for.
        let full = match leaf {
            "tp" => "tensor_model_parallel_size",
            "cp" => "context_parallel_size",
            "pp" => "pipeline_model_parallel_size",
            "ep" => "expert_model_parallel_size",
            "mbs" => "micro_batch_size",
            other => other,
        };
        // Serde type errors name the alias as given.
        let named = error.contains(full) || error.contains(&format!("{leaf}`"));
        assert!(
            named,
            "{tool}: {field} = {value}: error does not name it: {error}"
        );
    }
}

/// A tool, its base arguments, the fields to vary and the values to put in them.
type Case = (&'static str, Call, Value, Vec<String>, Vec<Value>);

#[test]
fn every_size_field_of_every_tool_answers() {
    let catalog = catalog();
    let cfg = small_config();
    let mut cases: Vec<Case> = Vec::new();
    let prefixed = |prefix: &str| -> Vec<String> {
        CONFIG_FIELDS
            .iter()
            .map(|f| format!("{prefix}{f}"))
            .collect()
    };
    cases.push((
        "size_cp",
        call_size_cp,
        json!({"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 16, "seq_length": 32768}),
        [
            "num_gpus",
            "seq_length",
            "tensor_model_parallel_size",
            "global_batch_size",
        ]
        .map(String::from)
        .to_vec(),
        integer_edges(),
    ));
    cases.push((
        "lookup_recipe",
        call_lookup_recipe,
        json!({"model": "deepseek-v3", "seq_length": 131072, "hardware": "h100"}),
        ["num_gpus", "seq_length", "limit"]
            .map(String::from)
            .to_vec(),
        integer_edges(),
    ));
    cases.push((
        "plan_layouts",
        call_plan_layouts,
        json!({"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 16, "seq_length": 32768}),
        [
            "num_gpus",
            "seq_length",
            "global_batch_size",
            "top_k",
            "constraints.tp",
            "constraints.cp",
            "constraints.pp",
            "constraints.ep",
            "constraints.mbs",
            "constraints.max_tp",
            "constraints.max_pp",
            "constraints.max_cp",
            "constraints.max_ep",
            "base.mtp_num_layers",
            "base.moe_ep_overlap_chunks",
        ]
        .map(String::from)
        .to_vec(),
        integer_edges(),
    ));
    cases.push((
        "plan_layouts",
        call_plan_layouts,
        json!({"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 16, "seq_length": 32768}),
        vec!["constraints.min_headroom_gib".into()],
        float_edges(),
    ));
    cases.push((
        "choose_recompute",
        call_choose_recompute,
        json!({"config": cfg}),
        prefixed("config."),
        integer_edges(),
    ));
    cases.push((
        "choose_recompute",
        call_choose_recompute,
        json!({"config": cfg}),
        vec![
            "memory_budget_gib".into(),
            "config.optimizer_offload_fraction".into(),
        ],
        float_edges(),
    ));
    cases.push((
        "check_feasibility",
        call_check_feasibility,
        cfg.clone(),
        prefixed(""),
        integer_edges(),
    ));
    cases.push((
        "check_feasibility",
        call_check_feasibility,
        cfg.clone(),
        vec!["optimizer_offload_fraction".into()],
        float_edges(),
    ));
    cases.push((
        "triage_oom",
        call_triage_oom,
        json!({"before": cfg, "after": cfg}),
        prefixed("after."),
        integer_edges(),
    ));
    let mut calls = 0;
    for (tool, call, base, fields, values) in &cases {
        for field in fields {
            for value in values {
                run(&catalog, tool, *call, field, value, base);
                calls += 1;
            }
        }
    }
    assert!(calls > 500, "{calls} calls");
}

#[test]
fn reported_cases_are_errors_not_wrong_answers() {
    let catalog = catalog();
    // size_cp and lookup_recipe with 2^31 GPUs divided by zero after a u32 wrap.
    let error = call_size_cp(
        &catalog,
        with(
            &json!({"model": "deepseek-v3", "hardware": "h100", "seq_length": 131072}),
            "num_gpus",
            json!(1u64 << 31),
        ),
    )
    .unwrap_err();
    assert!(
        error.contains("`num_gpus`") && error.contains("1..=1048576"),
        "{error}"
    );
    let error = call_lookup_recipe(
        &catalog,
        with(
            &json!({"model": "deepseek-v3", "seq_length": 131072}),
            "num_gpus",
            json!(1u64 << 31),
        ),
    )
    .unwrap_err();
    assert!(error.contains("`num_gpus`"), "{error}");
    // A micro-batch of 2^31 answered "0 evaluated, 0 fit".
    let error = call_plan_layouts(
        &catalog,
        with(
            &json!({"model": "deepseek-v3", "hardware": "h100", "num_gpus": 256, "seq_length": 131072}),
            "constraints.micro_batch_size",
            json!(1u64 << 31),
        ),
    )
    .unwrap_err();
    assert!(error.contains("`constraints.micro_batch_size`"), "{error}");
}

#[test]
fn a_budget_above_the_gpu_is_capped_and_said_so() {
    let catalog = catalog();
    // 2^64 GiB answered "fits" at 322 GiB on an 80 GB GPU.
    let out = recompute::choose_recompute(
        &catalog,
        recompute::ChooseRecomputeInput {
            config: serde_json::from_value(json!({
                "model": "deepseek-v3", "hardware": "h100", "num_gpus": 256,
                "seq_length": 131072, "tp": 1, "cp": 1, "pp": 1, "ep": 64
            }))
            .expect("config"),
            memory_budget_gib: Some(2f64.powi(64)),
        },
    )
    .expect("an answer");
    assert!(out.memory_budget_gib < 80.0, "{}", out.memory_budget_gib);
    assert!(!out.fits || out.peak_gib <= out.memory_budget_gib);
    assert!(out.ignored_settings_contains("memory_budget_gib"));
    assert!(out.rationale.contains("capped"), "{}", out.rationale);
}

trait Notes {
    fn ignored_settings_contains(&self, key: &str) -> bool;
}

impl Notes for recompute::ChooseRecomputeOutput {
    fn ignored_settings_contains(&self, key: &str) -> bool {
        self.notes.ignored_settings.iter().any(|i| i.key == key)
    }
}

#[test]
fn nan_and_infinite_floats_are_refused() {
    let catalog = catalog();
    let cfg: moe_skills::model::TrainingConfig =
        serde_json::from_value(small_config()).expect("config");
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let out = recompute::choose_recompute(
            &catalog,
            recompute::ChooseRecomputeInput {
                config: cfg.clone(),
                memory_budget_gib: Some(bad),
            },
        );
        assert!(out.is_err(), "memory_budget_gib = {bad}");
        let mut with_fraction = cfg.clone();
        with_fraction.optimizer_cpu_offload = Some(true);
        with_fraction.optimizer_offload_fraction = Some(bad);
        let out = feasibility::check_feasibility(&catalog, with_fraction);
        let error = out.expect_err("NaN fraction refused").to_string();
        assert!(error.contains("optimizer_offload_fraction"), "{error}");
        let input: plan::PlanLayoutsInput = serde_json::from_value(json!({
            "model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 16, "seq_length": 32768
        }))
        .expect("input");
        let mut input = input;
        input.constraints.min_headroom_gib = Some(bad);
        let error = plan::plan_layouts(&catalog, input)
            .expect_err("NaN headroom refused")
            .to_string();
        assert!(error.contains("min_headroom_gib"), "{error}");
    }
}

#[test]
fn long_strings_are_refused_before_matching() {
    let catalog = catalog();
    let long = "x".repeat(100_000);
    let error = skills::read_skill(
        &catalog,
        &skills::ReadSkillInput {
            name: long.clone(),
            section: None,
            card: None,
            file: None,
            offset: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("`name`") && error.contains("256"), "{error}");
    let error = skills::read_skill(
        &catalog,
        &skills::ReadSkillInput {
            name: "moe-long-context".into(),
            section: Some(long.clone()),
            card: None,
            file: None,
            offset: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("`section`"), "{error}");
    let error = skills::search_skills(
        &catalog,
        &skills::SearchSkillsInput {
            query: long.clone(),
            limit: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("`query`"), "{error}");
    let error = call_size_cp(
        &catalog,
        with(
            &json!({"hardware": "h100", "num_gpus": 16, "seq_length": 32768}),
            "model",
            json!(long),
        ),
    )
    .unwrap_err();
    assert!(error.contains("`model`"), "{error}");
    // A wrong type is named without echoing the input.
    let error = call_size_cp(
        &catalog,
        with(
            &json!({"model": "deepseek-v3", "hardware": "h100", "seq_length": 32768}),
            "num_gpus",
            json!(long),
        ),
    )
    .unwrap_err();
    assert!(error.contains("num_gpus") && error.len() < 1000, "{error}");
    // Short strings still work.
    assert!(skills::search_skills(
        &catalog,
        &skills::SearchSkillsInput {
            query: "context parallel".into(),
            limit: Some(u32::MAX),
        },
    )
    .is_ok());
}

#[test]
fn hf_configs_with_huge_dimensions_are_refused() {
    let catalog = catalog();
    let base = json!({
        "num_hidden_layers": 4, "hidden_size": 1024, "vocab_size": 32000,
        "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 4096
    });
    for (field, value) in [
        ("num_hidden_layers", json!(u64::MAX)),
        ("num_hidden_layers", json!(1u64 << 32)),
        ("hidden_size", json!(u64::MAX)),
        ("vocab_size", json!(1u64 << 40)),
        ("num_attention_heads", json!(1u64 << 31)),
        ("intermediate_size", json!(u64::MAX)),
        ("full_attention_interval", json!(u64::MAX)),
        ("head_dim", json!(1e300)),
    ] {
        let mut model = base.as_object().expect("object").clone();
        model.insert(field.into(), value.clone());
        let arguments = with(&small_config(), "model", Value::Object(model));
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            call_check_feasibility(&catalog, arguments)
        }))
        .unwrap_or_else(|_| panic!("check_feasibility panicked on model.{field} = {value}"));
        assert!(outcome.is_err(), "model.{field} = {value} accepted");
    }
}

#[test]
fn every_size_at_its_limit_together_answers() {
    // Each size alone is in range; their products are not small. Every tool must still answer.
    let catalog = catalog();
    let at_limits = json!({
        "model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 1_048_576,
        "seq_length": 33_554_432, "tp": 1024, "cp": 1_048_576, "pp": 1024, "vpp": 1024,
        "ep": 65_536, "etp": 1024, "micro_batch_size": 1024, "global_batch_size": 16_777_216,
        "recompute_num_layers": 4096, "mtp_num_layers": 64, "moe_ep_overlap_chunks": 1024
    });
    let before = small_config();
    let outcomes = [
        call_check_feasibility(&catalog, with(&at_limits, "precision", json!("bf16"))),
        call_choose_recompute(&catalog, with(&json!({}), "config", at_limits.clone())),
        call_triage_oom(
            &catalog,
            with(&json!({"before": before}), "after", at_limits.clone()),
        ),
        call_size_cp(
            &catalog,
            with(
                &json!({"model": "qwen3-30b-a3b", "hardware": "h100", "seq_length": 33_554_432,
                        "tensor_model_parallel_size": 1024, "global_batch_size": 16_777_216}),
                "num_gpus",
                json!(1_048_576),
            ),
        ),
    ];
    let plan = call_plan_layouts(
        &catalog,
        with(
            &json!({"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 1_048_576,
                    "seq_length": 33_554_432, "global_batch_size": 16_777_216,
                    "constraints": {"max_tp": 1024, "max_pp": 1024, "max_cp": 1_048_576,
                                    "max_ep": 65_536, "mbs": 1024}}),
            "base",
            json!({"mtp_num_layers": 64, "moe_ep_overlap_chunks": 1024}),
        ),
    );
    let recipe = call_lookup_recipe(
        &catalog,
        with(
            &json!({"model": "deepseek-v3", "seq_length": 33_554_432, "limit": 20}),
            "num_gpus",
            json!(1_048_576),
        ),
    );
    drop((plan, recipe));
    // Answers or errors are both fine; reaching here means nothing panicked. An `after` that
    // does not fit makes triage evaluate its fixes, which multiply the sizes.
    assert_eq!(outcomes.len(), 4);
    let triage = outcomes[2].as_ref().expect("triage answers");
    assert!(triage.contains(r#""after":{"fits":false"#), "{triage}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Random sizes inside the limits, all at once, through the cheap tools.
    #[test]
    fn random_sizes_inside_the_limits_answer(
        gpus in 1u32..=1_048_576,
        seq in 1u64..=33_554_432,
        tp in 1u32..=1024,
        cp in 1u32..=1_048_576,
        pp in 1u32..=1024,
        vpp in 1u32..=1024,
        ep in 1u32..=65_536,
        mbs in 1u32..=1024,
        gbs in 1u32..=16_777_216,
        budget in 0.001f64..1e6,
    ) {
        let catalog = catalog();
        let cfg = json!({
            "model": "deepseek-v3", "hardware": "gb200", "num_gpus": gpus, "seq_length": seq,
            "tp": tp, "cp": cp, "pp": pp, "vpp": vpp, "ep": ep, "micro_batch_size": mbs,
            "global_batch_size": gbs
        });
        let _ = call_check_feasibility(&catalog, with(&cfg, "precision", json!("bf16")));
        let _ = call_choose_recompute(
            &catalog,
            with(&json!({"config": cfg}), "memory_budget_gib", json!(budget)),
        );
        let _ = call_triage_oom(&catalog, with(&json!({"before": small_config()}), "after", cfg));
    }
}
