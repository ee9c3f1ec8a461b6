//! The pattern table: rows of regexes matched against a command's text, as data.
//!
//! Each [`Row`] names a family (`key`, shared by the rows of one family and used for session and
//! "always" approvals), a reason shown to the user, the text it is matched against ([`On`]) and
//! its regexes: every one in `all` must match and `unless` must not. [`RULES`] compiles them once.
//! What needs paths or word-level facts (deleting `/`, protected places, run-time values) is found
//! in code instead, before these rows run: see `Scan::deletes`, `Scan::files` and
//! `program::dynamic_matters`.

use std::sync::LazyLock;

use regex::Regex;

use super::Verdict;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Dangerous,
    Forbidden,
}

/// Which text of a simple command a pattern row is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum On {
    /// `name args`: wrappers looked through (and each wrapper with what follows it), the command
    /// word's directory dropped, long options written out, absolute and home paths normalised,
    /// words unquoted and joined by single spaces. Not used for `echo`/`printf`, whose words are
    /// data.
    Command,
    /// Like `Command`, followed by ` <<< input` when the command reads a pipe, here-doc or
    /// here-string (`input` is the text when known: an `echo`'s words, the here-doc's body).
    Input,
    /// Each target of an output redirection (`>`, `>>`, `>|`, `&>`, `2>`), normalised.
    Write,
    /// Each `NAME=value` assignment in front of the command word or given to `export`.
    Env,
}

