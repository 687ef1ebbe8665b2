//! `MetaTemplate`: a compiled model meta template (LM and API walks), and `ParseMethod`, the
//! `parse_template` an `LMTemplateParser` or `APITemplateParser` takes as its own.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use pyo3::{PyTraverseError, PyVisit, intern};

use promptweave_core::{Flavor, MetaEntry, MetaTemplate, Mode, RoleSpec};

use crate::convert::InputItems;
use crate::errors::{Backend, to_py_err, unsupported};

/// A compiled meta template.
#[pyclass(frozen, name = "MetaTemplate", module = "promptweave._core")]
pub(crate) struct PyMetaTemplate {
    inner: MetaTemplate,
}

fn opt_field(d: &Bound<'_, PyDict>, key: &str) -> PyResult<Option<String>> {
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) if v.is_exact_instance_of::<PyString>() => Ok(Some(
            v.cast::<PyString>()?
                .to_str()
                .map_err(|_| unsupported("meta string that is not valid UTF-8"))?
                .to_owned(),
        )),
        Some(_) => Err(unsupported("meta template value that is not a str")),
    }
}

fn role_spec(d: &Bound<'_, PyDict>) -> PyResult<RoleSpec> {
    let name = opt_field(d, "role")?.ok_or_else(|| unsupported("meta role without a str role"))?;
    Ok(RoleSpec {
        name,
        begin: opt_field(d, "begin")?,
        end: opt_field(d, "end")?,
        prompt: opt_field(d, "prompt")?,
        generate: match d.get_item("generate")? {
            Some(v) => v.is_truthy()?,
            None => false,
        },
        api_role: opt_field(d, "api_role")?,
    })
}

fn mode(gen_mode: bool) -> Mode {
    if gen_mode { Mode::Gen } else { Mode::Ppl }
}

impl PyMetaTemplate {
    /// The compiled core object.
    pub(crate) fn inner(&self) -> &MetaTemplate {
        &self.inner
    }
}

#[pymethods]
impl PyMetaTemplate {
    /// Compile a dict meta template (validated by the Python wrapper).
    #[new]
    fn py_new(meta: &Bound<'_, PyDict>) -> PyResult<Self> {
        let round = meta
            .get_item("round")?
            .ok_or_else(|| unsupported("meta without round"))?;
        let round = round
            .cast::<PyList>()
            .map_err(|_| unsupported("round that is not a list"))?;
        if round.is_empty() {
            // the reference's LM parser fails on any round or ice section then; the Python
            // path raises its error
            return Err(unsupported("empty meta round"));
        }
        let mut entries = Vec::with_capacity(round.len());
        for obj in round.iter() {
            if obj.is_exact_instance_of::<PyString>() {
                let s = obj.cast::<PyString>()?;
                entries.push(MetaEntry::Text(
                    s.to_str()
                        .map_err(|_| unsupported("not valid UTF-8"))?
                        .to_owned(),
                ));
            } else {
                let d = obj
                    .cast::<PyDict>()
                    .map_err(|_| unsupported("round entry"))?;
                entries.push(MetaEntry::Role(role_spec(d)?));
            }
        }
        let mut reserved = Vec::new();
        if let Some(list) = meta.get_item("reserved_roles")? {
            let list = list
                .cast::<PyList>()
                .map_err(|_| unsupported("reserved_roles"))?;
            for obj in list.iter() {
                if let Ok(d) = obj.cast::<PyDict>() {
                    reserved.push(role_spec(d)?);
                } else if !obj.is_exact_instance_of::<PyString>() {
                    return Err(unsupported("reserved role entry"));
                }
            }
        }
        let inner = MetaTemplate::new(
            entries,
            reserved,
            opt_field(meta, "begin")?,
            opt_field(meta, "end")?,
        )
        .map_err(|e| to_py_err(&e))?;
        Ok(Self { inner })
    }

    /// The LM walk: one string.
    fn render_lm(&self, prompt: &Bound<'_, PyList>, gen_mode: bool) -> PyResult<String> {
        let input = InputItems::from_list(prompt)?;
        let items = input.items();
        self.inner
            .render_lm(&items, mode(gen_mode))
            .map_err(|e| to_py_err(&e))
    }

    /// The API walk: `(messages, ignored_text_count)` where messages is a list of
    /// `{'role', 'prompt'}` dicts, preceded by the meta `begin` string when it is truthy.
    fn render_api<'py>(
        &self,
        prompt: &Bound<'py, PyList>,
        gen_mode: bool,
        aisbench: bool,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let py = prompt.py();
        let input = InputItems::from_list(prompt)?;
        let items = input.items();
        let flavor = if aisbench {
            Flavor::AisBench
        } else {
            Flavor::OpenCompass
        };
        let out = self
            .inner
            .render_api(&items, mode(gen_mode), flavor)
            .map_err(|e| to_py_err(&e))?;
        let list = PyList::empty(py);
        if let Some(b) = &out.begin {
            list.append(b)?;
        }
        for m in &out.messages {
            let d = PyDict::new(py);
            d.set_item(pyo3::intern!(py, "role"), &m.role)?;
            d.set_item(pyo3::intern!(py, "prompt"), &m.prompt)?;
            list.append(d)?;
        }
        Ok((list, out.ignored_texts))
    }
}

