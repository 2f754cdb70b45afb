//! A horizontal waterfall: the `before` total, one floating bar per change (its delta, from the
//! running total), and the `after` total, with an optional limit line (the usable capacity).

use super::svg::{self, Anchor, Rect, Svg, TextStyle};
use super::{Chart, Subject};

/// Steps smaller than this (in the chart's unit) are rounding, not an interaction.
const NEGLIGIBLE: f64 = 5e-4;

const INCREASE: &str = "#c0504d";
const DECREASE: &str = "#4f9a5a";
const TOTAL: &str = "#4a6f9c";

#[derive(Debug, Clone, PartialEq)]
pub struct Waterfall {
    pub name: &'static str,
    pub heading: String,
    /// "GiB" or "s".
    pub unit: &'static str,
    pub axis_title: String,
    pub start: (String, f64),
    pub steps: Vec<(String, f64)>,
    pub end: (String, f64),
    pub limit: Option<(String, f64)>,
    /// Appended to the subject line under the heading (" · …"); empty for none.
    pub note: String,
}

impl Waterfall {
    /// Adds the step that makes the steps add up to `end - start`: what the changes do
    /// together beyond the sum of each applied alone.
    pub fn with_interaction(mut self) -> Waterfall {
        let sum: f64 = self.steps.iter().map(|(_, d)| d).sum();
        let rest = self.end.1 - self.start.1 - sum;
        if rest.abs() > NEGLIGIBLE {
            self.steps
                .push(("together, beyond each alone (interaction)".into(), rest));
        }
        self
    }
}

const WIDTH: f64 = 860.0;
const ROW: f64 = 26.0;
const GAP: f64 = 8.0;
const LABEL_SIZE: f64 = 11.0;
const MAX_LABEL_WIDTH: f64 = 330.0;

/// `text` cut to `width` px with an ellipsis.
fn fit(text: &str, width: f64, size: f64) -> String {
    if svg::text_width(text, size) <= width {
        return text.to_string();
    }
    let keep = (width / (size * 0.6)).floor() as usize;
    let cut: String = text.chars().take(keep.saturating_sub(1)).collect();
    format!("{cut}…")
}

fn signed(value: f64, unit: &str) -> String {
    let digits = if unit == "s" { 2 } else { 1 };
    format!("{value:+.digits$} {unit}")
}

