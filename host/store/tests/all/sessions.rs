//! Sessions and messages: round trips, counts, resolving, titles, delete, end, undo, reopening.

use serde_json::json;
use talaria_protocol::{Message, Usage};
use talaria_store::{Error, ListQuery, NewSession, PREVIEW_CHARS, SearchQuery, Store};

use crate::{calls, create, new_session, tool_call, turn};

// The same cases on SQLite and on a real PostgreSQL.
crate::on_both_engines!(
    every_message_kind_round_trips,
    counts_usage_and_preview_follow_appends,
    bad_creates_and_appends_are_refused_and_change_nothing,
    sessions_resolve_by_latest_id_title_and_prefix,
    latest_and_lists_leave_out_subagents_unless_asked,
    lists_are_newest_first_and_paged,
    titles_are_unique_and_checked,
    ending_records_time_and_reason,
    messages_around_a_hit_skip_inactive_ones,
    an_answer_and_its_usage_are_stored_together_or_not_at_all,
    a_fork_copies_the_conversation_and_leaves_the_original,
    a_pairing_code_is_given_once_approved_by_the_owner_and_revoked,
    deliveries_are_queued_once_retried_with_backoff_and_given_up_at_last,
    a_webhook_delivery_id_is_seen_once_per_route,
    deleting_a_session_takes_its_messages_and_keeps_its_children,
    undo_hides_the_last_turn_everywhere,
    a_session_put_away_reads_back_its_prompt_and_active_messages_at_once,
    images_come_back_with_their_message_and_its_text_alone_is_searched,
);

