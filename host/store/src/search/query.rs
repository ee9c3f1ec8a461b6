//! What the user typed, turned into FTS5 queries that cannot fail to parse.
//!
//! The input is read as a flat list of terms and operators:
//! - a word is a term; `word*` is a prefix term; `"a phrase"` is a phrase term (a quote left open
//!   is closed at the end of the input, and `"a phrase"*` is a prefix phrase);
//! - `AND`, `OR` and `NOT`, in capitals and standing alone, are operators; in any other case they
//!   are words. Terms side by side are ANDed (FTS5 precedence: `NOT`, then `AND`, then `OR`);
//! - an operator with no term before or after it is dropped, of several in a row only the last
//!   counts, and a leading `NOT x` (nothing to subtract from) is dropped whole;
//! - every term is emitted as a quoted FTS5 string, so nothing in it is syntax: hyphens, colons,
//!   parentheses, `NEAR`, `^`, `+` are all just text for the tokenizer. `*` is removed from
//!   inside terms, control characters become spaces;
//! - only the first [`MAX_TERMS`] terms count.
//!
//! ```text
//! rust async-std "tokio runtime" OR smol*  ->  "rust" "async-std" "tokio runtime" OR "smol"*
//! NOT (foo AND                             ->  (empty: nothing left to search for)
//! ```

/// A parsed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    tokens: Vec<Token>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Term(Term),
    Op(Op),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    /// Never holds `"` or `*`.
    text: String,
    prefix: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    And,
    Or,
    Not,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Self::And => "AND",
            Self::Or => "OR",
            Self::Not => "NOT",
        }
    }
}

/// Terms beyond this many are ignored: a longer query is text pasted by mistake, and every term
/// costs a walk through the index.
pub(crate) const MAX_TERMS: usize = 64;

/// The shortest substring the trigram index can find.
pub(crate) const TRIGRAM_MIN_CHARS: usize = 3;

impl Query {
    pub(crate) fn parse(input: &str) -> Self {
        let input: String = input.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        let mut tokens = Vec::new();
        let mut chars = input.chars().peekable();
        loop {
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            let Some(&first) = chars.peek() else { break };
            if first == '"' {
                chars.next();
                let mut text = String::new();
                for c in chars.by_ref() {
                    if c == '"' {
                        break;
                    }
                    text.push(c);
                }
                let prefix = chars.next_if_eq(&'*').is_some();
                push_term(&mut tokens, &text, prefix);
                continue;
            }
            let mut word = String::new();
            while let Some(c) = chars.next_if(|&c| !c.is_whitespace() && c != '"') {
                word.push(c);
            }
            match word.as_str() {
                "AND" => tokens.push(Token::Op(Op::And)),
                "OR" => tokens.push(Token::Op(Op::Or)),
                "NOT" => tokens.push(Token::Op(Op::Not)),
                _ => push_term(&mut tokens, &word, word.ends_with('*')),
            }
        }
        Self { tokens }
    }

    /// The query for the word index (porter/unicode61): terms with at least one letter or digit
    /// (the tokenizer ignores everything else). `None` when nothing is left to search for.
    pub(crate) fn words(&self) -> Option<String> {
        let tokens = normalize(&self.tokens, |t| t.text.chars().any(char::is_alphanumeric));
        render(&tokens, true)
    }

    /// The query for the trigram index: terms of at least three characters, prefixes ignored
    /// (every substring matches anyway). `None` when nothing is left to search for.
    pub(crate) fn substrings(&self) -> Option<String> {
        let tokens = normalize(&self.tokens, |t| t.text.chars().count() >= TRIGRAM_MIN_CHARS);
        render(&tokens, false)
    }

