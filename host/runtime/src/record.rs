//! Recording the host imports plugins call, for `talaria plugin test`.
//!
//! With [`RuntimeConfig::record_imports`](crate::RuntimeConfig::record_imports) on, every call
//! of a `talaria:plugin` import (both API versions) and every outgoing HTTP request becomes a
//! [`RecordedImport`], refusals included; [`Runtime::take_recorded_imports`](crate::Runtime::take_recorded_imports)
//! drains them. Off, nothing is recorded and nothing is formatted: the import implementations
//! hold an `Option` that is `None`.
//!
//! ```
//! use talaria_runtime::RecordedImport;
//! let line = RecordedImport {
//!     plugin: "counter".into(),
//!     interface: "kv".into(),
//!     function: "set".into(),
//!     summary: "counter (2 bytes)".into(),
//!     outcome: Some("ok".into()),
//! };
//! assert_eq!(line.to_string(), "kv.set counter (2 bytes) -> ok");
//! ```

use std::fmt;
use std::sync::Mutex;

/// Most imports kept between two drains; later ones are only counted.
const MAX_RECORDED: usize = 1000;
/// Longest quoted text (a log message, a command, a URL) kept in a summary.
const MAX_TEXT_CHARS: usize = 200;
/// Longest outcome kept (a refusal's whole sentence fits).
const MAX_OUTCOME_CHARS: usize = 400;

/// One host import a plugin called, and how it went.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecordedImport {
    /// The plugin that called it.
    pub plugin: String,
    /// `log`, `config`, `kv`, `secrets`, `process`, `llm`, or `http` (an outgoing `wasi:http`
    /// request).
    pub interface: String,
    /// The function: `get`, `set`, `run`, ...; for `log` the level, for `http` the method.
    pub function: String,
    /// The arguments, briefly: a key, a quoted message or command, a URL.
    pub summary: String,
    /// What the plugin got: `ok`, a value, `exit 0`, a status code, `denied: …`, `refused: …`,
    /// `failed: …`; `None` for `log`, which answers nothing.
    pub outcome: Option<String>,
}

impl fmt::Display for RecordedImport {
    /// One line: `kv.get x -> denied: …`, `config.get units -> "metric"`; `log` and `http` put
    /// their level or method after a space: `log info "hi"`, `http GET https://x/ -> 200`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = match self.interface.as_str() {
            "log" | "http" => ' ',
            _ => '.',
        };
        write!(f, "{}{sep}{}", self.interface, self.function)?;
        if !self.summary.is_empty() {
            write!(f, " {}", self.summary)?;
        }
        match &self.outcome {
            Some(outcome) => write!(f, " -> {outcome}"),
            None => Ok(()),
        }
    }
}

/// Where a runtime's plugins record their imports.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    inner: Mutex<Recorded>,
}

#[derive(Debug, Default)]
struct Recorded {
    entries: Vec<RecordedImport>,
    /// Imports past [`MAX_RECORDED`], counted only.
    dropped: usize,
}

impl Recorder {
    /// Record one import of `plugin`.
    pub fn push(&self, plugin: &str, interface: &str, function: &str, summary: String, outcome: Option<String>) {
        let mut r = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if r.entries.len() >= MAX_RECORDED {
            r.dropped += 1;
            return;
        }
        let outcome = outcome.map(|o| clip(&o, MAX_OUTCOME_CHARS));
        r.entries.push(RecordedImport {
            plugin: plugin.to_string(),
            interface: interface.to_string(),
            function: function.to_string(),
            summary,
            outcome,
        });
    }

    /// Everything recorded since the last drain, oldest first; past the cap, a last entry
    /// (`recorder.overflow`) says how many more there were.
    pub fn take(&self) -> Vec<RecordedImport> {
        let mut r = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let dropped = std::mem::take(&mut r.dropped);
        let mut entries = std::mem::take(&mut r.entries);
        if dropped > 0 {
            let plugin = entries.last().map(|e| e.plugin.clone()).unwrap_or_default();
            entries.push(RecordedImport {
                plugin,
                interface: "recorder".into(),
                function: "overflow".into(),
                summary: format!("{dropped} more host imports were not recorded"),
                outcome: None,
            });
        }
        entries
    }
}

/// `text` quoted as Rust would (escapes included), cut to a readable length.
pub(crate) fn quoted(text: &str) -> String {
    format!("{:?}", clip(text, MAX_TEXT_CHARS))
}

/// A name as it is when it is one plain word, else quoted.
pub(crate) fn word(text: &str) -> String {
    let plain = !text.is_empty() && text.chars().all(|c| c.is_ascii_graphic() && c != '"' && c != '\\');
    if plain && text.chars().count() <= MAX_TEXT_CHARS { text.to_string() } else { quoted(text) }
}

/// A URL or other long plain text, cut to a readable length.
pub(crate) fn short(text: &str) -> String {
    clip(text, MAX_TEXT_CHARS)
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        format!("{}…", text.chars().take(max).collect::<String>())
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_as_the_call_was_made() {
        let r = Recorder::default();
        r.push("p", "log", "info", quoted("greeting Ada"), None);
        r.push("p", "config", "get", word("units"), Some("\"metric\"".into()));
        r.push("p", "http", "GET", short("https://api.example.com/x"), Some("200".into()));
        r.push("p", "kv", "get", word("two words"), Some("none".into()));
        let lines: Vec<String> = r.take().iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                r#"log info "greeting Ada""#,
                r#"config.get units -> "metric""#,
                "http GET https://api.example.com/x -> 200",
                r#"kv.get "two words" -> none"#,
            ]
        );
        assert!(r.take().is_empty(), "a drain empties it");
    }

    #[test]
    fn a_flood_is_capped_and_counted() {
        let r = Recorder::default();
        for i in 0..MAX_RECORDED + 5 {
            r.push("p", "log", "info", quoted(&i.to_string()), None);
        }
        let taken = r.take();
        assert_eq!(taken.len(), MAX_RECORDED + 1);
        assert_eq!(
            taken.last().map(ToString::to_string).as_deref(),
            Some("recorder.overflow 5 more host imports were not recorded")
        );
        assert_eq!(quoted(&"x".repeat(300)).chars().count(), MAX_TEXT_CHARS + 3);
    }
}
