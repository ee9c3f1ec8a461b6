//! Session leases on SQLite, as [`crate::lease`] describes them: taking a lease reads the
//! current holder and writes the new one in one `BEGIN IMMEDIATE` transaction, so two processes
//! asking at once get one answer each.

use rusqlite::{Connection, OptionalExtension as _, params};

use super::{Cached as _, Sqlite};
use crate::Result;
use crate::lease::{LeaseHolder, Leased, Read, ReadBack, holds};
use crate::process::machine;

fn current(conn: &Connection, session_id: &str) -> Result<Option<LeaseHolder>> {
    Ok(conn
        .one(
            "SELECT pid, host, holder, acquired_at, expires_at FROM session_leases WHERE session_id = ?1",
            [session_id],
            |r| {
                Ok(LeaseHolder {
                    session_id: session_id.to_string(),
                    pid: r.get(0)?,
                    host: r.get(1)?,
                    holder: r.get(2)?,
                    acquired_at: r.get(3)?,
                    expires_at: r.get(4)?,
                })
            },
        )
        .optional()?)
}

/// The session's [`crate::Store::message_mark`].
fn mark(conn: &Connection, session_id: &str) -> Result<(i64, i64)> {
    let mut stmt =
        conn.prepare_cached("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM messages WHERE session_id = ?1 AND active")?;
    Ok(stmt.query_row([session_id], |r| Ok((r.get(0)?, r.get(1)?)))?)
}

impl Sqlite {
    /// Take the lease; with `marked`, also the session's mark once it is taken.
    pub(crate) fn try_lease(
        &self,
        session_id: &str,
        holder: &str,
        (now, expires): (i64, i64),
        read: Read,
        entry: Option<i64>,
    ) -> Result<(Leased, Option<ReadBack>)> {
        let me = machine();
        let pid = std::process::id();
        self.write(|tx| {
            if let Some(current) = current(tx, session_id)?
                && holds(&current, now, &me)
            {
                return Ok((Leased::Held(current), None));
            }
            let token = format!("{pid}-{:016x}", fastrand::u64(..));
            tx.run(
                "INSERT OR REPLACE INTO session_leases (session_id, token, pid, host, holder, acquired_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![session_id, token, pid, me, holder, now, expires],
            )?;
            if let Some(entry) = entry {
                super::inbox::started(tx, entry, session_id)?;
            }
            let back = match read {
                Read::Nothing => None,
                Read::Mark => Some((mark(tx, session_id)?, None)),
                Read::History => {
                    let history = super::sessions::history(tx, session_id)?;
                    Some((crate::lease::mark_of(&history.1), Some(history)))
                }
            };
            Ok((Leased::Granted(token), back))
        })
    }

    pub(crate) fn renew_lease(&self, session_id: &str, token: &str, expires: i64) -> Result<bool> {
        self.write(|tx| {
            let n = tx.run(
                "UPDATE session_leases SET expires_at = ?3 WHERE session_id = ?1 AND token = ?2",
                params![session_id, token, expires],
            )?;
            Ok(n == 1)
        })
    }

    pub(crate) fn release_lease(&self, session_id: &str, token: &str) -> Result<()> {
        self.write(|tx| super::release_lease_in(tx, session_id, token))
    }

    pub(crate) fn lease_holder(&self, session_id: &str) -> Result<Option<LeaseHolder>> {
        current(&self.conn(), session_id)
    }

    pub(crate) fn message_mark(&self, session_id: &str) -> Result<(i64, i64)> {
        mark(&self.conn(), session_id)
    }
}
