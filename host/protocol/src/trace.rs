//! What every crate needs to know about traces (`[telemetry]`, docs/telemetry.md): the tracing
//! target of the spans that are exported, and whether text (prompts, answers, tool arguments and
//! results) may go with them.
//!
//! A span is exported only when its target is [`TARGET`]: the crates' other spans and log events
//! never leave the process, so a warning that quotes a plugin's output cannot reach a collector.
//! With telemetry off no layer wants these spans, and creating one costs a check of a cached
//! flag.

use std::sync::atomic::{AtomicBool, Ordering};

/// The tracing target of every span that is exported.
pub const TARGET: &str = "talaria::trace";

static CONTENT: AtomicBool = AtomicBool::new(false);

/// Whether spans may carry text: prompts, answers, tool arguments and results
/// (`[telemetry] content = true`). Off unless the process that exports turned it on.
pub fn content() -> bool {
    CONTENT.load(Ordering::Relaxed)
}

/// Let spans carry text ([`content`]), once, where telemetry starts.
pub fn allow_content(allowed: bool) {
    CONTENT.store(allowed, Ordering::Relaxed);
}

/// Whether the work running now is part of an exported trace (a turn's, a message's): the
/// spans of work done on its behalf (a store transaction, a plugin call) are made only then, so
/// what runs on its own (an adapter's poll, a ledger's claim each tick) does not start a trace
/// of one span each time.
pub fn in_trace() -> bool {
    tracing::Span::current().metadata().is_some_and(|m| m.target() == TARGET)
}

/// `n` as a span takes a number: OpenTelemetry's are signed (a `u64` would go as text).
pub fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Whether `value` is a well-formed W3C `traceparent` (version `00`: `00-TRACE-SPAN-FLAGS` in
/// lowercase hex, neither id all zeros). A front door passes on only what passes this.
pub fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    matches!(parts.as_slice(), [version, trace, span, flags]
        if *version == "00" && hex(trace, 32) && hex(span, 16) && hex(flags, 2) && !zero(trace) && !zero(span))
}

/// `value` when it [`is_traceparent`], for a front door that reads one from a request.
pub fn traceparent(value: Option<&str>) -> Option<String> {
    value.map(str::trim).filter(|v| is_traceparent(v)).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_traceparent_passes() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(is_traceparent(good));
        assert_eq!(traceparent(Some(&format!(" {good} "))).as_deref(), Some(good));
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1\n",
        ] {
            assert!(!is_traceparent(bad), "{bad:?} passed");
        }
        assert_eq!(traceparent(None), None);
    }
}
