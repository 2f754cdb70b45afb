//! The Markdown body of a skill as a tree of sections, so one section can be fetched alone.

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use serde::Serialize;

/// Separator used when a heading path is written as one string: `"Setup > CP sizing"`.
pub const PATH_SEPARATOR: &str = " > ";

/// A fenced or indented code block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CodeBlock {
    /// The info string's first word (`bash`, `yaml`), if any.
    pub language: Option<String>,
    pub code: String,
}

/// A Markdown table as plain-text cells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One heading and what sits under it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Section {
    /// Heading texts from the outermost heading down to this one. Empty for the preamble
    /// (text before the first heading).
    pub path: Vec<String>,
    /// Heading level 1-6, 0 for the preamble.
    pub level: u8,
    /// Unique slug within the skill (GitHub style, `-1`, `-2` appended on repeats).
    pub anchor: String,
    /// 1-based line in the body where the heading is.
    pub line: usize,
    /// Markdown source of the section, subsections included.
    pub markdown: String,
    /// Plain text of the section's own content (subsections excluded), for search.
    pub text: String,
    /// Code blocks in the section's own content.
    pub code_blocks: Vec<CodeBlock>,
    /// Tables in the section's own content.
    pub tables: Vec<Table>,
}

impl Section {
    /// The heading path as one string, e.g. `"Long context > CP sizing"`; `""` for the preamble.
    pub fn display_path(&self) -> String {
        self.path.join(PATH_SEPARATOR)
    }

    /// The heading text of this section.
    pub fn heading(&self) -> &str {
        self.path.last().map_or("", String::as_str)
    }
}

/// All sections of a body, in document order.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct SectionTree {
    pub sections: Vec<Section>,
}

/// Why a section lookup failed: the closest paths, best first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionNotFound {
    pub suggestions: Vec<String>,
}

