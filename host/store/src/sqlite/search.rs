//! Search on SQLite, as [`crate::search`] describes it: two FTS5 indexes (words, and trigrams
//! for substrings), brought up to date in batches above a watermark.

use rusqlite::types::Value;
use rusqlite::{Connection, params, params_from_iter};
use talaria_protocol::Role;

use super::{Cached as _, Sqlite};
use crate::search::query::{self, Query, has_cjk};
use crate::search::{ELLIPSIS, MATCH_END, MATCH_START, RANK_WINDOW, SearchHit, SearchQuery, escape_like, like_snippet};
use crate::{Error, Result, count};

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

/// Index the active messages stored above the watermark, and move it to the newest message, if
/// at least `min` messages are pending. Writers are serialized, so every message up to the
/// newest is committed and none is in flight. Returns how many messages were indexed.
pub(crate) fn index_pending(tx: &Connection, min: i64) -> Result<usize> {
    let (mark, top): (i64, i64) =
        tx.one("SELECT indexed, (SELECT coalesce(max(id), 0) FROM messages) FROM search_watermark", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
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
        indexed = tx.run(sql, params![mark, top])?;
    }
    tx.run("UPDATE search_watermark SET indexed = ?1", [top])?;
    Ok(indexed)
}

impl Sqlite {
    pub(crate) fn index_pending(&self) -> Result<usize> {
        if !self.search_pending()? {
            return Ok(0);
        }
        self.write(|tx| index_pending(tx, 1))
    }

    /// Whether messages were committed since the indexes last caught up.
    fn search_pending(&self) -> Result<bool> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT (SELECT coalesce(max(id), 0) FROM messages) > indexed FROM search_watermark")?;
        Ok(stmt.query_row([], |r| r.get(0))?)
    }

    pub(crate) fn search(&self, q: &SearchQuery<'_>, limit: usize) -> Result<Vec<SearchHit>> {
        // A store that cannot be written (opened read-only, or locked for longer than a write
        // waits) searches what was indexed: the messages of turns still under way are missing.
        match self.index_pending() {
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
                let range: (Option<i64>, Option<i64>) = self.conn().one(
                    "SELECT min(id), max(id) FROM messages WHERE session_id = ?1 AND active",
                    [session],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
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
                     ), best AS (SELECT id, score FROM recent ORDER BY score, id DESC LIMIT +?5)
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
                 ORDER BY m.id DESC LIMIT +?5"
            ),
        };
        let conn = self.conn();
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
