//! The gateway's inbox on PostgreSQL, as [`crate::inbox`] describes it. Keeping an entry once
//! is the unique key's work (`ON CONFLICT DO NOTHING`); every other write touches one row.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::{Cached as _, Pg, sql};
use crate::delivery::NewDelivery;
use crate::inbox::{COLUMNS, Entry, NewEntry, Put, State};
use crate::{Result, now_ms};

fn entry(r: &Row) -> Entry {
    Entry {
        id: r.get(0),
        account: r.get(1),
        chat_id: r.get(2),
        thread_id: r.get(3),
        session_key: r.get(4),
        message_id: r.get(5),
        kind: r.get(6),
        body: r.get(7),
        respond: r.get(8),
        state: State::parse(r.get(9)),
        session_id: r.get(10),
        started_count: r.get(11),
        streamed: r.get(12),
        reply: r.get(13),
        created_at: r.get(14),
    }
}

/// Deliveries to keep in one statement, as columns (`unnest` turns them back into rows).
pub(super) struct Parts {
    platforms: Vec<String>,
    chats: Vec<String>,
    threads: Vec<Option<String>>,
    bodies: Vec<String>,
    keys: Vec<String>,
}

impl Parts {
    pub(super) fn of<'a>(queued: impl IntoIterator<Item = NewDelivery<'a>>) -> Self {
        let mut parts = Self {
            platforms: Vec::new(),
            chats: Vec::new(),
            threads: Vec::new(),
            bodies: Vec::new(),
            keys: Vec::new(),
        };
        for d in queued {
            parts.platforms.push(d.platform.to_string());
            parts.chats.push(d.chat_id.to_string());
            parts.threads.push(d.thread_id.map(str::to_string));
            parts.bodies.push(d.body.to_string());
            parts.keys.push(d.key.to_string());
        }
        parts
    }

    /// The common table expressions that mark entry `$id` done with `$reply` at `$now` and keep
    /// the deliveries, whose columns are the parameters from `$first` on ([`Parts::params`]).
    pub(super) fn done_ctes(&self, id: usize, reply: usize, now: usize, first: usize) -> String {
        let done = format!(
            "done AS (UPDATE inbox SET state = 'done', reply = ${reply}, done_at = ${now} WHERE id = ${id} \
             RETURNING respond, waiter)"
        );
        if self.keys.is_empty() {
            return done;
        }
        let [platform, chat, thread, body, key] = std::array::from_fn(|i| first + i);
        // The parts keep their order: each chat's deliveries are sent oldest id first.
        format!(
            "parts AS (
                 SELECT * FROM unnest(${platform}::text[], ${chat}::text[], ${thread}::text[], ${body}::text[], ${key}::text[])
                     WITH ORDINALITY AS p (platform, chat_id, thread_id, body, key, n)
             ), kept AS (
                 INSERT INTO deliveries (platform, chat_id, thread_id, body, key, next_at, created_at)
                 SELECT platform, chat_id, thread_id, body, key, ${now}, ${now} FROM parts ORDER BY n
                 ON CONFLICT (key) DO NOTHING
             ), {done}"
        )
    }

    /// The parameters [`Parts::done_ctes`] reads from `first` on: none when there are no
    /// deliveries.
    pub(super) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        if self.keys.is_empty() {
            return Vec::new();
        }
        vec![&self.platforms, &self.chats, &self.threads, &self.bodies, &self.keys]
    }
}

/// Whether a row of `done` ([`Parts::done_ctes`]) may be waited on by a process other than
/// `$me` (the one answering it): a webhook's entry that this process did not keep, or that a
/// request of another process waits on too ([`crate::Store::inbox_await`]).
pub(super) fn awaited_elsewhere(me: usize) -> String {
    format!("respond AND waiter IS DISTINCT FROM ${me}")
}

