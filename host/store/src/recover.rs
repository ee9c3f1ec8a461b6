//! Recovering a damaged state database (`talaria doctor --repair`).
//!
//! [`check`] reads the whole file (`PRAGMA quick_check`) and says whether it is sound.
//! [`repair`] moves the damaged file (and its `-wal`, `-shm`) aside with a timestamp, creates a
//! new database in its place, and copies into it every row SQLite can still read: sessions,
//! messages and plugin data, in chunks, halving a chunk that fails until single unreadable rows
//! are left behind. Messages whose session row was lost get a stand-in session so they stay
//! reachable. The full-text indexes are rebuilt by the new file's triggers as rows arrive.
//!
//! ```
//! use talaria_store::{Store, recover};
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("state.db");
//! std::fs::write(&path, b"this is not a database at all, just some text")?;
//! assert!(matches!(Store::open(&path), Err(talaria_store::Error::Damaged { .. })));
//! let report = recover::repair(&path)?;
//! assert_eq!(report.sessions, 0);
//! assert!(report.moved_to.exists());
//! Store::open(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};

use crate::{Error, Result, Store};

/// Tables copied, in an order that keeps references valid.
const TABLES: [&str; 3] = ["sessions", "messages", "plugin_kv"];

/// What [`repair`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repair {
    /// Where the damaged file now is.
    pub moved_to: PathBuf,
    pub sessions: u64,
    pub messages: u64,
    pub plugin_entries: u64,
    /// Rows SQLite could not read (where it could still tell there were rows at all).
    pub unreadable: u64,
    /// Sessions made up for messages whose own session row was lost.
    pub stand_ins: u64,
    /// Whole tables that could not be read at all.
    pub lost_tables: Vec<String>,
}

/// Whether the database at `path` reads back whole: `Ok(None)` when sound, else what is wrong.
///
/// # Errors
/// The file cannot be opened at all (a missing directory, no permission).
pub fn check(path: &Path) -> Result<Option<String>> {
    if !path.exists() {
        return Ok(None);
    }
    if let Err(Error::Damaged { detail, .. }) = crate::sqlite::check_length(path) {
        return Ok(Some(detail));
    }
    let conn = match crate::sqlite::read_only_connection(path) {
        Ok(conn) => conn,
        Err(Error::Damaged { detail, .. }) => return Ok(Some(detail)),
        Err(e) => return Err(e),
    };
    let rows: std::result::Result<Vec<String>, rusqlite::Error> =
        conn.prepare("PRAGMA quick_check").and_then(|mut s| s.query_map([], |r| r.get::<_, String>(0))?.collect());
    match rows {
        Ok(rows) if rows.len() == 1 && rows[0] == "ok" => Ok(None),
        Ok(rows) => Ok(Some(rows.into_iter().take(3).collect::<Vec<_>>().join("; "))),
        Err(e) if crate::is_damage(&e) => Ok(Some(e.to_string())),
        Err(e) => Err(Error::from(e)),
    }
}

/// Move the database at `path` aside and rebuild it from what can still be read.
///
/// # Errors
/// The file cannot be moved, or the new database cannot be created.
pub fn repair(path: &Path) -> Result<Repair> {
    let stamp = crate::local_time::now().strftime("%Y%m%d-%H%M%S").to_string();
    let moved_to = aside(path, &stamp);
    let io = |e: std::io::Error| Error::Open {
        path: path.to_path_buf(),
        source: rusqlite::Error::ToSqlConversionFailure(Box::new(e)),
    };
    std::fs::rename(path, &moved_to).map_err(io)?;
    for suffix in ["-wal", "-shm"] {
        let side = sidecar(path, suffix);
        if side.exists() {
            std::fs::rename(&side, sidecar(&moved_to, suffix)).map_err(io)?;
        }
    }
    drop(Store::open(path)?);
    let report = Repair { moved_to: moved_to.clone(), ..Repair::default() };
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    // SQLite reads a copy whose header matches the pages that are really there.
    // (Its write-ahead log goes with it: committed pages may still be only there.)
    let work = sidecar(&moved_to, "-reading");
    let old_wal = sidecar(&moved_to, "-wal");
    let readable = std::fs::copy(&moved_to, &work).is_ok()
        && (!old_wal.exists() || std::fs::copy(&old_wal, sidecar(&work, "-wal")).is_ok())
        && fit_header(&work).is_ok();
    let attached = readable
        && conn
            .execute("ATTACH DATABASE ?1 AS old", [format!("file:{}?mode=ro", crate::sqlite::uri_path(&work))])
            .is_ok();
    let report = if attached { copy_all(&conn, report) } else { Ok(lost_all(report)) };
    drop(conn);
    for leftover in [work.clone(), sidecar(&work, "-wal"), sidecar(&work, "-shm")] {
        let _ = std::fs::remove_file(leftover);
    }
    report
}

