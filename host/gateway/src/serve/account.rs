//! One account's supervisor: connect its adapter, poll it, and reconnect with backoff when it
//! fails. A crashed adapter instance is re-created by the runtime on the next call; this loop
//! only decides when that call comes.
//!
//! Of the gateway processes sharing a store, one polls each bot: the one holding the account's
//! lease ([`crate::lease`]). The others stand by, connected (they send replies, stream, serve
//! webhooks and run turns), and take the lease when it is given back or its holder dies.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use talaria_core::runtime::adapter::{AdapterError, PlatformEvent};
use talaria_core::store::Leased;
use talaria_core::store::notice::{LEASE_FREED, RESYNC};
use tokio_util::sync::CancellationToken;

use super::{Account, Gateway};
use crate::lease::ACCOUNT_LEASE_TTL;

/// First wait after a failure; each further one doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a poll waits for events when nothing is going on.
const IDLE_POLL: Duration = Duration::from_secs(25);
/// How long a poll waits while replies are being written: they wait for the poll to end.
const BUSY_POLL: Duration = Duration::from_millis(200);

/// How long after an event polls stay short, whatever else is going on.
const RECENT_EVENT: Duration = Duration::from_secs(3);

/// How often a process standing by looks whether the poller is still alive.
const STANDBY_LOOK: Duration = Duration::from_secs(5);

/// The least time between two polls that brought nothing.
const MIN_EMPTY_POLL: Duration = Duration::from_millis(100);

/// Doubling waits between attempts.
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub fn new() -> Self {
        Self(FIRST_BACKOFF)
    }

    /// The wait before the next attempt.
    pub fn next(&mut self) -> Duration {
        let wait = self.0;
        self.0 = (self.0 * 2).min(MAX_BACKOFF);
        wait
    }

    pub fn reset(&mut self) {
        self.0 = FIRST_BACKOFF;
    }
}

/// How long the next poll may wait. When the adapter sends from instances of their own
/// (`Adapter::sends_apart`), as long as it likes. Otherwise replies wait for it to end (calls
/// on one instance never overlap), so it is short while turns run or replies are queued, and
/// ends when the ledger's next retry comes due.
async fn poll_wait(gateway: &Gateway, account: &Account) -> Duration {
    // Replies go out from instances of their own: nothing waits for the poll.
    if account.adapter.sends_apart() {
        return IDLE_POLL;
    }
    // An event that just came has a turn about to start (and replies to send): a long poll now
    // would hold the adapter while they wait.
    let recent = super::lock(&account.last_event).is_some_and(|at| at.elapsed() < RECENT_EVENT);
    if recent || account.busy.load(Ordering::SeqCst) > 0 || account.pending.load(Ordering::SeqCst) > 0 {
        return BUSY_POLL;
    }
    match gateway.store.delivery_next_at(&account.name).await {
        Ok(Some(at)) => {
            let now = jiff::Timestamp::now().as_millisecond();
            let until = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
            until.clamp(BUSY_POLL, IDLE_POLL)
        }
        _ => IDLE_POLL,
    }
}

/// Sleep `wait`, or less when the gateway stops; whether it is stopping.
async fn pause(gateway: &Gateway, wait: Duration) -> bool {
    tokio::select! {
        () = gateway.stop.cancelled() => true,
        () = tokio::time::sleep(wait) => false,
    }
}

/// Run `account` until the gateway stops.
pub(crate) async fn supervise(gateway: Arc<Gateway>, account: Arc<Account>) {
    let mut backoff = Backoff::new();
    while !gateway.stop.is_cancelled() {
        let info = match account.adapter.connect().await {
            Ok(info) => info,
            Err(e) => {
                let wait = backoff.next();
                account.set_state(format!("cannot connect: {e}"));
                tracing::warn!(account = %account.name, "cannot connect: {e}; trying again in {}s", wait.as_secs());
                if pause(&gateway, wait).await {
                    break;
                }
                continue;
            }
        };
        tracing::info!(account = %account.name, bot = %info.bot_name, "connected");
        account.set_state(format!("connected as {}", info.bot_name));
        let polls = info.polls;
        *super::lock(&account.info) = Some(info);
        let apart = account.adapter.prepare_senders().await;
        tracing::debug!(account = %account.name, sends_apart = apart, "connected");
        // Deliveries queued while it was away go out now.
        account.outbox.notify_one();
        if !polls {
            gateway.stop.cancelled().await;
            break;
        }
        backoff.reset();
        let Some(lease) = take_lease(&gateway, &account).await else { break };
        let lost = CancellationToken::new();
        let renewer = tokio::spawn(renew(gateway.clone(), account.clone(), lease.clone(), lost.clone()));
        let reconnect = poll(&gateway, &account, &mut backoff, &lost).await;
        renewer.abort();
        let _ = gateway.store.release_lease(&account.lease_key, &lease).await;
        if !reconnect {
            return;
        }
    }
}

