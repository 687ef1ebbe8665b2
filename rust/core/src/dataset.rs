//! The whole-dataset job: every test row rendered as OpenCompass's inferencers do.
//!
//! Per row: the in-context examples chosen by the retriever are rendered with the ICE template
//! and joined (`generate_ice`), the prompt template renders the row around them
//! (`generate_item` in gen mode with the output column masked, `generate_label_prompt_item` per
//! label in ppl mode), and the model side turns the prompt list into the model input
//! (`parse_template`). Each distinct list of in-context example indices is rendered once and
//! shared by the rows that use it.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::api::{ApiOutput, Flavor};
use crate::error::{Error, Result};
use crate::format::Entries;
use crate::meta::{MetaTemplate, Mode};
use crate::program::Compiled;
use crate::prompt::{Item, join_plain};
use crate::splice::Ice;
use crate::template::{PromptTemplate, Rendered};

/// Rows as a table: column names in order and the `str()` of every cell, row-major.
#[derive(Debug, Clone, Copy)]
pub struct Table<'a> {
    pub(crate) columns: &'a [&'a str],
    cells: &'a [&'a str],
}

impl<'a> Table<'a> {
    /// A table; `cells.len()` must be a multiple of `columns.len()`.
    pub fn new(columns: &'a [&'a str], cells: &'a [&'a str]) -> Option<Self> {
        let ok = if columns.is_empty() {
            cells.is_empty()
        } else {
            cells.len() % columns.len() == 0
        };
        ok.then_some(Self { columns, cells })
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.cells
            .len()
            .checked_div(self.columns.len())
            .unwrap_or(0)
    }

    /// The row's values, in column order.
    pub fn cells(&self, row: usize) -> &'a [&'a str] {
        let n = self.columns.len();
        self.cells.get(row * n..row * n + n).unwrap_or(&[])
    }

    /// The row's entries, in column order.
    pub fn entries(&self, row: usize) -> Entries<'a> {
        let n = self.columns.len();
        let mut e = Entries::with_capacity(n + 1);
        if let Some(cells) = self.cells.get(row * n..row * n + n) {
            for (k, v) in self.columns.iter().zip(cells) {
                e.push(k, v);
            }
        }
        e
    }
}

/// How the prompt becomes the model input.
#[derive(Debug, Clone, Copy)]
pub enum Parser<'a> {
    /// `LMTemplateParser`: one string (no meta template: the newline join)
    Lm(Option<&'a MetaTemplate>),
    /// `APITemplateParser`: role messages (no meta template: the newline join)
    Api(Option<&'a MetaTemplate>, Flavor),
}

/// One rendered model input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// a string (LM models; string prompts; no meta template)
    Text(String),
    /// role messages (API models with a meta template)
    Messages(ApiOutput),
}

/// The in-context examples of one row (`generate_ice`'s value).
#[derive(Debug, Clone)]
pub enum IceValue<'a> {
    /// string examples joined with the separator, plus the eos token
    Str(String),
    /// dialogue examples: prompt-list items
    List(Vec<Item<'a>>),
}

impl<'a> IceValue<'a> {
    /// A view borrowing the strings (cloning a view's items allocates nothing).
    pub fn view(&self) -> IceValue<'_> {
        match self {
            IceValue::Str(s) => IceValue::Str(s.clone()),
            IceValue::List(items) => IceValue::List(items.iter().map(Item::view).collect()),
        }
    }

    pub(crate) fn as_ice(&self) -> Ice<'_, 'a> {
        match self {
            IceValue::Str(s) => Ice::Str(s),
            IceValue::List(items) => Ice::List(items),
        }
    }
}

/// Everything that is the same for every row.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// the template that renders the prompt (the retriever's combination matrix resolved)
    pub template: &'a PromptTemplate,
    /// the template of the in-context examples, if any
    pub ice_template: Option<&'a PromptTemplate>,
    /// per train row, the ICE template body its own output value selects (label dicts)
    pub ice_labels: &'a [usize],
    /// `ice_separator` (already `''` for a dialogue ICE template, as the reference does)
    pub ice_separator: &'a str,
    /// `ice_eos_token` (likewise)
    pub ice_eos_token: &'a str,
    /// the output column, masked in gen mode
    pub output_column: Option<&'a str>,
    /// what the output column is masked with
    pub gen_field_replace_token: &'a str,
    /// the model side
    pub parser: Parser<'a>,
}

