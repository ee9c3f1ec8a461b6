//! One tool call as every tool handler receives it: [`ToolContext`], made once by the loop from
//! the model's [`crate::ToolCall`] after its arguments were parsed.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use crate::Image;

/// A tool call, parsed: what the tool is asked and what it is told about the call. Built-in
/// tools, plugin tools, MCP tools and an editor's overlays all receive this one type.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The tool's name.
    pub tool: String,
    /// The arguments: always a JSON object.
    pub arguments: Value,
    pub session_id: String,
    /// talaria's id of the call (never the provider's).
    pub call_id: String,
    /// The session's working directory (`$WORKSPACE`); absolute.
    pub workspace: PathBuf,
    /// Where a tool puts the images its result holds (an MCP tool's image content): they go to
    /// the model beside the text, or are named in a note to a model that takes none.
    pub images: Attached,
}

impl ToolContext {
    /// A call of `tool` with `arguments` and nothing else known (a direct call, a test).
    pub fn new(tool: impl Into<String>, arguments: Value) -> Self {
        Self {
            tool: tool.into(),
            arguments,
            session_id: String::new(),
            call_id: String::new(),
            workspace: PathBuf::new(),
            images: Attached::default(),
        }
    }

    /// The same call run in `workspace`.
    #[must_use]
    pub fn in_workspace(mut self, workspace: impl Into<PathBuf>) -> Self {
        self.workspace = workspace.into();
        self
    }
}

/// Images attached to one call's result.
#[derive(Debug, Clone, Default)]
pub struct Attached(Arc<Mutex<Vec<Image>>>);

impl Attached {
    pub fn push(&self, image: Image) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(image);
    }

    /// What was attached, leaving nothing.
    pub fn take(&self) -> Vec<Image> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A model's arguments text as JSON: models send an empty string for a call without
/// arguments, which is `{}`.
pub fn arguments_or_empty(text: &str) -> &str {
    if text.trim().is_empty() { "{}" } else { text }
}
