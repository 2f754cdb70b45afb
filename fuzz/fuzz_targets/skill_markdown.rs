//! Fuzz SKILL.md parsing: frontmatter, section tree, section lookup and card parsing must
//! never panic. Run with `cargo +nightly fuzz run skill_markdown` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moe_skills::catalog::{parse_card, parse_sections, parse_skill_markdown};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let body = match parse_skill_markdown(text) {
        Ok(parsed) => parsed.body,
        Err(error) => {
            let _ = error.line();
            text
        }
    };
    let tree = parse_sections(body);
    for section in tree.sections.iter().take(8) {
        let _ = tree.find(&section.display_path());
    }
    let _ = tree.find(text.get(..text.len().min(40)).unwrap_or_default());
    let _ = parse_card(text);
});
