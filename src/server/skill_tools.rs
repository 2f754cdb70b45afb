//! The skill tools: thin MCP adapters over `crate::tools::skills`, dispatched through
//! `admission.rs` (search and fuzzy name matching off the async workers; all panic-guarded).

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_router, Json};

use super::SkillServer;
use crate::tools::skills::{
    self, ListSkillsOutput, ReadSkillInput, ReadSkillOutput, SearchSkillsInput, SearchSkillsOutput,
};

#[tool_router(router = skill_tool_router, vis = "pub(crate)")]
impl SkillServer {
    /// List every skill with its description, URI and whether it has a card.
    #[tool(
        name = "list_skills",
        title = "List skills",
        description = "List every available skill: name, one-paragraph description, resource URI of its SKILL.md, and whether it has a card.yaml with structured data. Start here, then call read_skill.",
        annotations(
            title = "List skills",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn list_skills(&self) -> Result<Json<ListSkillsOutput>, String> {
        self.cheap("list_skills", skills::list_skills)
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
        description = "Read a skill's instructions. With only `name`: the whole SKILL.md. With `section` (a heading path like \"Long context > CP sizing\", a heading, or its anchor): just that section. With `card: true`: the skill's card.yaml as JSON (validation status, measured data, limitations). With `file`: another file of the skill. The reply also lists the skill's section headings and files.",
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
    ) -> Result<Json<ReadSkillOutput>, String> {
        // A known skill is a cheap read and stays on the fast path under load; an unknown name
        // is fuzzy-matched against every skill, heavy with many skills.
        let known = input.name.len() <= crate::model::limits::SKILL_NAME.max
            && self.catalog().skill(input.name.trim()).is_some();
        if known {
            let Json(answer) =
                self.cheap("read_skill", |catalog| skills::read_skill(catalog, &input))?;
            return answer.map(Json).map_err(|error| error.to_string());
        }
        self.heavy("read_skill", move |catalog| {
            skills::read_skill(catalog, &input)
        })
        .await
    }
}
