//! `talaria serve` as a real process, driven by the official `openai` Python SDK and the A2A
//! SDK `a2a-sdk` (PyPI, in virtual environments under ~/.cache/talaria-tests), with the mock
//! model behind it. Requests
//! no SDK sends (a foreign Host, a cross-site Origin) are written by hand.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{MockLlm, Reply, Script, Step};

use crate::Talaria;

const WAIT: Duration = Duration::from_secs(30);
/// The SDK's version the tests use.
const OPENAI: &str = "3.57.0";
/// The A2A SDK's version the tests use.
const A2A: &str = "1.3.0";
pub(crate) const TOKEN: &str = "serve-test-token-0123456789abcdef0123456789";

fn python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| crate::mcp::python_with("openai-venv", "openai", OPENAI))
}

/// Debian's chromium, which scripts/test installs.
fn chromium() -> &'static str {
    let path = "/usr/bin/chromium";
    assert!(Path::new(path).exists(), "chromium is missing: run scripts/test (it installs Debian's chromium)");
    path
}

fn a2a_python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| crate::mcp::python_with("a2a-venv", "a2a-sdk", A2A))
}

/// A running `talaria serve`; killed when dropped, its stderr printed if the test failed.
pub(crate) struct Serve {
    child: Child,
    pub(crate) port: u16,
    log: PathBuf,
}

impl Serve {
    fn start(t: &Talaria, extra: &[&str]) -> Self {
        Self::start_with(t, extra, &[])
    }

