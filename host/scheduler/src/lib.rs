//! Scheduled jobs, run: the front door that starts turns with nobody there. The gateway ticks
//! every minute while `talaria gateway run` runs ([`Runner::serve`]: and when a job is added or
//! changed, in this process or another sharing the store); `talaria cron tick` ticks once for
//! people who prefer the system's cron or a systemd timer ([`Runner::tick`]); `talaria cron run`
//! runs one job now ([`Runner::run_now`]). All of them go through a [`Runner`]:
//!
//! 1. Runs whose process died are reaped from the store and reported to their job's target,
//!    never run again ([`talaria_core::store::cron`] moved their job on when they were claimed).
//! 2. Due jobs are claimed in the store (once per due time, whoever else ticks) and run at
//!    once, each a fresh conversation of the agent service: source and platform `cron`, no
//!    history, the job's toolsets without the `cronjob` tool, nobody to ask (dangerous commands
//!    and new hosts are denied unless the job was allowed them), a deadline.
//! 3. The answer is kept (the run's history, and a file under `cron/output/` in the home) and
//!    delivered: nowhere more for `local`, else to a chat, through the [`Courier`] the runner
//!    was given. An answer starting with `[SILENT]` is kept but not delivered; a failed run is
//!    reported where its answer would go.
//!
//! The runner stands on `talaria-core` (each run a conversation of [`Host::start`]),
//! `talaria-cron` (schedules, targets) and the store's job records; it knows nothing of chat
//! platforms, and no other front door. Sending to a chat is the gateway's job, behind the
//! seam `talaria-cron` draws ([`Courier`]): `talaria_gateway::serve::Ledger` is the courier
//! that writes an answer to the gateway's delivery ledger and has it sent (by the gateway
//! running in this process, a gateway running elsewhere, or the account's adapter started here
//! for the send). The gateway does not depend on this crate either: `talaria gateway run`
//! (host/cli/src/gateway.rs) hands the gateway a runner to tick beside it
//! (`talaria_gateway::serve::Options::scheduler`), and the gateway gives the runner its
//! courier.
//!
//! ```no_run
//! use std::sync::Arc;
//! use talaria_core::cron::courier::{BoxFuture, Courier, Parcel, Undelivered};
//! use talaria_scheduler::Runner;
//!
//! /// A home with no chat platforms: answers for chats are refused, the rest kept.
//! struct Nowhere;
//!
//! impl Courier for Nowhere {
//!     fn deliver<'a>(&'a self, parcel: Parcel<'a>) -> BoxFuture<'a, Result<String, Undelivered>> {
//!         Box::pin(async move { Err(Undelivered::NoAccount(parcel.account.to_string())) })
//!     }
//! }
//!
//! # async fn demo(host: Arc<talaria_core::Host>) -> Result<(), String> {
//! let runner = Runner::new(host, "my door (pid 1)", Arc::new(Nowhere));
//! let tick = runner.tick(jiff::Timestamp::now()).await?;
//! for report in &tick.ran {
//!     println!("{} ({}): {}", report.name, report.run_id, report.status.as_str());
//! }
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use talaria_core::cron::courier::{Courier, Parcel};
use talaria_core::cron::jobs;
use talaria_core::cron::target::Target;
use talaria_core::store::cron::{Claim, Claimed, Finish, Job, Run, RunStatus};
use talaria_core::store::delivery::cron_key;
use talaria_core::{Host, ModelChoice, Platform, Start};
use talaria_protocol::{Event, Op, Outcome};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often [`Runner::serve`] looks for due jobs.
pub const TICK_EVERY: Duration = Duration::from_secs(60);
/// How long a run's lease lasts unless renewed (every third of it while the run works).
pub const RUN_LEASE: Duration = Duration::from_secs(120);
/// How long a run may take when neither the job nor `[cron] timeout_secs` says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// How long runs may go on once [`Runner::serve`] is told to stop.
pub const STOP_GRACE: Duration = Duration::from_secs(20);
/// An answer starting with this is kept, not delivered.
pub const SILENT: &str = "[SILENT]";

