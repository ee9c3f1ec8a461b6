//! One chat session's worker: its conversation of the agent service, the messages that came
//! while it worked, the reply streamed by edits, typing shown while it works, and approvals
//! asked of the platform's admins. It ends after a while without messages (the session stays in
//! the store and the next message resumes it) or when the gateway stops.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use base64::Engine as _;
use talaria_core::config::BusyInput;
use talaria_core::{Conversation, Platform, Start};
use talaria_protocol::{Decision, Event, Image, Op, Outcome};
use talaria_runtime::adapter::{InboundMessage, Outbound};
use talaria_store::Store;
use tokio::sync::mpsc;

use super::outbox::{self, Reply};
use super::{Account, Gateway, SESSIONS_SPACE};
use crate::command::Command;

/// A session without messages for this long closes (the next message resumes it).
const IDLE: Duration = Duration::from_secs(10 * 60);
/// Platforms show "typing" for about five seconds: it is sent again this often.
const TYPING_EVERY: Duration = Duration::from_secs(4);
/// When the gateway stops, a running turn gets this long to finish before it is interrupted.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// What a session worker is handed.
pub(crate) enum Work {
    /// A message for the agent.
    Message { message: InboundMessage },
    /// A chat command for the session (`/new`, `/stop`, `/status`).
    Command { command: Command, message_id: String },
    /// An admin answered the approval `id`.
    Approval { id: u64, decision: Decision, by: String },
}

/// Where the session's replies go.
#[derive(Debug, Clone)]
pub(crate) struct Chat {
    pub chat_id: String,
    pub thread_id: Option<String>,
}

/// The turn running now.
struct Turn {
    op: u64,
    /// The message it answers (its id keys the reply in the ledger).
    message_id: String,
    /// The answer so far.
    text: String,
    /// The message the answer streams into, once sent.
    streamed: Option<String>,
    last_edit: Instant,
    last_typing: Instant,
    /// The approval it waits for, if any.
    approval: Option<u64>,
}

/// The worker of one session.
struct Worker {
    gateway: Arc<Gateway>,
    account: Arc<Account>,
    key: String,
    chat: Chat,
    conversation: Conversation,
    queue: VecDeque<InboundMessage>,
    turn: Option<Turn>,
}

/// Serve session `key` of `account` until it is idle or the gateway stops.
pub(crate) async fn run(
    gateway: Arc<Gateway>,
    account: Arc<Account>,
    key: String,
    chat: Chat,
    mut rx: mpsc::UnboundedReceiver<Work>,
) {
    let conversation = match open(&gateway, &account, &key, &chat, true).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(account = %account.name, session = %key, "cannot start a conversation: {e}");
            let text = format!("I cannot start a conversation: {e}");
            let id = format!("open-failed:{key}:{}", Store::new_pairing_code());
            gateway.reply(&account, &chat.chat_id, chat.thread_id.as_deref(), &text, &id);
            // Let the next message try again.
            drop(rx);
            gateway.session_ended(&key);
            return;
        }
    };
    let mut worker = Worker { gateway, account, key, chat, conversation, queue: VecDeque::new(), turn: None };
    let mut stop_at: Option<tokio::time::Instant> = None;
    loop {
        if worker.turn.is_none()
            && !worker.gateway.stop.is_cancelled()
            && let Some(message) = worker.queue.pop_front()
        {
            worker.start_turn(message).await;
            continue;
        }
        let busy = worker.turn.is_some();
        let typing_due =
            worker.turn.as_ref().map_or_else(tokio::time::Instant::now, |t| (t.last_typing + TYPING_EVERY).into());
        tokio::select! {
            work = rx.recv() => match work {
                Some(work) => worker.on_work(work).await,
                None => break,
            },
            stamped = worker.conversation.next_event(), if busy => match stamped {
                Some(stamped) => worker.on_event(stamped.turn_id, stamped.event).await,
                None => break,
            },
            () = tokio::time::sleep_until(typing_due), if busy => worker.typing().await,
            () = worker.gateway.stop.cancelled(), if stop_at.is_none() => {
                stop_at = Some(tokio::time::Instant::now() + STOP_GRACE);
                if !busy && worker.can_end(&mut rx) {
                    break;
                }
            }
            () = tokio::time::sleep_until(stop_at.unwrap_or_else(tokio::time::Instant::now)), if stop_at.is_some() && busy => {
                tracing::info!(session = %worker.key, "the gateway is stopping: interrupting the running turn");
                worker.conversation.submit(Op::Interrupt);
                stop_at = Some(tokio::time::Instant::now() + STOP_GRACE);
            }
            () = tokio::time::sleep(IDLE), if !busy => {
                if worker.can_end(&mut rx) {
                    break;
                }
            }
        }
        if stop_at.is_some() && worker.turn.is_none() && worker.can_end(&mut rx) {
            break;
        }
    }
    if !worker.queue.is_empty() {
        let text = "I am restarting and did not get to your last message; please send it again in a minute.";
        worker.say(text, &format!("restart:{}", worker.queue.back().map_or("", |m| m.id.as_str())));
    }
    worker.conversation.shutdown().await;
    drop(rx);
    worker.gateway.session_ended(&worker.key);
}

