//! The bundled `compressor` in the real sandbox, over random valid histories: whatever it is
//! given, the history it returns keeps a valid role order, never separates a tool call from its
//! results, keeps the latest user message and shrinks. The auxiliary model is a stand-in (it is
//! outside the product); the first case of each kind also checks the summary request itself.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use talaria_protocol::{CompressRequest, ContextStatus, Message, PluginSession, Role, ToolCall};
use talaria_runtime::{
    BoxFuture, Embedded, LlmBackend, LlmCompletion, LlmRequest, PluginSettings, Runtime, RuntimeConfig,
};

/// Answers every summary request with a fixed summary, or fails when told to.
struct Model {
    fail: bool,
    seen: Mutex<Vec<LlmRequest>>,
}

impl LlmBackend for Model {
    fn complete<'a>(&'a self, _plugin: &'a str, request: LlmRequest) -> BoxFuture<'a, Result<LlmCompletion, String>> {
        Box::pin(async move {
            self.seen.lock().expect("lock").push(request);
            if self.fail {
                return Err("every provider failed (test)".into());
            }
            Ok(LlmCompletion {
                text: "## Goal\nKeep working.\n## Progress\n### Done\n- earlier steps".into(),
                model: "stand-in".into(),
                input_tokens: 100,
                output_tokens: 20,
            })
        })
    }
}

fn runtime(home: &std::path::Path, model: Arc<Model>) -> Runtime {
    let mut config = RuntimeConfig::new(home.to_path_buf(), home.to_path_buf());
    let settings: toml::Table =
        toml::from_str("min_tokens = 0\nprotect_first_n = 2\nprotect_last_n = 4\ntail_ratio = 0.02").expect("settings");
    config.plugins.insert("compressor".into(), PluginSettings { config: settings, ..PluginSettings::default() });
    config.llm = Some(model);
    let bundled: Vec<Embedded> = talaria_bundled::PLUGINS
        .iter()
        .filter(|b| b.manifest.contains("name = \"compressor\""))
        .map(talaria_bundled::Bundled::embedded)
        .collect();
    Runtime::new(config, &bundled).expect("runtime")
}

/// One turn: the user's message, rounds of tool calls (each call answered), a final answer.
fn turn() -> impl Strategy<Value = (String, Vec<Vec<usize>>, bool)> {
    ("[a-z ]{1,60}", prop::collection::vec(prop::collection::vec(0usize..3_000, 1..4), 0..4), any::<bool>())
}

fn history(turns: &[(String, Vec<Vec<usize>>, bool)]) -> Vec<Message> {
    let mut out = Vec::new();
    let mut id = 0;
    for (i, (text, rounds, reasoning)) in turns.iter().enumerate() {
        out.push(Message::user(format!("turn {i}: {text}")));
        for round in rounds {
            let calls: Vec<ToolCall> = round
                .iter()
                .map(|_| {
                    id += 1;
                    ToolCall::new(format!("call_{id}"), "read_file", format!("{{\"path\":\"f{id}.txt\"}}"))
                })
                .collect();
            out.push(Message::Assistant {
                content: String::new(),
                tool_calls: calls.clone(),
                reasoning: reasoning.then(|| "thinking".to_string()),
                extra: reasoning.then(|| serde_json::json!({"signature": format!("sig{i}")})),
            });
            for (call, len) in calls.iter().zip(round) {
                out.push(Message::tool(call.id.clone(), call.name.clone(), "x".repeat(*len)));
            }
        }
        out.push(Message::assistant(format!("answer {i}")));
    }
    out
}

fn check(rt: &tokio::runtime::Runtime, runtime: &Runtime, messages: Vec<Message>) -> Result<(), TestCaseError> {
    let plugin = runtime.plugin("compressor").expect("bundled").clone();
    let last_user = messages.iter().rev().find(|m| m.role() == Role::User).map(|m| m.content().to_string());
    let chars: usize = messages.iter().map(|m| m.content().len()).sum();
    let request = CompressRequest {
        messages: messages.clone(),
        focus: Some("the files".into()),
        status: ContextStatus {
            prompt_tokens: (chars / 4) as u64,
            context_length: 16_000,
            message_count: messages.len() as u32,
            compressions: 0,
        },
        force: true,
        memory_context: String::new(),
        carry: "Your todo list: - [ ] finish".into(),
    };
    let session = PluginSession { session_id: "prop".into(), platform: "cli".into(), ..PluginSession::default() };
    match rt.block_on(runtime.context_compress(&plugin, request, &session)) {
        Ok(out) => {
            prop_assert!(talaria_agent::history::is_valid(&out.messages), "invalid history: {:#?}", out.messages);
            prop_assert!(out.messages.len() <= messages.len(), "{} > {}", out.messages.len(), messages.len());
            let summaries = out.messages.iter().filter(|m| m.content().contains("[talaria context summary")).count();
            prop_assert_eq!(summaries, 1);
            if let Some(user) = last_user {
                prop_assert!(out.messages.iter().any(|m| m.content().contains(&user)), "lost: {user}");
            }
            prop_assert!(out.messages.iter().any(|m| m.content().contains("Your todo list")));
        }
        Err(e) => prop_assert!(e.message().contains("nothing to compress"), "{e}"),
    }
    Ok(())
}

fn run_cases(fail: bool) {
    let home = tempfile::tempdir().expect("home");
    let model = Arc::new(Model { fail, seen: Mutex::new(Vec::new()) });
    let runtime = runtime(home.path(), model.clone());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    let mut runner = TestRunner::new(Config { cases: 40, failure_persistence: None, ..Config::default() });
    runner
        .run(&prop::collection::vec(turn(), 1..12), |turns| check(&rt, &runtime, history(&turns)))
        .unwrap_or_else(|e| panic!("{e}"));
    let seen = model.seen.lock().expect("lock");
    if !fail {
        let first = seen.first().expect("the model was asked for a summary");
        assert_eq!(first.purpose, "compression");
        let prompt: String = first.messages.iter().map(|(_, t)| t.as_str()).collect();
        for heading in [
            "## Goal",
            "## Constraints & Preferences",
            "## Progress",
            "## Key Decisions",
            "## Relevant Files",
            "## Next Steps",
            "## Critical Context",
        ] {
            assert!(prompt.contains(heading), "{heading} missing");
        }
        assert!(prompt.contains("the files"), "the focus reaches the prompt");
    }
}

#[test]
fn compression_keeps_any_valid_history_valid() {
    run_cases(false);
}

#[test]
fn the_fallback_summary_keeps_any_valid_history_valid() {
    run_cases(true);
}
