//! The grammar run over bytes: a [`State`] is every pushdown stack the bytes so far can still
//! continue in; feeding a byte steps each stack, and a state knows how few bytes complete it
//! ([`Grammar::distance`]) and how many it could come to owe ([`Grammar::reach`]).

use super::{Grammar, NUMBER_MAX, Node, NodeId};

/// How far a number has come (`-?(0|[1-9][0-9]*)(\.[0-9]+)?`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum NumSt {
    Start,
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
}

impl NumSt {
    fn accepting(self) -> bool {
        matches!(self, Self::Zero | Self::Int | Self::Frac)
    }
}

/// One level of a pushdown stack: where the matcher is inside one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Frame {
    Lit {
        node: NodeId,
        pos: u32,
    },
    Str {
        open: bool,
        esc: bool,
        len: u32,
        min: u32,
        max: u32,
        /// UTF-8 continuation bytes still expected, and the range of the next one.
        need: u8,
        lo: u8,
        hi: u8,
    },
    Num {
        st: NumSt,
        integer: bool,
        len: u8,
    },
    Seq {
        node: NodeId,
        idx: u32,
    },
    Text {
        node: NodeId,
        /// Bytes written, up to 2 (only "none", "one" and "more" matter).
        len: u8,
        /// How many leading bytes matched the forbidden start; `u8::MAX` once they differ.
        guard: u8,
    },
}

/// `Frame::Text::guard` once the text no longer starts like the forbidden prefix.
const DIVERGED: u8 = u8::MAX;

pub(super) type Stack = Vec<Frame>;

/// Where the matcher is: every way the bytes so far can continue (an empty stack = complete).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub(super) stacks: Vec<Stack>,
}

impl State {
    /// No continuation is possible: the bytes so far are not a prefix of the grammar.
    pub fn is_dead(&self) -> bool {
        self.stacks.is_empty()
    }
}

impl Grammar {
    /// The state before any byte.
    pub fn start(&self) -> State {
        let mut out = Vec::new();
        self.push_node(Vec::new(), self.root, &mut out);
        State { stacks: out }
    }

    fn push_node(&self, mut stack: Stack, node: NodeId, out: &mut Vec<Stack>) {
        match &self.nodes[node as usize] {
            Node::Lit(b) if b.is_empty() => self.complete(stack, out),
            Node::Lit(_) => {
                stack.push(Frame::Lit { node, pos: 0 });
                out.push(stack);
            }
            Node::Str { min, max } => {
                stack.push(Frame::Str {
                    open: false,
                    esc: false,
                    len: 0,
                    min: *min,
                    max: *max,
                    need: 0,
                    lo: 0,
                    hi: 0,
                });
                out.push(stack);
            }
            Node::Num { integer } => {
                stack.push(Frame::Num {
                    st: NumSt::Start,
                    integer: *integer,
                    len: 0,
                });
                out.push(stack);
            }
            Node::Seq(c) if c.is_empty() => self.complete(stack, out),
            Node::Seq(c) => {
                let first = c[0];
                stack.push(Frame::Seq { node, idx: 0 });
                self.push_node(stack, first, out);
            }
            Node::Alt(c) => {
                for &x in c {
                    self.push_node(stack.clone(), x, out);
                }
            }
            Node::Text { not_starting } => {
                stack.push(Frame::Text {
                    node,
                    len: 0,
                    guard: if not_starting.is_empty() { DIVERGED } else { 0 },
                });
                out.push(stack);
            }
        }
    }

    /// The child on top of `stack` just finished (and was popped): move its parent on.
    fn complete(&self, mut stack: Stack, out: &mut Vec<Stack>) {
        match stack.pop() {
            None => out.push(stack),
            Some(Frame::Seq { node, idx }) => {
                let Node::Seq(c) = &self.nodes[node as usize] else {
                    return;
                };
                let next = idx as usize + 1;
                if next < c.len() {
                    let child = c[next];
                    stack.push(Frame::Seq {
                        node,
                        idx: next as u32,
                    });
                    self.push_node(stack, child, out);
                } else {
                    self.complete(stack, out);
                }
            }
            // Only sequences have children on the stack.
            Some(_) => {}
        }
    }

