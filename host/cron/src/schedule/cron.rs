//! The runs of a five-field cron expression in a time zone, by the rules in the
//! [`schedule`](super) docs. croner finds wall-clock matches, and resolves a repeated or skipped
//! time for a job with one fixed minute and hour; this module extends rules 2 and 3 to every job
//! whose minute and hour fields name fixed values (croner runs `0,30 1 * * *` in both passes of a
//! repeated hour and skips `0,30 2 * * *` in a jump), and makes sure runs move forward.
//!
//! ```text
//! 30 2 * * *    America/New_York, 2026-03-08 (02:00 -> 03:00):  03:00 EDT
//! 0,30 2 * * *  America/New_York, 2026-03-08:                   03:00 EDT, once
//! 0,30 1 * * *  America/New_York, 2026-11-01 (02:00 -> 01:00):  01:00 EDT, 01:30 EDT
//! */30 * * * *  America/New_York, 2026-11-01:                   01:00 EDT, 01:30 EDT, 01:00 EST, ...
//! ```

use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp, Zoned};

/// How many repeats of a wall-clock time a search skips before it gives up.
const MAX_SKIPS: usize = 1_000;

/// A five-field cron expression.
pub(super) fn parse(expr: &str) -> Result<Cron, CronError> {
    CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build().parse(expr)
}

/// The first run of `expr` in the zone named `zone` strictly after `after`; None when there is
/// none, or `expr` or `zone` cannot be read.
pub(super) fn next(expr: &str, zone: &str, after: Timestamp) -> Option<Timestamp> {
    let cron = parse(expr).ok()?;
    let tz = TimeZone::get(zone).ok()?;
    let fixed = expr.split_whitespace().take(2).all(|field| !field.contains(['*', '?', '/']));
    next_in(&cron, &tz, fixed, after)
}

/// The first run of `cron` in `tz` strictly after `after`. `fixed`: the minute and hour fields
/// name fixed values, so rules 2 and 3 apply.
fn next_in(cron: &Cron, tz: &TimeZone, fixed: bool, after: Timestamp) -> Option<Timestamp> {
    let mut from = after.to_zoned(tz.clone());
    for _ in 0..MAX_SKIPS {
        let next = cron.find_next_occurrence(&from, false).ok()?;
        if fixed {
            if let Some(jump) = skipped_run(cron, tz, after, next.timestamp()) {
                return Some(jump);
            }
            if repeated(tz, &next) {
                from = next;
                continue;
            }
        }
        if next.timestamp() > after {
            return Some(next.timestamp());
        }
        from = next;
    }
    None
}

/// The instant of the first jump forward strictly between `after` and `before` that skipped a
/// time `cron` names.
fn skipped_run(cron: &Cron, tz: &TimeZone, after: Timestamp, before: Timestamp) -> Option<Timestamp> {
    for transition in tz.following(after) {
        let at = transition.timestamp();
        if at >= before {
            break;
        }
        let old = tz.to_offset(at.checked_sub(SignedDuration::from_nanos(1)).ok()?);
        if at <= after || transition.offset() <= old {
            continue;
        }
        // The wall-clock times that did not happen, [start, end).
        let (start, end) = (old.to_datetime(at), transition.offset().to_datetime(at));
        if cron.find_next_occurrence(&start, true).is_ok_and(|run| run < end) {
            return Some(at);
        }
    }
    None
}

