//! The gateway's inbox (table `inbox`): every message a gateway takes from a chat platform is
//! written here before the platform is told it arrived, and marked done once it was answered.
//! Whichever gateway process serves the chat's session reads it from here; when that process
//! dies mid-turn, the next one finds the message still open and answers it. A message is kept
//! once per (account, chat, message id), so a platform handing it in twice (a poll retried by
//! another process, a webhook sent again) starts one turn.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use talaria_store::inbox::{NewEntry, Put};
//! let dir = tempfile::tempdir()?;
//! let store = talaria_store::Store::open(&dir.path().join("state.db"))?;
//! let new = NewEntry {
//!     account: "telegram", chat_id: "42", thread_id: None, session_key: "dm:42",
//!     message_id: "7", kind: "message", body: "{}", respond: false,
//! };
//! let Put::New(id) = store.inbox_put(&new).await? else { panic!() };
//! assert!(matches!(store.inbox_put(&new).await?, Put::Known(e) if e.id == id), "kept once");
//! assert_eq!(store.inbox_open_keys().await?, ["dm:42"]);
//! store.inbox_started(id, "s1", 0).await?;
//! store.inbox_done(id, None).await?;
//! assert!(store.inbox_open("dm:42").await?.is_empty());
//! # Ok(())
//! # }
//! ```

use rusqlite::{OptionalExtension as _, Row, params};

use crate::{Result, Store, now_ms};

/// The topic of the notice sent when a chat's inbox gets an entry; the payload is its session
/// key.
pub const QUEUED: &str = "inbox";
/// The topic of the notice sent when an entry is done; the payload is its id.
pub const DONE: &str = "inbox-done";

/// An entry to keep.
#[derive(Debug, Clone, Copy)]
pub struct NewEntry<'a> {
    pub account: &'a str,
    pub chat_id: &'a str,
    pub thread_id: Option<&'a str>,
    /// Which session answers it.
    pub session_key: &'a str,
    /// The platform's id of the message (or of the press, the command).
    pub message_id: &'a str,
    /// What it is, in the gateway's words (`message`, `command`, `approval`).
    pub kind: &'a str,
    /// The gateway's encoding of it.
    pub body: &'a str,
    /// The reply goes to whoever waits on the entry (a webhook request), not to the chat.
    pub respond: bool,
}

/// A kept entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: i64,
    pub account: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub session_key: String,
    pub message_id: String,
    pub kind: String,
    pub body: String,
    pub respond: bool,
    pub state: State,
    /// The session and its message count when its turn started.
    pub session_id: Option<String>,
    pub started_count: Option<i64>,
    /// The platform's id of the message its answer streams into.
    pub streamed: Option<String>,
    /// The answer, for whoever waits on it.
    pub reply: Option<String>,
    /// Milliseconds since the epoch.
    pub created_at: i64,
}

impl Entry {
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }
}

/// Where an entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Kept, not taken up yet.
    Pending,
    /// A turn answers it ([`Store::inbox_started`]); still so after its process died.
    Running,
    /// Answered, or dropped.
    Done,
}

impl State {
    /// The state the column holds (`pending`, `running`, `done`); an unknown word reads as
    /// pending, so the entry is answered rather than lost.
    pub(crate) fn parse(text: &str) -> Self {
        match text {
            "running" => Self::Running,
            "done" => Self::Done,
            _ => Self::Pending,
        }
    }
}

/// What [`Store::inbox_put`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// Kept, under this id.
    New(i64),
    /// It was kept before: as it stands.
    Known(Box<Entry>),
}

pub(crate) const COLUMNS: &str = "id, account, chat_id, thread_id, session_key, message_id, kind, body, respond, state, \
                                  session_id, started_count, streamed, reply, created_at";

fn entry(r: &Row<'_>) -> rusqlite::Result<Entry> {
    Ok(Entry {
        id: r.get(0)?,
        account: r.get(1)?,
        chat_id: r.get(2)?,
        thread_id: r.get(3)?,
        session_key: r.get(4)?,
        message_id: r.get(5)?,
        kind: r.get(6)?,
        body: r.get(7)?,
        respond: r.get(8)?,
        state: State::parse(&r.get::<_, String>(9)?),
        session_id: r.get(10)?,
        started_count: r.get(11)?,
        streamed: r.get(12)?,
        reply: r.get(13)?,
        created_at: r.get(14)?,
    })
}

