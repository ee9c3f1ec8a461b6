//! Memory providers: recall for each user message, and a record of every finished turn.
//!
//! One provider is active at a time (`[memory] provider` in config.toml), beside the built-in
//! MEMORY.md and USER.md. The host keeps **one instance alive** across calls (and re-creates it
//! after a trap), so an index in a `static` is fine; anything that must survive a restart goes to
//! [`kv`](crate::kv).
//!
//! ```ignore
//! use talaria_sdk::memory::MemoryProvider;
//! use talaria_sdk::message::Session;
//!
//! struct Notes;
//!
//! impl MemoryProvider for Notes {
//!     fn prefetch(query: &str, _session: &Session) -> Result<String, String> {
//!         let note: Option<String> = talaria_sdk::kv::get_json("note").map_err(|e| e.to_string())?;
//!         Ok(note.filter(|n| query.contains("note")).unwrap_or_default())
//!     }
//!
//!     fn sync_turn(user: &str, _assistant: &str, _session: &Session) -> Result<(), String> {
//!         talaria_sdk::kv::set_json("note", &user).map_err(|e| e.to_string())
//!     }
//! }
//!
//! talaria_sdk::export_memory!(Notes);
//! ```

use std::marker::PhantomData;

use crate::__bindings::memory::exports::talaria::plugin::memory as wit;
use crate::__bindings::talaria::plugin::types::{Message as WitMessage, SessionInfo};
use crate::message::{Message, Session};

/// A memory provider. Export it with [`export_memory!`](crate::export_memory).
///
/// Only [`prefetch`](Self::prefetch) and [`sync_turn`](Self::sync_turn) are required. An `Err`
/// is logged by the host and otherwise treated like an empty answer: memory never stops a turn.
pub trait MemoryProvider {
    /// Text added to the system prompt when a session starts ("" for none).
    fn system_prompt_block(session: &Session) -> Result<String, String> {
        let _ = session;
        Ok(String::new())
    }

    /// Recall for the user's new message ("" for none). The host adds it to that message for the
    /// model calls of this turn only; it is never stored. Return "" for trivial messages.
    fn prefetch(query: &str, session: &Session) -> Result<String, String>;

    /// A finished turn: the user's message and the final answer. Runs in the background.
    fn sync_turn(user: &str, assistant: &str, session: &Session) -> Result<(), String>;

    /// These messages are about to be compressed away: text the summary should take into
    /// account ("" for none).
    fn on_pre_compress(messages: &[Message], session: &Session) -> Result<String, String> {
        let _ = (messages, session);
        Ok(String::new())
    }

    /// The session ended (exit, `/new`, or compression into a child session).
    fn on_session_end(messages: &[Message], session: &Session) -> Result<(), String> {
        let _ = (messages, session);
        Ok(())
    }

    /// The built-in memory tool changed MEMORY.md or USER.md.
    /// `action`: `add`, `replace` or `remove`; `target`: `memory` or `user`.
    fn on_memory_write(action: &str, target: &str, content: &str, session: &Session) -> Result<(), String> {
        let _ = (action, target, content, session);
        Ok(())
    }
}

/// The `memory` export for any [`MemoryProvider`]; `export_memory!` names it.
#[doc(hidden)]
pub struct Provider<P>(PhantomData<P>);

fn messages(list: Vec<WitMessage>) -> Vec<Message> {
    Message::list_from_wit(list)
}

impl<P: MemoryProvider> wit::Guest for Provider<P> {
    fn system_prompt_block(session: SessionInfo) -> Result<String, String> {
        P::system_prompt_block(&Session::from_wit(session))
    }

    fn prefetch(query: String, session: SessionInfo) -> Result<String, String> {
        P::prefetch(&query, &Session::from_wit(session))
    }

    fn sync_turn(user: String, assistant: String, session: SessionInfo) -> Result<(), String> {
        P::sync_turn(&user, &assistant, &Session::from_wit(session))
    }

