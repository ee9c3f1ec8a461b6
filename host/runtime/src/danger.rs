//! The dangerous-command check the host runs before a plugin's `process` capability may start a
//! shell command.
//!
//! [`check`] splits a command line into its simple commands (across `;`, `&&`, `||`, `|`, newlines,
//! `$(...)`, backticks, process substitutions, `sh -c` scripts and text piped into a shell), strips
//! prefixes such as `sudo`, `env VAR=x`, `nohup` and `time`, and matches each part against a table
//! of patterns. The worst result wins: [`Verdict::Forbidden`] (refused even in yolo mode) over
//! [`Verdict::Dangerous`] (needs approval; carries a stable `key` for session and "always"
//! approvals) over [`Verdict::Safe`].
//!
//! This is a guard rail against accidents, not a sandbox: a command can still hide what it does
//! (variables as command names, scripts on disk, aliases, encoded payloads).
//!
//! ```
//! use talaria_runtime::danger::{check, CommandPolicy, Verdict};
//!
//! let policy = CommandPolicy::default();
//! assert_eq!(check("cargo test", &policy), Verdict::Safe);
//! assert_eq!(
//!     check("rm -r target", &policy),
//!     Verdict::Dangerous { key: "rm-recursive", reason: "recursive delete" },
//! );
//! assert!(matches!(check("ls && sudo rm -rf /", &policy), Verdict::Forbidden { .. }));
//! ```

use std::path::PathBuf;
use std::sync::LazyLock;

use globset::Glob;
use regex::Regex;

/// What the operator configured.
#[derive(Debug, Clone, Default)]
pub struct CommandPolicy {
    /// Glob patterns (globset syntax, matched against the whole command text, after whitespace
    /// normalisation) that are always refused, even in yolo mode. From config.
    pub deny: Vec<String>,
    /// Patterns the user approved "always" (saved allowlist): commands matching one of these
    /// pattern *keys* (see Verdict::Dangerous::key) are treated as safe.
    pub allow_keys: Vec<String>,
    /// talaria's home directory (e.g. /root/.talaria): writing into its .env or config is dangerous.
    pub home: Option<PathBuf>,
}

/// The result of [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing matched.
    Safe,
    /// Needs human approval (or yolo). `key` is a stable short id of the pattern (e.g. "rm-recursive"),
    /// used for session/always approvals; `reason` is a human sentence ("recursive delete").
    Dangerous { key: &'static str, reason: &'static str },
    /// Refused even in yolo mode; `reason` explains and is shown to the model/user verbatim.
    Forbidden { reason: String },
}

/// Checks one command line against the built-in patterns and `policy`.
///
/// Dangerous matches whose key is in `policy.allow_keys` are ignored; forbidden ones never are.
/// Among what remains, the first forbidden match wins, then the first dangerous one.
pub fn check(command: &str, policy: &CommandPolicy) -> Verdict {
    let mut hits = Vec::new();
    scan(command, policy, 0, &mut hits);
    let allowed = |key: &str| policy.allow_keys.iter().any(|k| k == key);
    let forbidden = hits.iter().find(|v| matches!(v, Verdict::Forbidden { .. }));
    let dangerous = hits.iter().find(|v| matches!(v, Verdict::Dangerous { key, .. } if !allowed(key)));
    forbidden.or(dangerous).cloned().unwrap_or(Verdict::Safe)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Dangerous,
    Forbidden,
}

/// Which text of a simple command a pattern row is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    /// `name args`: prefixes such as `sudo` removed, the command word's directory dropped, words
    /// unquoted and joined by single spaces. Not used for `echo`/`printf`, whose words are data.
    Command,
    /// Like `Command`, followed by ` <<< input` when the command reads a pipe, here-doc or
    /// here-string (`input` is the text when known: an `echo`'s words, the here-doc's body).
    Input,
    /// Each target of an output redirection (`>`, `>>`, `>|`, `&>`, `2>`).
    Write,
    /// Each `NAME=value` assignment in front of the command word.
    Env,
}

