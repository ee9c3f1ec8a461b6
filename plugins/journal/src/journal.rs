//! The journal: stored entries ([`store`](crate::store)) with their search index
//! ([`index`](crate::index)), and the recall block built from them.
//!
//! The entries and the index are this process's copy; other processes may be recording turns
//! into the same store at the same time. [`Journal::sync`] brings the copy up to date (one kv
//! read when nothing changed) and is called before each use.
//!
//! ```ignore
//! let mut journal = Journal::open(KvStore, Limits::default(), now, &mut warnings)?;
//! journal.record(now, "s1", "why does the arm64 build fail?", "The linker is missing: ...")?;
//! journal.sync(now, &mut warnings)?;
//! let block = journal.recall("arm64 build fails again", "s2", &Settings::default(), now);
//! ```

use serde::Serialize;

use crate::index::Index;
use crate::store::{Entries, Entry, Limits, Store, Update};
use crate::text;

/// Longest user message and answer kept per entry, in characters.
pub const MAX_STORED_CHARS: usize = 4_000;
/// Length of the user's message and of the answer in a recall line, in characters.
const RECALL_USER_CHARS: usize = 200;
const RECALL_ANSWER_CHARS: usize = 300;
/// How much more a fresh entry counts than an old one when ranking recall (a month-old entry
/// gets half of it).
const RECENCY_WEIGHT: f32 = 0.2;
const RECENCY_DAYS: f32 = 30.0;

/// The recall block's first line.
pub const RECALL_HEADER: &str = "[recall: notes from earlier sessions; they may be out of date]";

/// Operator settings (`[plugins.journal.config]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Entries in a recall block at most.
    pub max_results: usize,
    /// The least share of the query an entry must match to be recalled: its BM25 score divided
    /// by the query's weight ([`Index::weight`]), so about 1.0 for an entry holding every query
    /// word once, whatever the journal's size.
    pub min_score: f32,
    /// Recall only from other sessions (the current one is in the context already).
    pub exclude_current_session: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self { max_results: 3, min_score: 0.35, exclude_current_session: true }
    }
}

/// One search result, as `journal_search` returns it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Found {
    pub date: String,
    pub session_id: String,
    pub user: String,
    pub assistant: String,
    /// The share of the query matched (see [`Settings::min_score`]), rounded to two decimals;
    /// 0 when the query had no searchable words.
    pub score: f32,
}

/// The journal, loaded.
#[derive(Debug)]
pub struct Journal<S> {
    stored: Entries<S>,
    /// In the order this copy learnt of them (about oldest first); `entries[i]` is document `i`
    /// of `index`.
    entries: Vec<Entry>,
    index: Index,
}

impl<S: Store> Journal<S> {
    /// Load every entry from `store` and index it.
    ///
    /// # Errors
    ///
    /// The store failed.
    pub fn open(store: S, limits: Limits, now: u64, warnings: &mut Vec<String>) -> Result<Self, String> {
        let (stored, entries) = Entries::open(store, limits, now, warnings)?;
        let index = build_index(&entries);
        Ok(Self { stored, entries, index })
    }

    /// Take in what other processes recorded (and dropped) since the last sync.
    ///
    /// # Errors
    ///
    /// The store failed; the copy is then as it was.
    pub fn sync(&mut self, now: u64, warnings: &mut Vec<String>) -> Result<(), String> {
        let update = self.stored.sync(now, warnings)?;
        self.apply(update);
        Ok(())
    }

