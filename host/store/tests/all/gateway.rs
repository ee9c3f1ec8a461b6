//! What gateway processes sharing one store rely on: the inbox keeps each message once and
//! walks it to done, the ledger's claims hand each delivery to one sender and keep a chat's in
//! order, and notices reach the other processes (on PostgreSQL).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use talaria_store::Store;
use talaria_store::delivery::NewDelivery;
use talaria_store::inbox::{DONE, NewEntry, Put, QUEUED, State};
use talaria_store::notice::{JOB_CHANGED, LEASE_FREED, Notice, Notices};

crate::on_both_engines!(
    the_inbox_keeps_a_message_once_and_walks_it_to_done,
    open_chats_come_longest_waiting_first,
    a_chat_s_deliveries_go_one_at_a_time_in_order,
    notices_tell_of_queued_messages_answers_freed_leases_and_changed_jobs,
);

fn entry<'a>(key: &'a str, chat: &'a str, id: &'a str) -> NewEntry<'a> {
    NewEntry {
        account: "telegram",
        chat_id: chat,
        thread_id: None,
        session_key: key,
        message_id: id,
        kind: "message",
        body: "{\"text\":\"hi\"}",
        respond: false,
    }
}

fn the_inbox_keeps_a_message_once_and_walks_it_to_done(s: &Store) {
    let new = NewEntry { respond: true, thread_id: Some("t1"), ..entry("dm:42", "42", "7") };
    let Put::New(id) = s.inbox_put(&new).expect("put") else { panic!("a new message is kept") };
    let Put::Known(known) = s.inbox_put(&new).expect("again") else { panic!("the same message twice") };
    assert_eq!((known.id, known.state, known.respond), (id, State::Pending, true));
    assert_eq!(known.thread_id.as_deref(), Some("t1"));
    // Another chat may use the same message id.
    assert!(matches!(s.inbox_put(&entry("dm:43", "43", "7")).expect("put"), Put::New(other) if other != id));

    s.inbox_started(id, "s-1", 4).expect("started");
    s.inbox_streamed(id, "m-900").expect("streamed");
    let open = s.inbox_open("dm:42").expect("open");
    assert_eq!(open.len(), 1);
    assert_eq!(
        (open[0].state, open[0].session_id.as_deref(), open[0].started_count, open[0].streamed.as_deref()),
        (State::Running, Some("s-1"), Some(4), Some("m-900"))
    );
    s.inbox_done(id, Some("the answer")).expect("done");
    assert!(s.inbox_open("dm:42").expect("open").is_empty());
    let done = s.inbox_get(id).expect("get").expect("kept");
    assert!(done.is_done() && done.reply.as_deref() == Some("the answer"), "{done:?}");
    // A message answered is never started again.
    s.inbox_started(id, "s-2", 9).expect("started late");
    assert!(s.inbox_get(id).expect("get").expect("kept").is_done());
    let Put::Known(again) = s.inbox_put(&new).expect("sent again") else { panic!("kept once") };
    assert!(again.is_done(), "a message handed in again after its answer stays answered");

    assert_eq!(s.inbox_prune(0).expect("prune nothing older"), 0);
    assert_eq!(s.inbox_prune(i64::MAX).expect("prune"), 1);
    assert_eq!(s.inbox_get(id).expect("get"), None);
}

fn open_chats_come_longest_waiting_first(s: &Store) {
    let ids: Vec<i64> = [("b", "1"), ("a", "2"), ("b", "3")]
        .iter()
        .map(|(key, id)| match s.inbox_put(&entry(key, key, id)).expect("put") {
            Put::New(id) => id,
            Put::Known(_) => panic!("new"),
        })
        .collect();
    assert_eq!(s.inbox_open_keys().expect("keys"), ["b", "a"]);
    s.inbox_done(ids[0], None).expect("done");
    assert_eq!(s.inbox_open_keys().expect("keys"), ["a", "b"], "b's oldest open message is newer now");
    s.inbox_done(ids[2], None).expect("done");
    assert_eq!(s.inbox_open_keys().expect("keys"), ["a"]);
}

fn queue(s: &Store, chat: &str, key: &str) -> i64 {
    let new = NewDelivery { platform: "telegram", chat_id: chat, thread_id: None, body: key, key };
    s.delivery_enqueue(&new).expect("queue")
}