    /// [`Serve::start`] with `env` set for it.
    pub(crate) fn start_with(t: &Talaria, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let port = crate::gateway::free_port();
        let log = t.home.path().join("serve.stderr");
        let child = Command::new(env!("CARGO_BIN_EXE_talaria"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .current_dir(t.workspace.path())
            .env("TALARIA_HOME", t.home.path())
            .env("TALARIA_SERVE_TOKEN", TOKEN)
            .envs(env.iter().copied())
            .env_remove("TALARIA_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("talaria serve");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < WAIT, "serve did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, port, log }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Run the SDK on `calls` with `key`: what it got, call by call.
    fn sdk(&self, t: &Talaria, key: &str, calls: Value) -> Vec<Value> {
        let plan = json!({"base_url": self.base_url(), "api_key": key, "calls": calls});
        self.client(t, python(), "openai_client.py", &plan)
    }

    /// Run the A2A client on `calls` with `token`: what it got, call by call.
    fn a2a(&self, t: &Talaria, token: &str, calls: Value) -> Vec<Value> {
        let plan = json!({"base_url": format!("http://127.0.0.1:{}", self.port), "token": token, "calls": calls});
        self.client(t, a2a_python(), "a2a_client.py", &plan)
    }

    /// The dashboard's one-time login link, as the server printed it: its path.
    fn login_path(&self) -> String {
        let start = Instant::now();
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(at) = log.find("/login?key=") {
                let link: String = log[at..].chars().take_while(|c| !c.is_whitespace()).collect();
                return link;
            }
            assert!(start.elapsed() < WAIT, "serve printed no login link:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Drive Debian's chromium through `steps` (see tests/browser/browser.mjs): what it saw.
    fn browser(&self, t: &Talaria, steps: Value) -> Vec<Value> {
        let base = format!("http://127.0.0.1:{}", self.port);
        let plan = json!({"base": base, "chromium": chromium(), "steps": steps});
        static PLANS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = PLANS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = t.home.path().join(format!("browser-{n}.json"));
        std::fs::write(&file, plan.to_string()).expect("plan");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/browser");
        assert!(
            dir.join("node_modules/playwright-core").is_dir(),
            "playwright-core is missing: run scripts/test, or `npm ci --prefix tests/browser`"
        );
        let out = Command::new("node").arg(dir.join("browser.mjs")).arg(&file).output().expect("node");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().last().unwrap_or_default();
        match serde_json::from_str::<Vec<Value>>(line) {
            Ok(seen) => seen,
            Err(e) => panic!(
                "the browser printed no result ({e}):\n{stdout}\n{}\nserver:\n{}",
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            ),
        }
    }

    /// Run tests/serve/`script` with `python` on `plan`: the list it printed.
    fn client(&self, t: &Talaria, python: &Path, script: &str, plan: &Value) -> Vec<Value> {
        static PLANS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = PLANS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = t.home.path().join(format!("plan-{n}.json"));
        std::fs::write(&file, plan.to_string()).expect("plan");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/serve").join(script);
        let out = Command::new(python).arg(script).arg(&file).output().expect("python");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().last().unwrap_or_default();
        match serde_json::from_str::<Vec<Value>>(line) {
            Ok(seen) => seen,
            Err(e) => panic!(
                "the client printed no result ({e}):\n{stdout}\n{}\nserver:\n{}",
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            ),
        }
    }

    /// A raw request with `headers`: the status line and body of the answer.
    pub(crate) fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream.set_read_timeout(Some(WAIT)).expect("timeout");
        let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).expect("write");
        stream.write_all(body.as_bytes()).expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read");
        let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        (status, answer)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("talaria serve's stderr:\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

#[test]
fn the_openai_sdk_chats_with_a_tool_call_streamed_and_not_and_tokens_are_checked() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "hello from the workspace").expect("notes");
    // The scripted steps, then the auto rule (`echo TEXT` answers TEXT).
    let mock = MockLlm::start(
        Script::auto()
            .then(Reply::default().tool_call("read_file", json!({"path": "notes.txt"})).usage(100, 5))
            .then(Reply::text("The notes say hello.").usage(120, 6))
            .then(Reply::default().tool_call("read_file", json!({"path": "notes.txt"})).usage(50, 3))
            .then(Reply::text("Streamed: the notes say hello.").usage(60, 8)),
    );
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    let seen = serve.sdk(
        &t,
        TOKEN,
        json!([
            {"kind": "models"},
            {"kind": "chat", "messages": [user("What do my notes say?")]},
            {"kind": "chat", "messages": [user("And now, streamed?")], "stream": true, "include_usage": true},
        ]),
    );
    assert_eq!(seen[0], json!({"models": ["talaria"]}));
    assert_eq!(seen[1]["content"], "The notes say hello.", "{seen:?}");
    assert_eq!(seen[1]["finish_reason"], "stop");
    // Every model call of the turn counts.
    assert_eq!(seen[1]["usage"]["prompt_tokens"], 220, "{seen:?}");
    assert_eq!(seen[1]["usage"]["completion_tokens"], 11);
    assert_eq!(seen[1]["usage"]["total_tokens"], 231);
    assert!(seen[1]["id"].as_str().is_some_and(|id| id.starts_with("chatcmpl-")), "{seen:?}");
    assert_eq!(seen[2]["content"], "Streamed: the notes say hello.", "{seen:?}");
    assert_eq!(seen[2]["roles"], json!(["assistant"]));
    assert_eq!(seen[2]["ids"], 1);
    assert_eq!(seen[2]["finish_reason"], "stop");
    assert_eq!(seen[2]["usage"]["prompt_tokens"], 110, "{seen:?}");
    // The tool ran in talaria, on the workspace's file: the model got its text.
    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    for at in [1, 3] {
        let body = requests[at].body.to_string();
        assert!(body.contains("hello from the workspace"), "{body}");
    }

    // The Responses API, on the same turns: not streamed, then streamed with every event.
    mock.forget_requests();
    let seen = serve.sdk(
        &t,
        TOKEN,
        json!([
            {"kind": "responses", "input": "echo plain"},
            {"kind": "responses", "input": "echo streamed", "stream": true},
            {"kind": "responses", "input": "What now?", "instructions": "Be brief."},
        ]),
    );
    assert_eq!(seen[0]["content"], "plain", "{seen:?}");
    assert_eq!(seen[0]["status"], "completed");
    assert!(seen[0]["id"].as_str().is_some_and(|id| id.starts_with("resp_")), "{seen:?}");
    assert_eq!(seen[1]["content"], "streamed", "{seen:?}");
    assert_eq!(
        seen[1]["events"],
        json!([
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ])
    );
    assert!(seen[1]["deltas"].as_u64().is_some_and(|n| n >= 1), "{seen:?}");
    // The instructions reach the model as the client's, before the user's message.
    assert_eq!(seen[2]["content"], "ok", "{seen:?}");
    let body = mock.requests()[2].body.to_string();
    assert!(body.contains("The client's instructions:\\nBe brief.\\n\\nNow the user says:\\nWhat now?"), "{body}");

    // Wrong and missing tokens.
    let refused =
        serve.sdk(&t, "not-the-token", json!([{"kind": "models"}, {"kind": "chat", "messages": [user("hi")]}]));
    for r in &refused {
        assert_eq!((r["error"].as_str(), r["status"].as_u64()), (Some("AuthenticationError"), Some(401)), "{r}");
    }
    assert_eq!(mock.requests().len(), 3, "a refused request reached the model");
    let (status, answer) = serve.raw("GET", "/v1/models", &[("Host", &format!("127.0.0.1:{}", serve.port))], "");
    assert_eq!(status, 401, "{answer}");
    assert!(answer.contains("WWW-Authenticate: Bearer") || answer.contains("www-authenticate: Bearer"), "{answer}");
}

#[test]
fn a_foreign_host_or_a_cross_site_origin_is_refused_and_nothing_is_cached() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::auto());
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    let bearer = format!("Bearer {TOKEN}");
    let own = format!("127.0.0.1:{}", serve.port);
    let (status, answer) = serve.raw("GET", "/v1/models", &[("Host", &own), ("Authorization", &bearer)], "");
    assert_eq!(status, 200, "{answer}");
    assert!(answer.to_ascii_lowercase().contains("cache-control: no-store"), "{answer}");
    // A DNS-rebinding page reaches the port under its own name.
    let (status, answer) =
        serve.raw("GET", "/v1/models", &[("Host", "attacker.example:80"), ("Authorization", &bearer)], "");
    assert_eq!(status, 421, "{answer}");
    assert!(answer.contains("does not answer to the host name `attacker.example:80`"), "{answer}");
    // Another site's page posting to it.
    let body = json!({"model": "talaria", "messages": [user("echo hi")]}).to_string();
    let headers = [
        ("Host", own.as_str()),
        ("Authorization", bearer.as_str()),
        ("Origin", "https://evil.example"),
        ("Content-Type", "application/json"),
    ];
    let (status, answer) = serve.raw("POST", "/v1/chat/completions", &headers, &body);
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("Origin `https://evil.example`"), "{answer}");
    assert!(mock.requests().is_empty(), "a refused request reached the model");
    // A bind beyond loopback needs the operator's word.
    let out = t.run(&["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"), "{out:?}");
}

#[test]
fn two_named_conversations_at_once_never_cross_and_each_keeps_its_session() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::auto().auto_paced(20));
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    let rounds = 4;
    let seen: Vec<Vec<Value>> = std::thread::scope(|scope| {
        let runs: Vec<_> = ["alpha", "beta"]
            .into_iter()
            .map(|name| {
                let (serve, t) = (&serve, &t);
                scope.spawn(move || {
                    let calls: Vec<Value> = (0..rounds)
                        .map(|i| {
                            json!({"kind": "chat", "session": name, "stream": i % 2 == 1,
                                   "messages": [user(&format!("echo {name} {i}"))]})
                        })
                        .collect();
                    serve.sdk(t, TOKEN, Value::Array(calls))
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().expect("client")).collect()
    });
    for (name, answers) in ["alpha", "beta"].iter().zip(&seen) {
        for (i, answer) in answers.iter().enumerate() {
            assert_eq!(answer["content"], format!("{name} {i}"), "{seen:?}");
        }
    }
    // Each name is one session, holding its own turns only, in order.
    for name in ["alpha", "beta"] {
        let shown = t.ok(&["sessions", "show", &format!("api:{name}")]);
        for i in 0..rounds {
            assert!(shown.contains(&format!("echo {name} {i}")), "{shown}");
        }
        let other = if name == "alpha" { "beta" } else { "alpha" };
        assert!(!shown.contains(other), "{shown}");
    }
    // A named conversation's next request continues its session: the model is sent its history.
    mock.forget_requests();
    let next = serve.sdk(&t, TOKEN, json!([{"kind": "chat", "session": "alpha", "messages": [user("echo again")]}]));
    assert_eq!(next[0]["content"], "again");
    let body = mock.requests()[0].body.to_string();
    assert!(body.contains("echo alpha 3"), "{body}");
    assert!(!body.contains("echo beta"), "{body}");
}

#[test]
fn a_dangerous_command_is_refused_and_the_client_is_told() {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Reply::text("I could not delete it.").into(),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    let seen = serve.sdk(&t, TOKEN, json!([{"kind": "chat", "messages": [user("Delete the build directory.")]}]));
    let content = seen[0]["content"].as_str().unwrap_or_else(|| panic!("{seen:?}"));
    assert!(content.starts_with("I could not delete it.\n\n[talaria] Refused during this turn:\n- plugin 'terminal' wanted to run `rm -rf build`"), "{content}");
    assert!(t.ws().join("build").is_dir(), "the refused command ran");
    // A request that brings its own tools is refused: talaria runs its own.
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    let refused = serve.sdk(&t, TOKEN, json!([{"kind": "chat", "messages": [user("hi")], "tools": tools}]));
    assert_eq!(refused[0]["error"], "BadRequestError", "{refused:?}");
    assert!(refused[0]["message"].as_str().is_some_and(|m| m.contains("leave `tools` out")), "{refused:?}");
    assert_eq!(mock.requests().len(), 2);
}

#[test]
fn a_client_that_goes_away_stops_its_turn() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::auto().then(Step::stall("Working on it")));
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    let body = json!({"model": "talaria", "stream": true, "messages": [user("Take your time.")]}).to_string();
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", serve.port)).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        serve.port,
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("write");
    stream.write_all(body.as_bytes()).expect("write");
    // The answer has begun (its first chunk), and the model is answering, slowly.
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).expect("read");
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    let start = Instant::now();
    while mock.requests().is_empty() {
        assert!(start.elapsed() < WAIT, "the model was never asked");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(stream);
    // The model call in flight is given up: the mock sees talaria go away.
    let start = Instant::now();
    while mock.disconnects() == 0 {
        assert!(start.elapsed() < WAIT, "the turn went on after its client left");
        std::thread::sleep(Duration::from_millis(20));
    }
    // And the server goes on serving.
    let next = serve.sdk(&t, TOKEN, json!([{"kind": "chat", "messages": [user("echo still here")]}]));
    assert_eq!(next[0]["content"], "still here", "{next:?}");
}

