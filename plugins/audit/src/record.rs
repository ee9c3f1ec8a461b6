//! The audit lines: one JSON object per tool call, ended turn and finished subagent.
//!
//! ```text
//! {"ts":"2026-11-22T13:02:12.600Z","event":"tool_call","session_id":"20261122_130200_ab12","platform":"cli",
//!  "tool":"write_file","plugin":"files","call_id":"call_1","arguments":"{\"path\":\"a.txt\",...}",
//!  "ok":true,"duration_ms":3,"result_chars":41,"result_preview":"wrote 5 bytes (1 line) to a.txt (new file)"}
//! {"ts":"...","event":"turn_end","session_id":"...","platform":"cli","model":"...","reason":"completed"}
//! {"ts":"...","event":"subagent_stop","parent_session_id":"...","child_session_id":"...","goal":"...",
//!  "status":"completed","duration_ms":5120,"summary_chars":812,"summary_preview":"..."}
//! ```

use serde::Serialize;
use talaria_sdk::hooks::{Event, SessionEndEvent, SubagentEvent, ToolResultEvent};

/// Longest `arguments` kept, in characters.
pub const MAX_ARGUMENT_CHARS: usize = 2_000;
/// Length of `result_preview` and `summary_preview`, in characters.
pub const PREVIEW_CHARS: usize = 200;
/// Longest subagent `goal` kept, in characters.
pub const MAX_GOAL_CHARS: usize = 500;

/// What goes into a line besides the event.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Write the tool call's arguments (clipped); `null` otherwise.
    pub include_arguments: bool,
}

#[derive(Serialize)]
struct ToolLine<'a> {
    ts: &'a str,
    event: &'static str,
    session_id: &'a str,
    platform: &'a str,
    tool: &'a str,
    plugin: &'a str,
    call_id: &'a str,
    arguments: Option<String>,
    ok: bool,
    duration_ms: u64,
    result_chars: usize,
    result_preview: String,
}

#[derive(Serialize)]
struct TurnLine<'a> {
    ts: &'a str,
    event: &'static str,
    session_id: &'a str,
    platform: &'a str,
    model: &'a str,
    reason: &'a str,
}

#[derive(Serialize)]
struct SubagentLine<'a> {
    ts: &'a str,
    event: &'static str,
    parent_session_id: &'a str,
    child_session_id: &'a str,
    goal: String,
    status: &'a str,
    duration_ms: u64,
    summary_chars: usize,
    summary_preview: String,
}

/// The line for `event` at time `ts` (RFC 3339), without its newline; `None` for events the
/// audit does not record.
pub fn line(event: &Event, ts: &str, options: Options) -> Option<String> {
    let json = match event {
        Event::PostToolCall(e) => serde_json::to_string(&tool_line(e, ts, options)),
        Event::SessionEnd(e) => serde_json::to_string(&turn_line(e, ts)),
        Event::SubagentStop(e) => serde_json::to_string(&subagent_line(e, ts)),
        Event::PreToolCall(_)
        | Event::TransformToolResult(_)
        | Event::PreLlmCall(_)
        | Event::PostLlmCall(_)
        | Event::SessionStart(_)
        | Event::SessionFinalize(_)
        | Event::SessionReset(_) => return None,
    };
    // Serialising these plain structs of strings and numbers cannot fail.
    json.ok()
}

fn tool_line<'a>(e: &'a ToolResultEvent, ts: &'a str, options: Options) -> ToolLine<'a> {
    ToolLine {
        ts,
        event: "tool_call",
        session_id: &e.session.session_id,
        platform: &e.session.platform,
        tool: &e.tool,
        plugin: &e.plugin,
        call_id: &e.call_id,
        arguments: options.include_arguments.then(|| clip(&e.arguments, MAX_ARGUMENT_CHARS)),
        ok: e.ok,
        duration_ms: e.duration_ms,
        result_chars: e.result.chars().count(),
        result_preview: clip(&e.result, PREVIEW_CHARS),
    }
}

fn turn_line<'a>(e: &'a SessionEndEvent, ts: &'a str) -> TurnLine<'a> {
    TurnLine {
        ts,
        event: "turn_end",
        session_id: &e.session.session_id,
        platform: &e.session.platform,
        model: &e.session.model,
        reason: &e.reason,
    }
}

