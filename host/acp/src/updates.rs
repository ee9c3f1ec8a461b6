//! A conversation's events as ACP `session/update` notifications, and approvals as
//! `session/request_permission` requests. The [`Pump`] owns the conversation and reads its
//! events in order; whatever waits for a submission's end is told after that submission's
//! updates were sent, so a prompt's answer always follows its updates.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol_schema::v1::{
    AvailableCommand, AvailableCommandInput, AvailableCommandsUpdate, ContentBlock, ContentChunk, CurrentModeUpdate,
    Diff, PermissionOption, PermissionOptionKind, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SessionInfoUpdate, SessionUpdate,
    ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
    UnstructuredCommandInput,
};
use serde_json::Value;
use talaria_agent::builtin::todo;
use talaria_core::Conversation;
use talaria_protocol::{
    ApprovalKind, ApprovalNeeded, Decision, Event, Message, Op, Stamped, ToolAnnotations, ToolFinished, ToolSpec,
    ToolStarted,
};

use crate::content::COMMANDS;
use crate::lock;
use crate::session::AcpSession;

/// Most characters of a tool's result shown in the editor (the model gets it all).
const MAX_SHOWN_CHARS: usize = 20_000;

/// Reads a conversation's events and reports them to the client.
pub struct Pump {
    session: Arc<AcpSession>,
    conversation: Conversation,
    /// Tool calls started and not finished, with their kind (closed as failed when their turn
    /// ends).
    open: HashMap<String, ToolKind>,
    /// Commands the user rejected for good in this session, by (plugin, command).
    rejected: Arc<Mutex<HashSet<(String, String)>>>,
}

impl Pump {
    pub fn new(session: Arc<AcpSession>, conversation: Conversation) -> Self {
        Self { session, conversation, open: HashMap::new(), rejected: Arc::default() }
    }

    pub async fn run(mut self) {
        while let Some(stamped) = self.conversation.next_event().await {
            self.render(&stamped);
            self.session.finished(&stamped);
            if matches!(stamped.event, Event::ShutdownComplete) {
                break;
            }
        }
    }

