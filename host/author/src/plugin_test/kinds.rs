//! Running one case against each kind of plugin: a tool call, a hook event, memory turns and a
//! recall, a context engine's decision and compression, an adapter's webhook, poll or send.
//! Each gives text (JSON for adapters) for the case's expectations, and may add reasons of its
//! own (a hook's decision, a compressed history's validity and length).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use talaria_core::runtime::adapter::{AccountSpec, ChatType, Outbound, PlatformEvent, WebhookRequest};
use talaria_core::runtime::{Plugin, Runtime, ToolContext};
use talaria_protocol::{
    CompressRequest, ContextStatus, HookDecision, HookEvent, HookKind, Message, PluginSession, ToolCall, ToolCallEvent,
    ToolResultEvent,
};

use super::Scratch;
use super::cases::{Case, Target};

/// What a case's call gave (text, or the error), and reasons it failed beyond the common
/// expectations.
pub(super) type Outcome = (Result<String, String>, Vec<String>);

/// Run `case` against `plugin`, which is of `target`'s kind.
pub(super) async fn run(
    runtime: &Arc<Runtime>,
    plugin: &Plugin,
    scratch: &Scratch,
    n: usize,
    case: &Case,
    target: Target,
) -> Outcome {
    let session = PluginSession {
        session_id: "plugin-test".into(),
        platform: "cli".into(),
        workspace: scratch.workspace().display().to_string(),
        model: "plugin-test".into(),
    };
    match target {
        Target::Tool => (tool(runtime, scratch, n, case).await, Vec::new()),
        Target::Hook => hook(runtime, plugin, case, &session).await,
        Target::Memory => (memory(runtime, plugin, case, &session).await, Vec::new()),
        Target::Context => context(runtime, plugin, case, &session).await,
        Target::Adapter => (adapter(runtime, plugin, case).await, Vec::new()),
    }
}

/// The case's input, in short, for the report.
pub(super) fn shown_input(case: &Case, target: Target) -> Value {
    let args = || serde_json::to_value(&case.args).unwrap_or_else(|_| json!({}));
    match target {
        Target::Tool => args(),
        Target::Hook => match (&case.tool, case.args.is_empty()) {
            (Some(tool), _) => json!({ "tool": tool, "args": args() }),
            (None, true) => json!({}),
            (None, false) => json!({ "args": args() }),
        },
        Target::Memory => {
            let mut shown = serde_json::Map::new();
            if !case.turns.is_empty() {
                shown.insert("turns".into(), json!(case.turns.len()));
            }
            if let Some(query) = &case.prefetch {
                shown.insert("prefetch".into(), json!(query));
            }
            Value::Object(shown)
        }
        Target::Context => json!({
            "messages": history(case).map_or(0, |h| h.len()),
            "prompt_tokens": case.prompt_tokens.unwrap_or(0),
            "context_length": case.context_length.unwrap_or(0),
        }),
        Target::Adapter => match (&case.webhook, &case.send) {
            (Some(w), _) => {
                json!({ "method": w.method.as_deref().unwrap_or("POST"), "path": w.path.as_deref().unwrap_or("/") })
            }
            (None, Some(s)) => json!({ "chat_id": s.chat_id, "text": s.text }),
            (None, None) => json!({}),
        },
    }
}

async fn tool(runtime: &Runtime, scratch: &Scratch, n: usize, case: &Case) -> Result<String, String> {
    let args = serde_json::to_value(&case.args).unwrap_or_else(|_| json!({}));
    let name = case.tool.as_deref().unwrap_or_default();
    let context = ToolContext {
        session_id: "plugin-test".into(),
        call_id: format!("test-{}", n + 1),
        ..ToolContext::new(name, args).in_workspace(scratch.workspace())
    };
    runtime.call(&context).await.map(|o| o.output).map_err(|e| e.to_string())
}

