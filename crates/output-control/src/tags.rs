//! The `<tool_action>` tag grammar: types, entity decoding, and the resumable byte-level
//! matcher shared by the whole-text parser and the streaming parser.
//!
//! Grammar (ASCII whitespace — space, tab, CR, LF — is allowed wherever `WS` appears):
//!
//! ```text
//! tag    = "<tool_action" WS+ "name" WS* "=" WS* QUOTED WS* ( "/>" | ">" body )
//! body   = ( WS* param )* WS* "</tool_action" WS* ">"
//! param  = "<" IDENT WS+ "value" WS* "=" WS* QUOTED WS* ( "/>" | ">" [ WS* "</" IDENT WS* ">" ] )
//! QUOTED = '"' any-but-'"' '"'+ | "'" any-but-"'" "'"+    (XML entities decoded; a doubled
//!          closing quote, as in 000's streaming example `value="test"" />`, is tolerated)
//! IDENT  = one or more of ASCII letters, digits, "_-.:" or any non-ASCII character
//! ```

use memchr::memchr;
use serde_json::{Map, Value};

/// One complete `<tool_action>` call: the tool's name and its arguments.
///
/// Every argument value is a JSON string, exactly as written in the tag (after XML entity
/// decoding); converting `"5"` to a number is the tool's business, guided by its schema.
///
/// ```
/// use toolwright_output_control::{parse_tool_actions, TagEvent};
/// let events = parse_tool_actions(
///     r#"<tool_action name="vector-search"><query value="读取文件" /><limit value="5" /></tool_action>"#,
/// );
/// let TagEvent::Action(action) = &events[0] else { panic!("expected an action") };
/// assert_eq!(action.name, "vector-search");
/// assert_eq!(action.arguments["query"], "读取文件");
/// assert_eq!(action.arguments["limit"], "5");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolAction {
    /// The tool name from the `name` attribute, entity-decoded and trimmed.
    pub name: String,
    /// Parameter name → string value. If a parameter repeats, the last one wins.
    pub arguments: Map<String, Value>,
}

/// What the tag parsers report, in stream order.
///
/// Text that a model produced is always handed back as text: as [`TagEvent::Text`],
/// or, when it was an attempted call that could not run, as [`TagEvent::Unclosed`] or
/// [`TagEvent::Oversized`] so the caller can show the text *and* tell the model why
/// its call did not run.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagEvent {
    /// Plain text, to be shown to the user as is.
    Text(String),
    /// A complete tool call, ready to execute.
    Action(ToolAction),
    /// The output ended inside a `<tool_action` tag: the call was cut off and must not run.
    /// `text` is the raw held text, to be shown as text.
    Unclosed {
        /// The raw text of the unfinished tag.
        text: String,
    },
    /// A tag grew past [`TagOptions::max_tag_bytes`](crate::TagOptions::max_tag_bytes)
    /// without closing; the held text is released as text and parsing goes on after it.
    Oversized {
        /// The raw text that was held (the first `max_tag_bytes` bytes of the tag, to a
        /// character boundary).
        text: String,
    },
}

/// A piece of a parsed text: the whole-text parser returns the same events as the streaming one.
pub type Segment = TagEvent;

/// A borrowed event, given to the callback of
/// [`StreamParser::push_with`](crate::StreamParser::push_with); text borrows the chunk or the
/// parser's buffer, so the plain-text path allocates nothing.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagEventRef<'a> {
    /// Plain text.
    Text(&'a str),
    /// A complete tool call.
    Action(ToolAction),
    /// See [`TagEvent::Unclosed`].
    Unclosed(&'a str),
    /// See [`TagEvent::Oversized`].
    Oversized(&'a str),
}

impl TagEventRef<'_> {
    /// Converts to an owned [`TagEvent`].
    pub fn into_owned(self) -> TagEvent {
        match self {
            TagEventRef::Text(t) => TagEvent::Text(t.to_owned()),
            TagEventRef::Action(a) => TagEvent::Action(a),
            TagEventRef::Unclosed(t) => TagEvent::Unclosed { text: t.to_owned() },
            TagEventRef::Oversized(t) => TagEvent::Oversized { text: t.to_owned() },
        }
    }
}

pub(crate) const OPEN: &[u8] = b"<tool_action";
const TAG: &[u8] = b"tool_action";
const NAME: &[u8] = b"name";
const VALUE: &[u8] = b"value";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Open(u8),
    AfterOpen,
    OpenWs,
    NameKw(u8),
    NameEq,
    NameQuote,
    NameVal(u8),
    AfterName(u8),
    OpenEnd,
    OpenSlash,
    Body,
    Lt,
    ElemName,
    ElemWs,
    ValueKw(u8),
    ValEq,
    ValQuote,
    Val(u8),
    AfterVal(u8),
    ElemEnd,
    ElemSlash,
    CloseName,
    CloseWs,
}

