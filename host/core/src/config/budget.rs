//! `[budget]`: spending limits, in tokens and US dollars, per day and per month.
//!
//! ```toml
//! [budget]                          # everything together
//! monthly_cost = 50.0
//!
//! [budget.sources.gateway]          # one source: cli, acp, gateway, cron, api
//! daily_cost = 5.0
//!
//! [budget.per_user]                 # each chat-platform user on their own
//! daily_tokens = 200000
//!
//! [budget.users."telegram:12345"]   # one user (PLATFORM:USER_ID), instead of per_user
//! daily_tokens = 2000000
//!
//! [budget.per_job]                  # each scheduled job on its own
//! daily_tokens = 100000
//!
//! [budget.jobs.JOB_ID]              # one job, instead of per_job
//! monthly_cost = 2.0
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

/// Limits of one scope; none set: no limit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Input and output tokens per day (the host's local day).
    pub daily_tokens: Option<u64>,
    /// US dollars per day, over turns whose model has a price.
    pub daily_cost: Option<f64>,
    pub monthly_tokens: Option<u64>,
    pub monthly_cost: Option<f64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// `[budget]`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetToml {
    pub daily_tokens: Option<u64>,
    pub daily_cost: Option<f64>,
    pub monthly_tokens: Option<u64>,
    pub monthly_cost: Option<f64>,
    /// Per source (`cli`, `acp`, `gateway`, `cron`, `api`).
    #[serde(default)]
    pub sources: BTreeMap<String, Limits>,
    /// Each chat-platform user's own, unless [`BudgetToml::users`] names them.
    pub per_user: Option<Limits>,
    /// Named users (`PLATFORM:USER_ID`).
    #[serde(default)]
    pub users: BTreeMap<String, Limits>,
    /// Each scheduled job's own, unless [`BudgetToml::jobs`] names it.
    pub per_job: Option<Limits>,
    /// Named jobs (by id).
    #[serde(default)]
    pub jobs: BTreeMap<String, Limits>,
}

impl BudgetToml {
    /// The limits over everything.
    pub fn all(&self) -> Limits {
        Limits {
            daily_tokens: self.daily_tokens,
            daily_cost: self.daily_cost,
            monthly_tokens: self.monthly_tokens,
            monthly_cost: self.monthly_cost,
        }
    }

    /// The limits of `user`.
    pub fn user(&self, user: &str) -> Option<Limits> {
        self.users.get(user).copied().or(self.per_user)
    }

    /// The limits of job `id`.
    pub fn job(&self, id: &str) -> Option<Limits> {
        self.jobs.get(id).copied().or(self.per_job)
    }

    /// Whether any limit is set (else no turn looks at its spend).
    pub fn is_set(&self) -> bool {
        let any = |l: &Limits| !l.is_empty();
        any(&self.all())
            || self.sources.values().any(any)
            || self.per_user.as_ref().is_some_and(any)
            || self.users.values().any(any)
            || self.per_job.as_ref().is_some_and(any)
            || self.jobs.values().any(any)
    }

    /// What is wrong with it (a negative or not-a-number cost), said for the user.
    pub(crate) fn check(&self) -> Result<(), String> {
        let scopes = std::iter::once(("[budget]".to_string(), self.all()))
            .chain(self.sources.iter().map(|(k, l)| (format!("[budget.sources.{k}]"), *l)))
            .chain(self.per_user.iter().map(|l| ("[budget.per_user]".to_string(), *l)))
            .chain(self.users.iter().map(|(k, l)| (format!("[budget.users.\"{k}\"]"), *l)))
            .chain(self.per_job.iter().map(|l| ("[budget.per_job]".to_string(), *l)))
            .chain(self.jobs.iter().map(|(k, l)| (format!("[budget.jobs.{k}]"), *l)));
        for (name, limits) in scopes {
            for (key, cost) in [("daily_cost", limits.daily_cost), ("monthly_cost", limits.monthly_cost)] {
                if let Some(c) = cost.filter(|c| !c.is_finite() || *c < 0.0) {
                    return Err(format!("{name} {key} = {c}: a cost limit is US dollars, 0 or more"));
                }
            }
        }
        Ok(())
    }
}
