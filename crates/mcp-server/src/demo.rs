//! The built-in demo tools (`"tools": ["demo"]` in the config file): enough to try a client
//! against the server, and what its tests call.
//!
//! - `echo` `{text}` → the text;
//! - `add` `{a, b}` → their sum;
//! - `pixel` → a text and a 1×1 PNG image part (MCP image content);
//! - `chime` → a text and a short WAV audio part (MCP audio content);
//! - `transfer` `{to, amount}` → a made-up receipt: the tool to hold for approval
//!   (`"requireApproval": ["transfer"]`);
//! - `sleep` `{seconds}` → waits, then says so: a call the time limit stops.
//!
//! [`conformance_tools`], [`ConformanceResources`] and [`ConformancePrompts`]
//! (`"tools": ["conformance"]`) are the fixtures the official MCP conformance suite's server
//! scenarios ask for by name (`test_simple_text`, `test://static-text`,
//! `test_prompt_with_arguments`, …); the tools among them that talk back to the client
//! mid-call (log, progress, sampling, elicitation) show how a tool uses
//! [`ToolContext::caller`].

use std::time::Duration;

use rmcp::model::{
    GetPromptResult, Prompt, PromptArgument, PromptMessage, Resource, ResourceContents,
    ResourceTemplate, Role,
};
use serde_json::{Map, Value, json};
use toolwright_core::{
    Caller, Elicited, LogLevel, Media, MediaSource, Part, Tool, ToolContext, ToolError, ToolOutput,
    ToolSpec,
};
use toolwright_tool_system::{FnTool, RegistryError, ToolRegistry};

use crate::offers::{OfferError, Prompts, Resources, match_uri_template};

/// A 1×1 PNG.
pub const PIXEL_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A WAV file with no samples (44-byte header).
pub const SILENT_WAV: &[u8] = &[
    0x52, 0x49, 0x46, 0x46, 0x24, 0x00, 0x00, 0x00, 0x57, 0x41, 0x56, 0x45, 0x66, 0x6d, 0x74, 0x20,
    0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x44, 0xac, 0x00, 0x00, 0x88, 0x58, 0x01, 0x00,
    0x02, 0x00, 0x10, 0x00, 0x64, 0x61, 0x74, 0x61, 0x00, 0x00, 0x00, 0x00,
];

/// A tool answering a fixed text and media parts; its schema is given as it is (no
/// normalisation), as a server that passes on another's tools would.
struct MediaTool {
    spec: ToolSpec,
    text: &'static str,
    parts: &'static [fn() -> Result<Part, ToolError>],
}

#[async_trait::async_trait]
impl Tool for MediaTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }
    async fn call(&self, _args: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let mut out = ToolOutput::new(json!(self.text));
        for part in self.parts {
            out = out.with_part(part()?);
        }
        Ok(out)
    }
}

fn pixel() -> Result<Part, ToolError> {
    Media::image_bytes(PIXEL_PNG, "image/png")
        .map(Part::Image)
        .map_err(|e| ToolError::failed(e.to_string()))
}

fn chime() -> Result<Part, ToolError> {
    Media::bytes(SILENT_WAV, "audio/wav")
        .map(Part::Audio)
        .map_err(|e| ToolError::failed(e.to_string()))
}

fn note() -> Result<Part, ToolError> {
    let mut m = Media::bytes(b"This is an embedded resource content.", "text/plain")
        .map_err(|e| ToolError::failed(e.to_string()))?;
    m.name = Some("note.txt".into());
    Ok(Part::File(m))
}

fn pixel_base64() -> String {
    match Media::bytes(PIXEL_PNG, "image/png").map(|m| m.source) {
        Ok(MediaSource::Base64 { data }) => data,
        _ => String::new(),
    }
}

