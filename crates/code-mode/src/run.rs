//! One script: the agent's side of the frames (prints, calls, the end), each call through the
//! dispatcher, and what the model gets back.

use std::collections::HashSet;

use serde_json::{Value, json};
use toolwright_core::{ToolContext, ToolError, ToolErrorKind, cap_result};
use toolwright_sandbox::{FrameHandler, FrameReply, RunError, human_bytes};

use crate::CodeModeProvider;
use crate::signature::Function;

/// One call a script made: the tool and how it ended.
struct CallRecord {
    tool: String,
    /// `None` when it succeeded, else the error's kind (`timeout`, `approval_required`, …).
    error: Option<&'static str>,
}

/// The agent's side of one script.
struct Script<'a> {
    provider: &'a CodeModeProvider,
    bound: HashSet<&'a str>,
    ctx: ToolContext,
    calls: Vec<CallRecord>,
    /// The printed text kept for the model (at most `shown_output_bytes`).
    printed: String,
    /// All printed bytes.
    printed_bytes: usize,
    /// A call past the limit was refused once already.
    over_limit: bool,
    /// The runner's end: `Some(None)` finished, `Some(Some(traceback))` raised.
    done: Option<Option<String>>,
    /// What the script gave `final_answer()`.
    answer: Option<String>,
}

fn kind_name(kind: ToolErrorKind) -> &'static str {
    match kind {
        ToolErrorKind::NotFound => "not_found",
        ToolErrorKind::InvalidArguments => "invalid_arguments",
        ToolErrorKind::Timeout => "timeout",
        ToolErrorKind::Crashed => "crashed",
        ToolErrorKind::Unavailable => "unavailable",
        _ => "failed",
    }
}

fn refusal(kind: &'static str, message: String) -> Value {
    json!({"ok": false, "kind": kind, "message": message})
}

impl Script<'_> {
    fn print(&mut self, text: &str) -> FrameReply {
        self.printed_bytes = self.printed_bytes.saturating_add(text.len());
        let room = self
            .provider
            .limits
            .shown_output_bytes
            .saturating_sub(self.printed.len());
        if room > 0 {
            let mut end = room.min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            self.printed.push_str(&text[..end]);
        }
        let max = self.provider.limits.max_output_bytes;
        if self.printed_bytes > max {
            return FrameReply::Stop(format!(
                "it printed more than {} (an output flood)",
                human_bytes(max)
            ));
        }
        FrameReply::Continue
    }

    async fn call(&mut self, name: &str, args: Value) -> FrameReply {
        let limits = &self.provider.limits;
        let record = |calls: &mut Vec<CallRecord>, error| {
            calls.push(CallRecord {
                tool: name.to_owned(),
                error,
            })
        };
        if self.calls.len() >= limits.max_calls {
            if self.over_limit {
                return FrameReply::Stop(format!(
                    "it went on calling tools after reaching its limit of {} calls",
                    limits.max_calls
                ));
            }
            self.over_limit = true;
            record(&mut self.calls, Some("call_limit"));
            return FrameReply::Answer(refusal(
                "call_limit",
                format!(
                    "This script reached its limit of {} tool calls; the call was not run. Finish with what you have, or split the work into several run_code calls.",
                    limits.max_calls
                ),
            ));
        }
        if !self.bound.contains(name) {
            record(&mut self.calls, Some("not_found"));
            return FrameReply::Answer(refusal("not_found", format!("Tool not found: {name}")));
        }
        let tools = &self.provider.tools;
        // The agent's own rules come with the call (`ToolContext::approval_gate`): an operator
        // who gave code mode no policy still cannot have scripts run what the agent holds.
        let agent_holds = self.provider.inherit_agent_approvals
            && self
                .ctx
                .approval_gate
                .as_ref()
                .is_some_and(|gate| gate.requires(name, &args));
        if agent_holds
            || tools.needs_approval(name, &args)
            || self.provider.policy.requires(name, &args)
        {
            record(&mut self.calls, Some("approval_required"));
            return FrameReply::Answer(refusal(
                "approval_required",
                format!(
                    "A call to {name} needs a person's approval, which a script cannot wait for; the call was not run. Call {name} directly as a tool call (not from run_code)."
                ),
            ));
        }
        let mut ctx = ToolContext::new(format!("{}.{}", self.ctx.call_id, self.calls.len() + 1));
        if let Some(s) = &self.ctx.session_id {
            ctx = ctx.with_session(s.clone());
        }
        if let Some(gate) = &self.ctx.approval_gate {
            ctx = ctx.with_approval_gate(gate.clone());
        }
        let outcome = tools.dispatch(name, args, ctx).await;
        let reply = match outcome.error {
            Some(kind) => {
                let message = serde_json::from_str::<Value>(&outcome.content)
                    .ok()
                    .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_else(|| outcome.content.clone());
                record(&mut self.calls, Some(kind_name(kind)));
                refusal(kind_name(kind), message)
            }
            None if outcome.truncated => {
                record(&mut self.calls, Some("result_too_large"));
                json!({
                    "ok": false,
                    "kind": "result_too_large",
                    "message": format!("The result of {name} passed the size cap and was cut; the cut text is in .partial. Ask the tool for less (a filter, a page, a limit)."),
                    "partial": outcome.content,
                })
            }
            None => {
                record(&mut self.calls, None);
                let value = serde_json::from_str::<Value>(&outcome.content)
                    .unwrap_or(Value::String(outcome.content));
                json!({"ok": true, "value": value})
            }
        };
        FrameReply::Answer(reply)
    }

    /// The list of calls for the model: `[{"tool": "a", "ok": true}, {"tool": "b", "error": "timeout"}]`.
    fn calls_json(&self) -> Value {
        Value::Array(
            self.calls
                .iter()
                .map(|c| match c.error {
                    None => json!({"tool": c.tool, "ok": true}),
                    Some(e) => json!({"tool": c.tool, "error": e}),
                })
                .collect(),
        )
    }

    fn cut_note(&self) -> Option<String> {
        (self.printed_bytes > self.printed.len()).then(|| {
            format!(
                "printed output cut: the script printed {} bytes; the first {} are shown. Print less (summarise in the script).",
                self.printed_bytes,
                self.printed.len()
            )
        })
    }

    /// A failed script, as text for the model: what happened, then what it printed and the
    /// calls it made (both bounded).
    fn failure(&self, kind: ToolErrorKind, headline: String) -> ToolError {
        let mut s = headline;
        if self.printed_bytes > 0 {
            s.push_str(&format!(
                "\nPrinted before that ({} bytes{}):\n{}",
                self.printed_bytes,
                if self.cut_note().is_some() {
                    format!(", first {} shown", self.printed.len())
                } else {
                    String::new()
                },
                self.printed
            ));
        } else {
            s.push_str("\nIt printed nothing.");
        }
        s.push_str(&format!("\nTool calls: {}", self.calls_json()));
        ToolError::new(kind, s)
    }
}

