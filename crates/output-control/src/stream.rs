//! The streaming `<tool_action>` parser and the whole-text parser built on it.

use memchr::memchr;

use crate::tags::{Machine, Step, TagEvent, TagEventRef};

/// Default for [`TagOptions::max_tag_bytes`]: 1 MiB.
pub const DEFAULT_MAX_TAG_BYTES: usize = 1 << 20;

/// The smallest tag size limit honoured; smaller values are raised to this.
pub const MIN_MAX_TAG_BYTES: usize = 64;

/// How the tag parsers behave.
///
/// ```
/// use toolwright_output_control::{StreamParser, TagEvent, TagOptions};
/// let off = TagOptions { enabled: false, ..TagOptions::default() };
/// let mut p = StreamParser::with_options(off);
/// let events = p.push(r#"<tool_action name="x"></tool_action>"#);
/// assert_eq!(events, vec![TagEvent::Text(r#"<tool_action name="x"></tool_action>"#.into())]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagOptions {
    /// When false every chunk is passed through as [`TagEvent::Text`] (000's
    /// `enableToolActionParsing = false`). Default: true.
    pub enabled: bool,
    /// The most bytes one open tag may hold (plus at most 3 to finish a UTF-8 character)
    /// before it is released as [`TagEvent::Oversized`] text, so a hostile stream cannot
    /// grow memory without limit.
    /// Default: [`DEFAULT_MAX_TAG_BYTES`]; values below [`MIN_MAX_TAG_BYTES`] are raised to it.
    pub max_tag_bytes: usize,
}

impl Default for TagOptions {
    fn default() -> Self {
        TagOptions {
            enabled: true,
            max_tag_bytes: DEFAULT_MAX_TAG_BYTES,
        }
    }
}

/// Incremental `<tool_action>` parser: feed it `&str` chunks as the model streams them.
///
/// Guarantees:
/// * text with no `<` is handed back at once, without copying earlier output;
/// * only a suffix that could still become a `<tool_action …>…</tool_action>` is held back;
/// * a tag split anywhere (inside the opener, an attribute, a value, or around multi-byte
///   text) is found, and every byte is examined once however the stream is cut;
/// * text once emitted is never taken back;
/// * at [`finish`](StreamParser::finish) an open tag comes back as [`TagEvent::Unclosed`]
///   (its text, never executed);
/// * for any way of cutting a text into chunks, the events (adjacent text merged) equal
///   those of [`parse_tool_actions`](crate::parse_tool_actions) on the whole text.
///
/// Tags inside Markdown code fences are calls like any other (see the crate docs).
///
/// ```
/// use toolwright_output_control::{StreamParser, TagEvent};
/// let mut p = StreamParser::new();
/// let a = p.push("思考: 我需要搜索...<tool_action name=\"");
/// assert_eq!(a, vec![TagEvent::Text("思考: 我需要搜索...".into())]);
/// assert!(p.push("vector-search\"><query value=\"test\"").is_empty());
/// let c = p.push("\" /></tool_action>接下来...");
/// let TagEvent::Action(action) = &c[0] else { panic!("expected an action") };
/// assert_eq!(action.name, "vector-search");
/// assert_eq!(action.arguments["query"], "test");
/// assert_eq!(c[1], TagEvent::Text("接下来...".into()));
/// assert!(p.finish().is_empty());
/// ```
#[derive(Debug, Default)]
pub struct StreamParser {
    opts: TagOptions,
    /// Text of the open tag, from its `<`. Non-empty exactly while a tag is held.
    buf: String,
    machine: Machine,
}

impl StreamParser {
    /// A parser with [`TagOptions::default`]: parsing on, 1 MiB tag limit.
    pub fn new() -> Self {
        Self::with_options(TagOptions::default())
    }

    /// A parser with the given options.
    pub fn with_options(mut opts: TagOptions) -> Self {
        opts.max_tag_bytes = opts.max_tag_bytes.max(MIN_MAX_TAG_BYTES);
        StreamParser {
            opts,
            buf: String::new(),
            machine: Machine::default(),
        }
    }

    /// The options in force.
    pub fn options(&self) -> TagOptions {
        self.opts
    }

    /// Bytes currently held back as a possible tag.
    pub fn held_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Feeds one chunk and returns the events it completes (adjacent text merged).
    pub fn push(&mut self, chunk: &str) -> Vec<TagEvent> {
        let mut out = Vec::new();
        self.push_with(chunk, |ev| push_merged(&mut out, ev));
        out
    }

