//! What a confined command may see and change, and the mounts that make it so.
//!
//! A [`Policy`] names the places: the workspace (readable and writable), extra places readable
//! or writable (toolchains, granted directories), places never visible (talaria's homes), the
//! user's home directory, and the limits. [`Policy::plan`] turns it into an ordered list of
//! [`Mount`]s over an empty root:
//! 1. the system read-only: `/usr`, `/bin`, `/sbin`, `/lib*`, `/etc`, `/opt` (and the merged-`/usr`
//!    links as links), with the few files of `/etc` that hold secrets (`shadow`, host keys)
//!    masked;
//! 2. a fresh `/dev`, `/proc`, and a private `/tmp` of bounded size;
//! 3. the user's home as an empty, read-only directory, with the read places inside it bound
//!    read-only (`~/.cargo`, `~/.rustup`, ...) and `~/.gitconfig` readable so commits carry the
//!    user's name;
//! 4. the read and write places, then the workspace, read-write;
//! 5. inside what is writable, the parts that would let a command act later, outside the
//!    sandbox, read-only: a repository's `.git/config` and `.git/hooks` (of the workspace's own
//!    repository, also when the workspace is a directory inside it, or a worktree), `.talaria/`,
//!    and, when the home directory itself is visible, the shell's startup files, `~/.local/bin`,
//!    `~/.config/autostart` and the like;
//! 6. last, every hidden place that lies inside something visible is covered by an empty one:
//!    talaria's homes (every profile's) even when the workspace is the home directory or
//!    contains them, and the user's credentials (`~/.ssh`, `~/.aws`, `~/.cargo/credentials.toml`,
//!    ...) wherever they would show.
//!
//! Only existing places are mounted; a place that does not exist yet is not created. So a
//! repository started inside the sandbox is protected from the next sandbox on, not during the
//! command that made it (see [`Policy::protected_now`], which a pool compares to restart a
//! sandbox when this changes).

use std::path::{Path, PathBuf};

/// Where commands may go, and their limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Readable and writable (but see the protected parts). Absolute.
    pub workspace: PathBuf,
    /// Also readable, read-only. Missing ones are skipped.
    pub read: Vec<PathBuf>,
    /// Also readable and writable. Missing ones are skipped.
    pub write: Vec<PathBuf>,
    /// Never visible, whatever else is: talaria's homes.
    pub hidden: Vec<PathBuf>,
    /// The user's home directory (`$HOME`): shown empty and read-only unless something visible
    /// contains it.
    pub home: Option<PathBuf>,
    /// Empty writable directories, private to the sandbox and gone with it, at these places
    /// inside the (empty) home: where a tool insists on writing a cache (a plugin build's wizer
    /// writes `~/.cache/wasmtime`). Places elsewhere are ignored.
    pub scratch: Vec<PathBuf>,
    pub limits: Limits,
}

/// Bounds on what a command may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Processes (and threads) of the whole sandbox.
    pub max_processes: u64,
    /// Largest file a command may write, in MiB.
    pub max_file_mb: u64,
    /// Size of the private `/tmp`, in MiB.
    pub tmp_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_processes: 1024, max_file_mb: 4096, tmp_mb: 2048 }
    }
}

/// One step of building the sandbox's file system, in bubblewrap's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    /// `--ro-bind SRC DEST` (same path inside).
    ReadOnly(PathBuf),
    /// `--bind SRC DEST`.
    ReadWrite(PathBuf),
    /// `--symlink TARGET PATH`.
    Link { target: PathBuf, path: PathBuf },
    /// `--dev /dev`.
    Dev,
    /// `--proc /proc`.
    Proc,
    /// `--size BYTES --tmpfs PATH`: an empty, writable directory.
    Tmpfs { path: PathBuf, bytes: u64 },
    /// `--remount-ro PATH`.
    RemountReadOnly(PathBuf),
    /// An empty directory covering a directory: `--tmpfs` then `--remount-ro`.
    HideDir(PathBuf),
    /// `/dev/null` bound read-only over a file.
    HideFile(PathBuf),
}

/// System directories shown read-only when they exist.
const SYSTEM: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"];

/// Files of `/etc` that hold secrets; masked when readable at all.
const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssh/ssh_host_dsa_key",
];

/// Under the home directory: credentials, keys and histories, hidden wherever they would show.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".config",
    ".mozilla",
    ".thunderbird",
    ".password-store",
    ".local/share/keyrings",
    ".pki",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".vault-token",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".node_repl_history",
    ".lesshst",
    ".viminfo",
];

