//! A real Matrix homeserver for the gateway's tests: Synapse from PyPI (`matrix-synapse`), on
//! loopback with SQLite, started once per test binary ([`Synapse::shared`]) and stopped when the
//! test process ends.
//!
//! It is installed on first use into a virtual environment under `~/.cache/talaria-tests`
//! (about 30 s; `.ci/run` does it ahead), or taken from `TALARIA_SYNAPSE_PYTHON` (a Python with
//! `matrix-synapse` installed). Rate limits are lifted and federation is off (no key servers).
//!
//! [`Synapse::user`] registers a user and logs it in; [`Client`] is that user's client.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The version the tests are written against.
pub const SYNAPSE_VERSION: &str = "1.163.2";

/// The running homeserver.
pub struct Synapse {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    python: PathBuf,
    config: PathBuf,
    /// The watchdog shell running it.
    _process: std::process::Child,
    _dir: tempfile::TempDir,
}

/// A logged-in user.
#[derive(Debug, Clone)]
pub struct Client {
    pub base_url: String,
    pub user_id: String,
    pub token: String,
}

/// The Python that has Synapse, installing it first when needed.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("TALARIA_SYNAPSE_PYTHON") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    let venv = home.join(".cache/talaria-tests/synapse");
    let python = venv.join("bin/python");
    let ready = Command::new(&python)
        .args(["-c", &format!("import synapse, sys; sys.exit(synapse.__version__ != {SYNAPSE_VERSION:?})")])
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().expect("python3 -m venv");
        assert!(made.success(), "cannot make a virtual environment at {}", venv.display());
        let pip = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", &format!("matrix-synapse=={SYNAPSE_VERSION}")])
            .status()
            .expect("pip");
        assert!(pip.success(), "pip install matrix-synapse=={SYNAPSE_VERSION} failed");
    }
    python
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Synapse's settings for a test: loopback only, no federation, no rate limits.
fn configure(config: &Path, port: u16) {
    let generated = std::fs::read_to_string(config).expect("hs.yaml");
    let mut text = String::new();
    let mut in_listener = false;
    for line in generated.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("- bind_addresses:") {
            in_listener = true;
            text.push_str("  - bind_addresses: ['127.0.0.1']\n");
            continue;
        }
        // The generated addresses (`- ::1`, `- 127.0.0.1`) until the port.
        if in_listener && trimmed.starts_with("- ") {
            continue;
        }
        if trimmed.starts_with("port: 8008") {
            in_listener = false;
            text.push_str(&format!("    port: {port}\n"));
            continue;
        }
        text.push_str(line);
        text.push('\n');
    }
    let unlimited = "{per_second: 100000, burst_count: 100000}";
    text.push_str(&format!(
        "trusted_key_servers: []\nsuppress_key_server_warning: true\nfederation_domain_whitelist: []\n\
         rc_message: {unlimited}\nrc_registration: {unlimited}\n\
         rc_login: {{address: {unlimited}, account: {unlimited}, failed_attempts: {unlimited}}}\n\
         rc_joins: {{local: {unlimited}, remote: {unlimited}}}\n\
         rc_invites: {{per_room: {unlimited}, per_user: {unlimited}, per_issuer: {unlimited}}}\n"
    ));
    std::fs::write(config, text).expect("hs.yaml");
}

