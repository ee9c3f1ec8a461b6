//! The agent: the loop that talks to a model and runs tools, and everything it needs.
//!
//! - [`Agent`]: one session's loop; [`Agent::run_turn`] emits [`Event`]s through an [`Emitter`].
//! - [`model`]: provider adapters (chat completions, Anthropic Messages, Responses), retries, fallback.
//! - [`tools`]: one [`Registry`] of [`ToolHandler`]s, whatever the tool's kind;
//!   [`builtin`]: todo, memory, session_search, clarify, the skills tools, cronjob,
//!   delegate_task; [`toolsets`]: choosing tools.
//! - [`approval`]: asking the human; [`prompt`]: the system prompt; [`history`]: valid role order.
//!
//! - [`extensions`]: hooks, the memory provider and the context engine, seen through traits.
//!
//! Errors are typed at every seam: [`Error`] for starting and saving an agent, and one enum
//! where each module meets its callers ([`toolsets::ToolsetError`], [`images::ImageError`],
//! [`skills::ParseError`], [`skills::SkillError`], [`skills::manage::ManageError`],
//! [`CompressError`], [`ContextReportError`], [`model::ProviderError`], [`model::ModelError`]).
//!
//! The agent never sees wasmtime: `talaria-core` gives it [`ToolSource`]s (and [`Hooks`],
//! [`MemoryProvider`], [`ContextEngine`]) over the plugin runtime and the MCP servers, and a
//! front end's [`ToolOverlay`].

mod agent;
pub mod approval;
mod atomic;
pub mod builtin;
pub mod channel;
pub mod checkpoints;
pub mod extensions;
pub mod history;
pub mod images;
pub mod injection;
pub mod model;
pub mod prompt;
pub mod skills;
pub mod tools;
pub mod toolsets;

pub use agent::{
    Agent, AgentConfig, CompressError, Compression, ContextBudget, ContextReportError, DEFAULT_CONTEXT_LENGTH,
    Registry, Scope, Shared, Start, ToolHandler, ToolOverlay, ToolSource, ToolSources, estimate_tokens,
};
pub use extensions::{ContextEngine, HookReply, Hooks, MemoryProvider, NoHooks};
pub use tools::{BoxFuture, Spilled, ToolContext, spill};

use talaria_protocol::{Event, NoticeLevel};

/// Where the agent's output goes; decides the prompt's closing hint ([`prompt`]) and
/// what a tool may do (a scheduled run schedules nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Platform {
    Cli,
    Acp,
    Gateway,
    Cron,
    Subagent,
    /// `talaria serve`: an OpenAI-compatible or A2A client, another program.
    Api,
}

/// What can stop an agent from starting or saving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] talaria_store::Error),
    #[error(transparent)]
    Toolsets(#[from] toolsets::ToolsetError),
    /// A store task stopped before answering (it panicked).
    #[error("a store task failed: {0}")]
    Task(String),
}

/// Run `f`, a few steps on the store, as one step of the agent: its errors become the agent's,
/// and a panic inside it becomes [`Error::Task`] instead of ending the conversation's task.
///
/// # Errors
/// What `f` returned, or [`Error::Task`] when it panicked.
pub async fn on_store<T>(
    store: &talaria_store::Store,
    f: impl AsyncFnOnce(&talaria_store::Store) -> Result<T, talaria_store::Error>,
) -> Result<T, Error> {
    use futures_util::FutureExt as _;
    match std::panic::AssertUnwindSafe(f(store)).catch_unwind().await {
        Ok(result) => result.map_err(Error::from),
        Err(panic) => Err(Error::Task(panic_text(&*panic))),
    }
}

/// What a caught panic said, as a [`tokio::task::JoinError`] would show it.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let said = panic.downcast_ref::<&str>().copied().or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    format!("task panicked with message {:?}", said.unwrap_or("Box<dyn Any>"))
}

/// Where the loop's events go. Cloning shares the stream; a muted emitter drops everything.
#[derive(Debug, Clone)]
pub struct Emitter {
    tx: Option<channel::Sender<Event>>,
    /// A child agent's label: its tool progress is reported as notices, the rest is dropped.
    child: Option<String>,
}

impl Emitter {
    /// A new stream and its receiving end.
    pub fn channel() -> (Self, channel::Receiver<Event>) {
        let (tx, rx) = channel::unbounded();
        (Self { tx: Some(tx), child: None }, rx)
    }

    pub fn muted() -> Self {
        Self { tx: None, child: None }
    }

    /// An emitter for a child agent: only its tool calls show, as notices labelled `label`.
    pub fn child(&self, label: String) -> Self {
        Self { tx: self.tx.clone(), child: Some(label) }
    }

    pub fn emit(&self, event: Event) {
        let Some(tx) = &self.tx else { return };
        let event = match (&self.child, event) {
            (None, event) => event,
            (Some(label), Event::ToolStarted(t)) => {
                Event::Notice { level: NoticeLevel::Info, text: format!("[{label}] {}", t.preview) }
            }
            (Some(label), Event::Notice { level: NoticeLevel::Warn, text }) => {
                Event::Notice { level: NoticeLevel::Warn, text: format!("[{label}] {text}") }
            }
            (Some(_), _) => return,
        };
        // A front door that went away just stops listening.
        let _ = tx.send(event);
    }

    pub fn warn(&self, text: String) {
        self.emit(Event::Notice { level: NoticeLevel::Warn, text });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Error, on_store};

    fn store() -> (tempfile::TempDir, Arc<talaria_store::Store>) {
        let dir = tempfile::tempdir().expect("dir");
        let store = talaria_store::Store::open(&dir.path().join("state.db")).expect("store");
        (dir, Arc::new(store))
    }

    #[tokio::test]
    async fn a_store_call_that_panics_is_an_error_not_a_crash() {
        let (_dir, store) = store();
        let result: Result<(), Error> = on_store(&store, async |_| panic!("the disk caught fire")).await;
        match result {
            Err(Error::Task(text)) => assert!(text.contains("the disk caught fire"), "{text}"),
            other => panic!("expected a task error, got {other:?}"),
        }
        // The store still answers, and its own errors stay store errors.
        assert!(on_store(&store, async |s| s.session("none").await).await.expect("call").is_none());
        let missing = on_store(&store, async |s| s.system_prompt("none").await).await;
        assert!(matches!(missing, Err(Error::Store(talaria_store::Error::SessionNotFound { .. }))), "{missing:?}");
    }
}
