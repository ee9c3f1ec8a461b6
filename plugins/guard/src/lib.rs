//! The bundled `guard` hook: blocks tool calls, or asks a human first, by the operator's rules.
//!
//! It listens to `pre_tool_call` only. The rules come from config.toml (the matching is in
//! `rules`):
//!
//! ```toml
//! [plugins.guard]
//! enabled = true
//!
//! [plugins.guard.config]
//! rules = [
//!   { tool = "write_file", path_globs = ["secrets/**", "*.pem"], message = "secrets are read-only" },
//!   { tool = "terminal", command_regex = "\\bgit\\s+push\\b.*--force" },
//!   { tool = "*", args_regex = "(?i)production", action = "approve" },
//! ]
//! ```
//!
//! A configuration that does not parse blocks every tool call, with a message that says why
//! (it fails closed: a guard with a typo must not silently let everything through).

mod rules;

use std::sync::OnceLock;

use talaria_sdk::hooks::{Decision, Event, Hooks, ToolCallEvent};
use talaria_sdk::{config, log};

use crate::rules::{Call, ConfigError, Rules, Verdict};

struct Guard;

/// The rules, compiled on first use (the host may reuse the instance for later calls).
fn rules() -> &'static Result<Rules, ConfigError> {
    static RULES: OnceLock<Result<Rules, ConfigError>> = OnceLock::new();
    RULES.get_or_init(|| {
        let loaded = match config::get::<serde_json::Value>("rules") {
            None => Ok(Rules::default()),
            Some(value) => Rules::parse(&value),
        };
        match &loaded {
            Ok(r) if r.is_empty() => log::warn("no rules in [plugins.guard.config]; every tool call proceeds"),
            Ok(r) => log::debug(&format!("{} rules loaded", r.len())),
            Err(e) => log::error(&format!("[plugins.guard.config] is invalid, so every tool call is blocked: {e}")),
        }
        loaded
    })
}

fn decide(rules: &Result<Rules, ConfigError>, call: &ToolCallEvent) -> Decision {
    let rules = match rules {
        Ok(r) => r,
        Err(e) => {
            return Decision::Block(format!(
                "the guard plugin's configuration is invalid, so no tool may run until the operator fixes \
                 [plugins.guard.config] in config.toml: {e}"
            ));
        }
    };
    let call = Call { tool: &call.tool, arguments: &call.arguments, workspace: &call.session.workspace };
    match rules.check(&call) {
        Verdict::Allow => Decision::Proceed,
        Verdict::Block(why) => Decision::Block(why),
        Verdict::Approve(why) => Decision::RequireApproval(why),
    }
}

impl Hooks for Guard {
    fn on_event(event: Event) -> Decision {
        match event {
            Event::PreToolCall(call) => decide(rules(), &call),
            Event::PostToolCall(_)
            | Event::TransformToolResult(_)
            | Event::PreLlmCall(_)
            | Event::PostLlmCall(_)
            | Event::SessionStart(_)
            | Event::SessionEnd(_)
            | Event::SessionFinalize(_)
            | Event::SessionReset(_)
            | Event::SubagentStop(_) => Decision::Proceed,
        }
    }
}

talaria_sdk::export_hooks!(Guard);

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_sdk::message::Session;

    fn call(tool: &str, arguments: &str) -> ToolCallEvent {
        ToolCallEvent {
            session: Session { workspace: "/ws".into(), ..Session::default() },
            tool: tool.into(),
            arguments: arguments.into(),
            ..ToolCallEvent::default()
        }
    }

    #[test]
    fn an_invalid_config_blocks_every_call_and_says_why() {
        let broken = Rules::parse(&serde_json::json!([{ "tool": "x", "command_regex": "(" }]));
        let Decision::Block(why) = decide(&broken, &call("read_file", "{}")) else { panic!("must block") };
        assert!(why.contains("configuration is invalid"), "{why}");
        assert!(why.contains("rule 1: `command_regex`"), "{why}");
    }

    #[test]
    fn verdicts_become_decisions() {
        let rules = Rules::parse(&serde_json::json!([
            { "tool": "write_file", "path_globs": ["secrets/**"] },
            { "tool": "terminal", "action": "approve" },
        ]));
        assert_eq!(decide(&rules, &call("read_file", "{\"path\":\"secrets/a\"}")), Decision::Proceed);
        assert!(matches!(decide(&rules, &call("write_file", "{\"path\":\"/ws/secrets/a\"}")), Decision::Block(_)));
        assert!(matches!(decide(&rules, &call("terminal", "{\"command\":\"ls\"}")), Decision::RequireApproval(_)));
        assert_eq!(decide(&Ok(Rules::default()), &call("terminal", "{}")), Decision::Proceed);
    }
}