    fn render(&mut self, stamped: &Stamped) {
        let s = &self.session;
        let answered = s.awaited(stamped.op);
        match &stamped.event {
            Event::TextDelta { text } => s.send(message(text)),
            Event::ReasoningDelta { text } => s.send(thought(text)),
            Event::ToolStarted(t) => {
                let call = tool_call(t, spec(&lock(&s.tools), &t.name), &s.workspace);
                self.open.insert(t.call_id.clone(), call.kind);
                s.send(SessionUpdate::ToolCall(call));
            }
            Event::ToolFinished(t) => {
                let kind = self.open.remove(&t.call_id).unwrap_or(ToolKind::Other);
                s.send(SessionUpdate::ToolCallUpdate(finished(t, kind)));
                if t.ok
                    && t.name == todo::NAME
                    && let Some(plan) = plan(&t.result)
                {
                    s.send(SessionUpdate::Plan(plan));
                }
            }
            Event::ApprovalNeeded(a) => self.ask(a),
            Event::ClarifyNeeded(c) => {
                // No question box in ACP v1 for every client: the model is told to ask in its reply.
                s.submit(Op::Answer {
                    id: c.id,
                    text: "(The editor cannot show questions. Ask the user in your reply and end your turn, or \
                           decide yourself if the choice is safe.)"
                        .into(),
                });
            }
            Event::TurnStarted { .. } if s.cancel_pending() => {
                s.submit(Op::Interrupt);
            }
            Event::TurnEnd(_) => {
                for (id, _) in std::mem::take(&mut self.open) {
                    let fields = ToolCallUpdateFields::new().status(ToolCallStatus::Failed);
                    s.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id, fields)));
                }
            }
            Event::Notice { text, .. } => s.notice(text),
            Event::SessionStarted(started) => s.moved(started, self.conversation.info().tools),
            Event::YoloChanged { on } => {
                s.send(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(if *on { "yolo" } else { "ask" })));
            }
            Event::TitleChanged { title } => {
                s.send(SessionUpdate::SessionInfoUpdate(SessionInfoUpdate::new().title(title.clone())));
                if answered {
                    s.send(message(&format!("Title: {title}")));
                }
            }
            Event::Compacted { note, before, after, .. } if answered => {
                s.send(message(&format!("Compacted {before} messages into {after}. {note}")));
            }
            Event::Undone { text } if answered => s.send(message(&match text {
                Some(t) => format!("Undone: \"{}\"", talaria_agent::tools::one_line(t, 80)),
                None => "Nothing to undo.".into(),
            })),
            Event::ModelChanged { model } if answered => s.send(message(&format!("Model: {model}"))),
            Event::ContextReport { engine, status, lines } if answered => {
                let mut text =
                    format!("Context ({engine}): {} of {} tokens used.", status.prompt_tokens, status.context_length);
                for (k, v) in lines {
                    text.push_str(&format!("\n- {k}: {v}"));
                }
                s.send(message(&text));
            }
            Event::Error { text } if !answered => tracing::warn!(session = %s.id, "{text}"),
            _ => {}
        }
    }

    /// Ask the client about an approval; its answer (or no answer in time: deny) goes back to
    /// the conversation.
    fn ask(&self, a: &ApprovalNeeded) {
        let s = self.session.clone();
        let key = (a.plugin.clone(), a.command.clone());
        if lock(&self.rejected).contains(&key) {
            s.submit(Op::Approve { id: a.id, decision: Decision::Deny });
            return;
        }
        let rejected = self.rejected.clone();
        let (kind, title) = match a.kind {
            ApprovalKind::Command => (ToolKind::Execute, format!("Run `{}`? ({})", a.command, a.reason)),
            ApprovalKind::Network => (ToolKind::Fetch, format!("Connect to {}? ({})", a.command, a.reason)),
        };
        let call_id = if a.call_id.is_empty() { format!("approval-{}", a.id) } else { a.call_id.clone() };
        let fields = ToolCallUpdateFields::new()
            .title(title)
            .kind(kind)
            .status(ToolCallStatus::Pending)
            .raw_input(serde_json::json!({"plugin": a.plugin, "command": a.command, "reason": a.reason}));
        let options = vec![
            PermissionOption::new("allow_once", "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new("allow_always", "Always allow", PermissionOptionKind::AllowAlways),
            PermissionOption::new("reject_once", "Reject", PermissionOptionKind::RejectOnce),
            PermissionOption::new("reject_always", "Reject for this session", PermissionOptionKind::RejectAlways),
        ];
        let request = RequestPermissionRequest::new(s.id.clone(), ToolCallUpdate::new(call_id, fields), options);
        let answer = s.out.request("session/request_permission", &request);
        let (id, wait) = (a.id, Duration::from_secs(a.timeout_secs.max(1)));
        tokio::spawn(async move {
            let chosen = match tokio::time::timeout(wait, answer).await {
                Ok(Ok(Ok(value))) => match serde_json::from_value::<RequestPermissionResponse>(value) {
                    Ok(r) => match r.outcome {
                        RequestPermissionOutcome::Selected(sel) => Some(sel.option_id.0.to_string()),
                        _ => None,
                    },
                    Err(e) => {
                        tracing::warn!("the client's permission answer is malformed ({e}): denied");
                        None
                    }
                },
                Ok(Ok(Err(e))) => {
                    tracing::warn!("the permission request failed ({}): denied", e.message);
                    None
                }
                Ok(Err(_)) => None,
                Err(_) => {
                    tracing::warn!("no answer to the permission request in {}s: denied", wait.as_secs());
                    None
                }
            };
            let decision = match chosen.as_deref() {
                Some("allow_once") => Decision::Once,
                Some("allow_always") => Decision::Always,
                Some("reject_always") => {
                    lock(&rejected).insert(key);
                    Decision::Deny
                }
                _ => Decision::Deny,
            };
            s.submit(Op::Approve { id, decision });
        });
    }
}

