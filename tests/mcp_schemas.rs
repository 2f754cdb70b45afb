//! Every tool's `inputSchema` and `outputSchema`, as `tools/list` sends them over stdio, is
//! portable: no bare boolean where a schema belongs, no `type` arrays, no format outside JSON
//! Schema's list (`uint32`, `double`, ... make strict validators fail or warn), no
//! non-standard keyword, no schema that constrains nothing, and every `$ref` resolves inside
//! the document. `scripts/conformance.sh` also runs the MCP Inspector's own `--strict` lint in CI.

mod mcp_support;

use mcp_support::BIN;
use moe_skills::server::schema::{
    BOOLEAN_VALUED, STANDARD_FORMATS, STANDARD_KEYWORDS, SUBSCHEMA, SUBSCHEMA_ARRAYS,
    SUBSCHEMA_MAPS,
};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::ServiceExt;
use serde_json::Value;

const ANNOTATIONS: [&str; 3] = ["deprecated", "readOnly", "writeOnly"];

/// Walks one (sub)schema and appends every portability problem with its path.
fn check(
    root: &Value,
    node: &Value,
    keyword: Option<&str>,
    path: &str,
    problems: &mut Vec<String>,
) {
    let object = match node {
        Value::Bool(_) if keyword.is_some_and(|k| BOOLEAN_VALUED.contains(&k)) => return,
        Value::Bool(b) => return problems.push(format!("{path}: bare `{b}` subschema")),
        Value::Object(object) => object,
        other => return problems.push(format!("{path}: not a schema: {other}")),
    };
    for key in object.keys() {
        if !STANDARD_KEYWORDS.contains(&key.as_str()) && !ANNOTATIONS.contains(&key.as_str()) {
            problems.push(format!("{path}: non-standard keyword `{key}`"));
        }
    }
    if let Some(format) = object.get("format").and_then(Value::as_str) {
        if !STANDARD_FORMATS.contains(&format) {
            problems.push(format!("{path}: unknown format `{format}`"));
        }
    }
    if object.get("type").is_some_and(Value::is_array) {
        problems.push(format!("{path}: `type` is an array"));
    }
    let constrains = object.keys().any(|k| {
        !matches!(
            k.as_str(),
            "title" | "description" | "default" | "examples" | "$comment" | "$schema" | "$defs"
        ) && !ANNOTATIONS.contains(&k.as_str())
    });
    if !constrains && keyword != Some("not") {
        problems.push(format!(
            "{path}: constrains nothing (a bare `true` in disguise)"
        ));
    }
    if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
        let resolved = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer));
        if resolved.is_none() {
            problems.push(format!("{path}: `$ref` {reference} does not resolve"));
        }
    }
    for (key, value) in object {
        let key = key.as_str();
        if SUBSCHEMA_MAPS.contains(&key) {
            for (name, child) in value.as_object().into_iter().flatten() {
                check(
                    root,
                    child,
                    Some(key),
                    &format!("{path}/{key}/{name}"),
                    problems,
                );
            }
        } else if SUBSCHEMA_ARRAYS.contains(&key) || (key == "items" && value.is_array()) {
            for (i, child) in value.as_array().into_iter().flatten().enumerate() {
                check(
                    root,
                    child,
                    Some(key),
                    &format!("{path}/{key}/{i}"),
                    problems,
                );
            }
        } else if SUBSCHEMA.contains(&key) {
            check(root, value, Some(key), &format!("{path}/{key}"), problems);
        }
    }
}

#[tokio::test]
async fn every_tool_schema_is_portable() {
    let command = tokio::process::Command::new(BIN).configure(|command| {
        command.arg("serve").env("MOE_SKILLS_LOG", "warn");
    });
    let client =
        ().serve(TokioChildProcess::new(command).expect("spawn server"))
            .await
            .expect("initialize");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.len() >= 11, "{} tools", tools.len());
    let mut problems = Vec::new();
    let mut outputs = 0;
    for tool in &tools {
        let input = Value::Object(tool.input_schema.as_ref().clone());
        check(
            &input,
            &input,
            None,
            &format!("{}/inputSchema", tool.name),
            &mut problems,
        );
        if let Some(output) = &tool.output_schema {
            outputs += 1;
            let output = Value::Object(output.as_ref().clone());
            check(
                &output,
                &output,
                None,
                &format!("{}/outputSchema", tool.name),
                &mut problems,
            );
        }
    }
    assert!(outputs >= 9, "only {outputs} tools describe their output");
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    client.cancel().await.expect("shut down");
}

/// The walk above can fail: the raw schemars output of a config type has exactly the
/// problems the transform removes.
#[test]
fn the_check_catches_schemars_output() {
    let raw = rmcp::handler::server::common::schema_for_output::<
        moe_skills::tools::triage::TriageOomOutput,
    >();
    let raw = Value::Object(raw.as_ref().clone());
    let mut problems = Vec::new();
    check(&raw, &raw, None, "raw", &mut problems);
    for wanted in [
        "bare `true`",
        "unknown format `uint32`",
        "`type` is an array",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(wanted)),
            "{wanted}: {problems:?}"
        );
    }
    let mut fixed = raw.clone();
    moe_skills::server::schema::portable(&mut fixed, None);
    let mut after = Vec::new();
    check(&fixed, &fixed, None, "fixed", &mut after);
    assert!(after.is_empty(), "{after:?}");
}