    fn feed_stack(&self, mut stack: Stack, b: u8, out: &mut Vec<Stack>) {
        let Some(top) = stack.last_mut() else {
            return; // complete: nothing may follow
        };
        match top {
            Frame::Lit { node, pos } => {
                let Node::Lit(bytes) = &self.nodes[*node as usize] else {
                    return;
                };
                if bytes.get(*pos as usize) != Some(&b) {
                    return;
                }
                *pos += 1;
                if *pos as usize == bytes.len() {
                    stack.pop();
                    self.complete(stack, out);
                } else {
                    out.push(stack);
                }
            }
            Frame::Str {
                open,
                esc,
                len,
                min,
                max,
                need,
                lo,
                hi,
            } => {
                if !*open {
                    if b == b'"' {
                        *open = true;
                        out.push(stack);
                    }
                    return;
                }
                if *need > 0 {
                    if (*lo..=*hi).contains(&b) {
                        *need -= 1;
                        (*lo, *hi) = (0x80, 0xBF);
                        out.push(stack);
                    }
                    return;
                }
                if *esc {
                    if b"\"\\/bfnrt".contains(&b) {
                        *esc = false;
                        out.push(stack);
                    }
                    return;
                }
                if b == b'"' {
                    if *len >= *min {
                        stack.pop();
                        self.complete(stack, out);
                    }
                    return;
                }
                if *len >= *max || b < 0x20 || b == 0x7F {
                    return;
                }
                let (n, l, h) = match b {
                    b'\\' => {
                        *esc = true;
                        (0, 0, 0)
                    }
                    0x00..=0x7F => (0, 0, 0),
                    0xC2..=0xDF => (1, 0x80, 0xBF),
                    0xE0 => (2, 0xA0, 0xBF),
                    0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
                    0xED => (2, 0x80, 0x9F),
                    0xF0 => (3, 0x90, 0xBF),
                    0xF1..=0xF3 => (3, 0x80, 0xBF),
                    0xF4 => (3, 0x80, 0x8F),
                    _ => return,
                };
                *len += 1;
                (*need, *lo, *hi) = (n, l, h);
                out.push(stack);
            }
            Frame::Num { st, integer, len } => {
                let digit = b.is_ascii_digit();
                let next = if *len >= NUMBER_MAX {
                    None
                } else {
                    match (*st, b) {
                        (NumSt::Start, b'-') => Some(NumSt::Minus),
                        (NumSt::Start | NumSt::Minus, b'0') => Some(NumSt::Zero),
                        (NumSt::Start | NumSt::Minus, _) if digit => Some(NumSt::Int),
                        (NumSt::Int, _) if digit => Some(NumSt::Int),
                        (NumSt::Zero | NumSt::Int, b'.') if !*integer => Some(NumSt::Dot),
                        (NumSt::Dot | NumSt::Frac, _) if digit => Some(NumSt::Frac),
                        _ => None,
                    }
                };
                // A number may only step into a state that needs another digit (`-`, `.`)
                // while there is room left for that digit: `123…6.` at the cap can neither go
                // on nor end.
                let next = next.filter(|n| n.accepting() || *len + 1 < NUMBER_MAX);
                if let Some(n) = next {
                    *st = n;
                    *len += 1;
                    out.push(stack);
                } else if st.accepting() {
                    // The number ended; the byte belongs to what follows it.
                    stack.pop();
                    let mut after = Vec::new();
                    self.complete(stack, &mut after);
                    for s in after {
                        self.feed_stack(s, b, out);
                    }
                }
            }
            Frame::Text { node, len, guard } => {
                if *guard != DIVERGED {
                    let Node::Text { not_starting } = &self.nodes[*node as usize] else {
                        return;
                    };
                    if not_starting.get(usize::from(*guard)) == Some(&b) {
                        *guard += 1;
                        if usize::from(*guard) == not_starting.len() {
                            return; // the forbidden start is complete: this branch is dead
                        }
                    } else {
                        *guard = DIVERGED;
                    }
                }
                *len = len.saturating_add(1).min(2);
                out.push(stack);
            }
            Frame::Seq { .. } => {}
        }
    }

    /// The state after one more byte (dead if the byte cannot come next).
    pub fn feed(&self, state: &State, b: u8) -> State {
        let mut out = Vec::with_capacity(state.stacks.len());
        for s in &state.stacks {
            self.feed_stack(s.clone(), b, &mut out);
        }
        State { stacks: out }
    }

    /// The state after some bytes.
    pub fn feed_bytes(&self, state: &State, bytes: &[u8]) -> State {
        let mut s = state.clone();
        for &b in bytes {
            if s.is_dead() {
                break;
            }
            s = self.feed(&s, b);
        }
        s
    }

    fn stack_can_end(&self, stack: &Stack) -> bool {
        match stack.last() {
            None => true,
            Some(Frame::Text { len, .. }) => *len > 0 && stack.len() == 1,
            Some(Frame::Num { st, .. }) if st.accepting() => {
                let mut s = stack.clone();
                s.pop();
                let mut after = Vec::new();
                self.complete(s, &mut after);
                after.iter().any(Vec::is_empty)
            }
            Some(_) => false,
        }
    }

