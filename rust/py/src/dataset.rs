//! `render_dataset`: the whole-dataset job.
//!
//! Rows whose ICE group has a compiled output program (see `promptweave_core::program`) are
//! assembled from Python string objects with `str.join`: the program's literal pieces (made
//! once) and the row's own value objects, so no text is copied through UTF-8 and no Rust string
//! is allocated per row. The other rows are rendered by the core with the interpreter released.

use std::collections::HashMap;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyDict, PyList, PyString};

use promptweave_core::{
    Compiled, Flavor, IceGroups, Job, Output, Parser, Prepared, Program, Segment, Table, Task,
    render_rows,
};

use crate::convert::{RESERVED_COLUMNS, empty_list, py_str, str_is_pure};
use crate::errors::{to_py_err, unsupported};
use crate::joined::{cell_str, has_brace};
use crate::meta::PyMetaTemplate;
use crate::template::PyCompiledTemplate;

/// Rows of one split: column names and every cell's `str()` object, row-major. All rows must
/// have the same keys in the same order (else the caller renders row by row).
struct Rows<'py> {
    list: Bound<'py, PyList>,
    names: Vec<PyBackedStr>,
    /// the first row's key objects (the columns, in order)
    keys: Vec<Bound<'py, PyAny>>,
}

impl<'py> Rows<'py> {
    /// The columns, from the first row; each row is read (and its columns checked) when it is
    /// used, so that a row's objects are still in the cache when its prompt is made.
    fn from_list(rows: &Bound<'py, PyList>) -> PyResult<Self> {
        let mut names: Vec<PyBackedStr> = Vec::new();
        let mut keys: Vec<Bound<'py, PyAny>> = Vec::new();
        if let Ok(first) = rows.get_item(0) {
            let first = first
                .cast::<PyDict>()
                .map_err(|_| unsupported("row that is not a dict"))?;
            for k in first.keys() {
                if !k.is_exact_instance_of::<PyString>() {
                    return Err(unsupported("column name that is not a str"));
                }
                names.push(py_str(&k)?);
                keys.push(k);
            }
        }
        if names.iter().any(|n| RESERVED_COLUMNS.contains(&&**n)) {
            return Err(unsupported(
                "column named like a parameter of the reference",
            ));
        }
        Ok(Self {
            list: rows.clone(),
            names,
            keys,
        })
    }

    fn width(&self) -> usize {
        self.names.len()
    }

    /// Row `r`'s values (`str()` is taken only where a value is used) into `out`, after
    /// checking that it has the first row's columns in the same order and that every value's
    /// `str()` is pure: the job runs no Python code, so a value whose `str()` may fail or run
    /// code sends the rows to the pure-Python path, which calls it where and as often as the
    /// reference does (and names the row when it raises). Every cell the job reads comes
    /// from here.
    fn row_into(&self, r: usize, out: &mut Vec<Bound<'py, PyAny>>) -> PyResult<()> {
        out.clear();
        let row = self.list.get_item(r)?;
        let row = row
            .cast::<PyDict>()
            .map_err(|_| unsupported("row that is not a dict"))?;
        if row.len() != self.keys.len() {
            return Err(unsupported("rows with different columns"));
        }
        for (i, (k, v)) in row.iter().enumerate() {
            // same key object (the usual case) or an equal str, in the same position
            if !k.is(&self.keys[i]) && !k.eq(&self.keys[i])? {
                return Err(unsupported("rows with different columns"));
            }
            // the reference `str()`s (and deep-copies) every value of the row, used or not: a
            // row with a value whose `str()` may fail or run code goes to the Python path
            if !v.is_exact_instance_of::<PyString>() && !str_is_pure(&v) {
                return Err(unsupported("row value whose str() may fail or run code"));
            }
            out.push(v);
        }
        Ok(())
    }

    /// The UTF-8 text of the given rows' cells (row-major), for the core.
    fn backed(&self, rows: impl Iterator<Item = usize>) -> PyResult<Vec<PyBackedStr>> {
        let mut out = Vec::new();
        let mut cells = Vec::new();
        for r in rows {
            self.row_into(r, &mut cells)?;
            for cell in &cells {
                out.push(py_str(cell)?);
            }
        }
        Ok(out)
    }

