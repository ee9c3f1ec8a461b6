//! Plugin key-value data on SQLite, with the guarantees of [`crate::kv`]: every write is one
//! `BEGIN IMMEDIATE` transaction, so the ones that check before they write (the quota,
//! compare-and-set, increment) queue behind writers in other processes.

use rusqlite::{Connection, OptionalExtension, params};

use super::{Cached as _, Sqlite};
use crate::kv::{MAX_PLUGIN_BYTES, parse_counter};
use crate::{Error, Result};

/// The bytes a row takes against its plugin's quota: its key's and its value's.
const ROW_BYTES: &str = "length(CAST(key AS BLOB)) + length(value)";

/// Write `value` under `key` inside `tx`, if the plugin's quota allows it: what the plugin keeps
/// besides this key, plus this key and value, must stay within [`MAX_PLUGIN_BYTES`]. Replacing
/// a value with one no larger always fits, and skips summing the plugin's space.
fn put(tx: &Connection, plugin: &str, key: &str, value: &[u8]) -> Result<()> {
    let len = i64::try_from(key.len() + value.len()).unwrap_or(i64::MAX);
    let before: Option<i64> = tx
        .one(&format!("SELECT {ROW_BYTES} FROM plugin_kv WHERE plugin = ?1 AND key = ?2"), params![plugin, key], |r| {
            r.get(0)
        })
        .optional()?;
    if before.is_none_or(|before| len > before) {
        let used: i64 = tx.one(
            &format!("SELECT COALESCE(SUM({ROW_BYTES}), 0) FROM plugin_kv WHERE plugin = ?1 AND key <> ?2"),
            params![plugin, key],
            |r| r.get(0),
        )?;
        if used.saturating_add(len) > MAX_PLUGIN_BYTES {
            return Err(Error::QuotaExceeded);
        }
    }
    tx.run(
        "INSERT INTO plugin_kv (plugin, key, value) VALUES (?1, ?2, ?3)
         ON CONFLICT (plugin, key) DO UPDATE SET value = excluded.value, updated_at = unixepoch()",
        params![plugin, key, value],
    )?;
    Ok(())
}

impl Sqlite {
    pub(crate) fn kv_get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT value FROM plugin_kv WHERE plugin = ?1 AND key = ?2")?;
        Ok(stmt.query_row(params![plugin, key], |r| r.get(0)).optional()?)
    }

    pub(crate) fn kv_set(&self, plugin: &str, key: &str, value: &[u8]) -> Result<()> {
        self.write(|tx| put(tx, plugin, key, value))
    }

    pub(crate) fn kv_delete(&self, plugin: &str, key: &str) -> Result<()> {
        self.write(|tx| {
            tx.run("DELETE FROM plugin_kv WHERE plugin = ?1 AND key = ?2", params![plugin, key])?;
            Ok(())
        })
    }

    pub(crate) fn kv_compare_and_set(
        &self,
        plugin: &str,
        key: &str,
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        self.write(|tx| {
            let current: Option<Vec<u8>> = tx
                .one("SELECT value FROM plugin_kv WHERE plugin = ?1 AND key = ?2", params![plugin, key], |r| r.get(0))
                .optional()?;
            if current.as_deref() != expected {
                return Ok(false);
            }
            match new {
                Some(new) if Some(new) != expected => put(tx, plugin, key, new)?,
                Some(_) => {}
                None => {
                    tx.run("DELETE FROM plugin_kv WHERE plugin = ?1 AND key = ?2", params![plugin, key])?;
                }
            }
            Ok(true)
        })
    }

    pub(crate) fn kv_increment(&self, plugin: &str, key: &str, delta: i64) -> Result<i64> {
        self.write(|tx| {
            let current: Option<Vec<u8>> = tx
                .one("SELECT value FROM plugin_kv WHERE plugin = ?1 AND key = ?2", params![plugin, key], |r| r.get(0))
                .optional()?;
            let current = match current {
                None => 0,
                Some(bytes) => parse_counter(&bytes).ok_or_else(|| Error::NotACounter { key: key.to_string() })?,
            };
            let next = current.checked_add(delta).ok_or_else(|| Error::CounterOverflow {
                key: key.to_string(),
                value: current,
                delta,
            })?;
            put(tx, plugin, key, next.to_string().as_bytes())?;
            Ok(next)
        })
    }

    pub(crate) fn kv_clear(&self, plugin: &str) -> Result<u64> {
        self.write(|tx| Ok(tx.run("DELETE FROM plugin_kv WHERE plugin = ?1", params![plugin])? as u64))
    }

    pub(crate) fn kv_adopt(&self, from: &str, to: &str) -> Result<u64> {
        self.write(|tx| {
            let moved = tx.run(
                "UPDATE plugin_kv SET plugin = ?2 WHERE plugin = ?1 AND NOT EXISTS (SELECT 1 FROM plugin_kv WHERE plugin = ?2)",
                params![from, to],
            )?;
            Ok(moved as u64)
        })
    }

    pub(crate) fn kv_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT key FROM plugin_kv WHERE plugin = ?1 AND key >= ?2 ORDER BY key")?;
        let mut rows = stmt.query(params![plugin, prefix])?;
        let mut out = Vec::new();
        // Keys compare bytewise, so those starting with `prefix` come first, together.
        while let Some(row) = rows.next()? {
            let key: String = row.get(0)?;
            if !key.starts_with(prefix) {
                break;
            }
            out.push(key);
        }
        Ok(out)
    }

    pub(crate) fn kv_list(&self, plugin: &str, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT key, value FROM plugin_kv WHERE plugin = ?1 AND key >= ?2 ORDER BY key")?;
        let mut rows = stmt.query(params![plugin, prefix])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let key: String = row.get(0)?;
            if !key.starts_with(prefix) {
                break;
            }
            out.push((key, row.get(1)?));
        }
        Ok(out)
    }

    pub(crate) fn kv_usage(&self, plugin: &str) -> Result<(u64, u64)> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM plugin_kv WHERE plugin = ?1")?;
        let (keys, bytes): (i64, i64) = stmt.query_row(params![plugin], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok((keys.unsigned_abs(), bytes.unsigned_abs()))
    }
}
