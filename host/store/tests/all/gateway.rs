//! What gateway processes sharing one store rely on: the inbox keeps each message once and
//! walks it to done, the ledger's claims hand each delivery to one sender and keep a chat's in
//! order, and notices reach the other processes (on PostgreSQL).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use talaria_protocol::Message;
use talaria_store::Store;
use talaria_store::delivery::{Failed, NewDelivery};
use talaria_store::inbox::{Answer, DONE, Entry, NewEntry, Put, QUEUED, Queued, State};
use talaria_store::lease::Leased;
use talaria_store::notice::{JOB_CHANGED, LEASE_FREED, Notice, Notices};
use tokio::task::JoinSet;

crate::on_both_engines!(
    the_inbox_keeps_a_message_once_and_walks_it_to_done,
    a_message_starts_with_its_turn_s_lease_counting_what_the_holder_before_committed,
    open_chats_come_longest_waiting_first,
    a_chat_s_deliveries_go_one_at_a_time_in_order,
    an_answer_s_parts_are_queued_as_its_message_is_marked_done,
    a_message_is_marked_done_in_the_commit_of_its_turn_s_answer,
    deliveries_in_trouble_are_listed_with_their_last_error,
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
        served_here: false,
    }
}

async fn the_inbox_keeps_a_message_once_and_walks_it_to_done(s: &Store) {
    let new = NewEntry { respond: true, thread_id: Some("t1"), ..entry("dm:42", "42", "7") };
    let Put::New(id) = s.inbox_put(&new).await.expect("put") else { panic!("a new message is kept") };
    // What the process that kept it hands over is what the store holds.
    let stored = s.inbox_get(id).await.expect("get").expect("kept");
    assert_eq!(Entry { created_at: stored.created_at, ..new.kept(id) }, stored);
    let Put::Known(known) = s.inbox_put(&new).await.expect("again") else { panic!("the same message twice") };
    assert_eq!((known.id, known.state, known.respond), (id, State::Pending, true));
    assert_eq!(known.thread_id.as_deref(), Some("t1"));
    // Another chat may use the same message id.
    assert!(matches!(s.inbox_put(&entry("dm:43", "43", "7")).await.expect("put"), Put::New(other) if other != id));

    // The session's messages are counted as the turn starts: none when the session is not
    // stored yet (its first turn makes it).
    let Put::New(first) = s.inbox_put(&entry("dm:42", "42", "6")).await.expect("put") else { panic!("new") };
    s.inbox_started(first, "s-1").await.expect("started");
    assert_eq!(s.inbox_get(first).await.expect("get").expect("kept").started_count, Some(0));
    s.inbox_done(first, None).await.expect("done");
    crate::create(s, "s-1").await;
    let four: Vec<Message> = (0..4).map(|n| Message::User { content: format!("m{n}"), images: Vec::new() }).collect();
    s.append_messages("s-1", &four).await.expect("append");
    s.inbox_started(id, "s-1").await.expect("started");
    s.inbox_streamed(id, Some("m-900")).await.expect("streamed");
    let open = s.inbox_open("dm:42").await.expect("open");
    assert_eq!(open.len(), 1);
    assert_eq!(
        (open[0].state, open[0].session_id.as_deref(), open[0].started_count, open[0].streamed.as_deref()),
        (State::Running, Some("s-1"), Some(4), Some("m-900"))
    );
    // What an undone turn took back is not counted.
    let Put::New(next) = s.inbox_put(&entry("dm:42", "42", "8")).await.expect("put") else { panic!("new") };
    assert_eq!(s.undo_last_turn("s-1").await.expect("undo"), 1);
    s.inbox_started(next, "s-1").await.expect("started");
    assert_eq!(s.inbox_get(next).await.expect("get").expect("kept").started_count, Some(3));
    s.inbox_done(next, None).await.expect("done");
    s.inbox_done(id, Some("the answer")).await.expect("done");
    assert!(s.inbox_open("dm:42").await.expect("open").is_empty());
    let done = s.inbox_get(id).await.expect("get").expect("kept");
    assert!(done.is_done() && done.reply.as_deref() == Some("the answer"), "{done:?}");
    // A message answered is never started again.
    s.inbox_started(id, "s-2").await.expect("started late");
    assert!(s.inbox_get(id).await.expect("get").expect("kept").is_done());
    let Put::Known(again) = s.inbox_put(&new).await.expect("sent again") else { panic!("kept once") };
    assert!(again.is_done(), "a message handed in again after its answer stays answered");

    assert_eq!(s.inbox_prune(0).await.expect("prune nothing older"), 0);
    assert_eq!(s.inbox_prune(i64::MAX).await.expect("prune"), 3);
    assert_eq!(s.inbox_get(id).await.expect("get"), None);
}

