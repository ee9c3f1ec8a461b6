//! Scheduled jobs (table `cron_jobs`) and their runs (table `cron_runs`).
//!
//! The store knows nothing of schedules: whoever claims due jobs says when each runs next
//! ([`Store::cron_claim_due`] takes that as a function). What it guarantees:
//!
//! 1. **Once per due time.** A due job is claimed in one `BEGIN IMMEDIATE` transaction that also
//!    moves its next run on and writes a run row unique per (job, due time): two tickers racing
//!    (two gateways, a gateway and `talaria cron tick`) get one claim between them.
//! 2. **A backlog is one run.** The claimer computes the next run after *now*, so a job missed
//!    for days (the machine slept) runs once, not once per missed time.
//! 3. **A crashed run is reported, not run again.** A run holds a lease (renewed while it works);
//!    when its process is gone (this machine) or the lease expired (any machine),
//!    [`Store::cron_reap`] marks it `interrupted` and returns it so it can be reported. Its job's
//!    next run was already moved on when it was claimed.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use talaria_store::Store;
//! use talaria_store::cron::{Finish, Job, RunStatus};
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(&dir.path().join("state.db"))?;
//! let job = Job { name: "inbox".into(), enabled: true, next_run_at: Some(1_000), ..Job::default() };
//! let id = store.cron_insert(&job).await?;
//! // Every hour: the claimer says when it runs next.
//! let claims = store.cron_claim_due(5_000, "tick", 60_000, |_job, now| Some(now + 3_600_000)).await?;
//! assert_eq!((claims.len(), claims[0].due_at), (1, 1_000));
//! assert!(store.cron_claim_due(5_000, "tick", 60_000, |_, now| Some(now)).await?.is_empty(), "claimed once");
//! let finish = Finish { status: RunStatus::Ok, output: "3 new mails".into(), ..Finish::default() };
//! store.cron_finish(claims[0].run_id, &claims[0].token, &finish, 6_000).await?;
//! let job = store.cron_job(&id).await?;
//! assert_eq!((job.last_status, job.next_run_at), (Some(RunStatus::Ok), Some(3_605_000)));
//! # Ok(())
//! # }
//! ```

use crate::{Engine, Error, Result, Store};

/// Whether a job waits for its time, is paused, runs now, or has run its last time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobState {
    #[default]
    Scheduled,
    Paused,
    Running,
    Completed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Paused => "paused",
            Self::Running => "running",
            Self::Completed => "completed",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "scheduled" => Self::Scheduled,
            "paused" => Self::Paused,
            "running" => Self::Running,
            "completed" => Self::Completed,
            other => return Err(Error::Corrupt { what: format!("a cron job in the unknown state `{other}`") }),
        })
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunStatus {
    /// Still running (or its process died and nobody has noticed yet).
    #[default]
    Running,
    /// It answered, and the answer was delivered (or needed no delivery).
    Ok,
    /// The agent failed, or the run was interrupted.
    Error,
    /// It answered, but the answer could not be delivered.
    DeliveryFailed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Ok => "ok",
            Self::Error => "error",
            Self::DeliveryFailed => "delivery_failed",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "running" => Self::Running,
            "ok" => Self::Ok,
            "error" => Self::Error,
            "delivery_failed" => Self::DeliveryFailed,
            other => return Err(Error::Corrupt { what: format!("a cron run with the unknown status `{other}`") }),
        })
    }
}

/// A scheduled job. Times are milliseconds since the Unix epoch. The schedule and the delivery
/// target are kept as their owners (talaria-cron) write them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Job {
    /// Eight hex digits, given by [`Store::cron_insert`].
    pub id: String,
    pub name: String,
    pub prompt: String,
    pub schedule_kind: String,
    pub schedule_expr: String,
    pub schedule_display: String,
    /// Where answers go: `origin`, `local`, `<account>`, `<account>:<chat>[:<thread>]`.
    pub deliver: String,
    /// The chat the job was made from (`<account>:<chat>[:<thread>]`), if any.
    pub origin: Option<String>,
    /// Runs wanted in all (`None`: until removed) and done so far.
    pub repeat_times: Option<i64>,
    pub repeat_done: i64,
    /// False: paused (note that `Job::default()` is paused).
    pub enabled: bool,
    pub state: JobState,
    pub next_run_at: Option<i64>,
    pub last_run_at: Option<i64>,
    pub last_status: Option<RunStatus>,
    pub last_output: Option<String>,
    pub last_error: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    /// Toolsets its runs get (`None`: the configured defaults).
    pub toolsets: Option<Vec<String>>,
    pub max_turns: Option<i64>,
    pub timeout_secs: Option<i64>,
    pub workspace: Option<String>,
    /// Approval keys the user allowed its runs (`rm-recursive`, `net:api.example.com`).
    pub allow: Vec<String>,
    /// Who made it: `user` (the command line), or the chat it was made from
    /// (`chat:ACCOUNT:CHAT[:THREAD]`).
    pub creator: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One run of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub id: i64,
    pub job_id: String,
    /// The time it ran for (its schedule's time, or when `cron run` asked).
    pub due_at: i64,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub status: RunStatus,
    /// Started by hand (`talaria cron run`), outside the schedule.
    pub manual: bool,
    pub output: Option<String>,
    pub error: Option<String>,
    /// How the answer went out: `sent`, `queued`, `local`, `silent`, or `failed: ...`.
    pub delivery: Option<String>,
    pub session_id: Option<String>,
    pub pid: u32,
    pub host: String,
    pub holder: String,
}

