//! One PostgreSQL behind several homes (standing for gateway processes on several machines):
//! what one writes, the others read; nothing goes to a local `state.db`.

use std::time::{Duration, Instant};

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

/// A new database on `pg`: its URL, and its name for [`Postgres::psql`].
fn new_database(pg: &Postgres) -> (String, String) {
    let url = pg.database();
    let name = url.split(":///").nth(1).and_then(|rest| rest.split('?').next()).expect("database name").to_string();
    (url, name)
}

/// A POST that may fail (the process behind `addr` was killed): the status and body, or `None`
/// when the connection failed or broke before an answer.
fn try_post(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Option<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(150))).ok()?;
    let mut head =
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body).ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

/// Three gateway processes (three homes, as on three machines) share one PostgreSQL, one
/// Telegram bot and one webhook route: 100 Telegram chats and 100 webhook deliveries, the
/// webhooks spread over the three listeners. The process polling the bot is killed while turns
/// run: another takes over polling, the chats it was answering are answered by the others,
/// every message is answered exactly once and in its own chat, nothing committed is lost, and a
/// job due while the three tick runs once.
#[test]
fn three_gateways_on_one_postgresql_answer_every_chat_once_though_one_dies_mid_turn() {
    use std::collections::BTreeMap;

    use talaria_test_support::telegram::TelegramFake;

    use crate::gateway::{Gateway, TOKEN, free_port};

    const CHATS: i64 = 100;
    const HOOKS: usize = 100;
    const LIMIT: Duration = Duration::from_secs(180);
    let pg = Postgres::shared();
    let (url, db) = new_database(pg);
    let fake = TelegramFake::start(TOKEN);
    // Each answer streams over about a second, so the kill finds turns running.
    let mock = MockLlm::start(Script::auto().auto_paced(120));

    // A job due now, before any gateway starts: the three tick it at once.
    let store = talaria_test_support::wait(talaria_store::Store::connect(&url)).expect("store");
    let due_job = |prompt: &str| {
        let now = jiff::Timestamp::now().as_millisecond();
        talaria_test_support::wait(store.cron_insert(&talaria_store::cron::Job {
            name: prompt.into(),
            prompt: format!("echo {prompt}"),
            schedule_kind: "every".into(),
            schedule_expr: format!("PT1H@{}", jiff::Timestamp::now()),
            schedule_display: "every 1h".into(),
            deliver: "local".into(),
            enabled: true,
            next_run_at: Some(now - 1_000),
            creator: "user".into(),
            ..talaria_store::cron::Job::default()
        }))
        .expect("insert the job")
    };
    let job = due_job("the job ran");

    let homes: Vec<Talaria> = (0..3).map(|_| Talaria::new()).collect();
    let addrs: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    for (t, addr) in homes.iter().zip(&addrs) {
        let extra = format!(
            "[store]\nurl = \"{url}\"\n\n[memory]\nprovider = \"none\"\n\n\
             [gateway]\nworkspaces = \"{}\"\nlisten = \"{addr}\"\nallow_all = true\n\
             [gateway.platforms.telegram]\nbase_url = \"{}\"\n\
             [gateway.platforms.hooks]\nplugin = \"webhook\"\n\
             [gateway.platforms.hooks.routes.ask]\nauth = \"token\"\nheader = \"X-Token\"\nsecret = \"HOOK_TOKEN\"\nprompt = \"{{text}}\"\n",
            t.workspace.path().join("chats").display(),
            fake.base_url()
        );
        t.configure(&mock, "", &extra);
        std::fs::write(t.home.path().join(".env"), format!("TELEGRAM_BOT_TOKEN={TOKEN}\nHOOK_TOKEN=h00k\n"))
            .expect(".env");
    }
    let mut gateways: Vec<Gateway> = homes.iter().map(Gateway::start).collect();
    fake.wait_polling(LIMIT);
    let start = Instant::now();
    for addr in &addrs {
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(start.elapsed() < LIMIT, "a listener never came up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    for user in 1..=CHATS {
        fake.dm(2000 + user, &format!("user {user}"), &format!("echo answer for chat {user}"));
    }
    // Webhook deliveries from ten senders, each retried at the next listener when the one it
    // reached dies (with the same delivery id: it is one delivery).
    let hooks = std::thread::scope(|scope| {
        let senders: Vec<_> = (0..10)
            .map(|sender| {
                let addrs = &addrs;
                scope.spawn(move || {
                    let mut replies = BTreeMap::new();
                    for n in (sender..HOOKS).step_by(10) {
                        let body = serde_json::json!({ "text": format!("echo answer for hook {n}") }).to_string();
                        let id = format!("hook-{n}");
                        let headers = [("X-Token", "h00k"), ("X-Delivery-Id", id.as_str())];
                        let mut at = n % addrs.len();
                        let reply = loop {
                            match try_post(&addrs[at], "/webhooks/hooks/ask", &headers, body.as_bytes()) {
                                Some((200, body)) => break body,
                                Some((status, body)) if status != 502 && status != 503 => {
                                    panic!("hook {n}: HTTP {status}: {body}")
                                }
                                _ => at = (at + 1) % addrs.len(),
                            }
                        };
                        replies.insert(n, reply);
                    }
                    replies
                })
            })
            .collect();

        // Kill the process polling the bot while the chats' turns run.
        let poller = loop {
            let pid = pg.psql(&db, "SELECT pid FROM session_leases WHERE session_id LIKE 'gateway:telegram:%'");
            if let Ok(pid) = pid.trim().parse::<u32>() {
                break pid;
            }
            assert!(start.elapsed() < LIMIT, "nobody polls the bot");
            std::thread::sleep(Duration::from_millis(20));
        };
        let answered = |fake: &TelegramFake| {
            (1..=CHATS).filter(|u| fake.chat(2000 + u).iter().any(|m| m.text == format!("answer for chat {u}"))).count()
        };
        while mock.requests().len() < 60 {
            assert!(start.elapsed() < LIMIT, "the turns never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        let killed = gateways.iter().position(|g| g.pid() == poller).expect("the poller is one of ours");
        // A message the platform takes in the milliseconds before the process can write that
        // down is sent again by the next (no platform can be asked whether a message arrived;
        // the next process warns, see the test of a streamed send cut by a kill). The kill lands
        // outside that moment: the platform takes no new message for a while around it, and
        // whatever it took before was written down long before.
        fake.fail_sends(usize::MAX);
        std::thread::sleep(Duration::from_millis(500));
        gateways[killed].kill();
        fake.fail_sends(0);
        let at_kill = answered(&fake);
        assert!(at_kill < usize::try_from(CHATS).expect("count"), "every chat was answered before the kill");

        // Every chat is answered, by the two left.
        loop {
            if answered(&fake) == usize::try_from(CHATS).expect("count") {
                break;
            }
            assert!(
                start.elapsed() < LIMIT,
                "{} of {CHATS} chats answered:\n{}",
                answered(&fake),
                gateways.iter().map(Gateway::log).collect::<Vec<_>>().join("\n----\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut all = BTreeMap::new();
        for sender in senders {
            all.extend(sender.join().expect("a webhook sender failed"));
        }
        (all, killed, at_kill)
    });
    let (replies, killed, at_kill) = hooks;

    // Each chat: one message from the bot, its own answer (a streamed one edited into it).
    for user in 1..=CHATS {
        let texts: Vec<String> = fake.chat(2000 + user).into_iter().map(|m| m.text).collect();
        assert_eq!(texts, [format!("answer for chat {user}")], "chat {user}");
    }
    assert_eq!(fake.all_shown().len(), usize::try_from(CHATS).expect("count"), "replies crossed or doubled");
    assert_eq!(replies.len(), HOOKS);
    for (n, reply) in &replies {
        let reply: serde_json::Value = serde_json::from_str(reply).expect("json");
        assert_eq!(reply["reply"], format!("answer for hook {n}"), "hook {n}");
    }
    let survivors: String = gateways.iter().enumerate().filter(|(i, _)| *i != killed).map(|(_, g)| g.log()).collect();
    assert!(survivors.contains("this process polls the bot now"), "nobody took over polling:\n{survivors}");
    // The kill came mid-turn: the others finished turns it had started.
    let finished = survivors.matches("left this turn half done").count()
        + survivors.matches("a dead process answered").count()
        + survivors.matches("a dead process stored nothing of this turn").count();
    assert!(finished > 0, "no turn was left half done by the kill:\n{survivors}");
    eprintln!("{at_kill} of {CHATS} chats were answered at the kill; {finished} turns were finished by the others");

    // `gateway status`, anywhere, shows the two left: one polls the bot, the other stands by.
    // (The killed one's last status counts as gone ten seconds after it was written.)
    let status = loop {
        let status = homes[(killed + 1) % 3].ok(&["gateway", "status"]);
        if status.contains("gateway running (2 processes sharing the store)") {
            break status;
        }
        assert!(start.elapsed() < LIMIT, "{status}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status.matches("telegram: connected as").count(), 2, "{status}");
    assert_eq!(status.matches("; standing by while pid").count(), 1, "{status}");

    // Nothing committed was lost or doubled: every message is in its session once, answered
    // once, and the inbox holds nothing open.
    let count = |sql: &str| pg.psql(&db, sql).trim().parse::<i64>().expect("a count");
    let messages = i64::try_from(HOOKS).expect("count") + CHATS + 1;
    // (The job's run has its own session: one more message each way.)
    assert_eq!(count("SELECT count(*) FROM messages WHERE active AND role = 'user'"), messages);
    assert_eq!(count("SELECT count(DISTINCT content) FROM messages WHERE active AND role = 'user'"), messages);
    assert_eq!(count("SELECT count(*) FROM messages WHERE active AND role = 'assistant'"), messages);
    assert_eq!(count("SELECT count(*) FROM inbox WHERE state <> 'done'"), 0);
    assert_eq!(count(&format!("SELECT count(*) FROM cron_runs WHERE job_id = '{job}'")), 1, "the job ran once");

    // A job added by another process (this test) is heard of at once, not at the next minute's
    // tick, and run once by the two left.
    let added = Instant::now();
    let later = due_job("added while they run");
    while talaria_test_support::wait(store.cron_runs(&later, 10)).expect("runs").is_empty() {
        assert!(added.elapsed() < Duration::from_secs(30), "the added job did not run");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("the added job started {} ms after it was added", added.elapsed().as_millis());
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        talaria_test_support::wait(store.cron_runs(&later, 10)).expect("runs").len(),
        1,
        "the added job ran once"
    );
    for t in &homes {
        assert!(!t.home.path().join("state.db").exists(), "nothing is kept locally");
    }
}

/// Whether child process `pid` still runs (one that exited is a zombie until waited for).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with(['Z', 'X'])))
}

/// One gateway on a PostgreSQL server that its operator restarts while the gateway works: ten
/// chats write in rounds, the server is stopped while their turns run, stays down for a few
/// seconds while more messages come, and is started again. Every message is answered once, with
/// its own answer, in its own chat, and the gateway runs on.
#[test]
fn a_postgres_restart_mid_work_loses_no_message_and_sends_none_twice() {
    use std::collections::BTreeMap;

    use talaria_test_support::telegram::TelegramFake;

    use crate::gateway::{Gateway, TOKEN, WAIT, setup};

    const CHATS: i64 = 10;
    /// Rounds written before the stop, while the server is down, and after it is back.
    const BEFORE: u32 = 2;
    const DOWN: u32 = 2;
    const AFTER: u32 = 1;
    const ROUNDS: u32 = BEFORE + DOWN + AFTER;
    /// How long the server stays down: the outage itself, not a wait for anything.
    const DOWN_FOR: Duration = Duration::from_secs(4);
    const LIMIT: Duration = Duration::from_secs(90);
    let pg = Postgres::private();
    let (url, db) = new_database(&pg);
    let fake = TelegramFake::start(TOKEN);
    // Each answer streams over about half a second, so the stop finds turns running.
    let mock = MockLlm::start(Script::auto().auto_paced(120));
    // (The store's and memory's tables go after the Telegram account's.)
    let store = format!("\n[store]\nurl = \"{url}\"\n\n[memory]\nprovider = \"none\"\n");
    let t = setup(&mock, &fake, "allow_all = true\nbusy_input = \"queue\"", &store);
    let gateway = Gateway::start(&t);
    fake.wait_polling(WAIT);

    let user = |chat: i64| 3000 + chat;
    let answer = |chat: i64, round: u32| format!("chat {chat} says {round}");
    let write = |round: u32| {
        for chat in 1..=CHATS {
            fake.dm(user(chat), &format!("user {chat}"), &format!("echo {}", answer(chat, round)));
        }
    };
    // What each chat shows: the texts of the bot's messages (a streamed one as edited last).
    let shown = || -> BTreeMap<i64, Vec<String>> {
        (1..=CHATS).map(|chat| (chat, fake.chat(user(chat)).into_iter().map(|m| m.text).collect())).collect()
    };
    // How many of the messages of rounds `1..=rounds` have their answer shown.
    let answered = |rounds: u32| -> u32 {
        let shown = shown();
        (1..=CHATS)
            .map(|chat| u32::try_from((1..=rounds).filter(|&r| shown[&chat].contains(&answer(chat, r))).count()))
            .map(|n| n.expect("count"))
            .sum()
    };
    let start = Instant::now();
    let until = |what: &str, done: &dyn Fn() -> bool| {
        while !done() {
            assert!(
                start.elapsed() < LIMIT,
                "{what} within {LIMIT:?} (the gateway {}); the inbox holds (message, state):\n{}the chats show {:#?}",
                if running(gateway.pid()) { "runs" } else { "exited" },
                pg.psql(&db, "SELECT message_id, state FROM inbox ORDER BY id"),
                shown()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    for round in 1..=BEFORE {
        write(round);
    }
    // The server goes while the chats' first turns run and their next messages wait.
    until("the turns started", &|| mock.requests().len() >= usize::try_from(CHATS).expect("count"));
    pg.stop();
    let at_stop = answered(BEFORE);
    let before = BEFORE * u32::try_from(CHATS).expect("count");
    assert!(at_stop < before, "every message was answered before the stop");
    for round in BEFORE + 1..=BEFORE + DOWN {
        write(round);
        std::thread::sleep(DOWN_FOR / DOWN);
    }
    let taken_while_down = fake.unconfirmed() == 0;
    pg.start();
    for round in BEFORE + DOWN + 1..=ROUNDS {
        write(round);
    }

    let all = ROUNDS * u32::try_from(CHATS).expect("count");
    until("every message was answered", &|| answered(ROUNDS) == all);
    // Settled: nothing is left open in the inbox or waiting in the ledger (a reply sent twice
    // would have been sent by now).
    let count = |sql: &str| pg.psql(&db, sql).trim().parse::<i64>().expect("a count");
    until("the inbox and the ledger settled", &|| {
        count("SELECT count(*) FROM inbox WHERE state <> 'done'") == 0
            && count("SELECT count(*) FROM deliveries WHERE state = 'pending'") == 0
    });
    eprintln!(
        "{at_stop} of {before} messages were answered at the stop; the gateway {} the messages written while the \
         server was down; all {all} answered {:.1} s after the first",
        if taken_while_down { "took" } else { "had not taken" },
        start.elapsed().as_secs_f32()
    );

    // Each chat: one message from the bot per message written, each its own answer.
    for (chat, mut texts) in shown() {
        texts.sort();
        let mut expected: Vec<String> = (1..=ROUNDS).map(|r| answer(chat, r)).collect();
        expected.sort();
        assert_eq!(texts, expected, "chat {chat}: each message answered once, by its own answer");
    }
    assert_eq!(fake.all_shown().len(), usize::try_from(all).expect("count"), "replies went to other chats");
    // Nothing committed was lost or doubled: every message is in its session once, answered once.
    let messages = i64::from(all);
    assert_eq!(count("SELECT count(*) FROM messages WHERE active AND role = 'user'"), messages);
    assert_eq!(count("SELECT count(DISTINCT content) FROM messages WHERE active AND role = 'user'"), messages);
    assert_eq!(count("SELECT count(*) FROM messages WHERE active AND role = 'assistant'"), messages);
    assert_eq!(count("SELECT count(*) FROM deliveries WHERE state <> 'sent'"), 0, "a reply was given up");
    assert!(running(gateway.pid()), "the gateway exited:\n{}", gateway.log());
}
