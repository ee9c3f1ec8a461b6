//! One chat session's worker: it holds the chat's lease, so it alone answers the chat, and
//! takes what the chat's inbox holds in order: messages become turns of its conversation
//! (or wait, interrupt, steer while one runs, as `[gateway] busy_input` says), commands and
//! approvals act at once. The reply streams by edits and typing shows while it works
//! ([`stream`]), approvals are asked of the platform's admins ([`approval`]). A message whose
//! turn a dead process left half done is finished here: its answer sent if it was committed,
//! else the turn run again ([`recovery`]). What the inbox
//! keeps for a worker ([`Kind`], [`Prompt`], [`Answer`]) and the chat's lease
//! ([`chat_lease`], [`CHAT_LEASE_TTL`]) are defined here; [`super::inbox`] starts workers.
//!
//! It ends after a while without messages (the session stays in the store and the next message
//! resumes it) or when the gateway stops; a turn the stop interrupts stays open in the inbox
//! for the next process to answer.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use talaria_core::config::BusyInput;
use talaria_core::store::inbox::{Entry, Queued, SENDING, State};
use talaria_core::{Conversation, Platform, Start};
use talaria_protocol::{Decision, Event, Image, Op, Outcome};
use tokio::sync::mpsc;

use super::outbox;
use super::{Account, Gateway, SESSIONS_SPACE};
use crate::command::Command;

mod approval;
mod commit;
mod recovery;
mod stream;

use recovery::Recovery;

/// How long a chat keeps its session's history after a message is answered: a conversation
/// in full flow (each message waiting for the answer before) then reads it from the store once,
/// not for every message, and a chat that waits holds little.
const REST_AFTER: Duration = Duration::from_secs(2);
/// How long a chat's lease lasts unless renewed (its worker renews it every third of it).
pub(crate) const CHAT_LEASE_TTL: Duration = Duration::from_secs(30);
/// Platforms show "typing" for about five seconds: it is sent again this often.
const TYPING_EVERY: Duration = Duration::from_secs(4);
/// A turn shows "typing" once it has run this long: an answer that comes sooner needs no
/// notice, and its platform call (counted in the platform's rate limits) is saved.
const TYPING_AFTER: Duration = Duration::from_millis(300);
/// When the gateway stops, a running turn gets this long to finish before it is interrupted.
const STOP_GRACE: Duration = Duration::from_secs(20);
/// How often the worker looks at its inbox when nothing told it to.
const LOOK_EVERY: Duration = Duration::from_secs(5);

/// The lease of the chat (session) `key`.
pub(crate) fn chat_lease(key: &str) -> String {
    format!("chat:{key}")
}

/// What a kept message asks of its chat's worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A message for the agent.
    Message,
    /// A chat command (`/new`, `/stop`, `/status`, `/rollback`).
    Command,
    /// An admin's answer to an approval.
    Approval,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Command => "command",
            Self::Approval => "approval",
        }
    }

    pub fn of(entry: &Entry) -> Option<Self> {
        match entry.kind.as_str() {
            "message" => Some(Self::Message),
            "command" => Some(Self::Command),
            "approval" => Some(Self::Approval),
            _ => None,
        }
    }
}

/// A message for the agent, as the inbox keeps it: the turn's text and images.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Prompt {
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    /// `PLATFORM:USER_ID` of who sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// The W3C `traceparent` of the message's span: its turn and deliveries continue it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

/// An admin's answer to an approval, as the inbox keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Answer {
    pub id: u64,
    pub decision: Decision,
    pub by: String,
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
    /// The inbox entry it answers.
    entry: Entry,
    /// The answer so far.
    text: String,
    /// The session whose answer it is (the store marks the entry done with it).
    session_id: String,
    /// The message the answer streams into, shared with the render its commit runs.
    stream: commit::Shared,
    /// The commit of its answer marked the entry done ([`commit`]): set when it ends.
    answered: bool,
    /// How much of `text` the platform was last given.
    shown: usize,
    last_edit: Instant,
    last_typing: Instant,
    /// The approval it waits for, if any.
    approval: Option<u64>,
    /// Approval tokens it handed out (forgotten when it ends).
    tokens: Vec<String>,
    /// A typing indicator is on its way to the platform.
    typing: Arc<std::sync::atomic::AtomicBool>,
}

