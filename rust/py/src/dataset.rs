//! `render_dataset`: the whole-dataset job, rendered with the interpreter released.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyDict, PyList, PyString};

use promptweave_core::{
    Flavor, IceGroups, Job, Output, Parser, Prepared, Table, Task, render_rows,
};

use crate::convert::py_str;
use crate::errors::{to_py_err, unsupported};
use crate::meta::PyMetaTemplate;
use crate::template::PyCompiledTemplate;

/// Rows of one split: column names and the `str()` of every cell, row-major.
struct Columns {
    names: Vec<PyBackedStr>,
    cells: Vec<PyBackedStr>,
}

impl Columns {
    /// From a list of dicts that all have the same keys in the same order.
    fn from_rows(rows: &Bound<'_, PyList>) -> PyResult<Self> {
        let mut names: Vec<PyBackedStr> = Vec::new();
        let mut keys: Vec<Bound<'_, PyAny>> = Vec::new();
        let mut cells = Vec::new();
        for (r, row) in rows.iter().enumerate() {
            let row = row
                .cast::<PyDict>()
                .map_err(|_| unsupported("row that is not a dict"))?;
            if r == 0 {
                for k in row.keys() {
                    if !k.is_exact_instance_of::<PyString>() {
                        return Err(unsupported("column name that is not a str"));
                    }
                    names.push(py_str(&k)?);
                    keys.push(k);
                }
                cells.reserve(rows.len() * names.len());
            } else if row.len() != keys.len() {
                return Err(unsupported("rows with different columns"));
            }
            for (i, (k, v)) in row.iter().enumerate() {
                // same key object (the usual case) or an equal str, in the same position
                if !k.is(&keys[i]) && !k.eq(&keys[i])? {
                    return Err(unsupported("rows with different columns"));
                }
                cells.push(py_str(&v)?);
            }
        }
        Ok(Self { names, cells })
    }
}

fn strs(v: &[PyBackedStr]) -> Vec<&str> {
    v.iter().map(|s| &**s).collect()
}

fn extract_indices(ice_indices: &Bound<'_, PyList>) -> PyResult<Vec<Vec<usize>>> {
    ice_indices
        .iter()
        .map(|l| l.extract::<Vec<usize>>())
        .collect()
}

/// Why the detached part failed.
enum Failure {
    Core(promptweave_core::Error),
    Panic,
}

impl From<promptweave_core::Error> for Failure {
    fn from(e: promptweave_core::Error) -> Self {
        Self::Core(e)
    }
}

