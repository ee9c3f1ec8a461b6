//! Sessions and their messages: create, append a turn, count usage, resolve what the user typed
//! to a session, title, end, undo, delete.
//!
//! A session is one conversation ([`NewSession`] creates it, [`SessionInfo`] describes it); its
//! messages ([`StoredMessage`]) are kept in order and committed a turn at a time, so a crash
//! loses at most the model call in flight. Undo does not delete: it marks the last turn
//! inactive, which hides it from [`Store::messages`], from the counts and from search.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), talaria_store::Error> {
//! # use talaria_store::{NewSession, Store};
//! # let store = Store::open(std::path::Path::new("/tmp/state.db"))?;
//! let info = store.resolve_session("latest").await?;
//! let history: Vec<_> = store.messages(&info.id).await?.into_iter().map(|m| m.message).collect();
//! store.set_title(&info.id, "Trip to Lisbon").await?;
//! assert_eq!(store.resolve_session("trip to lisbon").await?.id, info.id);
//! # Ok(())
//! # }
//! ```

use talaria_protocol::{Message, ToolCall, Usage};

use crate::inbox::Answer;
use crate::{Engine, Error, Result, Store, now_ms};

/// The sources a session may come from.
pub const SOURCES: &[&str] = &["cli", "acp", "gateway", "cron", "subagent", "api"];
/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 100;
/// Longest [`SessionInfo::preview`], in characters.
pub const PREVIEW_CHARS: usize = 80;
/// Longest session id, in bytes.
const MAX_ID_BYTES: usize = 200;
/// Most candidates an [`Error::AmbiguousSession`] lists.
const MAX_CANDIDATES: usize = 10;

/// What [`Store::create_session`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// Unique; [`Store::new_session_id`] makes CLI-style ones.
    pub id: String,
    /// One of [`SOURCES`].
    pub source: String,
    pub model: String,
    pub provider: String,
    /// Kept so a resumed session sends the same prompt (and hits the provider's cache).
    pub system_prompt: String,
    /// The session that spawned this one (a subagent's parent), if any; it must exist.
    pub parent_id: Option<String>,
    pub cwd: String,
}

/// A session as listed: everything but its messages and system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: String,
    pub source: String,
    pub model: String,
    pub provider: String,
    pub title: Option<String>,
    pub parent_id: Option<String>,
    pub cwd: String,
    /// Unix milliseconds.
    pub started_at: i64,
    /// Unix milliseconds of the last append or usage update.
    pub updated_at: i64,
    pub ended_at: Option<i64>,
    pub end_reason: Option<String>,
    /// Active messages (undone ones are not counted).
    pub message_count: i64,
    /// Tool calls in active assistant messages.
    pub tool_call_count: i64,
    /// Model calls made, as reported through [`Store::add_usage`].
    pub api_call_count: i64,
    pub usage: Usage,
    /// The first active user message, whitespace collapsed, at most [`PREVIEW_CHARS`] characters.
    pub preview: Option<String>,
}

/// A message as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    pub id: i64,
    pub session_id: String,
    pub message: Message,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// Which sessions [`Store::list_sessions_with`] returns, newest (last updated) first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListQuery<'a> {
    pub limit: usize,
    pub offset: usize,
    /// Include subagent sessions (source `subagent`). Implied by `source` or `parent_id`.
    pub include_children: bool,
    /// Only sessions from this source.
    pub source: Option<&'a str>,
    /// Only sessions spawned by this one.
    pub parent_id: Option<&'a str>,
    /// Only sessions started in this directory (as [`NewSession::cwd`] recorded it).
    pub cwd: Option<&'a str>,
}

impl Default for ListQuery<'_> {
    fn default() -> Self {
        Self { limit: 50, offset: 0, include_children: false, source: None, parent_id: None, cwd: None }
    }
}

pub(crate) const SESSION_COLUMNS: &str = "
    SELECT s.id, s.source, s.model, s.provider, s.title, s.parent_id, s.cwd,
           s.started_at, s.updated_at, s.ended_at, s.end_reason,
           s.message_count, s.tool_call_count, s.api_call_count,
           s.input_tokens, s.output_tokens, s.cache_read_tokens, s.cache_write_tokens, s.reasoning_tokens,
           (SELECT substr(m.content, 1, 400) FROM messages m
             WHERE m.session_id = s.id AND m.role = 'user' AND m.active ORDER BY m.id LIMIT 1),
           s.estimated_calls
    FROM sessions s";

