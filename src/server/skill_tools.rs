//! The skill tools: thin MCP adapters over `crate::tools::skills`, dispatched through
//! `admission.rs` (search and fuzzy name matching off the async workers; all panic-guarded).

use rmcp::handler::server::common::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{tool, tool_router, Json};

use super::SkillServer;
use crate::tools::skills::{
    self, ListSkillsInput, ListSkillsOutput, ReadSkillInput, ReadSkillOutput, SearchSkillsInput,
    SearchSkillsOutput,
};

/// `read_skill`'s result with its text once: in `structuredContent` (which hosts that know
/// output schemas read), while the text block says where it is instead of repeating a
/// serialized copy of up to [`skills::MAX_TEXT_BYTES`].
fn read_skill_result(output: &ReadSkillOutput) -> Result<CallToolResult, String> {
    let structured = serde_json::to_value(output).map_err(|error| error.to_string())?;
    let what = match (&output.markdown, &output.card) {
        (Some(text), _) => format!(
            "`{}` ({} bytes of text) is in structuredContent.markdown",
            output.path,
            text.len()
        ),
        (None, Some(_)) => format!("`{}` as JSON is in structuredContent.card", output.path),
        (None, None) => format!("`{}`", output.path),
    };
    let mut summary = format!("Skill `{}`, {}: {what}.", output.name, output.uri);
    if let Some(note) = &output.note {
        summary.push_str(&format!(" Note: {note}."));
    }
    summary.push_str(&format!(
        " Its {} section headings and {} files are listed in structuredContent.sections and .files.",
        output.sections.len(),
        output.files.len()
    ));
    let mut result = CallToolResult::success(vec![ContentBlock::text(summary)]);
    result.structured_content = Some(structured);
    Ok(result)
}

#[tool_router(router = skill_tool_router, vis = "pub(crate)")]
impl SkillServer {
    /// List every skill with its description, URI and whether it has a card.
    #[tool(
        name = "list_skills",
        title = "List skills",
        description = "List the available skills, sorted by name: name, one-paragraph description, resource URI of its SKILL.md, and whether it has a card.yaml with structured data. Pages of 100 (`limit` up to 500); pass `next_cursor` back as `cursor` for the next page. Start here, then call read_skill.",
        annotations(
            title = "List skills",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn list_skills(
        &self,
        Parameters(input): Parameters<ListSkillsInput>,
    ) -> Result<Json<ListSkillsOutput>, String> {
        let Json(answer) = self.cheap("list_skills", |catalog| {
            skills::list_skills_page(catalog, &input)
        })?;
        answer.map(Json).map_err(|error| error.to_string())
    }

    /// Rank skills and their best sections for a query.
    #[tool(
        name = "search_skills",
        title = "Search skills",
        description = "Search skill names, descriptions, trigger phrases and section text. Returns skills best first, each with its best matching section (heading path), a snippet and a URI. Pass `section` to read_skill to fetch only that part.",
        annotations(
            title = "Search skills",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn search_skills(
        &self,
        Parameters(input): Parameters<SearchSkillsInput>,
    ) -> Result<Json<SearchSkillsOutput>, String> {
        self.heavy("search_skills", move |catalog| {
            skills::search_skills(catalog, &input)
        })
        .await
    }

    /// Read a whole skill, one section, its card as JSON, or one of its files.
    #[tool(
        name = "read_skill",
        title = "Read a skill",
        description = "Read a skill's instructions. With only `name`: the whole SKILL.md. With `section` (a heading path like \"Long context > CP sizing\", a heading, or its anchor): just that section. With `card: true`: the skill's card.yaml as JSON (validation status, measured data, limitations). With `file`: another file of the skill. The reply also lists the skill's section headings and files. Text longer than 64 KiB comes in parts: pass `next_offset` back as `offset` for the next one. The text is in the structured result (`markdown`), once.",
        output_schema = schema_for_output::<ReadSkillOutput>(),
        annotations(
            title = "Read a skill",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn read_skill(
        &self,
        Parameters(input): Parameters<ReadSkillInput>,
    ) -> Result<CallToolResult, String> {
        // A known skill is a cheap read and stays on the fast path under load; an unknown name
        // is fuzzy-matched against every skill, heavy with many skills.
        let known = input.name.len() <= crate::model::limits::SKILL_NAME.max
            && self.catalog().skill(input.name.trim()).is_some();
        let Json(output) = if known {
            let Json(answer) =
                self.cheap("read_skill", |catalog| skills::read_skill(catalog, &input))?;
            Json(answer.map_err(|error| error.to_string())?)
        } else {
            self.heavy("read_skill", move |catalog| {
                skills::read_skill(catalog, &input)
            })
            .await?
        };
        read_skill_result(&output)
    }
}
