//! Search on PostgreSQL, with the syntax and the intent of [`crate::search`]:
//!
//! 1. unless the query holds CJK text, its words run against the `tsvector` column (English
//!    stemming; punctuation splits words on both sides, as SQLite's tokenizer does), through its
//!    GIN index. Phrases keep their order (`<->`), `word*` is a prefix (`:*`), and `AND`, `OR`
//!    and `NOT` keep FTS5's precedence. The newest [`RANK_WINDOW`] matches are ranked by
//!    `ts_rank` over the text's length, newer first on ties;
//! 2. when that finds nothing and the query is three characters or more, or when it holds CJK
//!    text, every term of three characters or more must appear in the lower-cased `haystack`
//!    (text, tool name and arguments; `LIKE`, which its `pg_trgm` GIN index serves), newest
//!    first;
//! 3. shorter terms must appear too, checked with `LIKE` on those hits; one or two CJK
//!    characters are looked up in the message's CJK grams, through their GIN index.
//!
//! A term made only of stop words (`or`, `the`) is required as SQLite requires it: no message's
//! words hold it, so such a query goes on to the substring search.
//!
//! ## Newest first, a span of ids at a time
//!
//! A GIN index hands over every match at once, in no useful order: a word in one message of
//! twenty costs a heap visit for each of its 5,000 matches among 100k messages (50,000 among a
//! million) before the newest can be picked. So both search indexes (migration 4) have more
//! columns: each message's buckets of ids ([`spans::BUCKET`]), its role and its session. A search
//! names the buckets of a span of the newest ids ([`spans::Spans`]), and its role or session when it
//! has one: the index then finds only the matches in that span, only those are read, and the
//! next, older span is as wide as the density of the matches so far says the rest needs. The
//! first span of a word search comes from the planner's estimate of the word's matches (an
//! `EXPLAIN`, sent with the query's other first questions in one round trip). A rare word is
//! searched whole at once ([`spans::rest_at_once`]): its few matches cost less than the buckets.
//!
//! A word search reads the matches of a span by id, then again by their place in the table to
//! rank them, and only the best `limit` of the span come back, with what a hit shows. A
//! substring search reads the newest `limit` matches of a span; for a query of stop words only
//! (in most messages) it is planned for its values, so that the planner can read the messages
//! newest first and stop at the last one wanted.
//!
//! ## How it differs from SQLite
//!
//! - Ranking: the newest 500 matches are ranked where SQLite ranks 2000 (for a word in more
//!   than 500 messages the engines may put different hits first), and by `ts_rank` with the
//!   length of the text counted in (as bm25 counts it), where `ts_rank_cd` cost 4 µs a match,
//!   ten times as much.
//! - Snippets are built here rather than by `ts_headline` (which parsed each hit's whole text
//!   again, 0.2 ms a hit): about 24 words around the place with the most matches, each word
//!   that stems to a word of the query marked. The server stems the query's words and those of
//!   the hits' text that start as one of them do, in one round trip ([`snippet::marked_words`]).
//! - A substring search returns the newest hits, where SQLite ranks them by bm25.
//!
//! Terms reach the server only as bound parameters: no text can make a query fail.

mod snippet;
pub(crate) mod spans;

use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use super::{Cached as _, Client, sql};
use crate::search::query::{Query, TRIGRAM_MIN_CHARS, has_cjk, is_cjk};
use crate::search::{SearchHit, SearchQuery, escape_like, like_snippet};
use crate::{Error, Result};
use snippet::{marked_words, word_ranges, word_snippet};
use spans::{BUCKET, COARSE_BUCKET, SAMPLE_SPAN, Spans, rest_at_once};

/// How many of the newest matches of a word search are ranked (SQLite's
/// [`crate::search::RANK_WINDOW`] is 2000): a ranked match costs its heap visit, a second read
/// by its place and its `ts_rank`, 5-8 µs together here.
pub(crate) const RANK_WINDOW: usize = 500;

/// A word the planner expects in fewer than one message in this many is searched first in a
/// span of [`SAMPLE_SPAN`] ids (see there).
const SAMPLED_BELOW: f64 = 200.0;

/// How much wider the first span of a word search is made than the planner's estimate says.
const ESTIMATE_MARGIN: f64 = 1.2;

/// The first span of a substring search for 20 hits, in ids. Most queries that get there are
/// rare (the word search found nothing) and the ids one span covers cost little when they hold
/// no candidate, but a query of stop words only (`the`) is in most messages, where every id of
/// the span costs a look at its text.
const SUBSTRING_SPAN: i64 = 4096;
const COMMON_SUBSTRING_SPAN: i64 = 1024;

