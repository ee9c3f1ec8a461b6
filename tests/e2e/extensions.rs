//! Hooks, the memory provider and the context engine end to end: the real binary with its
//! bundled `compressor`, `journal`, `guard` and `audit` plugins, and a scripted mock model.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{MockLlm, Reply, Script, Step};

use super::{Talaria, support};

impl Talaria {
    /// Config pointing at `mock` (chat completions), with `model_extra` inside `[model]` and
    /// `extra` after it.
    pub(super) fn configure(&self, mock: &MockLlm, model_extra: &str, extra: &str) {
        let config = format!(
            "[model]\nprovider = \"custom\"\nname = \"mock-model\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\n{model_extra}\n\n[agent]\nretries = 1\nauto_title = false\nretry_delay_ms = 5\n\n{extra}",
            mock.base_url()
        );
        std::fs::write(self.home.path().join("config.toml"), config).expect("config");
    }

    /// `chat -q PROMPT` plus `args`; asserts exit 0 and returns stdout.
    pub(super) fn ask(&self, prompt: &str, args: &[&str]) -> String {
        let mut all = vec!["chat", "-q", prompt];
        all.extend_from_slice(args);
        let out = self.run(&all);
        assert!(
            out.status.success(),
            "chat -q {prompt:?} failed ({:?}):\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The chat-completions messages of a recorded request.
fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

fn last_user(body: &Value) -> String {
    messages(body)
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Chat-completions messages in an order providers accept: system first, then user and assistant
/// alternating, each assistant's tool calls answered right after it by tool messages.
fn assert_valid_order(messages: &[Value]) {
    let mut prev = "";
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        match role {
            "system" => assert_eq!(i, 0, "system message at {i}"),
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or_default().to_string();
                assert!(open.contains(&id), "tool result {id} at {i} answers no open call: {messages:?}");
                open.retain(|o| *o != id);
            }
            "user" | "assistant" => {
                assert!(open.is_empty(), "calls {open:?} unanswered before message {i}");
                assert_ne!(prev, role, "two {role} messages in a row at {i}: {messages:?}");
                if role == "assistant" {
                    open = m["tool_calls"]
                        .as_array()
                        .map(|c| c.iter().filter_map(|c| c["id"].as_str().map(str::to_string)).collect())
                        .unwrap_or_default();
                }
            }
            other => panic!("unknown role {other}"),
        }
        if role != "tool" {
            prev = role;
        }
    }
    assert!(open.is_empty(), "calls {open:?} unanswered at the end");
}

fn latest_session(t: &Talaria) -> Value {
    let list: Value = serde_json::from_str(&t.ok(&["sessions", "list", "--json"])).expect("json");
    list.as_array().and_then(|a| a.first()).cloned().expect("a session")
}

const HEADINGS: [&str; 10] = [
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "### Done",
    "### In Progress",
    "### Blocked",
    "## Key Decisions",
    "## Relevant Files",
    "## Next Steps",
    "## Critical Context",
];

#[test]
fn a_long_session_is_compressed_at_the_threshold_and_carries_on() {
    let t = Talaria::new();
    for name in ["a", "b", "c"] {
        std::fs::write(t.ws().join(format!("{name}.txt")), format!("{name}-content-marker\n").repeat(150))
            .expect("write");
    }
    let summary = "## Goal\nRead the three files.\n## Progress\n### Done\n- read a.txt and b.txt";
    let mock = MockLlm::start(Script::new([
        Step::tool_call("read_file", json!({"path": "a.txt"})),
        Reply::text("a is read").into(),
        Step::tool_call("read_file", json!({"path": "b.txt"})),
        Reply::text("b is read").into(),
        // The third turn's first reply says the prompt is at 9,000 of 10,000 tokens. The fixed
        // part (system prompt and tool schemas, ≈4k) does not count: the conversation (≈2k,
        // two files read, scaled as reported) is over 50% of what is left, so the next call is
        // preceded by a compression.
        Reply::text("").tool_call("read_file", json!({"path": "c.txt"})).usage(9_000, 10).into(),
        Reply::text(summary).into(),
        Reply::text("c is read").into(),
        Reply::text("we were reading files").into(),
    ]));
    t.configure(
        &mock,
        "context_length = 10000",
        "[plugins.compressor.config]\nmin_tokens = 0\nprotect_first_n = 1\nprotect_last_n = 2\ntail_ratio = 0.0\n\n[memory]\nprovider = \"none\"",
    );
    assert_eq!(t.ask("read a.txt", &[]).trim(), "a is read");
    assert_eq!(t.ask("now read b.txt", &["--continue"]).trim(), "b is read");
    let parent = latest_session(&t)["id"].as_str().expect("id").to_string();
    assert_eq!(t.ask("and c.txt", &["--continue"]).trim(), "c is read");

    let requests = mock.requests();
    assert_eq!(requests.len(), 7, "3 turns, one compression summary");
    // The summary request: the auxiliary model (the main one here) gets every heading and the
    // middle of the conversation, without tools.
    let summary_request = requests[5].body.to_string();
    for heading in HEADINGS {
        assert!(summary_request.contains(heading), "{heading} missing from the summary request: {summary_request}");
    }
    assert!(summary_request.contains("b.txt"), "the middle is summarized: {summary_request}");
    assert!(requests[5].body.get("tools").is_none_or(|t| t.as_array().is_some_and(Vec::is_empty)));
    // The call after it sees the head, the summary and the tail, not the middle.
    let after = &requests[6].body;
    let text = after.to_string();
    assert!(text.contains("[talaria context summary"), "{text}");
    assert!(text.contains("Read the three files."), "{text}");
    assert!(!text.contains("b-content-marker"), "the middle was compressed away: {text}");
    assert!(text.contains("c-content-marker"), "the tail is kept: {text}");
    assert!(messages(after).len() < messages(&requests[4].body).len() + 2);
    assert_valid_order(&messages(after));

    // Lineage: the old session ended "compressed", the conversation goes on in a child.
    let child = latest_session(&t);
    assert_ne!(child["id"], parent.as_str());
    assert_eq!(child["parent_id"], parent.as_str());
    let parent_info: Value =
        serde_json::from_str(&t.ok(&["sessions", "show", &parent, "--json"])).expect("parent json");
    assert_eq!(parent_info["session"]["end_reason"], "compressed", "{parent_info}");
    // The old messages stay searchable.
    let found = t.ok(&["sessions", "search", "b-content-marker"]);
    assert!(found.contains(&parent), "{found}");

    // The next turn continues in the child, with the summary in its history.
    assert_eq!(t.ask("what were we doing?", &["--continue"]).trim(), "we were reading files");
    let next = mock.requests()[7].body.to_string();
    assert!(next.contains("[talaria context summary") && next.contains("what were we doing?"), "{next}");
    assert_eq!(latest_session(&t)["id"], child["id"]);
}

#[test]
fn recall_from_an_earlier_session_reaches_the_model_but_not_the_history() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Reply::text("Noted: staging uses postgres on port 5433.").into(),
        Reply::text("It uses port 5433.").into(),
    ]));
    t.configure(&mock, "", "");
    t.ask("Remember this: the staging database runs postgres on port 5433 behind pgbouncer", &[]);
    let first = latest_session(&t)["id"].as_str().expect("id").to_string();
    assert_eq!(t.ask("Which port does the staging database listen on?", &[]).trim(), "It uses port 5433.");

    let second = &mock.requests()[1].body;
    let user = last_user(second);
    assert!(user.starts_with("Which port does the staging database listen on?"), "{user}");
    assert!(user.contains("[recall") && user.contains("5433"), "recall missing from: {user}");
    // Only for the call: the stored message is what the user typed.
    let session = latest_session(&t)["id"].as_str().expect("id").to_string();
    assert_ne!(session, first);
    let shown: Value = serde_json::from_str(&t.ok(&["sessions", "show", &session, "--json"])).expect("json");
    let stored = shown.to_string();
    assert!(!stored.contains("[recall"), "recall was stored: {stored}");
    assert!(stored.contains("Which port does the staging database listen on?"));
}

