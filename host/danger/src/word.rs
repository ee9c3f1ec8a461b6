//! Turning a simple command's text into words, the way the shell would as far as it can be
//! known before running anything.
//!
//! [`split`] removes quotes and escapes, decodes `$'...'`, expands braces (`{rm,-rf,/}` is three
//! words) and substitutes what is known statically: `$HOME` and `${HOME}` become `~`,
//! `$TALARIA_HOME` becomes `~/.talaria`, `$PWD` and `$(pwd)` become `.`, and a substitution that
//! only echoes literal text (`$(echo rm)`, `` `printf rm` ``, `$(which rm)`) becomes that text.
//! A variable the same command line set to a literal (`X=rm; $X`) becomes its value, and the word
//! is still [`Word::dynamic`] (the value may have changed in ways not followed). Every other
//! expansion (a variable, a substitution, arithmetic) stays in the word as written and marks it
//! [`Word::dynamic`] and [`Word::unknown`]; an unquoted `*`, `?` or `[...]` marks it
//! [`Word::glob`].

use std::collections::HashMap;

use super::echo;
use super::lex::{self, ansi_end, brace_end, double_close, paren_end, tick_end};

/// One word of a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Word {
    /// The word without quotes; unknown expansions kept as written (`$DIR`, `$(cat list)`).
    pub text: String,
    /// It contains an expansion whose value is not known for sure before the command runs.
    pub dynamic: bool,
    /// Some expansion in it could not be resolved at all (its source text is in `text`).
    pub unknown: bool,
    /// It contains an unquoted glob character, so the shell may replace it with file names.
    pub glob: bool,
}

/// Variables the command line set to literal values, by name.
pub(super) type Vars = HashMap<String, String>;

/// What an expansion stands for.
enum Value {
    /// The same wherever the command runs (`$HOME` is `~`, `$(echo rm)` is `rm`).
    Known(String),
    /// What the command line set the variable to earlier.
    Tracked(String),
    /// Not known before the command runs.
    Unknown,
}

/// Brace expansion stops after this many words; the rest of a word's alternatives are dropped.
const MAX_BRACE_WORDS: usize = 256;

/// A word being built: each char with whether it is active (unquoted, so globs and braces apply).
#[derive(Default)]
struct Building {
    chars: Vec<(char, bool)>,
    started: bool,
    dynamic: bool,
    unknown: bool,
}

/// Splits `raw` into words, with no variables known.
///
/// # Errors
/// The reason, when a quote is never closed.
pub(super) fn split(raw: &str) -> Result<Vec<Word>, &'static str> {
    split_with(raw, &Vars::new())
}

/// Splits `raw` into words; `vars` are the variables the command line set before it.
///
/// # Errors
/// The reason, when a quote is never closed.
pub(super) fn split_with(raw: &str, vars: &Vars) -> Result<Vec<Word>, &'static str> {
    let c: Vec<char> = raw.chars().collect();
    let mut words = Vec::new();
    let mut cur = Building::default();
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            ' ' | '\t' | '\n' => {
                finish(&mut cur, &mut words);
                i += 1;
            }
            '\\' => {
                if let Some(&next) = c.get(i + 1).filter(|&&n| n != '\n') {
                    cur.push_quoted(&next.to_string());
                    cur.started = true;
                }
                i += 2;
            }
            '\'' => {
                let close = lex::find(&c, i + 1, '\'');
                if close == c.len() {
                    return Err("missing closing quote");
                }
                cur.push_quoted(&lex::text(&c, i + 1, close));
                cur.started = true;
                i = close + 1;
            }
            '"' => {
                let Some(close) = double_close(&c, i, &mut Vec::new()) else { return Err("missing closing quote") };
                double_quoted(&c[i + 1..close], &mut cur, vars);
                cur.started = true;
                i = close + 1;
            }
            '$' if c.get(i + 1) == Some(&'\'') => {
                let close = ansi_end(&c, i + 1);
                if close == c.len() {
                    return Err("missing closing quote");
                }
                cur.push_quoted(&echo::unescape(&lex::text(&c, i + 2, close)));
                cur.started = true;
                i = close + 1;
            }
            '$' if c.get(i + 1) == Some(&'"') => i += 1, // a translatable string: a plain "..."
            '$' | '`' | '<' | '>' => match expansion(&c, i, vars) {
                Some((end, value)) => {
                    cur.expand(value, &lex::text(&c, i, end), false);
                    i = end;
                }
                None => {
                    cur.chars.push((c[i], false));
                    cur.started = true;
                    i += 1;
                }
            },
            ch => {
                cur.chars.push((ch, true));
                cur.started = true;
                i += 1;
            }
        }
    }
    finish(&mut cur, &mut words);
    Ok(words)
}

