//! Execution (M4): a call goes to its service over stdio within the service's call timeout (the
//! server's time: not the time a question of the call waits for the person), and
//! every way it can fail becomes a [`ToolError`] the model can act on — service not running, the
//! tool's own error, invalid arguments (with the full schema), a timeout (the server checked and,
//! when it no longer answers, stopped), a crash or a protocol violation mid-call.
//!
//! Results are not capped here: the dispatcher caps every tool result once, whatever its source
//! ([`toolwright_core::cap_result`]). What a server can send is already bounded by the transport
//! ([`crate::process::MAX_MESSAGE_BYTES`] per message), so no cut is needed before the text
//! conversion either.

use std::time::Duration;

use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InputRequest,
    InputResponses, RequestParamsMeta, ResourceContents,
};
use serde_json::{Map, Value};
use toolwright_core::{
    ContentError, Media, Part, ResourceRef, ToolError, ToolErrorKind, ToolOutput,
};
use tracing::Instrument;

use crate::bridge::McpBridge;
use crate::catalog::{self, McpTool};
use crate::connection::{Connection, STOP_GRACE};
use crate::elicitation::InFlight;
use crate::inject::DESCRIBE_TOOL;
use crate::process::MAX_MESSAGE_BYTES;
use crate::registry::ServiceStatus;
use crate::search::SEARCH_TOOL;

/// The most `input_required` rounds one call may take (2026-07-28) before it is refused.
const MAX_INPUT_ROUNDS: usize = 4;

/// Upper bound on the follow-up request that checks a server after a call timed out.
pub(crate) const HEALTH_CHECK: Duration = Duration::from_secs(2);

impl McpBridge {
    /// `tools/call`, answering the server's `input_required` results (the 2026-07-28 way of
    /// asking the person mid-call) through the elicitor and calling again with
    /// `inputResponses`, at most [`MAX_INPUT_ROUNDS`] times. Sampling and roots requests are
    /// not offered by this client, so a server asking for them gets the call refused.
    /// The questions go to the session of the call that got them (`call`), and the call's
    /// timeout stands while they wait for the person.
    async fn call_answering_input(
        &self,
        connection: &Connection,
        service: &str,
        call: &InFlight,
        mut params: CallToolRequestParams,
    ) -> Result<CallToolResult, ServiceError> {
        for _ in 0..MAX_INPUT_ROUNDS {
            match connection
                .call_tool_once(params.clone(), call.call())
                .await?
            {
                CallToolResponse::Complete(result) => return Ok(result),
                CallToolResponse::InputRequired(asked) => {
                    let mut responses = InputResponses::new();
                    for (key, request) in asked.input_requests.unwrap_or_default() {
                        let InputRequest::Elicitation(request) = request else {
                            return Err(ServiceError::UnexpectedResponse);
                        };
                        let answer = self
                            .inner
                            .elicitation
                            .ask_for_call(service, call.call(), request.params)
                            .await;
                        let answer = serde_json::to_value(answer)
                            .map_err(|_| ServiceError::UnexpectedResponse)?;
                        responses.insert(key, answer);
                    }
                    params.input_responses = (!responses.is_empty()).then_some(responses);
                    params.request_state = asked.request_state;
                }
                _ => return Err(ServiceError::UnexpectedResponse),
            }
        }
        Err(ServiceError::InputRequiredRoundsExceeded {
            max_rounds: MAX_INPUT_ROUNDS,
        })
    }

    /// Calls a tool by its exposed name (or its original name when only one running service has
    /// it), or [`DESCRIBE_TOOL`]. Every failure is a [`ToolError`] whose message the model can
    /// act on. The result is the tool's whole result: `structuredContent` as JSON, else the
    /// text; the dispatcher caps what reaches the model.
    pub async fn call(&self, name: &str, args: Value) -> Result<ToolOutput, ToolError> {
        self.call_in(name, args, None, None).await
    }

