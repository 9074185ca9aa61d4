//! What an encoder reads for each tool, and the key its vector is cached under.

use crate::ToolDoc;

/// What an encoder reads for one tool: the words of its own name (the part after the last
/// `__`, `snake_case`, `kebab-case` and `camelCase` split, lower-cased) and the first sentence
/// of its description (at most [`EMBED_SENTENCE_CHARS`] characters):
/// `fs__read_text_file` "Read a file. As text." → `read text file: Read a file`.
///
/// Short on purpose: mean pooling over a whole description blurs the one sentence that
/// says what a tool does; on the dev split the short text raised the encoder's own recall@1
/// from 0.30 to 0.53, and it is a fifth of the tokens to encode. The same tool always gives the
/// same text: hash it with [`text_hash`] for the vector cache.
pub fn embedding_text(doc: &ToolDoc) -> String {
    let own = doc.name.rsplit("__").next().unwrap_or(&doc.name);
    let words = name_words(own);
    let first = first_sentence(&doc.description, EMBED_SENTENCE_CHARS);
    match (words.is_empty(), first.is_empty()) {
        (_, true) => words,
        (true, false) => first,
        (false, false) => format!("{words}: {first}"),
    }
}

/// The most characters of a tool's name, and of its description's first sentence, that
/// [`embedding_text`] keeps.
pub const EMBED_SENTENCE_CHARS: usize = 200;

/// The words of a code name: `_`, `-`, `.` and whitespace as spaces, a space where a lower-case
/// letter or a digit meets an upper-case one (`getFileInfo` → `get file info`), lower-cased;
/// at most [`EMBED_SENTENCE_CHARS`] characters.
fn name_words(name: &str) -> String {
    let mut out = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if out.chars().count() >= EMBED_SENTENCE_CHARS {
            break;
        }
        if c == '_' || c == '-' || c == '.' || c.is_whitespace() {
            if !out.is_empty() && !out.ends_with(' ') {
                out.push(' ');
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            out.push(' ');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        out.extend(c.to_lowercase());
    }
    collapse(&out, EMBED_SENTENCE_CHARS)
}

/// The first sentence of `s` — up to a `.`, `!` or `?` followed by whitespace or the end, a
/// `。`, `！` or `？`, or a line break — whitespace collapsed, at most `max` characters.
pub(crate) fn first_sentence(s: &str, max: usize) -> String {
    let s = s.trim();
    let mut end = s.len();
    for (i, c) in s.char_indices() {
        let stop = match c {
            '。' | '！' | '？' | '\n' | '\r' => true,
            '.' | '!' | '?' => s[i + c.len_utf8()..]
                .chars()
                .next()
                .is_none_or(char::is_whitespace),
            _ => false,
        };
        if stop {
            end = i;
            break;
        }
    }
    collapse(&s[..end], max)
}

/// A stable 64-bit hash of `text` (FNV-1a over its UTF-8 bytes): the same on every platform and
/// in every version, so a vector cached under it stays valid as long as the text is the same.
pub fn text_hash(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The first `max` characters of `s`, whitespace runs as one space, trimmed.
fn collapse(s: &str, max: usize) -> String {
    let mut out = String::new();
    for word in s.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        if out.chars().count() >= max {
            break;
        }
    }
    out.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_text_is_the_names_words_and_the_first_sentence() {
        let doc = ToolDoc::new("fs__read_text_file", "Read   a file.\n\nAs text.")
            .with_group("fs", "Files")
            .with_parameters([("path", "Where the file is"), ("head", "")]);
        assert_eq!(embedding_text(&doc), "read text file: Read a file");
        let doc = ToolDoc::new("everything__getTinyImage", "Returns the MCP_TINY_IMAGE");
        assert_eq!(
            embedding_text(&doc),
            "get tiny image: Returns the MCP_TINY_IMAGE"
        );
        // A dot inside a word ("v1.2") does not end the sentence; a line break does.
        let doc = ToolDoc::new("x-y.z", "Use v1.2 of the API!?\nSecond line");
        assert_eq!(embedding_text(&doc), "x y z: Use v1.2 of the API!");
        // Chinese full stops end it too; a name or a description alone is the text.
        let doc = ToolDoc::new("截图", "截取页面。然后保存");
        assert_eq!(embedding_text(&doc), "截图: 截取页面");
        assert_eq!(embedding_text(&ToolDoc::new("a_b", "")), "a b");
        assert_eq!(embedding_text(&ToolDoc::new("__", "Hi.")), "Hi");
        // Bounded whatever the lengths.
        let doc = ToolDoc::new("x".repeat(10_000), "word ".repeat(10_000));
        assert!(embedding_text(&doc).chars().count() <= 2 * EMBED_SENTENCE_CHARS + 2);
    }

    #[test]
    fn text_hash_is_fnv1a_and_stable() {
        // The FNV-1a 64 test vectors: the hash must never change (it keys cached vectors).
        assert_eq!(text_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(text_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(text_hash("foobar"), 0x8594_4171_f739_67e8);
        assert_ne!(text_hash("read file"), text_hash("read files"));
    }
}