#[async_trait::async_trait]
impl FrameHandler for Script<'_> {
    async fn frame(&mut self, frame: Value) -> FrameReply {
        if let Some(text) = frame.get("print").and_then(Value::as_str) {
            return self.print(text);
        }
        if let Some(call) = frame.get("call") {
            let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
            let args = call.get("arguments").cloned().unwrap_or(Value::Null);
            return self.call(name, args).await;
        }
        if let Some(done) = frame.get("done") {
            let error = done.get("error").and_then(Value::as_str).map(|e| {
                // A traceback is the script's; bounded all the same.
                cap_result(e.to_owned(), 4096).0
            });
            self.done = Some(error);
            self.answer = done
                .get("answer")
                .and_then(Value::as_str)
                .map(str::to_owned);
            return FrameReply::Continue;
        }
        FrameReply::Stop(
            "it wrote a line on the runner's channel that the runner never sends".into(),
        )
    }
}

/// Runs `code` with `functions` bound; see [`crate::RUN_CODE`].
pub(crate) async fn run(
    provider: &CodeModeProvider,
    functions: &[Function],
    code: &str,
    ctx: ToolContext,
) -> Result<Value, ToolError> {
    let input = json!({
        "code": code,
        "final_answer": provider.offers_final_answer(functions),
        "functions": functions.iter().map(Function::runner_spec).collect::<Vec<_>>(),
    });
    let mut script = Script {
        provider,
        bound: functions.iter().map(|f| f.tool.as_str()).collect(),
        ctx,
        calls: Vec::new(),
        printed: String::new(),
        printed_bytes: 0,
        over_limit: false,
        done: None,
        answer: None,
    };
    let result = provider
        .sandbox
        .run_interactive(&provider.runner, &input, &mut script)
        .await;
    let done = script.done.take();
    match (result, done) {
        (Ok(()), Some(None)) => {
            let mut out = json!({"printed": script.printed, "calls": script.calls_json()});
            let mut notes: Vec<String> = script.cut_note().into_iter().collect();
            let shown = provider.limits.shown_output_bytes;
            match script.answer.take() {
                Some(answer) if answer.len() <= shown => out["answer"] = Value::String(answer),
                Some(answer) => {
                    notes.push(format!(
                        "final_answer() got {} bytes, more than the {} a reply may have: it is not the reply; its start is in answer_cut. Answer the user yourself, shorter.",
                        answer.len(),
                        human_bytes(shown)
                    ));
                    out["answer_cut"] = Value::String(cap_result(answer, shown).0);
                }
                None => {}
            }
            if !notes.is_empty() {
                out["note"] = Value::String(notes.join(" "));
            }
            Ok(out)
        }
        (Ok(()), Some(Some(error))) => Err(script.failure(
            ToolErrorKind::Failed,
            format!("The script raised an error and stopped:\n{}", error.trim_end()),
        )),
        (Ok(()), None) => Err(script.failure(
            ToolErrorKind::Failed,
            "The script ended its process before it finished (os._exit?); what it would have done after is unknown.".to_owned(),
        )),
        (Err(RunError::Timeout { secs, .. }), _) => Err(script.failure(
            ToolErrorKind::Timeout,
            format!(
                "The script was stopped after {secs} s, its time limit (an endless loop, or more slow calls than one script can wait for?)."
            ),
        )),
        (Err(RunError::Stopped { reason, .. }), _) => Err(script.failure(
            ToolErrorKind::Failed,
            format!("The script was stopped: {reason}."),
        )),
        (Err(RunError::OutputTooLarge { limit, stream, .. }), _) => Err(script.failure(
            ToolErrorKind::Failed,
            format!(
                "The script was stopped: it wrote more than {limit} to its process's {stream} (an output flood)."
            ),
        )),
        (Err(RunError::Failed { reason, .. }), _) => Err(script.failure(
            ToolErrorKind::Crashed,
            format!(
                "The script's Python process {}.",
                cap_result(reason, 600).0
            ),
        )),
        (Err(e @ (RunError::Refused { .. } | RunError::Spawn { .. })), _) => {
            Err(ToolError::unavailable(format!(
                "The script could not be run: {e}"
            )))
        }
        (Err(e), _) => Err(script.failure(
            ToolErrorKind::Failed,
            format!("The script was stopped: {e}."),
        )),
    }
}
