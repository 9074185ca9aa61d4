//! Text to search terms, the same way for tool descriptions and for queries.
//!
//! - **Latin-script words** (runs of letters and digits): split at `snake_case`, `kebab-case`
//!   and `camelCase` boundaries (`readFile`, `HTTPResponse`), lower-cased, common English
//!   function words dropped, each reduced to its Snowball stem (`files` → `file`,
//!   `listing` → `list`); a few everyday synonyms add their canonical word (`folder` also
//!   gives `directory`).
//! - **CJK runs** (Chinese has no spaces between words): every character bigram, so a Chinese
//!   description or keyword matches a Chinese query — except across or within the function
//!   words of requests (帮我, 一下, 这个, 的, 吗…: [`CHINESE_STOP_WORDS`]), which would otherwise
//!   match every Chinese-described tool; and the words of the glossary found in the
//!   run (leftmost-longest dictionary matching, the classic segmentation method), each adding
//!   the English words tool descriptions use for it (`读取文件` → `read`, `file`), so a Chinese
//!   query finds a tool described in English.
//!
//! Bounded: at most [`MAX_INPUT_CHARS`] characters of a text are read.

use std::collections::BTreeMap;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use rust_stemmers::{Algorithm, Stemmer};

/// How many characters of one text (a query, or one field of a tool) are analysed; the rest
/// is ignored, so a hostile description or query costs bounded work.
pub const MAX_INPUT_CHARS: usize = 16_384;

/// The glossary shipped with the crate: Chinese words of tool vocabulary and their English.
const GLOSSARY: &str = include_str!("glossary.txt");

const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "to", "of", "for", "in", "on", "at", "by", "with", "from", "and", "or", "is",
    "are", "be", "been", "was", "were", "this", "that", "these", "those", "it", "its", "as",
    "into", "onto", "me", "my", "i", "we", "our", "you", "your", "please", "can", "could", "would",
    "should", "will", "do", "does", "did", "how", "what", "which", "who", "some", "there", "their",
    "them", "then", "than", "so", "if", "but", "not", "no", "via", "using", "use", "used", "want",
    "need", "let", "just", "also", "about", "up", "out", "s", "t", "d", "ll", "re", "ve", "m",
];

/// Chinese function words of requests: a run is cut at each (leftmost-longest, so 现在 "now" is
/// one word, not 现 + the stop word 在) and no bigram spans or contains one. Words in
/// `CHINESE_KEEP` (whole words such as 现在) that contain one of these are matched first and kept.
pub const CHINESE_STOP_WORDS: &[&str] = &[
    "帮我",
    "帮忙",
    "麻烦",
    "请你",
    "请",
    "一下",
    "这个",
    "那个",
    "这些",
    "那些",
    "这里",
    "那里",
    "这儿",
    "那儿",
    "我的",
    "你的",
    "我们",
    "我想",
    "我要",
    "想要",
    "给我",
    "为我",
    "让我",
    "一个",
    "一些",
    "怎么",
    "怎样",
    "如何",
    "什么",
    "哪个",
    "哪些",
    "可以",
    "能不能",
    "是不是",
    "有没有",
    "好吗",
    "的",
    "了",
    "吗",
    "呢",
    "吧",
    "啊",
    "呀",
    "我",
    "你",
    "把",
    "在",
    "是",
    "和",
    "都",
];

/// Words that contain a stop word but are words of their own, kept whole.
const CHINESE_KEEP: &[&str] = &[
    "现在", "在线", "存在", "所在", "正在", "实在", "目的", "的士", "了解", "为了", "除了", "完了",
    "我国", "你好", "把握", "是否", "总是", "还是", "或是", "和平", "都市", "首都", "请求", "申请",
    "邀请", "请假", "吧台", "呢子", "自我",
];

