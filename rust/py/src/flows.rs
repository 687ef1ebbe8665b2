//! Batch rendering of AISBench `MMPromptTemplate` rows for API parsers.
//!
//! `DatasetRenderer` computes once, in Python, what the parser makes of the template (the
//! message dicts around one empty part list, the "skeleton"); per row this module parses the
//! tagged `content` string, fills a copy of the part template of each segment (`format_mm`'s
//! `safe_format` of one key, i.e. `str.replace`) and copies the skeleton's messages around the
//! row's part list. Anything out of the ordinary raises `FallbackRequired`: the mirrored
//! classes then render every row (and raise what the reference raises).

use pyo3::prelude::*;
use pyo3::types::{PyAnyMethods, PyDict, PyList, PyString, PyTuple};

use promptweave_core::markers::{self, Modality};

use crate::convert::{RowStrings, empty_list};
use crate::errors::{marker_error, unsupported};
use crate::joined::JoinedTemplate;

/// How the part of one modality is built from its `prompt_mm` template.
struct PartSpec<'py> {
    /// the part template (copied per part)
    part: Bound<'py, PyDict>,
    /// the key whose value is filled (`text`, `image_url`, ...)
    field: Bound<'py, PyString>,
    /// `{field: {'url': ...}}`: the nested dict (copied per part), whose `url` is filled
    nested: Option<Bound<'py, PyDict>>,
    /// the string the payload is substituted into, split at its placeholder (`{question}`,
    /// `{image}`, ...): the filled string is these pieces joined by the payload, which is what
    /// replacing every occurrence of the placeholder gives
    pieces: Vec<String>,
}

fn modality_index(m: Modality) -> usize {
    match m {
        Modality::Text => 0,
        Modality::Image => 1,
        Modality::Video => 2,
        Modality::Audio => 3,
    }
}