    /// Feeds one chunk, calling `sink` for each event as it is found. Text borrows the chunk
    /// (or the parser's buffer), so a chunk of plain text costs one `memchr` and no allocation.
    ///
    /// ```
    /// use toolwright_output_control::{StreamParser, TagEventRef};
    /// let mut p = StreamParser::new();
    /// let mut shown = String::new();
    /// p.push_with("plain text, no tags", |ev| {
    ///     if let TagEventRef::Text(t) = ev { shown.push_str(t) }
    /// });
    /// assert_eq!(shown, "plain text, no tags");
    /// ```
    pub fn push_with<F: FnMut(TagEventRef<'_>)>(&mut self, chunk: &str, mut sink: F) {
        if chunk.is_empty() {
            return;
        }
        if !self.opts.enabled {
            sink(TagEventRef::Text(chunk));
            return;
        }
        if self.buf.is_empty() {
            self.scan(chunk, &mut sink);
            return;
        }
        let held = self.buf.len();
        match self.machine.feed(chunk.as_bytes(), self.opts.max_tag_bytes) {
            Step::NeedMore => self.buf.push_str(chunk),
            Step::Done { used, action } => {
                self.buf.clear();
                sink(TagEventRef::Action(action));
                self.scan(&chunk[used..], &mut sink);
            }
            Step::Fail { restart } if restart >= held => {
                let k = restart - held;
                sink(TagEventRef::Text(&self.buf));
                self.buf.clear();
                if k > 0 {
                    sink(TagEventRef::Text(&chunk[..k]));
                }
                self.scan(&chunk[k..], &mut sink);
            }
            Step::Fail { restart } => {
                // The failed tag contained an inner `<` that may start a real tag: emit what
                // precedes it and rescan from there (held text is at most max_tag_bytes).
                sink(TagEventRef::Text(&self.buf[..restart]));
                let mut again = String::with_capacity(held - restart + chunk.len());
                again.push_str(&self.buf[restart..]);
                again.push_str(chunk);
                self.buf.clear();
                self.scan(&again, &mut sink);
            }
            Step::TooLarge { at } => {
                let k = at.saturating_sub(held);
                self.buf.push_str(&chunk[..k]);
                sink(TagEventRef::Oversized(&self.buf));
                self.buf.clear();
                self.scan(&chunk[k..], &mut sink);
            }
        }
    }

    /// Ends the stream: an open tag comes back as [`TagEvent::Unclosed`] (or as plain text if
    /// it never got past a prefix of `<tool_action`). The parser is then ready for a new stream.
    pub fn finish(&mut self) -> Vec<TagEvent> {
        let mut out = Vec::new();
        self.finish_with(|ev| push_merged(&mut out, ev));
        out
    }

    /// [`finish`](StreamParser::finish) with a callback, like [`push_with`](StreamParser::push_with).
    pub fn finish_with<F: FnMut(TagEventRef<'_>)>(&mut self, mut sink: F) {
        if !self.buf.is_empty() {
            if self.machine.committed() {
                sink(TagEventRef::Unclosed(&self.buf));
            } else {
                sink(TagEventRef::Text(&self.buf));
            }
        }
        self.buf.clear();
        self.machine.reset();
    }

    /// Scans text with no tag open. Emits text up to each `<`, tries a tag there, and holds
    /// the tail if the chunk ends inside a possible tag.
    fn scan<F: FnMut(TagEventRef<'_>)>(&mut self, s: &str, sink: &mut F) {
        let bytes = s.as_bytes();
        let mut start = 0; // first byte of text not yet emitted
        let mut i = 0; // where to look for the next '<'
        while let Some(off) = memchr(b'<', &bytes[i..]) {
            let lt = i + off;
            self.machine.reset();
            match self.machine.feed(&bytes[lt..], self.opts.max_tag_bytes) {
                Step::NeedMore => {
                    if start < lt {
                        sink(TagEventRef::Text(&s[start..lt]));
                    }
                    self.buf.push_str(&s[lt..]);
                    return;
                }
                Step::Done { used, action } => {
                    if start < lt {
                        sink(TagEventRef::Text(&s[start..lt]));
                    }
                    sink(TagEventRef::Action(action));
                    i = lt + used;
                    start = i;
                }
                Step::Fail { restart } => i = lt + restart,
                Step::TooLarge { at } => {
                    if start < lt {
                        sink(TagEventRef::Text(&s[start..lt]));
                    }
                    sink(TagEventRef::Oversized(&s[lt..lt + at]));
                    i = lt + at;
                    start = i;
                }
            }
        }
        if start < s.len() {
            sink(TagEventRef::Text(&s[start..]));
        }
    }
}

fn push_merged(out: &mut Vec<TagEvent>, ev: TagEventRef<'_>) {
    if let TagEventRef::Text(t) = ev
        && let Some(TagEvent::Text(prev)) = out.last_mut()
    {
        prev.push_str(t);
        return;
    }
    out.push(ev.into_owned());
}

/// Parses a whole text into text and tool calls, in order (O3, O4, O5).
///
/// A complete tag becomes [`TagEvent::Action`]; a malformed one stays text; a tag still
/// open at the end is [`TagEvent::Unclosed`] and must not be executed. Adjacent text is merged.
///
/// ```
/// use toolwright_output_control::{parse_tool_actions, TagEvent};
/// let text = "先搜索 <tool_action name='a'><q value=\"1\"/></tool_action> 再读 \
///             <tool_action name=\"b\"></tool_action> 完";
/// let events = parse_tool_actions(text);
/// let names: Vec<_> = events.iter().filter_map(|e| match e {
///     TagEvent::Action(a) => Some(a.name.as_str()),
///     _ => None,
/// }).collect();
/// assert_eq!(names, ["a", "b"]);
/// assert_eq!(events[0], TagEvent::Text("先搜索 ".into()));
/// ```
pub fn parse_tool_actions(text: &str) -> Vec<TagEvent> {
    parse_tool_actions_with(text, TagOptions::default())
}

/// [`parse_tool_actions`] with explicit [`TagOptions`].
///
/// ```
/// use toolwright_output_control::{parse_tool_actions_with, TagEvent, TagOptions};
/// let off = TagOptions { enabled: false, ..TagOptions::default() };
/// let t = r#"<tool_action name="x"></tool_action>"#;
/// assert_eq!(parse_tool_actions_with(t, off), vec![TagEvent::Text(t.into())]);
/// ```
pub fn parse_tool_actions_with(text: &str, options: TagOptions) -> Vec<TagEvent> {
    let mut parser = StreamParser::with_options(options);
    let mut out = Vec::new();
    parser.push_with(text, |ev| push_merged(&mut out, ev));
    parser.finish_with(|ev| push_merged(&mut out, ev));
    out
}
