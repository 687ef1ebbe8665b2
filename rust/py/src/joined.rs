//! Outputs assembled from Python string objects with `str.join`, where that is provably the
//! reference's result: the template's literal pieces (made once) and the row's own value
//! objects, so nothing is copied through UTF-8 and no Rust string is made per call.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

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
    Lit(String),
    /// a `{name}` slot: the name (as a Python and a Rust string), kept as the literal `{name}`
    /// when the row lacks the key
    Slot(Py<PyString>, String),
}

/// A string template split at its slots, for `generate_item` without in-context examples.
///
/// Valid because the template passes the one-scan condition: each `{name}` is an independent
/// slot, filled with the row's value when the key exists and no key or used value contains a
/// brace (checked per call; otherwise the caller renders in full).
pub(crate) struct JoinedTemplate {
    pieces: Vec<Piece>,
    /// the template's own text (the output is at least this long)
    literal_len: usize,
    scratch: std::sync::Mutex<Scratch>,
}

/// What calls reuse: key objects already seen to be exact `str` without a brace (held, so that
/// an identity check stands for the scan on the next rows, whose keys are usually the same
/// objects), and the output buffer.
#[derive(Default)]
struct Scratch {
    clean_keys: Vec<Py<PyString>>,
    buf: String,
}

/// At most this many key objects are remembered.
const CLEAN_KEYS: usize = 64;

impl JoinedTemplate {
    /// `None` when the template does not pass the one-scan condition.
    pub(crate) fn new(py: Python<'_>, template: &str) -> Option<Self> {
        if !fast_condition(template) {
            return None;
        }
        let mut pieces = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}').map(|c| open + c) else {
                break;
            };
            if open > 0 {
                pieces.push(Piece::Lit(rest[..open].to_owned()));
            }
            let name = &rest[open + 1..close];
            // interned, as the keys of rows built by Python code usually are: the row lookup
            // then finds its key by identity
            pieces.push(Piece::Slot(
                PyString::intern(py, name).unbind(),
                name.to_owned(),
            ));
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Lit(rest.to_owned()));
        }
        Some(Self {
            pieces,
            literal_len: template.len(),
            scratch: std::sync::Mutex::new(Scratch::default()),
        })
    }

    fn scratch(&self) -> PyResult<std::sync::MutexGuard<'_, Scratch>> {
        self.scratch
            .lock()
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("poisoned template cache"))
    }

    /// The generation prompt of `entry` with `output_field` masked; `None` when the one-scan
    /// condition fails for this row (a key or a used value with a brace, a non-str key) or a
    /// used value has no UTF-8 form (a lone surrogate).
    pub(crate) fn render<'py>(
        &self,
        entry: &Bound<'py, PyDict>,
        output_field: Option<&Bound<'py, PyAny>>,
        replace_token: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = entry.py();
        let mut buf = {
            // released before any Python code runs (a value's `__str__` may render with
            // this template again)
            let mut scratch = self.scratch()?;
            for (key, _) in entry.iter() {
                if scratch
                    .clean_keys
                    .iter()
                    .any(|k| k.as_ptr() == key.as_ptr())
                {
                    continue;
                }
                let Ok(key) = key.cast_into_exact::<PyString>() else {
                    return Ok(None);
                };
                if has_brace(&key)? {
                    return Ok(None);
                }
                if scratch.clean_keys.len() < CLEAN_KEYS {
                    scratch.clean_keys.push(key.unbind());
                }
            }
            std::mem::take(&mut scratch.buf)
        };
        buf.clear();
        let filled = self.fill(entry, output_field, replace_token, &mut buf)?;
        let out = filled.then(|| PyString::new(py, &buf).into_any());
        if buf.capacity() <= 1 << 16 {
            self.scratch()?.buf = buf;
        }
        Ok(out)
    }

    /// Writes the prompt into `buf`; `false` when the row must be rendered in full.
    fn fill<'py>(
        &self,
        entry: &Bound<'py, PyDict>,
        output_field: Option<&Bound<'py, PyAny>>,
        replace_token: &Bound<'py, PyAny>,
        buf: &mut String,
    ) -> PyResult<bool> {
        let py = entry.py();
        let mask = match output_field {
            None => None,
            Some(field) => {
                let Ok(field) = field.cast_exact::<PyString>() else {
                    return Ok(false);
                };
                let Ok(name) = field.to_str() else {
                    return Ok(false);
                };
                if brace_in(name) {
                    return Ok(false);
                }
                Some((name, cell_str(replace_token)?))
            }
        };
        buf.reserve(self.literal_len + 64);
        for piece in &self.pieces {
            match piece {
                Piece::Lit(s) => buf.push_str(s),
                Piece::Slot(name, text) => {
                    let value = match &mask {
                        Some((field, token)) if *field == text.as_str() => Some(token.clone()),
                        _ => match entry.get_item(name.bind(py))? {
                            Some(v) => Some(cell_str(&v)?),
                            None => None,
                        },
                    };
                    let Some(v) = value else {
                        buf.push('{');
                        buf.push_str(text);
                        buf.push('}');
                        continue;
                    };
                    match v.to_str() {
                        Ok(t) if !brace_in(t) => buf.push_str(t),
                        _ => return Ok(false),
                    }
                }
            }
        }
        Ok(true)
    }
}
