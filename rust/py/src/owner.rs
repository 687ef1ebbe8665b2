//! Methods the Python wrappers take over as their own.
//!
//! A wrapper (`LMTemplateParser`) installs a compiled object's bound method
//! as an instance attribute under the name of its own method, so that a per-row call goes
//! straight into Rust, without a Python frame. The bound method renders what the wrapper's
//! shortcut renders (the same core call) and hands every other case back to the wrapper's
//! class method, which is the single definition of the full behaviour (the pure-Python path,
//! `FORCE_PYTHON`, the fallback count, the reference's errors).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::errors::FallbackRequired;

/// The wrapper a compiled object serves. It is held strongly (a temporary wrapper, as in
/// `LMTemplateParser(meta).parse_template(...)`, must live through the call): the objects
/// holding an `Owner` report it to the garbage collector, which frees the cycle.
pub(crate) struct Owner {
    wrapper: Py<PyAny>,
    /// the namespace of `promptweave._backend`, whose `FORCE_PYTHON` is read on every call
    /// (tests switch it after the wrappers are built)
    backend: Py<PyDict>,
}

impl Owner {
    pub(crate) fn new(wrapper: &Bound<'_, PyAny>) -> PyResult<Self> {
        let py = wrapper.py();
        Ok(Self {
            wrapper: wrapper.clone().unbind(),
            backend: py.import("promptweave._backend")?.dict().unbind(),
        })
    }

    /// Whether every call must take the pure-Python path.
    pub(crate) fn force_python(&self, py: Python<'_>) -> PyResult<bool> {
        match self
            .backend
            .bind(py)
            .get_item(pyo3::intern!(py, "FORCE_PYTHON"))?
        {
            Some(v) => v.is_truthy(),
            None => Ok(false),
        }
    }

    /// `type(wrapper).<method>(wrapper, *args)`.
    pub(crate) fn delegate<'py>(
        &self,
        py: Python<'py>,
        method: &Bound<'py, PyString>,
        args: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let wrapper = self.wrapper.bind(py).clone();
        let function = wrapper.get_type().getattr(method)?;
        let mut all = Vec::with_capacity(args.len() + 1);
        all.push(wrapper);
        all.extend(args);
        function.call1(PyTuple::new(py, all)?)
    }
}

/// `Ok(Some(out))` for a core result, `Ok(None)` when the core asked for the pure-Python path
/// (`FallbackRequired`), the error otherwise.
pub(crate) fn unless_fallback<'py>(
    py: Python<'py>,
    result: PyResult<Bound<'py, PyAny>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match result {
        Ok(out) => Ok(Some(out)),
        Err(e) if e.is_instance_of::<FallbackRequired>(py) => Ok(None),
        Err(e) => Err(e),
    }
}

impl Owner {
    /// Reports the objects held to the garbage collector.
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.wrapper)?;
        visit.call(&self.backend)
    }
}
