//! The bundled hook, memory and context plugins in the real sandbox, as the loop calls them:
//! - hook overhead per tool call: `guard` on `pre_tool_call` (one rule), `audit` on
//!   `post_tool_call` (one JSON line appended), each a fresh instance per call;
//! - memory prefetch latency: `journal` recalling from 10,000 stored turns (its instance stays
//!   alive; the first call loads the journal from the store; each later one first checks the
//!   store for turns other processes recorded), the same right after another process (a second
//!   runtime on the same home) recorded a turn, and `sync_turn`;
//! - the compressor's `should_compress`, asked before every model call.
//!
//! Figures are p50 and p99 over many calls after a warm-up (compiles are cached first).
//!
//! Run: `cargo bench -p talaria-bundled --bench extensions`

use std::time::{Duration, Instant};

use talaria_protocol::{ContextStatus, HookEvent, PluginSession, ToolCallEvent, ToolResultEvent};
use talaria_runtime::{Embedded, PluginSettings, Runtime, RuntimeConfig};

const CALLS: usize = 2_000;
const JOURNAL_TURNS: usize = 10_000;

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    (at(0.5), at(0.99))
}

fn report(name: &str, samples: Vec<Duration>) {
    let n = samples.len();
    let (p50, p99) = percentiles(samples);
    println!("{name:<52} p50 {p50:>9.1} µs   p99 {p99:>9.1} µs   ({n} calls)");
}

fn settings(toml_text: &str, enabled: bool) -> PluginSettings {
    PluginSettings {
        config: toml::from_str(toml_text).expect("settings"),
        enabled: Some(enabled),
        ..PluginSettings::default()
    }
}

