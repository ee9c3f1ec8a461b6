//! Hooks: every answer comes back as the protocol type, a hook that hangs or breaks is stopped
//! and named, and the llm import is refused without its grant and works with it.

use std::time::{Duration, Instant};

use talaria_protocol::{HookDecision, HookEvent, Role, ToolCallEvent, ToolResultEvent};
use talaria_runtime::{LlmRequest, PluginError, Runtime};
use talaria_test_support as support;

use crate::{Canned, Env};

const EVENTS: &str = "[hook]\nevents = [\"pre_tool_call\", \"pre_llm_call\", \"transform_tool_result\"]";

fn call(tool: &str, arguments: &str) -> ToolCallEvent {
    ToolCallEvent { tool: tool.into(), plugin: "files".into(), arguments: arguments.into(), call_id: "call-7".into() }
}

fn pre(tool: &str, arguments: &str) -> HookEvent {
    HookEvent::PreToolCall(call(tool, arguments))
}

/// A hook plugin `guard` with `rest` after its `[hook]` table.
fn guard(rest: &str) -> Env {
    let env = Env::new();
    env.install_v2("guard", support::PROBE_HOOK_WASM, &["hook"], &format!("{EVENTS}\n{rest}"));
    env
}

async fn ask(env: &Env, rt: &Runtime, event: &HookEvent) -> Result<HookDecision, PluginError> {
    let plugin = rt.plugin("guard").expect("guard").clone();
    rt.hook(&plugin, event, &env.session()).await
}

#[tokio::test]
async fn a_hanging_hook_is_stopped_within_its_deadline() {
    let env = guard("[limits]\ntimeout_secs = 1");
    let rt = env.runtime();
    assert_eq!(ask(&env, &rt, &pre("read_file", "{}")).await, Ok(HookDecision::Proceed), "warm up");
    let _spinning = crate::SPINNING.lock().await;
    let started = Instant::now();
    let e = ask(&env, &rt, &pre("hang", "{}")).await.expect_err("stopped");
    let elapsed = started.elapsed();
    assert!(matches!(e, PluginError::TimedOut(_)), "{e:?}");
    assert!(e.to_string().starts_with("hook plugin 'guard' did not answer within 1s and was stopped after 1."), "{e}");
    assert!(elapsed < Duration::from_secs(2), "stopped after {elapsed:?}");
    assert_eq!(ask(&env, &rt, &pre("read_file", "{}")).await, Ok(HookDecision::Proceed), "the next call is fresh");
}

