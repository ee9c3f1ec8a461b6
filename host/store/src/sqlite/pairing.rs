//! Pairings on SQLite, as [`crate::pairing`] describes them: a request reads the user's
//! pairing and the platform's waiting codes and writes in one `BEGIN IMMEDIATE` transaction, so
//! gateway processes sharing the file agree.

use rusqlite::{Connection, OptionalExtension, params};

use super::{Cached as _, Sqlite};
use crate::pairing::{MAX_PENDING, PAIRING_TTL_MS, Pairing, Request};
use crate::{Error, Result, now_ms};

const COLUMNS: &str = "platform, user_id, user_name, code, requested_at, expires_at, approved_at";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Pairing> {
    Ok(Pairing {
        platform: r.get(0)?,
        user_id: r.get(1)?,
        user_name: r.get(2)?,
        code: r.get(3)?,
        requested_at: r.get(4)?,
        expires_at: r.get(5)?,
        approved_at: r.get(6)?,
    })
}

fn pairing(tx: &Connection, platform: &str, user_id: &str) -> Result<Option<Pairing>> {
    Ok(tx
        .one(
            &format!("SELECT {COLUMNS} FROM pairings WHERE platform = ?1 AND user_id = ?2"),
            params![platform, user_id],
            row,
        )
        .optional()?)
}

impl Sqlite {
    pub(crate) fn pairing_request(
        &self,
        platform: &str,
        user_id: &str,
        user_name: &str,
        code: &str,
    ) -> Result<Request> {
        self.write(|tx| {
            let now = now_ms();
            let row: Option<(Option<String>, i64, Option<i64>)> = tx
                .one(
                    "SELECT code, expires_at, approved_at FROM pairings WHERE platform = ?1 AND user_id = ?2",
                    params![platform, user_id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            match row {
                Some((_, _, Some(_))) => return Ok(Request::Approved),
                Some((Some(code), expires, None)) if expires > now => return Ok(Request::Pending(code)),
                _ => {}
            }
            let waiting: i64 = tx.one(
                "SELECT count(*) FROM pairings WHERE platform = ?1 AND approved_at IS NULL AND expires_at > ?2",
                params![platform, now],
                |r| r.get(0),
            )?;
            if waiting >= MAX_PENDING {
                return Ok(Request::TooMany);
            }
            tx.run(
                "INSERT INTO pairings (platform, user_id, user_name, code, requested_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (platform, user_id) DO UPDATE SET
                     user_name = excluded.user_name, code = excluded.code,
                     requested_at = excluded.requested_at, expires_at = excluded.expires_at",
                params![platform, user_id, user_name, code, now, now + PAIRING_TTL_MS],
            )?;
            Ok(Request::New(code.to_string()))
        })
    }

    pub(crate) fn pairing_approve(&self, code: &str) -> Result<Pairing> {
        self.write(|tx| {
            let now = now_ms();
            let found = tx
                .one(
                    "SELECT platform, user_id FROM pairings
                     WHERE code = ?1 AND approved_at IS NULL AND expires_at > ?2",
                    params![code, now],
                    |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
                )
                .optional()?;
            let Some((platform, user_id)) = found else {
                return Err(Error::PairingNotFound { code: code.to_string() });
            };
            tx.run(
                "UPDATE pairings SET approved_at = ?3, code = NULL WHERE platform = ?1 AND user_id = ?2",
                params![platform, user_id, now],
            )?;
            pairing(tx, &platform, &user_id)?.ok_or_else(|| Error::PairingNotFound { code: code.to_string() })
        })
    }

    pub(crate) fn pairing_revoke(&self, platform: &str, user_id: &str) -> Result<bool> {
        self.write(|tx| {
            Ok(tx.run("DELETE FROM pairings WHERE platform = ?1 AND user_id = ?2", params![platform, user_id])? > 0)
        })
    }

    pub(crate) fn is_paired(&self, platform: &str, user_id: &str) -> Result<bool> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT 1 FROM pairings WHERE platform = ?1 AND user_id = ?2 AND approved_at IS NOT NULL",
        )?;
        Ok(stmt.query_row(params![platform, user_id], |_| Ok(())).optional()?.is_some())
    }

    pub(crate) fn pairings(&self) -> Result<Vec<Pairing>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM pairings ORDER BY requested_at DESC"))?;
        let rows = stmt.query_map([], row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}
