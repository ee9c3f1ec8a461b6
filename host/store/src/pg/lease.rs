//! Session leases on PostgreSQL, as [`crate::lease`] describes them. A free or expired lease is
//! taken by one `INSERT … ON CONFLICT` whose row lock orders the takers, so processes on any
//! machine asking at once get one answer each: one holds it, the others learn who does. Only a
//! lease left by a gone process of this machine needs a second look (its holder read, then taken
//! over on the token seen).

use super::{Cached as _, Pg, sql};
use crate::Result;
use crate::lease::{LeaseHolder, Leased, Read, ReadBack, holds};
use crate::process::machine;

/// The lease's holder, and its token.
async fn current(c: &impl deadpool_postgres::GenericClient, session_id: &str) -> Result<Option<(LeaseHolder, String)>> {
    let row = c
        .qopt(
            "SELECT pid, host, holder, acquired_at, expires_at, token FROM session_leases WHERE session_id = $1",
            &[&session_id],
        )
        .await
        .map_err(sql)?;
    Ok(row.map(|r| {
        let holder = LeaseHolder {
            session_id: session_id.to_string(),
            pid: u32::try_from(r.get::<_, i64>(0)).unwrap_or_default(),
            host: r.get(1),
            holder: r.get(2),
            acquired_at: r.get(3),
            expires_at: r.get(4),
        };
        (holder, r.get(5))
    }))
}

/// The session's [`crate::Store::message_mark`].
async fn mark(c: &impl deadpool_postgres::GenericClient, session_id: &str) -> Result<(i64, i64)> {
    let row = c.q1(&format!("SELECT {MARK}"), &[&session_id]).await.map_err(sql)?;
    Ok((row.get(0), row.get(1)))
}

/// What [`mark`] selects, for session `$1`: the session's tally of its active messages (kept
/// with every append and undo; counting them cost a long chat's turn a read of each of its
/// rows) and the newest active message, the last entry of the session's index.
const MARK: &str = "COALESCE((SELECT message_count FROM sessions WHERE id = $1), 0),
     COALESCE((SELECT id FROM messages WHERE session_id = $1 AND active ORDER BY id DESC LIMIT 1), 0)";

/// Inbox entry `$2` is answered by session `$1`'s turn, whose lease is held with token `$3`
/// (nothing happens when it is not: the take failed); the entry notes the session's tally as
/// the turn starts from it (see [`crate::Store::inbox_started`]).
///
/// The entry is found by its id alone: "not done" is written `IS DISTINCT FROM`, which does
/// not imply the predicate of the partial index `inbox_open` (`state <> 'done'`). With `<>`
/// the planner picked that index, which it believes holds only the open entries, and read all
/// of it for one id, the dead entries of every turn since the table was last vacuumed
/// included: 0.1 ms a turn more for about every thousand turns.
const STARTED: &str = "UPDATE inbox SET state = 'running', session_id = $1,
         started_count = COALESCE((SELECT message_count FROM sessions WHERE id = $1), 0)
     WHERE id = $2 AND state IS DISTINCT FROM 'done'
         AND EXISTS (SELECT 1 FROM session_leases WHERE session_id = $1 AND token = $3)";

/// An inbox entry to mark started once the lease is taken with `token`.
struct Start<'a> {
    entry: i64,
    token: &'a str,
}

/// Take a lease that is free or expired, in one statement: a row comes back when it is ours.
/// Takers asking at once are one answer each: the row's lock orders them, and each sees the
/// lease as the one before left it.
const TAKE_FREE: &str = "INSERT INTO session_leases (session_id, token, pid, host, holder, acquired_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (session_id) DO UPDATE SET token = excluded.token, pid = excluded.pid,
         host = excluded.host, holder = excluded.holder, acquired_at = excluded.acquired_at,
         expires_at = excluded.expires_at, wanted = false
     WHERE session_leases.expires_at <= excluded.acquired_at
     RETURNING 1";

