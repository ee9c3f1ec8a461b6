//! The usage page: tokens and cost per day, per model and per source (terminal, ACP, gateway,
//! cron, API), and turn latency (p50 and p99) per day, from the store's record of each turn
//! ([`talaria_core::store::turns`]). Charts are SVG drawn here, each with its figures in a
//! table beside it (readable without the picture, and without JavaScript).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;
use talaria_core::usage::{Report, Sum};

use super::{Visitor, page};
use crate::Served;

/// The periods offered, in days.
const PERIODS: [i64; 3] = [7, 30, 90];

#[derive(Deserialize, Default)]
pub(crate) struct Params {
    #[serde(default)]
    days: Option<i64>,
}

/// `GET /usage`.
pub(crate) async fn show(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Query(params): Query<Params>,
) -> Response {
    let days = params.days.filter(|d| PERIODS.contains(d)).unwrap_or(30);
    let now = jiff::Timestamp::now();
    let since = now.as_millisecond() - days * 86_400_000;
    let turns = match served.host.store().turns_since(since).await {
        Ok(turns) => turns,
        Err(e) => {
            return page(
                &visitor,
                "usage",
                "Usage",
                html! { h1 { "Usage" } p.refused { "The usage cannot be read: " (e) } },
            );
        }
    };
    let now = now.to_zoned(jiff::tz::TimeZone::system());
    let budget = &served.host.config().budget;
    let standings = if budget.is_set() {
        Some(talaria_core::budget::standings(budget, served.host.store(), &now).await)
    } else {
        None
    };
    let Report { total, by_day, by_model, by_source } = Report::new(&turns, served.host.config(), days, &now);
    let body = html! {
        h1 { "Usage" }
        nav.pages {
            @for d in PERIODS {
                a href=(format!("/usage?days={d}")) aria-current=[(d == days).then_some("page")] { "Last " (d) " days" }
            }
        }
        p #totals {
            (total.turns) " turns, " (total.input) " tokens in, " (total.output) " tokens out"
            @if total.turns > total.unpriced { ", " (dollars(total.cost)) }
            @if total.turns > 0 && total.unpriced == total.turns {
                "; no price is known for their models (set [model] input_price and output_price)"
            } @else if total.unpriced > 0 {
                " (" (total.unpriced) " turns of models with no known price are not counted)"
            }
            "."
        }
        @if let Some(standings) = &standings {
            h2 { "Spending limits" }
            (limits(standings))
        }
        h2 { "Tokens per day" }
        (tokens_chart(&by_day))
        h2 { "Cost per day" }
        @if total.turns > total.unpriced {
            (bars(&by_day, "cost", |s| s.cost, dollars))
        } @else {
            p { "No price is known for these turns' models." }
        }
        h2 { "Turn latency per day" }
        (latency_chart(&by_day))
        h2 { "Per model" }
        (breakdown(&by_model))
        h2 { "Per source" }
        (breakdown(&by_source))
    };
    page(&visitor, "usage", "Usage", body)
}

fn dollars(v: f64) -> String {
    if v > 0.0 && v < 0.01 { format!("${v:.4}") } else { format!("${v:.2}") }
}

/// The chart's size, in its own units (it scales to the page's width).
const W: f64 = 720.0;
const H: f64 = 180.0;
const PAD: f64 = 28.0;

/// Stacked bars of input and output tokens per day, with the figures in a table.
fn tokens_chart(days: &BTreeMap<String, Sum>) -> Markup {
    let top = days.values().map(|s| s.input + s.output).max().unwrap_or(0).max(1) as f64;
    let width = (W - PAD) / days.len().max(1) as f64;
    html! {
        figure.chart {
            svg #tokens-chart viewBox=(format!("0 0 {W} {H}")) role="img" aria-label="Tokens per day: input and output" {
                (axis(top, |v| format!("{v:.0}")))
                @for (i, (day, sum)) in days.iter().enumerate() {
                    @let x = PAD + i as f64 * width;
                    @let hi = (sum.input as f64 / top) * (H - PAD);
                    @let ho = (sum.output as f64 / top) * (H - PAD);
                    rect.input x=(fmt(x + 1.0)) y=(fmt(H - PAD - hi)) width=(fmt((width - 2.0).max(1.0))) height=(fmt(hi)) {
                        title { (day) ": " (sum.input) " in" }
                    }
                    rect.output x=(fmt(x + 1.0)) y=(fmt(H - PAD - hi - ho)) width=(fmt((width - 2.0).max(1.0))) height=(fmt(ho)) {
                        title { (day) ": " (sum.output) " out" }
                    }
                }
            }
            figcaption { span.key.input {} "input " span.key.output {} "output" }
        }
        (day_table(days, &["Input tokens", "Output tokens"], |s| vec![s.input.to_string(), s.output.to_string()]))
    }
}

/// Bars of one figure per day.
fn bars(days: &BTreeMap<String, Sum>, name: &str, value: impl Fn(&Sum) -> f64, label: fn(f64) -> String) -> Markup {
    let top = days.values().map(&value).fold(0.0, f64::max);
    let top = if top > 0.0 { top } else { 1.0 };
    let width = (W - PAD) / days.len().max(1) as f64;
    html! {
        figure.chart {
            svg id=(format!("{name}-chart")) viewBox=(format!("0 0 {W} {H}")) role="img" aria-label=(format!("{name} per day")) {
                (axis(top, label))
                @for (i, (day, sum)) in days.iter().enumerate() {
                    @let h = (value(sum) / top) * (H - PAD);
                    rect.input x=(fmt(PAD + i as f64 * width + 1.0)) y=(fmt(H - PAD - h)) width=(fmt((width - 2.0).max(1.0))) height=(fmt(h)) {
                        title { (day) ": " (label(value(sum))) }
                    }
                }
            }
        }
    }
}

