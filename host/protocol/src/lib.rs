//! Serde types every talaria front door shares. No runtime, no I/O: only data.
//!
//! - [`Message`], [`ToolCall`], [`Usage`]: the conversation in the agent's OpenAI-style format.
//! - [`Op`]: what a front door asks of a conversation; [`Event`] (handed out [`Stamped`] with
//!   session and turn ids): what it reports; every front door submits the one and renders the
//!   other.
//! - [`ToolSpec`], [`ToolError`]: tools as the model and the CLI see them; [`ToolContext`]: one
//!   parsed call, as every tool handler receives it.
//! - [`HookEvent`], [`HookDecision`], [`CompressRequest`], [`PluginSession`]: what the loop
//!   exchanges with hook, memory and context-engine plugins.
//!
//! ```
//! use talaria_protocol::{ToolError, ToolSpec};
//! let spec = ToolSpec {
//!     name: "read_file".into(),
//!     description: "Read a file".into(),
//!     parameters: serde_json::json!({"type": "object", "properties": {}}),
//!     plugin: "files".into(),
//!     annotations: Default::default(),
//! };
//! assert_eq!(ToolError::InvalidArgs("path is required".into()).to_json()["error"],
//!            "invalid arguments: path is required");
//! # let _ = spec;
//! ```

use std::fmt;

mod event;
mod extension;
mod invocation;
mod message;
mod op;
mod tool;
pub mod trace;

pub use event::{
    ApprovalKind, ApprovalNeeded, CallOutcome, ClarifyNeeded, Event, FileChange, NoticeLevel, Outcome, SessionReason,
    SessionStarted, Stamped, ToolFinished, ToolStarted, TurnEnd, keep_output,
};
pub use extension::{
    CompressRequest, Compressed, ContextStatus, HookDecision, HookEvent, HookKind, PluginError, PluginSession,
    ToolCallEvent, ToolResultEvent,
};
pub use invocation::{Attached, ToolContext, arguments_or_empty};
pub use message::{Image, Message, Role, ToolCall, Usage, thousands};
pub use op::{Decision, Op};
pub use tool::{ToolAnnotations, lexical};

use serde::{Deserialize, Serialize};

/// One tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: serde_json::Value,
    /// The plugin that provides it.
    pub plugin: String,
    /// What it does, as hints for scheduling and display (from the plugin's manifest, or the
    /// built-in's own).
    #[serde(default)]
    pub annotations: ToolAnnotations,
}

/// Why a tool call did not produce a result. Every variant renders as a sentence the model can
/// act on; [`ToolError::to_json`] gives the JSON string the model receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
pub enum ToolError {
    /// The arguments were wrong; the model should fix them and retry.
    InvalidArgs(String),
    /// No tool of that name.
    UnknownTool(String),
    /// The tool ran and reported a failure.
    Failed(String),
    /// A policy refused it (grant missing, dangerous command, hook).
    Denied(String),
    /// The plugin broke: trap, panic, deadline, memory cap, output cap.
    Crashed(String),
    /// The plugin could not be loaded.
    Unavailable(String),
}

impl ToolError {
    /// `{"error": "<sentence>"}`: what the model is given.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "error": self.to_string() })
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidArgs(m) => write!(f, "invalid arguments: {m}"),
            Self::UnknownTool(name) => write!(f, "unknown tool: {name}"),
            Self::Failed(m) => f.write_str(m),
            Self::Denied(m) => write!(f, "denied: {m}"),
            Self::Crashed(m) => write!(f, "plugin crashed: {m}"),
            Self::Unavailable(m) => write!(f, "tool unavailable: {m}"),
        }
    }
}

impl std::error::Error for ToolError {}