    /// [`McpBridge::call`] within `session`'s turn (a describe call is remembered there), for
    /// `principal` (whose consent a pair learned from the call needs).
    pub(crate) async fn call_in(
        &self,
        name: &str,
        args: Value,
        session: Option<&str>,
        principal: Option<&str>,
    ) -> Result<ToolOutput, ToolError> {
        if name == DESCRIBE_TOOL {
            return self
                .describe_call(&args, session)
                .await
                .map(ToolOutput::new);
        }
        if name == SEARCH_TOOL {
            return self.search_call(&args, session).await.map(ToolOutput::new);
        }
        let mut tools = self.catalog().await;
        let mut running =
            catalog::resolve(&tools, name).and_then(|t| self.connection_of(&t.service));
        if running.is_none()
            && let Some(service) = self.service_of(name)
            && !self.is_running(&service)
        {
            // A service still starting, not started yet (`autostart: false`) or crashed is
            // waited for or started now, within its startup timeout ([`crate::recovery`]).
            if self.ensure_running_for(&service, principal).await {
                tools = self.catalog().await;
                running =
                    catalog::resolve(&tools, name).and_then(|t| self.connection_of(&t.service));
            }
        }
        // The tool is borrowed from the catalog, not copied (its schema included) on every call.
        let (Some(tool), Some((connection, timeout))) = (catalog::resolve(&tools, name), running)
        else {
            return Err(self.unavailable(name));
        };
        // A call for another principal than the service's OAuth one goes over their own
        // connection, with their token ([`crate::principals`]).
        #[cfg(feature = "http")]
        let (connection, _lease) = match self
            .principal_connection(&tool.service, principal, &connection)
            .await
        {
            Ok(Some(lease)) => (lease.connection.clone(), Some(lease)),
            Ok(None) => (connection, None),
            Err(message) => return Err(ToolError::failed(message)),
        };
        let args = match args {
            Value::Null => Map::new(),
            Value::Object(m) => m,
            other => {
                return Err(invalid_arguments(
                    tool,
                    &format!("arguments must be a JSON object, not {other}"),
                ));
            }
        };
        if let Some(missing) = missing_required(&tool.input_schema, &args) {
            return Err(invalid_arguments(
                tool,
                &format!("missing required argument `{missing}`"),
            ));
        }
        let mut params = CallToolRequestParams::new(tool.name.clone()).with_arguments(args);
        let span = crate::trace::tools_call_span(&tool.name, &tool.service);
        crate::trace::propagate(&span, &mut params);
        // The server may report the call's progress under this token until the call ends
        // (the ticket is dropped with this function's frame).
        let progress = self
            .inner
            .notices
            .ticket(&tool.service, session, &tool.name, &span);
        params.set_progress_token(progress.token());
        // Questions the server asks during the call belong to this session (elicitation), and
        // the call timeout counts the server's time only: it stands while one waits for the
        // person.
        let in_flight = self
            .inner
            .elicitation
            .enter(&tool.service, session, timeout);
        // Dropping the call on timeout sends notifications/cancelled for it.
        let call = self
            .call_answering_input(&connection, &tool.service, &in_flight, params)
            .instrument(span.clone());
        let result = match in_flight.within(call).await {
            Ok(Ok(result)) => {
                self.call_succeeded(&tool.service);
                let converted = convert(tool, result);
                if converted.is_ok() {
                    self.learn_from_call(session, principal, &tool.exposed_name)
                        .await;
                }
                converted
            }
            Ok(Err(ServiceError::McpError(e))) if e.code.0 == -32602 => {
                Err(invalid_arguments(tool, &e.message))
            }
            Ok(Err(ServiceError::McpError(e))) => Err(ToolError::failed(format!(
                "Tool {} failed: {}",
                tool.exposed_name, e.message
            ))
            .with_detail(format!("{e:?}"))),
            Ok(Err(e)) => {
                // The connection ended under the call: wait for the monitor to record why.
                connection.wait_finished(STOP_GRACE * 4).await;
                let why = match self.status(&tool.service) {
                    Ok(ServiceStatus::Error(r)) => r,
                    _ => e.to_string(),
                };
                Err(ToolError::new(
                    ToolErrorKind::Crashed,
                    format!(
                        "The MCP service {} stopped while running {}: {why}. Its tools are unavailable until it is restarted; tell the user, and do not call them again now.",
                        tool.service, tool.exposed_name
                    ),
                )
                .with_detail(format!("{e:?}")))
            }
            Err(_) => {
                let check = HEALTH_CHECK.min(timeout);
                let alive = matches!(
                    tokio::time::timeout(check, connection.peer.list_tools(None)).await,
                    Ok(Ok(_))
                );
                let mut err = ToolError::timeout(&tool.exposed_name, timeout);
                if alive {
                    err.message.push_str(
                        ". The server is still up: try again with a smaller request, or go on without this result.",
                    );
                } else {
                    connection.end(Some(format!(
                        "did not answer tools/call {} within {} ms nor a follow-up request within {} ms; it was stopped",
                        tool.name,
                        timeout.as_millis(),
                        check.as_millis()
                    )));
                    connection.wait_finished(STOP_GRACE * 4).await;
                    err.message.push_str(&format!(
                        ". The MCP service {} stopped answering and was stopped; its tools are unavailable until it is restarted.",
                        tool.service
                    ));
                }
                Err(err.with_detail(format!(
                    "service {} pid {:?} generation {}",
                    connection.service, connection.pid, connection.generation
                )))
            }
        };
        crate::trace::done(&span, &result);
        result
    }
}

