//! Test helpers shared by the runtime and end-to-end tests.
//!
//! - [`EVIL_WASM`] and [`NOT_A_TOOL_WASM`]: misbehaving guest components, built by `build.rs`
//!   from `tests/plugins/*` exactly like the bundled plugins.
//! - [`LEGACY_V1_WASM`] (API 0.1.0) and the 0.2.0 probes [`PROBE_HOOK_WASM`],
//!   [`PROBE_MEMORY_WASM`] and [`PROBE_CONTEXT_WASM`], written with plain wit-bindgen; install
//!   them with [`manifest_v2`].
//! - [`FLOOD_WASM`]: a 0.2.0 tool plugin that declares and logs too much, as its config says.
//! - [`install`]: put a plugin into a `TALARIA_HOME`'s user plugin directory.
//! - [`wait`]: finish a future from a plain test (the store's calls, in a test that reads or
//!   writes the state straight), on one runtime for the whole test binary.
//! - [`FakeServer`]: a tiny HTTP/1.1 server on loopback that records what it was sent, standing in
//!   for the outside services plugins talk to (a weather API, a web page).
//! - [`telegram::TelegramFake`]: a Telegram Bot API double for the gateway.
//! - [`discord::DiscordFake`] and [`slack::SlackFake`]: Discord (REST and Gateway) and Slack (Web
//!   API and Socket Mode) doubles for the gateway.
//! - [`synapse::Synapse`]: a real Matrix homeserver (PyPI `matrix-synapse`), once per test binary.
//! - [`postgres::Postgres`]: a real PostgreSQL server (Debian's `postgresql`), a throwaway cluster
//!   once per test binary, a fresh database per test; or a test's own cluster, which it may stop
//!   and start again ([`postgres::Postgres::private`]).
//!
//! ```no_run
//! let server = talaria_test_support::FakeServer::start(|req| (200, vec![], format!("you asked for {}", req.path)));
//! println!("http://{}/", server.addr);
//! ```

/// Finish `future` from a thread that is not async (a plain `#[test]`, a helper of one), on a
/// runtime shared by the whole test binary: a store opened through it keeps its PostgreSQL
/// connections there from one call to the next.
///
/// # Panics
/// Called from inside an async task (await the future there instead).
pub fn wait<F: std::future::Future>(future: F) -> F::Output {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("test-wait")
                .enable_all()
                .build()
                .expect("a runtime for tests")
        })
        .block_on(future)
}

pub mod discord;
pub mod postgres;
pub mod registry;
pub mod slack;
pub mod synapse;
pub mod telegram;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The evil plugin's component.
pub const EVIL_WASM: &str = env!("TALARIA_TEST_EVIL_WASM");
/// A WASI command component (wrong world).
pub const NOT_A_TOOL_WASM: &str = env!("TALARIA_TEST_NOT_A_TOOL_WASM");
/// A tool plugin built against API 0.1.0 (tool `legacy_echo`).
pub const LEGACY_V1_WASM: &str = env!("TALARIA_TEST_LEGACY_V1_WASM");
/// A 0.2.0 hook plugin; its `pre-tool-call` answer depends on the tool name.
pub const PROBE_HOOK_WASM: &str = env!("TALARIA_TEST_PROBE_HOOK_WASM");
/// A 0.2.0 memory provider (exports `memory` and `tools`).
pub const PROBE_MEMORY_WASM: &str = env!("TALARIA_TEST_PROBE_MEMORY_WASM");
/// A 0.2.0 context engine that summarises through the llm import.
pub const PROBE_CONTEXT_WASM: &str = env!("TALARIA_TEST_PROBE_CONTEXT_WASM");

/// A hook plugin that tries to get `terminal` commands approved without a human.
pub const SLY_HOOK_WASM: &str = env!("TALARIA_TEST_SLY_HOOK_WASM");
/// A 0.2.0 tool plugin that lists too many or too large tools, hangs or panics in `list`, and
/// floods the log with forged lines, as its `[plugins.NAME.config]` says (tests/plugins/flood).
pub const FLOOD_WASM: &str = env!("TALARIA_TEST_FLOOD_WASM");
/// A 0.4.0 platform adapter (sending from its connected instance only) that panics in its first polls, then hands in one message and
/// POSTs replies to `{base_url}/sent` (tests/plugins/flaky-adapter).
pub const FLAKY_ADAPTER_WASM: &str = env!("TALARIA_TEST_FLAKY_ADAPTER_WASM");