/// The hook event a case describes (its name was checked when the file was read).
fn event(case: &Case) -> HookEvent {
    let call = ToolCallEvent {
        tool: case.tool.clone().unwrap_or_default(),
        plugin: String::new(),
        arguments: serde_json::to_string(&case.args).unwrap_or_else(|_| "{}".into()),
        call_id: "test-call".into(),
    };
    let result = || ToolResultEvent {
        call: call.clone(),
        result: case.result.clone().unwrap_or_default(),
        ok: case.ok.unwrap_or(true),
        duration_ms: 5,
    };
    let user_message = case.user_message.clone().unwrap_or_default();
    let reason = || case.reason.clone().unwrap_or_else(|| "completed".into());
    match HookKind::parse(case.event.as_deref().unwrap_or_default()).unwrap_or(HookKind::PreToolCall) {
        HookKind::PreToolCall => HookEvent::PreToolCall(call.clone()),
        HookKind::PostToolCall => HookEvent::PostToolCall(result()),
        HookKind::TransformToolResult => HookEvent::TransformToolResult(result()),
        HookKind::PreLlmCall => {
            HookEvent::PreLlmCall { user_message, is_first_turn: true, model: "plugin-test".into(), message_count: 1 }
        }
        HookKind::PostLlmCall => HookEvent::PostLlmCall {
            user_message,
            assistant_response: case.assistant_response.clone().unwrap_or_default(),
            model: "plugin-test".into(),
        },
        HookKind::OnSessionStart => HookEvent::SessionStart,
        HookKind::OnSessionEnd => HookEvent::SessionEnd { reason: reason() },
        HookKind::OnSessionFinalize => HookEvent::SessionFinalize { reason: reason() },
        HookKind::OnSessionReset => HookEvent::SessionReset,
        HookKind::SubagentStop => HookEvent::SubagentStop {
            parent_session_id: "plugin-test".into(),
            child_session_id: "plugin-test-child".into(),
            goal: user_message,
            summary: case.assistant_response.clone().unwrap_or_default(),
            status: reason(),
            duration_ms: 5,
        },
    }
}

/// The decision's name (as `expect_decision` says it) and text.
fn decision(d: &HookDecision) -> (&'static str, &str) {
    match d {
        HookDecision::Proceed => ("proceed", ""),
        HookDecision::Block(t) => ("block", t),
        HookDecision::RequireApproval(t) => ("require_approval", t),
        HookDecision::AddContext(t) => ("add_context", t),
        HookDecision::ReplaceResult(t) => ("replace_result", t),
    }
}

async fn hook(runtime: &Runtime, plugin: &Plugin, case: &Case, session: &PluginSession) -> Outcome {
    let event = event(case);
    if !plugin.wants(event.kind()) {
        let wanted: Vec<&str> = plugin.hook_events().iter().map(|k| k.name()).collect();
        let wanted = if wanted.is_empty() { "none".to_string() } else { wanted.join(", ") };
        let why = format!(
            "the plugin does not ask for {} events ([hook] events in plugin.toml: {wanted}), so the host would never send this one",
            event.kind().name()
        );
        return (Err(why), Vec::new());
    }
    match runtime.hook(plugin, &event, session).await {
        Ok(d) => {
            let (name, text) = decision(&d);
            let mut reasons = Vec::new();
            if let Some(wanted) = &case.expect_decision
                && wanted != name
            {
                let said = if text.is_empty() { String::new() } else { format!(": {text:?}") };
                reasons.push(format!("expected the decision {wanted}, got {name}{said}"));
            }
            (Ok(text.to_string()), reasons)
        }
        Err(e) => (Err(e.to_string()), Vec::new()),
    }
}

async fn memory(runtime: &Runtime, plugin: &Plugin, case: &Case, session: &PluginSession) -> Result<String, String> {
    for (i, turn) in case.turns.iter().enumerate() {
        runtime
            .memory_sync_turn(plugin, &turn.user, &turn.assistant, session)
            .await
            .map_err(|e| format!("sync_turn of turn {} failed: {e}", i + 1))?;
    }
    if case.system_prompt {
        runtime.memory_prompt_block(plugin, session).await.map_err(|e| e.to_string())
    } else if let Some(query) = &case.prefetch {
        runtime.memory_prefetch(plugin, query, session).await.map_err(|e| e.to_string())
    } else {
        Ok(String::new())
    }
}

