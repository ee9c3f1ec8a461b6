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

use std::sync::atomic::Ordering;

use rusqlite::{OptionalExtension, Row, params};
use talaria_protocol::{Message, ToolCall, Usage};

use crate::{Error, Result, Store, count, now_ms};

/// The sources a session may come from.
pub const SOURCES: &[&str] = &["cli", "acp", "gateway", "cron", "subagent"];
/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 100;
/// Longest [`SessionInfo::preview`], in characters.
pub const PREVIEW_CHARS: usize = 80;
/// Longest session id, in bytes.
const MAX_ID_BYTES: usize = 200;
/// Most candidates an [`Error::AmbiguousSession`] lists.
const MAX_CANDIDATES: usize = 10;
/// A passive WAL checkpoint after this many appends through one `Store`.
const CHECKPOINT_EVERY: u32 = 200;

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
}

impl Default for ListQuery<'_> {
    fn default() -> Self {
        Self { limit: 50, offset: 0, include_children: false, source: None, parent_id: None }
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
        if s.id.is_empty() || s.id.len() > MAX_ID_BYTES || s.id.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::BadSessionId { id: s.id.clone() });
        }
        if !SOURCES.contains(&s.source.as_str()) {
            return Err(Error::UnknownSource { name: s.source.clone() });
        }
        let now = now_ms();
        if let Some(pg) = self.pg() {
            return pg.create_session(s, now).await;
        }
        self.write(|tx| {
            if exists(tx, &s.id)? {
                return Err(Error::SessionExists { id: s.id.clone() });
            }
            if let Some(parent) = &s.parent_id
                && !exists(tx, parent)?
            {
                return Err(Error::UnknownParent { id: parent.clone() });
            }
            tx.execute(
                "INSERT INTO sessions (id, source, model, provider, system_prompt, parent_id, cwd, started_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
                params![s.id, s.source, s.model, s.provider, s.system_prompt, s.parent_id, s.cwd, now],
            )?;
            Ok(())
        })
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
        if let Some(pg) = self.pg() {
            pg.fork_session(from, new_id, now).await?;
            return self.session(new_id).await?.ok_or_else(|| not_found(new_id));
        }
        self.write(|tx| {
            if !exists(tx, from)? {
                return Err(not_found(from));
            }
            if exists(tx, new_id)? {
                return Err(Error::SessionExists { id: new_id.to_string() });
            }
            tx.execute(
                "INSERT INTO sessions (id, source, model, provider, system_prompt, parent_id, cwd, started_at, updated_at,
                                       message_count, tool_call_count)
                 SELECT ?2, source, model, provider, system_prompt, id, cwd, ?3, ?3, message_count, tool_call_count
                 FROM sessions WHERE id = ?1",
                params![from, new_id, now],
            )?;
            tx.execute(
                "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, reasoning, extra, created_at)
                 SELECT ?2, role, content, tool_call_id, tool_calls, tool_name, reasoning, extra, created_at
                 FROM messages WHERE session_id = ?1 AND active ORDER BY id",
                params![from, new_id],
            )?;
            Ok(())
        })?;
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
        if messages.is_empty() {
            if let Some((usage, calls)) = usage {
                self.add_usage(session_id, usage, calls).await?;
            }
            return Ok(Vec::new());
        }
        let rows = messages.iter().map(MessageRow::new).collect::<Result<Vec<_>>>()?;
        let calls: usize = messages.iter().map(|m| m.tool_calls().len()).sum();
        // An answer ends a turn: the messages waiting to be indexed for search are indexed with
        // it once there are enough of them, rather than each commit writing index segments.
        let ends_turn = matches!(messages.last(), Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty());
        let now = now_ms();
        if let Some(pg) = self.pg() {
            return pg.append(session_id, rows, calls, usage.map(|(u, c)| (*u, c)), now).await;
        }
        let ids = self.write(|tx| {
            // Cached statements: a turn appends several times, and parsing the SQL each time cost
            // more than running it.
            let touched = tx
                .prepare_cached(
                    "UPDATE sessions SET message_count = message_count + ?2, tool_call_count = tool_call_count + ?3,
                                         updated_at = max(updated_at, ?4)
                     WHERE id = ?1",
                )?
                .execute(params![session_id, count(rows.len()), count(calls), now])?;
            if touched == 0 {
                return Err(not_found(session_id));
            }
            let mut insert = tx.prepare_cached(
                "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, reasoning, extra, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?;
            let mut ids = Vec::with_capacity(rows.len());
            for r in &rows {
                insert.execute(params![
                    session_id,
                    r.role,
                    r.content,
                    r.tool_call_id,
                    r.tool_calls,
                    r.tool_name,
                    r.reasoning,
                    r.extra,
                    now
                ])?;
                ids.push(tx.last_insert_rowid());
            }
            if let Some((usage, calls)) = usage {
                add_usage(tx, session_id, usage, calls, now)?;
            }
            if ends_turn {
                crate::search::index_pending(tx, crate::search::INDEX_BATCH)?;
            }
            Ok(ids)
        })?;
        if self.appends.fetch_add(1, Ordering::Relaxed) % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 {
            // Best effort: a checkpoint blocked by readers simply does less; the next one catches up.
            if let Ok(conn) = self.conn() {
                let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
        }
        Ok(ids)
    }

    /// Add one or more model calls' token usage to the session's totals. Estimated usage
    /// ([`Usage::estimated`]) marks the totals as estimates from then on.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn add_usage(&self, session_id: &str, usage: &Usage, api_calls: u32) -> Result<()> {
        let now = now_ms();
        if let Some(pg) = self.pg() {
            return pg.add_usage(session_id, usage, api_calls, now).await;
        }
        self.write(|tx| add_usage(tx, session_id, usage, api_calls, now))
    }

    /// The session with exactly this id, if any.
    pub async fn session(&self, id: &str) -> Result<Option<SessionInfo>> {
        if let Some(pg) = self.pg() {
            return pg.session(id).await;
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!("{SESSION_COLUMNS} WHERE s.id = ?1"))?;
        Ok(stmt.query_row([id], session_from_row).optional()?)
    }

    /// The session's system prompt, as given when it was created.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn system_prompt(&self, id: &str) -> Result<String> {
        if let Some(pg) = self.pg() {
            return pg.system_prompt(id).await;
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached("SELECT system_prompt FROM sessions WHERE id = ?1")?;
        stmt.query_row([id], |r| r.get(0)).optional()?.ok_or_else(|| not_found(id))
    }

    /// The session's system prompt and its active messages, in order: what a conversation
    /// put away needs to go on (one round trip on PostgreSQL).
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn history(&self, id: &str) -> Result<(String, Vec<StoredMessage>)> {
        if let Some(pg) = self.pg() {
            let (prompt, raw) = pg.history(id).await?.ok_or_else(|| not_found(id))?;
            return Ok((prompt, raw.into_iter().map(RawMessage::into_stored).collect::<Result<_>>()?));
        }
        Ok((self.system_prompt(id).await?, self.messages(id).await?))
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
        let by_title: Option<String> = if let Some(pg) = self.pg() {
            pg.session_titled(key).await?
        } else {
            let conn = self.conn()?;
            let mut stmt = conn.prepare_cached("SELECT id FROM sessions WHERE title = ?1")?;
            stmt.query_row([key], |r| r.get(0)).optional()?
        };
        if let Some(id) = by_title {
            return self.session(&id).await?.ok_or_else(|| not_found(key));
        }
        let mut ids: Vec<String> = if let Some(pg) = self.pg() {
            pg.session_ids_starting(key, MAX_CANDIDATES + 1).await?
        } else {
            let conn = self.conn()?;
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM sessions WHERE substr(id, 1, length(?1)) = ?1 ORDER BY updated_at DESC, id LIMIT ?2",
            )?;
            stmt.query_map(params![key, count(MAX_CANDIDATES + 1)], |r| r.get(0))?.collect::<Result<_, _>>()?
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
        if let Some(pg) = self.pg() {
            return pg.list_sessions(q).await;
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "{SESSION_COLUMNS}
             WHERE (?1 OR ?2 IS NOT NULL OR ?3 IS NOT NULL OR s.source <> 'subagent')
               AND (?2 IS NULL OR s.source = ?2) AND (?3 IS NULL OR s.parent_id = ?3)
             ORDER BY s.updated_at DESC, s.id DESC LIMIT ?4 OFFSET ?5"
        ))?;
        let rows = stmt.query_map(
            params![q.include_children, q.source, q.parent_id, count(q.limit), count(q.offset)],
            session_from_row,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The session's active messages, in order.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn messages(&self, session_id: &str) -> Result<Vec<StoredMessage>> {
        if let Some(pg) = self.pg() {
            let raw = pg.messages(session_id).await?.ok_or_else(|| not_found(session_id))?;
            return raw.into_iter().map(RawMessage::into_stored).collect();
        }
        let raw: Vec<RawMessage> = {
            let conn = self.conn()?;
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1 AND active ORDER BY id"
            ))?;
            stmt.query_map([session_id], RawMessage::from_row)?.collect::<Result<_, _>>()?
        };
        if raw.is_empty() && !exists(&*self.conn()?, session_id)? {
            return Err(not_found(session_id));
        }
        raw.into_iter().map(RawMessage::into_stored).collect()
    }

    /// The active messages of `message_id`'s session from `window` before it to `window` after
    /// it, in order (the message itself included when active): the context of a search hit.
    ///
    /// # Errors
    /// [`Error::MessageNotFound`].
    pub async fn messages_around(&self, message_id: i64, window: usize) -> Result<Vec<StoredMessage>> {
        if let Some(pg) = self.pg() {
            return pg.messages_around(message_id, window).await?.into_iter().map(RawMessage::into_stored).collect();
        }
        let raw: Vec<RawMessage> = {
            let conn = self.conn()?;
            let session: Option<String> = conn
                .prepare_cached("SELECT session_id FROM messages WHERE id = ?1")?
                .query_row([message_id], |r| r.get(0))
                .optional()?;
            let Some(session) = session else { return Err(Error::MessageNotFound { id: message_id }) };
            let mut before = conn.prepare_cached(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages
                 WHERE session_id = ?1 AND active AND id < ?2 ORDER BY id DESC LIMIT ?3"
            ))?;
            let mut raw: Vec<RawMessage> = before
                .query_map(params![session, message_id, count(window)], RawMessage::from_row)?
                .collect::<Result<_, _>>()?;
            raw.reverse();
            let mut after = conn.prepare_cached(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages
                 WHERE session_id = ?1 AND active AND id >= ?2 ORDER BY id LIMIT ?3"
            ))?;
            for m in
                after.query_map(params![session, message_id, count(window.saturating_add(1))], RawMessage::from_row)?
            {
                raw.push(m?);
            }
            raw
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
        if let Some(pg) = self.pg() {
            return pg.title(id, title, replace).await;
        }
        self.write(|tx| {
            if !exists(tx, id)? {
                return Err(not_found(id));
            }
            let other: Option<String> = tx
                .query_row("SELECT id FROM sessions WHERE title = ?1 AND id <> ?2", params![title, id], |r| r.get(0))
                .optional()?;
            if let Some(other_id) = other {
                return Err(Error::TitleTaken { title: title.to_owned(), other_id });
            }
            let sql = if replace {
                "UPDATE sessions SET title = ?2 WHERE id = ?1"
            } else {
                "UPDATE sessions SET title = ?2 WHERE id = ?1 AND title IS NULL"
            };
            Ok(tx.execute(sql, params![id, title])? > 0)
        })
    }

    /// Delete the session and its messages (they leave the search indexes too). Sessions it
    /// spawned stay, with no parent.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn delete_session(&self, id: &str) -> Result<()> {
        if let Some(pg) = self.pg() {
            return pg.delete_session(id).await;
        }
        self.write(|tx| {
            // The foreign keys would do both; saying it keeps the behaviour independent of them.
            tx.execute("DELETE FROM messages WHERE session_id = ?1", [id])?;
            tx.execute("UPDATE sessions SET parent_id = NULL WHERE parent_id = ?1", [id])?;
            if tx.execute("DELETE FROM sessions WHERE id = ?1", [id])? == 0 {
                return Err(not_found(id));
            }
            Ok(())
        })
    }

    /// Mark the session ended now, for `reason` (e.g. `"user_exit"`, `"compressed"`). Ending an
    /// ended session again records the new time and reason.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn end_session(&self, id: &str, reason: &str) -> Result<()> {
        let now = now_ms();
        if let Some(pg) = self.pg() {
            return pg.end_session(id, reason, now).await;
        }
        self.write(|tx| {
            if tx
                .execute("UPDATE sessions SET ended_at = ?2, end_reason = ?3 WHERE id = ?1", params![id, now, reason])?
                == 0
            {
                return Err(not_found(id));
            }
            Ok(())
        })
    }

    /// Undo the last turn: mark the session's last active user message and everything after it
    /// inactive. Inactive messages stay in the file but leave [`Store::messages`], the counts and
    /// search. Returns how many messages were undone (0 when there is no user message left).
    ///
    /// # Errors
    /// [`Error::SessionNotFound`].
    pub async fn undo_last_turn(&self, session_id: &str) -> Result<usize> {
        let now = now_ms();
        if let Some(pg) = self.pg() {
            return pg.undo_last_turn(session_id, now).await;
        }
        self.write(|tx| {
            if !exists(tx, session_id)? {
                return Err(not_found(session_id));
            }
            let last_user: Option<i64> = tx.query_row(
                "SELECT max(id) FROM messages WHERE session_id = ?1 AND role = 'user' AND active",
                [session_id],
                |r| r.get(0),
            )?;
            let Some(from) = last_user else { return Ok(0) };
            let calls: i64 = tx.query_row(
                "SELECT coalesce(sum(json_array_length(tool_calls)), 0) FROM messages
                 WHERE session_id = ?1 AND active AND id >= ?2",
                params![session_id, from],
                |r| r.get(0),
            )?;
            let undone = tx.execute(
                "UPDATE messages SET active = 0 WHERE session_id = ?1 AND active AND id >= ?2",
                params![session_id, from],
            )?;
            tx.execute(
                "UPDATE sessions SET message_count = max(message_count - ?2, 0),
                                     tool_call_count = max(tool_call_count - ?3, 0), updated_at = max(updated_at, ?4)
                 WHERE id = ?1",
                params![session_id, count(undone), calls, now],
            )?;
            Ok(undone)
        })
    }
}

