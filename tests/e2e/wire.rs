//! The model client under faults and against real servers' ways, end to end: each fault gets
//! its own precise message within the configured limits and is retried only when that can
//! help; answers cut at the output-token limit are told, kept and give their own exit code;
//! estimated usage is marked; a small window does not make every turn try to compress.

use std::time::{Duration, Instant};

use serde_json::json;
use talaria_mock_llm::{HttpError, Mode, Reply, Script, Step, strict};

use super::Talaria;
use crate::chat::{in_both_modes, stderr, stdout};
use crate::repl::Repl;

/// Limits small enough for tests, under `[model]`.
const QUICK: &str = "connect_timeout_secs = 2\nfirst_byte_timeout_secs = 0.5\nidle_timeout_secs = 0.5\n";

#[test]
fn a_server_that_accepts_and_never_answers_gets_one_request_then_the_fallback_and_the_setting_is_named() {
    // llama-cpp-python goes on generating after the client leaves: every retry of a request it
    // accepted would queue one more copy of the same work behind the first.
    let t = Talaria::new();
    let stalled = Mode::Normal.start(Script::new([Step::hang()]).repeat_last(true));
    let fallback = Mode::Normal.start(Script::new([Step::text("the backup answers")]));
    let extra = format!(
        "retries = 3\n\n[[fallback_providers]]\nprovider = \"custom\"\nmodel = \"backup\"\nbase_url = \"{}\"\n",
        fallback.base_url()
    );
    t.use_model(&stalled.base_url(), "chat_completions", QUICK, &extra);
    let out = t.chat(&["-q", "hello?", "--no-stream"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(stdout(&out).trim(), "the backup answers");
    assert_eq!(stalled.requests().len(), 1, "the stalled server was asked once: {err}");
    assert_eq!(fallback.requests().len(), 1, "{err}");
    assert!(
        err.contains(
            "custom/mock-model did not answer within 0.5 s (first_byte_timeout_secs) after accepting the request; \
             not retried, since a server may keep generating after the client leaves (set `retry_timeouts = true` \
             under [model] to retry) — trying fallback custom/backup"
        ),
        "{err}"
    );
    assert!(!err.contains("retrying"), "{err}");
    // A whole reply is bounded even though no max_tokens is configured.
    assert_eq!(stalled.requests()[0].body["max_tokens"], json!(4096));
    assert_eq!(fallback.requests()[0].body["max_tokens"], json!(4096));
}

#[test]
fn with_retry_timeouts_a_server_that_never_answers_is_asked_again_and_given_up_on_in_time() {
    let t = Talaria::new();
    let mock = Mode::Normal.start(Script::new([Step::hang(), Step::hang()]));
    t.use_model(&mock.base_url(), "chat_completions", &format!("{QUICK}retry_timeouts = true\n"), "retries = 1\n");
    let started = Instant::now();
    let out = t.chat(&["-q", "hello?"]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let url = format!("{}/chat/completions", mock.base_url());
    assert!(err.contains(&format!("error: no reply from {url} within 0.5 s (first_byte_timeout_secs)")), "{err}");
    assert!(err.contains("no reply within 0.5 s (first_byte_timeout_secs) from custom/mock-model, retrying"), "{err}");
    assert!(err.contains("giving up after 2 attempts over"), "the total is said: {err}");
    assert!(!err.contains("not retried"), "{err}");
    assert_eq!(mock.requests().len(), 2, "the same endpoint was asked again");
    assert!(took < Duration::from_secs(20), "bounded by the limits: {took:?}");
    assert!(stdout(&out).trim().is_empty());
}

#[test]
fn without_a_fallback_a_request_left_unanswered_is_one_request_and_the_setting_is_named() {
    let t = Talaria::new();
    let mock = Mode::Normal.start(Script::new([Step::hang()]).repeat_last(true));
    t.use_model(&mock.base_url(), "chat_completions", QUICK, "retries = 3\n");
    let out = t.chat(&["-q", "hello?"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let url = format!("{}/chat/completions", mock.base_url());
    assert!(err.contains(&format!("error: no reply from {url} within 0.5 s (first_byte_timeout_secs)")), "{err}");
    assert!(
        err.contains("(set `retry_timeouts = true` under [model] to retry); no fallback provider remains"),
        "{err}"
    );
    assert_eq!(mock.requests().len(), 1, "{err}");
}

#[test]
fn each_fallback_entry_has_its_own_timeouts() {
    let t = Talaria::new();
    let primary = Mode::Normal.start(Script::new([Step::hang()]));
    let fallback = Mode::Normal.start(Script::new([Step::hang()]));
    let extra = format!(
        "retries = 0\n\n[[fallback_providers]]\nprovider = \"custom\"\nmodel = \"backup\"\nbase_url = \"{}\"\n\
         first_byte_timeout_secs = 0.7\n",
        fallback.base_url()
    );
    t.use_model(&primary.base_url(), "chat_completions", QUICK, &extra);
    let out = t.chat(&["-q", "hello?"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(
            "custom/mock-model did not answer within 0.5 s (first_byte_timeout_secs) after accepting the request; \
             not retried"
        ) && err.contains("— trying fallback custom/backup"),
        "{err}"
    );
    assert!(
        err.contains(
            "custom/backup did not answer within 0.7 s (first_byte_timeout_secs) after accepting the request; not \
             retried, since a server may keep generating after the client leaves (set `retry_timeouts = true` in its \
             [[fallback_providers]] entry to retry); no fallback provider remains"
        ),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "no reply from {}/chat/completions within 0.7 s (first_byte_timeout_secs)",
            fallback.base_url()
        )),
        "{err}"
    );
}

#[test]
fn an_html_page_is_quoted_once_not_reported_as_a_network_error() {
    let t = Talaria::new();
    let page = "<!DOCTYPE html><html><head><title>Captive Portal Login</title></head><body>Sign in</body></html>";
    let mock = Mode::Normal.start(Script::new([Step::Error(HttpError::new(200).body(page))]).repeat_last(true));
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{}/chat/completions sent a reply talaria cannot read: an HTML page titled \"Captive Portal Login\"",
            mock.base_url()
        )),
        "{err}"
    );
    assert!(err.contains("`<!DOCTYPE html><html><head>"), "the first bytes are quoted: {err}");
    assert!(!err.contains("cannot reach") && !err.contains("network"), "{err}");
    assert_eq!(mock.requests().len(), 1, "the same page would come back: no retry");
}

in_both_modes!(a_stream_cut_midway_is_shown_as_cut_and_never_kept);
fn a_stream_cut_midway_is_shown_as_cut_and_never_kept(mode: Mode) {
    let t = Talaria::new();
    let mock = mode.start(Script::new([
        Step::cut("The treasure is buried under the"),
        Step::cut("The treasure is buried under the"),
        Step::text("fresh start"),
    ]));
    t.use_model(&mock.base_url(), "chat_completions", QUICK, "retries = 1\n");
    let out = t.chat(&["-q", "where is the treasure?"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).trim().is_empty(), "a cut reply is not an answer: {}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("error: the reply from {}/chat/completions was cut off", mock.base_url())), "{err}");
    assert!(err.contains("reply cut off after 32 characters (not kept) from custom/mock-model, retrying"), "{err}");
    assert!(
        err.contains(
            "what arrived before the reply was cut off (not kept):\n  | The treasure is buried under the\n  [cut]"
        ),
        "{err}"
    );
    let shown = t.ok(&["sessions", "show", "latest", "--json"]);
    assert!(shown.contains("where is the treasure?") && !shown.contains("buried"), "never in history: {shown}");
}

#[test]
fn a_400_with_an_empty_stream_is_one_request_and_one_clear_message() {
    let t = Talaria::new();
    let empty = HttpError::new(400).body("").content_type("text/event-stream");
    let mock = Mode::Normal.start(Script::new([Step::Error(empty)]).repeat_last(true));
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("error: {}/chat/completions answered HTTP 400: Bad Request", mock.base_url())),
        "{err}"
    );
    assert_eq!(mock.requests().len(), 1, "a 400 is not retried");
    assert!(!err.contains("retrying"), "{err}");
}