/// Everyday words and the canonical word tool descriptions tend to use instead.
const ENGLISH_SYNONYMS: &[(&str, &[&str])] = &[
    ("folder", &["directory"]),
    ("folders", &["directory"]),
    ("dir", &["directory"]),
    ("remove", &["delete"]),
    ("erase", &["delete"]),
    ("rm", &["delete"]),
    ("make", &["create"]),
    ("modify", &["edit"]),
    ("change", &["edit", "update"]),
    ("webpage", &["page", "web"]),
    ("website", &["site", "web"]),
    ("repo", &["repository"]),
    ("pr", &["pull", "request"]),
    ("ls", &["list"]),
    ("mkdir", &["create", "directory"]),
    ("cp", &["copy"]),
    ("mv", &["move"]),
    ("cat", &["read"]),
    ("grep", &["search"]),
    ("lookup", &["search", "find"]),
    ("look", &["search", "find"]),
    ("locate", &["find", "search"]),
    ("show", &["get", "list"]),
    ("display", &["show", "get"]),
    ("picture", &["image"]),
    ("photo", &["image"]),
    ("snapshot", &["screenshot"]),
    ("capture", &["screenshot"]),
    ("download", &["fetch"]),
    ("browse", &["navigate"]),
    ("visit", &["navigate"]),
    ("go", &["navigate"]),
    ("url", &["link"]),
    ("link", &["url"]),
    ("sum", &["add"]),
    ("plus", &["add"]),
];

/// Splits text into search terms (see the module docs). Cheap to clone.
///
/// ```
/// use toolwright_tool_search::Analyzer;
/// let a = Analyzer::default();
/// assert_eq!(a.terms("readFile"), ["read", "file"]);
/// assert!(a.terms("读取文件").contains(&"read".to_owned()));
/// assert!(a.terms("读取文件").contains(&"文件".to_owned()));
/// ```
#[derive(Clone)]
pub struct Analyzer {
    inner: Arc<Inner>,
}

struct Inner {
    stemmer: Stemmer,
    /// Leftmost-longest matcher over the glossary's Chinese words; pattern `i` is
    /// `english[i]`'s key.
    cjk: Option<AhoCorasick>,
    /// The English terms (already stemmed) of each glossary word, by pattern index.
    english: Vec<Vec<String>>,
    /// English synonyms, already stemmed, by lower-cased word.
    synonyms: BTreeMap<String, Vec<String>>,
    /// Leftmost-longest matcher over [`CHINESE_STOP_WORDS`] then [`CHINESE_KEEP`]: a match
    /// of pattern `i < CHINESE_STOP_WORDS.len()` is a stop word.
    stop: Option<AhoCorasick>,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer")
            .field("glossary_words", &self.inner.english.len())
            .finish()
    }
}

impl Default for Analyzer {
    fn default() -> Self {
        Self::with_glossary(std::iter::empty::<(String, Vec<String>)>())
    }
}

