//! A compiled model meta template and the LM walk (`LMTemplateParser.parse_template`).

use crate::error::{Error, Result};
use crate::prompt::{Item, Pos, RoleItem, Section};

/// Parsing mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// generation: stop at the `generate` role of the last round
    Gen,
    /// scoring: render everything
    Ppl,
}

/// One role of a meta template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleSpec {
    /// role name (matched case-sensitively)
    pub name: String,
    /// text before the role's prompt
    pub begin: Option<String>,
    /// text after the role's prompt
    pub end: Option<String>,
    /// default prompt when the dialogue does not supply the role
    pub prompt: Option<String>,
    /// the role the model plays (gen mode stops at its `begin`)
    pub generate: bool,
    /// the role name emitted by the API walk
    pub api_role: Option<String>,
}

impl RoleSpec {
    /// A role with only a name.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            ..Self::default()
        }
    }
    /// Set `begin`.
    #[must_use]
    pub fn begin(mut self, s: &str) -> Self {
        self.begin = Some(s.to_owned());
        self
    }
    /// Set `end`.
    #[must_use]
    pub fn end(mut self, s: &str) -> Self {
        self.end = Some(s.to_owned());
        self
    }
    /// Set `generate`.
    #[must_use]
    pub fn generate(mut self, g: bool) -> Self {
        self.generate = g;
        self
    }
    /// Set `api_role`.
    #[must_use]
    pub fn api_role(mut self, s: &str) -> Self {
        self.api_role = Some(s.to_owned());
        self
    }
}

/// An entry of the meta template's `round`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaEntry {
    /// a plain string, emitted as is by the LM walk
    Text(String),
    /// a role
    Role(RoleSpec),
}

impl From<RoleSpec> for MetaEntry {
    fn from(r: RoleSpec) -> Self {
        Self::Role(r)
    }
}

/// A compiled meta template.
#[derive(Debug, Clone)]
pub struct MetaTemplate {
    /// every role: round roles first, then reserved roles
    pub(crate) roles: Vec<RoleSpec>,
    /// the round: text, or an index into `roles`
    pub(crate) round: Vec<RoundSlot>,
    pub(crate) begin: Option<String>,
    pub(crate) end: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum RoundSlot {
    Text(String),
    Role(usize),
}

/// What the section walk meets.
pub(crate) enum Step<'w, 'a> {
    /// a text item
    Text(&'w str),
    /// one round of a round/ice section: the role table merged with its items; `for_gen` when
    /// it is the last round of a round section in gen mode
    Round {
        merged: &'w [Merged<'a>],
        for_gen: bool,
    },
    /// a role item (index `item`) of a begin/end section, merged into role `role`
    Single {
        item: usize,
        role: usize,
        merged: Merged<'a>,
    },
}

/// The merged view of a role after the dialogue item's keys override the meta role's.
#[derive(Clone, Copy)]
pub(crate) struct Merged<'a> {
    pub(crate) begin: Option<&'a str>,
    pub(crate) end: Option<&'a str>,
    pub(crate) prompt: Option<&'a str>,
    pub(crate) generate: bool,
    pub(crate) api_role: Option<&'a str>,
}

impl<'a> Merged<'a> {
    pub(crate) fn of(spec: &'a RoleSpec) -> Self {
        Self {
            begin: spec.begin.as_deref(),
            end: spec.end.as_deref(),
            prompt: spec.prompt.as_deref(),
            generate: spec.generate,
            api_role: spec.api_role.as_deref(),
        }
    }

    /// `role_dict[role].update(item)`
    pub(crate) fn update(&mut self, item: &'a RoleItem<'_>) {
        let s = &item.spec;
        if let Some(b) = &s.begin {
            self.begin = Some(b);
        }
        if let Some(e) = &s.end {
            self.end = Some(e);
        }
        if let Some(p) = &item.prompt {
            self.prompt = Some(p);
        }
        if let Some(g) = s.generate {
            self.generate = g;
        }
        if let Some(a) = &s.api_role {
            self.api_role = Some(a);
        }
    }
}

impl MetaTemplate {
    /// Compile from the `round` entries, the `reserved_roles`, and meta `begin`/`end`.
    pub fn new(
        round: Vec<MetaEntry>,
        reserved: Vec<RoleSpec>,
        begin: Option<String>,
        end: Option<String>,
    ) -> Result<Self> {
        let mut roles: Vec<RoleSpec> = Vec::new();
        let mut slots = Vec::with_capacity(round.len());
        for entry in round {
            match entry {
                MetaEntry::Text(s) => slots.push(RoundSlot::Text(s)),
                MetaEntry::Role(r) => {
                    if roles.iter().any(|x| x.name == r.name) {
                        return Err(Error::DuplicateRole { role: r.name });
                    }
                    slots.push(RoundSlot::Role(roles.len()));
                    roles.push(r);
                }
            }
        }
        for r in reserved {
            if roles.iter().any(|x| x.name == r.name) {
                return Err(Error::DuplicateRole { role: r.name });
            }
            roles.push(r);
        }
        Ok(Self {
            roles,
            round: slots,
            begin,
            end,
        })
    }

