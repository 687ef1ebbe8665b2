//! `CompiledTemplate`: a compiled `PromptTemplate` body set.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use promptweave_core::{Body, Dialogue, Ice, Item, Origin, PromptTemplate, Rendered, Substitution};

use crate::convert::{
    InputItems, Raw, RowStrings, Sources, Strs, copy_source, empty_list, is_plain_value,
    items_to_py, raw_item,
};
use crate::errors::{Backend, to_py_err, unsupported};
use crate::joined::JoinedTemplate;

/// A compiled prompt template (string, dialogue or label dict).
#[pyclass(frozen, name = "CompiledTemplate", module = "promptweave._core")]
pub(crate) struct PyCompiledTemplate {
    inner: PromptTemplate,
    sources: Vec<(Py<PyDict>, bool)>,
    has_ice_token: bool,
    /// string templates without an ice token: `generate_item` joined from Python strings
    joined: Option<JoinedTemplate>,
    /// the class list outputs are returned as (the flavour's `PromptList`); `None`: plain lists
    prompt_list: Option<Py<PyAny>>,
    /// label dicts: label -> index of its body (`None`: one body, any label)
    labels: Option<Py<PyDict>>,
    /// `generate_ice_item` outputs by row identity (`None` when a role dict needs deep copies)
    memo: Option<Mutex<IceMemo>>,
    /// the containers the template was compiled from (`None`: a `str`, or too large to check)
    shape: Option<Shape>,
}

/// The dicts and lists of a template (the template, its sections, their role dicts, ...) as
/// they were compiled: each with its items, held, so that an address seen again is the same
/// object. The reference reads its template at every call; a template changed in place after
/// it was compiled (a role dict's prompt rewritten, an item appended) is seen by comparing.
struct Shape(Vec<Container>);

enum Container {
    Dict(Py<PyDict>, Vec<(Py<PyAny>, Py<PyAny>)>),
    List(Py<PyList>, Vec<Py<PyAny>>),
}

/// At most this many dicts and lists are compared, this deep (a larger template is not
/// checked: compiled once, as before).
const SHAPE_CONTAINERS: usize = 64;
const SHAPE_DEPTH: usize = 6;

impl Shape {
    fn of(template: &Bound<'_, PyAny>) -> Option<Self> {
        let mut out = Vec::new();
        Self::add(template, 0, &mut out).then_some(Self(out))
    }

    /// Adds `obj`'s containers; `false` when there are too many or they nest too deep.
    fn add(obj: &Bound<'_, PyAny>, depth: usize, out: &mut Vec<Container>) -> bool {
        if depth > SHAPE_DEPTH || out.len() >= SHAPE_CONTAINERS {
            return false;
        }
        if let Ok(d) = obj.cast::<PyDict>() {
            let items: Vec<_> = d.iter().collect();
            out.push(Container::Dict(
                d.clone().unbind(),
                items
                    .iter()
                    .map(|(k, v)| (k.clone().unbind(), v.clone().unbind()))
                    .collect(),
            ));
            return items.iter().all(|(_, v)| Self::add(v, depth + 1, out));
        }
        if let Ok(l) = obj.cast::<PyList>() {
            let items: Vec<_> = l.iter().collect();
            out.push(Container::List(
                l.clone().unbind(),
                items.iter().map(|v| v.clone().unbind()).collect(),
            ));
            return items.iter().all(|v| Self::add(v, depth + 1, out));
        }
        true
    }

    /// Whether every container still holds the very objects it held.
    fn unchanged(&self, py: Python<'_>) -> bool {
        self.0.iter().all(|c| match c {
            Container::Dict(d, items) => {
                let d = d.bind(py);
                d.len() == items.len()
                    && d.iter()
                        .zip(items)
                        .all(|((k, v), (ek, ev))| k.is(ek) && v.is(ev))
            }
            Container::List(l, items) => {
                let l = l.bind(py);
                l.len() == items.len() && l.iter().zip(items).all(|(v, ev)| v.is(ev))
            }
        })
    }
}

/// A copy of an output item the memo keeps or hands out: a plain dict's (of immutable values)
/// is a plain copy, a dict subclass's is made as [`copy_source`] makes its copies.
fn memo_copy<'py>(d: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
    copy_source(d.py(), d, !d.is_exact_instance_of::<PyDict>())
}

