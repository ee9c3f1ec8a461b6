//! The REPL as a person at a terminal meets it: what typing and pasting send.

use serde_json::Value;
use talaria_mock_llm::{MockLlm, Reply, Script};

use super::Talaria;
use crate::repl::Repl;

/// The user messages the model was sent in its last request.
fn user_messages(mock: &MockLlm) -> Vec<String> {
    let requests = mock.requests();
    let body: &Value = &requests.last().expect("a request").body;
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().expect("text").to_string())
        .collect()
}

#[test]
fn a_three_line_paste_is_sent_as_one_message() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Reply::text("got all three").into()]));
    t.use_mock(&mock, "chat_completions", "");
    let mut repl = Repl::start(&t);
    repl.wait_for("Alt-Enter for a new line", 1);
    // The terminal is asked to mark pastes (xterm's bracketed paste mode), so a real one wraps
    // them as typed below.
    repl.wait_for("\x1b[?2004h", 1);
    // What a terminal sends for a paste once the editor asked for bracketed paste.
    repl.type_raw("\x1b[200~first line\nsecond line\nthird line\x1b[201~");
    repl.send("");
    repl.wait_for("got all three", 1);
    assert_eq!(mock.requests().len(), 1, "one message, one request");
    let sent = user_messages(&mock);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].ends_with("first line\nsecond line\nthird line"), "{sent:?}");
    repl.close();
}