impl Building {
    fn push_quoted(&mut self, text: &str) {
        self.chars.extend(text.chars().map(|ch| (ch, false)));
    }

    /// Adds an expansion: its value when known, else its source text (and the word turns dynamic).
    /// An unquoted value is word-split and globbed like the shell does.
    fn expand(&mut self, value: Value, source: &str, quoted: bool) {
        self.started = true;
        let value = match value {
            Value::Known(value) => Some(value),
            Value::Tracked(value) => {
                self.dynamic = true;
                Some(value)
            }
            Value::Unknown => None,
        };
        match value {
            Some(value) if quoted => self.push_quoted(&value),
            Some(value) => {
                for ch in value.chars() {
                    if ch.is_whitespace() {
                        self.chars.push((' ', true)); // a word break, applied in `finish`
                    } else {
                        self.chars.push((ch, !matches!(ch, '~' | '{' | '}' | ',')));
                    }
                }
            }
            None => {
                self.push_quoted(source);
                self.dynamic = true;
                self.unknown = true;
            }
        }
    }
}

/// The contents of a double-quoted string: escapes and expansions apply, globs and braces do not.
fn double_quoted(c: &[char], cur: &mut Building, vars: &Vars) {
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '\\' if matches!(c.get(i + 1), Some('$' | '`' | '"' | '\\')) => {
                cur.chars.push((c[i + 1], false));
                i += 2;
            }
            '\\' if c.get(i + 1) == Some(&'\n') => i += 2,
            '$' | '`' => match expansion(c, i, vars) {
                Some((end, value)) => {
                    cur.expand(value, &lex::text(c, i, end), true);
                    i = end;
                }
                None => {
                    cur.chars.push((c[i], false));
                    i += 1;
                }
            },
            ch => {
                cur.chars.push((ch, false));
                i += 1;
            }
        }
    }
}

/// The expansion starting at `c[i]` (`$NAME`, `${...}`, `$(...)`, `$((...))`, `$[...]`,
/// backticks, `<(...)`, `>(...)`): the index after it and what it stands for. `None` when `c[i]`
/// starts no expansion (a lone `$`).
fn expansion(c: &[char], i: usize, vars: &Vars) -> Option<(usize, Value)> {
    let next = c.get(i + 1).copied();
    let known = |value: Option<String>| value.map_or(Value::Unknown, Value::Known);
    let variable = |name: &str| match (known_variable(name), vars.get(name)) {
        (Some(value), _) => Value::Known(value),
        (None, Some(value)) => Value::Tracked(value.clone()),
        (None, None) => Value::Unknown,
    };
    match (c[i], next) {
        ('`', _) => {
            let close = tick_end(c, i);
            Some((close + 1, known(resolve(&lex::text(c, i + 1, close)))))
        }
        ('<' | '>', Some('(')) => Some((paren_end(c, i + 1) + 1, Value::Unknown)),
        ('<' | '>', _) => None,
        ('$', Some('(')) if c.get(i + 2) == Some(&'(') => Some((paren_end(c, i + 1) + 1, Value::Unknown)),
        ('$', Some('(')) => {
            let close = paren_end(c, i + 1);
            Some((close + 1, known(resolve(&lex::text(c, i + 2, close)))))
        }
        ('$', Some('{')) => {
            let close = brace_end(c, i + 1);
            let inner = lex::text(c, i + 2, close);
            let value = match parameter(&inner) {
                Some(name) => variable(name),
                None => Value::Unknown,
            };
            Some((close + 1, value))
        }
        ('$', Some('[')) => Some((lex::find(c, i, ']') + 1, Value::Unknown)),
        ('$', Some(ch)) if ch.is_ascii_alphabetic() || ch == '_' => {
            let end = (i + 1..c.len()).find(|&j| !(c[j].is_ascii_alphanumeric() || c[j] == '_')).unwrap_or(c.len());
            Some((end, variable(&lex::text(c, i + 1, end))))
        }
        ('$', Some(ch)) if ch.is_ascii_digit() => Some((i + 2, variable(&ch.to_string()))),
        ('$', Some(ch)) if "@*#?$!-".contains(ch) => Some((i + 2, Value::Unknown)),
        _ => None,
    }
}

