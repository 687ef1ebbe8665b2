//! Model-side chat templates: the Jinja template of a HuggingFace tokenizer, rendered the way
//! `transformers` renders it (`apply_chat_template(..., tokenize=False)`).
//!
//! transformers compiles a chat template in a sandboxed Jinja2 environment with `trim_blocks`,
//! `lstrip_blocks`, loop controls, a `{% generation %}` block tag, its own `tojson` filter
//! (`json.dumps` with `ensure_ascii=False`), and the globals `raise_exception` and
//! `strftime_now`. This module configures a `minijinja` environment to behave the same way:
//!
//! * values print as Python's `str()` prints them (`None`, `True`, `[1, 'a']`, `{'k': 2.0}`);
//! * `tojson` is Python's `json.dumps` (separators, `indent`, `sort_keys`, `ensure_ascii`);
//! * Python string, list and dict methods (`.strip()`, `.split()`, `.items()`, ...) work, with
//!   Python's notion of whitespace;
//! * `{% generation %}` / `{% endgeneration %}` render their body;
//! * `raise_exception(msg)` aborts rendering with [`ChatError::Raised`].
//!
//! Around the template, [`ChatTemplate::render_conversation`] does what transformers does to a
//! conversation before and after rendering (reasoning-field aliases, `continue_final_message`).

use std::fmt::Write as _;
use std::sync::Arc;

use minijinja::machinery::ast;
use minijinja::value::{ArgType, Kwargs, ObjectRepr, Rest, StringInput};
use minijinja::{Environment, Error, ErrorKind, State, UndefinedBehavior};

use crate::chat_fast::FastTemplate;
pub use crate::chat_fast::{Context as FastContext, Message as FastMessage, Scalar};
use crate::chat_gen::Iter;
pub use minijinja::Value;
pub use minijinja::value::{Tuple, ValueKind};

/// An insertion-ordered map, the form a message (a Python dict) takes.
pub type Map = indexmap::IndexMap<Value, Value>;

const TEMPLATE_NAME: &str = "chat_template";
/// What transformers appends to the final message to find where it ends in the output.
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";
/// transformers' names for a message's reasoning text, in its lookup order.
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// Why a chat template could not be compiled or rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatError {
    /// The template does not compile (Jinja2 rejects it as well).
    Syntax(String),
    /// The template called `raise_exception(message)`.
    Raised(String),
    /// Rendering failed (undefined attribute access, a type error, ...).
    Render(String),
    /// The inputs do not satisfy transformers' rules (e.g. `continue_final_message` on an empty
    /// conversation); the message is transformers' own.
    Input(String),
}

impl std::fmt::Display for ChatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChatError::Syntax(m)
            | ChatError::Raised(m)
            | ChatError::Render(m)
            | ChatError::Input(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ChatError {}

/// Marks an error created by `raise_exception` so it is told apart from engine errors.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

fn convert_error(err: &Error) -> ChatError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(s) = source {
        if let Some(raised) = s.downcast_ref::<Raised>() {
            return ChatError::Raised(raised.0.clone());
        }
        source = s.source();
    }
    match err.kind() {
        ErrorKind::SyntaxError | ErrorKind::UnknownBlock => ChatError::Syntax(describe(err)),
        ErrorKind::OutOfFuel => ChatError::Render(format!(
            "MemoryError: the template asked for more work or memory than promptweave gives one \
             render (about {FUEL} instructions or {} GiB of data): {}",
            (FUEL * 64) >> 30,
            describe(err)
        )),
        _ => ChatError::Render(describe(err)),
    }
}

fn describe(err: &Error) -> String {
    let mut msg = err.to_string();
    if let Some(line) = err.line() {
        if !msg.contains("line ") && !msg.contains(TEMPLATE_NAME) {
            let _ = write!(msg, " (line {line})");
        }
    }
    msg
}

/// The fuel of one render of the full engine (minijinja's budget: one instruction costs one,
/// 64 bytes of data one): about 33 million instructions or 2 GiB of strings and lists, far
/// beyond what a conversation needs.
pub(crate) const FUEL: u64 = 1 << 25;

/// What [`ChatTemplate::render_conversation`] needs besides the messages.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// The template variable `add_generation_prompt`.
    pub add_generation_prompt: bool,
    /// `continue_final_message`: `None` for off, else the field of the final message to continue
    /// (`"content"` when the caller passed `True`).
    pub continue_final: Option<String>,
}

/// A chat template compiled once, rendered many times. Cheap to share between threads.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Arc<Environment<'static>>,
    source: Arc<str>,
    fast: Option<Arc<FastTemplate>>,
    /// transformers' reasoning-field aliases (5.21 and later) are applied
    alias_reasoning: bool,
}

fn syntax() -> Result<minijinja::syntax::SyntaxConfig, ChatError> {
    minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build()
        .map_err(|e| ChatError::Syntax(e.to_string()))
}

/// The function every `for` loop's iterable passes through in the full engine.
const LOOP_GUARD: &str = "__promptweave_iterable";

/// The expressions of call arguments.
fn arg_exprs<'x>(args: &'x [ast::CallArg<'x>]) -> impl Iterator<Item = &'x ast::Expr<'x>> {
    args.iter().map(|a| match a {
        ast::CallArg::Pos(e)
        | ast::CallArg::Kwarg(_, e)
        | ast::CallArg::PosSplat(e)
        | ast::CallArg::KwargSplat(e) => e,
    })
}

/// The direct sub-expressions of an expression.
fn expr_parts<'x>(e: &'x ast::Expr<'x>) -> Vec<&'x ast::Expr<'x>> {
    match e {
        ast::Expr::Var(_) | ast::Expr::Const(_) => Vec::new(),
        ast::Expr::Slice(x) => std::iter::once(&x.expr)
            .chain(x.start.iter())
            .chain(x.stop.iter())
            .chain(x.step.iter())
            .collect(),
        ast::Expr::UnaryOp(x) => vec![&x.expr],
        ast::Expr::BinOp(x) => vec![&x.left, &x.right],
        ast::Expr::Compare(x) => std::iter::once(&x.expr)
            .chain(x.ops.iter().map(|o| &o.expr))
            .collect(),
        ast::Expr::IfExpr(x) => [&x.test_expr, &x.true_expr]
            .into_iter()
            .chain(x.false_expr.iter())
            .collect(),
        ast::Expr::Filter(x) => x.expr.iter().chain(arg_exprs(&x.args)).collect(),
        ast::Expr::Test(x) => std::iter::once(&x.expr).chain(arg_exprs(&x.args)).collect(),
        ast::Expr::GetAttr(x) => vec![&x.expr],
        ast::Expr::GetItem(x) => vec![&x.expr, &x.subscript_expr],
        ast::Expr::Call(x) => std::iter::once(&x.expr).chain(arg_exprs(&x.args)).collect(),
        ast::Expr::List(x) => x.items.iter().collect(),
        ast::Expr::Tuple(x) => x.items.iter().collect(),
        ast::Expr::Map(x) => x.keys.iter().chain(x.values.iter()).collect(),
    }
}

/// The source range an expression covers: the union of its own span and its parts' (a node's
/// span starts at its operator or name, not at its left operand).
fn extent(e: &ast::Expr<'_>) -> (u32, u32) {
    let parts = expr_parts(e);
    let span = e.span();
    parts
        .into_iter()
        .map(extent)
        .fold((span.start_offset, span.end_offset), |(a, b), (c, d)| {
            (a.min(c), b.max(d))
        })
}

/// Whether `text` opens and closes its brackets in order (a string literal with a bracket in
/// it counts too: such a text is then left alone).
fn balanced(text: &str) -> bool {
    let mut stack = Vec::new();
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => stack.push(c),
            ')' | ']' | '}' => {
                let open = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                if stack.pop() != Some(open) {
                    return false;
                }
            }
            _ => {}
        }
    }
    stack.is_empty()
}

/// One edit of the template source: `text` put at byte `at`, in place of `cut` bytes there.
#[derive(Clone)]
struct Edit {
    at: usize,
    /// at one position: the closing parts of wrappers (0), then opening parts (1), then a
    /// replaced operator (2)
    phase: u8,
    /// within a phase: closing parts inner first, opening parts outer first
    order: i64,
    text: String,
    cut: usize,
}

/// The two edits that wrap `start..end` in a call to `function`; `outer` decides between two
/// wrappers of the same text (a loop guard goes around a `+` that is the whole iterable).
fn wrap(start: usize, end: usize, function: &str, outer: bool) -> [Edit; 2] {
    let level = i64::try_from(end - start)
        .unwrap_or(i64::MAX / 2)
        .saturating_mul(2)
        .saturating_add(i64::from(outer));
    [
        Edit {
            at: start,
            phase: 1,
            order: -level,
            text: format!("{function}("),
            cut: 0,
        },
        Edit {
            at: end,
            phase: 0,
            order: level,
            text: ")".to_owned(),
            cut: 0,
        },
    ]
}

/// `source` with `edits` made, when the result parses (`None` when it does not).
fn apply_edits(source: &str, mut edits: Vec<Edit>) -> Option<String> {
    if edits.is_empty() {
        return Some(source.to_owned());
    }
    edits.sort_by_key(|e| (e.at, e.phase, e.order));
    let mut out = String::with_capacity(source.len() + edits.len() * 20);
    let mut at = 0;
    for e in &edits {
        out.push_str(source.get(at..e.at)?);
        out.push_str(&e.text);
        at = e.at + e.cut;
    }
    out.push_str(source.get(at..)?);
    let config = syntax().ok()?;
    minijinja::machinery::parse(&out, TEMPLATE_NAME, config)
        .is_ok()
        .then_some(out)
}

/// The edits that wrap every `for` loop's iterable expression in [`LOOP_GUARD`] (so that
/// iterating `None` fails as in Jinja2), found through the parse tree `tree` of `source`. A
/// loop whose iterable's text is not a whole, bracket-balanced expression (one in
/// parentheses, say) is left as it is.
fn loop_guard_edits(source: &str, tree: &ast::Stmt<'_>) -> Vec<Edit> {
    fn collect(source: &str, s: &ast::Stmt<'_>, out: &mut Vec<Edit>) {
        if let ast::Stmt::ForLoop(f) = s {
            let (a, b) = extent(&f.iter);
            if let (Ok(a), Ok(b)) = (usize::try_from(a), usize::try_from(b)) {
                if source.get(a..b).is_some_and(balanced) {
                    out.extend(wrap(a, b, LOOP_GUARD, true));
                }
            }
        }
        for body in stmt_parts(s).1 {
            for child in body {
                collect(source, child, out);
            }
        }
    }
    let mut edits = Vec::new();
    collect(source, tree, &mut edits);
    edits
}

/// `source` with its loops guarded ([`loop_guard_edits`]); as it is when that would not parse.
#[cfg(test)]
fn guard_loops(source: &str, tree: &ast::Stmt<'_>) -> String {
    apply_edits(source, loop_guard_edits(source, tree)).unwrap_or_else(|| source.to_owned())
}

/// The function a `+` passes through in the full engine ([`operator_edits`]).
const PY_ADD: &str = "__promptweave_add";
/// Filters that give a Markup string in Jinja2 (transformers' `tojson` gives a plain one).
const MARKUP_FILTERS: [&str; 4] = ["safe", "escape", "e", "forceescape"];
/// The function every `%` passes through in the full engine ([`operator_edits`]).
const PY_MOD: &str = "__promptweave_mod";
/// The function every `~` passes through in the full engine ([`operator_edits`]).
const PY_CONCAT: &str = "__promptweave_concat";
/// The functions every `<`, `<=`, `>` and `>=` pass through in the full engine
/// ([`operator_edits`], [`py_compare`]).
const PY_LT: &str = "__promptweave_lt";
const PY_LE: &str = "__promptweave_le";
const PY_GT: &str = "__promptweave_gt";
const PY_GE: &str = "__promptweave_ge";
/// The function every `in` (and `not in`) passes through in the full engine
/// ([`operator_edits`], [`py_in`]).
const PY_IN: &str = "__promptweave_in";

/// The expressions and the bodies of a statement.
type StmtParts<'a> = (Vec<&'a ast::Expr<'a>>, Vec<&'a [ast::Stmt<'a>]>);

fn stmt_parts<'a>(stmt: &'a ast::Stmt<'a>) -> StmtParts<'a> {
    match stmt {
        ast::Stmt::Template(t) => (Vec::new(), vec![&t.children]),
        ast::Stmt::EmitExpr(x) => (vec![&x.expr], Vec::new()),
        ast::Stmt::ForLoop(x) => (
            [&x.target, &x.iter]
                .into_iter()
                .chain(x.filter_expr.iter())
                .collect(),
            vec![&x.body, &x.else_body],
        ),
        ast::Stmt::IfCond(x) => (vec![&x.expr], vec![&x.true_body, &x.false_body]),
        ast::Stmt::WithBlock(x) => (
            x.assignments.iter().flat_map(|(a, b)| [a, b]).collect(),
            vec![&x.body],
        ),
        ast::Stmt::Set(x) => (vec![&x.target, &x.expr], Vec::new()),
        ast::Stmt::SetBlock(x) => (
            std::iter::once(&x.target).chain(x.filter.iter()).collect(),
            vec![&x.body],
        ),
        ast::Stmt::AutoEscape(x) => (vec![&x.enabled], vec![&x.body]),
        ast::Stmt::FilterBlock(x) => (vec![&x.filter], vec![&x.body]),
        ast::Stmt::Block(x) => (Vec::new(), vec![&x.body]),
        ast::Stmt::Import(x) => (vec![&x.expr, &x.name], Vec::new()),
        ast::Stmt::FromImport(x) => (vec![&x.expr], Vec::new()),
        ast::Stmt::Extends(x) => (vec![&x.name], Vec::new()),
        ast::Stmt::Include(x) => (vec![&x.name], Vec::new()),
        ast::Stmt::Macro(x) => (
            x.args.iter().chain(x.defaults.iter()).collect(),
            vec![&x.body],
        ),
        ast::Stmt::CallBlock(x) => (
            std::iter::once(&x.call.expr)
                .chain(arg_exprs(&x.call.args))
                .chain(x.macro_decl.args.iter())
                .chain(x.macro_decl.defaults.iter())
                .collect(),
            vec![&x.macro_decl.body],
        ),
        ast::Stmt::Do(x) => (
            std::iter::once(&x.call.expr)
                .chain(arg_exprs(&x.call.args))
                .collect(),
            Vec::new(),
        ),
        ast::Stmt::EmitRaw(_) | ast::Stmt::Continue(_) | ast::Stmt::Break(_) => {
            (Vec::new(), Vec::new())
        }
    }
}

/// Calls `f` on every expression of `stmt`, sub-expressions included.
fn visit_exprs<'a>(stmt: &'a ast::Stmt<'a>, f: &mut impl FnMut(&'a ast::Expr<'a>)) {
    fn expr<'a>(e: &'a ast::Expr<'a>, f: &mut impl FnMut(&'a ast::Expr<'a>)) {
        f(e);
        for p in expr_parts(e) {
            expr(p, f);
        }
    }
    let (exprs, bodies) = stmt_parts(stmt);
    for e in exprs {
        expr(e, f);
    }
    for body in bodies {
        for s in body {
            visit_exprs(s, f);
        }
    }
}

