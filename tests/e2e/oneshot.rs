//! What a script or a shell gives the binary besides arguments: prompts and context on stdin,
//! and the completion scripts shells load.

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::json;
use talaria_mock_llm::{MockLlm, Reply, Script, Step};

use super::Talaria;
use crate::chat::{stderr, stdout};

impl Talaria {
    /// `talaria chat ARGS` with `input` written to its stdin (then closed).
    fn chat_with_stdin(&self, args: &[&str], input: &[u8]) -> std::process::Output {
        let mut child = self.spawn_chat_reading(args, Stdio::piped());
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input).expect("write stdin");
        drop(stdin);
        child.wait_with_output().expect("wait")
    }
}

/// The text of the last user message the model was sent.
fn last_user_text(mock: &MockLlm) -> String {
    let requests = mock.requests();
    let body = &requests.last().expect("a request").body;
    let messages = body["messages"].as_array().expect("messages");
    let user = messages.iter().rev().find(|m| m["role"] == "user").expect("a user message");
    user["content"].as_str().expect("text content").to_string()
}

#[test]
fn a_prompt_and_its_context_can_come_from_stdin() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Reply::text("hello there").into(), Reply::text("looks fine").into()]));
    t.use_mock(&mock, "chat_completions", "");

    let out = t.chat_with_stdin(&["-q", "-"], b"hi\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout(&out).trim(), "hello there");
    assert!(last_user_text(&mock).ends_with("hi"), "{}", last_user_text(&mock));

    let out = t.chat_with_stdin(&["-q", "review this"], b"fn main() {}\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sent = last_user_text(&mock);
    assert!(
        sent.contains("review this\n\nThis was piped to talaria on stdin:\n```\nfn main() {}\n```"),
        "the piped text follows the prompt, fenced: {sent}"
    );
}

#[test]
fn stdin_that_cannot_be_a_prompt_is_refused_before_anything_is_sent() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Reply::text("never").into()]));
    t.use_mock(&mock, "chat_completions", "");

    let out = t.chat_with_stdin(&["-q", "-"], b"  \n");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stdin was empty") && err.contains("echo"), "{err}");

    let out = t.chat_with_stdin(&["-q", "what is this?"], b"\x7fELF\0\0\0");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stdin is not text"), "{err}");
    assert!(mock.requests().is_empty(), "nothing reached the model");
}

#[test]
fn completions_bash_is_a_script_bash_can_source() {
    let t = Talaria::new();
    let script = t.ok(&["completions", "bash"]);
    let file = t.home.path().join("talaria.bash");
    std::fs::write(&file, &script).expect("write");
    let out = Command::new("bash")
        .args(["-c", &format!("source {} && complete -p talaria", file.display())])
        .output()
        .expect("bash");
    assert!(out.status.success(), "bash could not source it: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("talaria"), "no completion registered for talaria");
    assert!(script.contains("completions") && script.contains("sessions"), "subcommands are completed");
    for shell in ["zsh", "fish", "powershell"] {
        let script = t.ok(&["completions", shell]);
        assert!(script.contains("talaria") && script.contains("sessions"), "{shell}: {script}");
    }
    // A reader that stops early is not an error.
    let out = Command::new("sh")
        .args(["-c", &format!("{} completions bash | head -1", env!("CARGO_BIN_EXE_talaria"))])
        .env("TALARIA_HOME", t.home.path())
        .output()
        .expect("sh");
    assert!(String::from_utf8_lossy(&out.stderr).is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    // No home, config or model is needed.
    let out = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["completions", "bash"])
        .env("TALARIA_HOME", t.home.path().join("missing").join("home"))
        .output()
        .expect("run");
    assert!(out.status.success());
    assert!(!t.home.path().join("missing").exists(), "nothing was created");
}

#[test]
fn a_failing_command_shows_its_exit_code_and_a_refusal_its_reason_in_words() {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "seq 1 5; exit 3"})),
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Step::text("one failed, one was refused"),
    ]));
    t.use_mock(&mock, "chat_completions", "");
    let out = t.chat(&["-q", "run them"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("failed: terminal (")).collect();
    assert_eq!(lines.len(), 2, "both calls are marked failed: {err}");
    assert!(lines[0].ends_with("): exit 3"), "{err}");
    assert!(lines[1].contains("needs approval") && !lines[1].contains("{\"error\""), "words, not JSON: {err}");
    assert!(!err.contains("done: terminal"), "{err}");
}
