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
//!    [`RANK_WINDOW`] matches are ranked, which bounds what a very common word costs;
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

use rusqlite::types::Value;
use rusqlite::{Transaction, params, params_from_iter};
use talaria_protocol::Role;

use crate::{Error, Result, Store, count};
use query::{Query, has_cjk};

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

/// The two FTS5 tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Index {
    Words,
    Trigram,
}

impl Index {
    fn table(self) -> &'static str {
        match self {
            Self::Words => "messages_fts",
            Self::Trigram => "messages_trigram",
        }
    }

    /// Tokens of context in a snippet: a trigram token is one character.
    fn snippet_tokens(self) -> u32 {
        match self {
            Self::Words => 24,
            Self::Trigram => 64,
        }
    }
}

/// How many messages may wait to be indexed before the commit that ends a turn indexes them: a
/// search catches up with at most about this many, and most one-shot runs index nothing.
pub const INDEX_BATCH: i64 = 256;

/// Index the active messages stored above the watermark, and move it to the newest message, if
/// at least `min` messages are pending. Writers are serialized, so every message up to the
/// newest is committed and none is in flight. Returns how many messages were indexed.
pub(crate) fn index_pending(tx: &Transaction<'_>, min: i64) -> Result<usize> {
    let (mark, top): (i64, i64) = tx
        .prepare_cached("SELECT indexed, (SELECT coalesce(max(id), 0) FROM messages) FROM search_watermark")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if top <= mark || top - mark < min {
        return Ok(0);
    }
    let mut indexed = 0;
    for sql in [
        "INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
         SELECT id, content, tool_name, tool_calls FROM messages WHERE id > ?1 AND id <= ?2 AND active",
        "INSERT INTO messages_trigram (rowid, content, tool_name, tool_calls)
         SELECT id, content, tool_name, tool_calls FROM messages WHERE id > ?1 AND id <= ?2 AND active",
    ] {
        indexed = tx.prepare_cached(sql)?.execute(params![mark, top])?;
    }
    tx.prepare_cached("UPDATE search_watermark SET indexed = ?1")?.execute([top])?;
    Ok(indexed)
}

impl Store {
    /// Bring the search indexes up to date with every committed message (see [`crate::search`]).
    /// Returns how many messages were indexed; nothing is written when none is pending.
    ///
    /// # Errors
    /// Database failures, including a store opened read-only.
    pub async fn index_pending(&self) -> Result<usize> {
        // PostgreSQL indexes each message as it is committed.
        if self.pg().is_some() {
            return Ok(0);
        }
        if !self.search_pending().await? {
            return Ok(0);
        }
        self.write(|tx| index_pending(tx, 1))
    }

    /// Whether messages were committed since the indexes last caught up.
    async fn search_pending(&self) -> Result<bool> {
        let conn = self.conn()?;
        let mut stmt =
            conn.prepare_cached("SELECT (SELECT coalesce(max(id), 0) FROM messages) > indexed FROM search_watermark")?;
        Ok(stmt.query_row([], |r| r.get(0))?)
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
        if let Some(pg) = self.pg() {
            return pg.search(q, limit).await;
        }
        // A store that cannot be written (opened read-only, or locked for longer than a write
        // waits) searches what was indexed: the messages of turns still under way are missing.
        match self.index_pending().await {
            Ok(_) => {}
            Err(e) if matches!(e, Error::Busy) || e.is_busy() || e.is_read_only() => {}
            Err(e) => return Err(e),
        }
        let parsed = Query::parse(q.text);
        let cjk = has_cjk(q.text);
        if !cjk {
            if let Some(expr) = parsed.words() {
                let hits = self.search_index(Index::Words, Some(&expr), (&[], &[]), q, limit)?;
                if !hits.is_empty() {
                    return Ok(hits);
                }
            }
            if q.text.trim().chars().count() < query::TRIGRAM_MIN_CHARS {
                return Ok(Vec::new());
            }
        }
        let expr = parsed.substrings();
        let (wanted, unwanted) = parsed.short_terms();
        // Without a term for the index, only CJK text (where one- and two-character words are
        // the norm) is worth a scan.
        if expr.is_none() && (wanted.is_empty() || !cjk) {
            return Ok(Vec::new());
        }
        self.search_index(Index::Trigram, expr.as_deref(), (&wanted, &unwanted), q, limit)
    }

