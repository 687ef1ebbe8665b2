//! The one error type of the core. Messages are stable API.

use std::fmt;

/// Result alias of the core.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong while compiling or rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A dialogue template has no `round`.
    MissingRound,
    /// A label index beyond the label-dict template's labels.
    LabelOutOfRange {
        /// the requested label index
        index: usize,
        /// number of labels
        count: usize,
    },
    /// A label-dict value that is neither a string nor a dialogue.
    InvalidLabelBody {
        /// the label index
        index: usize,
    },
    /// An item list was spliced into a string template.
    ListIntoString,
    /// An item list was spliced into a role item's prompt.
    ListIntoRolePrompt {
        /// the item index
        item: usize,
        /// the token found in the prompt
        token: String,
    },
    /// `str.split('')` is an error in Python: an empty token cannot be replaced by an item list.
    EmptySeparator,
    /// A section marker opened with an unknown section name.
    UnknownSection {
        /// the item index
        item: usize,
    },
    /// A section end marker without a matching begin marker.
    UnbalancedEnd {
        /// the item index
        item: usize,
    },
    /// A section end marker that closes a different section.
    MismatchedSection {
        /// the item index
        item: usize,
        /// the section that is open
        open: &'static str,
        /// the section the marker closes
        closing: &'static str,
    },
    /// A role item outside of any section.
    OutsideSection {
        /// the item index
        item: usize,
    },
    /// A role item without a `role`.
    MissingRole {
        /// the item index
        item: usize,
    },
    /// A role that the meta template does not define (and no usable fallback role).
    UnknownRole {
        /// the item index
        item: usize,
        /// the role name (or the fallback role name that was tried)
        role: String,
    },
    /// A meta template round with the same role twice.
    DuplicateRole {
        /// the role name
        role: String,
    },
    /// A string entry in the meta round used by the API walk.
    StrInApiRound,
    /// A meta role used by the API walk without `api_role`.
    MissingApiRole {
        /// the role name
        role: String,
    },
    /// The API walk met a `generate` role outside the last round in gen mode.
    GenerateOutsideRound {
        /// the item index
        item: usize,
    },
    /// AISBench: a rendered role has neither `prompt` nor `prompt_mm`.
    MissingPrompt {
        /// the role name
        role: String,
    },
    /// The API walk produced no message.
    EmptyResult,
    /// In-context example indices without an ICE template.
    MissingIceTemplate,
    /// In-context examples that render to strings and prompt lists alike.
    MixedIce,
    /// An in-context example index beyond the train rows.
    IceIndexOutOfRange {
        /// the index
        index: usize,
        /// number of train rows
        rows: usize,
    },
    /// Strict multimodal content: an `<AIS_…>` tag that is none of the five known tags.
    UnknownTag {
        /// the tag as written, e.g. `<AIS_PDF_START>`
        tag: String,
        /// character (code point) position of its `<` in the content string
        position: usize,
    },
    /// Strict multimodal content: a segment whose start tag is never closed by
    /// `<AIS_CONTENT_TAG>` (the reference still uses it).
    UnterminatedTag {
        /// the start tag
        tag: &'static str,
        /// character position of the start tag
        position: usize,
    },
    /// Strict multimodal content: a start tag directly followed by the terminator (the
    /// reference emits a part with an empty value).
    EmptyTag {
        /// the start tag
        tag: &'static str,
        /// character position of the start tag
        position: usize,
    },
    /// Strict multimodal content: a start tag inside another segment's payload (the reference
    /// deletes it when it is the segment's own tag and keeps it literally otherwise).
    NestedTag {
        /// the nested start tag
        tag: &'static str,
        /// character position of the nested tag
        position: usize,
    },
    /// Strict multimodal content: text that no start tag opens (before the first tag, between a
    /// terminator and the next tag, or after the last terminator; the reference drops it).
    UntaggedText {
        /// character position of the first character of the text
        position: usize,
    },
    /// Strict multimodal content: a terminator that closes no segment (the reference ignores
    /// the empty segment before it).
    StrayTerminator {
        /// character position of the terminator
        position: usize,
    },
}

