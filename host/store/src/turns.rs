//! What each turn took: when it ended, how long it ran and the tokens it used, by source and
//! model, who it was for (a chat user, a scheduled job) and what it cost. Kept for the
//! dashboard's usage and latency charts, `talaria usage` and the spending limits of
//! `[budget]` ([`Store::spent`]); a session's totals stay on the session.
//!
//! ```
//! # async fn demo(store: &talaria_store::Store) -> talaria_store::Result<()> {
//! use talaria_store::turns::TurnStat;
//! let stat = TurnStat { session_id: "s1".into(), source: "cli".into(), model: "m".into(),
//!     ended_at: 1_700_000_000_000, duration_ms: 850, outcome: "completed".into(),
//!     usage: talaria_protocol::Usage { input_tokens: 900, output_tokens: 100, ..Default::default() },
//!     api_calls: 1, sender: None, job: None, cost: Some(0.25) };
//! store.record_turns(&[stat]).await?;
//! assert_eq!(store.turns_since(0).await?.len(), 1);
//! let spent = store.spent(talaria_store::turns::Spender::Source("cli"), 0).await?;
//! assert_eq!((spent.tokens, spent.cost), (1_000, 0.25));
//! # Ok(()) }
//! ```

use talaria_protocol::Usage;

use crate::{Engine, Result, Store};

/// One ended turn.
#[derive(Debug, Clone, PartialEq)]
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
    /// Who sent the message, where several people reach the agent (`PLATFORM:USER_ID`).
    pub sender: Option<String>,
    /// The scheduled job the turn ran for.
    pub job: Option<String>,
    /// US dollars, when the model's price is known.
    pub cost: Option<f64>,
}

/// Whose turns a spend counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spender<'a> {
    /// Every turn.
    All,
    /// The turns of one source (`cli`, `gateway`, ...).
    Source(&'a str),
    /// The turns one chat-platform user sent.
    Sender(&'a str),
    /// The turns of one scheduled job.
    Job(&'a str),
}

impl Spender<'_> {
    /// The column it matches, and the value (none: every turn).
    pub(crate) fn column(self) -> Option<(&'static str, String)> {
        match self {
            Self::All => None,
            Self::Source(s) => Some(("source", s.to_string())),
            Self::Sender(s) => Some(("sender", s.to_string())),
            Self::Job(s) => Some(("job", s.to_string())),
        }
    }
}

/// What some turns spent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    /// Input and output tokens.
    pub tokens: u64,
    /// US dollars, over the turns whose price was known.
    pub cost: f64,
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
        self.traced("record_turns", async {
            if turns.is_empty() {
                return Ok(());
            }
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.record_turns(turns),
                Engine::Postgres(pg) => pg.record_turns(turns).await,
            }
        })
        .await
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

    /// What the turns of `who` that ended at or after `since` (Unix milliseconds) spent.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn spent(&self, who: Spender<'_>, since: i64) -> Result<Spent> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.spent(who, since),
            Engine::Postgres(pg) => pg.spent(who, since).await,
        }
    }
}
