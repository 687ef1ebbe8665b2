//! `CompiledChatTemplate`: a HuggingFace chat template compiled by the core, rendered with
//! transformers' semantics. Python objects become template values here, as transformers'
//! `_plain_template_data` would make them; exotic objects (dataclasses, pydantic models, numpy
//! scalars) go through a Python hook supplied by the wrapper.

use promptweave_core::chat::{
    ChatError, ChatTemplate, FastContext, FastMessage, Map, RenderOptions, Scalar, Tuple, Value,
    ValueKind, plain_map,
};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

pyo3::import_exception!(promptweave.errors, ChatTemplateSyntaxError);
pyo3::import_exception!(promptweave.errors, ChatTemplateRaised);
pyo3::import_exception!(promptweave.errors, ChatTemplateRenderError);
pyo3::import_exception!(promptweave.errors, ChatInputError);

/// Deeper input than this is refused (Python's own recursion limit is about as deep).
const MAX_DEPTH: usize = 200;

fn chat_err(err: ChatError, conversation: Option<usize>) -> PyErr {
    let at = |m: String| match conversation {
        Some(i) => format!("conversation {i}: {m}"),
        None => m,
    };
    match err {
        ChatError::Syntax(m) => py_chat_error("syntax", at(m), conversation),
        // the template's own message, verbatim, as transformers raises it
        ChatError::Raised(m) => py_chat_error("raised", m, conversation),
        ChatError::Render(m) => py_chat_error("render", at(m), conversation),
        ChatError::Input(m) => py_chat_error("input", at(m), conversation),
    }
}

/// An error reading conversation `i` of a batch says so: its `conversation` attribute, and
/// a note (Python 3.11+), unless it already names its conversation (the chat errors made with
/// the index). Nothing is added where setting them fails.
fn name_conversation(py: Python<'_>, err: &PyErr, i: usize) {
    let value = err.value(py);
    let named = value.getattr("conversation").is_ok_and(|c| !c.is_none());
    if !named {
        let _ = value.setattr("conversation", i);
        let _ = value.call_method1("add_note", (format!("while reading conversation {i}"),));
    }
}

/// The exception `promptweave.errors.chat_error(kind, message, conversation)` makes: the
/// chat error class of `kind`, of the builtin family transformers raises for the same failure
/// where it raises one. (If that call fails, the plain class.)
fn py_chat_error(kind: &str, message: String, conversation: Option<usize>) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("promptweave.errors")
            .and_then(|m| m.getattr("chat_error"))
            .and_then(|f| f.call1((kind, message.as_str(), conversation)));
        match made {
            Ok(exc) => PyErr::from_value(exc),
            Err(_) => match kind {
                "syntax" => ChatTemplateSyntaxError::new_err(message),
                "raised" => ChatTemplateRaised::new_err((message, conversation)),
                "input" => ChatInputError::new_err(message),
                _ => ChatTemplateRenderError::new_err(message),
            },
        }
    })
}

struct Converter<'a, 'py> {
    hook: Option<&'a Bound<'py, PyAny>>,
    /// keep a message's keys whose value is `None` (transformers before 5.23 keeps them)
    keep_none: bool,
}

