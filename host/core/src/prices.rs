//! What models cost: `[model] input_price` / `output_price` (US dollars per million tokens),
//! else a small bundled table of common models, dated [`TABLE_DATE`] (provider prices change,
//! so what it gives is shown as an estimate). For the terminal's status line and the
//! dashboard's usage page.

use talaria_protocol::Usage;

/// When the bundled prices were last checked.
pub const TABLE_DATE: &str = "2025-10";

/// US dollars per million tokens: (model name prefix, input, cached input, output). The longest
/// matching prefix wins.
const TABLE: &[(&str, f64, f64, f64)] = &[
    ("gpt-4.1", 2.0, 0.5, 8.0),
    ("gpt-4.1-mini", 0.4, 0.1, 1.6),
    ("gpt-4.1-nano", 0.1, 0.025, 0.4),
    ("gpt-4o", 2.5, 1.25, 10.0),
    ("gpt-4o-mini", 0.15, 0.075, 0.6),
    ("gpt-5", 1.25, 0.125, 10.0),
    ("gpt-5-mini", 0.25, 0.025, 2.0),
    ("gpt-5-nano", 0.05, 0.005, 0.4),
    ("o3", 2.0, 0.5, 8.0),
    ("o4-mini", 1.1, 0.275, 4.4),
    ("claude-opus-4", 15.0, 1.5, 75.0),
    ("claude-sonnet-4", 3.0, 0.3, 15.0),
    ("claude-haiku-4", 1.0, 0.1, 5.0),
    ("claude-3-5-haiku", 0.8, 0.08, 4.0),
    ("gemini-2.5-pro", 1.25, 0.31, 10.0),
    ("gemini-2.5-flash", 0.3, 0.075, 2.5),
    ("deepseek-chat", 0.27, 0.07, 1.1),
    ("deepseek-reasoner", 0.55, 0.14, 2.19),
];

/// What a million tokens cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    pub input: f64,
    pub cached: f64,
    pub output: f64,
    /// From the bundled table (an estimate), not the user's configuration.
    pub bundled: bool,
}

impl Prices {
    /// The configured prices, else the bundled ones for `model` (its name with or without a
    /// `provider/` prefix), else none.
    pub fn find(model: &str, input: Option<f64>, output: Option<f64>, cached: Option<f64>) -> Option<Self> {
        if let (Some(input), Some(output)) = (input, output) {
            let ok = |p: f64| p.is_finite() && p >= 0.0;
            if ok(input) && ok(output) {
                let cached = cached.filter(|c| ok(*c)).unwrap_or(input);
                return Some(Self { input, cached, output, bundled: false });
            }
        }
        let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
        TABLE
            .iter()
            .filter(|(prefix, ..)| name.starts_with(prefix))
            .max_by_key(|(prefix, ..)| prefix.len())
            .map(|&(_, input, cached, output)| Self { input, cached, output, bundled: true })
    }

    /// The prices of `model` under `config`: `[model]`'s own when it is the configured model,
    /// else the bundled table's.
    pub fn of_model(config: &crate::ConfigToml, model: &str) -> Option<Self> {
        let own = config.model.as_ref().filter(|m| m.name.as_deref() == Some(model));
        Self::find(
            model,
            own.and_then(|m| m.input_price),
            own.and_then(|m| m.output_price),
            own.and_then(|m| m.cache_read_price),
        )
    }

    /// The cost of `usage` in US dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cache_read_tokens.min(usage.input_tokens);
        let fresh = usage.input_tokens - cached;
        (fresh as f64 * self.input + cached as f64 * self.cached + usage.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}
