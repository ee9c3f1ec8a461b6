//! Backing off the auxiliary model after it failed: per session, kept in kv under
//! `backoff/<session_id>` as JSON `{"failures": N, "next_try": UNIX_SECONDS}`.
//!
//! After the 1st failure the model is left alone for 60 s, after the 2nd for 300 s, after the 3rd
//! and later for 900 s; meanwhile compression uses the fallback summary. A success clears it.
//!
//! ```ignore
//! let b = Backoff::after_failure(None, now);
//! assert_eq!((b.failures, b.next_try), (1, now + 60));
//! ```

use serde::{Deserialize, Serialize};

/// A session's record of auxiliary-model failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    /// Failures in a row.
    pub failures: u32,
    /// Unix time (seconds) before which the model is not asked again.
    pub next_try: u64,
}

/// How long to wait after the `failures`-th failure in a row.
pub fn delay(failures: u32) -> u64 {
    match failures {
        0 => 0,
        1 => 60,
        2 => 300,
        _ => 900,
    }
}

impl Backoff {
    /// The kv key for a session.
    pub fn key(session_id: &str) -> String {
        format!("backoff/{session_id}")
    }

    /// The record after one more failure at `now`.
    pub fn after_failure(previous: Option<Backoff>, now: u64) -> Self {
        let failures = previous.map_or(0, |b| b.failures).saturating_add(1);
        Self { failures, next_try: now.saturating_add(delay(failures)) }
    }

    /// Seconds left to wait at `now` (0 when the model may be asked).
    pub fn remaining(&self, now: u64) -> u64 {
        self.next_try.saturating_sub(now)
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_60_300_900() {
        let now = 1_000;
        let first = Backoff::after_failure(None, now);
        assert_eq!(first, Backoff { failures: 1, next_try: 1_060 });
        let second = Backoff::after_failure(Some(first), 2_000);
        assert_eq!(second, Backoff { failures: 2, next_try: 2_300 });
        let third = Backoff::after_failure(Some(second), 3_000);
        assert_eq!(third, Backoff { failures: 3, next_try: 3_900 });
        let fourth = Backoff::after_failure(Some(third), 4_000);
        assert_eq!(fourth, Backoff { failures: 4, next_try: 4_900 });
        assert_eq!((fourth.remaining(4_100), fourth.remaining(5_000)), (800, 0));
    }

    #[test]
    fn round_trips_through_json() {
        let b = Backoff { failures: 2, next_try: 42 };
        assert_eq!(Backoff::decode(&b.encode()), Some(b));
        assert_eq!(String::from_utf8(b.encode()).ok().as_deref(), Some(r#"{"failures":2,"next_try":42}"#));
        assert_eq!(Backoff::decode(b"garbage"), None);
    }
}
