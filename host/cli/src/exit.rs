//! Exit codes of `chat -q` (documented in docs/config.md and the README).

/// The model answered.
pub const OK: u8 = 0;
/// Every provider failed, or the session could not be saved.
pub const FAILED: u8 = 1;
/// The iteration budget ran out (the answer is a summary of the work so far).
pub const BUDGET: u8 = 3;
/// The answer was cut off at the output-token limit (what arrived is printed, and kept in
/// the session marked as cut).
pub const TRUNCATED: u8 = 4;
/// Not run: a spending limit of `[budget]` is reached.
pub const REFUSED: u8 = 5;
/// Interrupted (Ctrl-C), as shells expect.
pub const INTERRUPTED: u8 = 130;
/// Stopped by SIGHUP (the terminal closed): 128 + 1.
pub const HANGUP: u8 = 129;
/// Stopped by SIGTERM: 128 + 15.
pub const TERMINATED: u8 = 143;