/// One pattern, as data: every regex in `all` must match and `unless` must not.
pub(super) struct Row {
    level: Level,
    pub key: &'static str,
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

pub(super) const ROOT_WIPE: &str = "deletes the whole root filesystem";
pub(super) const DISK_WRITE: &str = "writes raw data to a disk device";
pub(super) const FORK_BOMB: &str = "fork bomb: a function that runs itself in the background or pipes into itself, or an endless loop that starts processes in the background";
const FORK_BOMB_CODE: &str = "fork bomb: interpreter code that forks in a loop";
const KILLS: &str = "kills processes wholesale";
const REMOTE: &str = "talks to a container daemon on another host";
const GIT_DISCARD: &str = "throws away unreachable commits or stashes for good";
const GIT_CONFIG_EXEC: &str = "sets a git option that runs a program (hooks path, fsmonitor, ssh command, pager, editor, alias, filter, credential helper)";
const RECURSIVE: &str = r" (-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)( |$)";
/// Whole-disk device names; rows spell it `{DISK}`.
const DISK: &str = r"/dev/((sd|hd|vd|xvd)[a-z]|nvme\d|mmcblk\d|r?disk)";
/// `git` and its global options up to the subcommand; rows spell it `{GIT}`.
const GIT: &str = r"^git( (-[Cc] \S+|--(git-dir|work-tree|namespace|exec-path|config-env) \S+|-\S+))*";
/// git configuration keys whose value is a program git runs; rows spell it `{GIT_EXEC}`.
const GIT_EXEC: &str = concat!(
    r"(?i:(core\.(hookspath|fsmonitor|sshcommand|pager|editor|askpass|gitproxy)|sequence\.editor|gpg\.(\S+\.)?program",
    r"|alias\.|filter\.|credential\.|includeif\.|include\.|diff\.\S+\.(textconv|command)|merge\.\S+\.driver",
    r"|uploadpack\.packobjectshook|remote\.\S+\.(uploadpack|receivepack)|ssh\.variant|protocol\.ext))"
);
/// A database client named in the command itself (not in its input).
const SQL_CLIENT: &str =
    r"^([^<]* )?(psql|mysql|mariadb|sqlite3?|sqlcmd|duckdb|clickhouse-client|pgcli|mycli|litecli|cockroach)( |$)";

/// The built-in patterns. Keys are shared by the rows of one family; the first match is reported.
pub(super) const ROWS: &[Row] = &[
    forbid("disk-write", DISK_WRITE, On::Write).all(&[r"^{DISK}"]),
    forbid("disk-write", DISK_WRITE, On::Command).all(&[r"^dd ", r" of={DISK}"]),
    forbid("disk-write", DISK_WRITE, On::Command)
        .all(&[r"^(mkfs(\.\w+)?|mke2fs|mkswap|wipefs|shred|blkdiscard) ", r" /dev/"]),
    forbid("disk-write", DISK_WRITE, On::Command).all(&[r"^(tee|cp|install|pv) ", r" {DISK}\S*$"]),
    forbid("fork-bomb", FORK_BOMB_CODE, On::Command).all(&[
        r"^(python[\d.]*|pypy[\d.]*|perl|ruby|node|nodejs|deno|bun|php) ",
        r"\bfork\b",
        r"\b(while|for|loop|until)\b",
    ]),
    danger("kill-self", "would kill talaria itself", On::Command)
        .all(&[r"^(kill|pkill|killall) ", r"talaria|\$\{?PPID\b"]),
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
    danger("crontab", "replaces or removes your scheduled jobs", On::Command)
        .all(&[r"^crontab( |$)"])
        .unless(r" -l( |$)"),
    danger("crontab", "schedules commands to run later, unattended", On::Command).all(&[r"^(at|batch)( |$)"]),
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
        r"|^(g|m|n)?awk .*(\bsystem *\(|\| *\x22|\|&)",
        r"|^(vim?|nvim|ex|view)( \S+)* (-c|--cmd)( |$)",
        r"|^emacs( \S+)* (--eval|-eval|--execute)[ =]",
    )]),
    danger("docker-remote", REMOTE, On::Command)
        .all(&[r"^(docker|podman|docker-compose) ", r" (-H|--host|--url|--remote)( |=|$)"])
        .unless(r" (-H|--host)[ =]unix://"),
    danger("docker-remote", REMOTE, On::Env).all(&[r"^(DOCKER|CONTAINER)_HOST=(tcp|ssh|https?)://"]),
    danger("git-force-push", "force-push overwrites remote history", On::Command).all(&[
        r"{GIT} push( |$)",
        r" (-[a-zA-Z]*f[a-zA-Z]*|--force|--force-with-lease|--force-if-includes|\+\S+)(=\S*)?( |$)",
    ]),
    danger("git-push-destructive", "push that deletes or replaces remote branches", On::Command)
        .all(&[r"{GIT} push( |$)", r" (--mirror|--delete|--prune|-[a-zA-Z]*d[a-zA-Z]*|\+?:\S+)( |$)"]),
    danger("git-reset-hard", "git reset --hard discards uncommitted work", On::Command)
        .all(&[r"{GIT} reset( |$)", r" --hard( |$)"]),
    danger("git-clean", "git clean -f deletes untracked files", On::Command)
        .all(&[r"{GIT} clean( |$)", r" (-[a-zA-Z]*f[a-zA-Z]*|--force)( |$)"]),
    danger("git-rewrite", "rewrites the repository's history", On::Command)
        .all(&[r"{GIT} (filter-branch|filter-repo)( |$)"]),
    danger("git-discard", GIT_DISCARD, On::Command)
        .all(&[r"{GIT} reflog expire( |$)", r" --expire(-unreachable)?=(now|all|0)"]),
    danger("git-discard", GIT_DISCARD, On::Command).all(&[r"{GIT} (gc|prune)( |$)", r" --(prune|expire)=(now|all)"]),
    danger("git-discard", GIT_DISCARD, On::Command).all(&[r"{GIT} stash clear( |$)"]),
    danger("git-config-exec", GIT_CONFIG_EXEC, On::Command)
        .all(&[r"{GIT} config( |$)", r" {GIT_EXEC}"])
        .unless(r" (--get\S*|-l|--list|get|list)( |$)"),
    danger("git-config-exec", GIT_CONFIG_EXEC, On::Command).all(&[r"^git ", r" (-c|--config-env)[ =]?{GIT_EXEC}"]),
];

pub(super) struct Rule {
    level: Level,
    key: &'static str,
    reason: &'static str,
    pub on: On,
    all: Vec<Regex>,
    unless: Option<Regex>,
}

impl Rule {
    pub fn hit(&self, text: &str) -> bool {
        self.all.iter().all(|re| re.is_match(text)) && !self.unless.as_ref().is_some_and(|re| re.is_match(text))
    }

    pub fn verdict(&self) -> Verdict {
        match self.level {
            Level::Dangerous => Verdict::Dangerous { key: self.key, reason: self.reason },
            Level::Forbidden => Verdict::Forbidden { reason: self.reason.to_string() },
        }
    }
}

/// Compiles a built-in pattern, expanding `{DISK}`, `{GIT}` and `{GIT_EXEC}` (not valid regex on
/// their own).
fn compile(re: &str) -> Regex {
    let re = re.replace("{DISK}", DISK).replace("{GIT_EXEC}", GIT_EXEC).replace("{GIT}", GIT);
    Regex::new(&re).unwrap_or_else(|e| panic!("built-in pattern {re:?} is invalid: {e}"))
}

pub(super) static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    ROWS.iter()
        .map(|r| Rule {
            level: r.level,
            key: r.key,
            reason: r.reason,
            on: r.on,
            all: r.all.iter().map(|re| compile(re)).collect(),
            unless: r.unless.map(compile),
        })
        .collect()
});
