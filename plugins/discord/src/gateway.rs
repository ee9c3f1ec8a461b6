//! The Discord Gateway (<https://discord.com/developers/docs/events/gateway>): the WebSocket
//! that brings events, kept alive from inside `poll`.
//!
//! [`Gateway::next`] hands out dispatches (op 0) one at a time and does the rest of the protocol
//! itself:
//!
//! 1. A connection opens with HELLO (op 10, the heartbeat interval), answered by IDENTIFY (op 2)
//!    for a new session or RESUME (op 6: session id and last sequence number) for one that READY
//!    started before.
//! 2. A HEARTBEAT (op 1) carrying the last sequence number goes out whenever one is due while
//!    `next` runs (the first after a random part of the interval), and at once when the gateway
//!    asks for one. Each must be acknowledged (op 11) before the next is due; if not, the
//!    connection is a zombie and is replaced.
//! 3. A connection that drops, that the gateway asks to leave (op 7), or a zombie, is replaced by
//!    one that RESUMEs (at the session's `resume_gateway_url`, or the main URL when that host is
//!    not granted). An invalid session (op 9 `false`) or a close code that ends the session starts
//!    a new one with IDENTIFY, 1–5 s later. Close codes no retry can fix (bad token, intents not
//!    allowed) are permanent errors. Connections that keep ending within [`STABLE`] of opening
//!    are replaced ever more slowly (1 s, 2 s, 4 s, ... up to a minute), never in a tight loop.
//! 4. The token never enters the plugin: IDENTIFY and RESUME carry the `{{secret:...}}`
//!    placeholder, which the host fills in for the secret's host only.

use std::hash::{BuildHasher as _, Hasher as _};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_sdk::adapter::Error;
use talaria_sdk::websocket::{self, Connection, Frame};
use talaria_sdk::{log, secrets};

use crate::TOKEN;

/// GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT (a privileged intent, enabled in the
/// developer portal).
pub const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);
/// The longest wait for HELLO on a new connection.
const HELLO_WAIT: Duration = Duration::from_secs(10);
/// A connection that lasted this long was no failure to connect.
const STABLE: Duration = Duration::from_secs(10);
/// The longest pause between short-lived connections.
const MAX_PAUSE: Duration = Duration::from_secs(60);
/// Close code for leaving a connection while keeping its session resumable (1000 and 1001
/// would end the session).
const RESUMABLE_CLOSE: u16 = 4000;

mod op {
    pub const DISPATCH: u64 = 0;
    pub const HEARTBEAT: u64 = 1;
    pub const IDENTIFY: u64 = 2;
    pub const RESUME: u64 = 6;
    pub const RECONNECT: u64 = 7;
    pub const INVALID_SESSION: u64 = 9;
    pub const HELLO: u64 = 10;
    pub const HEARTBEAT_ACK: u64 = 11;
}

/// One event the gateway dispatched: its name (`t`) and data (`d`).
pub struct Dispatch {
    pub name: String,
    pub data: Value,
}

/// A session READY started; a new connection resumes it.
struct Session {
    id: String,
    /// Where to resume (`resume_gateway_url`).
    resume_url: String,
}

/// One open connection.
struct Link {
    socket: Connection,
    opened: Instant,
    interval: Duration,
    next_beat: Instant,
    /// Whether the last heartbeat was acknowledged.
    acked: bool,
}

/// The gateway connection and session of one bot.
pub struct Gateway {
    /// The main gateway URL (`GET /gateway/bot`), without query.
    url: String,
    link: Option<Link>,
    session: Option<Session>,
    /// The last sequence number received.
    seq: Option<u64>,
    /// No new connection before this (after an invalid session, or connections that did not
    /// last).
    not_before: Option<Instant>,
    /// Connections in a row that ended within [`STABLE`] of opening.
    short_lived: u32,
}

/// What a frame from the gateway amounts to.
enum Step {
    Dispatch(Dispatch),
    Nothing,
    /// Leave this connection; resume on a new one.
    Resume,
    /// The session is over: start a new one, after a pause.
    Identify,
}

impl Gateway {
    /// A gateway at `url` (`wss://gateway.discord.gg`), not connected yet.
    pub fn new(url: &str) -> Self {
        Self {
            url: url.trim_end_matches('/').to_string(),
            link: None,
            session: None,
            seq: None,
            not_before: None,
            short_lived: 0,
        }
    }