/// Outputs of `generate_ice_item`, remembered by the identity of the row's keys and values.
///
/// A retriever asks for the same training rows' examples again and again (FixK: the same ones
/// for every test row). When a row's keys and values are the very objects of an earlier call
/// and every value is immutable with a fixed `str()` (exact `str`, `int`, `float`, `bool`,
/// `None`), the output is the earlier one: a copy of it is returned (fresh dicts sharing the
/// immutable strings, as the reference's deep copies share them). The entry holds its row's
/// objects, so an address seen again is the same object.
#[derive(Default)]
struct IceMemo {
    entries: HashMap<u64, Arc<MemoEntry>, BuildHasherDefault<Prehashed>>,
}

/// The hasher of the memo's keys, which are hashes already ([`row_identity`]): the key is
/// the hash.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// At most this many remembered outputs (then the memo starts again empty).
const MEMO_ENTRIES: usize = 4096;

struct MemoEntry {
    label: usize,
    /// the row's keys and values, alternately
    row: Vec<Py<PyAny>>,
    out: MemoOut,
}

enum MemoOut {
    Str(Py<PyString>),
    /// list items: a dict (copied on every hit, a dict subclass's as `copy_source` copies it)
    /// or a str
    List(Vec<(Py<PyAny>, bool)>),
}

