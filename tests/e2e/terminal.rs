//! The REPL as a person at a terminal meets it: what typing and pasting send, and what the
//! screen shows (drawn by a terminal emulator from the raw output).

use serde_json::{Value, json};
use talaria_mock_llm::{MockLlm, Reply, Script, Step};

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
    repl.wait_for("for a new line", 1);
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
    repl.wait_for("$0.0029 session", 1);
    // Wider than the 100 columns: the part that does not fit starts a row of its own.
    let screen = repl.screen();
    let status = rows_from(&screen, "custom/mock-model · context 1% of 128k");
    assert_eq!(
        status[..2],
        [
            "custom/mock-model · context 1% of 128k · turn 1234 in, 56 out · session 1234 in, 56 out",
            "  $0.0029 turn, $0.0029 session"
        ],
        "{screen:#?}"
    );
    repl.send("two");
    repl.wait_for("$0.0077 session", 1);
    let screen = repl.screen();
    let status = rows_from(&screen, "context 2% of 128k");
    assert_eq!(
        status[..2],
        [
            "custom/mock-model · context 2% of 128k · turn 2000 in, 100 out · session 3234 in, 156 out",
            "  $0.0048 turn, $0.0077 session"
        ],
        "{screen:#?}"
    );
    repl.close();
}

/// Set `[terminal] busy_input` for the REPL.
fn busy_input(t: &Talaria, mock: &MockLlm, policy: &str) {
    t.use_model(&mock.base_url(), "chat_completions", "", &format!("\n[terminal]\nbusy_input = \"{policy}\"\n"));
}

