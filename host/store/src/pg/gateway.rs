//! The gateway's state on PostgreSQL, as [`crate::pairing`] and [`crate::delivery`] describe it:
//! pairings and their codes, the delivery ledger (queued once per key, retried with backoff,
//! given up at last; a scheduled job's run learns what became of its answer) and the webhook
//! ids seen. Writes that read first hold a transaction-scoped advisory lock (a platform's
//! pairings) or a row lock (a delivery), so gateway processes on several machines agree.

use tokio_postgres::Row;

use super::{Cached as _, Pg, sql};
use crate::delivery::{
    CLAIMABLE, CLAIMERS, Counts, DELIVERY_COLUMNS, Delivery, Failed, MAX_ATTEMPTS, NewDelivery, RETRY_FIRST_MS,
    RETRY_MAX_MS, RUN_SENDING, RUN_SENT, TROUBLED, Trouble, VOID_CLAIMS, WEBHOOK_MEMORY_MS, cron_run_of, run_keys,
};
use crate::pairing::{MAX_PENDING, PAIRING_TTL_MS, Pairing, Request};
use crate::process::is_gone;
use crate::{Error, Result, now_ms};

const PAIRING_COLUMNS: &str = "platform, user_id, user_name, code, requested_at, expires_at, approved_at";

fn delivery(r: &Row) -> Delivery {
    Delivery {
        id: r.get(0),
        platform: r.get(1),
        chat_id: r.get(2),
        thread_id: r.get(3),
        body: r.get(4),
        attempts: r.get(5),
        key: r.get(6),
        orphaned: r.get(7),
    }
}

fn pairing(r: &Row) -> Pairing {
    Pairing {
        platform: r.get(0),
        user_id: r.get(1),
        user_name: r.get(2),
        code: r.get(3),
        requested_at: r.get(4),
        expires_at: r.get(5),
        approved_at: r.get(6),
    }
}

impl Pg {
    pub(crate) async fn pairing_request(
        &self,
        platform: &str,
        user_id: &str,
        user_name: &str,
        code: &str,
    ) -> Result<Request> {
        let (platform, user_id, user_name, code) =
            (platform.to_string(), user_id.to_string(), user_name.to_string(), code.to_string());
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        tx.exec("SELECT pg_advisory_xact_lock(hashtextextended('talaria-pairing:' || $1, 0))", &[&platform])
            .await
            .map_err(sql)?;
        let now = now_ms();
        let row = tx
            .qopt(
                "SELECT code, expires_at, approved_at FROM pairings WHERE platform = $1 AND user_id = $2",
                &[&platform, &user_id],
            )
            .await
            .map_err(sql)?;
        if let Some(r) = row {
            let (old, expires, approved): (Option<String>, i64, Option<i64>) = (r.get(0), r.get(1), r.get(2));
            match (old, approved) {
                (_, Some(_)) => return Ok(Request::Approved),
                (Some(old), None) if expires > now => return Ok(Request::Pending(old)),
                _ => {}
            }
        }
        let waiting: i64 = tx
            .q1(
                "SELECT count(*)::bigint FROM pairings WHERE platform = $1 AND approved_at IS NULL AND expires_at > $2",
                &[&platform, &now],
            )
            .await
            .map_err(sql)?
            .get(0);
        if waiting >= MAX_PENDING {
            return Ok(Request::TooMany);
        }
        tx.exec(
            "INSERT INTO pairings (platform, user_id, user_name, code, requested_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (platform, user_id) DO UPDATE SET
                 user_name = excluded.user_name, code = excluded.code,
                 requested_at = excluded.requested_at, expires_at = excluded.expires_at",
            &[&platform, &user_id, &user_name, &code, &now, &(now + PAIRING_TTL_MS)],
        )
        .await
        .map_err(sql)?;
        tx.commit().await.map_err(sql)?;
        Ok(Request::New(code))
    }

    pub(crate) async fn pairing_approve(&self, code: &str) -> Result<Pairing> {
        let client = self.client().await?;
        // One statement: of two approvals of one code, one finds it.
        let row = client
            .qopt(
                &format!(
                    "UPDATE pairings SET approved_at = $2, code = NULL
                     WHERE code = $1 AND approved_at IS NULL AND expires_at > $2
                     RETURNING {PAIRING_COLUMNS}"
                ),
                &[&code, &now_ms()],
            )
            .await
            .map_err(sql)?;
        row.as_ref().map(pairing).ok_or(Error::PairingNotFound { code: code.to_string() })
    }

