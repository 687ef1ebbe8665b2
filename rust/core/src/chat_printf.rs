//! Python's printf-style string formatting (`'%02d' % n`, `'%s-%s' % (a, b)`,
//! `'%(name)s' % mapping`) for the chat templates' full engine: Jinja2 evaluates `%` on a string
//! with Python's `str.__mod__`, and its `format` filter is the same operation. minijinja has no
//! `%` for strings, and its `format` filter differs in places (`%r`, `%d` of a float, `*`
//! widths, the `str()` of its arguments).
//!
//! Conversions: `d i u o x X e E f F g G c r s a %`, with a mapping key, the flags `#0- +`, a
//! width and a precision (either may be `*`), and the ignored length modifiers `h l L`. The
//! errors are Python's, with its messages.

use std::fmt::Write as _;

use minijinja::Error;
use minijinja::value::{Value, ValueKind};

use crate::chat::{
    check_result, checked_width, html_escape, py_error, py_str, py_str_repr,
    py_type_name as type_name,
};

fn type_error(msg: impl std::fmt::Display) -> Error {
    py_error("TypeError", msg)
}

fn value_error(msg: impl std::fmt::Display) -> Error {
    py_error("ValueError", msg)
}

/// Where the arguments come from: a tuple's items in order, or one value (which is also the
/// mapping of `%(key)s` specs when it is a dict).
struct Args<'a> {
    items: Vec<Value>,
    next: usize,
    mapping: Option<&'a Value>,
}

impl Args<'_> {
    fn next(&mut self) -> Result<Value, Error> {
        let v = self
            .items
            .get(self.next)
            .cloned()
            .ok_or_else(|| type_error("not enough arguments for format string"))?;
        self.next += 1;
        Ok(v)
    }
}

/// `fmt % args` as Python computes it. `markup`: `fmt` is a Markup string, whose `%` escapes
/// the text of `%s`/`%r`/`%a` arguments that are not Markup themselves.
pub(crate) fn percent_format(fmt: &str, args: &Value, markup: bool) -> Result<String, Error> {
    let is_mapping = args.kind() == ValueKind::Map && !args.is_kwargs();
    let items: Vec<Value> = if args.is_tuple() {
        args.try_iter().map(Iterator::collect).unwrap_or_default()
    } else {
        vec![args.clone()]
    };
    let mut a = Args {
        items,
        next: 0,
        mapping: is_mapping.then_some(args),
    };
    let out = format_with(fmt, &mut a, markup)?;
    if a.next < a.items.len() && a.mapping.is_none() {
        return Err(type_error(
            "not all arguments converted during string formatting",
        ));
    }
    Ok(out)
}

/// A conversion's flags, width and precision.
#[derive(Default, Clone, Copy)]
#[allow(clippy::struct_excessive_bools)] // Python's five independent flags
struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alt: bool,
    width: usize,
    precision: Option<usize>,
}

/// The format string's characters and the reading position (Python reports character
/// indices).
struct Cursor {
    chars: Vec<char>,
    pos: usize,
}

impl Cursor {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn next_if(&mut self, want: char) -> bool {
        let hit = self.peek() == Some(want);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn number(&mut self) -> usize {
        let mut n: usize = 0;
        while let Some(digit) = self.peek().and_then(|ch| ch.to_digit(10)) {
            n = n.saturating_mul(10).saturating_add(digit as usize);
            self.pos += 1;
        }
        n
    }

    /// `%(key)`'s key (the cursor is past the `(`), parentheses nested as Python nests them.
    fn key(&mut self) -> Result<String, Error> {
        let start = self.pos;
        let mut depth = 1;
        while let Some(ch) = self.peek() {
            self.pos += 1;
            match ch {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(self.chars[start..self.pos - 1].iter().collect());
                    }
                }
                _ => {}
            }
        }
        Err(value_error("incomplete format key"))
    }
}

