//! `moe-skills skills list|show|search|validate`.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Subcommand;
use serde::Serialize;

use super::output::{emit, one_line};
use super::{CliError, GlobalArgs};
use crate::catalog::{Catalog, DataCardKind, Diagnostic, RootSource, Severity};
use crate::tools::skills::{
    list_skills, read_skill_with_limit, search_skills, ReadSkillInput, SearchSkillsInput,
};

#[derive(Debug, Clone, Subcommand)]
pub enum SkillsCommand {
    /// List every skill.
    List,
    /// Print a skill's SKILL.md, one section of it, its card, or one of its files.
    Show {
        /// Skill name.
        name: String,
        /// Heading path ("Long context > CP sizing"), heading, or anchor.
        #[arg(long)]
        section: Option<String>,
        /// Print the card (card.yaml) instead.
        #[arg(long)]
        card: bool,
        /// Print another file of the skill (e.g. references/notes.md).
        #[arg(long)]
        file: Option<String>,
    },
    /// Rank skills and sections for a query.
    Search {
        /// What to look for, e.g. "OOM after removing recompute".
        query: String,
        /// Maximum number of results.
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Load skills and report problems; exits non-zero when there are errors. With DIR, only
    /// that folder is checked; without, the embedded catalog and every --skills-dir.
    Validate {
        /// A skills folder to check on its own.
        dir: Option<PathBuf>,
    },
}

pub fn run(global: &GlobalArgs, command: &SkillsCommand) -> Result<(), CliError> {
    match command {
        SkillsCommand::List => {
            let catalog = global.load_catalog();
            let output = list_skills(&catalog);
            emit(global.json, &output, |output| {
                let width = output
                    .skills
                    .iter()
                    .map(|s| s.name.len())
                    .max()
                    .unwrap_or(0);
                let mut text = String::new();
                for skill in &output.skills {
                    let card = if skill.has_card { "card" } else { "    " };
                    let _ = writeln!(
                        text,
                        "{:width$}  {card}  {}",
                        skill.name,
                        one_line(&skill.description, 90)
                    );
                }
                let _ = write!(text, "{} skills", output.skills.len());
                text
            })
        }
        SkillsCommand::Show {
            name,
            section,
            card,
            file,
        } => {
            let catalog = global.load_catalog();
            let input = ReadSkillInput {
                name: name.clone(),
                section: section.clone(),
                card: card.then_some(true),
                file: file.clone(),
                offset: None,
            };
            // A terminal shows the whole text; only MCP replies are cut.
            let output = read_skill_with_limit(&catalog, &input, usize::MAX)?;
            let card_text = if *card {
                catalog
                    .skill(&output.name)
                    .and_then(|skill| skill.file(crate::catalog::CARD_YAML))
                    .and_then(|file| file.text().map(str::to_owned))
            } else {
                None
            };
            emit(global.json, &output, |output| {
                card_text
                    .or_else(|| output.markdown.clone())
                    .unwrap_or_default()
            })
        }
        SkillsCommand::Search { query, limit } => {
            let catalog = global.load_catalog();
            let output = search_skills(
                &catalog,
                &SearchSkillsInput {
                    query: query.clone(),
                    limit: *limit,
                },
            )?;
            emit(global.json, &output, |output| {
                if output.results.is_empty() {
                    return format!("no skill matches `{query}`");
                }
                let mut text = String::new();
                for result in &output.results {
                    let place = match &result.section {
                        Some(section) => format!("{} > {section}", result.skill),
                        None => result.skill.clone(),
                    };
                    let _ = writeln!(
                        text,
                        "{:8.2}  {place}\n          {}",
                        result.score,
                        one_line(&result.snippet, 110)
                    );
                }
                text
            })
        }
        SkillsCommand::Validate { dir } => {
            let roots = match dir {
                Some(dir) => vec![RootSource::Directory(dir.clone())],
                None => global.roots(),
            };
            let catalog = Catalog::load(&roots);
            let report = ValidationReport::new(&catalog);
            emit(global.json, &report, ValidationReport::human)?;
            if report.errors > 0 {
                Err(CliError::Reported)
            } else {
                Ok(())
            }
        }
    }
}

/// What `skills validate --json` prints.
#[derive(Debug, Serialize)]
pub struct ValidationReport {
    pub roots: Vec<String>,
    pub skills: Vec<String>,
    pub skills_with_cards: usize,
    pub model_cards: usize,
    pub hardware_cards: usize,
    pub errors: usize,
    pub warnings: usize,
    pub diagnostics: Vec<Diagnostic>,
}

impl ValidationReport {
    pub fn new(catalog: &Catalog) -> Self {
        let count = |severity| {
            catalog
                .diagnostics()
                .iter()
                .filter(|diagnostic| diagnostic.severity == severity)
                .count()
        };
        Self {
            roots: catalog.roots().iter().map(ToString::to_string).collect(),
            skills: catalog.skill_names().map(str::to_owned).collect(),
            skills_with_cards: catalog.skills().filter(|skill| skill.has_card()).count(),
            model_cards: catalog.data_cards(DataCardKind::Model).count(),
            hardware_cards: catalog.data_cards(DataCardKind::Hardware).count(),
            errors: count(Severity::Error),
            warnings: count(Severity::Warning),
            diagnostics: catalog.diagnostics().to_vec(),
        }
    }

    fn human(&self) -> String {
        let mut text = String::new();
        for diagnostic in &self.diagnostics {
            let _ = writeln!(text, "{diagnostic}");
        }
        let _ = write!(
            text,
            "{} skills ({} with cards), {} model cards, {} hardware cards: {} errors, {} warnings",
            self.skills.len(),
            self.skills_with_cards,
            self.model_cards,
            self.hardware_cards,
            self.errors,
            self.warnings
        );
        text
    }
}