impl Store {
    /// Keep `e`, unless it was kept before; then tell the chat's worker ([`QUEUED`]).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_put(&self, e: &NewEntry<'_>) -> Result<Put> {
        if let Some(pg) = self.pg() {
            return pg.inbox_put(e, &Self::notice_text(QUEUED, e.session_key)).await;
        }
        let put = self.write(|tx| {
            let id: Option<i64> = tx
                .query_row(
                    "INSERT INTO inbox (account, chat_id, thread_id, session_key, message_id, kind, body, respond, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                     ON CONFLICT (account, chat_id, message_id) DO NOTHING RETURNING id",
                    params![
                        e.account,
                        e.chat_id,
                        e.thread_id,
                        e.session_key,
                        e.message_id,
                        e.kind,
                        e.body,
                        e.respond,
                        now_ms()
                    ],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(id) = id {
                return Ok(Put::New(id));
            }
            let known = tx.query_row(
                &format!("SELECT {COLUMNS} FROM inbox WHERE account = ?1 AND chat_id = ?2 AND message_id = ?3"),
                params![e.account, e.chat_id, e.message_id],
                entry,
            )?;
            Ok(Put::Known(Box::new(known)))
        })?;
        if matches!(put, Put::New(_)) {
            self.hint(QUEUED, e.session_key).await;
        }
        Ok(put)
    }

    /// Entry `id`, if it is kept.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn inbox_get(&self, id: i64) -> Result<Option<Entry>> {
        if let Some(pg) = self.pg() {
            return pg.inbox_get(id).await;
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM inbox WHERE id = ?1"))?;
        Ok(stmt.query_row(params![id], entry).optional()?)
    }

    /// The entries of `session_key` not done yet, oldest first.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn inbox_open(&self, session_key: &str) -> Result<Vec<Entry>> {
        if let Some(pg) = self.pg() {
            return pg.inbox_open(session_key).await;
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM inbox WHERE session_key = ?1 AND state <> 'done' ORDER BY id"
        ))?;
        let rows = stmt.query_map(params![session_key], entry)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The session keys with entries not done yet, the longest waiting first (at most 1000).
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn inbox_open_keys(&self) -> Result<Vec<String>> {
        if let Some(pg) = self.pg() {
            return pg.inbox_open_keys().await;
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT session_key FROM inbox WHERE state <> 'done' GROUP BY session_key ORDER BY MIN(id) LIMIT 1000",
        )?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// A turn of session `session_id`, which held `count` messages, answers entry `id` now.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_started(&self, id: i64, session_id: &str, count: i64) -> Result<()> {
        if let Some(pg) = self.pg() {
            return pg.inbox_started(id, session_id, count).await;
        }
        self.write(|tx| {
            tx.execute(
                "UPDATE inbox SET state = 'running', session_id = ?2, started_count = ?3 WHERE id = ?1 AND state <> 'done'",
                params![id, session_id, count],
            )?;
            Ok(())
        })
    }

    /// The answer to entry `id` streams into the platform's message `streamed`.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_streamed(&self, id: i64, streamed: &str) -> Result<()> {
        if let Some(pg) = self.pg() {
            return pg.inbox_streamed(id, streamed).await;
        }
        self.write(|tx| {
            tx.execute("UPDATE inbox SET streamed = ?2 WHERE id = ?1", params![id, streamed])?;
            Ok(())
        })
    }

    /// Entry `id` is answered (with `reply`, for whoever waits on it); tell them ([`DONE`]).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_done(&self, id: i64, reply: Option<&str>) -> Result<()> {
        if let Some(pg) = self.pg() {
            return pg.inbox_done(id, reply, &Self::notice_text(DONE, &id.to_string())).await;
        }
        self.write(|tx| {
            tx.execute(
                "UPDATE inbox SET state = 'done', reply = ?2, done_at = ?3 WHERE id = ?1",
                params![id, reply, now_ms()],
            )?;
            Ok(())
        })?;
        self.hint(DONE, &id.to_string()).await;
        Ok(())
    }

    /// Forget entries done before `before` (milliseconds since the epoch); how many.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_prune(&self, before: i64) -> Result<usize> {
        if let Some(pg) = self.pg() {
            return pg.inbox_prune(before).await;
        }
        self.write(|tx| Ok(tx.execute("DELETE FROM inbox WHERE state = 'done' AND done_at < ?1", params![before])?))
    }
}
