//! How often one key (a client address, a chat user, a webhook route) did something within a
//! sliding window: what a door uses to slow a sender that goes faster than a human would, and
//! to lock out an address that keeps failing to authenticate ([`Lockout`]).
//!
//! ```
//! use std::time::Duration;
//! let window = talaria_listen::limit::Window::new(2, Duration::from_secs(60));
//! assert!(window.take("ana").is_ok());
//! assert!(window.take("ana").is_ok());
//! assert!(window.take("ana").is_err(), "the third within a minute waits");
//! assert!(window.take("bo").is_ok(), "each key has its own");
//! ```

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Keys remembered at once; the stalest are forgotten beyond it (a flood of new keys costs
/// bounded memory, and only forgets its own kind).
const REMEMBERED: usize = 4096;

/// At most `max` events per key within any `per`.
pub struct Window<K> {
    max: usize,
    per: Duration,
    seen: Mutex<HashMap<K, VecDeque<Instant>>>,
}

impl<K: Eq + Hash + Clone> Window<K> {
    pub fn new(max: usize, per: Duration) -> Self {
        Self { max: max.max(1), per, seen: Mutex::default() }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<K, VecDeque<Instant>>> {
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Count one event of `key` when the window has room for it.
    ///
    /// # Errors
    /// It has none: how long until it has (the event is not counted).
    pub fn take(&self, key: K) -> Result<(), Duration> {
        let now = Instant::now();
        let mut seen = self.seen();
        if let Some(wait) = self.wait(&mut seen, &key, now) {
            return Err(wait);
        }
        self.push(&mut seen, key, now);
        Ok(())
    }

    /// Count one event of `key` whether or not there is room; how many are in the window now
    /// (at most `max`).
    pub fn count(&self, key: K) -> usize {
        let now = Instant::now();
        let mut seen = self.seen();
        self.push(&mut seen, key, now)
    }

    /// How long until `key` has room again, when it has none now.
    pub fn full(&self, key: &K) -> Option<Duration> {
        self.wait(&mut self.seen(), key, Instant::now())
    }

    /// Forget `key`'s events.
    pub fn forget(&self, key: &K) {
        self.seen().remove(key);
    }

    fn wait(&self, seen: &mut HashMap<K, VecDeque<Instant>>, key: &K, now: Instant) -> Option<Duration> {
        let times = seen.get_mut(key)?;
        while times.front().is_some_and(|t| now.duration_since(*t) >= self.per) {
            times.pop_front();
        }
        let first = times.front()?;
        (times.len() >= self.max).then(|| self.per.saturating_sub(now.duration_since(*first)))
    }

    fn push(&self, seen: &mut HashMap<K, VecDeque<Instant>>, key: K, now: Instant) -> usize {
        if seen.len() >= REMEMBERED && !seen.contains_key(&key) {
            let stalest = seen.iter().min_by_key(|(_, times)| times.back().copied()).map(|(k, _)| k.clone());
            if let Some(stalest) = stalest {
                seen.remove(&stalest);
            }
        }
        let times = seen.entry(key).or_default();
        while times.front().is_some_and(|t| now.duration_since(*t) >= self.per) {
            times.pop_front();
        }
        times.push_back(now);
        if times.len() > self.max {
            times.pop_front();
        }
        times.len()
    }
}

/// Failed authentications per client address (an IPv6 /64 counts as one, as for the
/// connection caps): an address that fails `after` times within `window` is refused until the
/// window has passed, right credentials or not, and that is logged once, as a warning naming
/// the door and the address. A success forgets its address's failures.
pub struct Lockout {
    /// What the listener is, for the log (`serve`, `gateway webhooks`).
    door: &'static str,
    failures: Window<IpAddr>,
}

impl Lockout {
    pub fn new(door: &'static str, after: usize, window: Duration) -> Self {
        Self { door, failures: Window::new(after, window) }
    }

    /// How long `peer` is still locked out for, if it is.
    pub fn locked_out(&self, peer: Option<IpAddr>) -> Option<Duration> {
        self.failures.full(&crate::table::client(peer?))
    }

    /// `peer` failed to authenticate.
    pub fn failed(&self, peer: Option<IpAddr>) {
        let Some(key) = peer.map(crate::table::client) else { return };
        if self.failures.count(key) == self.failures.max {
            tracing::warn!(
                door = self.door,
                client = %key,
                "{} failed authentications from {key} within {} s: refusing it for up to {} s",
                self.failures.max,
                self.failures.per.as_secs(),
                self.failures.per.as_secs()
            );
        }
    }

    /// `peer` authenticated.
    pub fn passed(&self, peer: Option<IpAddr>) {
        if let Some(key) = peer.map(crate::table::client) {
            self.failures.forget(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_window_says_how_long_until_it_has_room_and_counts_nothing_meanwhile() {
        let window = Window::new(2, Duration::from_millis(300));
        assert_eq!(window.take(1), Ok(()));
        assert_eq!(window.take(1), Ok(()));
        let wait = window.take(1).expect_err("full");
        assert!(wait > Duration::from_millis(200) && wait <= Duration::from_millis(300), "{wait:?}");
        assert_eq!(window.full(&2), None);
        std::thread::sleep(wait);
        assert_eq!(window.take(1), Ok(()), "room again once the first left the window");
        window.forget(&1);
        assert_eq!(window.full(&1), None);
    }

    #[test]
    fn a_flood_of_new_keys_forgets_the_stalest_only() {
        let window = Window::new(1, Duration::from_secs(60));
        for k in 0..REMEMBERED + 10 {
            assert_eq!(window.take(k), Ok(()));
        }
        assert!(window.seen().len() <= REMEMBERED);
        assert!(window.full(&(REMEMBERED + 9)).is_some(), "the newest is still counted");
    }
}