impl<'py> Converter<'_, 'py> {
    fn value(&self, obj: &Bound<'py, PyAny>, depth: usize) -> PyResult<Value> {
        if depth > MAX_DEPTH {
            return Err(py_chat_error(
                "input",
                format!("chat template input is nested too deeply (more than {MAX_DEPTH} levels)"),
                None,
            ));
        }
        if obj.is_none() {
            return Ok(Value::from(()));
        }
        if let Ok(s) = obj.cast_exact::<PyString>() {
            return match s.to_str() {
                Ok(text) => Ok(Value::from(text)),
                Err(err) => Err(ChatInputError::new_err(format!(
                    "chat template input is not valid text (a lone surrogate?): {err}"
                ))),
            };
        }
        if let Ok(b) = obj.cast_exact::<PyBool>() {
            return Ok(Value::from(b.is_true()));
        }
        if let Ok(i) = obj.cast_exact::<PyInt>() {
            if let Ok(v) = i.extract::<i64>() {
                return Ok(Value::from(v));
            }
            if let Ok(v) = i.extract::<i128>() {
                return Ok(Value::from(v));
            }
            // beyond 128 bits: the template can only print it
            return Ok(Value::from_safe_string(i.str()?.to_str()?.to_owned()));
        }
        if let Ok(f) = obj.cast_exact::<PyFloat>() {
            return Ok(Value::from(f.value()));
        }
        if let Ok(d) = obj.cast_exact::<PyDict>() {
            let mut map = Map::with_capacity(d.len());
            for (k, v) in d.iter() {
                map.insert(self.value(&k, depth + 1)?, self.value(&v, depth + 1)?);
            }
            return Ok(Value::from(map));
        }
        if let Ok(l) = obj.cast_exact::<PyList>() {
            let mut items = Vec::with_capacity(l.len());
            for item in l.iter() {
                items.push(self.value(&item, depth + 1)?);
            }
            return Ok(Value::from(items));
        }
        if let Ok(t) = obj.cast_exact::<PyTuple>() {
            let mut items = Vec::with_capacity(t.len());
            for item in t.iter() {
                items.push(self.value(&item, depth + 1)?);
            }
            // a tuple prints as one: `(1, 'a')`, `(1,)`
            return Ok(Value::from_object(Tuple::from(items)));
        }
        // subclasses and other objects: the wrapper's hook makes them plain data
        match self.hook {
            Some(hook) => {
                let plain = hook.call1((obj,))?;
                if plain.is(obj) {
                    return Err(PyTypeError::new_err(
                        "chat template input hook returned its argument",
                    ));
                }
                let inner = Converter {
                    hook: None,
                    keep_none: self.keep_none,
                };
                inner.value(&plain, depth + 1)
            }
            None => Ok(Value::from(format!(
                "<{}>",
                obj.get_type().name()?.to_str()?
            ))),
        }
    }

    /// The other template variables: a sequence of `(name, value)` pairs.
    fn variables(&self, variables: &Bound<'py, PyAny>) -> PyResult<Vec<(Value, Value)>> {
        let mut out = Vec::new();
        for pair in variables.try_iter()? {
            let (k, v): (Bound<'py, PyAny>, Bound<'py, PyAny>) = pair?.extract()?;
            out.push((self.value(&k, 1)?, self.value(&v, 1)?));
        }
        Ok(out)
    }

    /// One conversation: a sequence of dicts, keys with a `None` value dropped (transformers'
    /// `_normalize_chat_messages`, since 5.23) unless `keep_none`.
    fn conversation(&self, obj: &Bound<'py, PyAny>) -> PyResult<Vec<Map>> {
        let mut out = Vec::new();
        for item in obj.try_iter()? {
            let item = item?;
            // the common case: a plain dict, converted once, None values skipped on the way
            if let Ok(d) = item.cast_exact::<PyDict>() {
                let mut map = Map::with_capacity(d.len());
                for (k, v) in d.iter() {
                    if self.keep_none || !v.is_none() {
                        map.insert(self.value(&k, 2)?, self.value(&v, 2)?);
                    }
                }
                out.push(map);
                continue;
            }
            let value = self.value(&item, 1)?;
            let Some(entries) = value_map(&value) else {
                return Err(PyTypeError::new_err(format!(
                    "Chat messages should be dicts, dataclasses or pydantic models, but got {}.",
                    item.repr()?
                )));
            };
            out.push(
                entries
                    .into_iter()
                    .filter(|(_, v)| self.keep_none || !v.is_none())
                    .collect(),
            );
        }
        Ok(out)
    }
}

fn value_map(value: &Value) -> Option<Map> {
    if value.kind() != ValueKind::Map {
        return None;
    }
    let keys = value.try_iter().ok()?;
    Some(
        keys.map(|k| {
            let v = value.get_item(&k).unwrap_or_default();
            (k, v)
        })
        .collect(),
    )
}

/// `render_many` works through the conversations in blocks of about this much text: a block's
/// text is copied out of its Python strings, rendered with the interpreter released, and turned
/// into Python strings; the buffers are reused from block to block (warm in the cache, never
/// page-faulted in again). Half a megabyte measured best for the pipelined batch, whose
/// threads hand over every block (256 KiB: about 5% slower on the wall clock; 128 KiB: 15%),
/// and the same as 256 KiB on one thread.
const BLOCK_BYTES: usize = 512 * 1024;
/// ... and of at most this many conversations.
const BLOCK_CHATS: usize = 1024;
/// A [`Plain`] recognises at most this many key objects by identity.
const KEYS_KEPT: usize = 16;

/// A plain value copied out of Python: text as a range of its [`Plain`]'s text buffer.
#[derive(Clone, Copy)]
enum PlainValue {
    Str(usize, usize),
    Int(i64),
    Bool(bool),
    None,
}

