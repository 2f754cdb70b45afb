//! The skill catalog: every skill, skill card and data card the server knows, loaded from an
//! ordered list of roots into one immutable [`Catalog`] snapshot.
//!
//! Roots are the embedded default catalog and any `--skills-dir` folders; a later root
//! replaces an earlier root's skill or data card of the same name. Problems are collected as
//! [`Diagnostic`]s: a skill with an error is skipped, every other skill still loads.
//!
//! Share a snapshot through [`CatalogHandle`]; `--watch` swaps in a rebuilt snapshot and bumps
//! the handle's version so that servers can tell clients the lists changed.

pub mod card;
pub mod cost_cards;
pub mod embedded;
pub mod frontmatter;
mod loader;
pub mod search;
pub mod sections;
pub mod source;
pub mod watch;
pub mod yaml;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

use serde::Serialize;
use serde_json::{Map, Value as Json};

pub use card::{parse_card, CardError, SkillCard};
pub use cost_cards::{Calibrated, CostCards, Recipe};
pub use frontmatter::{parse_skill_markdown, FrontmatterError, SkillMarkdown};
pub use search::{SearchHit, SearchIndex};
pub use sections::{parse_sections, Section, SectionNotFound, SectionTree, PATH_SEPARATOR};
pub use source::{Bytes, RootSource};

/// URI scheme of skill resources: `skill://<skill-name>/<path>`.
pub const SKILL_SCHEME: &str = "skill://";
/// The entry file of every skill.
pub const SKILL_MD: &str = "SKILL.md";
/// The card file name, in the skill folder or under `cards/<skill-name>/`.
pub const CARD_YAML: &str = "card.yaml";

/// How bad a diagnostic is. Only errors make `skills validate` fail; an error on a skill
/// means that skill was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Note,
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Note => "note",
            Self::Warning => "warning",
            Self::Error => "error",
        })
    }
}

/// A problem found while loading, naming the file and (when known) the 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(
                f,
                "{}: {}:{}: {}",
                self.severity, self.file, line, self.message
            ),
            None => write!(f, "{}: {}: {}", self.severity, self.file, self.message),
        }
    }
}

/// One file of a skill, as served.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillFile {
    /// Path relative to the skill folder, `/`-separated (`SKILL.md`, `references/a.md`).
    pub path: String,
    pub bytes: Bytes,
    /// Lowercase hex SHA-256 of `bytes`.
    pub sha256: String,
    pub mime_type: &'static str,
}

impl SkillFile {
    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// `sha256:<hex>`, the digest format of the Skills extension.
    pub fn digest(&self) -> String {
        format!("sha256:{}", self.sha256)
    }

    /// The contents as text when they are UTF-8 without NUL bytes.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.bytes)
            .ok()
            .filter(|text| !text.contains('\0'))
    }
}

/// A loaded skill.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    /// `name` from the frontmatter; the key of the skill in the catalog and in its URI.
    pub name: String,
    pub description: String,
    /// Every frontmatter key, verbatim, converted to JSON.
    pub frontmatter: Map<String, Json>,
    /// `when_to_use` from the frontmatter, when it is text.
    pub when_to_use: Option<String>,
    /// Quoted phrases in `when_to_use` (`"size CP for 128K"`).
    pub triggers: Vec<String>,
    /// The root the skill came from.
    pub root: RootSource,
    /// Folder of the skill as shown in diagnostics.
    pub location: String,
    /// Name of the folder holding SKILL.md (`None` when the root gives none).
    pub folder: Option<String>,
    /// Byte offset in SKILL.md where the Markdown body starts.
    pub body_offset: usize,
    pub sections: SectionTree,
    pub card: Option<SkillCard>,
    /// Every file served for the skill, `SKILL.md` first, then by path (card.yaml included,
    /// also when it came from `cards/<skill-name>/`).
    pub files: Vec<SkillFile>,
}

impl Skill {
    /// `skill://<name>/SKILL.md`.
    pub fn uri(&self) -> String {
        self.file_uri(SKILL_MD)
    }

    /// `skill://<name>/<path>`.
    pub fn file_uri(&self, path: &str) -> String {
        format!("{SKILL_SCHEME}{}/{path}", self.name)
    }

    /// `skill://<name>/SKILL.md#<anchor>`: one section of SKILL.md.
    pub fn section_uri(&self, section: &Section) -> String {
        format!("{}#{}", self.uri(), section.anchor)
    }

    pub fn file(&self, path: &str) -> Option<&SkillFile> {
        self.files.iter().find(|file| file.path == path)
    }

    /// SKILL.md as text (it was checked to be UTF-8 on load).
    pub fn skill_md(&self) -> &str {
        self.files
            .first()
            .and_then(SkillFile::text)
            .unwrap_or_default()
    }

    /// The Markdown body (SKILL.md after the frontmatter).
    pub fn body(&self) -> &str {
        self.skill_md().get(self.body_offset..).unwrap_or_default()
    }

    pub fn has_card(&self) -> bool {
        self.card.is_some()
    }

