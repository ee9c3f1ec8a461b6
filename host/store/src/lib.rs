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
//! The main type is [`Store`]; its methods live beside the concept they serve: sessions and
//! messages in [`sessions`], search in [`search`], plugin data in [`kv`]. On SQLite, one
//! connection per `Store`, shared behind a mutex: every operation is a short statement or
//! transaction. Several processes may open the same file at once (the CLI, a gateway, cron):
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
pub mod trajectory;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use rusqlite::{Connection, Transaction, TransactionBehavior};

pub use kv::{MAX_KEY_BYTES, MAX_PLUGIN_BYTES, MAX_VALUE_BYTES};
pub use lease::{LeaseHolder, Leased};
pub use location::Location;
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
    /// Appends since this `Store` was opened, to checkpoint the WAL now and then.
    appends: AtomicU32,
    /// This process's subscribers to [`notice`]s.
    hub: notice::Hub,
}

/// Which database holds the state.
enum Engine {
    Sqlite(Mutex<Connection>),
    Postgres(Box<pg::Pg>),
}

impl Store {
    /// Open (creating if needed) the database at `path` and bring its schema up to date.
    ///
    /// # Errors
    /// The file cannot be opened, is not a database, a migration fails, or the file was written by
    /// a newer talaria (its schema is ahead of this one).
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_inner(path).map_err(|e| named(e, path))
    }

    fn open_inner(path: &Path) -> Result<Self> {
        let open_err = |source| Error::Open { path: path.to_path_buf(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| open_err(rusqlite::Error::ToSqlConversionFailure(Box::new(e))))?;
        }
        check_length(path)?;
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
        // Room for every statement a turn runs (rusqlite keeps 16): a statement pushed out of
        // the cache is parsed again on its next use.
        conn.set_prepared_statement_cache_capacity(64);
        // Migrations take the write lock up front, so two processes opening a new file at once
        // queue instead of both creating the same tables.
        conn.set_transaction_behavior(TransactionBehavior::Immediate);
        schema::migrate(&mut conn)?;
        Ok(Self { engine: Engine::Sqlite(Mutex::new(conn)), appends: AtomicU32::new(0), hub: notice::Hub::default() })
    }

    /// Connect to the PostgreSQL database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DB`,
    /// or `postgresql:///DB?host=/run/postgresql` for a unix socket) and bring its schema up to
    /// date. Several processes, on several machines, may share it.
    ///
    /// # Errors
    /// The URL is malformed, the server cannot be reached or refuses us, or a migration fails.
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Self {
            engine: Engine::Postgres(Box::new(pg::Pg::connect(url).await?)),
            appends: AtomicU32::new(0),
            hub: notice::Hub::default(),
        })
    }

    /// Whether this store is on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self.engine, Engine::Postgres(_))
    }

    /// The PostgreSQL engine, when the store is on it.
    fn pg(&self) -> Option<&pg::Pg> {
        match &self.engine {
            Engine::Postgres(pg) => Some(pg),
            Engine::Sqlite(_) => None,
        }
    }

    /// Open the database only to read it, for commands that never write (`sessions list`,
    /// `doctor`): they work in a read-only home. With no file yet, an empty database in memory.
    ///
    /// # Errors
    /// The file is damaged ([`Error::Damaged`]), or was written by a talaria whose schema is
    /// not this one's.
    pub fn open_read_only(path: &Path) -> Result<Self> {
        if !path.exists() {
            // Nothing stored yet: an empty database, in memory.
            let mut conn = Connection::open_in_memory()?;
            conn.set_transaction_behavior(TransactionBehavior::Immediate);
            schema::migrate(&mut conn)?;
            return Ok(Self {
                engine: Engine::Sqlite(Mutex::new(conn)),
                appends: AtomicU32::new(0),
                hub: notice::Hub::default(),
            });
        }
        Self::read_only_inner(path).map_err(|e| named(e, path))
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

    fn read_only_inner(path: &Path) -> Result<Self> {
        check_length(path)?;
        let conn = read_only_connection(path)?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if usize::try_from(version).ok() != Some(schema::VERSION) {
            return Err(Error::ReadOnly {
                path: path.to_path_buf(),
                detail: format!(
                    "its schema is v{version} and this talaria reads v{}; run any talaria command that writes (e.g. `talaria doctor`) with write access once to update it",
                    schema::VERSION
                ),
            });
        }
        Ok(Self { engine: Engine::Sqlite(Mutex::new(conn)), appends: AtomicU32::new(0), hub: notice::Hub::default() })
    }

    /// Move everything written so far from the WAL into the database file and empty the WAL,
    /// as closing the last connection would. For a process that is about to exit without
    /// dropping its `Store`: the next one then opens an empty WAL instead of replaying this
    /// one's. Best effort, and it never waits: while another process reads or writes, it does
    /// what it can and the rest is moved later (as closing would).
    pub fn checkpoint(&self) {
        let Ok(conn) = self.conn() else { return };
        let _ = conn.busy_timeout(Duration::ZERO);
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        let _ = conn.busy_timeout(BUSY_TIMEOUT);
    }

    /// [`Store::checkpoint`] for a process about to exit, when the WAL has grown past
    /// [`EXIT_CHECKPOINT_BYTES`]. A smaller one is left for the next process, which replays it
    /// in a tenth of a millisecond, while checkpointing costs two fsyncs now and two more at
    /// the next write (about 1.6 ms on this project's test machine, a sixth of a one-shot chat).
    /// Nothing committed is at risk either way: the WAL is part of the database.
    pub fn checkpoint_if_large(&self) {
        let wal = match &self.engine {
            Engine::Sqlite(conn) => {
                let conn = conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                conn.path().filter(|p| !p.is_empty()).map(|p| format!("{p}-wal"))
            }
            Engine::Postgres(_) => return,
        };
        let Some(wal) = wal else { return };
        if std::fs::metadata(&wal).is_ok_and(|m| m.len() > EXIT_CHECKPOINT_BYTES) {
            self.checkpoint();
        }
    }

    /// Keep at most `kib` KiB of database pages in this process's memory (SQLite's page cache;
    /// 32 MiB unless set). A long-running process that reads a little of everything (a gateway
    /// serving many chats) keeps its memory flat with a smaller cache: pages it no longer holds
    /// are read again from the system's file cache. Nothing to do on PostgreSQL.
    pub fn limit_cache(&self, kib: u32) {
        if let Ok(conn) = self.conn() {
            let _ = conn.pragma_update(None, "cache_size", -i64::from(kib));
        }
    }

    /// Let go of the cached pages no statement is using now (they are read again when needed).
    /// Nothing to do on PostgreSQL.
    pub fn release_memory(&self) {
        if let Ok(conn) = self.conn() {
            let _ = conn.execute_batch("PRAGMA shrink_memory");
        }
    }

    /// The SQLite connection; on PostgreSQL, [`Error::NotOnPostgres`] for what has no
    /// PostgreSQL version yet.
    fn conn(&self) -> Result<std::sync::MutexGuard<'_, Connection>> {
        match &self.engine {
            // A panic while holding the lock leaves the connection itself usable.
            Engine::Sqlite(conn) => Ok(conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)),
            Engine::Postgres(_) => Err(Error::NotOnPostgres { what: "this operation" }),
        }
    }

    /// Run `f` in one `BEGIN IMMEDIATE` transaction, committed if `f` succeeds. While another
    /// connection holds the write lock, wait (SQLite's busy timeout), then retry with jitter for
    /// up to [`BUSY_RETRY_FOR`]; the mutex is released between attempts.
    fn write<T>(&self, mut f: impl FnMut(&Transaction<'_>) -> Result<T>) -> Result<T> {
        retry_busy(|| {
            let mut conn = self.conn()?;
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })
    }
}

