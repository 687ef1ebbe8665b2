//! # promptweave-core
//!
//! The pure-Rust rendering core of promptweave: it turns dataset rows into the exact prompts that
//! OpenCompass 0.5.4 and AISBench 3.1 build, byte for byte. It has no Python dependency; the
//! `promptweave-py` crate binds it and the Python package mirrors the reference classes.
//!
//! * [`format`]: placeholder substitution with the reference's order-dependent `safe_format`
//!   semantics ([`safe_format`]), a provably equivalent single-scan fast path, and the opt-in
//!   single-pass substitution ([`single_pass_format`]).
//! * [`prompt`]: the `PromptList` intermediate form: text items, role items, section markers.
//! * [`template`]: a compiled `PromptTemplate` (string, dialogue or label-dict template) and its
//!   three operations (in-context example, PPL label prompt, generation prompt).
//! * [`splice`]: replacing the ice token by an in-context example (text or item list).
//! * [`meta`]: a compiled model meta template and the LM walk (one string, `gen`/`ppl`).
//! * [`api`]: the API walk (role messages, merged) used by API and chat models.
//! * [`dataset`]: the whole-dataset job (ICE per distinct index list, every row rendered).
//! * [`program`]: a shared ICE group's output compiled into literals and column slots.
//! * [`chat`]: HuggingFace tokenizer chat templates (Jinja), rendered as transformers renders them.
//! * [`markers`]: the `<AIS_*>` tag grammar of AISBench multimodal `content` strings.
//!
//! ```
//! use promptweave_core::{safe_format, Entries};
//! let mut row = Entries::default();
//! row.push("a", "{b}");
//! row.push("b", "B");
//! // the value of `a` is scanned again by the later key `b`, as in the reference
//! assert_eq!(safe_format("{a}{b}", &row), "BB");
//! ```
//!
//! ```
//! use promptweave_core::{Item, Mode, MetaTemplate, RoleSpec, RoleItem, Marker, Section, Pos};
//! let meta = MetaTemplate::new(
//!     vec![
//!         RoleSpec::new("HUMAN").begin("<H>").end("</H>").into(),
//!         RoleSpec::new("BOT").begin("<B>").end("</B>").generate(true).into(),
//!     ],
//!     vec![],
//!     None,
//!     None,
//! )
//! .unwrap();
//! let prompt = vec![
//!     Item::Marker(Marker::new(Section::Round, Pos::Begin)),
//!     Item::Role(RoleItem::new("HUMAN", Some("1+1=?"))),
//!     Item::Role(RoleItem::new("BOT", Some("2"))),
//!     Item::Marker(Marker::new(Section::Round, Pos::End)),
//! ];
//! assert_eq!(meta.render_lm(&prompt, Mode::Gen).unwrap(), "<H>1+1=?</H><B>");
//! assert_eq!(meta.render_lm(&prompt, Mode::Ppl).unwrap(), "<H>1+1=?</H><B>2</B>");
//! ```
//!
//! ## Design notes
//!
//! * Sequential `safe_format` costs one whole-string pass per row column in the reference. The
//!   fast path scans the template once and is taken only when it is provably equivalent (every
//!   `{` is closed before the next `{`, no key contains a brace, no substituted value contains a
//!   brace); otherwise the sequential algorithm runs, so output never differs.
//! * Templates are compiled once; per row only substitution and splicing run.
//! * Role items share their static part (`Arc<RoleSpecItem>`), so cloning a template's items per
//!   row costs one reference-count increment per role item plus the prompt text.
//! * No threads, no I/O, no globals: parallelism is the caller's decision.
#![deny(missing_docs)]

pub mod api;
pub mod chat;
pub mod chat_fast;
pub mod chat_gen;
mod chat_printf;
pub mod dataset;
pub mod error;
pub mod format;
pub mod markers;
pub mod meta;
pub mod program;
pub mod prompt;
pub mod splice;
pub mod template;

pub use api::{ApiMessage, ApiOutput, Flavor};
pub use dataset::{IceGroups, IceValue, Job, Output, Parser, Prepared, Table, Task, render_rows};
pub use error::{Error, Result};
pub use format::{Entries, safe_format, single_pass_format};
pub use markers::{ContentPart, Modality, parse_content, parse_content_strict, render_content};
pub use meta::{MetaEntry, MetaTemplate, Mode, RoleSpec};
pub use program::{Compiled, Program, Segment};
pub use prompt::{Item, Marker, Origin, Pos, RoleItem, RoleSpecItem, Section, join_plain};
pub use splice::Ice;
pub use template::{Body, Dialogue, PromptTemplate, Rendered, Substitution};
