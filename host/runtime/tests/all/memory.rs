//! Memory providers: one resident instance kept across calls and made again after a trap or a
//! deadline; every call reaches the provider; its tools still run in fresh instances.

use serde_json::json;
use talaria_protocol::{Message, ToolCall};
use talaria_runtime::{PluginError, Runtime};
use talaria_test_support as support;

use crate::{Env, call, ok};

fn journal(rest: &str) -> Env {
    journal_granted(rest, &["kv"])
}

/// Memory provider `journal` requesting kv (and `rest`), granted `grants`.
fn journal_granted(rest: &str, grants: &[&str]) -> Env {
    let env = Env::new();
    env.install_v2("journal", support::PROBE_MEMORY_WASM, &["memory"], &format!("[capabilities]\nkv = true\n{rest}"));
    env.grant("journal", grants);
    env
}

async fn prefetch(env: &Env, rt: &Runtime, query: &str) -> Result<String, PluginError> {
    let plugin = rt.plugin("journal").expect("journal").clone();
    rt.memory_prefetch(&plugin, query, &env.session()).await
}

#[tokio::test]
async fn the_instance_keeps_its_state_and_is_made_again_after_a_trap() {
    // It can read the workspace, so an instance serves only the workspace it was made for.
    let env =
        journal_granted(r#"filesystem = [{ path = "$WORKSPACE", access = "read" }]"#, &["kv", "fs:ro:$WORKSPACE"]);
    let rt = env.runtime();
    let ws = env.ws().display().to_string();
    assert_eq!(prefetch(&env, &rt, "a").await, Ok(format!("call 1 in {ws} for a")));
    assert_eq!(prefetch(&env, &rt, "b").await, Ok(format!("call 2 in {ws} for b")));
    // The plugin's own error keeps the instance.
    assert_eq!(
        prefetch(&env, &rt, "fail").await,
        Err(PluginError::Failed("memory plugin 'journal' failed: asked to fail".into()))
    );
    assert_eq!(prefetch(&env, &rt, "c").await, Ok(format!("call 4 in {ws} for c")));
    // A trap drops it; the next call gets a new one.
    assert_eq!(
        prefetch(&env, &rt, "panic").await,
        Err(PluginError::Crashed("memory plugin 'journal' panicked: memory panicked on purpose".into()))
    );
    assert_eq!(prefetch(&env, &rt, "d").await, Ok(format!("call 1 in {ws} for d")));
    // Another workspace gets an instance of its own.
    let other = tempfile::tempdir().expect("other workspace");
    let plugin = rt.plugin("journal").expect("journal").clone();
    let mut session = env.session();
    session.workspace = other.path().display().to_string();
    let out = rt.memory_prefetch(&plugin, "e", &session).await.expect("recall");
    assert_eq!(out, format!("call 1 in {} for e", other.path().display()));
}

/// A provider that nothing ties to a workspace (kv only) keeps one instance for all of them: a
/// gateway's chats each have their own workspace, and a provider's in-memory index must not be
/// built again for every chat.
#[tokio::test]
async fn an_instance_tied_to_no_workspace_serves_every_workspace() {
    let env = journal("");
    let rt = env.runtime();
    let ws = env.ws().display().to_string();
    assert_eq!(prefetch(&env, &rt, "a").await, Ok(format!("call 1 in {ws} for a")));
    let other = tempfile::tempdir().expect("other workspace");
    let plugin = rt.plugin("journal").expect("journal").clone();
    let mut session = env.session();
    session.workspace = other.path().display().to_string();
    let out = rt.memory_prefetch(&plugin, "b", &session).await.expect("recall");
    assert_eq!(out, format!("call 2 in {} for b", other.path().display()));
    assert_eq!(prefetch(&env, &rt, "c").await, Ok(format!("call 3 in {ws} for c")));
}

#[tokio::test]
async fn a_hanging_call_is_stopped_and_the_instance_made_again() {
    let env = journal("[limits]\ntimeout_secs = 1");
    let rt = env.runtime();
    assert!(prefetch(&env, &rt, "a").await.expect("first").starts_with("call 1 "));
    let _spinning = crate::SPINNING.lock().await;
    let started = std::time::Instant::now();
    let e = prefetch(&env, &rt, "hang").await.expect_err("stopped");
    assert!(matches!(e, PluginError::TimedOut(_)), "{e:?}");
    assert!(e.to_string().starts_with("memory plugin 'journal' did not answer within 1s and was stopped after"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
    assert!(prefetch(&env, &rt, "b").await.expect("after").starts_with("call 1 "), "a new instance");
}

#[tokio::test]
async fn every_call_reaches_the_provider_and_its_tools_run_fresh() {
    let env = journal("");
    let rt = env.runtime();
    let plugin = rt.plugin("journal").expect("journal").clone();
    let session = env.session();
    rt.memory_sync_turn(&plugin, "hi", "hello", &session).await.expect("sync");
    rt.memory_sync_turn(&plugin, "and?", "done", &session).await.expect("sync");
    assert_eq!(rt.memory_prompt_block(&plugin, &session).await, Ok("memory for s1: 2 turns".into()));
    let history = vec![
        Message::user("read it"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall::new("c1", "read_file", "{}")],
            reasoning: Some("look first".into()),
            extra: None,
        },
        Message::tool("c1", "read_file", "text"),
    ];
    assert_eq!(
        rt.memory_pre_compress(&plugin, &history, &session).await,
        Ok("3 messages (user,assistant,tool), 1 with extra".into())
    );
    rt.memory_session_end(&plugin, &history, &session).await.expect("end");
    rt.memory_on_write(&plugin, "add", "memory", "likes tea", &session).await.expect("write");
    assert_eq!(prefetch(&env, &rt, "q").await.map(|t| t.starts_with("call 1 ")), Ok(true));
    // Its tool runs in a fresh instance: it sees kv, not the resident instance's count.
    assert_eq!(ok(call(&rt, "recall", json!({})).await), "calls=0 turns=hi => hello | and? => done");
    assert_eq!(ok(call(&rt, "recall", json!({ "key": "ended:s1" })).await), "user,assistant,tool");
    assert_eq!(ok(call(&rt, "recall", json!({ "key": "write:add:memory" })).await), "likes tea");
}

#[tokio::test]
async fn without_kv_the_provider_says_so() {
    let env = Env::new();
    env.install_v2("journal", support::PROBE_MEMORY_WASM, &["memory"], "[capabilities]\nkv = true");
    let rt = env.runtime();
    let plugin = rt.plugin("journal").expect("journal").clone();
    assert_eq!(
        rt.memory_sync_turn(&plugin, "hi", "hello", &env.session()).await,
        Err(PluginError::Failed("memory plugin 'journal' failed: the kv capability is not granted to plugin 'journal' (request `kv = true` in plugin.toml and grant it: `talaria plugins grant journal kv`)".into()))
    );
}

#[tokio::test]
async fn plugin_data_is_writable_by_its_resident_instance() {
    let env = journal_granted(
        r#"filesystem = [{ path = "$PLUGIN_DATA", access = "read-write" }]"#,
        &["kv", "fs:rw:$PLUGIN_DATA"],
    );
    let rt = env.runtime();
    assert_eq!(prefetch(&env, &rt, "data").await, Ok("note 1".into()));
    let file = env.home.path().join("plugin-data/user_journal@local/notes.txt");
    assert_eq!(std::fs::read_to_string(&file).expect("on the host"), "note 1");
}
