//! Scheduled jobs and their runs on PostgreSQL, with the guarantees of [`crate::cron`]: a due
//! time runs once however many processes tick (due jobs are claimed with `FOR UPDATE SKIP
//! LOCKED`, and a run row is unique per job and due time), a backlog is one run, and a run whose
//! process is gone or whose lease expired is reaped and reported, never run again.
//!
//! The claimer's "when next" function runs in this process, between two short transactions:
//! the first claims the due jobs (they leave the `scheduled` state, so no other ticker sees
//! them) and starts their runs, the second moves each one's next run on.

use deadpool_postgres::Transaction;
use tokio_postgres::Row;

use super::{Cached as _, Pg, sql};
use crate::cron::{
    Claim, Claimed, Finish, JOB_COLUMNS, Job, JobState, RUN_COLUMNS, RawJob, Run, RunStatus, finish_job, finish_run,
    new_token, resting_state, to_json,
};
use crate::process::{alive, machine};
use crate::{Error, Result};

fn raw_job(r: &Row) -> RawJob {
    let job = Job {
        id: r.get(0),
        name: r.get(1),
        prompt: r.get(2),
        schedule_kind: r.get(3),
        schedule_expr: r.get(4),
        schedule_display: r.get(5),
        deliver: r.get(6),
        origin: r.get(7),
        repeat_times: r.get(8),
        repeat_done: r.get(9),
        enabled: r.get(10),
        state: JobState::Scheduled,
        next_run_at: r.get(12),
        last_run_at: r.get(13),
        last_status: None,
        last_output: r.get(15),
        last_error: r.get(16),
        model: r.get(17),
        provider: r.get(18),
        toolsets: None,
        max_turns: r.get(20),
        timeout_secs: r.get(21),
        workspace: r.get(22),
        allow: Vec::new(),
        creator: r.get(24),
        created_at: r.get(25),
        updated_at: r.get(26),
    };
    (job, r.get(11), r.get(14), r.get(19), r.get(23))
}

fn raw_run(r: &Row) -> (Run, String) {
    let run = Run {
        id: r.get(0),
        job_id: r.get(1),
        due_at: r.get(2),
        started_at: r.get(3),
        finished_at: r.get(4),
        status: RunStatus::Running,
        manual: r.get(6),
        output: r.get(7),
        error: r.get(8),
        delivery: r.get(9),
        session_id: r.get(10),
        pid: u32::try_from(r.get::<_, i64>(11)).unwrap_or_default(),
        host: r.get(12),
        holder: r.get(13),
    };
    (run, r.get(5))
}