/// The longest CJK gram `messages.cjk` holds (PostgreSQL migration 3).
const CJK_GRAM_MAX: usize = 2;

/// A tsquery nothing matches.
const NEVER: &str = "'never & !never'::tsquery";

/// A term's words with punctuation turned into spaces, as the `tsvector` column reads text.
fn words_of(text: &str) -> String {
    text.chars().map(|c| if c.is_alphanumeric() || c.is_whitespace() { c } else { ' ' }).collect()
}

/// Builds the SQL of a query and its parameters (`$1`.. are the terms, then the filters).
#[derive(Default)]
struct Params {
    values: Vec<String>,
    /// A term is looked up in the CJK grams: plan the query for its values (see `Search::run`).
    grams: bool,
    /// A term is looked up in the haystack, whose index has the buckets.
    haystack: bool,
}

impl Params {
    /// Bind `v` (text: every term and filter is), returning its placeholder.
    fn push(&mut self, v: String) -> String {
        self.values.push(v);
        format!("${}", self.values.len())
    }

    /// The values with their type, for a statement planned for them.
    fn typed(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.values.iter().map(|v| (v as &(dyn ToSql + Sync), Type::TEXT)).collect()
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

/// The words a hit's snippet may mark: those of the terms that are not negated, each with
/// whether it is a prefix (the last word of a `word*` or `"a phrase"*` term).
fn query_words(groups: &[Vec<(bool, String, bool)>]) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for (_, text, prefix) in groups.iter().flatten().filter(|(negated, ..)| !negated) {
        let words: Vec<String> = words_of(text).split_whitespace().map(str::to_lowercase).collect();
        let last = words.len().saturating_sub(1);
        for (i, word) in words.into_iter().enumerate() {
            let entry = (word, *prefix && i == last);
            if !out.contains(&entry) {
                out.push(entry);
            }
        }
    }
    out
}

/// `term` somewhere in a message's text, as SQL. One or two CJK characters are looked up in
/// the message's CJK grams (`messages.cjk`, which a GIN index serves); the grams are every such
/// run in the text, tool name and arguments, so the lookup is exact. Anything else is a `LIKE`
/// on the lower-cased haystack, with the pattern lower-cased by the same function (which is
/// what `ILIKE` does on each column).
fn contains(term: &str, p: &mut Params) -> String {
    if (1..=CJK_GRAM_MAX).contains(&term.chars().count()) && term.chars().all(is_cjk) {
        p.grams = true;
        return format!("(m.cjk @> ARRAY[{}::text])", p.push(term.to_string()));
    }
    if term.chars().count() >= TRIGRAM_MIN_CHARS {
        p.haystack = true;
    }
    format!("(m.haystack LIKE lower({}))", p.push(format!("%{}%", escape_like(term))))
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

/// One search's connection, query and filters.
struct Search<'a> {
    client: &'a Client,
    q: &'a SearchQuery<'a>,
    limit: usize,
    /// The oldest and newest ids of the messages searched, once asked for; `None` inside when
    /// there is none.
    ids: Option<Option<(i64, i64)>>,
    /// The word search found every word of the query to be a stop word.
    stop_words: bool,
}

/// What one search runs: its SQL, and its parameters.
struct Statement<'a> {
    /// The condition on `m` and the filters (`$1`..).
    params: &'a Params,
    /// `SELECT … WHERE … AND {range} ORDER BY {id} DESC LIMIT {limit}`, the span, the way an id
    /// is read (see [`Probe`]) and the rows wanted left to fill.
    template: String,
    /// Rows wanted.
    need: usize,
    /// The first span's width, in ids.
    first: i64,
    kind: Probe,
}

/// How the spans of a search are run. Each is a kept statement, whose range and order the
/// primary key may not serve (`m.id + 0`): a generic plan would read the messages newest first
/// and check each one (80 ms for a word in one message of twenty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Every match of a span is ranked, so the index must find them all. A row says in its
    /// column 7 how many matches its span had (only the best come back), and the rest may go
    /// in one span when that is cheaper ([`spans::Spans`]).
    Words,
    /// The newest matches of a span, each row one. A query of stop words only (`the`, in most
    /// messages) is planned for its values instead, so that the planner can read the messages
    /// newest first and stop at the `limit`th: the index would have every one of a span's
    /// thousands checked, and a span after empty ones (deleted messages) may be wide.
    Substrings,
}