#[test]
fn text_typed_while_an_answer_streams_stays_in_the_input_line() {
    let t = Talaria::new();
    let answer =
        "The first paragraph of the answer, long enough to show.\n\n- a list item\n- another one\n\nAnd it goes on";
    let mock = MockLlm::start(Script::new([talaria_mock_llm::Step::stall(answer)]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("tell me");
    repl.wait_for("And it goes on", 1);
    repl.type_raw("half a thought");
    repl.wait_for("half a thought", 1);
    let screen = repl.screen();
    let shown = rows_from(&screen, "The first paragraph");
    assert_eq!(
        shown[..6],
        [
            "The first paragraph of the answer, long enough to show.",
            "",
            "- a list item",
            "- another one",
            "",
            "And it goes on"
        ],
        "the answer is intact: {screen:#?}"
    );
    assert_eq!(
        screen.iter().rev().find(|r| !r.is_empty()).map(String::as_str),
        Some("› half a thought"),
        "{screen:#?}"
    );
    assert_eq!(
        screen.iter().filter(|r| r.contains("half a thought")).count(),
        1,
        "typed once, not echoed into the answer"
    );
    // Ctrl-C stops the reply; what was typed is still there to finish. The cut reply is marked
    // where it stops; the report says what was kept and what was not, and the status line
    // counts the cut request, estimated (it was made, and it is billed).
    repl.type_raw("\x03");
    repl.wait_for("interrupted", 1);
    let text = repl.wait_for(" · session ", 1);
    let screen = repl.screen();
    let end = screen.iter().position(|r| r == "And it goes on").unwrap_or_else(|| panic!("{screen:#?}"));
    assert_eq!(screen[end + 1], "  [cut: the reply above stops here, and was not kept]", "{screen:#?}");
    assert!(
        text.contains("interrupted: kept your message; the unfinished reply was not (/undo drops what was kept)"),
        "{text}"
    );
    assert!(text.contains(" · turn ~") && !text.contains("turn 0 in, 0 out"), "the cut request's tokens: {text}");
    repl.type_raw(" and more");
    repl.send("");
    repl.wait_for("session ", 2);
    let sent = user_messages(&mock);
    assert!(sent.last().is_some_and(|m| m.ends_with("half a thought and more")), "{sent:?}");
    repl.close();
}

/// Issue 41, finding 3: Esc alone stops a streaming reply as Ctrl-C does; Ctrl-C at an
/// approval after a tool call ran says that call and its result were kept.
#[test]
fn esc_stops_a_reply_and_an_interrupt_says_what_it_kept() {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let mock = MockLlm::start(Script::new([
        Step::stall("A long answer that never ends"),
        Step::tool_call("terminal", json!({"command": "echo first-call-ran"})),
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("talk");
    repl.wait_for("never ends", 1);
    repl.type_raw("\x1b");
    repl.wait_for("interrupted: kept your message; the unfinished reply was not", 1);
    assert!(repl.text().contains("stopping… (Esc)"), "{}", repl.text());
    repl.wait_for(" · session ", 1);
    repl.send("clean up");
    repl.wait_for("Allow?", 1);
    repl.type_raw("\x03");
    let text = repl.wait_for("interrupted: kept your message and 2 tool calls with their results", 1);
    assert!(text.contains("first-call-ran"), "{text}");
    assert!(t.ws().join("build").is_dir(), "the refused command did not run");
    repl.close();
}

/// Issue 41, finding 4: a running command shows how long it has run and its last lines as they
/// come; stopped, the line says for how long it really ran, what it printed stays on the screen
/// and goes to the model in its result; a folded output is shown whole by `/expand`.
#[test]
fn a_running_tool_shows_its_time_and_output_and_keeps_both_when_stopped() {
    let t = Talaria::new();
    let slow = "for i in $(seq 1 30); do echo tick-$i; sleep 1; done";
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": slow})),
        Step::tool_call("terminal", json!({"command": "seq 1 40"})),
        Step::text("counted"),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("count slowly");
    // While it runs: the seconds tick and the last lines come in under the indicator.
    let tick = |row: &str| row.strip_prefix("┊   tick-").and_then(|n| n.parse::<u32>().ok());
    repl.wait_for_screen("the running command's time and last lines", |s| {
        let secs = s.iter().find_map(|r| r.split_once("terminal running… ").and_then(|(_, t)| t.strip_suffix('s')));
        secs.and_then(|t| t.parse::<u32>().ok()).is_some_and(|t| t >= 2)
            && s.windows(3).any(|w| matches!((tick(&w[0]), tick(&w[1]), tick(&w[2])), (Some(a), Some(b), Some(c)) if a + 1 == b && b + 1 == c && c >= 3))
    });
    repl.type_raw("\x1b");
    let text = repl.wait_for("interrupted: kept your message and 1 tool call with its result", 1);
    let screen = repl.screen();
    let stopped = screen.iter().position(|r| r.starts_with("┊ ✗ terminal")).expect("the call's line");
    let secs: f64 = screen[stopped]
        .trim_start_matches("┊ ✗ terminal ")
        .split_once("s interrupted")
        .and_then(|(took, _)| took.parse().ok())
        .unwrap_or_else(|| panic!("a duration in seconds: {}", screen[stopped]));
    assert!((2.0..30.0).contains(&secs), "the time it really ran: {}", screen[stopped]);
    assert!(
        screen[stopped + 1..].iter().filter_map(|r| tick(r)).any(|n| n >= 3),
        "what it printed stays under its line: {screen:#?}"
    );
    assert!(!text.contains("tick-30"), "it was stopped");

    // The model reads what it printed before it was stopped.
    repl.wait_for(" · session ", 1);
    repl.send("go on");
    repl.wait_for("counted", 1);
    let sent = &mock.requests()[1].body;
    let result = sent["messages"].as_array().expect("messages").iter().find(|m| m["role"] == "tool").expect("a result");
    let result: Value = serde_json::from_str(result["content"].as_str().expect("text")).expect("json");
    assert!(result["error"].as_str().expect("error").starts_with("interrupted"), "{result}");
    assert!(result["output_so_far"].as_str().expect("output").starts_with("tick-1\ntick-2\ntick-3\n"), "{result}");

    // 40 lines are folded to their last 3, under a number /expand takes.
    let screen = repl.screen();
    assert!(screen.iter().any(|r| r == "┊   … 37 more lines · /expand 1"), "{screen:#?}");
    repl.send("/expand 1");
    let text = repl.wait_for("output 1, whole:", 1);
    let whole = &text[text.rfind("output 1, whole:").expect("shown")..];
    assert!((1..=40).all(|n| whole.contains(&format!("┊   {n}\r\n"))), "every line: {whole}");
    repl.send("/expand 7");
    repl.wait_for("there is no folded output 7; the ones kept are 1 to 1", 1);
    repl.close();
}

/// Issue 41, finding 5: the approval says what `s` and `a` allow before a key is pressed, and a
/// later command that the session's answer lets through says so on its line.
#[test]
fn an_approval_names_its_scope_and_a_remembered_answer_shows_when_it_allows() {
    let t = Talaria::new();
    for dir in ["build", "dist", "out"] {
        std::fs::create_dir(t.ws().join(dir)).expect("mkdir");
    }
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Step::text("removed build"),
        Step::tool_call("terminal", json!({"command": "rm -rf dist"})),
        Step::text("removed dist"),
        Step::tool_call("terminal", json!({"command": "rm -rf out"})),
        Step::text("not removed"),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("clean build");
    repl.wait_for("Allow?", 1);
    let screen = repl.screen();
    let asked = rows_from(&screen, "wants to run this command");
    assert_eq!(
        asked[3..6],
        [
            "  [s] this session: every `rm-recursive` command (recursive delete), without asking",
            "  [a] always: the same in every session, saved in config.toml as `rm-recursive`",
            "  Allow? [y] once  [s] this session  [a] always  [n] no   (Enter: no; no answer in 300s: no)",
        ],
        "{screen:#?}"
    );
    repl.type_raw("s");
    repl.wait_for("removed build", 1);
    repl.send("clean dist");
    let text = repl.wait_for("removed dist", 1);
    assert_eq!(text.matches("Allow?").count(), 1, "not asked again: {text}");
    assert!(!t.ws().join("dist").exists());
    let screen = repl.screen();
    assert!(
        screen
            .iter()
            .any(|r| r.starts_with("┊ ✓ terminal ") && r.ends_with(" · allowed by this session's rm-recursive")),
        "{screen:#?}"
    );

    // /permissions lists the answer; removed, the next such command is asked about again.
    repl.send("/permissions");
    repl.wait_for("`/permissions remove KEY` asks about it again", 1);
    assert!(repl.screen().iter().any(|r| r == "rm-recursive  this session"), "{:#?}", repl.screen());
    repl.send("/permissions remove rm-recursive");
    repl.wait_for("`rm-recursive` is asked about again in this session", 1);
    repl.send("clean out");
    repl.wait_for("Allow?", 2);
    repl.type_raw("n");
    repl.wait_for("not removed", 1);
    assert!(t.ws().join("out").is_dir(), "denied, so not run");
    repl.send("/permissions remove rm-recursive");
    repl.wait_for("`rm-recursive` is not allowed without asking (see /permissions)", 1);
    repl.close();
}

/// Issue 41, finding 6: a bare `talaria` opens the chat on a terminal, as `talaria chat` does;
/// piped, it prints the help and exits 2.
#[test]
fn bare_talaria_opens_the_chat_on_a_terminal_and_prints_the_help_elsewhere() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Step::text("hello from a bare start")]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start_args(&t, &[]);
    repl.wait_for("Alt-Enter", 1);
    repl.send("hi");
    repl.wait_for("hello from a bare start", 1);
    repl.close();
    let out = t.run(&[]);
    assert_eq!(out.status.code(), Some(2), "no command and no terminal");
    let help = String::from_utf8_lossy(&out.stderr);
    assert!(help.contains("Usage: talaria [OPTIONS] [COMMAND]"), "{help}");
}

#[test]
fn queued_messages_go_after_the_turn_but_never_after_a_ctrl_c() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Step::text("first done").delayed(1500),
        Step::text("second done"),
        Step::stall("working on it"),
    ]));
    busy_input(&t, &mock, "queue");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("first");
    repl.wait_for("Enter queues it", 1);
    repl.send("second");
    repl.wait_for("↳ queued: second", 1);
    repl.wait_for("second done", 1);
    assert_eq!(user_messages(&mock), ["first", "second"], "sent after the turn");
    assert!(repl.screen().iter().any(|r| r == "› second"), "shown as it went out: {:#?}", repl.screen());

    repl.send("third");
    repl.wait_for("working on it", 1);
    repl.send("fourth");
    repl.wait_for("↳ queued: fourth", 1);
    repl.type_raw("\x03");
    repl.wait_for("back in the input line", 1);
    repl.wait_for_last_row("› fourth");
    assert_eq!(mock.requests().len(), 3, "nothing sent after Ctrl-C");
    // Ctrl-D leaves only from an empty line.
    repl.type_raw("\x15");
    repl.wait_for_last_row("›");
    repl.close();
}

