//! Example tests: the summary prompt, updating an earlier summary, the fallback, backoff, the
//! note and the report.

use super::{FakeHost, GOOD_SUMMARY, call, history, request};
use crate::backoff::Backoff;
use crate::config::Config;
use crate::engine::{PURPOSE, compress, report};
use crate::sanitize::check;
use crate::summary::{HEADINGS, is_summary};
use talaria_sdk::message::{Message, Role};

const WINDOW: u64 = 200_000;

/// The defaults, but a tail of exactly `protect_last_n` messages (moved back to a user message).
fn cfg() -> Config {
    Config { tail_ratio: 0.0, ..Config::default() }
}

#[test]
fn prompt_has_every_heading_the_focus_and_the_memory_notes() {
    let mut host = FakeHost::answering(GOOD_SUMMARY);
    let mut req = request(history(12), WINDOW);
    req.focus = Some("the lexer".into());
    req.memory_context = "user prefers small commits".into();
    let out = compress(req, &cfg(), &mut host).expect("compressed");

    let sent = &host.requests[0];
    assert_eq!(sent.purpose, PURPOSE);
    assert_eq!(sent.messages.len(), 2);
    assert_eq!(sent.messages[0].0, Role::System);
    let prompt = host.last_prompt();
    for heading in HEADINGS {
        assert!(sent.messages[0].1.contains(heading), "system prompt lacks {heading}");
        assert!(prompt.contains(heading), "prompt lacks {heading}");
    }
    assert!(prompt.contains("focus the summary on: the lexer"));
    assert!(prompt.contains("user prefers small commits"));
    // The transcript: calls with their arguments, results (small enough to stay whole).
    assert!(prompt.contains("ASSISTANT CALLS read_file (call_1): {\"path\":\"src/file1.rs\"}"));
    assert!(prompt.contains("TOOL RESULT read_file (call_1): contents of file 1 contents"));
    assert!(!prompt.contains("(call_0)"), "the head is not summarized");
    assert!(!prompt.contains("UPDATE"));
    // Budget: 20% of the replaced tokens, at least 2,000.
    assert_eq!(sent.max_tokens, Some(2_000));

    // 48 messages: head 3 (user, call, result), tail the last 20 (from a user message).
    assert_eq!(out.messages.len(), 3 + 1 + 20);
    assert_eq!(check(&out.messages), Ok(()));
    let summary = &out.messages[3];
    assert_eq!(summary.role, Role::Assistant, "after a tool result and before a user message");
    assert!(summary.content.starts_with("[talaria context summary #1: 25 earlier messages were compressed]\n"));
    assert!(summary.content.contains(GOOD_SUMMARY));
    assert!(out.note.starts_with("compressed 25 messages (≈"), "{}", out.note);
    assert!(out.note.contains("into a summary; kept 3 + 20"), "{}", out.note);
}

#[test]
fn a_second_pass_updates_the_summary_instead_of_adding_one() {
    let mut host = FakeHost::answering(GOOD_SUMMARY);
    let first = compress(request(history(12), WINDOW), &cfg(), &mut host).expect("first pass");

    let mut messages = first.messages;
    let mut more = history(12);
    for m in &mut more {
        m.content = m.content.replace("file", "doc");
        m.tool_call_id = m.tool_call_id.replace("call", "more");
        for c in &mut m.tool_calls {
            c.id = c.id.replace("call", "more");
        }
    }
    messages.extend(more);
    host.answer = super::Answer::Text("## Goal\nShip the parser and the docs.".into());
    let mut req = request(messages, WINDOW);
    req.status.compressions = 1;
    let second = compress(req, &cfg(), &mut host).expect("second pass");

    let prompt = host.last_prompt();
    assert!(prompt.starts_with("UPDATE the existing summary"));
    assert!(prompt.contains(&format!("<previous-summary>\n{GOOD_SUMMARY}\n</previous-summary>")));
    assert!(prompt.contains("<newer-turns>"));
    assert!(!prompt.contains("[talaria context summary"), "the old marker is not shown as a turn");

    let summaries: Vec<&Message> = second.messages.iter().filter(|m| is_summary(m)).collect();
    assert_eq!(summaries.len(), 1);
    // 25 from the first pass + 48 new ones: the old tail (20) and the new turns but the last 20.
    assert!(summaries[0].content.starts_with("[talaria context summary #2: 73 earlier messages were compressed]"));
    assert!(summaries[0].content.contains("Ship the parser and the docs."));
    assert!(!summaries[0].content.contains("src/lex.rs"), "the old summary is replaced");
    assert!(second.note.contains("into the updated summary"), "{}", second.note);
    assert_eq!(check(&second.messages), Ok(()));
}

