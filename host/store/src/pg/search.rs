//! Search on PostgreSQL, with the syntax and the intent of [`crate::search`]:
//!
//! 1. unless the query holds CJK text, its words run against the `tsvector` column (English
//!    stemming; punctuation splits words on both sides, as SQLite's tokenizer does), through its
//!    GIN index. Phrases keep their order (`<->`), `word*` is a prefix (`:*`), and `AND`, `OR`
//!    and `NOT` keep FTS5's precedence. The newest [`RANK_WINDOW`] matches are ranked by
//!    `ts_rank_cd`, newer first on ties, and the snippet is `ts_headline`'s;
//! 2. when that finds nothing and the query is three characters or more, or when it holds CJK
//!    text, every term of three characters or more must appear as a substring (`ILIKE`, which
//!    the `pg_trgm` GIN indexes serve), newest first;
//! 3. shorter terms must appear too, checked with `ILIKE` on those hits; one or two CJK
//!    characters are looked up in the message's CJK grams, through their GIN index.
//!
//! A term made only of stop words (`or`, `the`) is required as SQLite requires it: no message's
//! words hold it, so such a query goes on to the substring search.
//!
//! Terms reach the server only as bound parameters: no text can make a query fail.

use tokio_postgres::types::ToSql;

use super::{Cached as _, Pg, sql};
use crate::search::query::{Query, TRIGRAM_MIN_CHARS, has_cjk, is_cjk};
use crate::search::{ELLIPSIS, MATCH_END, MATCH_START, RANK_WINDOW, SearchHit, SearchQuery, escape_like, like_snippet};
use crate::{Error, Result};

/// The longest CJK gram `messages.cjk` holds (PostgreSQL migration 3).
const CJK_GRAM_MAX: usize = 2;

/// A tsquery nothing matches.
const NEVER: &str = "'never & !never'::tsquery";

/// A term's words with punctuation turned into spaces, as the `tsvector` column reads text.
fn words_of(text: &str) -> String {
    text.chars().map(|c| if c.is_alphanumeric() || c.is_whitespace() { c } else { ' ' }).collect()
}

/// Builds the SQL of a query and its parameters (`$1`.. are the fixed filters).
#[derive(Default)]
struct Params {
    values: Vec<Box<dyn ToSql + Sync + Send>>,
    /// A term is looked up in the CJK grams: plan the query for its values (see `run_search`).
    grams: bool,
}

impl Params {
    fn push(&mut self, v: impl ToSql + Sync + Send + 'static) -> String {
        self.values.push(Box::new(v));
        format!("${}", self.values.len())
    }
}

/// The `tsquery` expression for the word groups, or `None` when no term has a word.
fn tsquery(groups: &[Vec<(bool, String, bool)>], p: &mut Params) -> Option<String> {
    let mut ors = Vec::new();
    for group in groups {
        let mut ands = Vec::new();
        for (negated, text, prefix) in group {
            let words: Vec<String> = words_of(text).split_whitespace().map(str::to_lowercase).collect();
            if words.is_empty() {
                continue;
            }
            let term = if *prefix {
                // Only letters and digits: nothing in it is tsquery syntax.
                let expr = format!("{}:*", words.join(" <-> "));
                format!("to_tsquery('english', {})", p.push(expr))
            } else {
                let k = p.push(words.join(" "));
                // A term of stop words only is no tsquery at all; as on SQLite (which keeps every
                // word), it is still required: the word search cannot find it, the substring
                // search then may.
                format!(
                    "(CASE WHEN numnode(phraseto_tsquery('english', {k})) = 0 THEN {NEVER} \
                     ELSE phraseto_tsquery('english', {k}) END)"
                )
            };
            ands.push(if *negated { format!("(!! {term})") } else { term });
        }
        if !ands.is_empty() {
            ors.push(format!("({})", ands.join(" && ")));
        }
    }
    (!ors.is_empty()).then(|| ors.join(" || "))
}

/// `term` somewhere in a message's text, as SQL. One or two CJK characters are looked up in
/// the message's CJK grams (`messages.cjk`, which a GIN index serves); the grams are every such
/// run in the text, tool name and arguments, so the lookup is exact. A longer term without
/// letters that have a case (CJK text, digits) goes through `LIKE`, which need not fold every
/// row's case as `ILIKE` does.
fn contains(term: &str, p: &mut Params) -> String {
    if (1..=CJK_GRAM_MAX).contains(&term.chars().count()) && term.chars().all(is_cjk) {
        p.grams = true;
        return format!("(m.cjk @> ARRAY[{}::text])", p.push(term.to_string()));
    }
    let k = p.push(format!("%{}%", escape_like(term)));
    let like = if term.to_lowercase() == term.to_uppercase() { "LIKE" } else { "ILIKE" };
    format!("(m.content {like} {k} OR m.tool_name {like} {k} OR m.tool_calls {like} {k})")
}

fn not_contains(term: &str, p: &mut Params) -> String {
    format!("NOT coalesce({}, false)", contains(term, p))
}

/// The substring condition for the groups and the short terms.
fn substrings(groups: &[Vec<(bool, String, bool)>], short: (&[&str], &[&str]), p: &mut Params) -> String {
    let mut ors = Vec::new();
    for group in groups {
        let ands: Vec<String> = group
            .iter()
            .map(|(negated, text, _)| if *negated { not_contains(text, p) } else { contains(text, p) })
            .collect();
        if !ands.is_empty() {
            ors.push(format!("({})", ands.join(" AND ")));
        }
    }
    let mut parts = Vec::new();
    if !ors.is_empty() {
        parts.push(format!("({})", ors.join(" OR ")));
    }
    parts.extend(short.0.iter().map(|t| contains(t, p)));
    parts.extend(short.1.iter().map(|t| not_contains(t, p)));
    parts.join(" AND ")
}

