//! Full-text search over every session's active messages.
//!
//! Two FTS5 indexes cover the `content`, `tool_name` and `tool_calls` of each active message
//! (see [`crate::schema`]). They are brought up to date in batches ([`Store::index_pending`]):
//! before every search, so a search always sees every message committed before it (unless the
//! store is open read-only: then it sees what the last writer indexed), and by the commit that
//! ends a turn once [`INDEX_BATCH`] messages wait, so no search has much to catch up with.
//!
//! The query syntax: words are ANDed; `"a phrase"` must appear as written; `word*` is a prefix;
//! `OR` and `NOT` (capitals, between two terms) are operators, `a NOT b` meaning a without b.
//! Anything else is text: the input is sanitized so that no string can make FTS5 fail (an
//! unclosed quote is closed, hyphenated words and FTS5 syntax characters are quoted, dangling
//! operators are dropped, terms past the 64th are ignored). Then:
//! 1. unless it holds CJK text, it runs against the word index (porter stemming, so `running`
//!    finds `runs`); hits are ranked by bm25, newer first on ties. Only the newest
//!    [`RANK_WINDOW`] matches are ranked, which bounds what a very common word costs (on
//!    PostgreSQL, the newest 500, by `ts_rank` over the text's length: see `pg/search.rs`);
//! 2. when that finds nothing and the query is at least three characters long, or when it holds
//!    CJK text, it runs against the trigram index: every term of three characters or more must
//!    appear as a substring (case-insensitive), ranked by bm25;
//! 3. terms of one or two characters are beyond the trigram index: they must appear too, checked
//!    with `LIKE` (ASCII case-insensitive) on the hits. A CJK query made only of such terms (most
//!    Chinese words have two characters) scans the messages newest first until `limit` hits,
//!    which is slower (milliseconds to tens of milliseconds on 100k messages).
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), talaria_store::Error> {
//! use talaria_protocol::Role;
//! use talaria_store::{SearchQuery, Store};
//!
//! # let store = Store::open(std::path::Path::new("/tmp/state.db"))?;
//! let q = SearchQuery { role: Some(Role::User), ..SearchQuery::new("\"docker compose\" OR podman") };
//! for hit in store.search(&q).await? {
//!     println!("{} {}: {}", hit.session_id, hit.message_id, hit.snippet); // "... >>>docker compose<<< ..."
//! }
//! # Ok(())
//! # }
//! ```

pub(crate) mod query;

use talaria_protocol::Role;

use crate::{Engine, Result, Store};

/// Most hits one search returns, whatever its `limit`.
pub const MAX_SEARCH_LIMIT: usize = 200;
/// Where a match starts and ends in [`SearchHit::snippet`].
pub const MATCH_START: &str = ">>>";
pub const MATCH_END: &str = "<<<";
/// Marks text cut from either end of a snippet.
pub(crate) const ELLIPSIS: &str = "...";
/// How many of the newest matches are ranked by relevance. A query matching more messages than
/// this (a very common word) finds the best of the most recent ones: relevance among tens of
/// thousands of matches means little, and ranking them all costs 1-2 ms per 1000 (ranking all
/// 85k messages holding "the" among 100k took 116 ms; the window keeps it under 6 ms).
pub const RANK_WINDOW: usize = 2000;
/// Characters of context kept on each side of a match in a `LIKE`-found snippet.
const LIKE_CONTEXT_CHARS: usize = 40;

/// What to search for, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchQuery<'a> {
    /// As the user typed it (see [`crate::search`] for the syntax).
    pub text: &'a str,
    /// Most hits wanted, at most [`MAX_SEARCH_LIMIT`].
    pub limit: usize,
    /// Only messages of this role.
    pub role: Option<Role>,
    /// Only this session.
    pub session_id: Option<&'a str>,
    /// Not this session (typically the current one).
    pub exclude_session: Option<&'a str>,
}

