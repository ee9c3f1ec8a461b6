//! A talaria tool plugin with one tool, `hello`.
//!
//! The host calls `list` once to learn the tools, then `call` each time the model uses one, in a
//! fresh instance. What the plugin may import from the host (`log`, `config`, `kv`, `secrets`,
//! `process`, `llm`) is in `wit/plugin.wit`; `wit_bindgen::generate!` turns each interface into
//! a module under `talaria::plugin`, and the `tools` export into the `Guest` trait below.

wit_bindgen::generate!({ path: "wit", world: "tool-plugin" });

use exports::talaria::plugin::tools::Guest;
use serde::Deserialize;
use talaria::plugin::log::{Level, log};
use talaria::plugin::types::{CallContext, ToolError, ToolSpec};

/// The arguments of `hello`.
#[derive(Deserialize)]
struct HelloArgs {
    /// Who to greet.
    name: String,
}

/// Greet someone. An empty name is the caller's mistake: `InvalidArgs` tells the model to fix it.
fn hello(args: HelloArgs, _context: &CallContext) -> Result<String, ToolError> {
    let name = args.name.trim();
    if name.is_empty() {
        return Err(ToolError::InvalidArgs("`name` must not be empty: say who to greet".into()));
    }
    // A host import: this line goes to talaria's log (`talaria -v` shows it).
    log(Level::Info, &format!("greeting {name}"));
    Ok(format!("Hello, {name}!"))
}

struct Plugin;

impl Guest for Plugin {
    fn list() -> Vec<ToolSpec> {
        let hello = serde_json::json!({
            "type": "object",
            "properties": { "name": { "type": "string", "description": "Who to greet." } },
            "required": ["name"],
        });
        vec![ToolSpec {
            name: "hello".into(),
            description: "Greet someone by name. Returns the greeting.".into(),
            parameters: hello.to_string(),
        }]
    }

    fn call(name: String, args_json: String, context: CallContext) -> Result<String, ToolError> {
        match name.as_str() {
            "hello" => hello(parse(&args_json)?, &context),
            _ => Err(ToolError::UnknownTool(name)),
        }
    }
}

/// The JSON arguments as `T`, or an error that tells the model what was wrong with them.
fn parse<T: serde::de::DeserializeOwned>(args_json: &str) -> Result<T, ToolError> {
    serde_json::from_str(args_json).map_err(|e| ToolError::InvalidArgs(e.to_string()))
}

export!(Plugin);
