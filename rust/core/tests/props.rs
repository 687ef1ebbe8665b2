//! Property tests of the core: substitution against naive oracles, and "never panics" for the
//! meta walks and the template operations on arbitrary input, and the multimodal tag parser
//! against the reference algorithm (split / startswith / replace) with its round trips.
//!
//! The case count is proptest's default, 256 per property; set `PROPTEST_CASES` for a longer run
//! (the config is deliberately not fixed in the file, which would ignore the variable).

mod oracles;

use std::borrow::Cow;

use promptweave_core::markers::{
    AUDIO_START, CONTENT_TAG, ContentPart, IMAGE_START, Modality, TEXT_START, VIDEO_START,
    parse_content, parse_content_strict, render_content,
};
use promptweave_core::{
    Body, Dialogue, Entries, Flavor, Ice, Item, Marker, MetaEntry, MetaTemplate, Mode, Origin, Pos,
    PromptTemplate, Rendered, RoleItem, RoleSpec, RoleSpecItem, Section, Substitution, safe_format,
    single_pass_format,
};
use proptest::prelude::*;
use proptest::sample::select;

use oracles::{naive_parse, naive_safe_format, naive_single_pass};

// ---------------------------------------------------------------------------------------------
// generators
// ---------------------------------------------------------------------------------------------

/// Characters biased toward braces, with ASCII letters, whitespace and non-ASCII text: CJK,
/// emoji (4-byte UTF-8), a combining mark and a zero-width joiner.
fn any_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => Just('{'),
        4 => Just('}'),
        6 => select(vec!['a', 'b', 'c', 'x', 'k']),
        1 => select(vec![' ', '\n', '\t', '\\', ':', '!', '0']),
        1 => select(vec!['中', '文', 'é', '\u{301}', '😀', '\u{200d}', '🇫']),
        1 => any::<char>(),
    ]
}

fn small_string(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any_char(), 0..=max).prop_map(|v| v.into_iter().collect())
}

/// A key: usually a short identifier, sometimes empty, non-ASCII, or containing braces.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => select(vec!["a", "b", "c", "ab", "ba", "x", "xa", "question", "answer"])
            .prop_map(String::from),
        1 => Just(String::new()),
        1 => select(vec!["中文", "é", "e\u{301}", "😀", "a b"]).prop_map(String::from),
        2 => small_string(3),
    ]
}

/// A piece of a template or value; `Ph(i)` is the placeholder of the `i`-th key (modulo the key
/// count), `Name(i, cut)` a prefix or suffix of its bare name (so that substitutions can join
/// text into a new placeholder: `{x{a}}` with `a = y` and a key `xy`).
#[derive(Debug, Clone)]
enum Seg {
    Lit(String),
    Ph(usize),
    Name(usize, usize, bool),
    Open,
    Close,
}

fn seg() -> impl Strategy<Value = Seg> {
    prop_oneof![
        3 => small_string(4).prop_map(Seg::Lit),
        4 => any::<usize>().prop_map(Seg::Ph),
        2 => (any::<usize>(), any::<usize>(), any::<bool>()).prop_map(|(i, c, p)| Seg::Name(i, c, p)),
        1 => Just(Seg::Open),
        1 => Just(Seg::Close),
    ]
}

fn segs(max: usize) -> impl Strategy<Value = Vec<Seg>> {
    prop::collection::vec(seg(), 0..=max)
}

fn build(segs: &[Seg], keys: &[String]) -> String {
    let mut s = String::new();
    for seg in segs {
        match seg {
            Seg::Lit(l) => s.push_str(l),
            Seg::Ph(i) => {
                if keys.is_empty() {
                    s.push_str("{}");
                } else {
                    s.push('{');
                    s.push_str(&keys[i % keys.len()]);
                    s.push('}');
                }
            }
            Seg::Name(i, cut, prefix) => {
                if let Some(k) = keys.get(i % keys.len().max(1)) {
                    let bounds: Vec<usize> =
                        (0..=k.len()).filter(|&b| k.is_char_boundary(b)).collect();
                    let at = bounds[cut % bounds.len()];
                    s.push_str(if *prefix { &k[..at] } else { &k[at..] });
                }
            }
            Seg::Open => s.push('{'),
            Seg::Close => s.push('}'),
        }
    }
    s
}

