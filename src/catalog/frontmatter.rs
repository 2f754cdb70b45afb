//! SKILL.md frontmatter: the YAML block between the opening and closing `---` lines.

use serde_json::{Map, Value as Json};

use super::yaml::{yaml_error_line, yaml_to_json};

/// SKILL.md split into its frontmatter (converted to JSON, every key kept) and Markdown body.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillMarkdown<'a> {
    /// Every frontmatter key, in the order written, converted from YAML to JSON.
    pub frontmatter: Map<String, Json>,
    /// `name` from the frontmatter.
    pub name: String,
    /// `description` from the frontmatter (folded `>-` blocks already joined by YAML).
    pub description: String,
    /// The Markdown after the closing `---` line.
    pub body: &'a str,
    /// 1-based line of SKILL.md on which `body` starts.
    pub body_line: usize,
}

/// Why a SKILL.md could not be read. Every variant names the 1-based line in SKILL.md.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontmatterError {
    #[error("line {line}: SKILL.md must start with a `---` line that opens the YAML frontmatter")]
    MissingOpening { line: usize },
    #[error("line {line}: the frontmatter opened on line 1 is never closed; add a `---` line after the last key")]
    Unclosed { line: usize },
    #[error("line {line}: invalid YAML in the frontmatter: {message}")]
    Yaml { line: usize, message: String },
    #[error("line {line}: the frontmatter must be a mapping of keys to values, found {found}")]
    NotAMapping { line: usize, found: &'static str },
    #[error(
        "line {line}: required field `{field}` is missing; add `{field}: ...` to the frontmatter"
    )]
    MissingField { line: usize, field: &'static str },
    #[error("line {line}: field `{field}` must be a non-empty string, found {found}")]
    NotAString {
        line: usize,
        field: &'static str,
        found: &'static str,
    },
}

impl FrontmatterError {
    /// 1-based line in SKILL.md the problem was found on.
    pub fn line(&self) -> usize {
        match self {
            Self::MissingOpening { line }
            | Self::Unclosed { line }
            | Self::Yaml { line, .. }
            | Self::NotAMapping { line, .. }
            | Self::MissingField { line, .. }
            | Self::NotAString { line, .. } => *line,
        }
    }
}

fn is_fence(line: &str) -> bool {
    line.trim_end() == "---"
}

fn json_kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "an empty string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a mapping",
    }
}

/// Split SKILL.md into frontmatter and body and check the two required fields.
///
/// Never panics, whatever the input: this is the parser the fuzz target and the property
/// tests drive.
pub fn parse_skill_markdown(text: &str) -> Result<SkillMarkdown<'_>, FrontmatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    match lines.next() {
        Some(first) if is_fence(first) => {}
        _ => return Err(FrontmatterError::MissingOpening { line: 1 }),
    }
    let yaml_start = text.split_inclusive('\n').next().map_or(0, str::len);
    let mut offset = yaml_start;
    let mut line_number = 1;
    let mut closing = None;
    for line in lines {
        line_number += 1;
        if is_fence(line) {
            closing = Some((offset, offset + line.len(), line_number));
            break;
        }
        offset += line.len();
    }
    let Some((yaml_end, body_start, closing_line)) = closing else {
        return Err(FrontmatterError::Unclosed { line: line_number });
    };
    let yaml_text = &text[yaml_start..yaml_end];
    let yaml: serde_yaml::Value = if yaml_text.trim().is_empty() {
        serde_yaml::Value::Null
    } else {
        serde_yaml::from_str(yaml_text).map_err(|error| FrontmatterError::Yaml {
            // The YAML starts on line 2 of SKILL.md.
            line: yaml_error_line(&error).map_or(2, |line| line + 1),
            message: shift_line_numbers(&error.to_string(), 1),
        })?
    };
    let frontmatter = match yaml_to_json(&yaml) {
        Json::Object(map) => map,
        other => {
            return Err(FrontmatterError::NotAMapping {
                line: 2,
                found: match other {
                    Json::Null => "nothing",
                    ref value => json_kind(value),
                },
            })
        }
    };
    let name = required_string(&frontmatter, yaml_text, "name", closing_line)?;
    let description = required_string(&frontmatter, yaml_text, "description", closing_line)?;
    Ok(SkillMarkdown {
        frontmatter,
        name,
        description,
        body: &text[body_start..],
        body_line: closing_line + 1,
    })
}