/// Result of feeding bytes to the [`Machine`].
#[derive(Debug)]
pub(crate) enum Step {
    /// All input consumed; the tag is still open.
    NeedMore,
    /// The tag closed; `used` bytes of this input (including the final `>`) belong to it.
    Done { used: usize, action: ToolAction },
    /// The tag is malformed. Everything before offset `restart` (counted from the tag's
    /// `<`) is text; scanning must resume at `restart` (always > 0, on a char boundary).
    Fail { restart: usize },
    /// The tag reached the size limit at offset `at` (from the tag's `<`, on a char boundary)
    /// without closing.
    TooLarge { at: usize },
}

/// Resumable matcher for one tag. Starts at the tag's `<`; keeps its state between feeds so
/// that every byte is examined once, however the input is cut.
#[derive(Debug, Default)]
pub(crate) struct Machine {
    st: Option<St>,
    pos: usize,
    last_lt: usize,
    name: Vec<u8>,
    elem: Vec<u8>,
    val: Vec<u8>,
    close: Vec<u8>,
    open_elem: Option<Vec<u8>>,
    args: Map<String, Value>,
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

#[inline]
fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':') || b >= 0x80
}

#[inline]
fn is_cont(b: u8) -> bool {
    b & 0xC0 == 0x80
}

enum Tr {
    Go(St),
    Fail,
    Done,
}

impl Machine {
    /// Forgets any tag in progress; the next feed must start at a `<`.
    pub(crate) fn reset(&mut self) {
        self.st = None;
        self.pos = 0;
        self.last_lt = 0;
        self.name.clear();
        self.elem.clear();
        self.val.clear();
        self.close.clear();
        self.open_elem = None;
        self.args.clear();
    }

    /// True once the whole `<tool_action` opener has been seen: the held text is an attempted
    /// call rather than a stray `<`.
    pub(crate) fn committed(&self) -> bool {
        self.pos >= OPEN.len()
    }

    fn commit_arg(&mut self) {
        let key = String::from_utf8_lossy(&self.elem).into_owned();
        let value = decode_entities(&self.val);
        self.args.insert(key, Value::String(value));
    }

    fn finish_close(&mut self) -> Tr {
        if self.close == TAG {
            Tr::Done
        } else if self.open_elem.as_deref() == Some(self.close.as_slice()) {
            self.open_elem = None;
            Tr::Go(St::Body)
        } else {
            Tr::Fail
        }
    }

