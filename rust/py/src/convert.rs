//! Python objects -> core inputs, and core outputs -> Python objects.

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};
use pyo3::{intern, sync::PyOnceLock};

use promptweave_core::{Entries, Item, Marker, Origin, Pos, RoleItem, RoleSpecItem, Section};
use std::sync::Arc;

use crate::errors::unsupported;

/// `str(x)` of a row value, borrowed from Python where it already is an exact `str`.
pub(crate) fn py_str(value: &Bound<'_, PyAny>) -> PyResult<PyBackedStr> {
    let s = if value.is_exact_instance_of::<PyString>() {
        value.cast::<PyString>()?.clone()
    } else {
        value.str()?
    };
    // a lone surrogate cannot become UTF-8: the pure-Python path handles it
    PyBackedStr::try_from(s).map_err(|_| unsupported("string that is not valid UTF-8"))
}

/// An exact `str` (not a subclass, whose `str()` could differ), as owned text.
fn exact_str(value: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    if value.is_exact_instance_of::<PyString>() {
        let s = value.cast::<PyString>()?;
        s.to_str()
            .map(str::to_owned)
            .map_err(|_| unsupported("string that is not valid UTF-8"))
    } else {
        Err(unsupported(what))
    }
}

/// The `str()` of every value of a row, in the row's order.
pub(crate) struct RowStrings {
    pairs: Vec<(PyBackedStr, PyBackedStr)>,
    mask: Option<(PyBackedStr, PyBackedStr)>,
}

impl RowStrings {
    pub(crate) fn from_dict(row: &Bound<'_, PyDict>) -> PyResult<Self> {
        let mut pairs = Vec::with_capacity(row.len());
        for (k, v) in row.iter() {
            if !k.is_exact_instance_of::<PyString>() {
                return Err(unsupported("row key that is not a str"));
            }
            pairs.push((py_str(&k)?, py_str(&v)?));
        }
        Ok(Self { pairs, mask: None })
    }

    /// Mask the output column: `row[key] = str(value)` on a copy of the row.
    pub(crate) fn mask(
        &mut self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        if !key.is_exact_instance_of::<PyString>() {
            return Err(unsupported("output column that is not a str"));
        }
        self.mask = Some((py_str(key)?, py_str(value)?));
        Ok(())
    }

    pub(crate) fn entries(&self) -> Entries<'_> {
        let mut e = Entries::with_capacity(self.pairs.len() + 1);
        for (k, v) in &self.pairs {
            e.push(k, v);
        }
        if let Some((k, v)) = &self.mask {
            e.set(k, v);
        }
        e
    }
}

/// Items converted from a Python list, with the dicts they came from.
pub(crate) struct InputItems {
    pub(crate) items: Vec<Item>,
    /// per input index: copying that dict needs `copy.deepcopy`
    pub(crate) deep: Vec<bool>,
}

fn is_plain_value(v: &Bound<'_, PyAny>) -> bool {
    v.is_none()
        || v.is_exact_instance_of::<PyString>()
        || v.is_exact_instance_of::<PyBool>()
        || v.is_exact_instance_of::<PyInt>()
        || v.is_exact_instance_of::<PyFloat>()
}

/// A section marker dict, or `None` when `d` has no `section` key.
fn marker(d: &Bound<'_, PyDict>) -> PyResult<Option<Marker>> {
    let py = d.py();
    let Some(section) = d.get_item(intern!(py, "section"))? else {
        return Ok(None);
    };
    let pos = d.get_item(intern!(py, "pos"))?;
    let (Some(pos), 2) = (pos, d.len()) else {
        return Err(unsupported(
            "section dict that is not exactly {section, pos}",
        ));
    };
    let section = Section::from_name(&exact_str(&section, "non-str section")?);
    let pos = Pos::from_name(&exact_str(&pos, "non-str pos")?);
    match (section, pos) {
        (Some(s), Some(p)) => Ok(Some(Marker::new(s, p))),
        _ => Err(unsupported("unknown section or pos")),
    }
}

/// A role dict: the keys the walks read are taken; other keys stay in the source dict.
/// Returns the item and whether copying the dict needs `copy.deepcopy`.
pub(crate) fn role_item(d: &Bound<'_, PyDict>, origin: Origin) -> PyResult<(RoleItem, bool)> {
    let py = d.py();
    let mut spec = RoleSpecItem {
        origin,
        ..RoleSpecItem::default()
    };
    let mut prompt = None;
    let mut deep = false;
    for (k, v) in d.iter() {
        deep |= !is_plain_value(&v);
        // keys written in source code are interned: compare pointers before text
        let key = if k.is(intern!(py, "role")) {
            "role"
        } else if k.is(intern!(py, "prompt")) {
            "prompt"
        } else {
            let Ok(key) = k.cast::<PyString>() else {
                continue;
            };
            match key.to_str() {
                Ok(s) => s,
                Err(_) => return Err(unsupported("key that is not valid UTF-8")),
            }
        };
        match key {
            "role" => spec.role = Some(exact_str(&v, "non-str role")?),
            "prompt" => prompt = Some(exact_str(&v, "non-str prompt")?),
            "fallback_role" => {
                // only its truthiness and name matter: a falsy non-str is like no fallback
                spec.fallback_role = if v.is_truthy()? {
                    Some(exact_str(&v, "non-str fallback_role")?)
                } else {
                    None
                };
            }
            "begin" => spec.begin = Some(exact_str(&v, "non-str begin")?),
            "end" => spec.end = Some(exact_str(&v, "non-str end")?),
            "api_role" => spec.api_role = Some(exact_str(&v, "non-str api_role")?),
            "generate" => spec.generate = Some(v.is_truthy()?),
            "prompt_mm" | "section" => return Err(unsupported("multimodal or section item")),
            _ => {}
        }
    }
    Ok((
        RoleItem {
            spec: Arc::new(spec),
            prompt,
        },
        deep,
    ))
}