impl Search<'_> {
    /// The filters of the query as SQL on `m`, their parameters pushed: as a search by span
    /// writes them, the role and the session looked up in the search indexes' third and fourth
    /// columns, and as a search of every message (or the planner's estimate) does, checked in
    /// each message.
    fn filters(&self, p: &mut Params) -> (String, String) {
        let mut by_index = vec!["m.active".to_string()];
        let mut plain = by_index.clone();
        if let Some(role) = self.q.role {
            let k = p.push(role.as_str().to_string());
            by_index.push(format!("ARRAY[m.role] && ARRAY[{k}::text]"));
            plain.push(format!("m.role = {k}"));
        }
        if let Some(session) = self.q.session_id {
            let k = p.push(session.to_string());
            by_index.push(format!("ARRAY[m.session_id] && ARRAY[{k}::text]"));
            plain.push(format!("m.session_id = {k}"));
        }
        if let Some(session) = self.q.exclude_session {
            let k = p.push(session.to_string());
            by_index.push(format!("m.session_id <> {k}"));
            plain.push(format!("m.session_id <> {k}"));
        }
        (by_index.join(" AND "), plain.join(" AND "))
    }

    /// The oldest and newest ids of the messages searched, or `None` when there are none.
    async fn ids(&mut self) -> Result<Option<(i64, i64)>> {
        if let Some(ids) = self.ids {
            return Ok(ids);
        }
        let row = self.ids_query().await.map_err(sql)?;
        let ids = row.get::<_, Option<i64>>(0).zip(row.get::<_, Option<i64>>(1));
        self.ids = Some(ids);
        Ok(ids)
    }

    /// The oldest and newest ids of the messages searched: all, or one session's (which
    /// `messages_by_session` finds at once).
    async fn ids_query(&self) -> std::result::Result<Row, tokio_postgres::Error> {
        match self.q.session_id {
            Some(session) => {
                self.client.q1("SELECT min(id), max(id) FROM messages WHERE session_id = $1", &[&session]).await
            }
            None => self.client.q1("SELECT min(id), max(id) FROM messages", &[]).await,
        }
    }

    /// Run `s` newest first, over spans of ids, until `s.need` matches came back.
    async fn run(&mut self, s: &Statement<'_>) -> Result<Vec<Row>> {
        let Some((oldest, newest)) = self.ids().await? else { return Ok(Vec::new()) };
        let base = s.params.typed();
        let n = base.len();
        let need = i64::try_from(s.need).unwrap_or(i64::MAX);
        let mut spans = Spans::new(oldest, newest, s.first, s.kind == Probe::Words);
        // Planned for its values, a probe may read the messages newest first through the
        // primary key; a kept statement must not (see `Probe`).
        let planned = s.params.grams || (s.kind == Probe::Substrings && self.stop_words);
        let id = if planned { "m.id" } else { "m.id + 0" };
        let mut rows: Vec<Row> = Vec::new();
        let mut found = 0;
        while let Some(span) = spans.next(found, s.need) {
            let left = need - i64::try_from(found).unwrap_or(0);
            let mut params = base.clone();
            let (range, limit) = match &span.buckets {
                Some(buckets) => {
                    params.extend([
                        (buckets as &(dyn ToSql + Sync), Type::INT8_ARRAY),
                        (&span.lo, Type::INT8),
                        (&span.hi, Type::INT8),
                        (&left, Type::INT8),
                    ]);
                    (
                        format!(
                            "ARRAY[m.id / {BUCKET}, -1 - m.id / {COARSE_BUCKET}] && ${}::int8[] \
                             AND {id} BETWEEN ${} AND ${}",
                            n + 1,
                            n + 2,
                            n + 3
                        ),
                        format!("${}", n + 4),
                    )
                }
                None => {
                    params.extend([(&span.hi as &(dyn ToSql + Sync), Type::INT8), (&left, Type::INT8)]);
                    (format!("{id} <= ${}", n + 1), format!("${}", n + 2))
                }
            };
            let text = s.template.replace("{range}", &range).replace("{id}", id).replace("{limit}", &limit);
            let probe = self.query(&text, &params, planned).await?;
            found += match (s.kind, probe.first()) {
                (Probe::Words, Some(row)) => usize::try_from(row.get::<_, i64>(7)).unwrap_or(0),
                (Probe::Words, None) => 0,
                (Probe::Substrings, _) => probe.len(),
            };
            rows.extend(probe);
        }
        Ok(rows)
    }

    /// Run `s` in one query over every message (its template has no `{range}` left), planned
    /// for its values.
    async fn all(&self, s: &Statement<'_>) -> Result<Vec<Row>> {
        let mut params = s.params.typed();
        let need = i64::try_from(s.need).unwrap_or(i64::MAX);
        let limit = format!("${}", params.len() + 1);
        params.push((&need, Type::INT8));
        let text = s.template.replace("{range}", "true").replace("{id}", "m.id").replace("{limit}", &limit);
        self.client.query_typed(&text, &params).await.map_err(sql)
    }

    /// Run a probe: through a kept statement, or `planned` for its values: a substring search
    /// for stop words (see [`Probe`]), or one that looks up CJK grams (the planner knows from
    /// the column's statistics whether one is rare, which the index finds at once, or common,
    /// which the newest messages hold; a kept statement soon gets one generic plan, which scans
    /// every message, newest first, for a gram no message has).
    async fn query(&self, text: &str, params: &[(&(dyn ToSql + Sync), Type)], planned: bool) -> Result<Vec<Row>> {
        if planned {
            self.client.query_typed(text, params).await.map_err(sql)
        } else {
            let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
            self.client.q(text, &params).await.map_err(sql)
        }
    }

    /// The word search: the newest [`RANK_WINDOW`] matches of `expr`, the best `limit` of them.
    async fn words(
        &mut self,
        mut p: Params,
        expr: &str,
        groups: &[Vec<(bool, String, bool)>],
    ) -> Result<Vec<SearchHit>> {
        let term_count = p.values.len();
        let (filters, plain) = self.filters(&mut p);
        let typed = p.typed();
        let terms: Vec<&(dyn ToSql + Sync)> = typed[..term_count].iter().map(|(v, _)| *v).collect();
        // In one round trip: whether the query can match at all (every word of it a stop
        // word), the ids' range, and how many messages the planner expects it to match, from
        // the words' statistics (planned for these very words, so the estimate is theirs).
        let never = format!("SELECT ({expr}) = {NEVER}");
        let estimate = format!("EXPLAIN SELECT 1 FROM messages m WHERE m.words @@ ({expr}) AND {plain}");
        let (never, ids, plan) =
            tokio::join!(self.client.q1(&never, &terms), self.ids_query(), self.client.query_typed(&estimate, &typed));
        if never.map_err(sql)?.get::<_, bool>(0) {
            self.stop_words = true;
            return Ok(Vec::new());
        }
        let ids = ids.map_err(sql)?;
        let ids = ids.get::<_, Option<i64>>(0).zip(ids.get::<_, Option<i64>>(1));
        self.ids = Some(ids);
        // A span as wide as the estimate says the window needs, with room to spare (an
        // estimate is one for the whole table, and its terms are taken as independent); the
        // rest at once for a word in fewer messages than the window holds.
        let expected = plan.map_err(sql)?.first().map_or(0.0, |r| planned_rows(&r.get::<_, String>(0)));
        let first = ids.map_or(0, |(oldest, newest)| {
            let rest = (newest - oldest + 1) as f64;
            let (density, need) = (expected / rest, RANK_WINDOW as f64);
            if rest_at_once(need, density, rest) {
                i64::MAX
            } else if density * SAMPLED_BELOW < 1.0 {
                SAMPLE_SPAN
            } else {
                ((need + 2.0 * need.sqrt() + 1.0) * ESTIMATE_MARGIN / density) as i64
            }
        });
        // Matches are found by id, then read again by their place in the table to be ranked (no
        // `tsvector` is copied through the sort); only the best `limit` of a probe come back,
        // with what a hit shows, and how many it ranked. The best of the whole window are among
        // the best of its probes.
        let limit = self.limit;
        let template = format!(
            "WITH q AS MATERIALIZED (SELECT {expr} AS q),
             recent AS (
                 SELECT m.ctid AS place FROM messages m, q
                 WHERE m.words @@ q.q AND {filters} AND {{range}}
                 ORDER BY {{id}} DESC LIMIT {{limit}}
             ),
             ranked AS MATERIALIZED (
                 SELECT m.id, ts_rank(m.words, q.q, 1) AS rank FROM messages m, q
                 WHERE m.ctid = ANY(ARRAY(SELECT place FROM recent))
             ),
             best AS (SELECT id, rank FROM ranked ORDER BY rank DESC, id DESC LIMIT {limit})
             SELECT b.id, m.session_id, s.title, m.role, m.content, m.created_at, b.rank,
                    (SELECT count(*) FROM ranked)
             FROM best b JOIN messages m ON m.id = b.id JOIN sessions s ON s.id = m.session_id"
        );
        let statement = Statement { params: &p, template, need: RANK_WINDOW, first, kind: Probe::Words };
        let mut rows = self.run(&statement).await?;
        rows.sort_by(|a, b| {
            let (a, b): ((f32, i64), (f32, i64)) = ((a.get(6), a.get(0)), (b.get(6), b.get(0)));
            b.0.total_cmp(&a.0).then(b.1.cmp(&a.1))
        });
        rows.truncate(limit);
        let contents: Vec<String> = rows.iter().map(|r| r.get(4)).collect();
        let words: Vec<Vec<(usize, usize)>> = contents.iter().map(|c| word_ranges(c)).collect();
        let marked = marked_words(self.client, &query_words(groups), &contents, &words).await?;
        rows.iter()
            .zip(contents.iter().zip(&words))
            .map(|(r, (content, words))| hit(r, word_snippet(content, words, &marked)))
            .collect()
    }

    /// The substring search: the newest `limit` messages holding `condition`'s terms.
    async fn substrings(&mut self, mut p: Params, condition: &str, marks: &[String]) -> Result<Vec<SearchHit>> {
        // Without a term for the haystack's index, its buckets would only be read for
        // nothing: the CJK grams' index, or the messages newest first, serve the query alone.
        let spans = p.haystack;
        let (by_index, plain) = self.filters(&mut p);
        let filters = if spans { by_index } else { plain };
        let range = if spans { "{range}" } else { "true" };
        // As for words: the hits are found, then read again by their place in the table.
        let template = format!(
            "WITH hit AS (
                 SELECT m.ctid AS place FROM messages m
                 WHERE {filters} AND {condition} AND {range}
                 ORDER BY {{id}} DESC LIMIT {{limit}}
             )
             SELECT m.id, m.session_id, s.title, m.role, m.content, m.created_at
             FROM messages m JOIN sessions s ON s.id = m.session_id
             WHERE m.ctid = ANY(ARRAY(SELECT place FROM hit))
             ORDER BY m.id DESC"
        );
        let per_limit = if self.stop_words { COMMON_SUBSTRING_SPAN } else { SUBSTRING_SPAN };
        let first = per_limit * i64::try_from(self.limit.div_ceil(20)).unwrap_or(1);
        let statement = Statement { params: &p, template, need: self.limit, first, kind: Probe::Substrings };
        let rows = if spans { self.run(&statement).await? } else { self.all(&statement).await? };
        let marks: Vec<&str> = marks.iter().map(String::as_str).collect();
        rows.iter()
            .map(|r| {
                let content: String = r.get(4);
                hit(r, like_snippet(&content, &marks))
            })
            .collect()
    }
}