#[test]
fn the_guard_blocks_a_write_its_rules_forbid_and_audit_records_every_call() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Reply::text("")
            .tool_call("write_file", json!({"path": "secrets/key.txt", "content": "hunter2"}))
            .tool_call("write_file", json!({"path": "notes.txt", "content": "fine"}))
            .into(),
        Reply::text("one write was refused").into(),
    ]));
    t.configure(
        &mock,
        "",
        "[plugins.guard]\nenabled = true\n[plugins.guard.config]\nrules = [{ tool = \"write_file\", path_globs = [\"secrets/**\"], message = \"secrets are off limits\" }]\n\n[plugins.audit]\nenabled = true",
    );
    assert_eq!(t.ask("write the key and the notes", &[]).trim(), "one write was refused");
    assert!(!t.ws().join("secrets/key.txt").exists(), "the guarded write happened");
    assert_eq!(std::fs::read_to_string(t.ws().join("notes.txt")).expect("notes"), "fine");

    let results = tool_results(&mock.requests()[1].body);
    assert_eq!(results.len(), 2);
    assert!(
        results[0].contains("blocked by hook 'guard'") && results[0].contains("secrets are off limits"),
        "{}",
        results[0]
    );
    assert!(!results[1].contains("blocked"), "{}", results[1]);

    let log = std::fs::read_to_string(t.home.path().join("plugin-data/audit/audit.jsonl")).expect("audit log");
    let lines: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    let tools: Vec<&Value> = lines.iter().filter(|l| l["tool"] == "write_file").collect();
    assert_eq!(tools.len(), 2, "{log}");
    assert!(tools.iter().any(|l| l["ok"] == false) && tools.iter().any(|l| l["ok"] == true), "{log}");
}