impl Turn {
    /// The message the answer streams into, once sent.
    fn streamed(&self) -> Option<String> {
        commit::lock(&self.stream).id.clone()
    }
}

/// The worker of one session.
struct Worker {
    gateway: Arc<Gateway>,
    account: Arc<Account>,
    key: String,
    chat: Chat,
    conversation: Conversation,
    /// Entries taken from the inbox and still open (queued or running here).
    taken: HashSet<i64>,
    queue: VecDeque<Entry>,
    turn: Option<Turn>,
    /// The chat's lease, and when it was last renewed.
    lease: String,
    renewed: Instant,
}

/// Serve session `key` of `account`, whose lease this process took (`lease`), until it is idle
/// or the gateway stops.
pub(crate) async fn run(
    gateway: Arc<Gateway>,
    account: Arc<Account>,
    key: String,
    chat: Chat,
    lease: String,
    mut rx: mpsc::UnboundedReceiver<Option<Box<Entry>>>,
) {
    // Everything it awaits is boxed (a store call's future holds PostgreSQL's, a few KiB):
    // the worker's own future, kept for as long as the chat is loaded, stays small.
    let conversation = match Box::pin(open(&gateway, &account, &key, &chat, true)).await {
        Ok(c) => c,
        Err(e) => return Box::pin(cannot_start(&gateway, &account, &key, &chat, &lease, rx, &e)).await,
    };
    let mut worker = Worker {
        gateway,
        account,
        key,
        chat,
        conversation,
        taken: HashSet::new(),
        queue: VecDeque::new(),
        turn: None,
        lease,
        renewed: Instant::now(),
    };
    Box::pin(worker.look()).await;
    let mut stop_at: Option<tokio::time::Instant> = None;
    let mut idle_since = tokio::time::Instant::now();
    loop {
        if worker.turn.is_none()
            && !worker.gateway.stop.is_cancelled()
            && let Some(entry) = worker.queue.pop_front()
        {
            Box::pin(worker.start_turn(entry)).await;
            continue;
        }
        let busy = worker.turn.is_some();
        if busy {
            idle_since = tokio::time::Instant::now();
        } else if worker.queue.is_empty() {
            // What a burst of messages grew is not kept while the chat waits.
            worker.queue.shrink_to_fit();
            worker.taken.shrink_to_fit();
        }
        let typing_due =
            worker.turn.as_ref().map_or_else(tokio::time::Instant::now, |t| (t.last_typing + TYPING_EVERY).into());
        let edit_due = worker.trailing_edit_due();
        let renew_due: tokio::time::Instant = (worker.renewed + CHAT_LEASE_TTL / 3).into();
        tokio::select! {
            woken = rx.recv() => match woken {
                Some(Some(entry)) => Box::pin(worker.take(*entry)).await,
                Some(None) => Box::pin(worker.look()).await,
                None => break,
            },
            stamped = worker.conversation.next_event(), if busy => match stamped {
                Some(stamped) => Box::pin(worker.on_event(stamped.turn_id, stamped.event)).await,
                None => break,
            },
            () = tokio::time::sleep_until(typing_due), if busy => worker.typing(),
            () = tokio::time::sleep_until(edit_due.unwrap_or_else(Instant::now).into()), if edit_due.is_some() => {
                Box::pin(worker.stream()).await;
            }
            () = tokio::time::sleep_until(renew_due) => {
                if !Box::pin(worker.renew()).await {
                    // Another process serves the chat now: this one must not answer it too.
                    if busy {
                        worker.conversation.submit(Op::Interrupt);
                    }
                    lock_and_forget(&worker.gateway, &worker.key);
                    break;
                }
            }
            () = tokio::time::sleep(LOOK_EVERY) => Box::pin(worker.look()).await,
            () = worker.gateway.stop.cancelled(), if stop_at.is_none() => {
                stop_at = Some(tokio::time::Instant::now() + STOP_GRACE);
                if !busy && Box::pin(worker.can_end(&mut rx)).await {
                    break;
                }
            }
            () = tokio::time::sleep_until(stop_at.unwrap_or_else(tokio::time::Instant::now)), if stop_at.is_some() && busy => {
                tracing::info!(session = %worker.key, "the gateway is stopping: interrupting the running turn");
                worker.conversation.submit(Op::Interrupt);
                stop_at = Some(tokio::time::Instant::now() + STOP_GRACE);
            }
            () = tokio::time::sleep_until(idle_since + worker.gateway.config.idle()), if !busy => {
                if Box::pin(worker.can_end(&mut rx)).await {
                    worker.gateway.put_away.store(true, Ordering::SeqCst);
                    break;
                }
                idle_since = tokio::time::Instant::now();
            }
        }
        if stop_at.is_some() && worker.turn.is_none() && Box::pin(worker.can_end(&mut rx)).await {
            break;
        }
    }
    Box::pin(worker.conversation.shutdown()).await;
    drop(rx);
    // Whatever is still open (the stop came first) is answered by the next process to look.
    let _ = Box::pin(worker.gateway.store.release_lease(&chat_lease(&worker.key), &worker.lease)).await;
}

