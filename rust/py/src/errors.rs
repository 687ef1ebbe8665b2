//! The exceptions the binding raises itself.
//!
//! The core renders the well-typed inputs of real configs. Anything it does not model (lone
//! surrogates, non-str values where the reference concatenates, unusual dict shapes) and every
//! core error raise `FallbackRequired`; the Python wrapper then runs the pure-Python reference
//! algorithm, which produces the reference's result or its precise, documented exception.
//! Strict multimodal content errors raise `MarkerError` instead, which the wrapper turns into
//! `promptweave.errors.MultimodalContentError`.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::pyfunction;

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

/// `promptweave._backend.FORCE_PYTHON`, as that module last set it (its module class hands every
/// assignment over: tests switch it after the objects are built). An atomic read instead of a
/// dictionary lookup on every call: about 8% of a W1 `generate_item`.
static FORCE_PYTHON: AtomicBool = AtomicBool::new(false);

/// `_set_force_python(on)`: called by `promptweave._backend` whenever `FORCE_PYTHON` is set.
#[pyfunction]
#[pyo3(name = "_set_force_python")]
pub(crate) fn set_force_python(on: bool) {
    FORCE_PYTHON.store(on, Ordering::Relaxed);
}

/// The switch between the Rust core and the pure-Python path, for the Rust methods installed on
/// Python objects.
pub(crate) struct Backend(());

impl Backend {
    /// Imports `promptweave._backend` (which sets the switch) if it is not yet.
    pub(crate) fn import(py: pyo3::Python<'_>) -> pyo3::PyResult<Self> {
        py.import("promptweave._backend")?;
        Ok(Self(()))
    }

    /// The core's `render()`, or `None` when the pure-Python path must render instead:
    /// `FORCE_PYTHON` is set, or the core raised `FallbackRequired` (what it does not model).
    /// Any other error is the call's. (`self` is the proof that `_backend` has set the switch.)
    #[allow(clippy::unused_self)]
    pub(crate) fn rendered<T>(
        &self,
        py: pyo3::Python<'_>,
        render: impl FnOnce() -> pyo3::PyResult<T>,
    ) -> pyo3::PyResult<Option<T>> {
        if FORCE_PYTHON.load(Ordering::Relaxed) {
            return Ok(None);
        }
        match render() {
            Ok(out) => Ok(Some(out)),
            Err(e) if e.is_instance_of::<FallbackRequired>(py) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