/// Take over the lease from a holder that no longer holds it (a process of this machine that is
/// gone), unless it changed hands since its token `$8` was read.
const TAKE_OVER: &str = "UPDATE session_leases SET token = $2, pid = $3, host = $4, holder = $5, acquired_at = $6,
         expires_at = $7, wanted = false
     WHERE session_id = $1 AND token = $8";

/// How often a taker looks again when the lease changed hands while it looked.
const ATTEMPTS: usize = 8;

/// What a taker reads once the lease is ours, and the inbox entry it `start`s (in the read's
/// statement when it reads the mark, the most common case: one transaction for both).
async fn read_back(
    c: &impl deadpool_postgres::GenericClient,
    session_id: &str,
    read: Read,
    start: Option<Start<'_>>,
) -> Result<Option<ReadBack>> {
    if let (Read::Mark, Some(start)) = (read, &start) {
        let row = c
            .q1(&format!("WITH started AS ({STARTED}) SELECT {MARK}"), &[&session_id, &start.entry, &start.token])
            .await
            .map_err(sql)?;
        return Ok(Some(((row.get(0), row.get(1)), None)));
    }
    let started = async {
        match &start {
            Some(start) => c.exec(STARTED, &[&session_id, &start.entry, &start.token]).await.map(drop).map_err(sql),
            None => Ok(()),
        }
    };
    let read = async {
        Ok(match read {
            Read::Nothing => None,
            Read::Mark => Some((mark(c, session_id).await?, None)),
            Read::History => {
                let history = super::sessions::history(c, session_id)
                    .await?
                    .ok_or_else(|| crate::sessions::not_found(session_id))?;
                Some((crate::lease::mark_of(&history.1), Some(history)))
            }
        })
    };
    let (started, read) = tokio::join!(biased; started, read);
    started?;
    read
}

/// The lease taken with `token` and what was read with it; a session whose history was asked
/// for and is not there gets its lease back.
async fn granted(
    client: &deadpool_postgres::Client,
    session_id: &str,
    token: String,
    back: Result<Option<ReadBack>>,
) -> Result<(Leased, Option<ReadBack>)> {
    match back {
        Ok(back) => Ok((Leased::Granted(token), back)),
        Err(e) => {
            client
                .exec("DELETE FROM session_leases WHERE session_id = $1 AND token = $2", &[&session_id, &token])
                .await
                .map_err(sql)?;
            Err(e)
        }
    }
}

