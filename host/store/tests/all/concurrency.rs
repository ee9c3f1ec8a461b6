//! Two writers on one file: nothing is lost, turns stay whole and in order.

use std::sync::{Arc, Barrier};

use talaria_protocol::Message;
use talaria_store::Store;
use tokio::task::JoinSet;

use crate::create;

const TURNS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn two_stores_appending_at_once_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    {
        let s = Store::open(&path).expect("open");
        for id in ["shared", "w0", "w1"] {
            create(&s, id).await;
        }
    }
    let barrier = Arc::new(Barrier::new(2));
    let mut writers = JoinSet::new();
    for w in 0..2 {
        let path = path.clone();
        let barrier = Arc::clone(&barrier);
        writers.spawn(async move {
            // Each task has its own Store, hence its own connection, like another process.
            let s = Store::open(&path).expect("open");
            // A blocking barrier: each writer holds a worker thread of its own until both run.
            barrier.wait();
            for i in 0..TURNS {
                let own = [Message::user(format!("w{w} q{i}")), Message::assistant(format!("w{w} a{i}"))];
                s.append_messages(&format!("w{w}"), &own).await.expect("append own");
                s.append_messages("shared", &own).await.expect("append shared");
            }
        });
    }
    while let Some(w) = writers.join_next().await {
        w.expect("writer");
    }

    let s = Store::open(&path).expect("reopen");
    for w in 0..2 {
        let got: Vec<String> = s
            .messages(&format!("w{w}"))
            .await
            .expect("messages")
            .into_iter()
            .map(|m| m.message.content().to_owned())
            .collect();
        let want: Vec<String> = (0..TURNS).flat_map(|i| [format!("w{w} q{i}"), format!("w{w} a{i}")]).collect();
        assert_eq!(got, want);
        assert_eq!(s.session(&format!("w{w}")).await.expect("get").expect("exists").message_count, 2 * TURNS as i64);
    }
    let shared = s.messages("shared").await.expect("messages");
    assert_eq!(shared.len(), 4 * TURNS);
    assert_eq!(s.session("shared").await.expect("get").expect("exists").message_count, 4 * TURNS as i64);
    let mut next = [0usize; 2];
    for pair in shared.chunks(2) {
        // Every turn is committed whole: its question and answer are adjacent.
        let q = pair[0].message.content();
        let w: usize = q[1..2].parse().expect("writer number");
        assert_eq!(q, format!("w{w} q{}", next[w]));
        assert_eq!(pair[1].message.content(), format!("w{w} a{}", next[w]));
        next[w] += 1;
    }
    assert_eq!(next, [TURNS, TURNS]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn two_stores_creating_a_new_file_at_once_both_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let barrier = Arc::new(Barrier::new(2));
    let mut openers = JoinSet::new();
    for i in 0..2 {
        let path = path.clone();
        let barrier = Arc::clone(&barrier);
        openers.spawn(async move {
            barrier.wait();
            let s = Store::open(&path).expect("open");
            create(&s, &format!("s{i}")).await;
        });
    }
    while let Some(o) = openers.join_next().await {
        o.expect("opener");
    }
    assert_eq!(Store::open(&path).expect("reopen").list_sessions(10, 0).await.expect("list").len(), 2);
}

#[tokio::test]
async fn a_writer_holding_the_lock_past_the_busy_timeout_is_waited_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let s = Store::open(&path).expect("open");
    create(&s, "s").await;
    let other = rusqlite::Connection::open(&path).expect("open raw");
    other.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    let holder = std::thread::spawn(move || {
        // Longer than SQLite's own busy timeout (1 s): the store must retry on its own.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        other.execute_batch("COMMIT").expect("release");
    });
    let started = std::time::Instant::now();
    s.append_messages("s", &[Message::user("patience")]).await.expect("append after the lock is released");
    assert!(started.elapsed() >= std::time::Duration::from_millis(1400));
    holder.join().expect("holder");
    assert_eq!(s.messages("s").await.expect("messages").len(), 1);
}

/// `writers` tasks, each with its own `Store` (its own connection, like another process),
/// started together, each running `work(store, writer)`; their results in writer order.
///
/// The tasks meet at a blocking barrier before any of them touches its store, so each holds a
/// worker thread of its own from then on (SQLite runs inline, without yielding): the runtime
/// needs more worker threads than `writers`.
async fn race<T, F, Fut>(path: &std::path::Path, writers: usize, work: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(Store, usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(writers));
    let mut tasks = JoinSet::new();
    for w in 0..writers {
        let s = Store::open(path).expect("open");
        let (barrier, work) = (Arc::clone(&barrier), work(s, w));
        tasks.spawn(async move {
            barrier.wait();
            (w, work.await)
        });
    }
    let mut results: Vec<(usize, T)> = Vec::with_capacity(writers);
    while let Some(done) = tasks.join_next().await {
        results.push(done.expect("writer"));
    }
    results.sort_by_key(|(w, _)| *w);
    results.into_iter().map(|(_, r)| r).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 5)]
