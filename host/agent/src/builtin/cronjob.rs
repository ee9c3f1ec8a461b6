//! `cronjob`: the agent schedules, lists and removes the user's jobs (reference §11).
//!
//! 1. **The user confirms what is scheduled.** `add` shows the job (its schedule, next run,
//!    where answers go, its prompt and any allowances) as an approval of its own kind
//!    ([`ApprovalKind::Schedule`]) and saves it only on a yes. Yolo does not answer it, and with
//!    nobody to ask it is refused. In a gateway chat only the platform's admins answer approvals,
//!    so only they can schedule from a chat.
//! 2. **No job makes jobs.** The tool is never offered to scheduled runs or child agents, and a
//!    call that arrives anyway is refused.
//! 3. A job made from a chat delivers there by default and is made by that chat
//!    (`chat:ACCOUNT:CHAT`); `list` and `remove` see only that chat's jobs, the terminal sees all.
//! 4. **A job can do no more than the chat that made it:** its runs get exactly the tools that
//!    chat's session has (never the owner's defaults, which may include a terminal), and no
//!    allowances (only `talaria cron edit --allow` gives those).

use serde_json::{Value, json};
use talaria_cron::jobs::{Draft, prepare};
use talaria_cron::schedule::{show, system_zone};
use talaria_protocol::{ApprovalKind, ToolAnnotations, ToolError, ToolSpec};
use talaria_store::Store;
use talaria_store::cron::Job;

use crate::approval::{Ask, Decision, Gate};
use crate::{AgentConfig, Platform};

pub const NAME: &str = "cronjob";

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.into(),
        description: "Schedule a task to run later or repeatedly, list scheduled jobs, or remove one. Each run \
                      is a fresh agent with no memory of this chat (make the prompt self-contained); its answer \
                      is delivered here. The user must confirm. Schedules: 30m | 2h | 1d (once), every 2h, \
                      cron \"0 8 * * 1-5\", or 2026-12-01T08:00 (once)."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "list", "remove"]},
                "schedule": {"type": "string"},
                "prompt": {"type": "string", "description": "The whole task for each run."},
                "name": {"type": "string"},
                "timezone": {"type": "string", "description": "IANA zone, e.g. Europe/Paris (default: the user's)."},
                "deliver": {"type": "string", "description": "origin (here, default), local (kept only), ACCOUNT or ACCOUNT:CHAT."},
                "repeat": {"type": "integer", "minimum": 1, "description": "Stop after this many runs."},
                "job_id": {"type": "string", "description": "For remove."}
            },
            "required": ["action"],
            "additionalProperties": false
        }),
        plugin: super::PROVIDER.into(),
        // It asks the user: never beside other calls.
        annotations: ToolAnnotations::default(),
    }
}

/// Carry out a `cronjob` call for a session configured by `config`.
///
/// # Errors
/// Bad arguments, a refused or unconfirmed job, a scheduled run calling it, or the store.
pub async fn call(
    store: &std::sync::Arc<Store>,
    gate: &Gate,
    config: &AgentConfig,
    tools: &[std::sync::Arc<ToolSpec>],
    args: &Value,
    call_id: &str,
) -> Result<Value, ToolError> {
    if config.platform == Platform::Cron {
        return Err(ToolError::Failed("scheduled runs cannot schedule jobs".into()));
    }
    let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let creator = config.origin.as_ref().map(|o| format!("chat:{o}"));
    match text("action") {
        Some("add") => {
            // From a chat: the session's own tools, and nothing the owner's defaults would add.
            let toolsets = config
                .origin
                .as_ref()
                .map(|_| tools.iter().map(|t| t.name.clone()).filter(|name| name != NAME).collect::<Vec<_>>());
            add(store, gate, config, args, Made { creator, toolsets }, call_id).await
        }
        Some("list") => {
            let jobs = mine(store, creator.as_deref()).await?;
            let listed: Vec<Value> = jobs.iter().map(brief).collect();
            Ok(json!({ "jobs": listed }))
        }
        Some("remove") => {
            let id = text("job_id").ok_or_else(|| ToolError::InvalidArgs("`job_id` is required to remove".into()))?;
            let jobs = mine(store, creator.as_deref()).await?;
            let Some(job) = jobs.into_iter().find(|j| j.id == id) else {
                return Err(ToolError::Failed(format!("no job {id} here; `list` shows the jobs")));
            };
            crate::on_store(store, async |s| s.cron_remove(&job.id).await).await.map_err(store_error)?;
            Ok(json!({ "removed": job.id, "name": job.name }))
        }
        Some(other) => Err(ToolError::InvalidArgs(format!("unknown action `{other}`: use add, list or remove"))),
        None => Err(ToolError::InvalidArgs("`action` is required: add, list or remove".into())),
    }
}

