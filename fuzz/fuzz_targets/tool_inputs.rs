//! Every tool function with arbitrary JSON arguments, as the MCP server hands them over: each
//! call must answer (a result or an error), never panic, whatever the numbers and strings.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use moe_skills::catalog::Catalog;
use moe_skills::tools::common::parse_input;
use moe_skills::tools::{feasibility, log_compare, plan, recipe, recompute, size_cp, skills, triage};
use serde_json::{Map, Value};

fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new()))
}

fn call_all(arguments: &Map<String, Value>) {
    let catalog = catalog();
    let args = || arguments.clone();
    let _ = parse_input(args()).and_then(|input| size_cp::size_cp(catalog, input));
    let _ = parse_input(args()).and_then(|input| recipe::lookup_recipe(catalog, input));
    let _ = parse_input(args()).and_then(|input| recompute::choose_recompute(catalog, input));
    let _ = parse_input(args()).and_then(|input| triage::triage_oom(catalog, input));
    let _ = parse_input(args()).and_then(|input| plan::plan_layouts(catalog, input));
    let _ = parse_input(args()).and_then(|input| log_compare::compare_log(catalog, input));
    if let Ok(cfg) = moe_skills::inputs::read_value(&Value::Object(args())) {
        let _ = feasibility::check_feasibility(catalog, cfg);
    }
    if let Ok(input) = serde_json::from_value::<skills::SearchSkillsInput>(Value::Object(args())) {
        let _ = skills::search_skills(catalog, &input);
    }
    if let Ok(input) = serde_json::from_value::<skills::ReadSkillInput>(Value::Object(args())) {
        let _ = skills::read_skill(catalog, &input);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(Value::Object(arguments)) = serde_json::from_slice::<Value>(data) {
        call_all(&arguments);
    }
});
