//! A large catalog over stdio: list results come in pages (`nextCursor`), and a large
//! SKILL.md comes back once per reply, in parts of at most 64 KiB.

mod mcp_support;

use mcp_support::BIN;
use rmcp::model::{CallToolRequestParams, PaginatedRequestParams};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::ServiceExt;
use serde_json::{json, Value};

type Client = RunningService<RoleClient, ()>;

const SKILLS: usize = 130;
const FILES_PER_SKILL: usize = 4;

async fn connect(root: &std::path::Path) -> Client {
    let root_arg = root.display().to_string();
    let command = tokio::process::Command::new(BIN).configure(|command| {
        command.args(["serve", "--skills-dir", &root_arg]);
        command.env("MOE_SKILLS_LOG", "warn");
    });
    ().serve(TokioChildProcess::new(command).expect("spawn"))
        .await
        .expect("initialize")
}

async fn call(client: &Client, tool: &'static str, arguments: Value) -> Value {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    let result = client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .expect("tools/call");
    assert_ne!(result.is_error, Some(true), "{:?}", result.content);
    result.structured_content.expect("structured content")
}

fn big_catalog() -> (tempfile::TempDir, String) {
    let root = tempfile::tempdir().expect("tempdir");
    for i in 0..SKILLS {
        let dir = root.path().join(format!("skill-{i:03}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: skill-{i:03}\ndescription: Generated skill {i}.\n---\n# Body\n"),
        )
        .expect("write");
        for f in 1..FILES_PER_SKILL {
            std::fs::write(dir.join(format!("file-{f}.md")), "text\n").expect("write");
        }
    }
    // A 200 KB SKILL.md with multi-byte characters, so that cuts must respect them.
    let mut big = String::from("---\nname: big-skill\ndescription: A very large skill.\n---\n");
    let mut line = 0;
    while big.len() < 200_000 {
        big.push_str(&format!("Line {line}: größer als ein Kilobyte — ✓\n"));
        line += 1;
    }
    let dir = root.path().join("big-skill");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("SKILL.md"), &big).expect("write");
    (root, big)
}

#[tokio::test]
async fn long_lists_come_in_pages() {
    let (root, _) = big_catalog();
    let client = connect(root.path()).await;

    let first = client.list_resources(None).await.expect("resources/list");
    assert!(first.next_cursor.is_some(), "more than one page expected");
    assert!(first.resources.len() <= 500);
    let all = client.list_all_resources().await.expect("all resources");
    let generated = all
        .iter()
        .filter(|resource| resource.uri.starts_with("skill://skill-"))
        .count();
    assert_eq!(generated, SKILLS * FILES_PER_SKILL);
    let mut uris: Vec<&str> = all.iter().map(|resource| resource.uri.as_str()).collect();
    uris.sort_unstable();
    uris.dedup();
    assert_eq!(uris.len(), all.len(), "no resource listed twice");

    let skills = client.list_all_skills().await.expect("skills/list");
    assert!(skills.len() > SKILLS);
    let prompts = client.list_all_prompts().await.expect("prompts/list");
    assert!(prompts.len() > SKILLS);

    let mut names = Vec::new();
    let mut total;
    let mut cursor: Option<String> = None;
    loop {
        let mut arguments = json!({ "limit": 50 });
        if let Some(cursor) = &cursor {
            arguments["cursor"] = json!(cursor);
        }
        let page = call(&client, "list_skills", arguments).await;
        let skills = page["skills"].as_array().expect("skills");
        assert!(skills.len() <= 50);
        names.extend(
            skills
                .iter()
                .filter_map(|s| s["name"].as_str().map(str::to_owned)),
        );
        total = page["total"].as_u64();
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(names.len(), skills.len());
    assert_eq!(total, Some(skills.len() as u64));
    assert!(
        names.windows(2).all(|pair| pair[0] < pair[1]),
        "sorted, no repeats"
    );

    let error = client
        .list_resources(Some(
            PaginatedRequestParams::default().with_cursor(Some("bogus".into())),
        ))
        .await
        .expect_err("foreign cursor");
    let ServiceError::McpError(error) = error else {
        panic!("expected an MCP error, got {error:?}")
    };
    assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn a_large_skill_comes_once_per_reply_in_parts() {
    let (root, big) = big_catalog();
    let client = connect(root.path()).await;
    let mut text = String::new();
    let mut offset: Option<u64> = None;
    let mut parts = 0;
    loop {
        let mut arguments = json!({ "name": "big-skill" });
        if let Some(offset) = offset {
            arguments["offset"] = json!(offset);
        }
        let Value::Object(arguments) = arguments else {
            unreachable!()
        };
        let result = client
            .call_tool(CallToolRequestParams::new("read_skill").with_arguments(arguments))
            .await
            .expect("read_skill");
        let structured = result.structured_content.expect("structured");
        let markdown = structured["markdown"].as_str().expect("markdown");
        assert!(markdown.len() <= 64 * 1024);
        // One copy: the text block says where the text is instead of repeating it.
        let content = serde_json::to_string(&result.content).expect("content");
        assert!(content.len() < 2_000, "{} bytes of content", content.len());
        assert!(content.contains("structuredContent.markdown"));
        assert_eq!(structured["total_bytes"].as_u64(), Some(big.len() as u64));
        text.push_str(markdown);
        parts += 1;
        match structured["next_offset"].as_u64() {
            Some(next) => {
                assert!(structured["note"]
                    .as_str()
                    .is_some_and(|note| note.contains("offset")));
                offset = Some(next);
            }
            None => break,
        }
    }
    assert!(parts >= 4, "{parts} parts");
    assert_eq!(text, big);
    client.cancel().await.expect("close");
}
