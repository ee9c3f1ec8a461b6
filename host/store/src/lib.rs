//! talaria's state database, on one of two engines chosen when it opens: a SQLite file
//! ([`Store::open`], `$TALARIA_HOME/state.db` in WAL mode; the default) or a PostgreSQL database
//! that several processes and machines share ([`Store::connect`], `[store] url`).
//!
//! It holds the sessions (with their lineage: a subagent's session names its parent), every
//! message of every session, two full-text indexes over those messages (words, and substrings for
//! CJK text and code fragments), each plugin's private key-value data, and the work several
//! processes share: leases ([`lease`]), scheduled jobs and their runs ([`cron`]), the gateway's
//! inbox ([`inbox`]) and delivery ledger ([`delivery`]), pairings ([`pairing`]). Schema changes
//! are numbered migrations applied on open ([`schema`]).
//!
//! The main type is [`Store`]. Its methods are async, and live beside the concept they serve:
//! sessions and messages in [`sessions`], search in [`search`], plugin data in [`kv`]. Each
//! checks what both engines would and hands the work to the engine chosen at open, whose code
//! is in a module of its own (`sqlite/`, `pg/`). PostgreSQL's methods run on the caller's
//! tokio runtime, on pooled connections. On SQLite, one connection per `Store`, shared behind a
//! mutex, and its methods run in place: every operation is a short statement or transaction. Several processes may open the same file at once (the CLI, a gateway, cron):
//! writes take the write lock up front (`BEGIN IMMEDIATE`) and are retried with jitter while
//! another writer holds it.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), talaria_store::Error> {
//! use talaria_protocol::Message;
//! use talaria_store::{NewSession, SearchQuery, Store};
//!
//! let store = Store::open(std::path::Path::new("/tmp/state.db"))?;
//! let id = Store::new_session_id();
//! store.create_session(&NewSession {
//!     id: id.clone(),
//!     source: "cli".into(),
//!     model: "gpt-5".into(),
//!     provider: "openai".into(),
//!     system_prompt: "You are talaria.".into(),
//!     parent_id: None,
//!     cwd: "/home/me/project".into(),
//! }).await?;
//! store.append_messages(&id, &[Message::user("Where is Lisbon?"), Message::assistant("In Portugal.")]).await?;
//! let hits = store.search(&SearchQuery::new("lisbon")).await?;
//! assert_eq!(hits[0].session_id, id);
//! store.kv_set("weather", "last_city", b"Lisbon").await?;
//! # Ok(())
//! # }
//! ```

/// In a unit test module: run each named case (an `async fn(&Store)`) on SQLite
/// (`sqlite::NAME`, with the module's `store()`) and on a real PostgreSQL (`postgres::NAME`).
#[cfg(test)]
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[tokio::test] async fn $name() { let (_dir, s) = super::store(); super::$name(&s).await; } )*
        }
        mod postgres {
            $( #[tokio::test] async fn $name() { let s = crate::pg::tests::store().await; super::$name(&s).await; } )*
        }
    };
}

pub mod cron;
pub mod delivery;
pub mod inbox;
pub mod kv;
pub mod lease;
pub mod local_time;
pub mod location;
pub mod notice;
pub mod pairing;
mod pg;
pub mod process;
pub mod recover;
pub mod schema;
pub mod search;
pub mod sessions;
mod sqlite;
pub mod trajectory;
pub mod turns;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use kv::{MAX_KEY_BYTES, MAX_PLUGIN_BYTES, MAX_VALUE_BYTES};
pub use lease::{LeaseHolder, Leased};
pub use location::Location;
pub use search::{SearchHit, SearchQuery};
pub use sessions::{ListQuery, MAX_TITLE_CHARS, NewSession, PREVIEW_CHARS, SOURCES, SessionInfo, StoredMessage};

/// How long a write keeps retrying while other writers hold the lock.
pub const BUSY_RETRY_FOR: Duration = Duration::from_secs(20);