fn spec<'a>(tools: &'a [ToolSpec], name: &str) -> Option<&'a ToolAnnotations> {
    tools.iter().find(|t| t.name == name).map(|t| &t.annotations)
}

fn arguments(raw: &str, fallback: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::from_str(fallback).unwrap_or(Value::Null))
}

/// How the editor shows a call, from what the tool says it does.
fn kind(a: Option<&ToolAnnotations>, args: &Value) -> ToolKind {
    let Some(a) = a else { return ToolKind::Other };
    let has = |k: &str| args.get(k).is_some();
    if a.read_only {
        if has("pattern") || has("query") {
            ToolKind::Search
        } else if a.open_world {
            ToolKind::Fetch
        } else if a.paths.is_empty() {
            ToolKind::Other
        } else {
            ToolKind::Read
        }
    } else if !a.open_world && !a.paths.is_empty() {
        ToolKind::Edit
    } else if has("command") {
        ToolKind::Execute
    } else {
        ToolKind::Other
    }
}

fn tool_call(t: &ToolStarted, a: Option<&ToolAnnotations>, workspace: &Path) -> ToolCall {
    let args = arguments(&t.arguments, "{}");
    let locations = a
        .filter(|a| !a.paths.is_empty())
        .map(|a| a.touched(&args, workspace).into_iter().map(ToolCallLocation::new).collect())
        .unwrap_or_default();
    let kind = if t.name == todo::NAME { ToolKind::Think } else { kind(a, &args) };
    ToolCall::new(t.call_id.clone(), t.preview.clone())
        .kind(kind)
        .status(ToolCallStatus::InProgress)
        .locations(locations)
        .raw_input(args)
}

fn finished(t: &ToolFinished, kind: ToolKind) -> ToolCallUpdate {
    let status = if t.ok { ToolCallStatus::Completed } else { ToolCallStatus::Failed };
    let content: Vec<ToolCallContent> = if t.changes.is_empty() {
        shown(&t.result, kind == ToolKind::Execute).into_iter().map(ToolCallContent::from).collect()
    } else {
        t.changes
            .iter()
            .map(|c| {
                ToolCallContent::from(
                    Diff::new(c.path.clone(), c.after.clone().unwrap_or_default()).old_text(c.before.clone()),
                )
            })
            .collect()
    };
    ToolCallUpdate::new(t.call_id.clone(), ToolCallUpdateFields::new().status(status).content(content))
}

/// A result as the editor shows it: cut to [`MAX_SHOWN_CHARS`]; a command's output fenced.
fn shown(result: &str, fenced: bool) -> Option<String> {
    if result.is_empty() {
        return None;
    }
    let mut text: String = result.chars().take(MAX_SHOWN_CHARS).collect();
    if text.len() < result.len() {
        text.push_str("\n[... cut for display]");
    }
    Some(if fenced { format!("```\n{text}\n```") } else { text })
}

/// The todo tool's result as a plan (cancelled items left out).
fn plan(result: &str) -> Option<Plan> {
    let v: Value = serde_json::from_str(result).ok()?;
    let entries = v
        .get("todos")?
        .as_array()?
        .iter()
        .filter_map(|item| {
            let content = item.get("content")?.as_str()?;
            let status = match item.get("status")?.as_str()? {
                "pending" => PlanEntryStatus::Pending,
                "in_progress" => PlanEntryStatus::InProgress,
                "completed" => PlanEntryStatus::Completed,
                _ => return None,
            };
            Some(PlanEntry::new(content, PlanEntryPriority::Medium, status))
        })
        .collect();
    Some(Plan::new(entries))
}

