//! What the server offers besides tools: [`Resources`] (read, templates, subscriptions) and
//! [`Prompts`], each with completions of their arguments, set on
//! [`McpServerBuilder::resources`](crate::McpServerBuilder::resources) and
//! [`McpServerBuilder::prompts`](crate::McpServerBuilder::prompts).
//!
//! The server bounds what it sends: a read larger than
//! [`McpServerBuilder::max_resource_bytes`](crate::McpServerBuilder::max_resource_bytes) is
//! refused, at most [`McpServerBuilder::max_subscriptions`](crate::McpServerBuilder::max_subscriptions)
//! resources are watched per session, at most [`MAX_COMPLETIONS`] values go back per
//! completion.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{GetPromptResult, Prompt, Resource, ResourceContents, ResourceTemplate};
use rmcp::{ErrorData, Peer, RoleServer};
use serde_json::{Map, Value};

/// The most completion values one answer carries (MCP's limit).
pub const MAX_COMPLETIONS: usize = 100;

/// Why a resource, prompt or completion could not be given. Each becomes a JSON-RPC error the
/// client can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OfferError {
    /// No resource at that URI (JSON-RPC `-32002`).
    #[error("no resource at {0}: list them with resources/list and resources/templates/list")]
    UnknownResource(String),
    /// No prompt by that name (`-32602`).
    #[error("no prompt named {0:?}: list them with prompts/list")]
    UnknownPrompt(String),
    /// A prompt or template has no argument by that name (`-32602`).
    #[error("{of} has no argument {argument:?}")]
    UnknownArgument {
        /// The prompt or resource template.
        of: String,
        /// The argument asked about.
        argument: String,
    },
    /// A required prompt argument is missing or not a string (`-32602`).
    #[error("the prompt {prompt:?} needs the argument {argument:?} (a string)")]
    MissingArgument {
        /// The prompt.
        prompt: String,
        /// The argument.
        argument: String,
    },
    /// The resource is larger than the server sends (`-32603`).
    #[error(
        "the resource {uri} has {size} bytes, more than the {limit} this server sends; read a smaller part or raise max_resource_bytes"
    )]
    TooLarge {
        /// The resource.
        uri: String,
        /// Its size in bytes (at least).
        size: u64,
        /// The server's limit.
        limit: usize,
    },
    /// The provider failed (`-32603`).
    #[error("{0}")]
    Failed(String),
}

impl From<OfferError> for ErrorData {
    fn from(e: OfferError) -> Self {
        let message = e.to_string();
        match e {
            OfferError::UnknownResource(uri) => {
                ErrorData::resource_not_found(message, Some(serde_json::json!({"uri": uri})))
            }
            OfferError::UnknownPrompt(_)
            | OfferError::UnknownArgument { .. }
            | OfferError::MissingArgument { .. } => ErrorData::invalid_params(message, None),
            OfferError::TooLarge { .. } | OfferError::Failed(_) => {
                ErrorData::internal_error(message, None)
            }
        }
    }
}

/// A source of resources: fixed ones ([`Resources::list`]) and ones named by URI templates
/// ([`Resources::templates`], RFC 6570 `{var}`), read by URI.
///
/// ```
/// use toolwright_mcp_server::{OfferError, Resources};
/// use toolwright_mcp_server::rmcp_model::{Resource, ResourceContents};
///
/// struct Readme;
///
/// #[async_trait::async_trait]
/// impl Resources for Readme {
///     async fn list(&self) -> Vec<Resource> {
///         vec![Resource::new("docs://readme", "README").with_mime_type("text/markdown")]
///     }
///     async fn read(&self, uri: &str, _max_bytes: usize) -> Result<Vec<ResourceContents>, OfferError> {
///         match uri {
///             "docs://readme" => Ok(vec![ResourceContents::text("# Hello", uri).with_mime_type("text/markdown")]),
///             _ => Err(OfferError::UnknownResource(uri.into())),
///         }
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait Resources: Send + Sync {
    /// The fixed resources.
    async fn list(&self) -> Vec<Resource>;
    /// The URI templates of resources read by parameters (none by default).
    async fn templates(&self) -> Vec<ResourceTemplate> {
        Vec::new()
    }
    /// The contents at `uri` (a listed resource or one a template names).
    /// [`OfferError::UnknownResource`] for any other URI; [`OfferError::TooLarge`] before
    /// loading anything larger than `max_bytes` (the server refuses a larger answer anyway).
    async fn read(&self, uri: &str, max_bytes: usize) -> Result<Vec<ResourceContents>, OfferError>;
    /// Values for `argument` of the template `template` that start like `value` (by default:
    /// [`OfferError::UnknownArgument`]).
    async fn complete(
        &self,
        template: &str,
        argument: &str,
        value: &str,
    ) -> Result<Vec<String>, OfferError> {
        let _ = value;
        Err(OfferError::UnknownArgument {
            of: template.into(),
            argument: argument.into(),
        })
    }
}

