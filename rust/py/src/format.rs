//! `safe_format` and friends.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::convert::{InputItems, RowStrings};
use crate::errors::unsupported;

/// `safe_format(template, entry)` with the reference's sequential semantics.
#[pyfunction]
pub(crate) fn safe_format(template: &str, entry: &Bound<'_, PyDict>) -> PyResult<String> {
    let row = RowStrings::from_dict(entry)?;
    let entries = row.entries();
    Ok(promptweave_core::safe_format(template, &entries).into_owned())
}

/// Opt-in single-scan substitution.
#[pyfunction]
pub(crate) fn single_pass_format(template: &str, entry: &Bound<'_, PyDict>) -> PyResult<String> {
    let row = RowStrings::from_dict(entry)?;
    let entries = row.entries();
    Ok(promptweave_core::single_pass_format(template, &entries).into_owned())
}

/// The no-meta-template newline join of a prompt list.
#[pyfunction]
pub(crate) fn join_plain(items: &Bound<'_, PyList>) -> PyResult<String> {
    let items = InputItems::from_list(items)?;
    Ok(promptweave_core::join_plain(&items.items()))
}

/// `json.dumps(text)` with its defaults (`ensure_ascii=True`): the quoted string, with `"` and
/// the backslash escaped, the short escapes of backspace, form feed, newline, carriage return and
/// tab, and every other character outside the printable ASCII range as a `u` escape of four
/// lowercase hex digits (a UTF-16 surrogate pair above U+FFFF).
fn push_json_str(out: &mut String, text: &str) {
    use std::fmt::Write as _;
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    // writing to a String cannot fail
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// `str(PromptList)`: the string items and the dict items' `prompt` values, concatenated (with
/// `json_prompts`, as AISBench does, each prompt as `json.dumps` writes it). Items of other
/// types (str or dict subclasses included), a `prompt` that is not an exact `str` and text
/// without a UTF-8 form go to the Python method, which raises the reference's errors.
#[pyfunction]
#[pyo3(signature = (items, json_prompts=false))]
pub(crate) fn concat_prompts<'py>(
    items: &Bound<'py, PyList>,
    json_prompts: bool,
) -> PyResult<Bound<'py, PyString>> {
    let py = items.py();
    let mut out = String::new();
    let utf8 = |_| unsupported("text that is not valid UTF-8");
    for item in items.iter() {
        if let Ok(s) = item.cast_exact::<PyString>() {
            out.push_str(s.to_str().map_err(utf8)?);
        } else if let Ok(d) = item.cast_exact::<PyDict>() {
            if let Some(prompt) = d.get_item(intern!(py, "prompt"))? {
                let prompt = prompt
                    .cast_exact::<PyString>()
                    .map_err(|_| unsupported("a prompt that is not a str"))?;
                let prompt = prompt.to_str().map_err(utf8)?;
                if json_prompts {
                    push_json_str(&mut out, prompt);
                } else {
                    out.push_str(prompt);
                }
            }
        } else {
            return Err(unsupported("an item that is neither a str nor a dict"));
        }
    }
    Ok(PyString::new(py, &out))
}
