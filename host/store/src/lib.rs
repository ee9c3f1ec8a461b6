//! talaria's state database: one SQLite file (`$TALARIA_HOME/state.db`) in WAL mode.
//!
//! It holds the sessions (with their lineage: a subagent's session names its parent), every
//! message of every session, two full-text indexes over those messages (words, and substrings for
//! CJK text and code fragments), and each plugin's private key-value data. Schema changes are
//! numbered migrations applied on open ([`schema`]).
//!
//! The main type is [`Store`]; its methods live beside the concept they serve: sessions and
//! messages in [`sessions`], search in [`search`], plugin data in [`kv`]. One connection per
//! `Store`, shared behind a mutex: every operation is a short statement or transaction. Several
//! processes may open the same file at once (the CLI, a gateway, cron): writes take the write
//! lock up front (`BEGIN IMMEDIATE`) and are retried with jitter while another writer holds it.
//!
//! ```no_run
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
//! })?;
//! store.append_messages(&id, &[Message::user("Where is Lisbon?"), Message::assistant("In Portugal.")])?;
//! let hits = store.search(&SearchQuery::new("lisbon"))?;
//! assert_eq!(hits[0].session_id, id);
//! store.kv_set("weather", "last_city", b"Lisbon")?;
//! # Ok::<(), talaria_store::Error>(())
//! ```

pub mod kv;
pub mod schema;
pub mod search;
pub mod sessions;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use rusqlite::{Connection, Transaction, TransactionBehavior};

pub use kv::{MAX_KEY_BYTES, MAX_PLUGIN_BYTES, MAX_VALUE_BYTES};
pub use search::{SearchHit, SearchQuery};
pub use sessions::{ListQuery, MAX_TITLE_CHARS, NewSession, PREVIEW_CHARS, SOURCES, SessionInfo, StoredMessage};

/// How long SQLite itself waits for a lock before handing `SQLITE_BUSY` back to us.
const BUSY_TIMEOUT: Duration = Duration::from_secs(1);
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
    Sql(#[from] rusqlite::Error),
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
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Another connection holds the lock (or the database is being recovered).
    fn is_busy(&self) -> bool {
        match self {
            Self::Sql(e) => sql_busy(e),
            Self::Migrate(rusqlite_migration::Error::RusqliteError { err, .. }) => sql_busy(err),
            _ => false,
        }
    }
}

fn sql_busy(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// The open state database.
pub struct Store {
    conn: Mutex<Connection>,
    /// Appends since this `Store` was opened, to checkpoint the WAL now and then.
    appends: AtomicU32,
}

impl Store {
    /// Open (creating if needed) the database at `path` and bring its schema up to date.
    ///
    /// # Errors
    /// The file cannot be opened, is not a database, a migration fails, or the file was written by
    /// a newer talaria (its schema is ahead of this one).
    pub fn open(path: &Path) -> Result<Self> {
        let open_err = |source| Error::Open { path: path.to_path_buf(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| open_err(rusqlite::Error::ToSqlConversionFailure(Box::new(e))))?;
        }
        let mut conn = Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        retry_busy(|| {
            conn.pragma_update(None, "journal_mode", "WAL")?;
            Ok(())
        })?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Up to 32 MiB of page cache (allocated only as pages are read): a search touches a few
        // thousand message rows spread over the file.
        conn.pragma_update(None, "cache_size", -32_768)?;
        // Migrations take the write lock up front, so two processes opening a new file at once
        // queue instead of both creating the same tables.
        conn.set_transaction_behavior(TransactionBehavior::Immediate);
        schema::migrate(&mut conn)?;
        Ok(Self { conn: Mutex::new(conn), appends: AtomicU32::new(0) })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves the connection itself usable.
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Run `f` in one `BEGIN IMMEDIATE` transaction, committed if `f` succeeds. While another
    /// connection holds the write lock, wait (SQLite's busy timeout), then retry with jitter for
    /// up to [`BUSY_RETRY_FOR`]; the mutex is released between attempts.
    fn write<T>(&self, mut f: impl FnMut(&Transaction<'_>) -> Result<T>) -> Result<T> {
        retry_busy(|| {
            let mut conn = self.conn();
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })
    }
}

/// Call `f` until it returns anything but a busy error, for at most [`BUSY_RETRY_FOR`].
fn retry_busy<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let deadline = Instant::now() + BUSY_RETRY_FOR;
    loop {
        match f() {
            Err(e) if e.is_busy() => {
                if Instant::now() >= deadline {
                    return Err(Error::Busy);
                }
                std::thread::sleep(Duration::from_millis(fastrand::u64(5..=60)));
            }
            other => return other,
        }
    }
}

/// Now, in milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}