/// What one run came to.
#[derive(Debug, Clone)]
pub struct Report {
    pub job_id: String,
    pub name: String,
    pub run_id: i64,
    pub status: RunStatus,
    pub output: String,
    pub error: Option<String>,
    /// How the answer went out (`local: PATH`, `sent`, `queued`, `silent`, `failed: ...`).
    pub delivery: Option<String>,
    pub session_id: Option<String>,
}

/// What a tick did.
#[derive(Debug, Default)]
pub struct Tick {
    /// Runs found interrupted (their process died).
    pub interrupted: Vec<Run>,
    /// Jobs run.
    pub ran: Vec<Report>,
}

/// Runs scheduled jobs for one host.
#[derive(Clone)]
pub struct Runner {
    host: Arc<Host>,
    /// Where answers for chats go.
    courier: Arc<dyn Courier>,
    /// What this process is, as other processes see it in a run's record.
    holder: String,
    /// Cancelled when the process stops: runs still going after [`STOP_GRACE`] are interrupted.
    stop: Option<CancellationToken>,
}

impl Runner {
    /// A runner for `host`; `holder` names this process (`talaria cron tick`), `courier` takes
    /// the answers for chats.
    pub fn new(host: Arc<Host>, holder: impl Into<String>, courier: Arc<dyn Courier>) -> Self {
        Self { host, courier, holder: holder.into(), stop: None }
    }

