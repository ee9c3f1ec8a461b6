//! The spending limits of `[budget]` ([`crate::config::BudgetToml`]), looked at when a turn is
//! about to start: a turn starts only while every limit that covers it has room (over
//! everything, its source, the chat user who sent it, the scheduled job it runs for). A turn
//! that started runs to its end, so no tool call is ever cut, and its spend may take a scope
//! past its limit: the next turn there is refused. Days and months are the host's local ones.
//!
//! What a scope spent is read from the store's record of ended turns
//! ([`talaria_store::Store::spent`]), so processes sharing a store share the limits. When it
//! cannot be read, the turn is refused: a limit that cannot be checked is not one.
//!
//! The first refusal of each scope and period is told to the owner once: a warning in the log,
//! and a [`BUDGET_REACHED`] notice on the store (the gateway sends it to its home channels).

use jiff::{ToSpan as _, Zoned};
use talaria_protocol::thousands;
use talaria_store::Store;
use talaria_store::turns::Spender;

use crate::config::{BudgetToml, Limits};

/// The store's notice topic of a limit reached for the first time in its period; the payload
/// is the limit and its period (a key) and the refusal's text, a line break between them.
pub const BUDGET_REACHED: &str = "budget-reached";

/// The key-value space where each limit reached in a period is noted (so it is told once).
const TOLD_SPACE: &str = "talaria.budget";

/// Whom a turn's spend counts for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Whose<'a> {
    pub source: &'a str,
    pub sender: Option<&'a str>,
    pub job: Option<&'a str>,
}

/// A limit reached: what to tell the user, and the key noting it for its period.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reached {
    pub text: String,
    key: String,
}

/// The first limit covering `whose` that has no room left at `now`, if any.
pub(crate) async fn reached(budget: &BudgetToml, store: &Store, whose: Whose<'_>, now: &Zoned) -> Option<Reached> {
    let spenders = [
        Some(Spender::All),
        Some(Spender::Source(whose.source)),
        whose.sender.map(Spender::Sender),
        whose.job.map(Spender::Job),
    ];
    for (who, name, limits) in spenders.into_iter().flatten().filter_map(|who| scope(budget, who)) {
        for period in [Period::Day, Period::Month] {
            if let Some(reached) = over(store, who, &name, &limits, period, now).await {
                return Some(reached);
            }
        }
    }
    None
}

/// `who` as a limit names it, and its limits, when `budget` sets any for it.
fn scope<'a>(budget: &BudgetToml, who: Spender<'a>) -> Option<(Spender<'a>, String, Limits)> {
    let (name, limits) = match who {
        Spender::All => ("all turns".to_string(), Some(budget.all())),
        Spender::Source(s) => (format!("{s} turns"), budget.sources.get(s).copied()),
        Spender::Sender(u) => (format!("user {u}"), budget.user(u)),
        Spender::Job(j) => (format!("job {j}"), budget.job(j)),
    };
    limits.filter(|l| !l.is_empty()).map(|l| (who, name, l))
}

#[derive(Debug, Clone, Copy)]
enum Period {
    Day,
    Month,
}

impl Period {
    /// When the period holding `now` began and when the next begins.
    fn bounds(self, now: &Zoned) -> Option<(Zoned, Zoned)> {
        match self {
            Self::Day => {
                let start = now.start_of_day().ok()?;
                let next = start.checked_add(1.day()).ok()?.start_of_day().ok()?;
                Some((start, next))
            }
            Self::Month => {
                let start = now.first_of_month().ok()?.start_of_day().ok()?;
                let next = start.checked_add(1.month()).ok()?.start_of_day().ok()?;
                Some((start, next))
            }
        }
    }

    /// The token and cost limits of this period.
    fn limits(self, limits: &Limits) -> (Option<u64>, Option<f64>) {
        match self {
            Self::Day => (limits.daily_tokens, limits.daily_cost),
            Self::Month => (limits.monthly_tokens, limits.monthly_cost),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Day => "daily",
            Self::Month => "monthly",
        }
    }

    fn this(self) -> &'static str {
        match self {
            Self::Day => "today",
            Self::Month => "this month",
        }
    }
}

/// A limit of one scope and period, and how much of it is used.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    /// `all turns`, `gateway turns`, `user telegram:42`, `job 3f2a`.
    pub scope: String,
    /// `daily` or `monthly`.
    pub period: &'static str,
    /// `1,000 tokens`, `$5.00`.
    pub limit: String,
    /// `1,200 tokens`, `$0.42`.
    pub used: String,
    pub over: bool,
    /// When the period ends, local time.
    pub resets: String,
}

