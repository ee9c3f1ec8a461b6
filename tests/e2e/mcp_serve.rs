//! `talaria mcp serve` driven by real MCP clients: the official TypeScript SDK (npm, in
//! tests/mcp) and the official Python SDK (PyPI `mcp`, in a virtual environment under
//! ~/.cache/talaria-tests), over stdio and streamable HTTP. Malformed JSON-RPC is written by
//! hand, since no SDK sends it.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Talaria;
use crate::mcp::peers_dir;

const WAIT: Duration = Duration::from_secs(30);
/// The Python SDK's version the tests use.
const PY_MCP: &str = "2.3.0";

/// A virtual environment with the Python SDK (made once per machine, checked once per binary).
fn python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| crate::mcp::python_with("mcp-venv", "mcp", PY_MCP))
}

/// The server as a stdio command for `t`.
fn stdio(t: &Talaria, extra: &[&str]) -> Value {
    let mut args = vec!["mcp", "serve"];
    args.extend_from_slice(extra);
    json!({
        "command": env!("CARGO_BIN_EXE_talaria"),
        "args": args,
        "cwd": t.ws(),
        "env": {"TALARIA_HOME": t.home.path()},
    })
}

/// Run a client (`node client.mjs` or `python client.py`) on `plan`; what it saw.
fn client(t: &Talaria, program: &Path, script: &str, plan: &Value) -> Value {
    client_and_stderr(t, program, script, plan).0
}

/// [`client`], and what the client wrote to stderr.
fn client_and_stderr(t: &Talaria, program: &Path, script: &str, plan: &Value) -> (Value, String) {
    let file = t.home.path().join(format!("plan-{}.json", fastrand_suffix()));
    std::fs::write(&file, plan.to_string()).expect("plan");
    let out = Command::new(program)
        .arg(peers_dir().join(script))
        .arg(&file)
        .current_dir(peers_dir())
        .output()
        .expect("client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = stdout.lines().last().unwrap_or_default();
    let seen =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{script} printed no result ({e}):\n{stdout}\n{stderr}"));
    (seen, stderr)
}

fn fastrand_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default()
}

fn ts(t: &Talaria, plan: &Value) -> Value {
    client(t, Path::new("node"), "client.mjs", plan)
}

fn py(t: &Talaria, plan: &Value) -> Value {
    client(t, python(), "client.py", plan)
}

/// The Python SDK's `Client` in its default mode (`server/discover`, then 2026-07-28), or
/// the mode the plan names: what it saw, with every SDK log record at WARNING or above under
/// `logged`, and its stderr.
fn py_default(t: &Talaria, plan: &Value) -> (Value, String) {
    client_and_stderr(t, python(), "default_client.py", plan)
}

/// An SDK run that logged no warning or error and wrote no traceback.
fn assert_quiet(seen: &Value, stderr: &str) {
    assert_eq!(seen["logged"], json!([]), "{seen}");
    let loud = ["ERROR", "WARNING", "Traceback", "Exception"];
    assert!(!loud.iter().any(|w| stderr.contains(w)), "{stderr}");
}

