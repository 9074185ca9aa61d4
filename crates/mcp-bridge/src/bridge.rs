//! [`McpBridge`], the handle, and the state its clones share: the registered services with
//! their state, the config file, the last tool catalog and the per-turn memory of described
//! tools. What the bridge does with it lives in the modules above this one (`registry.rs`,
//! `lifecycle.rs`, `discovery.rs`, `descriptions.rs`, `execution.rs`, `provider.rs`), each an
//! `impl McpBridge` of its own; this file depends on none of them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::catalog::McpTool;
use crate::config::{ConfigFile, ServiceConfig};
use crate::connection::{Connection, lock};
use crate::elicitation::{ElicitationHub, Elicitor};
use crate::error::BridgeError;
use crate::intent::IntentChain;
use crate::search::{SemanticSearch, ToolSearchConfig};
use crate::turns::DescribedTools;

/// Manages MCP services and offers their tools through [`toolwright_core::ToolProvider`].
///
/// Cloning is cheap; clones share the services. Dropping the last clone kills every server's
/// process group.
///
/// ```no_run
/// # async fn demo() -> Result<(), toolwright_mcp_bridge::BridgeError> {
/// use toolwright_mcp_bridge::{McpBridge, ServiceConfig};
/// let bridge = McpBridge::new();
/// bridge.register(ServiceConfig::new("everything", "npx")
///     .with_args(["-y", "@modelcontextprotocol/server-everything"])
///     .with_trigger_keywords(["echo", "回显"]))?;
/// bridge.start("everything").await?;
/// for t in bridge.tools().await { println!("{} — {}", t.exposed_name, t.description); }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpBridge {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) services: Mutex<BTreeMap<String, Service>>,
    config_path: Option<PathBuf>,
    /// What the loaded file held besides runnable services, kept for saving.
    file_rest: Mutex<ConfigFile>,
    /// The catalog [`McpBridge::tools`] built last, with the epoch it was built at and until
    /// when its lists' cache hints (`ttlMs`) allow it: reused while the epoch has not moved and
    /// that time has not come; also what the dispatcher validated against, for answers that
    /// cannot wait for the servers (the invalid-arguments message).
    pub(crate) catalog: Mutex<(u64, Arc<Vec<McpTool>>, Option<Instant>)>,
    /// Bumped by every change that can change the catalog: a service's state, its config, a
    /// server's `notifications/tools/list_changed`.
    pub(crate) catalog_epoch: Arc<AtomicU64>,
    /// The tools described (level 2) in each session's current turn.
    pub(crate) described: Mutex<DescribedTools>,
    /// Bumped on every change of a service's state: what a turn waiting for a starting service
    /// watches.
    pub(crate) changed: watch::Sender<u64>,
    /// When turns search instead of listing ([`crate::search`]).
    pub(crate) search_config: Mutex<ToolSearchConfig>,
    /// What every turn's view reads of the catalog, built once per catalog and search settings.
    pub(crate) turn_cache: Mutex<Option<Arc<TurnCache>>>,
    /// The search index and the catalog it was built from.
    pub(crate) search_index: Mutex<Option<SearchIndexCache>>,
    /// Search by meaning, when set ([`crate::search::SemanticSearch`]).
    pub(crate) semantic: Mutex<Option<SemanticSearch>>,
    /// A chat model's second look at the search's candidates, when set.
    pub(crate) judge: Mutex<Option<crate::search::SearchJudge>>,
    /// Learning from use, when on ([`crate::learning`]).
    pub(crate) learning: Mutex<Option<crate::learning::Learning>>,
    /// The tools' vectors by text hash ([`crate::vectors`]).
    pub(crate) vectors: Mutex<crate::vectors::VectorCache>,
    /// Servers' questions for the person ([`crate::elicitation`]).
    pub(crate) elicitation: Arc<ElicitationHub>,
    /// Progress, logs and changes the servers send ([`McpBridge::notices`]).
    pub(crate) notices: Arc<crate::notices::Notices>,
    /// The application's OAuth for services whose config entry asks for it
    /// ([`McpBridge::set_oauth`]).
    #[cfg(feature = "http")]
    pub(crate) oauth: Mutex<Option<crate::oauth::OAuthConfig>>,
    /// Other principals' connections to OAuth-protected services ([`crate::principals`]).
    #[cfg(feature = "http")]
    pub(crate) principals: crate::principals::PrincipalConnections,
}

/// What a turn's view of MCP tools (`descriptions.rs`) reads of the catalog and the services'
/// configs, built once per catalog and search settings rather than on every request: with 360
/// tools, recognizing over them and writing and counting their whole level-1 list twice a
/// round made `Agent::run` hundreds of times the bare loop. A config change moves the
/// catalog epoch, so the next catalog is a new one and this is built again.
pub(crate) struct TurnCache {
    /// The catalog it was built from (compared by pointer).
    pub(crate) catalog: Arc<Vec<McpTool>>,
    /// The search settings it was built with.
    pub(crate) config: ToolSearchConfig,
    /// The standard intent chain over the services' keywords and the catalog's names.
    pub(crate) chain: IntentChain,
    /// Each service's description, by service name.
    pub(crate) descriptions: BTreeMap<String, String>,
    /// Every tool's level-1 line: what a turn without an MCP intent lists.
    pub(crate) all: String,
    /// Whether [`TurnCache::all`] passes the search budget.
    pub(crate) all_over_budget: bool,
}

/// A search index with the catalog it indexes.
pub(crate) struct SearchIndexCache {
    pub(crate) catalog: Arc<Vec<McpTool>>,
    pub(crate) index: Arc<toolwright_tool_search::SearchIndex>,
    /// Built without the tools' vectors because the encoder failed: built again from then on.
    pub(crate) retry_at: Option<Instant>,
}

