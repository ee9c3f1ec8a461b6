//! Limits on what a plugin declares and logs, each tested with the flood plugin
//! (tests/plugins/flood) doing it for real: too many tools, a spec too large, a `list` that
//! hangs or panics (remembered by the component's hash until it changes), and a flood of log
//! lines carrying CR, LF, ESC and bidi overrides.
//!
//! What the flood plugin lists depends on its config, and listings are kept by the component's
//! hash, so every listing test has a compile cache of its own.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_runtime::{PluginSettings, Runtime, RuntimeConfig};
use talaria_test_support as support;

use crate::{Env, call, ok};

/// The refusal the index reports for plugin `flood`.
const UNAVAILABLE: &str = "tool unavailable: ";
const REMEMBERED: &str = " (remembered from an earlier start: it is tried again when the plugin's component or the \
                          [sandbox] limits change)";

/// A home with the flood plugin installed, and a compile cache of its own.
struct Flood {
    env: Env,
    cache: tempfile::TempDir,
}

impl Flood {
    fn new() -> Self {
        let env = Env::new();
        env.install_v2("flood", support::FLOOD_WASM, &["tool"], "");
        Self { env, cache: tempfile::tempdir().expect("cache") }
    }

    /// A runtime whose flood plugin has `config` (TOML) and whose limits `change` sets.
    fn runtime(&self, config: &str, change: impl FnOnce(&mut RuntimeConfig)) -> Runtime {
        self.env.runtime_with(|c| {
            c.cache_dir = Some(self.cache.path().to_path_buf());
            let config = toml::from_str(config).expect("flood config");
            c.plugins.insert("flood".into(), PluginSettings { config, ..PluginSettings::default() });
            change(c);
        })
    }

    fn wasm(&self) -> PathBuf {
        self.env.home.path().join("plugins/flood/plugin.wasm")
    }
}

fn unchanged(_: &mut RuntimeConfig) {}

/// The flood plugin's tool names, or the one problem reported for it.
async fn listing(rt: &Runtime) -> Result<Vec<String>, String> {
    let (tools, problems) = rt.tools().await;
    let names: Vec<String> = tools.into_iter().filter(|t| t.plugin == "flood").map(|t| t.name.clone()).collect();
    match problems.as_slice() {
        [] => Ok(names),
        [p] if names.is_empty() && p.plugin.as_deref() == Some("flood") => Err(p.message.clone()),
        other => panic!("unexpected problems {other:?} beside tools {names:?}"),
    }
}

fn too_many(count: usize) -> String {
    format!(
        "{UNAVAILABLE}plugin 'flood' lists {count} tools; a plugin may offer at most 128 (raise `max_tools_per_plugin` \
         under [sandbox] in config.toml)"
    )
}

#[tokio::test]
async fn two_hundred_thousand_tools_are_refused_fast_and_not_listed_again() {
    let flood = Flood::new();
    let started = Instant::now();
    let first = listing(&flood.runtime("tools = 200000", unchanged)).await;
    let took = started.elapsed();
    assert_eq!(first, Err(too_many(200_000)));
    // The duplicate check was quadratic: minutes. Loosely bounded for a loaded debug build.
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // The next start does not run the plugin again: it would list 3 tools now.
    let again = listing(&flood.runtime("tools = 3", unchanged)).await;
    assert_eq!(again, Err(format!("{}{REMEMBERED}", too_many(200_000))));
}

#[tokio::test]
async fn a_plugin_may_list_128_tools_but_not_129() {
    let flood = Flood::new();
    let tools = listing(&flood.runtime("tools = 128", unchanged)).await.expect("128 tools");
    assert_eq!(tools.len(), 128);
    assert_eq!((tools[0].as_str(), tools[127].as_str()), ("shout", "t127"));

    let flood = Flood::new();
    assert_eq!(listing(&flood.runtime("tools = 129", unchanged)).await, Err(too_many(129)));
    // Raising the limit tries the remembered refusal again, and the success replaces it: the
    // start after that reads the 129 tools kept, without running the plugin (which would
    // panic now).
    let raised = |c: &mut RuntimeConfig| c.limits.max_tools_per_plugin = 200;
    assert_eq!(listing(&flood.runtime("tools = 129", raised)).await.map(|t| t.len()), Ok(129));
    assert_eq!(listing(&flood.runtime("fail_list = true", raised)).await.map(|t| t.len()), Ok(129));
    // Lowering it again holds the kept specs to it.
    assert_eq!(listing(&flood.runtime("tools = 129", unchanged)).await, Err(too_many(129)));
}

