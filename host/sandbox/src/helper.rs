//! The program bubblewrap runs inside a sandbox: talaria's own executable, started with
//! [`crate::bwrap::HELPER_ARG`] (talaria's `main` calls [`main`] when it sees it).
//!
//! It lives as long as the sandbox, holding its namespaces, and does three things, one at a time
//! in a single-threaded loop:
//! - starts each command talaria sends in a PID and mount namespace of its own, so that when the
//!   command's first process ends every process it started (`setsid`, double forks, daemons) is
//!   killed by the kernel, and so that its `/proc` shows only its own processes. Just before
//!   `execve` the command's process drops every capability (bounding and ambient sets, with
//!   `SECBIT_NOROOT` so that not even a root-owned program regains them), sets no-new-privileges
//!   (setuid programs do not elevate), takes its resource limits, and installs the seccomp
//!   filters ([`crate::seccomp`]);
//! - listens on the sandbox's loopback for the egress proxy and hands each connection, as a
//!   descriptor, to talaria, which serves it outside the sandbox ([`crate::proxy`]);
//! - reports each command's exit.
//!
//! When talaria closes the control socket (or dies), the helper kills what runs and exits, and
//! with it the sandbox's PID namespace ends.

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{CString, c_char};
use std::net::TcpListener;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::seccomp::Filters;
use crate::wire::{self, FromHelper, MAX_MESSAGE, Received, Spawn, ToHelper};

/// The egress proxy's port on the sandbox's own loopback.
pub const PROXY_PORT: u16 = 3128;

/// Stack of a command's first process until it calls `execve`.
const CHILD_STACK: usize = 256 * 1024;

/// Run the helper (its standard input is the control socket); never returns.
pub fn main() -> ! {
    let code = match serve() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("talaria sandbox helper: {e}");
            1
        }
    };
    std::process::exit(code)
}

fn serve() -> std::io::Result<()> {
    // The control socket arrives as standard input; move it out of the way of the commands.
    let control = std::io::stdin().as_fd().try_clone_to_owned()?;
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(&null).map_err(std::io::Error::from)?;
    drop(null);
    let filters = Filters::new().map_err(std::io::Error::other)?;
    let last_cap = last_capability();
    let listener = TcpListener::bind(("127.0.0.1", PROXY_PORT))?;
    listener.set_nonblocking(true)?;
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None).map_err(std::io::Error::from)?;
    let children =
        SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).map_err(std::io::Error::from)?;
    let say = |m: &FromHelper, fds: &[BorrowedFd<'_>]| wire::send(control.as_fd(), m, fds, true);
    say(&FromHelper::Ready { proxy_port: PROXY_PORT }, &[])?;

    let mut running: HashMap<Pid, u64> = HashMap::new();
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let mut fds = [
            PollFd::new(control.as_fd(), PollFlags::POLLIN),
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(children.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
        let ready = |i: usize| fds[i].revents().is_some_and(|r| !r.is_empty());
        let (control_ready, listener_ready, child_ready) = (ready(0), ready(1), ready(2));

        if child_ready {
            while children.read_signal().ok().flatten().is_some() {}
            reap(&mut running, &say)?;
        }
        if listener_ready {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => say(&FromHelper::Connection, &[stream.as_fd()])?,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        say(&FromHelper::Problem { error: format!("accepting a proxy connection: {e}") }, &[])?;
                        break;
                    }
                }
            }
        }
        if control_ready {
            match wire::receive::<ToHelper>(control.as_fd(), &mut buf) {
                Ok(Received::Closed) => break,
                Ok(Received::Message(ToHelper::Run(spawn), fds)) => match start(&spawn, &fds, &filters, last_cap) {
                    Ok(pid) => {
                        running.insert(pid, spawn.id);
                    }
                    Err(error) => {
                        // The command's stderr is where its user looks.
                        if let Some(stderr) = fds.get(2) {
                            let _ = nix::unistd::write(stderr, format!("talaria sandbox: {error}\n").as_bytes());
                        }
                        say(&FromHelper::Failed { id: spawn.id, error }, &[])?;
                    }
                },
                Ok(Received::Message(ToHelper::Kill { id }, _)) => {
                    if let Some((pid, _)) = running.iter().find(|(_, i)| **i == id) {
                        let _ = kill(*pid, Signal::SIGKILL);
                    }
                }
                Ok(Received::Message(ToHelper::Cgroup, fds)) => {
                    let joined = fds.into_iter().next().map(std::fs::File::from).map(|mut procs| {
                        use std::io::Write as _;
                        procs.write_all(b"0\n")
                    });
                    if let Some(Err(e)) = joined {
                        say(&FromHelper::Problem { error: format!("joining the process-count group: {e}") }, &[])?;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => say(&FromHelper::Problem { error: format!("reading talaria's message: {e}") }, &[])?,
            }
        }
    }
    for pid in running.keys() {
        let _ = kill(*pid, Signal::SIGKILL);
    }
    Ok(())
}