/// One item of a prompt list, and whether it is a dict whose copy needs `copy.deepcopy`.
pub(crate) fn item(obj: &Bound<'_, PyAny>, origin: Origin) -> PyResult<(Item, bool)> {
    if obj.is_exact_instance_of::<PyString>() {
        return Ok((Item::Text(exact_str(obj, "text")?), false));
    }
    let d = obj
        .cast::<PyDict>()
        .map_err(|_| unsupported("item that is neither str nor dict"))?;
    if let Some(m) = marker(d)? {
        return Ok((Item::Marker(m), false));
    }
    let (r, deep) = role_item(d, origin)?;
    Ok((Item::Role(r), deep))
}

/// Convert a Python list (a `PromptList` or a plain list) of items.
pub(crate) fn items_from_list(list: &Bound<'_, PyList>) -> PyResult<InputItems> {
    let mut items = Vec::with_capacity(list.len());
    let mut deep = Vec::with_capacity(list.len());
    for (i, obj) in list.iter().enumerate() {
        let idx = u32::try_from(i).map_err(|_| unsupported("list too long"))?;
        let (it, d) = item(&obj, Origin::Input(idx))?;
        items.push(it);
        deep.push(d);
    }
    Ok(InputItems { items, deep })
}

fn deepcopy<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    static DEEPCOPY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let f = DEEPCOPY.import(py, "copy", "deepcopy")?;
    f.call1((obj,))
}

/// Sources of role dicts for rebuilding output items.
pub(crate) struct Sources<'a, 'py> {
    /// the compiled template's role dicts and whether each needs a deep copy
    pub(crate) template: &'a [(Py<PyDict>, bool)],
    /// the caller's input list (ICE prompt list) and its deep-copy flags, if any
    pub(crate) input: Option<(&'a Bound<'py, PyList>, &'a [bool])>,
}

fn copy_source<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyDict>,
    deep: bool,
) -> PyResult<Bound<'py, PyDict>> {
    if deep {
        Ok(deepcopy(py, src.as_any())?.cast_into::<PyDict>()?)
    } else {
        src.copy()
    }
}

/// Build the Python object of one output item: a fresh dict (a copy of the source dict, extra
/// keys included, with the new prompt) for role items, as the reference's deep-copying `format`.
pub(crate) fn item_to_py<'py>(
    py: Python<'py>,
    item: &Item,
    src: &Sources<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    match item {
        Item::Text(s) => Ok(PyString::new(py, s).into_any()),
        Item::Marker(m) => {
            let d = PyDict::new(py);
            d.set_item(
                intern!(py, "section"),
                PyString::intern(py, m.section.name()),
            )?;
            d.set_item(intern!(py, "pos"), PyString::intern(py, m.pos.name()))?;
            Ok(d.into_any())
        }
        Item::Role(r) => {
            let d = match r.spec.origin {
                Origin::Template(i) => {
                    let (dict, deep) = src
                        .template
                        .get(i as usize)
                        .ok_or_else(|| unsupported("dangling template item"))?;
                    copy_source(py, dict.bind(py), *deep)?
                }
                Origin::Input(i) => {
                    let (list, deep) = src
                        .input
                        .ok_or_else(|| unsupported("dangling input item"))?;
                    let obj = list.get_item(i as usize)?;
                    let dict = obj.cast::<PyDict>()?;
                    copy_source(py, dict, deep.get(i as usize).copied().unwrap_or(true))?
                }
                Origin::None => {
                    let d = PyDict::new(py);
                    if let Some(role) = r.role() {
                        d.set_item(intern!(py, "role"), role)?;
                    }
                    d
                }
            };
            if let Some(p) = &r.prompt {
                set_prompt(&d, p)?;
            }
            Ok(d.into_any())
        }
    }
}

/// Set `d['prompt'] = p`, keeping the copied `str` object when it already holds that text
/// (strings are immutable, and `copy.deepcopy` shares them too).
fn set_prompt(d: &Bound<'_, PyDict>, p: &str) -> PyResult<()> {
    let py = d.py();
    let key = intern!(py, "prompt");
    if let Some(old) = d.get_item(key)? {
        if let Ok(old) = old.cast::<PyString>() {
            if old.to_str().is_ok_and(|o| o == p) {
                return Ok(());
            }
        }
    }
    d.set_item(key, p)
}

/// Build a Python list of output items.
pub(crate) fn items_to_py<'py>(
    py: Python<'py>,
    items: &[Item],
    src: &Sources<'_, 'py>,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for item in items {
        list.append(item_to_py(py, item, src)?)?;
    }
    Ok(list)
}