    /// The next dispatch, waiting until `until` at most; `None` when none came in time.
    /// Heartbeats and reconnections happen meanwhile.
    ///
    /// # Errors
    /// The gateway cannot be reached (transient) or refuses the bot for good (permanent).
    pub fn next(&mut self, until: Instant) -> Result<Option<Dispatch>, Error> {
        loop {
            if self.link.is_none() && !self.reconnect(until)? {
                return Ok(None);
            }
            let Some(link) = self.link.as_mut() else { continue };
            let now = Instant::now();
            if now >= link.next_beat {
                if !link.acked {
                    log::warn("Discord did not acknowledge the last heartbeat; reconnecting");
                    self.leave();
                    continue;
                }
                self.beat()?;
                continue;
            }
            let wait = until.min(link.next_beat).saturating_duration_since(now);
            let frame = link.socket.receive(millis(wait));
            let step = match frame {
                Ok(None) if Instant::now() >= until => return Ok(None),
                Ok(None) | Ok(Some(Frame::Binary(_))) => Step::Nothing,
                Ok(Some(Frame::Text(text))) => self.payload(&text)?,
                Ok(Some(Frame::Close((code, reason)))) => closed(code, &reason)?,
                Err(websocket::Error::Denied(reason)) => return Err(Error::permanent(reason)),
                Err(e) => {
                    log::info(&format!("the Discord gateway connection broke ({}); resuming", e.describe()));
                    Step::Resume
                }
            };
            match step {
                Step::Dispatch(dispatch) => return Ok(Some(dispatch)),
                Step::Nothing => {}
                Step::Resume => self.leave(),
                Step::Identify => {
                    self.leave();
                    self.session = None;
                    self.seq = None;
                    let pause = Instant::now() + Duration::from_millis(1000 + random() % 4000);
                    self.not_before = Some(self.not_before.map_or(pause, |at| at.max(pause)));
                }
            }
        }
    }

    /// Open a connection (once `not_before` has passed, when it falls before `until`); whether
    /// one is open.
    fn reconnect(&mut self, until: Instant) -> Result<bool, Error> {
        if let Some(at) = self.not_before {
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at.min(until).saturating_duration_since(now));
                if at > until {
                    return Ok(false);
                }
            }
            self.not_before = None;
        }
        self.open()?;
        Ok(true)
    }

    /// Connect, wait for HELLO, and IDENTIFY or RESUME.
    ///
    /// # Errors
    /// The connection or the handshake failed.
    pub fn open(&mut self) -> Result<(), Error> {
        let resume = self.session.as_ref().zip(self.seq);
        let socket = match resume {
            Some((session, _)) if session.resume_url != self.url => match connect(&session.resume_url) {
                Err(Error::Permanent(reason)) => {
                    log::info(&format!("cannot resume at {} ({reason}); resuming at {}", session.resume_url, self.url));
                    connect(&self.url)?
                }
                other => other?,
            },
            _ => connect(&self.url)?,
        };
        let interval = hello(&socket)?;
        let token = secrets::placeholder(TOKEN);
        let greeting = match resume {
            Some((session, seq)) => {
                json!({ "op": op::RESUME, "d": { "token": token, "session_id": session.id, "seq": seq } })
            }
            None => json!({
                "op": op::IDENTIFY,
                "d": {
                    "token": token,
                    "intents": INTENTS,
                    "properties": { "os": "wasi", "browser": "talaria", "device": "talaria" },
                },
            }),
        };
        socket.send_text(&greeting.to_string()).map_err(ws_error)?;
        // The first heartbeat comes after a random part of the interval, so that many clients
        // reconnecting at once do not beat in step.
        let first = interval.mul_f64(f64::from(u32::try_from(random() % 1000).unwrap_or(0)) / 1000.0);
        let now = Instant::now();
        self.link = Some(Link { socket, opened: now, interval, next_beat: now + first, acked: true });
        Ok(())
    }

    /// Send a heartbeat now.
    fn beat(&mut self) -> Result<(), Error> {
        let Some(link) = self.link.as_mut() else { return Ok(()) };
        let beat = json!({ "op": op::HEARTBEAT, "d": self.seq });
        match link.socket.send_text(&beat.to_string()) {
            Ok(()) => {
                link.acked = false;
                link.next_beat = Instant::now() + link.interval;
            }
            Err(websocket::Error::Denied(reason)) => return Err(Error::permanent(reason)),
            Err(e) => {
                log::info(&format!("a heartbeat could not be sent ({}); resuming", e.describe()));
                self.leave();
            }
        }
        Ok(())
    }

    /// Close the connection, keeping the session resumable.
    fn leave(&mut self) {
        let Some(link) = self.link.take() else { return };
        link.socket.close(RESUMABLE_CLOSE, "reconnecting");
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

    /// What one text frame amounts to.
    fn payload(&mut self, text: &str) -> Result<Step, Error> {
        let Ok(payload) = serde_json::from_str::<Value>(text) else {
            log::warn("the Discord gateway sent a frame that is not JSON");
            return Ok(Step::Nothing);
        };
        let data = payload["d"].clone();
        Ok(match payload["op"].as_u64() {
            Some(op::DISPATCH) => {
                if let Some(seq) = payload["s"].as_u64() {
                    self.seq = Some(seq);
                }
                let name = payload["t"].as_str().unwrap_or_default().to_string();
                match name.as_str() {
                    "READY" => {
                        let id = data["session_id"].as_str().unwrap_or_default().to_string();
                        let resume_url = data["resume_gateway_url"].as_str().unwrap_or(&self.url);
                        self.session = Some(Session { id, resume_url: resume_url.trim_end_matches('/').to_string() });
                        log::info("the Discord gateway session is ready");
                        Step::Nothing
                    }
                    "RESUMED" => {
                        log::info("the Discord gateway session resumed");
                        Step::Nothing
                    }
                    _ => Step::Dispatch(Dispatch { name, data }),
                }
            }
            Some(op::HEARTBEAT) => {
                self.beat()?;
                Step::Nothing
            }
            Some(op::HEARTBEAT_ACK) => {
                if let Some(link) = self.link.as_mut() {
                    link.acked = true;
                }
                Step::Nothing
            }
            Some(op::RECONNECT) => {
                log::info("the Discord gateway asked to reconnect; resuming");
                Step::Resume
            }
            Some(op::INVALID_SESSION) if data.as_bool() == Some(true) && self.session.is_some() => Step::Resume,
            Some(op::INVALID_SESSION) => {
                log::info("the Discord gateway session is invalid; identifying anew");
                Step::Identify
            }
            Some(op::HELLO) => {
                if let (Some(link), Some(ms)) = (self.link.as_mut(), data["heartbeat_interval"].as_u64()) {
                    link.interval = Duration::from_millis(ms);
                }
                Step::Nothing
            }
            _ => Step::Nothing,
        })
    }
}