impl Analyzer {
    /// An analyzer with the shipped glossary plus `extra` entries (a word in any script, and
    /// the words it should also match). An entry for a word already there adds to it.
    pub fn with_glossary<I, W, E>(extra: I) -> Self
    where
        I: IntoIterator<Item = (W, E)>,
        W: AsRef<str>,
        E: IntoIterator,
        E::Item: AsRef<str>,
    {
        let stemmer = Stemmer::create(Algorithm::English);
        let mut glossary: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for line in GLOSSARY.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            if let Some(word) = parts.next() {
                glossary
                    .entry(word.to_owned())
                    .or_default()
                    .extend(parts.map(str::to_owned));
            }
        }
        let mut synonyms: BTreeMap<String, Vec<String>> = ENGLISH_SYNONYMS
            .iter()
            .map(|(w, to)| {
                (
                    (*w).to_owned(),
                    to.iter().map(|s| (*s).to_owned()).collect(),
                )
            })
            .collect();
        for (word, also) in extra {
            let word = word.as_ref().trim().to_lowercase();
            if word.is_empty() {
                continue;
            }
            let also: Vec<String> = also.into_iter().map(|s| s.as_ref().to_owned()).collect();
            if word.chars().any(is_cjk) {
                glossary.entry(word).or_default().extend(also);
            } else {
                synonyms.entry(word).or_default().extend(also);
            }
        }
        // The English side of each entry, analysed as Latin words (stemmed, stop words out).
        let latin = |words: &[String]| -> Vec<String> {
            let mut out = Vec::new();
            for w in words {
                for part in split_words(w) {
                    if !STOP_WORDS.contains(&part.as_str()) {
                        out.push(stemmer.stem(&part).into_owned());
                    }
                }
            }
            out.dedup();
            out
        };
        let keys: Vec<String> = glossary.keys().cloned().collect();
        let english: Vec<Vec<String>> = glossary.values().map(|v| latin(v)).collect();
        let synonyms = synonyms.into_iter().map(|(k, v)| (k, latin(&v))).collect();
        let cjk = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&keys)
            .ok();
        let stop = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(CHINESE_STOP_WORDS.iter().chain(CHINESE_KEEP))
            .ok();
        Self {
            inner: Arc::new(Inner {
                stemmer,
                cjk,
                english,
                synonyms,
                stop,
            }),
        }
    }

    /// The search terms of `text`, in order (a term may repeat: repetition is what BM25 counts).
    pub fn terms(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let text: String = text.chars().take(MAX_INPUT_CHARS).map(fold_width).collect();
        let mut rest = text.as_str();
        while let Some(c) = rest.chars().next() {
            let cjk = is_cjk(c);
            let end = rest
                .char_indices()
                .find(|&(_, ch)| is_cjk(ch) != cjk || !(ch.is_alphanumeric()))
                .map_or(rest.len(), |(i, _)| i);
            if end == 0 {
                // A separator: skip it.
                rest = &rest[c.len_utf8()..];
                continue;
            }
            let (run, tail) = rest.split_at(end);
            if cjk {
                self.cjk_terms(run, &mut out);
            } else {
                self.latin_terms(run, &mut out);
            }
            rest = tail;
        }
        out
    }

    fn latin_terms(&self, run: &str, out: &mut Vec<String>) {
        for word in split_words(run) {
            if STOP_WORDS.contains(&word.as_str()) {
                continue;
            }
            out.push(self.inner.stemmer.stem(&word).into_owned());
            if let Some(also) = self.inner.synonyms.get(&word) {
                out.extend(also.iter().cloned());
            }
        }
    }

    fn cjk_terms(&self, run: &str, out: &mut Vec<String>) {
        // The pieces between stop words; a run that is nothing but stop words keeps them (a
        // request of only 你好 still has a term).
        let mut pieces: Vec<&str> = Vec::new();
        let mut start = 0;
        if let Some(stop) = &self.inner.stop {
            for m in stop.find_iter(run) {
                if m.pattern().as_usize() < CHINESE_STOP_WORDS.len() {
                    pieces.push(&run[start..m.start()]);
                    start = m.end();
                }
            }
        }
        pieces.push(&run[start..]);
        pieces.retain(|p| !p.is_empty());
        if pieces.is_empty() {
            pieces.push(run);
        }
        for piece in pieces {
            let chars: Vec<char> = piece.chars().collect();
            if chars.len() == 1 {
                out.push(piece.to_owned());
            }
            for pair in chars.windows(2) {
                out.push(pair.iter().collect());
            }
        }
        if let Some(ac) = &self.inner.cjk {
            for m in ac.find_iter(run) {
                if let Some(english) = self.inner.english.get(m.pattern().as_usize()) {
                    out.extend(english.iter().cloned());
                }
            }
        }
    }
}

/// Lower-cased words of a Latin run, split at `camelCase` boundaries (`readFile` → `read`,
/// `file`; `HTTPResponse` → `http`, `response`), and at `_`/`-`/`.` (callers pass runs of
/// alphanumerics, so those are already gone; this splits free text too).
fn split_words(run: &str) -> Vec<String> {
    let mut words = Vec::new();
    for piece in run.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = piece.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (prev, cur) = (chars[i - 1], chars[i]);
            let next_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            let boundary = (prev.is_lowercase() && cur.is_uppercase())
                || (prev.is_uppercase() && cur.is_uppercase() && next_lower);
            if boundary {
                words.push(chars[start..i].iter().collect::<String>().to_lowercase());
                start = i;
            }
        }
        if start < chars.len() {
            words.push(chars[start..].iter().collect::<String>().to_lowercase());
        }
    }
    words
}

/// Full-width ASCII (ＡＢＣ１２３, common in Chinese text) to ASCII.
fn fold_width(c: char) -> char {
    match c as u32 {
        0xFF01..=0xFF5E => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
        0x3000 => ' ',
        _ => c,
    }
}

