//! Jobs as people make them: a [`Draft`] (what was typed on the command line or asked by the
//! `cronjob` tool) is checked and becomes a store [`Job`] with its first run worked out
//! ([`prepare`]); [`next_run`] says when a stored job runs after a run it just started.
//!
//! ```
//! use talaria_cron::jobs::{Draft, prepare};
//! let now = jiff::Timestamp::from_second(1_764_144_000)?; // 2025-11-26 08:00 UTC
//! let draft = Draft {
//!     prompt: "Summarise my inbox folder".into(),
//!     schedule: "0 8 * * 1-5".into(),
//!     zone: Some("UTC".into()),
//!     deliver: Some("telegram".into()),
//!     ..Draft::default()
//! };
//! let job = prepare(&draft, now)?;
//! assert_eq!((job.name.as_str(), job.deliver.as_str()), ("Summarise my inbox folder", "telegram"));
//! // Wednesday 08:00 is not after now: Thursday's is the first run.
//! assert_eq!(job.next_run_at, Some((now.as_second() + 86_400) * 1000));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::PathBuf;

use jiff::Timestamp;
use talaria_store::cron::Job;

use crate::schedule::{Kind, Schedule, ScheduleError};
use crate::target::{Target, TargetError};

/// Longest job name, in characters.
pub const MAX_NAME_CHARS: usize = 80;
/// Longest prompt, in bytes.
pub const MAX_PROMPT_BYTES: usize = 16 * 1024;

/// What is wrong with a job being made or changed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("{0}")]
    Invalid(String),
}

/// A job as asked for.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    /// Default: the prompt's first line, shortened.
    pub name: Option<String>,
    pub prompt: String,
    /// As typed: `30m`, `every 2h`, `0 8 * * 1-5`, `2026-12-01T08:00`.
    pub schedule: String,
    /// The IANA zone cron expressions and times without an offset are read in (default: the
    /// system's).
    pub zone: Option<String>,
    /// Where answers go (default: `origin` when made from a chat, else `local`).
    pub deliver: Option<String>,
    /// Runs in all (default: once for one-off schedules, else until removed).
    pub repeat: Option<i64>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub toolsets: Option<Vec<String>>,
    pub max_turns: Option<i64>,
    pub timeout_secs: Option<i64>,
    pub workspace: Option<PathBuf>,
    /// Approval keys its runs may use without asking (`rm-recursive`, `net:HOST`).
    pub allow: Vec<String>,
    /// The chat it is made from (`ACCOUNT:CHAT[:THREAD]`).
    pub origin: Option<String>,
    /// Who makes it (default `user`).
    pub creator: Option<String>,
    /// Make it paused.
    pub paused: bool,
}

/// Check `draft` and make the job it describes, its first run after `now`.
///
/// # Errors
/// A schedule, target, name, prompt, repeat count, limit or allowance that is not valid; each
/// message says what a valid one looks like.
pub fn prepare(draft: &Draft, now: Timestamp) -> Result<Job, Error> {
    let prompt = draft.prompt.trim();
    if prompt.is_empty() {
        return Err(Error::Invalid(
            "the job has no prompt: say what the agent should do each time, e.g. \"Summarise the files in inbox/\""
                .into(),
        ));
    }
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(Error::Invalid(format!(
            "the prompt is {} bytes; a job's prompt may have at most {MAX_PROMPT_BYTES} (put long instructions in a file the job reads)",
            prompt.len()
        )));
    }
    let schedule = Schedule::parse(&draft.schedule, draft.zone.as_deref(), now)?;
    let name = match &draft.name {
        Some(name) => check_name(name)?,
        None => default_name(prompt),
    };
    let origin = draft.origin.as_deref().map(str::parse::<Target>).transpose()?;
    if let Some(origin) = &origin
        && !matches!(origin, Target::Chat { .. })
    {
        return Err(Error::Invalid(format!("the origin `{origin}` is not a chat")));
    }
    let deliver: Target = match &draft.deliver {
        Some(d) => d.parse()?,
        None if origin.is_some() => Target::Origin,
        None => Target::Local,
    };
    if let Some(times) = draft.repeat
        && times < 1
    {
        return Err(Error::Invalid(format!(
            "--repeat {times}: a job runs at least once; leave it out to repeat until removed"
        )));
    }
    let repeat_times = draft.repeat.or(schedule.is_once().then_some(1));
    check_positive("max turns", draft.max_turns)?;
    check_positive("timeout", draft.timeout_secs)?;
    for key in &draft.allow {
        check_allowance(key)?;
    }
    let (kind, expr) = schedule.to_stored();
    let next = schedule.next_after(now).map(|t| t.as_millisecond());
    Ok(Job {
        name,
        prompt: prompt.to_string(),
        schedule_kind: kind.as_str().to_string(),
        schedule_expr: expr,
        schedule_display: schedule.display(),
        deliver: deliver.to_string(),
        origin: origin.map(|o| o.to_string()),
        repeat_times,
        enabled: !draft.paused,
        next_run_at: next,
        model: draft.model.clone(),
        provider: draft.provider.clone(),
        toolsets: draft.toolsets.clone(),
        max_turns: draft.max_turns,
        timeout_secs: draft.timeout_secs,
        workspace: draft.workspace.as_ref().map(|w| w.display().to_string()),
        allow: draft.allow.clone(),
        creator: draft.creator.clone().unwrap_or_else(|| "user".into()),
        ..Job::default()
    })
}