/// One pattern, as data: every regex in `all` must match and `unless` must not.
struct Row {
    level: Level,
    key: &'static str,
    reason: &'static str,
    on: On,
    all: &'static [&'static str],
    unless: Option<&'static str>,
}

const fn danger(key: &'static str, reason: &'static str, on: On) -> Row {
    Row { level: Level::Dangerous, key, reason, on, all: &[], unless: None }
}

const fn forbid(key: &'static str, reason: &'static str, on: On) -> Row {
    Row { level: Level::Forbidden, key, reason, on, all: &[], unless: None }
}

impl Row {
    const fn all(self, all: &'static [&'static str]) -> Row {
        Row { all, ..self }
    }

    const fn unless(self, unless: &'static str) -> Row {
        Row { unless: Some(unless), ..self }
    }
}

const ROOT_WIPE: &str = "deletes the whole root filesystem";
const DISK_WRITE: &str = "writes raw data to a disk device";
const KILLS: &str = "kills processes wholesale";
const REMOTE: &str = "talks to a container daemon on another host";
const RECURSIVE: &str = r" (-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)( |$)";
/// Whole-disk device names; rows spell it `{DISK}`.
const DISK: &str = r"/dev/((sd|hd|vd|xvd)[a-z]|nvme\d|mmcblk\d|r?disk)";
/// Ways to spell a home directory; rows spell it `{HOME}`.
const HOME: &str = r"(~|\$HOME|\$\{HOME\}|/root|/home/[^/ ]+)";
/// `git` and its global options up to the subcommand; rows spell it `{GIT}`.
const GIT: &str = r"^git( (-[Cc] \S+|-\S+))*";
/// A database client named in the command itself (not in its input).
const SQL_CLIENT: &str =
    r"^([^<]* )?(psql|mysql|mariadb|sqlite3?|sqlcmd|duckdb|clickhouse-client|pgcli|mycli|litecli|cockroach)( |$)";

