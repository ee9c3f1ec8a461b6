//! The cron page: scheduled jobs, with their next runs; a new job previewed (its next runs
//! shown) before it is saved; pause, resume, run now; and a job's history.
//!
//! A job added here keeps its answers locally (`deliver = local`) and has no allowances:
//! delivering to a chat and letting a job's commands skip their approvals are decided at the
//! terminal (`talaria cron add --deliver ... --allow ...`), where the consent is asked.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Response;
use axum::{Extension, Form};
use http::StatusCode;
use jiff::Timestamp;
use maud::{Markup, html};
use serde::Deserialize;
use talaria_core::cron::jobs::{self, Draft};
use talaria_core::cron::schedule::{show as show_at, system_zone};
use talaria_core::store::cron::{Job, RunStatus};

use super::{Visitor, page};
use crate::Served;

/// Upcoming runs shown for a job.
const UPCOMING: usize = 5;

/// A time in the server's zone.
fn at(ms: i64) -> String {
    Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| show_at(t, &system_zone()))
}

/// The job's next runs (none when paused or done).
fn next_runs(job: &Job, now: Timestamp, n: usize) -> Vec<String> {
    let Some(first) = job.next_run_at else { return Vec::new() };
    let left = job.repeat_times.map_or(usize::MAX, |t| usize::try_from(t - job.repeat_done).unwrap_or(0));
    let upcoming = jobs::schedule_of(job).map(|s| s.upcoming(now, n)).unwrap_or_default();
    std::iter::once(first)
        .chain(upcoming.iter().map(|t| t.as_millisecond()).filter(|t| *t > first))
        .take(n.min(left))
        .map(at)
        .collect()
}

fn status_word(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "running",
        RunStatus::Ok => "ok",
        RunStatus::Error => "failed",
        RunStatus::DeliveryFailed => "not delivered",
    }
}

/// What the add form holds.
#[derive(Deserialize, Default, Clone)]
pub(crate) struct NewJob {
    #[serde(default)]
    name: String,
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    schedule: String,
}

impl NewJob {
    fn draft(&self, served: &Served) -> Draft {
        Draft {
            name: Some(self.name.trim().to_string()).filter(|n| !n.is_empty()),
            prompt: self.prompt.clone(),
            schedule: self.schedule.clone(),
            deliver: Some("local".into()),
            workspace: Some(served.host.workspace().to_path_buf()),
            creator: Some("dashboard".into()),
            ..Draft::default()
        }
    }
}

/// `GET /cron`.
pub(crate) async fn list(State(served): State<Arc<Served>>, Extension(visitor): Extension<Visitor>) -> Response {
    shown(&served, &visitor, None, &NewJob::default(), None).await
}

/// The page: what an action did (`said`), the jobs, and the add form (with a preview).
async fn shown(
    served: &Served,
    visitor: &Visitor,
    said: Option<(bool, String)>,
    form: &NewJob,
    preview: Option<Markup>,
) -> Response {
    let now = Timestamp::now();
    let jobs = served.host.store().cron_jobs().await;
    let body = html! {
        h1 { "Cron jobs" }
        @if let Some((ok, text)) = &said {
            p class=(if *ok { "done" } else { "refused" }) role="status" { (text) }
        }
        @match &jobs {
            Err(e) => p.refused { "The jobs cannot be read: " (e) },
            Ok(jobs) if jobs.is_empty() => p { "No jobs yet." },
            Ok(jobs) => table.sessions.jobs {
                thead { tr { th { "Job" } th { "Schedule" } th { "Next runs" } th { "Last" } th { "" } } }
                tbody {
                    @for job in jobs {
                        tr id=(format!("job-{}", job.id)) {
                            td { a href=(format!("/cron/{}", job.id)) { (job.name) } br; small.id { (job.id) } }
                            td { (job.schedule_display) }
                            td {
                                @if !job.enabled { "paused" }
                                @else {
                                    @let next = next_runs(job, now, 3);
                                    @if next.is_empty() { "none" } @else { (next.join(", ")) }
                                }
                            }
                            td { @match job.last_status { Some(s) => (status_word(s)), None => "-" } }
                            td.actions {
                                (action(visitor, &job.id, if job.enabled { "pause" } else { "resume" }, if job.enabled { "Pause" } else { "Resume" }))
                                (action(visitor, &job.id, "run", "Run now"))
                            }
                        }
                    }
                }
            },
        }
        h2 { "New job" }
        form #new-job method="post" action="/cron/preview" {
            input type="hidden" name="csrf" value=(visitor.csrf);
            label for="job-name" { "Name (optional)" }
            input #job-name name="name" value=(form.name);
            label for="job-prompt" { "Prompt: the whole task, for an agent that remembers nothing" }
            textarea #job-prompt name="prompt" rows="3" required { (form.prompt) }
            label for="job-schedule" { "Schedule: 30m, every 2h, 0 8 * * 1-5, 2026-12-24T08:00" }
            input #job-schedule name="schedule" value=(form.schedule) required;
            p.hint { "Times are read in " (system_zone()) ". Answers are kept locally; deliver to a chat, or allow commands without approval, with `talaria cron add`." }
            div.buttons {
                button type="submit" { "Preview" }
                @if preview.is_some() { button #save type="submit" formaction="/cron/add" { "Save" } }
            }
        }
        @if let Some(preview) = preview { (preview) }
    };
    let mut response = page(visitor, "cron", "Cron", body);
    if said.as_ref().is_some_and(|(ok, _)| !ok) {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    response
}

fn action(visitor: &Visitor, id: &str, verb: &str, label: &str) -> Markup {
    html! {
        form.inline method="post" action=(format!("/cron/{id}/{verb}")) {
            input type="hidden" name="csrf" value=(visitor.csrf);
            button type="submit" data-action=(verb) { (label) }
        }
    }
}

/// `POST /cron/preview`: the job checked, and its next runs, before it is saved.
pub(crate) async fn preview(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Form(form): Form<NewJob>,
) -> Response {
    let now = Timestamp::now();
    match jobs::prepare(&form.draft(&served), now) {
        Ok(job) => {
            let runs = next_runs(&job, now, UPCOMING);
            let preview = html! {
                section #preview {
                    h2 { "Preview: " (job.name) }
                    p { (job.schedule_display) }
                    p { "Its next runs:" }
                    ol.runs { @for run in &runs { li { (run) } } }
                }
            };
            shown(&served, &visitor, None, &form, Some(preview)).await
        }
        Err(e) => shown(&served, &visitor, Some((false, e.to_string())), &form, None).await,
    }
}

