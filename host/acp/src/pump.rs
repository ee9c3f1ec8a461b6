//! The task that owns a session's conversation: it reads the events in order and reports them
//! to the client as `session/update` notifications, and approvals as
//! `session/request_permission` requests. Whatever waits for a submission's end is told after
//! that submission's updates were sent, so a prompt's answer always follows its updates.
//!
//! A tool call is shown `pending` until it runs: its checks, and a permission asked before it
//! starts (a dangerous command is asked about as the call begins), keep it there. It is shown
//! `in_progress` once it passed them and [`SETTLE`] went by without a question, or as soon as a
//! permission asked for it is given.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol_schema::v1::{
    CurrentModeUpdate, PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SessionInfoUpdate, SessionUpdate, ToolCallContent, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind,
};
use talaria_core::Conversation;
use talaria_core::agent::builtin::todo;
use talaria_protocol::{ApprovalKind, ApprovalNeeded, Decision, Event, Op, Stamped};

use crate::lock;
use crate::session::AcpSession;
use crate::updates::{self, finished, message, plan, spec, thought, tool_call};

/// How long a call that passed its checks may still ask a permission before it is shown running.
const SETTLE: Duration = Duration::from_millis(200);

/// A session made but not yet reporting: start it once the client has its id.
pub struct Opened {
    pub session: Arc<AcpSession>,
    pub conversation: Conversation,
    /// Told once the client knows the session.
    pub notes: Vec<String>,
}

impl Opened {
    /// Start reporting the conversation's events (and tell the client the commands it offers).
    pub fn start(self) {
        let session = self.session.clone();
        session.send(updates::available_commands());
        for note in &self.notes {
            session.notice(note);
        }
        let pump = Pump::new(self.session.clone(), self.conversation);
        session.set_pump(tokio::spawn(pump.run()));
    }
}

/// Reads a conversation's events and reports them to the client.
pub struct Pump {
    session: Arc<AcpSession>,
    conversation: Conversation,
    /// Tool calls started and not finished, with their kind (closed as failed when their turn
    /// ends).
    open: HashMap<String, ToolKind>,
    /// Commands the user rejected for good in this session, by (plugin, command).
    rejected: Arc<Mutex<HashSet<(String, String)>>>,
    /// Calls that passed their checks, shown running at the instant given unless a permission
    /// is asked for them first.
    starting: Vec<(String, tokio::time::Instant)>,
    /// The call each open permission is for, by approval id.
    asked: HashMap<u64, String>,
}

impl Pump {
    pub fn new(session: Arc<AcpSession>, conversation: Conversation) -> Self {
        Self {
            session,
            conversation,
            open: HashMap::new(),
            rejected: Arc::default(),
            starting: Vec::new(),
            asked: HashMap::new(),
        }
    }

    pub async fn run(mut self) {
        loop {
            let stamped = match self.starting.iter().map(|(_, at)| *at).min() {
                Some(at) => tokio::select! {
                    biased;
                    stamped = self.conversation.next_event() => stamped,
                    () = tokio::time::sleep_until(at) => {
                        self.show_running();
                        continue;
                    }
                },
                None => self.conversation.next_event().await,
            };
            let Some(stamped) = stamped else { break };
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
            Event::ToolRunning { call_id } => {
                self.starting.push((call_id.clone(), tokio::time::Instant::now() + SETTLE));
            }
            Event::ToolFinished(t) => {
                self.starting.retain(|(id, _)| *id != t.call_id);
                let kind = self.open.remove(&t.call_id).unwrap_or(ToolKind::Other);
                let terminal = s.editor.as_ref().and_then(|e| e.terminal_of(&t.call_id));
                s.send(SessionUpdate::ToolCallUpdate(finished(t, kind, terminal)));
                if t.ok
                    && t.name == todo::NAME
                    && let Some(plan) = plan(&t.result)
                {
                    s.send(SessionUpdate::Plan(plan));
                }
            }
            Event::ApprovalNeeded(a) => {
                if self.open.contains_key(&a.call_id) {
                    self.starting.retain(|(id, _)| *id != a.call_id);
                    self.asked.insert(a.id, a.call_id.clone());
                }
                self.ask(a);
            }
            Event::ApprovalResolved { id, decision } => {
                if let Some(call) = self.asked.remove(id)
                    && *decision != Decision::Deny
                    && self.open.contains_key(&call)
                {
                    s.send(running(call));
                }
            }
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
                self.starting.clear();
                self.asked.clear();
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
                s.send(SessionUpdate::SessionInfoUpdate(SessionInfoUpdate::new().title(updates::title(title))));
                if answered {
                    s.send(message(&format!("Title: {title}")));
                }
            }
            Event::Compacted { note, before, after, .. } if answered => {
                s.send(message(&format!("Compacted {before} messages into {after}. {note}")));
            }
            Event::Undone { text } if answered => s.send(message(&match text {
                Some(t) => format!("Undone: \"{}\"", talaria_core::agent::tools::one_line(t, 80)),
                None => "Nothing to undo.".into(),
            })),
            Event::RolledBack { text, .. } if answered => s.send(message(text)),
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

    /// Show the calls whose time to ask a permission went by as running.
    fn show_running(&mut self) {
        let now = tokio::time::Instant::now();
        let (due, later) = std::mem::take(&mut self.starting).into_iter().partition(|(_, at)| *at <= now);
        self.starting = later;
        for (call, _) in due {
            self.session.send(running(call));
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
        // The title is one plain line the model cannot shape; what it proposed (a command, a
        // job) is in the content, fenced, its controls escaped.
        let reason = updates::title(&a.reason);
        let (kind, title, content) = match a.kind {
            ApprovalKind::Command => (ToolKind::Execute, format!("Run this command? ({reason})"), Some(&a.command)),
            ApprovalKind::Network => {
                (ToolKind::Fetch, format!("Connect to {}? ({reason})", updates::title(&a.command)), None)
            }
            ApprovalKind::Schedule => (ToolKind::Other, format!("Schedule this job? ({reason})"), Some(&a.command)),
            ApprovalKind::McpTool => {
                (ToolKind::Other, format!("Call `{}`? ({reason})", updates::title(&a.command)), None)
            }
            ApprovalKind::Skill => {
                (ToolKind::Edit, format!("Let the agent {}? ({reason})", updates::title(&a.command)), None)
            }
        };
        let call_id = if a.call_id.is_empty() { format!("approval-{}", a.id) } else { a.call_id.clone() };
        let mut fields = ToolCallUpdateFields::new()
            .title(updates::title(&title))
            .kind(kind)
            .status(ToolCallStatus::Pending)
            .raw_input(serde_json::json!({"plugin": a.plugin, "command": a.command, "reason": a.reason}));
        if let Some(text) = content {
            fields = fields.content(vec![ToolCallContent::from(updates::fenced(text))]);
        }
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

fn running(call: String) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        call,
        ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
    ))
}
