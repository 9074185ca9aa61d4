//! "the broker trusts everyone": the bus against a `nats-server` started with
//! authorization. Each test starts its own broker (a config file it writes, a free port on
//! 127.0.0.1, JetStream in a directory of its own), killed when the test ends. The users and
//! permissions are the block `docs/bus.md` offers to paste, read from that page, so the page is
//! what is tested.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use toolwright_messaging::{BusError, MessageBus, NatsConfig, OutgoingMessage};

const WORKER_PASSWORD: &str = "w0rker-s3cret";
const PUBLISHER_PASSWORD: &str = "pub-s3cret";

/// The nats-server binary (installed by xtask's `Need::Nats`); a test without it fails saying so.
fn nats_server() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!("nats-server is not installed: run `cargo xtask test` once (it installs it) or `apt-get install nats-server`")
    })
}

/// The `authorization` block of `docs/bus.md`, between its markers.
fn documented_authorization() -> String {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/bus.md");
    let text = std::fs::read_to_string(&page).unwrap();
    let begin = text
        .find("<!-- broker-permissions:begin -->")
        .expect("docs/bus.md has no broker-permissions block");
    let end = text.find("<!-- broker-permissions:end -->").unwrap();
    let block = &text[begin..end];
    let body = block.split("```").nth(1).unwrap();
    body.strip_prefix("text").unwrap().to_owned()
}