/// Report every command that ended.
fn reap(
    running: &mut HashMap<Pid, u64>,
    say: &impl Fn(&FromHelper, &[BorrowedFd<'_>]) -> std::io::Result<()>,
) -> std::io::Result<()> {
    loop {
        let (pid, code, signal) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, Some(code), None),
            Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, None, Some(sig as i32)),
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return Ok(()),
            Ok(_) => continue,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if let Some(id) = running.remove(&pid) {
            say(&FromHelper::Exited { id, code, signal }, &[])?;
        }
    }
}

/// Everything a command's first process needs, made before it exists: after `clone` it may
/// not allocate (another thread of a library could hold the allocator's lock; here there are
/// none, but the rule keeps the code honest).
struct Prepared {
    program: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
    cwd: CString,
    stdio: [RawFd; 3],
    max_file_bytes: u64,
    max_processes: u64,
    last_cap: u32,
}

fn start(spawn: &Spawn, fds: &[OwnedFd], filters: &Filters, last_cap: u32) -> Result<Pid, String> {
    if fds.len() != 3 {
        return Err(format!("expected stdin, stdout and stderr, got {} descriptors", fds.len()));
    }
    let first = spawn.argv.first().ok_or("no program to run")?;
    let path = spawn.env.iter().find(|(k, _)| k == "PATH").map_or("/usr/bin:/bin", |(_, v)| v.as_str());
    let program =
        find_program(first, path, Path::new(&spawn.cwd)).ok_or_else(|| format!("{first}: command not found"))?;
    let c = |s: &str| CString::new(s).map_err(|_| format!("`{s}` holds a NUL byte"));
    let prepared = Prepared {
        program: CString::new(program.into_os_string().into_encoded_bytes()).map_err(|_| "NUL in the path")?,
        argv: spawn.argv.iter().map(|a| c(a)).collect::<Result<_, _>>()?,
        env: spawn.env.iter().map(|(k, v)| c(&format!("{k}={v}"))).collect::<Result<_, _>>()?,
        cwd: c(&spawn.cwd)?,
        stdio: [fds[0].as_raw_fd(), fds[1].as_raw_fd(), fds[2].as_raw_fd()],
        max_file_bytes: spawn.max_file_bytes,
        max_processes: spawn.max_processes,
        last_cap,
    };
    let argv: Vec<*const c_char> =
        prepared.argv.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let envp: Vec<*const c_char> =
        prepared.env.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let mut stack = vec![0u8; CHILD_STACK];
    let flags = CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNS;
    let child = Box::new(|| first_process(&prepared, &argv, &envp, filters));
    // SAFETY: the child gets a copy of this single-threaded process (no CLONE_VM) and its own
    // stack; it only makes system calls and installs already-built filters before `execve` or
    // `_exit`, so nothing it does depends on state another thread could hold.
    let pid = unsafe { nix::sched::clone(child, &mut stack, flags, Some(libc::SIGCHLD)) }
        .map_err(|e| format!("cannot start the command's namespace: {e}"))?;
    Ok(pid)
}