impl<'a> Job<'a> {
    /// `generate_ice(idx_list)` over the train table.
    pub fn ice(&self, train: &Table<'a>, indices: &[usize]) -> Result<IceValue<'a>> {
        let mut rendered = Vec::with_capacity(indices.len());
        if let Some(t) = self.ice_template {
            for &i in indices {
                if i >= train.rows() {
                    return Err(Error::IceIndexOutOfRange {
                        index: i,
                        rows: train.rows(),
                    });
                }
                let label = self.ice_labels.get(i).copied().unwrap_or(0);
                rendered.push(t.ice_item(&train.entries(i), label)?);
            }
        } else if !indices.is_empty() {
            return Err(Error::MissingIceTemplate);
        }
        let (sep, eos) = (self.ice_separator, self.ice_eos_token);
        if let Some(Rendered::List(_)) = rendered.first() {
            return Ok(IceValue::List(join_lists(rendered, sep, eos)));
        }
        let mut out = String::new();
        for (k, r) in rendered.into_iter().enumerate() {
            let Rendered::Str(s) = r else {
                return Err(Error::MixedIce);
            };
            if k > 0 {
                out.push_str(sep);
            }
            out.push_str(&s);
        }
        out.push_str(eos);
        Ok(IceValue::Str(out))
    }

    fn parse(&self, prompt: &Rendered<'_>, mode: Mode) -> Result<Output> {
        match (prompt, self.parser) {
            (Rendered::Str(s), _) => Ok(Output::Text(s.clone())),
            (Rendered::List(items), Parser::Lm(Some(meta))) => {
                meta.render_lm(items, mode).map(Output::Text)
            }
            (Rendered::List(items), Parser::Api(Some(meta), flavor)) => {
                meta.render_api(items, mode, flavor).map(Output::Messages)
            }
            (Rendered::List(items), Parser::Lm(None) | Parser::Api(None, _)) => {
                Ok(Output::Text(join_plain(items)))
            }
        }
    }

    /// The gen-mode model input of test row `row`.
    pub fn gen_row(&self, test: &Table<'_>, row: usize, ice: &IceValue<'_>) -> Result<Output> {
        let mut entries = test.entries(row);
        if let Some(col) = self.output_column {
            entries.set(col, self.gen_field_replace_token);
        }
        self.gen_entries(&entries, ice)
    }

    /// The gen-mode model input for a row given as entries (already masked).
    pub fn gen_entries(&self, entries: &Entries<'_>, ice: &IceValue<'_>) -> Result<Output> {
        let prompt = self.template.item(entries, ice.as_ice())?;
        self.parse(&prompt, Mode::Gen)
    }

    /// The ppl-mode model input for a row given as entries.
    pub fn ppl_entries(
        &self,
        entries: &Entries<'_>,
        ice: &IceValue<'_>,
        label: usize,
        remain_sep: bool,
    ) -> Result<Output> {
        let prompt = self
            .template
            .label_prompt_item(entries, ice.as_ice(), label, remain_sep)?;
        self.parse(&prompt, Mode::Ppl)
    }

    /// The ppl-mode model input of test row `row` for the template body `label`.
    pub fn ppl_row(
        &self,
        test: &Table<'_>,
        row: usize,
        ice: &IceValue<'_>,
        label: usize,
        remain_sep: bool,
    ) -> Result<Output> {
        self.ppl_entries(&test.entries(row), ice, label, remain_sep)
    }
}

/// `acc = []; for ice in examples: acc += ice + sep; acc.append(eos)` for prompt-list examples.
fn join_lists<'a>(rendered: Vec<Rendered<'a>>, sep: &'a str, eos: &'a str) -> Vec<Item<'a>> {
    let mut items: Vec<Item<'a>> = Vec::new();
    for r in rendered {
        match r {
            Rendered::List(list) => {
                items.extend(list);
                if !sep.is_empty() {
                    items.push(Item::Text(Cow::Borrowed(sep)));
                }
            }
            // `PromptList += str + sep` appends a non-empty string
            Rendered::Str(s) => {
                let joined = s + sep;
                if !joined.is_empty() {
                    items.push(Item::Text(Cow::Owned(joined)));
                }
            }
        }
    }
    // appended even when it is ''
    items.push(Item::Text(Cow::Borrowed(eos)));
    items
}