/// `POST /cron/add`: save the job.
pub(crate) async fn add(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Form(form): Form<NewJob>,
) -> Response {
    let job = match jobs::prepare(&form.draft(&served), Timestamp::now()) {
        Ok(job) => job,
        Err(e) => return shown(&served, &visitor, Some((false, e.to_string())), &form, None).await,
    };
    let said = match served.host.store().cron_insert(&job).await {
        Ok(id) => {
            (true, format!("Saved job {id} ({}); it runs when a gateway or `talaria cron tick` is running.", job.name))
        }
        Err(e) => (false, format!("The job cannot be saved: {e}")),
    };
    shown(&served, &visitor, Some(said), &NewJob::default(), None).await
}

/// `POST /cron/{id}/pause` and `/resume`.
pub(crate) async fn pause(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Path((id, verb)): Path<(String, String)>,
) -> Response {
    let paused = match verb.as_str() {
        "pause" => true,
        "resume" => false,
        "run" => return run(&served, &visitor, &id).await,
        _ => {
            return shown(&served, &visitor, Some((false, format!("no action `{verb}`"))), &NewJob::default(), None)
                .await;
        }
    };
    let store = served.host.store();
    let said = match store.cron_job(&id).await {
        Ok(mut job) => {
            job.enabled = !paused;
            if !paused {
                // Resumed: from its next time after now (what it missed is not run).
                let now = Timestamp::now().as_millisecond();
                if job.next_run_at.is_some_and(|at| at < now) && job.schedule_kind != "once" {
                    job.next_run_at = jobs::next_run(&job, now);
                }
            }
            match store.cron_update(&job).await {
                Ok(()) => (true, format!("{} {} ({}).", if paused { "Paused" } else { "Resumed" }, job.id, job.name)),
                Err(e) => (false, e.to_string()),
            }
        }
        Err(e) => (false, e.to_string()),
    };
    shown(&served, &visitor, Some(said), &NewJob::default(), None).await
}

/// Run the job now, and say how it went.
async fn run(served: &Served, visitor: &Visitor, id: &str) -> Response {
    let said = match &served.jobs {
        None => (false, "This server cannot run jobs: `talaria cron run JOB` does.".to_string()),
        Some(jobs) => match jobs.run_now(id).await {
            Ok(report) => (true, report),
            Err(e) => (false, e),
        },
    };
    shown(served, visitor, Some(said), &NewJob::default(), None).await
}

/// `GET /cron/{id}`: a job and its runs.
pub(crate) async fn history(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Path(id): Path<String>,
) -> Response {
    let store = served.host.store();
    let job = match store.cron_job(&id).await {
        Ok(job) => job,
        Err(e) => {
            let mut response = page(&visitor, "cron", "No such job", html! { h1 { "No such job" } p { (e) } });
            *response.status_mut() = StatusCode::NOT_FOUND;
            return response;
        }
    };
    let runs = store.cron_runs(&job.id, 50).await.unwrap_or_default();
    let body = html! {
        h1 { (job.name) }
        dl.facts {
            dt { "Id" } dd { code { (job.id) } }
            dt { "Schedule" } dd { (job.schedule_display) }
            dt { "State" } dd { (job.state.as_str()) }
            dt { "Deliver" } dd { (job.deliver) }
            dt { "Prompt" } dd { div.text { (job.prompt) } }
        }
        h2 { "Runs" }
        @if runs.is_empty() { p { "It has not run yet." } }
        @for r in &runs {
            article.run {
                h2 { (at(r.started_at)) " — " (status_word(r.status)) @if r.manual { " (run by hand)" } }
                @if let Some(e) = &r.error { p.refused { (e) } }
                @if let Some(out) = &r.output { div.text { (out) } }
                @if let Some(s) = &r.session_id { p.hint { "Session " a href=(format!("/sessions/{s}")) { (s) } } }
            }
        }
    };
    page(&visitor, "cron", &job.name, body)
}
