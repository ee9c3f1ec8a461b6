//! Whole-process figures for `talaria gateway run` with the bundled Telegram adapter, against a
//! Bot API double and an instant mock model:
//! - 50 chats writing at once: replies per second, and the latency each message sees from the
//!   moment the platform has it to the moment the reply is posted (p50, p99), over several rounds;
//! - resident memory of the gateway (once it has served a few chats) before and after 1,000
//!   chats, each a session then left idle, and once they were put away;
//! - the memory one adapter instance costs: the gateway with one account, then with four;
//! - a soak: 100,000 messages over 500 chats (50 waiting for their answer at any time), the
//!   gateway's resident memory sampled every second and drawn as an SVG plot
//!   (`soak-rss.svg` in the target's tmp directory; the path is printed).
//!
//! Run: `cargo bench -p talaria-cli --bench gateway` (`GATEWAY_BENCH_ONLY=soak` for one part).

use std::collections::VecDeque;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use talaria_mock_llm::{MockLlm, Script};
use talaria_test_support::telegram::TelegramFake;

const CHATS: i64 = 50;
const ROUNDS: usize = 6;
const IDLE_SESSIONS: i64 = 1_000;
/// Chats a gateway serves before the idle sessions' baseline is taken.
const WARM_UP: i64 = 5;
/// Sessions are put away after this long without a message (`[gateway] idle_minutes`).
const IDLE_MINUTES: u64 = 1;
const SOAK_MESSAGES: usize = 100_000;
const SOAK_CHATS: usize = 500;
/// Chats waiting for their answer at any time.
const SOAK_WINDOW: usize = 50;
/// Where the soak's RSS is compared with its end.
const SOAK_EARLY: usize = 10_000;
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
        // `GATEWAY_BENCH_WRAP="heaptrack -o /tmp/gw"` runs the gateway under a profiler.
        let wrap: Vec<String> =
            std::env::var("GATEWAY_BENCH_WRAP").unwrap_or_default().split_whitespace().map(String::from).collect();
        let mut command = match wrap.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(env!("CARGO_BIN_EXE_talaria"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_talaria")),
        };
        let child = command
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
        rss_kib(self.0.id())
    }

    /// The anonymous part of its resident memory (the heap; not the binary's code).
    fn anon_kib(&self) -> u64 {
        status_kib(self.0.id(), "RssAnon:")
    }
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A figure of `/proc/PID/status`, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// CPU time process `pid` (`"self"`: this one) has used so far, its exited threads' included, in
/// milliseconds.
fn cpu_ms(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // After the command's closing parenthesis: state is field 3, utime and stime 14 and 15.
    let fields: Vec<&str> = stat.rsplit_once(')').expect("comm").1.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    // SAFETY: sysconf only reads a system constant.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks * 1000.0 / hz
}

