//! A compiled `PromptTemplate`: string, dialogue (`begin`/`round`/`end`) or label-dict template.
//!
//! Compiled once (the dialogue encodings with their section markers are built at construction);
//! each call only splices the in-context example and substitutes the row.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::format::{Entries, replace, safe_format, single_pass_format};
use crate::prompt::{Item, Marker, Pos, RoleItem, Section};
use crate::splice::{Ice, delete, delete_in_items, replace_in_items};

/// How placeholders are substituted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Substitution {
    /// The reference's behaviour, byte for byte: sequential `safe_format` over the row, ICE text
    /// inserted before substitution (and so filled with the test row), `sep_token` kept in ICE.
    #[default]
    Compat,
    /// Injection-free: one scan of the template only, ICE inserted after substitution and never
    /// re-formatted, `sep_token` deleted from the template only.
    SinglePass,
}

/// A dialogue template, pre-encoded into prompt lists.
#[derive(Debug, Clone)]
pub struct Dialogue {
    full: Option<Vec<Item<'static>>>,
    ice: Option<Vec<Item<'static>>>,
}

fn marker(section: Section, pos: Pos) -> Item<'static> {
    Item::Marker(Marker::new(section, pos))
}

impl Dialogue {
    /// Encode a dialogue from its sections (each already flattened to items; `round: None` means
    /// the template has no `round` and fails when used).
    ///
    /// The `end` section is opened with a `pos = end` marker, as the reference does.
    pub fn new(
        begin: Option<Vec<Item<'static>>>,
        round: Option<Vec<Item<'static>>>,
        end: Option<Vec<Item<'static>>>,
    ) -> Self {
        let Some(round) = round else {
            return Self {
                full: None,
                ice: None,
            };
        };
        let mut ice = Vec::with_capacity(round.len() + 2);
        ice.push(marker(Section::Ice, Pos::Begin));
        ice.extend(round.iter().cloned());
        ice.push(marker(Section::Ice, Pos::End));
        let mut full = Vec::new();
        if let Some(begin) = begin {
            full.push(marker(Section::Begin, Pos::Begin));
            full.extend(begin);
            full.push(marker(Section::Begin, Pos::End));
        }
        full.push(marker(Section::Round, Pos::Begin));
        full.extend(round);
        full.push(marker(Section::Round, Pos::End));
        if let Some(end) = end {
            full.push(marker(Section::End, Pos::End));
            full.extend(end);
            full.push(marker(Section::End, Pos::End));
        }
        Self {
            full: Some(full),
            ice: Some(ice),
        }
    }

    fn encoded(&self, ice: bool) -> Result<&[Item<'static>]> {
        let items = if ice { &self.ice } else { &self.full };
        items.as_deref().ok_or(Error::MissingRound)
    }
}

/// One selectable template body.
#[derive(Debug, Clone)]
pub enum Body {
    /// a string template
    Str(String),
    /// a dialogue template
    Dialogue(Dialogue),
    /// a label-dict value that is neither (fails when selected)
    Invalid,
}

/// The result of rendering: a string, or a prompt list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendered<'a> {
    /// from a string template
    Str(String),
    /// from a dialogue template
    List(Vec<Item<'a>>),
}

/// A compiled prompt template.
#[derive(Debug, Clone)]
pub struct PromptTemplate {
    bodies: Vec<Body>,
    ice_token: Option<String>,
    sep_token: Option<String>,
    substitution: Substitution,
}

/// Which of the three reference operations is running (they differ in token handling).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    IceItem,
    LabelPrompt { remain_sep: bool },
    Item,
}

impl PromptTemplate {
    /// A template with one body per label (one body for string and dialogue templates; for
    /// label dicts, in the dict's order: the first one is what `generate_item` uses).
    pub fn new(
        bodies: Vec<Body>,
        ice_token: Option<String>,
        sep_token: Option<String>,
        substitution: Substitution,
    ) -> Self {
        Self {
            bodies,
            ice_token,
            sep_token,
            substitution,
        }
    }

    fn body(&self, label: usize) -> Result<&Body> {
        match self.bodies.get(label) {
            Some(Body::Invalid) => Err(Error::InvalidLabelBody { index: label }),
            Some(body) => Ok(body),
            None => Err(Error::LabelOutOfRange {
                index: label,
                count: self.bodies.len(),
            }),
        }
    }

