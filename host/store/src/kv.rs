//! Each plugin's private key-value data (table `plugin_kv`), with per-value and per-plugin limits.
//!
//! Several talaria processes (a REPL, a `chat -q`, a gateway) may run the same plugin against the
//! same file at once, so every operation is atomic on its own, and the ones a store with several
//! writers needs are here as single transactions (`BEGIN IMMEDIATE`: writers queue on the
//! database's write lock, across processes):
//!
//! 1. [`Store::kv_compare_and_set`] changes a value only if it still is what the caller read;
//! 2. [`Store::kv_increment`] adds to a counter and returns the new value, so two writers never
//!    get the same number (counters are stored as decimal ASCII text: `get` reads `b"42"`);
//! 3. [`Store::kv_list`] reads every key under a prefix with its value, all at one instant.
//!
//! A read followed by a [`Store::kv_set`] is *not* atomic: another writer may have changed the
//! value in between. Every write that adds bytes is checked against the same limits: a key of
//! 1 to [`MAX_KEY_BYTES`] bytes, a value of at most [`MAX_VALUE_BYTES`], and at most
//! [`MAX_PLUGIN_BYTES`] of keys and values per plugin.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), talaria_store::Error> {
//! let store = talaria_store::Store::open(std::path::Path::new("/tmp/state.db"))?;
//! store.kv_set("weather", "last_city", b"Lisbon").await?;
//! assert_eq!(store.kv_get("weather", "last_city").await?, Some(b"Lisbon".to_vec()));
//! // A unique number, whichever process asks.
//! let id = store.kv_increment("journal", "next-id", 1).await?;
//! // Create a key only if nobody else did.
//! let created = store.kv_compare_and_set("journal", &format!("e/{id}"), None, Some(b"{}")).await?;
//! assert!(created);
//! assert_eq!(store.kv_list("journal", "e/").await?, vec![(format!("e/{id}"), b"{}".to_vec())]);
//! # Ok(())
//! # }
//! ```

use crate::{Engine, Error, Result, Store};

/// Most bytes one value may hold.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Most bytes (keys plus values) one plugin may keep.
pub const MAX_PLUGIN_BYTES: i64 = 10 * 1024 * 1024;
/// Longest key.
pub const MAX_KEY_BYTES: usize = 512;