/// A plain value (exact `str`, `bool`, `int` of 64 bits, `None`) as a scalar borrowing its
/// text; `None` for anything else, and for a string without UTF-8 form (a lone surrogate).
fn scalar_of<'a>(v: &'a Bound<'_, PyAny>) -> Option<Scalar<'a>> {
    if v.is_none() {
        Some(Scalar::None)
    } else if let Ok(s) = v.cast_exact::<PyString>() {
        s.to_str().ok().map(Scalar::Str)
    } else if let Ok(b) = v.cast_exact::<PyBool>() {
        Some(Scalar::Bool(b.is_true()))
    } else if v.is_exact_instance_of::<PyInt>() {
        v.extract::<i64>().ok().map(Scalar::Int)
    } else {
        None
    }
}

/// Plain data copied out of Python objects (exact `str`, `int`, `bool`, `None`): the text of
/// every string in one buffer, the fields as ranges of it. (Copying the text while the object
/// is being read measured faster than holding the string and reading its text where it is
/// rendered: by then the object has left the cache.)
#[derive(Default)]
struct Plain {
    text: String,
    /// key objects already copied into `text`, with their range there: the messages of a
    /// batch usually share their key objects (`role`, `content`), which are then found by
    /// identity instead of copied again (held, so that an address seen again is the same
    /// object)
    keys: Vec<(Py<PyString>, (usize, usize))>,
    /// every field (key range, value), message after message
    fields: Vec<((usize, usize), PlainValue)>,
    /// each message's range of `fields`
    messages: Vec<(usize, usize)>,
}

impl Plain {
    fn clear(&mut self) {
        self.text.clear();
        self.keys.clear();
        self.fields.clear();
        self.messages.clear();
    }

    fn mark(&self) -> (usize, usize, usize) {
        (self.text.len(), self.fields.len(), self.messages.len())
    }

    fn rollback(&mut self, (text, fields, messages): (usize, usize, usize)) {
        self.text.truncate(text);
        self.keys.retain(|(_, (_, end))| *end <= text);
        self.fields.truncate(fields);
        self.messages.truncate(messages);
    }

    fn push(&mut self, text: &str) -> (usize, usize) {
        let start = self.text.len();
        self.text.push_str(text);
        (start, self.text.len())
    }

    fn text(&mut self, s: &Bound<'_, PyString>) -> Option<(usize, usize)> {
        // a lone surrogate fails here; the full converter reports it
        Some(self.push(s.to_str().ok()?))
    }

    fn value(&mut self, v: &Bound<'_, PyAny>) -> Option<PlainValue> {
        Some(match scalar_of(v)? {
            Scalar::Str(text) => {
                let (a, b) = self.push(text);
                PlainValue::Str(a, b)
            }
            Scalar::Int(i) => PlainValue::Int(i),
            Scalar::Bool(b) => PlainValue::Bool(b),
            Scalar::None => PlainValue::None,
        })
    }

    /// Adds a conversation of plain messages (an exact list of exact dicts with string keys):
    /// its range of `messages`, or `None` (and nothing kept) when it is not plain.
    fn conversation(
        &mut self,
        obj: &Bound<'_, PyAny>,
        keep_none: bool,
    ) -> Option<std::ops::Range<usize>> {
        let mark = self.mark();
        if read_messages(self, obj, keep_none).is_none() {
            self.rollback(mark);
            return None;
        }
        Some(mark.2..self.messages.len())
    }

    /// The template variables (`(name, value)` pairs), when all are plain.
    fn variables(variables: &Bound<'_, PyAny>) -> Option<Plain> {
        let mut plain = Plain::default();
        read_variables(&mut plain, variables)?;
        Some(plain)
    }

    /// The fields as borrowed scalars.
    fn view(&self) -> Vec<(&str, Scalar<'_>)> {
        let text = |a: usize, b: usize| self.text.get(a..b).unwrap_or_default();
        self.fields
            .iter()
            .map(|&((ka, kb), v)| {
                let value = match v {
                    PlainValue::Str(a, b) => Scalar::Str(text(a, b)),
                    PlainValue::Int(i) => Scalar::Int(i),
                    PlainValue::Bool(b) => Scalar::Bool(b),
                    PlainValue::None => Scalar::None,
                };
                (text(ka, kb), value)
            })
            .collect()
    }
}

impl<'py> Fields<'py> for Plain {
    fn count(&self) -> usize {
        self.fields.len()
    }

    fn field(&mut self, k: Bound<'py, PyAny>, v: Bound<'py, PyAny>) -> Option<()> {
        let k = k.cast_into_exact::<PyString>().ok()?;
        let key =
            if let Some(&(_, range)) = self.keys.iter().find(|(o, _)| o.as_ptr() == k.as_ptr()) {
                range
            } else {
                let range = self.text(&k)?;
                if self.keys.len() < KEYS_KEPT {
                    self.keys.push((k.unbind(), range));
                }
                range
            };
        let value = self.value(&v)?;
        self.fields.push((key, value));
        Some(())
    }