/// The case's history: `history = N` makes N messages, user and assistant in turn (a valid
/// conversation); a list gives each message.
pub(super) fn history(case: &Case) -> Result<Vec<Message>, String> {
    match &case.history {
        None => Ok(Vec::new()),
        Some(toml::Value::Integer(n)) if *n >= 0 => Ok((0..*n)
            .map(|i| {
                let turn = i / 2 + 1;
                if i % 2 == 0 {
                    Message::user(format!("Question {turn}: what about part {turn} of the plan?"))
                } else {
                    Message::assistant(format!("Answer {turn}: part {turn} is done."))
                }
            })
            .collect()),
        Some(toml::Value::Array(items)) => items.iter().enumerate().map(|(i, item)| message(i, item)).collect(),
        Some(other) => {
            Err(format!("history = {other} is neither a number of messages nor a list of {{ role, content }}"))
        }
    }
}

/// One `{ role, content, tool_calls, tool_call_id, name }` of a history list.
fn message(i: usize, item: &toml::Value) -> Result<Message, String> {
    let at = |why: String| format!("history message {}: {why}", i + 1);
    let table = item.as_table().ok_or_else(|| at("not a table like { role = \"user\", content = \"...\" }".into()))?;
    let text = |key: &str| table.get(key).and_then(toml::Value::as_str).unwrap_or_default().to_string();
    let content = text("content");
    match text("role").as_str() {
        "user" => Ok(Message::user(content)),
        "assistant" => {
            let calls = table.get("tool_calls").and_then(toml::Value::as_array).cloned().unwrap_or_default();
            let calls = calls
                .iter()
                .map(|c| {
                    let field = |k: &str| c.get(k).and_then(toml::Value::as_str).unwrap_or_default().to_string();
                    let arguments = c.get("arguments").map_or_else(
                        || "{}".into(),
                        |a| match a {
                            toml::Value::String(s) => s.clone(),
                            other => serde_json::to_string(other).unwrap_or_default(),
                        },
                    );
                    ToolCall::new(field("id"), field("name"), arguments)
                })
                .collect();
            Ok(Message::Assistant { content, tool_calls: calls, reasoning: None, extra: None })
        }
        "tool" => Ok(Message::tool(text("tool_call_id"), text("name"), content)),
        other => Err(at(format!(
            "role = {other:?}: use user, assistant or tool (the system prompt is not part of the history)"
        ))),
    }
}

async fn context(runtime: &Runtime, plugin: &Plugin, case: &Case, session: &PluginSession) -> Outcome {
    let messages = match history(case) {
        Ok(m) => m,
        Err(e) => return (Err(e), Vec::new()),
    };
    let status = ContextStatus {
        prompt_tokens: case.prompt_tokens.unwrap_or(0),
        context_length: case.context_length.unwrap_or(0),
        message_count: u32::try_from(messages.len()).unwrap_or(u32::MAX),
        compressions: 0,
    };
    let mut reasons = Vec::new();
    if case.expect_should_compress.is_some() || !case.compress {
        match runtime.context_should_compress(plugin, status, session).await {
            Ok(answer) => {
                if let Some(wanted) = case.expect_should_compress
                    && wanted != answer
                {
                    reasons.push(format!(
                        "expected should_compress to answer {wanted} at {} of {} tokens, got {answer}",
                        status.prompt_tokens, status.context_length
                    ));
                }
                if !case.compress {
                    return (Ok(format!("should_compress: {answer}")), reasons);
                }
            }
            Err(e) => return (Err(e.to_string()), reasons),
        }
    }
    let request = CompressRequest {
        messages,
        focus: case.focus.clone(),
        status,
        force: true,
        memory_context: String::new(),
        carry: String::new(),
    };
    let out = match runtime.context_compress(plugin, request, session).await {
        Ok(out) => out,
        Err(e) => return (Err(e.to_string()), reasons),
    };
    // The host's own check: the same one that keeps the old history in a session.
    if out.messages.is_empty() || !talaria_core::agent::history::is_valid(&out.messages) {
        reasons.push(format!(
            "the history compress returned is not a valid conversation, so the host would keep the old one: \
             it must start with a user message, never have two user messages in a row, and answer every tool call \
             with its results ({})",
            roles(&out.messages)
        ));
    }
    if let Some(wanted) = case.expect_messages
        && wanted != out.messages.len()
    {
        reasons.push(format!("expected a compressed history of {wanted} messages, got {}", out.messages.len()));
    }
    let mut text: Vec<String> =
        out.messages.iter().map(|m| format!("{}: {}", m.role().as_str(), m.content())).collect();
    text.push(format!("note: {}", out.note));
    (Ok(text.join("\n")), reasons)
}

