//! The API walk (`APITemplateParser.parse_template`): a prompt list becomes role messages.

use crate::error::{Error, Result};
use crate::meta::{Merged, MetaTemplate, Mode, RoundSlot, Step};
use crate::prompt::Item;

/// Which reference framework's behaviour to reproduce where they differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flavor {
    /// OpenCompass 0.5.4
    #[default]
    OpenCompass,
    /// AISBench 3.1
    AisBench,
}

/// One message `{'role': api_role, 'prompt': text}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiMessage {
    /// the emitted role (`api_role`)
    pub role: String,
    /// `begin + prompt + end` of the role
    pub prompt: String,
}

/// The result of the API walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiOutput {
    /// the meta `begin`, which the reference inserts as the first list element when truthy
    pub begin: Option<String>,
    /// the messages, consecutive equal roles merged with `'\n'`
    pub messages: Vec<ApiMessage>,
    /// how many non-blank text items were ignored (the reference warns once per item)
    pub ignored_texts: usize,
}

/// Python's `str.isspace` for one character.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

impl MetaTemplate {
    /// `APITemplateParser.parse_template` for one prompt list.
    pub fn render_api(&self, items: &[Item<'_>], mode: Mode, flavor: Flavor) -> Result<ApiOutput> {
        let mut msgs: Vec<ApiMessage> = Vec::new();
        let mut ignored_texts = 0;
        self.walk(items, mode, true, |step| match step {
            Step::Text(s) => {
                if !s.chars().all(py_space) {
                    ignored_texts += 1;
                }
                Ok(true)
            }
            Step::Round { merged, for_gen } => self.api_round(merged, for_gen, flavor, &mut msgs),
            Step::Single { item, role, merged } => {
                if mode == Mode::Gen && merged.generate {
                    return Err(Error::GenerateOutsideRound { item });
                }
                msgs.push(self.message(role, merged, flavor)?);
                Ok(true)
            }
        })?;
        let messages = merge_same_roles(msgs)?;
        let begin = self.begin.clone().filter(|b| !b.is_empty());
        Ok(ApiOutput {
            begin,
            messages,
            ignored_texts,
        })
    }

    fn message(&self, idx: usize, m: Merged<'_>, flavor: Flavor) -> Result<ApiMessage> {
        let name = &self.roles[idx].name;
        let role = m
            .api_role
            .ok_or_else(|| Error::MissingApiRole { role: name.clone() })?;
        if flavor == Flavor::AisBench && m.prompt.is_none() {
            return Err(Error::MissingPrompt { role: name.clone() });
        }
        let (b, p, e) = (
            m.begin.unwrap_or(""),
            m.prompt.unwrap_or(""),
            m.end.unwrap_or(""),
        );
        let mut prompt = String::with_capacity(b.len() + p.len() + e.len());
        prompt.push_str(b);
        prompt.push_str(p);
        prompt.push_str(e);
        Ok(ApiMessage {
            role: role.to_owned(),
            prompt,
        })
    }

    /// One round in meta order; `false` when generation stopped.
    fn api_round(
        &self,
        merged: &[Merged<'_>],
        for_gen: bool,
        flavor: Flavor,
        out: &mut Vec<ApiMessage>,
    ) -> Result<bool> {
        for slot in &self.round {
            match slot {
                RoundSlot::Text(_) => return Err(Error::StrInApiRound),
                RoundSlot::Role(idx) => {
                    let m = merged[*idx];
                    if for_gen && m.generate {
                        return Ok(false);
                    }
                    out.push(self.message(*idx, m, flavor)?);
                }
            }
        }
        Ok(true)
    }
}

fn merge_same_roles(msgs: Vec<ApiMessage>) -> Result<Vec<ApiMessage>> {
    if msgs.is_empty() {
        return Err(Error::EmptyResult);
    }
    let mut out: Vec<ApiMessage> = Vec::with_capacity(msgs.len());
    for m in msgs {
        match out.last_mut() {
            Some(last) if last.role == m.role => {
                last.prompt.push('\n');
                last.prompt.push_str(&m.prompt);
            }
            _ => out.push(m),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::RoleSpec;
    use crate::prompt::{Marker, Pos, RoleItem, Section};

    fn api_hb() -> MetaTemplate {
        MetaTemplate::new(
            vec![
                RoleSpec::new("HUMAN").api_role("HUMAN").into(),
                RoleSpec::new("BOT").api_role("BOT").generate(true).into(),
            ],
            vec![],
            None,
            None,
        )
        .unwrap()
    }

    fn round(items: Vec<Item<'static>>) -> Vec<Item<'static>> {
        let mut v = vec![Item::Marker(Marker::new(Section::Round, Pos::Begin))];
        v.extend(items);
        v.push(Item::Marker(Marker::new(Section::Round, Pos::End)));
        v
    }

    #[test]
    fn api_missing_role_renders_empty_in_opencompass() {
        let items = round(vec![
            Item::Role(RoleItem::new("HUMAN", Some("a"))),
            Item::Role(RoleItem::new("HUMAN", Some("b"))),
            Item::Role(RoleItem::new("BOT", Some(""))),
        ]);
        let out = api_hb()
            .render_api(&items, Mode::Gen, Flavor::OpenCompass)
            .unwrap();
        let got: Vec<_> = out
            .messages
            .iter()
            .map(|m| (m.role.as_str(), m.prompt.as_str()))
            .collect();
        assert_eq!(got, vec![("HUMAN", "a"), ("BOT", ""), ("HUMAN", "b")]);
        let err = api_hb()
            .render_api(&items, Mode::Gen, Flavor::AisBench)
            .unwrap_err();
        assert_eq!(err, Error::MissingPrompt { role: "BOT".into() });
    }

    #[test]
    fn api_nothing_rendered_is_error() {
        let items = round(vec![Item::Role(RoleItem::new("BOT", Some("")))]);
        // the first round stops at BOT in gen mode, after HUMAN: one message
        let out = api_hb()
            .render_api(&items, Mode::Gen, Flavor::OpenCompass)
            .unwrap();
        assert_eq!(out.messages.len(), 1);
        assert_eq!(
            api_hb().render_api(&[], Mode::Gen, Flavor::OpenCompass),
            Err(Error::EmptyResult)
        );
    }
}