/// The addresses of a row's keys and values and their hash; `None` when a key is not an exact
/// `str` or a value is not immutable.
fn row_identity(entry: &Bound<'_, PyDict>, label: usize) -> Option<(Vec<usize>, u64)> {
    let mut ptrs = Vec::with_capacity(2 * entry.len());
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ label as u64;
    for (k, v) in entry.iter() {
        if !k.is_exact_instance_of::<PyString>() || !is_plain_value(&v) {
            return None;
        }
        for p in [k.as_ptr() as usize, v.as_ptr() as usize] {
            ptrs.push(p);
            h = (h.rotate_left(5) ^ p as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
    Some((ptrs, h))
}

impl MemoEntry {
    fn matches(&self, label: usize, ptrs: &[usize]) -> bool {
        self.label == label
            && self.row.len() == ptrs.len()
            && self
                .row
                .iter()
                .zip(ptrs)
                .all(|(o, &p)| o.as_ptr() as usize == p)
    }

    /// A fresh copy of the remembered output (a list output in a new `template.new_list()`).
    fn output<'py>(
        &self,
        py: Python<'py>,
        template: &PyCompiledTemplate,
    ) -> PyResult<Bound<'py, PyAny>> {
        match &self.out {
            MemoOut::Str(s) => Ok(s.bind(py).clone().into_any()),
            MemoOut::List(items) => {
                let list = template.new_list(py)?;
                for (obj, is_dict) in items {
                    let obj = obj.bind(py);
                    if *is_dict {
                        list.append(memo_copy(obj.cast::<PyDict>()?)?)?;
                    } else {
                        list.append(obj)?;
                    }
                }
                Ok(list.into_any())
            }
        }
    }

    /// An entry for `out` (a fresh output: its dicts are copied, so that the caller's changes
    /// to them stay out of the memo).
    fn new(
        entry: &Bound<'_, PyDict>,
        label: usize,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Self>> {
        let out = if let Ok(s) = out.cast_exact::<PyString>() {
            MemoOut::Str(s.clone().unbind())
        } else if let Ok(list) = out.cast::<PyList>() {
            let mut items = Vec::with_capacity(list.len());
            for obj in list.iter() {
                if let Ok(d) = obj.cast::<PyDict>() {
                    items.push((memo_copy(d)?.into_any().unbind(), true));
                } else if obj.is_exact_instance_of::<PyString>() {
                    items.push((obj.unbind(), false));
                } else {
                    return Ok(None);
                }
            }
            MemoOut::List(items)
        } else {
            return Ok(None);
        };
        let mut row = Vec::with_capacity(2 * entry.len());
        for (k, v) in entry.iter() {
            row.push(k.unbind());
            row.push(v.unbind());
        }
        Ok(Some(Self { label, row, out }))
    }
}

struct Compiler<'py> {
    sources: Vec<(Py<PyDict>, bool)>,
    _py: Python<'py>,
}

impl<'py> Compiler<'py> {
    /// A template item, owned by the compiled template; role dicts are kept as sources.
    fn item(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<Item<'static>> {
        let mut strs = Strs::default();
        let (raw, deep) = raw_item(obj, &mut strs)?;
        if let (Ok(d), Raw::Role(_)) = (obj.cast::<PyDict>(), &raw) {
            let idx =
                u32::try_from(self.sources.len()).map_err(|_| unsupported("too many items"))?;
            self.sources.push((d.clone().unbind(), deep));
            return Ok(raw.item(&strs, Origin::Template(idx)).into_static());
        }
        Ok(raw.item(&strs, Origin::None).into_static())
    }

    fn plain(obj: &Bound<'py, PyAny>) -> PyResult<Item<'static>> {
        let mut strs = Strs::default();
        let (raw, _) = raw_item(obj, &mut strs)?;
        Ok(raw.item(&strs, Origin::None).into_static())
    }

    /// `begin`/`end`: a list is spliced, anything else is one item.
    fn section(
        &mut self,
        value: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Vec<Item<'static>>>> {
        let Some(value) = value else { return Ok(None) };
        if let Ok(list) = value.cast::<PyList>() {
            list.iter()
                .map(|o| self.item(&o))
                .collect::<PyResult<_>>()
                .map(Some)
        } else {
            Ok(Some(vec![self.item(&value)?]))
        }
    }

    /// `round`: `PromptList +=` semantics (a non-empty str is one item, a dict contributes its keys).
    fn round(&mut self, value: Option<Bound<'py, PyAny>>) -> PyResult<Option<Vec<Item<'static>>>> {
        let Some(value) = value else { return Ok(None) };
        if let Ok(list) = value.cast::<PyList>() {
            return list
                .iter()
                .map(|o| self.item(&o))
                .collect::<PyResult<_>>()
                .map(Some);
        }
        if value.is_exact_instance_of::<PyString>() {
            // `PromptList += s` appends a non-empty str and ignores an empty one
            if value.is_truthy()? {
                return Ok(Some(vec![Self::plain(&value)?]));
            }
            return Ok(Some(Vec::new()));
        }
        if let Ok(d) = value.cast::<PyDict>() {
            return d
                .keys()
                .iter()
                .map(|k| Self::plain(&k))
                .collect::<PyResult<_>>()
                .map(Some);
        }
        Err(unsupported("round that is not a list, str or dict"))
    }

    fn dialogue(&mut self, d: &Bound<'py, PyDict>) -> PyResult<Body> {
        let py = d.py();
        let begin = self.section(d.get_item(pyo3::intern!(py, "begin"))?)?;
        let round = self.round(d.get_item(pyo3::intern!(py, "round"))?)?;
        let end = self.section(d.get_item(pyo3::intern!(py, "end"))?)?;
        Ok(Body::Dialogue(Dialogue::new(begin, round, end)))
    }

    fn body(&mut self, value: &Bound<'py, PyAny>) -> PyResult<Body> {
        if value.is_exact_instance_of::<PyString>() {
            let s = value.cast::<PyString>()?;
            return Ok(Body::Str(
                s.to_str()
                    .map_err(|_| unsupported("template that is not valid UTF-8"))?
                    .to_owned(),
            ));
        }
        if let Ok(d) = value.cast::<PyDict>() {
            return self.dialogue(d);
        }
        Ok(Body::Invalid)
    }
}

fn opt_str(v: Option<&str>) -> Option<String> {
    v.map(str::to_owned)
}

impl PyCompiledTemplate {
    /// The compiled core object.
    pub(crate) fn inner(&self) -> &PromptTemplate {
        &self.inner
    }
}

#[pymethods]
impl PyCompiledTemplate {
    /// Whether the template's dicts and lists still hold what they held when it was compiled
    /// (always, for a template too large to check).
    fn unchanged(&self, py: Python<'_>) -> bool {
        self.shape.as_ref().is_none_or(|s| s.unchanged(py))
    }

    /// Compile `template` (validated by the Python wrapper). `is_meta` says whether a dict
    /// template is a dialogue (`True`) or a label dict (`False`).
    /// `prompt_list` is the class list outputs are returned as; `labels` maps a label dict's
    /// labels to the index of their bodies.
    #[new]
    #[pyo3(signature = (template, is_meta, ice_token, sep_token, single_pass, prompt_list=None, labels=None))]
    fn py_new(
        template: &Bound<'_, PyAny>,
        is_meta: bool,
        ice_token: Option<&str>,
        sep_token: Option<&str>,
        single_pass: bool,
        prompt_list: Option<Py<PyAny>>,
        labels: Option<Py<PyDict>>,
    ) -> PyResult<Self> {
        let mut c = Compiler {
            sources: Vec::new(),
            _py: template.py(),
        };
        let shape = if template.is_instance_of::<PyString>() {
            None
        } else {
            Shape::of(template)
        };
        let bodies = if let Ok(d) = template.cast::<PyDict>() {
            if is_meta {
                vec![c.dialogue(d)?]
            } else {
                d.values()
                    .iter()
                    .map(|v| c.body(&v))
                    .collect::<PyResult<_>>()?
            }
        } else {
            vec![c.body(template)?]
        };
        // the reference deletes the sep token from the template before substituting
        let joined = match (template.cast::<PyString>(), ice_token, single_pass) {
            (Ok(t), None, false) if t.is_exact_instance_of::<PyString>() => {
                t.to_str().ok().and_then(|t| {
                    let t = match sep_token {
                        Some(sep) if !sep.is_empty() => t.replace(sep, ""),
                        _ => t.to_owned(),
                    };
                    JoinedTemplate::new(&t)
                })
            }
            _ => None,
        };
        let substitution = if single_pass {
            Substitution::SinglePass
        } else {
            Substitution::Compat
        };
        Ok(Self {
            inner: PromptTemplate::new(
                bodies,
                opt_str(ice_token),
                opt_str(sep_token),
                substitution,
            ),
            // (a dict subclass's source is marked deep, but copied by its proven clone: its
            // outputs are remembered like plain dicts')
            memo: c
                .sources
                .iter()
                .all(|(d, deep)| !deep || !d.bind(template.py()).is_exact_instance_of::<PyDict>())
                .then(|| Mutex::new(IceMemo::default())),
            sources: c.sources,
            shape,
            has_ice_token: ice_token.is_some(),
            joined,
            prompt_list,
            labels,
        })
    }

    /// `generate_ice_item(entry, label)`.
    fn ice_item<'py>(
        &self,
        entry: &Bound<'py, PyAny>,
        label: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let entry = exact_dict(entry)?;
        let label = self.label_index(label)?;
        let py = entry.py();
        let Some(memo) = &self.memo else {
            return self.render_ice_item(entry, label);
        };
        let identity = row_identity(entry, label);
        if let Some((ptrs, h)) = &identity {
            // the lock is let go before any Python object is made: making one may run a
            // collection, and a finalizer could call back here
            let hit = {
                let memo = memo.lock().map_err(|_| poisoned())?;
                memo.entries
                    .get(h)
                    .filter(|e| e.matches(label, ptrs))
                    .cloned()
            };
            if let Some(hit) = hit {
                return hit.output(py, self);
            }
        }
        let out = self.render_ice_item(entry, label)?;
        if let Some((_, h)) = identity {
            if let Some(new) = MemoEntry::new(entry, label, &out)? {
                let mut memo = memo.lock().map_err(|_| poisoned())?;
                // what is dropped (objects of other rows) is dropped after the lock is let go
                let old = if memo.entries.len() >= MEMO_ENTRIES {
                    std::mem::take(&mut memo.entries)
                } else {
                    HashMap::default()
                };
                let replaced = memo.entries.insert(h, Arc::new(new));
                drop(memo);
                drop((old, replaced));
            }
        }
        Ok(out)
    }

    /// `generate_label_prompt_item(entry, ice, label, remain_sep)`.
    fn label_prompt_item<'py>(
        &self,
        entry: &Bound<'py, PyAny>,
        ice: &Bound<'py, PyAny>,
        label: &Bound<'py, PyAny>,
        remain_sep: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let entry = exact_dict(entry)?;
        let label = self.label_index(label)?;
        let row = RowStrings::for_items(entry, None)?;
        self.with_ice(ice, &row, WithIce::Label { label, remain_sep })
    }

    /// `generate_item(entry, output_field, output_field_replace_token, ice_field_replace_token)`.
    #[pyo3(signature = (entry, output_field, output_field_replace_token, ice))]
    fn item<'py>(
        &self,
        entry: &Bound<'py, PyAny>,
        output_field: Option<&Bound<'py, PyAny>>,
        output_field_replace_token: &Bound<'py, PyAny>,
        ice: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let entry = exact_dict(entry)?;
        if let Some(joined) = &self.joined {
            let mask = output_field.map(|field| (field, output_field_replace_token));
            if let Some((out, _)) = joined.render(entry, mask)? {
                return Ok(out);
            }
        }
        let mask = output_field.map(|field| (field, output_field_replace_token));
        let row = RowStrings::for_items(entry, mask)?;
        self.with_ice(ice, &row, WithIce::Item)
    }
}

