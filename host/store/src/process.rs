//! This process and its machine, as the rows that name a process record them: a lease's pid and
//! host, a delivery claim's and a notice's sender `PID@HOST`. A process of this machine that is
//! gone holds nothing any more; a process elsewhere is trusted until its row expires.
//!
//! ```
//! use talaria_store::process::machine;
//! assert!(!machine().is_empty());
//! ```

use std::sync::OnceLock;

/// This machine's name, as leases record it: read once, so a process names itself the same way
/// as long as it runs (and a lease taken per turn reads no file).
pub fn machine() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "localhost".into())
    })
    .clone()
}

/// Whether process `pid` of this machine still runs. Where that cannot be told, it is assumed
/// to (what it holds then ends by expiry).
pub(crate) fn alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let proc_root = std::path::Path::new("/proc/self");
    if !proc_root.exists() {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // A zombie has finished: it holds nothing any more.
        Ok(stat) => stat.rsplit_once(')').is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// This process, as a delivery claim and a notice name it: `PID@HOST`.
pub(crate) fn me() -> &'static str {
    static ME: OnceLock<String> = OnceLock::new();
    ME.get_or_init(|| format!("{}@{}", std::process::id(), machine()))
}

/// Whether the process `name` (`PID@HOST`) ran on this machine and is gone (its claims are void).
pub(crate) fn is_gone(name: &str) -> bool {
    let Some((pid, host)) = name.split_once('@') else { return false };
    pid.parse().is_ok_and(|pid| gone(pid, host))
}

/// Whether process `pid` of machine `host` is known to have ended: it ran on this machine and
/// runs no more. A process of another machine is never known gone.
pub fn gone(pid: u32, host: &str) -> bool {
    host == machine() && !alive(pid)
}
