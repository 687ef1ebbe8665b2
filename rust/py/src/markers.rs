//! The `<AIS_*>` content-tag parser.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use promptweave_core::markers::{self, Modality};

use crate::errors::{marker_error, unsupported};

/// `parse_content(content, strict=False)`: `[(kind, payload), ...]` in content order, `kind`
/// being the `prompt_mm` key (`'text'`, `'image'`, `'video'`, `'audio'`).
#[pyfunction]
#[pyo3(signature = (content, strict = false))]
pub(crate) fn parse_content<'py>(
    content: &Bound<'py, PyString>,
    strict: bool,
) -> PyResult<Bound<'py, PyList>> {
    let py = content.py();
    // a lone surrogate cannot become `&str`: the Python path parses it
    let text = content
        .to_str()
        .map_err(|_| unsupported("content that is not valid UTF-8"))?;
    let parts = if strict {
        markers::parse_content_strict(text).map_err(|e| marker_error(&e))?
    } else {
        markers::parse_content(text)
    };
    let list = PyList::empty(py);
    for part in parts {
        let kind = match part.modality {
            Modality::Text => intern!(py, "text"),
            Modality::Image => intern!(py, "image"),
            Modality::Video => intern!(py, "video"),
            Modality::Audio => intern!(py, "audio"),
        };
        let payload = PyString::new(py, &part.payload);
        list.append(PyTuple::new(py, [kind.as_any(), payload.as_any()])?)?;
    }
    Ok(list)
}