    pub(crate) async fn pairing_revoke(&self, platform: &str, user_id: &str) -> Result<bool> {
        let client = self.client().await?;
        let n = client
            .exec("DELETE FROM pairings WHERE platform = $1 AND user_id = $2", &[&platform, &user_id])
            .await
            .map_err(sql)?;
        Ok(n > 0)
    }

    pub(crate) async fn is_paired(&self, platform: &str, user_id: &str) -> Result<bool> {
        let client = self.client().await?;
        let row = client
            .qopt(
                "SELECT 1 FROM pairings WHERE platform = $1 AND user_id = $2 AND approved_at IS NOT NULL",
                &[&platform, &user_id],
            )
            .await
            .map_err(sql)?;
        Ok(row.is_some())
    }

    pub(crate) async fn pairings(&self) -> Result<Vec<Pairing>> {
        let client = self.client().await?;
        let rows = client
            .q(&format!("SELECT {PAIRING_COLUMNS} FROM pairings ORDER BY requested_at DESC"), &[])
            .await
            .map_err(sql)?;
        Ok(rows.iter().map(pairing).collect())
    }

    pub(crate) async fn delivery_enqueue(&self, d: &NewDelivery<'_>) -> Result<i64> {
        let (platform, chat, thread, body, key) = (
            d.platform.to_string(),
            d.chat_id.to_string(),
            d.thread_id.map(String::from),
            d.body.to_string(),
            d.key.to_string(),
        );
        let client = self.client().await?;
        let now = now_ms();
        // One statement: the new row's id, or the id of the row kept under `key` before.
        let kept = client
            .qopt(
                "WITH new AS (
                     INSERT INTO deliveries (platform, chat_id, thread_id, body, key, next_at, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (key) DO NOTHING RETURNING id
                 )
                 SELECT id FROM new UNION ALL SELECT id FROM deliveries WHERE key = $5 LIMIT 1",
                &[&platform, &chat, &thread, &body, &key, &now],
            )
            .await
            .map_err(sql)?;
        if let Some(row) = kept {
            return Ok(row.get(0));
        }
        // Another process kept it while this statement ran: its row is visible now.
        Ok(client.q1("SELECT id FROM deliveries WHERE key = $1", &[&key]).await.map_err(sql)?.get(0))
    }

