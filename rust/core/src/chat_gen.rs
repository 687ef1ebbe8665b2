//! Python iterators in the full chat-template engine.
//!
//! In Jinja2 several filters give a Python *generator* (`map`, `select`, `reject`, `selectattr`,
//! `rejectattr`, `batch`, `slice`, `unique`), and `reverse` gives a reverse *iterator* of a list
//! or dict. minijinja gives lists for all of them, which differs from Jinja2 (and so from
//! transformers) wherever a template uses such a value as more than a one-pass sequence:
//!
//! * it is produced once: a second loop over it, or a `list`/`join`/`first` after a first one,
//!   finds it exhausted (`first` takes one item and leaves the rest);
//! * it is always true, even when it yields nothing;
//! * it has no `len()` (`length`, `count` fail), cannot be reversed by `last`, indexed (`x[0]`
//!   is undefined) or JSON-encoded (`tojson` fails: `Object of type generator is not JSON
//!   serializable`, as with a `tools | map(attribute='function') | tojson` template);
//! * it equals no list.
//!
//! [`Iter`] is such a value: the items a filter computed, handed out once. The filters are
//! minijinja's own, their result wrapped; only the laziness differs (the items are computed
//! when the filter runs, where Jinja2 computes each when it is asked for: a filter that would
//! fail on a later item fails here even when only the first items are consumed).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use minijinja::value::ValueKind;
use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr, Rest, ValueOrKwargs};
use minijinja::{Environment, Error, ErrorKind, State, Value};

/// A Python iterator over items computed beforehand: each item is handed out once.
#[derive(Debug)]
pub struct Iter {
    /// Python's type name (`generator`, `list_reverseiterator`, ...)
    type_name: &'static str,
    /// what Python prints for it, without the address (`<generator object sync_do_map`)
    label: &'static str,
    items: Vec<Value>,
    /// the next item to hand out
    next: AtomicUsize,
}

impl Iter {
    fn value(type_name: &'static str, label: &'static str, items: Vec<Value>) -> Value {
        Value::from_object(Iter {
            type_name,
            label,
            items,
            next: AtomicUsize::new(0),
        })
    }

    /// The next item, if any (and the iterator moves past it).
    fn take(&self) -> Option<Value> {
        let at = self
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |i| {
                (i < self.items.len()).then_some(i + 1)
            })
            .ok()?;
        self.items.get(at).cloned()
    }

    /// The items `value` has left, when it is one of these iterators (which is then
    /// exhausted).
    pub fn drain(value: &Value) -> Option<Vec<Value>> {
        let it = value.downcast_object_ref::<Iter>()?;
        Some(std::iter::from_fn(|| it.take()).collect())
    }

    /// Python's type name of `value` when it is one of these iterators.
    pub fn type_name_of(value: &Value) -> Option<&'static str> {
        value.downcast_object_ref::<Iter>().map(|it| it.type_name)
    }

    /// What Python's `str()` gives, with a fixed address: `<generator object sync_do_map at
    /// 0x7f0000000000>` (the real one differs from run to run).
    pub fn py_str_of(value: &Value) -> Option<String> {
        let it = value.downcast_object_ref::<Iter>()?;
        Some(format!("{} at 0x7f0000000000>", it.label))
    }
}

impl Object for Iter {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let this = Arc::clone(self);
        Enumerator::Iter(Box::new(std::iter::from_fn(move || this.take())))
    }

    /// Not subscriptable: every item or attribute is undefined (minijinja would otherwise
    /// iterate, consuming the items before the index).
    fn get_value(self: &Arc<Self>, _key: &Value) -> Option<Value> {
        Some(Value::UNDEFINED)
    }

    /// No `len()`.
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        None
    }

    /// A Python iterator is always true.
    fn is_true(self: &Arc<Self>) -> bool {
        true
    }
}

fn generator(label: &'static str, items: Vec<Value>) -> Value {
    Iter::value("generator", label, items)
}

fn items_of(value: &Value) -> Result<Vec<Value>, Error> {
    Ok(value.try_iter()?.collect())
}

fn not_reversible(value: &Value) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "'{}' object is not reversible",
            Iter::type_name_of(value).unwrap_or("object")
        ),
    )
}

fn no_len(value: &Value) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "object of type '{}' has no len()",
            Iter::type_name_of(value).unwrap_or("object")
        ),
    )
}

/// Replaces the filters that give iterators in Jinja2 by ones giving an [`Iter`], and those
/// that treat iterators differently from lists (`reverse`, `last`, `length`, `count`).
pub fn add_filters(env: &mut Environment<'_>) {
    add_generators(env);
    add_iterator_aware(env);
}

type Cow<'a> = std::borrow::Cow<'a, str>;
/// `select` / `reject`.
type TestFilter = for<'s, 'e, 'x, 't> fn(
    &'s mut State<'e, 'x>,
    Value,
    Option<Cow<'t>>,
    Rest<ValueOrKwargs>,
) -> Result<Vec<Value>, Error>;
/// `selectattr` / `rejectattr`.
type AttrFilter = for<'s, 'e, 'x, 'a, 't> fn(
    &'s mut State<'e, 'x>,
    Value,
    Cow<'a>,
    Option<Cow<'t>>,
    Rest<ValueOrKwargs>,
) -> Result<Vec<Value>, Error>;
/// `batch` / `slice`.
type GroupFilter =
    for<'s, 'e, 'x> fn(&'s State<'e, 'x>, Value, usize, Option<Value>) -> Result<Value, Error>;