/// A template and a row whose values often mention keys (so that values can chain and join).
#[derive(Debug, Clone)]
struct Case {
    template: String,
    pairs: Vec<(String, String)>,
}

impl Case {
    fn entries(&self) -> Entries<'_> {
        let mut e = Entries::with_capacity(self.pairs.len());
        for (k, v) in &self.pairs {
            e.push(k, v);
        }
        e
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(key(), 0..=5),
        segs(10),
        prop::collection::vec(segs(4), 5),
    )
        .prop_map(|(keys, tsegs, vsegs)| {
            let template = build(&tsegs, &keys);
            let pairs = keys
                .iter()
                .zip(&vsegs)
                .map(|(k, v)| (k.clone(), build(v, &keys)))
                .collect();
            Case { template, pairs }
        })
}

/// The same, with unique keys (as a Python `**kwargs` row has).
fn unique_case() -> impl Strategy<Value = Case> {
    case().prop_map(|mut c| {
        let mut seen = Vec::<String>::new();
        c.pairs.retain(|(k, _)| {
            if seen.contains(k) {
                false
            } else {
                seen.push(k.clone());
                true
            }
        });
        c
    })
}

// ---------------------------------------------------------------------------------------------
// oracles
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// (a)-(c) substitution
// ---------------------------------------------------------------------------------------------

proptest! {
    /// (a) `safe_format` (fast path or sequential fallback) equals the literal reference algorithm.
    #[test]
    fn safe_format_equals_sequential_oracle(c in unique_case()) {
        let got = safe_format(&c.template, &c.entries());
        prop_assert_eq!(got.as_ref(), naive_safe_format(&c.template, &c.pairs));
    }

    /// (a'') a substituted value joins template text into a placeholder of a later key:
    /// `pre{l{k}r}post` with `k = v` and a later key `lvr` (and variations of the braces).
    #[test]
    fn safe_format_join_into_new_placeholder(
        pre in small_string(3),
        l in small_string(2),
        k in key(),
        v in small_string(2),
        r in small_string(2),
        post in small_string(3),
        joined_value in small_string(3),
        joined_first in prop::bool::weighted(0.2),
        extra_open in any::<bool>(),
    ) {
        let lead = if extra_open { "{{" } else { "{" };
        let template = format!("{pre}{lead}{l}{{{k}}}{r}}}{post}");
        let joined = format!("{l}{v}{r}");
        let mut pairs = vec![(k.clone(), v.clone()), (joined, joined_value)];
        if joined_first {
            pairs.reverse();
        }
        if pairs[0].0 == pairs[1].0 {
            pairs.pop();
        }
        let mut e = Entries::default();
        for (pk, pv) in &pairs {
            e.push(pk, pv);
        }
        let got = safe_format(&template, &e);
        prop_assert_eq!(got.as_ref(), naive_safe_format(&template, &pairs));
    }

    /// (a') duplicate keys (possible through `Entries::push`) are replaced in order too.
    #[test]
    fn safe_format_equals_sequential_oracle_with_duplicate_keys(c in case()) {
        let got = safe_format(&c.template, &c.entries());
        prop_assert_eq!(got.as_ref(), naive_safe_format(&c.template, &c.pairs));
    }

    /// (a'') fully random strings over the brace-heavy alphabet (no structure imposed).
    #[test]
    fn safe_format_equals_oracle_on_unstructured_strings(
        template in small_string(24),
        pairs in prop::collection::vec((small_string(3), small_string(6)), 0..=4),
    ) {
        let mut e = Entries::default();
        for (k, v) in &pairs {
            e.push(k, v);
        }
        let got = safe_format(&template, &e);
        prop_assert_eq!(got.as_ref(), naive_safe_format(&template, &pairs));
    }

    /// `Entries::set` keeps an existing key's position (output masking) and appends a new one.
    #[test]
    fn safe_format_after_set_equals_oracle(c in unique_case(), k in key(), v in small_string(4)) {
        let mut e = c.entries();
        e.set(&k, &v);
        let mut pairs = c.pairs.clone();
        match pairs.iter_mut().find(|(pk, _)| *pk == k) {
            Some(p) => p.1.clone_from(&v),
            None => pairs.push((k.clone(), v.clone())),
        }
        let got = safe_format(&c.template, &e);
        prop_assert_eq!(got.as_ref(), naive_safe_format(&c.template, &pairs));
    }

    /// (b) a template without `{` comes back unchanged (and borrowed).
    #[test]
    fn safe_format_without_open_brace_is_identity(
        template in small_string(24).prop_map(|s| s.replace('{', "")),
        c in case(),
    ) {
        let got = safe_format(&template, &c.entries());
        prop_assert!(matches!(got, std::borrow::Cow::Borrowed(_)));
        prop_assert_eq!(got.as_ref(), template.as_str());
        let got = single_pass_format(&template, &c.entries());
        prop_assert_eq!(got.as_ref(), template.as_str());
    }

    /// (c) `single_pass_format` equals a char-level single-scan oracle.
    #[test]
    fn single_pass_equals_oracle(c in case()) {
        let got = single_pass_format(&c.template, &c.entries());
        prop_assert_eq!(got.as_ref(), naive_single_pass(&c.template, &c.pairs));
    }

    /// (c') values are never rescanned: for a template made only of brace-free text and
    /// placeholders of brace-free keys, the output is exactly the values and the text, whatever
    /// the values contain (including `{other_key}`).
    #[test]
    fn single_pass_never_rescans_values(
        keys in prop::collection::vec(
            select(vec!["a", "b", "c", "中", "😀", ""]).prop_map(String::from), 1..=4),
        parts in prop::collection::vec(
            prop_oneof![
                small_string(4).prop_map(|s| Err(s.replace(['{', '}'], ""))),
                any::<usize>().prop_map(Ok),
            ],
            0..=8),
        vsegs in prop::collection::vec(segs(4), 4),
    ) {
        let mut uniq: Vec<String> = Vec::new();
        for k in keys {
            if !uniq.contains(&k) {
                uniq.push(k);
            }
        }
        let pairs: Vec<(String, String)> = uniq
            .iter()
            .zip(&vsegs)
            .map(|(k, v)| (k.clone(), build(v, &uniq)))
            .collect();
        let mut template = String::new();
        let mut expected = String::new();
        for p in &parts {
            match p {
                Err(text) => {
                    template.push_str(text);
                    expected.push_str(text);
                }
                Ok(i) => {
                    let (k, v) = &pairs[i % pairs.len()];
                    template.push('{');
                    template.push_str(k);
                    template.push('}');
                    expected.push_str(v);
                }
            }
        }
        let mut e = Entries::default();
        for (k, v) in &pairs {
            e.push(k, v);
        }
        let got = single_pass_format(&template, &e);
        prop_assert_eq!(got.as_ref(), expected.as_str());
    }
}