#[test]
fn the_typescript_client_lists_calls_and_gets_refusals_as_tool_errors() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "hello from the workspace").expect("write");
    std::os::unix::fs::symlink("/etc/passwd", t.ws().join("passwd")).expect("symlink");
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let plan = json!({
        "stdio": stdio(&t, &[]),
        "calls": [
            {"name": "read_file", "arguments": {"path": "notes.txt"}},
            {"name": "read_file", "arguments": {"path": "/etc/passwd"}},
            {"name": "read_file", "arguments": {"path": "passwd"}},
            {"name": "terminal", "arguments": {"command": "rm -rf build"}},
            {"name": "no_such_tool", "arguments": {}},
        ],
    });
    let seen = ts(&t, &plan);
    assert_eq!(seen["server"]["name"], "talaria", "{seen}");
    let tools = seen["tools"].as_array().expect("tools");
    let read = tools.iter().find(|t| t["name"] == "read_file").expect("read_file listed");
    assert_eq!(read["annotations"]["readOnlyHint"], true);
    assert!(tools.iter().any(|t| t["name"] == "terminal" && t["annotations"]["destructiveHint"] == true));
    let calls = seen["calls"].as_array().expect("calls");
    assert_eq!(calls[0], json!({"isError": false, "text": "     1\thello from the workspace"}));
    // A capability the plugin was not granted: a tool error, not a success.
    assert_eq!(calls[1]["isError"], true);
    assert!(
        calls[1]["text"].as_str().expect("text").contains("outside the directories this plugin was granted"),
        "{}",
        calls[1]
    );
    // The sandbox escape through a link the workspace holds.
    assert_eq!(calls[2]["isError"], true, "{}", calls[2]);
    assert!(!calls[2]["text"].as_str().expect("text").contains("root:"), "{}", calls[2]);
    // A dangerous command with no one to ask: refused, never run silently.
    assert_eq!(calls[3]["isError"], true);
    assert!(
        calls[3]["text"]
            .as_str()
            .expect("text")
            .contains("`rm -rf build` needs approval (recursive delete) and no one is here to approve it"),
        "{}",
        calls[3]
    );
    assert!(t.ws().join("build").exists());
    assert_eq!(calls[4]["rpcError"]["code"], -32602, "{}", calls[4]);
}

#[test]
fn an_approval_is_asked_through_the_clients_elicitation() {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let call = json!([{"name": "terminal", "arguments": {"command": "rm -rf build"}}]);
    let declined = ts(&t, &json!({"stdio": stdio(&t, &["--plugin", "terminal"]), "elicit": "decline", "calls": call}));
    assert_eq!(declined["asked"], json!(["Let plugin 'terminal' run `rm -rf build`? (recursive delete)"]));
    assert_eq!(declined["calls"][0]["isError"], true);
    assert!(
        declined["calls"][0]["text"].as_str().expect("text").contains("the user denied `rm -rf build`"),
        "{declined}"
    );
    assert!(t.ws().join("build").exists());
    // --plugin chose what is served.
    let names: Vec<&str> =
        declined["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["terminal"]);

    let accepted = ts(&t, &json!({"stdio": stdio(&t, &["--plugin", "terminal"]), "elicit": "accept", "calls": call}));
    assert_eq!(accepted["calls"][0]["isError"], false, "{accepted}");
    assert!(!t.ws().join("build").exists(), "the allowed command did not run");
}

/// A call through `mcp serve` passes the same stages as the model's calls: the operator's
/// `guard` hook refuses what its rules forbid, `audit` sees every call, and a write keeps a
/// checkpoint first.
#[test]
fn the_operators_hooks_and_checkpoints_apply_to_served_calls() {
    let t = Talaria::new();
    std::fs::write(
        t.home.path().join("config.toml"),
        "[plugins.guard]\nenabled = true\n[plugins.guard.config]\nrules = [{ tool = \"write_file\", path_globs = [\"secrets/**\"], message = \"secrets are off limits\" }]\n\n[plugins.audit]\nenabled = true\n",
    )
    .expect("config");
    std::fs::write(t.ws().join("notes.txt"), "before").expect("write");
    let plan = json!({
        "stdio": stdio(&t, &[]),
        "calls": [
            {"name": "write_file", "arguments": {"path": "secrets/key.txt", "content": "hunter2"}},
            {"name": "write_file", "arguments": {"path": "notes.txt", "content": "after"}},
        ],
    });
    let seen = ts(&t, &plan);
    let calls = seen["calls"].as_array().expect("calls");
    assert_eq!(calls[0]["isError"], true, "{seen}");
    let refused = calls[0]["text"].as_str().expect("text");
    assert!(refused.contains("blocked by hook 'guard'") && refused.contains("secrets are off limits"), "{refused}");
    assert!(!t.ws().join("secrets/key.txt").exists(), "the guarded write happened");
    assert_eq!(calls[1]["isError"], false, "{seen}");
    assert_eq!(std::fs::read_to_string(t.ws().join("notes.txt")).expect("notes"), "after");

    let log = std::fs::read_to_string(t.home.path().join("plugin-data/audit/audit.jsonl")).expect("audit log");
    let oks: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json line"))
        .filter(|l| l["tool"] == "write_file")
        .map(|l| l["ok"].clone())
        .collect();
    assert_eq!(oks, [json!(false), json!(true)], "{log}");
    // The checkpoint kept before the allowed write holds the file as it was.
    let kept = walk(&t.home.path().join("checkpoints"));
    assert!(
        kept.iter().any(|f| std::fs::read(f).is_ok_and(|b| b == b"before")),
        "no checkpoint of notes.txt: {kept:?}"
    );
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() { found.extend(walk(&path)) } else { found.push(path) }
    }
    found
}