    fn end_message(&mut self, start: usize) {
        self.messages.push((start, self.fields.len()));
    }
}

/// What the plain readers fill: fields, message after message.
trait Fields<'py> {
    /// how many fields so far
    fn count(&self) -> usize;
    /// one field; `None` when it is not plain
    fn field(&mut self, k: Bound<'py, PyAny>, v: Bound<'py, PyAny>) -> Option<()>;
    /// a message's fields end (they started at `start`)
    fn end_message(&mut self, start: usize);
}

/// Reads a conversation: an exact list of exact dicts; `None` when it is not plain. (A tuple
/// goes to the full engine: in Jinja2 `messages + [...]` fails on one, and the fast path's
/// messages are a list.)
fn read_messages<'py>(
    into: &mut impl Fields<'py>,
    obj: &Bound<'py, PyAny>,
    keep_none: bool,
) -> Option<()> {
    let mut one = |item: Bound<'py, PyAny>| -> Option<()> {
        let d = item.cast_exact::<PyDict>().ok()?;
        let start = into.count();
        for (k, v) in d.iter() {
            // keys with a None value are dropped, as transformers (since 5.23) drops them
            if keep_none || !v.is_none() {
                into.field(k, v)?;
            }
        }
        into.end_message(start);
        Some(())
    };
    obj.cast_exact::<PyList>()
        .ok()?
        .iter()
        .try_for_each(&mut one)
}

/// Reads the template variables (`(name, value)` pairs); `None` when one is not plain.
fn read_variables<'py>(into: &mut impl Fields<'py>, variables: &Bound<'py, PyAny>) -> Option<()> {
    for pair in variables.try_iter().ok()? {
        let (k, v): (Bound<'py, PyAny>, Bound<'py, PyAny>) = pair.ok()?.extract().ok()?;
        into.field(k, v)?;
    }
    Some(())
}

/// A plain conversation (or the template variables) held as Python objects, read in place
/// with the interpreter held: the single-conversation path borrows their text instead of
/// copying it.
#[derive(Default)]
struct Borrowed<'py> {
    /// every kept field, message after message
    fields: Vec<(Bound<'py, PyString>, Bound<'py, PyAny>)>,
    /// each message's range of `fields`
    messages: Vec<(usize, usize)>,
}

impl<'py> Fields<'py> for Borrowed<'py> {
    fn count(&self) -> usize {
        self.fields.len()
    }

    /// Keeps a field with a `str` key (its value is checked by [`Borrowed::view`]).
    fn field(&mut self, k: Bound<'py, PyAny>, v: Bound<'py, PyAny>) -> Option<()> {
        let k = k.cast_into_exact::<PyString>().ok()?;
        self.fields.push((k, v));
        Some(())
    }

    fn end_message(&mut self, start: usize) {
        self.messages.push((start, self.fields.len()));
    }
}

impl<'py> Borrowed<'py> {
    /// A conversation of plain messages, or `None`.
    fn conversation(obj: &Bound<'py, PyAny>, keep_none: bool) -> Option<Self> {
        let mut b = Borrowed::default();
        read_messages(&mut b, obj, keep_none)?;
        Some(b)
    }

    /// The template variables (`(name, value)` pairs), when all are plain.
    fn variables(variables: &Bound<'py, PyAny>) -> Option<Self> {
        let mut b = Borrowed::default();
        read_variables(&mut b, variables)?;
        Some(b)
    }

    /// The fields as borrowed scalars (`None` when one is not plain: the copying path
    /// converts or reports it).
    fn view(&self) -> Option<Vec<(&str, Scalar<'_>)>> {
        self.fields
            .iter()
            .map(|(k, v)| Some((k.to_str().ok()?, scalar_of(v)?)))
            .collect()
    }
}

/// The messages over `fields`, one per range of it.
fn message_views<'f>(
    fields: &'f [(&'f str, Scalar<'f>)],
    ranges: &[(usize, usize)],
) -> impl Iterator<Item = FastMessage<'f>> {
    ranges.iter().map(|&(a, b)| FastMessage {
        fields: fields.get(a..b).unwrap_or_default(),
    })
}

/// One conversation ready for rendering: plain messages (a range of the block's messages) or
/// template values (anything else).
enum Chat {
    Plain(std::ops::Range<usize>),
    Values(Vec<Map>),
}

