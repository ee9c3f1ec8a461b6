//! Sessions and their messages on SQLite, as [`crate::sessions`] describes them. A turn's last
//! commit indexes the messages waiting for search once there are enough of them
//! ([`crate::search::INDEX_BATCH`]), and every so many appends a passive checkpoint keeps the WAL
//! short.

use std::sync::atomic::Ordering;

use rusqlite::{Connection, OptionalExtension, Row, params};
use talaria_protocol::Usage;

use super::{Cached as _, Sqlite};
use crate::inbox::Queued;
use crate::sessions::{
    Ending, ListQuery, MESSAGE_COLUMNS, MessageRow, RawMessage, SESSION_COLUMNS, SessionInfo, not_found, preview,
};
use crate::{Error, NewSession, Result, count};

/// A passive WAL checkpoint after this many appends through one `Store`.
const CHECKPOINT_EVERY: u32 = 200;

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

/// Reads the columns of [`MESSAGE_COLUMNS`], in that order.
fn raw_message(r: &Row<'_>) -> rusqlite::Result<RawMessage> {
    Ok(RawMessage {
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

/// Add `usage` of `api_calls` model calls to the session's totals, in `tx`.
fn add_usage(tx: &Connection, session_id: &str, usage: &Usage, api_calls: u32, now: i64) -> Result<()> {
    let t = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let touched = tx.run(
        "UPDATE sessions SET api_call_count = api_call_count + ?2,
                input_tokens = input_tokens + ?3, output_tokens = output_tokens + ?4,
                cache_read_tokens = cache_read_tokens + ?5, cache_write_tokens = cache_write_tokens + ?6,
                reasoning_tokens = reasoning_tokens + ?7, updated_at = max(updated_at, ?8),
                estimated_calls = estimated_calls + ?9
         WHERE id = ?1",
        params![
            session_id,
            api_calls,
            t(usage.input_tokens),
            t(usage.output_tokens),
            t(usage.cache_read_tokens),
            t(usage.cache_write_tokens),
            t(usage.reasoning_tokens),
            now,
            if usage.estimated { api_calls } else { 0 }
        ],
    )?;
    if touched == 0 {
        return Err(not_found(session_id));
    }
    Ok(())
}

impl Sqlite {
    pub(crate) fn create_session(&self, s: &NewSession, now: i64) -> Result<()> {
        self.write(|tx| {
            if exists(tx, &s.id)? {
                return Err(Error::SessionExists { id: s.id.clone() });
            }
            if let Some(parent) = &s.parent_id
                && !exists(tx, parent)?
            {
                return Err(Error::UnknownParent { id: parent.clone() });
            }
            tx.run(
                "INSERT INTO sessions (id, source, model, provider, system_prompt, parent_id, cwd, started_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
                params![s.id, s.source, s.model, s.provider, s.system_prompt, s.parent_id, s.cwd, now],
            )?;
            Ok(())
        })
    }

    pub(crate) fn fork_session(&self, from: &str, new_id: &str, now: i64) -> Result<()> {
        self.write(|tx| {
            if !exists(tx, from)? {
                return Err(not_found(from));
            }
            if exists(tx, new_id)? {
                return Err(Error::SessionExists { id: new_id.to_string() });
            }
            tx.run(
                "INSERT INTO sessions (id, source, model, provider, system_prompt, parent_id, cwd, started_at, updated_at,
                                       message_count, tool_call_count)
                 SELECT ?2, source, model, provider, system_prompt, id, cwd, ?3, ?3, message_count, tool_call_count
                 FROM sessions WHERE id = ?1",
                params![from, new_id, now],
            )?;
            tx.run(
                "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, reasoning, extra, created_at)
                 SELECT ?2, role, content, tool_call_id, tool_calls, tool_name, reasoning, extra, created_at
                 FROM messages WHERE session_id = ?1 AND active ORDER BY id",
                params![from, new_id],
            )?;
            Ok(())
        })
    }

    /// Append one turn's `rows` (holding `calls` tool calls) and add `usage`, in one
    /// transaction; `ends_turn` indexes the messages waiting for search with it, and `ending`
    /// says what else the transaction does.
    pub(crate) fn append(
        &self,
        session_id: &str,
        rows: &[MessageRow],
        calls: usize,
        usage: Option<(&Usage, u32)>,
        ends_turn: bool,
        ending: Ending<'_>,
    ) -> Result<Vec<i64>> {
        let now = crate::now_ms();
        let ids = self.write(|tx| {
            // Cached statements: a turn appends several times, and parsing the SQL each time cost
            // more than running it.
            let touched = tx
                .run(
                    "UPDATE sessions SET message_count = message_count + ?2, tool_call_count = tool_call_count + ?3,
                                         updated_at = max(updated_at, ?4)
                     WHERE id = ?1",
                params![session_id, count(rows.len()), count(calls), now])?;
            if touched == 0 {
                return Err(not_found(session_id));
            }
            let mut insert = tx.prepare_cached(
                "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, reasoning, extra, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?;
            let mut ids = Vec::with_capacity(rows.len());
            for r in rows {
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
                super::search::index_pending(tx, crate::search::INDEX_BATCH)?;
            }
            if let Some(token) = ending.release {
                super::release_lease_in(tx, session_id, token)?;
            }
            if let Some((id, answer)) = ending.answer {
                let queued = answer.queued.iter().map(Queued::new_delivery);
                super::inbox::done(tx, id, answer.reply.as_deref(), queued, now)?;
            }
            Ok(ids)
        })?;
        if !self.checkpoints_in_background()
            && self.appends.fetch_add(1, Ordering::Relaxed) % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1
        {
            // Best effort: a checkpoint blocked by readers simply does less; the next one catches up.
            let _ = self.conn().query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
        Ok(ids)
    }

    pub(crate) fn add_usage(&self, session_id: &str, usage: &Usage, api_calls: u32, now: i64) -> Result<()> {
        self.write(|tx| add_usage(tx, session_id, usage, api_calls, now))
    }

    pub(crate) fn session(&self, id: &str) -> Result<Option<SessionInfo>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!("{SESSION_COLUMNS} WHERE s.id = ?1"))?;
        Ok(stmt.query_row([id], session_from_row).optional()?)
    }

    pub(crate) fn system_prompt(&self, id: &str) -> Result<String> {
        system_prompt(&self.conn(), id)
    }

    /// The id of the session titled `title`, if any.
    pub(crate) fn session_titled(&self, title: &str) -> Result<Option<String>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT id FROM sessions WHERE title = ?1")?;
        Ok(stmt.query_row([title], |r| r.get(0)).optional()?)
    }

    /// Up to `limit` ids starting with `prefix`, the most recently updated first.
    pub(crate) fn session_ids_starting(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT id FROM sessions WHERE substr(id, 1, length(?1)) = ?1 ORDER BY updated_at DESC, id LIMIT +?2",
        )?;
        Ok(stmt.query_map(params![prefix, count(limit)], |r| r.get(0))?.collect::<Result<_, _>>()?)
    }

    pub(crate) fn list_sessions(&self, q: &ListQuery<'_>) -> Result<Vec<SessionInfo>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "{SESSION_COLUMNS}
             WHERE (?1 OR ?2 IS NOT NULL OR ?3 IS NOT NULL OR s.source <> 'subagent')
               AND (?2 IS NULL OR s.source = ?2) AND (?3 IS NULL OR s.parent_id = ?3)
               AND (?6 IS NULL OR s.cwd = ?6)
             ORDER BY s.updated_at DESC, s.id DESC LIMIT +?4 OFFSET +?5"
        ))?;
        let rows = stmt.query_map(
            params![q.include_children, q.source, q.parent_id, count(q.limit), count(q.offset), q.cwd],
            session_from_row,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The session's active messages, in order, as read.
    pub(crate) fn messages(&self, session_id: &str) -> Result<Vec<RawMessage>> {
        messages(&self.conn(), session_id)
    }

    pub(crate) fn messages_around(&self, message_id: i64, window: usize) -> Result<Vec<RawMessage>> {
        let conn = self.conn();
        let session: Option<String> =
            conn.one("SELECT session_id FROM messages WHERE id = ?1", [message_id], |r| r.get(0)).optional()?;
        let Some(session) = session else { return Err(Error::MessageNotFound { id: message_id }) };
        let mut before = conn.prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages
                 WHERE session_id = ?1 AND active AND id < ?2 ORDER BY id DESC LIMIT +?3"
        ))?;
        let mut raw: Vec<RawMessage> =
            before.query_map(params![session, message_id, count(window)], raw_message)?.collect::<Result<_, _>>()?;
        raw.reverse();
        let mut after = conn.prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages
                 WHERE session_id = ?1 AND active AND id >= ?2 ORDER BY id LIMIT +?3"
        ))?;
        for m in after.query_map(params![session, message_id, count(window.saturating_add(1))], raw_message)? {
            raw.push(m?);
        }
        Ok(raw)
    }

    pub(crate) fn title(&self, id: &str, title: &str, replace: bool) -> Result<bool> {
        self.write(|tx| {
            if !exists(tx, id)? {
                return Err(not_found(id));
            }
            let other: Option<String> = tx
                .one("SELECT id FROM sessions WHERE title = ?1 AND id <> ?2", params![title, id], |r| r.get(0))
                .optional()?;
            if let Some(other_id) = other {
                return Err(Error::TitleTaken { title: title.to_owned(), other_id });
            }
            let sql = if replace {
                "UPDATE sessions SET title = ?2 WHERE id = ?1"
            } else {
                "UPDATE sessions SET title = ?2 WHERE id = ?1 AND title IS NULL"
            };
            Ok(tx.run(sql, params![id, title])? > 0)
        })
    }

    pub(crate) fn delete_session(&self, id: &str) -> Result<()> {
        self.write(|tx| {
            // The foreign keys would do both; saying it keeps the behaviour independent of them.
            tx.run("DELETE FROM messages WHERE session_id = ?1", [id])?;
            tx.run("UPDATE sessions SET parent_id = NULL WHERE parent_id = ?1", [id])?;
            if tx.run("DELETE FROM sessions WHERE id = ?1", [id])? == 0 {
                return Err(not_found(id));
            }
            Ok(())
        })
    }

    pub(crate) fn end_session(&self, id: &str, reason: &str, now: i64) -> Result<()> {
        self.write(|tx| {
            if tx.run("UPDATE sessions SET ended_at = ?2, end_reason = ?3 WHERE id = ?1", params![id, now, reason])?
                == 0
            {
                return Err(not_found(id));
            }
            Ok(())
        })
    }

    pub(crate) fn undo_last_turn(&self, session_id: &str, now: i64) -> Result<usize> {
        self.write(|tx| {
            if !exists(tx, session_id)? {
                return Err(not_found(session_id));
            }
            let last_user: Option<i64> = tx.one(
                "SELECT max(id) FROM messages WHERE session_id = ?1 AND role = 'user' AND active",
                [session_id],
                |r| r.get(0),
            )?;
            let Some(from) = last_user else { return Ok(0) };
            let calls: i64 = tx.one(
                "SELECT coalesce(sum(json_array_length(tool_calls)), 0) FROM messages
                 WHERE session_id = ?1 AND active AND id >= ?2",
                params![session_id, from],
                |r| r.get(0),
            )?;
            let undone = tx.run(
                "UPDATE messages SET active = 0 WHERE session_id = ?1 AND active AND id >= ?2",
                params![session_id, from],
            )?;
            tx.run(
                "UPDATE sessions SET message_count = max(message_count - ?2, 0),
                                     tool_call_count = max(tool_call_count - ?3, 0), updated_at = max(updated_at, ?4)
                 WHERE id = ?1",
                params![session_id, count(undone), calls, now],
            )?;
            Ok(undone)
        })
    }
}

fn system_prompt(conn: &Connection, id: &str) -> Result<String> {
    let mut stmt = conn.prepare_cached("SELECT system_prompt FROM sessions WHERE id = ?1")?;
    stmt.query_row([id], |r| r.get(0)).optional()?.ok_or_else(|| not_found(id))
}

/// The session's active messages, oldest first.
fn messages(conn: &Connection, session_id: &str) -> Result<Vec<RawMessage>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1 AND active ORDER BY id"
    ))?;
    let raw: Vec<RawMessage> = stmt.query_map([session_id], raw_message)?.collect::<Result<_, _>>()?;
    if raw.is_empty() && !exists(conn, session_id)? {
        return Err(not_found(session_id));
    }
    Ok(raw)
}

/// The session's system prompt and active messages (on a transaction's connection, too).
pub(super) fn history(conn: &Connection, session_id: &str) -> Result<(String, Vec<RawMessage>)> {
    Ok((system_prompt(conn, session_id)?, messages(conn, session_id)?))
}
