//! When a job runs: a [`Schedule`], read from what a user typed.
//!
//! Four forms are understood ([`Schedule::parse`]):
//! - a delay, `30m`, `2h`, `1d`, `1w`, `1h30m` or `in 30m`: once, that long after the job is made;
//! - an interval, `every 2h`, `every 1h30m` or `every day`: counted from when the job was made;
//! - a five-field cron expression, `0 8 * * 1-5`, read in an IANA time zone (the user's, or a
//!   `CRON_TZ=Europe/Paris ` prefix);
//! - a date and time, `2026-12-01T08:00` (read in the zone) or `2026-12-01T07:00:00Z`: once.
//!
//! Delays and intervals are at least a minute, and count elapsed time: `every 1d` runs every 24
//! hours, so its local time moves when the clocks change. A cron expression names wall-clock times
//! in its zone, and clock changes follow these rules (those of Vixie cron):
//!
//! 1. **Local time holds.** `0 8 * * *` runs at 08:00 local every day; its UTC time moves by an
//!    hour when the clocks change.
//! 2. **A repeated time runs once.** When the clocks go back and 01:30 happens twice, a job whose
//!    minute and hour fields name fixed values (`30 1 * * *`, `0,30 1 * * 1-5`) runs at the first
//!    01:30 only. A job with `*`, `?` or a step in its minute or hour field (`*/15 * * * *`) runs
//!    by elapsed time, and so in both passes.
//! 3. **A skipped time runs right after the jump.** When the clocks go forward past 02:30, a
//!    fixed-time job due then (`30 2 * * *`) runs once at the first minute that exists after the
//!    jump (03:00 local), however many of its times the jump skipped. A job by elapsed time simply
//!    has no runs in the missing hour.
//! 4. **Runs move forward.** [`Schedule::next_after`] is strictly after the instant it is given,
//!    so [`Schedule::upcoming`] is strictly increasing.
//!
//! A date and time without an offset that does not exist (inside a jump forward) is moved forward
//! by the length of the jump (jiff's "compatible" choice: 02:30 becomes 03:30); one that happens
//! twice means the first.
//!
//! ```
//! use jiff::Timestamp;
//! use talaria_cron::schedule::{Kind, Schedule};
//!
//! let now: Timestamp = "2026-11-26T06:00:00Z".parse()?;
//! let weekdays = Schedule::parse("0 8 * * 1-5", Some("Europe/Paris"), now)?;
//! // 08:00 in Paris is 07:00 UTC in winter.
//! assert_eq!(weekdays.next_after(now), Some("2026-11-26T07:00:00Z".parse()?));
//! let (kind, expr) = weekdays.to_stored();
//! assert_eq!((kind, expr.as_str()), (Kind::Cron, "CRON_TZ=Europe/Paris 0 8 * * 1-5"));
//! assert_eq!(Schedule::stored(kind, &expr)?, weekdays);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt::{self, Write as _};
use std::str::FromStr;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

mod cron;

/// Valid schedules, shown in every message about an invalid one.
const EXAMPLES: &str = "Write one of: 30m (once, in 30 minutes), every 2h, \"0 8 * * 1-5\" (cron: weekdays at 08:00), \
    2026-12-01T08:00 (once, at that time)";
/// What each cron field takes.
const FIELDS: &str = "minute 0-59, hour 0-23, day of month 1-31, month 1-12 or JAN-DEC, day of week 0-7 or SUN-SAT";
/// The shortest delay or interval.
const MINUTE: SignedDuration = SignedDuration::from_secs(60);

/// When a job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Once, at this instant ("30m" from when it was made, or an ISO timestamp).
    Once { at: Timestamp },
    /// Every `every` (>= 1 minute), counted from `from` (when the job was made): runs at
    /// from+every, from+2*every, ...
    Every { every: SignedDuration, from: Timestamp },
    /// A five-field cron expression read in the IANA time zone `zone` (e.g. "Europe/Paris", or
    /// "UTC").
    Cron { expr: String, zone: String },
}