    /// The model is writing the body of a string value: what comes next is its free choice,
    /// not structure the grammar dictates.
    pub fn in_string(&self, state: &State) -> bool {
        !state.stacks.is_empty()
            && state.stacks.iter().all(|s| {
                matches!(
                    s.last(),
                    Some(Frame::Str { open: true, .. } | Frame::Text { .. })
                )
            })
    }

    /// The model is writing free text that nothing constrains any more (a plain-text answer
    /// past the point where it could still become a tool call): no mask is needed.
    pub fn is_free(&self, state: &State) -> bool {
        !state.stacks.is_empty()
            && state.stacks.iter().all(|s| {
                matches!(
                    s.as_slice(),
                    [Frame::Text {
                        guard: DIVERGED,
                        ..
                    }]
                )
            })
    }

    /// The bytes so far are a whole value.
    pub fn can_end(&self, state: &State) -> bool {
        state.stacks.iter().any(|s| self.stack_can_end(s))
    }

    /// The bytes so far are a whole value that nothing may extend (e.g. after the final `}`).
    pub fn is_finished(&self, state: &State) -> bool {
        !state.stacks.is_empty() && state.stacks.iter().all(Vec::is_empty)
    }

    /// The fewest bytes that complete the value from `state`.
    pub fn distance(&self, state: &State) -> u32 {
        state
            .stacks
            .iter()
            .map(|s| self.stack_distance(s))
            .min()
            .unwrap_or(u32::MAX)
    }

    fn stack_distance(&self, stack: &[Frame]) -> u32 {
        let mut d: u32 = 0;
        for f in stack {
            d = d.saturating_add(match *f {
                Frame::Lit { node, pos } => match &self.nodes[node as usize] {
                    Node::Lit(b) => b.len() as u32 - pos,
                    _ => 0,
                },
                Frame::Str {
                    open,
                    esc,
                    need,
                    len,
                    min,
                    ..
                } => {
                    // Characters still owed to `minLength` are at least one byte each.
                    let owed = min.saturating_sub(len);
                    if open {
                        1 + u32::from(need) + u32::from(esc) + owed
                    } else {
                        2 + owed
                    }
                }
                Frame::Num { st, .. } => u32::from(!st.accepting()),
                Frame::Text { len, .. } => u32::from(len == 0),
                Frame::Seq { node, idx } => match &self.nodes[node as usize] {
                    Node::Seq(c) => c[idx as usize + 1..]
                        .iter()
                        .fold(0u32, |a, &x| a.saturating_add(self.min_len[x as usize])),
                    _ => 0,
                },
            });
        }
        d
    }
}

impl Grammar {
    /// An upper bound of [`Grammar::distance`] over every state reachable from `state` (itself
    /// included): while the tokens left after the next one are at least this, no token the
    /// grammar allows can leave a value that does not fit, and the mask needs no budget check.
    pub fn reach(&self, state: &State) -> u32 {
        state
            .stacks
            .iter()
            .map(|s| self.stack_reach(s))
            .max()
            .unwrap_or(0)
    }

