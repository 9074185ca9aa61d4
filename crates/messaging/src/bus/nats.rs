//! The bus across processes on NATS JetStream (cargo feature `nats`; `docs/bus.md`).
//!
//! One JetStream stream holds every message until its recipient takes it (work-queue
//! retention: a message leaves the stream when its recipient acknowledges it). A message for
//! recipient `R` goes to subject `STREAM.to.F.H(R)` (`F`: `R`'s family, the part before its
//! first ':' when valid, else `_`; `H`: 128 bits of SHA-256, so any recipient id makes a valid
//! subject), with the message id in `Nats-Msg-Id` (the broker stores a repeat within its
//! duplicate window once). Each recipient has one durable pull consumer filtered to its subject
//! — or a family has one, `group-F`, filtered to `STREAM.to.F.*`, shared by every group
//! subscription of `F` — with at most **one** unacknowledged message: so messages come in
//! stream order even across redeliveries, restarts and processes. A message is acknowledged when
//! it is confirmed: as [`Subscription::recv`](crate::Subscription::recv) / `try_recv` hand it
//! out, or by [`Received::confirm`](crate::Received::confirm) after
//! [`Subscription::recv_unconfirmed`](crate::Subscription::recv_unconfirmed) — until then the
//! pump tells the broker every `ack_wait / 3` that it is in hand (`+WPI`), and a [`Received`](crate::Received)
//! dropped unconfirmed is given back at once (`-NAK`). One confirmed whose acknowledgement did not
//! reach the broker comes again and is dropped by its id.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_nats::ConnectErrorKind;
use async_nats::connection::State;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::consumer::pull::MessagesErrorKind;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::{Context, ContextBuilder, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::ConsumerErrorKind;
use async_nats::jetstream::stream::{self, DiscardPolicy, RetentionPolicy, StorageType};
use async_nats::jetstream::{AckKind, Message};
use futures::StreamExt;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, broadcast, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::{
    Backend, BusError, BusMessage, Delivery, Inbox, MessageBus, OutgoingMessage, Poll, Settle,
    family_of,
};

/// Where and how the bus meets NATS. `NatsConfig::new(url)` has defaults fit for a chat
/// service; the stream is created on first connect with them (an existing one is used as is).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NatsConfig {
    /// The broker, e.g. `nats://127.0.0.1:4222`.
    pub url: String,
    /// The JetStream stream's name (`A-Z a-z 0-9 _ -`, 1 to 64); also the subjects' first
    /// token. Default `LLMTK_BUS`.
    pub stream: String,
    /// How long the broker remembers a message id to store a repeat once. Default 2 minutes.
    pub duplicate_window: Duration,
    /// How long an untaken message is kept for its recipient. Default 7 days.
    pub max_age: Duration,
    /// How long the broker waits for a taken message's acknowledgement before it sends the
    /// message again (a process that died holding it). Default 10 s.
    pub ack_wait: Duration,
    /// How long `connect` and `send` wait for the broker before a typed error. Default 5 s.
    pub timeout: Duration,
    /// A file of credentials for the broker (`NATS_CREDS`): a `.creds` file as `nsc` writes it
    /// (user JWT and NKey seed), or a file holding only a user NKey seed (`SU…`). Default none.
    /// A user and password or a token go in [`url`](Self::url) instead:
    /// `nats://USER:PASSWORD@HOST:PORT`, `nats://TOKEN@HOST:PORT`.
    pub credentials: Option<PathBuf>,
    /// A root certificate (PEM) to trust for the broker's TLS certificate besides the
    /// system's (`NATS_TLS_CA`). Setting it requires TLS, as a `tls://` URL does. Default none.
    pub tls_ca: Option<PathBuf>,
    /// The subject prefix of this client's reply subjects (`_INBOX` by default). Give each
    /// broker user its own (`_INBOX_worker`) and allow it only that one, so no user can read
    /// the replies — the messages handed out — of another (see `docs/bus.md`).
    pub inbox_prefix: String,
}

impl NatsConfig {
    /// Defaults (see the fields) for the broker at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            stream: "LLMTK_BUS".into(),
            duplicate_window: Duration::from_secs(120),
            max_age: Duration::from_secs(7 * 24 * 3600),
            ack_wait: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            credentials: None,
            tls_ca: None,
            inbox_prefix: "_INBOX".into(),
        }
    }
    /// Sets [`NatsConfig::stream`].
    pub fn stream(mut self, name: impl Into<String>) -> Self {
        self.stream = name.into();
        self
    }
    /// Sets [`NatsConfig::duplicate_window`].
    pub fn duplicate_window(mut self, d: Duration) -> Self {
        self.duplicate_window = d;
        self
    }
    /// Sets [`NatsConfig::max_age`].
    pub fn max_age(mut self, d: Duration) -> Self {
        self.max_age = d;
        self
    }
    /// Sets [`NatsConfig::ack_wait`].
    pub fn ack_wait(mut self, d: Duration) -> Self {
        self.ack_wait = d;
        self
    }
    /// Sets [`NatsConfig::timeout`].
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }
    /// Sets [`NatsConfig::credentials`].
    pub fn credentials(mut self, file: impl Into<PathBuf>) -> Self {
        self.credentials = Some(file.into());
        self
    }
    /// Sets [`NatsConfig::tls_ca`].
    pub fn tls_ca(mut self, file: impl Into<PathBuf>) -> Self {
        self.tls_ca = Some(file.into());
        self
    }
    /// Sets [`NatsConfig::inbox_prefix`].
    pub fn inbox_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.inbox_prefix = prefix.into();
        self
    }
    /// [`url`](Self::url) as it may be shown (in errors and logs): any password or token
    /// replaced by `***`.
    pub fn redacted_url(&self) -> String {
        split_url(&self.url)
            .map_or_else(|_| "(a broker URL that does not parse)".into(), |e| e.shown)
    }
}

