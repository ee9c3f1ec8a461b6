//! `talaria chat` end to end: the real binary, the real plugins and store, a scripted mock model
//! speaking each wire format.
//!
//! Every test that talks to the mock runs twice ([`in_both_modes!`]): against a well-behaved
//! server (`NAME::normal`) and against one that judges requests and streams as
//! llama-cpp-python's server does (`NAME::strict`: `"content": null` refused, tools without
//! `tool_choice` hidden, repeated ids and names in tool-call chunks, no usage chunk).

use std::io::Read as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{HttpError, MockLlm, Mode, Reply, Script, Step};

use super::Talaria;
use crate::repl::Repl;

const MODES: [&str; 3] = ["chat_completions", "anthropic_messages", "responses"];

/// `test(mode)` as two tests, `test::normal` and `test::strict`, one per [`Mode`].
macro_rules! in_both_modes {
    ($name:ident) => {
        mod $name {
            #[test]
            fn normal() {
                super::$name(talaria_mock_llm::Mode::Normal);
            }

            #[test]
            fn strict() {
                super::$name(talaria_mock_llm::Mode::Strict);
            }
        }
    };
}
pub(crate) use in_both_modes;

impl Talaria {
    /// Point the config at `mock` speaking `api_mode`, with fast retries; `extra` goes under
    /// `[agent]` (and may open sections of its own).
    pub(crate) fn use_mock(&self, mock: &MockLlm, api_mode: &str, extra: &str) {
        self.use_model(&mock.base_url(), api_mode, "", extra);
    }

    /// [`Talaria::use_mock`] for any base URL, with `model_extra` lines under `[model]`; `extra`
    /// may set its own `retries` (default 2).
    pub(crate) fn use_model(&self, base_url: &str, api_mode: &str, model_extra: &str, extra: &str) {
        let retries = if extra.contains("retries =") { "" } else { "retries = 2\n" };
        // A title call would take a scripted reply meant for the conversation: off unless asked.
        let title = if extra.contains("auto_title =") { "" } else { "auto_title = false\n" };
        let config = format!(
            "[model]\nprovider = \"custom\"\nname = \"mock-model\"\nbase_url = \"{base_url}\"\napi_mode = \"{api_mode}\"\n{model_extra}\n[agent]\n{retries}{title}retry_delay_ms = 5\n{extra}"
        );
        std::fs::write(self.home.path().join("config.toml"), config).expect("config");
    }

    pub(crate) fn chat(&self, args: &[&str]) -> std::process::Output {
        let mut all = vec!["chat"];
        all.extend_from_slice(args);
        self.run(&all)
    }

    pub(crate) fn spawn_chat(&self, args: &[&str]) -> Child {
        self.spawn_chat_reading(args, Stdio::null())
    }

    /// [`Talaria::spawn_chat`] with `stdin` as its standard input.
    pub(crate) fn spawn_chat_reading(&self, args: &[&str], stdin: Stdio) -> Child {
        Command::new(env!("CARGO_BIN_EXE_talaria"))
            .arg("chat")
            .args(args)
            .current_dir(self.workspace.path())
            .env("TALARIA_HOME", self.home.path())
            .env_remove("TALARIA_LOG")
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn talaria")
    }
}

