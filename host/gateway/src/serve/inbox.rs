//! Messages in, through the store: what an adapter hands the gateway (a poll, a webhook) is kept
//! in the store's inbox ([`talaria_core::store::inbox`]) before anything else happens, and answered by
//! whichever gateway process serves its chat. A process serves a chat while it holds the
//! chat's lease (`chat:SESSION-KEY`): one worker, in one process, answers a chat at a time, in
//! order. The process that took a message starts the chat's worker when nobody serves it; when
//! another process does, that one hears of it ([`QUEUED`] notice) and takes it from the store.
//!
//! Every process also looks for chats with open messages and no live worker: when a process
//! dies mid-turn, its chats' leases lapse (at once on this machine, whose pids are checked;
//! after [`CHAT_LEASE_TTL`] elsewhere) and the next process to look answers what it left.

use std::sync::Arc;
use std::time::Duration;

use talaria_core::store::Leased;
use talaria_core::store::inbox::Entry;
use talaria_core::store::inbox::{DONE, NewEntry, Put, QUEUED};
use talaria_core::store::notice::{LEASE_FREED, Notices, RESYNC};
use tokio::sync::{Notify, mpsc};

use super::session::{self, CHAT_LEASE_TTL, Kind, chat_lease};
use super::{Account, Gateway, StoreDown, lock};

/// How often a process looks for chats nobody serves, when notices cross processes (they tell
/// of most of them at once) ...
const SWEEP_WITH_NOTICES: Duration = Duration::from_secs(5);
/// ... and when they do not (SQLite: another process on this machine may have queued one).
const SWEEP_WITHOUT: Duration = Duration::from_secs(1);
/// Answered messages are kept this long (a platform sending one again within it is not
/// answered twice), then forgotten.
const KEEP_DONE: Duration = Duration::from_secs(24 * 60 * 60);
/// How often they are forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(60 * 60);

/// Where a kept message came from and goes.
pub(crate) struct Incoming<'a> {
    pub account: &'a Account,
    pub session_key: &'a str,
    pub chat_id: &'a str,
    pub thread_id: Option<&'a str>,
    pub message_id: &'a str,
    pub kind: Kind,
    pub body: &'a str,
    /// Its reply goes to whoever waits on the entry (a webhook request), not to the chat.
    pub respond: bool,
}

impl Gateway {
    /// Keep a message and see that its chat's worker takes it; its entry's id, also when it was
    /// kept before (a platform handing it in again starts nothing new).
    ///
    /// # Errors
    /// The store cannot be written: the message is not kept (logged here).
    pub(crate) async fn enqueue(self: &Arc<Self>, m: &Incoming<'_>) -> Result<i64, StoreDown> {
        let new = NewEntry {
            account: &m.account.name,
            chat_id: m.chat_id,
            thread_id: m.thread_id,
            session_key: m.session_key,
            message_id: m.message_id,
            kind: m.kind.as_str(),
            body: m.body,
            respond: m.respond,
            served_here: lock(&self.sessions).contains_key(m.session_key),
        };
        match self.store.inbox_put(&new).await {
            Ok(Put::New(id)) => {
                if m.respond {
                    // Before its worker can answer it.
                    lock(&self.awaited).insert(id, Arc::default());
                }
                // Handed to this process's worker of the chat as it is: not read back.
                self.wake(m.session_key, Some(new.kept(id))).await;
                Ok(id)
            }
            Ok(Put::Known(entry)) => {
                tracing::debug!(account = %m.account.name, message_id = %m.message_id, "message seen before; not answered again");
                Ok(entry.id)
            }
            Err(e) => {
                tracing::error!(account = %m.account.name, "cannot keep a message: {e}");
                Err(StoreDown)
            }
        }
    }

    /// Hand `entry` to the worker of `key` in this process, or (`None`) tell it to look at its
    /// inbox; with none here, start one if nobody else serves the chat.
    pub(crate) async fn wake(self: &Arc<Self>, key: &str, entry: Option<Entry>) {
        if let Some(tx) = lock(&self.sessions).get(key)
            && tx.send(entry.map(Box::new)).is_ok()
        {
            return;
        }
        self.adopt(key).await;
    }

