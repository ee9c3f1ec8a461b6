//! Scheduled jobs and their runs on SQLite, with the guarantees of [`crate::cron`]: claiming
//! what is due, starting a run and moving the job's next run on are one `BEGIN IMMEDIATE`
//! transaction (the claimer's "when next" function runs inside it), and a run row is unique per
//! job and due time.

use rusqlite::{Connection, OptionalExtension as _, Row, params};

use super::{Cached as _, Sqlite};
use crate::cron::{
    Claim, Claimed, Finish, JOB_COLUMNS, Job, JobState, RUN_COLUMNS, RawJob, Run, RunStatus, finish_job, finish_run,
    new_token, resting_state, to_json,
};
use crate::process::{alive, machine};
use crate::{Error, Result};

fn job(r: &Row<'_>) -> rusqlite::Result<RawJob> {
    let job = Job {
        id: r.get(0)?,
        name: r.get(1)?,
        prompt: r.get(2)?,
        schedule_kind: r.get(3)?,
        schedule_expr: r.get(4)?,
        schedule_display: r.get(5)?,
        deliver: r.get(6)?,
        origin: r.get(7)?,
        repeat_times: r.get(8)?,
        repeat_done: r.get(9)?,
        enabled: r.get(10)?,
        state: JobState::Scheduled,
        next_run_at: r.get(12)?,
        last_run_at: r.get(13)?,
        last_status: None,
        last_output: r.get(15)?,
        last_error: r.get(16)?,
        model: r.get(17)?,
        provider: r.get(18)?,
        toolsets: None,
        max_turns: r.get(20)?,
        timeout_secs: r.get(21)?,
        workspace: r.get(22)?,
        allow: Vec::new(),
        creator: r.get(24)?,
        created_at: r.get(25)?,
        updated_at: r.get(26)?,
    };
    Ok((job, r.get(11)?, r.get(14)?, r.get(19)?, r.get(23)?))
}

fn run(r: &Row<'_>) -> rusqlite::Result<(Run, String)> {
    let run = Run {
        id: r.get(0)?,
        job_id: r.get(1)?,
        due_at: r.get(2)?,
        started_at: r.get(3)?,
        finished_at: r.get(4)?,
        status: RunStatus::Running,
        manual: r.get(6)?,
        output: r.get(7)?,
        error: r.get(8)?,
        delivery: r.get(9)?,
        session_id: r.get(10)?,
        pid: r.get(11)?,
        host: r.get(12)?,
        holder: r.get(13)?,
    };
    Ok((run, r.get(5)?))
}

fn jobs_where(tx: &rusqlite::Connection, filter: &str, args: impl rusqlite::Params) -> Result<Vec<Job>> {
    let mut stmt = tx.prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM cron_jobs {filter}"))?;
    let raws = stmt.query_map(args, job)?.collect::<rusqlite::Result<Vec<_>>>()?;
    raws.into_iter().map(finish_job).collect()
}

fn one_job(tx: &rusqlite::Connection, id: &str) -> Result<Option<Job>> {
    Ok(jobs_where(tx, "WHERE id = ?1", [id])?.pop())
}

fn running_run(tx: &rusqlite::Connection, job_id: &str) -> Result<Option<Run>> {
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM cron_runs WHERE job_id = ?1 AND status = 'running' ORDER BY id DESC LIMIT 1"
    ))?;
    stmt.query_row([job_id], run).optional()?.map(finish_run).transpose()
}

/// Start a run of `job` due at `due_at`, leased until `now + ttl_ms`. None when that due time
/// has a run already.
fn start_run(
    tx: &Connection,
    job: &Job,
    due_at: i64,
    manual: bool,
    holder: &str,
    now: i64,
    ttl_ms: i64,
) -> Result<Option<Claim>> {
    let token = new_token();
    let added = tx.run(
        "INSERT INTO cron_runs (job_id, due_at, started_at, status, manual, pid, host, holder, token, lease_until)
         VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (job_id, due_at) DO NOTHING",
        params![job.id, due_at, now, manual, std::process::id(), machine(), holder, token, now.saturating_add(ttl_ms)],
    )?;
    if added == 0 {
        return Ok(None);
    }
    let run_id = tx.last_insert_rowid();
    Ok(Some(Claim { job: job.clone(), run_id, token, due_at }))
}

/// Write what can be edited of `job` into row `id`, in `state`.
fn write_fields(tx: &Connection, id: &str, job: &Job, state: JobState, now: i64) -> Result<()> {
    tx.run(
        "UPDATE cron_jobs SET name = ?2, prompt = ?3, schedule_kind = ?4, schedule_expr = ?5,
            schedule_display = ?6, deliver = ?7, repeat_times = ?8, enabled = ?9, state = ?10,
            next_run_at = ?11, model = ?12, provider = ?13, toolsets = ?14, max_turns = ?15,
            timeout_secs = ?16, workspace = ?17, allow = ?18, updated_at = ?19
         WHERE id = ?1",
        params![
            id,
            job.name,
            job.prompt,
            job.schedule_kind,
            job.schedule_expr,
            job.schedule_display,
            job.deliver,
            job.repeat_times,
            job.enabled,
            state.as_str(),
            job.next_run_at,
            job.model,
            job.provider,
            job.toolsets.as_deref().map(to_json),
            job.max_turns,
            job.timeout_secs,
            job.workspace,
            to_json(&job.allow),
            now,
        ],
    )?;
    Ok(())
}