#[test]
fn single_pass_value_with_other_placeholder_stays_literal() {
    let mut e = Entries::default();
    e.push("a", "{b}");
    e.push("b", "B");
    assert_eq!(single_pass_format("{a}|{b}", &e), "{b}|B");
    assert_eq!(safe_format("{a}|{b}", &e), "B|B");
}

#[test]
fn oracles_agree_with_documented_examples() {
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    };
    assert_eq!(
        naive_safe_format("{a}{b}", &pairs(&[("a", "{b}"), ("b", "B")])),
        "BB"
    );
    assert_eq!(
        naive_safe_format("{x{a}}", &pairs(&[("a", "y"), ("xy", "Z")])),
        "Z"
    );
    assert_eq!(naive_single_pass("{x{a}}", &pairs(&[("a", "y")])), "{xy}");
    assert_eq!(
        naive_single_pass("{{a}} {a", &pairs(&[("a", "X")])),
        "{X} {a"
    );
}

// ---------------------------------------------------------------------------------------------
// (d) meta walks never panic
// ---------------------------------------------------------------------------------------------

fn role_name() -> impl Strategy<Value = String> {
    prop_oneof![
        30 => select(vec!["HUMAN", "BOT", "SYSTEM"]).prop_map(String::from),
        2 => select(vec!["", "人类", "UNKNOWN"]).prop_map(String::from),
        1 => small_string(3),
    ]
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    prop::option::of(small_string(4))
}

fn section() -> impl Strategy<Value = Section> {
    select(vec![
        Section::Begin,
        Section::Round,
        Section::End,
        Section::Ice,
    ])
}