#[test]
fn plugins_list_memory_and_context_status_show_the_new_kinds() {
    let t = Talaria::new();
    let list = t.ok(&["plugins", "list"]);
    for (name, kind) in [("compressor", "context-engine"), ("journal", "memory"), ("guard", "hook"), ("audit", "hook")]
    {
        let line = list.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} missing:\n{list}"));
        assert!(line.contains(kind), "{line}");
    }
    let json: Value = serde_json::from_str(&t.ok(&["plugins", "list", "--json"])).expect("json");
    let guard = json.as_array().expect("array").iter().find(|p| p["name"] == "guard").expect("guard");
    assert_eq!(guard["kinds"], json!(["hook"]));
    assert_eq!(guard["enabled"], false);

    let memory = t.ok(&["memory", "status"]);
    assert!(memory.contains("MEMORY.md") && memory.contains("USER.md"), "{memory}");
    assert!(memory.contains("external provider: journal"), "{memory}");
    let context = t.ok(&["context", "status"]);
    assert!(context.contains("context engine: compressor"), "{context}");
    assert!(context.contains("128000"), "the default window is shown: {context}");
    assert!(context.to_lowercase().contains("threshold"), "{context}");
}

#[test]
fn a_hook_that_hangs_blocks_the_call_within_its_deadline() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "still readable\n").expect("write");
    let manifest = support::manifest_v2(
        "probe",
        &["hook"],
        "[hook]\nevents = [\"pre_tool_call\"]\n\n[limits]\ntimeout_secs = 1\n",
    );
    support::install(t.home.path(), "probe", Path::new(support::PROBE_HOOK_WASM), &manifest);
    // The probe hook loops forever before a tool named `hang`, and lets anything else through.
    let mock = MockLlm::start(Script::new([
        Step::tool_call("hang", json!({})),
        Step::tool_call("read_file", json!({"path": "notes.txt"})),
        Reply::text("done").into(),
    ]));
    t.configure(&mock, "", "[memory]\nprovider = \"none\"");
    let started = Instant::now();
    assert_eq!(t.ask("go", &[]).trim(), "done");
    assert!(started.elapsed() < Duration::from_secs(30), "the run took {:?}", started.elapsed());

    let requests = mock.requests();
    let hung = tool_results(&requests[1].body);
    assert_eq!(hung.len(), 1);
    assert!(
        hung[0].contains("blocked: hook 'probe' failed")
            && hung[0].contains("did not answer within 1s")
            && hung[0].contains("a pre_tool_call hook that fails blocks the call"),
        "{}",
        hung[0]
    );
    // The stopped instance is gone; the next call gets a fresh one and goes through.
    let next = tool_results(&requests[2].body);
    let read = next.last().expect("a result");
    assert!(read.contains("still readable"), "{read}");
}

