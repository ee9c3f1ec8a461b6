//! Signals and concurrent processes against the real binary: nothing left running behind the
//! user's back, nothing lost, no two conversations mixed.

use std::io::Read as _;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{MockLlm, Script, Step};

use super::Talaria;

impl Talaria {
    /// Config pointing at `mock` (chat completions), sessions waited for up to `wait` s.
    fn faults_config(&self, mock: &MockLlm, wait: u64) {
        let config = format!(
            "[model]\nprovider = \"custom\"\nname = \"mock-model\"\nbase_url = \"{}\"\n\n[agent]\nretries = 1\nauto_title = false\nretry_delay_ms = 5\nsession_wait_secs = {wait}\n",
            mock.base_url()
        );
        std::fs::write(self.home.path().join("config.toml"), config).expect("config");
    }

    /// The latest session's stored messages.
    fn stored(&self, key: &str) -> Vec<Value> {
        let shown: Value =
            serde_json::from_str(&self.ok(&["sessions", "show", key, "--json"])).expect("sessions show --json");
        shown["messages"].as_array().expect("messages").clone()
    }
}

fn ended(mut child: Child) -> (Option<i32>, String, String) {
    let status = child.wait().expect("wait");
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().expect("stdout").read_to_string(&mut out).expect("read");
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read");
    (status.code(), out, err)
}

/// Pids of processes whose command line is exactly `words`.
fn processes(words: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = words.iter().flat_map(|w| w.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            (cmdline == want).then_some(pid)
        })
        .collect()
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn role(m: &Value) -> &str {
    m["role"].as_str().unwrap_or_default()
}

fn text(m: &Value) -> &str {
    m["content"].as_str().unwrap_or_default()
}

/// A chat whose tool runs `sleep SECONDS` (a real child), stopped by `signal` while it sleeps.
fn stopped_during_a_tool(signal: &str, seconds: &str) -> (Talaria, Option<i32>, String) {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": format!("touch started && sleep {seconds}")})),
        Step::text("never asked"),
    ]));
    t.faults_config(&mock, 30);
    let child = t.spawn_chat(&["-q", "wait a while"]);
    let started = t.ws().join("started");
    wait_for("the tool's command to start", Duration::from_secs(120), || started.exists());
    wait_for("the sleep child", Duration::from_secs(10), || !processes(&["sleep", seconds]).is_empty());
    let status = Command::new("kill").args([signal, &child.id().to_string()]).status().expect("kill");
    assert!(status.success());
    let (code, _, err) = ended(child);
    (t, code, err)
}

#[test]
fn sigterm_and_sighup_during_a_tool_stop_it_and_record_the_call() {
    for (signal, seconds, code) in [("-TERM", "9871", 143), ("-HUP", "9872", 129)] {
        let (t, exit, err) = stopped_during_a_tool(signal, seconds);
        assert_eq!(exit, Some(code), "{signal}: exit code; stderr: {err}");
        // No process left: the command's whole group went with the turn.
        wait_for("the sleep to be gone", Duration::from_secs(5), || processes(&["sleep", seconds]).is_empty());
        let messages = t.stored("latest");
        let roles: Vec<&str> = messages.iter().map(role).collect();
        assert_eq!(roles, ["user", "assistant", "tool"], "{signal}: {messages:?}");
        assert!(messages[1].to_string().contains(&format!("sleep {seconds}")), "the call is stored: {messages:?}");
        assert!(text(&messages[2]).contains("interrupted"), "an interrupted result: {messages:?}");
        let info: Value = serde_json::from_str(&t.ok(&["sessions", "show", "latest", "--json"])).expect("json");
        assert_eq!(info["session"]["end_reason"], "signal", "{info}");
    }
}

