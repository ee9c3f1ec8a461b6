//! `talaria sessions`, `setup` and `doctor` end to end. Sessions are written through
//! talaria-store directly, so no model is needed.

use serde_json::Value;
use talaria_protocol::{Message, ToolCall, Usage};
use talaria_store::{NewSession, Store};
use talaria_test_support::FakeServer;

use super::Talaria;

const FIRST: &str = "20261120_100000_aaaaaa";
const SECOND: &str = "20261121_110000_bbbbbb";

impl Talaria {
    fn store(&self) -> Store {
        Store::open(&self.home.path().join("state.db")).expect("open store")
    }

    /// Two sessions: a titled trip to Lisbon with a tool call, then an untitled one (the latest).
    fn with_sessions(&self) {
        let store = self.store();
        let new = |id: &str| NewSession {
            id: id.into(),
            source: "cli".into(),
            model: "gpt-4.1-mini".into(),
            provider: "openai".into(),
            system_prompt: "You are talaria.".into(),
            parent_id: None,
            cwd: "/tmp/project".into(),
        };
        talaria_test_support::wait(store.create_session(&new(FIRST))).expect("create");
        let call = ToolCall::new("call_1", "read_file", r#"{"path": "notes.txt"}"#);
        let result = (1..=12).map(|i| format!("result line {i}")).collect::<Vec<_>>().join("\n");
        talaria_test_support::wait(store.append_messages(
            FIRST,
            &[
                Message::user("Plan a trip to Lisbon"),
                Message::Assistant { content: String::new(), tool_calls: vec![call], reasoning: None, extra: None },
                Message::tool("call_1", "read_file", result),
                Message::assistant("Lisbon in spring: visit Alfama and Belém."),
            ],
        ))
        .expect("append");
        talaria_test_support::wait(store.add_usage(
            FIRST,
            &Usage { input_tokens: 1200, output_tokens: 80, ..Usage::default() },
            2,
        ))
        .expect("usage");
        talaria_test_support::wait(store.set_title(FIRST, "Trip to Lisbon")).expect("title");
        std::thread::sleep(std::time::Duration::from_millis(5));
        talaria_test_support::wait(store.create_session(&new(SECOND))).expect("create");
        talaria_test_support::wait(store.append_messages(
            SECOND,
            &[Message::user("How do I rebase a branch?"), Message::assistant("Use git rebase.")],
        ))
        .expect("append");
    }
}

#[test]
fn sessions_are_listed_shown_and_searched() {
    let t = Talaria::new();
    t.with_sessions();

    let list = t.ok(&["sessions", "list"]);
    assert!(list.starts_with("ID ") && list.contains("UPDATED"), "{list}");
    assert!(list.contains(FIRST) && list.contains("Trip to Lisbon"), "{list}");
    assert!(list.contains(SECOND) && list.contains("How do I rebase a branch?"), "{list}");
    assert!(list.find(SECOND) < list.find(FIRST), "newest first:\n{list}");
    assert!(!list.contains('\u{1b}'), "escape codes in piped output");
    let json: Value = serde_json::from_str(&t.ok(&["sessions", "list", "--json", "--limit", "1"])).expect("json");
    assert_eq!(json.as_array().map(Vec::len), Some(1));
    assert_eq!(json[0]["id"], SECOND);

    let show = t.ok(&["sessions", "show", "trip to lisbon"]);
    assert!(show.starts_with(&format!("{FIRST} \"Trip to Lisbon\"")), "{show}");
    assert!(show.contains("openai/gpt-4.1-mini") && show.contains("1200 in, 80 out"), "{show}");
    assert!(show.contains("Plan a trip to Lisbon") && show.contains("visit Alfama"), "{show}");
    assert!(show.contains(r#"→ read_file({"path":"notes.txt"})"#), "{show}");
    assert!(show.contains("result line 4") && !show.contains("result line 5"), "{show}");
    assert!(show.contains("… (8 more lines)"), "{show}");
    let latest: Value = serde_json::from_str(&t.ok(&["sessions", "show", "latest", "--json"])).expect("json");
    assert_eq!(latest["session"]["id"], SECOND);
    assert_eq!(latest["messages"][1]["content"], "Use git rebase.");

    let hits = t.ok(&["sessions", "search", "lisbon"]);
    assert!(hits.contains(FIRST) && hits.contains("\"Trip to Lisbon\""), "{hits}");
    assert!(hits.contains(">>>Lisbon<<<"), "markers stay when piped:\n{hits}");
    assert!(!hits.contains(SECOND), "{hits}");
    let assistant = t.ok(&["sessions", "search", "lisbon", "--role", "assistant"]);
    assert!(assistant.contains("assistant") && !assistant.contains("Plan a trip"), "{assistant}");
    let json: Value = serde_json::from_str(&t.ok(&["sessions", "search", "rebase", "--json"])).expect("json");
    assert_eq!(json[0]["session_id"], SECOND);
    assert!(json[0]["snippet"].as_str().is_some_and(|s| s.contains(">>>rebase<<<")), "{json}");

    let err = t.fails(&["sessions", "show", "nosuch"]);
    assert!(err.contains("no session matches \"nosuch\""), "{err}");
    let err = t.fails(&["sessions", "show", "2026112"]);
    assert!(err.contains("several sessions match") && err.contains(FIRST), "{err}");
}

#[test]
fn sessions_export_as_jsonl_json_and_markdown() {
    let t = Talaria::new();
    t.with_sessions();

    let jsonl = t.ok(&["sessions", "export", FIRST]);
    let lines: Vec<Value> = jsonl.lines().map(|l| serde_json::from_str(l).expect("each line is JSON")).collect();
    assert_eq!(lines.len(), 5, "{jsonl}");
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["id"], FIRST);
    assert_eq!(lines[0]["title"], "Trip to Lisbon");
    assert_eq!(lines[1]["role"], "user");
    assert_eq!(lines[1]["content"], "Plan a trip to Lisbon");
    assert!(lines[1]["created_at"].as_i64().is_some_and(|t| t > 0));
    assert_eq!(lines[2]["tool_calls"][0]["name"], "read_file");
    assert_eq!(lines[3]["role"], "tool");
    assert_eq!(lines[3]["tool_call_id"], "call_1");
    assert_eq!(lines[3]["name"], "read_file");
    assert!(lines[3]["content"].as_str().is_some_and(|c| c.contains("result line 12")), "nothing cut");

    let doc: Value = serde_json::from_str(&t.ok(&["sessions", "export", "latest", "--format", "json"])).expect("json");
    assert_eq!(doc["session"]["id"], SECOND);
    assert_eq!(doc["messages"].as_array().map(Vec::len), Some(2));

    let path = t.ws().join("trip.md");
    let out = t.run(&["sessions", "export", "Trip to Lisbon", "--format", "markdown", "-o", "trip.md"]);
    assert!(out.status.success() && out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let md = std::fs::read_to_string(&path).expect("markdown written");
    assert!(md.starts_with("# Trip to Lisbon\n"), "{md}");
    for part in ["## User", "Plan a trip to Lisbon", "Tool call `read_file`", "result line 12", "visit Alfama"] {
        assert!(md.contains(part), "{part} missing from:\n{md}");
    }
}

#[test]
fn sessions_are_renamed_and_deleted() {
    let t = Talaria::new();
    t.with_sessions();

    let err = t.fails(&["sessions", "rename", SECOND, "trip to lisbon"]);
    assert!(err.contains("is already used by session") && err.contains(FIRST), "{err}");
    let out = t.ok(&["sessions", "rename", "latest", "Rebasing"]);
    assert!(out.contains(&format!("renamed {SECOND} to \"Rebasing\"")), "{out}");
    assert!(t.ok(&["sessions", "show", "rebasing"]).contains("Use git rebase."));

    // Standard input is not a terminal here: no question can be asked.
    let err = t.fails(&["sessions", "delete", "Rebasing"]);
    assert!(err.contains("pass --yes"), "{err}");
    assert!(t.ok(&["sessions", "list"]).contains(SECOND));
    let out = t.ok(&["sessions", "delete", "Rebasing", FIRST, "--yes"]);
    assert!(out.contains(&format!("deleted {SECOND}")) && out.contains(&format!("deleted {FIRST}")), "{out}");
    assert!(talaria_test_support::wait(t.store().list_sessions(10, 0)).expect("list").is_empty());
    assert!(t.ok(&["sessions", "search", "lisbon"]).is_empty());
}

#[test]
fn setup_writes_a_config_doctor_accepts_and_keeps_comments() {
    let t = Talaria::new();
    let config = t.home.path().join("config.toml");
    std::fs::write(&config, "# my own notes\n[agent]\nmax_turns = 7 # keep me\n").expect("config");
    let out = t.ok(&["setup", "--provider", "ollama", "--model", "llama3.2", "--yes", "--no-check"]);
    assert!(out.contains("provider = \"ollama\"") && out.contains("name = \"llama3.2\""), "{out}");
    assert!(out.contains("talaria chat") && out.contains("talaria doctor"), "{out}");
    let text = std::fs::read_to_string(&config).expect("read");
    assert!(text.starts_with("# my own notes\n") && text.contains("max_turns = 7 # keep me"), "{text}");
    assert!(text.contains("[model]\nprovider = \"ollama\"\nname = \"llama3.2\"\n"), "{text}");
    assert!(!t.home.path().join(".env").exists());

    let doctor = t.ok(&["doctor", "--offline"]);
    assert!(doctor.contains("ok: model: ollama/llama3.2 at http://localhost:11434/v1"), "{doctor}");
    assert!(doctor.contains("ok: state: ") && doctor.contains("0 sessions"), "{doctor}");
    assert!(doctor.contains("ok: provider: not contacted (--offline)"), "{doctor}");
    assert!(doctor.contains("ok: tools: "), "{doctor}");
    assert!(!doctor.contains("fail:") && !doctor.contains('\u{1b}'), "{doctor}");

    // Running it again changes only what it sets.
    t.ok(&[
        "setup",
        "--provider",
        "custom",
        "--model",
        "local",
        "--base-url",
        "http://localhost:8080/v1",
        "--yes",
        "--no-check",
    ]);
    let text = std::fs::read_to_string(&config).expect("read");
    assert!(text.contains("provider = \"custom\"") && text.contains("base_url = \"http://localhost:8080/v1\""));
    assert!(text.contains("# keep me") && !text.contains("llama3.2"), "{text}");
}

#[test]
fn setup_checks_the_endpoint_and_the_key_before_writing() {
    let t = Talaria::new();
    let api = FakeServer::start(|req| {
        if req.header("authorization") == Some("Bearer good") {
            (200, vec![], r#"{"data":[{"id":"m"}]}"#.into())
        } else {
            (401, vec![], r#"{"error":{"message":"invalid api key"}}"#.into())
        }
    });
    std::fs::write(t.home.path().join(".env"), "SETUP_BAD_KEY=nope\nSETUP_GOOD_KEY=good\n").expect("env");
    let config = t.home.path().join("config.toml");
    let setup = |key: &str, url: &str| {
        t.run(&["setup", "--provider", "custom", "--model", "m", "--base-url", url, "--key-env", key, "--yes"])
    };

    let out = setup("SETUP_BAD_KEY", &api.url("/v1"));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HTTP 401") && err.contains("check the key") && err.contains("nothing written"), "{err}");
    assert!(!config.exists(), "nothing written");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let out = setup("SETUP_GOOD_KEY", &format!("http://{closed}/v1"));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect to"), "{err}");
    assert!(!config.exists());

    let out = setup("SETUP_GOOD_KEY", &api.url("/v1"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("answers and accepts the key"));
    assert!(std::fs::read_to_string(&config).expect("written").contains("key_env = \"SETUP_GOOD_KEY\""));
    assert_eq!(api.received().last().map(|r| r.path.as_str()), Some("/v1/models"));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("does not list"), "the model is listed");

    // A model the endpoint does not list is written, with a warning naming the listed ones.
    let out = t.run(&[
        "setup",
        "--provider",
        "custom",
        "--model",
        "m2",
        "--base-url",
        &api.url("/v1"),
        "--key-env",
        "SETUP_GOOD_KEY",
        "--yes",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("the endpoint does not list the model `m2` among its 1 model") && err.contains("Listed: `m`"),
        "{err}"
    );
}

#[test]
fn setup_without_a_terminal_names_the_missing_flags() {
    let t = Talaria::new();
    let out = t.run(&["setup", "--provider", "ollama"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing --model") && !err.contains("--provider,"), "{err}");
    let out = t.run(&["setup"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing --provider, --model"), "{err}");
    let out = t.run(&["setup", "--provider", "custom", "--model", "m", "--yes"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing --base-url"));
    assert!(!t.home.path().join("config.toml").exists());
}

#[test]
fn doctor_without_a_model_fails_with_the_guidance() {
    let t = Talaria::new();
    let out = t.run(&["doctor", "--offline"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("fail: model: no model is configured."), "{stdout}");
    assert!(stdout.contains("Run `talaria setup` to choose one"), "{stdout}");
    assert!(stdout.contains("warn: config: ") && stdout.contains("ok: home: "), "{stdout}");
}

#[test]
fn doctor_reports_an_unreachable_provider_and_a_rejected_key() {
    let t = Talaria::new();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let base = format!("http://{closed}/v1");
    std::fs::write(
        t.home.path().join("config.toml"),
        format!("[model]\nprovider = \"custom\"\nname = \"m\"\nbase_url = \"{base}\"\n"),
    )
    .expect("config");
    let out = t.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("fail: provider: cannot reach {base}/models")), "{stdout}");

    let api = FakeServer::start(|req| {
        if req.header("authorization") == Some("Bearer good") {
            (200, vec![], r#"{"data":[]}"#.into())
        } else {
            (401, vec![], r#"{"error":"bad key"}"#.into())
        }
    });
    let config = |key_env: &str| {
        format!(
            "[model]\nprovider = \"custom\"\nname = \"m\"\nbase_url = \"{}\"\nkey_env = \"{key_env}\"\n",
            api.url("/v1")
        )
    };
    std::fs::write(t.home.path().join(".env"), "DOCTOR_BAD_KEY=nope\nDOCTOR_GOOD_KEY=good\n").expect("env");
    std::fs::write(t.home.path().join("config.toml"), config("DOCTOR_BAD_KEY")).expect("config");
    let out = t.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("fail: provider: ") && stdout.contains("HTTP 401: key rejected"), "{stdout}");
    assert!(stdout.contains("ok: key: DOCTOR_BAD_KEY is set in "), "{stdout}");
    assert_eq!(api.received().last().map(|r| r.path.as_str()), Some("/v1/models"));

    std::fs::write(t.home.path().join("config.toml"), config("DOCTOR_GOOD_KEY")).expect("config");
    let stdout = t.ok(&["doctor"]);
    assert!(stdout.contains(&format!("ok: provider: {} answered HTTP 200", api.url("/v1/models"))), "{stdout}");
}

#[test]
fn the_owner_lists_approves_and_revokes_pairings() {
    use talaria_store::pairing::Request;
    let t = Talaria::new();
    assert!(t.run(&["pairing", "list"]).status.success());
    // What the gateway does when a stranger writes to the bot (the name is theirs to choose).
    let code = Store::new_pairing_code();
    let got = talaria_test_support::wait(t.store().pairing_request("telegram", "4242", "Ana\u{1b}[2J", &code))
        .expect("request");
    assert_eq!(got, Request::New(code.clone()));

    let list = t.ok(&["pairing", "list"]);
    assert!(
        list.contains("telegram") && list.contains("4242") && list.contains("pending") && list.contains(&code),
        "{list}"
    );
    assert!(list.contains("Ana\\x1b[2J") && !list.contains('\u{1b}'), "a stranger's name is shown, not obeyed: {list}");

    let err = t.fails(&["pairing", "approve", "AAAA2222"]);
    assert!(err.contains("no pairing code AAAA2222 is waiting"), "{err}");
    let out = t.ok(&["pairing", "approve", &code.to_ascii_lowercase()]);
    assert!(out.contains("paired Ana\\x1b[2J (telegram user 4242)"), "{out}");
    assert!(talaria_test_support::wait(t.store().is_paired("telegram", "4242")).expect("paired?"));
    let json: Value = serde_json::from_str(&t.ok(&["pairing", "list", "--json"])).expect("json");
    assert_eq!(json[0]["state"], "approved");
    assert_eq!(json[0]["code"], Value::Null);

    let out = t.ok(&["pairing", "revoke", "telegram", "4242"]);
    assert!(out.contains("revoked telegram user 4242"), "{out}");
    assert!(!talaria_test_support::wait(t.store().is_paired("telegram", "4242")).expect("paired?"));
    let err = t.fails(&["pairing", "revoke", "telegram", "4242"]);
    assert!(err.contains("is not paired"), "{err}");
}

#[test]
fn doctor_checks_the_gateway_rules_and_counts_pairings() {
    let t = Talaria::new();
    let config = "[gateway]\nallowed_users = [\"4242\"]\n\n[gateway.platforms.telegram]\nallow_all = true\n";
    std::fs::write(t.home.path().join("config.toml"), config).expect("config");
    let code = Store::new_pairing_code();
    talaria_test_support::wait(t.store().pairing_request("telegram", "7", "Bo", &code)).expect("request");
    let out = t.run(&["doctor", "--offline"]);
    assert_eq!(out.status.code(), Some(1), "a malformed rule fails the check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("fail: gateway: [gateway] allowed_users entry \"4242\" is not PLATFORM:USER_ID"),
        "{stdout}"
    );
    assert!(stdout.contains("warn: gateway: [gateway.platforms.telegram] allow_all answers anyone"), "{stdout}");
    // The account's token is not set either.
    assert!(stdout.contains("fail: gateway: [gateway.platforms.telegram]: TELEGRAM_BOT_TOKEN is not set"), "{stdout}");
    assert!(stdout.contains("1 warning, 3 failed"), "{stdout}");
    assert!(stdout.contains("gateway: 0 users paired, 1 code waiting for approval"), "{stdout}");
}

/// Two profiles are two homes: each chat uses its own profile's config and key, keeps its
/// session there, and never sees the other's. `-p`, `TALARIA_PROFILE` and `talaria profile use`
/// all pick one; a profile that does not exist is refused with how to make it.
#[test]
fn two_profiles_never_see_each_others_sessions_or_keys() {
    use talaria_mock_llm::{MockLlm, Reply, Script};
    let t = Talaria::new();
    let home = t.home.path();
    let mock = MockLlm::start(Script::new([Reply::text("from default").into(), Reply::text("from work").into()]));
    let config = |name: &str| {
        format!(
            "[model]\nprovider = \"custom\"\nname = \"{name}-model\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\nkey_env = \"MOCK_KEY\"\n[agent]\nauto_title = false\n[memory]\nprovider = \"none\"\n",
            mock.base_url()
        )
    };
    std::fs::write(home.join("config.toml"), config("default")).expect("config");
    std::fs::write(home.join(".env"), "MOCK_KEY=key-of-default\n").expect(".env");
    let created = t.ok(&["profile", "create", "work"]);
    assert!(created.contains("created profile work"), "{created}");
    let work = home.join("profiles/work");
    std::fs::write(work.join("config.toml"), config("work")).expect("config");
    std::fs::write(work.join(".env"), "MOCK_KEY=key-of-work\n").expect(".env");

    assert_eq!(t.ok(&["chat", "-q", "hello default"]).trim(), "from default");
    assert_eq!(t.ok(&["-p", "work", "chat", "-q", "hello work"]).trim(), "from work");
    let requests = mock.requests();
    assert_eq!(requests[0].header("authorization"), Some("Bearer key-of-default"));
    assert_eq!(requests[1].header("authorization"), Some("Bearer key-of-work"));
    assert_eq!(requests[1].body["model"], "work-model");

    let default_sessions = t.ok(&["sessions", "list"]);
    let work_sessions = t.ok(&["sessions", "list", "-p", "work"]);
    assert!(
        default_sessions.contains("hello default") && !default_sessions.contains("hello work"),
        "{default_sessions}"
    );
    assert!(work_sessions.contains("hello work") && !work_sessions.contains("hello default"), "{work_sessions}");
    let by_env = std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["sessions", "list"])
        .current_dir(t.ws())
        .env("TALARIA_HOME", home)
        .env("TALARIA_PROFILE", "work")
        .output()
        .expect("run");
    assert_eq!(String::from_utf8_lossy(&by_env.stdout), work_sessions, "TALARIA_PROFILE picks the same home");

    t.ok(&["profile", "use", "work"]);
    assert_eq!(t.ok(&["sessions", "list"]), work_sessions, "`profile use` makes it the default");
    let listed = t.ok(&["profile", "list"]);
    assert!(listed.contains("* work") && listed.contains("  default"), "{listed}");
    t.ok(&["profile", "use", "default"]);
    assert_eq!(t.ok(&["sessions", "list"]), default_sessions);

    // A copy takes config and keys, not sessions.
    t.ok(&["profile", "copy", "work", "play"]);
    assert_eq!(std::fs::read_to_string(home.join("profiles/play/.env")).expect(".env"), "MOCK_KEY=key-of-work\n");
    assert!(!t.ok(&["-p", "play", "sessions", "list"]).contains("hello work"));

    let missing = t.run(&["-p", "nosuch", "sessions", "list"]);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        err.contains("there is no profile named `nosuch` (chosen by -p;")
            && err.contains("`talaria profile create nosuch`"),
        "{err}"
    );
    let refused = t.run(&["profile", "remove", "play"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("pass --yes to confirm"));
    t.ok(&["profile", "remove", "play", "--yes"]);
    assert!(!home.join("profiles/play").exists());
}

/// `sessions export --format sharegpt` writes the reference's trajectory shape: one JSON object
/// per session with `conversations` (system, human, gpt, tool turns; tool calls in
/// `<tool_call>` blocks with the arguments as an object, results in `<tool_response>` blocks
/// naming their call, in order), `timestamp`, `model` and `completed`. With
/// `[agent] save_trajectories`, a session that ends is appended to trajectories/completed.jsonl.
#[test]
fn sessions_export_as_sharegpt_trajectories_with_tool_calls_in_order() {
    use serde_json::json;
    use talaria_mock_llm::{MockLlm, Reply, Script, Step};
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "buy milk\n").expect("notes");
    let mock = MockLlm::start(Script::new([
        Step::tool_call("read_file", json!({"path": "notes.txt"})),
        Reply::text("It says: buy milk.").into(),
        Reply::text("Hello.").into(),
    ]));
    t.use_model(&mock.base_url(), "chat_completions", "", "save_trajectories = true\n[memory]\nprovider = \"none\"\n");
    assert_eq!(t.ok(&["chat", "-q", "what is in notes.txt?"]).trim(), "It says: buy milk.");
    assert_eq!(t.ok(&["chat", "-q", "hi"]).trim(), "Hello.");

    let exported = t.ok(&["sessions", "export", "--all", "--format", "sharegpt"]);
    let lines: Vec<Value> = exported.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.len(), 2, "{exported}");
    let first = &lines[0];
    let object = first.as_object().expect("object");
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["completed", "conversations", "model", "timestamp"]);
    assert_eq!(first["model"], "mock-model");
    assert_eq!(first["completed"], true);
    assert!(first["timestamp"].as_str().expect("timestamp").parse::<jiff::Timestamp>().is_ok(), "{first}");
    let turns = first["conversations"].as_array().expect("conversations");
    let from: Vec<&str> = turns.iter().map(|t| t["from"].as_str().expect("from")).collect();
    assert_eq!(from, ["system", "human", "gpt", "tool", "gpt"]);
    assert!(turns.iter().all(|t| t.as_object().is_some_and(|o| o.len() == 2) && t["value"].is_string()));
    assert!(turns[0]["value"].as_str().expect("system").starts_with("You are talaria"));
    assert_eq!(turns[1]["value"], "what is in notes.txt?");
    assert_eq!(
        turns[2]["value"],
        "<think>\n</think>\n<tool_call>\n{\"name\":\"read_file\",\"arguments\":{\"path\":\"notes.txt\"}}\n</tool_call>"
    );
    let response = turns[3]["value"].as_str().expect("tool");
    let inner =
        response.strip_prefix("<tool_response>\n").and_then(|r| r.strip_suffix("\n</tool_response>")).expect("tags");
    let inner: Value = serde_json::from_str(inner).expect("the response is JSON");
    // talaria's own id for the call (unique in the session), not the one the server numbered it.
    let id = inner["tool_call_id"].as_str().expect("an id");
    assert!(id.starts_with("call_") && id.len() == 21, "{inner}");
    assert_eq!(inner["name"], "read_file");
    assert!(inner["content"].as_str().expect("content").contains("buy milk"), "{inner}");
    assert_eq!(turns[4]["value"], "<think>\n</think>\nIt says: buy milk.");
    assert_eq!(lines[1]["conversations"][1]["value"], "hi");

    // One session by key, and the automatic export of both as they ended.
    let one = t.ok(&["sessions", "export", "latest", "--format", "sharegpt"]);
    assert_eq!(serde_json::from_str::<Value>(one.trim()).expect("json"), lines[1]);
    let saved = std::fs::read_to_string(t.home.path().join("trajectories/completed.jsonl")).expect("saved");
    let saved: Vec<Value> = saved.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(saved, lines);
    let refused = t.run(&["sessions", "export", "--all", "--format", "json"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("needs --format sharegpt"));
}