/// What can go wrong with the state database.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("state database {path}: {source}")]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error("state database migration failed: {0}")]
    Migrate(#[from] rusqlite_migration::Error),
    #[error("state database: {0}")]
    Sql(rusqlite::Error),
    /// The file is not a database, or parts of it cannot be read.
    #[error(
        "the state database {} is damaged ({detail}). Nothing was changed; run `talaria doctor --repair` to move it aside and recover what can still be read",
        path.as_deref().map_or_else(|| "(state.db in talaria's home)".to_string(), |p| p.display().to_string())
    )]
    Damaged { path: Option<PathBuf>, detail: String },
    /// The file is readable but this process may not write it (a read-only home).
    #[error("the state database {} cannot be written ({detail}); this command needs write access to it", path.display())]
    ReadOnly { path: PathBuf, detail: String },
    #[error(
        "the state database stayed locked by another talaria process for {} s; try again when it is done",
        BUSY_RETRY_FOR.as_secs()
    )]
    Busy,
    #[error("state database holds something this version cannot read: {what}")]
    Corrupt { what: String },
    #[error("key is empty or longer than {MAX_KEY_BYTES} bytes")]
    BadKey,
    #[error("value of {0} bytes is larger than the {MAX_VALUE_BYTES}-byte limit")]
    ValueTooLarge(usize),
    #[error("plugin storage quota of {MAX_PLUGIN_BYTES} bytes would be exceeded")]
    QuotaExceeded,
    #[error(
        "the value under \"{key}\" is not a counter (a counter is a whole number in decimal ASCII, like `42` or `-7`); delete the key or count under another one"
    )]
    NotACounter { key: String },
    #[error("the counter under \"{key}\" is {value}: adding {delta} would leave the 64-bit range")]
    CounterOverflow { key: String, value: i64, delta: i64 },
    #[error("no session matches \"{key}\": run `talaria sessions list` to see them")]
    SessionNotFound { key: String },
    #[error(
        "several sessions match: {}; give more of the id, or run `talaria sessions list` to see them",
        candidates.join(", ")
    )]
    AmbiguousSession { candidates: Vec<String> },
    #[error("session id \"{id}\" is not valid: it must be 1 to 200 bytes with no spaces or control characters")]
    BadSessionId { id: String },
    #[error("a session with id \"{id}\" already exists")]
    SessionExists { id: String },
    #[error("parent session \"{id}\" does not exist: run `talaria sessions list` to see them")]
    UnknownParent { id: String },
    #[error("unknown session source \"{name}\": expected one of {}", SOURCES.join(", "))]
    UnknownSource { name: String },
    #[error("the title \"{title}\" is already used by session {other_id}: choose another")]
    TitleTaken { title: String, other_id: String },
    #[error("invalid session title: {reason}")]
    BadTitle { reason: String },
    #[error("no message with id {id}")]
    MessageNotFound { id: i64 },
    #[error(
        "no pairing code {code} is waiting (it is unknown, used, or over an hour old): `talaria pairing list` shows the codes"
    )]
    PairingNotFound { code: String },
    #[error("PostgreSQL at {url}: {detail}")]
    Postgres { url: String, detail: String },
    #[error("state database (PostgreSQL): {0}")]
    Pg(String),
    #[error("{what} is not available on PostgreSQL yet; use the SQLite store (remove `url` under [store]) for it")]
    NotOnPostgres { what: &'static str },
    #[error("no scheduled job matches \"{key}\": `talaria cron list` shows them")]
    JobNotFound { key: String },
    #[error("several jobs match: {}; give more of the id", candidates.join(", "))]
    AmbiguousJob { candidates: Vec<String> },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        if is_damage(&e) { Self::Damaged { path: None, detail: e.to_string() } } else { Self::Sql(e) }
    }
}

fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase))
}

impl Error {
    /// Another connection holds the lock (or the database is being recovered).
    fn is_busy(&self) -> bool {
        match self {
            Self::Sql(e) | Self::Open { source: e, .. } => sql_busy(e),
            Self::Migrate(rusqlite_migration::Error::RusqliteError { err, .. }) => sql_busy(err),
            _ => false,
        }
    }

    /// The store may not be written here: opened read-only, or the file or its directory is
    /// read-only.
    fn is_read_only(&self) -> bool {
        match self {
            Self::ReadOnly { .. } => true,
            Self::Sql(e) | Self::Open { source: e, .. } => {
                matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen))
            }
            _ => false,
        }
    }
}

