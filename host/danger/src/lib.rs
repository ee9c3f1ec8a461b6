//! The dangerous-command check the host runs before a plugin's `process` capability may start a
//! shell command.
//!
//! [`check`] classifies a command line; the worst finding wins: [`Verdict::Forbidden`] (refused
//! even in yolo mode) over [`Verdict::Dangerous`] (needs approval; carries a stable `key` for
//! session and "always" approvals) over [`Verdict::Safe`]. It is a guard rail for what a model
//! may be talked into typing, and it fails closed:
//!
//! 1. **Every part is checked.** The line is split into simple commands across `;`, `&&`, `||`,
//!    `|`, `&`, newlines and subshells (`lex`); the bodies of `$(...)`, backticks, `<(...)`,
//!    `>(...)` and unquoted here-docs, `sh -c`/`su -c`/`flock -c` scripts, `eval` and `alias`
//!    values, `find -exec` commands, text piped into a shell from `echo`/`printf`/`cat` (escapes
//!    decoded: `echo`), and a file the line wrote with known content before running it
//!    (`echo 'rm -rf /' > x.sh; sh x.sh`) are checked as command lines of their own.
//! 2. **Words are read as the shell reads them** (`word`): quotes, escapes and `$'...'` removed,
//!    braces expanded (`{rm,-rf,/}`), `$HOME`, `$TALARIA_HOME`, `$PWD` and trivial substitutions
//!    (`$(echo rm)`, `` `printf rm` ``, `$(pwd)`, `$(which rm)`) resolved, and variables the line
//!    set to a literal (`X=rm; $X -rf /`) followed.
//! 3. **Wrappers are seen through** (`wrapper`): `sudo`, `doas`, `pkexec`, `env` (and `env -S`,
//!    `env -C`), `nice`, `nohup`, `setsid`, `timeout`, `stdbuf`, `ionice`, `chrt`, `taskset`,
//!    `flock`, `xargs`, `busybox`, `unbuffer`, `nsenter`, `unshare`, `chroot`, `watch`, `strace`,
//!    `systemd-run`, `script -c`, `time`, `exec`, `command`, `builtin` and the keywords that only
//!    prefix a command: the wrapped command is checked as if typed alone, with the wrapper's
//!    options and operands (`timeout -s KILL 5`, `flock -w 5 LOCK`) skipped.
//! 4. **GNU long options are written out** before matching: `rm --r` is `rm --recursive`,
//!    `git push --mir` is `git push --mirror`.
//! 5. **What cannot be known needs approval.** A command whose name comes from a variable, a
//!    substitution, a glob, `eval` of one, or a file the same line downloaded (`$CMD x`,
//!    `$(cat f) x`, `/???/r? -rf x`, `eval "$X"`, `curl -o i.sh URL; sh i.sh`) is Dangerous
//!    (`dynamic-command`). Arguments only known at run time (`$DIR`, `$(cat list)`, what `xargs`
//!    or `find -exec` add) are Dangerous (`dynamic-arguments`) for the programs that delete or
//!    overwrite (`rm`, `dd`, `chmod`, `cp`, `mv`, `tee`, `kill`, `find`, `sed -i`, destructive
//!    `git` and `docker` subcommands, ...); `ls $(pwd)` or `echo $HOME` stay Safe.
//! 6. **Paths are normalised** (`path`) before the protected-location checks: `//etc`,
//!    `/tmp/../etc`, `~root`, `/home/bob`, `$HOME`, `$TALARIA_HOME` and the configured home all
//!    mean what the kernel would make of them, and relative paths follow the `cd`/`pushd` of the
//!    same line (`cd / && rm -rf *` is `rm -rf /*`, so Forbidden). Writing `/etc`, any home's
//!    `.ssh` or shell startup files, anything in talaria's home, a workspace's `.git/config`,
//!    `.git/hooks/` or `.talaria/` needs approval (a key per family: `write-etc`, `write-ssh`,
//!    `write-startup`, `write-talaria`, `write-git`, `write-project`); so does reading talaria's
//!    `.env` or `/proc/*/environ` (`read-secrets`).
//! 7. **Refused outright**: deleting `/` recursively in any spelling, raw writes to disks, fork
//!    bombs in any spelling (`bomb`), lines whose quoting does not parse, nesting deeper than
//!    eight shells or substitutions, and the operator's deny globs.
//!
//! The pattern rows (`rules`) match a command's normalised text; what needs paths or word-level
//! facts is found in code (`Scan`, `program`). The whole check takes some 10-20 µs.
//!
//! Still out of reach: what a script or binary on disk does (`bash script.sh`, `make`), aliases
//! and functions defined before this line, `PATH` tricks, symlinks made earlier, commands run on
//! another host (`ssh`), and values computed at run time in ways that do not look dynamic to the
//! shell (a program that itself deletes what it reads from a file).
//!
//! ```
//! use talaria_danger::{check, CommandPolicy, Verdict};
//!
//! let policy = CommandPolicy::default();
//! assert_eq!(check("cargo test", &policy), Verdict::Safe);
//! assert_eq!(
//!     check("setsid rm --rec target", &policy),
//!     Verdict::Dangerous { key: "rm-recursive", reason: "recursive delete" },
//! );
//! assert!(matches!(check("cd / && sudo rm -rf *", &policy), Verdict::Forbidden { .. }));
//! ```