    /// Bring the entries and the index in line with `update`.
    fn apply(&mut self, update: Update) {
        if update.reloaded {
            self.entries = update.added;
            self.index = build_index(&self.entries);
            return;
        }
        if let Some(floor) = update.dropped_below
            && self.entries.iter().any(|e| e.id < floor)
        {
            self.entries.retain(|e| e.id >= floor);
            self.index = build_index(&self.entries);
        }
        for entry in update.added {
            self.index.add(&[&entry.user, &entry.assistant]);
            self.entries.push(entry);
        }
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Remember a finished turn under a new id, unless it is small talk. Returns whether it was
    /// kept. The limits count what this copy knows: [`Journal::sync`] first.
    ///
    /// # Errors
    ///
    /// The store failed.
    pub fn record(&mut self, now: u64, session_id: &str, user: &str, assistant: &str) -> Result<bool, String> {
        if text::is_trivial_turn(user, assistant) {
            return Ok(false);
        }
        let user = text::clip(user.trim(), MAX_STORED_CHARS);
        let assistant = text::clip(assistant.trim(), MAX_STORED_CHARS);
        let (_, update) = self.stored.append(now, session_id, &user, &assistant)?;
        self.apply(update);
        Ok(true)
    }

    /// The recall block for a user's new message in `session_id`: up to `max_results` entries
    /// scoring at least `min_score`, best first; "" for a trivial message or when nothing
    /// scores.
    pub fn recall(&self, query: &str, session_id: &str, settings: &Settings, now: u64) -> String {
        if text::is_trivial(query) {
            return String::new();
        }
        let terms = text::terms(query);
        let weight = self.index.weight(&terms);
        if weight <= 0.0 {
            return String::new();
        }
        let mut hits: Vec<(usize, f32)> = self
            .index
            .score(&terms, |doc| !(settings.exclude_current_session && self.entries[doc].session_id == session_id))
            .into_iter()
            .filter(|h| h.score / weight >= settings.min_score)
            .map(|h| (h.doc, h.score * recency(self.entries[h.doc].ts, now)))
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        hits.truncate(settings.max_results);
        if hits.is_empty() {
            return String::new();
        }
        let mut block = String::from(RECALL_HEADER);
        for (doc, _) in hits {
            let e = &self.entries[doc];
            block.push_str(&format!(
                "\n- {} (session {}): user asked \"{}\"; answer: \"{}\"",
                date(e.ts),
                e.session_id,
                text::snippet(&e.user, RECALL_USER_CHARS),
                text::snippet(&e.assistant, RECALL_ANSWER_CHARS),
            ));
        }
        block
    }

    /// Entries of any session matching `query`, best first and newest first among equals;
    /// the newest entries when the query has no searchable words.
    pub fn search(&self, query: &str, limit: usize, clip_chars: usize) -> Vec<Found> {
        let terms = text::terms(query);
        let ranked: Vec<(usize, f32)> = if terms.is_empty() {
            (0..self.entries.len()).rev().take(limit).map(|doc| (doc, 0.0)).collect()
        } else {
            let weight = self.index.weight(&terms).max(f32::EPSILON);
            let mut hits: Vec<(usize, f32)> = self
                .index
                .score(&terms, |_| true)
                .into_iter()
                .map(|h| (h.doc, (h.score / weight * 100.0).round() / 100.0))
                .collect();
            hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
            hits.truncate(limit);
            hits
        };
        ranked
            .into_iter()
            .map(|(doc, score)| {
                let e = &self.entries[doc];
                Found {
                    date: date(e.ts),
                    session_id: e.session_id.clone(),
                    user: text::clip(&e.user, clip_chars),
                    assistant: text::clip(&e.assistant, clip_chars),
                    score,
                }
            })
            .collect()
    }
}

fn build_index(entries: &[Entry]) -> Index {
    let mut index = Index::default();
    for e in entries {
        index.add(&[&e.user, &e.assistant]);
    }
    index
}

/// 1 + [`RECENCY_WEIGHT`] for an entry from today, falling off with age.
fn recency(ts: u64, now: u64) -> f32 {
    let age_days = now.saturating_sub(ts) as f32 / 86_400.0;
    1.0 + RECENCY_WEIGHT / (1.0 + age_days / RECENCY_DAYS)
}

/// Seconds since the Unix epoch as a UTC date, `YYYY-MM-DD`.
pub fn date(unix_secs: u64) -> String {
    // H. Hinnant's civil_from_days, for days on or after the epoch.
    let z = unix_secs / 86_400 + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    const DAY: u64 = 86_400;
    const NOW: u64 = 1_795_352_532; // 2026-11-22

    fn journal(turns: &[(&str, &str, &str)]) -> Journal<MemStore> {
        let mut j = Journal::open(MemStore::default(), Limits::default(), NOW, &mut Vec::new()).expect("opens");
        for (i, (session, user, assistant)) in turns.iter().enumerate() {
            let ts = NOW - 10 * DAY + i as u64 * DAY;
            assert!(j.record(ts, session, user, assistant).expect("recorded"), "kept: {user}");
        }
        j
    }

    fn sample() -> Journal<MemStore> {
        journal(&[
            (
                "s1",
                "why does the arm64 release build fail",
                "The arm64 linker was missing; install gcc-aarch64-linux-gnu.",
            ),
            (
                "s1",
                "how do I rotate the staging database password",
                "Run `make rotate-db ENV=staging`; it updates the vault.",
            ),
            (
                "s2",
                "the flaky login test fails again on CI",
                "It races the session cookie; wait for the redirect first.",
            ),
            ("s3", "what port does the staging database listen on", "Port 5433, behind the bastion host."),
        ])
    }

    #[test]
    fn recall_finds_other_sessions_and_formats_a_block() {
        let j = sample();
        let block = j.recall("which port is the staging database on", "s9", &Settings::default(), NOW);
        let lines: Vec<&str> = block.lines().collect();
        assert_eq!(lines[0], RECALL_HEADER);
        assert_eq!(
            lines[1],
            "- 2026-11-15 (session s3): user asked \"what port does the staging database listen on\"; answer: \"Port 5433, behind the bastion host.\""
        );
        assert!(lines.len() <= 4);
        assert!(block.contains("rotate the staging database"), "a weaker match follows:\n{block}");
    }

    #[test]
    fn recall_skips_the_current_session_trivial_messages_and_weak_matches() {
        let j = sample();
        let in_s3 = j.recall("which port is the staging database on", "s3", &Settings::default(), NOW);
        assert!(!in_s3.contains("session s3"), "{in_s3}");
        let all = Settings { exclude_current_session: false, ..Settings::default() };
        assert!(j.recall("which port is the staging database on", "s3", &all, NOW).contains("session s3"));
        assert_eq!(j.recall("thanks, great", "s9", &Settings::default(), NOW), "");
        assert_eq!(j.recall("/compress staging database", "s9", &Settings::default(), NOW), "");
        assert_eq!(j.recall("kubernetes helm chart upgrade", "s9", &Settings::default(), NOW), "");
        assert_eq!(
            j.recall("how do I deploy the frontend to staging", "s9", &Settings::default(), NOW),
            "",
            "one shared word is not enough"
        );
        let strict = Settings { min_score: 5.0, ..Settings::default() };
        assert_eq!(j.recall("which port is the staging database on", "s9", &strict, NOW), "");
    }

    #[test]
    fn a_journal_of_one_entry_already_recalls() {
        // As in the end-to-end test: one remembered turn, then a question in a new session.
        let j = journal(&[(
            "first",
            "Remember this: the staging database runs postgres on port 5433 behind pgbouncer",
            "Noted: staging uses postgres on port 5433.",
        )]);
        let block = j.recall("Which port does the staging database listen on?", "second", &Settings::default(), NOW);
        assert!(block.starts_with(RECALL_HEADER) && block.contains("5433"), "{block:?}");
        let more_new_words = "Which port does the staging database listen on these days, with the new proxy?";
        assert!(j.recall(more_new_words, "second", &Settings::default(), NOW).contains("5433"));
        assert_eq!(j.recall("How do I bake sourdough bread at home?", "second", &Settings::default(), NOW), "");
    }

    #[test]
    fn recall_keeps_to_max_results_and_prefers_recent_entries_on_equal_text() {
        let same = "the nightly backup job of the orders database failed";
        let j =
            journal(&[("a", same, "disk full on the backup volume"), ("b", same, "disk full on the backup volume")]);
        let one = Settings { max_results: 1, ..Settings::default() };
        let block = j.recall("nightly backup of the orders database failed", "z", &one, NOW);
        assert_eq!(block.lines().count(), 2);
        assert!(block.contains("(session b)"), "newer wins:\n{block}");
    }

    #[test]
    fn search_covers_every_session_and_lists_newest_first_without_a_query() {
        let j = sample();
        let found = j.search("staging database", 10, 2000);
        assert_eq!(found.len(), 2);
        assert!(found[0].score >= found[1].score);
        assert!(found.iter().all(|f| f.user.contains("staging database")));
        let newest = j.search("", 2, 2000);
        assert_eq!(newest.iter().map(|f| f.session_id.as_str()).collect::<Vec<_>>(), ["s3", "s2"]);
        assert_eq!(newest[0].score, 0.0);
        assert_eq!(j.search("staging", 10, 5)[0].user.chars().count(), 6, "clipped with an ellipsis");
    }

    #[test]
    fn small_talk_is_not_recorded_and_long_turns_are_clipped() {
        let mut j = journal(&[]);
        assert!(!j.record(NOW, "s", "thanks!", "You're welcome.").expect("ok"));
        assert!(!j.record(NOW, "s", "/model fast", "Switched to the fast model for this session.").expect("ok"));
        let long = "word ".repeat(2_000);
        assert!(j.record(NOW, "s", &format!("explain the deploy pipeline {long}"), &long).expect("ok"));
        assert_eq!(j.len(), 1);
        assert_eq!(j.entries[0].user.chars().count(), MAX_STORED_CHARS + 1);
    }

    #[test]
    fn the_index_follows_reopening_and_retention() {
        let limits = Limits { max_entries: 4, drop_entries: 2, ..Limits::default() };
        let mut j = Journal::open(MemStore::default(), limits, NOW, &mut Vec::new()).expect("opens");
        for i in 0..6u64 {
            j.record(
                NOW + i,
                &format!("s{i}"),
                &format!("topic{i} question about deploys"),
                "a long enough answer about deploys here",
            )
            .expect("recorded");
        }
        assert_eq!(j.len(), 4, "two oldest entries dropped");
        assert!(j.search("topic0", 10, 100).is_empty());
        assert_eq!(j.search("topic5", 10, 100).len(), 1);
        let store = j.stored.store().snapshot();
        let reopened = Journal::open(store, limits, NOW, &mut Vec::new()).expect("reopens");
        assert_eq!(reopened.len(), 4);
        assert_eq!(reopened.search("topic2", 10, 100)[0].session_id, "s2");
    }

    #[test]
    fn a_long_lived_copy_recalls_what_another_process_recorded_meanwhile() {
        // A REPL's journal, open for the whole session, and a one-shot `chat -q` in another
        // terminal, on one store.
        let store = MemStore::default();
        let mut repl = Journal::open(store.clone(), Limits::default(), NOW, &mut Vec::new()).expect("opens");
        assert!(
            repl.record(NOW, "repl", "why does the arm64 release build fail", "The linker is missing.").expect("ok")
        );
        let mut one_shot = Journal::open(store.clone(), Limits::default(), NOW, &mut Vec::new()).expect("opens");
        assert!(one_shot.record(NOW, "oneshot", "which port does the staging database use", "Port 5433.").expect("ok"));
        // The REPL's next turn: after a sync it recalls the other process's entry.
        let question = "what port is the staging database on";
        assert_eq!(repl.recall(question, "repl", &Settings::default(), NOW), "", "not synced yet");
        repl.sync(NOW, &mut Vec::new()).expect("syncs");
        assert!(repl.recall(question, "repl", &Settings::default(), NOW).contains("5433"));
        // And records its own next turn under a new id, keeping the other's.
        assert!(repl.record(NOW, "repl", "how do I rotate the database password", "Run make rotate.").expect("ok"));
        let reopened = Journal::open(store, Limits::default(), NOW, &mut Vec::new()).expect("opens");
        let mut ids: Vec<u64> = reopened.entries.iter().map(|e| e.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, [0, 1, 2]);
        assert_eq!(reopened.search("", 10, 100).len(), 3);
    }

    /// Words for synthetic entries: "ba", "be", ..., "zuzu", ... (deterministic).
    fn word(i: u64) -> String {
        const SYL: [&str; 20] = [
            "ba", "ke", "li", "mo", "nu", "pa", "re", "si", "to", "vu", "da", "fe", "gi", "ho", "ju", "ka", "le", "mi",
            "no", "pu",
        ];
        let mut w = String::new();
        let mut i = i + 20;
        while i > 0 {
            w.push_str(SYL[(i % 20) as usize]);
            i /= 20;
        }
        w
    }

    /// A store holding `n` entries of about 130 words each.
    fn big_store(n: u64) -> MemStore {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        // Zipf-like: small word numbers are much more frequent.
        let mut text = |words: usize| -> String {
            (0..words).map(|_| word((next() % 4000) * (next() % 4000) / 4000)).collect::<Vec<_>>().join(" ")
        };
        let store = MemStore::default();
        let entries: Vec<Entry> = (0..n)
            .map(|id| Entry {
                id,
                ts: NOW - (n - id) * 600,
                session_id: format!("s{}", id / 20),
                user: text(15),
                assistant: text(120),
            })
            .collect();
        for e in &entries {
            store.insert(&format!("e/{:012}", e.id), &serde_json::to_vec(e).expect("json"));
        }
        store.insert("next-id", n.to_string().as_bytes());
        store
    }

    #[test]
    fn ten_thousand_entries_recall_quickly() {
        let store = big_store(10_000);
        let opened = std::time::Instant::now();
        let j = Journal::open(store, Limits::default(), NOW, &mut Vec::new()).expect("opens");
        eprintln!("loading and indexing 10,000 entries: {:?}", opened.elapsed());
        // The first call of a process pays this once; keep it well inside the plugin's deadline.
        let budget = if cfg!(debug_assertions) { 20_000 } else { 2_000 };
        assert!(opened.elapsed() < std::time::Duration::from_millis(budget), "{:?}", opened.elapsed());
        assert_eq!(j.len(), 10_000);
        let queries: Vec<String> =
            (0..50).map(|q| (0..8).map(|i| word(q * 37 + i * 101)).collect::<Vec<_>>().join(" ")).collect();
        let started = std::time::Instant::now();
        let mut found = 0;
        for q in &queries {
            found += usize::from(!j.recall(q, "s-current", &Settings::default(), NOW).is_empty());
        }
        let per_query = started.elapsed() / u32::try_from(queries.len()).unwrap_or(1);
        eprintln!("recall over 10,000 entries: {per_query:?} per query, {found} of {} found something", queries.len());
        // Release builds (and the wasm plugin) must stay well under 5 ms; debug builds are ~20x slower.
        let budget = if cfg!(debug_assertions) { 100 } else { 5 };
        assert!(per_query < std::time::Duration::from_millis(budget), "{per_query:?} per query");
    }

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(NOW), "2026-11-22");
        assert_eq!(date(951_782_399), "2000-02-28");
    }
}