/// Build the Python value of one output.
fn output_to_py(py: Python<'_>, out: Output, ais_no_meta_api: bool) -> PyResult<Bound<'_, PyAny>> {
    match out {
        Output::Text(s) if ais_no_meta_api && s.is_empty() => Ok(PyList::empty(py).into_any()),
        Output::Text(s) => Ok(PyString::new(py, &s).into_any()),
        Output::Messages(m) => {
            let list = PyList::empty(py);
            if let Some(b) = &m.begin {
                list.append(b)?;
            }
            for msg in &m.messages {
                let d = PyDict::new(py);
                d.set_item(pyo3::intern!(py, "role"), &msg.role)?;
                d.set_item(pyo3::intern!(py, "prompt"), &msg.prompt)?;
                list.append(d)?;
            }
            Ok(list.into_any())
        }
    }
}

/// Render every test row.
///
/// Returns `(outputs, ignored_text_count)`: one output per row in gen mode, `len(labels)` per
/// row (row-major) in ppl mode; each output is a `str`, or a list of `{'role', 'prompt'}` dicts
/// for an API parser with a meta template.
#[pyfunction]
#[pyo3(signature = (
    template, ice_template, ice_labels, ice_separator, ice_eos_token, output_column,
    gen_field_replace_token, meta, api, aisbench, test_rows, train_rows, ice_indices,
    ppl_labels, remain_sep, threads
))]
// one flat call keeps the binding thin; PyO3 extracts the lists by value
#[allow(clippy::too_many_arguments, clippy::needless_pass_by_value)]
pub(crate) fn render_dataset<'py>(
    py: Python<'py>,
    template: &Bound<'py, PyCompiledTemplate>,
    ice_template: Option<&Bound<'py, PyCompiledTemplate>>,
    ice_labels: Vec<usize>,
    ice_separator: &str,
    ice_eos_token: &str,
    output_column: Option<&str>,
    gen_field_replace_token: &str,
    meta: Option<&Bound<'py, PyMetaTemplate>>,
    api: bool,
    aisbench: bool,
    test_rows: &Bound<'py, PyList>,
    train_rows: &Bound<'py, PyList>,
    ice_indices: &Bound<'py, PyList>,
    ppl_labels: Option<Vec<usize>>,
    remain_sep: bool,
    threads: usize,
) -> PyResult<Bound<'py, PyList>> {
    let test = Columns::from_rows(test_rows)?;
    let train = Columns::from_rows(train_rows)?;
    let indices = extract_indices(ice_indices)?;
    if indices.len() != test_rows.len() {
        return Err(unsupported("one ICE index list per test row is needed"));
    }
    let flavor = if aisbench {
        Flavor::AisBench
    } else {
        Flavor::OpenCompass
    };
    let meta_inner = meta.map(|m| m.get().inner());
    let parser = if api {
        Parser::Api(meta_inner, flavor)
    } else {
        Parser::Lm(meta_inner)
    };
    let job = Job {
        template: template.get().inner(),
        ice_template: ice_template.map(|t| t.get().inner()),
        ice_labels: &ice_labels,
        ice_separator,
        ice_eos_token,
        output_column,
        gen_field_replace_token,
        parser,
    };
    let (test_names, test_cells) = (strs(&test.names), strs(&test.cells));
    let (train_names, train_cells) = (strs(&train.names), strs(&train.cells));
    let test_table =
        Table::new(&test_names, &test_cells).ok_or_else(|| unsupported("ragged test table"))?;
    let train_table =
        Table::new(&train_names, &train_cells).ok_or_else(|| unsupported("ragged train table"))?;
    let task = match &ppl_labels {
        None => Task::Gen,
        Some(labels) => Task::Ppl { labels, remain_sep },
    };
    let rows = test_table.rows();
    let outputs = py.detach(|| -> Result<Vec<Output>, Failure> {
        let groups = IceGroups::new(&indices);
        let prepared = Prepared::new(&job, &test_table, &train_table, &groups, task)?;
        let threads = threads.clamp(1, 16);
        if threads == 1 || rows < 2 * threads {
            return Ok(render_rows(
                &job,
                &test_table,
                &groups,
                &prepared,
                task,
                0..rows,
            )?);
        }
        let chunk = rows.div_ceil(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let range = (t * chunk).min(rows)..((t + 1) * chunk).min(rows);
                    let (job, table, groups, prepared) = (&job, &test_table, &groups, &prepared);
                    s.spawn(move || render_rows(job, table, groups, prepared, task, range))
                })
                .collect();
            let mut all = Vec::with_capacity(rows);
            for h in handles {
                all.extend(h.join().map_err(|_| Failure::Panic)??);
            }
            Ok(all)
        })
    });
    let outputs = outputs.map_err(|e| match e {
        Failure::Core(e) => to_py_err(&e),
        // a bug, never a user error: surface it as such instead of crashing the process
        Failure::Panic => PyRuntimeError::new_err("promptweave: a rendering thread panicked"),
    })?;
    let ais_no_meta_api = api && aisbench && meta.is_none();
    let list = PyList::empty(py);
    // consume the Rust strings as the Python ones are made: peak memory stays near 2x output
    for out in outputs {
        list.append(output_to_py(py, out, ais_no_meta_api)?)?;
    }
    Ok(list)
}