/// The edits that route binary operators whose Jinja2 meaning minijinja's differs from through
/// functions of ours:
///
/// - every `a % b` becomes `__promptweave_mod(a, b)`: Python's `%` formats a string
///   (`'video_%02d' % n`), which minijinja refuses; numbers keep minijinja's `%`;
/// - every `a ~ b` becomes `__promptweave_concat(a, b)`: Jinja2 joins `str(a)` and `str(b)`,
///   Python's `str()` (minijinja writes lists and dicts with fewer characters escaped, and big
///   floats in fixed notation), and the result is a plain string;
/// - `a + b` becomes `__promptweave_add(a, b)`: in Jinja2 a Markup string added to a plain one
///   escapes the plain one (`"<p>"|safe + text` escapes `text`), which minijinja's `+` does not
///   do, and two lists make a new list (minijinja's `+` makes a lazy view of both, which a
///   template doubling a list in a loop nests without bound). A `+` with a string on one side
///   keeps minijinja's `+` (it concatenates strings as Python does) unless the template makes
///   Markup strings.
///
/// `None` when there is nothing to rewrite, or an operator is not found in the text.
fn operator_edits(source: &str, tree: &ast::Stmt<'_>) -> Option<Vec<Edit>> {
    let mut markup = false;
    visit_exprs(tree, &mut |e| {
        if let ast::Expr::Filter(f) = e {
            markup |= MARKUP_FILTERS.contains(&f.name);
        }
    });
    let mut edits = Vec::new();
    let mut ok = true;
    visit_exprs(tree, &mut |e| {
        if let ast::Expr::BinOp(b) = e {
            let (symbol, function) = match b.op {
                // a `+` with a string on one side is a string concatenation (or an error) as
                // minijinja does it, unless a Markup string may be the other side
                ast::BinOpKind::Add if !markup && (stringy(&b.left) || stringy(&b.right)) => {
                    return;
                }
                ast::BinOpKind::Add => ("+", PY_ADD),
                ast::BinOpKind::Rem => ("%", PY_MOD),
                ast::BinOpKind::Concat => ("~", PY_CONCAT),
                ast::BinOpKind::Lt => ("<", PY_LT),
                ast::BinOpKind::Lte => ("<=", PY_LE),
                ast::BinOpKind::Gt => (">", PY_GT),
                ast::BinOpKind::Gte => (">=", PY_GE),
                ast::BinOpKind::In => ("in", PY_IN),
                _ => return,
            };
            let compare = matches!(
                b.op,
                ast::BinOpKind::Lt
                    | ast::BinOpKind::Lte
                    | ast::BinOpKind::Gt
                    | ast::BinOpKind::Gte
                    | ast::BinOpKind::In
            );
            match call_edits(source, e, b, symbol, function, compare) {
                Some(new) => edits.extend(new),
                // a comparison not located is left to minijinja's order
                None if compare => {}
                None => ok = false,
            }
        }
    });
    (ok && !edits.is_empty()).then_some(edits)
}

/// Whether an expression gives a string whatever its inputs: a string literal, a `~`, a `+`
/// with such a side, a filter that gives strings.
fn stringy(e: &ast::Expr<'_>) -> bool {
    match e {
        ast::Expr::Const(c) => c.value.as_str().is_some(),
        ast::Expr::BinOp(b) => match b.op {
            ast::BinOpKind::Concat => true,
            ast::BinOpKind::Add => stringy(&b.left) || stringy(&b.right),
            _ => false,
        },
        ast::Expr::Filter(f) => matches!(
            f.name,
            "string" | "trim" | "tojson" | "join" | "upper" | "lower" | "capitalize" | "title"
        ),
        _ => false,
    }
}

/// The edits that make `left <symbol> right` (the expression `e`) `function(left, right)`.
/// A comparison's span starts at the token before it (minijinja), so its start is found from
/// its left operand (`compare`).
fn call_edits(
    source: &str,
    e: &ast::Expr<'_>,
    b: &ast::BinOp<'_>,
    symbol: &str,
    function: &str,
    compare: bool,
) -> Option<[Edit; 3]> {
    let span = e.span();
    let end = usize::try_from(span.end_offset).ok()?;
    let left_end = usize::try_from(extent(&b.left).1).ok()?;
    // the operator: past the left operand's closing brackets and spaces
    let op = source.get(left_end..end).and_then(|gap| {
        gap.char_indices()
            .find(|&(_, c)| !(c.is_whitespace() || c == ')' || c == ']'))
            .map(|(i, _)| left_end + i)
    })?;
    let (cut, negated) = operator_at(source.get(op..end)?, symbol)?;
    let start = if compare {
        compare_start(source, b, op)?
    } else {
        usize::try_from(span.start_offset).ok()?
    };
    let function = if negated {
        format!("not {function}")
    } else {
        function.to_owned()
    };
    if !(start < op && op < end) {
        return None;
    }
    let [open, close] = wrap(start, end, &function, false);
    Some([
        open,
        close,
        Edit {
            at: op,
            phase: 2,
            order: 0,
            text: ",".to_owned(),
            cut,
        },
    ])
}

/// The length of the operator `symbol` at the start of `text`, and whether it is negated
/// (`not in`, for `in`); `None` when `text` does not start with it (`<` is not the start of
/// `<=`, `in` not of `index`).
fn operator_at(text: &str, symbol: &str) -> Option<(usize, bool)> {
    let word_end = |rest: &str| !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_');
    if symbol == "in" {
        if let Some(rest) = text.strip_prefix("in") {
            return word_end(rest).then_some((2, false));
        }
        let after_not = text.strip_prefix("not")?;
        let gap = after_not.trim_start();
        if gap.len() == after_not.len() {
            return None; // `notin` is no operator
        }
        let rest = gap.strip_prefix("in").filter(|r| word_end(r))?;
        return Some((text.len() - rest.len(), true));
    }
    let rest = text.strip_prefix(symbol)?;
    (!rest.starts_with('=')).then_some((symbol.len(), false))
}

/// Where the text of the comparison `b` (its operator at `op`) starts: at its left operand,
/// with the opening brackets that the closing ones between that operand and the operator
/// need (`(a) < b`).
fn compare_start(source: &str, b: &ast::BinOp<'_>, op: usize) -> Option<usize> {
    let mut start = usize::try_from(extent(&b.left).0).ok()?;
    while !balanced(source.get(start..op)?) {
        // one step back, over white space or an opening bracket
        let prev = source.get(..start)?.chars().next_back()?;
        if !(prev.is_whitespace() || prev == '(') {
            return None;
        }
        start -= prev.len_utf8();
    }
    Some(start)
}

/// `source` with its operators rewritten ([`operator_edits`]); as it is otherwise.
#[cfg(test)]
fn rewrite_operators(source: &str, tree: &ast::Stmt<'_>) -> String {
    operator_edits(source, tree)
        .and_then(|edits| apply_edits(source, edits))
        .unwrap_or_else(|| source.to_owned())
}

/// markupsafe's `escape`: `&`, `<`, `>`, `'` and `"` as HTML entities.
pub(crate) fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&#34;"),
            c => out.push(c),
        }
    }
    out
}

/// The text of a string value, escaped unless it is a Markup (safe) string.
fn markup_text(v: &Value) -> Option<String> {
    let s = v.as_str()?;
    Some(if v.is_safe() {
        s.to_owned()
    } else {
        html_escape(s)
    })
}

/// Jinja2's `a + b`: a Markup string and a plain string make a Markup string with the plain
/// one escaped; two lists make a new list; anything else is minijinja's `+`.
fn py_add(a: &Value, b: &Value) -> Result<Value, Error> {
    if a.is_safe() || b.is_safe() {
        if let (Some(x), Some(y)) = (markup_text(a), markup_text(b)) {
            return Ok(Value::from_safe_string(x + &y));
        }
    }
    // the usual cases directly (minijinja's `+` through an expression costs a context)
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        if !a.is_safe() && !b.is_safe() {
            let mut out = String::with_capacity(x.len() + y.len());
            out.push_str(x);
            out.push_str(y);
            return Ok(Value::from(out));
        }
    }
    if a.is_integer() && b.is_integer() {
        if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
            if let Some(sum) = x.checked_add(y) {
                return Ok(Value::from(sum));
            }
        }
    }
    // two lists: a new list of their items, as Python makes it (minijinja's `+` makes a lazy
    // view of both, which a template doubling a list in a loop can nest without bound)
    if a.kind() == ValueKind::Seq && b.kind() == ValueKind::Seq && !a.is_tuple() && !b.is_tuple() {
        let items: Vec<Value> = a.try_iter()?.chain(b.try_iter()?).collect();
        return Ok(Value::from(items));
    }
    plain_add(a, b)
}

/// Jinja2's `a <op> b` for `<`, `<=`, `>` and `>=`: Python's order. Numbers (bools among
/// them) compare by value, strings by code points, two lists or two tuples item by item (the
/// first pair of items that differ decides); a NaN is in no order (every comparison is false).
/// Python refuses every other pair of types (`TypeError`), and Jinja2's undefined refuses to
/// be compared; minijinja orders any two values.
fn py_compare(a: &Value, b: &Value, op: &str) -> Result<Value, Error> {
    let holds = py_order(a, b, op)?.is_some_and(|order| match op {
        "<" => order.is_lt(),
        "<=" => order.is_le(),
        ">" => order.is_gt(),
        _ => order.is_ge(),
    });
    Ok(Value::from(holds))
}

/// Python's order of `a` and `b` (`None`: unordered, a NaN), or its error for `op`.
fn py_order(a: &Value, b: &Value, op: &str) -> Result<Option<std::cmp::Ordering>, Error> {
    let number = |v: &Value| match v.kind() {
        ValueKind::Bool => Some(Value::from(i64::from(v.is_true()))),
        ValueKind::Number => Some(v.clone()),
        _ => None,
    };
    let nan = |v: &Value| f64::try_from(v.clone()).is_ok_and(f64::is_nan);
    let seq = |v: &Value| v.kind() == ValueKind::Seq && Iter::type_name_of(v).is_none();
    if let (Some(x), Some(y)) = (number(a), number(b)) {
        return Ok((!nan(&x) && !nan(&y)).then(|| x.cmp(&y)));
    }
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        // UTF-8 byte order is code point order
        return Ok(Some(x.cmp(y)));
    }
    if seq(a) && seq(b) && a.is_tuple() == b.is_tuple() {
        let (xs, ys): (Vec<Value>, Vec<Value>) = (a.try_iter()?.collect(), b.try_iter()?.collect());
        // (items minijinja calls different may be equal in Python: `1` and `true`)
        for (x, y) in xs.iter().zip(&ys).filter(|(x, y)| x != y) {
            match py_order(x, y, op)? {
                Some(std::cmp::Ordering::Equal) => {}
                order => return Ok(order),
            }
        }
        return Ok(Some(xs.len().cmp(&ys.len())));
    }
    if a.is_undefined() || b.is_undefined() {
        return Err(Error::new(
            ErrorKind::UndefinedError,
            format!("an undefined value cannot be compared with '{op}'"),
        ));
    }
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "'{op}' not supported between instances of '{}' and '{}'",
            py_type_name(a),
            py_type_name(b)
        ),
    ))
}

/// Jinja2's `needle in hay`: in a string, only a string is looked for (Python's `TypeError`
/// otherwise); in a dict, only a hashable value (`TypeError` for a list or a dict). Anything
/// else is minijinja's `in`.
fn py_in(needle: &Value, hay: &Value) -> Result<Value, Error> {
    if let Some(h) = hay.as_str() {
        return match needle.as_str() {
            Some(n) => Ok(Value::from(h.contains(n))),
            None => Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "'in <string>' requires string as left operand, not {}",
                    py_type_name(needle)
                ),
            )),
        };
    }
    if hay.kind() == ValueKind::Map && !hashable(needle) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("unhashable type: '{}'", py_type_name(needle)),
        ));
    }
    // the usual containers directly (minijinja's `in` through an expression costs a context)
    if let Some(obj) = hay.as_object() {
        match obj.repr() {
            ObjectRepr::Map => return Ok(Value::from(obj.get_value(needle).is_some())),
            ObjectRepr::Seq if Iter::type_name_of(hay).is_none() => {
                return Ok(Value::from(hay.try_iter()?.any(|item| item == *needle)));
            }
            _ => {}
        }
    }
    plain_in(needle, hay)
}

/// minijinja's own `in`, through a compiled expression.
fn plain_in(needle: &Value, hay: &Value) -> Result<Value, Error> {
    static EXPR: std::sync::OnceLock<minijinja::Expression<'static, 'static>> =
        std::sync::OnceLock::new();
    plain_op(&EXPR, "a in b", needle, hay)
}

