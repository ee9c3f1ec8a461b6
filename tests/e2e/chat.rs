//! `talaria chat` end to end: the real binary, the real plugins and store, a scripted mock model
//! speaking each wire format.

use std::io::Read as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{HttpError, MockLlm, Reply, Script, Step};

use super::Talaria;

const MODES: [&str; 3] = ["chat_completions", "anthropic_messages", "responses"];

impl Talaria {
    /// Point the config at `mock` speaking `api_mode`, with fast retries.
    fn use_mock(&self, mock: &MockLlm, api_mode: &str, extra: &str) {
        let config = format!(
            "[model]\nprovider = \"custom\"\nname = \"mock-model\"\nbase_url = \"{}\"\napi_mode = \"{api_mode}\"\n\n[agent]\nretries = 2\nretry_delay_ms = 5\n{extra}",
            mock.base_url()
        );
        std::fs::write(self.home.path().join("config.toml"), config).expect("config");
    }

    fn chat(&self, args: &[&str]) -> std::process::Output {
        let mut all = vec!["chat"];
        all.extend_from_slice(args);
        self.run(&all)
    }

    fn spawn_chat(&self, args: &[&str]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_talaria"))
            .arg("chat")
            .args(args)
            .current_dir(self.workspace.path())
            .env("TALARIA_HOME", self.home.path())
            .env_remove("TALARIA_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn talaria")
    }
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The messages of a recorded request, as (role, text) in the request's own format, flattened
/// so tests can look for content whatever the wire format.
fn flat(body: &Value) -> String {
    body.to_string()
}

/// Wait until `mock` has received `n` requests.
fn wait_requests(mock: &MockLlm, n: usize) {
    let start = Instant::now();
    while mock.requests().len() < n {
        assert!(start.elapsed() < Duration::from_secs(30), "the mock got {} of {n} requests", mock.requests().len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(child: &Child, signal: &str) {
    let ok = Command::new("kill").args([signal, &child.id().to_string()]).status().expect("kill").success();
    assert!(ok, "kill {signal} failed");
}

fn finish(mut child: Child) -> (Option<i32>, String, String) {
    let status = child.wait().expect("wait");
    let mut out = String::new();
    let mut err = String::new();
    child.stdout.take().expect("stdout").read_to_string(&mut out).expect("read");
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read");
    (status.code(), out, err)
}

#[test]
fn a_conversation_runs_tools_in_plugins_over_every_wire_format() {
    for mode in MODES {
        for streamed in [true, false] {
            let t = Talaria::new();
            std::fs::write(t.ws().join("notes.txt"), "the launch code is 4512\n").expect("write");
            let mock = MockLlm::start(Script::new([
                Step::Reply(Reply::text("Let me read it.").tool_call("read_file", json!({"path": "notes.txt"}))),
                Step::text("The code is 4512."),
                Step::text("You asked about the launch code."),
            ]));
            t.use_mock(&mock, mode, "");
            let mut args = vec!["-q", "what is in notes.txt?"];
            if !streamed {
                args.push("--no-stream");
            }
            let out = t.chat(&args);
            assert!(out.status.success(), "{mode}: {}", stderr(&out));
            assert_eq!(stdout(&out).trim(), "The code is 4512.", "{mode} streamed={streamed}");
            assert!(stderr(&out).contains("read_file notes.txt"), "progress on stderr: {}", stderr(&out));

            let reqs = mock.requests();
            assert_eq!(reqs.len(), 2, "{mode}");
            assert_eq!(reqs[0].body["stream"].as_bool().unwrap_or(false), streamed, "{mode}");
            let second = flat(&reqs[1].body);
            assert!(second.contains("the launch code is 4512"), "{mode}: the tool result reaches the model: {second}");
            assert!(second.contains("read_file"), "{mode}");

            // A second turn in the same session carries the whole history.
            let out = t.chat(&["--continue", "-q", "what did I ask?"]);
            assert!(out.status.success(), "{mode}: {}", stderr(&out));
            assert_eq!(stdout(&out).trim(), "You asked about the launch code.");
            let third = flat(&mock.requests()[2].body);
            assert!(third.contains("what is in notes.txt?") && third.contains("The code is 4512."), "{mode}: {third}");
        }
    }
}

#[test]
fn a_parallel_batch_returns_results_in_call_order() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("a.txt"), "alpha-content\n").expect("write");
    std::fs::write(t.ws().join("b.txt"), "bravo-content\n").expect("write");
    std::fs::write(t.ws().join("c.txt"), "charlie-content\n").expect("write");
    let mock = MockLlm::start(Script::new([
        Step::Reply(
            Reply::default()
                .tool_call("read_file", json!({"path": "a.txt"}))
                .tool_call("read_file", json!({"path": "b.txt"}))
                .tool_call("read_file", json!({"path": "c.txt"})),
        ),
        Step::text("read all three"),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "read a, b and c"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let body = &mock.requests()[1].body;
    let msgs = body["messages"].as_array().expect("messages");
    let tools: Vec<&Value> = msgs.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tools.len(), 3);
    let calls = msgs.iter().find(|m| m["tool_calls"].is_array()).expect("assistant")["tool_calls"].clone();
    for (i, want) in ["alpha-content", "bravo-content", "charlie-content"].iter().enumerate() {
        assert_eq!(tools[i]["tool_call_id"], calls[i]["id"], "result {i} answers call {i}");
        assert!(tools[i]["content"].as_str().expect("text").contains(want), "result {i}: {}", tools[i]["content"]);
    }
}

#[test]
fn failing_providers_are_retried_then_the_fallback_answers() {
    let t = Talaria::new();
    let primary = MockLlm::start(Script::new([
        Step::error(500),
        Step::Error(HttpError::new(429).retry_after(0)),
        Step::error(503),
    ]));
    let fallback = MockLlm::start(Script::new([Step::text("answer from the fallback")]));
    let extra = format!(
        "\n[[fallback_providers]]\nprovider = \"custom\"\nmodel = \"backup-model\"\nbase_url = \"{}\"\napi_mode = \"anthropic_messages\"\n",
        fallback.base_url()
    );
    t.use_mock(&primary, "chat_completions", &extra);
    let out = t.chat(&["-q", "hello"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "answer from the fallback");
    assert_eq!(primary.requests().len(), 3, "one try and two retries on the primary");
    assert_eq!(fallback.requests().len(), 1);
    assert_eq!(fallback.requests()[0].body["model"], "backup-model");
    let err = stderr(&out);
    assert!(err.contains("429") && err.contains("503"), "retries are reported: {err}");
    assert!(err.contains("falling back"), "the fallback is reported: {err}");

    // Every provider failing ends the run with exit 1 and the reason.
    let t = Talaria::new();
    let dead = MockLlm::start(Script::new([Step::error(500)]).repeat_last(true));
    t.use_mock(&dead, "responses", "");
    let out = t.chat(&["-q", "hello"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("500"), "{}", stderr(&out));
}

#[test]
fn ctrl_c_mid_stream_keeps_nothing_partial() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Step::stall("I am halfway through a long"), Step::text("fresh answer")]));
    t.use_mock(&mock, "chat_completions", "");
    let child = t.spawn_chat(&["-q", "tell me a long story"]);
    wait_requests(&mock, 1);
    std::thread::sleep(Duration::from_millis(300));
    kill(&child, "-INT");
    let (code, out, err) = finish(child);
    assert_eq!(code, Some(130), "interrupted exit code; stderr: {err}");
    assert!(out.trim().is_empty(), "no answer printed: {out}");
    assert!(err.contains("interrupted"), "{err}");
    let start = Instant::now();
    while mock.disconnects() < 1 {
        assert!(start.elapsed() < Duration::from_secs(5), "the model connection was not closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The user message was kept; the half answer was not.
    let out = t.chat(&["--continue", "-q", "try again"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let sent = flat(&mock.requests()[1].body);
    assert!(sent.contains("tell me a long story") && sent.contains("try again"), "{sent}");
    assert!(!sent.contains("halfway"), "nothing partial entered history: {sent}");
}

#[test]
fn an_exhausted_budget_ends_with_a_summary() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("a.txt"), "x\n").expect("write");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("read_file", json!({"path": "a.txt"})),
        Step::tool_call("read_file", json!({"path": "a.txt"})),
        Step::text("Summary: I read a.txt twice and did not finish."),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "loop forever", "--max-turns", "2"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Summary: I read a.txt twice and did not finish.");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[2].body.get("tools").is_none_or(|t| t.as_array().is_none_or(Vec::is_empty)), "no tools for the summary");
    assert!(flat(&reqs[2].body).contains("budget"), "the summary request says why");
    assert!(stderr(&out).contains("budget"), "{}", stderr(&out));
}

#[test]
fn dangerous_commands_need_yolo_when_unattended() {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let script = || {
        Script::new([Step::tool_call("terminal", json!({"command": "rm -rf build"})), Step::text("finished")])
    };
    let mock = MockLlm::start(script());
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "clean the build"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(t.ws().join("build").exists(), "refused without --yolo");
    let result = flat(&mock.requests()[1].body);
    assert!(result.contains("needs approval") && result.contains("--yolo"), "the model is told why: {result}");

    let mock = MockLlm::start(script());
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "clean the build", "--yolo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!t.ws().join("build").exists(), "allowed with --yolo");
}

#[test]
fn kill_9_mid_turn_loses_no_committed_message() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("data.txt"), "committed-result-marker\n").expect("write");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("read_file", json!({"path": "data.txt"})),
        Step::stall("never finished"),
        Step::text("resumed fine"),
    ]));
    t.use_mock(&mock, "anthropic_messages", "");
    let child = t.spawn_chat(&["-q", "read data.txt please"]);
    wait_requests(&mock, 2);
    kill(&child, "-KILL");
    let (code, _, _) = finish(child);
    assert_eq!(code, None, "killed by a signal");

    let shown = t.ok(&["sessions", "show", "latest", "--json"]);
    assert!(shown.contains("read data.txt please"), "{shown}");
    assert!(shown.contains("committed-result-marker"), "the tool result was committed before the next call: {shown}");

    let out = t.chat(&["--resume", "latest", "-q", "go on"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "resumed fine");
    let sent = flat(&mock.requests()[2].body);
    assert!(sent.contains("read data.txt please") && sent.contains("committed-result-marker") && sent.contains("go on"));
    assert!(!sent.contains("never finished"));
}

