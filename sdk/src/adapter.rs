//! Platform adapters (API 0.4.0): connect talaria's gateway to a chat platform.
//!
//! The host keeps one connected instance of the adapter per configured account and drives it:
//! `connect` once, then `poll` in a loop (when [`Account::polls`]), `handle_webhook` for
//! requests to the account's routes, and `send` / `edit` / `typing` as replies are written.
//! Calls on one instance never overlap, so an adapter may keep its state (an update offset, an
//! open [`websocket`](crate::websocket)) in a `static`. After a trap the host makes a new
//! instance and calls `connect` again.
//!
//! Sends for many chats at once need not queue behind each other (and behind the long poll):
//! an adapter whose `send`, `edit`, `typing` and `chat_info` need nothing `connect` or `poll`
//! keep (a Bot API call with the token is enough) says so in [`Adapter::prepare_sender`], and
//! the host then runs those calls on a few more instances of it, each made ready by
//! `prepare_sender` instead of `connect`. The default says no, and everything runs on the
//! connected instance.
//!
//! The adapter reads its settings with [`config::get`](crate::config::get) (the account's
//! `[gateway.platforms.NAME]` table: `base_url` and the rest; `account` is the account's name)
//! and never sees its token: it writes the placeholder from [`secrets::placeholder`](crate::secrets::placeholder)
//! where the platform wants it (a header, or the URL path for a secret with `in_path = true`).
//!
//! The host turns the model's markdown into the [`TextFormat`] the adapter asked for and splits
//! long replies at [`Account::max_length`]; `send` gets text ready to post. Whatever the
//! adapter reports about a sender is checked against the gateway's own rules: an adapter cannot
//! make anyone an admin.
//!
//! ```ignore
//! use talaria_sdk::adapter::{Account, Adapter, Chat, ChatType, Error, Event, Outbound, TextFormat};
//!
//! struct Echo;
//!
//! impl Adapter for Echo {
//!     fn connect() -> Result<Account, Error> {
//!         Ok(Account { bot_id: "echo".into(), bot_name: "Echo".into(), format: TextFormat::Plain,
//!             max_length: 4000, can_edit: false, edit_interval_ms: 1000, buttons: false, polls: true })
//!     }
//!     fn poll(_timeout_ms: u32) -> Result<Vec<Event>, Error> { Ok(Vec::new()) }
//!     fn send(message: Outbound) -> Result<String, Error> { Ok("1".into()) }
//!     fn chat_info(chat_id: String) -> Result<Chat, Error> {
//!         Ok(Chat { id: chat_id, name: String::new(), chat_type: ChatType::Dm })
//!     }
//! }
//!
//! talaria_sdk::export_adapter!(Echo);
//! ```

use std::marker::PhantomData;

use crate::__bindings::platform::exports::talaria::plugin0_3_0::adapter as wit;
use crate::__bindings::platform::exports::talaria::plugin0_4_0::sender as wit_sender;

pub use wit::{
    Account, AdapterError as Error, Attachment, Button, ButtonPress, Chat, ChatType, Event, Message, Outbound, Request,
    Response, TextFormat, WebhookResult,
};

impl Error {
    /// A failure worth trying again (network, 5xx, rate limit), after `retry_after_ms` when
    /// the platform said.
    pub fn transient(message: impl Into<String>, retry_after_ms: Option<u32>) -> Self {
        Self::Transient((message.into(), retry_after_ms))
    }

    /// A failure that will not go away by trying again.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::Permanent(message.into())
    }

    /// How an HTTP status from the platform fails: 429 and 5xx are worth another try, the rest
    /// is not.
    pub fn from_status(status: u16, message: impl Into<String>, retry_after_ms: Option<u32>) -> Self {
        if status == 429 || status >= 500 { Self::transient(message, retry_after_ms) } else { Self::permanent(message) }
    }
}

/// The `kind` of an attachment with media type `mime`: `image`, `audio`, `video` or `file`.
pub fn attachment_kind(mime: &str) -> &'static str {
    match mime.split('/').next().unwrap_or_default() {
        "image" => "image",
        "audio" => "audio",
        "video" => "video",
        _ => "file",
    }
}

impl Error {
    /// A WebSocket failure of `what` (`"Discord gateway"`): refused by the host, permanent
    /// until the operator grants it; anything else, transient.
    pub fn from_websocket(what: &str, e: crate::websocket::Error) -> Self {
        match e {
            crate::websocket::Error::Denied(reason) => Self::permanent(reason),
            other => Self::transient(format!("{what}: {}", other.describe()), None),
        }
    }
}