fn lost_all(mut report: Repair) -> Repair {
    report.lost_tables = TABLES.iter().map(ToString::to_string).collect();
    report
}

/// Make the header's page count say how many whole pages the file really has.
fn fit_header(path: &Path) -> std::io::Result<()> {
    use std::io::{Read as _, Seek as _, Write as _};
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
    let mut header = [0u8; 100];
    file.read_exact(&mut header)?;
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        n => u64::from(n.max(512)),
    };
    let pages = file.metadata()?.len() / page_size;
    file.set_len(pages * page_size)?;
    file.seek(std::io::SeekFrom::Start(28))?;
    file.write_all(&u32::try_from(pages).unwrap_or(u32::MAX).to_be_bytes())?;
    // Mark the count valid: "version valid for" equals the change counter.
    file.seek(std::io::SeekFrom::Start(92))?;
    file.write_all(&header[24..28])?;
    Ok(())
}

/// Copy every table of `old` into `main`, then give orphaned messages a session.
fn copy_all(conn: &Connection, mut report: Repair) -> Result<Repair> {
    for table in TABLES {
        match copy_table(conn, table) {
            Some((copied, unreadable)) => {
                report.unreadable += unreadable;
                match table {
                    "sessions" => report.sessions = copied,
                    "messages" => report.messages = copied,
                    _ => report.plugin_entries = copied,
                }
            }
            None => report.lost_tables.push(table.to_string()),
        }
    }
    report.stand_ins = u64::try_from(conn.execute(
        "INSERT INTO sessions (id, source, model, provider, system_prompt, title, cwd, started_at, updated_at)
         SELECT m.session_id, 'cli', '', '', '', 'recovered ' || m.session_id, '', min(m.created_at), max(m.created_at)
         FROM messages m LEFT JOIN sessions s ON s.id = m.session_id WHERE s.id IS NULL GROUP BY m.session_id",
        [],
    )?)
    .unwrap_or(0);
    conn.execute_batch(
        "UPDATE sessions SET
            message_count = (SELECT count(*) FROM messages m WHERE m.session_id = sessions.id AND m.active),
            tool_call_count = (SELECT coalesce(sum(json_array_length(m.tool_calls)), 0) FROM messages m
                               WHERE m.session_id = sessions.id AND m.active);
         UPDATE sessions SET parent_id = NULL WHERE parent_id NOT IN (SELECT id FROM sessions);
         DETACH DATABASE old;",
    )?;
    Ok(report)
}

/// Copy what can be read of `old.table` into `main.table`: (rows copied, rows left behind), or
/// `None` when the table cannot be read at all.
fn copy_table(conn: &Connection, table: &str) -> Option<(u64, u64)> {
    let columns: Vec<String> = conn
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .ok()?;
    let list = columns.join(", ");
    let insert = format!("INSERT OR IGNORE INTO main.{table} ({list}) SELECT {list} FROM old.{table}");
    // The whole table at once when it reads cleanly (the usual case for all but one table).
    let before = count(conn, table);
    if conn.execute(&insert, []).is_ok() {
        return Some((count(conn, table) - before, 0));
    }
    let span: Option<(i64, i64)> = conn
        .query_row(&format!("SELECT min(rowid), max(rowid) FROM old.{table}"), [], |r| Ok((r.get(0)?, r.get(1)?)))
        .ok();
    let (low, high) = match span {
        Some((low, high)) => (low, high),
        // The index pages are gone too: probe from 1 up to a generous guess.
        None => (1, 1 << 20),
    };
    let ranged = format!("{insert} WHERE rowid BETWEEN ?1 AND ?2");
    let mut lost = 0;
    let mut stack = vec![(low, high)];
    while let Some((a, b)) = stack.pop() {
        if conn.execute(&ranged, params![a, b]).is_ok() {
            continue;
        }
        if a == b {
            lost += 1;
        } else if span.is_none() && b - a > 1 << 16 {
            // Without a known span, huge unreadable stretches are passed over, not probed row
            // by row.
            continue;
        } else {
            let mid = a + (b - a) / 2;
            stack.push((mid + 1, b));
            stack.push((a, mid));
        }
    }
    Some((count(conn, table) - before, lost))
}

