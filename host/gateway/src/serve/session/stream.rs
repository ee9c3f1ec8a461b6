//! The answer shown while it is written: "typing" while a turn runs, and the reply streamed into
//! one message edited at the platform's pace.

use std::sync::atomic::Ordering;
use std::time::Instant;

use talaria_core::runtime::adapter::{AccountInfo, Outbound};
use talaria_core::store::inbox::SENDING;

use super::{Worker, commit};
use crate::serve::outbox;

impl Worker {
    /// Show that the bot is writing, without waiting for the platform: the turn goes on
    /// meanwhile. One at a time per chat.
    pub(super) fn typing(&mut self) {
        if !self.account.adapter.is_connected() {
            return;
        }
        let Some(turn) = &mut self.turn else { return };
        turn.last_typing = Instant::now();
        if turn.typing.swap(true, Ordering::SeqCst) {
            return;
        }
        let (account, flag) = (self.account.clone(), turn.typing.clone());
        let (chat_id, thread_id) = (self.chat.chat_id.clone(), self.chat.thread_id.clone());
        tokio::spawn(async move {
            if let Err(e) = account.adapter.typing(&chat_id, thread_id.as_deref()).await {
                tracing::debug!(account = %account.name, "typing: {e}");
            }
            flag.store(false, Ordering::SeqCst);
        });
    }

    /// When the answer so far should be shown next: text the platform was not given yet waits
    /// for the platform's edit pace. `None` when nothing waits (or the reply does not stream:
    /// a webhook answers once, some platforms cannot edit).
    pub(super) fn edit_due(&self, info: &AccountInfo) -> Option<Instant> {
        let turn = self.turn.as_ref()?;
        if turn.entry.respond
            || turn.shown >= turn.text.len()
            || turn.text.trim().is_empty()
            || commit::lock(&turn.stream).closed
        {
            return None;
        }
        info.can_edit.then(|| turn.last_edit + info.edit_interval)
    }

    /// When the streamed message should be edited with text that came since: only once a
    /// message streams (the first one goes out as text comes, [`Worker::stream`]). A timer
    /// never sends the first: a turn whose text is all there but not committed (the store is
    /// down) would show it, and the turn run again would send it a second time.
    pub(super) fn trailing_edit_due(&self) -> Option<Instant> {
        self.turn.as_ref()?.streamed()?;
        self.edit_due(&self.account.info()?)
    }

    /// Show the answer so far, by editing the streamed message, at the platform's pace: text
    /// that comes sooner waits for the next edit (once a message streams, a timer sends it:
    /// [`Worker::trailing_edit_due`]), so every edit carries all the text so far and none is
    /// held back until the end.
    pub(super) async fn stream(&mut self) {
        let Some(info) = self.account.info() else { return };
        if self.edit_due(&info).is_none_or(|due| due > Instant::now()) {
            return;
        }
        let Some(turn) = &mut self.turn else { return };
        turn.last_edit = Instant::now();
        turn.shown = turn.text.len();
        let Some((text, plain)) = outbox::render_parts(&turn.text, &info).into_iter().next() else { return };
        let message = Outbound {
            chat_id: self.chat.chat_id.clone(),
            thread_id: self.chat.thread_id.clone(),
            text,
            plain,
            reply_to: None,
            buttons: Vec::new(),
        };
        // While it is on its way, the commit of the answer leaves the entry to this worker.
        let (stream, entry) = (turn.stream.clone(), turn.entry.id);
        let streamed = {
            let mut stream = commit::lock(&stream);
            if stream.closed {
                return;
            }
            stream.sending = true;
            stream.id.clone()
        };
        let sent = self.show(entry, streamed, &message).await;
        let mut stream = commit::lock(&stream);
        stream.sending = false;
        if sent.is_some() {
            stream.id = sent;
        }
    }

    /// Send `message`, the answer to entry `entry` so far: as an edit of the message `streamed`,
    /// or as the first. The id of the first, when it was sent.
    async fn show(&self, entry: i64, streamed: Option<String>, message: &Outbound) -> Option<String> {
        let Some(id) = streamed else {
            // Noted before the send: a process finishing this turn after this one died knows a
            // message may be in the chat (and says so) instead of doubling it silently.
            // Unnoted, nothing is streamed (the answer is sent when done).
            if let Err(e) = self.gateway.store.inbox_streamed(entry, Some(SENDING)).await {
                tracing::debug!(account = %self.account.name, "cannot note a streamed message: {e}");
                return None;
            }
            return match self.account.adapter.send(message).await {
                Ok(id) if id != SENDING => {
                    // A process finishing this turn after this one died edits it, too.
                    if let Err(e) = self.gateway.store.inbox_streamed(entry, Some(&id)).await {
                        tracing::debug!(account = %self.account.name, "cannot note the streamed message: {e}");
                    }
                    Some(id)
                }
                Ok(_) => {
                    tracing::debug!(account = %self.account.name, "the adapter sent a message without an id");
                    None
                }
                Err(e) => {
                    tracing::debug!(account = %self.account.name, "streaming a reply: {e}");
                    // Refused, so not in the chat (as the ledger takes a refusal).
                    if let Err(e) = self.gateway.store.inbox_streamed(entry, None).await {
                        tracing::debug!(account = %self.account.name, "cannot note a streamed message: {e}");
                    }
                    None
                }
            };
        };
        if let Err(e) = self.account.adapter.edit(&id, message).await {
            tracing::debug!(account = %self.account.name, "streaming a reply: {e}");
        }
        None
    }
}