#[test]
fn session_search_finds_an_earlier_session() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Step::text("Noted: the codeword is PELICAN."),
        Step::tool_call("session_search", json!({"query": "codeword"})),
        Step::text("Last time the codeword was PELICAN."),
    ]));
    t.use_mock(&mock, "responses", "");
    let out = t.chat(&["-q", "remember the codeword PELICAN"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first_session = t.ok(&["sessions", "list", "--json"]);
    let out = t.chat(&["-q", "what was the codeword last time?"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let result = flat(&mock.requests()[2].body);
    assert!(result.contains("PELICAN"), "the search result reaches the model: {result}");
    let listed: Value = serde_json::from_str(&first_session).expect("json");
    let id = listed[0]["id"].as_str().expect("id");
    assert!(result.contains(id), "the hit names the earlier session {id}");
}

#[test]
fn malformed_tool_arguments_get_an_error_the_model_can_act_on() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("a.txt"), "fine\n").expect("write");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("read_file", Value::String("{\"path\": ".into())),
        Step::tool_call("read_file", json!({"path": 42})),
        Step::tool_call("read_file", json!({"path": "a.txt"})),
        Step::text("got it"),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "read a.txt"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let tool_content = |i: usize| -> String {
        let msgs = mock.requests()[i].body["messages"].as_array().expect("messages").clone();
        msgs.iter().rev().find(|m| m["role"] == "tool").expect("tool")["content"].as_str().expect("text").to_string()
    };
    let bad_json: Value = serde_json::from_str(&tool_content(1)).expect("the result is JSON");
    let msg = bad_json["error"].as_str().expect("error");
    assert!(msg.contains("not valid JSON") && msg.contains("call read_file again"), "{msg}");
    let bad_type: Value = serde_json::from_str(&tool_content(2)).expect("the result is JSON");
    assert!(bad_type["error"].as_str().expect("error").starts_with("invalid arguments"), "{bad_type}");
    assert!(tool_content(3).contains("fine"));
}

#[test]
fn chat_without_a_model_says_how_to_configure_one() {
    let t = Talaria::new();
    let out = t.chat(&["-q", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("no model is configured") && err.contains("talaria setup"), "{err}");
    assert!(err.contains("--provider ollama --model"), "{err}");
}
