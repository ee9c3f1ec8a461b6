//! Hooks: observe the agent loop, add context, block a tool call or demand a human's approval.
//!
//! A hook plugin lists the events it wants in its manifest (`[hook] events = [...]`) and is called
//! only for those, each call under a deadline. Which [`Decision`] counts depends on the event
//! (see [`Decision`]); any other answer is ignored with a warning. Nothing a hook returns can
//! approve a command or widen a grant.
//!
//! ```ignore
//! use talaria_sdk::hooks::{Decision, Event, Hooks};
//!
//! struct NoPush;
//!
//! impl Hooks for NoPush {
//!     fn on_event(event: Event) -> Decision {
//!         match event {
//!             Event::PreToolCall(call) if call.tool == "terminal" && call.arguments.contains("git push") => {
//!                 Decision::RequireApproval("pushing needs a human".into())
//!             }
//!             _ => Decision::Proceed,
//!         }
//!     }
//! }
//!
//! talaria_sdk::export_hooks!(NoPush);
//! ```

use std::marker::PhantomData;

use crate::__bindings::hook::exports::talaria::plugin::hooks as wit;
use crate::message::Session;

/// A tool call about to run (`pre_tool_call`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCallEvent {
    pub session: Session,
    pub tool: String,
    /// The plugin providing the tool ("" for the host's own tools).
    pub plugin: String,
    /// The model's JSON arguments.
    pub arguments: String,
    pub call_id: String,
}

/// A tool call that ran (`post_tool_call`, `transform_tool_result`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolResultEvent {
    pub session: Session,
    pub tool: String,
    pub plugin: String,
    pub arguments: String,
    pub call_id: String,
    /// What the model will see (a JSON error when `ok` is false).
    pub result: String,
    pub ok: bool,
    pub duration_ms: u64,
}

/// A model call about to be made (`pre_llm_call`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LlmCallEvent {
    pub session: Session,
    /// The user's message this turn answers.
    pub user_message: String,
    /// The session's first turn.
    pub is_first_turn: bool,
    pub model: String,
    /// Messages in the history, without the system prompt.
    pub message_count: u32,
}

/// A model reply (`post_llm_call`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LlmReplyEvent {
    pub session: Session,
    pub user_message: String,
    /// The model's text (empty when it only called tools).
    pub assistant_response: String,
    pub model: String,
}

/// A turn ended (`on_session_end`) or the session closed (`on_session_finalize`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionEndEvent {
    pub session: Session,
    /// `completed`, `interrupted`, `budget_exhausted`, `failed`; for finalize: `exit`, `new`,
    /// `resume`, `compressed`.
    pub reason: String,
}

/// A child agent finished (`subagent_stop`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubagentEvent {
    pub parent_session_id: String,
    pub child_session_id: String,
    pub goal: String,
    /// The child's final answer.
    pub summary: String,
    /// `completed`, `interrupted`, `budget_exhausted` or `failed`.
    pub status: String,
    pub duration_ms: u64,
}

/// Something that happened in the agent loop. Each variant is called only when the manifest's
/// `[hook] events` lists its name ([`Event::name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Before a tool runs. May answer [`Decision::Block`] or [`Decision::RequireApproval`].
    PreToolCall(ToolCallEvent),
    /// After a tool ran.
    PostToolCall(ToolResultEvent),
    /// After a tool ran: may answer [`Decision::ReplaceResult`].
    TransformToolResult(ToolResultEvent),
    /// Before each model call. May answer [`Decision::AddContext`].
    PreLlmCall(LlmCallEvent),
    /// After each model reply.
    PostLlmCall(LlmReplyEvent),
    /// The session's first turn is about to start.
    SessionStart(Session),
    /// A turn (one user message) ended.
    SessionEnd(SessionEndEvent),
    /// The session is closing for good in this process.
    SessionFinalize(SessionEndEvent),
    /// The user started over (`/new`).
    SessionReset(Session),
    /// A child agent finished.
    SubagentStop(SubagentEvent),
}

