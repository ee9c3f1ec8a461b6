//! Path spellings, normalised before anything is compared with a protected location.
//!
//! [`PathName::parse`] resolves a word the way the kernel would see it, lexically: `//` and `/./`
//! collapse, `..` is taken back (`/tmp/../etc` is `/etc`), a relative path joins the working
//! directory the command line `cd`-ed to, `/proc/PID/root/` is dropped, and every spelling of a
//! home directory becomes a [`Base::Home`]: `~`, `~user`, `/root`, `/home/user`, `/Users/user`
//! (`$HOME` and `$TALARIA_HOME` were already turned into `~` and `~/.talaria` by the word
//! splitter). talaria's configured home becomes `~/.talaria`, the spelling the checks know.
//!
//! Globs stay in the parts; the checks compare a globbed part with a name the way the shell would
//! match it (`~/.ss?` is `~/.ssh`).

use globset::GlobBuilder;

/// Where a path starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Base {
    /// `/`.
    Root,
    /// A home directory: the user's own (`None`) or a named one (`Some("bob")`, `Some("*")`).
    Home(Option<String>),
    /// The workspace the command starts in.
    Here,
    /// A directory not known before the command runs (after `cd "$DIR"` or `cd -`).
    Unknown,
}

/// A normalised path: a base and the names under it (no `.`; `..` only at the start of a path
/// under [`Base::Here`] or [`Base::Unknown`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PathName {
    pub base: Base,
    pub parts: Vec<String>,
    /// Some part holds an unquoted glob.
    pub glob: bool,
}

/// A place that commands may not write (or read) without approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// `/etc`.
    Etc,
    /// Any home's `.ssh`.
    Ssh,
    /// talaria's home, `~/.talaria` or the configured one.
    Talaria,
    /// `.git/config`, `.git/hooks/` or a `.git` directory itself.
    Git,
    /// A project's `.talaria/` directory.
    Project,
    /// A file a shell or desktop session runs by itself: `~/.bashrc`, `~/.profile`, autostart.
    Startup,
}

/// Files in a home that a login, a shell or a desktop session runs by themselves.
const STARTUP_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".xprofile",
    ".xinitrc",
    ".pam_environment",
];
/// Directories under a home's `.config` whose files run by themselves.
const STARTUP_CONFIG: &[&str] = &["autostart", "systemd", "fish", "environment.d"];

impl PathName {
    /// The workspace itself.
    pub fn here() -> PathName {
        PathName { base: Base::Here, parts: Vec::new(), glob: false }
    }

    /// A directory not known statically.
    pub fn unknown() -> PathName {
        PathName { base: Base::Unknown, parts: Vec::new(), glob: false }
    }

    /// `text` normalised, relative to `cwd`; `talaria` is the configured home, already parsed.
    pub fn parse(text: &str, glob: bool, cwd: &PathName, talaria: Option<&PathName>) -> PathName {
        let (mut path, rest) = if let Some(tilde) = text.strip_prefix('~') {
            let (user, rest) = tilde.split_once('/').unwrap_or((tilde, ""));
            let base = match user {
                "" => PathName { base: Base::Home(None), parts: Vec::new(), glob },
                "+" => cwd.clone(),
                "-" => PathName::unknown(),
                user => PathName { base: Base::Home(Some(user.to_string())), parts: Vec::new(), glob },
            };
            (base, rest)
        } else if text.starts_with('/') {
            (PathName { base: Base::Root, parts: Vec::new(), glob }, text)
        } else {
            (cwd.clone(), text)
        };
        path.glob |= glob;
        for part in rest.split('/') {
            match part {
                "" | "." => {}
                ".." => path.up(),
                name => path.parts.push(name.to_string()),
            }
        }
        path.name_homes();
        if let Some(home) = talaria.filter(|home| home.base == path.base && path.parts.starts_with(&home.parts)) {
            let mut parts = vec![".talaria".to_string()];
            parts.extend_from_slice(&path.parts[home.parts.len()..]);
            path = PathName { base: Base::Home(None), parts, glob: path.glob };
        }
        path
    }

    /// `..`: lexically, as the shell's `cd` does.
    fn up(&mut self) {
        if self.parts.last().is_some_and(|last| last != "..") {
            self.parts.pop();
            return;
        }
        match self.base {
            Base::Root => {}
            Base::Home(_) => *self = PathName { base: Base::Root, parts: vec!["home".into()], glob: self.glob },
            Base::Here | Base::Unknown => self.parts.push("..".into()),
        }
    }

