//! The `<AIS_*>` tag grammar of AISBench's multimodal `content` field (spec 03 §3.2).
//!
//! An AISBench multimodal sample carries its parts in one string, e.g.
//! `<AIS_IMAGE_START>a.jpg<AIS_CONTENT_TAG><AIS_TEXT_START>What is it?<AIS_CONTENT_TAG>`, which
//! `PromptList.format_mm` turns into content parts. The reference splits the string on the
//! terminator (`str.split`), classifies each segment by `startswith`, and deletes every
//! occurrence of the segment's own start tag from it (`str.replace`); everything else is dropped.
//!
//! [`parse_content`] reproduces that exactly in one left-to-right scan for `<AIS_` (no regex, no
//! backtracking): no tag can overlap another (each contains `<` only at its start), so the
//! tags the scan finds are exactly the split points and replacement sites of the reference.
//! [`parse_content_strict`] accepts only the canonical form (`START payload TERMINATOR`, repeated)
//! and reports the first deviation with its tag and **character** position.
//!
//! ```
//! use promptweave_core::markers::{parse_content, render_content, Modality, IMAGE_START, TEXT_START, CONTENT_TAG};
//! let content = format!("{IMAGE_START}a.jpg{CONTENT_TAG}{TEXT_START}What?{CONTENT_TAG}");
//! let parts = parse_content(&content);
//! assert_eq!(parts[0].modality, Modality::Image);
//! assert_eq!(parts[1].payload, "What?");
//! assert_eq!(render_content(&parts), content);
//! ```

use std::borrow::Cow;

use crate::error::{Error, Result};

/// Opens a text segment; its payload fills `{question}` of the `text` part template.
pub const TEXT_START: &str = "<AIS_TEXT_START>";
/// Opens an image segment; its payload fills `{image}` of the `image` part template's URL.
pub const IMAGE_START: &str = "<AIS_IMAGE_START>";
/// Opens a video segment; its payload fills `{video}` of the `video` part template's URL.
pub const VIDEO_START: &str = "<AIS_VIDEO_START>";
/// Opens an audio segment; its payload fills `{audio}` of the `audio` part template's URL.
pub const AUDIO_START: &str = "<AIS_AUDIO_START>";
/// Terminates a segment.
pub const CONTENT_TAG: &str = "<AIS_CONTENT_TAG>";

/// The common prefix of every tag (and of unknown tags such as `<AIS_PDF_START>`).
const TAG_PREFIX: &[u8] = b"<AIS_";

/// The kind of a content part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Modality {
    /// `<AIS_TEXT_START>`, part template key `text`.
    Text,
    /// `<AIS_IMAGE_START>`, part template key `image`.
    Image,
    /// `<AIS_VIDEO_START>`, part template key `video`.
    Video,
    /// `<AIS_AUDIO_START>`, part template key `audio`.
    Audio,
}

impl Modality {
    /// Every modality, in the order the reference tests the start tags.
    pub const ALL: [Self; 4] = [Self::Text, Self::Image, Self::Video, Self::Audio];

    /// The tag that opens a segment of this kind.
    pub fn start_tag(self) -> &'static str {
        match self {
            Self::Text => TEXT_START,
            Self::Image => IMAGE_START,
            Self::Video => VIDEO_START,
            Self::Audio => AUDIO_START,
        }
    }

    /// The `prompt_mm` key of the part template (`text`, `image`, `video`, `audio`).
    pub fn key(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Image => "image",
            Self::Video => "video",
            Self::Audio => "audio",
        }
    }

    /// The modality of a `prompt_mm` key.
    pub fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.key() == key)
    }
}

/// One part of a content string, in content order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentPart<'a> {
    /// the segment's kind
    pub modality: Modality,
    /// the segment without its start tag (and, as in the reference, without any later
    /// occurrence of that same tag); borrowed from the content unless a tag was deleted
    pub payload: Cow<'a, str>,
}

impl<'a> ContentPart<'a> {
    /// A part of `modality` with `payload`.
    pub fn new(modality: Modality, payload: impl Into<Cow<'a, str>>) -> Self {
        Self {
            modality,
            payload: payload.into(),
        }
    }
}

/// A tag found by the scan.
#[derive(Debug, Clone, Copy)]
enum Tag {
    Start(Modality),
    End,
    /// `<AIS_` + ASCII letters, digits, `_` + `>`, not a known tag; its length in bytes
    Unknown(usize),
}

