//! A server in this process on 127.0.0.1 and rmcp clients that answer approvals as told.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    deprecated
)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use reqwest_ring as _;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, Implementation,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion,
    ResourceUpdatedNotificationParam, SamplingMessage,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RunningService,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};
use toolwright_mcp_server::{HttpOptions, McpServer};
use toolwright_tool_system::{ApprovalPolicy, Dispatcher};

pub fn tls() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The demo tools, `transfer` held for approval, a 500 ms time limit.
pub fn server() -> McpServer {
    let dispatcher = Dispatcher::from_registry(toolwright_mcp_server::demo::tools().unwrap())
        .with_default_timeout(Duration::from_millis(500));
    McpServer::builder(Arc::new(dispatcher))
        .approval_policy(ApprovalPolicy::new().always("transfer"))
        .approval_timeout(Duration::from_secs(10))
        .build()
}

/// Serves `router` on a free port of 127.0.0.1; its address.
pub async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// The demo server over HTTP with the default options; its MCP URL.
pub async fn http_server() -> String {
    let addr = serve(server().router(HttpOptions::default()).unwrap()).await;
    format!("http://{addr}/mcp")
}

/// How a client answers an elicitation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Approve,
    Decline,
    /// It does not declare the elicitation capability.
    CannotAsk,
}

/// A client that answers every elicitation with `answer` and counts the questions.
#[derive(Clone)]
pub struct Person {
    pub answer: Answer,
    pub version: ProtocolVersion,
    pub asked: Arc<AtomicUsize>,
    pub last_question: Arc<std::sync::Mutex<String>>,
}

impl Person {
    pub fn new(answer: Answer) -> Self {
        Self {
            answer,
            version: ProtocolVersion::LATEST,
            asked: Arc::default(),
            last_question: Arc::default(),
        }
    }
    pub fn on(mut self, version: ProtocolVersion) -> Self {
        self.version = version;
        self
    }
    pub fn questions(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.answer == Answer::CannotAsk {
            ClientCapabilities::default()
        } else {
            ClientCapabilities::builder().enable_elicitation().build()
        };
        ClientConfig::new(caps, Implementation::new("test-person", "0"))
            .with_protocol_version(self.version.clone())
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            *self.last_question.lock().unwrap() = message.clone();
        }
        Ok(match self.answer {
            Answer::Approve => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true}))
            }
            _ => ElicitResult::new(ElicitationAction::Decline),
        })
    }
}

/// `person` connected over `transport`: by `server/discover` on protocol 2026-07-28, by
/// `initialize` on older ones.
pub async fn connect<T, E, A>(transport: T, person: Person) -> RunningService<RoleClient, Person>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    if person.version.has_initialize() {
        person
            .serve(transport)
            .await
            .expect("connect by initialize")
    } else {
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![person.version.clone()],
        };
        person
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .expect("connect by server/discover")
    }
}

/// `person` connected to `url` over Streamable HTTP.
pub async fn connect_http(url: &str, person: Person) -> RunningService<RoleClient, Person> {
    tls();
    connect(
        StreamableHttpClientTransport::from_uri(url.to_owned()),
        person,
    )
    .await
}

/// The text of a call's first content block.
pub fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// A client on protocol 2025-11-25 that answers sampling (`you asked: PROMPT`) and elicitation
/// (a username and an email) and keeps what the server sent it.
#[derive(Clone, Default)]
pub struct RecordingClient {
    pub cannot_sample: bool,
    pub logs: Arc<Mutex<Vec<String>>>,
    pub progress: Arc<Mutex<Vec<f64>>>,
    pub updated: Arc<Mutex<Vec<String>>>,
    pub asked: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for RecordingClient {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.cannot_sample {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::builder()
                .enable_sampling()
                .enable_elicitation()
                .build()
        };
        ClientConfig::new(caps, Implementation::new("test-client", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let asked = params.messages[0]
            .content
            .clone()
            .into_vec()
            .first()
            .and_then(|c| c.as_text().map(|t| t.text.clone()))
            .unwrap_or_default();
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(format!("you asked: {asked}")),
            "test-model".into(),
        ))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked
            .lock()
            .unwrap()
            .push(serde_json::to_value(&request).unwrap());
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"username": "ann", "email": "ann@example.com"})))
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.logs
            .lock()
            .unwrap()
            .push(params.data.as_str().unwrap_or_default().to_owned());
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params.progress);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.updated.lock().unwrap().push(params.uri);
    }
}
