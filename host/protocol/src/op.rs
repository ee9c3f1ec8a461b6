//! What a front door asks of a conversation: an [`Op`] per request, answered by events.

use serde::{Deserialize, Serialize};

use crate::Event;

/// A request to a conversation. Each is answered in the event stream: a turn's events for
/// [`Op::UserTurn`] and [`Op::Retry`], the matching event for the others
/// ([`crate::Event::Undone`], [`crate::Event::ModelChanged`]...), or [`crate::Event::Error`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// A user message: runs a turn. Sent while a turn runs, it waits for that turn to end.
    UserTurn {
        text: String,
        /// Images sent with it (for a model that takes them).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<crate::Image>,
        /// Who sent it where several people reach the agent (`PLATFORM:USER_ID` of a chat
        /// platform), as the front door knows them, never as the text claims: the turn counts
        /// against their `[budget]`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sender: Option<String>,
        /// The W3C `traceparent` of the request that carried it (an ACP `_meta`, an API or
        /// webhook header, the gateway's span for the message): the turn's trace continues it.
        /// Only its ids are taken ([`crate::trace`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
    },
    /// Stop the running turn; nothing of the model call in flight is kept.
    Interrupt,
    /// Answer the approval `id` of an [`crate::Event::ApprovalNeeded`].
    Approve { id: u64, decision: Decision },
    /// Answer the question `id` of an [`crate::Event::ClarifyNeeded`].
    Answer { id: u64, text: String },
    /// Summarize older messages now, optionally focused on a topic.
    Compact { focus: Option<String> },
    /// Forget the last user message and everything after it.
    Undo,
    /// Forget the last user message and send it again.
    Retry,
    /// Put files back as they were before the session's last `steps` checkpointed tool calls
    /// (none: list the checkpoints). A file changed since is left alone unless `force`.
    Rollback {
        #[serde(default)]
        steps: Option<u32>,
        #[serde(default)]
        force: bool,
    },
    /// Use another model from the next call on: `[PROVIDER:]NAME`.
    SetModel { model: String },
    /// Name the session.
    SetTitle { title: String },
    /// Let dangerous commands and new hosts go ahead without asking (or stop).
    SetYolo { on: bool },
    /// Tell the running turn something without stopping it: the text is added to the next tool
    /// result the model reads, marked as the user's, and announced by [`crate::Event::Steered`]
    /// (delivered, or not when the turn ends first).
    Steer { text: String },
    /// Close the session and start a new one.
    NewSession,
    /// Close the session and continue a stored one: an id, a unique prefix, a title or
    /// `latest`.
    Resume { key: String },
    /// Report how full the context window is.
    ContextReport,
    /// Run one tool as the model would call it, without the model: through the same stages
    /// (hooks, approval, checkpoint), reported by [`crate::Event::ToolStarted`] and
    /// [`crate::Event::ToolFinished`]. `talaria tools call` sends it.
    CallTool {
        name: String,
        /// The arguments as JSON text (empty: `{}`).
        #[serde(default)]
        arguments: String,
    },
    /// Close the session, wait (briefly) for its background work, and stop. `reason` is kept
    /// as the session's end reason (empty: `exit`).
    Shutdown {
        #[serde(default)]
        reason: String,
    },
}

impl Op {
    /// Whether it is carried out at once, even while a turn runs (the others wait their turn).
    pub fn immediate(&self) -> bool {
        match self {
            Self::Interrupt
            | Self::Approve { .. }
            | Self::Answer { .. }
            | Self::SetYolo { .. }
            | Self::Steer { .. } => true,
            Self::UserTurn { .. }
            | Self::Compact { .. }
            | Self::Undo
            | Self::Retry
            | Self::Rollback { .. }
            | Self::SetModel { .. }
            | Self::SetTitle { .. }
            | Self::NewSession
            | Self::Resume { .. }
            | Self::ContextReport
            | Self::CallTool { .. }
            | Self::Shutdown { .. } => false,
        }
    }

    /// Whether `event` (stamped with this submission's id) is the last one it brings: the end of
    /// its turn, its answer, or an error. [`Op::Interrupt`], [`Op::Approve`] and [`Op::Answer`]
    /// bring none of their own (their effect shows in the running turn).
    pub fn finished_by(&self, event: &Event) -> bool {
        if matches!(event, Event::Error { .. }) {
            return true;
        }
        match self {
            Self::UserTurn { .. } | Self::Retry => matches!(event, Event::TurnEnd(_)),
            Self::Compact { .. } => matches!(event, Event::Compacted { .. }),
            Self::Undo => matches!(event, Event::Undone { .. }),
            Self::Rollback { .. } => matches!(event, Event::RolledBack { .. }),
            Self::SetModel { .. } => matches!(event, Event::ModelChanged { .. }),
            Self::SetTitle { .. } => matches!(event, Event::TitleChanged { .. }),
            Self::SetYolo { .. } => matches!(event, Event::YoloChanged { .. }),
            Self::NewSession | Self::Resume { .. } => matches!(event, Event::SessionStarted(_)),
            Self::ContextReport => matches!(event, Event::ContextReport { .. }),
            Self::CallTool { .. } => matches!(event, Event::ToolFinished(_)),
            Self::Shutdown { .. } => matches!(event, Event::ShutdownComplete),
            Self::Interrupt | Self::Approve { .. } | Self::Answer { .. } | Self::Steer { .. } => false,
        }
    }
}

/// A human's answer to an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run it (or connect) this time.
    Once,
    /// Allow this kind of command (or this host) for the rest of the session.
    Session,
    /// Allow this kind of command (or this host) from now on (saved to the config's allowlist).
    Always,
    Deny,
}

impl Decision {
    /// Its name on the wire (`once`), for messages and traces.
    pub fn name(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Session => "session",
            Self::Always => "always",
            Self::Deny => "deny",
        }
    }
}
