//! # messaging — Stage 5
//!
//! * [`QuickReplies`] and [`validate_quick_replies`]: the optional `quickReplies` parameter of
//!   `send_message` (Q1–Q6): an array of at most [`MAX_QUICK_REPLIES`] non-empty strings; an
//!   empty array (or `null`) counts as absent.
//! * [`SendMessageTool`]: the `send_message` tool for the tool-system (Q16–Q19), which validates
//!   its own arguments and posts the message on a [`MessageBus`].
//! * [`MessageBus`]: asynchronous delivery between agents and users (Q7–Q9), by recipient id,
//!   order kept, with a bounded buffer per recipient so that a slow or gone recipient never
//!   blocks a sender or the other recipients (overflow drops the oldest message and counts it).
//!   With the cargo feature `nats`, `MessageBus::connect_nats` puts the same bus on a NATS
//!   JetStream broker, across processes: in order, at least once, repeats dropped by message id
//!   (`docs/bus.md`). [`MessageBus::subscribe_group`] receives a whole family of recipients
//!   (`user:*`) with one subscription shared by every worker as a work queue.
//!   [`Subscription::recv_unconfirmed`] hands out a [`Received`] to confirm once the message is
//!   dealt with (at least once across a crash: unconfirmed, it is handed out again).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use toolwright_messaging::{MessageBus, SendMessageTool};
//! use toolwright_core::{Tool, ToolContext};
//! use serde_json::json;
//!
//! let bus = MessageBus::new();
//! let mut inbox = bus.subscribe("user");
//! let tool = SendMessageTool::new(bus.clone(), "agent");
//! tool.call(json!({"recipient": "user", "text": "Deploy now?", "quickReplies": ["Yes", "No"]}),
//!           ToolContext::new("call_1")).await.unwrap();
//! let msg = inbox.recv().await.unwrap();
//! assert_eq!(msg.quick_replies, vec!["Yes", "No"]);
//! assert_eq!(msg.to_payload()["quickReplies"], json!(["Yes", "No"]));
//! # }
//! ```

mod bus;
mod quick_replies;
mod tool;

#[cfg(feature = "nats")]
pub use bus::NatsConfig;
pub use bus::{
    BusError, BusMessage, DEDUP_WINDOW, DEFAULT_MAILBOX_CAPACITY, Delivery, MAX_FAMILY_LEN,
    MAX_MSG_ID_LEN, MessageBus, OutgoingMessage, Received, Subscription,
};
pub use quick_replies::{
    MAX_QUICK_REPLIES, QuickReplies, QuickRepliesError, quick_replies_schema,
    validate_quick_replies,
};
pub use tool::{MAX_TEXT_CHARS, SEND_MESSAGE, SendMessageTool, call_msg_id};
