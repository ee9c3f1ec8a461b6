//! The gateway's inbox (table `inbox`): every message a gateway takes from a chat platform is
//! written here before the platform is told it arrived, and marked done once it was answered.
//! Whichever gateway process serves the chat's session reads it from here; when that process
//! dies mid-turn, the next one finds the message still open and answers it. A message is kept
//! once per (account, chat, message id), so a platform handing it in twice (a poll retried by
//! another process, a webhook sent again) starts one turn.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use talaria_store::inbox::{NewEntry, Put};
//! let dir = tempfile::tempdir()?;
//! let store = talaria_store::Store::open(&dir.path().join("state.db"))?;
//! let new = NewEntry {
//!     account: "telegram", chat_id: "42", thread_id: None, session_key: "dm:42",
//!     message_id: "7", kind: "message", body: "{}", respond: false, served_here: false,
//! };
//! let Put::New(id) = store.inbox_put(&new).await? else { panic!() };
//! assert!(matches!(store.inbox_put(&new).await?, Put::Known(e) if e.id == id), "kept once");
//! assert_eq!(store.inbox_open_keys().await?, ["dm:42"]);
//! store.inbox_started(id, "s1").await?;
//! store.inbox_done(id, None).await?;
//! assert!(store.inbox_open("dm:42").await?.is_empty());
//! # Ok(())
//! # }
//! ```

use crate::delivery::NewDelivery;
use crate::{Engine, Result, Store};

/// The topic of the notice sent when a chat's inbox gets an entry; the payload is its session
/// key.
pub const QUEUED: &str = "inbox";
/// The topic of the notice sent when an entry is done; the payload is its id.
pub const DONE: &str = "inbox-done";

/// An entry to keep.
#[derive(Debug, Clone, Copy)]
pub struct NewEntry<'a> {
    pub account: &'a str,
    pub chat_id: &'a str,
    pub thread_id: Option<&'a str>,
    /// Which session answers it.
    pub session_key: &'a str,
    /// The platform's id of the message (or of the press, the command).
    pub message_id: &'a str,
    /// What it is, in the gateway's words (`message`, `command`, `approval`).
    pub kind: &'a str,
    /// The gateway's encoding of it.
    pub body: &'a str,
    /// The reply goes to whoever waits on the entry (a webhook request), not to the chat.
    pub respond: bool,
    /// This process's worker of the chat (holding the chat's lease) takes it: other processes
    /// are not told of it ([`QUEUED`]), since none of them may serve the chat meanwhile.
    pub served_here: bool,
}

impl NewEntry<'_> {
    /// The entry as [`Store::inbox_put`] kept it under `id` ([`Put::New`]), pending: what the
    /// process that kept it hands its chat's worker instead of having it read back.
    pub fn kept(&self, id: i64) -> Entry {
        Entry {
            id,
            account: self.account.to_string(),
            chat_id: self.chat_id.to_string(),
            thread_id: self.thread_id.map(str::to_string),
            session_key: self.session_key.to_string(),
            message_id: self.message_id.to_string(),
            kind: self.kind.to_string(),
            body: self.body.to_string(),
            respond: self.respond,
            state: State::Pending,
            session_id: None,
            started_count: None,
            streamed: None,
            reply: None,
            created_at: crate::now_ms(),
        }
    }
}

/// A kept entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: i64,
    pub account: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub session_key: String,
    pub message_id: String,
    pub kind: String,
    pub body: String,
    pub respond: bool,
    pub state: State,
    /// The session and its message count when its turn started.
    pub session_id: Option<String>,
    pub started_count: Option<i64>,
    /// The platform's id of the message its answer streams into; [`SENDING`] while the first
    /// one is being sent.
    pub streamed: Option<String>,
    /// The answer, for whoever waits on it.
    pub reply: Option<String>,
    /// Milliseconds since the epoch.
    pub created_at: i64,
}

/// What [`Entry::streamed`] holds while the first message of a streamed answer is being sent
/// (written before the send, replaced by the platform's id after it). A process finding it
/// left by a dead one knows a message may have reached the chat that it cannot edit.
pub const SENDING: &str = "";

impl Entry {
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }
}

/// Where an entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Kept, not taken up yet.
    Pending,
    /// A turn answers it ([`Store::inbox_started`]); still so after its process died.
    Running,
    /// Answered, or dropped.
    Done,
}

impl State {
    /// The state the column holds (`pending`, `running`, `done`); an unknown word reads as
    /// pending, so the entry is answered rather than lost.
    pub(crate) fn parse(text: &str) -> Self {
        match text {
            "running" => Self::Running,
            "done" => Self::Done,
            _ => Self::Pending,
        }
    }
}