fn every_kind() -> Vec<Message> {
    vec![
        Message::system("Be brief."),
        Message::user("List the files, please.\nAll of them."),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![
                tool_call("call_1", "list_dir", r#"{"path":"."}"#),
                tool_call("call_2", "read_file", "{not json"),
            ],
            reasoning: Some("The user wants a listing.".to_owned()),
            extra: Some(json!({"thinking": [{"signature": "abc=", "text": "hm"}], "n": 1.5})),
        },
        Message::tool("call_1", "list_dir", r#"["a.rs","b.rs"]"#),
        Message::tool("call_2", "read_file", r#"{"error": "arguments are not JSON"}"#),
        Message::Assistant {
            content: "Two files.".to_owned(),
            tool_calls: vec![],
            reasoning: None,
            extra: Some(json!(null)),
        },
        Message::assistant("Anything else?"),
        Message::user("ünïcödé 数据库 🚀 \"quotes\" and 'apostrophes'"),
    ]
}

async fn every_message_kind_round_trips(s: &Store) {
    create(s, "s1").await;
    let sent = every_kind();
    let ids = s.append_messages("s1", &sent).await.expect("append");
    assert_eq!(ids.len(), sent.len());
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids increase: {ids:?}");
    let got = s.messages("s1").await.expect("messages");
    assert_eq!(got.iter().map(|m| m.message.clone()).collect::<Vec<_>>(), sent);
    assert_eq!(got.iter().map(|m| m.id).collect::<Vec<_>>(), ids);
    assert!(got.iter().all(|m| m.session_id == "s1" && m.created_at > 1_600_000_000_000));
}

async fn counts_usage_and_preview_follow_appends(s: &Store) {
    create(s, "s1").await;
    let fresh = s.session("s1").await.expect("session").expect("exists");
    assert_eq!((fresh.message_count, fresh.tool_call_count, fresh.api_call_count), (0, 0, 0));
    assert_eq!(fresh.preview, None);
    assert_eq!(fresh.started_at, fresh.updated_at);

    s.append_messages("s1", &every_kind()).await.expect("append");
    s.append_messages("s1", &[calls("", vec![tool_call("c3", "x", "{}")]), Message::tool("c3", "x", "ok")])
        .await
        .expect("append");
    s.add_usage(
        "s1",
        &Usage {
            input_tokens: 100,
            output_tokens: 20,
            cache_read_tokens: 50,
            cache_write_tokens: 7,
            reasoning_tokens: 3,
            estimated: false,
        },
        1,
    )
    .await
    .expect("usage");
    s.add_usage("s1", &Usage { input_tokens: 1, output_tokens: 2, ..Usage::default() }, 2).await.expect("usage");
    let info = s.session("s1").await.expect("session").expect("exists");
    assert_eq!(info.message_count, 10);
    assert_eq!(info.tool_call_count, 3);
    assert_eq!(info.api_call_count, 3);
    assert_eq!(
        info.usage,
        Usage {
            input_tokens: 101,
            output_tokens: 22,
            cache_read_tokens: 50,
            cache_write_tokens: 7,
            reasoning_tokens: 3,
            estimated: false,
        }
    );
    s.add_usage("s1", &Usage { input_tokens: 9, estimated: true, ..Usage::default() }, 1).await.expect("usage");
    let info = s.session("s1").await.expect("session").expect("exists");
    assert!(info.usage.estimated, "one estimated call marks the totals as estimates");
    assert_eq!((info.usage.input_tokens, info.api_call_count), (110, 4));
    assert_eq!(info.preview.as_deref(), Some("List the files, please. All of them."));
    assert!(info.updated_at >= info.started_at);
    assert_eq!(info.cwd, "/tmp/project");
    assert_eq!((info.model.as_str(), info.provider.as_str(), info.source.as_str()), ("test-model", "test", "cli"));
    assert_eq!(s.system_prompt("s1").await.expect("prompt"), "You are the assistant of session s1.");

    create(s, "long").await;
    turn(s, "long", &"x".repeat(500), "ok").await;
    let preview = s.session("long").await.expect("session").expect("exists").preview.expect("preview");
    assert_eq!(preview.chars().count(), PREVIEW_CHARS);
}

async fn bad_creates_and_appends_are_refused_and_change_nothing(s: &Store) {
    create(s, "s1").await;
    assert!(matches!(s.create_session(&new_session("s1")).await, Err(Error::SessionExists { id }) if id == "s1"));
    let bad_source = NewSession { source: "telegraph".into(), ..new_session("s2") };
    let err = s.create_session(&bad_source).await.expect_err("unknown source");
    assert!(err.to_string().contains("telegraph") && err.to_string().contains("gateway"), "{err}");
    let orphan = NewSession { parent_id: Some("nope".into()), ..new_session("s3") };
    assert!(matches!(s.create_session(&orphan).await, Err(Error::UnknownParent { id }) if id == "nope"));
    for id in ["", "has space", "tab\there"] {
        assert!(matches!(s.create_session(&new_session(id)).await, Err(Error::BadSessionId { .. })), "{id:?}");
    }
    let err = s.append_messages("ghost", &[Message::user("hi")]).await.expect_err("unknown session");
    assert!(matches!(&err, Error::SessionNotFound { key } if key == "ghost"));
    assert!(matches!(s.messages("ghost").await, Err(Error::SessionNotFound { .. })));
    assert!(matches!(s.add_usage("ghost", &Usage::default(), 1).await, Err(Error::SessionNotFound { .. })));
    assert!(matches!(s.end_session("ghost", "x").await, Err(Error::SessionNotFound { .. })));
    assert!(matches!(s.undo_last_turn("ghost").await, Err(Error::SessionNotFound { .. })));
    assert!(matches!(s.delete_session("ghost").await, Err(Error::SessionNotFound { .. })));
    assert!(matches!(s.system_prompt("ghost").await, Err(Error::SessionNotFound { .. })));
    assert_eq!(s.list_sessions(10, 0).await.expect("list").len(), 1);
    assert_eq!(s.append_messages("s1", &[]).await.expect("empty append"), Vec::<i64>::new());
}

async fn sessions_resolve_by_latest_id_title_and_prefix(s: &Store) {
    for id in ["20250101_100000_aaaaaa", "20250101_100000_aabbbb", "20250202_120000_cccccc"] {
        create(s, id).await;
        turn(s, id, "hello", "hi").await;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert_eq!(s.resolve_session("latest").await.expect("latest").id, "20250202_120000_cccccc");
    turn(s, "20250101_100000_aaaaaa", "again", "yes").await;
    assert_eq!(s.resolve_session(" LATEST ").await.expect("latest").id, "20250101_100000_aaaaaa");
    assert_eq!(s.resolve_session("20250101_100000_aabbbb").await.expect("id").id, "20250101_100000_aabbbb");
    assert_eq!(s.resolve_session("202502").await.expect("prefix").id, "20250202_120000_cccccc");
    s.set_title("20250101_100000_aabbbb", "Lisbon trip").await.expect("title");
    assert_eq!(s.resolve_session("lisbon TRIP").await.expect("title").id, "20250101_100000_aabbbb");

    let err = s.resolve_session("20250101_100000_aa").await.expect_err("ambiguous");
    match &err {
        Error::AmbiguousSession { candidates } => {
            let mut c = candidates.clone();
            c.sort();
            assert_eq!(c, ["20250101_100000_aaaaaa", "20250101_100000_aabbbb"]);
        }
        other => panic!("expected ambiguous, got {other:?}"),
    }
    assert!(err.to_string().contains("talaria sessions list"), "{err}");

    let err = s.resolve_session("foo").await.expect_err("missing");
    assert_eq!(err.to_string(), "no session matches \"foo\": run `talaria sessions list` to see them");
    assert!(matches!(s.resolve_session("  ").await, Err(Error::SessionNotFound { .. })));
}

async fn latest_and_lists_leave_out_subagents_unless_asked(s: &Store) {
    create(s, "parent").await;
    turn(s, "parent", "spawn a helper", "ok").await;
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    s.create_session(&NewSession {
        source: "subagent".into(),
        parent_id: Some("parent".into()),
        ..new_session("child")
    })
    .await
    .expect("child");
    turn(s, "child", "sub task", "done").await;
    assert_eq!(s.resolve_session("latest").await.expect("latest").id, "parent");
    let ids = |v: Vec<talaria_store::SessionInfo>| v.into_iter().map(|i| i.id).collect::<Vec<_>>();
    assert_eq!(ids(s.list_sessions(10, 0).await.expect("list")), ["parent"]);
    let all = s.list_sessions_with(&ListQuery { include_children: true, ..ListQuery::default() }).await.expect("list");
    assert_eq!(ids(all), ["child", "parent"]);
    let children =
        s.list_sessions_with(&ListQuery { parent_id: Some("parent"), ..ListQuery::default() }).await.expect("list");
    assert_eq!(ids(children), ["child"]);
    assert_eq!(s.session("child").await.expect("get").expect("exists").parent_id.as_deref(), Some("parent"));
}

async fn lists_are_newest_first_and_paged(s: &Store) {
    for i in 0..5 {
        create(s, &format!("s{i}")).await;
        turn(s, &format!("s{i}"), "q", "a").await;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    turn(s, "s1", "bump", "ok").await;
    async fn page(s: &Store, limit: usize, offset: usize) -> Vec<String> {
        s.list_sessions(limit, offset).await.expect("list").into_iter().map(|i| i.id).collect()
    }
    assert_eq!(page(s, 10, 0).await, ["s1", "s4", "s3", "s2", "s0"]);
    assert_eq!(page(s, 2, 1).await, ["s4", "s3"]);
    assert_eq!(page(s, 10, 5).await, Vec::<String>::new());
    let cron = s.list_sessions_with(&ListQuery { source: Some("cron"), ..ListQuery::default() }).await.expect("list");
    assert!(cron.is_empty());
    s.create_session(&NewSession { cwd: "/tmp/other".into(), ..new_session("elsewhere") }).await.expect("create");
    turn(s, "elsewhere", "q", "a").await;
    let here = |cwd| ListQuery { cwd: Some(cwd), limit: 2, ..ListQuery::default() };
    let ids = |v: Vec<talaria_store::SessionInfo>| v.into_iter().map(|i| i.id).collect::<Vec<_>>();
    assert_eq!(ids(s.list_sessions_with(&here("/tmp/other")).await.expect("list")), ["elsewhere"]);
    assert_eq!(
        ids(s.list_sessions_with(&here("/tmp/project")).await.expect("list")),
        ["s1", "s4"],
        "a page of this directory's sessions is full, the newest first"
    );
}

async fn titles_are_unique_and_checked(s: &Store) {
    create(s, "a").await;
    create(s, "b").await;
    s.set_title("a", "  Refactor the parser  ").await.expect("title");
    assert_eq!(s.session("a").await.expect("get").expect("exists").title.as_deref(), Some("Refactor the parser"));
    s.set_title("a", "Refactor the parser").await.expect("same title again on the same session");
    let err = s.set_title("b", "refactor THE parser").await.expect_err("taken");
    assert!(
        matches!(&err, Error::TitleTaken { title, other_id } if title == "refactor THE parser" && other_id == "a"),
        "{err:?}"
    );
    assert!(err.to_string().contains("already used by session a"), "{err}");
    for bad in ["", "   ", "two\nlines", "latest", &"t".repeat(101)] {
        assert!(matches!(s.set_title("b", bad).await, Err(Error::BadTitle { .. })), "{bad:?}");
    }
    s.set_title("b", &"ü".repeat(100)).await.expect("100 characters is fine");
    assert!(matches!(s.set_title("ghost", "x").await, Err(Error::SessionNotFound { .. })));
    s.set_title("a", "New name").await.expect("retitle");
    s.set_title("b", "Refactor the parser").await.expect("the old title is free again");
}

async fn deleting_a_session_takes_its_messages_and_keeps_its_children(s: &Store) {
    create(s, "parent").await;
    create(s, "other").await;
    let ids = turn(s, "parent", "the zanzibar plan", "noted").await;
    turn(s, "other", "zanzibar elsewhere", "fine").await;
    s.create_session(&NewSession { source: "subagent".into(), parent_id: Some("parent".into()), ..new_session("kid") })
        .await
        .expect("child");
    turn(s, "kid", "child work on zanzibar", "done").await;

    s.delete_session("parent").await.expect("delete");
    assert_eq!(s.session("parent").await.expect("get"), None);
    assert!(matches!(s.messages("parent").await, Err(Error::SessionNotFound { .. })));
    assert!(matches!(s.messages_around(ids[0], 2).await, Err(Error::MessageNotFound { .. })));
    let kid = s.session("kid").await.expect("get").expect("child kept");
    assert_eq!(kid.parent_id, None);
    assert_eq!(s.messages("kid").await.expect("messages").len(), 2);
    let mut found: Vec<String> =
        s.search(&SearchQuery::new("zanzibar")).await.expect("search").into_iter().map(|h| h.session_id).collect();
    found.sort();
    assert_eq!(found, ["kid", "other"]);
    assert!(
        s.search(&SearchQuery::new("zanzib")).await.expect("substring search").iter().all(|h| h.session_id != "parent")
    );
}

async fn ending_records_time_and_reason(s: &Store) {
    create(s, "s").await;
    assert_eq!(s.session("s").await.expect("get").expect("exists").ended_at, None);
    s.end_session("s", "user_exit").await.expect("end");
    let info = s.session("s").await.expect("get").expect("exists");
    assert!(info.ended_at.is_some_and(|t| t >= info.started_at));
    assert_eq!(info.end_reason.as_deref(), Some("user_exit"));
}

async fn undo_hides_the_last_turn_everywhere(s: &Store) {
    create(s, "s").await;
    s.append_messages("s", &[Message::system("sys")]).await.expect("append");
    turn(s, "s", "first question about walruses", "first answer").await;
    s.append_messages(
        "s",
        &[
            Message::user("second question about narwhals"),
            calls("", vec![tool_call("c1", "lookup", r#"{"q":"narwhals"}"#), tool_call("c2", "lookup", "{}")]),
            Message::tool("c1", "lookup", "narwhal facts"),
            Message::tool("c2", "lookup", "more"),
            Message::assistant("narwhals have tusks"),
        ],
    )
    .await
    .expect("append");
    assert_eq!(s.session("s").await.expect("get").expect("exists").tool_call_count, 2);

    assert_eq!(s.undo_last_turn("s").await.expect("undo"), 5);
    let left: Vec<Message> = s.messages("s").await.expect("messages").into_iter().map(|m| m.message).collect();
    assert_eq!(
        left,
        [Message::system("sys"), Message::user("first question about walruses"), Message::assistant("first answer")]
    );
    let info = s.session("s").await.expect("get").expect("exists");
    assert_eq!((info.message_count, info.tool_call_count), (3, 0));
    assert!(s.search(&SearchQuery::new("narwhals")).await.expect("search").is_empty());
    assert!(s.search(&SearchQuery::new("arwha")).await.expect("substring").is_empty());
    assert_eq!(s.search(&SearchQuery::new("walruses")).await.expect("search").len(), 1);

    // A new turn after an undo continues from what is left.
    turn(s, "s", "third", "answer three").await;
    assert_eq!(s.messages("s").await.expect("messages").len(), 5);
    assert_eq!(s.undo_last_turn("s").await.expect("undo"), 2);
    assert_eq!(s.undo_last_turn("s").await.expect("undo"), 2);
    assert_eq!(s.undo_last_turn("s").await.expect("nothing left but the system prompt"), 0);
    assert_eq!(s.messages("s").await.expect("messages").len(), 1);
    assert_eq!(s.session("s").await.expect("get").expect("exists").message_count, 1);
}

async fn messages_around_a_hit_skip_inactive_ones(s: &Store) {
    create(s, "s").await;
    create(s, "noise").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.extend(turn(s, "s", &format!("q{i}"), &format!("a{i}")).await);
        turn(s, "noise", "other", "other").await;
    }
    async fn around(s: &Store, id: i64, w: usize) -> Vec<String> {
        s.messages_around(id, w).await.expect("around").into_iter().map(|m| m.message.content().to_owned()).collect()
    }
    assert_eq!(around(s, ids[4], 2).await, ["q1", "a1", "q2", "a2", "q3"]);
    assert_eq!(around(s, ids[0], 1).await, ["q0", "a0"]);
    assert_eq!(around(s, ids[9], 3).await, ["q3", "a3", "q4", "a4"]);
    assert_eq!(around(s, ids[4], 0).await, ["q2"]);
    s.undo_last_turn("s").await.expect("undo");
    assert_eq!(around(s, ids[7], 2).await, ["a2", "q3", "a3"]);
    assert!(matches!(s.messages_around(999_999, 1).await, Err(Error::MessageNotFound { id: 999_999 })));
}

#[tokio::test]
async fn everything_survives_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nested").join("state.db");
    {
        let s = Store::open(&path).expect("open");
        create(&s, "s").await;
        s.append_messages("s", &every_kind()).await.expect("append");
        s.set_title("s", "Kept").await.expect("title");
        s.add_usage("s", &Usage { input_tokens: 5, ..Usage::default() }, 1).await.expect("usage");
        s.kv_set("p", "k", b"v").await.expect("kv");
    }
    let s = Store::open(&path).expect("reopen");
    let info = s.resolve_session("kept").await.expect("resolve");
    assert_eq!((info.id.as_str(), info.message_count, info.usage.input_tokens), ("s", 8, 5));
    let msgs: Vec<Message> = s.messages("s").await.expect("messages").into_iter().map(|m| m.message).collect();
    assert_eq!(msgs, every_kind());
    assert_eq!(s.search(&SearchQuery::new("apostrophes")).await.expect("search").len(), 1);
    assert_eq!(s.kv_get("p", "k").await.expect("kv"), Some(b"v".to_vec()));
}

async fn a_fork_copies_the_conversation_and_leaves_the_original(store: &Store) {
    create(store, "orig").await;
    store.append_messages("orig", &[Message::user("one"), Message::assistant("two")]).await.expect("append");
    store.append_messages("orig", &[Message::user("undone")]).await.expect("append");
    store.undo_last_turn("orig").await.expect("undo");
    let fork = store.fork_session("orig", "branch").await.expect("fork");
    assert_eq!(fork.parent_id.as_deref(), Some("orig"));
    assert_eq!(fork.message_count, 2);
    let texts: Vec<String> =
        store.messages("branch").await.expect("messages").iter().map(|m| m.message.content().to_string()).collect();
    assert_eq!(texts, ["one", "two"], "only active messages are copied");
    store.append_messages("branch", &[Message::user("three")]).await.expect("append");
    assert_eq!(store.messages("orig").await.expect("orig").len(), 2, "the original is untouched");
    assert!(matches!(store.fork_session("orig", "branch").await, Err(Error::SessionExists { .. })));
    assert!(matches!(store.fork_session("nope", "x").await, Err(Error::SessionNotFound { .. })));
}

async fn an_answer_and_its_usage_are_stored_together_or_not_at_all(s: &Store) {
    create(s, "s1").await;
    let usage = Usage { input_tokens: 40, output_tokens: 5, estimated: true, ..Usage::default() };
    let ids =
        s.append_messages_with_usage("s1", &[Message::assistant("done")], Some((&usage, 2))).await.expect("append");
    assert_eq!(ids.len(), 1);
    let info = s.session("s1").await.expect("session").expect("exists");
    assert_eq!((info.message_count, info.api_call_count), (1, 2));
    assert_eq!((info.usage.input_tokens, info.usage.output_tokens, info.usage.estimated), (40, 5, true));
    // A session that is gone takes neither.
    let err =
        s.append_messages_with_usage("ghost", &[Message::assistant("x")], Some((&usage, 1))).await.expect_err("ghost");
    assert!(matches!(&err, Error::SessionNotFound { key } if key == "ghost"));
    // Usage with no message (an answer that was never kept) is still counted.
    s.append_messages_with_usage("s1", &[], Some((&usage, 1))).await.expect("usage alone");
    let info = s.session("s1").await.expect("session").expect("exists");
    assert_eq!((info.message_count, info.api_call_count, info.usage.input_tokens), (1, 3, 80));
}

#[tokio::test]
async fn a_checkpoint_before_exit_leaves_an_empty_wal_and_everything_in_the_file() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.db");
    let s = Store::open(&path).expect("open");
    create(&s, "s1").await;
    turn(&s, "s1", "where is the harbour?", "down the hill").await;
    let wal = dir.path().join("state.db-wal");
    assert!(std::fs::metadata(&wal).expect("wal").len() > 0, "the turn is in the WAL");
    s.checkpoint();
    assert_eq!(std::fs::metadata(&wal).expect("wal").len(), 0, "moved into the file");
    // The process leaves without closing (as `chat -q` does); the file alone holds the turn.
    std::mem::forget(s);
    let copy = dir.path().join("copy.db");
    std::fs::copy(&path, &copy).expect("copy");
    let reopened = Store::open(&copy).expect("reopen");
    let texts: Vec<String> =
        reopened.messages("s1").await.expect("messages").into_iter().map(|m| m.message.content().to_string()).collect();
    assert_eq!(texts, ["where is the harbour?", "down the hill"]);
}

#[tokio::test]
async fn a_process_leaving_checkpoints_only_a_wal_grown_large_and_loses_nothing_either_way() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.db");
    let wal = dir.path().join("state.db-wal");
    let size = || std::fs::metadata(&wal).expect("wal").len();
    let s = Store::open(&path).expect("open");
    create(&s, "s1").await;
    turn(&s, "s1", "where is the harbour?", "down the hill").await;
    let small = size();
    assert!(small > 0 && small <= talaria_store::EXIT_CHECKPOINT_BYTES, "one turn is a small WAL: {small}");
    s.checkpoint_if_large();
    assert_eq!(size(), small, "a small WAL is left for the next process");
    // The process leaves without closing; the next one reads the turn through the WAL.
    std::mem::forget(s);
    let next = Store::open(&path).expect("reopen");
    async fn texts(s: &Store) -> Vec<String> {
        s.messages("s1").await.expect("messages").into_iter().map(|m| m.message.content().to_string()).collect()
    }
    assert_eq!(texts(&next).await, ["where is the harbour?", "down the hill"]);
    // Grown past the mark, it is moved into the file.
    let long = "a long answer ".repeat(2_000);
    while size() <= talaria_store::EXIT_CHECKPOINT_BYTES {
        turn(&next, "s1", "and then?", &long).await;
    }
    next.checkpoint_if_large();
    assert_eq!(size(), 0, "a large WAL is checkpointed");
    let count = texts(&next).await.len();
    std::mem::forget(next);
    assert_eq!(texts(&Store::open(&path).expect("reopen")).await.len(), count);
}

async fn images_come_back_with_their_message_and_its_text_alone_is_searched(s: &Store) {
    create(s, "s1").await;
    let image = talaria_protocol::Image { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() };
    let sent = Message::User { content: "what is in this picture?".into(), images: vec![image.clone()] };
    // And a tool's (an MCP tool's image content), with its call under talaria's id and the wire's.
    let call = talaria_protocol::ToolCall {
        wire_id: Some("call_0".into()),
        ..talaria_protocol::ToolCall::new("call_9f", "mcp__img__map", "{}")
    };
    let asked = Message::Assistant { content: String::new(), tool_calls: vec![call], reasoning: None, extra: None };
    let returned = Message::Tool {
        tool_call_id: "call_9f".into(),
        name: "mcp__img__map".into(),
        content: "[image, image/png, attached]".into(),
        images: vec![image],
    };
    let all = [sent, asked, returned, Message::assistant("a harbour")];
    s.append_messages("s1", &all).await.expect("append");
    let back: Vec<Message> = s.messages("s1").await.expect("messages").into_iter().map(|m| m.message).collect();
    assert_eq!(back, all);
    let hits = s.search(&SearchQuery::new("iVBORw0KGgo")).await.expect("search");
    assert!(hits.is_empty(), "image data is not indexed as text");
    let hits = s.search(&SearchQuery::new("picture")).await.expect("search");
    assert_eq!(hits.len(), 1);
}

async fn a_pairing_code_is_given_once_approved_by_the_owner_and_revoked(s: &Store) {
    use talaria_store::pairing::{MAX_PENDING, Request};
    let code = Store::new_pairing_code();
    assert_eq!(s.pairing_request("telegram", "42", "Ana", &code).await.expect("request"), Request::New(code.clone()));
    assert!(!s.is_paired("telegram", "42").await.expect("paired?"));
    // Asking again within the hour gets the same code, not a new one.
    let other = Store::new_pairing_code();
    assert_eq!(
        s.pairing_request("telegram", "42", "Ana", &other).await.expect("again"),
        Request::Pending(code.clone())
    );
    assert_eq!(s.pairings().await.expect("list")[0].state(i64::MAX / 2), "expired");
    let wrong = s.pairing_approve("NOPE2345").await.expect_err("unknown code");
    assert!(wrong.to_string().contains("no pairing code NOPE2345 is waiting"), "{wrong}");
    let approved = s.pairing_approve(&code.to_ascii_lowercase()).await.expect("approve in any case");
    assert_eq!((approved.platform.as_str(), approved.user_id.as_str(), approved.code), ("telegram", "42", None));
    assert!(s.is_paired("telegram", "42").await.expect("paired?"));
    assert!(!s.is_paired("matrix", "42").await.expect("per platform"));
    assert!(s.pairing_approve(&code).await.is_err(), "a code is used once");
    assert_eq!(s.pairing_request("telegram", "42", "Ana", &other).await.expect("paired"), Request::Approved);
    assert!(s.pairing_revoke("telegram", "42").await.expect("revoke"));
    assert!(!s.is_paired("telegram", "42").await.expect("paired?"));
    // Strangers cannot flood the owner: the waiting codes per platform are capped.
    for i in 0..MAX_PENDING {
        let got =
            s.pairing_request("telegram", &format!("u{i}"), "x", &Store::new_pairing_code()).await.expect("request");
        assert!(matches!(got, Request::New(_)), "{got:?}");
    }
    let full = s.pairing_request("telegram", "one-more", "x", &Store::new_pairing_code()).await.expect("request");
    assert_eq!(full, Request::TooMany);
    let elsewhere = s.pairing_request("matrix", "one-more", "x", &Store::new_pairing_code()).await.expect("request");
    assert!(matches!(elsewhere, Request::New(_)));
}

async fn deliveries_are_queued_once_retried_with_backoff_and_given_up_at_last(s: &Store) {
    use talaria_store::delivery::{Counts, Failed, MAX_ATTEMPTS, NewDelivery, RETRY_FIRST_MS};
    let new = |key| NewDelivery { platform: "telegram", chat_id: "42", thread_id: Some("7"), body: "hello", key };
    let first = s.delivery_enqueue(&new("turn1:0")).await.expect("enqueue");
    assert_eq!(s.delivery_enqueue(&new("turn1:0")).await.expect("again"), first, "the same key is queued once");
    let second = s.delivery_enqueue(&new("turn1:1")).await.expect("enqueue");
    let due: Vec<i64> = s.deliveries_due("telegram", 10).await.expect("due").iter().map(|d| d.id).collect();
    assert_eq!(due, [first, second], "oldest first");
    assert!(s.deliveries_due("matrix", 10).await.expect("due").is_empty());

    s.delivery_sent(first, "m-100").await.expect("sent");
    s.delivery_failed(first, "late error").await.expect("a late failure report");
    assert_eq!(s.delivery_failed(second, "HTTP 502").await.expect("failed"), Failed::Retry { attempts: 1 });
    assert!(s.deliveries_due("telegram", 10).await.expect("due").is_empty(), "neither sent again nor due yet");
    let later = |ms: i64| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("time").as_millis();
        i64::try_from(now).expect("fits") + ms
    };
    let retry = s.deliveries_due_at("telegram", later(RETRY_FIRST_MS + 100), 10).await.expect("due");
    assert_eq!(retry.len(), 1);
    assert_eq!((retry[0].id, retry[0].attempts, retry[0].thread_id.as_deref()), (second, 1, Some("7")));
    assert!(s.deliveries_due_at("telegram", later(RETRY_FIRST_MS / 2), 10).await.expect("due").is_empty());
    assert_eq!(s.delivery_failed(second, "HTTP 502").await.expect("failed"), Failed::Retry { attempts: 2 });
    let mut last = Failed::Retry { attempts: 2 };
    for _ in 2..MAX_ATTEMPTS {
        last = s.delivery_failed(second, "HTTP 502").await.expect("failed");
    }
    assert_eq!(last, Failed::GaveUp);
    assert!(s.deliveries_due_at("telegram", i64::MAX, 10).await.expect("due").is_empty(), "given up for good");
    assert_eq!(s.delivery_counts().await.expect("counts"), Counts { pending: 0, sent: 1, failed: 1 });
}

async fn a_webhook_delivery_id_is_seen_once_per_route(s: &Store) {
    assert!(!s.webhook_seen("ci", "d1").await.expect("first"));
    assert!(s.webhook_seen("ci", "d1").await.expect("again"));
    assert!(!s.webhook_seen("alerts", "d1").await.expect("another route"));
}

async fn a_session_put_away_reads_back_its_prompt_and_active_messages_at_once(s: &Store) {
    assert!(matches!(s.history("nobody").await, Err(Error::SessionNotFound { .. })));
    create(s, "h").await;
    let (prompt, none) = s.history("h").await.expect("an empty session");
    assert_eq!((prompt.as_str(), none.len()), ("You are the assistant of session h.", 0));

    turn(s, "h", "first", "one").await;
    let second = turn(s, "h", "second", "two").await;
    s.undo_last_turn("h").await.expect("undo");
    let third = turn(s, "h", "third", "three").await;
    let (prompt, stored) = s.history("h").await.expect("history");
    assert_eq!(prompt, "You are the assistant of session h.");
    let texts: Vec<Message> = stored.iter().map(|m| m.message.clone()).collect();
    assert_eq!(
        texts,
        [Message::user("first"), Message::assistant("one"), Message::user("third"), Message::assistant("three")]
    );
    // Its last id and count are the session's mark: a conversation put away knows from them
    // whether another process went on meanwhile.
    assert_eq!(s.message_mark("h").await.expect("mark"), (4, third[1]));
    assert!(stored.iter().all(|m| !second.contains(&m.id)), "an undone message is not read back");
}
