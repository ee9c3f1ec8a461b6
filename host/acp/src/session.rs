//! One ACP session: a talaria conversation, the prompt running in it, and the task that turns
//! its events into `session/update` notifications ([`crate::updates`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::v1::{
    ContentBlock, Error, ErrorCode, PromptResponse, SessionMode, SessionModeState, StopReason,
};
use talaria_core::store::Store;
use talaria_core::{Conversation, Host, Offered, Start, Submitter};
use talaria_protocol::{Event, Op, Outcome, SessionReason, Stamped, ToolSpec};
use tokio::sync::oneshot;

use crate::content::{self, Command};
use crate::editor::{self, Editor, Offers};
use crate::updates;
use crate::wire::{Out, error};
use crate::{Options, internal, lock};

/// The modes a session offers: whether dangerous commands and new hosts are asked about.
pub const MODES: [(&str, &str, &str); 2] = [
    ("ask", "Ask", "Ask before running a dangerous command or connecting to a new host"),
    ("yolo", "Yolo", "Run dangerous commands and connect to new hosts without asking"),
];

/// A submission whose last event someone waits for.
struct Waiter {
    op: Op,
    done: oneshot::Sender<Stamped>,
}

/// An ACP session; the [`Conversation`] itself belongs to its pump task.
pub struct AcpSession {
    /// The id the client knows it by: the stored session it started as (after compression the
    /// conversation goes on in a child session under the same ACP id).
    pub id: String,
    pub workspace: PathBuf,
    pub out: Out,
    pub store: Arc<Store>,
    submitter: Submitter,
    /// The stored session the conversation is in now.
    current: Mutex<String>,
    pub tools: Mutex<Vec<Arc<ToolSpec>>>,
    waiting: Mutex<HashMap<u64, Waiter>>,
    /// A prompt is running; the one it waits for.
    prompt: Mutex<Option<u64>>,
    /// `session/cancel` came for the running prompt.
    cancelled: AtomicBool,
    yolo: AtomicBool,
    pump: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The editor's files and terminal, where the client offers them.
    pub editor: Option<Arc<Editor>>,
}

impl AcpSession {
    /// Start a conversation in `workspace`: a new session, or the stored session `resume`
    /// continued where compression last took it.
    pub async fn open(
        host: &Host,
        options: &Options,
        out: Out,
        workspace: PathBuf,
        resume: Option<String>,
        mcp_servers: &[agent_client_protocol_schema::v1::McpServer],
        offers: Offers,
    ) -> Result<(Arc<Self>, Conversation, Vec<String>), Error> {
        let store = host.store().clone();
        let continue_in = match &resume {
            None => None,
            Some(id) => Some(latest_of(&store, id).await?),
        };
        // A new session's id is known only once it started: the editor is told it then.
        let editor = offers.any().then(|| {
            let grants = editor::files_grants(host, &workspace);
            Arc::new(Editor::new(out.clone(), resume.clone().unwrap_or_default(), offers, grants, host.home()))
        });
        let (servers, skipped) = editor_servers(mcp_servers);
        let mut offered = Offered::default();
        if let Some(e) = &editor {
            // The editor runs commands outside talaria's sandbox: only when the user said so.
            if offers.terminal && host.config().editor_terminal() {
                offered.terminal = Some(e.clone() as Arc<dyn talaria_core::Terminal>);
            }
            if offers.read || offers.write {
                offered.tools = Some(e.clone() as Arc<dyn talaria_core::ToolOverlay>);
            }
        }
        let start = Start {
            workspace: Some(workspace.clone()),
            source: "acp".into(),
            platform: talaria_core::Platform::Acp,
            holder: "talaria acp".into(),
            interactive: true,
            yolo: options.yolo,
            model: options.model.clone(),
            toolsets: options.toolsets.clone(),
            max_turns: None,
            stream: Some(true),
            resume: continue_in.clone(),
            fork: false,
            offered,
            auto_title: true,
            memory: true,
            plugins_from: None,
            allow: Vec::new(),
            origin: None,
            mcp_servers: servers,
            ..Start::default()
        };
        let mut conversation = host.start(start).await.map_err(|e| match e {
            talaria_core::Error::Store(talaria_core::store::Error::SessionNotFound { .. }) => error(
                ErrorCode::ResourceNotFound,
                format!("no stored session `{}`", resume.as_deref().unwrap_or_default()),
            ),
            other => error(ErrorCode::InternalError, other.to_string()),
        })?;
        let info = conversation.info();
        let id = resume.unwrap_or_else(|| info.session_id.clone());
        if let Some(e) = &editor {
            e.set_session(&id);
        }
        let session = Arc::new(Self {
            id,
            workspace,
            out,
            store,
            submitter: conversation.submitter(),
            current: Mutex::new(info.session_id.clone()),
            tools: Mutex::new(info.tools.clone()),
            waiting: Mutex::new(HashMap::new()),
            prompt: Mutex::new(None),
            cancelled: AtomicBool::new(false),
            yolo: AtomicBool::new(conversation.yolo()),
            pump: Mutex::new(None),
            editor,
        });
        let mut notes = Vec::new();
        notes.extend(skipped);
        // Problems found while starting (a plugin that did not load) come before the session.
        while let Some(stamped) = conversation.try_next_event() {
            if let Event::Notice { text, .. } = stamped.event {
                notes.push(text);
            }
        }
        Ok((session, conversation, notes))
    }

