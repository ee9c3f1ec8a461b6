//! The status line shown after each turn: the model, how full the context window is, tokens of
//! the turn and of the session, and what they cost when prices are known.
//!
//! Prices come from `[model] input_price` / `output_price` (US dollars per million tokens), else
//! from a small bundled table of common models, dated [`TABLE_DATE`]: provider prices change, so
//! the line marks bundled prices as estimates.

use talaria_protocol::Usage;

pub use talaria_core::prices::{Prices, TABLE_DATE};

/// Everything the line shows.
pub struct Status<'a> {
    pub model: &'a str,
    /// Tokens the last request carried (its input and output), and the window.
    pub context: (u64, u64),
    pub turn: &'a Usage,
    pub session: &'a Usage,
    pub prices: Option<Prices>,
}

impl Status<'_> {
    /// `gpt-4.1 · context 12% of 128k · turn 1200 in, 80 out · session 3.4k in, 250 out · $0.0031 turn, $0.0098 session`
    #[cfg(test)]
    pub fn line(&self) -> String {
        self.parts().join(" · ")
    }

    /// The line's parts, each kept whole on a row.
    pub fn parts(&self) -> Vec<String> {
        let mut parts = vec![self.model.to_string()];
        let (used, window) = self.context;
        if window > 0 {
            let pct = (used as f64 * 100.0 / window as f64).round();
            parts.push(format!("context {pct}% of {}", tokens(window)));
        }
        let approx = |u: &Usage| u.approx();
        parts.push(format!(
            "turn {a}{} in, {a}{} out",
            tokens(self.turn.input_tokens),
            tokens(self.turn.output_tokens),
            a = approx(self.turn)
        ));
        parts.push(format!(
            "session {a}{} in, {a}{} out",
            tokens(self.session.input_tokens),
            tokens(self.session.output_tokens),
            a = approx(self.session)
        ));
        if let Some(p) = self.prices {
            let mark = if p.bundled || self.session.estimated { "~" } else { "" };
            parts.push(format!(
                "{mark}{} turn, {mark}{} session",
                dollars(p.cost(self.turn)),
                dollars(p.cost(self.session))
            ));
        }
        parts
    }
}

/// A token count as read at a glance: exact below 10,000, then `12.3k`, `1.2M`.
fn tokens(n: u64) -> String {
    match n {
        0..10_000 => n.to_string(),
        10_000..1_000_000 => trim(format!("{:.1}", n as f64 / 1000.0)) + "k",
        _ => trim(format!("{:.1}", n as f64 / 1_000_000.0)) + "M",
    }
}

fn trim(s: String) -> String {
    s.strip_suffix(".0").map_or(s.clone(), str::to_string)
}

/// Dollars with the precision small amounts need.
fn dollars(d: f64) -> String {
    if d >= 1.0 {
        format!("${d:.2}")
    } else if d >= 0.01 {
        format!("${d:.3}")
    } else {
        format!("${d:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> Usage {
        Usage { input_tokens: input, output_tokens: output, ..Usage::default() }
    }

    #[test]
    fn configured_prices_win_and_the_table_matches_the_longest_prefix() {
        let p = Prices::find("openai/gpt-4.1-mini-2025-04-14", None, None, None).expect("bundled");
        assert_eq!((p.input, p.output, p.bundled), (0.4, 1.6, true));
        let p = Prices::find("gpt-4.1-mini", Some(1.0), Some(2.0), None).expect("configured");
        assert_eq!((p.input, p.cached, p.output, p.bundled), (1.0, 1.0, 2.0, false));
        assert_eq!(Prices::find("llama3.2", None, None, None), None);
        assert_eq!(Prices::find("llama3.2", Some(f64::NAN), Some(1.0), None), None, "a nonsense price is no price");
    }

    #[test]
    fn cost_counts_cached_input_at_its_price() {
        let p = Prices { input: 2.0, cached: 0.5, output: 8.0, bundled: false };
        let u =
            Usage { input_tokens: 1_000_000, cache_read_tokens: 400_000, output_tokens: 100_000, ..Usage::default() };
        assert!((p.cost(&u) - (1.2 + 0.2 + 0.8)).abs() < 1e-9);
    }

    #[test]
    fn the_line_shows_every_part() {
        let status = Status {
            model: "custom/m",
            context: (12_800, 128_000),
            turn: &usage(1234, 56),
            session: &usage(45_600, 780),
            prices: Some(Prices { input: 1.0, cached: 1.0, output: 2.0, bundled: true }),
        };
        assert_eq!(
            status.line(),
            "custom/m · context 10% of 128k · turn 1234 in, 56 out · session 45.6k in, 780 out · ~$0.0013 turn, ~$0.047 session"
        );
        let bare = Status { prices: None, context: (0, 0), ..status };
        assert_eq!(bare.line(), "custom/m · turn 1234 in, 56 out · session 45.6k in, 780 out");
    }
}
