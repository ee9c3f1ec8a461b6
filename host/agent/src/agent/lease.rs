//! One writer per session (see [`talaria_store::lease`]): a turn runs only while its process
//! holds the session's lease, so two processes continuing one session take turns instead of
//! interleaving their messages, and each starts from what the other committed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use talaria_protocol::{Event, NoticeLevel, Outcome};
use talaria_store::lease::Marked;
use talaria_store::notice::LEASE_FREED;
use talaria_store::{Leased, Store};
use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::Error;

/// How long a lease lasts without renewal: a holder that dies on another machine (or whose pid
/// cannot be checked) blocks the session at most this long.
const TTL: Duration = Duration::from_secs(60);
/// How often the holder renews it.
const RENEW_EVERY: Duration = Duration::from_secs(15);
/// How often a waiting process asks again.
const POLL: Duration = Duration::from_millis(150);

/// A lease this process holds; renewed in the background, given back when dropped.
pub(super) struct Held {
    store: Arc<Store>,
    session_id: String,
    token: String,
    renewer: tokio::task::JoinHandle<()>,
}

impl Held {
    fn new(store: Arc<Store>, session_id: String, token: String) -> Self {
        let renewer = {
            let (store, session_id, token) = (store.clone(), session_id.clone(), token.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(RENEW_EVERY).await;
                    match store.renew_lease(&session_id, &token, TTL).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(session_id, "the session's lease expired and was taken by another process");
                            return;
                        }
                        Err(e) => tracing::warn!(session_id, "could not renew the session's lease: {e}"),
                    }
                }
            })
        };
        Self { store, session_id, token, renewer }
    }
}

impl Held {
    /// The token the lease is held with.
    pub(super) fn token(&self) -> &str {
        &self.token
    }

    /// The lease was given back with the turn's last commit
    /// ([`talaria_store::Store::append_and_release`]): stop renewing it.
    pub(super) fn given_back(mut self) {
        self.renewer.abort();
        self.token.clear();
    }

    /// Give the lease back now, so that the session's next turn (here or in another process)
    /// need not wait for it.
    pub(super) async fn release(mut self) {
        self.renewer.abort();
        let token = std::mem::take(&mut self.token);
        let Err(e) = self.store.release_lease(&self.session_id, &token).await else { return };
        tracing::warn!(session_id = self.session_id, "could not release the session's lease: {e}; trying again");
        give_back_later(self.store.clone(), self.session_id.clone(), token, POLL * 4);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renewer.abort();
        if self.token.is_empty() {
            return;
        }
        // Dropped without `release` (its turn was stopped half way): given back from a task.
        give_back_later(self.store.clone(), self.session_id.clone(), std::mem::take(&mut self.token), Duration::ZERO);
    }
}

/// Left held, the session would wait out the lease's TTL, even for this process's own next
/// turn: try to give it back (after `first`, then now and then) until the store answers again.
fn give_back_later(store: Arc<Store>, session_id: String, token: String, first: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    runtime.spawn(async move {
        let until = Instant::now() + TTL;
        let mut wait = first;
        while Instant::now() < until {
            tokio::time::sleep(wait).await;
            if store.release_lease(&session_id, &token).await.is_ok() {
                return;
            }
            wait = POLL * 4;
        }
    });
}

/// Whether two marks of a session ([`Store::message_mark`]) show the same messages: the newest
/// active message's id tells, since ids are never used twice (an append makes a newer one, an
/// undo leaves an older one the newest); the count only says how many came.
fn same(mark: (i64, i64), known: (i64, i64)) -> bool {
    mark.1 == known.1
}

