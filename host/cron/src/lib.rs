//! talaria's scheduled jobs.

pub mod jobs;
pub mod schedule;
pub mod target;