    /// The UTF-8 text of every cell of the rows in `used`; other rows are left empty (the
    /// core never reads them, so they are never read here either).
    fn backed_table(&self, used: &[bool]) -> PyResult<Vec<Option<PyBackedStr>>> {
        let mut out = Vec::with_capacity(used.len() * self.width());
        let mut cells = Vec::new();
        for (r, &is_used) in used.iter().enumerate() {
            if is_used {
                self.row_into(r, &mut cells)?;
                for cell in &cells {
                    out.push(Some(py_str(cell)?));
                }
            } else {
                out.extend((0..self.width()).map(|_| None));
            }
        }
        Ok(out)
    }
}

fn strs(v: &[PyBackedStr]) -> Vec<&str> {
    v.iter().map(|s| &**s).collect()
}

/// Group rows by their ICE index lists; rows handing the same list object (FixK) are grouped
/// without extracting it again.
fn group_indices(ice_indices: &Bound<'_, PyList>) -> PyResult<IceGroups> {
    let mut seen: HashMap<Vec<usize>, usize> = HashMap::new();
    let mut groups = IceGroups::default();
    let mut prev: Option<(Bound<'_, PyAny>, usize)> = None;
    for obj in ice_indices.iter() {
        if let Some((p, g)) = &prev {
            if obj.is(p) {
                groups.row_group.push(*g);
                continue;
            }
        }
        let list: Vec<usize> = obj.extract()?;
        let next = groups.lists.len();
        let g = *seen.entry(list.clone()).or_insert(next);
        if g == next {
            groups.lists.push(list);
        }
        groups.row_group.push(g);
        prev = Some((obj, g));
    }
    Ok(groups)
}

/// Python pieces of a program: literals made once, slots filled per row.
enum Piece<'py> {
    Lit(Bound<'py, PyString>),
    Col(Option<usize>),
}

/// A program's text: one shared string when it has no slot, else its pieces (and a list of
/// as many items, refilled for each output: `str.join` takes a list as it is, so no container
/// is made per output).
enum Text<'py> {
    Shared(Bound<'py, PyString>),
    Pieces(Vec<Piece<'py>>, Bound<'py, PyList>),
}

/// A compiled output in Python objects.
enum Made<'py> {
    Text(Text<'py>),
    Messages {
        begin: Option<Bound<'py, PyString>>,
        messages: Vec<(Bound<'py, PyString>, Text<'py>)>,
    },
}

fn text<'py>(py: Python<'py>, program: &Program) -> PyResult<Text<'py>> {
    if let Some(lit) = program.literal() {
        return Ok(Text::Shared(PyString::new(py, lit)));
    }
    let pieces: Vec<Piece<'py>> = program
        .segments()
        .map(|s| match s {
            Segment::Lit(t) => Piece::Lit(PyString::new(py, t)),
            Segment::Col(c) => Piece::Col(c),
        })
        .collect();
    // the literals are set once; a row's output sets only the slots
    let scratch = PyList::new(
        py,
        pieces.iter().map(|p| match p {
            Piece::Lit(s) => s.clone().into_any(),
            Piece::Col(_) => py.None().into_bound(py),
        }),
    )?;
    Ok(Text::Pieces(pieces, scratch))
}

fn made<'py>(py: Python<'py>, compiled: &Compiled) -> PyResult<Made<'py>> {
    Ok(match compiled {
        Compiled::Text(p) => Made::Text(text(py, p)?),
        Compiled::Messages { begin, messages } => Made::Messages {
            begin: begin.as_deref().map(|b| PyString::new(py, b)),
            messages: messages
                .iter()
                .map(|(role, p)| Ok((PyString::new(py, role), text(py, p)?)))
                .collect::<PyResult<_>>()?,
        },
    })
}

/// What the program path needs per row.
struct Assembler<'py> {
    join: Bound<'py, PyAny>,
    mask: Bound<'py, PyString>,
    prompt_list: Option<Bound<'py, PyAny>>,
}

