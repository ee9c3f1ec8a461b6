//! The spans of ids a PostgreSQL search goes through, newest first, and the buckets of the
//! search indexes that name them (see the parent module's "Newest first, a span of ids at a
//! time").

/// Ids per bucket in the search indexes' second column, `ARRAY[id / 256, -1 - id / 8192]`
/// (migration 4): each message is in a fine bucket (the first element) and a coarse one (the
/// second, negative so that the two never meet). A span names the coarse buckets it holds whole
/// and fine ones at its edges, a few dozen at most: a GIN scan loads every value it is given and
/// weighs each one for every match, so a thousand fine buckets cost more than the word itself.
pub(crate) const BUCKET: i64 = 256;
pub(crate) const COARSE_BUCKET: i64 = 8192;

/// Most coarse buckets one span names (512k ids): a wider span is searched without buckets.
const MAX_COARSE: i64 = 64;

/// The first span of a word search that the planner expects in fewer than one message in
/// `SAMPLED_BELOW` (the parent module's): its estimate for a word missing from the column's statistics is the same
/// for every such word, in a few hundred messages as in a few thousand, so a span this wide
/// measures the word's density before the rest is chosen.
pub(super) const SAMPLE_SPAN: i64 = 8192;

/// Spans searched by bucket before the rest of the messages goes in one.
const MAX_SPANS: usize = 6;

/// A span is at most this many times as wide as all the spans before it: the newest messages
/// may hold a word more or less often than the older ones, and a few matches say little.
const SPAN_GROWTH: i64 = 8;

/// The same after spans without a single match, which say nothing of what follows them.
const BLIND_GROWTH: i64 = 4;

/// Matches enough for their density to size the next span however wide.
const TRUSTED_MATCHES: usize = 16;

/// A span of ids, both ends included, and the buckets that cover it; without buckets, every
/// id up to `hi`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) lo: i64,
    pub(super) hi: i64,
    pub(super) buckets: Option<Vec<i64>>,
}

/// The buckets of the ids `lo..=hi` (`lo` a multiple of [`BUCKET`]): the coarse buckets
/// inside the span whole, fine ones for the rest.
fn buckets(lo: i64, hi: i64) -> Vec<i64> {
    // Coarse buckets `first..end` lie whole within the span.
    let (first, end) = ((lo + COARSE_BUCKET - 1) / COARSE_BUCKET, (hi + 1) / COARSE_BUCKET);
    if first >= end {
        return (lo / BUCKET..=hi / BUCKET).collect();
    }
    let mut out: Vec<i64> = (lo / BUCKET..first * COARSE_BUCKET / BUCKET).collect();
    out.extend((first..end).map(|c| -1 - c));
    out.extend(end * COARSE_BUCKET / BUCKET..=hi / BUCKET);
    out
}

/// What a span costs, in µs, on the machine these were measured on (2 slow cores, 100k and 1M
/// messages): a scan by bucket walks the buckets' lists (per id of the span) and finds each
/// match (its index entry and heap visit); a scan without buckets finds every match of the
/// word, at less for each. Only their ratios matter.
const SPAN_ID_US: f64 = 0.02;
const SPAN_MATCH_US: f64 = 4.0;
const ALL_MATCH_US: f64 = 3.4;

/// Whether the rest of a word search, `left` matches wanted at `density` (matches per id) among
/// `rest` ids, costs less in one scan of all its matches than by bucket.
pub(super) fn rest_at_once(left: f64, density: f64, rest: f64) -> bool {
    let span = (left / density).min(rest);
    ALL_MATCH_US * density * rest <= SPAN_ID_US * span + SPAN_MATCH_US * left
}

/// The spans a search goes through, newest first. The first is `first` ids wide; each next
/// one as wide as the density of the matches found so far says the rest needs, with a margin
/// (a span without matches counts as one match), but, until [`TRUSTED_MATCHES`] were found, at
/// most [`SPAN_GROWTH`] times the ids searched so far ([`BLIND_GROWTH`] while none was). The rest goes in one span
/// without buckets when a span would reach the oldest message, or name more than
/// [`MAX_COARSE`] coarse buckets, or after [`MAX_SPANS`], or (for a word search, `whole`)
/// when [`rest_at_once`] says so: a word that rare has few matches left.
#[derive(Debug)]
pub(super) struct Spans {
    oldest: i64,
    /// The newest id not yet searched.
    hi: i64,
    first: i64,
    /// Whether the rest may go in one span when that is cheaper.
    whole: bool,
    /// Ids searched so far.
    searched: i64,
    spans: usize,
    done: bool,
}

impl Spans {
    pub(super) fn new(oldest: i64, newest: i64, first: i64, whole: bool) -> Self {
        Self { oldest, hi: newest, first: first.max(BUCKET), whole, searched: 0, spans: 0, done: false }
    }