/// Whether Python can hash `v`: not a list or a dict, nor a tuple holding one.
fn hashable(v: &Value) -> bool {
    match v.kind() {
        ValueKind::Map => false,
        ValueKind::Seq if Iter::type_name_of(v).is_none() => {
            v.is_tuple()
                && v.try_iter()
                    .is_ok_and(|mut items| items.all(|x| hashable(&x)))
        }
        _ => true,
    }
}

/// minijinja's own `+`, through a compiled expression.
fn plain_add(a: &Value, b: &Value) -> Result<Value, Error> {
    static EXPR: std::sync::OnceLock<minijinja::Expression<'static, 'static>> =
        std::sync::OnceLock::new();
    plain_op(&EXPR, "a + b", a, b)
}

/// minijinja's own `%` (numbers), through a compiled expression.
fn plain_rem(a: &Value, b: &Value) -> Result<Value, Error> {
    static EXPR: std::sync::OnceLock<minijinja::Expression<'static, 'static>> =
        std::sync::OnceLock::new();
    plain_op(&EXPR, "a % b", a, b)
}

fn plain_op(
    cell: &'static std::sync::OnceLock<minijinja::Expression<'static, 'static>>,
    source: &str,
    a: &Value,
    b: &Value,
) -> Result<Value, Error> {
    static ENV: std::sync::OnceLock<Environment<'static>> = std::sync::OnceLock::new();
    let expr = if let Some(e) = cell.get() {
        e
    } else {
        let env = ENV.get_or_init(Environment::new);
        let compiled = env.compile_expression_owned(source.to_owned())?;
        cell.get_or_init(|| compiled)
    };
    expr.eval(minijinja::context! { a => a, b => b })
}

/// Jinja2's `a % b`: Python's string formatting when `a` is a string (a Markup string escapes
/// the arguments and gives a Markup string), else minijinja's `%`.
fn py_mod(a: &Value, b: &Value) -> Result<Value, Error> {
    match a.as_str() {
        Some(fmt) => {
            let out = crate::chat_printf::percent_format(fmt, b, a.is_safe())?;
            Ok(keep_markup(a, out))
        }
        None => plain_rem(a, b),
    }
}

/// Jinja2's `a ~ b` (autoescape off): `str(a) + str(b)`, a plain string.
fn py_concat(a: &Value, b: &Value) -> Value {
    let mut out = py_str(a);
    out.push_str(&py_str(b));
    Value::from(out)
}

/// Jinja2's `format` filter: `value % args` (the positional arguments as a tuple) or
/// `value % kwargs`.
#[allow(clippy::needless_pass_by_value)] // minijinja hands keyword arguments over by value
fn format_filter(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let positional = args.0;
    let names: Vec<String> = kwargs.args().map(str::to_owned).collect();
    let kwargs = if names.is_empty() {
        None
    } else {
        let mut map = Map::new();
        for name in names {
            let v = kwargs.get::<Value>(&name)?;
            map.insert(Value::from(name), v);
        }
        Some(Value::from(map))
    };
    // `value % kwargs`, or `value % args` with the positional arguments as a tuple
    let args = match kwargs {
        Some(_) if !positional.is_empty() => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "can't handle positional and keyword arguments at the same time",
            ));
        }
        Some(map) => map,
        None => Value::from_object(Tuple::from(positional)),
    };
    let out = crate::chat_printf::percent_format(&py_str(value), &args, value.is_safe())?;
    Ok(keep_markup(value, out))
}

/// `str(value)`, as the value it is when it already is a string (a Markup one stays one).
fn str_value(value: &Value) -> Value {
    if value.as_str().is_some() {
        value.clone()
    } else {
        Value::from(py_str(value))
    }
}

/// A string filter of minijinja's applied to Python's `str()` of the value: minijinja takes
/// other values by its own display, which differs from `str()` (see [`operator_edits`]).
fn on_str(value: &Value, filter: fn(StringInput<'_>) -> Value) -> Result<Value, Error> {
    let s = str_value(value);
    Ok(filter(<StringInput<'_> as ArgType>::from_value(Some(&s))?))
}

/// Jinja2's `replace(s, old, new, count=None)` with autoescape off: `str(s).replace(...)`, a
/// plain string.
#[allow(clippy::needless_pass_by_value)] // minijinja hands keyword arguments over by value
fn replace_filter(
    value: &Value,
    old: &Value,
    new: &Value,
    count: Option<i64>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let count = match count {
        Some(c) => Some(c),
        None => kwargs.get::<Option<i64>>("count")?,
    };
    kwargs.assert_all_used()?;
    let (s, old, new) = (py_str(value), py_str(old), py_str(new));
    let limit = count.and_then(|c| usize::try_from(c).ok());
    // the result's size, counted only when the cheap bound (a match wherever one could be) is
    // beyond the limit
    let grow = new.len().saturating_sub(old.len());
    let bound = (s.len() / old.len().max(1) + 1).min(limit.unwrap_or(usize::MAX));
    if s.len().saturating_add(bound.saturating_mul(grow)) > MAX_RESULT {
        check_result(replaced_len(&s, &old, &new, limit), "replace")?;
    }
    Ok(Value::from(match limit {
        Some(n) => s.replacen(&old, &new, n),
        None => s.replace(&old, &new),
    }))
}

/// The length of `text.replace(old, new)` with at most `limit` replacements (the matches are
/// counted when the replacement is longer than what it replaces).
pub(crate) fn replaced_len(text: &str, old: &str, new: &str, limit: Option<usize>) -> usize {
    let Some(grow) = new.len().checked_sub(old.len()).filter(|&g| g > 0) else {
        return text.len(); // at most
    };
    let found = if old.is_empty() {
        text.chars().count() + 1
    } else {
        text.matches(old).count()
    };
    let n = found.min(limit.unwrap_or(usize::MAX));
    text.len().saturating_add(n.saturating_mul(grow))
}

/// A Python function's parameters `names` from positional arguments and keyword arguments.
fn named_params<const N: usize>(
    args: Rest<Value>,
    kwargs: &Kwargs,
    names: [&str; N],
) -> Result<[Option<Value>; N], Error> {
    let mut params: [Option<Value>; N] = std::array::from_fn(|_| None);
    if args.0.len() > N {
        return Err(Error::from(ErrorKind::TooManyArguments));
    }
    for (slot, v) in params.iter_mut().zip(args.0) {
        *slot = Some(v);
    }
    for (slot, name) in params.iter_mut().zip(names) {
        if kwargs.has(name) {
            if slot.is_some() {
                return Err(py_error(
                    "TypeError",
                    format_args!("got multiple values for argument '{name}'"),
                ));
            }
            *slot = Some(kwargs.get::<Value>(name)?);
        }
    }
    kwargs.assert_all_used()?;
    Ok(params)
}

/// Python's `str.startswith(prefix, start[, end])` / `endswith`: `prefix` a str or a tuple of
/// them, `start`/`end` code point positions (`None`, negative: as in a slice); `None` for
/// arguments of other types (the Python-compatibility layer then reports them).
fn py_affix_in_range(s: &str, starts: bool, args: &[Value]) -> Option<bool> {
    let (affixes, range) = args.split_first()?;
    let affixes: Vec<String> = match affixes.as_str() {
        Some(a) => vec![a.to_owned()],
        None if affixes.kind() == ValueKind::Seq => affixes
            .try_iter()
            .ok()?
            .map(|a| a.as_str().map(str::to_owned))
            .collect::<Option<_>>()?,
        None => return None,
    };
    let bound = |v: Option<&Value>| -> Option<Option<i64>> {
        match v {
            None => Some(None),
            Some(v) if v.is_none() => Some(None),
            Some(v) => i64::try_from(v.clone()).ok().map(Some),
        }
    };
    let (start, end) = (bound(range.first())?, bound(range.get(1))?);
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let len = i64::try_from(chars.len()).ok()?;
    // CPython's ADJUST_INDICES
    let adjust = |v: i64| if v < 0 { (v + len).max(0) } else { v };
    let start = adjust(start.unwrap_or(0));
    let end = adjust(end.unwrap_or(len)).min(len);
    let byte_at = |i: i64| -> usize {
        usize::try_from(i)
            .ok()
            .and_then(|i| chars.get(i))
            .map_or(s.len(), |&(b, _)| b)
    };
    Some(affixes.iter().any(|affix| {
        let n = i64::try_from(affix.chars().count()).unwrap_or(i64::MAX);
        if end - n < start {
            return false;
        }
        let (from, to) = if starts {
            (start, start + n)
        } else {
            (end - n, end)
        };
        s.get(byte_at(from)..byte_at(to)) == Some(affix.as_str())
    }))
}

/// Python's `str.splitlines()`: lines without their line boundaries.
fn py_splitlines(s: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let boundary = matches!(
            c,
            '\n' | '\r'
                | '\u{0b}'
                | '\u{0c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        );
        if !boundary {
            continue;
        }
        lines.push(&s[start..i]);
        let mut next = i + c.len_utf8();
        if c == '\r' {
            if let Some(&(j, '\n')) = chars.peek() {
                chars.next();
                next = j + 1;
            }
        }
        start = next;
    }
    if start < s.len() {
        lines.push(&s[start..]);
    }
    lines
}

/// Jinja2's `indent(s, width=4, first=False, blank=False)` (`width` may be a string): the
/// lines after the first indented, blank ones too with `blank`, the first too with `first`.
#[allow(clippy::needless_pass_by_value)] // minijinja hands keyword arguments over by value
fn indent_filter(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let Some(text) = value.as_str() else {
        return Err(py_error(
            "AttributeError",
            format_args!(
                "'{}' object has no attribute 'splitlines'",
                py_type_name(value)
            ),
        ));
    };
    let [width, first, blank] = named_params(args, &kwargs, ["width", "first", "blank"])?;
    let indention = match &width {
        Some(w) if w.as_str().is_some() => w.as_str().unwrap_or_default().to_owned(),
        Some(w) => {
            let n = i64::try_from(w.clone()).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "indent width must be an integer",
                )
            })?;
            " ".repeat(checked_width(n, "an indent")?)
        }
        None => "    ".to_owned(),
    };
    let first = first.is_some_and(|v| v.is_true());
    let blank = blank.is_some_and(|v| v.is_true());
    let with_newline = format!("{text}\n");
    let lines = py_splitlines(&with_newline);
    check_result(
        text.len()
            .saturating_add(indention.len().saturating_mul(lines.len() + 1)),
        "indent",
    )?;
    // the first line as it is, every other one after a newline, indented unless it is blank
    // (blank ones too with `blank`)
    let mut out = String::with_capacity(text.len() + indention.len() * lines.len());
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
            if blank || !line.is_empty() {
                out.push_str(&indention);
            }
        }
        out.push_str(line);
    }
    if first {
        out.insert_str(0, &indention);
    }
    Ok(keep_markup(value, out))
}

/// Jinja2's attribute getter (`attribute='a.b'` or `'0'`): each dotted part looked up as an
/// item (an integer index when it is digits), undefined when missing.
fn attribute_of(value: &Value, path: &str) -> Value {
    let mut v = value.clone();
    for part in path.split('.') {
        let key = match part.parse::<i64>() {
            Ok(i) if !part.starts_with(['+', '-']) => Value::from(i),
            _ => Value::from(part),
        };
        v = v.get_item(&key).unwrap_or(Value::UNDEFINED);
    }
    v
}

/// Jinja2's `join(value, d='', attribute=None)` with autoescape off: `str(d).join(map(str,
/// items))`, a plain string.
#[allow(clippy::needless_pass_by_value)] // minijinja hands keyword arguments over by value
fn join_filter(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let [joiner, attribute] = named_params(args, &kwargs, ["d", "attribute"])?;
    let joiner = joiner.map(|j| py_str(&j)).unwrap_or_default();
    if value.is_undefined() {
        return Ok(Value::from(""));
    }
    if value.is_none() {
        return Err(py_error("TypeError", "'NoneType' object is not iterable"));
    }
    let path = attribute.filter(|a| !a.is_none()).map(|a| py_str(&a));
    let mut out = String::new();
    for (i, item) in value.try_iter()?.enumerate() {
        if i > 0 {
            check_result(out.len().saturating_add(joiner.len()), "join")?;
            out.push_str(&joiner);
        }
        match &path {
            Some(path) => out.push_str(&py_str(&attribute_of(&item, path))),
            None => out.push_str(&py_str(&item)),
        }
    }
    Ok(Value::from(out))
}

