//! Python objects -> core inputs, and core outputs -> Python objects.

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use pyo3::{intern, sync::PyOnceLock};

use promptweave_core::{Entries, Item, Marker, Origin, Pos, RoleItem, RoleSpecItem, Section};
use std::borrow::Cow;

use crate::errors::unsupported;

/// Whether `str(value)` cannot fail and runs no Python code (so calling it once, or not at
/// all, is as good as calling it as often as the reference does): an exact `str`, `bool`,
/// `float`, `None`, an exact `int` of at most 64 bits (a longer one may exceed Python's digit
/// limit), or an exact `list`, `tuple` or `dict` of such values, nested a few levels at most.
pub(crate) fn str_is_pure(value: &Bound<'_, PyAny>) -> bool {
    pure_at(value, 0)
}

fn pure_at(value: &Bound<'_, PyAny>, depth: usize) -> bool {
    const MAX_DEPTH: usize = 8;
    if value.is_exact_instance_of::<PyString>()
        || value.is_none()
        || value.is_exact_instance_of::<PyBool>()
        || value.is_exact_instance_of::<PyFloat>()
    {
        return true;
    }
    if value.is_exact_instance_of::<PyInt>() {
        return value.extract::<i64>().is_ok();
    }
    if depth >= MAX_DEPTH {
        return false;
    }
    if let Ok(list) = value.cast_exact::<PyList>() {
        return list.iter().all(|v| pure_at(&v, depth + 1));
    }
    if let Ok(tuple) = value.cast_exact::<PyTuple>() {
        return tuple.iter().all(|v| pure_at(&v, depth + 1));
    }
    if let Ok(dict) = value.cast_exact::<PyDict>() {
        return dict
            .iter()
            .all(|(k, v)| pure_at(&k, depth + 1) && pure_at(&v, depth + 1));
    }
    false
}

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

/// Columns the reference cannot take: it passes the row as keyword arguments to
/// `safe_format(input_str, **row)` and `PromptList.format(self, **row)`, which raise
/// `TypeError` for a column named like their own parameter (a row with one goes to the
/// pure-Python path, which raises as the reference does where it does).
pub(crate) const RESERVED_COLUMNS: [&str; 2] = ["input_str", "self"];

/// The `str()` of every value of a row, in the row's order.
pub(crate) struct RowStrings {
    pairs: Vec<(PyBackedStr, PyBackedStr)>,
    mask: Option<(PyBackedStr, PyBackedStr)>,
}

impl RowStrings {
    /// Every value of the row `str()`ed once (`safe_format`'s single pass over the row).
    pub(crate) fn from_dict(row: &Bound<'_, PyDict>) -> PyResult<Self> {
        Self::read(row, None, false)
    }

    /// The row for a template that formats several items with it, the output column `field`
    /// (if any) masked by `value` (`str()`ed). The reference `str()`s the values once per
    /// formatted item, and never the masked column's own value (it replaces it in its copy of
    /// the row first): read once here, which is the same only for values whose `str()` is pure
    /// ([`str_is_pure`]); a row with another value goes to the pure-Python path.
    pub(crate) fn for_items(
        row: &Bound<'_, PyDict>,
        mask: Option<(&Bound<'_, PyAny>, &Bound<'_, PyAny>)>,
    ) -> PyResult<Self> {
        Self::read(row, mask, true)
    }

    fn read(
        row: &Bound<'_, PyDict>,
        mask: Option<(&Bound<'_, PyAny>, &Bound<'_, PyAny>)>,
        pure_only: bool,
    ) -> PyResult<Self> {
        let mask = match mask {
            Some((field, _)) if !field.is_exact_instance_of::<PyString>() => {
                return Err(unsupported("output column that is not a str"));
            }
            Some((field, value)) => Some((py_str(field)?, py_str(value)?)),
            None => None,
        };
        let mut pairs = Vec::with_capacity(row.len());
        for (k, v) in row.iter() {
            if !k.is_exact_instance_of::<PyString>() {
                return Err(unsupported("row key that is not a str"));
            }
            let k = py_str(&k)?;
            if RESERVED_COLUMNS.contains(&&*k) {
                return Err(unsupported(
                    "row column named like a parameter of the reference",
                ));
            }
            let v = match &mask {
                // (the masked column's own value too: the reference deep-copies the whole row
                // before it masks the column, and that copy may refuse it or run its code)
                _ if pure_only && !str_is_pure(&v) => {
                    return Err(unsupported("row value whose str() may fail or run code"));
                }
                Some((field, value)) if *k == **field => value.clone_ref(row.py()),
                _ => py_str(&v)?,
            };
            pairs.push((k, v));
        }
        Ok(Self { pairs, mask })
    }

