//! A message a dead process left running: how far it got, from what it committed to the session.

use talaria_core::store::inbox::Entry;
use talaria_protocol::Message;

use super::Worker;

/// How to finish a message a dead process left running.
pub(super) enum Recovery {
    /// Its answer was committed: send it.
    Answered(String),
    /// Its user message was committed, not the answer: forget the partial turn and run it again.
    Again,
    /// Nothing of it was committed: run it.
    Fresh,
}

impl Worker {
    /// How far a dead process got with `entry`, from what it committed to the session.
    pub(super) async fn recovery(&self, entry: &Entry) -> Recovery {
        let (Some(session_id), Some(count)) = (&entry.session_id, entry.started_count) else {
            return Recovery::Fresh;
        };
        if *session_id != self.conversation.info().session_id {
            return Recovery::Fresh;
        }
        let messages = match self.gateway.store.messages(session_id).await {
            Ok(messages) => messages,
            Err(e) => {
                tracing::warn!(session = %self.key, "cannot read the session to finish a turn: {e}");
                return Recovery::Fresh;
            }
        };
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        if messages.len() <= count {
            // The message was kept in the inbox, and a turn stores it with its answer.
            tracing::info!(session = %self.key, message_id = %entry.message_id, "a dead process stored nothing of this turn; running it again");
            return Recovery::Fresh;
        }
        match messages.last().map(|m| &m.message) {
            Some(Message::Assistant { content, tool_calls, .. })
                if tool_calls.is_empty() && messages.len() > count + 1 =>
            {
                Recovery::Answered(content.clone())
            }
            _ => Recovery::Again,
        }
    }
}