    /// `generate_ice_item(entry, label)`: one in-context example.
    pub fn ice_item(&self, row: &Entries<'_>, label: usize) -> Result<Rendered<'_>> {
        self.render(row, label, None, Op::IceItem)
    }

    /// `generate_label_prompt_item(entry, ice, label, remain_sep)`: a PPL prompt for `label`.
    pub fn label_prompt_item<'a>(
        &'a self,
        row: &Entries<'_>,
        ice: Ice<'_, 'a>,
        label: usize,
        remain_sep: bool,
    ) -> Result<Rendered<'a>> {
        self.render(row, label, Some(ice), Op::LabelPrompt { remain_sep })
    }

    /// `generate_item(entry, ...)` with `row` already masked by the caller: a generation prompt
    /// (label dicts use their first body).
    pub fn item<'a>(&'a self, row: &Entries<'_>, ice: Ice<'_, 'a>) -> Result<Rendered<'a>> {
        self.render(row, 0, Some(ice), Op::Item)
    }

    fn render<'a>(
        &'a self,
        row: &Entries<'_>,
        label: usize,
        ice: Option<Ice<'_, 'a>>,
        op: Op,
    ) -> Result<Rendered<'a>> {
        let body = self.body(label)?;
        let tok = self.ice_token.as_deref();
        // the ICE only goes in where there is a token; IceItem deletes the token instead
        let ice = match (tok, ice) {
            (Some(_), Some(ice)) => Some(ice),
            _ => None,
        };
        let sep = match op {
            // reference quirk: the sep token stays in in-context examples
            Op::IceItem | Op::LabelPrompt { remain_sep: true } => None,
            _ => self.sep_token.as_deref(),
        };
        match self.substitution {
            Substitution::Compat => match body {
                Body::Str(s) => compat_str(s, row, tok, sep, ice, op).map(Rendered::Str),
                Body::Dialogue(d) => {
                    let items = d
                        .encoded(op == Op::IceItem)?
                        .iter()
                        .map(Item::view)
                        .collect();
                    compat_list(items, row, tok, sep, ice, op).map(Rendered::List)
                }
                Body::Invalid => Err(Error::InvalidLabelBody { index: label }),
            },
            Substitution::SinglePass => {
                single_pass(body, label, row, tok, self.sep_token.as_deref(), ice, op)
            }
        }
    }
}

fn into_owned(c: Cow<'_, str>, original: String) -> String {
    match c {
        Cow::Borrowed(_) => original,
        Cow::Owned(s) => s,
    }
}

fn compat_str(
    template: &str,
    row: &Entries<'_>,
    tok: Option<&str>,
    sep: Option<&str>,
    ice: Option<Ice<'_, '_>>,
    op: Op,
) -> Result<String> {
    let mut t = Cow::Borrowed(template);
    let sep_first = matches!(op, Op::LabelPrompt { .. });
    if sep_first {
        if let Some(sep) = sep {
            delete(&mut t, sep);
        }
    }
    if let Some(tok) = tok {
        match (op, ice) {
            (Op::IceItem, _) | (_, None) => delete(&mut t, tok),
            (_, Some(Ice::Str(text))) => {
                if let Cow::Owned(new) = replace(&t, tok, text) {
                    t = Cow::Owned(new);
                }
            }
            (_, Some(Ice::List(_))) => return Err(Error::ListIntoString),
        }
    }
    if !sep_first {
        if let Some(sep) = sep {
            delete(&mut t, sep);
        }
    }
    Ok(match safe_format(&t, row) {
        Cow::Borrowed(_) => t.into_owned(),
        Cow::Owned(s) => s,
    })
}

fn compat_list<'a>(
    mut items: Vec<Item<'a>>,
    row: &Entries<'_>,
    tok: Option<&str>,
    sep: Option<&str>,
    ice: Option<Ice<'_, 'a>>,
    op: Op,
) -> Result<Vec<Item<'a>>> {
    let sep_first = matches!(op, Op::LabelPrompt { .. });
    if sep_first {
        if let Some(sep) = sep {
            delete_in_items(&mut items, sep);
        }
    }
    if let Some(tok) = tok {
        match (op, ice) {
            (Op::IceItem, _) | (_, None) => delete_in_items(&mut items, tok),
            (_, Some(ice)) => items = replace_in_items(items, tok, ice)?,
        }
    }
    if !sep_first {
        if let Some(sep) = sep {
            delete_in_items(&mut items, sep);
        }
    }
    format_items(&mut items, row);
    Ok(items)
}

