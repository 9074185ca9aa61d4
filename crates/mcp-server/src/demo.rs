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
//! [`conformance_tools`] (`"tools": ["conformance"]`) are the tool fixtures the official MCP
//! conformance suite calls by name (`test_simple_text`, `test_image_content`, …).

use std::time::Duration;

use serde_json::{Value, json};
use toolwright_core::{Media, Part, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use toolwright_tool_system::{FnTool, RegistryError, ToolRegistry};

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
    Ok(r)
}