    pub(crate) fn role_index(&self, name: &str) -> Option<usize> {
        self.roles.iter().position(|r| r.name == name)
    }

    /// Position of a round role in the meta `round` list (text entries count).
    pub(crate) fn round_position(&self, name: &str) -> Option<usize> {
        self.round
            .iter()
            .position(|s| matches!(s, RoundSlot::Role(i) if self.roles[*i].name == name))
    }

    /// The role-dict entry a dialogue item updates: its role if known (round or reserved), else
    /// its truthy `fallback_role`, which must be known.
    pub(crate) fn resolve(&self, item: &RoleItem<'_>, index: usize) -> Result<usize> {
        let role = item.role().ok_or(Error::MissingRole { item: index })?;
        if let Some(i) = self.role_index(role) {
            return Ok(i);
        }
        match item.spec.fallback_role.as_deref() {
            Some(fb) if !fb.is_empty() => self.role_index(fb).ok_or_else(|| Error::UnknownRole {
                item: index,
                role: fb.to_owned(),
            }),
            _ => Err(Error::UnknownRole {
                item: index,
                role: role.to_owned(),
            }),
        }
    }

    /// Split the items of a round/ice section into rounds: a new round starts at a role whose
    /// round position is not after the previous role's. `fallback` allows the fallback role's
    /// position (API walk); the LM walk looks up the role only.
    pub(crate) fn split_rounds(
        &self,
        items: &[Item],
        base: usize,
        fallback: bool,
    ) -> Result<Vec<usize>> {
        let mut cuts = vec![0];
        let mut last: Option<usize> = None;
        for (k, item) in items.iter().enumerate() {
            let role = match item {
                Item::Text(_) => continue,
                Item::Marker(_) => return Err(Error::MissingRole { item: base + k }),
                Item::Role(r) => r,
            };
            let name = role.role().ok_or(Error::MissingRole { item: base + k })?;
            let pos = match self.round_position(name) {
                Some(p) => p,
                None if fallback => role
                    .spec
                    .fallback_role
                    .as_deref()
                    .and_then(|fb| self.round_position(fb))
                    .ok_or_else(|| Error::UnknownRole {
                        item: base + k,
                        role: name.to_owned(),
                    })?,
                None => {
                    return Err(Error::UnknownRole {
                        item: base + k,
                        role: name.to_owned(),
                    });
                }
            };
            if last.is_some_and(|l| pos <= l) {
                cuts.push(k);
            }
            last = Some(pos);
        }
        cuts.push(items.len());
        Ok(cuts)
    }