#[test]
fn the_python_client_speaks_both_revisions() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "py").expect("write");
    let calls = json!([{"name": "read_file", "arguments": {"path": "notes.txt"}}]);
    let old = py(&t, &json!({"stdio": stdio(&t, &[]), "calls": calls}));
    assert_eq!((old["server"].as_str(), old["protocol"].as_str()), (Some("talaria"), Some("2025-11-25")), "{old}");
    assert_eq!(old["calls"][0]["text"], "     1\tpy");
    let current = py(&t, &json!({"stdio": stdio(&t, &[]), "discover": true, "calls": calls}));
    assert_eq!(current["protocol"], "2026-07-28", "{current}");
    assert!(current["supported"].as_array().expect("versions").contains(&json!("2025-11-25")));
    assert_eq!(current["calls"][0]["text"], "     1\tpy");
}

const DENIED: &str = "the user denied `rm -rf build` (recursive delete)";
const RAN: &str = r#"{"exit_code":0,"output":"","timed_out":false,"truncated":false}"#;

/// Issue 36, item 4: on 2026-07-28 (the Python SDK's default) the question goes out inside an
/// `input_required` result and the SDK calls again with the answer; the held call goes on
/// from where it asked, as after `elicitation/create` on 2025-11-25.
#[test]
fn the_python_clients_default_mode_is_asked_through_input_required() {
    let t = Talaria::new();
    let server = HttpServe::start(&t, None);
    let call = json!([{"name": "terminal", "arguments": {"command": "rm -rf build"}}]);
    for (how, transport) in [("stdio", stdio(&t, &["--plugin", "terminal"])), ("http", json!({"url": server.url}))] {
        std::fs::create_dir(t.ws().join("build")).expect("mkdir");
        let (declined, stderr) = py_default(&t, &json!({how: transport, "elicit": "decline", "calls": call}));
        assert_eq!(declined["protocol"], "2026-07-28", "{how}: {declined}");
        assert_eq!(declined["asked"], json!(["Let plugin 'terminal' run `rm -rf build`? (recursive delete)"]), "{how}");
        assert_eq!(declined["calls"][0]["isError"], true, "{how}: {declined}");
        let text = declined["calls"][0]["text"].as_str().expect("text");
        assert!(
            text.starts_with("BLOCKED by the safety policy, the command did not run") && text.contains(DENIED),
            "{how}: {text}"
        );
        assert!(t.ws().join("build").exists(), "{how}: the declined command ran");
        assert_quiet(&declined, &stderr);

        let (accepted, stderr) = py_default(&t, &json!({how: transport, "elicit": "accept", "calls": call}));
        assert_eq!(accepted["asked"], declined["asked"], "{how}");
        assert_eq!(accepted["calls"][0], json!({"isError": false, "text": RAN}), "{how}: {accepted}");
        assert!(!t.ws().join("build").exists(), "{how}: the allowed command did not run");
        assert_quiet(&accepted, &stderr);
        if how == "http" {
            // Stateless: discover, tools/list, the call that asks, the call that answers.
            assert_eq!(accepted["exchanges"], json!([["POST", 200], ["POST", 200], ["POST", 200], ["POST", 200]]));
        }
    }
    // Without elicitation nobody is asked, and the refusal says so.
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let (unasked, _) = py_default(&t, &json!({"stdio": stdio(&t, &[]), "calls": call}));
    assert_eq!((&unasked["protocol"], &unasked["asked"]), (&json!("2026-07-28"), &json!([])), "{unasked}");
    let text = unasked["calls"][0]["text"].as_str().expect("text");
    assert!(text.contains("no one is here to approve it"), "{text}");
    assert!(t.ws().join("build").exists());
}

