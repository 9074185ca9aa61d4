//! Intent recognition, layer 1 (M2): a chain of [`IntentRecognizer`]s; the first that recognises
//! the message wins, and [`Intent::Normal`] is the default.
//!
//! [`McpRecognizer`] comes first: explicit calls ("用 echo 工具", "使用 echo", "调用 echo",
//! "use the echo tool", "call echo") and then services' trigger keywords, all keywords matched in
//! one pass over the message ([`aho_corasick`], case-insensitive). [`KeywordRecognizer`]s for
//! Memory and HITL follow.
//!
//! ```
//! use toolwright_mcp_bridge::{Intent, IntentChain, KeywordRecognizer, McpRecognizer};
//! use toolwright_mcp_bridge::ServiceConfig;
//! let weather = ServiceConfig::new("weather", "weather-mcp").with_trigger_keywords(["天气", "Weather"]);
//! let chain = IntentChain::new()
//!     .with(McpRecognizer::new(&[weather], &[]))
//!     .with(KeywordRecognizer::memory())
//!     .with(KeywordRecognizer::hitl());
//! assert!(matches!(chain.recognize("明天北京天气怎么样"), Intent::Mcp(m) if m.service.as_deref() == Some("weather")));
//! assert!(matches!(chain.recognize("请记住我的生日"), Intent::Memory));
//! assert!(matches!(chain.recognize("你好"), Intent::Normal));
//! ```

use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use crate::catalog::McpTool;
use crate::config::ServiceConfig;

/// What the user wants from this turn.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Intent {
    /// Use an MCP tool or service.
    Mcp(McpIntent),
    /// Store or recall something (memory).
    Memory,
    /// Hand over to a human (human in the loop).
    Hitl,
    /// Anything else.
    Normal,
}

/// An MCP intent: the tool named by an explicit call, or the service whose keyword matched.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpIntent {
    /// The tool name as the user wrote it (explicit calls).
    pub tool: Option<String>,
    /// The service: the one whose keyword matched, or the one that has the named tool.
    pub service: Option<String>,
    /// What matched: the explicit phrase or the keyword.
    pub trigger: McpTrigger,
}

/// How an MCP intent was recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpTrigger {
    /// An explicit call ("调用 echo").
    Explicit(String),
    /// A service's trigger keyword.
    Keyword(String),
}

/// One step of the chain.
pub trait IntentRecognizer: Send + Sync {
    /// The intent if this step recognises the message, else `None` (the chain goes on).
    fn recognize(&self, message: &str) -> Option<Intent>;
}

/// Recognisers tried in order; [`Intent::Normal`] when none matches.
#[derive(Clone, Default)]
pub struct IntentChain {
    steps: Vec<Arc<dyn IntentRecognizer>>,
}

impl IntentChain {
    /// An empty chain (everything is Normal).
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends a step.
    pub fn with(mut self, step: impl IntentRecognizer + 'static) -> Self {
        self.steps.push(Arc::new(step));
        self
    }
    /// The standard chain: MCP, then Memory, then HITL, then Normal.
    pub fn standard(mcp: McpRecognizer) -> Self {
        Self::new()
            .with(mcp)
            .with(KeywordRecognizer::memory())
            .with(KeywordRecognizer::hitl())
    }
    /// The first step's intent, or Normal.
    pub fn recognize(&self, message: &str) -> Intent {
        self.steps
            .iter()
            .find_map(|s| s.recognize(message))
            .unwrap_or(Intent::Normal)
    }
}

fn matcher(patterns: &[String]) -> Option<AhoCorasick> {
    if patterns.is_empty() {
        return None;
    }
    AhoCorasickBuilder::new()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::LeftmostLongest)
        .build(patterns)
        .map_err(|e| tracing::warn!("keyword matcher not built: {e}"))
        .ok()
}

/// Any of a list of keywords (one pass, case-insensitive) gives a fixed intent.
pub struct KeywordRecognizer {
    matcher: Option<AhoCorasick>,
    intent: Intent,
}

impl KeywordRecognizer {
    /// `keywords` → `intent`.
    pub fn new<I, S>(keywords: I, intent: Intent) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let kws: Vec<String> = keywords
            .into_iter()
            .map(|k| k.into().trim().to_lowercase())
            .filter(|k| !k.is_empty())
            .collect();
        Self {
            matcher: matcher(&kws),
            intent,
        }
    }
    /// A Memory recogniser with a small default list ("记住", "remember", …).
    pub fn memory() -> Self {
        Self::new(
            [
                "记住",
                "记得",
                "别忘了",
                "你还记得",
                "remember",
                "don't forget",
                "do you recall",
            ],
            Intent::Memory,
        )
    }
    /// A HITL recogniser with a small default list ("转人工", "human agent", …).
    pub fn hitl() -> Self {
        Self::new(
            [
                "转人工",
                "人工客服",
                "找真人",
                "human agent",
                "talk to a human",
                "real person",
            ],
            Intent::Hitl,
        )
    }
}

impl IntentRecognizer for KeywordRecognizer {
    fn recognize(&self, message: &str) -> Option<Intent> {
        let m = self.matcher.as_ref()?;
        m.is_match(&message.to_lowercase())
            .then(|| self.intent.clone())
    }
}

/// Layer 1 of MCP recognition: explicit calls, then trigger keywords.
pub struct McpRecognizer {
    keywords: Option<AhoCorasick>,
    /// Per keyword pattern: (service, keyword as configured).
    keyword_owner: Vec<(String, String)>,
    /// Known names, lowercased: (name, service, is_service).
    known: Vec<(String, String, bool)>,
}

