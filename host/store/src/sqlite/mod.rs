//! The state in a SQLite file, `$TALARIA_HOME/state.db` in WAL mode (the default engine).
//!
//! One connection per [`Store`](crate::Store), shared behind a mutex: every operation is a short
//! statement or transaction, run inline on the caller's thread. Several processes may open the
//! same file at once (the CLI, a gateway, cron): writes take the write lock up front
//! (`BEGIN IMMEDIATE`) and are retried with jitter while another writer holds it.

mod cron;
mod delivery;
mod inbox;
mod kv;
mod lease;
mod pairing;
mod search;
mod sessions;
mod turns;

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};

use crate::{BUSY_RETRY_FOR, EXIT_CHECKPOINT_BYTES, Error, Result, is_damage, schema};

/// How long SQLite itself waits for a lock before handing `SQLITE_BUSY` back to us.
const BUSY_TIMEOUT: Duration = Duration::from_secs(1);

/// Commits between two checkpoints of the background checkpointer: about 500 pages of WAL at a
/// gateway's six or seven small commits per reply.
const BACKGROUND_CHECKPOINT_EVERY: u32 = 100;

/// The SQLite engine.
pub(crate) struct Sqlite {
    /// Where an async caller waits its turn for the connection, yielding its thread to the
    /// runtime's other tasks meanwhile (see [`Sqlite::queue`]).
    turns: tokio::sync::Mutex<()>,
    conn: Mutex<Connection>,
    /// Appends since this `Store` was opened, to checkpoint the WAL now and then.
    appends: AtomicU32,
    /// Commits since this `Store` was opened, for the checkpointer.
    commits: AtomicU32,
    /// Wakes the thread that checkpoints the WAL, when one does (see
    /// [`Sqlite::checkpoint_in_background`]).
    checkpointer: OnceLock<SyncSender<()>>,
}

/// The SQLite engine, this caller's turn.
pub(crate) struct Queued<'a> {
    db: &'a Sqlite,
    _turn: tokio::sync::MutexGuard<'a, ()>,
}

impl std::ops::Deref for Queued<'_> {
    type Target = Sqlite;

    fn deref(&self) -> &Sqlite {
        self.db
    }
}

impl Sqlite {
    fn new(conn: Connection) -> Self {
        Self {
            turns: tokio::sync::Mutex::new(()),
            conn: Mutex::new(conn),
            appends: AtomicU32::new(0),
            commits: AtomicU32::new(0),
            checkpointer: OnceLock::new(),
        }
    }

