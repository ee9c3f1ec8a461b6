//! A bound on a sandbox's process count that also holds for root: a control group of the `pids`
//! controller, when talaria may make one.
//!
//! `RLIMIT_NPROC` bounds an ordinary user's processes, but the kernel does not apply it to root,
//! so a fork bomb run by a talaria running as root would fill the machine's process table. Where
//! the `pids` controller is at hand and writable (cgroup v1's `pids` hierarchy, or a cgroup v2
//! directory with `pids` delegated to its children), each sandbox gets a group of its own with
//! `pids.max`; its helper joins it before the first command starts. Elsewhere the sandbox falls
//! back to `RLIMIT_NPROC` (see [`crate::sandbox::Sandbox`]), and `talaria doctor` says which.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// One sandbox's process-count group; removed when dropped (once its processes are gone).
#[derive(Debug)]
pub struct ProcessGroup {
    dir: PathBuf,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl ProcessGroup {
    /// A new group allowing `max` processes, or `None` where none can be made.
    pub fn create(max: u64) -> Option<Self> {
        let parent = parent_dir()?;
        sweep(&parent);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("talaria-sandbox-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let group = Self { dir };
        std::fs::write(group.dir.join("pids.max"), format!("{max}\n")).ok()?;
        Some(group)
    }

    /// Its `cgroup.procs`, open for writing: a process that writes `0` into it joins the group.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn procs(&self) -> std::io::Result<std::fs::File> {
        std::fs::OpenOptions::new().write(true).open(self.dir.join("cgroup.procs"))
    }

    /// Whether groups can be made here (for `talaria doctor`).
    pub fn available() -> bool {
        Self::create(1).is_some()
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let dir = std::mem::take(&mut self.dir);
        // The sandbox's processes die as its namespace ends, a moment after this: try again for
        // a while before giving up (an empty group left behind holds nothing).
        if std::fs::remove_dir(&dir).is_err() {
            std::thread::spawn(move || {
                for _ in 0..50 {
                    std::thread::sleep(std::time::Duration::from_millis(40));
                    if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                        return;
                    }
                }
            });
        }
    }
}

/// Remove the empty groups of talaria processes that have ended (a process that exits right
/// after its last sandbox leaves its group behind).
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) =
            name.to_str().and_then(|n| n.strip_prefix("talaria-sandbox-")).and_then(|r| r.split('-').next())
        else {
            continue;
        };
        let gone = pid.parse::<i32>().is_ok_and(|pid| {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH)
        });
        if gone {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// The directory new groups go in: this process's own group in the `pids` hierarchy (v1), or its
/// v2 group when `pids` is enabled for that group's children; `None` when neither is writable.
fn parent_dir() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let v1 = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "pids").then(|| path.to_string())
    });
    if let Some(path) = v1
        && let Some(mount) = mount_point(&mounts, |fs, opts| fs == "cgroup" && opts.split(',').any(|o| o == "pids"))
    {
        let dir = join_cgroup(&mount, &path);
        return writable(&dir).then_some(dir);
    }
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mount = mount_point(&mounts, |fs, _| fs == "cgroup2")?;
    let dir = join_cgroup(&mount, path);
    let delegated = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"));
    (delegated && writable(&dir)).then_some(dir)
}

fn join_cgroup(mount: &Path, path: &str) -> PathBuf {
    mount.join(path.trim_start_matches('/'))
}

fn writable(dir: &Path) -> bool {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// The mount point of the first mount whose file system type and super options match.
fn mount_point(mountinfo: &str, matches: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        let (fs, _source, opts) = (r.next()?, r.next()?, r.next().unwrap_or(""));
        matches(fs, opts).then(|| PathBuf::from(point))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_found_by_type_and_options() {
        let info = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    31 25 0:27 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
                    32 25 0:28 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let pids = mount_point(info, |fs, o| fs == "cgroup" && o.split(',').any(|o| o == "pids"));
        assert_eq!(pids, Some(PathBuf::from("/sys/fs/cgroup/pids")));
        assert_eq!(mount_point(info, |fs, _| fs == "cgroup2"), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(join_cgroup(Path::new("/sys/fs/cgroup/pids"), "/"), PathBuf::from("/sys/fs/cgroup/pids/"));
    }
}
