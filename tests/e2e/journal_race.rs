//! Several talaria processes on one home, each recording turns into the bundled `journal` at the
//! same time: every entry is kept, each under an id of its own. Checked in the real store (the
//! journal's kv space) and through the journal itself (`journal_search`, and recall reaching the
//! model). A REPL, whose journal stays loaded for the whole session, takes in what a one-shot
//! chat in another terminal recorded between two of its turns.

use std::collections::BTreeSet;
use std::process::Child;

use serde_json::Value;
use talaria_mock_llm::{MockLlm, Reply, Script, Step};

use super::Talaria;
use crate::repl::Repl;

/// The bundled journal's kv space.
const SPACE: &str = "journal";

impl Talaria {
    /// Config pointing at `mock`, the bundled journal as the memory provider (the default).
    fn use_journal_mock(&self, mock: &MockLlm) {
        let config = format!(
            "[model]\nprovider = \"custom\"\nname = \"mock-model\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\n\n[agent]\nretries = 1\nauto_title = false\nretry_delay_ms = 5\n\n[memory]\nprovider = \"journal\"\n",
            mock.base_url()
        );
        std::fs::write(self.home.path().join("config.toml"), config).expect("config");
    }

    /// Every journal entry in the store, as JSON, by key order.
    fn journal_entries(&self) -> Vec<Value> {
        let store = talaria_store::Store::open(&self.home.path().join("state.db")).expect("store");
        talaria_test_support::wait(store.kv_list(SPACE, "e/"))
            .expect("list")
            .into_iter()
            .map(|(key, value)| serde_json::from_slice(&value).unwrap_or_else(|e| panic!("{key}: {e}")))
            .collect()
    }
}

/// The question one process asks: long enough to be remembered, with a word of its own.
fn question(i: usize) -> String {
    format!("Remember this for later: build server number {i} is called host{i}alpha and runs the nightly deploy")
}

/// Every entry's id is different, and the entries' user messages are exactly `want`.
fn assert_all_kept(entries: &[Value], want: &[String]) {
    let ids: Vec<u64> = entries.iter().map(|e| e["id"].as_u64().expect("id")).collect();
    let unique: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "an id was handed out twice: {ids:?}");
    let users: BTreeSet<&str> = entries.iter().map(|e| e["user"].as_str().expect("user")).collect();
    let want: BTreeSet<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(users, want, "entries lost or changed");
}

/// `n` one-shot chats started together, each recording one turn; every entry is kept with an
/// id of its own, and `journal_search` finds each.
fn one_shots_at_once_keep_every_entry(n: usize) {
    let t = Talaria::new();
    // Every request gets the same answer, whichever process sends it.
    let mock = MockLlm::start(Script {
        steps: vec![Reply::text("Noted, I will remember that build server.").into()],
        repeat: true,
        auto: None,
    });
    t.use_journal_mock(&mock);
    // Compile the bundled plugins once, so the chats start together instead of queueing on it.
    t.ok(&["tools", "list"]);

    let questions: Vec<String> = (0..n).map(question).collect();
    let children: Vec<Child> = questions.iter().map(|q| t.spawn_chat(&["-q", q])).collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success(), "chat {i} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("memory sync failed"), "chat {i}: {stderr}");
    }
    // Background failures are logged, not printed.
    let log = std::fs::read_to_string(t.home.path().join("logs").join("talaria.log")).unwrap_or_default();
    assert!(!log.contains("memory sync failed"), "{log}");
    assert_eq!(mock.requests().len(), n);

    let entries = t.journal_entries();
    assert_eq!(entries.len(), n, "{entries:#?}");
    assert_all_kept(&entries, &questions);

    // The journal itself lists them all, each once.
    let found = t.ok(&["tools", "call", "journal_search", &format!(r#"{{"query": "", "limit": {}}}"#, n + 5)]);
    let found: Vec<Value> = serde_json::from_str(&found).unwrap_or_else(|e| panic!("{e}: {found}"));
    let users: Vec<&str> = found.iter().map(|f| f["user"].as_str().expect("user")).collect();
    assert_eq!(users.len(), n, "{users:?}");
    for (i, q) in questions.iter().enumerate() {
        assert_eq!(users.iter().filter(|u| **u == q).count(), 1, "entry {i} listed once: {users:?}");
        let hit = t.ok(&["tools", "call", "journal_search", &format!(r#"{{"query": "host{i}alpha"}}"#)]);
        assert!(hit.contains(&format!("host{i}alpha")), "entry {i} is searchable: {hit}");
    }
}

#[test]
fn two_one_shot_chats_at_once_keep_both_entries() {
    one_shots_at_once_keep_every_entry(2);
}

#[test]
fn ten_one_shot_chats_at_once_keep_all_ten_entries() {
    one_shots_at_once_keep_every_entry(10);
}

#[test]
fn a_repl_keeps_and_recalls_what_a_one_shot_chat_recorded_between_its_turns() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([
        Step::text("Noted: the arm64 build needs gcc-aarch64-linux-gnu."),
        Step::text("Noted: staging postgres listens on port 5433."),
        Step::text("It listens on port 5433."),
    ]));
    t.use_journal_mock(&mock);
    t.ok(&["tools", "list"]);
    let first = "Remember this: the arm64 release build needs gcc-aarch64-linux-gnu installed";
    let other = "Remember this: the staging database runs postgres on port 5433 behind pgbouncer";
    let second = "Which port does the staging database listen on?";

    // Turn 1 in the REPL: its journal is loaded now and stays loaded.
    let mut repl = Repl::start(&t);
    repl.wait_for("new session", 1);
    repl.send(first);
    repl.wait_for("gcc-aarch64-linux-gnu.", 1);
    // Another terminal: a one-shot chat records a turn of its own.
    let out = t.spawn_chat(&["-q", other]).wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Turn 2 in the REPL: its recall holds the other process's entry.
    repl.send(second);
    repl.wait_for("It listens on port 5433.", 1);
    repl.close();

    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let sent = requests[2].body["messages"].as_array().expect("messages").last().expect("last").to_string();
    assert!(sent.contains("[recall") && sent.contains("pgbouncer"), "the REPL did not recall it: {sent}");

    // All three turns kept, each under an id of its own.
    let entries = t.journal_entries();
    assert_eq!(entries.len(), 3, "{entries:#?}");
    assert_all_kept(&entries, &[first.to_string(), other.to_string(), second.to_string()]);
}