async fn a_message_starts_with_its_turn_s_lease_counting_what_the_holder_before_committed(s: &Store) {
    const TTL: Duration = Duration::from_secs(60);
    crate::create(s, "s-1").await;
    let two: Vec<Message> = (0..2).map(|n| Message::User { content: format!("m{n}"), images: Vec::new() }).collect();
    s.append_messages("s-1", &two).await.expect("append");
    let state = async |id| s.inbox_get(id).await.expect("get").expect("kept");
    let lease = async |holder| match s.try_lease("s-1", holder, TTL).await.expect("lease") {
        Leased::Granted(token) => token,
        Leased::Held(by) => panic!("the lease is free, not held by {by}"),
    };
    // With the session read back as a turn that goes on reads it, and as one that rested.
    for (message, history, count) in [("1", false, 4), ("2", true, 6)] {
        // Another process answers the session (an editor continuing it) when the chat's turn
        // comes.
        let editor = lease("talaria acp").await;
        let Put::New(id) = s.inbox_put(&entry("dm:9", "9", message)).await.expect("put") else { panic!("new") };
        s.inbox_start_with_lease(id, "s-1");
        let (held, _) = s.try_lease_marked("s-1", "talaria gateway", TTL, history).await.expect("try");
        assert!(matches!(held, Leased::Held(_)), "{held:?}");
        assert_eq!(state(id).await.state, State::Pending, "not started while its turn waits for the lease");
        // The editor's turn commits two messages and gives the lease back.
        s.append_messages("s-1", &two).await.expect("append");
        s.release_lease("s-1", &editor).await.expect("release");
        let (granted, marked) = s.try_lease_marked("s-1", "talaria gateway", TTL, history).await.expect("take");
        let Leased::Granted(gateway) = granted else { panic!("the lease is free again: {granted:?}") };
        assert_eq!(marked.expect("read with the lease").mark.0, count);
        let started = state(id).await;
        assert_eq!(
            (started.state, started.session_id.as_deref(), started.started_count),
            (State::Running, Some("s-1"), Some(count)),
            "started with the lease, counting the editor's messages"
        );
        s.inbox_done(id, None).await.expect("done");
        s.release_lease("s-1", &gateway).await.expect("release");
        // Started once: the session's next lease leaves the answered message be.
        let next = lease("talaria acp").await;
        assert!(state(id).await.is_done());
        s.release_lease("s-1", &next).await.expect("release");
    }
}

async fn open_chats_come_longest_waiting_first(s: &Store) {
    let mut ids: Vec<i64> = Vec::new();
    for (key, id) in [("b", "1"), ("a", "2"), ("b", "3")] {
        ids.push(match s.inbox_put(&entry(key, key, id)).await.expect("put") {
            Put::New(id) => id,
            Put::Known(_) => panic!("new"),
        });
    }
    assert_eq!(s.inbox_open_keys().await.expect("keys"), ["b", "a"]);
    s.inbox_done(ids[0], None).await.expect("done");
    assert_eq!(s.inbox_open_keys().await.expect("keys"), ["a", "b"], "b's oldest open message is newer now");
    s.inbox_done(ids[2], None).await.expect("done");
    assert_eq!(s.inbox_open_keys().await.expect("keys"), ["a"]);
}

