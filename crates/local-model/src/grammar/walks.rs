//! Random walks through the mask: whatever the model picks among the allowed tokens, the
//! text closes within the budget, parses, and is valid against the schema it came from.

use proptest::prelude::*;
use serde_json::{Value, json};
use toolwright_core::ToolSpec;

use super::{AnswerChoice, Grammar, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, TokenTrie};
use crate::constraint::{Constraint, Vocabulary};

pub(super) fn schemas() -> Vec<Value> {
    vec![
        json!({"type":"object","properties":{"recipient":{"type":"string","minLength":1},"text":{"type":"string","minLength":1,"maxLength":40},"quickReplies":{"type":"array","items":{"type":"string","minLength":1,"maxLength":8},"maxItems":10}},"required":["recipient","text"]}),
        // Properties in alphabetical order: the same key order whether or not serde_json
        // keeps insertion order (llguidance turns `preserve_order` on).
        json!({"type":"object","properties":{"c":{"type":"integer","minimum":-2,"maximum":12},"e":{"enum":["a","b",1,true]},"n":{"type":"integer"},"o":{"type":"object","properties":{"k":{"type":"string","minLength":3,"maxLength":5}},"required":["k"]},"ok":{"type":"boolean"},"x":{"type":["number","null"]}},"required":["n","o"]}),
        json!({"type":"array","items":{"anyOf":[{"type":"string","minLength":2,"maxLength":4},{"const":"c"}]},"minItems":1,"maxItems":4}),
    ]
}

fn vocabulary() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
    for t in [
        "\"",
        "\\",
        ", \"",
        "\": ",
        "{\"",
        "[\"",
        "\"]",
        "\"}",
        "}}",
        "北京",
        "é",
        "ab",
        "true",
        "null",
        "12",
        ".5",
        "-",
        "\\n",
        "\\\"",
        "recipient",
        "text",
        "quickReplies",
    ] {
        // Each byte string once (the trie keeps one id per string).
        if t.len() > 1 {
            v.push(t.as_bytes().to_vec());
        }
    }
    v
}

/// The walk's vocabulary as the engine sees it: every byte, some longer tokens, and
/// one end-of-turn control token (the last id).
pub(super) fn engine_vocabulary() -> (Vec<Vec<u8>>, Vocabulary) {
    let vocab = vocabulary();
    let mut tokens: Vec<Option<&[u8]>> = vocab.iter().map(|t| Some(t.as_slice())).collect();
    tokens.push(None);
    let end = vec![vocab.len() as u32];
    let v = Vocabulary::new(&tokens, end);
    (vocab, v)
}

fn walk_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new("send", "", schemas()[0].clone()),
        ToolSpec::new("mixed", "", schemas()[1].clone()),
    ]
}

/// The grammars the walks go through: each schema alone (`which` < 3), the tools' calls
/// alone (3), and a call or an answer of schema 1 or 2 (4, 5).
fn walk_grammar(which: usize) -> Grammar {
    let schemas = schemas();
    match which {
        0..3 => Grammar::from_schema(&schemas[which]).unwrap(),
        3 => Grammar::tool_call(&walk_tools(), AnswerChoice::CallOnly).unwrap(),
        _ => Grammar::tool_call(&walk_tools(), AnswerChoice::JsonOrCall(&schemas[which - 3]))
            .unwrap(),
    }
}

/// How many grammars [`walk_grammar`] has.
const WALK_GRAMMARS: usize = 6;