/// Who makes a job, and the tools its runs get (`None`: the configured defaults).
struct Made {
    creator: Option<String>,
    toolsets: Option<Vec<String>>,
}

async fn add(
    store: &std::sync::Arc<Store>,
    gate: &Gate,
    config: &AgentConfig,
    args: &Value,
    made: Made,
    call_id: &str,
) -> Result<Value, ToolError> {
    let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_string);
    let draft = Draft {
        name: text("name"),
        prompt: text("prompt").unwrap_or_default(),
        schedule: text("schedule").unwrap_or_default(),
        zone: text("timezone"),
        deliver: text("deliver"),
        repeat: args.get("repeat").and_then(Value::as_i64),
        workspace: Some(config.workspace.clone()),
        origin: config.origin.clone(),
        creator: made.creator,
        toolsets: made.toolsets,
        ..Draft::default()
    };
    let now = jiff::Timestamp::now();
    let job = prepare(&draft, now).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
    if !gate.interactive() {
        return Err(ToolError::Failed(
            "nobody here can confirm a schedule, so none was made; the user can add it with `talaria cron add`".into(),
        ));
    }
    let next = job.next_run_at.and_then(|t| jiff::Timestamp::from_millisecond(t).ok());
    let next = next.map_or_else(|| "never".to_string(), |t| show(t, &system_zone()));
    let target = match (job.deliver.as_str(), &job.origin) {
        ("origin", Some(_)) => "answers to this chat".to_string(),
        ("origin" | "local", _) => "answers kept, not sent".to_string(),
        (other, _) => format!("answers to {other}"),
    };
    let described = format!(
        "\"{}\": {}, next {next}, {target}: {}",
        job.name,
        job.schedule_display,
        crate::tools::one_line(&job.prompt, 300)
    );
    let ask = Ask {
        kind: ApprovalKind::Schedule,
        plugin: super::PROVIDER,
        command: &described,
        reason: if config.origin.is_some() {
            "each run is a new agent with this chat's tools and nobody to ask"
        } else {
            "each run is a new agent with nobody to ask: dangerous commands and new hosts are denied"
        },
        call_id,
    };
    match gate.ask_human(&ask).await {
        Decision::Once | Decision::Session | Decision::Always => {}
        Decision::Deny => {
            return Err(ToolError::Failed(
                "the user did not confirm the job, so it was not scheduled; do not try again unless they ask".into(),
            ));
        }
    }
    let id = crate::on_store(store, async |s| s.cron_insert(&job).await).await.map_err(store_error)?;
    Ok(
        json!({ "scheduled": id, "name": job.name, "schedule": job.schedule_display, "next_run": next, "deliver": job.deliver }),
    )
}

/// The jobs this session may see: a chat's own, or all of them from the terminal.
async fn mine(store: &std::sync::Arc<Store>, creator: Option<&str>) -> Result<Vec<Job>, ToolError> {
    let all = crate::on_store(store, async |s| s.cron_jobs().await).await.map_err(store_error)?;
    Ok(match creator {
        Some(c) => all.into_iter().filter(|j| j.creator == c).collect(),
        None => all,
    })
}

fn brief(job: &Job) -> Value {
    let next = job.next_run_at.and_then(|t| jiff::Timestamp::from_millisecond(t).ok());
    json!({
        "id": job.id,
        "name": job.name,
        "schedule": job.schedule_display,
        "next_run": next.map(|t| show(t, &system_zone())),
        "state": job.state.as_str(),
        "last_status": job.last_status.map(talaria_store::cron::RunStatus::as_str),
        "deliver": job.deliver,
    })
}

fn store_error(e: impl std::fmt::Display) -> ToolError {
    ToolError::Failed(format!("the job store: {e}"))
}