async fn queue(s: &Store, chat: &str, key: &str) -> i64 {
    let new = NewDelivery { platform: "telegram", chat_id: chat, thread_id: None, body: key, key };
    s.delivery_enqueue(&new).await.expect("queue")
}

async fn a_chat_s_deliveries_go_one_at_a_time_in_order(s: &Store) {
    let hold = Duration::from_secs(60);
    let first = queue(s, "1", "a:0").await;
    queue(s, "1", "a:1").await;
    let other = queue(s, "2", "b:0").await;
    let keys = |d: Vec<talaria_store::delivery::Delivery>| d.into_iter().map(|d| d.key).collect::<Vec<_>>();
    assert_eq!(keys(s.deliveries_claim("telegram", 10, hold).await.expect("claim")), ["a:0", "b:0"]);
    assert!(s.deliveries_claim("telegram", 10, hold).await.expect("claim").is_empty(), "both are held");
    assert!(s.deliveries_claim("matrix", 10, hold).await.expect("claim").is_empty(), "another platform's");
    s.delivery_sent(first, "m1").await.expect("sent");
    assert_eq!(keys(s.deliveries_claim("telegram", 10, hold).await.expect("claim")), ["a:1"], "the chat's next");
    // A failed send is retried later, and holds up its chat until then.
    s.delivery_failed(other, "HTTP 502").await.expect("failed");
    queue(s, "2", "b:1").await;
    assert!(s.deliveries_claim("telegram", 10, hold).await.expect("claim").is_empty());
    // A sender that died: its claim runs out and the delivery goes to another.
    queue(s, "3", "c:0").await;
    assert_eq!(keys(s.deliveries_claim("telegram", 10, Duration::ZERO).await.expect("claim")), ["c:0"]);
    assert_eq!(keys(s.deliveries_claim("telegram", 10, hold).await.expect("claim")), ["c:0"], "claimed again");
}

async fn an_answer_s_parts_are_queued_as_its_message_is_marked_done(s: &Store) {
    let Put::New(id) = s.inbox_put(&entry("dm:5", "5", "1")).await.expect("put") else { panic!("new") };
    let mut notices = s.notices().await;
    let part = |body, key| NewDelivery { platform: "telegram", chat_id: "5", thread_id: Some("t"), body, key };
    // The first part was queued before (a turn replayed): kept once, not twice.
    s.delivery_enqueue(&part("one", "r:0")).await.expect("queue");
    let parts = [part("one", "r:0"), part("two", "r:1"), part("three", "r:2")];
    s.inbox_done_queueing(id, &parts).await.expect("done");
    assert!(s.inbox_get(id).await.expect("get").expect("kept").is_done());
    assert_eq!(told_done(s, &mut notices, id).await, !s.notices_cross_process(), "a chat's answer is awaited by none");
    // The parts go out one after the other, in order, to the entry's chat and thread.
    let hold = Duration::from_secs(60);
    let mut sent = Vec::new();
    loop {
        let due = s.deliveries_claim("telegram", 10, hold).await.expect("claim");
        let [d] = due.as_slice() else {
            assert!(due.is_empty(), "a chat's deliveries are claimed one at a time: {due:?}");
            break;
        };
        assert_eq!((d.chat_id.as_str(), d.thread_id.as_deref()), ("5", Some("t")));
        s.delivery_sent(d.id, "m").await.expect("sent");
        sent.push((d.key.clone(), d.body.clone()));
    }
    let want = [("r:0", "one"), ("r:1", "two"), ("r:2", "three")].map(|(k, b)| (k.to_string(), b.to_string()));
    assert_eq!(sent, want);
    // Marked done again (another process finishing it too): nothing is queued twice.
    s.inbox_done_queueing(id, &parts).await.expect("done again");
    assert!(s.deliveries_claim("telegram", 10, hold).await.expect("claim").is_empty());
}