#[test]
fn by_default_a_message_typed_during_a_turn_stops_it_and_is_sent() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Step::stall("a long answer that"), Step::text("answered the new one")]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("first");
    repl.wait_for("a long answer that", 1);
    repl.send("never mind, this instead");
    repl.wait_for("answered the new one", 1);
    let sent = user_messages(&mock);
    assert!(sent.last().is_some_and(|m| m.ends_with("never mind, this instead")), "{sent:?}");
    assert!(repl.text().contains("interrupted"), "the stop is said");
    repl.close();
}

#[test]
fn steering_reaches_the_model_with_the_next_tool_result() {
    let t = Talaria::new();
    std::fs::write(t.workspace.path().join("a.txt"), "alpha").expect("write");
    let mock = MockLlm::start(Script::new([
        Step::from(Reply::text("").tool_call("read_file", serde_json::json!({"path": "a.txt"}))).delayed(1500),
        Step::text("read it"),
    ]));
    busy_input(&t, &mock, "steer");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("read a.txt");
    repl.wait_for("Enter tells the model", 1);
    repl.send("look for beta too");
    repl.wait_for("the model was told: look for beta too", 1);
    repl.wait_for("read it", 1);
    let requests = mock.requests();
    let last = &requests.last().expect("request").body["messages"];
    let tool = last.as_array().and_then(|m| m.iter().find(|m| m["role"] == "tool")).expect("a tool result");
    let content = tool["content"].as_str().expect("text");
    assert!(content.contains("alpha") && content.ends_with("it is not tool output]\nlook for beta too"), "{content}");
    assert_eq!(user_messages(&mock), ["read a.txt"], "steering is not a new message");
    repl.close();
}

