//! The bundled `journal` memory provider: a searchable journal of past turns, kept in the
//! plugin's kv store.
//!
//! - **sync_turn** records each finished turn (small talk and slash commands are skipped; each
//!   side is clipped to 4,000 characters) under a key of its own in kv, with an id from a kv
//!   counter (`store`), so several talaria processes can record at once and lose nothing.
//! - **prefetch** scores the entries of *other* sessions against the user's new message with
//!   BM25 (`index`), slightly favouring recent ones, and returns the best few as a recall block
//!   (`journal`), or "" for a trivial message or when nothing matches well enough:
//!
//!   ```text
//!   [recall: notes from earlier sessions; they may be out of date]
//!   - 2026-11-20 (session 20261120_093011_k2x9): user asked "why does the arm64 build fail"; answer: "The linker ..."
//!   ```
//! - **on_pre_compress** gives the recall for the latest meaningful user message among the
//!   messages being compressed away, so the summary can mention it.
//! - the tool **journal_search** searches every session.
//!
//! The host keeps this plugin's instance alive, so the index lives in a `static`: it is built
//! from kv on first use, and before every later use it takes in what other processes recorded
//! (or dropped) meanwhile: one kv read when nothing changed.
//!
//! ```toml
//! [plugins.journal.config]
//! max_results = 3                  # recall entries at most (1 to 10)
//! min_score = 0.35                 # least share of the message an entry must match
//! exclude_current_session = true   # recall only from other sessions
//! ```

mod index;
mod journal;
mod store;
mod text;

use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use talaria_sdk::memory::MemoryProvider;
use talaria_sdk::message::{Message, Role, Session};
use talaria_sdk::{Context, JsonSchema, ToolError, config, log};

use crate::journal::{Journal, Settings};
use crate::store::{KvStore, Limits};

/// Results `journal_search` returns by default, and at most.
const DEFAULT_SEARCH_LIMIT: usize = 5;
const MAX_SEARCH_LIMIT: usize = 20;
/// Characters of each side of a turn in a search result.
const SEARCH_CLIP_CHARS: usize = 2_000;

/// The journal, loaded on first use.
static JOURNAL: Mutex<Option<Journal<KvStore>>> = Mutex::new(None);

/// Run `f` on the journal: loaded from kv on first use, brought up to date with what other
/// processes wrote on every later one.
fn with_journal<T>(f: impl FnOnce(&mut Journal<KvStore>) -> T) -> Result<T, String> {
    let mut slot = JOURNAL.lock().unwrap_or_else(PoisonError::into_inner);
    let mut warnings = Vec::new();
    let journal = match slot.as_mut() {
        Some(journal) => {
            if let Err(e) = journal.sync(now(), &mut warnings) {
                // Recall from what this copy has; the next call tries again.
                log::warn(&format!("journal: could not read what other processes recorded: {e}"));
            }
            journal
        }
        None => {
            let journal = Journal::open(KvStore, Limits::default(), now(), &mut warnings)?;
            log::debug(&format!("journal loaded: {} entries", journal.len()));
            slot.insert(journal)
        }
    };
    for w in warnings {
        log::warn(&w);
    }
    Ok(f(journal))
}

/// `[plugins.journal.config]`, with defaults for what is unset or unusable.
fn settings() -> Settings {
    let defaults = Settings::default();
    let max_results = setting("max_results", |v| v.as_u64().filter(|n| (1..=10).contains(n)), "a number from 1 to 10");
    let min_score = setting("min_score", |v| v.as_f64().filter(|s| s.is_finite() && *s >= 0.0), "a number, 0 or more");
    let exclude = setting("exclude_current_session", serde_json::Value::as_bool, "true or false");
    Settings {
        max_results: max_results.and_then(|n| usize::try_from(n).ok()).unwrap_or(defaults.max_results),
        min_score: min_score.map_or(defaults.min_score, |s| s as f32),
        exclude_current_session: exclude.unwrap_or(defaults.exclude_current_session),
    }
}

