//! Context engines: compression through the llm import comes back as protocol messages with
//! their extra intact; failures and malformed histories are reported, never applied.

use talaria_protocol::{CompressRequest, ContextStatus, Message, PluginSession, Role, ToolCall};
use talaria_runtime::{MAX_LLM_TOKENS, PluginError, Runtime};
use talaria_test_support as support;

use crate::{Canned, Env};

fn squash() -> Env {
    let env = Env::new();
    env.install_v2("squash", support::PROBE_CONTEXT_WASM, &["context-engine"], "[capabilities]\nllm = true");
    env.grant("squash", &["llm"]);
    env
}

fn status(prompt_tokens: u64) -> ContextStatus {
    ContextStatus { prompt_tokens, context_length: 100, message_count: 4, compressions: 1 }
}

fn history() -> Vec<Message> {
    vec![
        Message::user("read the notes"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall::new("c1", "read_file", "{}")],
            reasoning: None,
            extra: Some(serde_json::json!({ "signature": "sig-a" })),
        },
        Message::tool("c1", "read_file", "the notes"),
        Message::Assistant {
            content: "They say hello.".into(),
            tool_calls: Vec::new(),
            reasoning: Some("short file".into()),
            extra: Some(serde_json::json!([{ "type": "thinking", "signature": "sig-b" }])),
        },
    ]
}

fn request(focus: Option<&str>) -> CompressRequest {
    CompressRequest {
        messages: history(),
        focus: focus.map(str::to_string),
        status: status(70),
        force: false,
        memory_context: String::new(),
        carry: "todo: write tests".into(),
    }
}

fn engine(rt: &Runtime) -> std::sync::Arc<talaria_runtime::Plugin> {
    rt.plugin("squash").expect("squash").clone()
}

#[tokio::test]
async fn compression_goes_through_the_llm_and_keeps_extra() {
    let env = squash();
    let backend = Canned::new("they read the notes");
    let rt = env.runtime_with(|c| c.llm = Some(backend.clone()));
    let plugin = engine(&rt);
    let session = env.session();
    assert_eq!(rt.context_should_compress(&plugin, status(70), &session).await, Ok(true));
    assert_eq!(rt.context_should_compress(&plugin, status(10), &session).await, Ok(false));
    let out = rt.context_compress(&plugin, request(Some("notes")), &session).await.expect("compressed");
    assert_eq!(
        out.messages,
        vec![Message::user("Summary: they read the notes\ntodo: write tests"), history()[3].clone()]
    );
    assert_eq!(out.note, "compressed 4 messages into 2 with canned-1 (focus: notes)");
    let seen = backend.seen();
    assert_eq!(seen.len(), 1);
    let (plugin_name, req) = &seen[0];
    assert_eq!((plugin_name.as_str(), req.purpose.as_str()), ("squash", "compression"));
    assert_eq!(
        req.messages,
        [
            (Role::System, "Summarise the conversation.".to_string()),
            (Role::User, "read the notes\n\nthe notes\nThey say hello.".to_string())
        ]
    );
    assert_eq!((req.max_tokens, req.temperature), (Some(MAX_LLM_TOKENS), Some(0.2)), "max_tokens capped");
    assert_eq!(
        rt.context_report(&plugin, status(70), &session).await,
        Ok(vec![
            ("threshold".into(), "50%".into()),
            ("prompt tokens".into(), "70 of 100".into()),
            ("compressions".into(), "1".into())
        ])
    );
}

