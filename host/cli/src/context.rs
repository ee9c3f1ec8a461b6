//! `talaria context status`, and the context lines `/context` prints.

use std::fmt::Write as _;

use talaria_protocol::ContextStatus;

/// The context window's fill and the engine's own lines, for people.
pub fn status_lines(engine: &str, status: &ContextStatus, lines: &[(String, String)]) -> String {
    let pct = if status.context_length == 0 {
        0.0
    } else {
        status.prompt_tokens as f64 * 100.0 / status.context_length as f64
    };
    let mut out = format!(
        "context engine: {engine}\nprompt: ≈{} of {} tokens ({pct:.1}%), {} messages, {} compressions so far",
        status.prompt_tokens, status.context_length, status.message_count, status.compressions
    );
    let width = lines.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    for (key, value) in lines {
        let _ = write!(out, "\n  {key:<width$}  {value}");
    }
    out
}
