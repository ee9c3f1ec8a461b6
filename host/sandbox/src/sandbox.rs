//! talaria's side of a sandbox: start it with bubblewrap, run commands in it, serve its
//! connections to the egress proxy, and stop it.

use std::collections::HashMap;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use tokio::io::AsyncReadExt as _;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use crate::cgroup::ProcessGroup;
use crate::policy::Policy;
use crate::proxy::Gate;
use crate::wire::{self, FromHelper, MAX_MESSAGE, Received, Spawn, ToHelper};

/// How long a sandbox may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Why commands cannot run confined, and what would fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    pub reason: String,
    pub fix: String,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "commands cannot run in talaria's sandbox: {}", self.reason)?;
        if !self.fix.is_empty() {
            write!(f, ". {}", self.fix)?;
        }
        Ok(())
    }
}

impl std::error::Error for Unavailable {}

/// What to tell a user who cannot fix the sandbox right now.
pub const OPT_OUT: &str = "Or, knowing that commands then run as you with all your files and network, set `commands = \"unconfined\"` under [sandbox] in config.toml";

impl Unavailable {
    fn new(reason: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { reason: reason.into(), fix: fix.into() }
    }

    /// Bubblewrap is not installed (or not where it was said to be).
    pub fn no_bwrap(looked: &str) -> Self {
        Self::new(
            format!("bubblewrap (`bwrap`) was not found ({looked})"),
            format!(
                "Install it: `sudo apt-get install bubblewrap` (Debian, Ubuntu), `sudo dnf install bubblewrap` (Fedora), `sudo pacman -S bubblewrap` (Arch). {OPT_OUT}."
            ),
        )
    }

    /// Not Linux: no sandbox here yet.
    pub fn unsupported_platform() -> Self {
        Self::new(
            format!("talaria confines commands only on Linux, and this is {}", std::env::consts::OS),
            OPT_OUT.to_string() + ".",
        )
    }

    /// What bubblewrap said when it failed to start.
    fn from_bwrap(stderr: &str) -> Self {
        let said = stderr.trim().lines().last().unwrap_or("").trim().to_string();
        let userns = [
            "No permissions to create",
            "setting up uid map",
            "Operation not permitted",
            "No space left on device",
            "ENOSPC",
            "namespace",
            "Permission denied",
        ];
        if userns.iter().any(|p| said.contains(p)) {
            return Self::new(
                format!("the kernel refused bubblewrap a user namespace ({said})"),
                format!(
                    "Allow unprivileged user namespaces: `sudo sysctl -w kernel.unprivileged_userns_clone=1` (Debian) and `sudo sysctl -w user.max_user_namespaces=15000`; on Ubuntu 24.04 and later also `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (or give bwrap an AppArmor profile); in a container, run it with user namespaces allowed. {OPT_OUT}."
                ),
            );
        }
        let said = if said.is_empty() { "no message".to_string() } else { said };
        Self::new(format!("bubblewrap failed to start the sandbox ({said})"), format!("{OPT_OUT}."))
    }
}

/// How sandboxes are started: the `bwrap` executable and talaria's own (the helper).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    pub bwrap: PathBuf,
    pub helper: PathBuf,
}

impl Launcher {
    /// `bwrap` from `PATH` (or the given path), and `helper` (an executable that runs
    /// [`crate::helper::main`] when started with [`crate::bwrap::HELPER_ARG`]).
    ///
    /// # Errors
    /// Not Linux, or no `bwrap`.
    pub fn find(bwrap: Option<&Path>, helper: PathBuf) -> Result<Self, Unavailable> {
        if !cfg!(target_os = "linux") {
            return Err(Unavailable::unsupported_platform());
        }
        let bwrap = match bwrap {
            Some(path) if path.is_file() => path.to_path_buf(),
            Some(path) => return Err(Unavailable::no_bwrap(&format!("[sandbox] bwrap = {}", path.display()))),
            None => std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths)
                .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
                .map(|d| d.join("bwrap"))
                .find(|p| p.is_file())
                .ok_or_else(|| Unavailable::no_bwrap("looked in PATH and /usr/bin"))?,
        };
        Ok(Self { bwrap, helper })
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// The sandbox went away before it said.
    Lost,
}

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub argv: Vec<String>,
    /// Inside the sandbox's view (the same paths as outside).
    pub cwd: PathBuf,
    /// The environment; the proxy's variables and `TMPDIR` are added.
    pub env: Vec<(String, String)>,
    /// Give it a pipe for standard input (else `/dev/null`).
    pub stdin: bool,
}