    /// Whether the folder carries the skill's name, as the Agent Skills spec asks; only such
    /// a skill may replace one of the same name from an earlier root.
    pub fn named_after_folder(&self) -> bool {
        self.folder.as_deref() == Some(self.name.as_str())
    }
}

/// Kinds of data card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataCardKind {
    /// `cards/models/<id>.yaml`
    Model,
    /// `cards/hardware/<id>.yaml`
    Hardware,
    /// `cards/cost-model.yaml` (id `cost-model`)
    CostModel,
    /// `cards/calibration.yaml` or `--calibration FILE` (id `calibration`): the user's own
    /// cluster calibration (`moe-skills calibrate --log`).
    Calibration,
    /// `cards/time-uncertainty.yaml` (id `time-uncertainty`), generated by
    /// `moe-skills calibrate --bands`
    TimeUncertainty,
}

impl fmt::Display for DataCardKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Model => "model",
            Self::Hardware => "hardware",
            Self::CostModel => "cost-model",
            Self::Calibration => "calibration",
            Self::TimeUncertainty => "time-uncertainty",
        })
    }
}

/// A model, hardware or cost-model card, kept as raw YAML for the cost model to interpret.
#[derive(Debug, Clone, PartialEq)]
pub struct DataCard {
    pub kind: DataCardKind,
    /// File stem (`deepseek-v3`, `h100`, `cost-model`).
    pub id: String,
    /// The file as shown in diagnostics.
    pub file: String,
    pub root: RootSource,
    pub value: serde_yaml::Value,
}

/// One immutable catalog snapshot.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    roots: Vec<RootSource>,
    skills: BTreeMap<String, Skill>,
    data_cards: BTreeMap<(DataCardKind, String), DataCard>,
    diagnostics: Vec<Diagnostic>,
    /// Built on first search, so that start-up does not pay for it.
    index: OnceLock<SearchIndex>,
    cost: CostCards,
}

impl Catalog {
    /// Load the given roots in order (later roots override earlier ones by name).
    pub fn load(roots: &[RootSource]) -> Self {
        loader::load(roots)
    }

    /// Load `roots` again after a change: a skill or card that fails to load now but loaded in
    /// `previous` keeps its previous version (with a warning), so that a file caught
    /// half-written does not make a skill disappear.
    pub fn reload_from(roots: &[RootSource], previous: &Catalog) -> Self {
        loader::load_keeping(roots, Some(previous))
    }

    /// The embedded catalog followed by `dirs`.
    pub fn load_with_embedded<P: Into<std::path::PathBuf>>(
        dirs: impl IntoIterator<Item = P>,
    ) -> Self {
        let roots: Vec<RootSource> = std::iter::once(RootSource::Embedded)
            .chain(
                dirs.into_iter()
                    .map(|dir| RootSource::Directory(dir.into())),
            )
            .collect();
        Self::load(&roots)
    }

    pub(crate) fn from_parts(
        roots: Vec<RootSource>,
        skills: BTreeMap<String, Skill>,
        data_cards: BTreeMap<(DataCardKind, String), DataCard>,
        diagnostics: Vec<Diagnostic>,
    ) -> Self {
        let mut catalog = Self {
            roots,
            skills,
            data_cards,
            diagnostics,
            index: OnceLock::new(),
            cost: CostCards::default(),
        };
        // Typed cost-model cards come last: recipes live in skill cards loaded above.
        let (cost, problems) = CostCards::from_catalog(&catalog);
        catalog.cost = cost;
        catalog.diagnostics.extend(problems);
        catalog
    }

    /// The cost model's typed cards: architectures, GPUs, constants and recipes.
    pub fn cost(&self) -> &CostCards {
        &self.cost
    }

    pub fn roots(&self) -> &[RootSource] {
        &self.roots
    }

    /// Skills sorted by name.
    pub fn skills(&self) -> impl ExactSizeIterator<Item = &Skill> {
        self.skills.values()
    }

    pub fn skill(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    pub fn skill_names(&self) -> impl Iterator<Item = &str> {
        self.skills.keys().map(String::as_str)
    }

    /// Up to `limit` names from `names` closest to `query` (prefix and substring matches
    /// first, then by Jaro-Winkler similarity).
    pub fn closest<'a>(
        query: &str,
        names: impl IntoIterator<Item = &'a str>,
        limit: usize,
    ) -> Vec<String> {
        let query = query.to_lowercase();
        let mut scored: Vec<(f64, &str)> = names
            .into_iter()
            .map(|name| {
                let lower = name.to_lowercase();
                let mut score = strsim::jaro_winkler(&query, &lower);
                if !query.is_empty() && (lower.contains(&query) || query.contains(&lower)) {
                    score += 1.0;
                }
                (score, name)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        scored
            .into_iter()
            .take(limit)
            .map(|(_, name)| name.to_owned())
            .collect()
    }

    /// Skill names closest to `query`.
    pub fn closest_skill_names(&self, query: &str, limit: usize) -> Vec<String> {
        Self::closest(query, self.skill_names(), limit)
    }

    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|diagnostic| diagnostic.severity == Severity::Error)
    }