mod bomb;
mod echo;
mod lex;
mod path;
mod program;
mod rules;
mod word;
mod wrapper;

use std::path::PathBuf;

use globset::Glob;

use lex::Simple;
use path::{PathName, Place, Reach};
use program::{
    dynamic_matters, find_commands, find_deletes, find_starts, mentions, reads_everything, recursive, values,
    writes_here, written,
};
use rules::{FORK_BOMB, On, ROOT_WIPE, RULES};
use word::Word;

/// What the operator configured.
#[derive(Debug, Clone, Default)]
pub struct CommandPolicy {
    /// Glob patterns (globset syntax, matched against the whole command text, after whitespace
    /// normalisation) that are always refused, even in yolo mode. From config.
    pub deny: Vec<String>,
    /// Patterns the user approved "always" (saved allowlist): commands matching one of these
    /// pattern *keys* (see Verdict::Dangerous::key) are treated as safe.
    pub allow_keys: Vec<String>,
    /// talaria's home directory (e.g. /root/.talaria), an absolute path: writing anything in it,
    /// or reading its `.env`, needs approval (as for `~/.talaria` and `$TALARIA_HOME`).
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
    let talaria = policy
        .home
        .as_deref()
        .and_then(|home| home.to_str())
        .filter(|home| home.starts_with('/'))
        .map(|home| PathName::parse(home, false, &PathName::here(), None))
        .filter(|home| !home.parts.is_empty());
    let mut scan = Scan { policy, talaria, hits: Vec::new(), made: Vec::new(), vars: word::Vars::new() };
    scan.line(command, &mut PathName::here(), 0);
    let allowed = |key: &str| policy.allow_keys.iter().any(|k| k == key);
    let forbidden = scan.hits.iter().find(|v| matches!(v, Verdict::Forbidden { .. }));
    let dangerous = scan.hits.iter().find(|v| matches!(v, Verdict::Dangerous { key, .. } if !allowed(key)));
    forbidden.or(dangerous).cloned().unwrap_or(Verdict::Safe)
}

/// Dangerous findings that stop mattering when the command runs in the OS sandbox, because it
/// hides or locks what they are about: the command fails there with an ordinary error instead
/// of asking first. Findings about what the sandbox still lets happen (deleting or rewriting
/// the workspace, git history and remotes, another machine, a database, a start-up file) ask as
/// before, and forbidden ones are refused as before.
pub const ENFORCED_BY_SANDBOX: &[&str] = &[
    // Hidden: talaria's home, the keys and credentials, other processes' environments.
    "read-secrets",
    // Read-only or invisible: /etc, ~/.ssh, talaria's home, .git's config and hooks, .talaria/.
    "write-etc",
    "write-ssh",
    "write-talaria",
    "write-git",
    "write-project",
    // Its own PID namespace, no capabilities, no system bus: talaria and the machine's
    // processes, services and disks are out of reach.
    "kill-self",
    "mass-kill",
    "shutdown",
    "service-stop",
    "crontab",
    "chown-root",
    "mkfs",
    "partition",
    "dd",
    // Code the classifier cannot read runs with the same bounds as a script on disk, and
    // reaches the network only through the proxy's per-host approvals.
    "inline-code",
    "shell-c",
    "pipe-to-shell",
    "dynamic-command",
    "dynamic-arguments",
    "git-config-exec",
];

