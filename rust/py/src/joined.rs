//! String templates without in-context examples, filled in one scan where that is provably the
//! reference's result (no key and no used value with a brace): a row is read in one pass over
//! its items and the prompt written into a reused buffer. Also the `str()` and brace helpers
//! the dataset job's `str.join` assembly uses.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString};

use crate::convert::{RESERVED_COLUMNS, str_is_pure};

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

/// The text of a name (a key, the output column) that passes the one-scan condition: no
/// brace, and a UTF-8 form (not a lone surrogate).
fn brace_free<'a>(name: &'a Bound<'_, PyString>) -> Option<&'a str> {
    name.to_str().ok().filter(|t| !brace_in(t))
}

/// One piece of a string template.
enum Piece {
    Lit(String),
    /// a `{name}` slot: the index of its name in [`JoinedTemplate::names`]
    Slot(usize),
}

/// A string template split at its slots, for `generate_item` without in-context examples.
///
/// Valid because the template passes the one-scan condition: each `{name}` is an independent
/// slot, filled with the row's value when the key exists and no key or used value contains a
/// brace (checked per call; otherwise the caller renders in full).
pub(crate) struct JoinedTemplate {
    pieces: Vec<Piece>,
    /// the slot names, each once
    names: Vec<String>,
    /// the slot names as (interned) Python strings, made at the first render
    name_objects: PyOnceLock<Vec<Py<PyString>>>,
    /// the template's own text (the output is at least this long)
    literal_len: usize,
    /// whether the template's text outside its slots has a brace (a stray `}`)
    literal_brace: bool,
    /// key objects seen before, each with the slot it fills (`None`: none): all exact `str`
    /// without a brace. They are held, so that an address seen again is the same object, and
    /// a row is read in one pass over its items, without a lookup per slot.
    keys: std::sync::Mutex<Vec<(Py<PyString>, Option<usize>)>>,
}

/// At most this many key objects are remembered.
const KNOWN_KEYS: usize = 64;

/// Templates with at most this many distinct slots keep a row's values on the stack.
const STACK_SLOTS: usize = 16;