impl Worker {
    /// Whether the worker may end: nothing is waiting for it. Checked under the sessions' lock,
    /// so a message handed over meanwhile is never lost: it is taken, and the worker goes on.
    fn can_end(&mut self, rx: &mut mpsc::UnboundedReceiver<Work>) -> bool {
        let mut sessions = super::lock(&self.gateway.sessions);
        match rx.try_recv() {
            Ok(work) => {
                drop(sessions);
                // Handled on the next round.
                if let Work::Message { message } = work {
                    self.queue.push_back(message);
                } else {
                    tracing::debug!(session = %self.key, "a command arrived as the session closed; ignored");
                }
                false
            }
            Err(_) => {
                sessions.remove(&self.key);
                true
            }
        }
    }

    fn say(&self, markdown: &str, key: &str) {
        self.gateway.reply(&self.account, &self.chat.chat_id, self.chat.thread_id.as_deref(), markdown, key);
    }

    async fn on_work(&mut self, work: Work) {
        match work {
            Work::Message { message } => {
                if self.turn.is_none() {
                    return self.queue.push_back(message);
                }
                match self.gateway.config.busy_input {
                    BusyInput::Queue => self.queue.push_back(message),
                    BusyInput::Interrupt => {
                        self.conversation.submit(Op::Interrupt);
                        self.queue.push_back(message);
                    }
                    BusyInput::Steer => {
                        self.conversation.submit(Op::Steer { text: message.text });
                    }
                }
            }
            Work::Command { command, message_id } => self.on_command(command, &message_id).await,
            Work::Approval { id, decision, by } => {
                let waiting = self.turn.as_ref().and_then(|t| t.approval);
                if waiting == Some(id) {
                    self.conversation.submit(Op::Approve { id, decision });
                    let verdict = match decision {
                        Decision::Deny => "refused it",
                        Decision::Session => "allowed it for this session",
                        Decision::Once | Decision::Always => "allowed it",
                    };
                    self.say(&format!("{by} {verdict}."), &format!("approved:{}:{id}:{}", self.key, self.turn_key()));
                }
            }
        }
    }

    fn turn_key(&self) -> String {
        self.turn.as_ref().map_or_else(String::new, |t| t.message_id.clone())
    }

