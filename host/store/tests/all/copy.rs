//! `talaria store migrate`: a populated SQLite store copied into PostgreSQL reads the same there,
//! and goes on from where it was.

use talaria_protocol::Message;
use talaria_store::cron::{Finish, Job, RunStatus};
use talaria_store::delivery::NewDelivery;
use talaria_store::{ListQuery, SearchQuery};

use crate::{calls, create, pg_store, store, tool_call, turn};

#[tokio::test]
async fn a_sqlite_home_copied_into_postgresql_reads_the_same_and_goes_on() {
    let (_dir, s) = store();
    create(&s, "a").await;
    create(&s, "b").await;
    s.set_title("a", "Lisbon trip").await.expect("title");
    turn(&s, "a", "plan the trip to Lisbon", "three days").await;
    s.append_messages(
        "a",
        &[calls("", vec![tool_call("c1", "web_fetch", r#"{"url":"x"}"#)]), Message::tool("c1", "web_fetch", "ok")],
    )
    .await
    .expect("append");
    turn(&s, "b", "undo me", "undone").await;
    s.undo_last_turn("b").await.expect("undo");
    s.kv_set("journal", "e/1", b"\x00\xffbinary").await.expect("kv");
    let job = s
        .cron_insert(&Job {
            name: "inbox".into(),
            enabled: true,
            next_run_at: Some(1_000),
            creator: "user".into(),
            ..Job::default()
        })
        .await
        .expect("job");
    let claim = s.cron_claim_due(5_000, "tick", 60_000, |_, now| Some(now + 3_600_000)).await.expect("claim").remove(0);
    s.cron_finish(
        claim.run_id,
        &claim.token,
        &Finish { status: RunStatus::Ok, output: "3 mails".into(), ..Finish::default() },
        6_000,
    )
    .await
    .expect("finish");
    s.delivery_enqueue(&NewDelivery { platform: "telegram", chat_id: "42", thread_id: None, body: "{}", key: "k1" })
        .await
        .expect("enqueue");

    let pg = pg_store().await;
    let counted = s.copy_into(&pg, &|_, _| {}).await.expect("copy");
    let rows = |t: &str| counted.iter().find(|(name, _)| name == t).map(|(_, n)| *n);
    assert_eq!(
        (rows("sessions"), rows("messages"), rows("plugin_kv"), rows("cron_runs")),
        (Some(2), Some(6), Some(1), Some(1))
    );

    let all = ListQuery { limit: 10, include_children: true, ..ListQuery::default() };
    assert_eq!(pg.list_sessions_with(&all).await.expect("list"), s.list_sessions_with(&all).await.expect("list"));
    assert_eq!(pg.messages("a").await.expect("messages"), s.messages("a").await.expect("messages"));
    assert!(pg.messages("b").await.expect("messages").is_empty(), "undone messages stay inactive");
    assert_eq!(pg.search(&SearchQuery::new("lisbon")).await.expect("search").len(), 1);
    assert_eq!(pg.kv_get("journal", "e/1").await.expect("kv"), Some(b"\x00\xffbinary".to_vec()));
    assert_eq!(pg.cron_job(&job).await.expect("job"), s.cron_job(&job).await.expect("job"));
    assert_eq!(pg.cron_runs(&job, 5).await.expect("runs"), s.cron_runs(&job, 5).await.expect("runs"));
    assert_eq!(pg.deliveries_by_prefix("k").await.expect("ledger").len(), 1);

    // It goes on: new ids come after the copied ones.
    let last = s.messages("a").await.expect("messages").last().map(|m| m.id).expect("id");
    let next = pg.append_messages("a", &[Message::user("and Porto?")]).await.expect("append");
    assert!(next[0] > last, "{next:?} after {last}");
    // A second copy into the same database is refused, and changes nothing.
    let e = s.copy_into(&pg, &|_, _| {}).await.expect_err("not empty");
    assert!(e.to_string().contains("holds 2 sessions already; copy into an empty one"), "{e}");
}