impl Event {
    /// The event's name in plugin.toml's `[hook] events`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::PreToolCall(_) => "pre_tool_call",
            Self::PostToolCall(_) => "post_tool_call",
            Self::TransformToolResult(_) => "transform_tool_result",
            Self::PreLlmCall(_) => "pre_llm_call",
            Self::PostLlmCall(_) => "post_llm_call",
            Self::SessionStart(_) => "on_session_start",
            Self::SessionEnd(_) => "on_session_end",
            Self::SessionFinalize(_) => "on_session_finalize",
            Self::SessionReset(_) => "on_session_reset",
            Self::SubagentStop(_) => "subagent_stop",
        }
    }

    /// The session the event concerns; `None` for [`Event::SubagentStop`], which names its
    /// parent and child sessions by id.
    pub fn session(&self) -> Option<&Session> {
        match self {
            Self::PreToolCall(e) => Some(&e.session),
            Self::PostToolCall(e) | Self::TransformToolResult(e) => Some(&e.session),
            Self::PreLlmCall(e) => Some(&e.session),
            Self::PostLlmCall(e) => Some(&e.session),
            Self::SessionStart(s) | Self::SessionReset(s) => Some(s),
            Self::SessionEnd(e) | Self::SessionFinalize(e) => Some(&e.session),
            Self::SubagentStop(_) => None,
        }
    }
}

/// A hook's answer.
///
/// | answer | counts for |
/// |---|---|
/// | `Proceed` | every event (the only answer for events that are only observed) |
/// | `Block(why)` | `PreToolCall`: the tool does not run; `why` goes to the model as its error |
/// | `RequireApproval(why)` | `PreToolCall`: the tool runs only if a human approves |
/// | `AddContext(text)` | `PreLlmCall`: added to the user's message for this call only |
/// | `ReplaceResult(text)` | `TransformToolResult`: the result the model sees instead |
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Proceed,
    Block(String),
    RequireApproval(String),
    AddContext(String),
    ReplaceResult(String),
}

/// A hook plugin. Export it with [`export_hooks!`](crate::export_hooks).
pub trait Hooks {
    /// Handle one event. Return [`Decision::Proceed`] for anything you only observe.
    fn on_event(event: Event) -> Decision;
}

impl Event {
    fn from_wit(event: wit::Event) -> Self {
        match event {
            wit::Event::PreToolCall(e) => Self::PreToolCall(ToolCallEvent {
                session: Session::from_wit(e.session),
                tool: e.tool,
                plugin: e.plugin,
                arguments: e.arguments,
                call_id: e.call_id,
            }),
            wit::Event::PostToolCall(e) => Self::PostToolCall(ToolResultEvent::from_wit(e)),
            wit::Event::TransformToolResult(e) => Self::TransformToolResult(ToolResultEvent::from_wit(e)),
            wit::Event::PreLlmCall(e) => Self::PreLlmCall(LlmCallEvent {
                session: Session::from_wit(e.session),
                user_message: e.user_message,
                is_first_turn: e.is_first_turn,
                model: e.model,
                message_count: e.message_count,
            }),
            wit::Event::PostLlmCall(e) => Self::PostLlmCall(LlmReplyEvent {
                session: Session::from_wit(e.session),
                user_message: e.user_message,
                assistant_response: e.assistant_response,
                model: e.model,
            }),
            wit::Event::SessionStart(s) => Self::SessionStart(Session::from_wit(s)),
            wit::Event::SessionEnd(e) => Self::SessionEnd(SessionEndEvent::from_wit(e)),
            wit::Event::SessionFinalize(e) => Self::SessionFinalize(SessionEndEvent::from_wit(e)),
            wit::Event::SessionReset(s) => Self::SessionReset(Session::from_wit(s)),
            wit::Event::SubagentStop(e) => Self::SubagentStop(SubagentEvent {
                parent_session_id: e.parent_session_id,
                child_session_id: e.child_session_id,
                goal: e.goal,
                summary: e.summary,
                status: e.status,
                duration_ms: e.duration_ms,
            }),
        }
    }
}

impl ToolResultEvent {
    fn from_wit(e: wit::ToolResultEvent) -> Self {
        Self {
            session: Session::from_wit(e.session),
            tool: e.tool,
            plugin: e.plugin,
            arguments: e.arguments,
            call_id: e.call_id,
            result: e.result,
            ok: e.ok,
            duration_ms: e.duration_ms,
        }
    }
}

impl SessionEndEvent {
    fn from_wit(e: wit::SessionEndEvent) -> Self {
        Self { session: Session::from_wit(e.session), reason: e.reason }
    }
}

impl Decision {
    fn into_wit(self) -> wit::Decision {
        match self {
            Self::Proceed => wit::Decision::Proceed,
            Self::Block(m) => wit::Decision::Block(m),
            Self::RequireApproval(m) => wit::Decision::RequireApproval(m),
            Self::AddContext(m) => wit::Decision::AddContext(m),
            Self::ReplaceResult(m) => wit::Decision::ReplaceResult(m),
        }
    }
}