    /// Run one search: `expr` against `index` (or, without one, a newest-first scan), with the
    /// substrings in `like.0` required and those in `like.1` excluded.
    fn search_index(
        &self,
        index: Index,
        expr: Option<&str>,
        like: (&[&str], &[&str]),
        q: &SearchQuery<'_>,
        limit: usize,
    ) -> Result<Vec<SearchHit>> {
        // A session's messages lie between its first and last id: a range FTS5 can seek to.
        let (lo, hi) = match q.session_id {
            None => (i64::MIN, i64::MAX),
            Some(session) => {
                let range: (Option<i64>, Option<i64>) = self
                    .conn()?
                    .prepare_cached("SELECT min(id), max(id) FROM messages WHERE session_id = ?1 AND active")?
                    .query_row([session], |r| Ok((r.get(0)?, r.get(1)?)))?;
                match range {
                    (Some(lo), Some(hi)) => (lo, hi),
                    _ => return Ok(Vec::new()),
                }
            }
        };
        let mut args: Vec<Value> = vec![
            expr.map_or(Value::Null, |e| Value::Text(e.to_owned())),
            q.role.map_or(Value::Null, |r| Value::Text(r.as_str().to_owned())),
            q.session_id.map_or(Value::Null, |s| Value::Text(s.to_owned())),
            q.exclude_session.map_or(Value::Null, |s| Value::Text(s.to_owned())),
            Value::Integer(count(limit)),
            Value::Integer(lo),
            Value::Integer(hi),
        ];
        let mut like_sql = String::new();
        for (terms, not) in [(like.0, ""), (like.1, "NOT")] {
            for term in terms {
                args.push(Value::Text(format!("%{}%", escape_like(term))));
                let n = args.len();
                like_sql.push_str(&format!(
                    " AND {not} (m.content LIKE ?{n} ESCAPE '\\' OR coalesce(m.tool_name, '') LIKE ?{n} ESCAPE '\\'
                                 OR coalesce(m.tool_calls, '') LIKE ?{n} ESCAPE '\\')"
                ));
            }
        }
        let filters = "m.active AND (?2 IS NULL OR m.role = ?2) AND (?3 IS NULL OR m.session_id = ?3)
                       AND (?4 IS NULL OR m.session_id <> ?4)";
        let sql = match expr {
            // Rank the newest RANK_WINDOW matches by bm25 (the index hands them over newest
            // first, so a common word costs no more than a rare one), then make snippets for the
            // best `limit` of them only.
            Some(_) => {
                let (t, n) = (index.table(), index.snippet_tokens());
                // Only active messages are indexed (see the schema's triggers), so without other
                // filters the ranking needs no look at `messages`; the final join checks `active`
                // again in case the index was rebuilt by hand.
                let unfiltered = q.role.is_none()
                    && q.session_id.is_none()
                    && q.exclude_session.is_none()
                    && like.0.is_empty()
                    && like.1.is_empty();
                let (join, filters) = if unfiltered {
                    (String::new(), "?2 IS NULL AND ?3 IS NULL AND ?4 IS NULL".to_owned())
                } else {
                    (format!("JOIN messages m ON m.id = {t}.rowid"), format!("{filters}{like_sql}"))
                };
                format!(
                    "WITH recent AS (
                         SELECT {t}.rowid AS id, bm25({t}) AS score
                         FROM {t} {join}
                         WHERE {t} MATCH ?1 AND {t}.rowid BETWEEN ?6 AND ?7 AND {filters}
                         ORDER BY {t}.rowid DESC LIMIT {RANK_WINDOW}
                     ), best AS (SELECT id, score FROM recent ORDER BY score, id DESC LIMIT ?5)
                     SELECT m.id, m.session_id, s.title, m.role,
                            snippet({t}, -1, '{MATCH_START}', '{MATCH_END}', '{ELLIPSIS}', {n}), m.created_at
                     FROM best CROSS JOIN {t} CROSS JOIN messages m CROSS JOIN sessions s
                     WHERE {t}.rowid = best.id AND {t} MATCH ?1 AND m.id = best.id AND m.active
                       AND s.id = m.session_id
                     ORDER BY best.score, best.id DESC"
                )
            }
            None => format!(
                "SELECT m.id, m.session_id, s.title, m.role, m.content, m.created_at
                 FROM messages m JOIN sessions s ON s.id = m.session_id
                 WHERE ?1 IS NULL AND m.id BETWEEN ?6 AND ?7 AND {filters}{like_sql}
                 ORDER BY m.id DESC LIMIT ?5"
            ),
        };
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params_from_iter(args), |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })?;
        let mut hits = Vec::new();
        for row in rows {
            let (message_id, session_id, session_title, role, text, created_at) = row?;
            let role = Role::parse(&role)
                .ok_or_else(|| Error::Corrupt { what: format!("message {message_id}: unknown role \"{role}\"") })?;
            let snippet = if expr.is_some() { text } else { like_snippet(&text, like.0) };
            hits.push(SearchHit { session_id, session_title, message_id, role, snippet, created_at });
        }
        Ok(hits)
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
