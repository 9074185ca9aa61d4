//! Which tools the model asked details for (level 2) in the current turn of each session, so
//! that the next requests of that turn carry those tools' full specs
//! ([`crate::McpBridge`]'s `ToolProvider::advertised`).
//!
//! A turn is known by its session and the person's text that opened it; a request with another
//! text, or the first request of a turn (round 0), starts it afresh. Pure bookkeeping: no I/O.

use std::collections::{BTreeSet, HashMap};

/// How many sessions' turns are remembered; past it the least recently used is forgotten.
const MAX_SESSIONS: usize = 4096;

/// How many tools found by searches one turn remembers.
const MAX_FOUND: usize = 64;

#[derive(Debug, Default)]
struct Turn {
    /// The text that opened the turn; `None` until a request of the turn was seen.
    user_text: Option<String>,
    /// Exposed names of the tools described in this turn, in name order.
    described: BTreeSet<String>,
    /// The tools a search of this turn returned, each with the words of the last search that
    /// returned it (at most [`MAX_FOUND`]): what learning from use keeps when one is called.
    found: HashMap<String, String>,
    /// When the entry was last used (a counter), for eviction.
    used: u64,
}

/// Per session: the tools described in its current turn.
#[derive(Debug, Default)]
pub(crate) struct DescribedTools {
    turns: HashMap<Option<String>, Turn>,
    clock: u64,
}

impl DescribedTools {
    /// A request of the turn opened by `user_text` in `session`, at `round`: starts the turn
    /// afresh when it is new, and returns the tools described in it so far.
    pub(crate) fn enter(
        &mut self,
        session: Option<&str>,
        user_text: &str,
        round: usize,
    ) -> BTreeSet<String> {
        let now = self.tick();
        let turn = self.entry(session);
        let same_turn = round > 0 && turn.user_text.as_deref().is_none_or(|t| t == user_text);
        if !same_turn {
            turn.described.clear();
            turn.found.clear();
        }
        turn.user_text = Some(user_text.to_owned());
        turn.used = now;
        turn.described.clone()
    }

    /// The model asked details for `tool` in `session`'s current turn.
    pub(crate) fn record(&mut self, session: Option<&str>, tool: &str) {
        let now = self.tick();
        let turn = self.entry(session);
        turn.described.insert(tool.to_owned());
        turn.used = now;
    }

    /// A search of `session`'s current turn for `query` returned `tool`.
    pub(crate) fn record_found(&mut self, session: Option<&str>, tool: &str, query: &str) {
        let turn = self.entry(session);
        if turn.found.len() >= MAX_FOUND && !turn.found.contains_key(tool) {
            return;
        }
        turn.found.insert(tool.to_owned(), query.to_owned());
    }

    /// The words of the search of `session`'s current turn that returned `tool`, if one did.
    pub(crate) fn found_by(&self, session: Option<&str>, tool: &str) -> Option<String> {
        self.turns
            .get(&session.map(str::to_owned))
            .and_then(|t| t.found.get(tool).cloned())
    }

    /// Forgets `session`'s turn (a turn that shows no MCP tool needs no memory).
    pub(crate) fn forget(&mut self, session: Option<&str>) {
        self.turns.remove(&session.map(str::to_owned));
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn entry(&mut self, session: Option<&str>) -> &mut Turn {
        let key = session.map(str::to_owned);
        if !self.turns.contains_key(&key) && self.turns.len() >= MAX_SESSIONS {
            let oldest = self
                .turns
                .iter()
                .min_by_key(|(_, t)| t.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.turns.remove(&k);
            }
        }
        self.turns.entry(key).or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(set: BTreeSet<String>) -> Vec<String> {
        set.into_iter().collect()
    }

    #[test]
    fn m3_described_tools_last_for_one_turn_of_one_session() {
        let mut d = DescribedTools::default();
        assert!(d.enter(Some("s"), "用 echo 工具", 0).is_empty());
        d.record(Some("s"), "misb__echo");
        // Later requests of the same turn see it; another session does not.
        assert_eq!(names(d.enter(Some("s"), "用 echo 工具", 1)), ["misb__echo"]);
        assert_eq!(names(d.enter(Some("s"), "用 echo 工具", 2)), ["misb__echo"]);
        assert!(d.enter(Some("other"), "用 echo 工具", 1).is_empty());
        // A new turn — round 0, or another text — starts empty.
        assert!(d.enter(Some("s"), "用 echo 工具", 0).is_empty());
        d.record(Some("s"), "misb__echo");
        assert!(d.enter(Some("s"), "调用 add", 1).is_empty());
        d.record(Some("s"), "misb__add");
        d.forget(Some("s"));
        assert!(d.enter(Some("s"), "调用 add", 1).is_empty());
    }

    #[test]
    fn a_tool_found_by_a_search_is_remembered_for_its_turn_only() {
        let mut d = DescribedTools::default();
        d.enter(Some("s"), "how high is Denver", 0);
        d.record_found(Some("s"), "maps__elevation", "elevation of a city");
        assert_eq!(
            d.found_by(Some("s"), "maps__elevation").as_deref(),
            Some("elevation of a city")
        );
        assert_eq!(d.found_by(Some("other"), "maps__elevation"), None);
        for i in 0..2 * MAX_FOUND {
            d.record_found(Some("s"), &format!("t{i}"), "many");
        }
        assert_eq!(d.turns[&Some("s".to_owned())].found.len(), MAX_FOUND);
        // A new turn forgets what the last one found.
        d.enter(Some("s"), "another request", 0);
        assert_eq!(d.found_by(Some("s"), "maps__elevation"), None);
    }

    #[test]
    fn m3_described_tools_memory_is_bounded() {
        let mut d = DescribedTools::default();
        for i in 0..MAX_SESSIONS + 10 {
            let s = format!("s{i}");
            d.enter(Some(&s), "调用 echo", 0);
            d.record(Some(&s), "misb__echo");
        }
        assert_eq!(d.turns.len(), MAX_SESSIONS);
        // The oldest were forgotten, the newest kept.
        assert!(d.enter(Some("s0"), "调用 echo", 1).is_empty());
        let last = format!("s{}", MAX_SESSIONS + 9);
        assert_eq!(names(d.enter(Some(&last), "调用 echo", 1)), ["misb__echo"]);
    }
}