/// What a turn's commit marks its inbox entry done with ([`Store::inbox_done_with_answer`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// For whoever waits on the entry ([`Entry::reply`]).
    pub reply: Option<String>,
    /// The messages that carry it to the chat, queued as [`Store::inbox_done_queueing`] queues
    /// them.
    pub queued: Vec<Queued>,
}

/// A delivery an [`Answer`] queues: an owned [`NewDelivery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub platform: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub body: String,
    pub key: String,
}

impl Queued {
    pub fn new_delivery(&self) -> NewDelivery<'_> {
        NewDelivery {
            platform: &self.platform,
            chat_id: &self.chat_id,
            thread_id: self.thread_id.as_deref(),
            body: &self.body,
            key: &self.key,
        }
    }
}

/// Turns the text of a turn's answer into what its inbox entry is done with, when the commit
/// comes ([`Store::inbox_done_with_answer`]); `None` declines, leaving the entry open.
pub type Render = Box<dyn FnOnce(&str) -> Option<Answer> + Send>;

/// Entries to mark done with their session's next answer, and those so marked
/// ([`Store::inbox_done_with_answer`], [`Store::inbox_answered`]).
#[derive(Default)]
pub(crate) struct Answers {
    waiting: std::collections::HashMap<String, (i64, Render)>,
    done: std::collections::HashSet<i64>,
}

/// What [`Store::inbox_put`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// Kept, under this id.
    New(i64),
    /// It was kept before: as it stands.
    Known(Box<Entry>),
}

pub(crate) const COLUMNS: &str = "id, account, chat_id, thread_id, session_key, message_id, kind, body, respond, state, \
                                  session_id, started_count, streamed, reply, created_at";