async fn a_message_is_marked_done_in_the_commit_of_its_turn_s_answer(s: &Store) {
    const TTL: Duration = Duration::from_secs(60);
    crate::create(s, "s-a").await;
    let put = async |new: NewEntry<'_>| match s.inbox_put(&new).await.expect("put") {
        Put::New(id) => id,
        Put::Known(e) => panic!("kept before: {e:?}"),
    };
    let state = async |id| s.inbox_get(id).await.expect("get").expect("kept");
    let answer = Message::assistant;
    let question = Message::user("q");
    // The answer goes to the chat in two parts, made from the text as the turn's end shows it.
    let id = put(entry("dm:7", "7", "1")).await;
    s.inbox_done_with_answer(
        id,
        "s-a",
        Box::new(|text: &str| {
            let part = |n: usize, body: String| Queued {
                platform: "telegram".into(),
                chat_id: "7".into(),
                thread_id: Some("t".into()),
                body,
                key: format!("reply:7:1:{n}"),
            };
            Some(Answer { reply: None, queued: vec![part(0, text.to_uppercase()), part(1, format!("({text})"))] })
        }),
    );
    // Commits of the turn before its answer leave the message open.
    s.append_messages("s-a", std::slice::from_ref(&question)).await.expect("append");
    assert_eq!(state(id).await.state, State::Pending);
    let Leased::Granted(token) = s.try_lease("s-a", "talaria gateway", TTL).await.expect("lease") else {
        panic!("the lease is free")
    };
    let mut notices = s.notices().await;
    s.append_answer("s-a", &[answer("hello *you*")], None, Some(&token), "hello you").await.expect("commit");
    assert!(state(id).await.is_done(), "done with the answer");
    assert_eq!(told_done(s, &mut notices, id).await, !s.notices_cross_process(), "a chat's answer is awaited by none");
    assert!(s.lease_holder("s-a").await.expect("holder").is_none(), "the lease was given back in it too");
    assert!(s.inbox_answered(id, "s-a"), "the worker learns it was");
    assert!(!s.inbox_answered(id, "s-a"), "once");
    let hold = Duration::from_secs(60);
    let mut sent = Vec::new();
    while let [d] = s.deliveries_claim("telegram", 10, hold).await.expect("claim").as_slice() {
        assert_eq!((d.chat_id.as_str(), d.thread_id.as_deref()), ("7", Some("t")));
        s.delivery_sent(d.id, "m").await.expect("sent");
        sent.push(d.body.clone());
    }
    assert_eq!(sent, ["HELLO YOU", "(hello you)"], "its parts, in order");

    // Whoever waits on a webhook's entry gets the reply.
    let hook = put(NewEntry { respond: true, ..entry("hook:1", "h", "1") }).await;
    s.inbox_done_with_answer(
        hook,
        "s-a",
        Box::new(|text: &str| Some(Answer { reply: Some(text.into()), queued: Vec::new() })),
    );
    s.append_answer("s-a", &[question.clone(), answer("four")], None, None, "four").await.expect("commit");
    let done = state(hook).await;
    assert_eq!((done.state, done.reply.as_deref()), (State::Done, Some("four")));
    assert!(s.inbox_answered(hook, "s-a"));

    // A render that declines (a streamed message on its way), or a commit that fails, leaves
    // the message open for the worker to mark done.
    let declined = put(entry("dm:7", "7", "2")).await;
    s.inbox_done_with_answer(declined, "s-a", Box::new(|_: &str| None));
    s.append_answer("s-a", &[question.clone(), answer("five")], None, None, "five").await.expect("commit");
    assert_eq!(state(declined).await.state, State::Pending);
    assert!(!s.inbox_answered(declined, "s-a"));
    let failed = put(entry("dm:8", "8", "1")).await;
    s.inbox_done_with_answer(
        failed,
        "ghost",
        Box::new(|text: &str| Some(Answer { reply: Some(text.into()), queued: Vec::new() })),
    );
    assert!(s.append_answer("ghost", &[answer("six")], None, None, "six").await.is_err(), "no such session");
    assert_eq!(state(failed).await.state, State::Pending);
    assert!(!s.inbox_answered(failed, "ghost"));
    // A turn that ended with no answer: asking forgets its render, which never runs after.
    let unanswered = put(entry("dm:7", "7", "3")).await;
    s.inbox_done_with_answer(unanswered, "s-a", Box::new(|_: &str| panic!("forgotten")));
    assert!(!s.inbox_answered(unanswered, "s-a"));
    s.append_answer("s-a", &[question, answer("seven")], None, None, "seven").await.expect("commit");
    assert_eq!(state(unanswered).await.state, State::Pending);
    assert!(s.deliveries_claim("telegram", 10, hold).await.expect("claim").is_empty(), "nothing else was queued");
}