#[tokio::test]
async fn each_answer_comes_back_as_the_protocol_decision() {
    let env = guard("");
    let rt = env.runtime();
    assert_eq!(rt.plugin("guard").expect("guard").hook_events().len(), 3);
    assert_eq!(ask(&env, &rt, &pre("read_file", "{}")).await, Ok(HookDecision::Proceed));
    assert_eq!(
        ask(&env, &rt, &pre("block_me", r#"{"path":"/etc"}"#)).await,
        Ok(HookDecision::Block(r#"blocked {"path":"/etc"}"#.into()))
    );
    assert_eq!(
        ask(&env, &rt, &pre("ask", "{}")).await,
        Ok(HookDecision::RequireApproval("a human should look at this".into()))
    );
    // add-context for a pre_tool_call: returned as is; what it means is the agent's business.
    assert_eq!(ask(&env, &rt, &pre("context", "{}")).await, Ok(HookDecision::AddContext("remember the tests".into())));
    assert_eq!(
        ask(&env, &rt, &pre("whoami", "{}")).await,
        Ok(HookDecision::AddContext(format!(
            "session=s1 platform=cli workspace={} model=main-model call=call-7 plugin=files",
            env.ws().display()
        )))
    );
    let llm =
        HookEvent::PreLlmCall { user_message: "hi".into(), is_first_turn: true, model: "m".into(), message_count: 3 };
    assert_eq!(ask(&env, &rt, &llm).await, Ok(HookDecision::AddContext("first=true model=m messages=3".into())));
    let result = ToolResultEvent { call: call("read_file", "{}"), result: "42".into(), ok: true, duration_ms: 5 };
    assert_eq!(
        ask(&env, &rt, &HookEvent::TransformToolResult(result.clone())).await,
        Ok(HookDecision::ReplaceResult("[checked read_file] 42".into()))
    );
    assert_eq!(
        ask(&env, &rt, &HookEvent::PostToolCall(result)).await,
        Err(PluginError::NotSubscribed("hook plugin 'guard' did not ask for post_tool_call events".into()))
    );
    let plugin = rt.plugin("guard").expect("guard");
    assert!(plugin.wants(talaria_protocol::HookKind::PreToolCall));
    assert!(!plugin.wants(talaria_protocol::HookKind::OnSessionStart));
}

#[tokio::test]
async fn a_broken_hook_is_an_error_naming_it() {
    let env = guard("[limits]\noutput_kb = 1");
    let rt = env.runtime();
    assert_eq!(
        ask(&env, &rt, &pre("panic", "{}")).await,
        Err(PluginError::Crashed("hook plugin 'guard' panicked: hook panicked on purpose".into()))
    );
    assert_eq!(ask(&env, &rt, &pre("big", "1024")).await, Ok(HookDecision::AddContext("x".repeat(1024))));
    assert_eq!(
        ask(&env, &rt, &pre("big", "2000")).await,
        Err(PluginError::BadAnswer("hook plugin 'guard' returned 2000 bytes, over its output cap of 1 KiB".into()))
    );
    let rt = env.runtime();
    let tools = rt.plugin("guard").expect("guard").clone();
    let e = rt.memory_prefetch(&tools, "q", &env.session()).await.expect_err("not a memory provider");
    assert_eq!(e, PluginError::Unavailable("plugin 'guard' is not a memory plugin (its kinds: hook)".into()));
}

#[tokio::test]
async fn llm_is_refused_without_the_grant() {
    let env = guard("[capabilities]\nllm = true");
    let backend = Canned::new("yes");
    let rt = env.runtime_with(|c| c.llm = Some(backend.clone()));
    assert_eq!(
        ask(&env, &rt, &pre("use_llm", "is it safe?")).await,
        Ok(HookDecision::Block(
            "denied: the llm capability is not granted to plugin 'guard' (request `llm = true` in plugin.toml and grant it: `talaria plugins grant guard llm`)"
                .into()
        ))
    );
    assert!(backend.seen().is_empty(), "the model was never asked");
}

#[tokio::test]
async fn llm_works_with_the_grant() {
    let env = guard("[capabilities]\nllm = true");
    env.grant("guard", &["llm"]);
    let backend = Canned::new("yes");
    let rt = env.runtime_with(|c| c.llm = Some(backend.clone()));
    assert_eq!(
        ask(&env, &rt, &pre("use_llm", "is it safe?")).await,
        Ok(HookDecision::AddContext("yes (canned-1, 12+1 tokens)".into()))
    );
    assert_eq!(
        backend.seen(),
        [(
            "guard".to_string(),
            LlmRequest {
                purpose: "hook-check".into(),
                messages: vec![(Role::System, "Answer yes or no.".into()), (Role::User, "is it safe?".into())],
                max_tokens: Some(50),
                temperature: Some(0.0),
            }
        )]
    );
}

#[tokio::test]
async fn llm_requests_are_checked_counted_and_need_a_model() {
    let env = guard("[capabilities]\nllm = true");
    env.grant("guard", &["llm"]);
    let backend = Canned::new("yes");
    let rt = env.runtime_with(|c| c.llm = Some(backend.clone()));
    assert_eq!(
        ask(&env, &rt, &pre("llm_tool_role", "x")).await,
        Ok(HookDecision::Block(
            "invalid: message 1: `tool` messages cannot be sent; use system, user and assistant".into()
        ))
    );
    assert_eq!(
        ask(&env, &rt, &pre("llm_many", "x")).await,
        Ok(HookDecision::Block("denied: plugin 'guard' used up its 8 llm calls for this call".into()))
    );
    assert_eq!(backend.seen().len(), 8);
    // The count is per call.
    assert_eq!(
        ask(&env, &rt, &pre("use_llm", "x")).await,
        Ok(HookDecision::AddContext("yes (canned-1, 12+1 tokens)".into()))
    );
    let rt = env.runtime();
    assert_eq!(
        ask(&env, &rt, &pre("use_llm", "x")).await,
        Ok(HookDecision::Block(
            "failed: no model is configured, so plugins cannot use llm (configure one with `talaria setup`)".into()
        ))
    );
}
