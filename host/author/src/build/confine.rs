//! Where a build's programs run: in the command sandbox (`talaria-sandbox`), as a command the
//! model runs would, unless the author opts out with `--unconfined-build`.
//!
//! A build runs the project's own code: cargo runs `build.rs` and procedural macros,
//! componentize-py imports `app.py`, componentize-js evaluates the module. Whoever can write
//! the project (the model's files tool can, without approval) would otherwise run code as the
//! user. So every program a build starts (`rustc --print sysroot`, cargo, componentize-js,
//! `node --check`, componentize-py) sees:
//! - the project read-write (`.git/config`, `.git/hooks` and `.talaria/` read-only, as for any
//!   command), and cargo's `--target-dir` when it lies outside the project;
//! - the system and the toolchain places read-only (`[sandbox] toolchains`, default `~/.cargo`,
//!   `~/.rustup`, `~/.npm`, `~/.cache/pip`, `~/.pyenv`, `~/.nvm`, `~/.volta`), and cargo's
//!   download caches under `$CARGO_HOME` (`registry/`, `git/` and their lock files) writable;
//!   `[sandbox] read` and `write` as configured;
//! - nothing else of the home: not `~/.ssh`, `~/.config`, talaria's home, ...; a private `/tmp`;
//! - the network only through the sandbox's egress proxy, and there only the package registries
//!   ([`REGISTRIES`]), wherever this machine's DNS puts them (a mirror on the local network
//!   too); every other host is refused;
//! - an environment of the toolchains' variables only (no API keys, no tokens).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_core::runtime::process::{CommandGate, CommandSandbox};
use talaria_core::runtime::{Approvals, Caller, Capability, Grants, HostPattern, Unattended};
use talaria_core::sandbox::sandbox::OPT_OUT;
use talaria_core::sandbox::{Exit, Policy, Sandbox};
use tokio::io::AsyncReadExt as _;

/// Hosts a build may download from: crates.io, PyPI and npm.
pub const REGISTRIES: &[&str] =
    &["crates.io", "index.crates.io", "static.crates.io", "pypi.org", "files.pythonhosted.org", "registry.npmjs.org"];

/// Cargo's download caches and their locks, under `$CARGO_HOME`: writable during a build.
const CARGO_CACHES: &[&str] = &["registry", "git", ".package-cache", ".package-cache-mutate", ".global-cache"];

/// Variables passed to a build's programs (and any starting with [`PASSED_PREFIXES`]), unless
/// their name says they hold a credential.
const PASSED: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "SHELL", "VIRTUAL_ENV", "NODE_PATH"];
const PASSED_PREFIXES: &[&str] =
    &["LC_", "CARGO_", "RUSTUP_", "RUSTC", "PYENV", "PIP_", "PYTHON", "NVM_", "VOLTA_", "npm_config_", "NPM_CONFIG_"];
const CREDENTIAL_WORDS: &[&str] = &["TOKEN", "SECRET", "PASSWORD", "KEY", "AUTH", "CREDENTIAL"];

/// How a build's programs run.
#[derive(Clone, Default)]
pub enum Confine {
    /// As the user, with all the user's files and network: `--unconfined-build`, and library
    /// callers that build trusted projects (talaria's own tests).
    #[default]
    Unconfined,
    /// In the command sandbox.
    Sandbox(Arc<BuildSandbox>),
}

impl std::fmt::Debug for Confine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Unconfined => "Unconfined",
            Self::Sandbox(_) => "Sandbox",
        })
    }
}

/// The sandbox builds run in: the command sandbox's settings, narrowed to a build.
pub struct BuildSandbox {
    settings: CommandSandbox,
    /// Where cargo keeps downloads: `$CARGO_HOME`, else `~/.cargo`.
    cargo_home: Option<PathBuf>,
    runtime: tokio::runtime::Handle,
}