#[tokio::test]
async fn a_spec_over_64_kib_is_refused_and_the_limit_is_configurable() {
    let flood = Flood::new();
    let bytes = 65 * 1024;
    assert_eq!(
        listing(&flood.runtime(&format!("spec_bytes = {bytes}"), unchanged)).await,
        Err(format!(
            "{UNAVAILABLE}plugin 'flood' tool `big`: its spec (name, description and parameters) is 66560 bytes; a \
             spec may be at most 64 KiB (raise `max_spec_kb` under [sandbox] in config.toml)"
        ))
    );
    let raised = |c: &mut RuntimeConfig| c.limits.max_spec_bytes = 128 * 1024;
    assert_eq!(
        listing(&flood.runtime(&format!("spec_bytes = {bytes}"), raised)).await,
        Ok(vec!["shout".to_string(), "big".to_string()])
    );

    let flood = Flood::new();
    assert_eq!(
        listing(&flood.runtime(&format!("spec_bytes = {}", 64 * 1024), unchanged)).await.map(|t| t.len()),
        Ok(2),
        "exactly 64 KiB fits"
    );
}

#[tokio::test]
async fn a_tool_listed_twice_is_refused() {
    let flood = Flood::new();
    assert_eq!(
        listing(&flood.runtime("tools = 100\nduplicate = true", unchanged)).await,
        Err(format!("{UNAVAILABLE}plugin 'flood' tool `t1`: listed twice"))
    );
}

/// Append a custom section to a component: the same code, a new sha256.
fn change_component(wasm: &Path) {
    let mut bytes = std::fs::read(wasm).expect("read component");
    // Section id 0 (custom), 5 bytes: a 4-byte name, no payload.
    bytes.extend_from_slice(&[0, 5, 4, b'n', b'o', b't', b'e']);
    std::fs::write(wasm, bytes).expect("write component");
}

#[tokio::test]
async fn a_hanging_list_is_remembered_until_the_component_changes() {
    let _spin = crate::SPINNING.lock().await;
    let flood = Flood::new();
    let started = Instant::now();
    let first = listing(&flood.runtime("hang_list = true", unchanged)).await.expect_err("it hangs");
    assert!(started.elapsed() >= Duration::from_secs(5), "stopped at its 5 s deadline");
    let prefix = "tool unavailable: plugin 'flood' could not list its tools: plugin crashed: plugin 'flood' exceeded \
                  its 5s deadline and was stopped after ";
    assert!(first.starts_with(prefix), "{first}");

    // The next start reports it at once, without running the plugin (which would list now).
    let started = Instant::now();
    let again = listing(&flood.runtime("", unchanged)).await;
    let took = started.elapsed();
    assert_eq!(again, Err(format!("{first}{REMEMBERED}")));
    assert!(took < Duration::from_secs(1), "took {took:?}: well under the 5 s deadline");

    // A changed component is tried afresh.
    change_component(&flood.wasm());
    assert_eq!(
        listing(&flood.runtime("", unchanged)).await,
        Ok(vec!["shout".to_string(), "t1".to_string(), "t2".to_string()])
    );
}

#[tokio::test]
async fn a_panicking_list_is_remembered() {
    let flood = Flood::new();
    let panicked = "tool unavailable: plugin 'flood' could not list its tools: plugin crashed: plugin 'flood' \
                    panicked: list failed on purpose";
    assert_eq!(listing(&flood.runtime("fail_list = true", unchanged)).await, Err(panicked.to_string()));
    assert_eq!(listing(&flood.runtime("", unchanged)).await, Err(format!("{panicked}{REMEMBERED}")));
}

