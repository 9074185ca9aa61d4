//! The `send_message` tool (Q1–Q6, Q16–Q19).

use std::sync::Arc;

use serde_json::{Map, Value, json};
use toolwright_core::{Tool, ToolContext, ToolError, ToolSpec};

use crate::{BusError, MessageBus, OutgoingMessage, quick_replies_schema, validate_quick_replies};

/// The tool's name.
pub const SEND_MESSAGE: &str = "send_message";

/// Longest message text, in characters.
pub const MAX_TEXT_CHARS: usize = 8000;

/// Longest recipient id, in characters.
const MAX_RECIPIENT_CHARS: usize = 128;

type Resolver = Arc<dyn Fn(&str, &ToolContext) -> String + Send + Sync>;

/// `send_message(recipient, text, quickReplies?)`: posts a message on a [`MessageBus`].
///
/// It checks its own arguments (it does not rely on a dispatcher having done so): `recipient`
/// and `text` must be non-empty strings, `text` at most [`MAX_TEXT_CHARS`] characters, and
/// `quickReplies` follows [`validate_quick_replies`]. Every failure is an
/// `invalid_arguments` error whose message names the rule, e.g.
/// `quickReplies has 11 items; at most 10 are allowed`.
///
/// On success the result is `{"success": true, "messageId": N, "recipient": ID,
/// "quickReplies": [...]}` (`quickReplies` only when there are some).
#[derive(Clone)]
pub struct SendMessageTool {
    bus: MessageBus,
    sender: String,
    resolver: Option<Resolver>,
}

impl std::fmt::Debug for SendMessageTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendMessageTool")
            .field("sender", &self.sender)
            .finish()
    }
}

impl SendMessageTool {
    /// A tool that sends as `sender` on `bus`.
    pub fn new(bus: MessageBus, sender: impl Into<String>) -> Self {
        Self {
            bus,
            sender: sender.into(),
            resolver: None,
        }
    }

    /// Maps the recipient id the model gave (and the call's context) to a bus address, e.g.
    /// `"user"` to the address of the person in this call's session.
    ///
    /// ```
    /// use toolwright_messaging::{MessageBus, SendMessageTool};
    /// let tool = SendMessageTool::new(MessageBus::new(), "agent").with_recipient_resolver(|id, ctx| {
    ///     match (id, &ctx.session_id) {
    ///         ("user", Some(s)) => format!("user:{s}"),
    ///         _ => id.to_owned(),
    ///     }
    /// });
    /// # let _ = tool;
    /// ```
    pub fn with_recipient_resolver(
        mut self,
        f: impl Fn(&str, &ToolContext) -> String + Send + Sync + 'static,
    ) -> Self {
        self.resolver = Some(Arc::new(f));
        self
    }

    /// The JSON Schema of the arguments (Q16–Q19): `recipient` and `text` required,
    /// `quickReplies` optional, an array of at most 10 non-empty strings.
    pub fn parameters_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "recipient": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_RECIPIENT_CHARS,
                    "description": "Id of the recipient: an agent id, or \"user\" for the person you are talking to."
                },
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TEXT_CHARS,
                    "description": "The message text."
                },
                "quickReplies": quick_replies_schema()
            },
            "required": ["recipient", "text"]
        })
    }

    fn check(args: &Value) -> Result<(String, String, Option<crate::QuickReplies>), ToolError> {
        let Some(obj) = args.as_object() else {
            return Err(ToolError::invalid_arguments(
                "arguments must be a JSON object with recipient, text and optional quickReplies",
            ));
        };
        let recipient = required_string(obj, "recipient", MAX_RECIPIENT_CHARS)?;
        let text = required_string(obj, "text", MAX_TEXT_CHARS)?;
        let quick = validate_quick_replies(obj.get("quickReplies"))
            .map_err(|e| ToolError::invalid_arguments(e.to_string()))?;
        Ok((recipient, text, quick))
    }
}

fn required_string(obj: &Map<String, Value>, key: &str, max: usize) -> Result<String, ToolError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(ToolError::invalid_arguments(format!("{key} is required"))),
        Some(Value::String(s)) if s.trim().is_empty() => {
            Err(ToolError::invalid_arguments(format!("{key} is empty")))
        }
        Some(Value::String(s)) => {
            let n = s.chars().count();
            if n > max {
                Err(ToolError::invalid_arguments(format!(
                    "{key} has {n} characters; at most {max} are allowed"
                )))
            } else {
                Ok(s.clone())
            }
        }
        Some(_) => Err(ToolError::invalid_arguments(format!(
            "{key} must be a string"
        ))),
    }
}