impl Pg {
    /// Keep `e` and, when it is new, send `notice` (if any) in the same statement. A webhook's
    /// entry names this process as the one waiting on it.
    pub(crate) async fn inbox_put(&self, e: &NewEntry<'_>, notice: Option<&str>) -> Result<Put> {
        let (account, chat_id, thread_id, session_key, message_id, kind, body) = (
            e.account.to_string(),
            e.chat_id.to_string(),
            e.thread_id.map(str::to_string),
            e.session_key.to_string(),
            e.message_id.to_string(),
            e.kind.to_string(),
            e.body.to_string(),
        );
        let (respond, notice) = (e.respond, notice.map(str::to_string));
        let waiter = respond.then(crate::process::me);
        let client = self.client().await?;
        let inserted = client
            .qopt(
                "WITH kept AS (
                     INSERT INTO inbox (account, chat_id, thread_id, session_key, message_id, kind, body, respond, created_at,
                                        waiter)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $12)
                     ON CONFLICT (account, chat_id, message_id) DO NOTHING RETURNING id
                 )
                 SELECT kept.id, CASE WHEN $11::text IS NOT NULL THEN pg_notify($10, $11)::text END FROM kept",
                &[
                    &account,
                    &chat_id,
                    &thread_id,
                    &session_key,
                    &message_id,
                    &kind,
                    &body,
                    &respond,
                    &now_ms(),
                    &crate::notice::CHANNEL,
                    &notice,
                    &waiter,
                ],
            )
            .await
            .map_err(sql)?;
        if let Some(row) = inserted {
            return Ok(Put::New(row.get(0)));
        }
        let known = client
            .q1(
                &format!("SELECT {COLUMNS} FROM inbox WHERE account = $1 AND chat_id = $2 AND message_id = $3"),
                &[&account, &chat_id, &message_id],
            )
            .await
            .map_err(sql)?;
        Ok(Put::Known(Box::new(entry(&known))))
    }

    pub(crate) async fn inbox_await(&self, id: i64) -> Result<()> {
        let client = self.client().await?;
        client
            .exec("UPDATE inbox SET waiter = NULL WHERE id = $1 AND waiter IS NOT NULL", &[&id])
            .await
            .map_err(sql)?;
        Ok(())
    }

    pub(crate) async fn inbox_get(&self, id: i64) -> Result<Option<Entry>> {
        let client = self.client().await?;
        let row = client.qopt(&format!("SELECT {COLUMNS} FROM inbox WHERE id = $1"), &[&id]).await.map_err(sql)?;
        Ok(row.as_ref().map(entry))
    }

    pub(crate) async fn inbox_open(&self, session_key: &str) -> Result<Vec<Entry>> {
        let client = self.client().await?;
        let rows = client
            .q(
                &format!("SELECT {COLUMNS} FROM inbox WHERE session_key = $1 AND state <> 'done' ORDER BY id"),
                &[&session_key],
            )
            .await
            .map_err(sql)?;
        Ok(rows.iter().map(entry).collect())
    }

    pub(crate) async fn inbox_open_keys(&self) -> Result<Vec<String>> {
        let client = self.client().await?;
        let rows = client
            .q(
                "SELECT session_key FROM inbox WHERE state <> 'done' GROUP BY session_key ORDER BY MIN(id) LIMIT 1000",
                &[],
            )
            .await
            .map_err(sql)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub(crate) async fn inbox_waiting(&self) -> Result<i64> {
        let client = self.client().await?;
        let rows = client.q("SELECT COUNT(*) FROM inbox WHERE state <> 'done'", &[]).await.map_err(sql)?;
        Ok(rows.first().map_or(0, |r| r.get(0)))
    }

    /// Mark entry `id` started; "not done" is written as `lease::STARTED` explains.
    pub(crate) async fn inbox_started(&self, id: i64, session_id: &str) -> Result<()> {
        let client = self.client().await?;
        client
            .exec(
                "UPDATE inbox SET state = 'running', session_id = $2,
                     started_count = COALESCE((SELECT message_count FROM sessions WHERE id = $2), 0)
                 WHERE id = $1 AND state IS DISTINCT FROM 'done'",
                &[&id, &session_id],
            )
            .await
            .map_err(sql)?;
        Ok(())
    }

    pub(crate) async fn inbox_streamed(&self, id: i64, streamed: Option<&str>) -> Result<()> {
        let client = self.client().await?;
        client.exec("UPDATE inbox SET streamed = $2 WHERE id = $1", &[&id, &streamed]).await.map_err(sql)?;
        Ok(())
    }

    /// Mark entry `id` done, keep `queued` (unless kept under their keys already) and send
    /// `notice`: one statement.
    pub(crate) async fn inbox_done(
        &self,
        id: i64,
        reply: Option<&str>,
        queued: &[NewDelivery<'_>],
        notice: &str,
    ) -> Result<()> {
        let (reply, notice, now) = (reply.map(str::to_string), notice.to_string(), now_ms());
        let parts = Parts::of(queued.iter().copied());
        let statement = format!(
            "WITH {} SELECT pg_notify($4, $5) FROM done WHERE {}",
            parts.done_ctes(1, 2, 3, 7),
            awaited_elsewhere(6)
        );
        let me = crate::process::me();
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&id, &reply, &now, &crate::notice::CHANNEL, &notice, &me];
        params.extend(parts.params());
        let client = self.client().await?;
        client.exec(&statement, &params).await.map_err(sql)?;
        Ok(())
    }

    pub(crate) async fn inbox_prune(&self, before: i64) -> Result<usize> {
        let client = self.client().await?;
        let n =
            client.exec("DELETE FROM inbox WHERE state = 'done' AND done_at < $1", &[&before]).await.map_err(sql)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
