//! An independent, deliberately simple whole-text parser (recursive descent over the complete
//! text, no state machine, no chunks) written from the grammar in
//! docs/stage-2-output-control.md. The library's parser must agree with it on any input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use serde_json::{Map, Value};
use toolwright_output_control::{TagEvent, ToolAction, parse_tool_actions};

enum Outcome {
    Done(ToolAction, usize),
    /// Malformed: text up to the restart offset, then scan again from it.
    Fail(usize),
    Incomplete,
}

struct Cur<'a> {
    s: &'a [u8],
    pos: usize,
    last_lt: usize,
}

/// Where parsing stopped: at a byte that breaks the grammar, or at the end of the text.
enum Stop {
    At(usize),
    Eof,
}

fn ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_-.:".contains(&b) || b >= 0x80
}

impl Cur<'_> {
    fn peek(&self) -> Result<u8, Stop> {
        self.s.get(self.pos).copied().ok_or(Stop::Eof)
    }
    fn bump(&mut self) {
        self.pos += 1;
    }
    fn expect(&mut self, b: u8) -> Result<(), Stop> {
        if self.peek()? == b {
            self.bump();
            Ok(())
        } else {
            Err(Stop::At(self.pos))
        }
    }
    fn lit(&mut self, l: &[u8]) -> Result<(), Stop> {
        l.iter().try_for_each(|b| self.expect(*b))
    }
    fn skip_ws(&mut self) -> Result<(), Stop> {
        while ws(self.peek()?) {
            self.bump();
        }
        Ok(())
    }
    fn ident(&mut self) -> Result<Vec<u8>, Stop> {
        let start = self.pos;
        while ident(self.peek()?) {
            self.bump();
        }
        Ok(self.s[start..self.pos].to_vec())
    }
    /// A quoted value; returns the raw bytes and the offset of the closing quote.
    fn quoted(&mut self) -> Result<(Vec<u8>, usize), Stop> {
        let q = self.peek()?;
        if q != b'"' && q != b'\'' {
            return Err(Stop::At(self.pos));
        }
        self.bump();
        let start = self.pos;
        while self.peek()? != q {
            self.bump();
        }
        let raw = self.s[start..self.pos].to_vec();
        let close = self.pos;
        self.bump();
        Ok((raw, close))
    }
    /// A doubled closing quote is skipped.
    fn extra_quotes(&mut self, close: usize) -> Result<(), Stop> {
        while self.peek()? == self.s[close] {
            self.bump();
        }
        Ok(())
    }

    fn tag(&mut self) -> Result<ToolAction, Stop> {
        self.lit(b"<tool_action")?;
        if !ws(self.peek()?) {
            return Err(Stop::At(self.pos));
        }
        self.skip_ws()?;
        self.lit(b"name")?;
        self.skip_ws()?;
        self.expect(b'=')?;
        self.skip_ws()?;
        let (name, close) = self.quoted()?;
        if name.iter().all(|b| ws(*b)) {
            return Err(Stop::At(close));
        }
        self.extra_quotes(close)?;
        let name = decode(&name).trim().to_owned();
        self.skip_ws()?;
        let mut args = Map::new();
        match self.peek()? {
            b'/' => {
                self.bump();
                self.expect(b'>')?;
                return Ok(ToolAction {
                    name,
                    arguments: args,
                });
            }
            b'>' => self.bump(),
            _ => return Err(Stop::At(self.pos)),
        }
        let mut open_elem: Option<Vec<u8>> = None;
        loop {
            self.skip_ws()?;
            if self.peek()? != b'<' {
                return Err(Stop::At(self.pos));
            }
            self.last_lt = self.pos;
            self.bump();
            if self.peek()? == b'/' {
                self.bump();
                let close = self.ident()?;
                if ws(self.peek()?) {
                    if close.is_empty() {
                        return Err(Stop::At(self.pos));
                    }
                    self.skip_ws()?;
                }
                let gt = self.pos;
                self.expect(b'>')?;
                if close == b"tool_action" {
                    return Ok(ToolAction {
                        name,
                        arguments: args,
                    });
                } else if open_elem.as_deref() == Some(close.as_slice()) {
                    open_elem = None;
                } else {
                    return Err(Stop::At(gt));
                }
                continue;
            }
            let elem = self.ident()?;
            if elem.is_empty() || !ws(self.peek()?) {
                return Err(Stop::At(self.pos));
            }
            self.skip_ws()?;
            self.lit(b"value")?;
            self.skip_ws()?;
            self.expect(b'=')?;
            self.skip_ws()?;
            let (raw, close) = self.quoted()?;
            self.extra_quotes(close)?;
            self.skip_ws()?;
            let key = String::from_utf8(elem.clone()).unwrap();
            match self.peek()? {
                b'/' => {
                    self.bump();
                    self.expect(b'>')?;
                    args.insert(key, Value::String(decode(&raw)));
                }
                b'>' => {
                    self.bump();
                    args.insert(key, Value::String(decode(&raw)));
                    open_elem = Some(elem);
                }
                _ => return Err(Stop::At(self.pos)),
            }
        }
    }
}

