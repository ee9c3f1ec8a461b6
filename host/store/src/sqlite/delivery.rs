//! The delivery ledger and the webhook ids seen, on SQLite, as [`crate::delivery`] describes
//! them: every write that reads first is one `BEGIN IMMEDIATE` transaction, so gateway processes
//! sharing the file agree on who sends what.

use rusqlite::{OptionalExtension as _, params};

use super::cron::mark_delivery_failed;
use super::{Cached as _, Sqlite};
use crate::delivery::{
    CLAIMABLE, CLAIMERS, Counts, DELIVERY_COLUMNS, Delivery, Failed, MAX_ATTEMPTS, NewDelivery, RETRY_FIRST_MS,
    RETRY_MAX_MS, RUN_SENDING, RUN_SENT, TROUBLED, Trouble, VOID_CLAIMS, WEBHOOK_MEMORY_MS, cron_run_of, run_keys,
};
use crate::process::is_gone;
use crate::{Result, now_ms};

fn delivery(r: &rusqlite::Row<'_>) -> rusqlite::Result<Delivery> {
    Ok(Delivery {
        id: r.get(0)?,
        platform: r.get(1)?,
        chat_id: r.get(2)?,
        thread_id: r.get(3)?,
        body: r.get(4)?,
        attempts: r.get(5)?,
        key: r.get(6)?,
        orphaned: r.get(7)?,
    })
}

/// Keep `d` at `now`, unless a delivery is kept under its key already.
pub(super) fn enqueue(tx: &rusqlite::Connection, d: &NewDelivery<'_>, now: i64) -> rusqlite::Result<()> {
    tx.run(
        "INSERT INTO deliveries (platform, chat_id, thread_id, body, key, next_at, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT (key) DO NOTHING",
        params![d.platform, d.chat_id, d.thread_id, d.body, d.key, now],
    )?;
    Ok(())
}

/// The deliveries [`CLAIMABLE`] names, `$3` at most.
pub(super) fn claimable() -> String {
    format!("SELECT {DELIVERY_COLUMNS} FROM deliveries d WHERE {CLAIMABLE} LIMIT +$3")
}

impl Sqlite {
    pub(crate) fn delivery_enqueue(&self, d: &NewDelivery<'_>) -> Result<i64> {
        self.write(|tx| {
            enqueue(tx, d, now_ms())?;
            Ok(tx.one("SELECT id FROM deliveries WHERE key = ?1", params![d.key], |r| r.get(0))?)
        })
    }

