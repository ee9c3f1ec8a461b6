//! What the loop exchanges with the plugin kinds beside tools: hooks, memory providers and
//! context engines (WIT `talaria:plugin@0.2.0`). The runtime converts these to and from the
//! component types; the agent sees only these.

use serde::{Deserialize, Serialize};

use crate::Message;

/// The session a plugin call concerns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginSession {
    pub session_id: String,
    /// `cli`, `acp`, `gateway`, `cron` or `subagent`.
    pub platform: String,
    /// Absolute path of the session's working directory.
    pub workspace: String,
    /// The main model's name.
    pub model: String,
}

/// The events a hook plugin can ask for, by their manifest names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookKind {
    PreToolCall,
    PostToolCall,
    TransformToolResult,
    PreLlmCall,
    PostLlmCall,
    OnSessionStart,
    OnSessionEnd,
    OnSessionFinalize,
    OnSessionReset,
    SubagentStop,
}

impl HookKind {
    pub const ALL: [Self; 10] = [
        Self::PreToolCall,
        Self::PostToolCall,
        Self::TransformToolResult,
        Self::PreLlmCall,
        Self::PostLlmCall,
        Self::OnSessionStart,
        Self::OnSessionEnd,
        Self::OnSessionFinalize,
        Self::OnSessionReset,
        Self::SubagentStop,
    ];

    /// The name used in plugin.toml's `[hook] events`.
    pub fn name(self) -> &'static str {
        match self {
            Self::PreToolCall => "pre_tool_call",
            Self::PostToolCall => "post_tool_call",
            Self::TransformToolResult => "transform_tool_result",
            Self::PreLlmCall => "pre_llm_call",
            Self::PostLlmCall => "post_llm_call",
            Self::OnSessionStart => "on_session_start",
            Self::OnSessionEnd => "on_session_end",
            Self::OnSessionFinalize => "on_session_finalize",
            Self::OnSessionReset => "on_session_reset",
            Self::SubagentStop => "subagent_stop",
        }
    }

    /// The kind named `name` in a manifest.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A tool call as hooks see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallEvent {
    pub tool: String,
    /// The plugin providing the tool ("" for the agent's own tools).
    pub plugin: String,
    pub arguments: String,
    pub call_id: String,
}

/// A finished tool call as hooks see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultEvent {
    pub call: ToolCallEvent,
    /// What the model will see (a JSON error when `ok` is false).
    pub result: String,
    pub ok: bool,
    pub duration_ms: u64,
}

/// Something that happened in the loop, for hook plugins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HookEvent {
    PreToolCall(ToolCallEvent),
    PostToolCall(ToolResultEvent),
    TransformToolResult(ToolResultEvent),
    PreLlmCall {
        user_message: String,
        is_first_turn: bool,
        model: String,
        message_count: u32,
    },
    PostLlmCall {
        user_message: String,
        assistant_response: String,
        model: String,
    },
    SessionStart,
    /// A turn ended; `reason` is the outcome (`completed`, `interrupted`, ...).
    SessionEnd {
        reason: String,
    },
    /// The session closes for good in this process (`exit`, `new`, `resume`, `compressed`).
    SessionFinalize {
        reason: String,
    },
    SessionReset,
    SubagentStop {
        parent_session_id: String,
        child_session_id: String,
        goal: String,
        summary: String,
        status: String,
        duration_ms: u64,
    },
}

impl HookEvent {
    pub fn kind(&self) -> HookKind {
        match self {
            Self::PreToolCall(_) => HookKind::PreToolCall,
            Self::PostToolCall(_) => HookKind::PostToolCall,
            Self::TransformToolResult(_) => HookKind::TransformToolResult,
            Self::PreLlmCall { .. } => HookKind::PreLlmCall,
            Self::PostLlmCall { .. } => HookKind::PostLlmCall,
            Self::SessionStart => HookKind::OnSessionStart,
            Self::SessionEnd { .. } => HookKind::OnSessionEnd,
            Self::SessionFinalize { .. } => HookKind::OnSessionFinalize,
            Self::SessionReset => HookKind::OnSessionReset,
            Self::SubagentStop { .. } => HookKind::SubagentStop,
        }
    }
}

/// A hook's answer. Which answers count depends on the event (see the WIT `hooks` interface);
/// the others are ignored with a warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", content = "text", rename_all = "snake_case")]
pub enum HookDecision {
    Proceed,
    Block(String),
    RequireApproval(String),
    AddContext(String),
    ReplaceResult(String),
}

impl HookDecision {
    /// Its name in the contract (`require_approval`), for messages and traces.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Proceed => "proceed",
            Self::Block(_) => "block",
            Self::RequireApproval(_) => "require_approval",
            Self::AddContext(_) => "add_context",
            Self::ReplaceResult(_) => "replace_result",
        }
    }
}

/// Where the conversation stands, for a context engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextStatus {
    /// Prompt tokens of the last model call, or an estimate of the next one.
    pub prompt_tokens: u64,
    /// The model's context window.
    pub context_length: u64,
    /// Messages in history, without the system prompt.
    pub message_count: u32,
    /// Compressions of this conversation so far.
    pub compressions: u32,
}

/// A request to rewrite the history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompressRequest {
    /// The history without the system prompt.
    pub messages: Vec<Message>,
    pub focus: Option<String>,
    pub status: ContextStatus,
    /// The user asked (`/compress`): compress even below the threshold.
    pub force: bool,
    /// The memory provider's notes on what is compressed away.
    pub memory_context: String,
    /// Text the new history must carry (the unfinished todo list).
    pub carry: String,
}

/// A context engine's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Compressed {
    pub messages: Vec<Message>,
    /// One line for the user.
    pub note: String,
}

/// Why a memory provider, context engine, hook plugin or platform adapter gave no answer.
/// Each variant's text is a whole sentence naming the plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
pub enum PluginError {
    /// It cannot be called: not installed, disabled, not of the kind asked for, gone since the
    /// plugins were reloaded, or its component would not load or does not export what the
    /// kind needs.
    Unavailable(String),
    /// A hook plugin was sent an event it did not ask for.
    NotSubscribed(String),
    /// It returned an error of its own.
    Failed(String),
    /// It did not answer within its deadline and was stopped.
    TimedOut(String),
    /// It trapped, panicked or hit its memory cap.
    Crashed(String),
    /// It answered with more than its output cap, or with something malformed.
    BadAnswer(String),
}

impl PluginError {
    /// The sentence, whichever the variant.
    pub fn message(&self) -> &str {
        match self {
            Self::Unavailable(m)
            | Self::NotSubscribed(m)
            | Self::Failed(m)
            | Self::TimedOut(m)
            | Self::Crashed(m)
            | Self::BadAnswer(m) => m,
        }
    }

    /// The same error with its sentence passed through `f` (to take secret values out).
    #[must_use]
    pub fn map_text(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::Unavailable(m) => Self::Unavailable(f(m)),
            Self::NotSubscribed(m) => Self::NotSubscribed(f(m)),
            Self::Failed(m) => Self::Failed(f(m)),
            Self::TimedOut(m) => Self::TimedOut(f(m)),
            Self::Crashed(m) => Self::Crashed(f(m)),
            Self::BadAnswer(m) => Self::BadAnswer(f(m)),
        }
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for PluginError {}