/// The bus message id of `send_message` call `call_id` in session `session`: `SESSION:CALL_ID`
/// when that is a valid id (at most [`MAX_MSG_ID_LEN`](crate::MAX_MSG_ID_LEN) bytes of printable
/// ASCII without spaces), else `sm-` and a 128-bit FNV-1a hash of both in hex. Deterministic
/// across processes and builds.
pub fn call_msg_id(session: &str, call_id: &str) -> String {
    let plain = format!("{session}:{call_id}");
    if plain.len() <= crate::MAX_MSG_ID_LEN && plain.bytes().all(|b| b.is_ascii_graphic()) {
        return plain;
    }
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in session
        .bytes()
        .chain(std::iter::once(0))
        .chain(call_id.bytes())
    {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    format!("sm-{h:032x}")
}

#[async_trait::async_trait]
impl Tool for SendMessageTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            SEND_MESSAGE,
            "Send an asynchronous message to a recipient (an agent, or \"user\" for the person). \
             Optionally attach quickReplies: up to 10 short answer options shown as buttons; \
             the recipient can still type a free answer.",
            Self::parameters_schema(),
        )
    }

    async fn call(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> Result<toolwright_core::ToolOutput, ToolError> {
        let result: Result<Value, ToolError> = async {
            let (recipient, text, quick) = Self::check(&args)?;
            let to = match &self.resolver {
                Some(f) => f(&recipient, &ctx),
                None => recipient.clone(),
            };
            let replies = quick.as_ref().map(|q| q.as_slice().to_vec());
            let mut msg =
                OutgoingMessage::new(self.sender.clone(), to, text).with_quick_replies(quick);
            if let Some(session) = &ctx.session_id {
                // The same call of the same session (a turn resumed or re-run after a worker
                // died) sends the same id: the bus delivers it once.
                msg = msg.with_msg_id(call_msg_id(session, &ctx.call_id));
            }
            match self.bus.send(msg).await {
                Ok(d) => {
                    let mut out =
                        json!({"success": true, "messageId": d.id, "recipient": recipient});
                    if let Some(r) = replies {
                        out["quickReplies"] = json!(r);
                    }
                    if d.dropped_oldest {
                        out["droppedOldest"] = json!(true);
                    }
                    Ok(out)
                }
                Err(BusError::NotSubscribed(addr)) => Err(ToolError::unavailable(format!(
                    "recipient {recipient:?} is not connected"
                ))
                .with_detail(format!("bus address {addr:?} has no subscriber"))),
                Err(e @ (BusError::BrokerUnavailable { .. } | BusError::Broker { .. })) => {
                    Err(ToolError::unavailable(
                        "the message service is unavailable right now; the message was not sent",
                    )
                    .with_detail(e.to_string()))
                }
                Err(e @ BusError::NotConfirmed { .. }) => Err(ToolError::unavailable(
                    "the message service did not confirm the message; it may or may not arrive",
                )
                .with_detail(e.to_string())),
                Err(e) => Err(ToolError::failed(e.to_string())),
            }
        }
        .await;
        result.map(toolwright_core::ToolOutput::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn workers_send_message_id_is_derived_from_session_and_call_so_a_rerun_sends_once() {
        let bus = MessageBus::new();
        let mut inbox = bus.subscribe("user:s1");
        let tool = SendMessageTool::new(bus.clone(), "agent").with_recipient_resolver(|id, ctx| {
            match (id, &ctx.session_id) {
                ("user", Some(s)) => format!("user:{s}"),
                _ => id.to_owned(),
            }
        });
        let args = json!({"recipient": "user", "text": "hi"});
        for _ in 0..2 {
            tool.call(args.clone(), ToolContext::new("call-7").with_session("s1"))
                .await
                .unwrap();
        }
        let first = inbox.try_recv().unwrap();
        assert_eq!(first.msg_id, "s1:call-7");
        assert!(
            inbox.try_recv().is_none(),
            "the same call sent twice is delivered once"
        );
        let long = "x".repeat(200);
        let id = call_msg_id(&long, "c 1");
        assert!(id.starts_with("sm-") && id.len() == 35, "{id}");
        assert_eq!(id, call_msg_id(&long, "c 1"));
        assert_ne!(id, call_msg_id(&long, "c 2"));
    }
    use toolwright_core::ToolErrorKind;

    fn setup() -> (SendMessageTool, crate::Subscription) {
        let bus = MessageBus::new();
        let inbox = bus.subscribe("user");
        (SendMessageTool::new(bus, "agent"), inbox)
    }

    async fn err(tool: &SendMessageTool, args: Value) -> ToolError {
        tool.call(args, ToolContext::new("c1")).await.unwrap_err()
    }

    #[tokio::test]
    async fn q1_tool_accepts_optional_quick_replies() {
        let (tool, mut inbox) = setup();
        let r = tool
            .call(
                json!({"recipient": "user", "text": "hi"}),
                ToolContext::new("c"),
            )
            .await
            .unwrap()
            .value;
        assert_eq!(r["success"], true);
        assert!(r.get("quickReplies").is_none());
        assert!(inbox.try_recv().unwrap().quick_replies.is_empty());
        let r = tool
            .call(
                json!({"recipient": "user", "text": "ok?", "quickReplies": ["Yes", "No"]}),
                ToolContext::new("c"),
            )
            .await
            .unwrap()
            .value;
        assert_eq!(r["quickReplies"], json!(["Yes", "No"]));
        assert_eq!(inbox.try_recv().unwrap().quick_replies, ["Yes", "No"]);
    }

    #[tokio::test]
    async fn q2_tool_rejects_non_array() {
        let (tool, mut inbox) = setup();
        let e = err(
            &tool,
            json!({"recipient": "user", "text": "t", "quickReplies": "Yes,No"}),
        )
        .await;
        assert_eq!(e.kind, ToolErrorKind::InvalidArguments);
        assert_eq!(
            e.message,
            "quickReplies must be an array of strings, but it is a string"
        );
        assert!(
            inbox.try_recv().is_none(),
            "nothing is sent on a validation error"
        );
    }

    #[tokio::test]
    async fn q3_tool_more_than_ten_is_error() {
        let (tool, mut inbox) = setup();
        let items: Vec<String> = (1..=11).map(|i| i.to_string()).collect();
        let e = err(
            &tool,
            json!({"recipient": "user", "text": "t", "quickReplies": items}),
        )
        .await;
        assert_eq!(e.kind, ToolErrorKind::InvalidArguments);
        assert_eq!(
            e.message,
            "quickReplies has 11 items; at most 10 are allowed"
        );
        assert_eq!(
            e.to_model_json()["error"],
            "quickReplies has 11 items; at most 10 are allowed"
        );
        assert!(inbox.try_recv().is_none());
    }

    #[tokio::test]
    async fn q4_tool_empty_array_is_absent() {
        let (tool, mut inbox) = setup();
        let r = tool
            .call(
                json!({"recipient": "user", "text": "t", "quickReplies": []}),
                ToolContext::new("c"),
            )
            .await
            .unwrap()
            .value;
        assert!(r.get("quickReplies").is_none());
        let m = inbox.try_recv().unwrap();
        assert!(m.quick_replies.is_empty());
        assert!(m.to_payload().get("quickReplies").is_none());
    }

    #[tokio::test]
    async fn q5_tool_non_string_item_is_error() {
        let (tool, _inbox) = setup();
        let e = err(
            &tool,
            json!({"recipient": "user", "text": "t", "quickReplies": ["a", "b", 3]}),
        )
        .await;
        assert_eq!(e.kind, ToolErrorKind::InvalidArguments);
        assert_eq!(
            e.message,
            "quickReplies[2] is not a string (it is a number)"
        );
    }

    #[tokio::test]
    async fn q6_tool_empty_string_item_is_error() {
        let (tool, _inbox) = setup();
        let e = err(
            &tool,
            json!({"recipient": "user", "text": "t", "quickReplies": ["a", ""]}),
        )
        .await;
        assert_eq!(e.kind, ToolErrorKind::InvalidArguments);
        assert_eq!(e.message, "quickReplies[1] is empty");
    }

    #[tokio::test]
    async fn q1_tool_checks_its_other_arguments() {
        let (tool, _inbox) = setup();
        assert_eq!(
            err(&tool, json!([1])).await.kind,
            ToolErrorKind::InvalidArguments
        );
        assert_eq!(
            err(&tool, json!({"text": "t"})).await.message,
            "recipient is required"
        );
        assert_eq!(
            err(&tool, json!({"recipient": "user"})).await.message,
            "text is required"
        );
        assert_eq!(
            err(&tool, json!({"recipient": "user", "text": "  "}))
                .await
                .message,
            "text is empty"
        );
        assert_eq!(
            err(&tool, json!({"recipient": 5, "text": "t"}))
                .await
                .message,
            "recipient must be a string"
        );
        let long = "x".repeat(MAX_TEXT_CHARS + 1);
        assert_eq!(
            err(&tool, json!({"recipient": "user", "text": long}))
                .await
                .message,
            format!(
                "text has {} characters; at most {MAX_TEXT_CHARS} are allowed",
                MAX_TEXT_CHARS + 1
            )
        );
        let e = err(&tool, json!({"recipient": "nobody", "text": "t"})).await;
        assert_eq!(e.kind, ToolErrorKind::Unavailable);
        assert_eq!(e.message, "recipient \"nobody\" is not connected");
    }

    #[tokio::test]
    async fn q9_resolver_routes_user_to_the_session() {
        let bus = MessageBus::new();
        let mut inbox = bus.subscribe("user:s1");
        let tool = SendMessageTool::new(bus, "agent").with_recipient_resolver(|id, ctx| {
            match (id, &ctx.session_id) {
                ("user", Some(s)) => format!("user:{s}"),
                _ => id.to_owned(),
            }
        });
        tool.call(
            json!({"recipient": "user", "text": "t", "quickReplies": ["x"]}),
            ToolContext::new("c").with_session("s1"),
        )
        .await
        .unwrap();
        let m = inbox.try_recv().unwrap();
        assert_eq!((m.from.as_str(), m.to.as_str()), ("agent", "user:s1"));
        assert_eq!(m.to_payload()["quickReplies"], json!(["x"]));
    }

    #[test]
    fn q16_tool_schema_has_quick_replies() {
        let spec = SendMessageTool::new(MessageBus::new(), "a").spec();
        assert_eq!(&*spec.name, "send_message");
        assert!(spec.parameters["properties"]["quickReplies"].is_object());
        assert_eq!(
            spec.parameters["properties"]["quickReplies"]["type"],
            json!(["array", "null"])
        );
    }

    #[test]
    fn q17_quick_replies_is_optional_in_schema() {
        let p = SendMessageTool::parameters_schema();
        let required: Vec<&str> = p["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(required, ["recipient", "text"]);
        assert!(!required.contains(&"quickReplies"));
    }

    #[test]
    fn q18_tool_schema_max_ten_items() {
        let p = SendMessageTool::parameters_schema();
        assert_eq!(p["properties"]["quickReplies"]["maxItems"], 10);
    }

    #[test]
    fn q19_tool_schema_items_are_strings() {
        let p = SendMessageTool::parameters_schema();
        assert_eq!(
            p["properties"]["quickReplies"]["items"],
            json!({"type": "string", "minLength": 1})
        );
    }

    /// Through the dispatcher, which checks the schema before the tool runs: `null` was
    /// accepted by the tool but refused by its schema.
    fn dispatcher(tool: SendMessageTool) -> toolwright_tool_system::Dispatcher {
        let mut r = toolwright_tool_system::ToolRegistry::new();
        r.register(tool).unwrap();
        toolwright_tool_system::Dispatcher::from_registry(r)
    }

    #[tokio::test]
    async fn q4_null_quick_replies_mean_absent_through_the_schema_and_the_tool() {
        let (tool, mut inbox) = setup();
        let d = dispatcher(tool);
        let out = d
            .dispatch(
                "send_message",
                json!({"recipient": "user", "text": "hi", "quickReplies": null}),
                ToolContext::new("c"),
            )
            .await;
        assert!(out.is_ok(), "{}", out.content);
        assert!(inbox.try_recv().unwrap().quick_replies.is_empty());
    }

    #[tokio::test]
    async fn q6_an_option_that_is_empty_after_trimming_is_rejected_with_the_q_error() {
        let (tool, mut inbox) = setup();
        let d = dispatcher(tool);
        for blank in [" ", "\t\n", "\u{3000}"] {
            let out = d
                .dispatch(
                    "send_message",
                    json!({"recipient": "user", "text": "t", "quickReplies": ["Yes", blank]}),
                    ToolContext::new("c"),
                )
                .await;
            assert!(!out.is_ok());
            assert!(
                out.content.contains("quickReplies[1] is empty"),
                "{blank:?}: {}",
                out.content
            );
        }
        assert!(inbox.try_recv().is_none(), "nothing was sent");
    }
}