    /// Feeds the next bytes of the tag. `input` must be cut at UTF-8 character boundaries
    /// (a `&str`'s bytes), and the very first feed after a reset must start with `<`.
    pub(crate) fn feed(&mut self, input: &[u8], max: usize) -> Step {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            if self.pos >= max && !is_cont(b) {
                return Step::TooLarge { at: self.pos };
            }
            let st = self.st.unwrap_or(St::Open(0));
            // Fast path through quoted values: one memchr for the closing quote.
            let in_value = match st {
                St::NameVal(q) | St::Val(q) => Some(q),
                _ => None,
            };
            if let Some(q) = in_value.filter(|q| *q != b) {
                let rest = &input[i..];
                let run = memchr(q, rest).unwrap_or(rest.len());
                let room = max.saturating_sub(self.pos);
                let mut take = run;
                if run > room {
                    let mut cut = room;
                    while cut < run && is_cont(rest[cut]) {
                        cut += 1;
                    }
                    take = cut;
                }
                let target = if matches!(st, St::NameVal(_)) {
                    &mut self.name
                } else {
                    &mut self.val
                };
                target.extend_from_slice(&rest[..take]);
                self.pos += take;
                i += take;
                if take < run {
                    return Step::TooLarge { at: self.pos };
                }
                continue;
            }
            let tr = match st {
                St::Open(n) => {
                    let n = usize::from(n);
                    if OPEN.get(n) == Some(&b) {
                        if n + 1 == OPEN.len() {
                            Tr::Go(St::AfterOpen)
                        } else {
                            Tr::Go(St::Open((n + 1) as u8))
                        }
                    } else {
                        Tr::Fail
                    }
                }
                St::AfterOpen => {
                    if is_ws(b) {
                        Tr::Go(St::OpenWs)
                    } else {
                        Tr::Fail
                    }
                }
                St::OpenWs => {
                    if is_ws(b) {
                        Tr::Go(St::OpenWs)
                    } else if b == NAME[0] {
                        Tr::Go(St::NameKw(1))
                    } else {
                        Tr::Fail
                    }
                }
                St::NameKw(n) => {
                    let n = usize::from(n);
                    if NAME.get(n) == Some(&b) {
                        if n + 1 == NAME.len() {
                            Tr::Go(St::NameEq)
                        } else {
                            Tr::Go(St::NameKw((n + 1) as u8))
                        }
                    } else {
                        Tr::Fail
                    }
                }
                St::NameEq => match b {
                    b'=' => Tr::Go(St::NameQuote),
                    _ if is_ws(b) => Tr::Go(St::NameEq),
                    _ => Tr::Fail,
                },
                St::NameQuote => match b {
                    b'"' | b'\'' => Tr::Go(St::NameVal(b)),
                    _ if is_ws(b) => Tr::Go(St::NameQuote),
                    _ => Tr::Fail,
                },
                St::NameVal(_) => {
                    // b is the closing quote (other bytes took the fast path).
                    if self.name.iter().any(|c| !is_ws(*c)) {
                        Tr::Go(St::AfterName(b))
                    } else {
                        Tr::Fail
                    }
                }
                // A doubled closing quote (`name="x""`) is tolerated: 000's own streaming
                // example has one (`value="test"` + `" />`).
                St::AfterName(q) if b == q => Tr::Go(St::AfterName(q)),
                St::OpenEnd | St::AfterName(_) => match b {
                    b'>' => Tr::Go(St::Body),
                    b'/' => Tr::Go(St::OpenSlash),
                    _ if is_ws(b) => Tr::Go(St::OpenEnd),
                    _ => Tr::Fail,
                },
                St::OpenSlash => {
                    if b == b'>' {
                        Tr::Done
                    } else {
                        Tr::Fail
                    }
                }
                St::Body => match b {
                    b'<' => {
                        self.last_lt = self.pos;
                        Tr::Go(St::Lt)
                    }
                    _ if is_ws(b) => Tr::Go(St::Body),
                    _ => Tr::Fail,
                },
                St::Lt => {
                    if b == b'/' {
                        self.close.clear();
                        Tr::Go(St::CloseName)
                    } else if is_ident(b) {
                        self.elem.clear();
                        self.elem.push(b);
                        Tr::Go(St::ElemName)
                    } else {
                        Tr::Fail
                    }
                }
                St::ElemName => {
                    if is_ident(b) {
                        self.elem.push(b);
                        Tr::Go(St::ElemName)
                    } else if is_ws(b) {
                        Tr::Go(St::ElemWs)
                    } else {
                        Tr::Fail
                    }
                }
                St::ElemWs => {
                    if is_ws(b) {
                        Tr::Go(St::ElemWs)
                    } else if b == VALUE[0] {
                        Tr::Go(St::ValueKw(1))
                    } else {
                        Tr::Fail
                    }
                }
                St::ValueKw(n) => {
                    let n = usize::from(n);
                    if VALUE.get(n) == Some(&b) {
                        if n + 1 == VALUE.len() {
                            Tr::Go(St::ValEq)
                        } else {
                            Tr::Go(St::ValueKw((n + 1) as u8))
                        }
                    } else {
                        Tr::Fail
                    }
                }
                St::ValEq => match b {
                    b'=' => Tr::Go(St::ValQuote),
                    _ if is_ws(b) => Tr::Go(St::ValEq),
                    _ => Tr::Fail,
                },
                St::ValQuote => match b {
                    b'"' | b'\'' => {
                        self.val.clear();
                        Tr::Go(St::Val(b))
                    }
                    _ if is_ws(b) => Tr::Go(St::ValQuote),
                    _ => Tr::Fail,
                },
                St::Val(q) => Tr::Go(St::AfterVal(q)),
                St::AfterVal(q) if b == q => Tr::Go(St::AfterVal(q)),
                St::ElemEnd | St::AfterVal(_) => match b {
                    b'/' => Tr::Go(St::ElemSlash),
                    b'>' => {
                        self.commit_arg();
                        self.open_elem = Some(self.elem.clone());
                        Tr::Go(St::Body)
                    }
                    _ if is_ws(b) => Tr::Go(St::ElemEnd),
                    _ => Tr::Fail,
                },
                St::ElemSlash => {
                    if b == b'>' {
                        self.commit_arg();
                        Tr::Go(St::Body)
                    } else {
                        Tr::Fail
                    }
                }
                St::CloseName => {
                    if is_ident(b) {
                        self.close.push(b);
                        Tr::Go(St::CloseName)
                    } else if is_ws(b) && !self.close.is_empty() {
                        Tr::Go(St::CloseWs)
                    } else if b == b'>' {
                        self.finish_close()
                    } else {
                        Tr::Fail
                    }
                }
                St::CloseWs => match b {
                    b'>' => self.finish_close(),
                    _ if is_ws(b) => Tr::Go(St::CloseWs),
                    _ => Tr::Fail,
                },
            };
            match tr {
                Tr::Go(next) => {
                    self.st = Some(next);
                    self.pos += 1;
                    i += 1;
                }
                Tr::Done => {
                    let action = ToolAction {
                        name: decode_entities(&self.name).trim().to_owned(),
                        arguments: std::mem::take(&mut self.args),
                    };
                    self.reset();
                    return Step::Done {
                        used: i + 1,
                        action,
                    };
                }
                Tr::Fail => {
                    let restart = if b == b'<' || self.last_lt == 0 {
                        self.pos
                    } else {
                        self.last_lt
                    };
                    self.reset();
                    return Step::Fail { restart };
                }
            }
        }
        Step::NeedMore
    }
}

