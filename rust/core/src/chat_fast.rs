//! A fast path for chat templates: a small tree-walking interpreter for the part of Jinja that
//! chat templates spend their time in (loops over the messages, `if`, `set` and `{% set %}`
//! blocks, namespaces, top-level macros, `range`, list and dict literals, string and list
//! concatenation, comparisons, item and attribute lookups, Python string methods, the common
//! filters, `tojson`), working directly on borrowed message text and writing straight into one
//! output buffer.
//!
//! It is an accelerator, never a second source of truth. Anything it does not model exactly as
//! Jinja2 under transformers does — an unsupported statement, filter or method, a value of
//! another type than it expects, anything that would raise — makes it give up (*bail*) at the
//! point where it is reached, and the caller renders that conversation again with the full engine
//! ([`crate::chat::ChatTemplate`]). Rendering has no side effects, so a bailed attempt costs
//! only time. Constructs that are never reached (a tools branch, a macro used only with tools)
//! do not prevent the fast path for the conversations that do not reach them.
//!
//! Inputs are the common case only: messages whose values are strings, integers, booleans or
//! `None`, and template variables of the same kinds; anything else goes to the full engine
//! before rendering starts.

use std::fmt::Write as _;
use std::rc::Rc;

use minijinja::Value;
use minijinja::machinery::ast;

use crate::chat::{jinja_title, py_is_space, py_title};

/// A scalar input value (a message field or a template variable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar<'a> {
    /// A Python `str`.
    Str(&'a str),
    /// A Python `int` that fits in 64 bits.
    Int(i64),
    /// A Python `bool`.
    Bool(bool),
    /// `None`.
    None,
}

/// One message: its fields in insertion order (keys with a `None` value already dropped).
#[derive(Debug, Clone, Copy, Default)]
pub struct Message<'a> {
    /// `(key, value)` pairs in the dict's order.
    pub fields: &'a [(&'a str, Scalar<'a>)],
}

impl<'a> Message<'a> {
    fn get(&self, key: &str) -> Option<Scalar<'a>> {
        self.fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// The template's variables besides `messages`, in the order transformers passes them (a later
/// duplicate overrides an earlier one), and `add_generation_prompt`.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a, 'v> {
    /// The messages of the conversation.
    pub messages: &'v [Message<'a>],
    /// Other variables (special tokens, `tools=None`, extra keyword arguments).
    pub variables: &'v [(&'a str, Scalar<'a>)],
    /// `add_generation_prompt`.
    pub add_generation_prompt: bool,
}

/// The fast path gave up; render with the full engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bail;

type R<T> = Result<T, Bail>;