fn format_with(fmt: &str, args: &mut Args<'_>, markup: bool) -> Result<String, Error> {
    let mut out = String::with_capacity(fmt.len() + 16);
    let mut cur = Cursor {
        chars: fmt.chars().collect(),
        pos: 0,
    };
    while let Some(ch) = cur.peek() {
        cur.pos += 1;
        if ch != '%' {
            out.push(ch);
            continue;
        }
        let keyed = if cur.next_if('(') {
            let mapping = args
                .mapping
                .ok_or_else(|| type_error("format requires a mapping"))?;
            let key = cur.key()?;
            let value = mapping
                .get_item(&Value::from(key.as_str()))
                .ok()
                .filter(|v| !v.is_undefined());
            Some(value.ok_or_else(|| {
                let mut m = String::new();
                crate::chat::write_py_str_repr(&mut m, &key);
                py_error("KeyError", m)
            })?)
        } else {
            None
        };
        let mut spec = parse_spec(&mut cur, args)?;
        let conv = cur.peek().ok_or_else(|| value_error("incomplete format"))?;
        cur.pos += 1;
        if conv == '%' {
            out.push('%');
            continue;
        }
        let value = match keyed {
            Some(v) => v,
            None => args.next()?,
        };
        let body = convert(conv, &value, &mut spec, markup, cur.pos - 1)?;
        pad(&mut out, &body, &spec, conv);
        check_result(out.len(), "%-formatting")?;
    }
    Ok(out)
}

/// The flags, width, precision and length modifier of a conversion (`*` takes arguments).
fn parse_spec(cur: &mut Cursor, args: &mut Args<'_>) -> Result<Spec, Error> {
    let mut spec = Spec::default();
    while let Some(flag) = cur.peek() {
        match flag {
            '-' => spec.left = true,
            '0' => spec.zero = true,
            '+' => spec.plus = true,
            ' ' => spec.space = true,
            '#' => spec.alt = true,
            _ => break,
        }
        cur.pos += 1;
    }
    if cur.next_if('*') {
        let width = star_value(args)?;
        spec.left |= width < 0;
        spec.width = usize::try_from(width.unsigned_abs()).unwrap_or(usize::MAX);
    } else {
        spec.width = cur.number();
    }
    if cur.next_if('.') {
        spec.precision = Some(if cur.next_if('*') {
            usize::try_from(star_value(args)?.max(0)).unwrap_or(usize::MAX)
        } else {
            cur.number()
        });
    }
    // a huge width or precision would be a huge string: the engine's limit on widths
    checked_width(i64::try_from(spec.width).unwrap_or(i64::MAX), "a width")?;
    if let Some(p) = spec.precision {
        checked_width(i64::try_from(p).unwrap_or(i64::MAX), "a precision")?;
    }
    while matches!(cur.peek(), Some('h' | 'l' | 'L')) {
        cur.pos += 1;
    }
    Ok(spec)
}

fn star_value(args: &mut Args<'_>) -> Result<i64, Error> {
    let v = args.next()?;
    if v.kind() == ValueKind::Number && v.is_integer() {
        if let Ok(n) = i64::try_from(v.clone()) {
            return Ok(n);
        }
    }
    if v.kind() == ValueKind::Bool {
        return Ok(i64::from(v.is_true()));
    }
    Err(type_error("* wants int"))
}

/// An integer argument of `%d`-like conversions: ints, bools and floats (truncated).
fn int_arg(v: &Value, conv: char) -> Result<i128, Error> {
    match v.kind() {
        ValueKind::Bool => Ok(i128::from(v.is_true())),
        ValueKind::Number if v.is_integer() => {
            i128::try_from(v.clone()).map_err(|_| value_error("integer too large to format"))
        }
        ValueKind::Number if matches!(conv, 'd' | 'i' | 'u') => {
            let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
            if f.is_nan() {
                return Err(value_error("cannot convert float NaN to integer"));
            }
            if f.is_infinite() {
                return Err(py_error(
                    "OverflowError",
                    "cannot convert float infinity to integer",
                ));
            }
            #[allow(clippy::cast_possible_truncation)]
            let t = f.trunc();
            if t.abs() >= 1.7e38 {
                return Err(value_error("integer too large to format"));
            }
            #[allow(clippy::cast_possible_truncation)]
            Ok(t as i128)
        }
        _ => Err(type_error(if matches!(conv, 'd' | 'i' | 'u') {
            format!(
                "%{conv} format: a real number is required, not {}",
                type_name(v)
            )
        } else {
            format!(
                "%{conv} format: an integer is required, not {}",
                type_name(v)
            )
        })),
    }
}