/// A broker URL taken apart: what to connect to, what to show, and who to be.
struct Endpoint {
    /// The servers, without user information.
    connect_to: Vec<String>,
    /// The URL with secrets replaced by `***`.
    shown: String,
    /// `(user, password)`, or `(token, None)`.
    login: Option<(String, Option<String>)>,
    /// Some server's URL says `tls://`.
    tls: bool,
}

/// Takes the user and password or token out of `url` (a comma-separated list of servers, each
/// `[nats|tls]://[USER:PASSWORD@|TOKEN@]HOST[:PORT]` or `HOST[:PORT]`), since the NATS client
/// reads them only from its options; they are percent-decoded.
fn split_url(url: &str) -> Result<Endpoint, String> {
    let mut e = Endpoint {
        connect_to: Vec::new(),
        shown: String::new(),
        login: None,
        tls: false,
    };
    let mut shown = Vec::new();
    for one in url.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let full = if one.contains("://") {
            one.to_owned()
        } else {
            format!("nats://{one}")
        };
        let mut u = url::Url::parse(&full).map_err(|err| format!("{err}"))?;
        e.tls |= u.scheme() == "tls";
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let login = match (u.username(), u.password()) {
            ("", None) => None,
            (user, Some(pass)) => Some((decode(user), Some(decode(pass)))),
            (token, None) => Some((decode(token), None)),
        };
        let _ = u.set_password(None);
        let _ = u.set_username("");
        e.connect_to
            .push(u.to_string().trim_end_matches('/').to_owned());
        let mut s = u.clone();
        match &login {
            Some((user, Some(_))) => {
                let _ = s.set_username(user);
                let _ = s.set_password(Some("***"));
            }
            Some((_, None)) => {
                let _ = s.set_username("***");
            }
            None => {}
        }
        shown.push(s.to_string().trim_end_matches('/').to_owned());
        if let Some(l) = login {
            match &e.login {
                Some(other) if *other != l => {
                    return Err("the servers in it name different users; give one".into());
                }
                _ => e.login = Some(l),
            }
        }
    }
    if e.connect_to.is_empty() {
        return Err("it names no server".into());
    }
    e.shown = shown.join(",");
    Ok(e)
}

/// Largest message the stream takes (a `send_message` text is at most 8000 characters).
const MAX_MESSAGE_BYTES: i32 = 256 * 1024;
/// A pull request waits this long for a message before the next one is sent.
const PULL_EXPIRES: Duration = Duration::from_secs(10);
/// The broker's idle heartbeat on a waiting pull request; two missed mean it is gone.
const PULL_HEARTBEAT: Duration = Duration::from_secs(2);
/// Pauses between attempts to reach the broker again from a subscription.
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// Pause between attempts of a subscription the broker refused for an overlapping consumer.
const RETRY_CONFLICT: Duration = Duration::from_secs(5);

impl MessageBus {
    /// A bus across processes on the NATS JetStream broker at `url`, with [`NatsConfig`]'s
    /// defaults. Fails with [`BusError::BrokerUnavailable`] when the broker cannot be reached
    /// or has no JetStream, and [`BusError::Broker`] when it refuses the stream.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), messaging::BusError> {
    /// use messaging::{MessageBus, OutgoingMessage};
    /// // process A
    /// let bus = MessageBus::connect_nats("nats://127.0.0.1:4222").await?;
    /// let m = OutgoingMessage::new("agent", "user:s1", "Deploy now?");
    /// if let Err(e) = bus.send(m.clone()).await {
    ///     eprintln!("{e}"); // says what to do; sending `m` again later delivers it once
    /// }
    /// // process B, started before or after A sent
    /// let bus = MessageBus::connect_nats("nats://127.0.0.1:4222").await?;
    /// let mut inbox = bus.subscribe("user:s1");
    /// let got = inbox.recv().await;
    /// # let _ = got; Ok(()) }
    /// ```
    pub async fn connect_nats(url: &str) -> Result<Self, BusError> {
        Self::connect_nats_with(NatsConfig::new(url)).await
    }

    /// [`MessageBus::connect_nats`] with settings.
    pub async fn connect_nats_with(config: NatsConfig) -> Result<Self, BusError> {
        Ok(Self::from_backend(Arc::new(Nats::connect(config).await?)))
    }
}

/// `options` with the credentials in `path`: a `.creds` file (user JWT and NKey seed) or a
/// user NKey seed alone.
async fn with_credentials(
    options: async_nats::ConnectOptions,
    path: &std::path::Path,
) -> Result<async_nats::ConnectOptions, BusError> {
    let bad = |reason: String| BusError::Credentials {
        path: path.to_owned(),
        reason,
    };
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| bad(format!("reading it: {e}")))?;
    let seed = text.trim();
    if seed.starts_with("SU") && !seed.contains(char::is_whitespace) {
        // checked when connecting: a seed that is not one is `Unauthorized` then
        return Ok(options.nkey(seed.to_owned()));
    }
    if seed.starts_with('S') && !seed.contains(char::is_whitespace) {
        return Err(bad(
            "it holds an NKey seed that is not a user's (SU…): give the user's seed".into(),
        ));
    }
    options
        .credentials(&text)
        .map_err(|e| bad(format!("not a .creds file: {e}")))
}