thread_local! {
    /// What the render in progress may still make, counted as the full engine's fuel counts
    /// (a byte of a string or the output one unit, a loop iteration or a list item 64): a
    /// render that runs out gives up, and the full engine, with the same budget, reports it.
    /// Without it a template could make the process allocate without bound
    /// (`{% set ns.s = ns.s + ns.s %}` in a loop).
    static BUDGET: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The budget of one render (the full engine's fuel in units).
const BUDGET_UNITS: u64 = crate::chat::FUEL * 64;

/// `text.replace(old, new)`, its size spent from the budget before it is made when it grows
/// the text.
fn replaced(text: &str, old: &str, new: &str) -> R<String> {
    if new.len() > old.len() {
        spend(crate::chat::replaced_len(text, old, new, None))?;
    }
    Ok(text.replace(old, new))
}

/// Spends `units` of the render's budget; `Bail` when it runs out.
fn spend(units: usize) -> R<()> {
    BUDGET.with(|b| {
        let left = b
            .get()
            .checked_sub(u64::try_from(units).unwrap_or(u64::MAX));
        b.set(left.unwrap_or(0));
        left.map(|_| ()).ok_or(Bail)
    })
}

// ---------------------------------------------------------------------------------------------
// The program
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Const {
    Str(String),
    Int(i64),
    Bool(bool),
    None,
}

#[derive(Debug, Clone, Copy)]
enum Arith {
    Sub,
    Mul,
    FloorDiv,
    Rem,
}

#[derive(Debug, Clone, Copy)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Lte,
    Gt,
    Gte,
    In,
    NotIn,
}

#[derive(Debug, Clone, Copy)]
enum FilterKind {
    List,
    Join,
    Reverse,
    Trim,
    Length,
    String,
    Lower,
    Upper,
    Default,
    First,
    Last,
    Capitalize,
    /// Jinja2's `title` filter (not `str.title`)
    Title,
    /// `tojson` without arguments, or with a constant `ensure_ascii` (`true`: `ToJsonAscii`)
    ToJson,
    ToJsonAscii,
    /// `int` without arguments, on values whose conversion is certain
    Int,
}

#[derive(Debug, Clone, Copy)]
enum TestKind {
    Defined,
    Undefined,
    None,
    String,
    Boolean,
    True,
    False,
    Mapping,
    Number,
    Integer,
    Sequence,
    Iterable,
}

/// The tests `selectattr` takes here.
#[derive(Debug, Clone, Copy)]
enum SelectTest {
    EqualTo,
    Defined,
    Undefined,
    None,
    String,
}

#[derive(Debug, Clone, Copy)]
enum MethodKind {
    Split,
    Replace,
    Upper,
    Lower,
    Strip,
    LStrip,
    RStrip,
    StartsWith,
    EndsWith,
    Get,
    Capitalize,
    /// `str.title()`
    Title,
}

#[derive(Debug, Clone)]
enum Ex {
    Const(Const),
    Var(u32),
    /// `x['key']` / `x.key` with a constant key: the common message lookup
    Field(Box<Ex>, String),
    Item(Box<Ex>, Box<Ex>),
    Attr(Box<Ex>, String),
    /// `x[start:stop:step]`
    Slice(Box<Ex>, [Option<Box<Ex>>; 3]),
    Not(Box<Ex>),
    Neg(Box<Ex>),
    /// `a + b + ...` (left-associative chain, flattened)
    Add(Vec<Ex>),
    /// `a ~ b ~ ...`
    Concat(Vec<Ex>),
    Arith(Arith, Box<Ex>, Box<Ex>),
    Cmp(Box<Ex>, Vec<(Cmp, Ex)>),
    And(Box<Ex>, Box<Ex>),
    Or(Box<Ex>, Box<Ex>),
    IfElse(Box<Ex>, Box<Ex>, Option<Box<Ex>>),
    Filter(FilterKind, Box<Ex>, Vec<Ex>),
    Test(TestKind, Box<Ex>),
    Method(Box<Ex>, MethodKind, Vec<Ex>),
    Namespace(Vec<(String, Ex)>),
    List(Vec<Ex>),
    /// `{'key': value, ...}` with string constant keys
    Dict(Vec<(String, Ex)>),
    /// `strftime_now(format)` (the id of the name `strftime_now`, which a variable may shadow)
    StrftimeNow(u32, Box<Ex>),
    /// `xs | selectattr(attr[, test[, arg]])` (`true`) or `rejectattr` (`false`)
    SelectAttr(bool, Box<Ex>, String, Option<SelectTest>, Option<Box<Ex>>),
    /// `range(...)` (the id of the name `range`, which a variable may shadow)
    Range(u32, Vec<Ex>),
    /// The output of a block (`{% set x %}...{% endset %}`), which assigns nothing itself.
    Capture(Vec<Node>),
    /// The macro defined by a `{% macro %}` statement (its index in the template's macros).
    Macro(usize),
    /// `name(positional..., keyword=...)` where `name` is not a known function: a macro call
    /// (keywords as the ids of their names).
    CallMacro(u32, Vec<Ex>, Vec<(u32, Ex)>),
    /// Anything else: bails when evaluated.
    Unsupported,
}

#[derive(Debug, Clone)]
enum Node {
    Raw(String),
    Emit(Ex),
    If(Ex, Vec<Node>, Vec<Node>),
    For(Box<ForNode>),
    Set(u32, Ex),
    SetAttr(u32, String, Ex),
    Continue,
    Break,
    /// Anything else: bails when executed.
    Unsupported,
}

#[derive(Debug, Clone)]
struct ForNode {
    target: u32,
    iter: Ex,
    filter: Option<Ex>,
    body: Vec<Node>,
    else_body: Vec<Node>,
    /// Names the body assigns with `set`: in Jinja2 they are local to one iteration, so reading
    /// one before it is assigned in the iteration is left to the full engine.
    assigned: Vec<u32>,
}

/// A `{% macro name(params, p=default) %}body{% endmacro %}` definition.
///
/// Jinja2 macros are closures whose scoping is subtle; the fast path models the part that is
/// the same in every reading: a call binds the parameters (given or a constant default) in a
/// fresh scope, the body's output is the call's value, and a name the body reads without
/// binding it resolves only to a render variable that nothing in the template ever assigns.
/// Anything else gives up: a free name the template assigns anywhere (a loop variable, a
/// `set`, another macro), a missing argument without default, extra arguments, `varargs` /
/// `kwargs` / `caller`, recursion, and -- when it is executed -- an attribute assignment on a
/// namespace the call did not make (calls stay pure: an expression may be evaluated twice).
#[derive(Debug, Clone)]
struct MacroDef {
    params: Vec<u32>,
    /// per parameter, its default (a constant), if any
    defaults: Vec<Option<Const>>,
    body: Vec<Node>,
    /// names the body assigns that are not parameters and that something outside the macro
    /// binds too (unset until assigned in a call)
    assigned: Vec<u32>,
    /// names the body assigns that nothing outside it binds: before their assignment they
    /// read as the render variable of that name (or undefined), in Jinja2 as here
    context: Vec<u32>,
    supported: bool,
}

/// A chat template compiled for the fast path.
#[derive(Debug, Clone)]
pub struct FastTemplate {
    nodes: Vec<Node>,
    size_hint: usize,
    /// the variable names the template uses; a name's index is its id
    symbols: Vec<String>,
    /// per id: the name is one of the environment's globals (functions), which the fast path
    /// does not model: looking one up unset gives up
    globals: Vec<bool>,
    macros: Vec<MacroDef>,
    /// per id: something in the template binds the name (`set`, a loop, a macro definition),
    /// so a macro body may not read it from outside
    bound: Vec<bool>,
    /// per id: the macro the name denotes everywhere, when its one binding is that macro's
    /// definition at the template's top level (a macro defined later may call it)
    top_macro: Vec<Option<usize>>,
}

/// The names defined in transformers' Jinja environment besides the render variables.
const GLOBALS: [&str; 8] = [
    "raise_exception",
    "strftime_now",
    "namespace",
    "range",
    "dict",
    "lipsum",
    "cycler",
    "joiner",
];

/// Variable names, numbered as they are met (ids compare faster than names), and the macros
/// met so far.
#[derive(Default)]
struct Symbols {
    names: Vec<String>,
    macros: Vec<MacroDef>,
    /// every name read (as a variable or called), in compilation order
    reads: Vec<u32>,
}

impl Symbols {
    fn id(&mut self, name: &str) -> u32 {
        let at = if let Some(at) = self.names.iter().position(|n| n == name) {
            at
        } else {
            self.names.push(name.to_owned());
            self.names.len() - 1
        };
        u32::try_from(at).unwrap_or(u32::MAX)
    }

    /// The id of a name the template reads.
    fn read(&mut self, name: &str) -> u32 {
        let id = self.id(name);
        self.reads.push(id);
        id
    }
}

/// Names a macro body may use in Jinja2 with meanings the fast path does not model.
const MACRO_SPECIALS: [&str; 3] = ["varargs", "kwargs", "caller"];

/// Ids every template has: given to these names first.
const MESSAGES: u32 = 0;
const ADD_GENERATION_PROMPT: u32 = 1;
const LOOP: u32 = 2;
const NAMESPACE: u32 = 3;
const PRESET: [&str; 4] = ["messages", "add_generation_prompt", "loop", "namespace"];

impl FastTemplate {
    /// Compiles a template from its parse tree (of the source as the full engine compiles
    /// it); `None` when the tree is not a template.
    pub fn compile(tree: &ast::Stmt<'_>) -> Option<FastTemplate> {
        let ast::Stmt::Template(t) = tree else {
            return None;
        };
        let mut sy = Symbols {
            names: PRESET.iter().map(|s| (*s).to_owned()).collect(),
            macros: Vec::new(),
            reads: Vec::new(),
        };
        let mut nodes = stmts(&mut sy, &t.children);
        let mut assigned = Vec::new();
        collect_assigned(&nodes, &mut assigned);
        if assigned.contains(&NAMESPACE) {
            // `namespace(...)` would call the template's own variable
            nodes = vec![Node::Unsupported];
        }
        let size_hint = raw_len(&nodes);
        let globals = sy
            .names
            .iter()
            .map(|n| GLOBALS.contains(&n.as_str()))
            .collect();
        let mut macros = sy.macros;
        // how many bindings each name has: in each macro, and in all (the top level included)
        let names = sy.names.len();
        let mut total = vec![0u32; names];
        count_bindings(&nodes, &mut total);
        bump(&mut total, LOOP);
        let mut per_macro = Vec::with_capacity(macros.len());
        for m in &macros {
            // (parameters are local to their macro: they bind nothing elsewhere)
            let mut own = vec![0u32; names];
            count_bindings(&m.body, &mut own);
            for (t, o) in total.iter_mut().zip(&own) {
                *t += o;
            }
            per_macro.push(own);
        }
        for (m, own) in macros.iter_mut().zip(&per_macro) {
            let outside = |id: &u32| {
                let i = usize::try_from(*id).unwrap_or(usize::MAX);
                total.get(i).copied().unwrap_or(1) - own.get(i).copied().unwrap_or(0)
            };
            let (inside_only, shared): (Vec<u32>, Vec<u32>) =
                m.assigned.iter().partition(|id| outside(id) == 0);
            m.context = inside_only;
            m.assigned = shared;
        }
        let bound = total.iter().map(|&c| c > 0).collect();
        // a macro defined inside a block or another macro may close over its names: only
        // those defined at the top level are modelled
        let mut top_level = vec![false; macros.len()];
        let mut top_macro = vec![None; names];
        for n in &nodes {
            if let Node::Set(name, Ex::Macro(index)) = n {
                if let Some(t) = top_level.get_mut(*index) {
                    *t = true;
                }
                let i = usize::try_from(*name).unwrap_or(usize::MAX);
                if total.get(i) == Some(&1) {
                    if let Some(slot) = top_macro.get_mut(i) {
                        *slot = Some(*index);
                    }
                }
            }
        }
        for (m, top) in macros.iter_mut().zip(top_level) {
            m.supported &= top;
        }
        Some(FastTemplate {
            nodes,
            size_hint,
            symbols: sy.names,
            globals,
            macros,
            bound,
            top_macro,
        })
    }

    /// Whether any part of the template can run on the fast path (a template made only of
    /// unsupported statements cannot).
    pub fn is_useful(&self) -> bool {
        !self.nodes.iter().all(|n| matches!(n, Node::Unsupported))
    }

    /// Renders one conversation, appending to `out`. On [`Bail`], `out` is restored to its
    /// length on entry.
    pub fn render_into(&self, ctx: &Context<'_, '_>, out: &mut String) -> Result<(), Bail> {
        let start = out.len();
        let text: usize = ctx
            .messages
            .iter()
            .flat_map(|m| m.fields.iter())
            .map(|(_, v)| match v {
                Scalar::Str(s) => s.len(),
                _ => 0,
            })
            .sum();
        // the messages' text, the template's own text and room for what a loop repeats of it
        out.reserve(text + text / 4 + self.size_hint + 256);
        BUDGET.with(|b| b.set(BUDGET_UNITS));
        let mut machine = Machine {
            globals: &self.globals,
            bound_names: &self.bound,
            macros: &self.macros,
            frame: 0,
            variables: 0,
            depth: 0,
            ns_floor: 0,
            current: usize::MAX,
            top_macro: &self.top_macro,
            macro_values: (0..self.macros.len()).map(V::Macro).collect(),
            poison: V::Poison,
            scope: Vec::with_capacity(16),
            namespaces: Vec::new(),
            out,
        };
        machine.scope.push((MESSAGES, V::Msgs(ctx.messages)));
        for (k, v) in ctx.variables {
            // a variable the template never names is never looked up
            let Some(id) = self.symbols.iter().position(|n| n == k) else {
                continue;
            };
            let id = u32::try_from(id).map_err(|_| Bail)?;
            if id == LOOP || id == NAMESPACE {
                // a caller's `loop` or `namespace` variable: not modelled
                machine.out.truncate(start);
                return Err(Bail);
            }
            machine.scope.push((id, V::from_scalar(*v)));
        }
        machine
            .scope
            .push((ADD_GENERATION_PROMPT, V::Bool(ctx.add_generation_prompt)));
        machine.variables = machine.scope.len();
        // `break`/`continue` outside a loop is a syntax error in Jinja2
        if let Ok(Flow::Normal) = machine.exec(&self.nodes) {
            Ok(())
        } else {
            machine.out.truncate(start);
            Err(Bail)
        }
    }
}

fn raw_len(nodes: &[Node]) -> usize {
    nodes
        .iter()
        .map(|n| match n {
            Node::Raw(s) => s.len(),
            Node::Emit(Ex::Add(items) | Ex::Concat(items)) => items
                .iter()
                .map(|e| match e {
                    Ex::Const(Const::Str(s)) => s.len(),
                    _ => 0,
                })
                .sum(),
            Node::If(_, a, b) => raw_len(a).max(raw_len(b)),
            Node::For(f) => raw_len(&f.body) * 4,
            _ => 0,
        })
        .sum()
}

// ---------------------------------------------------------------------------------------------
// AST -> program
// ---------------------------------------------------------------------------------------------

fn stmts(sy: &mut Symbols, list: &[ast::Stmt<'_>]) -> Vec<Node> {
    list.iter().map(|s| stmt(sy, s)).collect()
}

fn stmt(sy: &mut Symbols, s: &ast::Stmt<'_>) -> Node {
    match s {
        ast::Stmt::EmitRaw(r) => Node::Raw(r.raw.to_owned()),
        ast::Stmt::EmitExpr(e) => Node::Emit(expr(sy, &e.expr)),
        ast::Stmt::IfCond(c) => Node::If(
            expr(sy, &c.expr),
            stmts(sy, &c.true_body),
            stmts(sy, &c.false_body),
        ),
        ast::Stmt::ForLoop(f) => {
            let ast::Expr::Var(target) = &f.target else {
                return Node::Unsupported;
            };
            if f.recursive {
                return Node::Unsupported;
            }
            let body = stmts(sy, &f.body);
            let else_body = stmts(sy, &f.else_body);
            let mut in_else = Vec::new();
            collect_assigned(&else_body, &mut in_else);
            if !in_else.is_empty() {
                // the scope of a `set` in a loop's `else` is not modelled
                return Node::Unsupported;
            }
            let mut assigned = Vec::new();
            collect_assigned(&body, &mut assigned);
            Node::For(Box::new(ForNode {
                target: sy.id(target.id),
                iter: expr(sy, &f.iter),
                filter: f.filter_expr.as_ref().map(|e| expr(sy, e)),
                body,
                else_body,
                assigned,
            }))
        }
        ast::Stmt::Set(s) => match &s.target {
            ast::Expr::Var(v) => Node::Set(sy.id(v.id), expr(sy, &s.expr)),
            ast::Expr::GetAttr(a) => match &a.expr {
                ast::Expr::Var(v) => {
                    Node::SetAttr(sy.id(v.id), a.name.to_owned(), expr(sy, &s.expr))
                }
                _ => Node::Unsupported,
            },
            _ => Node::Unsupported,
        },
        ast::Stmt::SetBlock(b) => {
            let ast::Expr::Var(v) = &b.target else {
                return Node::Unsupported;
            };
            let body = stmts(sy, &b.body);
            if b.filter.is_some() || assigns(&body) {
                // a filtered block, or assignments inside one (their scope is not modelled)
                return Node::Unsupported;
            }
            Node::Set(sy.id(v.id), Ex::Capture(body))
        }
        ast::Stmt::Continue(_) => Node::Continue,
        ast::Stmt::Break(_) => Node::Break,
        ast::Stmt::Macro(m) => {
            let name = sy.id(m.name);
            let index = macro_def(sy, m);
            Node::Set(name, Ex::Macro(index))
        }
        _ => Node::Unsupported,
    }
}

/// Compiles a macro definition into `sy.macros`; its index.
fn macro_def(sy: &mut Symbols, m: &ast::Macro<'_>) -> usize {
    let mut supported = true;
    let mut params = Vec::with_capacity(m.args.len());
    for a in &m.args {
        match a {
            ast::Expr::Var(v) => params.push(sy.id(v.id)),
            _ => supported = false,
        }
    }
    let mut defaults = vec![None; params.len()];
    match params.len().checked_sub(m.defaults.len()) {
        Some(first) => {
            for (slot, d) in defaults[first..].iter_mut().zip(&m.defaults) {
                match expr(sy, d) {
                    Ex::Const(c) => *slot = Some(c),
                    _ => supported = false,
                }
            }
        }
        None => supported = false,
    }
    let first_read = sy.reads.len();
    let body = stmts(sy, &m.body);
    let specials: Vec<u32> = MACRO_SPECIALS.iter().map(|n| sy.id(n)).collect();
    if sy.reads[first_read..].iter().any(|r| specials.contains(r)) {
        supported = false;
    }
    let mut assigned = Vec::new();
    collect_assigned(&body, &mut assigned);
    assigned.retain(|a| !params.contains(a));
    sy.macros.push(MacroDef {
        params,
        defaults,
        body,
        assigned,
        context: Vec::new(),
        supported,
    });
    sy.macros.len() - 1
}

/// Calls `f` on every statement of `nodes`, at any depth of `if` and `for` bodies (not inside
/// macro bodies or captured blocks, which are expressions).
fn visit(nodes: &[Node], f: &mut impl FnMut(&Node)) {
    for n in nodes {
        f(n);
        match n {
            Node::If(_, a, b) => {
                visit(a, f);
                visit(b, f);
            }
            Node::For(l) => {
                visit(&l.body, f);
                visit(&l.else_body, f);
            }
            _ => {}
        }
    }
}

/// Whether `nodes` assign anything (`set`, `set ns.x`) or hold what is not modelled.
fn assigns(nodes: &[Node]) -> bool {
    let mut any = false;
    visit(nodes, &mut |n| {
        any |= matches!(n, Node::Set(..) | Node::SetAttr(..) | Node::Unsupported);
    });
    any
}

fn bump(counts: &mut [u32], id: u32) {
    if let Some(c) = usize::try_from(id).ok().and_then(|i| counts.get_mut(i)) {
        *c += 1;
    }
}

/// Counts the bindings in `nodes` per name (`set` targets, macro names, loop variables; not
/// inside macro bodies).
fn count_bindings(nodes: &[Node], counts: &mut [u32]) {
    visit(nodes, &mut |n| match n {
        Node::Set(name, _) => bump(counts, *name),
        Node::For(f) => bump(counts, f.target),
        _ => {}
    });
}

/// The names assigned by `set` in a loop body (nested loops included: their own assignments
/// never leak out of them, but listing them too only makes the fast path more careful).
fn collect_assigned(nodes: &[Node], out: &mut Vec<u32>) {
    visit(nodes, &mut |n| {
        if let Node::Set(name, _) = n {
            if !out.contains(name) {
                out.push(*name);
            }
        }
    });
}

fn const_of(v: &Value) -> Ex {
    use minijinja::value::ValueKind;
    match v.kind() {
        ValueKind::String => Ex::Const(Const::Str(v.as_str().unwrap_or_default().to_owned())),
        ValueKind::Bool => Ex::Const(Const::Bool(v.is_true())),
        ValueKind::None => Ex::Const(Const::None),
        ValueKind::Number => match v.as_i64() {
            // an integer literal (a float literal is not modelled)
            Some(i) if v.to_string() == i.to_string() => Ex::Const(Const::Int(i)),
            _ => Ex::Unsupported,
        },
        _ => Ex::Unsupported,
    }
}

fn boxed(sy: &mut Symbols, e: &ast::Expr<'_>) -> Box<Ex> {
    Box::new(expr(sy, e))
}

fn flatten(
    sy: &mut Symbols,
    e: &ast::Expr<'_>,
    kind: fn(&ast::BinOpKind) -> bool,
    out: &mut Vec<Ex>,
) {
    if let ast::Expr::BinOp(b) = e {
        if kind(&b.op) {
            flatten(sy, &b.left, kind, out);
            out.push(expr(sy, &b.right));
            return;
        }
    }
    out.push(expr(sy, e));
}

#[allow(clippy::too_many_lines)]
fn expr(sy: &mut Symbols, e: &ast::Expr<'_>) -> Ex {
    match e {
        ast::Expr::Var(v) => Ex::Var(sy.read(v.id)),
        ast::Expr::Const(c) => const_of(&c.value),
        ast::Expr::Slice(s) => Ex::Slice(
            boxed(sy, &s.expr),
            [
                s.start.as_ref().map(|e| boxed(sy, e)),
                s.stop.as_ref().map(|e| boxed(sy, e)),
                s.step.as_ref().map(|e| boxed(sy, e)),
            ],
        ),
        ast::Expr::UnaryOp(u) => match u.op {
            ast::UnaryOpKind::Not => Ex::Not(boxed(sy, &u.expr)),
            ast::UnaryOpKind::Neg => Ex::Neg(boxed(sy, &u.expr)),
        },
        ast::Expr::BinOp(b) => {
            let compare = match b.op {
                ast::BinOpKind::Eq => Some(Cmp::Eq),
                ast::BinOpKind::Ne => Some(Cmp::Ne),
                ast::BinOpKind::Lt => Some(Cmp::Lt),
                ast::BinOpKind::Lte => Some(Cmp::Lte),
                ast::BinOpKind::Gt => Some(Cmp::Gt),
                ast::BinOpKind::Gte => Some(Cmp::Gte),
                ast::BinOpKind::In => Some(Cmp::In),
                _ => None,
            };
            if let Some(op) = compare {
                return Ex::Cmp(boxed(sy, &b.left), vec![(op, expr(sy, &b.right))]);
            }
            let arith = match b.op {
                ast::BinOpKind::Sub => Some(Arith::Sub),
                ast::BinOpKind::Mul => Some(Arith::Mul),
                ast::BinOpKind::FloorDiv => Some(Arith::FloorDiv),
                ast::BinOpKind::Rem => Some(Arith::Rem),
                _ => None,
            };
            if let Some(op) = arith {
                return Ex::Arith(op, boxed(sy, &b.left), boxed(sy, &b.right));
            }
            match b.op {
                ast::BinOpKind::Add => {
                    let mut items = Vec::new();
                    flatten(sy, e, |k| matches!(k, ast::BinOpKind::Add), &mut items);
                    Ex::Add(items)
                }
                ast::BinOpKind::Concat => {
                    let mut items = Vec::new();
                    flatten(sy, e, |k| matches!(k, ast::BinOpKind::Concat), &mut items);
                    Ex::Concat(items)
                }
                ast::BinOpKind::ScAnd => Ex::And(boxed(sy, &b.left), boxed(sy, &b.right)),
                ast::BinOpKind::ScOr => Ex::Or(boxed(sy, &b.left), boxed(sy, &b.right)),
                // `/` and `**` make floats; the comparisons and arithmetic are handled above
                _ => Ex::Unsupported,
            }
        }
        ast::Expr::Compare(c) => Ex::Cmp(
            boxed(sy, &c.expr),
            c.ops
                .iter()
                .map(|op| {
                    let kind = match op.op {
                        ast::CompareOpKind::Eq => Cmp::Eq,
                        ast::CompareOpKind::Ne => Cmp::Ne,
                        ast::CompareOpKind::Lt => Cmp::Lt,
                        ast::CompareOpKind::Lte => Cmp::Lte,
                        ast::CompareOpKind::Gt => Cmp::Gt,
                        ast::CompareOpKind::Gte => Cmp::Gte,
                        ast::CompareOpKind::In => Cmp::In,
                        ast::CompareOpKind::NotIn => Cmp::NotIn,
                    };
                    (kind, expr(sy, &op.expr))
                })
                .collect(),
        ),
        ast::Expr::IfExpr(i) => Ex::IfElse(
            boxed(sy, &i.test_expr),
            boxed(sy, &i.true_expr),
            i.false_expr.as_ref().map(|e| boxed(sy, e)),
        ),
        ast::Expr::Filter(f) if matches!(f.name, "selectattr" | "rejectattr") => select_attr(sy, f),
        ast::Expr::Filter(f) if f.name == "tojson" => {
            let Some(target) = &f.expr else {
                return Ex::Unsupported;
            };
            let mut ascii = false;
            for (i, a) in f.args.iter().enumerate() {
                let value = match a {
                    ast::CallArg::Pos(ast::Expr::Const(c)) if i == 0 => &c.value,
                    ast::CallArg::Kwarg("ensure_ascii", ast::Expr::Const(c)) => &c.value,
                    _ => return Ex::Unsupported,
                };
                if value.kind() != minijinja::value::ValueKind::Bool {
                    return Ex::Unsupported;
                }
                ascii = value.is_true();
            }
            let kind = if ascii {
                FilterKind::ToJsonAscii
            } else {
                FilterKind::ToJson
            };
            Ex::Filter(kind, boxed(sy, target), Vec::new())
        }
        ast::Expr::Filter(f) => {
            let Some(target) = &f.expr else {
                return Ex::Unsupported;
            };
            let Some(args) = positional(sy, &f.args) else {
                return Ex::Unsupported;
            };
            let (kind, max_args) = match f.name {
                "trim" => (FilterKind::Trim, 1),
                "join" => (FilterKind::Join, 1),
                "reverse" => (FilterKind::Reverse, 0),
                "length" | "count" => (FilterKind::Length, 0),
                "string" => (FilterKind::String, 0),
                "lower" => (FilterKind::Lower, 0),
                "upper" => (FilterKind::Upper, 0),
                "default" | "d" => (FilterKind::Default, 2),
                "first" => (FilterKind::First, 0),
                "list" => (FilterKind::List, 0),
                "last" => (FilterKind::Last, 0),
                "capitalize" => (FilterKind::Capitalize, 0),
                "title" => (FilterKind::Title, 0),
                "int" => (FilterKind::Int, 0),
                _ => return Ex::Unsupported,
            };
            if args.len() > max_args {
                return Ex::Unsupported;
            }
            Ex::Filter(kind, boxed(sy, target), args)
        }
        ast::Expr::Test(t) => {
            if !t.args.is_empty() {
                return Ex::Unsupported;
            }
            let kind = match t.name {
                "defined" => TestKind::Defined,
                "undefined" => TestKind::Undefined,
                "none" => TestKind::None,
                "string" => TestKind::String,
                "boolean" => TestKind::Boolean,
                "true" => TestKind::True,
                "false" => TestKind::False,
                "mapping" => TestKind::Mapping,
                "number" => TestKind::Number,
                "integer" => TestKind::Integer,
                "sequence" => TestKind::Sequence,
                "iterable" => TestKind::Iterable,
                _ => return Ex::Unsupported,
            };
            Ex::Test(kind, boxed(sy, &t.expr))
        }
        ast::Expr::GetAttr(a) => Ex::Attr(boxed(sy, &a.expr), a.name.to_owned()),
        ast::Expr::GetItem(i) => match &i.subscript_expr {
            ast::Expr::Const(c) if c.value.as_str().is_some() => Ex::Field(
                boxed(sy, &i.expr),
                c.value.as_str().unwrap_or_default().to_owned(),
            ),
            _ => Ex::Item(boxed(sy, &i.expr), boxed(sy, &i.subscript_expr)),
        },
        ast::Expr::Call(c) => call(sy, c),
        ast::Expr::List(l) => Ex::List(l.items.iter().map(|e| expr(sy, e)).collect()),
        ast::Expr::Map(m) => {
            let mut items = Vec::with_capacity(m.keys.len());
            for (k, v) in m.keys.iter().zip(&m.values) {
                let ast::Expr::Const(c) = k else {
                    return Ex::Unsupported;
                };
                let Some(key) = c.value.as_str() else {
                    return Ex::Unsupported;
                };
                items.push((key.to_owned(), expr(sy, v)));
            }
            Ex::Dict(items)
        }
        // tuples print and compare unlike lists
        ast::Expr::Tuple(_) => Ex::Unsupported,
    }
}

fn select_attr(sy: &mut Symbols, f: &ast::Filter<'_>) -> Ex {
    let (Some(target), Some(args)) = (&f.expr, positional(sy, &f.args)) else {
        return Ex::Unsupported;
    };
    let const_str = |e: &Ex| match e {
        Ex::Const(Const::Str(s)) => Some(s.clone()),
        _ => None,
    };
    let Some(attr) = args.first().and_then(const_str) else {
        return Ex::Unsupported;
    };
    let test = match args.get(1).map(const_str) {
        None => None,
        Some(Some(name)) => Some(match name.as_str() {
            "equalto" | "eq" | "==" => SelectTest::EqualTo,
            "defined" => SelectTest::Defined,
            "undefined" => SelectTest::Undefined,
            "none" => SelectTest::None,
            "string" => SelectTest::String,
            _ => return Ex::Unsupported,
        }),
        Some(None) => return Ex::Unsupported,
    };
    let arg = args.get(2).cloned().map(Box::new);
    let arity_ok = match test {
        None => args.len() == 1,
        Some(SelectTest::EqualTo) => args.len() == 3,
        Some(_) => args.len() == 2,
    };
    if !arity_ok {
        return Ex::Unsupported;
    }
    Ex::SelectAttr(f.name == "selectattr", boxed(sy, target), attr, test, arg)
}

fn positional(sy: &mut Symbols, args: &[ast::CallArg<'_>]) -> Option<Vec<Ex>> {
    args.iter()
        .map(|a| match a {
            ast::CallArg::Pos(e) => Some(expr(sy, e)),
            _ => None,
        })
        .collect()
}

fn call(sy: &mut Symbols, c: &ast::Call<'_>) -> Ex {
    match &c.expr {
        ast::Expr::Var(v) if v.id == "strftime_now" => match positional(sy, &c.args) {
            Some(mut args) if args.len() == 1 => {
                Ex::StrftimeNow(sy.id("strftime_now"), Box::new(args.remove(0)))
            }
            _ => Ex::Unsupported,
        },
        ast::Expr::Var(v) if v.id == "range" => match positional(sy, &c.args) {
            Some(args) if (1..=3).contains(&args.len()) => Ex::Range(sy.read("range"), args),
            _ => Ex::Unsupported,
        },
        ast::Expr::Var(v) if v.id == "namespace" => {
            let mut kwargs = Vec::new();
            for a in &c.args {
                match a {
                    ast::CallArg::Kwarg(name, e) => kwargs.push(((*name).to_owned(), expr(sy, e))),
                    _ => return Ex::Unsupported,
                }
            }
            Ex::Namespace(kwargs)
        }
        ast::Expr::Var(v) if !GLOBALS.contains(&v.id) => {
            let name = sy.read(v.id);
            let mut pos = Vec::new();
            let mut kw = Vec::new();
            for a in &c.args {
                match a {
                    ast::CallArg::Pos(e) if kw.is_empty() => pos.push(expr(sy, e)),
                    ast::CallArg::Kwarg(k, e) => kw.push((sy.id(k), expr(sy, e))),
                    _ => return Ex::Unsupported,
                }
            }
            Ex::CallMacro(name, pos, kw)
        }
        ast::Expr::GetAttr(a) => {
            let Some(args) = positional(sy, &c.args) else {
                return Ex::Unsupported;
            };
            let (kind, min, max) = match a.name {
                "strip" => (MethodKind::Strip, 0, 1),
                "lstrip" => (MethodKind::LStrip, 0, 1),
                "rstrip" => (MethodKind::RStrip, 0, 1),
                // without maxsplit, rsplit splits as split does
                "split" | "rsplit" => (MethodKind::Split, 0, 1),
                "replace" => (MethodKind::Replace, 2, 2),
                "upper" => (MethodKind::Upper, 0, 0),
                "lower" => (MethodKind::Lower, 0, 0),
                "startswith" => (MethodKind::StartsWith, 1, 1),
                "endswith" => (MethodKind::EndsWith, 1, 1),
                "get" => (MethodKind::Get, 1, 2),
                "capitalize" => (MethodKind::Capitalize, 0, 0),
                "title" => (MethodKind::Title, 0, 0),
                _ => return Ex::Unsupported,
            };
            if args.len() < min || args.len() > max {
                return Ex::Unsupported;
            }
            Ex::Method(boxed(sy, &a.expr), kind, args)
        }
        _ => Ex::Unsupported,
    }
}

// ---------------------------------------------------------------------------------------------
// Values and the machine
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum S<'a> {
    B(&'a str),
    O(Rc<str>),
}

impl S<'_> {
    fn as_str(&self) -> &str {
        match self {
            S::B(s) => s,
            S::O(s) => s,
        }
    }
}

#[derive(Debug)]
struct Generator<'a> {
    items: Vec<V<'a>>,
    used: std::cell::Cell<bool>,
}

impl<'a> Generator<'a> {
    /// A generator of `items`, not yet used.
    fn value(items: Vec<V<'a>>) -> V<'a> {
        V::Gen(Rc::new(Generator {
            items,
            used: std::cell::Cell::new(false),
        }))
    }

    /// Its items, once: a second use of a generator sees it exhausted (not modelled).
    fn take(&self) -> R<&[V<'a>]> {
        if self.used.replace(true) {
            return Err(Bail);
        }
        Ok(&self.items)
    }
}

#[derive(Debug, Clone)]
enum V<'a> {
    Undef,
    None,
    Bool(bool),
    Int(i64),
    Str(S<'a>),
    Msgs(&'a [Message<'a>]),
    Msg(&'a Message<'a>),
    /// `loop` in a loop body: the iteration and the items iterated
    Loop {
        index0: usize,
        items: Rc<Vec<V<'a>>>,
    },
    Ns(usize),
    List(Rc<Vec<V<'a>>>),
    /// A generator (`selectattr`'s result): iterable once, always true
    Gen(Rc<Generator<'a>>),
    /// A name a loop body assigns, read before its assignment in this iteration.
    Poison,
    /// A macro (its index in the template's macros).
    Macro(usize),
    /// A dict made by the template (`{'key': value}`): string keys, in insertion order.
    Dict(Rc<Vec<(&'a str, V<'a>)>>),
}

/// A dict either way: a message (scalars) or one the template made.
#[derive(Clone, Copy)]
enum DictRef<'r, 'a> {
    Msg(&'a Message<'a>),
    Made(&'r [(&'a str, V<'a>)]),
}

impl<'a> DictRef<'_, 'a> {
    fn of<'r>(v: &'r V<'a>) -> Option<DictRef<'r, 'a>> {
        match v {
            V::Msg(m) => Some(DictRef::Msg(m)),
            V::Dict(d) => Some(DictRef::Made(d)),
            _ => None,
        }
    }

    fn get(self, key: &str) -> Option<V<'a>> {
        match self {
            DictRef::Msg(m) => m.get(key).map(V::from_scalar),
            DictRef::Made(d) => d.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone()),
        }
    }

    fn len(self) -> usize {
        match self {
            DictRef::Msg(m) => m.fields.len(),
            DictRef::Made(d) => d.len(),
        }
    }

    fn pairs(self) -> Vec<(&'a str, V<'a>)> {
        match self {
            DictRef::Msg(m) => m
                .fields
                .iter()
                .map(|(k, v)| (*k, V::from_scalar(*v)))
                .collect(),
            DictRef::Made(d) => d.to_vec(),
        }
    }
}