    /// For each frame: what the frames below it still owe, plus the most this frame can come to
    /// owe from here on (for a sequence: once its current child is done).
    fn stack_reach(&self, stack: &Stack) -> u32 {
        let mut below = 0u32;
        let mut worst = 0u32;
        for f in stack {
            let own = match *f {
                Frame::Lit { node, pos } => match &self.nodes[node as usize] {
                    Node::Lit(b) => (b.len() as u32).saturating_sub(pos),
                    _ => 0,
                },
                // The quotes, at most three UTF-8 continuation bytes or an escape's second byte,
                // and the characters still owed to `minLength`.
                Frame::Str { len, min, .. } => min.saturating_sub(len).saturating_add(5),
                Frame::Num { .. } | Frame::Text { .. } => 1,
                Frame::Seq { node, idx } => match &self.nodes[node as usize] {
                    Node::Seq(c) => {
                        let mut w = 0u32;
                        let mut after = 0u32;
                        for &x in c[idx as usize + 1..].iter().rev() {
                            w = w.max(self.max_dist[x as usize].saturating_add(after));
                            after = after.saturating_add(self.min_len[x as usize]);
                        }
                        w
                    }
                    _ => 0,
                },
            };
            worst = worst.max(below.saturating_add(own));
            below = below.saturating_add(self.stack_distance(std::slice::from_ref(f)));
        }
        worst
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::testing::{call, tools};
    use crate::grammar::{AnswerChoice, walks};

    #[test]
    fn text_is_free_once_it_cannot_become_a_call() {
        let g = Grammar::tool_call(&tools(), AnswerChoice::TextOrCall).unwrap();
        let at = |t: &str| g.feed_bytes(&g.start(), t.as_bytes());
        assert!(!g.is_free(&g.start()));
        assert!(!g.is_free(&at("<tool")), "may still become a call");
        assert!(at("<tooth").is_dead(), "neither a call nor text");
        assert!(g.is_free(&at("Sunny")));
        assert!(!g.is_free(&at(&call("weather", r#"{"city": "P"#))));
        assert!(g.is_finished(&at(&call("weather", r#"{"city": "P"}"#))));
    }

    #[test]
    fn in_string_is_only_the_body_of_a_string_value_or_text() {
        let g = Grammar::tool_call(&tools(), AnswerChoice::CallOnly).unwrap();
        let at = |t: &str| g.in_string(&g.feed_bytes(&g.start(), t.as_bytes()));
        assert!(!at("<tool_call>\n{\"name\": "));
        assert!(
            !at("<tool_call>\n{\"name\": \"wea"),
            "a tool name is a literal, not a string value"
        );
        assert!(at(r#"<tool_call>
{"name": "weather", "arguments": {"city": "Par"#));
        assert!(!at(r#"<tool_call>
{"name": "weather", "arguments": {"city": "Paris""#));
        let g = Grammar::tool_call(&tools(), AnswerChoice::TextOrCall).unwrap();
        assert!(g.in_string(&g.feed_bytes(&g.start(), b"Hello")));
    }

    #[test]
    fn distance_is_the_shortest_completion() {
        let g = Grammar::tool_call(&tools(), AnswerChoice::TextOrCall).unwrap();
        assert_eq!(g.distance(&g.start()), 1, "one byte of text");
        let g = Grammar::tool_call(&tools(), AnswerChoice::CallOnly).unwrap();
        assert_eq!(
            g.distance(&g.start()) as usize,
            call("weather", r#"{"city": ""}"#).len()
        );
        let s = g.feed_bytes(
            &g.start(),
            b"<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"a\": 1",
        );
        assert_eq!(g.distance(&s) as usize, ", \"b\": 0}}\n</tool_call>".len());
    }

    /// a masked walk got stuck after this text. The number `872012003712916` (15
    /// characters) took a `.` as its 16th, the cap, and then could neither take a digit nor
    /// end. A number now steps into `-` or `.` only with room left for the digit it owes.
    #[test]
    fn a_number_at_its_length_cap_can_always_end() {
        let g = Grammar::from_schema(&walks::schemas()[1]).unwrap();
        let stuck = "{\"n\": 0, \"o\": {\"k\": \"@%ꄸ#6\"}, \"ok\": false, \"x\": 872012003712916";
        let s = g.feed_bytes(&g.start(), stuck.as_bytes());
        assert!(!s.is_dead());
        assert!(
            g.feed(&s, b'.').is_dead(),
            "no room for a digit after the dot"
        );
        let s = g.feed_bytes(&s, b"}");
        assert!(g.is_finished(&s));
        // With room left the dot is fine, and the number closes with one more digit.
        let s = g.feed_bytes(
            &g.start(),
            b"{\"n\": 0, \"o\": {\"k\": \"abc\"}, \"x\": 12345678901234.",
        );
        assert!(!s.is_dead());
        assert!(g.is_finished(&g.feed_bytes(&s, b"5}")));
        // Every reachable number state can end within its distance.
        let mut s = g.feed_bytes(&g.start(), b"{\"n\": -");
        for _ in 0..NUMBER_MAX {
            assert!(g.distance(&s) < u32::MAX / 4, "{s:?}");
            let next = g.feed(&s, b'9');
            if next.is_dead() {
                break;
            }
            s = next;
        }
        assert!(!g.feed_bytes(&s, b", \"o\": {\"k\": \"abc\"}}").is_dead());
        // llguidance, which masks while the budget is far, agrees: no dot, and `}` ends it.
        let (_, v) = walks::engine_vocabulary();
        let mut c = crate::constraint::Constraint::start(&g, &v);
        for &b in stuck.as_bytes() {
            c.commit(u32::from(b), &[b]).unwrap();
        }
        let mut allowed = Vec::new();
        c.mask(1000, &mut allowed).unwrap();
        assert!(c.masked_by_llguidance());
        assert!(!allowed.contains(&u32::from(b'.')), "{allowed:?}");
        assert!(allowed.contains(&u32::from(b'}')), "{allowed:?}");
        // With no token left after this one, the keeper allows only the close.
        c.mask(0, &mut allowed).unwrap();
        assert!(!c.masked_by_llguidance());
        assert_eq!(allowed, vec![u32::from(b'}')]);
    }
}