#[test]
fn an_a2a_agent_finds_the_card_and_completes_tasks_streamed_and_not() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "hello from the workspace").expect("notes");
    let mock = MockLlm::start(
        Script::auto()
            .then(Reply::default().tool_call("read_file", json!({"path": "notes.txt"})).usage(100, 5))
            .then(Reply::text("The notes say hello.").usage(120, 6)),
    );
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    let seen = serve.a2a(
        &t,
        TOKEN,
        json!([
            {"kind": "card"},
            {"kind": "send", "text": "What do my notes say?", "context": "team-1"},
            {"kind": "send", "text": "echo streamed answer", "context": "team-1", "stream": true},
            {"kind": "get", "task": "last"},
            {"kind": "list", "context": "team-1"},
            {"kind": "send", "text": "echo a context of its own"},
        ]),
    );
    let card = &seen[0]["card"];
    let interface = &card["supportedInterfaces"][0];
    assert_eq!(interface["url"], format!("http://127.0.0.1:{}/a2a", serve.port), "{card}");
    assert_eq!(
        (interface["protocolBinding"].as_str(), interface["protocolVersion"].as_str()),
        (Some("JSONRPC"), Some("1.0"))
    );
    assert_eq!(card["capabilities"]["streaming"], true, "{card}");

    // Not streamed: the ended task, with the tool's work in its answer.
    let first = &seen[1];
    assert_eq!(first["state"], "TASK_STATE_COMPLETED", "{seen:?}");
    assert_eq!(first["text"], "The notes say hello.", "{seen:?}");
    assert_eq!(first["task"]["contextId"], "team-1");
    assert_eq!(first["events"], json!(["task:TASK_STATE_COMPLETED"]));
    let body = mock.requests()[1].body.to_string();
    assert!(body.contains("hello from the workspace"), "the tool did not run in talaria: {body}");

    // Streamed: the task, its answer as it comes, and its end; the stream closes after it.
    let second = &seen[2];
    assert_eq!(second["text"], "streamed answer", "{seen:?}");
    let events: Vec<&str> = second["events"].as_array().expect("events").iter().filter_map(Value::as_str).collect();
    assert_eq!(events.first(), Some(&"task:TASK_STATE_WORKING"), "{events:?}");
    assert!(events.contains(&"artifact"), "{events:?}");
    assert_eq!(events.last(), Some(&"status:TASK_STATE_COMPLETED"), "{events:?}");
    assert_ne!(second["task"]["id"], first["task"]["id"]);

    // The streamed task, asked for again, and the context's tasks.
    let got = &seen[3]["task"];
    assert_eq!(got["id"], second["task"]["id"], "{seen:?}");
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(got["history"][0]["parts"][0]["text"], "echo streamed answer");
    assert_eq!(got["history"][1]["role"], "ROLE_AGENT");
    assert_eq!(got["artifacts"][0]["parts"][0]["text"], "streamed answer");
    let listed: Vec<&Value> = seen[4]["tasks"].as_array().expect("tasks").iter().map(|t| &t["id"]).collect();
    assert_eq!(listed, [&second["task"]["id"], &first["task"]["id"]], "{seen:?}");

    // A context is one session: the second task's model call had the first's turn in it.
    let body = mock.requests()[2].body.to_string();
    assert!(body.contains("What do my notes say?"), "{body}");
    let shown = t.ok(&["sessions", "show", "a2a:team-1"]);
    assert!(shown.contains("What do my notes say?") && shown.contains("echo streamed answer"), "{shown}");
    // A message without a context starts one of its own.
    let own = &seen[5]["task"];
    assert_eq!(seen[5]["text"], "a context of its own", "{seen:?}");
    let context = own["contextId"].as_str().expect("a context id");
    assert!(context.starts_with("ctx-"), "{own}");
    assert!(!mock.requests()[3].body.to_string().contains("What do my notes say?"));

    // A wrong token finds nothing, not even the card.
    let refused = serve.a2a(&t, "not-the-token", json!([{"kind": "card"}]));
    assert!(refused[0]["message"].as_str().is_some_and(|m| m.contains("401")), "{refused:?}");
    assert_eq!(mock.requests().len(), 4, "a refused request reached the model");
}

