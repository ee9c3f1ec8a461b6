//! Run shell commands on the host (needs the `process` capability). Every command passes the
//! host's dangerous-command check; refused commands come back as [`ProcessError::Denied`].
//!
//! ```ignore
//! let out = talaria_sdk::process::Command::new("cargo test").timeout_ms(120_000).run()?;
//! ```

use std::fmt;

use crate::__bindings::talaria::plugin::process as host;

/// What a finished command produced.
#[derive(Debug, Clone)]
pub struct Output {
    /// Exit code; `None` when killed (by a signal or the deadline).
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Output beyond the host's cap was cut.
    pub truncated: bool,
    pub timed_out: bool,
}

/// Why a command did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessError {
    /// Refused by the safety check or the user; the text says why.
    Denied(String),
    /// Could not be started (or `process` was not granted).
    Failed(String),
}

impl fmt::Display for ProcessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied(m) => write!(f, "command refused: {m}"),
            Self::Failed(m) => write!(f, "command failed to start: {m}"),
        }
    }
}

impl std::error::Error for ProcessError {}

/// A shell command line to run with `sh -c`.
#[derive(Debug, Clone)]
pub struct Command {
    command: String,
    cwd: Option<String>,
    timeout_ms: Option<u32>,
}

impl Command {
    pub fn new(command: impl Into<String>) -> Self {
        Self { command: command.into(), cwd: None, timeout_ms: None }
    }

    /// Working directory (inside the workspace); default: the workspace.
    pub fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Deadline; the host caps it at its own maximum.
    pub fn timeout_ms(mut self, ms: u32) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Run the command and wait for it.
    pub fn run(self) -> Result<Output, ProcessError> {
        let cmd = host::Command { command: self.command, cwd: self.cwd, timeout_ms: self.timeout_ms };
        match host::run(&cmd) {
            Ok(o) => Ok(Output {
                exit_code: o.exit_code,
                stdout: o.stdout,
                stderr: o.stderr,
                truncated: o.truncated,
                timed_out: o.timed_out,
            }),
            Err(host::ProcessError::Denied(m)) => Err(ProcessError::Denied(m)),
            Err(host::ProcessError::Failed(m)) => Err(ProcessError::Failed(m)),
        }
    }
}
