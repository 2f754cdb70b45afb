//! The step-time breakdown on the rank that sets the pace: one horizontal stacked bar, one
//! segment per term, grouped as compute, exposed communication, pipeline bubble, host and
//! optimizer; a legend with each term's seconds and share.

use super::svg::{self, Anchor, Rect, Svg, TextStyle};
use super::{ink_on, Chart, Subject, Term};
use crate::model::Estimate;

/// The time terms in bar order, with the text report's labels.
pub(crate) const TERMS: [Term; 13] = [
    Term {
        key: "gemm",
        label: "GEMM",
        color: "#1f4e79",
    },
    Term {
        key: "attention",
        label: "attention",
        color: "#2e75b6",
    },
    Term {
        key: "elementwise",
        label: "elementwise",
        color: "#7fb0de",
    },
    Term {
        key: "recompute",
        label: "recompute",
        color: "#bdd7ee",
    },
    Term {
        key: "tp_comm",
        label: "TP comm (exposed)",
        color: "#a63d00",
    },
    Term {
        key: "cp_comm",
        label: "CP comm (exposed)",
        color: "#e46c0a",
    },
    Term {
        key: "ep_comm",
        label: "EP comm (exposed)",
        color: "#f4b183",
    },
    Term {
        key: "pp_comm",
        label: "PP comm",
        color: "#ffc000",
    },
    Term {
        key: "dp_comm",
        label: "DP comm (exposed)",
        color: "#ffe699",
    },
    Term {
        key: "offload_copies",
        label: "offload copies",
        color: "#b4a7d6",
    },
    Term {
        key: "pipeline_bubble",
        label: "pipeline bubble",
        color: "#b4b4b4",
    },
    Term {
        key: "host_overhead",
        label: "host overhead",
        color: "#707070",
    },
    Term {
        key: "optimizer",
        label: "optimizer step",
        color: "#a9d18e",
    },
];

/// Groups over `TERMS` (index ranges), as the walls read them.
/// Each with its name and a short name for narrow spans.
const GROUPS: [(&str, &str, std::ops::Range<usize>); 5] = [
    ("compute", "compute", 0..4),
    ("exposed communication", "comm", 4..10),
    ("pipeline bubble", "bubble", 10..11),
    ("host overhead", "host", 11..12),
    ("optimizer step", "opt", 12..13),
];

#[derive(Debug, Clone, PartialEq)]
pub struct TimeChart {
    /// Seconds per term, in `TERMS` order.
    pub seconds: [f64; 13],
    pub step_time_s: f64,
    pub bottleneck_rank: u32,
    pub model_tflops_per_gpu: f64,
    pub tokens_per_second_per_gpu: f64,
    /// The step times the prediction's error band gives, seconds, shortest first.
    pub step_range_s: Option<[f64; 2]>,
}

impl TimeChart {
    pub fn of(estimate: &Estimate) -> TimeChart {
        let p = &estimate.performance;
        let b = &p.breakdown_s;
        TimeChart {
            seconds: [
                b.gemm,
                b.attention,
                b.elementwise,
                b.recompute,
                b.tp_comm,
                b.cp_comm,
                b.ep_comm,
                b.pp_comm,
                b.dp_comm,
                b.offload_copies,
                b.pipeline_bubble,
                b.host_overhead,
                b.optimizer,
            ],
            step_time_s: p.step_time_s,
            bottleneck_rank: p.bottleneck_rank,
            model_tflops_per_gpu: p.model_tflops_per_gpu,
            tokens_per_second_per_gpu: p.tokens_per_second_per_gpu,
            step_range_s: p
                .uncertainty
                .as_ref()
                .map(|u| [u.step_time_low_s, u.step_time_high_s]),
        }
    }
}

const WIDTH: f64 = 860.0;
const LEFT: f64 = 24.0;
const RIGHT: f64 = 36.0;

