//! Output programs: the rendering of one ICE group compiled into literal text and column slots.
//!
//! When many rows share their in-context examples (FixK, zero-shot), everything in their output
//! except the substituted column values is identical. A program is obtained by rendering a
//! *symbolic* row, whose values are unique markers, and cutting the output at the markers; a row
//! is then rendered by copying literals and its values.
//!
//! It is used only where it provably equals the full rendering:
//! * every text that substitution sees (template and in-context examples, spliced) passes the
//!   one-scan condition of [`crate::format`] (no `{` inside `{…}`), and no column name contains
//!   a brace; each row's referenced values are checked for braces before its program runs (a
//!   row that fails is rendered in full);
//! * the parse step's structure does not depend on the text (LM walks with a meta template and
//!   string prompts do; the no-meta join drops empty items, and API output is not text);
//! * the markers are unambiguous: the symbolic render is done with two different marker
//!   characters and both programs must agree, so marker-like text in a template or an example
//!   is detected and the program refused.

use crate::dataset::{IceValue, Job, Output, Parser, Task};
use crate::format::{Entries, fast_condition, has_brace};
use crate::prompt::Item;
use crate::template::Rendered;

const MARKS: [(char, char); 2] = [('\u{10FFFD}', '\u{10FFFC}'), ('\u{10FFFB}', '\u{10FFFA}')];
/// Slot index of the masked output column.
const MASK: usize = usize::MAX;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Lit(String),
    Col(usize),
}

/// A piece of a program, see [`Program::segments`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'p> {
    /// literal text
    Lit(&'p str),
    /// a column's value (`None`: the masked output column's replacement)
    Col(Option<usize>),
}

/// A compiled output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    segs: Vec<Seg>,
    literal_len: usize,
}

fn texts_ok(rendered: &Rendered<'_>) -> bool {
    match rendered {
        Rendered::Str(s) => fast_condition(s),
        Rendered::List(items) => items.iter().all(|item| match item {
            Item::Text(s) => fast_condition(s),
            Item::Role(r) => r.prompt.as_deref().is_none_or(fast_condition),
            Item::Marker(_) => true,
        }),
    }
}

fn parse(out: &str, (open, close): (char, char)) -> Program {
    let mut segs = Vec::new();
    let mut literal_len = 0;
    let mut lit = String::new();
    let mut rest = out;
    while let Some(pos) = rest.find(open) {
        let after = &rest[pos + open.len_utf8()..];
        let slot = after
            .find(close)
            .and_then(|end| after[..end].parse::<usize>().ok().map(|i| (i, end)));
        if let Some((i, end)) = slot {
            lit.push_str(&rest[..pos]);
            if !lit.is_empty() {
                literal_len += lit.len();
                segs.push(Seg::Lit(std::mem::take(&mut lit)));
            }
            segs.push(Seg::Col(i));
            rest = &after[end + close.len_utf8()..];
        } else {
            lit.push_str(&rest[..pos + open.len_utf8()]);
            rest = after;
        }
    }
    lit.push_str(rest);
    if !lit.is_empty() {
        literal_len += lit.len();
        segs.push(Seg::Lit(lit));
    }
    Program { segs, literal_len }
}

/// A compiled output: a text, or the messages of an API parser (roles fixed, prompts compiled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compiled {
    /// a string output
    Text(Program),
    /// role messages, preceded by the meta `begin` string when it is truthy
    Messages {
        /// the meta `begin`
        begin: Option<String>,
        /// `(role, prompt program)` per message
        messages: Vec<(String, Program)>,
    },
}

