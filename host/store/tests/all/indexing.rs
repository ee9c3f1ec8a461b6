//! Messages are indexed for search in batches: what a search sees, what a turn's last commit
//! indexes, and files indexed one message at a time by the schema before (v4).

use rusqlite::Connection;
use talaria_protocol::Message;
use talaria_store::search::INDEX_BATCH;
use talaria_store::{SearchQuery, Store, schema};

use crate::{calls, create, store, tool_call, turn};

/// The search watermark and the newest message id, read beside the store.
fn watermark(path: &std::path::Path) -> (i64, i64) {
    let conn = Connection::open(path).expect("open raw");
    conn.query_row("SELECT indexed, (SELECT coalesce(max(id), 0) FROM messages) FROM search_watermark", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .expect("watermark")
}

/// Both indexes are internally consistent (FTS5's own check) and hold exactly the active
/// messages at or below the watermark.
fn assert_indexes_sound(path: &std::path::Path) {
    let conn = Connection::open(path).expect("open raw");
    let ids = |sql: &str| -> Vec<i64> {
        conn.prepare(sql)
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .map(|r| r.expect("row"))
            .collect()
    };
    let expected =
        ids("SELECT id FROM messages WHERE active AND id <= (SELECT indexed FROM search_watermark) ORDER BY id");
    for table in ["messages_fts", "messages_trigram"] {
        // rank 0: the index itself (rank 1 would compare with every row, inactive ones too).
        conn.execute(&format!("INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 0)"), [])
            .unwrap_or_else(|e| panic!("{table} is not sound: {e}"));
        assert_eq!(
            ids(&format!("SELECT id FROM {table}_docsize ORDER BY id")),
            expected,
            "{table} holds other messages"
        );
    }
}

/// The ids of the messages a search finds, in id order.
async fn hits(s: &Store, text: &str) -> Vec<i64> {
    let mut ids: Vec<i64> =
        s.search(&SearchQuery::new(text)).await.expect("search").into_iter().map(|h| h.message_id).collect();
    ids.sort_unstable();
    ids
}

#[tokio::test]
async fn a_search_finds_what_was_committed_before_it_even_in_the_middle_of_a_turn() {
    let (dir, s) = store();
    create(&s, "s").await;
    let ids = s
        .append_messages(
            "s",
            &[
                Message::user("look at quokka.txt"),
                calls("", vec![tool_call("c1", "read_file", r#"{"path":"quokka.txt"}"#)]),
            ],
        )
        .await
        .expect("append");
    let path = dir.path().join("state.db");
    assert_eq!(watermark(&path).0, 0, "nothing is indexed before the turn ends or a search asks");
    assert_eq!(hits(&s, "quokka").await, ids, "both the question and the call are found");
    assert_eq!(watermark(&path), (ids[1], ids[1]), "the search brought the indexes up to date");
    assert_indexes_sound(&path);
}

#[tokio::test]
async fn a_turn_that_ends_indexes_once_a_batch_is_waiting() {
    let (dir, s) = store();
    let path = dir.path().join("state.db");
    create(&s, "s").await;
    let mut last = Vec::new();
    let turns = INDEX_BATCH / 2;
    for i in 0..turns {
        last = turn(&s, "s", &format!("question {i}"), &format!("answer {i}")).await;
        let (mark, top) = watermark(&path);
        if top < INDEX_BATCH {
            assert_eq!(mark, 0, "turn {i}: {top} messages wait, fewer than a batch");
        }
    }
    assert_eq!(watermark(&path), (last[1], last[1]), "the turn that filled the batch indexed it");
    // A commit that does not end a turn (a call for tools) never indexes.
    for i in 0..INDEX_BATCH {
        s.append_messages("s", &[calls("", vec![tool_call(&format!("c{i}"), "read_file", "{}")])])
            .await
            .expect("append");
    }
    assert_eq!(watermark(&path).0, last[1]);
    assert_eq!(hits(&s, "question").await.len(), 20, "a search still sees everything (up to its limit)");
    assert_indexes_sound(&path);
}

#[tokio::test]
async fn undo_and_delete_of_messages_not_indexed_yet_leave_the_indexes_sound() {
    let (dir, s) = store();
    let path = dir.path().join("state.db");
    create(&s, "s").await;
    create(&s, "t").await;
    let kept = turn(&s, "s", "the wombat sleeps", "it does").await;
    assert_eq!(hits(&s, "wombat").await, vec![kept[0]]);
    // Above the watermark: undone and deleted before any batch took them.
    turn(&s, "s", "the wombat digs", "deep").await;
    assert_eq!(s.undo_last_turn("s").await.expect("undo"), 2);
    turn(&s, "t", "wombat burrows", "long ones").await;
    s.delete_session("t").await.expect("delete");
    assert_eq!(hits(&s, "wombat").await, vec![kept[0]], "only the message still there and active");
    assert_indexes_sound(&path);
    // At or below it: the triggers take indexed rows out.
    assert_eq!(s.undo_last_turn("s").await.expect("undo"), 2);
    assert!(hits(&s, "wombat").await.is_empty());
    assert_indexes_sound(&path);
}

#[tokio::test]
async fn a_file_indexed_message_by_message_keeps_every_hit_once_after_the_migration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    {
        let conn = Connection::open(&path).expect("open raw");
        conn.pragma_update(None, "journal_mode", "WAL").expect("wal");
        for sql in &schema::MIGRATIONS[..4] {
            conn.execute_batch(sql).expect("v4 schema");
        }
        conn.execute_batch(
            "INSERT INTO sessions (id, source, model, provider, system_prompt, cwd, started_at, updated_at)
                 VALUES ('old', 'cli', 'm', 'p', '', '/tmp', 1, 1);
             INSERT INTO messages (session_id, role, content, created_at) VALUES
                 ('old', 'user', 'the platypus lays eggs', 1),
                 ('old', 'assistant', 'a platypus indeed', 1);",
        )
        .expect("v4 rows");
        conn.pragma_update(None, "user_version", 4).expect("version");
    }
    let s = Store::open(&path).expect("open migrates");
    assert_eq!(watermark(&path), (2, 2), "what v4 indexed is marked indexed");
    assert_eq!(hits(&s, "platypus").await, vec![1, 2], "found once each, not indexed twice");
    create(&s, "new").await;
    let ids = turn(&s, "new", "one more platypus", "noted").await;
    assert_eq!(hits(&s, "platypus").await, vec![1, 2, ids[0]], "old and new, once each");
    assert_indexes_sound(&path);
    assert_eq!(s.undo_last_turn("new").await.expect("undo"), 2);
    s.delete_session("old").await.expect("delete");
    assert!(hits(&s, "platypus").await.is_empty());
    assert_indexes_sound(&path);
}
