//! Whole-process figures for `talaria gateway run` with the bundled Telegram adapter, against a
//! Bot API double and an instant mock model:
//! - 50 chats writing at once: replies per second, and the latency each message sees from the
//!   moment the platform has it to the moment the reply is posted (p50, p99), over several rounds;
//! - resident memory of the gateway before and after 1,000 chats, each a session then left idle;
//! - the memory one adapter instance costs: the gateway with one account, then with four.
//!
//! Run: `cargo bench -p talaria-cli --bench gateway`

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use talaria_mock_llm::{MockLlm, Script};
use talaria_test_support::telegram::TelegramFake;

const CHATS: i64 = 50;
const ROUNDS: usize = 6;
const IDLE_SESSIONS: i64 = 1_000;
const WAIT: Duration = Duration::from_secs(120);

struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Gateway {
    fn start(home: &Path) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_talaria"))
            .args(["gateway", "run"])
            .env("TALARIA_HOME", home)
            .env_remove("TALARIA_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn talaria gateway run");
        Self(child)
    }

    fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.0.id()))
            .expect("status")
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }
}

/// A home whose gateway serves one Telegram account per fake, answering anyone.
fn home(mock: &MockLlm, fakes: &[(&str, &TelegramFake)]) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("home");
    let mut config = format!(
        "[model]\nprovider = \"custom\"\nname = \"mock\"\nbase_url = \"{}\"\n[agent]\nauto_title = false\n\
         [gateway]\nallow_all = true\nworkspaces = \"{}\"\n",
        mock.base_url(),
        home.path().join("chats").display()
    );
    let mut env = String::new();
    for (i, (token, fake)) in fakes.iter().enumerate() {
        let name = format!("tg{i}");
        let secret = format!("TOKEN_{i}");
        // Each account its own token, under a name of its own.
        config.push_str(&format!(
            "[gateway.platforms.{name}]\nplugin = \"telegram\"\nbase_url = \"{}\"\nsecrets = {{ TELEGRAM_BOT_TOKEN = \"{secret}\" }}\n",
            fake.base_url()
        ));
        env.push_str(&format!("{secret}={token}\n"));
    }
    std::fs::write(home.path().join("config.toml"), config).expect("config");
    std::fs::write(home.path().join(".env"), env).expect(".env");
    home
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn wait_answered(fake: &TelegramFake, users: impl Iterator<Item = i64> + Clone, replies: usize) {
    let start = Instant::now();
    while users.clone().any(|u| fake.chat(u).len() < replies) {
        assert!(start.elapsed() < WAIT, "not every chat was answered");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn throughput_and_latency() {
    let fake = TelegramFake::start("1:bench");
    let mock = MockLlm::start(Script::auto());
    let home = home(&mock, &[("1:bench", &fake)]);
    let _gw = Gateway::start(home.path());
    fake.wait_polling(WAIT);
    // A first round makes every chat's session; the rounds measured use them as they are.
    let users = || (1..=CHATS).map(|u| 10_000 + u);
    let mut latencies = Vec::new();
    let mut rates = Vec::new();
    for round in 0..=ROUNDS {
        let sent: Vec<(i64, Instant)> = users()
            .map(|u| {
                (u, {
                    let at = Instant::now();
                    fake.dm(u, "bench", &format!("echo round {round} chat {u}"));
                    at
                })
            })
            .collect();
        wait_answered(&fake, users(), round + 1);
        if round == 0 {
            continue;
        }
        let mut last = sent[0].1;
        for (user, at) in &sent {
            let reply = fake.chat(*user).pop().expect("a reply");
            assert_eq!(reply.text, format!("round {round} chat {user}"), "a reply went astray");
            latencies.push(reply.at.duration_since(*at).as_secs_f64() * 1000.0);
            last = last.max(reply.at);
        }
        rates.push(CHATS as f64 / last.duration_since(sent[0].1).as_secs_f64());
    }
    latencies.sort_by(f64::total_cmp);
    rates.sort_by(f64::total_cmp);
    println!(
        "{CHATS} chats at once, {ROUNDS} rounds: {:.0} replies/s (median round), latency p50 {:.1} ms, p99 {:.1} ms (platform has the message -> reply posted; instant model)",
        percentile(&rates, 0.5),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
}

fn idle_sessions() {
    let fake = TelegramFake::start("1:bench");
    let mock = MockLlm::start(Script::auto());
    let home = home(&mock, &[("1:bench", &fake)]);
    let gw = Gateway::start(home.path());
    fake.wait_polling(WAIT);
    std::thread::sleep(Duration::from_millis(500));
    let before = gw.rss_kib();
    for batch in 0..(IDLE_SESSIONS / 100) {
        let users = (1..=100).map(move |u| 100_000 + batch * 100 + u);
        for u in users.clone() {
            fake.dm(u, "idle", "echo hi");
        }
        wait_answered(&fake, users, 1);
    }
    std::thread::sleep(Duration::from_millis(500));
    let after = gw.rss_kib();
    println!(
        "{IDLE_SESSIONS} idle chat sessions: gateway resident memory {:.1} MiB -> {:.1} MiB ({:.0} KiB per session)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        (after.saturating_sub(before)) as f64 / IDLE_SESSIONS as f64
    );
}

fn adapter_instances() {
    const ACCOUNTS: usize = 4;
    let tokens: Vec<String> = (0..ACCOUNTS).map(|i| format!("{}:bench", i + 1)).collect();
    let fakes: Vec<TelegramFake> = tokens.iter().map(|t| TelegramFake::start(t)).collect();
    let mock = MockLlm::start(Script::auto());
    let mut rss = Vec::new();
    for n in [1, ACCOUNTS] {
        let pairs: Vec<(&str, &TelegramFake)> = tokens.iter().map(String::as_str).zip(fakes.iter()).take(n).collect();
        let home = home(&mock, &pairs);
        let gw = Gateway::start(home.path());
        for fake in fakes.iter().take(n) {
            fake.wait_polling(WAIT);
        }
        std::thread::sleep(Duration::from_millis(1500));
        rss.push(gw.rss_kib());
    }
    println!(
        "adapter instances: gateway with 1 account {:.1} MiB, with {ACCOUNTS} accounts {:.1} MiB ({:.0} KiB per adapter instance)",
        rss[0] as f64 / 1024.0,
        rss[1] as f64 / 1024.0,
        (rss[1].saturating_sub(rss[0])) as f64 / (ACCOUNTS - 1) as f64
    );
}

fn main() {
    throughput_and_latency();
    idle_sessions();
    adapter_instances();
}