    /// The role table after the round's items updated it (a fresh copy per round).
    pub(crate) fn merged_roles<'a>(
        &'a self,
        items: &'a [Item],
        base: usize,
        merged: &mut Vec<Merged<'a>>,
    ) -> Result<()> {
        merged.clear();
        merged.extend(self.roles.iter().map(Merged::of));
        for (k, item) in items.iter().enumerate() {
            if let Item::Role(r) = item {
                let idx = self.resolve(r, base + k)?;
                merged[idx].update(r);
            }
        }
        Ok(())
    }

    /// The section walk shared by the LM and API parsers: texts where they are met, each
    /// round of a round/ice section with its merged role table (split by round positions,
    /// `fallback` allowing the fallback role's position), each role item of a begin/end
    /// section. `visit` returns whether to go on (the generation point stops the walk); the
    /// walk returns the same.
    pub(crate) fn walk<'a, 'i>(
        &'a self,
        items: &'a [Item<'i>],
        mode: Mode,
        fallback: bool,
        mut visit: impl FnMut(Step<'_, 'a>) -> Result<bool>,
    ) -> Result<bool> {
        let mut stack: Vec<(Section, usize)> = Vec::new();
        let mut merged: Vec<Merged<'a>> = Vec::with_capacity(self.roles.len());
        for (i, item) in items.iter().enumerate() {
            let go_on = match item {
                Item::Text(s) => visit(Step::Text(s))?,
                Item::Marker(m) if m.pos == Pos::Begin => {
                    stack.push((m.section, i + 1));
                    true
                }
                Item::Marker(m) => {
                    let (open, start) = stack.pop().ok_or(Error::UnbalancedEnd { item: i })?;
                    if open != m.section {
                        return Err(Error::MismatchedSection {
                            item: i,
                            open: open.name(),
                            closing: m.section.name(),
                        });
                    }
                    let mut go_on = true;
                    if matches!(open, Section::Round | Section::Ice) {
                        let section = &items[start..i];
                        let cuts = self.split_rounds(section, start, fallback)?;
                        let n = cuts.len() - 1;
                        for k in 0..n {
                            let round = &section[cuts[k]..cuts[k + 1]];
                            let for_gen = mode == Mode::Gen && open == Section::Round && k + 1 == n;
                            self.merged_roles(round, start + cuts[k], &mut merged)?;
                            go_on = visit(Step::Round {
                                merged: &merged,
                                for_gen,
                            })?;
                        }
                    }
                    go_on
                }
                Item::Role(r) => match stack.last() {
                    None => return Err(Error::OutsideSection { item: i }),
                    Some((Section::Begin | Section::End, _)) => {
                        let role = self.resolve(r, i)?;
                        let mut m = Merged::of(&self.roles[role]);
                        m.update(r);
                        visit(Step::Single {
                            item: i,
                            role,
                            merged: m,
                        })?
                    }
                    Some(_) => true,
                },
            };
            if !go_on {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `LMTemplateParser.parse_template` for one prompt list.
    pub fn render_lm(&self, items: &[Item<'_>], mode: Mode) -> Result<String> {
        let mut out = String::with_capacity(estimate(items));
        // the reference prepends the meta begin at the end; writing it first is the same text
        out.push_str(self.begin.as_deref().unwrap_or(""));
        let generate = self.walk(items, mode, false, |step| {
            Ok(match step {
                Step::Text(s) => {
                    out.push_str(s);
                    true
                }
                Step::Round { merged, for_gen } => self.lm_round(merged, for_gen, &mut out),
                Step::Single { merged: m, .. } => {
                    out.push_str(m.begin.unwrap_or(""));
                    out.push_str(m.prompt.unwrap_or(""));
                    out.push_str(m.end.unwrap_or(""));
                    true
                }
            })
        })?;
        if generate {
            out.push_str(self.end.as_deref().unwrap_or(""));
        }
        Ok(out)
    }

    /// Render one round in meta order; `false` when generation stopped.
    fn lm_round(&self, merged: &[Merged<'_>], for_gen: bool, out: &mut String) -> bool {
        for slot in &self.round {
            match slot {
                RoundSlot::Text(s) => out.push_str(s),
                RoundSlot::Role(idx) => {
                    let m = merged[*idx];
                    out.push_str(m.begin.unwrap_or(""));
                    if for_gen && m.generate {
                        return false;
                    }
                    out.push_str(m.prompt.unwrap_or(""));
                    out.push_str(m.end.unwrap_or(""));
                }
            }
        }
        true
    }
}

fn estimate(items: &[Item<'_>]) -> usize {
    items
        .iter()
        .map(|i| match i {
            Item::Text(s) => s.len(),
            Item::Role(r) => r.prompt.as_ref().map_or(0, |p| p.len()) + 32,
            Item::Marker(_) => 0,
        })
        .sum::<usize>()
        + 256
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::prompt::Marker;

    /// `<H>…</H><B>…</B>` with BOT as the generate role: the test fixture of the walks.
    pub(crate) fn meta_hb() -> MetaTemplate {
        MetaTemplate::new(
            vec![
                RoleSpec::new("HUMAN").begin("<H>").end("</H>").into(),
                RoleSpec::new("BOT")
                    .begin("<B>")
                    .end("</B>")
                    .generate(true)
                    .into(),
            ],
            vec![],
            None,
            None,
        )
        .unwrap()
    }

    fn dlg(items: Vec<Item<'static>>) -> Vec<Item<'static>> {
        let mut v = vec![Item::Marker(Marker::new(Section::Round, Pos::Begin))];
        v.extend(items);
        v.push(Item::Marker(Marker::new(Section::Round, Pos::End)));
        v
    }

    fn h(p: &str) -> Item<'static> {
        Item::Role(RoleItem::new("HUMAN", Some(p)))
    }
    fn b(p: &str) -> Item<'static> {
        Item::Role(RoleItem::new("BOT", Some(p)))
    }

    #[test]
    fn lm_repeated_human_starts_new_round() {
        let out = meta_hb()
            .render_lm(&dlg(vec![h("a"), h("b"), b("c")]), Mode::Gen)
            .unwrap();
        assert_eq!(out, "<H>a</H><B></B><H>b</H><B>");
    }

    #[test]
    fn lm_string_inside_round_emitted_first() {
        let items = dlg(vec![h("x"), Item::Text("STR".into()), b("y")]);
        assert_eq!(
            meta_hb().render_lm(&items, Mode::Gen).unwrap(),
            "STR<H>x</H><B>"
        );
    }

    #[test]
    fn lm_empty_dialogue_renders_meta_round() {
        assert_eq!(
            meta_hb().render_lm(&dlg(vec![]), Mode::Gen).unwrap(),
            "<H></H><B>"
        );
    }

    #[test]
    fn lm_stray_end_marker_is_error() {
        let items = vec![Item::Marker(Marker::new(Section::Round, Pos::End))];
        assert_eq!(
            meta_hb().render_lm(&items, Mode::Ppl),
            Err(Error::UnbalancedEnd { item: 0 })
        );
    }

    #[test]
    fn duplicate_role_rejected() {
        let err = MetaTemplate::new(
            vec![RoleSpec::new("A").into(), RoleSpec::new("A").into()],
            vec![],
            None,
            None,
        )
        .unwrap_err();
        assert_eq!(err, Error::DuplicateRole { role: "A".into() });
    }
}
