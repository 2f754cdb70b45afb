//! Skill files as MCP resources and as Skills-extension (SEP-2640) entries.

use std::collections::BTreeSet;

use rmcp::model::{
    ListResourcesResult, ListSkillsResult, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate, Skill as McpSkill, SkillFrontmatter, SkillResource, SkillResources,
    DIRECTORY_MIME_TYPE,
};
use rmcp::ErrorData as McpError;

use crate::catalog::{Catalog, Skill, SkillFile, SKILL_MD, SKILL_SCHEME};
use crate::tools::pagination::{page, InvalidCursor, RESOURCES_PAGE_SIZE, SKILLS_PAGE_SIZE};

/// URI templates, in the order they are listed.
pub const SKILL_MD_TEMPLATE: &str = "skill://{skill}/SKILL.md";
pub const SKILL_FILE_TEMPLATE: &str = "skill://{skill}/{path}";
pub const SKILL_SECTION_TEMPLATE: &str = "skill://{skill}/SKILL.md#{section}";

/// A parsed `skill://<name>/<path>#<fragment>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillUri<'a> {
    pub skill: &'a str,
    /// Path inside the skill folder; empty for the folder itself.
    pub path: &'a str,
    pub fragment: Option<&'a str>,
}

/// Split a `skill://` URI; `None` for other schemes.
pub fn parse_skill_uri(uri: &str) -> Option<SkillUri<'_>> {
    let rest = uri.strip_prefix(SKILL_SCHEME)?;
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (rest, None),
    };
    let (skill, path) = rest.split_once('/').unwrap_or((rest, ""));
    Some(SkillUri {
        skill,
        path: path.trim_end_matches('/'),
        fragment,
    })
}

/// Not-found error carrying the requested URI in `data.uri` (SEP-2164).
fn not_found(uri: &str, message: String) -> McpError {
    McpError::resource_not_found(message, Some(serde_json::json!({ "uri": uri })))
}

