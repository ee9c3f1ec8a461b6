//! The gateway's inbox on PostgreSQL, as [`crate::inbox`] describes it. Keeping an entry once
//! is the unique key's work (`ON CONFLICT DO NOTHING`); every other write touches one row.

use tokio_postgres::Row;

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

impl Pg {
    /// Keep `e` and, when it is new, send `notice` in the same statement.
    pub(crate) async fn inbox_put(&self, e: &NewEntry<'_>, notice: &str) -> Result<Put> {
        let (account, chat_id, thread_id, session_key, message_id, kind, body) = (
            e.account.to_string(),
            e.chat_id.to_string(),
            e.thread_id.map(str::to_string),
            e.session_key.to_string(),
            e.message_id.to_string(),
            e.kind.to_string(),
            e.body.to_string(),
        );
        let (respond, notice) = (e.respond, notice.to_string());
        let client = self.client().await?;
        let inserted = client
            .qopt(
                "WITH kept AS (
                     INSERT INTO inbox (account, chat_id, thread_id, session_key, message_id, kind, body, respond, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                     ON CONFLICT (account, chat_id, message_id) DO NOTHING RETURNING id
                 )
                 SELECT kept.id, pg_notify($10, $11)::text FROM kept",
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

    pub(crate) async fn inbox_started(&self, id: i64, session_id: &str) -> Result<()> {
        let client = self.client().await?;
        client
            .exec(
                "UPDATE inbox SET state = 'running', session_id = $2,
                     started_count = COALESCE((SELECT message_count FROM sessions WHERE id = $2), 0)
                 WHERE id = $1 AND state <> 'done'",
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
        let (reply, notice) = (reply.map(str::to_string), notice.to_string());
        if queued.is_empty() {
            let client = self.client().await?;
            client
                .exec(
                    "WITH done AS (UPDATE inbox SET state = 'done', reply = $2, done_at = $3 WHERE id = $1)
                     SELECT pg_notify($4, $5)",
                    &[&id, &reply, &now_ms(), &crate::notice::CHANNEL, &notice],
                )
                .await
                .map_err(sql)?;
            return Ok(());
        }
        let column =
            |f: for<'d> fn(&'d NewDelivery<'d>) -> &'d str| queued.iter().map(|d| f(d).to_string()).collect::<Vec<_>>();
        let (platforms, chats, bodies, keys) =
            (column(|d| d.platform), column(|d| d.chat_id), column(|d| d.body), column(|d| d.key));
        let threads: Vec<Option<String>> = queued.iter().map(|d| d.thread_id.map(str::to_string)).collect();
        let client = self.client().await?;
        client
            .exec(
                // The parts keep their order: each chat's deliveries are sent oldest id first.
                "WITH parts AS (
                     SELECT * FROM unnest($6::text[], $7::text[], $8::text[], $9::text[], $10::text[])
                         WITH ORDINALITY AS p (platform, chat_id, thread_id, body, key, n)
                 ), kept AS (
                     INSERT INTO deliveries (platform, chat_id, thread_id, body, key, next_at, created_at)
                     SELECT platform, chat_id, thread_id, body, key, $3, $3 FROM parts ORDER BY n
                     ON CONFLICT (key) DO NOTHING
                 ), done AS (UPDATE inbox SET state = 'done', reply = $2, done_at = $3 WHERE id = $1)
                 SELECT pg_notify($4, $5)",
                &[
                    &id,
                    &reply,
                    &now_ms(),
                    &crate::notice::CHANNEL,
                    &notice,
                    &platforms,
                    &chats,
                    &threads,
                    &bodies,
                    &keys,
                ],
            )
            .await
            .map_err(sql)?;
        Ok(())
    }

    pub(crate) async fn inbox_prune(&self, before: i64) -> Result<usize> {
        let client = self.client().await?;
        let n =
            client.exec("DELETE FROM inbox WHERE state = 'done' AND done_at < $1", &[&before]).await.map_err(sql)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
