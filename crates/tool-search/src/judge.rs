//! A second look at the search's candidates by a chat model: the prompt, the schema of
//! its answer, and the reading of that answer. Pure: the caller sends the prompt to its model.
//!
//! Retrieval (BM25 and an encoder) is fast and recall-oriented, but a small encoder does not
//! know that "how high is Everest" wants an elevation tool, nor that "turn off the lights" is
//! served by none of 300 developer tools. A chat model reading the request and the best 20
//! candidates (name and first sentence) does — the field's "LLM tool selector" step. The
//! judge can only **reorder** the candidates and **turn the whole list down** ("no tool
//! fits"); a name it makes up, or repeats, is ignored, so it never adds a tool.
//!
//! ```
//! use toolwright_tool_search::judge::{self, Verdict};
//! let candidates = [
//!     ("maps__elevation", "Get elevation data for locations on the earth"),
//!     ("git__stash", "Save local changes away"),
//! ];
//! let prompt = judge::prompt("how high is Everest", &candidates);
//! assert!(prompt.user.contains("- maps__elevation: Get elevation data"));
//! // The schema allows only the candidates' names.
//! assert_eq!(prompt.schema["properties"]["tools"]["items"]["enum"][1], "git__stash");
//!
//! let names = candidates.map(|(n, _)| n);
//! // A model's answer, with the usual wrapping around it.
//! let answer = "```json\n{\"tools\": [\"maps__elevation\", \"made_up__tool\"]}\n```";
//! assert_eq!(judge::read(answer, &names), Some(Verdict::Picks(vec![0])));
//! assert_eq!(judge::read(r#"{"tools": []}"#, &names), Some(Verdict::NoneFits));
//! assert_eq!(judge::read("I think the first one", &names), None);
//! ```

use serde_json::{Value, json};

/// The most characters of a model's answer [`read`] looks at.
pub const MAX_ANSWER_CHARS: usize = 16 * 1024;

/// The most characters of a candidate's summary in the prompt.
pub const MAX_SUMMARY_CHARS: usize = 200;

/// The name under which [`Prompt::schema`] is sent (`response_format.json_schema.name`).
pub const SCHEMA_NAME: &str = "tool_choice";

/// How many `{` or `[` positions [`read`] tries before it gives up on an answer.
const MAX_STARTS: usize = 64;

/// What to send to the judge: a system and a user message, and the JSON Schema its answer
/// must follow (`{"tools": [names…]}`, the names restricted to the candidates').
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The instructions.
    pub system: String,
    /// The request and the numbered candidates.
    pub user: String,
    /// The answer's schema: send it as a strict `json_schema` response format.
    pub schema: Value,
}

/// What the judge said, as indices into the candidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// These candidates serve the request, best first (known names only, each once).
    Picks(Vec<usize>),
    /// The judge said no candidate serves the request.
    NoneFits,
}

/// The prompt for `request` over `candidates` (name, what the tool does; the summary is cut
/// to its first sentence, at most [`MAX_SUMMARY_CHARS`]).
pub fn prompt(request: &str, candidates: &[(&str, &str)]) -> Prompt {
    let system = "You choose tools for a request. You get the user's request and candidate tools \
                  (name: what the tool does). Answer with JSON {\"tools\": [names]}: the names of \
                  the candidates that can do what the request asks, best first, at most 5, \
                  copied exactly from the list. If no candidate can do it, answer {\"tools\": []}."
        .to_owned();
    let request: String = request.chars().take(crate::MAX_QUERY_CHARS).collect();
    let mut user = format!("Request: {}\n\nCandidates:\n", request.trim());
    for (name, summary) in candidates {
        let summary = crate::text::first_sentence(summary, MAX_SUMMARY_CHARS);
        if summary.is_empty() {
            user.push_str(&format!("- {name}\n"));
        } else {
            user.push_str(&format!("- {name}: {summary}\n"));
        }
    }
    let names: Vec<&str> = candidates.iter().map(|(n, _)| *n).collect();
    let schema = json!({
        "type": "object",
        "properties": {
            "tools": {"type": "array", "items": {"type": "string", "enum": names}}
        },
        "required": ["tools"],
        "additionalProperties": false
    });
    Prompt {
        system,
        user,
        schema,
    }
}

