//! One writer per session: a process answering a session holds its lease.
//!
//! A lease is a row naming the process (pid, host, what it is) with an expiry. The holder renews
//! it while it works and deletes it when done; a process that dies without deleting it loses it
//! when it expires, or at once when it ran on this machine and its pid is gone. Everything
//! happens in `BEGIN IMMEDIATE` transactions, so two processes asking at the same moment get
//! one answer each: one holds it, the other learns who does.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use talaria_store::{NewSession, Store};
//! use talaria_store::lease::Leased;
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(&dir.path().join("state.db"))?;
//! let ttl = Duration::from_secs(30);
//! let Leased::Granted(token) = store.try_lease("s1", "talaria chat", ttl).await? else { panic!() };
//! let Leased::Held(by) = store.try_lease("s1", "talaria chat -q", ttl).await? else { panic!() };
//! assert_eq!(by.pid, std::process::id());
//! store.release_lease("s1", &token).await?;
//! assert!(matches!(store.try_lease("s1", "talaria chat -q", ttl).await?, Leased::Granted(_)));
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use crate::process::{alive, machine};
use crate::sessions::RawMessage;
use crate::{Engine, Result, Store, StoredMessage, now_ms};

/// Who holds a session's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub session_id: String,
    pub pid: u32,
    pub host: String,
    /// What the holder is, e.g. `talaria chat -q`.
    pub holder: String,
    /// Milliseconds since the Unix epoch.
    pub acquired_at: i64,
    pub expires_at: i64,
}

impl std::fmt::Display for LeaseHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let since = jiff::Timestamp::from_millisecond(self.acquired_at)
            .map(|t| t.to_zoned(crate::local_time::zone()).strftime("%H:%M:%S").to_string())
            .unwrap_or_default();
        write!(f, "{} (pid {} on {}, since {since})", self.holder, self.pid, self.host)
    }
}

/// What [`Store::try_lease_marked`] read in the transaction that granted the lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Marked {
    /// The session's [`Store::message_mark`].
    pub mark: (i64, i64),
    /// Its system prompt and active messages, when asked for.
    pub history: Option<(String, Vec<StoredMessage>)>,
}

/// What the engines read with a lease they grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    Nothing,
    Mark,
    History,
}

/// The mark, and the system prompt and messages when asked for.
pub(crate) type ReadBack = ((i64, i64), Option<(String, Vec<RawMessage>)>);

/// The mark of a session whose active messages, oldest first, are `messages`.
pub(crate) fn mark_of(messages: &[RawMessage]) -> (i64, i64) {
    (i64::try_from(messages.len()).unwrap_or(i64::MAX), messages.last().map_or(0, |m| m.id))
}

/// The answer to [`Store::try_lease`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leased {
    /// The lease is yours; keep the token to renew and release it.
    Granted(String),
    /// Someone else holds it.
    Held(LeaseHolder),
}