/// A read-only connection to the database at `path`, also when neither the file nor its
/// directory can be written (a WAL database then needs `immutable`, which is safe only because
/// nobody can write it either).
fn read_only_connection(path: &Path) -> Result<Connection> {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let open_err = |source| Error::Open { path: path.to_path_buf(), source };
    let try_open = |uri: String| -> Result<Connection> {
        let conn = Connection::open_with_flags(uri, flags).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // The first read tells whether the file can be read at all (a WAL database in a
        // directory that cannot be written needs `immutable` for that).
        let _: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        Ok(conn)
    };
    let uri = |extra: &str| format!("file:{}?mode=ro{extra}", uri_path(path));
    match try_open(uri("")) {
        Ok(conn) => Ok(conn),
        Err(Error::Sql(e) | Error::Open { source: e, .. })
            if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
            ) =>
        {
            try_open(uri("&immutable=1"))
        }
        Err(e) => Err(e),
    }
}

/// Give a damaged-database error the file's name.
fn named(e: Error, path: &Path) -> Error {
    match e {
        Error::Damaged { path: None, detail } => Error::Damaged { path: Some(path.to_path_buf()), detail },
        Error::Open { source, .. } if is_damage(&source) => {
            Error::Damaged { path: Some(path.to_path_buf()), detail: source.to_string() }
        }
        Error::Migrate(rusqlite_migration::Error::RusqliteError { err, .. }) if is_damage(&err) => {
            Error::Damaged { path: Some(path.to_path_buf()), detail: err.to_string() }
        }
        other => other,
    }
}

