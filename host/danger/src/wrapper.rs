//! Commands that run another command, and GNU long options spelled short.
//!
//! A wrapper (`sudo`, `env`, `timeout 5`, `flock -w 5 LOCK`, `xargs -0 -n1`, ...) is looked through:
//! [`unwrap`] reads the wrapper's own options the way getopt does (clusters, attached values,
//! `--opt=value`, unambiguous abbreviations, `--`), skips its operands (a duration, a lock file, a
//! priority) and hands back the wrapped command's words, plus any shell script an option carries
//! (`flock -c SCRIPT`, `script -c SCRIPT`) and the words `env -S STRING` splits out.
//!
//! [`expand`] rewrites `--rec` to `--recursive` and `git push --mir` to `git push --mirror` for the
//! programs whose long options the rules look at: getopt_long and git accept any unambiguous
//! prefix. A prefix shared only by one option and its own longer forms (`--forc`: `--force`,
//! `--force-with-lease`) expands to the shortest; a prefix that is ambiguous in the table is left
//! alone (the program refuses it too).

use super::word::Word;

/// How a wrapper's options and operands are read.
pub(super) struct Wrapper {
    pub name: &'static str,
    /// Short options that take a value (attached, `-n5`, or the next word).
    short: &'static str,
    /// Long options that take a value (`--opt value` or `--opt=value`).
    long: &'static [&'static str],
    /// Its other long options (for expanding abbreviations).
    flags: &'static [&'static str],
    /// Operands between the options and the command (a duration, a lock file, a CPU mask).
    operands: usize,
    /// The short and long option whose value is a shell command line.
    script: Option<(char, &'static str)>,
    /// The short and long option whose value is split into words placed before the command.
    split: Option<(char, &'static str)>,
    /// The short and long option whose value is the directory the command runs in.
    chdir: Option<(char, &'static str)>,
}

const fn wrap(name: &'static str) -> Wrapper {
    Wrapper { name, short: "", long: &[], flags: &[], operands: 0, script: None, split: None, chdir: None }
}

impl Wrapper {
    const fn short(self, short: &'static str) -> Wrapper {
        Wrapper { short, ..self }
    }
    const fn long(self, long: &'static [&'static str]) -> Wrapper {
        Wrapper { long, ..self }
    }
    const fn flags(self, flags: &'static [&'static str]) -> Wrapper {
        Wrapper { flags, ..self }
    }
    const fn operands(self, operands: usize) -> Wrapper {
        Wrapper { operands, ..self }
    }
    const fn script(self, short: char, long: &'static str) -> Wrapper {
        Wrapper { script: Some((short, long)), ..self }
    }
    const fn split(self, short: char, long: &'static str) -> Wrapper {
        Wrapper { split: Some((short, long)), ..self }
    }
    const fn chdir(self, short: char, long: &'static str) -> Wrapper {
        Wrapper { chdir: Some((short, long)), ..self }
    }
}

