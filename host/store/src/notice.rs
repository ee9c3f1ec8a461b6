//! Notices: how one process learns that another changed something it waits for (a lease given
//! back, a message queued for a chat it serves, a reply written).
//!
//! A notice is a topic and a payload. On PostgreSQL it travels as `NOTIFY talaria` to every
//! process listening on the database, this one included; on SQLite it reaches only this
//! process's subscribers, so whoever waits across processes there also looks again now and then
//! ([`Store::notices_cross_process`] says which). A notice is a hint, never the state itself:
//! a subscriber reads the store when one comes, and a missed one (a lagging subscriber, a lost
//! connection) arrives as [`RESYNC`], which means "look at everything again".
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store = talaria_store::Store::open(&dir.path().join("state.db"))?;
//! let mut notices = store.notices().await;
//! store.notify("inbox", "chat-1").await?;
//! let notice = notices.try_recv()?;
//! assert_eq!((notice.topic.as_str(), notice.payload.as_str()), ("inbox", "chat-1"));
//! # Ok(())
//! # }
//! ```

use std::sync::OnceLock;

use tokio::sync::broadcast;

use crate::process::me;
use crate::{Engine, Result, Store};

/// The PostgreSQL channel every notice goes through.
pub(crate) const CHANNEL: &str = "talaria";
/// The topic of a notice that stands for any number of missed ones.
pub const RESYNC: &str = "resync";
/// A scheduled job was added or changed; the payload is its id.
pub const JOB_CHANGED: &str = "cron-job";
/// A lease was given back; the payload is its name.
pub const LEASE_FREED: &str = "lease-freed";
/// Notices a subscriber may fall behind by before it is sent [`RESYNC`] instead.
const BACKLOG: usize = 4096;

/// Something changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub topic: String,
    pub payload: String,
    /// The process that sent it (`PID@HOST`; empty for [`RESYNC`]).
    pub from: String,
}

impl Notice {
    pub(crate) fn new(topic: &str, payload: &str) -> Self {
        Self { topic: topic.into(), payload: payload.into(), from: me().into() }
    }

    pub(crate) fn resync() -> Self {
        Self { topic: RESYNC.into(), payload: String::new(), from: String::new() }
    }

    /// Whether this process sent it (it knows what changed already).
    pub fn is_mine(&self) -> bool {
        self.from == me()
    }

    /// The wire form (`topic\nfrom\npayload`), and back.
    pub(crate) fn encode(&self) -> String {
        format!("{}\n{}\n{}", self.topic, self.from, self.payload)
    }

    pub(crate) fn decode(text: &str) -> Self {
        let mut parts = text.splitn(3, '\n');
        let (topic, from, payload) =
            (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        Self { topic: topic.to_string(), payload: payload.to_string(), from: from.to_string() }
    }
}

/// The notices of one process: a broadcast channel its subscribers share, made by the first
/// subscriber (its buffer is a few hundred KiB that a one-shot command never needs).
#[derive(Default)]
pub(crate) struct Hub {
    tx: OnceLock<broadcast::Sender<Notice>>,
    /// Set once PostgreSQL's notices are being listened for.
    listening: OnceLock<()>,
}

impl Hub {
    pub(crate) fn send(&self, notice: Notice) {
        // Nobody subscribed (ever, or any more): nobody waits.
        if let Some(tx) = self.tx.get() {
            let _ = tx.send(notice);
        }
    }

    pub(crate) fn sender(&self) -> broadcast::Sender<Notice> {
        self.tx.get_or_init(|| broadcast::channel(BACKLOG).0).clone()
    }
}

/// A subscription to the store's notices.
pub struct Notices {
    rx: broadcast::Receiver<Notice>,
}

impl Notices {
    /// The next notice; [`RESYNC`] when some were missed. `None` once the store is gone.
    pub async fn recv(&mut self) -> Option<Notice> {
        match self.rx.recv().await {
            Ok(notice) => Some(notice),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(Notice::resync()),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// A notice that already arrived, without waiting.
    ///
    /// # Errors
    /// None has arrived (or the store is gone).
    pub fn try_recv(&mut self) -> std::result::Result<Notice, broadcast::error::TryRecvError> {
        match self.rx.try_recv() {
            Err(broadcast::error::TryRecvError::Lagged(_)) => Ok(Notice::resync()),
            other => other,
        }
    }
}

impl Store {
    /// Tell every subscriber (on PostgreSQL, in every process) that `topic` changed.
    ///
    /// # Errors
    /// PostgreSQL cannot be reached.
    pub async fn notify(&self, topic: &str, payload: &str) -> Result<()> {
        match &self.engine {
            Engine::Sqlite(_) => {
                self.hub.send(Notice::new(topic, payload));
                Ok(())
            }
            // Every subscriber of this process hears it back through the listener it started.
            Engine::Postgres(pg) => pg.notify(&Notice::new(topic, payload).encode()).await,
        }
    }

    /// The notice a write on PostgreSQL sends itself (`pg_notify` in its own statement, so it
    /// costs no round trip of its own and is heard once the write is committed); on SQLite the
    /// caller sends it with [`Store::hint`] once the write is made.
    pub(crate) fn notice_text(topic: &str, payload: &str) -> String {
        Notice::new(topic, payload).encode()
    }

    /// [`Store::notify`] after a change that is already made: a notice that cannot be sent is
    /// logged, not an error (whoever waits also looks again now and then).
    pub(crate) async fn hint(&self, topic: &str, payload: &str) {
        if let Err(e) = self.notify(topic, payload).await {
            tracing::warn!(topic, "cannot send a notice: {e}");
        }
    }

    /// Subscribe to the notices from now on (on PostgreSQL, the first subscriber starts
    /// listening on the database).
    pub async fn notices(&self) -> Notices {
        let rx = self.hub.sender().subscribe();
        if let Engine::Postgres(pg) = &self.engine
            && self.hub.listening.set(()).is_ok()
        {
            pg.listen(self.hub.sender()).await;
        }
        Notices { rx }
    }

    /// Whether notices reach other processes (PostgreSQL). When they do not, a process waiting
    /// for another's change must also look again now and then.
    pub fn notices_cross_process(&self) -> bool {
        self.is_postgres()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_form_keeps_topic_and_payload_apart() {
        let n = Notice::decode(&Notice::new("inbox", "agent:main:telegram:dm:1\nodd").encode());
        assert_eq!((n.topic.as_str(), n.payload.as_str()), ("inbox", "agent:main:telegram:dm:1\nodd"));
        assert!(n.is_mine());
        assert!(!Notice::decode("inbox\n1@elsewhere\nchat").is_mine());
        assert_eq!(Notice::decode("resync").topic, RESYNC);
    }
}
