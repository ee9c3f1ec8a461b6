//! Context engines: decide when the history is too long, and rewrite it.
//!
//! One engine is active at a time (`[context] engine` in config.toml). Before each model call the
//! host asks [`ContextEngine::should_compress`]; when it says yes (or the user typed `/compress`)
//! the host calls [`ContextEngine::compress`] with the history and installs the answer, after
//! checking it is a valid conversation. An error leaves the history as it was.
//!
//! ```ignore
//! use talaria_sdk::context::{CompressRequest, Compressed, ContextEngine, Status};
//! use talaria_sdk::message::{Message, Session};
//!
//! struct KeepTail;
//!
//! impl ContextEngine for KeepTail {
//!     fn should_compress(status: &Status, _session: &Session) -> bool {
//!         status.prompt_tokens * 4 > status.context_length * 3
//!     }
//!
//!     fn compress(request: CompressRequest) -> Result<Compressed, String> {
//!         let keep = request.messages.len().saturating_sub(10);
//!         let mut messages = vec![Message::user("[earlier turns were dropped]")];
//!         messages.extend(request.messages.into_iter().skip(keep));
//!         Ok(Compressed { messages, note: "dropped old turns".into() })
//!     }
//! }
//!
//! talaria_sdk::export_context_engine!(KeepTail);
//! ```

use std::marker::PhantomData;

use crate::__bindings::context::exports::talaria::plugin::context as wit;
use crate::__bindings::talaria::plugin::types::SessionInfo;
use crate::message::{Message, Session};

/// Where the conversation stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Status {
    /// Prompt tokens of the last model call, or the host's estimate of the next one.
    pub prompt_tokens: u64,
    /// The model's context window, in tokens.
    pub context_length: u64,
    /// Messages in the history (the system prompt is not one of them).
    pub message_count: u32,
    /// Times this conversation was compressed already.
    pub compressions: u32,
}

/// A request to rewrite the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressRequest {
    /// The history without the system prompt, oldest first.
    pub messages: Vec<Message>,
    /// What to focus the summary on (`/compress <focus>`), if anything.
    pub focus: Option<String>,
    pub status: Status,
    /// Asked for by the user: compress even below the threshold.
    pub force: bool,
    /// The memory provider's notes on what is being compressed ("" for none).
    pub memory_context: String,
    /// Text the new history must carry verbatim, e.g. the unfinished todo list ("" for none).
    pub carry: String,
    pub session: Session,
}

/// The rewritten history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compressed {
    /// The new history. It must be a valid conversation: roles in a valid order, and every tool
    /// call followed by its results. The host checks and refuses anything else.
    pub messages: Vec<Message>,
    /// One line for the user on what was done.
    pub note: String,
}

/// A context engine. Export it with [`export_context_engine!`](crate::export_context_engine).
pub trait ContextEngine {
    /// Should the history be compressed before the next model call?
    fn should_compress(status: &Status, session: &Session) -> bool;

    /// Rewrite the history.
    ///
    /// # Errors
    ///
    /// Any text: the host logs it, tells the user, and keeps the history as it was.
    fn compress(request: CompressRequest) -> Result<Compressed, String>;

    /// Labelled lines for `talaria context status` (threshold, last summary, ...).
    fn report(status: &Status, session: &Session) -> Vec<(String, String)> {
        let _ = (status, session);
        Vec::new()
    }
}

impl Status {
    fn from_wit(s: wit::Status) -> Self {
        Self {
            prompt_tokens: s.prompt_tokens,
            context_length: s.context_length,
            message_count: s.message_count,
            compressions: s.compressions,
        }
    }
}

impl CompressRequest {
    fn from_wit(r: wit::CompressRequest) -> Self {
        Self {
            messages: Message::list_from_wit(r.messages),
            focus: r.focus,
            status: Status::from_wit(r.status),
            force: r.force,
            memory_context: r.memory_context,
            carry: r.carry,
            session: Session::from_wit(r.session),
        }
    }
}

/// The `context` export for any [`ContextEngine`]; `export_context_engine!` names it.
#[doc(hidden)]
pub struct Engine<E>(PhantomData<E>);