fn marker() -> impl Strategy<Value = Marker> {
    (section(), select(vec![Pos::Begin, Pos::End])).prop_map(|(s, p)| Marker::new(s, p))
}

fn role_item() -> impl Strategy<Value = RoleItem<'static>> {
    (
        prop::option::weighted(0.95, role_name()),
        prop::option::weighted(0.3, role_name()),
        prop::option::weighted(0.2, small_string(3)),
        prop::option::weighted(0.2, small_string(3)),
        prop::option::weighted(0.2, role_name()),
        prop::option::weighted(0.2, any::<bool>()),
        prop::option::weighted(0.8, small_string(6)),
        0u32..4,
    )
        .prop_map(
            |(role, fallback_role, begin, end, api_role, generate, prompt, origin)| RoleItem {
                spec: RoleSpecItem {
                    role: role.map(Cow::Owned),
                    fallback_role: fallback_role.map(Cow::Owned),
                    begin: begin.map(Cow::Owned),
                    end: end.map(Cow::Owned),
                    api_role: api_role.map(Cow::Owned),
                    generate,
                    origin: match origin {
                        0 => Origin::None,
                        1 => Origin::Template(origin),
                        _ => Origin::Input(origin),
                    },
                },
                prompt: prompt.map(Cow::Owned),
            },
        )
}

fn text_item(s: String) -> Item<'static> {
    Item::Text(Cow::Owned(s))
}

/// A non-marker item.
fn content_item() -> impl Strategy<Value = Item<'static>> {
    prop_oneof![
        1 => small_string(5).prop_map(text_item),
        1 => prop_oneof![Just(String::new()), Just(" \n\t\u{1c}".to_owned())].prop_map(text_item),
        5 => role_item().prop_map(Item::Role),
    ]
}

/// Any item, markers included.
fn any_item() -> impl Strategy<Value = Item<'static>> {
    prop_oneof![
        3 => content_item(),
        1 => marker().prop_map(Item::Marker),
    ]
}

/// Mostly balanced prompts: sections wrapping content, some stray items between them.
fn structured_items() -> impl Strategy<Value = Vec<Item<'static>>> {
    prop::collection::vec(
        (
            section(),
            prop::collection::vec(content_item(), 0..6),
            prop::option::weighted(0.15, any_item()),
            prop::bool::weighted(0.1),
        ),
        0..4,
    )
    .prop_map(|sections| {
        let mut v = Vec::new();
        for (s, content, stray, end_as_end) in sections {
            // the dialogue encoding opens the `end` section with a `pos = end` marker
            let open = if s == Section::End && end_as_end {
                Pos::End
            } else {
                Pos::Begin
            };
            v.push(Item::Marker(Marker::new(s, open)));
            v.extend(content);
            v.push(Item::Marker(Marker::new(s, Pos::End)));
            v.extend(stray);
        }
        v
    })
}

fn items() -> impl Strategy<Value = Vec<Item<'static>>> {
    prop_oneof![
        4 => structured_items(),
        1 => prop::collection::vec(any_item(), 0..12),
    ]
}

fn role_spec() -> impl Strategy<Value = RoleSpec> {
    (
        role_name(),
        opt_text(),
        opt_text(),
        prop::option::weighted(0.3, small_string(4)),
        any::<bool>(),
        prop::option::weighted(0.8, role_name()),
    )
        .prop_map(|(name, begin, end, prompt, generate, api_role)| RoleSpec {
            name,
            begin,
            end,
            prompt,
            generate,
            api_role,
        })
}

/// A usually valid meta template: `HUMAN`/`BOT` round roles (sometimes with text between them)
/// and a reserved `SYSTEM`, all with `api_role`s.
fn plain_meta_template() -> impl Strategy<Value = Result<MetaTemplate, promptweave_core::Error>> {
    (
        opt_text(),
        opt_text(),
        opt_text(),
        opt_text(),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.8),
        opt_text(),
        opt_text(),
    )
        .prop_map(|(hb, he, bb, be, text, reserved, begin, end)| {
            let human = RoleSpec {
                begin: hb,
                end: he,
                ..RoleSpec::new("HUMAN").api_role("HUMAN")
            };
            let bot = RoleSpec {
                begin: bb,
                end: be,
                ..RoleSpec::new("BOT").api_role("BOT").generate(true)
            };
            let mut round = vec![MetaEntry::Role(human)];
            if text {
                round.push(MetaEntry::Text("\n".into()));
            }
            round.push(MetaEntry::Role(bot));
            let reserved = if reserved {
                vec![RoleSpec::new("SYSTEM").api_role("SYSTEM")]
            } else {
                vec![]
            };
            MetaTemplate::new(round, reserved, begin, end)
        })
}

