//! The REPL as a person at a terminal meets it: what typing and pasting send, and what the
//! screen shows (drawn by a terminal emulator from the raw output).

use serde_json::Value;
use talaria_mock_llm::{MockLlm, Reply, Script};

use super::Talaria;
use crate::repl::Repl;

/// The user messages the model was sent in its last request.
fn user_messages(mock: &MockLlm) -> Vec<String> {
    let requests = mock.requests();
    let body: &Value = &requests.last().expect("a request").body;
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().expect("text").to_string())
        .collect()
}

#[test]
fn a_three_line_paste_is_sent_as_one_message() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Reply::text("got all three").into()]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter for a new line", 1);
    // The terminal is asked to mark pastes (xterm's bracketed paste mode), so a real one wraps
    // them as typed below.
    repl.wait_for("\x1b[?2004h", 1);
    // What a terminal sends for a paste once the editor asked for bracketed paste.
    repl.type_raw("\x1b[200~first line\nsecond line\nthird line\x1b[201~");
    repl.send("");
    repl.wait_for("got all three", 1);
    assert_eq!(mock.requests().len(), 1, "one message, one request");
    let sent = user_messages(&mock);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].ends_with("first line\nsecond line\nthird line"), "{sent:?}");
    repl.close();
}

/// Whether `raw` sets a colour or style (an SGR sequence, `ESC [ params m`, other than the
/// plain reset the line editor writes before each prompt).
fn has_style(raw: &str) -> bool {
    raw.match_indices("\x1b[").any(|(at, _)| {
        let rest = &raw[at + 2..];
        let params = rest.find(|c: char| !(c.is_ascii_digit() || c == ';')).unwrap_or(rest.len());
        rest[params..].starts_with('m') && !["", "0"].contains(&&rest[..params])
    })
}

const MARKDOWN: &str = "## Sizes\n\n| file | lines |\n|---|--:|\n| main.rs | 120 |\n| lib.rs | 8 |\n\n\
    - one **bold** item\n- see [the docs](https://example.test/docs)\n\n```rust\nfn main() {}\n```\n";

/// The rows of `screen` from the first that contains `from`.
fn rows_from<'a>(screen: &'a [String], from: &str) -> &'a [String] {
    let at = screen.iter().position(|r| r.contains(from)).unwrap_or_else(|| panic!("{from:?} on screen: {screen:#?}"));
    &screen[at..]
}

#[test]
fn markdown_is_rendered_and_no_color_keeps_the_layout_without_a_style() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Reply::text(MARKDOWN).into()]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("show me");
    repl.wait_for(" · session ", 1);
    let screen = repl.screen();
    let shown = rows_from(&screen, "## Sizes");
    assert_eq!(
        &shown[..13],
        [
            "## Sizes",
            "",
            "┌─────────┬───────┐",
            "│ file    │ lines │",
            "├─────────┼───────┤",
            "│ main.rs │   120 │",
            "│ lib.rs  │     8 │",
            "└─────────┴───────┘",
            "",
            "- one bold item",
            "- see the docs (https://example.test/docs)",
            "",
            "```rust",
        ]
    );
    assert_eq!(shown[13..15], ["fn main() {}", "```"]);
    assert!(!has_style(&repl.text()), "NO_COLOR: not one colour or style sequence:\n{:?}", repl.text());
    repl.close();
}

#[test]
fn in_colour_the_answer_is_styled_and_code_highlighted() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Reply::text(MARKDOWN).into()]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start_colored(&t, true);
    repl.wait_for("Alt-Enter", 1);
    repl.send("show me");
    repl.wait_for(" · session ", 1);
    let screen = repl.screen();
    let shown = rows_from(&screen, "Sizes");
    assert_eq!(shown[0], "Sizes", "the heading loses its marks");
    assert_eq!(shown[2], "┌─────────┬───────┐");
    assert!(shown.contains(&"• one bold item".to_string()), "{shown:#?}");
    let raw = repl.text();
    assert!(raw.contains("\x1b[1mbold\x1b[0m"), "bold is bold: {raw:?}");
    assert!(raw.contains("\x1b[38;5;"), "code is highlighted: {raw:?}");
    repl.close();
}

#[test]
fn tool_calls_show_a_failing_exit_code_and_a_patch_its_diff() {
    let t = Talaria::new();
    std::fs::write(t.workspace.path().join("notes.txt"), "alpha\nbeta\ngamma\n").expect("write");
    let mock = MockLlm::start(Script::new([
        Reply::text("")
            .tool_call(
                "patch",
                serde_json::json!({"path": "notes.txt", "old_string": "beta\n", "new_string": "BETA\n"}),
            )
            .into(),
        Reply::text("").tool_call("terminal", serde_json::json!({"command": "echo first; echo second; exit 3"})).into(),
        Reply::text("both done").into(),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("edit then run");
    repl.wait_for("both done", 1);
    let screen = repl.screen();
    let shown = rows_from(&screen, "┊ ✓ patch");
    assert_eq!(shown[1], "┊ edited notes.txt +1 -1", "{shown:#?}");
    let diff: Vec<&str> = shown[2..8].iter().map(String::as_str).collect();
    assert_eq!(
        diff,
        [
            "┊   @@ -1,3 +1,3 @@",
            "┊    alpha",
            "┊   -beta",
            "┊   +BETA",
            "┊    gamma",
            "┊ ⚙ terminal echo first; echo second; exit 3"
        ]
    );
    let failed = rows_from(&screen, "┊ ✗ terminal");
    assert!(failed[0].ends_with("exit 3"), "the exit code, not a tick: {failed:#?}");
    assert_eq!(failed[1..3], ["┊   first", "┊   second"], "the output's last lines");
    repl.close();
}

#[test]
fn the_status_line_shows_the_tokens_the_model_reported_and_their_cost() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Reply::text("first answer").usage(1234, 56).into(),
        Reply::text("second answer").usage(2000, 100).into(),
    ]));
    t.use_model(&mock.base_url(), "chat_completions", "input_price = 2.0\noutput_price = 8.0", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("one");
    repl.wait_for("first answer", 1);
    let text = repl.wait_for("$0.0029 session", 1);
    assert!(
        text.contains("custom/mock-model · context 1% of 128k · turn 1234 in, 56 out · session 1234 in, 56 out · $0.0029 turn, $0.0029 session"),
        "{text}"
    );
    repl.send("two");
    let text = repl.wait_for("session 3234 in, 156 out", 1);
    assert!(
        text.contains(
            "context 2% of 128k · turn 2000 in, 100 out · session 3234 in, 156 out · $0.0048 turn, $0.0077 session"
        ),
        "{text}"
    );
    repl.close();
}