/// Under the home directory: what runs later by itself (a login, a shell, `PATH`, Python's
/// start-up, a desktop session): read-only whenever the home directory is visible.
pub const HOME_STARTUP: &[&str] = &[
    ".profile",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".bash_aliases",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".inputrc",
    ".gitconfig",
    ".xprofile",
    ".xinitrc",
    ".xsessionrc",
    ".pam_environment",
    ".vimrc",
    ".emacs",
    ".emacs.d",
    ".local/bin",
    ".local/lib",
    ".local/share/applications",
    ".cargo/bin",
    ".cargo/config",
    ".cargo/config.toml",
    ".npm-global",
    "bin",
];

/// Inside a repository's git directory: what git runs or obeys.
const GIT_PROTECTED: &[&str] = &["config", "hooks"];

/// Files read from the home directory so that ordinary git works (the user's name for commits).
const HOME_READABLE: &[&str] = &[".gitconfig", ".config/git/config", ".config/git/ignore"];

impl Policy {
    /// Whether the workspace can be a sandbox's: not `/` (the whole machine, writable), and not
    /// inside `/proc`, `/sys` or `/dev` (the machine's processes and devices).
    ///
    /// # Errors
    /// Why not, in words that end a sentence.
    pub fn check(&self) -> Result<(), String> {
        let ws = &self.workspace;
        if ws.parent().is_none() {
            return Err(format!(
                "the workspace {} would give commands the whole machine, writable; start talaria in a project directory",
                ws.display()
            ));
        }
        if ["/proc", "/sys", "/dev"].iter().any(|d| ws.starts_with(d)) {
            return Err(format!(
                "the workspace {} is the kernel's, not a project's; start talaria in a project directory",
                ws.display()
            ));
        }
        Ok(())
    }

