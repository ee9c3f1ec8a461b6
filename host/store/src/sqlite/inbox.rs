//! The gateway's inbox on SQLite, as [`crate::inbox`] describes it. Keeping an entry once is the
//! unique key's work (`ON CONFLICT DO NOTHING`); every other write touches one row.

use rusqlite::{OptionalExtension as _, Row, params};

use super::delivery::enqueue;
use super::{Cached as _, Sqlite};
use crate::delivery::NewDelivery;
use crate::inbox::{COLUMNS, Entry, NewEntry, Put, State};
use crate::{Result, now_ms};

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

/// Entry `id` is answered by session `session_id`'s turn from now, which starts from the
/// session's tally ([`crate::Store::inbox_started`]).
pub(super) fn started(conn: &rusqlite::Connection, id: i64, session_id: &str) -> Result<()> {
    conn.run(
        "UPDATE inbox SET state = 'running', session_id = ?2,
             started_count = COALESCE((SELECT message_count FROM sessions WHERE id = ?2), 0)
         WHERE id = ?1 AND state <> 'done'",
        params![id, session_id],
    )?;
    Ok(())
}

/// Entry `id` is answered (with `reply`), by `queued`, kept in their order unless kept before.
pub(super) fn done<'a>(
    tx: &rusqlite::Connection,
    id: i64,
    reply: Option<&str>,
    queued: impl IntoIterator<Item = NewDelivery<'a>>,
    now: i64,
) -> Result<()> {
    for d in queued {
        enqueue(tx, &d, now)?;
    }
    tx.run("UPDATE inbox SET state = 'done', reply = ?2, done_at = ?3 WHERE id = ?1", params![id, reply, now])?;
    Ok(())
}

impl Sqlite {
    pub(crate) fn inbox_put(&self, e: &NewEntry<'_>) -> Result<Put> {
        self.write(|tx| {
            let id: Option<i64> = tx
                .one(
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
            let known = tx.one(
                &format!("SELECT {COLUMNS} FROM inbox WHERE account = ?1 AND chat_id = ?2 AND message_id = ?3"),
                params![e.account, e.chat_id, e.message_id],
                entry,
            )?;
            Ok(Put::Known(Box::new(known)))
        })
    }

    pub(crate) fn inbox_get(&self, id: i64) -> Result<Option<Entry>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM inbox WHERE id = ?1"))?;
        Ok(stmt.query_row(params![id], entry).optional()?)
    }

    pub(crate) fn inbox_open(&self, session_key: &str) -> Result<Vec<Entry>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM inbox WHERE session_key = ?1 AND state <> 'done' ORDER BY id"
        ))?;
        let rows = stmt.query_map(params![session_key], entry)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn inbox_open_keys(&self) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT session_key FROM inbox WHERE state <> 'done' GROUP BY session_key ORDER BY MIN(id) LIMIT 1000",
        )?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn inbox_waiting(&self) -> Result<i64> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT COUNT(*) FROM inbox WHERE state <> 'done'")?;
        Ok(stmt.query_row([], |r| r.get(0))?)
    }

    pub(crate) fn inbox_started(&self, id: i64, session_id: &str) -> Result<()> {
        self.write(|tx| started(tx, id, session_id))
    }

    pub(crate) fn inbox_streamed(&self, id: i64, streamed: Option<&str>) -> Result<()> {
        self.write(|tx| {
            tx.run("UPDATE inbox SET streamed = ?2 WHERE id = ?1", params![id, streamed])?;
            Ok(())
        })
    }

    pub(crate) fn inbox_done(&self, id: i64, reply: Option<&str>, queued: &[NewDelivery<'_>]) -> Result<()> {
        self.write(|tx| done(tx, id, reply, queued.iter().copied(), now_ms()))
    }

    pub(crate) fn inbox_prune(&self, before: i64) -> Result<usize> {
        self.write(|tx| Ok(tx.run("DELETE FROM inbox WHERE state = 'done' AND done_at < ?1", params![before])?))
    }
}