fn unknown_skill(catalog: &Catalog, uri: &str, name: &str) -> McpError {
    let closest = catalog.closest_skill_names(name, 5);
    let closest = if closest.is_empty() {
        "(no skills are loaded)".to_owned()
    } else {
        closest
            .iter()
            .map(|name| format!("skill://{name}/SKILL.md"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    not_found(uri, format!("no skill named `{name}`; closest: {closest}"))
}

fn file_resource(skill: &Skill, file: &SkillFile) -> Resource {
    let resource = Resource::new(
        skill.file_uri(&file.path),
        format!("{}/{}", skill.name, file.path),
    )
    .with_mime_type(file.mime_type)
    .with_size(file.size());
    if file.path == SKILL_MD {
        Resource::new(skill.uri(), skill.name.clone())
            .with_title(format!("{} (SKILL.md)", skill.name))
            .with_description(skill.description.clone())
            .with_mime_type(file.mime_type)
            .with_size(file.size())
    } else {
        resource
    }
}

/// A cursor this server did not hand out is invalid params (-32602), as MCP asks.
pub fn invalid_cursor(error: InvalidCursor) -> McpError {
    McpError::invalid_params(error.to_string(), None)
}

/// One page of every file of every skill (`resources/list`).
pub fn list_resources(
    catalog: &Catalog,
    cursor: Option<&str>,
) -> Result<ListResourcesResult, McpError> {
    let files = catalog
        .skills()
        .flat_map(|skill| skill.files.iter().map(move |file| (skill, file)));
    let page = page(files, cursor, RESOURCES_PAGE_SIZE).map_err(invalid_cursor)?;
    let mut result = ListResourcesResult::with_all_items(
        page.items
            .into_iter()
            .map(|(skill, file)| file_resource(skill, file))
            .collect(),
    );
    result.next_cursor = page.next_cursor;
    Ok(result)
}

pub fn resource_templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(SKILL_MD_TEMPLATE, "skill")
            .with_title("Skill instructions")
            .with_description("SKILL.md of a skill: YAML frontmatter and Markdown instructions.")
            .with_mime_type("text/markdown"),
        ResourceTemplate::new(SKILL_FILE_TEMPLATE, "skill-file")
            .with_title("Skill file")
            .with_description("Any file of a skill by path, e.g. card.yaml or references/<file>.md."),
        ResourceTemplate::new(SKILL_SECTION_TEMPLATE, "skill-section")
            .with_title("Skill section")
            .with_description("One section of a SKILL.md, by heading anchor (e.g. cp-sizing-rules-of-thumb), subsections included.")
            .with_mime_type("text/markdown"),
    ]
}

/// Standard base64 with padding (for binary skill files).
pub fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Contents of a file, section or error for `resources/read`.
pub fn read_resource(catalog: &Catalog, uri: &str) -> Result<ReadResourceResult, McpError> {
    let Some(parsed) = parse_skill_uri(uri) else {
        return Err(not_found(uri, format!(
            "`{uri}` is not a skill resource; skill resources look like skill://<skill-name>/SKILL.md"
        )));
    };
    let skill = catalog
        .skill(parsed.skill)
        .ok_or_else(|| unknown_skill(catalog, uri, parsed.skill))?;
    if let Some(fragment) = parsed.fragment.filter(|fragment| !fragment.is_empty()) {
        if parsed.path != SKILL_MD {
            return Err(not_found(
                uri,
                format!(
                    "sections exist only in SKILL.md; use {}#{fragment}",
                    skill.uri()
                ),
            ));
        }
        let section = skill.sections.find(fragment).map_err(|missing| {
            let anchors: Vec<String> = missing
                .suggestions
                .iter()
                .filter_map(|path| skill.sections.find(path).ok())
                .map(|section| skill.section_uri(section))
                .collect();
            not_found(
                uri,
                format!(
                    "skill `{}` has no section `{fragment}`; closest: {}",
                    skill.name,
                    if anchors.is_empty() {
                        "(none)".to_owned()
                    } else {
                        anchors.join(", ")
                    }
                ),
            )
        })?;
        return Ok(ReadResourceResult::new(vec![ResourceContents::text(
            section.markdown.clone(),
            uri,
        )
        .with_mime_type("text/markdown")]));
    }
    let Some(file) = skill.file(parsed.path) else {
        let prefix = format!("{}/", parsed.path);
        if !parsed.path.is_empty()
            && skill
                .files
                .iter()
                .any(|file| file.path.starts_with(&prefix))
            || parsed.path.is_empty()
        {
            return Err(not_found(uri, format!(
                "`{uri}` is a directory; list it with resources/directory/read or read one of its files"
            )));
        }
        let closest = Catalog::closest(parsed.path, skill.files.iter().map(|f| f.path.as_str()), 5);
        return Err(not_found(
            uri,
            format!(
                "skill `{}` has no file `{}`; closest: {}",
                skill.name,
                parsed.path,
                closest
                    .iter()
                    .map(|path| skill.file_uri(path))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    };
    let contents = match file.text() {
        Some(text) => ResourceContents::text(text, uri),
        None => ResourceContents::blob(base64_encode(&file.bytes), uri),
    }
    .with_mime_type(file.mime_type);
    Ok(ReadResourceResult::new(vec![contents]))
}

/// The Skills-extension entry of a skill: frontmatter verbatim, every file with digest and size.
pub fn skill_entry(skill: &Skill) -> McpSkill {
    let text_field = |key: &str, fallback: &str| {
        skill
            .frontmatter
            .get(key)
            .and_then(serde_json::Value::as_str)
            .unwrap_or(fallback)
            .to_owned()
    };
    let mut frontmatter = SkillFrontmatter::new(
        text_field("name", &skill.name),
        text_field("description", &skill.description),
    );
    for (key, value) in &skill.frontmatter {
        if key != "name" && key != "description" {
            frontmatter = frontmatter.with_field(key.clone(), value.clone());
        }
    }
    let files = skill
        .files
        .iter()
        .map(|file| SkillResource::new(skill.file_uri(&file.path), file.digest(), file.size()))
        .collect();
    McpSkill::new(skill.uri(), frontmatter, SkillResources::Files(files))
}

/// One page of Skills-extension entries (`skills/list`).
pub fn skill_entries(
    catalog: &Catalog,
    cursor: Option<&str>,
) -> Result<ListSkillsResult, McpError> {
    let page = page(catalog.skills(), cursor, SKILLS_PAGE_SIZE).map_err(invalid_cursor)?;
    let mut result =
        ListSkillsResult::with_all_items(page.items.into_iter().map(skill_entry).collect());
    result.next_cursor = page.next_cursor;
    Ok(result)
}

/// Direct children of a skill folder (or of a folder inside it), one page at a time.
pub fn read_directory(
    catalog: &Catalog,
    uri: &str,
    cursor: Option<&str>,
) -> Result<ListResourcesResult, McpError> {
    let invalid = |message: String| McpError::invalid_params(message, None);
    let parsed = parse_skill_uri(uri).ok_or_else(|| {
        invalid(format!(
            "`{uri}` is not a skill directory; try skill://<skill-name>"
        ))
    })?;
    let skill = catalog.skill(parsed.skill).ok_or_else(|| {
        invalid(format!(
            "no skill named `{}`; closest: {}",
            parsed.skill,
            catalog.closest_skill_names(parsed.skill, 5).join(", ")
        ))
    })?;
    if parsed.fragment.is_some() || skill.file(parsed.path).is_some() {
        return Err(invalid(format!(
            "`{uri}` is a file, not a directory; read it with resources/read"
        )));
    }
    let prefix = if parsed.path.is_empty() {
        String::new()
    } else {
        format!("{}/", parsed.path)
    };
    let mut children = Vec::new();
    let mut directories = BTreeSet::new();
    for file in &skill.files {
        let Some(relative) = file.path.strip_prefix(&prefix) else {
            continue;
        };
        match relative.split_once('/') {
            None => children.push(file_resource(skill, file)),
            Some((directory, _)) => {
                directories.insert(directory.to_owned());
            }
        }
    }
    if children.is_empty() && directories.is_empty() {
        return Err(invalid(format!(
            "skill `{}` has no directory `{}`",
            skill.name, parsed.path
        )));
    }
    for directory in directories {
        children.push(
            Resource::new(skill.file_uri(&format!("{prefix}{directory}")), directory)
                .with_mime_type(DIRECTORY_MIME_TYPE),
        );
    }
    let page = page(children.into_iter(), cursor, RESOURCES_PAGE_SIZE).map_err(invalid_cursor)?;
    let mut result = ListResourcesResult::with_all_items(page.items);
    result.next_cursor = page.next_cursor;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(input.as_bytes()), expected);
        }
    }

    #[test]
    fn parses_skill_uris() {
        assert_eq!(
            parse_skill_uri("skill://a/references/x.md"),
            Some(SkillUri {
                skill: "a",
                path: "references/x.md",
                fragment: None
            })
        );
        assert_eq!(
            parse_skill_uri("skill://a/SKILL.md#cp"),
            Some(SkillUri {
                skill: "a",
                path: "SKILL.md",
                fragment: Some("cp")
            })
        );
        assert_eq!(
            parse_skill_uri("skill://a"),
            Some(SkillUri {
                skill: "a",
                path: "",
                fragment: None
            })
        );
        assert_eq!(parse_skill_uri("file:///x"), None);
    }
}