/// Jinja2's `float(value, default=0.0)`: Python's `float()` of the value, else `default`.
fn float_filter(value: &Value, default: Option<Value>) -> Result<Value, Error> {
    if value.is_undefined() {
        return Err(Error::new(
            ErrorKind::UndefinedError,
            "float() of an undefined value",
        ));
    }
    let parsed = match value.kind() {
        ValueKind::Bool => Some(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => f64::try_from(value.clone()).ok(),
        ValueKind::String => py_float_str(value.as_str().unwrap_or_default()),
        _ => None,
    };
    Ok(match parsed {
        Some(f) => Value::from(f),
        None => default.unwrap_or_else(|| Value::from(0.0)),
    })
}

/// Python's `str.center(width)` (Jinja2's `center(value, width=80)`).
fn center_filter(value: &Value, width: Option<i64>) -> Result<Value, Error> {
    let width = checked_width(width.unwrap_or(80), "a width")?;
    Ok(Value::from(py_justify(
        &py_str(value),
        "center",
        width,
        ' ',
    )))
}

/// Jinja2's `truncate(s, length=255, killwords=False, end='...', leeway=5)`.
#[allow(clippy::needless_pass_by_value)] // minijinja hands keyword arguments over by value
fn truncate_filter(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let [length, killwords, end, leeway] =
        named_params(args, &kwargs, ["length", "killwords", "end", "leeway"])?;
    let int = |v: Option<Value>, default: i64| -> Result<i64, Error> {
        match v {
            None => Ok(default),
            Some(v) => i64::try_from(v).map_err(|_| {
                Error::new(ErrorKind::InvalidOperation, "truncate: expected an integer")
            }),
        }
    };
    let length = int(length, 255)?;
    let leeway = int(leeway, 5)?;
    let killwords = killwords.is_some_and(|v| v.is_true());
    let end = end.map_or_else(|| "...".to_owned(), |e| py_str(&e));
    let end_len = i64::try_from(end.chars().count()).unwrap_or(i64::MAX);
    if length < end_len {
        return Err(py_error(
            "AssertionError",
            format_args!("expected length >= {end_len}, got {length}"),
        ));
    }
    if leeway < 0 {
        return Err(py_error(
            "AssertionError",
            format_args!("expected leeway >= 0, got {leeway}"),
        ));
    }
    let Some(s) = value.as_str() else {
        // Python's len() and slicing of another value: short ones come back as they are
        let len = value.len().map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        return match len {
            Some(n) if n <= length.saturating_add(leeway) => Ok(value.clone()),
            _ => Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("truncate of a {} value", py_type_name(value)),
            )),
        };
    };
    let count = i64::try_from(s.chars().count()).unwrap_or(i64::MAX);
    if count <= length.saturating_add(leeway) {
        return Ok(value.clone());
    }
    let keep = usize::try_from(length - end_len).unwrap_or(0);
    let head: String = s.chars().take(keep).collect();
    let head = if killwords {
        head
    } else {
        match head.rfind(' ') {
            Some(at) => head[..at].to_owned(),
            None => head,
        }
    };
    Ok(Value::from(head + &end))
}

/// The operators, filters and functions whose Jinja2 (Python) meaning minijinja's differs from:
/// `%` and `~` (see [`operator_edits`]), Python's `str()` in the string filters, and filters
/// and functions minijinja lacks.
fn add_python_semantics(env: &mut Environment<'static>) {
    env.add_filter("format", format_filter);
    env.add_function(PY_MOD, |a: Value, b: Value| py_mod(&a, &b));
    env.add_function(PY_CONCAT, |a: Value, b: Value| py_concat(&a, &b));
    // minijinja's string filters on Python's `str()` of a value that is not a string
    env.add_filter("upper", |v: Value| on_str(&v, minijinja::filters::upper));
    env.add_filter("lower", |v: Value| on_str(&v, minijinja::filters::lower));
    env.add_filter("capitalize", |v: Value| {
        on_str(&v, minijinja::filters::capitalize)
    });
    env.add_filter("replace", replace_filter);
    env.add_filter("join", join_filter);
    env.add_filter("float", float_filter);
    env.add_filter("center", center_filter);
    env.add_filter("truncate", truncate_filter);
    // Jinja2 takes float(value) of a string too
    env.add_filter(
        "filesizeformat",
        |v: Value, binary: Option<bool>| -> Result<String, Error> {
            let size = match v.as_str() {
                Some(s) => py_float_str(s).ok_or_else(|| {
                    py_error(
                        "ValueError",
                        format_args!("could not convert string to float: {s:?}"),
                    )
                })?,
                None => f64::try_from(v)?,
            };
            Ok(minijinja_contrib::filters::filesizeformat(size, binary))
        },
    );
    env.add_function("joiner", minijinja_contrib::globals::joiner);
    // Jinja2's `Markup(value)`: the `str()` of a value that is not a string
    env.add_filter("safe", |v: Value| {
        if v.is_safe() {
            v
        } else {
            Value::from_safe_string(py_str(&v))
        }
    });
    env.add_filter("indent", indent_filter);
}

impl ChatTemplate {
    /// Compiles `source` as transformers would.
    pub fn compile(source: &str) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        env.set_syntax(syntax()?);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.set_formatter(|out, _state, value| {
            py_str_into(out, value)
                .map_err(|()| Error::new(ErrorKind::WriteFailure, "write failed"))
        });
        env.set_unknown_method_callback(py_method);
        // a budget of work and memory per render, so that a template cannot make the process
        // allocate without bound (Python would fail with MemoryError; an allocation failure
        // here would end the process)
        env.set_fuel(Some(FUEL));
        // Jinja2's generators and reverse iterators (`map`, `selectattr`, `reverse`, ...)
        crate::chat_gen::add_filters(&mut env);
        env.add_filter("tojson", tojson_filter);
        // a Markup string stays one through `string` and `trim`, as in Jinja2
        env.add_filter("string", |v: Value| keep_markup(&v, py_str(&v)));
        env.add_filter("trim", trim_filter);
        env.add_filter("wordcount", wordcount_filter);
        env.add_filter("title", |v: Value| jinja_title(&py_str(&v)));
        env.add_filter("int", int_filter);
        add_python_semantics(&mut env);
        // Jinja2's tests: `none` is neither iterable nor a sequence; strings and dicts are
        // sequences (they have `len()` and `[]`), and so is undefined.
        env.add_test("iterable", |v: &Value| !v.is_none() && v.try_iter().is_ok());
        env.add_test("sequence", |v: &Value| {
            v.is_undefined()
                || matches!(
                    v.kind(),
                    ValueKind::Seq | ValueKind::Map | ValueKind::String
                )
        });
        env.add_function("raise_exception", |msg: Value| -> Result<Value, Error> {
            let text = py_str(&msg);
            Err(Error::new(ErrorKind::InvalidOperation, text.clone()).with_source(Raised(text)))
        });
        env.add_function("strftime_now", strftime_now);
        env.add_function(LOOP_GUARD, |v: Value| -> Result<Value, Error> {
            if v.is_none() {
                // Jinja2 (Python) refuses to iterate None; minijinja iterates it as empty
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "'NoneType' object is not iterable",
                ));
            }
            // a loop over an iterator takes all its items (Jinja2's `loop.length` and
            // `loop.last` need them; minijinja knows them only for a list)
            if let Some(rest) = Iter::drain(&v) {
                return Ok(Value::from(rest));
            }
            // a loop over a string takes its characters (minijinja knows no `loop.length`,
            // `loop.revindex` or `loop.last` for one)
            if let Some(text) = v.as_str() {
                return Ok(Value::from(
                    text.chars()
                        .map(|c| Value::from(c.to_string()))
                        .collect::<Vec<_>>(),
                ));
            }
            Ok(v)
        });
        env.add_function(PY_ADD, |a: Value, b: Value| py_add(&a, &b));
        env.add_function(PY_LT, |a: Value, b: Value| py_compare(&a, &b, "<"));
        env.add_function(PY_LE, |a: Value, b: Value| py_compare(&a, &b, "<="));
        env.add_function(PY_GT, |a: Value, b: Value| py_compare(&a, &b, ">"));
        env.add_function(PY_GE, |a: Value, b: Value| py_compare(&a, &b, ">="));
        env.add_function(PY_IN, |a: Value, b: Value| py_in(&a, &b));
        // markupsafe's entities (`&#39;`, `&#34;`), not minijinja's (`&#x27;`, `&quot;`)
        env.add_filter("forceescape", |v: Value| {
            Value::from_safe_string(html_escape(&py_str(&v)))
        });
        for name in ["escape", "e"] {
            env.add_filter(name, |v: Value| {
                if v.is_safe() {
                    v
                } else {
                    Value::from_safe_string(html_escape(&py_str(&v)))
                }
            });
        }
        let rewritten = rewrite_generation_tags(&jinja2_lexing(source));
        // parsed once for the fast path and the rewrites; a source that does not parse goes to
        // the full engine as it is, which reports why
        let (fast, checked) =
            match minijinja::machinery::parse(&rewritten, TEMPLATE_NAME, syntax()?) {
                Ok(tree) => {
                    let fast = FastTemplate::compile(&tree)
                        .filter(FastTemplate::is_useful)
                        .map(Arc::new);
                    // the loop guards and the Markup additions in one edit of the source; the
                    // guards alone if that does not parse, nothing if they do not either
                    let guards = loop_guard_edits(&rewritten, &tree);
                    let all = operator_edits(&rewritten, &tree)
                        .map(|ops| guards.iter().cloned().chain(ops).collect());
                    let checked = all
                        .and_then(|edits| apply_edits(&rewritten, edits))
                        .or_else(|| apply_edits(&rewritten, guards));
                    (fast, checked.unwrap_or(rewritten))
                }
                Err(_) => (None, rewritten),
            };
        env.add_template_owned(TEMPLATE_NAME, checked)
            .map_err(|e| convert_error(&e))?;
        Ok(ChatTemplate {
            env: Arc::new(env),
            source: Arc::from(source),
            fast,
            alias_reasoning: true,
        })
    }

    /// The same template rendering as transformers before 5.21 did: a message's reasoning
    /// fields (`reasoning_content`, `thinking`, `reasoning`) are not aliased to one another; the
    /// template sees the message as given.
    #[must_use]
    pub fn without_reasoning_aliases(&self) -> ChatTemplate {
        ChatTemplate {
            alias_reasoning: false,
            ..self.clone()
        }
    }

    /// The same template without its fast path (every render goes through the full engine).
    #[must_use]
    pub fn without_fast_path(&self) -> ChatTemplate {
        ChatTemplate {
            fast: None,
            ..self.clone()
        }
    }

    /// Whether the template has a fast path ([`crate::chat_fast`]).
    pub fn has_fast_path(&self) -> bool {
        self.fast.is_some()
    }

    /// Renders one conversation on the fast path alone, appending to `out`: `false` (and `out`
    /// unchanged) when the template has none or it gave up on this conversation.
    pub fn try_fast(&self, ctx: &FastContext<'_, '_>, out: &mut String) -> bool {
        // the fast path does not alias reasoning fields: such a message goes to the full engine
        let reasoning = self.alias_reasoning
            && ctx
                .messages
                .iter()
                .any(|m| m.fields.iter().any(|(k, _)| REASONING_FIELDS.contains(k)));
        !reasoning
            && self
                .fast
                .as_ref()
                .is_some_and(|fast| fast.render_into(ctx, out).is_ok())
    }

    /// Renders one conversation of plain values (see [`crate::chat_fast`]), appending to
    /// `out`: on the fast path when it can, else with the full engine. The result is the one
    /// [`ChatTemplate::render_conversation`] gives for the same input.
    pub fn render_plain(
        &self,
        ctx: &FastContext<'_, '_>,
        continue_final: Option<&str>,
        out: &mut String,
    ) -> Result<(), ChatError> {
        if continue_final.is_none() && self.try_fast(ctx, out) {
            return Ok(());
        }
        let messages = ctx.messages.iter().map(plain_map).collect();
        let variables: Vec<(Value, Value)> = ctx
            .variables
            .iter()
            .map(|(k, v)| (Value::from(*k), scalar_value(*v)))
            .collect();
        let options = RenderOptions {
            add_generation_prompt: ctx.add_generation_prompt,
            continue_final: continue_final.map(str::to_owned),
        };
        out.push_str(&self.render_conversation(messages, &variables, &options)?);
        Ok(())
    }

    /// The template source as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders the template with `context` (a map value) as its variables.
    pub fn render_context(&self, context: &Value) -> Result<String, ChatError> {
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| convert_error(&e))?;
        tmpl.render(context).map_err(|e| convert_error(&e))
    }

    /// Renders one conversation as transformers' `render_jinja_template` does for each chat:
    /// reasoning fields aliased, the continue tag added to and cut from the final message.
    /// `variables` are the other template variables (`tools`, `documents`, special tokens,
    /// extra keyword arguments), in transformers' order; `add_generation_prompt` and
    /// `messages` are set here.
    pub fn render_conversation(
        &self,
        messages: Vec<Map>,
        variables: &[(Value, Value)],
        options: &RenderOptions,
    ) -> Result<String, ChatError> {
        let mut chat: Vec<Map> = if self.alias_reasoning {
            messages.into_iter().map(alias_reasoning).collect()
        } else {
            messages
        };
        let mut continued: Option<String> = None;
        if let Some(field) = &options.continue_final {
            continued = Some(self.tag_final_message(&mut chat, field)?);
        }
        let mut context = Map::with_capacity(variables.len() + 2);
        context.insert(
            Value::from("messages"),
            Value::from(chat.into_iter().map(Value::from).collect::<Vec<Value>>()),
        );
        for (k, v) in variables {
            context.insert(k.clone(), v.clone());
        }
        context.insert(
            Value::from("add_generation_prompt"),
            Value::from(options.add_generation_prompt),
        );
        let rendered = self.render_context(&Value::from(context))?;
        match continued {
            None => Ok(rendered),
            Some(final_text) => cut_at_continue_tag(rendered, &final_text),
        }
    }

    /// Appends the continue tag to the final message's `field`; returns the text to look for.
    fn tag_final_message(&self, chat: &mut [Map], field: &str) -> Result<String, ChatError> {
        let Some(last) = chat.last_mut() else {
            return Err(ChatError::Input(
                "continue_final_message is set but the conversation is empty!".into(),
            ));
        };
        let key = Value::from(field);
        let Some(final_message) = last.get(&key).filter(|v| !v.is_none()).cloned() else {
            return Err(ChatError::Input(format!(
                "continue_final_message is set but the final message has no \"{field}\" to continue!"
            )));
        };
        let mut fields: Vec<String> = vec![field.to_owned()];
        if REASONING_FIELDS.contains(&field) {
            fields = REASONING_FIELDS
                .iter()
                .filter(|f| {
                    last.get(&Value::from(**f))
                        .is_some_and(|v| *v == final_message)
                })
                .map(|f| (*f).to_owned())
                .collect();
        }
        if !fields.iter().any(|f| self.source.contains(f.as_str())) {
            return Err(ChatError::Input(format!(
                "continue_final_message is set to \"{field}\" but this is not an accepted field in the chat_template"
            )));
        }
        if final_message.kind() == ValueKind::Seq {
            // the last content block with a "text" key gets the tag
            let mut blocks: Vec<Value> = final_message
                .try_iter()
                .map_err(|e| convert_error(&e))?
                .collect();
            let text_key = Value::from("text");
            for block in blocks.iter_mut().rev() {
                let has_text = block.kind() == ValueKind::Map
                    && block.get_item(&text_key).is_ok_and(|v| !v.is_undefined());
                if has_text {
                    let text = block.get_item(&text_key).map_err(|e| convert_error(&e))?;
                    let mut copy: Map = block
                        .try_iter()
                        .map_err(|e| convert_error(&e))?
                        .map(|k| {
                            let v = block.get_item(&k).unwrap_or_default();
                            (k, v)
                        })
                        .collect();
                    let tagged = concat_values(&text, CONTINUE_TAG)?;
                    copy.insert(text_key.clone(), tagged);
                    *block = Value::from(copy);
                    last.insert(key, Value::from(blocks));
                    return Ok(py_str(&text));
                }
            }
            return Err(ChatError::Input(
                "continue_final_message is set but we could not find any text to continue in the final message!"
                    .into(),
            ));
        }
        for f in &fields {
            let k = Value::from(f.as_str());
            if let Some(v) = last.get(&k).cloned() {
                last.insert(k, concat_values(&v, CONTINUE_TAG)?);
            }
        }
        Ok(py_str(&final_message))
    }
}