pub(crate) fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn stderr(out: &std::process::Output) -> String {
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
        assert!(start.elapsed() < Duration::from_secs(120), "the mock got {} of {n} requests", mock.requests().len());
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

in_both_modes!(a_conversation_runs_tools_in_plugins_over_every_wire_format);
fn a_conversation_runs_tools_in_plugins_over_every_wire_format(server: Mode) {
    for mode in MODES {
        for streamed in [true, false] {
            let t = Talaria::new();
            std::fs::write(t.ws().join("notes.txt"), "the launch code is 4512\n").expect("write");
            let mock = server.start(Script::new([
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

in_both_modes!(a_parallel_batch_returns_results_in_call_order);
fn a_parallel_batch_returns_results_in_call_order(mode: Mode) {
    let t = Talaria::new();
    std::fs::write(t.ws().join("a.txt"), "alpha-content\n").expect("write");
    std::fs::write(t.ws().join("b.txt"), "bravo-content\n").expect("write");
    std::fs::write(t.ws().join("c.txt"), "charlie-content\n").expect("write");
    let mock = mode.start(Script::new([
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

in_both_modes!(failing_providers_are_retried_then_the_fallback_answers);
fn failing_providers_are_retried_then_the_fallback_answers(mode: Mode) {
    let t = Talaria::new();
    let primary =
        mode.start(Script::new([Step::error(500), Step::Error(HttpError::new(429).retry_after(0)), Step::error(503)]));
    let fallback = mode.start(Script::new([Step::text("answer from the fallback")]));
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
    let dead = mode.start(Script::new([Step::error(500)]).repeat_last(true));
    t.use_mock(&dead, "responses", "");
    let out = t.chat(&["-q", "hello"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("500"), "{}", stderr(&out));
}

in_both_modes!(ctrl_c_mid_stream_keeps_nothing_partial);
fn ctrl_c_mid_stream_keeps_nothing_partial(mode: Mode) {
    let t = Talaria::new();
    let mock = mode.start(Script::new([Step::stall("I am halfway through a long"), Step::text("fresh answer")]));
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

in_both_modes!(an_exhausted_budget_ends_with_a_summary);
fn an_exhausted_budget_ends_with_a_summary(mode: Mode) {
    let t = Talaria::new();
    std::fs::write(t.ws().join("a.txt"), "x\n").expect("write");
    let mock = mode.start(Script::new([
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
    assert!(
        reqs[2].body.get("tools").is_none_or(|t| t.as_array().is_none_or(Vec::is_empty)),
        "no tools for the summary"
    );
    assert!(flat(&reqs[2].body).contains("budget"), "the summary request says why");
    assert!(stderr(&out).contains("budget"), "{}", stderr(&out));
}

in_both_modes!(dangerous_commands_need_yolo_when_unattended);
fn dangerous_commands_need_yolo_when_unattended(mode: Mode) {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let script =
        || Script::new([Step::tool_call("terminal", json!({"command": "rm -rf build"})), Step::text("finished")]);
    let mock = mode.start(script());
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "clean the build"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(t.ws().join("build").exists(), "refused without --yolo");
    let result = flat(&mock.requests()[1].body);
    assert!(result.contains("needs approval") && result.contains("--yolo"), "the model is told why: {result}");

    let mock = mode.start(script());
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "clean the build", "--yolo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!t.ws().join("build").exists(), "allowed with --yolo");
}

in_both_modes!(kill_9_mid_turn_loses_no_committed_message);
fn kill_9_mid_turn_loses_no_committed_message(mode: Mode) {
    let t = Talaria::new();
    std::fs::write(t.ws().join("data.txt"), "committed-result-marker\n").expect("write");
    let mock = mode.start(Script::new([
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
    assert!(
        sent.contains("read data.txt please") && sent.contains("committed-result-marker") && sent.contains("go on")
    );
    assert!(!sent.contains("never finished"));
}

in_both_modes!(session_search_finds_an_earlier_session);
fn session_search_finds_an_earlier_session(mode: Mode) {
    let t = Talaria::new();
    let mock = mode.start(Script::new([
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

in_both_modes!(malformed_tool_arguments_get_an_error_the_model_can_act_on);
fn malformed_tool_arguments_get_an_error_the_model_can_act_on(mode: Mode) {
    let t = Talaria::new();
    std::fs::write(t.ws().join("a.txt"), "fine\n").expect("write");
    let mock = mode.start(Script::new([
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

in_both_modes!(oversized_results_are_saved_to_a_file_and_previewed);
fn oversized_results_are_saved_to_a_file_and_previewed(mode: Mode) {
    let t = Talaria::new();
    let big: String = (0..400).map(|i| format!("line {i:04} of a long file\n")).collect();
    std::fs::write(t.ws().join("big.txt"), &big).expect("write");
    let mock = mode.start(Script::new([
        Step::tool_call("read_file", json!({"path": "big.txt", "limit": 2000})),
        Step::text("it is long"),
    ]));
    t.use_mock(&mock, "chat_completions", "max_result_chars = 1000\n");
    let out = t.chat(&["-q", "read big.txt"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let msgs = mock.requests()[1].body["messages"].as_array().expect("messages").clone();
    let result =
        msgs.iter().find(|m| m["role"] == "tool").expect("tool")["content"].as_str().expect("text").to_string();
    assert!(result.contains("line 0000") && !result.contains("line 0399"), "a preview of the start only");
    assert!(result.contains("[output cut after"), "{result}");
    let path = result.split("saved to ").nth(1).and_then(|r| r.split(". Ask").next()).expect("path").trim();
    let saved = std::fs::read_to_string(path).expect("the full result is on disk");
    assert!(saved.contains("line 0399"), "the file holds everything");
    assert!(path.starts_with(t.home.path().to_str().expect("utf8")), "saved under TALARIA_HOME: {path}");
}

in_both_modes!(delegated_tasks_run_in_children_with_restricted_tools);
fn delegated_tasks_run_in_children_with_restricted_tools(mode: Mode) {
    let t = Talaria::new();
    let mock = mode.start(Script::new([
        Step::tool_call("delegate_task", json!({"tasks": [{"goal": "count apples"}, {"goal": "count pears"}]})),
        Step::text("child report one"),
        Step::text("child report two"),
        Step::text("both children reported"),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "count the fruit, in parallel"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "both children reported");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 4);
    for child in &reqs[1..3] {
        let tools: Vec<&str> = child.body["tools"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t["function"]["name"].as_str()).collect())
            .unwrap_or_default();
        assert!(tools.contains(&"read_file"), "children keep ordinary tools: {tools:?}");
        for banned in ["delegate_task", "clarify", "memory"] {
            assert!(!tools.contains(&banned), "a child must not get {banned}");
        }
        let first_user = flat(&child.body);
        assert!(first_user.contains("count apples") || first_user.contains("count pears"));
        assert!(!first_user.contains("count the fruit"), "children start without the parent's history");
    }
    let parent = flat(&reqs[3].body);
    assert!(parent.contains("child report one") && parent.contains("child report two"), "{parent}");
    let listed = t.ok(&["sessions", "list", "--json"]);
    let sessions: Value = serde_json::from_str(&listed).expect("json");
    assert_eq!(sessions.as_array().map(Vec::len), Some(1), "child sessions are not listed as top-level sessions");
}

in_both_modes!(memory_written_now_appears_in_the_next_sessions_prompt);
fn memory_written_now_appears_in_the_next_sessions_prompt(mode: Mode) {
    let t = Talaria::new();
    let mock = mode.start(Script::new([
        Step::tool_call("memory", json!({"action": "add", "target": "user", "content": "Prefers tabs over spaces"})),
        Step::text("noted"),
        Step::text("hello again"),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    assert!(t.chat(&["-q", "remember I like tabs"]).status.success());
    let profile = std::fs::read_to_string(t.home.path().join("memories/USER.md")).expect("USER.md");
    assert!(profile.contains("Prefers tabs over spaces"));
    let reqs = mock.requests();
    let system = |i: usize| reqs_system(&mock.requests()[i].body);
    assert!(!system(1).contains("Prefers tabs"), "the prompt stays stable within a session");
    assert!(t.chat(&["-q", "hi"]).status.success());
    assert!(system(2).contains("Prefers tabs over spaces"), "the next session's prompt has it: {}", system(2));
    drop(reqs);
}

fn reqs_system(body: &Value) -> String {
    body["messages"][0]["content"].as_str().unwrap_or_default().to_string()
}

in_both_modes!(toolsets_choose_what_the_model_is_offered);
fn toolsets_choose_what_the_model_is_offered(mode: Mode) {
    let t = Talaria::new();
    let mock = mode.start(Script::new([Step::text("a"), Step::text("b")]));
    t.use_mock(&mock, "chat_completions", "toolsets = [\"coding\"]\ndisabled_toolsets = [\"web\"]\n");
    let names = |i: usize| -> Vec<String> {
        let mut v: Vec<String> = mock.requests()[i].body["tools"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t["function"]["name"].as_str().map(String::from)).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    assert!(t.chat(&["-q", "x"]).status.success());
    assert_eq!(names(0), ["patch", "read_file", "search_files", "terminal", "todo", "write_file"]);
    assert!(t.chat(&["-q", "x", "--toolsets", "files,memory"]).status.success());
    assert_eq!(names(1), ["memory", "patch", "read_file", "search_files", "write_file"]);
    let out = t.chat(&["-q", "x", "--toolsets", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unknown toolset `nope`"), "{}", stderr(&out));
}

in_both_modes!(the_repl_asks_before_a_dangerous_command_and_remembers_always);
/// The REPL on a real pseudo-terminal (util-linux `script`), answering an approval prompt.
fn the_repl_asks_before_a_dangerous_command_and_remembers_always(mode: Mode) {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    std::fs::create_dir(t.ws().join("dist")).expect("mkdir");
    let mock = mode.start(Script::new([
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Step::text("removed build"),
        Step::tool_call("terminal", json!({"command": "rm -rf dist"})),
        Step::text("removed dist"),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("new session", 1);
    repl.send("clean the build");
    repl.wait_for("Allow?", 1);
    assert!(t.ws().join("build").exists(), "nothing runs before the answer");
    repl.send("a");
    repl.wait_for("removed build", 1);
    assert!(!t.ws().join("build").exists(), "allowed");
    let config = std::fs::read_to_string(t.home.path().join("config.toml")).expect("config");
    assert!(config.contains("allow = ["), "always is saved: {config}");
    // The same kind of command now runs without asking.
    repl.send("and dist");
    repl.wait_for("removed dist", 1);
    assert!(!t.ws().join("dist").exists());
    assert_eq!(repl.text().matches("Allow?").count(), 1, "asked only once");
    let shown = repl.close_showing();
    let listed: Value = serde_json::from_str(&t.ok(&["sessions", "list", "--json"])).expect("json");
    let id = listed[0]["id"].as_str().expect("id");
    assert!(shown.contains(&format!("resume this conversation with: talaria chat --resume {id}")), "{shown}");
}

/// Checkpoints: a `patch` the model made is put back byte for byte by `/rollback 1` in the
/// REPL, and the REPL lists what it kept.
#[test]
fn a_patch_is_rolled_back_byte_for_byte() {
    let t = Talaria::new();
    let original = "fn main() {\n    println!(\"hello\");\n}\n\t trailing tab and no newline";
    std::fs::write(t.ws().join("main.rs"), original).expect("write");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("patch", json!({"path": "main.rs", "old_string": "hello", "new_string": "goodbye"})),
        Reply::text("patched").into(),
    ]));
    t.use_mock(&mock, "chat_completions", "[memory]\nprovider = \"none\"\n");
    let mut repl = Repl::start(&t);
    repl.send("say goodbye instead");
    // The turn is over once its status line is drawn (a line typed before that would interrupt
    // the reply, as a user's Enter does).
    repl.wait_for(" · session ", 1);
    assert!(std::fs::read_to_string(t.ws().join("main.rs")).expect("read").contains("goodbye"));
    repl.send("/rollback");
    // The listing itself (the turn's tool line already said `patch main.rs`).
    repl.wait_for("patch main.rs  (1 file)", 1);
    repl.send("/rollback 1");
    let shown = repl.wait_for("undid `patch main.rs`: restored main.rs", 1);
    assert_eq!(std::fs::read_to_string(t.ws().join("main.rs")).expect("read"), original, "{shown}");
    repl.close();
}

/// Checkpoints: a `rm -rf` the user let through (--yolo) is undone by
/// `talaria checkpoints restore`, every file back; `list` and `diff` show what was kept.
#[test]
fn an_approved_recursive_delete_is_restored() {
    let t = Talaria::new();
    let dir = t.ws().join("reports");
    std::fs::create_dir_all(dir.join("2026")).expect("mkdir");
    std::fs::write(dir.join("q3.md"), "# Q3\nrevenue up\n").expect("write");
    std::fs::write(dir.join("2026/jan.csv"), "a,b\n1,2\n").expect("write");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "rm -rf reports"})),
        Reply::text("deleted").into(),
    ]));
    t.use_mock(&mock, "chat_completions", "[memory]\nprovider = \"none\"\n");
    let out = t.run(&["chat", "-q", "clean up the reports", "--yolo"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.exists(), "the command ran");

    let listed = t.ok(&["checkpoints", "list"]);
    assert!(listed.contains("1  ") && listed.contains("terminal: rm -rf reports  (2 files)"), "{listed}");
    let diff = t.ok(&["checkpoints", "diff", "1"]);
    assert!(diff.contains("reports/q3.md: gone now; restoring puts it back"), "{diff}");
    let restored = t.ok(&["checkpoints", "restore", "1", "--yes"]);
    assert!(restored.contains("2 written, 0 removed"), "{restored}");
    assert_eq!(std::fs::read_to_string(dir.join("q3.md")).expect("q3"), "# Q3\nrevenue up\n");
    assert_eq!(std::fs::read_to_string(dir.join("2026/jan.csv")).expect("jan"), "a,b\n1,2\n");
    // The kept contents live in talaria's home, never in the workspace.
    assert!(t.home.path().join("checkpoints/objects").is_dir());
    assert!(!t.ws().join("checkpoints").exists());
}

/// (id, text) pairs: a call's id and the path it reads, or a result's id and content.
type Pairs = Vec<(String, String)>;

/// The calls and results of the last request `mock` got, in order. Any of the three formats.
fn calls_and_results(mock: &MockLlm) -> (Pairs, Pairs) {
    let requests = mock.requests();
    let body = &requests.last().expect("the model was asked").body;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let path = |args: &Value| {
        let args: Value = args.as_str().map_or_else(|| args.clone(), |s| serde_json::from_str(s).unwrap_or_default());
        text(&args["path"])
    };
    let (mut calls, mut results) = (Vec::new(), Vec::new());
    let items = body["messages"].as_array().or_else(|| body["input"].as_array()).expect("messages or input");
    for item in items {
        if let Some(asked) = item["tool_calls"].as_array() {
            calls.extend(asked.iter().map(|c| (text(&c["id"]), path(&c["function"]["arguments"]))));
        }
        if item["role"] == "tool" {
            results.push((text(&item["tool_call_id"]), text(&item["content"])));
        }
        for block in item["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("tool_use") => calls.push((text(&block["id"]), path(&block["input"]))),
                Some("tool_result") => results.push((text(&block["tool_use_id"]), flat(&block["content"]))),
                _ => {}
            }
        }
        match item["type"].as_str() {
            Some("function_call") => calls.push((text(&item["call_id"]), path(&item["arguments"]))),
            Some("function_call_output") => results.push((text(&item["call_id"]), text(&item["output"]))),
            _ => {}
        }
    }
    (calls, results)
}

/// Issue 36, finding 1: a server that numbers the calls of each answer from `call_0` (as
/// llama.cpp's does), across turns and sessions, and one answer whose two calls share an id.
/// Every result reaches the model against its own call, in each wire format, and the store
/// keeps each call under an id of its own.
#[test]
fn ids_used_again_or_shared_never_lose_or_cross_a_result() {
    for api_mode in MODES {
        let t = Talaria::new();
        for (file, word) in [("a", "alpha"), ("b", "bravo"), ("c", "charlie"), ("d", "delta")] {
            std::fs::write(t.ws().join(format!("{file}.txt")), format!("{word}\n")).expect("write");
        }
        let read = |path: &str| json!({"path": path});
        // Chat Completions in strict mode numbers each answer's calls itself; the other formats
        // are told to.
        let numbered = |paths: &[&str]| {
            let mut reply = Reply::default();
            for (i, path) in paths.iter().enumerate() {
                reply = if api_mode == "chat_completions" {
                    reply.tool_call("read_file", read(path))
                } else {
                    reply.tool_call_with_id(format!("call_{i}"), "read_file", read(path))
                };
            }
            Step::from(reply)
        };
        let shared = Reply::default().tool_call_with_id("call_0", "read_file", read("c.txt")).tool_call_with_id(
            "call_0",
            "read_file",
            read("d.txt"),
        );
        let mock = Mode::Strict.start(Script::new([
            numbered(&["a.txt", "b.txt"]),
            shared.into(),
            Step::text("first done"),
            numbered(&["b.txt"]),
            Step::text("second done"),
        ]));
        t.use_mock(&mock, api_mode, "");
        let out = t.chat(&["-q", "read them all"]);
        assert!(out.status.success(), "{api_mode}: {}", stderr(&out));
        let out = t.chat(&["--continue", "-q", "and b again"]);
        assert_eq!(stdout(&out).trim(), "second done", "{api_mode}: {}", stderr(&out));

        let (calls, results) = calls_and_results(&mock);
        let paths: Vec<&str> = calls.iter().map(|(_, p)| p.as_str()).collect();
        assert_eq!(paths, ["a.txt", "b.txt", "c.txt", "d.txt", "b.txt"], "{api_mode}");
        assert_eq!(results.len(), calls.len(), "{api_mode}: {results:?}");
        let word = |path: &str| match path {
            "a.txt" => "alpha",
            "b.txt" => "bravo",
            "c.txt" => "charlie",
            _ => "delta",
        };
        for ((call_id, path), (result_id, content)) in calls.iter().zip(&results) {
            assert_eq!(call_id, result_id, "{api_mode}: each result under its own call's id");
            assert!(content.contains(word(path)), "{api_mode}: {path} got {content}");
        }
        // The provider's ids go back to it, but two calls of one answer never share one.
        let ids: Vec<&str> = calls.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!((ids[0], ids[1], ids[2], ids[4]), ("call_0", "call_1", "call_0", "call_0"), "{api_mode}");
        assert_ne!(ids[3], "call_0", "{api_mode}: the second of two calls sharing an id is told apart");

        // The store: every call under an id of its own, its result under the same id.
        let shown: Value = serde_json::from_str(&t.ok(&["sessions", "show", "latest", "--json"])).expect("json");
        let messages = shown["messages"].as_array().expect("messages");
        let stored_calls: Vec<&str> = messages
            .iter()
            .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
            .map(|c| c["id"].as_str().expect("id"))
            .collect();
        let stored_results: Vec<(&str, &str)> = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| (m["tool_call_id"].as_str().expect("id"), m["content"].as_str().expect("content")))
            .collect();
        let unique: std::collections::HashSet<&str> = stored_calls.iter().copied().collect();
        assert_eq!(unique.len(), 5, "{api_mode}: {stored_calls:?}");
        let stored_ids: Vec<&str> = stored_results.iter().map(|(id, _)| *id).collect();
        assert_eq!(stored_ids, stored_calls, "{api_mode}");
        assert!(stored_results.iter().all(|(_, c)| !c.contains("no result")), "{api_mode}: {stored_results:?}");
    }
}

/// Started in the directory that holds its home (`~` with the default `~/.talaria`), talaria says
/// at once that the file tools cannot work there, and a file tool's error says why, for the
/// model too; a command still runs.
#[test]
fn a_workspace_holding_talarias_home_is_named_before_the_file_tools_fail_there() {
    let t = Talaria::new();
    let home = t.ws().join(".talaria");
    std::fs::create_dir(&home).expect("home");
    std::fs::write(t.ws().join("small.txt"), "small\n").expect("write");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("read_file", json!({"path": "small.txt"})),
        Step::tool_call("terminal", json!({"command": "cat small.txt"})),
        Step::text("done"),
    ]));
    let config = format!(
        "[model]\nprovider = \"custom\"\nname = \"mock-model\"\nbase_url = \"{}\"\n[agent]\nauto_title = false\n",
        mock.base_url()
    );
    std::fs::write(home.join("config.toml"), config).expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["chat", "--yolo", "-q", "read small.txt"])
        .current_dir(t.ws())
        .env("TALARIA_HOME", &home)
        .env_remove("TALARIA_LOG")
        .output()
        .expect("run talaria");
    assert!(out.status.success(), "{}", stderr(&out));
    let (ws, home) = (t.ws().display().to_string(), home.display().to_string());
    assert!(
        stderr(&out).starts_with(&format!(
            "warning: {ws} holds talaria's home ({home}), so plugins are not given it: the file tools cannot read or \
             write here (commands can). Start talaria in a project directory.\n"
        )),
        "{}",
        stderr(&out)
    );
    let read = flat(&mock.requests()[1].body);
    let why = format!(
        "[host: plugin 'files' was not given {ws}: it holds talaria's home {home}, which no plugin may reach: start \
         talaria in a project directory (or set TALARIA_HOME outside this one)]"
    );
    assert!(read.contains(&why), "the model is told why: {read}");
    let ran = flat(&mock.requests()[2].body);
    assert!(ran.contains(r#"{\"exit_code\":0,\"output\":\"small\\n\""#), "the command read the file: {ran}");
    assert_eq!(stdout(&out).trim(), "done");
}
