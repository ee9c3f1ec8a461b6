//! talaria's state database: one SQLite file (`$TALARIA_HOME/state.db`) in WAL mode.
//!
//! It holds each plugin's private key-value data now; sessions and messages join it later.
//! Schema changes are numbered migrations applied on open. One connection is shared behind a
//! mutex: every operation here is a short statement.
//!
//! ```no_run
//! let store = talaria_store::Store::open(std::path::Path::new("/tmp/state.db"))?;
//! store.kv_set("weather", "last_city", b"Lisbon")?;
//! assert_eq!(store.kv_get("weather", "last_city")?, Some(b"Lisbon".to_vec()));
//! # Ok::<(), talaria_store::Error>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use rusqlite_migration::{M, Migrations};

/// Most bytes one value may hold.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Most bytes (keys plus values) one plugin may keep.
pub const MAX_PLUGIN_BYTES: i64 = 10 * 1024 * 1024;
/// Longest key.
pub const MAX_KEY_BYTES: usize = 512;

/// What can go wrong with the state database.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("state database {path}: {source}")]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error("state database migration failed: {0}")]
    Migrate(#[from] rusqlite_migration::Error),
    #[error("state database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("key is empty or longer than {MAX_KEY_BYTES} bytes")]
    BadKey,
    #[error("value of {0} bytes is larger than the {MAX_VALUE_BYTES}-byte limit")]
    ValueTooLarge(usize),
    #[error("plugin storage quota of {MAX_PLUGIN_BYTES} bytes would be exceeded")]
    QuotaExceeded,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn migrations() -> Migrations<'static> {
    Migrations::new(vec![M::up(
        "CREATE TABLE plugin_kv (
            plugin TEXT NOT NULL,
            key    TEXT NOT NULL,
            value  BLOB NOT NULL,
            updated_at INTEGER NOT NULL DEFAULT (unixepoch()),
            PRIMARY KEY (plugin, key)
        ) WITHOUT ROWID;",
    )])
}

/// The open state database.
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
    /// Open (creating if needed) the database at `path` and bring its schema up to date.
    ///
    /// # Errors
    /// The file cannot be opened, is not a database, or a migration fails.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::Open {
                path: path.to_path_buf(),
                source: rusqlite::Error::ToSqlConversionFailure(Box::new(e)),
            })?;
        }
        let mut conn = Connection::open(path).map_err(|source| Error::Open { path: path.to_path_buf(), source })?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        migrations().to_latest(&mut conn)?;
        Ok(Self { conn: Mutex::new(conn) })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves the connection itself usable.
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The value under `key` in `plugin`'s space.
    pub fn kv_get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT value FROM plugin_kv WHERE plugin = ?1 AND key = ?2")?;
        Ok(stmt.query_row(params![plugin, key], |r| r.get(0)).optional()?)
    }

    /// Store `value` under `key`, within the value size limit and the plugin's quota.
    pub fn kv_set(&self, plugin: &str, key: &str, value: &[u8]) -> Result<()> {
        check_key(key)?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(Error::ValueTooLarge(value.len()));
        }
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let used: i64 = tx.query_row(
            "SELECT COALESCE(SUM(length(key) + length(value)), 0) FROM plugin_kv WHERE plugin = ?1 AND key <> ?2",
            params![plugin, key],
            |r| r.get(0),
        )?;
        let len = i64::try_from(key.len() + value.len()).unwrap_or(i64::MAX);
        if used.saturating_add(len) > MAX_PLUGIN_BYTES {
            return Err(Error::QuotaExceeded);
        }
        tx.execute(
            "INSERT INTO plugin_kv (plugin, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (plugin, key) DO UPDATE SET value = excluded.value, updated_at = unixepoch()",
            params![plugin, key, value],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Remove `key`; a missing key is not an error.
    pub fn kv_delete(&self, plugin: &str, key: &str) -> Result<()> {
        check_key(key)?;
        self.conn().execute("DELETE FROM plugin_kv WHERE plugin = ?1 AND key = ?2", params![plugin, key])?;
        Ok(())
    }

    /// Keys in `plugin`'s space starting with `prefix`, sorted.
    pub fn kv_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT key FROM plugin_kv WHERE plugin = ?1 ORDER BY key")?;
        let keys = stmt.query_map(params![plugin], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for key in keys {
            let key = key?;
            if key.starts_with(prefix) {
                out.push(key);
            }
        }
        Ok(out)
    }
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Error::BadKey);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("state.db")).expect("open");
        (dir, store)
    }

    #[test]
    fn values_are_scoped_to_their_plugin() {
        let (_dir, s) = store();
        s.kv_set("a", "k", b"one").expect("set");
        s.kv_set("b", "k", b"two").expect("set");
        assert_eq!(s.kv_get("a", "k").expect("get"), Some(b"one".to_vec()));
        assert_eq!(s.kv_get("b", "k").expect("get"), Some(b"two".to_vec()));
        assert_eq!(s.kv_get("c", "k").expect("get"), None);
        s.kv_delete("a", "k").expect("delete");
        assert_eq!(s.kv_get("a", "k").expect("get"), None);
        assert_eq!(s.kv_get("b", "k").expect("get"), Some(b"two".to_vec()));
    }

    #[test]
    fn values_survive_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.db");
        Store::open(&path).expect("open").kv_set("p", "k", b"v").expect("set");
        assert_eq!(Store::open(&path).expect("reopen").kv_get("p", "k").expect("get"), Some(b"v".to_vec()));
    }

    #[test]
    fn keys_are_listed_by_prefix_in_order() {
        let (_dir, s) = store();
        for k in ["b/2", "a/1", "b/1", "c"] {
            s.kv_set("p", k, b"x").expect("set");
        }
        assert_eq!(s.kv_keys("p", "b/").expect("keys"), vec!["b/1", "b/2"]);
        assert_eq!(s.kv_keys("p", "").expect("keys").len(), 4);
    }

    #[test]
    fn limits_are_enforced() {
        let (_dir, s) = store();
        assert!(matches!(s.kv_set("p", "", b"x"), Err(Error::BadKey)));
        let big = vec![0u8; MAX_VALUE_BYTES + 1];
        assert!(matches!(s.kv_set("p", "k", &big), Err(Error::ValueTooLarge(n)) if n == MAX_VALUE_BYTES + 1));
        let chunk = vec![0u8; MAX_VALUE_BYTES];
        for i in 0..9 {
            s.kv_set("p", &format!("k{i}"), &chunk).expect("within quota");
        }
        assert!(matches!(s.kv_set("p", "k9", &chunk), Err(Error::QuotaExceeded)));
        // Replacing an existing value counts only the new size.
        s.kv_set("p", "k0", &chunk).expect("replace within quota");
        // Another plugin has its own quota.
        s.kv_set("q", "k", &chunk).expect("other plugin");
    }
}