/// The wrappers looked through. Shell keywords that only prefix a command (`if`, `do`, `!`, `{`)
/// are here too.
const WRAPPERS: &[Wrapper] = &[
    wrap("sudo")
        .short("ughpCDrtUTR")
        .long(&[
            "user",
            "group",
            "host",
            "prompt",
            "close-from",
            "chdir",
            "role",
            "type",
            "other-user",
            "command-timeout",
        ])
        .flags(&[
            "askpass",
            "background",
            "bell",
            "edit",
            "help",
            "login",
            "list",
            "non-interactive",
            "preserve-env",
            "preserve-groups",
            "remove-timestamp",
            "reset-timestamp",
            "set-home",
            "shell",
            "stdin",
            "validate",
            "version",
        ])
        .chdir('D', "chdir"),
    wrap("doas").short("uC"),
    wrap("pkexec").long(&["user"]).flags(&["disable-internal-agent", "keep-cwd", "help", "version"]),
    wrap("env")
        .short("uCS")
        .long(&["unset", "chdir", "split-string"])
        .flags(&[
            "ignore-environment",
            "null",
            "debug",
            "default-signal",
            "ignore-signal",
            "block-signal",
            "list-signal-handling",
            "help",
            "version",
        ])
        .split('S', "split-string")
        .chdir('C', "chdir"),
    wrap("nice").short("n").long(&["adjustment"]),
    wrap("nohup"),
    wrap("setsid").flags(&["ctty", "fork", "wait"]),
    wrap("timeout")
        .short("sk")
        .long(&["signal", "kill-after"])
        .flags(&["foreground", "preserve-status", "verbose"])
        .operands(1),
    wrap("stdbuf").short("ioe").long(&["input", "output", "error"]),
    wrap("ionice").short("cn").long(&["class", "classdata"]).flags(&["pid", "pgid", "uid", "ignore"]),
    wrap("chrt")
        .short("TPD")
        .long(&["sched-runtime", "sched-period", "sched-deadline"])
        .flags(&[
            "all-tasks",
            "batch",
            "deadline",
            "fifo",
            "idle",
            "other",
            "rr",
            "reset-on-fork",
            "max",
            "pid",
            "verbose",
        ])
        .operands(1),
    wrap("taskset").flags(&["all-tasks", "pid", "cpu-list"]).operands(1),
    wrap("flock")
        .short("wEc")
        .long(&["timeout", "wait", "conflict-exit-code", "command"])
        .flags(&["shared", "exclusive", "unlock", "nonblock", "nb", "close", "no-fork", "verbose"])
        .operands(1)
        .script('c', "command"),
    wrap("xargs")
        .short("adEILnPs")
        .long(&["arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"])
        .flags(&[
            "null",
            "no-run-if-empty",
            "verbose",
            "interactive",
            "exit",
            "open-tty",
            "show-limits",
            "eof",
            "replace",
            "max-lines",
        ]),
    wrap("busybox"),
    wrap("unbuffer"),
    wrap("nsenter")
        .short("tSG")
        .long(&["target", "setuid", "setgid"])
        .flags(&["mount", "uts", "ipc", "net", "pid", "cgroup", "user", "time", "root", "wd", "all", "no-fork"]),
    wrap("unshare")
        .short("RwSG")
        .long(&["root", "wd", "setuid", "setgid", "map-user", "map-group", "propagation", "setgroups"])
        .flags(&["mount", "uts", "ipc", "net", "pid", "cgroup", "user", "time", "fork", "mount-proc", "map-root-user"])
        .chdir('w', "wd"),
    wrap("chroot").long(&["userspec", "groups"]).flags(&["skip-chdir"]).operands(1),
    wrap("watch").short("nq").long(&["interval", "equexit"]).flags(&[
        "beep",
        "color",
        "no-color",
        "differences",
        "errexit",
        "chgexit",
        "exec",
        "no-title",
        "precise",
    ]),
    wrap("strace").short("abeEIoOpPsSuUX").long(&["output", "signal", "trace", "status"]),
    wrap("systemd-run")
        .short("pEuMH")
        .long(&[
            "property",
            "setenv",
            "unit",
            "machine",
            "host",
            "description",
            "slice",
            "uid",
            "gid",
            "nice",
            "working-directory",
            "service-type",
            "on-active",
            "on-calendar",
        ])
        .flags(&["user", "system", "scope", "pty", "pipe", "wait", "collect", "quiet", "no-block", "same-dir", "shell"])
        .chdir(' ', "working-directory"),
    wrap("script")
        .short("cEIOBTm")
        .long(&["command", "echo", "log-in", "log-out", "log-io", "log-timing", "logging-format"])
        .flags(&["append", "flush", "force", "quiet", "return"])
        .script('c', "command"),
    wrap("time").short("fo").long(&["format", "output"]).flags(&["append", "portability", "verbose", "quiet"]),
    wrap("exec").short("a"),
    wrap("command"),
    wrap("builtin"),
    wrap("{"),
    wrap("!"),
    wrap("if"),
    wrap("then"),
    wrap("elif"),
    wrap("else"),
    wrap("while"),
    wrap("until"),
    wrap("do"),
];

/// The wrapper called `name`, if it is one.
pub(super) fn wrapper(name: &str) -> Option<&'static Wrapper> {
    WRAPPERS.iter().find(|w| w.name == name)
}

/// What a wrapper runs.
#[derive(Debug, Default)]
pub(super) struct Unwrapped {
    /// The wrapped command's words.
    pub command: Vec<Word>,
    /// Shell command lines carried by options (`flock -c SCRIPT`).
    pub scripts: Vec<String>,
    /// The directory the command runs in (`env -C DIR`), when the wrapper sets one.
    pub chdir: Option<Word>,
}

