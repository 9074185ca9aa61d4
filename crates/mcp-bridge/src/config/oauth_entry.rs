//! `"oauth"` in a remote service's entry of the config file: what the file can say about
//! signing in (a pre-registered client, its secret's environment variable, a client ID
//! metadata document, scopes, the loopback redirect). How the person signs in and where tokens
//! are kept are the application's ([`McpBridge::set_oauth`](crate::McpBridge::set_oauth)): a
//! file cannot name code. The entry stays in the service's `extra` fields, so it is written
//! back exactly as the user wrote it.
//!
//! ```json
//! "linear": {
//!   "url": "https://mcp.linear.app/mcp",
//!   "oauth": {"scopes": ["read"], "client_id": "my-app", "client_secret_env_var": "LINEAR_SECRET"}
//! }
//! ```
//!
//! `"oauth": true` is OAuth with every default (dynamic registration, the challenge's scopes).

use serde::Deserialize;
use serde_json::Value;

/// The `"oauth"` object of an entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OAuthEntry {
    /// A client registered beforehand: no registration is attempted.
    #[serde(default)]
    pub(crate) client_id: Option<String>,
    /// The environment variable holding that client's secret (read at each start, never
    /// stored in the file).
    #[serde(default)]
    pub(crate) client_secret_env_var: Option<String>,
    /// The HTTPS URL of this client's ID metadata document.
    #[serde(default)]
    pub(crate) client_metadata_url: Option<String>,
    /// Scopes to ask for instead of the challenge's or the resource's.
    #[serde(default)]
    pub(crate) scopes: Vec<String>,
    /// The loopback redirect URI.
    #[serde(default)]
    pub(crate) redirect_uri: Option<String>,
}

/// The entry's `"oauth"` in `extra`: `None` when absent or `false`, else it or why it cannot
/// be used.
pub(crate) fn oauth_entry(
    extra: &serde_json::Map<String, Value>,
) -> Option<Result<OAuthEntry, String>> {
    match extra.get("oauth")? {
        Value::Bool(false) => None,
        Value::Bool(true) => Some(Ok(OAuthEntry::default())),
        v @ Value::Object(_) => Some(
            serde_json::from_value::<OAuthEntry>(v.clone())
                .map_err(|e| format!("`oauth` is malformed: {e}"))
                .and_then(checked),
        ),
        _ => Some(Err(
            "`oauth` must be true, false or an object (client_id, client_secret_env_var, client_metadata_url, scopes, redirect_uri)".into(),
        )),
    }
}

/// Refuses what cannot work before any start: a secret without its client, a metadata
/// document that is not HTTPS.
fn checked(e: OAuthEntry) -> Result<OAuthEntry, String> {
    if e.client_secret_env_var.is_some() && e.client_id.is_none() {
        return Err(
            "`oauth.client_secret_env_var` needs `oauth.client_id` (the secret is that client's)"
                .into(),
        );
    }
    if let Some(url) = &e.client_metadata_url
        && !url.starts_with("https://")
    {
        return Err(format!(
            "`oauth.client_metadata_url` {url:?} must be an https:// URL"
        ));
    }
    Ok(e)
}

#[cfg(feature = "http")]
impl OAuthEntry {
    /// The application's OAuth (`template`: its sign-in, store and principal) with what this
    /// entry says; the client secret read from its variable now.
    pub(crate) fn apply(
        &self,
        template: &crate::oauth::OAuthConfig,
        service: &str,
    ) -> Result<crate::oauth::OAuthConfig, String> {
        let mut oauth = template.clone();
        if let Some(id) = &self.client_id {
            let secret = match &self.client_secret_env_var {
                Some(var) => Some(std::env::var(var).map_err(|_| {
                    format!(
                        "service {service}: the environment variable {var} (`oauth.client_secret_env_var`) is not set"
                    )
                })?),
                None => None,
            };
            oauth = oauth.with_client(id.clone(), secret);
        }
        if let Some(url) = &self.client_metadata_url {
            oauth = oauth.with_client_metadata_url(url.clone());
        }
        if !self.scopes.is_empty() {
            oauth = oauth.with_scopes(self.scopes.iter().cloned());
        }
        if let Some(uri) = &self.redirect_uri {
            oauth = oauth
                .with_redirect_uri(uri.clone())
                .map_err(|e| format!("service {service}: `oauth.redirect_uri`: {e}"))?;
        }
        Ok(oauth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn extra(v: Value) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("oauth".into(), v);
        m
    }

    #[test]
    fn the_oauth_entry_is_read_in_each_of_its_shapes_and_refused_when_it_cannot_work() {
        assert_eq!(oauth_entry(&serde_json::Map::new()), None);
        assert_eq!(oauth_entry(&extra(json!(false))), None);
        assert_eq!(
            oauth_entry(&extra(json!(true))),
            Some(Ok(OAuthEntry::default()))
        );
        let full = oauth_entry(&extra(
            json!({"client_id": "app", "client_secret_env_var": "S",
            "scopes": ["read", "write"], "redirect_uri": "http://127.0.0.1:8765/cb"}),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(full.client_id.as_deref(), Some("app"));
        assert_eq!(full.scopes, ["read", "write"]);
        for (bad, why) in [
            (json!("yes"), "must be true, false or an object"),
            (json!({"client_secret": "inline"}), "malformed"),
            (
                json!({"client_secret_env_var": "S"}),
                "needs `oauth.client_id`",
            ),
            (
                json!({"client_metadata_url": "http://example.com/c.json"}),
                "https://",
            ),
        ] {
            let err = oauth_entry(&extra(bad.clone())).unwrap().unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[cfg(feature = "http")]
    #[test]
    fn the_entry_is_applied_on_the_applications_oauth_with_the_secret_from_the_environment() {
        use std::sync::Arc;
        struct Nobody;
        #[async_trait::async_trait]
        impl crate::oauth::SignIn for Nobody {
            async fn sign_in(&self, _url: &str) -> Result<(), String> {
                Err("nobody".into())
            }
        }
        let template = crate::oauth::OAuthConfig::new(Arc::new(Nobody));
        let unset = "TOOLWRIGHT_TEST_NEVER_SET";
        let mut entry = OAuthEntry {
            client_id: Some("app".into()),
            client_secret_env_var: Some(unset.into()),
            scopes: vec!["read".into()],
            redirect_uri: Some("http://127.0.0.1:8765/cb".into()),
            ..OAuthEntry::default()
        };
        let err = entry.apply(&template, "svc").unwrap_err();
        assert!(err.contains(unset) && err.contains("not set"), "{err}");
        // A variable every test process has stands in for the secret's.
        entry.client_secret_env_var = Some("PATH".into());
        let oauth = entry.apply(&template, "svc").unwrap();
        let client = oauth.client.as_ref().unwrap();
        assert_eq!(client.client_id, "app");
        assert_eq!(client.client_secret, std::env::var("PATH").ok());
        assert_eq!(oauth.scopes, ["read"]);
        assert_eq!(oauth.redirect_uri, "http://127.0.0.1:8765/cb");
        let far = OAuthEntry {
            redirect_uri: Some("https://evil.example/cb".into()),
            ..OAuthEntry::default()
        };
        assert!(far.apply(&template, "svc").is_err());
    }
}