    /// Wait for this store's turn, then use the connection: the statements run in place, on the
    /// caller's thread, while no other async caller waits on the connection's lock with a
    /// thread of the runtime's (a worker blocked on the lock stops every task it would run).
    pub(crate) async fn queue(&self) -> Queued<'_> {
        Queued { db: self, _turn: self.turns.lock().await }
    }

    /// Open (creating if needed) the database at `path` and bring its schema up to date.
    pub(crate) fn open(path: &Path) -> Result<Self> {
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
        // Room for every fixed statement of the store (about 110; rusqlite keeps 16): a
        // statement pushed out of the cache is parsed again on its next use.
        conn.set_prepared_statement_cache_capacity(160);
        // Migrations take the write lock up front, so two processes opening a new file at once
        // queue instead of both creating the same tables.
        conn.set_transaction_behavior(TransactionBehavior::Immediate);
        schema::migrate(&mut conn)?;
        Ok(Self::new(conn))
    }

    /// Open the database only to read it; with no file yet, an empty database in memory.
    pub(crate) fn open_read_only(path: &Path) -> Result<Self> {
        if !path.exists() {
            // Nothing stored yet: an empty database, in memory.
            let mut conn = Connection::open_in_memory()?;
            conn.set_transaction_behavior(TransactionBehavior::Immediate);
            schema::migrate(&mut conn)?;
            return Ok(Self::new(conn));
        }
        Self::read_only_inner(path).map_err(|e| named(e, path))
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
        Ok(Self::new(conn))
    }

    /// [`Store::checkpoint`](crate::Store::checkpoint): best effort, never waiting.
    pub(crate) fn checkpoint(&self) {
        let conn = self.conn();
        let _ = conn.busy_timeout(Duration::ZERO);
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        let _ = conn.busy_timeout(BUSY_TIMEOUT);
    }

    /// [`Sqlite::checkpoint`] when the WAL has grown past [`EXIT_CHECKPOINT_BYTES`].
    pub(crate) fn checkpoint_if_large(&self) {
        let wal = self.conn().path().filter(|p| !p.is_empty()).map(|p| format!("{p}-wal"));
        let Some(wal) = wal else { return };
        if std::fs::metadata(&wal).is_ok_and(|m| m.len() > EXIT_CHECKPOINT_BYTES) {
            self.checkpoint();
        }
    }

    /// [`Store::checkpoint_in_background`](crate::Store::checkpoint_in_background).
    pub(crate) fn checkpoint_in_background(&self) -> Result<()> {
        let path = self.conn().path().filter(|p| !p.is_empty()).map(std::path::PathBuf::from);
        let Some(path) = path else { return Ok(()) };
        if self.checkpointer.get().is_some() {
            return Ok(());
        }
        let conn = Connection::open(&path).map_err(|source| Error::Open { path: path.clone(), source })?;
        let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("talaria-checkpoint".into())
            .spawn(move || {
                // Until the store is dropped. PASSIVE: it copies what no reader still needs,
                // never waits for a lock, and leaves writers writing meanwhile.
                for () in woken {
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                        tracing::debug!("background checkpoint: {e}");
                    }
                }
            })
            .map_err(|e| Error::Open { path, source: rusqlite::Error::ToSqlConversionFailure(Box::new(e)) })?;
        let _ = self.checkpointer.set(wake);
        Ok(())
    }

    /// Whether a thread of its own checkpoints the WAL.
    pub(crate) fn checkpoints_in_background(&self) -> bool {
        self.checkpointer.get().is_some()
    }

    /// A write committed: every [`BACKGROUND_CHECKPOINT_EVERY`], wake the checkpointer (if one
    /// runs; a wake-up already pending covers this one).
    fn committed(&self) {
        if let Some(wake) = self.checkpointer.get()
            && self.commits.fetch_add(1, Ordering::Relaxed) % BACKGROUND_CHECKPOINT_EVERY
                == BACKGROUND_CHECKPOINT_EVERY - 1
        {
            let _ = wake.try_send(());
        }
    }

    /// Keep at most `kib` KiB of pages in SQLite's page cache.
    pub(crate) fn limit_cache(&self, kib: u32) {
        let _ = self.conn().pragma_update(None, "cache_size", -i64::from(kib));
    }

    /// Let go of the cached pages no statement is using now.
    pub(crate) fn release_memory(&self) {
        let _ = self.conn().execute_batch("PRAGMA shrink_memory");
    }

    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves the connection itself usable.
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Run `f` in one `BEGIN IMMEDIATE` transaction, committed if `f` succeeds. While another
    /// connection holds the write lock, wait (SQLite's busy timeout), then retry with jitter for
    /// up to [`BUSY_RETRY_FOR`]; the mutex is released between attempts.
    ///
    /// `BEGIN` and `COMMIT` are cached statements like the rest (rusqlite's `Transaction`
    /// parses both again each time): the gateway writes six or seven times per reply.
    pub(crate) fn write<T>(&self, mut f: impl FnMut(&Connection) -> Result<T>) -> Result<T> {
        let out = retry_busy(|| {
            let conn = self.conn();
            let tx = Immediate::begin(&conn)?;
            let out = f(&conn)?;
            tx.commit()?;
            Ok(out)
        })?;
        self.committed();
        Ok(out)
    }
}

/// An open `BEGIN IMMEDIATE` transaction: rolled back when dropped uncommitted (`f` failed or
/// panicked, or `COMMIT` itself failed), so the connection is never left inside one.
struct Immediate<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Immediate<'c> {
    fn begin(conn: &'c Connection) -> Result<Self> {
        conn.run("BEGIN IMMEDIATE", [])?;
        Ok(Self { conn, open: true })
    }

    fn commit(mut self) -> Result<()> {
        self.conn.run("COMMIT", [])?;
        self.open = false;
        Ok(())
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        if self.open && !self.conn.is_autocommit() {
            let _ = self.conn.run("ROLLBACK", []);
        }
    }
}

/// Statements run through the connection's statement cache, parsed once per connection.
/// Use these for every statement whose text is fixed; a statement built from values (a list of
/// `?`s as long as the input) goes through `prepare`, or it would push the fixed ones out.
///
/// A bound `LIMIT` or `OFFSET` is written `+?N`: SQLite plans around the value of a bare `?N`
/// there, so binding it again expires the statement and it is compiled anew on every run.
pub(crate) trait Cached {
    /// `execute`, cached: the number of rows changed.
    fn run<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;

