//! Whole-process figures for the chat front door, against an instant mock model with every
//! bundled plugin available (DESIGN.md "Speed we hold ourselves to"):
//! - `talaria --version`;
//! - `talaria chat -q` with no tool (start-up, prompt, one model call, commit, exit), and the
//!   same as the first run in a fresh home (nothing cached yet);
//! - 20 sequential tool turns in one run, and the agent's overhead per tool turn;
//! - the same with the bundled `guard` (one rule) and `audit` hooks on: hook overhead per tool call.
//!
//! The default memory provider (journal) and context engine (compressor) are on in every run.
//!
//! Each figure is the median (and p90) over several runs of the real release binary, wall time
//! and peak RSS from the kernel's accounting of the finished child (`wait4`).
//!
//! Run: `cargo bench -p talaria-cli --bench chat`
#![allow(unsafe_code)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use talaria_mock_llm::{Auto, MockLlm, Script};

const RUNS: usize = 15;

struct Sample {
    wall: Duration,
    rss_kib: i64,
}

/// Run `talaria args` to completion; its wall time and peak RSS. The kernel's peak RSS of a
/// child counts its parent's memory at the time of the spawn, so callers keep this process small
/// (the mock forgets its recorded requests after every run).
fn run(home: &Path, workspace: &Path, args: &[&str]) -> Sample {
    let start = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(args)
        .current_dir(workspace)
        .env("TALARIA_HOME", home)
        .env_remove("TALARIA_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn talaria");
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for the child we spawned and own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child; status and usage are valid for writes.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    assert_eq!(reaped, pid, "wait4 failed");
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "talaria {args:?} failed (status {status})");
    std::mem::forget(child);
    Sample { wall, rss_kib: usage.ru_maxrss }
}

fn median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (p(0.5), p(0.9))
}

fn report(name: &str, samples: &[Sample]) -> f64 {
    let (wall, wall90) = median(samples.iter().map(|s| s.wall.as_secs_f64() * 1e3).collect());
    let (rss, _) = median(samples.iter().map(|s| s.rss_kib as f64 / 1024.0).collect());
    println!("{name:<44} wall p50 {wall:>8.2} ms  p90 {wall90:>8.2} ms   peak RSS p50 {rss:>6.1} MiB");
    wall
}

fn main() {
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("small.txt"), "a small file\nwith two lines\n").expect("write");
    let mock = MockLlm::start(Script {
        auto: Some(Auto { tool: "read_file".into(), args: serde_json::json!({"path": "small.txt"}), pace_ms: None }),
        ..Script::default()
    });
    let config = format!(
        "[model]\nprovider = \"custom\"\nname = \"bench\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\n",
        mock.base_url()
    );
    std::fs::write(home.path().join("config.toml"), &config).expect("config");
    let (h, w) = (home.path(), workspace.path());
    let go = |h: &Path, args: &[&str]| {
        let sample = run(h, w, args);
        mock.forget_requests();
        sample
    };
    // Compile every bundled plugin into the cache once, as a first run would.
    go(h, &["tools", "list"]);
    go(h, &["chat", "-q", "warm up"]);

    println!("talaria chat benchmarks ({RUNS} runs each, instant mock model, every bundled plugin)");
    let version: Vec<Sample> = (0..RUNS).map(|_| go(h, &["--version"])).collect();
    report("talaria --version", &version);
    let oneshot: Vec<Sample> = (0..RUNS).map(|_| go(h, &["chat", "-q", "hello"])).collect();
    let base = report("chat -q, no tool", &oneshot);
    let fresh: Vec<Sample> = (0..5)
        .map(|_| {
            let fresh = tempfile::tempdir().expect("home");
            std::fs::write(fresh.path().join("config.toml"), &config).expect("config");
            go(fresh.path(), &["chat", "-q", "hello"])
        })
        .collect();
    let first = report("chat -q, no tool, first run in a fresh home", &fresh);
    println!("{:<44} {:>8.1} x  (goal: within 2x)", "fresh home / warm home", first / base);
    let tools: Vec<Sample> = (0..RUNS).map(|_| go(h, &["chat", "-q", "use read_file 20 times"])).collect();
    let twenty = report("chat -q, 20 sequential read_file turns", &tools);
    println!(
        "{:<44} {:>8.3} ms  ((20-turn run - no-tool run) / 20; includes the model round trip)",
        "per tool turn",
        (twenty - base) / 20.0
    );

    let hooked = tempfile::tempdir().expect("home");
    let config = format!(
        "{config}\n[plugins.guard]\nenabled = true\n[plugins.guard.config]\nrules = [{{ tool = \"write_file\", path_globs = [\"secrets/**\"] }}]\n\n[plugins.audit]\nenabled = true\n"
    );
    std::fs::write(hooked.path().join("config.toml"), config).expect("config");
    let h = hooked.path();
    go(h, &["chat", "-q", "use read_file 20 times"]);
    let tools: Vec<Sample> = (0..RUNS).map(|_| go(h, &["chat", "-q", "use read_file 20 times"])).collect();
    let with_hooks = report("same, guard + audit hooks on", &tools);
    println!(
        "{:<44} {:>8.3} ms  ((hooked run - plain run) / 20: pre_tool_call + post_tool_call)",
        "hook overhead per tool call",
        (with_hooks - twenty) / 20.0
    );
}
