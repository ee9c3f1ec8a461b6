//! What the agent loop reports while it works. Every front door (the terminal, ACP, the gateway)
//! renders the same stream of [`Event`]s; none of them looks inside the loop. A conversation
//! hands them out [`Stamped`] with the session, turn and request they belong to.

use serde::{Deserialize, Serialize};

use crate::extension::ContextStatus;
use crate::message::Usage;
use crate::op::Decision;

/// An [`Event`] with what it belongs to, as a conversation reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamped {
    /// The submission being carried out when it happened (the id `submit` returned); 0 for
    /// none.
    pub op: u64,
    /// The session it belongs to. After [`Event::SessionStarted`], the new one.
    pub session_id: String,
    /// The turn it belongs to (the id of the submission that started the turn), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<u64>,
    pub event: Event,
}

/// One thing that happened in a conversation, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The conversation is in a session from now on: a new one, a stored one continued, or the
    /// child session that compression moved it to.
    SessionStarted(SessionStarted),
    /// A user message was accepted and its turn begins.
    TurnStarted {
        text: String,
    },
    /// A piece of the assistant's visible answer.
    TextDelta {
        text: String,
    },
    /// A piece of the model's reasoning.
    ReasoningDelta {
        text: String,
    },
    /// The streamed assistant message is complete (the next text starts a new one).
    MessageEnd,
    /// The model asked for a tool call; it is checked (hooks, approval) before it runs.
    ToolStarted(ToolStarted),
    /// The call passed its checks (and any approval) and runs now.
    ToolRunning {
        call_id: String,
    },
    /// What a running call's command printed since the last such event (standard output and
    /// error as they arrived, a few times a second at most): for showing while it runs. It is
    /// the command's own text, untrusted; the call's result carries the output for the model.
    ToolOutput {
        call_id: String,
        text: String,
    },
    ToolFinished(ToolFinished),
    /// A dangerous command, or a connection to a host a plugin's wildcard grant allows only in
    /// general, waits for a human; answer with the agent's approval handle.
    ApprovalNeeded(ApprovalNeeded),
    /// An approval was answered (by a human, by yolo, or by its timeout: deny).
    ApprovalResolved {
        id: u64,
        decision: Decision,
    },
    /// A request was let through without asking, by an earlier answer remembered under `key`:
    /// `session` (answered so in this session) or `always` (in config, or answered so).
    ApprovalRemembered {
        /// The tool call it let through (empty when not a tool's).
        call_id: String,
        key: String,
        decision: Decision,
    },
    /// The model asked the user a question (the `clarify` tool); answer with the clarify handle.
    ClarifyNeeded(ClarifyNeeded),
    /// Tokens used by one model call.
    Usage {
        usage: Usage,
        model: String,
    },
    /// A model call was sent and nothing of its answer has arrived yet: a front door may show
    /// a waiting indicator (with the time elapsed) until the next event. Retries of the same
    /// call are announced as notices, not as new requests.
    RequestSent {
        /// `provider/model`, as notices name it.
        model: String,
    },
    /// Something the user should know that is not part of the answer: a retry, a fallback, a
    /// result saved to a file.
    Notice {
        level: NoticeLevel,
        text: String,
    },
    /// The turn is over.
    TurnEnd(TurnEnd),
    /// `Undo` (and `Retry`) forgot this user message and what followed; `None`: nothing to undo.
    Undone {
        text: Option<String>,
    },
    /// `Rollback`: what was restored (or, with no steps, the checkpoints there are), in lines
    /// for people; `ok` false when nothing was restored because of a problem the text names.
    RolledBack {
        text: String,
        ok: bool,
    },
    /// `Compact` is done; the conversation continues in `session_id`.
    Compacted {
        note: String,
        before: usize,
        after: usize,
        session_id: String,
    },
    /// `SetModel`: calls go to this model (`provider/model`) from now on.
    ModelChanged {
        model: String,
    },
    /// `SetTitle`: the session is named.
    TitleChanged {
        title: String,
    },
    /// `SetYolo`: whether dangerous commands and new hosts go ahead without asking.
    YoloChanged {
        on: bool,
    },
    /// What became of a `Steer`: added to a tool result the model will read (`delivered`), or
    /// left over when the turn ended without another tool result (a front door may send it as
    /// the next message).
    Steered {
        text: String,
        delivered: bool,
    },
    /// `ContextReport`: how full the context window is, and the context engine's own lines.
    ContextReport {
        engine: String,
        status: ContextStatus,
        lines: Vec<(String, String)>,
    },
    /// A submission could not be carried out; says why and how to fix it.
    Error {
        text: String,
    },
    /// `Shutdown` is done: the session is closed and nothing more follows.
    ShutdownComplete,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStarted {
    pub session_id: String,
    pub reason: SessionReason,
    /// `provider/model` of the main model.
    pub model: String,
    /// Messages already in it (a resumed or compressed session).
    pub messages: usize,
}