/// The variable `${...}` stands for when its value is the variable's: plain, with a default
/// (`${HOME:-/x}`, `${HOME:=x}`), a check (`${HOME:?}`) or a trailing-slash strip (`${HOME%/}`),
/// which all give the variable's value when it is set.
fn parameter(inner: &str) -> Option<&str> {
    let name_end = inner.find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_')).unwrap_or(inner.len());
    let (name, rest) = inner.split_at(name_end);
    let keeps_value = rest.is_empty() || [":-", "-", ":=", "=", ":?", "?", "%"].iter().any(|op| rest.starts_with(op));
    (keeps_value && !name.is_empty()).then_some(name)
}

/// The value of the variables whose meaning is known wherever the command runs.
fn known_variable(name: &str) -> Option<String> {
    match name {
        "HOME" => Some("~".into()),
        "TALARIA_HOME" => Some("~/.talaria".into()),
        "PWD" => Some(".".into()),
        _ => None,
    }
}

/// What a command substitution prints, when it is a lone `echo`/`printf` of literal words, a
/// `pwd`, or `which`/`command -v` of a name (the name, which runs the same program); `None`
/// otherwise.
fn resolve(inner: &str) -> Option<String> {
    let simples = lex::lex(inner);
    let [simple] = simples.as_slice() else { return None };
    if !simple.subs.is_empty() || !simple.writes.is_empty() || !simple.reads.is_empty() || simple.input.is_some() {
        return None;
    }
    let words = split(&simple.raw).ok()?;
    if words.iter().any(|w| w.dynamic || w.glob) {
        return None;
    }
    let texts: Vec<String> = words.into_iter().map(|w| w.text).collect();
    let (name, args) = texts.split_first()?;
    let printed = match (name.as_str(), args) {
        ("echo", _) => echo::echo(args),
        ("printf", _) => echo::printf(args),
        ("pwd", _) => ".".into(),
        ("which", [program]) => program.clone(),
        ("command", [flag, program]) if flag == "-v" => program.clone(),
        _ => return None,
    };
    Some(printed.trim_end_matches('\n').to_string())
}

/// Ends the word being built: expands its braces, splits it where a known unquoted expansion
/// left blanks, and notes globs.
fn finish(cur: &mut Building, words: &mut Vec<Word>) {
    let done = std::mem::take(cur);
    if !done.started {
        return;
    }
    // `''` is a word of its own; an expansion that printed nothing is none.
    let keep_empty = done.chars.is_empty();
    let mut expanded = Vec::new();
    braces(done.chars, &mut expanded);
    for chars in expanded {
        for part in chars.split(|&(ch, active)| active && ch == ' ') {
            if part.is_empty() && !keep_empty {
                continue;
            }
            let text: String = part.iter().map(|&(ch, _)| ch).collect();
            let glob = is_glob(part);
            words.push(Word { text, dynamic: done.dynamic, unknown: done.unknown, glob });
        }
    }
}

/// An unquoted `*` or `?`, or an unquoted `[` closed later by an unquoted `]`.
fn is_glob(chars: &[(char, bool)]) -> bool {
    chars.iter().enumerate().any(|(at, &(ch, active))| {
        active && (ch == '*' || ch == '?' || (ch == '[' && chars[at + 1..].iter().any(|&(c, a)| a && c == ']')))
    })
}

/// Brace expansion of one word (`a{b,c}d` is `abd acd`); a word without an unquoted `{...,...}`
/// comes back as it is.
fn braces(chars: Vec<(char, bool)>, out: &mut Vec<Vec<(char, bool)>>) {
    if out.len() >= MAX_BRACE_WORDS {
        return;
    }
    let Some((open, close, commas)) = brace_group(&chars) else {
        out.push(chars);
        return;
    };
    let mut bounds = vec![open];
    bounds.extend(commas);
    bounds.push(close);
    for pair in bounds.windows(2) {
        let mut word = chars[..open].to_vec();
        word.extend_from_slice(&chars[pair[0] + 1..pair[1]]);
        word.extend_from_slice(&chars[close + 1..]);
        braces(word, out);
    }
}