fn a_chat_s_deliveries_go_one_at_a_time_in_order(s: &Store) {
    let hold = Duration::from_secs(60);
    let first = queue(s, "1", "a:0");
    queue(s, "1", "a:1");
    let other = queue(s, "2", "b:0");
    let keys = |d: Vec<talaria_store::delivery::Delivery>| d.into_iter().map(|d| d.key).collect::<Vec<_>>();
    assert_eq!(keys(s.deliveries_claim("telegram", 10, hold).expect("claim")), ["a:0", "b:0"]);
    assert!(s.deliveries_claim("telegram", 10, hold).expect("claim").is_empty(), "both are held");
    assert!(s.deliveries_claim("matrix", 10, hold).expect("claim").is_empty(), "another platform's");
    s.delivery_sent(first, "m1").expect("sent");
    assert_eq!(keys(s.deliveries_claim("telegram", 10, hold).expect("claim")), ["a:1"], "the chat's next");
    // A failed send is retried later, and holds up its chat until then.
    s.delivery_failed(other, "HTTP 502").expect("failed");
    queue(s, "2", "b:1");
    assert!(s.deliveries_claim("telegram", 10, hold).expect("claim").is_empty());
    // A sender that died: its claim runs out and the delivery goes to another.
    queue(s, "3", "c:0");
    assert_eq!(keys(s.deliveries_claim("telegram", 10, Duration::ZERO).expect("claim")), ["c:0"]);
    assert_eq!(keys(s.deliveries_claim("telegram", 10, hold).expect("claim")), ["c:0"], "claimed again");
}