/// The command's first process (PID 1 of its namespace): finish confining itself, then become
/// the command. Returns only on failure, with the exit code.
fn first_process(p: &Prepared, argv: &[*const c_char], envp: &[*const c_char], filters: &Filters) -> isize {
    // Failures go to the command's stderr, where its user looks.
    // SAFETY: the descriptor came with the request and stays open until `execve`.
    let stderr = unsafe { BorrowedFd::borrow_raw(p.stdio[2]) };
    let fail = |what: &str| -> isize {
        let errno = Errno::last();
        for part in [what.as_bytes(), errno.desc().as_bytes(), b"\n"] {
            let _ = nix::unistd::write(stderr, part);
        }
        126
    };
    use nix::mount::{MsFlags, mount};
    if mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>).is_err() {
        return fail("talaria sandbox: cannot make the mounts private: ");
    }
    let proc_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if mount(Some("proc"), "/proc", Some("proc"), proc_flags, None::<&str>).is_err() {
        return fail("talaria sandbox: cannot mount /proc: ");
    }
    // SAFETY (this block): plain system calls on descriptors this process owns and on its own
    // attributes; none touches memory other than the arguments passed.
    unsafe {
        if libc::setsid() < 0 {
            return fail("talaria sandbox: setsid: ");
        }
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        for (i, fd) in p.stdio.iter().enumerate() {
            if libc::dup2(*fd, i as libc::c_int) < 0 {
                return fail("talaria sandbox: dup2: ");
            }
        }
        let limit = |resource, value: u64| {
            let l = libc::rlimit { rlim_cur: value, rlim_max: value };
            libc::setrlimit(resource, &l)
        };
        if p.max_file_bytes > 0 && limit(libc::RLIMIT_FSIZE, p.max_file_bytes) < 0 {
            return fail("talaria sandbox: RLIMIT_FSIZE: ");
        }
        if p.max_processes > 0 && limit(libc::RLIMIT_NPROC, p.max_processes) < 0 {
            return fail("talaria sandbox: RLIMIT_NPROC: ");
        }
        limit(libc::RLIMIT_CORE, 0);
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            return fail("talaria sandbox: no_new_privs: ");
        }
        if libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 {
            return fail("talaria sandbox: clearing ambient capabilities: ");
        }
        for cap in 0..=p.last_cap {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 && Errno::last() != Errno::EINVAL {
                return fail("talaria sandbox: dropping capabilities: ");
            }
        }
        // No capabilities on execve, even for uid 0, and locked so.
        let securebits = 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x20; // NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED (and their locks)
        if libc::prctl(libc::PR_SET_SECUREBITS, securebits as libc::c_ulong, 0, 0, 0) < 0 {
            return fail("talaria sandbox: securebits: ");
        }
        if libc::chdir(p.cwd.as_ptr()) < 0 {
            return fail("talaria sandbox: cannot enter the working directory: ");
        }
    }
    if filters.apply().is_err() {
        return fail("talaria sandbox: cannot install the seccomp filter: ");
    }
    // SAFETY: program, argv and envp are NUL-terminated arrays of C strings that live in `p`.
    unsafe { libc::execve(p.program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    match Errno::last() {
        Errno::ENOENT => fail("talaria sandbox: cannot run the command: ") + 1,
        _ => fail("talaria sandbox: cannot run the command: "),
    }
}

/// Where `program` is: itself (from `cwd`) when it names a path that exists (`execve` says
/// what is wrong with it, if anything); else the first executable of that name on `path`.
pub fn find_program(program: &str, path: &str, cwd: &Path) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        let p = cwd.join(program);
        return p.exists().then_some(p);
    }
    path.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(program)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The highest capability number this kernel knows.
fn last_capability() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(63)
}