fn part_specs<'py>(kinds: &Bound<'py, PyDict>) -> PyResult<[Option<PartSpec<'py>>; 4]> {
    let mut specs: [Option<PartSpec<'py>>; 4] = [None, None, None, None];
    for (kind, spec) in kinds.iter() {
        let kind = kind.cast::<PyString>()?.to_str()?.to_owned();
        let modality = Modality::from_key(&kind).ok_or_else(|| unsupported("unknown part kind"))?;
        let spec = spec.cast::<PyTuple>()?;
        let part = spec.get_item(0)?.cast::<PyDict>()?.clone();
        let field = spec.get_item(1)?.cast::<PyString>()?.clone();
        let nested_flag: bool = spec.get_item(2)?.extract()?;
        let placeholder = spec.get_item(3)?.cast::<PyString>()?.to_str()?.to_owned();
        let value = part
            .get_item(&field)?
            .ok_or_else(|| unsupported("part template without its field"))?;
        let (nested, template) = if nested_flag {
            let inner = value.cast::<PyDict>()?.clone();
            let url = inner
                .get_item("url")?
                .ok_or_else(|| unsupported("part template without url"))?;
            let url = url.cast::<PyString>()?.to_str()?.to_owned();
            (Some(inner), url)
        } else {
            (None, value.cast::<PyString>()?.to_str()?.to_owned())
        };
        specs[modality_index(modality)] = Some(PartSpec {
            part,
            field,
            nested,
            pieces: template
                .split(placeholder.as_str())
                .map(str::to_owned)
                .collect(),
        });
    }
    Ok(specs)
}

/// `render_mm_rows(rows, content_field, strict, kinds, skeleton, wrap)`: per row, the model
/// input: the skeleton's messages (`[(message, hole key or None), ...]`) copied, the hole
/// holding the row's part list; a `wrap(list)` (the `PromptList` class) when given.
#[pyfunction]
#[pyo3(signature = (rows, content_field, strict, kinds, skeleton, wrap = None))]
pub(crate) fn render_mm_rows<'py>(
    rows: &Bound<'py, PyList>,
    content_field: &Bound<'py, PyString>,
    strict: bool,
    kinds: &Bound<'py, PyDict>,
    skeleton: &Bound<'py, PyList>,
    wrap: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let py = rows.py();
    let specs = part_specs(kinds)?;
    let mut messages: Vec<(Bound<'py, PyDict>, Option<Bound<'py, PyString>>)> = Vec::new();
    for item in skeleton.iter() {
        let item = item.cast::<PyTuple>()?;
        let msg = item.get_item(0)?.cast::<PyDict>()?.clone();
        let key = item.get_item(1)?;
        let key = if key.is_none() {
            None
        } else {
            Some(key.cast::<PyString>()?.clone())
        };
        messages.push((msg, key));
    }
    let out = PyList::empty(py);
    // per part position, the last payload and its filled string: a segment repeated on every
    // row (a fixed instruction) is one str object (str objects are immutable: sharing one is
    // invisible, and it spares an allocation per row)
    let mut last: Vec<Option<(Modality, String, Bound<'py, PyString>)>> = Vec::new();
    let mut filled = String::new();
    for row in rows.iter() {
        let row = row
            .cast_exact::<PyDict>()
            .map_err(|_| unsupported("a row that is not a dict"))?;
        // `format_mm(**entry)`: every key must be a str
        for (key, _) in row.iter() {
            if !key.is_exact_instance_of::<PyString>() {
                return Err(unsupported("row key that is not a str"));
            }
        }
        let content = row
            .get_item(content_field)?
            .ok_or_else(|| unsupported("a row without the content field"))?;
        let content = content
            .cast_exact::<PyString>()
            .map_err(|_| unsupported("content that is not a str"))?;
        let text = content
            .to_str()
            .map_err(|_| unsupported("content that is not valid UTF-8"))?;
        let parsed = if strict {
            markers::parse_content_strict(text).map_err(|e| marker_error(&e))?
        } else {
            markers::parse_content(text)
        };
        let parts = PyList::empty(py);
        for (at, part) in parsed.iter().enumerate() {
            let spec = specs[modality_index(part.modality)]
                .as_ref()
                .ok_or_else(|| unsupported("a segment kind without a part template"))?;
            if last.len() <= at {
                last.resize(at + 1, None);
            }
            let filled = match &mut last[at] {
                Some((m, payload, s)) if *m == part.modality && *payload == part.payload => {
                    s.clone()
                }
                slot => {
                    filled.clear();
                    for (i, piece) in spec.pieces.iter().enumerate() {
                        if i > 0 {
                            filled.push_str(&part.payload);
                        }
                        filled.push_str(piece);
                    }
                    let s = PyString::new(py, &filled);
                    // the remembered payload's buffer is reused
                    let mut payload = slot.take().map(|(_, p, _)| p).unwrap_or_default();
                    payload.clear();
                    payload.push_str(&part.payload);
                    *slot = Some((part.modality, payload, s.clone()));
                    s
                }
            };
            let d = spec.part.copy()?;
            match &spec.nested {
                Some(inner) => {
                    let inner = inner.copy()?;
                    inner.set_item(pyo3::intern!(py, "url"), filled)?;
                    d.set_item(&spec.field, inner)?;
                }
                None => d.set_item(&spec.field, filled)?,
            }
            parts.append(d)?;
        }
        let msgs = empty_list(py, wrap)?;
        for (msg, key) in &messages {
            let m = msg.copy()?;
            if let Some(key) = key {
                m.set_item(key, &parts)?;
            }
            msgs.append(m)?;
        }
        out.append(msgs)?;
    }
    Ok(out)
}

/// The messages of rows sharing one list of in-context examples: the dicts to copy, and
/// `(position, content)` where a content is formatted with the row.
struct RawShape<'py> {
    flat: Vec<Bound<'py, PyDict>>,
    slots: Vec<(usize, Bound<'py, PyString>)>,
    /// the one content to format, split at its slots, when it passes the one-scan condition
    /// and its slots include every required column (most templates: one user message):
    /// filled by reading the row once, without copying its strings
    joined: Option<JoinedTemplate>,
}

impl<'py> RawShape<'py> {
    fn from_py(shape: &Bound<'py, PyAny>, required: &[String]) -> PyResult<Self> {
        let shape = shape.cast::<PyTuple>()?;
        let flat = shape
            .get_item(0)?
            .cast::<PyList>()?
            .iter()
            .map(|d| Ok(d.cast_into::<PyDict>()?))
            .collect::<PyResult<Vec<_>>>()?;
        let slots = shape
            .get_item(1)?
            .cast::<PyList>()?
            .iter()
            .map(|slot| {
                let slot = slot.cast::<PyTuple>()?;
                let pos: usize = slot.get_item(0)?.extract()?;
                let content = slot.get_item(1)?.cast_into::<PyString>()?;
                if pos >= flat.len() {
                    return Err(unsupported("a slot past the messages"));
                }
                Ok((pos, content))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let joined = match slots.as_slice() {
            [(_, content)] => content
                .to_str()
                .ok()
                .and_then(JoinedTemplate::new)
                .filter(|j| required.iter().all(|name| j.names().contains(name))),
            _ => None,
        };
        Ok(Self {
            flat,
            slots,
            joined,
        })
    }
}

/// `render_raw_rows(rows, indices, shape_of, required)`: the model input of each row of an
/// OpenCompass `RawPromptTemplate` for an API parser: the messages of `shape_of(indices[i])`
/// (called once per distinct list object; `(flat, slots)`, or `None` to give up) copied, the
/// slot contents formatted with the row (`safe_format`); and whether every row was seen to
/// have every column named in `required` (checked on the way while a row is read: `false`
/// when not known, and the caller checks). `None` when a row is not of the plain form (the
/// mirrored classes then render every row).
#[pyfunction]
#[pyo3(signature = (rows, indices, shape_of, required = None))]
pub(crate) fn render_raw_rows<'py>(
    rows: &Bound<'py, PyList>,
    indices: &Bound<'py, PyList>,
    shape_of: &Bound<'py, PyAny>,
    required: Option<Vec<String>>,
) -> PyResult<Option<(Bound<'py, PyList>, bool)>> {
    let py = rows.py();
    let required = required.unwrap_or_default();
    if rows.len() != indices.len() {
        return Err(unsupported("one index list per row"));
    }
    let input_str = pyo3::intern!(py, "input_str");
    let content_key = pyo3::intern!(py, "content");
    // shapes by index-list object (held, so that an address seen again is the same object)
    let mut shapes: Vec<(Bound<'py, PyAny>, RawShape<'py>)> = Vec::new();
    let mut by_object: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    let out = PyList::empty(py);
    let mut copies: Vec<Bound<'py, PyDict>> = Vec::new();
    let mut complete = true;
    for (row, idx) in rows.iter().zip(indices.iter()) {
        let at = if let Some(&at) = by_object.get(&(idx.as_ptr() as usize)) {
            at
        } else {
            let shape = shape_of.call1((&idx,))?;
            if shape.is_none() {
                return Ok(None);
            }
            let at = shapes.len();
            by_object.insert(idx.as_ptr() as usize, at);
            shapes.push((idx, RawShape::from_py(&shape, &required)?));
            at
        };
        let shape = &shapes[at].1;
        // the copies made first, then the list at its size (appending grew it three times)
        copies.clear();
        for d in &shape.flat {
            copies.push(d.copy()?);
        }
        let messages = PyList::new(py, &copies)?;
        let mut checked = false;
        if !shape.slots.is_empty() {
            let Ok(row) = row.cast_exact::<PyDict>() else {
                return Ok(None);
            };
            if row.contains(input_str)? {
                return Ok(None);
            }
            // one content, split once: the row's values written into it, the required columns
            // checked among its slots
            let filled = match (&shape.joined, shape.slots.first()) {
                (Some(j), Some((pos, _))) if !row.is_empty() => {
                    j.render(row, None)?.map(|f| (*pos, f))
                }
                _ => None,
            };
            if let Some((pos, (text, has_all))) = filled {
                // every slot found: every required column is there (they are among the slots)
                complete = complete && has_all;
                checked = true;
                let msg = messages.get_item(pos)?;
                msg.cast::<PyDict>()?.set_item(content_key, text)?;
            } else if !row.is_empty() {
                let strings = RowStrings::from_dict(row)?;
                complete = complete && required.iter().all(|name| strings.has_key(name));
                checked = true;
                let entries = strings.entries();
                for (pos, content) in &shape.slots {
                    let text = content
                        .to_str()
                        .map_err(|_| unsupported("content that is not valid UTF-8"))?;
                    let msg = messages.get_item(*pos)?;
                    let msg = msg.cast::<PyDict>()?;
                    // unchanged text: the copy already holds the template's string object
                    if let std::borrow::Cow::Owned(s) =
                        promptweave_core::safe_format(text, &entries)
                    {
                        msg.set_item(content_key, s)?;
                    }
                }
            }
        }
        // a row not read here (no content to format, or an empty row): known complete only
        // when nothing is required
        if !checked {
            complete = complete && required.is_empty();
        }
        out.append(messages)?;
    }
    Ok(Some((out, complete)))
}

/// `_promote_young()`: moves every object the cyclic collector tracks into its oldest
/// generation, without walking them (`gc.freeze()` then `gc.unfreeze()`, back to back: no
/// Python code runs, and no other thread, between the two). Called after a batch made with the
/// collector off: the batch's output is long-lived, and the first allocation after
/// `gc.enable()` would otherwise start a young collection that walks all of it at once (about a
/// quarter of a multimodal batch's time) only to move it to an older generation. Does nothing,
/// and returns `False`, when some objects are frozen already (the caller's `gc.freeze()` is
/// left as it is).
#[pyfunction]
#[pyo3(name = "_promote_young")]
pub(crate) fn promote_young(py: Python<'_>) -> PyResult<bool> {
    let gc = py.import(pyo3::intern!(py, "gc"))?;
    let frozen: usize = gc
        .call_method0(pyo3::intern!(py, "get_freeze_count"))?
        .extract()?;
    if frozen != 0 {
        return Ok(false);
    }
    gc.call_method0(pyo3::intern!(py, "freeze"))?;
    gc.call_method0(pyo3::intern!(py, "unfreeze"))?;
    Ok(true)
}