/// The template variables in both forms: plain (for the fast path) when they all are.
struct Vars {
    plain: Option<Plain>,
    values: Vec<(Value, Value)>,
}

/// A block of conversations read from Python.
#[derive(Default)]
struct Block {
    plain: Plain,
    chats: Vec<Chat>,
}

/// A block and its outputs, kept from batch to batch: their text buffers are made at their
/// full size once (growing them as a batch is read copied about as much text again, and each
/// batch faulted their pages in anew).
#[derive(Default)]
struct Scratch {
    block: Block,
    out: Outputs,
}

impl Scratch {
    /// Empty, its buffers made at their full size.
    fn sized() -> Self {
        let mut scratch = Scratch::default();
        // a block ends after the conversation that takes it past `BLOCK_BYTES`
        scratch
            .block
            .plain
            .text
            .reserve(BLOCK_BYTES + BLOCK_BYTES / 4);
        scratch.out.text.reserve(BLOCK_BYTES + BLOCK_BYTES / 2);
        scratch
    }

    /// Empties it, Python references included, to be kept.
    fn clear(&mut self) {
        self.block.plain.clear();
        self.block.chats.clear();
        self.out.clear();
    }

    /// Whether its buffers are of the usual size (one grown for an outsized conversation is not
    /// kept: the memory goes back).
    fn worth_keeping(&self) -> bool {
        self.block.plain.text.capacity() <= 4 * BLOCK_BYTES
            && self.out.text.capacity() <= 4 * BLOCK_BYTES
    }
}

/// Rendered outputs: one buffer and the end of each output in it.
#[derive(Default)]
struct Outputs {
    text: String,
    ends: Vec<usize>,
}

impl Outputs {
    fn clear(&mut self) {
        self.text.clear();
        self.ends.clear();
    }

    /// Appends the outputs to `list` as Python strings.
    fn append_to(&self, list: &Bound<'_, PyList>) -> PyResult<()> {
        let py = list.py();
        let mut start = 0;
        for &end in &self.ends {
            list.append(PyString::new(
                py,
                self.text.get(start..end).unwrap_or_default(),
            ))?;
            start = end;
        }
        Ok(())
    }
}

/// Renders the conversations of `block` (numbered from `offset`), appending to `out`.
fn render_chats(
    template: &ChatTemplate,
    vars: &Vars,
    block: &Block,
    offset: usize,
    options: &RenderOptions,
    out: &mut Outputs,
) -> Result<(), (usize, ChatError)> {
    let Block { plain, chats } = block;
    let fields = plain.view();
    let var_fields = vars.plain.as_ref().map(Plain::view);
    let mut messages: Vec<FastMessage<'_>> = Vec::new();
    for (i, chat) in chats.iter().enumerate() {
        let at = offset + i;
        let maps = match (chat, &var_fields) {
            (Chat::Plain(range), Some(variables)) => {
                messages.clear();
                messages.extend(message_views(&fields, &plain.messages[range.clone()]));
                let ctx = FastContext {
                    messages: &messages,
                    variables,
                    add_generation_prompt: options.add_generation_prompt,
                };
                template
                    .render_plain(&ctx, options.continue_final.as_deref(), &mut out.text)
                    .map_err(|e| (at, e))?;
                out.ends.push(out.text.len());
                continue;
            }
            (Chat::Plain(range), None) => message_views(&fields, &plain.messages[range.clone()])
                .map(|m| plain_map(&m))
                .collect(),
            (Chat::Values(maps), _) => maps.clone(),
        };
        let rendered = template
            .render_conversation(maps, &vars.values, options)
            .map_err(|e| (at, e))?;
        out.text.push_str(&rendered);
        out.ends.push(out.text.len());
    }
    Ok(())
}

/// A conversation's messages: the object itself, or a `Conversation`'s `.messages`; an empty
/// list or tuple is refused as transformers refuses it.
fn conversation_of<'py>(
    chat: &Bound<'py, PyAny>,
    index: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let chat = if chat.cast_exact::<PyList>().is_ok() || chat.cast_exact::<PyTuple>().is_ok() {
        chat.clone()
    } else {
        match chat.getattr("messages") {
            Ok(messages) => messages,
            Err(_) => chat.clone(),
        }
    };
    let empty = chat.cast::<PyList>().is_ok_and(PyListMethods::is_empty)
        || chat.cast::<PyTuple>().is_ok_and(PyTupleMethods::is_empty);
    if empty {
        let message = match index {
            Some(i) => format!("conversation {i}: {EMPTY_CONVERSATION}"),
            None => EMPTY_CONVERSATION.to_owned(),
        };
        return Err(py_chat_error("input", message, index));
    }
    Ok(chat)
}