impl<'a> V<'a> {
    fn from_scalar(s: Scalar<'a>) -> V<'a> {
        match s {
            Scalar::Str(s) => V::Str(S::B(s)),
            Scalar::Int(i) => V::Int(i),
            Scalar::Bool(b) => V::Bool(b),
            Scalar::None => V::None,
        }
    }

    fn truthy(&self) -> R<bool> {
        Ok(match self {
            V::Undef | V::None => false,
            V::Bool(b) => *b,
            V::Int(i) => *i != 0,
            V::Str(s) => !s.as_str().is_empty(),
            V::Msgs(m) => !m.is_empty(),
            V::Msg(m) => !m.fields.is_empty(),
            V::Dict(d) => !d.is_empty(),
            V::List(l) => !l.is_empty(),
            V::Loop { .. } | V::Ns(_) => true,
            // a generator is always true in Jinja2, an empty one false in the full engine:
            // the full engine decides (tests/test_chat_template.py records the difference)
            V::Gen(_) | V::Poison | V::Macro(_) => return Err(Bail),
        })
    }

    /// An integer for arithmetic and ordering (Python's bool is an int).
    fn num(&self) -> Option<i64> {
        match self {
            V::Int(i) => Some(*i),
            V::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    fn text(&self) -> Option<&str> {
        match self {
            V::Str(s) => Some(s.as_str()),
            _ => None,
        }
    }
}

/// Python's `str()` of a scalar, as Jinja2 prints it; `Bail` for containers.
fn write_value(out: &mut String, v: &V<'_>) -> R<()> {
    match v {
        V::Str(s) => out.push_str(s.as_str()),
        V::Undef => {}
        V::None => out.push_str("None"),
        V::Bool(true) => out.push_str("True"),
        V::Bool(false) => out.push_str("False"),
        V::Int(i) => {
            let _ = write!(out, "{i}");
        }
        _ => return Err(Bail),
    }
    Ok(())
}

/// Python's `==` for the values the fast path models.
#[allow(clippy::many_single_char_names)]
fn equal(a: &V<'_>, b: &V<'_>) -> R<bool> {
    if let (Some(x), Some(y)) = (a.num(), b.num()) {
        return Ok(x == y);
    }
    Ok(match (a, b) {
        (V::Str(x), V::Str(y)) => x.as_str() == y.as_str(),
        // dicts: the same keys with equal values, in any order
        (V::Msg(_) | V::Dict(_), V::Msg(_) | V::Dict(_)) => {
            let (Some(x), Some(y)) = (DictRef::of(a), DictRef::of(b)) else {
                return Err(Bail);
            };
            if x.len() != y.len() {
                return Ok(false);
            }
            for (k, v) in x.pairs() {
                match y.get(k) {
                    Some(w) => {
                        if !equal(&v, &w)? {
                            return Ok(false);
                        }
                    }
                    None => return Ok(false),
                }
            }
            true
        }
        (V::None, V::None) | (V::Undef, V::Undef) => true,
        (
            V::Str(_) | V::None | V::Undef | V::Bool(_) | V::Int(_),
            V::Str(_) | V::None | V::Undef | V::Bool(_) | V::Int(_),
        ) => false,
        _ => return Err(Bail),
    })
}

fn order(a: &V<'_>, b: &V<'_>) -> R<std::cmp::Ordering> {
    if let (Some(x), Some(y)) = (a.num(), b.num()) {
        return Ok(x.cmp(&y));
    }
    match (a.text(), b.text()) {
        // UTF-8 byte order is code point order, Python's str order
        (Some(x), Some(y)) => Ok(x.cmp(y)),
        _ => Err(Bail),
    }
}

fn contains(needle: &V<'_>, hay: &V<'_>) -> R<bool> {
    match hay {
        // Jinja2's Undefined iterates as empty: nothing is in it
        V::Undef => Ok(false),
        V::Str(h) => match needle.text() {
            Some(n) => Ok(h.as_str().contains(n)),
            None => Err(Bail),
        },
        V::Msg(_) | V::Dict(_) => match (needle.text(), DictRef::of(hay)) {
            (Some(n), Some(d)) => Ok(d.get(n).is_some()),
            _ => Err(Bail),
        },
        V::List(items) => {
            for item in items.iter() {
                if equal(needle, item)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        _ => Err(Bail),
    }
}

/// The methods a dict has: `message.items` and friends are methods in Jinja2, not keys.
const DICT_ATTRS: [&str; 11] = [
    "clear",
    "copy",
    "fromkeys",
    "get",
    "items",
    "keys",
    "pop",
    "popitem",
    "setdefault",
    "update",
    "values",
];

/// Python's `str` attributes (its methods): looking one up on a string gives a bound method.
const STR_ATTRS: [&str; 47] = [
    "capitalize",
    "casefold",
    "center",
    "count",
    "encode",
    "endswith",
    "expandtabs",
    "find",
    "format",
    "format_map",
    "index",
    "isalnum",
    "isalpha",
    "isascii",
    "isdecimal",
    "isdigit",
    "isidentifier",
    "islower",
    "isnumeric",
    "isprintable",
    "isspace",
    "istitle",
    "isupper",
    "join",
    "ljust",
    "lower",
    "lstrip",
    "maketrans",
    "partition",
    "removeprefix",
    "removesuffix",
    "replace",
    "rfind",
    "rindex",
    "rjust",
    "rpartition",
    "rsplit",
    "rstrip",
    "split",
    "splitlines",
    "startswith",
    "strip",
    "swapcase",
    "title",
    "translate",
    "upper",
    "zfill",
];

/// `x[key]` / `x.key` with a string key, as Jinja2 looks it up: a dict's value (or undefined),
/// and undefined on a string -- where the name is no attribute of `str` (a string has no
/// items by name). Anything else gives up.
fn member<'a>(x: &V<'a>, key: &str) -> R<V<'a>> {
    if let Some(d) = DictRef::of(x) {
        return dict_item(d, key);
    }
    match x {
        V::Str(_) if key.starts_with('_') || STR_ATTRS.contains(&key) => Err(Bail),
        V::Str(_) => Ok(V::Undef),
        _ => Err(Bail),
    }
}

/// Python's `s[start:stop:stride]`, by characters (a contiguous ASCII or borrowed slice is not
/// copied).
fn slice_str<'a>(text: &S<'a>, start: Option<i64>, stop: Option<i64>, stride: i64) -> R<V<'a>> {
    let s = text.as_str();
    // the byte offset of each character, and the end (an ASCII string's are its indices)
    let offsets: Vec<usize> = if s.is_ascii() {
        Vec::new()
    } else {
        s.char_indices()
            .map(|(i, _)| i)
            .chain(std::iter::once(s.len()))
            .collect()
    };
    let at = |i: usize| offsets.get(i).copied().unwrap_or(i);
    let count = if s.is_ascii() {
        s.len()
    } else {
        offsets.len() - 1
    };
    if stride == 1 {
        let a = slice_bound(start, count, 0)?;
        let b = slice_bound(stop, count, count)?.max(a);
        let (from, to) = (at(a), at(b));
        return Ok(V::Str(match text {
            S::B(t) => S::B(&t[from..to]),
            S::O(t) => S::O(Rc::from(&t[from..to])),
        }));
    }
    let mut out = String::new();
    for i in slice_indices(count, start, stop, stride)? {
        out.push_str(&s[at(i)..at(i + 1)]);
    }
    Ok(V::Str(S::O(Rc::from(out))))
}

/// The characters of a string, each a string (iterating a string in Jinja2).
fn chars<'a>(s: &S<'a>) -> Vec<V<'a>> {
    match s {
        S::B(text) => text
            .char_indices()
            .map(|(i, c)| V::Str(S::B(&text[i..i + c.len_utf8()])))
            .collect(),
        S::O(text) => text
            .chars()
            .map(|c| V::Str(S::O(Rc::from(c.to_string()))))
            .collect(),
    }
}