/// Open a connection to the gateway at `url`.
fn connect(url: &str) -> Result<Connection, Error> {
    Connection::open(&format!("{url}/?v=10&encoding=json"), &[]).map_err(ws_error)
}

/// Wait for HELLO; the heartbeat interval.
fn hello(socket: &Connection) -> Result<Duration, Error> {
    let deadline = Instant::now() + HELLO_WAIT;
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        match socket.receive(millis(wait)).map_err(ws_error)? {
            None => return Err(Error::transient("the Discord gateway sent no HELLO", None)),
            Some(Frame::Text(text)) => {
                let payload: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                if payload["op"].as_u64() == Some(op::HELLO) {
                    let ms = payload["d"]["heartbeat_interval"].as_u64().unwrap_or(41_250).max(100);
                    return Ok(Duration::from_millis(ms));
                }
            }
            Some(Frame::Binary(_)) => {}
            Some(Frame::Close((code, reason))) => {
                closed(code, &reason)?;
                return Err(Error::transient(
                    format!("the Discord gateway closed before HELLO: {code} {reason}"),
                    None,
                ));
            }
        }
    }
}

/// What a close code from the gateway means: a permanent error for those no retry fixes.
fn closed(code: u16, reason: &str) -> Result<Step, Error> {
    match code {
        4004 => {
            Err(Error::permanent("Discord refused the token (4004 Authentication failed): check DISCORD_BOT_TOKEN"))
        }
        4014 => Err(Error::permanent(
            "Discord refused the intents (4014 Disallowed intents): enable the Message Content intent in the developer portal",
        )),
        4010..=4013 => Err(Error::permanent(format!("Discord closed the gateway for good: {code} {reason}"))),
        // Invalid sequence, session timed out: the session is over.
        4007 | 4009 => Ok(Step::Identify),
        _ => {
            log::info(&format!("the Discord gateway closed the connection ({code} {reason}); resuming"));
            Ok(Step::Resume)
        }
    }
}

fn ws_error(e: websocket::Error) -> Error {
    Error::from_websocket("Discord gateway", e)
}

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// A random number (the standard library seeds `RandomState` from the host's randomness).
fn random() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(0);
    hasher.finish()
}