const EMPTY_CONVERSATION: &str =
    "Cannot apply chat template to an empty conversation. Provide at least one message.";

/// A chat template compiled once.
#[pyclass(name = "CompiledChatTemplate", module = "promptweave._core", frozen)]
pub(crate) struct PyChatTemplate {
    inner: ChatTemplate,
    hook: Option<Py<PyAny>>,
    keep_none: bool,
    /// the buffers of the last one-thread batch, for the next (a batch running meanwhile on
    /// another thread makes its own)
    scratch: std::sync::Mutex<Option<Scratch>>,
}

impl PyChatTemplate {
    fn with_converter<'py, T>(
        &self,
        py: Python<'py>,
        f: impl FnOnce(&Converter<'_, 'py>) -> PyResult<T>,
    ) -> PyResult<T> {
        let hook = self.hook.as_ref().map(|h| h.bind(py).clone());
        f(&Converter {
            hook: hook.as_ref(),
            keep_none: self.keep_none,
        })
    }

    fn vars(&self, c: &Converter<'_, '_>, variables: &Bound<'_, PyAny>) -> PyResult<Vars> {
        Ok(Vars {
            values: c.variables(variables)?,
            plain: if self.inner.has_fast_path() {
                Plain::variables(variables)
            } else {
                None
            },
        })
    }

    /// One plain conversation rendered from its text borrowed in place (the interpreter is
    /// held throughout), as `render_chats` renders a plain one (the fast path, else the full
    /// engine on the same values): `None` when the input is not plain (or the template has no
    /// fast path), and the caller converts it the general way.
    fn render_borrowed(
        &self,
        messages: &Bound<'_, PyAny>,
        variables: &Bound<'_, PyAny>,
        add_generation_prompt: bool,
        continue_final: Option<&str>,
    ) -> PyResult<Option<String>> {
        if !self.inner.has_fast_path() {
            return Ok(None);
        }
        let chat = conversation_of(messages, None)?;
        let (Some(conv), Some(vars)) = (
            Borrowed::conversation(&chat, self.keep_none),
            Borrowed::variables(variables),
        ) else {
            return Ok(None);
        };
        let (Some(fields), Some(var_fields)) = (conv.view(), vars.view()) else {
            return Ok(None);
        };
        let messages: Vec<_> = message_views(&fields, &conv.messages).collect();
        let ctx = FastContext {
            messages: &messages,
            variables: &var_fields,
            add_generation_prompt,
        };
        let mut out = String::new();
        self.inner
            .render_plain(&ctx, continue_final, &mut out)
            .map_err(|e| chat_err(e, None))?;
        Ok(Some(out))
    }

    /// `render_many` pipelined over two threads: this one reads the next block of
    /// conversations and turns rendered blocks into Python strings (both need the
    /// interpreter) while a second thread renders (which does not), so the stages overlap.
    /// (This thread is the slower stage: more rendering threads would only wait.)
    fn render_pipelined<'py>(
        &self,
        c: &Converter<'_, 'py>,
        vars: &Vars,
        iter: &mut impl Iterator<Item = PyResult<Bound<'py, PyAny>>>,
        options: &RenderOptions,
        list: &Bound<'py, PyList>,
    ) -> PyResult<()> {
        let py = list.py();
        let inner = &self.inner;
        std::thread::scope(|s| {
            let (job_tx, job_rx) = std::sync::mpsc::sync_channel::<(Block, Outputs, usize)>(1);
            let (done_tx, done_rx) = std::sync::mpsc::sync_channel(2);
            let renderer = s.spawn(move || {
                for (block, mut out, offset) in job_rx {
                    out.clear();
                    let result = render_chats(inner, vars, &block, offset, options, &mut out);
                    if done_tx.send((block, out, result)).is_err() {
                        break;
                    }
                }
            });
            let mut done_rx = Some(done_rx);
            let mut drive = || -> PyResult<()> {
                // two blocks: one read while the other is rendered
                let mut free = vec![
                    (Block::default(), Outputs::default()),
                    (Block::default(), Outputs::default()),
                ];
                let (mut in_flight, mut offset) = (0usize, 0usize);
                let mut exhausted = false;
                loop {
                    if !exhausted {
                        if let Some((mut block, out)) = free.pop() {
                            Self::fill(c, vars, iter, &mut block, Some(offset))?;
                            if block.chats.is_empty() {
                                exhausted = true;
                                free.push((block, out));
                            } else {
                                let n = block.chats.len();
                                job_tx
                                    .send((block, out, offset))
                                    .map_err(|_| panicked(offset))?;
                                in_flight += 1;
                                offset += n;
                                continue;
                            }
                        }
                    }
                    if in_flight == 0 {
                        return Ok(());
                    }
                    // the oldest block, waited for with the interpreter released (the
                    // receiver goes into the closure and comes back: it is not `Sync`)
                    let rx = done_rx.take().ok_or_else(|| panicked(offset))?;
                    let (rx, done) = py.detach(move || {
                        let done = rx.recv();
                        (rx, done)
                    });
                    done_rx = Some(rx);
                    let (block, out, result) = done.map_err(|_| panicked(offset))?;
                    in_flight -= 1;
                    result.map_err(|(i, e)| chat_err(e, Some(i)))?;
                    out.append_to(list)?;
                    free.push((block, out));
                }
            };
            let result = drive();
            // the renderer stops when its queue closes
            drop(job_tx);
            drop(done_rx);
            let joined = renderer
                .join()
                .map_err(|_| PyRuntimeError::new_err(PANICKED));
            result.and(joined)
        })
    }

    /// `render_many` on this thread: a block read, rendered with the interpreter released, its
    /// strings made; and again.
    fn render_blocks<'py>(
        &self,
        c: &Converter<'_, 'py>,
        vars: &Vars,
        iter: &mut impl Iterator<Item = PyResult<Bound<'py, PyAny>>>,
        options: &RenderOptions,
        list: &Bound<'py, PyList>,
        scratch: &mut Scratch,
    ) -> PyResult<()> {
        let Scratch { block, out } = scratch;
        let mut offset = 0;
        loop {
            Self::fill(c, vars, iter, block, Some(offset))?;
            if block.chats.is_empty() {
                return Ok(());
            }
            out.clear();
            let inner = &self.inner;
            list.py()
                .detach(|| render_chats(inner, vars, block, offset, options, out))
                .map_err(|(i, e)| chat_err(e, Some(i)))?;
            out.append_to(list)?;
            offset += block.chats.len();
        }
    }

    /// The variables and one conversation (unnumbered in errors).
    fn read_one(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        variables: &Bound<'_, PyAny>,
    ) -> PyResult<(Vars, Block)> {
        let mut block = Block::default();
        let vars = self.with_converter(py, |c| {
            let vars = self.vars(c, variables)?;
            let mut one = std::iter::once(Ok(messages.clone()));
            Self::fill(c, &vars, &mut one, &mut block, None)?;
            Ok(vars)
        })?;
        Ok((vars, block))
    }

    /// Reads conversations from `iter` into `block` until it is full; `index` is the first
    /// one's index in a batch (for error messages; `None` for a single conversation).
    fn fill<'py>(
        c: &Converter<'_, 'py>,
        vars: &Vars,
        iter: &mut impl Iterator<Item = PyResult<Bound<'py, PyAny>>>,
        block: &mut Block,
        index: Option<usize>,
    ) -> PyResult<()> {
        block.plain.clear();
        block.chats.clear();
        while block.plain.text.len() < BLOCK_BYTES && block.chats.len() < BLOCK_CHATS {
            let Some(chat) = iter.next() else {
                break;
            };
            let at = index.map(|i| i + block.chats.len());
            let read = Self::read_chat(c, vars, chat, at, block);
            let chat = read.inspect_err(|e| {
                if let Some(i) = at {
                    Python::attach(|py| name_conversation(py, e, i));
                }
            })?;
            block.chats.push(chat);
        }
        Ok(())
    }

    /// One conversation of a batch, read.
    fn read_chat<'py>(
        c: &Converter<'_, 'py>,
        vars: &Vars,
        chat: PyResult<Bound<'py, PyAny>>,
        at: Option<usize>,
        block: &mut Block,
    ) -> PyResult<Chat> {
        let chat = conversation_of(&chat?, at)?;
        if vars.plain.is_some() {
            if let Some(range) = block.plain.conversation(&chat, c.keep_none) {
                return Ok(Chat::Plain(range));
            }
        }
        Ok(Chat::Values(c.conversation(&chat)?))
    }
}