pub fn render(chart: &Waterfall, subject: &Subject) -> Chart {
    let subtitle = svg::wrap(
        &format!("{}{}", subject.line(), chart.note),
        WIDTH - 40.0,
        12.0,
    );
    let top = 44.0 + subtitle.len() as f64 * 16.0 + 30.0;

    let rows: Vec<&String> = std::iter::once(&chart.start.0)
        .chain(chart.steps.iter().map(|(l, _)| l))
        .chain(std::iter::once(&chart.end.0))
        .collect();
    let label_w = rows
        .iter()
        .map(|l| svg::text_width(l, LABEL_SIZE))
        .fold(0.0, f64::max)
        .min(MAX_LABEL_WIDTH);
    let left = 20.0 + label_w + 10.0;
    let right = WIDTH - 80.0;
    let plot_bottom = top + rows.len() as f64 * (ROW + GAP);

    // Running totals set the axis range.
    let mut running = chart.start.1;
    let mut low = 0.0f64.min(running);
    let mut high = running.max(chart.end.1);
    for (_, d) in &chart.steps {
        running += d;
        low = low.min(running);
        high = high.max(running);
    }
    if let Some((_, limit)) = &chart.limit {
        high = high.max(*limit);
    }
    let ticks = svg::ticks_span(low, high * 1.03, 6);
    let (x_min, x_max) = (
        ticks.first().copied().unwrap_or(0.0),
        ticks.last().copied().unwrap_or(1.0),
    );
    let span = (x_max - x_min).max(f64::MIN_POSITIVE);
    let x = |v: f64| left + (v - x_min) / span * (right - left);

    let height = plot_bottom + 50.0;
    let unit = chart.unit;
    let digits = if unit == "s" { 2 } else { 1 };
    let mut doc = Svg::new(WIDTH, height);
    doc.title(&chart.heading, &subtitle);
    for t in &ticks {
        doc.line((x(*t), top - 6.0), (x(*t), plot_bottom), "#e6e6e6", 1.0, "");
        doc.text(
            x(*t),
            plot_bottom + 15.0,
            &svg::tick_label(*t),
            TextStyle::new(11.0, Anchor::Middle).fill("#555555"),
        );
    }
    doc.text(
        (left + right) / 2.0,
        plot_bottom + 34.0,
        &chart.axis_title,
        TextStyle::new(12.0, Anchor::Middle),
    );

    if let Some((label, limit)) = &chart.limit {
        doc.line(
            (x(*limit), top - 10.0),
            (x(*limit), plot_bottom),
            "#c00000",
            2.0,
            "7 4",
        );
        doc.text(
            x(*limit),
            top - 14.0,
            &format!("{label} {limit:.digits$} {unit}"),
            TextStyle::new(11.0, Anchor::Middle).fill("#c00000"),
        );
    }

    let row_y = |i: usize| top + i as f64 * (ROW + GAP);
    let label_style = TextStyle::new(LABEL_SIZE, Anchor::End);

    // The two totals and the steps between them.
    let total_bar = |doc: &mut Svg, i: usize, (label, value): &(String, f64), kind: &str| {
        let (a, b) = (x(0.0f64.min(*value)), x(0.0f64.max(*value)));
        doc.rect(
            Rect {
                x: a,
                y: row_y(i),
                w: b - a,
                h: ROW,
            },
            TOTAL,
            &[("role", kind.into()), ("value", format!("{value:.4}"))],
            &format!("{label}: {value:.digits$} {unit}"),
        );
        doc.text(
            left - 10.0,
            row_y(i) + ROW / 2.0 + 4.0,
            &fit(label, label_w, LABEL_SIZE),
            label_style.bold(),
        );
        doc.text(
            b + 6.0,
            row_y(i) + ROW / 2.0 + 4.0,
            &format!("{value:.digits$} {unit}"),
            TextStyle::new(11.0, Anchor::Start).bold().halo(),
        );
    };
    total_bar(&mut doc, 0, &chart.start, "start");
    let mut running = chart.start.1;
    for (n, (label, delta)) in chart.steps.iter().enumerate() {
        let i = n + 1;
        let next = running + delta;
        let (a, b) = (x(running.min(next)), x(running.max(next)));
        doc.line(
            (x(running), row_y(i) - GAP),
            (x(running), row_y(i)),
            "#888888",
            1.0,
            "3 2",
        );
        doc.rect(
            Rect {
                x: a,
                y: row_y(i),
                w: (b - a).max(1.0),
                h: ROW,
            },
            if *delta >= 0.0 { INCREASE } else { DECREASE },
            &[("role", "step".into()), ("delta", format!("{delta:.4}"))],
            &format!("{label}: {}", signed(*delta, unit)),
        );
        doc.text(
            left - 10.0,
            row_y(i) + ROW / 2.0 + 4.0,
            &fit(label, label_w, LABEL_SIZE),
            label_style,
        );
        doc.text(
            b + 6.0,
            row_y(i) + ROW / 2.0 + 4.0,
            &signed(*delta, unit),
            TextStyle::new(11.0, Anchor::Start),
        );
        running = next;
    }
    let last = chart.steps.len() + 1;
    doc.line(
        (x(running), row_y(last) - GAP),
        (x(running), row_y(last)),
        "#888888",
        1.0,
        "3 2",
    );
    total_bar(&mut doc, last, &chart.end, "end");
    doc.line((left, top - 6.0), (left, plot_bottom), "#444444", 1.0, "");
    doc.line(
        (left, plot_bottom),
        (right, plot_bottom),
        "#444444",
        1.0,
        "",
    );

    Chart {
        name: chart.name,
        title: chart.heading.clone(),
        width: WIDTH,
        height,
        svg: doc.finish(
            chart.name,
            &format!("{} — {}", chart.heading, subject.line()),
        ),
    }
}
