//! Differential fuzzing of `safe_format` against the reference algorithm written naively, and of
//! `single_pass_format` against a char-level single-scan oracle.
//!
//! Input: UTF-8 bytes split on `\0`: the template, then alternating keys and values (a missing
//! last value is empty).
#![no_main]

use libfuzzer_sys::fuzz_target;
use promptweave_core::{Entries, safe_format, single_pass_format};

/// Outputs beyond this size are skipped: chained values can grow the string geometrically.
const MAX_OUTPUT: usize = 1 << 20;

/// The reference `safe_format`: one whole-string replacement per key, in order (`None` when an
/// intermediate string gets too large).
fn naive_safe_format(template: &str, pairs: &[(&str, &str)]) -> Option<String> {
    let mut s = template.to_owned();
    for (k, v) in pairs {
        let needle = format!("{{{k}}}");
        let n = s.matches(needle.as_str()).count();
        if s.len() + n * v.len() > MAX_OUTPUT {
            return None;
        }
        s = s.replace(&needle, v);
    }
    Some(s)
}

/// One left-to-right scan; a `{name}` (no brace inside) whose name is a key (first pair wins)
/// becomes its value; values are never scanned again.
fn naive_single_pass(template: &str, pairs: &[(&str, &str)]) -> String {
    let chars: Vec<char> = template.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '{' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let Some(j) = (i + 1..chars.len()).find(|&j| chars[j] == '{' || chars[j] == '}') else {
            out.extend(&chars[i..]);
            break;
        };
        if chars[j] == '{' {
            out.extend(&chars[i..j]);
            i = j;
            continue;
        }
        let name: String = chars[i + 1..j].iter().collect();
        match pairs.iter().find(|(k, _)| **k == name) {
            Some((_, v)) => out.push_str(v),
            None => out.extend(&chars[i..=j]),
        }
        i = j + 1;
    }
    out
}

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
    let Some(want) = naive_safe_format(template, &pairs) else {
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