/// The first unquoted `{` with its matching `}` and the top-level commas between them.
fn brace_group(chars: &[(char, bool)]) -> Option<(usize, usize, Vec<usize>)> {
    for open in (0..chars.len()).filter(|&j| chars[j] == ('{', true)) {
        let (mut depth, mut commas) = (0usize, Vec::new());
        for (j, &ch) in chars.iter().enumerate().skip(open) {
            match ch {
                ('{', true) => depth += 1,
                ('}', true) if depth == 1 => {
                    if !commas.is_empty() {
                        return Some((open, j, commas));
                    }
                    break;
                }
                ('}', true) => depth -= 1,
                (',', true) if depth == 1 => commas.push(j),
                _ => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(raw: &str) -> Vec<String> {
        split(raw).expect("splits").into_iter().map(|w| w.text).collect()
    }

    #[test]
    fn quotes_escapes_and_ansi_strings_are_removed() {
        assert_eq!(texts(r#"r'm' "-r"f \/ 'a b'"#), ["rm", "-rf", "/", "a b"]);
        assert_eq!(texts(r"$'\x72\x6d' -rf"), ["rm", "-rf"]);
        assert_eq!(texts(r#"'' "" x"#), ["", "", "x"]);
        assert_eq!(split("echo 'open"), Err("missing closing quote"));
        assert_eq!(split("echo \"open"), Err("missing closing quote"));
    }

    #[test]
    fn known_expansions_are_substituted_and_the_rest_marked_dynamic() {
        assert_eq!(
            texts("$(echo rm) -rf ${HOME}/x $TALARIA_HOME/.env $PWD"),
            ["rm", "-rf", "~/x", "~/.talaria/.env", "."]
        );
        assert_eq!(texts("${TALARIA_HOME:-~/.talaria}/.env ${HOME%/}"), ["~/.talaria/.env", "~"]);
        assert_eq!(texts("`printf 'rm -rf'` x"), ["rm", "-rf", "x"]);
        assert_eq!(texts(r#""$(echo rm -rf)" x"#), ["rm -rf", "x"]);
        let words = split(r#"rm "$DIR" $(cat list) x"#).expect("splits");
        let dynamic: Vec<bool> = words.iter().map(|w| w.dynamic).collect();
        assert_eq!(dynamic, [false, true, true, false]);
        assert!(words[1].unknown && words[2].unknown);
        assert_eq!(words[2].text, "$(cat list)");
        assert!(split("echo $((1+2)) $1 $@ ${x:-y}").expect("splits")[1..].iter().all(|w| w.dynamic));
        assert!(!split("echo '$HOME' cost$").expect("splits").iter().any(|w| w.dynamic));
    }

    #[test]
    fn variables_set_earlier_are_substituted_but_stay_dynamic() {
        let vars = Vars::from([("X".to_string(), "rm -rf".to_string()), ("D".to_string(), "/".to_string())]);
        let words = split_with(r#"$X "$D" ${D}x $Y"#, &vars).expect("splits");
        let got: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(got, ["rm", "-rf", "/", "/x", "$Y"]);
        assert!(words.iter().all(|w| w.dynamic));
        let unknown: Vec<bool> = words.iter().map(|w| w.unknown).collect();
        assert_eq!(unknown, [false, false, false, false, true]);
        assert_eq!(texts("$(which rm) `command -v rm`"), ["rm", "rm"]);
    }

    #[test]
    fn braces_expand_and_globs_are_noted() {
        assert_eq!(texts("{rm,-rf,/}"), ["rm", "-rf", "/"]);
        assert_eq!(texts("a{b,c{d,e}}f {} {x} '{a,b}'"), ["abf", "acdf", "acef", "{}", "{x}", "{a,b}"]);
        let globs: Vec<bool> = split("* '*' a?b [ab] [ x\\*").expect("splits").iter().map(|w| w.glob).collect();
        assert_eq!(globs, [true, false, true, true, false, false]);
    }
}