#[test]
fn one_key_answers_an_approval_and_enter_denies() {
    let t = Talaria::new();
    std::fs::create_dir(t.workspace.path().join("build")).expect("mkdir");
    let mock = MockLlm::start(Script::new([
        Reply::text("").tool_call("terminal", serde_json::json!({"command": "rm -rf build"})).into(),
        Step::text("removed"),
        Reply::text("").tool_call("terminal", serde_json::json!({"command": "rm -rf build"})).into(),
        Step::text("not removed"),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("clean up");
    repl.wait_for("Allow?", 1);
    repl.type_raw("y");
    repl.wait_for("allowed once", 1);
    repl.wait_for("removed", 1);
    assert!(!t.workspace.path().join("build").exists());
    repl.send("again");
    repl.wait_for("Allow?", 2);
    repl.send("");
    repl.wait_for("not removed", 1);
    assert!(repl.text().contains("→ denied"), "Enter is the safe answer");
    repl.close();
}

#[test]
fn sessions_get_a_short_unique_title_in_the_background() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Step::text("Use git rebase -i."),
        Step::text("\"Rebasing a Git branch.\""),
        Step::text("Again: git rebase -i."),
        Step::text("Rebasing a Git branch"),
    ]));
    t.use_model(&mock.base_url(), "chat_completions", "", "auto_title = true\n");
    let mut shown = Vec::new();
    for _ in 0..2 {
        let mut repl = Repl::start(&t);
        repl.wait_for("Alt-Enter", 1);
        repl.send("how do I rebase?");
        repl.wait_for(" · session ", 1);
        shown.push(repl.close_showing());
    }
    assert!(
        shown[0].contains("resume this conversation with: talaria chat --resume 'Rebasing a Git branch'\r"),
        "{}",
        shown[0]
    );
    assert!(shown[1].contains("--resume 'Rebasing a Git branch 2'\r"), "unique: {}", shown[1]);
    let requests = mock.requests();
    let asked = requests[1].body["messages"].to_string();
    assert!(
        asked.contains("You name conversations")
            && asked.contains("how do I rebase?")
            && asked.contains("Use git rebase -i."),
        "{asked}"
    );
    let list = t.ok(&["sessions", "list"]);
    assert!(list.contains("Rebasing a Git branch 2"), "{list}");
    let second = t.ok(&["sessions", "show", "Rebasing a Git branch 2"]);
    assert!(second.contains("Again: git rebase -i."), "usable as a key: {second}");
    // A one-shot asks for no title.
    let mock = MockLlm::start(Script::new([Step::text("quick")]));
    t.use_model(&mock.base_url(), "chat_completions", "", "auto_title = true\n");
    assert_eq!(t.ok(&["chat", "-q", "hello"]).trim(), "quick");
    assert_eq!(mock.requests().len(), 1);
}