/// The three kinds of [`Schedule`], as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Once,
    Every,
    Cron,
}

/// Why a schedule could not be read. Each message says what was wrong and shows valid ones.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("the schedule is empty. {EXAMPLES}")]
    Empty,
    #[error("cannot read {input:?} as a schedule. {EXAMPLES}")]
    Unreadable { input: String },
    #[error("{input:?} is shorter than a minute, the shortest delay or interval (every 1m). {EXAMPLES}")]
    TooShort { input: String },
    #[error("{input:?} is too far in the future. {EXAMPLES}")]
    TooFar { input: String },
    #[error(
        "{input:?} has {count} fields, but a cron expression has five ({FIELDS}), without seconds or year. \
         {EXAMPLES}"
    )]
    Fields { input: String, count: usize },
    #[error("cannot read {input:?} as a cron expression: {reason} (fields: {FIELDS}). {EXAMPLES}")]
    Cron { input: String, reason: String },
    #[error("the cron expression {input:?} never runs. {EXAMPLES}")]
    Never { input: String },
    #[error("unknown time zone {zone:?}: use an IANA name such as Europe/Paris, America/New_York or UTC")]
    Zone { zone: String },
    #[error("cannot read {input:?} as a date and time: {reason}. {EXAMPLES}")]
    Time { input: String, reason: String },
    #[error("that time has passed: {input:?} is {at}. {EXAMPLES}")]
    Passed { input: String, at: String },
    #[error("unknown schedule kind {input:?}: the kinds are once, every and cron")]
    Kind { input: String },
    #[error("the stored {kind} schedule {expr:?} is damaged ({reason}); it should read like {}", kind.example())]
    Stored { kind: Kind, expr: String, reason: String },
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Every => "every",
            Self::Cron => "cron",
        }
    }

    /// A stored expression of this kind, for messages.
    fn example(self) -> &'static str {
        match self {
            Self::Once => "2026-12-01T07:00:00Z",
            Self::Every => "PT2H@2026-12-01T07:00:00Z",
            Self::Cron => "CRON_TZ=Europe/Paris 0 8 * * 1-5",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "once" => Ok(Self::Once),
            "every" => Ok(Self::Every),
            "cron" => Ok(Self::Cron),
            _ => Err(ScheduleError::Kind { input: s.to_owned() }),
        }
    }
}

impl Schedule {
    /// Read what a user typed. `zone`: the IANA zone cron expressions and ISO timestamps without
    /// an offset are read in (None: the system's zone, "UTC" if it has no IANA name). `now`: when
    /// the job is being made (delays and intervals count from it).
    ///
    /// # Errors
    /// When `input` is none of the forms in the [module docs](self), names an unknown zone, is
    /// shorter than a minute, never runs, or is a time that has passed.
    pub fn parse(input: &str, zone: Option<&str>, now: Timestamp) -> Result<Schedule, ScheduleError> {
        let text = input.trim();
        if text.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let (zone, text) = match zone_prefix(text) {
            Some((name, rest)) => (zone_named(name)?, rest),
            None => (zone.map_or_else(|| Ok(system_zone()), zone_named)?, text),
        };
        let unreadable = || ScheduleError::Unreadable { input: input.to_owned() };
        let lower = text.to_lowercase();
        if let Some(rest) = lower.strip_prefix("every").filter(|rest| rest.is_empty() || rest.starts_with(' ')) {
            let rest = rest.trim();
            let every =
                unit_secs(rest).map(SignedDuration::from_secs).or_else(|| duration(rest)).ok_or_else(unreadable)?;
            at_least_a_minute(every, input)?;
            now.checked_add(every).map_err(|_| ScheduleError::TooFar { input: input.to_owned() })?;
            return Ok(Schedule::Every { every, from: now });
        }
        if looks_like_date(text) {
            let tz = TimeZone::get(&zone).map_err(|_| ScheduleError::Zone { zone: zone.clone() })?;
            let at = instant(text, &tz)
                .map_err(|err| ScheduleError::Time { input: input.to_owned(), reason: err.to_string() })?;
            if at <= now {
                return Err(ScheduleError::Passed { input: input.to_owned(), at: show(at, &zone) });
            }
            return Ok(Schedule::Once { at });
        }
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() >= 3 && fields.iter().take(2).all(|field| cronish(field)) {
            if fields.len() != 5 {
                return Err(ScheduleError::Fields { input: input.to_owned(), count: fields.len() });
            }
            let expr = fields.join(" ");
            cron::parse(&expr).map_err(|err| ScheduleError::Cron {
                input: input.to_owned(),
                reason: err.to_string().trim_end_matches('.').to_owned(),
            })?;
            let schedule = Schedule::Cron { expr, zone };
            if schedule.next_after(now).is_none() {
                return Err(ScheduleError::Never { input: input.to_owned() });
            }
            return Ok(schedule);
        }
        let delay = duration(lower.strip_prefix("in ").unwrap_or(&lower)).ok_or_else(unreadable)?;
        at_least_a_minute(delay, input)?;
        let at = now.checked_add(delay).map_err(|_| ScheduleError::TooFar { input: input.to_owned() })?;
        Ok(Schedule::Once { at })
    }