/// Every limit of `budget` with what its scope spent in its period up to `now`: over all
/// turns, each configured source, named user and job, and each user or job that spent this
/// month when `per_user` or `per_job` is set.
///
/// # Errors
/// The store cannot be read.
pub async fn standings(budget: &BudgetToml, store: &Store, now: &Zoned) -> Result<Vec<Standing>, talaria_store::Error> {
    let mut users: Vec<String> = budget.users.keys().cloned().collect();
    let mut jobs: Vec<String> = budget.jobs.keys().cloned().collect();
    if (budget.per_user.is_some() || budget.per_job.is_some())
        && let Some((month, _)) = Period::Month.bounds(now)
    {
        for turn in store.turns_since(month.timestamp().as_millisecond()).await? {
            if budget.per_user.is_some() {
                users.extend(turn.sender);
            }
            if budget.per_job.is_some() {
                jobs.extend(turn.job);
            }
        }
    }
    users.sort();
    users.dedup();
    jobs.sort();
    jobs.dedup();
    let spenders = std::iter::once(Spender::All)
        .chain(budget.sources.keys().map(|s| Spender::Source(s)))
        .chain(users.iter().map(|u| Spender::Sender(u)))
        .chain(jobs.iter().map(|j| Spender::Job(j)));
    let mut out = Vec::new();
    for (who, scope, limits) in spenders.filter_map(|who| scope(budget, who)) {
        for period in [Period::Day, Period::Month] {
            let (tokens, cost) = period.limits(&limits);
            if tokens.is_none() && cost.is_none() {
                continue;
            }
            let Some((start, next)) = period.bounds(now) else { continue };
            let spent = store.spent(who, start.timestamp().as_millisecond()).await?;
            let resets = next.strftime("%Y-%m-%d %H:%M %Z").to_string();
            let row = |limit: String, used: String, over: bool| Standing {
                scope: scope.clone(),
                period: period.name(),
                limit,
                used,
                over,
                resets: resets.clone(),
            };
            if let Some(l) = tokens {
                out.push(row(
                    format!("{} tokens", thousands(l)),
                    format!("{} tokens", thousands(spent.tokens)),
                    spent.tokens >= l,
                ));
            }
            if let Some(l) = cost {
                out.push(row(format!("${l:.2}"), format!("${:.2}", spent.cost), spent.cost >= l));
            }
        }
    }
    Ok(out)
}

/// Whether `who` has used up a limit of `period`.
async fn over(
    store: &Store,
    who: Spender<'_>,
    name: &str,
    limits: &Limits,
    period: Period,
    now: &Zoned,
) -> Option<Reached> {
    let (tokens, cost) = period.limits(limits);
    if tokens.is_none() && cost.is_none() {
        return None;
    }
    let Some((start, next)) = period.bounds(now) else {
        return Some(Reached {
            text: format!("The {} budget of {name} cannot be checked: the local date is out of range.", period.name()),
            key: String::new(),
        });
    };
    let spent = match store.spent(who, start.timestamp().as_millisecond()).await {
        Ok(spent) => spent,
        Err(e) => {
            return Some(Reached {
                text: format!(
                    "The {} budget of {name} cannot be checked, so no turn starts: the store cannot be read ({e}).",
                    period.name()
                ),
                key: String::new(),
            });
        }
    };
    let used = if let Some(limit) = tokens.filter(|l| spent.tokens >= *l) {
        format!("{} of {} tokens", thousands(spent.tokens), thousands(limit))
    } else if let Some(limit) = cost.filter(|l| spent.cost >= *l) {
        format!("${:.2} of ${limit:.2}", spent.cost)
    } else {
        return None;
    };
    let resets = next.strftime("%Y-%m-%d %H:%M %Z");
    let wait = next.timestamp().duration_since(now.timestamp());
    let text = format!(
        "The {} budget of {name} is used up ({used} {}). It resets at {resets} (in {}).",
        period.name(),
        period.this(),
        wait_text(wait)
    );
    let key = format!("{}:{name}:{}", period.name(), start.strftime("%Y-%m-%d"));
    Some(Reached { text, key })
}

/// Tell the owner of `reached` once per scope and period: the first process to note it in the
/// store logs it and sends the notice.
pub(crate) async fn tell_owner(store: &Store, reached: &Reached) {
    if reached.key.is_empty() {
        tracing::warn!("{}", reached.text);
        return;
    }
    let first = store.kv_compare_and_set(TOLD_SPACE, &reached.key, None, Some(b"told")).await;
    if let Err(e) = &first {
        tracing::warn!(limit = %reached.key, "a spending limit is reached ({}), and cannot be noted as told: {e}", reached.text);
    }
    if matches!(first, Ok(true)) {
        tracing::warn!(limit = %reached.key, "a spending limit is reached: {}", reached.text);
        if let Err(e) = store.notify(BUDGET_REACHED, &format!("{}\n{}", reached.key, reached.text)).await {
            tracing::warn!("cannot send the notice of a spending limit reached: {e}");
        }
    }
}

/// A wait as hours and minutes (`5h 12m`), or days for a long one.
fn wait_text(wait: jiff::SignedDuration) -> String {
    let minutes = u64::try_from(wait.as_secs()).unwrap_or(0).div_ceil(60);
    match (minutes / 60, minutes % 60) {
        (h, _) if h >= 48 => format!("{} days", h.div_ceil(24)),
        (0, m) => format!("{m}m"),
        (h, m) => format!("{h}h {m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_and_a_month_end_at_the_next_local_midnight_and_first() {
        let now: Zoned = "2026-12-03T15:20:00[Europe/Berlin]".parse().expect("time");
        let (start, next) = Period::Day.bounds(&now).expect("day");
        assert_eq!(start.to_string(), "2026-12-03T00:00:00+01:00[Europe/Berlin]");
        assert_eq!(next.to_string(), "2026-12-04T00:00:00+01:00[Europe/Berlin]");
        let (start, next) = Period::Month.bounds(&now).expect("month");
        assert_eq!(start.to_string(), "2026-12-01T00:00:00+01:00[Europe/Berlin]");
        assert_eq!(next.to_string(), "2027-01-01T00:00:00+01:00[Europe/Berlin]");
    }

    #[test]
    fn waits_read_as_people_write_them() {
        assert_eq!(wait_text(jiff::SignedDuration::from_secs(8 * 3600 + 40 * 60 - 5)), "8h 40m");
        assert_eq!(wait_text(jiff::SignedDuration::from_secs(59)), "1m");
        assert_eq!(wait_text(jiff::SignedDuration::from_secs(20 * 86_400)), "20 days");
    }
}