/// Decodes the XML entities `&quot; &amp; &lt; &gt; &apos;`, `&#NNN;` and `&#xHHH;` in an
/// attribute value. Anything that is not a well-formed entity is kept literally.
pub(crate) fn decode_entities(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    if !s.contains('&') {
        return s.into_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest: &str = &s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        // An entity name is at most 11 bytes (`#x10FFFF` is 8); `;` is ASCII, so slicing at
        // it is always on a char boundary.
        let decoded = after
            .bytes()
            .take(12)
            .position(|b| b == b';')
            .and_then(|semi| entity_char(&after[..semi]).map(|c| (c, semi)));
        match decoded {
            Some((c, semi)) => {
                out.push(c);
                rest = &after[semi + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn entity_char(name: &str) -> Option<char> {
    match name {
        "quot" => Some('"'),
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "apos" => Some('\''),
        _ => {
            let num = name.strip_prefix('#')?;
            let (digits, radix) = match num.strip_prefix(['x', 'X']) {
                Some(hex) => (hex, 16),
                None => (num, 10),
            };
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                return None;
            }
            char::from_u32(u32::from_str_radix(digits, radix).ok()?)
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn entities_decode_and_bad_ones_stay_literal() {
        assert_eq!(decode_entities(b"a &amp; b"), "a & b");
        assert_eq!(
            decode_entities(b"&quot;&lt;&gt;&apos;&#20013;&#x6587;"),
            "\"<>'中文"
        );
        assert_eq!(
            decode_entities(b"&bogus; & &#xZZ; &#-1;"),
            "&bogus; & &#xZZ; &#-1;"
        );
        assert_eq!(decode_entities(b"&#xD800;"), "&#xD800;");
        assert_eq!(decode_entities("中&amp;".as_bytes()), "中&");
        // A multi-byte character right after a short entity must not hide it.
        assert_eq!(
            decode_entities("&amp;中文中文中文".as_bytes()),
            "&中文中文中文"
        );
        assert_eq!(
            decode_entities(b"&#x+41; &#+65; &#; &#x;"),
            "&#x+41; &#+65; &#; &#x;"
        );
        assert_eq!(decode_entities(b"&#065;&#x41;&#X41;"), "AAA");
    }
}