fn main() {
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    let mut config = RuntimeConfig::new(home.path().to_path_buf(), workspace.path().to_path_buf());
    config
        .plugins
        .insert("guard".into(), settings("rules = [{ tool = \"write_file\", path_globs = [\"secrets/**\"] }]", true));
    config.plugins.insert("audit".into(), settings("", true));
    let bundled: Vec<Embedded> = talaria_bundled::PLUGINS.iter().map(talaria_bundled::Bundled::embedded).collect();
    let runtime = Runtime::new(config, &bundled).expect("runtime");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    let session = PluginSession {
        session_id: "20261122_120000_abcdef".into(),
        platform: "cli".into(),
        workspace: workspace.path().display().to_string(),
        model: "bench".into(),
    };
    let plugin = |name: &str| runtime.plugin(name).unwrap_or_else(|| panic!("{name} is bundled")).clone();
    println!("bundled extension plugins, real sandbox ({CALLS} calls each after a warm-up)");

    let call = ToolCallEvent {
        tool: "read_file".into(),
        plugin: "files".into(),
        arguments: r#"{"path": "src/main.rs"}"#.into(),
        call_id: "call_1".into(),
    };
    let timed = |f: &mut dyn FnMut() -> Duration| -> Vec<Duration> {
        for _ in 0..50 {
            f();
        }
        (0..CALLS).map(|_| f()).collect()
    };

    let guard = plugin("guard");
    let pre = HookEvent::PreToolCall(call.clone());
    report(
        "guard: pre_tool_call (fresh instance)",
        timed(&mut || {
            let t = Instant::now();
            rt.block_on(runtime.hook(&guard, &pre, &session)).expect("guard answers");
            t.elapsed()
        }),
    );
    let audit = plugin("audit");
    let post =
        HookEvent::PostToolCall(ToolResultEvent { call, result: "1\tfn main() {}\n".into(), ok: true, duration_ms: 1 });
    report(
        "audit: post_tool_call (fresh instance, appends a line)",
        timed(&mut || {
            let t = Instant::now();
            rt.block_on(runtime.hook(&audit, &post, &session)).expect("audit answers");
            t.elapsed()
        }),
    );

    let compressor = plugin("compressor");
    let status = ContextStatus { prompt_tokens: 12_000, context_length: 128_000, message_count: 40, compressions: 0 };
    report(
        "compressor: should_compress (fresh instance)",
        timed(&mut || {
            let t = Instant::now();
            rt.block_on(runtime.context_should_compress(&compressor, status, &session)).expect("answers");
            t.elapsed()
        }),
    );

    let journal = plugin("journal");
    let topics = ["postgres", "deploy", "parser", "kubernetes", "invoice", "latency", "rust", "tokio", "wasm", "cache"];
    let filled = Instant::now();
    for i in 0..JOURNAL_TURNS {
        let other = PluginSession { session_id: format!("20261101_0000{:02}_{i:06x}", i % 60), ..session.clone() };
        let topic = topics[i % topics.len()];
        let user = format!("turn {i}: how do we configure the {topic} settings for service {} in staging?", i % 97);
        let answer = format!(
            "For service {} the {topic} settings live in config/{topic}.toml; change port {} and redeploy.",
            i % 97,
            5000 + i % 300
        );
        rt.block_on(runtime.memory_sync_turn(&journal, &user, &answer, &other)).expect("sync");
    }
    println!(
        "{:<52} {:.1} ms for {JOURNAL_TURNS} turns ({:.1} µs a turn)",
        "journal: sync_turn while filling",
        filled.elapsed().as_secs_f64() * 1e3,
        filled.elapsed().as_secs_f64() * 1e6 / JOURNAL_TURNS as f64
    );
    // A fresh runtime: the first prefetch loads the journal from the store.
    drop(journal);
    let home2 = home.path().to_path_buf();
    let mut config = RuntimeConfig::new(home2, workspace.path().to_path_buf());
    config.plugins.insert("journal".into(), settings("", true));
    let runtime = Runtime::new(config, &bundled).expect("runtime");
    let journal = runtime.plugin("journal").expect("journal").clone();
    let cold = Instant::now();
    rt.block_on(runtime.memory_prefetch(&journal, "which port does the postgres service use in staging?", &session))
        .expect("prefetch");
    println!("{:<52} {:.2} ms", "journal: first prefetch (loads 10,000 turns)", cold.elapsed().as_secs_f64() * 1e3);
    let queries = [
        "which port does the postgres service use in staging?",
        "how did we set up the kubernetes deploy for service 12",
        "what was the latency problem with the tokio cache",
        "remind me about the invoice parser settings",
    ];
    let mut i = 0;
    report(
        "journal: prefetch over 10,000 turns (resident)",
        timed(&mut || {
            i += 1;
            let t = Instant::now();
            rt.block_on(runtime.memory_prefetch(&journal, queries[i % queries.len()], &session)).expect("prefetch");
            t.elapsed()
        }),
    );
    // A second runtime on the same home, as another talaria process would be.
    let mut config = RuntimeConfig::new(home.path().to_path_buf(), workspace.path().to_path_buf());
    config.plugins.insert("journal".into(), settings("", true));
    let elsewhere = Runtime::new(config, &bundled).expect("runtime");
    let elsewhere_journal = elsewhere.plugin("journal").expect("journal").clone();
    let other = PluginSession { session_id: "20261122_130000_other0".into(), ..session.clone() };
    let mut n = 0;
    report(
        "journal: prefetch after another process recorded a turn",
        timed(&mut || {
            n += 1;
            let user = format!("elsewhere {n}: the tokio cache latency in staging came from service {}", n % 97);
            rt.block_on(elsewhere.memory_sync_turn(&elsewhere_journal, &user, "Raised the pool size.", &other))
                .expect("sync elsewhere");
            let t = Instant::now();
            rt.block_on(runtime.memory_prefetch(&journal, queries[n % queries.len()], &session)).expect("prefetch");
            t.elapsed()
        }),
    );
    report(
        "journal: sync_turn at 12,000 to 14,000 turns",
        timed(&mut || {
            n += 1;
            let user = format!("turn {n}: how do we configure the latency settings for service {} in staging?", n % 97);
            let t = Instant::now();
            rt.block_on(runtime.memory_sync_turn(&journal, &user, "In config/latency.toml.", &other)).expect("sync");
            t.elapsed()
        }),
    );
    report(
        "journal: prefetch of a trivial message (skipped)",
        timed(&mut || {
            let t = Instant::now();
            rt.block_on(runtime.memory_prefetch(&journal, "thanks!", &session)).expect("prefetch");
            t.elapsed()
        }),
    );
}