/// A database file shorter than its header says was cut (a full disk, a copy stopped half
/// way): SQLite would only notice when it reads a missing page, so look before opening.
///
/// A checkpoint copies the WAL's pages into the file in page order, header first, and empties
/// the WAL only once every page is there: a file is short with a WAL beside it while another
/// process checkpoints, and stays so when a process ends in the middle of one (SQLite then reads
/// the missing pages from the WAL, which still holds them). So a file is judged only when no
/// WAL with anything in it stands beside it, and called cut only when it is short twice, 50 ms
/// apart (another process may have written and begun a checkpoint just after the WAL was
/// looked at).
fn check_length(path: &Path) -> Result<()> {
    let check = || {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
            return Ok(());
        }
        check_file_length(path)
    };
    match check() {
        Err(Error::Damaged { .. }) => {
            std::thread::sleep(std::time::Duration::from_millis(50));
            check()
        }
        other => other,
    }
}

fn check_file_length(path: &Path) -> Result<()> {
    use std::io::Read as _;
    let Ok(mut file) = std::fs::File::open(path) else { return Ok(()) };
    let mut header = [0u8; 100];
    // The header first, then the length: a file growing meanwhile only gets longer.
    let whole = file.read_exact(&mut header).is_ok();
    let Ok(len) = file.metadata().map(|m| m.len()) else { return Ok(()) };
    if len == 0 {
        return Ok(());
    }
    if !whole || &header[..16] != b"SQLite format 3\0" {
        return Err(Error::Damaged {
            path: Some(path.to_path_buf()),
            detail: format!(
                "it is not an SQLite database: its first bytes are {}",
                printable(&header[..len.min(16) as usize])
            ),
        });
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        n => u64::from(n),
    };
    let pages = u64::from(u32::from_be_bytes([header[28], header[29], header[30], header[31]]));
    // The page count is valid only when written by the same change as the counter beside it.
    let counted = header[24..28] == header[92..96];
    let expected = pages.saturating_mul(page_size);
    if counted && pages > 0 && len < expected {
        return Err(Error::Damaged {
            path: Some(path.to_path_buf()),
            detail: format!("the file was cut short: {len} of its {expected} bytes are there"),
        });
    }
    Ok(())
}

fn printable(bytes: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(bytes))
}

/// `path` for an SQLite URI: characters with a meaning there percent-encoded.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'%' | b'?' | b'#' => out.push_str(&format!("%{b:02X}")),
            b if !b.is_ascii() => out.push_str(&format!("%{b:02X}")),
            _ => out.push(char::from(*b)),
        }
    }
    out
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

/// A count or a limit (a `usize`) as a database integer.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Now, in milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}