impl BuildSandbox {
    /// Builds confined as `settings` (from `[sandbox]`) confines commands. Must be called
    /// within a tokio runtime, which serves the sandbox's proxy; the build itself then runs on
    /// a blocking thread.
    ///
    /// # Errors
    /// The sandbox cannot start here (no bubblewrap, not Linux): why, how to fix it, and that
    /// `--unconfined-build` runs the build as the user instead.
    pub fn new(settings: CommandSandbox) -> Result<Self, String> {
        if let Err(e) = &settings.launcher {
            // `[sandbox] commands = "unconfined"` is no answer here: it leaves builds confined.
            let fix = e.fix.replace(&format!(" {OPT_OUT}."), "").replace(&format!("{OPT_OUT}."), "");
            let fix = if fix.trim().is_empty() { String::new() } else { format!("{} ", fix.trim()) };
            return Err(format!(
                "builds run in talaria's command sandbox, which cannot start here: {}. {fix}Or, for a project whose every file you trust (cargo runs its build.rs, componentize-py its app.py), pass --unconfined-build to build it as you",
                e.reason
            ));
        }
        let cargo_home = std::env::var_os("CARGO_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| settings.home.as_ref().map(|h| h.join(".cargo")));
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| format!("no async runtime to serve the build sandbox's proxy ({e})"))?;
        Ok(Self { settings, cargo_home, runtime })
    }

    /// The policy for building the project in `project`; `also_write` are places outside it
    /// the build writes (cargo's target directory).
    pub fn policy(&self, project: &Path, also_write: &[PathBuf]) -> Policy {
        let s = &self.settings;
        let mut write = s.write.clone();
        write.extend(also_write.iter().cloned());
        if let Some(cargo) = &self.cargo_home {
            write.extend(CARGO_CACHES.iter().map(|c| cargo.join(c)));
        }
        let canonical = |p: PathBuf| p.canonicalize().unwrap_or(p);
        Policy {
            workspace: canonical(project.to_path_buf()),
            read: s.read.iter().cloned().map(canonical).collect(),
            write: write.into_iter().map(canonical).collect(),
            hidden: s.hidden.iter().cloned().map(canonical).collect(),
            home: s.home.clone().map(canonical),
            // componentize-js's wizer writes a cache there, wherever it is told to.
            scratch: s.home.iter().map(|h| canonical(h.clone()).join(".cache/wasmtime")).collect(),
            limits: s.limits,
        }
    }

    /// Run `step` to its end in a sandbox of `policy`.
    fn run(&self, policy: &Policy, step: &Step) -> std::io::Result<Ran> {
        let launcher = self.settings.launcher.as_ref().map_err(|e| std::io::Error::other(e.to_string()))?;
        let hosts: Vec<Capability> = REGISTRIES.iter().filter_map(|h| format!("net:{h}").parse().ok()).collect();
        let grants = Arc::new(Grants::effective(&hosts, hosts.clone()));
        let approvals = Arc::new(Approvals::new(Arc::new(Unattended { yolo: false }), &[]));
        let caller = Caller { session_id: "plugin-build".into(), call_id: String::new() };
        // The registries are reached wherever this machine's DNS puts them, a mirror on the
        // local network included: their names are fixed here, not chosen by the build.
        let mut local: Vec<HostPattern> = self.settings.local_hosts.clone();
        local.extend(REGISTRIES.iter().filter_map(|h| HostPattern::parse(h).ok()));
        let gate = Arc::new(CommandGate::new("plugin build", grants, approvals, caller).with_local_hosts(local));
        let mut env: Vec<(String, String)> = std::env::vars().filter(|(k, _)| passed(k)).collect();
        env.retain(|(k, _)| !step.env_remove.contains(k));
        for (k, v) in &step.env {
            env.retain(|(name, _)| name != k);
            env.push((k.clone(), v.clone()));
        }
        let mut argv = vec![step.program.to_string_lossy().into_owned()];
        argv.extend(step.args.iter().map(|a| a.to_string_lossy().into_owned()));
        let command = talaria_core::sandbox::Command { argv, cwd: step.cwd.clone(), env, stdin: false };
        self.runtime.block_on(async {
            let sandbox = Sandbox::start(launcher, policy, gate).await.map_err(std::io::Error::other)?;
            let mut child = sandbox.spawn(command)?;
            let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
            let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
            let read_out = async {
                if let Some(o) = out.as_mut() {
                    let _ = o.read_to_end(&mut stdout).await;
                }
            };
            let read_err = async {
                if let Some(e) = err.as_mut() {
                    let _ = e.read_to_end(&mut stderr).await;
                }
            };
            tokio::join!(read_out, read_err);
            let exit = child.wait().await;
            Ok(Ran { exit: Ended::Sandbox(exit), stdout, stderr })
        })
    }
}