impl Agent {
    /// Take the session's lease, waiting up to the configured time while another process
    /// answers it; then catch up with what that process committed.
    ///
    /// # Errors
    /// The outcome to end the turn with: interrupted while waiting, the session still held when
    /// the wait ran out (naming the holder), or the store failing.
    pub(super) async fn hold(&mut self, cancel: &CancellationToken) -> Result<(), Outcome> {
        let store = self.shared.store.clone();
        let wait = self.shared.config.lease_wait;
        let deadline = Instant::now() + wait;
        let mut told = false;
        // Told when a lease is given back (by any process, on PostgreSQL): a waiting turn starts
        // at once instead of at its next look. Subscribed only once the session is found held:
        // the first subscriber of a process makes the notice channel (a few hundred KiB) that a
        // turn whose lease is free never needs.
        let mut freed: Option<talaria_store::notice::Notices> = None;
        // A session that rested is read back with its lease, in one transaction.
        let history = self.resting;
        let (token, marked) = loop {
            let (id, holder) = (&self.session_id, &self.shared.config.holder);
            match crate::on_store(&store, async |store| store.try_lease_marked(id, holder, TTL, history).await).await {
                Ok((Leased::Granted(token), mark)) => break (token, mark),
                Ok((Leased::Held(by), _)) => {
                    let id = &self.session_id;
                    if Instant::now() >= deadline {
                        return Err(Outcome::Failed(format!(
                            "session {id} is being answered by {by}, so nothing was sent. Wait for it to finish and \
                             try again, or continue it as a new session: talaria chat --resume {id} --fork"
                        )));
                    }
                    if !told {
                        told = true;
                        self.emitter.emit(Event::Notice {
                            level: NoticeLevel::Info,
                            text: format!(
                                "session {id} is being answered by {by}; waiting up to {} s for it…",
                                wait.as_secs()
                            ),
                        });
                    }
                    let Some(freed) = freed.as_mut() else {
                        // A lease given back before this subscription is not told: look again
                        // at once, then wait for the notice.
                        freed = Some(store.notices().await);
                        continue;
                    };
                    // A turn's commit tells only those who asked (after each look: a new holder
                    // starts with nobody asking). Given back meanwhile: look again at once.
                    match store.want_lease(&self.session_id).await {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(e) => {
                            tracing::debug!(session_id = self.session_id, "cannot ask to be told of the lease: {e}")
                        }
                    }
                    let until = tokio::time::Instant::now() + POLL + Duration::from_millis(fastrand::u64(0..100));
                    loop {
                        tokio::select! {
                            biased;
                            () = cancel.cancelled() => return Err(Outcome::Interrupted),
                            () = tokio::time::sleep_until(until) => break,
                            notice = freed.recv() => match notice {
                                Some(n) if n.topic == LEASE_FREED && n.payload == self.session_id => break,
                                Some(_) => {}
                                None => tokio::time::sleep_until(until).await,
                            },
                        }
                    }
                }
                Err(e) => return Err(Outcome::Failed(e.to_string())),
            }
        };
        self.lease = Some(Held::new(store, self.session_id.clone(), token));
        self.catch_up(marked).await.map_err(|e| Outcome::Failed(e.to_string()))
    }

    /// Reload the history when another process changed the session since this one last looked;
    /// `marked` is what was read with the lease.
    async fn catch_up(&mut self, marked: Option<Marked>) -> Result<(), Error> {
        let known = self.mark;
        let (stored, history) = marked.map_or((None, None), |m| (Some(m.mark), m.history));
        let woken = match history {
            Some((prompt, messages)) if self.resting => {
                self.history = messages.into_iter().map(|m| m.message).collect();
                self.system_prompt = prompt;
                self.resting = false;
                stored
            }
            _ => self.wake_marked().await?,
        };
        let added = if let Some(mark) = woken {
            // Read back just now: the history is the stored one already.
            if same(mark, known) {
                return Ok(());
            }
            self.mark = mark;
            usize::try_from(mark.0 - known.0).unwrap_or(0)
        } else {
            let id = &self.session_id;
            let changed = crate::on_store(&self.shared.store, async |store| {
                let mark = match stored {
                    Some(mark) => mark,
                    None => store.message_mark(id).await?,
                };
                if same(mark, known) {
                    return Ok(None);
                }
                let history = super::resting::history_of(store, id).await?;
                Ok(Some((mark, history)))
            })
            .await?;
            let Some((mark, history)) = changed else { return Ok(()) };
            let added = history.len().saturating_sub(self.history.len());
            self.history = history;
            self.mark = mark;
            added
        };
        self.todos.restore(&self.history);
        self.emitter.emit(Event::Notice {
            level: NoticeLevel::Info,
            text: format!(
                "session {} was continued elsewhere meanwhile; {added} new message(s) loaded",
                self.session_id
            ),
        });
        Ok(())
    }

    /// Move the lease along with the conversation (compression continues it in a child).
    /// Whether or not a lease is held (`/compact` between turns holds none), what the child
    /// holds now is what this agent wrote: the next turn must not take it for another
    /// process's work.
    pub(super) async fn lease_moved(&mut self) {
        if let Some(held) = self.lease.take() {
            held.release().await;
            let store = self.shared.store.clone();
            let (id, holder) = (&self.session_id, &self.shared.config.holder);
            match crate::on_store(&store, async |s| s.try_lease(id, holder, TTL).await).await {
                Ok(Leased::Granted(token)) => self.lease = Some(Held::new(store, self.session_id.clone(), token)),
                Ok(Leased::Held(by)) => {
                    tracing::warn!(session_id = self.session_id, "new session already held by {by}");
                }
                Err(e) => tracing::warn!(session_id = self.session_id, "could not lease the new session: {e}"),
            }
        }
        let id = &self.session_id;
        self.mark = crate::on_store(&self.shared.store, async |s| s.message_mark(id).await).await.unwrap_or_default();
    }
}