fn sql_busy(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// How large a WAL a process leaves behind at exit without checkpointing it
/// ([`Store::checkpoint_if_large`]): a one-shot chat adds about 75 KiB.
pub const EXIT_CHECKPOINT_BYTES: u64 = 256 * 1024;

/// The open state database.
pub struct Store {
    engine: Engine,
    /// This process's subscribers to [`notice`]s.
    hub: notice::Hub,
    /// Inbox entries to mark started with their session's next lease, by session
    /// ([`Store::inbox_start_with_lease`]).
    starts: std::sync::Mutex<std::collections::HashMap<String, i64>>,
    /// Inbox entries to mark done with their session's next answer
    /// ([`Store::inbox_done_with_answer`]).
    answers: std::sync::Mutex<inbox::Answers>,
}

/// Which database holds the state, chosen when the store opens.
enum Engine {
    Sqlite(sqlite::Sqlite),
    Postgres(Box<pg::Pg>),
}

impl Store {
    /// Run `work`, one of the store's transactions (`operation`, its method's name), in a span
    /// of its own for traces ([`talaria_protocol::trace`]).
    async fn traced<T>(
        &self,
        operation: &'static str,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        use tracing::Instrument as _;
        if !talaria_protocol::trace::in_trace() {
            return work.await;
        }
        let system = match &self.engine {
            Engine::Sqlite(_) => "sqlite",
            Engine::Postgres(_) => "postgresql",
        };
        let span = tracing::info_span!(
            target: talaria_protocol::trace::TARGET,
            "store",
            otel.name = format!("store {operation}"),
            otel.kind = "client",
            db.system.name = system,
            db.operation.name = operation,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        let result = work.instrument(span.clone()).await;
        if let Err(e) = &result {
            span.record("otel.status_code", "ERROR");
            span.record("otel.status_description", e.to_string());
        }
        result
    }

    fn on(engine: Engine) -> Self {
        Self {
            engine,
            hub: notice::Hub::default(),
            starts: std::sync::Mutex::default(),
            answers: std::sync::Mutex::default(),
        }
    }

    /// Open (creating if needed) the database at `path` and bring its schema up to date.
    ///
    /// # Errors
    /// The file cannot be opened, is not a database, a migration fails, or the file was written by
    /// a newer talaria (its schema is ahead of this one).
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self::on(Engine::Sqlite(sqlite::Sqlite::open(path)?)))
    }

    /// Connect to the PostgreSQL database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DB`,
    /// or `postgresql:///DB?host=/run/postgresql` for a unix socket) and bring its schema up to
    /// date. Several processes, on several machines, may share it.
    ///
    /// # Errors
    /// The URL is malformed, the server cannot be reached or refuses us, or a migration fails.
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Self::on(Engine::Postgres(Box::new(pg::Pg::connect(url).await?))))
    }

    /// Whether this store is on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self.engine, Engine::Postgres(_))
    }

    /// Open the database only to read it, for commands that never write (`sessions list`,
    /// `doctor`): they work in a read-only home. With no file yet, an empty database in memory.
    ///
    /// # Errors
    /// The file is damaged ([`Error::Damaged`]), or was written by a talaria whose schema is
    /// not this one's.
    pub fn open_read_only(path: &Path) -> Result<Self> {
        Ok(Self::on(Engine::Sqlite(sqlite::Sqlite::open_read_only(path)?)))
    }

    /// [`Store::open`], or when that fails because the file or its directory cannot be
    /// written, [`Store::open_read_only`].
    ///
    /// # Errors
    /// As [`Store::open`] when neither works.
    pub fn open_for_reading(path: &Path) -> Result<Self> {
        match Self::open(path) {
            Ok(store) => Ok(store),
            Err(e @ (Error::Damaged { .. } | Error::Busy)) => Err(e),
            Err(e) => Self::open_read_only(path).map_err(|_| e),
        }
    }

    /// Move everything written so far from the WAL into the database file and empty the WAL,
    /// as closing the last connection would. For a process that is about to exit without
    /// dropping its `Store`: the next one then opens an empty WAL instead of replaying this
    /// one's. Best effort, and it never waits: while another process reads or writes, it does
    /// what it can and the rest is moved later (as closing would).
    pub fn checkpoint(&self) {
        match &self.engine {
            Engine::Sqlite(db) => db.checkpoint(),
            Engine::Postgres(_) => {}
        }
    }

    /// [`Store::checkpoint`] for a process about to exit, when the WAL has grown past
    /// [`EXIT_CHECKPOINT_BYTES`]. A smaller one is left for the next process, which replays it
    /// in a tenth of a millisecond, while checkpointing costs two fsyncs now and two more at
    /// the next write (about 1.6 ms on this project's test machine, a sixth of a one-shot chat).
    /// Nothing committed is at risk either way: the WAL is part of the database.
    pub fn checkpoint_if_large(&self) {
        match &self.engine {
            Engine::Sqlite(db) => db.checkpoint_if_large(),
            Engine::Postgres(_) => {}
        }
    }

    /// Checkpoint SQLite's WAL (copy what it holds into the database file) on a thread of its
    /// own, with a connection of its own, rather than in the writes: a long-running process that
    /// writes for many callers at once (a gateway) then never stalls them all for the copy and
    /// its fsyncs. SQLite's own checkpoint, which a write runs once the WAL holds 1,000 pages,
    /// stays as the backstop (with this thread keeping up, it finds nothing left to copy).
    /// Nothing to do on PostgreSQL, or for a store in memory.
    ///
    /// # Errors
    /// The second connection cannot be opened, or the thread cannot start.
    pub fn checkpoint_in_background(&self) -> Result<()> {
        match &self.engine {
            Engine::Sqlite(db) => db.checkpoint_in_background(),
            Engine::Postgres(_) => Ok(()),
        }
    }

    /// Keep at most `kib` KiB of database pages in this process's memory (SQLite's page cache;
    /// 32 MiB unless set). A long-running process that reads a little of everything (a gateway
    /// serving many chats) keeps its memory flat with a smaller cache: pages it no longer holds
    /// are read again from the system's file cache. Nothing to do on PostgreSQL.
    pub fn limit_cache(&self, kib: u32) {
        match &self.engine {
            Engine::Sqlite(db) => db.limit_cache(kib),
            Engine::Postgres(_) => {}
        }
    }

    /// Let go of the cached pages no statement is using now (they are read again when needed).
    /// Nothing to do on PostgreSQL.
    pub fn release_memory(&self) {
        match &self.engine {
            Engine::Sqlite(db) => db.release_memory(),
            Engine::Postgres(_) => {}
        }
    }

    /// The SQLite engine, for tests that plant rows by hand.
    #[cfg(test)]
    fn sqlite(&self) -> &sqlite::Sqlite {
        match &self.engine {
            Engine::Sqlite(db) => db,
            Engine::Postgres(_) => panic!("the store is on PostgreSQL"),
        }
    }
}

/// A count or a limit (a `usize`) as a database integer.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Now, in milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}
