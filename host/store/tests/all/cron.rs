//! Scheduled jobs: claimed once per due time across processes, backlogs collapsed, crashed runs
//! reported and never re-run.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use talaria_store::cron::{Claimed, Finish, Job, JobState, RunStatus};
use talaria_store::delivery::{MAX_ATTEMPTS, NewDelivery, cron_key};
use talaria_store::{Error, Store};
use tokio::task::JoinSet;

const HOUR: i64 = 3_600_000;
const TTL: i64 = 60_000;

// The same cases on SQLite and on a real PostgreSQL.
crate::on_both_engines!(
    a_missed_backlog_is_one_run_and_the_next_is_in_the_future,
    a_run_whose_process_died_is_reported_and_not_run_again,
    a_once_job_completes_and_a_repeated_one_stops_at_its_count,
    pausing_a_running_job_keeps_it_paused_after_the_run,
    a_run_by_hand_leaves_the_schedule_alone_and_one_runs_at_a_time,
    jobs_are_found_by_id_prefix_or_name,
    an_answer_the_ledger_gives_up_on_marks_its_run_delivery_failed,
    an_answer_sent_before_its_run_records_its_end_stays_sent,
    a_run_s_history_says_queued_sending_and_sent_as_they_happen,
);

fn hourly(next: i64) -> Job {
    Job {
        name: "hourly".into(),
        prompt: "check".into(),
        schedule_kind: "every".into(),
        deliver: "local".into(),
        enabled: true,
        next_run_at: Some(next),
        creator: "user".into(),
        ..Job::default()
    }
}

fn ok(output: &str) -> Finish {
    Finish { status: RunStatus::Ok, output: output.into(), ..Finish::default() }
}

/// The next whole hour after `now`.
fn next_hour(_: &Job, now: i64) -> Option<i64> {
    Some((now / HOUR + 1) * HOUR)
}

/// How a ticker opens its own store, as a separate process would.
enum Opener {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Opener {
    async fn open(&self) -> Store {
        match self {
            Self::Sqlite(path) => Store::open(path).expect("open"),
            Self::Postgres(url) => Store::connect(url).await.expect("connect"),
        }
    }
}

/// Four tickers, each with its own store (as separate processes have), claim five due jobs at
/// the same moment: every job is claimed once.
///
/// The tickers meet at a blocking barrier, each on a worker thread of its own (SQLite runs
/// inline, without yielding): the runtime needs more than four worker threads.
async fn racing_tickers_claim_a_due_job_once(open: &Opener) {
    let ids: Vec<String> = {
        let s = open.open().await;
        let mut ids = Vec::new();
        for _ in 0..5 {
            ids.push(s.cron_insert(&hourly(HOUR)).await.expect("insert"));
        }
        ids
    };
    let barrier = Arc::new(Barrier::new(4));
    let mut tickers = JoinSet::new();
    for t in 0..4 {
        let s = open.open().await;
        let barrier = Arc::clone(&barrier);
        tickers.spawn(async move {
            barrier.wait();
            let claims = s.cron_claim_due(HOUR + 10, &format!("ticker {t}"), TTL, next_hour).await.expect("claim");
            claims.into_iter().map(|c| c.job.id).collect::<Vec<_>>()
        });
    }
    let mut claimed: Vec<String> = Vec::new();
    while let Some(t) = tickers.join_next().await {
        claimed.extend(t.expect("ticker"));
    }
    claimed.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(claimed, want, "every job claimed, each by one ticker");
    let s = open.open().await;
    for id in &ids {
        assert_eq!(s.cron_runs(id, 10).await.expect("runs").len(), 1);
        let job = s.cron_job(id).await.expect("job");
        assert_eq!((job.state, job.next_run_at), (JobState::Running, Some(2 * HOUR)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 5)]
async fn racing_tickers_on_sqlite_claim_a_due_job_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    racing_tickers_claim_a_due_job_once(&Opener::Sqlite(path)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 5)]
async fn racing_tickers_on_postgresql_claim_a_due_job_once() {
    let url = talaria_test_support::postgres::Postgres::shared().database();
    racing_tickers_claim_a_due_job_once(&Opener::Postgres(url)).await;
}

async fn a_missed_backlog_is_one_run_and_the_next_is_in_the_future(s: &Store) {
    let id = s.cron_insert(&hourly(HOUR)).await.expect("insert");
    // The machine slept for three days.
    let now = 73 * HOUR + 5;
    let claims = s.cron_claim_due(now, "tick", TTL, next_hour).await.expect("claim");
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].due_at, HOUR, "it runs for the time it missed first");
    assert!(s.cron_finish(claims[0].run_id, &claims[0].token, &ok("done"), now + 1).await.expect("finish"));
    assert!(s.cron_claim_due(now + 2, "tick", TTL, next_hour).await.expect("claim").is_empty());
    let job = s.cron_job(&id).await.expect("job");
    assert_eq!((job.state, job.next_run_at, job.repeat_done), (JobState::Scheduled, Some(74 * HOUR), 1));
    assert_eq!((job.last_status, job.last_output.as_deref()), (Some(RunStatus::Ok), Some("done")));
}