impl Compiled {
    /// Compile the output of `task` (gen, or one ppl label) for the rows sharing `ice`;
    /// `None` where a program would not be provably equal to the full rendering.
    pub fn build(
        job: &Job<'_>,
        columns: &[&str],
        ice: &IceValue<'_>,
        task: Task<'_>,
        label: usize,
    ) -> Option<Compiled> {
        if columns.iter().any(|c| has_brace(c)) {
            return None;
        }
        if let (Task::Gen, Some(_)) = (task, job.output_column) {
            if has_brace(job.gen_field_replace_token) {
                return None;
            }
        }
        // the spliced, not yet substituted texts (an empty row substitutes nothing)
        let empty = Entries::default();
        let unformatted = match task {
            Task::Gen => job.template.item(&empty, ice.as_ice()),
            Task::Ppl { remain_sep, .. } => {
                job.template
                    .label_prompt_item(&empty, ice.as_ice(), label, remain_sep)
            }
        }
        .ok()?;
        if !texts_ok(&unformatted) {
            return None;
        }
        // the no-meta join drops empty items: its structure depends on the values
        if matches!(unformatted, Rendered::List(_))
            && matches!(job.parser, Parser::Lm(None) | Parser::Api(None, _))
        {
            return None;
        }
        let mut compiled = MARKS.iter().map(|&marks| {
            let values: Vec<String> = (0..columns.len())
                .map(|i| format!("{}{i}{}", marks.0, marks.1))
                .collect();
            let mask = format!("{}{MASK}{}", marks.0, marks.1);
            let mut e = Entries::with_capacity(columns.len() + 1);
            for (c, v) in columns.iter().zip(&values) {
                e.push(c, v);
            }
            let out = match task {
                Task::Gen => {
                    if let Some(col) = job.output_column {
                        e.set(col, &mask);
                    }
                    job.gen_entries(&e, ice)
                }
                Task::Ppl { remain_sep, .. } => job.ppl_entries(&e, ice, label, remain_sep),
            };
            match out.ok()? {
                Output::Text(s) => Some(Compiled::Text(parse(&s, marks))),
                Output::Messages(m) => {
                    let marked = |t: &str| t.contains([marks.0, marks.1]);
                    // roles and the begin string must be literal text
                    if m.begin.as_deref().is_some_and(marked)
                        || m.messages.iter().any(|x| marked(&x.role))
                    {
                        return None;
                    }
                    let messages = m
                        .messages
                        .iter()
                        .map(|x| (x.role.clone(), parse(&x.prompt, marks)))
                        .collect();
                    Some(Compiled::Messages {
                        begin: m.begin,
                        messages,
                    })
                }
            }
        });
        let first = compiled.next()??;
        let second = compiled.next()??;
        (first == second).then_some(first)
    }
}

impl Program {
    /// The literal text when the program has no slot (the same for every row).
    pub fn literal(&self) -> Option<&str> {
        match self.segs.as_slice() {
            [] => Some(""),
            [Seg::Lit(s)] => Some(s),
            _ => None,
        }
    }

