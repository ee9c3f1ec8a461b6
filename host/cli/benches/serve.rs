//! Whole-process figures for `talaria serve` (the release binary) against the instant mock
//! model:
//! - the sessions page with 10,000 sessions in the store: time to its first byte and to its
//!   last, p50 / p99 over many loads on one connection (loopback; the goal is under 30 ms of
//!   server time);
//! - server-sent events: from the moment the dashboard's chat publishes a core event to the
//!   moment the page's connection reads it (each event carries its send time), p50 / p99 over
//!   many answers' deltas (goal: under 5 ms);
//! - `/v1/chat/completions`: a request's round trip, and what it adds to the turn it runs (the
//!   round trip less the turn's own duration as the store records it), against `chat -q` for
//!   the same one-shot (goal: under 2 ms added).
//!
//! Run: `cargo bench -p talaria-cli --bench serve`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{MockLlm, Script};
use talaria_protocol::Message;
use talaria_store::{NewSession, Store};

const SESSIONS: usize = 10_000;
const PAGE_LOADS: usize = 300;
const CHAT_TURNS: usize = 100;
const API_CALLS: usize = 300;
const ONE_SHOTS: usize = 20;
const TOKEN: &str = "serve-bench-token-0123456789abcdef0123456789";

struct Serve {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn start(home: &Path, workspace: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
        let log = home.join("serve.stderr");
        let child = Command::new(env!("CARGO_BIN_EXE_talaria"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .current_dir(workspace)
            .env("TALARIA_HOME", home)
            .env("TALARIA_SERVE_TOKEN", TOKEN)
            .env_remove("TALARIA_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("talaria serve");
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(60), "serve did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, port, log }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        stream
    }

    /// Log in with the printed link: the cookie.
    fn login(&self) -> String {
        let log = std::fs::read_to_string(&self.log).expect("log");
        let at = log.find("/login?key=").expect("a login link");
        let path: String = log[at..].chars().take_while(|c| !c.is_whitespace()).collect();
        let mut stream = self.connect();
        let answer = request(&mut stream, self.port, "GET", &path, &[], "");
        let cookie = answer
            .headers
            .lines()
            .find_map(|l| l.strip_prefix("set-cookie: ").or_else(|| l.strip_prefix("Set-Cookie: ")))
            .expect("a cookie");
        cookie.split(';').next().unwrap_or_default().to_string()
    }
}

struct Answer {
    status: u16,
    headers: String,
    body: Vec<u8>,
    first_byte: Duration,
    all: Duration,
}

/// One request on a kept-alive connection; the answer has a Content-Length.
fn request(
    stream: &mut TcpStream,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let start = Instant::now();
    stream.write_all(head.as_bytes()).expect("write");
    stream.write_all(body.as_bytes()).expect("write");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("status");
    let first_byte = start.elapsed();
    let status = line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut headers = String::new();
    let mut length = 0usize;
    loop {
        line.clear();
        reader.read_line(&mut line).expect("header");
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length: ") {
            length = v.trim().parse().unwrap_or(0);
        }
        headers.push_str(&line);
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("body");
    Answer { status, headers, body, first_byte, all: start.elapsed() }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn summary(name: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{name:<58} p50 {:>10}  p99 {:>10}  (n = {})",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99)),
        times.len()
    );
}

/// A home with the mock as its model.
fn home(mock: &MockLlm) -> (tempfile::TempDir, tempfile::TempDir) {
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    let config = format!(
        "[model]\nprovider = \"custom\"\nname = \"mock-model\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\n[agent]\nauto_title = false\n",
        mock.base_url()
    );
    std::fs::write(home.path().join("config.toml"), config).expect("config");
    (home, workspace)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mock = MockLlm::start(Script::auto());
    let (home, workspace) = self::home(&mock);

    // 10,000 sessions of two messages each.
    let store = Store::open(&home.path().join("state.db")).expect("store");
    let filling = Instant::now();
    runtime.block_on(async {
        for i in 0..SESSIONS {
            let id = format!("bench-{i:05}");
            let new = NewSession {
                id: id.clone(),
                source: if i % 3 == 0 { "gateway".into() } else { "cli".into() },
                model: "mock-model".into(),
                provider: "custom".into(),
                system_prompt: "You are talaria.".into(),
                parent_id: None,
                cwd: "/tmp".into(),
            };
            store.create_session(&new).await.expect("session");
            let said = [Message::user(format!("question {i} about the lisbon trip")), Message::assistant("an answer")];
            store.append_messages(&id, &said).await.expect("messages");
        }
    });
    drop(store);
    println!("store: {SESSIONS} sessions made in {:.1} s", filling.elapsed().as_secs_f64());

    let serve = Serve::start(home.path(), workspace.path());
    let cookie = serve.login();
    let mut stream = serve.connect();
    let (mut first, mut whole) = (Vec::new(), Vec::new());
    for i in 0..PAGE_LOADS + 10 {
        let answer = request(&mut stream, serve.port, "GET", "/sessions", &[("Cookie", &cookie)], "");
        assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
        if i >= 10 {
            first.push(answer.first_byte);
            whole.push(answer.all);
        }
    }
    summary("sessions page, 10,000 sessions: time to first byte", first);
    summary("sessions page, 10,000 sessions: whole page", whole);
    let mut search = Vec::new();
    for _ in 0..50 {
        search.push(request(&mut stream, serve.port, "GET", "/sessions?q=lisbon", &[("Cookie", &cookie)], "").all);
    }
    summary("sessions page, a search over 20,000 messages", search);

    // Server-sent events: the dashboard's chat, from publish to read.
    let page = request(&mut stream, serve.port, "GET", "/chat", &[("Cookie", &cookie)], "");
    let html = String::from_utf8_lossy(&page.body).to_string();
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).expect("csrf").to_string();
    let made = request(
        &mut stream,
        serve.port,
        "POST",
        "/chat/new",
        &[("Cookie", &cookie), ("Content-Type", "application/x-www-form-urlencoded")],
        &format!("csrf={csrf}"),
    );
    let chat = made
        .headers
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("location: ").map(|v| v.trim().to_string()))
        .expect("the chat's address");
    let mut events = serve.connect();
    write!(events, "GET {chat}/events HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nCookie: {cookie}\r\n\r\n", serve.port)
        .expect("events");
    let reader = BufReader::new(events.try_clone().expect("clone"));
    let (sender, received) = std::sync::mpsc::channel::<(i64, i64, String)>();
    std::thread::spawn(move || {
        for line in reader.lines() {
            let Ok(line) = line else { return };
            let Some(data) = line.strip_prefix("data: ") else { continue };
            let now = jiff::Timestamp::now().as_microsecond();
            let Ok(event) = serde_json::from_str::<Value>(data) else { continue };
            let kind = event["kind"].as_str().unwrap_or_default().to_string();
            if sender.send((now, event["t"].as_i64().unwrap_or(now), kind)).is_err() {
                return;
            }
        }
    });
    let mut latencies = Vec::new();
    for i in 0..CHAT_TURNS {
        let body = format!("csrf={csrf}&text=echo+answer+{i}");
        let sent = request(
            &mut stream,
            serve.port,
            "POST",
            &format!("{chat}/send"),
            &[
                ("Cookie", &cookie),
                ("Accept", "application/json"),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            &body,
        );
        assert_eq!(sent.status, 204);
        loop {
            let (at, t, kind) = received.recv_timeout(Duration::from_secs(30)).expect("an event");
            latencies.push(Duration::from_micros(u64::try_from(at - t).unwrap_or(0)));
            if kind == "turn_end" {
                break;
            }
        }
    }
    summary("server-sent events: core event published to read", latencies);

    // The API's added latency.
    let mut api = serve.connect();
    let mut trips = Vec::new();
    let store = Store::open_read_only(&home.path().join("state.db")).expect("store");
    for i in 0..API_CALLS + 10 {
        let body =
            json!({"model": "talaria", "messages": [{"role": "user", "content": format!("echo api {i}")}]}).to_string();
        let answer = request(
            &mut api,
            serve.port,
            "POST",
            "/v1/chat/completions",
            &[("Authorization", &format!("Bearer {TOKEN}")), ("Content-Type", "application/json")],
            &body,
        );
        assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
        if i >= 10 {
            trips.push(answer.all);
        }
    }
    // The turns' own durations, as kept (a second after the last).
    std::thread::sleep(Duration::from_millis(1500));
    let turns = runtime.block_on(store.turns_since(0)).expect("turns");
    let api_turns: Vec<i64> = turns.iter().filter(|t| t.source == "api").map(|t| t.duration_ms).collect();
    let mean_turn = api_turns.iter().sum::<i64>() as f64 / api_turns.len().max(1) as f64;
    let mean_trip = trips.iter().map(Duration::as_secs_f64).sum::<f64>() / trips.len() as f64 * 1000.0;
    summary("/v1/chat/completions round trip (instant mock)", trips);
    println!(
        "/v1/chat/completions: a turn takes {mean_turn:.2} ms on average inside talaria; the round trip adds {:.2} ms to it",
        mean_trip - mean_turn
    );
    let mut one_shots = Vec::new();
    for i in 0..ONE_SHOTS {
        let start = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_talaria"))
            .args(["chat", "-q", &format!("echo shot {i}")])
            .current_dir(workspace.path())
            .env("TALARIA_HOME", home.path())
            .env_remove("TALARIA_LOG")
            .output()
            .expect("chat -q");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        one_shots.push(start.elapsed());
    }
    summary("chat -q, the same one-shot as a process", one_shots);
}
