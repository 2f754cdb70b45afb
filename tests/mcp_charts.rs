//! Charts over MCP: `charts: true` adds one embedded SVG resource per chart after the Markdown
//! text; without it the answer is the text block alone; `structuredContent` is the JSON either way.

mod mcp_support;
mod svg_support;

use mcp_support::{call, stdio_client};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{json, Value};

fn qwen3_235b_128k() -> Value {
    json!({
        "model": "qwen3-235b-a22b", "hardware": "h100", "num_gpus": 256, "seq_length": 131072,
        "tp": 4, "cp": 8, "pp": 8, "vpp": 4, "ep": 8, "sequence_parallel": true,
        "global_batch_size": 32, "recompute_granularity": "selective",
        "recompute_modules": ["layernorm", "moe"]
    })
}

/// (uri, mimeType, text) of every embedded resource block.
fn resources(result: &CallToolResult) -> Vec<(String, Option<String>, String)> {
    result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Resource(embedded) => match &embedded.resource {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => Some((uri.clone(), mime_type.clone(), text.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn check_with_charts_returns_svg_resources_beside_the_text() {
    let client = stdio_client().await;

    let plain = call(&client, "check_feasibility", qwen3_235b_128k()).await;
    assert_ne!(plain.is_error, Some(true), "{:?}", plain.content);
    assert_eq!(plain.content.len(), 1, "no charts unless asked");

    let mut arguments = qwen3_235b_128k();
    arguments["charts"] = json!(true);
    let result = call(&client, "check_feasibility", arguments).await;
    assert_ne!(result.is_error, Some(true), "{:?}", result.content);
    assert!(
        result.content[0].as_text().is_some(),
        "the Markdown text comes first"
    );
    let charts = resources(&result);
    let uris: Vec<&str> = charts.iter().map(|(uri, _, _)| uri.as_str()).collect();
    assert_eq!(uris, ["chart://check/memory.svg", "chart://check/time.svg"]);
    let structured = result
        .structured_content
        .as_ref()
        .expect("structured content");
    assert!(
        structured.get("charts").is_none(),
        "structuredContent stays the JSON"
    );
    let peaks: Vec<f64> = structured["memory"]["per_rank_peak_gib"]
        .as_array()
        .expect("per_rank_peak_gib")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let (_, mime, svg) = &charts[0];
    assert_eq!(mime.as_deref(), Some("image/svg+xml"));
    let ranks: std::collections::BTreeSet<String> = svg_support::with_role(svg, "segment")
        .iter()
        .filter_map(|s| s.get("data-rank").map(str::to_string))
        .collect();
    assert_eq!(ranks.len(), peaks.len(), "one bar per pipeline rank");
    assert_eq!(plain.structured_content, result.structured_content);

    client.cancel().await.expect("close");
}

#[tokio::test]
async fn triage_and_plan_with_charts_and_a_bad_flag() {
    let client = stdio_client().await;
    let diff = "--- a/run.yaml\n+++ b/run.yaml\n@@ -1,2 +1,1 @@\n-recompute_granularity: selective\n-recompute_modules: [layernorm, moe]\n+recompute_granularity: null\n";
    let result = call(
        &client,
        "triage_oom",
        json!({"before": qwen3_235b_128k(), "diff": diff, "charts": true}),
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{:?}", result.content);
    let uris: Vec<String> = resources(&result)
        .into_iter()
        .map(|(uri, _, _)| uri)
        .collect();
    assert_eq!(
        uris,
        [
            "chart://triage/triage-memory.svg",
            "chart://triage/triage-time.svg"
        ]
    );

    let result = call(
        &client,
        "plan_layouts",
        json!({"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 64, "seq_length": 65536, "top_k": 1, "charts": true}),
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{:?}", result.content);
    assert_eq!(resources(&result).len(), 2);

    let mut arguments = qwen3_235b_128k();
    arguments["charts"] = json!("yes");
    let result = call(&client, "check_feasibility", arguments).await;
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let text = serde_json::to_string(&result.content).expect("content");
    assert!(text.contains("charts"), "{text}");

    let tools = client.list_all_tools().await.expect("tools/list");
    for name in ["check_feasibility", "plan_layouts", "triage_oom"] {
        let tool = tools.iter().find(|t| t.name == name).expect("listed");
        let schema = Value::Object((*tool.input_schema).clone());
        assert_eq!(schema["properties"]["charts"]["type"], "boolean", "{name}");
    }
    client.cancel().await.expect("close");
}