/// [`check`] for a command that will run in the OS sandbox: findings in
/// [`ENFORCED_BY_SANDBOX`] do not ask.
pub fn check_confined(command: &str, policy: &CommandPolicy) -> Verdict {
    let mut confined = policy.clone();
    confined.allow_keys.extend(ENFORCED_BY_SANDBOX.iter().map(|k| (*k).to_string()));
    check(command, &confined)
}

/// A dangerous finding made in code: its key and reason.
type Finding = (&'static str, &'static str);

const RM_ROOT: Finding = ("rm-root", "deletes /, the home directory or everything here");
const RM_UNKNOWN_DIR: Finding =
    ("rm-dynamic-dir", "deletes by a relative pattern after a `cd` whose target is only known at run time");
const DYNAMIC_COMMAND: Finding = (
    "dynamic-command",
    "runs a command whose name or script is only known at run time (a variable, substitution, glob or eval)",
);
const REDEFINES: Finding =
    ("dynamic-command", "redefines HOME, PWD or CDPATH, so where the paths after it lead is not known");
const DYNAMIC_ARGUMENTS: Finding = (
    "dynamic-arguments",
    "gives a command that deletes or overwrites arguments only known at run time (a variable, substitution or piped list)",
);
const READ_SECRETS: Finding = ("read-secrets", "reads talaria's secrets (.env) or a process's environment");
const RUNS_MADE: Finding =
    ("dynamic-command", "runs a file that the same command line wrote, so what it does is not known");

/// The finding for writing into `place`.
fn write_finding(place: Place) -> Finding {
    match place {
        Place::Etc => ("write-etc", "writes into /etc (system configuration)"),
        Place::Ssh => ("write-ssh", "writes into an .ssh directory (keys, authorized_keys)"),
        Place::Talaria => ("write-talaria", "writes into talaria's home (config, secrets, grants, plugins)"),
        Place::Git => ("write-git", "writes git's config or hooks, which git runs by itself"),
        Place::Project => ("write-project", "writes the project's .talaria directory (its plugins and settings)"),
        Place::Startup => (
            "write-startup",
            "writes a file your shell or desktop session runs by itself (.bashrc, .profile, autostart)",
        ),
    }
}

/// Commands whose arguments are printed, not run.
const INERT: &[&str] = &["echo", "printf", ":", "true", "false"];
/// Shells whose `-c` script, or text piped in, is checked as a command line of its own.
const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "csh", "tcsh", "su", "runuser"];
/// Programs that read a directory's files recursively: given talaria's home, they read its `.env`.
const RECURSIVE_READERS: &[&str] =
    &["grep", "egrep", "fgrep", "rg", "ag", "ack", "tar", "zip", "7z", "cp", "rsync", "scp", "find", "strings"];
/// Programs whose targets ([`written`]) get new content, which a later `sh FILE` would run.
const PRODUCERS: &[&str] = &["tee", "cp", "install", "ln", "rsync", "scp", "mv", "dd", "curl", "wget", "git"];
/// What `source /dev/stdin` and friends read: the command's input.
const STDIN: &[&str] = &["/dev/stdin", "/proc/self/fd/0", "/dev/fd/0"];
/// Variables whose value is a command line that programs run (git's ssh command, editors,
/// pagers): checked as one.
const COMMAND_VARIABLES: &[&str] = &[
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PAGER",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "PROMPT_COMMAND",
];
/// Variables whose new value would make the paths after them mean something else.
const PLACE_VARIABLES: &[&str] = &["HOME", "TALARIA_HOME", "PWD", "CDPATH"];
/// Deeper nesting of `sh -c` and substitutions than this is refused rather than followed.
const MAX_DEPTH: usize = 8;

fn forbidden(reason: impl Into<String>) -> Verdict {
    Verdict::Forbidden { reason: reason.into() }
}

fn unparseable(error: impl std::fmt::Display) -> Verdict {
    forbidden(format!("the command's quoting could not be parsed ({error}), so it cannot be checked"))
}