    /// Whether the row has the column `name`.
    pub(crate) fn has_key(&self, name: &str) -> bool {
        self.pairs.iter().any(|(k, _)| &**k == name)
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

pub(crate) fn is_plain_value(v: &Bound<'_, PyAny>) -> bool {
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
    marker_of(&section, &pos).map(Some)
}

/// The marker `{section: section, pos: pos}`.
fn marker_of(section: &Bound<'_, PyAny>, pos: &Bound<'_, PyAny>) -> PyResult<Marker> {
    let section = match known_name(section) {
        Some(name) => Section::from_name(name),
        None => Section::from_name(&backed(section, "non-str section")?),
    };
    let pos = match known_name(pos) {
        Some(name) => Pos::from_name(name),
        None => Pos::from_name(&backed(pos, "non-str pos")?),
    };
    match (section, pos) {
        (Some(s), Some(p)) => Ok(Marker::new(s, p)),
        _ => Err(unsupported("unknown section or pos")),
    }
}

/// A dict of exactly two keys that are the interned `role` and `prompt`, or `section` and
/// `pos` (as in the dicts this module makes and dict literals in Python code), read in one walk
/// over its two entries instead of by lookups. `None`: any other two keys (equal strings that
/// are other objects included), which the lookups then read.
fn two_key_item(d: &Bound<'_, PyDict>, strs: &mut Strs) -> PyResult<Option<Raw>> {
    let py = d.py();
    let mut entries = d.iter();
    let (Some((k1, v1)), Some((k2, v2))) = (entries.next(), entries.next()) else {
        return Ok(None);
    };
    let (role, prompt) = (intern!(py, "role"), intern!(py, "prompt"));
    let (section, pos) = (intern!(py, "section"), intern!(py, "pos"));
    let item = if k1.is(role) && k2.is(prompt) {
        role_item(v1, v2, strs)?
    } else if k1.is(prompt) && k2.is(role) {
        role_item(v2, v1, strs)?
    } else if k1.is(section) && k2.is(pos) {
        Raw::Marker(marker_of(&v1, &v2)?)
    } else if k1.is(pos) && k2.is(section) {
        Raw::Marker(marker_of(&v2, &v1)?)
    } else {
        return Ok(None);
    };
    Ok(Some(item))
}

/// The role item `{role: role, prompt: prompt}`.
fn role_item(role: Bound<'_, PyAny>, prompt: Bound<'_, PyAny>, strs: &mut Strs) -> PyResult<Raw> {
    Ok(Raw::Role(RawRole {
        role: Some(strs.take(role, "non-str role")?),
        prompt: Some(strs.take(prompt, "non-str prompt")?),
        ..RawRole::default()
    }))
}

/// A marker name given as one of the interned name strings (as in markers this module made, and
/// in dict literals of Python code): found by identity, without reading its text.
fn known_name(value: &Bound<'_, PyAny>) -> Option<&'static str> {
    const NAMES: [&str; 4] = ["begin", "end", "round", "ice"];
    static INTERNED: PyOnceLock<Vec<Py<PyString>>> = PyOnceLock::new();
    let py = value.py();
    let interned = INTERNED.get_or_init(py, || {
        NAMES
            .iter()
            .map(|&name| PyString::intern(py, name).unbind())
            .collect()
    });
    interned
        .iter()
        .zip(NAMES)
        .find(|(s, _)| value.is(s.bind(py)))
        .map(|(_, name)| name)
}

/// A string borrowed from Python (an exact `str`; subclasses could `str()` differently).
fn backed(value: &Bound<'_, PyAny>, what: &str) -> PyResult<PyBackedStr> {
    if !value.is_exact_instance_of::<PyString>() {
        return Err(unsupported(what));
    }
    PyBackedStr::try_from(value.cast::<PyString>()?.clone())
        .map_err(|_| unsupported("string that is not valid UTF-8"))
}

/// Strings borrowed from Python while items are read; items refer to them by index (small
/// items move cheaply, and one vector holds every string of a list).
#[derive(Default)]
pub(crate) struct Strs {
    all: Vec<PyBackedStr>,
    /// the objects of the last two strings added, and their indices: a string object met again
    /// (the role names of a dialogue, `'HUMAN'`, `'BOT'`, `'HUMAN'`, ...) is not read again. The
    /// objects are held in `all`, so an address here is not reused while this is alive.
    recent: [(usize, u32); 2],
}

/// Index of a string in [`Strs`].
#[derive(Clone, Copy)]
pub(crate) struct StrId(u32);

impl Strs {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            all: Vec::with_capacity(n),
            recent: [(0, 0); 2],
        }
    }

    fn add(&mut self, s: PyBackedStr) -> PyResult<StrId> {
        let id = u32::try_from(self.all.len()).map_err(|_| unsupported("too many strings"))?;
        self.all.push(s);
        Ok(StrId(id))
    }

    fn backed(&mut self, value: &Bound<'_, PyAny>, what: &str) -> PyResult<StrId> {
        self.take(value.clone(), what)
    }

    /// `value` (an exact `str`) added, or found among the recent ones.
    fn take(&mut self, value: Bound<'_, PyAny>, what: &str) -> PyResult<StrId> {
        let at = value.as_ptr() as usize;
        if let Some(&(_, id)) = self.recent.iter().find(|(p, _)| *p == at) {
            return Ok(StrId(id));
        }
        let Ok(value) = value.cast_into_exact::<PyString>() else {
            return Err(unsupported(what));
        };
        let s = PyBackedStr::try_from(value)
            .map_err(|_| unsupported("string that is not valid UTF-8"))?;
        let id = self.add(s)?;
        self.recent = [(at, id.0), self.recent[0]];
        Ok(id)
    }

    fn get(&self, id: StrId) -> &str {
        self.all.get(id.0 as usize).map_or("", |s| &**s)
    }

    fn cow(&self, id: Option<StrId>) -> Option<Cow<'_, str>> {
        id.map(|id| Cow::Borrowed(self.get(id)))
    }
}