fn meta_template() -> impl Strategy<Value = Result<MetaTemplate, promptweave_core::Error>> {
    prop_oneof![
        1 => plain_meta_template(),
        1 => arbitrary_meta_template(),
    ]
}

fn arbitrary_meta_template() -> impl Strategy<Value = Result<MetaTemplate, promptweave_core::Error>>
{
    (
        prop::collection::vec(
            prop_oneof![
                4 => role_spec().prop_map(MetaEntry::Role),
                1 => small_string(3).prop_map(MetaEntry::Text),
            ],
            0..5,
        ),
        prop::collection::vec(role_spec(), 0..3),
        opt_text(),
        opt_text(),
    )
        .prop_map(|(round, reserved, begin, end)| MetaTemplate::new(round, reserved, begin, end))
}

proptest! {
    /// (d) the LM and API walks return `Ok` or `Err` on anything (a panic fails the test).
    /// Also: gen mode renders a prefix of ppl mode, and never fails where ppl succeeds.
    #[test]
    fn meta_walks_never_panic(meta in meta_template(), items in items()) {
        let Ok(meta) = meta else { return Ok(()) };
        let gen_lm = meta.render_lm(&items, Mode::Gen);
        let ppl_lm = meta.render_lm(&items, Mode::Ppl);
        if let Ok(ppl) = &ppl_lm {
            let gen_out = gen_lm.as_ref();
            prop_assert!(gen_out.is_ok(), "ppl ok but gen failed: {:?}", gen_out);
            if let Ok(g) = gen_out {
                prop_assert!(ppl.starts_with(g.as_str()), "gen {:?} not a prefix of ppl {:?}", g, ppl);
            }
        }
        for mode in [Mode::Gen, Mode::Ppl] {
            for flavor in [Flavor::OpenCompass, Flavor::AisBench] {
                if let Ok(out) = meta.render_api(&items, mode, flavor) {
                    prop_assert!(!out.messages.is_empty());
                    for w in out.messages.windows(2) {
                        prop_assert_ne!(&w[0].role, &w[1].role);
                    }
                }
            }
        }
    }
}

/// A meta template compiled from well-formed round roles always renders a well-formed dialogue.
#[test]
fn meta_walks_render_simple_dialogue() {
    let meta = MetaTemplate::new(
        vec![
            RoleSpec::new("HUMAN")
                .begin("<H>")
                .end("</H>")
                .api_role("HUMAN")
                .into(),
            RoleSpec::new("BOT")
                .begin("<B>")
                .end("</B>")
                .api_role("BOT")
                .generate(true)
                .into(),
        ],
        vec![],
        None,
        None,
    )
    .unwrap();
    let items = vec![
        Item::Marker(Marker::new(Section::Round, Pos::Begin)),
        Item::Role(RoleItem::new("HUMAN", Some("中文😀"))),
        Item::Role(RoleItem::new("BOT", Some("e\u{301}"))),
        Item::Marker(Marker::new(Section::Round, Pos::End)),
    ];
    assert_eq!(
        meta.render_lm(&items, Mode::Ppl).unwrap(),
        "<H>中文😀</H><B>e\u{301}</B>"
    );
    let api = meta
        .render_api(&items, Mode::Gen, Flavor::OpenCompass)
        .unwrap();
    assert_eq!(api.messages.len(), 1);
    assert_eq!(api.messages[0].prompt, "<H>中文😀</H>");
}

// ---------------------------------------------------------------------------------------------
// (e) ICE splicing never panics
// ---------------------------------------------------------------------------------------------

/// A token: usually `</E>`/`<SEP>`-like, sometimes empty, non-ASCII or brace-laden.
fn token() -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(
        0.8,
        prop_oneof![
            4 => select(vec!["</E>", "<SEP>", "中", "😀", "e\u{301}", "{a}", "a"])
                .prop_map(String::from),
            1 => Just(String::new()),
            2 => small_string(3),
        ],
    )
}

