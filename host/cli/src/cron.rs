//! `talaria cron`: scheduled jobs. `add` shows a job's next runs before saving it; `tick` runs
//! what is due (the gateway does so every minute; `tick` serves the system's cron or a systemd
//! timer); `run` runs one job now; `history` shows its runs.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use jiff::Timestamp;
use owo_colors::OwoColorize as _;
use talaria_core::{Host, HostOptions};
use talaria_cron::jobs::{self, Draft};
use talaria_cron::schedule::{Schedule, show, system_zone};
use talaria_cron::target::Target;
use talaria_gateway::serve::Ledger;
use talaria_scheduler::{Report, Runner};
use talaria_store::Store;
use talaria_store::cron::{Job, Run, RunStatus};

use anstream::println;

use crate::{Ctx, ui};

#[derive(Subcommand, Debug)]
// Not deferred: `edit` has a `--workspace` of its own, which must be defined before the global
// `-C/--workspace` is passed down to it (clap gives a subcommand a global only where it has no
// argument of that name yet).
pub enum CronCmd {
    /// The jobs, by next run
    List {
        /// As JSON
        #[arg(long)]
        json: bool,
    },
    /// Schedule a job: its next runs are shown before it is saved
    ///
    /// SCHEDULE is a delay (`30m`, `2h`, `1d`: once), an interval (`every 2h`), a five-field
    /// cron expression (`"0 8 * * 1-5"`: weekdays at 08:00, in --tz or your zone) or a time
    /// (`2026-12-01T08:00`: once). Each run is a fresh conversation in the current workspace,
    /// with nobody to ask: dangerous commands and new hosts are denied unless allowed with
    /// --allow. Nothing runs until a gateway (`talaria gateway run`) or `talaria cron tick` does.
    Add {
        /// When it runs (quote cron expressions)
        schedule: String,
        /// What the agent is asked each time
        prompt: String,
        #[command(flatten)]
        options: JobOptions,
        /// Show the job and its next runs, save nothing
        #[arg(long)]
        dry_run: bool,
        /// Save without asking (needed for --allow when not at a terminal)
        #[arg(short, long)]
        yes: bool,
    },
    /// Change a job (only what is given)
    Edit {
        /// Its id (or the start of it), or its name (or the start of it)
        job: String,
        /// A new schedule (as for `add`)
        #[arg(long)]
        schedule: Option<String>,
        /// A new prompt
        #[arg(long)]
        prompt: Option<String>,
        #[command(flatten)]
        options: JobOptions,
        /// Take an allowance back (repeatable)
        #[arg(long, value_name = "KEY")]
        disallow: Vec<String>,
        /// Run until removed (undoes --repeat)
        #[arg(long, conflicts_with = "repeat")]
        forever: bool,
        /// Runs in this workspace from now on
        #[arg(long, value_name = "DIR")]
        workspace: Option<std::path::PathBuf>,
        /// Save without asking (needed for --allow when not at a terminal)
        #[arg(short, long)]
        yes: bool,
    },
    /// Stop a job from running until resumed
    Pause {
        /// Its id (or the start of it), or its name (or the start of it)
        job: String,
    },
    /// Let a paused job run again (from its next time after now)
    Resume {
        /// Its id (or the start of it), or its name (or the start of it)
        job: String,
    },
    /// Run a job now, outside its schedule, and print its answer (delivered as usual)
    ///
    /// Exits 0 when the run succeeded, 1 when it failed or could not be delivered.
    Run {
        /// Its id (or the start of it), or its name (or the start of it)
        job: String,
    },
    /// Remove a job and its history
    Remove {
        /// Its id (or the start of it), or its name (or the start of it)
        job: String,
    },
    /// A job's last runs, and its last answer
    History {
        /// Its id (or the start of it), or its name (or the start of it)
        job: String,
        /// How many runs
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// As JSON
        #[arg(long)]
        json: bool,
    },
    /// Run the jobs that are due, once, and exit (for the system's cron or a systemd timer)
    ///
    /// Prints a line per run (nothing when nothing was due). Exits 0 when every run
    /// succeeded, 1 when one failed, was interrupted or could not be delivered. A running
    /// gateway ticks by itself every minute; ticking beside it never runs a job twice.
    Tick {
        /// Tick as if it were this time (RFC 3339, e.g. 2026-12-01T08:00:00Z): to try schedules
        #[arg(long, value_name = "TIME")]
        now: Option<Timestamp>,
    },
}