/// The fields of a role dict that the walks read, borrowed from Python (as indices of the
/// reader's [`Strs`]).
#[derive(Default)]
pub(crate) struct RawRole {
    role: Option<StrId>,
    prompt: Option<StrId>,
    fallback_role: Option<StrId>,
    begin: Option<StrId>,
    end: Option<StrId>,
    api_role: Option<StrId>,
    generate: Option<bool>,
}

/// One prompt-list item as extracted from Python, before it becomes a core `Item`.
pub(crate) enum Raw {
    Text(StrId),
    Marker(Marker),
    Role(RawRole),
}

impl Raw {
    /// The core item, borrowing the strings of `strs` (those this item was read into).
    pub(crate) fn item<'s>(&self, strs: &'s Strs, origin: Origin) -> Item<'s> {
        match self {
            Raw::Text(s) => Item::Text(Cow::Borrowed(strs.get(*s))),
            Raw::Marker(m) => Item::Marker(*m),
            Raw::Role(r) => Item::Role(RoleItem {
                spec: RoleSpecItem {
                    role: strs.cow(r.role),
                    fallback_role: strs.cow(r.fallback_role),
                    begin: strs.cow(r.begin),
                    end: strs.cow(r.end),
                    api_role: strs.cow(r.api_role),
                    generate: r.generate,
                    origin,
                },
                prompt: strs.cow(r.prompt),
            }),
        }
    }
}

