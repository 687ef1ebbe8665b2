//! Naive oracles the property tests (`tests/props.rs`) and the fuzz targets (`rust/fuzz`)
//! compare the core with: each is the reference behaviour written the obvious, slow way.
#![allow(dead_code)] // each user takes the oracles it needs

use promptweave_core::markers::{CONTENT_TAG, Modality};

/// The reference `safe_format`, literally: one whole-string replacement per key, in order;
/// `None` when an intermediate string would exceed `max_len` bytes (chained values can grow
/// the string geometrically).
pub(crate) fn naive_safe_format_bounded<K: AsRef<str>, V: AsRef<str>>(
    template: &str,
    pairs: &[(K, V)],
    max_len: usize,
) -> Option<String> {
    let mut s = template.to_owned();
    for (k, v) in pairs {
        let needle = format!("{{{}}}", k.as_ref());
        let n = s.matches(needle.as_str()).count();
        if s.len().saturating_add(n.saturating_mul(v.as_ref().len())) > max_len {
            return None;
        }
        s = s.replace(&needle, v.as_ref());
    }
    Some(s)
}

/// [`naive_safe_format_bounded`] without a bound.
pub(crate) fn naive_safe_format<K: AsRef<str>, V: AsRef<str>>(
    template: &str,
    pairs: &[(K, V)],
) -> String {
    naive_safe_format_bounded(template, pairs, usize::MAX).unwrap_or_default()
}

/// Single-pass substitution written over chars: at a `{`, look for the next brace; a `}` closes
/// a name (replaced if it is a key, first pair wins), a `{` restarts there; values are copied and
/// never looked at again.
pub(crate) fn naive_single_pass<K: AsRef<str>, V: AsRef<str>>(
    template: &str,
    pairs: &[(K, V)],
) -> String {
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
        match pairs.iter().find(|(k, _)| k.as_ref() == name) {
            Some((_, v)) => out.push_str(v.as_ref()),
            None => out.extend(&chars[i..=j]),
        }
        i = j + 1;
    }
    out
}

/// The reference's content-tag parser, literally: `split(CT)`, `startswith` in the reference's
/// order, `replace(tag, "")` on the whole segment.
pub(crate) fn naive_parse(content: &str) -> Vec<(Modality, String)> {
    content
        .split(CONTENT_TAG)
        .filter_map(|seg| {
            let m = Modality::ALL
                .into_iter()
                .find(|m| seg.starts_with(m.start_tag()))?;
            Some((m, seg.replace(m.start_tag(), "")))
        })
        .collect()
}
