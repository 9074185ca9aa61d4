//! The grammar as Lark for llguidance, which computes the masks from it while the token
//! budget is far from its end.

use serde_json::Value;

use super::{Grammar, NUMBER_MAX, Node, NodeId, SchemaError};

impl Grammar {
    /// The same language as a Lark grammar for llguidance: one rule per sequence or choice,
    /// literals inline, strings, numbers and text as lexemes with the same length caps, so a
    /// token llguidance allows is one this grammar allows (the property test checks it).
    pub(crate) fn lark(&self) -> Result<String, SchemaError> {
        let mut out = format!("start: {}\n", self.lark_atom(self.root));
        let mut seen = vec![false; self.nodes.len()];
        let mut todo = vec![self.root];
        while let Some(n) = todo.pop() {
            if std::mem::replace(&mut seen[n as usize], true) {
                continue;
            }
            let line = match &self.nodes[n as usize] {
                Node::Lit(_) => continue,
                Node::Seq(c) | Node::Alt(c) => {
                    todo.extend(c.iter().copied());
                    let sep = if matches!(self.nodes[n as usize], Node::Seq(_)) {
                        " "
                    } else {
                        " | "
                    };
                    let body: Vec<String> = c.iter().map(|&x| self.lark_atom(x)).collect();
                    let body = if body.is_empty() {
                        "\"\"".to_owned()
                    } else {
                        body.join(sep)
                    };
                    format!("r{n}: {body}")
                }
                Node::Str { min, max } => {
                    format!(r#"S{n}: /"(?:[^"\\\x00-\x1F\x7F]|\\["\\\x2Fbfnrt]){{{min},{max}}}"/"#)
                }
                Node::Num { integer } => {
                    let frac = if *integer { "" } else { r"(?:\.[0-9]+)?" };
                    format!(r"N{n}: /-?(?:0|[1-9][0-9]*){frac}/ & /.{{1,{NUMBER_MAX}}}/")
                }
                Node::Text { not_starting } => match not_starting.as_slice() {
                    [] => format!(r"T{n}: /(?s:.)+/"),
                    [b] if b.is_ascii() => format!(r"T{n}: /[^\x{b:02X}](?s:.)*/"),
                    _ => {
                        return Err(SchemaError(
                            "text may only be kept from starting with one ASCII byte".into(),
                        ));
                    }
                },
            };
            out.push_str(&line);
            out.push('\n');
        }
        Ok(out)
    }

    fn lark_atom(&self, n: NodeId) -> String {
        match &self.nodes[n as usize] {
            Node::Lit(b) => Value::String(String::from_utf8_lossy(b).into_owned()).to_string(),
            Node::Str { .. } => format!("S{n}"),
            Node::Num { .. } => format!("N{n}"),
            Node::Text { .. } => format!("T{n}"),
            Node::Seq(_) | Node::Alt(_) => format!("r{n}"),
        }
    }
}