/// A `requestState` the server never gave (or gave and took back) resumes nothing: a tool
/// error that says to call again, and the command does not run.
#[test]
fn an_answer_for_no_waiting_call_runs_nothing() {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let plan = json!({"stdio": stdio(&t, &[]), "elicit": "accept", "calls": [
        {"name": "terminal", "arguments": {"command": "rm -rf build"}, "requestState": "00112233445566778899aabbccddeeff"},
    ]});
    let (seen, _) = py_default(&t, &plan);
    assert_eq!(seen["calls"][0]["isError"], true, "{seen}");
    let text = seen["calls"][0]["text"].as_str().expect("text");
    assert!(text.contains("no call is waiting for this answer") && text.contains("call the tool again"), "{text}");
    assert!(t.ws().join("build").exists());
}

/// Issue 36, items 5 and 7 with the Python SDK: a page's foreign `Origin` gets nothing (403
/// to the discover probe and to the handshake it falls back to); a closed session is
/// answered as the SDK expects, so it logs nothing.
#[test]
fn over_http_the_python_client_is_refused_from_a_foreign_origin_and_closes_cleanly() {
    let t = Talaria::new();
    let server = HttpServe::start(&t, None);
    let foreign = json!({"http": {"url": server.url, "headers": {"Origin": "http://evil.example"}}, "calls": []});
    let (refused, _) = py_default(&t, &foreign);
    assert!(refused["error"].is_string() && refused["tools"].is_null(), "{refused}");
    assert_eq!(refused["exchanges"], json!([["POST", 403], ["POST", 403]]), "{refused}");

    let port = server.url.trim_start_matches("http://127.0.0.1:").trim_end_matches("/mcp");
    let local = json!({"url": server.url, "headers": {"Origin": format!("http://localhost:{port}")}});
    let (legacy, stderr) = py_default(&t, &json!({"http": local, "mode": "legacy", "calls": []}));
    assert_eq!(legacy["protocol"], "2025-11-25", "{legacy}");
    let exchanges = legacy["exchanges"].as_array().expect("exchanges");
    assert_eq!(exchanges.last(), Some(&json!(["DELETE", 200])), "{legacy}");
    assert_quiet(&legacy, &stderr);
    let (current, stderr) = py_default(&t, &json!({"http": local, "calls": []}));
    assert_eq!(current["protocol"], "2026-07-28", "{current}");
    assert_quiet(&current, &stderr);
}

/// Send `request` as it is to `addr` and read the whole answer (the request closes the
/// connection).
fn exchange(addr: &str, request: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

/// An MCP `initialize` request to `addr` with the header lines `headers` (each ending in CRLF):
/// the whole answer.
fn initialize(addr: &str, headers: &str) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"page","version":"1"}}}"#;
    exchange(
        addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// `talaria mcp serve --http` on a free loopback port; killed when dropped.
struct HttpServe {
    child: Child,
    url: String,
}

impl HttpServe {
    fn start(t: &Talaria, token: Option<&str>) -> Self {
        Self::spawn(t, token, Command::new(env!("CARGO_BIN_EXE_talaria")))
    }

    /// The server allowed `files` open files at most (util-linux `prlimit`).
    fn start_with_file_limit(t: &Talaria, files: u64) -> Self {
        let mut command = Command::new("prlimit");
        command.arg(format!("--nofile={files}:{files}")).arg("--").arg(env!("CARGO_BIN_EXE_talaria"));
        Self::spawn(t, None, command)
    }

    fn spawn(t: &Talaria, token: Option<&str>, mut command: Command) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        command
            .args(["mcp", "serve", "--http", &format!("127.0.0.1:{port}")])
            .current_dir(t.workspace.path())
            .env("TALARIA_HOME", t.home.path())
            .env_remove("TALARIA_MCP_TOKEN")
            .stdout(Stdio::null())
            // A service logs to stderr: kept for the tests to read.
            .stderr(std::fs::File::create(t.home.path().join("serve.stderr")).expect("stderr file"));
        if let Some(token) = token {
            command.env("TALARIA_MCP_TOKEN", token);
        }
        let child = command.spawn().expect("talaria mcp serve --http");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < WAIT, "mcp serve did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, url: format!("http://127.0.0.1:{port}/mcp") }
    }
}

