//! Whole-process figures for `talaria acp`, the editor front door, against an instant mock
//! model with every bundled plugin available:
//! - `initialize`, from spawning the process to its answer (what an editor waits for);
//! - `session/new`, request to answer;
//! - a prompt with no tool, request to its `end_turn` answer;
//! - the memory an idle conversation holds: resident memory of one process before and after
//!   opening 50 sessions, divided by 50.
//!
//! Each latency is the median (and p90) over several processes of the real release binary.
//!
//! Run: `cargo bench -p talaria-cli --bench acp`

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{MockLlm, Script};

const RUNS: usize = 15;
const IDLE_SESSIONS: usize = 50;

struct Acp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Acp {
    fn spawn(home: &Path, workspace: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_talaria"))
            .arg("acp")
            .current_dir(workspace)
            .env("TALARIA_HOME", home)
            .env_remove("TALARIA_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn talaria acp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self { child, stdin, stdout, next: 0 }
    }

    /// Send a request and read until its answer (notifications before it are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").expect("write");
        loop {
            let mut answer = String::new();
            assert!(self.stdout.read_line(&mut answer).expect("read") > 0, "talaria acp closed stdout");
            let v: Value = serde_json::from_str(&answer).expect("json");
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method} failed: {v}");
                return v["result"].clone();
            }
        }
    }

    fn close(mut self) {
        drop(self.stdin);
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "talaria acp exited with {status}");
        drop(self.stdout);
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .expect("VmRSS")
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(name: &str, mut v: Vec<f64>) {
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    println!("{name:<40} p50 {:>8.2} ms  p90 {:>8.2} ms", p(0.5), p(0.9));
}

fn main() {
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    let cwd = workspace.path().canonicalize().expect("canonical");
    let mock = MockLlm::start(Script { auto: Some(talaria_mock_llm::Auto::default()), ..Script::default() });
    let config = format!(
        "[model]\nprovider = \"custom\"\nname = \"bench\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\n",
        mock.base_url()
    );
    std::fs::write(home.path().join("config.toml"), config).expect("config");
    let init = json!({"protocolVersion": 1, "clientCapabilities": {}});
    let new = json!({"cwd": cwd, "mcpServers": []});

    // Warm up: compile the bundled plugins into the cache, as a first run would.
    let mut warm = Acp::spawn(home.path(), workspace.path());
    warm.call("initialize", init.clone());
    let s = warm.call("session/new", new.clone());
    warm.call("session/prompt", json!({"sessionId": s["sessionId"], "prompt": [{"type": "text", "text": "hi"}]}));
    warm.close();

    println!("talaria acp benchmarks ({RUNS} processes, instant mock model, every bundled plugin)");
    let (mut inits, mut news, mut prompts) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let spawned = Instant::now();
        let mut acp = Acp::spawn(home.path(), workspace.path());
        acp.call("initialize", init.clone());
        inits.push(ms(spawned.elapsed()));
        let t = Instant::now();
        let s = acp.call("session/new", new.clone());
        news.push(ms(t.elapsed()));
        let t = Instant::now();
        let r = acp.call(
            "session/prompt",
            json!({"sessionId": s["sessionId"], "prompt": [{"type": "text", "text": "hello"}]}),
        );
        prompts.push(ms(t.elapsed()));
        assert_eq!(r["stopReason"], "end_turn");
        acp.close();
        mock.forget_requests();
    }
    report("initialize (spawn to answer)", inits);
    report("session/new", news);
    report("session/prompt to end_turn, no tool", prompts);

    let mut acp = Acp::spawn(home.path(), workspace.path());
    acp.call("initialize", init);
    let first = acp.call("session/new", new.clone());
    acp.call("session/prompt", json!({"sessionId": first["sessionId"], "prompt": [{"type": "text", "text": "hi"}]}));
    let before = acp.rss_kib();
    for _ in 0..IDLE_SESSIONS {
        acp.call("session/new", new.clone());
    }
    let after = acp.rss_kib();
    println!(
        "{:<40} {:>8.1} KiB  (RSS {:.1} -> {:.1} MiB over {IDLE_SESSIONS} sessions)",
        "memory per idle conversation",
        after.saturating_sub(before) as f64 / IDLE_SESSIONS as f64,
        before as f64 / 1024.0,
        after as f64 / 1024.0
    );
    acp.close();
}
