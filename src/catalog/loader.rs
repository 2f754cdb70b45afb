//! Building a [`Catalog`] from roots.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use super::card::parse_card;
use super::frontmatter::{key_line, parse_skill_markdown};
use super::sections::parse_sections;
use super::source::{read_root, RootFiles, RootSource};
use super::{
    mime_type_for, Catalog, DataCard, DataCardKind, Diagnostic, Severity, Skill, SkillFile,
    CARD_YAML, SKILL_MD,
};

/// Agent Skills spec limits (reported as warnings).
const MAX_NAME_CHARS: usize = 64;
const MAX_DESCRIPTION_CHARS: usize = 1024;
const MAX_COMPATIBILITY_CHARS: usize = 500;
/// Skills extension limits per skill (reported as warnings).
const MAX_FILES_PER_SKILL: usize = 512;
const MAX_BYTES_PER_SKILL: u64 = 16 * 1024 * 1024;

/// Frontmatter keys that are not in the Agent Skills spec but are common enough not to warn
/// about: Megatron-Bridge's `when_to_use` and Claude Code's additions.
const KNOWN_KEYS: &[&str] = &[
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
    "when_to_use",
    "argument-hint",
    "disable-model-invocation",
    "user-invocable",
    "model",
    "context",
    "agent",
    "hooks",
    "effort",
];

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    hex
}

struct Diagnostics<'a> {
    root: &'a RootSource,
    list: Vec<Diagnostic>,
}

impl Diagnostics<'_> {
    fn push(&mut self, severity: Severity, relative: &str, line: Option<usize>, message: String) {
        self.list.push(Diagnostic {
            severity,
            file: self.root.display_file(relative),
            line,
            message,
        });
    }
}

/// Where skills and cards sit inside a root.
struct Layout {
    skills_prefix: String,
    /// `None` for a root that is a single skill folder.
    cards_prefix: Option<String>,
    single_skill_dir_name: Option<String>,
}

fn detect_layout(root: &RootSource, files: &RootFiles) -> Layout {
    if files.contains_key(SKILL_MD) {
        let dir_name = match root {
            RootSource::Directory(path) => path
                .canonicalize()
                .unwrap_or_else(|_| path.clone())
                .file_name()
                .map(|name| name.to_string_lossy().into_owned()),
            RootSource::Embedded | RootSource::CalibrationFile(_) => None,
        };
        return Layout {
            skills_prefix: String::new(),
            cards_prefix: None,
            single_skill_dir_name: dir_name,
        };
    }
    // A calibration file is a root of one card and no skills.
    let has_skills_dir = matches!(root, RootSource::CalibrationFile(_))
        || files.keys().any(|path| path.starts_with("skills/"));
    Layout {
        skills_prefix: if has_skills_dir {
            "skills/".into()
        } else {
            String::new()
        },
        cards_prefix: Some("cards/".into()),
        single_skill_dir_name: None,
    }
}

fn is_skill_md(file_name: &str) -> bool {
    file_name == SKILL_MD || file_name == "skill.md"
}

/// Quoted phrases (`"..."` or `“...”`) in `when_to_use`.
fn extract_triggers(text: &str) -> Vec<String> {
    let mut triggers = Vec::new();
    for (open, close) in [('"', '"'), ('\u{201c}', '\u{201d}')] {
        let mut rest = text;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len_utf8()..];
            let Some(end) = after.find(close) else { break };
            let phrase = after[..end].trim();
            if !phrase.is_empty() && phrase.len() <= 200 {
                triggers.push(phrase.to_owned());
            }
            rest = &after[end + close.len_utf8()..];
        }
    }
    triggers
}

fn check_name(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if name.chars().count() > MAX_NAME_CHARS {
        problems.push(format!("`name` is longer than {MAX_NAME_CHARS} characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        problems.push("`name` should use only lowercase letters, digits and hyphens".to_owned());
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        problems.push("`name` should not start or end with a hyphen or contain `--`".to_owned());
    }
    problems
}

/// Characters that would make `skill://<name>/...` ambiguous or invalid.
fn name_breaks_uri(name: &str) -> bool {
    name.is_empty()
        || name.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '/' | '?' | '#' | '%' | '\\')
        })
}

struct LoadedRoot {
    skills: BTreeMap<String, Skill>,
    data_cards: Vec<DataCard>,
    /// Skill folders (as [`Skill::location`]) and card files (as [`DataCard::file`]) that
    /// exist but failed to load; a reload keeps their last good version.
    failed: BTreeSet<String>,
}

