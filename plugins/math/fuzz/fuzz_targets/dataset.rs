//! Fuzzes the JSONL dataset reader: arbitrary bytes give tasks or an error, never a panic.
//! Run with `cargo +nightly fuzz run dataset` from `plugins/math`.
#![no_main]

use std::io::Cursor;

use drmas_math::dataset::{read_jsonl, JsonlFormat, LoadOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for format in [JsonlFormat::gsm8k(), JsonlFormat::math()] {
        for skip_malformed in [false, true] {
            let options = LoadOptions { limit: None, skip_malformed, ..LoadOptions::default() };
            let _ = read_jsonl(Cursor::new(data), "fuzz.jsonl", &format, &options);
        }
    }
});
