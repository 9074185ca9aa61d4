//! [`PanelConfig`]: limits, timeouts, who may call, where conversations are kept.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "postgres")]
use toolwright_context_engine::PostgresStore;
#[cfg(feature = "sqlite")]
use toolwright_context_engine::SqliteStore;
use toolwright_context_engine::{MemoryStore, SessionStore, StoreError};
#[cfg(feature = "nats")]
use toolwright_messaging::NatsConfig;
use toolwright_messaging::{BusError, MessageBus};
use toolwright_tool_system::RegistryError;

/// The variable naming the PostgreSQL database that keeps the panel's conversations
/// ([`PanelConfig::from_env`]).
pub const DATABASE_URL: &str = "DATABASE_URL";
/// The variable naming the NATS server that carries the panel's bus ([`PanelConfig::from_env`]).
pub const NATS_URL: &str = "NATS_URL";
/// The variable setting [`PanelConfig::broker_ack_wait`] in milliseconds
/// ([`PanelConfig::from_env`]).
pub const NATS_ACK_WAIT_MS: &str = "NATS_ACK_WAIT_MS";
/// The variable naming a file of broker credentials, a `.creds` file or a user NKey seed
/// ([`PanelConfig::broker_credentials`]). A user and password or a token go in `NATS_URL`
/// (`nats://USER:PASSWORD@HOST:PORT`, `nats://TOKEN@HOST:PORT`).
pub const NATS_CREDS: &str = "NATS_CREDS";
/// The variable naming a root certificate (PEM) the broker's TLS certificate is checked
/// against ([`PanelConfig::broker_tls_ca`]); it requires TLS, as a `tls://` `NATS_URL` does.
pub const NATS_TLS_CA: &str = "NATS_TLS_CA";
/// The variable naming this worker's client certificate (PEM) for a broker that verifies its
/// clients (mutual TLS, [`PanelConfig::broker_tls_client`]); set with [`NATS_TLS_KEY`].
pub const NATS_TLS_CERT: &str = "NATS_TLS_CERT";
/// The variable naming the private key (PEM) of [`NATS_TLS_CERT`].
pub const NATS_TLS_KEY: &str = "NATS_TLS_KEY";
/// The variable setting [`PanelConfig::broker_inbox_prefix`].
pub const NATS_INBOX_PREFIX: &str = "NATS_INBOX_PREFIX";

/// What went wrong while setting up a panel, and what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PanelError {
    /// The session store could not be opened.
    #[error("the chat panel's session store could not be opened: {0}")]
    Store(#[from] StoreError),
    /// The directory of the session store could not be created.
    #[error(
        "cannot create the directory `{path}` for the chat panel's session store: {source}; \
         create it, or set another path with PanelConfig::with_history_path"
    )]
    StoreDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The agent's tools could not be registered.
    #[error("the chat panel's agent could not be built: {0}")]
    Agent(#[from] RegistryError),
    /// The message broker named by `NATS_URL` could not be reached or set up.
    #[error(
        "the chat panel's message broker at {url} could not be used: {source}; start it, fix \
         NATS_URL (and NATS_CREDS, NATS_TLS_CA), or unset NATS_URL to run with the in-process \
         bus (one worker only)"
    )]
    Broker {
        /// The broker's URL, any password or token shown as `***`.
        url: String,
        /// The bus's error.
        source: BusError,
    },
    /// The configuration names a store or a broker this build of the panel leaves out (
    /// SQLite, PostgreSQL and NATS are features of the `chat-panel` crate).
    #[error(
        "{what} needs the chat panel's `{feature}` feature, which this build leaves out; add \
         `features = [\"{feature}\"]` to the chat-panel dependency, or {instead}"
    )]
    FeatureOff {
        /// The crate feature that is off.
        feature: &'static str,
        /// What asked for it.
        what: &'static str,
        /// The other way out.
        instead: &'static str,
    },
    /// A setting from the environment cannot be used.
    #[error("{name}={value:?} cannot be used: {expected}; fix or unset {name}")]
    Setting {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
}