/// A home whose gateway serves one Telegram account per fake, answering anyone; sessions are
/// put away after [`IDLE_MINUTES`].
fn home(mock: &MockLlm, fakes: &[(&str, &TelegramFake)]) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("home");
    // The load is a script, which `[gateway.limits]` would slow to a human's pace: lifted.
    let mut config = format!(
        "[model]\nprovider = \"custom\"\nname = \"mock\"\nbase_url = \"{}\"\n[agent]\nauto_title = false\n\
         [gateway]\nallow_all = true\nidle_minutes = {IDLE_MINUTES}\nworkspaces = \"{}\"\n\
         [gateway.limits]\nmessages_per_minute = 1000000\n",
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

/// A gateway serving one Telegram account, polling already, with an instant model.
fn one_account() -> (TelegramFake, MockLlm, tempfile::TempDir, Gateway) {
    let fake = TelegramFake::start("1:bench");
    let mock = MockLlm::start(Script::auto());
    let home = home(&mock, &[("1:bench", &fake)]);
    let gw = Gateway::start(home.path());
    fake.wait_polling(WAIT);
    (fake, mock, home, gw)
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
    let (fake, _mock, _home, gw) = one_account();
    // A first round makes every chat's session; the rounds measured use them as they are.
    let users = || (1..=CHATS).map(|u| 10_000 + u);
    let mut latencies = Vec::new();
    let mut rates = Vec::new();
    let (mut gateway_cpu, mut bench_cpu, mut wall) = (0.0, 0.0, Duration::ZERO);
    let pid = gw.0.id().to_string();
    for round in 0..=ROUNDS {
        if round == 1 {
            (gateway_cpu, bench_cpu, wall) = (cpu_ms(&pid), cpu_ms("self"), Duration::from_nanos(0));
        }
        let began = Instant::now();
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
        wall += began.elapsed();
        let mut last = sent[0].1;
        for (user, at) in &sent {
            let reply = fake.chat(*user).pop().expect("a reply");
            assert_eq!(reply.text, format!("round {round} chat {user}"), "a reply went astray");
            latencies.push(reply.at.duration_since(*at).as_secs_f64() * 1000.0);
            last = last.max(reply.at);
        }
        rates.push(CHATS as f64 / last.duration_since(sent[0].1).as_secs_f64());
    }
    let replies = (CHATS as usize * ROUNDS) as f64;
    let (gateway_cpu, bench_cpu) = ((cpu_ms(&pid) - gateway_cpu) / replies, (cpu_ms("self") - bench_cpu) / replies);
    latencies.sort_by(f64::total_cmp);
    rates.sort_by(f64::total_cmp);
    println!(
        "  CPU per reply: gateway {gateway_cpu:.2} ms, platform double and model {bench_cpu:.2} ms; the rounds kept {:.0}% of the cores busy",
        (gateway_cpu + bench_cpu) * replies
            / wall.as_secs_f64()
            / 1000.0
            / std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
            * 100.0
    );
    println!(
        "{CHATS} chats at once, {ROUNDS} rounds: {:.0} replies/s (median round), latency p50 {:.1} ms, p99 {:.1} ms (platform has the message -> reply posted; instant model)",
        percentile(&rates, 0.5),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
}

/// How long the idle bench waits for answered chats to settle: they let go of their history
/// two seconds after their last answer.
const SETTLE: Duration = Duration::from_millis(2500);

fn idle_sessions() {
    let (fake, _mock, _home, gw) = one_account();
    // The baseline is a gateway that has served chats: what the first chats bring in once
    // (the binary's code they run, the plugins' shared set, the store's statements) is not a
    // cost of each session. A few chats are answered, then left to be put away like the rest.
    let warm = (1..=WARM_UP).map(|u| 90_000 + u);
    for u in warm.clone() {
        fake.dm(u, "idle", "echo hi");
    }
    wait_answered(&fake, warm, 1);
    std::thread::sleep(SETTLE);
    let before = gw.rss_kib();
    let anon_before = gw.anon_kib();
    for batch in 0..(IDLE_SESSIONS / 100) {
        let users = (1..=100).map(move |u| 100_000 + batch * 100 + u);
        for u in users.clone() {
            fake.dm(u, "idle", "echo hi");
        }
        wait_answered(&fake, users, 1);
    }
    std::thread::sleep(SETTLE);
    let after = gw.rss_kib();
    println!(
        "{IDLE_SESSIONS} idle chat sessions: gateway resident memory {:.1} MiB -> {:.1} MiB ({:.1} KiB per session; of it anonymous memory {:.1} KiB), after {WARM_UP} chats served",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        (after.saturating_sub(before)) as f64 / IDLE_SESSIONS as f64,
        (gw.anon_kib().saturating_sub(anon_before)) as f64 / IDLE_SESSIONS as f64
    );
    // Put away after IDLE_MINUTES without a message; the memory is given back at the
    // gateway's next tidying (every 30 s).
    std::thread::sleep(Duration::from_secs(IDLE_MINUTES * 60 + 45));
    let away = gw.rss_kib();
    println!(
        "  after {IDLE_MINUTES} min without messages they are put away: {:.1} MiB ({:.1} KiB per session still held; anonymous {:.1} KiB)",
        away as f64 / 1024.0,
        (away.saturating_sub(before)) as f64 / IDLE_SESSIONS as f64,
        (gw.anon_kib().saturating_sub(anon_before)) as f64 / IDLE_SESSIONS as f64
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

/// One RSS sample of the soak: seconds since it began, messages answered, KiB.
type Sample = (f64, usize, u64);

fn soak() {
    let (fake, mock, _home, gw) = one_account();
    let answered = Arc::new(AtomicUsize::new(0));
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let began = Instant::now();
    let sampler = {
        let (answered, samples, done, pid) = (answered.clone(), samples.clone(), done.clone(), gw.0.id());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let sample = (began.elapsed().as_secs_f64(), answered.load(Ordering::SeqCst), rss_kib(pid));
                samples.lock().expect("samples").push(sample);
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let user = |chat: usize| 500_000 + chat as i64;
    let mut sent = vec![0usize; SOAK_CHATS];
    let mut waiting: VecDeque<usize> = VecDeque::new();
    let (mut next, mut total_sent, mut last_answer) = (0, 0, Instant::now());
    while answered.load(Ordering::SeqCst) < SOAK_MESSAGES {
        while waiting.len() < SOAK_WINDOW && total_sent < SOAK_MESSAGES {
            let chat = next;
            next = (next + 1) % SOAK_CHATS;
            sent[chat] += 1;
            total_sent += 1;
            fake.dm(user(chat), "soak", &format!("echo soak {chat} {}", sent[chat]));
            waiting.push_back(chat);
        }
        let before = waiting.len();
        waiting.retain(|&chat| {
            let shown = fake.shown_in(user(chat));
            assert!(shown <= sent[chat], "chat {chat} was answered more than once: {shown} replies to {}", sent[chat]);
            // A reply streams: it is done when it shows its whole text (an answer that went to
            // another chat never would, and the soak stops for want of answers).
            let done = shown == sent[chat]
                && fake.last_in(user(chat)).is_some_and(|r| r.text == format!("soak {chat} {}", sent[chat]));
            !done
        });
        let now_answered = answered.fetch_add(before - waiting.len(), Ordering::SeqCst) + before - waiting.len();
        if before > waiting.len() {
            last_answer = Instant::now();
            if now_answered % 5_000 < before - waiting.len() {
                // The model double keeps every request; the gateway's memory is what is measured.
                mock.forget_requests();
            }
        }
        assert!(last_answer.elapsed() < WAIT, "no answer for {WAIT:?}; {now_answered} answered");
        std::thread::sleep(Duration::from_millis(2));
    }
    let took = began.elapsed();
    done.store(true, Ordering::SeqCst);
    sampler.join().expect("sampler");
    let samples = samples.lock().expect("samples").clone();
    let early = samples.iter().find(|s| s.1 >= SOAK_EARLY).unwrap_or(&samples[0]).2;
    let end = samples.last().expect("a sample").2;
    let peak = samples.iter().map(|s| s.2).max().unwrap_or(0);
    // What of the end's memory the load held, and what stays once it is over: the gateway hands
    // freed memory back every 30 s.
    std::thread::sleep(Duration::from_secs(35));
    let quiet = gw.rss_kib();
    let svg = Path::new(env!("CARGO_TARGET_TMPDIR")).join("soak-rss.svg");
    std::fs::write(&svg, plot(&samples, early)).expect("write the plot");
    println!(
        "soak: {SOAK_MESSAGES} messages over {SOAK_CHATS} chats in {:.0} s ({:.0} replies/s); gateway resident memory after {SOAK_EARLY} messages {:.1} MiB, at the end {:.1} MiB ({:+.1}%), peak {:.1} MiB; plot: {}",
        took.as_secs_f64(),
        SOAK_MESSAGES as f64 / took.as_secs_f64(),
        early as f64 / 1024.0,
        end as f64 / 1024.0,
        (end as f64 / early as f64 - 1.0) * 100.0,
        peak as f64 / 1024.0,
        svg.display()
    );
    println!(
        "  35 s after the load: {:.1} MiB ({:+.1}% of the memory after {SOAK_EARLY} messages)",
        quiet as f64 / 1024.0,
        (quiet as f64 / early as f64 - 1.0) * 100.0
    );
}

/// The soak's resident memory over the messages answered, as an SVG line chart, with a band of
/// ±10% around `early` (the memory after the first [`SOAK_EARLY`] messages).
fn plot(samples: &[Sample], early: u64) -> String {
    // The picture's size, and the margins around the chart.
    let (w, h) = (900.0, 420.0);
    let (left, bottom, top_margin, right) = (70.0, 50.0, 40.0, 20.0);
    let mib = |kib: u64| kib as f64 / 1024.0;
    let top = samples.iter().map(|s| mib(s.2)).fold(mib(early) * 1.2, f64::max).ceil();
    let x = |n: usize| left + (w - left - right) * n as f64 / SOAK_MESSAGES as f64;
    let y = |m: f64| h - bottom - (h - bottom - top_margin) * m / top;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"22\" font-size=\"15\">talaria gateway: resident memory over {SOAK_MESSAGES} messages, {SOAK_CHATS} chats</text>\n"
    );
    let (low, high) = (y(mib(early) * 0.9), y(mib(early) * 1.1));
    out.push_str(&format!(
        "<rect x=\"{left}\" y=\"{high:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#e3f0e3\"/>\n",
        w - left - right,
        low - high
    ));
    for i in 0..=5 {
        let m = top * f64::from(i) / 5.0;
        out.push_str(&format!(
            "<line x1=\"{left}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{m:.0} MiB</text>\n",
            w - right,
            y(m),
            y(m),
            left - 6.0,
            y(m) + 4.0
        ));
    }
    for i in 0..=5 {
        let n = SOAK_MESSAGES * i / 5;
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{n}</text>\n",
            x(n),
            h - bottom + 18.0
        ));
    }
    out.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">messages answered (band: ±10% of the memory after {SOAK_EARLY})</text>\n",
        (left + w - right) / 2.0,
        h - 10.0
    ));
    let points: Vec<String> = samples.iter().map(|s| format!("{:.1},{:.1}", x(s.1), y(mib(s.2)))).collect();
    out.push_str(&format!(
        "<polyline fill=\"none\" stroke=\"#1f5fa8\" stroke-width=\"1.5\" points=\"{}\"/>\n</svg>\n",
        points.join(" ")
    ));
    out
}

fn main() {
    // `GATEWAY_BENCH_ONLY=idle` (or `throughput`, `adapters`, comma-separated) runs those alone.
    let only = std::env::var("GATEWAY_BENCH_ONLY").unwrap_or_default();
    let runs = |part: &str| only.is_empty() || only.split(',').any(|p| p.trim() == part);
    if runs("throughput") {
        throughput_and_latency();
    }
    if runs("idle") {
        idle_sessions();
    }
    if runs("adapters") {
        adapter_instances();
    }
    if runs("soak") {
        soak();
    }
}
