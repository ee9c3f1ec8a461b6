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

use crate::{Engine, Result, Store, now_ms};

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

/// A scheduled job's answer is claimed for sending: its run's history says `sending` (`$1`:
/// the run).
pub(crate) const RUN_SENDING: &str =
    "UPDATE cron_runs SET delivery = 'sending' WHERE id = $1 AND (delivery LIKE 'queued%' OR delivery IS NULL)";

/// A part of a scheduled job's answer was sent (`$1`: the run, `$2`: its keys' `LIKE`
/// pattern): the run's history says `sent` once no part is left to send.
pub(crate) const RUN_SENT: &str = "UPDATE cron_runs SET delivery = CASE
        WHEN EXISTS (SELECT 1 FROM deliveries WHERE key LIKE $2 AND state = 'pending') THEN 'sending'
        ELSE 'sent' END
    WHERE id = $1 AND (delivery LIKE 'queued%' OR delivery = 'sending' OR delivery IS NULL)";

/// The `LIKE` pattern of the ledger keys of cron run `run`'s answer.
pub(crate) fn run_keys(run: i64) -> String {
    format!("{CRON_KEY_PREFIX}{run}:%")
}

/// The cron run a ledger key belongs to.
pub(crate) fn cron_run_of(key: &str) -> Option<i64> {
    key.strip_prefix(CRON_KEY_PREFIX)?.split(':').next()?.parse().ok()
}

/// The columns a [`Delivery`] is read from.
/// The last says whether a process claimed it before and ended without recording how its send
/// went (a recorded failure forgets its claimer).
pub(crate) const DELIVERY_COLUMNS: &str =
    "id, platform, chat_id, thread_id, body, attempts, key, claimed_by IS NOT NULL";

/// Which deliveries of platform `$1` may be claimed at `$2`: of each chat, the oldest pending
/// one, when it is due and nobody holds it; oldest first (each engine adds its `LIMIT $3`).
pub(crate) const CLAIMABLE: &str = "d.state = 'pending' AND d.platform = $1 AND d.next_at <= $2 AND d.claimed_until <= $2
    AND d.id = (SELECT MIN(e.id) FROM deliveries e WHERE e.state = 'pending' AND e.platform = $1 AND e.chat_id = d.chat_id)
    ORDER BY d.id";

/// Who holds claims of platform `$1` at `$2`.
pub(crate) const CLAIMERS: &str = "SELECT DISTINCT claimed_by FROM deliveries
    WHERE state = 'pending' AND platform = $1 AND claimed_until > $2 AND claimed_by IS NOT NULL";
/// Free the claims of platform `$1` that `$2` holds.
pub(crate) const VOID_CLAIMS: &str =
    "UPDATE deliveries SET claimed_until = 0 WHERE state = 'pending' AND platform = $1 AND claimed_by = $2";

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
    /// A process claimed it before and ended (or hung past its claim) without recording how
    /// the send went: the platform may have taken it already, and sending it again may show
    /// it twice (no platform can be asked whether a message arrived).
    pub orphaned: bool,
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

/// A delivery that failed, or is waiting to be tried again, for `gateway status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trouble {
    pub id: i64,
    pub platform: String,
    pub chat_id: String,
    /// `failed` (given up) or `pending` (to be tried again at `next_at`).
    pub state: String,
    pub attempts: i64,
    /// What the platform (or the adapter) said the last time.
    pub last_error: String,
    /// When it was queued, in milliseconds since the epoch.
    pub created_at: i64,
    /// When it is tried again (pending) or was given up (failed), in milliseconds.
    pub at: i64,
}

/// What [`Store::deliveries_troubled`] reads: the newest failed or retried deliveries first.
pub(crate) const TROUBLED: &str = "SELECT id, platform, chat_id, state, attempts, last_error, created_at,
        COALESCE(done_at, next_at)
    FROM deliveries WHERE state = 'failed' OR (state = 'pending' AND last_error IS NOT NULL)
    ORDER BY id DESC";

impl Store {
    /// Queue `d` (once per key); returns its id.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn delivery_enqueue(&self, d: &NewDelivery<'_>) -> Result<i64> {
        self.traced("delivery_enqueue", async {
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.delivery_enqueue(d),
                Engine::Postgres(pg) => pg.delivery_enqueue(d).await,
            }
        })
        .await
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
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.deliveries_due_at(platform, at, limit),
            Engine::Postgres(pg) => pg.deliveries_due_at(platform, at, limit).await,
        }
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
        self.traced("deliveries_claim", async {
            let now = now_ms();
            let until = now.saturating_add(i64::try_from(hold.as_millis()).unwrap_or(i64::MAX));
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let me = crate::process::me();
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.deliveries_claim(platform, now, until, limit, me),
                Engine::Postgres(pg) => pg.deliveries_claim(platform, now, until, limit, me).await,
            }
        })
        .await
    }

    /// When the next pending delivery of `platform` comes due (milliseconds since the epoch;
    /// in the past when one is due now), if there is one.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn delivery_next_at(&self, platform: &str) -> Result<Option<i64>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.delivery_next_at(platform),
            Engine::Postgres(pg) => pg.delivery_next_at(platform).await,
        }
    }

    /// The platform acknowledged delivery `id` as its message `sent_id`.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn delivery_sent(&self, id: i64, sent_id: &str) -> Result<()> {
        self.traced("delivery_sent", async {
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.delivery_sent(id, sent_id),
                Engine::Postgres(pg) => pg.delivery_sent(id, sent_id).await,
            }
        })
        .await
    }

    /// The deliveries queued under keys starting with `prefix`: (key, state, last error), in
    /// the order they were queued.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn deliveries_by_prefix(&self, prefix: &str) -> Result<Vec<(String, String, Option<String>)>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.deliveries_by_prefix(prefix),
            Engine::Postgres(pg) => pg.deliveries_by_prefix(prefix).await,
        }
    }

    /// Sending delivery `id` failed with `error`: schedule the next try, or give up. A delivery
    /// no longer pending (sent, or given up already) is left as it is.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn delivery_failed(&self, id: i64, error: &str) -> Result<Failed> {
        self.traced("delivery_failed", async {
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.delivery_failed(id, error),
                Engine::Postgres(pg) => pg.delivery_failed(id, error).await,
            }
        })
        .await
    }

    /// Record webhook delivery `id` on `route`; whether it was seen before (within the last
    /// [`WEBHOOK_MEMORY_MS`], older ids are forgotten as new ones arrive).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn webhook_seen(&self, route: &str, id: &str) -> Result<bool> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.webhook_seen(route, id),
            Engine::Postgres(pg) => pg.webhook_seen(route, id).await,
        }
    }

    /// The `limit` newest deliveries that failed for good or wait to be tried again after a
    /// failure, with the last error each got.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn deliveries_troubled(&self, limit: usize) -> Result<Vec<Trouble>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.deliveries_troubled(limit),
            Engine::Postgres(pg) => pg.deliveries_troubled(limit).await,
        }
    }

    /// How many deliveries are pending, sent and failed.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn delivery_counts(&self) -> Result<Counts> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.delivery_counts(),
            Engine::Postgres(pg) => pg.delivery_counts().await,
        }
    }
}