    /// The first run strictly after `after`; None when there is none (a `Once` whose time is not
    /// after `after`, or a cron expression or zone that cannot be read).
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Once { at } => (*at > after).then_some(*at),
            Schedule::Every { every, from } => {
                let step = every.as_nanos();
                if step <= 0 {
                    return None;
                }
                let elapsed = after.as_nanosecond() - from.as_nanosecond();
                let runs = if elapsed < 0 { 1 } else { elapsed / step + 1 };
                let at = from.as_nanosecond().checked_add(runs.checked_mul(step)?)?;
                Timestamp::from_nanosecond(at).ok()
            }
            Schedule::Cron { expr, zone } => cron::next(expr, zone, after),
        }
    }

    /// The first `n` runs after `after` (for "next runs" shown before a job is saved).
    pub fn upcoming(&self, after: Timestamp, n: usize) -> Vec<Timestamp> {
        let mut runs = Vec::with_capacity(n.min(64));
        let mut last = after;
        while runs.len() < n {
            let Some(next) = self.next_after(last) else { break };
            runs.push(next);
            last = next;
        }
        runs
    }

    /// What to store: (kind, expression). `Once`: the RFC 3339 instant; `Every`: the ISO 8601
    /// duration and the instant it counts from, `PT2H@2026-12-01T07:00:00Z`; `Cron`: the
    /// expression after its zone, `CRON_TZ=Europe/Paris 0 8 * * 1-5`. Read back by
    /// [`Schedule::stored`].
    pub fn to_stored(&self) -> (Kind, String) {
        match self {
            Schedule::Once { at } => (Kind::Once, at.to_string()),
            Schedule::Every { every, from } => (Kind::Every, format!("{every}@{from}")),
            Schedule::Cron { expr, zone } => (Kind::Cron, format!("CRON_TZ={zone} {expr}")),
        }
    }

    /// Read what [`Schedule::to_stored`] wrote.
    ///
    /// # Errors
    /// [`ScheduleError::Stored`] when `expr` is not what `to_stored` writes for `kind`, or names a
    /// zone this machine does not know.
    pub fn stored(kind: Kind, expr: &str) -> Result<Schedule, ScheduleError> {
        let damaged = |reason: String| ScheduleError::Stored { kind, expr: expr.to_owned(), reason };
        match kind {
            Kind::Once => expr.parse().map(|at| Schedule::Once { at }).map_err(|err| damaged(err.to_string())),
            Kind::Every => {
                let (every, from) = expr.split_once('@').ok_or_else(|| damaged("no `@`".into()))?;
                let every: SignedDuration = every.parse().map_err(|err| damaged(format!("{err}")))?;
                let from = from.parse().map_err(|err| damaged(format!("{err}")))?;
                if every < MINUTE {
                    return Err(damaged("shorter than a minute".into()));
                }
                Ok(Schedule::Every { every, from })
            }
            Kind::Cron => {
                let (zone, rest) = zone_prefix(expr).ok_or_else(|| damaged("no `CRON_TZ=` zone".into()))?;
                TimeZone::get(zone).map_err(|err| damaged(err.to_string()))?;
                let expr = rest.split_whitespace().collect::<Vec<_>>().join(" ");
                cron::parse(&expr).map_err(|err| damaged(err.to_string()))?;
                Ok(Schedule::Cron { expr, zone: zone.to_owned() })
            }
        }
    }

    /// For people, with times in the system's zone: "once at 2026-11-26 09:30 (Europe/Paris)",
    /// "every 2h", "at 08:00, on Monday, ... and Friday (Europe/Paris)".
    pub fn display(&self) -> String {
        self.display_in(&system_zone())
    }

    /// Like [`Schedule::display`], with a `Once` shown in `zone` (a cron expression is always
    /// shown in its own zone).
    pub fn display_in(&self, zone: &str) -> String {
        match self {
            Schedule::Once { at } => {
                let tz = TimeZone::get(zone).unwrap_or(TimeZone::UTC);
                let local = jiff::fmt::strtime::format("%Y-%m-%d %H:%M", &at.to_zoned(tz));
                format!("once at {} ({zone})", local.unwrap_or_else(|_| at.to_string()))
            }
            Schedule::Every { every, .. } => format!("every {}", compact(*every)),
            Schedule::Cron { expr, zone } => {
                let described = cron::parse(expr).map_or_else(|_| expr.clone(), |cron| cron.describe());
                let described = described.trim_end_matches('.');
                let mut chars = described.chars();
                let first = chars.next().map(|c| c.to_lowercase().to_string()).unwrap_or_default();
                format!("{first}{} ({zone})", chars.as_str())
            }
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Schedule::Once { .. } => Kind::Once,
            Schedule::Every { .. } => Kind::Every,
            Schedule::Cron { .. } => Kind::Cron,
        }
    }

    pub fn is_once(&self) -> bool {
        self.kind() == Kind::Once
    }
}

