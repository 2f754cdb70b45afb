//! Memory per GPU on every pipeline rank: one stacked bar per rank, one segment per memory
//! term, against the usable capacity.
//!
//! Every rank's bar is itemised from `per_rank_breakdown_gib`; an estimate without it (an
//! older JSON) falls back to two segments for the other ranks, what PyTorch allocates and what
//! is reserved beyond it. Every bar sums to its rank's `per_rank_peak_gib`.

use super::svg::{self, Anchor, Rect, Svg, TextStyle};
use super::{Chart, Subject, Term};
use crate::model::estimate::MemoryBreakdown;
use crate::model::Estimate;

/// The memory terms in stacking order (bottom first), with the rationale's labels.
pub(crate) const TERMS: [Term; 15] = [
    Term {
        key: "weights",
        label: "weights",
        color: "#1f4e79",
    },
    Term {
        key: "gradients",
        label: "gradients",
        color: "#2e75b6",
    },
    Term {
        key: "optimizer",
        label: "optimizer",
        color: "#7fb0de",
    },
    Term {
        key: "fsdp_buffers",
        label: "FSDP buffers",
        color: "#bdd7ee",
    },
    Term {
        key: "fp8_weight_copies",
        label: "FP8 weight copies",
        color: "#4a7f8c",
    },
    Term {
        key: "activations",
        label: "activations",
        color: "#e46c0a",
    },
    Term {
        key: "backward_working_set",
        label: "backward working set",
        color: "#f4b183",
    },
    Term {
        key: "logits_loss",
        label: "logits/loss",
        color: "#a63d00",
    },
    Term {
        key: "moe_dispatch",
        label: "MoE dispatch",
        color: "#ffc000",
    },
    Term {
        key: "cuda_graph_pool",
        label: "CUDA graph pool",
        color: "#a9d18e",
    },
    Term {
        key: "fragmentation",
        label: "fragmentation",
        color: "#b4b4b4",
    },
    Term {
        key: "dispatcher_buffers",
        label: "DeepEP/HybridEP buffers",
        color: "#8064a2",
    },
    Term {
        key: "fixed_reserve",
        label: "reserve (CUDA context, NCCL)",
        color: "#707070",
    },
    Term {
        key: "allocated",
        label: "allocated (not itemised)",
        color: "#c9a98c",
    },
    Term {
        key: "reserved_beyond_allocated",
        label: "reserved beyond allocated",
        color: "#d9d9d9",
    },
];

fn term(key: &str) -> &'static Term {
    TERMS
        .iter()
        .find(|t| t.key == key)
        .unwrap_or(&TERMS[TERMS.len() - 1])
}

fn itemised(b: &MemoryBreakdown) -> Vec<(&'static str, f64)> {
    vec![
        ("weights", b.weights),
        ("gradients", b.gradients),
        ("optimizer", b.optimizer),
        ("fsdp_buffers", b.fsdp_buffers),
        ("fp8_weight_copies", b.fp8_weight_copies),
        ("activations", b.activations),
        ("backward_working_set", b.backward_working_set),
        ("logits_loss", b.logits_loss),
        ("moe_dispatch", b.moe_dispatch),
        ("cuda_graph_pool", b.cuda_graph_pool),
        ("fragmentation", b.fragmentation),
        ("dispatcher_buffers", b.dispatcher_buffers),
        ("fixed_reserve", b.fixed_reserve),
    ]
}