#[test]
fn a_stream_closed_without_a_word_is_retried_once_and_explained() {
    let t = Talaria::new();
    let mock = Mode::Normal.start(Script::new([Step::empty_stream(2)]).repeat_last(true));
    t.use_mock(&mock, "chat_completions", "retries = 3\n");
    let out = t.chat(&["-q", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("closed the stream without sending any event (only keep-alive comments)"), "{err}");
    assert!(err.contains("`stream = false` under [agent]"), "{err}");
    assert_eq!(mock.requests().len(), 2, "one retry, not three");
}

#[test]
fn a_wrong_path_names_the_url_tried() {
    let t = Talaria::new();
    let mock = Mode::Normal.start(Script::new([Step::text("unused")]));
    let base = mock.base_url().replace("/v1", "/v2");
    t.use_model(&base, "responses", "", "");
    let out = t.chat(&["-q", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains(&format!("{base}/responses answered HTTP 404")), "{err}");
    assert!(err.contains("api_mode is `responses`: check base_url and api_mode"), "{err}");
}

in_both_modes!(an_answer_cut_at_the_limit_is_told_kept_and_exits_4);
fn an_answer_cut_at_the_limit_is_told_kept_and_exits_4(mode: Mode) {
    for api_mode in ["chat_completions", "anthropic_messages", "responses"] {
        let t = Talaria::new();
        let mock = mode.start(Script::new([Reply::text("Chapter one: it was a dark and").truncated().into()]));
        t.use_mock(&mock, api_mode, "");
        let out = t.chat(&["-q", "write a novel"]);
        assert_eq!(out.status.code(), Some(4), "{api_mode}: {}", stderr(&out));
        assert_eq!(stdout(&out).trim(), "Chapter one: it was a dark and", "{api_mode}: what arrived is printed");
        let err = stderr(&out);
        assert!(err.contains("was cut off at the output-token limit"), "{api_mode}: {err}");
        let shown = t.ok(&["sessions", "show", "latest"]);
        assert!(
            shown.contains("Chapter one: it was a dark and") && shown.contains("[talaria: this reply was cut off"),
            "{api_mode}: kept, marked: {shown}"
        );
    }
}

#[test]
fn usage_a_server_does_not_report_is_estimated_and_shown_as_such() {
    let t = Talaria::new();
    let mock = Mode::Strict.start(Script::new([Step::text("hello there, friend")]));
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "hi"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = t.ok(&["sessions", "show", "latest"]);
    let tokens = shown.lines().find(|l| l.contains("tokens:")).unwrap_or_default();
    assert!(tokens.contains(" in, ~") && tokens.contains("~ estimated"), "{shown}");
    let json: serde_json::Value = serde_json::from_str(&t.ok(&["sessions", "show", "latest", "--json"])).expect("json");
    assert_eq!(json["session"]["usage"]["estimated"], json!(true), "{json}");
}

#[test]
fn tool_choice_is_configurable_and_off_hides_tools_from_a_strict_server() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("a.txt"), "alpha\n").expect("write");
    let script = || Script::new([Step::tool_call("read_file", json!({"path": "a.txt"})), Step::text("read it")]);
    let mock = Mode::Strict.start(script());
    t.use_model(&mock.base_url(), "chat_completions", "tool_choice = \"off\"\n", "");
    let out = t.chat(&["-q", "read a.txt"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), strict::HIDDEN_TOOLS, "without tool_choice that server hides the tools");
    assert!(mock.requests()[0].body.get("tool_choice").is_none());

    let mock = Mode::Strict.start(script());
    t.use_model(&mock.base_url(), "chat_completions", "tool_choice = \"required\"\n", "");
    let out = t.chat(&["-q", "read a.txt"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "read it");
    assert_eq!(mock.requests()[0].body["tool_choice"], "required");
    let replayed = &mock.requests()[1].body["messages"];
    let call = replayed.as_array().expect("messages").iter().find(|m| m["tool_calls"].is_array()).expect("call");
    assert_eq!(call["content"], "", "an empty string, which that server accepts, not null");
}

#[test]
fn a_bad_timeout_or_tool_choice_is_refused_with_the_key_named() {
    let t = Talaria::new();
    let mock = Mode::Normal.start(Script::new([Step::text("unused")]));
    t.use_model(&mock.base_url(), "chat_completions", "idle_timeout_secs = 0\n", "");
    let out = t.chat(&["-q", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("idle_timeout_secs = 0 is not a number of seconds above 0"), "{}", stderr(&out));
    t.use_model(&mock.base_url(), "chat_completions", "tool_choice = \"sometimes\"\n", "");
    let out = t.chat(&["-q", "hi"]);
    assert!(
        stderr(&out).contains("unknown tool_choice `sometimes`: use auto, required, none or off"),
        "{}",
        stderr(&out)
    );
    assert!(mock.requests().is_empty());
}

in_both_modes!(a_small_window_does_not_make_every_turn_compress);
fn a_small_window_does_not_make_every_turn_compress(mode: Mode) {
    let t = Talaria::new();
    let mock = mode.start(Script::new([Step::text("one"), Step::text("two"), Step::text("three")]));
    t.use_model(&mock.base_url(), "chat_completions", "context_length = 5632\n", "");
    for (i, prompt) in ["first", "second", "third"].iter().enumerate() {
        let args: Vec<&str> = if i == 0 { vec!["-q", prompt] } else { vec!["--continue", "-q", prompt] };
        let out = t.chat(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(!err.contains("compress"), "turn {i}: no compression attempt: {err}");
    }
    assert_eq!(mock.requests().len(), 3, "no summary calls: nothing was compressed");
}

#[test]
fn a_window_smaller_than_the_fixed_prompt_is_said_once() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("a.txt"), "alpha\n").expect("write");
    let mock =
        Mode::Normal.start(Script::new([Step::tool_call("read_file", json!({"path": "a.txt"})), Step::text("done")]));
    t.use_model(&mock.base_url(), "chat_completions", "context_length = 1000\n", "");
    let out = t.chat(&["-q", "read a.txt"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("the system prompt and tool schemas alone take").count(), 1, "once: {err}");
    assert!(
        err.contains("more than the model's context window of 1000 tokens (context_length under [model])"),
        "{err}"
    );
    assert!(!err.contains("could not compress"), "{err}");
}

#[test]
fn the_repl_shows_how_long_it_has_been_waiting() {
    let t = Talaria::new();
    let mock = Mode::Normal.start(Script::new([Step::text("worth the wait").delayed(2_500)]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t).within(Duration::from_secs(120));
    repl.wait_for("new session", 1);
    repl.send("hello");
    repl.wait_for("waiting for custom/mock-model… 1s", 1);
    let text = repl.wait_for("worth the wait", 1);
    let waiting = text.find("waiting for custom/mock-model").expect("indicator");
    assert!(waiting < text.find("worth the wait").expect("answer"), "the indicator comes before the answer");
    repl.ctrl_d();
}
