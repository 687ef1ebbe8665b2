//! `CompiledTemplate`: a compiled `PromptTemplate` body set.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use promptweave_core::{Body, Dialogue, Ice, Item, Origin, PromptTemplate, Rendered, Substitution};

use crate::convert::{InputItems, Raw, RowStrings, Sources, items_to_py, raw_item};
use crate::errors::{to_py_err, unsupported};
use crate::joined::JoinedTemplate;

/// A compiled prompt template (string, dialogue or label dict).
#[pyclass(frozen, name = "CompiledTemplate", module = "promptweave._core")]
pub(crate) struct PyCompiledTemplate {
    inner: PromptTemplate,
    sources: Vec<(Py<PyDict>, bool)>,
    has_ice_token: bool,
    /// string templates without an ice token: `generate_item` joined from Python strings
    joined: Option<JoinedTemplate>,
}

struct Compiler<'py> {
    sources: Vec<(Py<PyDict>, bool)>,
    _py: Python<'py>,
}

impl<'py> Compiler<'py> {
    /// A template item, owned by the compiled template; role dicts are kept as sources.
    fn item(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<Item<'static>> {
        let (raw, deep) = raw_item(obj)?;
        if let (Ok(d), Raw::Role(_)) = (obj.cast::<PyDict>(), &raw) {
            let idx =
                u32::try_from(self.sources.len()).map_err(|_| unsupported("too many items"))?;
            self.sources.push((d.clone().unbind(), deep));
            return Ok(raw.item(Origin::Template(idx)).into_static());
        }
        Ok(raw.item(Origin::None).into_static())
    }

    fn plain(obj: &Bound<'py, PyAny>) -> PyResult<Item<'static>> {
        Ok(raw_item(obj)?.0.item(Origin::None).into_static())
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
    /// Compile `template` (validated by the Python wrapper). `is_meta` says whether a dict
    /// template is a dialogue (`True`) or a label dict (`False`).
    #[new]
    #[pyo3(signature = (template, is_meta, ice_token, sep_token, single_pass))]
    fn py_new(
        template: &Bound<'_, PyAny>,
        is_meta: bool,
        ice_token: Option<&str>,
        sep_token: Option<&str>,
        single_pass: bool,
    ) -> PyResult<Self> {
        let mut c = Compiler {
            sources: Vec::new(),
            _py: template.py(),
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
                    JoinedTemplate::new(template.py(), &t)
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
            sources: c.sources,
            has_ice_token: ice_token.is_some(),
            joined,
        })
    }

    /// `generate_ice_item(entry, label)` with the label's index.
    fn ice_item<'py>(
        &self,
        entry: &Bound<'py, PyDict>,
        label: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let row = RowStrings::from_dict(entry)?;
        let out = self
            .inner
            .ice_item(&row.entries(), label)
            .map_err(|e| to_py_err(&e))?;
        self.to_py(entry.py(), &out, None)
    }

    /// `generate_label_prompt_item(entry, ice, label, remain_sep)` with the label's index.
    fn label_prompt_item<'py>(
        &self,
        entry: &Bound<'py, PyDict>,
        ice: &Bound<'py, PyAny>,
        label: usize,
        remain_sep: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let row = RowStrings::from_dict(entry)?;
        self.with_ice(ice, &row, WithIce::Label { label, remain_sep })
    }

    /// `generate_item(entry, output_field, output_field_replace_token, ice_field_replace_token)`.
    #[pyo3(signature = (entry, output_field, output_field_replace_token, ice))]
    fn item<'py>(
        &self,
        entry: &Bound<'py, PyDict>,
        output_field: Option<&Bound<'py, PyAny>>,
        output_field_replace_token: &Bound<'py, PyAny>,
        ice: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(joined) = &self.joined {
            if let Some(out) = joined.render(entry, output_field, output_field_replace_token)? {
                return Ok(out);
            }
        }
        let mut row = RowStrings::from_dict(entry)?;
        if let Some(field) = output_field {
            row.mask(field, output_field_replace_token)?;
        }
        self.with_ice(ice, &row, WithIce::Item)
    }
}

/// Which operation takes an in-context example.
#[derive(Clone, Copy)]
enum WithIce {
    Label { label: usize, remain_sep: bool },
    Item,
}

impl PyCompiledTemplate {
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
        if list.get_type().name()?.to_str()? != "PromptList" {
            return Err(unsupported("ICE list that is not a PromptList"));
        }
        let input = InputItems::from_list(list)?;
        let items = input.items();
        let out = self.call(op, row, Ice::List(&items))?;
        self.to_py(py, &out, Some((list, &input.deep)))
    }

    fn to_py<'py>(
        &self,
        py: Python<'py>,
        out: &Rendered<'_>,
        input: Option<(&Bound<'py, PyList>, &[bool])>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match out {
            Rendered::Str(s) => Ok(PyString::new(py, s).into_any()),
            Rendered::List(items) => {
                let src = Sources {
                    template: &self.sources,
                    input,
                };
                Ok(items_to_py(py, items, &src)?.into_any())
            }
        }
    }
}