/// The row as an exact `dict` (a mapping of another type goes to the pure-Python path).
fn exact_dict<'a, 'py>(entry: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyDict>> {
    entry
        .cast_exact::<PyDict>()
        .map_err(|_| unsupported("row that is not a dict"))
}

fn poisoned() -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err("promptweave: a template's memo lock is poisoned")
}

/// Which operation takes an in-context example.
#[derive(Clone, Copy)]
enum WithIce {
    Label { label: usize, remain_sep: bool },
    Item,
}

impl PyCompiledTemplate {
    /// The index of `label`'s body; an unknown or unhashable label goes to the pure-Python path
    /// (which raises the reference's error).
    fn label_index(&self, label: &Bound<'_, PyAny>) -> PyResult<usize> {
        let Some(labels) = &self.labels else {
            return Ok(0);
        };
        match labels.bind(label.py()).get_item(label) {
            Ok(Some(i)) => i.extract(),
            Ok(None) | Err(_) => Err(unsupported("label that is not one of the template's")),
        }
    }

    fn render_ice_item<'py>(
        &self,
        entry: &Bound<'py, PyDict>,
        label: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let row = RowStrings::for_items(entry, None)?;
        let out = self
            .inner
            .ice_item(&row.entries(), label)
            .map_err(|e| to_py_err(&e))?;
        self.to_py(entry.py(), &out, None)
    }

    /// An empty list of the class outputs are returned as (the flavour's `PromptList`).
    fn new_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        empty_list(py, self.prompt_list.as_ref().map(|cls| cls.bind(py)))
    }

    fn call<'a>(
        &'a self,
        op: WithIce,
        row: &RowStrings,
        ice: Ice<'_, 'a>,
    ) -> PyResult<Rendered<'a>> {
        let entries = row.entries();
        let out = match op {
            WithIce::Label { label, remain_sep } => self
                .inner
                .label_prompt_item(&entries, ice, label, remain_sep),
            WithIce::Item => self.inner.item(&entries, ice),
        };
        out.map_err(|e| to_py_err(&e))
    }

    fn with_ice<'py>(
        &self,
        ice: &Bound<'py, PyAny>,
        row: &RowStrings,
        op: WithIce,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = ice.py();
        if !self.has_ice_token {
            return self.to_py(py, &self.call(op, row, Ice::Str(""))?, None);
        }
        if ice.is_exact_instance_of::<PyString>() {
            let s = ice.cast::<PyString>()?;
            let text = s
                .to_str()
                .map_err(|_| unsupported("ICE that is not valid UTF-8"))?;
            return self.to_py(py, &self.call(op, row, Ice::Str(text))?, None);
        }
        // only a PromptList splices; any other list is the reference's drop-the-item quirk
        let list = ice
            .cast::<PyList>()
            .map_err(|_| unsupported("ICE that is neither str nor list"))?;
        let ours = self
            .prompt_list
            .as_ref()
            .is_some_and(|cls| list.get_type().is(cls.bind(py)));
        if !ours && list.get_type().name()?.to_str()? != "PromptList" {
            return Err(unsupported("ICE list that is not a PromptList"));
        }
        let input = InputItems::from_list(list)?;
        let items = input.items();
        let out = self.call(op, row, Ice::List(&items))?;
        self.to_py(py, &out, Some((list, &input)))
    }

    fn to_py<'py>(
        &self,
        py: Python<'py>,
        out: &Rendered<'_>,
        input: Option<(&Bound<'py, PyList>, &InputItems)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match out {
            Rendered::Str(s) => Ok(PyString::new(py, s).into_any()),
            Rendered::List(items) => {
                let src = Sources {
                    template: &self.sources,
                    input,
                };
                let list = self.new_list(py)?;
                items_to_py(py, items, &src, &list)?;
                Ok(list.into_any())
            }
        }
    }
}

