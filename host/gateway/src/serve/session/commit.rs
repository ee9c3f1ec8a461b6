//! A message answered in the commit of its turn's answer: the worker hands the store, before
//! the turn, how to make the answer's text into the entry's reply or its deliveries
//! ([`render`]); the store marks the entry done in the transaction that commits the answer
//! (`Store::append_answer`), so an answered message costs no commit of its own, and a process
//! that dies after the commit leaves nothing to recover. When the commit cannot take it (a
//! streamed message is being sent or edited just then, the turn fails), the worker marks the
//! entry done itself when the turn ends, as before ([`super::finish`]).

use std::sync::{Arc, Mutex};

use talaria_core::store::inbox::{self, Entry, Queued, Render};

use super::Chat;
use crate::serve::Account;
use crate::serve::outbox::{self, Reply};

/// The message a turn's answer streams into, shared by the worker (which sends and edits it)
/// and the render its commit runs: the commit answers only while no send or edit of it is on
/// its way (it would miss the message's id, or be overwritten by the older text), and once it
/// has, the stream stops.
#[derive(Debug, Default)]
pub(super) struct Stream {
    /// The platform's id of the streamed message, once sent.
    pub id: Option<String>,
    /// A send or an edit is on its way.
    pub sending: bool,
    /// The commit answered: nothing more is streamed.
    pub closed: bool,
    /// How many deliveries the commit queued.
    pub queued: usize,
}

pub(super) type Shared = Arc<Mutex<Stream>>;

pub(super) fn lock(stream: &Shared) -> std::sync::MutexGuard<'_, Stream> {
    stream.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The reply to a turn that ended with `text`.
pub(super) fn markdown(text: &str) -> String {
    if text.trim().is_empty() { "(no answer)".to_string() } else { text.to_string() }
}

/// The deliveries that carry `markdown` to `chat`, answering `entry` (replacing the streamed
/// message `edit`).
pub(super) fn queued(
    account: &Account,
    chat: &Chat,
    entry: &Entry,
    markdown: &str,
    edit: Option<String>,
    trace: Option<String>,
) -> Vec<Queued> {
    let key = crate::serve::reply_key(&account.name, &chat.chat_id, &entry.message_id);
    let reply = Reply { edit, reply_to: None, buttons: Vec::new(), trace };
    outbox::parts(account, markdown, &reply, &key)
        .into_iter()
        .map(|(body, key)| Queued {
            platform: account.name.clone(),
            chat_id: chat.chat_id.clone(),
            thread_id: chat.thread_id.clone(),
            body,
            key,
        })
        .collect()
}

/// How the commit of the answer to `entry` makes its text into what the entry is done with: the
/// reply, for whoever waits on it, or the deliveries to the chat.
/// `trace`: the message's span, which the deliveries continue.
pub(super) fn render(
    account: Arc<Account>,
    chat: Chat,
    entry: &Entry,
    stream: Shared,
    trace: Option<String>,
) -> Render {
    let entry = entry.clone();
    Box::new(move |text: &str| {
        let markdown = markdown(text);
        if entry.respond {
            return Some(inbox::Answer { reply: Some(markdown), queued: Vec::new() });
        }
        let mut stream = lock(&stream);
        if stream.sending {
            return None;
        }
        let queued = queued(&account, &chat, &entry, &markdown, stream.id.clone(), trace.clone());
        stream.closed = true;
        stream.queued = queued.len();
        Some(inbox::Answer { reply: None, queued })
    })
}
