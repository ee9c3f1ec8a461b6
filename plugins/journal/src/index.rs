//! An in-memory BM25 index over the journal's entries.
//!
//! Documents are numbered in the order they are added (the journal adds them oldest first).
//! Each term keeps a postings list of `(document, term frequency)` packed into one `u32`, so
//! 10,000 entries of a few hundred words take a few megabytes and a query touches only the
//! postings of its own terms.
//!
//! ```ignore
//! let mut index = Index::default();
//! index.add(&["the staging database moved to port 5433"]);
//! let hits = index.score(&terms("staging database port"), |_| true);
//! assert_eq!(hits[0].doc, 0);
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::text::for_each_term;

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 length normalisation.
const B: f32 = 0.75;
/// Documents above this number cannot be packed (2^24).
pub const MAX_DOCS: usize = 1 << 24;

/// The index.
#[derive(Debug, Default)]
pub struct Index {
    ids: HashMap<String, u32, BuildHasherDefault<FxHasher>>,
    /// Per term: `doc << 8 | min(tf, 255)`, in document order.
    postings: Vec<Vec<u32>>,
    doc_len: Vec<u32>,
    total_len: u64,
}

/// One scored document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub doc: usize,
    pub score: f32,
}

impl Index {
    /// Add a document made of the terms of `texts` ([`for_each_term`]); returns its number.
    pub fn add(&mut self, texts: &[&str]) -> usize {
        let doc = self.doc_len.len();
        debug_assert!(doc < MAX_DOCS, "the journal keeps far fewer entries than the index can number");
        let mut ids: Vec<u32> = Vec::new();
        for text in texts {
            for_each_term(text, |term| ids.push(self.intern(term)));
        }
        let len = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        ids.sort_unstable();
        let doc_bits = u32::try_from(doc).unwrap_or(u32::MAX) << 8;
        for run in ids.chunk_by(|a, b| a == b) {
            let tf = u32::try_from(run.len()).unwrap_or(u32::MAX).min(255);
            if let Some(list) = self.postings.get_mut(run[0] as usize) {
                list.push(doc_bits | tf);
            }
        }
        self.doc_len.push(len);
        self.total_len += u64::from(len);
        doc
    }

    /// The id of `term`, new if needed.
    fn intern(&mut self, term: &str) -> u32 {
        if let Some(&id) = self.ids.get(term) {
            return id;
        }
        let id = u32::try_from(self.postings.len()).unwrap_or(u32::MAX);
        self.ids.insert(term.to_string(), id);
        self.postings.push(Vec::new());
        id
    }

    /// The score a document of average length holding each of `query`'s terms once would get:
    /// the sum of the terms' idf, a term the index has never seen counting like one it holds
    /// once (the rarest possible match; counting it rarer still would make every query with a
    /// new word unmatchable in a small journal). Dividing a score by it gives the share of the
    /// query a document matches, whatever the corpus size.
    pub fn weight(&self, query: &[String]) -> f32 {
        let n = self.doc_len.len() as f32;
        let mut unique: Vec<&str> = query.iter().map(String::as_str).collect();
        unique.sort_unstable();
        unique.dedup();
        unique
            .into_iter()
            .map(|t| {
                let df = self.ids.get(t).and_then(|&id| self.postings.get(id as usize)).map_or(0, Vec::len);
                idf(n, df.max(1) as f32)
            })
            .sum()
    }