/// The `hooks` export for any [`Hooks`]; `export_hooks!` names it.
#[doc(hidden)]
pub struct HookSet<H>(PhantomData<H>);

impl<H: Hooks> wit::Guest for HookSet<H> {
    fn on_event(event: wit::Event) -> wit::Decision {
        H::on_event(Event::from_wit(event)).into_wit()
    }
}

/// Export a [`Hooks`] implementation as the plugin's `hooks` interface (world `hook-plugin`).
/// The manifest says `kind = ["hook"]` and lists the events under `[hook] events`.
///
/// ```ignore
/// talaria_sdk::export_hooks!(MyHooks);
/// ```
#[macro_export]
macro_rules! export_hooks {
    ($hooks:ty $(,)?) => {
        #[doc(hidden)]
        type __TalariaHooksExport = $crate::__private::HookSet<$hooks>;
        $crate::__bindings::hook::__export_hook_plugin!(__TalariaHooksExport with_types_in $crate::__bindings::hook);
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::__bindings::hook::exports::talaria::plugin::hooks::Guest;
    use crate::__bindings::talaria::plugin::types::SessionInfo;

    struct Echo;

    impl Hooks for Echo {
        fn on_event(event: Event) -> Decision {
            let name = event.name();
            match event {
                Event::PreToolCall(c) if c.tool == "rm" => Decision::Block(format!("{name}: {}", c.arguments)),
                Event::TransformToolResult(r) => {
                    Decision::ReplaceResult(format!("{}|{}|{}", r.result, r.ok, r.duration_ms))
                }
                Event::SubagentStop(s) => Decision::AddContext(s.child_session_id),
                other => Decision::AddContext(other.session().map(|s| s.session_id.clone()).unwrap_or_default()),
            }
        }
    }

    fn session() -> SessionInfo {
        SessionInfo { session_id: "s".into(), platform: "cli".into(), workspace: "/w".into(), model: "m".into() }
    }

    fn result_event() -> wit::ToolResultEvent {
        wit::ToolResultEvent {
            session: session(),
            tool: "t".into(),
            plugin: "p".into(),
            arguments: "{}".into(),
            call_id: "c".into(),
            result: "r".into(),
            ok: true,
            duration_ms: 7,
        }
    }

    #[test]
    fn events_arrive_converted_and_decisions_go_back() {
        let call = wit::ToolCallEvent {
            session: session(),
            tool: "rm".into(),
            plugin: String::new(),
            arguments: "{\"path\":\"/\"}".into(),
            call_id: "c".into(),
        };
        assert!(matches!(
            HookSet::<Echo>::on_event(wit::Event::PreToolCall(call)),
            wit::Decision::Block(m) if m == "pre_tool_call: {\"path\":\"/\"}"
        ));
        assert!(matches!(
            HookSet::<Echo>::on_event(wit::Event::TransformToolResult(result_event())),
            wit::Decision::ReplaceResult(m) if m == "r|true|7"
        ));
        assert!(matches!(
            HookSet::<Echo>::on_event(wit::Event::SessionReset(session())),
            wit::Decision::AddContext(m) if m == "s"
        ));
        let sub = wit::SubagentEvent {
            parent_session_id: "p".into(),
            child_session_id: "child".into(),
            goal: "g".into(),
            summary: "done".into(),
            status: "completed".into(),
            duration_ms: 1,
        };
        assert!(matches!(
            HookSet::<Echo>::on_event(wit::Event::SubagentStop(sub)),
            wit::Decision::AddContext(m) if m == "child"
        ));
    }

    #[test]
    fn event_names_match_the_manifest() {
        let s = Session::default();
        let end = SessionEndEvent::default();
        let names: Vec<&str> = [
            Event::PreToolCall(ToolCallEvent::default()),
            Event::PostToolCall(ToolResultEvent::default()),
            Event::TransformToolResult(ToolResultEvent::default()),
            Event::PreLlmCall(LlmCallEvent::default()),
            Event::PostLlmCall(LlmReplyEvent::default()),
            Event::SessionStart(s.clone()),
            Event::SessionEnd(end.clone()),
            Event::SessionFinalize(end),
            Event::SessionReset(s),
            Event::SubagentStop(SubagentEvent::default()),
        ]
        .iter()
        .map(Event::name)
        .collect();
        assert_eq!(
            names,
            [
                "pre_tool_call",
                "post_tool_call",
                "transform_tool_result",
                "pre_llm_call",
                "post_llm_call",
                "on_session_start",
                "on_session_end",
                "on_session_finalize",
                "on_session_reset",
                "subagent_stop"
            ]
        );
    }
}
