//! Session leases on PostgreSQL, as [`crate::lease`] describes them. Taking a lease holds a
//! transaction-scoped advisory lock on the session's lease, so processes on any machine asking at
//! once get one answer each: one holds it, the others learn who does.

use deadpool_postgres::Transaction;

use super::{Cached as _, Pg, sql};
use crate::Result;
use crate::lease::{LeaseHolder, Leased, Read, ReadBack, holds};
use crate::process::machine;

async fn current(c: &impl deadpool_postgres::GenericClient, session_id: &str) -> Result<Option<LeaseHolder>> {
    let row = c
        .qopt(
            "SELECT pid, host, holder, acquired_at, expires_at FROM session_leases WHERE session_id = $1",
            &[&session_id],
        )
        .await
        .map_err(sql)?;
    Ok(row.map(|r| LeaseHolder {
        session_id: session_id.to_string(),
        pid: u32::try_from(r.get::<_, i64>(0)).unwrap_or_default(),
        host: r.get(1),
        holder: r.get(2),
        acquired_at: r.get(3),
        expires_at: r.get(4),
    }))
}

/// The session's [`crate::Store::message_mark`].
async fn mark(c: &impl deadpool_postgres::GenericClient, session_id: &str) -> Result<(i64, i64)> {
    let row = c
        .q1(
            "SELECT COUNT(*)::bigint, COALESCE(MAX(id), 0)::bigint FROM messages WHERE session_id = $1 AND active",
            &[&session_id],
        )
        .await
        .map_err(sql)?;
    Ok((row.get(0), row.get(1)))
}

async fn lock(tx: &Transaction<'_>, session_id: &str) -> Result<()> {
    tx.exec("SELECT pg_advisory_xact_lock(hashtextextended('talaria-lease:' || $1, 0))", &[&session_id])
        .await
        .map_err(sql)?;
    Ok(())
}

impl Pg {
    /// Take the lease; with `marked`, also the session's mark once it is taken.
    pub(crate) async fn try_lease(
        &self,
        session_id: &str,
        holder: &str,
        now: i64,
        expires: i64,
        read: Read,
    ) -> Result<(Leased, Option<ReadBack>)> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        // One after the other, not pipelined: a statement not yet prepared on this connection
        // would let the read overtake the lock, and two takers both find the lease free.
        lock(&tx, session_id).await?;
        let me = machine();
        if let Some(current) = current(&tx, session_id).await?
            && holds(&current, now, &me)
        {
            return Ok((Leased::Held(current), None));
        }
        let pid = std::process::id();
        let token = format!("{pid}-{:016x}", fastrand::u64(..));
        let pid = i64::from(pid);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
            [&session_id, &token, &pid, &me, &holder, &now, &expires];
        let take = tx.exec(
            "INSERT INTO session_leases (session_id, token, pid, host, holder, acquired_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (session_id) DO UPDATE SET token = excluded.token, pid = excluded.pid,
                 host = excluded.host, holder = excluded.holder, acquired_at = excluded.acquired_at,
                 expires_at = excluded.expires_at",
            &params,
        );
        // What is read with it goes out with it (one round trip; in either order, under the
        // lock).
        let read = async {
            Ok(match read {
                Read::Nothing => None,
                Read::Mark => Some((mark(&tx, session_id).await?, None)),
                Read::History => {
                    let history = super::sessions::history(&tx, session_id)
                        .await?
                        .ok_or_else(|| crate::sessions::not_found(session_id))?;
                    Some((crate::lease::mark_of(&history.1), Some(history)))
                }
            })
        };
        let (taken, back): (_, Result<_>) = tokio::join!(take, read);
        taken.map_err(sql)?;
        let back = back?;
        tx.commit().await.map_err(sql)?;
        Ok((Leased::Granted(token), back))
    }

    pub(crate) async fn renew_lease(&self, session_id: &str, token: &str, expires: i64) -> Result<bool> {
        let client = self.client().await?;
        let n = client
            .exec(
                "UPDATE session_leases SET expires_at = $3 WHERE session_id = $1 AND token = $2",
                &[&session_id, &token, &expires],
            )
            .await
            .map_err(sql)?;
        Ok(n == 1)
    }

    /// Give the lease back (when it is still ours) and send `notice`, in one statement.
    pub(crate) async fn release_lease(&self, session_id: &str, token: &str, notice: &str) -> Result<()> {
        let client = self.client().await?;
        super::release_lease_in(&client, session_id, token, notice).await
    }

    pub(crate) async fn lease_holder(&self, session_id: &str) -> Result<Option<LeaseHolder>> {
        let client = self.client().await?;
        current(&client, session_id).await
    }

    pub(crate) async fn message_mark(&self, session_id: &str) -> Result<(i64, i64)> {
        let client = self.client().await?;
        mark(&client, session_id).await
    }
}
