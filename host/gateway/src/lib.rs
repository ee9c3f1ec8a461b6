//! The messaging gateway: people on chat platforms answered by the agent service, each chat (and
//! thread) a session, through adapter plugins that hold only their own tokens and hosts.
//!
//! [`serve`] is `talaria gateway run`: adapters polled, messages kept in the store's inbox, one
//! worker per chat on a conversation of `talaria-core`, answers sent through the delivery
//! ledger. Its decisions are kept apart so each is tested on its own: who is answered
//! ([`authorize`]), which session a message belongs to ([`session_key`]), and how an answer is
//! written for each platform ([`mod@format`]).
//!
//! Scheduled jobs are run by `talaria-scheduler`, another front door: neither crate depends on
//! the other. `talaria gateway run` hands [`serve::run`] a runner to tick beside the gateway
//! ([`serve::Options::scheduler`]), and the gateway gives it the delivery ledger as its courier
//! ([`serve::Ledger`], a `talaria_core::cron::courier::Courier`) for answers that go to a chat.

pub mod auth;
pub mod command;
pub mod format;
pub mod lease;
pub mod serve;
pub mod webhook;

pub use auth::{Decision, Finding, authorize, check, session_key};

/// Where a message was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatType {
    /// A direct message with the bot.
    Dm,
    /// A group or room with several people.
    Group,
    /// A broadcast channel.
    Channel,
}

/// A message as an adapter reports it; every field is the platform's (and the sender's) word,
/// not the owner's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    /// The adapter's platform name: `telegram`, `matrix`, ...
    pub platform: String,
    pub chat_id: String,
    pub chat_type: ChatType,
    /// A thread inside the chat, where the platform has them.
    pub thread_id: Option<String>,
    pub sender_id: String,
    pub sender_name: String,
    /// The bot was mentioned, or the message replies to one of the bot's.
    pub addressed: bool,
    pub text: String,
}