/// `d[key]`: the value, or undefined -- unless the dict has an attribute of that name (a
/// method), which Jinja2 would give instead.
fn dict_item<'a>(d: DictRef<'_, 'a>, key: &str) -> R<V<'a>> {
    match d.get(key) {
        Some(v) => Ok(v),
        None if DICT_ATTRS.contains(&key) || key.starts_with('_') => Err(Bail),
        None => Ok(V::Undef),
    }
}

/// A Python index into a sequence of `len` items (`None`: out of range).
fn py_index(i: i64, len: usize) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let at = if i < 0 { i + len } else { i };
    if (0..len).contains(&at) {
        usize::try_from(at).ok()
    } else {
        None
    }
}

fn slice_bound(v: Option<i64>, len: usize, default: usize) -> R<usize> {
    match v {
        None => Ok(default),
        Some(i) => {
            let n = i64::try_from(len).map_err(|_| Bail)?;
            let at = if i < 0 { (i + n).max(0) } else { i.min(n) };
            usize::try_from(at).map_err(|_| Bail)
        }
    }
}

/// The indices Python's `seq[start:stop:step]` takes from a sequence of `len` items.
fn slice_indices(len: usize, first: Option<i64>, end: Option<i64>, stride: i64) -> R<Vec<usize>> {
    if stride == 0 {
        return Err(Bail);
    }
    let n = i64::try_from(len).map_err(|_| Bail)?;
    let (lower, upper) = if stride < 0 { (-1, n - 1) } else { (0, n) };
    let clamp = |v: Option<i64>, default: i64| match v {
        None => default,
        Some(i) => {
            let i = if i < 0 { i + n } else { i };
            i.clamp(lower, upper)
        }
    };
    let (mut i, limit) = if stride < 0 {
        (clamp(first, upper), clamp(end, lower))
    } else {
        (clamp(first, lower), clamp(end, upper))
    };
    let mut out = Vec::new();
    while (stride > 0 && i < limit) || (stride < 0 && i > limit) {
        out.push(usize::try_from(i).map_err(|_| Bail)?);
        i = i.checked_add(stride).ok_or(Bail)?;
    }
    Ok(out)
}

/// Sub-strings of a string value, given as byte ranges of its text: borrowed when it is.
fn pieces<'a>(v: &V<'a>, ranges: &[(usize, usize)]) -> R<Vec<V<'a>>> {
    Ok(match v {
        V::Str(S::B(s)) => ranges
            .iter()
            .map(|&(a, b)| V::Str(S::B(&s[a..b])))
            .collect(),
        V::Str(S::O(s)) => ranges
            .iter()
            .map(|&(a, b)| V::Str(S::O(Rc::from(&s[a..b]))))
            .collect(),
        _ => return Err(Bail),
    })
}

/// The byte range of `part`, a sub-slice of `whole`.
fn range_of(whole: &str, part: &str) -> (usize, usize) {
    let at = part.as_ptr() as usize - whole.as_ptr() as usize;
    (at, at + part.len())
}

fn strip_py(s: &str) -> &str {
    s.trim_matches(py_is_space)
}

/// Python's `range(start, stop, step)` as a list; `Bail` for a zero step or more items than
/// Jinja2's sandbox allows (it raises there).
fn py_range<'a>(start: i64, end: i64, step: i64) -> R<Vec<V<'a>>> {
    const MAX_RANGE: i128 = 100_000;
    if step == 0 {
        return Err(Bail);
    }
    let (start, end, step) = (i128::from(start), i128::from(end), i128::from(step));
    let len = if step > 0 {
        (end - start + step - 1).div_euclid(step)
    } else {
        (start - end - step - 1).div_euclid(-step)
    }
    .max(0);
    if len > MAX_RANGE {
        return Err(Bail);
    }
    (0..len)
        .map(|k| {
            i64::try_from(start + k * step)
                .map(V::Int)
                .map_err(|_| Bail)
        })
        .collect()
}

/// Python's `str.capitalize()` of an ASCII string.
fn py_capitalize(s: &str) -> String {
    let mut out = s.to_ascii_lowercase();
    if let Some(first) = out.get_mut(..1) {
        first.make_ascii_uppercase();
    }
    out
}

/// A value as the full engine sees it, for `tojson` (`Bail` for what JSON cannot encode or
/// the fast path does not model: undefined, namespaces, generators, loops, macros).
fn json_value(v: &V<'_>, depth: usize) -> R<Value> {
    if depth > 32 {
        return Err(Bail);
    }
    Ok(match v {
        V::None => Value::from(()),
        V::Bool(b) => Value::from(*b),
        V::Int(i) => Value::from(*i),
        V::Str(s) => Value::from(s.as_str()),
        V::Msg(m) => Value::from(crate::chat::plain_map(m)),
        V::Dict(d) => Value::from(
            d.iter()
                .map(|(k, x)| Ok((Value::from(*k), json_value(x, depth + 1)?)))
                .collect::<R<crate::chat::Map>>()?,
        ),
        V::Msgs(ms) => Value::from(
            ms.iter()
                .map(|m| Value::from(crate::chat::plain_map(m)))
                .collect::<Vec<Value>>(),
        ),
        V::List(items) => Value::from(
            items
                .iter()
                .map(|x| json_value(x, depth + 1))
                .collect::<R<Vec<Value>>>()?,
        ),
        _ => return Err(Bail),
    })
}

/// A case mapping of an ASCII string value (Python's and Rust's case mappings differ in
/// places outside ASCII: the full engine decides there).
fn recase<'a>(v: &V<'a>, map: fn(&str) -> String) -> R<V<'a>> {
    match v.text() {
        Some(s) if s.is_ascii() => Ok(V::Str(S::O(Rc::from(map(s))))),
        _ => Err(Bail),
    }
}

