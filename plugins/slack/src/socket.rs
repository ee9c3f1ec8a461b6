//! Slack's Socket Mode (<https://api.slack.com/apis/socket-mode>): events over a WebSocket
//! whose URL `apps.connections.open` hands out.
//!
//! 1. A connection starts with `hello`; no event is taken before it.
//! 2. Every envelope (`events_api`, `slash_commands`, `interactive`) is acknowledged at once by
//!    sending back `{"envelope_id": ...}`, whether or not its event is handed in: Slack sends an
//!    unacknowledged envelope again.
//! 3. On `disconnect` a new connection is opened (a new `apps.connections.open`) before the old
//!    one is closed; a connection that drops is replaced on the next wait. `link_disabled` (Socket
//!    Mode turned off for the app) is a permanent error.
//! 4. Connections that keep dropping within [`STABLE`] of opening are replaced ever more slowly
//!    (1 s, 2 s, 4 s, ... up to a minute), never in a tight loop.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_sdk::adapter::Error;
use talaria_sdk::log;
use talaria_sdk::websocket::{self, Connection, Frame};

use crate::{APP_TOKEN, api};

/// The longest wait for `hello` on a new connection.
const HELLO_WAIT: Duration = Duration::from_secs(10);
/// A connection that lasted this long was no failure to connect.
const STABLE: Duration = Duration::from_secs(10);
/// The longest pause between short-lived connections.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// One open connection.
struct Link {
    connection: Connection,
    opened: Instant,
}

/// The Socket Mode connection, once opened.
#[derive(Default)]
pub struct Socket {
    link: Option<Link>,
    /// No new connection before this (after connections that did not last).
    not_before: Option<Instant>,
    /// Connections in a row that dropped within [`STABLE`] of opening.
    short_lived: u32,
}

impl Socket {
    /// Open a new connection and wait for its `hello`; the old one, if any, is closed after.
    ///
    /// # Errors
    /// `apps.connections.open` failed, or the connection did.
    pub fn open(&mut self) -> Result<(), Error> {
        let opened = api::call(APP_TOKEN, "apps.connections.open", api::Body::Json(&json!({})))?;
        let url = opened["url"].as_str().ok_or_else(|| Error::transient("apps.connections.open named no URL", None))?;
        let link = Connection::open(url, &[]).map_err(ws_error)?;
        let deadline = Instant::now() + HELLO_WAIT;
        loop {
            let wait = millis(deadline.saturating_duration_since(Instant::now()));
            match link.receive(wait).map_err(ws_error)? {
                None => return Err(Error::transient("Slack sent no hello on a new Socket Mode connection", None)),
                Some(Frame::Text(text)) if kind(&text).as_deref() == Some("hello") => break,
                Some(Frame::Close((code, reason))) => {
                    return Err(Error::transient(format!("Slack closed the new connection: {code} {reason}"), None));
                }
                Some(_) => {}
            }
        }
        if let Some(old) = self.link.replace(Link { connection: link, opened: Instant::now() }) {
            old.connection.close(1000, "reconnected");
        }
        Ok(())
    }

    /// The connection dropped: forget it, and pause before the next when it did not last.
    fn lost(&mut self) {
        let Some(link) = self.link.take() else { return };
        if link.opened.elapsed() >= STABLE {
            self.short_lived = 0;
            return;
        }
        self.short_lived += 1;
        // The first replacement comes at once; then 1 s, 2 s, 4 s, ...
        if let Some(doublings) = self.short_lived.checked_sub(2) {
            let pause = Duration::from_secs(1u64 << doublings.min(6)).min(MAX_PAUSE);
            self.not_before = Some(Instant::now() + pause);
        }
    }

    /// The next event (an envelope's `payload.event`), waiting until `until` at most; `None`
    /// when none came in time.
    ///
    /// # Errors
    /// A new connection could not be opened, or Slack disabled Socket Mode.
    pub fn next(&mut self, until: Instant) -> Result<Option<Value>, Error> {
        loop {
            if self.link.is_none() {
                if let Some(at) = self.not_before.take() {
                    let now = Instant::now();
                    std::thread::sleep(at.min(until).saturating_duration_since(now));
                    if at > until {
                        self.not_before = Some(at);
                        return Ok(None);
                    }
                }
                self.open()?;
            }
            let Some(link) = self.link.as_ref().map(|l| &l.connection) else { continue };
            let wait = millis(until.saturating_duration_since(Instant::now()));
            let text = match link.receive(wait) {
                Ok(Some(Frame::Text(text))) => text,
                Ok(None) if Instant::now() >= until => return Ok(None),
                Ok(None) | Ok(Some(Frame::Binary(_))) => continue,
                Ok(Some(Frame::Close((code, reason)))) => {
                    log::info(&format!("Slack closed the Socket Mode connection ({code} {reason}); reconnecting"));
                    self.lost();
                    continue;
                }
                Err(websocket::Error::Denied(reason)) => return Err(Error::permanent(reason)),
                Err(e) => {
                    log::info(&format!("the Socket Mode connection broke ({}); reconnecting", e.describe()));
                    self.lost();
                    continue;
                }
            };
            let Ok(envelope) = serde_json::from_str::<Value>(&text) else {
                log::warn("Slack sent a Socket Mode message that is not JSON");
                continue;
            };
            if let Some(id) = envelope["envelope_id"].as_str() {
                let ack = json!({ "envelope_id": id }).to_string();
                if let Err(e) = link.send_text(&ack) {
                    // Slack sends it again on the next connection.
                    log::info(&format!("cannot acknowledge envelope {id} ({}); reconnecting", e.describe()));
                    self.lost();
                    continue;
                }
            }
            match envelope["type"].as_str().unwrap_or_default() {
                "events_api" => return Ok(Some(envelope["payload"]["event"].clone())),
                "disconnect" if envelope["reason"] == "link_disabled" => {
                    return Err(Error::permanent("Slack disabled Socket Mode for this app (link_disabled)"));
                }
                "disconnect" => {
                    let reason = envelope["reason"].as_str().unwrap_or("no reason");
                    log::info(&format!("Slack asked to reconnect ({reason})"));
                    self.open()?;
                }
                _ => {}
            }
        }
    }
}

/// The `type` of a Socket Mode message.
fn kind(text: &str) -> Option<String> {
    serde_json::from_str::<Value>(text).ok()?["type"].as_str().map(str::to_string)
}

fn ws_error(e: websocket::Error) -> Error {
    Error::from_websocket("Slack Socket Mode", e)
}

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}