/// The built-in patterns. Keys are shared by the rows of one family; the first match is reported.
const ROWS: &[Row] = &[
    forbid("root-wipe", ROOT_WIPE, On::Command).all(&[r"^rm ", RECURSIVE, r" /+(\*|\.)?( |$)"]),
    forbid("disk-write", DISK_WRITE, On::Write).all(&[r"^{DISK}"]),
    forbid("disk-write", DISK_WRITE, On::Command).all(&[r"^dd ", r" of={DISK}"]),
    forbid("disk-write", DISK_WRITE, On::Command)
        .all(&[r"^(mkfs(\.\w+)?|mke2fs|mkswap|wipefs|shred|blkdiscard) ", r" /dev/"]),
    forbid("disk-write", DISK_WRITE, On::Command).all(&[r"^(tee|cp|install|pv) ", r" {DISK}\S*$"]),
    danger("kill-self", "would kill talaria itself", On::Command)
        .all(&[r"^(kill|pkill|killall) ", r"talaria|\$\{?PPID\b"]),
    danger("rm-root", "deletes /, the home directory or everything here", On::Command)
        .all(&[r"^rm ", r" (/+\*?|(~|\$HOME|\$\{HOME\})/?\*?|(\./)?\*)( |$)"]),
    danger("rm-recursive", "recursive delete", On::Command).all(&[r"^rm ", RECURSIVE]),
    danger("find-delete", "find that deletes what it finds", On::Command)
        .all(&[r"^find ", r" (-delete|-(exec|execdir|ok|okdir) (\S*/)?(rm|shred|unlink))( |$)"]),
    danger("xargs-rm", "feeds a list of files to rm", On::Command)
        .all(&[r"^xargs ", r" (\S*/)?(rm|shred|unlink)( |$)"]),
    danger("chmod-open", "makes files writable by everyone", On::Command)
        .all(&[r"^chmod ", r" ([0-7]?[0-7][0-7][2367]|[ugoa]*[ao][ugoa]*[+=][rwxXst]*w[rwxXst]*)( |$)"]),
    danger("chown-root", "recursively hands files to root", On::Command).all(&[
        r"^chown ",
        r" (-[a-zA-Z]*R[a-zA-Z]*|--recursive)( |$)",
        r" root([:.]\S*)?( |$)",
    ]),
    danger("mkfs", "creates a filesystem, erasing what was there", On::Command)
        .all(&[r"^(mkfs(\.\w+)?|mke2fs|mkswap)( |$)"]),
    danger("dd", "dd writes raw bytes over a file or device", On::Command).all(&[r"^dd ", r" of="]),
    danger("partition", "edits a disk's partition table", On::Command)
        .all(&[r"^(fdisk|sfdisk|cfdisk|gdisk|sgdisk|parted|wipefs)( |$)"]),
    danger("sql-destructive", "drops or truncates database tables", On::Input)
        .all(&[SQL_CLIENT, r#"(?i)\b(drop (table|database|schema)|truncate( table)? [\w`'"\[])"#]),
    danger("sql-destructive", "deletes every row of a table", On::Input)
        .all(&[SQL_CLIENT, r"(?i)\bdelete from\b"])
        .unless(r"(?i)\bwhere\b"),
    danger("service-stop", "stops, restarts or disables a system service", On::Command)
        .all(&[r"^systemctl ", r" (stop|disable|restart|mask|kill|isolate)( |$)"]),
    danger("service-stop", "stops or restarts a system service", On::Command)
        .all(&[r"^service \S+ (stop|restart)( |$)"]),
    danger("shutdown", "shuts down or reboots the machine", On::Command)
        .all(&[r"^(shutdown|reboot|halt|poweroff)( |$)|^systemctl (poweroff|reboot|halt)( |$)"]),
    danger("mass-kill", KILLS, On::Command).all(&[r"^kill( \S+)* -1$"]),
    danger("mass-kill", KILLS, On::Command)
        .all(&[r"^pkill ", r" (-9|-KILL|-SIGKILL|--signal[ =](9|KILL|SIGKILL))( |$)"]),
    danger("mass-kill", KILLS, On::Command).all(&[r"^killall( |$)"]),
    danger("shell-c", "runs an inline shell script", On::Command).all(&[
        r"^(sh|bash|zsh|dash|ksh|fish|ash|csh|tcsh|su|runuser) |^(xargs|find) .*( |/)(sh|bash|zsh|dash|ksh) -",
        r" (-[a-zA-Z]*c|--command)( |$)",
    ]),
    danger("pipe-to-shell", "pipes text (such as a download) into a shell or interpreter", On::Input)
        .all(&[r"^(sh|bash|zsh|dash|ksh|fish|ash)( \S+)* <<<|^(python[\d.]*|perl|ruby|node)( -)? <<<"]),
    danger("pipe-to-shell", "runs a process substitution (such as a download) as a script", On::Command)
        .all(&[r"^(sh|bash|zsh|dash|ksh|source|\.) ", r" <\("]),
    danger("inline-code", "runs inline interpreter code", On::Command).all(&[concat!(
        r"^(python[\d.]*|pypy[\d.]*)( -[a-zA-Z]+)*? -[a-zA-Z]*c( |$)",
        r"|^(perl|ruby)( -\S+)*? -[a-zA-Z]*[eE]( |$)",
        r"|^(node|nodejs|deno|bun)( -\S+)*? (-e|--eval|-p|--print|eval)( |$)",
        r"|^php( -\S+)*? -r( |$)",
    )]),
    danger("docker-remote", REMOTE, On::Command)
        .all(&[r"^(docker|podman|docker-compose) ", r" (-H|--host|--url|--remote)( |=|$)"])
        .unless(r" (-H|--host)[ =]unix://"),
    danger("docker-remote", REMOTE, On::Env).all(&[r"^(DOCKER|CONTAINER)_HOST=(tcp|ssh|https?)://"]),
    danger("docker-remote", REMOTE, On::Command).all(&[r"^export ", r" (DOCKER|CONTAINER)_HOST=(tcp|ssh|https?)://"]),
    danger("git-force-push", "force-push overwrites remote history", On::Command)
        .all(&[r"{GIT} push( |$)", r" (-f|--force|--force-with-lease|--force-if-includes|\+\S+)(=\S*)?( |$)"]),
    danger("git-reset-hard", "git reset --hard discards uncommitted work", On::Command)
        .all(&[r"{GIT} reset( |$)", r" --hard( |$)"]),
    danger("git-clean", "git clean -f deletes untracked files", On::Command)
        .all(&[r"{GIT} clean( |$)", r" (-[a-zA-Z]*f[a-zA-Z]*|--force)( |$)"]),
];

/// Places that must not be written: (key, reason, path regex). Each becomes rows for redirections,
/// `tee`, `cp`/`mv`/`install`/`ln`/`rsync` into it, and `sed -i` on it. talaria's configured home
/// is rewritten to `~/.talaria` before matching.
const PROTECTED: &[(&str, &str, &str)] = &[
    ("write-etc", "writes into /etc (system configuration)", r"/etc"),
    ("write-ssh", "writes into an .ssh directory (keys, authorized_keys)", r"{HOME}/\.ssh"),
    ("write-talaria", "writes into talaria's own .env or config.toml", r"{HOME}/\.talaria/(\.env|config\.toml)"),
];

struct Rule {
    level: Level,
    key: &'static str,
    reason: &'static str,
    on: On,
    all: Vec<Regex>,
    unless: Option<Regex>,
}

impl Rule {
    fn new(level: Level, key: &'static str, reason: &'static str, on: On, all: &[&str]) -> Rule {
        let all = all.iter().map(|re| compile(re)).collect();
        Rule { level, key, reason, on, all, unless: None }
    }

    fn hit(&self, text: &str) -> bool {
        self.all.iter().all(|re| re.is_match(text)) && !self.unless.as_ref().is_some_and(|re| re.is_match(text))
    }

    fn verdict(&self) -> Verdict {
        match self.level {
            Level::Dangerous => Verdict::Dangerous { key: self.key, reason: self.reason },
            Level::Forbidden => Verdict::Forbidden { reason: self.reason.to_string() },
        }
    }
}

/// Compiles a built-in pattern, expanding `{DISK}`, `{GIT}` and `{HOME}` (not valid regex on their own).
fn compile(re: &str) -> Regex {
    let re = re.replace("{DISK}", DISK).replace("{GIT}", GIT).replace("{HOME}", HOME);
    Regex::new(&re).unwrap_or_else(|e| panic!("built-in pattern {re:?} is invalid: {e}"))
}

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let mut rules: Vec<Rule> = ROWS
        .iter()
        .map(|r| Rule { unless: r.unless.map(compile), ..Rule::new(r.level, r.key, r.reason, r.on, r.all) })
        .collect();
    for &(key, reason, path) in PROTECTED {
        let rule = |on, all: &[&str]| Rule::new(Level::Dangerous, key, reason, on, all);
        rules.push(rule(On::Write, &[&format!(r"^{path}(/|$)")]));
        rules.push(rule(On::Command, &[r"^tee ", &format!(r" {path}(/| |$)")]));
        let into = format!(r" {path}(/\S*)?$|( -t |--target-directory[= ]){path}(/| |$)");
        rules.push(rule(On::Command, &[r"^(cp|mv|install|ln|rsync) ", &into]));
        rules.push(rule(On::Command, &[r"^sed ", r" (-[a-zA-Z]*i|--in-place)", &format!(r" {path}(/| |$)")]));
    }
    rules
});

