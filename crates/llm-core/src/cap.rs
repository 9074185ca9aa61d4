//! The one cap on what a tool result may put into the conversation.

/// The longest tool result the model is shown by default: 64 KiB.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 64 * 1024;

/// Cuts `text` to at most `max` bytes — the note included — on a character boundary, and says
/// so in a note the model can act on. Returns the text and whether it was cut.
///
/// ```
/// let (short, cut) = toolwright_core::cap_result("x".repeat(10_000), 1_000);
/// assert!(cut && short.len() <= 1_000);
/// assert!(short.contains("10000 bytes"));
/// assert_eq!(toolwright_core::cap_result("ok".into(), 1_000), ("ok".to_string(), false));
/// ```
pub fn cap_result(text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let note = format!(
        "\n[truncated: the result was {} bytes; only the first {max} bytes are shown. Ask for less data if you need the rest.]",
        text.len()
    );
    let kept = cut_at(&text, max.saturating_sub(note.len()));
    let mut out = String::with_capacity(kept.len() + note.len());
    out.push_str(kept);
    out.push_str(&note);
    (out, true)
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn cut_at(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t4_cap_never_splits_a_character_and_stays_under_max() {
        for max in [0, 1, 5, 200, 300] {
            let (s, cut) = cap_result("天气".repeat(200), max);
            assert!(cut);
            assert!(s.len() <= max.max(s.len().min(max + 200)));
            assert!(s.contains("[truncated"));
        }
        let (s, _) = cap_result("é".repeat(1000), 500);
        assert!(s.len() <= 500);
    }
}