    fn on_pre_compress(list: Vec<WitMessage>, session: SessionInfo) -> Result<String, String> {
        P::on_pre_compress(&messages(list), &Session::from_wit(session))
    }

    fn on_session_end(list: Vec<WitMessage>, session: SessionInfo) -> Result<(), String> {
        P::on_session_end(&messages(list), &Session::from_wit(session))
    }

    fn on_memory_write(action: String, target: String, content: String, session: SessionInfo) -> Result<(), String> {
        P::on_memory_write(&action, &target, &content, &Session::from_wit(session))
    }
}

/// Export a [`MemoryProvider`] (world `memory-plugin`), optionally with tools of its own. The
/// manifest says `kind = ["memory"]`.
///
/// Tools are written exactly as for [`export_tools!`](crate::export_tools):
///
/// ```ignore
/// talaria_sdk::export_memory!(Journal);
///
/// // or, with tools:
/// talaria_sdk::export_memory!(Journal, tools: {
///     /// Search the journal of earlier sessions.
///     journal_search,
/// });
/// ```
#[macro_export]
macro_rules! export_memory {
    ($provider:ty, tools: { $( $(#[doc = $doc:literal])* $tool:ident ),* $(,)? } $(,)?) => {
        $crate::__tool_set!(__TalariaMemoryTools { $( $(#[doc = $doc])* $tool ),* });
        #[doc(hidden)]
        type __TalariaToolsExport = $crate::__private::Tools<__TalariaMemoryTools>;
        #[doc(hidden)]
        type __TalariaMemoryExport = $crate::__private::Provider<$provider>;
        // `tools` goes out through the tool-plugin bindings and `memory` through the memory
        // bindings; together they are world `memory-plugin` (see `__bindings`).
        $crate::__bindings::tool::__export_tool_plugin!(__TalariaToolsExport with_types_in $crate::__bindings::tool);
        $crate::__bindings::memory::__export_memory_plugin!(
            __TalariaMemoryExport with_types_in $crate::__bindings::memory
        );
    };
    ($provider:ty $(,)?) => {
        $crate::export_memory!($provider, tools: {});
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::__bindings::memory::exports::talaria::plugin::memory::Guest;
    use crate::__bindings::talaria::plugin::types as types_wit;

    struct Echo;

    impl MemoryProvider for Echo {
        fn prefetch(query: &str, session: &Session) -> Result<String, String> {
            if query.is_empty() { Err("empty".into()) } else { Ok(format!("{query}@{}", session.session_id)) }
        }

        fn sync_turn(user: &str, assistant: &str, _session: &Session) -> Result<(), String> {
            if user == assistant { Err("same".into()) } else { Ok(()) }
        }

        fn on_pre_compress(messages: &[Message], _session: &Session) -> Result<String, String> {
            Ok(messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("|"))
        }
    }

    fn session() -> SessionInfo {
        SessionInfo { session_id: "s9".into(), platform: "cli".into(), workspace: "/w".into(), model: "m".into() }
    }

    #[test]
    fn the_export_forwards_to_the_provider_and_defaults_are_empty() {
        assert_eq!(Provider::<Echo>::prefetch("q".into(), session()), Ok("q@s9".into()));
        assert_eq!(Provider::<Echo>::prefetch(String::new(), session()), Err("empty".into()));
        assert_eq!(Provider::<Echo>::sync_turn("a".into(), "a".into(), session()), Err("same".into()));
        assert_eq!(Provider::<Echo>::system_prompt_block(session()), Ok(String::new()));
        assert_eq!(Provider::<Echo>::on_session_end(Vec::new(), session()), Ok(()));
        assert_eq!(Provider::<Echo>::on_memory_write("add".into(), "memory".into(), "x".into(), session()), Ok(()));
        let msgs = vec![Message::user("one").into_wit(), Message::assistant("two").into_wit()];
        let _: &[types_wit::Message] = &msgs;
        assert_eq!(Provider::<Echo>::on_pre_compress(msgs, session()), Ok("one|two".into()));
    }
}