pub fn render(chart: &TimeChart, subject: &Subject) -> Chart {
    let heading = format!(
        "Step time: {:.2} s on pipeline rank {} ({:.0} model TFLOP/s per GPU, {:.0} tokens/s per GPU)",
        chart.step_time_s,
        chart.bottleneck_rank,
        chart.model_tflops_per_gpu,
        chart.tokens_per_second_per_gpu
    );
    // The error band's step range goes in the subtitle, which wraps; the heading does not.
    let band = chart
        .step_range_s
        .map(|[low, high]| {
            format!(" · its error band's measured runs put the step at {low:.1}–{high:.1} s")
        })
        .unwrap_or_default();
    let subtitle = svg::wrap(&format!("{}{band}", subject.line()), WIDTH - 40.0, 12.0);
    let top = 44.0 + subtitle.len() as f64 * 16.0 + 14.0;
    let bracket_y = top + 12.0;
    let bar_y = top + 26.0;
    let bar_h = 40.0;
    let plot_w = WIDTH - LEFT - RIGHT;
    let total: f64 = chart.seconds.iter().sum();
    // The bar spans the plot; ticks stop at its end.
    let x_max = (total * 1.01).max(f64::MIN_POSITIVE);
    let ticks: Vec<f64> = svg::ticks(total.max(f64::MIN_POSITIVE), 8)
        .into_iter()
        .filter(|t| *t <= x_max)
        .collect();
    let x = |s: f64| LEFT + s / x_max * plot_w;

    let present: Vec<usize> = (0..TERMS.len())
        .filter(|i| chart.seconds[*i] > 0.0)
        .collect();
    let columns = 3usize;
    let rows = present.len().div_ceil(columns);
    let axis_y = bar_y + bar_h;
    let legend_top = axis_y + 52.0;
    let height = legend_top + rows as f64 * 18.0 + 12.0;

    let mut doc = Svg::new(WIDTH, height);
    doc.title(&heading, &subtitle);

    for t in &ticks {
        doc.line(
            (x(*t), bar_y - 4.0),
            (x(*t), axis_y + 4.0),
            "#e6e6e6",
            1.0,
            "",
        );
        doc.text(
            x(*t),
            axis_y + 17.0,
            &svg::tick_label(*t),
            TextStyle::new(11.0, Anchor::Middle).fill("#555555"),
        );
    }
    doc.text(
        LEFT + plot_w / 2.0,
        axis_y + 34.0,
        "time per step (s)",
        TextStyle::new(12.0, Anchor::Middle),
    );

    let mut start = 0.0;
    for &i in &present {
        let s = chart.seconds[i];
        let t = &TERMS[i];
        let share = s / chart.step_time_s.max(f64::MIN_POSITIVE) * 100.0;
        let rect = Rect {
            x: x(start),
            y: bar_y,
            w: x(start + s) - x(start),
            h: bar_h,
        };
        doc.rect(
            rect,
            t.color,
            &[
                ("role", "segment".into()),
                ("term", t.key.into()),
                ("s", format!("{s:.4}")),
            ],
            &format!("{}: {s:.2} s ({share:.0}% of the step)", t.label),
        );
        let label = format!("{share:.0}%");
        if svg::text_width(&label, 11.0) + 6.0 < rect.w {
            doc.text(
                rect.x + rect.w / 2.0,
                bar_y + bar_h / 2.0 + 4.0,
                &label,
                TextStyle::new(11.0, Anchor::Middle).fill(ink_on(t.color)),
            );
        }
        start += s;
    }
    doc.line((LEFT, axis_y), (LEFT + plot_w, axis_y), "#444444", 1.0, "");

    // Group brackets above the bar, labelled where there is room.
    let mut start = 0.0;
    for (name, short, range) in GROUPS {
        let seconds: f64 = chart.seconds[range].iter().sum();
        if seconds <= 0.0 {
            continue;
        }
        let (x0, x1) = (x(start) + 1.0, x(start + seconds) - 1.0);
        doc.line((x0, bracket_y), (x1, bracket_y), "#666666", 1.0, "");
        doc.line((x0, bracket_y), (x0, bracket_y + 5.0), "#666666", 1.0, "");
        doc.line((x1, bracket_y), (x1, bracket_y + 5.0), "#666666", 1.0, "");
        let label = format!("{name} {seconds:.2} s");
        if svg::text_width(&label, 11.0) < x1 - x0 {
            doc.text(
                (x0 + x1) / 2.0,
                bracket_y - 4.0,
                &label,
                TextStyle::new(11.0, Anchor::Middle).fill("#333333"),
            );
        } else if let Some(fits) = [name, short]
            .into_iter()
            .find(|text| svg::text_width(text, 10.0) < x1 - x0)
        {
            doc.text(
                (x0 + x1) / 2.0,
                bracket_y - 4.0,
                fits,
                TextStyle::new(10.0, Anchor::Middle).fill("#333333"),
            );
        }
        start += seconds;
    }

    // Legend: terms in bar order, filled column by column.
    let column_w = (WIDTH - 40.0) / columns as f64;
    for (n, &i) in present.iter().enumerate() {
        let t = &TERMS[i];
        let (col, row) = (n / rows.max(1), n % rows.max(1));
        let lx = 20.0 + col as f64 * column_w;
        let ly = legend_top + row as f64 * 18.0;
        let s = chart.seconds[i];
        doc.rect(
            Rect {
                x: lx,
                y: ly - 10.0,
                w: 12.0,
                h: 12.0,
            },
            t.color,
            &[],
            "",
        );
        doc.text(lx + 18.0, ly, t.label, TextStyle::new(11.0, Anchor::Start));
        doc.text(
            lx + column_w - 16.0,
            ly,
            &format!(
                "{s:.2} s  {:>3.0}%",
                s / chart.step_time_s.max(f64::MIN_POSITIVE) * 100.0
            ),
            TextStyle::new(11.0, Anchor::End),
        );
    }

    Chart {
        name: "time",
        title: heading.clone(),
        width: WIDTH,
        height,
        svg: doc.finish("time", &format!("{heading} — {}", subject.line())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every legend label leaves room for a value as wide as "1234.56 s  100%".
    #[test]
    fn legend_labels_fit_their_column() {
        let column_w = (WIDTH - 40.0) / 3.0;
        let room = column_w - 16.0 - 18.0 - svg::text_width("1234.56 s  100%", 11.0);
        for t in &TERMS {
            assert!(
                svg::text_width(t.label, 11.0) + 6.0 < room,
                "{:?} runs into its value",
                t.label
            );
        }
    }
}