/// A timestamp as people read it in a zone: "2026-11-26 09:30 CET", with seconds when it has
/// some. An unknown zone shows UTC.
pub fn show(at: Timestamp, zone: &str) -> String {
    let local = at.to_zoned(TimeZone::get(zone).unwrap_or(TimeZone::UTC));
    let format = if local.second() == 0 && local.subsec_nanosecond() == 0 {
        "%Y-%m-%d %H:%M %Z"
    } else {
        "%Y-%m-%d %H:%M:%S %Z"
    };
    jiff::fmt::strtime::format(format, &local).unwrap_or_else(|_| local.to_string())
}

/// The system's IANA zone name, "UTC" when it has none.
pub fn system_zone() -> String {
    talaria_store::local_time::zone().iana_name().unwrap_or("UTC").to_owned()
}

/// The IANA name of the zone `name`, checked.
fn zone_named(name: &str) -> Result<String, ScheduleError> {
    let tz = TimeZone::get(name).map_err(|_| ScheduleError::Zone { zone: name.to_owned() })?;
    Ok(tz.iana_name().unwrap_or(name).to_owned())
}

/// Splits `CRON_TZ=Zone rest` (or `TZ=Zone rest`) into the zone and the rest.
fn zone_prefix(text: &str) -> Option<(&str, &str)> {
    let (first, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    let (key, zone) = first.split_once('=')?;
    (key.eq_ignore_ascii_case("CRON_TZ") || key.eq_ignore_ascii_case("TZ")).then_some((zone, rest.trim_start()))
}

fn at_least_a_minute(length: SignedDuration, input: &str) -> Result<(), ScheduleError> {
    if length < MINUTE {
        return Err(ScheduleError::TooShort { input: input.to_owned() });
    }
    Ok(())
}

/// Seconds in one of a unit: `m`, `min`, `minute`, `minutes`, ...
fn unit_secs(unit: &str) -> Option<i64> {
    Some(match unit {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        "w" | "wk" | "wks" | "week" | "weeks" => 604_800,
        _ => return None,
    })
}

/// A lowercase length made of counted units: `30m`, `1h30m`, `2 hours 15 minutes`.
fn duration(text: &str) -> Option<SignedDuration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut secs: i64 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let count: i64 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let letters = rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len());
        secs = secs.checked_add(count.checked_mul(unit_secs(&rest[..letters])?)?)?;
        rest = rest[letters..].trim_start();
    }
    Some(SignedDuration::from_secs(secs))
}