impl<'a> SearchQuery<'a> {
    /// Search everywhere for `text`, 20 hits at most.
    pub fn new(text: &'a str) -> Self {
        Self { text, limit: 20, role: None, session_id: None, exclude_session: None }
    }
}

/// One matching message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    pub session_id: String,
    pub session_title: Option<String>,
    pub message_id: i64,
    pub role: Role,
    /// Some text around the match, matches between [`MATCH_START`] and [`MATCH_END`].
    pub snippet: String,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// How many messages may wait to be indexed before the commit that ends a turn indexes them: a
/// search catches up with at most about this many, and most one-shot runs index nothing.
pub const INDEX_BATCH: i64 = 256;

impl Store {
    /// Bring the search indexes up to date with every committed message (see [`crate::search`]).
    /// Returns how many messages were indexed; nothing is written when none is pending.
    ///
    /// # Errors
    /// Database failures, including a store opened read-only.
    pub async fn index_pending(&self) -> Result<usize> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.index_pending(),
            // PostgreSQL indexes each message as it is committed.
            Engine::Postgres(_) => Ok(0),
        }
    }

    /// The active messages matching `q`, best first (see [`crate::search`]). Any text is a valid
    /// query; one with nothing searchable in it finds nothing.
    ///
    /// # Errors
    /// Only database failures.
    pub async fn search(&self, q: &SearchQuery<'_>) -> Result<Vec<SearchHit>> {
        let limit = q.limit.min(MAX_SEARCH_LIMIT);
        if limit == 0 {
            return Ok(Vec::new());
        }
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.search(q, limit),
            Engine::Postgres(pg) => pg.search(q, limit).await,
        }
    }
}

pub(crate) fn escape_like(term: &str) -> String {
    let mut out = String::with_capacity(term.len());
    for c in term.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A snippet for a message found by `LIKE`: some context around the first term's first
/// occurrence, every term marked.
pub(crate) fn like_snippet(content: &str, terms: &[&str]) -> String {
    let chars: Vec<char> = content.chars().collect();
    let lower: Vec<char> = chars.iter().map(|c| c.to_ascii_lowercase()).collect();
    let term_chars: Vec<Vec<char>> = terms
        .iter()
        .map(|t| t.chars().map(|c| c.to_ascii_lowercase()).collect())
        .filter(|t: &Vec<char>| !t.is_empty())
        .collect();
    let find = |from: usize, to: usize| -> Option<(usize, usize)> {
        (from..to).find_map(|i| term_chars.iter().find(|t| lower[i..].starts_with(t)).map(|t| (i, i + t.len())))
    };
    let first = find(0, chars.len()).map_or(0, |(start, _)| start);
    let start = first.saturating_sub(LIKE_CONTEXT_CHARS);
    let end = (first + 2 * LIKE_CONTEXT_CHARS).min(chars.len());
    let mut out = String::new();
    if start > 0 {
        out.push_str(ELLIPSIS);
    }
    let mut i = start;
    while i < end {
        match find(i, end) {
            Some((s, e)) => {
                out.extend(&chars[i..s]);
                out.push_str(MATCH_START);
                out.extend(&chars[s..e]);
                out.push_str(MATCH_END);
                i = e;
            }
            _ => {
                out.extend(&chars[i..end]);
                i = end;
            }
        }
    }
    if end < chars.len() {
        out.push_str(ELLIPSIS);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_snippets_mark_every_term() {
        assert_eq!(like_snippet("我们的数据和数据库", &["数据"]), "我们的>>>数据<<<和>>>数据<<<库");
        let long = format!("{}数据{}", "前".repeat(100), "后".repeat(100));
        let s = like_snippet(&long, &["数据"]);
        assert!(s.starts_with("...") && s.ends_with("...") && s.contains(">>>数据<<<"), "{s}");
        assert_eq!(like_snippet("no match here", &["数据"]), "no match here");
    }

    #[test]
    fn like_patterns_are_escaped() {
        assert_eq!(escape_like(r"50%_off\"), r"50\%\_off\\");
    }
}
