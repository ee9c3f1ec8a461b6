//! talaria's events as ACP `session/update` content: tool calls with their kind, title and
//! locations, their results (diffs, command output, the editor's terminal), plans from the
//! `todo` tool, message and thought chunks, and the replay of a stored session.

use std::collections::HashMap;
use std::path::Path;

use agent_client_protocol_schema::v1::{
    AvailableCommand, AvailableCommandInput, AvailableCommandsUpdate, ContentBlock, ContentChunk, Diff, Plan,
    PlanEntry, PlanEntryPriority, PlanEntryStatus, SessionUpdate, ToolCall, ToolCallContent, ToolCallLocation,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind, UnstructuredCommandInput,
};
use serde_json::Value;
use talaria_core::agent::builtin::todo;
use talaria_protocol::{Message, ToolAnnotations, ToolFinished, ToolSpec, ToolStarted};

use crate::content::COMMANDS;

/// Most characters of a tool's result shown in the editor (the model gets it all).
const MAX_SHOWN_CHARS: usize = 20_000;

pub(crate) fn spec<'a>(tools: &'a [std::sync::Arc<ToolSpec>], name: &str) -> Option<&'a ToolAnnotations> {
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

pub(crate) fn tool_call(t: &ToolStarted, a: Option<&ToolAnnotations>, workspace: &Path) -> ToolCall {
    let args = arguments(&t.arguments, "{}");
    let locations = a
        .filter(|a| !a.paths.is_empty())
        .map(|a| a.touched(&args, workspace).into_iter().map(ToolCallLocation::new).collect())
        .unwrap_or_default();
    let kind = if t.name == todo::NAME { ToolKind::Think } else { kind(a, &args) };
    ToolCall::new(t.call_id.clone(), title(&t.preview))
        .kind(kind)
        // Checks and a permission may come first: it runs when `running` says so.
        .status(ToolCallStatus::Pending)
        .locations(locations)
        .raw_input(args)
}

/// A finished call's last update; `terminal`: the editor's terminal it ran in, which stays
/// shown (the output is in it).
pub(crate) fn finished(t: &ToolFinished, kind: ToolKind, terminal: Option<String>) -> ToolCallUpdate {
    // A command that exits non-zero is a failure to the person reading, as a refusal is.
    let status = if t.outcome().failed() { ToolCallStatus::Failed } else { ToolCallStatus::Completed };
    let content: Vec<ToolCallContent> = if let Some(id) = terminal {
        vec![ToolCallContent::Terminal(agent_client_protocol_schema::v1::Terminal::new(id))]
    } else if t.changes.is_empty() {
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
    Some(if fenced { self::fenced(&text) } else { text })
}

/// Most characters of a title (a tool call's, a permission request's).
const MAX_TITLE_CHARS: usize = 200;

/// A title the editor shows: one plain line, its controls and line breaks escaped, cut to
/// [`MAX_TITLE_CHARS`]. What the model or a plugin wrote in it cannot add lines, markdown
/// blocks or escape codes to the editor's list.
pub(crate) fn title(text: &str) -> String {
    talaria_core::runtime::visible(text, MAX_TITLE_CHARS)
}

/// `text` (its controls escaped, a carriage return too, its lines kept) in a code fence longer than any run of
/// backticks it holds, so nothing in it can close the fence and be read as markdown.
pub(crate) fn fenced(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let lines: Vec<String> = text.split('\n').map(|l| talaria_core::runtime::visible(l, usize::MAX)).collect();
    format!("{fence}\n{}\n{fence}", lines.join("\n"))
}

/// The todo tool's result as a plan (cancelled items left out).
pub(crate) fn plan(result: &str) -> Option<Plan> {
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
pub fn replay(
    messages: impl Iterator<Item = Message>,
    tools: &[std::sync::Arc<ToolSpec>],
    workspace: &Path,
) -> Vec<SessionUpdate> {
    let mut out = Vec::new();
    let mut kinds: HashMap<String, ToolKind> = HashMap::new();
    for m in messages {
        match m {
            Message::System { .. } => {}
            Message::User { content, .. } => {
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
                        preview: talaria_core::agent::tools::preview(&c.name, Some(&args)),
                    };
                    let call = tool_call(&started, spec(tools, &c.name), workspace);
                    kinds.insert(c.id.clone(), call.kind);
                    out.push(SessionUpdate::ToolCall(call));
                }
            }
            Message::Tool { tool_call_id, name, content, .. } => {
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
                out.push(SessionUpdate::ToolCallUpdate(finished(&t, kind, None)));
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