/// A command running in a sandbox. Dropping it kills the command and everything it started.
pub struct Child {
    pub id: u64,
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    exit: Option<oneshot::Receiver<Exit>>,
    ended: Option<Exit>,
    shared: Arc<Shared>,
}

impl Child {
    /// Wait for it to end. Cancelling the wait (a deadline) loses nothing: waiting again
    /// picks up where it left off.
    pub async fn wait(&mut self) -> Exit {
        if let Some(exit) = self.ended {
            return exit;
        }
        let exit = match self.exit.as_mut() {
            Some(rx) => rx.await.unwrap_or(Exit::Lost),
            None => Exit::Lost,
        };
        self.exit = None;
        self.ended = Some(exit);
        exit
    }

    /// Kill it (and everything it started) now.
    pub fn kill(&self) {
        self.shared.send(&ToHelper::Kill { id: self.id }, &[]);
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.ended.is_none() {
            self.kill();
        }
    }
}

/// State the reader thread and the handles share.
struct Shared {
    /// talaria's end of the control socket (blocking: the reader thread waits on it; sends
    /// never wait).
    control: OwnedFd,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Exit>>>,
    next_id: AtomicU64,
    alive: AtomicBool,
}

impl Shared {
    /// Send a message (the socket has room for many; a full one means the helper is stuck).
    fn send(&self, message: &ToHelper, fds: &[std::os::fd::BorrowedFd<'_>]) -> bool {
        wire::send(self.control.as_fd(), message, fds, false).is_ok()
    }

    fn finish(&self, id: u64, exit: Exit) {
        if let Some(tx) = lock(&self.waiting).remove(&id) {
            let _ = tx.send(exit);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running sandbox: its namespaces, held by the helper, for as many commands as are sent to
/// it. Dropping it ends the sandbox and every command still running in it.
pub struct Sandbox {
    shared: Arc<Shared>,
    bwrap: tokio::process::Child,
    proxy_port: u16,
    max_file_bytes: u64,
    max_processes: u64,
    /// The process-count group, when one could be made (removed when the sandbox ends).
    group: Option<ProcessGroup>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // The helper dies with bubblewrap, the sandbox's processes with the helper, and the
        // reader thread sees the socket close.
        let _ = self.bwrap.start_kill();
    }
}

impl Sandbox {
    /// Start a sandbox for `policy`; connections its commands make to the proxy go to `gate`.
    ///
    /// # Errors
    /// [`Unavailable`] with bubblewrap's reason when it cannot start.
    pub async fn start(launcher: &Launcher, policy: &Policy, gate: Arc<dyn Gate>) -> Result<Self, Unavailable> {
        policy.check().map_err(|why| Unavailable::new(why, ""))?;
        let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
            .map_err(|e| Unavailable::new(format!("cannot make a socket pair: {e}"), OPT_OUT.to_string() + "."))?;
        let mut cmd = tokio::process::Command::new(&launcher.bwrap);
        cmd.args(crate::bwrap::args(policy, &launcher.helper))
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .env_clear()
            .kill_on_drop(true);
        let mut bwrap = cmd
            .spawn()
            .map_err(|e| Unavailable::from_bwrap(&format!("cannot run {}: {e}", launcher.bwrap.display())))?;
        let mut stderr = bwrap.stderr.take();
        let shared = Arc::new(Shared {
            control: ours,
            waiting: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            alive: AtomicBool::new(true),
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let reader = shared.clone();
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("sandbox-control".into())
            .spawn(move || read_all(&reader, gate, &runtime, ready_tx))
            .map_err(|e| Unavailable::new(format!("cannot start a thread: {e}"), String::new()))?;

        let ready = tokio::time::timeout(START_TIMEOUT, ready_rx).await;
        let proxy_port = match ready {
            Ok(Ok(proxy_port)) => proxy_port,
            Ok(Err(_)) | Err(_) => {
                let _ = bwrap.start_kill();
                let mut said = String::new();
                if let Some(err) = stderr.as_mut() {
                    let _ = tokio::time::timeout(Duration::from_secs(2), err.read_to_string(&mut said)).await;
                }
                if ready.is_err() && said.trim().is_empty() {
                    said = format!("it did not start within {} s", START_TIMEOUT.as_secs());
                }
                return Err(Unavailable::from_bwrap(&said));
            }
        };
        // bwrap's later words (there should be none) go to the log.
        if let Some(mut err) = stderr {
            tokio::spawn(async move {
                let mut said = String::new();
                let _ = err.read_to_string(&mut said).await;
                if !said.trim().is_empty() {
                    tracing::warn!("sandbox: {}", said.trim());
                }
            });
        }
        let group = ProcessGroup::create(policy.limits.max_processes);
        if let Some(g) = &group
            && let Ok(procs) = g.procs()
        {
            shared.send(&ToHelper::Cgroup, &[procs.as_fd()]);
        }
        Ok(Self {
            shared,
            bwrap,
            proxy_port,
            max_file_bytes: policy.limits.max_file_mb.saturating_mul(1 << 20),
            // A process-count group bounds the whole sandbox; without one the user's limit does,
            // as far as the kernel applies it (not to root).
            max_processes: if group.is_some() { 0 } else { policy.limits.max_processes },
            group,
        })
    }

    /// Whether the sandbox still runs (a sandbox whose helper died takes no more commands).
    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::Relaxed)
    }

    /// Where the proxy listens inside, as commands are told (`http://127.0.0.1:PORT`).
    pub fn proxy_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.proxy_port)
    }

    /// Start `command`.
    ///
    /// # Errors
    /// The sandbox has ended, or pipes cannot be made.
    pub fn spawn(&self, command: Command) -> std::io::Result<Child> {
        if !self.is_alive() {
            return Err(std::io::Error::other("the sandbox has ended"));
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (stdin_tx, stdin_rx) = if command.stdin {
            let (tx, rx) = pipe::pipe()?;
            (Some(tx), rx.into_blocking_fd()?)
        } else {
            (None, OwnedFd::from(std::fs::File::open("/dev/null")?))
        };
        let (out_tx, out_rx) = pipe::pipe()?;
        let (err_tx, err_rx) = pipe::pipe()?;
        let (out_tx, err_tx) = (out_tx.into_blocking_fd()?, err_tx.into_blocking_fd()?);
        let mut env = command.env;
        let proxy = self.proxy_url();
        let set = [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "npm_config_proxy",
            "npm_config_https_proxy",
        ];
        env.retain(|(k, _)| !set.contains(&k.as_str()) && k != "NO_PROXY" && k != "no_proxy" && k != "TMPDIR");
        env.extend(set.iter().map(|k| (k.to_string(), proxy.clone())));
        env.push(("NO_PROXY".into(), "localhost,127.0.0.1,::1".into()));
        env.push(("no_proxy".into(), "localhost,127.0.0.1,::1".into()));
        env.push(("TMPDIR".into(), "/tmp".into()));
        // The home directory is read-only: caches go to the sandbox's /tmp, unless told otherwise.
        for (name, place) in
            [("XDG_CACHE_HOME", "/tmp/.cache"), ("npm_config_cache", "/tmp/.npm"), ("PIP_CACHE_DIR", "/tmp/.cache/pip")]
        {
            if !env.iter().any(|(k, _)| k == name) {
                env.push((name.into(), place.into()));
            }
        }
        let spawn = Spawn {
            id,
            argv: command.argv,
            cwd: command.cwd.to_string_lossy().into_owned(),
            env,
            max_file_bytes: self.max_file_bytes,
            max_processes: self.max_processes,
        };
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.waiting).insert(id, tx);
        if !self.shared.send(&ToHelper::Run(spawn), &[stdin_rx.as_fd(), out_tx.as_fd(), err_tx.as_fd()]) {
            lock(&self.shared.waiting).remove(&id);
            return Err(std::io::Error::other("the sandbox's helper is gone"));
        }
        Ok(Child {
            id,
            stdin: stdin_tx,
            stdout: Some(out_rx),
            stderr: Some(err_rx),
            exit: Some(rx),
            ended: None,
            shared: self.shared.clone(),
        })
    }
}

/// Route the helper's messages until it closes the socket: the first, `Ready`, to `ready`;
/// exits to the commands waiting for them; proxy connections to `gate`, on `runtime`.
fn read_all(shared: &Shared, gate: Arc<dyn Gate>, runtime: &tokio::runtime::Handle, ready: oneshot::Sender<u16>) {
    let mut ready = Some(ready);
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let (message, fds) = match wire::receive::<FromHelper>(shared.control.as_fd(), &mut buf) {
            Ok(Received::Message(m, fds)) => (m, fds),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Ok(Received::Closed) | Err(_) => break,
        };
        match message {
            FromHelper::Ready { proxy_port } => {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(proxy_port);
                }
            }
            FromHelper::Exited { id, code, signal } => {
                let exit = match (code, signal) {
                    (Some(c), _) => Exit::Code(c),
                    (None, Some(s)) => Exit::Signal(s),
                    (None, None) => Exit::Lost,
                };
                shared.finish(id, exit);
            }
            FromHelper::Failed { id, error } => {
                // The helper wrote the reason to the command's stderr.
                tracing::debug!("sandbox: command {id} did not start: {error}");
                shared.finish(id, Exit::Code(127));
            }
            FromHelper::Connection => {
                for fd in fds {
                    let gate = gate.clone();
                    runtime.spawn(async move {
                        let stream = std::net::TcpStream::from(fd);
                        let stream =
                            match stream.set_nonblocking(true).and_then(|()| tokio::net::TcpStream::from_std(stream)) {
                                Ok(s) => s,
                                Err(e) => return tracing::debug!("sandbox proxy: {e}"),
                            };
                        match crate::proxy::serve(stream, gate.as_ref()).await {
                            Ok(served) => tracing::debug!("sandbox proxy: {served:?}"),
                            Err(e) => tracing::debug!("sandbox proxy: {e}"),
                        }
                    });
                }
            }
            FromHelper::Problem { error } => tracing::warn!("sandbox: {error}"),
        }
    }
    shared.alive.store(false, Ordering::Relaxed);
    let waiting: Vec<_> = lock(&shared.waiting).drain().collect();
    for (_, tx) in waiting {
        let _ = tx.send(Exit::Lost);
    }
}

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// `bwrap --version`'s answer.
    pub version: String,
    /// What bounds the number of processes.
    pub process_limit: ProcessLimit,
    /// How long starting the sandbox and running `true` took.
    pub took: Duration,
}

