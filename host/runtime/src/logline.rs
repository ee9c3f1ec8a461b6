//! What reaches the host's log when a plugin calls the `log` import: few lines, and nothing in
//! them a terminal would obey.
//!
//! Invariants:
//! 1. Each plugin has one [`LogLimiter`] (in its `PluginEnv`), shared by all its instances and
//!    calls: a token bucket of [`LOG_BURST`] lines refilled at [`LOG_LINES_PER_SECOND`]. Lines
//!    beyond it are dropped and counted; the next line that gets through is preceded by one
//!    warning saying how many were dropped.
//! 2. A line is made [`visible`](crate::shown::visible): control characters (CR, LF, ESC, BEL, DEL, the C1 controls,
//!    ...; TAB stays), the bidi controls (U+202A..U+202E, U+2066..U+2069, U+200E, U+200F,
//!    U+061C) and the line and paragraph separators (U+2028, U+2029) are escaped visibly as
//!    `\n`, `\r`, `\x1b`, `\u{202e}`. So a plugin can neither repaint the user's terminal nor
//!    forge a log line of its own. Backslashes are kept as they are.
//! 3. A line is at most [`MAX_LOG_CHARS`] characters after escaping; a longer one is cut at an
//!    escape's boundary and ends with `…`.
//!
//! ```text
//! plugin writes:  "done\r\nINFO host: all checks passed\x1b[2J"
//! the log shows:  done\r\nINFO host: all checks passed\x1b[2J      (one line)
//! ```

use std::sync::Mutex;
use std::time::Instant;

/// Lines a plugin may log at once before the rate applies.
pub(crate) const LOG_BURST: f64 = 50.0;
/// Lines per second a plugin may log in the long run.
pub(crate) const LOG_LINES_PER_SECOND: f64 = 20.0;
/// Longest log line kept, in characters, after escaping.
pub(crate) const MAX_LOG_CHARS: usize = 4096;

/// One plugin's log rate: a token bucket.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
    /// Lines dropped since the last one that got through.
    dropped: u64,
}

/// Whether a line may be logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Log it, after saying that `dropped_before` lines were dropped (when not 0).
    Pass { dropped_before: u64 },
    /// Over the rate: drop it (it is counted).
    Drop,
}

impl Default for LogLimiter {
    fn default() -> Self {
        Self { bucket: Mutex::new(Bucket { tokens: LOG_BURST, last: Instant::now(), dropped: 0 }) }
    }
}

impl LogLimiter {
    /// Take a line's token now.
    pub fn admit(&self) -> Admit {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Admit {
        let mut b = self.bucket.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let refill = now.saturating_duration_since(b.last).as_secs_f64() * LOG_LINES_PER_SECOND;
        b.tokens = (b.tokens + refill).min(LOG_BURST);
        b.last = b.last.max(now);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Admit::Pass { dropped_before: std::mem::take(&mut b.dropped) }
        } else {
            b.dropped += 1;
            Admit::Drop
        }
    }
}

/// The warning logged before the first line that gets through after `n` were dropped.
pub(crate) fn dropped_note(plugin: &str, n: u64) -> String {
    if n == 1 {
        format!("1 log line from plugin '{plugin}' was dropped (rate limit)")
    } else {
        format!("{n} log lines from plugin '{plugin}' were dropped (rate limit)")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_bucket_lets_a_burst_through_then_the_rate() {
        let limiter = LogLimiter::default();
        let t0 = Instant::now();
        let passed = (0..1000).filter(|_| limiter.admit_at(t0) != Admit::Drop).count();
        assert_eq!(passed, 50);
        // A second later, 20 more lines, the first of them preceded by the count of the dropped.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(limiter.admit_at(t1), Admit::Pass { dropped_before: 950 });
        let passed = (0..100).filter(|_| limiter.admit_at(t1) != Admit::Drop).count();
        assert_eq!(passed, 19);
        assert_eq!(limiter.admit_at(t1 + Duration::from_secs(60)), Admit::Pass { dropped_before: 81 });
        // After a long pause the bucket is full again, never fuller.
        let passed = (0..100).filter(|_| limiter.admit_at(t1 + Duration::from_secs(60)) != Admit::Drop).count();
        assert_eq!(passed, 49);
    }

    #[test]
    fn the_note_counts_in_words() {
        assert_eq!(dropped_note("x", 1), "1 log line from plugin 'x' was dropped (rate limit)");
        assert_eq!(dropped_note("x", 9950), "9950 log lines from plugin 'x' were dropped (rate limit)");
    }
}