/// p50 and p99 turn latency per day, as two lines.
fn latency_chart(days: &BTreeMap<String, Sum>) -> Markup {
    let top = days.values().map(|s| s.percentile(0.99)).max().unwrap_or(0).max(1) as f64;
    let width = (W - PAD) / days.len().max(1) as f64;
    // Each day with turns: where its p50 and p99 are drawn.
    let points = |p: f64| -> Vec<(f64, f64)> {
        days.values()
            .enumerate()
            .filter(|(_, s)| s.turns > 0)
            .map(|(i, s)| (PAD + (i as f64 + 0.5) * width, H - PAD - (s.percentile(p) as f64 / top) * (H - PAD)))
            .collect()
    };
    let line = |p: f64| -> String {
        points(p).iter().map(|(x, y)| format!("{},{}", fmt(*x), fmt(*y))).collect::<Vec<_>>().join(" ")
    };
    html! {
        figure.chart {
            svg #latency-chart viewBox=(format!("0 0 {W} {H}")) role="img" aria-label="Turn latency per day: p50 and p99" {
                (axis(top, duration))
                polyline.p99 points=(line(0.99)) {}
                polyline.p50 points=(line(0.5)) {}
                // A dot for each day, so a lone day shows too.
                @for (x, y) in points(0.99) { circle.p99 cx=(fmt(x)) cy=(fmt(y)) r="3" {} }
                @for (x, y) in points(0.5) { circle.p50 cx=(fmt(x)) cy=(fmt(y)) r="3" {} }
            }
            figcaption { span.key.p50 {} "p50 " span.key.p99 {} "p99" }
        }
        (day_table(days, &["Turns", "p50", "p99"], |s| {
            if s.turns == 0 {
                vec!["0".into(), "-".into(), "-".into()]
            } else {
                vec![s.turns.to_string(), format!("{} ms", s.percentile(0.5)), format!("{} ms", s.percentile(0.99))]
            }
        }))
    }
}

/// Milliseconds, for people: `850 ms`, `2.4 s`.
fn duration(ms: f64) -> String {
    if ms < 1000.0 { format!("{ms:.0} ms") } else { format!("{:.1} s", ms / 1000.0) }
}

/// The chart's frame: the baseline and the top value.
fn axis(top: f64, label: impl Fn(f64) -> String) -> Markup {
    html! {
        line.axis x1=(fmt(PAD)) y1=(fmt(H - PAD)) x2=(fmt(W)) y2=(fmt(H - PAD)) {}
        text.axis x="2" y="12" { (label(top)) }
        text.axis x="2" y=(fmt(H - PAD)) { "0" }
    }
}

fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

/// The days with figures, newest first (only those with turns).
fn day_table(days: &BTreeMap<String, Sum>, columns: &[&str], cells: impl Fn(&Sum) -> Vec<String>) -> Markup {
    html! {
        details.figures {
            summary { "Figures" }
            table.sessions {
                thead { tr { th { "Day" } @for c in columns { th.num { (c) } } } }
                tbody {
                    @for (day, sum) in days.iter().rev().filter(|(_, s)| s.turns > 0) {
                        tr { td { (day) } @for cell in cells(sum) { td.num { (cell) } } }
                    }
                }
            }
        }
    }
}

/// A table of sums, by model or source, each with a bar for its share of the tokens.
/// `[budget]`'s limits, what each scope spent in its period, and when that resets.
fn limits(standings: &Result<Vec<talaria_core::budget::Standing>, talaria_core::store::Error>) -> Markup {
    html! {
        @match standings {
            Err(e) => p.refused { "The spending cannot be read: " (e) },
            Ok(rows) => table.sessions #limits {
                thead { tr { th { "Scope" } th { "Period" } th.num { "Used" } th.num { "Limit" } th { "Resets" } } }
                tbody {
                    @for row in rows {
                        tr.over[row.over] {
                            td { (row.scope) }
                            td { (row.period) }
                            td.num { (row.used) @if row.over { " (reached)" } }
                            td.num { (row.limit) }
                            td { (row.resets) }
                        }
                    }
                }
            },
        }
    }
}

fn breakdown(sums: &BTreeMap<String, Sum>) -> Markup {
    let top = sums.values().map(|s| s.input + s.output).max().unwrap_or(0).max(1) as f64;
    html! {
        @if sums.is_empty() {
            p { "No turns in this period." }
        } @else {
            table.sessions.breakdown {
                thead { tr { th { "Name" } th.num { "Turns" } th.num { "Tokens in" } th.num { "Tokens out" } th.num { "Cost" } th { "Share" } } }
                tbody {
                    @for (name, s) in sums {
                        tr {
                            td { (name) }
                            td.num { (s.turns) }
                            td.num { (s.input) }
                            td.num { (s.output) }
                            td.num { @if s.unpriced == s.turns { "-" } @else { (dollars(s.cost)) } }
                            td {
                                svg.share viewBox="0 0 100 8" role="img" aria-label=(format!("{:.0}% of the most", (s.input + s.output) as f64 / top * 100.0)) {
                                    rect.input x="0" y="0" height="8" width=(fmt((s.input + s.output) as f64 / top * 100.0)) {}
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut s = Sum::default();
        for ms in 1..=100 {
            s.durations.push(ms);
        }
        assert_eq!(s.percentile(0.5), 50);
        assert_eq!(s.percentile(0.99), 99);
        assert_eq!(Sum::default().percentile(0.5), 0);
        s.durations = vec![7];
        assert_eq!((s.percentile(0.5), s.percentile(0.99)), (7, 7));
    }
}
