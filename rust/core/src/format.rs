//! Placeholder substitution.
//!
//! The reference `safe_format(template, **row)` walks the row in insertion order and, for each
//! `(key, value)`, replaces every `{key}` in the *current* string by `str(value)`. A value can
//! therefore be substituted again by a later key, and a value can join template text into a new
//! placeholder. [`safe_format`] reproduces that exactly; it takes a one-scan fast path only when
//! the result provably cannot differ.

use std::borrow::Cow;

use memchr::{memchr, memchr2, memmem};

/// The ordered `(key, value)` pairs of one row; values are already Python `str(value)`.
///
/// Order matters: it is the order of the reference's sequential replacement.
#[derive(Debug, Clone, Default)]
pub struct Entries<'a> {
    pairs: Vec<(&'a str, &'a str)>,
    /// per value, whether it has a brace (`None`: not scanned yet): scanned when a template
    /// first uses the value, so a row's unused columns never are
    value_brace: Vec<std::cell::Cell<Option<bool>>>,
    key_brace: bool,
    /// the values' total length (an output buffer's size hint)
    values_len: usize,
}

/// Whether `s` contains `{` or `}` (a vectorised scan).
pub fn has_brace(s: &str) -> bool {
    memchr2(b'{', b'}', s.as_bytes()).is_some()
}

impl<'a> Entries<'a> {
    /// Empty entries with room for `n` pairs.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            pairs: Vec::with_capacity(n),
            value_brace: Vec::with_capacity(n),
            key_brace: false,
            values_len: 0,
        }
    }

    /// Append a pair (keys of a Python `**kwargs` mapping are unique; the first one wins here).
    pub fn push(&mut self, key: &'a str, value: &'a str) {
        self.key_brace |= has_brace(key);
        self.pairs.push((key, value));
        self.value_brace.push(std::cell::Cell::new(None));
        self.values_len += value.len();
    }

    /// Set `key` to `value`: an existing key keeps its position, a new one is appended
    /// (the reference's output-column masking on a copy of the row).
    pub fn set(&mut self, key: &'a str, value: &'a str) {
        if let Some(i) = self.position(key) {
            self.values_len = self.values_len - self.pairs[i].1.len() + value.len();
            self.pairs[i].1 = value;
            self.value_brace[i].set(None);
        } else {
            self.push(key, value);
        }
    }

    /// Whether value `i` has a brace (scanned once).
    fn value_has_brace(&self, i: usize) -> bool {
        let Some(cell) = self.value_brace.get(i) else {
            return false;
        };
        if let Some(known) = cell.get() {
            return known;
        }
        let brace = self.pairs.get(i).is_some_and(|(_, v)| has_brace(v));
        cell.set(Some(brace));
        brace
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.pairs.iter().position(|(k, _)| *k == key)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.position(key).map(|i| self.pairs[i].1)
    }

    /// The pairs in order.
    pub fn pairs(&self) -> &[(&'a str, &'a str)] {
        &self.pairs
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether there is no pair.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// Whether every `{` of `s` is closed by a `}` before the next `{` (the text part of the
/// one-scan condition: then each `{…}` is an independent slot).
pub fn fast_condition(s: &str) -> bool {
    let bytes = s.as_bytes();
    let mut at = 0;
    while let Some(rel) = memchr(b'{', &bytes[at..]) {
        let open = at + rel;
        match memchr2(b'{', b'}', &bytes[open + 1..]) {
            None => return true,
            Some(r) if bytes[open + 1 + r] == b'{' => return false,
            Some(r) => at = open + 2 + r,
        }
    }
    true
}

/// Substitute `row` into `template` with the reference's sequential semantics.
///
/// Returns the template itself (borrowed) when nothing changes.
pub fn safe_format<'t>(template: &'t str, row: &Entries<'_>) -> Cow<'t, str> {
    if memchr(b'{', template.as_bytes()).is_none() || row.is_empty() {
        return Cow::Borrowed(template);
    }
    if !row.key_brace {
        if let Some(out) = fast_format(template, row) {
            return out;
        }
    }
    sequential_format(template, row)
}

/// One scan over `template`, valid when every `{` is closed by a `}` before the next `{` and no
/// substituted value contains a brace; `None` when that does not hold.
fn fast_format<'t>(template: &'t str, row: &Entries<'_>) -> Option<Cow<'t, str>> {
    scan_slots(template, row.values_len, |slot| match slot {
        // a `{` inside `{…}`: the slots are not independent
        None => Err(()),
        Some(name) => match row.position(name) {
            Some(i) if row.value_has_brace(i) => Err(()),
            Some(i) => Ok(Some(row.pairs[i].1)),
            None => Ok(None),
        },
    })
    .ok()
}

/// One left-to-right scan over the `{name}` slots of `template` (`name` without braces).
/// `fill(Some(name))` gives the slot's text (`None`: keep the slot as is); `fill(None)` is
/// called at a `{` followed by another `{` before any `}` and may abort the scan (`Err`), or
/// continue from the second `{` (`Ok`). `extra` sizes the output buffer beyond the template
/// (the values' total length: enough when each is used at most once).
fn scan_slots<'t, 'v>(
    template: &'t str,
    extra: usize,
    mut fill: impl FnMut(Option<&str>) -> std::result::Result<Option<&'v str>, ()>,
) -> std::result::Result<Cow<'t, str>, ()> {
    let bytes = template.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut at = 0;
    while let Some(rel) = memchr(b'{', &bytes[at..]) {
        let open = at + rel;
        let Some(rel_close) = memchr2(b'{', b'}', &bytes[open + 1..]) else {
            break;
        };
        let close = open + 1 + rel_close;
        if bytes[close] == b'{' {
            fill(None)?;
            at = close;
            continue;
        }
        if let Some(value) = fill(Some(&template[open + 1..close]))? {
            let buf = out.get_or_insert_with(|| String::with_capacity(template.len() + extra));
            buf.push_str(&template[copied..open]);
            buf.push_str(value);
            copied = close + 1;
        }
        at = close + 1;
    }
    Ok(match out {
        None => Cow::Borrowed(template),
        Some(mut buf) => {
            buf.push_str(&template[copied..]);
            Cow::Owned(buf)
        }
    })
}