/// The tag at the start of `rest` (which starts with `<AIS_`), if any.
fn classify(rest: &[u8]) -> Option<Tag> {
    if rest.starts_with(CONTENT_TAG.as_bytes()) {
        return Some(Tag::End);
    }
    if let Some(m) = Modality::ALL
        .into_iter()
        .find(|m| rest.starts_with(m.start_tag().as_bytes()))
    {
        return Some(Tag::Start(m));
    }
    let name = rest.get(TAG_PREFIX.len()..).unwrap_or_default();
    let name_len = name
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
        .count();
    (name.get(name_len) == Some(&b'>')).then_some(Tag::Unknown(TAG_PREFIX.len() + name_len + 1))
}

/// Every tag of `content` with its byte offset, left to right. (Found from each `<`: content
/// strings hold few, and a one-byte search beats a substring searcher on strings this short.
/// `<AIS_` cannot overlap itself, so this finds what a substring search finds.)
fn tags(content: &str) -> impl Iterator<Item = (usize, Tag)> + '_ {
    let bytes = content.as_bytes();
    memchr::memchr_iter(b'<', bytes).filter_map(move |at| {
        let rest = bytes.get(at..)?;
        if !rest.starts_with(TAG_PREFIX) {
            return None;
        }
        classify(rest).map(|tag| (at, tag))
    })
}

/// The character (code point) position of byte offset `at`.
fn char_position(content: &str, at: usize) -> usize {
    content.get(..at).map_or(0, |s| s.chars().count())
}

/// The segment being scanned (the text between two terminators).
struct Segment {
    /// byte offset of the segment's first character
    start: usize,
    /// its kind and the byte offset of its start tag, once the segment starts with one
    open: Option<(Modality, usize)>,
    /// start of the payload text not yet copied
    cursor: usize,
    /// the payload so far, once an own-kind tag had to be deleted from it
    owned: Option<String>,
}

impl Segment {
    fn new(start: usize) -> Self {
        Self {
            start,
            open: None,
            cursor: start,
            owned: None,
        }
    }

    fn open_at(&mut self, modality: Modality, at: usize) {
        self.open = Some((modality, at));
        self.cursor = at + modality.start_tag().len();
    }

    /// Delete the own-kind start tag at `at` from the payload (the reference's `str.replace`).
    fn delete_tag(&mut self, content: &str, at: usize, tag_len: usize) {
        let piece = content.get(self.cursor..at).unwrap_or_default();
        self.owned.get_or_insert_with(String::new).push_str(piece);
        self.cursor = at + tag_len;
    }

    /// The part of the segment ending at byte `end`, if it opened with a start tag.
    fn close(self, content: &str, end: usize) -> Option<ContentPart<'_>> {
        let (modality, _) = self.open?;
        let rest = content.get(self.cursor..end).unwrap_or_default();
        let payload = match self.owned {
            None => Cow::Borrowed(rest),
            Some(mut s) => {
                s.push_str(rest);
                Cow::Owned(s)
            }
        };
        Some(ContentPart { modality, payload })
    }
}

/// The content parts of `content`, exactly as AISBench's `format_mm` finds them.
///
/// Segments are the pieces between terminators; a segment that does not start with a start tag
/// (text before the first tag or after the last terminator, an empty segment) is dropped; an
/// unterminated last segment is used; every further occurrence of the segment's own start tag
/// is deleted, other tags stay literal. Never fails.
pub fn parse_content(content: &str) -> Vec<ContentPart<'_>> {
    let mut parts = Vec::new();
    let mut seg = Segment::new(0);
    for (at, tag) in tags(content) {
        match tag {
            Tag::End => {
                parts.extend(seg.close(content, at));
                seg = Segment::new(at + CONTENT_TAG.len());
            }
            Tag::Start(m) => match seg.open {
                None if at == seg.start => seg.open_at(m, at),
                Some((own, _)) if own == m => seg.delete_tag(content, at, m.start_tag().len()),
                _ => {}
            },
            Tag::Unknown(_) => {}
        }
    }
    parts.extend(seg.close(content, content.len()));
    parts
}

