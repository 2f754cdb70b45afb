//! SKILL.md: frontmatter split and YAML, then the section tree and section lookup.
#![no_main]
use libfuzzer_sys::fuzz_target;
use moe_skills::catalog::{parse_sections, parse_skill_markdown};

fuzz_target!(|text: &str| {
    let body = match parse_skill_markdown(text) {
        Ok(parsed) => parsed.body.to_owned(),
        Err(_) => text.to_owned(),
    };
    let tree = parse_sections(&body);
    for section in &tree.sections {
        if section.level > 0 {
            assert!(tree.find(&section.display_path()).is_ok());
        }
    }
    let _ = tree.find(text);
});