/// Reads `spec`'s options and operands from `args` (the words after the wrapper's name).
pub(super) fn unwrap(spec: &Wrapper, args: &[Word]) -> Unwrapped {
    let mut out = Unwrapped::default();
    let mut split = Vec::new();
    let mut i = 0;
    while let Some(word) = args.get(i) {
        if word.text == "--" {
            i += 1;
            break;
        }
        if !word.text.starts_with('-') || word.text == "-" {
            break;
        }
        let (option, next) = option_value(spec, args, i);
        i = next;
        let Some((option, value)) = option else { continue };
        if spec.script.is_some_and(|(short, long)| option.is(short, long)) {
            out.scripts.push(value.text);
        } else if spec.split.is_some_and(|(short, long)| option.is(short, long)) {
            split.extend(super::word::split(&value.text).unwrap_or_else(|_| vec![value]));
        } else if spec.chdir.is_some_and(|(short, long)| option.is(short, long)) {
            out.chdir = Some(value);
        }
    }
    i = (i + spec.operands).min(args.len());
    split.extend_from_slice(&args[i..]);
    out.command = split;
    out
}

/// The option at `args[at]` that takes a value, with that value, and the index after both;
/// `None` (and the next index) for a flag or a cluster of flags.
fn option_value(spec: &Wrapper, args: &[Word], at: usize) -> (Option<(OptionName, Word)>, usize) {
    let word = &args[at];
    let value = |name: OptionName, attached: Option<&str>| match attached {
        Some(text) => (Some((name, Word { text: text.to_string(), ..word.clone() })), at + 1),
        None => (args.get(at + 1).cloned().map(|value| (name, value)), at + 2),
    };
    if let Some(long) = word.text.strip_prefix("--") {
        let (name, attached) = long.split_once('=').map_or((long, None), |(name, v)| (name, Some(v)));
        let name = abbreviation(name, &[spec.long, spec.flags]).unwrap_or(name);
        if spec.long.contains(&name) {
            return value(OptionName::Long(name.to_string()), attached);
        }
        return (None, at + 1);
    }
    let cluster: Vec<char> = word.text.chars().skip(1).collect();
    match cluster.iter().position(|ch| spec.short.contains(*ch)) {
        Some(k) => {
            let rest: String = cluster[k + 1..].iter().collect();
            value(OptionName::Short(cluster[k]), (!rest.is_empty()).then_some(rest.as_str()))
        }
        None => (None, at + 1),
    }
}

enum OptionName {
    Short(char),
    Long(String),
}

impl OptionName {
    fn is(&self, short: char, long: &str) -> bool {
        match self {
            OptionName::Short(ch) => *ch == short,
            OptionName::Long(name) => name == long,
        }
    }
}