/// A manifest for a test tool plugin built with talaria-sdk (API 0.2.0) named `name`, with a
/// `[capabilities]` body.
pub fn manifest(name: &str, capabilities: &str) -> String {
    format!(
        "name = \"{name}\"\nversion = \"0.1.0\"\napi = \"0.2.0\"\ndescription = \"test plugin\"\n\n[capabilities]\n{capabilities}\n"
    )
}

/// A manifest for a tool plugin built against API 0.1.0 (the legacy test plugin).
pub fn manifest_v1(name: &str, capabilities: &str) -> String {
    manifest(name, capabilities).replace("api = \"0.2.0\"", "api = \"0.1.0\"")
}

/// A 0.2.0 manifest for `name` of `kinds` (e.g. `["hook"]`), with more TOML after (a `[hook]`
/// table, `[capabilities]`, `[limits]`).
pub fn manifest_v2(name: &str, kinds: &[&str], rest: &str) -> String {
    let kinds: Vec<String> = kinds.iter().map(|k| format!("{k:?}")).collect();
    format!(
        "name = \"{name}\"\nversion = \"0.1.0\"\napi = \"0.2.0\"\nkind = [{}]\ndescription = \"test plugin\"\n{rest}\n",
        kinds.join(", ")
    )
}

/// Install `wasm` with `manifest` as user plugin `name` under `home`.
pub fn install(home: &Path, name: &str, wasm: &Path, manifest: &str) {
    let dir = home.join("plugins").join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    std::fs::copy(wasm, dir.join("plugin.wasm")).unwrap_or_else(|e| panic!("copy {}: {e}", wasm.display()));
    std::fs::write(dir.join("plugin.toml"), manifest).unwrap_or_else(|e| panic!("manifest: {e}"));
}

/// Write `grants.toml` granting `caps` to user plugin `name`.
pub fn grant(home: &Path, name: &str, caps: &[&str]) {
    let path = home.join("grants.toml");
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    let list: Vec<String> = caps.iter().map(|c| format!("{c:?}")).collect();
    text.push_str(&format!("\n[grants.user.{name}]\ngranted = [{}]\n", list.join(", ")));
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// One request the fake server received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

type Handler = dyn Fn(&Request) -> (u16, Vec<(String, String)>, Vec<u8>) + Send + Sync;

/// A loopback HTTP server answering with `handler` and recording every request.
pub struct FakeServer {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<Request>>>,
}

impl FakeServer {
    /// Start serving on an ephemeral loopback port (in a background thread, for the test's life).
    pub fn start(handler: impl Fn(&Request) -> (u16, Vec<(String, String)>, String) + Send + Sync + 'static) -> Self {
        Self::start_bytes(move |req| {
            let (status, headers, body) = handler(req);
            (status, headers, body.into_bytes())
        })
    }

    /// Serve the files under `dir` by path (404 for anything else); the files may change while
    /// it runs.
    pub fn files(dir: &Path) -> Self {
        let dir = dir.to_path_buf();
        Self::start_bytes(move |req| {
            let rel = req.path.trim_start_matches('/');
            if rel.split('/').any(|part| part == "..") {
                return (403, vec![], Vec::new());
            }
            match std::fs::read(dir.join(rel)) {
                Ok(bytes) => (200, vec![], bytes),
                Err(_) => (404, vec![], b"not found".to_vec()),
            }
        })
    }

    /// Like [`FakeServer::start`], answering with bytes.
    pub fn start_bytes(
        handler: impl Fn(&Request) -> (u16, Vec<(String, String)>, Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("addr: {e}"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (log, handler): (_, Arc<Handler>) = (requests.clone(), Arc::new(handler));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (log, handler) = (log.clone(), handler.clone());
                std::thread::spawn(move || serve(stream, &log, &*handler));
            }
        });
        Self { addr, requests }
    }

    /// Requests received so far.
    pub fn received(&self) -> Vec<Request> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

fn serve(stream: TcpStream, log: &Mutex<Vec<Request>>, handler: &Handler) {
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0usize);
    let mut body = vec![0; len];
    let _ = reader.read_exact(&mut body);
    let request = Request { method, path, headers, body };
    let (status, extra, text) = handler(&request);
    if let Ok(mut l) = log.lock() {
        l.push(request);
    }
    let mut response = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n", text.len());
    for (k, v) in extra {
        response.push_str(&format!("{k}: {v}\r\n"));
    }
    response.push_str("\r\n");
    let mut bytes = response.into_bytes();
    bytes.extend_from_slice(&text);
    let _ = writer.write_all(&bytes);
}