    /// The program's pieces in order: literal text, or the column whose value goes there
    /// (`None`: the masked output column's replacement).
    pub fn segments(&self) -> impl Iterator<Item = Segment<'_>> {
        self.segs.iter().map(|s| match s {
            Seg::Lit(t) => Segment::Lit(t),
            Seg::Col(i) if *i == MASK => Segment::Col(None),
            Seg::Col(i) => Segment::Col(Some(*i)),
        })
    }

    /// Render one row: `cells` are its values in column order, `mask` the masked output
    /// column's replacement. `None` if a referenced value contains a brace (the one-scan
    /// condition fails; render the row in full).
    pub fn run(&self, cells: &[&str], mask: &str) -> Option<String> {
        let mut len = self.literal_len;
        for seg in &self.segs {
            if let Seg::Col(i) = seg {
                let v = if *i == MASK { mask } else { cells.get(*i)? };
                if has_brace(v) {
                    return None;
                }
                len += v.len();
            }
        }
        let mut out = String::with_capacity(len);
        for seg in &self.segs {
            match seg {
                Seg::Lit(s) => out.push_str(s),
                Seg::Col(i) => out.push_str(if *i == MASK { mask } else { cells.get(*i)? }),
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{IceValue, Job, Parser, Task};
    use crate::template::{Body, PromptTemplate, Substitution};

    fn job(t: &PromptTemplate) -> Job<'_> {
        Job {
            template: t,
            ice_template: None,
            ice_labels: &[],
            ice_separator: "",
            ice_eos_token: "",
            output_column: Some("a"),
            gen_field_replace_token: "",
            parser: Parser::Lm(None),
        }
    }

    fn text_program(
        job: &Job<'_>,
        columns: &[&str],
        ice: &IceValue<'_>,
        task: Task<'_>,
        label: usize,
    ) -> Option<Program> {
        match Compiled::build(job, columns, ice, task, label)? {
            Compiled::Text(p) => Some(p),
            Compiled::Messages { .. } => None,
        }
    }

    fn str_template(s: &str) -> PromptTemplate {
        PromptTemplate::new(vec![Body::Str(s.into())], None, None, Substitution::Compat)
    }

    #[test]
    fn program_runs_literals_and_columns() {
        let t = str_template("Q: {q} A: {a} {missing}");
        let ice = IceValue::Str(String::new());
        let p = text_program(&job(&t), &["q", "a"], &ice, Task::Gen, 0).unwrap();
        assert_eq!(p.run(&["x", "y"], "").unwrap(), "Q: x A:  {missing}");
        // a referenced value with a brace needs the full rendering
        assert_eq!(p.run(&["{a}", "y"], ""), None);
    }

    #[test]
    fn program_refused_for_nested_braces_and_marker_text() {
        let ice = IceValue::Str(String::new());
        let nested = str_template("{x{q}}");
        assert_eq!(
            text_program(&job(&nested), &["q", "a"], &ice, Task::Gen, 0),
            None
        );
        let fake = str_template("\u{10FFFD}0\u{10FFFC} {q}");
        assert_eq!(
            text_program(&job(&fake), &["q", "a"], &ice, Task::Gen, 0),
            None
        );
        let brace_key = str_template("{q}");
        assert_eq!(
            text_program(&job(&brace_key), &["q}", "a"], &ice, Task::Gen, 0),
            None
        );
    }
}

#[cfg(test)]
mod ppl_tests {
    use crate::dataset::{IceGroups, Job, Parser, Prepared, Table, Task};
    use crate::meta::tests::meta_hb;
    use crate::prompt::{Item, RoleItem};
    use crate::template::{Body, Dialogue, PromptTemplate, Substitution};
    use std::borrow::Cow;

    fn body(answer: &str) -> Body {
        Body::Dialogue(Dialogue::new(
            Some(vec![Item::Text(Cow::Borrowed("</E>"))]),
            Some(vec![
                Item::Role(RoleItem::new("HUMAN", Some("Q: {q}"))),
                Item::Role(RoleItem::new("BOT", Some(answer))),
            ]),
            None,
        ))
    }

    #[test]
    fn label_dict_of_dialogues_compiles_per_label() {
        let t = PromptTemplate::new(
            vec![body("Answer: A"), body("Answer: B")],
            Some("</E>".into()),
            None,
            Substitution::Compat,
        );
        let meta = meta_hb();
        let cols = ["q", "a"];
        let train_cells = ["x", "A", "y", "B"];
        let train = Table::new(&cols, &train_cells).unwrap();
        let test = Table::new(&cols, &[]).unwrap();
        let job = Job {
            template: &t,
            ice_template: Some(&t),
            ice_labels: &[0, 1],
            ice_separator: "\n",
            ice_eos_token: "\n",
            output_column: Some("a"),
            gen_field_replace_token: "",
            parser: Parser::Lm(Some(&meta)),
        };
        let groups = IceGroups {
            lists: vec![vec![0, 1]],
            row_group: vec![0; 5],
        };
        let task = Task::Ppl {
            labels: &[0, 1],
            remain_sep: false,
        };
        let prepared = Prepared::new(&job, &test, &train, &groups, task).unwrap();
        assert!(prepared.program(0, 0).is_some(), "label 0 compiled");
        assert!(prepared.program(0, 1).is_some(), "label 1 compiled");
    }
}