async fn deliveries_in_trouble_are_listed_with_their_last_error(s: &Store) {
    let sent = queue(s, "1", "ok:0").await;
    s.delivery_sent(sent, "m1").await.expect("sent");
    queue(s, "2", "waiting:0").await;
    let retried = queue(s, "3", "retried:0").await;
    s.delivery_failed(retried, "Telegram sendMessage: 502 Bad Gateway").await.expect("failed");
    let given_up = queue(s, "4", "blocked:0").await;
    while let Failed::Retry { .. } =
        s.delivery_failed(given_up, "Telegram sendMessage: 403 Forbidden").await.expect("failed")
    {}
    let troubled = s.deliveries_troubled(10).await.expect("troubled");
    let seen: Vec<_> = troubled.iter().map(|t| (t.id, t.state.as_str(), t.attempts, t.last_error.as_str())).collect();
    assert_eq!(
        seen,
        [
            (given_up, "failed", talaria_store::delivery::MAX_ATTEMPTS, "Telegram sendMessage: 403 Forbidden"),
            (retried, "pending", 1, "Telegram sendMessage: 502 Bad Gateway"),
        ],
        "the newest first; the sent and the untried are not in trouble"
    );
    assert_eq!(troubled[0].chat_id, "4");
    assert!(troubled[1].at > troubled[1].created_at, "a retry is due later");
    assert_eq!(s.deliveries_troubled(1).await.expect("troubled").len(), 1, "at most the limit");
}

/// The next notice on `topic`, waiting up to five seconds.
pub(crate) async fn next_on(notices: &mut Notices, topic: &str) -> Notice {
    first_of(notices, &[topic]).await
}

/// Whether entry `id`'s answer was told ([`DONE`]) before a marker sent now. On SQLite every
/// answer tells this process's subscribers; on PostgreSQL only one that a request of another
/// process may wait on tells anyone.
async fn told_done(s: &Store, notices: &mut Notices, id: i64) -> bool {
    s.notify("marker", &id.to_string()).await.expect("marker");
    let first = first_of(notices, &[DONE, "marker"]).await;
    assert_eq!(first.payload, id.to_string());
    first.topic == DONE
}

/// The first of `topics` to come.
async fn first_of(notices: &mut Notices, topics: &[&str]) -> Notice {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(deadline, notices.recv()).await {
            Ok(Some(n)) if topics.contains(&n.topic.as_str()) => return n,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("none of {topics:?}"),
        }
    }
}