fn normalize(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn split_query(query: &str) -> Vec<String> {
    query
        .split('>')
        .map(normalize)
        .filter(|part| !part.is_empty())
        .collect()
}

impl SectionTree {
    /// Sections with a heading (the preamble left out).
    pub fn headed(&self) -> impl Iterator<Item = &Section> {
        self.sections.iter().filter(|section| section.level > 0)
    }

    /// Find a section by anchor (`cp-sizing`), full heading path (`"A > B"`, case and
    /// spacing ignored), a trailing part of the path, or the path with `/` separators.
    /// The first match in document order wins.
    pub fn find(&self, query: &str) -> Result<&Section, SectionNotFound> {
        // The display path itself always finds its section, whatever characters the heading
        // holds (separators, '#', nothing at all).
        if let Some(section) = self
            .headed()
            .find(|section| section.display_path() == query)
        {
            return Ok(section);
        }
        let trimmed = query.trim().trim_start_matches('#');
        let anchor = trimmed.to_lowercase();
        if let Some(section) = self.headed().find(|section| section.anchor == anchor) {
            return Ok(section);
        }
        for parts in [
            split_query(trimmed),
            split_query(&trimmed.replace('/', ">")),
        ] {
            if parts.is_empty() {
                continue;
            }
            let matches_suffix = |section: &&Section| {
                let path: Vec<String> = section.path.iter().map(|p| normalize(p)).collect();
                path.len() >= parts.len() && path[path.len() - parts.len()..] == parts[..]
            };
            if let Some(section) = self
                .headed()
                .find(|section| section.path.len() == parts.len() && matches_suffix(section))
            {
                return Ok(section);
            }
            if let Some(section) = self.headed().find(matches_suffix) {
                return Ok(section);
            }
        }
        // A heading that starts with the query ("cp sizing" for "CP Sizing Rules Of Thumb").
        let query_heading = normalize(trimmed);
        if query_heading.len() >= 3 {
            if let Some(section) = self
                .headed()
                .find(|section| normalize(section.heading()).starts_with(&query_heading))
            {
                return Ok(section);
            }
        }
        Err(SectionNotFound {
            suggestions: self.closest(query, 5),
        })
    }

    /// Display paths of the sections closest to `query`, best first.
    pub fn closest(&self, query: &str, limit: usize) -> Vec<String> {
        let query = normalize(query);
        let mut scored: Vec<(f64, String)> = self
            .headed()
            .map(|section| {
                let full = normalize(&section.display_path());
                let heading = normalize(section.heading());
                let score =
                    strsim::jaro_winkler(&query, &full).max(strsim::jaro_winkler(&query, &heading));
                (score, section.display_path())
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored
            .into_iter()
            .take(limit)
            .map(|(_, path)| path)
            .collect()
    }
}

/// GitHub-style heading slug: lowercase, letters/digits kept, spaces and hyphens -> `-`.
pub fn slugify(text: &str) -> String {
    let mut slug = String::with_capacity(text.len());
    for ch in text.trim().chars() {
        if ch.is_alphanumeric() || ch == '_' {
            slug.extend(ch.to_lowercase());
        } else if (ch == ' ' || ch == '-') && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let trimmed = slug.trim_matches('-');
    if trimmed.is_empty() {
        "section".to_owned()
    } else {
        trimmed.to_owned()
    }
}

struct OpenHeading {
    level: u8,
    start: usize,
    title: String,
}

#[derive(Default)]
struct TableBuilder {
    table: Table,
    row: Vec<String>,
    cell: String,
    in_head: bool,
}

/// Parse a Markdown body into sections. Never panics.
pub fn parse_sections(body: &str) -> SectionTree {
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(body.match_indices('\n').map(|(index, _)| index + 1))
        .collect();
    let line_of = |offset: usize| line_starts.partition_point(|&start| start <= offset).max(1);

    let mut sections = vec![Section {
        path: Vec::new(),
        level: 0,
        anchor: String::new(),
        line: 1,
        markdown: String::new(),
        text: String::new(),
        code_blocks: Vec::new(),
        tables: Vec::new(),
    }];
    let mut starts = vec![0usize];
    let mut stack: Vec<(u8, String)> = Vec::new();
    let mut heading: Option<OpenHeading> = None;
    let mut code: Option<CodeBlock> = None;
    let mut table: Option<TableBuilder> = None;
    let mut used_anchors = std::collections::HashMap::<String, usize>::new();

    let parser = Parser::new_ext(body, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH);
    for (event, range) in parser.into_offset_iter() {
        let current = sections.len() - 1;
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                heading = Some(OpenHeading {
                    level: level as u8,
                    start: range.start,
                    title: String::new(),
                });
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(open) = heading.take() {
                    let title = open.title.split_whitespace().collect::<Vec<_>>().join(" ");
                    while stack.last().is_some_and(|(level, _)| *level >= open.level) {
                        stack.pop();
                    }
                    stack.push((open.level, title));
                    let base = slugify(&stack.last().map_or(String::new(), |(_, t)| t.clone()));
                    let count = used_anchors.entry(base.clone()).or_insert(0);
                    let anchor = if *count == 0 {
                        base.clone()
                    } else {
                        format!("{base}-{count}")
                    };
                    *count += 1;
                    sections.push(Section {
                        path: stack.iter().map(|(_, t)| t.clone()).collect(),
                        level: open.level,
                        anchor,
                        line: line_of(open.start),
                        markdown: String::new(),
                        text: String::new(),
                        code_blocks: Vec::new(),
                        tables: Vec::new(),
                    });
                    starts.push(open.start);
                }
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let language = match kind {
                    CodeBlockKind::Fenced(info) => info
                        .split_whitespace()
                        .next()
                        .filter(|lang| !lang.is_empty())
                        .map(str::to_owned),
                    CodeBlockKind::Indented => None,
                };
                code = Some(CodeBlock {
                    language,
                    code: String::new(),
                });
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some(block) = code.take() {
                    push_text(&mut sections[current].text, &block.code);
                    sections[current].code_blocks.push(block);
                }
            }
            Event::Start(Tag::Table(_)) => table = Some(TableBuilder::default()),
            Event::Start(Tag::TableHead) => {
                if let Some(builder) = table.as_mut() {
                    builder.in_head = true;
                }
            }
            Event::End(TagEnd::TableHead) => {
                if let Some(builder) = table.as_mut() {
                    builder.in_head = false;
                    builder.table.header = std::mem::take(&mut builder.row);
                }
            }
            Event::End(TagEnd::TableCell) => {
                if let Some(builder) = table.as_mut() {
                    let cell = std::mem::take(&mut builder.cell);
                    builder.row.push(cell.trim().to_owned());
                }
            }
            Event::End(TagEnd::TableRow) => {
                if let Some(builder) = table.as_mut() {
                    if !builder.in_head {
                        let row = std::mem::take(&mut builder.row);
                        builder.table.rows.push(row);
                    }
                }
            }
            Event::End(TagEnd::Table) => {
                if let Some(builder) = table.take() {
                    sections[current].tables.push(builder.table);
                }
            }
            Event::Text(text)
            | Event::Code(text)
            | Event::InlineMath(text)
            | Event::DisplayMath(text) => {
                if let Some(open) = heading.as_mut() {
                    open.title.push_str(&text);
                } else if let Some(block) = code.as_mut() {
                    block.code.push_str(&text);
                } else if let Some(builder) = table.as_mut() {
                    builder.cell.push_str(&text);
                    push_text(&mut sections[current].text, &text);
                } else {
                    push_text(&mut sections[current].text, &text);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(open) = heading.as_mut() {
                    open.title.push(' ');
                } else {
                    push_text(&mut sections[current].text, " ");
                }
            }
            Event::End(TagEnd::Paragraph | TagEnd::Item) => {
                push_text(&mut sections[current].text, "\n");
            }
            _ => {}
        }
    }

    // A section's Markdown runs to the next heading at the same or a higher level.
    for index in 0..sections.len() {
        let level = sections[index].level;
        let start = starts[index];
        let end = if level == 0 {
            starts.get(1).copied().unwrap_or(body.len())
        } else {
            (index + 1..sections.len())
                .find(|&next| sections[next].level <= level)
                .map_or(body.len(), |next| starts[next])
        };
        sections[index].markdown = body
            .get(start..end)
            .unwrap_or_default()
            .trim_end()
            .to_owned();
        let text = sections[index].text.trim().to_owned();
        sections[index].text = text;
    }
    if sections[0].markdown.trim().is_empty() {
        sections.remove(0);
    }
    SectionTree { sections }
}

fn push_text(target: &mut String, text: &str) {
    if text == "\n" {
        if !target.ends_with('\n') && !target.is_empty() {
            target.push('\n');
        }
        return;
    }
    target.push_str(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "Intro line.\n\n# Long context\n\nOverview text.\n\n## CP Sizing Rules Of Thumb\n\nUse `CP = seq/4096`.\n\n```bash\n--context-parallel-size 8\n```\n\n| seq | cp |\n|-----|----|\n| 4K | 1 |\n| 128K | 32 |\n\n## Recompute\n\nSelective.\n\n# Other\n\n## Recompute\n\nAgain.\n";

    #[test]
    fn builds_paths_and_slices_markdown_with_subsections() {
        let tree = parse_sections(BODY);
        let paths: Vec<String> = tree.sections.iter().map(Section::display_path).collect();
        assert_eq!(
            paths,
            [
                "",
                "Long context",
                "Long context > CP Sizing Rules Of Thumb",
                "Long context > Recompute",
                "Other",
                "Other > Recompute"
            ]
        );
        let long = &tree.sections[1];
        assert!(long.markdown.starts_with("# Long context"));
        assert!(long.markdown.contains("## Recompute\n\nSelective."));
        assert!(!long.markdown.contains("# Other"));
        assert_eq!(long.text, "Overview text.");
        assert_eq!(long.line, 3);
    }

    #[test]
    fn extracts_code_blocks_and_tables() {
        let tree = parse_sections(BODY);
        let cp = tree.find("CP Sizing Rules Of Thumb").expect("found");
        assert_eq!(cp.code_blocks.len(), 1);
        assert_eq!(cp.code_blocks[0].language.as_deref(), Some("bash"));
        assert_eq!(cp.code_blocks[0].code, "--context-parallel-size 8\n");
        assert_eq!(cp.tables[0].header, ["seq", "cp"]);
        assert_eq!(cp.tables[0].rows, [["4K", "1"], ["128K", "32"]]);
        assert!(cp.text.contains("CP = seq/4096"));
    }

    #[test]
    fn finds_by_path_anchor_suffix_and_reports_closest() {
        let tree = parse_sections(BODY);
        assert_eq!(tree.find("other > recompute").expect("path").text, "Again.");
        assert_eq!(tree.find("Other/Recompute").expect("slash").text, "Again.");
        assert_eq!(tree.find("recompute-1").expect("anchor").text, "Again.");
        assert_eq!(
            tree.find("#cp-sizing-rules-of-thumb")
                .expect("anchor")
                .level,
            2
        );
        // A bare heading matches the first in document order.
        assert_eq!(tree.find("Recompute").expect("suffix").text, "Selective.");
        assert_eq!(tree.find("CP sizing rules").expect("prefix").level, 2);
        let missing = tree.find("CP rules for sizing").expect_err("missing");
        assert_eq!(
            missing.suggestions.first().map(String::as_str),
            Some("Long context > CP Sizing Rules Of Thumb")
        );
    }

    #[test]
    fn body_without_headings_is_one_preamble() {
        let tree = parse_sections("just text\n");
        assert_eq!(tree.sections.len(), 1);
        assert_eq!(tree.sections[0].level, 0);
        assert!(parse_sections("").sections.is_empty());
    }
}
