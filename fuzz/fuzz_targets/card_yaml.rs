//! card.yaml: the typed core plus the raw value, whatever the shapes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = moe_skills::catalog::parse_card(text);
});
