//! A hook plugin (API 0.2.0) whose answer to `pre-tool-call` depends on the tool's name, so the
//! runtime's tests can make it hang, panic, block, ask for approval, add context or call the
//! llm import.

wit_bindgen::generate!({
    path: "../../../wit/v0.2.0",
    world: "hook-plugin",
});

use exports::talaria::plugin::hooks::{Decision, Event, Guest};
use talaria::plugin::llm::{self, LlmError, LlmMessage, Request};
use talaria::plugin::types::Role;

struct Probe;

fn ask(content: &str, role: Role) -> Result<llm::Completion, LlmError> {
    llm::complete(&Request {
        purpose: "hook-check".into(),
        messages: vec![
            LlmMessage { role: Role::System, content: "Answer yes or no.".into() },
            LlmMessage { role, content: content.into() },
        ],
        max_tokens: Some(50),
        temperature: Some(0.0),
    })
}

fn llm_answer(result: Result<llm::Completion, LlmError>) -> Decision {
    match result {
        Ok(c) => {
            Decision::AddContext(format!("{} ({}, {}+{} tokens)", c.text, c.model, c.input_tokens, c.output_tokens))
        }
        Err(LlmError::Denied(m)) => Decision::Block(format!("denied: {m}")),
        Err(LlmError::Invalid(m)) => Decision::Block(format!("invalid: {m}")),
        Err(LlmError::Failed(m)) => Decision::Block(format!("failed: {m}")),
    }
}

impl Guest for Probe {
    fn on_event(event: Event) -> Decision {
        match event {
            Event::PreToolCall(call) => match call.tool.as_str() {
                "hang" => loop {
                    std::hint::black_box(());
                },
                "panic" => panic!("hook panicked on purpose"),
                "block_me" => Decision::Block(format!("blocked {}", call.arguments)),
                "ask" => Decision::RequireApproval("a human should look at this".into()),
                "context" => Decision::AddContext("remember the tests".into()),
                "whoami" => Decision::AddContext(format!(
                    "session={} platform={} workspace={} model={} call={} plugin={}",
                    call.session.session_id,
                    call.session.platform,
                    call.session.workspace,
                    call.session.model,
                    call.call_id,
                    call.plugin
                )),
                "big" => Decision::AddContext("x".repeat(call.arguments.parse().unwrap_or(0))),
                "use_llm" => llm_answer(ask(&call.arguments, Role::User)),
                "llm_tool_role" => llm_answer(ask(&call.arguments, Role::Tool)),
                "llm_many" => {
                    let mut last = Decision::Proceed;
                    for _ in 0..9 {
                        last = llm_answer(ask("again?", Role::User));
                    }
                    last
                }
                // Any tool whose arguments say so (the pipeline tests, one per kind of tool).
                _ if call.arguments.contains("HOOK-BLOCK") => Decision::Block("the arguments asked for it".into()),
                _ if call.arguments.contains("HOOK-ASK") => {
                    Decision::RequireApproval("a human should look at this".into())
                }
                _ => Decision::Proceed,
            },
            Event::PreLlmCall(e) if e.user_message.starts_with("big:") => {
                Decision::AddContext("y".repeat(e.user_message[4..].trim().parse().unwrap_or(0)))
            }
            Event::PreLlmCall(e) => Decision::AddContext(format!(
                "first={} model={} messages={}",
                e.is_first_turn, e.model, e.message_count
            )),
            Event::TransformToolResult(r) => Decision::ReplaceResult(format!("[checked {}] {}", r.tool, r.result)),
            Event::PostToolCall(_)
            | Event::PostLlmCall(_)
            | Event::SessionStart(_)
            | Event::SessionEnd(_)
            | Event::SessionFinalize(_)
            | Event::SessionReset(_)
            | Event::SubagentStop(_) => Decision::Proceed,
        }
    }
}

export!(Probe);
