//! Differential fuzzing of `safe_format` against the reference algorithm written naively, and of
//! `single_pass_format` against a char-level single-scan oracle.
//!
//! Input: UTF-8 bytes split on `\0`: the template, then alternating keys and values (a missing
//! last value is empty).
#![no_main]

use libfuzzer_sys::fuzz_target;
use promptweave_core::{Entries, safe_format, single_pass_format};

#[path = "../../core/tests/oracles/mod.rs"]
mod oracles;
use oracles::{naive_safe_format_bounded, naive_single_pass};

/// Outputs beyond this size are skipped: chained values can grow the string geometrically.
const MAX_OUTPUT: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.split('\0');
    let template = parts.next().unwrap_or("");
    let rest: Vec<&str> = parts.collect();
    let pairs: Vec<(&str, &str)> = rest
        .chunks(2)
        .map(|c| (c[0], c.get(1).copied().unwrap_or("")))
        .collect();
    let mut row = Entries::with_capacity(pairs.len());
    for (k, v) in &pairs {
        row.push(k, v);
    }
    let Some(want) = naive_safe_format_bounded(template, &pairs, MAX_OUTPUT) else {
        return;
    };
    let got = safe_format(template, &row);
    assert_eq!(
        got.as_ref(),
        want.as_str(),
        "safe_format differs: {template:?} {pairs:?}"
    );
    let got = single_pass_format(template, &row);
    let want = naive_single_pass(template, &pairs);
    assert_eq!(
        got.as_ref(),
        want.as_str(),
        "single_pass_format differs: {template:?} {pairs:?}"
    );
});
