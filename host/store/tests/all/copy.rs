//! `talaria store migrate`: a populated SQLite store copied into PostgreSQL reads the same there,
//! and goes on from where it was.

use talaria_protocol::Message;
use talaria_store::cron::{Finish, Job, RunStatus};
use talaria_store::delivery::NewDelivery;
use talaria_store::{ListQuery, SearchQuery};

use crate::{calls, create, pg_store, store, tool_call, turn};

#[test]
fn a_sqlite_home_copied_into_postgresql_reads_the_same_and_goes_on() {
    let (_dir, s) = store();
    create(&s, "a");
    create(&s, "b");
    s.set_title("a", "Lisbon trip").expect("title");
    turn(&s, "a", "plan the trip to Lisbon", "three days");
    s.append_messages(
        "a",
        &[calls("", vec![tool_call("c1", "web_fetch", r#"{"url":"x"}"#)]), Message::tool("c1", "web_fetch", "ok")],
    )
    .expect("append");
    turn(&s, "b", "undo me", "undone");
    s.undo_last_turn("b").expect("undo");
    s.kv_set("journal", "e/1", b"\x00\xffbinary").expect("kv");
    let job = s
        .cron_insert(&Job {
            name: "inbox".into(),
            enabled: true,
            next_run_at: Some(1_000),
            creator: "user".into(),
            ..Job::default()
        })
        .expect("job");
    let claim = s.cron_claim_due(5_000, "tick", 60_000, |_, now| Some(now + 3_600_000)).expect("claim").remove(0);
    s.cron_finish(
        claim.run_id,
        &claim.token,
        &Finish { status: RunStatus::Ok, output: "3 mails".into(), ..Finish::default() },
        6_000,
    )
    .expect("finish");
    s.delivery_enqueue(&NewDelivery { platform: "telegram", chat_id: "42", thread_id: None, body: "{}", key: "k1" })
        .expect("enqueue");

    let pg = pg_store();
    let counted = s.copy_into(&pg, &|_, _| {}).expect("copy");
    let rows = |t: &str| counted.iter().find(|(name, _)| name == t).map(|(_, n)| *n);
    assert_eq!(
        (rows("sessions"), rows("messages"), rows("plugin_kv"), rows("cron_runs")),
        (Some(2), Some(6), Some(1), Some(1))
    );

    let all = ListQuery { limit: 10, include_children: true, ..ListQuery::default() };
    assert_eq!(pg.list_sessions_with(&all).expect("list"), s.list_sessions_with(&all).expect("list"));
    assert_eq!(pg.messages("a").expect("messages"), s.messages("a").expect("messages"));
    assert!(pg.messages("b").expect("messages").is_empty(), "undone messages stay inactive");
    assert_eq!(pg.search(&SearchQuery::new("lisbon")).expect("search").len(), 1);
    assert_eq!(pg.kv_get("journal", "e/1").expect("kv"), Some(b"\x00\xffbinary".to_vec()));
    assert_eq!(pg.cron_job(&job).expect("job"), s.cron_job(&job).expect("job"));
    assert_eq!(pg.cron_runs(&job, 5).expect("runs"), s.cron_runs(&job, 5).expect("runs"));
    assert_eq!(pg.deliveries_by_prefix("k").expect("ledger").len(), 1);

    // It goes on: new ids come after the copied ones.
    let last = s.messages("a").expect("messages").last().map(|m| m.id).expect("id");
    let next = pg.append_messages("a", &[Message::user("and Porto?")]).expect("append");
    assert!(next[0] > last, "{next:?} after {last}");
    // A second copy into the same database is refused, and changes nothing.
    let e = s.copy_into(&pg, &|_, _| {}).expect_err("not empty");
    assert!(e.to_string().contains("holds 2 sessions already; copy into an empty one"), "{e}");
}