impl Store {
    /// Take the lease of `session_id` for `ttl`, unless a live holder has it. `holder` says what
    /// this process is, for the message another process will show.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn try_lease(&self, session_id: &str, holder: &str, ttl: Duration) -> Result<Leased> {
        Ok(self.take_lease(session_id, holder, ttl, Read::Nothing).await?.0)
    }

    /// [`Store::try_lease`]; when granted, also the session's [`Store::message_mark`] (and,
    /// with `history`, its [`Store::history`]), read in the same transaction: a turn learns
    /// whether another process wrote the session since it last looked, and a session that
    /// rested gets its history back, with no second round trip.
    ///
    /// # Errors
    /// The database cannot be written; with `history`, [`crate::Error::SessionNotFound`] (and
    /// the lease is not taken).
    pub async fn try_lease_marked(
        &self,
        session_id: &str,
        holder: &str,
        ttl: Duration,
        history: bool,
    ) -> Result<(Leased, Option<Marked>)> {
        self.traced("try_lease_marked", async {
            let read = if history { Read::History } else { Read::Mark };
            let (leased, read) = self.take_lease(session_id, holder, ttl, read).await?;
            let marked = match read {
                Some((mark, None)) => Some(Marked { mark, history: None }),
                Some((mark, Some((prompt, raw)))) => {
                    let stored = raw.into_iter().map(RawMessage::into_stored).collect::<Result<_>>()?;
                    Some(Marked { mark, history: Some((prompt, stored)) })
                }
                None => None,
            };
            Ok((leased, marked))
        })
        .await
    }

    async fn take_lease(
        &self,
        session_id: &str,
        holder: &str,
        ttl: Duration,
        read: Read,
    ) -> Result<(Leased, Option<ReadBack>)> {
        let now = now_ms();
        let expires = now.saturating_add(millis(ttl));
        // An inbox entry whose turn this lease is for, marked started when it is granted.
        let entry = self.starts.lock().ok().and_then(|starts| starts.get(session_id).copied());
        let taken = match &self.engine {
            Engine::Sqlite(db) => db.queue().await.try_lease(session_id, holder, (now, expires), read, entry),
            Engine::Postgres(pg) => pg.try_lease(session_id, holder, (now, expires), read, entry).await,
        };
        if let (Ok((Leased::Granted(_), _)), Some(entry), Ok(mut starts)) = (&taken, entry, self.starts.lock())
            && starts.get(session_id) == Some(&entry)
        {
            starts.remove(session_id);
        }
        taken
    }

    /// Ask to be told ([`crate::notice::LEASE_FREED`]) when a turn's commit gives back lease
    /// `session_id`, which [`Store::try_lease`] found held: a turn's commit tells only those
    /// who asked (ask again after each look that finds it held: a new holder starts with none).
    /// Whether it is still held; when it is not, look again at once.
    ///
    /// On SQLite every commit tells this process's own subscribers, and those of other
    /// processes look now and then: this asks nothing of anyone.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn want_lease(&self, session_id: &str) -> Result<bool> {
        match &self.engine {
            Engine::Sqlite(_) => Ok(true),
            Engine::Postgres(pg) => pg.want_lease(session_id).await,
        }
    }

    /// Extend the lease held with `token` by `ttl` from now. False when it is no longer ours (it
    /// expired and another process took it).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn renew_lease(&self, session_id: &str, token: &str, ttl: Duration) -> Result<bool> {
        self.traced("renew_lease", async {
            let expires = now_ms().saturating_add(millis(ttl));
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.renew_lease(session_id, token, expires),
                Engine::Postgres(pg) => pg.renew_lease(session_id, token, expires).await,
            }
        })
        .await
    }

    /// Give the lease back (nothing happens when it is no longer ours), and tell whoever waits
    /// for it ([`crate::notice::LEASE_FREED`]).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn release_lease(&self, session_id: &str, token: &str) -> Result<()> {
        self.traced("release_lease", async {
            // Whoever waits for it may take it now.
            match &self.engine {
                Engine::Sqlite(db) => {
                    db.queue().await.release_lease(session_id, token)?;
                    self.hint(crate::notice::LEASE_FREED, session_id).await;
                    Ok(())
                }
                Engine::Postgres(pg) => {
                    pg.release_lease(session_id, token, &Self::notice_text(crate::notice::LEASE_FREED, session_id))
                        .await
                }
            }
        })
        .await
    }

    /// Who holds the lease of `session_id` now, if anyone live does.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn lease_holder(&self, session_id: &str) -> Result<Option<LeaseHolder>> {
        let now = now_ms();
        let me = machine();
        let current = match &self.engine {
            Engine::Sqlite(db) => db.queue().await.lease_holder(session_id)?,
            Engine::Postgres(pg) => pg.lease_holder(session_id).await?,
        };
        Ok(current.filter(|c| holds(c, now, &me)))
    }

    /// The count and the highest id of the session's active messages: the id changes whenever
    /// anyone appends to the session or undoes a turn of it. (PostgreSQL reads the count from
    /// the session's tally, which every append and undo keeps.)
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn message_mark(&self, session_id: &str) -> Result<(i64, i64)> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.message_mark(session_id),
            Engine::Postgres(pg) => pg.message_mark(session_id).await,
        }
    }
}

