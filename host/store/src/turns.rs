//! What each turn took: when it ended, how long it ran and the tokens it used, by source and
//! model. Kept for the dashboard's usage and latency charts (and whoever reads usage over
//! time); a session's totals stay on the session.
//!
//! ```
//! # async fn demo(store: &talaria_store::Store) -> talaria_store::Result<()> {
//! use talaria_store::turns::TurnStat;
//! let stat = TurnStat { session_id: "s1".into(), source: "cli".into(), model: "m".into(),
//!     ended_at: 1_700_000_000_000, duration_ms: 850, outcome: "completed".into(),
//!     usage: Default::default(), api_calls: 1 };
//! store.record_turns(&[stat]).await?;
//! assert_eq!(store.turns_since(0).await?.len(), 1);
//! # Ok(()) }
//! ```

use talaria_protocol::Usage;

use crate::{Engine, Result, Store};

/// One ended turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnStat {
    pub session_id: String,
    /// The session's source (`cli`, `acp`, `gateway`, `cron`, `api`, ...).
    pub source: String,
    /// The model that answered (its name, as the provider knows it).
    pub model: String,
    /// Unix milliseconds.
    pub ended_at: i64,
    pub duration_ms: i64,
    /// How it ended: `completed`, `interrupted`, `failed`, ...
    pub outcome: String,
    /// Every model call of the turn.
    pub usage: Usage,
    pub api_calls: u32,
}

/// The number `n`, as the databases keep it.
pub(crate) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store {
    /// Keep `turns`, in one transaction.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn record_turns(&self, turns: &[TurnStat]) -> Result<()> {
        if turns.is_empty() {
            return Ok(());
        }
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.record_turns(turns),
            Engine::Postgres(pg) => pg.record_turns(turns).await,
        }
    }

    /// The turns that ended at or after `since` (Unix milliseconds), oldest first.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn turns_since(&self, since: i64) -> Result<Vec<TurnStat>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.turns_since(since),
            Engine::Postgres(pg) => pg.turns_since(since).await,
        }
    }
}
