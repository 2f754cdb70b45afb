//! The Megatron log reader with arbitrary text: it returns a log or an error naming what it
//! looked for, never panics, whatever the prefixes, numbers and truncation.
#![no_main]
use libfuzzer_sys::fuzz_target;
use moe_skills::inputs::megatron_log::read_megatron_log;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(log) = read_megatron_log(text, None) {
            let _ = log.step_statistics();
            let _ = log.peak_memory_by_rank();
        }
    }
});