/// A source of prompts: templates of messages a client's person picks, filled with arguments.
#[async_trait::async_trait]
pub trait Prompts: Send + Sync {
    /// The prompts, with their arguments.
    async fn list(&self) -> Vec<Prompt>;
    /// The prompt `name` filled with `arguments` (strings, by MCP); [`OfferError::UnknownPrompt`]
    /// or [`OfferError::MissingArgument`] when it cannot be.
    async fn get(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<GetPromptResult, OfferError>;
    /// Values for `argument` of the prompt `prompt` that start like `value` (by default:
    /// [`OfferError::UnknownArgument`]).
    async fn complete(
        &self,
        prompt: &str,
        argument: &str,
        value: &str,
    ) -> Result<Vec<String>, OfferError> {
        let _ = value;
        Err(OfferError::UnknownArgument {
            of: prompt.into(),
            argument: argument.into(),
        })
    }
}

/// The parameters of `uri` when it fits `template` (RFC 6570 level 1: `{name}` stands for
/// one or more characters other than `/`); `None` otherwise.
///
/// ```
/// let vars = toolwright_mcp_server::match_uri_template("test://t/{id}/data", "test://t/123/data");
/// assert_eq!(vars.unwrap()["id"], "123");
/// assert!(toolwright_mcp_server::match_uri_template("test://t/{id}/data", "test://t/1/2/data").is_none());
/// ```
pub fn match_uri_template(template: &str, uri: &str) -> Option<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    let mut rest = uri;
    let mut t = template;
    while !t.is_empty() {
        if let Some(after) = t.strip_prefix('{') {
            let end = after.find('}')?;
            let name = &after[..end];
            t = &after[end + 1..];
            let stop = t.find('{').map_or(t, |i| &t[..i]);
            let value_end = if stop.is_empty() {
                rest.len()
            } else {
                rest.find(stop)?
            };
            let value = &rest[..value_end];
            if value.is_empty() || value.contains('/') {
                return None;
            }
            vars.insert(name.to_owned(), value.to_owned());
            rest = &rest[value_end..];
        } else {
            let lit_end = t.find('{').unwrap_or(t.len());
            rest = rest.strip_prefix(&t[..lit_end])?;
            t = &t[lit_end..];
        }
    }
    rest.is_empty().then_some(vars)
}

/// The size in bytes of what `contents` sends.
pub(crate) fn contents_size(contents: &[ResourceContents]) -> u64 {
    contents
        .iter()
        .map(|c| match c {
            ResourceContents::TextResourceContents { text, .. } => text.len() as u64,
            ResourceContents::BlobResourceContents { blob, .. } => blob.len() as u64 / 4 * 3,
            other => serde_json::to_string(other).map_or(0, |s| s.len() as u64),
        })
        .sum()
}

/// Who watches which resource: per URI, the sessions and how to reach them.
#[derive(Default)]
pub(crate) struct Subscriptions {
    next: AtomicU64,
    by_uri: Mutex<HashMap<String, HashMap<u64, Peer<RoleServer>>>>,
}

impl Subscriptions {
    /// A key for a new session.
    pub(crate) fn session_key(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<u64, Peer<RoleServer>>>> {
        self.by_uri
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Session `key` watches `uri`, unless it already watches `max` others.
    pub(crate) fn add(
        &self,
        key: u64,
        uri: &str,
        peer: Peer<RoleServer>,
        max: usize,
    ) -> Result<(), ErrorData> {
        let mut map = self.lock();
        if map.get(uri).is_some_and(|s| s.contains_key(&key)) {
            return Ok(());
        }
        let held = map.values().filter(|s| s.contains_key(&key)).count();
        if held >= max {
            return Err(ErrorData::invalid_request(
                format!(
                    "this session already watches {held} resources, the most this server allows; unsubscribe from one first"
                ),
                None,
            ));
        }
        map.entry(uri.to_owned()).or_default().insert(key, peer);
        Ok(())
    }

    /// Session `key` stops watching `uri`.
    pub(crate) fn remove(&self, key: u64, uri: &str) {
        let mut map = self.lock();
        if let Some(s) = map.get_mut(uri) {
            s.remove(&key);
            if s.is_empty() {
                map.remove(uri);
            }
        }
    }

    /// Session `key` ended: it watches nothing.
    pub(crate) fn forget(&self, key: u64) {
        let mut map = self.lock();
        map.retain(|_, s| {
            s.remove(&key);
            !s.is_empty()
        });
    }

    /// The sessions watching `uri`.
    pub(crate) fn watchers(&self, uri: &str) -> Vec<(u64, Peer<RoleServer>)> {
        self.lock()
            .get(uri)
            .map(|s| s.iter().map(|(k, p)| (*k, p.clone())).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_names_its_parameters_and_rejects_other_shapes() {
        let v = match_uri_template("a://{x}/b/{y}", "a://1/b/two").unwrap();
        assert_eq!(v["x"], "1");
        assert_eq!(v["y"], "two");
        assert!(match_uri_template("a://{x}/b", "a:///b").is_none());
        assert!(match_uri_template("a://{x}/b", "a://1/c").is_none());
        assert!(match_uri_template("a://{x}/b", "a://1/b/extra").is_none());
        assert!(
            match_uri_template("a://fixed", "a://fixed")
                .unwrap()
                .is_empty()
        );
        assert!(match_uri_template("a://{x", "a://1").is_none());
    }

    #[test]
    fn errors_map_to_the_json_rpc_codes_clients_expect() {
        let e: ErrorData = OfferError::UnknownResource("x://y".into()).into();
        assert_eq!(e.code.0, -32002);
        let e: ErrorData = OfferError::UnknownArgument {
            of: "p".into(),
            argument: "a".into(),
        }
        .into();
        assert_eq!(e.code.0, -32602);
        let e: ErrorData = OfferError::TooLarge {
            uri: "x://big".into(),
            size: 1 << 30,
            limit: 1 << 20,
        }
        .into();
        assert_eq!(e.code.0, -32603);
        assert!(e.message.contains("max_resource_bytes"));
    }
}
