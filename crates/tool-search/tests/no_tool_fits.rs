//! The shipped "no tool fits" judge for the embedded multilingual-e5-small, pinned on real
//! vectors: a 31-tool catalog (the MCP reference server twice, and HowToCook's five
//! Chinese-described tools) and requests in English and Chinese, each with the vector the
//! encoder gave it (fixtures/judge-demo.json; none of these requests is in the dev or test
//! split).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use toolwright_tool_search::{E5_SMALL_ID, HybridConfig, SearchIndex, ToolDoc};

const FIXTURE: &str = include_str!("../fixtures/judge-demo.json");

fn vector(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn demo() -> (SearchIndex, Vec<(String, bool, Vec<f32>)>) {
    let spec: Value = serde_json::from_str(FIXTURE).unwrap();
    assert_eq!(spec["encoder"], E5_SMALL_ID);
    let tools = spec["tools"].as_array().unwrap();
    let docs: Vec<ToolDoc> = tools
        .iter()
        .map(|t| {
            ToolDoc::new(
                t["name"].as_str().unwrap(),
                t["description"].as_str().unwrap(),
            )
        })
        .collect();
    let vectors = tools.iter().map(|t| vector(&t["vector"])).collect();
    let index = SearchIndex::new(docs)
        .with_vectors(vectors)
        .unwrap()
        .with_hybrid(HybridConfig::for_encoder(E5_SMALL_ID, tools.len()));
    let requests = spec["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["query"].as_str().unwrap().to_owned(),
                r["fits"].as_bool().unwrap(),
                vector(&r["vector"]),
            )
        })
        .collect();
    (index, requests)
}

#[test]
fn requests_no_tool_serves_get_nothing_and_answerable_ones_keep_their_tool() {
    let (index, requests) = demo();
    let mut seen = (0, 0);
    for (query, fits, v) in &requests {
        let hits = index.search_hybrid(query, v, 5).unwrap();
        let fit = index.fit(query, v).unwrap();
        if *fits {
            seen.0 += 1;
            assert!(!hits.is_empty(), "{query:?} was turned away (fit {fit})");
        } else {
            seen.1 += 1;
            assert!(hits.is_empty(), "{query:?} got {hits:?} (fit {fit})");
        }
    }
    // English and Chinese on both sides.
    assert_eq!(seen, (5, 5));
    let first = |q: &str| {
        let (_, _, v) = requests.iter().find(|r| r.0 == q).unwrap();
        index.search_hybrid(q, v, 5).unwrap()[0].name.clone()
    };
    assert!(first("how much is 17 and 25 combined").ends_with("__get-sum"));
    assert!(first("十七加二十五等于多少").ends_with("__get-sum"));
    assert!(first("红烧肉怎么做").starts_with("cook__"));
}

#[test]
fn the_bank_is_what_turns_them_away_and_other_weights_fall_back_to_the_cosine() {
    let (index, requests) = demo();
    let n = index.len();
    // The evidence: every request no tool serves is nearer the bank than any tool.
    for (query, fits, v) in &requests {
        let parts = index.fit_parts(query, v).unwrap();
        let margin = parts.unserved.unwrap();
        if !fits {
            assert!(margin > 0.0, "{query:?}: {parts:?}");
        }
    }
    // Other weights of the same model: no bank, the cosine-and-words fallback; it keeps the
    // answerable requests and turns away fewer of the others.
    let fallback = HybridConfig::for_encoder("multilingual-e5-small-q4@00000000", n);
    assert!(fallback.unserved.is_none());
    let index = index.with_hybrid(fallback);
    for (query, fits, v) in &requests {
        assert!(index.fit_parts(query, v).unwrap().unserved.is_none());
        if *fits {
            assert!(
                !index.search_hybrid(query, v, 5).unwrap().is_empty(),
                "{query:?}"
            );
        }
    }
}

#[test]
fn odd_requests_meet_the_judge_without_a_panic() {
    let (index, requests) = demo();
    let v = requests[0].2.clone();
    // A request vector of another width, or with a NaN: a typed error, not a panic.
    assert!(index.search_hybrid("add 17 and 25", &v[..10], 5).is_err());
    let mut nan = v.clone();
    nan[3] = f32::NAN;
    assert!(index.fit("add 17 and 25", &nan).is_err());
    // A zero vector is near nothing: a finite fit, an answer either way.
    let zero = vec![0.0; v.len()];
    assert!(index.fit("add 17 and 25", &zero).unwrap().is_finite());
    index.search_hybrid("add 17 and 25", &zero, 5).unwrap();
    // 10,000 characters, and only emoji: bounded, finite.
    let long = "十七加二十五".repeat(2_000);
    assert!(index.fit(&long, &v).unwrap().is_finite());
    assert!(index.search_hybrid(&long, &v, 5).unwrap().len() <= 5);
    assert!(index.fit("🚆🚆🚆", &v).unwrap().is_finite());
    index.search_hybrid("🚆🚆🚆", &v, 5).unwrap();
}