/// Where the panel keeps conversations (C4).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HistoryStore {
    /// An SQLite file: conversations survive a restart (the default).
    Sqlite(PathBuf),
    /// In memory: gone when the process ends.
    Memory,
    /// A PostgreSQL database (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` or a libpq
    /// `key=value` string): several panel workers share its conversations.
    Postgres(String),
}

impl HistoryStore {
    /// The default file: `$XDG_DATA_HOME/llm-toolkit/chat-panel.sqlite3`, else
    /// `$HOME/.local/share/llm-toolkit/chat-panel.sqlite3`, else `chat-panel.sqlite3` in the
    /// working directory.
    pub fn default_path() -> PathBuf {
        let base = std::env::var_os("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| PathBuf::from(h).join(".local/share"))
            });
        match base {
            Some(b) => b.join("llm-toolkit").join("chat-panel.sqlite3"),
            None => PathBuf::from("chat-panel.sqlite3"),
        }
    }

    /// `DATABASE_URL` when it is set and not empty (PostgreSQL), else the SQLite file at
    /// [`default_path`](Self::default_path).
    pub fn from_env() -> Self {
        match std::env::var(DATABASE_URL) {
            Ok(url) if !url.trim().is_empty() => Self::Postgres(url),
            _ => Self::Sqlite(Self::default_path()),
        }
    }

    /// Whether several processes can share this store (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }

    /// Opens the store: creates the SQLite file and its directory when missing; connects to
    /// PostgreSQL and creates or migrates its schema (a database that cannot be reached is
    /// [`PanelError::Store`] with [`StoreError::Unreachable`], at once rather than at the first
    /// message).
    pub async fn open(&self) -> Result<Arc<dyn SessionStore>, PanelError> {
        match self {
            Self::Memory => Ok(Arc::new(MemoryStore::new())),
            #[cfg(feature = "postgres")]
            Self::Postgres(url) => Ok(Arc::new(PostgresStore::connect(url).await?)),
            #[cfg(not(feature = "postgres"))]
            Self::Postgres(_) => Err(PanelError::FeatureOff {
                feature: "postgres",
                what: "a PostgreSQL session store (DATABASE_URL)",
                instead: "unset DATABASE_URL",
            }),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|source| PanelError::StoreDir {
                        path: dir.to_path_buf(),
                        source,
                    })?;
                }
                Ok(Arc::new(SqliteStore::open(path)?))
            }
            #[cfg(not(feature = "sqlite"))]
            Self::Sqlite(_) => Err(PanelError::FeatureOff {
                feature: "sqlite",
                what: "an SQLite session store (the default)",
                instead: "keep conversations in memory (PanelConfig::with_memory_history) or in PostgreSQL (DATABASE_URL)",
            }),
        }
    }
}