thread_local! {
    /// The output buffer, reused from call to call (a call made while it is in use, from a
    /// value's `__str__`, uses a buffer of its own).
    static BUFFER: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

impl JoinedTemplate {
    /// `None` when the template does not pass the one-scan condition.
    pub(crate) fn new(template: &str) -> Option<Self> {
        if !fast_condition(template) {
            return None;
        }
        let mut pieces = Vec::new();
        let mut names: Vec<String> = Vec::new();
        let mut literal_brace = false;
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}').map(|c| open + c) else {
                break;
            };
            if open > 0 {
                literal_brace |= brace_in(&rest[..open]);
                pieces.push(Piece::Lit(rest[..open].to_owned()));
            }
            let name = &rest[open + 1..close];
            let slot = names.iter().position(|n| n == name).unwrap_or_else(|| {
                names.push(name.to_owned());
                names.len() - 1
            });
            pieces.push(Piece::Slot(slot));
            rest = &rest[close + 1..];
        }
        if names.iter().any(|n| RESERVED_COLUMNS.contains(&n.as_str())) {
            return None; // such a column is a row the full renderer sends to Python
        }
        if !rest.is_empty() {
            literal_brace |= brace_in(rest);
            pieces.push(Piece::Lit(rest.to_owned()));
        }
        Some(Self {
            pieces,
            names,
            name_objects: PyOnceLock::new(),
            literal_len: template.len(),
            literal_brace,
            keys: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The slot names, each once.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The prompt of `entry`, with `mask`'s output column (`(column, replace token)`) masked,
    /// and whether the row has a column for every slot; `None` when the one-scan condition
    /// fails for this row (a key or a used value with a brace, a key that is not an exact
    /// `str`) or a key or used value has no UTF-8 form (a lone surrogate).
    pub(crate) fn render<'py>(
        &self,
        entry: &Bound<'py, PyDict>,
        mask: Option<(&Bound<'py, PyAny>, &Bound<'py, PyAny>)>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, bool)>> {
        let py = entry.py();
        // the masked slot (if the template has one) and its token
        let mask = match mask {
            None => None,
            Some((field, replace_token)) => {
                let Ok(field) = field.cast_exact::<PyString>() else {
                    return Ok(None);
                };
                // the column name as one of the slot names' interned objects (as a name
                // written in Python code is), else by its text
                let slot =
                    if let Some(slot) = self.name_objects(py).iter().position(|n| field.is(n)) {
                        Some(slot)
                    } else {
                        let Some(name) = brace_free(field) else {
                            return Ok(None);
                        };
                        self.names.iter().position(|n| n == name)
                    };
                Some((slot, cell_str(replace_token)?, field))
            }
        };
        // the row's value for each slot: on the stack for the usual few slots (a vector made
        // per call cost about 25 ns of W1's 370 ns)
        let mut stack: [Option<Bound<'py, PyAny>>; STACK_SLOTS] = std::array::from_fn(|_| None);
        let mut heap: Vec<Option<Bound<'py, PyAny>>> = Vec::new();
        let values: &mut [Option<Bound<'py, PyAny>>] = if self.names.len() <= STACK_SLOTS {
            &mut stack[..self.names.len()]
        } else {
            heap.resize(self.names.len(), None);
            &mut heap
        };
        // a row with no more columns than the template has slots (and the masked column) is
        // read by looking its slots up; that proves the condition when every column was found
        // among them (then no other key, with a brace or of another type, is in the row)
        let extra = mask.as_ref().filter(|(slot, _, _)| slot.is_none());
        let lookup = entry.len() <= self.names.len() + usize::from(extra.is_some())
            && self.read_by_lookup(entry, extra.map(|(_, _, field)| *field), values)?;
        if !lookup && !self.read_by_iteration(entry, values)? {
            return Ok(None);
        }
        let mask = mask.map(|(slot, token, _)| (slot, token));
        // the masked slot's token (a mask naming no slot changes nothing)
        let token = mask.and_then(|(slot, t)| slot.map(|s| (s, t)));
        let complete = values.iter().all(Option::is_some);
        let out = BUFFER.with(|buffer| match buffer.try_borrow_mut() {
            Ok(mut buf) => {
                buf.clear();
                let out = self.fill(py, values, token.as_ref(), &mut buf)?;
                if buf.capacity() > 1 << 16 {
                    *buf = String::new();
                }
                Ok(out)
            }
            Err(_) => self.fill(py, values, token.as_ref(), &mut String::new()),
        })?;
        Ok(out.map(|out| (out, complete)))
    }

    /// The slot names as interned Python strings.
    fn name_objects(&self, py: Python<'_>) -> &[Py<PyString>] {
        self.name_objects.get_or_init(py, || {
            self.names
                .iter()
                .map(|n| PyString::intern(py, n).unbind())
                .collect()
        })
    }

    /// Looks each slot up in `entry` (and `extra`, the masked column when it names no slot);
    /// `true` when every key of the row was found that way.
    fn read_by_lookup<'py>(
        &self,
        entry: &Bound<'py, PyDict>,
        extra: Option<&Bound<'py, PyString>>,
        values: &mut [Option<Bound<'py, PyAny>>],
    ) -> PyResult<bool> {
        let py = entry.py();
        let names = self.name_objects(py);
        let mut found = 0;
        for (name, value) in names.iter().zip(values.iter_mut()) {
            *value = entry.get_item(name.bind(py))?;
            found += usize::from(value.is_some());
        }
        if let Some(field) = extra {
            match entry.get_item(field)? {
                // the reference's deep copy of the row may refuse it: the full path decides
                Some(v) if !str_is_pure(&v) => {
                    values.fill(None);
                    return Ok(false);
                }
                Some(_) => found += 1,
                None => {}
            }
        }
        if found == entry.len() {
            return Ok(true);
        }
        values.fill(None);
        Ok(false)
    }

    /// Reads the row in one pass over its items; `false` when a key fails the one-scan
    /// condition (not an exact `str`, a brace, no UTF-8 form).
    fn read_by_iteration<'py>(
        &self,
        entry: &Bound<'py, PyDict>,
        values: &mut [Option<Bound<'py, PyAny>>],
    ) -> PyResult<bool> {
        // no Python code runs while the lock is held
        let mut keys = self
            .keys
            .lock()
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("poisoned key cache"))?;
        for (key, value) in entry.iter() {
            let slot =
                if let Some(&(_, slot)) = keys.iter().find(|(k, _)| k.as_ptr() == key.as_ptr()) {
                    slot
                } else {
                    let Ok(key) = key.cast_into_exact::<PyString>() else {
                        return Ok(false);
                    };
                    let Some(text) = brace_free(&key) else {
                        return Ok(false);
                    };
                    if RESERVED_COLUMNS.contains(&text) {
                        return Ok(false);
                    }
                    let slot = self.names.iter().position(|n| n == text);
                    if keys.len() < KNOWN_KEYS {
                        keys.push((key.unbind(), slot));
                    }
                    slot
                };
            match slot.and_then(|s| values.get_mut(s)) {
                Some(v) => *v = Some(value),
                // the reference `str()`s every value of the row, used or not: one whose `str()`
                // could fail or run code is left to the full renderer, which does the same
                None if !str_is_pure(&value) => return Ok(false),
                None => {}
            }
        }
        Ok(true)
    }

    /// The prompt, written into `buf` first; `None` when the row must be rendered in full.
    fn fill<'py>(
        &self,
        py: Python<'py>,
        values: &[Option<Bound<'py, PyAny>>],
        token: Option<&(usize, Bound<'py, PyString>)>,
        buf: &mut String,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        buf.reserve(self.literal_len + 64);
        // without a brace in the template's text or a slot left as it is, the output has a
        // brace exactly when a value has one: one scan of it replaces one scan per value
        let each = self.literal_brace
            || values
                .iter()
                .enumerate()
                .any(|(i, v)| v.is_none() && token.is_none_or(|(masked, _)| *masked != i));
        for piece in &self.pieces {
            let slot = match piece {
                Piece::Lit(s) => {
                    buf.push_str(s);
                    continue;
                }
                Piece::Slot(slot) => *slot,
            };
            // an exact `str` is read where it is (no new reference); anything else is `str()`ed
            let made;
            let value = match (token, values.get(slot).and_then(Option::as_ref)) {
                // the reference deep-copies the row before it masks the column: a value that
                // copy may refuse (or run code for) is left to the full path
                (Some((masked, _)), Some(v)) if *masked == slot && !str_is_pure(v) => {
                    return Ok(None);
                }
                (Some((masked, t)), _) if *masked == slot => t,
                (_, Some(v)) => {
                    if let Ok(v) = v.cast_exact::<PyString>() {
                        v
                    } else if str_is_pure(v) {
                        made = v.str()?;
                        &made
                    } else {
                        // the reference `str()`s a deep copy of it when masking: the full path
                        return Ok(None);
                    }
                }
                (_, None) => {
                    buf.push('{');
                    buf.push_str(self.names.get(slot).map_or("", String::as_str));
                    buf.push('}');
                    continue;
                }
            };
            match value.to_str() {
                Ok(t) if !(each && brace_in(t)) => buf.push_str(t),
                _ => return Ok(None),
            }
        }
        if !each && brace_in(buf) {
            return Ok(None);
        }
        Ok(Some(PyString::new(py, buf).into_any()))
    }
}
