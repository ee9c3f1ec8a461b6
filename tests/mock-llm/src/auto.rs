//! The auto rule: answers that depend only on the request, for benchmarks.
//!
//! 1. Find the last *user text* in the request: Chat Completions `role: "user"` messages
//!    (string content or `text` parts); Anthropic `role: "user"` messages without any
//!    `tool_result` block (string content or `text` blocks); Responses `input` as a string, or
//!    its items with `role: "user"` (string content or `input_text` parts).
//! 2. Count the *tool results* after it: `role: "tool"` messages; `tool_result` blocks;
//!    `function_call_output` items. Call that count `k`.
//! 3. If the user text contains `use [the] NAME [tool] N time[s]` (words separated by
//!    whitespace, case-insensitive keywords, punctuation around words ignored):
//!    while `k < N` answer with one call of tool NAME (NAME `tool` means the configured
//!    [`Auto::tool`]) with the configured [`Auto::args`], `{n}` in them replaced by `k + 1`;
//!    once `k >= N` answer the text `done`.
//! 4. If the user text starts with `echo ` answer the rest of it (so each of many concurrent
//!    conversations can tell its answer from the others').
//! 5. Otherwise answer the text `ok`.
//!
//! So `talaria chat -q "use read_file 20 times"` makes 21 model calls: 20 that each call
//! `read_file` once, then one answering `done`. Whether a tool call succeeded does not matter,
//! only that its result came back.

use serde_json::Value;

use crate::script::{Auto, Reply};
use crate::wire::Wire;

/// What the auto rule answers to `body`, a request in `wire` format.
pub(crate) fn answer(wire: Wire, body: &Value, auto: &Auto) -> Reply {
    let reply = rule(wire, body, auto);
    match auto.pace_ms {
        Some(ms) => reply.paced(ms),
        None => reply,
    }
}

fn rule(wire: Wire, body: &Value, auto: &Auto) -> Reply {
    let (instruction, results) = last_user_text(wire, body);
    if let Some(echo) = instruction.as_deref().and_then(|t| t.strip_prefix("echo ")) {
        return Reply::text(echo);
    }
    match instruction.as_deref().and_then(parse) {
        Some((name, n)) if results < n => {
            let name = if name.eq_ignore_ascii_case("tool") { auto.tool.clone() } else { name };
            let args = match &auto.args {
                Value::String(raw) => raw.clone(),
                other => other.to_string(),
            };
            let args = args.replace("{n}", &(results + 1).to_string());
            Reply::default().tool_call(name, Value::String(args))
        }
        Some(_) => Reply::text("done"),
        None => Reply::text("ok"),
    }
}

/// `use [the] NAME [tool] N time[s]` → (NAME, N).
fn parse(text: &str) -> Option<(String, usize)> {
    let words: Vec<&str> = text
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')))
        .filter(|w| !w.is_empty())
        .collect();
    (0..words.len()).find_map(|i| {
        if !words[i].eq_ignore_ascii_case("use") {
            return None;
        }
        let mut rest = words[i + 1..].iter().copied().peekable();
        rest.next_if(|w| w.eq_ignore_ascii_case("the"));
        let name = rest.next()?;
        rest.next_if(|w| w.eq_ignore_ascii_case("tool"));
        let n = rest.next()?.parse().ok()?;
        let unit = rest.next()?;
        (unit.eq_ignore_ascii_case("times") || unit.eq_ignore_ascii_case("time")).then(|| (name.to_owned(), n))
    })
}

/// The last user text seen so far and the number of tool results after it.
#[derive(Default)]
struct Tally {
    text: Option<String>,
    results: usize,
}

impl Tally {
    fn user(&mut self, text: String) {
        self.text = Some(text);
        self.results = 0;
    }

    fn tool_results(&mut self, count: usize) {
        self.results += count;
    }
}

