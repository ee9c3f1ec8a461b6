//! WebSockets (API 0.3.0), to hosts the user granted (`network` capability), for platforms
//! whose events arrive over one (Discord's gateway, Slack's Socket Mode).
//!
//! The host checks a connection as it checks an HTTP request: the host must be granted, plain
//! `ws://` only reaches loopback, and a secret placeholder is filled in only for the secret's
//! own host (in a header it may go in, or in a message for a secret with `in_messages = true`).
//! Pings are answered by the host.
//!
//! ```ignore
//! use talaria_sdk::websocket::{Connection, Frame};
//! let ws = Connection::open("wss://gateway.example.com/?v=10", &[])?;
//! ws.send_text(r#"{"op":1}"#)?;
//! if let Some(Frame::Text(text)) = ws.receive(1000)? { /* ... */ }
//! ```

use crate::__bindings::platform::talaria::plugin0_3_0::websocket as host;

pub use host::{Frame, WsError as Error};

/// An open WebSocket; dropping it closes the connection.
pub struct Connection(host::Connection);

impl Connection {
    /// Connect to `url` (`wss://...`, or `ws://` to loopback) with extra request headers.
    ///
    /// # Errors
    /// The host refused (not granted, ...) or the connection failed.
    pub fn open(url: &str, headers: &[(&str, &str)]) -> Result<Self, Error> {
        let headers: Vec<(String, String)> =
            headers.iter().map(|(n, v)| ((*n).to_string(), (*v).to_string())).collect();
        host::Connection::open(url, &headers).map(Self)
    }

    /// Send a text message.
    ///
    /// # Errors
    /// The connection is closed or broke, or the host refused the message.
    pub fn send_text(&self, text: &str) -> Result<(), Error> {
        self.0.send_text(text)
    }

    /// The next message, waiting at most `timeout_ms`; `None` when nothing came in time.
    ///
    /// # Errors
    /// The connection is closed or broke.
    pub fn receive(&self, timeout_ms: u32) -> Result<Option<Frame>, Error> {
        self.0.receive(timeout_ms)
    }

    /// Close with `code` and `reason`.
    pub fn close(&self, code: u16, reason: &str) {
        self.0.close(code, reason);
    }
}

impl Error {
    /// The failure in words, for logs and adapter errors.
    pub fn describe(&self) -> String {
        match self {
            Error::Denied(reason) => format!("refused: {reason}"),
            Error::Failed(reason) => reason.clone(),
            Error::Closed => "closed".to_string(),
        }
    }
}
