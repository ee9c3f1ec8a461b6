//! Snippets of a PostgreSQL word search's hits: the words around the place with the most
//! matches, each word that stems to a word of the query marked (the server stems them).

use std::collections::HashMap;

use crate::Result;
use crate::pg::{Cached as _, Client, sql};
use crate::search::{ELLIPSIS, MATCH_END, MATCH_START, like_snippet};

/// Words of context in a word search's snippet, as SQLite's snippet has tokens.
const SNIPPET_WORDS: usize = 24;

/// Words shown before the first match in a snippet.
const SNIPPET_LEAD: usize = 4;

/// The words of `text` (runs of letters and digits), as byte ranges.
pub(super) fn word_ranges(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(text.len() / 6);
    let mut start = None;
    let mut i = 0;
    while i < text.len() {
        let (alnum, len) = match text.as_bytes()[i] {
            b if b.is_ascii() => (b.is_ascii_alphanumeric(), 1),
            _ => text[i..].chars().next().map_or((false, 1), |c| (c.is_alphanumeric(), c.len_utf8())),
        };
        match (alnum, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
        i += len;
    }
    if let Some(s) = start {
        out.push((s, text.len()));
    }
    out
}

/// Whether `word` is `lower` but for case.
fn same_word(word: &str, lower: &str) -> bool {
    if word.is_ascii() { word.eq_ignore_ascii_case(lower) } else { word.to_lowercase() == lower }
}

/// Whether `word` may share a stem with the (lower-cased) query word `of`: they start alike
/// (stemming cuts endings, and turns a final `y` into `i`). The server decides.
fn may_match(word: &str, of: &str) -> bool {
    let common = word.chars().flat_map(char::to_lowercase).zip(of.chars()).take_while(|(a, b)| a == b).count();
    common >= of.chars().count().min(3)
}

/// The words of `texts` (lower-cased) that stem to a word of the query, or start as a prefix
/// word's stem does: the candidates and the query's words are stemmed by the server, in one
/// round trip, with the configuration the `tsvector` column uses. `words`: each text's words.
pub(super) async fn marked_words(
    client: &Client,
    query: &[(String, bool)],
    texts: &[String],
    words: &[Vec<(usize, usize)>],
) -> Result<Vec<String>> {
    let mut candidates: Vec<String> = Vec::new();
    for (text, words) in texts.iter().zip(words) {
        for &(s, e) in words {
            let word = &text[s..e];
            if query.iter().any(|(q, _)| may_match(word, q)) && !candidates.iter().any(|c| same_word(word, c)) {
                candidates.push(word.to_lowercase());
            }
        }
    }
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let mut all: Vec<String> = query.iter().map(|(w, _)| w.clone()).collect();
    all.extend(candidates.iter().cloned());
    let rows = client
        .q(
            "SELECT w, ARRAY(SELECT lexeme FROM unnest(to_tsvector('english', w))) FROM unnest($1::text[]) AS w",
            &[&all],
        )
        .await
        .map_err(sql)?;
    let stems: HashMap<String, Vec<String>> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let none = Vec::new();
    let stems_of = |w: &str| stems.get(w).unwrap_or(&none);
    Ok(candidates
        .into_iter()
        .filter(|c| {
            let own = stems_of(c);
            query.iter().any(|(q, prefix)| {
                stems_of(q)
                    .iter()
                    .any(|stem| own.iter().any(|l| if *prefix { l.starts_with(stem.as_str()) } else { l == stem }))
            })
        })
        .collect())
}

/// A snippet of `text` for a word search: up to [`SNIPPET_WORDS`] of its `words` around the
/// place with the most `marked` words (lower-cased), each marked. Without one (the match was
/// in the tool's name or arguments), the start of the text.
pub(super) fn word_snippet(text: &str, words: &[(usize, usize)], marked: &[String]) -> String {
    let is_marked: Vec<bool> = words.iter().map(|&(s, e)| marked.iter().any(|m| same_word(&text[s..e], m))).collect();
    // Each window starts a few words before a marked word; the one with the most marks wins.
    let best = (0..words.len())
        .filter(|&i| is_marked[i])
        .map(|i| {
            let start = i.saturating_sub(SNIPPET_LEAD);
            let end = (start + SNIPPET_WORDS).min(words.len());
            (is_marked[start..end].iter().filter(|&&m| m).count(), start, end)
        })
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let Some((_, start, end)) = best else { return like_snippet(text, &[]) };
    let from = if start == 0 { 0 } else { words[start].0 };
    let to = if end == words.len() { text.len() } else { words[end - 1].1 };
    let mut out = String::new();
    if from > 0 {
        out.push_str(ELLIPSIS);
    }
    let mut at = from;
    for (i, &(s, e)) in words.iter().enumerate().take(end).skip(start) {
        if is_marked[i] {
            out.push_str(&text[at..s]);
            out.push_str(MATCH_START);
            out.push_str(&text[s..e]);
            out.push_str(MATCH_END);
            at = e;
        }
    }
    out.push_str(&text[at..to]);
    if to < text.len() {
        out.push_str(ELLIPSIS);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_mark_whole_words_around_the_most_matches() {
        let marked = ["docker".to_string(), "dockers".to_string(), "café".to_string()];
        let snippet = |text: &str| word_snippet(text, &word_ranges(text), &marked);
        assert_eq!(snippet("Docker, dockerfile and dockers."), ">>>Docker<<<, dockerfile and >>>dockers<<<.");
        let long = format!("{}docker compose {}", "a ".repeat(50), "b ".repeat(50));
        let s = snippet(&long);
        assert!(s.starts_with("...a a a a >>>docker<<< compose b") && s.ends_with("..."), "{s}");
        assert_eq!(s.matches(' ').count(), SNIPPET_WORDS - 1, "{s}");
        assert_eq!(snippet("nothing here"), "nothing here");
        assert_eq!(snippet("Un CAFÉ, 数据 café."), "Un >>>CAFÉ<<<, 数据 >>>café<<<.");
        assert_eq!(word_ranges("a_b 数据x ²"), vec![(0, 1), (2, 3), (4, 11), (12, 14)]);
    }

    #[test]
    fn candidates_start_like_the_query_word() {
        assert!(may_match("running", "runs"));
        assert!(may_match("applies", "apply"));
        assert!(!may_match("rust", "runs"));
        assert!(may_match("go", "go") && may_match("gone", "go") && !may_match("g", "go"));
        assert!(may_match("Running", "runs"));
    }
}