/// What `add` and `edit` take besides the schedule and prompt.
#[derive(Args, Debug, Default)]
pub struct JobOptions {
    /// Its name [default: the prompt's first line]
    #[arg(long)]
    name: Option<String>,
    /// Where answers go: local (kept here only), ACCOUNT (its home_channel) or
    /// ACCOUNT:CHAT[:THREAD] of a [gateway.platforms.ACCOUNT] [default: local]
    #[arg(long, value_name = "TARGET")]
    deliver: Option<String>,
    /// The IANA time zone of cron expressions and times [default: the system's]
    #[arg(long, value_name = "ZONE")]
    tz: Option<String>,
    /// Run this many times (more), then stop [default: once for a delay or a time, else until
    /// removed]
    #[arg(long, value_name = "N")]
    repeat: Option<i64>,
    /// The model [default: config.toml's]
    #[arg(long)]
    model: Option<String>,
    /// The provider of --model
    #[arg(long)]
    provider: Option<String>,
    /// Its toolsets, comma-separated [default: [cron] toolsets, else [agent] toolsets]
    #[arg(long, value_delimiter = ',', value_name = "SETS")]
    toolsets: Option<Vec<String>>,
    /// Model calls per run
    #[arg(long, value_name = "N")]
    max_turns: Option<i64>,
    /// Seconds a run may take [default: [cron] timeout_secs, else 600]
    #[arg(long, value_name = "SECS")]
    timeout: Option<i64>,
    /// Let its runs do this without asking (repeatable): a dangerous command's key as
    /// approval prompts show it (rm-recursive, git-force-push...) or net:HOST
    #[arg(long, value_name = "KEY")]
    allow: Vec<String>,
}

