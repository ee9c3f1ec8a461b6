//! Whole-process figures for `talaria mcp serve` over stdio, the real release binary with every
//! bundled plugin available:
//! - start-up: from spawning the process to its answer to the first `tools/list` (after
//!   `initialize`), with a warm compile cache (one process has run before);
//! - a `tools/call` round trip of the bundled `read_file` with 200 bytes of arguments (a file
//!   with a long name), p50 / p90 / p99 over many calls on one connection;
//! - the same call made in-process on the plugin runtime (the tool alone), so the difference is
//!   what serving it over MCP costs; and a `ping` round trip (the protocol and the pipe alone).
//!
//! Run: `cargo bench -p talaria-cli --bench mcp`

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const STARTS: usize = 15;
const CALLS: usize = 2_000;

struct Serve {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Serve {
    fn spawn(home: &Path, workspace: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_talaria"))
            .args(["mcp", "serve"])
            .current_dir(workspace)
            .env("TALARIA_HOME", home)
            .env_remove("TALARIA_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn talaria mcp serve");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self { child, stdin, stdout, next: 1 }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        writeln!(self.stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .expect("write");
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.stdout.read_line(&mut line).expect("read") > 0, "mcp serve closed stdout");
            let v: Value = serde_json::from_str(&line).expect("json");
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method} failed: {v}");
                return v["result"].clone();
            }
        }
    }

    fn initialize(&mut self) {
        self.call(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}),
        );
        writeln!(self.stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).expect("write");
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{what:<44} p50 {:>9.1?}  p90 {:>9.1?}  p99 {:>9.1?}  (n = {})",
        percentile(&times, 0.5),
        percentile(&times, 0.9),
        percentile(&times, 0.99),
        times.len()
    );
}

fn main() {
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    // 200 bytes of arguments: {"path":"<a 180-character file name>"}.
    let name = format!("{}.txt", "n".repeat(200 - r#"{"path":".txt"}"#.len()));
    std::fs::write(workspace.path().join(&name), "one line\n").expect("file");
    let args = json!({"path": name});
    assert_eq!(args.to_string().len(), 200);

    // A first process compiles what it needs: the cache is warm after it.
    let mut warm = Serve::spawn(home.path(), workspace.path());
    warm.initialize();
    warm.call("tools/list", json!({}));
    warm.call("tools/call", json!({"name": "read_file", "arguments": args}));
    drop(warm);

    let mut starts = Vec::new();
    for _ in 0..STARTS {
        let started = Instant::now();
        let mut serve = Serve::spawn(home.path(), workspace.path());
        serve.initialize();
        let tools = serve.call("tools/list", json!({}));
        starts.push(started.elapsed());
        assert!(tools["tools"].as_array().is_some_and(|t| !t.is_empty()));
    }
    report("start-up to the first tools/list (warm)", starts);

    let mut serve = Serve::spawn(home.path(), workspace.path());
    serve.initialize();
    let mut pings = Vec::new();
    for _ in 0..CALLS {
        let started = Instant::now();
        serve.call("ping", json!({}));
        pings.push(started.elapsed());
    }
    report("ping round trip (protocol and pipe)", pings);
    let mut lists = Vec::new();
    for _ in 0..CALLS {
        let started = Instant::now();
        serve.call("tools/list", json!({}));
        lists.push(started.elapsed());
    }
    report("tools/list round trip", lists);
    let mut calls = Vec::new();
    for _ in 0..CALLS {
        let started = Instant::now();
        let result = serve.call("tools/call", json!({"name": "read_file", "arguments": args}));
        calls.push(started.elapsed());
        assert_eq!(result["isError"], false, "{result}");
    }
    report("tools/call read_file, 200-byte arguments", calls);

    // The tool alone: the same call on the plugin runtime, in this process.
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    let config = talaria_core::ConfigToml::load(home.path()).expect("config");
    let ws = workspace.path().canonicalize().expect("workspace");
    let runtime = talaria_core::unattended_runtime(home.path(), &ws, &config, false).expect("runtime");
    let mut alone = Vec::new();
    tokio.block_on(async {
        for i in 0..CALLS {
            let ctx = talaria_runtime::ToolContext {
                session_id: "bench".into(),
                call_id: format!("c{i}"),
                ..talaria_runtime::ToolContext::new("read_file", args.clone()).in_workspace(&ws)
            };
            let started = Instant::now();
            let out = runtime.call(&ctx).await.expect("read_file");
            alone.push(started.elapsed());
            assert!(out.output.contains("one line"));
        }
    });
    report("read_file alone, in-process on the runtime", alone);
}