impl<E: ContextEngine> wit::Guest for Engine<E> {
    fn should_compress(status: wit::Status, session: SessionInfo) -> bool {
        E::should_compress(&Status::from_wit(status), &Session::from_wit(session))
    }

    fn compress(request: wit::CompressRequest) -> Result<wit::Compressed, String> {
        let done = E::compress(CompressRequest::from_wit(request))?;
        Ok(wit::Compressed { messages: done.messages.into_iter().map(Message::into_wit).collect(), note: done.note })
    }

    fn report(status: wit::Status, session: SessionInfo) -> Vec<(String, String)> {
        E::report(&Status::from_wit(status), &Session::from_wit(session))
    }
}

/// Export a [`ContextEngine`] as the plugin's `context` interface (world
/// `context-engine-plugin`). The manifest says `kind = ["context-engine"]`.
///
/// ```ignore
/// talaria_sdk::export_context_engine!(MyEngine);
/// ```
#[macro_export]
macro_rules! export_context_engine {
    ($engine:ty $(,)?) => {
        #[doc(hidden)]
        type __TalariaContextExport = $crate::__private::Engine<$engine>;
        $crate::__bindings::context::__export_context_engine_plugin!(
            __TalariaContextExport with_types_in $crate::__bindings::context
        );
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::__bindings::context::exports::talaria::plugin::context::Guest;
    use crate::__bindings::talaria::plugin::types as types_wit;
    use crate::message::Role;

    struct HalfFull;

    impl ContextEngine for HalfFull {
        fn should_compress(status: &Status, _session: &Session) -> bool {
            status.prompt_tokens * 2 > status.context_length
        }

        fn compress(request: CompressRequest) -> Result<Compressed, String> {
            if request.messages.is_empty() {
                return Err("nothing to compress".into());
            }
            let mut messages = vec![Message::user(format!(
                "summary of {} messages, focus {:?}, carry {:?}, memory {:?}, session {}",
                request.messages.len(),
                request.focus,
                request.carry,
                request.memory_context,
                request.session.session_id
            ))];
            messages.extend(request.messages.into_iter().rev().take(1));
            Ok(Compressed { messages, note: format!("forced={}", request.force) })
        }
    }

    fn session() -> SessionInfo {
        SessionInfo { session_id: "s1".into(), platform: "cli".into(), workspace: "/w".into(), model: "m".into() }
    }

    fn status(prompt_tokens: u64) -> wit::Status {
        wit::Status { prompt_tokens, context_length: 1000, message_count: 4, compressions: 0 }
    }

    #[test]
    fn the_export_forwards_to_the_engine() {
        assert!(Engine::<HalfFull>::should_compress(status(600), session()));
        assert!(!Engine::<HalfFull>::should_compress(status(400), session()));
        assert!(Engine::<HalfFull>::report(status(1), session()).is_empty(), "report defaults to no lines");

        let message = |role, content: &str| types_wit::Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: String::new(),
            name: String::new(),
            extra: String::new(),
        };
        let request = wit::CompressRequest {
            messages: vec![message(types_wit::Role::User, "q"), message(types_wit::Role::Assistant, "a")],
            focus: Some("tests".into()),
            status: status(900),
            force: true,
            memory_context: "mem".into(),
            carry: "todo".into(),
            session: session(),
        };
        let done = Engine::<HalfFull>::compress(request).expect("compressed");
        assert_eq!(done.note, "forced=true");
        let messages: Vec<Message> = done.messages.into_iter().map(Message::from_wit).collect();
        assert_eq!(
            messages[0].content,
            "summary of 2 messages, focus Some(\"tests\"), carry \"todo\", memory \"mem\", session s1"
        );
        assert_eq!((messages[1].role, messages[1].content.as_str()), (Role::Assistant, "a"));

        let empty = wit::CompressRequest {
            messages: Vec::new(),
            focus: None,
            status: status(1),
            force: false,
            memory_context: String::new(),
            carry: String::new(),
            session: session(),
        };
        assert_eq!(Engine::<HalfFull>::compress(empty).err().as_deref(), Some("nothing to compress"));
    }
}