/// The content parts of a canonical content string: `START payload <AIS_CONTENT_TAG>`,
/// repeated, with non-empty payloads free of `<AIS_…>` tags.
///
/// Where [`parse_content`] silently drops, deletes or keeps, this reports the first deviation
/// met by the scan (an unterminated last segment is found at the end): [`Error::UnknownTag`],
/// [`Error::UnterminatedTag`], [`Error::EmptyTag`], [`Error::NestedTag`],
/// [`Error::UntaggedText`] or [`Error::StrayTerminator`], each with a character position.
/// When it succeeds, the parts equal those of [`parse_content`] and [`render_content`] gives
/// `content` back.
pub fn parse_content_strict(content: &str) -> Result<Vec<ContentPart<'_>>> {
    let pos = |at: usize| char_position(content, at);
    let mut parts = Vec::new();
    let mut seg = Segment::new(0);
    for (at, tag) in tags(content) {
        let Some((modality, tag_at)) = seg.open else {
            if at > seg.start {
                return Err(Error::UntaggedText {
                    position: pos(seg.start),
                });
            }
            match tag {
                Tag::Start(m) => seg.open_at(m, at),
                Tag::End => return Err(Error::StrayTerminator { position: pos(at) }),
                Tag::Unknown(len) => return Err(unknown_tag(content, at, len)),
            }
            continue;
        };
        match tag {
            Tag::End if at == seg.cursor => {
                return Err(Error::EmptyTag {
                    tag: modality.start_tag(),
                    position: pos(tag_at),
                });
            }
            Tag::End => {
                parts.extend(seg.close(content, at));
                seg = Segment::new(at + CONTENT_TAG.len());
            }
            Tag::Start(m) => {
                return Err(Error::NestedTag {
                    tag: m.start_tag(),
                    position: pos(at),
                });
            }
            Tag::Unknown(len) => return Err(unknown_tag(content, at, len)),
        }
    }
    match seg.open {
        Some((modality, tag_at)) => Err(Error::UnterminatedTag {
            tag: modality.start_tag(),
            position: pos(tag_at),
        }),
        None if seg.start < content.len() => Err(Error::UntaggedText {
            position: pos(seg.start),
        }),
        None => Ok(parts),
    }
}

fn unknown_tag(content: &str, at: usize, len: usize) -> Error {
    Error::UnknownTag {
        tag: content.get(at..at + len).unwrap_or_default().to_owned(),
        position: char_position(content, at),
    }
}

