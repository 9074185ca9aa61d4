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
//!
//! This file holds [`NatsConfig`], connecting (URL, credentials, TLS, the stream) and sending;
//! `receive` the subscriptions' side: their pumps from the consumers, and settling.

mod receive;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_nats::ConnectErrorKind;
use async_nats::connection::State;
use async_nats::jetstream::context::{Context, ContextBuilder, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{self, DiscardPolicy, RetentionPolicy, StorageType};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, watch};

use super::{
    Backend, BusError, BusMessage, Delivery, Inbox, MessageBus, OutgoingMessage, Poll, Settle,
    family_of,
};
use receive::{NatsInbox, Registration, Shared, Target, group_consumer};

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
    /// This client's own certificate and its private key (PEM files), for a broker that
    /// verifies clients (`tls { verify: true }`; `NATS_TLS_CERT` and `NATS_TLS_KEY`). Setting
    /// it requires TLS. Default none.
    pub tls_client: Option<(PathBuf, PathBuf)>,
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
            tls_client: None,
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
    /// Sets [`NatsConfig::tls_client`]: the client certificate `cert` and its key `key`.
    pub fn tls_client(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls_client = Some((cert.into(), key.into()));
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
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), toolwright_messaging::BusError> {
    /// use toolwright_messaging::{MessageBus, OutgoingMessage};
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
        if let Some((cert, key)) = &config.tls_client {
            for (file, var) in [(cert, "NATS_TLS_CERT"), (key, "NATS_TLS_KEY")] {
                if !file.is_file() {
                    return Err(unavailable(format!(
                        "the TLS client certificate's file {} ({var}) is not a readable file",
                        file.display()
                    )));
                }
            }
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        let has_client_cert = config.tls_client.is_some();
        let tls = endpoint.tls || config.tls_ca.is_some() || has_client_cert;
        let client = options
            .require_tls(tls)
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
                     system trusts or the one in NATS_TLS_CA, and that the broker offers TLS{}",
                        client_cert_hint(has_client_cert)
                    ))
                }
                _ if tls => unavailable(format!("{e}{}", client_cert_hint(has_client_cert))),
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

/// What to add to a TLS failure's reason: a broker that verifies clients ends the handshake of
/// one without a certificate, in words that do not say so.
fn client_cert_hint(has_client_cert: bool) -> &'static str {
    if has_client_cert {
        "; check that the client certificate (NATS_TLS_CERT, NATS_TLS_KEY) is signed by a root \
         the broker trusts and allowed the clientAuth use"
    } else {
        "; if the broker verifies its clients (`tls { verify: true }`), give this client its \
         certificate and key: NATS_TLS_CERT and NATS_TLS_KEY (NatsConfig::tls_client)"
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
    fn user_and_password_or_token_come_out_of_the_url_and_are_never_shown() {
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