/// This process's subscriptions: recipient → (generation, shared state).
type Subscribed = Arc<Mutex<HashMap<String, (u64, Arc<Shared>)>>>;
/// This process's group subscriptions: family → how many.
type Groups = Arc<Mutex<HashMap<String, usize>>>;

struct Nats {
    url: String,
    /// The broker's refusals of this user's subjects, as they come.
    violations: broadcast::Sender<String>,
    client: async_nats::Client,
    js: Context,
    stream: String,
    ack_wait: Duration,
    runtime: tokio::runtime::Handle,
    connected: watch::Receiver<u64>,
    local: Subscribed,
    groups: Groups,
    next_generation: AtomicU64,
}

fn valid_stream_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The subject token of a recipient's family: the family, or `_` for a recipient without one.
fn family_token(recipient: &str) -> &str {
    family_of(recipient).unwrap_or("_")
}

/// The subject token of a recipient: 128 bits of SHA-256 in hex.
fn recipient_token(recipient: &str) -> String {
    let digest = Sha256::digest(recipient.as_bytes());
    digest.iter().take(16).fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// What goes over the wire: the message without its number (the stream sequence is that).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    msg_id: &'a str,
    from: &'a str,
    to: &'a str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    quick_replies: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    in_reply_to: Option<u64>,
}

/// Reads a stored message back as message number `seq`, with the bus's payload rules.
fn decode(seq: u64, payload: &[u8]) -> Result<BusMessage, BusError> {
    let mut v: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| BusError::BadPayload(e.to_string()))?;
    let Some(obj) = v.as_object_mut() else {
        return Err(BusError::BadPayload("not a JSON object".into()));
    };
    obj.insert("id".into(), seq.into());
    BusMessage::from_payload(&v)
}