#[pymethods]
impl PyChatTemplate {
    /// Compile `source`; `plain_hook(obj)` turns objects that are not plain JSON data into it.
    /// `fast=False` renders everything with the full engine (the fast path is for plain
    /// conversations and gives the same result; this switch exists to compare the two).
    /// `keep_none` keeps the message keys whose value is `None` (transformers before 5.23);
    /// by default they are dropped (transformers 5.23 and later). `alias_reasoning=False`
    /// leaves a message's reasoning fields as given (transformers before 5.21).
    #[new]
    #[pyo3(signature = (source, plain_hook=None, fast=true, keep_none=false, alias_reasoning=true))]
    fn new(
        source: &str,
        plain_hook: Option<Py<PyAny>>,
        fast: bool,
        keep_none: bool,
        alias_reasoning: bool,
    ) -> PyResult<Self> {
        let mut inner = ChatTemplate::compile(source).map_err(|e| chat_err(e, None))?;
        if !fast {
            inner = inner.without_fast_path();
        }
        if !alias_reasoning {
            inner = inner.without_reasoning_aliases();
        }
        Ok(PyChatTemplate {
            inner,
            hook: plain_hook,
            keep_none,
            scratch: std::sync::Mutex::new(None),
        })
    }

    #[getter]
    fn source(&self) -> &str {
        self.inner.source()
    }

