//! A real sandbox: bubblewrap, the helper binary, commands, limits and the proxy's gate.
//! Skipped (with a message) where bubblewrap is not installed; CI installs it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use talaria_sandbox::proxy::{Gate, Refusal};
use talaria_sandbox::{Command, Exit, Launcher, Limits, Policy, Sandbox};
use tokio::io::AsyncReadExt as _;

/// Admits one name, to one address; remembers what it was asked.
struct OneHost {
    name: String,
    addr: SocketAddr,
    asked: Mutex<Vec<String>>,
}

impl Gate for OneHost {
    fn admit<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<SocketAddr, Refusal>> + Send + 'a>> {
        self.asked.lock().expect("lock").push(format!("{host}:{port}"));
        let answer = if host == self.name {
            Ok(self.addr)
        } else {
            Err(Refusal::Denied(format!("{host} is not granted to this test")))
        };
        Box::pin(async move { answer })
    }
}

fn launcher() -> Option<Launcher> {
    match Launcher::find(None, PathBuf::from(env!("CARGO_BIN_EXE_talaria-sandbox-helper"))) {
        Ok(l) => Some(l),
        // CI installs bubblewrap: there a missing one is a failure, not a skip.
        Err(e) if std::env::var_os("CI").is_some() => panic!("{e}"),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

struct Setup {
    _dirs: tempfile::TempDir,
    home: PathBuf,
    workspace: PathBuf,
    policy: Policy,
}

fn setup() -> Setup {
    let dirs = tempfile::tempdir().expect("tempdir");
    let root = dirs.path().canonicalize().expect("canon");
    let home = root.join("home");
    let workspace = home.join("proj");
    for d in [".ssh", ".talaria", "proj/.git/hooks", ".cargo"] {
        std::fs::create_dir_all(home.join(d)).expect("mkdir");
    }
    std::fs::write(home.join(".ssh/id_rsa"), "SECRET-KEY-MARKER").expect("key");
    std::fs::write(home.join(".talaria/.env"), "OPENAI_API_KEY=sk-MARKER").expect("env");
    std::fs::write(home.join(".cargo/ok"), "toolchain\n").expect("cargo");
    std::fs::write(workspace.join(".git/config"), "[core]\n").expect("git config");
    let policy = Policy {
        workspace: workspace.clone(),
        read: vec![home.join(".cargo")],
        write: Vec::new(),
        hidden: vec![home.join(".talaria")],
        home: Some(home.clone()),
        scratch: Vec::new(),
        limits: Limits { max_processes: 64, max_file_mb: 1, tmp_mb: 16 },
    };
    Setup { _dirs: dirs, home, workspace, policy }
}

fn env(home: &Path) -> Vec<(String, String)> {
    vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()), ("HOME".into(), home.display().to_string())]
}

/// Run `script` with `sh -c`; its exit, stdout and stderr.
async fn sh(sandbox: &Sandbox, s: &Setup, script: &str) -> (Exit, String, String) {
    let mut child = sandbox
        .spawn(Command {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            cwd: s.workspace.clone(),
            env: env(&s.home),
            stdin: false,
        })
        .expect("spawn");
    let (mut out, mut err) = (String::new(), String::new());
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let (exit, _, _) = tokio::time::timeout(
        Duration::from_secs(30),
        futures_join(child.wait(), so.read_to_string(&mut out), se.read_to_string(&mut err)),
    )
    .await
    .expect("finished in time");
    (exit, out, err)
}

async fn futures_join<A: std::future::Future, B: std::future::Future, C: std::future::Future>(
    a: A,
    b: B,
    c: C,
) -> (A::Output, B::Output, C::Output) {
    tokio::join!(a, b, c)
}

async fn start(s: &Setup, gate: Arc<dyn Gate>) -> Option<Sandbox> {
    let launcher = launcher()?;
    Some(Sandbox::start(&launcher, &s.policy, gate).await.expect("the sandbox starts"))
}

