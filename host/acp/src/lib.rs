//! `talaria acp`: an [Agent Client Protocol](https://agentclientprotocol.com) server, so editors
//! (Zed, and any other ACP client) drive talaria's conversations. It is a front door like the
//! terminal: it opens the host once ([`talaria_core::Host`]), starts a
//! [`Conversation`](talaria_core::Conversation) per ACP session, submits
//! [`Op`](talaria_protocol::Op)s for the client's requests and renders the conversation's events
//! as `session/update` notifications.
//!
//! Protocol version 1, JSON-RPC 2.0 over stdio, one message per line; stdout carries nothing
//! else (logs go to stderr). [`serve`] runs it over any reader and writer; [`serve_opening`]
//! answers `initialize` at once while the host opens in the background.
//!
//! # What it offers
//! - `initialize` (capabilities as they are: session load, list, resume and close; embedded
//!   context in prompts; the client's MCP servers over stdio and HTTP (not the old SSE
//!   transport); no images or audio, no authentication),
//! - `session/new` (the `cwd` becomes the workspace), `session/load` (replays the history as
//!   updates), `session/resume`, `session/list`, `session/close`, `session/prompt`,
//!   `session/cancel`, `session/set_mode` (`ask`, `yolo`),
//! - updates: message and thought chunks, tool calls with their kind, title, locations and raw
//!   input, their results (diffs for file edits, the output of commands), the plan from the
//!   `todo` tool, available commands (`/compact`, `/undo`, ...),
//! - dangerous commands and connections to hosts only a wildcard grant allows become
//!   `session/request_permission`; no answer in time, or a failed request, denies,
//! - where the client offers them, its terminal (`terminal/*`: the session's commands run there,
//!   shown live in their tool calls) and its files (`fs/*`: `read_file`, `write_file` and
//!   `patch` see and change the editor's buffers, unsaved edits included), within the limits of
//!   the sandboxed tools they stand in for (see `editor`).
//!
//! Sessions are stored in the same store as the terminal's, with source `acp`.
//!
//! Not yet: `search_files` reads the files on disk (the editor has no search request); the
//! `clarify` tool's questions are answered with a note asking the model to ask in its reply;
//! images and audio in prompts are left out with a note.
//!
//! # Why the schema crate and our own loop
//! The wire types come from `agent-client-protocol-schema` (the protocol's own Rust types,
//! versioned by protocol: `v1`). The connection itself, reading lines, matching answers to our
//! requests and running each request as its own task, is the small loop in `wire` and here.
//! The `agent-client-protocol` crate, which would provide that loop, replaced its API in every
//! major release this year (five in 2026), and it runs handlers one at a time, so a prompt must
//! be moved off it by hand or cancel and permission answers deadlock. Our loop is a few hundred
//! lines we control, over types that change only with the protocol.

mod content;
mod editor;
mod pump;
mod session;
mod updates;
mod wire;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse, Error, ErrorCode, Implementation,
    InitializeRequest, InitializeResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    LoadSessionResponse, McpCapabilities, McpServer, NewSessionRequest, NewSessionResponse, PromptCapabilities,
    PromptRequest, RequestId, ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities,
    SessionCloseCapabilities, SessionInfo, SessionListCapabilities, SessionResumeCapabilities, SetSessionModeRequest,
    SetSessionModeResponse,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use talaria_core::Host;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite};

use crate::editor::Offers;
use crate::pump::Opened;
use crate::session::AcpSession;
use crate::wire::{Incoming, Out, error};

/// Sessions listed per page of `session/list`.
const PAGE: usize = 50;

/// How `talaria acp` starts its conversations.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `provider/model` over the configured one.
    pub model: talaria_core::ModelChoice,
    /// Toolsets over `[agent] toolsets`.
    pub toolsets: Option<Vec<String>>,
    /// Start every session in `yolo` mode.
    pub yolo: bool,
}

/// Serve ACP on `input` and `output` until the client closes `input`; then every session is
/// closed (its work saved) before this returns.
///
/// # Errors
/// Reading `input` failed.
pub async fn serve<R, W>(host: Arc<Host>, options: Options, input: R, output: W) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    run(
        HostSlot { host: tokio::sync::OnceCell::new_with(Some(Ok(host))), opening: Mutex::new(None) },
        options,
        input,
        output,
    )
    .await
}

