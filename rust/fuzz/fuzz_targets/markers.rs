//! Differential fuzzing of the `<AIS_*>` content-tag parser against the reference algorithm
//! written naively (`split` / `starts_with` / `replace`), and consistency of the strict parser:
//! on success it agrees with the compat parser and renders back to the input; an error names a
//! tag that sits at its character position.
//!
//! Input: UTF-8 bytes (non-UTF-8 inputs are skipped). Seed the corpus with the golden MM-*
//! contents; libFuzzer's dictionary option (`-dict`) with the five tags helps.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../core/tests/oracles/mod.rs"]
mod oracles;
use oracles::naive_parse;
use promptweave_core::markers::{Modality, parse_content, parse_content_strict, render_content};

fuzz_target!(|data: &[u8]| {
    let Ok(content) = std::str::from_utf8(data) else {
        return;
    };
    let parts = parse_content(content);
    let got: Vec<(Modality, String)> = parts
        .iter()
        .map(|p| (p.modality, p.payload.to_string()))
        .collect();
    assert_eq!(got, naive_parse(content));
    match parse_content_strict(content) {
        Ok(strict) => {
            assert_eq!(strict, parts);
            assert_eq!(render_content(&strict), content);
        }
        Err(err) => {
            let (tag, position) = err.tag_location().expect("a content error");
            let rest: String = content.chars().skip(position).collect();
            assert!(position < content.chars().count());
            if let Some(tag) = tag {
                assert!(rest.starts_with(tag));
            }
        }
    }
});
