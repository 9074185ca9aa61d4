//! Tool names and level-1 sentences as the model sees them. (Schemas are normalised by
//! [`toolwright_core::normalize_schema`], the rule every tool source shares.)
//!
//! **Namespacing.** Every MCP tool is offered as `SERVICE__TOOL` (two underscores), so two services
//! exposing `search` never collide. Providers accept only `^[a-zA-Z0-9_-]{1,64}$`, so any other
//! character becomes `_`; when the result is longer than 64 characters it is cut to 55 and
//! `_` plus 8 hex digits of a hash of the original `service`/`tool` pair is appended, which keeps it
//! unique and stable across restarts. The bridge keeps a table from exposed name to
//! (service, original tool name), so the original name always reaches the server.

/// Longest tool name providers accept (the rule of [`toolwright_core::is_valid_tool_name`]).
pub(crate) use toolwright_core::MAX_TOOL_NAME;

/// Separator between service and tool.
pub const SEPARATOR: &str = "__";

/// The prefix of every exposed name of `service`'s tools: `service__`.
pub fn service_prefix(service: &str) -> String {
    format!("{}{SEPARATOR}", sanitize(service))
}

/// `[a-zA-Z0-9_-]` only; other characters become `_`.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// FNV-1a, 32 bits: small, stable across runs and platforms.
fn fnv1a(parts: &[&str]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h ^= 0xff;
            h = h.wrapping_mul(0x0100_0193);
        }
        for b in p.bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// The name the model sees for `tool` of `service`: `service__tool`, characters a provider
/// refuses replaced by `_`, cut to 64 with a hash when longer.
pub fn exposed_name(service: &str, tool: &str) -> String {
    let full = format!("{}{SEPARATOR}{}", sanitize(service), sanitize(tool));
    if full.len() <= MAX_TOOL_NAME {
        return full;
    }
    hashed(&full, service, tool)
}

/// The cut-and-hash form, also used to break ties when two names sanitise to the same string.
pub fn hashed(full: &str, service: &str, tool: &str) -> String {
    let keep = MAX_TOOL_NAME - 9;
    let mut cut: String = full.chars().take(keep).collect();
    cut.push_str(&format!("_{:08x}", fnv1a(&[service, tool])));
    cut
}

pub(crate) use toolwright_core::first_sentence;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_names_join_service_and_tool_and_fit_every_provider() {
        assert_eq!(exposed_name("everything", "get-sum"), "everything__get-sum");
        assert_eq!(exposed_name("my server", "a.b"), "my_server__a_b");
        assert_eq!(exposed_name("s", &"x".repeat(100)).len(), 64);
    }
    use toolwright_core::is_valid_tool_name as valid;

    #[test]
    fn m1_names_fit_the_provider_limit() {
        for (s, t) in [
            ("everything", "echo"),
            ("服务", "工具"),
            ("a".repeat(80).as_str(), "b"),
            ("s", "c".repeat(200).as_str()),
        ] {
            let n = exposed_name(s, t);
            assert!(valid(&n), "{n}");
        }
        assert_ne!(
            exposed_name("s", &"c".repeat(200)),
            exposed_name("s", &format!("{}d", "c".repeat(200)))
        );
    }

    #[test]
    fn m3_first_sentence_is_short() {
        assert_eq!(first_sentence("", 10), "");
        assert_eq!(first_sentence("v1.2 is out. More", 50), "v1.2 is out.");
        assert_eq!(first_sentence("line one\nline two", 50), "line one");
        assert_eq!(first_sentence(&"é".repeat(300), 10).chars().count(), 10);
    }
}