/// The chat's conversation could not start (`e`): answer its open messages with the reason, so
/// the chat is not left waiting, and let the chat go.
async fn cannot_start(
    gateway: &Gateway,
    account: &Account,
    key: &str,
    chat: &Chat,
    lease: &str,
    rx: mpsc::UnboundedReceiver<Option<Box<Entry>>>,
    e: &impl std::fmt::Display,
) {
    tracing::error!(account = %account.name, session = %key, "cannot start a conversation: {e}");
    for entry in gateway.store.inbox_open(key).await.unwrap_or_default() {
        let text = format!("I cannot start a conversation: {e}");
        let _ = finish(gateway, account, chat, &entry, &text, None).await;
    }
    lock_and_forget(gateway, key);
    drop(rx);
    let _ = gateway.store.release_lease(&chat_lease(key), lease).await;
}

/// Forget the worker of `key` (it is ending).
fn lock_and_forget(gateway: &Gateway, key: &str) {
    super::lock(&gateway.sessions).remove(key);
}

/// Answer `entry` with `markdown`: to whoever waits on it, or to the chat through the ledger
/// (replacing the streamed message `edit`), then mark it done. Whether it was: when the store
/// failed, the entry stays open, to be taken again (and finished from what was committed).
#[must_use]
async fn finish(
    gateway: &Gateway,
    account: &Account,
    chat: &Chat,
    entry: &Entry,
    markdown: &str,
    edit: Option<String>,
) -> bool {
    let done = if entry.respond {
        gateway.store.inbox_done(entry.id, Some(markdown)).await
    } else {
        // The reply's messages are queued with the entry marked done: one transaction.
        let trace = serde_json::from_str::<Prompt>(&entry.body).ok().and_then(|p| p.trace);
        let queued = commit::queued(account, chat, entry, markdown, edit, trace);
        let queued: Vec<_> = queued.iter().map(Queued::new_delivery).collect();
        let done = gateway.store.inbox_done_queueing(entry.id, &queued).await;
        if done.is_ok() {
            outbox::kept(account, queued.len());
        }
        done
    };
    match done {
        Ok(()) => {
            if entry.respond {
                gateway.answered(entry.id, markdown);
            }
            true
        }
        Err(e) => {
            tracing::error!(account = %account.name, "cannot mark a message answered: {e}");
            false
        }
    }
}

/// Mark `entry` done without an answer.
async fn drop_entry(gateway: &Gateway, entry: &Entry) {
    if let Err(e) = gateway.store.inbox_done(entry.id, None).await {
        tracing::error!("cannot mark a message done: {e}");
    }
}

impl Worker {
    /// Take what the inbox holds for the chat and this worker has not taken yet.
    async fn look(&mut self) {
        let open = match self.gateway.store.inbox_open(&self.key).await {
            Ok(open) => open,
            Err(e) => return tracing::warn!(session = %self.key, "cannot read the inbox: {e}"),
        };
        // An entry taken here and no longer open is done: it never comes back, so it need not
        // be remembered (a chat of a thousand messages must not keep a thousand ids).
        self.taken.retain(|id| open.iter().any(|e| e.id == *id));
        for entry in open {
            self.take(entry).await;
        }
    }

