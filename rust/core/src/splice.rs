//! Replacing the ice token (`</E>`) by an in-context example: `PromptList.replace` semantics.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::format::replace;
use crate::prompt::{Item, RoleItem};

/// An in-context example to splice in: text, or a list of items.
#[derive(Debug, Clone, Copy)]
pub enum Ice<'i, 'a> {
    /// a string (string templates, or string ICE into a dialogue)
    Str(&'i str),
    /// a prompt list (dialogue ICE)
    List(&'i [Item<'a>]),
}

/// Delete every occurrence of `token` from a string.
pub(crate) fn delete(s: &mut Cow<'_, str>, token: &str) {
    if let Cow::Owned(new) = replace(s, token, "") {
        *s = Cow::Owned(new);
    }
}

/// Delete `token` from every text item and every role prompt.
pub(crate) fn delete_in_items(items: &mut [Item<'_>], token: &str) {
    for item in items {
        match item {
            Item::Text(s) => delete(s, token),
            Item::Role(RoleItem {
                prompt: Some(p), ..
            }) => delete(p, token),
            _ => {}
        }
    }
}

/// `PromptList.replace(token, ice)` on owned items.
///
/// * string ICE: replaced inside text items and role prompts;
/// * list ICE: text items are split on the token, non-empty pieces kept, the ICE items inserted
///   between pieces; a role prompt containing the token is an error.
pub(crate) fn replace_in_items<'a>(
    items: Vec<Item<'a>>,
    token: &str,
    ice: Ice<'_, 'a>,
) -> Result<Vec<Item<'a>>> {
    match ice {
        Ice::Str(text) => {
            let mut items = items;
            for item in &mut items {
                let target = match item {
                    Item::Text(s) => s,
                    Item::Role(RoleItem {
                        prompt: Some(p), ..
                    }) => p,
                    _ => continue,
                };
                if let Cow::Owned(new) = replace(target, token, text) {
                    *target = Cow::Owned(new);
                }
            }
            Ok(items)
        }
        Ice::List(list) => {
            for (i, item) in items.iter().enumerate() {
                if let Item::Role(RoleItem {
                    prompt: Some(p), ..
                }) = item
                {
                    if p.contains(token) {
                        return Err(Error::ListIntoRolePrompt {
                            item: i,
                            token: token.into(),
                        });
                    }
                }
            }
            let mut out = Vec::with_capacity(items.len() + list.len());
            for item in items {
                match item {
                    Item::Text(s) => {
                        if token.is_empty() {
                            return Err(Error::EmptySeparator);
                        }
                        let mut pieces = s.split(token).peekable();
                        while let Some(piece) = pieces.next() {
                            if !piece.is_empty() {
                                out.push(Item::Text(Cow::Owned(piece.to_owned())));
                            }
                            if pieces.peek().is_some() {
                                out.extend(list.iter().cloned());
                            }
                        }
                    }
                    other => out.push(other),
                }
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::{Marker, Pos, Section};

    fn text(s: &str) -> Item<'static> {
        Item::Text(s.to_owned().into())
    }

    #[test]
    fn list_ice_splits_text_and_drops_empty_pieces() {
        let ice = vec![Item::Role(RoleItem::new("HUMAN", Some("i1"))), text("S")];
        let items = vec![
            text("pre</E>mid</E>"),
            text("</E>"),
            Item::Role(RoleItem::new("BOT", Some("x"))),
        ];
        let out = replace_in_items(items, "</E>", Ice::List(&ice)).unwrap();
        assert_eq!(out.len(), 9);
        assert_eq!(out[0], text("pre"));
        assert_eq!(out[3], text("mid"));
    }

    #[test]
    fn list_ice_into_role_prompt_is_error() {
        let items = vec![Item::Role(RoleItem::new("HUMAN", Some("a</E>b")))];
        let err = replace_in_items(items, "</E>", Ice::List(&[])).unwrap_err();
        assert!(matches!(err, Error::ListIntoRolePrompt { item: 0, .. }));
    }

    #[test]
    fn string_ice_replaces_text_and_prompts() {
        let items = vec![
            text("pre</E>mid</E>post"),
            Item::Role(RoleItem::new("HUMAN", Some("a</E>b"))),
            Item::Marker(Marker::new(Section::Begin, Pos::Begin)),
        ];
        let out = replace_in_items(items, "</E>", Ice::Str("ICE")).unwrap();
        assert_eq!(out[0], text("preICEmidICEpost"));
        assert_eq!(out[1], Item::Role(RoleItem::new("HUMAN", Some("aICEb"))));
    }
}