impl<'py> Assembler<'py> {
    /// Take the `str()` of the values the slots use (into `cells`, once per row) and check
    /// them: `false` when one has a brace (the one-scan condition fails). A cell is checked
    /// when it is taken: one found with a brace ends the row's assembly, so every cell kept in
    /// `cells` is known to have none (a row's later programs, such as its other PPL labels,
    /// do not scan it again).
    fn usable(
        text: &Text<'py>,
        raw: &[Bound<'py, PyAny>],
        cells: &mut [Option<Bound<'py, PyString>>],
    ) -> PyResult<bool> {
        let Text::Pieces(pieces, _) = text else {
            return Ok(true);
        };
        for p in pieces {
            if let Piece::Col(Some(i)) = p {
                let (Some(value), Some(slot)) = (raw.get(*i), cells.get_mut(*i)) else {
                    return Ok(false);
                };
                if slot.is_none() {
                    // (a cell of `Rows::row_into`: its `str()` is pure)
                    let v = cell_str(value)?;
                    if has_brace(&v)? {
                        return Ok(false);
                    }
                    *slot = Some(v);
                }
            }
        }
        Ok(true)
    }

    fn text(
        &self,
        text: &Text<'py>,
        cells: &[Option<Bound<'py, PyString>>],
    ) -> PyResult<Bound<'py, PyAny>> {
        match text {
            Text::Shared(s) => Ok(s.clone().into_any()),
            Text::Pieces(pieces, scratch) => {
                for (at, p) in pieces.iter().enumerate() {
                    let part = match p {
                        Piece::Lit(_) => continue,
                        Piece::Col(None) => &self.mask,
                        // filled and checked by `usable`
                        Piece::Col(Some(i)) => {
                            cells.get(*i).and_then(Option::as_ref).unwrap_or(&self.mask)
                        }
                    };
                    scratch.set_item(at, part)?;
                }
                self.join.call1((scratch,))
            }
        }
    }

    /// One output from a compiled program; `None` when the row must be rendered in full.
    fn assemble(
        &self,
        made: &Made<'py>,
        raw: &[Bound<'py, PyAny>],
        cells: &mut [Option<Bound<'py, PyString>>],
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = self.join.py();
        match made {
            Made::Text(t) => {
                if !Self::usable(t, raw, cells)? {
                    return Ok(None);
                }
                self.text(t, cells).map(Some)
            }
            Made::Messages { begin, messages } => {
                for (_, t) in messages {
                    if !Self::usable(t, raw, cells)? {
                        return Ok(None);
                    }
                }
                let list = empty_list(py, self.prompt_list.as_ref())?;
                if let Some(b) = begin {
                    list.append(b)?;
                }
                for (role, t) in messages {
                    let d = PyDict::new(py);
                    d.set_item(pyo3::intern!(py, "role"), role)?;
                    d.set_item(pyo3::intern!(py, "prompt"), self.text(t, cells)?)?;
                    list.append(d)?;
                }
                Ok(Some(list.into_any()))
            }
        }
    }
}

/// Converts core outputs to Python objects, sharing one string object per role name.
struct OutputMaker<'py> {
    py: Python<'py>,
    ais_no_meta_api: bool,
    prompt_list: Option<Bound<'py, PyAny>>,
    roles: Vec<(String, Bound<'py, PyString>)>,
}

impl<'py> OutputMaker<'py> {
    fn role(&mut self, name: &str) -> Bound<'py, PyString> {
        if let Some((_, s)) = self.roles.iter().find(|(n, _)| n == name) {
            return s.clone();
        }
        let s = PyString::new(self.py, name);
        self.roles.push((name.to_owned(), s.clone()));
        s
    }

    fn make(&mut self, out: Output) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        match out {
            Output::Text(s) if self.ais_no_meta_api && s.is_empty() => {
                Ok(PyList::empty(py).into_any())
            }
            Output::Text(s) => Ok(PyString::new(py, &s).into_any()),
            Output::Messages(m) => {
                let list = empty_list(py, self.prompt_list.as_ref())?;
                if let Some(b) = &m.begin {
                    list.append(b)?;
                }
                for msg in &m.messages {
                    let d = PyDict::new(py);
                    d.set_item(pyo3::intern!(py, "role"), self.role(&msg.role))?;
                    d.set_item(pyo3::intern!(py, "prompt"), &msg.prompt)?;
                    list.append(d)?;
                }
                Ok(list.into_any())
            }
        }
    }
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

fn failure_to_py(e: Failure) -> PyErr {
    match e {
        Failure::Core(e) => to_py_err(&e),
        // a bug, never a user error: surface it as such instead of crashing the process
        Failure::Panic => PyRuntimeError::new_err("promptweave: a rendering thread panicked"),
    }
}

/// Render every test row.
///
/// Returns one output per row: a `str`, a message list (built with `prompt_list` when given)
/// for an API parser with a meta template, or in ppl mode a dict `label -> output` over
/// `ppl_label_objects` (whose template bodies are `ppl_labels`).
#[pyfunction]
#[pyo3(signature = (
    template, ice_template, ice_labels, ice_separator, ice_eos_token, output_column,
    gen_field_replace_token, meta, api, aisbench, test_rows, train_rows, ice_indices,
    ppl_labels, ppl_label_objects, remain_sep, prompt_list, threads
))]
// one flat call keeps the binding thin; PyO3 extracts the lists by value
#[allow(
    clippy::too_many_arguments,
    clippy::needless_pass_by_value,
    clippy::too_many_lines
)]
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
    ppl_label_objects: Option<&Bound<'py, PyList>>,
    remain_sep: bool,
    prompt_list: Option<Bound<'py, PyAny>>,
    threads: usize,
) -> PyResult<Bound<'py, PyList>> {
    let test = Rows::from_list(test_rows)?;
    let train = Rows::from_list(train_rows)?;
    let groups = group_indices(ice_indices)?;
    let rows = test_rows.len();
    if groups.row_group.len() != rows {
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
    let task = match &ppl_labels {
        None => Task::Gen,
        Some(labels) => Task::Ppl { labels, remain_sep },
    };
    let per_row = ppl_labels.as_ref().map_or(1, Vec::len);
    let test_names = strs(&test.names);
    let columns = Table::new(&test_names, &[]).ok_or_else(|| unsupported("test columns"))?;
    let mut used = vec![false; train_rows.len()];
    for &i in groups.lists.iter().flatten() {
        if let Some(u) = used.get_mut(i) {
            *u = true;
        }
    }
    let train_backed = train.backed_table(&used)?;
    let train_cells: Vec<&str> = train_backed
        .iter()
        .map(|c| c.as_deref().unwrap_or(""))
        .collect();
    let train_names = strs(&train.names);
    let train_table =
        Table::new(&train_names, &train_cells).ok_or_else(|| unsupported("ragged train table"))?;
    let prepared = py
        .detach(|| Prepared::new(&job, &columns, &train_table, &groups, task))
        .map_err(|e| to_py_err(&e))?;

    // rows whose group has a program: joined from Python string objects
    let assembler = Assembler {
        join: PyString::new(py, "").getattr(pyo3::intern!(py, "join"))?,
        mask: PyString::new(py, gen_field_replace_token),
        prompt_list: prompt_list.clone(),
    };
    // each (group, label)'s program in Python objects, made when first used
    let mut compiled: Vec<Option<Made<'py>>> = Vec::new();
    compiled.resize_with(groups.lists.len() * per_row, || None);
    if ppl_label_objects.is_some_and(|labels| labels.len() != per_row) {
        return Err(unsupported("one label object per ppl label"));
    }
    // each row's output, in row order (the pending rows' after the core has rendered them);
    // the result list is made from them at the end. Made at its full size before the outputs,
    // it measured slower when rendering is repeated (W4 in a whole benchmark file: 2x): its
    // array then sat below the outputs, nothing of the new result sat above the previous one,
    // and once that was freed glibc gave the top of the heap back to the system, to be faulted
    // in again by the next render.
    let mut results: Vec<Option<Bound<'py, PyAny>>> = Vec::new();
    results.resize_with(rows, || None);
    let mut put = |row: usize, outs: &mut Vec<Bound<'py, PyAny>>| -> PyResult<()> {
        let value = match ppl_label_objects {
            None => outs
                .drain(..)
                .next()
                .ok_or_else(|| unsupported("missing output"))?,
            Some(labels) => {
                let d = PyDict::new(py);
                for (label, out) in labels.iter().zip(outs.drain(..)) {
                    d.set_item(label, out)?;
                }
                d.into_any()
            }
        };
        if let Some(slot) = results.get_mut(row) {
            *slot = Some(value);
        }
        Ok(())
    };
    let mut row_outs: Vec<Bound<'py, PyAny>> = Vec::with_capacity(per_row);
    let mut pending: Vec<usize> = Vec::new();
    let mut cells: Vec<Option<Bound<'py, PyString>>> = Vec::new();
    let mut row_cells: Vec<Bound<'py, PyAny>> = Vec::new();
    for row in 0..rows {
        let g = groups.row_group[row];
        let mut complete = true;
        cells.clear();
        cells.resize(test.width(), None);
        row_outs.clear();
        for k in 0..per_row {
            let Some(program) = prepared.program(g, k) else {
                complete = false;
                break;
            };
            let Some(slot) = compiled.get_mut(g * per_row + k) else {
                return Err(unsupported("ICE group out of range"));
            };
            let m = match slot {
                Some(m) => m,
                None => slot.insert(made(py, program)?),
            };
            if k == 0 {
                test.row_into(row, &mut row_cells)?;
            }
            if let Some(out) = assembler.assemble(m, &row_cells, &mut cells)? {
                row_outs.push(out);
            } else {
                complete = false;
                break;
            }
        }
        if complete {
            put(row, &mut row_outs)?;
        } else {
            pending.push(row);
        }
    }

    // the other rows: rendered by the core with the interpreter released
    if !pending.is_empty() {
        let backed = test.backed(pending.iter().copied())?;
        let cells = strs(&backed);
        let table = Table::new(&test_names, &cells).ok_or_else(|| unsupported("ragged table"))?;
        let row_group: Vec<usize> = pending.iter().map(|&r| groups.row_group[r]).collect();
        let rendered = py
            .detach(|| render_pending(&job, &table, &row_group, &prepared, task, threads))
            .map_err(failure_to_py)?;
        let mut maker = OutputMaker {
            py,
            ais_no_meta_api: api && aisbench && meta.is_none(),
            prompt_list,
            roles: Vec::new(),
        };
        let mut rendered = rendered.into_iter();
        for &row in &pending {
            row_outs.clear();
            for _ in 0..per_row {
                let out = rendered
                    .next()
                    .ok_or_else(|| unsupported("missing output"))?;
                row_outs.push(maker.make(out)?);
            }
            put(row, &mut row_outs)?;
        }
    }
    let none = py.None().into_bound(py);
    PyList::new(
        py,
        results
            .into_iter()
            .map(|v| v.unwrap_or_else(|| none.clone())),
    )
}

/// Render the rows of `table` (row `j` uses ICE group `row_group[j]`), split over `threads`.
fn render_pending(
    job: &Job<'_>,
    table: &Table<'_>,
    row_group: &[usize],
    prepared: &Prepared<'_>,
    task: Task<'_>,
    threads: usize,
) -> Result<Vec<Output>, Failure> {
    let rows = row_group.len();
    let render = |range: std::ops::Range<usize>| -> Result<Vec<Output>, Failure> {
        Ok(render_rows(job, table, row_group, prepared, task, range)?)
    };
    let threads = threads.clamp(1, 16);
    if threads == 1 || rows < 64 * threads {
        return render(0..rows);
    }
    let chunk = rows.div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let range = (t * chunk).min(rows)..((t + 1) * chunk).min(rows);
                let render = &render;
                s.spawn(move || render(range))
            })
            .collect();
        let mut all = Vec::with_capacity(rows);
        for h in handles {
            all.extend(h.join().map_err(|_| Failure::Panic)??);
        }
        Ok(all)
    })
}