/// A template value of a plain scalar.
pub fn scalar_value(v: Scalar<'_>) -> Value {
    match v {
        Scalar::Str(s) => Value::from(s),
        Scalar::Int(i) => Value::from(i),
        Scalar::Bool(b) => Value::from(b),
        Scalar::None => Value::from(()),
    }
}

/// A plain message as a template map.
pub fn plain_map(m: &FastMessage<'_>) -> Map {
    m.fields
        .iter()
        .map(|(k, v)| (Value::from(*k), scalar_value(*v)))
        .collect()
}

/// `value + tag` with Python's `+` (only strings can be continued).
fn concat_values(value: &Value, tag: &str) -> Result<Value, ChatError> {
    match value.as_str() {
        Some(s) => Ok(Value::from(format!("{s}{tag}"))),
        None => Err(ChatError::Input(format!(
            "can only concatenate str (not \"{}\") to str",
            py_type_name(value)
        ))),
    }
}

fn cut_at_continue_tag(rendered: String, final_text: &str) -> Result<String, ChatError> {
    let tag = CONTINUE_TAG.trim_end();
    let stripped = py_strip(final_text, None);
    if !rendered.contains(stripped) || !rendered.contains(tag) {
        return Err(ChatError::Input(format!(
            "continue_final_message is set but the final message does not appear in the chat after \
             applying the chat template! This can happen if the chat template deletes portions of \
             the final message. Please verify the chat template and final message in your chat to \
             ensure they are compatible.Final message to continue: {stripped}\nRendered chat:\n{rendered}"
        )));
    }
    let Some(at) = rendered.rfind(tag) else {
        return Ok(rendered);
    };
    let mut out = rendered;
    if out[at..].starts_with(CONTINUE_TAG) {
        out.truncate(at);
    } else {
        out.truncate(at);
        let keep = py_rstrip(&out, None).len();
        out.truncate(keep);
    }
    Ok(out)
}

/// transformers' `_alias_reasoning_fields`: a message with reasoning under any of its names gets
/// it under `thinking` (first) and `reasoning_content` (last) too.
fn alias_reasoning(message: Map) -> Map {
    let named = |k: &Value| k.as_str().is_some_and(|k| REASONING_FIELDS.contains(&k));
    if !message.keys().any(named) {
        return message;
    }
    let reasoning = REASONING_FIELDS.iter().find_map(|f| {
        message
            .get(&Value::from(*f))
            .filter(|v| !v.is_none())
            .cloned()
    });
    let Some(reasoning) = reasoning else {
        return message;
    };
    let mut out = Map::with_capacity(message.len() + 2);
    out.insert(Value::from("thinking"), reasoning.clone());
    for (k, v) in message {
        out.insert(k, v);
    }
    out.insert(Value::from("reasoning_content"), reasoning);
    out
}

/// Two lexer differences of Jinja2 from minijinja, applied to the source:
/// * Jinja2 turns every `\r\n` and `\r` of template text and string literals into `\n`;
/// * with `trim_blocks`, minijinja drops a newline right after `{% raw %}`, Jinja2 keeps it
///   (its raw tag takes no part in block trimming): one more newline is put there for
///   minijinja to drop.
fn jinja2_lexing(source: &str) -> String {
    let text = if source.contains('\r') {
        source.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        source.to_owned()
    };
    if !text.contains("raw") {
        return text;
    }
    // raw blocks are data tokens right after a raw tag (tokenized without trimming)
    let mut at_raw = Vec::new();
    let config = minijinja::syntax::SyntaxConfig::default();
    for token in minijinja::machinery::tokenize(&text, false, config) {
        let Ok((minijinja::machinery::Token::TemplateData(_), span)) = token else {
            continue;
        };
        let Ok(start) = usize::try_from(span.start_offset) else {
            continue;
        };
        let (Some(before), Some(after)) = (text.get(..start), text.get(start..)) else {
            continue;
        };
        let is_raw_tag = before.strip_suffix("%}").and_then(|b| {
            let tag = &b[b.rfind("{%")? + 2..];
            let tag = tag.strip_prefix(['-', '+']).unwrap_or(tag);
            (tag.trim() == "raw").then_some(())
        });
        if is_raw_tag.is_some() && after.starts_with('\n') {
            at_raw.push(start);
        }
    }
    let mut out = text;
    for at in at_raw.into_iter().rev() {
        out.insert(at, '\n');
    }
    out
}

/// Replaces the block tags `generation` / `endgeneration` (transformers' assistant-mask
/// extension) by `if true` / `endif`, keeping whitespace-control marks, so their body renders
/// with the same trimming.
fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at + 2]);
        rest = &rest[at + 2..];
        let mut head = 0;
        let bytes = rest.as_bytes();
        if matches!(bytes.first(), Some(b'-' | b'+')) {
            head = 1;
        }
        let ws = rest[head..].len() - rest[head..].trim_start().len();
        let word_start = head + ws;
        let word_len = rest[word_start..]
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let word = &rest[word_start..word_start + word_len];
        let after = rest[word_start + word_len..].trim_start();
        let closes =
            after.starts_with("%}") || after.starts_with("-%}") || after.starts_with("+%}");
        let replacement = match word {
            "generation" if closes => Some("if true"),
            "endgeneration" if closes => Some("endif"),
            _ => None,
        };
        if let Some(r) = replacement {
            out.push_str(&rest[..word_start]);
            out.push_str(r);
            rest = &rest[word_start + word_len..];
        }
    }
    out.push_str(rest);
    out
}

// ---------------------------------------------------------------------------------------------
// Python's str(), repr() and whitespace
// ---------------------------------------------------------------------------------------------

/// Python's `str.title()`: each run of cased characters starts upper case and goes on lower
/// case (outside ASCII, the upper case mapping stands for the title case one, which differs
/// for a few characters such as `ß` and the Latin digraphs).
pub fn py_title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    for c in s.chars() {
        let cased = c.is_uppercase() || c.is_lowercase();
        if !cased {
            out.push(c);
        } else if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = cased;
    }
    out
}

/// Jinja2's `title` filter: the text split before each run of `-`, whitespace (Python's),
/// `(`, `{`, `[` or `<`; each piece's first character upper case and the rest lower case.
pub fn jinja_title(s: &str) -> String {
    let is_delim = |c: char| matches!(c, '-' | '(' | '{' | '[' | '<') || py_is_space(c);
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        let n = c.len_utf8();
        if is_delim(c) {
            out.push(c);
            rest = &rest[n..];
            continue;
        }
        // a piece: its first character upper cased, the rest lower cased as a string of its
        // own (Python's `item[1:].lower()`, final sigma included)
        let end = rest.find(is_delim).unwrap_or(rest.len());
        out.extend(c.to_uppercase());
        out.push_str(&rest[n..end].to_lowercase());
        rest = &rest[end..];
    }
    out
}

/// Python's `str.isspace()` for one character.
pub fn py_is_space(c: char) -> bool {
    c.is_whitespace() || matches!(c, '\u{1c}'..='\u{1f}')
}

fn py_strip<'a>(s: &'a str, chars: Option<&str>) -> &'a str {
    match chars {
        None => s.trim_matches(py_is_space),
        Some(set) => s.trim_matches(|c| set.contains(c)),
    }
}

fn py_lstrip<'a>(s: &'a str, chars: Option<&str>) -> &'a str {
    match chars {
        None => s.trim_start_matches(py_is_space),
        Some(set) => s.trim_start_matches(|c| set.contains(c)),
    }
}

fn py_rstrip<'a>(s: &'a str, chars: Option<&str>) -> &'a str {
    match chars {
        None => s.trim_end_matches(py_is_space),
        Some(set) => s.trim_end_matches(|c| set.contains(c)),
    }
}

/// Python's `str(value)`.
pub fn py_str(value: &Value) -> String {
    let mut out = String::new();
    write_py_str(&mut out, value);
    out
}

fn py_str_into(out: &mut minijinja::Output<'_>, value: &Value) -> Result<(), ()> {
    if let Some(s) = value.as_str() {
        return out.write_str(s).map_err(|_| ());
    }
    let mut buf = String::new();
    write_py_str(&mut buf, value);
    out.write_str(&buf).map_err(|_| ())
}

/// Python's `repr(value)`.
pub(crate) fn py_str_repr(value: &Value) -> String {
    let mut out = String::new();
    write_py_repr(&mut out, value, 0);
    out
}

fn write_py_str(out: &mut String, value: &Value) {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::String => out.push_str(value.as_str().unwrap_or_default()),
        _ => write_py_repr(out, value, 0),
    }
}

/// The name Python's `type(value).__name__` would give.
pub fn py_type_name(value: &Value) -> &'static str {
    if let Some(name) = Iter::type_name_of(value) {
        return name;
    }
    match value.kind() {
        ValueKind::Undefined => "Undefined",
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number => {
            if value.is_integer() {
                "int"
            } else {
                "float"
            }
        }
        ValueKind::String => "str",
        ValueKind::Bytes => "bytes",
        ValueKind::Seq => "list",
        ValueKind::Map => "dict",
        _ => "object",
    }
}

const MAX_REPR_DEPTH: usize = 500;

fn write_py_repr(out: &mut String, value: &Value, depth: usize) {
    if depth > MAX_REPR_DEPTH {
        out.push_str("...");
        return;
    }
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => write_py_number(out, value),
        ValueKind::String => write_py_str_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Iterable if Iter::type_name_of(value).is_some() => {
            out.push_str(&Iter::py_str_of(value).unwrap_or_default());
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let tuple = value.is_tuple();
            out.push(if tuple { '(' } else { '[' });
            let mut n = 0;
            if let Ok(iter) = value.try_iter() {
                for (i, item) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_py_repr(out, &item, depth + 1);
                    n = i + 1;
                }
            }
            if tuple && n == 1 {
                out.push(',');
            }
            out.push(if tuple { ')' } else { ']' });
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(iter) = value.try_iter() {
                for (i, key) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_py_repr(out, &key, depth + 1);
                    out.push_str(": ");
                    let item = value.get_item(&key).unwrap_or_default();
                    write_py_repr(out, &item, depth + 1);
                }
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{value}");
        }
    }
}

fn write_py_number(out: &mut String, value: &Value) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
        return;
    }
    match f64::try_from(value.clone()) {
        Ok(f) => write_py_float(out, f),
        Err(_) => {
            let _ = write!(out, "{value}");
        }
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, fixed notation for exponents in
/// `-4..16`, else scientific with a signed two-digit exponent.
pub fn write_py_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("nan");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "inf" } else { "-inf" });
        return;
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-5"
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        let n = i32::try_from(digits.len()).unwrap_or(i32::MAX);
        if exp >= 0 {
            let int_len = usize::try_from(exp + 1).unwrap_or(0);
            if digits.len() <= int_len {
                out.push_str(&digits);
                for _ in 0..(int_len - digits.len()) {
                    out.push('0');
                }
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            for _ in 0..(-exp - 1) {
                out.push('0');
            }
            out.push_str(&digits);
        }
        let _ = n;
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
}

