//! What the mock answers: a [`Script`] of [`Step`]s, consumed one per model request.
//!
//! A script is built in Rust or loaded from JSON ([`Script::from_json`], [`Script::load`]):
//!
//! ```json
//! {
//!   "steps": [
//!     {"reply": {"text": "Let me look.", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}},
//!     {"error": {"status": 429, "retry_after": 1}},
//!     {"delay": {"ms": 50, "then": {"reply": {"text": "Done.", "reasoning": "easy", "usage": {"input": 12, "output": 3}}}}},
//!     {"stall": {"text": "thinking about it"}},
//!     {"cut": {"text": "half an ans"}},
//!     {"reply": {"text": "Once upon a", "truncated": true}},
//!     "hang",
//!     {"empty_stream": {"pings": 2}}
//!   ],
//!   "repeat": false,
//!   "auto": {"tool": "read_file", "args": {"path": "README.md"}}
//! }
//! ```
//!
//! A bare array of steps is a script too. When the steps run out the mock repeats the last one
//! (`"repeat": true`), else answers by the [auto rule](crate::auto) (`"auto"` set), else answers
//! HTTP 500 "mock script exhausted".

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An ordered list of [`Step`]s, shared by all routes, plus what to do when it runs out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(default)]
    pub steps: Vec<Step>,
    /// Once the steps are used up, answer every further request with the last step.
    #[serde(default)]
    pub repeat: bool,
    /// Once the steps are used up (and `repeat` is off), answer by the auto rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<Auto>,
}

/// The tool the [auto rule](crate::auto) calls when the prompt says "use the tool N times".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auto {
    /// Called when the prompt names no tool ("use the tool 5 times"); default `read_file`.
    #[serde(default = "default_auto_tool")]
    pub tool: String,
    /// The arguments of every call; `{n}` anywhere in their JSON text becomes the call number
    /// (1-based). Default `{}`.
    #[serde(default = "empty_object")]
    pub args: Value,
    /// Stream its answers one event every this many milliseconds (a model at that pace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace_ms: Option<u64>,
}

impl Default for Auto {
    fn default() -> Self {
        Self { tool: default_auto_tool(), args: empty_object(), pace_ms: None }
    }
}

fn default_auto_tool() -> String {
    "read_file".to_owned()
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// One answer to one model request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// A complete answer: text, tool calls, reasoning.
    Reply(Reply),
    /// An HTTP error in the route's provider style.
    Error(HttpError),
    /// Stream `text` (as much of an answer as that is), then keep the connection open, sending
    /// nothing more, until the client goes away; counted by [`MockLlm::disconnects`](crate::MockLlm::disconnects).
    /// A non-streamed request gets no response at all.
    Stall { text: String },
    /// Stream `text`, then close the connection without the terminating event (or, non-streamed,
    /// after half of the JSON body).
    Cut { text: String },
    /// Accept the request and never answer: no status line, no headers, until the client goes
    /// away (counted by [`MockLlm::disconnects`](crate::MockLlm::disconnects)).
    Hang,
    /// Answer 200 with an event-stream content type, send `pings` keep-alive comments
    /// (`: ping`), then close the stream without a single event, as llama-cpp-python's server
    /// does when it fails inside a streamed reply.
    EmptyStream { pings: u32 },
    /// Wait `ms` milliseconds before answering with `then`.
    Delay { ms: u64, then: Box<Step> },
}

impl Step {
    /// A reply with only `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Reply(Reply::text(text))
    }

    /// A reply with one tool call and no text.
    pub fn tool_call(name: impl Into<String>, arguments: impl Into<Value>) -> Self {
        Self::Reply(Reply::default().tool_call(name, arguments))
    }

    /// An HTTP error with the default provider-style body.
    pub fn error(status: u16) -> Self {
        Self::Error(HttpError::new(status))
    }

    /// See [`Step::Stall`].
    pub fn stall(text: impl Into<String>) -> Self {
        Self::Stall { text: text.into() }
    }

    /// See [`Step::Cut`].
    pub fn cut(text: impl Into<String>) -> Self {
        Self::Cut { text: text.into() }
    }

    /// See [`Step::Hang`].
    pub fn hang() -> Self {
        Self::Hang
    }

    /// See [`Step::EmptyStream`].
    pub fn empty_stream(pings: u32) -> Self {
        Self::EmptyStream { pings }
    }

    /// This step, answered after `ms` milliseconds.
    pub fn delayed(self, ms: u64) -> Self {
        Self::Delay { ms, then: Box::new(self) }
    }
}

impl From<Reply> for Step {
    fn from(reply: Reply) -> Self {
        Self::Reply(reply)
    }
}

impl From<HttpError> for Step {
    fn from(error: HttpError) -> Self {
        Self::Error(error)
    }
}