async fn a_run_whose_process_died_is_reported_and_not_run_again(s: &Store) {
    let id = s.cron_insert(&hourly(HOUR)).await.expect("insert");
    let claims = s.cron_claim_due(HOUR, "gateway", TTL, next_hour).await.expect("claim");
    assert_eq!(claims.len(), 1);
    // Still ours: nothing to reap before the lease expires.
    assert!(s.cron_reap(HOUR + 1).await.expect("reap").is_empty());
    // Its lease ran out: the process is gone (or stuck on another machine).
    let reaped = s.cron_reap(HOUR + TTL + 1).await.expect("reap");
    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].status, RunStatus::Error);
    let error = reaped[0].error.clone().expect("error");
    assert!(error.starts_with("interrupted: gateway (pid "), "{error}");
    assert!(error.ends_with("it is not run again"), "{error}");
    let job = s.cron_job(&id).await.expect("job");
    assert_eq!(job.state, JobState::Scheduled);
    assert_eq!(job.last_status, Some(RunStatus::Error));
    assert_eq!(job.next_run_at, Some(2 * HOUR), "the missed time is not run again");
    assert!(s.cron_claim_due(HOUR + TTL + 2, "tick", TTL, next_hour).await.expect("claim").is_empty());
    // The dead run's process cannot finish it late.
    assert!(!s.cron_finish(claims[0].run_id, &claims[0].token, &ok("late"), HOUR + TTL + 3).await.expect("finish"));
    assert!(!s.cron_renew(claims[0].run_id, &claims[0].token, HOUR + TTL + 3, TTL).await.expect("renew"));
    assert_eq!(s.cron_runs(&id, 5).await.expect("runs")[0].output, None);
}

async fn a_once_job_completes_and_a_repeated_one_stops_at_its_count(s: &Store) {
    let once = s.cron_insert(&Job { schedule_kind: "once".into(), ..hourly(HOUR) }).await.expect("insert");
    let twice = s.cron_insert(&Job { repeat_times: Some(2), ..hourly(HOUR) }).await.expect("insert");
    for (at, want) in [(HOUR, 2), (2 * HOUR, 1), (3 * HOUR, 0)] {
        let claims = s
            .cron_claim_due(
                at,
                "tick",
                TTL,
                |job, now| if job.schedule_kind == "once" { None } else { next_hour(job, now) },
            )
            .await
            .expect("claim");
        assert_eq!(claims.len(), want, "at {at}");
        for c in claims {
            s.cron_finish(c.run_id, &c.token, &ok("x"), at + 1).await.expect("finish");
        }
    }
    assert_eq!(s.cron_job(&once).await.expect("job").state, JobState::Completed);
    let twice = s.cron_job(&twice).await.expect("job");
    assert_eq!((twice.state, twice.repeat_done), (JobState::Completed, 2));
}