/// Text that often contains the tokens and placeholders.
fn spliced_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => small_string(3),
            2 => select(vec!["</E>", "<SEP>", "{a}", "{b}", "{question}", "中", "😀"])
                .prop_map(String::from),
        ],
        0..6,
    )
    .prop_map(|v| v.concat())
}

fn dialogue_items() -> impl Strategy<Value = Vec<Item<'static>>> {
    prop::collection::vec(
        prop_oneof![
            1 => spliced_text().prop_map(text_item),
            2 => (role_item(), prop::option::weighted(0.9, spliced_text())).prop_map(|(mut r, p)| {
                r.prompt = p.map(Cow::Owned);
                Item::Role(r)
            }),
        ],
        0..4,
    )
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        4 => spliced_text().prop_map(Body::Str),
        4 => (
            prop::option::of(dialogue_items()),
            prop::option::weighted(0.9, dialogue_items()),
            prop::option::of(dialogue_items()),
        )
            .prop_map(|(b, r, e)| Body::Dialogue(Dialogue::new(b, r, e))),
        1 => Just(Body::Invalid),
    ]
}

#[derive(Debug, Clone)]
enum IceArg {
    Str(String),
    List(Vec<Item<'static>>),
}

fn ice_arg() -> impl Strategy<Value = IceArg> {
    prop_oneof![
        spliced_text().prop_map(IceArg::Str),
        prop::collection::vec(any_item(), 0..5).prop_map(IceArg::List),
    ]
}

impl IceArg {
    fn ice(&self) -> Ice<'_, 'static> {
        match self {
            Self::Str(s) => Ice::Str(s),
            Self::List(l) => Ice::List(l),
        }
    }
}

fn row() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec(
        (
            select(vec!["a", "b", "question", "answer", ""]).prop_map(String::from),
            spliced_text(),
        ),
        0..4,
    )
}

fn entries(pairs: &[(String, String)]) -> Entries<'_> {
    let mut e = Entries::default();
    for (k, v) in pairs {
        e.push(k, v);
    }
    e
}

proptest! {
    /// (e) the three template operations return `Ok` or `Err` whatever the tokens, bodies,
    /// labels and ICE (string or item list) are.
    #[test]
    fn template_ops_never_panic(
        bodies in prop_oneof![
            9 => prop::collection::vec(body(), 1..3),
            1 => Just(Vec::new()),
        ],
        ice_token in token(),
        sep_token in token(),
        single_pass in any::<bool>(),
        pairs in row(),
        ice in ice_arg(),
        label in 0usize..4,
        remain_sep in any::<bool>(),
    ) {
        let substitution = if single_pass { Substitution::SinglePass } else { Substitution::Compat };
        let t = PromptTemplate::new(bodies, ice_token, sep_token, substitution);
        let row = entries(&pairs);
        let _ = t.ice_item(&row, label);
        let _ = t.label_prompt_item(&row, ice.ice(), label, remain_sep);
        let _ = t.item(&row, ice.ice());
        if let Ok(Rendered::List(items)) = t.item(&row, ice.ice()) {
            // a rendered dialogue can go straight into the walks
            if let Ok(meta) = MetaTemplate::new(
                vec![
                    RoleSpec::new("HUMAN").api_role("HUMAN").into(),
                    RoleSpec::new("BOT").api_role("BOT").generate(true).into(),
                ],
                vec![RoleSpec::new("SYSTEM").api_role("SYSTEM")],
                None,
                None,
            ) {
                let _ = meta.render_lm(&items, Mode::Gen);
                let _ = meta.render_api(&items, Mode::Gen, Flavor::OpenCompass);
            }
        }
    }

    /// Compat string templates follow the documented order of operations exactly, with
    /// Python's `str.replace` (Rust's `str::replace` agrees, empty pattern included).
    #[test]
    fn compat_str_template_matches_spec_order(
        template in spliced_text(),
        ice_token in token(),
        sep_token in token(),
        pairs in row(),
        ice in spliced_text(),
        remain_sep in any::<bool>(),
    ) {
        let t = PromptTemplate::new(
            vec![Body::Str(template.clone())],
            ice_token.clone(),
            sep_token.clone(),
            Substitution::Compat,
        );
        let row = entries(&pairs);
        let fmt = |s: &str| naive_safe_format(s, &pairs);
        let del = |s: &str, tok: &Option<String>| match tok {
            Some(tok) => s.replace(tok.as_str(), ""),
            None => s.to_owned(),
        };
        let put = |s: &str| match &ice_token {
            Some(tok) => s.replace(tok.as_str(), &ice),
            None => s.to_owned(),
        };
        // generate_ice_item: sep kept, token deleted, then substitution
        prop_assert_eq!(
            t.ice_item(&row, 0).unwrap(),
            Rendered::Str(fmt(&del(&template, &ice_token)))
        );
        // generate_label_prompt_item: sep deleted first (unless kept), then the ICE goes in
        let sep_done = if remain_sep { template.clone() } else { del(&template, &sep_token) };
        prop_assert_eq!(
            t.label_prompt_item(&row, Ice::Str(&ice), 0, remain_sep).unwrap(),
            Rendered::Str(fmt(&put(&sep_done)))
        );
        // generate_item: the ICE goes in first, then the sep token is deleted (inside it too)
        prop_assert_eq!(
            t.item(&row, Ice::Str(&ice)).unwrap(),
            Rendered::Str(fmt(&del(&put(&template), &sep_token)))
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (f) multimodal content tags
// ---------------------------------------------------------------------------------------------

const TAGS: [&str; 5] = [
    TEXT_START,
    IMAGE_START,
    VIDEO_START,
    AUDIO_START,
    CONTENT_TAG,
];

/// A content string: tags, partial and unknown tags, stray `<`/`>`, and unicode text.
fn content() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            6 => select(TAGS.to_vec()).prop_map(String::from),
            2 => select(vec![
                "<AIS_", "<AIS_TEXT", "<AIS_TEXT_START", "AIS_TEXT_START>", "<AIS_CONTENT_TA",
                "<AIS_PDF_START>", "<AIS_>", "<AIS_x>", "<AIS_ >", "<", ">", "<<", "<AIS_<AIS_",
            ])
            .prop_map(String::from),
            5 => small_string(4),
        ],
        0..12,
    )
    .prop_map(|v| v.concat())
}

