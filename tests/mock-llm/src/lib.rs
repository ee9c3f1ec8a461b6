//! A scripted mock LLM server for end-to-end tests and benchmarks of the real `talaria` binary.
//!
//! It speaks three wire formats, chosen by the route (with or without the `/v1` prefix):
//! `POST /v1/chat/completions` (OpenAI Chat Completions), `POST /v1/messages` (Anthropic
//! Messages) and `POST /v1/responses` (OpenAI Responses). A request with `"stream": true` gets
//! server-sent events, any other a JSON body. `GET /v1/models` lists one model, `mock`.
//!
//! - [`MockLlm`]: the server, on its own thread and runtime; [`MockLlm::requests`] is what it
//!   was sent (recorded before it answers), [`MockLlm::disconnects`] how many stalled replies
//!   the client walked away from.
//! - [`Script`]: the [`Step`]s it answers with, one per model request, in order, across
//!   routes; built in Rust or loaded from JSON (see [`script`] for the format).
//! - [`auto`]: the rule a script falls back to for benchmarks ("use read_file 20 times").
//! - [`Mode`]: answer as a well-behaved OpenAI-compatible server ([`Mode::Normal`]) or as
//!   llama-cpp-python's server does ([`Mode::Strict`], see [`strict`]).
//!
//! The `talaria-mock-llm` binary serves a script file or the auto rule on a port.
//!
//! ```
//! use serde_json::json;
//! use talaria_mock_llm::{MockLlm, Reply, Script, Step};
//!
//! let mock = MockLlm::start(Script::new([
//!     Step::tool_call("read_file", json!({"path": "notes.txt"})),
//!     Reply::text("The notes say hello.").usage(120, 6).into(),
//! ]));
//! // Point the client at `mock.base_url()`, e.g. http://127.0.0.1:PORT/v1, then:
//! assert_eq!(mock.remaining(), 2);
//! assert!(mock.requests().is_empty());
//! ```

pub mod auto;
pub mod script;
mod server;
pub mod strict;
mod wire;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use serde_json::Value;
use tokio::sync::oneshot;

pub use script::{Auto, HttpError, Reply, Script, ScriptError, Step, ToolCall, Usage};
pub use wire::Wire;

/// One request the mock received, recorded before it was answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The URL path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header names (lowercase) and values, in the order sent.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; a body that is not JSON is kept as a JSON string.
    pub body: Value,
}

impl Recorded {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The wire format of the route it was sent to, if it was a model route.
    pub fn wire(&self) -> Option<Wire> {
        Wire::from_path(&self.path)
    }
}

/// How the Chat Completions route judges requests and shapes its streams (the Anthropic and
/// Responses routes answer the same in both modes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// As OpenAI documents it: any valid request is served, usage when asked for.
    #[default]
    Normal,
    /// As llama-cpp-python's server: `"content": null` refused with HTTP 500, tools without
    /// `tool_choice` hidden from the model, tool-call chunks repeating ids and names with the
    /// legacy `function_call` beside them, no usage chunk (see [`strict`]).
    Strict,
}

impl Mode {
    /// Both modes, for tests that must pass against either.
    pub const ALL: [Mode; 2] = [Mode::Normal, Mode::Strict];

    /// Serve `script` on a free loopback port in this mode.
    ///
    /// # Panics
    /// When no loopback port or thread is available (this is a test fixture).
    pub fn start(self, script: Script) -> MockLlm {
        MockLlm::bind_with(SocketAddr::from(([127, 0, 0, 1], 0)), script, self)
            .expect("the mock LLM needs a loopback port and a thread")
    }
}

/// The running server. Dropping it stops the server and closes every connection.
#[derive(Debug)]
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<server::Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MockLlm {
    /// Serve `script` on a free loopback port.
    ///
    /// # Panics
    /// When no loopback port or thread is available (this is a test fixture).
    pub fn start(script: Script) -> Self {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        Self::bind(addr, script).expect("the mock LLM needs a loopback port and a thread")
    }

    /// Serve `script` on `addr` (port 0 picks a free one).
    ///
    /// # Errors
    /// When the address cannot be bound or the server thread cannot start.
    pub fn bind(addr: SocketAddr, script: Script) -> std::io::Result<Self> {
        Self::bind_with(addr, script, Mode::Normal)
    }

    /// Serve `script` on `addr` in `mode`.
    ///
    /// # Errors
    /// When the address cannot be bound or the server thread cannot start.
    pub fn bind_with(addr: SocketAddr, script: Script, mode: Mode) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let listener = {
            let _context = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let shared = Arc::new(server::Shared::new(script, mode));
        let (shutdown, stop) = oneshot::channel();
        let serving = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("mock-llm {addr}"))
            .spawn(move || runtime.block_on(server::serve(listener, serving, stop)))?;
        Ok(Self { addr, shared, shutdown: Some(shutdown), thread: Some(thread) })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`: the base URL for any of the three formats.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request so far, in arrival order (all but `GET /models`), including those to
    /// unknown routes and those refused as not JSON.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests()
    }

    /// Drop the recorded requests (a long benchmark keeps its own memory small this way: a
    /// child's peak RSS as the kernel reports it includes its parent's at the time it was spawned).
    pub fn forget_requests(&self) {
        self.shared.forget_requests();
    }

    /// Steps not yet used (the auto rule and a repeated last step do not count).
    pub fn remaining(&self) -> usize {
        self.shared.remaining()
    }

    /// How many [`Step::Stall`] and [`Step::Hang`] replies ended because the client went away.
    pub fn disconnects(&self) -> usize {
        self.shared.disconnects.load(Ordering::SeqCst)
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
