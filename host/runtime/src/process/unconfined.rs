//! Commands run as the user (`[sandbox] commands = "unconfined"`, the explicit opt-out): each in a
//! process group of its own, killed with everything in it at the deadline, when the call is
//! abandoned, or by [`kill_all`] when talaria exits without unwinding.

use std::path::Path;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use super::capture::{Capture, Tap};
use super::{CommandError, CommandOutput, lock};

/// How long to wait for output after the command itself has ended.
const PIPE_GRACE: Duration = Duration::from_millis(500);

/// Run `command` as the user, in its own process group, killed at the deadline or when the
/// call is abandoned; its output capped at `output_cap` bytes per stream, and given to `tap` as
/// it arrives.
pub(super) async fn run(
    command: &str,
    cwd: &Path,
    timeout: Duration,
    env: &[(String, String)],
    output_cap: usize,
    tap: Option<Tap>,
) -> Result<CommandOutput, CommandError> {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)));
    let mut child = cmd.spawn().map_err(|e| CommandError::Failed(format!("cannot start sh: {e}")))?;
    let pid = child.id();
    // If the call is abandoned (its deadline passed), the whole group goes with it.
    let _group = GroupGuard::new(pid);
    let (stdout, stderr) = (Capture::new(output_cap), Capture::new(output_cap));
    let (out_pipe, err_pipe) = (child.stdout.take(), child.stderr.take());
    let (out_capture, err_capture) = (stdout.clone(), stderr.clone());
    let readers = [tokio::spawn(async move {
        let tap = tap.as_ref();
        let both = async {
            tokio::join!(out_capture.fill(out_pipe, tap), err_capture.fill(err_pipe, tap));
        };
        super::capture::ticking(both, tap).await;
    })];
    let status = tokio::time::timeout(timeout, child.wait()).await;
    let timed_out = status.is_err();
    if timed_out {
        kill_group(pid);
        let _ = child.wait().await;
    }
    // Background children may keep the pipes open: take what arrived within a short grace.
    let _ = tokio::time::timeout(PIPE_GRACE, async {
        for r in readers {
            let _ = r.await;
        }
    })
    .await;
    let (out, out_cut) = stdout.text();
    let (mut err, err_cut) = stderr.text();
    if timed_out {
        err.push_str(&format!("\n[command timed out after {}s and was killed]", timeout.as_secs()));
    }
    let exit_code = match status {
        Ok(Ok(status)) => status.code(),
        Ok(Err(e)) => return Err(CommandError::Failed(format!("waiting for the command: {e}"))),
        Err(_) => None,
    };
    Ok(CommandOutput { exit_code, stdout: out, stderr: err, truncated: out_cut || err_cut, timed_out })
}

/// Process groups of commands still running, so that an exit which skips destructors (a
/// second Ctrl-C, a signal) can still take them down: see [`kill_all`].
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kill the process group of every command still running in this process. Call it before
/// exiting without unwinding (`std::process::exit`), so no command outlives talaria.
pub fn kill_all() {
    let groups: Vec<u32> = std::mem::take(&mut *lock(&RUNNING));
    for pid in groups {
        kill_group(Some(pid));
    }
}

/// How many commands are running right now (their groups not yet reaped).
pub fn running() -> usize {
    lock(&RUNNING).len()
}

/// Kills the command's process group when dropped (normal end or cancellation).
struct GroupGuard(Option<u32>);

impl GroupGuard {
    fn new(pid: Option<u32>) -> Self {
        if let Some(pid) = pid {
            lock(&RUNNING).push(pid);
        }
        Self(pid)
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
        if let Some(pid) = self.0 {
            lock(&RUNNING).retain(|p| *p != pid);
        }
    }
}

#[allow(unsafe_code)]
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: killpg only sends a signal; the group id is our child's, which leads its group.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
}