#[test]
fn an_a2a_task_is_canceled_and_bad_calls_get_a2a_errors() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::auto().then(Step::stall("Working on it")));
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    let begun = serve.a2a(
        &t,
        TOKEN,
        json!([{"kind": "send", "text": "Take your time.", "context": "slow", "immediately": true}]),
    );
    assert_eq!(begun[0]["state"], "TASK_STATE_WORKING", "{begun:?}");
    let id = begun[0]["task"]["id"].as_str().expect("a task id");
    // The model is answering, slowly.
    let start = Instant::now();
    while mock.requests().is_empty() {
        assert!(start.elapsed() < WAIT, "the model was never asked");
        std::thread::sleep(Duration::from_millis(20));
    }
    let seen = serve.a2a(
        &t,
        TOKEN,
        json!([
            {"kind": "cancel", "task": id},
            {"kind": "cancel", "task": id},
            {"kind": "get", "task": "task-never-was"},
        ]),
    );
    assert_eq!(seen[0]["task"]["status"]["state"], "TASK_STATE_CANCELED", "{seen:?}");
    assert_eq!(seen[0]["task"]["id"], id);
    // The model call in flight was given up.
    let start = Instant::now();
    while mock.disconnects() == 0 {
        assert!(start.elapsed() < WAIT, "the canceled task's turn went on");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(seen[1]["error"], "TaskNotCancelableError", "{seen:?}");
    assert_eq!(seen[2]["error"], "TaskNotFoundError", "{seen:?}");

    // What no SDK sends: another protocol version, an unknown method, a file.
    let own = format!("127.0.0.1:{}", serve.port);
    let bearer = format!("Bearer {TOKEN}");
    let call = |version: &str, body: Value| {
        let body = body.to_string();
        let headers = [
            ("Host", own.as_str()),
            ("Authorization", bearer.as_str()),
            ("A2A-Version", version),
            ("Content-Type", "application/json"),
        ];
        let (status, answer) = serve.raw("POST", "/a2a", &headers, &body);
        assert_eq!(status, 200, "{answer}");
        let json = answer.split("\r\n\r\n").nth(1).expect("a body");
        serde_json::from_str::<Value>(json).unwrap_or_else(|e| panic!("{e}: {answer}"))
    };
    let message = json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]});
    let answer =
        call("0.3", json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}));
    assert_eq!(answer["error"]["code"], -32009, "{answer}");
    assert_eq!(answer["id"], 1);
    let answer = call("1.0", json!({"jsonrpc": "2.0", "id": "x", "method": "message/send", "params": {}}));
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let file = json!({"messageId": "m2", "role": "ROLE_USER", "parts": [{"url": "https://example.com/a.pdf"}]});
    let answer = call("1.0", json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": file}}));
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    assert_eq!(mock.requests().len(), 1, "a refused call reached the model");
}

