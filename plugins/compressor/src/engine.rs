//! The compressor itself, over a [`Host`] seam so tests can play the auxiliary model, kv and clock.
//!
//! [`compress`] runs the steps of Hermes' default compressor: plan the cuts ([`Plan`]), clear
//! large tool results outside the kept tail, summarize the middle (or update the earlier summary)
//! with the auxiliary model, fall back to a fixed summary when the model fails or is backing off,
//! put head + summary + tail back together and [`sanitize`] the result.
//!
//! ```ignore
//! let out = compress(request, &Config::default(), &mut SdkHost)?;
//! println!("{}", out.note);
//! ```

use crate::backoff::Backoff;
use crate::config::Config;
use crate::plan::{Plan, clear_tool_results, estimate_all, summary_role};
use crate::sanitize::{check, sanitize};
use crate::summary::{self, MARKER, Previous};
use talaria_sdk::context::{CompressRequest, Compressed, Status};
use talaria_sdk::llm::{Completion, LlmError, Request};
use talaria_sdk::message::{Message, Role};

/// The `purpose` of the summary request.
pub const PURPOSE: &str = "compression";

/// What the compressor needs from the host.
pub trait Host {
    /// One auxiliary-model completion.
    fn complete(&mut self, request: &Request) -> Result<Completion, LlmError>;
    /// Unix time in seconds.
    fn now(&self) -> u64;
    /// kv; a failing store reads as empty.
    fn kv_get(&mut self, key: &str) -> Option<Vec<u8>>;
    fn kv_set(&mut self, key: &str, value: &[u8]);
    fn kv_delete(&mut self, key: &str);
    fn warn(&mut self, message: &str);
}

/// Whether the prompt has reached the threshold. Never with an unknown (zero) window.
pub fn should_compress(status: &Status, config: &Config) -> bool {
    status.context_length > 0
        && status.prompt_tokens > 0
        && status.prompt_tokens >= config.threshold_tokens(status.context_length)
}

/// How the summary came about.
enum Source {
    Model,
    Failed(String),
    BackingOff(u64),
}

/// Rewrite the history: head + summary + tail. An error leaves it as it was.
pub fn compress(request: CompressRequest, config: &Config, host: &mut impl Host) -> Result<Compressed, String> {
    let CompressRequest { mut messages, focus, status, force, memory_context, carry, session } = request;
    let plan = Plan::new(&messages, config, status.context_length);
    if !plan.has_work() {
        return Err(nothing_to_compress(&messages, &plan, config, force));
    }

    let replaced_tokens = estimate_all(&messages[plan.middle()]);
    let cleared_in_head = clear_tool_results(&mut messages[..plan.clear_before.min(plan.head_end)]);
    clear_tool_results(&mut messages[plan.head_end.min(plan.clear_before)..plan.clear_before]);
    let tail = messages.split_off(plan.tail_start);
    let middle = messages.split_off(plan.head_end);
    let head = messages;
    let previous = plan.previous.map(|p| p - plan.head_end);
    let removed = middle.len() - usize::from(previous.is_some());
    let earlier = previous.map_or(0, |i| Previous::parse(&middle[i].content).compressed);

    let request = || {
        Request::new(PURPOSE)
            .system(format!("{}\n{}", summary::SYSTEM, summary::HEADINGS.join("\n")))
            .user(summary::prompt(&middle, previous, focus.as_deref(), &memory_context, status.context_length))
            .max_tokens(summary::budget(estimate_all(&middle), status.context_length))
    };
    let (text, source) = summarize(host, &session.session_id, force, request);
    let text = text.unwrap_or_else(|| summary::fallback(&middle, previous, removed));

    let number = status.compressions.saturating_add(1);
    let content = summary::content(number, earlier + removed as u64, &text, &carry);
    let (head_len, tail_len) = (head.len(), tail.len());
    let messages = assemble(head, content, tail);
    check(&messages).map_err(|e| format!("compressor bug, history left as it was: {e}"))?;

    let what = match (&source, previous.is_some()) {
        (Source::Model, false) => "a summary".to_string(),
        (Source::Model, true) => "the updated summary".to_string(),
        (Source::Failed(why), _) => format!("a fallback summary (the summary model failed: {why})"),
        (Source::BackingOff(secs), _) => {
            format!("a fallback summary (summary model paused for {secs} s more after failures)")
        }
    };
    let mut note = format!(
        "compressed {removed} messages (≈{} tokens) into {what}; kept {head_len} + {tail_len}",
        thousands(replaced_tokens)
    );
    match cleared_in_head {
        0 => {}
        1 => note.push_str("; cleared a large old tool result in the head"),
        n => note.push_str(&format!("; cleared {n} large old tool results in the head")),
    }
    Ok(Compressed { messages, note: one_line(&note) })
}