/// One pipeline rank's bar.
#[derive(Debug, Clone, PartialEq)]
pub struct RankBar {
    pub rank: u32,
    /// (term key, GiB), bottom first.
    pub segments: Vec<(&'static str, f64)>,
}

impl RankBar {
    pub fn total(&self) -> f64 {
        self.segments.iter().map(|(_, v)| v).sum()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemoryChart {
    pub ranks: Vec<RankBar>,
    pub worst_rank: u32,
    pub capacity_gib: f64,
    pub fits: bool,
    pub peak_gib: f64,
}

impl MemoryChart {
    pub fn of(estimate: &Estimate) -> MemoryChart {
        let m = &estimate.memory;
        let worst = m.worst_rank.pipeline_rank;
        let ranks = m
            .per_rank_peak_gib
            .iter()
            .enumerate()
            .map(|(i, &peak)| {
                let rank = u32::try_from(i).unwrap_or(u32::MAX);
                let segments = if rank == worst {
                    itemised(&m.breakdown_gib)
                } else if let Some(breakdown) = m.per_rank_breakdown_gib.get(i) {
                    itemised(breakdown)
                } else {
                    let allocated = m.per_rank_allocated_gib.get(i).copied().unwrap_or(peak);
                    vec![
                        ("allocated", allocated),
                        ("reserved_beyond_allocated", peak - allocated),
                    ]
                };
                RankBar {
                    rank,
                    segments: segments.into_iter().filter(|(_, v)| *v > 0.0).collect(),
                }
            })
            .collect();
        MemoryChart {
            ranks,
            worst_rank: worst,
            capacity_gib: m.capacity_gib,
            fits: estimate.fits,
            peak_gib: m.peak_gib,
        }
    }
}

const WIDTH: f64 = 860.0;
const LEGEND_WIDTH: f64 = 270.0;
const LEFT: f64 = 64.0;

pub fn render(chart: &MemoryChart, subject: &Subject) -> Chart {
    let heading = format!(
        "Memory per GPU by pipeline rank: peak {:.1} of {:.1} GiB on rank {} ({})",
        chart.peak_gib,
        chart.capacity_gib,
        chart.worst_rank,
        super::verdict(chart.fits)
    );
    let subtitle = svg::wrap(&subject.line(), WIDTH - 40.0, 12.0);
    let top = 44.0 + subtitle.len() as f64 * 16.0 + 16.0;
    let plot_h = 300.0;
    let plot_bottom = top + plot_h;
    let plot_right = WIDTH - LEGEND_WIDTH - 16.0;
    let plot_w = plot_right - LEFT;

    // Legend entries: the terms that appear on some bar, in stacking order, with the worst
    // rank's value; then the capacity line.
    let worst = chart.ranks.iter().find(|r| r.rank == chart.worst_rank);
    let present: Vec<&Term> = TERMS
        .iter()
        .filter(|t| {
            chart
                .ranks
                .iter()
                .any(|r| r.segments.iter().any(|(k, _)| *k == t.key))
        })
        .collect();
    let legend_h = 22.0 + (present.len() as f64 + 1.0) * 18.0;
    let height = (plot_bottom + 62.0).max(top + legend_h + 10.0);

    let mut doc = Svg::new(WIDTH, height);
    doc.title(&heading, &subtitle);

    let max_total = chart.ranks.iter().map(RankBar::total).fold(0.0, f64::max);
    let ticks = svg::ticks(max_total.max(chart.capacity_gib) * 1.04, 5);
    let y_max = ticks.last().copied().unwrap_or(1.0).max(f64::MIN_POSITIVE);
    let y = |gib: f64| plot_bottom - gib / y_max * plot_h;

    let tick_style = TextStyle::new(11.0, Anchor::End).fill("#555555");
    for t in &ticks {
        doc.line((LEFT, y(*t)), (plot_right, y(*t)), "#e6e6e6", 1.0, "");
        doc.text(LEFT - 6.0, y(*t) + 4.0, &svg::tick_label(*t), tick_style);
    }
    doc.vertical_text(
        18.0,
        top + plot_h / 2.0,
        "memory per GPU (GiB)",
        TextStyle::new(12.0, Anchor::Middle),
    );

    let slots = chart.ranks.len().max(1) as f64;
    let slot = plot_w / slots;
    let bar_w = (slot * 0.7).min(56.0);
    let label_every = ((slots * 28.0 / plot_w).ceil() as usize).max(1);
    for (i, bar) in chart.ranks.iter().enumerate() {
        let x = LEFT + slot * i as f64 + (slot - bar_w) / 2.0;
        let mut base = 0.0;
        for (key, gib) in &bar.segments {
            let t = term(key);
            let rect = Rect {
                x,
                y: y(base + gib),
                w: bar_w,
                h: y(base) - y(base + gib),
            };
            doc.rect(
                rect,
                t.color,
                &[
                    ("role", "segment".into()),
                    ("rank", bar.rank.to_string()),
                    ("term", t.key.into()),
                    ("gib", format!("{gib:.3}")),
                ],
                &format!("pipeline rank {}: {} {gib:.2} GiB", bar.rank, t.label),
            );
            base += gib;
        }
        let worst = bar.rank == chart.worst_rank;
        if i % label_every == 0 || worst {
            let style = TextStyle::new(11.0, Anchor::Middle);
            doc.text(
                x + bar_w / 2.0,
                plot_bottom + 15.0,
                &bar.rank.to_string(),
                if worst { style.bold() } else { style },
            );
            if slot >= 30.0 || worst {
                let style = TextStyle::new(10.0, Anchor::Middle).fill("#333333").halo();
                doc.text(
                    x + bar_w / 2.0,
                    y(base) - 4.0,
                    &format!("{base:.1}"),
                    if worst { style.bold() } else { style },
                );
            }
        }
    }
    doc.line(
        (LEFT, plot_bottom),
        (plot_right, plot_bottom),
        "#444444",
        1.0,
        "",
    );
    doc.line((LEFT, top), (LEFT, plot_bottom), "#444444", 1.0, "");
    doc.line(
        (LEFT, y(chart.capacity_gib)),
        (plot_right, y(chart.capacity_gib)),
        "#c00000",
        2.0,
        "7 4",
    );
    doc.text(
        LEFT + plot_w / 2.0,
        plot_bottom + 34.0,
        &format!("pipeline rank (bold: the worst, rank {})", chart.worst_rank),
        TextStyle::new(12.0, Anchor::Middle),
    );
    if chart
        .ranks
        .iter()
        .any(|r| r.segments.iter().any(|(key, _)| *key == "allocated"))
    {
        doc.text(
            LEFT + plot_w / 2.0,
            plot_bottom + 50.0,
            "The estimate itemises the worst rank; the others show allocated and reserved beyond it.",
            TextStyle::new(10.0, Anchor::Middle).fill("#666666"),
        );
    }

    // Legend, right of the plot.
    let lx = plot_right + 20.0;
    let mut ly = top;
    doc.text(
        lx,
        ly,
        &format!("rank {} (worst), GiB", chart.worst_rank),
        TextStyle::new(12.0, Anchor::Start).bold(),
    );
    ly += 18.0;
    for t in present.iter().rev() {
        let value = worst
            .and_then(|w| w.segments.iter().find(|(k, _)| *k == t.key))
            .map(|(_, v)| format!("{v:.1}"))
            .unwrap_or_else(|| "–".into());
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
        doc.text(WIDTH - 12.0, ly, &value, TextStyle::new(11.0, Anchor::End));
        ly += 18.0;
    }
    doc.line((lx, ly - 4.0), (lx + 12.0, ly - 4.0), "#c00000", 2.0, "4 2");
    doc.text(
        lx + 18.0,
        ly,
        "usable capacity",
        TextStyle::new(11.0, Anchor::Start).fill("#c00000"),
    );
    doc.text(
        WIDTH - 12.0,
        ly,
        &format!("{:.1}", chart.capacity_gib),
        TextStyle::new(11.0, Anchor::End).fill("#c00000"),
    );

    Chart {
        name: "memory",
        title: heading.clone(),
        width: WIDTH,
        height,
        svg: doc.finish("memory", &format!("{heading} — {}", subject.line())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every legend label leaves room for a value as wide as "1234.5" before the right edge.
    #[test]
    fn legend_labels_fit_their_column() {
        let label_start = WIDTH - LEGEND_WIDTH - 16.0 + 20.0 + 18.0;
        let value_start = WIDTH - 12.0 - svg::text_width("1234.5", 11.0);
        for t in &TERMS {
            let end = label_start + svg::text_width(t.label, 11.0);
            assert!(end + 6.0 < value_start, "{:?} runs into its value", t.label);
        }
    }
}