pub async fn run(ctx: &Ctx, cmd: CronCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        CronCmd::List { json } => list(&ctx.store_for_reading().await?, json).await,
        CronCmd::Add { schedule, prompt, options, dry_run, yes } => {
            add(ctx, schedule, prompt, options, dry_run, yes).await
        }
        CronCmd::Edit { job, schedule, prompt, options, disallow, forever, workspace, yes } => {
            let edit = Edit { schedule, prompt, options, disallow, forever, workspace, yes };
            edit_job(ctx, &ctx.store().await?, &job, edit).await
        }
        CronCmd::Pause { job } => pause(&ctx.store().await?, &job, true).await,
        CronCmd::Resume { job } => pause(&ctx.store().await?, &job, false).await,
        CronCmd::Remove { job } => {
            let store = ctx.store().await?;
            let found = store.cron_find(&job).await?;
            store.cron_remove(&found.id).await?;
            println!("removed {} ({})", found.id, found.name);
            Ok(ExitCode::SUCCESS)
        }
        CronCmd::History { job, limit, json } => history(&ctx.store_for_reading().await?, &job, limit, json).await,
        CronCmd::Run { job } => {
            let runner = runner(&ctx.home).await?;
            let found = ctx.store().await?.cron_find(&job).await?;
            ui::note(&format!("running {} ({})...", found.id, found.name));
            match runner.run_now(&found.id).await {
                Ok(report) => {
                    print_report(&report, true);
                    Ok(if report.status == RunStatus::Ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
                }
                Err(e) => {
                    ui::error(&e);
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        CronCmd::Tick { now } => tick(ctx, now.unwrap_or_else(Timestamp::now)).await,
    }
}

/// The host scheduled runs use: the gateway's (its directory is the default workspace, so
/// chats' jobs get the plugins chats get).
pub async fn runner(home: &std::path::Path) -> anyhow::Result<Runner> {
    let home = home.to_path_buf();
    let workspace = home.join("gateway");
    std::fs::create_dir_all(&workspace)?;
    talaria_runtime::start_engine();
    let host = Host::open(HostOptions { home, workspace: talaria_core::canonical_workspace(&workspace)? }).await?;
    let host = Arc::new(host);
    // Answers for chats go through the gateway's delivery ledger, sent from here when no
    // gateway serves their account.
    let courier = Arc::new(Ledger::new(host.clone()));
    Ok(Runner::new(host, format!("talaria cron (pid {})", std::process::id()), courier))
}

async fn tick(ctx: &Ctx, now: Timestamp) -> anyhow::Result<ExitCode> {
    let runner = runner(&ctx.home).await?;
    let tick = runner.tick(now).await.map_err(anyhow::Error::msg)?;
    let mut failed = !tick.interrupted.is_empty();
    for run in &tick.interrupted {
        ui::warn(&format!("run {} of job {}: {}", run.id, run.job_id, run.error.as_deref().unwrap_or("interrupted")));
    }
    for report in &tick.ran {
        failed |= report.status != RunStatus::Ok;
        print_report(report, false);
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// What a run did, in a line: its status, and its answer's first line or its error.
pub fn report_line(report: &Report) -> String {
    let what = match (&report.error, report.output.lines().next()) {
        (Some(e), _) => e.clone(),
        (None, Some(line)) => ui::first_line(line, 200),
        (None, None) => String::new(),
    };
    let delivery = report.delivery.as_deref().map(|d| format!(" [{d}]")).unwrap_or_default();
    format!(
        "run {} of {} ({}): {}{delivery}: {what}",
        report.run_id,
        report.job_id,
        report.name,
        report.status.as_str()
    )
}

/// One line for a run (and its answer, with `answer`).
fn print_report(report: &Report, answer: bool) {
    let status = status_word(report.status);
    let delivery = report.delivery.as_deref().map(|d| format!(", {d}")).unwrap_or_default();
    println!("ran {} ({}), run {}: {status}{delivery}", report.job_id, report.name, report.run_id);
    if let Some(e) = &report.error {
        ui::error(e);
    }
    if answer && !report.output.is_empty() {
        println!("\n{}", report.output.trim_end());
    }
}

fn status_word(status: RunStatus) -> String {
    match status {
        RunStatus::Ok => "ok".green().to_string(),
        RunStatus::Running => "running".cyan().to_string(),
        RunStatus::Error => "error".red().to_string(),
        RunStatus::DeliveryFailed => "delivery failed".red().to_string(),
    }
}

async fn add(
    ctx: &Ctx,
    schedule: String,
    prompt: String,
    options: JobOptions,
    dry_run: bool,
    yes: bool,
) -> anyhow::Result<ExitCode> {
    let workspace = talaria_core::canonical_workspace(&ctx.workspace)?;
    let draft = Draft {
        name: options.name,
        prompt,
        schedule,
        zone: options.tz,
        deliver: options.deliver,
        repeat: options.repeat,
        model: options.model,
        provider: options.provider,
        toolsets: options.toolsets,
        max_turns: options.max_turns,
        timeout_secs: options.timeout,
        workspace: Some(workspace),
        allow: options.allow,
        ..Draft::default()
    };
    let now = Timestamp::now();
    let job = match jobs::prepare(&draft, now) {
        Ok(job) => job,
        Err(e) => return refuse(&e.to_string()),
    };
    if let Err(e) = check_target(ctx, &job.deliver) {
        return refuse(&e);
    }
    describe(&job, now);
    if dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    match confirmed(&job.allow, yes) {
        Ok(true) => {}
        Ok(false) => return refuse("nothing saved"),
        Err(e) => return refuse(&e),
    }
    let store = ctx.store().await?;
    let id = store.cron_insert(&job).await?;
    println!("saved job {id}; it runs when a gateway or `talaria cron tick` is running");
    Ok(ExitCode::SUCCESS)
}

/// What `edit` changes.
struct Edit {
    schedule: Option<String>,
    prompt: Option<String>,
    options: JobOptions,
    disallow: Vec<String>,
    forever: bool,
    workspace: Option<std::path::PathBuf>,
    yes: bool,
}

async fn edit_job(ctx: &Ctx, store: &Store, key: &str, edit: Edit) -> anyhow::Result<ExitCode> {
    let mut job = store.cron_find(key).await?;
    let now = Timestamp::now();
    let o = edit.options;
    if let Some(text) = edit.schedule.as_deref() {
        let schedule = match Schedule::parse(text, o.tz.as_deref(), now) {
            Ok(s) => s,
            Err(e) => return refuse(&e.to_string()),
        };
        let was_once = job.schedule_kind == "once";
        let (kind, expr) = schedule.to_stored();
        job.schedule_kind = kind.as_str().to_string();
        job.schedule_expr = expr;
        job.schedule_display = schedule.display();
        job.next_run_at = schedule.next_after(now).map(|t| t.as_millisecond());
        if schedule.is_once() {
            job.repeat_times = Some(job.repeat_done + 1);
        } else if was_once {
            job.repeat_times = None;
        }
    }
    if let Some(prompt) = edit.prompt {
        job.prompt = prompt;
    }
    // The rest is checked as a new job would be.
    let draft = Draft {
        name: o.name.or(Some(job.name.clone())),
        prompt: job.prompt.clone(),
        schedule: "1h".into(),
        deliver: o.deliver.or(Some(job.deliver.clone())),
        origin: job.origin.clone(),
        repeat: o.repeat,
        max_turns: o.max_turns,
        timeout_secs: o.timeout,
        allow: o.allow.clone(),
        ..Draft::default()
    };
    let checked = match jobs::prepare(&draft, now) {
        Ok(checked) => checked,
        Err(e) => return refuse(&e.to_string()),
    };
    if let Err(e) = check_target(ctx, &checked.deliver) {
        return refuse(&e);
    }
    job.name = checked.name;
    job.prompt = checked.prompt;
    job.deliver = checked.deliver;
    if let Some(times) = o.repeat {
        job.repeat_times = Some(job.repeat_done + times);
    }
    if edit.forever {
        job.repeat_times = None;
    }
    job.model = o.model.or(job.model);
    job.provider = o.provider.or(job.provider);
    job.toolsets = o.toolsets.or(job.toolsets);
    job.max_turns = o.max_turns.or(job.max_turns);
    job.timeout_secs = o.timeout.or(job.timeout_secs);
    if let Some(dir) = edit.workspace {
        job.workspace = Some(talaria_core::canonical_workspace(&dir)?.display().to_string());
    }
    let added: Vec<String> = o.allow.into_iter().filter(|k| !job.allow.contains(k)).collect();
    match confirmed(&added, edit.yes) {
        Ok(true) => {}
        Ok(false) => return refuse("nothing changed"),
        Err(e) => return refuse(&e),
    }
    job.allow.extend(added);
    job.allow.retain(|k| !edit.disallow.contains(k));
    store.cron_update(&job).await?;
    describe(&store.cron_job(&job.id).await?, now);
    Ok(ExitCode::SUCCESS)
}

async fn pause(store: &Store, key: &str, paused: bool) -> anyhow::Result<ExitCode> {
    let mut job = store.cron_find(key).await?;
    job.enabled = !paused;
    if !paused {
        // Resumed: from its next time after now (what it missed while paused is not run).
        let now = Timestamp::now().as_millisecond();
        if job.next_run_at.is_some_and(|at| at < now) && job.schedule_kind != "once" {
            job.next_run_at = jobs::next_run(&job, now);
        }
    }
    store.cron_update(&job).await?;
    let job = store.cron_job(&job.id).await?;
    let next = job.next_run_at.map_or_else(|| "none".into(), when);
    println!(
        "{} {} ({}): {}, next run {next}",
        if paused { "paused" } else { "resumed" },
        job.id,
        job.name,
        job.state.as_str()
    );
    Ok(ExitCode::SUCCESS)
}

/// The delivery target must name a configured account (and its home channel).
fn check_target(ctx: &Ctx, deliver: &str) -> Result<(), String> {
    let platforms = &ctx.config.gateway.platforms;
    let account = match deliver.parse::<Target>().map_err(|e| e.to_string())? {
        Target::Local | Target::Origin => return Ok(()),
        Target::Chat { account, .. } => account,
        Target::Platform { account } => {
            if platforms.get(&account).is_some_and(|p| p.home_channel.is_none()) {
                return Err(format!(
                    "account `{account}` has no home channel: set [gateway.platforms.{account}] home_channel = \"CHAT_ID\" in config.toml, or deliver to {account}:CHAT_ID"
                ));
            }
            account
        }
    };
    if platforms.contains_key(&account) {
        return Ok(());
    }
    let known: Vec<&str> = platforms.keys().map(String::as_str).collect();
    Err(format!(
        "no account `{account}` is configured ({}): add [gateway.platforms.{account}] to config.toml (see docs/gateway.md), or deliver to local",
        if known.is_empty() { "none is".to_string() } else { format!("configured: {}", known.join(", ")) }
    ))
}

/// Allowances are the user's own decision: asked at a terminal, or given with --yes.
fn confirmed(allow: &[String], yes: bool) -> Result<bool, String> {
    if allow.is_empty() || yes {
        return Ok(true);
    }
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(format!(
            "--allow {} lets the job's runs do that with nobody asked: confirm it with --yes (there is no terminal here to ask)",
            allow.join(" --allow ")
        ));
    }
    let answer =
        crate::market::ask(&format!("Its runs will do this without asking anyone: {}. Save? [y/N] ", allow.join(", ")))
            .map_err(|e| e.to_string())?;
    Ok(matches!(answer.as_str(), "y" | "yes"))
}

fn refuse(message: &str) -> anyhow::Result<ExitCode> {
    ui::error(message);
    Ok(ExitCode::from(2))
}

/// A job as `add` and `edit` show it, with its next runs.
fn describe(job: &Job, now: Timestamp) {
    let label = |l: &str| format!("{l:>10}").dimmed().to_string();
    println!(
        "{} {}",
        label("job"),
        if job.id.is_empty() { job.name.clone() } else { format!("{} ({})", job.id, job.name) }
    );
    println!("{} {}", label("schedule"), job.schedule_display);
    println!("{} {}", label("prompt"), ui::first_line(&job.prompt, 100));
    println!("{} {}", label("deliver"), job.deliver);
    if let Some(ws) = &job.workspace {
        println!("{} {ws}", label("workspace"));
    }
    if !job.allow.is_empty() {
        println!("{} {}", label("allowed"), job.allow.join(", "));
    }
    if let Some(times) = job.repeat_times {
        println!("{} {} of {times} done", label("runs"), job.repeat_done);
    }
    let upcoming = jobs::schedule_of(job).map(|s| s.upcoming(now, 3)).unwrap_or_default();
    let left = job.repeat_times.map_or(usize::MAX, |t| usize::try_from(t - job.repeat_done).unwrap_or(0));
    let next: Vec<String> = match job.next_run_at {
        Some(at) if !job.enabled => vec![format!("paused (was {})", when(at))],
        Some(at) => std::iter::once(at)
            .chain(upcoming.iter().map(|t| t.as_millisecond()).filter(|t| *t > at))
            .take(3.min(left))
            .map(when)
            .collect(),
        None => vec!["none".into()],
    };
    println!("{} {}", label("next"), next.join(", "));
}

/// A time in the user's zone.
fn when(ms: i64) -> String {
    Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| show(t, &system_zone()))
}

async fn list(store: &Store, json: bool) -> anyhow::Result<ExitCode> {
    let jobs = store.cron_jobs().await?;
    if json {
        let value: Vec<serde_json::Value> = jobs.iter().map(job_json).collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    if jobs.is_empty() {
        println!("no jobs: `talaria cron add \"every 2h\" \"check the build\"` schedules one");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                ui::first_line(&j.name, 30),
                ui::first_line(&j.schedule_display, 40),
                j.next_run_at.filter(|_| j.enabled).map_or_else(|| "-".into(), when),
                j.state.as_str().to_string(),
                j.last_status.map_or_else(|| "-".into(), |s| s.as_str().to_string()),
                j.deliver.clone(),
            ]
        })
        .collect();
    ui::table(&["ID", "NAME", "SCHEDULE", "NEXT", "STATE", "LAST", "DELIVER"], &rows);
    Ok(ExitCode::SUCCESS)
}

fn job_json(j: &Job) -> serde_json::Value {
    serde_json::json!({
        "id": j.id, "name": j.name, "prompt": j.prompt,
        "schedule": { "kind": j.schedule_kind, "expr": j.schedule_expr, "display": j.schedule_display },
        "deliver": j.deliver, "origin": j.origin,
        "repeat": { "times": j.repeat_times, "completed": j.repeat_done },
        "enabled": j.enabled, "state": j.state.as_str(),
        "next_run_at": j.next_run_at.and_then(|t| Timestamp::from_millisecond(t).ok()).map(|t| t.to_string()),
        "last_run_at": j.last_run_at.and_then(|t| Timestamp::from_millisecond(t).ok()).map(|t| t.to_string()),
        "last_status": j.last_status.map(RunStatus::as_str), "last_error": j.last_error,
        "model": j.model, "provider": j.provider, "toolsets": j.toolsets,
        "max_turns": j.max_turns, "timeout_secs": j.timeout_secs, "workspace": j.workspace,
        "allow": j.allow, "creator": j.creator,
    })
}

fn run_json(r: &Run) -> serde_json::Value {
    let at = |t: i64| Timestamp::from_millisecond(t).map(|t| t.to_string()).ok();
    serde_json::json!({
        "id": r.id, "job_id": r.job_id, "due_at": at(r.due_at), "started_at": at(r.started_at),
        "finished_at": r.finished_at.and_then(at), "status": r.status.as_str(), "manual": r.manual,
        "output": r.output, "error": r.error, "delivery": r.delivery, "session_id": r.session_id,
        "pid": r.pid, "host": r.host, "holder": r.holder,
    })
}

async fn history(store: &Store, key: &str, limit: usize, json: bool) -> anyhow::Result<ExitCode> {
    let job = store.cron_find(key).await?;
    let runs = store.cron_runs(&job.id, limit.max(1)).await?;
    if json {
        let value: Vec<serde_json::Value> = runs.iter().map(run_json).collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} ({}): {}", job.id, job.name, job.schedule_display);
    if runs.is_empty() {
        println!("no runs yet");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let took =
                r.finished_at.map_or_else(|| "-".into(), |f| format!("{:.1}s", (f - r.started_at) as f64 / 1000.0));
            let what = r.error.as_deref().or(r.delivery.as_deref()).unwrap_or("");
            vec![
                r.id.to_string(),
                when(r.started_at),
                took,
                format!("{}{}", r.status.as_str(), if r.manual { " (by hand)" } else { "" }),
                ui::first_line(what, 70),
            ]
        })
        .collect();
    ui::table(&["RUN", "STARTED", "TOOK", "STATUS", "DELIVERY / ERROR"], &rows);
    if let Some(output) = runs.iter().find_map(|r| r.output.as_deref().filter(|o| !o.is_empty())) {
        println!("\n{}\n{}", "last answer:".bold(), output.trim_end());
    }
    Ok(ExitCode::SUCCESS)
}
