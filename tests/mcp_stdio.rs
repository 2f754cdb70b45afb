//! The built binary over stdio, driven by rmcp's client.

mod mcp_support;

use std::collections::BTreeMap;

use mcp_support::{fixture, fixture_arg, BIN};
use rmcp::model::{
    CallToolRequestParams, GetPromptRequestParams, GetSkillRequestParams, ProtocolVersion,
    ReadResourceDirectoryRequestParams, ReadResourceRequestParams, ResourceContents,
    SkillResources,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt, ServiceExt};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

type Client = RunningService<RoleClient, ()>;

fn server_command(dirs: &[&str]) -> tokio::process::Command {
    tokio::process::Command::new(BIN).configure(|command| {
        command.arg("serve");
        for dir in dirs {
            command.args(["--skills-dir", &fixture_arg(dir)]);
        }
        command.env("MOE_SKILLS_LOG", "warn");
    })
}

async fn connect(dirs: &[&str]) -> Client {
    let transport = TokioChildProcess::new(server_command(dirs)).expect("spawn server");
    ().serve(transport).await.expect("initialize")
}

async fn call(
    client: &Client,
    tool: &'static str,
    arguments: Value,
) -> rmcp::model::CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .expect("tools/call")
}

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    serde_json::to_string(&result.content).expect("serialize content")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn server_identifies_itself_and_lists_read_only_tools_with_output_schemas() {
    let client = connect(&["catalog"]).await;
    let info = client.peer_info().expect("server info");
    let implementation = info.server_info.as_ref().expect("server info");
    assert_eq!(implementation.name, "moe-skills");
    assert_eq!(implementation.version, env!("CARGO_PKG_VERSION"));
    let capabilities = &info.capabilities;
    assert!(capabilities.supports_skills());
    assert!(capabilities.completions.is_some());

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    for expected in ["list_skills", "read_skill", "search_skills"] {
        assert!(names.contains(&expected), "{names:?}");
    }
    for tool in tools
        .iter()
        .filter(|tool| names.contains(&tool.name.as_ref()))
    {
        let annotations = tool.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.read_only_hint, Some(true), "{}", tool.name);
        assert_eq!(annotations.idempotent_hint, Some(true), "{}", tool.name);
        assert_eq!(annotations.open_world_hint, Some(false), "{}", tool.name);
        assert!(
            tool.output_schema.is_some(),
            "{} has no output schema",
            tool.name
        );
    }
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn list_search_and_read_skills_through_tools() {
    let client = connect(&["catalog"]).await;

    let listed = call(&client, "list_skills", json!({})).await;
    let skills = &listed.structured_content.expect("structured")["skills"];
    let names: Vec<&str> = skills
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|skill| skill["name"].as_str())
        .collect();
    assert!(names.contains(&"good-skill") && names.contains(&"mb-style-skill"));
    // The broken fixtures are skipped, the rest still load.
    assert!(!names.contains(&"broken-yaml") && !names.contains(&"no-description"));
    let good = skills
        .as_array()
        .and_then(|skills| skills.iter().find(|skill| skill["name"] == "good-skill"))
        .expect("good-skill listed");
    assert_eq!(good["uri"], "skill://good-skill/SKILL.md");
    assert_eq!(good["has_card"], true);

    let found = call(
        &client,
        "search_skills",
        json!({"query": "CP sizing rules", "limit": 3}),
    )
    .await;
    let results = &found.structured_content.expect("structured")["results"];
    // The embedded moe-long-context skill has CP sizing rules too; the fixture must rank.
    let fixture_hit = results
        .as_array()
        .and_then(|hits| hits.iter().find(|hit| hit["skill"] == "good-skill"))
        .expect("good-skill among the top results");
    assert_eq!(
        fixture_hit["section"],
        "Context parallel sizing > CP Sizing Rules Of Thumb"
    );
    assert_eq!(
        fixture_hit["uri"],
        "skill://good-skill/SKILL.md#cp-sizing-rules-of-thumb"
    );

    let trigger = call(
        &client,
        "search_skills",
        json!({"query": "hybridep vs alltoall"}),
    )
    .await;
    assert_eq!(
        trigger.structured_content.expect("structured")["results"][0]["skill"],
        "mb-style-skill"
    );

    let section = call(
        &client,
        "read_skill",
        json!({"name": "good-skill", "section": "Context parallel sizing > Recompute"}),
    )
    .await;
    let section = section.structured_content.expect("structured");
    assert_eq!(
        section["markdown"],
        "## Recompute\n\nPrefer selective recompute over full recompute."
    );

    let whole = call(&client, "read_skill", json!({"name": "good-skill"})).await;
    let whole = whole.structured_content.expect("structured");
    let on_disk =
        std::fs::read_to_string(fixture("catalog/skills/good-skill/SKILL.md")).expect("read");
    assert_eq!(whole["markdown"], on_disk);

    let card = call(
        &client,
        "read_skill",
        json!({"name": "mb-style-skill", "card": true}),
    )
    .await;
    let card = card.structured_content.expect("structured");
    assert_eq!(
        card["card"]["cp_scaling_data"][0]["entries"][0]["tflops"],
        "~300"
    );
    assert_eq!(
        card["card"]["best_configs"]["dsv3_h100"]["parallelism"],
        "TP2 EP64 PP8 VPP4"
    );
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn unknown_names_are_errors_that_list_the_closest_names() {
    let client = connect(&["catalog"]).await;
    let unknown = call(&client, "read_skill", json!({"name": "good-skil"})).await;
    assert_eq!(unknown.is_error, Some(true));
    assert!(
        text_of(&unknown).contains("closest: good-skill"),
        "{}",
        text_of(&unknown)
    );

    let section = call(
        &client,
        "read_skill",
        json!({"name": "good-skill", "section": "Recompte"}),
    )
    .await;
    assert_eq!(section.is_error, Some(true));
    assert!(text_of(&section).contains("Context parallel sizing > Recompute"));

    let no_card = call(
        &client,
        "read_skill",
        json!({"name": "good-skill", "card": true, "section": "x"}),
    )
    .await;
    assert_eq!(no_card.is_error, Some(true));

    let error = client
        .read_resource(ReadResourceRequestParams::new("skill://mb-style/SKILL.md"))
        .await
        .expect_err("unknown resource");
    let ServiceError::McpError(error) = error else {
        panic!("expected an MCP error, got {error:?}")
    };
    assert!(
        error.message.contains("skill://mb-style-skill/SKILL.md"),
        "{}",
        error.message
    );

    let error = client
        .get_prompt(GetPromptRequestParams::new("good-skil"))
        .await
        .expect_err("unknown prompt");
    assert!(error.to_string().contains("good-skill"), "{error}");

    let error = client
        .get_skill(GetSkillRequestParams::new("skill://nope/SKILL.md"))
        .await
        .expect_err("unknown skill");
    assert!(
        matches!(error, ServiceError::McpError(ref e) if e.code == rmcp::model::ErrorCode::INVALID_PARAMS)
    );
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn skills_list_digests_and_sizes_match_the_served_bytes() {
    let client = connect(&["catalog"]).await;
    let skills = client.list_all_skills().await.expect("skills/list");
    assert_eq!(
        skills.len(),
        mcp_support::expected_skill_count(&["catalog"])
    );
    let mut checked = 0;
    for skill in &skills {
        rmcp::model::validate_skills(std::slice::from_ref(skill)).expect("valid entry");
        let SkillResources::Files(files) = &skill.resources else {
            panic!("static skills list their files");
        };
        for file in files {
            let read = client
                .read_resource(ReadResourceRequestParams::new(file.uri.clone()))
                .await
                .expect("resources/read");
            let bytes = match read.contents.first().expect("contents") {
                ResourceContents::TextResourceContents { text, .. } => text.as_bytes().to_vec(),
                ResourceContents::BlobResourceContents { blob, uri, .. } => {
                    // Binary: compare the blob with the file on disk encoded the same way.
                    let path = uri.trim_start_matches("skill://good-skill/");
                    let disk = std::fs::read(fixture("catalog/skills/good-skill").join(path))
                        .expect("disk");
                    assert_eq!(blob, &moe_skills::server::resources::base64_encode(&disk));
                    disk
                }
                other => panic!("unexpected contents {other:?}"),
            };
            assert_eq!(file.size, bytes.len() as u64, "{}", file.uri);
            assert_eq!(
                file.digest,
                format!("sha256:{}", hex(&Sha256::digest(&bytes))),
                "{}",
                file.uri
            );
            file.verify(&bytes).expect("rmcp verifies the digest");
            if matches!(skill.name(), "good-skill" | "mb-style-skill") {
                checked += 1;
            }
        }
    }
    // good-skill: SKILL.md, card.yaml (from cards/), notes, script, png; mb-style-skill: 2.
    assert_eq!(checked, 7);

    let good = skills
        .iter()
        .find(|skill| skill.name() == "good-skill")
        .expect("good-skill");
    assert_eq!(good.frontmatter.extra["license"], "Apache-2.0");
    assert_eq!(good.frontmatter.extra["metadata"]["owner"], "fixtures");
    let fetched = client
        .get_skill(GetSkillRequestParams::new(
            "skill://mb-style-skill/SKILL.md",
        ))
        .await
        .expect("skills/get");
    assert_eq!(
        fetched.skill.frontmatter.description,
        "Megatron-Bridge style skill with a folded description that spans two lines."
    );
    assert!(fetched.skill.frontmatter.extra.contains_key("when_to_use"));

    let directory = client
        .read_resource_directory(ReadResourceDirectoryRequestParams::new(
            "skill://good-skill",
        ))
        .await
        .expect("directory read");
    let entries: BTreeMap<String, Option<String>> = directory
        .resources
        .iter()
        .map(|resource| (resource.uri.clone(), resource.mime_type.clone()))
        .collect();
    assert_eq!(
        entries
            .get("skill://good-skill/references")
            .cloned()
            .flatten()
            .as_deref(),
        Some("inode/directory")
    );
    assert_eq!(
        entries
            .get("skill://good-skill/card.yaml")
            .cloned()
            .flatten()
            .as_deref(),
        Some("application/yaml")
    );
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn resources_templates_sections_prompts_and_completions() {
    let client = connect(&["catalog"]).await;
    let resources = client.list_all_resources().await.expect("resources/list");
    let skill_md = resources
        .iter()
        .find(|resource| resource.uri == "skill://good-skill/SKILL.md")
        .expect("SKILL.md listed");
    assert_eq!(skill_md.mime_type.as_deref(), Some("text/markdown"));
    assert_eq!(skill_md.name, "good-skill");
    let templates = client
        .list_all_resource_templates()
        .await
        .expect("templates");
    assert_eq!(templates.len(), 3);

    let section = client
        .read_resource(ReadResourceRequestParams::new(
            "skill://good-skill/SKILL.md#troubleshooting",
        ))
        .await
        .expect("section read");
    let ResourceContents::TextResourceContents { text, .. } = &section.contents[0] else {
        panic!("text expected")
    };
    assert!(text.starts_with("# Troubleshooting"));

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let prompt = prompts
        .iter()
        .find(|prompt| prompt.name == "good-skill")
        .expect("one prompt per skill");
    assert_eq!(prompt.arguments.as_ref().map(Vec::len), Some(1));
    let mut arguments = serde_json::Map::new();
    arguments.insert("question".into(), json!("What CP for 128K?"));
    let rendered = client
        .get_prompt(GetPromptRequestParams::new("good-skill").with_arguments(arguments))
        .await
        .expect("prompts/get");
    let message = serde_json::to_string(&rendered.messages).expect("json");
    assert!(message.contains("CP Sizing Rules Of Thumb"));
    assert!(message.contains("What CP for 128K?"));

    let names = client
        .complete_resource_simple("skill://{skill}/SKILL.md", "skill", "mb")
        .await
        .expect("complete skill");
    assert_eq!(names, ["mb-style-skill"]);
    let mut context = std::collections::HashMap::new();
    context.insert("skill".to_owned(), "good-skill".to_owned());
    let paths = client
        .complete_resource_argument(
            "skill://{skill}/{path}",
            "path",
            "ref",
            Some(rmcp::model::CompletionContext::with_arguments(context)),
        )
        .await
        .expect("complete path");
    assert_eq!(paths.values, ["references/notes.md"]);
    let questions = client
        .complete_prompt_simple("mb-style-skill", "question", "tune")
        .await
        .expect("complete question");
    assert_eq!(questions, ["tune dispatcher for deepep"]);
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn later_roots_override_earlier_ones() {
    let client = connect(&["catalog", "override"]).await;
    let listed = call(&client, "list_skills", json!({})).await;
    let skills = listed.structured_content.expect("structured")["skills"].clone();
    let good = skills
        .as_array()
        .and_then(|skills| {
            skills
                .iter()
                .find(|skill| skill["name"] == "good-skill")
                .cloned()
        })
        .expect("good-skill");
    assert_eq!(
        good["description"],
        "Overridden fixture skill from a later root."
    );
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn stateless_2026_era_client_reads_skills() {
    let transport = TokioChildProcess::new(server_command(&["catalog"])).expect("spawn");
    let client = ()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("discover");
    let skills = client.list_all_skills().await.expect("skills/list");
    assert_eq!(
        skills.len(),
        mcp_support::expected_skill_count(&["catalog"])
    );
    let read = client
        .read_resource(ReadResourceRequestParams::new(
            "skill://mb-style-skill/card.yaml",
        ))
        .await
        .expect("read card");
    let ResourceContents::TextResourceContents { mime_type, .. } = &read.contents[0] else {
        panic!("text")
    };
    assert_eq!(mime_type.as_deref(), Some("application/yaml"));
    let listed = call(&client, "list_skills", json!({})).await;
    assert!(listed.structured_content.is_some());
    client.cancel().await.expect("close");
}

#[derive(Clone, Default)]
struct ChangeListener {
    resources_changed: std::sync::Arc<tokio::sync::Notify>,
}

impl rmcp::ClientHandler for ChangeListener {
    async fn on_resource_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.resources_changed.notify_one();
    }
}

#[tokio::test]
async fn watch_reloads_the_catalog_and_notifies_the_client() {
    let root = tempfile::tempdir().expect("tempdir");
    let skill_dir = root.path().join("watched-skill");
    std::fs::create_dir_all(&skill_dir).expect("mkdir");
    std::fs::write(
        skill_dir.join("SKILL.md"),
        "---\nname: watched-skill\ndescription: Before the edit.\n---\n# Body\n",
    )
    .expect("write");
    let root_arg = root.path().display().to_string();
    let command = tokio::process::Command::new(BIN).configure(|command| {
        command.args(["serve", "--watch", "--skills-dir", &root_arg]);
        command.env("MOE_SKILLS_LOG", "warn");
    });
    let listener = ChangeListener::default();
    let changed = listener.resources_changed.clone();
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Collect the server's log to check that a failed reload says why.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    if let Some(stderr) = stderr {
        let log = log.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(mut log) = log.lock() {
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
    }
    let client = listener.serve(transport).await.expect("initialize");
    // Give the watcher a moment to register before editing.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let added = root.path().join("added-skill");
    std::fs::create_dir_all(&added).expect("mkdir");
    std::fs::write(
        added.join("SKILL.md"),
        "---\nname: added-skill\ndescription: Appeared while serving.\n---\n# Added\n",
    )
    .expect("write");
    tokio::time::timeout(std::time::Duration::from_secs(10), changed.notified())
        .await
        .expect("resources/list_changed after the edit");
    let skills = client.list_all_skills().await.expect("skills/list");
    let names: Vec<&str> = skills.iter().map(|skill| skill.name()).collect();
    assert!(names.contains(&"added-skill"), "{names:?}");

    // Caught half-written: the skill keeps its last good version instead of vanishing.
    // A marker skill written after it tells when the reload has happened.
    std::fs::write(skill_dir.join("SKILL.md"), "---\nname: watched-sk").expect("write");
    let marker = root.path().join("marker-skill");
    std::fs::create_dir_all(&marker).expect("mkdir");
    std::fs::write(
        marker.join("SKILL.md"),
        "---\nname: marker-skill\ndescription: Written after the broken edit.\n---\n",
    )
    .expect("write");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let skills = client.list_all_skills().await.expect("skills/list");
        if skills.iter().any(|skill| skill.name() == "marker-skill") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no reload after the broken edit"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let listed = client
        .call_tool(
            CallToolRequestParams::new("read_skill").with_arguments(
                json!({"name": "watched-skill"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        )
        .await
        .expect("read_skill");
    assert_ne!(listed.is_error, Some(true), "{:?}", listed.content);
    assert_eq!(
        listed.structured_content.expect("structured")["description"],
        "Before the edit."
    );
    // The log names the broken file and says the old version is kept.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let text = log.lock().map(|log| log.clone()).unwrap_or_default();
        if text.contains("watched-skill") && text.contains("failed to reload") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "log: {text}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    client.cancel().await.expect("close");
}