    /// The mounts, in order, for bubblewrap.
    pub fn plan(&self) -> Vec<Mount> {
        let mut plan = Vec::new();
        for dir in SYSTEM {
            let path = Path::new(dir);
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(path) {
                        plan.push(Mount::Link { target, path: path.to_path_buf() });
                    }
                }
                Ok(m) if m.is_dir() => plan.push(Mount::ReadOnly(path.to_path_buf())),
                _ => {}
            }
        }
        for file in SYSTEM_SECRETS {
            if Path::new(file).exists() {
                plan.push(Mount::HideFile(PathBuf::from(file)));
            }
        }
        plan.push(Mount::Dev);
        plan.push(Mount::Proc);
        plan.push(Mount::Tmpfs { path: "/tmp".into(), bytes: self.limits.tmp_mb.saturating_mul(1 << 20) });

        let mut visible: Vec<PathBuf> = SYSTEM.iter().map(PathBuf::from).collect();
        let home_shown_empty = self.home.as_ref().filter(|h| !self.covers_visible(h)).cloned();
        if let Some(home) = &home_shown_empty {
            plan.push(Mount::Tmpfs { path: home.clone(), bytes: 1 << 20 });
            for rel in HOME_READABLE {
                let file = home.join(rel);
                if file.is_file() {
                    plan.push(Mount::ReadOnly(file.clone()));
                    visible.push(file);
                }
            }
        }
        for place in existing(&self.read) {
            plan.push(Mount::ReadOnly(place.clone()));
            visible.push(place);
        }
        for place in existing(&self.write) {
            plan.push(Mount::ReadWrite(place.clone()));
            visible.push(place);
        }
        plan.push(Mount::ReadWrite(self.workspace.clone()));
        visible.push(self.workspace.clone());

        // What would act later, outside: read-only inside what is writable.
        let writable: Vec<PathBuf> = std::iter::once(self.workspace.clone()).chain(existing(&self.write)).collect();
        for path in self.protected_now() {
            if writable.iter().any(|w| path.starts_with(w)) {
                plan.push(Mount::ReadOnly(path));
            }
        }
        // A repository's git directory outside the workspace (the workspace is a directory in
        // it): shown so that git works, its config and hooks read-only.
        for git in self.git_dirs() {
            if !visible.iter().any(|v| git.starts_with(v)) {
                plan.push(Mount::ReadWrite(git.clone()));
                for rel in GIT_PROTECTED {
                    let p = git.join(rel);
                    if p.exists() {
                        plan.push(Mount::ReadOnly(p));
                    }
                }
                visible.push(git);
            }
        }
        // Only now: the mounts above may need directories made in the empty home (a repository
        // in the home whose subdirectory is the workspace).
        if let Some(home) = &home_shown_empty {
            for place in self.scratch.iter().filter(|p| p.starts_with(home) && *p != home) {
                if !visible.iter().any(|v| place.starts_with(v) || v.starts_with(place)) {
                    plan.push(Mount::Tmpfs { path: place.clone(), bytes: self.limits.tmp_mb.saturating_mul(1 << 20) });
                }
            }
            plan.push(Mount::RemountReadOnly(home.clone()));
        }

        // A file the workspace shares, as a hard link, with a secret or a start-up file outside.
        plan.extend(self.linked_out(&writable));

        // Hidden last, so nothing mounted above can show them again.
        let mut hidden: Vec<PathBuf> = self.hidden.clone();
        if let Some(home) = &self.home {
            hidden.extend(HOME_SECRETS.iter().map(|rel| home.join(rel)));
        }
        for path in hidden {
            let path = path.canonicalize().unwrap_or(path);
            if !visible.iter().any(|v| path.starts_with(v)) {
                continue;
            }
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => plan.push(Mount::HideDir(path)),
                Ok(_) => plan.push(Mount::HideFile(path)),
                Err(_) => {}
            }
        }
        plan
    }

    /// Whether a visible place (the workspace, a read or write place) contains `path`.
    fn covers_visible(&self, path: &Path) -> bool {
        std::iter::once(&self.workspace).chain(&self.read).chain(&self.write).any(|v| path.starts_with(v))
    }

    /// The existing paths kept read-only inside writable places right now: `.talaria/` and the
    /// git directories' `config` and `hooks` under the workspace, the repository's own when the
    /// workspace is inside one, and the home directory's start-up files when the home directory
    /// is writable. A sandbox started with another set is out of date.
    pub fn protected_now(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let talaria = self.workspace.join(".talaria");
        if talaria.exists() {
            out.push(talaria);
        }
        for git in self.git_dirs() {
            for rel in GIT_PROTECTED {
                let p = git.join(rel);
                if p.exists() {
                    out.push(p);
                }
            }
        }
        if let Some(home) = &self.home
            && std::iter::once(&self.workspace).chain(&self.write).any(|w| home.starts_with(w))
        {
            for rel in HOME_STARTUP {
                let p = home.join(rel);
                if std::fs::symlink_metadata(&p).is_ok() {
                    out.push(p);
                }
            }
        }
        out
    }

    /// The git directories of the workspace's repository: its `.git` (a directory, or the one a
    /// `.git` file points to, and the common directory of a worktree), found from the workspace
    /// up.
    fn git_dirs(&self) -> Vec<PathBuf> {
        let Some(dot_git) = self.workspace.ancestors().map(|d| d.join(".git")).find(|p| p.exists()) else {
            return Vec::new();
        };
        if dot_git.is_dir() {
            return vec![dot_git];
        }
        // `gitdir: PATH` (a worktree or a submodule), relative to the file's directory.
        let Some(dir) = std::fs::read_to_string(&dot_git).ok().and_then(|text| {
            let line = text.lines().next()?.strip_prefix("gitdir:")?.trim().to_string();
            let base = dot_git.parent()?;
            base.join(line).canonicalize().ok()
        }) else {
            return Vec::new();
        };
        let mut dirs = vec![dir.clone()];
        if let Some(common) = std::fs::read_to_string(dir.join("commondir"))
            .ok()
            .and_then(|c| dir.join(c.trim()).canonicalize().ok())
            .filter(|c| c != &dir)
        {
            dirs.push(common);
        }
        dirs
    }
}

impl Policy {
    /// Hard links inside `writable` to the files that must not be read (talaria's homes, the
    /// home's credentials) or changed (its start-up files) from a sandbox: hidden, or made
    /// read-only. Only when one of those files has more than one link is anything walked.
    fn linked_out(&self, writable: &[PathBuf]) -> Vec<Mount> {
        use std::os::unix::fs::MetadataExt as _;
        let mut secret = Vec::new();
        let mut startup = Vec::new();
        let collect = |root: &Path, into: &mut Vec<(u64, u64)>| {
            walk(root, WALK_BUDGET / 8, &mut |_, m| {
                if m.is_file() && m.nlink() > 1 {
                    into.push((m.dev(), m.ino()));
                }
            });
        };
        for home in &self.hidden {
            collect(home, &mut secret);
        }
        if let Some(home) = &self.home {
            for rel in HOME_SECRETS {
                collect(&home.join(rel), &mut secret);
            }
            for rel in HOME_STARTUP {
                collect(&home.join(rel), &mut startup);
            }
        }
        if secret.is_empty() && startup.is_empty() {
            return Vec::new();
        }
        let mut found = Vec::new();
        for place in writable {
            walk(place, WALK_BUDGET, &mut |path, m| {
                if !m.is_file() || m.nlink() < 2 {
                    return;
                }
                let id = (m.dev(), m.ino());
                if secret.contains(&id) {
                    found.push(Mount::HideFile(path.to_path_buf()));
                } else if startup.contains(&id) {
                    found.push(Mount::ReadOnly(path.to_path_buf()));
                }
            });
        }
        found
    }
}