/// A complete answer. Streamed, the text arrives one word per delta and each tool call's
/// arguments in two or three pieces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    #[serde(default)]
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Reasoning before the answer: `reasoning_content` (Chat Completions), a `thinking` block
    /// (Anthropic), a `reasoning` item with a summary (Responses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Reported token counts; by default input = request body bytes / 4 and output = generated
    /// bytes / 4 (each at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The answer stops at the output-token limit: `finish_reason: "length"` (Chat
    /// Completions), `stop_reason: "max_tokens"` (Anthropic), status `incomplete` with reason
    /// `max_output_tokens` (Responses).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Streamed, wait this many milliseconds between events (a model generating at that pace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace_ms: Option<u64>,
}

impl Reply {
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: text.into(), ..Self::default() }
    }

    /// Add a tool call. `arguments` is sent as JSON text: a [`Value::String`] verbatim (so it
    /// may be malformed on purpose), anything else serialized.
    pub fn tool_call(mut self, name: impl Into<String>, arguments: impl Into<Value>) -> Self {
        self.tool_calls.push(ToolCall { name: name.into(), arguments: arguments.into(), id: None });
        self
    }

    /// Add a tool call the server names `id` (as a server that numbers calls per answer, or
    /// gives two calls one id, would).
    pub fn tool_call_with_id(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<Value>,
    ) -> Self {
        self.tool_calls.push(ToolCall { name: name.into(), arguments: arguments.into(), id: Some(id.into()) });
        self
    }

    pub fn reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }

    pub fn usage(mut self, input: u64, output: u64) -> Self {
        self.usage = Some(Usage { input, output });
        self
    }

    /// Stream one event every `ms` milliseconds.
    pub fn paced(mut self, ms: u64) -> Self {
        self.pace_ms = Some(ms);
        self
    }

    /// See [`Reply::truncated`].
    pub fn truncated(mut self) -> Self {
        self.truncated = true;
        self
    }
}

/// A tool call in a [`Reply`]; its id is generated by the server (`call_N`, `toolu_N`, `fc_N`
/// with N counted over the server's life; in [`Mode::Strict`](crate::Mode::Strict), Chat
/// Completions numbers the calls of each answer `call_0`, `call_1`, as llama.cpp's server does)
/// unless the script names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub name: String,
    /// A JSON string is the raw argument text; any other JSON value is serialized.
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// The id the server gives the call, instead of one it makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl ToolCall {
    /// The argument text as it goes on the wire.
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            Value::String(raw) => raw.clone(),
            other => other.to_string(),
        }
    }
}

/// Token counts reported with a reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
}

/// An HTTP error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpError {
    pub status: u16,
    /// The message inside the provider-style error body (default "mock error STATUS").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The whole response body, sent verbatim instead of the provider-style one (JSON or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Seconds, sent as a `retry-after` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// The `content-type` of a verbatim `body` (default: JSON when it parses, else HTML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

impl HttpError {
    pub fn new(status: u16) -> Self {
        Self { status, message: None, body: None, retry_after: None, content_type: None }
    }

    /// See [`HttpError::content_type`].
    pub fn content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }

    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
}

/// Why a script file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("invalid script: {0}")]
    Json(#[from] serde_json::Error),
}

impl Script {
    /// A script of `steps`, answered in order.
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Self { steps: steps.into_iter().collect(), repeat: false, auto: None }
    }

    /// No steps, only the [auto rule](crate::auto) with the default tool (`read_file`, `{}`).
    pub fn auto() -> Self {
        Self { steps: Vec::new(), repeat: false, auto: Some(Auto::default()) }
    }

    /// The tool and arguments the auto rule uses when the prompt names no tool (turns auto on).
    pub fn auto_tool(mut self, tool: impl Into<String>, args: impl Into<Value>) -> Self {
        let pace_ms = self.auto.as_ref().and_then(|a| a.pace_ms);
        self.auto = Some(Auto { tool: tool.into(), args: args.into(), pace_ms });
        self
    }

    /// Stream the auto rule's answers one event every `ms` milliseconds (turns auto on).
    pub fn auto_paced(mut self, ms: u64) -> Self {
        self.auto.get_or_insert_with(Auto::default).pace_ms = Some(ms);
        self
    }

    /// Repeat the last step forever once the steps are used up.
    pub fn repeat_last(mut self, repeat: bool) -> Self {
        self.repeat = repeat;
        self
    }

    /// Append a step.
    pub fn then(mut self, step: impl Into<Step>) -> Self {
        self.steps.push(step.into());
        self
    }

    /// Parse a script: an object `{"steps": [...], "repeat": bool, "auto": {...}}` or a bare
    /// array of steps.
    ///
    /// # Errors
    /// [`ScriptError::Json`] when the text is not a script.
    pub fn from_json(text: &str) -> Result<Self, ScriptError> {
        let value: Value = serde_json::from_str(text)?;
        Ok(match value {
            Value::Array(_) => Self::new(serde_json::from_value::<Vec<Step>>(value)?),
            other => serde_json::from_value(other)?,
        })
    }

    /// Read and parse a script file (see [`Script::from_json`]).
    ///
    /// # Errors
    /// [`ScriptError::Read`] when the file cannot be read, [`ScriptError::Json`] when it is not a script.
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ScriptError::Read { path: path.display().to_string(), source })?;
        Self::from_json(&text)
    }
}