fn nobody() -> Arc<dyn Gate> {
    Arc::new(OneHost { name: String::new(), addr: "127.0.0.1:9".parse().expect("addr"), asked: Mutex::default() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_see_the_workspace_and_toolchain_and_nothing_of_the_home() {
    let s = setup();
    let Some(sb) = start(&s, nobody()).await else { return };
    let (exit, out, err) = sh(&sb, &s, "pwd; echo made > new.txt; cat ~/.cargo/ok; id -u").await;
    assert_eq!(exit, Exit::Code(0), "{err}");
    let uid = nix::unistd::getuid().as_raw();
    assert_eq!(out, format!("{}\ntoolchain\n{uid}\n", s.workspace.display()));
    assert_eq!(std::fs::read_to_string(s.workspace.join("new.txt")).expect("written"), "made\n");

    let (exit, out, err) = sh(&sb, &s, "cat ~/.ssh/id_rsa; cat ~/.talaria/.env; ls -A ~; exit 3").await;
    assert_eq!(exit, Exit::Code(3));
    assert!(!out.contains("MARKER") && !err.contains("MARKER"), "{out}{err}");
    assert!(err.contains("No such file or directory"), "{err}");
    assert_eq!(out, ".cargo\nproj\n", "the home shows only what was given");

    let (exit, _, err) = sh(&sb, &s, "echo x >> ~/.bashrc").await;
    assert_ne!(exit, Exit::Code(0));
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(!s.home.join(".bashrc").exists());

    let (exit, _, err) = sh(&sb, &s, "echo evil > .git/hooks/pre-commit; echo x >> .git/config").await;
    assert_ne!(exit, Exit::Code(0));
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(!s.workspace.join(".git/hooks/pre-commit").exists());
    assert_eq!(std::fs::read_to_string(s.workspace.join(".git/config")).expect("config"), "[core]\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_command_starts_dies_with_it() {
    let s = setup();
    let Some(sb) = start(&s, nobody()).await else { return };
    let marker = format!("sleep 47{}", std::process::id() % 100);
    let (exit, out, _) = sh(&sb, &s, &format!("setsid -f {marker}; (nohup {marker} &); echo $$")).await;
    assert_eq!(exit, Exit::Code(0));
    assert_eq!(out, "1\n", "the command is PID 1 of its own namespace");
    // The kernel kills the namespace's processes as its first one ends.
    let mut left = 1;
    for _ in 0..50 {
        let ps = std::process::Command::new("pgrep").args(["-f", &marker]).output().expect("pgrep");
        left = String::from_utf8_lossy(&ps.stdout).lines().count();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(left, 0, "no process outlived the command");

    let (_, out, _) = sh(&sb, &s, "ps -e -o pid=,comm= | wc -l; kill -0 1 && echo self").await;
    assert!(out.trim_end().ends_with("self"), "{out}");
    let seen: usize = out.lines().next().and_then(|l| l.trim().parse().ok()).expect("count");
    assert!(seen <= 4, "only the command's own processes are visible: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_network_but_the_proxy_and_the_gate_decides() {
    let s = setup();
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = upstream.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut c, _)) = upstream.accept().await {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt as _;
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf).await;
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello").await;
            });
        }
    });
    let gate = Arc::new(OneHost { name: "granted.test".into(), addr, asked: Mutex::default() });
    let Some(sb) = start(&s, gate.clone()).await else { return };
    // Straight to the host's listener: nothing there, in the sandbox's own network.
    let (exit, _, err) = sh(&sb, &s, &format!("curl -sS --noproxy '*' http://127.0.0.1:{}/", addr.port())).await;
    assert_ne!(exit, Exit::Code(0));
    assert!(err.contains("Couldn't connect") || err.contains("Failed to connect"), "{err}");
    // Through the proxy, a granted name reaches it; another is refused with the gate's reason.
    let (exit, out, err) = sh(&sb, &s, "curl -sS http://granted.test/").await;
    assert_eq!((exit, out.as_str()), (Exit::Code(0), "hello"), "{err}");
    let (exit, out, _) = sh(&sb, &s, "curl -sS http://other.test/").await;
    assert_eq!(exit, Exit::Code(0));
    assert_eq!(out, "talaria: other.test is not granted to this test\n");
    assert_eq!(*gate.asked.lock().expect("lock"), ["granted.test:80", "other.test:80"]);
    // UDP (a DNS query) is refused by the filter.
    let (_, out, err) =
        sh(&sb, &s, "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)' && echo opened")
            .await;
    assert!(!out.contains("opened") && err.contains("Operation not permitted"), "{out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_and_privileges_are_gone() {
    let s = setup();
    let Some(sb) = start(&s, nobody()).await else { return };
    let (_, _, err) = sh(&sb, &s, "head -c 3000000 /dev/zero > big").await;
    assert!(err.contains("File size limit exceeded"), "{err}");
    let size = std::fs::metadata(s.workspace.join("big")).map(|m| m.len()).unwrap_or(0);
    assert!(size <= 1 << 20, "bounded at 1 MiB: {size}");

    let (_, out, _) = sh(&sb, &s, "grep -E '^(CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status").await;
    assert_eq!(
        out,
        "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"
    );
    for (script, refusal) in [
        ("unshare -r true", "Operation not permitted"),
        ("mount -t tmpfs x /tmp", "ermission denied"),
        ("/usr/sbin/chroot / true", "Operation not permitted"),
    ] {
        let (exit, _, err) = sh(&sb, &s, script).await;
        assert_ne!(exit, Exit::Code(0), "{script}");
        assert!(err.contains(refusal), "{script}: {err}");
    }
    // A fork bomb meets the process limit, and the sandbox still answers afterwards.
    let (_, _, err) = sh(&sb, &s, "i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); done; true").await;
    assert!(err.contains("fork"), "the 65th process was refused: {err}");
    let (exit, out, _) = sh(&sb, &s, "echo alive").await;
    assert_eq!((exit, out.as_str()), (Exit::Code(0), "alive\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_cut_short_by_a_deadline_still_sees_the_kill_and_nothing_is_left() {
    let s = setup();
    let Some(sb) = start(&s, nobody()).await else { return };
    let marker = format!("sleep 48{}", std::process::id() % 100);
    let mut child = sb
        .spawn(Command {
            argv: vec!["sh".into(), "-c".into(), format!("{marker} & {marker}")],
            cwd: s.workspace.clone(),
            env: env(&s.home),
            stdin: false,
        })
        .expect("spawn");
    assert!(tokio::time::timeout(Duration::from_millis(300), child.wait()).await.is_err(), "still running");
    child.kill();
    assert_eq!(child.wait().await, Exit::Signal(9));
    let ps = std::process::Command::new("pgrep").args(["-f", &marker]).output().expect("pgrep");
    assert_eq!(String::from_utf8_lossy(&ps.stdout), "", "gone by the time the exit is known");
}
