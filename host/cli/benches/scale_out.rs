//! Gateways sharing one store, as whole processes: turns per second with one, two and three
//! `talaria gateway run` processes on one PostgreSQL (a throwaway cluster on a unix socket), and
//! the same load on SQLite with one process. The load is webhook deliveries answered in the HTTP
//! response: `CHATS` chats (one route each, so each chat is one session answered in order), each
//! sending `TURNS` messages one after the other, spread over the processes' listeners as a load
//! balancer would. The one-process cases on the two engines run at once, their loads taking
//! turns a round (a fifth) at a time, so that both meet the machine as it is at the moment; their
//! ratio is also given round by round. The model is the instant mock, so the figures are the
//! gateway's and the store's own cost. The latency is the sender's: request sent to reply received.
//!
//! Run: `cargo bench -p talaria-cli --bench scale_out` (needs Debian's `postgresql`);
//! `SCALE_OUT_BENCH_ONLY=sqlite1,postgres1` runs those cases alone; `SCALE_OUT_BENCH_STATEMENTS=1`
//! with `TALARIA_TEST_PG_CONF="shared_preload_libraries = 'pg_stat_statements'"` prints where
//! PostgreSQL's time went, by statement; `SCALE_OUT_BENCH_SQL` is run on the database once its
//! gateway is up, to try what a change of the schema would save.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use talaria_mock_llm::{MockLlm, Script};

const CHATS: usize = 24;
const TURNS: usize = 100;
/// The rounds that one process's loads on each engine are cut into, taking turns.
const ROUNDS: usize = 5;
/// Turns of the lone chat.
const SEQUENTIAL: usize = 40;
const WAIT: Duration = Duration::from_secs(180);

struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A home whose gateway listens on `addr` and answers `CHATS` webhook routes, on `store` (a
/// PostgreSQL URL, or none for the home's own SQLite file).
fn home(mock: &MockLlm, addr: &str, store: Option<&str>, chats: &Path) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("home");
    // The load is a script, which `[gateway.limits]` would slow to a human's pace: lifted.
    let mut config = format!(
        "[model]\nprovider = \"custom\"\nname = \"mock\"\nbase_url = \"{}\"\n[agent]\nauto_title = false\n\
         [memory]\nprovider = \"none\"\n\
         [gateway]\nallow_all = true\nlisten = \"{addr}\"\nworkspaces = \"{}\"\n\
         [gateway.limits]\nwebhook_per_minute = 1000000\nmessages_per_minute = 1000000\n\
         [gateway.platforms.hooks]\nplugin = \"webhook\"\n",
        mock.base_url(),
        chats.display()
    );
    for chat in 0..CHATS {
        config.push_str(&format!(
            "[gateway.platforms.hooks.routes.c{chat}]\nauth = \"token\"\nheader = \"X-Token\"\nsecret = \"HOOK_TOKEN\"\nprompt = \"{{text}}\"\nsession = \"route\"\n"
        ));
    }
    if let Some(url) = store {
        config.push_str(&format!("[store]\nurl = \"{url}\"\n"));
    }
    std::fs::write(home.path().join("config.toml"), config).expect("config");
    std::fs::write(home.path().join(".env"), "HOOK_TOKEN=bench\n").expect(".env");
    home
}

fn start(home: &Path) -> Gateway {
    let child = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["gateway", "run"])
        .env("TALARIA_HOME", home)
        .env_remove("TALARIA_LOG")
        .env_remove("TALARIA_STORE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn talaria gateway run");
    Gateway(child)
}