    /// Tick every [`TICK_EVERY`] until `stop` is cancelled, and at once when a job is added or
    /// changed (by any process sharing the store: a job resumed or moved to now runs now). Each
    /// tick's runs go on beside the next ticks; runs still going [`STOP_GRACE`] after `stop`
    /// are interrupted. Returns once every run has ended.
    pub async fn serve(mut self, stop: CancellationToken) {
        self.stop = Some(stop.clone());
        let ticks = TaskTracker::new();
        let mut notices = self.host.store().notices().await;
        'ticking: loop {
            let tick = self.clone();
            ticks.spawn(async move {
                if let Err(e) = tick.tick(Timestamp::now()).await {
                    tracing::error!("cannot run scheduled jobs: {e}");
                }
            });
            let next = tokio::time::Instant::now() + TICK_EVERY;
            loop {
                tokio::select! {
                    () = stop.cancelled() => break 'ticking,
                    () = tokio::time::sleep_until(next) => break,
                    notice = notices.recv() => match notice {
                        Some(n) if n.topic == talaria_core::store::notice::JOB_CHANGED => break,
                        Some(_) => {}
                        None => {
                            tokio::select! {
                                () = stop.cancelled() => break 'ticking,
                                () = tokio::time::sleep_until(next) => break,
                            }
                        }
                    },
                }
            }
        }
        ticks.close();
        ticks.wait().await;
    }

    /// Report runs whose process died, then run every job due at `now` (at once) and wait for
    /// them.
    ///
    /// # Errors
    /// The store cannot be read or written.
    pub async fn tick(&self, now: Timestamp) -> Result<Tick, String> {
        let store = self.host.store().clone();
        // Leases are the wall clock's; only what is due is judged at `now`.
        let clock = Timestamp::now().as_millisecond();
        let interrupted = stored(store.cron_reap(clock)).await?;
        for run in &interrupted {
            tracing::warn!(job = %run.job_id, run = run.id, "a scheduled run was interrupted: {}", run.error.as_deref().unwrap_or(""));
            self.report_interrupted(run).await;
        }
        let store = self.host.store().clone();
        let holder = self.holder.clone();
        let ttl = millis(RUN_LEASE);
        let due_by = now.as_millisecond();
        let claims = stored(store.cron_claim_due_by(due_by, clock, &holder, ttl, jobs::next_run)).await?;
        let mut running = tokio::task::JoinSet::new();
        for claim in claims {
            let runner = self.clone();
            running.spawn(async move { runner.execute(claim).await });
        }
        let mut ran = Vec::new();
        while let Some(done) = running.join_next().await {
            match done {
                Ok(report) => ran.push(report),
                Err(e) => tracing::error!("a scheduled run stopped: {e}"),
            }
        }
        ran.sort_by_key(|r| r.run_id);
        Ok(Tick { interrupted, ran })
    }

    /// Run job `id` now, outside its schedule.
    ///
    /// # Errors
    /// No such job, it is running already, or the store cannot be written.
    pub async fn run_now(&self, id: &str) -> Result<Report, String> {
        let store = self.host.store().clone();
        let (id, holder) = (id.to_string(), self.holder.clone());
        let now = Timestamp::now().as_millisecond();
        let claimed = stored(store.cron_claim_now(&id, now, &holder, millis(RUN_LEASE))).await?;
        match claimed {
            Claimed::Granted(claim) => Ok(self.execute(*claim).await),
            Claimed::Busy(run) => Err(format!(
                "job {} is running already (run {}, started by {} pid {} on {}); wait for it, or see `talaria cron history {}`",
                run.job_id, run.id, run.holder, run.pid, run.host, run.job_id
            )),
        }
    }

    /// Run a claimed job, keep its answer, deliver it, and record the run.
    async fn execute(&self, claim: Claim) -> Report {
        let store = self.host.store().clone();
        let stop = CancellationToken::new();
        let renewing = tokio::spawn(renew(store.clone(), claim.run_id, claim.token.clone(), stop.clone()));
        let job = &claim.job;
        tracing::info!(job = %job.id, name = %job.name, run = claim.run_id, "running a scheduled job");
        let (outcome, session_id) = self.converse(job, claim.due_at).await;
        let (status, output, error) = match outcome {
            Ok(text) => (RunStatus::Ok, text, None),
            Err(e) => (RunStatus::Error, String::new(), Some(e)),
        };
        let saved = save_output(self.host.home(), job, claim.run_id, &output, error.as_deref());
        let (status, delivery) = match (&error, output.trim_start().starts_with(SILENT)) {
            (None, true) => (status, "silent".to_string()),
            (None, false) => self
                .deliver(job, claim.run_id, &output, saved.as_deref())
                .await
                .map_or_else(|e| (RunStatus::DeliveryFailed, format!("failed: {e}")), |how| (status, how)),
            (Some(e), _) => {
                let notice = format!("Scheduled job **{}** failed: {e}", job.name);
                let how = self.deliver(job, claim.run_id, &notice, saved.as_deref()).await;
                (status, how.unwrap_or_else(|e| format!("failed: {e}")))
            }
        };
        stop.cancel();
        let _ = renewing.await;
        let finish =
            Finish { status, output: output.clone(), error: error.clone(), delivery: Some(delivery), session_id };
        let (run_id, token) = (claim.run_id, claim.token.clone());
        let record = finish.clone();
        let now = Timestamp::now().as_millisecond();
        match stored(store.cron_finish(run_id, &token, &record, now)).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(run = run_id, "the run was reaped as interrupted before it finished"),
            Err(e) => tracing::error!(run = run_id, "cannot record the run: {e}"),
        }
        tracing::info!(job = %job.id, run = run_id, status = status.as_str(), "scheduled job done");
        Report {
            job_id: job.id.clone(),
            name: job.name.clone(),
            run_id,
            status: finish.status,
            output,
            error,
            delivery: finish.delivery,
            session_id: finish.session_id,
        }
    }

    /// One turn of a fresh conversation with the job's prompt: its final answer.
    async fn converse(&self, job: &Job, due_at: i64) -> (Result<String, String>, Option<String>) {
        let workspace = match &job.workspace {
            Some(dir) if !Path::new(dir).is_dir() => {
                return (
                    Err(format!(
                        "its workspace {dir} does not exist any more; give it another: `talaria cron edit {} --workspace DIR`",
                        job.id
                    )),
                    None,
                );
            }
            Some(dir) => Some(PathBuf::from(dir)),
            None => None,
        };
        let from_chat = job.creator.starts_with("chat:");
        let cron = &self.host.config().cron;
        let start = Start {
            workspace,
            source: "cron".into(),
            platform: Platform::Cron,
            holder: format!("{} (job {})", self.holder, job.id),
            interactive: false,
            yolo: false,
            model: ModelChoice { provider: job.provider.clone(), model: job.model.clone(), ..ModelChoice::default() },
            toolsets: job.toolsets.clone().or_else(|| cron.toolsets.clone()),
            max_turns: job.max_turns.and_then(|n| u32::try_from(n).ok()).or(cron.max_turns),
            stream: Some(false),
            auto_title: false,
            // A chat's job reads what that chat's sessions read: not the owner's memory.
            memory: !from_chat,
            plugins_from: from_chat.then(|| self.host.workspace().to_path_buf()),
            allow: job.allow.clone(),
            unconfined_commands: cron.unconfined_jobs.contains(&job.id),
            job: Some(job.id.clone()),
            ..Start::default()
        };
        let mut conversation = match self.host.start(start).await {
            Ok(c) => c,
            Err(e) => return (Err(format!("cannot start its conversation: {e}")), None),
        };
        let timeout = job
            .timeout_secs
            .and_then(|s| u64::try_from(s).ok())
            .or(cron.timeout_secs)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        let prompt = framed(job, due_at, self.host.config());
        let turn = conversation.submit(Op::UserTurn { text: prompt, images: Vec::new(), sender: None, trace: None });
        let deadline = tokio::time::Instant::now() + timeout;
        let stop = self.stop.clone();
        let stopping = async move {
            match stop {
                Some(stop) => {
                    stop.cancelled().await;
                    tokio::time::sleep(STOP_GRACE).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::pin!(stopping);
        let (mut timed_out, mut stopped) = (false, false);
        let mut session_id = None;
        let outcome = loop {
            let next = tokio::select! {
                next = conversation.next_event() => next,
                () = tokio::time::sleep_until(deadline), if !timed_out && !stopped => {
                    timed_out = true;
                    conversation.submit(Op::Interrupt);
                    continue;
                }
                () = &mut stopping, if !timed_out && !stopped => {
                    stopped = true;
                    conversation.submit(Op::Interrupt);
                    continue;
                }
            };
            let Some(stamped) = next else { break Err("its conversation stopped before answering".to_string()) };
            session_id = Some(stamped.session_id.clone());
            if let Event::TurnEnd(end) = &stamped.event
                && stamped.turn_id == Some(turn)
            {
                break match &end.outcome {
                    _ if timed_out => Err(format!("stopped after its timeout of {} s", timeout.as_secs())),
                    _ if stopped => Err(format!("interrupted: {} stopped", self.holder)),
                    Outcome::Completed | Outcome::BudgetExhausted | Outcome::Truncated => Ok(end.text.clone()),
                    Outcome::Interrupted => Err("interrupted".to_string()),
                    Outcome::Failed(e) | Outcome::Refused(e) => Err(e.clone()),
                };
            }
        };
        conversation.shutdown_with("cron", |_| {}).await;
        (outcome, session_id)
    }

    /// Send `text` where `job` delivers; how it went. `saved`: the file the answer was kept in.
    async fn deliver(&self, job: &Job, run_id: i64, text: &str, saved: Option<&Path>) -> Result<String, String> {
        let local = || Ok(saved.map_or_else(|| "local".to_string(), |p| format!("local: {}", p.display())));
        let target: Target = job.deliver.parse().map_err(|e| format!("{e}"))?;
        let (account, chat, thread) = match target {
            Target::Local => return local(),
            Target::Origin => match job.origin.as_deref().map(str::parse::<Target>) {
                Some(Ok(Target::Chat { account, chat, thread })) => (account, chat, thread),
                Some(Ok(_) | Err(_)) | None => return local(),
            },
            Target::Platform { account } => {
                let (chat, thread) = self.home_channel(&account)?;
                (account, chat, thread)
            }
            Target::Chat { account, chat, thread } => (account, chat, thread),
        };
        let key = cron_key(run_id, 0);
        let parcel = Parcel { account: &account, chat: &chat, thread: thread.as_deref(), markdown: text, key: &key };
        self.courier.deliver(parcel).await.map_err(|e| e.to_string())
    }

    /// The chat (and thread) of `account`'s home channel.
    fn home_channel(&self, account: &str) -> Result<(String, Option<String>), String> {
        let platform = self.host.config().gateway.platforms.get(account).ok_or_else(|| {
            format!("no account `{account}` is configured: add [gateway.platforms.{account}] to config.toml")
        })?;
        let home = platform.home_channel.as_deref().ok_or_else(|| {
            format!(
                "account `{account}` has no home channel: set [gateway.platforms.{account}] home_channel = \"CHAT_ID\", or deliver to {account}:CHAT_ID"
            )
        })?;
        match format!("{account}:{home}").parse::<Target>() {
            Ok(Target::Chat { chat, thread, .. }) => Ok((chat, thread)),
            Ok(_) | Err(_) => Err(format!(
                "[gateway.platforms.{account}] home_channel = \"{home}\" is not a chat id (or CHAT:THREAD)"
            )),
        }
    }

    /// Tell an interrupted run's job target that it did not finish.
    async fn report_interrupted(&self, run: &Run) {
        let store = self.host.store().clone();
        let id = run.job_id.clone();
        let Ok(job) = stored(store.cron_job(&id)).await else { return };
        let notice = format!(
            "Scheduled job **{}** did not finish: {}",
            job.name,
            run.error.as_deref().unwrap_or("its process stopped")
        );
        if let Err(e) = self.deliver(&job, run.id, &notice, None).await {
            tracing::warn!(job = %job.id, "cannot report the interrupted run: {e}");
        }
    }
}

/// Keep a run's lease while it works.
async fn renew(store: Arc<talaria_core::store::Store>, run_id: i64, token: String, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RUN_LEASE / 3) => {}
        }
        let (store, token) = (store.clone(), token.clone());
        let now = Timestamp::now().as_millisecond();
        match stored(store.cron_renew(run_id, &token, now, millis(RUN_LEASE))).await {
            Ok(true) => {}
            Ok(false) => return tracing::warn!(run = run_id, "the run's lease was lost"),
            Err(e) => tracing::warn!(run = run_id, "cannot renew the run's lease: {e}"),
        }
    }
}

