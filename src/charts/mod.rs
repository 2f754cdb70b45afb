//! Pictures of the cost model's answers, as SVG: memory per pipeline rank against the usable
//! capacity (`memory.rs`), the step-time breakdown (`time.rs`), and a triage's before → after
//! waterfalls of per-setting deltas (`waterfall.rs`), plus the stacked-SVG and HTML-page
//! wrappers the CLI writes (`page.rs`). Pure functions from tool output types to strings: no
//! I/O, no fonts (labels are `<text>` in the viewer's sans-serif face).
//!
//! No plotting crate: plotters' SVG backend cannot put attributes on the shapes it draws and
//! places text with the same estimated metrics, so a small writer (`svg.rs`) does the job with
//! no dependency and no font lookup.
//!
//! Every shape that stands for a number carries it in `data-*` attributes (`data-rank`,
//! `data-term`, `data-gib`, `data-s`, `data-delta`), so tests and scripts can check that the
//! picture adds up to the JSON.

pub mod memory;
pub mod page;
pub mod svg;
pub mod time;
pub mod waterfall;

use crate::catalog::Catalog;
use crate::model::config::ModelSpec;
use crate::model::report::tokens_label;
use crate::model::{Estimate, TrainingConfig};
use crate::tools::common::{
    evaluate_config, layout_label, layout_violations, value_text, ToolError,
};
use crate::tools::feasibility::CheckFeasibilityOutput;
use crate::tools::plan::PlanLayoutsOutput;
use crate::tools::triage::TriageOomOutput;

/// One rendered chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Short file-like name, unique within one answer: `memory`, `time`, `triage-memory`, ….
    pub name: &'static str,
    /// What the chart shows, one line (the SVG's `<title>`; alt text in HTML).
    pub title: String,
    pub width: f64,
    pub height: f64,
    pub svg: String,
}

impl Chart {
    /// The URI an MCP answer gives the chart, e.g. `chart://check/memory.svg`.
    pub fn uri(&self, tool: &str) -> String {
        format!("chart://{tool}/{}.svg", self.name)
    }
}

/// The configuration a chart is about, as its subtitle says it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Subject {
    /// Model, GPUs and sequence length, e.g. "qwen3-235b-a22b · 256 × H100 · 128K tokens".
    pub configuration: String,
    /// The layout, e.g. "TP4 CP8 EP8 PP8 VPP4 DP1 EDP8 MBS1 GBS32".
    pub layout: String,
}

impl Subject {
    pub fn of(config: &TrainingConfig, estimate: &Estimate) -> Subject {
        Subject {
            configuration: configuration_label(
                config,
                estimate.layout.num_gpus,
                estimate.layout.seq_length,
            ),
            layout: layout_label(estimate),
        }
    }

    /// One line: configuration and layout.
    pub fn line(&self) -> String {
        match (self.configuration.is_empty(), self.layout.is_empty()) {
            (false, false) => format!("{} · {}", self.configuration, self.layout),
            (true, _) => self.layout.clone(),
            (false, true) => self.configuration.clone(),
        }
    }
}

/// "qwen3-235b-a22b · 256 × H100 · 128K tokens".
fn configuration_label(config: &TrainingConfig, num_gpus: u32, seq_length: u64) -> String {
    let model = match &config.model {
        Some(ModelSpec::Id(id)) => id.clone(),
        Some(ModelSpec::HfConfig(value)) => ["_name_or_path", "model_type"]
            .iter()
            .find_map(|key| value.get(*key).and_then(|v| v.as_str()))
            .map(|name| format!("{name} (config.json)"))
            .unwrap_or_else(|| "config.json model".into()),
        None => "model".into(),
    };
    let hardware = config
        .hardware
        .as_deref()
        .map(str::to_ascii_uppercase)
        .unwrap_or_else(|| "GPU".into());
    let sequence = tokens_label(seq_length);
    format!("{model} · {num_gpus} × {hardware} · {sequence} tokens")
}

/// `check_feasibility`'s charts (and the best layout's for `plan_layouts`): memory per
/// pipeline rank, then the step-time breakdown. A layout that breaks a rule gets none, as its
/// rationale gives no memory or time (only the rules it breaks).
pub fn estimate_charts(estimate: &Estimate, subject: &Subject) -> Vec<Chart> {
    if estimate.memory.per_rank_peak_gib.is_empty() || layout_violations(estimate).next().is_some()
    {
        return Vec::new();
    }
    vec![
        memory::render(&memory::MemoryChart::of(estimate), subject),
        time::render(&time::TimeChart::of(estimate), subject),
    ]
}

