//! Words for the index, and what counts as a message worth remembering or recalling for.
//!
//! [`terms`] lowercases (Unicode-aware), splits on anything that is not a letter or digit,
//! drops stop words, one-character words and very long tokens (hashes, base64), trims a plural
//! `s`, and turns runs of CJK characters (which have no spaces) into overlapping pairs.
//!
//! ```ignore
//! assert_eq!(terms("The Parser's tests fail on CI"), ["parser", "test", "fail", "ci"]);
//! assert!(is_trivial("thanks!"));
//! ```

/// Words that carry no topic. Matching on them would make every entry look related.
/// Sorted (a test checks), for binary search.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "cant",
    "could",
    "did",
    "didnt",
    "do",
    "does",
    "doesnt",
    "doing",
    "dont",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "im",
    "in",
    "into",
    "is",
    "isnt",
    "it",
    "its",
    "itself",
    "ive",
    "just",
    "let",
    "lets",
    "me",
    "might",
    "more",
    "most",
    "must",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "shall",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "thats",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "us",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "wont",
    "would",
    "you",
    "your",
    "youre",
    "yours",
    "yourself",
    "yourselves",
];

/// Words of acknowledgement and greeting: a message made of these (and stop words) asks for
/// nothing a journal could help with.
const ACK_WORDS: &[&str] = &[
    "ok", "okay", "k", "thanks", "thank", "thx", "ty", "yes", "yeah", "yep", "yup", "nope", "sure", "great", "cool",
    "nice", "good", "perfect", "awesome", "hi", "hello", "hey", "please", "pls", "continue", "go", "ahead", "proceed",
    "done", "lgtm", "alright", "right", "fine", "got", "sounds", "agreed", "bye", "morning", "evening", "welcome",
    "np", "works", "worked", "again", "retry", "try", "next",
];

/// Longest token kept, in characters; longer ones are ids and hashes.
const MAX_TERM_CHARS: usize = 40;

/// The index terms of `text`, in order, repeats kept (term frequency counts).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| out.push(t.to_string()));
    out
}

/// Call `f` with each index term of `text`, in order, without allocating per term.
pub fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    let mut word = String::new();
    let mut cjk_run: Vec<char> = Vec::new();
    for c in text.chars() {
        if c.is_ascii() {
            end_cjk_run(&mut cjk_run, &mut f);
            if c.is_ascii_alphanumeric() {
                word.push(c.to_ascii_lowercase());
            } else if c == '\'' && !word.is_empty() {
                // don't, user's: one word, without the apostrophe
            } else {
                end_word(&mut word, &mut f);
            }
        } else if is_cjk(c) {
            end_word(&mut word, &mut f);
            cjk_run.push(c);
        } else {
            end_cjk_run(&mut cjk_run, &mut f);
            if c.is_alphanumeric() {
                word.extend(c.to_lowercase());
            } else if c == '’' && !word.is_empty() {
            } else {
                end_word(&mut word, &mut f);
            }
        }
    }
    end_word(&mut word, &mut f);
    end_cjk_run(&mut cjk_run, &mut f);
}

fn end_word(word: &mut String, f: &mut impl FnMut(&str)) {
    if word.is_empty() {
        return;
    }
    let chars = if word.is_ascii() { word.len() } else { word.chars().count() };
    if (2..=MAX_TERM_CHARS).contains(&chars) && !is_stop_word(word) {
        singular(word);
        f(word);
    }
    word.clear();
}

fn end_cjk_run(run: &mut Vec<char>, f: &mut impl FnMut(&str)) {
    match run.len() {
        0 => return,
        1 => f(run[0].encode_utf8(&mut [0; 4])),
        _ => {
            let mut pair = String::with_capacity(8);
            for w in run.windows(2) {
                pair.clear();
                pair.extend(w);
                f(&pair);
            }
        }
    }
    run.clear();
}

fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

/// `tests` → `test`, `queries` → `query`; leaves `status`, `class`, `analysis` alone.
fn singular(w: &mut String) {
    if w.len() > 4 && w.ends_with("ies") {
        w.truncate(w.len() - 3);
        w.push('y');
    } else if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        w.pop();
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FFFF) // CJK Extensions B and later
}