    /// The terms for an engine that takes a query as an expression (PostgreSQL): groups to OR,
    /// each a list of terms to AND, a term being (negated, text, prefix). The same terms and
    /// precedence as [`Query::words`] (`for_words`) or [`Query::substrings`].
    pub(crate) fn groups(&self, for_words: bool) -> Vec<Vec<(bool, String, bool)>> {
        let tokens = if for_words {
            normalize(&self.tokens, |t| t.text.chars().any(char::is_alphanumeric))
        } else {
            normalize(&self.tokens, |t| t.text.chars().count() >= TRIGRAM_MIN_CHARS)
        };
        let mut groups: Vec<Vec<(bool, String, bool)>> = Vec::new();
        let mut current = Vec::new();
        let mut negated = false;
        for token in tokens {
            match token {
                Token::Op(Op::Or) => groups.push(std::mem::take(&mut current)),
                Token::Op(Op::Not) => negated = true,
                Token::Op(Op::And) => {}
                Token::Term(t) => {
                    current.push((negated, t.text.clone(), for_words && t.prefix));
                    negated = false;
                }
            }
        }
        groups.push(current);
        groups.retain(|g| g.iter().any(|(negated, ..)| !negated));
        groups
    }

    /// Terms shorter than the trigram index can find, checked with `LIKE` instead: those that
    /// must appear, and those after `NOT` that must not. `AND`/`OR` are not honoured for them:
    /// every one is required.
    pub(crate) fn short_terms(&self) -> (Vec<&str>, Vec<&str>) {
        let tokens = normalize(&self.tokens, |_| true);
        let (mut wanted, mut unwanted) = (Vec::new(), Vec::new());
        let mut negated = false;
        for t in tokens {
            match t {
                Token::Op(op) => negated = *op == Op::Not,
                Token::Term(t) => {
                    if t.text.chars().count() < TRIGRAM_MIN_CHARS {
                        if negated { &mut unwanted } else { &mut wanted }.push(t.text.as_str());
                    }
                    negated = false;
                }
            }
        }
        (wanted, unwanted)
    }
}

fn push_term(tokens: &mut Vec<Token>, raw: &str, prefix: bool) {
    if tokens.iter().filter(|t| matches!(t, Token::Term(_))).count() >= MAX_TERMS {
        return;
    }
    let text: String = raw.chars().filter(|&c| c != '*' && c != '"').collect();
    let text = text.trim();
    if !text.is_empty() {
        tokens.push(Token::Term(Term { text: text.to_owned(), prefix }));
    }
}

/// Keep the terms `keep` accepts and make the operators well-formed: each one sits between two
/// terms. Of operators in a row, the last wins; a leading `NOT` drops the term it negates.
fn normalize(tokens: &[Token], keep: impl Fn(&Term) -> bool) -> Vec<&Token> {
    let mut out: Vec<&Token> = Vec::new();
    let mut pending: Option<&Token> = None;
    for token in tokens {
        match token {
            Token::Op(_) => pending = Some(token),
            Token::Term(term) => {
                if !keep(term) {
                    continue;
                }
                let op = pending.take();
                if out.is_empty() {
                    if op == Some(&Token::Op(Op::Not)) {
                        continue;
                    }
                } else if let Some(op) = op {
                    out.push(op);
                }
                out.push(token);
            }
        }
    }
    out
}

fn render(tokens: &[&Token], prefixes: bool) -> Option<String> {
    if tokens.is_empty() {
        return None;
    }
    let mut out = String::new();
    for token in tokens {
        if !out.is_empty() {
            out.push(' ');
        }
        match token {
            Token::Op(op) => out.push_str(op.as_str()),
            Token::Term(t) => {
                out.push('"');
                out.push_str(&t.text);
                out.push('"');
                if prefixes && t.prefix {
                    out.push('*');
                }
            }
        }
    }
    Some(out)
}

/// The Chinese, Japanese and Korean scripts, which the word index cannot split into words.
/// PostgreSQL's migration 3 spells the same ranges in its pattern for `talaria_cjk_grams`.
pub(crate) const CJK_RANGES: &[(u32, u32)] = &[
    (0x1100, 0x11FF),   // Hangul Jamo
    (0x2E80, 0x2FDF),   // CJK radicals
    (0x3040, 0x30FF),   // Hiragana, Katakana
    (0x3100, 0x318F),   // Bopomofo, Hangul compatibility Jamo
    (0x3400, 0x4DBF),   // CJK extension A
    (0x4E00, 0x9FFF),   // CJK unified ideographs
    (0xAC00, 0xD7AF),   // Hangul syllables
    (0xF900, 0xFAFF),   // CJK compatibility ideographs
    (0xFF66, 0xFF9F),   // half-width Katakana
    (0x20000, 0x3134F), // CJK extensions B to G
];

