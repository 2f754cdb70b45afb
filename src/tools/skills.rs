//! `list_skills`, `search_skills` and `read_skill` over a catalog snapshot.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::pagination::{page, InvalidCursor, SKILLS_PAGE_SIZE};
use crate::catalog::{Catalog, Section, Skill, CARD_YAML, SKILL_MD};

/// Default and maximum number of search results.
pub const DEFAULT_SEARCH_LIMIT: usize = 10;
pub const MAX_SEARCH_LIMIT: usize = 50;

/// How many close names an error lists.
const SUGGESTIONS: usize = 5;

/// Most text `read_skill` returns at once. Hosts cut tool results at around 25k tokens
/// (Claude Code's default); 64 KiB of Markdown is about 16k tokens, and the rest is read
/// with `offset` or one section at a time.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// Most skills one `list_skills` page may hold when the caller asks for more.
pub const MAX_LIST_LIMIT: usize = 500;

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
    #[error(transparent)]
    InvalidCursor(#[from] InvalidCursor),
    #[error("`offset` {offset} is past the end of the text ({total} bytes); pass an offset below {total}")]
    OffsetPastEnd { offset: u64, total: usize },
    #[error("`offset` applies to text; it cannot be combined with `card: true`")]
    OffsetWithCard,
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

/// Input of `list_skills`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListSkillsInput {
    /// `next_cursor` of the previous page; omit it for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Skills per page (default 100, at most 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Output of `list_skills`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListSkillsOutput {
    /// Loaded skills, sorted by name (one page of them when `next_cursor` is set).
    pub skills: Vec<SkillSummary>,
    /// Number of loaded skills, on every page.
    pub total: usize,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

fn summary(skill: &Skill) -> SkillSummary {
    SkillSummary {
        name: skill.name.clone(),
        description: skill.description.clone(),
        uri: skill.uri(),
        has_card: skill.has_card(),
    }
}

/// Every skill, sorted by name, in one list (for the CLI).
pub fn list_skills(catalog: &Catalog) -> ListSkillsOutput {
    ListSkillsOutput {
        skills: catalog.skills().map(summary).collect(),
        total: catalog.skills().len(),
        next_cursor: None,
    }
}

/// One page of skills, sorted by name (for MCP, where the list can be long).
pub fn list_skills_page(
    catalog: &Catalog,
    input: &ListSkillsInput,
) -> Result<ListSkillsOutput, SkillToolError> {
    let size = input
        .limit
        .map_or(SKILLS_PAGE_SIZE, |limit| limit as usize)
        .clamp(1, MAX_LIST_LIMIT);
    let page = page(catalog.skills(), input.cursor.as_deref(), size)?;
    Ok(ListSkillsOutput {
        skills: page.items.into_iter().map(summary).collect(),
        total: catalog.skills().len(),
        next_cursor: page.next_cursor,
    })
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
    /// Byte offset to start the text at: the `next_offset` of a reply that was cut short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
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
    /// Size in bytes of the whole text `markdown` is taken from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<usize>,
    /// Set when `markdown` stops before the end of the text: pass it as `offset` to read on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
    /// Why `markdown` is only part of the text, and how to get the rest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Heading paths of the skill, for asking for one section.
    pub sections: Vec<String>,
    /// Files of the skill (paths relative to its folder).
    pub files: Vec<String>,
}

/// The window of `text` from `offset`, at most `max_bytes` long, cut at a line end when one is
/// near (else at a character boundary): (window, where the next window starts).
///
/// `offset` must be a character boundary of `text`.
pub fn text_window(text: &str, offset: usize, max_bytes: usize) -> (&str, Option<usize>) {
    let rest = text.get(offset..).unwrap_or_default();
    if rest.len() <= max_bytes {
        return (rest, None);
    }
    let mut end = max_bytes;
    while end > 0 && !rest.is_char_boundary(end) {
        end -= 1;
    }
    // Prefer a line end in the last quarter of the window, so Markdown lines stay whole.
    if let Some(newline) = rest[..end].rfind('\n') {
        if newline + 1 >= end - end / 4 {
            end = newline + 1;
        }
    }
    if end == 0 {
        // A window smaller than one character still moves forward.
        end = rest.chars().next().map_or(rest.len(), char::len_utf8);
    }
    (&rest[..end], Some(offset + end))
}

/// A whole skill, one section, its card, or one of its files, with text cut at
/// [`MAX_TEXT_BYTES`].
pub fn read_skill(
    catalog: &Catalog,
    input: &ReadSkillInput,
) -> Result<ReadSkillOutput, SkillToolError> {
    read_skill_with_limit(catalog, input, MAX_TEXT_BYTES)
}

/// [`read_skill`] with text cut at `max_bytes` (the CLI prints whole files).
pub fn read_skill_with_limit(
    catalog: &Catalog,
    input: &ReadSkillInput,
    max_bytes: usize,
) -> Result<ReadSkillOutput, SkillToolError> {
    let mut output = select(catalog, input)?;
    if let Some(text) = output.markdown.take() {
        let total = text.len();
        let requested = input.offset.unwrap_or(0);
        let offset = usize::try_from(requested)
            .ok()
            .filter(|offset| *offset == 0 || *offset < total)
            .ok_or(SkillToolError::OffsetPastEnd {
                offset: requested,
                total,
            })?;
        // An offset inside a character starts at that character.
        let offset = (0..=offset)
            .rev()
            .find(|at| text.is_char_boundary(*at))
            .unwrap_or(0);
        let (window, next_offset) = text_window(&text, offset, max_bytes.max(1));
        if next_offset.is_some() || offset > 0 {
            let end = offset + window.len();
            output.note = Some(match next_offset {
                Some(next) => format!(
                    "text cut to bytes {offset}..{end} of {total} (at most {max_bytes} per reply); call read_skill again with the same arguments and `offset: {next}` for the rest, or ask for one `section`"
                ),
                None => format!("bytes {offset}..{end} of {total}: the end of the text"),
            });
        }
        output.next_offset = next_offset;
        output.total_bytes = Some(total);
        output.markdown = Some(if window.len() == total {
            text
        } else {
            window.to_owned()
        });
    }
    Ok(output)
}

fn select(catalog: &Catalog, input: &ReadSkillInput) -> Result<ReadSkillOutput, SkillToolError> {
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
        total_bytes: None,
        next_offset: None,
        note: None,
        sections: skill.sections.headed().map(Section::display_path).collect(),
        files: skill.files.iter().map(|file| file.path.clone()).collect(),
    };
    if want_card {
        if input.offset.is_some() {
            return Err(SkillToolError::OffsetWithCard);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_text_and_respect_characters() {
        let text = "ab✓\ncd✓✓\nef";
        for max in 1..=text.len() {
            let mut joined = String::new();
            let mut offset = 0;
            loop {
                let (window, next) = text_window(text, offset, max);
                assert!(!window.is_empty());
                joined.push_str(window);
                match next {
                    Some(next) => offset = next,
                    None => break,
                }
            }
            assert_eq!(joined, text, "max {max}");
        }
        // A line end near the limit is preferred.
        assert_eq!(text_window("aaaa\nbb", 0, 6), ("aaaa\n", Some(5)));
    }

    fn input(json: serde_json::Value) -> ReadSkillInput {
        serde_json::from_value(json).expect("input")
    }

    #[test]
    fn offsets_page_through_text_and_bad_ones_are_errors() {
        let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
        let whole = read_skill(
            &catalog,
            &input(serde_json::json!({"name": "moe-long-context"})),
        )
        .expect("whole");
        let total = whole.total_bytes.expect("total");
        assert_eq!(whole.next_offset, None);
        assert_eq!(whole.note, None);

        let first = read_skill_with_limit(
            &catalog,
            &input(serde_json::json!({"name": "moe-long-context"})),
            1000,
        )
        .expect("first part");
        let next = first.next_offset.expect("cut");
        assert!(first
            .note
            .as_deref()
            .is_some_and(|note| note.contains(&format!("offset: {next}"))));
        let rest = read_skill_with_limit(
            &catalog,
            &input(serde_json::json!({"name": "moe-long-context", "offset": next})),
            usize::MAX,
        )
        .expect("rest");
        assert_eq!(
            format!(
                "{}{}",
                first.markdown.unwrap_or_default(),
                rest.markdown.unwrap_or_default()
            ),
            whole.markdown.unwrap_or_default()
        );

        assert!(matches!(
            read_skill(
                &catalog,
                &input(serde_json::json!({"name": "moe-long-context", "offset": total}))
            ),
            Err(SkillToolError::OffsetPastEnd { .. })
        ));
        assert!(matches!(
            read_skill(
                &catalog,
                &input(serde_json::json!({"name": "moe-long-context", "card": true, "offset": 1}))
            ),
            Err(SkillToolError::OffsetWithCard)
        ));
    }

    #[test]
    fn skill_pages_cover_the_catalog() {
        let catalog = Catalog::load_with_embedded(Vec::<std::path::PathBuf>::new());
        let mut names = Vec::new();
        let mut cursor = None;
        loop {
            let page = list_skills_page(
                &catalog,
                &ListSkillsInput {
                    cursor,
                    limit: Some(2),
                },
            )
            .expect("page");
            assert!(page.skills.len() <= 2);
            names.extend(page.skills.into_iter().map(|skill| skill.name));
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(names, catalog.skill_names().collect::<Vec<_>>());
        assert!(matches!(
            list_skills_page(
                &catalog,
                &ListSkillsInput {
                    cursor: Some("x".into()),
                    limit: None
                }
            ),
            Err(SkillToolError::InvalidCursor(_))
        ));
    }
}