impl From<crate::http::Error> for Error {
    /// A request that could not be made: refused by the host (permanent until the operator
    /// grants it) or failed on the way (transient).
    fn from(e: crate::http::Error) -> Self {
        match e {
            crate::http::Error::Denied(_) | crate::http::Error::Url(_) => Self::permanent(e.to_string()),
            _ => Self::transient(e.to_string(), None),
        }
    }
}

impl Response {
    /// A response with a JSON body.
    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }
}

/// A platform adapter. Export it with [`export_adapter!`](crate::export_adapter).
pub trait Adapter {
    /// Log in and say who the bot is and what the platform can do. Called first in every
    /// instance.
    fn connect() -> Result<Account, Error>;

    /// New events, waiting at most `timeout_ms` for the first; an empty list when none came.
    /// Called in a loop when [`Account::polls`]. The default has none.
    fn poll(timeout_ms: u32) -> Result<Vec<Event>, Error> {
        let _ = timeout_ms;
        Ok(Vec::new())
    }

    /// A request to one of the account's webhook routes, after the host checked its signature
    /// or token. The default refuses it.
    fn handle_webhook(request: Request) -> Result<WebhookResult, Error> {
        let _ = request;
        Err(Error::permanent("this adapter takes no webhook requests"))
    }

    /// Send a message; its id on the platform.
    fn send(message: Outbound) -> Result<String, Error>;

    /// Replace the text of a message the bot sent. The default cannot (say `can_edit: false`).
    fn edit(message_id: String, message: Outbound) -> Result<(), Error> {
        let _ = (message_id, message);
        Err(Error::permanent("this adapter cannot edit messages"))
    }

    /// Show that the bot is writing. The default shows nothing.
    fn typing(chat_id: String, thread_id: Option<String>) -> Result<(), Error> {
        let _ = (chat_id, thread_id);
        Ok(())
    }

    /// What the platform says about a chat.
    fn chat_info(chat_id: String) -> Result<Chat, Error>;

    /// Make this instance ready to `send`, `edit`, `typing` and `chat_info` without
    /// `connect` (the host never calls `connect` or `poll` on it): `Ok(true)` when it is, and
    /// the host may then send from several instances at once; `Ok(false)` when this adapter's
    /// sends need what `connect` or `poll` keep (the host then sends from the connected
    /// instance only, and asks no more); `Err` when it failed for now (tried again later).
    /// Open no socket and join nothing here. The default says `Ok(false)`.
    fn prepare_sender() -> Result<bool, String> {
        Ok(false)
    }
}

/// The `adapter` export for any [`Adapter`]; `export_adapter!` names it.
#[doc(hidden)]
pub struct AdapterExport<A>(PhantomData<A>);

impl<A: Adapter> wit::Guest for AdapterExport<A> {
    fn connect() -> Result<Account, Error> {
        A::connect()
    }

    fn poll(timeout_ms: u32) -> Result<Vec<Event>, Error> {
        A::poll(timeout_ms)
    }

    fn handle_webhook(req: Request) -> Result<WebhookResult, Error> {
        A::handle_webhook(req)
    }

    fn send(msg: Outbound) -> Result<String, Error> {
        A::send(msg)
    }

    fn edit(message_id: String, msg: Outbound) -> Result<(), Error> {
        A::edit(message_id, msg)
    }

    fn typing(chat_id: String, thread_id: Option<String>) -> Result<(), Error> {
        A::typing(chat_id, thread_id)
    }

    fn chat_info(chat_id: String) -> Result<Chat, Error> {
        A::chat_info(chat_id)
    }
}

impl<A: Adapter> wit_sender::Guest for AdapterExport<A> {
    fn prepare() -> Result<bool, String> {
        A::prepare_sender()
    }
}

/// Export an [`Adapter`] implementation as the plugin's `adapter` and `sender` interfaces
/// (world `platform-plugin`). The manifest says `api = "0.4.0"` and `kind = ["platform"]`.
///
/// ```ignore
/// talaria_sdk::export_adapter!(MyAdapter);
/// ```
#[macro_export]
macro_rules! export_adapter {
    ($adapter:ty $(,)?) => {
        #[doc(hidden)]
        type __TalariaAdapterExport = $crate::__private::AdapterExport<$adapter>;
        $crate::__bindings::platform::__export_platform_plugin!(__TalariaAdapterExport with_types_in $crate::__bindings::platform);
    };
}