impl Synapse {
    /// The homeserver of this test process, started on first use.
    pub fn shared() -> &'static Synapse {
        static SHARED: OnceLock<Synapse> = OnceLock::new();
        SHARED.get_or_init(Synapse::start)
    }

    fn start() -> Synapse {
        let python = python();
        let dir = tempfile::tempdir().expect("dir");
        let config = dir.path().join("hs.yaml");
        let generated = Command::new(&python)
            .args(["-m", "synapse.app.homeserver", "--server-name", "localhost", "--config-path"])
            .arg(&config)
            .arg("--data-directory")
            .arg(dir.path())
            .args(["--generate-config", "--report-stats=no"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .status()
            .expect("synapse --generate-config");
        assert!(generated.success(), "synapse could not generate its config");
        let port = free_port();
        configure(&config, port);
        // It goes when this process goes: a watchdog shell stops it once the parent is gone,
        // and removes its directory (the static holding it is never dropped).
        let script = format!(
            "{} -m synapse.app.homeserver --config-path {} & child=$!; while kill -0 {} 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 1; done; kill $child 2>/dev/null; wait $child; rm -rf '{}'",
            python.display(),
            config.display(),
            std::process::id(),
            dir.path().display()
        );
        let process = Command::new("sh")
            .args(["-c", &script])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start synapse");
        let base_url = format!("http://127.0.0.1:{port}");
        let start = Instant::now();
        while call("GET", &format!("{base_url}/_matrix/client/versions"), None, None).0 != 200 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "synapse did not come up; see {}/homeserver.log",
                dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Synapse { base_url, python, config, _process: process, _dir: dir }
    }

    /// Register `name` (with a password of its own) and log it in.
    pub fn user(&self, name: &str) -> Client {
        let password = format!("{name}-password-1");
        let out = Command::new(&self.python)
            .args(["-m", "synapse._scripts.register_new_matrix_user", "-c"])
            .arg(&self.config)
            .args(["-u", name, "-p", &password, "--no-admin", &self.base_url])
            .output()
            .expect("register_new_matrix_user");
        assert!(out.status.success(), "cannot register {name}: {}", String::from_utf8_lossy(&out.stderr));
        let login = json!({
            "type": "m.login.password",
            "identifier": { "type": "m.id.user", "user": name },
            "password": password,
        });
        let (status, answer) = call("POST", &format!("{}/_matrix/client/v3/login", self.base_url), None, Some(&login));
        assert_eq!(status, 200, "login of {name}: {answer}");
        Client {
            base_url: self.base_url.clone(),
            user_id: answer["user_id"].as_str().expect("user_id").to_string(),
            token: answer["access_token"].as_str().expect("token").to_string(),
        }
    }
}

impl Client {
    /// Call the client API (`path` after `/_matrix/client/v3`) as this user.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, answer) =
            call(method, &format!("{}/_matrix/client/v3{path}", self.base_url), Some(&self.token), body);
        assert_eq!(status, 200, "{method} {path}: {answer}");
        answer
    }

    /// A direct chat with `other`, invited; its room id.
    pub fn direct_room(&self, other: &str) -> String {
        let room = self.call(
            "POST",
            "/createRoom",
            Some(&json!({ "invite": [other], "is_direct": true, "preset": "trusted_private_chat" })),
        );
        room["room_id"].as_str().expect("room_id").to_string()
    }

    /// Send `text` to `room`; its event id.
    pub fn say(&self, room: &str, text: &str) -> String {
        self.send(room, "m.room.message", &json!({ "msgtype": "m.text", "body": text }))
    }

    /// A room with `others` invited (not a direct chat); its room id.
    pub fn room_with(&self, others: &[&str]) -> String {
        let room = self.call("POST", "/createRoom", Some(&json!({ "invite": others, "preset": "private_chat" })));
        room["room_id"].as_str().expect("room_id").to_string()
    }

    /// Invite `other` to `room`.
    pub fn invite(&self, room: &str, other: &str) {
        self.call("POST", &format!("/rooms/{}/invite", escape(room)), Some(&json!({ "user_id": other })));
    }

    /// Join `room` (invited to it).
    pub fn join(&self, room: &str) {
        self.call("POST", &format!("/rooms/{}/join", escape(room)), Some(&json!({})));
    }

    /// Send an event of `kind` with `content` to `room`; its event id.
    pub fn send(&self, room: &str, kind: &str, content: &Value) -> String {
        static TXN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let txn = TXN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = format!("/rooms/{}/send/{kind}/e{}-{txn}", escape(room), std::process::id());
        let sent = self.call("PUT", &path, Some(content));
        sent["event_id"].as_str().expect("event_id").to_string()
    }

    /// Reply to `event` of `room` with `text` as Element does: a rich reply, its body starting
    /// with the quote of what it answers (`quoted`, from `sender`).
    pub fn reply(&self, room: &str, event: &str, sender: &str, quoted: &str, text: &str) -> String {
        let fallback = format!("> <{sender}> {}\n\n{text}", quoted.lines().next().unwrap_or_default());
        let content = json!({
            "msgtype": "m.text",
            "body": fallback,
            "m.relates_to": { "m.in_reply_to": { "event_id": event } },
        });
        self.send(room, "m.room.message", &content)
    }

    /// React to `event` of `room` with `key` (an emoji).
    pub fn react(&self, room: &str, event: &str, key: &str) -> String {
        let content = json!({ "m.relates_to": { "rel_type": "m.annotation", "event_id": event, "key": key } });
        self.send(room, "m.reaction", &content)
    }

    /// Send `text` mentioning `user` as Element does when a pill is picked (`NAME: text`, with
    /// `m.mentions`); its event id.
    pub fn mention(&self, room: &str, user: &str, name: &str, text: &str) -> String {
        let content = json!({
            "msgtype": "m.text",
            "body": format!("{name}: {text}"),
            "format": "org.matrix.custom.html",
            "formatted_body": format!("<a href=\"https://matrix.to/#/{user}\">{name}</a>: {text}"),
            "m.mentions": { "user_ids": [user] },
        });
        self.send(room, "m.room.message", &content)
    }

    /// The members of `room`.
    pub fn members(&self, room: &str) -> Vec<String> {
        let joined = self.call("GET", &format!("/rooms/{}/joined_members", escape(room)), None);
        joined["joined"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
    }

    /// The last 100 message events of `room`, oldest first.
    pub fn messages(&self, room: &str) -> Vec<Value> {
        let page = self.call("GET", &format!("/rooms/{}/messages?dir=b&limit=100", escape(room)), None);
        let mut events: Vec<Value> = page["chunk"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["type"] == "m.room.message")
            .collect();
        events.reverse();
        events
    }
}

/// A path segment, percent-encoded.
pub fn escape(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One HTTP/1.1 request: the status and the JSON answer (`Null` when not JSON).
fn call(method: &str, url: &str, token: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (authority, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
    let Ok(mut stream) = std::net::TcpStream::connect(authority) else { return (0, Value::Null) };
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    head.push_str("\r\n");
    if stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body.as_bytes())).is_err() {
        return (0, Value::Null);
    }
    let mut raw = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stream, &mut raw);
    let text = String::from_utf8_lossy(&raw);
    let Some((head, payload)) = text.split_once("\r\n\r\n") else { return (0, Value::Null) };
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let chunked = head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding: chunked"));
    let payload = if chunked { dechunk(payload) } else { payload.to_string() };
    (status, serde_json::from_str(&payload).unwrap_or(Value::Null))
}

/// A chunked body, joined.
fn dechunk(mut text: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = text.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        text = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}