fn subagent_line<'a>(e: &'a SubagentEvent, ts: &'a str) -> SubagentLine<'a> {
    SubagentLine {
        ts,
        event: "subagent_stop",
        parent_session_id: &e.parent_session_id,
        child_session_id: &e.child_session_id,
        goal: clip(&e.goal, MAX_GOAL_CHARS),
        status: &e.status,
        duration_ms: e.duration_ms,
        summary_chars: e.summary.chars().count(),
        summary_preview: clip(&e.summary, PREVIEW_CHARS),
    }
}

/// The first `max` characters of `text`, with `…` when something was cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 UTC, e.g. `2026-11-22T13:02:12.600Z`.
pub fn rfc3339(unix_ms: u64) -> String {
    let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to a (year, month, day) in the proleptic Gregorian calendar
/// (H. Hinnant's `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_sdk::message::Session;

    fn session() -> Session {
        Session { session_id: "s1".into(), platform: "cli".into(), workspace: "/w".into(), model: "m1".into() }
    }

    fn result(arguments: String, result: String) -> Event {
        Event::PostToolCall(ToolResultEvent {
            session: session(),
            tool: "write_file".into(),
            plugin: "files".into(),
            arguments,
            call_id: "c1".into(),
            result,
            ok: true,
            duration_ms: 12,
        })
    }

    fn parse(line: &str) -> serde_json::Value {
        assert!(!line.contains('\n'), "one line: {line}");
        serde_json::from_str(line).expect("valid JSON")
    }

    #[test]
    fn a_tool_call_line_has_every_field_in_order() {
        let text = line(&result("{\"path\":\"a\"}".into(), "done".into()), "T", Options { include_arguments: true })
            .expect("recorded");
        assert_eq!(
            text,
            r#"{"ts":"T","event":"tool_call","session_id":"s1","platform":"cli","tool":"write_file","plugin":"files","call_id":"c1","arguments":"{\"path\":\"a\"}","ok":true,"duration_ms":12,"result_chars":4,"result_preview":"done"}"#
        );
    }

    #[test]
    fn long_arguments_and_results_are_clipped_by_characters() {
        let args = "é".repeat(3000);
        let res = "x\n".repeat(500);
        let v = parse(&line(&result(args, res), "T", Options { include_arguments: true }).expect("recorded"));
        assert_eq!(v["arguments"].as_str().map(|s| s.chars().count()), Some(MAX_ARGUMENT_CHARS + 1));
        assert_eq!(v["result_chars"], 1000);
        assert_eq!(v["result_preview"].as_str().map(|s| s.chars().count()), Some(PREVIEW_CHARS + 1));
        assert!(v["result_preview"].as_str().is_some_and(|s| s.ends_with('…')));
    }

    #[test]
    fn arguments_can_be_left_out() {
        let v = parse(
            &line(&result("{\"k\":1}".into(), "r".into()), "T", Options { include_arguments: false })
                .expect("recorded"),
        );
        assert_eq!(v["arguments"], serde_json::Value::Null);
    }

    #[test]
    fn turns_and_subagents_get_their_own_lines_and_other_events_none() {
        let opts = Options { include_arguments: true };
        let turn = Event::SessionEnd(SessionEndEvent { session: session(), reason: "completed".into() });
        assert_eq!(
            line(&turn, "T", opts).as_deref(),
            Some(
                r#"{"ts":"T","event":"turn_end","session_id":"s1","platform":"cli","model":"m1","reason":"completed"}"#
            )
        );
        let sub = Event::SubagentStop(SubagentEvent {
            parent_session_id: "p".into(),
            child_session_id: "c".into(),
            goal: "g".repeat(600),
            summary: "sum".into(),
            status: "failed".into(),
            duration_ms: 9,
        });
        let v = parse(&line(&sub, "T", opts).expect("recorded"));
        assert_eq!(
            (v["event"].as_str(), v["status"].as_str(), v["summary_chars"].as_u64()),
            (Some("subagent_stop"), Some("failed"), Some(3))
        );
        assert_eq!(v["goal"].as_str().map(|s| s.chars().count()), Some(MAX_GOAL_CHARS + 1));
        assert_eq!(line(&Event::SessionReset(session()), "T", opts), None);
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_352_532_600), "2026-11-22T13:02:12.600Z");
        assert_eq!(rfc3339(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }
}