impl Drop for HttpServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn over_http_a_bearer_token_is_checked_and_required_beyond_loopback() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "over http").expect("write");
    let out = t.run(&["mcp", "serve", "--http", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is reachable from other machines: give a bearer token"), "{err}");

    let server = HttpServe::start(&t, Some("s3cret-token"));
    let calls = json!([{"name": "read_file", "arguments": {"path": "notes.txt"}}]);
    let refused = ts(&t, &json!({"http": {"url": server.url, "token": "wrong"}, "calls": calls}));
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("a bearer token is required")), "{refused}");
    assert!(refused["tools"].is_null(), "nothing was served: {refused}");
    let ok = py(&t, &json!({"http": {"url": server.url, "token": "s3cret-token"}, "calls": calls}));
    assert_eq!(ok["calls"][0]["text"], "     1\tover http", "{ok}");
    let older = ts(
        &t,
        &json!({"http": {"url": server.url, "token": "s3cret-token"}, "protocol": "2025-03-26", "calls": calls}),
    );
    assert_eq!(older["protocol"], "2025-03-26", "{older}");
    assert_eq!(older["calls"][0]["text"], "     1\tover http");
}

/// Ten wrong tokens within a minute lock the address out, whatever client the headers claim:
/// the right token is then answered 429 with `Retry-After` until the minute is over, and the
/// lockout is logged.
#[test]
fn over_http_an_address_that_keeps_guessing_the_token_is_locked_out() {
    let t = Talaria::new();
    let server = HttpServe::start(&t, Some("s3cret-token"));
    let addr = server.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let post = |token: &str| initialize(&addr, &format!("Authorization: Bearer {token}\r\n"));
    assert!(post("s3cret-token").starts_with("HTTP/1.1 200"), "the right token passes");
    for guess in 0..10 {
        // Each guess claims another client in the headers a proxy would write: the address
        // counted is the connection's.
        let answer = initialize(
            &addr,
            &format!(
                "Authorization: Bearer guess-{guess}\r\nX-Forwarded-For: 198.51.100.{guess}\r\nX-Real-IP: 198.51.100.{guess}\r\n"
            ),
        );
        assert!(answer.starts_with("HTTP/1.1 401"), "guess {guess}: {answer}");
        assert!(answer.to_lowercase().contains("www-authenticate: bearer"), "{answer}");
    }
    let locked = post("s3cret-token");
    assert!(locked.starts_with("HTTP/1.1 429"), "{locked}");
    let retry = locked
        .lines()
        .find_map(|l| l.to_lowercase().strip_prefix("retry-after:").map(|v| v.trim().parse::<u64>().expect("seconds")))
        .expect("Retry-After");
    assert!((55..=60).contains(&retry), "{locked}");
    assert!(
        locked.ends_with(&format!("too many failed authentications from this address: try again in {retry} s")),
        "{locked}"
    );
    let log = std::fs::read_to_string(t.home.path().join("serve.stderr")).expect("the server's log");
    assert!(
        log.contains("10 failed authentications from 127.0.0.1 within 60 s: refusing it for up to 60 s")
            && log.contains("mcp serve"),
        "{log}"
    );
}