/// The client that made the call, or an error the model can read.
fn caller(ctx: &ToolContext) -> Result<&dyn Caller, ToolError> {
    ctx.caller.as_deref().ok_or_else(|| {
        ToolError::unavailable(
            "this tool talks to the MCP client that calls it; call it through the MCP server",
        )
    })
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

/// The demo tools.
pub fn tools() -> Result<ToolRegistry, RegistryError> {
    let mut r = ToolRegistry::new();
    r.register(
        FnTool::new(
            "echo",
            "Echo the text back.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            |args, _| async move { Ok(args["text"].clone()) },
        )
        .idempotent(),
    )?;
    r.register(
        FnTool::new(
            "add",
            "Add two numbers.",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
            |args, _| async move {
                let (Some(a), Some(b)) = (args["a"].as_f64(), args["b"].as_f64()) else {
                    return Err(ToolError::invalid_arguments("give two numbers, a and b"));
                };
                Ok(json!(a + b))
            },
        )
        .idempotent(),
    )?;
    r.register(MediaTool {
        spec: ToolSpec::new("pixel", "A 1x1 PNG image.", no_args()),
        text: "a 1x1 PNG",
        parts: &[pixel],
    })?;
    r.register(MediaTool {
        spec: ToolSpec::new("chime", "A short silent WAV sound.", no_args()),
        text: "a silent WAV",
        parts: &[chime],
    })?;
    r.register(FnTool::new(
        "transfer",
        "Transfer an amount of money to someone (a demo: nothing is sent).",
        json!({"type": "object", "properties": {"to": {"type": "string"}, "amount": {"type": "number"}}, "required": ["to", "amount"]}),
        |args, _| async move {
            Ok(json!({"sent": args["amount"], "to": args["to"], "receipt": "demo-0001"}))
        },
    ))?;
    r.register(FnTool::new(
        "sleep",
        "Wait for some seconds, then say so.",
        json!({"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0}}, "required": ["seconds"]}),
        |args, _| async move {
            let s = args["seconds"].as_f64().unwrap_or(0.0).clamp(0.0, 86_400.0);
            tokio::time::sleep(Duration::from_secs_f64(s)).await;
            Ok(json!(format!("slept {s} s")))
        },
    ))?;
    Ok(r)
}

/// The tool fixtures of the official MCP conformance suite's server scenarios: text, image,
/// audio, an embedded resource, all three, an error, and a JSON Schema 2020-12 input schema
/// passed on unchanged.
pub fn conformance_tools() -> Result<ToolRegistry, RegistryError> {
    let mut r = ToolRegistry::new();
    r.register(FnTool::new(
        "test_simple_text",
        "Returns a simple text.",
        no_args(),
        |_, _| async { Ok(json!("This is a simple text response for testing.")) },
    ))?;
    r.register(MediaTool {
        spec: ToolSpec::new("test_image_content", "Returns an image.", no_args()),
        text: "",
        parts: &[pixel],
    })?;
    r.register(MediaTool {
        spec: ToolSpec::new("test_audio_content", "Returns a sound.", no_args()),
        text: "",
        parts: &[chime],
    })?;
    r.register(MediaTool {
        spec: ToolSpec::new(
            "test_embedded_resource",
            "Returns an embedded resource.",
            no_args(),
        ),
        text: "",
        parts: &[note],
    })?;
    r.register(MediaTool {
        spec: ToolSpec::new(
            "test_multiple_content_types",
            "Returns a text, an image and an embedded resource.",
            no_args(),
        ),
        text: "Multiple content types test:",
        parts: &[pixel, note],
    })?;
    r.register(FnTool::new(
        "test_error_handling",
        "Always fails.",
        no_args(),
        |_, _| async {
            Err(ToolError::failed(
                "This tool intentionally returns an error for testing",
            ))
        },
    ))?;
    r.register(MediaTool {
        spec: ToolSpec::new(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {
                    "address": {
                        "type": "object",
                        "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
                    }
                },
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"}
                },
                "additionalProperties": false
            }),
        ),
        text: "ok",
        parts: &[],
    })?;
    conformance_caller_tools(&mut r)?;
    Ok(r)
}

/// Elicits with `schema`; the answer as the suite reads it.
async fn elicited(ctx: &ToolContext, message: &str, schema: Value) -> Result<Value, ToolError> {
    let answer = caller(ctx)?.elicit(message, schema).await?;
    Ok(json!(match answer {
        Elicited::Accept(content) =>
            format!("Elicitation completed: action=accept, content={content}"),
        Elicited::Decline => "Elicitation completed: action=decline, content={}".to_owned(),
        _ => "Elicitation completed: action=cancel, content={}".to_owned(),
    }))
}

