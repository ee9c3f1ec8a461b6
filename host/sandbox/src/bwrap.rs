//! The bubblewrap command line that starts a sandbox: its namespaces, its file system (from
//! [`Policy::plan`]), and talaria's helper as the program it runs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::policy::{Mount, Policy};

/// Where the helper's executable is bound inside the sandbox.
pub const HELPER_PATH: &str = "/run/talaria/helper";

/// The argument the helper is started with (talaria's `main` recognises it first thing).
pub const HELPER_ARG: &str = "__sandbox-helper";

/// `bwrap`'s arguments for a sandbox of `policy` whose helper is the executable `helper`.
///
/// Namespaces: a user namespace (the user's own uid and gid inside, so files keep their owner);
/// PID, network (loopback only), IPC, UTS and cgroup
/// namespaces; a new session (no controlling terminal to type into); killed with talaria.
/// The helper keeps `CAP_SYS_ADMIN` (to give each command a PID namespace and `/proc` of its
/// own) and `CAP_SETPCAP` (to drop every capability from each command before it runs); the
/// commands themselves never hold a capability. (bubblewrap's `--disable-userns` is not used: it
/// puts the helper in a nested user namespace, where the mounts are locked and a command's own
/// `/proc` cannot be mounted; the seccomp filter refuses new user namespaces instead.)
pub fn args(policy: &Policy, helper: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&std::ffi::OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
    push(&[
        "--unshare-user".as_ref(),
        "--unshare-pid".as_ref(),
        "--unshare-net".as_ref(),
        "--unshare-ipc".as_ref(),
        "--unshare-uts".as_ref(),
        "--unshare-cgroup-try".as_ref(),
        "--die-with-parent".as_ref(),
        "--new-session".as_ref(),
        "--cap-add".as_ref(),
        "CAP_SYS_ADMIN".as_ref(),
        "--cap-add".as_ref(),
        "CAP_SETPCAP".as_ref(),
    ]);
    for mount in policy.plan() {
        match &mount {
            Mount::ReadOnly(p) => push(&["--ro-bind".as_ref(), p.as_os_str(), p.as_os_str()]),
            Mount::ReadWrite(p) => push(&["--bind".as_ref(), p.as_os_str(), p.as_os_str()]),
            Mount::Link { target, path } => push(&["--symlink".as_ref(), target.as_os_str(), path.as_os_str()]),
            Mount::Dev => push(&["--dev".as_ref(), "/dev".as_ref()]),
            Mount::Proc => push(&["--proc".as_ref(), "/proc".as_ref()]),
            Mount::Tmpfs { path, bytes } => {
                let size = OsString::from(bytes.to_string());
                push(&["--size".as_ref(), &size, "--tmpfs".as_ref(), path.as_os_str()]);
            }
            Mount::RemountReadOnly(p) => push(&["--remount-ro".as_ref(), p.as_os_str()]),
            Mount::HideDir(p) => push(&["--tmpfs".as_ref(), p.as_os_str(), "--remount-ro".as_ref(), p.as_os_str()]),
            Mount::HideFile(p) => push(&["--ro-bind".as_ref(), "/dev/null".as_ref(), p.as_os_str()]),
        }
    }
    let helper_inside = PathBuf::from(HELPER_PATH);
    push(&["--ro-bind".as_ref(), helper.as_os_str(), helper_inside.as_os_str()]);
    push(&["--chdir".as_ref(), "/".as_ref(), "--".as_ref(), helper_inside.as_os_str(), HELPER_ARG.as_ref()]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Limits;

    #[test]
    fn the_helper_runs_last_with_every_namespace_unshared() {
        let ws = tempfile::tempdir().expect("tempdir");
        let policy = Policy {
            workspace: ws.path().to_path_buf(),
            read: Vec::new(),
            write: Vec::new(),
            hidden: Vec::new(),
            home: None,
            scratch: Vec::new(),
            limits: Limits::default(),
        };
        let args: Vec<String> =
            args(&policy, Path::new("/opt/talaria")).into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
        for flag in ["--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent"] {
            assert!(args.contains(&flag.to_string()), "{flag}");
        }
        let ws = ws.path().to_string_lossy().into_owned();
        assert!(args.windows(3).any(|w| w == ["--bind", ws.as_str(), ws.as_str()]));
        assert!(args.windows(3).any(|w| w == ["--ro-bind", "/opt/talaria", HELPER_PATH]));
        assert_eq!(args[args.len() - 3..], ["--", HELPER_PATH, HELPER_ARG]);
    }
}
