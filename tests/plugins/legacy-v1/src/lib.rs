//! Built against API 0.1.0 with plain wit-bindgen (no SDK), as a plugin from before 0.2.0 was:
//! the host must keep loading and running it beside 0.2.0 plugins.

wit_bindgen::generate!({
    path: "../../../wit/v0.1.0",
    world: "tool-plugin",
});

use exports::talaria::plugin::tools::Guest;
use talaria::plugin::types::{CallContext, ToolError, ToolSpec};

struct Legacy;

impl Guest for Legacy {
    fn list() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "legacy_echo".into(),
            description: "Echo `text`, prefixed with the API version.".into(),
            parameters: r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#.into(),
        }]
    }

    fn call(name: String, args: String, context: CallContext) -> Result<String, ToolError> {
        match name.as_str() {
            "legacy_echo" => {
                let args: serde_json::Value =
                    serde_json::from_str(&args).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
                let text = args["text"].as_str().ok_or_else(|| ToolError::InvalidArgs("text is required".into()))?;
                talaria::plugin::log::log(talaria::plugin::log::Level::Info, &format!("echo in {}", context.workspace));
                Ok(format!("0.1.0: {text}"))
            }
            other => Err(ToolError::UnknownTool(other.into())),
        }
    }
}

export!(Legacy);
