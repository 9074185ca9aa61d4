//! The writing system a text is mostly in: what the dense channel centres vectors by and the
//! "no tool fits" list compares within.

/// The writing system a text is mostly in, as far as the encoder's language bias goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Script {
    /// Latin letters (English and the like), or no letters at all.
    Latin,
    /// Han, kana or Hangul (Chinese, Japanese, Korean).
    Cjk,
}

impl Script {
    /// The script of `text`: [`Script::Cjk`] when its CJK characters, counted three to a Latin
    /// letter (a Chinese word is about two characters, an English one about six letters), are
    /// at least as many as its Latin letters; else [`Script::Latin`]. Reads at most
    /// [`crate::MAX_INPUT_CHARS`] characters.
    pub fn of(text: &str) -> Self {
        let (mut cjk, mut latin) = (0usize, 0usize);
        for c in text.chars().take(crate::MAX_INPUT_CHARS) {
            if crate::analyzer::is_cjk(c) {
                cjk += 1;
            } else if c.is_alphabetic() {
                latin += 1;
            }
        }
        if cjk > 0 && 3 * cjk >= latin {
            Self::Cjk
        } else {
            Self::Latin
        }
    }

    pub(crate) fn slot(self) -> usize {
        match self {
            Self::Latin => 0,
            Self::Cjk => 1,
        }
    }
}