#[test]
fn kill_9_during_a_tool_leaves_the_call_recorded() {
    let (t, exit, _) = stopped_during_a_tool("-KILL", "9873");
    assert_eq!(exit, None, "killed by the signal");
    // kill -9 gives talaria no chance to stop its child; the test cleans it up.
    for pid in processes(&["sleep", "9873"]) {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    let messages = t.stored("latest");
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant"], "the request for the tool is on disk: {messages:?}");
    assert!(messages[1].to_string().contains("sleep 9873"), "{messages:?}");

    // Continuing tells the model the call was cut short.
    let mock = MockLlm::start(Script::new([Step::text("I see the sleep was stopped")]));
    t.faults_config(&mock, 30);
    let out = t.run(&["chat", "--continue", "-q", "what happened?"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sent = mock.requests()[0].body.to_string();
    assert!(sent.contains("sleep 9873") && sent.contains("stopped before this call finished"), "{sent}");
}

#[test]
fn ten_continues_at_once_take_turns() {
    let t = Talaria::new();
    let answers: Vec<Step> = (0..11).map(|i| Step::text(format!("answer {i}"))).collect();
    let mock = MockLlm::start(Script::new(answers));
    t.faults_config(&mock, 120);
    let out = t.run(&["chat", "-q", "question start"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let children: Vec<Child> = (0..10).map(|i| t.spawn_chat(&["--continue", "-q", &format!("question {i}")])).collect();
    for child in children {
        let (code, out, err) = ended(child);
        assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    }

    // Request k got "answer k"; its last user message says which question that answered.
    let requests = mock.requests();
    assert_eq!(requests.len(), 11);
    let asked: Vec<String> = requests
        .iter()
        .map(|r| {
            let msgs = r.body["messages"].as_array().expect("messages");
            let last = msgs.iter().rev().find(|m| m["role"] == "user").expect("a user message");
            last["content"].as_str().expect("text").to_string()
        })
        .collect();
    let messages = t.stored("latest");
    assert_eq!(messages.len(), 22, "{messages:?}");
    for (k, pair) in messages.chunks(2).enumerate() {
        assert_eq!((role(&pair[0]), role(&pair[1])), ("user", "assistant"), "turn {k}: {pair:?}");
        assert_eq!(text(&pair[1]), format!("answer {k}"), "turn {k}");
        assert_eq!(text(&pair[0]), asked[k], "answer {k} went to the question it answered");
        // Each process saw every turn committed before its own.
        let sent = requests[k].body["messages"].as_array().expect("messages").len();
        assert_eq!(sent, 2 * k + 2, "request {k} carried the system prompt and the whole conversation so far");
    }
}

#[test]
fn a_busy_session_names_its_holder_and_can_be_forked() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Step::text("first answer"),
        Step::stall("thinking for a long"),
        Step::text("answer in the fork"),
    ]));
    t.faults_config(&mock, 1);
    assert!(t.run(&["chat", "-q", "first question"]).status.success());
    let original = t.stored("latest");
    let holder = t.spawn_chat(&["--continue", "-q", "a slow one"]);
    wait_for("the second request", Duration::from_secs(120), || mock.requests().len() >= 2);

    let out = t.run(&["chat", "--continue", "-q", "me too"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("talaria chat -q (pid {}", holder.id())), "names the holder: {err}");
    assert!(err.contains("--fork"), "says the way forward: {err}");
    assert_eq!(mock.requests().len(), 2, "nothing was sent");

    let out = t.run(&["chat", "--continue", "--fork", "-q", "me too"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "answer in the fork");
    let sent = mock.requests()[2].body.to_string();
    assert!(sent.contains("first question") && sent.contains("first answer") && sent.contains("me too"), "{sent}");

    let _ = Command::new("kill").args(["-TERM", &holder.id().to_string()]).status();
    let (code, _, _) = ended(holder);
    assert_eq!(code, Some(143));
    assert_eq!(original.len(), 2);
}

#[test]
fn closing_the_terminal_during_a_tool_stops_it_and_records_the_call() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "touch started && sleep 9874"})),
        Step::text("never asked"),
    ]));
    t.faults_config(&mock, 30);
    let mut terminal = t.spawn_repl();
    {
        use std::io::Write as _;
        let stdin = terminal.stdin.as_mut().expect("stdin");
        stdin.write_all(b"wait a while\n").expect("type");
        stdin.flush().expect("flush");
    }
    let started = t.ws().join("started");
    wait_for("the tool's command to start", Duration::from_secs(120), || started.exists());
    // The terminal emulator goes away: the pseudo-terminal's other end closes.
    terminal.kill().expect("kill script(1)");
    let _ = terminal.wait();
    wait_for("the sleep to be gone", Duration::from_secs(20), || processes(&["sleep", "9874"]).is_empty());
    wait_for("the session to be closed", Duration::from_secs(20), || {
        let info: Value = serde_json::from_str(&t.ok(&["sessions", "show", "latest", "--json"])).expect("json");
        info["session"]["end_reason"] == "signal"
    });
    let messages = t.stored("latest");
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{messages:?}");
    assert!(text(&messages[2]).contains("interrupted"), "{messages:?}");
}