    async fn on_command(&mut self, command: Command, message_id: &str) {
        let key = format!("cmd:{}:{message_id}", self.key);
        match command {
            Command::Stop => {
                let queued = self.queue.len();
                self.queue.clear();
                if self.turn.is_some() {
                    self.conversation.submit(Op::Interrupt);
                    self.say("Stopped.", &key);
                } else if queued > 0 {
                    self.say("Dropped the messages that were waiting.", &key);
                } else {
                    self.say("Nothing to stop.", &key);
                }
            }
            Command::New => {
                if self.turn.is_some() {
                    self.conversation.submit(Op::Interrupt);
                    while let Some(stamped) = self.conversation.next_event().await {
                        if let Event::TurnEnd(_) = stamped.event {
                            break;
                        }
                    }
                    self.end_turn();
                }
                self.queue.clear();
                let _ = self.gateway.store.kv_delete(SESSIONS_SPACE, &self.key);
                match open(&self.gateway, &self.account, &self.key, &self.chat, false).await {
                    Ok(fresh) => {
                        let mut old = std::mem::replace(&mut self.conversation, fresh);
                        old.shutdown_with("new", |_| {}).await;
                        self.say("Started a new conversation.", &key);
                    }
                    Err(e) => self.say(&format!("I cannot start a new conversation: {e}"), &key),
                }
            }
            Command::Rollback { steps, force } => {
                if self.turn.is_some() {
                    self.say("I am working: /stop me first, or roll back when I am done.", &key);
                    return;
                }
                let answer = self.conversation.run(Op::Rollback { steps, force }, |_| {}).await;
                let text = match answer.map(|s| s.event) {
                    Some(Event::RolledBack { text, .. }) => text,
                    Some(Event::Error { text, .. }) => text,
                    _ => "I could not roll back.".to_string(),
                };
                self.say(&text, &key);
            }
            Command::Status => {
                let info = self.conversation.info();
                let state = match &self.turn {
                    Some(t) if t.approval.is_some() => "waiting for an admin's approval",
                    Some(_) => "working",
                    None => "idle",
                };
                let model = info.provider.as_ref().map_or_else(|| "none".to_string(), |p| p.label().to_string());
                let text = format!(
                    "Session {} ({} messages), {state}; {} waiting.\nModel: {model}. Tokens so far: {} in, {} out.",
                    info.session_id,
                    info.messages,
                    self.queue.len(),
                    info.usage.input_tokens,
                    info.usage.output_tokens,
                );
                self.say(&text, &key);
            }
            // Answered by the gateway, which knows every session's approvals.
            Command::Approve { .. } | Command::Deny | Command::Help => {}
        }
    }

    async fn start_turn(&mut self, message: InboundMessage) {
        let mut text = message.text.clone();
        let mut images = Vec::new();
        for a in &message.attachments {
            if a.kind == "image" && !a.data.is_empty() {
                let media_type = if a.mime.is_empty() { "image/jpeg".to_string() } else { a.mime.clone() };
                images.push(Image { media_type, data: base64::engine::general_purpose::STANDARD.encode(&a.data) });
            } else {
                let name = if a.name.is_empty() { a.kind.as_str() } else { a.name.as_str() };
                text.push_str(&format!("\n[the user attached {name} ({}), which you cannot open]", a.mime));
            }
        }
        let op = self.conversation.submit(Op::UserTurn { text, images });
        self.account.busy.fetch_add(1, Ordering::SeqCst);
        let now = Instant::now();
        self.turn = Some(Turn {
            op,
            message_id: message.id,
            text: String::new(),
            streamed: None,
            last_edit: now,
            last_typing: now - TYPING_EVERY,
            approval: None,
        });
        self.typing().await;
    }

    fn end_turn(&mut self) {
        if self.turn.take().is_some() {
            self.account.busy.fetch_sub(1, Ordering::SeqCst);
        }
    }

    async fn typing(&mut self) {
        if !self.account.adapter.is_connected() {
            return;
        }
        if let Some(turn) = &mut self.turn {
            turn.last_typing = Instant::now();
            if let Err(e) = self.account.adapter.typing(&self.chat.chat_id, self.chat.thread_id.as_deref()).await {
                tracing::debug!(account = %self.account.name, "typing: {e}");
            }
        }
    }

