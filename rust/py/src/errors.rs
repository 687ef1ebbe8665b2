//! The exceptions the binding raises itself.
//!
//! The core renders the well-typed inputs of real configs. Anything it does not model (lone
//! surrogates, non-str values where the reference concatenates, unusual dict shapes) and every
//! core error raise `FallbackRequired`; the Python wrapper then runs the pure-Python reference
//! algorithm, which produces the reference's result or its precise, documented exception.
//! Strict multimodal content errors raise `MarkerError` instead, which the wrapper turns into
//! `promptweave.errors.MultimodalContentError`.

use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};

create_exception!(
    promptweave._core,
    FallbackRequired,
    PyException,
    "The Rust core cannot render this input; use the pure-Python path."
);

create_exception!(
    promptweave._core,
    MarkerError,
    PyValueError,
    "A strict multimodal content string is malformed: args are (message, tag or None, position)."
);

/// Map a core error (its message is kept for debugging).
pub(crate) fn to_py_err(err: &promptweave_core::Error) -> PyErr {
    FallbackRequired::new_err(err.to_string())
}

/// A strict content error: `MarkerError(message, tag, character position)`.
pub(crate) fn marker_error(err: &promptweave_core::Error) -> PyErr {
    match err.tag_location() {
        Some((tag, position)) => {
            MarkerError::new_err((err.to_string(), tag.map(str::to_owned), position))
        }
        None => to_py_err(err),
    }
}

/// An input the core does not model.
pub(crate) fn unsupported(what: &str) -> PyErr {
    FallbackRequired::new_err(format!("unsupported input: {what}"))
}

/// The namespace of `promptweave._backend`, whose `FORCE_PYTHON` the Rust methods installed on
/// Python objects read on every call (tests switch it after the objects are built).
pub(crate) struct Backend(pyo3::Py<pyo3::types::PyDict>);

impl Backend {
    pub(crate) fn import(py: pyo3::Python<'_>) -> pyo3::PyResult<Self> {
        use pyo3::types::PyModuleMethods;
        Ok(Self(py.import("promptweave._backend")?.dict().unbind()))
    }

    /// Whether everything must take the pure-Python path.
    pub(crate) fn force_python(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<bool> {
        use pyo3::types::{PyAnyMethods, PyDictMethods};
        let force = self
            .0
            .bind(py)
            .get_item(pyo3::intern!(py, "FORCE_PYTHON"))?;
        Ok(force.map(|f| f.is_truthy()).transpose()? == Some(true))
    }

    /// The core's `render()`, or `None` when the pure-Python path must render instead:
    /// `FORCE_PYTHON` is set, or the core raised `FallbackRequired` (what it does not model).
    /// Any other error is the call's.
    pub(crate) fn rendered<T>(
        &self,
        py: pyo3::Python<'_>,
        render: impl FnOnce() -> pyo3::PyResult<T>,
    ) -> pyo3::PyResult<Option<T>> {
        if self.force_python(py)? {
            return Ok(None);
        }
        match render() {
            Ok(out) => Ok(Some(out)),
            Err(e) if e.is_instance_of::<FallbackRequired>(py) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn visit(&self, visit: &pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.0)
    }
}