fn setting<T>(key: &str, read: impl Fn(&serde_json::Value) -> Option<T>, expected: &str) -> Option<T> {
    let value = config::get::<serde_json::Value>(key)?;
    let read = read(&value);
    if read.is_none() {
        log::warn(&format!("[plugins.journal.config] {key} must be {expected}, not {value}; using the default"));
    }
    read
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

struct JournalProvider;

impl MemoryProvider for JournalProvider {
    fn system_prompt_block(_session: &Session) -> Result<String, String> {
        Ok("Notes recalled from earlier sessions may come with the user's message, marked `[recall: …]`; \
            they can be out of date. To look further back, search the journal of past turns with the \
            `journal_search` tool."
            .to_string())
    }

    fn prefetch(query: &str, session: &Session) -> Result<String, String> {
        if text::is_trivial(query) {
            return Ok(String::new());
        }
        let settings = settings();
        with_journal(|j| j.recall(query, &session.session_id, &settings, now()))
    }

    fn sync_turn(user: &str, assistant: &str, session: &Session) -> Result<(), String> {
        if text::is_trivial_turn(user, assistant) {
            return Ok(());
        }
        with_journal(|j| j.record(now(), &session.session_id, user, assistant))?.map(|_| ())
    }

    fn on_pre_compress(messages: &[Message], session: &Session) -> Result<String, String> {
        let Some(latest) = latest_user_message(messages) else { return Ok(String::new()) };
        let settings = settings();
        with_journal(|j| j.recall(latest, &session.session_id, &settings, now()))
    }
}

/// The newest user message that asks something (not small talk or a slash command).
fn latest_user_message(messages: &[Message]) -> Option<&str> {
    messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .find(|content| !text::is_trivial(content))
}

#[derive(Deserialize, JsonSchema)]
struct JournalSearchArgs {
    /// Words to look for in earlier turns (any session). Empty: the most recent turns.
    query: String,
    /// Most results to return. Default 5, at most 20.
    limit: Option<usize>,
}

fn journal_search(args: JournalSearchArgs, _ctx: &Context) -> Result<String, ToolError> {
    let limit = args.limit.unwrap_or(DEFAULT_SEARCH_LIMIT);
    if limit == 0 {
        return Err(ToolError::invalid("limit must be at least 1 (default 5, at most 20)"));
    }
    let limit = limit.min(MAX_SEARCH_LIMIT);
    let found = with_journal(|j| j.search(&args.query, limit, SEARCH_CLIP_CHARS)).map_err(ToolError::failed)?;
    Ok(serde_json::to_string(&found)?)
}

talaria_sdk::export_memory!(JournalProvider, tools: {
    /// Search the journal of earlier conversation turns (all sessions) for words in `query`.
    /// Returns a JSON list of {date, session_id, user, assistant, score}, best match first
    /// (score is the share of the query matched, about 1.0 for a full match).
    journal_search,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_search_is_offered_with_its_schema() {
        use talaria_sdk::__private::{ToolSet, WitToolError};
        let specs = <__TalariaMemoryTools as ToolSet>::list();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].name, "journal_search");
        assert!(specs[0].description.starts_with("Search the journal of earlier conversation turns"));
        let schema: serde_json::Value = serde_json::from_str(&specs[0].parameters).expect("schema");
        assert_eq!(schema["required"], serde_json::json!(["query"]));
        assert!(schema["properties"]["limit"].is_object());
        let ctx = Context::new("/w");
        let refused = <__TalariaMemoryTools as ToolSet>::call("journal_search", r#"{"query":"x","limit":0}"#, &ctx);
        assert!(matches!(refused, Err(WitToolError::InvalidArgs(m)) if m.contains("at least 1")));
    }

    #[test]
    fn the_latest_meaningful_user_message_is_used_for_compression() {
        let messages = vec![
            Message::user("why does the arm64 release build fail on CI"),
            Message::assistant("The linker is missing."),
            Message::user("thanks!"),
            Message::tool("c1", "terminal", "ok"),
        ];
        assert_eq!(latest_user_message(&messages), Some("why does the arm64 release build fail on CI"));
        assert_eq!(latest_user_message(&[Message::user("ok"), Message::assistant("fine")]), None);
    }
}