impl Sqlite {
    pub(crate) fn cron_insert(&self, job: &Job, now: i64) -> Result<String> {
        self.write(|tx| {
            let id = loop {
                let id = format!("{:08x}", fastrand::u32(..));
                let taken: bool =
                    tx.one("SELECT EXISTS (SELECT 1 FROM cron_jobs WHERE id = ?1)", [&id], |r| r.get(0))?;
                if !taken {
                    break id;
                }
            };
            tx.run(
                "INSERT INTO cron_jobs (id, name, prompt, schedule_kind, schedule_expr, schedule_display, deliver,
                    origin, creator, created_at, updated_at)
                 VALUES (?1, '', '', '', '', '', '', ?2, ?3, ?4, ?4)",
                params![id, job.origin, job.creator, now],
            )?;
            let state = if job.enabled { JobState::Scheduled } else { JobState::Paused };
            write_fields(tx, &id, job, state, now)?;
            Ok(id)
        })
    }

    pub(crate) fn cron_update(&self, job: &Job, now: i64) -> Result<()> {
        self.write(|tx| {
            let Some(current) = one_job(tx, &job.id)? else {
                return Err(Error::JobNotFound { key: job.id.clone() });
            };
            let state = if current.state == JobState::Running { JobState::Running } else { resting_state(job) };
            write_fields(tx, &job.id, job, state, now)
        })
    }

    pub(crate) fn cron_job(&self, id: &str) -> Result<Option<Job>> {
        one_job(&self.conn(), id)
    }

    pub(crate) fn cron_jobs(&self) -> Result<Vec<Job>> {
        jobs_where(&self.conn(), "ORDER BY next_run_at IS NULL, next_run_at, created_at", [])
    }

    pub(crate) fn cron_remove(&self, id: &str) -> Result<bool> {
        self.write(|tx| {
            tx.run("DELETE FROM cron_runs WHERE job_id = ?1", [id])?;
            Ok(tx.run("DELETE FROM cron_jobs WHERE id = ?1", [id])? == 1)
        })
    }

    pub(crate) fn cron_claim_due_by(
        &self,
        due_by: i64,
        now: i64,
        holder: &str,
        ttl_ms: i64,
        next: impl Fn(&Job, i64) -> Option<i64>,
    ) -> Result<Vec<Claim>> {
        self.write(|tx| {
            let due = jobs_where(
                tx,
                "WHERE enabled AND state = 'scheduled' AND next_run_at <= ?1 ORDER BY next_run_at",
                [due_by],
            )?;
            let mut claims = Vec::new();
            for job in due {
                let Some(due_at) = job.next_run_at else { continue };
                let after = next(&job, due_by);
                tx.run(
                    "UPDATE cron_jobs SET state = 'running', next_run_at = ?2 WHERE id = ?1",
                    params![job.id, after],
                )?;
                if let Some(mut claim) = start_run(tx, &job, due_at, false, holder, now, ttl_ms)? {
                    claim.job.next_run_at = after;
                    claim.job.state = JobState::Running;
                    claims.push(claim);
                } else {
                    // That time ran already (a clock set back): only move on.
                    tx.run("UPDATE cron_jobs SET state = 'scheduled' WHERE id = ?1", [&job.id])?;
                }
            }
            Ok(claims)
        })
    }

    pub(crate) fn cron_claim_now(&self, id: &str, now: i64, holder: &str, ttl_ms: i64) -> Result<Claimed> {
        self.write(|tx| {
            let job = one_job(tx, id)?.ok_or_else(|| Error::JobNotFound { key: id.to_string() })?;
            if let Some(run) = running_run(tx, id)? {
                return Ok(Claimed::Busy(Box::new(run)));
            }
            // Unique per due time: a second `cron run` in the same millisecond waits one.
            let mut at = now;
            loop {
                if let Some(mut claim) = start_run(tx, &job, at, true, holder, now, ttl_ms)? {
                    tx.run("UPDATE cron_jobs SET state = 'running' WHERE id = ?1", [id])?;
                    claim.job.state = JobState::Running;
                    return Ok(Claimed::Granted(Box::new(claim)));
                }
                at += 1;
            }
        })
    }

    pub(crate) fn cron_renew(&self, run_id: i64, token: &str, until: i64) -> Result<bool> {
        self.write(|tx| {
            Ok(tx.run(
                "UPDATE cron_runs SET lease_until = ?3 WHERE id = ?1 AND token = ?2 AND status = 'running'",
                params![run_id, token, until],
            )? == 1)
        })
    }

    pub(crate) fn cron_finish(&self, run_id: i64, token: &str, finish: &Finish, now: i64) -> Result<bool> {
        self.write(|tx| {
            let job_id: Option<(String, bool)> = tx
                .one(
                    "SELECT job_id, manual FROM cron_runs WHERE id = ?1 AND token = ?2 AND status = 'running'",
                    params![run_id, token],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((job_id, manual)) = job_id else { return Ok(false) };
            tx.run(
                "UPDATE cron_runs SET status = ?2, finished_at = ?3, output = ?4, error = ?5,
                    delivery = CASE WHEN delivery IN ('sent', 'sending') AND ?6 LIKE 'queued%' THEN delivery ELSE ?6 END,
                    session_id = ?7 WHERE id = ?1",
                params![
                    run_id,
                    finish.status.as_str(),
                    now,
                    finish.output,
                    finish.error,
                    finish.delivery,
                    finish.session_id
                ],
            )?;
            settle_job(tx, &job_id, !manual, finish.status, &finish.output, finish.error.as_deref(), now)?;
            Ok(true)
        })
    }

    pub(crate) fn cron_reap(&self, now: i64) -> Result<Vec<Run>> {
        let me = machine();
        self.write(|tx| {
            let running: Vec<(Run, i64)> = {
                let mut stmt = tx.prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS}, lease_until FROM cron_runs WHERE status = 'running'"
                ))?;
                let rows = stmt
                    .query_map([], |r| Ok((run(r)?, r.get::<_, i64>(14)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                rows.into_iter().map(|(raw, until)| Ok((finish_run(raw)?, until))).collect::<Result<_>>()?
            };
            let mut reaped = Vec::new();
            for (mut r, until) in running {
                let gone = until <= now || (r.host == me && !alive(r.pid));
                if !gone {
                    continue;
                }
                let error = format!(
                    "interrupted: {} (pid {} on {}) stopped before the run finished; it is not run again",
                    r.holder, r.pid, r.host
                );
                tx.run(
                    "UPDATE cron_runs SET status = 'error', finished_at = ?2, error = ?3 WHERE id = ?1",
                    params![r.id, now, error],
                )?;
                settle_job(tx, &r.job_id, !r.manual, RunStatus::Error, "", Some(&error), now)?;
                r.status = RunStatus::Error;
                r.finished_at = Some(now);
                r.error = Some(error);
                reaped.push(r);
            }
            Ok(reaped)
        })
    }

    pub(crate) fn cron_runs(&self, id: &str, limit: usize) -> Result<Vec<Run>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM cron_runs WHERE job_id = ?1 ORDER BY started_at DESC, id DESC LIMIT +?2"
        ))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let raws = stmt.query_map(params![id, limit], run)?.collect::<rusqlite::Result<Vec<_>>>()?;
        raws.into_iter().map(finish_run).collect()
    }

    pub(crate) fn cron_run(&self, run_id: i64) -> Result<Option<Run>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM cron_runs WHERE id = ?1"))?;
        stmt.query_row([run_id], run).optional()?.map(finish_run).transpose()
    }

    pub(crate) fn cron_delivery_failed(&self, run_id: i64, error: &str) -> Result<()> {
        self.write(|tx| mark_delivery_failed(tx, run_id, error))
    }
}