    async fn on_event(&mut self, turn_id: Option<u64>, event: Event) {
        let ours = self.turn.as_ref().is_some_and(|t| turn_id.is_none_or(|id| id == t.op));
        if !ours {
            return;
        }
        match event {
            Event::TextDelta { text } => {
                if let Some(turn) = &mut self.turn {
                    turn.text.push_str(&text);
                }
                self.stream().await;
            }
            Event::ApprovalNeeded(a) => self.ask_approval(a).await,
            Event::ApprovalResolved { id, .. } => {
                if let Some(turn) = &mut self.turn
                    && turn.approval == Some(id)
                {
                    turn.approval = None;
                }
            }
            Event::TurnEnd(end) => {
                let Some(turn) = &self.turn else { return };
                let (markdown, reply) = match end.outcome {
                    Outcome::Completed | Outcome::BudgetExhausted | Outcome::Truncated => {
                        let text = if end.text.trim().is_empty() { "(no answer)".to_string() } else { end.text };
                        (Some(text), true)
                    }
                    Outcome::Interrupted => {
                        (turn.streamed.as_ref().map(|_| format!("{}\n\n(stopped)", turn.text)), true)
                    }
                    Outcome::Failed(why) => (Some(format!("Sorry, I could not answer: {why}")), true),
                };
                let key = super::reply_key(&self.account.name, &self.chat.chat_id, &turn.message_id);
                let responder = self.gateway.take_responder(&key);
                if let (Some(markdown), Some(responder)) = (&markdown, responder) {
                    // A webhook request waits for it: the answer goes there.
                    let _ = responder.send(markdown.clone());
                } else if let (Some(markdown), true) = (markdown, reply) {
                    let reply = Reply { edit: turn.streamed.clone(), reply_to: None, buttons: Vec::new() };
                    outbox::queue(
                        &self.gateway,
                        &self.account,
                        &self.chat.chat_id,
                        self.chat.thread_id.as_deref(),
                        &markdown,
                        &reply,
                        &key,
                    );
                }
                self.end_turn();
            }
            _ => {}
        }
    }

    /// Show the answer so far, by editing the streamed message (at the platform's pace).
    async fn stream(&mut self) {
        let Some(info) = self.account.info() else { return };
        let Some(turn) = &mut self.turn else { return };
        if !info.can_edit || turn.last_edit.elapsed() < info.edit_interval || turn.text.trim().is_empty() {
            return;
        }
        turn.last_edit = Instant::now();
        let Some((text, plain)) = outbox::render_parts(&turn.text, &info).into_iter().next() else { return };
        let message = Outbound {
            chat_id: self.chat.chat_id.clone(),
            thread_id: self.chat.thread_id.clone(),
            text,
            plain,
            reply_to: None,
            buttons: Vec::new(),
        };
        match &turn.streamed {
            None => match self.account.adapter.send(&message).await {
                Ok(id) => turn.streamed = Some(id),
                Err(e) => tracing::debug!(account = %self.account.name, "streaming a reply: {e}"),
            },
            Some(id) => {
                if let Err(e) = self.account.adapter.edit(id, &message).await {
                    tracing::debug!(account = %self.account.name, "streaming a reply: {e}");
                }
            }
        }
    }