/// The next notice on `topic`, waiting up to five seconds.
pub(crate) fn next_on(notices: &mut Notices, topic: &str) -> Notice {
    let start = Instant::now();
    loop {
        match notices.try_recv() {
            Ok(n) if n.topic == topic => return n,
            Ok(_) => {}
            Err(_) => {
                assert!(start.elapsed() < Duration::from_secs(5), "no `{topic}` notice");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

fn notices_tell_of_queued_messages_answers_freed_leases_and_changed_jobs(s: &Store) {
    let mut notices = s.notices();
    let Put::New(id) = s.inbox_put(&entry("dm:9", "9", "1")).expect("put") else { panic!("new") };
    assert_eq!(next_on(&mut notices, QUEUED).payload, "dm:9");
    s.inbox_done(id, None).expect("done");
    assert_eq!(next_on(&mut notices, DONE).payload, id.to_string());
    let talaria_store::Leased::Granted(token) =
        s.try_lease("gateway:x", "test", Duration::from_secs(30)).expect("lease")
    else {
        panic!("free")
    };
    s.release_lease("gateway:x", &token).expect("release");
    assert_eq!(next_on(&mut notices, LEASE_FREED).payload, "gateway:x");
    let job = talaria_store::cron::Job {
        name: "j".into(),
        prompt: "p".into(),
        schedule_kind: "every".into(),
        schedule_expr: "PT1H".into(),
        schedule_display: "every 1h".into(),
        deliver: "local".into(),
        enabled: true,
        creator: "user".into(),
        ..talaria_store::cron::Job::default()
    };
    let id = s.cron_insert(&job).expect("insert");
    assert_eq!(next_on(&mut notices, JOB_CHANGED).payload, id);
    s.cron_update(&talaria_store::cron::Job { id: id.clone(), enabled: false, ..job }).expect("update");
    assert_eq!(next_on(&mut notices, JOB_CHANGED).payload, id);
}

/// Two processes on one PostgreSQL: a notice one sends reaches the other.
#[test]
fn notices_cross_processes_on_postgresql() {
    let url = talaria_test_support::postgres::Postgres::shared().database();
    let (a, b) = (Store::connect(&url).expect("a"), Store::connect(&url).expect("b"));
    assert!(a.notices_cross_process());
    let mut heard = b.notices();
    // Its listener is up once it has said so.
    next_on(&mut heard, talaria_store::notice::RESYNC);
    a.notify("cron", "job-1").expect("notify");
    assert_eq!(next_on(&mut heard, "cron").payload, "job-1");
}

/// Senders in four threads over two handles of one store (two processes): every delivery is
/// sent once, and each chat's in the order they were queued.
fn senders_share_the_ledger(a: &Store, b: &Store) {
    for chat in 0..5 {
        for part in 0..8 {
            queue(a, &format!("c{chat}"), &format!("{chat}:{part}"));
        }
    }
    // Taken just before a delivery is marked sent: the chat's next one is claimable only after
    // that, so it draws a higher number.
    let order = std::sync::atomic::AtomicUsize::new(0);
    let sent: Vec<(usize, String, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let (store, order) = (if i % 2 == 0 { a } else { b }, &order);
                scope.spawn(move || {
                    let mut sent = Vec::new();
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_secs(20) {
                        let claimed = store.deliveries_claim("telegram", 3, Duration::from_secs(60)).expect("claim");
                        if claimed.is_empty() && store.delivery_next_at("telegram").expect("next").is_none() {
                            break;
                        }
                        for d in claimed {
                            let at = order.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            store.delivery_sent(d.id, "ok").expect("sent");
                            sent.push((at, d.chat_id, d.key));
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    sent
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("join")).collect()
    });
    assert_eq!(sent.len(), 40, "every delivery once: {sent:?}");
    let mut by_chat: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    for (at, chat, key) in sent {
        by_chat.entry(chat).or_default().push((at, key));
    }
    assert_eq!(by_chat.len(), 5);
    for (chat, mut keys) in by_chat {
        keys.sort();
        let parts: Vec<String> = keys.into_iter().map(|(_, key)| key).collect();
        let n = &chat[1..];
        assert_eq!(parts, (0..8).map(|p| format!("{n}:{p}")).collect::<Vec<_>>(), "chat {chat} out of order");
    }
}

#[test]
fn senders_share_the_ledger_on_sqlite() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.db");
    let (a, b) = (Store::open(&path).expect("a"), Store::open(&path).expect("b"));
    senders_share_the_ledger(&a, &b);
}

#[test]
fn senders_share_the_ledger_on_postgresql() {
    let url = talaria_test_support::postgres::Postgres::shared().database();
    let (a, b) = (Store::connect(&url).expect("a"), Store::connect(&url).expect("b"));
    senders_share_the_ledger(&a, &b);
}

/// The pid of a process that has finished.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

/// A delivery claimed by a process of this machine that died is sent by the next claimer at
/// once, not when the claim runs out. `sql` runs a statement on the store's database.
fn a_dead_sender_s_claim_is_void(s: &Store, sql: &dyn Fn(&str)) {
    queue(s, "1", "d:0");
    assert_eq!(s.deliveries_claim("telegram", 10, Duration::from_secs(60)).expect("claim").len(), 1);
    assert!(s.deliveries_claim("telegram", 10, Duration::from_secs(60)).expect("claim").is_empty(), "held");
    sql(&format!("UPDATE deliveries SET claimed_by = '{}' || CLAIM_HOST", dead_pid()));
    let again = s.deliveries_claim("telegram", 10, Duration::from_secs(60)).expect("claim");
    assert_eq!(again.iter().map(|d| d.key.as_str()).collect::<Vec<_>>(), ["d:0"], "its claim died with it");
}

#[test]
fn a_dead_sender_s_claim_is_void_on_sqlite() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.db");
    let s = Store::open(&path).expect("store");
    let conn = rusqlite::Connection::open(&path).expect("open");
    a_dead_sender_s_claim_is_void(&s, &|statement| {
        let statement = statement.replace("CLAIM_HOST", "substr(claimed_by, instr(claimed_by, '@'))");
        conn.execute(&statement, []).expect("sql");
    });
}

#[test]
fn a_dead_sender_s_claim_is_void_on_postgresql() {
    let pg = talaria_test_support::postgres::Postgres::shared();
    let url = pg.database();
    let db = url.split(":///").nth(1).and_then(|rest| rest.split('?').next()).expect("name").to_string();
    let s = Store::connect(&url).expect("store");
    a_dead_sender_s_claim_is_void(&s, &|statement| {
        let statement = statement.replace("CLAIM_HOST", "substring(claimed_by from position('@' in claimed_by))");
        pg.psql(&db, &statement);
    });
}