/// The invalid-arguments error for `tool`: what is wrong, and the tool's full parameter schema
/// (the model may know the tool only by its level-1 line), so it can fix the call in one round.
pub(crate) fn invalid_arguments(tool: &McpTool, why: &str) -> ToolError {
    ToolError::invalid_arguments(format!(
        "Invalid arguments for {}: {why}. The tool was not run. Its full parameter schema is {}. Call it again with arguments that fit.",
        tool.exposed_name, tool.input_schema
    ))
}

fn missing_required(schema: &Value, args: &Map<String, Value>) -> Option<String> {
    schema
        .get("required")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(Value::as_str)
        .find(|k| !args.contains_key(*k))
        .map(str::to_string)
}

/// The tool's result: `structuredContent` as JSON when there is one, else the text; images,
/// audio and binary resources as parts after it. An `isError` result is a
/// [`ToolErrorKind::Failed`] error with the server's text.
fn convert(tool: &McpTool, result: CallToolResult) -> Result<ToolOutput, ToolError> {
    let (text, parts) = content_parts(&result.content);
    if result.is_error == Some(true) {
        let msg = if text.trim().is_empty() {
            "the tool reported an error without a message".to_string()
        } else {
            text
        };
        return Err(ToolError::failed(format!(
            "Tool {} failed: {msg}",
            tool.exposed_name
        )));
    }
    let value = result.structured_content.unwrap_or(Value::String(text));
    let mut output = ToolOutput::new(value);
    output.parts = parts;
    Ok(output)
}

/// Text blocks joined by newlines, and the media blocks as parts. Media that cannot be taken
/// (a media type its bytes belie, broken base64) is named in the text with the reason, never
/// passed on. A resource with a URI of its own (a `resource_link`, an embedded blob over the
/// inline limit) becomes a [`Part::Resource`] naming that URI: the model is given the server's
/// reference, not a copy.
pub(crate) fn content_parts(content: &[ContentBlock]) -> (String, Vec<Part>) {
    let mut lines: Vec<String> = Vec::new();
    let mut parts = Vec::new();
    let take = |kind: &str,
                media: Result<Media, ContentError>,
                parts: &mut Vec<Part>,
                lines: &mut Vec<String>| match media {
        Ok(m) => parts.push(match kind {
            "image" => Part::Image(m),
            "audio" => Part::Audio(m),
            _ => Part::File(m),
        }),
        Err(e) => lines.push(format!("[{kind} left out: {e}]")),
    };
    for c in content {
        match c {
            ContentBlock::Text(t) => lines.push(t.text.clone()),
            // An image or a sound has no URI to point to: it is taken up to the size of one
            // message, and the dispatcher keeps what passes the inline limit in the agent's
            // blob store (or names it, without one).
            ContentBlock::Image(i) => take(
                "image",
                Media::tool_result_base64(&i.data, &i.mime_type, MAX_MESSAGE_BYTES),
                &mut parts,
                &mut lines,
            ),
            ContentBlock::Audio(a) => take(
                "audio",
                Media::tool_result_base64(&a.data, &a.mime_type, MAX_MESSAGE_BYTES),
                &mut parts,
                &mut lines,
            ),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { text, .. } => lines.push(text.clone()),
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => {
                    let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                    let (kind, media) = if mime.starts_with("image/") {
                        ("image", Media::image_base64(blob, mime))
                    } else {
                        let kind = if mime.starts_with("audio/") {
                            "audio"
                        } else {
                            "file"
                        };
                        (
                            kind,
                            Media::base64(blob, mime).map(|m| m.with_name(uri.clone())),
                        )
                    };
                    match media {
                        Err(ContentError::TooLarge { size, .. }) => parts.push(Part::Resource(
                            ResourceRef::new(uri.clone(), mime, size as u64),
                        )),
                        media => take(kind, media, &mut parts, &mut lines),
                    }
                }
                _ => {
                    lines.push("[a resource of a kind this client does not know, left out]".into())
                }
            },
            ContentBlock::ResourceLink(l) => {
                let mime = l.mime_type.as_deref().unwrap_or("application/octet-stream");
                let mut r = ResourceRef::link(l.uri.clone(), mime).with_name(l.name.clone());
                r.size = l.size;
                parts.push(Part::Resource(r));
            }
            _ => lines.push("[content of a kind this client does not know, left out]".into()),
        }
    }
    (lines.join("\n"), parts)
}

impl McpBridge {
    /// A call reached the server and came back: its failure count starts again.
    fn call_succeeded(&self, service: &str) {
        if let Some(svc) = crate::connection::lock(&self.inner.services).get_mut(service)
            && svc.failures > 0
        {
            crate::recovery::record_success(svc);
        }
    }
}