/// A role dict: the keys the walks read are taken; other keys stay in the source dict.
/// Returns the fields and whether copying the dict needs `copy.deepcopy`.
fn raw_role(d: &Bound<'_, PyDict>, strs: &mut Strs) -> PyResult<(RawRole, bool)> {
    let py = d.py();
    let mut r = RawRole::default();
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
            "role" => r.role = Some(strs.backed(&v, "non-str role")?),
            "prompt" => r.prompt = Some(strs.backed(&v, "non-str prompt")?),
            "fallback_role" => {
                // only its truthiness and name matter: a falsy non-str is like no fallback
                r.fallback_role = if v.is_truthy()? {
                    Some(strs.backed(&v, "non-str fallback_role")?)
                } else {
                    None
                };
            }
            "begin" => r.begin = Some(strs.backed(&v, "non-str begin")?),
            "end" => r.end = Some(strs.backed(&v, "non-str end")?),
            "api_role" => r.api_role = Some(strs.backed(&v, "non-str api_role")?),
            "generate" => r.generate = Some(v.is_truthy()?),
            "prompt_mm" | "section" => return Err(unsupported("multimodal or section item")),
            _ => {}
        }
    }
    Ok((r, deep))
}

/// One item of a prompt list (its strings kept in `strs`), and whether it is a dict whose copy
/// needs `copy.deepcopy`.
pub(crate) fn raw_item(obj: &Bound<'_, PyAny>, strs: &mut Strs) -> PyResult<(Raw, bool)> {
    if obj.is_exact_instance_of::<PyString>() {
        return Ok((Raw::Text(strs.backed(obj, "text")?), false));
    }
    let d = obj
        .cast::<PyDict>()
        .map_err(|_| unsupported("item that is neither str nor dict"))?;
    // a dict subclass (mmengine's `ConfigDict` of a loaded config, an `OrderedDict`) keeps its
    // class in the reference's deep copies: copied by a clone proven equal to them, else left
    // to the Python path (which runs the class's own `__deepcopy__` and `__setitem__` as the
    // reference does, as many times)
    let subclass = !obj.is_exact_instance_of::<PyDict>();
    if subclass && !plain_clone(d)? {
        return Err(unsupported("dict subclass item that is not cloned plainly"));
    }
    let item = |item: Raw, deep: bool| match item {
        // the core's markers come out as plain dicts
        Raw::Marker(_) if subclass => Err(unsupported("section dict of a dict subclass")),
        item => Ok((item, deep || subclass)),
    };
    if d.len() == 2 {
        // the usual items, exactly `{role, prompt}` or `{section, pos}` (their values are
        // exact strs when read: nothing to deep-copy)
        if let Some(found) = two_key_item(d, strs)? {
            return item(found, false);
        }
        let py = d.py();
        if let Some(role) = d.get_item(intern!(py, "role"))? {
            if let Some(prompt) = d.get_item(intern!(py, "prompt"))? {
                let deep = !is_plain_value(&role) || !is_plain_value(&prompt);
                return item(role_item(role, prompt, strs)?, deep);
            }
        }
    }
    if let Some(m) = marker(d)? {
        return item(Raw::Marker(m), false);
    }
    let (r, deep) = raw_role(d, strs)?;
    item(Raw::Role(r), deep)
}

/// A Python list (a `PromptList` or a plain list) of items, extracted.
pub(crate) struct InputItems {
    raw: Vec<Raw>,
    strs: Strs,
    /// per input index: copying that dict needs `copy.deepcopy`
    pub(crate) deep: Vec<bool>,
}

impl InputItems {
    pub(crate) fn from_list(list: &Bound<'_, PyList>) -> PyResult<Self> {
        if u32::try_from(list.len()).is_err() {
            return Err(unsupported("list too long"));
        }
        let mut raw = Vec::with_capacity(list.len());
        let mut deep = Vec::with_capacity(list.len());
        let mut strs = Strs::with_capacity(2 * list.len());
        for obj in list.iter() {
            let (r, d) = raw_item(&obj, &mut strs)?;
            raw.push(r);
            deep.push(d);
        }
        Ok(Self { raw, strs, deep })
    }

    /// Whether `prompt` is item `i`'s own prompt text, unchanged (borrowed from it).
    fn prompt_is(&self, i: usize, prompt: &str) -> bool {
        match self.raw.get(i) {
            Some(Raw::Role(RawRole {
                prompt: Some(p), ..
            })) => {
                let p = self.strs.get(*p);
                p.as_ptr() == prompt.as_ptr() && p.len() == prompt.len()
            }
            _ => false,
        }
    }