/// `triage_oom`'s charts: before → after waterfalls of peak memory and of step time, one
/// step per changed setting (each applied alone to `before`) and one for what the changes do
/// together beyond their sum, so the steps add up to the whole change.
pub fn triage_charts(out: &TriageOomOutput, subject: &Subject) -> Vec<Chart> {
    let label = |field: &str, before: &serde_json::Value, after: &serde_json::Value| {
        format!("{field} {} → {}", value_text(before), value_text(after))
    };
    let memory = waterfall::Waterfall {
        name: "triage-memory",
        heading: format!(
            "Peak memory per GPU, before → after: {:.1} GiB ({}) → {:.1} GiB ({})",
            out.before.peak_gib,
            verdict(out.before.fits),
            out.after.peak_gib,
            verdict(out.after.fits)
        ),
        unit: "GiB",
        axis_title: "peak memory per GPU (GiB)".into(),
        start: ("before".into(), out.before.peak_gib),
        steps: out
            .causes
            .iter()
            .map(|c| (label(&c.field, &c.before, &c.after), c.memory_delta_gib))
            .collect(),
        end: ("after".into(), out.after.peak_gib),
        limit: Some(("usable capacity".into(), out.after.capacity_gib)),
        note: String::new(),
    };
    // Each side's error band, as the step-time chart of `check_feasibility` gives it.
    let note = match (&out.before.uncertainty, &out.after.uncertainty) {
        (Some(b), Some(a)) => format!(
            " · the error bands' measured runs put the step at {:.1}–{:.1} s before, {:.1}–{:.1} s after",
            b.step_time_low_s, b.step_time_high_s, a.step_time_low_s, a.step_time_high_s
        ),
        _ => String::new(),
    };
    let time = waterfall::Waterfall {
        name: "triage-time",
        heading: format!(
            "Step time, before → after: {:.2} → {:.2} s",
            out.before.step_time_s, out.after.step_time_s
        ),
        unit: "s",
        axis_title: "time per step (s)".into(),
        start: ("before".into(), out.before.step_time_s),
        steps: out
            .causes
            .iter()
            .map(|c| (label(&c.field, &c.before, &c.after), c.step_time_delta_s))
            .collect(),
        end: ("after".into(), out.after.step_time_s),
        limit: None,
        note,
    };
    vec![
        waterfall::render(&memory.with_interaction(), subject),
        waterfall::render(&time.with_interaction(), subject),
    ]
}

pub(crate) fn verdict(fits: bool) -> &'static str {
    if fits {
        "fits"
    } else {
        "does not fit"
    }
}

/// A triage's subject: the `after` configuration, which the analysis is about.
pub fn triage_subject(out: &TriageOomOutput) -> Subject {
    let config = &out.after_config;
    Subject {
        configuration: configuration_label(
            config,
            config.num_gpus.unwrap_or_default(),
            config.seq_length.unwrap_or_default(),
        ),
        layout: out
            .recipe
            .as_ref()
            .map(|recipe| format!("recipe {recipe}"))
            .unwrap_or_default(),
    }
}

/// Colour of a term, by its position in a palette, for legends and segments.
pub(crate) struct Term {
    /// The JSON field name (`data-term`).
    pub key: &'static str,
    /// The label people read: the Markdown rationale's words.
    pub label: &'static str,
    pub color: &'static str,
}

/// Black or white, whichever reads on `fill` (a `#rrggbb` colour).
pub(crate) fn ink_on(fill: &str) -> &'static str {
    let hex = fill.trim_start_matches('#');
    let channel = |i: usize| {
        hex.get(i..i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .map(f64::from)
            .unwrap_or(255.0)
    };
    let luminance = 0.299 * channel(0) + 0.587 * channel(2) + 0.114 * channel(4);
    if luminance < 140.0 {
        "#ffffff"
    } else {
        "#222222"
    }
}

/// The charts of a `check_feasibility` answer for `config`.
pub fn for_check(config: &TrainingConfig, out: &CheckFeasibilityOutput) -> Vec<Chart> {
    estimate_charts(&out.estimate, &Subject::of(config, &out.estimate))
}

/// The charts of a `plan_layouts` answer: those of its best layout, evaluated again (the
/// answer keeps a summary per candidate, not the per-rank memory and time terms). None when
/// nothing fits.
pub fn for_plan(catalog: &Catalog, out: &PlanLayoutsOutput) -> Result<Vec<Chart>, ToolError> {
    let Some(best) = out.candidates.first() else {
        return Ok(Vec::new());
    };
    let estimate = evaluate_config(catalog.cost(), &best.config)?;
    let mut subject = Subject::of(&best.config, &estimate);
    subject.layout = format!(
        "best layout: {} · recompute {}",
        subject.layout, best.recompute
    );
    Ok(estimate_charts(&estimate, &subject))
}

/// The charts of a `triage_oom` answer (the recipe it names first, when a diff changed several).
pub fn for_triage(out: &TriageOomOutput) -> Vec<Chart> {
    triage_charts(out, &triage_subject(out))
}
