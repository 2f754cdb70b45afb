//! The built binary over streamable HTTP: rmcp's client, plus raw requests for the HTTP
//! security checks (Origin, Host, bearer token, non-loopback binds).

mod mcp_support;

use std::collections::HashMap;

use mcp_support::{fixture_arg, raw_post, spawn_http, BIN, INITIALIZE};
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;

#[tokio::test]
async fn rmcp_client_lists_and_reads_every_skill_over_http() {
    let server = spawn_http(&[]);
    let transport = StreamableHttpClientTransport::from_uri(server.url.as_str());
    let client = ().serve(transport).await.expect("initialize over HTTP");
    assert_eq!(
        client
            .peer_info()
            .expect("info")
            .server_info
            .as_ref()
            .expect("server info")
            .name,
        "moe-skills"
    );
    let skills = client.list_all_skills().await.expect("skills/list");
    assert_eq!(
        skills.len(),
        mcp_support::expected_skill_count(&["catalog"])
    );
    for skill in &skills {
        let read = client
            .read_resource(ReadResourceRequestParams::new(skill.uri.clone()))
            .await
            .expect("read SKILL.md");
        let ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
            panic!("text expected")
        };
        let rmcp::model::SkillResources::Files(files) = &skill.resources else {
            panic!("files expected")
        };
        let entry = files
            .iter()
            .find(|file| file.uri == skill.uri)
            .expect("SKILL.md entry");
        entry.verify(text.as_bytes()).expect("digest matches");
    }
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|tool| tool.name == "search_skills"));
    client.cancel().await.expect("close");
}

#[test]
fn foreign_origin_is_rejected_with_403_and_local_origin_accepted() {
    let server = spawn_http(&[]);
    let (status, _) = raw_post(
        &server.addr,
        &[("Origin", "http://evil.example")],
        INITIALIZE,
    );
    assert_eq!(status, 403);
    let (status, body) = raw_post(
        &server.addr,
        &[("Origin", "http://localhost:3000")],
        INITIALIZE,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("moe-skills"), "{body}");
    let (status, _) = raw_post(&server.addr, &[], INITIALIZE);
    assert_eq!(status, 200);
}

#[test]
fn foreign_host_header_is_rejected() {
    let server = spawn_http(&[]);
    let (status, _) = raw_post(&server.addr, &[("Host", "evil.example")], INITIALIZE);
    assert_eq!(status, 403);
}

#[test]
fn oversized_body_is_rejected() {
    let server = spawn_http(&["--max-body-bytes", "1024"]);
    let padding = "x".repeat(4096);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"{padding}","version":"0"}}}}}}"#
    );
    let (status, _) = raw_post(&server.addr, &[], &body);
    assert_eq!(status, 413);
}

#[tokio::test]
async fn bearer_token_is_required_when_configured() {
    let server = spawn_http(&["--token", "s3cret"]);
    let (status, _) = raw_post(&server.addr, &[], INITIALIZE);
    assert_eq!(status, 401);
    let (status, _) = raw_post(
        &server.addr,
        &[("Authorization", "Bearer wrong")],
        INITIALIZE,
    );
    assert_eq!(status, 401);
    let (status, _) = raw_post(
        &server.addr,
        &[("Authorization", "Bearer s3cret")],
        INITIALIZE,
    );
    assert_eq!(status, 200);

    let config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str())
        .auth_header("s3cret")
        .custom_headers(HashMap::new());
    let client =
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("initialize with token");
    assert_eq!(
        client.list_all_skills().await.expect("skills/list").len(),
        mcp_support::expected_skill_count(&["catalog"])
    );
    client.cancel().await.expect("close");
}

#[test]
fn non_loopback_bind_without_token_is_refused() {
    let output = std::process::Command::new(BIN)
        .args([
            "serve",
            "--http",
            "0.0.0.0:0",
            "--skills-dir",
            &fixture_arg("catalog"),
        ])
        .env_remove("MOE_SKILLS_TOKEN")
        .output()
        .expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--token"), "{stderr}");
}
