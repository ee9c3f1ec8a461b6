//! What a conversation keeps between turns: an [`Agent`] waiting for its next message can let go
//! of its history and system prompt ([`Agent::rest`]), which the store keeps anyway, and read them
//! back when the message comes ([`Agent::wake`]). A front door's conversations rest the sessions
//! that wait.

use talaria_protocol::Message;
use talaria_store::Store;

use super::Agent;
use crate::Error;

/// How far `stored` (a session's active messages, oldest first) goes: their count and the last
/// one's id, as [`Store::message_mark`] reads it.
pub(super) fn mark_of(stored: &[talaria_store::StoredMessage]) -> (i64, i64) {
    (i64::try_from(stored.len()).unwrap_or(i64::MAX), stored.last().map_or(0, |m| m.id))
}

/// The messages stored for session `id`, oldest first.
pub(super) async fn history_of(store: &Store, id: &str) -> Result<Vec<Message>, talaria_store::Error> {
    Ok(store.messages(id).await?.into_iter().map(|m| m.message).collect())
}

impl Agent {
    /// Let go of what the store keeps anyway, the history and the system prompt, until
    /// [`Agent::wake`]: a session that waits between messages then holds little. A session
    /// not stored yet (no turn) keeps them: its prompt exists nowhere else.
    pub fn rest(&mut self) {
        if !self.stored || self.resting {
            return;
        }
        self.history = Vec::new();
        self.system_prompt = String::new();
        self.resting = true;
    }

    /// About how many bytes the history it holds takes (its texts, calls and images, and each
    /// message's own size): what [`Agent::rest`] would give back.
    pub fn held_bytes(&self) -> usize {
        self.history.iter().map(bytes_of).sum::<usize>() + self.system_prompt.len()
    }

    /// Whether it let go of its session ([`Agent::rest`]) and has not read it back since.
    pub fn is_resting(&self) -> bool {
        self.resting
    }

    /// Read again what [`Agent::rest`] let go of (nothing to do unless resting). Another
    /// process's changes meanwhile are loaded too, and told at the next turn's catch-up as
    /// before.
    ///
    /// # Errors
    /// The store cannot be read; the agent stays resting and the next call tries again.
    pub async fn wake(&mut self) -> Result<(), Error> {
        self.wake_marked().await.map(|_| ())
    }

    /// [`Agent::wake`]; the session's mark ([`Store::message_mark`]) as the history read back
    /// shows it, when it was read back.
    pub(super) async fn wake_marked(&mut self) -> Result<Option<(i64, i64)>, Error> {
        if !self.resting {
            return Ok(None);
        }
        let (prompt, stored) =
            crate::on_store(&self.shared.store, async |store| store.history(&self.session_id).await).await?;
        let mark = mark_of(&stored);
        self.history = stored.into_iter().map(|m| m.message).collect();
        self.system_prompt = prompt;
        self.resting = false;
        Ok(Some(mark))
    }
}

/// About how many bytes `m` holds (see [`Agent::held_bytes`]); provider data kept verbatim
/// counts as a small fixed size rather than being measured.
fn bytes_of(m: &Message) -> usize {
    let images =
        |images: &[talaria_protocol::Image]| images.iter().map(|i| i.data.len() + i.media_type.len()).sum::<usize>();
    let texts: usize = match m {
        Message::System { content } => content.len(),
        Message::User { content, images: i } => content.len() + images(i),
        Message::Assistant { content, tool_calls, reasoning, extra } => {
            content.len()
                + tool_calls.iter().map(|c| c.id.len() + c.name.len() + c.arguments.len()).sum::<usize>()
                + reasoning.as_ref().map_or(0, String::len)
                + extra.as_ref().map_or(0, |_| 256)
        }
        Message::Tool { tool_call_id, name, content, images: i } => {
            tool_call_id.len() + name.len() + content.len() + images(i)
        }
    };
    std::mem::size_of::<Message>() + texts
}