    /// `query_row`, cached: the first row, mapped by `f`.
    fn one<T, P: rusqlite::Params>(
        &self,
        sql: &str,
        params: P,
        f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T>;
}

impl Cached for Connection {
    fn run<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    fn one<T, P: rusqlite::Params>(
        &self,
        sql: &str,
        params: P,
        f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.prepare_cached(sql)?.query_row(params, f)
    }
}

/// A read-only connection to the database at `path`, also when neither the file nor its
/// directory can be written (a WAL database then needs `immutable`, which is safe only because
/// nobody can write it either).
pub(crate) fn read_only_connection(path: &Path) -> Result<Connection> {
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
pub(crate) fn check_length(path: &Path) -> Result<()> {
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
pub(crate) fn uri_path(path: &Path) -> String {
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

/// Give the lease back, when it is still `token`'s.
pub(super) fn release_lease_in(conn: &Connection, session_id: &str, token: &str) -> Result<()> {
    conn.run("DELETE FROM session_leases WHERE session_id = ?1 AND token = ?2", rusqlite::params![session_id, token])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Cached as _, Sqlite};
    use crate::Error;

    fn rows(db: &Sqlite) -> i64 {
        db.conn().one("SELECT count(*) FROM plugin_kv", [], |r| r.get(0)).unwrap_or(-1)
    }

    fn put(conn: &rusqlite::Connection, key: &str) -> crate::Result<()> {
        conn.run("INSERT INTO plugin_kv (plugin, key, value) VALUES ('p', ?1, x'00')", [key])?;
        Ok(())
    }

    #[test]
    fn a_background_checkpointer_moves_the_wal_into_the_file_while_writes_go_on() {
        let file_after_writes = |background: bool| {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("state.db");
            let db = Sqlite::open(&path).expect("open");
            if background {
                db.checkpoint_in_background().expect("checkpointer");
            }
            for n in 0..super::BACKGROUND_CHECKPOINT_EVERY {
                db.write(|tx| {
                    tx.run("INSERT INTO plugin_kv (plugin, key, value) VALUES ('p', ?1, zeroblob(10000))", [n])?;
                    Ok(())
                })
                .expect("write");
            }
            // 100 rows of 10 kB: about 600 frames of WAL, short of SQLite's own checkpoint at 1,000;
            // the last wakes the checkpointer.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let mut len = 0;
            while std::time::Instant::now() < deadline {
                len = std::fs::metadata(&path).map_or(0, |m| m.len());
                if !background || len > 1_000_000 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            len
        };
        assert!(file_after_writes(false) < 500_000, "without it, the rows stay in the WAL");
        let len = file_after_writes(true);
        assert!(len > 1_000_000, "the checkpointer copied the rows into the file: {len} bytes");
    }

    #[test]
    fn the_claim_of_deliveries_is_compiled_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Sqlite::open(&dir.path().join("state.db")).expect("open");
        for chat in ["1", "2", "3"] {
            let key = format!("{chat}:0");
            let new =
                crate::delivery::NewDelivery { platform: "p", chat_id: chat, thread_id: None, body: "b", key: &key };
            db.delivery_enqueue(&new).expect("queue");
        }
        let mut claimed = 0;
        for (now, limit) in [(1, 1), (2, 1), (3, 5)] {
            claimed += db.deliveries_claim("p", crate::now_ms() + now, 0, limit, "me").expect("claim").len();
        }
        assert_eq!(claimed, 5, "each claim ran (1 + 1 + all three again, their claims lapsed at once)");
        let conn = db.conn();
        let stmt = conn.prepare_cached(&super::delivery::claimable()).expect("the statement is cached");
        // A statement SQLite planned around a bound value is compiled again on each run.
        assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0);
    }

    #[test]
    fn a_write_that_fails_or_panics_leaves_nothing_and_no_open_transaction() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Sqlite::open(&dir.path().join("state.db")).expect("open");

        let failed = db.write(|tx| {
            put(tx, "a")?;
            Err::<(), _>(Error::Busy)
        });
        assert!(matches!(failed, Err(Error::Busy)), "{failed:?}");
        assert_eq!(rows(&db), 0, "a failed write is rolled back");
        assert!(db.conn().is_autocommit(), "no transaction is left open after a failure");

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            db.write(|tx| -> crate::Result<()> {
                put(tx, "b")?;
                panic!("the closure panics inside the transaction");
            })
        }));
        assert!(panicked.is_err());
        assert!(db.conn().is_autocommit(), "no transaction is left open after a panic");
        assert_eq!(rows(&db), 0, "a panicked write is rolled back");

        db.write(|tx| put(tx, "c")).expect("the next write commits");
        assert_eq!(rows(&db), 1);
        let again = db.write(|tx| put(tx, "c"));
        assert!(again.is_err(), "a constraint failure is an error: {again:?}");
        db.write(|tx| put(tx, "d")).expect("and the connection still writes after it");
        assert_eq!(rows(&db), 2);
    }
}