/// A length for people, in the units [`duration`] reads: `1h30m`, `1d`, `2w`.
fn compact(length: SignedDuration) -> String {
    let mut secs = length.as_secs();
    let mut out = String::new();
    for (unit, size) in [("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            let _ = write!(out, "{}{unit}", secs / size);
            secs %= size;
        }
    }
    if out.is_empty() { format!("{length:#}") } else { out }
}

/// Starts like a date: four digits and a dash.
fn looks_like_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() > 4 && bytes[..4].iter().all(u8::is_ascii_digit) && bytes[4] == b'-'
}

/// The instant a date and time names: its own offset or zone if it has one, else read in `tz`.
fn instant(text: &str, tz: &TimeZone) -> Result<Timestamp, jiff::Error> {
    if text.contains('[') {
        return text.parse::<Zoned>().map(|zoned| zoned.timestamp());
    }
    text.parse::<Timestamp>().or_else(|_| Ok(text.parse::<DateTime>()?.to_zoned(tz.clone())?.timestamp()))
}

/// Could be a cron field (the first two are minute and hour).
fn cronish(field: &str) -> bool {
    field.chars().all(|c| c.is_ascii_digit() || "*,-/?".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Thursday, 09:00 in Paris.
    const NOW: &str = "2026-11-26T08:00:00Z";

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a test timestamp")
    }

    fn read(input: &str, zone: &str) -> Schedule {
        Schedule::parse(input, Some(zone), at(NOW)).expect(input)
    }

    fn runs(schedule: &Schedule, after: &str, n: usize) -> Vec<String> {
        schedule.upcoming(at(after), n).iter().map(ToString::to_string).collect()
    }

    fn refusal(input: &str, zone: &str) -> String {
        Schedule::parse(input, Some(zone), at(NOW)).expect_err(input).to_string()
    }

    #[test]
    fn delays_run_once_that_long_after_now() {
        for (input, expected) in [
            ("30m", "2026-11-26T08:30:00Z"),
            ("2h", "2026-11-26T10:00:00Z"),
            ("1d", "2026-11-27T08:00:00Z"),
            ("1w", "2026-12-03T08:00:00Z"),
            ("90s", "2026-11-26T08:01:30Z"),
            ("1h30m", "2026-11-26T09:30:00Z"),
            ("1h 30m", "2026-11-26T09:30:00Z"),
            ("in 30m", "2026-11-26T08:30:00Z"),
            ("in 2 hours", "2026-11-26T10:00:00Z"),
        ] {
            assert_eq!(read(input, "UTC"), Schedule::Once { at: at(expected) }, "{input}");
        }
    }

    #[test]
    fn intervals_count_from_when_the_job_is_made() {
        for (input, secs) in [
            ("every 2h", 7_200),
            ("every 30m", 1_800),
            ("every 1d", 86_400),
            ("every 1h30m", 5_400),
            ("Every 2 hours", 7_200),
            ("every hour", 3_600),
            ("every day", 86_400),
            ("every week", 604_800),
        ] {
            let expected = Schedule::Every { every: SignedDuration::from_secs(secs), from: at(NOW) };
            assert_eq!(read(input, "UTC"), expected, "{input}");
        }
        let hourly = read("every 1h", "UTC");
        assert_eq!(hourly.next_after(at("2026-11-26T10:30:00Z")), Some(at("2026-11-26T11:00:00Z")));
        assert_eq!(hourly.next_after(at(NOW)), Some(at("2026-11-26T09:00:00Z")), "not at `from` itself");
        assert_eq!(hourly.next_after(at("2026-11-01T00:00:00Z")), Some(at("2026-11-26T09:00:00Z")));
        assert_eq!(runs(&hourly, "2026-11-26T09:00:00Z", 2), ["2026-11-26T10:00:00Z", "2026-11-26T11:00:00Z"]);
    }

    #[test]
    fn once_has_no_run_after_its_time() {
        let once = read("30m", "UTC");
        assert_eq!(once.next_after(at("2026-11-26T08:29:59Z")), Some(at("2026-11-26T08:30:00Z")));
        assert_eq!(once.next_after(at("2026-11-26T08:30:00Z")), None);
        assert_eq!(runs(&once, NOW, 5), ["2026-11-26T08:30:00Z"]);
        assert!(once.is_once());
    }

    #[test]
    fn cron_expressions_run_at_wall_clock_times_in_their_zone() {
        let weekdays = read("0 8 * * 1-5", "Europe/Paris");
        assert_eq!(weekdays, Schedule::Cron { expr: "0 8 * * 1-5".into(), zone: "Europe/Paris".into() });
        assert_eq!(
            runs(&weekdays, NOW, 3),
            ["2026-11-27T07:00:00Z", "2026-11-30T07:00:00Z", "2026-12-01T07:00:00Z"],
            "Friday, then Monday and Tuesday"
        );
        let quarters = read("*/15  *  * * *", "UTC");
        assert_eq!(quarters, Schedule::Cron { expr: "*/15 * * * *".into(), zone: "UTC".into() });
        assert_eq!(runs(&quarters, NOW, 2), ["2026-11-26T08:15:00Z", "2026-11-26T08:30:00Z"]);
        assert_eq!(runs(&read("0 9 * * MON", "Europe/Paris"), NOW, 1), ["2026-11-30T08:00:00Z"]);
    }

    #[test]
    fn a_zone_prefix_overrides_the_zone() {
        let york = read("CRON_TZ=America/New_York 0 8 * * *", "Europe/Paris");
        assert_eq!(york, Schedule::Cron { expr: "0 8 * * *".into(), zone: "America/New_York".into() });
        assert_eq!(runs(&york, NOW, 1), ["2026-11-26T13:00:00Z"]);
        let utc = read("TZ=UTC 0 8 * * *", "Europe/Paris");
        assert_eq!(runs(&utc, NOW, 1), ["2026-11-27T08:00:00Z"], "strictly after now");
    }

    #[test]
    fn dates_and_times_run_once() {
        for input in ["2026-12-01T08:00", "2026-12-01 08:00", "2026-12-01T08:00:00+01:00", "2026-12-01T07:00:00Z"] {
            assert_eq!(read(input, "Europe/Paris"), Schedule::Once { at: at("2026-12-01T07:00:00Z") }, "{input}");
        }
        assert_eq!(
            read("2026-12-01T08:00[America/New_York]", "Europe/Paris"),
            Schedule::Once { at: at("2026-12-01T13:00:00Z") }
        );
        // 02:30 does not exist on 2027-03-14 in New York: it is read as 03:30 EDT.
        assert_eq!(read("2027-03-14T02:30", "America/New_York"), Schedule::Once { at: at("2027-03-14T07:30:00Z") });
    }

    #[test]
    fn stored_schedules_read_back() {
        for (input, zone, kind, stored) in [
            ("30m", "UTC", Kind::Once, "2026-11-26T08:30:00Z"),
            ("every 1h30m", "UTC", Kind::Every, "PT1H30M@2026-11-26T08:00:00Z"),
            ("0 8 * * 1-5", "Europe/Paris", Kind::Cron, "CRON_TZ=Europe/Paris 0 8 * * 1-5"),
        ] {
            let schedule = read(input, zone);
            assert_eq!(schedule.to_stored(), (kind, stored.to_owned()), "{input}");
            assert_eq!(schedule.kind(), kind);
            assert_eq!(Schedule::stored(kind, stored).expect(stored), schedule);
            assert_eq!(kind.as_str().parse::<Kind>().expect("a kind"), kind);
        }
        let precise = Schedule::Once { at: at("2026-11-26T08:30:00.123456789Z") };
        let (kind, stored) = precise.to_stored();
        assert_eq!(Schedule::stored(kind, &stored).expect("nanoseconds"), precise);
        let damaged = Schedule::stored(Kind::Every, "7200").expect_err("no `from`").to_string();
        assert!(damaged.contains("PT2H@2026-12-01T07:00:00Z"), "{damaged}");
        assert!("weekly".parse::<Kind>().is_err());
    }

    #[test]
    fn display_is_for_people() {
        assert_eq!(read("1h30m", "UTC").display_in("Europe/Paris"), "once at 2026-11-26 10:30 (Europe/Paris)");
        assert_eq!(read("every 2h", "UTC").display(), "every 2h");
        assert_eq!(read("every 90m", "UTC").display(), "every 1h30m");
        assert_eq!(read("every 7d", "UTC").display(), "every 1w");
        assert_eq!(
            read("0 8 * * 1-5", "Europe/Paris").display(),
            "at 08:00, on Monday, Tuesday, Wednesday, Thursday, and Friday (Europe/Paris)"
        );
        assert_eq!(show(at("2026-11-26T08:30:00Z"), "Europe/Paris"), "2026-11-26 09:30 CET");
        assert_eq!(show(at("2026-07-01T08:30:15Z"), "Europe/Paris"), "2026-07-01 10:30:15 CEST");
    }

    #[test]
    fn bad_schedules_are_refused_with_examples() {
        for (input, zone, says) in [
            ("evry 2h", "UTC", "cannot read \"evry 2h\" as a schedule"),
            ("every 10s", "UTC", "shorter than a minute"),
            ("every 0m", "UTC", "shorter than a minute"),
            ("0m", "UTC", "shorter than a minute"),
            ("0", "UTC", "cannot read \"0\""),
            ("61 * * * *", "UTC", "Number out of bounds"),
            ("0 0 8 * * *", "UTC", "has 6 fields, but a cron expression has five"),
            ("0 0 8 * * * 2026", "UTC", "has 7 fields"),
            ("0 0 30 2 *", "UTC", "never runs"),
            ("2026-11-01T08:00", "Europe/Paris", "that time has passed"),
            ("2026-13-01T08:00", "Europe/Paris", "cannot read \"2026-13-01T08:00\" as a date and time"),
            ("", "UTC", "empty"),
            ("   ", "UTC", "empty"),
            ("TZ=UTC", "UTC", "cannot read"),
        ] {
            let message = refusal(input, zone);
            assert!(message.contains(says), "{input:?}: {message}");
            assert!(message.contains("every 2h") && message.contains("\"0 8 * * 1-5\""), "{input:?}: {message}");
        }
        for message in [refusal("0 8 * * *", "Mars/Olympus"), refusal("CRON_TZ=Mars/Olympus 0 8 * * *", "UTC")] {
            assert!(message.contains("\"Mars/Olympus\"") && message.contains("Europe/Paris"), "{message}");
        }
    }
}