fn const_value(c: &Const) -> V<'_> {
    match c {
        Const::Str(s) => V::Str(S::B(s)),
        Const::Int(i) => V::Int(*i),
        Const::Bool(b) => V::Bool(*b),
        Const::None => V::None,
    }
}

#[derive(Clone, Copy)]
enum Flow {
    Normal,
    Break,
    Continue,
}

/// Macro calls nest at most this deep (a recursive macro gives up).
const MAX_MACRO_DEPTH: usize = 16;

struct Machine<'a, 'o> {
    globals: &'a [bool],
    bound_names: &'a [bool],
    macros: &'a [MacroDef],
    /// where the running macro's scope starts in `scope` (0: the template's top level)
    frame: usize,
    /// how many entries at the bottom of `scope` are the render variables
    variables: usize,
    depth: usize,
    /// namespaces below this index were made outside the running macro call
    ns_floor: usize,
    /// the running macro (`usize::MAX` at the top level)
    current: usize,
    top_macro: &'a [Option<usize>],
    /// `V::Macro(i)` for each macro `i`, for lookups by reference
    macro_values: Vec<V<'a>>,
    /// what `bound` gives for a name a macro body may not read from outside
    poison: V<'a>,
    scope: Vec<(u32, V<'a>)>,
    namespaces: Vec<Vec<(&'a str, V<'a>)>>,
    out: &'o mut String,
}

impl<'a> Machine<'a, '_> {
    /// A name's binding (poisoned or not) in the running scope; in a macro body, a name the
    /// body has not bound is a render variable or unset, and one the template binds anywhere
    /// reads as poisoned.
    // (forced: the compiler keeps it out of line, a call for a compare or two)
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn find(&self, name: u32) -> Option<&V<'a>> {
        if self.frame == 0 {
            // the top level: its scope is all of it
            return self
                .scope
                .iter()
                .rev()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v);
        }
        self.find_in_macro(name)
    }

    /// [`Machine::find`] in a macro body.
    fn find_in_macro(&self, name: u32) -> Option<&V<'a>> {
        let own = self.scope.get(self.frame..).unwrap_or_default();
        if let Some((_, v)) = own.iter().rev().find(|(k, _)| *k == name) {
            return Some(v);
        }
        let i = usize::try_from(name).unwrap_or(usize::MAX);
        if let Some(Some(index)) = self.top_macro.get(i) {
            // a macro defined before the running one at the top level: bound by now
            if *index < self.current {
                return self.macro_values.get(*index);
            }
        }
        let context = self
            .macros
            .get(self.current)
            .is_some_and(|m| m.context.contains(&name));
        if !context && self.bound_names.get(i).copied().unwrap_or(true) {
            return Some(&self.poison);
        }
        let variables = self.scope.get(..self.variables).unwrap_or_default();
        variables
            .iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }

    fn lookup(&self, name: u32) -> R<V<'a>> {
        match self.find(name) {
            Some(V::Poison) => Err(Bail),
            Some(v) => Ok(v.clone()),
            None => {
                self.unset(name)?;
                Ok(V::Undef)
            }
        }
    }

    fn is_global(&self, name: u32) -> bool {
        usize::try_from(name)
            .ok()
            .and_then(|i| self.globals.get(i))
            .copied()
            .unwrap_or(true)
    }

    /// An unset name: undefined, unless it names a global (a function).
    fn unset(&self, name: u32) -> R<()> {
        match usize::try_from(name).ok().and_then(|i| self.globals.get(i)) {
            Some(false) => Ok(()),
            _ => Err(Bail),
        }
    }

    /// A variable's binding, if any (poisoned or not).
    fn bound(&self, name: u32) -> Option<&V<'a>> {
        self.find(name)
    }

    /// A variable's value, by reference (`None` when unset; `Bail` when poisoned).
    fn get(&self, name: u32) -> R<Option<&V<'a>>> {
        match self.find(name) {
            Some(V::Poison) => Err(Bail),
            Some(v) => Ok(Some(v)),
            None => {
                self.unset(name)?;
                Ok(None)
            }
        }
    }

    /// Calls macro `name` with the given arguments: the text its body writes.
    fn call_macro(&mut self, name: u32, pos: &'a [Ex], kw: &'a [(u32, Ex)]) -> R<V<'a>> {
        let V::Macro(index) = self.lookup(name)? else {
            return Err(Bail);
        };
        let m = self.macros.get(index).ok_or(Bail)?;
        if !m.supported || self.depth >= MAX_MACRO_DEPTH || pos.len() > m.params.len() {
            return Err(Bail);
        }
        let mut args: Vec<Option<V<'a>>> = vec![None; m.params.len()];
        for (slot, e) in args.iter_mut().zip(pos) {
            *slot = Some(self.eval(e)?);
        }
        for (k, e) in kw {
            let at = m.params.iter().position(|p| p == k).ok_or(Bail)?;
            if args[at].is_some() {
                return Err(Bail);
            }
            args[at] = Some(self.eval(e)?);
        }
        let base = self.scope.len();
        for ((arg, param), default) in args.into_iter().zip(&m.params).zip(&m.defaults) {
            let v = match (arg, default) {
                (Some(v), _) => v,
                (None, Some(c)) => const_value(c),
                // a missing argument is undefined in Jinja2: left to the full engine
                (None, None) => return Err(Bail),
            };
            self.scope.push((*param, v));
        }
        for name in &m.assigned {
            self.scope.push((*name, V::Poison));
        }
        let (frame, ns_floor, current, start) =
            (self.frame, self.ns_floor, self.current, self.out.len());
        self.frame = base;
        self.ns_floor = self.namespaces.len();
        self.current = index;
        self.depth += 1;
        let flow = self.exec(&m.body);
        self.depth -= 1;
        self.frame = frame;
        self.ns_floor = ns_floor;
        self.current = current;
        self.scope.truncate(base);
        self.captured(start, flow?)
    }

    /// What a macro body or a `{% set %}` block wrote since `start` in the output, taken out of
    /// it as a string value (`Bail` when it ended with a loop control: not modelled).
    fn captured(&mut self, start: usize, flow: Flow) -> R<V<'a>> {
        if !matches!(flow, Flow::Normal) {
            return Err(Bail);
        }
        let text: Rc<str> = Rc::from(self.out.get(start..).unwrap_or_default());
        self.out.truncate(start);
        Ok(V::Str(S::O(text)))
    }

    /// The text of the commonest string operands without building a value: a string
    /// constant, a string variable, a message's string field (`None`: evaluate it). The two
    /// commonest forms are read here, in the caller; the rest in [`Machine::quick_str_other`].
    // (forced: the compiler keeps it out of line, a call for a compare or two)
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn quick_str(&self, e: &'a Ex) -> R<Option<&'a str>> {
        match e {
            Ex::Const(Const::Str(c)) => Ok(Some(c)),
            Ex::Field(target, key) => self.quick_field(target, key),
            _ => self.quick_str_other(e),
        }
    }

    /// [`Machine::quick_str`]'s other forms: a string variable, `message.key`, and `| trim` or
    /// `.strip()` of a quick string.
    fn quick_str_other(&self, e: &'a Ex) -> R<Option<&'a str>> {
        Ok(match e {
            Ex::Var(id) => match self.get(*id)? {
                Some(V::Str(S::B(s))) => Some(s),
                _ => None,
            },
            // `message.content` (a dict's own attribute names are its methods)
            Ex::Attr(target, name) if !DICT_ATTRS.contains(&name.as_str()) => {
                self.quick_field(target, name)?
            }
            // `x | trim` and `x.strip()`: Python's whitespace off both ends
            Ex::Filter(FilterKind::Trim, inner, args) if args.is_empty() => {
                self.quick_str(inner)?.map(strip_py)
            }
            Ex::Method(inner, MethodKind::Strip, args) if args.is_empty() => {
                self.quick_str(inner)?.map(strip_py)
            }
            _ => None,
        })
    }

    /// A string field of a message variable, `message['key']`, or of a message picked from a
    /// list of messages by a constant index, `messages[0]['key']`.
    fn quick_field(&self, target: &Ex, key: &str) -> R<Option<&'a str>> {
        let message = match target {
            Ex::Var(id) => match self.get(*id)? {
                Some(V::Msg(m)) => *m,
                _ => return Ok(None),
            },
            Ex::Item(list, index) => match (&**list, &**index) {
                (Ex::Var(id), Ex::Const(Const::Int(i))) => match self.get(*id)? {
                    Some(V::Msgs(ms)) => match py_index(*i, ms.len()) {
                        Some(at) => &ms[at],
                        None => return Ok(None),
                    },
                    _ => return Ok(None),
                },
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        Ok(match message.get(key) {
            Some(Scalar::Str(s)) => Some(s),
            _ => None,
        })
    }

    /// The value of the commonest integer operands without building a value: an integer
    /// constant, `loop.index0`/`loop.index`, and `+ - * // %` of those (`None`: evaluate it).
    // (forced: the compiler keeps it out of line, a call for a compare or two)
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn quick_int(&self, e: &'a Ex) -> R<Option<i64>> {
        match e {
            Ex::Const(Const::Int(i)) => Ok(Some(*i)),
            _ => self.quick_int_other(e),
        }
    }

    /// [`Machine::quick_int`]'s forms other than a constant.
    fn quick_int_other(&self, e: &'a Ex) -> R<Option<i64>> {
        Ok(match e {
            Ex::Attr(target, name) => match &**target {
                Ex::Var(LOOP) => match self.get(LOOP)? {
                    Some(V::Loop { index0, .. }) => match name.as_str() {
                        "index0" => i64::try_from(*index0).ok(),
                        "index" => i64::try_from(*index0 + 1).ok(),
                        _ => None,
                    },
                    _ => None,
                },
                _ => None,
            },
            Ex::Arith(op, left, right) => match (self.quick_int(left)?, self.quick_int(right)?) {
                (Some(x), Some(y)) => Some(arith(*op, x, y)?),
                _ => None,
            },
            _ => None,
        })
    }

    /// The truth of `e`, with the common conditions (`message['role'] == 'user'`, `not x`,
    /// `a and b`) decided without building values.
    fn eval_bool(&mut self, e: &'a Ex) -> R<bool> {
        match e {
            Ex::Cmp(first, ops) if ops.len() == 1 && matches!(ops[0].0, Cmp::Eq | Cmp::Ne) => {
                let (op, rhs) = &ops[0];
                let eq = matches!(op, Cmp::Eq);
                // each shortcut is exact where it applies; an operand's form says which may
                // apply, so that the others are not tried (evaluation is pure: a shortcut that
                // does not apply has changed nothing)
                if is_boolish(first) && is_boolish(rhs) {
                    let a = self.eval_bool(first)?;
                    let b = self.eval_bool(rhs)?;
                    return Ok((a == b) == eq);
                }
                if may_be_quick_str(first)
                    && may_be_quick_str(rhs)
                    && let Some(a) = self.quick_str(first)?
                    && let Some(b) = self.quick_str(rhs)?
                {
                    return Ok((a == b) == eq);
                }
                if may_be_quick_int(first)
                    && may_be_quick_int(rhs)
                    && let Some(a) = self.quick_int(first)?
                    && let Some(b) = self.quick_int(rhs)?
                {
                    return Ok((a == b) == eq);
                }
                self.eval(e)?.truthy()
            }
            Ex::Not(inner) => Ok(!self.eval_bool(inner)?),
            // `a and b` is `a` when `a` is false, else `b`: its truth is the conjunction
            Ex::And(l, r) => Ok(self.eval_bool(l)? && self.eval_bool(r)?),
            Ex::Or(l, r) => Ok(self.eval_bool(l)? || self.eval_bool(r)?),
            _ => self.eval(e)?.truthy(),
        }
    }

    fn exec(&mut self, nodes: &'a [Node]) -> R<Flow> {
        for node in nodes {
            match node {
                Node::Raw(s) => {
                    spend(s.len())?;
                    self.out.push_str(s);
                }
                Node::Emit(e) => {
                    let start = self.out.len();
                    self.emit(e)?;
                    spend(self.out.len().saturating_sub(start))?;
                }
                Node::If(cond, yes, no) => {
                    let branch = if self.eval_bool(cond)? { yes } else { no };
                    match self.exec(branch)? {
                        Flow::Normal => {}
                        flow => return Ok(flow),
                    }
                }
                Node::For(f) => self.for_loop(f)?,
                Node::Set(name, e) => {
                    let v = self.eval(e)?;
                    self.scope.push((*name, v));
                }
                Node::SetAttr(ns, attr, e) => {
                    let V::Ns(i) = self.lookup(*ns)? else {
                        return Err(Bail);
                    };
                    if i < self.ns_floor {
                        // a macro call changing a namespace it did not make
                        return Err(Bail);
                    }
                    let v = self.eval(e)?;
                    let attrs = &mut self.namespaces[i];
                    match attrs.iter_mut().find(|(k, _)| *k == attr.as_str()) {
                        Some(slot) => slot.1 = v,
                        None => attrs.push((attr, v)),
                    }
                }
                Node::Continue => return Ok(Flow::Continue),
                Node::Break => return Ok(Flow::Break),
                Node::Unsupported => return Err(Bail),
            }
        }
        Ok(Flow::Normal)
    }

    fn for_loop(&mut self, f: &'a ForNode) -> R<()> {
        let items: Vec<V<'a>> = match self.eval(&f.iter)? {
            // iterating an undefined value yields nothing in Jinja2
            V::Undef => Vec::new(),
            v => iterate(&v)?,
        };
        let base = self.scope.len();
        let items = match &f.filter {
            None => items,
            Some(cond) => {
                let mut kept = Vec::with_capacity(items.len());
                for item in items {
                    self.scope.push((f.target, item.clone()));
                    let keep = self.eval_bool(cond)?;
                    self.scope.truncate(base);
                    if keep {
                        kept.push(item);
                    }
                }
                kept
            }
        };
        let len = items.len();
        let items = Rc::new(items);
        for (index0, item) in items.iter().enumerate() {
            spend(64)?;
            self.scope.truncate(base);
            for name in &f.assigned {
                self.scope.push((*name, V::Poison));
            }
            self.scope.push((f.target, item.clone()));
            self.scope.push((
                LOOP,
                V::Loop {
                    index0,
                    items: Rc::clone(&items),
                },
            ));
            match self.exec(&f.body)? {
                Flow::Break => break,
                Flow::Normal | Flow::Continue => {}
            }
        }
        self.scope.truncate(base);
        if len == 0 {
            match self.exec(&f.else_body)? {
                Flow::Normal => {}
                // loop controls in a loop's else belong to an outer loop: not modelled
                _ => return Err(Bail),
            }
        }
        Ok(())
    }

    fn emit(&mut self, e: &'a Ex) -> R<()> {
        match e {
            Ex::Add(items) => {
                // strings are written as they come; anything else starts over on the
                // general path (evaluation is pure)
                let start = self.out.len();
                for item in items {
                    if let Some(s) = self.quick_str(item)? {
                        self.out.push_str(s);
                        continue;
                    }
                    if let V::Str(s) = self.eval(item)? {
                        self.out.push_str(s.as_str());
                    } else {
                        self.out.truncate(start);
                        let v = self.eval(e)?;
                        return write_value(self.out, &v);
                    }
                }
                Ok(())
            }
            Ex::Concat(items) => {
                let start = self.out.len();
                for item in items {
                    let v = self.eval(item)?;
                    if let Err(bail) = write_value(self.out, &v) {
                        self.out.truncate(start);
                        return Err(bail);
                    }
                }
                Ok(())
            }
            _ => {
                if let Some(s) = self.quick_str(e)? {
                    self.out.push_str(s);
                    return Ok(());
                }
                let v = self.eval(e)?;
                write_value(self.out, &v)
            }
        }
    }

    #[allow(clippy::too_many_lines, clippy::many_single_char_names)]
    fn eval(&mut self, e: &'a Ex) -> R<V<'a>> {
        Ok(match e {
            Ex::Const(c) => const_value(c),
            Ex::Var(name) => self.lookup(*name)?,
            Ex::Macro(index) => V::Macro(*index),
            Ex::CallMacro(name, pos, kw) => self.call_macro(*name, pos, kw)?,
            Ex::Field(target, key) => member(&self.eval(target)?, key)?,
            Ex::Item(target, key) => {
                let target = self.eval(target)?;
                let key = self.eval(key)?;
                match (&target, &key) {
                    (V::Msgs(m), k) => match k.num() {
                        Some(i) if !matches!(k, V::Bool(_)) => match py_index(i, m.len()) {
                            Some(at) => V::Msg(&m[at]),
                            None => V::Undef,
                        },
                        _ => return Err(Bail),
                    },
                    (V::Msg(_) | V::Dict(_) | V::Str(_), V::Str(k)) => member(&target, k.as_str())?,
                    (V::Str(s), V::Int(i)) => {
                        let s = s.as_str();
                        let len = if s.is_ascii() {
                            s.len()
                        } else {
                            s.chars().count()
                        };
                        match py_index(*i, len) {
                            Some(at) if s.is_ascii() => V::Str(S::O(Rc::from(&s[at..=at]))),
                            Some(at) => {
                                let c = s.chars().nth(at).ok_or(Bail)?;
                                V::Str(S::O(Rc::from(c.to_string())))
                            }
                            None => V::Undef,
                        }
                    }
                    (V::List(l), V::Int(i)) => match py_index(*i, l.len()) {
                        Some(at) => l[at].clone(),
                        None => V::Undef,
                    },
                    _ => return Err(Bail),
                }
            }
            Ex::Attr(target, name) => match self.eval(target)? {
                // `message.items` is the dict's method in Jinja2, whatever the keys
                V::Msg(_) | V::Dict(_) if DICT_ATTRS.contains(&name.as_str()) => {
                    return Err(Bail);
                }
                v @ (V::Msg(_) | V::Dict(_) | V::Str(_)) => member(&v, name)?,
                V::Loop { index0, items } => match name.as_str() {
                    // the neighbours: undefined at the ends, as in Jinja2
                    "previtem" => index0
                        .checked_sub(1)
                        .and_then(|i| items.get(i))
                        .map_or(V::Undef, V::clone),
                    "nextitem" => items.get(index0 + 1).map_or(V::Undef, V::clone),
                    "index0" => V::Int(i64::try_from(index0).map_err(|_| Bail)?),
                    "index" => V::Int(i64::try_from(index0 + 1).map_err(|_| Bail)?),
                    "revindex" => V::Int(i64::try_from(items.len() - index0).map_err(|_| Bail)?),
                    "revindex0" => {
                        V::Int(i64::try_from(items.len() - index0 - 1).map_err(|_| Bail)?)
                    }
                    "first" => V::Bool(index0 == 0),
                    "last" => V::Bool(index0 + 1 == items.len()),
                    "length" => V::Int(i64::try_from(items.len()).map_err(|_| Bail)?),
                    _ => return Err(Bail),
                },
                V::Ns(i) => self.namespaces[i]
                    .iter()
                    .find(|(k, _)| *k == name.as_str())
                    .map_or(V::Undef, |(_, v)| v.clone()),
                _ => return Err(Bail),
            },
            Ex::Slice(target, bounds) => {
                let target = self.eval(target)?;
                let mut at: [Option<i64>; 3] = [None; 3];
                for (slot, e) in at.iter_mut().zip(bounds) {
                    if let Some(e) = e {
                        match self.eval(e)? {
                            V::None => {}
                            v => *slot = Some(v.num().ok_or(Bail)?),
                        }
                    }
                }
                let [start, stop, stride] = at;
                let stride = stride.unwrap_or(1);
                match target {
                    V::Msgs(m) if stride == 1 => {
                        let a = slice_bound(start, m.len(), 0)?;
                        let b = slice_bound(stop, m.len(), m.len())?;
                        V::Msgs(if a < b { &m[a..b] } else { &m[0..0] })
                    }
                    V::Msgs(m) => V::List(Rc::new(
                        slice_indices(m.len(), start, stop, stride)?
                            .into_iter()
                            .map(|i| V::Msg(&m[i]))
                            .collect(),
                    )),
                    V::List(l) => V::List(Rc::new(
                        slice_indices(l.len(), start, stop, stride)?
                            .into_iter()
                            .map(|i| l[i].clone())
                            .collect(),
                    )),
                    V::Str(text) => slice_str(&text, start, stop, stride)?,
                    _ => return Err(Bail),
                }
            }
            Ex::Not(inner) => V::Bool(!self.eval_bool(inner)?),
            Ex::Neg(inner) => match self.eval(inner)?.num() {
                Some(i) => V::Int(i.checked_neg().ok_or(Bail)?),
                None => return Err(Bail),
            },
            Ex::Add(items) => {
                let mut acc = self.eval(&items[0])?;
                for item in &items[1..] {
                    let right = self.eval(item)?;
                    acc = add(&acc, &right)?;
                }
                acc
            }
            Ex::Concat(items) => {
                let mut buf = String::new();
                for item in items {
                    let v = self.eval(item)?;
                    let before = buf.len();
                    write_value(&mut buf, &v)?;
                    spend(buf.len() - before)?;
                }
                V::Str(S::O(Rc::from(buf)))
            }
            Ex::Arith(op, l, r) => {
                let (Some(a), Some(b)) = (self.eval(l)?.num(), self.eval(r)?.num()) else {
                    return Err(Bail);
                };
                V::Int(arith(*op, a, b)?)
            }
            Ex::Cmp(first, ops) => {
                let mut left = self.eval(first)?;
                for (op, e) in ops {
                    let right = self.eval(e)?;
                    let ok = match op {
                        Cmp::Eq => equal(&left, &right)?,
                        Cmp::Ne => !equal(&left, &right)?,
                        Cmp::Lt => order(&left, &right)?.is_lt(),
                        Cmp::Lte => order(&left, &right)?.is_le(),
                        Cmp::Gt => order(&left, &right)?.is_gt(),
                        Cmp::Gte => order(&left, &right)?.is_ge(),
                        Cmp::In => contains(&left, &right)?,
                        Cmp::NotIn => !contains(&left, &right)?,
                    };
                    if !ok {
                        return Ok(V::Bool(false));
                    }
                    left = right;
                }
                V::Bool(true)
            }
            Ex::And(l, r) => {
                let left = self.eval(l)?;
                if left.truthy()? { self.eval(r)? } else { left }
            }
            Ex::Or(l, r) => {
                let left = self.eval(l)?;
                if left.truthy()? { left } else { self.eval(r)? }
            }
            Ex::IfElse(test, yes, no) => {
                if self.eval_bool(test)? {
                    self.eval(yes)?
                } else {
                    match no {
                        Some(no) => self.eval(no)?,
                        None => V::Undef,
                    }
                }
            }
            Ex::Filter(kind, target, args) => {
                let v = self.eval(target)?;
                self.filter(*kind, v, args)?
            }
            Ex::Test(kind @ (TestKind::Defined | TestKind::Undefined), target) if matches!(&**target, Ex::Var(id) if self.bound(*id).is_none() && self.is_global(*id)) =>
            {
                // an unset global (a function) is defined
                V::Bool(matches!(kind, TestKind::Defined))
            }
            Ex::Test(kind, target) => {
                let v = self.eval(target)?;
                V::Bool(match kind {
                    TestKind::Defined => !matches!(v, V::Undef),
                    TestKind::Undefined => matches!(v, V::Undef),
                    TestKind::None => matches!(v, V::None),
                    TestKind::String => matches!(v, V::Str(_)),
                    TestKind::Boolean => matches!(v, V::Bool(_)),
                    TestKind::True => matches!(v, V::Bool(true)),
                    TestKind::False => matches!(v, V::Bool(false)),
                    TestKind::Number => matches!(v, V::Int(_) | V::Bool(_)),
                    TestKind::Integer => matches!(v, V::Int(_)),
                    TestKind::Mapping => match v {
                        V::Msg(_) | V::Dict(_) => true,
                        V::Ns(_) | V::Poison => return Err(Bail),
                        _ => false,
                    },
                    TestKind::Sequence => match v {
                        V::Msgs(_) | V::Msg(_) | V::Dict(_) | V::Str(_) | V::List(_) | V::Undef => {
                            true
                        }
                        V::None | V::Bool(_) | V::Int(_) => false,
                        _ => return Err(Bail),
                    },
                    TestKind::Iterable => match v {
                        V::Msgs(_) | V::Msg(_) | V::Dict(_) | V::Str(_) | V::List(_) | V::Undef => {
                            true
                        }
                        V::None | V::Bool(_) | V::Int(_) => false,
                        _ => return Err(Bail),
                    },
                })
            }
            Ex::Method(target, kind, args) => {
                let v = self.eval(target)?;
                self.method(v, *kind, args)?
            }
            Ex::Namespace(kwargs) => {
                let mut attrs = Vec::with_capacity(kwargs.len());
                for (k, e) in kwargs {
                    let v = self.eval(e)?;
                    match attrs.iter_mut().find(|(name, _)| *name == k.as_str()) {
                        Some(slot) => *slot = (k.as_str(), v),
                        None => attrs.push((k.as_str(), v)),
                    }
                }
                self.namespaces.push(attrs);
                V::Ns(self.namespaces.len() - 1)
            }
            Ex::List(items) => {
                let mut vals = Vec::with_capacity(items.len());
                for item in items {
                    vals.push(self.eval(item)?);
                }
                V::List(Rc::new(vals))
            }
            Ex::Dict(items) => {
                let mut pairs: Vec<(&'a str, V<'a>)> = Vec::with_capacity(items.len());
                for (k, e) in items {
                    let v = self.eval(e)?;
                    // a repeated key keeps its first place and takes the last value
                    match pairs.iter_mut().find(|(name, _)| *name == k.as_str()) {
                        Some(slot) => slot.1 = v,
                        None => pairs.push((k.as_str(), v)),
                    }
                }
                V::Dict(Rc::new(pairs))
            }
            Ex::Range(id, args) => {
                if self.bound(*id).is_some() {
                    // a variable named range shadows the function
                    return Err(Bail);
                }
                let mut n = [0i64; 3];
                for (slot, e) in n.iter_mut().zip(args) {
                    *slot = match self.eval(e)? {
                        V::Int(i) => i,
                        V::Bool(b) => i64::from(b),
                        _ => return Err(Bail),
                    };
                }
                let (first, end, step) = match args.len() {
                    1 => (0, n[0], 1),
                    2 => (n[0], n[1], 1),
                    _ => (n[0], n[1], n[2]),
                };
                V::List(Rc::new(py_range(first, end, step)?))
            }
            Ex::Capture(body) => {
                let start = self.out.len();
                let flow = self.exec(body)?;
                self.captured(start, flow)?
            }
            Ex::StrftimeNow(id, format) => {
                if self.bound(*id).is_some() {
                    // a variable named strftime_now shadows the function
                    return Err(Bail);
                }
                let V::Str(format) = self.eval(format)? else {
                    return Err(Bail);
                };
                let text = crate::chat::strftime_now_text(format.as_str()).ok_or(Bail)?;
                V::Str(S::O(Rc::from(text)))
            }
            Ex::SelectAttr(select, target, attr, test, arg) => {
                let items = iterate(&self.eval(target)?)?;
                let arg = match arg {
                    Some(e) => Some(self.eval(e)?),
                    None => None,
                };
                let mut kept = Vec::with_capacity(items.len());
                for item in items {
                    // Jinja2 looks the attribute up as an item first (`item[attr]`)
                    let value = member(&item, attr)?;
                    let pass = match test {
                        None => value.truthy()?,
                        Some(SelectTest::EqualTo) => equal(&value, arg.as_ref().ok_or(Bail)?)?,
                        Some(SelectTest::Defined) => !matches!(value, V::Undef),
                        Some(SelectTest::Undefined) => matches!(value, V::Undef),
                        Some(SelectTest::None) => matches!(value, V::None),
                        Some(SelectTest::String) => matches!(value, V::Str(_)),
                    };
                    if pass == *select {
                        kept.push(item);
                    }
                }
                Generator::value(kept)
            }
            Ex::Unsupported => return Err(Bail),
        })
    }

    #[allow(clippy::too_many_lines)]
    fn filter(&mut self, kind: FilterKind, v: V<'a>, args: &'a [Ex]) -> R<V<'a>> {
        Ok(match kind {
            FilterKind::List => V::List(Rc::new(iterate(&v)?)),
            FilterKind::Join => {
                let sep = match args.first() {
                    None => None,
                    Some(e) => Some(self.eval(e)?),
                };
                let sep = match &sep {
                    None => "",
                    Some(V::Str(s)) => s.as_str(),
                    Some(_) => return Err(Bail),
                };
                let V::List(items) = v else {
                    return Err(Bail);
                };
                let mut buf = String::new();
                for (i, item) in items.iter().enumerate() {
                    let before = buf.len();
                    spend(sep.len() + 64)?;
                    if i > 0 {
                        buf.push_str(sep);
                    }
                    write_value(&mut buf, item)?;
                    spend(buf.len() - before)?;
                }
                V::Str(S::O(Rc::from(buf)))
            }
            // a list reversed is Python's reverse iterator in Jinja2: iterable once, with no
            // length or items by index (a generator here)
            FilterKind::Reverse => match v {
                V::Msgs(m) => Generator::value(m.iter().rev().map(V::Msg).collect()),
                V::List(l) => Generator::value(l.iter().rev().cloned().collect()),
                V::Str(s) => V::Str(S::O(Rc::from(s.as_str().chars().rev().collect::<String>()))),
                _ => return Err(Bail),
            },
            FilterKind::Trim => {
                if !args.is_empty() {
                    return Err(Bail);
                }
                match v {
                    V::Str(S::B(s)) => V::Str(S::B(strip_py(s))),
                    V::Str(S::O(s)) => V::Str(S::O(Rc::from(strip_py(&s)))),
                    _ => return Err(Bail),
                }
            }
            FilterKind::Length => match v {
                V::Str(s) => V::Int(i64::try_from(s.as_str().chars().count()).map_err(|_| Bail)?),
                V::Msgs(m) => V::Int(i64::try_from(m.len()).map_err(|_| Bail)?),
                V::Msg(m) => V::Int(i64::try_from(m.fields.len()).map_err(|_| Bail)?),
                V::Dict(d) => V::Int(i64::try_from(d.len()).map_err(|_| Bail)?),
                V::List(l) => V::Int(i64::try_from(l.len()).map_err(|_| Bail)?),
                _ => return Err(Bail),
            },
            FilterKind::String => match v {
                V::Str(_) => v,
                other => {
                    let mut buf = String::new();
                    write_value(&mut buf, &other)?;
                    V::Str(S::O(Rc::from(buf)))
                }
            },
            FilterKind::Lower | FilterKind::Upper => match v.text() {
                // Python's case mapping differs from Rust's outside ASCII in places
                Some(s) if s.is_ascii() => {
                    let mapped = if matches!(kind, FilterKind::Lower) {
                        s.to_ascii_lowercase()
                    } else {
                        s.to_ascii_uppercase()
                    };
                    V::Str(S::O(Rc::from(mapped)))
                }
                _ => return Err(Bail),
            },
            FilterKind::ToJson | FilterKind::ToJsonAscii => {
                let ascii = matches!(kind, FilterKind::ToJsonAscii);
                let json =
                    crate::chat::tojson_default(&json_value(&v, 0)?, ascii).map_err(|_| Bail)?;
                V::Str(S::O(Rc::from(json)))
            }
            FilterKind::Int => match v {
                V::Int(i) => V::Int(i),
                V::Bool(b) => V::Int(i64::from(b)),
                // a string Python's int() reads (the full engine's reading); one it would not
                // (a float, the default) is left to the full engine
                V::Str(s) => V::Int(crate::chat::py_int_str(s.as_str(), 10).ok_or(Bail)?),
                _ => return Err(Bail),
            },
            FilterKind::Capitalize => recase(&v, py_capitalize)?,
            FilterKind::Title => recase(&v, jinja_title)?,
            FilterKind::Default => {
                // `default(value, boolean)`: with a true `boolean`, a false value is replaced too
                let replace = match (&v, args.get(1)) {
                    (V::Poison, _) => return Err(Bail),
                    (V::Undef, _) => true,
                    (_, Some(boolean)) => self.eval_bool(boolean)? && !v.truthy()?,
                    (_, None) => false,
                };
                if !replace {
                    v
                } else if let Some(e) = args.first() {
                    self.eval(e)?
                } else {
                    V::Str(S::B(""))
                }
            }
            FilterKind::First | FilterKind::Last => match v {
                V::Msgs(m) => {
                    let item = if matches!(kind, FilterKind::First) {
                        m.first()
                    } else {
                        m.last()
                    };
                    item.map_or(V::Undef, V::Msg)
                }
                V::List(l) => {
                    let item = if matches!(kind, FilterKind::First) {
                        l.first()
                    } else {
                        l.last()
                    };
                    item.cloned().unwrap_or(V::Undef)
                }
                V::Gen(g) if matches!(kind, FilterKind::First) => {
                    g.take()?.first().cloned().unwrap_or(V::Undef)
                }
                _ => return Err(Bail),
            },
        })
    }

    fn method(&mut self, v: V<'a>, kind: MethodKind, args: &'a [Ex]) -> R<V<'a>> {
        match kind {
            MethodKind::Get => {
                let Some(d) = DictRef::of(&v) else {
                    return Err(Bail);
                };
                let V::Str(key) = self.eval(&args[0])? else {
                    return Err(Bail);
                };
                match d.get(key.as_str()) {
                    Some(found) => Ok(found),
                    None => match args.get(1) {
                        Some(e) => self.eval(e),
                        None => Ok(V::None),
                    },
                }
            }
            MethodKind::Strip | MethodKind::LStrip | MethodKind::RStrip => {
                let chars = match args.first() {
                    None => None,
                    Some(e) => match self.eval(e)? {
                        V::None => None,
                        V::Str(c) => Some(c),
                        _ => return Err(Bail),
                    },
                };
                let Some(text) = v.text() else {
                    return Err(Bail);
                };
                let set = chars.as_ref().map(S::as_str);
                let strip = |c: char| set.map_or_else(|| py_is_space(c), |set| set.contains(c));
                let t = match kind {
                    MethodKind::Strip => text.trim_matches(strip),
                    MethodKind::LStrip => text.trim_start_matches(strip),
                    _ => text.trim_end_matches(strip),
                };
                let range = range_of(text, t);
                Ok(pieces(&v, &[range])?.swap_remove(0))
            }
            MethodKind::Split => {
                let sep = match args.first() {
                    None => None,
                    Some(e) => match self.eval(e)? {
                        V::None => None,
                        // an empty separator is a ValueError in Python
                        V::Str(c) if !c.as_str().is_empty() => Some(c),
                        _ => return Err(Bail),
                    },
                };
                let Some(text) = v.text() else {
                    return Err(Bail);
                };
                let ranges: Vec<(usize, usize)> = match &sep {
                    Some(sep) => text
                        .split(sep.as_str())
                        .map(|p| range_of(text, p))
                        .collect(),
                    // runs of whitespace, no empty strings
                    None => text
                        .split(py_is_space)
                        .filter(|p| !p.is_empty())
                        .map(|p| range_of(text, p))
                        .collect(),
                };
                Ok(V::List(Rc::new(pieces(&v, &ranges)?)))
            }
            MethodKind::Replace => {
                let (Some(text), V::Str(old), V::Str(new)) =
                    (v.text(), self.eval(&args[0])?, self.eval(&args[1])?)
                else {
                    return Err(Bail);
                };
                Ok(V::Str(S::O(Rc::from(replaced(
                    text,
                    old.as_str(),
                    new.as_str(),
                )?))))
            }
            MethodKind::Upper | MethodKind::Lower => self.filter(
                if matches!(kind, MethodKind::Upper) {
                    FilterKind::Upper
                } else {
                    FilterKind::Lower
                },
                v,
                &[],
            ),
            MethodKind::Capitalize => recase(&v, py_capitalize),
            MethodKind::Title => recase(&v, py_title),
            MethodKind::StartsWith | MethodKind::EndsWith => {
                let (Some(s), V::Str(arg)) = (v.text(), self.eval(&args[0])?) else {
                    return Err(Bail);
                };
                Ok(V::Bool(if matches!(kind, MethodKind::StartsWith) {
                    s.starts_with(arg.as_str())
                } else {
                    s.ends_with(arg.as_str())
                }))
            }
        }
    }
}