/// A private nats-server with `auth` (config text) on a free 127.0.0.1 port; killed on drop.
struct Broker {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Broker {
    fn start(auth: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "i42-6-broker-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = dir.join("nats.conf");
        std::fs::write(
            &conf,
            format!(
                "listen: 127.0.0.1:{port}\njetstream {{ store_dir: {:?} }}\n{auth}\n",
                dir.join("js").display().to_string()
            ),
        )
        .unwrap();
        let child = Command::new(nats_server())
            .arg("-c")
            .arg(&conf)
            .env("NATS_WORKER_PASSWORD", WORKER_PASSWORD)
            .env("NATS_PUBLISHER_PASSWORD", PUBLISHER_PASSWORD)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("nats-server.log")).unwrap())
            .spawn()
            .unwrap();
        let mut broker = Self { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = broker.child.try_wait().unwrap() {
                let log =
                    std::fs::read_to_string(broker.dir.join("nats-server.log")).unwrap_or_default();
                panic!("nats-server exited at start ({status}); config:\n{auth}\nlog:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        broker
    }

    fn url(&self, login: &str) -> String {
        format!("nats://{login}127.0.0.1:{}", self.port)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn worker(broker: &Broker) -> NatsConfig {
    NatsConfig::new(broker.url(&format!("worker:{WORKER_PASSWORD}@"))).inbox_prefix("_INBOX_worker")
}

fn publisher(broker: &Broker) -> NatsConfig {
    NatsConfig::new(broker.url(&format!("publisher:{PUBLISHER_PASSWORD}@")))
        .inbox_prefix("_INBOX_publisher")
}

async fn recv_within(
    inbox: &mut toolwright_messaging::Subscription,
    limit: Duration,
) -> Option<toolwright_messaging::BusMessage> {
    tokio::time::timeout(limit, inbox.recv())
        .await
        .ok()
        .flatten()
}

/// Sends `text` to `to` over `bus` and asserts the bus's own subscription to `to` receives it
/// within 10 s: the proof, for each way of signing in, that the connection carries messages.
async fn round_trip(bus: &MessageBus, to: &str, text: &str) {
    let mut inbox = bus.subscribe(to);
    bus.send(OutgoingMessage::new("agent", to, text))
        .await
        .unwrap();
    let got = recv_within(&mut inbox, Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("nothing received on {to}; problem: {:?}", inbox.problem()));
    assert_eq!(got.text, text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_with_the_documented_permissions_sends_and_receives_a_conversation_message() {
    let broker = Broker::start(&documented_authorization());
    let receiving = MessageBus::connect_nats_with(worker(&broker))
        .await
        .unwrap();
    let mut persons = receiving.subscribe_group("user").unwrap();
    let sending = MessageBus::connect_nats_with(worker(&broker))
        .await
        .unwrap();
    let sent = sending
        .send(OutgoingMessage::new(
            "agent",
            "user:conv0001",
            "Deploy now?",
        ))
        .await
        .unwrap();
    let got = recv_within(&mut persons, Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("nothing received; problem: {:?}", persons.problem()));
    assert_eq!(
        (got.to.as_str(), got.text.as_str(), got.id),
        ("user:conv0001", "Deploy now?", sent.id)
    );
    // the same with a reply subject of its own: a worker's per-recipient subscription
    let mut alerts = receiving.subscribe("alerts:ops");
    sending
        .send(OutgoingMessage::new("agent", "alerts:ops", "disk full"))
        .await
        .unwrap();
    let got = recv_within(&mut alerts, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(got.text, "disk full");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_a_typed_error_at_once_that_hides_the_password() {
    let broker = Broker::start(&documented_authorization());
    for login in ["worker:not-the-password@", "", "nobody:x@"] {
        let started = Instant::now();
        let e = MessageBus::connect_nats_with(
            NatsConfig::new(broker.url(login)).inbox_prefix("_INBOX_worker"),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("{login:?} was let in"));
        let took = started.elapsed();
        assert!(
            matches!(e, BusError::Unauthorized { .. }),
            "{login:?}: {e:?}"
        );
        assert!(
            took < Duration::from_secs(3),
            "{login:?}: took {took:?}, not at once"
        );
        let shown = e.to_string();
        assert!(
            !shown.contains("not-the-password"),
            "the password is shown: {shown}"
        );
        assert!(
            shown.contains("NATS_CREDS") && shown.contains("nats://USER:PASSWORD@"),
            "{shown}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_without_permission_cannot_reach_a_conversation() {
    let broker = Broker::start(&documented_authorization());
    let workers = MessageBus::connect_nats_with(worker(&broker))
        .await
        .unwrap();
    let mut persons = workers.subscribe_group("user").unwrap();
    let mut alerts = workers.subscribe("alerts:ops");
    let outsider = MessageBus::connect_nats_with(publisher(&broker))
        .await
        .unwrap();

    // what it may do works
    outsider
        .send(OutgoingMessage::new("monitor", "alerts:ops", "cpu high"))
        .await
        .unwrap();
    assert_eq!(
        recv_within(&mut alerts, Duration::from_secs(10))
            .await
            .unwrap()
            .text,
        "cpu high"
    );

    // a conversation: refused at once, typed, nothing stored
    let started = Instant::now();
    let e = outsider
        .send(OutgoingMessage::new(
            "monitor",
            "user:conv0001",
            "click this link",
        ))
        .await
        .unwrap_err();
    assert!(matches!(e, BusError::PermissionDenied { .. }), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "refusal took {:?}",
        started.elapsed()
    );
    assert!(e.to_string().contains("user:conv0001"), "{e}");

    // the worker's next message for the conversation is the first it gets: the refused one
    // never reached the stream
    workers
        .send(OutgoingMessage::new("agent", "user:conv0001", "hello"))
        .await
        .unwrap();
    let got = recv_within(&mut persons, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!((got.from.as_str(), got.text.as_str()), ("agent", "hello"));
    assert!(
        recv_within(&mut persons, Duration::from_millis(500))
            .await
            .is_none()
    );

    // nor can it read what is handed to the workers (their reply subjects)
    let sneaky = MessageBus::connect_nats_with(
        publisher(&broker)
            .inbox_prefix("_INBOX_worker")
            .timeout(Duration::from_secs(1)),
    )
    .await
    .map(|_| ())
    .expect_err("the publisher got the workers' reply subjects");
    assert!(
        matches!(&sneaky, BusError::PermissionDenied { reason, .. } if reason.contains("_INBOX_worker")),
        "{sneaky:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_consumer_permissions_is_told_so_by_its_subscription() {
    let broker = Broker::start(&documented_authorization());
    // the stream exists (made by a worker); the publisher may look at it, not take from it
    let _workers = MessageBus::connect_nats_with(worker(&broker))
        .await
        .unwrap();
    let outsider =
        MessageBus::connect_nats_with(publisher(&broker).timeout(Duration::from_secs(1)))
            .await
            .unwrap();
    let inbox = outsider.subscribe_group("user").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match inbox.problem() {
            Some(BusError::PermissionDenied { reason, .. }) => {
                assert!(reason.contains("CONSUMER"), "{reason}");
                break;
            }
            other => assert!(
                Instant::now() < deadline,
                "after 5 s the problem is {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_in_the_url() {
    let broker = Broker::start("authorization { token: \"t0ken-abc\" }");
    let bus = MessageBus::connect_nats(&broker.url("t0ken-abc@"))
        .await
        .unwrap();
    round_trip(&bus, "user:conv0002", "hi").await;
    let e = MessageBus::connect_nats(&broker.url("wrong-token@"))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, BusError::Unauthorized { .. }), "{e:?}");
    assert!(!e.to_string().contains("wrong-token"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nkey_seed_file_in_credentials() {
    let user = nkeys::KeyPair::new_user();
    let other = nkeys::KeyPair::new_user();
    let broker = Broker::start(&format!(
        "authorization {{ users = [ {{ nkey: {} }} ] }}",
        user.public_key()
    ));
    let seeds = broker.dir.join("seeds");
    std::fs::create_dir_all(&seeds).unwrap();
    let good = seeds.join("worker.nk");
    std::fs::write(&good, format!("{}\n", user.seed().unwrap())).unwrap();
    let bus = MessageBus::connect_nats_with(NatsConfig::new(broker.url("")).credentials(&good))
        .await
        .unwrap();
    round_trip(&bus, "user:conv0003", "signed in").await;

    let stranger = seeds.join("other.nk");
    std::fs::write(&stranger, other.seed().unwrap()).unwrap();
    let e = MessageBus::connect_nats_with(NatsConfig::new(broker.url("")).credentials(&stranger))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, BusError::Unauthorized { .. }), "{e:?}");

    let missing = seeds.join("nope.creds");
    let e = MessageBus::connect_nats_with(NatsConfig::new(broker.url("")).credentials(&missing))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&e, BusError::Credentials { path, .. } if *path == missing),
        "{e:?}"
    );
    let garbage = seeds.join("garbage.creds");
    std::fs::write(&garbage, "not credentials at all\n").unwrap();
    let e = MessageBus::connect_nats_with(NatsConfig::new(broker.url("")).credentials(&garbage))
        .await
        .err()
        .unwrap();
    assert!(matches!(&e, BusError::Credentials { .. }), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_url_never_falls_back_to_plain_text() {
    let broker = Broker::start("");
    let started = Instant::now();
    let e = MessageBus::connect_nats(&format!("tls://127.0.0.1:{}", broker.port))
        .await
        .map(|_| ())
        .expect_err("a tls:// URL connected to a broker without TLS");
    assert!(matches!(e, BusError::BrokerUnavailable { .. }), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "took {:?}",
        started.elapsed()
    );
}

/// Runs `openssl` with `args` in `dir` (a test CA and a server certificate for 127.0.0.1).
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is needed to make the test's certificates (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A self-signed root `NAME.pem` (key `NAME.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) {
    let (key, pem, subj) = (
        format!("{name}.key"),
        format!("{name}.pem"),
        format!("/CN=i42-test-{name}"),
    );
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &EC,
            &[
                "-keyout",
                &key,
                "-out",
                &pem,
                "-days",
                "1",
                "-subj",
                &subj,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
            ],
        ]
        .concat(),
    );
}

/// A certificate `NAME.pem` (key `NAME.key`) for `subject`, signed by the root `ca`, with the
/// extensions `ext` (openssl's extfile lines).
fn issue(dir: &Path, ca: &str, name: &str, subject: &str, ext: &str) {
    let (key, csr, pem, ext_file) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    openssl(
        dir,
        &[
            &["req"][..],
            &EC,
            &["-keyout", &key, "-out", &csr, "-subj", subject],
        ]
        .concat(),
    );
    std::fs::write(dir.join(&ext_file), ext).unwrap();
    let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "1",
            "-extfile",
            &ext_file,
        ],
    );
}

const SERVER_EXT: &str =
    "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n";
const CLIENT_EXT: &str = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";

/// A fresh directory for a test's certificates.
fn cert_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{test}-certs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_operators_root_certificate() {
    let certs = cert_dir("i42-6-tls");
    make_ca(&certs, "ca");
    issue(&certs, "ca", "server", "/CN=127.0.0.1", SERVER_EXT);
    let broker = Broker::start(&format!(
        "tls {{ cert_file: {:?}, key_file: {:?} }}\nauthorization {{ token: \"t0ken-tls\" }}",
        certs.join("server.pem").display().to_string(),
        certs.join("server.key").display().to_string()
    ));
    let url = format!("tls://t0ken-tls@127.0.0.1:{}", broker.port);

    let bus = MessageBus::connect_nats_with(NatsConfig::new(&url).tls_ca(certs.join("ca.pem")))
        .await
        .unwrap();
    round_trip(&bus, "user:conv0004", "over TLS").await;

    // a certificate no trusted root signed: refused, typed, and saying where to look
    let e = MessageBus::connect_nats(&url)
        .await
        .map(|_| ())
        .expect_err("an unknown issuer was trusted");
    assert!(
        matches!(&e, BusError::BrokerUnavailable { reason, .. } if reason.contains("NATS_TLS_CA")),
        "{e:?}"
    );
    assert!(!e.to_string().contains("t0ken-tls"), "{e}");
    let _ = std::fs::remove_dir_all(&certs);
}

/// A broker that verifies its clients' certificates (mutual TLS, `verify_and_map`: the
/// certificate's subject is the broker user, with that user's permissions): a worker with a
/// certificate the operator's root signed connects and its messages go through; one with no
/// certificate, or one another root signed, gets a typed error that says what to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_a_worker_is_known_by_its_certificate() {
    let certs = cert_dir("i42-6-mtls");
    make_ca(&certs, "ca");
    issue(&certs, "ca", "server", "/CN=127.0.0.1", SERVER_EXT);
    issue(&certs, "ca", "worker", "/CN=worker-1", CLIENT_EXT);
    make_ca(&certs, "rogue-ca");
    issue(&certs, "rogue-ca", "rogue", "/CN=worker-1", CLIENT_EXT);
    let file = |n: &str| certs.join(n).display().to_string();
    let broker = Broker::start(&format!(
        "tls {{ cert_file: {:?}, key_file: {:?}, ca_file: {:?}, verify_and_map: true }}\n\
         authorization {{ users = [ {{ user: \"CN=worker-1\" }} ] }}",
        file("server.pem"),
        file("server.key"),
        file("ca.pem"),
    ));
    let url = format!("tls://127.0.0.1:{}", broker.port);

    let bus = MessageBus::connect_nats_with(
        NatsConfig::new(&url)
            .tls_ca(certs.join("ca.pem"))
            .tls_client(certs.join("worker.pem"), certs.join("worker.key")),
    )
    .await
    .unwrap();
    round_trip(&bus, "user:conv0005", "over mutual TLS").await;

    // no client certificate: refused, typed, naming what to set
    let e = MessageBus::connect_nats_with(NatsConfig::new(&url).tls_ca(certs.join("ca.pem")))
        .await
        .map(|_| ())
        .expect_err("a client without a certificate was let in");
    assert!(
        matches!(&e, BusError::BrokerUnavailable { reason, .. } | BusError::Unauthorized { reason, .. } if reason.contains("NATS_TLS_CERT")),
        "{e:?}"
    );

    // the same subject, signed by another root: refused
    let e = MessageBus::connect_nats_with(
        NatsConfig::new(&url)
            .tls_ca(certs.join("ca.pem"))
            .tls_client(certs.join("rogue.pem"), certs.join("rogue.key")),
    )
    .await
    .map(|_| ())
    .expect_err("a certificate from another root was let in");
    assert!(
        matches!(
            &e,
            BusError::BrokerUnavailable { .. } | BusError::Unauthorized { .. }
        ),
        "{e:?}"
    );

    // a key file that is not there: a typed error before any connection
    let e = MessageBus::connect_nats_with(
        NatsConfig::new(&url)
            .tls_ca(certs.join("ca.pem"))
            .tls_client(certs.join("worker.pem"), certs.join("missing.key")),
    )
    .await
    .map(|_| ())
    .expect_err("a missing key file connected");
    assert!(
        matches!(&e, BusError::BrokerUnavailable { reason, .. } if reason.contains("NATS_TLS_KEY")),
        "{e:?}"
    );
    drop(bus);
    let _ = std::fs::remove_dir_all(&certs);
}

/// A NATS JWT (v2) with `claims`, issued by `issuer` for `subject`, signed with the issuer's
/// key — what `nsc` writes.
fn nats_jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: serde_json::Value) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = serde_json::json!({
        "jti": format!("{name}-{iat}-{}", std::process::id()),
        "iat": iat,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let payload = b64.encode(claims.to_string());
    let signed = format!("{header}.{payload}");
    let signature = issuer.sign(signed.as_bytes()).unwrap();
    format!("{signed}.{}", b64.encode(signature))
}

/// A `.creds` file as `nsc` writes it: the user's JWT and NKey seed.
fn creds_file(jwt: &str, seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    )
}

/// Operator mode (decentralised JWT authentication, as NGS/Synadia and `nsc` set it up): the
/// broker trusts an operator; the operator signed an account (JetStream on); the account signed
/// a user. A worker with that user's `.creds` file (`NATS_CREDS`) connects and its messages go
/// through; a user another account signed — one the operator never signed — is `Unauthorized`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_mode_a_worker_signs_in_with_a_creds_file() {
    let operator = nkeys::KeyPair::new_operator();
    let account = nkeys::KeyPair::new_account();
    let user = nkeys::KeyPair::new_user();
    let no_limit = serde_json::json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
        "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
    });
    let operator_jwt = nats_jwt(
        &operator,
        &operator.public_key(),
        "test-operator",
        serde_json::json!({"type": "operator", "version": 2}),
    );
    let account_jwt = nats_jwt(
        &operator,
        &account.public_key(),
        "app",
        serde_json::json!({"type": "account", "version": 2, "limits": no_limit}),
    );
    // the broker's own account (JetStream needs one in operator mode)
    let system = nkeys::KeyPair::new_account();
    let system_jwt = nats_jwt(
        &operator,
        &system.public_key(),
        "SYS",
        serde_json::json!({"type": "account", "version": 2}),
    );
    let user_claims = serde_json::json!({
        "type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1,
        "pub": {}, "sub": {},
    });
    let user_jwt = nats_jwt(&account, &user.public_key(), "worker", user_claims.clone());

    let dir = cert_dir("i42-6-operator");
    std::fs::write(dir.join("operator.jwt"), &operator_jwt).unwrap();
    let broker = Broker::start(&format!(
        "operator: {:?}\nsystem_account: {}\nresolver: MEMORY\n\
         resolver_preload: {{ {}: {:?}, {}: {:?} }}",
        dir.join("operator.jwt").display().to_string(),
        system.public_key(),
        account.public_key(),
        account_jwt,
        system.public_key(),
        system_jwt,
    ));
    let good = dir.join("worker.creds");
    std::fs::write(&good, creds_file(&user_jwt, &user.seed().unwrap())).unwrap();
    let bus = MessageBus::connect_nats_with(NatsConfig::new(broker.url("")).credentials(&good))
        .await
        .unwrap();
    round_trip(&bus, "user:conv0006", "signed by the operator's account").await;

    // a user signed by an account the operator never signed
    let rogue_account = nkeys::KeyPair::new_account();
    let rogue = nkeys::KeyPair::new_user();
    let rogue_jwt = nats_jwt(&rogue_account, &rogue.public_key(), "rogue", user_claims);
    let bad = dir.join("rogue.creds");
    std::fs::write(&bad, creds_file(&rogue_jwt, &rogue.seed().unwrap())).unwrap();
    let e = MessageBus::connect_nats_with(NatsConfig::new(broker.url("")).credentials(&bad))
        .await
        .map(|_| ())
        .expect_err("a user of an unknown account was let in");
    assert!(matches!(e, BusError::Unauthorized { .. }), "{e:?}");
    drop(bus);
    let _ = std::fs::remove_dir_all(&dir);
}
