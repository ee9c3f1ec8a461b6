//! A real PostgreSQL server for the store's tests: Debian's `postgresql` package, a throwaway
//! cluster started once per test binary ([`Postgres::shared`]) on a unix socket in a temporary
//! directory, with durability off (`fsync=off`: a test cluster never outlives its process), and
//! stopped when the test process ends. [`Postgres::database`] makes a fresh database per test.
//!
//! The server binaries are found under `/usr/lib/postgresql/VERSION/bin` (the newest), or in
//! `TALARIA_PG_BIN`. PostgreSQL refuses to run as root: as root, the cluster belongs to the
//! `postgres` user the package creates, and its commands run through `runuser`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The running server.
pub struct Postgres {
    /// The directory holding its unix socket.
    pub socket_dir: PathBuf,
    bin: PathBuf,
    /// The watchdog shell running it.
    _process: std::process::Child,
    _dir: tempfile::TempDir,
}

/// Where the server binaries are.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TALARIA_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
                    let bin = e.path().join("bin");
                    bin.join("initdb").is_file().then_some((version, bin))
                })
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).expect(
        "PostgreSQL's server is not installed: `apt-get install postgresql` (or set TALARIA_PG_BIN to its bin directory)",
    )
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A command run as the cluster's owner.
fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl Postgres {
    /// The server of this test process, started on first use.
    pub fn shared() -> &'static Postgres {
        static SHARED: OnceLock<Postgres> = OnceLock::new();
        SHARED.get_or_init(Postgres::start)
    }

    fn start() -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::Builder::new().prefix("talaria-pg").tempdir().expect("dir");
        let (data, socket_dir) = (dir.path().join("data"), dir.path().join("sock"));
        std::fs::create_dir(&socket_dir).expect("socket dir");
        if is_root() {
            let owned = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()).status();
            assert!(owned.is_ok_and(|s| s.success()), "cannot give {} to the postgres user", dir.path().display());
        }
        let init = as_owner(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
            .stdout(Stdio::null())
            .output()
            .expect("initdb");
        assert!(init.status.success(), "initdb failed: {}", String::from_utf8_lossy(&init.stderr));
        // It goes when this process goes: a watchdog shell stops it (`pg_ctl stop`, as its owner)
        // once the parent is gone, and removes its directory.
        let runner = if is_root() { "runuser -u postgres -- " } else { "" };
        let script = format!(
            "{runner}{} -D {data} -k {sock} -c listen_addresses= -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 & child=$!; \
             while kill -0 {parent} 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 1; done; \
             {runner}{} -D {data} -m immediate stop >/dev/null 2>&1; wait $child; rm -rf {dir}",
            bin.join("postgres").display(),
            bin.join("pg_ctl").display(),
            data = data.display(),
            sock = socket_dir.display(),
            parent = std::process::id(),
            dir = dir.path().display(),
        );
        let process = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres");
        let server = Postgres { socket_dir, bin, _process: process, _dir: dir };
        let start = Instant::now();
        loop {
            let ready = Command::new(server.bin.join("pg_isready"))
                .arg("-h")
                .arg(&server.socket_dir)
                .args(["-U", "postgres", "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return server;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "PostgreSQL did not start within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A new, empty database; returns its URL (`postgresql:///NAME?host=SOCKET_DIR&user=postgres`).
    pub fn database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let name = format!("t{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let made = Command::new(self.bin.join("createdb"))
            .arg("-h")
            .arg(&self.socket_dir)
            .args(["-U", "postgres", &name])
            .output()
            .expect("createdb");
        assert!(made.status.success(), "createdb {name}: {}", String::from_utf8_lossy(&made.stderr));
        self.url(&name)
    }

    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgresql:///{name}?host={}&user=postgres", self.socket_dir.display())
    }

    /// Run `sql` in database `name` with psql; returns its unaligned output.
    pub fn psql(&self, name: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .arg("-h")
            .arg(&self.socket_dir)
            .args(["-U", "postgres", "-d", name, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .expect("psql");
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throwaway_cluster_serves_fresh_databases() {
        let pg = Postgres::shared();
        let url = pg.database();
        let name = url.trim_start_matches("postgresql:///").split('?').next().expect("name").to_string();
        assert_eq!(pg.psql(&name, "select 40 + 2").trim(), "42");
        pg.psql(&name, "create extension if not exists pg_trgm");
        assert_eq!(pg.psql(&name, "select similarity('talaria', 'talaria')").trim(), "1");
    }
}