fn owned(parts: &[ContentPart<'_>]) -> Vec<(Modality, String)> {
    parts
        .iter()
        .map(|p| (p.modality, p.payload.to_string()))
        .collect()
}

fn modality() -> impl Strategy<Value = Modality> {
    select(Modality::ALL.to_vec())
}

proptest! {
    /// (f) the one-pass parser equals the reference's split/startswith/replace algorithm.
    #[test]
    fn parse_content_equals_reference_algorithm(c in content()) {
        prop_assert_eq!(owned(&parse_content(&c)), naive_parse(&c));
    }

    /// (f) strict parsing never panics; on success it agrees with the compat parser and
    /// renders back to the input; an error names a tag found at its character position.
    #[test]
    fn parse_content_strict_is_consistent(c in content()) {
        match parse_content_strict(&c) {
            Ok(parts) => {
                prop_assert_eq!(&parts, &parse_content(&c));
                prop_assert_eq!(render_content(&parts), c);
            }
            Err(err) => {
                let (tag, position) = err.tag_location().expect("a content error");
                let rest: String = c.chars().skip(position).collect();
                prop_assert!(position < c.chars().count());
                if let Some(tag) = tag {
                    prop_assert!(rest.starts_with(tag), "{} not at {}", tag, position);
                }
            }
        }
    }

    /// (f) parse(render(parts)) == parts when no payload holds the terminator or its own tag.
    #[test]
    fn render_then_parse_round_trips(
        raw in prop::collection::vec((modality(), content()), 0..5),
    ) {
        let parts: Vec<ContentPart<'_>> = raw
            .iter()
            .filter(|(m, p)| !p.contains(CONTENT_TAG) && !p.contains(m.start_tag()))
            .map(|(m, p)| ContentPart::new(*m, p.as_str()))
            .collect();
        let rendered = render_content(&parts);
        prop_assert_eq!(&parse_content(&rendered), &parts);
        let canonical = parts.iter().all(|p| !p.payload.is_empty() && !p.payload.contains("<AIS_"));
        if canonical {
            prop_assert_eq!(parse_content_strict(&rendered), Ok(parts));
        }
    }
}