pub fn message(text: &str) -> SessionUpdate {
    SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::from(text)))
}

pub fn thought(text: &str) -> SessionUpdate {
    SessionUpdate::AgentThoughtChunk(ContentChunk::new(ContentBlock::from(text)))
}

pub fn available_commands() -> SessionUpdate {
    let commands = COMMANDS
        .iter()
        .map(|(name, description, hint)| {
            AvailableCommand::new(*name, *description)
                .input(hint.map(|h| AvailableCommandInput::Unstructured(UnstructuredCommandInput::new(h.to_string()))))
        })
        .collect();
    SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands))
}

/// A stored history as the updates that show it again (`session/load`).
pub fn replay(messages: impl Iterator<Item = Message>, tools: &[ToolSpec], workspace: &Path) -> Vec<SessionUpdate> {
    let mut out = Vec::new();
    let mut kinds: HashMap<String, ToolKind> = HashMap::new();
    for m in messages {
        match m {
            Message::System { .. } => {}
            Message::User { content } => {
                out.push(SessionUpdate::UserMessageChunk(ContentChunk::new(ContentBlock::from(content))));
            }
            Message::Assistant { content, tool_calls, reasoning, .. } => {
                if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
                    out.push(thought(&r));
                }
                if !content.is_empty() {
                    out.push(message(&content));
                }
                for c in tool_calls {
                    let args = arguments(&c.arguments, "{}");
                    let started = ToolStarted {
                        call_id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                        preview: talaria_agent::tools::preview(&c.name, Some(&args)),
                    };
                    let call = tool_call(&started, spec(tools, &c.name), workspace);
                    kinds.insert(c.id.clone(), call.kind);
                    out.push(SessionUpdate::ToolCall(call));
                }
            }
            Message::Tool { tool_call_id, name, content } => {
                let ok = !content.trim_start().starts_with("{\"error\"");
                let t = ToolFinished {
                    call_id: tool_call_id.clone(),
                    name,
                    ok,
                    preview: String::new(),
                    result: content,
                    duration_ms: 0,
                    changes: Vec::new(),
                };
                let kind = kinds.get(&tool_call_id).copied().unwrap_or(ToolKind::Other);
                out.push(SessionUpdate::ToolCallUpdate(finished(&t, kind)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_come_from_annotations_not_names() {
        let read = ToolAnnotations::reads(&["path"]);
        let write = ToolAnnotations::writes(&["path"]);
        let fetch = ToolAnnotations::fetches();
        let shell = ToolAnnotations::default();
        assert_eq!(kind(Some(&read), &json!({"path": "a"})), ToolKind::Read);
        assert_eq!(kind(Some(&read), &json!({"pattern": "fn"})), ToolKind::Search);
        assert_eq!(kind(Some(&write), &json!({"path": "a"})), ToolKind::Edit);
        assert_eq!(kind(Some(&fetch), &json!({"url": "x"})), ToolKind::Fetch);
        assert_eq!(kind(Some(&shell), &json!({"command": "ls"})), ToolKind::Execute);
        assert_eq!(kind(Some(&shell), &json!({"goal": "x"})), ToolKind::Other);
        assert_eq!(kind(None, &json!({"command": "ls"})), ToolKind::Other, "no spec: nothing is claimed");
    }

    #[test]
    fn the_todo_list_is_a_plan() {
        let result = json!({"todos": [
            {"id": "1", "content": "parse", "status": "completed"},
            {"id": "2", "content": "test", "status": "in_progress"},
            {"id": "3", "content": "dropped", "status": "cancelled"},
        ]});
        let plan = plan(&result.to_string()).expect("a plan");
        let got: Vec<_> = plan.entries.iter().map(|e| (e.content.as_str(), e.status.clone())).collect();
        assert_eq!(got, [("parse", PlanEntryStatus::Completed), ("test", PlanEntryStatus::InProgress)]);
    }
}