/// Issue 41, finding 2: a session whose model the flags chose, with no `[model]` in config (the
/// README's own "Try it" line), is titled as one with the model from config is, by that model.
#[test]
fn a_session_whose_model_flags_chose_gets_its_title() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Step::text("Use git rebase -i."), Step::text("Rebasing a Git branch")]));
    let url = mock.base_url();
    let mut repl = Repl::start_args(&t, &["chat", "--provider", "custom", "--base-url", &url, "--model", "flagged"]);
    repl.wait_for("Alt-Enter", 1);
    repl.send("how do I rebase?");
    repl.wait_for(" · session ", 1);
    let shown = repl.close_showing();
    assert!(shown.contains("talaria chat --resume 'Rebasing a Git branch'\r"), "{shown}");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "the answer, then the title");
    assert!(requests[1].body["messages"].to_string().contains("You name conversations"));
    assert_eq!(requests[1].body["model"], "flagged", "the title is asked of the model the flags chose");
}

#[test]
fn an_at_mention_completes_and_attaches_a_workspace_file_and_nothing_outside() {
    let t = Talaria::new();
    std::fs::write(t.workspace.path().join("notes.txt"), "the launch code is 4512\n").expect("write");
    let outside = tempfile::tempdir().expect("dir");
    std::fs::write(outside.path().join("secret.txt"), "hunter2").expect("write");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), t.workspace.path().join("link.txt")).expect("link");
    let mock = MockLlm::start(Script::new([Step::text("read it"), Step::text("nothing there")]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.type_raw("summarize @no\t");
    repl.wait_for_last_row("› summarize @notes.txt");
    repl.send("");
    repl.wait_for("read it", 1);
    let sent = user_messages(&mock);
    assert!(
        sent[0]
            .starts_with("summarize @notes.txt\n\nThe user attached notes.txt:\n```txt\nthe launch code is 4512\n```"),
        "{sent:?}"
    );
    assert!(repl.text().contains("attached notes.txt (1 line)"));
    repl.send("and @link.txt");
    repl.wait_for("nothing there", 1);
    let sent = user_messages(&mock);
    assert_eq!(sent.last().map(String::as_str), Some("and @link.txt"), "not attached");
    assert!(repl.text().contains("not attached: @link.txt: it is outside the workspace"), "{}", repl.text());
    repl.close();
}

#[test]
fn an_image_goes_to_a_model_that_takes_images_and_is_refused_for_one_that_does_not() {
    let t = Talaria::new();
    // The smallest PNG signature and header chunk: the type is read from the bytes.
    std::fs::write(t.workspace.path().join("shot.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").expect("write");
    let mock = MockLlm::start(Script::new([Step::text("a picture"), Step::text("no picture")]));
    t.use_model(&mock.base_url(), "chat_completions", "vision = true", "");
    let out = t.chat(&["-q", "what is in @shot.png?"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let requests = mock.requests();
    let user = requests[0].body["messages"].as_array().and_then(|m| m.iter().find(|m| m["role"] == "user")).cloned();
    let content = user.expect("a user message")["content"].clone();
    assert_eq!(content[0]["text"], "what is in @shot.png?");
    assert_eq!(content[1]["image_url"]["url"], "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==");

    t.use_model(&mock.base_url(), "chat_completions", "", "");
    let out = t.chat(&["-q", "and @shot.png?"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not attached: @shot.png: custom/mock-model does not take images")
            && err.contains("vision = true"),
        "{err}"
    );
    let requests = mock.requests();
    let last = requests.last().expect("request").body["messages"].to_string();
    assert!(!last.contains("base64"), "{last}");
}

/// A Ctrl-D pressed while the REPL is busy between prompts (here a `/compress` waiting for the
/// model) is read when the prompt comes back, and the REPL leaves: the terminal's own line
/// buffering never gets to swallow it.
#[test]
fn ctrl_d_pressed_between_prompts_is_not_lost() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Step::text("first answer"),
        Step::text("second answer"),
        Step::text("the summary").delayed(1500),
    ]));
    let keep_little = "[plugins.compressor.config]\nprotect_first_n = 1\nprotect_last_n = 1\ntail_ratio = 0.0\n";
    t.use_mock(&mock, "chat_completions", keep_little);
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter", 1);
    repl.send("one");
    repl.wait_for("first answer", 1);
    repl.send("two");
    repl.wait_for("second answer", 1);
    repl.send("/compress");
    let asked = std::time::Instant::now();
    while mock.requests().len() < 3 {
        assert!(asked.elapsed() < std::time::Duration::from_secs(30), "/compress asks the model: {}", repl.text());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    repl.ctrl_d();
    let shown = repl.wait_exit();
    assert!(shown.contains("resume this conversation with"), "{shown}");
}

/// Issue 41, finding 6: `--continue` takes the latest session of the directory it is run in (and
/// says which), not the latest anywhere; where none was started it says how to reach the others.
#[test]
fn continue_takes_the_latest_session_of_this_directory_and_names_it() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Reply::text("noted here").into(),
        Reply::text("noted elsewhere").into(),
        Reply::text("carried on").into(),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    assert!(t.chat(&["-q", "remember the project"]).status.success());
    let elsewhere = tempfile::tempdir().expect("dir");
    let in_dir = |dir: &std::path::Path, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
            .arg("chat")
            .args(args)
            .current_dir(dir)
            .env("TALARIA_HOME", t.home.path())
            .env_remove("TALARIA_LOG")
            .output()
            .expect("run talaria")
    };
    assert!(in_dir(elsewhere.path(), &["-q", "something unrelated"]).status.success());

    let out = t.chat(&["--continue", "-q", "and now?"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(user_messages(&mock), ["remember the project", "and now?"], "this directory's session");
    let here = t.ws().canonicalize().expect("canonical");
    assert!(
        err.contains(&format!(", the latest in {}", here.display())) && err.contains("continuing session "),
        "{err}"
    );

    let empty = tempfile::tempdir().expect("dir");
    let out = in_dir(empty.path(), &["--continue", "-q", "hello?"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no session was started in") && err.contains("--resume latest"), "{err}");
}

/// Issue 41, finding 6: `--resume` with no value lists the sessions to choose from (this
/// directory's first) and resumes the one chosen; `/model` with no value lists the endpoint's
/// models and switches to the one chosen.
#[test]
fn resume_and_model_with_no_value_offer_a_list_to_choose_from() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Reply::text("planned the trip").into(),
        Reply::text("on the chosen model").into(),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    assert!(t.chat(&["-q", "plan a trip to Lisbon"]).status.success());

    let mut repl = Repl::start_args(&t, &["chat", "--resume"]);
    let screen = repl.wait_for_screen("the list of sessions", |s| s.iter().any(|r| r == "Resume which session?"));
    let rows = rows_from(&screen, "Resume which session?");
    assert!(rows[1].starts_with("› ") && rows[1].contains("plan a trip to Lisbon · 2 messages"), "{rows:#?}");
    repl.type_raw("\r");
    repl.wait_for("resumed ", 1);

    repl.send("/model");
    repl.wait_for_screen("the endpoint's models", |s| s.iter().any(|r| r == "Use which model?"));
    repl.type_raw("\r");
    repl.wait_for("now using", 1);
    repl.send("go on");
    repl.wait_for("on the chosen model", 1);
    assert_eq!(mock.requests().last().expect("asked").body["model"], "mock", "the model chosen from the list");
    repl.close();
}
