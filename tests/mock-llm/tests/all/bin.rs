//! The `talaria-mock-llm` binary.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use serde_json::json;

use crate::support::post;

/// Kills the server when the test ends, however it ends.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_talaria-mock-llm"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start talaria-mock-llm");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    BufReader::new(stdout).read_line(&mut line).expect("the listening line");
    let url =
        line.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    let addr = url.strip_suffix("/v1").expect("base URL ends in /v1").parse().expect("an address");
    Server { child, addr }
}

#[test]
fn auto_with_a_configured_tool() {
    let server = spawn(&["--auto", "--tool", "grep", "--tool-args", r#"{"pattern": "n{n}"}"#]);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "use the tool 2 times"}]});
    let reply = post(server.addr, "/v1/chat/completions", &body).json();
    let call = &reply["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "grep");
    assert_eq!(call["arguments"], r#"{"pattern":"n1"}"#);
}

#[test]
fn script_file() {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), r#"[{"reply": {"text": "from the file"}}]"#).expect("write");
    let server = spawn(&["--script", file.path().to_str().expect("utf-8 path")]);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let reply = post(server.addr, "/v1/chat/completions", &body).json();
    assert_eq!(reply["choices"][0]["message"]["content"], "from the file");
    assert_eq!(post(server.addr, "/chat/completions", &body).status, 500);
}

#[test]
fn bad_script_is_an_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_talaria-mock-llm"))
        .args(["--script", "/nonexistent/script.json"])
        .output()
        .expect("run talaria-mock-llm");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read /nonexistent/script.json"));
    let help = Command::new(env!("CARGO_BIN_EXE_talaria-mock-llm")).arg("--help").output().expect("--help");
    assert!(String::from_utf8_lossy(&help.stdout).contains("--tool-args"));
}
