//! Shared by the store tests: a fresh PostgreSQL database per test, and a loopback TCP proxy
//! that can take the database "away" (refuse and cut connections) and bring it back.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The variable naming the PostgreSQL server the tests use. `cargo xtask test` starts a private
/// cluster on 127.0.0.1 and sets it; its user must be allowed to create databases.
pub const PG_ENV: &str = "TEST_DATABASE_URL";

/// The server's URL, or a failure saying how to get one (never a silent pass).
pub fn pg_base_url() -> String {
    match std::env::var(PG_ENV) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "{PG_ENV} is not set, so the PostgreSQL store tests cannot run: run `cargo xtask test` \
             (it starts a private PostgreSQL on 127.0.0.1 and sets it), or `cargo xtask \
             with-services cargo test -p toolwright-context-engine`, or set {PG_ENV}=postgres://USER@HOST:PORT/postgres \
             for a server where USER may create databases"
        ),
    }
}

/// `url` with its database replaced by `db`.
pub fn with_db(url: &str, db: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = head.find("://").map_or(0, |i| i + 3);
    let base = match head[scheme_end..].find('/') {
        Some(i) => &head[..scheme_end + i],
        None => head,
    };
    format!("{base}/{db}{query}")
}

/// An admin connection to the server's own database.
pub async fn pg_admin() -> tokio_postgres::Client {
    let url = pg_base_url();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {PG_ENV}={url}: {e}"));
    tokio::spawn(conn);
    client
}

/// A fresh, empty database named `ce_NAME` (dropped first if a previous run left it); its URL.
pub async fn pg_database(name: &str) -> String {
    let db = format!("ce_{name}");
    let admin = pg_admin().await;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .await
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    with_db(&pg_base_url(), &db)
}

/// The `host:port` of a URL made by [`pg_base_url`] (for the proxy).
pub fn pg_addr(url: &str) -> SocketAddr {
    let config: tokio_postgres::Config = url.parse().unwrap();
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        other => panic!("{PG_ENV} must name a TCP host for this test, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = if host == "localhost" {
        "127.0.0.1".into()
    } else {
        host
    };
    format!("{host}:{port}").parse().unwrap()
}

/// A TCP proxy on 127.0.0.1 in front of `upstream`. `down` closes the listener and cuts every
/// connection (the server looks gone: connects are refused); `up` listens again on the same port.
pub struct Proxy {
    pub addr: SocketAddr,
    upstream: SocketAddr,
    task: Option<JoinHandle<()>>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut p = Self {
            addr,
            upstream,
            task: None,
        };
        p.serve(listener);
        p
    }

    fn serve(&mut self, listener: TcpListener) {
        let upstream = self.upstream;
        self.task = Some(tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((mut down, _)) = listener.accept().await else {
                    continue;
                };
                conns.spawn(async move {
                    if let Ok(mut up) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
            }
        }));
    }

    pub async fn down(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await; // the listener and every connection are closed once it is gone
        }
    }

    pub async fn up(&mut self) {
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }
}