async fn jobs(
    c: &impl deadpool_postgres::GenericClient,
    filter: &str,
    args: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<Job>> {
    let rows = c.q(&format!("SELECT {JOB_COLUMNS} FROM cron_jobs {filter}"), args).await.map_err(sql)?;
    rows.iter().map(|r| finish_job(raw_job(r))).collect()
}

async fn one_job(c: &impl deadpool_postgres::GenericClient, id: &str, lock: bool) -> Result<Option<Job>> {
    let filter = if lock { "WHERE id = $1 FOR UPDATE" } else { "WHERE id = $1" };
    Ok(jobs(c, filter, &[&id]).await?.pop())
}

async fn write_fields(tx: &Transaction<'_>, id: &str, job: &Job, state: JobState, now: i64) -> Result<()> {
    tx.exec(
        "UPDATE cron_jobs SET name = $2, prompt = $3, schedule_kind = $4, schedule_expr = $5,
            schedule_display = $6, deliver = $7, repeat_times = $8, enabled = $9, state = $10,
            next_run_at = $11, model = $12, provider = $13, toolsets = $14, max_turns = $15,
            timeout_secs = $16, workspace = $17, allow = $18, updated_at = $19
         WHERE id = $1",
        &[
            &id,
            &job.name,
            &job.prompt,
            &job.schedule_kind,
            &job.schedule_expr,
            &job.schedule_display,
            &job.deliver,
            &job.repeat_times,
            &job.enabled,
            &state.as_str(),
            &job.next_run_at,
            &job.model,
            &job.provider,
            &job.toolsets.as_deref().map(to_json),
            &job.max_turns,
            &job.timeout_secs,
            &job.workspace,
            &to_json(&job.allow),
            &now,
        ],
    )
    .await
    .map_err(sql)?;
    Ok(())
}

/// Start a run of `job` due at `due_at`; `None` when that due time has a run already.
async fn start_run(
    tx: &Transaction<'_>,
    job: &Job,
    due_at: i64,
    manual: bool,
    holder: &str,
    now: i64,
    ttl_ms: i64,
) -> Result<Option<Claim>> {
    let token = new_token();
    let row = tx
        .qopt(
            "INSERT INTO cron_runs (job_id, due_at, started_at, status, manual, pid, host, holder, token, lease_until)
             VALUES ($1, $2, $3, 'running', $4, $5, $6, $7, $8, $9) ON CONFLICT (job_id, due_at) DO NOTHING
             RETURNING id",
            &[
                &job.id,
                &due_at,
                &now,
                &manual,
                &i64::from(std::process::id()),
                &machine(),
                &holder,
                &token,
                &now.saturating_add(ttl_ms),
            ],
        )
        .await
        .map_err(sql)?;
    Ok(row.map(|r| Claim { job: job.clone(), run_id: r.get(0), token, due_at }))
}

/// After a run of `job_id` ended: its last status, one more repeat done, its resting state.
async fn settle_job(
    tx: &Transaction<'_>,
    job_id: &str,
    counts: bool,
    status: RunStatus,
    output: &str,
    error: Option<&str>,
    now: i64,
) -> Result<()> {
    let Some(mut job) = one_job(tx, job_id, true).await? else { return Ok(()) };
    if counts {
        job.repeat_done += 1;
    }
    let state = resting_state(&job);
    tx.exec(
        "UPDATE cron_jobs SET repeat_done = $2, state = $3, last_run_at = $4, last_status = $5, last_output = $6,
            last_error = $7, updated_at = $4 WHERE id = $1",
        &[&job_id, &job.repeat_done, &state.as_str(), &now, &status.as_str(), &output, &error],
    )
    .await
    .map_err(sql)?;
    Ok(())
}

/// Run `run_id`'s answer did not reach its chat: the run and (if it is its job's latest) the
/// job say so.
pub(crate) async fn mark_delivery_failed(tx: &Transaction<'_>, run_id: i64, error: &str) -> Result<()> {
    let job: Option<String> = tx
        .qopt(
            "UPDATE cron_runs SET status = 'delivery_failed', delivery = $2 WHERE id = $1 AND status = 'ok'
             RETURNING job_id",
            &[&run_id, &format!("failed: {error}")],
        )
        .await
        .map_err(sql)?
        .map(|r| r.get(0));
    if let Some(job) = job {
        let latest: Option<i64> =
            tx.q1("SELECT max(id) FROM cron_runs WHERE job_id = $1", &[&job]).await.map_err(sql)?.get(0);
        if latest == Some(run_id) {
            tx.exec(
                "UPDATE cron_jobs SET last_status = 'delivery_failed', last_error = $2 WHERE id = $1",
                &[&job, &format!("delivery failed: {error}")],
            )
            .await
            .map_err(sql)?;
        }
    }
    Ok(())
}

impl Pg {
    pub(crate) async fn cron_insert(&self, job: &Job, now: i64) -> Result<String> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        let id = loop {
            let id = format!("{:08x}", fastrand::u32(..));
            let added = tx
                .exec(
                    "INSERT INTO cron_jobs (id, name, prompt, schedule_kind, schedule_expr, schedule_display,
                        deliver, origin, creator, created_at, updated_at)
                     VALUES ($1, '', '', '', '', '', '', $2, $3, $4, $4) ON CONFLICT (id) DO NOTHING",
                    &[&id, &job.origin, &job.creator, &now],
                )
                .await
                .map_err(sql)?;
            if added == 1 {
                break id;
            }
        };
        let state = if job.enabled { JobState::Scheduled } else { JobState::Paused };
        write_fields(&tx, &id, job, state, now).await?;
        tx.commit().await.map_err(sql)?;
        Ok(id)
    }

    pub(crate) async fn cron_update(&self, job: &Job, now: i64) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        let Some(current) = one_job(&tx, &job.id, true).await? else {
            return Err(Error::JobNotFound { key: job.id.clone() });
        };
        let state = if current.state == JobState::Running { JobState::Running } else { resting_state(job) };
        write_fields(&tx, &job.id, job, state, now).await?;
        tx.commit().await.map_err(sql)
    }

    pub(crate) async fn cron_job(&self, id: &str) -> Result<Option<Job>> {
        let client = self.client().await?;
        one_job(&client, id, false).await
    }

    pub(crate) async fn cron_jobs(&self) -> Result<Vec<Job>> {
        let client = self.client().await?;
        jobs(&client, "ORDER BY next_run_at IS NULL, next_run_at, created_at", &[]).await
    }

    pub(crate) async fn cron_remove(&self, id: &str) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        tx.exec("DELETE FROM cron_runs WHERE job_id = $1", &[&id]).await.map_err(sql)?;
        let removed = tx.exec("DELETE FROM cron_jobs WHERE id = $1", &[&id]).await.map_err(sql)? == 1;
        tx.commit().await.map_err(sql)?;
        Ok(removed)
    }

    pub(crate) async fn cron_claim_due_by(
        &self,
        due_by: i64,
        now: i64,
        holder: &str,
        ttl_ms: i64,
        next: impl Fn(&Job, i64) -> Option<i64>,
    ) -> Result<Vec<Claim>> {
        // Claimed in one transaction, moved on in the next: `next` runs here, between them.
        let taken = self.cron_claim(due_by, now, holder, ttl_ms).await?;
        let moves: Vec<(String, Option<i64>)> =
            taken.iter().map(|(job, _)| (job.id.clone(), next(job, due_by))).collect();
        self.cron_set_next(moves.clone()).await?;
        Ok(taken
            .into_iter()
            .zip(moves)
            .filter_map(|((_, claim), (_, after))| {
                claim.map(|mut claim| {
                    claim.job.next_run_at = after;
                    claim.job.state = JobState::Running;
                    claim
                })
            })
            .collect())
    }

    /// Claim the jobs due by `due_by`: each leaves the `scheduled` state and gets a run, unless
    /// its due time ran already. Returns every job taken, with its claim when it got one.
    async fn cron_claim(&self, due_by: i64, now: i64, holder: &str, ttl_ms: i64) -> Result<Vec<(Job, Option<Claim>)>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        // Jobs another ticker is claiming this instant are skipped, not waited for.
        let due = jobs(
            &tx,
            "WHERE enabled AND state = 'scheduled' AND next_run_at <= $1 ORDER BY next_run_at
             FOR UPDATE SKIP LOCKED",
            &[&due_by],
        )
        .await?;
        let mut taken = Vec::new();
        for job in due {
            let Some(due_at) = job.next_run_at else { continue };
            let claim = start_run(&tx, &job, due_at, false, holder, now, ttl_ms).await?;
            if claim.is_some() {
                tx.exec("UPDATE cron_jobs SET state = 'running' WHERE id = $1", &[&job.id]).await.map_err(sql)?;
            }
            taken.push((job, claim));
        }
        tx.commit().await.map_err(sql)?;
        Ok(taken)
    }

    /// Move each job's next run on (`(id, next)`).
    async fn cron_set_next(&self, next: Vec<(String, Option<i64>)>) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        for (id, at) in &next {
            tx.exec("UPDATE cron_jobs SET next_run_at = $2 WHERE id = $1", &[id, at]).await.map_err(sql)?;
        }
        tx.commit().await.map_err(sql)
    }

    pub(crate) async fn cron_claim_now(&self, id: &str, now: i64, holder: &str, ttl_ms: i64) -> Result<Claimed> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        let job = one_job(&tx, id, true).await?.ok_or_else(|| Error::JobNotFound { key: id.to_string() })?;
        let running = tx
            .qopt(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM cron_runs WHERE job_id = $1 AND status = 'running'
                     ORDER BY id DESC LIMIT 1"
                ),
                &[&id],
            )
            .await
            .map_err(sql)?;
        if let Some(row) = running {
            return Ok(Claimed::Busy(Box::new(finish_run(raw_run(&row))?)));
        }
        let mut at = now;
        loop {
            if let Some(mut claim) = start_run(&tx, &job, at, true, holder, now, ttl_ms).await? {
                tx.exec("UPDATE cron_jobs SET state = 'running' WHERE id = $1", &[&id]).await.map_err(sql)?;
                tx.commit().await.map_err(sql)?;
                claim.job.state = JobState::Running;
                return Ok(Claimed::Granted(Box::new(claim)));
            }
            at += 1;
        }
    }

    pub(crate) async fn cron_renew(&self, run_id: i64, token: &str, until: i64) -> Result<bool> {
        let client = self.client().await?;
        let n = client
            .exec(
                "UPDATE cron_runs SET lease_until = $3 WHERE id = $1 AND token = $2 AND status = 'running'",
                &[&run_id, &token, &until],
            )
            .await
            .map_err(sql)?;
        Ok(n == 1)
    }

    pub(crate) async fn cron_finish(&self, run_id: i64, token: &str, finish: &Finish, now: i64) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        let row = tx
            .qopt(
                "SELECT job_id, manual FROM cron_runs WHERE id = $1 AND token = $2 AND status = 'running'
                 FOR UPDATE",
                &[&run_id, &token],
            )
            .await
            .map_err(sql)?;
        let Some(row) = row else { return Ok(false) };
        let (job_id, manual): (String, bool) = (row.get(0), row.get(1));
        tx.exec(
            "UPDATE cron_runs SET status = $2, finished_at = $3, output = $4, error = $5,
                delivery = CASE WHEN delivery IN ('sent', 'sending') AND $6::text LIKE 'queued%' THEN delivery ELSE $6 END,
                session_id = $7 WHERE id = $1",
            &[
                &run_id,
                &finish.status.as_str(),
                &now,
                &finish.output,
                &finish.error,
                &finish.delivery,
                &finish.session_id,
            ],
        )
        .await
        .map_err(sql)?;
        settle_job(&tx, &job_id, !manual, finish.status, &finish.output, finish.error.as_deref(), now).await?;
        tx.commit().await.map_err(sql)?;
        Ok(true)
    }

    pub(crate) async fn cron_reap(&self, now: i64) -> Result<Vec<Run>> {
        let mut client = self.client().await?;
        let me = machine();
        let tx = client.transaction().await.map_err(sql)?;
        let rows = tx
            .q(
                &format!(
                    "SELECT {RUN_COLUMNS}, lease_until FROM cron_runs WHERE status = 'running'
                     FOR UPDATE SKIP LOCKED"
                ),
                &[],
            )
            .await
            .map_err(sql)?;
        let mut reaped = Vec::new();
        for row in &rows {
            let until: i64 = row.get(14);
            let mut r = finish_run(raw_run(row))?;
            if !(until <= now || (r.host == me && !alive(r.pid))) {
                continue;
            }
            let error = format!(
                "interrupted: {} (pid {} on {}) stopped before the run finished; it is not run again",
                r.holder, r.pid, r.host
            );
            tx.exec(
                "UPDATE cron_runs SET status = 'error', finished_at = $2, error = $3 WHERE id = $1",
                &[&r.id, &now, &error],
            )
            .await
            .map_err(sql)?;
            settle_job(&tx, &r.job_id, !r.manual, RunStatus::Error, "", Some(&error), now).await?;
            r.status = RunStatus::Error;
            r.finished_at = Some(now);
            r.error = Some(error);
            reaped.push(r);
        }
        tx.commit().await.map_err(sql)?;
        Ok(reaped)
    }

    pub(crate) async fn cron_runs(&self, id: &str, limit: usize) -> Result<Vec<Run>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let rows = client
            .q(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM cron_runs WHERE job_id = $1 ORDER BY started_at DESC, id DESC LIMIT $2"
                ),
                &[&id, &limit],
            )
            .await
            .map_err(sql)?;
        rows.iter().map(|r| finish_run(raw_run(r))).collect()
    }

    pub(crate) async fn cron_run(&self, run_id: i64) -> Result<Option<Run>> {
        let client = self.client().await?;
        let row = client
            .qopt(&format!("SELECT {RUN_COLUMNS} FROM cron_runs WHERE id = $1"), &[&run_id])
            .await
            .map_err(sql)?;
        row.map(|r| finish_run(raw_run(&r))).transpose()
    }

    pub(crate) async fn cron_delivery_failed(&self, run_id: i64, error: &str) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        mark_delivery_failed(&tx, run_id, error).await?;
        tx.commit().await.map_err(sql)
    }
}