/// Most entries one walk looks at (a huge tree is not walked to its end).
const WALK_BUDGET: usize = 200_000;

/// Visit `root` and everything under it without following links or leaving its file system,
/// up to `budget` entries.
fn walk(root: &Path, budget: usize, visit: &mut impl FnMut(&Path, &std::fs::Metadata)) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(top) = std::fs::symlink_metadata(root) else { return };
    visit(root, &top);
    let mut stack = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > budget {
                return;
            }
            let path = entry.path();
            let Ok(m) = std::fs::symlink_metadata(&path) else { continue };
            visit(&path, &m);
            if m.is_dir() && m.dev() == top.dev() {
                stack.push(path);
            }
        }
    }
}

fn existing(places: &[PathBuf]) -> Vec<PathBuf> {
    places.iter().filter(|p| p.exists()).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(workspace: &Path, home: &Path) -> Policy {
        Policy {
            workspace: workspace.to_path_buf(),
            read: vec![home.join(".cargo")],
            write: Vec::new(),
            hidden: vec![home.join(".talaria")],
            home: Some(home.to_path_buf()),
            scratch: Vec::new(),
            limits: Limits::default(),
        }
    }

    fn home_with_secrets() -> tempfile::TempDir {
        let home = tempfile::tempdir().expect("tempdir");
        for dir in [".ssh", ".talaria/profiles/work", ".cargo/bin", "proj/.git/hooks", "proj/.talaria"] {
            std::fs::create_dir_all(home.path().join(dir)).expect("mkdir");
        }
        for file in [".bashrc", ".cargo/credentials.toml", "proj/.git/config", ".gitconfig"] {
            std::fs::write(home.path().join(file), "x").expect("write");
        }
        home
    }

    /// A plugin project in a subdirectory of a repository in the home: the repository's git
    /// directory and the scratch places are made in the empty home before it turns read-only.
    #[test]
    fn mounts_inside_the_empty_home_come_before_it_turns_read_only() {
        let home = home_with_secrets();
        let h = home.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(h.join("proj/plugin")).expect("mkdir");
        let mut p = policy(&h.join("proj/plugin"), &h);
        p.scratch = vec![h.join(".cache/wasmtime"), PathBuf::from("/opt/elsewhere"), h.join(".cargo/x")];
        let plan = p.plan();
        let at = |m: &Mount| plan.iter().position(|x| x == m).unwrap_or_else(|| panic!("no {m:?} in {plan:#?}"));
        let remount = at(&Mount::RemountReadOnly(h.clone()));
        assert!(at(&Mount::ReadWrite(h.join("proj/.git"))) < remount);
        let scratch = Mount::Tmpfs { path: h.join(".cache/wasmtime"), bytes: Limits::default().tmp_mb << 20 };
        assert!(at(&scratch) < remount);
        // Outside the home, or inside something already shown: not made.
        assert!(!plan.iter().any(
            |m| matches!(m, Mount::Tmpfs { path, .. } if path.starts_with("/opt") || path.starts_with(h.join(".cargo")))
        ));
    }

    #[test]
    fn a_project_sees_its_files_its_toolchain_and_nothing_else_of_home() {
        let home = home_with_secrets();
        let h = home.path();
        let plan = policy(&h.join("proj"), h).plan();
        assert!(plan.contains(&Mount::Tmpfs { path: h.to_path_buf(), bytes: 1 << 20 }));
        assert!(plan.contains(&Mount::ReadOnly(h.join(".gitconfig"))));
        assert!(plan.contains(&Mount::ReadOnly(h.join(".cargo"))));
        assert!(plan.contains(&Mount::ReadWrite(h.join("proj"))));
        assert!(plan.contains(&Mount::RemountReadOnly(h.to_path_buf())));
        for protected in ["proj/.git/config", "proj/.git/hooks", "proj/.talaria"] {
            assert!(plan.contains(&Mount::ReadOnly(h.join(protected))), "{protected}: {plan:?}");
        }
        // The cargo token is inside a visible place: covered. ~/.ssh is not visible at all.
        assert!(plan.contains(&Mount::HideFile(h.join(".cargo/credentials.toml"))));
        assert!(!plan.iter().any(|m| matches!(m, Mount::HideDir(p) if p.ends_with(".ssh"))));
        // The home's start-up files are not visible, so they need no protection.
        assert!(!plan.contains(&Mount::ReadOnly(h.join(".bashrc"))));
    }

    #[test]
    fn a_workspace_that_is_the_home_hides_credentials_and_talaria_and_protects_startup_files() {
        let home = home_with_secrets();
        let h = home.path();
        let plan = policy(h, h).plan();
        assert!(!plan.iter().any(|m| matches!(m, Mount::Tmpfs { path, .. } if path == h)), "{plan:?}");
        let rw = plan.iter().position(|m| m == &Mount::ReadWrite(h.to_path_buf())).expect("home writable");
        let hide_ssh = plan.iter().position(|m| m == &Mount::HideDir(h.join(".ssh"))).expect("ssh hidden");
        let hide_talaria = plan.iter().position(|m| m == &Mount::HideDir(h.join(".talaria"))).expect("talaria hidden");
        assert!(rw < hide_ssh && rw < hide_talaria, "hidden after being shown: {plan:?}");
        assert!(plan.contains(&Mount::ReadOnly(h.join(".bashrc"))));
        assert!(plan.contains(&Mount::ReadOnly(h.join(".cargo/bin"))));
        assert_eq!(plan.last(), Some(&Mount::HideFile(h.join(".cargo/credentials.toml"))));
    }

    #[test]
    fn a_workspace_inside_a_repository_gets_its_git_directory_with_config_and_hooks_read_only() {
        let home = home_with_secrets();
        let h = home.path();
        std::fs::create_dir_all(h.join("proj/sub")).expect("mkdir");
        let plan = policy(&h.join("proj/sub"), h).plan();
        let git = h.join("proj/.git");
        let at = plan.iter().position(|m| m == &Mount::ReadWrite(git.clone())).expect("git dir shown");
        let config = plan.iter().position(|m| m == &Mount::ReadOnly(git.join("config"))).expect("config ro");
        let hooks = plan.iter().position(|m| m == &Mount::ReadOnly(git.join("hooks"))).expect("hooks ro");
        assert!(at < config && at < hooks);
    }

    #[test]
    fn the_root_and_the_kernels_directories_are_no_workspace() {
        let home = home_with_secrets();
        let mut p = policy(Path::new("/"), home.path());
        assert!(p.check().expect_err("root").contains("the whole machine"));
        p.workspace = "/proc/1".into();
        assert!(p.check().expect_err("proc").contains("the kernel's"));
        p.workspace = home.path().join("proj");
        assert_eq!(p.check(), Ok(()));
    }

    #[test]
    fn hard_links_to_secrets_and_startup_files_are_covered() {
        let home = home_with_secrets();
        let h = home.path();
        std::fs::write(h.join(".talaria/.env"), "KEY=v").expect("env");
        std::fs::hard_link(h.join(".talaria/.env"), h.join("proj/env-copy")).expect("link env");
        std::fs::hard_link(h.join(".bashrc"), h.join("proj/rc")).expect("link rc");
        std::fs::write(h.join("proj/plain"), "x").expect("plain");
        let plan = policy(&h.join("proj"), h).plan();
        assert!(plan.contains(&Mount::HideFile(h.join("proj/env-copy"))), "{plan:?}");
        assert!(plan.contains(&Mount::ReadOnly(h.join("proj/rc"))), "{plan:?}");
        assert!(!plan.iter().any(|m| matches!(m, Mount::HideFile(p) | Mount::ReadOnly(p) if p.ends_with("plain"))));
    }

    #[test]
    fn a_worktree_protects_the_common_git_directory() {
        let home = home_with_secrets();
        let h = home.path();
        let wt_git = h.join("proj/.git/worktrees/wt");
        std::fs::create_dir_all(&wt_git).expect("mkdir");
        std::fs::write(wt_git.join("commondir"), "../..\n").expect("commondir");
        std::fs::create_dir_all(h.join("wt")).expect("mkdir");
        std::fs::write(h.join("wt/.git"), format!("gitdir: {}\n", wt_git.display())).expect(".git file");
        let p = policy(&h.join("wt"), h);
        let protected = p.protected_now();
        let common = h.join("proj/.git").canonicalize().expect("canon");
        assert!(protected.contains(&common.join("config")), "{protected:?}");
        assert!(protected.contains(&common.join("hooks")), "{protected:?}");
    }
}