/// The last user text and the number of tool results after it.
fn last_user_text(wire: Wire, body: &Value) -> (Option<String>, usize) {
    let mut tally = Tally::default();
    match wire {
        Wire::ChatCompletions => {
            for message in items(body, "messages") {
                match message.get("role").and_then(Value::as_str) {
                    Some("user") => tally.user(content_text(message.get("content"), "text")),
                    Some("tool" | "function") => tally.tool_results(1),
                    _ => {}
                }
            }
        }
        Wire::AnthropicMessages => {
            for message in items(body, "messages") {
                if message.get("role").and_then(Value::as_str) != Some("user") {
                    continue;
                }
                let content = message.get("content");
                let results = content
                    .and_then(Value::as_array)
                    .map_or(0, |blocks| blocks.iter().filter(|b| kind(b) == Some("tool_result")).count());
                if results > 0 {
                    tally.tool_results(results);
                } else {
                    tally.user(content_text(content, "text"));
                }
            }
        }
        Wire::Responses => {
            if let Some(input) = body.get("input").and_then(Value::as_str) {
                tally.user(input.to_owned());
            }
            for item in items(body, "input") {
                if kind(item) == Some("function_call_output") {
                    tally.tool_results(1);
                } else if item.get("role").and_then(Value::as_str) == Some("user") {
                    tally.user(content_text(item.get("content"), "input_text"));
                }
            }
        }
    }
    (tally.text, tally.results)
}

fn items<'a>(body: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    body.get(key).and_then(Value::as_array).into_iter().flatten()
}

fn kind(value: &Value) -> Option<&str> {
    value.get("type").and_then(Value::as_str)
}

/// String content, or the `text` of its parts of type `part` joined by newlines.
fn content_text(content: Option<&Value>, part: &str) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| kind(p) == Some(part))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn instruction_forms() {
        assert_eq!(parse("use read_file 20 times"), Some(("read_file".into(), 20)));
        assert_eq!(parse("Please USE the tool 3 times."), Some(("tool".into(), 3)));
        assert_eq!(parse("use the read_file tool 1 time, thanks"), Some(("read_file".into(), 1)));
        assert_eq!(parse("use it wisely"), None);
        assert_eq!(parse("use read_file twenty times"), None);
        assert_eq!(parse("hello"), None);
    }

    fn calls(reply: &Reply) -> Vec<(String, String)> {
        reply.tool_calls.iter().map(|c| (c.name.clone(), c.arguments_text())).collect()
    }

    #[test]
    fn counts_tool_results_after_the_last_user_text() {
        let auto = Auto { tool: "grep".into(), args: json!({"path": "f{n}.txt"}), pace_ms: None };
        let mut messages = vec![
            json!({"role": "user", "content": "use read_file 1 times"}),
            json!({"role": "tool", "content": "x"}),
            json!({"role": "user", "content": [{"type": "text", "text": "now use the tool 2 times"}]}),
        ];
        let body = |m: &[Value]| json!({"messages": m});
        let reply = answer(Wire::ChatCompletions, &body(&messages), &auto);
        assert_eq!(calls(&reply), [("grep".to_owned(), r#"{"path":"f1.txt"}"#.to_owned())]);
        messages.push(json!({"role": "assistant", "content": null}));
        messages.push(json!({"role": "tool", "content": "x"}));
        let reply = answer(Wire::ChatCompletions, &body(&messages), &auto);
        assert_eq!(calls(&reply), [("grep".to_owned(), r#"{"path":"f2.txt"}"#.to_owned())]);
        messages.push(json!({"role": "tool", "content": "x"}));
        assert_eq!(answer(Wire::ChatCompletions, &body(&messages), &auto).text, "done");
        assert_eq!(answer(Wire::ChatCompletions, &json!({"messages": []}), &auto).text, "ok");
        let echo = json!({"messages": [{"role": "user", "content": "echo chat 17 says hi"}]});
        assert_eq!(answer(Wire::ChatCompletions, &echo, &auto).text, "chat 17 says hi");
    }

    #[test]
    fn anthropic_and_responses_tool_results() {
        let auto = Auto::default();
        let body = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "use read_file 2 times"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]},
        ]});
        assert_eq!(calls(&answer(Wire::AnthropicMessages, &body, &auto)), [("read_file".to_owned(), "{}".to_owned())]);
        let body = json!({"input": [
            {"role": "user", "content": "use read_file 2 times"},
            {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "x"},
            {"type": "function_call_output", "call_id": "call_2", "output": "x"},
        ]});
        assert_eq!(answer(Wire::Responses, &body, &auto).text, "done");
        assert_eq!(answer(Wire::Responses, &json!({"input": "hi"}), &auto).text, "ok");
    }
}