/// Han, kana and Hangul: scripts written without spaces between words.
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF       // Hiragana, Katakana
        | 0x3400..=0x4DBF     // CJK ext. A
        | 0x4E00..=0x9FFF     // CJK unified ideographs
        | 0xAC00..=0xD7AF     // Hangul syllables
        | 0xF900..=0xFAFF     // CJK compatibility ideographs
        | 0x20000..=0x3134F   // CJK ext. B–G
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_word_before_a_word_is_cut_not_read_as_a_longer_word() {
        // 弹出的确认框: 弹出 + 的 + 确认框, not 的确 ("indeed") swallowing 确认's first half.
        let terms = Analyzer::default().terms("弹出的确认框点确定");
        assert!(terms.contains(&"确认".to_owned()), "{terms:?}");
        assert!(terms.contains(&"dialog".to_owned()), "{terms:?}");
        assert!(!terms.iter().any(|t| t.contains('的')), "{terms:?}");
    }

    #[test]
    fn commerce_and_map_words_find_english_described_tools() {
        let a = Analyzer::default();
        for (zh, en) in [
            ("给这笔订单发起退款", "refund"),
            ("订单", "order"),
            ("搜索附近的餐厅", "restaur"),
        ] {
            assert!(
                a.terms(zh).contains(&en.to_owned()),
                "{zh}: {:?}",
                a.terms(zh)
            );
        }
    }

    #[test]
    fn code_identifiers_split_into_words() {
        assert_eq!(split_words("read_file"), ["read", "file"]);
        assert_eq!(split_words("readFile"), ["read", "file"]);
        assert_eq!(split_words("getHTTPResponse"), ["get", "http", "response"]);
        assert_eq!(
            split_words("browser-take-screenshot"),
            ["browser", "take", "screenshot"]
        );
        assert_eq!(split_words("base64"), ["base64"]);
    }

    #[test]
    fn english_words_are_stemmed_and_stop_words_dropped() {
        let a = Analyzer::default();
        assert_eq!(a.terms("Listing the files"), ["list", "file"]);
        assert_eq!(a.terms("a folder"), ["folder", "directori"]);
    }

    #[test]
    fn chinese_gets_bigrams_and_glossary_words() {
        let a = Analyzer::default();
        let t = a.terms("读取文件内容");
        for want in [
            "读取", "取文", "文件", "件内", "内容", "read", "file", "content",
        ] {
            assert!(t.contains(&want.to_owned()), "{want} missing from {t:?}");
        }
        // Leftmost-longest: 文件夹 is the folder, not 文件 (file) + 夹.
        let t = a.terms("文件夹");
        assert!(t.contains(&"directori".to_owned()), "{t:?}");
        assert!(!t.contains(&"file".to_owned()), "{t:?}");
    }

    #[test]
    fn chinese_function_words_make_no_bigrams() {
        let a = Analyzer::default();
        let t = a.terms("帮我查一下这个文件的内容");
        for gone in [
            "帮我", "我查", "一下", "下这", "这个", "个文", "件的", "的内",
        ] {
            assert!(!t.contains(&gone.to_owned()), "{gone} in {t:?}");
        }
        for kept in ["查", "文件", "内容", "file", "content"] {
            assert!(t.contains(&kept.to_owned()), "{kept} missing from {t:?}");
        }
        // A word holding a stop word stays whole; a run of only stop words keeps its bigrams.
        assert!(a.terms("现在几点").contains(&"现在".to_owned()));
        assert_eq!(a.terms("你好吗").first().map(String::as_str), Some("你好"));
        assert!(!a.terms("这个").is_empty());
    }

    #[test]
    fn mixed_scripts_and_full_width_forms() {
        let a = Analyzer::default();
        let t = a.terms("用ｇｉｔ提交commit");
        assert!(t.contains(&"git".to_owned()), "{t:?}");
        assert!(t.contains(&"commit".to_owned()), "{t:?}");
        assert!(t.contains(&"提交".to_owned()), "{t:?}");
    }

    #[test]
    fn extra_glossary_entries_extend_both_languages() {
        let a = Analyzer::with_glossary([
            ("天气预报", vec!["forecast"]),
            ("Temp", vec!["temperature"]),
        ]);
        assert!(a.terms("天气预报").contains(&"forecast".to_owned()));
        assert!(a.terms("temp").contains(&"temperatur".to_owned()));
    }

    #[test]
    fn input_is_bounded() {
        let a = Analyzer::default();
        let long = "file ".repeat(10_000);
        assert!(a.terms(&long).len() <= MAX_INPUT_CHARS / 5 + 1);
        assert!(a.terms(&"文".repeat(100_000)).len() <= 2 * MAX_INPUT_CHARS);
    }
}