/// Whether the variable `name` goes to a build's programs.
fn passed(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    (PASSED.contains(&name) || PASSED_PREFIXES.iter().any(|p| name.starts_with(p)))
        && !CREDENTIAL_WORDS.iter().any(|w| upper.contains(w))
}

/// One program a build runs.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub env_remove: Vec<String>,
}

impl Step {
    pub fn new(program: impl Into<PathBuf>, cwd: &Path) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.to_path_buf(),
            env: Vec::new(),
            env_remove: Vec::new(),
        }
    }

    pub fn arg(&mut self, arg: impl Into<OsString>) -> &mut Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(&mut self, args: I) -> &mut Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(&mut self, key: &str, value: &str) -> &mut Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn env_remove(&mut self, key: &str) -> &mut Self {
        self.env_remove.push(key.to_string());
        self
    }
}

/// How a step ended.
#[derive(Debug)]
pub(crate) enum Ended {
    Unconfined(std::process::ExitStatus),
    Sandbox(Exit),
}

impl Ended {
    pub fn success(&self) -> bool {
        match self {
            Self::Unconfined(status) => status.success(),
            Self::Sandbox(exit) => *exit == Exit::Code(0),
        }
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unconfined(status) => write!(f, "{status}"),
            Self::Sandbox(Exit::Code(c)) => write!(f, "exit status: {c}"),
            Self::Sandbox(Exit::Signal(s)) => write!(f, "signal: {s}"),
            Self::Sandbox(Exit::Lost) => f.write_str("the sandbox ended first"),
        }
    }
}

/// What a step did.
#[derive(Debug)]
pub(crate) struct Ran {
    pub exit: Ended,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Where a build runs: its project, the places outside it that it writes, and how it is
/// confined.
pub(crate) struct Runner<'a> {
    pub confine: &'a Confine,
    pub policy: Option<Policy>,
}

impl<'a> Runner<'a> {
    pub fn new(confine: &'a Confine, project: &Path, also_write: &[PathBuf]) -> Self {
        let policy = match confine {
            Confine::Unconfined => None,
            Confine::Sandbox(s) => Some(s.policy(project, also_write)),
        };
        Self { confine, policy }
    }

    /// Run `step` to its end.
    ///
    /// # Errors
    /// It cannot be started (`NotFound` when the program is missing, unconfined), or the
    /// sandbox cannot.
    pub fn output(&self, step: &Step) -> std::io::Result<Ran> {
        match (self.confine, &self.policy) {
            (Confine::Sandbox(s), Some(policy)) => s.run(policy, step),
            _ => {
                let mut cmd = std::process::Command::new(&step.program);
                cmd.current_dir(&step.cwd).args(&step.args).stdin(std::process::Stdio::null());
                for (k, v) in &step.env {
                    cmd.env(k, v);
                }
                for k in &step.env_remove {
                    cmd.env_remove(k);
                }
                let output = cmd.output()?;
                Ok(Ran { exit: Ended::Unconfined(output.status), stdout: output.stdout, stderr: output.stderr })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_environment_stay_out_of_builds() {
        for name in ["PATH", "HOME", "CARGO_HOME", "RUSTUP_TOOLCHAIN", "PYENV_ROOT", "LC_ALL", "npm_config_cache"] {
            assert!(passed(name), "{name}");
        }
        for name in [
            "OPENAI_API_KEY",
            "CARGO_REGISTRY_TOKEN",
            "CARGO_REGISTRIES_MINE_TOKEN",
            "npm_config__authToken",
            "SSH_AUTH_SOCK",
            "TALARIA_HOME",
            "AWS_SECRET_ACCESS_KEY",
            "PIP_INDEX_PASSWORD",
        ] {
            assert!(!passed(name), "{name}");
        }
    }
}
