//! The operator's settings (`[plugins.compressor.config]`), resolved against the defaults.
//!
//! | key | default | meaning |
//! | --- | --- | --- |
//! | `threshold` | 0.50 | compress when prompt tokens reach this share of the context window ... |
//! | `min_tokens` | 64000 | ... but not before this many tokens, unless that is above 85% of the window |
//! | `protect_first_n` | 3 | messages at the start that are always kept verbatim |
//! | `protect_last_n` | 20 | the kept tail has at least this many messages |
//! | `tail_ratio` | 0.20 | the kept tail grows up to this share of the window (beyond `protect_last_n`) |
//!
//! A value of the wrong type or out of range falls back to the default, with a warning.
//!
//! ```ignore
//! let (config, warnings) = Config::resolve(|key| talaria_sdk::config::get(key));
//! assert_eq!(Config::default().threshold_tokens(200_000), 100_000);
//! ```

/// The resolved settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Share of the context window at which to compress.
    pub threshold: f64,
    /// Tokens below which a large window is never compressed.
    pub min_tokens: u64,
    /// Messages at the start (after any system messages) kept verbatim.
    pub protect_first_n: usize,
    /// Fewest messages in the kept tail.
    pub protect_last_n: usize,
    /// Share of the context window the kept tail may fill beyond `protect_last_n` messages.
    pub tail_ratio: f64,
}

/// The latest a small window is compressed at, as a share of it.
pub const SMALL_WINDOW_RATIO: f64 = 0.85;

impl Default for Config {
    fn default() -> Self {
        Self { threshold: 0.50, min_tokens: 64_000, protect_first_n: 3, protect_last_n: 20, tail_ratio: 0.20 }
    }
}

impl Config {
    /// Read each key through `lookup` (the setting as JSON, `None` when unset). Returns the
    /// settings and a warning for each value that was ignored.
    pub fn resolve(lookup: impl Fn(&str) -> Option<serde_json::Value>) -> (Self, Vec<String>) {
        let mut config = Self::default();
        let mut warnings = Vec::new();
        let mut check = |key: &str, ok: fn(f64) -> bool| {
            let value = lookup(key)?;
            match value.as_f64() {
                Some(v) if ok(v) => Some(v),
                _ => {
                    warnings.push(format!(
                        "ignoring [plugins.compressor.config] {key} = {value}: out of range or not a number"
                    ));
                    None
                }
            }
        };
        let ratio = |v: f64| v > 0.0 && v <= 1.0;
        let count = |v: f64| v >= 0.0 && v.fract() == 0.0 && v <= 1e9;
        if let Some(v) = check("threshold", ratio) {
            config.threshold = v;
        }
        if let Some(v) = check("min_tokens", |v| v >= 0.0 && v.fract() == 0.0 && v <= 1e12) {
            config.min_tokens = v as u64;
        }
        if let Some(v) = check("protect_first_n", count) {
            config.protect_first_n = v as usize;
        }
        if let Some(v) = check("protect_last_n", count) {
            config.protect_last_n = v as usize;
        }
        if let Some(v) = check("tail_ratio", |v| (0.0..=0.9).contains(&v)) {
            config.tail_ratio = v;
        }
        (config, warnings)
    }

    /// The prompt size at which to compress: `max(threshold × window, min(min_tokens, 0.85 × window))`.
    /// Large windows wait for `min_tokens`; small ones still compress at 85% at the latest.
    pub fn threshold_tokens(&self, context_length: u64) -> u64 {
        let window = context_length as f64;
        let floor = (self.min_tokens as f64).min(SMALL_WINDOW_RATIO * window);
        (self.threshold * window).max(floor) as u64
    }

    /// The token budget of the kept tail.
    pub fn tail_budget(&self, context_length: u64) -> u64 {
        (self.tail_ratio * context_length as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_math_with_defaults() {
        let c = Config::default();
        // Large windows: the ratio wins once it is above min_tokens.
        assert_eq!(c.threshold_tokens(200_000), 100_000);
        assert_eq!(c.threshold_tokens(1_000_000), 500_000);
        // Mid windows: min_tokens wins over the ratio.
        assert_eq!(c.threshold_tokens(128_000), 64_000);
        assert_eq!(c.threshold_tokens(100_000), 64_000);
        // Small windows: 85% at the latest.
        assert_eq!(c.threshold_tokens(32_000), 27_200);
        assert_eq!(c.threshold_tokens(8_000), 6_800);
    }

    #[test]
    fn threshold_math_with_configured_values() {
        let (c, warnings) = Config::resolve(|key| match key {
            "threshold" => Some(0.7.into()),
            "min_tokens" => Some(10_000.into()),
            _ => None,
        });
        assert!(warnings.is_empty());
        assert_eq!(c.threshold_tokens(200_000), 140_000);
        assert_eq!(c.threshold_tokens(12_000), 10_000);
        assert_eq!(c.threshold_tokens(10_000), 8_500);
        let (c, _) = Config::resolve(|key| (key == "min_tokens").then(|| 0.into()));
        assert_eq!(c.threshold_tokens(8_000), 4_000);
    }

    #[test]
    fn bad_values_fall_back_with_a_warning() {
        let (c, warnings) = Config::resolve(|key| match key {
            "threshold" => Some(1.5.into()),
            "min_tokens" => Some("lots".into()),
            "protect_first_n" => Some(2.5.into()),
            "protect_last_n" => Some((-1).into()),
            "tail_ratio" => Some(0.3.into()),
            _ => None,
        });
        assert_eq!(c, Config { tail_ratio: 0.3, ..Config::default() });
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert_eq!(
            warnings[1],
            "ignoring [plugins.compressor.config] min_tokens = \"lots\": out of range or not a number"
        );
    }
}
