//! How the loop sees the plugin kinds beside tools: [`Hooks`], a [`MemoryProvider`] and a
//! [`ContextEngine`]. The CLI implements them over the plugin runtime; the agent never sees
//! wasmtime. Every method reports a plugin's failure as `Err(text)`; the loop decides what a
//! failure means (a failed `pre_tool_call` hook blocks the call, a failed prefetch is skipped).

use talaria_protocol::{
    CompressRequest, Compressed, ContextStatus, HookDecision, HookEvent, HookKind, Message, PluginError, PluginSession,
};

use crate::tools::BoxFuture;

/// One hook plugin's answer to an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookReply {
    pub plugin: String,
    /// `Err` when the hook failed or did not answer in time; the text says which.
    pub decision: Result<HookDecision, PluginError>,
}

/// The hook plugins.
pub trait Hooks: Send + Sync {
    /// Whether any hook wants events of `kind` (so the loop builds no event nobody reads).
    fn wants(&self, kind: HookKind) -> bool;

    /// Call every hook that wants `event`, in order, and return their answers in that order.
    fn dispatch<'a>(&'a self, event: &'a HookEvent, session: &'a PluginSession) -> BoxFuture<'a, Vec<HookReply>>;
}

/// No hooks.
pub struct NoHooks;

impl Hooks for NoHooks {
    fn wants(&self, _: HookKind) -> bool {
        false
    }

    fn dispatch<'a>(&'a self, _: &'a HookEvent, _: &'a PluginSession) -> BoxFuture<'a, Vec<HookReply>> {
        Box::pin(async { Vec::new() })
    }
}

/// The one active external memory provider (the built-in MEMORY.md / USER.md stay on beside it).
pub trait MemoryProvider: Send + Sync {
    fn name(&self) -> &str;

    /// Text for the system prompt of a new session.
    fn system_prompt_block<'a>(&'a self, session: &'a PluginSession) -> BoxFuture<'a, Result<String, PluginError>>;

    /// Recall for the user's new message, added to it for this turn's model calls only.
    fn prefetch<'a>(&'a self, query: &'a str, session: &'a PluginSession)
    -> BoxFuture<'a, Result<String, PluginError>>;

    /// Remember a finished turn. The loop runs it in the background.
    fn sync_turn<'a>(
        &'a self,
        user: &'a str,
        assistant: &'a str,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<(), PluginError>>;

    /// Notes for the summary of messages about to be compressed away.
    fn on_pre_compress<'a>(
        &'a self,
        messages: &'a [Message],
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<String, PluginError>>;

    /// The session ended.
    fn on_session_end<'a>(
        &'a self,
        messages: &'a [Message],
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<(), PluginError>>;

    /// The built-in memory tool changed MEMORY.md or USER.md.
    fn on_memory_write<'a>(
        &'a self,
        action: &'a str,
        target: &'a str,
        content: &'a str,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<(), PluginError>>;
}

/// The active context engine: decides when history is too long and rewrites it.
pub trait ContextEngine: Send + Sync {
    fn name(&self) -> &str;

    fn should_compress<'a>(
        &'a self,
        status: ContextStatus,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<bool, PluginError>>;

    fn compress<'a>(
        &'a self,
        request: CompressRequest,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<Compressed, PluginError>>;

    /// Labelled lines for `talaria context status`.
    fn report<'a>(
        &'a self,
        status: ContextStatus,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, PluginError>>;
}