/// Python's `repr(str)`.
pub fn write_py_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !py_is_printable(c) => {
                let n = u32::from(c);
                if n < 0x100 {
                    let _ = write!(out, "\\x{n:02x}");
                } else if n < 0x10000 {
                    let _ = write!(out, "\\u{n:04x}");
                } else {
                    let _ = write!(out, "\\U{n:08x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's `str.isprintable()` for one character, for the characters that occur in text:
/// control characters, separators other than the space, format characters and private use are
/// not printable. (Unassigned code points are treated as printable.)
fn py_is_printable(c: char) -> bool {
    let n = u32::from(c);
    !(n < 0x20
        || (0x7f..=0xa0).contains(&n)
        || n == 0xad
        || (0x600..=0x605).contains(&n)
        || n == 0x61c
        || n == 0x6dd
        || n == 0x70f
        || n == 0x8e2
        || n == 0x1680
        || n == 0x180e
        || (0x2000..=0x200f).contains(&n)
        || (0x2028..=0x202f).contains(&n)
        || (0x205f..=0x2064).contains(&n)
        || (0x2066..=0x206f).contains(&n)
        || n == 0x3000
        || (0xd800..=0xf8ff).contains(&n)
        || n == 0xfeff
        || (0xfff9..=0xfffb).contains(&n)
        || n == 0x110bd
        || n == 0x110cd
        || (0x1bca0..=0x1bca3).contains(&n)
        || (0x1d173..=0x1d17a).contains(&n)
        || n == 0xe0001
        || (0xe0020..=0xe007f).contains(&n)
        || n >= 0xf0000)
}

// ---------------------------------------------------------------------------------------------
// filters, functions and methods
// ---------------------------------------------------------------------------------------------

fn trim_filter(value: &Value, chars: Option<Value>) -> Value {
    let s = py_str(value);
    let chars = chars
        .filter(|c| !c.is_none() && !c.is_undefined())
        .map(|c| py_str(&c));
    keep_markup(value, py_strip(&s, chars.as_deref()).to_owned())
}

/// `text` as a value: a Markup (safe) string when `from` was one.
fn keep_markup(from: &Value, text: String) -> Value {
    if from.is_safe() {
        Value::from_safe_string(text)
    } else {
        Value::from(text)
    }
}

/// Jinja2's `int(value, default=0, base=10)`: Python's `int()` of the value (a string in
/// `base`), else `int(float(value))`, else `default`.
#[allow(clippy::needless_pass_by_value)] // minijinja hands keyword arguments over by value
fn int_filter(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let [default, base] = named_params(args, &kwargs, ["default", "base"])?;
    let base = match base {
        None => None,
        Some(b) => Some(
            i64::try_from(b)
                .ok()
                .and_then(|b| u32::try_from(b).ok())
                .ok_or_else(|| py_error("ValueError", "int() base must be >= 2 and <= 36, or 0"))?,
        ),
    };
    if value.is_undefined() {
        // Jinja2's Undefined refuses int()
        return Err(Error::new(
            ErrorKind::UndefinedError,
            "int() of an undefined value",
        ));
    }
    let default = default.unwrap_or_else(|| Value::from(0));
    let base = base.unwrap_or(10);
    if let Some(s) = value.as_str() {
        if let Some(i) = py_int_str(s, base) {
            return Ok(Value::from(i));
        }
        return Ok(match py_float_str(s) {
            Some(f) => float_to_int(f)?.unwrap_or(default),
            None => default,
        });
    }
    Ok(match value.kind() {
        ValueKind::Bool => Value::from(i64::from(value.is_true())),
        ValueKind::Number if value.is_integer() => value.clone(),
        ValueKind::Number => {
            float_to_int(f64::try_from(value.clone()).unwrap_or(f64::NAN))?.unwrap_or(default)
        }
        _ => default,
    })
}

/// `int(f)`: `None` for NaN (a ValueError, so Jinja2 takes the default); an error for an
/// infinity (an OverflowError, which Jinja2 lets through).
fn float_to_int(f: f64) -> Result<Option<Value>, Error> {
    if f.is_nan() {
        return Ok(None);
    }
    if f.is_infinite() {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "cannot convert float infinity to integer",
        ));
    }
    let t = f.trunc();
    // i64 covers what templates meet; a larger value is left to Python-size integers
    if t.abs() < 9.2e18 {
        #[allow(clippy::cast_possible_truncation)]
        return Ok(Some(Value::from(t as i64)));
    }
    Err(Error::new(ErrorKind::InvalidOperation, "integer too large"))
}

/// Python's `int(s, base)` for ASCII digits: surrounding whitespace, a sign, `_` between
/// digits (`None` where Python raises, or for a value beyond 64 bits).
pub(crate) fn py_int_str(s: &str, base: u32) -> Option<i64> {
    if base != 0 && !(2..=36).contains(&base) {
        return None;
    }
    let t = s.trim_matches(py_is_space);
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    // a `0x`/`0o`/`0b` prefix matching the base (base 0: the prefix gives it)
    let prefix = |p: char| {
        digits.len() > 1
            && digits.starts_with('0')
            && digits[1..].starts_with([p, p.to_ascii_uppercase()])
    };
    let (base, digits) = match base {
        0 | 16 if prefix('x') => (16, &digits[2..]),
        0 | 8 if prefix('o') => (8, &digits[2..]),
        0 | 2 if prefix('b') => (2, &digits[2..]),
        // base 0 reads decimals, where a leading zero is only allowed in zero itself
        0 if digits.starts_with('0') && digits.chars().any(|c| c.is_ascii_digit() && c != '0') => {
            return None;
        }
        0 => (10, digits),
        b => (b, digits),
    };
    // after a prefix one `_` may come first
    let digits = if digits.len() < t.len() - 1 && base != 10 {
        digits.strip_prefix('_').unwrap_or(digits)
    } else {
        digits
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    if !clean.chars().all(|c| c.is_digit(base)) {
        return None;
    }
    let n = i64::from_str_radix(&clean, base).ok()?;
    Some(if negative { -n } else { n })
}

/// Python's `float(s)` for the common spellings (decimal, exponent, `inf`, `nan`).
fn py_float_str(s: &str) -> Option<f64> {
    let t = s.trim_matches(py_is_space);
    let lower = t.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    let special = matches!(body, "inf" | "infinity" | "nan");
    let plain = !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'));
    if !(special || plain) || lower.len() - body.len() > 1 {
        return None;
    }
    lower.parse::<f64>().ok()
}

fn strftime_now(format: &str) -> Result<Value, Error> {
    strftime_now_text(format).map(Value::from).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: unsupported format {format:?}"),
        )
    })
}

/// transformers' `strftime_now(format)`: the local time formatted (`None`: a format chrono
/// does not take).
pub(crate) fn strftime_now_text(format: &str) -> Option<String> {
    use chrono::format::{Item, StrftimeItems};
    let items: Vec<Item<'_>> = StrftimeItems::new(format).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return None;
    }
    let now = chrono::Local::now();
    let mut out = String::new();
    write!(out, "{}", now.format_with_items(items.into_iter())).ok()?;
    Some(out)
}

/// Python methods on values; whitespace-sensitive string methods use Python's whitespace, the
/// rest come from `minijinja-contrib`'s Python compatibility layer.
fn py_method(
    state: &mut State<'_, '_>,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        let opt_chars = |args: &[Value]| -> Result<Option<String>, Error> {
            match args {
                [] => Ok(None),
                [v] if v.is_none() => Ok(None),
                [v] => v.as_str().map(|c| Some(c.to_owned())).ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        format!("{method} arg must be None or str"),
                    )
                }),
                _ => Err(Error::from(ErrorKind::TooManyArguments)),
            }
        };
        match method {
            "strip" => return Ok(Value::from(py_strip(s, opt_chars(args)?.as_deref()))),
            "lstrip" => return Ok(Value::from(py_lstrip(s, opt_chars(args)?.as_deref()))),
            "rstrip" => return Ok(Value::from(py_rstrip(s, opt_chars(args)?.as_deref()))),
            "split" => return py_split(s, args),
            "rsplit" => return py_rsplit(s, args),
            "index" | "rindex" => {
                let found = minijinja_contrib::pycompat::unknown_method_callback(
                    state,
                    value,
                    if method == "index" { "find" } else { "rfind" },
                    args,
                )?;
                if i64::try_from(found.clone()).is_ok_and(|n| n < 0) {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "substring not found",
                    ));
                }
                return Ok(found);
            }
            "title" if args.is_empty() => return Ok(Value::from(py_title(s))),
            "format" => return py_str_format(state, value, s, args),
            "isspace" if args.is_empty() => {
                return Ok(Value::from(!s.is_empty() && s.chars().all(py_is_space)));
            }
            _ => {
                if let Some(result) = py_more_str_methods(s, method, args) {
                    return result;
                }
            }
        }
    }
    if value.kind() == ValueKind::Map && !value.is_kwargs() && method == "copy" && args.is_empty() {
        let map: Map = value
            .try_iter()?
            .map(|k| {
                let v = value.get_item(&k).unwrap_or_default();
                (k, v)
            })
            .collect();
        return Ok(Value::from(map));
    }
    if value.kind() == ValueKind::Seq && method == "index" && !args.is_empty() {
        let [needle, rest @ ..] = args else {
            return Err(Error::from(ErrorKind::MissingArgument));
        };
        let len = value.len().unwrap_or(0);
        let bound = |at: Option<&Value>, default: usize| -> usize {
            at.and_then(|v| i64::try_from(v.clone()).ok())
                .map_or(default, |n| {
                    let n = if n < 0 {
                        i64::try_from(len).unwrap_or(i64::MAX) + n
                    } else {
                        n
                    };
                    usize::try_from(n.max(0)).unwrap_or(0).min(len)
                })
        };
        let (start, stop) = (bound(rest.first(), 0), bound(rest.get(1), len));
        for (i, item) in value.try_iter()?.enumerate() {
            if i >= start && i < stop && &item == needle {
                return Ok(Value::from(i));
            }
        }
        let mut m = String::new();
        write_py_repr(&mut m, needle, 0);
        m.push_str(" is not in list");
        return Err(py_error("ValueError", m));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// More of Python's `str` methods: `swapcase`, `casefold`, `istitle`, `zfill`, `center`,
/// `ljust`, `rjust`, `partition`, `rpartition`, `splitlines` (every line boundary Python
/// knows), `removeprefix`, `removesuffix`, `startswith`/`endswith` with a range, `expandtabs`
/// (`None`: not one of them, or arguments the compatibility layer then reports).
fn py_more_str_methods(s: &str, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    let result = match (method, args) {
        ("swapcase", []) => Ok(Value::from(py_swapcase(s))),
        ("casefold", []) => Ok(Value::from(s.to_lowercase().replace('ß', "ss"))),
        ("istitle", []) => Ok(Value::from(py_istitle(s))),
        ("zfill", _) => width_arg(args.first()).map(|w| Value::from(py_zfill(s, w))),
        ("center" | "ljust" | "rjust", [width]) => {
            width_arg(Some(width)).map(|w| Value::from(py_justify(s, method, w, ' ')))
        }
        ("center" | "ljust" | "rjust", [width, fill]) => {
            let text = fill.as_str().unwrap_or_default();
            let mut chars = text.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => {
                    width_arg(Some(width)).map(|w| Value::from(py_justify(s, method, w, c)))
                }
                _ => Err(py_error(
                    "TypeError",
                    "The fill character must be exactly one character long",
                )),
            }
        }
        ("partition" | "rpartition", [sep]) => match sep.as_str() {
            None => Err(py_error("TypeError", "must be str")),
            Some("") => Err(py_error("ValueError", "empty separator")),
            Some(sep) => {
                let found = if method == "partition" {
                    s.find(sep)
                } else {
                    s.rfind(sep)
                };
                let parts: [&str; 3] = match (found, method) {
                    (Some(at), _) => [&s[..at], sep, &s[at + sep.len()..]],
                    (None, "partition") => [s, "", ""],
                    (None, _) => ["", "", s],
                };
                Ok(Value::from_object(Tuple::from(
                    parts.iter().map(|p| Value::from(*p)).collect::<Vec<_>>(),
                )))
            }
        },
        ("splitlines", []) => Ok(Value::from(
            py_splitlines(s)
                .into_iter()
                .map(Value::from)
                .collect::<Vec<_>>(),
        )),
        ("removeprefix", [affix]) => Ok(Value::from(s.strip_prefix(affix.as_str()?).unwrap_or(s))),
        ("removesuffix", [affix]) => Ok(Value::from(s.strip_suffix(affix.as_str()?).unwrap_or(s))),
        // with a range (one argument: the compatibility layer's)
        ("startswith" | "endswith", [_, _] | [_, _, _]) => Ok(Value::from(py_affix_in_range(
            s,
            method == "startswith",
            args,
        )?)),
        ("expandtabs", []) => py_expandtabs(s, 8).map(Value::from),
        ("expandtabs", [size]) => i64::try_from(size.clone())
            .map_err(|_| py_error("TypeError", "an integer is required"))
            .and_then(|n| py_expandtabs(s, n))
            .map(Value::from),
        _ => return None,
    };
    Some(result)
}

/// `s.format(*args)`: minijinja-contrib's `str.format`, with a too wide field refused before
/// it is formatted and containers given as Python's `str()` of them (pycompat writes them its
/// own way) unless a field reads into one (`{0[1]}`, `{x.y}`).
fn py_str_format(
    state: &mut State<'_, '_>,
    value: &Value,
    s: &str,
    args: &[Value],
) -> Result<Value, Error> {
    let (too_wide, indexes_into) = format_fields_read(s);
    if too_wide {
        return Err(py_error(
            "MemoryError",
            format_args!(
                "a width or precision in this format string is more than promptweave renders \
                 (at most {MAX_WIDTH})"
            ),
        ));
    }
    let converted: Vec<Value>;
    let args = if indexes_into {
        args
    } else {
        converted = args.iter().map(format_arg).collect();
        &converted
    };
    minijinja_contrib::pycompat::unknown_method_callback(state, value, "format", args)
}

/// What a `str.format` string's replacement fields ask for (`{{` is a literal brace): whether
/// a format spec has a width or precision beyond [`MAX_WIDTH`] (nested `{}` specs are refused
/// by the formatting itself), and whether a field reads an item or attribute (`{0[1]}`,
/// `{x.y}`).
fn format_fields_read(fmt: &str) -> (bool, bool) {
    let too_big = |digits: &str| {
        digits
            .parse::<u128>()
            .map_or(true, |n| n > MAX_WIDTH as u128)
    };
    let (mut too_wide, mut indexes_into) = (false, false);
    let mut rest = fmt;
    while let Some(at) = rest.find('{') {
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('{') {
            rest = after;
            continue;
        }
        let end = rest.find('}').unwrap_or(rest.len());
        let field = &rest[..end];
        rest = &rest[end..];
        let (name, spec) = field.split_once(':').unwrap_or((field, ""));
        indexes_into |= name
            .split('!')
            .next()
            .unwrap_or_default()
            .contains(['[', '.']);
        too_wide |= spec
            .split(|c: char| !c.is_ascii_digit())
            .any(|d| !d.is_empty() && too_big(d));
    }
    (too_wide, indexes_into)
}

/// A `str.format` argument: a container as Python's `str()` of it, anything else as it is.
fn format_arg(v: &Value) -> Value {
    match v.kind() {
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable if !v.is_kwargs() => {
            Value::from(py_str(v))
        }
        ValueKind::Map => {
            // keyword arguments: each value converted
            let kwargs: Kwargs = v
                .try_iter()
                .into_iter()
                .flatten()
                .map(|k| {
                    let item = format_arg(&v.get_item(&k).unwrap_or_default());
                    (k.as_str().unwrap_or_default().to_owned(), item)
                })
                .collect();
            Value::from(kwargs)
        }
        _ => v.clone(),
    }
}

