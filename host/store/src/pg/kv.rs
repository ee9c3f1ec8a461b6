//! Plugin key-value data on PostgreSQL, with the guarantees of [`crate::kv`]: every write is
//! one transaction, and the ones that check before they write (the quota, compare-and-set,
//! increment) first take a transaction-scoped advisory lock on the plugin's space, so writers in
//! other processes or on other machines queue behind them.

use deadpool_postgres::Transaction;

use super::{Cached as _, Pg, sql};
use crate::kv::{MAX_PLUGIN_BYTES, parse_counter};
use crate::{Error, Result};

/// The bytes a row takes against its plugin's quota.
const ROW_BYTES: &str = "octet_length(key) + octet_length(value)";

/// Queue behind other writers of `plugin`'s space until the transaction ends.
async fn lock_space(tx: &Transaction<'_>, plugin: &str) -> Result<()> {
    tx.exec("SELECT pg_advisory_xact_lock(hashtextextended('talaria-kv:' || $1, 0))", &[&plugin]).await.map_err(sql)?;
    Ok(())
}

async fn current(tx: &Transaction<'_>, plugin: &str, key: &str) -> Result<Option<Vec<u8>>> {
    let row =
        tx.qopt("SELECT value FROM plugin_kv WHERE plugin = $1 AND key = $2", &[&plugin, &key]).await.map_err(sql)?;
    Ok(row.map(|r| r.get(0)))
}

/// Write `value` under `key` within the plugin's quota; the space must be locked.
async fn put(tx: &Transaction<'_>, plugin: &str, key: &str, value: &[u8]) -> Result<()> {
    let len = i64::try_from(key.len() + value.len()).unwrap_or(i64::MAX);
    let before: Option<i32> = tx
        .qopt(&format!("SELECT {ROW_BYTES} FROM plugin_kv WHERE plugin = $1 AND key = $2"), &[&plugin, &key])
        .await
        .map_err(sql)?
        .map(|r| r.get(0));
    if before.is_none_or(|before| len > i64::from(before)) {
        let used: i64 = tx
            .q1(
                &format!("SELECT COALESCE(SUM({ROW_BYTES}), 0)::bigint FROM plugin_kv WHERE plugin = $1 AND key <> $2"),
                &[&plugin, &key],
            )
            .await
            .map_err(sql)?
            .get(0);
        if used.saturating_add(len) > MAX_PLUGIN_BYTES {
            return Err(Error::QuotaExceeded);
        }
    }
    tx.exec(
        "INSERT INTO plugin_kv (plugin, key, value) VALUES ($1, $2, $3)
         ON CONFLICT (plugin, key) DO UPDATE SET value = excluded.value,
             updated_at = extract(epoch FROM now())::bigint",
        &[&plugin, &key, &value],
    )
    .await
    .map_err(sql)?;
    Ok(())
}

impl Pg {
    pub(crate) async fn kv_get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let client = self.client().await?;
        let row = client
            .qopt("SELECT value FROM plugin_kv WHERE plugin = $1 AND key = $2", &[&plugin, &key])
            .await
            .map_err(sql)?;
        Ok(row.map(|r| r.get(0)))
    }

    pub(crate) async fn kv_set(&self, plugin: &str, key: &str, value: &[u8]) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        lock_space(&tx, plugin).await?;
        put(&tx, plugin, key, value).await?;
        tx.commit().await.map_err(sql)
    }

    pub(crate) async fn kv_delete(&self, plugin: &str, key: &str) -> Result<()> {
        let client = self.client().await?;
        client.exec("DELETE FROM plugin_kv WHERE plugin = $1 AND key = $2", &[&plugin, &key]).await.map_err(sql)?;
        Ok(())
    }

    pub(crate) async fn kv_compare_and_set(
        &self,
        plugin: &str,
        key: &str,
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        let (expected, new) = (expected.map(<[u8]>::to_vec), new.map(<[u8]>::to_vec));
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        lock_space(&tx, plugin).await?;
        if current(&tx, plugin, key).await? != expected {
            return Ok(false);
        }
        match &new {
            Some(new) if Some(new) != expected.as_ref() => put(&tx, plugin, key, new).await?,
            Some(_) => {}
            None => {
                tx.exec("DELETE FROM plugin_kv WHERE plugin = $1 AND key = $2", &[&plugin, &key]).await.map_err(sql)?;
            }
        }
        tx.commit().await.map_err(sql)?;
        Ok(true)
    }

    pub(crate) async fn kv_increment(&self, plugin: &str, key: &str, delta: i64) -> Result<i64> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        lock_space(&tx, plugin).await?;
        let value = match current(&tx, plugin, key).await? {
            None => 0,
            Some(bytes) => parse_counter(&bytes).ok_or_else(|| Error::NotACounter { key: key.to_string() })?,
        };
        let next =
            value.checked_add(delta).ok_or_else(|| Error::CounterOverflow { key: key.to_string(), value, delta })?;
        put(&tx, plugin, key, next.to_string().as_bytes()).await?;
        tx.commit().await.map_err(sql)?;
        Ok(next)
    }

    pub(crate) async fn kv_clear(&self, plugin: &str) -> Result<u64> {
        let client = self.client().await?;
        client.exec("DELETE FROM plugin_kv WHERE plugin = $1", &[&plugin]).await.map_err(sql)
    }

    pub(crate) async fn kv_adopt(&self, from: &str, to: &str) -> Result<u64> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        lock_space(&tx, to).await?;
        let moved = tx
            .exec(
                "UPDATE plugin_kv SET plugin = $2 WHERE plugin = $1
                 AND NOT EXISTS (SELECT 1 FROM plugin_kv WHERE plugin = $2)",
                &[&from, &to],
            )
            .await
            .map_err(sql)?;
        tx.commit().await.map_err(sql)?;
        Ok(moved)
    }

    /// Keys under `prefix` with their values, in byte order, read by one statement.
    pub(crate) async fn kv_list(&self, plugin: &str, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let client = self.client().await?;
        let rows = client
            .q(
                "SELECT key, value FROM plugin_kv WHERE plugin = $1 AND starts_with(key, $2)
                 ORDER BY key COLLATE \"C\"",
                &[&plugin, &prefix],
            )
            .await
            .map_err(sql)?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    pub(crate) async fn kv_keys(&self, plugin: &str, prefix: &str) -> Result<Vec<String>> {
        let client = self.client().await?;
        let rows = client
            .q(
                "SELECT key FROM plugin_kv WHERE plugin = $1 AND starts_with(key, $2) ORDER BY key COLLATE \"C\"",
                &[&plugin, &prefix],
            )
            .await
            .map_err(sql)?;
        Ok(rows.into_iter().map(|r| r.get(0)).collect())
    }

    pub(crate) async fn kv_usage(&self, plugin: &str) -> Result<(u64, u64)> {
        let client = self.client().await?;
        let row = client
            .q1(
                "SELECT COUNT(*)::bigint, COALESCE(SUM(octet_length(value)), 0)::bigint FROM plugin_kv WHERE plugin = $1",
                &[&plugin],
            )
            .await
            .map_err(sql)?;
        let (keys, bytes): (i64, i64) = (row.get(0), row.get(1));
        Ok((keys.unsigned_abs(), bytes.unsigned_abs()))
    }
}
