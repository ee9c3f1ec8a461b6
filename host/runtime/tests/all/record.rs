//! Recorded host imports (`talaria plugin test`): each import a plugin calls, refusals included,
//! comes back from `take_recorded_imports` as the exact line the author sees, and nothing is
//! recorded when recording is off.

use serde_json::json;
use talaria_protocol::{HookEvent, ToolCallEvent};
use talaria_runtime::{ComponentError, Runtime};
use talaria_test_support::{self as support, FakeServer};

use crate::{Canned, Env, call, failed, ok};

fn recording(env: &Env) -> Runtime {
    env.runtime_with(|c| c.record_imports = true)
}

/// The recorded lines since the last drain.
fn lines(rt: &Runtime) -> Vec<String> {
    rt.take_recorded_imports().iter().map(ToString::to_string).collect()
}

#[tokio::test]
async fn kv_calls_are_recorded_with_sizes_and_outcomes() {
    let env = Env::new();
    env.evil("evil", "kv = true", &["kv"]);
    let rt = recording(&env);
    assert_eq!(ok(call(&rt, "kv_set", json!({ "text": "counter=42" })).await), "stored");
    assert_eq!(lines(&rt), ["kv.set counter (2 bytes) -> ok"]);
    assert_eq!(ok(call(&rt, "kv_get", json!({ "name": "counter" })).await), "42");
    assert_eq!(ok(call(&rt, "kv_get", json!({ "name": "no such key" })).await), "<none>");
    assert_eq!(lines(&rt), ["kv.get counter -> 2 bytes", r#"kv.get "no such key" -> none"#]);
    let recorded = rt.take_recorded_imports();
    assert!(recorded.is_empty(), "drained: {recorded:?}");

    ok(call(&rt, "kv_swap", json!({ "key": "e/1", "new": "hello" })).await);
    ok(call(&rt, "kv_swap", json!({ "key": "e/1", "expected": "bye", "new": null })).await);
    ok(call(&rt, "kv_count", json!({ "key": "counter", "delta": -2 })).await);
    ok(call(&rt, "kv_list", json!({ "prefix": "e/" })).await);
    assert_eq!(
        lines(&rt),
        [
            "kv.compare-and-set e/1 (expected none, new 5 bytes) -> swapped",
            "kv.compare-and-set e/1 (expected 3 bytes, new none) -> unchanged",
            "kv.increment counter (-2) -> 40",
            r#"kv.list-with-values "e/" -> 1 key, 5 bytes"#,
        ]
    );
}

#[tokio::test]
async fn a_denied_import_is_recorded_with_the_refusal() {
    let env = Env::new();
    env.evil("evil", "", &[]);
    let rt = recording(&env);
    let e = failed(call(&rt, "kv_get", json!({ "name": "x" })).await);
    let refusal = "the kv capability is not granted to plugin 'evil' (request `kv = true` in plugin.toml and grant it: `talaria plugins grant evil kv`)";
    assert_eq!(e, format!("kv: {refusal}"));
    assert_eq!(lines(&rt), [format!("kv.get x -> denied: {refusal}")]);

    failed(call(&rt, "run", json!({ "text": "ls" })).await);
    assert_eq!(
        lines(&rt),
        [
            "process.run \"ls\" -> denied: the process capability is not granted to plugin 'evil' (grant it: `talaria plugins grant evil process`)"
        ]
    );

    assert_eq!(ok(call(&rt, "secret_exists", json!({ "name": "WEATHER_API_KEY" })).await), "false");
    assert_eq!(lines(&rt), ["secrets.exists WEATHER_API_KEY -> false (not granted)"]);
}

#[tokio::test]
async fn commands_are_recorded_with_their_exit_code() {
    let env = Env::new();
    env.evil("evil", "process = true", &["process"]);
    let rt = recording(&env);
    assert!(ok(call(&rt, "run", json!({ "text": "echo hi" })).await).starts_with("exit=Some(0)\nhi"));
    assert!(ok(call(&rt, "run", json!({ "text": "exit 3" })).await).starts_with("exit=Some(3)"));
    assert_eq!(lines(&rt), [r#"process.run "echo hi" -> exit 0"#, r#"process.run "exit 3" -> exit 3"#]);
}

#[tokio::test]
async fn http_requests_are_recorded_with_status_or_refusal() {
    let server = FakeServer::start(|_| (200, vec![], "hello".into()));
    let granted = format!("127.0.0.1:{}", server.addr.port());
    let env = Env::new();
    env.evil("evil", &format!("network = [\"{granted}\"]"), &[&format!("net:{granted}")]);
    let rt = recording(&env);
    assert_eq!(ok(call(&rt, "http_get", json!({ "url": server.url("/x?q=1") })).await), "200 hello");
    assert_eq!(lines(&rt), [format!("http GET {} -> 200", server.url("/x?q=1"))]);

    let e = failed(call(&rt, "http_get", json!({ "url": "http://127.0.0.1:9/" })).await);
    assert!(e.contains("has no network grant for 127.0.0.1:9"), "{e}");
    assert_eq!(
        lines(&rt),
        [
            "http GET http://127.0.0.1:9/ -> refused: plugin 'evil' has no network grant for 127.0.0.1:9 (grant it with `talaria plugins grant evil net:127.0.0.1:9` if its manifest requests it)"
        ]
    );
}

#[tokio::test]
async fn imports_of_api_0_1_0_are_recorded_as_0_2_0() {
    let env = Env::new();
    env.install("legacy", std::path::Path::new(support::LEGACY_V1_WASM), &support::manifest_v1("legacy", ""));
    let rt = recording(&env);
    assert_eq!(ok(call(&rt, "legacy_echo", json!({ "text": "hi" })).await), "0.1.0: hi");
    let recorded = rt.take_recorded_imports();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let line = &recorded[0];
    assert_eq!((line.plugin.as_str(), line.interface.as_str(), line.function.as_str()), ("legacy", "log", "info"));
    assert_eq!(line.to_string(), format!("log info \"echo in {}\"", env.ws().display()));
}

#[tokio::test]
async fn llm_completions_are_recorded_for_every_kind() {
    let env = Env::new();
    env.install_v2(
        "guard",
        support::PROBE_HOOK_WASM,
        &["hook"],
        "[hook]\nevents = [\"pre_tool_call\"]\n[capabilities]\nllm = true",
    );
    env.grant("guard", &["llm"]);
    let rt = env.runtime_with(|c| {
        c.record_imports = true;
        c.llm = Some(Canned::new("yes"));
    });
    let plugin = rt.plugin("guard").expect("guard").clone();
    let event = HookEvent::PreToolCall(ToolCallEvent { tool: "use_llm".into(), ..Default::default() });
    rt.hook(&plugin, &event, &env.session()).await.expect("answered");
    assert_eq!(lines(&rt), [r#"llm.complete purpose=hook-check (2 messages) -> "yes""#]);
}

#[tokio::test]
async fn nothing_is_recorded_when_recording_is_off() {
    let env = Env::new();
    env.evil("evil", "kv = true", &["kv"]);
    let rt = env.runtime();
    ok(call(&rt, "kv_set", json!({ "text": "a=b" })).await);
    assert!(rt.take_recorded_imports().is_empty());
}

#[tokio::test]
async fn a_component_lists_what_it_imports() {
    let env = Env::new();
    let rt = env.runtime();
    let wasm = std::fs::read(support::EVIL_WASM).expect("evil");
    let manifest =
        talaria_runtime::Manifest::parse(&support::manifest("evil", ""), std::path::Path::new("plugin.toml"))
            .expect("manifest");
    let imports = rt.check_component(&manifest, &wasm).expect("checked").imports;
    assert!(rt.is_compiled(&wasm));
    for wanted in ["talaria:plugin/kv@0.2.0", "talaria:plugin/process@0.2.0", "talaria:plugin/secrets@0.2.0"] {
        assert!(imports.iter().any(|i| i == wanted), "{wanted} missing from {imports:?}");
    }
    assert!(imports.iter().any(|i| i.starts_with("wasi:http/outgoing-handler@")), "{imports:?}");
    assert!(!rt.is_compiled(b"not a component"));
    let e = rt.check_component(&manifest, b"not a component").expect_err("refused");
    assert!(matches!(e, ComponentError::Invalid(_)), "{e:?}");
    assert!(e.to_string().starts_with("not a valid WebAssembly component"), "{e}");
}