/// Limits and timeouts of the panel. Every field has a safe default; see
/// `docs/stage-5-messaging-chat-panel.md` for what each protects against.
///
/// ```
/// use std::time::Duration;
/// use toolwright_chat_panel::PanelConfig;
/// let config = PanelConfig::default()
///     .with_history_path("/tmp/panel-doc-example.sqlite3")
///     .with_allowed_host("chat.example.com")
///     .with_allowed_origin("https://chat.example.com")
///     .with_idle_timeout(Duration::from_secs(30));
/// assert_eq!(config.max_connections, 512);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PanelConfig {
    /// Largest request body, in bytes; larger is `413` (default 16 KiB).
    pub max_body_bytes: usize,
    /// Longest request target (path and query), in bytes; longer is `414` (default 8 KiB).
    pub max_uri_bytes: usize,
    /// Longest user message, in characters; longer is `413` (default 4000).
    pub max_text_chars: usize,
    /// Largest attachment (a picture, sound or file) a person may attach to a message, in
    /// bytes (default 5 MiB; at most
    /// [`toolwright_core::MAX_INLINE_MEDIA_BYTES`], 20 MiB, counts). A larger one is `413`
    /// with a sentence the page shows; `0` turns attaching off. The message's body may be
    /// this much (base64: 4/3 of it) larger than [`max_body_bytes`](Self::max_body_bytes).
    pub max_image_bytes: usize,
    /// Answers running at once; more wait for a slot (default 32).
    pub max_concurrent_turns: usize,
    /// How long a request waits for a slot before `503` (default 30 s).
    pub queue_timeout: Duration,
    /// Longest answer; then it is stopped with an error entry (default 120 s).
    pub turn_timeout: Duration,
    /// How long a worker's claim on a running answer lasts unless renewed (it is renewed every
    /// third of it while the answer runs). A worker that dies mid-answer is noticed this long
    /// after its last renewal: the next worker touching the conversation stores that the answer
    /// was interrupted (default 30 s).
    pub turn_lease: Duration,
    /// How often an events stream (`GET /api/sessions/{id}/events`) looks for rows stored by
    /// other workers; this worker's own answers wake it at once (default 250 ms).
    pub follow_poll: Duration,
    /// Conversations kept; when a new one starts beyond this, the least recently used idle one
    /// is deleted from the panel and from its store (default 10 000).
    pub max_sessions: usize,
    /// Entries the page is shown per conversation; the oldest go first (default 500).
    pub max_entries: usize,
    /// Messages kept in the store per conversation; after a turn beyond this the oldest
    /// turns are deleted (default 64). The context budget decides what the model reads.
    pub max_history_messages: usize,
    /// Token budget of each model request: the oldest turns are left out first (default
    /// 8000), so a conversation of any length keeps working.
    pub context_budget: usize,
    /// Where conversations are kept (default: SQLite at [`HistoryStore::default_path`]).
    pub history: HistoryStore,
    /// The NATS server carrying the bus (`nats://HOST:PORT`); `None`: the in-process bus
    /// (default). See [`PanelConfig::bus`].
    pub broker: Option<String>,
    /// How long the broker waits for a worker to confirm a person's message it took before it
    /// hands the message to another worker — the delay, after a worker dies holding one,
    /// before the message is stored by another (default 10 s; NATS only). A worker confirms
    /// once the message is stored and tells the broker every third of this that it still
    /// holds it, so a short value costs a few broker messages while a store is slow, not
    /// duplicates.
    pub broker_ack_wait: Duration,
    /// A file of credentials for the broker: a `.creds` file or a user NKey seed (`NATS_CREDS`;
    /// default none). See `docs/bus.md`, "Broker users and permissions".
    pub broker_credentials: Option<PathBuf>,
    /// A root certificate (PEM) for the broker's TLS certificate (`NATS_TLS_CA`; default none).
    pub broker_tls_ca: Option<PathBuf>,
    /// This worker's client certificate and its key (PEM), for a broker that verifies its
    /// clients (`NATS_TLS_CERT` and `NATS_TLS_KEY`, both or neither; default none).
    pub broker_tls_client: Option<(PathBuf, PathBuf)>,
    /// The prefix of this worker's reply subjects (`NATS_INBOX_PREFIX`; default `_INBOX`): one
    /// per broker user, so no user can read the messages handed to another.
    pub broker_inbox_prefix: Option<String>,
    /// How long a conversation remembers the id of a bus message stored into it, so that the
    /// broker handing it out again (a worker died before confirming it, or a sender sent it
    /// again) stores it once (default 7 days, the broker's `NatsConfig::max_age`). Older ids
    /// are removed when the next message is stored.
    pub bus_memory_max_age: Duration,
    /// How many such ids a conversation remembers at most; the oldest go first (default 1000).
    pub bus_memory_max_ids: usize,
    /// A setting of the environment that could not be used (reported by [`bus`](Self::bus)).
    env_problem: Option<(&'static str, String, &'static str)>,
    /// `Host` values accepted besides the bound address (`127.0.0.1:PORT`, `localhost:PORT`):
    /// add the public host name when the panel sits behind a reverse proxy (default none).
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) accepted besides the panel's own (default none).
    pub allowed_origins: Vec<String>,
    /// Who is calling: every `/api/` request is authenticated by it, and a refusal is
    /// `401` (default [`NoAuth`](crate::identity::NoAuth), loopback only).
    pub authenticator: std::sync::Arc<dyn crate::identity::Authenticator>,
    /// The browser login ([`crate::login`]): `/login`, `/callback`, `/logout`, and the
    /// page sends a browser without a session to `/login` (default none).
    pub login: Option<std::sync::Arc<crate::login::OidcLogin>>,
    /// Open connections at most; beyond it the longest idle connection is closed, or the new
    /// one refused with `503` when none is idle (default 512).
    pub max_connections: usize,
    /// Longest time to receive a request's headers (default 10 s).
    pub header_read_timeout: Duration,
    /// Longest time to receive a request's body (default 10 s).
    pub body_read_timeout: Duration,
    /// A connection with no request in flight that sends nothing for this long is closed
    /// (keep-alive idle; default 60 s).
    pub idle_timeout: Duration,
    /// A write (a response, an SSE event) that the client does not take for this long closes
    /// the connection; the answer goes on into the conversation (default 30 s).
    pub write_stall_timeout: Duration,
}