/// Explicit-call verbs. `strong` verbs give an intent for any name; the others only for a name
/// that is a known tool or service, or that is followed by "工具"/"tool".
const VERBS: &[(&str, bool)] = &[
    ("调用", true),
    ("使用", false),
    ("用", false),
    ("use", false),
    ("call", false),
    ("invoke", false),
    ("run", false),
];

impl McpRecognizer {
    /// From the registered services (their keywords) and the running tools (known names).
    pub fn new(services: &[ServiceConfig], tools: &[McpTool]) -> Self {
        let mut patterns = Vec::new();
        let mut keyword_owner = Vec::new();
        for s in services {
            for k in &s.trigger_keywords {
                let k = k.trim();
                if !k.is_empty() {
                    patterns.push(k.to_lowercase());
                    keyword_owner.push((s.name.clone(), k.to_string()));
                }
            }
        }
        let mut known: Vec<(String, String, bool)> = services
            .iter()
            .map(|s| (s.name.to_lowercase(), s.name.clone(), true))
            .collect();
        for t in tools {
            known.push((t.name.to_lowercase(), t.service.clone(), false));
            known.push((t.exposed_name.to_lowercase(), t.service.clone(), false));
        }
        Self {
            keywords: matcher(&patterns),
            keyword_owner,
            known,
        }
    }

    fn lookup(&self, name: &str) -> Option<&(String, String, bool)> {
        let lower = name.to_lowercase();
        self.known.iter().find(|(n, _, _)| *n == lower)
    }

    /// The first explicit call in `message`: (phrase, name).
    pub fn explicit_call(&self, message: &str) -> Option<(String, String)> {
        let lower = message.to_lowercase();
        let mut best: Option<(usize, String, String)> = None;
        for (verb, strong) in VERBS {
            let mut from = 0;
            while let Some(pos) = lower[from..].find(verb).map(|p| p + from) {
                from = pos + verb.len();
                let ascii_verb = verb.is_ascii();
                if ascii_verb {
                    let before_ok = lower[..pos]
                        .chars()
                        .next_back()
                        .is_none_or(|c| !c.is_alphanumeric());
                    let after_ok = lower[from..].starts_with(char::is_whitespace);
                    if !before_ok || !after_ok {
                        continue;
                    }
                }
                let Some((name, end, suffixed)) = name_after(&lower, from) else {
                    continue;
                };
                let accepted =
                    *strong && !name.is_empty() || suffixed || self.lookup(&name).is_some();
                if accepted && best.as_ref().is_none_or(|(p, _, _)| pos < *p) {
                    let phrase = lower[pos..end].trim().to_string();
                    // Report the name as the user wrote it (original case).
                    let original = message
                        .get(end - name.len()..end)
                        .filter(|s| s.to_lowercase() == name)
                        .map(str::to_string)
                        .unwrap_or(name);
                    best = Some((pos, phrase, original));
                    break;
                }
            }
        }
        best.map(|(_, phrase, name)| (phrase, name))
    }
}

/// The name after a verb at byte `from` of the lowercased message: skips spaces, "the", "一下";
/// takes an ASCII name (`[a-z0-9_.-]`, trailing `.` dropped), or up to 20 other characters
/// right before "工具". Returns (name, end byte, followed by "工具"/"tool").
fn name_after(lower: &str, from: usize) -> Option<(String, usize, bool)> {
    let mut rest = &lower[from..];
    let mut offset = from;
    let skip = |rest: &mut &str, offset: &mut usize| {
        let trimmed = rest.trim_start();
        *offset += rest.len() - trimmed.len();
        *rest = trimmed;
        for filler in ["the ", "一下", "下"] {
            if let Some(r) = rest.strip_prefix(filler) {
                *offset += filler.len();
                let t = r.trim_start();
                *offset += r.len() - t.len();
                *rest = t;
            }
        }
    };
    skip(&mut rest, &mut offset);
    let ascii_len = rest
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .map_or(rest.len(), |(i, _)| i);
    let (name, name_len) = if ascii_len > 0 {
        let n = rest[..ascii_len].trim_end_matches('.');
        (n.to_string(), n.len())
    } else {
        let stop = rest.find("工具")?;
        let candidate = rest[..stop].trim_end();
        if candidate.is_empty()
            || candidate.chars().count() > 20
            || candidate
                .chars()
                .any(|c| c.is_whitespace() || c.is_ascii_punctuation() || "，。！？、".contains(c))
        {
            return None;
        }
        (candidate.to_string(), candidate.len())
    };
    if name.is_empty() {
        return None;
    }
    let end = offset + name_len;
    let after = lower[end..].trim_start();
    let suffixed = after.starts_with("工具") || after.starts_with("tool");
    Some((name, end, suffixed))
}

impl IntentRecognizer for McpRecognizer {
    fn recognize(&self, message: &str) -> Option<Intent> {
        if let Some((phrase, name)) = self.explicit_call(message) {
            let known = self.lookup(&name);
            return Some(Intent::Mcp(McpIntent {
                service: known.map(|(_, s, _)| s.clone()),
                tool: match known {
                    Some((_, _, true)) => None,
                    _ => Some(name),
                },
                trigger: McpTrigger::Explicit(phrase),
            }));
        }
        let m = self.keywords.as_ref()?.find(&message.to_lowercase())?;
        let (service, keyword) = self.keyword_owner.get(m.pattern().as_usize())?.clone();
        Some(Intent::Mcp(McpIntent {
            tool: None,
            service: Some(service),
            trigger: McpTrigger::Keyword(keyword),
        }))
    }
}