/// `PromptList.format(**row)`: text items and role prompts are substituted.
pub(crate) fn format_items(items: &mut [Item<'_>], row: &Entries<'_>) {
    for item in items {
        let target = match item {
            Item::Text(s) => s,
            Item::Role(RoleItem {
                prompt: Some(p), ..
            }) => p,
            _ => continue,
        };
        if let Cow::Owned(new) = safe_format(target, row) {
            *target = Cow::Owned(new);
        }
    }
}

/// Single-pass: split on the ice token, delete the sep token and substitute each piece.
fn pieces(s: &str, row: &Entries<'_>, tok: Option<&str>, sep: Option<&str>) -> Vec<String> {
    raw_pieces(s, tok)
        .into_iter()
        .map(|p| piece(p, row, sep))
        .collect()
}

/// The pieces of `s` between ice tokens (an empty token splits around every character, as
/// `str.replace('', x)` inserts there).
fn raw_pieces<'t>(s: &'t str, tok: Option<&str>) -> Vec<&'t str> {
    match tok {
        Some(tok) => s.split(tok).collect(),
        None => vec![s],
    }
}

/// One template piece: the sep token deleted, then substituted in one scan.
fn piece(piece: &str, row: &Entries<'_>, sep: Option<&str>) -> String {
    let piece = match sep {
        Some(sep) if !sep.is_empty() => replace(piece, sep, ""),
        _ => Cow::Borrowed(piece),
    };
    let owned = piece.clone().into_owned();
    into_owned(single_pass_format(&piece, row), owned)
}

/// Single-pass rendering. Token handling is the reference's (the sep token is deleted from the
/// template before the ice token is located for PPL prompts, from the template pieces and from
/// the ICE for generation prompts, and kept in in-context examples); only substitution differs:
/// one scan per template piece, and the ICE is inserted afterwards, never re-formatted.
fn single_pass<'a>(
    body: &'a Body,
    label: usize,
    row: &Entries<'_>,
    tok: Option<&str>,
    sep: Option<&str>,
    ice: Option<Ice<'_, 'a>>,
    op: Op,
) -> Result<Rendered<'a>> {
    let (sep_pre, sep_post) = match op {
        Op::IceItem | Op::LabelPrompt { remain_sep: true } => (None, None),
        Op::LabelPrompt { remain_sep: false } => (sep, None),
        Op::Item => (None, sep),
    };
    // generation prompts: the reference deletes the sep token after the ICE went in
    let ice_text;
    let ice_items;
    let ice = match (ice, sep_post) {
        (Some(Ice::Str(text)), Some(sep)) => {
            ice_text = replace(text, sep, "");
            Some(Ice::Str(&ice_text))
        }
        (Some(Ice::List(list)), Some(sep)) => {
            let mut items: Vec<Item<'a>> = list.to_vec();
            delete_in_items(&mut items, sep);
            ice_items = items;
            Some(Ice::List(&ice_items))
        }
        (ice, _) => ice,
    };
    match body {
        Body::Str(s) => {
            let mut t = Cow::Borrowed(s.as_str());
            if let Some(sep) = sep_pre {
                delete(&mut t, sep);
            }
            if op == Op::IceItem {
                if let Some(tok) = tok {
                    delete(&mut t, tok);
                }
                return Ok(Rendered::Str(single_pass_format(&t, row).into_owned()));
            }
            single_str(&t, row, tok, sep_post, ice).map(Rendered::Str)
        }
        Body::Dialogue(d) => {
            let mut items: Vec<Item<'a>> = d
                .encoded(op == Op::IceItem)?
                .iter()
                .map(Item::view)
                .collect();
            if let Some(sep) = sep_pre {
                delete_in_items(&mut items, sep);
            }
            if op == Op::IceItem {
                if let Some(tok) = tok {
                    delete_in_items(&mut items, tok);
                }
                return single_list(&items, row, None, None, None).map(Rendered::List);
            }
            single_list(&items, row, tok, sep_post, ice).map(Rendered::List)
        }
        Body::Invalid => Err(Error::InvalidLabelBody { index: label }),
    }
}

fn single_str(
    template: &str,
    row: &Entries<'_>,
    tok: Option<&str>,
    sep: Option<&str>,
    ice: Option<Ice<'_, '_>>,
) -> Result<String> {
    let parts = pieces(template, row, tok, sep);
    match ice {
        Some(Ice::Str(text)) => Ok(parts.join(text)),
        Some(Ice::List(_)) if parts.len() > 1 => Err(Error::ListIntoString),
        None | Some(Ice::List(_)) => Ok(parts.concat()),
    }
}

