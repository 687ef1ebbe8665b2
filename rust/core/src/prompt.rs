//! The `PromptList` intermediate form: free text, role items and section markers.

use std::borrow::Cow;

/// A dialogue section named by a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// `begin`: items before the rounds (system prompt, instructions).
    Begin,
    /// `round`: the dialogue rounds; the last one may stop at the generation point.
    Round,
    /// `end`: items after the rounds.
    End,
    /// `ice`: in-context example rounds (never stop generation).
    Ice,
}

impl Section {
    /// The reference's section name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Begin => "begin",
            Self::Round => "round",
            Self::End => "end",
            Self::Ice => "ice",
        }
    }

    /// Parse a reference section name.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "begin" => Self::Begin,
            "round" => Self::Round,
            "end" => Self::End,
            "ice" => Self::Ice,
            _ => return None,
        })
    }
}

/// Whether a marker opens or closes its section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pos {
    /// opening marker
    Begin,
    /// closing marker
    End,
}

impl Pos {
    /// The reference's `pos` value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Begin => "begin",
            Self::End => "end",
        }
    }

    /// Parse a reference `pos` value.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "begin" => Some(Self::Begin),
            "end" => Some(Self::End),
            _ => None,
        }
    }
}

/// A section marker `{'section': ..., 'pos': ...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// the section
    pub section: Section,
    /// opening or closing
    pub pos: Pos,
}

impl Marker {
    /// A marker.
    pub fn new(section: Section, pos: Pos) -> Self {
        Self { section, pos }
    }
}

/// Where a role item came from, so that a binding can rebuild it with its extra keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Origin {
    /// built in Rust (no extra keys)
    #[default]
    None,
    /// the n-th role dict of the compiled template
    Template(u32),
    /// the n-th item of the caller's input list
    Input(u32),
}

/// The fields of a role item other than its prompt.
///
/// `None` means "key absent"; the meta walk treats an item's present keys as overrides of the
/// meta role's keys, as the reference's `dict.update` does. Strings are borrowed where they can
/// be (from a compiled template, or from the caller's input), so a render allocates no copies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleSpecItem<'a> {
    /// `role`
    pub role: Option<Cow<'a, str>>,
    /// `fallback_role`
    pub fallback_role: Option<Cow<'a, str>>,
    /// `begin` override
    pub begin: Option<Cow<'a, str>>,
    /// `end` override
    pub end: Option<Cow<'a, str>>,
    /// `api_role` override
    pub api_role: Option<Cow<'a, str>>,
    /// `generate` override (its truthiness)
    pub generate: Option<bool>,
    /// where the item came from
    pub origin: Origin,
}

impl RoleSpecItem<'_> {
    /// A view of `self` borrowing its strings.
    pub fn view(&self) -> RoleSpecItem<'_> {
        RoleSpecItem {
            role: self.role.as_deref().map(Cow::Borrowed),
            fallback_role: self.fallback_role.as_deref().map(Cow::Borrowed),
            begin: self.begin.as_deref().map(Cow::Borrowed),
            end: self.end.as_deref().map(Cow::Borrowed),
            api_role: self.api_role.as_deref().map(Cow::Borrowed),
            generate: self.generate,
            origin: self.origin,
        }
    }
}

/// A role item: a dict with `role`, usually `prompt`, possibly other keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleItem<'a> {
    /// the fields other than the prompt
    pub spec: RoleSpecItem<'a>,
    /// `prompt` (absent when `None`)
    pub prompt: Option<Cow<'a, str>>,
}

impl RoleItem<'static> {
    /// A role item with just `role` and `prompt`.
    pub fn new(role: &str, prompt: Option<&str>) -> Self {
        Self {
            spec: RoleSpecItem {
                role: Some(Cow::Owned(role.to_owned())),
                ..RoleSpecItem::default()
            },
            prompt: prompt.map(|p| Cow::Owned(p.to_owned())),
        }
    }
}

impl RoleItem<'_> {
    /// The role name, if any.
    pub fn role(&self) -> Option<&str> {
        self.spec.role.as_deref()
    }
}

/// One element of a prompt list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item<'a> {
    /// free text
    Text(Cow<'a, str>),
    /// a section marker
    Marker(Marker),
    /// a role item
    Role(RoleItem<'a>),
}

fn own(c: Option<Cow<'_, str>>) -> Option<Cow<'static, str>> {
    c.map(|s| Cow::Owned(s.into_owned()))
}

impl Item<'_> {
    /// An owned copy of `self`, independent of the data it borrowed.
    pub fn into_static(self) -> Item<'static> {
        match self {
            Item::Text(s) => Item::Text(Cow::Owned(s.into_owned())),
            Item::Marker(m) => Item::Marker(m),
            Item::Role(r) => Item::Role(RoleItem {
                spec: RoleSpecItem {
                    role: own(r.spec.role),
                    fallback_role: own(r.spec.fallback_role),
                    begin: own(r.spec.begin),
                    end: own(r.spec.end),
                    api_role: own(r.spec.api_role),
                    generate: r.spec.generate,
                    origin: r.spec.origin,
                },
                prompt: own(r.prompt),
            }),
        }
    }

    /// A view of `self` borrowing its strings (cheap: no allocation).
    pub fn view(&self) -> Item<'_> {
        match self {
            Item::Text(s) => Item::Text(Cow::Borrowed(s)),
            Item::Marker(m) => Item::Marker(*m),
            Item::Role(r) => Item::Role(RoleItem {
                spec: r.spec.view(),
                prompt: r.prompt.as_deref().map(Cow::Borrowed),
            }),
        }
    }
}

/// The no-meta-template join shared by both parsers: non-empty texts and truthy prompts joined
/// with `'\n'`, where every non-marker item (even an empty one) arms the separator.
pub fn join_plain(items: &[Item<'_>]) -> String {
    let mut out = String::new();
    let mut sep = "";
    for item in items {
        let text = match item {
            Item::Marker(_) => continue,
            Item::Text(s) => s,
            Item::Role(r) => r.prompt.as_deref().unwrap_or(""),
        };
        if !text.is_empty() {
            out.push_str(sep);
            out.push_str(text);
        }
        sep = "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_plain_empty_items_arm_separator() {
        let items = vec![
            Item::Text("".into()),
            Item::Text("a".into()),
            Item::Role(RoleItem::new("X", Some(""))),
            Item::Role(RoleItem::new("Y", Some("b"))),
        ];
        assert_eq!(join_plain(&items), "\na\nb");
        let items = vec![Item::Role(RoleItem::new("X", None)), Item::Text("a".into())];
        assert_eq!(join_plain(&items), "\na");
    }

    #[test]
    fn join_plain_skips_markers() {
        let items = vec![
            Item::Marker(Marker::new(Section::Round, Pos::Begin)),
            Item::Text("x".into()),
            Item::Marker(Marker::new(Section::Round, Pos::End)),
        ];
        assert_eq!(join_plain(&items), "x");
    }
}