async fn pausing_a_running_job_keeps_it_paused_after_the_run(s: &Store) {
    let id = s.cron_insert(&hourly(HOUR)).await.expect("insert");
    let c = s.cron_claim_due(HOUR, "tick", TTL, next_hour).await.expect("claim").remove(0);
    let mut job = s.cron_job(&id).await.expect("job");
    job.enabled = false;
    s.cron_update(&job).await.expect("pause");
    assert_eq!(s.cron_job(&id).await.expect("job").state, JobState::Running, "its run goes on");
    s.cron_finish(c.run_id, &c.token, &ok("x"), HOUR + 1).await.expect("finish");
    assert_eq!(s.cron_job(&id).await.expect("job").state, JobState::Paused);
    assert!(s.cron_claim_due(5 * HOUR, "tick", TTL, next_hour).await.expect("claim").is_empty());
}

async fn a_run_by_hand_leaves_the_schedule_alone_and_one_runs_at_a_time(s: &Store) {
    let id = s.cron_insert(&Job { repeat_times: Some(1), ..hourly(10 * HOUR) }).await.expect("insert");
    let Claimed::Granted(c) = s.cron_claim_now(&id, HOUR, "cron run", TTL).await.expect("claim") else {
        panic!("granted")
    };
    let Claimed::Busy(run) = s.cron_claim_now(&id, HOUR + 1, "cron run", TTL).await.expect("claim") else {
        panic!("busy")
    };
    assert_eq!((run.id, run.holder.as_str(), run.manual), (c.run_id, "cron run", true));
    assert!(s.cron_claim_due(11 * HOUR, "tick", TTL, next_hour).await.expect("claim").is_empty(), "running already");
    s.cron_finish(c.run_id, &c.token, &ok("by hand"), HOUR + 2).await.expect("finish");
    let job = s.cron_job(&id).await.expect("job");
    assert_eq!((job.state, job.next_run_at, job.repeat_done), (JobState::Scheduled, Some(10 * HOUR), 0));
}

async fn jobs_are_found_by_id_prefix_or_name(s: &Store) {
    let a = s.cron_insert(&Job { name: "inbox".into(), ..hourly(HOUR) }).await.expect("insert");
    s.cron_insert(&Job { name: "backup".into(), ..hourly(HOUR) }).await.expect("insert");
    assert_eq!(s.cron_find(&a).await.expect("id").name, "inbox");
    assert_eq!(s.cron_find(&a[..5]).await.expect("prefix").id, a);
    assert_eq!(s.cron_find("backup").await.expect("name").name, "backup");
    assert_eq!(s.cron_find("BACK").await.expect("the start of a name").name, "backup");
    assert!(matches!(s.cron_find("nothing").await, Err(Error::JobNotFound { .. })));
    s.cron_insert(&Job { name: "inbox".into(), ..hourly(HOUR) }).await.expect("insert");
    let Err(e @ Error::AmbiguousJob { .. }) = s.cron_find("inbox").await else { panic!("ambiguous") };
    assert!(e.to_string().contains("(inbox)"), "{e}");
    assert!(s.cron_remove(&a).await.expect("remove"));
    assert!(!s.cron_remove(&a).await.expect("remove again"));
}

async fn an_answer_the_ledger_gives_up_on_marks_its_run_delivery_failed(s: &Store) {
    let id = s.cron_insert(&hourly(HOUR)).await.expect("insert");
    let c = s.cron_claim_due(HOUR, "tick", TTL, next_hour).await.expect("claim").remove(0);
    let delivery = Finish { delivery: Some("queued".into()), ..ok("summary") };
    s.cron_finish(c.run_id, &c.token, &delivery, HOUR + 1).await.expect("finish");
    let key = cron_key(c.run_id, 0);
    let new = NewDelivery { platform: "telegram", chat_id: "42", thread_id: None, body: "{}", key: &key };
    let d = s.delivery_enqueue(&new).await.expect("enqueue");
    for _ in 0..MAX_ATTEMPTS {
        s.delivery_failed(d, "HTTP 403 bot was blocked").await.expect("fail");
    }
    let run = s.cron_runs(&id, 1).await.expect("runs").remove(0);
    assert_eq!(run.status, RunStatus::DeliveryFailed);
    assert_eq!(run.delivery.as_deref(), Some("failed: HTTP 403 bot was blocked"));
    let job = s.cron_job(&id).await.expect("job");
    assert_eq!(job.last_status, Some(RunStatus::DeliveryFailed));
}