fn float_arg(v: &Value) -> Result<f64, Error> {
    match v.kind() {
        ValueKind::Bool => Ok(if v.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => {
            f64::try_from(v.clone()).map_err(|_| type_error("must be real number"))
        }
        _ => Err(type_error(format!(
            "must be real number, not {}",
            type_name(v)
        ))),
    }
}

/// The converted text of one argument (the sign, prefix and digits; `pad` adds the width).
fn convert(
    conv: char,
    v: &Value,
    spec: &mut Spec,
    markup: bool,
    at: usize,
) -> Result<String, Error> {
    let text = |s: String| -> String {
        if markup && !v.is_safe() {
            html_escape(&s)
        } else {
            s
        }
    };
    Ok(match conv {
        's' | 'r' | 'a' => {
            let s = match conv {
                's' => py_str(v),
                'r' => py_str_repr(v),
                _ => ascii(&py_str_repr(v)),
            };
            let s = match spec.precision {
                Some(p) => s.chars().take(p).collect(),
                None => s,
            };
            // zero padding does not apply to strings
            spec.zero = false;
            text(s)
        }
        'd' | 'i' | 'u' | 'o' | 'x' | 'X' => {
            let n = int_arg(v, conv)?;
            let digits = match conv {
                'o' => format!("{:o}", n.unsigned_abs()),
                'x' => format!("{:x}", n.unsigned_abs()),
                'X' => format!("{:X}", n.unsigned_abs()),
                _ => n.unsigned_abs().to_string(),
            };
            let digits = match spec.precision {
                Some(p) if digits.len() < p => format!("{}{digits}", "0".repeat(p - digits.len())),
                _ => digits,
            };
            let prefix = match (spec.alt, conv) {
                (true, 'o') => "0o",
                (true, 'x') => "0x",
                (true, 'X') => "0X",
                _ => "",
            };
            format!("{}{prefix}{digits}", sign(n < 0, spec))
        }
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' => {
            let f = float_arg(v)?;
            let body = format_float(f.abs(), conv, spec.precision.unwrap_or(6), spec.alt);
            // (Python zero-pads `inf` and `nan` too: `'%08.2f' % -inf` is `-0000inf`)
            let neg = f.is_sign_negative() && !f.is_nan();
            format!("{}{body}", sign(neg, spec))
        }
        'c' => {
            spec.zero = false;
            let c = match v.kind() {
                ValueKind::String => {
                    let s = v.as_str().unwrap_or_default();
                    let mut it = s.chars();
                    match (it.next(), it.next()) {
                        (Some(c), None) => c,
                        _ => {
                            return Err(type_error(format!(
                                "%c requires an int or a unicode character, not a string of \
                                 length {}",
                                s.chars().count()
                            )));
                        }
                    }
                }
                ValueKind::Number if v.is_integer() => {
                    let n = i64::try_from(v.clone()).unwrap_or(-1);
                    u32::try_from(n)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or_else(|| py_error("OverflowError", "%c arg not in range(0x110000)"))?
                }
                _ => {
                    return Err(type_error(format!(
                        "%c requires an int or a unicode character, not {}",
                        type_name(v)
                    )));
                }
            };
            text(c.to_string())
        }
        other => {
            return Err(value_error(format!(
                "unsupported format character '{other}' (0x{:x}) at index {at}",
                u32::from(other)
            )));
        }
    })
}

fn sign(neg: bool, spec: &Spec) -> &'static str {
    if neg {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    }
}

/// Python's `ascii()` of a repr: non-ASCII characters as `\x`, `\u` or `\U` escapes.
fn ascii(repr: &str) -> String {
    let mut out = String::with_capacity(repr.len());
    for c in repr.chars() {
        let n = u32::from(c);
        if n < 0x80 {
            out.push(c);
        } else if n < 0x100 {
            let _ = write!(out, "\\x{n:02x}");
        } else if n < 0x10000 {
            let _ = write!(out, "\\u{n:04x}");
        } else {
            let _ = write!(out, "\\U{n:08x}");
        }
    }
    out
}