    /// The next span, `found` matches out of the `need`ed having come back so far.
    pub(super) fn next(&mut self, found: usize, need: usize) -> Option<Span> {
        if self.done || found >= need || self.hi < self.oldest {
            return None;
        }
        let rest = self.hi - self.oldest + 1;
        let width = if self.spans == 0 {
            self.first
        } else {
            let growth = match found {
                0 => BLIND_GROWTH,
                1..TRUSTED_MATCHES => SPAN_GROWTH,
                _ => i64::MAX,
            };
            let density = (found + 1) as f64 / self.searched as f64;
            // Room for a standard deviation of the matches a span that wide holds: one more
            // span now and then costs less than reading more messages every time (a substring's
            // candidates cost 10 µs each). A float beyond i64's range saturates.
            let left = (need - found) as f64;
            // Nothing found in a span as wide as a sample says the word is rare too.
            let sampled = found > 0 || self.searched >= SAMPLE_SPAN;
            if self.whole && sampled && rest_at_once(left, density, rest as f64) {
                rest
            } else {
                let wanted = ((left + left.sqrt() + 1.0) / density) as i64;
                wanted.min(self.searched.saturating_mul(growth)).max(BUCKET)
            }
        };
        // Spans start on a bucket's first id.
        let lo = self.hi.saturating_sub(width - 1).div_euclid(BUCKET) * BUCKET;
        if lo <= self.oldest || self.spans >= MAX_SPANS || (self.hi - lo) / COARSE_BUCKET >= MAX_COARSE {
            self.done = true;
            return Some(Span { lo: self.oldest, hi: self.hi, buckets: None });
        }
        let span = Span { lo, hi: self.hi, buckets: Some(buckets(lo, self.hi)) };
        self.searched += self.hi - lo + 1;
        self.hi = lo - 1;
        self.spans += 1;
        Some(span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_spans(mut spans: Spans, found_per_span: impl Fn(&Span) -> usize, need: usize) -> Vec<Span> {
        let mut out = Vec::new();
        let mut found = 0;
        while let Some(span) = spans.next(found, need) {
            found += found_per_span(&span);
            out.push(span);
        }
        out
    }

    #[test]
    fn spans_cover_the_ids_newest_first_without_gaps() {
        // One match in 100 ids: the second span is sized from the first one's 22.
        let spans = all_spans(Spans::new(1, 100_000, 2000, false), |s| ((s.hi - s.lo + 1) / 100) as usize, 500);
        assert_eq!(spans[0].hi, 100_000);
        for pair in spans.windows(2) {
            assert_eq!(pair[1].hi, pair[0].lo - 1, "{spans:?}");
        }
        assert!(spans.iter().all(|s| s.lo % BUCKET == 0 || s.buckets.is_none()), "{spans:?}");
        assert_eq!(spans.len(), 2, "{spans:?}");
        // One in 1000: the first span's two say little, so the next one grows by a bounded step.
        let spans = all_spans(Spans::new(1, 100_000, 2000, false), |s| ((s.hi - s.lo + 1) / 1000) as usize, 500);
        assert!(spans[1].hi - spans[1].lo < SPAN_GROWTH * (spans[0].hi - spans[0].lo + 1) + BUCKET, "{spans:?}");
    }

    #[test]
    fn buckets_are_coarse_inside_and_fine_at_the_edges() {
        assert_eq!(buckets(256, 1000), vec![1, 2, 3]);
        let b = buckets(7936, 3 * COARSE_BUCKET + 300);
        // Fine 31 (7936..8191), coarse 1 and 2 (8192..24575), fine 96 and 97 (24576..24876).
        assert_eq!(b, vec![31, -2, -3, 96, 97]);
        assert_eq!(buckets(COARSE_BUCKET, 2 * COARSE_BUCKET - 1), vec![-2]);
        let covered = |id: i64, b: &[i64]| b.contains(&(id / BUCKET)) || b.contains(&(-1 - id / COARSE_BUCKET));
        let b = buckets(5 * BUCKET, 40_000);
        assert!((5 * BUCKET..=40_000).all(|id| covered(id, &b)));
        assert!(!covered(5 * BUCKET - 1, &b) && !covered(40_000 + BUCKET, &b));
        assert!(b.len() <= 2 * 31 + 5, "{b:?}");
    }

    #[test]
    fn rare_matches_end_in_one_span_without_buckets() {
        // Nothing in the first spans: they widen as fast as they may, then the rest goes in one.
        let spans = all_spans(Spans::new(1, 100_000, 2000, false), |_| 0, 500);
        assert_eq!(spans.len(), 4, "{spans:?}");
        assert_eq!((spans[3].lo, spans[3].hi, spans[3].buckets.is_none()), (1, spans[2].lo - 1, true));
        // Twenty wanted: the spans widen, then the rest goes in one.
        let spans = all_spans(Spans::new(1, 100_000, 256, false), |_| 0, 20);
        assert!(spans.len() > 2 && spans.last().is_some_and(|s| s.buckets.is_none() && s.lo == 1), "{spans:?}");
        // A span that would name too many buckets goes without them.
        let spans = all_spans(Spans::new(1, 100_000_000, 2000, false), |s| usize::from(s.hi - s.lo > 100), 500);
        assert!(spans.last().is_some_and(|s| s.buckets.is_none()), "{spans:?}");
        assert!(spans.iter().filter_map(|s| s.buckets.as_ref()).all(|b| b.len() as i64 <= MAX_COARSE + 62));
    }

    #[test]
    fn a_rare_word_takes_the_rest_at_once() {
        // One match in 1250 ids of a million: all of them, after the sample.
        assert!(rest_at_once(500.0, 1.0 / 1250.0, 1e6));
        let spans =
            all_spans(Spans::new(1, 1_000_000, SAMPLE_SPAN, true), |s| ((s.hi - s.lo + 1) / 1250) as usize, 500);
        assert_eq!(spans.len(), 2, "{spans:?}");
        assert!(spans[0].buckets.is_some() && spans[1].buckets.is_none(), "{spans:?}");
        // One in 270, or one in twenty: by bucket.
        assert!(!rest_at_once(500.0, 1.0 / 270.0, 1e6));
        assert!(!rest_at_once(500.0, 0.05, 1e5));
    }

    #[test]
    fn few_messages_are_one_span() {
        let spans = all_spans(Spans::new(5, 300, 2000, false), |_| 3, 500);
        assert_eq!(spans, vec![Span { lo: 5, hi: 300, buckets: None }]);
    }
}