/// The distinct ICE index lists of a job and, per row, which one it uses.
#[derive(Debug, Clone, Default)]
pub struct IceGroups {
    /// the distinct index lists, in first-seen order
    pub lists: Vec<Vec<usize>>,
    /// per test row, the position of its list in `lists`
    pub row_group: Vec<usize>,
}

impl IceGroups {
    /// Group per-row index lists (rows sharing a list share its rendering).
    pub fn new(per_row: &[Vec<usize>]) -> Self {
        let mut seen: HashMap<&[usize], usize> = HashMap::new();
        let mut lists = Vec::new();
        let mut row_group = Vec::with_capacity(per_row.len());
        for list in per_row {
            let g = *seen.entry(list.as_slice()).or_insert_with(|| {
                lists.push(list.clone());
                lists.len() - 1
            });
            row_group.push(g);
        }
        Self { lists, row_group }
    }
}

/// What to render for each row.
#[derive(Debug, Clone, Copy)]
pub enum Task<'a> {
    /// one generation prompt per row
    Gen,
    /// one prompt per template body (label), per row
    Ppl {
        /// the template body index of each label, in label order
        labels: &'a [usize],
        /// keep the sep token (`normalizing_str` calibration)
        remain_sep: bool,
    },
}

/// The shared, per-group part of a job: the rendered examples and, for groups used by several
/// rows, their compiled output programs (one per label in ppl mode).
pub struct Prepared<'a> {
    ices: Vec<IceValue<'a>>,
    programs: Vec<Vec<Option<Compiled>>>,
}

/// Rows sharing a group before its output is compiled into a program.
const PROGRAM_MIN_ROWS: usize = 3;

impl<'a> Prepared<'a> {
    /// Render each group's examples and compile the programs worth compiling.
    pub fn new(
        job: &Job<'a>,
        test: &Table<'a>,
        train: &Table<'a>,
        groups: &IceGroups,
        task: Task<'_>,
    ) -> Result<Self> {
        let ices: Vec<IceValue<'a>> = groups
            .lists
            .iter()
            .map(|l| job.ice(train, l))
            .collect::<Result<_>>()?;
        let mut uses = vec![0usize; ices.len()];
        for &g in &groups.row_group {
            if let Some(u) = uses.get_mut(g) {
                *u += 1;
            }
        }
        let labels: Vec<usize> = match task {
            Task::Gen => vec![0],
            Task::Ppl { labels, .. } => labels.to_vec(),
        };
        let programs = ices
            .iter()
            .zip(&uses)
            .map(|(ice, &n)| {
                labels
                    .iter()
                    .map(|&label| {
                        (n >= PROGRAM_MIN_ROWS)
                            .then(|| Compiled::build(job, test.columns, ice, task, label))
                            .flatten()
                    })
                    .collect()
            })
            .collect();
        Ok(Self { ices, programs })
    }

    /// The rendered examples of `group`.
    pub fn ice(&self, group: usize) -> Option<&IceValue<'a>> {
        self.ices.get(group)
    }

    /// The program of `group` for the `k`-th label (0 in gen mode), if one was compiled.
    pub fn program(&self, group: usize, k: usize) -> Option<&Compiled> {
        self.programs.get(group)?.get(k)?.as_ref()
    }
}