#[test]
fn carry_goes_under_its_heading_and_survives_the_next_pass_once() {
    let mut host = FakeHost::answering(GOOD_SUMMARY);
    let mut req = request(history(12), WINDOW);
    req.carry = "Your todo list:\n- [ ] polish the CLI".into();
    let out = compress(req, &cfg(), &mut host).expect("compressed");
    let summary = out.messages.iter().find(|m| is_summary(m)).expect("summary");
    assert!(summary.content.ends_with("\n\n## Open Todo List\nYour todo list:\n- [ ] polish the CLI"));

    // The next pass does not feed the old todo list back as part of the summary.
    let mut messages = out.messages;
    messages.extend(history(12).into_iter().map(|mut m| {
        m.tool_call_id = m.tool_call_id.replace("call", "more");
        m.tool_calls.iter_mut().for_each(|c| c.id = c.id.replace("call", "more"));
        m
    }));
    let mut req = request(messages, WINDOW);
    req.carry = "Your todo list:\n- [ ] write docs".into();
    let out = compress(req, &cfg(), &mut host).expect("second pass");
    assert!(!host.last_prompt().contains("polish the CLI"));
    let summary = out.messages.iter().find(|m| is_summary(m)).expect("summary");
    assert_eq!(summary.content.matches("## Open Todo List").count(), 1);
    assert!(summary.content.ends_with("- [ ] write docs"));
}