/// `parse_template` of an `LMTemplateParser` or an `APITemplateParser` for its common cases,
/// installed on a parser as its own instance method (a per-row call then runs no Python
/// frame): a `str` prompt is returned as it is, a `PromptList` of the parser's flavour is
/// rendered by the meta template (API: into the flavour's `PromptList` of messages); anything
/// else (and everything under `FORCE_PYTHON`, and what the core gives up on) is handed to the
/// class method, the one definition of the full behaviour.
#[pyclass(frozen, name = "ParseMethod", module = "promptweave._core")]
pub(crate) struct PyParseMethod {
    /// the parser, held strongly (a temporary one, as in `LMTemplateParser(m).parse_template
    /// (...)`, must live through the call); reported to the garbage collector, which frees the
    /// cycle through the parser's instance dict
    parser: Py<PyAny>,
    meta: Option<Py<PyMetaTemplate>>,
    prompt_list: Py<PyAny>,
    /// `None`: an `LMTemplateParser`; else an `APITemplateParser` of this framework
    api: Option<Flavor>,
    backend: Backend,
}

/// Whether a prompt list is OpenCompass raw messages (`"role" in x and "content" in x` for
/// every item, keys of dicts and substrings of strings alike); `None` when an item is of
/// another type (the class method then does what the reference does with it).
fn raw_messages(list: &Bound<'_, PyList>) -> PyResult<Option<bool>> {
    let py = list.py();
    if list.is_empty() {
        return Ok(Some(false));
    }
    for item in list.iter() {
        let (role, content) = (intern!(py, "role"), intern!(py, "content"));
        let has = if let Ok(d) = item.cast_exact::<PyDict>() {
            d.contains(role)? && d.contains(content)?
        } else if let Ok(s) = item.cast_exact::<PyString>() {
            let Ok(text) = s.to_str() else {
                return Ok(None);
            };
            text.contains("role") && text.contains("content")
        } else {
            return Ok(None);
        };
        if !has {
            return Ok(Some(false));
        }
    }
    Ok(Some(true))
}

impl PyParseMethod {
    /// The shortcut's result; `None` when the class method must render.
    fn shortcut<'py>(
        &self,
        py: Python<'py>,
        prompt_template: &Bound<'py, PyAny>,
        mode: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let gen_mode = match mode.cast_exact::<PyString>().map(|m| m.to_str()) {
            Ok(Ok("gen")) => true,
            Ok(Ok("ppl")) => false,
            _ => return Ok(None),
        };
        if prompt_template.is_exact_instance_of::<PyString>() {
            return Ok(Some(prompt_template.clone()));
        }
        let Some(meta) = &self.meta else {
            return Ok(None);
        };
        if !prompt_template.get_type().is(self.prompt_list.bind(py)) {
            return Ok(None);
        }
        let list = prompt_template.cast::<PyList>()?;
        let Some(flavor) = self.api else {
            return self.backend.rendered(py, || {
                let s = meta.get().render_lm(list, gen_mode)?;
                Ok(PyString::new(py, &s).into_any())
            });
        };
        if flavor == Flavor::OpenCompass && raw_messages(list)? != Some(false) {
            return Ok(None);
        }
        self.backend.rendered(py, || {
            let (messages, ignored) =
                meta.get()
                    .render_api(list, gen_mode, flavor == Flavor::AisBench)?;
            if ignored > 0 {
                // the class method warns once per ignored text
                return Err(unsupported("text items an API model ignores"));
            }
            self.prompt_list.bind(py).call1((messages,))
        })
    }
}

#[pymethods]
impl PyParseMethod {
    /// Serve `parser`, whose compiled meta template is `meta` (`None`: none, or one the core
    /// does not model) and whose `PromptList` class is `prompt_list`; `api` is `None` for an
    /// `LMTemplateParser`, else the API parser's framework (`'opencompass'`, `'aisbench'`).
    #[new]
    #[pyo3(signature = (parser, meta, prompt_list, api=None))]
    fn py_new(
        parser: &Bound<'_, PyAny>,
        meta: Option<Py<PyMetaTemplate>>,
        prompt_list: Py<PyAny>,
        api: Option<&str>,
    ) -> PyResult<Self> {
        let py = parser.py();
        let api = match api {
            None => None,
            Some("opencompass") => Some(Flavor::OpenCompass),
            Some("aisbench") => Some(Flavor::AisBench),
            Some(other) => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "api must be None, 'opencompass' or 'aisbench', not {other:?}"
                )));
            }
        };
        Ok(Self {
            parser: parser.clone().unbind(),
            meta,
            prompt_list,
            api,
            backend: Backend::import(py)?,
        })
    }

    // PyO3 hands the visitor over by value
    #[allow(clippy::needless_pass_by_value)]
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.parser)?;
        if let Some(meta) = &self.meta {
            visit.call(meta)?;
        }
        visit.call(&self.prompt_list)
    }

    fn parse_template<'py>(
        &self,
        py: Python<'py>,
        prompt_template: &Bound<'py, PyAny>,
        mode: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(out) = self.shortcut(py, prompt_template, mode)? {
            return Ok(out);
        }
        // `type(parser).parse_template(parser, prompt_template, mode)`
        let parser = self.parser.bind(py);
        parser
            .get_type()
            .getattr(intern!(py, "parse_template"))?
            .call1((parser, prompt_template, mode))
    }
}
