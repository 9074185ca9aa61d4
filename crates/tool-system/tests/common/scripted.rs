//! A `ChatModel` that answers from a script and keeps every request it was sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use toolwright_core::{
    ChatModel, ChatRequest, ChatResponse, FinishReason, ModelError, ModelInfo, ToolCall,
    async_trait,
};

#[derive(Clone)]
pub struct Scripted {
    name: String,
    function_calling: bool,
    answer_schema_with_tools: bool,
    replies: Arc<Mutex<VecDeque<ChatResponse>>>,
    requests: Arc<Mutex<Vec<ChatRequest>>>,
}

impl Scripted {
    /// A model with native function calling that gives `replies` in order.
    pub fn new(replies: Vec<ChatResponse>) -> Self {
        Self {
            name: "scripted".into(),
            function_calling: true,
            answer_schema_with_tools: false,
            replies: Arc::new(Mutex::new(replies.into())),
            requests: Arc::default(),
        }
    }
    /// The same, for a model without function calling.
    pub fn without_function_calling(replies: Vec<ChatResponse>) -> Self {
        Self {
            function_calling: false,
            ..Self::new(replies)
        }
    }
    /// The same, saying that a `response_format` schema leaves its tools callable (as the
    /// embedded local model's grammar does).
    pub fn keeping_tools_under_a_schema(self) -> Self {
        Self {
            answer_schema_with_tools: true,
            ..self
        }
    }
    /// Every request so far.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }
}

/// A text answer.
pub fn text(t: &str) -> ChatResponse {
    ChatResponse::new(t, vec![], FinishReason::Stop, None)
}

/// A response with one native call.
pub fn call(id: &str, name: &str, args: Value) -> ChatResponse {
    ChatResponse::new(
        "",
        vec![ToolCall::new(id, name, args)],
        FinishReason::ToolCalls,
        None,
    )
}

#[async_trait]
impl ChatModel for Scripted {
    fn info(&self) -> ModelInfo {
        ModelInfo::new(self.name.clone(), self.function_calling)
            .with_answer_schema_with_tools(self.answer_schema_with_tools)
    }
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.requests.lock().unwrap().push(request);
        self.replies
            .lock()
            .unwrap()
            .pop_front()
            .ok_or_else(|| ModelError::Inference("the script has no more replies".into()))
    }
}
