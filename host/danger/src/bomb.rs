//! Fork bombs, in any spelling.
//!
//! A fork bomb is a shell function whose body runs itself in the background or in a pipeline
//! (`:(){ :|:& };:`, `f(){ f & f; }; f`, `function b { b|b & }`), whatever its name, its
//! whitespace, newlines or separators; or an endless loop (`while true`, `while :`,
//! `until false`) that starts processes in the background. The function's body is split into
//! simple commands like any command line, so wrappers (`nohup f &`) and subshells (`(f|f) &`) are
//! seen. Quoted text is data: `echo ':(){ :|:& };:'` is not a bomb.

use std::sync::LazyLock;

use regex::Regex;

use super::lex::{self, Simple};
use super::word;
use super::wrapper;

/// Quoted text, blanked before looking for function definitions.
static QUOTED: LazyLock<Regex> = LazyLock::new(|| regex(r#"'[^']*'|"(?:\\.|[^"\\])*""#));

/// A function definition's head, up to the `{` or `(` that opens its body.
static FUNCTION: LazyLock<Regex> = LazyLock::new(|| {
    let name = r#"[^\s(){}<>;&|'"$`=]+"#;
    regex(&format!(r"(?:\bfunction\s+({name})\s*(?:\(\s*\))?|({name})\s*\(\s*\))\s*([{{(])"))
});

fn regex(re: &str) -> Regex {
    Regex::new(re).unwrap_or_else(|e| panic!("built-in pattern {re:?} is invalid: {e}"))
}

/// Whether `line` defines a function that forks itself, or loops forever forking.
pub(super) fn is_fork_bomb(line: &str) -> bool {
    let unquoted = QUOTED.replace_all(line, "''");
    let recursive = FUNCTION.captures_iter(&unquoted).any(|caps| {
        let (Some(name), Some(open)) = (caps.get(1).or(caps.get(2)), caps.get(3)) else { return false };
        let body = body(&unquoted[open.start()..]);
        forks_itself(name.as_str(), &lex::lex(body))
    });
    recursive || forks_forever(&lex::lex(line))
}

/// The text between the bracket `text` starts with and its match.
fn body(text: &str) -> &str {
    let (open, close) = if text.starts_with('{') { ('{', '}') } else { ('(', ')') };
    let mut depth = 0usize;
    for (at, ch) in text.char_indices() {
        if ch == open {
            depth += 1;
        } else if ch == close {
            depth -= 1;
            if depth == 0 {
                return &text[1..at];
            }
        }
    }
    &text[1..]
}

/// The program a simple command runs, with assignments and wrappers taken off.
fn program(simple: &Simple) -> Option<String> {
    let mut words = word::split(&simple.raw).ok()?;
    loop {
        let start = words.iter().position(|w| !super::is_assignment(&w.text))?;
        words.drain(..start);
        let first = words.first()?;
        match wrapper::wrapper(&first.text) {
            Some(spec) => words = wrapper::unwrap(spec, &words[1..]).command,
            None => return Some(first.text.clone()),
        }
    }
}

/// How a function body names its own function without spelling it.
const SELF: &[&str] = &["$FUNCNAME", "${FUNCNAME}", "${FUNCNAME[0]}"];

/// Whether one of `body`'s commands runs `name` in the background or in a pipeline.
fn forks_itself(name: &str, body: &[Simple]) -> bool {
    let mut piped_in = false;
    body.iter().any(|simple| {
        let itself = program(simple).is_some_and(|p| p == name || SELF.contains(&p.as_str()));
        let forks = (simple.background || simple.piped_out || piped_in) && itself;
        piped_in = simple.piped_out;
        forks
    })
}

/// Whether an endless loop among `simples` runs something in the background before its `done`.
/// `for ((;;))` and `while ((1))` reach here as a bare `for` or `while`, since the line splitter
/// cuts at parentheses: `for` followed directly by its `do`, `while` followed by `1`.
fn forks_forever(simples: &[Simple]) -> bool {
    let texts: Vec<Vec<String>> = simples
        .iter()
        .map(|s| word::split(&s.raw).map(|w| w.into_iter().map(|w| w.text).collect()).unwrap_or_default())
        .collect();
    (0..texts.len()).any(|at| {
        let words: Vec<&str> = texts[at].iter().map(String::as_str).collect();
        let next = texts.get(at + 1).and_then(|t| t.first()).map(String::as_str);
        let endless = match words.as_slice() {
            ["while", "true" | ":"] | ["while", "[", "1", "]"] | ["until", "false"] => true,
            ["for"] => next == Some("do"),
            ["while"] => next == Some("1"),
            _ => false,
        };
        endless
            && texts[at + 1..]
                .iter()
                .zip(&simples[at + 1..])
                .take_while(|(t, _)| t.first().is_none_or(|w| w != "done"))
                .any(|(_, s)| s.background)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bombs_in_many_spellings() {
        for line in [
            ":(){ :|:& };:",
            ":() { : | : & }; :",
            ":(){ :|:&};:",
            "f(){ f & f; }; f",
            "bomb() { bomb | bomb & }; bomb",
            "function f { f|f & }; f",
            "function f() { f | f & }\nf",
            "f()\n{\n  f | f &\n}\nf",
            "f() ( f | f & ); f",
            "f(){ (f|f) & }; f",
            "f(){ nohup f & }; f",
            "x(){ x& x& }; x",
            "while true; do sleep 1 & done",
            "while :; do bash & done",
            "until false\ndo\n  yes > /dev/null &\ndone",
            "for ((;;)); do sleep 1 & done",
            "while ((1)); do sh & done",
            "f(){ $FUNCNAME | $FUNCNAME & }; f",
        ] {
            assert!(is_fork_bomb(line), "{line:?}");
        }
    }

    #[test]
    fn ordinary_functions_and_loops_are_not_bombs() {
        for line in [
            "f() { echo hi; }; f",
            "f(){ g & }; f",
            "echo ':(){ :|:& };:'",
            "while true; do date; sleep 1; done",
            "while read x; do echo $x & done",
            "while true; do sleep 1; done &",
            "f(){ f; }",
            "for ((i = 0; i < 3; i++)); do sleep 1 & done",
        ] {
            assert!(!is_fork_bomb(line), "{line:?}");
        }
    }
}
