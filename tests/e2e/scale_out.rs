//! One PostgreSQL behind several homes (standing for gateway processes on several machines):
//! what one writes, the others read; nothing goes to a local `state.db`.

use talaria_mock_llm::{MockLlm, Reply, Script};
use talaria_test_support::postgres::Postgres;

use super::Talaria;

#[test]
fn two_homes_on_one_postgresql_share_sessions_jobs_and_search() {
    let url = Postgres::shared().database();
    let store = format!("[store]\nurl = \"{url}\"\n\n[memory]\nprovider = \"none\"");
    let (a, b) = (Talaria::new(), Talaria::new());
    let mock = MockLlm::start(Script::new([Reply::text("Lisbon it is").into()]));
    a.configure(&mock, "", &store);
    b.configure(&mock, "", &store);

    assert_eq!(a.ask("plan the trip to Lisbon", &[]).trim(), "Lisbon it is");
    let listed = b.ok(&["sessions", "list"]);
    assert!(listed.contains("plan the trip to Lisbon"), "the other home sees the session: {listed}");
    let found = b.ok(&["sessions", "search", "lisbon"]);
    assert!(found.contains(">>>Lisbon<<<"), "{found}");

    let added = b.ok(&["cron", "add", "every 2h", "check the flights", "--name", "flights", "--yes"]);
    assert!(added.contains("flights"), "{added}");
    assert!(a.ok(&["cron", "list"]).contains("flights"), "the job is everyone's");

    let doctor = a.ok(&["doctor"]);
    assert!(
        doctor.contains("PostgreSQL at postgresql:///") && doctor.contains("connected, schema current"),
        "{doctor}"
    );
    for t in [&a, &b] {
        assert!(!t.home.path().join("state.db").exists(), "nothing is kept locally");
    }
}

/// `talaria store migrate --to URL` copies a home's state.db into PostgreSQL, and the home goes
/// on there once `[store] url` points at it.
#[test]
fn a_home_migrated_to_postgresql_goes_on_there() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Reply::text("Porto, then").into(), Reply::text("still here").into()]));
    t.configure(&mock, "", "[memory]\nprovider = \"none\"");
    t.ask("where next after Lisbon?", &[]);

    let url = Postgres::shared().database();
    let out = t.ok(&["store", "migrate", "--to", &url]);
    assert!(out.contains("every table has the same rows on both sides"), "{out}");
    assert!(out.contains("sessions       1") && out.contains("messages       2"), "{out}");
    let again = t.fails(&["store", "migrate", "--to", &url]);
    assert!(again.contains("holds 1 session already; copy into an empty one"), "{again}");

    t.configure(&mock, "", &format!("[store]\nurl = \"{url}\"\n\n[memory]\nprovider = \"none\""));
    std::fs::rename(t.home.path().join("state.db"), t.home.path().join("state.db.old")).expect("move the file aside");
    assert!(t.ok(&["sessions", "list"]).contains("where next after Lisbon?"));
    assert_eq!(t.ask("and then?", &["--continue"]).trim(), "still here");
    let history = mock.requests()[1].body["messages"].to_string();
    assert!(history.contains("where next after Lisbon?") && history.contains("Porto, then"), "{history}");
}