/// One run of [`check`]: what it found so far.
struct Scan<'p> {
    policy: &'p CommandPolicy,
    /// The configured home, normalised.
    talaria: Option<PathName>,
    hits: Vec<Verdict>,
    /// Files this command line writes (normalised), with their content when it is known (an
    /// `echo` or here-doc redirected to it), so running one of them later is checked too.
    made: Vec<(String, Option<String>)>,
    /// Variables this command line set to literal values (`X=rm`), used when they are expanded.
    vars: word::Vars,
}

impl Scan<'_> {
    fn found(&mut self, (key, reason): Finding) {
        self.hits.push(Verdict::Dangerous { key, reason });
    }

    fn path(&self, word: &Word, cwd: &PathName) -> PathName {
        PathName::parse(&word.text, word.glob, cwd, self.talaria.as_ref())
    }

    /// Checks a command line run in `cwd` (which its `cd`s change).
    fn line(&mut self, line: &str, cwd: &mut PathName, depth: usize) {
        if depth > MAX_DEPTH {
            return self.hits.push(forbidden("the command nests shells or substitutions too deeply to be checked"));
        }
        if let Err(e) = shell_words::split(line) {
            return self.hits.push(unparseable(e));
        }
        self.deny(&normalise(line));
        if bomb::is_fork_bomb(line) {
            self.hits.push(forbidden(FORK_BOMB));
        }
        let mut piped: Option<String> = None;
        for simple in lex::lex(line) {
            for sub in &simple.subs {
                self.line(sub, &mut cwd.clone(), depth + 1);
            }
            let words = match word::split_with(&simple.raw, &self.vars) {
                Ok(words) => words,
                Err(e) => return self.hits.push(unparseable(e)),
            };
            self.deny(&normalise(&simple.raw));
            let input = simple.input.clone().or(piped.take());
            let printed = self.command(&words, input.as_deref(), cwd, depth, false);
            self.redirections(&simple, printed.as_deref(), cwd);
            piped = simple.piped_out.then(|| printed.unwrap_or_default());
        }
    }

    /// Checks one command given as words; returns what it prints when that is known (`echo`,
    /// `printf`, `cat` of its input). `tail`: more arguments come at run time (`xargs`).
    fn command(
        &mut self,
        words: &[Word],
        input: Option<&str>,
        cwd: &mut PathName,
        depth: usize,
        tail: bool,
    ) -> Option<String> {
        let start = words.iter().position(|w| !is_assignment(&w.text)).unwrap_or(words.len());
        let (assignments, words) = words.split_at(start);
        for assignment in assignments {
            self.assignment(assignment, words.is_empty(), cwd, depth);
        }
        let first = words.first()?;
        if first.dynamic || first.glob {
            self.found(DYNAMIC_COMMAND);
            if first.unknown || first.glob {
                // It may be a wrapper: what follows is checked as a command of its own too.
                self.command(&words[1..], input, cwd, depth, true);
                return None;
            }
            // A variable set earlier on the line: checked as what it was set to.
        }
        if first.text.contains('/') {
            self.runs_made(first, cwd, depth);
        }
        let name = basename(&first.text);
        if let Some(spec) = wrapper::wrapper(name) {
            let text = normalise(&format!("{name} {}", self.render(&words[1..])));
            self.deny(&text);
            self.rows(&text, input);
            let mut inner = wrapper::unwrap(spec, &words[1..]);
            for script in &inner.scripts {
                self.line(script, &mut cwd.clone(), depth + 1);
            }
            if name == "xargs" {
                // The list xargs reads, when known, is the rest of the command's arguments.
                let listed = input.unwrap_or_default().split_whitespace();
                inner.command.extend(listed.map(|text| Word {
                    text: text.to_string(),
                    dynamic: false,
                    unknown: false,
                    glob: false,
                }));
            }
            let mut inner_cwd = match &inner.chdir {
                Some(dir) if dir.unknown => PathName::unknown(),
                Some(dir) => self.path(dir, cwd),
                None => cwd.clone(),
            };
            let tail = tail || name == "xargs";
            let printed = self.command(&inner.command, input, &mut inner_cwd, depth, tail);
            if inner.chdir.is_none() {
                *cwd = inner_cwd;
            }
            return printed;
        }
        let args = wrapper::expand(name, &words[1..]);
        match name {
            "cd" | "pushd" | "popd" => {
                *cwd = self.change_dir(name, &args, cwd);
                return None;
            }
            "export" | "declare" | "typeset" | "local" | "readonly" => {
                for arg in args.iter().filter(|a| is_assignment(&a.text)) {
                    self.assignment(arg, true, cwd, depth);
                }
            }
            "read" | "unset" | "for" | "mapfile" | "readarray" | "getopts" | "printf" => {
                // They (re)set variables to values not known here (`printf -v NAME`).
                for arg in &args {
                    self.vars.remove(&arg.text);
                }
            }
            _ => {}
        }
        let text = normalise(&format!("{name} {}", self.render(&args)));
        self.deny(&text);
        let texts = || args.iter().map(|w| w.text.clone()).collect::<Vec<_>>();
        match name {
            "echo" => return Some(echo::echo(&texts())),
            "printf" => return Some(echo::printf(&texts())),
            name if INERT.contains(&name) => return None,
            _ => {}
        }
        self.deletes(name, &args, cwd);
        self.rows(&text, input);
        self.files(name, &args, input, cwd);
        if (tail || args.iter().any(|w| w.dynamic)) && dynamic_matters(name, &args) {
            self.found(DYNAMIC_ARGUMENTS);
        }
        self.nested(name, &args, input, cwd, depth);
        let passes_input = name == "tee" || (name == "cat" && wrapper::operands(&args).next().is_none());
        passes_input.then(|| input.unwrap_or_default().to_string())
    }

    /// The rows matched against a command's text (and its input).
    fn rows(&mut self, text: &str, input: Option<&str>) {
        let with_input = input.map(|input| normalise(&format!("{text} <<< {input}")));
        for rule in RULES.iter() {
            let matched = match rule.on {
                On::Command => rule.hit(text),
                On::Input => rule.hit(with_input.as_deref().unwrap_or(text)),
                On::Write | On::Env => false,
            };
            if matched {
                self.hits.push(rule.verdict());
            }
        }
    }

    /// `NAME=value`, in front of a command or given to `export`; `kept` when the variable stays
    /// set for the rest of the line (no command follows it, or `export`).
    fn assignment(&mut self, assignment: &Word, kept: bool, cwd: &PathName, depth: usize) {
        let text = assignment.text.as_str();
        for rule in RULES.iter().filter(|r| r.on == On::Env && r.hit(text)) {
            self.hits.push(rule.verdict());
        }
        let (name, value) = text.split_once('=').unwrap_or((text, ""));
        if PLACE_VARIABLES.contains(&name) {
            self.found(REDEFINES);
        }
        if COMMAND_VARIABLES.contains(&name) {
            self.line(value, &mut cwd.clone(), depth + 1);
        }
        if kept && !assignment.unknown {
            self.vars.insert(name.to_string(), value.to_string());
        } else if kept {
            self.vars.remove(name);
        }
    }

    /// Output redirections (rows on their normalised targets, protected places) and input ones.
    /// `printed` is what the command prints, when known.
    fn redirections(&mut self, simple: &Simple, printed: Option<&str>, cwd: &PathName) {
        let targets: Vec<Word> = simple.writes.iter().filter_map(|raw| self.first_word(raw)).collect();
        for target in targets {
            let path = self.path(&target, cwd);
            let rendered = path.render();
            for rule in RULES.iter().filter(|r| r.on == On::Write && r.hit(&rendered)) {
                self.hits.push(rule.verdict());
            }
            if let Some(place) = path.place() {
                self.found(write_finding(place));
            }
            self.made.push((rendered, printed.map(str::to_string)));
        }
        let sources: Vec<Word> = simple.reads.iter().filter_map(|raw| self.first_word(raw)).collect();
        for source in sources {
            if self.path(&source, cwd).is_secret() {
                self.found(READ_SECRETS);
            }
        }
    }

    /// Deletes that reach `/` (forbidden when recursive), a home or everything here, or that use a
    /// relative pattern in a directory not known statically.
    fn deletes(&mut self, name: &str, args: &[Word], cwd: &PathName) {
        let (recursive, targets): (bool, Vec<Word>) = match name {
            "rm" => (recursive(args), wrapper::operands(args).cloned().collect()),
            "find" if find_deletes(args) => (true, find_starts(args)),
            "rsync" if args.iter().any(|a| a.text.starts_with("--del")) => {
                (true, wrapper::operands(args).last().cloned().into_iter().collect())
            }
            "mv" => {
                let mut sources: Vec<Word> = wrapper::operands(args).cloned().collect();
                if values(args, &["-t"], &["--target-directory"]).is_empty() {
                    sources.pop(); // the destination
                }
                (true, sources)
            }
            _ => return,
        };
        for target in &targets {
            match self.path(target, cwd).reach() {
                Reach::Root if recursive => self.hits.push(forbidden(ROOT_WIPE)),
                Reach::Root | Reach::Home | Reach::Here => self.found(RM_ROOT),
                Reach::UnknownDir => self.found(RM_UNKNOWN_DIR),
                Reach::Other => {}
            }
        }
    }

    /// Writes into protected places, and reads of talaria's secrets. `input` is what the
    /// command reads, when known (what `tee` writes).
    fn files(&mut self, name: &str, args: &[Word], input: Option<&str>, cwd: &PathName) {
        for target in written(name, args) {
            let path = self.path(&target, cwd);
            if let Some(place) = path.place() {
                self.found(write_finding(place));
            }
            if PRODUCERS.contains(&name) {
                let content = input.filter(|_| name == "tee").map(str::to_string);
                self.made.push((path.render(), content));
            }
        }
        if writes_here(name, args) {
            if let Some(place) = cwd.place() {
                self.found(write_finding(place));
            }
            // `wget URL` and `curl -O URL` name the file after the URL's last segment.
            for url in wrapper::operands(args).filter(|a| a.text.contains("://")) {
                let file = url.text.split(['?', '#']).next().and_then(|u| u.rsplit('/').next()).unwrap_or_default();
                if !file.is_empty() && matches!(name, "wget" | "curl") {
                    let path = self.path(&Word { text: file.to_string(), ..url.clone() }, cwd);
                    self.made.push((path.render(), None));
                }
            }
        }
        let reads_secret = args.iter().any(|arg| {
            mentions(&arg.text).into_iter().any(|text| {
                let path = self.path(&Word { text: text.to_string(), ..arg.clone() }, cwd);
                path.is_secret()
                    || (path.is_talaria_home() && RECURSIVE_READERS.contains(&name))
                    || (matches!(path.reach(), Reach::Root | Reach::Home) && reads_everything(name, args))
            })
        });
        if reads_secret {
            self.found(READ_SECRETS);
        }
    }

    /// Running a file that this command line wrote before: its content is checked when known
    /// (`echo 'rm -rf /' > x.sh; sh x.sh`), and needs approval when not (`curl -o x.sh URL; sh x.sh`).
    fn runs_made(&mut self, file: &Word, cwd: &PathName, depth: usize) {
        let path = self.path(file, cwd).render();
        let Some((_, content)) = self.made.iter().rev().find(|(made, _)| *made == path) else { return };
        match content.clone() {
            Some(script) => self.line(&script, &mut cwd.clone(), depth + 1),
            None => self.found(RUNS_MADE),
        }
    }

    /// Command lines inside this one: shell scripts, `eval`, `alias` values, `find -exec`.
    fn nested(&mut self, name: &str, args: &[Word], input: Option<&str>, cwd: &PathName, depth: usize) {
        if SHELLS.contains(&name) {
            match inline_script(args) {
                Some(at) => self.script(&args[at].text, &args[at + 1..], cwd, depth + 1),
                None => {
                    if let Some(input) = input {
                        self.line(input, &mut cwd.clone(), depth + 1);
                    }
                }
            }
            if let Some(file) = wrapper::operands(args).next() {
                self.runs_made(file, cwd, depth);
            }
            if let Some(at) = args.iter().position(|a| a.text == "--").filter(|_| name == "runuser") {
                self.command(&args[at + 1..], None, &mut cwd.clone(), depth + 1, false);
            }
            return;
        }
        match name {
            "eval" => {
                let script: Vec<&str> = args.iter().map(|a| a.text.as_str()).collect();
                self.line(&script.join(" "), &mut cwd.clone(), depth + 1);
            }
            "alias" => {
                for (_, value) in args.iter().filter_map(|a| a.text.split_once('=')) {
                    self.line(value, &mut cwd.clone(), depth + 1);
                }
            }
            "source" | "." => {
                let Some(file) = wrapper::operands(args).next() else { return };
                if file.dynamic {
                    self.found(DYNAMIC_COMMAND);
                }
                self.runs_made(file, cwd, depth);
                if let Some(input) = input.filter(|_| STDIN.contains(&file.text.as_str())) {
                    self.line(input, &mut cwd.clone(), depth + 1);
                }
            }
            "find" => {
                for command in find_commands(args) {
                    self.command(command, None, &mut cwd.clone(), depth + 1, true);
                }
            }
            // They run the script they read later, on their own.
            "at" | "batch" => {
                if let Some(input) = input {
                    self.line(input, &mut cwd.clone(), depth + 1);
                }
            }
            _ => {}
        }
    }

    /// A `sh -c SCRIPT ARG0 ARG1...` script, with `$0`, `$1`... standing for the words after it.
    fn script(&mut self, script: &str, positional: &[Word], cwd: &PathName, depth: usize) {
        let names: Vec<String> = (0..positional.len().min(10)).map(|n| n.to_string()).collect();
        let saved: Vec<Option<String>> = names.iter().map(|n| self.vars.get(n).cloned()).collect();
        for (name, word) in names.iter().zip(positional) {
            if word.unknown {
                self.vars.remove(name);
            } else {
                self.vars.insert(name.clone(), word.text.clone());
            }
        }
        self.line(script, &mut cwd.clone(), depth);
        for (name, value) in names.into_iter().zip(saved) {
            match value {
                Some(value) => self.vars.insert(name, value),
                None => self.vars.remove(&name),
            };
        }
    }

    /// Where `cd`, `pushd` or `popd` leads from `cwd`.
    fn change_dir(&self, name: &str, args: &[Word], cwd: &PathName) -> PathName {
        let option =
            |w: &&Word| w.text.len() > 1 && w.text.starts_with('-') && w.text[1..].chars().all(|c| "LPe@n".contains(c));
        match args.iter().find(|w| !option(w)) {
            _ if name == "popd" => PathName::unknown(),
            None if name == "cd" => PathName::parse("~", false, cwd, None),
            None => PathName::unknown(),
            Some(w) if w.unknown || w.text == "-" || w.text.starts_with(['+', '-']) => PathName::unknown(),
            Some(w) => self.path(w, cwd),
        }
    }

    /// The first word of a redirection target, as the shell reads it.
    fn first_word(&self, raw: &str) -> Option<Word> {
        word::split_with(raw, &self.vars).ok().and_then(|words| words.into_iter().next())
    }

    /// Words as the rows see them: absolute and home paths normalised (also after `NAME=`).
    fn render(&self, words: &[Word]) -> String {
        let here = PathName::here();
        let path = |text: &str, glob: bool| PathName::parse(text, glob, &here, self.talaria.as_ref()).render();
        let rendered: Vec<String> = words
            .iter()
            .map(|w| match w.text.split_once('=') {
                _ if w.text.starts_with(['/', '~']) => path(&w.text, w.glob),
                Some((key, value)) if value.starts_with(['/', '~']) && !key.contains(' ') => {
                    format!("{key}={}", path(value, w.glob))
                }
                _ => w.text.clone(),
            })
            .collect();
        rendered.join(" ")
    }

    /// Refuses `text` when it matches one of the operator's deny globs (or when one of them is
    /// broken: a deny list that cannot be read must not let everything through).
    fn deny(&mut self, text: &str) {
        for pattern in &self.policy.deny {
            match Glob::new(pattern) {
                Ok(glob) if glob.compile_matcher().is_match(text) => {
                    let reason = format!("the command matches the deny pattern `{pattern}` configured by the operator");
                    self.hits.push(forbidden(reason));
                }
                Ok(_) => {}
                Err(e) => {
                    let reason = format!("the deny pattern `{pattern}` is not a valid glob ({e}); fix the config");
                    self.hits.push(forbidden(reason));
                }
            }
        }
    }
}

fn normalise(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
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

/// Where the script of `sh -c SCRIPT` is in `args` (also `-ec`, `-lc`, `--command`).
fn inline_script(args: &[Word]) -> Option<usize> {
    let flag = |a: &Word| {
        a.text == "--command" || (a.text.starts_with('-') && !a.text.starts_with("--") && a.text.contains('c'))
    };
    let at = args.iter().position(flag)? + 1;
    (at < args.len()).then_some(at)
}

#[cfg(test)]
mod corpus;
#[cfg(test)]
mod tests;