/// Commands whose arguments are printed, not run.
const INERT: &[&str] = &["echo", "printf", ":", "true", "false"];
/// Shells whose `-c` script, or text piped in, is checked as a command line of its own.
const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "csh", "tcsh", "su", "runuser"];
/// Deeper nesting of `sh -c` and substitutions than this is refused rather than followed.
const MAX_DEPTH: usize = 8;

fn forbidden(reason: impl Into<String>) -> Verdict {
    Verdict::Forbidden { reason: reason.into() }
}

fn unparseable(error: shell_words::ParseError) -> Verdict {
    forbidden(format!("the command's quoting could not be parsed ({error}), so it cannot be checked"))
}

/// Collects every match in `line` (and the command lines nested in it) into `hits`.
fn scan(line: &str, policy: &CommandPolicy, depth: usize, hits: &mut Vec<Verdict>) {
    if depth > MAX_DEPTH {
        return hits.push(forbidden("the command nests shells or substitutions too deeply to be checked"));
    }
    if let Err(e) = shell_words::split(line) {
        return hits.push(unparseable(e));
    }
    deny(&normalise(line), policy, hits);
    if is_fork_bomb(line) {
        hits.push(forbidden("fork bomb: a function that pipes itself into itself in the background"));
    }
    let (simples, subs) = lex(line);
    let mut piped: Option<String> = None;
    for simple in &simples {
        let words = match shell_words::split(&simple.raw) {
            Ok(words) => words,
            Err(e) => return hits.push(unparseable(e)),
        };
        let (assigns, rest) = strip_prefixes(&words);
        let name = rest.first().map_or("", |w| basename(w));
        let args = rest.get(1..).unwrap_or_default();
        let input = simple.input.clone().or(piped.take());
        piped = simple.piped_out.then(|| printed(name, args));

        let command = home_alias(&normalise(&format!("{name} {}", args.join(" "))), policy);
        let with_input = match &input {
            Some(text) => home_alias(&normalise(&format!("{command} <<< {text}")), policy),
            None => command.clone(),
        };
        let writes: Vec<String> = simple.writes.iter().map(|w| home_alias(w, policy)).collect();
        deny(&command, policy, hits);
        deny(&normalise(&simple.raw), policy, hits);
        for rule in RULES.iter() {
            let matched = match rule.on {
                On::Command => !INERT.contains(&name) && rule.hit(&command),
                On::Input => !INERT.contains(&name) && rule.hit(&with_input),
                On::Write => writes.iter().any(|w| rule.hit(w)),
                On::Env => assigns.iter().any(|a| rule.hit(a)),
            };
            if matched {
                hits.push(rule.verdict());
            }
        }
        if SHELLS.contains(&name) {
            if let Some(script) = inline_script(args).or(input.as_deref()) {
                scan(script, policy, depth + 1, hits);
            }
        } else if name == "xargs" || name == "find" {
            let shell = args.iter().position(|a| SHELLS.contains(&basename(a)));
            if let Some(script) = shell.and_then(|at| inline_script(&args[at + 1..])) {
                scan(script, policy, depth + 1, hits);
            }
        } else if name == "eval" {
            scan(&args.join(" "), policy, depth + 1, hits);
        }
    }
    for sub in subs {
        scan(&sub, policy, depth + 1, hits);
    }
}