/// Run `run_id`'s answer did not reach its chat: the run and (if it is its job's latest) the
/// job say so.
pub(crate) fn mark_delivery_failed(tx: &Connection, run_id: i64, error: &str) -> Result<()> {
    let job_id: Option<String> = tx
        .one(
            "UPDATE cron_runs SET status = 'delivery_failed', delivery = ?2 WHERE id = ?1 AND status = 'ok'
             RETURNING job_id",
            params![run_id, format!("failed: {error}")],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(job_id) = job_id {
        let latest: Option<i64> = tx.one("SELECT max(id) FROM cron_runs WHERE job_id = ?1", [&job_id], |r| r.get(0))?;
        if latest == Some(run_id) {
            tx.run(
                "UPDATE cron_jobs SET last_status = 'delivery_failed', last_error = ?2 WHERE id = ?1",
                params![job_id, format!("delivery failed: {error}")],
            )?;
        }
    }
    Ok(())
}

/// After a run of `job_id` ended: its last status, one more repeat done (`counts`: it ran on
/// schedule), and the state it rests in.
fn settle_job(
    tx: &Connection,
    job_id: &str,
    counts: bool,
    status: RunStatus,
    output: &str,
    error: Option<&str>,
    now: i64,
) -> Result<()> {
    let Some(mut job) = one_job(tx, job_id)? else { return Ok(()) };
    if counts {
        job.repeat_done += 1;
    }
    // Paused meanwhile: stays paused.
    let state = resting_state(&job);
    tx.run(
        "UPDATE cron_jobs SET repeat_done = ?2, state = ?3, last_run_at = ?4, last_status = ?5, last_output = ?6,
            last_error = ?7, updated_at = ?4 WHERE id = ?1",
        params![job_id, job.repeat_done, state.as_str(), now, status.as_str(), output, error],
    )?;
    Ok(())
}