fn count(conn: &Connection, table: &str) -> u64 {
    conn.query_row(&format!("SELECT count(*) FROM main.{table}"), [], |r| r.get::<_, i64>(0))
        .map_or(0, |n| u64::try_from(n).unwrap_or(0))
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// `state.db.damaged-20261123-101500`, or with a counter when that exists already.
fn aside(path: &Path, stamp: &str) -> PathBuf {
    let mut candidate = sidecar(path, &format!(".damaged-{stamp}"));
    let mut n = 1;
    while candidate.exists() {
        n += 1;
        candidate = sidecar(path, &format!(".damaged-{stamp}-{n}"));
    }
    candidate
}

#[cfg(test)]
mod tests {
    use talaria_protocol::Message;

    use super::*;
    use crate::NewSession;

    async fn session(store: &Store, id: &str, words: &str) {
        store
            .create_session(&NewSession {
                id: id.into(),
                source: "cli".into(),
                model: "m".into(),
                provider: "p".into(),
                system_prompt: "sys".into(),
                parent_id: None,
                cwd: "/w".into(),
            })
            .await
            .expect("create");
        let long = words.repeat(400);
        store.append_messages(id, &[Message::user(words), Message::assistant(long)]).await.expect("append");
    }

    #[tokio::test]
    async fn a_cut_file_is_named_and_what_remains_is_recovered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.db");
        {
            let store = Store::open(&path).expect("open");
            for i in 0..40 {
                session(&store, &format!("s{i:02}"), &format!("lisbon harbour {i} ")).await;
            }
            store.kv_set("journal", "k", b"v").await.expect("kv");
        }
        let len = std::fs::metadata(&path).expect("meta").len();
        let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open");
        file.set_len(len * 2 / 3).expect("truncate");
        drop(file);

        let e = Store::open(&path).err().expect("a cut file is refused");
        let shown = e.to_string();
        assert!(
            shown.contains("state.db is damaged (the file was cut short") && shown.contains("doctor --repair"),
            "{shown}"
        );
        assert!(check(&path).expect("check").is_some_and(|d| d.contains("cut short")));

        let report = repair(&path).expect("repair");
        assert!(report.moved_to.to_string_lossy().contains("state.db.damaged-"), "{report:?}");
        assert!(report.moved_to.exists());
        assert!(report.sessions + report.stand_ins > 0 && report.messages > 0, "{report:?}");
        assert!(report.messages < 80, "some were lost with the cut: {report:?}");
        let store = Store::open(&path).expect("the new file opens");
        assert_eq!(check(&path).expect("check"), None);
        let sessions = store.list_sessions(100, 0).await.expect("list");
        assert_eq!(u64::try_from(sessions.len()).expect("n"), report.sessions + report.stand_ins);
        // What was recovered can be searched: the indexes were rebuilt.
        let hits = store.search(&crate::SearchQuery::new("harbour")).await.expect("search");
        assert!(!hits.is_empty());
    }

    /// A process that ends in the middle of a checkpoint leaves the file short of what its
    /// header counts, with every page still in the WAL: that is not damage, and all is there.
    #[test]
    fn a_checkpoint_cut_off_half_way_is_not_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (whole, path) = (dir.path().join("whole.db"), dir.path().join("state.db"));
        let conn = rusqlite::Connection::open(&whole).expect("open");
        conn.pragma_update(None, "journal_mode", "WAL").expect("wal");
        conn.pragma_update(None, "wal_autocheckpoint", 0).expect("no checkpoints");
        conn.execute_batch(
            "CREATE TABLE t(x BLOB);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
             INSERT INTO t SELECT zeroblob(3000) FROM n;",
        )
        .expect("rows");
        // Every page is in the WAL: take it as it stands, then the file a finished checkpoint
        // makes, and keep only that file's first pages.
        std::fs::copy(sidecar(&whole, "-wal"), sidecar(&path, "-wal")).expect("wal copy");
        conn.query_row("PRAGMA wal_checkpoint(FULL)", [], |_| Ok(())).expect("checkpoint");
        let full = std::fs::read(&whole).expect("read");
        assert!(full.len() > 8 * 4096, "{}", full.len());
        std::fs::write(&path, &full[..2 * 4096]).expect("cut");

        assert_eq!(check(&path).expect("check"), None);
        Store::open(&path).expect("opens");
        let reopened = rusqlite::Connection::open(&path).expect("open");
        let rows: i64 = reopened.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).expect("count");
        assert_eq!(rows, 40);
        assert_eq!(reopened.query_row("PRAGMA quick_check", [], |r| r.get::<_, String>(0)).expect("check"), "ok");
    }

    #[test]
    fn garbage_is_moved_aside_and_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.db");
        std::fs::write(&path, vec![0xAB; 8192]).expect("write");
        let e = Store::open(&path).err().expect("refused");
        assert!(e.to_string().contains("it is not an SQLite database"), "{e}");
        let report = repair(&path).expect("repair");
        assert_eq!((report.sessions, report.messages), (0, 0));
        assert_eq!(std::fs::read(&report.moved_to).expect("kept"), vec![0xAB; 8192]);
        Store::open(&path).expect("new file");
    }
}
