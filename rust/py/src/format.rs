//! `safe_format` and friends.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::convert::{InputItems, RowStrings, is_plain_value};
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
                    promptweave_core::chat::write_json_str(&mut out, prompt, true);
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

/// `PromptList.format(**entry)`: string items and dict items' `prompt` substituted with the
/// reference's sequential semantics, dict items copied, as a list of the new items. Only the
/// plain case is taken here: entry values whose `str()` is pure (so that reading them all up
/// front changes nothing), items that are exact `str`s or exact `dict`s of `str` keys and
/// immutable values (a copy is then the reference's deep copy) with a `str` prompt; anything
/// else goes to the Python method.
#[pyfunction]
pub(crate) fn format_prompt_list<'py>(
    items: &Bound<'py, PyList>,
    entry: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyList>> {
    let py = items.py();
    // each item is formatted with the whole entry: values read once only where that is the
    // same as the reference's str() per item
    let row = RowStrings::for_items(entry, None)?;
    let entries = row.entries();
    let fill = |text: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyString>> {
        if entries.is_empty() {
            return Ok(text.clone());
        }
        let source = text
            .to_str()
            .map_err(|_| unsupported("text that is not valid UTF-8"))?;
        Ok(match promptweave_core::safe_format(source, &entries) {
            std::borrow::Cow::Borrowed(_) => text.clone(),
            std::borrow::Cow::Owned(s) => PyString::new(py, &s),
        })
    };
    let key = intern!(py, "prompt");
    let out = PyList::empty(py);
    for item in items.iter() {
        if let Ok(text) = item.cast_exact::<PyString>() {
            out.append(fill(text)?)?;
        } else if let Ok(d) = item.cast_exact::<PyDict>() {
            // str keys and plain values: a copy is the reference's deep copy
            let mut prompt = None;
            for (k, v) in d.iter() {
                if !k.is_exact_instance_of::<PyString>() || !is_plain_value(&v) {
                    return Err(unsupported(
                        "a dict item with a key or value of another type",
                    ));
                }
                if k.is(key) || k.cast::<PyString>()?.to_str().is_ok_and(|k| k == "prompt") {
                    let text = v
                        .cast_into_exact::<PyString>()
                        .map_err(|_| unsupported("a prompt that is not a str"))?;
                    prompt = Some(fill(&text)?);
                }
            }
            let copy = d.copy()?;
            if let Some(prompt) = prompt {
                copy.set_item(key, prompt)?;
            }
            out.append(copy)?;
        } else {
            return Err(unsupported("an item that is neither a str nor a dict"));
        }
    }
    Ok(out)
}