/// A `PromptTemplate`'s `generate_item` and `generate_ice_item` as Rust methods, which the
/// Python template takes as its own (a per-row call then runs no Python frame): the compiled
/// template renders, and what it does not model (or everything, under `FORCE_PYTHON`) goes to
/// the template's pure-Python methods (`_generate_item_python`, `_generate_ice_item_python`).
#[pyclass(name = "TemplateMethods", module = "promptweave._core", frozen)]
pub(crate) struct PyTemplateMethods {
    /// the Python template, held strongly (reported to the garbage collector, which frees the
    /// cycle through the template's instance dict)
    template: Py<PyAny>,
    compiled: Py<PyCompiledTemplate>,
    backend: Backend,
}

impl PyTemplateMethods {
    /// The compiled template's `render()`, or (the core gave up, or `FORCE_PYTHON`) the
    /// Python method `name` with `args`.
    fn or_python<'py, A: pyo3::call::PyCallArgs<'py>>(
        &self,
        py: Python<'py>,
        render: impl FnOnce(&PyCompiledTemplate) -> PyResult<Bound<'py, PyAny>>,
        name: &Bound<'py, PyString>,
        args: A,
    ) -> PyResult<Bound<'py, PyAny>> {
        let compiled = self.compiled.get();
        if !compiled.unchanged(py) {
            // changed in place since it was compiled: compiled again (with these methods
            // replaced), and this call rendered as the reference renders it
            let template = self.template.bind(py);
            template.call_method0(pyo3::intern!(py, "_recompile"))?;
            return template.call_method1(name, args);
        }
        match self.backend.rendered(py, || render(compiled))? {
            Some(out) => Ok(out),
            None => self.template.bind(py).call_method1(name, args),
        }
    }
}

