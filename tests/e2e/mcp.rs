//! MCP servers as tools, against the real reference servers from npm
//! (`@modelcontextprotocol/server-everything` over stdio and streamable HTTP,
//! `@modelcontextprotocol/server-filesystem`), installed into tests/mcp on first use, and a
//! FastMCP server (PyPI `fastmcp`, tests/mcp/image_server.py) returning an image, with the real
//! binary and the mock model.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{MockLlm, Script, Step};

use crate::Talaria;

const WAIT: Duration = Duration::from_secs(30);

/// tests/mcp, with its npm packages installed (once per test binary).
pub(crate) fn peers_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp").canonicalize().expect("tests/mcp");
        if !dir.join("node_modules/@modelcontextprotocol/server-everything").exists() {
            let out = Command::new("npm")
                .args(["ci", "--no-fund", "--no-audit"])
                .current_dir(&dir)
                .output()
                .expect("npm (Node.js) is needed for the MCP tests");
            assert!(out.status.success(), "npm ci in tests/mcp failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        dir
    })
}

fn everything_js() -> String {
    peers_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js").display().to_string()
}

fn filesystem_js() -> String {
    peers_dir().join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js").display().to_string()
}

/// A home with the mock model and `servers` (TOML) as its `[mcp_servers]`.
fn home(mock: &MockLlm, servers: &str) -> Talaria {
    let t = Talaria::new();
    t.use_mock(mock, "chat_completions", servers);
    t
}

fn stdio_everything(extra: &str) -> String {
    format!("[mcp_servers.everything]\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n{extra}\n", everything_js())
}

/// What the model was given as the result of call number `n` (0-based) of the conversation.
fn tool_results(mock: &MockLlm) -> Vec<String> {
    let requests = mock.requests();
    let Some(last) = requests.last() else { return Vec::new() };
    last.body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "tool").map(|m| m["content"].to_string()).collect())
        .unwrap_or_default()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn servers_are_added_tested_and_their_tools_called_from_a_chat() {
    let mock = MockLlm::start(Script::new([
        Step::tool_call("mcp_everything_echo", json!({"message": "hi from talaria"})),
        Step::tool_call("mcp_everything_get-sum", json!({"a": "two", "b": 3})),
        Step::text("done"),
    ]));
    let t = home(&mock, "");
    let everything = everything_js();
    let out = t.ok(&["mcp", "add", "everything", "--", "node", &everything, "stdio"]);
    assert!(out.contains("mcp_everything_TOOL"), "{out}");
    let listed = t.ok(&["mcp", "list"]);
    assert!(listed.contains("everything") && listed.contains("mcp-everything"), "{listed}");
    let tested = t.ok(&["mcp", "test", "everything"]);
    assert!(tested.contains("(MCP 2025-11-25)"), "{tested}");
    assert!(tested.contains("mcp_everything_echo  (read-only)"), "{tested}");
    assert!(tested.contains("mcp_everything_toggle-simulated-logging  (may change things: asks first)"), "{tested}");

    let out = t.chat(&["-q", "echo and add"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    let requests = mock.requests();
    let names = tool_names(&requests[0].body);
    assert!(
        names.contains(&"mcp_everything_echo".to_string()) && names.contains(&"read_file".to_string()),
        "{names:?}"
    );
    let results = tool_results(&mock);
    assert!(results[0].contains("Echo: hi from talaria"), "{results:?}");
    // A tool's own failure reaches the model as an error.
    assert!(results[1].contains("error") && results[1].contains("-32602"), "{results:?}");
    // The tool list was cached for the next run.
    let cache = t.home.path().join("cache/mcp");
    assert!(
        std::fs::read_dir(&cache)
            .expect("cache")
            .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("everything-")))
    );
    t.ok(&["mcp", "remove", "everything"]);
    assert!(t.ok(&["mcp", "list"]).starts_with("no MCP servers"));
}