/// A chat whose model asks for `read_file` on a FIFO nobody writes (the plugin's `open` blocks),
/// under a 1 s deadline for plugin calls.
fn reading_a_fifo() -> (Talaria, MockLlm, Child) {
    let t = Talaria::new();
    let made = Command::new("mkfifo").arg(t.ws().join("pipe")).status().expect("mkfifo");
    assert!(made.success());
    let mock = MockLlm::start(Script::new([
        Step::tool_call("read_file", json!({"path": "pipe"})),
        Step::text("the pipe never answered"),
    ]));
    t.faults_config(&mock, 30);
    let config = t.home.path().join("config.toml");
    let with_deadline = std::fs::read_to_string(&config).expect("config") + "\n[sandbox]\ntimeout_secs = 1\n";
    std::fs::write(&config, with_deadline).expect("config");
    let child = t.spawn_chat(&["-q", "read the pipe"]);
    (t, mock, child)
}

/// A plugin's call stuck in a system call is stopped at its deadline; the model is told, the
/// turn ends, and so does the process, although the thread stuck in `open` never returns.
#[test]
fn a_tool_stuck_opening_a_fifo_is_stopped_at_its_deadline_and_the_process_still_exits() {
    let started = Instant::now();
    let (t, mock, mut child) = reading_a_fifo();
    while child.try_wait().expect("try_wait").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("talaria did not exit within 60 s of a call stopped at its 1 s deadline");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let (code, out, err) = ended(child);
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert!(out.contains("the pipe never answered"), "the turn went on: {out}");
    assert!(err.contains("did not finish within its 1s deadline"), "{err}");
    let told = mock.requests()[1].body.to_string();
    assert!(told.contains("did not finish within its 1s deadline"), "the model is told: {told}");
    // A read-only tool's request is stored with its result, in order.
    let roles: Vec<String> = t.stored("latest").iter().map(|m| role(m).to_string()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
}

/// A tool that only reads is committed with its result: a kill -9 during it leaves the user's
/// message alone, not a request for a call that changed nothing (compare
/// `kill_9_during_a_tool_leaves_the_call_recorded`, where the tool runs a command).
#[test]
fn kill_9_during_a_read_only_tool_leaves_only_the_users_message() {
    let (t, _mock, mut child) = reading_a_fifo();
    // The tool has started once its line is shown; it then waits in `open` for a second.
    let stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let started = std::io::BufRead::lines(stderr).map_while(Result::ok).any(|l| l.contains("read_file"));
    assert!(started, "the tool's line was shown");
    std::thread::sleep(Duration::from_millis(200));
    let status = Command::new("kill").args(["-KILL", &child.id().to_string()]).status().expect("kill");
    assert!(status.success());
    assert_eq!(child.wait().expect("wait").code(), None, "killed by the signal");
    let messages = t.stored("latest");
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user"], "{messages:?}");
}

/// A home with `n` stored sessions, written through the real store.
fn home_with_sessions(t: &Talaria, n: usize) -> std::path::PathBuf {
    let path = t.home.path().join("state.db");
    let store = talaria_store::Store::open(&path).expect("store");
    for i in 0..n {
        let id = format!("20261123_1000{i:02}_abcdef");
        talaria_test_support::wait(store.create_session(&talaria_store::NewSession {
            id: id.clone(),
            source: "cli".into(),
            model: "m".into(),
            provider: "custom".into(),
            system_prompt: "You are talaria.".into(),
            parent_id: None,
            cwd: "/w".into(),
        }))
        .expect("create");
        let long = format!("the harbour of Lisbon, part {i}. ").repeat(300);
        talaria_test_support::wait(store.append_messages(
            &id,
            &[talaria_protocol::Message::user(format!("question {i}")), talaria_protocol::Message::assistant(long)],
        ))
        .expect("append");
    }
    path
}

#[test]
fn a_cut_state_db_is_named_once_and_doctor_repairs_it() {
    let t = Talaria::new();
    let path = home_with_sessions(&t, 40);
    let len = std::fs::metadata(&path).expect("meta").len();
    std::fs::OpenOptions::new().write(true).open(&path).expect("open").set_len(len / 2).expect("cut");

    for args in [&["sessions", "list"][..], &["chat", "-q", "hello", "--provider", "ollama", "--model", "m"]] {
        let out = t.run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.matches("is damaged").count(), 1, "{args:?}: said once: {err}");
        assert!(err.contains(&format!("{} is damaged (the file was cut short", path.display())), "{err}");
        assert!(err.contains("talaria doctor --repair"), "{err}");
    }

    let out = t.run(&["doctor", "--offline"]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains("fail: state:") && report.contains("doctor --repair"), "{report}");

    let out = t.run(&["doctor", "--offline", "--repair"]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("warn: state:") && report.contains("state.db.damaged-"), "{report}");
    let saved: usize = report
        .split("could be read: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("how many sessions were saved");
    assert!(saved > 0, "{report}");
    let moved: Vec<_> = std::fs::read_dir(t.home.path())
        .expect("home")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("state.db.damaged-"))
        .collect();
    assert_eq!(moved.len(), 1, "the damaged file is kept aside: {moved:?}");

    let listed: Value = serde_json::from_str(&t.ok(&["sessions", "list", "--json", "--limit", "100"])).expect("json");
    assert!(listed.as_array().expect("list").len() >= saved.min(1), "{listed}");
    let out = t.run(&["doctor", "--offline"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: state:"), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn a_garbage_state_db_is_replaced_after_repair() {
    let t = Talaria::new();
    let path = t.home.path().join("state.db");
    std::fs::write(&path, "<html>not a database</html>\n".repeat(200)).expect("write");
    let err = t.fails(&["sessions", "list"]);
    assert!(err.contains("it is not an SQLite database: its first bytes are \"<html>not a data\""), "{err}");
    let out = t.run(&["doctor", "--offline", "--repair"]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("could be read: 0 sessions, 0 messages"), "{report}");
    assert!(t.ok(&["sessions", "list"]).is_empty());
}

#[test]
fn a_read_only_home_can_still_be_read() {
    let t = Talaria::new();
    home_with_sessions(&t, 2);
    // Make the home read-only. Root ignores permissions, so as root the commands run as nobody.
    let status = Command::new("chmod").args(["-R", "a+rX,a-w"]).arg(t.home.path()).status().expect("chmod");
    assert!(status.success());
    let root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")));
    let run = |args: &[&str]| {
        let mut cmd = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_talaria")]);
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_talaria"))
        };
        cmd.args(args).env("TALARIA_HOME", t.home.path()).env("HOME", "/tmp").current_dir("/tmp").output().expect("run")
    };
    let out = run(&["sessions", "list"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(listed.contains("question 0") && listed.contains("question 1"), "{listed}");
    let out = run(&["sessions", "show", "latest"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("harbour"), "{out:?}");
    let out = run(&["sessions", "search", "harbour"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run(&["doctor", "--offline"]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("fail: home: cannot write in") && report.contains("ok: state:"), "{report}");
    // Writing is refused with the reason, and nothing is lost.
    let out = run(&["sessions", "rename", "latest", "new title"]);
    assert_eq!(out.status.code(), Some(1));
    let _ = Command::new("chmod").args(["-R", "u+w"]).arg(t.home.path()).status();
}

#[test]
fn home_must_exist_when_talaria_home_is_not_set() {
    let run = |home: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_talaria"));
        cmd.args(["sessions", "list"]).env_remove("TALARIA_HOME").env_remove("HOME");
        if let Some(h) = home {
            cmd.env("HOME", h);
        }
        cmd.output().expect("run")
    };
    let out = run(None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HOME is not set"), "{out:?}");
    let out = run(Some("/nonexistent/talaria-test-home"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("HOME is /nonexistent/talaria-test-home, which is not a directory")
    );
    assert!(!std::path::Path::new("/nonexistent").exists(), "nothing was created");
}