    /// The core items, borrowing the extracted strings.
    pub(crate) fn items(&self) -> Vec<Item<'_>> {
        self.raw
            .iter()
            .enumerate()
            .map(|(i, r)| {
                r.item(
                    &self.strs,
                    Origin::Input(u32::try_from(i).unwrap_or(u32::MAX)),
                )
            })
            .collect()
    }
}

fn deepcopy<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    static DEEPCOPY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let f = DEEPCOPY.import(py, "copy", "deepcopy")?;
    f.call1((obj,))
}

/// The dict subclasses copied by a clone, by module and name (exact classes, not their
/// subclasses): mmengine's `ConfigDict` (every dict of a config loaded with `mmengine.Config`,
/// as inside an OpenCompass run) and addict's `Dict`, its base. Their deep copy of a dict of
/// immutable values is a fresh instance (`cls()`: no parent, not frozen) with the same items in
/// the same order, and their `__setitem__` of a `str` on such an instance only stores it; their
/// `__getitem__` returns a stored `str` as it is. Other subclasses, whose copying, reading or
/// storing may do anything, take the Python path, which runs their own methods as the
/// reference does.
const CLONED_CLASSES: [(&str, &str); 2] = [
    ("mmengine.config.config", "ConfigDict"),
    ("addict.addict", "Dict"),
];

/// What was found of a dict subclass: `None` when it is not cloned, else the instance
/// attributes of a fresh instance (`cls()`), which a clone gets.
type Cloned = Option<Py<PyDict>>;

/// Dict subclasses seen, and whether (and how) they are cloned.
static SUBCLASSES: std::sync::Mutex<Vec<(Py<PyType>, Cloned)>> = std::sync::Mutex::new(Vec::new());

/// At most this many dict subclasses are remembered.
const SUBCLASSES_KEPT: usize = 32;

/// What was found of `cls`, if it was seen (`Some(None)`: not cloned).
fn seen(cls: &Bound<'_, PyType>) -> PyResult<Option<Cloned>> {
    let py = cls.py();
    let kept = SUBCLASSES.lock().map_err(|_| poisoned_lock())?;
    Ok(kept
        .iter()
        .find(|(c, _)| c.bind(py).is(cls))
        .map(|(_, a)| a.as_ref().map(|a| a.clone_ref(py))))
}

/// Whether every item of `d` has an exact `str` key and an immutable value.
fn plain_items(d: &Bound<'_, PyDict>) -> bool {
    d.iter()
        .all(|(k, v)| k.is_exact_instance_of::<PyString>() && is_plain_value(&v))
}

/// The instance attributes of `obj` (its `__dict__`), when they are an exact dict.
fn instance_attrs<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let attrs = obj.getattr(intern!(obj.py(), "__dict__"))?;
    Ok(attrs.cast_into_exact::<PyDict>().ok())
}

/// A clone of `d`: `cls.__new__(cls)` with the instance attributes `attrs` (a fresh
/// instance's) and `d`'s items, stored without running the class's code. `None`: the class
/// does not make such an instance.
fn clone_of<'py>(
    d: &Bound<'py, PyDict>,
    attrs: &Bound<'py, PyDict>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let py = d.py();
    let cls = d.get_type();
    let Ok(new) = cls
        .call_method1(intern!(py, "__new__"), (&cls,))?
        .cast_into::<PyDict>()
    else {
        return Ok(None);
    };
    if !new.get_type().is(&cls) || !new.is_empty() {
        return Ok(None);
    }
    let Some(new_attrs) = instance_attrs(&new)? else {
        return Ok(None);
    };
    new_attrs.update(attrs.as_mapping())?;
    for (k, v) in d.iter() {
        new.set_item(k, v)?;
    }
    Ok(Some(new))
}