/// The roles of `messages`, in short: `user, assistant, tool, ...`.
fn roles(messages: &[Message]) -> String {
    if messages.is_empty() {
        return "it returned no messages".into();
    }
    let all: Vec<&str> = messages.iter().take(12).map(|m| m.role().as_str()).collect();
    let more = if messages.len() > 12 { ", ..." } else { "" };
    format!("roles: {}{more}", all.join(", "))
}

async fn adapter(runtime: &Arc<Runtime>, plugin: &Plugin, case: &Case) -> Result<String, String> {
    let account = AccountSpec { name: "test".into(), config: case.config.clone(), ..AccountSpec::default() };
    let adapter = runtime.adapter(plugin.name(), account).map_err(|e| e.to_string())?;
    adapter.connect().await.map_err(|e| format!("connect failed: {e}"))?;
    // What connecting recorded is not this call's.
    runtime.take_recorded_imports();
    if let Some(w) = &case.webhook {
        let body = match (&w.body, &w.json) {
            (_, Some(value)) => serde_json::to_vec(value).map_err(|e| e.to_string())?,
            (Some(text), None) => text.clone().into_bytes(),
            (None, None) => Vec::new(),
        };
        let request = WebhookRequest {
            method: w.method.clone().unwrap_or_else(|| "POST".into()),
            path: w.path.clone().unwrap_or_else(|| "/".into()),
            query: w.query.clone(),
            headers: w.headers.iter().map(|(k, v)| (k.to_lowercase(), v.clone())).collect(),
            body,
        };
        let outcome = adapter.handle_webhook(request).await.map_err(|e| e.to_string())?;
        let response = outcome.response.map_or_else(
            || json!("reply"),
            |r| {
                let headers: serde_json::Map<String, Value> =
                    r.headers.into_iter().map(|(k, v)| (k, json!(v))).collect();
                json!({ "status": r.status, "headers": headers, "body": String::from_utf8_lossy(&r.body) })
            },
        );
        let events: Vec<Value> = outcome.events.iter().map(event_json).collect();
        return Ok(json!({ "response": response, "events": events }).to_string());
    }
    if let Some(s) = &case.send {
        let message = Outbound {
            chat_id: s.chat_id.clone(),
            thread_id: s.thread_id.clone(),
            text: s.text.clone(),
            plain: s.text.clone(),
            reply_to: s.reply_to.clone(),
            buttons: Vec::new(),
        };
        let id = adapter.send(&message).await.map_err(|e| e.to_string())?;
        return Ok(json!({ "id": id }).to_string());
    }
    let events = adapter.poll(Duration::from_millis(0)).await.map_err(|e| e.to_string())?;
    Ok(json!({ "events": events.iter().map(event_json).collect::<Vec<_>>() }).to_string())
}

/// An inbound event as a case's JSON sees it.
fn event_json(event: &PlatformEvent) -> Value {
    match event {
        PlatformEvent::Message(m) => json!({
            "type": "message",
            "id": m.id,
            "chat_id": m.chat_id,
            "chat_type": match m.chat_type { ChatType::Dm => "dm", ChatType::Group => "group", ChatType::Channel => "channel" },
            "chat_name": m.chat_name,
            "thread_id": m.thread_id,
            "sender_id": m.sender_id,
            "sender_name": m.sender_name,
            "text": m.text,
            "mentions_bot": m.mentions_bot,
            "reply_to": m.reply_to,
            "attachments": m.attachments.iter().map(|a| json!({ "kind": a.kind, "name": a.name, "mime": a.mime, "size": a.size })).collect::<Vec<_>>(),
        }),
        PlatformEvent::Button(b) => json!({
            "type": "button",
            "chat_id": b.chat_id,
            "thread_id": b.thread_id,
            "sender_id": b.sender_id,
            "sender_name": b.sender_name,
            "message_id": b.message_id,
            "data": b.data,
        }),
    }
}