/// The conformance suite's tools that talk back to the client while they run: log lines,
/// progress, a question to the client's model (sampling) and to its person (elicitation), and
/// a call that takes a moment (`test_reconnection`, answered on the resumable SSE stream).
fn conformance_caller_tools(r: &mut ToolRegistry) -> Result<(), RegistryError> {
    r.register(FnTool::new(
        "test_tool_with_logging",
        "Sends three log lines while it runs.",
        no_args(),
        |_, ctx| async move {
            let c = caller(&ctx)?;
            c.log(LogLevel::Info, "Tool execution started").await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            c.log(LogLevel::Info, "Tool processing data").await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            c.log(LogLevel::Info, "Tool execution completed").await;
            Ok(json!("Tool with logging executed successfully"))
        },
    ))?;
    r.register(FnTool::new(
        "test_tool_with_progress",
        "Reports progress 0, 50 and 100 of 100 while it runs.",
        no_args(),
        |_, ctx| async move {
            let c = caller(&ctx)?;
            for (i, done) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                c.progress(done, Some(100.0)).await;
            }
            Ok(json!("Tool with progress executed successfully"))
        },
    ))?;
    r.register(FnTool::new(
        "test_sampling",
        "Asks the client's model the prompt and returns its answer.",
        json!({"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}),
        |args, ctx| async move {
            let Some(prompt) = args["prompt"].as_str() else {
                return Err(ToolError::invalid_arguments("give the prompt, a string"));
            };
            let answer = caller(&ctx)?.sample(prompt, 100).await?;
            Ok(json!(format!("LLM response: {answer}")))
        },
    ))?;
    r.register(FnTool::new(
        "test_elicitation",
        "Asks the client's person for a username and an email.",
        json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
        |args, ctx| async move {
            let Some(message) = args["message"].as_str() else {
                return Err(ToolError::invalid_arguments("give the message, a string"));
            };
            let schema = json!({
                "type": "object",
                "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}
                },
                "required": ["username", "email"]
            });
            let answer = caller(&ctx)?.elicit(message, schema).await?;
            Ok(json!(match answer {
                Elicited::Accept(content) => format!("User response: action=accept, content={content}"),
                Elicited::Decline => "User response: action=decline".to_owned(),
                _ => "User response: action=cancel".to_owned(),
            }))
        },
    ))?;
    r.register(FnTool::new(
        "test_elicitation_sep1034_defaults",
        "Asks the client's person a form whose every field has a default.",
        no_args(),
        |_, ctx| async move {
            let schema = json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "description": "Verification status", "default": true}
                }
            });
            elicited(&ctx, "Please review and update the form fields with defaults", schema).await
        },
    ))?;
    r.register(FnTool::new(
        "test_elicitation_sep1330_enums",
        "Asks the client's person a form with every kind of enum field.",
        no_args(),
        |_, ctx| async move {
            let schema = json!({
                "type": "object",
                "properties": {
                    "untitledSingle": {"type": "string", "description": "Choose an option", "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "description": "Choose a titled option", "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"}
                    ]},
                    "legacyEnum": {"type": "string", "description": "Choose a legacy option", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "description": "Choose multiple options", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "description": "Choose multiple titled options", "items": {"anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"}
                    ]}}
                }
            });
            elicited(&ctx, "Please select options from the enum fields", schema).await
        },
    ))?;
    r.register(FnTool::new(
        "test_reconnection",
        "Takes a moment, then answers: a call a client follows on a resumable SSE stream.",
        no_args(),
        |_, _| async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(json!("Reconnection test completed"))
        },
    ))?;
    Ok(())
}

/// The conformance suite's resources: `test://static-text`, `test://static-binary` (a PNG),
/// `test://watched-resource` (to subscribe to) and the template `test://template/{id}/data`,
/// whose `id` completes from `123`, `456`, `789`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConformanceResources;

const DATA_TEMPLATE: &str = "test://template/{id}/data";
const TEMPLATE_IDS: [&str; 3] = ["123", "456", "789"];

#[async_trait::async_trait]
impl Resources for ConformanceResources {
    async fn list(&self) -> Vec<Resource> {
        vec![
            Resource::new("test://static-text", "static-text")
                .with_description("A static text resource")
                .with_mime_type("text/plain"),
            Resource::new("test://static-binary", "static-binary")
                .with_description("A static 1x1 PNG")
                .with_mime_type("image/png"),
            Resource::new("test://watched-resource", "watched-resource")
                .with_description("A resource to subscribe to")
                .with_mime_type("text/plain"),
        ]
    }

    async fn templates(&self) -> Vec<ResourceTemplate> {
        vec![
            ResourceTemplate::new(DATA_TEMPLATE, "template-data")
                .with_description("Data for an id")
                .with_mime_type("application/json"),
        ]
    }

    async fn read(
        &self,
        uri: &str,
        _max_bytes: usize,
    ) -> Result<Vec<ResourceContents>, OfferError> {
        let contents = match uri {
            "test://static-text" => {
                ResourceContents::text("This is the content of the static text resource.", uri)
                    .with_mime_type("text/plain")
            }
            "test://static-binary" => {
                ResourceContents::blob(pixel_base64(), uri).with_mime_type("image/png")
            }
            "test://watched-resource" => ResourceContents::text("Watched resource content.", uri)
                .with_mime_type("text/plain"),
            _ => {
                let vars = match_uri_template(DATA_TEMPLATE, uri)
                    .ok_or_else(|| OfferError::UnknownResource(uri.into()))?;
                let id = vars.get("id").cloned().unwrap_or_default();
                let body =
                    json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                ResourceContents::text(body.to_string(), uri).with_mime_type("application/json")
            }
        };
        Ok(vec![contents])
    }