fn single_list<'a>(
    items: &[Item<'a>],
    row: &Entries<'_>,
    tok: Option<&str>,
    sep: Option<&str>,
    ice: Option<Ice<'_, 'a>>,
) -> Result<Vec<Item<'a>>> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item {
            Item::Text(s) => {
                match ice {
                    Some(Ice::List(list)) => {
                        // a piece is kept when it is non-empty before the sep token goes
                        let parts = raw_pieces(s, tok);
                        let n = parts.len();
                        for (k, part) in parts.into_iter().enumerate() {
                            if !part.is_empty() {
                                out.push(Item::Text(Cow::Owned(piece(part, row, sep))));
                            }
                            if k + 1 < n {
                                out.extend(list.iter().cloned());
                            }
                        }
                    }
                    Some(Ice::Str(text)) => {
                        out.push(Item::Text(Cow::Owned(pieces(s, row, tok, sep).join(text))));
                    }
                    None => out.push(Item::Text(Cow::Owned(pieces(s, row, tok, sep).concat()))),
                }
            }
            Item::Role(r) => {
                let prompt = match &r.prompt {
                    None => None,
                    Some(p) => {
                        let parts = pieces(p, row, tok, sep);
                        Some(Cow::Owned(match ice {
                            Some(Ice::Str(text)) => parts.join(text),
                            Some(Ice::List(_)) if parts.len() > 1 => {
                                return Err(Error::ListIntoRolePrompt {
                                    item: i,
                                    token: tok.unwrap_or_default().to_owned(),
                                });
                            }
                            _ => parts.concat(),
                        }))
                    }
                };
                out.push(Item::Role(RoleItem {
                    spec: r.spec.clone(),
                    prompt,
                }));
            }
            Item::Marker(m) => out.push(Item::Marker(*m)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e1() -> Entries<'static> {
        let mut e = Entries::default();
        e.push("question", "1+1=?");
        e.push("answer", "2");
        e.push("anything", "blabla");
        e
    }

    fn str_template(s: &str, tok: Option<&str>, sep: Option<&str>) -> PromptTemplate {
        PromptTemplate::new(
            vec![Body::Str(s.into())],
            tok.map(Into::into),
            sep.map(Into::into),
            Substitution::Compat,
        )
    }

    #[test]
    fn ice_item_deletes_token_keeps_sep() {
        let t = str_template(
            "</E>Q: {question}<SEP>A: {answer}",
            Some("</E>"),
            Some("<SEP>"),
        );
        let out = t.ice_item(&e1(), 0).unwrap();
        assert_eq!(out, Rendered::Str("Q: 1+1=?<SEP>A: 2".into()));
    }

    #[test]
    fn item_fills_ice_placeholders_with_test_row() {
        let t = str_template("</E>{question}", Some("</E>"), None);
        let mut row = e1();
        row.set("answer", "");
        let out = t
            .item(&row, Ice::Str("ice has {question} and [{answer}]\n"))
            .unwrap();
        assert_eq!(out, Rendered::Str("ice has 1+1=? and []\n1+1=?".into()));
    }

    #[test]
    fn label_prompt_sep_removed_before_ice() {
        let t = str_template("X</E>YZ{question}", Some("</E>"), Some("<SEP>"));
        let out = t
            .label_prompt_item(&e1(), Ice::Str("i<SEP>j"), 0, false)
            .unwrap();
        assert_eq!(out, Rendered::Str("Xi<SEP>jYZ1+1=?".into()));
        let out = t.item(&e1(), Ice::Str("i<SEP>j")).unwrap();
        assert_eq!(out, Rendered::Str("XijYZ1+1=?".into()));
    }

    #[test]
    fn dialogue_without_round_fails_on_use() {
        let t = PromptTemplate::new(
            vec![Body::Dialogue(Dialogue::new(None, None, None))],
            None,
            None,
            Substitution::Compat,
        );
        assert_eq!(t.item(&e1(), Ice::Str("")), Err(Error::MissingRound));
    }

    #[test]
    fn single_pass_does_not_reformat_ice() {
        let t = PromptTemplate::new(
            vec![Body::Str("</E>{question}".into())],
            Some("</E>".into()),
            None,
            Substitution::SinglePass,
        );
        let out = t.item(&e1(), Ice::Str("ice {question}|")).unwrap();
        assert_eq!(out, Rendered::Str("ice {question}|1+1=?".into()));
    }
}