#[test]
fn a_tool_that_may_change_things_asks_first_and_is_refused_with_nobody_to_ask() {
    let calls =
        || Script::new([Step::tool_call("mcp_everything_toggle-simulated-logging", json!({})), Step::text("done")]);
    let mock = MockLlm::start(calls());
    let t = home(&mock, &stdio_everything(""));
    assert!(t.chat(&["-q", "toggle logging"]).status.success());
    let refused = tool_results(&mock).join("\n");
    assert!(
        refused.contains(
            "`toggle-simulated-logging` of MCP server everything needs approval and no one is here to give it"
        ),
        "{refused}"
    );
    assert!(refused.contains("mcp:everything:toggle-simulated-logging"), "{refused}");

    // Allowed "always" in config: it runs.
    let mock = MockLlm::start(calls());
    let config =
        format!("[approvals]\nallow = [\"mcp:everything:toggle-simulated-logging\"]\n{}", stdio_everything(""));
    let t = home(&mock, &config);
    assert!(t.chat(&["-q", "toggle logging"]).status.success());
    let ran = tool_results(&mock).join("\n");
    assert!(ran.contains("logging"), "{ran}");
    assert!(!ran.contains("needs approval"), "{ran}");
}

#[test]
fn a_server_killed_mid_call_fails_that_call_and_is_started_again_on_the_next() {
    let mock = MockLlm::start(Script::new([
        Step::tool_call("mcp_everything_trigger-long-running-operation", json!({"duration": 20, "steps": 20})),
        Step::tool_call("mcp_everything_echo", json!({"message": "after restart"})),
        Step::text("done"),
    ]));
    let pids = tempfile::tempdir().expect("tempdir");
    let pidfile = pids.path().join("pids");
    // A name of its own, to find this test's server among the others (its pid inside its
    // sandbox means nothing outside).
    let script = pids.path().join("everything-under-test.js");
    std::os::unix::fs::symlink(everything_js(), &script).expect("symlink");
    let server = format!(
        "[mcp_servers.everything]\ncommand = \"sh\"\nargs = [\"-c\", \"echo started >> {}; exec node {} stdio\"]\nsandbox = {{ read = [\"{}\"], write = [\"{}\"] }}\n",
        pidfile.display(),
        script.display(),
        peers_dir().display(),
        pids.path().display()
    );
    let t = home(&mock, &server);
    let child = spawn_chat(&t, "run the long operation");
    // The long call is in flight once the model asked for it: kill the server under it.
    let start = Instant::now();
    while mock.requests().is_empty() || !pidfile.exists() {
        assert!(start.elapsed() < WAIT, "the call never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(700));
    let pattern = format!("{} stdio", script.display());
    assert!(Command::new("pkill").args(["-9", "-f", &pattern]).status().expect("pkill").success());
    let out = child.wait_with_output().expect("chat");
    assert!(out.status.success(), "{}", stderr(&out));
    let results = tool_results(&mock);
    assert!(results[0].contains("MCP server `everything` stopped during the call"), "{results:?}");
    assert!(results[1].contains("Echo: after restart"), "{results:?}");
    let started = std::fs::read_to_string(&pidfile).expect("pids");
    assert_eq!(started.lines().count(), 2, "started once more for the next call: {started}");
}

fn spawn_chat(t: &Talaria, prompt: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["chat", "-q", prompt])
        .current_dir(t.workspace.path())
        .env("TALARIA_HOME", t.home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

#[test]
fn a_slow_tool_times_out_with_the_setting_named() {
    let mock = MockLlm::start(Script::new([
        Step::tool_call("mcp_everything_trigger-long-running-operation", json!({"duration": 10, "steps": 10})),
        Step::text("done"),
    ]));
    let t = home(&mock, &stdio_everything("tool_timeout_secs = 1"));
    let started = Instant::now();
    assert!(t.chat(&["-q", "run the long operation"]).status.success());
    assert!(started.elapsed() < Duration::from_secs(8), "not stopped at its timeout");
    let results = tool_results(&mock).join("\n");
    assert!(
        results.contains(
            "MCP server `everything` did not answer `trigger-long-running-operation` within 1 s (tool_timeout_secs under [mcp_servers.everything])"
        ),
        "{results}"
    );
}

#[test]
fn a_server_that_will_not_start_is_reported_once_and_the_others_carry_on() {
    let mock = MockLlm::start(Script::new([
        Step::tool_call("mcp_everything_echo", json!({"message": "still here"})),
        Step::text("done"),
    ]));
    let servers = format!("{}[mcp_servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n", stdio_everything(""));
    let t = home(&mock, &servers);
    let out = t.chat(&["-q", "echo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("MCP server `broken` is left out").count(), 1, "{err}");
    assert!(err.contains("cannot start `/nonexistent/mcp-server`"), "{err}");
    assert!(tool_results(&mock)[0].contains("Echo: still here"));
}

/// server-everything in streamable HTTP mode on a loopback port; killed when dropped.
struct HttpEverything {
    child: Child,
    port: u16,
}

impl HttpEverything {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        let child = Command::new("node")
            .arg("--import")
            .arg(peers_dir().join("loopback.mjs"))
            .args([everything_js().as_str(), "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < WAIT, "server-everything did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, port }
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_streamable_http_server_serves_its_tools() {
    let server = HttpEverything::start();
    let mock = MockLlm::start(Script::new([
        Step::tool_call("mcp_web_echo", json!({"message": "over http"})),
        Step::text("done"),
    ]));
    let config = format!(
        "[mcp_servers.web]\nurl = \"http://127.0.0.1:{}/mcp\"\nheaders = {{ X-Talaria-Test = \"${{MCP_TEST_TOKEN}}\" }}\n",
        server.port
    );
    let t = home(&mock, &config);
    std::fs::write(t.home.path().join(".env"), "MCP_TEST_TOKEN=abc123\n").expect(".env");
    let tested = t.ok(&["mcp", "test", "web"]);
    assert!(tested.contains("mcp_web_echo"), "{tested}");
    assert!(t.chat(&["-q", "echo over http"]).status.success());
    assert!(tool_results(&mock)[0].contains("Echo: over http"), "{:?}", tool_results(&mock));
}

#[test]
fn the_filesystem_server_reads_what_it_was_given_and_refuses_the_rest() {
    let mock = MockLlm::start(Script::new([
        Step::tool_call("mcp_fs_list_directory", json!({"path": "."})),
        Step::tool_call("mcp_fs_read_text_file", json!({"path": "/etc/hostname"})),
        Step::tool_call("mcp_fs_write_file", json!({"path": "new.txt", "content": "x"})),
        Step::text("done"),
    ]));
    let t = Talaria::new();
    std::fs::write(t.workspace.path().join("notes.md"), "hello").expect("write");
    let config = format!(
        "[mcp_servers.fs]\ncommand = \"node\"\nargs = [\"{}\", \"{}\"]\ncwd = \"{}\"\n",
        filesystem_js(),
        t.ws().display(),
        t.ws().display()
    );
    t.use_mock(&mock, "chat_completions", &config);
    assert!(t.chat(&["-q", "look around"]).status.success());
    let results = tool_results(&mock);
    assert!(results[0].contains("notes.md"), "{results:?}");
    assert!(results[1].contains("Access denied") || results[1].contains("outside allowed"), "{results:?}");
    assert!(results[2].contains("needs approval"), "{results:?}");
    assert!(!t.workspace.path().join("new.txt").exists());
}

#[test]
fn resources_and_prompts_are_offered_as_tools() {
    let mock = MockLlm::start(Script::new([
        Step::tool_call("mcp_everything_resources_list", json!({})),
        Step::tool_call("mcp_everything_resource_read", json!({"uri": "demo://resource/dynamic/text/1"})),
        Step::tool_call("mcp_everything_prompt_get", json!({"name": "args-prompt", "arguments": {"city": "Lisbon"}})),
        Step::text("done"),
    ]));
    let t = home(&mock, &stdio_everything(""));
    let out = t.chat(&["-q", "look at its resources and prompts"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let names = tool_names(&mock.requests()[0].body);
    for name in [
        "mcp_everything_resources_list",
        "mcp_everything_resource_read",
        "mcp_everything_prompts_list",
        "mcp_everything_prompt_get",
    ] {
        assert!(names.contains(&name.to_string()), "{name} missing: {names:?}");
    }
    let results = tool_results(&mock);
    assert!(results[0].contains("demo://resource/static/document"), "{results:?}");
    assert!(results[1].contains("[resource demo://resource/dynamic/text/1]"), "{results:?}");
    assert!(results[2].contains("Lisbon"), "{results:?}");
}

#[test]
fn a_stdio_server_gets_its_own_env_and_none_of_talarias_keys() {
    let mock = MockLlm::start(Script::new([Step::tool_call("mcp_everything_get-env", json!({})), Step::text("done")]));
    let t = home(&mock, &stdio_everything("env = { GIVEN = \"${GIVEN_SECRET}\" }"));
    std::fs::write(t.home.path().join(".env"), "GIVEN_SECRET=meant-for-the-server\n").expect(".env");
    let out = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["chat", "-q", "show your environment"])
        .current_dir(t.workspace.path())
        .env("TALARIA_HOME", t.home.path())
        .env("OPENAI_API_KEY", "sk-never-to-an-mcp-server")
        .env("GITHUB_TOKEN", "ghp-never-either")
        .output()
        .expect("chat");
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = tool_results(&mock).join("\n");
    assert!(seen.contains("meant-for-the-server"), "its own env is passed: {seen}");
    assert!(seen.contains("PATH"), "{seen}");
    assert!(!seen.contains("sk-never-to-an-mcp-server") && !seen.contains("ghp-never-either"), "{seen}");
}

/// The `fastmcp` version the image server runs on (PyPI).
const FASTMCP: &str = "4.2.3";

/// A virtual environment with `fastmcp` (made once per machine, checked once per binary; apart
/// from mcp_serve.rs's, which keeps the `mcp` SDK at its own pin).
fn fastmcp_python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| python_with("fastmcp-venv", "fastmcp", FASTMCP))
}

/// The Python of the virtual environment `name` under ~/.cache/talaria-tests, with `package`
/// at `version` (made, or fixed, when it has not).
pub(crate) fn python_with(name: &str, package: &str, version: &str) -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).expect("HOME");
    let venv = home.join(".cache/talaria-tests").join(name);
    let py = venv.join("bin/python");
    let check = format!("import importlib.metadata as m, sys; sys.exit(m.version('{package}') != '{version}')");
    let ready = Command::new(&py).args(["-c", &check]).status().is_ok_and(|s| s.success());
    if !ready {
        let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().expect("python3");
        assert!(made.success(), "cannot make {}", venv.display());
        let out = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", &format!("{package}=={version}")])
            .output()
            .expect("pip");
        assert!(out.status.success(), "pip install {package}: {}", String::from_utf8_lossy(&out.stderr));
    }
    py
}

/// tests/mcp/image_server.py, a FastMCP server whose `tiny_png` returns a PNG and a text.
fn image_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/image_server.py")
        .canonicalize()
        .expect("image_server.py")
}

/// The base64 of the PNG the image server sends, as its script spells it.
fn tiny_png() -> String {
    let script = std::fs::read_to_string(image_server()).expect("image_server.py");
    let line = script.lines().find_map(|l| l.strip_prefix("TINY_PNG = \"")).expect("TINY_PNG in image_server.py");
    line.trim_end_matches('"').to_string()
}

/// A home with the mock model on `api_mode` (`model_extra` under `[model]`) and the image
/// server as `[mcp_servers.img]`.
fn image_home(mock: &MockLlm, api_mode: &str, model_extra: &str) -> Talaria {
    // A venv's `bin/python` links to an interpreter outside it: both are shown to the server's
    // sandbox without a grant.
    let server = format!(
        "[mcp_servers.img]\ncommand = \"{}\"\nargs = [\"{}\"]\n",
        fastmcp_python().display(),
        image_server().display()
    );
    let t = Talaria::new();
    t.use_model(&mock.base_url(), api_mode, model_extra, &server);
    t
}

/// Chat once on `api_mode` with the model calling `tiny_png`; the request that followed the call.
fn after_tiny_png(api_mode: &str, model_extra: &str) -> (Value, String) {
    let mock = MockLlm::start(Script::new([Step::tool_call("mcp_img_tiny_png", json!({})), Step::text("done")]));
    let t = image_home(&mock, api_mode, model_extra);
    let out = t.chat(&["-q", "show me the picture"]);
    assert!(out.status.success(), "{api_mode}: {}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done", "{api_mode}: {}", stderr(&out));
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "{api_mode}: {requests:#?}");
    assert!(
        requests[0].body["tools"].to_string().contains("\"mcp_img_tiny_png\""),
        "{api_mode}: the tool was not offered: {}",
        stderr(&out)
    );
    (requests[1].body.clone(), stderr(&out))
}

/// `body` without its tools and system prompt: the conversation, for messages.
fn conversation(body: &Value) -> String {
    let mut body = body.clone();
    if let Some(body) = body.as_object_mut() {
        for key in ["tools", "system", "instructions"] {
            body.remove(key);
        }
    }
    for key in ["messages", "input"] {
        if let Some(items) = body.get_mut(key).and_then(Value::as_array_mut) {
            items.retain(|m| m["role"] != "system" && m["role"] != "developer");
        }
    }
    format!("{body:#}")
}

/// What the tool call's result is in `body` (one request in `api_mode`'s wire format).
fn tool_result(api_mode: &str, body: &Value) -> Value {
    let items = |key: &str| body[key].as_array().cloned().unwrap_or_default();
    let found = match api_mode {
        "chat_completions" => items("messages").into_iter().find(|m| m["role"] == "tool").map(|m| m["content"].clone()),
        "anthropic_messages" => items("messages")
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .find(|b| b["type"] == "tool_result")
            .map(|b| b["content"].clone()),
        "responses" => {
            items("input").into_iter().find(|i| i["type"] == "function_call_output").map(|i| i["output"].clone())
        }
        other => panic!("no such api_mode {other}"),
    };
    found.unwrap_or_else(|| panic!("{api_mode}: no tool result in {}", conversation(body)))
}

#[test]
fn an_image_from_a_fastmcp_tool_reaches_a_vision_model_in_every_wire_format() {
    let b64 = tiny_png();
    let url = format!("data:image/png;base64,{b64}");
    for api_mode in ["chat_completions", "anthropic_messages", "responses"] {
        let (body, told) = after_tiny_png(api_mode, "vision = true");
        assert!(!told.contains("will not see"), "{api_mode}: {told}");
        let result = tool_result(api_mode, &body);
        // The text part is passed on as ever.
        assert!(result.to_string().contains("a red square"), "{api_mode}: {}", conversation(&body));
        match api_mode {
            "chat_completions" => {
                // A tool message holds text only: the image follows the tool message(s) as a
                // user message.
                let messages = body["messages"].as_array().expect("messages");
                let first = messages.iter().position(|m| m["role"] == "tool").expect("a tool message");
                let after = messages[first..].iter().find(|m| m["role"] != "tool").unwrap_or_else(|| {
                    panic!("{api_mode}: nothing after the tool message: {}", conversation(&body));
                });
                assert_eq!(after["role"], "user", "{api_mode}: {}", conversation(&body));
                let parts =
                    after["content"].as_array().unwrap_or_else(|| panic!("{api_mode}: {}", conversation(&body)));
                assert!(
                    parts.iter().any(|p| p["type"] == "image_url" && p["image_url"]["url"] == url),
                    "{api_mode}: no image_url part with the PNG: {}",
                    conversation(&body)
                );
            }
            "anthropic_messages" => {
                let blocks = result.as_array().unwrap_or_else(|| panic!("{api_mode}: {}", conversation(&body)));
                assert!(
                    blocks.iter().any(|b| b["type"] == "image"
                        && b["source"] == json!({"type": "base64", "media_type": "image/png", "data": b64.as_str()})),
                    "{api_mode}: no image block with the PNG in the tool_result: {}",
                    conversation(&body)
                );
            }
            _ => {
                let parts = result.as_array().unwrap_or_else(|| panic!("{api_mode}: {}", conversation(&body)));
                assert!(
                    parts.iter().any(|p| p["type"] == "input_image" && p["image_url"] == url),
                    "{api_mode}: no input_image part with the PNG in the function_call_output: {}",
                    conversation(&body)
                );
            }
        }
        // Once, not also as base64 text.
        assert_eq!(body.to_string().matches(b64.as_str()).count(), 1, "{api_mode}: {}", conversation(&body));
    }
}

#[test]
fn a_model_without_vision_gets_a_note_naming_the_setting_instead_of_the_image() {
    let b64 = tiny_png();
    for api_mode in ["chat_completions", "anthropic_messages", "responses"] {
        // "mock-model" is not a name taken to accept images, and `vision` is not set.
        let (body, told) = after_tiny_png(api_mode, "");
        // The user is told too.
        assert!(
            told.contains("mcp_img_tiny_png returned an image that custom/mock-model will not see")
                && told.contains("vision = true"),
            "{api_mode}: {told}"
        );
        let all = body.to_string();
        assert!(!all.contains(b64.as_str()), "{api_mode}: the PNG was sent: {}", conversation(&body));
        let said = body.get("messages").or_else(|| body.get("input")).map(Value::to_string).unwrap_or_default();
        for image in ["\"image_url\"", "\"input_image\"", "\"type\":\"image\""] {
            assert!(!said.contains(image), "{api_mode}: {image} was sent: {}", conversation(&body));
        }
        let result = tool_result(api_mode, &body).to_string();
        assert!(result.contains("a red square"), "{api_mode}: {result}");
        assert!(result.contains("not shown") && result.contains("vision = true"), "{api_mode}: {result}");
    }
}
