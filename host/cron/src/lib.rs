//! talaria's scheduled jobs, as people describe them: when a job runs ([`schedule`]), where its
//! answer goes ([`target`]) and who takes it to a chat ([`courier`]), and a job checked and ready
//! for the store ([`jobs`]). The store keeps jobs and claims their runs (`talaria_store::cron`);
//! the runner runs them (`talaria_scheduler::Runner`, ticked by `talaria gateway run` and by
//! `talaria cron tick`); `talaria cron` and the agent's `cronjob` tool make them.
//!
//! ```
//! use talaria_cron::jobs::{Draft, next_run, prepare};
//! let now: jiff::Timestamp = "2026-11-26T07:00:00Z".parse()?;
//! let draft = Draft {
//!     prompt: "Summarise the files in inbox/".into(),
//!     schedule: "every 2h".into(),
//!     deliver: Some("telegram:123456789".into()),
//!     ..Draft::default()
//! };
//! let job = prepare(&draft, now)?;
//! assert_eq!(job.schedule_display, "every 2h");
//! let first = job.next_run_at.expect("a first run");
//! assert_eq!(first, now.as_millisecond() + 2 * 3_600_000);
//! // A run starting late (the machine slept) is followed by the next time after it.
//! assert_eq!(next_run(&job, first + 5 * 3_600_000), Some(first + 6 * 3_600_000));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod courier;
pub mod jobs;
pub mod schedule;
pub mod target;