async fn racing_increments_hand_out_every_number_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    Store::open(&path).expect("create");
    let per_writer = 100;
    let got = race(&path, 4, move |s, _| async move {
        let mut got = Vec::new();
        for _ in 0..per_writer {
            got.push(s.kv_increment("journal", "next-id", 1).await.expect("increment"));
        }
        got
    })
    .await;
    let mut all: Vec<i64> = got.into_iter().flatten().collect();
    all.sort_unstable();
    assert_eq!(all, (1..=4 * per_writer).collect::<Vec<i64>>(), "each number handed out exactly once");
    let s = Store::open(&path).expect("reopen");
    assert_eq!(s.kv_get("journal", "next-id").await.expect("get"), Some(b"400".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 5)]
async fn racing_creates_of_one_key_have_exactly_one_winner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    Store::open(&path).expect("create");
    let won = race(&path, 4, |s, w| async move {
        let mut won = 0;
        for i in 0..50 {
            let value = format!("writer {w}");
            if s.kv_compare_and_set("p", &format!("k{i}"), None, Some(value.as_bytes())).await.expect("cas") {
                won += 1;
            }
        }
        won
    })
    .await;
    assert_eq!(won.iter().sum::<usize>(), 50, "each of the 50 keys created once: {won:?}");
    let s = Store::open(&path).expect("reopen");
    let listed = s.kv_list("p", "k").await.expect("list");
    assert_eq!(listed.len(), 50);
    let created: usize =
        (0..4).map(|w| listed.iter().filter(|(_, v)| *v == format!("writer {w}").into_bytes()).count()).sum();
    assert_eq!(created, 50, "every value is a whole one from its winner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_compare_and_set_loop_loses_no_update() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    Store::open(&path).expect("create");
    let per_writer = 40;
    // Each writer adds its items to one JSON list under one key: read, change, swap, and on a
    // lost race read again. (A plain get and set here would drop other writers' items.)
    let retries = race(&path, 3, move |s, w| async move {
        let mut retries = 0;
        for i in 0..per_writer {
            loop {
                let before = s.kv_get("p", "list").await.expect("get");
                let mut items: Vec<String> =
                    before.as_deref().map_or_else(Vec::new, |b| serde_json::from_slice(b).expect("json"));
                items.push(format!("w{w}-{i}"));
                let after = serde_json::to_vec(&items).expect("json");
                if s.kv_compare_and_set("p", "list", before.as_deref(), Some(&after)).await.expect("cas") {
                    break;
                }
                retries += 1;
            }
        }
        retries
    })
    .await;
    let s = Store::open(&path).expect("reopen");
    let items: Vec<String> =
        serde_json::from_slice(&s.kv_get("p", "list").await.expect("get").expect("set")).expect("json");
    assert_eq!(items.len(), 3 * per_writer, "after {retries:?} retries");
    for w in 0..3 {
        let own: Vec<&String> = items.iter().filter(|i| i.starts_with(&format!("w{w}-"))).collect();
        let want: Vec<String> = (0..per_writer).map(|i| format!("w{w}-{i}")).collect();
        assert_eq!(own, want.iter().collect::<Vec<_>>(), "each writer's items, in its order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_listing_sees_each_write_whole_while_others_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    Store::open(&path).expect("create");
    // Two writers create numbered entries through a shared counter while a third lists them:
    // every listing holds whole values, and a later listing never has fewer entries.
    let seen = race(&path, 3, |s, w| async move {
        if w < 2 {
            for _ in 0..100 {
                let id = s.kv_increment("p", "next", 1).await.expect("increment");
                let value = format!("entry {id} by {w}");
                assert!(
                    s.kv_compare_and_set("p", &format!("e/{id:06}"), None, Some(value.as_bytes())).await.expect("cas")
                );
            }
            Vec::new()
        } else {
            let mut listings = Vec::new();
            for _ in 0..50 {
                listings.push(s.kv_list("p", "e/").await.expect("list"));
            }
            listings
        }
    })
    .await;
    let listings = &seen[2];
    let mut before = 0;
    for listing in listings {
        assert!(listing.len() >= before, "a listing lost entries");
        before = listing.len();
        for (key, value) in listing {
            let id: u64 = key[2..].parse().expect("number");
            assert!(String::from_utf8_lossy(value).starts_with(&format!("entry {id} by ")), "{key}: {value:?}");
        }
    }
    assert_eq!(Store::open(&path).expect("reopen").kv_list("p", "e/").await.expect("list").len(), 200);
}