/// A run claimed by this process: do it, renew its lease meanwhile, then finish it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub job: Job,
    pub run_id: i64,
    pub token: String,
    pub due_at: i64,
}

/// The answer to [`Store::cron_claim_now`].
#[derive(Debug, Clone)]
pub enum Claimed {
    Granted(Box<Claim>),
    /// The job runs already, in this run.
    Busy(Box<Run>),
}

/// How a run ended, for [`Store::cron_finish`].
#[derive(Debug, Clone, Default)]
pub struct Finish {
    pub status: RunStatus,
    pub output: String,
    pub error: Option<String>,
    pub delivery: Option<String>,
    pub session_id: Option<String>,
}

pub(crate) const JOB_COLUMNS: &str =
    "id, name, prompt, schedule_kind, schedule_expr, schedule_display, deliver, origin,
    repeat_times, repeat_done, enabled, state, next_run_at, last_run_at, last_status, last_output, last_error,
    model, provider, toolsets, max_turns, timeout_secs, workspace, allow, creator, created_at, updated_at";

pub(crate) const RUN_COLUMNS: &str = "id, job_id, due_at, started_at, finished_at, status, manual, output, error, delivery, session_id, pid, host, holder";

/// A job row as read: the job, then its state, last status, toolsets and allowances as stored.
pub(crate) type RawJob = (Job, String, Option<String>, Option<String>, Option<String>);

/// A job row with its enums and lists read.
pub(crate) fn finish_job(raw: RawJob) -> Result<Job> {
    let (mut job, state, status, toolsets, allow) = raw;
    job.state = JobState::parse(&state)?;
    job.last_status = status.as_deref().map(RunStatus::parse).transpose()?;
    job.toolsets = toolsets.as_deref().map(list).transpose()?;
    job.allow = allow.as_deref().map(list).transpose()?.unwrap_or_default();
    Ok(job)
}

fn list(json: &str) -> Result<Vec<String>> {
    serde_json::from_str(json).map_err(|e| Error::Corrupt { what: format!("a cron job's list `{json}` ({e})") })
}

pub(crate) fn to_json(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".into())
}

pub(crate) fn finish_run(raw: (Run, String)) -> Result<Run> {
    let (mut run, status) = raw;
    run.status = RunStatus::parse(&status)?;
    Ok(run)
}

pub(crate) fn new_token() -> String {
    format!("{}-{:016x}", std::process::id(), fastrand::u64(..))
}

/// The state a job is in when none of its runs is running.
pub(crate) fn resting_state(job: &Job) -> JobState {
    if job.repeat_times.is_some_and(|times| job.repeat_done >= times) {
        JobState::Completed
    } else if !job.enabled {
        JobState::Paused
    } else if job.next_run_at.is_none() {
        JobState::Completed
    } else {
        JobState::Scheduled
    }
}