fn load_root(
    root: &RootSource,
    files: &RootFiles,
    diagnostics: &mut Diagnostics<'_>,
) -> LoadedRoot {
    let layout = detect_layout(root, files);
    let mut skills: BTreeMap<String, Skill> = BTreeMap::new();
    let mut failed = BTreeSet::new();
    let mut skill_md_files: BTreeMap<String, String> = BTreeMap::new();
    let skill_dirs: Vec<String> = files
        .keys()
        .filter(|path| path.starts_with(&layout.skills_prefix))
        .filter(|path| {
            layout
                .cards_prefix
                .as_ref()
                .is_none_or(|cards| !path.starts_with(cards.as_str()))
        })
        .filter_map(|path| {
            let (dir, file_name) = match path.rsplit_once('/') {
                Some((dir, name)) => (format!("{dir}/"), name),
                None => (String::new(), path.as_str()),
            };
            is_skill_md(file_name).then_some(dir)
        })
        .collect();

    // Two folders of one root claiming one name: the folder named after the skill wins (the
    // Agent Skills spec requires the match), else the first in path order; the other is
    // skipped with an error, never silently.
    for dir in skill_dirs {
        let loaded = load_skill(root, files, &layout, &dir, diagnostics);
        if loaded.is_none() {
            failed.insert(root.display_file(dir.trim_end_matches('/')));
        }
        if let Some(skill) = loaded {
            let skill_md_path = format!("{dir}{SKILL_MD}");
            if let Some(previous) = skill_md_files.get(&skill.name).cloned() {
                let takes_over = skill.named_after_folder()
                    && !skills
                        .get(&skill.name)
                        .is_some_and(Skill::named_after_folder);
                let (kept, skipped) = if takes_over {
                    (skill_md_path.clone(), previous)
                } else {
                    (previous, skill_md_path.clone())
                };
                diagnostics.push(
                    Severity::Error,
                    &skipped,
                    key_line_in(files, &skipped, "name"),
                    format!(
                        "skill name `{}` is also claimed by {}, which is kept; rename one of them (skill skipped)",
                        skill.name,
                        root.display_file(&kept)
                    ),
                );
                if !takes_over {
                    continue;
                }
            }
            skill_md_files.insert(skill.name.clone(), skill_md_path);
            skills.insert(skill.name.clone(), skill);
        }
    }

    let mut data_cards = Vec::new();
    if let Some(cards) = &layout.cards_prefix {
        for (path, bytes) in files.range(cards.clone()..) {
            let Some(relative) = path.strip_prefix(cards.as_str()) else {
                break;
            };
            let kind_and_id = if let Some(rest) = relative.strip_prefix("models/") {
                yaml_stem(rest).map(|id| (DataCardKind::Model, id))
            } else if let Some(rest) = relative.strip_prefix("hardware/") {
                yaml_stem(rest).map(|id| (DataCardKind::Hardware, id))
            } else if relative == "cost-model.yaml" {
                Some((DataCardKind::CostModel, "cost-model".to_owned()))
            } else if relative == "calibration.yaml" {
                Some((DataCardKind::Calibration, "calibration".to_owned()))
            } else if relative == "time-uncertainty.yaml" {
                Some((DataCardKind::TimeUncertainty, "time-uncertainty".to_owned()))
            } else {
                if let Some((skill_name, file)) = relative.split_once('/') {
                    if file == CARD_YAML && !skills.contains_key(skill_name) {
                        diagnostics.push(
                            Severity::Warning,
                            path,
                            None,
                            format!("card for `{skill_name}`, but this root has no skill of that name; it is ignored"),
                        );
                    }
                }
                None
            };
            let Some((kind, id)) = kind_and_id else {
                continue;
            };
            let parsed = std::str::from_utf8(bytes)
                .map_err(|_| (1, "file is not UTF-8 text".to_owned()))
                .and_then(|text| {
                    serde_yaml::from_str::<serde_yaml::Value>(text).map_err(|error| {
                        (
                            super::yaml::yaml_error_line(&error).unwrap_or(1),
                            format!("invalid YAML: {error}"),
                        )
                    })
                });
            match parsed {
                Ok(value) => data_cards.push(DataCard {
                    kind,
                    id,
                    file: root.display_file(path),
                    root: root.clone(),
                    value,
                }),
                Err((line, message)) => {
                    failed.insert(root.display_file(path));
                    diagnostics.push(
                        Severity::Error,
                        path,
                        Some(line),
                        format!("{message} ({kind} card skipped)"),
                    );
                }
            }
        }
    }
    LoadedRoot {
        skills,
        data_cards,
        failed,
    }
}

