//! Sessions and their messages on PostgreSQL, with the behaviour of [`crate::sessions`]: a turn
//! is appended in one transaction, titles are unique without regard to case, undo marks the last
//! turn inactive. Messages are searchable as soon as they are committed (their `tsvector` is a
//! generated column, and the GIN indexes are updated with the row), so nothing is indexed in
//! batches as on SQLite.

use talaria_protocol::Usage;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::inbox::Parts;
use super::{Cached as _, Pg, sql};
use crate::inbox::Queued;
use crate::sessions::{
    Ending, ListQuery, MESSAGE_COLUMNS, MessageRow, RawMessage, SESSION_COLUMNS, SessionInfo, not_found, preview,
};
use crate::{Error, NewSession, Result, Store, count};

/// The parameters of [`Pg::append`]'s statement before its rows'.
const FIXED: usize = 14;

fn session_from_row(r: &Row) -> SessionInfo {
    let tokens = |i: usize| u64::try_from(r.get::<_, i64>(i)).unwrap_or(0);
    SessionInfo {
        id: r.get(0),
        source: r.get(1),
        model: r.get(2),
        provider: r.get(3),
        title: r.get(4),
        parent_id: r.get(5),
        cwd: r.get(6),
        started_at: r.get(7),
        updated_at: r.get(8),
        ended_at: r.get(9),
        end_reason: r.get(10),
        message_count: r.get(11),
        tool_call_count: r.get(12),
        api_call_count: r.get(13),
        usage: Usage {
            input_tokens: tokens(14),
            output_tokens: tokens(15),
            cache_read_tokens: tokens(16),
            cache_write_tokens: tokens(17),
            reasoning_tokens: tokens(18),
            estimated: r.get::<_, i64>(20) > 0,
        },
        preview: r.get::<_, Option<String>>(19).map(|p| preview(&p)),
    }
}

pub(crate) fn raw_message(r: &Row) -> RawMessage {
    raw_message_from(r, 0)
}

/// The message whose [`MESSAGE_COLUMNS`] start at column `at`.
fn raw_message_from(r: &Row, at: usize) -> RawMessage {
    RawMessage {
        id: r.get(at),
        session_id: r.get(at + 1),
        role: r.get(at + 2),
        content: r.get(at + 3),
        tool_call_id: r.get(at + 4),
        tool_calls: r.get(at + 5),
        tool_name: r.get(at + 6),
        reasoning: r.get(at + 7),
        extra: r.get(at + 8),
        created_at: r.get(at + 9),
    }
}

async fn exists(c: &impl deadpool_postgres::GenericClient, id: &str) -> Result<bool> {
    Ok(c.qopt("SELECT 1 FROM sessions WHERE id = $1", &[&id]).await.map_err(sql)?.is_some())
}

/// Add usage to a session's totals.
async fn add_usage(
    c: &impl deadpool_postgres::GenericClient,
    session_id: &str,
    usage: &Usage,
    api_calls: u32,
    now: i64,
) -> Result<()> {
    let t = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let calls = i64::from(api_calls);
    let estimated = if usage.estimated { calls } else { 0 };
    let params: [&(dyn ToSql + Sync); 9] = [
        &session_id,
        &calls,
        &t(usage.input_tokens),
        &t(usage.output_tokens),
        &t(usage.cache_read_tokens),
        &t(usage.cache_write_tokens),
        &t(usage.reasoning_tokens),
        &now,
        &estimated,
    ];
    let touched = c
        .exec(
            "UPDATE sessions SET api_call_count = api_call_count + $2,
                    input_tokens = input_tokens + $3, output_tokens = output_tokens + $4,
                    cache_read_tokens = cache_read_tokens + $5, cache_write_tokens = cache_write_tokens + $6,
                    reasoning_tokens = reasoning_tokens + $7, updated_at = greatest(updated_at, $8),
                    estimated_calls = estimated_calls + $9
             WHERE id = $1",
            &params,
        )
        .await
        .map_err(sql)?;
    if touched == 0 {
        return Err(not_found(session_id));
    }
    Ok(())
}

