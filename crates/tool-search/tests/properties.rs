//! Property tests: whatever text a model or a server sends, analysing and searching never
//! panics, stays bounded and gives the same ranked answer every time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use toolwright_tool_search::{
    Analyzer, Fusion, HybridConfig, MAX_INPUT_CHARS, MAX_LIMIT, SearchIndex, ToolDoc,
    calibrate_no_fit, embedding_text, text_hash,
};

/// Text mixing ASCII identifiers, Chinese, punctuation, full-width forms and odd code points.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            "[a-zA-Z_]{1,12}",
            "[读取文件夹目录搜索网页时间创建删除]{1,6}",
            "[ ,.;:!?/\\-_()\\[\\]{}]{1,3}",
            "[ＡＢＣａｂｃ１２３　]{1,3}",
            any::<char>().prop_map(String::from),
        ],
        0..24,
    )
    .prop_map(|parts| parts.concat())
}

fn docs() -> impl Strategy<Value = Vec<ToolDoc>> {
    prop::collection::vec(
        (text(), text(), text(), prop::collection::vec(text(), 0..3)).prop_map(
            |(name, desc, group, kw)| {
                ToolDoc::new(name, desc)
                    .with_group(group, "")
                    .with_parameters(kw.iter().map(|k| (k.clone(), k.clone())))
                    .with_keywords(kw)
            },
        ),
        0..20,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_analyzer_never_panics_on_any_string_and_stays_bounded(
        s in prop_oneof![any::<String>(), "[的确认框弹出订单退款附近藏起来]{0,400}", ".{0,20000}"]
    ) {
        let terms = Analyzer::default().terms(&s);
        // At most a bigram, a glossary word's English and a few synonyms per character read.
        prop_assert!(terms.len() <= 8 * s.chars().count().min(MAX_INPUT_CHARS) + 8);
    }

    #[test]
    fn terms_are_non_empty_and_lower_case(s in text()) {
        for t in Analyzer::default().terms(&s) {
            prop_assert!(!t.is_empty());
            prop_assert_eq!(t.to_lowercase(), t.clone());
            prop_assert!(!t.chars().any(char::is_whitespace), "{:?}", t);
        }
    }

    #[test]
    fn search_is_bounded_sorted_and_deterministic(docs in docs(), q in text(), limit in 0usize..80) {
        let n = docs.len();
        let index = SearchIndex::new(docs.clone());
        let hits = index.search(&q, limit);
        prop_assert!(hits.len() <= limit.min(MAX_LIMIT).min(n));
        for w in hits.windows(2) {
            prop_assert!(w[0].score >= w[1].score);
            if w[0].score == w[1].score { prop_assert!(w[0].index < w[1].index); }
        }
        for h in &hits {
            prop_assert!(h.index < n);
            prop_assert_eq!(&h.name, &docs[h.index].name);
            prop_assert!(h.score > 0.0 && h.score.is_finite());
        }
        // The same query on a second index over the same tools: the same answer.
        prop_assert_eq!(hits, SearchIndex::new(docs).search(&q, limit));
    }

    #[test]
    fn a_tool_is_found_by_its_own_name(docs in docs(), pick in any::<prop::sample::Index>()) {
        prop_assume!(!docs.is_empty());
        let i = pick.index(docs.len());
        let index = SearchIndex::new(docs.clone());
        let name = &docs[i].name;
        prop_assume!(!Analyzer::default().terms(name).is_empty());
        // Every tool sharing a term scores; this one shares all of its name's terms.
        let all = index.search(name, MAX_LIMIT);
        prop_assume!(all.len() < MAX_LIMIT);
        prop_assert!(all.iter().any(|h| h.index == i), "{:?} not found by {:?}", docs[i], name);
    }
}

/// Vectors of width 4 with components in a small range (zero vectors included).
fn vector() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-2.0f32..2.0, 4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn hybrid_search_is_bounded_sorted_and_deterministic(
        docs in docs(),
        seed in prop::collection::vec(vector(), 20),
        q in text(),
        qv in vector(),
        limit in 0usize..80,
        k in 1.0f32..100.0,
        w in 0.0f32..3.0,
        by_score in any::<bool>(),
    ) {
        let n = docs.len();
        let vectors: Vec<Vec<f32>> = seed.into_iter().take(n).collect();
        let fusion = if by_score { Fusion::Score } else { Fusion::Rank };
        let config = HybridConfig::default().with_k(k).with_weights(1.0, w).with_fusion(fusion);
        let index = SearchIndex::new(docs.clone()).with_vectors(vectors.clone()).unwrap().with_hybrid(config);
        let hits = index.search_hybrid(&q, &qv, limit).unwrap();
        prop_assert!(hits.len() <= limit.min(MAX_LIMIT).min(n));
        // Ties go to the tool BM25 ranks higher, then to the lower index.
        let bm25: Vec<usize> = index.search(&q, MAX_LIMIT).into_iter().map(|h| h.index).collect();
        let rank = |i: usize| bm25.iter().position(|&b| b == i).unwrap_or(usize::MAX);
        for w in hits.windows(2) {
            prop_assert!(w[0].score >= w[1].score);
            if w[0].score == w[1].score {
                prop_assert!((rank(w[0].index), w[0].index) < (rank(w[1].index), w[1].index));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for h in &hits {
            prop_assert!(h.index < n);
            prop_assert!(seen.insert(h.index), "a tool twice");
            prop_assert_eq!(&h.name, &docs[h.index].name);
            prop_assert!(h.score > 0.0 && h.score.is_finite());
        }
        let again = SearchIndex::new(docs).with_vectors(vectors).unwrap().with_hybrid(config);
        prop_assert_eq!(hits, again.search_hybrid(&q, &qv, limit).unwrap());
        let fit = index.fit(&q, &qv).unwrap();
        // The nearest cosine (-1..=1) plus the weighted share of words held (0..=1).
        let w = HybridConfig::default().fit_model.lexical;
        prop_assert!(fit.is_finite() && (-1.0 - 1e-4..=1.0 + w + 1e-4).contains(&fit), "{}", fit);
    }

    #[test]
    fn hybrid_with_no_dense_weight_is_bm25s_order(docs in docs(), seed in prop::collection::vec(vector(), 20), q in text(), qv in vector(), by_score in any::<bool>()) {
        let n = docs.len();
        let vectors: Vec<Vec<f32>> = seed.into_iter().take(n).collect();
        let fusion = if by_score { Fusion::Score } else { Fusion::Rank };
        let index = SearchIndex::new(docs).with_vectors(vectors).unwrap()
            .with_hybrid(HybridConfig::default().with_weights(1.0, 0.0).with_fusion(fusion));
        let bm25: Vec<usize> = index.search(&q, MAX_LIMIT).into_iter().map(|h| h.index).collect();
        let fused: Vec<usize> = index.search_hybrid(&q, &qv, MAX_LIMIT).unwrap().into_iter().map(|h| h.index).collect();
        prop_assert_eq!(bm25, fused);
    }

    #[test]
    fn hybrid_with_no_bm25_weight_is_the_cosine_order(docs in docs(), seed in prop::collection::vec(vector(), 20), q in text(), qv in vector(), by_score in any::<bool>()) {
        let n = docs.len();
        let vectors: Vec<Vec<f32>> = seed.into_iter().take(n).collect();
        let fusion = if by_score { Fusion::Score } else { Fusion::Rank };
        let index = SearchIndex::new(docs).with_vectors(vectors.clone()).unwrap()
            .with_hybrid(HybridConfig::default().with_weights(0.0, 1.0).with_fusion(fusion).with_language_neutral(false));
        let fused: Vec<usize> = index.search_hybrid(&q, &qv, MAX_LIMIT).unwrap().into_iter().map(|h| h.index).collect();
        // Each returned tool is at least as near the query as the next one (raw cosines: the
        // language-neutral ones are checked in the crate's unit tests).
        let unit = |v: &[f32]| {
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter().map(|x| if n > 0.0 { x / n } else { 0.0 }).collect::<Vec<f32>>()
        };
        let qn = unit(&qv);
        let cos = |i: usize| unit(&vectors[i]).iter().zip(&qn).map(|(a, b)| a * b).sum::<f32>();
        for w in fused.windows(2) {
            prop_assert!(cos(w[0]) >= cos(w[1]) - 1e-5, "{} before {}", cos(w[0]), cos(w[1]));
        }
    }

    #[test]
    fn embedding_text_is_bounded_single_line_and_stable(docs in docs()) {
        for d in &docs {
            let t = embedding_text(d);
            prop_assert!(t.chars().count() <= 2 * toolwright_tool_search::EMBED_SENTENCE_CHARS + 2);
            prop_assert!(!t.contains('\n'));
            prop_assert_eq!(text_hash(&t), text_hash(&embedding_text(&d.clone())));
        }
    }

    #[test]
    fn calibration_keeps_the_answerable_share_it_promises(
        yes in prop::collection::vec(-5.0f32..10.0, 1..60),
        no in prop::collection::vec(-5.0f32..10.0, 0..30),
        loss in 0.0f32..0.5,
    ) {
        let t = calibrate_no_fit(&yes, &no, loss).unwrap();
        let lost = yes.iter().filter(|f| **f < t).count();
        prop_assert!(lost as f32 <= (loss * yes.len() as f32).floor(), "{} lost at {}", lost, t);
    }
}

#[test]
fn empty_index_and_empty_query() {
    let index = SearchIndex::new(Vec::new());
    assert!(index.is_empty());
    assert!(index.search("read file", 5).is_empty());
    let index = SearchIndex::new(vec![ToolDoc::new("fs__read_file", "Read a file")]);
    assert!(index.search("", 5).is_empty());
    assert!(index.search("   ,,, ", 5).is_empty());
    assert!(index.search("read", 0).is_empty());
}

/// The judge's answer, whatever a model writes: [`toolwright_tool_search::judge::read`] never panics,
/// and what it returns is only candidates, each once; a list the model wrote is read back
/// exactly, with any words (no brackets) around it.
mod judge {
    use super::*;
    use toolwright_tool_search::judge::{Verdict, read};

    const NAMES: [&str; 4] = [
        "fs__read_file",
        "maps__elevation",
        "git__stash",
        "读取__文件",
    ];

    proptest! {
        #[test]
        fn any_answer_reads_as_known_candidates_each_once(answer in text(), tail in text()) {
            for a in [answer.clone(), format!("{{\"tools\": [\"{answer}\", \"git__stash\"]}}{tail}")] {
                if let Some(Verdict::Picks(p)) = read(&a, &NAMES) {
                    prop_assert!(!p.is_empty());
                    prop_assert!(p.iter().all(|&i| i < NAMES.len()));
                    let mut seen = p.clone();
                    seen.sort_unstable();
                    seen.dedup();
                    prop_assert_eq!(seen.len(), p.len());
                }
            }
        }

        #[test]
        fn a_written_list_is_read_back(
            order in Just((0..NAMES.len()).collect::<Vec<_>>()).prop_shuffle(),
            n in 0..=NAMES.len(),
            before in "[a-zA-Z 。，:\n`]{0,20}",
            after in "[a-zA-Z 。，:\n`]{0,20}",
        ) {
            let picked: Vec<&str> = order[..n].iter().map(|&i| NAMES[i]).collect();
            let answer = format!("{before}{}{after}", serde_json::json!({"tools": picked}));
            let want = if n == 0 { Verdict::NoneFits } else { Verdict::Picks(order[..n].to_vec()) };
            prop_assert_eq!(read(&answer, &NAMES), Some(want));
        }
    }
}

proptest! {
    #[test]
    fn no_chinese_term_holds_a_function_word(text in "[文件读取内容的吗了呢 ]{1,40}") {
        let a = Analyzer::default();
        for run in text.split(' ') {
            if run.chars().any(|c| !"的吗了呢".contains(c)) {
                for t in a.terms(run) {
                    prop_assert!(!t.contains(['的', '吗', '了', '呢']), "{} in the terms of {:?}", t, run);
                }
            }
        }
    }
}