/// Reads the judge's `answer` over the candidates `names`: the first JSON object with a
/// `tools` array (or the first JSON array of strings) in the text, code fences and words around
/// it allowed. Names are matched exactly, else ignoring case and surrounding space; unknown and
/// repeated names are dropped. `None` when the answer holds no such list, or only unknown
/// names: an answer the caller cannot use (it keeps its own order).
pub fn read(answer: &str, names: &[&str]) -> Option<Verdict> {
    let answer = match answer.char_indices().nth(MAX_ANSWER_CHARS) {
        Some((end, _)) => &answer[..end],
        None => answer,
    };
    let list = answer
        .char_indices()
        .filter(|&(_, c)| c == '{' || c == '[')
        .take(MAX_STARTS)
        .find_map(|(i, _)| {
            let value = serde_json::Deserializer::from_str(&answer[i..])
                .into_iter::<Value>()
                .next()?
                .ok()?;
            match value {
                Value::Object(mut o) => match o.remove("tools") {
                    Some(Value::Array(a)) => Some(a),
                    _ => None,
                },
                Value::Array(a) if a.iter().all(Value::is_string) => Some(a),
                _ => None,
            }
        })?;
    if list.is_empty() {
        return Some(Verdict::NoneFits);
    }
    let mut picks: Vec<usize> = Vec::new();
    for item in &list {
        let Some(said) = item.as_str() else { continue };
        let found = names.iter().position(|n| *n == said).or_else(|| {
            let said = said.trim();
            names.iter().position(|n| n.eq_ignore_ascii_case(said))
        });
        if let Some(i) = found
            && !picks.contains(&i)
        {
            picks.push(i);
        }
    }
    (!picks.is_empty()).then_some(Verdict::Picks(picks))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 3] = ["fs__read_file", "maps__elevation", "git__stash"];

    #[test]
    fn answers_are_read_in_the_shapes_models_write_them() {
        let picks = |v: &[usize]| Some(Verdict::Picks(v.to_vec()));
        for (answer, want) in [
            (r#"{"tools":["maps__elevation"]}"#, picks(&[1])),
            (
                r#"{"tools":["git__stash","fs__read_file"]}"#,
                picks(&[2, 0]),
            ),
            (r#"{"tools":[]}"#, Some(Verdict::NoneFits)),
            (
                "Sure! {\"tools\": [\"git__stash\"]} Hope that helps.",
                picks(&[2]),
            ),
            (
                "```json\n{\"tools\": [\"MAPS__Elevation \"]}\n```",
                picks(&[1]),
            ),
            (r#"["fs__read_file", "fs__read_file"]"#, picks(&[0])),
            (r#"{"tools":["nope", 3, null, "git__stash"]}"#, picks(&[2])),
            // Only unknown names, no list, not JSON, a list of something else: unusable.
            (r#"{"tools":["nope"]}"#, None),
            (r#"{"choice": "git__stash"}"#, None),
            ("git__stash", None),
            ("", None),
            (r#"{"tools": "git__stash"}"#, None),
            ("[1, 2]", None),
            // A broken first object, then a good one.
            (
                r#"{"tools": [oops} then {"tools":["git__stash"]}"#,
                picks(&[2]),
            ),
        ] {
            assert_eq!(read(answer, &NAMES), want, "{answer:?}");
        }
    }

    #[test]
    fn a_long_answer_is_read_only_so_far() {
        let late = format!(
            "{}{}",
            " ".repeat(MAX_ANSWER_CHARS),
            r#"{"tools":["git__stash"]}"#
        );
        assert_eq!(read(&late, &NAMES), None);
        let many = format!(
            "{}{}",
            "{".repeat(MAX_STARTS),
            r#"{"tools":["git__stash"]}"#
        );
        assert_eq!(read(&many, &NAMES), None);
        let early = format!(
            "{}{}",
            "{".repeat(MAX_STARTS - 1),
            r#"{"tools":["git__stash"]}"#
        );
        assert_eq!(read(&early, &NAMES), Some(Verdict::Picks(vec![2])));
    }

    #[test]
    fn the_prompt_lists_each_candidate_once_with_its_first_sentence() {
        let p = prompt(
            "  how high is Everest  ",
            &[
                ("maps__elevation", "Get elevation data.\nMore detail here."),
                ("x__y", ""),
            ],
        );
        assert!(p.user.starts_with("Request: how high is Everest\n"));
        assert!(p.user.contains("- maps__elevation: Get elevation data\n"));
        assert!(p.user.ends_with("- x__y\n"));
        assert!(!p.user.contains("More detail"));
        assert_eq!(
            p.schema["properties"]["tools"]["items"]["enum"],
            json!(["maps__elevation", "x__y"])
        );
        assert_eq!(p.schema["required"], json!(["tools"]));
    }
}
