//! Input limits and the per-call guard through the built binary over stdio: the schemas state
//! the ranges, out-of-range sizes and over-long strings are `isError` results naming the field
//! (never a dropped request), and many concurrent heavy calls all get an answer.

mod mcp_support;

use mcp_support::{call, stdio_client, BIN};
use rmcp::model::{CallToolRequestParams, CallToolResult, ReadResourceRequestParams};
use serde_json::{json, Value};

fn error_text(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "expected an error: {result:?}");
    serde_json::to_string(&result.content).expect("content")
}

#[tokio::test]
async fn schemas_state_limits_and_out_of_range_calls_are_answered() {
    let client = stdio_client().await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let schema = |name: &str| -> Value {
        let tool = tools.iter().find(|t| t.name == name).expect("tool listed");
        Value::Object((*tool.input_schema).clone())
    };
    let size_cp = schema("size_cp");
    assert_eq!(size_cp["properties"]["num_gpus"]["maximum"], 1_048_576);
    assert_eq!(size_cp["properties"]["num_gpus"]["minimum"], 1);
    let check = schema("check_feasibility");
    // An optional field's range sits on its integer branch (no `type` arrays: see mcp_schemas.rs).
    assert_eq!(
        check["properties"]["micro_batch_size"]["anyOf"][0],
        json!({"type": "integer", "minimum": 1, "maximum": 1024})
    );
    assert_eq!(schema("read_skill")["properties"]["name"]["maxLength"], 256);

    let two_31 = 1u64 << 31;
    let cases = [
        (
            "size_cp",
            json!({"model": "deepseek-v3", "hardware": "h100", "seq_length": 131072, "num_gpus": two_31}),
            "num_gpus",
        ),
        (
            "lookup_recipe",
            json!({"model": "deepseek-v3", "seq_length": 131072, "num_gpus": two_31}),
            "num_gpus",
        ),
        (
            "plan_layouts",
            json!({"model": "deepseek-v3", "hardware": "h100", "num_gpus": 256, "seq_length": 131072,
                   "constraints": {"micro_batch_size": two_31}}),
            "constraints.micro_batch_size",
        ),
        ("read_skill", json!({"name": "x".repeat(100_000)}), "name"),
    ];
    for (tool, arguments, field) in cases {
        let text = error_text(&call(&client, tool, arguments).await);
        assert!(text.contains(&format!("`{field}`")), "{tool}: {text}");
    }
    // An over-long resource URI is refused before any fuzzy matching.
    let uri = format!("skill://{}/SKILL.md", "x".repeat(100_000));
    let error = client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .expect_err("refused");
    assert!(error.to_string().contains("`uri`"), "{error}");
    // The server is still there and answers normally.
    let ok = call(&client, "list_models", json!({})).await;
    assert_ne!(ok.is_error, Some(true));
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn concurrent_heavy_calls_are_all_answered() {
    let client = stdio_client().await;
    let heavy = json!({"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 16,
                       "seq_length": 32768});
    let Value::Object(heavy) = heavy else {
        unreachable!()
    };
    // One task per call, so that they are in flight together.
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let peer = client.peer().clone();
            let arguments = heavy.clone();
            let tool = if i % 2 == 0 {
                "size_cp"
            } else {
                "plan_layouts"
            };
            tokio::spawn(async move {
                peer.call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
                    .await
            })
        })
        .collect();
    let cheap = call(&client, "list_skills", json!({})).await;
    assert_ne!(cheap.is_error, Some(true));
    for task in tasks {
        let answer = task.await.expect("task").expect("answered");
        assert_ne!(answer.is_error, Some(true), "{:?}", answer.content);
    }
    client.cancel().await.expect("close");
}

/// Lines rmcp would drop unanswered get a JSON-RPC error, and the session goes on.
#[test]
fn stdio_answers_garbage_and_oversized_lines() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    let mut child = Command::new(BIN)
        .arg("serve")
        .env("MOE_SKILLS_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn server");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut next = || {
        let mut line = String::new();
        stdout.read_line(&mut line).expect("a reply line");
        serde_json::from_str::<Value>(&line).expect("a JSON reply")
    };
    stdin.write_all(b"this is not json\n").expect("write");
    let reply = next();
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    assert!(reply["id"].is_null());
    let mut huge = vec![b' '; 16 * 1024 * 1024 + 1];
    huge.push(b'\n');
    stdin.write_all(&huge).expect("write");
    let reply = next();
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "edge-test", "version": "0"}}});
    stdin
        .write_all(format!("{initialize}\n").as_bytes())
        .expect("write");
    let reply = next();
    assert_eq!(reply["id"], 1, "{reply}");
    assert!(reply["result"]["serverInfo"].is_object(), "{reply}");
    drop(stdin);
    let status = child.wait().expect("server exits at end of input");
    assert!(status.success());
}