/// Whether `c` still holds its lease: not expired, and not a process of this machine that is gone.
pub(crate) fn holds(c: &LeaseHolder, now: i64, me: &str) -> bool {
    c.expires_at > now && (c.host != me || alive(c.pid))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::*;

    // Each case runs on SQLite and on a real PostgreSQL.
    on_both_engines!(
        a_second_taker_learns_who_holds_it,
        an_expired_lease_is_free_and_its_old_token_is_void,
        a_turn_takes_the_lease_with_its_mark_and_gives_it_back_with_its_answer
    );

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("state.db")).expect("open");
        (dir, store)
    }

    async fn a_second_taker_learns_who_holds_it(store: &Store) {
        let ttl = Duration::from_secs(30);
        let Leased::Granted(token) = store.try_lease("s", "talaria chat", ttl).await.expect("lease") else {
            panic!("first taker gets it")
        };
        let Leased::Held(by) = store.try_lease("s", "talaria chat -q", ttl).await.expect("lease") else {
            panic!("second is refused")
        };
        assert_eq!((by.pid, by.holder.as_str()), (std::process::id(), "talaria chat"));
        assert!(by.to_string().starts_with(&format!("talaria chat (pid {} on ", std::process::id())), "{by}");
        assert_eq!(store.lease_holder("s").await.expect("read"), Some(by));
        assert!(store.renew_lease("s", &token, ttl).await.expect("renew"));
        store.release_lease("s", &token).await.expect("release");
        assert_eq!(store.lease_holder("s").await.expect("read"), None);
        assert!(!store.renew_lease("s", &token, ttl).await.expect("renew"), "a released lease is not renewed");
    }

    /// A turn's first and last transactions: the lease with the session's mark, and the
    /// answer with the lease given back (and whoever waits told); an answer that cannot be
    /// stored keeps the lease.
    async fn a_turn_takes_the_lease_with_its_mark_and_gives_it_back_with_its_answer(store: &Store) {
        use talaria_protocol::Message;
        let ttl = Duration::from_secs(30);
        let new = crate::NewSession {
            id: "s".into(),
            source: "cli".into(),
            model: "m".into(),
            provider: "p".into(),
            system_prompt: String::new(),
            parent_id: None,
            cwd: "/".into(),
        };
        store.create_session(&new).await.expect("create");
        let user = |text: &str| Message::User { content: text.into(), images: Vec::new() };
        store.append_messages("s", &[user("one"), user("two")]).await.expect("append");

        let (Leased::Granted(token), Some(Marked { mark, history: None })) =
            store.try_lease_marked("s", "a", ttl, false).await.expect("lease")
        else {
            panic!("granted, with the mark")
        };
        assert_eq!(mark, store.message_mark("s").await.expect("mark"));
        assert_eq!(mark.0, 2);
        let (Leased::Held(by), None) = store.try_lease_marked("s", "b", ttl, true).await.expect("lease") else {
            panic!("held, without a mark")
        };
        assert_eq!(by.holder, "a");
        assert!(store.want_lease("s").await.expect("want"), "still held, so worth waiting for");

        let mut notices = store.notices().await;
        let answer = Message::assistant("three");
        let ids =
            store.append_and_release("s", std::slice::from_ref(&answer), None, Some(&token)).await.expect("commit");
        assert_eq!(store.message_mark("s").await.expect("mark"), (3, ids[0]));
        assert_eq!(store.lease_holder("s").await.expect("read"), None, "given back with the answer");
        let told = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(n) = notices.recv().await {
                if n.topic == crate::notice::LEASE_FREED && n.payload == "s" {
                    return true;
                }
            }
            false
        });
        assert!(told.await.expect("told in time"), "whoever waits is told");
        if store.notices_cross_process() {
            assert!(!store.want_lease("s").await.expect("want"), "given back: nothing to wait for");
        }

        // A session that rested gets its history back with the lease.
        let (Leased::Granted(token), Some(Marked { mark, history: Some((prompt, stored)) })) =
            store.try_lease_marked("s", "a", ttl, true).await.expect("lease")
        else {
            panic!("granted, with the history")
        };
        assert_eq!(store.history("s").await.expect("history"), (prompt, stored.clone()));
        assert_eq!(stored.iter().map(|m| m.message.clone()).collect::<Vec<_>>(), [user("one"), user("two"), answer]);
        assert_eq!(mark, (3, stored[2].id));
        store.release_lease("s", &token).await.expect("release");
        // The notices so far (the release just now) come before this marker.
        store.notify("marker", "0").await.expect("marker");
        loop {
            let n = tokio::time::timeout(Duration::from_secs(10), notices.recv()).await.expect("in time");
            if n.is_none_or(|n| n.payload == "0") {
                break;
            }
        }
        // Nobody waits: on PostgreSQL, where a notice costs every listening process, the
        // commit tells nobody (the marker, sent after it, comes first).
        let Leased::Granted(token) = store.try_lease("s", "a", ttl).await.expect("lease") else { panic!("free") };
        store.append_and_release("s", &[user("four")], None, Some(&token)).await.expect("commit");
        store.notify("marker", "1").await.expect("marker");
        let first = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match notices.recv().await {
                    Some(n) if n.topic == crate::notice::LEASE_FREED || n.payload == "1" => return n.topic,
                    Some(_) => {}
                    None => return String::new(),
                }
            }
        });
        let first = first.await.expect("a notice in time");
        if store.notices_cross_process() {
            assert_eq!(first, "marker", "a lease nobody waits for is given back without a notice");
        }
        let none = store.try_lease_marked("none", "a", ttl, true).await;
        assert!(matches!(none, Err(crate::Error::SessionNotFound { .. })), "{none:?}");
        assert_eq!(store.lease_holder("none").await.expect("read"), None, "not taken for a session that is not there");

        let Leased::Granted(token) = store.try_lease("ghost", "a", ttl).await.expect("lease") else { panic!() };
        let lost = store.append_and_release("ghost", &[user("x")], None, Some(&token)).await;
        assert!(matches!(lost, Err(crate::Error::SessionNotFound { .. })), "{lost:?}");
        assert_eq!(store.lease_holder("ghost").await.expect("read").map(|h| h.holder), Some("a".to_string()));
    }

    async fn an_expired_lease_is_free_and_its_old_token_is_void(store: &Store) {
        let Leased::Granted(old) = store.try_lease("s", "a", Duration::ZERO).await.expect("lease") else { panic!() };
        std::thread::sleep(Duration::from_millis(5));
        let Leased::Granted(new) = store.try_lease("s", "b", Duration::from_secs(30)).await.expect("lease") else {
            panic!("expired lease is taken over")
        };
        assert!(!store.renew_lease("s", &old, Duration::from_secs(30)).await.expect("renew"));
        store.release_lease("s", &old).await.expect("a stale release does nothing");
        assert_eq!(store.lease_holder("s").await.expect("read").map(|h| h.holder), Some("b".to_string()));
        store.release_lease("s", &new).await.expect("release");
    }

    #[tokio::test]
    async fn a_dead_holder_on_this_machine_holds_nothing() {
        let (_d, store) = store();
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let dead = child.id();
        child.wait().expect("wait");
        store
            .sqlite()
            .write(|tx| {
                tx.execute(
                    "INSERT INTO session_leases VALUES ('s', 't', ?1, ?2, 'gone', 0, ?3)",
                    params![dead, machine(), i64::MAX],
                )?;
                Ok(())
            })
            .expect("plant");
        assert_eq!(store.lease_holder("s").await.expect("read"), None);
        assert!(matches!(
            store.try_lease("s", "me", Duration::from_secs(30)).await.expect("lease"),
            Leased::Granted(_)
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 8)]
    async fn racing_takers_get_one_lease() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.db");
        Store::open(&path).expect("create");
        let mut takers = tokio::task::JoinSet::new();
        for i in 0..8 {
            let path = path.clone();
            takers.spawn(async move {
                let store = Store::open(&path).expect("open");
                let got = store.try_lease("s", &format!("taker {i}"), Duration::from_secs(30)).await.expect("lease");
                usize::from(matches!(got, Leased::Granted(_)))
            });
        }
        let granted: usize = takers.join_all().await.into_iter().sum();
        assert_eq!(granted, 1);
    }

    /// Processes (here: stores) sharing one PostgreSQL get one lease among them, free or
    /// expired.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_takers_on_postgresql_get_one_lease() {
        let url = talaria_test_support::postgres::Postgres::shared().database();
        let first = Store::connect(&url).await.expect("migrate");
        let Leased::Granted(_) = first.try_lease("expired", "first", Duration::ZERO).await.expect("lease") else {
            panic!("free")
        };
        for session in ["free", "expired"] {
            let mut takers = tokio::task::JoinSet::new();
            let ready = std::sync::Arc::new(tokio::sync::Barrier::new(8));
            for i in 0..8 {
                let (url, ready) = (url.clone(), ready.clone());
                takers.spawn(async move {
                    let store = Store::connect(&url).await.expect("connect");
                    // The holder's read prepared on the connection before the take is: it must
                    // not overtake the take.
                    assert!(store.lease_holder(session).await.expect("read").is_none_or(|h| h.holder == "first"));
                    ready.wait().await;
                    let got =
                        store.try_lease(session, &format!("taker {i}"), Duration::from_secs(30)).await.expect("lease");
                    usize::from(matches!(got, Leased::Granted(_)))
                });
            }
            let granted: usize = takers.join_all().await.into_iter().sum();
            assert_eq!(granted, 1, "{session}");
        }
    }
}