/// POST one delivery; the reply text.
fn ask(addr: &str, chat: usize, id: &str, text: &str) -> String {
    let body = serde_json::json!({ "text": text }).to_string();
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    let head = format!(
        "POST /webhooks/hooks/c{chat} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nX-Token: bench\r\nX-Delivery-Id: {id}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("write");
    stream.write_all(body.as_bytes()).expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let (_, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let reply: serde_json::Value = serde_json::from_str(body).expect("json");
    reply["reply"].as_str().expect("a reply").to_string()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `CHATS` senders, each `turns` turns over the listeners `addrs` (round robin): turns per
/// second and the latencies.
fn load(addrs: &[String], label: &str, turns: usize) -> (f64, Vec<f64>) {
    let started = Instant::now();
    let mut latencies: Vec<f64> = std::thread::scope(|scope| {
        let senders: Vec<_> = (0..CHATS)
            .map(|chat| {
                scope.spawn(move || {
                    (0..turns)
                        .map(|turn| {
                            let addr = &addrs[(chat + turn) % addrs.len()];
                            let at = Instant::now();
                            let text = format!("{label} chat {chat} turn {turn}");
                            let reply = ask(addr, chat, &format!("{label}-{chat}-{turn}"), &format!("echo {text}"));
                            assert_eq!(reply, text, "a reply went astray");
                            at.elapsed().as_secs_f64() * 1000.0
                        })
                        .collect::<Vec<f64>>()
                })
            })
            .collect();
        senders.into_iter().flat_map(|s| s.join().expect("a sender failed")).collect()
    });
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    (rate, latencies)
}

/// One chat's turns one after the other on a gateway otherwise idle: each turn's latency.
fn sequential(addr: &str, label: &str) -> Vec<f64> {
    let mut latencies: Vec<f64> = (0..SEQUENTIAL)
        .map(|turn| {
            let at = Instant::now();
            let text = format!("{label} alone turn {turn}");
            assert_eq!(ask(addr, 0, &format!("{label}-alone-{turn}"), &format!("echo {text}")), text);
            at.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    latencies
}

/// Gateway processes on one store, started and warmed.
struct Fleet {
    label: String,
    store: Option<String>,
    addrs: Vec<String>,
    gateways: Vec<Gateway>,
    _homes: Vec<tempfile::TempDir>,
    _chats: tempfile::TempDir,
}

impl Fleet {
    /// `processes` gateways on `store`, warmed.
    fn start(mock: &MockLlm, store: Option<String>, processes: usize, label: String) -> Self {
        let chats = tempfile::tempdir().expect("chats");
        let addrs: Vec<String> = (0..processes).map(|_| format!("127.0.0.1:{}", free_port())).collect();
        let homes: Vec<_> = addrs.iter().map(|addr| home(mock, addr, store.as_deref(), chats.path())).collect();
        let gateways: Vec<Gateway> = homes.iter().map(|h| start(h.path())).collect();
        let begin = Instant::now();
        for (i, addr) in addrs.iter().enumerate() {
            while std::net::TcpStream::connect(addr).is_err() {
                assert!(begin.elapsed() < WAIT, "a listener never came up");
                std::thread::sleep(Duration::from_millis(20));
            }
            // Warm: each process compiles its plugins, opens its first sessions and, with the
            // chats all asking at once as the load will, opens the store connections the load
            // needs (on PostgreSQL, starting a server process each: the first round paid for
            // that, about a third of a millisecond a turn more than the rounds after it).
            std::thread::scope(|scope| {
                for chat in 0..CHATS {
                    let id = format!("warm-{label}-{i}-{chat}");
                    scope.spawn(move || ask(addr, chat, &id, "echo warm"));
                }
            });
        }
        Fleet { label, store, addrs, gateways, _homes: homes, _chats: chats }
    }

    /// The store's commits so far, when it is PostgreSQL.
    fn commits(&self) -> Option<u64> {
        let db = database_name(self.store.as_deref()?)?;
        // Statistics reach the view within a second.
        std::thread::sleep(Duration::from_millis(1500));
        let sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()";
        talaria_test_support::postgres::Postgres::shared().psql(&db, sql).trim().parse::<u64>().ok()
    }

    /// One chat's turns one after the other on the first process, otherwise idle: each turn's
    /// latency. On PostgreSQL, also prints the transactions a lone turn costs.
    fn alone(&self) -> Vec<f64> {
        let label = &self.label;
        let before = self.commits();
        let started = Instant::now();
        let alone = sequential(&self.addrs[0], label);
        let after = self.commits();
        let busy = started.elapsed().as_secs_f64();
        // What the processes commit while no turn runs (workers renewing their chats' leases,
        // looking at their inboxes, the ledger's sender), over a window as long, is not the turns'.
        let idle_before = self.commits();
        let idle_started = Instant::now();
        let idle_after = self.commits();
        let idle = idle_started.elapsed().as_secs_f64();
        if let (Some(before), Some(after), Some(i0), Some(i1)) = (before, after, idle_before, idle_after) {
            let background = i1.saturating_sub(i0) as f64 / idle;
            let per_turn = ((after - before) as f64 - background * busy) / SEQUENTIAL as f64;
            println!(
                "({label}: {per_turn:.1} PostgreSQL transactions per lone turn, less {background:.1}/s committed while idle)"
            );
        }
        alone
    }

    /// `CHATS` chats of `turns` turns each, round `round`.
    fn load(&self, round: usize, turns: usize) -> (f64, Vec<f64>) {
        load(&self.addrs, &format!("{}r{round}", self.label), turns)
    }

    /// The CPU seconds its gateways and, on PostgreSQL, the cluster's processes have used.
    fn cpu(&self) -> Cpu {
        let gateways = self.gateways.iter().map(|g| cpu_seconds(g.0.id())).sum();
        let server = self.store.is_some().then(postgres_cpu_seconds).unwrap_or(0.0);
        Cpu { gateways, server }
    }

    /// [`Statements`] of the load to come, when asked for.
    fn statements(&self) -> Option<Statements> {
        self.store
            .as_deref()
            .filter(|_| std::env::var_os("SCALE_OUT_BENCH_STATEMENTS").is_some())
            .and_then(database_name)
            .map(Statements::reset)
    }
}

/// CPU seconds used, by whom.
#[derive(Clone, Copy, Default)]
struct Cpu {
    gateways: f64,
    server: f64,
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, before: Cpu) -> Cpu {
        Cpu { gateways: self.gateways - before.gateways, server: self.server - before.server }
    }
}

impl std::ops::AddAssign for Cpu {
    fn add_assign(&mut self, more: Cpu) {
        self.gateways += more.gateways;
        self.server += more.server;
    }
}

/// A process's CPU seconds (all its threads, user and system), and its children's that ended.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // The fields after the command's closing parenthesis; utime is the 14th field of the line.
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Linux reports these in USER_HZ, which is 100 on every architecture it runs on.
    fields.get(11..15).map_or(0.0, |ticks| ticks.iter().filter_map(|t| t.parse::<f64>().ok()).sum::<f64>() / 100.0)
}

/// Every `postgres` process's CPU seconds: the test cluster's backends, its background workers,
/// and (through the postmaster's children's share) the backends that have ended.
fn postgres_cpu_seconds() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0.0 };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres"))
        .map(cpu_seconds)
        .sum()
}

/// What a case measured.
struct Measured {
    rate: f64,
    latencies: Vec<f64>,
}

impl Measured {
    /// The rounds' turns over their time, and all their latencies.
    fn of(rounds: &[(f64, Vec<f64>)]) -> Self {
        let turns: usize = rounds.iter().map(|(_, l)| l.len()).sum();
        let seconds: f64 = rounds.iter().map(|(rate, l)| l.len() as f64 / rate).sum();
        let mut latencies: Vec<f64> = rounds.iter().flat_map(|(_, l)| l.iter().copied()).collect();
        latencies.sort_by(f64::total_cmp);
        Measured { rate: turns as f64 / seconds, latencies }
    }

    fn print(&self, name: &str) {
        println!(
            "{name:<34} {:>8.0} {:>8.1}ms {:>8.1}ms",
            self.rate,
            percentile(&self.latencies, 0.5),
            percentile(&self.latencies, 0.99)
        );
    }
}

/// The case's name in the table.
fn case_name(engine: &str, processes: usize) -> String {
    format!(
        "{}, {processes} gateway process{}",
        if engine == "postgres" { "PostgreSQL" } else { "SQLite" },
        if processes == 1 { "" } else { "es" }
    )
}

/// The database a test cluster's URL names (`postgresql:///NAME?host=…`).
fn database_name(url: &str) -> Option<String> {
    Some(url.split(":///").nth(1)?.split('?').next()?.to_string())
}

/// PostgreSQL's own account of a load, by statement (`SCALE_OUT_BENCH_STATEMENTS=1`, with
/// `TALARIA_TEST_PG_CONF="shared_preload_libraries = 'pg_stat_statements'"`).
struct Statements(String);

impl Statements {
    fn reset(db: String) -> Self {
        let pg = talaria_test_support::postgres::Postgres::shared();
        pg.psql(&db, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        pg.psql(&db, "SELECT pg_stat_statements_reset()");
        Statements(db)
    }

    /// The statements that took the most of the server's time, per turn of `turns`.
    fn print(&self, turns: usize) {
        let sql = format!(
            "SELECT round((total_exec_time * 1000 / {turns})::numeric, 1), round((calls::float / {turns})::numeric, 2), \
                 regexp_replace(left(query, 110), '\\s+', ' ', 'g') \
             FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             ORDER BY total_exec_time DESC LIMIT 15"
        );
        println!("  server time per turn (µs), calls per turn, statement:");
        for line in talaria_test_support::postgres::Postgres::shared().psql(&self.0, &sql).lines() {
            let cols: Vec<&str> = line.splitn(3, '|').collect();
            if let [us, calls, query] = cols[..] {
                println!("  {us:>8} {calls:>6}  {query}");
            }
        }
    }
}

fn main() {
    let mock = MockLlm::start(Script::auto());
    let pg = talaria_test_support::postgres::Postgres::shared();
    println!("{CHATS} chats at once, {TURNS} turns each (webhook deliveries answered in the response; instant model):");
    println!("{:<34} {:>8} {:>10} {:>10}", "store, processes", "turns/s", "p50", "p99");
    let only = std::env::var("SCALE_OUT_BENCH_ONLY").unwrap_or_default();
    let wanted = |label: &str| only.is_empty() || only.split(',').any(|case| case.trim() == label);
    let url = |engine: &str| (engine == "postgres").then(|| pg.database());
    // One process on each engine: both fleets run at once, and their loads take turns, a round
    // of each at a time, so that both meet the machine as it is at the moment (on a shared
    // machine, the same load's rate swings by a third from one minute to the next).
    let fleets: Vec<Fleet> = ["sqlite", "postgres"]
        .into_iter()
        .filter(|engine| wanted(&format!("{engine}1")))
        .map(|engine| Fleet::start(&mock, url(engine), 1, format!("{engine}1")))
        .collect();
    // What a change of the schema would save, tried on the database before the load.
    if let Ok(change) = std::env::var("SCALE_OUT_BENCH_SQL") {
        for db in fleets.iter().filter_map(|f| database_name(f.store.as_deref()?)) {
            pg.psql(&db, &change);
        }
    }
    let alone: Vec<Vec<f64>> = fleets.iter().map(Fleet::alone).collect();
    let statements = fleets.iter().find_map(Fleet::statements);
    let mut rounds: Vec<Vec<(f64, Vec<f64>)>> = vec![Vec::new(); fleets.len()];
    let mut cpu = vec![Cpu::default(); fleets.len()];
    let mut first = vec![Cpu::default(); fleets.len()];
    for round in 0..ROUNDS {
        for (((fleet, done), cpu), first) in fleets.iter().zip(&mut rounds).zip(&mut cpu).zip(&mut first) {
            let before = fleet.cpu();
            done.push(fleet.load(round, TURNS / ROUNDS));
            *cpu += fleet.cpu() - before;
            if round == 0 {
                *first = *cpu;
            }
        }
    }
    if let Some(statements) = statements {
        statements.print(CHATS * TURNS);
    }
    let names: Vec<String> = fleets.iter().map(|f| case_name(f.label.trim_end_matches('1'), 1)).collect();
    for (name, done) in names.iter().zip(&rounds) {
        Measured::of(done).print(name);
    }
    for ((name, cpu), first) in names.iter().zip(&cpu).zip(&first) {
        let per_turn = |seconds: f64, turns: usize| seconds * 1000.0 / turns as f64;
        let rest = *cpu - *first;
        println!(
            "  {name}: CPU per turn {:.2} ms in the gateway, {:.2} ms in PostgreSQL's processes (first round {:.2} and {:.2} ms)",
            per_turn(rest.gateways, CHATS * (TURNS - TURNS / ROUNDS)),
            per_turn(rest.server, CHATS * (TURNS - TURNS / ROUNDS)),
            per_turn(first.gateways, CHATS * TURNS / ROUNDS),
            per_turn(first.server, CHATS * TURNS / ROUNDS),
        );
    }
    drop(fleets);
    for processes in [2, 3] {
        let label = format!("postgres{processes}");
        if wanted(&label) {
            let fleet = Fleet::start(&mock, url("postgres"), processes, label);
            let statements = fleet.statements();
            let measured = Measured::of(&[fleet.load(0, TURNS)]);
            if let Some(statements) = statements {
                statements.print(CHATS * TURNS);
            }
            measured.print(&case_name("postgres", processes));
        }
    }
    println!("one chat alone, {SEQUENTIAL} turns one after the other:");
    for (name, latencies) in names.iter().zip(&alone) {
        println!("{name:<34} {:>8} {:>8.1}ms {:>8.1}ms", "", percentile(latencies, 0.5), percentile(latencies, 0.99));
    }
    if alone.len() < 2 {
        return;
    }
    let [sqlite, postgres] = [&rounds[0], &rounds[1]].map(|r| Measured::of(r).rate);
    let mut ratios: Vec<f64> = rounds[0].iter().zip(&rounds[1]).map(|((s, _), (p, _))| 100.0 * p / s).collect();
    ratios.sort_by(f64::total_cmp);
    println!(
        "PostgreSQL with one process: {:.0}% of SQLite's turns/s (round by round: median {:.0}%, {:.0}-{:.0}%)",
        100.0 * postgres / sqlite,
        percentile(&ratios, 0.5),
        ratios[0],
        ratios[ratios.len() - 1]
    );
    println!(
        "PostgreSQL adds {:.1} ms to a lone turn's median latency over SQLite",
        percentile(&alone[1], 0.5) - percentile(&alone[0], 0.5)
    );
}