/// Terms that say what a message is about: [`terms`] without acknowledgements and greetings.
pub fn meaningful(text: &str) -> Vec<String> {
    terms(text).into_iter().filter(|t| !ACK_WORDS.contains(&t.as_str())).collect()
}

/// A message not worth a recall: empty, a slash command, or fewer than three meaningful words
/// ("thanks!", "ok, go ahead", "hi there").
pub fn is_trivial(message: &str) -> bool {
    let message = message.trim();
    message.is_empty() || message.starts_with('/') || meaningful(message).len() < 3
}

/// A turn not worth keeping: no answer, a slash command, or small talk on both sides.
pub fn is_trivial_turn(user: &str, assistant: &str) -> bool {
    let user = user.trim();
    user.is_empty()
        || user.starts_with('/')
        || assistant.trim().is_empty()
        || (meaningful(user).len() < 3 && meaningful(assistant).len() < 5)
}

/// The first `max` characters of `text`, with `…` when something was cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", text[..cut].trim_end()),
        None => text.to_string(),
    }
}

/// `text` on one line (runs of whitespace become one space), clipped to `max` characters.
pub fn snippet(text: &str, max: usize) -> String {
    // Clip generously first so a huge text is not scanned whole.
    let head = clip(text, max * 2);
    let one_line = head.split_whitespace().collect::<Vec<_>>().join(" ");
    clip(&one_line, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]), "keep STOP_WORDS sorted and unique");
        assert!(is_stop_word("the") && is_stop_word("yourselves") && !is_stop_word("cargo"));
    }

    #[test]
    fn terms_are_lowercase_words_without_stop_words() {
        assert_eq!(terms("The Parser's tests fail on CI!"), ["parser", "test", "fail", "ci"]);
        assert_eq!(terms("why doesn't `cargo build` work?"), ["cargo", "build", "work"]);
        assert_eq!(terms("journal_search, v2.0 x"), ["journal", "search", "v2"]);
        assert_eq!(terms("Über straße ÆRØ"), ["über", "straße", "ærø"]);
        assert!(terms(&"a".repeat(64)).is_empty(), "hashes and blobs are not terms");
    }

    #[test]
    fn plurals_are_folded_but_not_every_final_s() {
        assert_eq!(
            terms("queries tests status class analysis bus"),
            ["query", "test", "status", "class", "analysis", "bus"]
        );
    }

    #[test]
    fn cjk_runs_become_pairs() {
        assert_eq!(terms("修复登录"), ["修复", "复登", "登录"]);
        assert_eq!(terms("fix 錯 now"), ["fix", "錯"]);
        assert_eq!(terms("データベースの移行"), ["デー", "ータ", "タベ", "ベー", "ース", "スの", "の移", "移行"]);
    }

    #[test]
    fn trivial_messages() {
        for m in
            ["", "  ", "thanks!", "ok, go ahead", "Hi there", "/compress", "/new please", "yes please do it", "谢谢"]
        {
            assert!(is_trivial(m), "{m:?}");
        }
        for m in ["why does the release build fail on arm64", "fix the flaky login test", "修复登录页面的错误"]
        {
            assert!(!is_trivial(m), "{m:?}");
        }
    }

    #[test]
    fn trivial_turns() {
        assert!(is_trivial_turn("thanks", "You're welcome!"));
        assert!(is_trivial_turn("/model gpt", "switched"));
        assert!(is_trivial_turn("what is the port of the staging server", "  "));
        assert!(!is_trivial_turn(
            "yes",
            "I renamed the staging database to orders_v2 and updated the migration scripts."
        ));
        assert!(!is_trivial_turn("what is the port of the staging server", "8443"));
    }

    #[test]
    fn snippets_are_one_clipped_line() {
        assert_eq!(snippet("a\n\n  b\tc", 10), "a b c");
        assert_eq!(snippet(&"word ".repeat(100), 12), "word word wo…");
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("héllo", 5), "héllo");
    }
}