impl Pg {
    /// Take the lease; with `read`, also what it names once it is taken, and inbox entry
    /// `entry` marked started.
    ///
    /// A free lease is one round trip: its statement and the read go out together, each its own
    /// transaction, the read sent after the lease is taken so that it sees everything the holder
    /// before wrote (whose answer and release commit as one statement). The read is thrown away
    /// when the lease is held, and the entry is marked only when the lease is ours.
    pub(crate) async fn try_lease(
        &self,
        session_id: &str,
        holder: &str,
        (now, expires): (i64, i64),
        read: Read,
        entry: Option<i64>,
    ) -> Result<(Leased, Option<ReadBack>)> {
        let client = self.client().await?;
        let me = machine();
        let pid = std::process::id();
        let token = format!("{pid}-{:016x}", fastrand::u64(..));
        let pid = i64::from(pid);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
            [&session_id, &token, &pid, &me, &holder, &now, &expires];
        let start = || entry.map(|entry| Start { entry, token: &token });
        // Prepared first, so that the take's request goes out on its first poll, before the read's.
        let take = client.prepare_cached(TAKE_FREE).await.map_err(sql)?;
        let (taken, back) =
            tokio::join!(biased; client.query_opt(&take, &params), read_back(&client, session_id, read, start()));
        if taken.map_err(sql)?.is_some() {
            return granted(&client, session_id, token, back).await;
        }
        for _ in 0..ATTEMPTS {
            let taken = match current(&client, session_id).await? {
                Some((current, _)) if holds(&current, now, &me) => return Ok((Leased::Held(current), None)),
                Some((_, seen)) => {
                    let mut over = params.to_vec();
                    over.push(&seen);
                    client.exec(TAKE_OVER, &over).await.map_err(sql)? == 1
                }
                None => client.query_opt(&take, &params).await.map_err(sql)?.is_some(),
            };
            if taken {
                let back = read_back(&client, session_id, read, start()).await;
                return granted(&client, session_id, token, back).await;
            }
        }
        Err(crate::Error::Pg(format!(
            "the lease of session {session_id} changed hands {ATTEMPTS} times while it was taken"
        )))
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

    /// Ask to be told when the lease is given back with a turn's commit: whether it is still
    /// held (when not, there is nothing to wait for).
    pub(crate) async fn want_lease(&self, session_id: &str) -> Result<bool> {
        let client = self.client().await?;
        let n = client
            .exec("UPDATE session_leases SET wanted = true WHERE session_id = $1", &[&session_id])
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
        Ok(current(&client, session_id).await?.map(|(holder, _)| holder))
    }

    pub(crate) async fn message_mark(&self, session_id: &str) -> Result<(i64, i64)> {
        let client = self.client().await?;
        mark(&client, session_id).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::lease::Leased;
    use crate::process::machine;

    /// A lease left unexpired by a gone process of this machine is taken over on the token
    /// seen; one of a live process elsewhere is not.
    #[tokio::test]
    async fn a_lease_left_by_a_gone_process_here_is_taken_over_and_a_live_one_elsewhere_is_not() {
        let store = crate::pg::tests::store().await;
        let crate::Engine::Postgres(pg) = &store.engine else { panic!("a PostgreSQL store") };
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let dead = i64::from(child.id());
        child.wait().expect("wait");
        let client = pg.client().await.expect("client");
        for (session, pid, host) in [("here", dead, machine()), ("elsewhere", dead, "another-machine".to_string())] {
            client
                .execute(
                    "INSERT INTO session_leases VALUES ($1, 'left', $2, $3, 'gone', 0, $4)",
                    &[&session, &pid, &host, &i64::MAX],
                )
                .await
                .expect("plant");
        }
        let ttl = Duration::from_secs(30);
        let Leased::Granted(token) = store.try_lease("here", "me", ttl).await.expect("lease") else {
            panic!("a gone process's lease is taken over")
        };
        assert_ne!(token, "left");
        assert_eq!(store.lease_holder("here").await.expect("read").map(|h| h.holder), Some("me".to_string()));
        let Leased::Held(by) = store.try_lease("elsewhere", "me", ttl).await.expect("lease") else {
            panic!("another machine's process is not known to be gone")
        };
        assert_eq!((by.host.as_str(), by.holder.as_str()), ("another-machine", "gone"));
    }

    /// Marking an entry started finds it by its id, not by reading the index of open entries,
    /// whatever the statistics say of that index (here: no open entry at all).
    #[tokio::test]
    async fn an_entry_is_marked_started_by_its_id() {
        let store = crate::pg::tests::store().await;
        let crate::Engine::Postgres(pg) = &store.engine else { panic!("a PostgreSQL store") };
        let client = pg.client().await.expect("client");
        client
            .batch_execute(
                "INSERT INTO inbox (account, chat_id, session_key, message_id, kind, body, state, created_at)
                     SELECT 'a', 'c' || n % 50, 'k' || n % 50, 'm' || n, 'text', 'hi', 'done', 0
                     FROM generate_series(1, 5000) AS n;
                 ANALYZE inbox;",
            )
            .await
            .expect("plant");
        let plan: String = client
            .query(&format!("EXPLAIN {}", super::STARTED), &[&"s", &1_i64, &"t"])
            .await
            .expect("explain")
            .iter()
            .map(|r| r.get::<_, String>(0) + "\n")
            .collect();
        assert!(plan.contains("inbox_pkey"), "{plan}");
        assert!(!plan.contains("inbox_open"), "{plan}");
    }
}