/// Whether `run` is the second pass of a wall-clock time the clocks went back over.
fn repeated(tz: &TimeZone, run: &Zoned) -> bool {
    match tz.to_ambiguous_zoned(run.datetime()).offset() {
        AmbiguousOffset::Fold { before, after } => before != after && run.offset() == after,
        AmbiguousOffset::Unambiguous { .. } | AmbiguousOffset::Gap { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use crate::schedule::Schedule;

    fn runs(expr: &str, zone: &str, after: &str, n: usize) -> Vec<String> {
        let schedule = Schedule::Cron { expr: expr.into(), zone: zone.into() };
        schedule.upcoming(after.parse().expect("a test timestamp"), n).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn local_time_holds_when_the_clocks_change() {
        let york = "America/New_York";
        assert_eq!(
            runs("0 8 * * *", york, "2026-03-07T00:00:00Z", 3),
            ["2026-03-07T13:00:00Z", "2026-03-08T12:00:00Z", "2026-03-09T12:00:00Z"]
        );
        assert_eq!(
            runs("0 8 * * *", york, "2026-10-31T00:00:00Z", 3),
            ["2026-10-31T12:00:00Z", "2026-11-01T13:00:00Z", "2026-11-02T13:00:00Z"]
        );
        let paris = "Europe/Paris";
        assert_eq!(
            runs("0 8 * * *", paris, "2026-03-28T00:00:00Z", 2),
            ["2026-03-28T07:00:00Z", "2026-03-29T06:00:00Z"]
        );
        assert_eq!(
            runs("0 8 * * *", paris, "2026-10-24T00:00:00Z", 2),
            ["2026-10-24T06:00:00Z", "2026-10-25T07:00:00Z"]
        );
    }

    #[test]
    fn a_repeated_time_runs_once() {
        let york = "America/New_York";
        // 01:30 EDT, then 01:30 EST the next day: not 01:30 EST on 2026-11-01.
        assert_eq!(
            runs("30 1 * * *", york, "2026-10-31T12:00:00Z", 2),
            ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
        );
        assert_eq!(
            runs("30 1 * * *", york, "2026-11-01T06:10:00Z", 1),
            ["2026-11-02T06:30:00Z"],
            "from the second pass"
        );
        assert_eq!(
            runs("0,30 1 * * *", york, "2026-11-01T04:00:00Z", 3),
            ["2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:00:00Z"]
        );
        // 02:30 CEST, then 02:30 CET the next day.
        let paris = "Europe/Paris";
        assert_eq!(
            runs("30 2 * * *", paris, "2026-10-24T12:00:00Z", 2),
            ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
        );
    }

    #[test]
    fn an_elapsed_time_job_runs_in_both_passes_and_not_in_a_jump() {
        let york = "America/New_York";
        assert_eq!(
            runs("*/30 * * * *", york, "2026-11-01T04:40:00Z", 5),
            [
                "2026-11-01T05:00:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T06:30:00Z",
                "2026-11-01T07:00:00Z"
            ]
        );
        // 01:30 EST, then 03:00 EDT: the missing hour has no runs.
        assert_eq!(
            runs("*/30 * * * *", york, "2026-03-08T06:10:00Z", 2),
            ["2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z"]
        );
    }

    #[test]
    fn a_skipped_time_runs_right_after_the_jump() {
        let york = "America/New_York";
        // 03:00 EDT on the day 02:30 is skipped, then 02:30 EDT.
        assert_eq!(
            runs("30 2 * * *", york, "2026-03-07T12:00:00Z", 2),
            ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]
        );
        assert_eq!(
            runs("0,30 2 * * *", york, "2026-03-07T12:00:00Z", 3),
            ["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z", "2026-03-09T06:30:00Z"],
            "once for both skipped times"
        );
        assert_eq!(
            runs("30 2 * * *", york, "2026-03-08T07:00:00Z", 1),
            ["2026-03-09T06:30:00Z"],
            "not again at the jump"
        );
        // 03:00 CEST, then 02:30 CEST.
        let paris = "Europe/Paris";
        assert_eq!(
            runs("30 2 * * *", paris, "2026-03-28T12:00:00Z", 2),
            ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
        );
    }

    #[test]
    fn runs_are_strictly_after_and_increasing() {
        // Lord Howe Island moves its clocks by half an hour.
        for zone in ["America/New_York", "Europe/Paris", "Australia/Lord_Howe"] {
            for expr in ["30 1 * * *", "30 2 * * *", "0,30 1,2 * * *", "*/20 * * * *", "0 * * * *", "15 2 * * 0"] {
                let schedule = Schedule::Cron { expr: expr.into(), zone: zone.into() };
                for start in
                    ["2026-03-07T00:00:00Z", "2026-04-04T00:00:00Z", "2026-10-03T00:00:00Z", "2026-10-24T00:00:00Z"]
                {
                    let after = start.parse().expect("a test timestamp");
                    let upcoming = schedule.upcoming(after, 100);
                    assert_eq!(upcoming.len(), 100, "{expr} in {zone}");
                    assert!(upcoming[0] > after, "{expr} in {zone} from {start}");
                    assert!(upcoming.windows(2).all(|pair| pair[0] < pair[1]), "{expr} in {zone} from {start}");
                }
            }
        }
    }
}