/// The filters that give a generator in Jinja2 (Python's repr names the generator function).
#[allow(clippy::needless_pass_by_value)] // minijinja passes filter arguments by value
fn add_generators(env: &mut Environment<'_>) {
    use minijinja::filters;
    const SELECT: &str = "<generator object select_or_reject";
    env.add_filter(
        "map",
        |state: &mut State, value: Value, args: Rest<ValueOrKwargs>| {
            Ok::<_, Error>(generator(
                "<generator object sync_do_map",
                filters::map(state, value, args)?,
            ))
        },
    );
    for (name, f) in [
        ("select", filters::select as TestFilter),
        ("reject", filters::reject),
    ] {
        env.add_filter(
            name,
            move |state: &mut State, value: Value, test: Option<Cow<'_>>, args| {
                Ok::<_, Error>(generator(SELECT, f(state, value, test, args)?))
            },
        );
    }
    for (name, f) in [
        ("selectattr", filters::selectattr as AttrFilter),
        ("rejectattr", filters::rejectattr),
    ] {
        env.add_filter(
            name,
            move |state: &mut State, value: Value, attr: Cow<'_>, test: Option<Cow<'_>>, args| {
                Ok::<_, Error>(generator(SELECT, f(state, value, attr, test, args)?))
            },
        );
    }
    for (name, label, f) in [
        (
            "batch",
            "<generator object do_batch",
            filters::batch as GroupFilter,
        ),
        ("slice", "<generator object do_slice", filters::slice),
    ] {
        env.add_filter(
            name,
            move |state: &State, value: Value, count: usize, fill: Option<Value>| {
                let out = f(state, value, count, fill)?;
                Ok::<_, Error>(generator(label, items_of(&out)?))
            },
        );
    }
    env.add_filter("unique", |state: &State, value: Value, kwargs: Kwargs| {
        let out = filters::unique(state, value, kwargs)?;
        Ok::<_, Error>(generator("<generator object do_unique", items_of(&out)?))
    });
}

/// `reverse`, which gives an iterator, and the filters that refuse one.
fn add_iterator_aware(env: &mut Environment<'_>) {
    use minijinja::filters;
    // Jinja2: a string reversed; a list or dict gives Python's reverse iterator over its items
    // or keys; anything else (an iterator) becomes a list first, reversed
    env.add_filter("reverse", |value: Value| {
        let iterator = |type_name, label, value: &Value| -> Result<Value, Error> {
            let mut items = items_of(value)?;
            items.reverse();
            Ok(Iter::value(type_name, label, items))
        };
        match value.kind() {
            // (a slice of a list, or a `range`, is a lazy iterable here, a list or a range in
            // Jinja2: reversible, into an iterator)
            ValueKind::Seq if !value.is_tuple() => iterator(
                "list_reverseiterator",
                "<list_reverseiterator object",
                &value,
            ),
            ValueKind::Iterable if Iter::type_name_of(&value).is_none() => iterator(
                "list_reverseiterator",
                "<list_reverseiterator object",
                &value,
            ),
            ValueKind::Seq => iterator("reversed", "<reversed object", &value),
            ValueKind::Map => iterator(
                "dict_reversekeyiterator",
                "<dict_reversekeyiterator object",
                &value,
            ),
            _ => filters::reverse(&value),
        }
    });
    env.add_filter("last", |value: Value| {
        if Iter::type_name_of(&value).is_some() {
            return Err(not_reversible(&value));
        }
        filters::last(value)
    });
    for name in ["length", "count"] {
        env.add_filter(name, |value: Value| {
            if Iter::type_name_of(&value).is_some() {
                return Err(no_len(&value));
            }
            filters::length(&value).map(Value::from)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str) -> Result<String, Error> {
        let mut env = Environment::new();
        add_filters(&mut env);
        env.render_str(
            source,
            minijinja::context! { xs => vec![1, 2, 3], d => minijinja::context! { a => 1, b => 2 } },
        )
    }

    #[test]
    fn an_iterator_is_consumed_once() {
        let cases = [
            (
                "{% set g = xs | map('string') %}{{ g | join }}|{{ g | join }}",
                "123|",
            ),
            (
                "{% set g = xs | select('odd') %}{{ g | first }}{{ g | first }}{{ g | list }}",
                "13[]",
            ),
            (
                "{% set g = xs | reverse %}{% for x in g %}{{ x }}{% endfor %}{% for x in g %}{{ x }}{% endfor %}",
                "321",
            ),
            ("{{ 'yes' if xs | select('none') else 'no' }}", "yes"),
            ("{{ (xs | map('string'))[0] is undefined }}", "True"),
            ("{{ xs | select('odd') | reverse | list }}", "[3, 1]"),
            ("{{ d | reverse | list }}", "['b', 'a']"),
            ("{{ 'abc' | reverse }}", "cba"),
            ("{{ xs | batch(2) | list }}", "[[1, 2], [3]]"),
            ("{{ xs | unique | list | length }}", "3"),
        ];
        for (source, want) in cases {
            assert_eq!(render(source).ok().as_deref(), Some(want), "{source}");
        }
    }

    #[test]
    fn an_iterator_has_no_len_and_is_not_reversible() {
        for source in [
            "{{ xs | map('string') | length }}",
            "{{ xs | select | count }}",
            "{{ xs | select | last }}",
            "{{ xs | reverse | last }}",
        ] {
            assert!(render(source).is_err(), "{source}");
        }
        assert_eq!(render("{{ xs | last }}").ok().as_deref(), Some("3"));
        assert_eq!(render("{{ xs | length }}").ok().as_deref(), Some("3"));
    }
}