impl Default for PanelConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 * 1024,
            max_uri_bytes: 8 * 1024,
            max_text_chars: 4000,
            max_image_bytes: 5 * 1024 * 1024,
            max_concurrent_turns: 32,
            queue_timeout: Duration::from_secs(30),
            turn_timeout: Duration::from_secs(120),
            turn_lease: Duration::from_secs(30),
            follow_poll: Duration::from_millis(250),
            max_sessions: 10_000,
            max_entries: 500,
            max_history_messages: 64,
            context_budget: 8000,
            history: HistoryStore::Sqlite(HistoryStore::default_path()),
            broker: None,
            broker_ack_wait: Duration::from_secs(10),
            broker_credentials: None,
            broker_tls_ca: None,
            broker_tls_client: None,
            broker_inbox_prefix: None,
            bus_memory_max_age: Duration::from_secs(7 * 24 * 3600),
            bus_memory_max_ids: 1000,
            env_problem: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            authenticator: std::sync::Arc::new(crate::identity::NoAuth),
            login: None,
            max_connections: 512,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_stall_timeout: Duration::from_secs(30),
        }
    }
}

impl PanelConfig {
    /// The defaults, with the stores the environment names: `DATABASE_URL` (PostgreSQL keeps
    /// the conversations) and `NATS_URL` (NATS JetStream carries the bus). With neither set,
    /// everything runs embedded as in [`PanelConfig::default`]: SQLite and the in-process bus.
    /// Several workers serving the same conversations need `DATABASE_URL` (see `docs/workers.md`).
    /// `NATS_CREDS`, `NATS_TLS_CA`, `NATS_TLS_CERT` with `NATS_TLS_KEY`, and `NATS_INBOX_PREFIX`
    /// set the broker's credentials file, root certificate, this worker's client certificate and
    /// reply prefix (`docs/bus.md`, "Broker users and permissions").
    /// `NATS_ACK_WAIT_MS` sets [`broker_ack_wait`](Self::broker_ack_wait); a value that is not
    /// a whole number of milliseconds from 100 up is [`PanelError::Setting`] from
    /// [`bus`](Self::bus), at start.
    ///
    /// ```
    /// let config = toolwright_chat_panel::PanelConfig::from_env();
    /// assert_eq!(config.history.is_shared(), std::env::var("DATABASE_URL").is_ok_and(|u| !u.trim().is_empty()));
    /// ```
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) over any source of variables (tests).
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let broker = var(NATS_URL).filter(|u| !u.trim().is_empty());
        let history = match var(DATABASE_URL) {
            Some(url) if !url.trim().is_empty() => HistoryStore::Postgres(url),
            _ => HistoryStore::Sqlite(HistoryStore::default_path()),
        };
        let set = |name| var(name).filter(|v: &String| !v.trim().is_empty());
        let mut config = Self {
            history,
            broker,
            broker_credentials: set(NATS_CREDS).map(PathBuf::from),
            broker_tls_ca: set(NATS_TLS_CA).map(PathBuf::from),
            broker_inbox_prefix: set(NATS_INBOX_PREFIX),
            ..Self::default()
        };
        match (set(NATS_TLS_CERT), set(NATS_TLS_KEY)) {
            (Some(cert), Some(key)) => {
                config.broker_tls_client = Some((PathBuf::from(cert), PathBuf::from(key)));
            }
            (None, None) => {}
            (Some(value), None) => {
                config.env_problem = Some((
                    NATS_TLS_CERT,
                    value,
                    "NATS_TLS_KEY must name the certificate's private key too",
                ));
            }
            (None, Some(value)) => {
                config.env_problem = Some((
                    NATS_TLS_KEY,
                    value,
                    "NATS_TLS_CERT must name the key's certificate too",
                ));
            }
        }
        if let Some(v) = var(NATS_ACK_WAIT_MS).filter(|v| !v.trim().is_empty()) {
            match v.trim().parse::<u64>() {
                Ok(ms) if ms >= 100 => config.broker_ack_wait = Duration::from_millis(ms),
                _ => {
                    config.env_problem = Some((
                        NATS_ACK_WAIT_MS,
                        v,
                        "it must be a whole number of milliseconds, at least 100",
                    ));
                }
            }
        }
        config
    }

    /// The bus [`broker`](Self::broker) names: NATS JetStream when set (connected and checked
    /// now), else a new in-process bus.
    ///
    /// # Errors
    /// [`PanelError::Broker`] when the broker cannot be reached or set up;
    /// [`PanelError::Setting`] when `NATS_ACK_WAIT_MS` ([`from_env`](Self::from_env)) could not
    /// be used.
    pub async fn bus(&self) -> Result<MessageBus, PanelError> {
        if let Some((name, value, expected)) = &self.env_problem {
            return Err(PanelError::Setting {
                name,
                value: value.clone(),
                expected,
            });
        }
        match &self.broker {
            None => Ok(MessageBus::new()),
            #[cfg(not(feature = "nats"))]
            Some(_) => Err(PanelError::FeatureOff {
                feature: "nats",
                what: "a bus over NATS (NATS_URL)",
                instead: "unset NATS_URL to run with the in-process bus",
            }),
            #[cfg(feature = "nats")]
            Some(url) => {
                let mut nats = NatsConfig::new(url.clone()).ack_wait(self.broker_ack_wait);
                if let Some(file) = &self.broker_credentials {
                    nats = nats.credentials(file);
                }
                if let Some(file) = &self.broker_tls_ca {
                    nats = nats.tls_ca(file);
                }
                if let Some((cert, key)) = &self.broker_tls_client {
                    nats = nats.tls_client(cert, key);
                }
                if let Some(prefix) = &self.broker_inbox_prefix {
                    nats = nats.inbox_prefix(prefix);
                }
                let shown = nats.redacted_url();
                MessageBus::connect_nats_with(nats)
                    .await
                    .map_err(|source| PanelError::Broker { url: shown, source })
            }
        }
    }

    /// Keeps conversations in the PostgreSQL database at `url` (shared by several workers).
    pub fn with_database_url(mut self, url: impl Into<String>) -> Self {
        self.history = HistoryStore::Postgres(url.into());
        self
    }
    /// Carries the bus over the NATS server at `url` ([`bus`](Self::bus)).
    pub fn with_broker_url(mut self, url: impl Into<String>) -> Self {
        self.broker = Some(url.into());
        self
    }
    /// Sets how long and how many bus message ids a conversation remembers
    /// ([`bus_memory_max_age`](Self::bus_memory_max_age),
    /// [`bus_memory_max_ids`](Self::bus_memory_max_ids); at least one id).
    pub fn with_bus_memory(mut self, max_age: Duration, max_ids: usize) -> Self {
        self.bus_memory_max_age = max_age;
        self.bus_memory_max_ids = max_ids.max(1);
        self
    }
    /// Sets [`broker_ack_wait`](Self::broker_ack_wait) (at least 100 ms).
    pub fn with_broker_ack_wait(mut self, d: Duration) -> Self {
        self.broker_ack_wait = d.max(Duration::from_millis(100));
        self
    }
    /// Sets the answer time limit.
    pub fn with_turn_timeout(mut self, d: Duration) -> Self {
        self.turn_timeout = d;
        self
    }
    /// Sets how long a claim on a running answer lasts unless renewed (at least 300 ms).
    pub fn with_turn_lease(mut self, d: Duration) -> Self {
        self.turn_lease = d.max(Duration::from_millis(300));
        self
    }
    /// Sets how often an events stream looks for other workers' rows (at least 10 ms).
    pub fn with_follow_poll(mut self, d: Duration) -> Self {
        self.follow_poll = d.max(Duration::from_millis(10));
        self
    }
    /// Sets how many answers run at once.
    pub fn with_max_concurrent_turns(mut self, n: usize) -> Self {
        self.max_concurrent_turns = n;
        self
    }
    /// Sets the request body limit.
    pub fn with_max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n;
        self
    }
    /// Sets the largest attachment (picture, sound or file) a person may attach, in bytes
    /// (`0`: attaching is off).
    pub fn with_max_image_bytes(mut self, n: usize) -> Self {
        self.max_image_bytes = n;
        self
    }
    /// Keeps conversations in the SQLite file at `path`.
    pub fn with_history_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.history = HistoryStore::Sqlite(path.into());
        self
    }
    /// Keeps conversations in memory only (lost at exit).
    pub fn with_memory_history(mut self) -> Self {
        self.history = HistoryStore::Memory;
        self
    }
    /// Accepts `host` (a `Host` header value, e.g. `chat.example.com`) too.
    pub fn with_allowed_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }
    /// Authenticates every `/api/` request with `auth` ([`crate::identity`]): a
    /// [`JwtBearer`](crate::identity::JwtBearer) or a
    /// [`TrustedProxyHeader`](crate::identity::TrustedProxyHeader) lets the panel listen on
    /// an address other than loopback.
    pub fn with_authenticator(mut self, auth: impl crate::identity::Authenticator) -> Self {
        self.authenticator = std::sync::Arc::new(auth);
        self
    }
    /// Signs people in through their OIDC provider in the browser ([`crate::login`]): serves
    /// `/login`, `/callback` and `/logout`, and authenticates every `/api/` request by its
    /// session cookie (or an ID token as `Authorization: Bearer`, for API clients). Replaces
    /// the authenticator.
    pub fn with_oidc_login(mut self, login: crate::login::OidcLogin) -> Self {
        let login = std::sync::Arc::new(login);
        self.authenticator = login.clone();
        self.login = Some(login);
        self
    }
    /// Accepts requests from `origin` (e.g. `https://chat.example.com`) too.
    pub fn with_allowed_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }
    /// Sets the cap on open connections.
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }
    /// Sets the keep-alive idle timeout.
    pub fn with_idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = d;
        self
    }
    /// Sets the header read timeout.
    pub fn with_header_read_timeout(mut self, d: Duration) -> Self {
        self.header_read_timeout = d;
        self
    }
    /// Sets the body read timeout.
    pub fn with_body_read_timeout(mut self, d: Duration) -> Self {
        self.body_read_timeout = d;
        self
    }
    /// Sets the write stall timeout.
    pub fn with_write_stall_timeout(mut self, d: Duration) -> Self {
        self.write_stall_timeout = d;
        self
    }
    /// Sets the token budget of each model request.
    pub fn with_context_budget(mut self, tokens: usize) -> Self {
        self.context_budget = tokens;
        self
    }
    /// Sets how many messages are stored per conversation.
    pub fn with_max_history_messages(mut self, n: usize) -> Self {
        self.max_history_messages = n;
        self
    }
    /// Sets how many conversations are kept.
    pub fn with_max_sessions(mut self, n: usize) -> Self {
        self.max_sessions = n;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        |name| {
            list.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[tokio::test]
    async fn a_client_certificate_without_its_key_is_a_setting_error_at_start() {
        const CERT_ONLY: [(&str, &str); 2] = [
            (NATS_URL, "tls://127.0.0.1:1"),
            (NATS_TLS_CERT, "/etc/nats/half.pem"),
        ];
        const KEY_ONLY: [(&str, &str); 2] = [
            (NATS_URL, "tls://127.0.0.1:1"),
            (NATS_TLS_KEY, "/etc/nats/half.key"),
        ];
        for (list, set, other) in [
            (&CERT_ONLY, NATS_TLS_CERT, NATS_TLS_KEY),
            (&KEY_ONLY, NATS_TLS_KEY, NATS_TLS_CERT),
        ] {
            let c = PanelConfig::from_vars(vars(list));
            let Err(e) = c.bus().await else {
                panic!("connected with half a client certificate")
            };
            assert!(
                matches!(&e, PanelError::Setting { name, .. } if *name == set),
                "{e:?}"
            );
            assert!(e.to_string().contains(other), "{e}");
        }
    }

    #[tokio::test]
    async fn broker_credentials_come_from_the_environment_and_no_error_shows_the_password() {
        let c = PanelConfig::from_vars(vars(&[
            (NATS_URL, "nats://worker:hunter2@127.0.0.1:1"),
            (NATS_CREDS, "/etc/nats/worker.creds"),
            (NATS_TLS_CA, "/etc/nats/ca.pem"),
            (NATS_TLS_CERT, "/etc/nats/worker.pem"),
            (NATS_TLS_KEY, "/etc/nats/worker.key"),
            (NATS_INBOX_PREFIX, "_INBOX_worker"),
        ]));
        assert_eq!(
            c.broker_tls_client,
            Some(("/etc/nats/worker.pem".into(), "/etc/nats/worker.key".into()))
        );
        assert_eq!(
            c.broker_credentials.as_deref(),
            Some(std::path::Path::new("/etc/nats/worker.creds"))
        );
        assert_eq!(
            c.broker_tls_ca.as_deref(),
            Some(std::path::Path::new("/etc/nats/ca.pem"))
        );
        assert_eq!(c.broker_inbox_prefix.as_deref(), Some("_INBOX_worker"));
        // the credentials file is read first: it does not exist here
        let Err(e) = c.bus().await else {
            panic!("connected to nothing")
        };
        assert!(
            matches!(
                &e,
                PanelError::Broker {
                    source: BusError::Credentials { .. },
                    ..
                }
            ),
            "{e:?}"
        );
        let c = PanelConfig::from_vars(vars(&[(NATS_URL, "nats://worker:hunter2@127.0.0.1:1")]));
        let Err(e) = c.bus().await else {
            panic!("connected to nothing")
        };
        let shown = e.to_string();
        assert!(
            !shown.contains("hunter2") && shown.contains("nats://worker:***@127.0.0.1:1"),
            "{shown}"
        );
        assert!(!format!("{e:?}").contains("hunter2"), "{e:?}");
    }

    #[tokio::test]
    async fn workers_the_brokers_ack_wait_is_set_from_the_environment_or_refused_at_start() {
        assert_eq!(
            PanelConfig::from_vars(vars(&[])).broker_ack_wait,
            Duration::from_secs(10)
        );
        let c = PanelConfig::from_vars(vars(&[(NATS_ACK_WAIT_MS, "2500")]));
        assert_eq!(c.broker_ack_wait, Duration::from_millis(2500));
        assert!(c.bus().await.is_ok(), "no broker: the in-process bus");
        for bad in ["2s", "-1", "50"] {
            let list: &'static [(&'static str, &'static str)] =
                Box::leak(vec![(NATS_ACK_WAIT_MS, bad)].into_boxed_slice());
            let c = PanelConfig::from_vars(vars(list));
            let Err(e) = c.bus().await else {
                panic!("{bad} accepted")
            };
            assert!(
                matches!(&e, PanelError::Setting { name, value, .. } if *name == NATS_ACK_WAIT_MS && value == bad),
                "{e}"
            );
            assert!(e.to_string().contains("at least 100"), "{e}");
        }
        assert_eq!(
            PanelConfig::default()
                .with_broker_ack_wait(Duration::from_millis(1))
                .broker_ack_wait,
            Duration::from_millis(100)
        );
    }
}
