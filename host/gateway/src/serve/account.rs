//! One account's supervisor: connect its adapter, poll it, and reconnect with backoff when it
//! fails. A crashed adapter instance is re-created by the runtime on the next call; this loop
//! only decides when that call comes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use talaria_runtime::adapter::AdapterError;

use super::{Account, Gateway};

/// First wait after a failure; each further one doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a poll waits for events when nothing is going on.
const IDLE_POLL: Duration = Duration::from_secs(25);
/// How long a poll waits while replies are being written: they wait for the poll to end.
const BUSY_POLL: Duration = Duration::from_millis(200);

/// How long after an event polls stay short, whatever else is going on.
const RECENT_EVENT: Duration = Duration::from_secs(3);

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

/// How long the next poll may wait: replies wait for it to end (calls on one instance never
/// overlap), so it is short while turns run or replies are queued, and ends when the ledger's
/// next retry comes due.
fn poll_wait(gateway: &Gateway, account: &Account) -> Duration {
    // An event that just came has a turn about to start (and replies to send): a long poll now
    // would hold the adapter while they wait.
    let recent = super::lock(&account.last_event).is_some_and(|at| at.elapsed() < RECENT_EVENT);
    if recent || account.busy.load(Ordering::SeqCst) > 0 || account.pending.load(Ordering::SeqCst) > 0 {
        return BUSY_POLL;
    }
    match gateway.store.delivery_next_at(&account.name) {
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
        // Deliveries queued while it was away go out now.
        account.outbox.notify_one();
        if !polls {
            gateway.stop.cancelled().await;
            break;
        }
        backoff.reset();
        loop {
            let wait = poll_wait(&gateway, &account);
            let started = tokio::time::Instant::now();
            let polled = tokio::select! {
                () = gateway.stop.cancelled() => return,
                polled = account.adapter.poll(wait) => polled,
            };
            match polled {
                // An adapter that answers at once with nothing, however long it may wait, would
                // spin: its next poll waits a little.
                Ok(events) if events.is_empty() && started.elapsed() < MIN_EMPTY_POLL && wait > MIN_EMPTY_POLL => {
                    if pause(&gateway, MIN_EMPTY_POLL - started.elapsed()).await {
                        return;
                    }
                }
                Ok(events) => {
                    backoff.reset();
                    for event in events {
                        gateway.dispatch(&account, event).await;
                    }
                    // Let the replies those events queued take the adapter before the next poll.
                    tokio::task::yield_now().await;
                }
                Err(AdapterError::Transient { message, retry_after }) if account.adapter.is_connected() => {
                    let wait = retry_after.unwrap_or_else(|| backoff.next());
                    tracing::warn!(account = %account.name, "poll failed: {message}; trying again in {:.1}s", wait.as_secs_f32());
                    if pause(&gateway, wait).await {
                        return;
                    }
                }
                Err(e) => {
                    let wait = backoff.next();
                    account.set_state(format!("reconnecting: {e}"));
                    tracing::warn!(account = %account.name, "adapter failed: {e}; reconnecting in {}s", wait.as_secs());
                    account.adapter.reset().await;
                    if pause(&gateway, wait).await {
                        return;
                    }
                    break;
                }
            }
        }
    }
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