impl Error {
    /// For a multimodal content error: the tag it names (if any) and its character position.
    pub fn tag_location(&self) -> Option<(Option<&str>, usize)> {
        match self {
            Self::UnknownTag { tag, position } => Some((Some(tag.as_str()), *position)),
            Self::UnterminatedTag { tag, position }
            | Self::EmptyTag { tag, position }
            | Self::NestedTag { tag, position } => Some((Some(tag), *position)),
            Self::UntaggedText { position } => Some((None, *position)),
            Self::StrayTerminator { position } => {
                Some((Some(crate::markers::CONTENT_TAG), *position))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingRound => f.write_str("dialogue template has no 'round'"),
            Self::LabelOutOfRange { index, count } => {
                write!(f, "label index {index} out of range ({count} labels)")
            }
            Self::InvalidLabelBody { index } => {
                write!(
                    f,
                    "label #{index} of the template is neither a str nor a dict"
                )
            }
            Self::ListIntoString => f.write_str("a string template needs a string ICE"),
            Self::ListIntoRolePrompt { item, token } => write!(
                f,
                "found keyword {token} in the prompt of item #{item}: cannot replace it with a \
                 prompt list"
            ),
            Self::EmptySeparator => f.write_str("empty token cannot be replaced by a prompt list"),
            Self::UnknownSection { item } => write!(f, "item #{item}: unknown section"),
            Self::UnbalancedEnd { item } => {
                write!(
                    f,
                    "item #{item}: section end marker without an open section"
                )
            }
            Self::MismatchedSection {
                item,
                open,
                closing,
            } => write!(
                f,
                "item #{item}: end marker of section '{closing}' while section '{open}' is open"
            ),
            Self::OutsideSection { item } => {
                write!(f, "item #{item}: role item outside of any section")
            }
            Self::MissingRole { item } => write!(f, "item #{item} has no 'role'"),
            Self::UnknownRole { item, role } => {
                write!(f, "item #{item}: role '{role}' is not in the meta template")
            }
            Self::DuplicateRole { role } => {
                write!(f, "role '{role}' appears twice in the meta template")
            }
            Self::StrInApiRound => {
                f.write_str("Mixing str without explicit role is not allowed in API models!")
            }
            Self::MissingApiRole { role } => write!(f, "meta role '{role}' has no 'api_role'"),
            Self::GenerateOutsideRound { item } => write!(
                f,
                "item #{item}: a generate role outside the dialogue rounds in gen mode"
            ),
            Self::MissingPrompt { role } => write!(
                f,
                "role '{role}' has no 'prompt' or 'prompt_mm' (invalid prompt content)"
            ),
            Self::EmptyResult => f.write_str("the prompt rendered to no message"),
            Self::MissingIceTemplate => {
                f.write_str("in-context example indices were given but there is no ice_template")
            }
            Self::MixedIce => {
                f.write_str("in-context examples render to both strings and prompt lists")
            }
            Self::IceIndexOutOfRange { index, rows } => {
                write!(
                    f,
                    "in-context example index {index} is out of range of {rows} train rows"
                )
            }
            Self::UnknownTag { tag, position } => {
                write!(f, "unknown multimodal tag '{tag}' at character {position}")
            }
            Self::UnterminatedTag { tag, position } => write!(
                f,
                "multimodal tag '{tag}' at character {position} is not closed by \
                 '<AIS_CONTENT_TAG>'"
            ),
            Self::EmptyTag { tag, position } => write!(
                f,
                "multimodal tag '{tag}' at character {position} has an empty payload"
            ),
            Self::NestedTag { tag, position } => write!(
                f,
                "multimodal tag '{tag}' at character {position} is inside another segment's \
                 payload"
            ),
            Self::UntaggedText { position } => write!(
                f,
                "text at character {position} is outside any tagged segment (a segment starts \
                 with <AIS_TEXT_START>, <AIS_IMAGE_START>, <AIS_VIDEO_START> or <AIS_AUDIO_START>)"
            ),
            Self::StrayTerminator { position } => write!(
                f,
                "multimodal tag '<AIS_CONTENT_TAG>' at character {position} closes no segment"
            ),
        }
    }
}

impl std::error::Error for Error {}