impl Pg {
    pub(crate) async fn create_session(&self, s: &NewSession, now: i64) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        if exists(&tx, &s.id).await? {
            return Err(Error::SessionExists { id: s.id.clone() });
        }
        if let Some(parent) = &s.parent_id
            && !exists(&tx, parent).await?
        {
            return Err(Error::UnknownParent { id: parent.clone() });
        }
        let inserted = tx
            .exec(
                "INSERT INTO sessions (id, source, model, provider, system_prompt, parent_id, cwd, started_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) ON CONFLICT (id) DO NOTHING",
                &[&s.id, &s.source, &s.model, &s.provider, &s.system_prompt, &s.parent_id, &s.cwd, &now],
            )
            .await
            .map_err(sql)?;
        if inserted == 0 {
            return Err(Error::SessionExists { id: s.id.clone() });
        }
        tx.commit().await.map_err(sql)
    }

    pub(crate) async fn fork_session(&self, from: &str, new_id: &str, now: i64) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        if !exists(&tx, from).await? {
            return Err(not_found(from));
        }
        if exists(&tx, new_id).await? {
            return Err(Error::SessionExists { id: new_id.to_string() });
        }
        tx.exec(
            "INSERT INTO sessions (id, source, model, provider, system_prompt, parent_id, cwd, started_at, updated_at,
                                   message_count, tool_call_count)
             SELECT $2, source, model, provider, system_prompt, id, cwd, $3, $3, message_count, tool_call_count
             FROM sessions WHERE id = $1",
            &[&from, &new_id, &now],
        )
        .await
        .map_err(sql)?;
        tx.exec(
            "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, reasoning, extra, created_at)
             SELECT $2, role, content, tool_call_id, tool_calls, tool_name, reasoning, extra, created_at
             FROM messages WHERE session_id = $1 AND active ORDER BY id",
            &[&from, &new_id],
        )
        .await
        .map_err(sql)?;
        tx.commit().await.map_err(sql)
    }

    pub(crate) async fn append(
        &self,
        session_id: &str,
        rows: Vec<MessageRow>,
        calls: usize,
        usage: Option<(Usage, u32)>,
        ending: Ending<'_>,
        now: i64,
    ) -> Result<Vec<i64>> {
        // One statement, so one round trip and its own transaction: the session's counts and
        // usage, the lease given back with its notice, the inbox entry answered with its
        // deliveries and notice, and the rows. A session that is not there fails it on the rows'
        // foreign key, and nothing is written.
        let t = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let (usage, api_calls) = usage.unwrap_or_default();
        let calls_made = i64::from(api_calls);
        let estimated = if usage.estimated { calls_made } else { 0 };
        let (added, calls) = (count(rows.len()), count(calls));
        let token = ending.release;
        let notice = token.map(|_| Store::notice_text(crate::notice::LEASE_FREED, session_id));
        let totals = [
            t(usage.input_tokens),
            t(usage.output_tokens),
            t(usage.cache_read_tokens),
            t(usage.cache_write_tokens),
            t(usage.reasoning_tokens),
        ];
        let mut statement = String::from(
            "WITH counted AS (
                 UPDATE sessions SET message_count = message_count + $3, tool_call_count = tool_call_count + $4,
                     api_call_count = api_call_count + $5, input_tokens = input_tokens + $6,
                     output_tokens = output_tokens + $7, cache_read_tokens = cache_read_tokens + $8,
                     cache_write_tokens = cache_write_tokens + $9, reasoning_tokens = reasoning_tokens + $10,
                     estimated_calls = estimated_calls + $11, updated_at = greatest(updated_at, $2)
                 WHERE id = $1),
             gone AS (DELETE FROM session_leases WHERE session_id = $1 AND token = $12 RETURNING wanted),",
        );
        // The answered entry's parameters follow the rows'.
        let base = FIXED + rows.len() * 7;
        let answered = ending.answer.map(|(id, answer)| {
            let notice = Store::notice_text(crate::inbox::DONE, &id.to_string());
            (id, answer.reply.as_deref(), notice, Parts::of(answer.queued.iter().map(Queued::new_delivery)))
        });
        // Told only when someone waits: a process for the lease, another process for the answer
        // (see the schema's eighth migration).
        match &answered {
            Some((_, _, _, parts)) => statement.push_str(&format!(
                "{},
                 told AS (SELECT pg_notify($13, $14) FROM gone WHERE wanted
                          UNION ALL SELECT pg_notify($13, ${}) FROM done WHERE {})",
                parts.done_ctes(base + 1, base + 2, 2, base + 5),
                base + 3,
                super::inbox::awaited_elsewhere(base + 4)
            )),
            None => statement.push_str("told AS (SELECT pg_notify($13, $14) FROM gone WHERE wanted)"),
        }
        statement.push_str(
            "
             INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, reasoning, extra, created_at)
             VALUES ",
        );
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(FIXED + rows.len() * 7);
        params.extend([&session_id as &(dyn ToSql + Sync), &now, &added, &calls, &calls_made]);
        params.extend(totals.iter().map(|n| n as &(dyn ToSql + Sync)));
        params.extend([&estimated as &(dyn ToSql + Sync), &token, &crate::notice::CHANNEL, &notice]);
        for (i, r) in rows.iter().enumerate() {
            let at = FIXED + 1 + i * 7;
            statement.push_str(&format!(
                "{}($1, ${at}, ${}, ${}, ${}, ${}, ${}, ${}, $2)",
                if i == 0 { "" } else { ", " },
                at + 1,
                at + 2,
                at + 3,
                at + 4,
                at + 5,
                at + 6
            ));
            params.extend([
                &r.role as &(dyn ToSql + Sync),
                &r.content,
                &r.tool_call_id,
                &r.tool_calls,
                &r.tool_name,
                &r.reasoning,
                &r.extra,
            ]);
        }
        let me = crate::process::me();
        if let Some((id, reply, notice, parts)) = &answered {
            params.extend([id as &(dyn ToSql + Sync), reply, notice, &me]);
            params.extend(parts.params());
        }
        // The notice is read back, so that it is sent (a CTE nobody reads is never run).
        statement.push_str(" RETURNING id, (SELECT count(*) FROM told)");
        let client = self.client().await?;
        // `rows` is never empty: [`crate::Store::append_messages_with_usage`] returns first.
        let inserted = client.q(&statement, &params).await.map_err(|e| match e.code() {
            Some(&SqlState::FOREIGN_KEY_VIOLATION) => not_found(session_id),
            _ => sql(e),
        })?;
        // Identities are drawn row by row in the order the rows are written.
        let mut ids: Vec<i64> = inserted.iter().map(|r| r.get(0)).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    pub(crate) async fn add_usage(&self, session_id: &str, usage: &Usage, api_calls: u32, now: i64) -> Result<()> {
        let client = self.client().await?;
        add_usage(&client, session_id, usage, api_calls, now).await
    }

    pub(crate) async fn session(&self, id: &str) -> Result<Option<SessionInfo>> {
        let client = self.client().await?;
        let row = client.qopt(&format!("{SESSION_COLUMNS} WHERE s.id = $1"), &[&id]).await.map_err(sql)?;
        Ok(row.as_ref().map(session_from_row))
    }

    pub(crate) async fn system_prompt(&self, id: &str) -> Result<String> {
        let client = self.client().await?;
        let row = client.qopt("SELECT system_prompt FROM sessions WHERE id = $1", &[&id]).await.map_err(sql)?;
        row.map(|r| r.get(0)).ok_or_else(|| not_found(id))
    }

    /// The id of the session titled `title` (ignoring case), if any.
    pub(crate) async fn session_titled(&self, title: &str) -> Result<Option<String>> {
        let client = self.client().await?;
        let row =
            client.qopt("SELECT id FROM sessions WHERE lower(title) = lower($1)", &[&title]).await.map_err(sql)?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Ids starting with `prefix`, newest first, at most `limit`.
    pub(crate) async fn session_ids_starting(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let client = self.client().await?;
        let rows = client
            .q(
                "SELECT id FROM sessions WHERE starts_with(id, $1) ORDER BY updated_at DESC, id LIMIT $2",
                &[&prefix, &count(limit)],
            )
            .await
            .map_err(sql)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub(crate) async fn list_sessions(&self, q: &ListQuery<'_>) -> Result<Vec<SessionInfo>> {
        let (children, source, parent, cwd) =
            (q.include_children, q.source.map(String::from), q.parent_id.map(String::from), q.cwd.map(String::from));
        let (limit, offset) = (count(q.limit), count(q.offset));
        let client = self.client().await?;
        let rows = client
            .q(
                &format!(
                    "{SESSION_COLUMNS}
                     WHERE ($1 OR $2::text IS NOT NULL OR $3::text IS NOT NULL OR s.source <> 'subagent')
                       AND ($2::text IS NULL OR s.source = $2) AND ($3::text IS NULL OR s.parent_id = $3)
                       AND ($6::text IS NULL OR s.cwd = $6)
                     ORDER BY s.updated_at DESC, s.id DESC LIMIT $4 OFFSET $5"
                ),
                &[&children, &source, &parent, &limit, &offset, &cwd],
            )
            .await
            .map_err(sql)?;
        Ok(rows.iter().map(session_from_row).collect())
    }

    /// The session's active messages, or `None` when there is no such session.
    pub(crate) async fn messages(&self, session_id: &str) -> Result<Option<Vec<RawMessage>>> {
        let client = self.client().await?;
        let rows = client
            .q(
                &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND active ORDER BY id"),
                &[&session_id],
            )
            .await
            .map_err(sql)?;
        if rows.is_empty() && !exists(&client, session_id).await? {
            return Ok(None);
        }
        Ok(Some(rows.iter().map(raw_message).collect()))
    }

    /// The session's system prompt and active messages in one statement, or `None` when there
    /// is no such session.
    pub(crate) async fn history(&self, session_id: &str) -> Result<Option<(String, Vec<RawMessage>)>> {
        let client = self.client().await?;
        history(&client, session_id).await
    }
}

/// [`Pg::history`] on `c` (a transaction's, too), in one statement: the session's row first
/// (the system prompt, sent once rather than beside every message), then its messages.
pub(super) async fn history(
    c: &impl deadpool_postgres::GenericClient,
    session_id: &str,
) -> Result<Option<(String, Vec<RawMessage>)>> {
    let rows = c
        .q(
            "SELECT system_prompt, NULL::bigint AS id, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
                    NULL::text, NULL::text, NULL::text, NULL::bigint
             FROM sessions WHERE id = $1
             UNION ALL
             SELECT NULL, m.id, m.session_id, m.role, m.content, m.tool_call_id, m.tool_calls, m.tool_name,
                    m.reasoning, m.extra, m.created_at
             FROM messages m WHERE m.session_id = $1 AND m.active
             ORDER BY id NULLS FIRST",
            &[&session_id],
        )
        .await
        .map_err(sql)?;
    let Some((session, messages)) = rows.split_first() else { return Ok(None) };
    let Some(prompt) = session.get::<_, Option<String>>(0) else { return Ok(None) };
    Ok(Some((prompt, messages.iter().map(|r| raw_message_from(r, 1)).collect())))
}

impl Pg {
    pub(crate) async fn messages_around(&self, message_id: i64, window: usize) -> Result<Vec<RawMessage>> {
        let client = self.client().await?;
        let session: Option<String> = client
            .qopt("SELECT session_id FROM messages WHERE id = $1", &[&message_id])
            .await
            .map_err(sql)?
            .map(|r| r.get(0));
        let Some(session) = session else { return Err(Error::MessageNotFound { id: message_id }) };
        let before = client
            .q(
                &format!(
                    "SELECT {MESSAGE_COLUMNS} FROM messages
                     WHERE session_id = $1 AND active AND id < $2 ORDER BY id DESC LIMIT $3"
                ),
                &[&session, &message_id, &count(window)],
            )
            .await
            .map_err(sql)?;
        let after = client
            .q(
                &format!(
                    "SELECT {MESSAGE_COLUMNS} FROM messages
                     WHERE session_id = $1 AND active AND id >= $2 ORDER BY id LIMIT $3"
                ),
                &[&session, &message_id, &count(window.saturating_add(1))],
            )
            .await
            .map_err(sql)?;
        Ok(before.iter().rev().chain(after.iter()).map(raw_message).collect())
    }

    pub(crate) async fn title(&self, id: &str, title: &str, replace: bool) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        // Titles are checked and set one at a time, across processes.
        tx.exec("SELECT pg_advisory_xact_lock(hashtextextended('talaria-titles', 0))", &[]).await.map_err(sql)?;
        if !exists(&tx, id).await? {
            return Err(not_found(id));
        }
        let other = tx
            .qopt("SELECT id FROM sessions WHERE lower(title) = lower($1) AND id <> $2", &[&title, &id])
            .await
            .map_err(sql)?;
        if let Some(other) = other {
            return Err(Error::TitleTaken { title: title.to_string(), other_id: other.get(0) });
        }
        let sql_text = if replace {
            "UPDATE sessions SET title = $2 WHERE id = $1"
        } else {
            "UPDATE sessions SET title = $2 WHERE id = $1 AND title IS NULL"
        };
        let set = tx.exec(sql_text, &[&id, &title]).await.map_err(sql)? > 0;
        tx.commit().await.map_err(sql)?;
        Ok(set)
    }

    pub(crate) async fn delete_session(&self, id: &str) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        tx.exec("DELETE FROM messages WHERE session_id = $1", &[&id]).await.map_err(sql)?;
        tx.exec("UPDATE sessions SET parent_id = NULL WHERE parent_id = $1", &[&id]).await.map_err(sql)?;
        if tx.exec("DELETE FROM sessions WHERE id = $1", &[&id]).await.map_err(sql)? == 0 {
            return Err(not_found(id));
        }
        tx.commit().await.map_err(sql)
    }

    pub(crate) async fn end_session(&self, id: &str, reason: &str, now: i64) -> Result<()> {
        let client = self.client().await?;
        let touched = client
            .exec("UPDATE sessions SET ended_at = $2, end_reason = $3 WHERE id = $1", &[&id, &now, &reason])
            .await
            .map_err(sql)?;
        if touched == 0 {
            return Err(not_found(id));
        }
        Ok(())
    }

    pub(crate) async fn undo_last_turn(&self, session_id: &str, now: i64) -> Result<usize> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        // One undo at a time per session: the row lock queues the others.
        let locked = tx.qopt("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE", &[&session_id]).await.map_err(sql)?;
        if locked.is_none() {
            return Err(not_found(session_id));
        }
        let last_user: Option<i64> = tx
            .q1("SELECT max(id) FROM messages WHERE session_id = $1 AND role = 'user' AND active", &[&session_id])
            .await
            .map_err(sql)?
            .get(0);
        let Some(from) = last_user else { return Ok(0) };
        let calls: i64 = tx
            .q1(
                "SELECT coalesce(sum(json_array_length(tool_calls::json)), 0)::bigint FROM messages
                 WHERE session_id = $1 AND active AND id >= $2",
                &[&session_id, &from],
            )
            .await
            .map_err(sql)?
            .get(0);
        let undone = tx
            .exec(
                "UPDATE messages SET active = FALSE WHERE session_id = $1 AND active AND id >= $2",
                &[&session_id, &from],
            )
            .await
            .map_err(sql)?;
        let undone = usize::try_from(undone).unwrap_or(usize::MAX);
        tx.exec(
            "UPDATE sessions SET message_count = greatest(message_count - $2, 0),
                                 tool_call_count = greatest(tool_call_count - $3, 0),
                                 updated_at = greatest(updated_at, $4)
             WHERE id = $1",
            &[&session_id, &count(undone), &calls, &now],
        )
        .await
        .map_err(sql)?;
        tx.commit().await.map_err(sql)?;
        Ok(undone)
    }
}