/// The turn a run sends: what it is, where its answer goes, then the job's prompt.
fn framed(job: &Job, due_at: i64, config: &talaria_core::ConfigToml) -> String {
    let when = Timestamp::from_millisecond(due_at).map_or_else(
        |_| due_at.to_string(),
        |t| t.to_zoned(talaria_core::store::local_time::zone()).strftime("%Y-%m-%d %H:%M %Z").to_string(),
    );
    let target = match job.deliver.parse::<Target>() {
        Ok(Target::Local) | Err(_) => "kept in the job's history (nobody is sent it)".to_string(),
        Ok(Target::Origin) if job.origin.is_none() => "kept in the job's history (nobody is sent it)".to_string(),
        Ok(Target::Origin) => "sent to the chat that scheduled the job".to_string(),
        Ok(Target::Platform { account } | Target::Chat { account, .. }) => {
            let plugin = config.gateway.platforms.get(&account).and_then(|p| p.plugin.clone()).unwrap_or(account);
            format!("sent as a message on {plugin}")
        }
    };
    format!(
        "[Scheduled job \"{}\" ({}), run for {when}. Your final answer is {target}. If there is nothing worth \
         reporting this time, start your final answer with {SILENT} and it is kept but not sent.]\n\n{}",
        job.name, job.schedule_display, job.prompt
    )
}

/// Keep a run's answer (or error) in `home/cron/output/JOB/`; the file's path.
fn save_output(home: &Path, job: &Job, run_id: i64, output: &str, error: Option<&str>) -> Option<PathBuf> {
    let dir = home.join("cron").join("output").join(&job.id);
    let stamp = Timestamp::now().strftime("%Y-%m-%dT%H-%M-%SZ").to_string();
    let path = dir.join(format!("{stamp}-run{run_id}.md"));
    let body = match error {
        Some(e) => format!("# {} (run {run_id}): failed\n\n{e}\n", job.name),
        None => format!("# {} (run {run_id})\n\n{output}\n", job.name),
    };
    let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, body));
    match written {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::warn!(job = %job.id, "cannot keep the run's answer in {}: {e}", dir.display());
            None
        }
    }
}

/// A store call's error in words.
async fn stored<T>(call: impl Future<Output = talaria_core::store::Result<T>>) -> Result<T, String> {
    call.await.map_err(|e| e.to_string())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