#[test]
fn the_dashboard_in_a_real_browser_logs_in_searches_and_reads_a_session() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "the zebra crossing is closed\n").expect("notes");
    let mock =
        MockLlm::start(
            Script::auto()
                .then(Reply::default().tool_call("read_file", json!({"path": "notes.txt"})))
                .then(Reply::default().tool_call(
                    "patch",
                    json!({"path": "notes.txt", "old_string": "is closed", "new_string": "is open"}),
                ))
                .then(Reply::text("The zebra crossing is open now.")),
        );
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    // Two sessions: one with tool calls and an edit, one whose text is markup that must not run.
    let markup = r#"echo <script>window.pwned=1</script><img src=x onerror="window.pwned=2">"#;
    let made = serve.sdk(
        &t,
        TOKEN,
        json!([
            {"kind": "chat", "session": "zebra-work", "messages": [user("Open the zebra crossing.")]},
            {"kind": "chat", "messages": [user(markup)]},
        ]),
    );
    assert_eq!(made[0]["content"], "The zebra crossing is open now.", "{made:?}");
    assert_eq!(std::fs::read_to_string(t.ws().join("notes.txt")).expect("notes"), "the zebra crossing is open\n");
    let login = serve.login_path();
    let seen = serve.browser(
        &t,
        json!([
            {"do": "goto", "path": "/sessions"},
            {"do": "goto", "path": login},
            {"do": "fill", "selector": "input[name=q]", "value": "zebra"},
            {"do": "click", "selector": "form.search button"},
            {"do": "click", "selector": "ol.hits a >> nth=0"},
            {"do": "eval", "js": "document.querySelector('pre.diff .add') && document.querySelector('pre.diff .add').textContent"},
            {"do": "goto", "path": "/sessions"},
            {"do": "click", "selector": "table.sessions a:has-text('window.pwned')"},
            {"do": "eval", "js": "[typeof window.pwned, document.querySelectorAll('main img, main script').length]"},
            {"do": "viewport", "width": 360, "height": 740},
            {"do": "goto", "path": "/sessions"},
            {"do": "eval", "js": "document.documentElement.scrollWidth"},
            {"do": "select", "selector": "select[name=theme]", "value": "dark"},
            {"do": "click", "selector": "form[action='/theme'] button"},
            {"do": "eval", "js": "document.documentElement.dataset.theme"},
        ]),
    );
    let text = |i: usize| seen[i]["text"].as_str().unwrap_or_else(|| panic!("step {i}: {seen:?}")).to_string();
    // Without the cookie, a page redirects to the login page, which says why.
    assert!(seen[0]["url"].as_str().is_some_and(|u| u.contains("/login")), "{seen:?}");
    assert!(text(0).contains("You are not logged in"), "{seen:?}");
    // The link logs in, and the list shows the sessions.
    assert!(seen[1]["url"].as_str().is_some_and(|u| u.ends_with("/sessions")), "{seen:?}");
    assert!(text(1).contains("api:zebra-work"), "{seen:?}");
    // Search finds the messages, and a hit opens its session with its tool calls and the diff.
    assert!(text(3).contains("match") && text(3).contains("zebra"), "{seen:?}");
    assert!(seen[4]["url"].as_str().is_some_and(|u| u.contains("/sessions/")), "{seen:?}");
    assert!(text(4).contains("Tool call: read_file") && text(4).contains("Tool call: patch"), "{seen:?}");
    assert!(text(4).contains("The zebra crossing is open now."), "{seen:?}");
    assert_eq!(seen[5]["value"], "+the zebra crossing is open", "{seen:?}");
    // Markup a session holds is shown, not run.
    assert!(text(7).contains("<script>window.pwned=1</script>"), "{seen:?}");
    assert_eq!(seen[8]["value"], json!(["undefined", 0]), "{seen:?}");
    // 360 px wide: nothing wider than the screen.
    assert!(seen[11]["value"].as_u64().is_some_and(|w| w <= 360), "{seen:?}");
    assert_eq!(seen[14]["value"], "dark", "{seen:?}");

    // Another site's page posting to the dashboard is refused, and changes nothing; so is a
    // form without the CSRF token.
    let seen = serve.browser(
        &t,
        json!([
            {"do": "goto", "path": login},
            {"do": "fresh"},
            {"do": "goto", "path": "/login"},
            {"do": "fill", "selector": "input[name=token]", "value": "not-the-token"},
            {"do": "click", "selector": "form[action='/login'] button"},
            {"do": "fill", "selector": "input[name=token]", "value": TOKEN},
            {"do": "click", "selector": "form[action='/login'] button"},
            {"do": "cross_site_post", "action": "/logout", "fields": {"csrf": "guessed"}},
            {"do": "goto", "path": "/sessions"},
            {"do": "eval", "js": "(async () => (await fetch('/logout', {method: 'POST', body: new URLSearchParams({csrf: 'wrong'})})).status)()"},
            {"do": "goto", "path": "/sessions"},
            {"do": "click", "selector": "form[action='/logout'] button"},
            {"do": "goto", "path": "/sessions"},
        ]),
    );
    let text = |i: usize| seen[i]["text"].as_str().unwrap_or_else(|| panic!("step {i}: {seen:?}")).to_string();
    // The link works once.
    assert_eq!(seen[0]["status"], 403, "{seen:?}");
    assert!(text(0).contains("used already"), "{seen:?}");
    // The token logs in; a wrong one is refused.
    assert_eq!(seen[4]["status"], 401, "{seen:?}");
    assert!(text(4).contains("not this server's token"), "{seen:?}");
    assert!(seen[6]["url"].as_str().is_some_and(|u| u.ends_with("/sessions")), "{seen:?}");
    assert_eq!(seen[7]["status"], 403, "{seen:?}");
    assert!(text(7).contains("another site"), "{seen:?}");
    assert!(seen[8]["url"].as_str().is_some_and(|u| u.ends_with("/sessions")), "still logged in: {seen:?}");
    assert_eq!(seen[9]["value"], 403, "{seen:?}");
    assert!(seen[10]["url"].as_str().is_some_and(|u| u.ends_with("/sessions")), "still logged in: {seen:?}");
    // Logging out ends it.
    assert!(seen[11]["url"].as_str().is_some_and(|u| u.contains("/login")), "{seen:?}");
    assert!(seen[12]["url"].as_str().is_some_and(|u| u.contains("/login")), "{seen:?}");
    // The failed logins were logged.
    let log = std::fs::read_to_string(&serve.log).expect("log");
    assert!(log.contains("a login link that is not (or no longer) valid"), "{log}");
    assert!(log.contains("a dashboard login with a wrong token"), "{log}");
}

