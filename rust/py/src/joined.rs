//! Outputs assembled from Python string objects with `str.join`, where that is provably the
//! reference's result: the template's literal pieces (made once) and the row's own value
//! objects, so nothing is copied through UTF-8 and no Rust string is made per call.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use promptweave_core::format::{fast_condition, has_brace as brace_in};

/// The `str()` of a value as a Python string object (the value itself when it is a `str`).
pub(crate) fn cell_str<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
    if value.is_exact_instance_of::<PyString>() {
        Ok(value.cast::<PyString>()?.clone())
    } else {
        value.str()
    }
}

/// Whether a string contains `{` or `}` (through its UTF-8 form, which CPython keeps for ASCII
/// strings at no cost; a lone surrogate, which has none, is asked to Python).
pub(crate) fn has_brace(v: &Bound<'_, PyString>) -> PyResult<bool> {
    match v.to_str() {
        Ok(s) => Ok(brace_in(s)),
        Err(_) => Ok(v.contains("{")? || v.contains("}")?),
    }
}

/// One piece of a string template.
enum Piece {
    Lit(Py<PyString>),
    /// a `{name}` slot: the name (as a Python and a Rust string), and the literal `{name}`
    /// kept when the row lacks the key
    Slot(Py<PyString>, String, Py<PyString>),
}

/// A string template split at its slots, for `generate_item` without in-context examples.
///
/// Valid because the template passes the one-scan condition: each `{name}` is an independent
/// slot, filled with the row's value when the key exists and no key or used value contains a
/// brace (checked per call; otherwise the caller renders in full).
pub(crate) struct JoinedTemplate {
    pieces: Vec<Piece>,
    /// `''.join`, looked up once
    join: Py<PyAny>,
    /// key objects already seen to be exact `str` without a brace (held, so that an identity
    /// check stands for the scan on the next rows, whose keys are usually the same objects)
    clean_keys: std::sync::Mutex<Vec<Py<PyString>>>,
}

/// At most this many key objects are remembered.
const CLEAN_KEYS: usize = 64;

impl JoinedTemplate {
    /// `None` when the template does not pass the one-scan condition.
    pub(crate) fn new(py: Python<'_>, template: &str) -> Option<Self> {
        if !fast_condition(template) {
            return None;
        }
        let join = PyString::new(py, "").getattr("join").ok()?.unbind();
        let mut pieces = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}').map(|c| open + c) else {
                break;
            };
            if open > 0 {
                pieces.push(Piece::Lit(PyString::new(py, &rest[..open]).unbind()));
            }
            let name = &rest[open + 1..close];
            // interned, as the keys of rows built by Python code usually are: the row lookup
            // then finds its key by identity
            pieces.push(Piece::Slot(
                PyString::intern(py, name).unbind(),
                name.to_owned(),
                PyString::new(py, &rest[open..=close]).unbind(),
            ));
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Lit(PyString::new(py, rest).unbind()));
        }
        Some(Self {
            pieces,
            join,
            clean_keys: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The generation prompt of `entry` with `output_field` masked; `None` when the one-scan
    /// condition fails for this row (a key or a used value with a brace, a non-str key).
    pub(crate) fn render<'py>(
        &self,
        entry: &Bound<'py, PyDict>,
        output_field: Option<&Bound<'py, PyAny>>,
        replace_token: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = entry.py();
        {
            // no other thread can hold the lock: the interpreter lock is held throughout
            let mut clean = self
                .clean_keys
                .lock()
                .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("poisoned key cache"))?;
            for (key, _) in entry.iter() {
                if clean.iter().any(|k| k.as_ptr() == key.as_ptr()) {
                    continue;
                }
                let Ok(key) = key.cast_into_exact::<PyString>() else {
                    return Ok(None);
                };
                if has_brace(&key)? {
                    return Ok(None);
                }
                if clean.len() < CLEAN_KEYS {
                    clean.push(key.unbind());
                }
            }
        }
        let mask = match output_field {
            None => None,
            Some(field) => {
                let Ok(field) = field.cast::<PyString>() else {
                    return Ok(None);
                };
                let Ok(name) = field.to_str() else {
                    return Ok(None);
                };
                if !field.is_exact_instance_of::<PyString>() || brace_in(name) {
                    return Ok(None);
                }
                Some((name, cell_str(replace_token)?))
            }
        };
        let mut parts: Vec<Bound<'py, PyString>> = Vec::with_capacity(self.pieces.len());
        for piece in &self.pieces {
            match piece {
                Piece::Lit(s) => parts.push(s.bind(py).clone()),
                Piece::Slot(name, text, literal) => {
                    let value = match &mask {
                        Some((field, token)) if *field == text.as_str() => Some(token.clone()),
                        _ => match entry.get_item(name.bind(py))? {
                            Some(v) => Some(cell_str(&v)?),
                            None => None,
                        },
                    };
                    match value {
                        Some(v) if has_brace(&v)? => return Ok(None),
                        Some(v) => parts.push(v),
                        None => parts.push(literal.bind(py).clone()),
                    }
                }
            }
        }
        Ok(Some(self.join.bind(py).call1((PyTuple::new(py, parts)?,))?))
    }
}