impl Pg {
    pub(crate) async fn search(&self, q: &SearchQuery<'_>, limit: usize) -> Result<Vec<SearchHit>> {
        let parsed = Query::parse(q.text);
        let cjk = has_cjk(q.text);
        if !cjk {
            let groups = parsed.groups(true);
            let mut p = Params::default();
            if let Some(expr) = tsquery(&groups, &mut p) {
                let hits = self.run_search(q, limit, p, SearchKind::Words(expr), Vec::new()).await?;
                if !hits.is_empty() {
                    return Ok(hits);
                }
            }
            if q.text.trim().chars().count() < TRIGRAM_MIN_CHARS {
                return Ok(Vec::new());
            }
        }
        let groups = parsed.groups(false);
        let (wanted, unwanted) = parsed.short_terms();
        if groups.is_empty() && (wanted.is_empty() || !cjk) {
            return Ok(Vec::new());
        }
        let mut p = Params::default();
        let condition = substrings(&groups, (&wanted, &unwanted), &mut p);
        let mut marks: Vec<String> = groups.iter().flatten().filter(|(n, ..)| !n).map(|(_, t, _)| t.clone()).collect();
        marks.extend(wanted.iter().map(|t| (*t).to_string()));
        self.run_search(q, limit, p, SearchKind::Substrings(condition), marks).await
    }

    async fn run_search(
        &self,
        q: &SearchQuery<'_>,
        limit: usize,
        mut p: Params,
        kind: SearchKind,
        marks: Vec<String>,
    ) -> Result<Vec<SearchHit>> {
        let role = p.push(q.role.map(|r| r.as_str().to_string()));
        let session = p.push(q.session_id.map(String::from));
        let exclude = p.push(q.exclude_session.map(String::from));
        let limit_param = p.push(i64::try_from(limit).unwrap_or(i64::MAX));
        let filters = format!(
            "m.active AND ({role}::text IS NULL OR m.role = {role}) AND ({session}::text IS NULL OR m.session_id = {session})
             AND ({exclude}::text IS NULL OR m.session_id <> {exclude})"
        );
        let (sql_text, words) = match &kind {
            SearchKind::Words(expr) => (
                format!(
                    "WITH q AS (SELECT {expr} AS q),
                     recent AS (
                         SELECT m.id, m.words FROM messages m, q WHERE m.words @@ q.q AND {filters}
                         ORDER BY m.id DESC LIMIT {RANK_WINDOW}
                     ),
                     top AS (
                         SELECT recent.id, ts_rank_cd(recent.words, q.q) AS rank FROM recent, q
                         ORDER BY rank DESC, recent.id DESC LIMIT {limit_param}
                     )
                     SELECT m.id, m.session_id, s.title, m.role,
                            ts_headline('english', m.content, q.q,
                                'StartSel=\"{MATCH_START}\", StopSel=\"{MATCH_END}\", MaxWords=24, MinWords=8, MaxFragments=2, FragmentDelimiter=\"{ELLIPSIS}\"'),
                            m.created_at
                     FROM top JOIN messages m ON m.id = top.id JOIN sessions s ON s.id = m.session_id, q
                     ORDER BY top.rank DESC, m.id DESC"
                ),
                true,
            ),
            SearchKind::Substrings(condition) => (
                format!(
                    "SELECT m.id, m.session_id, s.title, m.role, m.content, m.created_at
                     FROM messages m JOIN sessions s ON s.id = m.session_id
                     WHERE {filters} AND {condition}
                     ORDER BY m.id DESC LIMIT {limit_param}"
                ),
                false,
            ),
        };
        let client = self.client().await?;
        let params: Vec<&(dyn ToSql + Sync)> = p.values.iter().map(|v| &**v as &(dyn ToSql + Sync)).collect();
        let rows = if p.grams {
            // Planned for these very grams: the planner knows from the column's statistics
            // whether one is rare (the index finds it at once) or common (the newest messages
            // hold it). A kept statement soon gets one generic plan, which scans every message,
            // newest first, for a gram no message has.
            client.query(sql_text.as_str(), &params).await.map_err(sql)?
        } else {
            client.q(&sql_text, &params).await.map_err(sql)?
        };
        let marks: Vec<&str> = marks.iter().map(String::as_str).collect();
        rows.iter()
            .map(|r| {
                let (message_id, role): (i64, String) = (r.get(0), r.get(3));
                let role = talaria_protocol::Role::parse(&role)
                    .ok_or_else(|| Error::Corrupt { what: format!("message {message_id}: unknown role \"{role}\"") })?;
                let text: String = r.get(4);
                let snippet = if words && text.contains(MATCH_START) {
                    text
                } else if words {
                    // The match was in the tool's name or arguments, not in the text.
                    like_snippet(&text, &[])
                } else {
                    like_snippet(&text, &marks)
                };
                Ok(SearchHit {
                    session_id: r.get(1),
                    session_title: r.get(2),
                    message_id,
                    role,
                    snippet,
                    created_at: r.get(5),
                })
            })
            .collect()
    }
}

enum SearchKind {
    /// A `tsquery` expression.
    Words(String),
    /// A condition on `m`.
    Substrings(String),
}