/// Wait until this process holds `account`'s lease (it polls the bot); `None` when the gateway
/// stops first.
async fn take_lease(gateway: &Gateway, account: &Account) -> Option<String> {
    let mut notices = gateway.store.notices().await;
    let holder = format!("talaria gateway (pid {})", std::process::id());
    let mut told = false;
    loop {
        if gateway.stop.is_cancelled() {
            return None;
        }
        match gateway.store.try_lease(&account.lease_key, &holder, ACCOUNT_LEASE_TTL).await {
            Ok(Leased::Granted(lease)) => {
                if told {
                    tracing::info!(account = %account.name, "this process polls the bot now");
                }
                let bot = account.info().map(|i| i.bot_name).unwrap_or_default();
                account.set_state(format!("connected as {bot}"));
                return Some(lease);
            }
            Ok(Leased::Held(by)) => {
                if !told {
                    tracing::info!(account = %account.name, "{by} polls this bot; standing by (webhooks and turns are served here too)");
                    told = true;
                }
                let bot = account.info().map(|i| i.bot_name).unwrap_or_default();
                account.set_state(format!("connected as {bot}; standing by while pid {} on {} polls", by.pid, by.host));
            }
            Err(e) => tracing::warn!(account = %account.name, "cannot take the account's lease: {e}"),
        }
        let until = tokio::time::Instant::now() + STANDBY_LOOK;
        loop {
            tokio::select! {
                () = gateway.stop.cancelled() => return None,
                notice = notices.recv() => match notice {
                    Some(n) if (n.topic == LEASE_FREED && n.payload == account.lease_key) || n.topic == RESYNC => break,
                    Some(_) => {}
                    None => return None,
                },
                () = tokio::time::sleep_until(until) => break,
            }
        }
    }
}

/// Keep the account's lease while polling; cancel `lost` when another process has it now.
async fn renew(gateway: Arc<Gateway>, account: Arc<Account>, lease: String, lost: CancellationToken) {
    loop {
        tokio::time::sleep(ACCOUNT_LEASE_TTL / 3).await;
        match gateway.store.renew_lease(&account.lease_key, &lease, ACCOUNT_LEASE_TTL).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(account = %account.name, "another process polls the bot now; this one stands by");
                return lost.cancel();
            }
            Err(e) => tracing::warn!(account = %account.name, "cannot renew the account's lease: {e}"),
        }
    }
}

/// Poll `account` until the gateway stops (`false`), the lease is lost or the adapter failed
/// (`true`: connect again).
async fn poll(gateway: &Arc<Gateway>, account: &Arc<Account>, backoff: &mut Backoff, lost: &CancellationToken) -> bool {
    {
        let (gateway, account) = (gateway.clone(), account.clone());
        loop {
            let wait = poll_wait(&gateway, &account).await;
            let started = tokio::time::Instant::now();
            let polled = tokio::select! {
                () = gateway.stop.cancelled() => return false,
                () = lost.cancelled() => return true,
                polled = account.adapter.poll(wait) => polled,
            };
            match polled {
                // An adapter that answers at once with nothing, however long it may wait, would
                // spin: its next poll waits a little.
                Ok(events) if events.is_empty() && started.elapsed() < MIN_EMPTY_POLL && wait > MIN_EMPTY_POLL => {
                    if pause(&gateway, MIN_EMPTY_POLL - started.elapsed()).await {
                        return false;
                    }
                }
                Ok(events) => {
                    backoff.reset();
                    dispatch_all(&gateway, &account, events).await;
                    // Let the replies those events queued take the adapter before the next poll.
                    tokio::task::yield_now().await;
                }
                Err(AdapterError::Transient { message, retry_after }) if account.adapter.is_connected() => {
                    let wait = retry_after.unwrap_or_else(|| backoff.next());
                    tracing::warn!(account = %account.name, "poll failed: {message}; trying again in {:.1}s", wait.as_secs_f32());
                    if pause(&gateway, wait).await {
                        return false;
                    }
                }
                Err(e) => {
                    let wait = backoff.next();
                    account.set_state(format!("reconnecting: {e}"));
                    tracing::warn!(account = %account.name, "adapter failed: {e}; reconnecting in {}s", wait.as_secs());
                    account.adapter.reset().await;
                    return !pause(&gateway, wait).await;
                }
            }
        }
    }
}

/// Hand a poll's events on: each chat's in the order they came, the chats at once, so a chat's
/// message waits for the store to keep its own chat's earlier ones, not every chat's.
async fn dispatch_all(gateway: &Arc<Gateway>, account: &Arc<Account>, events: Vec<PlatformEvent>) {
    let mut chats: Vec<Vec<PlatformEvent>> = Vec::new();
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for event in events {
        let chat = match &event {
            PlatformEvent::Message(m) => m.chat_id.clone(),
            PlatformEvent::Button(b) => b.chat_id.clone(),
        };
        match at.get(&chat) {
            Some(&i) => chats[i].push(event),
            None => {
                at.insert(chat, chats.len());
                chats.push(vec![event]);
            }
        }
    }
    futures_util::future::join_all(chats.into_iter().map(|events| async move {
        for event in events {
            gateway.dispatch(account, event, None).await;
        }
    }))
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let mut b = Backoff::new();
        let waits: Vec<u64> = (0..8).map(|_| b.next().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        b.reset();
        assert_eq!(b.next(), FIRST_BACKOFF);
    }
}
