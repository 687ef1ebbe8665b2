//! `safe_format` and friends.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::convert::{InputItems, RowStrings};

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