#[test]
fn a_dashboard_chat_streams_and_a_dangerous_command_is_approved_from_the_page() {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Reply::text("Deleted the build directory.").paced(150).into(),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    let login = serve.login_path();
    // The other chat's id, and whether it could answer this chat's approval.
    let elsewhere = "(async () => {
        const csrf = document.getElementById('log').dataset.csrf;
        const other = await fetch('/chat/new', {method: 'POST', body: new URLSearchParams({csrf})});
        const id = document.querySelector('article.approval').dataset.approval;
        const answered = await fetch(other.url + '/approve', {method: 'POST', headers: {Accept: 'application/json'},
            body: new URLSearchParams({csrf, approval: id, decision: 'once'})});
        return [other.url.includes('/chat/'), answered.status];
    })()";
    let seen = serve.browser(
        &t,
        json!([
            {"do": "goto", "path": login},
            {"do": "goto", "path": "/chat"},
            {"do": "click", "selector": "form[action='/chat/new'] button"},
            {"do": "wait", "selector": "#log[data-live=yes]"},
            {"do": "fill", "selector": "#text", "value": "Delete the build directory."},
            {"do": "tap", "selector": "#send button:not(#stop)"},
            {"do": "wait", "selector": "article.approval button[data-decision=once]"},
            {"do": "text", "selector": "article.approval"},
            {"do": "eval", "js": elsewhere},
            {"do": "eval", "js": "document.querySelectorAll('article.approval .buttons button:not([disabled])').length"},
            {"do": "tap", "selector": "article.approval button[data-decision=once]"},
            {"do": "wait", "selector": "#log[data-turns='1']"},
            {"do": "text", "selector": "#log"},
            {"do": "eval", "js": "[Number(document.getElementById('log').dataset.deltas), document.getElementById('status').textContent]"},
        ]),
    );
    for (i, step) in seen.iter().enumerate() {
        assert!(step.get("error").is_none(), "step {i}: {seen:?}");
    }
    assert!(seen[2]["url"].as_str().is_some_and(|u| u.contains("/chat/")), "{seen:?}");
    let asked = seen[7]["text"].as_str().expect("the approval");
    assert!(asked.contains("Plugin 'terminal' wants to run") && asked.contains("rm -rf build"), "{asked}");
    // Another chat cannot answer this chat's approval, and it still waits.
    assert_eq!(seen[8]["value"], json!([true, 404]), "{seen:?}");
    assert_eq!(seen[9]["value"], 4, "{seen:?}");
    // Allowed once from the page: the command ran, and the answer streamed in.
    let shown = seen[12]["text"].as_str().expect("the log");
    assert!(shown.contains("Allowed (once)."), "{shown}");
    assert!(shown.contains("Deleted the build directory."), "{shown}");
    assert!(!t.ws().join("build").exists(), "the approved command did not run");
    assert!(seen[13]["value"][0].as_u64().is_some_and(|n| n >= 2), "the answer came in one piece: {seen:?}");
    assert_eq!(seen[13]["value"][1], "Done.", "{seen:?}");
    // The chat is a session like any other.
    let listed = t.ok(&["sessions", "list"]);
    assert!(listed.contains("Delete the build directory."), "{listed}");
}

#[test]
fn a_grant_revoked_from_the_dashboard_refuses_the_next_call() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "secret notes").expect("notes");
    let mock = MockLlm::start(
        Script::auto()
            .then(Reply::default().tool_call("read_file", json!({"path": "notes.txt"})))
            .then(Reply::text("First read."))
            .then(Reply::default().tool_call("read_file", json!({"path": "notes.txt"})))
            .then(Reply::text("Second read.")),
    );
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    // The plugin reads the file while it holds its grant.
    let first = serve.sdk(&t, TOKEN, json!([{"kind": "chat", "messages": [user("Read my notes.")]}]));
    assert_eq!(first[0]["content"], "First read.", "{first:?}");
    assert!(mock.requests()[1].body.to_string().contains("secret notes"));
    let login = serve.login_path();
    let revoke = "#plugin-files button[data-capability='fs:rw:$WORKSPACE']";
    let seen = serve.browser(
        &t,
        json!([
            {"do": "goto", "path": login},
            {"do": "goto", "path": "/plugins"},
            {"do": "text", "selector": "#plugin-files"},
            {"do": "click", "selector": revoke},
            {"do": "text", "selector": "#plugin-files"},
        ]),
    );
    for (i, step) in seen.iter().enumerate() {
        assert!(step.get("error").is_none(), "step {i}: {seen:?}");
    }
    // The page says what the grant allows, in the CLI's words, and what the revoke did.
    let before = seen[2]["text"].as_str().expect("the plugin");
    assert!(before.contains("fs:rw:$WORKSPACE may read and write files under $WORKSPACE"), "{before}");
    let said = seen[3]["text"].as_str().expect("the page");
    assert!(said.contains("Revoked fs:rw:$WORKSPACE from 'files' (bundled); it now has: -."), "{said}");
    let after = seen[4]["text"].as_str().expect("the plugin");
    assert!(after.contains("asks to read and write files under $WORKSPACE — not granted"), "{after}");
    // The next call is refused: the model is told, and never sees the file.
    mock.forget_requests();
    let next = serve.sdk(&t, TOKEN, json!([{"kind": "chat", "messages": [user("Read my notes again.")]}]));
    let requests = mock.requests();
    assert_eq!(next[0]["content"], "Second read.", "{next:?}");
    let messages = &requests.last().expect("a model call").body["messages"];
    let result = messages.as_array().and_then(|m| m.last()).expect("the tool's result");
    // Without the grant the plugin's sandbox holds no workspace: the file is not there for it.
    assert_eq!(result["role"], "tool", "{result}");
    let refused = result["content"].as_str().expect("its text");
    assert!(refused.starts_with("{\"error\":\"cannot read notes.txt: no such file or directory"), "{refused}");
    let shown = t.ok(&["plugins", "list"]);
    assert!(!shown.contains("fs:rw:$WORKSPACE"), "the CLI still sees the grant: {shown}");
}