    pub fn modes(&self) -> SessionModeState {
        let current = if self.yolo.load(Ordering::Relaxed) { "yolo" } else { "ask" };
        let modes = MODES
            .iter()
            .map(|(id, name, description)| SessionMode::new(*id, *name).description((*description).to_string()))
            .collect();
        SessionModeState::new(current, modes)
    }

    pub fn set_mode(&self, mode: &str) -> Result<(), Error> {
        let on = match mode {
            "ask" => false,
            "yolo" => true,
            other => {
                return Err(error(
                    ErrorCode::InvalidParams,
                    format!("unknown mode `{other}`: this session offers `ask` and `yolo`"),
                ));
            }
        };
        self.yolo.store(on, Ordering::Relaxed);
        self.submitter.submit(Op::SetYolo { on });
        Ok(())
    }

    /// Send `update` about this session.
    pub fn send(&self, update: agent_client_protocol_schema::v1::SessionUpdate) {
        let n = agent_client_protocol_schema::v1::SessionNotification::new(self.id.clone(), update);
        self.out.notify("session/update", &n);
    }

    /// Something the user should know that is not part of the answer: shown as a thought (ACP's
    /// notices need a client capability most clients lack), and logged.
    pub fn notice(&self, text: &str) {
        tracing::warn!(session = %self.id, "{text}");
        self.send(updates::thought(&format!("Note: {text}")));
    }

    /// Replay the stored history as updates (`session/load`).
    pub async fn replay(&self) -> Result<(), Error> {
        let current = lock(&self.current).clone();
        let messages = self.store.messages(&current).await.map_err(internal)?;
        let tools = lock(&self.tools).clone();
        for update in updates::replay(messages.into_iter().map(|m| m.message), &tools, &self.workspace) {
            self.send(update);
        }
        Ok(())
    }

    /// Run a prompt to its end; its turn continues the trace `trace` (a W3C `traceparent`).
    pub async fn prompt(&self, blocks: Vec<ContentBlock>, trace: Option<String>) -> Result<PromptResponse, Error> {
        let (request, notes) = content::request(&blocks);
        for note in notes {
            self.notice(&note);
        }
        let op = match request {
            Command::Turn(text) if text.trim().is_empty() => {
                return Err(error(ErrorCode::InvalidParams, "the prompt has no text to send"));
            }
            Command::Turn(text) => Op::UserTurn { text, images: Vec::new(), sender: None, trace },
            Command::Op(op) => op,
            Command::Unknown(text) => {
                self.send(updates::message(&text));
                return Ok(PromptResponse::new(StopReason::EndTurn));
            }
        };
        let (id, done) = {
            let mut prompt = lock(&self.prompt);
            if prompt.is_some() {
                return Err(error(
                    ErrorCode::InvalidRequest,
                    "a prompt is already running in this session: wait for its answer, or send session/cancel",
                ));
            }
            self.cancelled.store(false, Ordering::Relaxed);
            let (id, done) = self.submit_waiting(op);
            *prompt = Some(id);
            (id, done)
        };
        let finished = done.await;
        *lock(&self.prompt) = None;
        let Ok(last) = finished else {
            return Err(error(ErrorCode::InternalError, "the conversation stopped before the prompt was answered"));
        };
        debug_assert_eq!(last.op, id);
        let cancelled = self.cancelled.swap(false, Ordering::Relaxed);
        match last.event {
            Event::TurnEnd(end) => match end.outcome {
                Outcome::Completed => Ok(PromptResponse::new(StopReason::EndTurn)),
                Outcome::Interrupted => Ok(PromptResponse::new(StopReason::Cancelled)),
                Outcome::BudgetExhausted => Ok(PromptResponse::new(StopReason::MaxTurnRequests)),
                Outcome::Truncated => Ok(PromptResponse::new(StopReason::MaxTokens)),
                Outcome::Failed(why) if cancelled => {
                    tracing::debug!("failed after a cancel: {why}");
                    Ok(PromptResponse::new(StopReason::Cancelled))
                }
                Outcome::Failed(why) => Err(error(ErrorCode::InternalError, why)),
                // The prompt was not kept: ACP's refusal says so to the editor.
                Outcome::Refused(why) => {
                    self.send(updates::message(&why));
                    Ok(PromptResponse::new(StopReason::Refusal))
                }
            },
            Event::Error { text } => {
                self.send(updates::message(&text));
                Ok(PromptResponse::new(StopReason::EndTurn))
            }
            // A command's own answer was shown by the pump.
            _ => Ok(PromptResponse::new(if cancelled { StopReason::Cancelled } else { StopReason::EndTurn })),
        }
    }