/// What `echo`/`printf` print, roughly (`printf '%s\n' a b` prints one word per line); empty for
/// other commands, whose output is unknown.
fn printed(name: &str, args: &[String]) -> String {
    match name {
        "echo" => args.join(" ").replace("\\n", "\n"),
        "printf" => args.join("\n").replace("\\n", "\n"),
        _ => String::new(),
    }
}

/// Refuses `text` when it matches one of the operator's deny globs (or when one of them is broken:
/// a deny list that cannot be read must not let everything through).
fn deny(text: &str, policy: &CommandPolicy, hits: &mut Vec<Verdict>) {
    for pattern in &policy.deny {
        match Glob::new(pattern) {
            Ok(glob) if glob.compile_matcher().is_match(text) => {
                let reason = format!("the command matches the deny pattern `{pattern}` configured by the operator");
                hits.push(forbidden(reason));
            }
            Ok(_) => {}
            Err(e) => {
                let reason = format!("the deny pattern `{pattern}` is not a valid glob ({e}); fix the config");
                hits.push(forbidden(reason));
            }
        }
    }
}

fn normalise(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Rewrites talaria's configured home directory to `~/.talaria`, the spelling the patterns know.
fn home_alias(text: &str, policy: &CommandPolicy) -> String {
    match policy.home.as_deref().map(|h| h.to_string_lossy()) {
        Some(home) if home.trim_end_matches('/').len() > 1 => text.replace(home.trim_end_matches('/'), "~/.talaria"),
        _ => text.to_string(),
    }
}

/// Splits off leading assignments and wrappers that run the rest of the words as a command.
fn strip_prefixes(words: &[String]) -> (Vec<&str>, &[String]) {
    let mut assigns = Vec::new();
    let mut i = 0;
    while let Some(word) = words.get(i) {
        if is_assignment(word) {
            assigns.push(word.as_str());
            i += 1;
            continue;
        }
        let wrapper = basename(word);
        let with_arg: &[&str] = match wrapper {
            "sudo" | "doas" => &["-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "-R"],
            "env" => &["-u", "-C", "-S", "--unset", "--chdir"],
            "nice" => &["-n", "--adjustment"],
            "timeout" => &["-s", "-k", "--signal", "--kill-after"],
            "nohup" | "time" | "exec" | "command" | "builtin" | "{" | "!" | "if" | "then" | "elif" | "else"
            | "while" | "until" | "do" => &[],
            _ => break,
        };
        i += 1;
        while let Some(option) = words.get(i).filter(|w| w.starts_with('-') && w.len() > 1) {
            i += if with_arg.contains(&option.as_str()) { 2 } else { 1 };
            if option == "--" {
                break;
            }
        }
        if wrapper == "timeout" {
            i += 1; // the duration
        }
    }
    (assigns, words.get(i..).unwrap_or_default())
}

/// `rm` for `/usr/bin/rm`.
fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

fn is_assignment(word: &str) -> bool {
    let name = word.split_once('=').map_or("", |(name, _)| name);
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    name.starts_with(|c: char| !c.is_ascii_digit()) && name.chars().all(ident)
}

/// The script of `sh -c SCRIPT` (also `-ec`, `-lc`, `--command`).
fn inline_script(args: &[String]) -> Option<&str> {
    let flag = |a: &String| a == "--command" || (a.starts_with('-') && !a.starts_with("--") && a.contains('c'));
    let at = args.iter().position(flag)?;
    args.get(at + 1).map(String::as_str)
}

static QUOTED: LazyLock<Regex> = LazyLock::new(|| compile(r#"'[^']*'|"(?:\\.|[^"\\])*""#));
static FUNCTION: LazyLock<Regex> =
    LazyLock::new(|| compile(r"(?:\bfunction\s+([\w:.-]+)\s*(?:\(\s*\))?|([\w:.-]+)\s*\(\s*\))\s*\{([^}]*)\}"));

/// A function whose body runs `f | f &`: `:(){ :|:& };:` and its respelled variants.
fn is_fork_bomb(line: &str) -> bool {
    let unquoted = QUOTED.replace_all(line, "''");
    FUNCTION.captures_iter(&unquoted).any(|caps| {
        let (Some(name), Some(body)) = (caps.get(1).or(caps.get(2)), caps.get(3)) else { return false };
        let name = regex::escape(name.as_str());
        Regex::new(&format!(r"(^|[^\w:.-]){name}\s*\|&?\s*{name}\s*&")).is_ok_and(|re| re.is_match(body.as_str()))
    })
}

/// One simple command: its text with quotes intact and redirections removed.
#[derive(Debug, Default)]
struct Simple {
    raw: String,
    writes: Vec<String>,
    input: Option<String>,
    piped_out: bool,
}

/// Splits a command line into simple commands and the bodies of its substitutions (`$(...)`,
/// backticks, `<(...)`, `>(...)`), which stay in the text of the command that contains them.
fn lex(line: &str) -> (Vec<Simple>, Vec<String>) {
    let c: Vec<char> = line.chars().collect();
    let (mut out, mut subs, mut cur) = (Vec::new(), Vec::new(), Simple::default());
    let mut heredocs: Vec<(String, bool, usize)> = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let (next, after) = (c.get(i + 1).copied(), c.get(i + 2).copied());
        match (c[i], next) {
            ('\\', _) => {
                // A backslash-newline joins lines; any other escaped char stays for shell_words.
                let escaped = if next == Some('\n') { " ".to_string() } else { text(&c, i, i + 2) };
                cur.raw.push_str(&escaped);
                i += 2;
            }
            ('\'', _) => {
                let close = find(&c, i + 1, '\'');
                cur.raw.push_str(&text(&c, i, close + 1));
                i = close + 1;
            }
            ('"', _) => {
                let close = double_end(&c, i, &mut subs);
                cur.raw.push_str(&text(&c, i, close));
                i = close;
            }
            ('`', _) => {
                let close = tick_end(&c, i);
                subs.push(text(&c, i + 1, close));
                cur.raw.push_str(&text(&c, i, close + 1));
                i = close + 1;
            }
            ('$' | '<' | '>', Some('(')) => {
                let close = paren_end(&c, i + 1);
                subs.push(text(&c, i + 2, close));
                cur.raw.push_str(&text(&c, i, close + 1));
                i = close + 1;
            }
            ('#', _) if cur.raw.is_empty() || cur.raw.ends_with(char::is_whitespace) => i = find(&c, i, '\n'),
            (';' | '\n' | '(' | ')', _) => {
                end(&mut cur, &mut out, false);
                i += 1;
                if c[i - 1] == '\n' {
                    i = heredoc_bodies(&c, i, &mut heredocs, &mut out);
                }
            }
            ('&', Some('&')) | ('|', Some('|')) => {
                end(&mut cur, &mut out, false);
                i += 2;
            }
            ('&', Some('>')) => i += 1, // `&>file`: the `>` arm reads the target
            ('&', _) => {
                end(&mut cur, &mut out, false);
                i += 1;
            }
            ('|', _) => {
                end(&mut cur, &mut out, true);
                i += if next == Some('&') { 2 } else { 1 };
            }
            ('>', _) => {
                let kept = cur.raw.trim_end_matches(|d: char| d.is_ascii_digit()).len();
                if cur.raw[..kept].is_empty() || cur.raw[..kept].ends_with(char::is_whitespace) {
                    cur.raw.truncate(kept); // the `2` of `2>`
                }
                let mut j = i + 1 + usize::from(matches!(next, Some('>' | '|')));
                let dup = c.get(j) == Some(&'&');
                j += usize::from(dup);
                let (target, k) = read_word(&c, j);
                if !(dup && (target == "-" || target.chars().all(|d| d.is_ascii_digit()))) {
                    cur.writes.push(target);
                }
                i = k;
            }
            ('<', Some('<')) if after == Some('<') => {
                let (word, k) = read_word(&c, i + 3);
                cur.input = Some(word);
                i = k;
            }
            ('<', Some('<')) => {
                let strip = after == Some('-');
                let (delim, k) = read_word(&c, i + 2 + usize::from(strip));
                heredocs.push((delim, strip, out.len()));
                cur.input = Some(String::new());
                i = k;
            }
            ('<', _) => i = read_word(&c, i + 1 + usize::from(next == Some('&'))).1,
            (ch, _) => {
                cur.raw.push(ch);
                i += 1;
            }
        }
    }
    end(&mut cur, &mut out, false);
    (out, subs)
}

/// Ends the current simple command; `piped` when its output goes to the next one.
fn end(cur: &mut Simple, out: &mut Vec<Simple>, piped: bool) {
    let done = std::mem::take(cur);
    if !done.raw.trim().is_empty() || !done.writes.is_empty() || done.input.is_some() {
        out.push(Simple { piped_out: piped, ..done });
    }
}

/// Reads the bodies of the here-docs opened on the line that just ended at `i`.
fn heredoc_bodies(c: &[char], mut i: usize, pending: &mut Vec<(String, bool, usize)>, out: &mut [Simple]) -> usize {
    for (delim, strip, at) in pending.drain(..) {
        let mut body = String::new();
        while i < c.len() {
            let eol = find(c, i, '\n');
            let line = text(c, i, eol);
            i = eol + 1;
            if (if strip { line.trim_start_matches('\t') } else { &line }) == delim {
                break;
            }
            body.push_str(&line);
            body.push('\n');
        }
        if let Some(simple) = out.get_mut(at) {
            simple.input = Some(body);
        }
    }
    i
}

/// The chars `c[from..to]`, clamped to the line.
fn text(c: &[char], from: usize, to: usize) -> String {
    c[from.min(c.len())..to.min(c.len())].iter().collect()
}

/// Index of the next `ch` at or after `from`, or the line's length.
fn find(c: &[char], from: usize, ch: char) -> usize {
    (from..c.len()).find(|&j| c[j] == ch).unwrap_or(c.len())
}

/// Index just past the `"` closing the string opened at `open`; substitutions inside go to `subs`.
fn double_end(c: &[char], open: usize, subs: &mut Vec<String>) -> usize {
    let mut j = open + 1;
    while j < c.len() {
        match c[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            '`' => {
                let close = tick_end(c, j);
                subs.push(text(c, j + 1, close));
                j = close + 1;
            }
            '$' if c.get(j + 1) == Some(&'(') => {
                let close = paren_end(c, j + 1);
                subs.push(text(c, j + 2, close));
                j = close + 1;
            }
            _ => j += 1,
        }
    }
    c.len()
}

/// Index of the backtick closing the one at `open`.
fn tick_end(c: &[char], open: usize) -> usize {
    let mut j = open + 1;
    while j < c.len() && c[j] != '`' {
        j += if c[j] == '\\' { 2 } else { 1 };
    }
    j.min(c.len())
}

/// Index of the `)` matching the `(` at `open`, skipping quoted text.
fn paren_end(c: &[char], open: usize) -> usize {
    let (mut depth, mut j) = (0usize, open);
    while j < c.len() {
        match c[j] {
            '\\' => j += 1,
            '\'' => j = find(c, j + 1, '\''),
            '"' => j = double_end(c, j, &mut Vec::new()) - 1,
            '(' => depth += 1,
            ')' if depth <= 1 => return j,
            ')' => depth -= 1,
            _ => {}
        }
        j += 1;
    }
    c.len()
}

/// The word starting at `from` (after blanks), unquoted, and the index after it.
fn read_word(c: &[char], from: usize) -> (String, usize) {
    let start = (from..c.len()).find(|&j| c[j] != ' ' && c[j] != '\t').unwrap_or(c.len());
    let mut j = start;
    while j < c.len() {
        match c[j] {
            ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')' => break,
            '\'' => j = find(c, j + 1, '\'') + 1,
            '"' => j = double_end(c, j, &mut Vec::new()),
            '$' if c.get(j + 1) == Some(&'(') => j = paren_end(c, j + 1) + 1,
            '\\' => j += 2,
            _ => j += 1,
        }
    }
    let raw = text(c, start, j);
    let word = shell_words::split(&raw).ok().and_then(|w| w.into_iter().next());
    (word.unwrap_or(raw), j.min(c.len()))
}

#[cfg(test)]
mod tests;
