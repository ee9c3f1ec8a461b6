//! Plugin runtime figures for every bundled plugin: cold compile, load from the compile cache,
//! a call into a fresh sandboxed instance with 200-byte and 100 KB arguments (p50/p99), and
//! the process RSS with all plugins loaded. Then the 0.2.0 kinds: the overhead of a hook call
//! (a hook plugin answering `proceed` to `pre_tool_call`, fresh instance per call) and of a
//! memory provider's `prefetch` on its resident instance (p50/p99).
//!
//! Run: `cargo bench -p talaria-runtime --bench plugins` (release build). Prints a table; asserts
//! nothing. `BENCH_CALLS=N` sets the calls per measurement (default 2000).

use std::sync::Arc;
use std::time::{Duration, Instant};

use talaria_protocol::{HookDecision, HookEvent, PluginSession, ToolCallEvent};
use talaria_runtime::{CacheOutcome, Embedded, Kind, Plugin, Runtime, RuntimeConfig, ToolContext};
use talaria_test_support as support;

fn main() {
    if let Some(home) = std::env::var_os("BENCH_RSS_CHILD") {
        return rss_child(home.into());
    }
    let calls: usize = std::env::var("BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    let bundled: Vec<Embedded> = talaria_bundled::PLUGINS
        .iter()
        .map(|b| Embedded { manifest: b.manifest, wasm: b.wasm, sha256: b.sha256, precompiled: None })
        .collect();
    let runtime = || {
        let config = RuntimeConfig::new(home.path().to_path_buf(), workspace.path().to_path_buf());
        Runtime::new(config, &bundled).expect("runtime")
    };

    println!("talaria plugin runtime benchmark ({calls} calls per measurement)\n");
    println!(
        "{:<10} {:>9} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "plugin", "wasm KB", "compile ms", "cache ms", "200B p50 µs", "200B p99 µs", "100KB p50 µs"
    );
    let cold = runtime();
    let small = args_of(200);
    let large = args_of(100 * 1024);
    let mut p99_large = Vec::new();
    for plugin in cold.plugins().iter().filter(|p| is_tool(p)) {
        let compile = match cold.prepare(plugin) {
            Ok(Some((CacheOutcome::Compiled, took))) => took,
            other => panic!("{}: expected a cold compile, got {other:?}", plugin.name()),
        };
        let mut loads = Vec::new();
        for _ in 0..20 {
            let warm = runtime();
            let p = warm.plugin(plugin.name()).expect("plugin").clone();
            match warm.prepare(&p) {
                Ok(Some((CacheOutcome::Hit, took))) => loads.push(took),
                other => panic!("{}: expected a cache hit, got {other:?}", plugin.name()),
            }
        }
        let small_t = tokio.block_on(time_calls(&cold, plugin, &small, calls));
        let large_t = tokio.block_on(time_calls(&cold, plugin, &large, calls / 10));
        p99_large.push((plugin.name().to_string(), pct(&large_t, 99)));
        let size = plugin_size(&bundled, plugin.name());
        println!(
            "{:<10} {:>9} {:>12.1} {:>12.3} {:>12.1} {:>12.1} {:>12.1}",
            plugin.name(),
            size / 1024,
            ms(compile),
            ms(pct(&loads, 50)),
            us(pct(&small_t, 50)),
            us(pct(&small_t, 99)),
            us(pct(&large_t, 50)),
        );
    }
    println!();
    for (name, p99) in p99_large {
        println!("{name:<10} 100KB p99 µs: {:.1}", us(p99));
    }
    // Measured in a fresh process: this one's allocator still holds what the runs above used.
    let child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .env("BENCH_RSS_CHILD", home.path())
        .output()
        .expect("rss child");
    print!("\n{}", String::from_utf8_lossy(&child.stdout));
    println!("\nA call = fresh Store + instantiate from the pooled InstancePre + `tools.call` with the args + drop.");
    println!("The benchmark calls a tool name the plugin does not have, so the figures are the sandbox's own cost.");
    tokio.block_on(kinds(calls));
}

/// Hook and resident memory-provider call overhead, with the test probes (tests/plugins).
async fn kinds(calls: usize) {
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    let hook = support::manifest_v2("hook", &["hook"], "[hook]\nevents = [\"pre_tool_call\"]");
    support::install(home.path(), "hook", std::path::Path::new(support::PROBE_HOOK_WASM), &hook);
    let memory = support::manifest_v2("memory", &["memory"], "");
    support::install(home.path(), "memory", std::path::Path::new(support::PROBE_MEMORY_WASM), &memory);
    let rt = Runtime::new(RuntimeConfig::new(home.path().to_path_buf(), workspace.path().to_path_buf()), &[])
        .expect("runtime");
    let session = PluginSession {
        session_id: "bench".into(),
        platform: "cli".into(),
        workspace: workspace.path().display().to_string(),
        model: "m".into(),
    };
    let (hook, memory) = (rt.plugin("hook").expect("hook").clone(), rt.plugin("memory").expect("memory").clone());
    let event = HookEvent::PreToolCall(ToolCallEvent {
        tool: "read_file".into(),
        plugin: "files".into(),
        arguments: r#"{"path":"README.md"}"#.into(),
        call_id: "c1".into(),
    });
    let mut hook_times = Vec::with_capacity(calls);
    for _ in 0..calls.max(10) + 1 {
        let started = Instant::now();
        let decision = rt.hook(&hook, &event, &session).await;
        hook_times.push(started.elapsed());
        assert_eq!(decision, Ok(HookDecision::Proceed));
    }
    hook_times.remove(0); // the first call compiled the component
    let first = Instant::now();
    rt.memory_prefetch(&memory, "warm up", &session).await.expect("prefetch");
    let first = first.elapsed();
    let mut prefetch_times = Vec::with_capacity(calls);
    for _ in 0..calls.max(10) {
        let started = Instant::now();
        let recall = rt.memory_prefetch(&memory, "what did we decide about the cache?", &session).await;
        prefetch_times.push(started.elapsed());
        assert!(recall.is_ok_and(|r| r.starts_with("call ")));
    }
    println!("\nplugin kinds (API 0.2.0), {calls} calls each:");
    println!(
        "hook pre_tool_call -> proceed, fresh instance:  p50 {:>8.1} µs   p99 {:>8.1} µs",
        us(pct(&hook_times, 50)),
        us(pct(&hook_times, 99))
    );
    println!(
        "memory prefetch, resident instance:           p50 {:>8.1} µs   p99 {:>8.1} µs   (first call, compile + instantiate: {:.1} ms)",
        us(pct(&prefetch_times, 50)),
        us(pct(&prefetch_times, 99)),
        ms(first)
    );
}

/// In a fresh process: load every bundled plugin from the warm cache, call each once, report RSS.
fn rss_child(home: std::path::PathBuf) {
    let (before, _) = rss_kb();
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    let bundled: Vec<Embedded> = talaria_bundled::PLUGINS
        .iter()
        .map(|b| Embedded { manifest: b.manifest, wasm: b.wasm, sha256: b.sha256, precompiled: None })
        .collect();
    let rt = Runtime::new(RuntimeConfig::new(home.clone(), home), &bundled).expect("runtime");
    let tools: Vec<_> = rt.plugins().iter().filter(|p| is_tool(p)).collect();
    for p in &tools {
        let _ = tokio.block_on(rt.call_plugin(p, &ToolContext::new("__bench_no_such_tool__", serde_json::json!({}))));
    }
    let (after, peak) = rss_kb();
    println!(
        "RSS in a fresh process: {before} KB at start, {after} KB with all {} bundled tool plugins loaded from the cache and called once (peak {peak} KB)",
        tools.len()
    );
}

/// The bundled plugins the tool table measures: enabled tool plugins.
fn is_tool(plugin: &Plugin) -> bool {
    plugin.enabled && plugin.is(Kind::Tool)
}

fn args_of(bytes: usize) -> serde_json::Value {
    serde_json::json!({ "pad": "x".repeat(bytes.saturating_sub(12)) })
}

async fn time_calls(rt: &Runtime, plugin: &Arc<Plugin>, args: &serde_json::Value, n: usize) -> Vec<Duration> {
    let ctx = ToolContext::new("__bench_no_such_tool__", args.clone());
    let mut times = Vec::with_capacity(n);
    for _ in 0..n.max(10) {
        let started = Instant::now();
        let result = rt.call_plugin(plugin, &ctx).await;
        times.push(started.elapsed());
        assert!(matches!(result, Err(talaria_protocol::ToolError::UnknownTool(_))), "{}: {result:?}", plugin.name());
    }
    times
}

fn pct(times: &[Duration], p: usize) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn plugin_size(bundled: &[Embedded], name: &str) -> usize {
    bundled.iter().find(|b| b.manifest.contains(&format!("name = \"{name}\""))).map_or(0, |b| b.wasm.len())
}

fn rss_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