/// Ask the model unless backing off (and not forced); keep the backoff record. `None` means: use
/// the fallback.
fn summarize(
    host: &mut impl Host,
    session_id: &str,
    force: bool,
    request: impl FnOnce() -> Request,
) -> (Option<String>, Source) {
    let key = Backoff::key(session_id);
    let state = host.kv_get(&key).and_then(|bytes| Backoff::decode(&bytes));
    let now = host.now();
    if let Some(b) = state
        && !force
        && b.remaining(now) > 0
    {
        return (None, Source::BackingOff(b.remaining(now)));
    }
    let why = match host.complete(&request()) {
        Ok(c) => match clean(&c.text) {
            Some(text) => {
                if state.is_some() {
                    host.kv_delete(&key);
                }
                return (Some(text), Source::Model);
            }
            None => "it returned an empty summary".to_string(),
        },
        Err(LlmError::Denied(e)) => format!("denied: {e}"),
        Err(LlmError::Invalid(e)) => format!("invalid request: {e}"),
        Err(LlmError::Failed(e)) => e,
    };
    let next = Backoff::after_failure(state, now);
    host.kv_set(&key, &next.encode());
    host.warn(&format!(
        "summary model failed ({why}); using the fallback summary; failure {} in a row, next try in {} s",
        next.failures,
        next.remaining(now)
    ));
    (None, Source::Failed(summary::clip(&one_line(&why), 300).into_owned()))
}

/// The model's summary without an echoed marker line; `None` when nothing is left.
fn clean(text: &str) -> Option<String> {
    let mut text = text.trim();
    if text.starts_with(MARKER) {
        text = text.split_once('\n').map_or("", |(_, rest)| rest).trim();
    }
    (!text.is_empty()).then(|| text.to_string())
}

/// Head + summary + tail, the summary in the role [`summary_role`] picks; in front of the tail's
/// first message when that has the same role.
fn assemble(head: Vec<Message>, summary: String, mut tail: Vec<Message>) -> Vec<Message> {
    let role = summary_role(head.last(), tail.first());
    let mut out = head;
    match tail.first_mut() {
        Some(first) if first.role == role => first.content = summary::merged(&summary, &first.content),
        _ if role == Role::User => out.push(Message::user(summary)),
        _ => out.push(Message::assistant(summary)),
    }
    out.append(&mut tail);
    sanitize(out)
}

fn nothing_to_compress(messages: &[Message], plan: &Plan, config: &Config, force: bool) -> String {
    let n = messages.len();
    let (head, tail) = (plan.head_end, n - plan.tail_start.max(plan.head_end));
    if n == 0 {
        return "nothing to compress: the conversation is empty".into();
    }
    if plan.previous.is_some() {
        return format!(
            "nothing to compress: nothing is new since the last summary but the last {tail} messages, which are kept"
        );
    }
    match force {
        false => format!("nothing to compress: all {n} messages are kept (first {head}, last {tail})"),
        true => format!(
            "nothing to compress yet: all {n} messages are kept as they are (the first {} and the most recent {} or more, \
             up to {:.0}% of the window). Older turns can be summarized once the conversation grows past them.",
            config.protect_first_n,
            config.protect_last_n,
            config.tail_ratio * 100.0
        ),
    }
}

/// Labelled lines for `talaria context status`.
pub fn report(status: &Status, session_id: &str, config: &Config, host: &mut impl Host) -> Vec<(String, String)> {
    let window = status.context_length;
    let mut lines = Vec::new();
    let mut line = |label: &str, value: String| lines.push((label.to_string(), value));
    if window == 0 {
        line("threshold", "unknown (no context length yet)".into());
        line("context length", "unknown".into());
        line("prompt tokens", thousands(status.prompt_tokens));
    } else {
        let threshold = config.threshold_tokens(window);
        line(
            "threshold",
            format!(
                "{} tokens ({:.0}% of the window; threshold {:.2}, min_tokens {})",
                thousands(threshold),
                percent(threshold, window),
                config.threshold,
                thousands(config.min_tokens)
            ),
        );
        line("context length", format!("{} tokens", thousands(window)));
        line(
            "prompt tokens",
            format!(
                "{} ({:.0}% of the window)",
                thousands(status.prompt_tokens),
                percent(status.prompt_tokens, window)
            ),
        );
    }
    line("compressions", status.compressions.to_string());
    line("protect_first_n", format!("{} messages", config.protect_first_n));
    line(
        "protect_last_n",
        format!(
            "{} messages, more up to ≈{} tokens (tail_ratio {:.2})",
            config.protect_last_n,
            thousands(config.tail_budget(window)),
            config.tail_ratio
        ),
    );
    let state = host.kv_get(&Backoff::key(session_id)).and_then(|bytes| Backoff::decode(&bytes));
    let now = host.now();
    let model = match state {
        None => "no failures".to_string(),
        Some(b) if b.remaining(now) > 0 => {
            format!("{} failures in a row; fallback summaries for {} s more", b.failures, b.remaining(now))
        }
        Some(b) => format!("{} failures in a row; the next compression asks it again", b.failures),
    };
    line("auxiliary model", model);
    lines
}

fn percent(part: u64, whole: u64) -> f64 {
    part as f64 * 100.0 / whole as f64
}

/// `31200` as `31,200`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(31_200), "31,200");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn should_compress_at_the_threshold() {
        let c = Config::default();
        let at = |prompt_tokens, context_length| {
            should_compress(&Status { prompt_tokens, context_length, ..Status::default() }, &c)
        };
        assert!(!at(99_999, 200_000));
        assert!(at(100_000, 200_000));
        assert!(!at(63_999, 100_000));
        assert!(at(64_000, 100_000));
        assert!(at(6_800, 8_000));
        assert!(!at(6_799, 8_000));
        assert!(!at(1_000_000, 0));
    }
}