impl Inner {
    /// Tells whoever waits for a service that a state changed.
    pub(crate) fn notify(&self) {
        self.catalog_epoch.fetch_add(1, Ordering::SeqCst);
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }
}

pub(crate) struct Service {
    pub(crate) config: ServiceConfig,
    pub(crate) state: State,
    /// Bumped on every start and stop, so that a late result of an older one is ignored.
    pub(crate) generation: u64,
    /// Failed starts and crashes since the last successful call or operator start
    /// ([`crate::recovery`]).
    pub(crate) failures: u32,
    /// No automatic restart before this instant (backoff).
    pub(crate) retry_at: Option<Instant>,
    /// Stopped by the operator ([`McpBridge::stop`]): not started again on demand.
    pub(crate) held: bool,
}

impl Service {
    pub(crate) fn stopped(config: ServiceConfig) -> Self {
        Self {
            config,
            state: State::Stopped,
            generation: 0,
            failures: 0,
            retry_at: None,
            held: false,
        }
    }
}

pub(crate) enum State {
    Stopped,
    Starting,
    Running(Arc<Connection>),
    Error(String),
}

impl Default for McpBridge {
    fn default() -> Self {
        Self::new()
    }
}

impl McpBridge {
    /// A bridge with no services and no config file.
    pub fn new() -> Self {
        Self::build(None, ConfigFile::default())
    }

    /// A bridge whose services are read from `path` (`mcpServers` format; a missing file is an
    /// empty list) and saved back to it on every register, update and remove.
    pub fn with_config_file(path: impl Into<PathBuf>) -> Result<Self, BridgeError> {
        let path = path.into();
        let file = ConfigFile::load(&path)?;
        for (name, _, why) in &file.skipped {
            tracing::warn!(service = %name, "MCP config entry kept but not used: {why}");
        }
        Ok(Self::build(Some(path), file))
    }

    fn build(config_path: Option<PathBuf>, mut file: ConfigFile) -> Self {
        let services = std::mem::take(&mut file.services)
            .into_iter()
            .map(|c| (c.name.clone(), Service::stopped(c)))
            .collect();
        Self {
            inner: Arc::new(Inner {
                services: Mutex::new(services),
                config_path,
                file_rest: Mutex::new(file),
                // Epoch 1 and a catalog of epoch 0: the first `tools()` builds it.
                catalog: Mutex::new((0, Arc::new(Vec::new()), None)),
                catalog_epoch: Arc::new(AtomicU64::new(1)),
                described: Mutex::new(DescribedTools::default()),
                changed: watch::channel(0).0,
                search_config: Mutex::new(ToolSearchConfig::default()),
                turn_cache: Mutex::new(None),
                search_index: Mutex::new(None),
                semantic: Mutex::new(None),
                judge: Mutex::new(None),
                learning: Mutex::new(None),
                vectors: Mutex::new(crate::vectors::VectorCache::default()),
                elicitation: ElicitationHub::new(),
                notices: crate::notices::Notices::new(),
                #[cfg(feature = "http")]
                oauth: Mutex::new(None),
                #[cfg(feature = "http")]
                principals: Default::default(),
            }),
        }
    }

    /// Writes the services to the config file, when there is one.
    pub(crate) fn persist(&self) -> Result<(), BridgeError> {
        let Some(path) = &self.inner.config_path else {
            return Ok(());
        };
        let mut file = lock(&self.inner.file_rest).clone();
        file.services = lock(&self.inner.services)
            .values()
            .map(|s| s.config.clone())
            .collect();
        file.save(path)
    }
}

// What the application attaches to answer servers' questions (`elicitation.rs`).
impl McpBridge {
    /// Attaches the [`Elicitor`](crate::elicitation::Elicitor) that asks the person when a server elicits, with the time a
    /// question may wait (then it is cancelled). Without one, every question is declined.
    ///
    /// `limit` is also the most a call started from now on spends waiting for the person in
    /// all, its questions together; that time does not count against the service's call
    /// timeout.
    pub fn set_elicitor(&self, elicitor: Arc<dyn Elicitor>, limit: Duration) {
        self.inner.elicitation.set_elicitor(Some((elicitor, limit)));
    }

    /// Detaches the elicitor: questions are declined again.
    pub fn clear_elicitor(&self) {
        self.inner.elicitation.set_elicitor(None);
    }

    /// Lets servers ask the application's model to answer (`sampling/createMessage`), within
    /// `sampling`'s bounds, each request put to the person through the elicitor unless
    /// [`Sampling::without_asking`](crate::Sampling::without_asking); `None` stops offering
    /// it. A server learns it may ask when it starts (the capability is declared then): set
    /// this before starting services, or restart them.
    pub fn set_sampling(&self, sampling: Option<crate::Sampling>) {
        *crate::connection::lock(&self.inner.elicitation.sampling) = sampling.map(Arc::new);
    }

    /// How the person signs in, and where tokens are kept, for the remote services whose config
    /// file entry asks for OAuth (`"oauth": true` or `{"client_id", "client_secret_env_var",
    /// "client_metadata_url", "scopes", "redirect_uri"}`): each such service starts with
    /// `oauth` and its entry's fields on top. A service given OAuth in code
    /// ([`ServiceConfig::with_oauth`](crate::ServiceConfig::with_oauth)) keeps its own. Without
    /// it (`None`), such a service fails to start with a message saying to call this.
    #[cfg(feature = "http")]
    pub fn set_oauth(&self, oauth: Option<crate::oauth::OAuthConfig>) {
        *crate::connection::lock(&self.inner.oauth) = oauth;
    }
}