async fn run_delivery(s: &Store, job: &str) -> Option<String> {
    s.cron_runs(job, 1).await.expect("runs").remove(0).delivery
}

/// A run's answer: `queued` when the run ends, `sending` from its claim until its last part
/// went (an answer rendered into parts is not sent until each part is), then `sent`.
async fn a_run_s_history_says_queued_sending_and_sent_as_they_happen(s: &Store) {
    let id = s.cron_insert(&hourly(HOUR)).await.expect("insert");
    let c = s.cron_claim_due(HOUR, "tick", TTL, next_hour).await.expect("claim").remove(0);
    let key = cron_key(c.run_id, 0);
    let markdown = s
        .delivery_enqueue(&NewDelivery { platform: "telegram", chat_id: "42", thread_id: None, body: "{}", key: &key })
        .await
        .expect("enqueue");
    let queued = Finish { delivery: Some("queued".into()), ..ok("summary") };
    s.cron_finish(c.run_id, &c.token, &queued, HOUR + 1).await.expect("finish");
    assert_eq!(run_delivery(s, &id).await.as_deref(), Some("queued"));
    let hold = std::time::Duration::from_secs(60);
    assert_eq!(s.deliveries_claim("telegram", 10, hold).await.expect("claim").len(), 1);
    assert_eq!(run_delivery(s, &id).await.as_deref(), Some("sending"), "claimed");
    // Rendered into two parts: the markdown entry is done, the parts are not sent yet.
    let parts: Vec<String> = (0..2).map(|i| format!("{key}:{i}")).collect();
    for part in &parts {
        s.delivery_enqueue(&NewDelivery {
            platform: "telegram",
            chat_id: "42",
            thread_id: None,
            body: "{}",
            key: part,
        })
        .await
        .expect("part");
    }
    s.delivery_sent(markdown, "rendered into 2 parts").await.expect("rendered");
    assert_eq!(run_delivery(s, &id).await.as_deref(), Some("sending"), "rendered, not sent");
    let first = s.deliveries_claim("telegram", 10, hold).await.expect("claim").remove(0);
    s.delivery_sent(first.id, "m-1").await.expect("sent");
    assert_eq!(run_delivery(s, &id).await.as_deref(), Some("sending"), "one part of two");
    let second = s.deliveries_claim("telegram", 10, hold).await.expect("claim").remove(0);
    s.delivery_sent(second.id, "m-2").await.expect("sent");
    assert_eq!(run_delivery(s, &id).await.as_deref(), Some("sent"));
}

/// The gateway's sender may send a run's answer before the run records its end (it was queued
/// and the sender woken first): the run still says it was sent, not queued.
async fn an_answer_sent_before_its_run_records_its_end_stays_sent(s: &Store) {
    let id = s.cron_insert(&hourly(HOUR)).await.expect("insert");
    let c = s.cron_claim_due(HOUR, "tick", TTL, next_hour).await.expect("claim").remove(0);
    let key = cron_key(c.run_id, 0);
    let new = NewDelivery { platform: "telegram", chat_id: "42", thread_id: None, body: "{}", key: &key };
    let d = s.delivery_enqueue(&new).await.expect("enqueue");
    s.delivery_sent(d, "m-1").await.expect("sent");
    let queued = Finish { delivery: Some("queued".into()), ..ok("summary") };
    s.cron_finish(c.run_id, &c.token, &queued, HOUR + 1).await.expect("finish");
    let run = s.cron_runs(&id, 1).await.expect("runs").remove(0);
    assert_eq!((run.status, run.delivery.as_deref()), (RunStatus::Ok, Some("sent")));
}