/// `''`, the default replacement tokens of `generate_item`.
fn empty_token() -> Py<PyAny> {
    Python::attach(|py| pyo3::intern!(py, "").clone().into_any().unbind())
}

/// `False`, the default `remain_sep` of `generate_label_prompt_item`.
fn false_value() -> Py<PyAny> {
    Python::attach(|py| {
        pyo3::types::PyBool::new(py, false)
            .to_owned()
            .into_any()
            .unbind()
    })
}

#[pymethods]
impl PyTemplateMethods {
    #[new]
    fn py_new(template: &Bound<'_, PyAny>, compiled: Py<PyCompiledTemplate>) -> PyResult<Self> {
        let py = template.py();
        Ok(Self {
            template: template.clone().unbind(),
            compiled,
            backend: Backend::import(py)?,
        })
    }

    // PyO3 hands the visitor over by value
    #[allow(clippy::needless_pass_by_value)]
    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.template)?;
        visit.call(&self.compiled)
    }

    /// `PromptTemplate.generate_item`, with its signature and defaults.
    // PyO3 hands a defaulted argument over by value
    #[allow(clippy::needless_pass_by_value)]
    #[pyo3(
        signature = (entry, output_field=None, output_field_replace_token=empty_token(), ice_field_replace_token=empty_token()),
        text_signature = "($self, entry, output_field=None, output_field_replace_token='', ice_field_replace_token='')"
    )]
    fn generate_item<'py>(
        &self,
        py: Python<'py>,
        entry: &Bound<'py, PyAny>,
        output_field: Option<&Bound<'py, PyAny>>,
        output_field_replace_token: Py<PyAny>,
        ice_field_replace_token: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (token, ice) = (
            output_field_replace_token.bind(py),
            ice_field_replace_token.bind(py),
        );
        let name = pyo3::intern!(py, "_generate_item_python");
        self.or_python(
            py,
            |compiled| compiled.item(entry, output_field, token, ice),
            name,
            (entry, output_field, token, ice),
        )
    }

    /// `PromptTemplate.generate_label_prompt_item`, with its signature and default.
    // PyO3 hands a defaulted argument over by value
    #[allow(clippy::needless_pass_by_value)]
    #[pyo3(
        signature = (entry, ice, label, remain_sep=false_value()),
        text_signature = "($self, entry, ice, label, remain_sep=False)"
    )]
    fn generate_label_prompt_item<'py>(
        &self,
        py: Python<'py>,
        entry: &Bound<'py, PyAny>,
        ice: &Bound<'py, PyAny>,
        label: &Bound<'py, PyAny>,
        remain_sep: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let remain_sep = remain_sep.bind(py);
        // `bool(remain_sep)`, as the Python method asks it
        let keep = remain_sep.is_truthy()?;
        let name = pyo3::intern!(py, "_generate_label_prompt_item_python");
        self.or_python(
            py,
            |compiled| compiled.label_prompt_item(entry, ice, label, keep),
            name,
            (entry, ice, label, remain_sep),
        )
    }

    /// `PromptTemplate.generate_ice_item`.
    fn generate_ice_item<'py>(
        &self,
        py: Python<'py>,
        entry: &Bound<'py, PyAny>,
        label: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let name = pyo3::intern!(py, "_generate_ice_item_python");
        self.or_python(
            py,
            |compiled| compiled.ice_item(entry, label),
            name,
            (entry, label),
        )
    }
}