/// The transport's rule (issue 36): a request from a web page of a foreign origin is refused
/// with 403 before anything reads it; a loopback origin, or none (not a browser), is served.
#[test]
fn over_http_a_foreign_origin_is_refused() {
    let t = Talaria::new();
    let server = HttpServe::start(&t, None);
    let addr = server.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let post =
        |origin: Option<&str>| initialize(&addr, &origin.map(|o| format!("Origin: {o}\r\n")).unwrap_or_default());
    let refused = post(Some("http://evil.example"));
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(
        refused.contains("Origin `http://evil.example` is not allowed") && refused.contains("--allow-origin"),
        "{refused}"
    );
    let mut session = String::new();
    for fine in [Some("http://localhost:6274"), Some("http://127.0.0.1:3000"), None] {
        let answer = post(fine);
        assert!(answer.starts_with("HTTP/1.1 200"), "{fine:?}: {answer}");
        session = answer
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("mcp-session-id").then(|| value.trim().to_string())
            })
            .expect("a session id");
    }
    // Closing the session is answered as the SDKs expect (200, not 202).
    let closed = exchange(
        &addr,
        &format!("DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nMcp-Session-Id: {session}\r\nConnection: close\r\n\r\n"),
    );
    assert!(closed.starts_with("HTTP/1.1 200"), "{closed}");
}

#[test]
fn malformed_requests_get_the_right_json_rpc_errors() {
    let t = Talaria::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["mcp", "serve"])
        .current_dir(t.workspace.path())
        .env("TALARIA_HOME", t.home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut ask = move |message: Value| -> Value {
        writeln!(stdin, "{message}").expect("write");
        if message.get("id").is_none() && message.get("method").is_some() {
            return Value::Null; // a notification: no answer
        }
        let line = lines.next().expect("an answer").expect("read");
        serde_json::from_str(&line).expect("json")
    };
    let init = ask(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}));
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    ask(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let unknown = ask(json!({"jsonrpc": "2.0", "id": 2, "method": "no/such_method"}));
    assert_eq!((unknown["id"].as_i64(), unknown["error"]["code"].as_i64()), (Some(2), Some(-32601)), "{unknown}");
    let no_tool =
        ask(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}));
    assert_eq!(no_tool["error"]["code"], -32602, "{no_tool}");
    let not_rpc = ask(json!({"hello": "world"}));
    assert_eq!(not_rpc["error"]["code"], -32600, "{not_rpc}");
    let listed = ask(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}));
    assert!(listed["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "still serving: {listed}");
    drop(ask);
    let status = child.wait().expect("exit");
    assert!(status.success(), "stdin closed: it stops cleanly ({status:?})");
}

#[test]
fn over_http_a_client_is_answered_while_300_slow_ones_hang() {
    use std::io::{Read as _, Write as _};
    const SLOW: usize = 300;
    let t = Talaria::new();
    // 256 files: 64 connections in all, 8 per address.
    let server = HttpServe::start_with_file_limit(&t, 256);
    let addr = server.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let socket: std::net::SocketAddr = addr.parse().expect("addr");
    let mut slow = Vec::new();
    for _ in 0..SLOW {
        if let Ok(mut s) = std::net::TcpStream::connect_timeout(&socket, Duration::from_secs(5))
            && s.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: appl").is_ok()
        {
            slow.push(s);
        }
    }
    let flooded = Instant::now();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}});
    let headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    let started = Instant::now();
    let (status, answer) = crate::gateway::post(&addr, "/mcp", &headers, init.to_string().as_bytes());
    let took = started.elapsed();
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"protocolVersion\":\"2025-06-18\""), "{answer}");
    assert!(took < Duration::from_secs(5), "took {took:?}");

    // Past the 10 s header deadline none of the slow clients is still connected.
    std::thread::sleep((flooded + Duration::from_secs(12)).saturating_duration_since(Instant::now()));
    let mut open = 0;
    for s in &mut slow {
        s.set_nonblocking(true).expect("nonblocking");
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    open += 1;
                    break;
                }
                Err(_) => break,
            }
        }
    }
    assert_eq!(open, 0, "{open} of {} slow clients are still connected", slow.len());
}