/// How instances of `d`'s class are cloned (`None`: they are not), found on its first
/// instance `d` (whose items are plain): for a class of [`CLONED_CLASSES`], a fresh instance's
/// attributes, kept when a clone of `d` equals `copy.deepcopy(d)` and the class's
/// `__setitem__` of a `str` changes a clone as storing it does (a check that the class still
/// behaves as described).
fn find_cloned(d: &Bound<'_, PyDict>) -> PyResult<Cloned> {
    let py = d.py();
    let cls = d.get_type();
    let text = |name| -> PyResult<String> {
        Ok(cls.getattr(name)?.extract::<String>().unwrap_or_default())
    };
    let (module, name) = (
        text(intern!(py, "__module__"))?,
        text(intern!(py, "__qualname__"))?,
    );
    if !CLONED_CLASSES.contains(&(module.as_str(), name.as_str())) {
        return Ok(None);
    }
    let Ok(fresh) = cls.call0() else {
        return Ok(None);
    };
    let Some(attrs) = instance_attrs(&fresh)? else {
        return Ok(None);
    };
    let attrs = attrs.copy()?;
    if !plain_items(&attrs) {
        return Ok(None);
    }
    let deep = deepcopy(py, d.as_any())?;
    let Ok(deep) = deep.cast::<PyDict>() else {
        return Ok(None);
    };
    let (Some(a), Some(b), Some(c)) = (
        clone_of(d, &attrs)?,
        clone_of(d, &attrs)?,
        clone_of(d, &attrs)?,
    ) else {
        return Ok(None);
    };
    if !same_dict(&a, deep)? {
        return Ok(None);
    }
    let key = intern!(py, "prompt");
    let probe = PyString::new(py, " A {probe}\n");
    b.as_any().set_item(key, &probe)?;
    c.set_item(key, &probe)?;
    Ok(same_dict(&b, &c)?.then(|| attrs.unbind()))
}

/// How instances of `d`'s class are cloned (`None`: they are not), found once per class.
fn cloned(d: &Bound<'_, PyDict>) -> PyResult<Cloned> {
    let cls = d.get_type();
    if let Some(found) = seen(&cls)? {
        return Ok(found);
    }
    let found = find_cloned(d)?;
    let mut kept = SUBCLASSES.lock().map_err(|_| poisoned_lock())?;
    if kept.len() < SUBCLASSES_KEPT {
        kept.push((cls.unbind(), found.as_ref().map(|a| a.clone_ref(d.py()))));
    }
    Ok(found)
}

/// Whether `d`, an instance of a dict subclass, is copied by a clone: its class is cloned
/// ([`CLONED_CLASSES`]) and its items are immutable. `copy.deepcopy` of a `ConfigDict` runs
/// its Python code (about 6 us, a third of a whole row of a 5-shot dialogue); the clone is a
/// few C calls.
fn plain_clone(d: &Bound<'_, PyDict>) -> PyResult<bool> {
    Ok(plain_items(d) && cloned(d)?.is_some())
}

/// A copy of `src`, a dict subclass's instance that [`plain_clone`] accepts; `None` for any
/// other dict.
fn subclass_clone<'py>(src: &Bound<'py, PyDict>) -> PyResult<Option<Bound<'py, PyDict>>> {
    if src.is_exact_instance_of::<PyDict>() || !plain_items(src) {
        return Ok(None);
    }
    match cloned(src)? {
        Some(attrs) => clone_of(src, attrs.bind(src.py())),
        None => Ok(None),
    }
}

/// Whether two dicts are of one class, with the same items in the same order (values
/// identical or equal plain values) and equal instance attributes.
fn same_dict<'py>(a: &Bound<'py, PyDict>, b: &Bound<'py, PyDict>) -> PyResult<bool> {
    let py = a.py();
    if !a.get_type().is(b.get_type()) || a.len() != b.len() {
        return Ok(false);
    }
    for ((ka, va), (kb, vb)) in a.iter().zip(b.iter()) {
        if !ka.eq(&kb)? || !(va.is(&vb) || (va.get_type().is(vb.get_type()) && va.eq(&vb)?)) {
            return Ok(false);
        }
    }
    let attrs = |d: &Bound<'py, PyDict>| d.getattr_opt(intern!(py, "__dict__"));
    match (attrs(a)?, attrs(b)?) {
        (None, None) => Ok(true),
        (Some(x), Some(y)) => x.eq(&y),
        _ => Ok(false),
    }
}

fn poisoned_lock() -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err("poisoned lock")
}

