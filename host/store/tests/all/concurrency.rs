//! Two writers on one file: nothing is lost, turns stay whole and in order.

use std::sync::{Arc, Barrier};

use talaria_protocol::Message;
use talaria_store::Store;

use crate::create;

const TURNS: usize = 200;

#[test]
fn two_stores_appending_at_once_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    {
        let s = Store::open(&path).expect("open");
        for id in ["shared", "w0", "w1"] {
            create(&s, id);
        }
    }
    let barrier = Arc::new(Barrier::new(2));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let path = path.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                // Each thread has its own Store, hence its own connection, like another process.
                let s = Store::open(&path).expect("open");
                barrier.wait();
                for i in 0..TURNS {
                    let own = [Message::user(format!("w{w} q{i}")), Message::assistant(format!("w{w} a{i}"))];
                    s.append_messages(&format!("w{w}"), &own).expect("append own");
                    s.append_messages("shared", &own).expect("append shared");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }

    let s = Store::open(&path).expect("reopen");
    for w in 0..2 {
        let got: Vec<String> = s
            .messages(&format!("w{w}"))
            .expect("messages")
            .into_iter()
            .map(|m| m.message.content().to_owned())
            .collect();
        let want: Vec<String> = (0..TURNS).flat_map(|i| [format!("w{w} q{i}"), format!("w{w} a{i}")]).collect();
        assert_eq!(got, want);
        assert_eq!(s.session(&format!("w{w}")).expect("get").expect("exists").message_count, 2 * TURNS as i64);
    }
    let shared = s.messages("shared").expect("messages");
    assert_eq!(shared.len(), 4 * TURNS);
    assert_eq!(s.session("shared").expect("get").expect("exists").message_count, 4 * TURNS as i64);
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

#[test]
fn two_stores_creating_a_new_file_at_once_both_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let barrier = Arc::new(Barrier::new(2));
    let openers: Vec<_> = (0..2)
        .map(|i| {
            let path = path.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let s = Store::open(&path).expect("open");
                create(&s, &format!("s{i}"));
            })
        })
        .collect();
    for o in openers {
        o.join().expect("opener");
    }
    assert_eq!(Store::open(&path).expect("reopen").list_sessions(10, 0).expect("list").len(), 2);
}

#[test]
fn a_writer_holding_the_lock_past_the_busy_timeout_is_waited_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let s = Store::open(&path).expect("open");
    create(&s, "s");
    let other = rusqlite::Connection::open(&path).expect("open raw");
    other.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    let holder = std::thread::spawn(move || {
        // Longer than SQLite's own busy timeout (1 s): the store must retry on its own.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        other.execute_batch("COMMIT").expect("release");
    });
    let started = std::time::Instant::now();
    s.append_messages("s", &[Message::user("patience")]).expect("append after the lock is released");
    assert!(started.elapsed() >= std::time::Duration::from_millis(1400));
    holder.join().expect("holder");
    assert_eq!(s.messages("s").expect("messages").len(), 1);
}

/// `writers` threads, each with its own `Store` (its own connection, like another process),
/// started together, each running `work(store, writer)`; their results in writer order.
fn race<T: Send + 'static>(
    path: &std::path::Path,
    writers: usize,
    work: impl Fn(&Store, usize) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let barrier = Arc::new(Barrier::new(writers));
    let work = Arc::new(work);
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (path, barrier, work) = (path.to_path_buf(), Arc::clone(&barrier), Arc::clone(&work));
            std::thread::spawn(move || {
                let s = Store::open(&path).expect("open");
                barrier.wait();
                work(&s, w)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("writer")).collect()
}

#[test]
fn racing_increments_hand_out_every_number_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    Store::open(&path).expect("create");
    let per_writer = 100;
    let got = race(&path, 4, move |s, _| {
        (0..per_writer).map(|_| s.kv_increment("journal", "next-id", 1).expect("increment")).collect::<Vec<i64>>()
    });
    let mut all: Vec<i64> = got.into_iter().flatten().collect();
    all.sort_unstable();
    assert_eq!(all, (1..=4 * per_writer).collect::<Vec<i64>>(), "each number handed out exactly once");
    let s = Store::open(&path).expect("reopen");
    assert_eq!(s.kv_get("journal", "next-id").expect("get"), Some(b"400".to_vec()));
}

#[test]
fn racing_creates_of_one_key_have_exactly_one_winner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    Store::open(&path).expect("create");
    let won = race(&path, 4, |s, w| {
        (0..50)
            .filter(|i| {
                let value = format!("writer {w}");
                s.kv_compare_and_set("p", &format!("k{i}"), None, Some(value.as_bytes())).expect("cas")
            })
            .count()
    });
    assert_eq!(won.iter().sum::<usize>(), 50, "each of the 50 keys created once: {won:?}");
    let s = Store::open(&path).expect("reopen");
    let listed = s.kv_list("p", "k").expect("list");
    assert_eq!(listed.len(), 50);
    let created: usize =
        (0..4).map(|w| listed.iter().filter(|(_, v)| *v == format!("writer {w}").into_bytes()).count()).sum();
    assert_eq!(created, 50, "every value is a whole one from its winner");
}

#[test]
fn a_compare_and_set_loop_loses_no_update() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    Store::open(&path).expect("create");
    let per_writer = 40;
    // Each writer adds its items to one JSON list under one key: read, change, swap, and on a
    // lost race read again. (A plain get and set here would drop other writers' items.)
    let retries = race(&path, 3, move |s, w| {
        let mut retries = 0;
        for i in 0..per_writer {
            loop {
                let before = s.kv_get("p", "list").expect("get");
                let mut items: Vec<String> =
                    before.as_deref().map_or_else(Vec::new, |b| serde_json::from_slice(b).expect("json"));
                items.push(format!("w{w}-{i}"));
                let after = serde_json::to_vec(&items).expect("json");
                if s.kv_compare_and_set("p", "list", before.as_deref(), Some(&after)).expect("cas") {
                    break;
                }
                retries += 1;
            }
        }
        retries
    });
    let s = Store::open(&path).expect("reopen");
    let items: Vec<String> = serde_json::from_slice(&s.kv_get("p", "list").expect("get").expect("set")).expect("json");
    assert_eq!(items.len(), 3 * per_writer, "after {retries:?} retries");
    for w in 0..3 {
        let own: Vec<&String> = items.iter().filter(|i| i.starts_with(&format!("w{w}-"))).collect();
        let want: Vec<String> = (0..per_writer).map(|i| format!("w{w}-{i}")).collect();
        assert_eq!(own, want.iter().collect::<Vec<_>>(), "each writer's items, in its order");
    }
}

#[test]
fn a_listing_sees_each_write_whole_while_others_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    Store::open(&path).expect("create");
    // Two writers create numbered entries through a shared counter while a third lists them:
    // every listing holds whole values, and a later listing never has fewer entries.
    let seen = race(&path, 3, |s, w| {
        if w < 2 {
            for _ in 0..100 {
                let id = s.kv_increment("p", "next", 1).expect("increment");
                let value = format!("entry {id} by {w}");
                assert!(s.kv_compare_and_set("p", &format!("e/{id:06}"), None, Some(value.as_bytes())).expect("cas"));
            }
            Vec::new()
        } else {
            (0..50).map(|_| s.kv_list("p", "e/").expect("list")).collect()
        }
    });
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
    assert_eq!(Store::open(&path).expect("reopen").kv_list("p", "e/").expect("list").len(), 200);
}
