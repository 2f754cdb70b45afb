//! Unified diffs of launch scripts and override files, as `triage_oom` reads them.
#![no_main]
use libfuzzer_sys::fuzz_target;
use moe_skills::inputs::diff::settings_changed_by_diff;

fuzz_target!(|text: &str| {
    let _ = settings_changed_by_diff(text);
});