fn required_string(
    frontmatter: &Map<String, Json>,
    yaml_text: &str,
    field: &'static str,
    closing_line: usize,
) -> Result<String, FrontmatterError> {
    match frontmatter.get(field) {
        Some(Json::String(value)) if !value.trim().is_empty() => Ok(value.clone()),
        Some(other) => Err(FrontmatterError::NotAString {
            line: key_line(yaml_text, field).unwrap_or(2),
            field,
            found: json_kind(other),
        }),
        None => Err(FrontmatterError::MissingField {
            line: closing_line,
            field,
        }),
    }
}

/// Add `offset` to every "line N" in a YAML error message, so that positions inside the
/// frontmatter read as SKILL.md lines.
pub(crate) fn shift_line_numbers(message: &str, offset: usize) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(index) = rest.find("line ") {
        let (before, after) = rest.split_at(index + "line ".len());
        out.push_str(before);
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        match digits.parse::<usize>() {
            Ok(number) => out.push_str(&(number + offset).to_string()),
            Err(_) => out.push_str(&digits),
        }
        rest = &after[digits.len()..];
    }
    out.push_str(rest);
    out
}

/// 1-based SKILL.md line of a top-level frontmatter key.
pub(crate) fn key_line(yaml_text: &str, key: &str) -> Option<usize> {
    yaml_text.lines().enumerate().find_map(|(index, line)| {
        let rest = line.strip_prefix(key)?;
        rest.trim_start().starts_with(':').then_some(index + 2)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_folded_description_and_keeps_other_keys() {
        let text = "---\nname: demo\ndescription: >-\n  First line\n  second line.\nwhen_to_use: Use it when \"x\".\nlicense: Apache-2.0\n---\n# Title\nBody\n";
        let parsed = parse_skill_markdown(text).expect("valid");
        assert_eq!(parsed.name, "demo");
        assert_eq!(parsed.description, "First line second line.");
        assert_eq!(parsed.frontmatter["license"], "Apache-2.0");
        assert!(parsed.frontmatter.contains_key("when_to_use"));
        assert_eq!(parsed.body, "# Title\nBody\n");
        assert_eq!(parsed.body_line, 9);
        assert_eq!(parsed.frontmatter.len(), 4);
    }

    #[test]
    fn missing_description_names_the_field() {
        let error = parse_skill_markdown("---\nname: demo\n---\nbody").expect_err("no description");
        assert_eq!(
            error,
            FrontmatterError::MissingField {
                line: 3,
                field: "description"
            }
        );
        assert!(error.to_string().contains("description"));
    }

    #[test]
    fn broken_yaml_reports_a_line_inside_the_file() {
        let error = parse_skill_markdown("---\nname: demo\ndescription: [oops\n---\n")
            .expect_err("broken yaml");
        assert!(matches!(error, FrontmatterError::Yaml { .. }));
        assert!((2..=5).contains(&error.line()), "line {}", error.line());
    }

    #[test]
    fn yaml_positions_are_shifted_to_skill_md_lines() {
        assert_eq!(
            shift_line_numbers("x at line 3 column 8, while parsing at line 2 column 1", 1),
            "x at line 4 column 8, while parsing at line 3 column 1"
        );
    }

    #[test]
    fn no_frontmatter_and_unclosed_frontmatter() {
        assert_eq!(
            parse_skill_markdown("# just markdown").expect_err("none"),
            FrontmatterError::MissingOpening { line: 1 }
        );
        assert!(matches!(
            parse_skill_markdown("---\nname: a\n").expect_err("unclosed"),
            FrontmatterError::Unclosed { .. }
        ));
    }

    #[test]
    fn non_string_description_is_rejected_with_its_line() {
        let error =
            parse_skill_markdown("---\nname: demo\ndescription: 42\n---\n").expect_err("number");
        assert_eq!(
            error,
            FrontmatterError::NotAString {
                line: 3,
                field: "description",
                found: "a number"
            }
        );
    }

    #[test]
    fn crlf_and_bom_are_accepted() {
        let parsed =
            parse_skill_markdown("\u{feff}---\r\nname: demo\r\ndescription: d\r\n---\r\nbody\r\n")
                .expect("crlf");
        assert_eq!(parsed.description, "d");
        assert_eq!(parsed.body, "body\r\n");
    }
}
