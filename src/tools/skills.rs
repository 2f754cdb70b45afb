//! `list_skills`, `search_skills` and `read_skill` over a catalog snapshot.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, Section, Skill, CARD_YAML, SKILL_MD};

/// Default and maximum number of search results.
pub const DEFAULT_SEARCH_LIMIT: usize = 10;
pub const MAX_SEARCH_LIMIT: usize = 50;

/// How many close names an error lists.
const SUGGESTIONS: usize = 5;

fn list_or(items: &[String], empty: &str) -> String {
    if items.is_empty() {
        empty.to_owned()
    } else {
        items.join(", ")
    }
}

/// Why a skill tool could not answer. Messages name the closest valid choices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillToolError {
    #[error("unknown skill `{name}`; closest: {}", list_or(.suggestions, "(no skills are loaded)"))]
    UnknownSkill {
        name: String,
        suggestions: Vec<String>,
    },
    #[error("skill `{skill}` has no section `{section}`; closest: {}", list_or(.suggestions, "(the skill has no headings)"))]
    UnknownSection {
        skill: String,
        section: String,
        suggestions: Vec<String>,
    },
    #[error("skill `{skill}` has no card.yaml; skills with cards: {}", list_or(.with_cards, "(none)"))]
    NoCard {
        skill: String,
        with_cards: Vec<String>,
    },
    #[error("skill `{skill}` has no file `{path}`; closest: {}", list_or(.suggestions, "(none)"))]
    UnknownFile {
        skill: String,
        path: String,
        suggestions: Vec<String>,
    },
    #[error("file `{path}` of skill `{skill}` is binary; read it as a resource: {uri}")]
    BinaryFile {
        skill: String,
        path: String,
        uri: String,
    },
    #[error("`query` is empty; pass words to search for, e.g. \"context parallel sizing\"")]
    EmptyQuery,
    #[error("set at most one of `section`, `card` and `file`")]
    ConflictingSelectors,
    /// A string longer than its limit (`crate::model::limits`).
    #[error(transparent)]
    Limit(#[from] crate::model::limits::LimitError),
}

/// Look a skill up, or fail with the closest names.
pub fn find_skill<'a>(catalog: &'a Catalog, name: &str) -> Result<&'a Skill, SkillToolError> {
    catalog
        .skill(name.trim())
        .ok_or_else(|| SkillToolError::UnknownSkill {
            name: name.to_owned(),
            suggestions: catalog.closest_skill_names(name, SUGGESTIONS),
        })
}

/// Look a section up by heading path or anchor, or fail with the closest paths.
pub fn find_section<'a>(skill: &'a Skill, section: &str) -> Result<&'a Section, SkillToolError> {
    skill
        .sections
        .find(section)
        .map_err(|missing| SkillToolError::UnknownSection {
            skill: skill.name.clone(),
            section: section.to_owned(),
            suggestions: missing.suggestions,
        })
}

// ---------------------------------------------------------------- list_skills

/// One skill in `list_skills`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SkillSummary {
    /// Skill name (pass it to `read_skill`).
    pub name: String,
    /// What the skill does and when to use it.
    pub description: String,
    /// Resource URI of the skill's SKILL.md.
    pub uri: String,
    /// Whether the skill has a card.yaml (read it with `read_skill` and `card: true`).
    pub has_card: bool,
}

/// Output of `list_skills`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListSkillsOutput {
    /// Every loaded skill, sorted by name.
    pub skills: Vec<SkillSummary>,
}

/// Every skill, sorted by name.
pub fn list_skills(catalog: &Catalog) -> ListSkillsOutput {
    ListSkillsOutput {
        skills: catalog
            .skills()
            .map(|skill| SkillSummary {
                name: skill.name.clone(),
                description: skill.description.clone(),
                uri: skill.uri(),
                has_card: skill.has_card(),
            })
            .collect(),
    }
}

// ---------------------------------------------------------------- search_skills

/// Input of `search_skills`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct SearchSkillsInput {
    /// Words or a question, e.g. "CP size for 256K DeepSeek-V3" or a skill name.
    pub query: String,
    /// Maximum number of results (default 10, at most 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// One ranked result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchResult {
    /// Skill name.
    pub skill: String,
    /// Heading path of the best matching section ("A > B"), or null when the skill's name or
    /// description matched best. Pass it to `read_skill` as `section`.
    pub section: Option<String>,
    /// Relevance; higher is better. Exact skill names and trigger phrases score above 100.
    pub score: f64,
    /// Text around the first match.
    pub snippet: String,
    /// Resource URI of the section (or of SKILL.md).
    pub uri: String,
}

/// Output of `search_skills`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchSkillsOutput {
    /// Best first; one entry per skill.
    pub results: Vec<SearchResult>,
}