    /// `session/cancel`: stop the running prompt (it answers `cancelled`).
    pub fn cancel(&self) {
        if lock(&self.prompt).is_some() {
            self.cancelled.store(true, Ordering::Relaxed);
            self.submitter.submit(Op::Interrupt);
        }
    }

    /// Whether the running prompt was cancelled (a turn that starts after the cancel is stopped
    /// too).
    pub fn cancel_pending(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    pub fn submit(&self, op: Op) -> u64 {
        self.submitter.submit(op)
    }

    /// Submit `op` and get its last event when it comes.
    fn submit_waiting(&self, op: Op) -> (u64, oneshot::Receiver<Stamped>) {
        let (tx, rx) = oneshot::channel();
        // Held while submitting, so the pump cannot see the answer before the waiter is there.
        let mut waiting = lock(&self.waiting);
        let id = self.submitter.submit(op.clone());
        waiting.insert(id, Waiter { op, done: tx });
        (id, rx)
    }

    /// Whether someone waits for op `id` (its answers are shown; others are not).
    pub fn awaited(&self, id: u64) -> bool {
        lock(&self.waiting).contains_key(&id)
    }

    /// Hand `stamped` to whoever waits for its op, if it is that op's last event.
    pub fn finished(&self, stamped: &Stamped) {
        let mut waiting = lock(&self.waiting);
        if let Some(w) = waiting.get(&stamped.op)
            && w.op.finished_by(&stamped.event)
            && let Some(w) = waiting.remove(&stamped.op)
        {
            let _ = w.done.send(stamped.clone());
        }
    }

    /// The conversation moved to another stored session (compression).
    pub fn moved(&self, started: &talaria_protocol::SessionStarted, tools: Vec<Arc<ToolSpec>>) {
        if matches!(started.reason, SessionReason::Compressed { .. }) {
            tracing::info!(session = %self.id, "continues in {} after compression", started.session_id);
        }
        *lock(&self.current) = started.session_id.clone();
        *lock(&self.tools) = tools;
    }

    /// The task reporting this session's events (see [`crate::pump`]).
    pub fn set_pump(&self, pump: tokio::task::JoinHandle<()>) {
        *lock(&self.pump) = Some(pump);
    }

    /// Close the conversation (its session ends as `exit`) and wait for the pump to finish.
    pub async fn close(&self) {
        let (tx, done) = oneshot::channel();
        {
            let mut waiting = lock(&self.waiting);
            let id = self.submitter.submit(Op::Shutdown { reason: String::new() });
            waiting.insert(id, Waiter { op: Op::Shutdown { reason: String::new() }, done: tx });
        }
        let _ = done.await;
        let pump = lock(&self.pump).take();
        if let Some(pump) = pump {
            let _ = pump.await;
        }
    }
}

/// The stored session `id` continues in: itself, or the last child compression moved it to.
async fn latest_of(store: &Arc<Store>, id: &str) -> Result<String, Error> {
    {
        let Some(mut at) = store.session(id).await.map_err(internal)? else {
            return Err(error(ErrorCode::ResourceNotFound, format!("no stored session `{id}`")));
        };
        for _ in 0..64 {
            let q = talaria_core::store::ListQuery {
                limit: 1,
                parent_id: Some(&at.id),
                source: Some(&at.source),
                ..Default::default()
            };
            match store.list_sessions_with(&q).await.map_err(internal)?.into_iter().next() {
                Some(child) => at = child,
                None => break,
            }
        }
        Ok(at.id)
    }
}

/// The editor's MCP servers as talaria runs them (their env and headers taken as given); the
/// ones it cannot, in words.
fn editor_servers(
    servers: &[agent_client_protocol_schema::v1::McpServer],
) -> (std::collections::BTreeMap<String, talaria_core::mcp::config::ServerToml>, Vec<String>) {
    use agent_client_protocol_schema::v1::McpServer;
    use talaria_core::mcp::config::ServerToml;
    let mut out = std::collections::BTreeMap::new();
    let mut skipped = Vec::new();
    for server in servers {
        let (name, config) = match server {
            McpServer::Stdio(s) => (
                s.name.clone(),
                ServerToml {
                    command: Some(s.command.display().to_string()),
                    args: s.args.clone(),
                    env: s.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect(),
                    verbatim: true,
                    ..ServerToml::default()
                },
            ),
            McpServer::Http(s) => (
                s.name.clone(),
                ServerToml {
                    url: Some(s.url.clone()),
                    headers: s.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
                    verbatim: true,
                    ..ServerToml::default()
                },
            ),
            McpServer::Sse(s) => {
                skipped.push(format!(
                    "MCP server `{}` is left out: it speaks the old SSE transport, which talaria does not (streamable HTTP and stdio work)",
                    s.name
                ));
                continue;
            }
            _ => {
                skipped.push("an MCP server of a transport talaria does not know is left out".to_string());
                continue;
            }
        };
        // Names become tool-name prefixes: keep them to what every provider takes.
        let clean: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
        out.insert(clean, config);
    }
    (out, skipped)
}