/// Everything logged on this thread while it is held, as the terminal would show it.
struct Captured {
    text: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Captured {
    fn start() -> Self {
        let text = Arc::new(Mutex::new(Vec::new()));
        let sink = text.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        Self { text, _guard: tracing::subscriber::set_default(subscriber) }
    }

    fn lines(&self) -> Vec<String> {
        let text = self.text.lock().expect("log text");
        String::from_utf8_lossy(&text).lines().map(str::to_string).collect()
    }
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log text").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What the flood plugin's line `i` looks like in the log: one line, its controls escaped.
fn shouted(i: usize) -> String {
    format!("line {i}\\r\\nINFO host: all good\\x1b[2J\\u{{202e}}gnp.exe")
}

/// The index of a line the flood plugin logged, if `line` is one (as the log shows it).
fn shouted_index(line: &str) -> Option<usize> {
    let rest = line.strip_prefix("line ")?;
    let i: usize = rest[..rest.find(|c: char| !c.is_ascii_digit())?].parse().ok()?;
    Some(i)
}

#[tokio::test(flavor = "current_thread")]
async fn a_log_flood_is_rate_limited_and_its_control_characters_escaped() {
    let flood = Flood::new();
    let rt = flood.runtime("", |c| c.record_imports = true);
    rt.tools().await;
    rt.take_recorded_imports();
    let log = Captured::start();
    let started = Instant::now();
    assert_eq!(ok(call(&rt, "shout", json!({ "lines": 10_000 })).await), "shouted 10000 lines");
    let took = started.elapsed();
    // A token comes back every 50 ms: the next call's line gets through, after the note.
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(ok(call(&rt, "shout", json!({ "lines": 1 })).await), "shouted 1 lines");

    let lines = log.lines();
    let (mut passed, mut dropped, mut notes) = (Vec::new(), 0, 0);
    for line in &lines {
        let line = line.trim_start();
        if let Some(count) = line
            .strip_prefix("WARN ")
            .and_then(|l| l.strip_suffix(" log lines from plugin 'flood' were dropped (rate limit) plugin=\"flood\""))
        {
            dropped += count.parse::<usize>().expect("a count");
            notes += 1;
            continue;
        }
        // Anything else is one of the plugin's lines, whole: no raw newline forged another.
        let text = line.strip_prefix("INFO ").and_then(|l| l.strip_suffix(" plugin=\"flood\""));
        let i = text.and_then(shouted_index).unwrap_or_else(|| panic!("not a line of the plugin's: {line:?}"));
        assert_eq!(text, Some(shouted(i).as_str()));
        passed.push(i);
    }
    assert_eq!(passed[..50], (0..50).collect::<Vec<_>>()[..], "the burst gets through");
    assert_eq!(passed.last(), Some(&0), "the second call's line");
    assert!(lines[lines.len() - 2].contains("were dropped (rate limit)"), "a note comes before it: {lines:#?}");
    assert_eq!(passed.len() + dropped, 10_001, "every line got through or was counted");
    // The burst, and at most the 20 a second that came back during the call (and one after).
    let allowed = 50 + (20.0 * took.as_secs_f64()).ceil() as usize + 1;
    assert!(passed.len() <= allowed, "{} lines got through in {took:?}", passed.len());
    assert!(notes <= passed.len() - 50, "one note at most per line after the burst");
    assert!(!lines.concat().contains(['\r', '\x1b', '\u{202e}']), "no raw control reached the log");

    // The recorded imports show the same escaped text, and say which lines were dropped.
    let recorded: Vec<String> = rt.take_recorded_imports().iter().map(ToString::to_string).collect();
    assert_eq!(recorded.len(), 1001, "the recorder keeps 1000 and counts the rest");
    for (i, entry) in recorded[..1000].iter().enumerate() {
        let fate = if passed.contains(&i) { "" } else { " -> dropped (rate limit)" };
        assert_eq!(entry, &format!("log info \"{}\"{fate}", shouted(i)));
    }
}

/// A log line carrying a known secret value has it redacted before it is logged or recorded.
#[tokio::test(flavor = "current_thread")]
async fn a_log_line_never_carries_a_secret_value() {
    let flood = Flood::new();
    let rt = flood.runtime("", |c| {
        c.record_imports = true;
        c.secrets = Some(talaria_runtime::Secrets::from_pairs([("LOG_SECRET", "INFO host: all good")]));
    });
    rt.tools().await;
    rt.take_recorded_imports();
    let log = Captured::start();
    assert_eq!(ok(call(&rt, "shout", json!({ "lines": 1 })).await), "shouted 1 lines");
    let logged = log.lines().join("\n");
    assert!(logged.contains("line 0\\r\\n[secret LOG_SECRET]\\x1b[2J"), "{logged}");
    assert!(!logged.contains("all good"), "{logged}");
    let recorded: Vec<String> = rt.take_recorded_imports().iter().map(ToString::to_string).collect();
    assert!(
        recorded.iter().any(|r| r.contains("[secret LOG_SECRET]")) && !recorded.join("").contains("all good"),
        "{recorded:?}"
    );
}
