//! The three `PromptTemplate` operations (ICE splicing, sep deletion, substitution) on arbitrary
//! bodies, tokens (empty and non-ASCII included), rows and ICE must return `Ok` or `Err`.
#![no_main]

use std::borrow::Cow;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use promptweave_core::{
    Body, Dialogue, Entries, Ice, Item, Marker, Pos, PromptTemplate, RoleItem, Section,
    Substitution,
};

#[derive(Arbitrary, Debug)]
enum FItem {
    Text(String),
    Marker(u8, bool),
    Role(bool, Option<String>),
}

#[derive(Arbitrary, Debug)]
enum FBody {
    Str(String),
    Dialogue(Option<Vec<FItem>>, Option<Vec<FItem>>, Option<Vec<FItem>>),
    Invalid,
}

#[derive(Arbitrary, Debug)]
enum FIce {
    Str(String),
    List(Vec<FItem>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    bodies: Vec<FBody>,
    ice_token: Option<String>,
    sep_token: Option<String>,
    single_pass: bool,
    row: Vec<(String, String)>,
    ice: FIce,
    label: u8,
    remain_sep: bool,
}

fn item(i: FItem) -> Item<'static> {
    match i {
        FItem::Text(s) => Item::Text(Cow::Owned(s)),
        FItem::Marker(s, begin) => Item::Marker(Marker::new(
            [Section::Begin, Section::Round, Section::End, Section::Ice][usize::from(s % 4)],
            if begin { Pos::Begin } else { Pos::End },
        )),
        FItem::Role(human, prompt) => Item::Role(RoleItem::new(
            if human { "HUMAN" } else { "BOT" },
            prompt.as_deref(),
        )),
    }
}

fn items(v: Option<Vec<FItem>>) -> Option<Vec<Item<'static>>> {
    v.map(|v| v.into_iter().map(item).collect())
}

fuzz_target!(|input: Input| {
    let bodies = input
        .bodies
        .into_iter()
        .map(|b| match b {
            FBody::Str(s) => Body::Str(s),
            FBody::Dialogue(b, r, e) => Body::Dialogue(Dialogue::new(items(b), items(r), items(e))),
            FBody::Invalid => Body::Invalid,
        })
        .collect();
    let substitution = if input.single_pass {
        Substitution::SinglePass
    } else {
        Substitution::Compat
    };
    let t = PromptTemplate::new(bodies, input.ice_token, input.sep_token, substitution);
    let mut row = Entries::with_capacity(input.row.len());
    for (k, v) in &input.row {
        row.push(k, v);
    }
    let list: Vec<Item<'static>>;
    let ice = match input.ice {
        FIce::Str(ref s) => Ice::Str(s),
        FIce::List(v) => {
            list = v.into_iter().map(item).collect();
            Ice::List(&list)
        }
    };
    let label = usize::from(input.label % 4);
    let _ = t.ice_item(&row, label);
    let _ = t.label_prompt_item(&row, ice, label, input.remain_sep);
    let _ = t.item(&row, ice);
});