/// The canonical content string of `parts`: `START payload <AIS_CONTENT_TAG>` for each part.
///
/// `parse_content(render_content(parts)) == parts` when no payload contains the terminator or
/// its own start tag.
pub fn render_content(parts: &[ContentPart<'_>]) -> String {
    let len = parts
        .iter()
        .map(|p| p.modality.start_tag().len() + p.payload.len() + CONTENT_TAG.len())
        .sum();
    let mut out = String::with_capacity(len);
    for part in parts {
        out.push_str(part.modality.start_tag());
        out.push_str(&part.payload);
        out.push_str(CONTENT_TAG);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TS: &str = TEXT_START;
    const IS: &str = IMAGE_START;
    const VS: &str = VIDEO_START;
    const AS: &str = AUDIO_START;
    const CT: &str = CONTENT_TAG;

    fn parts(content: &str) -> Vec<(Modality, String)> {
        parse_content(content)
            .into_iter()
            .map(|p| (p.modality, p.payload.into_owned()))
            .collect()
    }

    fn p(m: Modality, s: &str) -> (Modality, String) {
        (m, s.to_owned())
    }

    #[test]
    fn parse_every_modality_keeps_content_order() {
        let c = format!("{TS}What is this?{CT}{IS}IMG{CT}{AS}AUD{CT}{VS}VID{CT}");
        assert_eq!(
            parts(&c),
            [
                p(Modality::Text, "What is this?"),
                p(Modality::Image, "IMG"),
                p(Modality::Audio, "AUD"),
                p(Modality::Video, "VID"),
            ]
        );
    }

    #[test]
    fn parse_text_outside_tags_is_dropped() {
        // MM-04, MM-06: a segment must *start* with its tag
        let c = format!("lead{TS}t{CT}mid{IS}i{CT}tail");
        assert!(parts(&c).is_empty());
        let c = format!("{TS}t{CT}mid{CT}{IS}i{CT}tail");
        assert_eq!(parts(&c), [p(Modality::Text, "t"), p(Modality::Image, "i")]);
        assert!(parts("plain").is_empty());
        assert!(parts("").is_empty());
    }

    #[test]
    fn parse_unterminated_last_segment_is_used() {
        // MM-05
        let c = format!("{TS}t{CT}{IS}i");
        assert_eq!(parts(&c), [p(Modality::Text, "t"), p(Modality::Image, "i")]);
    }

    #[test]
    fn parse_own_tag_inside_payload_is_deleted() {
        // MM-07, MM-19
        assert_eq!(parts(&format!("{TS}a{TS}b{CT}")), [p(Modality::Text, "ab")]);
        assert_eq!(
            parts(&format!("{IS}a{IS}b{CT}")),
            [p(Modality::Image, "ab")]
        );
        assert_eq!(parts(&format!("{TS}{TS}{TS}")), [p(Modality::Text, "")]);
    }

    #[test]
    fn parse_own_tag_deletion_is_single_pass() {
        // str.replace does not rescan: deleting the inner tag forms a new one that stays
        let c = format!("{TS}<AIS_TEXT_{TS}START>{CT}");
        assert_eq!(parts(&c), [p(Modality::Text, TS)]);
    }

    #[test]
    fn parse_other_tags_inside_payload_stay_literal() {
        // MM-08
        let c = format!("{TS}a{IS}b{CT}");
        assert_eq!(parts(&c), [p(Modality::Text, &format!("a{IS}b"))]);
    }

    #[test]
    fn parse_empty_payloads_give_empty_parts() {
        // MM-09
        let c = format!("{TS}{CT}{IS}{CT}");
        assert_eq!(parts(&c), [p(Modality::Text, ""), p(Modality::Image, "")]);
    }

    #[test]
    fn parse_partial_and_unknown_tags_are_text() {
        let c = format!("{TS}x<AIS_PDF_START>y<AIS_{CT}<AIS_PDF_START>z{CT}<AIS_TEXT_STAR{TS}w");
        assert_eq!(parts(&c), [p(Modality::Text, "x<AIS_PDF_START>y<AIS_")]);
    }

    #[test]
    fn parse_payload_is_borrowed_without_deletion() {
        let c = format!("{IS}中文😀{CT}");
        let got = parse_content(&c);
        assert!(matches!(got[0].payload, Cow::Borrowed("中文😀")));
    }

    #[test]
    fn strict_canonical_content_round_trips() {
        let c = format!("{IS}a.jpg{CT}{TS}问题 😀{CT}");
        let got = parse_content_strict(&c).unwrap();
        assert_eq!(got, parse_content(&c));
        assert_eq!(render_content(&got), c);
        assert_eq!(parse_content_strict("").unwrap(), []);
    }

    #[test]
    fn strict_positions_count_characters_not_bytes() {
        // "中文😀" is 3 characters but 10 bytes
        let c = format!("{TS}中文😀{IS}x{CT}");
        let err = parse_content_strict(&c).unwrap_err();
        assert_eq!(
            err,
            Error::NestedTag {
                tag: IS,
                position: TS.len() + 3
            }
        );
        assert_eq!(err.tag_location(), Some((Some(IS), TS.len() + 3)));
        assert!(err.to_string().contains("at character 19"));
    }

    #[test]
    fn strict_unterminated_segment_names_its_tag() {
        let c = format!("{TS}é{CT}{VS}vid");
        let err = parse_content_strict(&c).unwrap_err();
        assert_eq!(
            err,
            Error::UnterminatedTag {
                tag: VS,
                position: TS.len() + 1 + CT.len()
            }
        );
    }

    #[test]
    fn strict_unknown_tag_is_named() {
        let c = format!("<AIS_PDF_START>x{CT}");
        assert_eq!(
            parse_content_strict(&c).unwrap_err(),
            Error::UnknownTag {
                tag: "<AIS_PDF_START>".to_owned(),
                position: 0
            }
        );
        let c = format!("{TS}ü<AIS_x>{CT}");
        assert_eq!(
            parse_content_strict(&c).unwrap_err(),
            Error::UnknownTag {
                tag: "<AIS_x>".to_owned(),
                position: TS.len() + 1
            }
        );
    }

    #[test]
    fn strict_rejects_empty_untagged_and_stray() {
        assert_eq!(
            parse_content_strict(&format!("{TS}a{CT}{IS}{CT}")).unwrap_err(),
            Error::EmptyTag {
                tag: IS,
                position: TS.len() + 1 + CT.len()
            }
        );
        assert_eq!(
            parse_content_strict(&format!("🙂{TS}a{CT}")).unwrap_err(),
            Error::UntaggedText { position: 0 }
        );
        assert_eq!(
            parse_content_strict(&format!("{TS}a{CT}tail")).unwrap_err(),
            Error::UntaggedText {
                position: TS.len() + 1 + CT.len()
            }
        );
        assert_eq!(
            parse_content_strict(&format!("{TS}a{CT}{CT}")).unwrap_err(),
            Error::StrayTerminator {
                position: TS.len() + 1 + CT.len()
            }
        );
    }

    #[test]
    fn modality_keys_round_trip() {
        for m in Modality::ALL {
            assert_eq!(Modality::from_key(m.key()), Some(m));
        }
        assert_eq!(Modality::from_key("pdf"), None);
    }
}
