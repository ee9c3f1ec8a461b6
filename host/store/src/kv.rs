//! Each plugin's private key-value data (table `plugin_kv`), with per-value and per-plugin limits.
//!
//! ```no_run
//! let store = talaria_store::Store::open(std::path::Path::new("/tmp/state.db"))?;
//! store.kv_set("weather", "last_city", b"Lisbon")?;
//! assert_eq!(store.kv_get("weather", "last_city")?, Some(b"Lisbon".to_vec()));
//! # Ok::<(), talaria_store::Error>(())
//! ```

use rusqlite::{OptionalExtension, params};

use crate::{Error, Result, Store};

/// Most bytes one value may hold.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Most bytes (keys plus values) one plugin may keep.
pub const MAX_PLUGIN_BYTES: i64 = 10 * 1024 * 1024;
/// Longest key.
pub const MAX_KEY_BYTES: usize = 512;

impl Store {
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
        self.write(|tx| {
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
            Ok(())
        })
    }

    /// Remove `key`; a missing key is not an error.
    pub fn kv_delete(&self, plugin: &str, key: &str) -> Result<()> {
        check_key(key)?;
        self.write(|tx| {
            tx.execute("DELETE FROM plugin_kv WHERE plugin = ?1 AND key = ?2", params![plugin, key])?;
            Ok(())
        })
    }

    /// Remove everything in `plugin`'s space; returns how many keys there were.
    pub fn kv_clear(&self, plugin: &str) -> Result<u64> {
        self.write(|tx| Ok(tx.execute("DELETE FROM plugin_kv WHERE plugin = ?1", params![plugin])? as u64))
    }

    /// Move every entry of space `from` to space `to`, if `to` has none yet; how many moved.
    ///
    /// # Errors
    /// The database cannot be written.
    pub fn kv_adopt(&self, from: &str, to: &str) -> Result<u64> {
        self.write(|tx| {
            let moved = tx.execute(
                "UPDATE plugin_kv SET plugin = ?2 WHERE plugin = ?1 AND NOT EXISTS (SELECT 1 FROM plugin_kv WHERE plugin = ?2)",
                params![from, to],
            )?;
            Ok(moved as u64)
        })
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

    /// How many keys `plugin` stores, and their values' total size in bytes.
    pub fn kv_usage(&self, plugin: &str) -> Result<(u64, u64)> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM plugin_kv WHERE plugin = ?1")?;
        let (keys, bytes): (i64, i64) = stmt.query_row(params![plugin], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok((keys.unsigned_abs(), bytes.unsigned_abs()))
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
        assert_eq!(s.kv_usage("b").expect("usage"), (1, 3));
        assert_eq!(s.kv_usage("a").expect("usage"), (0, 0));
        s.kv_set("a", "x", b"1").expect("set");
        s.kv_set("a", "y", b"2").expect("set");
        assert_eq!(s.kv_clear("a").expect("clear"), 2);
        assert_eq!(s.kv_usage("a").expect("usage"), (0, 0));
        assert_eq!(s.kv_get("b", "k").expect("get"), Some(b"two".to_vec()), "other spaces are kept");
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
