//! `triage_oom`'s answer in words: both sides with their error bands, the root cause, every
//! change applied alone, where the memory went and the cheapest fix.

use super::*;

/// Both sides' throughput and step time with their error bands. When both fall in one
/// regime the band is stated once and the `after` side gets only its range.
fn throughput_bands(before: &Estimate, after: &Estimate) -> Option<String> {
    let (b, a) = (&before.performance, &after.performance);
    if b.uncertainty.is_none() && a.uncertainty.is_none() {
        return None;
    }
    let same_regime = match (&b.uncertainty, &a.uncertainty) {
        (Some(x), Some(y)) => x.regime == y.regime && x.rows == y.rows,
        _ => false,
    };
    let after_band = match &a.uncertainty {
        Some(band) if same_regime => format!(
            " ({:.0}–{:.0} by the same runs)",
            band.tflops_low, band.tflops_high
        ),
        _ => a.band_text(),
    };
    let step_ranges = match (&b.uncertainty, &a.uncertainty) {
        (Some(x), Some(y)) => format!(
            "; step times by the same runs: {:.2}–{:.2} s before, {:.2}–{:.2} s after",
            x.step_time_low_s, x.step_time_high_s, y.step_time_low_s, y.step_time_high_s
        ),
        _ => String::new(),
    };
    Some(format!(
        "Throughput: {:.0} TFLOP/s/GPU before{}, {:.0} after{}{}.",
        b.model_tflops_per_gpu,
        b.band_text(),
        a.model_tflops_per_gpu,
        after_band,
        step_ranges,
    ))
}

pub(super) fn triage_rationale(
    before: &Estimate,
    after: &Estimate,
    causes: &[Cause],
    components: &[ComponentDelta],
    fixes: &[Fix],
) -> String {
    let mut text = format!(
        "Before: {:.1} of {:.1} GiB ({}), {:.2} s/step. After: {:.1} GiB ({}), {:.2} s/step.",
        before.memory.peak_gib,
        before.memory.capacity_gib,
        if before.fits { "fits" } else { "does not fit" },
        before.performance.step_time_s,
        after.memory.peak_gib,
        match (before.fits, after.fits) {
            (_, true) => "fits",
            (true, false) => "**no longer fits**",
            (false, false) => "still does not fit",
        },
        after.performance.step_time_s,
    );
    if let Some(bands) = throughput_bands(before, after) {
        text.push_str(&format!("\n\n{bands}"));
    }
    // A change that made the run neither bigger nor slower has no "root cause", only effects.
    let regression = after.memory.peak_gib > before.memory.peak_gib
        || after.performance.step_time_s > before.performance.step_time_s
        || (before.fits && !after.fits);
    if let Some(root) = causes.first() {
        text.push_str(&format!(
            "\n\n{}: **{}** {} → {}: {}.",
            if regression {
                "Root cause"
            } else {
                "The change helps; largest effect"
            },
            root.field,
            value_text(&root.before),
            value_text(&root.after),
            root.explanation
        ));
    }
    // Every change, not only the first: each was applied alone to `before` (fields of one
    // group share their deltas).
    if causes.len() > 1 {
        text.push_str("\n\nEvery change, each applied alone to `before`:");
        let mut listed: Vec<(Vec<String>, f64, f64)> = Vec::new();
        for cause in causes {
            let entry = format!(
                "`{}` {} → {}",
                cause.field,
                value_text(&cause.before),
                value_text(&cause.after)
            );
            match listed
                .iter_mut()
                .find(|(_, m, t)| *m == cause.memory_delta_gib && *t == cause.step_time_delta_s)
            {
                Some((fields, _, _)) => fields.push(entry),
                None => listed.push((vec![entry], cause.memory_delta_gib, cause.step_time_delta_s)),
            }
        }
        for (fields, memory, time) in listed {
            text.push_str(&format!(
                "\n- {}: {:+.1} GiB, {:+.2} s/step",
                fields.join(", "),
                memory,
                time
            ));
        }
    }
    if !components.is_empty() {
        let listed: Vec<String> = components
            .iter()
            .take(4)
            .map(|c| format!("{} {:+.1} GiB", c.component, c.delta_gib))
            .collect();
        text.push_str(&format!(
            "\n\nWhere the memory went: {}.",
            listed.join(", ")
        ));
    }
    if before.fits && !after.fits {
        text.push_str(&format!(
            "\n\nReverting the change returns to {:.1} GiB (fits), {:.2} s/step.",
            before.memory.peak_gib, before.performance.step_time_s
        ));
    }
    if let Some(fix) = fixes.iter().find(|f| f.fits) {
        text.push_str(&format!(
            "\n\nCheapest fix that fits: {} → {:.1} GiB, {:+.2} s/step.",
            fix.description, fix.peak_gib, fix.step_time_delta_s
        ));
    } else if !after.fits {
        text.push_str("\n\nNo single fix fits; combine them or call `plan_layouts`.");
    }
    text
}