fn key_line_in(files: &RootFiles, path: &str, key: &str) -> Option<usize> {
    let text = std::str::from_utf8(files.get(path)?).ok()?;
    key_line(text.strip_prefix("---\n").unwrap_or(text), key)
}

fn yaml_stem(file: &str) -> Option<String> {
    let stem = file
        .strip_suffix(".yaml")
        .or_else(|| file.strip_suffix(".yml"))?;
    // Nested folders are allowed; the id is the file stem.
    let id = stem.rsplit('/').next().unwrap_or(stem);
    (!id.is_empty()).then(|| id.to_owned())
}

fn make_file(path: String, bytes: super::Bytes) -> SkillFile {
    SkillFile {
        sha256: sha256_hex(&bytes),
        mime_type: mime_type_for(&path, &bytes),
        path,
        bytes,
    }
}

fn load_skill(
    root: &RootSource,
    files: &RootFiles,
    layout: &Layout,
    dir: &str,
    diagnostics: &mut Diagnostics<'_>,
) -> Option<Skill> {
    let upper = format!("{dir}{SKILL_MD}");
    let skill_md_path = if files.contains_key(&upper) {
        upper
    } else {
        format!("{dir}skill.md")
    };
    let bytes = files.get(&skill_md_path)?.clone();
    let Ok(text) = std::str::from_utf8(&bytes) else {
        diagnostics.push(
            Severity::Error,
            &skill_md_path,
            None,
            "SKILL.md is not UTF-8 text (skill skipped)".to_owned(),
        );
        return None;
    };
    let parsed = match parse_skill_markdown(text) {
        Ok(parsed) => parsed,
        Err(error) => {
            diagnostics.push(
                Severity::Error,
                &skill_md_path,
                Some(error.line()),
                format!("{} (skill skipped)", strip_line_prefix(&error.to_string())),
            );
            return None;
        }
    };
    let name = parsed.name.trim().to_owned();
    if name_breaks_uri(&name) {
        diagnostics.push(
            Severity::Error,
            &skill_md_path,
            key_line_in(files, &skill_md_path, "name"),
            format!("`name: {name}` cannot be used in a skill:// URI; use lowercase letters, digits and hyphens (skill skipped)"),
        );
        return None;
    }
    let name_line = key_line_in(files, &skill_md_path, "name");
    for problem in check_name(&name) {
        diagnostics.push(Severity::Warning, &skill_md_path, name_line, problem);
    }
    let dir_name = if dir.is_empty() {
        layout.single_skill_dir_name.clone()
    } else {
        dir.trim_end_matches('/')
            .rsplit('/')
            .next()
            .map(str::to_owned)
    };
    if let Some(dir_name) = dir_name.as_ref().filter(|dir_name| **dir_name != name) {
        diagnostics.push(
            Severity::Warning,
            &skill_md_path,
            name_line,
            format!("`name: {name}` differs from its folder name `{dir_name}`; the skill is served as `{name}`"),
        );
    }
    if parsed.description.chars().count() > MAX_DESCRIPTION_CHARS {
        diagnostics.push(
            Severity::Warning,
            &skill_md_path,
            key_line_in(files, &skill_md_path, "description"),
            format!("`description` is longer than {MAX_DESCRIPTION_CHARS} characters"),
        );
    }
    if let Some(compatibility) = parsed.frontmatter.get("compatibility") {
        if compatibility
            .as_str()
            .is_none_or(|text| text.chars().count() > MAX_COMPATIBILITY_CHARS)
        {
            diagnostics.push(
                Severity::Warning,
                &skill_md_path,
                key_line_in(files, &skill_md_path, "compatibility"),
                format!("`compatibility` should be text of at most {MAX_COMPATIBILITY_CHARS} characters"),
            );
        }
    }
    if let Some(metadata) = parsed.frontmatter.get("metadata") {
        if !metadata
            .as_object()
            .is_some_and(|map| map.values().all(serde_json::Value::is_string))
        {
            diagnostics.push(
                Severity::Warning,
                &skill_md_path,
                key_line_in(files, &skill_md_path, "metadata"),
                "`metadata` should map keys to text values".to_owned(),
            );
        }
    }
    for key in parsed.frontmatter.keys() {
        if !KNOWN_KEYS.contains(&key.as_str()) {
            diagnostics.push(
                Severity::Warning,
                &skill_md_path,
                key_line_in(files, &skill_md_path, key),
                format!("`{key}` is not an Agent Skills frontmatter field; it is kept verbatim"),
            );
        }
    }
    let when_to_use = parsed
        .frontmatter
        .get("when_to_use")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    let triggers = when_to_use
        .as_deref()
        .map(extract_triggers)
        .unwrap_or_default();
    let body_offset = text.len() - parsed.body.len();
    let sections = parse_sections(parsed.body);

    // Files: SKILL.md first, then everything else under the folder.
    let mut skill_files = vec![make_file(SKILL_MD.to_owned(), bytes.clone())];
    for (path, file_bytes) in files.range(dir.to_owned()..) {
        let Some(relative) = path.strip_prefix(dir) else {
            break;
        };
        if *path == skill_md_path {
            continue;
        }
        skill_files.push(make_file(relative.to_owned(), file_bytes.clone()));
    }
    // The card: beside SKILL.md, else cards/<name>/card.yaml of the same root.
    let beside = format!("{dir}{CARD_YAML}");
    let from_cards_dir = layout
        .cards_prefix
        .as_ref()
        .map(|cards| format!("{cards}{name}/{CARD_YAML}"))
        .filter(|path| files.contains_key(path));
    let card_path = if files.contains_key(&beside) {
        if let Some(ignored) = &from_cards_dir {
            diagnostics.push(
                Severity::Warning,
                ignored,
                None,
                format!(
                    "`{name}` also has {}; the card beside SKILL.md is used",
                    root.display_file(&beside)
                ),
            );
        }
        Some(beside)
    } else if let Some(path) = from_cards_dir {
        if let Some(card_bytes) = files.get(&path) {
            skill_files.push(make_file(CARD_YAML.to_owned(), card_bytes.clone()));
            skill_files[1..].sort_by(|a, b| a.path.cmp(&b.path));
        }
        Some(path)
    } else {
        None
    };
    let card = match card_path {
        None => None,
        Some(card_path) => {
            let card_text = files
                .get(&card_path)
                .and_then(|bytes| std::str::from_utf8(bytes).ok().map(str::to_owned));
            let Some(card_text) = card_text else {
                diagnostics.push(
                    Severity::Error,
                    &card_path,
                    None,
                    "card.yaml is not UTF-8 text (skill skipped)".to_owned(),
                );
                return None;
            };
            match parse_card(&card_text) {
                Ok(parsed_card) => {
                    for (line, message) in parsed_card.warnings {
                        diagnostics.push(Severity::Warning, &card_path, line, message);
                    }
                    Some(parsed_card.card)
                }
                Err(error) => {
                    diagnostics.push(
                        Severity::Error,
                        &card_path,
                        Some(error.line()),
                        format!("{} (skill skipped)", strip_line_prefix(&error.to_string())),
                    );
                    return None;
                }
            }
        }
    };
    let total_bytes: u64 = skill_files.iter().map(SkillFile::size).sum();
    if skill_files.len() > MAX_FILES_PER_SKILL || total_bytes > MAX_BYTES_PER_SKILL {
        diagnostics.push(
            Severity::Warning,
            &skill_md_path,
            None,
            format!(
                "skill has {} files and {total_bytes} bytes; the Skills extension allows {MAX_FILES_PER_SKILL} files and {MAX_BYTES_PER_SKILL} bytes",
                skill_files.len()
            ),
        );
    }
    Some(Skill {
        description: parsed.description.trim().to_owned(),
        frontmatter: parsed.frontmatter,
        when_to_use,
        triggers,
        root: root.clone(),
        location: root.display_file(dir.trim_end_matches('/')),
        body_offset,
        sections,
        card,
        files: skill_files,
        folder: dir_name,
        name,
    })
}