async fn notices_tell_of_queued_messages_answers_freed_leases_and_changed_jobs(s: &Store) {
    let mut notices = s.notices().await;
    let Put::New(id) = s.inbox_put(&entry("dm:9", "9", "1")).await.expect("put") else { panic!("new") };
    assert_eq!(next_on(&mut notices, QUEUED).await.payload, "dm:9");
    // Kept for the chat's worker of this process, which holds the chat: nobody else is told.
    let served = NewEntry { served_here: true, ..entry("dm:9", "9", "2") };
    assert!(matches!(s.inbox_put(&served).await.expect("put"), Put::New(_)));
    s.notify("marker", "1").await.expect("marker");
    assert_eq!(first_of(&mut notices, &[QUEUED, "marker"]).await.topic, "marker");
    s.inbox_done(id, None).await.expect("done");
    if s.notices_cross_process() {
        // On PostgreSQL, an answer tells other processes only when one may wait on it: a
        // webhook's entry that a request of another process waits on.
        s.notify("marker", "2").await.expect("marker");
        assert_eq!(first_of(&mut notices, &[DONE, "marker"]).await.topic, "marker", "a chat's answer tells nobody");
        let hook = NewEntry { respond: true, ..entry("hook:9", "h9", "1") };
        let Put::New(hook) = s.inbox_put(&hook).await.expect("put") else { panic!("new") };
        s.inbox_done(hook, Some("answered here")).await.expect("done");
        s.notify("marker", "3").await.expect("marker");
        assert_eq!(first_of(&mut notices, &[DONE, "marker"]).await.topic, "marker", "kept and answered here");
        let other = NewEntry { respond: true, ..entry("hook:9", "h9", "2") };
        let Put::New(other) = s.inbox_put(&other).await.expect("put") else { panic!("new") };
        s.inbox_await(other).await.expect("await");
        s.inbox_done(other, Some("answered")).await.expect("done");
        assert_eq!(next_on(&mut notices, DONE).await.payload, other.to_string());
    } else {
        assert_eq!(next_on(&mut notices, DONE).await.payload, id.to_string());
    }
    let talaria_store::Leased::Granted(token) =
        s.try_lease("gateway:x", "test", Duration::from_secs(30)).await.expect("lease")
    else {
        panic!("free")
    };
    s.release_lease("gateway:x", &token).await.expect("release");
    assert_eq!(next_on(&mut notices, LEASE_FREED).await.payload, "gateway:x");
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
    let id = s.cron_insert(&job).await.expect("insert");
    assert_eq!(next_on(&mut notices, JOB_CHANGED).await.payload, id);
    s.cron_update(&talaria_store::cron::Job { id: id.clone(), enabled: false, ..job }).await.expect("update");
    assert_eq!(next_on(&mut notices, JOB_CHANGED).await.payload, id);
}

/// Two processes on one PostgreSQL: a notice one sends reaches the other.
#[tokio::test]
async fn notices_cross_processes_on_postgresql() {
    let url = talaria_test_support::postgres::Postgres::shared().database();
    let (a, b) = (Store::connect(&url).await.expect("a"), Store::connect(&url).await.expect("b"));
    assert!(a.notices_cross_process());
    let mut heard = b.notices().await;
    // Its listener is up once it has said so.
    next_on(&mut heard, talaria_store::notice::RESYNC).await;
    a.notify("cron", "job-1").await.expect("notify");
    assert_eq!(next_on(&mut heard, "cron").await.payload, "job-1");
}