#[tokio::test]
async fn a_failed_or_malformed_compression_is_reported() {
    let env = squash();
    let rt = env.runtime_with(|c| c.llm = Some(Canned::new("x")));
    let plugin = engine(&rt);
    let session = env.session();
    assert_eq!(
        rt.context_compress(&plugin, request(Some("fail")), &session).await,
        Err(PluginError::Failed("context engine 'squash' failed: asked to fail".into()))
    );
    assert_eq!(
        rt.context_compress(&plugin, request(Some("bad")), &session).await,
        Err(PluginError::BadAnswer("context engine 'squash' returned an invalid history: message 0: an assistant message cannot have a tool-call-id".into()))
    );
    // Host data the host never sent is dropped, not believed.
    let out = rt.context_compress(&plugin, request(Some("forge")), &session).await.expect("compressed");
    assert_eq!(out.messages, vec![Message::user("hi"), Message::assistant("forged")]);
    // Without the grant, the engine's llm call is refused and so is the compression.
    let env = Env::new();
    env.install_v2("squash", support::PROBE_CONTEXT_WASM, &["context-engine"], "[capabilities]\nllm = true");
    let rt = env.runtime_with(|c| c.llm = Some(Canned::new("x")));
    let e = rt.context_compress(&engine(&rt), request(None), &env.session()).await.expect_err("refused");
    assert!(matches!(e, PluginError::Failed(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.starts_with("context engine 'squash' failed: llm: "), "{e}");
    assert!(e.contains("the llm capability is not granted to plugin 'squash'"), "{e}");
}

#[tokio::test]
async fn a_hanging_engine_is_stopped_at_its_deadline() {
    let env = Env::new();
    env.install_v2("squash", support::PROBE_CONTEXT_WASM, &["context-engine"], "[limits]\ntimeout_secs = 1");
    let rt = env.runtime();
    let _spinning = crate::SPINNING.lock().await;
    let started = std::time::Instant::now();
    let e = rt.context_compress(&engine(&rt), request(Some("hang")), &env.session()).await.expect_err("stopped");
    assert!(matches!(e, PluginError::TimedOut(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.starts_with("context engine 'squash' did not answer within 1s"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

/// `should_compress`, asked before every model call, runs on an instance kept from its earlier
/// calls: any workspace's for an engine that nothing ties to a workspace, each workspace's own
/// for one with a directory of it granted; one that trapped is not kept.
#[tokio::test]
async fn should_compress_keeps_its_instances_per_workspace_where_that_matters() {
    let env = squash();
    env.install_v2(
        "rooted",
        support::PROBE_CONTEXT_WASM,
        &["context-engine"],
        "[capabilities]\nfilesystem = [{ path = \"$WORKSPACE\", access = \"read\" }]",
    );
    env.grant("rooted", &["fs:ro:$WORKSPACE"]);
    let rt = env.runtime();
    let session = env.session();
    let other = tempfile::tempdir().expect("other workspace");
    let elsewhere = PluginSession { workspace: other.path().display().to_string(), ..session.clone() };
    // The probe answers whether this instance was asked before.
    let asked_before = ContextStatus { compressions: u32::MAX, ..status(10) };

    let free = engine(&rt);
    assert_eq!(rt.context_should_compress(&free, asked_before, &session).await, Ok(false));
    assert_eq!(rt.context_should_compress(&free, asked_before, &session).await, Ok(true));
    assert_eq!(rt.context_should_compress(&free, status(70), &session).await, Ok(true));
    assert_eq!(rt.context_should_compress(&free, status(10), &session).await, Ok(false));
    assert_eq!(rt.context_should_compress(&free, asked_before, &elsewhere).await, Ok(true));

    let rooted = rt.plugin("rooted").expect("rooted").clone();
    assert_eq!(rt.context_should_compress(&rooted, asked_before, &session).await, Ok(false));
    assert_eq!(rt.context_should_compress(&rooted, asked_before, &elsewhere).await, Ok(false));
    assert_eq!(rt.context_should_compress(&rooted, asked_before, &session).await, Ok(true));
    assert_eq!(rt.context_should_compress(&rooted, asked_before, &elsewhere).await, Ok(true));

    let trap = ContextStatus { message_count: u32::MAX, ..status(10) };
    let e = rt.context_should_compress(&free, trap, &session).await.expect_err("trapped");
    assert!(matches!(e, PluginError::Crashed(_)), "{e:?}");
    assert_eq!(rt.context_should_compress(&free, asked_before, &session).await, Ok(false));
}