/// Why a conversation is in a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SessionReason {
    New,
    Resumed,
    /// A copy of `from` to carry on in (`--fork`).
    Forked {
        from: String,
    },
    /// Compression summarized `from` into this child session.
    Compressed {
        from: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolStarted {
    pub call_id: String,
    pub name: String,
    /// The raw arguments the model sent.
    pub arguments: String,
    /// A one-line summary for a progress line (`read_file src/main.rs`).
    pub preview: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolFinished {
    pub call_id: String,
    pub name: String,
    /// False when the result is an error.
    pub ok: bool,
    /// The start of the result (or the error), one line.
    pub preview: String,
    /// The whole result as the tool gave it (before a result over the size cap is saved to a
    /// file and cut for the model).
    #[serde(default)]
    pub result: String,
    pub duration_ms: u64,
    /// The workspace files it changed, as read before and after the call: for tools annotated
    /// as writing the paths their arguments name, text files up to a size cap only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<FileChange>,
}

/// How a finished call went, in words for a person: what its result says when it is an error
/// (`{"error": ...}`) or the report of a command (`{"exit_code": ..., "output": ...}`), read from
/// the result without trusting it for anything but display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// Succeeded; nothing more to say.
    Done,
    /// A command it ran exited with this status (0 is success), or was killed (`None`);
    /// `output` is the command's output as reported.
    Command { exit_code: Option<i64>, timed_out: bool, output: String },
    /// Failed: the error's own sentence.
    Failed(String),
}

/// Add `text` a running command printed to `kept`, keeping only its last `max` bytes (cut at a
/// character boundary): what a front end or the loop holds of [`Event::ToolOutput`]s.
///
/// ```
/// let mut kept = String::new();
/// talaria_protocol::keep_output(&mut kept, "line 1\n", 8);
/// talaria_protocol::keep_output(&mut kept, "é2\n", 8);
/// assert_eq!(kept, "e 1\né2\n");
/// talaria_protocol::keep_output(&mut kept, "é", 5);
/// assert_eq!(kept, "2\né", "never half a character");
/// ```
pub fn keep_output(kept: &mut String, text: &str, max: usize) {
    kept.push_str(text);
    if kept.len() > max {
        let mut cut = kept.len() - max;
        while !kept.is_char_boundary(cut) {
            cut += 1;
        }
        kept.drain(..cut);
    }
}

impl CallOutcome {
    /// Whether a person should see this call marked as failed.
    pub fn failed(&self) -> bool {
        match self {
            Self::Done => false,
            Self::Command { exit_code, .. } => *exit_code != Some(0),
            Self::Failed(_) => true,
        }
    }

    /// Whether the call was stopped before it finished (Ctrl-C, Esc, a signal).
    pub fn interrupted(&self) -> bool {
        matches!(self, Self::Failed(text) if text.starts_with("interrupted"))
    }
}

impl ToolFinished {
    /// What the call's result says of how it went (see [`CallOutcome`]).
    ///
    /// ```
    /// # use talaria_protocol::{CallOutcome, ToolFinished};
    /// let mut t = ToolFinished { call_id: "c1".into(), name: "terminal".into(), ok: true, preview: String::new(),
    ///     result: r#"{"exit_code":3,"output":"1\n2\n","timed_out":false}"#.into(), duration_ms: 4, changes: vec![] };
    /// assert_eq!(t.outcome(), CallOutcome::Command { exit_code: Some(3), timed_out: false, output: "1\n2\n".into() });
    /// assert!(t.outcome().failed());
    /// t.ok = false;
    /// t.result = r#"{"error":"denied: the user said no"}"#.into();
    /// assert_eq!(t.outcome(), CallOutcome::Failed("denied: the user said no".into()));
    /// ```
    pub fn outcome(&self) -> CallOutcome {
        let value: Option<serde_json::Value> =
            if self.result.trim_start().starts_with('{') { serde_json::from_str(&self.result).ok() } else { None };
        let field = |name: &str| value.as_ref().and_then(|v| v.get(name));
        if !self.ok {
            let text = field("error").and_then(serde_json::Value::as_str).unwrap_or(&self.preview);
            return CallOutcome::Failed(text.to_string());
        }
        match field("exit_code") {
            Some(code) if code.is_i64() || code.is_null() => CallOutcome::Command {
                exit_code: code.as_i64(),
                timed_out: field("timed_out").and_then(serde_json::Value::as_bool).unwrap_or(false),
                output: field("output").and_then(serde_json::Value::as_str).unwrap_or_default().to_string(),
            },
            _ => CallOutcome::Done,
        }
    }
}

/// One file a tool call changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Absolute, inside the workspace.
    pub path: String,
    /// Its text before the call; `None`: it did not exist.
    pub before: Option<String>,
    /// Its text after the call; `None`: it no longer exists.
    pub after: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalNeeded {
    /// Pass back with the answer.
    pub id: u64,
    /// What is asked: running a command, or connecting to a host.
    #[serde(default)]
    pub kind: ApprovalKind,
    pub plugin: String,
    /// The command; for [`ApprovalKind::Network`], the host (with its port when it is not the
    /// scheme's default).
    pub command: String,
    /// Why it is asked: why the command is dangerous, or the grant that allows the host.
    pub reason: String,
    /// Seconds before no answer counts as "deny".
    pub timeout_secs: u64,
    /// The tool call that asked (empty for a request of a hook, memory provider or context
    /// engine).
    #[serde(default)]
    pub call_id: String,
    /// What a "session" or "always" answer allows from then on without asking: a dangerous
    /// pattern's id (`rm-recursive`: every command it flags) or `net:HOST` (every connection to
    /// the host). Empty when such answers are not remembered (a call a hook flagged).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
}

/// What an approval is about, so a front door can word the question.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// A dangerous shell command (or a tool call a hook flagged).
    #[default]
    Command,
    /// An HTTP connection to a host that only a wildcard network grant (`net:*`) allows.
    Network,
    /// A job the agent wants to schedule (the `cronjob` tool); `command` describes it: what
    /// runs, when, and where its answers go.
    Schedule,
    /// A tool of an MCP server (which runs outside the sandbox, with the user's rights);
    /// `command` is the call: the tool and its arguments.
    McpTool,
    /// A change the agent wants to make to a skill the user wrote (the `skill_manage` tool);
    /// `command` says what: "delete your skill `deploy`".
    Skill,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClarifyNeeded {
    pub id: u64,
    pub question: String,
    /// Suggested answers; the user may also type their own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeLevel {
    Info,
    Warn,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    pub outcome: Outcome,
    /// The final answer shown to the user (empty when interrupted or failed).
    pub text: String,
    /// What arrived of a reply whose stream broke before its end (outcome `failed`), or that
    /// the user cut short (`interrupted`): to be shown marked as cut, never kept in history.
    /// Empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub partial: String,
    /// Usage of the whole turn.
    pub usage: Usage,
    /// Model calls made in this turn.
    pub api_calls: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum Outcome {
    /// The model answered.
    Completed,
    /// The user stopped it: nothing of the model call in flight was kept (what it streamed is
    /// `partial`; its usage, estimated, is in `usage`), the tool calls that ran before were,
    /// with their results.
    Interrupted,
    /// The iteration budget ran out; `text` is a summary of the work done.
    BudgetExhausted,
    /// The answer was cut off by the output-token limit (`finish_reason: length`, Anthropic's
    /// `max_tokens`, Responses' `max_output_tokens`); `text` is what arrived, and it was kept
    /// in the session marked as cut.
    Truncated,
    /// Every provider failed; the detail says why.
    Failed(String),
    /// Not run (no model was called and the message was not kept): a spending limit of
    /// `[budget]` is reached. The detail names it, what was spent and when it resets.
    Refused(String),
}

impl Outcome {
    /// Its serialized kind: `completed`, `interrupted`, `budget_exhausted`, `truncated`,
    /// `failed` or `refused`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Interrupted => "interrupted",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Truncated => "truncated",
            Self::Failed(_) => "failed",
            Self::Refused(_) => "refused",
        }
    }
}
