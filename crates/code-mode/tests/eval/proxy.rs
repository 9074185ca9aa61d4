//! A recording proxy on 127.0.0.1: the agent's model client talks to it, it records each
//! request body and forwards it (headers included, so the API key goes through) to the model's
//! server — the scripted one or a real one — and sends the answer back unchanged. The
//! evaluation counts model calls and prompt tokens over what it recorded, the same way for
//! both kinds of model.

use reqwest_ring as reqwest;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Response, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use serde_json::Value;

#[derive(Clone)]
struct Shared {
    upstream: String,
    client: reqwest::Client,
    requests: Arc<Mutex<Vec<Value>>>,
}

pub struct Proxy {
    addr: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Forwards `POST /chat/completions` to `upstream` (a base URL such as
    /// `https://api.openai.com/v1`).
    pub async fn start(upstream: String) -> Proxy {
        let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
        toolwright_model_gateway::ensure_crypto_provider();
        let shared = Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(300))
                .build()
                .expect("an HTTP client"),
            requests: requests.clone(),
        };
        let app = Router::new()
            .route("/chat/completions", post(forward))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy {
            addr,
            requests,
            task,
        }
    }

    /// The base URL to give the model client.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request body forwarded so far.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

async fn forward(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response<Body> {
    if let Ok(v) = serde_json::from_slice::<Value>(&body) {
        s.requests.lock().unwrap().push(v);
    }
    let mut req = s
        .client
        .post(format!("{}/chat/completions", s.upstream))
        .body(body);
    for (name, value) in &headers {
        let n = name.as_str();
        if !matches!(
            n,
            "host" | "content-length" | "connection" | "accept-encoding" | "transfer-encoding"
        ) {
            req = req.header(name, value);
        }
    }
    let (status, headers, bytes) = match req.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            // Every header but the framing ones (Retry-After matters to the gateway's retries).
            let headers: Vec<(String, Vec<u8>)> = r
                .headers()
                .iter()
                .filter(|(n, _)| {
                    !matches!(
                        n.as_str(),
                        "content-length" | "transfer-encoding" | "connection" | "content-encoding"
                    )
                })
                .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                .collect();
            match r.bytes().await {
                Ok(b) => (status, headers, b),
                Err(e) => (502, Vec::new(), Bytes::from(e.to_string())),
            }
        }
        Err(e) => (502, Vec::new(), Bytes::from(e.to_string())),
    };
    let mut response =
        Response::builder().status(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY));
    for (name, value) in headers {
        response = response.header(name, value);
    }
    response.body(Body::from(bytes)).unwrap()
}
