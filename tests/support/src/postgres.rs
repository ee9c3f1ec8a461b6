//! A real PostgreSQL server for the store's tests: Debian's `postgresql` package, a throwaway
//! cluster on a unix socket in a temporary directory, with durability off (`fsync=off`: a test
//! cluster never outlives its process). [`Postgres::shared`] is started once per test binary and
//! serves all its tests; [`Postgres::private`] is one test's own, which it may stop and start
//! again ([`Postgres::stop`], [`Postgres::start`]: an operator restarting the server under a
//! running gateway). A cluster is stopped and its directory removed when the test process ends,
//! however it ends (a watchdog shell waits for it), and a private one also when it is dropped.
//! [`Postgres::database`] makes a fresh database per test.
//!
//! The server binaries are found under `/usr/lib/postgresql/VERSION/bin` (the newest), or in
//! `TALARIA_PG_BIN`. `TALARIA_TEST_PG_CONF` adds lines to the cluster's `postgresql.conf` (for a
//! profiling run). PostgreSQL refuses to run as root: as root, the cluster belongs to the
//! `postgres` user the package creates, and its commands run through `runuser`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// How long `pg_ctl` waits for the server to start or stop.
const PG_CTL_WAIT_SECS: &str = "60";

/// A cluster and its server, running unless [`Postgres::stop`]ped.
pub struct Postgres {
    /// The directory holding its unix socket.
    pub socket_dir: PathBuf,
    bin: PathBuf,
    data: PathBuf,
    /// The server's own log.
    log: PathBuf,
    /// The shell that stops the server and removes the cluster once this process is gone.
    watchdog: Child,
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
    /// The server of this test process, started on first use and shared by its tests.
    pub fn shared() -> &'static Postgres {
        static SHARED: OnceLock<Postgres> = OnceLock::new();
        SHARED.get_or_init(Postgres::private)
    }

    /// A server of the calling test's own, started: it may stop and start it. Dropping it stops
    /// the server and removes the cluster.
    pub fn private() -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::Builder::new().prefix("talaria-pg").tempdir().expect("dir");
        let (data, socket_dir, log) = (dir.path().join("data"), dir.path().join("sock"), dir.path().join("server.log"));
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
        // Every start of the server uses these: the settings are the cluster's. Commits stay
        // synchronous, as an operator's are: with `fsync` off a backend's own write of its commit
        // costs less than waking the WAL writer after each commit, which `synchronous_commit =
        // off` does (a tenth of the server's CPU in a profile of the scale-out bench).
        let settings = format!(
            "\nunix_socket_directories = '{}'\nlisten_addresses = ''\nfsync = off\n\
             full_page_writes = off\nmax_connections = 300\n{}\n",
            socket_dir.display(),
            // More settings for a profiling run, e.g.
            // `shared_preload_libraries = 'pg_stat_statements'` (the scale-out bench reads it).
            std::env::var("TALARIA_TEST_PG_CONF").unwrap_or_default()
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .and_then(|mut conf| conf.write_all(settings.as_bytes()))
            .expect("postgresql.conf");
        // It goes when this process goes: a watchdog shell stops it (`pg_ctl stop`, as its owner)
        // once the parent is gone, and removes its directory.
        let runner = if is_root() { "runuser -u postgres -- " } else { "" };
        let script = format!(
            "while kill -0 {parent} 2>/dev/null; do sleep 1; done; \
             {runner}{} -D {data} -m immediate stop >/dev/null 2>&1; rm -rf {dir}",
            bin.join("pg_ctl").display(),
            data = data.display(),
            parent = std::process::id(),
            dir = dir.path().display(),
        );
        let watchdog = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the watchdog");
        let server = Postgres { socket_dir, bin, data, log, watchdog, _dir: dir };
        server.start();
        server
    }

    /// `pg_ctl` on the cluster, as its owner.
    fn pg_ctl(&self) -> Command {
        let mut c = as_owner(&self.bin.join("pg_ctl"));
        c.arg("-D").arg(&self.data).args(["-t", PG_CTL_WAIT_SECS]).stdin(Stdio::null());
        c
    }

    /// Start the server (again); returns once it takes connections.
    pub fn start(&self) {
        let out = self.pg_ctl().arg("-l").arg(&self.log).args(["-w", "start"]).output().expect("pg_ctl start");
        assert!(
            out.status.success(),
            "PostgreSQL did not start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// Stop the server as an operator restarting it would (`pg_ctl stop -m fast`: sessions are
    /// ended, what was committed is kept); returns once it is down.
    pub fn stop(&self) {
        let out = self.pg_ctl().args(["-m", "fast", "-w", "stop"]).output().expect("pg_ctl stop");
        assert!(out.status.success(), "PostgreSQL did not stop: {}", String::from_utf8_lossy(&out.stderr));
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

impl Drop for Postgres {
    /// Only a private server is dropped (the shared one lives as long as the process, and its
    /// watchdog stops it).
    fn drop(&mut self) {
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
        let _ =
            self.pg_ctl().args(["-m", "immediate", "-w", "stop"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        // The cluster's directory goes with `_dir`.
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
