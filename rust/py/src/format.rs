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

/// `str(PromptList)` (OpenCompass): the string items and the dict items' `prompt` values,
/// concatenated. Items of other types (str or dict subclasses included), a `prompt` that is not
/// an exact `str` and text without a UTF-8 form go to the Python method, which raises the
/// reference's errors.
#[pyfunction]
pub(crate) fn concat_prompts<'py>(items: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyString>> {
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
                out.push_str(prompt.to_str().map_err(utf8)?);
            }
        } else {
            return Err(unsupported("an item that is neither a str nor a dict"));
        }
    }
    Ok(PyString::new(py, &out))
}
