//! A talaria hook: before each tool call, it blocks the ones whose arguments contain a phrase
//! from its list.
//!
//! plugin.toml's `[hook] events` says which events it gets (`pre_tool_call` here); each call
//! runs in a fresh instance under a deadline. The list comes from
//! `[plugins.{{name}}.config] block` (default: "rm -rf" and "DROP TABLE"). A hook can proceed,
//! block, ask for a human's approval, add context or replace a result; nothing it answers can
//! approve a command or widen a grant.

wit_bindgen::generate!({ path: "wit", world: "hook-plugin" });

use exports::talaria::plugin::hooks::{Decision, Event, Guest};
use talaria::plugin::config;
use talaria::plugin::log::{Level, log};

const DEFAULT_BLOCK: &[&str] = &["rm -rf", "DROP TABLE"];

/// The phrases to block: the config's `block` list, or the defaults.
fn phrases() -> Vec<String> {
    config::get("block")
        .and_then(|raw| serde_json::from_str::<Vec<String>>(&raw).ok())
        .unwrap_or_else(|| DEFAULT_BLOCK.iter().map(|p| p.to_string()).collect())
}

struct Plugin;

impl Guest for Plugin {
    fn on_event(event: Event) -> Decision {
        let Event::PreToolCall(call) = event else { return Decision::Proceed };
        let arguments = call.arguments.to_lowercase();
        for phrase in phrases() {
            if arguments.contains(&phrase.to_lowercase()) {
                log(Level::Info, &format!("blocked {}: {phrase:?}", call.tool));
                return Decision::Block(format!(
                    "{{name}} blocked this {} call: its arguments contain {phrase:?}. Do it another way, or ask the user to change [plugins.{{name}}.config] block.",
                    call.tool
                ));
            }
        }
        Decision::Proceed
    }
}

export!(Plugin);