#[test]
fn the_usage_page_charts_the_mock_s_token_counts_by_day_model_and_source() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "hello").expect("notes");
    let mock = MockLlm::start(
        Script::auto()
            .then(Reply::default().tool_call("read_file", json!({"path": "notes.txt"})).usage(100, 5))
            .then(Reply::text("It says hello.").usage(120, 6))
            .then(Reply::text("Hi from the terminal.").usage(50, 4)),
    );
    let budget = "[budget]\nmonthly_tokens = 1000000\n[budget.sources.api]\ndaily_tokens = 200\n";
    t.use_model(&mock.base_url(), "chat_completions", "input_price = 2.0\noutput_price = 10.0", budget);
    let serve = Serve::start(&t, &[]);
    // A turn through the API (two model calls), and one in the terminal.
    let api = serve.sdk(&t, TOKEN, json!([{"kind": "chat", "messages": [user("What do my notes say?")]}]));
    assert_eq!(api[0]["content"], "It says hello.", "{api:?}");
    assert!(t.ok(&["chat", "-q", "Say hi."]).contains("Hi from the terminal."));
    let login = serve.login_path();
    let seen = serve.browser(
        &t,
        json!([
            {"do": "goto", "path": login},
            {"do": "goto", "path": "/usage"},
            {"do": "text", "selector": "#totals"},
            {"do": "eval", "js": "[...document.querySelectorAll('#tokens-chart rect')].filter(r => Number(r.getAttribute('height')) > 0).map(r => r.querySelector('title').textContent)"},
            {"do": "text", "selector": "table.breakdown >> nth=1"},
            {"do": "eval", "js": "[document.querySelectorAll('#latency-chart polyline').length, document.querySelectorAll('#latency-chart circle').length]"},
            {"do": "text", "selector": "#limits"},
            {"do": "viewport", "width": 360, "height": 740},
            {"do": "eval", "js": "document.documentElement.scrollWidth"},
        ]),
    );
    for (i, step) in seen.iter().enumerate() {
        assert!(step.get("error").is_none(), "step {i}: {seen:?}");
    }
    // Every model call of each turn counts; the configured prices give the cost.
    let totals = seen[2]["text"].as_str().expect("totals");
    assert_eq!(totals, "2 turns, 270 tokens in, 15 tokens out, $0.0007.", "{seen:?}");
    // Today's bars: the day's input and output.
    let today = jiff::Zoned::now().strftime("%Y-%m-%d").to_string();
    assert_eq!(seen[3]["value"], json!([format!("{today}: 270 in"), format!("{today}: 15 out")]), "{seen:?}");
    // Per source: the API's turn and the terminal's.
    let sources = seen[4]["text"].as_str().expect("per source");
    assert!(sources.contains("api\t1\t220\t11\t$0.0006"), "{sources}");
    assert!(sources.contains("cli\t1\t50\t4\t$0.0001"), "{sources}");
    // The latency lines, and a dot each for today's p50 and p99.
    assert_eq!(seen[5]["value"], json!([2, 2]), "{seen:?}");
    assert!(seen[8]["value"].as_u64().is_some_and(|w| w <= 360), "{seen:?}");
    // The limits: the API's daily one is reached (its turn ran to its end past it).
    let limits = seen[6]["text"].as_str().expect("limits");
    assert!(limits.contains("all turns\tmonthly\t285 tokens\t1,000,000 tokens"), "{limits}");
    assert!(limits.contains("api turns\tdaily\t231 tokens (reached)\t200 tokens"), "{limits}");
}

#[test]
fn a_cron_job_added_from_the_dashboard_is_previewed_saved_and_run() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::auto().then(Reply::text("The morning answer.")));
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    let login = serve.login_path();
    let seen = serve.browser(
        &t,
        json!([
            {"do": "goto", "path": login},
            {"do": "goto", "path": "/cron"},
            {"do": "fill", "selector": "#job-name", "value": "Morning notes"},
            {"do": "fill", "selector": "#job-prompt", "value": "echo the morning answer"},
            {"do": "fill", "selector": "#job-schedule", "value": "every 2h"},
            {"do": "click", "selector": "#new-job button:not(#save)"},
            {"do": "eval", "js": "document.querySelectorAll('#preview ol.runs li').length"},
            {"do": "click", "selector": "#save"},
            {"do": "click", "selector": "table.jobs button[data-action=run]"},
            {"do": "click", "selector": "table.jobs button[data-action=pause]"},
            {"do": "click", "selector": "table.jobs a"},
        ]),
    );
    for (i, step) in seen.iter().enumerate() {
        assert!(step.get("error").is_none(), "step {i}: {seen:?}");
    }
    let text = |i: usize| seen[i]["text"].as_str().unwrap_or_else(|| panic!("step {i}: {seen:?}")).to_string();
    // Previewed with its next runs before anything is saved.
    assert!(text(5).to_lowercase().contains("preview: morning notes") && text(5).contains("every 2h"), "{seen:?}");
    assert_eq!(seen[6]["value"], 5, "{seen:?}");
    assert!(text(5).contains("No jobs yet."), "a preview saved the job: {seen:?}");
    // Saved, run now, paused.
    assert!(text(7).contains("Saved job") && text(7).contains("(Morning notes)"), "{seen:?}");
    let ran = text(8);
    assert!(ran.contains("(Morning notes): ok") && ran.contains("The morning answer."), "{ran}");
    assert!(text(9).contains("Paused"), "{seen:?}");
    assert!(text(9).contains("paused"), "{seen:?}");
    // Its history has the run, and the terminal sees the job as the page left it.
    assert!(text(10).contains("The morning answer."), "{seen:?}");
    assert!(text(10).to_lowercase().contains("ok (run by hand)"), "{seen:?}");
    let listed = t.ok(&["cron", "list"]);
    assert!(listed.contains("Morning notes") && listed.contains("paused"), "{listed}");
}