/// [`serve`], opening the host with `open` on a thread of its own meanwhile: `initialize`
/// needs no host and is answered at once. If the host cannot be opened (config.toml is not
/// valid, the store is damaged), every request that needs it is answered with the reason.
///
/// # Errors
/// Reading `input` failed.
pub async fn serve_opening<R, W>(
    open: impl Future<Output = Result<Host, talaria_core::Error>> + Send + 'static,
    options: Options,
    input: R,
    output: W,
) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let opening = tokio::spawn(open);
    run(HostSlot { host: tokio::sync::OnceCell::new(), opening: Mutex::new(Some(opening)) }, options, input, output)
        .await
}

/// The host, once open (or why it could not be).
struct HostSlot {
    host: tokio::sync::OnceCell<Result<Arc<Host>, String>>,
    opening: Mutex<Option<tokio::task::JoinHandle<Result<Host, talaria_core::Error>>>>,
}

impl HostSlot {
    async fn get(&self) -> Result<Arc<Host>, Error> {
        let opened = self
            .host
            .get_or_init(|| async {
                let Some(opening) = lock(&self.opening).take() else {
                    return Err("the host was not opened".to_string());
                };
                match opening.await {
                    Ok(Ok(host)) => Ok(Arc::new(host)),
                    Ok(Err(e)) => {
                        tracing::error!("cannot open talaria: {e}");
                        Err(e.to_string())
                    }
                    Err(e) => Err(format!("opening talaria stopped: {e}")),
                }
            })
            .await;
        opened.clone().map_err(internal)
    }
}

async fn run<R, W>(host: HostSlot, options: Options, input: R, output: W) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, writer) = Out::new(output);
    let server = Arc::new(Server {
        host,
        options,
        out: out.clone(),
        sessions: Mutex::new(HashMap::new()),
        offers: Mutex::new(Offers::default()),
    });
    let mut lines = input.lines();
    let result = loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        if line.trim().is_empty() {
            continue;
        }
        match wire::parse(&line) {
            Incoming::Request { id, method, params } => server.clone().request(id, method, params),
            Incoming::Notification { method, params } => server.notification(&method, params),
            Incoming::Response { id, result } => out.answered(&id, result),
            Incoming::Invalid { id, error } => out.respond::<Value>(id, Err(error)),
        }
    };
    server.close_all().await;
    drop(server);
    drop(out);
    let _ = writer.await;
    result
}

struct Server {
    host: HostSlot,
    options: Options,
    out: Out,
    sessions: Mutex<HashMap<String, Arc<AcpSession>>>,
    /// What the client's `initialize` said it offers (its files and terminal).
    offers: Mutex<Offers>,
}

impl Server {
    /// Answer a request; anything that waits runs as a task of its own, so the next line is
    /// read at once (a `session/cancel` or a permission answer must get through while a prompt
    /// runs).
    fn request(self: Arc<Self>, id: RequestId, method: String, params: Value) {
        let out = self.out.clone();
        match method.as_str() {
            "initialize" => out.respond(id, args(params).map(|r| self.initialize(&r))),
            "session/new" => self.spawn_open(id, params, |s, r| async move { s.new_session(r).await }),
            "session/load" => self.spawn_open(id, params, |s, r| async move { s.load(r).await }),
            "session/resume" => self.spawn_open(id, params, |s, r| async move { s.resume(r).await }),
            "session/list" => self.spawn(id, params, |s, r| async move { s.list(r).await }),
            "session/close" => self.spawn(id, params, |s, r| async move { s.close(r).await }),
            "session/prompt" => self.spawn(id, params, |s, r| async move { s.prompt(r).await }),
            "session/set_mode" => self.spawn(id, params, |s, r| async move { s.set_mode(r).await }),
            // Notifications sent with an id: say so, rather than "no such method".
            "session/cancel" => out.respond::<Value>(
                id,
                Err(error(
                    ErrorCode::InvalidRequest,
                    format!("`{method}` is a notification: send it without an `id`; nothing was cancelled"),
                )),
            ),
            _ => out.respond::<Value>(
                id,
                Err(error(ErrorCode::MethodNotFound, format!("talaria does not offer the method `{method}`"))),
            ),
        }
    }