    /// Data cards of one kind, sorted by id.
    pub fn data_cards(&self, kind: DataCardKind) -> impl Iterator<Item = &DataCard> {
        self.data_cards
            .range((kind, String::new())..)
            .take_while(move |((card_kind, _), _)| *card_kind == kind)
            .map(|(_, card)| card)
    }

    pub fn data_card(&self, kind: DataCardKind, id: &str) -> Option<&DataCard> {
        self.data_cards.get(&(kind, id.to_owned()))
    }

    /// `cards/cost-model.yaml` of the last root that has one.
    pub fn cost_model_card(&self) -> Option<&DataCard> {
        self.data_card(DataCardKind::CostModel, "cost-model")
    }

    /// Ranked skills for a free-text query.
    pub fn search(&self, query: &str, limit: usize) -> Vec<SearchHit> {
        let index = self
            .index
            .get_or_init(|| SearchIndex::build(self.skills.values()));
        let skills: Vec<&Skill> = self.skills.values().collect();
        index.search(&skills, query, limit)
    }
}

/// The shared, swappable catalog: readers take a cheap `Arc` snapshot; `--watch` replaces it.
///
/// The first snapshot can be built on a background thread ([`CatalogHandle::load_in_background`])
/// so that a server answers `initialize` before the catalog is read; the first request that
/// needs the catalog waits for it.
#[derive(Debug, Clone)]
pub struct CatalogHandle {
    initial: Arc<OnceLock<Arc<Catalog>>>,
    replaced: Arc<RwLock<Option<Arc<Catalog>>>>,
    roots: Arc<Vec<RootSource>>,
    version: tokio::sync::watch::Sender<u64>,
}

impl CatalogHandle {
    fn empty(roots: Vec<RootSource>) -> Self {
        let (version, _) = tokio::sync::watch::channel(0);
        Self {
            initial: Arc::new(OnceLock::new()),
            replaced: Arc::new(RwLock::new(None)),
            roots: Arc::new(roots),
            version,
        }
    }

    /// Load `roots` now and wrap the result.
    pub fn load(roots: Vec<RootSource>) -> Self {
        let catalog = Catalog::load(&roots);
        Self::new(catalog, roots)
    }

    /// Start loading `roots` on a background thread; `on_loaded` runs there afterwards (for
    /// logging diagnostics).
    pub fn load_in_background(
        roots: Vec<RootSource>,
        on_loaded: impl FnOnce(&Catalog) + Send + 'static,
    ) -> Self {
        let handle = Self::empty(roots);
        let loader = handle.clone();
        let spawned = std::thread::Builder::new()
            .name("catalog-load".into())
            .spawn(move || on_loaded(&loader.snapshot()));
        if spawned.is_err() {
            // No thread: the first snapshot() call loads it instead.
            tracing::debug!("catalog loads on first use");
        }
        handle
    }

    /// Wrap an already loaded catalog; `roots` are what [`CatalogHandle::reload`] reads.
    pub fn new(catalog: Catalog, roots: Vec<RootSource>) -> Self {
        let handle = Self::empty(roots);
        let _ = handle.initial.set(Arc::new(catalog));
        handle
    }

    /// The current snapshot (waits for the first load if it is still running).
    pub fn snapshot(&self) -> Arc<Catalog> {
        let replaced = match self.replaced.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        replaced.unwrap_or_else(|| {
            self.initial
                .get_or_init(|| Arc::new(Catalog::load(&self.roots)))
                .clone()
        })
    }

    pub fn roots(&self) -> &[RootSource] {
        &self.roots
    }

    /// Rebuild from the roots, swap the snapshot in and notify subscribers. Skills that fail
    /// to load keep their version from the current snapshot ([`Catalog::reload_from`]).
    pub fn reload(&self) -> Arc<Catalog> {
        let previous = self.snapshot();
        let catalog = Arc::new(Catalog::reload_from(&self.roots, &previous));
        match self.replaced.write() {
            Ok(mut guard) => *guard = Some(catalog.clone()),
            Err(poisoned) => *poisoned.into_inner() = Some(catalog.clone()),
        }
        self.version.send_modify(|version| *version += 1);
        catalog
    }

    /// A receiver that sees the version change after every reload.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }
}

/// MIME type by file extension; SKILL.md and other Markdown are `text/markdown`.
pub fn mime_type_for(path: &str, bytes: &[u8]) -> &'static str {
    let extension = path
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase());
    match extension.as_deref() {
        Some("md" | "markdown") => "text/markdown",
        Some("yaml" | "yml") => "application/yaml",
        Some("json") => "application/json",
        Some("py") => "text/x-python",
        Some("sh" | "bash") => "text/x-shellscript",
        Some("txt" | "log") => "text/plain",
        Some("csv") => "text/csv",
        Some("psv" | "tsv") => "text/plain",
        Some("toml") => "application/toml",
        Some("html" | "htm") => "text/html",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("svg") => "image/svg+xml",
        Some("pdf") => "application/pdf",
        _ if std::str::from_utf8(bytes).is_ok_and(|text| !text.contains('\0')) => "text/plain",
        _ => "application/octet-stream",
    }
}