#[test]
fn summary_stands_alone_when_a_step_back_allows_else_is_merged() {
    // The head ends with a user message and the tail would start with an assistant one: the
    // tail takes one more message, so the summary (an assistant message) stands between.
    let config = Config { protect_first_n: 1, protect_last_n: 2, tail_ratio: 0.0, ..Config::default() };
    let messages = vec![
        Message::user("first"),
        Message::assistant("a"),
        Message::user("b"),
        Message::assistant("c"),
        Message::user("d"),
        Message::assistant("e"),
        Message::user("last request"),
    ];
    let mut host = FakeHost::answering(GOOD_SUMMARY);
    let out = compress(request(messages, WINDOW), &config, &mut host).expect("compressed");
    let shape: Vec<(Role, &str)> = out.messages.iter().map(|m| (m.role, &m.content[..1])).collect();
    assert_eq!(
        shape,
        [(Role::User, "f"), (Role::Assistant, "["), (Role::User, "d"), (Role::Assistant, "e"), (Role::User, "l")]
    );
    assert!(out.messages[1].content.starts_with("[talaria context summary #1: 3 earlier"));

    // Before an assistant that calls tools, after the results of another call: a step back does
    // not help, so the summary goes in front of the assistant's (empty) text; calls and extra stay.
    let mut call2 = call(&["2"], "read_file", "{}");
    call2.extra = "{\"sig\":9}".into();
    let messages = vec![
        Message::user("first"),
        call(&["1"], "read_file", "{}"),
        Message::tool("1", "read_file", "one"),
        call2,
        Message::tool("2", "read_file", "two"),
        Message::assistant("done"),
    ];
    let config = Config { protect_first_n: 1, protect_last_n: 3, tail_ratio: 0.0, ..Config::default() };
    let out = compress(request(messages, WINDOW), &config, &mut host).expect("compressed");
    let shape: Vec<Role> = out.messages.iter().map(|m| m.role).collect();
    assert_eq!(shape, [Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
    let merged = &out.messages[1];
    assert!(merged.content.starts_with("[talaria context summary #1: 2 earlier"));
    assert!(!merged.content.contains("[end of context summary]"), "nothing of its own to separate");
    assert_eq!(merged.extra, "{\"sig\":9}");
    assert_eq!(merged.tool_calls.len(), 1);
    assert_eq!(check(&out.messages), Ok(()));
}

#[test]
fn fallback_names_the_count_the_last_request_and_the_files() {
    let mut host = FakeHost::failing("all models are down");
    let out = compress(request(history(12), WINDOW), &cfg(), &mut host).expect("compressed anyway");
    let summary = out.messages.iter().find(|m| is_summary(m)).expect("summary");
    assert!(summary.content.contains("25 earlier messages were removed"), "{}", summary.content);
    assert!(summary.content.contains("> request 6: please look at src/file6.rs"), "{}", summary.content);
    assert!(summary.content.contains("- src/file1.rs\n- src/file2.rs"), "{}", summary.content);
    assert!(!summary.content.contains("src/file0.rs"), "file0 is in the kept head");
    assert!(out.note.contains("fallback summary (the summary model failed: all models are down)"), "{}", out.note);
    assert_eq!(check(&out.messages), Ok(()));
    assert_eq!(host.warnings.len(), 1);
}

#[test]
fn backoff_schedule_is_60_300_900_and_success_clears_it() {
    let config = cfg();
    let mut host = FakeHost::failing("down");
    let key = Backoff::key("s1");
    let state = |host: &FakeHost| host.kv.get(&key).and_then(|b| Backoff::decode(b));
    let start = host.now;
    let run = |host: &mut FakeHost, force: bool| {
        let mut req = request(history(12), WINDOW);
        req.force = force;
        compress(req, &config, host).expect("compressed").note
    };

    run(&mut host, false);
    assert_eq!(state(&host), Some(Backoff { failures: 1, next_try: start + 60 }));
    // Within the pause the model is not asked; the fallback is used and nothing is counted.
    host.now = start + 59;
    let note = run(&mut host, false);
    assert_eq!(host.requests.len(), 1);
    assert!(note.contains("summary model paused for 1 s more"), "{note}");
    assert_eq!(state(&host).map(|b| b.failures), Some(1));
    // /compress asks anyway.
    run(&mut host, true);
    assert_eq!(host.requests.len(), 2);
    assert_eq!(state(&host), Some(Backoff { failures: 2, next_try: start + 59 + 300 }));

    host.now = start + 59 + 300;
    run(&mut host, false);
    assert_eq!(state(&host), Some(Backoff { failures: 3, next_try: host.now + 900 }));
    host.now += 900;
    run(&mut host, false);
    assert_eq!(state(&host), Some(Backoff { failures: 4, next_try: host.now + 900 }));
    assert_eq!(host.requests.len(), 4);

    host.now += 900;
    host.answer = super::Answer::Text(GOOD_SUMMARY.into());
    let note = run(&mut host, false);
    assert!(note.contains("into a summary"), "{note}");
    assert_eq!(state(&host), None);
}

#[test]
fn nothing_to_compress_is_an_error_forced_or_not() {
    let mut host = FakeHost::answering(GOOD_SUMMARY);
    let err = compress(request(history(5), WINDOW), &cfg(), &mut host).err().unwrap_or_default();
    assert_eq!(err, "nothing to compress: all 20 messages are kept (first 3, last 17)");
    let mut req = request(history(5), WINDOW);
    req.force = true;
    let err = compress(req, &cfg(), &mut host).err().unwrap_or_default();
    assert!(err.starts_with("nothing to compress yet: all 20 messages are kept as they are"), "{err}");
    let err = compress(request(Vec::new(), WINDOW), &cfg(), &mut host).err().unwrap_or_default();
    assert_eq!(err, "nothing to compress: the conversation is empty");
    assert!(host.requests.is_empty());
}

#[test]
fn old_large_tool_results_are_cleared_but_not_recent_ones() {
    // 120 messages: the tail is the last 20; results before the last 60 are old.
    let mut messages = history(30);
    messages[2].content = "x".repeat(5_000); // in the head
    let mut host = FakeHost::answering(GOOD_SUMMARY);
    let out = compress(request(messages, WINDOW), &cfg(), &mut host).expect("compressed");
    assert_eq!(out.messages[2].content, "[tool result cleared to save context: 5000 chars]");
    let prompt = host.last_prompt();
    assert!(prompt.contains("TOOL RESULT read_file (call_14): [tool result cleared to save context: 800 chars]"));
    assert!(prompt.contains("TOOL RESULT read_file (call_15): contents of file 15 contents"));
    let tail_result = out.messages.iter().rev().find(|m| m.role == Role::Tool).expect("a result in the tail");
    assert_eq!(tail_result.content.len(), 800, "the tail keeps its results");
    assert!(out.note.ends_with("kept 3 + 20; cleared a large old tool result in the head"), "{}", out.note);
}

#[test]
fn report_lists_threshold_window_tokens_settings_and_backoff() {
    let mut host = FakeHost::answering(GOOD_SUMMARY);
    let status = talaria_sdk::context::Status {
        prompt_tokens: 50_000,
        context_length: 200_000,
        message_count: 40,
        compressions: 2,
    };
    let lines = report(&status, "s1", &Config::default(), &mut host);
    let get = |label: &str| lines.iter().find(|(l, _)| l == label).map(|(_, v)| v.clone()).unwrap_or_default();
    assert_eq!(get("threshold"), "100,000 tokens (50% of the window; threshold 0.50, min_tokens 64,000)");
    assert_eq!(get("context length"), "200,000 tokens");
    assert_eq!(get("prompt tokens"), "50,000 (25% of the window)");
    assert_eq!(get("compressions"), "2");
    assert_eq!(get("protect_first_n"), "3 messages");
    assert_eq!(get("protect_last_n"), "20 messages, more up to ≈40,000 tokens (tail_ratio 0.20)");
    assert_eq!(get("auxiliary model"), "no failures");

    host.kv.insert(Backoff::key("s1"), Backoff { failures: 2, next_try: host.now + 120 }.encode());
    let lines = report(&status, "s1", &Config::default(), &mut host);
    assert!(
        lines
            .iter()
            .any(|(l, v)| l == "auxiliary model" && v == "2 failures in a row; fallback summaries for 120 s more")
    );
}

#[test]
#[ignore = "prints a prompt to read: cargo test -p talaria-plugin-compressor show_prompt -- --ignored --nocapture"]
fn show_prompt() {
    let mut host = FakeHost::answering(GOOD_SUMMARY);
    let mut req = request(history(8), WINDOW);
    req.focus = Some("the lexer".into());
    req.carry = "Your todo list:\n- [ ] polish the CLI".into();
    let out = compress(req, &cfg(), &mut host).expect("compressed");
    println!("--- system\n{}\n--- user\n{}", host.requests[0].messages[0].1, host.last_prompt());
    let summary = out.messages.iter().find(|m| is_summary(m)).expect("summary");
    println!("--- summary message ({:?})\n{}\n--- note\n{}", summary.role, summary.content, out.note);
    let mut host = FakeHost::failing("down");
    let out = compress(request(history(8), WINDOW), &cfg(), &mut host).expect("compressed");
    let summary = out.messages.iter().find(|m| is_summary(m)).expect("summary");
    println!("--- fallback\n{}\n--- note\n{}", summary.content, out.note);
}