/// Rank skills and their best sections for a query.
pub fn search_skills(
    catalog: &Catalog,
    input: &SearchSkillsInput,
) -> Result<SearchSkillsOutput, SkillToolError> {
    crate::model::limits::QUERY.check("", Some(&input.query))?;
    if input.query.trim().is_empty() {
        return Err(SkillToolError::EmptyQuery);
    }
    let limit = input
        .limit
        .map_or(DEFAULT_SEARCH_LIMIT, |limit| limit as usize)
        .clamp(1, MAX_SEARCH_LIMIT);
    let results = catalog
        .search(&input.query, limit)
        .into_iter()
        .filter_map(|hit| {
            let skill = catalog.skill(&hit.skill)?;
            let section = hit
                .section
                .and_then(|index| skill.sections.sections.get(index));
            let (text, uri) = match section {
                Some(section) => (section.text.as_str(), skill.section_uri(section)),
                None => (skill.description.as_str(), skill.uri()),
            };
            Some(SearchResult {
                skill: hit.skill,
                section: section
                    .map(Section::display_path)
                    .filter(|path| !path.is_empty()),
                score: (hit.score * 1000.0).round() / 1000.0,
                snippet: crate::catalog::search::snippet(text, &input.query),
                uri,
            })
        })
        .collect();
    Ok(SearchSkillsOutput { results })
}

// ---------------------------------------------------------------- read_skill

/// Input of `read_skill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct ReadSkillInput {
    /// Skill name, as listed by `list_skills`.
    pub name: String,
    /// Heading path ("Long context > CP sizing"), a heading, or its anchor; only that section
    /// is returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// Return the skill's card.yaml as JSON instead of its text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<bool>,
    /// Return another file of the skill (a path from `files`, e.g. "references/cp.md").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// Output of `read_skill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadSkillOutput {
    pub name: String,
    pub description: String,
    /// Resource URI of what was returned.
    pub uri: String,
    /// Heading path of the returned section, when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// File path within the skill of what was returned (SKILL.md unless `file` was given).
    pub path: String,
    /// Markdown of the whole SKILL.md, of one section, or the text of `file`. Absent for
    /// `card: true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub markdown: Option<String>,
    /// The card as JSON, for `card: true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card: Option<serde_json::Value>,
    /// Heading paths of the skill, for asking for one section.
    pub sections: Vec<String>,
    /// Files of the skill (paths relative to its folder).
    pub files: Vec<String>,
}

/// A whole skill, one section, its card, or one of its files.
pub fn read_skill(
    catalog: &Catalog,
    input: &ReadSkillInput,
) -> Result<ReadSkillOutput, SkillToolError> {
    use crate::model::limits::{FILE, SECTION, SKILL_NAME};
    SKILL_NAME.check("", Some(&input.name))?;
    SECTION.check("", input.section.as_deref())?;
    FILE.check("", input.file.as_deref())?;
    let skill = find_skill(catalog, &input.name)?;
    let want_card = input.card.unwrap_or(false);
    let selectors = usize::from(input.section.is_some())
        + usize::from(want_card)
        + usize::from(input.file.is_some());
    if selectors > 1 {
        return Err(SkillToolError::ConflictingSelectors);
    }
    let mut output = ReadSkillOutput {
        name: skill.name.clone(),
        description: skill.description.clone(),
        uri: skill.uri(),
        section: None,
        path: SKILL_MD.to_owned(),
        markdown: None,
        card: None,
        sections: skill.sections.headed().map(Section::display_path).collect(),
        files: skill.files.iter().map(|file| file.path.clone()).collect(),
    };
    if want_card {
        let card = skill.card.as_ref().ok_or_else(|| SkillToolError::NoCard {
            skill: skill.name.clone(),
            with_cards: catalog
                .skills()
                .filter(|skill| skill.has_card())
                .map(|skill| skill.name.clone())
                .collect(),
        })?;
        output.card = Some(card.json.clone());
        output.uri = skill.file_uri(CARD_YAML);
        output.path = CARD_YAML.to_owned();
    } else if let Some(section) = &input.section {
        let section = find_section(skill, section)?;
        output.uri = skill.section_uri(section);
        output.section = Some(section.display_path());
        output.markdown = Some(section.markdown.clone());
    } else if let Some(path) = &input.file {
        let path = path.trim().trim_start_matches("./");
        let file = skill
            .file(path)
            .ok_or_else(|| SkillToolError::UnknownFile {
                skill: skill.name.clone(),
                path: path.to_owned(),
                suggestions: Catalog::closest(
                    path,
                    skill.files.iter().map(|f| f.path.as_str()),
                    SUGGESTIONS,
                ),
            })?;
        output.uri = skill.file_uri(&file.path);
        output.path = file.path.clone();
        output.markdown = Some(
            file.text()
                .ok_or_else(|| SkillToolError::BinaryFile {
                    skill: skill.name.clone(),
                    path: file.path.clone(),
                    uri: skill.file_uri(&file.path),
                })?
                .to_owned(),
        );
    } else {
        output.markdown = Some(skill.skill_md().to_owned());
    }
    Ok(output)
}
