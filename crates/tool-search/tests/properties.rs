//! Property tests: whatever text a model or a server sends, analysing and searching never
//! panics, stays bounded and gives the same ranked answer every time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use tool_search::{Analyzer, MAX_LIMIT, SearchIndex, ToolDoc};

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
                    .with_keywords(kw)
            },
        ),
        0..20,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

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
