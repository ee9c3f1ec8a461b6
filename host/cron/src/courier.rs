//! Who takes a scheduled job's answer to a chat: the seam between the runner of scheduled
//! jobs (`talaria-scheduler`), which knows where an answer goes ([`crate::target`]), and the
//! gateway, which knows how to reach a chat platform. The runner is given a [`Courier`]; the
//! gateway implements one over its delivery ledger. Both front doors depend on this library,
//! neither on the other.

use std::future::Future;
use std::pin::Pin;

/// A future a [`Courier`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a run's answer for a chat goes: the scheduled-job runner's one seam to the chat
/// platforms (`talaria_scheduler::Runner` takes one; the gateway implements it,
/// `talaria_gateway::serve::Ledger`).
pub trait Courier: Send + Sync {
    /// Deliver `parcel` to its chat, once per [`Parcel::key`] (whoever else delivers it);
    /// how it went, as the run's record shows it (`sent`, `queued`, `queued (will be retried:
    /// ...)`).
    ///
    /// # Errors
    /// The account is not configured, the answer cannot be kept for sending, or the platform
    /// refused it.
    fn deliver<'a>(&'a self, parcel: Parcel<'a>) -> BoxFuture<'a, Result<String, Undelivered>>;
}

/// A run's answer on its way to a chat.
#[derive(Debug, Clone, Copy)]
pub struct Parcel<'a> {
    /// The account, as `[gateway.platforms.ACCOUNT]` names it.
    pub account: &'a str,
    pub chat: &'a str,
    pub thread: Option<&'a str>,
    /// The answer, in markdown: the courier writes it in the platform's markup.
    pub markdown: &'a str,
    /// The delivery's key (`cron:RUN:0`, `talaria_store::delivery::cron_key`): it ties the
    /// delivery to its run.
    pub key: &'a str,
}

/// Why a [`Courier`] could not deliver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Undelivered {
    /// No `[gateway.platforms.ACCOUNT]` names the account.
    #[error("no account `{0}` is configured: add [gateway.platforms.{0}] to config.toml")]
    NoAccount(String),
    /// The answer cannot be kept for sending (the delivery ledger cannot be written).
    #[error("cannot write it to the delivery ledger: {0}")]
    Ledger(String),
    /// The account's adapter could not be started or reached, or the platform refused it.
    #[error("{0}")]
    Platform(String),
}