/// A non-negative float (or inf/nan) in `conv`'s notation, as Python's `%` writes it.
fn format_float(f: f64, conv: char, precision: usize, alt: bool) -> String {
    let upper = conv.is_ascii_uppercase();
    if !f.is_finite() {
        let s = if f.is_nan() { "nan" } else { "inf" };
        return if upper {
            s.to_uppercase()
        } else {
            s.to_owned()
        };
    }
    let s = match conv.to_ascii_lowercase() {
        'f' => {
            let mut s = format!("{f:.precision$}");
            if alt && precision == 0 {
                s.push('.');
            }
            s
        }
        'e' => {
            let mut s = exp_notation(f, precision);
            if alt && precision == 0 {
                // `1.e+00`
                if let Some(at) = s.find('e') {
                    s.insert(at, '.');
                }
            }
            s
        }
        _ => general(f, precision, alt),
    };
    if upper { s.to_uppercase() } else { s }
}

/// `d.ddde+XX`: Rust's `{:e}` with the exponent written as Python writes it.
fn exp_notation(f: f64, precision: usize) -> String {
    let s = format!("{f:.precision$e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    format!(
        "{mantissa}e{}{:02}",
        if exp < 0 { '-' } else { '+' },
        exp.unsigned_abs()
    )
}

/// `%g`: `precision` significant digits, fixed notation when the exponent is in
/// `-4..precision`, else exponential; trailing zeros removed unless `alt`.
fn general(f: f64, precision: usize, alt: bool) -> String {
    let p = precision.max(1);
    let exp = if f == 0.0 {
        0
    } else {
        let s = format!("{f:.prec$e}", prec = p - 1);
        s.split_once('e')
            .and_then(|(_, e)| e.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let p_i = i64::try_from(p).unwrap_or(i64::MAX);
    let mut s = if (-4..p_i).contains(&exp) {
        let decimals = usize::try_from(p_i - 1 - exp).unwrap_or(0);
        format!("{f:.decimals$}")
    } else {
        exp_notation(f, p - 1)
    };
    if alt {
        if !s.contains('.') {
            match s.find('e') {
                Some(at) => s.insert(at, '.'),
                None => s.push('.'),
            }
        }
        return s;
    }
    let (mantissa, rest) = match s.find('e') {
        Some(at) => (s[..at].to_owned(), s[at..].to_owned()),
        None => (s.clone(), String::new()),
    };
    let mantissa = if mantissa.contains('.') {
        mantissa
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    } else {
        mantissa
    };
    s = mantissa + &rest;
    s
}

/// `body` (sign first) padded to the width: spaces on the left (`-`: on the right), or zeros
/// after the sign and prefix (`0`, numbers only).
fn pad(out: &mut String, body: &str, spec: &Spec, conv: char) {
    let len = body.chars().count();
    if len >= spec.width {
        out.push_str(body);
        return;
    }
    let fill = spec.width - len;
    if spec.left {
        out.push_str(body);
        out.extend(std::iter::repeat_n(' ', fill));
    } else if spec.zero && !matches!(conv, 's' | 'r' | 'a' | 'c') {
        // zeros go after the sign and the `0x`-style prefix
        let mut head = 0;
        let b = body.as_bytes();
        if matches!(b.first(), Some(b'-' | b'+' | b' ')) {
            head = 1;
        }
        if spec.alt
            && matches!(conv, 'o' | 'x' | 'X')
            && b.get(head) == Some(&b'0')
            && matches!(b.get(head + 1), Some(b'o' | b'x' | b'X'))
        {
            head += 2;
        }
        out.push_str(&body[..head]);
        out.extend(std::iter::repeat_n('0', fill));
        out.push_str(&body[head..]);
    } else {
        out.extend(std::iter::repeat_n(' ', fill));
        out.push_str(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::from(v)
    }

    fn fmt(f: &str, v: &Value, markup: bool) -> String {
        percent_format(f, v, markup).unwrap_or_else(|e| format!("error: {e}"))
    }

    /// Each case's expected text is what CPython 3.11 gives for `fmt % value`.
    #[test]
    fn formats_like_python() {
        let cases: Vec<(&str, Value, &str)> = vec![
            ("%s", s("x"), "x"),
            ("%05d", Value::from(42), "00042"),
            ("%-5d|", Value::from(42), "42   |"),
            ("%+.3f", Value::from(1.23456), "+1.235"),
            ("%e", Value::from(12345.678), "1.234568e+04"),
            ("%E", Value::from(0.000_123), "1.230000E-04"),
            ("%g", Value::from(0.0001), "0.0001"),
            ("%g", Value::from(0.00001), "1e-05"),
            ("%g", Value::from(123_456), "123456"),
            ("%g", Value::from(1_234_567), "1.23457e+06"),
            ("%.3g", Value::from(2.5), "2.5"),
            ("%#g", Value::from(2.0), "2.00000"),
            ("%G", Value::from(1e-10), "1E-10"),
            ("%x", Value::from(255), "ff"),
            ("%#X", Value::from(255), "0XFF"),
            ("%#o", Value::from(8), "0o10"),
            ("%o", Value::from(-8), "-10"),
            ("%c", Value::from(65), "A"),
            ("%c", s("z"), "z"),
            ("%r", s("a\nb"), "'a\\nb'"),
            ("%a", s("é"), "'\\xe9'"),
            ("%d", Value::from(3.99), "3"),
            ("%d", Value::from(-3.99), "-3"),
            ("%i", Value::from(true), "1"),
            ("%5.1s|", s("abc"), "    a|"),
            ("%06.2f", Value::from(-1.5), "-01.50"),
            ("% d", Value::from(4), " 4"),
            ("%.0f", Value::from(2.5), "2"),
            ("%.0f", Value::from(3.5), "4"),
            ("%#.0f", Value::from(2.0), "2."),
            ("%#.0e", Value::from(2.0), "2.e+00"),
            ("%f", Value::from(f64::INFINITY), "inf"),
            ("%08.2f", Value::from(f64::NEG_INFINITY), "-0000inf"),
            ("%F", Value::from(f64::NAN), "NAN"),
            ("%.2d", Value::from(5), "05"),
            ("%#08x", Value::from(255), "0x0000ff"),
            ("%s", Value::from(1e16), "1e+16"),
            ("%s", Value::from(()), "None"),
            ("%%|%s", s("a"), "%|a"),
            ("%10.4e", Value::from(-0.000_123_4), "-1.2340e-04"),
            ("%.15g", Value::from(0.1), "0.1"),
            ("%.17g", Value::from(0.1), "0.10000000000000001"),
            ("%g", Value::from(0.0), "0"),
            ("%e", Value::from(0.0), "0.000000e+00"),
            ("%.1f", Value::from(0.25), "0.2"),
            ("%.1f", Value::from(0.35), "0.3"),
        ];
        for (f, value, want) in cases {
            assert_eq!(fmt(f, &value, false), want, "{f} % {value:?}");
        }
    }

    #[test]
    fn tuples_mappings_and_errors_like_python() {
        let t = Value::from_object(minijinja::value::Tuple::from(vec![s("a"), Value::from(2)]));
        assert_eq!(fmt("%s-%d", &t, false), "a-2");
        // a list is one argument
        let l = Value::from(vec![Value::from(1), Value::from(2)]);
        assert_eq!(fmt("%s", &l, false), "[1, 2]");
        let m: crate::chat::Map = [(s("k"), Value::from(1))].into_iter().collect();
        let m = Value::from(m);
        assert_eq!(fmt("%(k)s|%(k)03d", &m, false), "1|001");
        // a mapping is also a single argument, and leftover arguments are not an error then
        assert_eq!(fmt("%s", &m, false), "{'k': 1}");
        let err = |fmt: &str, v: &Value| percent_format(fmt, v, false).unwrap_err().to_string();
        assert!(err("%s %s", &s("a")).contains("not enough arguments for format string"));
        assert!(err("%s", &t).contains("not all arguments converted"));
        assert!(err("%d", &s("a")).contains("%d format: a real number is required, not str"));
        assert!(err("%x", &Value::from(1.5)).contains("%x format: an integer is required"));
        assert!(err("%(k)s", &s("a")).contains("format requires a mapping"));
        assert!(err("%z", &s("a")).contains("unsupported format character 'z' (0x7a) at index 1"));
        assert!(err("%", &s("a")).contains("incomplete format"));
        assert!(err("%f", &s("a")).contains("must be real number, not str"));
        assert!(err("%d", &Value::from(f64::INFINITY)).contains("cannot convert float infinity"));
        assert!(err("%c", &s("ab")).contains("not a string of length 2"));
        assert!(err("%(x)s", &m).contains("KeyError: 'x'"));
        // a Markup format string escapes its arguments' text
        assert_eq!(fmt("<b>%s</b>", &s("<i>"), true), "<b>&lt;i&gt;</b>");
    }
}
