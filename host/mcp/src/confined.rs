//! MCP stdio servers in the OS sandbox ([`talaria_sandbox`]).
//!
//! A server sees the system, the toolchain places (read-only), its own directory (read-only:
//! its `cwd`, and the package or environment its program and path arguments live in), and a data
//! directory of its own (read-write, `$TALARIA_HOME/mcp-data/NAME`, where it runs unless its
//! `cwd` says otherwise), plus what `[mcp_servers.NAME] sandbox` grants. Its network goes through
//! the egress proxy: hosts in `sandbox.net` directly, any other asked about (`net:HOST`) on
//! behalf of the session whose call it serves.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_runtime::process::{CommandGate, CommandSandbox, Confinement};
use talaria_runtime::{Approvals, Caller, Capability, Grants};
use talaria_sandbox::{Child, Command, Policy, Sandbox};

use crate::config::ServerToml;

/// A server's sandbox and its process, kept while its session runs.
pub(crate) struct Jailed {
    _sandbox: Sandbox,
    child: Child,
    pub gate: Arc<CommandGate>,
}

impl Jailed {
    /// Its stdout (what it says) and stdin (what it is told), once.
    pub fn pipes(&mut self) -> Option<(tokio::net::unix::pipe::Receiver, tokio::net::unix::pipe::Sender)> {
        Some((self.child.stdout.take()?, self.child.stdin.take()?))
    }

    pub fn stderr(&mut self) -> Option<tokio::net::unix::pipe::Receiver> {
        self.child.stderr.take()
    }
}

/// Whether stdio servers run confined.
pub(crate) fn confined(settings: &CommandSandbox) -> bool {
    settings.confinement == Confinement::Confined
}

/// What one server is run with.
pub(crate) struct Plan {
    pub policy: Policy,
    pub cwd: PathBuf,
    pub grants: Arc<Grants>,
}

/// How a stdio server is started: its program, arguments and `cwd`.
pub(crate) struct Program<'a> {
    pub command: &'a str,
    pub args: &'a [String],
    pub cwd: Option<&'a Path>,
}

/// The sandbox of server `name` for a conversation in `workspace`.
///
/// # Errors
/// A `sandbox.net` entry is not a host pattern, or the data directory cannot be made.
pub(crate) fn plan(
    settings: &CommandSandbox,
    home: &Path,
    name: &str,
    config: &ServerToml,
    program: &Program<'_>,
    workspace: &Path,
) -> Result<Plan, String> {
    let Program { command, args, cwd } = *program;
    let data = home.join("mcp-data").join(name);
    std::fs::create_dir_all(&data).map_err(|e| format!("cannot make its data directory {}: {e}", data.display()))?;
    let user_home = settings.home.clone();
    let expand = |p: &str| -> PathBuf {
        if let Some(rest) = p.strip_prefix("$WORKSPACE") {
            return workspace.join(rest.trim_start_matches('/'));
        }
        match (p.strip_prefix("~/"), &user_home) {
            (Some(rest), Some(h)) => h.join(rest),
            _ => PathBuf::from(p),
        }
    };
    let granted = config.sandbox.clone().unwrap_or_default();
    let mut read = settings.read.clone();
    let run_in = cwd.map(Path::to_path_buf);
    read.extend(run_in.clone());
    read.extend(own_directories(command, args, run_in.as_deref().unwrap_or(&data)));
    read.extend(granted.read.iter().map(|p| expand(p)));
    let write: Vec<PathBuf> = settings.write.iter().cloned().chain(granted.write.iter().map(|p| expand(p))).collect();
    let mut caps = Vec::new();
    for host in &granted.net {
        let cap: Capability = format!("net:{host}")
            .parse()
            .map_err(|e| format!("[mcp_servers.{name}] sandbox.net: `{host}` is not a host pattern ({e})"))?;
        caps.push(cap);
    }
    let grants = Arc::new(Grants::effective(&caps, caps.clone()));
    let canonical = |p: PathBuf| p.canonicalize().unwrap_or(p);
    let data = canonical(data);
    let cwd = run_in.map(canonical).unwrap_or_else(|| data.clone());
    // Where a server that names no `cwd` ran before the sandbox: still the workspace when that
    // was granted to it.
    let policy = Policy {
        workspace: data,
        read: read.into_iter().map(canonical).collect(),
        write: write.into_iter().map(canonical).collect(),
        hidden: settings.hidden.iter().cloned().map(canonical).collect(),
        home: settings.home.clone().map(canonical),
        scratch: Vec::new(),
        limits: settings.limits,
    };
    Ok(Plan { policy, cwd, grants })
}

/// Start server `name` in its sandbox.
///
/// # Errors
/// The sandbox cannot start here (with the fix), or the program cannot be started in it.
pub(crate) async fn start(
    settings: &CommandSandbox,
    plan: Plan,
    name: &str,
    approvals: Arc<Approvals>,
    argv: Vec<String>,
    env: Vec<(String, String)>,
) -> Result<Jailed, String> {
    let launcher = settings.launcher.as_ref().map_err(ToString::to_string)?;
    let program = argv.first().map(String::as_str).unwrap_or_default();
    let path = env.iter().find(|(k, _)| k == "PATH").map_or("/usr/bin:/bin", |(_, v)| v.as_str());
    if talaria_sandbox::helper::find_program(program, path, &plan.cwd).is_none() {
        return Err(format!("cannot start `{program}`: no such program"));
    }
    let gate = Arc::new(
        CommandGate::new(&format!("mcp:{name}"), plan.grants.clone(), approvals, Caller::default())
            .with_local_hosts(settings.local_hosts.clone()),
    );
    let sandbox = Sandbox::start(launcher, &plan.policy, gate.clone()).await.map_err(|e| e.to_string())?;
    let child = sandbox
        .spawn(Command { argv, cwd: plan.cwd, env, stdin: true })
        .map_err(|e| format!("cannot start it in the sandbox: {e}"))?;
    Ok(Jailed { _sandbox: sandbox, child, gate })
}