impl Nats {
    async fn connect(config: NatsConfig) -> Result<Self, BusError> {
        ensure_crypto_provider();
        let endpoint = split_url(&config.url).map_err(|reason| BusError::BrokerUnavailable {
            url: "(the broker URL given)".into(),
            reason: format!("the broker URL does not parse: {reason}"),
        })?;
        let url = endpoint.shown.clone();
        let unavailable = |reason: String| BusError::BrokerUnavailable {
            url: url.clone(),
            reason,
        };
        if !valid_stream_name(&config.stream) {
            return Err(BusError::Broker {
                url: url.clone(),
                reason: format!(
                    "stream name {:?} is not allowed: use 1 to 64 of A-Z a-z 0-9 _ -",
                    config.stream
                ),
            });
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| unavailable(format!("no Tokio runtime: {e}")))?;
        // counts (re)connections: a pull request waiting on a connection that broke is lost
        // with it, so each subscription asks again as soon as the client is back
        let (connects, connected) = watch::channel(0u64);
        // what the broker refused this user (`Permissions Violation for Publish to "…"`): a
        // refused publish or JetStream request is otherwise only a timeout
        let (violations, _) = broadcast::channel::<String>(64);
        let refused = violations.clone();
        let mut options = async_nats::ConnectOptions::new();
        if let Some(path) = &config.credentials {
            options = with_credentials(options, path).await?;
        }
        match &endpoint.login {
            Some((user, Some(pass))) => {
                options = options.user_and_password(user.clone(), pass.clone());
            }
            Some((token, None)) => options = options.token(token.clone()),
            None => {}
        }
        if let Some(ca) = &config.tls_ca {
            if !ca.is_file() {
                return Err(unavailable(format!(
                    "the TLS root certificate {} (NATS_TLS_CA) is not a readable file",
                    ca.display()
                )));
            }
            options = options.add_root_certificates(ca.clone());
        }
        let client = options
            .require_tls(endpoint.tls || config.tls_ca.is_some())
            .custom_inbox_prefix(&config.inbox_prefix)
            .name("llm-toolkit messaging")
            .event_callback(move |event| {
                match &event {
                    async_nats::Event::Connected => connects.send_modify(|n| *n += 1),
                    async_nats::Event::ServerError(async_nats::ServerError::Other(e))
                        if e.to_ascii_lowercase().contains("permissions violation") =>
                    {
                        tracing::warn!(error = %e, "bus: the broker refused this user a subject");
                        let _ = refused.send(e.clone());
                    }
                    _ => {}
                }
                async {}
            })
            .connection_timeout(config.timeout)
            .request_timeout(Some(config.timeout))
            // a broker that restarts is found again within a second
            .reconnect_delay_callback(|attempt| {
                Duration::from_millis(50 * (attempt as u64).min(20))
            })
            .connect(endpoint.connect_to.as_slice())
            .await
            .map_err(|e| match e.kind() {
                ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                    BusError::Unauthorized {
                        url: url.clone(),
                        reason: e.to_string(),
                    }
                }
                // rustls' verdict on the broker's certificate comes as an IO error
                kind if kind == ConnectErrorKind::Tls || e.to_string().contains("certificate") => {
                    unavailable(format!(
                        "TLS: {e}; check that the broker's certificate is signed by a root the \
                     system trusts or the one in NATS_TLS_CA, and that the broker offers TLS"
                    ))
                }
                _ => unavailable(e.to_string()),
            })?;
        let mut seen_violations = violations.subscribe();
        let js = ContextBuilder::new()
            .timeout(config.timeout)
            .build(client.clone());
        let wanted = stream::Config {
            name: config.stream.clone(),
            subjects: vec![format!("{}.to.>", config.stream)],
            retention: RetentionPolicy::WorkQueue,
            storage: StorageType::File,
            discard: DiscardPolicy::New,
            max_age: config.max_age,
            duplicate_window: config.duplicate_window,
            max_message_size: MAX_MESSAGE_BYTES,
            ..Default::default()
        };
        let mut s = js.get_or_create_stream(wanted.clone()).await.map_err(|e| {
            let reason = format!("creating stream {}: {e}", config.stream);
            if let Ok(v) = seen_violations.try_recv() {
                BusError::PermissionDenied {
                    url: url.clone(),
                    reason: format!("{v} ({reason})"),
                }
            } else if client.connection_state() == State::Connected {
                BusError::Broker {
                    url: url.clone(),
                    reason: format!("{reason} (is JetStream on? start nats-server with -js)"),
                }
            } else {
                unavailable(reason)
            }
        })?;
        let mut info = s
            .info()
            .await
            .map_err(|e| unavailable(e.to_string()))?
            .clone();
        if info.config.subjects == [format!("{}.to.*", config.stream)]
            && info.config.retention == RetentionPolicy::WorkQueue
        {
            // made by the previous version (one subject token per recipient): widen it in place
            // to take `STREAM.to.FAMILY.TOKEN` too (a superset)
            let mut widened = info.config.clone();
            widened.subjects.clone_from(&wanted.subjects);
            info = js
                .update_stream(&widened)
                .await
                .map_err(|e| BusError::Broker {
                    url: url.clone(),
                    reason: format!(
                        "updating stream {} from subjects {:?} to {:?}: {e}",
                        config.stream, info.config.subjects, wanted.subjects
                    ),
                })?;
            tracing::info!(stream = %config.stream, subjects = ?wanted.subjects, "bus: stream of the previous version widened in place");
        }
        if info.config.subjects != wanted.subjects
            || info.config.retention != RetentionPolicy::WorkQueue
        {
            return Err(BusError::Broker {
                url,
                reason: format!(
                    "stream {} exists with subjects {:?} and {:?} retention; the bus needs {:?} \
                     and work-queue retention: choose another stream name",
                    config.stream, info.config.subjects, info.config.retention, wanted.subjects
                ),
            });
        }
        Ok(Self {
            url,
            violations,
            client,
            js,
            stream: config.stream,
            ack_wait: config.ack_wait,
            runtime,
            connected,
            local: Arc::new(Mutex::new(HashMap::new())),
            groups: Arc::new(Mutex::new(HashMap::new())),
            next_generation: AtomicU64::new(1),
        })
    }

    fn subject(&self, recipient: &str) -> String {
        format!(
            "{}.to.{}.{}",
            self.stream,
            family_token(recipient),
            recipient_token(recipient)
        )
    }

    fn new_shared() -> Arc<Shared> {
        Arc::new(Shared {
            slot: Mutex::new(Slot::default()),
            arrived: Notify::new(),
            closed: CancellationToken::new(),
        })
    }

    /// Starts the task that moves messages for `target` from consumer `durable` (filtered to
    /// `filter`) into `shared`.
    fn start_pump(&self, shared: Arc<Shared>, target: Target, durable: String, filter: String) {
        let pump = Pump {
            shared,
            js: self.js.clone(),
            url: self.url.clone(),
            stream: self.stream.clone(),
            target,
            consumer: pull::Config {
                durable_name: Some(durable),
                filter_subject: filter,
                ack_policy: AckPolicy::Explicit,
                deliver_policy: DeliverPolicy::All,
                ack_wait: self.ack_wait,
                max_ack_pending: 1,
                ..Default::default()
            },
            ack_wait: self.ack_wait,
            connected: self.connected.clone(),
            violations: self.violations.clone(),
        };
        self.runtime.spawn(pump.run());
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[async_trait::async_trait]
impl Backend for Nats {
    async fn send(&self, m: OutgoingMessage) -> Result<Delivery, BusError> {
        let payload = serde_json::to_vec(&Wire {
            msg_id: &m.msg_id,
            from: &m.from,
            to: &m.to,
            text: &m.text,
            quick_replies: m.quick_replies.as_ref().map(|q| q.as_slice()),
            in_reply_to: m.in_reply_to,
        })
        .map_err(|e| BusError::BadPayload(e.to_string()))?;
        // Not connected: refuse now rather than queue it in the client, where it could reach
        // the broker after this call reported failure.
        if self.client.connection_state() != State::Connected {
            return Err(BusError::BrokerUnavailable {
                url: self.url.clone(),
                reason: "not connected (reconnecting)".into(),
            });
        }
        let publish = PublishMessage::build()
            .payload(payload.into())
            .message_id(&m.msg_id);
        let subject = self.subject(&m.to);
        let mut refusals = self.violations.subscribe();
        let pending = self
            .js
            .send_publish(subject.clone(), publish)
            .await
            .map_err(|e| match e.kind() {
                PublishErrorKind::MaxPayloadExceeded => BusError::Broker {
                    url: self.url.clone(),
                    reason: format!("message too large: {e}"),
                },
                _ => BusError::BrokerUnavailable {
                    url: self.url.clone(),
                    reason: e.to_string(),
                },
            })?;
        let quoted = format!("\"{subject}\"");
        let refused = async {
            loop {
                match refusals.recv().await {
                    Ok(v) if v.contains(&quoted) => return v,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        };
        let ack = tokio::select! {
            ack = pending => ack,
            v = refused => return Err(BusError::PermissionDenied {
                url: self.url.clone(),
                reason: format!("{v}, the subject of recipient {:?}; the message was not stored", m.to),
            }),
        };
        let ack = ack.map_err(|e| match e.kind() {
            PublishErrorKind::StreamNotFound => BusError::Broker {
                url: self.url.clone(),
                reason: format!(
                    "stream {} is gone (deleted on the broker?): connect the bus again to create it",
                    self.stream
                ),
            },
            _ => BusError::NotConfirmed {
                url: self.url.clone(),
                reason: e.to_string(),
            },
        })?;
        Ok(Delivery {
            id: ack.sequence,
            dropped_oldest: false,
            duplicate: ack.duplicate,
        })
    }

    fn subscribe(&self, recipient: &str) -> Box<dyn Inbox> {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let shared = Self::new_shared();
        if let Some((_, old)) =
            lock(&self.local).insert(recipient.to_owned(), (generation, shared.clone()))
        {
            old.close();
        }
        let family = family_token(recipient);
        let token = recipient_token(recipient);
        self.start_pump(
            shared.clone(),
            Target::Recipient(recipient.to_owned()),
            format!("to-{family}-{token}"),
            self.subject(recipient),
        );
        Box::new(NatsInbox {
            shared,
            url: self.url.clone(),
            registration: Registration::Recipient {
                local: self.local.clone(),
                recipient: recipient.to_owned(),
                generation,
            },
        })
    }

    fn subscribe_group(&self, family: &str) -> Box<dyn Inbox> {
        let shared = Self::new_shared();
        *lock(&self.groups).entry(family.to_owned()).or_default() += 1;
        self.start_pump(
            shared.clone(),
            Target::Family(family.to_owned()),
            group_consumer(family),
            format!("{}.to.{family}.*", self.stream),
        );
        Box::new(NatsInbox {
            shared,
            url: self.url.clone(),
            registration: Registration::Group {
                groups: self.groups.clone(),
                family: family.to_owned(),
            },
        })
    }

    fn is_subscribed(&self, recipient: &str) -> bool {
        lock(&self.local).contains_key(recipient)
            || family_of(recipient).is_some_and(|f| lock(&self.groups).contains_key(f))
    }

    fn describe(&self) -> String {
        format!(
            "NATS JetStream at {} (stream {}, {:?})",
            self.url,
            self.stream,
            self.client.connection_state()
        )
    }

    fn capacity(&self) -> usize {
        1
    }
}

/// What a subscription and its pump share.
struct Shared {
    slot: Mutex<Slot>,
    /// The pump put a message in the slot (or the subscription closed).
    arrived: Notify,
    closed: CancellationToken,
}

#[derive(Default)]
struct Slot {
    /// A message not handed out yet, with the way to tell the pump what became of it.
    held: Option<(BusMessage, oneshot::Sender<Verdict>)>,
    problem: Option<BusError>,
}

/// What became of a message handed out (a dropped sender: given back).
enum Verdict {
    /// Dealt with: acknowledge it, and say how that went if someone waits.
    Confirm(Option<oneshot::Sender<Result<(), BusError>>>),
    GiveBack,
}

/// Settles one message handed out by a NATS subscription through its pump.
struct NatsSettle {
    verdict: oneshot::Sender<Verdict>,
    url: String,
    msg_id: String,
}

#[async_trait::async_trait]
impl Settle for NatsSettle {
    async fn confirm(self: Box<Self>) -> Result<(), BusError> {
        let lost = |reason: &str| BusError::ConfirmationLost {
            url: self.url.clone(),
            msg_id: self.msg_id.clone(),
            reason: reason.to_owned(),
        };
        let (tx, rx) = oneshot::channel();
        if self.verdict.send(Verdict::Confirm(Some(tx))).is_err() {
            return Err(lost(
                "the subscription lost the broker before the confirmation",
            ));
        }
        rx.await
            .unwrap_or_else(|_| Err(lost("the subscription ended before the broker answered")))
    }

    fn confirm_later(self: Box<Self>) {
        let _ = self.verdict.send(Verdict::Confirm(None));
    }

    fn give_back(self: Box<Self>, _message: BusMessage) {
        let _ = self.verdict.send(Verdict::GiveBack);
    }
}

impl Shared {
    fn close(&self) {
        self.closed.cancel();
        self.arrived.notify_one();
    }
    fn set_problem(&self, e: Option<BusError>) {
        lock(&self.slot).problem = e;
    }
    fn put(&self, m: BusMessage, verdict: oneshot::Sender<Verdict>) {
        lock(&self.slot).held = Some((m, verdict));
        self.arrived.notify_one();
    }
    /// Takes the held message back (the subscription is gone); false when it was taken.
    fn take_back(&self) -> bool {
        lock(&self.slot).held.take().is_some()
    }
}

/// The durable consumer a family's group subscriptions share.
fn group_consumer(family: &str) -> String {
    format!("group-{family}")
}

/// Whom a subscription receives for.
#[derive(Debug, Clone)]
enum Target {
    Recipient(String),
    Family(String),
}

impl Target {
    fn accepts(&self, to: &str) -> bool {
        match self {
            Target::Recipient(r) => r == to,
            Target::Family(f) => family_of(to) == Some(f.as_str()),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Recipient(r) => write!(f, "{r}"),
            Target::Family(fam) => write!(f, "{fam}:* (group)"),
        }
    }
}

/// How a subscription is known to this process, to forget it when it ends.
enum Registration {
    Recipient {
        local: Subscribed,
        recipient: String,
        generation: u64,
    },
    Group {
        groups: Groups,
        family: String,
    },
}

struct NatsInbox {
    shared: Arc<Shared>,
    registration: Registration,
    url: String,
}

#[async_trait::async_trait]
impl Inbox for NatsInbox {
    fn poll(&mut self) -> Poll {
        if self.shared.closed.is_cancelled() {
            return Poll::Closed;
        }
        let taken = lock(&self.shared.slot).held.take();
        match taken {
            Some((m, verdict)) => {
                let settle = NatsSettle {
                    verdict,
                    url: self.url.clone(),
                    msg_id: m.msg_id.clone(),
                };
                Poll::Message(m, Box::new(settle))
            }
            None => Poll::Empty,
        }
    }

    async fn changed(&mut self) {
        self.shared.arrived.notified().await;
    }

    fn dropped(&self) -> u64 {
        0
    }

    fn problem(&self) -> Option<BusError> {
        lock(&self.shared.slot).problem.clone()
    }
}

impl Drop for NatsInbox {
    fn drop(&mut self) {
        match &self.registration {
            Registration::Recipient {
                local,
                recipient,
                generation,
            } => {
                let mut local = lock(local);
                if local.get(recipient).is_some_and(|(g, _)| g == generation) {
                    local.remove(recipient);
                }
            }
            Registration::Group { groups, family } => {
                let mut groups = lock(groups);
                if let Some(n) = groups.get_mut(family) {
                    *n -= 1;
                    if *n == 0 {
                        groups.remove(family);
                    }
                }
            }
        }
        self.shared.close();
    }
}

/// The task that moves one recipient's (or family's) messages from the broker into its
/// subscription.
struct Pump {
    shared: Arc<Shared>,
    js: Context,
    url: String,
    stream: String,
    target: Target,
    consumer: pull::Config,
    ack_wait: Duration,
    connected: watch::Receiver<u64>,
    /// The broker's refusals of this user's subjects (see `Nats::violations`).
    violations: broadcast::Sender<String>,
}

impl Pump {
    /// `PermissionDenied` when the broker refused this user a subject since `refusals` was
    /// made (a refused JetStream request is otherwise only a timeout), else [`Pump::trouble`].
    fn refused_or_trouble(
        &self,
        refusals: &mut broadcast::Receiver<String>,
        what: &str,
        e: impl std::fmt::Display,
    ) -> BusError {
        match refusals.try_recv() {
            Ok(v) => BusError::PermissionDenied {
                url: self.url.clone(),
                reason: format!("{v} (subscription {}: {what}: {e})", self.target),
            },
            Err(_) => self.trouble(what, e),
        }
    }

    fn trouble(&self, what: &str, e: impl std::fmt::Display) -> BusError {
        BusError::BrokerUnavailable {
            url: self.url.clone(),
            reason: format!("{what}: {e}"),
        }
    }

    async fn run(mut self) {
        let mut pause = RETRY_MIN;
        let mut said_conflict = false;
        let mut said_refused = false;
        while !self.shared.closed.is_cancelled() {
            let wait = match self.pump().await {
                Ok(()) => return,
                Err(e @ BusError::SubscriptionConflict { .. }) => {
                    // said once (it is retried every few seconds until the other one is gone)
                    if !said_conflict {
                        tracing::error!(subscription = %self.target, error = %e, "bus subscription refused: it overlaps another consumer; retrying every 5 s");
                        said_conflict = true;
                    }
                    self.shared.set_problem(Some(e));
                    RETRY_CONFLICT
                }
                Err(e @ BusError::PermissionDenied { .. }) => {
                    // an operator has to grant it: said once, retried every few seconds
                    if !said_refused {
                        tracing::error!(subscription = %self.target, error = %e, "bus subscription refused by the broker's permissions; retrying every 5 s");
                        said_refused = true;
                    }
                    self.shared.set_problem(Some(e));
                    RETRY_CONFLICT
                }
                Err(e) => {
                    tracing::warn!(subscription = %self.target, error = %e, "bus subscription: broker trouble, retrying");
                    self.shared.set_problem(Some(e));
                    pause = (pause * 2).min(RETRY_MAX);
                    pause / 2
                }
            };
            tokio::select! {
                () = self.shared.closed.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// The consumer filter subject's family token (`_`: recipients without a family).
    fn family(&self) -> &str {
        match &self.target {
            Target::Recipient(r) => family_token(r),
            Target::Family(f) => f,
        }
    }

    /// The broker refused our consumer because another one on the work-queue stream takes some
    /// of the same subjects: find them and say what to do.
    async fn conflict(&self, stream: &stream::Stream, e: impl std::fmt::Display) -> BusError {
        let family = self.family().to_owned();
        let prefix = format!("{}.to.{family}.", self.stream);
        let mine = self.consumer.durable_name.clone().unwrap_or_default();
        let mut others = Vec::new();
        let mut consumers = stream.consumers();
        while let Some(Ok(info)) = consumers.next().await {
            let f = &info.config.filter_subject;
            let overlaps = f.is_empty()
                || f.starts_with(&prefix)
                || f.ends_with('>')
                || *f == format!("{}.to.*.*", self.stream);
            if overlaps && info.name != mine {
                others.push(info.name.clone());
            }
        }
        let shown = if others.len() > 5 {
            format!("{}, … ({} in all)", others[..5].join(", "), others.len())
        } else {
            others.join(", ")
        };
        let reason = match &self.target {
            Target::Recipient(r) => format!(
                "recipient {r:?} is taken by the group subscriptions of family {family:?} \
                 (consumer {shown}; broker: {e}): a family is received either by its recipients' \
                 own subscriptions or by group subscriptions, not both. Take this recipient's \
                 messages from a group subscription (BusMessage::to says the recipient), or drop \
                 every group subscription of {family:?} and delete its consumer (`nats consumer \
                 rm {} {}`); this subscription retries every 5 s",
                self.stream,
                group_consumer(&family),
            ),
            Target::Family(_) => format!(
                "family {family:?} has per-recipient consumers on the broker ({shown}; broker: \
                 {e}): a family is received either by its recipients' own subscriptions or by \
                 group subscriptions, not both. Drop those subscriptions and delete their \
                 consumers (`nats consumer rm {} NAME`; messages waiting for them stay in the \
                 stream and come to the group); this subscription retries every 5 s",
                self.stream
            ),
        };
        BusError::SubscriptionConflict {
            url: self.url.clone(),
            reason,
        }
    }

    /// Pumps until the subscription closes (`Ok`) or the broker fails (`Err`).
    async fn pump(&mut self) -> Result<(), BusError> {
        self.connected.mark_unchanged();
        let mut refusals = self.violations.subscribe();
        let stream = self
            .js
            .get_stream(&self.stream)
            .await
            .map_err(|e| self.refused_or_trouble(&mut refusals, "stream", e))?;
        let mut consumer: PullConsumer = match stream
            .get_or_create_consumer(
                self.consumer.durable_name.as_deref().unwrap_or_default(),
                self.consumer.clone(),
            )
            .await
        {
            Ok(c) => c,
            Err(e) => {
                let overlap = matches!(e.kind(), ConsumerErrorKind::JetStream(j) if [
                    ErrorCode::CONSUMER_WQ_CONSUMER_NOT_UNIQUE,
                    ErrorCode::CONSUMER_WQ_MULTIPLE_UNFILTERED,
                    ErrorCode::CONSUMER_OVERLAPPING_SUBJECT_FILTERS,
                ]
                .contains(&j.error_code()));
                return Err(if overlap {
                    self.conflict(&stream, e).await
                } else {
                    self.refused_or_trouble(&mut refusals, "consumer", e)
                });
            }
        };
        // A consumer left by an earlier process keeps its `ack_wait` unless told: this
        // process's setting applies (the broker updates a durable consumer in place when it is
        // created again with only that changed).
        let found = consumer.cached_info().config.ack_wait;
        if found != self.ack_wait {
            match stream.create_consumer(self.consumer.clone()).await {
                Ok(c) => {
                    tracing::info!(subscription = %self.target, from_ms = found.as_millis() as u64,
                        to_ms = self.ack_wait.as_millis() as u64, "bus subscription: the consumer's ack_wait updated");
                    consumer = c;
                }
                Err(e) => {
                    tracing::warn!(subscription = %self.target, error = %e, kept_ms = found.as_millis() as u64,
                        "bus subscription: could not update the consumer's ack_wait; it keeps the old one");
                }
            }
        }
        // async-nats keeps pull requests going on this stream (and asks again after a
        // reconnect). One message per request: while this task holds a message it has no request
        // open, so a message it gives back cannot be handed to a request of its own that nobody
        // reads any more (the broker would keep it there until `ack_wait`): asking for more per
        // request breaks that (tried: `bus_a_dropped_subscription_gives_back_the_message_it_held`
        // then fails on nats-server 2.9).
        let mut messages = consumer
            .stream()
            .max_messages_per_batch(1)
            .expires(PULL_EXPIRES)
            .heartbeat(PULL_HEARTBEAT)
            .messages()
            .await
            .map_err(|e| self.refused_or_trouble(&mut refusals, "pull", e))?;
        self.shared.set_problem(None);
        loop {
            let next = tokio::select! {
                () = self.shared.closed.cancelled() => return Ok(()),
                _ = self.connected.changed() => {
                    self.shared.set_problem(None);
                    continue;
                }
                next = messages.next() => next,
            };
            match next {
                None => return Err(self.trouble("pull", "the message stream ended")),
                Some(Err(e)) if e.kind() == MessagesErrorKind::MissingHeartbeat => {
                    // the broker is silent: say so, and keep the stream (it pulls again)
                    self.shared.set_problem(Some(self.trouble("pull", e)));
                }
                Some(Err(e)) => return Err(self.trouble("pull", e)),
                Some(Ok(m)) => {
                    self.shared.set_problem(None);
                    if let Some(back) = self.deliver(m).await? {
                        // Unsubscribe this stream's pull request first (the broker would hand
                        // the message straight back to it), then give the message back.
                        drop(messages);
                        let _ = back.ack_with(AckKind::Nak(None)).await;
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Hands one message to the subscription and acknowledges it once confirmed (keeping it in
    /// hand with the broker until then), or gives it back. `Ok(Some(m))`: the subscription
    /// closed first (or it was given back after); the caller gives `m` back to the broker for
    /// the next one.
    async fn deliver(&self, m: Message) -> Result<Option<Message>, BusError> {
        let seq = match m.info() {
            Ok(info) => info.stream_sequence,
            Err(e) => return Err(self.trouble("message without JetStream info", e)),
        };
        let message = decode(seq, &m.payload).and_then(|b| {
            if self.target.accepts(&b.to) {
                Ok(b)
            } else {
                Err(BusError::BadPayload(format!("addressed to {:?}", b.to)))
            }
        });
        let message = match message {
            Ok(b) => b,
            Err(e) => {
                // a message no sender of this bus wrote: never retry it, never block the rest
                tracing::warn!(subscription = %self.target, seq, error = %e, "bus: dropped a message that is not a bus message");
                let _ = m.ack_with(AckKind::Term).await;
                return Ok(None);
            }
        };
        let msg_id = message.msg_id.clone();
        let (tx, mut verdict) = oneshot::channel();
        self.shared.put(message, tx);
        let mut handed_out = false;
        let verdict = loop {
            tokio::select! {
                v = &mut verdict => break v.unwrap_or(Verdict::GiveBack),
                () = self.shared.closed.cancelled(), if !handed_out => {
                    if self.shared.take_back() {
                        return Ok(Some(m));
                    }
                    // handed out: its holder still confirms it or gives it back
                    handed_out = true;
                }
                // not confirmed yet: tell the broker this process still holds it
                () = tokio::time::sleep(self.ack_wait / 3) => {
                    let _ = m.ack_with(AckKind::Progress).await;
                }
            }
        };
        let reply = match verdict {
            Verdict::GiveBack if self.shared.closed.is_cancelled() => return Ok(Some(m)),
            Verdict::GiveBack => {
                // handed out again at once (to this subscription or another of the group); if
                // the Nak is lost, the broker does so after `ack_wait`
                tracing::debug!(subscription = %self.target, seq, %msg_id, "bus: a message given back unconfirmed goes out again");
                let _ = m.ack_with(AckKind::Nak(None)).await;
                return Ok(None);
            }
            Verdict::Confirm(reply) => reply,
        };
        // Confirmed: acknowledge, confirmed by the broker. If that fails the broker sends it
        // again after `ack_wait`, and the subscription drops the repeat by its id.
        let mut last = None;
        for _ in 0..3 {
            match m.double_ack().await {
                Ok(()) => {
                    if let Some(r) = reply {
                        let _ = r.send(Ok(()));
                    }
                    return Ok(None);
                }
                Err(e) => last = Some(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let last = last.unwrap_or_default();
        if let Some(r) = reply {
            let _ = r.send(Err(BusError::ConfirmationLost {
                url: self.url.clone(),
                msg_id,
                reason: last.clone(),
            }));
        }
        Err(self.trouble("acknowledging", last))
    }
}

/// async-nats builds its TLS configuration from rustls' process-wide crypto provider. With two
/// providers compiled into one program (async-nats brings *ring*, reqwest aws-lc-rs: the chat
/// panel has both) rustls cannot choose one and panics at the first TLS handshake — a `tls://`
/// URL, or a broker that asks for TLS. Unless the program installed a provider already (do it
/// before connecting the bus if you want another), *ring* is installed here.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err only when another thread installed one first: then that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn i42_6_user_and_password_or_token_come_out_of_the_url_and_are_never_shown() {
        let e = split_url("nats://w%40rk:p%3Ass@127.0.0.1:4222").unwrap();
        assert_eq!(e.connect_to, ["nats://127.0.0.1:4222"]);
        assert_eq!(e.login, Some(("w@rk".into(), Some("p:ss".into()))));
        assert_eq!(e.shown, "nats://w%40rk:***@127.0.0.1:4222");
        assert!(!e.tls);

        let e = split_url("tls://s3cr3t@broker.example:4443").unwrap();
        assert_eq!(e.connect_to, ["tls://broker.example:4443"]);
        assert_eq!(e.login, Some(("s3cr3t".into(), None)));
        assert_eq!(e.shown, "tls://***@broker.example:4443");
        assert!(e.tls);

        let e = split_url("127.0.0.1:4222, nats://u:p@127.0.0.1:4223").unwrap();
        assert_eq!(
            e.connect_to,
            ["nats://127.0.0.1:4222", "nats://127.0.0.1:4223"]
        );
        assert_eq!(e.login, Some(("u".into(), Some("p".into()))));
        assert_eq!(e.shown, "nats://127.0.0.1:4222,nats://u:***@127.0.0.1:4223");

        assert!(split_url("nats://a:1@h:1,nats://b:2@h:2").is_err());
        assert!(split_url(" , ").is_err());
        assert_eq!(
            NatsConfig::new("nats://u:hunter2@h:1").redacted_url(),
            "nats://u:***@h:1"
        );
    }
}
