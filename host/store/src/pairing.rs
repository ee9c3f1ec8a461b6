//! Pairing chat-platform users with the gateway (table `pairings`): an unknown user who writes to
//! the bot in a direct message gets a short code; the owner approves it with
//! `talaria pairing approve CODE`, and from then on that user is answered.
//!
//! Codes are 8 characters from an alphabet without look-alikes (no 0/O, 1/I), drawn from the
//! operating system's CSPRNG, valid for [`PAIRING_TTL_MS`]. Asking again while a code is valid
//! gets the same code (no new one an hour per user), and at most [`MAX_PENDING`] codes are
//! waiting per platform: strangers cannot flood the owner's list. Revoking removes the pairing.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), talaria_store::Error> {
//! use talaria_store::pairing::Request;
//! let store = talaria_store::Store::open(std::path::Path::new("/tmp/state.db"))?;
//! let code = talaria_store::Store::new_pairing_code();
//! if let Request::New(code) = store.pairing_request("telegram", "4242", "Ana", &code).await? {
//!     // tell the user: "ask the owner to run `talaria pairing approve {code}`"
//! }
//! store.pairing_approve(&code).await?;
//! assert!(store.is_paired("telegram", "4242").await?);
//! # Ok(())
//! # }
//! ```

use rusqlite::{OptionalExtension, params};

use crate::{Error, Result, Store, now_ms};

/// How long a code can be approved.
pub const PAIRING_TTL_MS: i64 = 60 * 60 * 1000;
/// Codes waiting for approval at once, per platform.
pub const MAX_PENDING: i64 = 20;
/// The code alphabet: 32 characters, none mistaken for another.
const ALPHABET: &[u8; 32] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";

/// What a user asking to pair gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A new code, to pass on to the owner.
    New(String),
    /// The code given earlier, still valid.
    Pending(String),
    /// The user is paired already.
    Approved,
    /// Too many codes are waiting on this platform: try later.
    TooMany,
}

/// A pairing as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    pub platform: String,
    pub user_id: String,
    pub user_name: String,
    /// While waiting for approval.
    pub code: Option<String>,
    pub requested_at: i64,
    /// When the code stops being valid (milliseconds since the epoch).
    pub expires_at: i64,
    pub approved_at: Option<i64>,
}

impl Pairing {
    /// `approved`, `pending`, or `expired` at `now`.
    pub fn state(&self, now: i64) -> &'static str {
        match (self.approved_at, self.expires_at > now) {
            (Some(_), _) => "approved",
            (None, true) => "pending",
            (None, false) => "expired",
        }
    }
}

impl Store {
    /// A fresh pairing code from the operating system's CSPRNG.
    ///
    /// # Panics
    /// When the operating system has no randomness to give (it always has on Linux).
    pub fn new_pairing_code() -> String {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).expect("the operating system's random source");
        // 256 is a multiple of 32: every character is equally likely.
        bytes.iter().map(|b| char::from(ALPHABET[usize::from(*b) % 32])).collect()
    }

    /// `user_id` of `platform` asks to pair: `code` (from [`Store::new_pairing_code`]) is given
    /// unless the user has a valid one already, is paired, or too many are waiting.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn pairing_request(&self, platform: &str, user_id: &str, user_name: &str, code: &str) -> Result<Request> {
        if let Some(pg) = self.pg() {
            return pg.pairing_request(platform, user_id, user_name, code).await;
        }
        self.write(|tx| {
            let now = now_ms();
            let row: Option<(Option<String>, i64, Option<i64>)> = tx
                .query_row(
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
            let waiting: i64 = tx.query_row(
                "SELECT count(*) FROM pairings WHERE platform = ?1 AND approved_at IS NULL AND expires_at > ?2",
                params![platform, now],
                |r| r.get(0),
            )?;
            if waiting >= MAX_PENDING {
                return Ok(Request::TooMany);
            }
            tx.execute(
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

    /// Approve the pairing waiting under `code` (any letter case); returns it.
    ///
    /// # Errors
    /// [`Error::PairingNotFound`] when no valid code matches (unknown, already used, or expired).
    pub async fn pairing_approve(&self, code: &str) -> Result<Pairing> {
        let code = code.trim().to_ascii_uppercase();
        if let Some(pg) = self.pg() {
            return pg.pairing_approve(&code).await;
        }
        self.write(|tx| {
            let now = now_ms();
            let found = tx
                .query_row(
                    "SELECT platform, user_id FROM pairings
                     WHERE code = ?1 AND approved_at IS NULL AND expires_at > ?2",
                    params![code, now],
                    |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
                )
                .optional()?;
            let Some((platform, user_id)) = found else {
                return Err(Error::PairingNotFound { code: code.clone() });
            };
            tx.execute(
                "UPDATE pairings SET approved_at = ?3, code = NULL WHERE platform = ?1 AND user_id = ?2",
                params![platform, user_id, now],
            )?;
            pairing(tx, &platform, &user_id)?.ok_or_else(|| Error::PairingNotFound { code: code.clone() })
        })
    }

    /// Remove the pairing (or pending code) of `user_id` on `platform`; whether there was one.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn pairing_revoke(&self, platform: &str, user_id: &str) -> Result<bool> {
        if let Some(pg) = self.pg() {
            return pg.pairing_revoke(platform, user_id).await;
        }
        self.write(|tx| {
            Ok(tx.execute("DELETE FROM pairings WHERE platform = ?1 AND user_id = ?2", params![platform, user_id])? > 0)
        })
    }

    /// Whether `user_id` of `platform` is paired.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn is_paired(&self, platform: &str, user_id: &str) -> Result<bool> {
        if let Some(pg) = self.pg() {
            return pg.is_paired(platform, user_id).await;
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT 1 FROM pairings WHERE platform = ?1 AND user_id = ?2 AND approved_at IS NOT NULL",
        )?;
        Ok(stmt.query_row(params![platform, user_id], |_| Ok(())).optional()?.is_some())
    }

    /// Every pairing and code, newest request first.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn pairings(&self) -> Result<Vec<Pairing>> {
        if let Some(pg) = self.pg() {
            return pg.pairings().await;
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM pairings ORDER BY requested_at DESC"))?;
        let rows = stmt.query_map([], row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}

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

fn pairing(tx: &rusqlite::Transaction<'_>, platform: &str, user_id: &str) -> Result<Option<Pairing>> {
    Ok(tx
        .query_row(
            &format!("SELECT {COLUMNS} FROM pairings WHERE platform = ?1 AND user_id = ?2"),
            params![platform, user_id],
            row,
        )
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_use_the_whole_alphabet_and_nothing_else() {
        let codes: Vec<String> = (0..200).map(|_| Store::new_pairing_code()).collect();
        assert!(codes.iter().all(|c| c.len() == 8 && c.bytes().all(|b| ALPHABET.contains(&b))));
        assert!(codes.iter().all(|c| !c.contains(['0', 'O', '1', 'I'])));
        let distinct: std::collections::HashSet<&String> = codes.iter().collect();
        assert_eq!(distinct.len(), codes.len());
    }
}
