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