    pub(crate) fn deliveries_due_at(&self, platform: &str, at: i64, limit: usize) -> Result<Vec<Delivery>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM deliveries
                 WHERE state = 'pending' AND platform = ?1 AND next_at <= ?2 ORDER BY id LIMIT +?3"
        ))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![platform, at, limit], delivery)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn deliveries_claim(
        &self,
        platform: &str,
        now: i64,
        until: i64,
        limit: i64,
        me: &str,
    ) -> Result<Vec<Delivery>> {
        self.write(|tx| {
            let mut held = tx.prepare_cached(CLAIMERS)?;
            let claimers = held.query_map(params![platform, now], |r| r.get::<_, String>(0))?;
            for gone in claimers.collect::<rusqlite::Result<Vec<_>>>()?.into_iter().filter(|c| is_gone(c)) {
                tx.run(VOID_CLAIMS, params![platform, gone])?;
            }
            let mut stmt = tx.prepare_cached(&claimable())?;
            let rows = stmt.query_map(params![platform, now, limit], delivery)?;
            let due = rows.collect::<rusqlite::Result<Vec<_>>>()?;
            let mut claim =
                tx.prepare_cached("UPDATE deliveries SET claimed_until = ?2, claimed_by = ?3 WHERE id = ?1")?;
            for d in &due {
                claim.execute(params![d.id, until, me])?;
                if let Some(run) = cron_run_of(&d.key) {
                    tx.run(RUN_SENDING, params![run])?;
                }
            }
            Ok(due)
        })
    }

    pub(crate) fn delivery_next_at(&self, platform: &str) -> Result<Option<i64>> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT MIN(next_at) FROM deliveries WHERE state = 'pending' AND platform = ?1")?;
        Ok(stmt.query_row(params![platform], |r| r.get(0))?)
    }

    pub(crate) fn delivery_sent(&self, id: i64, sent_id: &str) -> Result<()> {
        self.write(|tx| {
            let key: Option<String> = tx
                .one(
                    "UPDATE deliveries SET state = 'sent', sent_id = ?2, done_at = ?3 WHERE id = ?1 RETURNING key",
                    params![id, sent_id, now_ms()],
                    |r| r.get(0),
                )
                .optional()?;
            // A scheduled job's answer: its run learns it arrived.
            if let Some(run) = key.as_deref().and_then(cron_run_of) {
                // Numbered as SQLite numbers them: `$2` comes first in the text.
                tx.run(&RUN_SENT.replace('$', "?"), params![run, run_keys(run)])?;
            }
            Ok(())
        })
    }

    pub(crate) fn deliveries_by_prefix(&self, prefix: &str) -> Result<Vec<(String, String, Option<String>)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT key, state, last_error FROM deliveries WHERE substr(key, 1, length(?1)) = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map(params![prefix], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn delivery_failed(&self, id: i64, error: &str) -> Result<Failed> {
        self.write(|tx| {
            let attempts: Option<i64> = tx
                .one("SELECT attempts FROM deliveries WHERE id = ?1 AND state = 'pending'", params![id], |r| {
                    r.get(0)
                })
                .optional()?;
            let attempts = attempts.unwrap_or(MAX_ATTEMPTS - 1) + 1;
            let now = now_ms();
            if attempts >= MAX_ATTEMPTS {
                let key: Option<String> = tx
                    .one(
                        "UPDATE deliveries SET state = 'failed', attempts = ?2, last_error = ?3, done_at = ?4
                         WHERE id = ?1 AND state = 'pending' RETURNING key",
                        params![id, attempts, error, now],
                        |r| r.get(0),
                    )
                    .optional()?;
                // A scheduled job's answer (`cron:RUN:PART`): its run learns it was not delivered.
                if let Some(run) = key.as_deref().and_then(cron_run_of) {
                    mark_delivery_failed(tx, run, error)?;
                }
                return Ok(Failed::GaveUp);
            }
            let wait = RETRY_FIRST_MS.saturating_mul(1 << (attempts - 1).min(20)).min(RETRY_MAX_MS);
            tx.run(
                "UPDATE deliveries SET attempts = ?2, last_error = ?3, next_at = ?4, claimed_until = 0, claimed_by = NULL
                 WHERE id = ?1 AND state = 'pending'",
                params![id, attempts, error, now + wait],
            )?;
            Ok(Failed::Retry { attempts })
        })
    }

    pub(crate) fn webhook_seen(&self, route: &str, id: &str) -> Result<bool> {
        self.write(|tx| {
            let now = now_ms();
            tx.run("DELETE FROM webhook_seen WHERE seen_at < ?1", params![now - WEBHOOK_MEMORY_MS])?;
            let added = tx.run(
                "INSERT INTO webhook_seen (route, delivery_id, seen_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (route, delivery_id) DO NOTHING",
                params![route, id, now],
            )?;
            Ok(added == 0)
        })
    }

    pub(crate) fn deliveries_troubled(&self, limit: usize) -> Result<Vec<Trouble>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!("{TROUBLED} LIMIT +?1"))?;
        let rows = stmt.query_map(params![i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
            Ok(Trouble {
                id: r.get(0)?,
                platform: r.get(1)?,
                chat_id: r.get(2)?,
                state: r.get(3)?,
                attempts: r.get(4)?,
                last_error: r.get::<_, Option<String>>(5)?.unwrap_or_default(),
                created_at: r.get(6)?,
                at: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn delivery_counts(&self) -> Result<Counts> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT state, count(*) FROM deliveries GROUP BY state")?;
        let mut counts = Counts::default();
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (state, n) = row?;
            match state.as_str() {
                "pending" => counts.pending = n,
                "sent" => counts.sent = n,
                _ => counts.failed += n,
            }
        }
        Ok(counts)
    }
}
