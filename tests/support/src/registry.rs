//! A local OCI registry for tests: Debian's `docker-registry` (CNCF distribution 2.8) serving
//! plain http on a free loopback port, with its storage in a temporary directory.
//!
//! [`Registry::start`] waits until `GET /v2/` answers; dropping the [`Registry`] kills the
//! server and removes its storage. Its own logs are kept quiet (level `error`) and are shown only
//! if it does not come up.
//!
//! ```no_run
//! let registry = talaria_test_support::registry::Registry::start();
//! println!("oci://{}/plugins/hello:1.0.0", registry.host());
//! ```

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BINARY: &str = "/usr/bin/docker-registry";
const READY_WITHIN: Duration = Duration::from_secs(10);
const TOKEN_HEADER: &str = "X-Talaria-Test-Registry";
/// Another process may take the port between our probe and the server's bind; try a few.
const PORT_ATTEMPTS: usize = 3;

/// A running `docker-registry serve`, killed on drop.
pub struct Registry {
    child: Child,
    host: String,
    dir: tempfile::TempDir,
}

impl Registry {
    /// Start an anonymous registry (anyone may pull and push).
    ///
    /// # Panics
    /// If `docker-registry` is not installed, or it does not answer within 10 s (the panic
    /// message carries its logs).
    pub fn start() -> Registry {
        Self::start_with(None)
    }

    /// Start a registry that requires HTTP basic auth for everything, with one `htpasswd` line
    /// (`user:bcrypt-hash`).
    ///
    /// # Panics
    /// As [`Registry::start`].
    pub fn start_with_htpasswd(htpasswd: &str) -> Registry {
        Self::start_with(Some(htpasswd))
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        self.host.clone()
    }

    /// The registry's storage root (`docker/registry/v2/...` lives below it), for tests that
    /// tamper with what it serves.
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn start_with(htpasswd: Option<&str>) -> Registry {
        if !Path::new(BINARY).exists() {
            panic!("docker-registry is not installed: apt-get install docker-registry");
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("registry temp dir: {e}"));
        let mut failures = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            // Each start is told apart by a response header, so a registry another test started
            // on the same port (between our probe and its bind) is not mistaken for this one.
            let token = format!("{}-{port}-{}", std::process::id(), dir.path().display());
            let config = config(dir.path(), port, &token, htpasswd);
            let config_path = dir.path().join("config.yml");
            std::fs::write(&config_path, config).unwrap_or_else(|e| panic!("{}: {e}", config_path.display()));
            let log_path = dir.path().join("registry.log");
            let log = std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("{}: {e}", log_path.display()));
            let log_err = log.try_clone().unwrap_or_else(|e| panic!("{}: {e}", log_path.display()));
            let mut child = Command::new(BINARY)
                .arg("serve")
                .arg(&config_path)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log_err)
                .spawn()
                .unwrap_or_else(|e| panic!("could not start {BINARY}: {e}"));
            let host = format!("127.0.0.1:{port}");
            match wait_until_ready(&mut child, &host, &token) {
                Ok(()) => return Registry { child, host, dir },
                Err(why) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let logs = std::fs::read_to_string(&log_path).unwrap_or_default();
                    failures.push(format!("on {host}: {why}\n--- registry log ---\n{}", logs.trim_end()));
                }
            }
        }
        panic!("docker-registry did not come up:\n{}", failures.join("\n"));
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    listener.local_addr().unwrap_or_else(|e| panic!("addr: {e}")).port()
}

fn config(dir: &Path, port: u16, token: &str, htpasswd: Option<&str>) -> String {
    let mut config = format!(
        "version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {data}
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:{port}
  headers:
    {TOKEN_HEADER}: [\"{token}\"]
",
        data = dir.join("data").display()
    );
    if let Some(line) = htpasswd {
        let path = dir.join("htpasswd");
        std::fs::write(&path, format!("{line}\n")).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        config.push_str(&format!("auth:\n  htpasswd:\n    realm: talaria-test\n    path: {}\n", path.display()));
    }
    config
}

/// Poll `GET /v2/` until our server answers with any HTTP status (401 counts: it is up).
fn wait_until_ready(child: &mut Child, host: &str, token: &str) -> Result<(), String> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("it exited with {status}"));
        }
        if answers(host, token) {
            return Ok(());
        }
        if start.elapsed() > READY_WITHIN {
            return Err(format!("GET /v2/ did not answer within {READY_WITHIN:?}"));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Whether `host` answers `GET /v2/` with our token header.
fn answers(host: &str, token: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(host) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let request = format!("GET /v2/ HTTP/1.0\r\nHost: {host}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let _ = stream.shutdown(Shutdown::Write);
    let mut response = Vec::new();
    let _ = stream.take(64 * 1024).read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response);
    let head = response.split("\r\n\r\n").next().unwrap_or("");
    head.starts_with("HTTP/")
        && head.lines().any(|line| {
            line.split_once(':')
                .is_some_and(|(name, value)| name.eq_ignore_ascii_case(TOKEN_HEADER) && value.trim() == token)
        })
}