impl Store {
    /// Save a new job (its `id`, state and times are given here); returns its id.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn cron_insert(&self, job: &Job) -> Result<String> {
        let now = crate::now_ms();
        let id = match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_insert(job, now)?,
            Engine::Postgres(pg) => pg.cron_insert(job, now).await?,
        };
        // A gateway ticking elsewhere looks at once.
        self.hint(crate::notice::JOB_CHANGED, &id).await;
        Ok(id)
    }

    /// Save what can be edited of `job` (found by its id): name, prompt, schedule, delivery,
    /// repeats, model, toolsets, limits, workspace, allowances, whether it is enabled and its
    /// next run. A running job keeps its state until its run ends.
    ///
    /// # Errors
    /// No such job ([`Error::JobNotFound`]), or the database cannot be written.
    pub async fn cron_update(&self, job: &Job) -> Result<()> {
        let now = crate::now_ms();
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_update(job, now)?,
            Engine::Postgres(pg) => pg.cron_update(job, now).await?,
        }
        self.hint(crate::notice::JOB_CHANGED, &job.id).await;
        Ok(())
    }

    /// The job with this id.
    ///
    /// # Errors
    /// No such job, or the database cannot be read.
    pub async fn cron_job(&self, id: &str) -> Result<Job> {
        let found = match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_job(id)?,
            Engine::Postgres(pg) => pg.cron_job(id).await?,
        };
        found.ok_or_else(|| Error::JobNotFound { key: id.to_string() })
    }

    /// The job `key` names: its id, a unique prefix of its id, its name, or the unique start of
    /// a name (in any letter case).
    ///
    /// # Errors
    /// None or several match, or the database cannot be read.
    pub async fn cron_find(&self, key: &str) -> Result<Job> {
        let key = key.trim();
        let all = self.cron_jobs().await?;
        if let Some(job) = all.iter().find(|j| j.id == key) {
            return Ok(job.clone());
        }
        let mut matches: Vec<&Job> =
            all.iter().filter(|j| (!key.is_empty() && j.id.starts_with(key)) || j.name == key).collect();
        if matches.is_empty() && !key.is_empty() {
            // The start of a name, in any letter case.
            let lower = key.to_lowercase();
            matches = all.iter().filter(|j| j.name.to_lowercase().starts_with(&lower)).collect();
        }
        match matches.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(Error::JobNotFound { key: key.to_string() }),
            many => {
                Err(Error::AmbiguousJob { candidates: many.iter().map(|j| format!("{} ({})", j.id, j.name)).collect() })
            }
        }
    }

    /// Every job, by next run (paused and completed ones last).
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn cron_jobs(&self) -> Result<Vec<Job>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_jobs(),
            Engine::Postgres(pg) => pg.cron_jobs().await,
        }
    }

    /// Remove a job and its history. False when there was none.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn cron_remove(&self, id: &str) -> Result<bool> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_remove(id),
            Engine::Postgres(pg) => pg.cron_remove(id).await,
        }
    }

    /// Claim every job due at `now` (enabled, waiting, next run not after `now`): each gets a
    /// run leased for `ttl_ms`, and its next run becomes `next(job, now)` (`None`: none). A job
    /// another process claimed first is not returned. [`Store::cron_claim_due_by`] when what is
    /// due is judged by another clock than the lease's.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn cron_claim_due(
        &self,
        now: i64,
        holder: &str,
        ttl_ms: i64,
        next: impl Fn(&Job, i64) -> Option<i64>,
    ) -> Result<Vec<Claim>> {
        self.cron_claim_due_by(now, now, holder, ttl_ms, next).await
    }

    /// [`Store::cron_claim_due`] with the jobs due by `due_by` (and their next runs after it),
    /// while the runs start and are leased at `now`: a tick "as if it were" another time.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn cron_claim_due_by(
        &self,
        due_by: i64,
        now: i64,
        holder: &str,
        ttl_ms: i64,
        next: impl Fn(&Job, i64) -> Option<i64>,
    ) -> Result<Vec<Claim>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_claim_due_by(due_by, now, holder, ttl_ms, next),
            Engine::Postgres(pg) => pg.cron_claim_due_by(due_by, now, holder, ttl_ms, next).await,
        }
    }

    /// Claim a run of job `id` now, outside its schedule (`talaria cron run`): its next run
    /// stays as it is and the run does not count towards its repeats.
    ///
    /// # Errors
    /// No such job, or the database cannot be written.
    pub async fn cron_claim_now(&self, id: &str, now: i64, holder: &str, ttl_ms: i64) -> Result<Claimed> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_claim_now(id, now, holder, ttl_ms),
            Engine::Postgres(pg) => pg.cron_claim_now(id, now, holder, ttl_ms).await,
        }
    }

    /// Extend the lease of run `run_id` to `now + ttl_ms`. False when it is no longer ours
    /// (reaped as interrupted).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn cron_renew(&self, run_id: i64, token: &str, now: i64, ttl_ms: i64) -> Result<bool> {
        let until = now.saturating_add(ttl_ms);
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_renew(run_id, token, until),
            Engine::Postgres(pg) => pg.cron_renew(run_id, token, until).await,
        }
    }

    /// Record how run `run_id` ended, and its job's last status. False when the run is no
    /// longer ours (it was reaped as interrupted meanwhile; nothing is changed).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn cron_finish(&self, run_id: i64, token: &str, finish: &Finish, now: i64) -> Result<bool> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_finish(run_id, token, finish, now),
            Engine::Postgres(pg) => pg.cron_finish(run_id, token, finish, now).await,
        }
    }

    /// Mark runs whose process is gone (this machine) or whose lease expired (any machine) as
    /// interrupted, and return them: they are reported, never run again.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn cron_reap(&self, now: i64) -> Result<Vec<Run>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_reap(now),
            Engine::Postgres(pg) => pg.cron_reap(now).await,
        }
    }

    /// The last `limit` runs of job `id`, newest first.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn cron_runs(&self, id: &str, limit: usize) -> Result<Vec<Run>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_runs(id, limit),
            Engine::Postgres(pg) => pg.cron_runs(id, limit).await,
        }
    }

    /// The run with this id.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn cron_run(&self, run_id: i64) -> Result<Option<Run>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_run(run_id),
            Engine::Postgres(pg) => pg.cron_run(run_id).await,
        }
    }

    /// A run's answer could not be delivered after all (the ledger gave up on it later).
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn cron_delivery_failed(&self, run_id: i64, error: &str) -> Result<()> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.cron_delivery_failed(run_id, error),
            Engine::Postgres(pg) => pg.cron_delivery_failed(run_id, error).await,
        }
    }
}