#[cfg(feature = "http")]
impl McpBridge {
    /// The connection a call to `service` made for `principal` goes over, when it is not the
    /// service's own: `Ok(None)` for a service without OAuth, a call for no principal or for
    /// the OAuth principal; else that principal's connection (made now, asking them to sign in
    /// when they have no token), or why there is none.
    pub(crate) async fn principal_connection(
        &self,
        service: &str,
        principal: Option<&str>,
        own: &Connection,
    ) -> Result<Option<crate::principals::Lease>, String> {
        let Some(principal) = principal else {
            return Ok(None);
        };
        if own
            .oauth_principal
            .as_deref()
            .is_none_or(|p| p == principal)
        {
            return Ok(None);
        }
        let (config, generation) = {
            let map = crate::connection::lock(&self.inner.services);
            let Some(svc) = map.get(service) else {
                return Ok(None);
            };
            (svc.config.clone(), svc.generation)
        };
        if config.url.is_none() {
            return Ok(None);
        }
        let template = crate::connection::lock(&self.inner.oauth).clone();
        let config = config.with_file_oauth(template.as_ref())?;
        let Some(oauth) = config.oauth.clone() else {
            return Ok(None);
        };
        let hooks = crate::connection::Hooks {
            epoch: self.inner.catalog_epoch.clone(),
            elicitation: self.inner.elicitation.clone(),
            notices: self.inner.notices.clone(),
        };
        self.inner
            .principals
            .lease(service, principal, generation, config, oauth, hooks)
            .await
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::Resource;

    #[test]
    fn a_resource_link_keeps_the_servers_own_uri() {
        let mut link = Resource::new("file:///data/scan.tiff", "scan.tiff");
        link.mime_type = Some("image/tiff".into());
        link.size = Some(52_428_800);
        let (text, parts) = content_parts(&[
            ContentBlock::text("scanned"),
            ContentBlock::resource_link(link),
        ]);
        assert_eq!(text, "scanned");
        let Part::Resource(r) = &parts[0] else {
            panic!("expected a resource part, got {parts:?}");
        };
        assert_eq!(r.uri, "file:///data/scan.tiff");
        assert_eq!(r.media_type, "image/tiff");
        assert_eq!(r.size, Some(52_428_800));
        assert_eq!(r.name.as_deref(), Some("scan.tiff"));
    }

    #[test]
    fn an_embedded_blob_over_the_inline_limit_is_referred_to_by_its_uri_not_copied() {
        let blob = "AAAA".repeat(toolwright_core::MAX_INLINE_MEDIA_BYTES / 3 + 10);
        let (text, parts) = content_parts(&[ContentBlock::resource(
            ResourceContents::BlobResourceContents {
                uri: "s3://bucket/dump.bin".into(),
                mime_type: Some("application/octet-stream".into()),
                blob,
                meta: None,
            },
        )]);
        assert_eq!(text, "");
        let Part::Resource(r) = &parts[0] else {
            panic!("expected a resource part, got {parts:?}");
        };
        assert_eq!(r.uri, "s3://bucket/dump.bin");
        assert_eq!(
            r.size,
            Some((toolwright_core::MAX_INLINE_MEDIA_BYTES / 3 + 10) as u64 * 3)
        );
    }

    /// A PNG of `size` bytes: a real header, then filler.
    fn png(size: usize) -> String {
        use base64::Engine as _;
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\x10\0\0\0\x10\0\x08\x06\0\0\0".to_vec();
        png.resize(size, 7);
        base64::engine::general_purpose::STANDARD.encode(&png)
    }

    #[test]
    fn an_image_past_the_inline_limit_is_kept_for_the_blob_store_not_left_out() {
        let size = toolwright_core::MAX_INLINE_MEDIA_BYTES + 1024 * 1024;
        let (text, parts) = content_parts(&[ContentBlock::image(png(size), "image/png")]);
        assert_eq!(text, "");
        let [Part::Image(m)] = parts.as_slice() else {
            panic!("expected one image, got {} parts and {text:?}", parts.len());
        };
        assert_eq!((m.size(), m.media_type.as_str()), (size, "image/png"));
    }

    #[test]
    fn an_image_that_lies_about_its_type_is_still_left_out_whatever_its_size() {
        let size = toolwright_core::MAX_INLINE_MEDIA_BYTES + 1024 * 1024;
        let (text, parts) = content_parts(&[ContentBlock::image(png(size), "image/jpeg")]);
        assert!(parts.is_empty());
        assert!(text.starts_with("[image left out:"), "{text}");
    }
}