/// What keeps a fork bomb in a sandbox from filling the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessLimit {
    /// A `pids` control group per sandbox.
    Cgroup,
    /// `RLIMIT_NPROC` (the kernel applies it to users other than root).
    Rlimit,
    /// Nothing: talaria runs as root and no `pids` control group can be made.
    Unbounded,
}

/// Start a throwaway sandbox and run `true` in it: whether commands can run confined here, as
/// `talaria doctor` reports it.
///
/// # Errors
/// [`Unavailable`] with the reason and the fix.
pub async fn probe(launcher: &Launcher) -> Result<Probe, Unavailable> {
    struct Gone(PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    struct Nobody;
    impl Gate for Nobody {
        fn admit<'a>(
            &'a self,
            _host: &'a str,
            _port: u16,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<std::net::SocketAddr, crate::proxy::Refusal>> + Send + 'a>,
        > {
            Box::pin(async { Err(crate::proxy::Refusal::Denied("no network in the probe".into())) })
        }
    }
    let started = std::time::Instant::now();
    let dir =
        std::env::temp_dir().join(format!("talaria-probe-{}-{}", std::process::id(), started.elapsed().as_nanos()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Unavailable::new(format!("cannot make {}: {e}", dir.display()), String::new()))?;
    let dir = Gone(dir.canonicalize().unwrap_or(dir));
    let policy = Policy {
        workspace: dir.0.clone(),
        read: Vec::new(),
        write: Vec::new(),
        hidden: Vec::new(),
        home: None,
        scratch: Vec::new(),
        limits: crate::policy::Limits::default(),
    };
    let sandbox = Sandbox::start(launcher, &policy, Arc::new(Nobody)).await?;
    let command = Command {
        argv: vec!["sh".into(), "-c".into(), "true".into()],
        cwd: dir.0.clone(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        stdin: false,
    };
    let mut child = sandbox
        .spawn(command)
        .map_err(|e| Unavailable::new(format!("cannot run a command in it: {e}"), String::new()))?;
    let mut said = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut said).await;
    }
    match child.wait().await {
        Exit::Code(0) => {}
        other => {
            return Err(Unavailable::new(
                format!("a command in the sandbox failed ({other:?}): {}", said.trim()),
                OPT_OUT.to_string() + ".",
            ));
        }
    }
    let took = started.elapsed();
    let version = std::process::Command::new(&launcher.bwrap)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let process_limit = if sandbox.group.is_some() {
        ProcessLimit::Cgroup
    } else if nix::unistd::getuid().is_root() {
        ProcessLimit::Unbounded
    } else {
        ProcessLimit::Rlimit
    };
    Ok(Probe { version, process_limit, took })
}
