//! the crate's own byte-level BPE against the `tokenizers` crate (the tokenizer it
//! replaced, built from the same GGUF metadata as it was): the same ids for a varied corpus and
//! for arbitrary strings, and the same text back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::OnceLock;

use candle_core::quantized::gguf_file;
use proptest::prelude::*;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};
use toolwright_local_model::LocalTokenizer;

/// The two tokenizers of SmolLM2-135M-Instruct's GGUF: ours and the oracle.
fn pair() -> &'static (LocalTokenizer, Tokenizer) {
    static PAIR: OnceLock<(LocalTokenizer, Tokenizer)> = OnceLock::new();
    PAIR.get_or_init(|| {
        let path = common::model_path();
        let ours = LocalTokenizer::from_file(&path).unwrap();
        (ours, oracle(&path))
    })
}

/// The `tokenizers` crate's BPE built as local-model built it before it had its own: the vocabulary and
/// merges of the GGUF, SmolLM's digit split and GPT-2's byte-level regex, no added tokens but
/// the user-defined ones (control tokens are never matched in text).
fn oracle(path: &std::path::Path) -> Tokenizer {
    let mut f = std::fs::File::open(path).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    let strings = |key: &str| -> Vec<String> {
        ct.metadata[key]
            .to_vec()
            .unwrap()
            .iter()
            .map(|v| v.to_string().unwrap().clone())
            .collect()
    };
    let tokens = strings("tokenizer.ggml.tokens");
    let types: Vec<i32> = ct.metadata["tokenizer.ggml.token_type"]
        .to_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_i32().unwrap())
        .collect();
    let merges: Vec<(String, String)> = strings("tokenizer.ggml.merges")
        .iter()
        .map(|m| {
            let (a, b) = m.split_once(' ').unwrap();
            (a.to_owned(), b.to_owned())
        })
        .collect();
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .unwrap();
    let mut tok = Tokenizer::new(bpe);
    let pre = ct.metadata["tokenizer.ggml.pre"].to_string().unwrap();
    assert_eq!(
        pre, "smollm",
        "the corpus below is meant for SmolLM's digit split"
    );
    tok.with_pre_tokenizer(Some(Sequence::new(vec![
        Digits::new(true).into(),
        ByteLevel::new(false, true, true).into(),
    ])));
    tok.with_decoder(Some(ByteLevel::new(false, true, true)));
    let user_defined: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(_, ty)| **ty == 4)
        .map(|(t, _)| AddedToken::from(t.clone(), false))
        .collect();
    tok.add_tokens(user_defined).unwrap();
    tok
}

/// Ours and the oracle's ids of `text`, and both decodings, must agree.
fn check(text: &str) -> Result<(), String> {
    let (ours, oracle) = pair();
    let got = ours.encode(text).unwrap();
    let want = oracle.encode(text, false).unwrap().get_ids().to_vec();
    if got != want {
        return Err(format!("{text:?}: ours {got:?}, tokenizers {want:?}"));
    }
    let back = ours.decode(&got);
    let oracle_back = oracle.decode(&want, false).unwrap();
    if back != oracle_back || back != text {
        return Err(format!(
            "{text:?} decodes to {back:?} (tokenizers: {oracle_back:?})"
        ));
    }
    Ok(())
}

const CORPUS: &[&str] = &[
    "Hello, world! The weather in Paris is 21.5°C.",
    "What's the weather like? I'd say it's fine, we'll see; they're sure, you've been told, I'm OK.",
    "IT'S LOUD: 'S 'T 'RE and 'quoted' words, don't",
    "用 天气 工具 查一下北京的天气。明天会下雨吗？",
    "日本語のテキスト、한국어 텍스트, Ελληνικά, русский текст, العربية, עברית, हिन्दी में",
    "emoji 🙂 and 👨‍👩‍👧‍👦 family, flags 🇫🇷🇯🇵, skin 👍🏽, keycap 1️⃣",
    "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n",
    "def f(a, b):\n\treturn a + b  # tab-indented\n\n\nclass X:\n    pass\n",
    "{\"tool\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}",
    "<tool_call>\n{\"name\": \"search\"}\n</tool_call>",
    "  leading spaces, tabs\tand\nnewlines\n\n",
    "trailing spaces   ",
    "a  b   c    d\t\te\n\n\nf \n g\r\nh",
    "   ",
    "\n",
    " ",
    "\t \t \n  \n",
    "x\u{a0}y\u{2003}z\u{3000}w\u{85}v\u{2028}u",
    "2024-11-27 15:30:00, 3.14159, 1e-9, 0x1F, 1,000,000 and ½ ² ³ Ⅻ ⑦ ٣ ३",
    "abc123def 456 7 8\u{a0}9",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>",
    "<|endoftext|> and <repo_name> and <|im_end|>x",
    "Ⓐ circled, ǅ titlecase, ʰ modifier, ा matra, é vs e\u{301} combining",
    "mixed中文and English混合text123数字",
    "!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) ___ +++ === ~~~ ``` |||",
    "URL: https://example.com/path?q=1&r=2#frag, mail: a.b@c.de",
    "\u{1F600}\u{1F601} \u{1F602}\u{fe0f}",
    "\u{0}\u{1}\u{7f} control bytes \u{1b}[0m",
    "'s's 's ' s '",
    // U+0085 is \s: `\s+(?!\S)` leaves the space before `'` to it (a mutation check's find).
    "\u{85} '",
];

#[test]
fn the_own_bpe_gives_the_tokenizers_crates_ids_on_a_varied_corpus() {
    let failures: Vec<String> = CORPUS.iter().filter_map(|t| check(t).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The whole corpus as one text too (runs of whitespace between the pieces).
    check(&CORPUS.join("\n")).unwrap();
}

#[test]
fn control_tokens_are_text_in_user_input() {
    let (ours, _) = pair();
    let ids = ours.encode("<|im_end|>").unwrap();
    assert!(!ids.contains(&ours.im_end()), "{ids:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Any string, and strings of the characters where the split's rules meet (spaces before
    /// letters, digits and punctuation, other whitespace, contractions, letters that are not
    /// `\p{L}` but alphabetic, numbers that are not digits): the oracle's ids.
    #[test]
    fn the_own_bpe_gives_the_tokenizers_crates_ids_on_any_string(
        text in prop_oneof![
            any::<String>(),
            "[ a-zA-Z0-9'\t\n\r.,!?]{0,40}",
            "[ \t\n\u{a0}\u{85}\u{2028}\u{3000}\u{b}\u{c}a1'!sdltmvre]{0,30}",
            "[ a\u{4e00}-\u{4e10}\u{1F600}-\u{1F610}\u{2160}-\u{2170}\u{24b6}-\u{24c0}\u{0900}-\u{0970}\u{300}-\u{310}²½0-9]{0,30}",
        ]
    ) {
        prop_assert_eq!(check(&text), Ok(()));
    }
}
