//! Extracting one JSON value from raw model text (O1).

use serde_json::Value;

/// Why no JSON value could be taken from a model's answer. The `Display` text is written to
/// be sent back to the model as is.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// The text holds no `{` or `[` at all (or is empty).
    #[error(
        "the answer contains no JSON: reply with a single JSON object only, optionally inside a ```json code fence"
    )]
    NotFound,
    /// Something that starts like JSON was found but does not parse.
    #[error(
        "the JSON in the answer is malformed at line {line}, column {column} ({message}); send the whole JSON again, valid this time: double-quoted keys and strings, no trailing commas, no comments"
    )]
    Malformed {
        /// 1-based line of the error, within the candidate JSON text.
        line: usize,
        /// 1-based column of the error, within the candidate JSON text.
        column: usize,
        /// serde_json's description of the problem.
        message: String,
    },
    /// The JSON stops before its end: the answer was probably cut off.
    #[error(
        "the JSON in the answer is cut off before its end ({message}); send the complete JSON again, shorter if needed"
    )]
    Truncated {
        /// serde_json's description of the problem.
        message: String,
    },
}

impl JsonError {
    fn from_serde(e: &serde_json::Error) -> Self {
        // serde_json appends " at line L column C"; the position is reported separately.
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
        if e.is_eof() {
            JsonError::Truncated { message }
        } else {
            JsonError::Malformed {
                line: e.line(),
                column: e.column(),
                message,
            }
        }
    }
}

/// Takes the JSON value out of a model's answer.
///
/// Tried in order, first success wins:
/// 1. the whole text (trimmed) is JSON — any value, scalars included;
/// 2. the body of a Markdown code fence: ```` ```json ```` fences first, then fences with no
///    language or another one;
/// 3. the first `{…}` object embedded in prose, else the first `[…]` array (the text after
///    the value is ignored).
///
/// Never panics, whatever the input; the cost is linear in practice (each candidate start is
/// tried once and serde_json stops at the first error or at depth 128).
///
/// ```
/// use toolwright_output_control::extract_json;
/// let answer = "Sure! Here is the call:\n```json\n{\"tool\": \"get_weather\", \"arguments\": {\"city\": \"北京\"}}\n```\nAnything else?";
/// let v = extract_json(answer)?;
/// assert_eq!(v["arguments"]["city"], "北京");
/// assert!(extract_json("no json here").is_err());
/// # Ok::<(), toolwright_output_control::JsonError>(())
/// ```
pub fn extract_json(text: &str) -> Result<Value, JsonError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(JsonError::NotFound);
    }
    // The error reported is that of the candidate that parsed furthest: the one most
    // likely meant as the answer.
    let mut best: Option<((usize, usize), JsonError)> = None;
    let mut consider = |e: &serde_json::Error| {
        let progress = if e.is_eof() {
            (usize::MAX, 0)
        } else {
            (e.line(), e.column())
        };
        if best.as_ref().is_none_or(|(p, _)| progress > *p) {
            best = Some((progress, JsonError::from_serde(e)));
        }
    };
    match serde_json::from_str::<Value>(trimmed) {
        Ok(v) => return Ok(v),
        Err(e) => {
            // Only count this error when the whole text looked like JSON.
            if trimmed.starts_with(['{', '[']) {
                consider(&e);
            }
        }
    }
    let fences = code_fences(text);
    for want_json in [true, false] {
        for fence in fences.iter().filter(|f| f.is_json == want_json) {
            let body = fence.body.trim();
            if body.is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(body) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    if want_json || body.starts_with(['{', '[']) {
                        consider(&e);
                    }
                }
            }
        }
    }
    for open in [b'{', b'['] {
        for (i, _) in text.bytes().enumerate().filter(|(_, b)| *b == open) {
            let mut values = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
            match values.next() {
                Some(Ok(v)) => return Ok(v),
                Some(Err(e)) => consider(&e),
                None => {}
            }
        }
    }
    Err(best.map_or(JsonError::NotFound, |(_, e)| e))
}

struct Fence<'a> {
    is_json: bool,
    body: &'a str,
}

/// Markdown code fences: a line starting (after up to 3 spaces) with ``` or ~~~, up to a line
/// holding the same fence, or the end of the text (a fence cut off by the end of the answer).
fn code_fences(text: &str) -> Vec<Fence<'_>> {
    let mut out = Vec::new();
    let mut open: Option<(&str, bool, usize)> = None; // (marker, is_json, body start)
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let line_start = offset;
        offset += line.len();
        let t = line.trim_start_matches(' ');
        if line.len() - t.len() > 3 {
            continue;
        }
        let marker = if t.starts_with("```") {
            "```"
        } else if t.starts_with("~~~") {
            "~~~"
        } else {
            continue;
        };
        match open {
            None => {
                let lang = t[3..].trim().trim_start_matches(['`', '~']).trim();
                let lang = lang.split_whitespace().next().unwrap_or("");
                let is_json = lang.eq_ignore_ascii_case("json")
                    || lang.eq_ignore_ascii_case("jsonc")
                    || lang.eq_ignore_ascii_case("json5");
                open = Some((marker, is_json, offset));
            }
            Some((m, is_json, body_start)) if m == marker && t[3..].trim().is_empty() => {
                out.push(Fence {
                    is_json,
                    body: &text[body_start..line_start],
                });
                open = None;
            }
            Some(_) => {}
        }
    }
    if let Some((_, is_json, body_start)) = open {
        out.push(Fence {
            is_json,
            body: &text[body_start..],
        });
    }
    out
}