/// Messages carry "line N: " for standalone use; diagnostics show the line separately.
fn strip_line_prefix(message: &str) -> &str {
    message
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(": "))
        .map_or(message, |(_, rest)| rest)
}

pub(super) fn load(roots: &[RootSource]) -> Catalog {
    load_keeping(roots, None)
}

/// Load `roots`; with `previous`, a skill or card that exists but fails to load now (a file
/// caught half-written, a typo being fixed) keeps its version from `previous`, with a warning.
pub(super) fn load_keeping(roots: &[RootSource], previous: Option<&Catalog>) -> Catalog {
    let mut skills: BTreeMap<String, Skill> = BTreeMap::new();
    let mut data_cards: BTreeMap<(DataCardKind, String), DataCard> = BTreeMap::new();
    let mut all_diagnostics = Vec::new();
    let mut failed = BTreeSet::new();
    let mut failed_roots = std::collections::HashSet::new();
    for root in roots {
        let mut diagnostics = Diagnostics {
            root,
            list: Vec::new(),
        };
        match read_root(root) {
            Err(error) => {
                failed_roots.insert(root.clone());
                diagnostics.push(Severity::Error, "", None, error.to_string());
            }
            Ok((files, skipped)) => {
                for skipped in skipped {
                    // A SKILL.md that could not be read (changed while read, too large)
                    // fails its skill like a parse error does.
                    let path = std::path::Path::new(&skipped.path);
                    if path.file_name().is_some_and(|name| name == SKILL_MD) {
                        if let Some(dir) = path.parent() {
                            failed.insert(dir.display().to_string());
                        }
                    }
                    diagnostics.list.push(Diagnostic {
                        severity: Severity::Warning,
                        file: skipped.path,
                        line: None,
                        message: skipped.reason.to_string(),
                    });
                }
                let loaded = load_root(root, &files, &mut diagnostics);
                failed.extend(loaded.failed);
                for (name, skill) in loaded.skills {
                    if let Some(previous) = skills.get(&name) {
                        // A later root replaces a skill only from a folder named after it,
                        // so that a copied `name:` cannot shadow a real skill by accident.
                        if !skill.named_after_folder() {
                            diagnostics.list.push(Diagnostic {
                                severity: Severity::Error,
                                file: skill.location.clone(),
                                line: None,
                                message: format!(
                                    "`name: {name}` is already served from {}; a later root replaces a skill only from a folder named `{name}` (skill skipped)",
                                    previous.location
                                ),
                            });
                            continue;
                        }
                        diagnostics.list.push(Diagnostic {
                            severity: Severity::Warning,
                            file: skill.location.clone(),
                            line: None,
                            message: format!(
                                "skill `{name}` replaces the one from {}",
                                previous.location
                            ),
                        });
                    }
                    skills.insert(name, skill);
                }
                for card in loaded.data_cards {
                    let key = (card.kind, card.id.clone());
                    if let Some(previous) = data_cards.get(&key) {
                        diagnostics.list.push(Diagnostic {
                            severity: Severity::Note,
                            file: card.file.clone(),
                            line: None,
                            message: format!(
                                "{} card `{}` overrides {}",
                                card.kind, card.id, previous.file
                            ),
                        });
                    }
                    data_cards.insert(key, card);
                }
            }
        }
        all_diagnostics.extend(diagnostics.list);
    }
    if let Some(previous) = previous {
        let kept =
            |file: &str, root: &RootSource| failed.contains(file) || failed_roots.contains(root);
        for skill in previous.skills.values() {
            let reloaded = skills.get(&skill.name);
            if reloaded.is_some_and(|now| now.location == skill.location)
                || !kept(&skill.location, &skill.root)
            {
                continue;
            }
            all_diagnostics.push(Diagnostic {
                severity: Severity::Warning,
                file: skill.location.clone(),
                line: None,
                message: format!(
                    "skill `{}` failed to reload; its last good version is still served",
                    skill.name
                ),
            });
            skills.insert(skill.name.clone(), skill.clone());
        }
        for (key, card) in &previous.data_cards {
            if data_cards.get(key).is_some_and(|now| now.file == card.file)
                || !kept(&card.file, &card.root)
            {
                continue;
            }
            all_diagnostics.push(Diagnostic {
                severity: Severity::Warning,
                file: card.file.clone(),
                line: None,
                message: format!(
                    "{} card `{}` failed to reload; its last good version is still used",
                    card.kind, card.id
                ),
            });
            data_cards.insert(key.clone(), card.clone());
        }
    }
    Catalog::from_parts(roots.to_vec(), skills, data_cards, all_diagnostics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_are_quoted_phrases() {
        assert_eq!(
            extract_triggers("Use when asked \"size CP for 128K\" or “long context OOM”."),
            ["size CP for 128K", "long context OOM"]
        );
    }

    #[test]
    fn sha256_of_empty_input() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    fn write_skill(root: &std::path::Path, folder: &str, name: &str, description: &str) {
        let dir = root.join(folder);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join(SKILL_MD),
            format!("---\nname: {name}\ndescription: {description}\n---\n# Body\n"),
        )
        .expect("write");
    }

    fn load_dir(root: &std::path::Path) -> Catalog {
        load(&[
            RootSource::Embedded,
            RootSource::Directory(root.to_path_buf()),
        ])
    }

    #[test]
    fn a_later_root_cannot_shadow_a_skill_from_a_folder_of_another_name() {
        let root = tempfile::tempdir().expect("tempdir");
        write_skill(root.path(), "impostor", "moe-long-context", "Shadow.");
        let catalog = load_dir(root.path());
        let kept = catalog.skill("moe-long-context").expect("kept");
        assert_eq!(kept.root, RootSource::Embedded);
        let shown = root.path().join("impostor").display().to_string();
        assert!(
            catalog
                .diagnostics()
                .iter()
                .any(|d| d.severity == Severity::Error
                    && d.file == shown
                    && d.message.contains("folder named `moe-long-context`")),
            "{:#?}",
            catalog.diagnostics()
        );
    }

    #[test]
    fn a_later_root_replaces_a_skill_from_its_named_folder_with_a_warning() {
        let root = tempfile::tempdir().expect("tempdir");
        write_skill(root.path(), "moe-long-context", "moe-long-context", "Mine.");
        let catalog = load_dir(root.path());
        let kept = catalog.skill("moe-long-context").expect("kept");
        assert_eq!(kept.description, "Mine.");
        assert!(catalog
            .diagnostics()
            .iter()
            .any(|d| d.severity == Severity::Warning
                && d.message.contains("replaces the one from embedded:")));
    }

    #[test]
    fn within_a_root_the_folder_named_after_the_skill_wins() {
        let root = tempfile::tempdir().expect("tempdir");
        // `a-copy` sorts first; the folder named `real` still wins.
        write_skill(root.path(), "a-copy", "real", "Copy.");
        write_skill(root.path(), "real", "real", "Real.");
        write_skill(root.path(), "z-copy", "real", "Later copy.");
        let catalog = load_dir(root.path());
        assert_eq!(catalog.skill("real").expect("real").description, "Real.");
        for copy in ["a-copy", "z-copy"] {
            let shown = root.path().join(copy).join(SKILL_MD).display().to_string();
            assert!(
                catalog
                    .diagnostics()
                    .iter()
                    .any(|d| d.severity == Severity::Error
                        && d.file == shown
                        && d.message.contains("is also claimed by")),
                "{copy}: {:#?}",
                catalog.diagnostics()
            );
        }
    }

    #[test]
    fn a_reload_keeps_the_last_good_version_of_a_broken_skill() {
        let root = tempfile::tempdir().expect("tempdir");
        write_skill(root.path(), "edited", "edited", "First version.");
        let first = load_dir(root.path());
        assert!(first.skill("edited").is_some());

        // Caught half-written: the frontmatter is not closed yet.
        let skill_md = root.path().join("edited").join(SKILL_MD);
        std::fs::write(&skill_md, "---\nname: edited\ndescr").expect("write");
        let roots = first.roots().to_vec();
        let broken = load_keeping(&roots, Some(&first));
        let kept = broken.skill("edited").expect("last good version kept");
        assert_eq!(kept.description, "First version.");
        assert!(broken
            .diagnostics()
            .iter()
            .any(|d| d.severity == Severity::Error && d.file == skill_md.display().to_string()));
        assert!(broken
            .diagnostics()
            .iter()
            .any(|d| d.severity == Severity::Warning && d.message.contains("failed to reload")));
        // Without a previous snapshot the broken skill is skipped as before.
        assert!(load(&roots).skill("edited").is_none());

        write_skill(root.path(), "edited", "edited", "Second version.");
        let fixed = load_keeping(&roots, Some(&broken));
        assert_eq!(
            fixed.skill("edited").expect("reloaded").description,
            "Second version."
        );

        std::fs::remove_dir_all(root.path().join("edited")).expect("rm");
        let removed = load_keeping(&roots, Some(&fixed));
        assert!(
            removed.skill("edited").is_none(),
            "a deleted skill goes away"
        );
    }

    #[test]
    fn name_checks() {
        assert!(check_name("good-name-2").is_empty());
        assert_eq!(check_name("Bad_Name").len(), 1);
        assert_eq!(check_name("-bad--").len(), 1);
        assert!(name_breaks_uri("a/b"));
        assert!(name_breaks_uri("a b"));
        assert!(!name_breaks_uri("Upper-Is-Ok-For-Uri"));
    }
}