/// The most characters a width, an indent or a tab size may ask for: Python would allocate
/// whatever it is asked (or fail with `MemoryError`); here a larger one is an error rather
/// than an allocation that could take the process down.
const MAX_WIDTH: usize = 1 << 24;

/// The largest string one of our filters or methods makes (a larger one is an error, found
/// before it is allocated).
pub(crate) const MAX_RESULT: usize = 1 << 31;

/// A Python exception raised while rendering, as Jinja2 reports it: its name, then its message
/// (`TypeError: must be str`).
pub(crate) fn py_error(exception: &str, message: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("{exception}: {message}"),
    )
}

/// An error when a result of `bytes` would be beyond [`MAX_RESULT`].
pub(crate) fn check_result(bytes: usize, what: &str) -> Result<(), Error> {
    if bytes > MAX_RESULT {
        return Err(py_error(
            "MemoryError",
            format_args!(
                "{what} would make a string of {bytes} bytes, more than promptweave renders \
                 (at most {MAX_RESULT})"
            ),
        ));
    }
    Ok(())
}

/// A width-like count `n` (negative: 0), or an error naming `what` when it is beyond
/// [`MAX_WIDTH`].
pub(crate) fn checked_width(n: i64, what: &str) -> Result<usize, Error> {
    let n = usize::try_from(n).unwrap_or(0);
    if n > MAX_WIDTH {
        return Err(py_error(
            "MemoryError",
            format_args!("{what} of {n} is more than promptweave renders (at most {MAX_WIDTH})"),
        ));
    }
    Ok(n)
}

/// The width argument of `zfill`/`center`/`ljust`/`rjust` (`None`: it is missing).
fn width_arg(v: Option<&Value>) -> Result<usize, Error> {
    let v = v.ok_or_else(|| Error::from(ErrorKind::MissingArgument))?;
    let n =
        i64::try_from(v.clone()).map_err(|_| py_error("TypeError", "an integer is required"))?;
    checked_width(n, "a width")
}

