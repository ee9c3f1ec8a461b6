//! The gateway's delivery ledger (table `deliveries`): every message the gateway sends to a chat
//! platform is written here first and marked sent once the platform acknowledged it, so an
//! outage or a crash loses nothing. A failed send is retried with a doubling delay
//! ([`RETRY_FIRST_MS`], at most [`RETRY_MAX_MS`]) until [`MAX_ATTEMPTS`]; then it is marked
//! failed and kept for `gateway status`.
//!
//! Each delivery has a caller-chosen `key` (say `turn-id:part`): queuing the same key twice
//! queues it once, so a turn replayed after a crash does not send its reply again. A send that
//! succeeded on the platform but crashed before [`Store::delivery_sent`] is sent again: delivery
//! is at least once.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use talaria_store::delivery::{Failed, NewDelivery};
//! let dir = tempfile::tempdir()?;
//! let store = talaria_store::Store::open(&dir.path().join("state.db"))?;
//! let new = NewDelivery { platform: "telegram", chat_id: "42", thread_id: None, body: "hello", key: "t1:0" };
//! let id = store.delivery_enqueue(&new).await?;
//! assert_eq!(store.delivery_enqueue(&new).await?, id, "queued once");
//! let due = store.deliveries_due("telegram", 10).await?;
//! assert_eq!(due[0].body, "hello");
//! assert_eq!(store.delivery_failed(id, "HTTP 502").await?, Failed::Retry { attempts: 1 });
//! assert!(store.deliveries_due("telegram", 10).await?.is_empty(), "not before its retry time");
//! assert!(store.delivery_next_at("telegram").await?.is_some_and(|at| at > 0));
//! assert_eq!(store.delivery_next_at("matrix").await?, None);
//! # Ok(())
//! # }
//! ```

use rusqlite::{OptionalExtension as _, params};

use crate::process::is_gone;
use crate::{Result, Store, now_ms};

/// Sends tried before a delivery is given up.
pub const MAX_ATTEMPTS: i64 = 8;
/// Wait before the first retry; each later one waits twice as long.
pub const RETRY_FIRST_MS: i64 = 1_000;
/// Longest wait between two tries.
pub const RETRY_MAX_MS: i64 = 5 * 60 * 1_000;
/// How long a webhook delivery id is remembered.
pub const WEBHOOK_MEMORY_MS: i64 = 24 * 60 * 60 * 1_000;

/// The ledger key of part `part` of cron run `run`'s answer.
pub fn cron_key(run: i64, part: usize) -> String {
    format!("{CRON_KEY_PREFIX}{run}:{part}")
}

/// Keys of scheduled jobs' answers start with this.
pub const CRON_KEY_PREFIX: &str = "cron:";

/// The cron run a ledger key belongs to.
pub(crate) fn cron_run_of(key: &str) -> Option<i64> {
    key.strip_prefix(CRON_KEY_PREFIX)?.split(':').next()?.parse().ok()
}

/// The columns a [`Delivery`] is read from.
pub(crate) const DELIVERY_COLUMNS: &str = "id, platform, chat_id, thread_id, body, attempts, key";

/// Which deliveries of platform `$1` may be claimed at `$2` (at most `$3`): of each chat, the
/// oldest pending one, when it is due and nobody holds it.
pub(crate) const CLAIMABLE: &str = "d.state = 'pending' AND d.platform = $1 AND d.next_at <= $2 AND d.claimed_until <= $2
    AND d.id = (SELECT MIN(e.id) FROM deliveries e WHERE e.state = 'pending' AND e.platform = $1 AND e.chat_id = d.chat_id)
    ORDER BY d.id LIMIT $3";

/// Who holds claims of platform `$1` at `$2`.
pub(crate) const CLAIMERS: &str = "SELECT DISTINCT claimed_by FROM deliveries
    WHERE state = 'pending' AND platform = $1 AND claimed_until > $2 AND claimed_by IS NOT NULL";
/// Free the claims of platform `$1` that `$2` holds.
pub(crate) const VOID_CLAIMS: &str =
    "UPDATE deliveries SET claimed_until = 0 WHERE state = 'pending' AND platform = $1 AND claimed_by = $2";

fn delivery(r: &rusqlite::Row<'_>) -> rusqlite::Result<Delivery> {
    Ok(Delivery {
        id: r.get(0)?,
        platform: r.get(1)?,
        chat_id: r.get(2)?,
        thread_id: r.get(3)?,
        body: r.get(4)?,
        attempts: r.get(5)?,
        key: r.get(6)?,
    })
}