    /// Whether plain conversations can take the fast path.
    #[getter]
    fn fast_path(&self) -> bool {
        self.inner.has_fast_path()
    }

    /// Render one conversation. `variables` is a sequence of `(name, value)` pairs;
    /// `continue_final` is the field to continue or `None`.
    #[pyo3(signature = (messages, variables, add_generation_prompt, continue_final=None))]
    fn render<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        variables: &Bound<'py, PyAny>,
        add_generation_prompt: bool,
        continue_final: Option<String>,
    ) -> PyResult<Bound<'py, PyString>> {
        if let Some(out) = self.render_borrowed(
            messages,
            variables,
            add_generation_prompt,
            continue_final.as_deref(),
        )? {
            return Ok(PyString::new(py, &out));
        }
        let options = RenderOptions {
            add_generation_prompt,
            continue_final,
        };
        let (vars, block) = self.read_one(py, messages, variables)?;
        let mut out = Outputs::default();
        render_chats(&self.inner, &vars, &block, 0, &options, &mut out)
            .map_err(|(_, e)| chat_err(e, None))?;
        Ok(PyString::new(py, &out.text))
    }

    /// The fast path's rendering of one conversation alone: `None` when the input is not plain,
    /// the template has no fast path or it gave up (for tests comparing it with the full
    /// engine, and checking that it is used).
    fn fast_render(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        variables: &Bound<'_, PyAny>,
        add_generation_prompt: bool,
    ) -> PyResult<Option<String>> {
        let (vars, block) = self.read_one(py, messages, variables)?;
        let (Some(plain_vars), Some(Chat::Plain(range))) = (&vars.plain, block.chats.first())
        else {
            return Ok(None);
        };
        let fields = block.plain.view();
        let var_fields = plain_vars.view();
        let messages: Vec<_> =
            message_views(&fields, &block.plain.messages[range.clone()]).collect();
        let ctx = FastContext {
            messages: &messages,
            variables: &var_fields,
            add_generation_prompt,
        };
        let mut out = String::new();
        Ok(self.inner.try_fast(&ctx, &mut out).then_some(out))
    }

    /// Render many conversations, block by block. One thread (the default) reads a block,
    /// renders it with the interpreter released and makes its strings; more pipeline the
    /// batch ([`PyChatTemplate::render_pipelined`]). The first failing conversation's error is
    /// raised, naming its index.
    #[pyo3(signature = (conversations, variables, add_generation_prompt, continue_final=None, threads=None))]
    fn render_many<'py>(
        &self,
        py: Python<'py>,
        conversations: &Bound<'py, PyAny>,
        variables: &Bound<'py, PyAny>,
        add_generation_prompt: bool,
        continue_final: Option<String>,
        threads: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let options = RenderOptions {
            add_generation_prompt,
            continue_final,
        };
        let pipelined = threads.is_some_and(|t| t > 1);
        let list = PyList::empty(py);
        let mut iter = conversations.try_iter()?;
        self.with_converter(py, |c| {
            let vars = self.vars(c, variables)?;
            if pipelined {
                self.render_pipelined(c, &vars, &mut iter, &options, &list)?;
                return Ok(list);
            }
            let taken = self.scratch.lock().ok().and_then(|mut s| s.take());
            let mut scratch = taken.unwrap_or_else(Scratch::sized);
            let result = self.render_blocks(c, &vars, &mut iter, &options, &list, &mut scratch);
            scratch.clear();
            if scratch.worth_keeping() {
                if let Ok(mut kept) = self.scratch.lock() {
                    *kept = Some(scratch);
                }
            }
            result.map(|()| list)
        })
    }
}

const PANICKED: &str = "a rendering thread panicked";

fn panicked(near: usize) -> PyErr {
    PyRuntimeError::new_err(format!("near conversation {near}: {PANICKED}"))
}