fn try_tag(s: &[u8]) -> Outcome {
    let mut c = Cur {
        s,
        pos: 0,
        last_lt: 0,
    };
    match c.tag() {
        Ok(action) => Outcome::Done(action, c.pos),
        Err(Stop::Eof) => Outcome::Incomplete,
        Err(Stop::At(f)) => {
            if s[f] == b'<' || c.last_lt == 0 {
                Outcome::Fail(f)
            } else {
                Outcome::Fail(c.last_lt)
            }
        }
    }
}

fn decode(raw: &[u8]) -> String {
    let s = String::from_utf8(raw.to_vec()).unwrap();
    let mut out = String::new();
    let mut i = 0;
    'outer: while i < s.len() {
        let rest = &s[i..];
        if let Some(after) = rest.strip_prefix('&') {
            for (name, ch) in [
                ("quot;", '"'),
                ("amp;", '&'),
                ("lt;", '<'),
                ("gt;", '>'),
                ("apos;", '\''),
            ] {
                if after.starts_with(name) {
                    out.push(ch);
                    i += 1 + name.len();
                    continue 'outer;
                }
            }
            if let Some(semi) = rest.find(';').filter(|n| *n <= 12) {
                let body = &rest[1..semi];
                let parsed = body.strip_prefix('#').and_then(|n| {
                    let (d, radix) = match n.strip_prefix(['x', 'X']) {
                        Some(h) => (h, 16),
                        None => (n, 10),
                    };
                    if d.is_empty() || !d.chars().all(|c| c.is_digit(radix)) {
                        return None;
                    }
                    u32::from_str_radix(d, radix).ok().and_then(char::from_u32)
                });
                if let Some(ch) = parsed {
                    out.push(ch);
                    i += semi + 1;
                    continue;
                }
            }
        }
        let ch = rest.chars().next().unwrap();
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn oracle(text: &str) -> Vec<TagEvent> {
    let s = text.as_bytes();
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut i = 0;
    while i < s.len() {
        if s[i] != b'<' {
            let ch = text[i..].chars().next().unwrap();
            pending.push(ch);
            i += ch.len_utf8();
            continue;
        }
        match try_tag(&s[i..]) {
            Outcome::Done(action, used) => {
                if !pending.is_empty() {
                    out.push(TagEvent::Text(std::mem::take(&mut pending)));
                }
                out.push(TagEvent::Action(action));
                i += used;
            }
            Outcome::Fail(restart) => {
                pending.push_str(&text[i..i + restart]);
                i += restart;
            }
            Outcome::Incomplete => {
                let held = &text[i..];
                if held.starts_with("<tool_action") {
                    if !pending.is_empty() {
                        out.push(TagEvent::Text(std::mem::take(&mut pending)));
                    }
                    out.push(TagEvent::Unclosed {
                        text: held.to_owned(),
                    });
                } else {
                    pending.push_str(held);
                }
                i = s.len();
            }
        }
    }
    if !pending.is_empty() {
        out.push(TagEvent::Text(pending));
    }
    out
}

const FRAGMENTS: &[&str] = &[
    "<tool_action",
    " name=\"",
    " name='",
    "name",
    "=",
    "\"",
    "'",
    ">",
    "/>",
    "/",
    " ",
    "\n",
    "<q",
    " value=\"",
    " value='",
    "value",
    "</q>",
    "</r>",
    "</tool_action>",
    "</tool_action",
    "</",
    "<",
    "x",
    "中",
    "&amp;",
    "&#20013;",
    "&#x+41;",
    "&amp;中文中文中文",
    "&lt",
    "tool_action",
    "<tool_action name=\"a\">",
    "<q value=\"1\"/>",
    "<r value='2'>",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn o3_prop_parser_agrees_with_independent_oracle(
        parts in prop::collection::vec(prop::sample::select(FRAGMENTS), 0..40),
    ) {
        let text = parts.concat();
        prop_assert_eq!(parse_tool_actions(&text), oracle(&text), "text: {:?}", text);
    }
}

#[test]
fn o3_oracle_agrees_on_the_spec_examples() {
    for t in [
        "<tool_action name=\"vector-search\">\n  <query value=\"读取文件\" />\n  <limit value=\"5\" />\n</tool_action>",
        "思考: 我需要搜索...<tool_action name=\"vector-search\"><query value=\"test\"\" /></tool_action>接下来...",
        "<tool_action name=\"a\"><q value=\"1\"/>\n<tool_action name=\"b\"><q value=\"2\"/></tool_action>",
    ] {
        let got = parse_tool_actions(t);
        assert_eq!(got, oracle(t), "{t}");
        assert!(got.iter().any(|e| matches!(e, TagEvent::Action(_))), "{t}");
    }
}