    /// `/root`, `/home/USER`, `/Users/USER` are homes; `/proc/PID/root/x` is `/x`.
    fn name_homes(&mut self) {
        while self.base == Base::Root {
            let (base, skip) = match self.parts.as_slice() {
                [first, ..] if first == "root" => (Base::Home(Some("root".into())), 1),
                [first, user, ..] if first == "home" || first == "Users" => (Base::Home(Some(user.clone())), 2),
                [first, _, root, ..] if first == "proc" && root == "root" => (Base::Root, 3),
                _ => return,
            };
            self.base = base;
            self.parts.drain(..skip);
        }
    }

    /// The path as text: `/etc/x`, `~/x`, `~bob`, `src/x`, `.`, or `?/x` when the base is unknown.
    pub fn render(&self) -> String {
        let head = match &self.base {
            Base::Root => String::new(),
            Base::Home(None) => "~".into(),
            Base::Home(Some(user)) => format!("~{user}"),
            Base::Here if self.parts.is_empty() => return ".".into(),
            Base::Here => return self.parts.join("/"),
            Base::Unknown => "?".into(),
        };
        if self.parts.is_empty() && self.base == Base::Root {
            return "/".into();
        }
        let mut text = head;
        for part in &self.parts {
            text.push('/');
            text.push_str(part);
        }
        text
    }

    /// Whether part `at` is, or as a glob matches, `name`.
    fn part_is(&self, at: usize, name: &str) -> bool {
        let Some(part) = self.parts.get(at) else { return false };
        if part == name {
            return true;
        }
        self.glob
            && part.contains(['*', '?', '['])
            && GlobBuilder::new(part).literal_separator(true).build().is_ok_and(|g| g.compile_matcher().is_match(name))
    }

    /// Whether the only part is a glob that takes most names in a directory (`*`, `.*`, `?*`,
    /// `[a-z]*`): it matches several of a sample of common ones.
    fn sweeping(&self) -> bool {
        const SAMPLE: &[&str] = &["bin", "etc", "usr", "home", "var", "src", "target", "Documents", ".ssh", ".config"];
        let [part] = self.parts.as_slice() else { return false };
        if !self.glob || !part.contains(['*', '?', '[']) {
            return false;
        }
        let Ok(glob) = GlobBuilder::new(part).literal_separator(true).build() else { return false };
        let matcher = glob.compile_matcher();
        SAMPLE.iter().filter(|name| matcher.is_match(name)).count() >= 2
    }

    /// What a recursive delete of this path takes.
    pub fn reach(&self) -> Reach {
        let only_sweep = self.parts.is_empty() || self.sweeping();
        match &self.base {
            Base::Root if only_sweep => Reach::Root,
            Base::Root if self.parts.len() == 1 && (self.part_is(0, "home") || self.part_is(0, "Users")) => Reach::Home,
            Base::Home(_) if only_sweep => Reach::Home,
            Base::Here if self.sweeping() => Reach::Here,
            Base::Unknown if self.parts.is_empty() || self.glob => Reach::UnknownDir,
            Base::Root | Base::Home(_) | Base::Here | Base::Unknown => Reach::Other,
        }
    }

    /// The protected place this path is in, if any.
    pub fn place(&self) -> Option<Place> {
        let home = matches!(self.base, Base::Home(_));
        if self.base == Base::Root && self.part_is(0, "etc") {
            return Some(Place::Etc);
        }
        if home && self.part_is(0, ".ssh") {
            return Some(Place::Ssh);
        }
        if home && self.part_is(0, ".talaria") {
            return Some(Place::Talaria);
        }
        let startup = STARTUP_FILES.iter().any(|file| self.part_is(0, file))
            || (self.part_is(0, ".config") && STARTUP_CONFIG.iter().any(|dir| self.part_is(1, dir)));
        if home && startup {
            return Some(Place::Startup);
        }
        let git = (0..self.parts.len()).any(|at| {
            self.part_is(at, ".git")
                && (at + 1 == self.parts.len()
                    || self.part_is(at + 1, "hooks")
                    || (at + 2 == self.parts.len() && self.part_is(at + 1, "config")))
        });
        if git {
            return Some(Place::Git);
        }
        (0..self.parts.len()).any(|at| self.part_is(at, ".talaria")).then_some(Place::Project)
    }