    async fn complete(
        &self,
        template: &str,
        argument: &str,
        value: &str,
    ) -> Result<Vec<String>, OfferError> {
        if template != DATA_TEMPLATE || argument != "id" {
            return Err(OfferError::UnknownArgument {
                of: template.into(),
                argument: argument.into(),
            });
        }
        Ok(TEMPLATE_IDS
            .iter()
            .filter(|i| i.starts_with(value))
            .map(|i| (*i).to_owned())
            .collect())
    }
}

/// The conformance suite's prompts: `test_simple_prompt`, `test_prompt_with_arguments`
/// (`arg1`, `arg2`; `arg1` completes from `paris`, `park`, `party`),
/// `test_prompt_with_embedded_resource` (`resourceUri`) and `test_prompt_with_image`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConformancePrompts;

fn text_arg(prompt: &str, args: &Map<String, Value>, name: &str) -> Result<String, OfferError> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| OfferError::MissingArgument {
            prompt: prompt.into(),
            argument: name.into(),
        })
}

#[async_trait::async_trait]
impl Prompts for ConformancePrompts {
    async fn list(&self) -> Vec<Prompt> {
        let arg = |n: &str, d: &str| {
            PromptArgument::new(n)
                .with_description(d)
                .with_required(true)
        };
        vec![
            Prompt::new(
                "test_simple_prompt",
                Some("A simple prompt without arguments"),
                None,
            ),
            Prompt::new(
                "test_prompt_with_arguments",
                Some("A prompt with two arguments"),
                Some(vec![
                    arg("arg1", "First test argument"),
                    arg("arg2", "Second test argument"),
                ]),
            ),
            Prompt::new(
                "test_prompt_with_embedded_resource",
                Some("A prompt with an embedded resource"),
                Some(vec![arg("resourceUri", "URI of the resource to embed")]),
            ),
            Prompt::new(
                "test_prompt_with_image",
                Some("A prompt with an image"),
                None,
            ),
        ]
    }

    async fn get(
        &self,
        name: &str,
        args: &Map<String, Value>,
    ) -> Result<GetPromptResult, OfferError> {
        let messages = match name {
            "test_simple_prompt" => {
                vec![PromptMessage::new_text(
                    Role::User,
                    "This is a simple prompt for testing.",
                )]
            }
            "test_prompt_with_arguments" => {
                let (a, b) = (text_arg(name, args, "arg1")?, text_arg(name, args, "arg2")?);
                vec![PromptMessage::new_text(
                    Role::User,
                    format!("Prompt with arguments: arg1='{a}', arg2='{b}'"),
                )]
            }
            "test_prompt_with_embedded_resource" => {
                let uri = text_arg(name, args, "resourceUri")?;
                vec![
                    PromptMessage::new(
                        Role::User,
                        rmcp::model::ContentBlock::resource(
                            ResourceContents::text("Embedded resource content for testing.", uri)
                                .with_mime_type("text/plain"),
                        ),
                    ),
                    PromptMessage::new_text(
                        Role::User,
                        "Please process the embedded resource above.",
                    ),
                ]
            }
            "test_prompt_with_image" => vec![
                PromptMessage::new(
                    Role::User,
                    rmcp::model::ContentBlock::image(pixel_base64(), "image/png"),
                ),
                PromptMessage::new_text(Role::User, "Please analyze the image above."),
            ],
            _ => return Err(OfferError::UnknownPrompt(name.into())),
        };
        Ok(GetPromptResult::new(messages))
    }

    async fn complete(
        &self,
        prompt: &str,
        argument: &str,
        value: &str,
    ) -> Result<Vec<String>, OfferError> {
        let known = match prompt {
            "test_prompt_with_arguments" => &["arg1", "arg2"][..],
            "test_prompt_with_embedded_resource" => &["resourceUri"][..],
            "test_simple_prompt" | "test_prompt_with_image" => &[][..],
            _ => return Err(OfferError::UnknownPrompt(prompt.into())),
        };
        if !known.contains(&argument) {
            return Err(OfferError::UnknownArgument {
                of: prompt.into(),
                argument: argument.into(),
            });
        }
        let values: &[&str] = if argument == "arg1" {
            &["paris", "park", "party"]
        } else {
            &[]
        };
        Ok(values
            .iter()
            .filter(|v| v.starts_with(value))
            .map(|v| (*v).to_owned())
            .collect())
    }
}