/// The rows the top node of a plan (`EXPLAIN`'s first line) is expected to return.
fn planned_rows(line: &str) -> f64 {
    line.split(" rows=").nth(1).and_then(|rest| rest.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or(0.0)
}

/// A hit from a row of `id, session_id, title, role, …, created_at`.
fn hit(r: &Row, snippet: String) -> Result<SearchHit> {
    let (message_id, role): (i64, String) = (r.get(0), r.get(3));
    let role = talaria_protocol::Role::parse(&role)
        .ok_or_else(|| Error::Corrupt { what: format!("message {message_id}: unknown role \"{role}\"") })?;
    Ok(SearchHit { session_id: r.get(1), session_title: r.get(2), message_id, role, snippet, created_at: r.get(5) })
}

impl super::Pg {
    pub(crate) async fn search(&self, q: &SearchQuery<'_>, limit: usize) -> Result<Vec<SearchHit>> {
        let parsed = Query::parse(q.text);
        let cjk = has_cjk(q.text);
        let client = self.client().await?;
        let mut search = Search { client: &client, q, limit, ids: None, stop_words: false };
        if !cjk {
            let groups = parsed.groups(true);
            let mut p = Params::default();
            if let Some(expr) = tsquery(&groups, &mut p) {
                let hits = search.words(p, &expr, &groups).await?;
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
        search.substrings(p, &condition, &marks).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_say_how_many_rows() {
        assert_eq!(planned_rows("Bitmap Heap Scan on messages m  (cost=58.91..10128.00 rows=5020 width=0)"), 5020.0);
        assert_eq!(planned_rows("Result  (cost=0.00..0.00 rows=0 width=4)"), 0.0);
        assert_eq!(planned_rows("nothing"), 0.0);
    }
}
