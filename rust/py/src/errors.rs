//! The one exception the binding raises itself.
//!
//! The core renders the well-typed inputs of real configs. Anything it does not model (lone
//! surrogates, non-str values where the reference concatenates, unusual dict shapes) and every
//! core error raise `FallbackRequired`; the Python wrapper then runs the pure-Python reference
//! algorithm, which produces the reference's result or its precise, documented exception.

use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::PyException;

create_exception!(
    promptweave._core,
    FallbackRequired,
    PyException,
    "The Rust core cannot render this input; use the pure-Python path."
);

/// Map a core error (its message is kept for debugging).
pub(crate) fn to_py_err(err: &promptweave_core::Error) -> PyErr {
    FallbackRequired::new_err(err.to_string())
}

/// An input the core does not model.
pub(crate) fn unsupported(what: &str) -> PyErr {
    FallbackRequired::new_err(format!("unsupported input: {what}"))
}