    /// Take `entry` (read from the inbox, or handed over by the process that kept it), unless
    /// it was taken already.
    async fn take(&mut self, entry: Entry) {
        if self.taken.len() > self.queue.len() + 1 {
            // Entries answered since (a busy chat may go long without a look).
            let (queue, turn) = (&self.queue, &self.turn);
            self.taken
                .retain(|id| queue.iter().any(|e| e.id == *id) || turn.as_ref().is_some_and(|t| t.entry.id == *id));
        }
        if !self.taken.insert(entry.id) {
            return;
        }
        if entry.respond {
            self.gateway.took(entry.id);
        }
        match Kind::of(&entry) {
            Some(Kind::Message) => self.on_message(entry).await,
            Some(Kind::Command) => {
                self.on_command(&entry).await;
                drop_entry(&self.gateway, &entry).await;
            }
            Some(Kind::Approval) => {
                self.on_approval(&entry).await;
                drop_entry(&self.gateway, &entry).await;
            }
            None => {
                tracing::warn!(session = %self.key, kind = %entry.kind, "an inbox entry of an unknown kind; dropped");
                drop_entry(&self.gateway, &entry).await;
            }
        }
    }

    /// Renew the chat's lease; whether it is still this process's.
    async fn renew(&mut self) -> bool {
        self.renewed = Instant::now();
        match self.gateway.store.renew_lease(&chat_lease(&self.key), &self.lease, CHAT_LEASE_TTL).await {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(session = %self.key, "the chat's lease was taken by another process; leaving it to that one");
                false
            }
            Err(e) => {
                tracing::warn!(session = %self.key, "cannot renew the chat's lease: {e}");
                true
            }
        }
    }

    /// Whether the worker may end: nothing is waiting for it. Checked under the sessions' lock,
    /// so a message handed over meanwhile is never lost: it is taken, and the worker goes on.
    async fn can_end(&mut self, rx: &mut mpsc::UnboundedReceiver<Option<Box<Entry>>>) -> bool {
        self.look().await;
        if self.turn.is_some() || (!self.queue.is_empty() && !self.gateway.stop.is_cancelled()) {
            return false;
        }
        let handed = {
            let mut sessions = super::lock(&self.gateway.sessions);
            let handed = rx.try_recv().ok();
            if handed.is_none() {
                sessions.remove(&self.key);
            }
            handed
        };
        match handed {
            None => true,
            Some(handed) => {
                match handed {
                    Some(entry) => self.take(*entry).await,
                    None => self.look().await,
                }
                false
            }
        }
    }

    async fn say(&self, markdown: &str, key: &str) {
        self.gateway.reply(&self.account, &self.chat.chat_id, self.chat.thread_id.as_deref(), markdown, key).await;
    }

    async fn on_message(&mut self, entry: Entry) {
        // Left running by a process that died: first of all.
        if entry.state == State::Running {
            return self.queue.push_front(entry);
        }
        if self.turn.is_none() {
            return self.queue.push_back(entry);
        }
        if self.turn.as_ref().is_some_and(|t| t.approval.is_some()) {
            // A message does not answer (or drop) the approval the turn waits for: it is
            // answered after.
            let key = format!("after-approval:{}:{}", self.key, entry.message_id);
            self.queue.push_back(entry);
            return self
                .say(
                    "I am waiting for an admin to answer the approval above (/approve, /approve session or /deny); I will read this after.",
                    &key,
                )
                .await;
        }
        match self.gateway.config.busy_input {
            BusyInput::Queue => self.queue.push_back(entry),
            BusyInput::Interrupt => {
                self.conversation.submit(Op::Interrupt);
                self.queue.push_back(entry);
            }
            BusyInput::Steer => {
                let prompt: Prompt = serde_json::from_str(&entry.body).unwrap_or_default();
                self.conversation.submit(Op::Steer { text: prompt.text });
                drop_entry(&self.gateway, &entry).await;
            }
        }
    }

    /// The commit of `turn`'s answer, `text`, marked its entry done: hand the reply to whoever
    /// waits on it, or tell the courier its deliveries are queued.
    fn delivered(&self, turn: &Turn, text: &str) {
        if turn.entry.respond {
            self.gateway.answered(turn.entry.id, &commit::markdown(text));
        } else {
            outbox::kept(&self.account, commit::lock(&turn.stream).queued);
        }
    }

    fn turn_key(&self) -> String {
        self.turn.as_ref().map_or_else(String::new, |t| t.entry.message_id.clone())
    }

    async fn on_command(&mut self, entry: &Entry) {
        let key = format!("cmd:{}:{}", self.key, entry.message_id);
        let bot = self.account.info().map(|i| i.bot_name).unwrap_or_default();
        let Some(command) = crate::command::parse(&entry.body, &bot) else { return };
        match command {
            Command::Stop => {
                let queued = self.queue.len();
                for dropped in std::mem::take(&mut self.queue) {
                    drop_entry(&self.gateway, &dropped).await;
                }
                if self.turn.is_some() {
                    self.conversation.submit(Op::Interrupt);
                    self.say("Stopped.", &key).await;
                } else if queued > 0 {
                    self.say("Dropped the messages that were waiting.", &key).await;
                } else {
                    self.say("Nothing to stop.", &key).await;
                }
            }
            Command::New => {
                if self.turn.is_some() {
                    self.conversation.submit(Op::Interrupt);
                    let mut text = String::new();
                    while let Some(stamped) = self.conversation.next_event().await {
                        if let Event::TurnEnd(end) = stamped.event {
                            text = end.text;
                            break;
                        }
                    }
                    if let Some(turn) = self.end_turn().await {
                        if turn.answered {
                            // It was answered before the interrupt reached it.
                            self.delivered(&turn, &text);
                        } else {
                            drop_entry(&self.gateway, &turn.entry).await;
                        }
                    }
                }
                for dropped in std::mem::take(&mut self.queue) {
                    drop_entry(&self.gateway, &dropped).await;
                }
                let _ = self.gateway.store.kv_delete(SESSIONS_SPACE, &self.key).await;
                match open(&self.gateway, &self.account, &self.key, &self.chat, false).await {
                    Ok(fresh) => {
                        let mut old = std::mem::replace(&mut self.conversation, fresh);
                        old.shutdown_with("new", |_| {}).await;
                        self.say("Started a new conversation.", &key).await;
                    }
                    Err(e) => self.say(&format!("I cannot start a new conversation: {e}"), &key).await,
                }
            }
            Command::Rollback { steps, force } => {
                if self.turn.is_some() {
                    self.say("I am working: /stop me first, or roll back when I am done.", &key).await;
                    return;
                }
                let answer = self.conversation.run(Op::Rollback { steps, force }, |_| {}).await;
                let text = match answer.map(|s| s.event) {
                    Some(Event::RolledBack { text, .. }) => text,
                    Some(Event::Error { text, .. }) => text,
                    _ => "I could not roll back.".to_string(),
                };
                self.say(&text, &key).await;
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
                self.say(&text, &key).await;
            }
            // Answered by the gateway, which finds the approval in the store.
            Command::Approve { .. } | Command::Deny | Command::Help | Command::Usage(_) => {}
        }
    }

    async fn start_turn(&mut self, mut entry: Entry) {
        let prompt: Prompt = serde_json::from_str(&entry.body).unwrap_or_default();
        if entry.streamed.as_deref() == Some(SENDING) {
            tracing::warn!(
                session = %self.key,
                chat = %self.chat.chat_id,
                "a process ended while sending the start of this answer; answering anew (if the platform took it then, the answer shows twice)"
            );
            entry.streamed = None;
        }
        if entry.state == State::Running {
            match self.recovery(&entry).await {
                Recovery::Answered(text) => {
                    tracing::info!(session = %self.key, message_id = %entry.message_id, "a dead process answered this message; sending its answer");
                    let text = if text.trim().is_empty() { "(no answer)".to_string() } else { text };
                    if !finish(&self.gateway, &self.account, &self.chat, &entry, &text, entry.streamed.clone()).await {
                        self.taken.remove(&entry.id);
                    }
                    return;
                }
                Recovery::Again => {
                    tracing::info!(session = %self.key, message_id = %entry.message_id, "a dead process left this turn half done; running it again");
                    self.conversation.submit(Op::Undo);
                }
                Recovery::Fresh => {}
            }
        }
        let info = self.conversation.info();
        if entry.state != State::Running {
            // Marked with the turn's lease: the count it notes is the one the turn starts from.
            self.gateway.store.inbox_start_with_lease(entry.id, &info.session_id);
        }
        // Marked done by the commit of the answer, when it can be.
        let stream: commit::Shared =
            Arc::new(std::sync::Mutex::new(commit::Stream { id: entry.streamed.clone(), ..commit::Stream::default() }));
        let render =
            commit::render(self.account.clone(), self.chat.clone(), &entry, stream.clone(), prompt.trace.clone());
        self.gateway.store.inbox_done_with_answer(entry.id, &info.session_id, render);
        let op = self.conversation.submit(Op::UserTurn {
            text: prompt.text,
            images: prompt.images,
            sender: prompt.sender,
            trace: prompt.trace,
        });
        self.account.busy.fetch_add(1, Ordering::SeqCst);
        let now = Instant::now();
        self.turn = Some(Turn {
            op,
            session_id: info.session_id,
            stream,
            answered: false,
            entry,
            text: String::new(),
            shown: 0,
            last_edit: now,
            // The first notice is due `TYPING_AFTER` from now.
            last_typing: now - TYPING_EVERY + TYPING_AFTER,
            approval: None,
            tokens: Vec::new(),
            typing: Arc::default(),
        });
    }

    /// The turn is over: forget it (and the approvals it asked), and learn whether the commit
    /// of its answer marked its entry done.
    async fn end_turn(&mut self) -> Option<Turn> {
        let mut turn = self.turn.take()?;
        turn.answered = self.gateway.store.inbox_answered(turn.entry.id, &turn.session_id);
        self.account.busy.fetch_sub(1, Ordering::SeqCst);
        for token in &turn.tokens {
            super::forget_approval(&self.gateway.store, token).await;
        }
        Some(turn)
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
            // A chat holds no question open while the turn waits: the model asks in its reply,
            // and the person's next message is the answer.
            Event::ClarifyNeeded(c) => {
                self.conversation.submit(Op::Answer {
                    id: c.id,
                    text: "(This chat cannot hold a question open while you work. Ask it in your reply and end your \
                       turn; the person's next message answers it. Or decide yourself if the choice is safe.)"
                        .into(),
                });
            }
            Event::ApprovalResolved { id, .. } => {
                if let Some(turn) = &mut self.turn
                    && turn.approval == Some(id)
                {
                    turn.approval = None;
                }
            }
            Event::TurnEnd(end) => {
                let stopping = self.gateway.stop.is_cancelled();
                let Some(turn) = self.end_turn().await else { return };
                if turn.answered {
                    return self.delivered(&turn, &end.text);
                }
                let markdown = match end.outcome {
                    Outcome::Completed | Outcome::BudgetExhausted | Outcome::Truncated => {
                        Some(commit::markdown(&end.text))
                    }
                    // Stopped by the gateway's own stop: the next process to serve the chat
                    // answers it (its entry stays open).
                    Outcome::Interrupted if stopping => {
                        tracing::info!(session = %self.key, "the interrupted turn is left for the next gateway to answer");
                        return;
                    }
                    Outcome::Interrupted => turn.streamed().map(|_| format!("{}\n\n(stopped)", turn.text)),
                    Outcome::Failed(why) => Some(format!("Sorry, I could not answer: {why}")),
                    Outcome::Refused(why) => Some(why),
                };
                match markdown {
                    Some(markdown) => {
                        if !finish(&self.gateway, &self.account, &self.chat, &turn.entry, &markdown, turn.streamed())
                            .await
                        {
                            // Taken again at a later look, once the store answers.
                            self.taken.remove(&turn.entry.id);
                        }
                    }
                    None => drop_entry(&self.gateway, &turn.entry).await,
                }
            }
            _ => {}
        }
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
        gateway.store.kv_get(SESSIONS_SPACE, key).await.ok().flatten().and_then(|id| String::from_utf8(id).ok())
    } else {
        None
    };
    let workspace = gateway.root.join(workspace_name(&account.name, key));
    std::fs::create_dir_all(&workspace).map_err(|e| format!("cannot make {}: {e}", workspace.display()))?;
    let origin = talaria_core::cron::target::Target::Chat {
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
        unconfined_commands: gateway.config.unconfined(&account.name),
        // Chats mostly wait: after a pause between messages the history is the store's to keep.
        rest_after: Some(REST_AFTER),
        kept: Some(gateway.kept.clone()),
        // The inbox holds each message until it is answered.
        message_kept: true,
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
    if let Err(e) = gateway.store.kv_set(SESSIONS_SPACE, key, id.as_bytes()).await {
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