    /// This process's worker took entry `id`: a request here waiting on it gets its answer
    /// from the worker ([`Gateway::answered`]).
    pub(crate) fn took(&self, id: i64) {
        if let Some(awaited) = lock(&self.awaited).get(&id) {
            awaited.here.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Entry `id` is answered with `reply`: to the request waiting on it in this process, if
    /// one does.
    pub(crate) fn answered(&self, id: i64, reply: &str) {
        if let Some(awaited) = lock(&self.awaited).get(&id) {
            *lock(&awaited.reply) = Some(reply.to_string());
            awaited.ready.notify_one();
        }
    }

    /// Serve chat `key` here when no live process does and it has open messages of an account
    /// this process serves.
    async fn adopt(self: &Arc<Self>, key: &str) {
        if self.stop.is_cancelled() || lock(&self.sessions).contains_key(key) {
            return;
        }
        let open = match self.store.inbox_open(key).await {
            Ok(open) => open,
            Err(e) => return tracing::warn!(session = %key, "cannot read the inbox: {e}"),
        };
        let Some(first) = open.first() else { return };
        let Some(account) = self.accounts.get(&first.account).cloned() else { return };
        let holder = format!("talaria gateway (pid {})", std::process::id());
        let token = match self.store.try_lease(&chat_lease(key), &holder, CHAT_LEASE_TTL).await {
            Ok(Leased::Granted(token)) => token,
            // Served elsewhere (or by this process's worker, starting or ending right now).
            Ok(Leased::Held(_)) => return,
            Err(e) => return tracing::warn!(session = %key, "cannot take the chat's lease: {e}"),
        };
        let chat = session::Chat { chat_id: first.chat_id.clone(), thread_id: first.thread_id.clone() };
        let (tx, rx) = mpsc::unbounded_channel();
        let served = {
            let mut sessions = lock(&self.sessions);
            let served = self.stop.is_cancelled() || sessions.contains_key(key);
            if !served {
                sessions.insert(key.to_string(), tx);
            }
            served
        };
        if served {
            let _ = self.store.release_lease(&chat_lease(key), &token).await;
            return;
        }
        self.tasks.spawn(session::run(self.clone(), account, key.to_string(), chat, token, rx));
    }

    /// Serve every chat with open messages that nobody serves.
    async fn sweep(self: &Arc<Self>) {
        match self.store.inbox_open_keys().await {
            Ok(keys) => {
                for key in keys {
                    self.adopt(&key).await;
                }
            }
            Err(e) => tracing::warn!("cannot read the inbox: {e}"),
        }
    }
}

/// Look after the inbox while the gateway runs: start workers for chats queued by other
/// processes or left by dead ones, and forget long-answered messages.
pub(crate) async fn serve(gateway: Arc<Gateway>) {
    let mut notices = gateway.store.notices().await;
    let every = if gateway.store.notices_cross_process() { SWEEP_WITH_NOTICES } else { SWEEP_WITHOUT };
    let mut pruned = tokio::time::Instant::now() - PRUNE_EVERY;
    gateway.sweep().await;
    loop {
        tokio::select! {
            () = gateway.stop.cancelled() => return,
            notice = notices.recv() => match notice {
                // Queued here: `enqueue` woke its worker already.
                Some(n) if n.topic == QUEUED && n.is_mine() => {}
                Some(n) if n.topic == QUEUED => gateway.wake(&n.payload, None).await,
                Some(n) if n.topic == LEASE_FREED => {
                    if let Some(key) = n.payload.strip_prefix("chat:") {
                        gateway.adopt(key).await;
                    }
                }
                Some(n) if n.topic == RESYNC => gateway.sweep().await,
                Some(_) => {}
                None => return,
            },
            () = tokio::time::sleep(every) => {
                gateway.sweep().await;
                if pruned.elapsed() >= PRUNE_EVERY {
                    pruned = tokio::time::Instant::now();
                    let before = jiff::Timestamp::now().as_millisecond() - i64::try_from(KEEP_DONE.as_millis()).unwrap_or(0);
                    if let Err(e) = gateway.store.inbox_prune(before).await {
                        tracing::warn!("cannot forget answered messages: {e}");
                    }
                }
            }
        }
    }
}

/// A reply a request in this process waits for: the worker answering the entry here hands it
/// over ([`Gateway::answered`]) without the store being read.
#[derive(Default)]
pub(crate) struct Awaited {
    reply: std::sync::Mutex<Option<String>>,
    ready: Notify,
    /// This process's worker of the chat took the entry: its answer comes here, whatever
    /// notice comes first.
    here: std::sync::atomic::AtomicBool,
}

/// Forgets what a request awaited when it ends (answered, timed out, or dropped with its
/// connection).
struct Unwait<'a>(&'a Gateway, i64);

impl Drop for Unwait<'_> {
    fn drop(&mut self) {
        lock(&self.0.awaited).remove(&self.1);
    }
}

/// The reply to entry `id` once it is answered (by whichever process), or `None` after
/// `timeout`; `notices` were subscribed to before the entry was kept.
pub(crate) async fn reply_to(gateway: &Gateway, id: i64, timeout: Duration, mut notices: Notices) -> Option<String> {
    let awaited = lock(&gateway.awaited).get(&id).cloned();
    let _unwait = Unwait(gateway, id);
    let deadline = tokio::time::Instant::now() + timeout;
    // Without notices from other processes, look now and then.
    let every = if gateway.store.notices_cross_process() { Duration::from_secs(2) } else { Duration::from_millis(250) };
    let wanted = id.to_string();
    // Kept just now by this process: nobody answered it before the wait began (a message kept
    // before, handed in again, may be answered already: read first). Its answer tells only the
    // process that kept it, unless asked to tell every one.
    let mut read = awaited.is_none();
    if read && let Err(e) = gateway.store.inbox_await(id).await {
        tracing::warn!("cannot ask to be told of an answer: {e}; looking now and then");
    }
    loop {
        if read {
            match gateway.store.inbox_get(id).await {
                Ok(Some(entry)) if entry.is_done() => return Some(entry.reply.unwrap_or_default()),
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(e) => tracing::warn!("cannot read the inbox: {e}"),
            }
        }
        read = true;
        let until = (tokio::time::Instant::now() + every).min(deadline);
        let handed = || awaited.as_ref().and_then(|a| lock(&a.reply).take());
        loop {
            let ready = async {
                match &awaited {
                    Some(a) => a.ready.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                // Answered here.
                () = ready => {
                    if let Some(reply) = handed() {
                        return Some(reply);
                    }
                }
                // Answered by another process (answered here, the notice may come first: the
                // answer follows).
                notice = notices.recv() => match notice {
                    Some(n) if n.topic == DONE && awaited.as_ref().is_some_and(|a| a.here.load(std::sync::atomic::Ordering::SeqCst)) => {
                        continue;
                    }
                    Some(n) if (n.topic == DONE && n.payload == wanted) || n.topic == RESYNC => break,
                    Some(_) => continue,
                    None => return None,
                },
                () = tokio::time::sleep_until(until) => break,
            }
        }
        if let Some(reply) = handed() {
            return Some(reply);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
    }
}