pub(crate) const MESSAGE_COLUMNS: &str =
    "id, session_id, role, content, tool_call_id, tool_calls, tool_name, reasoning, extra, created_at";

/// What a commit of messages does besides appending them: give the session's lease back (held
/// with `release`), and mark the inbox entry its answer answers done.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ending<'a> {
    pub(crate) release: Option<&'a str>,
    pub(crate) answer: Option<(i64, &'a Answer)>,
}

impl Store {
    /// A fresh CLI-style session id: `YYYYMMDD_HHMMSS_<6 hex>`, in local time.
    ///
    /// ```
    /// let id = talaria_store::Store::new_session_id();
    /// assert_eq!(id.len(), 22);
    /// assert_eq!(&id[8..9], "_");
    /// ```
    pub fn new_session_id() -> String {
        let now = crate::local_time::now();
        // From the operating system: processes started in the same instant seed their own
        // generators alike, and then named their sessions alike.
        let mut bytes = [0u8; 3];
        let suffix = match getrandom::fill(&mut bytes) {
            Ok(()) => u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]),
            Err(_) => fastrand::u32(..0x100_0000),
        };
        format!("{}_{suffix:06x}", now.strftime("%Y%m%d_%H%M%S"))
    }

    /// Record a new, empty session.
    ///
    /// # Errors
    /// [`Error::SessionExists`], [`Error::UnknownSource`], [`Error::UnknownParent`], or an id
    /// that is empty, longer than 200 bytes or holds whitespace ([`Error::BadSessionId`]).
    pub async fn create_session(&self, s: &NewSession) -> Result<()> {
        self.traced("create_session", async {
            if s.id.is_empty() || s.id.len() > MAX_ID_BYTES || s.id.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(Error::BadSessionId { id: s.id.clone() });
            }
            if !SOURCES.contains(&s.source.as_str()) {
                return Err(Error::UnknownSource { name: s.source.clone() });
            }
            let now = now_ms();
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.create_session(s, now),
                Engine::Postgres(pg) => pg.create_session(s, now).await,
            }
        })
        .await
    }

    /// Start session `new_id` as a copy of `from`'s active messages (same source, model, prompt
    /// and directory), with `from` as its parent; `from` itself is left as it is. A fork carries
    /// no title (titles are unique).
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], [`Error::SessionExists`], [`Error::BadSessionId`].
    pub async fn fork_session(&self, from: &str, new_id: &str) -> Result<SessionInfo> {
        if new_id.is_empty()
            || new_id.len() > MAX_ID_BYTES
            || new_id.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(Error::BadSessionId { id: new_id.to_string() });
        }
        let now = now_ms();
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.fork_session(from, new_id, now)?,
            Engine::Postgres(pg) => pg.fork_session(from, new_id, now).await?,
        }
        self.session(new_id).await?.ok_or_else(|| not_found(new_id))
    }

    /// Append `messages` (one turn) to the session in one transaction: all of them or none.
    /// Updates the session's message and tool-call counts and `updated_at`. Returns the new
    /// messages' ids, in order.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`]; [`Error::Busy`] if other writers kept the lock for 20 s.
    pub async fn append_messages(&self, session_id: &str, messages: &[Message]) -> Result<Vec<i64>> {
        self.append_messages_with_usage(session_id, messages, None).await
    }

    /// [`Store::append_messages`], adding `usage` (the model calls that produced them, see
    /// [`Store::add_usage`]) to the session's totals in the same transaction: a model's answer
    /// and what it cost are on disk together or not at all, for the price of one commit.
    ///
    /// # Errors
    /// As [`Store::append_messages`].
    pub async fn append_messages_with_usage(
        &self,
        session_id: &str,
        messages: &[Message],
        usage: Option<(&Usage, u32)>,
    ) -> Result<Vec<i64>> {
        self.append_and_release(session_id, messages, usage, None).await
    }

    /// [`Store::append_messages_with_usage`], giving back the session's lease held with `token`
    /// in the same transaction ([`Store::release_lease`], and its notice): how a turn commits
    /// its answer and ends in one commit.
    ///
    /// # Errors
    /// As [`Store::append_messages`]; when it fails, the lease is still held.
    pub async fn append_and_release(
        &self,
        session_id: &str,
        messages: &[Message],
        usage: Option<(&Usage, u32)>,
        token: Option<&str>,
    ) -> Result<Vec<i64>> {
        self.append_with(session_id, messages, usage, Ending { release: token, answer: None }).await
    }

    /// [`Store::append_and_release`] for the messages that end a turn with its answer, `text`
    /// (as the turn's end shows it): the inbox entry waiting for it
    /// ([`Store::inbox_done_with_answer`]) is marked done in the same transaction, its
    /// deliveries queued and whoever waits for it told ([`crate::inbox::DONE`]).
    ///
    /// # Errors
    /// As [`Store::append_messages`]; when it fails, the entry is left as it was.
    pub async fn append_answer(
        &self,
        session_id: &str,
        messages: &[Message],
        usage: Option<(&Usage, u32)>,
        token: Option<&str>,
        text: &str,
    ) -> Result<Vec<i64>> {
        let answer = if messages.is_empty() { None } else { self.answer_for(session_id, text) };
        let ending = Ending { release: token, answer: answer.as_ref().map(|(id, a)| (*id, a)) };
        let ids = self.append_with(session_id, messages, usage, ending).await?;
        if let Some((id, _)) = answer {
            self.answered(id);
        }
        Ok(ids)
    }

    async fn append_with(
        &self,
        session_id: &str,
        messages: &[Message],
        usage: Option<(&Usage, u32)>,
        ending: Ending<'_>,
    ) -> Result<Vec<i64>> {
        self.traced("append_with", async {
            let token = ending.release;
            if messages.is_empty() {
                if let Some((usage, calls)) = usage {
                    self.add_usage(session_id, usage, calls).await?;
                }
                if let Some(token) = token {
                    self.release_lease(session_id, token).await?;
                }
                return Ok(Vec::new());
            }
            let rows = messages.iter().map(MessageRow::new).collect::<Result<Vec<_>>>()?;
            let calls: usize = messages.iter().map(|m| m.tool_calls().len()).sum();
            // An answer ends a turn: the messages waiting to be indexed for search are indexed with
            // it once there are enough of them, rather than each commit writing index segments.
            let ends_turn =
                matches!(messages.last(), Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty());
            match &self.engine {
                Engine::Sqlite(db) => {
                    let ids = db.queue().await.append(session_id, &rows, calls, usage, ends_turn, ending)?;
                    if token.is_some() {
                        self.hint(crate::notice::LEASE_FREED, session_id).await;
                    }
                    if let Some((id, _)) = ending.answer {
                        self.hint(crate::inbox::DONE, &id.to_string()).await;
                    }
                    Ok(ids)
                }
                Engine::Postgres(pg) => {
                    pg.append(session_id, rows, calls, usage.map(|(u, c)| (*u, c)), ending, now_ms()).await
                }
            }
        })
        .await
    }

    /// Add one or more model calls' token usage to the session's totals. Estimated usage
    /// ([`Usage::estimated`]) marks the totals as estimates from then on.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn add_usage(&self, session_id: &str, usage: &Usage, api_calls: u32) -> Result<()> {
        self.traced("add_usage", async {
            let now = now_ms();
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.add_usage(session_id, usage, api_calls, now),
                Engine::Postgres(pg) => pg.add_usage(session_id, usage, api_calls, now).await,
            }
        })
        .await
    }

    /// The session with exactly this id, if any.
    pub async fn session(&self, id: &str) -> Result<Option<SessionInfo>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.session(id),
            Engine::Postgres(pg) => pg.session(id).await,
        }
    }

    /// The session's system prompt, as given when it was created.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn system_prompt(&self, id: &str) -> Result<String> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.system_prompt(id),
            Engine::Postgres(pg) => pg.system_prompt(id).await,
        }
    }

    /// The session's system prompt and its active messages, in order: what a conversation
    /// put away needs to go on (one round trip on PostgreSQL).
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn history(&self, id: &str) -> Result<(String, Vec<StoredMessage>)> {
        self.traced("history", async {
            let (prompt, raw) = match &self.engine {
                Engine::Sqlite(db) => {
                    let db = db.queue().await;
                    (db.system_prompt(id)?, db.messages(id)?)
                }
                Engine::Postgres(pg) => pg.history(id).await?.ok_or_else(|| not_found(id))?,
            };
            Ok((prompt, raw.into_iter().map(RawMessage::into_stored).collect::<Result<_>>()?))
        })
        .await
    }

    /// The session the user means by `key`, tried in this order: `latest` (the most recently
    /// updated session that is not a subagent's), an exact id, an exact title (ignoring ASCII
    /// case), a unique id prefix.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], or [`Error::AmbiguousSession`] when several ids start with `key`.
    pub async fn resolve_session(&self, key: &str) -> Result<SessionInfo> {
        let key = key.trim();
        if key.is_empty() {
            return Err(not_found(key));
        }
        if key.eq_ignore_ascii_case("latest") {
            return self.list_sessions(1, 0).await?.into_iter().next().ok_or_else(|| not_found(key));
        }
        if let Some(s) = self.session(key).await? {
            return Ok(s);
        }
        let by_title = match &self.engine {
            Engine::Sqlite(db) => db.queue().await.session_titled(key)?,
            Engine::Postgres(pg) => pg.session_titled(key).await?,
        };
        if let Some(id) = by_title {
            return self.session(&id).await?.ok_or_else(|| not_found(key));
        }
        let mut ids = match &self.engine {
            Engine::Sqlite(db) => db.queue().await.session_ids_starting(key, MAX_CANDIDATES + 1)?,
            Engine::Postgres(pg) => pg.session_ids_starting(key, MAX_CANDIDATES + 1).await?,
        };
        match ids.len() {
            0 => Err(not_found(key)),
            1 => {
                let id = ids.remove(0);
                self.session(&id).await?.ok_or_else(|| not_found(key))
            }
            _ => {
                if ids.len() > MAX_CANDIDATES {
                    ids.truncate(MAX_CANDIDATES);
                    ids.push("…".to_owned());
                }
                Err(Error::AmbiguousSession { candidates: ids })
            }
        }
    }

    /// Sessions newest (last updated) first, leaving out subagent sessions: they are reached
    /// through their parent ([`ListQuery::parent_id`]) or with [`ListQuery::include_children`].
    pub async fn list_sessions(&self, limit: usize, offset: usize) -> Result<Vec<SessionInfo>> {
        self.list_sessions_with(&ListQuery { limit, offset, ..ListQuery::default() }).await
    }

    /// Sessions matching `q`, newest (last updated) first.
    pub async fn list_sessions_with(&self, q: &ListQuery<'_>) -> Result<Vec<SessionInfo>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.list_sessions(q),
            Engine::Postgres(pg) => pg.list_sessions(q).await,
        }
    }

    /// The session's active messages, in order.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn messages(&self, session_id: &str) -> Result<Vec<StoredMessage>> {
        let raw = match &self.engine {
            Engine::Sqlite(db) => db.queue().await.messages(session_id)?,
            Engine::Postgres(pg) => pg.messages(session_id).await?.ok_or_else(|| not_found(session_id))?,
        };
        raw.into_iter().map(RawMessage::into_stored).collect()
    }

    /// The active messages of `message_id`'s session from `window` before it to `window` after
    /// it, in order (the message itself included when active): the context of a search hit.
    ///
    /// # Errors
    /// [`Error::MessageNotFound`].
    pub async fn messages_around(&self, message_id: i64, window: usize) -> Result<Vec<StoredMessage>> {
        let raw = match &self.engine {
            Engine::Sqlite(db) => db.queue().await.messages_around(message_id, window)?,
            Engine::Postgres(pg) => pg.messages_around(message_id, window).await?,
        };
        raw.into_iter().map(RawMessage::into_stored).collect()
    }

    /// Give the session a title, unique among sessions ignoring ASCII case. Surrounding
    /// whitespace is trimmed.
    ///
    /// # Errors
    /// [`Error::BadTitle`] (empty, longer than [`MAX_TITLE_CHARS`], control characters, or the
    /// reserved `latest`), [`Error::TitleTaken`], [`Error::SessionNotFound`].
    pub async fn set_title(&self, id: &str, title: &str) -> Result<()> {
        self.title(id, title, true).await.map(|_| ())
    }

    /// [`Store::set_title`] for a session that has no title yet (an automatic one never
    /// replaces a title given meanwhile); whether it was set.
    ///
    /// # Errors
    /// As [`Store::set_title`].
    pub async fn suggest_title(&self, id: &str, title: &str) -> Result<bool> {
        self.title(id, title, false).await
    }

    async fn title(&self, id: &str, title: &str, replace: bool) -> Result<bool> {
        let title = title.trim();
        let bad = |reason: &str| Err(Error::BadTitle { reason: reason.to_owned() });
        if title.is_empty() {
            return bad("it is empty");
        }
        if title.chars().count() > MAX_TITLE_CHARS {
            return bad(&format!("it is longer than {MAX_TITLE_CHARS} characters"));
        }
        if title.chars().any(char::is_control) {
            return bad("it contains control characters such as newlines or tabs");
        }
        if title.eq_ignore_ascii_case("latest") {
            return bad("\"latest\" is reserved: it always means the most recent session");
        }
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.title(id, title, replace),
            Engine::Postgres(pg) => pg.title(id, title, replace).await,
        }
    }

    /// Delete the session and its messages (they leave the search indexes too). Sessions it
    /// spawned stay, with no parent.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn delete_session(&self, id: &str) -> Result<()> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.delete_session(id),
            Engine::Postgres(pg) => pg.delete_session(id).await,
        }
    }

    /// Mark the session ended now, for `reason` (e.g. `"user_exit"`, `"compressed"`). Ending an
    /// ended session again records the new time and reason.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn end_session(&self, id: &str, reason: &str) -> Result<()> {
        self.traced("end_session", async {
            let now = now_ms();
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.end_session(id, reason, now),
                Engine::Postgres(pg) => pg.end_session(id, reason, now).await,
            }
        })
        .await
    }

    /// Undo the last turn: mark the session's last active user message and everything after it
    /// inactive. Inactive messages stay in the file but leave [`Store::messages`], the counts and
    /// search. Returns how many messages were undone (0 when there is no user message left).
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn undo_last_turn(&self, session_id: &str) -> Result<usize> {
        self.traced("undo_last_turn", async {
            let now = now_ms();
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.undo_last_turn(session_id, now),
                Engine::Postgres(pg) => pg.undo_last_turn(session_id, now).await,
            }
        })
        .await
    }
}