/// A message to deliver.
#[derive(Debug, Clone, Copy)]
pub struct NewDelivery<'a> {
    pub platform: &'a str,
    pub chat_id: &'a str,
    pub thread_id: Option<&'a str>,
    /// What the adapter sends (the gateway's own encoding, e.g. JSON).
    pub body: &'a str,
    /// The same key is queued once.
    pub key: &'a str,
}

/// A delivery waiting to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: i64,
    pub platform: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub body: String,
    pub attempts: i64,
    /// What it was queued under.
    pub key: String,
}

/// What became of a failed send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// It will be tried again; `attempts` so far.
    Retry { attempts: i64 },
    /// Given up after [`MAX_ATTEMPTS`].
    GaveUp,
}

/// Deliveries by state, for `gateway status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub pending: i64,
    pub sent: i64,
    pub failed: i64,
}

impl Store {
    /// Queue `d` (once per key); returns its id.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn delivery_enqueue(&self, d: &NewDelivery<'_>) -> Result<i64> {
        if let Some(pg) = self.pg() {
            return pg.delivery_enqueue(d).await;
        }
        self.write(|tx| {
            tx.execute(
                "INSERT INTO deliveries (platform, chat_id, thread_id, body, key, next_at, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT (key) DO NOTHING",
                params![d.platform, d.chat_id, d.thread_id, d.body, d.key, now_ms()],
            )?;
            Ok(tx.query_row("SELECT id FROM deliveries WHERE key = ?1", params![d.key], |r| r.get(0))?)
        })
    }

    /// Up to `limit` deliveries of `platform` due now, oldest first.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn deliveries_due(&self, platform: &str, limit: usize) -> Result<Vec<Delivery>> {
        self.deliveries_due_at(platform, now_ms(), limit).await
    }

    /// [`Store::deliveries_due`] as of `at` (milliseconds since the epoch): what will be due then.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn deliveries_due_at(&self, platform: &str, at: i64, limit: usize) -> Result<Vec<Delivery>> {
        if let Some(pg) = self.pg() {
            return pg.deliveries_due_at(platform, at, limit).await;
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT id, platform, chat_id, thread_id, body, attempts, key FROM deliveries
             WHERE state = 'pending' AND platform = ?1 AND next_at <= ?2 ORDER BY id LIMIT ?3",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![platform, at, limit], delivery)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Claim up to `limit` deliveries of `platform` to send now, holding each for `hold` (then
    /// a process that died sending it leaves it to the others): of each chat, the oldest
    /// pending delivery when it is due and no process holds it. Processes sharing the ledger
    /// so send every delivery once, and a chat's in the order they were queued. Oldest first.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn deliveries_claim(
        &self,
        platform: &str,
        limit: usize,
        hold: std::time::Duration,
    ) -> Result<Vec<Delivery>> {
        let now = now_ms();
        let until = now.saturating_add(i64::try_from(hold.as_millis()).unwrap_or(i64::MAX));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let me = crate::process::me();
        if let Some(pg) = self.pg() {
            return pg.deliveries_claim(platform, now, until, limit, me).await;
        }
        self.write(|tx| {
            let mut held = tx.prepare_cached(CLAIMERS)?;
            let claimers = held.query_map(params![platform, now], |r| r.get::<_, String>(0))?;
            for gone in claimers.collect::<rusqlite::Result<Vec<_>>>()?.into_iter().filter(|c| is_gone(c)) {
                tx.execute(VOID_CLAIMS, params![platform, gone])?;
            }
            let mut stmt =
                tx.prepare_cached(&format!("SELECT {DELIVERY_COLUMNS} FROM deliveries d WHERE {CLAIMABLE}"))?;
            let rows = stmt.query_map(params![platform, now, limit], delivery)?;
            let due = rows.collect::<rusqlite::Result<Vec<_>>>()?;
            let mut claim =
                tx.prepare_cached("UPDATE deliveries SET claimed_until = ?2, claimed_by = ?3 WHERE id = ?1")?;
            for d in &due {
                claim.execute(params![d.id, until, me])?;
            }
            Ok(due)
        })
    }

    /// When the next pending delivery of `platform` comes due (milliseconds since the epoch;
    /// in the past when one is due now), if there is one.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn delivery_next_at(&self, platform: &str) -> Result<Option<i64>> {
        if let Some(pg) = self.pg() {
            return pg.delivery_next_at(platform).await;
        }
        let conn = self.conn()?;
        let mut stmt =
            conn.prepare_cached("SELECT MIN(next_at) FROM deliveries WHERE state = 'pending' AND platform = ?1")?;
        Ok(stmt.query_row(params![platform], |r| r.get(0))?)
    }

    /// The platform acknowledged delivery `id` as its message `sent_id`.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn delivery_sent(&self, id: i64, sent_id: &str) -> Result<()> {
        if let Some(pg) = self.pg() {
            return pg.delivery_sent(id, sent_id).await;
        }
        self.write(|tx| {
            let key: Option<String> = tx
                .query_row(
                    "UPDATE deliveries SET state = 'sent', sent_id = ?2, done_at = ?3 WHERE id = ?1 RETURNING key",
                    params![id, sent_id, now_ms()],
                    |r| r.get(0),
                )
                .optional()?;
            // A scheduled job's answer: its run learns it arrived.
            if let Some(run) = key.as_deref().and_then(cron_run_of) {
                tx.execute(
                    "UPDATE cron_runs SET delivery = 'sent' WHERE id = ?1 AND delivery LIKE 'queued%'",
                    params![run],
                )?;
            }
            Ok(())
        })
    }

    /// The deliveries queued under keys starting with `prefix`: (key, state, last error), in
    /// the order they were queued.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn deliveries_by_prefix(&self, prefix: &str) -> Result<Vec<(String, String, Option<String>)>> {
        if let Some(pg) = self.pg() {
            return pg.deliveries_by_prefix(prefix).await;
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT key, state, last_error FROM deliveries WHERE substr(key, 1, length(?1)) = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map(params![prefix], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Sending delivery `id` failed with `error`: schedule the next try, or give up. A delivery
    /// no longer pending (sent, or given up already) is left as it is.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn delivery_failed(&self, id: i64, error: &str) -> Result<Failed> {
        if let Some(pg) = self.pg() {
            return pg.delivery_failed(id, error).await;
        }
        self.write(|tx| {
            let attempts: Option<i64> = tx
                .query_row("SELECT attempts FROM deliveries WHERE id = ?1 AND state = 'pending'", params![id], |r| {
                    r.get(0)
                })
                .optional()?;
            let attempts = attempts.unwrap_or(MAX_ATTEMPTS - 1) + 1;
            let now = now_ms();
            if attempts >= MAX_ATTEMPTS {
                let key: Option<String> = tx
                    .query_row(
                        "UPDATE deliveries SET state = 'failed', attempts = ?2, last_error = ?3, done_at = ?4
                         WHERE id = ?1 AND state = 'pending' RETURNING key",
                        params![id, attempts, error, now],
                        |r| r.get(0),
                    )
                    .optional()?;
                // A scheduled job's answer (`cron:RUN:PART`): its run learns it was not delivered.
                if let Some(run) = key.as_deref().and_then(cron_run_of) {
                    crate::cron::mark_delivery_failed(tx, run, error)?;
                }
                return Ok(Failed::GaveUp);
            }
            let wait = RETRY_FIRST_MS.saturating_mul(1 << (attempts - 1).min(20)).min(RETRY_MAX_MS);
            tx.execute(
                "UPDATE deliveries SET attempts = ?2, last_error = ?3, next_at = ?4, claimed_until = 0
                 WHERE id = ?1 AND state = 'pending'",
                params![id, attempts, error, now + wait],
            )?;
            Ok(Failed::Retry { attempts })
        })
    }

    /// Record webhook delivery `id` on `route`; whether it was seen before (within the last
    /// [`WEBHOOK_MEMORY_MS`], older ids are forgotten as new ones arrive).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn webhook_seen(&self, route: &str, id: &str) -> Result<bool> {
        if let Some(pg) = self.pg() {
            return pg.webhook_seen(route, id).await;
        }
        self.write(|tx| {
            let now = now_ms();
            tx.execute("DELETE FROM webhook_seen WHERE seen_at < ?1", params![now - WEBHOOK_MEMORY_MS])?;
            let added = tx.execute(
                "INSERT INTO webhook_seen (route, delivery_id, seen_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (route, delivery_id) DO NOTHING",
                params![route, id, now],
            )?;
            Ok(added == 0)
        })
    }

    /// How many deliveries are pending, sent and failed.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn delivery_counts(&self) -> Result<Counts> {
        if let Some(pg) = self.pg() {
            return pg.delivery_counts().await;
        }
        let conn = self.conn()?;
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