    pub(crate) async fn deliveries_due_at(&self, platform: &str, at: i64, limit: usize) -> Result<Vec<Delivery>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let rows = client
            .q(
                &format!(
                    "SELECT {DELIVERY_COLUMNS} FROM deliveries
                     WHERE state = 'pending' AND platform = $1 AND next_at <= $2 ORDER BY id LIMIT $3"
                ),
                &[&platform, &at, &limit],
            )
            .await
            .map_err(sql)?;
        Ok(rows.iter().map(delivery).collect())
    }

    pub(crate) async fn deliveries_claim(
        &self,
        platform: &str,
        now: i64,
        until: i64,
        limit: i64,
        me: &str,
    ) -> Result<Vec<Delivery>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        // Claims of one platform queue: two processes never see the same chat free.
        tx.exec("SELECT pg_advisory_xact_lock(hashtextextended('talaria-deliveries:' || $1, 0))", &[&platform])
            .await
            .map_err(sql)?;
        for row in tx.q(CLAIMERS, &[&platform, &now]).await.map_err(sql)? {
            let claimer: String = row.get(0);
            if is_gone(&claimer) {
                tx.exec(VOID_CLAIMS, &[&platform, &claimer]).await.map_err(sql)?;
            }
        }
        let rows = tx
            .q(
                &format!(
                    // RETURNING sees the new claimer: whether there was one before comes
                    // from the rows as they were.
                    "WITH c AS (SELECT d.id, d.claimed_by IS NOT NULL AS orphaned FROM deliveries d WHERE {CLAIMABLE} LIMIT $3)
                     UPDATE deliveries SET claimed_until = $4, claimed_by = $5 FROM c WHERE deliveries.id = c.id
                     RETURNING deliveries.id, platform, chat_id, thread_id, body, attempts, key, c.orphaned"
                ),
                &[&platform, &now, &limit, &until, &me],
            )
            .await
            .map_err(sql)?;
        let mut due: Vec<Delivery> = rows.iter().map(delivery).collect();
        for run in due.iter().filter_map(|d| cron_run_of(&d.key)) {
            tx.exec(RUN_SENDING, &[&run]).await.map_err(sql)?;
        }
        tx.commit().await.map_err(sql)?;
        due.sort_by_key(|d| d.id);
        Ok(due)
    }

    pub(crate) async fn delivery_next_at(&self, platform: &str) -> Result<Option<i64>> {
        let client = self.client().await?;
        let row = client
            .q1("SELECT MIN(next_at) FROM deliveries WHERE state = 'pending' AND platform = $1", &[&platform])
            .await
            .map_err(sql)?;
        Ok(row.get(0))
    }

    pub(crate) async fn delivery_sent(&self, id: i64, sent_id: &str) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        let key: Option<String> = tx
            .qopt(
                "UPDATE deliveries SET state = 'sent', sent_id = $2, done_at = $3 WHERE id = $1 RETURNING key",
                &[&id, &sent_id, &now_ms()],
            )
            .await
            .map_err(sql)?
            .map(|r| r.get(0));
        if let Some(run) = key.as_deref().and_then(cron_run_of) {
            tx.exec(RUN_SENT, &[&run, &run_keys(run)]).await.map_err(sql)?;
        }
        tx.commit().await.map_err(sql)
    }

    pub(crate) async fn deliveries_by_prefix(&self, prefix: &str) -> Result<Vec<(String, String, Option<String>)>> {
        let client = self.client().await?;
        let rows = client
            .q("SELECT key, state, last_error FROM deliveries WHERE starts_with(key, $1) ORDER BY id", &[&prefix])
            .await
            .map_err(sql)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
    }

    pub(crate) async fn delivery_failed(&self, id: i64, error: &str) -> Result<Failed> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        let attempts: Option<i64> = tx
            .qopt("SELECT attempts FROM deliveries WHERE id = $1 AND state = 'pending' FOR UPDATE", &[&id])
            .await
            .map_err(sql)?
            .map(|r| r.get(0));
        let attempts = attempts.unwrap_or(MAX_ATTEMPTS - 1) + 1;
        let now = now_ms();
        if attempts >= MAX_ATTEMPTS {
            let key: Option<String> = tx
                .qopt(
                    "UPDATE deliveries SET state = 'failed', attempts = $2, last_error = $3, done_at = $4
                     WHERE id = $1 AND state = 'pending' RETURNING key",
                    &[&id, &attempts, &error, &now],
                )
                .await
                .map_err(sql)?
                .map(|r| r.get(0));
            if let Some(run) = key.as_deref().and_then(cron_run_of) {
                super::cron::mark_delivery_failed(&tx, run, error).await?;
            }
            tx.commit().await.map_err(sql)?;
            return Ok(Failed::GaveUp);
        }
        let wait = RETRY_FIRST_MS.saturating_mul(1 << (attempts - 1).min(20)).min(RETRY_MAX_MS);
        tx.exec(
            "UPDATE deliveries SET attempts = $2, last_error = $3, next_at = $4, claimed_until = 0, claimed_by = NULL
                 WHERE id = $1 AND state = 'pending'",
            &[&id, &attempts, &error, &(now + wait)],
        )
        .await
        .map_err(sql)?;
        tx.commit().await.map_err(sql)?;
        Ok(Failed::Retry { attempts })
    }

    pub(crate) async fn webhook_seen(&self, route: &str, id: &str) -> Result<bool> {
        let client = self.client().await?;
        let now = now_ms();
        client.exec("DELETE FROM webhook_seen WHERE seen_at < $1", &[&(now - WEBHOOK_MEMORY_MS)]).await.map_err(sql)?;
        let added = client
            .exec(
                "INSERT INTO webhook_seen (route, delivery_id, seen_at) VALUES ($1, $2, $3)
                 ON CONFLICT (route, delivery_id) DO NOTHING",
                &[&route, &id, &now],
            )
            .await
            .map_err(sql)?;
        Ok(added == 0)
    }

    pub(crate) async fn deliveries_troubled(&self, limit: usize) -> Result<Vec<Trouble>> {
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let query = format!("{TROUBLED} LIMIT $1");
        let rows = client.q(&query, &[&limit]).await.map_err(sql)?;
        Ok(rows
            .iter()
            .map(|r| Trouble {
                id: r.get(0),
                platform: r.get(1),
                chat_id: r.get(2),
                state: r.get(3),
                attempts: r.get(4),
                last_error: r.get::<_, Option<String>>(5).unwrap_or_default(),
                created_at: r.get(6),
                at: r.get(7),
            })
            .collect())
    }

    pub(crate) async fn delivery_counts(&self) -> Result<Counts> {
        let client = self.client().await?;
        let rows = client.q("SELECT state, count(*)::bigint FROM deliveries GROUP BY state", &[]).await.map_err(sql)?;
        let mut counts = Counts::default();
        for r in &rows {
            let (state, n): (String, i64) = (r.get(0), r.get(1));
            match state.as_str() {
                "pending" => counts.pending = n,
                "sent" => counts.sent = n,
                _ => counts.failed += n,
            }
        }
        Ok(counts)
    }
}