pub(crate) fn not_found(key: &str) -> Error {
    Error::SessionNotFound { key: key.to_owned() }
}

fn exists(conn: &rusqlite::Connection, id: &str) -> Result<bool> {
    Ok(conn.prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")?.exists([id])?)
}

fn session_from_row(r: &Row<'_>) -> rusqlite::Result<SessionInfo> {
    let tokens = |i: usize| -> rusqlite::Result<u64> { Ok(u64::try_from(r.get::<_, i64>(i)?).unwrap_or(0)) };
    Ok(SessionInfo {
        id: r.get(0)?,
        source: r.get(1)?,
        model: r.get(2)?,
        provider: r.get(3)?,
        title: r.get(4)?,
        parent_id: r.get(5)?,
        cwd: r.get(6)?,
        started_at: r.get(7)?,
        updated_at: r.get(8)?,
        ended_at: r.get(9)?,
        end_reason: r.get(10)?,
        message_count: r.get(11)?,
        tool_call_count: r.get(12)?,
        api_call_count: r.get(13)?,
        usage: Usage {
            input_tokens: tokens(14)?,
            output_tokens: tokens(15)?,
            cache_read_tokens: tokens(16)?,
            cache_write_tokens: tokens(17)?,
            reasoning_tokens: tokens(18)?,
            estimated: r.get::<_, i64>(20)? > 0,
        },
        preview: r.get::<_, Option<String>>(19)?.map(|p| preview(&p)),
    })
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
    /// Reads the columns of [`MESSAGE_COLUMNS`], in that order.
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: r.get(0)?,
            session_id: r.get(1)?,
            role: r.get(2)?,
            content: r.get(3)?,
            tool_call_id: r.get(4)?,
            tool_calls: r.get(5)?,
            tool_name: r.get(6)?,
            reasoning: r.get(7)?,
            extra: r.get(8)?,
            created_at: r.get(9)?,
        })
    }

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

/// Add `usage` of `api_calls` model calls to the session's totals, in `tx`.
fn add_usage(tx: &rusqlite::Transaction<'_>, session_id: &str, usage: &Usage, api_calls: u32, now: i64) -> Result<()> {
    let t = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let touched = tx
        .prepare_cached(
            "UPDATE sessions SET api_call_count = api_call_count + ?2,
                input_tokens = input_tokens + ?3, output_tokens = output_tokens + ?4,
                cache_read_tokens = cache_read_tokens + ?5, cache_write_tokens = cache_write_tokens + ?6,
                reasoning_tokens = reasoning_tokens + ?7, updated_at = max(updated_at, ?8),
                estimated_calls = estimated_calls + ?9
         WHERE id = ?1",
        )?
        .execute(params![
            session_id,
            api_calls,
            t(usage.input_tokens),
            t(usage.output_tokens),
            t(usage.cache_read_tokens),
            t(usage.cache_write_tokens),
            t(usage.reasoning_tokens),
            now,
            if usage.estimated { api_calls } else { 0 }
        ])?;
    if touched == 0 {
        return Err(not_found(session_id));
    }
    Ok(())
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