/// An expression whose value is always a bool.
fn is_boolish(e: &Ex) -> bool {
    matches!(e, Ex::Cmp(..) | Ex::Not(_) | Ex::Test(..))
}

/// Whether [`Machine::quick_str`] can give `e`'s value (the forms it reads; it may still not).
fn may_be_quick_str(e: &Ex) -> bool {
    match e {
        Ex::Const(c) => matches!(c, Const::Str(_)),
        Ex::Var(_) | Ex::Field(..) | Ex::Attr(..) => true,
        Ex::Filter(FilterKind::Trim, _, args) | Ex::Method(_, MethodKind::Strip, args) => {
            args.is_empty()
        }
        _ => false,
    }
}

/// Whether [`Machine::quick_int`] can give `e`'s value (the forms it reads; it may still not).
fn may_be_quick_int(e: &Ex) -> bool {
    match e {
        Ex::Const(c) => matches!(c, Const::Int(_)),
        Ex::Attr(..) | Ex::Arith(..) => true,
        _ => false,
    }
}

fn add<'a>(left: &V<'a>, right: &V<'a>) -> R<V<'a>> {
    if let (Some(x), Some(y)) = (left.num(), right.num()) {
        return Ok(V::Int(x.checked_add(y).ok_or(Bail)?));
    }
    // lists (the conversation is one: a tuple conversation never takes the fast path)
    if let (Some(x), Some(y)) = (list_items(left), list_items(right)) {
        spend((x.len() + y.len()) * 64)?;
        let mut items = x;
        items.extend(y);
        return Ok(V::List(Rc::new(items)));
    }
    match (left.text(), right.text()) {
        (Some(x), Some(y)) => {
            spend(x.len() + y.len())?;
            let mut joined = String::with_capacity(x.len() + y.len());
            joined.push_str(x);
            joined.push_str(y);
            Ok(V::Str(S::O(Rc::from(joined))))
        }
        _ => Err(Bail),
    }
}

