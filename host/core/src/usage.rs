//! What turns spent over a period, summed per day, model and source: for `talaria usage` and
//! the dashboard's usage page, from the store's record of each turn
//! ([`talaria_store::turns`]). Costs are priced as [`Prices::of_model`] says (a turn of a model
//! with no known price is counted apart).

use std::collections::BTreeMap;

use talaria_store::turns::TurnStat;

use crate::ConfigToml;
use crate::prices::Prices;

/// Sums over some turns.
#[derive(Debug, Default, Clone)]
pub struct Sum {
    pub turns: u64,
    pub input: u64,
    pub output: u64,
    /// US dollars, over the turns whose model has a price.
    pub cost: f64,
    /// Turns whose model has no known price.
    pub unpriced: u64,
    pub durations: Vec<i64>,
}

impl Sum {
    fn add(&mut self, turn: &TurnStat, price: Option<Prices>) {
        self.turns += 1;
        self.input += turn.usage.input_tokens;
        self.output += turn.usage.output_tokens;
        match price {
            Some(p) => self.cost += p.cost(&turn.usage),
            None => self.unpriced += 1,
        }
        self.durations.push(turn.duration_ms);
    }

    /// Input and output tokens.
    pub fn tokens(&self) -> u64 {
        self.input + self.output
    }

    /// The `p`th percentile of the turns' durations (nearest rank), in milliseconds.
    pub fn percentile(&self, p: f64) -> i64 {
        let mut sorted = self.durations.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return 0;
        }
        let rank = (p * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }
}

/// The turns of the last `days` days, summed.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub total: Sum,
    /// Every day of the period (`YYYY-MM-DD`, local), a quiet one too.
    pub by_day: BTreeMap<String, Sum>,
    pub by_model: BTreeMap<String, Sum>,
    pub by_source: BTreeMap<String, Sum>,
}

impl Report {
    /// `turns` (those of the period) summed over the `days` days up to `now`.
    pub fn new(turns: &[TurnStat], config: &ConfigToml, days: i64, now: &jiff::Zoned) -> Self {
        let zone = now.time_zone().clone();
        let mut report = Self::default();
        for back in (0..days).rev() {
            let day =
                now.timestamp().checked_sub(jiff::SignedDuration::from_hours(24 * back)).unwrap_or(now.timestamp());
            report.by_day.insert(day.to_zoned(zone.clone()).strftime("%Y-%m-%d").to_string(), Sum::default());
        }
        for turn in turns {
            let price = Prices::of_model(config, &turn.model);
            let day = jiff::Timestamp::from_millisecond(turn.ended_at)
                .map(|t| t.to_zoned(zone.clone()).strftime("%Y-%m-%d").to_string())
                .unwrap_or_default();
            report.by_day.entry(day).or_default().add(turn, price);
            report.by_model.entry(turn.model.clone()).or_default().add(turn, price);
            report.by_source.entry(turn.source.clone()).or_default().add(turn, price);
            report.total.add(turn, price);
        }
        report
    }
}