#[test]
fn a_pairing_code_is_approved_from_the_dashboard() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::auto());
    t.use_mock(&mock, "chat_completions", "");
    let serve = Serve::start(&t, &[]);
    // What the gateway does when a stranger writes to the bot (the name is theirs to choose).
    let code = talaria_store::Store::new_pairing_code();
    let store = talaria_store::Store::open(&t.home.path().join("state.db")).expect("store");
    talaria_test_support::wait(store.pairing_request("telegram", "4242", "Ana<b>\u{1b}[2J", &code)).expect("request");
    // A gateway process's last word (this test's own pid, so it counts as running), and a chat.
    let status = talaria_gateway::serve::Status {
        running: true,
        pid: std::process::id(),
        host: talaria_store::process::machine(),
        at: jiff::Timestamp::now().as_millisecond(),
        accounts: [("tg".to_string(), "polling".to_string())].into(),
        active_sessions: 1,
        busy: 0,
    };
    let word = serde_json::to_vec(&status).expect("status");
    talaria_test_support::wait(store.kv_set(talaria_gateway::serve::STATUS_SPACE, "here", &word)).expect("status");
    talaria_test_support::wait(store.kv_set(talaria_gateway::serve::SESSIONS_SPACE, "tg:1234", b"s")).expect("chat");
    // And a line in the home's log, as a command would have left it.
    std::fs::create_dir_all(t.home.path().join("logs")).expect("logs");
    std::fs::write(t.home.path().join("logs/talaria.log"), "WARN a plugin said <i>\u{1b}[31mhi\n").expect("log");
    let login = serve.login_path();
    let seen = serve.browser(
        &t,
        json!([
            {"do": "goto", "path": login},
            {"do": "goto", "path": "/gateway"},
            {"do": "text", "selector": "table.pairings"},
            {"do": "click", "selector": format!("table.pairings button[data-code='{code}']")},
            {"do": "text", "selector": "table.paired"},
            {"do": "goto", "path": "/log"},
            {"do": "text", "selector": "#log-lines"},
            {"do": "goto", "path": "/gateway"},
        ]),
    );
    for (i, step) in seen.iter().enumerate() {
        assert!(step.get("error").is_none(), "step {i}: {seen:?}");
    }
    let waiting = seen[2]["text"].as_str().expect("the waiting");
    assert!(waiting.contains(&code) && waiting.contains("4242"), "{waiting}");
    // The stranger's name is shown as text, its escape codes as such.
    assert!(waiting.contains("Ana<b>\\x1b[2J"), "{waiting}");
    let done = seen[3]["text"].as_str().expect("the page");
    assert!(done.contains("Paired Ana<b>\\x1b[2J (telegram user 4242): they are answered from now on."), "{done}");
    assert!(seen[4]["text"].as_str().is_some_and(|p| p.contains("4242")), "{seen:?}");
    assert!(talaria_test_support::wait(store.is_paired("telegram", "4242")).expect("read"));
    // The process as it last said, and the chat.
    let page = seen[7]["text"].as_str().expect("the page");
    assert!(page.contains(&format!("pid {} on", std::process::id())) && page.contains("running"), "{page}");
    assert!(page.contains("tg: polling") && page.contains("1 chats known"), "{page}");
    // The log's tail, its escape codes shown as text.
    assert_eq!(seen[6]["text"].as_str().map(str::trim_end), Some("WARN a plugin said <i>\\x1b[31mhi"), "{seen:?}");
}

#[test]
fn a_token_of_its_own_has_its_own_approvals() {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Reply::text("Not deleted.").into(),
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Reply::text("Deleted.").into(),
    ]));
    let trusted = "trusted-client-token-0123456789abcdef";
    t.use_mock(
        &mock,
        "chat_completions",
        "[[serve.tokens]]\nname = \"ci\"\nenv = \"TRUSTED_CLIENT_TOKEN\"\napprovals = \"allow\"\n",
    );
    // Without its token in the environment, the server says what is missing.
    let out = t.run(&["serve", "--listen", "127.0.0.1:0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`ci` reads its token from $TRUSTED_CLIENT_TOKEN, which is not set"), "{err}");
    let serve = Serve::start_with(&t, &[], &[("TRUSTED_CLIENT_TOKEN", trusted)]);
    // The server's own token: approvals refused, as [serve] approvals says.
    let refused = serve.sdk(&t, TOKEN, json!([{"kind": "chat", "messages": [user("Delete build.")]}]));
    assert!(refused[0]["content"].as_str().is_some_and(|c| c.contains("Refused during this turn")), "{refused:?}");
    assert!(t.ws().join("build").is_dir());
    // The trusted client's: allowed.
    let allowed = serve.sdk(&t, trusted, json!([{"kind": "chat", "messages": [user("Delete build.")]}]));
    assert_eq!(allowed[0]["content"], "Deleted.", "{allowed:?}");
    assert!(!t.ws().join("build").exists(), "the allowed command did not run");
    // An API token does not log into the dashboard.
    let seen = serve.browser(
        &t,
        json!([
            {"do": "goto", "path": "/login"},
            {"do": "fill", "selector": "input[name=token]", "value": trusted},
            {"do": "click", "selector": "form[action='/login'] button"},
        ]),
    );
    assert_eq!(seen[2]["status"], 403, "{seen:?}");
    assert!(seen[2]["text"].as_str().is_some_and(|t| t.contains("API token of [[serve.tokens]]")), "{seen:?}");
}