/// The value a finished text stands for, checked against the schema it came from: the text
/// itself (a schema's JSON, or the answer instead of a call), or the arguments of a declared
/// tool's call.
fn check(which: usize, text: &[u8]) -> Result<(), TestCaseError> {
    let text = String::from_utf8_lossy(text);
    let answer = match which {
        0..3 => Some(which),
        3 => None,
        _ => (!text.starts_with(TOOL_CALL_OPEN)).then_some(which - 3),
    };
    let (schema, json) = if let Some(i) = answer {
        (schemas()[i].clone(), text.to_string())
    } else {
        let body = text
            .strip_prefix(TOOL_CALL_OPEN)
            .and_then(|t| t.strip_suffix(TOOL_CALL_CLOSE))
            .ok_or_else(|| TestCaseError::fail(format!("not a call block: {text}")))?;
        let call: Value =
            serde_json::from_str(body).map_err(|e| TestCaseError::fail(format!("{e}: {body}")))?;
        let tool = walk_tools()
            .into_iter()
            .find(|t| call["name"] == *t.name)
            .ok_or_else(|| TestCaseError::fail(format!("undeclared tool: {body}")))?;
        ((*tool.parameters).clone(), call["arguments"].to_string())
    };
    let v: Value =
        serde_json::from_str(&json).map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
    let validator =
        jsonschema::validator_for(&schema).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(validator.is_valid(&v), "{} is not valid", v);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// The engine's walk: llguidance masks while the budget is far, the keeper near the
    /// end. Where llguidance masks, it allows exactly what the grammar allows.
    #[test]
    fn every_allowed_walk_ends_in_a_valid_value(
        which in 0usize..WALK_GRAMMARS,
        picks in proptest::collection::vec(any::<u32>(), 0..400),
        budget in 40u32..300,
    ) {
        let g = walk_grammar(which);
        let (vocab, v) = engine_vocabulary();
        let end = vocab.len() as u32;
        let trie = TokenTrie::new(vocab.iter().enumerate().map(|(i, t)| (i as u32, t.as_slice())));
        let mut c = Constraint::start(&g, &v);
        // As the engine does: at least the shortest answer's tokens.
        let budget = budget.max(c.min_tokens());
        let mut llg_steps = 0u32;
        let mut used = 0u32;
        let mut text = Vec::new();
        let mut allowed = Vec::new();
        let mut picks = picks.into_iter();
        let mut ended = false;
        while !c.is_finished() {
            prop_assert!(used < budget, "over budget after {:?}", String::from_utf8_lossy(&text));
            let left = budget - used - 1;
            c.mask(left, &mut allowed)
                .map_err(|e| TestCaseError::fail(format!("{e} after {:?}", String::from_utf8_lossy(&text))))?;
            prop_assert_eq!(c.masked_by_llguidance(), left >= g.reach(c.state()));
            if c.masked_by_llguidance() {
                // llguidance's mask is the grammar's, token for token.
                llg_steps += 1;
                let mut own = Vec::new();
                trie.allowed(&g, c.state(), u32::MAX, &mut own);
                if g.can_end(c.state()) {
                    own.push(end);
                }
                own.sort_unstable();
                prop_assert_eq!(&allowed, &own, "after {:?}", String::from_utf8_lossy(&text));
            }
            // Once the random picks run out, take the shortest way to the end.
            let pick = match picks.next() {
                Some(p) => allowed[p as usize % allowed.len()],
                None if allowed.contains(&end) => end,
                None => *allowed
                    .iter()
                    .min_by_key(|&&id| g.distance(&g.feed_bytes(c.state(), &vocab[id as usize])))
                    .unwrap(),
            };
            used += 1;
            if pick == end {
                ended = true;
                break;
            }
            let tok = &vocab[pick as usize];
            text.extend_from_slice(tok);
            c.commit(pick, tok).unwrap();
        }
        prop_assert!(ended || c.is_finished());
        prop_assert!(used <= budget);
        // With room to spare, llguidance masked the first token.
        if budget > g.reach(&g.start()) {
            prop_assert!(llg_steps > 0);
        }
        check(which, &text)?;
    }
}

/// A whole text of `g`: random tokens among those the grammar allows within the budget, then
/// the shortest way to the end.
fn some_text(g: &Grammar, picks: &[u32]) -> Vec<u8> {
    let vocab = vocabulary();
    let trie = TokenTrie::new(
        vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u32, t.as_slice())),
    );
    let mut state = g.start();
    let mut text = Vec::new();
    let mut picks = picks.iter();
    let mut allowed = Vec::new();
    for _ in 0..400 {
        if g.is_finished(&state) {
            break;
        }
        allowed.clear();
        trie.allowed(g, &state, 120, &mut allowed);
        let pick = match picks.next() {
            Some(p) if !allowed.is_empty() => allowed[*p as usize % allowed.len()],
            _ if g.can_end(&state) => break,
            _ => *allowed
                .iter()
                .min_by_key(|&&id| g.distance(&g.feed_bytes(&state, &vocab[id as usize])))
                .unwrap(),
        };
        text.extend_from_slice(&vocab[pick as usize]);
        state = g.feed_bytes(&state, &vocab[pick as usize]);
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]
    /// A call or a schema's answer: the grammar takes exactly what the calls alone or the
    /// schema alone take. Along a whole text of either (or a broken one: cut short or with a
    /// byte put in), at every prefix, every next byte keeps the grammar alive exactly when it
    /// keeps one of its parts alive, and the prefix is a whole answer exactly when it is one of
    /// a part.
    #[test]
    fn a_call_or_json_grammar_takes_exactly_what_one_of_its_parts_takes(
        schema in 1usize..3,
        from_calls: bool,
        picks in proptest::collection::vec(any::<u32>(), 0..200),
        at in any::<u16>(),
        byte in any::<u8>(),
        edit in 0u8..3,
    ) {
        let both = walk_grammar(schema + 3);
        let parts = [walk_grammar(3), walk_grammar(schema)];
        let mut text = some_text(&parts[usize::from(!from_calls)], &picks);
        match edit {
            1 => text.truncate(usize::from(at) % (text.len() + 1)),
            2 => text.insert(usize::from(at) % (text.len() + 1), byte),
            _ => {}
        }
        let mut s = both.start();
        let mut p = [parts[0].start(), parts[1].start()];
        for (i, &next) in text.iter().chain(std::iter::once(&0u8)).enumerate() {
            prop_assert_eq!(
                both.can_end(&s),
                (0..2).any(|k| parts[k].can_end(&p[k])),
                "{:?}", String::from_utf8_lossy(&text[..i])
            );
            if s.is_dead() {
                prop_assert!(p.iter().all(super::State::is_dead));
                break;
            }
            for b in 0..=255u8 {
                prop_assert_eq!(
                    !both.feed(&s, b).is_dead(),
                    (0..2).any(|k| !parts[k].feed(&p[k], b).is_dead()),
                    "{:?} then {:?}", String::from_utf8_lossy(&text[..i]), b as char
                );
            }
            if i == text.len() {
                break;
            }
            s = both.feed(&s, next);
            p = [parts[0].feed(&p[0], next), parts[1].feed(&p[1], next)];
        }
        if edit == 0 {
            prop_assert!(both.can_end(&both.feed_bytes(&both.start(), &text)), "{:?}", String::from_utf8_lossy(&text));
        }
    }
}
