//! The bundled `terminal` plugin: one tool, `terminal`, that runs a shell command in the
//! workspace through the host's `process` interface.
//!
//! The host runs every command past its dangerous-command check (and the user, when one is
//! there to ask); a refusal comes back as an error telling the model not to retry the command
//! as it is. Output shaping lives in `output`.
//!
//! ```text
//! terminal {"command": "cargo test", "workdir": "crates/core", "timeout_secs": 300}
//! {"exit_code":0,"output":"running 3 tests\n...","timed_out":false,"truncated":false}
//! ```

mod output;

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use talaria_sdk::process::{Command, ProcessError};
use talaria_sdk::{Context, JsonSchema, ToolError, export_tools};

use crate::output::Report;

const DEFAULT_TIMEOUT_SECS: u32 = 180;
const MAX_TIMEOUT_SECS: u32 = 600;

#[derive(Deserialize, JsonSchema)]
struct TerminalArgs {
    /// The shell command line, run with `sh -c` (pipes, `&&` and redirections work).
    command: String,
    /// Directory to run in, inside the workspace; relative paths start at the workspace.
    /// Default: the workspace.
    workdir: Option<String>,
    /// Seconds before the command is killed. Default 180, at most 600.
    timeout_secs: Option<u32>,
}

fn terminal(args: TerminalArgs, ctx: &Context) -> Result<String, ToolError> {
    if args.command.trim().is_empty() {
        return Err(ToolError::invalid("command is empty: give a shell command line to run"));
    }
    let timeout = args.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS).min(MAX_TIMEOUT_SECS);
    if timeout == 0 {
        return Err(ToolError::invalid("timeout_secs must be at least 1 (default 180, at most 600)"));
    }
    let mut command = Command::new(args.command.as_str()).timeout_ms(timeout * 1000);
    if let Some(dir) = args.workdir.as_deref().filter(|d| !d.trim().is_empty()) {
        command = command.cwd(workdir(&ctx.workspace, dir)?.to_string_lossy());
    }
    match command.run() {
        Ok(out) => Ok(Report::new(out.exit_code, &out.stdout, &out.stderr, out.timed_out, out.truncated).to_json()),
        Err(ProcessError::Denied(reason)) => Err(ToolError::failed(format!(
            "BLOCKED by the safety policy, the command did not run: {reason}. Do not retry this command \
             verbatim; find a safer way to do it, or ask the user to run it themselves"
        ))),
        Err(ProcessError::Failed(reason)) => {
            Err(ToolError::failed(format!("the command could not be started: {reason}")))
        }
    }
}

/// `dir` resolved against the workspace (lexically), if it stays inside it.
fn workdir(workspace: &Path, dir: &str) -> Result<PathBuf, ToolError> {
    let workspace = normalize(workspace);
    let path = normalize(&workspace.join(dir));
    if path.starts_with(&workspace) {
        Ok(path)
    } else {
        Err(ToolError::invalid(format!(
            "workdir {dir} is outside the workspace {}: give a directory inside it (relative paths start there)",
            workspace.display()
        )))
    }
}

/// Fold `.` and `..` without touching the filesystem.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if matches!(out.components().next_back(), Some(Component::Normal(_))) {
                    out.pop();
                } else if !out.has_root() {
                    out.push("..");
                }
            }
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => out.push(part.as_os_str()),
        }
    }
    out
}

export_tools! {
    /// Run a shell command (sh -c) in the workspace, or in workdir inside it, and wait for it to
    /// finish. Returns JSON: {"exit_code": number, or null when killed, "output": stdout then
    /// stderr, "timed_out": bool, "truncated": bool}. Output over 50000 characters keeps its start
    /// and end with a note in between; colour codes are removed. There is no input (stdin is
    /// closed), so use non-interactive flags (e.g. -y), and no state carries over between calls:
    /// chain steps with && or give workdir. The command is killed after timeout_secs (default
    /// 180, at most 600); don't start servers or watchers that never exit. Dangerous commands are
    /// checked by a safety policy and may need the user's approval; a blocked command returns an
    /// error and must not be retried as it is.
    terminal,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workdir_is_resolved_inside_the_workspace() {
        let ws = Path::new("/home/u/proj");
        assert_eq!(workdir(ws, "crates/core").ok(), Some(PathBuf::from("/home/u/proj/crates/core")));
        assert_eq!(workdir(ws, "./a/../b").ok(), Some(PathBuf::from("/home/u/proj/b")));
        assert_eq!(workdir(ws, "/home/u/proj/x").ok(), Some(PathBuf::from("/home/u/proj/x")));
        assert_eq!(workdir(ws, ".").ok(), Some(PathBuf::from("/home/u/proj")));
    }

    #[test]
    fn workdir_outside_the_workspace_is_refused() {
        let ws = Path::new("/home/u/proj");
        for dir in ["..", "../other", "/etc", "/home/u/project2"] {
            let e = workdir(ws, dir);
            assert!(
                matches!(&e, Err(ToolError::InvalidArgs(m)) if m.contains("outside the workspace /home/u/proj")),
                "{dir}: {e:?}"
            );
        }
    }
}