pub(crate) fn is_cjk(c: char) -> bool {
    CJK_RANGES.iter().any(|&(from, to)| (from..=to).contains(&u32::from(c)))
}

/// Whether `text` holds Chinese, Japanese or Korean script.
pub(crate) fn has_cjk(text: &str) -> bool {
    text.chars().any(is_cjk)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(q: &str) -> Option<String> {
        Query::parse(q).words()
    }

    #[test]
    fn words_are_quoted_and_anded() {
        assert_eq!(words("rust  async").as_deref(), Some(r#""rust" "async""#));
        assert_eq!(words("async-std").as_deref(), Some(r#""async-std""#));
        assert_eq!(words("col:val NEAR(a b)").as_deref(), Some(r#""col:val" "NEAR(a" "b)""#));
    }

    #[test]
    fn phrases_and_prefixes_are_kept() {
        assert_eq!(words(r#""tokio runtime" smol*"#).as_deref(), Some(r#""tokio runtime" "smol"*"#));
        assert_eq!(words(r#""tok run"*"#).as_deref(), Some(r#""tok run"*"#));
        assert_eq!(words(r#"a "unclosed phrase"#).as_deref(), Some(r#""a" "unclosed phrase""#));
        assert_eq!(words("fo*o*").as_deref(), Some(r#""foo"*"#));
    }

    #[test]
    fn operators_are_honoured_only_between_terms() {
        assert_eq!(words("a OR b").as_deref(), Some(r#""a" OR "b""#));
        assert_eq!(words("a NOT b").as_deref(), Some(r#""a" NOT "b""#));
        assert_eq!(words("a or not b").as_deref(), Some(r#""a" "or" "not" "b""#));
        assert_eq!(words("OR a AND").as_deref(), Some(r#""a""#));
        assert_eq!(words("a OR NOT b").as_deref(), Some(r#""a" NOT "b""#));
        assert_eq!(words("NOT a b").as_deref(), Some(r#""b""#));
        assert_eq!(words("NOT a"), None);
        assert_eq!(words("AND OR NOT"), None);
    }

    #[test]
    fn punctuation_only_terms_are_dropped_from_the_word_query() {
        assert_eq!(words(r#"-- "" * () a ->"#).as_deref(), Some(r#""a""#));
        assert_eq!(words("\"\u{0}\u{7}\""), None);
        assert_eq!(Query::parse("a -> b").substrings(), None);
        assert_eq!(Query::parse("foo -> bar").substrings().as_deref(), Some(r#""foo" "bar""#));
        assert_eq!(Query::parse("x=>y").substrings().as_deref(), Some(r#""x=>y""#));
    }

    #[test]
    fn short_terms_go_to_like() {
        let q = Query::parse("数据 库存管理 NOT 表 ab");
        assert_eq!(q.substrings().as_deref(), Some(r#""库存管理""#));
        assert_eq!(q.short_terms(), (vec!["数据", "ab"], vec!["表"]));
    }

    #[test]
    fn groups_follow_the_operators_precedence() {
        let g = |q: &str| Query::parse(q).groups(true);
        let t = |text: &str| (false, text.to_string(), false);
        assert_eq!(g("a b OR c NOT d"), vec![vec![t("a"), t("b")], vec![t("c"), (true, "d".to_string(), false)]]);
        assert_eq!(g("smol* \"tokio rt\""), vec![vec![(false, "smol".to_string(), true), t("tokio rt")]]);
        assert!(g("NOT a").is_empty());
        assert_eq!(Query::parse("ab cdef").groups(false), vec![vec![t("cdef")]]);
    }

    #[test]
    fn long_queries_are_cut() {
        let q = Query::parse(&"w ".repeat(1000)).words().expect("words");
        assert_eq!(q.matches("\"w\"").count(), MAX_TERMS);
    }

    #[test]
    fn cjk_is_detected() {
        assert!(has_cjk("hello 世界"));
        assert!(has_cjk("カタカナ"));
        assert!(has_cjk("한국어"));
        assert!(!has_cjk("héllo wörld"));
    }
}