impl Store {
    /// The value under `key` in `plugin`'s space.
    ///
    /// # Errors
    /// The key is empty or too long, or the database cannot be read.
    pub async fn kv_get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.kv_get(plugin, key),
            Engine::Postgres(pg) => pg.kv_get(plugin, key).await,
        }
    }

    /// Store `value` under `key`, within the value size limit and the plugin's quota.
    ///
    /// # Errors
    /// The key or value is out of bounds, the quota would be exceeded, or the database cannot
    /// be written.
    pub async fn kv_set(&self, plugin: &str, key: &str, value: &[u8]) -> Result<()> {
        self.traced("kv_set", async {
            check_key(key)?;
            check_value(value)?;
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.kv_set(plugin, key, value),
                Engine::Postgres(pg) => pg.kv_set(plugin, key, value).await,
            }
        })
        .await
    }

    /// Remove `key`; a missing key is not an error.
    ///
    /// # Errors
    /// The key is empty or too long, or the database cannot be written.
    pub async fn kv_delete(&self, plugin: &str, key: &str) -> Result<()> {
        self.traced("kv_delete", async {
            check_key(key)?;
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.kv_delete(plugin, key),
                Engine::Postgres(pg) => pg.kv_delete(plugin, key).await,
            }
        })
        .await
    }

    /// Atomically: if the value under `key` is `expected` (`None`: the key is absent), make it
    /// `new` (`None`: delete the key) and return `true`; otherwise change nothing and return
    /// `false`. `expected` and `new` both `None` asks whether the key is absent.
    ///
    /// # Errors
    /// The key or the new value is out of bounds, the quota would be exceeded, or the database
    /// cannot be written.
    pub async fn kv_compare_and_set(
        &self,
        plugin: &str,
        key: &str,
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        self.traced("kv_compare_and_set", async {
            check_key(key)?;
            if let Some(new) = new {
                check_value(new)?;
            }
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.kv_compare_and_set(plugin, key, expected, new),
                Engine::Postgres(pg) => pg.kv_compare_and_set(plugin, key, expected, new).await,
            }
        })
        .await
    }

    /// Atomically add `delta` to the counter under `key` and return its new value; a missing
    /// key counts as 0. The counter is stored as its decimal ASCII text (`-` first when
    /// negative), so [`Store::kv_get`] reads `b"42"`, and a value written that way with
    /// [`Store::kv_set`] or [`Store::kv_compare_and_set`] is a counter too.
    ///
    /// # Errors
    /// The key is out of bounds, holds something that is not such a number
    /// ([`Error::NotACounter`]), the sum leaves the 64-bit range ([`Error::CounterOverflow`]),
    /// the quota would be exceeded, or the database cannot be written.
    pub async fn kv_increment(&self, plugin: &str, key: &str, delta: i64) -> Result<i64> {
        self.traced("kv_increment", async {
            check_key(key)?;
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.kv_increment(plugin, key, delta),
                Engine::Postgres(pg) => pg.kv_increment(plugin, key, delta).await,
            }
        })
        .await
    }

    /// Remove everything in `plugin`'s space; returns how many keys there were.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn kv_clear(&self, plugin: &str) -> Result<u64> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.kv_clear(plugin),
            Engine::Postgres(pg) => pg.kv_clear(plugin).await,
        }
    }

    /// Move every entry of space `from` to space `to`, if `to` has none yet; how many moved.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn kv_adopt(&self, from: &str, to: &str) -> Result<u64> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.kv_adopt(from, to),
            Engine::Postgres(pg) => pg.kv_adopt(from, to).await,
        }
    }

    /// Keys in `plugin`'s space starting with `prefix`, sorted.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn kv_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.kv_keys(plugin, prefix),
            Engine::Postgres(pg) => pg.kv_keys(plugin, prefix).await,
        }
    }

    /// Keys in `plugin`'s space starting with `prefix`, sorted, each with its value, all read
    /// at one instant (one statement: a write by another process is seen whole or not at all).
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn kv_list(&self, plugin: &str, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.kv_list(plugin, prefix),
            Engine::Postgres(pg) => pg.kv_list(plugin, prefix).await,
        }
    }

    /// How many keys `plugin` stores, and their values' total size in bytes.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn kv_usage(&self, plugin: &str) -> Result<(u64, u64)> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.kv_usage(plugin),
            Engine::Postgres(pg) => pg.kv_usage(plugin).await,
        }
    }
}

/// A counter's value: decimal ASCII digits, `-` first when negative, nothing else.
pub(crate) fn parse_counter(bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Error::BadKey);
    }
    Ok(())
}

fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::ValueTooLarge(value.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each case runs on SQLite and on a real PostgreSQL.
    on_both_engines!(
        values_are_scoped_to_their_plugin,
        keys_are_listed_by_prefix_in_order,
        limits_are_enforced,
        compare_and_set_changes_only_what_was_expected,
        increment_counts_from_zero_in_decimal_text,
        list_returns_keys_under_a_prefix_with_their_values,
        the_new_writes_keep_the_same_limits
    );

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("state.db")).expect("open");
        (dir, store)
    }

    async fn values_are_scoped_to_their_plugin(s: &Store) {
        s.kv_set("a", "k", b"one").await.expect("set");
        s.kv_set("b", "k", b"two").await.expect("set");
        assert_eq!(s.kv_get("a", "k").await.expect("get"), Some(b"one".to_vec()));
        assert_eq!(s.kv_get("b", "k").await.expect("get"), Some(b"two".to_vec()));
        assert_eq!(s.kv_get("c", "k").await.expect("get"), None);
        s.kv_delete("a", "k").await.expect("delete");
        assert_eq!(s.kv_get("a", "k").await.expect("get"), None);
        assert_eq!(s.kv_get("b", "k").await.expect("get"), Some(b"two".to_vec()));
        assert_eq!(s.kv_usage("b").await.expect("usage"), (1, 3));
        assert_eq!(s.kv_usage("a").await.expect("usage"), (0, 0));
        s.kv_set("a", "x", b"1").await.expect("set");
        s.kv_set("a", "y", b"2").await.expect("set");
        assert_eq!(s.kv_clear("a").await.expect("clear"), 2);
        assert_eq!(s.kv_usage("a").await.expect("usage"), (0, 0));
        assert_eq!(s.kv_get("b", "k").await.expect("get"), Some(b"two".to_vec()), "other spaces are kept");
    }

    #[tokio::test]
    async fn values_survive_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.db");
        Store::open(&path).expect("open").kv_set("p", "k", b"v").await.expect("set");
        assert_eq!(Store::open(&path).expect("reopen").kv_get("p", "k").await.expect("get"), Some(b"v".to_vec()));
    }

    async fn keys_are_listed_by_prefix_in_order(s: &Store) {
        for k in ["b/2", "a/1", "b/1", "c"] {
            s.kv_set("p", k, b"x").await.expect("set");
        }
        assert_eq!(s.kv_keys("p", "b/").await.expect("keys"), vec!["b/1", "b/2"]);
        assert_eq!(s.kv_keys("p", "").await.expect("keys").len(), 4);
    }

    async fn limits_are_enforced(s: &Store) {
        assert!(matches!(s.kv_set("p", "", b"x").await, Err(Error::BadKey)));
        let big = vec![0u8; MAX_VALUE_BYTES + 1];
        assert!(matches!(s.kv_set("p", "k", &big).await, Err(Error::ValueTooLarge(n)) if n == MAX_VALUE_BYTES + 1));
        let chunk = vec![0u8; MAX_VALUE_BYTES];
        for i in 0..9 {
            s.kv_set("p", &format!("k{i}"), &chunk).await.expect("within quota");
        }
        assert!(matches!(s.kv_set("p", "k9", &chunk).await, Err(Error::QuotaExceeded)));
        // Replacing an existing value counts only the new size.
        s.kv_set("p", "k0", &chunk).await.expect("replace within quota");
        // Another plugin has its own quota.
        s.kv_set("q", "k", &chunk).await.expect("other plugin");
    }

    async fn compare_and_set_changes_only_what_was_expected(s: &Store) {
        // From nothing: creates once.
        assert!(s.kv_compare_and_set("p", "k", None, Some(b"one")).await.expect("cas"));
        assert!(!s.kv_compare_and_set("p", "k", None, Some(b"other")).await.expect("cas"), "the key exists now");
        assert_eq!(s.kv_get("p", "k").await.expect("get"), Some(b"one".to_vec()));
        // A stale expectation changes nothing.
        assert!(!s.kv_compare_and_set("p", "k", Some(b"zero"), Some(b"two")).await.expect("cas"));
        assert_eq!(s.kv_get("p", "k").await.expect("get"), Some(b"one".to_vec()));
        assert!(s.kv_compare_and_set("p", "k", Some(b"one"), Some(b"two")).await.expect("cas"));
        assert_eq!(s.kv_get("p", "k").await.expect("get"), Some(b"two".to_vec()));
        // Same value: succeeds, nothing to write.
        assert!(s.kv_compare_and_set("p", "k", Some(b"two"), Some(b"two")).await.expect("cas"));
        // To nothing: deletes, only when it matches.
        assert!(!s.kv_compare_and_set("p", "k", Some(b"one"), None).await.expect("cas"));
        assert!(s.kv_compare_and_set("p", "k", Some(b"two"), None).await.expect("cas"));
        assert_eq!(s.kv_get("p", "k").await.expect("get"), None);
        // Both none: "is it absent?".
        assert!(s.kv_compare_and_set("p", "k", None, None).await.expect("cas"));
        assert_eq!(s.kv_usage("p").await.expect("usage"), (0, 0));
        // Another plugin's key of the same name is another key.
        s.kv_set("q", "k", b"theirs").await.expect("set");
        assert!(s.kv_compare_and_set("p", "k", None, Some(b"mine")).await.expect("cas"));
        assert_eq!(s.kv_get("q", "k").await.expect("get"), Some(b"theirs".to_vec()));
    }

    async fn increment_counts_from_zero_in_decimal_text(s: &Store) {
        assert_eq!(s.kv_increment("p", "n", 1).await.expect("inc"), 1);
        assert_eq!(s.kv_increment("p", "n", 41).await.expect("inc"), 42);
        assert_eq!(s.kv_get("p", "n").await.expect("get"), Some(b"42".to_vec()));
        assert_eq!(s.kv_increment("p", "n", -50).await.expect("inc"), -8);
        assert_eq!(s.kv_get("p", "n").await.expect("get"), Some(b"-8".to_vec()));
        assert_eq!(s.kv_increment("p", "n", 0).await.expect("read"), -8, "adding 0 reads the counter");
        assert_eq!(s.kv_increment("q", "n", 5).await.expect("inc"), 5, "counters are per plugin");
        // A value written by hand in the same form is a counter too.
        s.kv_set("p", "m", b"100").await.expect("set");
        assert_eq!(s.kv_increment("p", "m", 1).await.expect("inc"), 101);
        for bad in [&b"ten"[..], b"", b"+1", b"1.5", b" 1", b"-", b"99999999999999999999"] {
            s.kv_set("p", "bad", bad).await.expect("set");
            let e = s.kv_increment("p", "bad", 1).await.expect_err("not a counter");
            assert!(matches!(&e, Error::NotACounter { key } if key == "bad"), "{e}");
            assert!(e.to_string().contains("delete the key or count under another one"), "{e}");
            assert_eq!(s.kv_get("p", "bad").await.expect("get"), Some(bad.to_vec()), "left as it was");
        }
        s.kv_set("p", "big", i64::MAX.to_string().as_bytes()).await.expect("set");
        let e = s.kv_increment("p", "big", 1).await.expect_err("overflow");
        assert!(matches!(e, Error::CounterOverflow { value: i64::MAX, delta: 1, .. }), "{e}");
        assert_eq!(s.kv_increment("p", "big", -1).await.expect("inc"), i64::MAX - 1);
    }

    async fn list_returns_keys_under_a_prefix_with_their_values(s: &Store) {
        for (k, v) in [("e/2", "two"), ("e/1", "one"), ("e", "bare"), ("f/1", "f"), ("e/10", "ten"), ("d", "d")] {
            s.kv_set("p", k, v.as_bytes()).await.expect("set");
        }
        s.kv_set("q", "e/9", b"other plugin").await.expect("set");
        let listed = s.kv_list("p", "e/").await.expect("list");
        let pairs: Vec<(&str, &[u8])> = listed.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
        assert_eq!(pairs, [("e/1", &b"one"[..]), ("e/10", b"ten"), ("e/2", b"two")]);
        assert_eq!(s.kv_list("p", "").await.expect("list").len(), 6);
        assert_eq!(s.kv_list("p", "e").await.expect("list").len(), 4);
        assert!(s.kv_list("p", "zz").await.expect("list").is_empty());
        assert!(s.kv_list("nobody", "").await.expect("list").is_empty());
        assert_eq!(s.kv_keys("p", "e").await.expect("keys"), ["e", "e/1", "e/10", "e/2"]);
    }

    async fn the_new_writes_keep_the_same_limits(s: &Store) {
        let long_key = "k".repeat(MAX_KEY_BYTES + 1);
        assert!(matches!(s.kv_compare_and_set("p", "", None, Some(b"x")).await, Err(Error::BadKey)));
        assert!(matches!(s.kv_compare_and_set("p", &long_key, None, None).await, Err(Error::BadKey)));
        assert!(matches!(s.kv_increment("p", &long_key, 1).await, Err(Error::BadKey)));
        let big = vec![0u8; MAX_VALUE_BYTES + 1];
        let e = s.kv_compare_and_set("p", "k", None, Some(&big)).await.expect_err("too large");
        assert_eq!(
            e.to_string(),
            format!("value of {} bytes is larger than the {MAX_VALUE_BYTES}-byte limit", big.len())
        );
        let chunk = vec![0u8; MAX_VALUE_BYTES];
        for i in 0..9 {
            assert!(s.kv_compare_and_set("p", &format!("k{i}"), None, Some(&chunk)).await.expect("within quota"));
        }
        // Almost full: a new value or counter that does not fit is refused like a set.
        let near = vec![0u8; MAX_VALUE_BYTES - 64];
        s.kv_set("p", "k9", &near).await.expect("fills the quota");
        assert!(matches!(s.kv_compare_and_set("p", "k10", None, Some(&chunk)).await, Err(Error::QuotaExceeded)));
        assert_eq!(s.kv_get("p", "k10").await.expect("get"), None);
        let e = s.kv_increment("p", &"c".repeat(200), 1).await.expect_err("no room");
        assert_eq!(e.to_string(), format!("plugin storage quota of {MAX_PLUGIN_BYTES} bytes would be exceeded"));
        // Shrinking and deleting always fit.
        assert!(s.kv_compare_and_set("p", "k0", Some(&chunk), Some(b"small")).await.expect("shrink"));
        assert!(s.kv_compare_and_set("p", "k1", Some(&chunk), None).await.expect("delete"));
        assert_eq!(s.kv_increment("p", "n", 1).await.expect("room again"), 1);
    }
}