pub(crate) fn not_found(key: &str) -> Error {
    Error::SessionNotFound { key: key.to_owned() }
}

/// `text` on one line, whitespace collapsed, cut to [`PREVIEW_CHARS`] characters with `…`.
pub(crate) fn preview(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let line = words.join(" ");
    if line.chars().count() <= PREVIEW_CHARS {
        return line;
    }
    let mut cut: String = line.chars().take(PREVIEW_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// A message flattened into the `messages` columns (owning its text: on PostgreSQL it crosses
/// to the engine's runtime).
pub(crate) struct MessageRow {
    pub(crate) role: &'static str,
    pub(crate) content: String,
    pub(crate) tool_call_id: Option<String>,
    pub(crate) tool_calls: Option<String>,
    pub(crate) tool_name: Option<String>,
    pub(crate) reasoning: Option<String>,
    pub(crate) extra: Option<String>,
}

impl MessageRow {
    fn new(m: &Message) -> Result<Self> {
        let json = |what: &str, v: Result<String, serde_json::Error>| {
            v.map_err(|e| Error::Corrupt { what: format!("the {what} of a message cannot be written as JSON: {e}") })
        };
        let mut row = MessageRow {
            role: m.role().as_str(),
            content: m.content().to_string(),
            tool_call_id: None,
            tool_calls: None,
            tool_name: None,
            reasoning: None,
            extra: None,
        };
        match m {
            Message::System { .. } => {}
            // A user message's images are kept in `extra`, as JSON.
            Message::User { images, .. } => {
                if !images.is_empty() {
                    row.extra = Some(json("images", serde_json::to_string(images))?);
                }
            }
            Message::Assistant { content: _, tool_calls, reasoning, extra } => {
                if !tool_calls.is_empty() {
                    row.tool_calls = Some(json("tool calls", serde_json::to_string(tool_calls))?);
                }
                row.reasoning.clone_from(reasoning);
                row.extra = extra.as_ref().map(|e| json("extra data", serde_json::to_string(e))).transpose()?;
            }
            // So are the images a tool returned.
            Message::Tool { tool_call_id, name, content: _, images } => {
                row.tool_call_id = Some(tool_call_id.clone());
                row.tool_name = Some(name.clone());
                if !images.is_empty() {
                    row.extra = Some(json("images", serde_json::to_string(images))?);
                }
            }
        }
        Ok(row)
    }
}

/// A `messages` row as read, before it is checked and turned back into a [`Message`].
pub(crate) struct RawMessage {
    pub(crate) id: i64,
    pub(crate) session_id: String,
    pub(crate) role: String,
    pub(crate) content: String,
    pub(crate) tool_call_id: Option<String>,
    pub(crate) tool_calls: Option<String>,
    pub(crate) tool_name: Option<String>,
    pub(crate) reasoning: Option<String>,
    pub(crate) extra: Option<String>,
    pub(crate) created_at: i64,
}

impl RawMessage {
    pub(crate) fn into_stored(self) -> Result<StoredMessage> {
        let id = self.id;
        let corrupt = |what: String| Error::Corrupt { what: format!("message {id}: {what}") };
        let images = |extra: Option<String>| match extra {
            Some(j) => serde_json::from_str(&j).map_err(|e| corrupt(format!("images are not valid: {e}"))),
            None => Ok(Vec::new()),
        };
        let message = match self.role.as_str() {
            "system" => Message::System { content: self.content },
            "user" => Message::User { content: self.content, images: images(self.extra)? },
            "assistant" => Message::Assistant {
                content: self.content,
                tool_calls: match self.tool_calls {
                    Some(j) => serde_json::from_str::<Vec<ToolCall>>(&j)
                        .map_err(|e| corrupt(format!("tool calls are not valid: {e}")))?,
                    None => Vec::new(),
                },
                reasoning: self.reasoning,
                extra: match self.extra {
                    Some(j) => {
                        Some(serde_json::from_str(&j).map_err(|e| corrupt(format!("extra data is not JSON: {e}")))?)
                    }
                    None => None,
                },
            },
            "tool" => Message::Tool {
                tool_call_id: self.tool_call_id.unwrap_or_default(),
                name: self.tool_name.unwrap_or_default(),
                content: self.content,
                images: images(self.extra)?,
            },
            other => return Err(corrupt(format!("unknown role \"{other}\""))),
        };
        Ok(StoredMessage { id, session_id: self.session_id, message, created_at: self.created_at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_one_line_and_cut_to_length() {
        assert_eq!(preview("  hello\n\tworld  "), "hello world");
        let long = "word ".repeat(40);
        let p = preview(&long);
        assert_eq!(p.chars().count(), PREVIEW_CHARS);
        assert!(p.ends_with('…'));
        let cjk = "数".repeat(100);
        assert_eq!(preview(&cjk).chars().count(), PREVIEW_CHARS);
    }

    #[test]
    fn session_ids_look_like_the_cli_ones() {
        let id = Store::new_session_id();
        let (date, rest) = id.split_at(8);
        assert!(date.chars().all(|c| c.is_ascii_digit()), "{id}");
        assert!(rest.starts_with('_'));
        let parts: Vec<&str> = rest[1..].split('_').collect();
        assert_eq!(parts.len(), 2, "{id}");
        assert!(parts[0].len() == 6 && parts[0].chars().all(|c| c.is_ascii_digit()), "{id}");
        assert!(parts[1].len() == 6 && parts[1].chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
}
