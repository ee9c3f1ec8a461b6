//! Network egress end to end: a wildcard-granted plugin (the bundled `web`) reaches a new host
//! only through the gate — asked in the REPL, refused with how to allow it when no one can
//! answer — and secrets go only into the headers their manifest names.
//!
//! The new host is `docs.invalid`: once past the gate its lookup fails, so nothing leaves the
//! machine; a refusal by the gate is told apart by its `[host: ...]` reason.

use serde_json::json;
use talaria_mock_llm::{MockLlm, Script, Step};

use super::Talaria;
use crate::repl::Repl;

const FETCH: &str = r#"{"url": "http://docs.invalid/page"}"#;

const REFUSED: &str = "[host: plugin 'web' needs approval to connect to docs.invalid (allowed only by its wildcard grant net:*) and no one is here to give it; rerun with --yolo, add \"net:docs.invalid\" to [approvals] allow in config.toml, or grant the host: `talaria plugins grant web net:docs.invalid`]";

#[test]
fn web_fetch_reaches_a_new_host_only_when_allowed() {
    let t = Talaria::new();
    // Unattended: refused, saying every way to allow it.
    let err = t.fails(&["tools", "call", "web_fetch", FETCH]);
    assert!(err.trim_end().ends_with(REFUSED), "{err}");

    // --yolo, the config's allow list, or an explicit grant each get past the gate (and then
    // the lookup of a name that never resolves fails).
    let err = t.fails(&["tools", "call", "web_fetch", FETCH, "--yolo"]);
    assert!(err.contains("cannot fetch http://docs.invalid/page") && !err.contains("[host:"), "{err}");
    std::fs::write(t.home.path().join("config.toml"), "[approvals]\nallow = [\"net:docs.invalid\"]\n").expect("config");
    let err = t.fails(&["tools", "call", "web_fetch", FETCH]);
    assert!(err.contains("cannot fetch http://docs.invalid/page") && !err.contains("[host:"), "{err}");
    std::fs::remove_file(t.home.path().join("config.toml")).expect("remove");
    t.ok(&["plugins", "grant", "web", "net:docs.invalid"]);
    let err = t.fails(&["tools", "call", "web_fetch", FETCH]);
    assert!(!err.contains("[host:"), "{err}");
    // The approval key is the host; another host still asks.
    let err = t.fails(&["tools", "call", "web_fetch", r#"{"url": "https://other.invalid/"}"#]);
    assert!(err.contains("needs approval to connect to other.invalid"), "{err}");
}

#[test]
fn a_one_shot_chat_tells_the_model_how_to_allow_a_new_host() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Step::tool_call("web_fetch", json!({"url": "http://docs.invalid/page"})),
        Step::text("done"),
    ]));
    let config = format!(
        "[model]\nprovider = \"custom\"\nname = \"mock-model\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\n",
        mock.base_url()
    );
    std::fs::write(t.home.path().join("config.toml"), config).expect("config");
    let out = t.run(&["chat", "-q", "read the docs"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let result = mock.requests()[1].body.to_string();
    assert!(
        result.contains("needs approval to connect to docs.invalid")
            && result.contains("rerun with --yolo")
            && result.contains("talaria plugins grant web net:docs.invalid"),
        "the model is told why and how: {result}"
    );
}

#[test]
fn plugins_info_shows_where_a_secret_goes() {
    let t = Talaria::new();
    let info = t.ok(&["plugins", "info", "weather"]);
    assert!(info.contains("secret WEATHER_API_KEY is sent only in: header key"), "{info}");
}

#[test]
fn the_repl_asks_before_web_fetch_reaches_a_new_host_and_remembers_always() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Step::tool_call("web_fetch", json!({"url": "http://docs.invalid/a"})),
        Step::text("fetched a"),
        Step::tool_call("web_fetch", json!({"url": "https://docs.invalid/b"})),
        Step::text("fetched b"),
    ]));
    let config = format!(
        "# mine\n[model]\nprovider = \"custom\"\nname = \"mock-model\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\n[agent]\nauto_title = false\n",
        mock.base_url()
    );
    std::fs::write(t.home.path().join("config.toml"), config).expect("config");
    let mut repl = Repl::start(&t);
    repl.wait_for("new session", 1);
    repl.send("read a");
    repl.wait_for("Allow?", 1);
    assert!(
        repl.text().contains("plugin 'web' wants to connect to docs.invalid (allowed by its wildcard grant net:*)."),
        "{}",
        repl.text()
    );
    assert_eq!(mock.requests().len(), 1, "nothing goes on before the answer");
    repl.send("a");
    repl.wait_for("fetched a", 1);
    let saved = std::fs::read_to_string(t.home.path().join("config.toml")).expect("config");
    assert!(saved.starts_with("# mine\n") && saved.contains("allow = [\"net:docs.invalid\"]"), "{saved}");
    // The same host (over https, another path) now goes ahead without asking.
    repl.send("read b");
    repl.wait_for("fetched b", 1);
    assert_eq!(repl.text().matches("Allow?").count(), 1, "asked only once");
    let result = mock.requests()[3].body.to_string();
    assert!(result.contains("cannot fetch https://docs.invalid/b") && !result.contains("needs approval"), "{result}");
}