/// Senders in four tasks over two handles of one store (two processes): every delivery is
/// sent once, and each chat's in the order they were queued.
async fn senders_share_the_ledger(a: Arc<Store>, b: Arc<Store>) {
    for chat in 0..5 {
        for part in 0..8 {
            queue(&a, &format!("c{chat}"), &format!("{chat}:{part}")).await;
        }
    }
    // Taken just before a delivery is marked sent: the chat's next one is claimable only after
    // that, so it draws a higher number.
    let order = Arc::new(AtomicUsize::new(0));
    let mut senders = JoinSet::new();
    for i in 0..4 {
        let (store, order) = (Arc::clone(if i % 2 == 0 { &a } else { &b }), Arc::clone(&order));
        senders.spawn(async move {
            let mut sent = Vec::new();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(20) {
                let claimed = store.deliveries_claim("telegram", 3, Duration::from_secs(60)).await.expect("claim");
                if claimed.is_empty() && store.delivery_next_at("telegram").await.expect("next").is_none() {
                    break;
                }
                for d in claimed {
                    let at = order.fetch_add(1, Ordering::SeqCst);
                    store.delivery_sent(d.id, "ok").await.expect("sent");
                    sent.push((at, d.chat_id, d.key));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            sent
        });
    }
    let mut sent: Vec<(usize, String, String)> = Vec::new();
    while let Some(h) = senders.join_next().await {
        sent.extend(h.expect("join"));
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 5)]
async fn senders_share_the_ledger_on_sqlite() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.db");
    let (a, b) = (Store::open(&path).expect("a"), Store::open(&path).expect("b"));
    senders_share_the_ledger(Arc::new(a), Arc::new(b)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 5)]
async fn senders_share_the_ledger_on_postgresql() {
    let url = talaria_test_support::postgres::Postgres::shared().database();
    let (a, b) = (Store::connect(&url).await.expect("a"), Store::connect(&url).await.expect("b"));
    senders_share_the_ledger(Arc::new(a), Arc::new(b)).await;
}

/// The pid of a process that has finished.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

/// A delivery claimed by a process of this machine that died is sent by the next claimer at
/// once, not when the claim runs out, marked as one the dead process may have sent (a failure
/// recorded is not). `sql` runs a statement on the store's database.
async fn a_dead_sender_s_claim_is_void(s: &Store, sql: &dyn Fn(&str)) {
    queue(s, "1", "d:0").await;
    let first = s.deliveries_claim("telegram", 10, Duration::from_secs(60)).await.expect("claim");
    assert_eq!(first.iter().map(|d| d.orphaned).collect::<Vec<_>>(), [false], "nobody claimed it before");
    assert!(s.deliveries_claim("telegram", 10, Duration::from_secs(60)).await.expect("claim").is_empty(), "held");
    sql(&format!("UPDATE deliveries SET claimed_by = '{}' || CLAIM_HOST", dead_pid()));
    let again = s.deliveries_claim("telegram", 10, Duration::from_secs(60)).await.expect("claim");
    assert_eq!(again.iter().map(|d| d.key.as_str()).collect::<Vec<_>>(), ["d:0"], "its claim died with it");
    assert!(again[0].orphaned, "the dead process may have sent it");

    // A send that failed, and said so, is not in doubt when it is tried again.
    assert!(matches!(s.delivery_failed(again[0].id, "HTTP 502").await.expect("failed"), Failed::Retry { .. }));
    sql("UPDATE deliveries SET next_at = 0");
    let retried = s.deliveries_claim("telegram", 10, Duration::from_secs(60)).await.expect("claim");
    assert_eq!(retried.iter().map(|d| (d.key.as_str(), d.orphaned)).collect::<Vec<_>>(), [("d:0", false)]);
}

#[tokio::test]
async fn a_dead_sender_s_claim_is_void_on_sqlite() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.db");
    let s = Store::open(&path).expect("store");
    let conn = rusqlite::Connection::open(&path).expect("open");
    a_dead_sender_s_claim_is_void(&s, &|statement| {
        let statement = statement.replace("CLAIM_HOST", "substr(claimed_by, instr(claimed_by, '@'))");
        conn.execute(&statement, []).expect("sql");
    })
    .await;
}

#[tokio::test]
async fn a_dead_sender_s_claim_is_void_on_postgresql() {
    let pg = talaria_test_support::postgres::Postgres::shared();
    let url = pg.database();
    let db = url.split(":///").nth(1).and_then(|rest| rest.split('?').next()).expect("name").to_string();
    let s = Store::connect(&url).await.expect("store");
    a_dead_sender_s_claim_is_void(&s, &|statement| {
        let statement = statement.replace("CLAIM_HOST", "substring(claimed_by from position('@' in claimed_by))");
        pg.psql(&db, &statement);
    })
    .await;
}