impl Store {
    /// Keep `e`, unless it was kept before; then tell the chat's worker ([`QUEUED`]).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_put(&self, e: &NewEntry<'_>) -> Result<Put> {
        self.traced("inbox_put", async {
            match &self.engine {
                Engine::Sqlite(db) => {
                    let put = db.queue().await.inbox_put(e)?;
                    if matches!(put, Put::New(_)) && !e.served_here {
                        self.hint(QUEUED, e.session_key).await;
                    }
                    Ok(put)
                }
                Engine::Postgres(pg) => {
                    let notice = (!e.served_here).then(|| Self::notice_text(QUEUED, e.session_key));
                    pg.inbox_put(e, notice.as_deref()).await
                }
            }
        })
        .await
    }

    /// A request of this process waits on entry `id`, which another process kept: its answer
    /// tells every process ([`DONE`]), not only the one that kept it. Call it before reading
    /// the entry, so that an answer committed in between is read.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_await(&self, id: i64) -> Result<()> {
        match &self.engine {
            // Every answer tells this process's subscribers.
            Engine::Sqlite(_) => Ok(()),
            Engine::Postgres(pg) => pg.inbox_await(id).await,
        }
    }

    /// Entry `id`, if it is kept.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn inbox_get(&self, id: i64) -> Result<Option<Entry>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.inbox_get(id),
            Engine::Postgres(pg) => pg.inbox_get(id).await,
        }
    }

    /// The entries of `session_key` not done yet, oldest first.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn inbox_open(&self, session_key: &str) -> Result<Vec<Entry>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.inbox_open(session_key),
            Engine::Postgres(pg) => pg.inbox_open(session_key).await,
        }
    }

    /// The session keys with entries not done yet, the longest waiting first (at most 1000).
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn inbox_open_keys(&self) -> Result<Vec<String>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.inbox_open_keys(),
            Engine::Postgres(pg) => pg.inbox_open_keys().await,
        }
    }

    /// How many messages wait to be answered (taken, not done): the gateway's queue depth.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn inbox_waiting(&self) -> Result<i64> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.inbox_waiting(),
            Engine::Postgres(pg) => pg.inbox_waiting().await,
        }
    }

    /// A turn of session `session_id` answers entry `id` now; the entry notes how many messages
    /// the session held (its [`Store::message_mark`] count, read from the session's own tally
    /// rather than counted: a long chat costs each turn no more than a short one), so a process
    /// finishing the turn after this one died knows what the turn added.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_started(&self, id: i64, session_id: &str) -> Result<()> {
        self.traced("inbox_started", async {
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.inbox_started(id, session_id),
                Engine::Postgres(pg) => pg.inbox_started(id, session_id).await,
            }
        })
        .await
    }

    /// [`Store::inbox_started`], written with the lease that session `session_id`'s turn takes
    /// next rather than on its own: in the transaction that takes it (on PostgreSQL, in the
    /// statement that reads the session back once the lease is ours: no round trip or commit
    /// of its own), so the tally noted is the one the turn starts from, whatever another
    /// process committed while it waited. Until then the entry stays queued, which is what it
    /// is: a process that dies before its turn holds the lease stored nothing of it.
    pub fn inbox_start_with_lease(&self, id: i64, session_id: &str) {
        if let Ok(mut starts) = self.starts.lock() {
            starts.insert(session_id.to_string(), id);
        }
    }

    /// Mark entry `id` done in the transaction that commits session `session_id`'s next answer
    /// ([`Store::append_answer`]), with what `render` makes of the answer's text: the reply and
    /// its deliveries are then on disk with the answer or not at all, and the turn costs one
    /// commit less. `render` runs inside that commit; when it declines, or the session commits no
    /// answer, the entry is left as it was, for [`Store::inbox_done`]. [`Store::inbox_answered`]
    /// tells which, and forgets `render`.
    pub fn inbox_done_with_answer(&self, id: i64, session_id: &str, render: Render) {
        if let Ok(mut answers) = self.answers.lock() {
            answers.waiting.insert(session_id.to_string(), (id, render));
        }
    }

    /// Whether entry `id` was marked done with session `session_id`'s answer
    /// ([`Store::inbox_done_with_answer`]). Forgets both the render, if it did not run, and the
    /// answer, so ask once, when the turn is over.
    pub fn inbox_answered(&self, id: i64, session_id: &str) -> bool {
        let Ok(mut answers) = self.answers.lock() else { return false };
        if answers.waiting.get(session_id).is_some_and(|(waiting, _)| *waiting == id) {
            answers.waiting.remove(session_id);
        }
        answers.done.remove(&id)
    }

    /// The entry waiting for session `session_id`'s answer and what it is done with, if any
    /// waits and its render does not decline.
    pub(crate) fn answer_for(&self, session_id: &str, text: &str) -> Option<(i64, Answer)> {
        let (id, render) = self.answers.lock().ok()?.waiting.remove(session_id)?;
        render(text).map(|answer| (id, answer))
    }

    /// Entry `id` was marked done with its session's answer.
    pub(crate) fn answered(&self, id: i64) {
        if let Ok(mut answers) = self.answers.lock() {
            answers.done.insert(id);
        }
    }

    /// The answer to entry `id` streams into the platform's message `streamed` ([`SENDING`]
    /// while the first is being sent; `None` when it was not sent after all).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_streamed(&self, id: i64, streamed: Option<&str>) -> Result<()> {
        self.traced("inbox_streamed", async {
            match &self.engine {
                Engine::Sqlite(db) => db.queue().await.inbox_streamed(id, streamed),
                Engine::Postgres(pg) => pg.inbox_streamed(id, streamed).await,
            }
        })
        .await
    }

    /// Entry `id` is answered (with `reply`, for whoever waits on it); tell them ([`DONE`]).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_done(&self, id: i64, reply: Option<&str>) -> Result<()> {
        self.traced("inbox_done", async { self.inbox_done_with(id, reply, &[]).await }).await
    }

    /// Entry `id` is answered by `parts`, queued to its chat (each once per key, as
    /// [`Store::delivery_enqueue`] keeps it) in the transaction that marks the entry done.
    ///
    /// # Errors
    /// The database cannot be written; then neither is kept.
    pub async fn inbox_done_queueing(&self, id: i64, parts: &[NewDelivery<'_>]) -> Result<()> {
        self.traced("inbox_done_queueing", async { self.inbox_done_with(id, None, parts).await }).await
    }

    async fn inbox_done_with(&self, id: i64, reply: Option<&str>, queued: &[NewDelivery<'_>]) -> Result<()> {
        match &self.engine {
            Engine::Sqlite(db) => {
                db.queue().await.inbox_done(id, reply, queued)?;
                self.hint(DONE, &id.to_string()).await;
                Ok(())
            }
            Engine::Postgres(pg) => pg.inbox_done(id, reply, queued, &Self::notice_text(DONE, &id.to_string())).await,
        }
    }

    /// Forget entries done before `before` (milliseconds since the epoch); how many.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn inbox_prune(&self, before: i64) -> Result<usize> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.inbox_prune(before),
            Engine::Postgres(pg) => pg.inbox_prune(before).await,
        }
    }
}