    /// BM25 scores of the documents `keep` accepts that contain at least one of `query`'s terms
    /// (repeats in the query are ignored), in no particular order.
    pub fn score(&self, query: &[String], mut keep: impl FnMut(usize) -> bool) -> Vec<Hit> {
        let n = self.doc_len.len();
        if n == 0 {
            return Vec::new();
        }
        let avg_len = self.total_len as f32 / n as f32;
        let mut unique: Vec<&str> = query.iter().map(String::as_str).collect();
        unique.sort_unstable();
        unique.dedup();

        // NaN marks a document no query term touched (a real score is never NaN).
        let mut scores = vec![f32::NAN; n];
        for term in unique {
            let Some(list) = self.ids.get(term).and_then(|&id| self.postings.get(id as usize)) else { continue };
            let df = list.len() as f32;
            let idf = idf(n as f32, df);
            for &packed in list {
                let doc = (packed >> 8) as usize;
                let tf = (packed & 0xff) as f32;
                let len = self.doc_len[doc] as f32;
                let norm = K1 * (1.0 - B + B * len / avg_len.max(1.0));
                let add = idf * tf * (K1 + 1.0) / (tf + norm);
                let score = &mut scores[doc];
                *score = if score.is_nan() { add } else { *score + add };
            }
        }
        (0..n).filter(|&doc| !scores[doc].is_nan() && keep(doc)).map(|doc| Hit { doc, score: scores[doc] }).collect()
    }
}

/// The Fx hash (rustc's): much faster than SipHash on short words. The input is the user's own
/// conversation, so resistance to crafted collisions is not needed.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// BM25's inverse document frequency (the variant that stays positive for common terms).
fn idf(n: f32, df: f32) -> f32 {
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::terms;

    fn index(docs: &[&str]) -> Index {
        let mut index = Index::default();
        for d in docs {
            index.add(&[d]);
        }
        index
    }

    fn ranked(index: &Index, query: &str) -> Vec<usize> {
        let mut hits = index.score(&terms(query), |_| true);
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        hits.into_iter().map(|h| h.doc).collect()
    }

    #[test]
    fn rarer_and_more_frequent_terms_rank_higher() {
        let idx = index(&[
            "the build uses cargo and the build is slow",
            "the staging database listens on port 5433",
            "cargo build failed because of a missing linker",
            "deploying the web app to staging",
        ]);
        assert_eq!(ranked(&idx, "staging database port"), [1, 3]);
        assert_eq!(ranked(&idx, "linker error in cargo build")[0], 2);
        assert!(ranked(&idx, "kubernetes helm chart").is_empty());
    }

    #[test]
    fn shorter_documents_win_ties_and_query_repeats_count_once() {
        let idx = index(&["redis cache", "redis cache with a very long explanation of eviction policies and memory"]);
        let hits = idx.score(&terms("redis cache"), |_| true);
        assert_eq!(hits.len(), 2);
        assert!(hits[0].score > hits[1].score);
        assert_eq!(idx.score(&terms("redis redis"), |_| true)[0].score, idx.score(&terms("redis"), |_| true)[0].score);
    }

    #[test]
    fn keep_filters_documents() {
        let idx = index(&["alpha beta gamma", "alpha beta delta"]);
        let hits = idx.score(&terms("alpha"), |doc| doc != 0);
        assert_eq!(hits.iter().map(|h| h.doc).collect::<Vec<_>>(), [1]);
        assert_eq!(Index::default().score(&terms("alpha"), |_| true), []);
    }

    #[test]
    fn a_document_with_every_query_term_scores_about_the_query_weight() {
        let idx = index(&["alpha beta", "gamma delta", "alpha epsilon", "zeta eta"]);
        let q = terms("alpha gamma");
        let w = idx.weight(&q);
        assert!(w > 0.0);
        let unknown = idx.weight(&terms("alpha unseen"));
        assert!((unknown - w).abs() < 1e-6, "an unseen term weighs like the rarest one (gamma)");
        let mut both = index(&["alpha gamma", "beta delta"]);
        let hit = both.score(&q, |_| true)[0];
        assert!((hit.score / both.weight(&q) - 1.0).abs() < 0.01, "{}", hit.score / both.weight(&q));
        assert_eq!(both.add(&[]), 2);
        assert_eq!(both.add(&["first half", "second half"]), 3);
        assert_eq!(both.score(&terms("half"), |_| true)[0].doc, 3, "a document may be several texts");
    }

    #[test]
    fn term_frequency_saturates_at_255() {
        let mut idx = Index::default();
        idx.add(&["xx ".repeat(1000).as_str()]);
        idx.add(&["yy"]);
        let hits = idx.score(&terms("xx"), |_| true);
        assert!(hits[0].score.is_finite() && hits[0].score > 0.0);
    }
}