    /// talaria's secrets (`~/.talaria/.env`) or a process's environment (`/proc/*/environ`).
    pub fn is_secret(&self) -> bool {
        let talaria_env = matches!(self.base, Base::Home(_))
            && self.parts.len() == 2
            && self.part_is(0, ".talaria")
            && self.part_is(1, ".env");
        let environ = self.base == Base::Root
            && self.part_is(0, "proc")
            && self.parts.len() >= 3
            && self.part_is(self.parts.len() - 1, "environ");
        talaria_env || environ
    }

    /// talaria's home directory itself (which holds the secrets).
    pub fn is_talaria_home(&self) -> bool {
        matches!(self.base, Base::Home(_)) && self.parts.len() == 1 && self.part_is(0, ".talaria")
    }
}

/// What a recursive delete of a path takes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reach {
    /// The whole filesystem: `/`, `/*`.
    Root,
    /// A home directory or all of them: `~`, `~/*`, `/home/bob`, `/home`.
    Home,
    /// Everything in the workspace: `*`.
    Here,
    /// Everything in a directory not known statically (`.` or a glob after `cd "$DIR"`).
    UnknownDir,
    /// Something narrower.
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> PathName {
        let glob = text.contains(['*', '?']);
        PathName::parse(text, glob, &PathName::here(), None)
    }

    #[test]
    fn spellings_normalise() {
        for (text, rendered) in [
            ("//etc/x", "/etc/x"),
            ("/./etc//x/", "/etc/x"),
            ("/tmp/../etc/x", "/etc/x"),
            ("/../../etc", "/etc"),
            ("/root/.ssh/k", "~root/.ssh/k"),
            ("/home/bob/.ssh", "~bob/.ssh"),
            ("/Users/bob", "~bob"),
            ("~bob/x", "~bob/x"),
            ("~/a/../b", "~/b"),
            ("~/..", "/home"),
            ("/proc/self/root/etc/passwd", "/etc/passwd"),
            ("a/./b/../c", "a/c"),
            ("../x", "../x"),
            ("./", "."),
        ] {
            assert_eq!(parse(text).render(), rendered, "{text}");
        }
        let tal = parse("/srv/tal");
        let env = PathName::parse("/srv//tal/.env", false, &PathName::here(), Some(&tal));
        assert_eq!(env.render(), "~/.talaria/.env");
        let cwd = parse("/etc");
        assert_eq!(PathName::parse("../etc/./hosts", false, &cwd, None).render(), "/etc/hosts");
        assert_eq!(PathName::parse("x", false, &PathName::unknown(), None).render(), "?/x");
    }

    #[test]
    fn places_and_reach() {
        assert_eq!(parse("/etc/hosts").place(), Some(Place::Etc));
        assert_eq!(parse("/e?c/hosts").place(), Some(Place::Etc));
        assert_eq!(parse("~root/.ssh/authorized_keys").place(), Some(Place::Ssh));
        assert_eq!(parse("~/.ss*/config").place(), Some(Place::Ssh));
        assert_eq!(parse("~/.talaria/grants.toml").place(), Some(Place::Talaria));
        assert_eq!(parse(".git/config").place(), Some(Place::Git));
        assert_eq!(parse("sub/.git/hooks/pre-commit").place(), Some(Place::Git));
        assert_eq!(parse(".git/configx").place(), None);
        assert_eq!(parse(".talaria/plugins/x").place(), Some(Place::Project));
        assert_eq!(parse("/tmp/x").place(), None);
        assert_eq!(parse("~/.bashrc").place(), Some(Place::Startup));
        assert_eq!(parse("/home/bob/.config/autostart/x.desktop").place(), Some(Place::Startup));
        assert_eq!(parse("~/.config/nvim/init.lua").place(), None);
        assert!(parse("~/.talaria/.e*").is_secret());
        assert!(parse("/proc/1/environ").is_secret());
        assert!(parse("/proc/self/task/1/environ").is_secret());
        assert!(!parse("~/.talaria/config.toml").is_secret());
        for (text, reach) in [
            ("/", Reach::Root),
            ("/*", Reach::Root),
            ("/.*", Reach::Root),
            ("/[a-z]*", Reach::Root),
            ("/b*", Reach::Other),
            ("~", Reach::Home),
            ("~/*", Reach::Home),
            ("/home", Reach::Home),
            ("/home/*", Reach::Home),
            ("*", Reach::Here),
            ("/tmp", Reach::Other),
            ("build*", Reach::Other),
            (".", Reach::Other),
        ] {
            assert_eq!(parse(text).reach(), reach, "{text}");
        }
    }
}