/// The directories a server's program and path arguments live in, shown read-only: a package
/// with its `node_modules` (from the topmost `node_modules` up one), a Python environment (the
/// directory above a `bin/` holding `pyvenv.cfg`), a language's own install (the directory
/// above a `bin/` beside a `lib/` holding `python3…` or `node_modules`, as pyenv and nvm make),
/// else the file's own directory. Each is found both where the path names it and where its
/// links lead: a venv's `bin/python` is a link to an interpreter elsewhere, and both are
/// needed. System places are shown anyway and left out.
fn own_directories(command: &str, args: &[String], cwd: &Path) -> Vec<PathBuf> {
    let path_var = std::env::var("PATH").unwrap_or_default();
    let program = if command.contains('/') {
        Some(cwd.join(command))
    } else {
        std::env::split_paths(&path_var).map(|d| d.join(command)).find(|p| p.is_file())
    };
    let candidates = program
        .into_iter()
        .chain(args.iter().filter(|a| !a.starts_with('-')).map(|a| cwd.join(a)).filter(|p| p.exists()));
    let system = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/opt"];
    let mut dirs: Vec<PathBuf> = candidates
        .flat_map(|p| {
            // Where it is named (its directory's links resolved, not its own), and where it leads.
            let named = p.parent().and_then(|d| d.canonicalize().ok()).zip(p.file_name()).map(|(d, f)| d.join(f));
            [named, p.canonicalize().ok()]
        })
        .flatten()
        .filter(|p| !system.iter().any(|s| p.starts_with(s)))
        .map(|p| root_of(&p))
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// The directory that holds what `path` needs to run.
fn root_of(path: &Path) -> PathBuf {
    let parts: Vec<_> = path.components().collect();
    if let Some(at) = parts.iter().position(|c| c.as_os_str() == "node_modules") {
        return parts[..at].iter().collect();
    }
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map_or_else(|| path.to_path_buf(), Path::to_path_buf)
    };
    match dir.parent() {
        Some(env) if dir.ends_with("bin") && (env.join("pyvenv.cfg").is_file() || runtime_install(env)) => {
            env.to_path_buf()
        }
        _ => dir,
    }
}

/// Whether `prefix` is a language's own install: a `lib/` holding `python3…` or `node_modules`.
fn runtime_install(prefix: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else { return false };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.starts_with("python3") || name == "node_modules"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_is_shown_from_its_node_modules_and_a_venv_whole() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path().canonicalize().expect("canon");
        let script = r.join("proj/node_modules/@x/server/dist/index.js");
        std::fs::create_dir_all(script.parent().expect("parent")).expect("mkdir");
        std::fs::write(&script, "").expect("script");
        assert_eq!(root_of(&script), r.join("proj"));
        let python = r.join("env/bin/python");
        std::fs::create_dir_all(r.join("env/bin")).expect("mkdir");
        std::fs::write(&python, "").expect("python");
        std::fs::write(r.join("env/pyvenv.cfg"), "").expect("cfg");
        assert_eq!(root_of(&python), r.join("env"));
        let plain = r.join("tools/server.py");
        std::fs::create_dir_all(r.join("tools")).expect("mkdir");
        std::fs::write(&plain, "").expect("plain");
        assert_eq!(own_directories("sh", &["tools/server.py".into(), "--flag".into()], &r), [r.join("tools")]);
    }

    /// A venv's `bin/python` links to an interpreter installed elsewhere (pyenv's here): the
    /// venv and the whole install are shown, not the interpreter's directory alone.
    #[test]
    fn a_venv_whose_python_links_elsewhere_is_shown_with_the_install() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path().canonicalize().expect("canon");
        let install = r.join("pyenv/versions/3.11.7");
        std::fs::create_dir_all(install.join("bin")).expect("mkdir");
        std::fs::create_dir_all(install.join("lib/python3.11")).expect("mkdir");
        std::fs::write(install.join("bin/python3.11"), "").expect("python");
        std::fs::create_dir_all(r.join("venv/bin")).expect("mkdir");
        std::fs::write(r.join("venv/pyvenv.cfg"), "").expect("cfg");
        std::os::unix::fs::symlink(install.join("bin/python3.11"), r.join("venv/bin/python")).expect("link");
        let shown = own_directories(r.join("venv/bin/python").to_str().expect("utf8"), &[], &r);
        assert_eq!(shown, [install.clone(), r.join("venv")]);
        // A plain `bin/` with no language beside it stays just that directory.
        std::fs::create_dir_all(r.join("home/.local/bin")).expect("mkdir");
        std::fs::write(r.join("home/.local/bin/tool"), "").expect("tool");
        assert_eq!(root_of(&r.join("home/.local/bin/tool")), r.join("home/.local/bin"));
    }
}