/// Python's `str.swapcase()`.
fn py_swapcase(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_uppercase() {
            out.extend(c.to_lowercase());
        } else if c.is_lowercase() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Python's `str.istitle()`: cased characters, upper (or title) case only after uncased ones,
/// lower case only after cased ones.
fn py_istitle(s: &str) -> bool {
    let (mut cased, mut previous_cased) = (false, false);
    for c in s.chars() {
        if c.is_uppercase() {
            if previous_cased {
                return false;
            }
            previous_cased = true;
            cased = true;
        } else if c.is_lowercase() {
            if !previous_cased {
                return false;
            }
            previous_cased = true;
            cased = true;
        } else {
            previous_cased = false;
        }
    }
    cased
}

/// Python's `str.zfill(width)`: zeros after the sign.
fn py_zfill(s: &str, width: usize) -> String {
    let len = s.chars().count();
    if len >= width {
        return s.to_owned();
    }
    let (sign, rest) = match s.chars().next() {
        Some(c @ ('+' | '-')) => (Some(c), &s[1..]),
        _ => (None, s),
    };
    let mut out = String::with_capacity(width);
    out.extend(sign);
    out.extend(std::iter::repeat_n('0', width - len));
    out.push_str(rest);
    out
}

/// Python's `str.center`, `str.ljust` and `str.rjust`.
fn py_justify(s: &str, method: &str, width: usize, fill: char) -> String {
    let len = s.chars().count();
    if len >= width {
        return s.to_owned();
    }
    let marg = width - len;
    let left = match method {
        "ljust" => 0,
        "rjust" => marg,
        _ => marg / 2 + (marg & width & 1),
    };
    let mut out = String::with_capacity(s.len() + marg * fill.len_utf8());
    out.extend(std::iter::repeat_n(fill, left));
    out.push_str(s);
    out.extend(std::iter::repeat_n(fill, marg - left));
    out
}

/// Python's `str.expandtabs(tabsize)`: tabs to the next multiple of the size; the column
/// restarts after `\n` and `\r`.
fn py_expandtabs(s: &str, size: i64) -> Result<String, Error> {
    let size = checked_width(size, "a tab size")?;
    let tabs = s.bytes().filter(|&b| b == b'\t').count();
    check_result(
        s.len().saturating_add(tabs.saturating_mul(size)),
        "expandtabs",
    )?;
    let mut out = String::with_capacity(s.len());
    let mut column = 0usize;
    for c in s.chars() {
        match c {
            '\t' => {
                if size > 0 {
                    let n = size - column % size;
                    out.extend(std::iter::repeat_n(' ', n));
                    column += n;
                }
            }
            '\n' | '\r' => {
                out.push(c);
                column = 0;
            }
            _ => {
                out.push(c);
                column += 1;
            }
        }
    }
    Ok(out)
}

/// The `(sep=None, maxsplit=-1)` arguments of `str.split` / `str.rsplit`.
fn split_args(args: &[Value]) -> Result<(Option<String>, i64), Error> {
    match args {
        [] => Ok((None, -1)),
        [sep] => Ok((sep.as_str().map(str::to_owned), -1)),
        [sep, max] => Ok((
            sep.as_str().map(str::to_owned),
            i64::try_from(max.clone()).map_err(|_| Error::from(ErrorKind::InvalidOperation))?,
        )),
        _ => Err(Error::from(ErrorKind::TooManyArguments)),
    }
}

fn py_split(s: &str, args: &[Value]) -> Result<Value, Error> {
    let (sep, maxsplit) = split_args(args)?;
    let mut parts: Vec<Value> = Vec::new();
    if let Some(sep) = sep {
        if sep.is_empty() {
            return Err(Error::new(ErrorKind::InvalidOperation, "empty separator"));
        }
        if maxsplit < 0 {
            parts.extend(s.split(sep.as_str()).map(Value::from));
        } else {
            let n = usize::try_from(maxsplit)
                .unwrap_or(usize::MAX)
                .saturating_add(1);
            parts.extend(s.splitn(n, sep.as_str()).map(Value::from));
        }
    } else {
        let mut rest = s.trim_start_matches(py_is_space);
        let mut splits = 0i64;
        while !rest.is_empty() {
            if maxsplit >= 0 && splits >= maxsplit {
                parts.push(Value::from(rest));
                break;
            }
            let end = rest.find(py_is_space).unwrap_or(rest.len());
            parts.push(Value::from(&rest[..end]));
            splits += 1;
            rest = rest[end..].trim_start_matches(py_is_space);
        }
    }
    Ok(Value::from(parts))
}

/// Python's `str.rsplit(sep=None, maxsplit=-1)`.
fn py_rsplit(s: &str, args: &[Value]) -> Result<Value, Error> {
    let (sep, maxsplit) = split_args(args)?;
    if maxsplit < 0 {
        return py_split(s, args);
    }
    let limit = usize::try_from(maxsplit).unwrap_or(usize::MAX);
    let mut parts: Vec<Value> = Vec::new();
    if let Some(sep) = sep {
        if sep.is_empty() {
            return Err(Error::new(ErrorKind::InvalidOperation, "empty separator"));
        }
        parts.extend(
            s.rsplitn(limit.saturating_add(1), sep.as_str())
                .map(Value::from),
        );
    } else {
        let mut rest = s.trim_end_matches(py_is_space);
        let mut splits = 0usize;
        while !rest.is_empty() {
            if splits >= limit {
                parts.push(Value::from(rest));
                break;
            }
            let start = rest.rfind(py_is_space).map_or(0, |i| {
                i + rest[i..].chars().next().map_or(1, char::len_utf8)
            });
            parts.push(Value::from(&rest[start..]));
            splits += 1;
            rest = rest[..start].trim_end_matches(py_is_space);
        }
    }
    parts.reverse();
    Ok(Value::from(parts))
}

/// Jinja2's `wordcount`: the number of `\w+` runs.
fn wordcount_filter(value: &Value) -> usize {
    let s = py_str(value);
    let mut n = 0;
    let mut in_word = false;
    for c in s.chars() {
        let w = c.is_alphanumeric() || c == '_';
        if w && !in_word {
            n += 1;
        }
        in_word = w;
    }
    n
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`.
#[allow(clippy::needless_pass_by_value)] // minijinja passes filter arguments by value
fn tojson_filter(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let mut ensure_ascii: Option<Value> = None;
    let mut indent: Option<Value> = None;
    let mut separators: Option<Value> = None;
    let mut sort_keys: Option<Value> = None;
    // positional order: ensure_ascii, indent, separators, sort_keys
    for (i, a) in args.iter().enumerate() {
        let slot = match i {
            0 => &mut ensure_ascii,
            1 => &mut indent,
            2 => &mut separators,
            3 => &mut sort_keys,
            _ => return Err(Error::from(ErrorKind::TooManyArguments)),
        };
        *slot = Some(a.clone());
    }
    for (name, slot) in [
        ("ensure_ascii", &mut ensure_ascii),
        ("indent", &mut indent),
        ("separators", &mut separators),
        ("sort_keys", &mut sort_keys),
    ] {
        if let Some(v) = kwargs.get::<Option<Value>>(name)? {
            *slot = Some(v);
        }
    }
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.as_str().is_some() => Some(v.as_str().unwrap_or_default().to_owned()),
        Some(v) => {
            let n = i64::try_from(v).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an int or str",
                )
            })?;
            Some(" ".repeat(checked_width(n, "an indent")?))
        }
    };
    let separators = match separators.filter(|v| !v.is_none()) {
        Some(v) => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] => Some((py_str(a), py_str(b))),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be an (item_separator, key_separator) pair",
                    ));
                }
            }
        }
        None => None,
    };
    JsonOptions::new(
        ensure_ascii.is_some_and(|v| v.is_true()),
        indent,
        separators,
        sort_keys.is_some_and(|v| v.is_true()),
    )
    .dumps(value)
    .map(Value::from)
}

/// `value | tojson(ensure_ascii=...)`, as transformers' filter gives it.
pub fn tojson_default(value: &Value, ensure_ascii: bool) -> Result<String, Error> {
    JsonOptions::new(ensure_ascii, None, None, false).dumps(value)
}

struct JsonOptions {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

impl JsonOptions {
    /// `json.dumps`'s options; without `separators`, `(', ', ': ')`, or `(',', ': ')` with an
    /// indent.
    fn new(
        ensure_ascii: bool,
        indent: Option<String>,
        separators: Option<(String, String)>,
        sort_keys: bool,
    ) -> Self {
        let (item_sep, key_sep) = separators.unwrap_or_else(|| {
            let item = if indent.is_some() { "," } else { ", " };
            (item.to_owned(), ": ".to_owned())
        });
        JsonOptions {
            ensure_ascii,
            indent,
            item_sep,
            key_sep,
            sort_keys,
        }
    }

    fn dumps(&self, value: &Value) -> Result<String, Error> {
        let mut out = String::new();
        write_json(&mut out, value, self, 0)?;
        Ok(out)
    }
}

fn json_type_error(value: &Value) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "Object of type {} is not JSON serializable",
            py_type_name(value)
        ),
    )
}

fn write_json_newline(out: &mut String, opts: &JsonOptions, level: usize) {
    if let Some(indent) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(indent);
        }
    }
}

fn write_json(
    out: &mut String,
    value: &Value,
    opts: &JsonOptions,
    level: usize,
) -> Result<(), Error> {
    if level > MAX_REPR_DEPTH {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: maximum recursion depth exceeded",
        ));
    }
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if value.is_integer() {
                let _ = write!(out, "{value}");
            } else {
                let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
                if f.is_nan() {
                    out.push_str("NaN");
                } else if f.is_infinite() {
                    out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
                } else {
                    write_py_float(out, f);
                }
            }
        }
        ValueKind::String => {
            write_json_str(out, value.as_str().unwrap_or_default(), opts.ensure_ascii);
        }
        ValueKind::Seq | ValueKind::Iterable => {
            if Iter::type_name_of(value).is_some() {
                return Err(json_type_error(value));
            }
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                write_json_newline(out, opts, level + 1);
                write_json(out, item, opts, level + 1)?;
            }
            write_json_newline(out, opts, level);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if opts.sort_keys {
                if keys.iter().any(|k| k.kind() != keys[0].kind()) {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "'<' not supported between instances of different key types",
                    ));
                }
                keys.sort();
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                write_json_newline(out, opts, level + 1);
                let key_text = match key.kind() {
                    ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
                    ValueKind::None => "null".to_owned(),
                    ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_owned(),
                    ValueKind::Number => {
                        let mut s = String::new();
                        write_json(&mut s, key, opts, level + 1)?;
                        s
                    }
                    _ => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            format!(
                                "keys must be str, int, float, bool or None, not {}",
                                py_type_name(key)
                            ),
                        ));
                    }
                };
                write_json_str(out, &key_text, opts.ensure_ascii);
                out.push_str(&opts.key_sep);
                let item = value.get_item(key)?;
                write_json(out, &item, opts, level + 1)?;
            }
            write_json_newline(out, opts, level);
            out.push('}');
        }
        _ => return Err(json_type_error(value)),
    }
    Ok(())
}

/// A JSON string literal as Python's `json.dumps` writes it (with `ensure_ascii`, every
/// character outside ` `..`~`, DEL included, as `\\u` escapes; surrogate pairs above U+FFFF).
pub fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if ensure_ascii && (c == '\u{7f}' || !c.is_ascii()) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::needless_pass_by_value)]
    fn render(src: &str, ctx: Value) -> Result<String, ChatError> {
        ChatTemplate::compile(src)?.render_context(&ctx)
    }

    fn ctx(pairs: &[(&str, Value)]) -> Value {
        let mut m = Map::new();
        for (k, v) in pairs {
            m.insert(Value::from(*k), v.clone());
        }
        Value::from(m)
    }

    #[test]
    fn python_str_of_values() {
        let out = render(
            "{{ a }}|{{ b }}|{{ c }}|{{ d }}|{{ e }}|{{ f }}",
            ctx(&[
                ("a", Value::from(())),
                ("b", Value::from(true)),
                ("c", Value::from(1.0)),
                ("d", Value::from(vec![Value::from(1), Value::from("it's")])),
                ("e", Value::from(1e16)),
                ("f", Value::from(0.0001)),
            ]),
        );
        assert_eq!(
            out.as_deref(),
            Ok("None|True|1.0|[1, \"it's\"]|1e+16|0.0001")
        );
    }

    #[test]
    fn markup_strings_escape_what_is_added_to_them() {
        // outputs checked against transformers 4.x (Jinja2 3.1, markupsafe)
        let c = ctx(&[("t", Value::from("<i> & 'q'"))]);
        for (src, want) in [
            (
                "{{ '<p>'|safe + t + '</p>'|safe }}",
                "<p>&lt;i&gt; &amp; &#39;q&#39;</p>",
            ),
            ("{{ t + ('x'|safe) }}", "&lt;i&gt; &amp; &#39;q&#39;x"),
            ("{{ (t|tojson|safe) + '</x>' }}", "\"<i> & 'q'\"&lt;/x&gt;"),
            ("{{ ('a'|safe|trim) + '<' }}", "a&lt;"),
            ("{{ ('a'|safe) ~ '<' }}", "a<"),
            ("{{ t|e }}", "&lt;i&gt; &amp; &#39;q&#39;"),
            ("{{ 1 + 2 }}{{ [1] + [2] }}{{ 'a' + 'b' }}", "3[1, 2]ab"),
        ] {
            assert_eq!(render(src, c.clone()).as_deref(), Ok(want), "{src}");
        }
        // without these operators the source is left as it is
        let plain = "{{ a - (b) }}{{ a * b }}";
        let tree = minijinja::machinery::parse(plain, TEMPLATE_NAME, syntax().unwrap()).unwrap();
        assert_eq!(rewrite_operators(plain, &tree), plain);
        // `+`, `%` and `~` go through functions
        let add = "{{ a + (b) }}";
        let tree = minijinja::machinery::parse(add, TEMPLATE_NAME, syntax().unwrap()).unwrap();
        assert_eq!(
            rewrite_operators(add, &tree),
            "{{ __promptweave_add(a , (b)) }}"
        );
        let ops = "{{ 'x_%02d' % n ~ (a ~ 'b') }}{{ n % 2 }}";
        let tree = minijinja::machinery::parse(ops, TEMPLATE_NAME, syntax().unwrap()).unwrap();
        assert_eq!(
            rewrite_operators(ops, &tree),
            "{{ __promptweave_concat(__promptweave_mod('x_%02d' , n) , (__promptweave_concat(a , 'b'))) }}{{ __promptweave_mod(n , 2) }}"
        );
        let cmp = "{{ a < b }}{{ (a) <= 1 }}{{ a>b }}{{ a >= '<' }}{{ '>' < a }}";
        let tree = minijinja::machinery::parse(cmp, TEMPLATE_NAME, syntax().unwrap()).unwrap();
        assert_eq!(
            rewrite_operators(cmp, &tree),
            "{{ __promptweave_lt(a , b) }}{{ __promptweave_le((a) , 1) }}{{ __promptweave_gt(a,b) }}{{ __promptweave_ge(a , '<') }}{{ __promptweave_lt('>' , a) }}"
        );
        let contains = "{{ a in b }}{{ a not  in (b) }}{{ 'in' in index }}";
        let tree = minijinja::machinery::parse(contains, TEMPLATE_NAME, syntax().unwrap()).unwrap();
        assert_eq!(
            rewrite_operators(contains, &tree),
            "{{ __promptweave_in(a , b) }}{{ not __promptweave_in(a , (b)) }}{{ __promptweave_in('in' , index) }}"
        );
        let marked = "{{ (a|safe) + (b + c) }}";
        let tree = minijinja::machinery::parse(marked, TEMPLATE_NAME, syntax().unwrap()).unwrap();
        assert_eq!(
            rewrite_operators(marked, &tree),
            "{{ __promptweave_add((a|safe) , (__promptweave_add(b , c))) }}"
        );
    }

    #[test]
    fn jinja2_lexing_of_newlines() {
        assert_eq!(jinja2_lexing("a\r\nb\rc"), "a\nb\nc");
        assert_eq!(
            jinja2_lexing("{% raw %}\nx{% endraw %}"),
            "{% raw %}\n\nx{% endraw %}"
        );
        assert_eq!(
            jinja2_lexing("{% raw -%}\nx{% endraw %}"),
            "{% raw -%}\nx{% endraw %}"
        );
        assert_eq!(jinja2_lexing("{# {% raw %} #}\nx"), "{# {% raw %} #}\nx");
        let c = ctx(&[]);
        assert_eq!(
            render("{% raw %}\n{{ x }}{% endraw %}\r\ny", c).as_deref(),
            Ok("\n{{ x }}y")
        );
    }

    #[test]
    fn py_float_repr_matches_python() {
        for (f, want) in [
            (0.1, "0.1"),
            (1e-5, "1e-05"),
            (123_456.789, "123456.789"),
            (-2.5e-7, "-2.5e-07"),
            (1e15, "1000000000000000.0"),
            (1.5e300, "1.5e+300"),
            (0.0, "0.0"),
        ] {
            let mut s = String::new();
            write_py_float(&mut s, f);
            assert_eq!(s, want);
        }
    }

    #[test]
    fn tojson_is_json_dumps() {
        let mut m = Map::new();
        m.insert(Value::from("b"), Value::from("<é>"));
        m.insert(
            Value::from("a"),
            Value::from(vec![Value::from(1), Value::from(())]),
        );
        let c = ctx(&[("x", Value::from(m))]);
        assert_eq!(
            render("{{ x | tojson }}", c.clone()).as_deref(),
            Ok(r#"{"b": "<é>", "a": [1, null]}"#)
        );
        assert_eq!(
            render("{{ x | tojson(indent=2, sort_keys=true) }}", c.clone()).as_deref(),
            Ok("{\n  \"a\": [\n    1,\n    null\n  ],\n  \"b\": \"<é>\"\n}")
        );
        assert_eq!(
            render(
                "{{ x | tojson(ensure_ascii=true, separators=(',', ':')) }}",
                c
            )
            .as_deref(),
            Ok(r#"{"b":"<\u00e9>","a":[1,null]}"#)
        );
    }

    #[test]
    fn json_strings_escape_as_json_dumps() {
        // json.dumps("\x7f\x1f\\\"é😀\u2028") and the same with ensure_ascii=False
        let text = "\u{7f}\u{1f}\\\"é😀\u{2028}";
        let mut ascii = String::new();
        write_json_str(&mut ascii, text, true);
        assert_eq!(ascii, r#""\u007f\u001f\\\"\u00e9\ud83d\ude00\u2028""#);
        let mut utf8 = String::new();
        write_json_str(&mut utf8, text, false);
        assert_eq!(utf8, "\"\u{7f}\\u001f\\\\\\\"é😀\u{2028}\"");
    }

    #[test]
    fn raise_exception_is_its_own_error() {
        let err = render("{{ raise_exception('no system role') }}", ctx(&[]));
        assert_eq!(err, Err(ChatError::Raised("no system role".into())));
    }

    fn guard(src: &str) -> String {
        let tree = minijinja::machinery::parse(src, TEMPLATE_NAME, syntax().unwrap()).unwrap();
        guard_loops(src, &tree)
    }

    #[test]
    fn loops_over_none_fail_as_in_jinja2() {
        // each loop's iterable is wrapped whole, whatever its shape
        assert_eq!(
            guard(
                "{% for m in messages | rejectattr('x') if m %}{% endfor %}{% for a, b in d.items() %}{% endfor %}"
            ),
            format!(
                "{{% for m in {LOOP_GUARD}(messages | rejectattr('x')) if m %}}{{% endfor %}}{{% for a, b in {LOOP_GUARD}(d.items()) %}}{{% endfor %}}"
            )
        );
        // an iterable that starts or ends inside brackets of its own is left alone
        let parenthesized = "{% for x in (a or b) | list %}{% endfor %}";
        assert_eq!(guard(parenthesized), parenthesized);
        let none = ctx(&[
            ("t", Value::from(())),
            ("u", Value::from(vec![Value::from(1)])),
        ]);
        let err = render("{% for x in t %}{{ x }}{% endfor %}", none.clone()).unwrap_err();
        assert!(
            err.to_string()
                .contains("'NoneType' object is not iterable"),
            "{err}"
        );
        assert_eq!(
            render("{% for x in u %}{{ x }}{% endfor %}{% for x in missing %}{{ x }}{% endfor %}{% for x in (t or u) %}{{ x }}{% endfor %}", none).as_deref(),
            Ok("11")
        );
    }

    #[test]
    fn syntax_errors_are_reported() {
        assert!(matches!(
            ChatTemplate::compile("{% if %}"),
            Err(ChatError::Syntax(_))
        ));
        assert!(matches!(
            ChatTemplate::compile("{% for x in y %}"),
            Err(ChatError::Syntax(_))
        ));
    }

    #[test]
    fn generation_tags_render_their_body() {
        let out = render("a\n{%- generation -%}\n b {% endgeneration %}\nc", ctx(&[]));
        assert_eq!(out.as_deref(), Ok("ab c"));
        assert_eq!(
            rewrite_generation_tags("{% generation %}x{%endgeneration%}"),
            "{% if true %}x{%endif%}"
        );
        assert_eq!(
            rewrite_generation_tags("{{ generation }}{% generations %}"),
            "{{ generation }}{% generations %}"
        );
    }

    #[test]
    fn python_whitespace_and_methods() {
        let c = ctx(&[("s", Value::from("\u{1f} a  b \n"))]);
        assert_eq!(
            render("[{{ s.strip() }}]", c.clone()).as_deref(),
            Ok("[a  b]")
        );
        assert_eq!(
            render("{{ s.split() }}", c.clone()).as_deref(),
            Ok("['a', 'b']")
        );
        assert_eq!(render("{{ s | trim }}", c).as_deref(), Ok("a  b"));
        let c = ctx(&[("s", Value::from("a,b,c"))]);
        assert_eq!(
            render("{{ s.split(',', 1) }}", c).as_deref(),
            Ok("['a', 'b,c']")
        );
    }

    #[test]
    fn jinja2_tests_and_tuples() {
        let c = ctx(&[
            ("n", Value::from(())),
            ("s", Value::from("ab")),
            ("t", Value::from_object(Tuple::from(vec![Value::from(1)]))),
        ]);
        assert_eq!(
            render(
                "{{ n is iterable }}{{ n is sequence }}{{ s is sequence }}{{ s is iterable }}|{{ t }}|{{ (1, 'a') }}",
                c
            )
            .as_deref(),
            Ok("FalseFalseTrueTrue|(1,)|(1, 'a')")
        );
        let c = ctx(&[("s", Value::from(" a  b c "))]);
        assert_eq!(
            render(
                "{{ s.rsplit(none, 1) }}{{ s.split(none, 1) }}{{ s.rsplit() }}{{ s.index('b') }}{{ s | wordcount }}",
                c
            )
            .as_deref(),
            Ok("[' a  b', 'c']['a', 'b c ']['a', 'b', 'c']43")
        );
    }

    #[test]
    fn trim_blocks_and_loop_controls() {
        let src =
            "{% for m in xs %}\n  {% if m == 2 %}{% continue %}{% endif %}\n{{ m }}\n{% endfor %}";
        let c = ctx(&[("xs", Value::from(vec![1, 2, 3]))]);
        assert_eq!(render(src, c).as_deref(), Ok("1\n3\n"));
    }

    fn msg(role: &str, content: &str) -> Map {
        let mut m = Map::new();
        m.insert(Value::from("role"), Value::from(role));
        m.insert(Value::from("content"), Value::from(content));
        m
    }

    const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

    #[test]
    fn continue_final_message_cuts_after_the_message() {
        let t = ChatTemplate::compile(CHATML).unwrap_or_else(|e| unreachable!("{e}"));
        let opts = RenderOptions {
            add_generation_prompt: false,
            continue_final: Some("content".into()),
        };
        let out = t.render_conversation(
            vec![msg("user", "hi"), msg("assistant", "Sure, ")],
            &[],
            &opts,
        );
        assert_eq!(
            out.as_deref(),
            Ok("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nSure, ")
        );
        let err = t.render_conversation(vec![], &[], &opts);
        assert!(matches!(err, Err(ChatError::Input(_))));
    }

    #[test]
    fn reasoning_fields_are_aliased() {
        let mut m = msg("assistant", "x");
        m.insert(Value::from("reasoning"), Value::from("r"));
        let m = alias_reasoning(m);
        let keys: Vec<String> = m.keys().map(py_str).collect();
        assert_eq!(
            keys,
            [
                "thinking",
                "role",
                "content",
                "reasoning",
                "reasoning_content"
            ]
        );
    }

    #[test]
    fn reasoning_aliases_can_be_left_out() {
        let t =
            ChatTemplate::compile("{{ messages[0].reasoning_content }}|{{ messages[0].thinking }}")
                .unwrap_or_else(|e| unreachable!("{e}"));
        let mut m = msg("assistant", "x");
        m.insert(Value::from("reasoning"), Value::from("r"));
        let opts = RenderOptions {
            add_generation_prompt: false,
            continue_final: None,
        };
        let aliased = t.render_conversation(vec![m.clone()], &[], &opts);
        assert_eq!(aliased.as_deref(), Ok("r|r"));
        let as_given = t
            .without_reasoning_aliases()
            .render_conversation(vec![m], &[], &opts);
        assert_eq!(as_given.as_deref(), Ok("|"));
    }
}