    async fn ask_approval(&mut self, a: talaria_protocol::ApprovalNeeded) {
        let Some(message_id) = self.turn.as_ref().map(|t| t.message_id.clone()) else { return };
        let key = format!("approval:{}:{message_id}:{}", self.key, a.id);
        let what = match a.kind {
            talaria_protocol::ApprovalKind::Network => format!("connect to **{}**", a.command),
            talaria_protocol::ApprovalKind::Command => format!("run `{}`", a.command),
            talaria_protocol::ApprovalKind::Schedule => format!("schedule {}", a.command),
            talaria_protocol::ApprovalKind::McpTool => format!("call `{}`", a.command),
            talaria_protocol::ApprovalKind::Skill => a.command.clone(),
        };
        if self.account.admins.is_empty() {
            self.conversation.submit(Op::Approve { id: a.id, decision: Decision::Deny });
            let text = format!(
                "I wanted to {what} ({}), which needs an admin's approval, and no admin is configured for {}; refused.",
                a.reason, self.account.name
            );
            return self.say(&text, &key);
        }
        if let Some(turn) = &mut self.turn {
            turn.approval = Some(a.id);
        }
        let token = self.gateway.approval_token(&self.key, &self.account.name, &self.chat, a.id);
        let text = format!(
            "**Approval needed**: {} wants to {what}.\n{}\n\nAn admin can answer with the buttons, or /approve, /approve session, /deny (within {}s).",
            if a.plugin.is_empty() { "the agent".to_string() } else { format!("plugin {}", a.plugin) },
            a.reason,
            a.timeout_secs
        );
        let buttons = match self.account.info() {
            Some(info) if info.buttons => vec![
                ("Allow once".to_string(), format!("ap:{token}:o")),
                ("Allow for this session".to_string(), format!("ap:{token}:s")),
                ("Deny".to_string(), format!("ap:{token}:d")),
            ],
            _ => Vec::new(),
        };
        let reply = Reply { edit: None, reply_to: None, buttons };
        outbox::queue(
            &self.gateway,
            &self.account,
            &self.chat.chat_id,
            self.chat.thread_id.as_deref(),
            &text,
            &reply,
            &key,
        );
    }
}

/// The conversation of session `key`: the stored one when `resume` and there is one, else new.
async fn open(
    gateway: &Gateway,
    account: &Account,
    key: &str,
    chat: &Chat,
    resume: bool,
) -> Result<Conversation, String> {
    let stored = if resume {
        gateway.store.kv_get(SESSIONS_SPACE, key).ok().flatten().and_then(|id| String::from_utf8(id).ok())
    } else {
        None
    };
    let workspace = gateway.root.join(workspace_name(&account.name, key));
    std::fs::create_dir_all(&workspace).map_err(|e| format!("cannot make {}: {e}", workspace.display()))?;
    let origin = talaria_cron::target::Target::Chat {
        account: account.name.clone(),
        chat: chat.chat_id.clone(),
        thread: chat.thread_id.clone(),
    }
    .to_string();
    let start = |resume: Option<String>| Start {
        workspace: Some(workspace.clone()),
        source: "gateway".into(),
        platform: Platform::Gateway,
        holder: format!("talaria gateway (pid {})", std::process::id()),
        interactive: true,
        toolsets: Some(gateway.config.toolsets_for(&account.name)),
        resume,
        // A title would cost a model call per chat (per delivery, for webhooks).
        auto_title: false,
        memory: gateway.config.memory,
        // Chats' workspaces hold no project: every chat shares the gateway's plugins.
        plugins_from: Some(gateway.host.workspace().to_path_buf()),
        // Jobs it schedules answer here.
        origin: Some(origin.clone()),
        ..Start::default()
    };
    let conversation = match gateway.host.start(start(stored.clone())).await {
        Ok(c) => c,
        Err(e) if stored.is_some() => {
            tracing::warn!(session = %key, "cannot resume its session ({e}); starting a new one");
            gateway.host.start(start(None)).await.map_err(|e| e.to_string())?
        }
        Err(e) => return Err(e.to_string()),
    };
    let id = conversation.info().session_id;
    if let Err(e) = gateway.store.kv_set(SESSIONS_SPACE, key, id.as_bytes()) {
        tracing::warn!(session = %key, "cannot remember its session: {e}");
    }
    Ok(conversation)
}

/// The directory name of a session's workspace: the account and a digest of the key (keys hold
/// ids a platform chose, never used as paths).
fn workspace_name(account: &str, key: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(key.as_bytes());
    let account: String = account.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("{account}-{}", hex::encode(&digest[..8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_names_never_carry_the_platforms_ids() {
        let name = workspace_name("telegram", "agent:main:telegram:dm:../../etc");
        assert!(name.starts_with("telegram-") && !name.contains('/') && !name.contains(".."), "{name}");
        assert_ne!(name, workspace_name("telegram", "agent:main:telegram:dm:1"));
        assert_eq!(workspace_name("my bot/../x", "k").split('-').next(), Some("my_bot____x"));
    }
}