/// The items of a list value (the messages, or a list the template made).
fn list_items<'a>(v: &V<'a>) -> Option<Vec<V<'a>>> {
    match v {
        V::Msgs(m) => Some(m.iter().map(V::Msg).collect()),
        V::List(l) => Some(l.as_ref().clone()),
        _ => None,
    }
}

/// What iterating a value gives (a list's items, a generator's once, a string's characters);
/// `Bail` for the rest.
fn iterate<'a>(v: &V<'a>) -> R<Vec<V<'a>>> {
    if let Some(items) = list_items(v) {
        return Ok(items);
    }
    match v {
        V::Gen(g) => Ok(g.take()?.to_vec()),
        V::Str(s) => Ok(chars(s)),
        _ => Err(Bail),
    }
}

fn arith(op: Arith, a: i64, b: i64) -> R<i64> {
    match op {
        Arith::Sub => a.checked_sub(b).ok_or(Bail),
        Arith::Mul => a.checked_mul(b).ok_or(Bail),
        Arith::FloorDiv => {
            if b == 0 {
                return Err(Bail);
            }
            let q = a.checked_div(b).ok_or(Bail)?;
            // Python floors toward negative infinity
            Ok(if (a % b != 0) && ((a < 0) != (b < 0)) {
                q - 1
            } else {
                q
            })
        }
        Arith::Rem => {
            if b == 0 {
                return Err(Bail);
            }
            let r = a.checked_rem(b).ok_or(Bail)?;
            Ok(if r != 0 && ((r < 0) != (b < 0)) {
                r + b
            } else {
                r
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Context, Message, Scalar};
    use crate::chat::{ChatTemplate, RenderOptions, plain_map};

    const VARS: [(&str, Scalar<'static>); 3] = [
        ("bos_token", Scalar::Str("<s>")),
        ("eos_token", Scalar::Str("</s>")),
        ("tools", Scalar::None),
    ];

    /// The fast path's output (`None`: it gave up) and the full engine's (`Err`: it failed).
    fn both(
        src: &str,
        messages: &[Message<'_>],
        agp: bool,
    ) -> (Option<String>, Result<String, String>) {
        let template = ChatTemplate::compile(src).unwrap();
        let ctx = Context {
            messages,
            variables: &VARS,
            add_generation_prompt: agp,
        };
        let mut out = String::new();
        let fast = template.try_fast(&ctx, &mut out).then_some(out);
        let vars: Vec<_> = VARS
            .iter()
            .map(|(k, v)| (minijinja::Value::from(*k), crate::chat::scalar_value(*v)))
            .collect();
        let full = template
            .without_fast_path()
            .render_conversation(
                messages.iter().map(plain_map).collect(),
                &vars,
                &RenderOptions {
                    add_generation_prompt: agp,
                    continue_final: None,
                },
            )
            .map_err(|e| e.to_string());
        (fast, full)
    }

    /// The fast path renders `src` and agrees with the full engine.
    fn fast_equal(src: &str, messages: &[Message<'_>], agp: bool) -> String {
        let (fast, full) = both(src, messages, agp);
        assert!(fast.is_some(), "the fast path gave up on {src:?}");
        let fast = fast.unwrap_or_default();
        assert_eq!(Ok(fast.clone()), full, "{src:?}");
        fast
    }

    /// The fast path gives up on `src` (the full engine decides).
    fn gives_up(src: &str, messages: &[Message<'_>]) {
        let (fast, _) = both(src, messages, false);
        assert_eq!(fast, None, "{src:?}");
    }

    const SYS: [(&str, Scalar<'static>); 2] = [
        ("role", Scalar::Str("system")),
        ("content", Scalar::Str("  Be brief.\n")),
    ];
    const USER: [(&str, Scalar<'static>); 2] = [
        ("role", Scalar::Str("user")),
        ("content", Scalar::Str("Hi ☃")),
    ];
    const BOT: [(&str, Scalar<'static>); 3] = [
        ("role", Scalar::Str("assistant")),
        ("content", Scalar::Str("Hello.")),
        ("turn", Scalar::Int(2)),
    ];

    fn chat() -> Vec<Message<'static>> {
        vec![
            Message { fields: &SYS },
            Message { fields: &USER },
            Message { fields: &BOT },
            Message { fields: &USER },
        ]
    }

    #[test]
    fn chatml_and_llama3_shapes_take_the_fast_path() {
        let chatml = "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- set turns = messages[1:] %}{%- else %}{%- set turns = messages %}{%- endif %}\n{%- for message in turns %}\n    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}\n{%- endfor %}\n{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
        let out = fast_equal(chatml, &chat(), true);
        assert!(
            out.starts_with("<|im_start|>system\n  Be brief.\n<|im_end|>\n<|im_start|>user\nHi ☃")
        );
        assert!(out.ends_with("<|im_start|>assistant\n"));
        let llama = "{{- bos_token }}{%- for message in messages %}{%- if loop.index0 == 0 and message.role == 'system' %}{%- set c = message['content'] | trim %}{%- else %}{%- set c = message.content | trim %}{%- endif %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + c + '<|eot_id|>' }}{%- endfor %}";
        let out = fast_equal(llama, &chat(), false);
        assert!(out.contains("system<|end_header_id|>\n\nBe brief.<|eot_id|>"));
    }

    #[test]
    fn scalars_print_and_compare_as_in_python() {
        let src = "{% for m in messages %}{{ loop.index }}/{{ loop.length }} {{ m.turn }} {{ m.turn is defined }} {{ m.turn == 2 }} {{ m.missing }}|{{ m.content | length }} {{ not m.turn }} {{ m.turn or 'x' }} {{ m.turn and 'y' }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 'a' ~ 1 ~ none }}\n{% endfor %}";
        let out = fast_equal(src, &chat(), false);
        assert!(
            out.contains("3/4 2 True True |6 False 2 y -4 2 a1None"),
            "{out}"
        );
        assert!(
            out.contains("2/4  False False |4 True x  -4 2 a1None"),
            "{out}"
        );
    }

    #[test]
    fn loop_scope_namespace_filters_and_methods() {
        let src = "{% set ns = namespace(n=0, last='') %}{% set x = 'outer' %}{% for m in messages if m.role != 'system' %}{% set x = m.role %}{% set ns.n = ns.n + 1 %}{% set ns.last = m.content.strip() %}{% if loop.last %}[{{ x }}]{% endif %}{% if m.content.startswith('Hi') %}h{% continue %}{% endif %}{% if m.role == 'assistant' %}{% break %}{% endif %}{% endfor %}{{ x }} {{ ns.n }} {{ ns.last }} {{ messages | length }} {{ (messages | first).role }} {{ (messages | last).role | upper }} {{ messages[-1].get('nope', 'dflt') }} {{ messages[0].get('role') }} {{ 'user' in messages[1] }} {{ 'Hi' in messages[1].content }} {{ messages[5] is defined }} {{ 'b' if messages[1:3] else 'c' }}{{ messages[-2:] | length }}";
        let out = fast_equal(src, &chat(), false);
        assert_eq!(
            out,
            "houter 2 Hello. 4 system USER dflt system False True False b2"
        );
        // a name the loop body assigns, read before its assignment in the iteration
        gives_up(
            "{% set x = 1 %}{% for m in messages %}{{ x }}{% set x = 2 %}{% endfor %}",
            &chat(),
        );
    }

    #[test]
    fn python_string_methods_slices_and_list_filters() {
        let src = "{% for m in messages[::-1] %}{{ m.role }},{% endfor %}|{% for m in messages[3:0:-2] %}{{ m.role }},{% endfor %}|{{ (messages | reverse | first).role }}|{{ ' a  b\tc '.split() | join('+') }}|{{ 'x</think>\n\ny'.split('</think>')[-1].lstrip('\n') }}|{{ messages[0].content.rstrip('\n').strip() }}|{{ 'aXbX'.replace('X', '-') }}|{{ [1, true, none, 'z'] | join }}|{{ 'abc' | reverse }}|{{ messages[1].content.split('i')[0].upper() }}|{{ '..a..'.strip('.') }}";
        let out = fast_equal(src, &chat(), false);
        assert_eq!(
            out,
            "user,assistant,user,system,|user,user,|user|a+b+c|y|Be brief.|a-b-|1TrueNonez|cba|H|a"
        );
        gives_up("{{ 'a'.split('') }}", &chat());
        gives_up("{{ 'a,b'.split(',', 1) }}", &chat());
        gives_up("{{ messages[::0] }}", &chat());
    }

    #[test]
    fn selectattr_generators_dict_equality_string_indexing_and_strftime() {
        let src = "{% set users = messages | selectattr('role', 'equalto', 'user') | list %}{{ users | length }} {{ messages[1] == users[-1] }} {{ messages[1] == messages[2] }} {% for m in messages | rejectattr('turn') %}{{ m.role[0] }}{% endfor %} {{ (messages | selectattr('turn', 'defined') | first).content }} {{ messages[1].content[-1] }}{{ messages[1].content[9] is defined }} {{ strftime_now is defined }} {{ strftime_now('%Y') | length }}";
        let out = fast_equal(src, &chat(), false);
        assert_eq!(out, "2 True False suu Hello. ☃False True 4");
        // a generator is exhausted after one use, and has no length
        gives_up(
            "{% set g = messages | selectattr('role') %}{% for m in g %}{% endfor %}{% for m in g %}{% endfor %}",
            &chat(),
        );
        gives_up("{{ messages | selectattr('role') | length }}", &chat());
        gives_up(
            "{{ 1 if messages | selectattr('role', 'equalto', 'x') }}",
            &chat(),
        );
        // a variable named like the function shadows it
        gives_up(
            "{% set strftime_now = 1 %}{{ strftime_now('%Y') }}",
            &chat(),
        );
    }

    #[test]
    fn unsupported_or_failing_constructs_give_up() {
        for src in [
            "{{ messages | tojson(indent=2) }}",
            "{{ undefined_name | tojson }}",
            "{% macro f(n) %}{{ f(n - 1) if n else 0 }}{% endmacro %}{{ f(1) }}",
            "{% set s = '-' %}{% macro f(x) %}{{ x ~ s }}{% endmacro %}{{ f(1) }}",
            "{% macro f(x, y) %}{{ x }}{% endmacro %}{{ f(1) }}",
            "{% set ns = namespace(a=0) %}{% macro f() %}{% set ns.a = 1 %}{% endmacro %}{{ f() }}",
            "{{ raise_exception('no') }}",
            "{{ messages[0].items }}",
            "{{ messages[0].content + 1 }}",
            "{{ messages[0] }}",
            "{{ 1 / 2 }}",
            "{{ 'Ä'.lower() }}",
            "{% for x in none %}{% endfor %}",
            "{{ messages[0].missing.attr }}",
            "{{ (messages[0].content ~ messages) }}",
        ] {
            gives_up(src, &chat());
        }
        // the full engine's error stands (raise_exception's message)
        let (fast, full) = both("{{ raise_exception('bad role') }}", &chat(), false);
        assert_eq!(fast, None);
        assert!(full.unwrap_err().contains("bad role"));
    }

    /// Each template renders on the fast path, equal to the full engine and to `want`.
    fn renders(cases: &[(&str, &str)]) {
        for (src, want) in cases {
            assert_eq!(fast_equal(src, &chat(), false), *want, "{src:?}");
        }
    }

    #[test]
    fn macros_render_on_the_fast_path() {
        renders(&[
            (
                "{%- macro item(m, sep=': ') -%}{{ m.role ~ sep ~ (m.content | trim) }}{%- endmacro -%}\
                {%- macro all(ms) -%}{% set ns = namespace(n=0) %}{% for m in ms %}{% set ns.n = ns.n + 1 %}[{{ item(m, sep='=') }}]{% endfor %}#{{ ns.n }}{%- endmacro -%}\
                {%- macro head() -%}{% if title is not defined %}{% set title = bos_token %}{% endif %}{{ title }}{%- endmacro -%}\
                {{ head() }}{{ item(messages[0]) }}|{{ all(messages[1:]) }}|{{ loop_free }}",
                "<s>system: Be brief.|[user=Hi ☃][assistant=Hello.][user=Hi ☃]#3|",
            ),
            (
                "{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '^' }}<{{ loop.nextitem.turn if loop.nextitem is defined else '$' }};{% endfor %}",
                "^<;system<2;user<;assistant<$;",
            ),
        ]);
    }

    #[test]
    fn ranges_blocks_and_case_methods() {
        renders(&[
            (
                "{% for i in range(messages | length - 1, -1, -2) %}{{ i }}{% endfor %}|{{ range(3, 10, 4) | join(',') }}|{% set b %}{% for m in messages %}{{ m.role | capitalize }}{% endfor %}{% endset %}{{ b }}{{ b | length }}|{{ 'x-ray o\\'k' | title }}/{{ \"x-ray o'k\".title() }}",
                "31|3,7|SystemUserAssistantUser23|X-Ray O'k/X-Ray O'K",
            ),
            (
                "{{ messages[1] | tojson }}|{{ messages[2:] | tojson }}|{{ [1, none, true, 'a\"b'] | tojson }}|{{ messages[0].content | tojson }}",
                "{\"role\": \"user\", \"content\": \"Hi ☃\"}|[{\"role\": \"assistant\", \"content\": \"Hello.\", \"turn\": 2}, {\"role\": \"user\", \"content\": \"Hi ☃\"}]|[1, null, true, \"a\\\"b\"]|\"  Be brief.\\n\"",
            ),
            (
                "{% set tag = {'system': 'S', 'user': 'U', 'assistant': 'A', 'system': 's'} %}{% for m in messages %}{{ tag[m.role] }}{{ tag.get(m.role ~ 'x', '-') }}{% endfor %}|{{ tag | length }}{{ 'user' in tag }}{{ {'role': 'user', 'content': 'Hi ☃'} == messages[1] }}",
                "s-U-A-U-|3TrueTrue",
            ),
            (
                "{% for c in messages[1].content %}[{{ c['type'] }}{{ c.text }}{{ c }}]{% endfor %}{{ messages[1].content | selectattr('type') | list | length }}",
                "[H][i][ ][☃]0",
            ),
            (
                "{% set s = messages[1].content %}{{ s[:2] }}|{{ s[-1:] }}|{{ s[::-1] }}|{{ s[1::2] }}|[{{ s[3:1] }}]",
                "Hi|☃|☃ iH|i☃|[]",
            ),
        ]);
        gives_up("{% for c in 'ab' %}{{ c.upper }}{% endfor %}", &chat());
        gives_up("{{ {'a': 1} }}", &chat());
        gives_up("{% set d = {'keys': 1} %}{{ d.keys }}", &chat());
        gives_up("{{ range(0, 5, 0) | length }}", &chat());
        gives_up("{{ range(200000) | length }}", &chat());
        gives_up("{{ 'é' | capitalize }}", &chat());
    }

    #[test]
    fn only_the_reached_part_must_be_supported() {
        let src = "{% if tools %}{{ tools | tojson }}{% macro m() %}{% endmacro %}{% else %}{{ messages[1].content }}{% endif %}";
        assert_eq!(fast_equal(src, &chat(), false), "Hi ☃");
    }
}