/// The long option `prefix` abbreviates among `tables`: an exact name, the only name it starts,
/// or the shortest of names that all extend that shortest one.
fn abbreviation<'t>(prefix: &str, tables: &[&'t [&'t str]]) -> Option<&'t str> {
    if prefix.is_empty() {
        return None;
    }
    let mut candidates = tables.iter().flat_map(|t| t.iter().copied()).filter(|name| name.starts_with(prefix));
    let first = candidates.next()?;
    let mut shortest = first;
    let mut all: Vec<&str> = vec![first];
    for name in candidates {
        if name == prefix {
            return Some(name);
        }
        all.push(name);
        if name.len() < shortest.len() {
            shortest = name;
        }
    }
    if first == prefix || all.len() == 1 {
        return Some(first);
    }
    let family = all.iter().all(|name| name == &shortest || name.starts_with(&format!("{shortest}-")));
    family.then_some(shortest)
}

/// The long options the rules look at, per program (and per git subcommand, as `git push`).
const LONG: &[(&str, &[&str])] = &[
    (
        "rm",
        &[
            "recursive",
            "force",
            "dir",
            "interactive",
            "one-file-system",
            "no-preserve-root",
            "preserve-root",
            "verbose",
        ],
    ),
    (
        "chmod",
        &["recursive", "changes", "silent", "quiet", "verbose", "reference", "preserve-root", "no-preserve-root"],
    ),
    (
        "chown",
        &[
            "recursive",
            "changes",
            "dereference",
            "no-dereference",
            "from",
            "quiet",
            "silent",
            "reference",
            "verbose",
            "preserve-root",
            "no-preserve-root",
        ],
    ),
    ("chgrp", &["recursive", "changes", "dereference", "no-dereference", "quiet", "silent", "reference", "verbose"]),
    (
        "cp",
        &[
            "target-directory",
            "no-target-directory",
            "recursive",
            "force",
            "archive",
            "backup",
            "link",
            "symbolic-link",
            "parents",
            "preserve",
            "update",
            "verbose",
        ],
    ),
    (
        "mv",
        &[
            "target-directory",
            "no-target-directory",
            "force",
            "interactive",
            "no-clobber",
            "backup",
            "update",
            "verbose",
        ],
    ),
    ("install", &["target-directory", "no-target-directory", "directory", "mode", "owner", "group", "verbose"]),
    ("ln", &["target-directory", "no-target-directory", "symbolic", "force", "relative", "verbose"]),
    ("sed", &["in-place", "expression", "file", "quiet", "silent", "regexp-extended", "null-data", "separate"]),
    ("tee", &["append", "ignore-interrupts", "output-error"]),
    ("pkill", &["signal", "full", "exact", "newest", "oldest", "parent", "session", "uid", "euid"]),
    ("kill", &["signal", "list", "table"]),
    ("shred", &["remove", "zero", "force", "iterations", "size", "exact", "verbose"]),
    ("truncate", &["size", "no-create", "io-blocks", "reference"]),
    ("rsync", &["delete", "delete-before", "delete-during", "delete-delay", "delete-after", "delete-excluded", "del"]),
    ("curl", &["output", "output-dir", "upload-file", "data", "data-binary", "form", "config"]),
    ("wget", &["output-document", "directory-prefix", "post-file", "body-file"]),
    ("docker", &["host", "context"]),
    ("podman", &["url", "remote", "connection"]),
    (
        "git",
        &[
            "git-dir",
            "work-tree",
            "namespace",
            "exec-path",
            "config-env",
            "paginate",
            "no-pager",
            "bare",
            "literal-pathspecs",
            "no-replace-objects",
        ],
    ),
    (
        "git push",
        &[
            "force",
            "force-with-lease",
            "force-if-includes",
            "mirror",
            "delete",
            "prune",
            "all",
            "branches",
            "tags",
            "follow-tags",
            "dry-run",
            "porcelain",
            "verbose",
            "quiet",
            "progress",
            "set-upstream",
            "push-option",
            "receive-pack",
            "repo",
            "thin",
            "signed",
            "atomic",
            "no-verify",
            "verify",
            "recurse-submodules",
        ],
    ),
    (
        "git reset",
        &["hard", "soft", "mixed", "merge", "keep", "quiet", "patch", "recurse-submodules", "pathspec-from-file"],
    ),
    ("git clean", &["force", "dry-run", "quiet", "exclude", "interactive"]),
    ("git reflog", &["expire", "expire-unreachable", "all", "rewrite", "updateref", "stale-fix", "dry-run", "verbose"]),
    ("git gc", &["prune", "no-prune", "aggressive", "auto", "quiet", "force", "keep-largest-pack", "cruft"]),
    ("git prune", &["expire", "dry-run", "verbose", "progress"]),
    (
        "git config",
        &[
            "global",
            "system",
            "local",
            "worktree",
            "file",
            "get",
            "get-all",
            "get-regexp",
            "list",
            "unset",
            "unset-all",
        ],
    ),
];

/// `args` of `name` with abbreviated long options written out (see the module doc).
pub(super) fn expand(name: &str, args: &[Word]) -> Vec<Word> {
    let table = |key: &str| LONG.iter().find(|(k, _)| *k == key).map(|(_, t)| *t);
    let mut out: Vec<Word> = Vec::with_capacity(args.len());
    let mut options = table(name);
    let mut git_sub: Option<&str> = None;
    let mut ended = false;
    for word in args {
        let mut word = word.clone();
        if !ended && word.text == "--" {
            ended = true;
        } else if !ended && word.text.starts_with("--") && !word.dynamic {
            if let Some(options) = options {
                let (prefix, value) = match word.text[2..].split_once('=') {
                    Some((p, v)) => (p.to_string(), Some(v.to_string())),
                    None => (word.text[2..].to_string(), None),
                };
                if let Some(full) = abbreviation(&prefix, &[options]) {
                    word.text = match value {
                        Some(v) => format!("--{full}={v}"),
                        None => format!("--{full}"),
                    };
                }
            }
        } else if name == "git" && git_sub.is_none() && !word.text.starts_with('-') && !global_value(&out) {
            git_sub = Some(match word.text.as_str() {
                "push" => "git push",
                "reset" => "git reset",
                "clean" => "git clean",
                "reflog" => "git reflog",
                "gc" => "git gc",
                "prune" => "git prune",
                "config" => "git config",
                _ => "",
            });
            options = git_sub.and_then(table);
        }
        out.push(word);
    }
    out
}

/// Whether the last of `before` is a git global option whose value is the next word.
fn global_value(before: &[Word]) -> bool {
    before.last().is_some_and(|w| {
        matches!(w.text.as_str(), "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" | "--config-env")
    })
}

/// Where git's subcommand is in `args` (its words after `git`): after the global options.
pub(super) fn git_subcommand(args: &[Word]) -> Option<usize> {
    (0..args.len()).find(|&i| !args[i].text.starts_with('-') && !global_value(&args[..i]))
}

/// `name`'s operands: its words that are not options (all of them after `--`).
pub(super) fn operands(args: &[Word]) -> impl Iterator<Item = &Word> {
    let end = args.iter().position(|w| w.text == "--");
    args.iter()
        .enumerate()
        .filter(move |&(i, w)| match end {
            Some(end) if i > end => true,
            Some(end) if i == end => false,
            _ => !(w.text.starts_with('-') && w.text.len() > 1),
        })
        .map(|(_, w)| w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<Word> {
        super::super::word::split(text).expect("splits")
    }

    fn unwrapped(line: &str) -> (String, Vec<String>) {
        let all = words(line);
        let spec = wrapper(&all[0].text).expect("a wrapper");
        let out = unwrap(spec, &all[1..]);
        let command: Vec<String> = out.command.into_iter().map(|w| w.text).collect();
        (command.join(" "), out.scripts)
    }

    #[test]
    fn wrappers_skip_their_options_and_operands() {
        for line in [
            "flock -w 5 /tmp/l rm -rf x",
            "flock --wait=5 /tmp/l rm -rf x",
            "timeout -s KILL 5 rm -rf x",
            "timeout --sig KILL 5 rm -rf x",
            "timeout -sKILL -k 2 5 rm -rf x",
            "ionice -c 3 rm -rf x",
            "ionice -c3 -n7 rm -rf x",
            "stdbuf -oL -e 0 rm -rf x",
            "nice -n 19 rm -rf x",
            "nice --adj=5 rm -rf x",
            "sudo -u root -- rm -rf x",
            "sudo -Eu root rm -rf x",
            "chrt -f 10 rm -rf x",
            "taskset -c 0,1 rm -rf x",
            "setsid -f rm -rf x",
            "xargs -0 -n1 -I{} rm -rf x",
            "env -u HOME -C /tmp rm -rf x",
            "env -S 'rm -rf' x",
            "env --split-string='rm -rf' x",
            "nsenter -t 1 -m rm -rf x",
            "busybox rm -rf x",
            "exec -a name rm -rf x",
            "time -p rm -rf x",
            "unbuffer rm -rf x",
            "chroot / rm -rf x",
        ] {
            assert_eq!(unwrapped(line), ("rm -rf x".to_string(), vec![]), "{line}");
        }
        let all = words("env --chdir=/ -C /etc ls");
        let chdir = unwrap(wrapper("env").expect("env"), &all[1..]).chdir.map(|w| w.text);
        assert_eq!(chdir.as_deref(), Some("/etc"));
        assert_eq!(unwrapped("flock -c 'rm -rf /' /tmp/l"), (String::new(), vec!["rm -rf /".to_string()]));
        assert_eq!(
            unwrapped("script -q -c 'rm -rf x' /dev/null"),
            ("/dev/null".to_string(), vec!["rm -rf x".to_string()])
        );
    }

    #[test]
    fn long_options_are_written_out() {
        let expanded = |name: &str, line: &str| -> String {
            expand(name, &words(line)).into_iter().map(|w| w.text).collect::<Vec<_>>().join(" ")
        };
        assert_eq!(expanded("rm", "--r --rec --recursive x"), "--recursive --recursive --recursive x");
        assert_eq!(expanded("rm", "-- --r"), "-- --r");
        assert_eq!(expanded("chown", "--rec --re=x root"), "--recursive --re=x root");
        assert_eq!(expanded("git", "push --forc --mir --del origin"), "push --force --mirror --delete origin");
        assert_eq!(expanded("git", "push --force-w=main"), "push --force-with-lease=main");
        assert_eq!(expanded("git", "-C repo push --mir"), "-C repo push --mirror");
        assert_eq!(expanded("git", "commit --mir"), "commit --mir");
        assert_eq!(expanded("git", "reset --ha"), "reset --hard");
        assert_eq!(expanded("sed", "--in s/a/b/ f"), "--in-place s/a/b/ f");
    }
}