/// The reference algorithm, literally: one whole-string replacement per key, in order.
fn sequential_format<'t>(template: &'t str, row: &Entries<'_>) -> Cow<'t, str> {
    let mut current: Cow<'t, str> = Cow::Borrowed(template);
    let mut needle = String::new();
    for (key, value) in &row.pairs {
        needle.clear();
        needle.push('{');
        needle.push_str(key);
        needle.push('}');
        if let Some(replaced) = replace_all(&current, &needle, value) {
            current = Cow::Owned(replaced);
        }
    }
    current
}

/// Python's `haystack.replace(needle, with)` for a non-empty needle; `None` if it does not occur.
pub(crate) fn replace_all(haystack: &str, needle: &str, with: &str) -> Option<String> {
    if needle.is_empty() {
        return Some(replace_empty(haystack, with));
    }
    let finder = memmem::Finder::new(needle.as_bytes());
    let mut iter = finder.find_iter(haystack.as_bytes()).peekable();
    iter.peek()?;
    let mut out = String::with_capacity(haystack.len() + with.len());
    let mut copied = 0;
    for pos in iter {
        out.push_str(&haystack[copied..pos]);
        out.push_str(with);
        copied = pos + needle.len();
    }
    out.push_str(&haystack[copied..]);
    Some(out)
}

/// Python's `s.replace('', with)`: `with` before every character and at the end.
fn replace_empty(haystack: &str, with: &str) -> String {
    let mut out = String::with_capacity(haystack.len() + with.len() * (haystack.len() + 1));
    for ch in haystack.chars() {
        out.push_str(with);
        out.push(ch);
    }
    out.push_str(with);
    out
}

/// Python's `s.replace(needle, with)` returning a borrowed string when nothing matches.
pub fn replace<'t>(haystack: &'t str, needle: &str, with: &str) -> Cow<'t, str> {
    match replace_all(haystack, needle, with) {
        Some(s) => Cow::Owned(s),
        None => Cow::Borrowed(haystack),
    }
}

/// Opt-in injection-free substitution: one left-to-right scan of `template`; a `{name}` whose
/// name (without braces) is a key becomes its value, everything else is copied; inserted values
/// are never scanned again.
pub fn single_pass_format<'t>(template: &'t str, row: &Entries<'_>) -> Cow<'t, str> {
    let filled = scan_slots(template, row.values_len, |slot| {
        Ok(slot.and_then(|name| row.get(name)))
    });
    filled.unwrap_or(Cow::Borrowed(template))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(pairs: &[(&'a str, &'a str)]) -> Entries<'a> {
        let mut e = Entries::default();
        for (k, v) in pairs {
            e.push(k, v);
        }
        e
    }

    #[test]
    fn safe_format_value_with_later_key_chains() {
        assert_eq!(
            safe_format("{a}{b}", &row(&[("a", "{b}"), ("b", "B")])),
            "BB"
        );
        assert_eq!(
            safe_format("{a}{b}", &row(&[("b", "B"), ("a", "{b}")])),
            "{b}B"
        );
    }

    #[test]
    fn safe_format_value_joins_template_text_into_placeholder() {
        assert_eq!(safe_format("{a}{b}", &row(&[("a", "{"), ("b", "x")])), "{x");
        assert_eq!(safe_format("{x{a}}", &row(&[("a", "y"), ("xy", "Z")])), "Z");
    }

    #[test]
    fn safe_format_literal_braces_and_missing_keys_untouched() {
        let r = row(&[("a", "X")]);
        assert_eq!(
            safe_format("{{a}} {a} { a } {a!r} {a:>5} {0} {}", &r),
            "{X} X { a } {a!r} {a:>5} {0} {}"
        );
        assert_eq!(safe_format("{missing} {a}", &r), "{missing} X");
    }

    #[test]
    fn safe_format_key_with_brace_uses_sequential_path() {
        assert_eq!(safe_format("{x}}", &row(&[("x}", "K"), ("x", "V")])), "K");
        assert_eq!(safe_format("{x}}", &row(&[("x", "V"), ("x}", "K")])), "V}");
    }

    #[test]
    fn replace_empty_needle_matches_python() {
        assert_eq!(replace("ab", "", "X"), "XaXbX");
        assert_eq!(replace("", "", "X"), "X");
        assert_eq!(replace("é", "", "-"), "-é-");
    }

    #[test]
    fn single_pass_never_rescans_values() {
        let r = row(&[("a", "{b}"), ("b", "B")]);
        assert_eq!(single_pass_format("{a}{b}", &r), "{b}B");
        assert_eq!(single_pass_format("{x{a}}", &row(&[("a", "y")])), "{xy}");
    }
}