/// Render rows `range` of `test`, row `r` using ICE group `row_group[r]` (outputs row-major:
/// one per row in gen mode, one per label per row in ppl mode).
pub fn render_rows(
    job: &Job<'_>,
    test: &Table<'_>,
    row_group: &[usize],
    prepared: &Prepared<'_>,
    task: Task<'_>,
    range: std::ops::Range<usize>,
) -> Result<Vec<Output>> {
    let labels: &[usize] = match task {
        Task::Gen => &[0],
        Task::Ppl { labels, .. } => labels,
    };
    let mut out = Vec::with_capacity(range.len() * labels.len());
    // views of the shared examples (cloning a view allocates nothing), made once per group
    let mut views: Vec<Option<IceValue<'_>>> = vec![None; prepared.ices.len()];
    let mask = job.gen_field_replace_token;
    for row in range {
        let missing = Error::LabelOutOfRange {
            index: row,
            count: row_group.len(),
        };
        let g = *row_group.get(row).ok_or(missing)?;
        let cells = test.cells(row);
        for (k, &label) in labels.iter().enumerate() {
            let program = match prepared.program(g, k) {
                Some(Compiled::Text(p)) => Some(p),
                _ => None,
            };
            if let Some(text) = program.and_then(|p| p.run(cells, mask)) {
                out.push(Output::Text(text));
                continue;
            }
            let shared = prepared.ices.get(g).ok_or(Error::LabelOutOfRange {
                index: g,
                count: prepared.ices.len(),
            })?;
            let ice = views[g].get_or_insert_with(|| shared.view());
            out.push(match task {
                Task::Gen => job.gen_row(test, row, ice)?,
                Task::Ppl { remain_sep, .. } => job.ppl_row(test, row, ice, label, remain_sep)?,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::tests::meta_hb;
    use crate::prompt::RoleItem;
    use crate::template::{Body, Dialogue, Substitution};

    fn dialogue(begin: Option<Vec<Item<'static>>>) -> Body {
        Body::Dialogue(Dialogue::new(
            begin,
            Some(vec![
                Item::Role(RoleItem::new("HUMAN", Some("{question}"))),
                Item::Role(RoleItem::new("BOT", Some("{answer}"))),
            ]),
            None,
        ))
    }

    #[test]
    fn dialogue_job_renders_seed_example() {
        let ice_t = PromptTemplate::new(vec![dialogue(None)], None, None, Substitution::Compat);
        let begin = vec![Item::Text(Cow::Borrowed("</E>"))];
        let t = PromptTemplate::new(
            vec![dialogue(Some(begin))],
            Some("</E>".into()),
            None,
            Substitution::Compat,
        );
        let meta = meta_hb();
        let cols = ["question", "answer"];
        let train_cells = ["2+2=?", "4", "3+3=?", "6"];
        let test_cells = ["1+1=?", "2"];
        let train = Table::new(&cols, &train_cells).unwrap();
        let test = Table::new(&cols, &test_cells).unwrap();
        let job = Job {
            template: &t,
            ice_template: Some(&ice_t),
            ice_labels: &[],
            ice_separator: "",
            ice_eos_token: "",
            output_column: Some("answer"),
            gen_field_replace_token: "",
            parser: Parser::Lm(Some(&meta)),
        };
        let groups = IceGroups::new(&[vec![0, 1]]);
        let prepared = Prepared::new(&job, &test, &train, &groups, Task::Gen).unwrap();
        let out = render_rows(&job, &test, &groups.row_group, &prepared, Task::Gen, 0..1).unwrap();
        assert_eq!(
            out,
            vec![Output::Text(
                "<H>2+2=?</H><B>4</B><H>3+3=?</H><B>6</B><H>1+1=?</H><B>".into()
            )]
        );
    }

    #[test]
    fn string_ice_joined_with_separator_and_eos() {
        let ice_t = PromptTemplate::new(
            vec![Body::Str("{question}\n{answer}".into())],
            None,
            None,
            Substitution::Compat,
        );
        let cols = ["question", "answer"];
        let cells = ["0+0=?", "0", "1+1=?", "2"];
        let train = Table::new(&cols, &cells).unwrap();
        let job = Job {
            template: &ice_t,
            ice_template: Some(&ice_t),
            ice_labels: &[],
            ice_separator: "###",
            ice_eos_token: "<EOS>",
            output_column: None,
            gen_field_replace_token: "",
            parser: Parser::Lm(None),
        };
        let ice = job.ice(&train, &[0, 1]).unwrap();
        assert!(matches!(ice, IceValue::Str(ref s) if s == "0+0=?\n0###1+1=?\n2<EOS>"));
        let empty = job.ice(&train, &[]).unwrap();
        assert!(matches!(empty, IceValue::Str(ref s) if s == "<EOS>"));
    }

    #[test]
    fn ice_groups_share_lists() {
        let g = IceGroups::new(&[vec![0, 1], vec![2], vec![0, 1]]);
        assert_eq!(g.lists, vec![vec![0, 1], vec![2]]);
        assert_eq!(g.row_group, vec![0, 1, 0]);
    }
}