/// Sources of role dicts for rebuilding output items.
pub(crate) struct Sources<'a, 'py> {
    /// the compiled template's role dicts and whether each needs a deep copy
    pub(crate) template: &'a [(Py<PyDict>, bool)],
    /// the caller's input list (ICE prompt list) and its items as read, if any
    pub(crate) input: Option<(&'a Bound<'py, PyList>, &'a InputItems)>,
}

/// A copy of a role dict as the reference's `copy.deepcopy` makes it: a plain copy of a plain
/// dict of immutable values, a [`subclass_clone`] where that is proven the same, else
/// `copy.deepcopy` itself.
pub(crate) fn copy_source<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyDict>,
    deep: bool,
) -> PyResult<Bound<'py, PyDict>> {
    if deep {
        if let Some(copy) = subclass_clone(src)? {
            return Ok(copy);
        }
        Ok(deepcopy(py, src.as_any())?.cast_into::<PyDict>()?)
    } else {
        src.copy()
    }
}

/// A fresh section marker dict: a copy of a prototype made once (cheaper than filling a new
/// dict).
fn marker_dict(py: Python<'_>, m: Marker) -> PyResult<Bound<'_, PyDict>> {
    const SECTIONS: [Section; 4] = [Section::Begin, Section::Round, Section::End, Section::Ice];
    const POSITIONS: [Pos; 2] = [Pos::Begin, Pos::End];
    static PROTOTYPES: PyOnceLock<Vec<Py<PyDict>>> = PyOnceLock::new();
    let prototypes = PROTOTYPES.get_or_try_init(py, || {
        let mut v = Vec::with_capacity(SECTIONS.len() * POSITIONS.len());
        for section in SECTIONS {
            for pos in POSITIONS {
                let d = PyDict::new(py);
                d.set_item(intern!(py, "section"), PyString::intern(py, section.name()))?;
                d.set_item(intern!(py, "pos"), PyString::intern(py, pos.name()))?;
                v.push(d.unbind());
            }
        }
        Ok::<_, PyErr>(v)
    })?;
    let index = SECTIONS.iter().position(|&s| s == m.section).unwrap_or(0) * POSITIONS.len()
        + POSITIONS.iter().position(|&p| p == m.pos).unwrap_or(0);
    match prototypes.get(index) {
        Some(d) => d.bind(py).copy(),
        None => Err(unsupported("unknown marker")),
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
        Item::Marker(m) => Ok(marker_dict(py, *m)?.into_any()),
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
                    let (list, input) = src
                        .input
                        .ok_or_else(|| unsupported("dangling input item"))?;
                    let i = i as usize;
                    let obj = list.get_item(i)?;
                    let dict = obj.cast::<PyDict>()?;
                    let copy = copy_source(py, dict, input.deep.get(i).copied().unwrap_or(true))?;
                    // an unchanged prompt is already the copy's: nothing to look up or compare
                    if r.prompt.as_deref().is_some_and(|p| input.prompt_is(i, p)) {
                        return Ok(copy.into_any());
                    }
                    copy
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
    // (`d` is a copy this module made: a dict subclass's, of immutable items, is a clone when
    // its class is cloned, and storing a `str` in it is what its `__setitem__` does)
    if !d.is_exact_instance_of::<PyDict>() && cloned(d)?.is_none() {
        // a dict subclass's own `__setitem__`, as the reference's `item['prompt'] = ...`
        return d.as_any().set_item(key, p);
    }
    if let Some(old) = d.get_item(key)? {
        if let Ok(old) = old.cast::<PyString>() {
            if old.to_str().is_ok_and(|o| o == p) {
                return Ok(());
            }
        }
    }
    d.set_item(key, p)
}

/// Append the Python objects of output items to `list`.
pub(crate) fn items_to_py<'py>(
    py: Python<'py>,
    items: &[Item],
    src: &Sources<'_, 'py>,
    list: &Bound<'py, PyList>,
) -> PyResult<()> {
    for item in items {
        list.append(item_to_py(py, item, src)?)?;
    }
    Ok(())
}

/// An empty list of class `cls` (a `list` subclass: the flavour's `PromptList`), or a plain
/// list; filled in place, so no list is made only to be copied into it.
pub(crate) fn empty_list<'py>(
    py: Python<'py>,
    cls: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    match cls {
        Some(cls) => Ok(cls.call0()?.cast_into::<PyList>()?),
        None => Ok(PyList::empty(py)),
    }
}