/// The schedule of a stored job.
///
/// # Errors
/// What is stored cannot be read (a newer talaria wrote it, or it was edited by hand).
pub fn schedule_of(job: &Job) -> Result<Schedule, ScheduleError> {
    let kind: Kind = job.schedule_kind.parse()?;
    Schedule::stored(kind, &job.schedule_expr)
}

/// When `job` runs next after a run starting at `now` (milliseconds): the first time of its
/// schedule after `now`, so a backlog collapses into the run starting now. `None`: never
/// (a one-off, or a schedule that cannot be read any more).
pub fn next_run(job: &Job, now: i64) -> Option<i64> {
    let schedule = schedule_of(job).ok()?;
    if schedule.is_once() {
        return None;
    }
    let now = Timestamp::from_millisecond(now).ok()?;
    schedule.next_after(now).map(|t| t.as_millisecond())
}

/// A name made from the prompt: its first line, at most [`MAX_NAME_CHARS`] characters.
fn default_name(prompt: &str) -> String {
    let line = prompt.lines().next().unwrap_or(prompt).trim();
    if line.chars().count() <= MAX_NAME_CHARS {
        return line.to_string();
    }
    let cut: String = line.chars().take(MAX_NAME_CHARS - 1).collect();
    format!("{}…", cut.trim_end())
}

fn check_name(name: &str) -> Result<String, Error> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(Error::Invalid(format!(
            "the name \"{name}\" is not valid: give 1 to {MAX_NAME_CHARS} characters on one line, e.g. \"morning inbox\""
        )));
    }
    Ok(name.to_string())
}

fn check_positive(what: &str, value: Option<i64>) -> Result<(), Error> {
    match value {
        Some(n) if n < 1 => Err(Error::Invalid(format!("the {what} must be at least 1 (got {n})"))),
        _ => Ok(()),
    }
}

/// An allowance is an approval key: a dangerous pattern's (`rm-recursive`, as an approval
/// prompt shows it) or `net:HOST`.
///
/// # Errors
/// It is neither.
pub fn check_allowance(key: &str) -> Result<(), Error> {
    let pattern =
        |k: &str| !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let host = |h: &str| {
        !h.is_empty()
            && !h.starts_with('.')
            && h.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
    };
    let ok = match key.strip_prefix("net:") {
        Some(h) => host(h),
        None => pattern(key),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "`{key}` is not an allowance: give a dangerous command's key as approval prompts show it (e.g. rm-recursive, git-force-push) or net:HOST (e.g. net:api.example.com)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-26T07:00:00Z".parse().expect("time")
    }

    fn draft(schedule: &str) -> Draft {
        Draft {
            prompt: "check the build".into(),
            schedule: schedule.into(),
            zone: Some("UTC".into()),
            ..Draft::default()
        }
    }

    #[test]
    fn a_one_off_runs_once_and_a_cron_until_removed() {
        let once = prepare(&draft("30m"), now()).expect("once");
        assert_eq!(once.repeat_times, Some(1));
        assert_eq!(once.next_run_at, Some(now().as_millisecond() + 30 * 60_000));
        assert_eq!(once.deliver, "local");
        let cron = prepare(&draft("0 8 * * *"), now()).expect("cron");
        assert_eq!(cron.repeat_times, None);
        assert_eq!(cron.next_run_at, Some(now().as_millisecond() + 3_600_000));
        assert_eq!(next_run(&cron, now().as_millisecond() + 3_600_000), Some(now().as_millisecond() + 25 * 3_600_000));
        assert_eq!(next_run(&once, now().as_millisecond()), None);
    }

    #[test]
    fn a_job_made_from_a_chat_answers_there() {
        let d = Draft { origin: Some("telegram:42".into()), creator: Some("chat:telegram:7".into()), ..draft("1h") };
        let job = prepare(&d, now()).expect("job");
        assert_eq!((job.deliver.as_str(), job.origin.as_deref()), ("origin", Some("telegram:42")));
        assert_eq!(job.creator, "chat:telegram:7");
        let bad = Draft { origin: Some("local".into()), ..draft("1h") };
        assert!(prepare(&bad, now()).is_err());
    }

    #[test]
    fn bad_parts_are_refused_with_an_example() {
        let cases = [
            (Draft { prompt: " ".into(), ..draft("1h") }, "Summarise the files"),
            (Draft { repeat: Some(0), ..draft("every 1h") }, "leave it out"),
            (Draft { name: Some("a\nb".into()), ..draft("1h") }, "morning inbox"),
            (Draft { allow: vec!["rm -rf".into()], ..draft("1h") }, "net:api.example.com"),
            (Draft { deliver: Some("tele gram".into()), ..draft("1h") }, "telegram:"),
            (draft("evry 2h"), "every 2h"),
        ];
        for (d, example) in cases {
            let e = prepare(&d, now()).expect_err("refused").to_string();
            assert!(e.contains(example), "{e}");
        }
        check_allowance("net:api.example.com:8443").expect("host and port");
        check_allowance("rm-recursive").expect("pattern key");
    }

    #[test]
    fn a_long_prompt_names_the_job_by_its_first_line() {
        let d = Draft { prompt: format!("{}\nmore", "x".repeat(200)), ..draft("1h") };
        let job = prepare(&d, now()).expect("job");
        assert_eq!(job.name.chars().count(), MAX_NAME_CHARS);
        assert!(job.name.ends_with('…'));
    }
}