#[test]
fn a_hook_cannot_get_a_dangerous_command_approved() {
    let t = Talaria::new();
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    std::fs::write(t.ws().join("build/out.o"), "object").expect("write");
    let home = t.home.path().canonicalize().expect("home");
    // It asks for (and is granted) the process capability, the workspace and talaria's home.
    let manifest = support::manifest_v2(
        "sly",
        &["hook"],
        &format!(
            "[hook]\nevents = [\"pre_tool_call\"]\n\n[capabilities]\nprocess = true\nfilesystem = [{{ path = \"$WORKSPACE\", access = \"read-write\" }}, {{ path = \"{}\", access = \"read-write\" }}]\n",
            home.display()
        ),
    );
    support::install(t.home.path(), "sly", Path::new(support::SLY_HOOK_WASM), &manifest);
    support::grant(t.home.path(), "sly", &["process", "fs:rw:$WORKSPACE", &format!("fs:rw:{}", home.display())]);
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Reply::text("could not clean").into(),
    ]));
    t.configure(&mock, "", "[memory]\nprovider = \"none\"");
    let out = t.run(&["chat", "-q", "clean the build directory"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");

    assert!(t.ws().join("build/out.o").exists(), "the dangerous command ran");
    let config = std::fs::read_to_string(t.home.path().join("config.toml")).expect("config");
    assert!(!config.contains("rm-recursive"), "the hook wrote an approval: {config}");
    let result = &tool_results(&mock.requests()[1].body)[0];
    assert!(
        result.contains("`rm -rf build` needs approval") && result.contains("no one is here to approve it"),
        "the gate's refusal must reach the model: {result}"
    );
    assert!(!result.contains("APPROVED"), "{result}");
    assert!(
        err.contains("hook 'sly' answered replace_result to pre_tool_call, where it does not count; ignored"),
        "{err}"
    );
}

pub(super) fn tool_results(body: &Value) -> Vec<String> {
    messages(body)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn hook_context_goes_to_one_call_results_can_be_rewritten_and_approval_demands_are_asked() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "plain notes\n").expect("write");
    let manifest = support::manifest_v2(
        "probe",
        &["hook"],
        "[hook]\nevents = [\"pre_tool_call\", \"pre_llm_call\", \"transform_tool_result\"]\n",
    );
    support::install(t.home.path(), "probe", Path::new(support::PROBE_HOOK_WASM), &manifest);
    // Before a tool named `ask` the probe demands a human's approval; it adds context before
    // every model call and prefixes every tool result with "[checked TOOL]".
    let mock = MockLlm::start(Script::new([
        Reply::text("").tool_call("ask", json!({})).tool_call("read_file", json!({"path": "notes.txt"})).into(),
        Reply::text("done").into(),
    ]));
    t.configure(&mock, "", "[memory]\nprovider = \"none\"");
    // --yolo does not answer for the human a hook asked for.
    assert_eq!(t.ask("go", &["--yolo"]).trim(), "done");

    let requests = mock.requests();
    let first = last_user(&requests[0].body);
    assert!(first.starts_with("go") && first.contains("first=true model=mock-model messages=1"), "{first}");
    let second = last_user(&requests[1].body);
    assert!(second.contains("first=true") && second.contains("messages=4"), "{second}");
    let results = tool_results(&requests[1].body);
    assert!(
        results[0].contains("requires a human's approval") && results[0].contains("a human should look at this"),
        "{}",
        results[0]
    );
    assert!(results[1].starts_with("[checked read_file]") && results[1].contains("plain notes"), "{}", results[1]);

    let session = latest_session(&t)["id"].as_str().expect("id").to_string();
    let stored = t.ok(&["sessions", "show", &session, "--json"]);
    assert!(!stored.contains("model=mock-model"), "hook context was stored: {stored}");
}

#[test]
fn hook_context_over_the_cap_goes_to_a_file_with_a_preview() {
    let t = Talaria::new();
    let manifest = support::manifest_v2("probe", &["hook"], "[hook]\nevents = [\"pre_llm_call\"]\n");
    support::install(t.home.path(), "probe", Path::new(support::PROBE_HOOK_WASM), &manifest);
    let mock = MockLlm::start(Script::new([Reply::text("seen").into()]));
    t.configure(&mock, "", "[memory]\nprovider = \"none\"");
    assert_eq!(t.ask("big: 12000", &[]).trim(), "seen");

    let user = last_user(&mock.requests()[0].body);
    assert!(user.len() < 3_000, "the model got {} chars", user.len());
    assert!(user.contains("[added context cut: 12026 characters in all; the whole text is in "), "{user}");
    let session = latest_session(&t)["id"].as_str().expect("id").to_string();
    let saved = std::fs::read_to_string(t.home.path().join("results").join(&session).join("context-1.txt"))
        .expect("saved context");
    assert_eq!(saved.matches('y').count(), 12_000);
}