    fn spawn<P, T, F, Fut>(self: Arc<Self>, id: RequestId, params: Value, handler: F)
    where
        P: DeserializeOwned + Send + 'static,
        T: serde::Serialize,
        F: FnOnce(Arc<Self>, P) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let out = self.out.clone();
        match args::<P>(params) {
            Err(e) => out.respond::<Value>(id, Err(e)),
            Ok(p) => {
                tokio::spawn(async move {
                    let result = handler(self, p).await;
                    out.respond(id, result);
                });
            }
        }
    }

    /// As [`Server::spawn`] for a method that opens a session: the session starts reporting
    /// only once the client has the answer (and so the session's id).
    fn spawn_open<P, T, F, Fut>(self: Arc<Self>, id: RequestId, params: Value, handler: F)
    where
        P: DeserializeOwned + Send + 'static,
        T: serde::Serialize,
        F: FnOnce(Arc<Self>, P) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(T, Opened), Error>> + Send + 'static,
    {
        let out = self.out.clone();
        match args::<P>(params) {
            Err(e) => out.respond::<Value>(id, Err(e)),
            Ok(p) => {
                tokio::spawn(async move {
                    match handler(self.clone(), p).await {
                        Ok((answer, opened)) => {
                            lock(&self.sessions).insert(opened.session.id.clone(), opened.session.clone());
                            out.respond(id, Ok::<_, Error>(answer));
                            opened.start();
                        }
                        Err(e) => out.respond::<Value>(id, Err(e)),
                    }
                });
            }
        }
    }

    fn notification(&self, method: &str, params: Value) {
        match method {
            "session/cancel" => match args::<CancelNotification>(params) {
                Ok(n) => match self.session(&n.session_id.0) {
                    Ok(s) => s.cancel(),
                    Err(e) => tracing::debug!("session/cancel: {}", e.message),
                },
                Err(e) => tracing::debug!("session/cancel with bad params: {:?}", e.data),
            },
            // Notifications get no answer, not even an error.
            other => tracing::debug!("ignored the notification `{other}`"),
        }
    }

    fn initialize(&self, r: &InitializeRequest) -> InitializeResponse {
        tracing::debug!(capabilities = ?r.client_capabilities, "client capabilities");
        *lock(&self.offers) = Offers::of(&r.client_capabilities);
        let session = SessionCapabilities::new()
            .list(SessionListCapabilities::new())
            .resume(SessionResumeCapabilities::new())
            .close(SessionCloseCapabilities::new());
        let capabilities = AgentCapabilities::new()
            .load_session(true)
            .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
            .mcp_capabilities(McpCapabilities::new().http(true))
            .session_capabilities(session);
        InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(capabilities)
            .agent_info(Implementation::new("talaria", env!("CARGO_PKG_VERSION")).title("talaria".to_string()))
    }

    async fn new_session(self: Arc<Self>, r: NewSessionRequest) -> Result<(NewSessionResponse, Opened), Error> {
        let cwd = workspace(&r.cwd)?;
        let opened = self.open(cwd, None, &r.mcp_servers).await?;
        let response = NewSessionResponse::new(opened.session.id.clone()).modes(opened.session.modes());
        Ok((response, opened))
    }

    /// `session/load`: the history is replayed as updates before the answer.
    async fn load(self: Arc<Self>, r: LoadSessionRequest) -> Result<(LoadSessionResponse, Opened), Error> {
        let cwd = workspace(&r.cwd)?;
        let opened = self.open(cwd, Some(r.session_id.0.to_string()), &r.mcp_servers).await?;
        opened.session.replay().await?;
        let response = LoadSessionResponse::new().modes(opened.session.modes());
        Ok((response, opened))
    }

    async fn resume(self: Arc<Self>, r: ResumeSessionRequest) -> Result<(ResumeSessionResponse, Opened), Error> {
        let cwd = workspace(&r.cwd)?;
        let opened = self.open(cwd, Some(r.session_id.0.to_string()), &r.mcp_servers).await?;
        let response = ResumeSessionResponse::new().modes(opened.session.modes());
        Ok((response, opened))
    }

    /// Start (or continue) a conversation as an ACP session; a session already open here is
    /// closed first (its conversation saved), so one stored session has one conversation.
    async fn open(&self, cwd: PathBuf, resume: Option<String>, mcp: &[McpServer]) -> Result<Opened, Error> {
        if let Some(id) = &resume {
            let open = lock(&self.sessions).remove(id);
            if let Some(open) = open {
                open.close().await;
            }
        }
        let offers = *lock(&self.offers);
        let host = self.host.get().await?;
        let (session, conversation, notes) =
            AcpSession::open(&host, &self.options, self.out.clone(), cwd, resume, mcp, offers).await?;
        Ok(Opened { session, conversation, notes })
    }

    async fn list(self: Arc<Self>, r: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        let offset = match &r.cursor {
            None => 0,
            Some(c) => c.parse::<usize>().map_err(|_| {
                error(ErrorCode::InvalidParams, format!("cursor `{c}` is not one this server gave out"))
            })?,
        };
        let cwd = r.cwd.as_ref().map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()));
        let cwd = cwd.as_ref().map(|c| c.to_string_lossy().into_owned());
        let store = self.host.get().await?.store().clone();
        let page = async {
            let q = talaria_core::store::ListQuery {
                limit: PAGE + 1,
                offset,
                source: Some("acp"),
                // A page holds only this directory's sessions (filtered after paging, pages
                // would come back short, or empty with more to come).
                cwd: cwd.as_deref(),
                ..talaria_core::store::ListQuery::default()
            };
            let rows = store.list_sessions_with(&q).await.map_err(internal)?;
            let more = rows.len() > PAGE;
            let sessions = rows
                .into_iter()
                .take(PAGE)
                // Sessions compression continued elsewhere are reached through their root.
                .filter(|s| s.parent_id.is_none())
                .map(|s| {
                    SessionInfo::new(s.id.clone(), PathBuf::from(&s.cwd))
                        .title(s.title.as_ref().or(s.preview.as_ref()).map(|t| updates::title(t)))
                        .updated_at(content::rfc3339(s.updated_at))
                })
                .collect();
            Ok::<_, Error>((sessions, more))
        }
        .await?;
        let (sessions, more) = page;
        Ok(ListSessionsResponse::new(sessions).next_cursor(more.then(|| (offset + PAGE).to_string())))
    }

    async fn close(self: Arc<Self>, r: CloseSessionRequest) -> Result<CloseSessionResponse, Error> {
        let session = lock(&self.sessions).remove(r.session_id.0.as_ref());
        let Some(session) = session else { return Err(Error::session_not_found(r.session_id)) };
        session.close().await;
        Ok(CloseSessionResponse::new())
    }

    async fn prompt(
        self: Arc<Self>,
        r: PromptRequest,
    ) -> Result<agent_client_protocol_schema::v1::PromptResponse, Error> {
        let session = self.session(&r.session_id.0)?;
        // A client that traces its requests names the trace in `_meta` (W3C trace context).
        let trace = talaria_protocol::trace::traceparent(
            r.meta.as_ref().and_then(|m| m.get("traceparent")).and_then(serde_json::Value::as_str),
        );
        session.prompt(r.prompt, trace).await
    }

    async fn set_mode(self: Arc<Self>, r: SetSessionModeRequest) -> Result<SetSessionModeResponse, Error> {
        let session = self.session(&r.session_id.0)?;
        session.set_mode(&r.mode_id.0)?;
        Ok(SetSessionModeResponse::new())
    }

    fn session(&self, id: &str) -> Result<Arc<AcpSession>, Error> {
        lock(&self.sessions).get(id).cloned().ok_or_else(|| {
            error(
                ErrorCode::ResourceNotFound,
                format!("no open session `{id}`: start one with session/new, or open it with session/load"),
            )
        })
    }

    /// Close every session (the client went away).
    async fn close_all(&self) {
        let all: Vec<_> = lock(&self.sessions).drain().map(|(_, s)| s).collect();
        for s in all {
            s.close().await;
        }
    }
}

/// `params` as `P`, or an "invalid params" error saying what is wrong.
fn args<P: DeserializeOwned>(params: Value) -> Result<P, Error> {
    serde_json::from_value(params).map_err(|e| error(ErrorCode::InvalidParams, format!("invalid params: {e}")))
}

/// The session's `cwd` as a workspace: absolute, existing.
fn workspace(cwd: &std::path::Path) -> Result<PathBuf, Error> {
    if !cwd.is_absolute() {
        return Err(error(ErrorCode::InvalidParams, format!("cwd `{}` must be an absolute path", cwd.display())));
    }
    talaria_core::canonical_workspace(cwd).map_err(|e| error(ErrorCode::InvalidParams, e.to_string()))
}

fn internal(e: impl std::fmt::Display) -> Error {
    error(ErrorCode::InternalError, e.to_string())
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
