//! The LM and API walks on arbitrary prompt lists and meta templates must return `Ok` or `Err`,
//! never panic. Also checks two invariants: gen mode renders a prefix of ppl mode and never
//! fails where ppl succeeds; API output has no two consecutive messages with the same role.
#![no_main]

use std::borrow::Cow;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use promptweave_core::{
    Flavor, Item, Marker, MetaEntry, MetaTemplate, Mode, Origin, Pos, RoleItem, RoleSpec,
    RoleSpecItem, Section,
};

/// A role name: mostly from a small pool so that items and meta roles meet.
#[derive(Arbitrary, Debug)]
enum Name {
    Human,
    Bot,
    System,
    Empty,
    Other(String),
}

impl Name {
    fn get(self) -> String {
        match self {
            Self::Human => "HUMAN".into(),
            Self::Bot => "BOT".into(),
            Self::System => "SYSTEM".into(),
            Self::Empty => String::new(),
            Self::Other(s) => s,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum FSection {
    Begin,
    Round,
    End,
    Ice,
}

#[derive(Arbitrary, Debug)]
enum FItem {
    Text(String),
    Marker(FSection, bool),
    Role {
        role: Option<Name>,
        fallback_role: Option<Name>,
        begin: Option<String>,
        end: Option<String>,
        api_role: Option<Name>,
        generate: Option<bool>,
        prompt: Option<String>,
    },
}

#[derive(Arbitrary, Debug)]
struct FRole {
    name: Name,
    begin: Option<String>,
    end: Option<String>,
    prompt: Option<String>,
    generate: bool,
    api_role: Option<Name>,
}

#[derive(Arbitrary, Debug)]
enum FEntry {
    Text(String),
    Role(FRole),
}

#[derive(Arbitrary, Debug)]
struct Input {
    round: Vec<FEntry>,
    reserved: Vec<FRole>,
    begin: Option<String>,
    end: Option<String>,
    items: Vec<FItem>,
}

fn section(s: FSection) -> Section {
    match s {
        FSection::Begin => Section::Begin,
        FSection::Round => Section::Round,
        FSection::End => Section::End,
        FSection::Ice => Section::Ice,
    }
}

fn role(r: FRole) -> RoleSpec {
    RoleSpec {
        name: r.name.get(),
        begin: r.begin,
        end: r.end,
        prompt: r.prompt,
        generate: r.generate,
        api_role: r.api_role.map(Name::get),
    }
}

fn item(i: FItem) -> Item<'static> {
    match i {
        FItem::Text(s) => Item::Text(Cow::Owned(s)),
        FItem::Marker(s, begin) => Item::Marker(Marker::new(
            section(s),
            if begin { Pos::Begin } else { Pos::End },
        )),
        FItem::Role {
            role,
            fallback_role,
            begin,
            end,
            api_role,
            generate,
            prompt,
        } => Item::Role(RoleItem {
            spec: RoleSpecItem {
                role: role.map(|n| Cow::Owned(n.get())),
                fallback_role: fallback_role.map(|n| Cow::Owned(n.get())),
                begin: begin.map(Cow::Owned),
                end: end.map(Cow::Owned),
                api_role: api_role.map(|n| Cow::Owned(n.get())),
                generate,
                origin: Origin::None,
            },
            prompt: prompt.map(Cow::Owned),
        }),
    }
}

fuzz_target!(|input: Input| {
    let round = input
        .round
        .into_iter()
        .map(|e| match e {
            FEntry::Text(s) => MetaEntry::Text(s),
            FEntry::Role(r) => MetaEntry::Role(role(r)),
        })
        .collect();
    let reserved = input.reserved.into_iter().map(role).collect();
    let Ok(meta) = MetaTemplate::new(round, reserved, input.begin, input.end) else {
        return;
    };
    let items: Vec<Item<'static>> = input.items.into_iter().map(item).collect();
    let gen_lm = meta.render_lm(&items, Mode::Gen);
    if let Ok(ppl) = meta.render_lm(&items, Mode::Ppl) {
        match &gen_lm {
            Ok(g) => assert!(
                ppl.starts_with(g.as_str()),
                "gen {g:?} not a prefix of {ppl:?}"
            ),
            Err(e) => panic!("ppl ok but gen failed: {e:?}"),
        }
    }
    for mode in [Mode::Gen, Mode::Ppl] {
        for flavor in [Flavor::OpenCompass, Flavor::AisBench] {
            if let Ok(out) = meta.render_api(&items, mode, flavor) {
                assert!(!out.messages.is_empty());
                for w in out.messages.windows(2) {
                    assert_ne!(w[0].role, w[1].role);
                }
            }
        }
    }
});
