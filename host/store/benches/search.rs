//! Search latency over 100k messages: fills a temporary state database with realistic sessions
//! (1000 sessions of 100 messages: questions, answers, tool calls and tool output, some CJK),
//! then prints p50/p99 for a set of queries. Target (DESIGN.md): session search < 10 ms p50.
//!
//! `cargo bench -p talaria-store --bench search` (set `SEARCH_BENCH_MESSAGES` for another size,
//! `SEARCH_BENCH_ENGINES=sqlite` or `postgres` for one engine; PostgreSQL is a throwaway local
//! cluster, which needs Debian's `postgresql`, unless `SEARCH_BENCH_URL` names a database;
//! `SEARCH_BENCH_ONLY=common` times only the queries whose name starts with it, `SEARCH_BENCH_SHOW`
//! prints each one's first hit).

use std::time::{Duration, Instant};

use talaria_protocol::{Message, Role, ToolCall};
use talaria_store::{NewSession, SearchQuery, Store};

const MESSAGES_PER_SESSION: usize = 100;
const RUNS: usize = 200;

const COMMON: &[&str] = &[
    "the",
    "to",
    "and",
    "a",
    "of",
    "is",
    "in",
    "it",
    "that",
    "for",
    "you",
    "this",
    "with",
    "on",
    "be",
    "not",
    "are",
    "can",
    "we",
    "if",
    "file",
    "use",
    "function",
    "error",
    "run",
    "code",
    "test",
    "as",
    "from",
    "at",
    "an",
    "by",
    "but",
    "or",
    "have",
    "will",
    "should",
    "need",
    "want",
    "make",
    "fix",
    "add",
    "change",
    "now",
    "then",
    "so",
    "just",
    "like",
    "what",
    "how",
    "why",
    "when",
    "which",
    "there",
    "here",
    "some",
    "all",
    "one",
    "new",
    "value",
    "return",
    "type",
    "string",
    "list",
    "data",
    "config",
    "server",
    "request",
    "response",
    "build",
    "version",
    "path",
    "directory",
    "command",
    "output",
    "line",
    "module",
    "import",
    "class",
    "method",
    "call",
    "variable",
    "update",
    "install",
    "package",
    "dependency",
    "script",
    "check",
    "read",
    "write",
    "open",
    "close",
    "start",
    "stop",
    "debug",
    "log",
    "message",
    "user",
    "session",
    "model",
    "tool",
    "result",
    "query",
    "database",
    "table",
    "index",
    "search",
    "cache",
    "memory",
    "thread",
    "process",
    "async",
    "await",
    "future",
    "task",
    "loop",
    "event",
    "handler",
    "client",
    "api",
    "endpoint",
    "token",
    "key",
    "secret",
    "password",
    "network",
    "port",
    "host",
    "docker",
    "container",
    "image",
    "volume",
    "compose",
    "deploy",
    "release",
    "branch",
    "commit",
    "merge",
    "rebase",
    "review",
    "issue",
    "bug",
    "feature",
    "refactor",
    "rename",
    "delete",
    "remove",
    "create",
    "parse",
    "format",
    "json",
    "yaml",
    "toml",
    "schema",
    "migration",
    "struct",
    "enum",
    "trait",
    "impl",
    "crate",
    "cargo",
    "rust",
    "python",
    "node",
    "javascript",
    "typescript",
    "react",
    "component",
    "state",
    "props",
    "render",
    "style",
    "layout",
    "button",
    "input",
    "form",
    "validation",
    "timeout",
    "retry",
    "backoff",
    "latency",
    "throughput",
    "benchmark",
    "profile",
    "optimize",
    "slow",
    "fast",
    "panic",
    "unwrap",
    "option",
    "lifetime",
    "borrow",
    "mutable",
    "reference",
    "pointer",
    "vector",
    "hashmap",
    "iterator",
    "closure",
    "macro",
    "generic",
    "constraint",
    "compile",
    "linker",
    "warning",
    "deprecated",
    "upgrade",
    "kernel",
    "permission",
    "sudo",
    "shell",
    "bash",
    "environment",
    "variable",
    "terminal",
    "window",
    "editor",
    "plugin",
    "extension",
    "sandbox",
    "wasm",
    "grant",
    "policy",
    "approval",
    "weather",
    "lisbon",
    "forecast",
    "temperature",
    "recipe",
    "travel",
    "flight",
    "hotel",
    "budget",
    "invoice",
];

const CJK: &[&str] = &[
    "数据库迁移怎么做",
    "请帮我检查这个错误",
    "配置文件在哪里",
    "服务器启动失败了",
    "如何优化查询性能",
    "日本語のテキストを検索する",
    "ファイルを開けません",
    "한국어 검색 테스트",
    "数据",
    "缓存",
    "线程",
    "内存泄漏",
];

const TOOLS: &[&str] = &["terminal", "read_file", "write_file", "web_search", "list_dir", "patch", "session_search"];

/// Words with a Zipf-like frequency: a few very common, a long tail of rare ones.
struct Vocab {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Vocab {
    fn new(rng: &mut fastrand::Rng) -> Self {
        let mut words: Vec<String> = COMMON.iter().map(|w| (*w).to_owned()).collect();
        let syllables = ["ka", "lo", "mi", "ren", "tor", "vex", "qua", "zim", "pel", "dra", "sun", "bri", "co", "nyx"];
        while words.len() < 20_000 {
            let n = rng.usize(2..5);
            let w: String = (0..n).map(|_| syllables[rng.usize(..syllables.len())]).collect();
            words.push(w);
        }
        let mut total = 0.0;
        let cumulative = (1..=words.len())
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(1.05);
                total
            })
            .collect();
        Self { words, cumulative }
    }

    fn word(&self, rng: &mut fastrand::Rng) -> &str {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let x = rng.f64() * total;
        let i = self.cumulative.partition_point(|&c| c < x).min(self.words.len() - 1);
        &self.words[i]
    }

    fn text(&self, rng: &mut fastrand::Rng, words: std::ops::Range<usize>) -> String {
        let words = rng.usize(words);
        let mut out = String::new();
        for i in 0..words {
            if i > 0 {
                out.push(if rng.u8(..12) == 0 { '\n' } else { ' ' });
            }
            match rng.u8(..40) {
                0 => out.push_str(&format!("src/{}/{}.rs", self.word(rng), self.word(rng))),
                1 => out.push_str(&format!("{}_{}()", self.word(rng), self.word(rng))),
                2 => out.push_str(&format!("{}", rng.u32(..100_000))),
                _ => out.push_str(self.word(rng)),
            }
        }
        if rng.u8(..30) == 0 {
            out.push(' ');
            out.push_str(CJK[rng.usize(..CJK.len())]);
        }
        out
    }
}

/// One session's worth of turns: user, then either an answer or tool calls, results and an answer.
fn session_messages(vocab: &Vocab, rng: &mut fastrand::Rng) -> Vec<Vec<Message>> {
    let mut turns = Vec::new();
    let mut n = 0;
    while n < MESSAGES_PER_SESSION {
        let mut turn = vec![Message::user(vocab.text(rng, 5..40))];
        if rng.bool() {
            let calls: Vec<ToolCall> = (0..rng.usize(1..3))
                .map(|i| {
                    ToolCall::new(
                        format!("call_{n}_{i}"),
                        TOOLS[rng.usize(..TOOLS.len())],
                        format!("{{\"path\":\"src/{}.rs\",\"query\":\"{}\"}}", vocab.word(rng), vocab.word(rng)),
                    )
                })
                .collect();
            let results: Vec<Message> =
                calls.iter().map(|c| Message::tool(&c.id, &c.name, vocab.text(rng, 30..300))).collect();
            turn.push(Message::Assistant { content: String::new(), tool_calls: calls, reasoning: None, extra: None });
            turn.extend(results);
        }
        turn.push(Message::assistant(vocab.text(rng, 20..150)));
        turn.truncate(MESSAGES_PER_SESSION - n);
        n += turn.len();
        turns.push(turn);
    }
    turns
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// What the messages take on PostgreSQL: the table (with its TOAST) and each of its indexes.
async fn print_sizes(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let mib = |bytes: i64| bytes as f64 / 1048576.0;
    let table = client.query_one("SELECT pg_table_size('messages'), pg_indexes_size('messages')", &[]).await?;
    let indexes = client
        .query(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index
             WHERE indrelid = 'messages'::regclass ORDER BY 2 DESC",
            &[],
        )
        .await?;
    let each: Vec<String> = indexes.iter().map(|r| format!("{} {:.0}", r.get::<_, String>(0), mib(r.get(1)))).collect();
    println!(
        "messages on PostgreSQL: table {:.0} MiB, indexes {:.0} MiB ({})",
        mib(table.get(0)),
        mib(table.get(1)),
        each.join(", ")
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engines = std::env::var("SEARCH_BENCH_ENGINES").unwrap_or_else(|_| "sqlite,postgres".into());
    for engine in engines.split(',') {
        match engine.trim() {
            "sqlite" => {
                println!("== SQLite ==");
                let dir = tempfile::tempdir()?;
                // SEARCH_BENCH_DB keeps the filled database at that path and reuses it on the next run.
                let path = std::env::var_os("SEARCH_BENCH_DB").map_or_else(|| dir.path().join("state.db"), Into::into);
                let reuse = path.exists();
                let store = Store::open(&path)?;
                bench(&store, reuse, Some(&path)).await?;
            }
            "postgres" => {
                println!("== PostgreSQL 15 (a local cluster on a unix socket, fsync off) ==");
                // SEARCH_BENCH_URL: a database of your own (filled on the first run, reused after).
                let (url, reuse) = match std::env::var("SEARCH_BENCH_URL") {
                    Ok(url) => {
                        let store = Store::connect(&url).await?;
                        let filled = !store.list_sessions(1, 0).await?.is_empty();
                        (url, filled)
                    }
                    Err(_) => (talaria_test_support::postgres::Postgres::shared().database(), false),
                };
                bench(&Store::connect(&url).await?, reuse, None).await?;
                print_sizes(&url).await?;
            }
            other => return Err(format!("SEARCH_BENCH_ENGINES: unknown engine `{other}` (sqlite, postgres)").into()),
        }
    }
    Ok(())
}

/// Fill `store` (unless `reuse`), then time appends and searches. `path`: the SQLite file, for
/// its size.
async fn bench(store: &Store, reuse: bool, path: Option<&std::path::Path>) -> Result<(), Box<dyn std::error::Error>> {
    let total: usize = std::env::var("SEARCH_BENCH_MESSAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let mut rng = fastrand::Rng::with_seed(42);
    let vocab = Vocab::new(&mut rng);

    let started = Instant::now();
    let sessions = total.div_ceil(MESSAGES_PER_SESSION);
    let mut commits = 0usize;
    for s in 0..if reuse { 0 } else { sessions } {
        let id = format!("bench_{s:05}");
        store
            .create_session(&NewSession {
                id: id.clone(),
                source: "cli".into(),
                model: "m".into(),
                provider: "p".into(),
                system_prompt: "You are talaria.".into(),
                parent_id: None,
                cwd: "/tmp".into(),
            })
            .await?;
        for turn in session_messages(&vocab, &mut rng) {
            store.append_messages(&id, &turn).await?;
            commits += 1;
        }
    }
    let fill = started.elapsed();
    let size = match path.and_then(std::path::Path::parent) {
        Some(dir) => {
            let bytes: u64 = std::fs::read_dir(dir)?.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();
            format!("; files {:.0} MiB", bytes as f64 / 1048576.0)
        }
        None => String::new(),
    };
    println!(
        "filled {} messages in {} sessions in {:.1} s ({:.0} µs per turn commit){size}",
        sessions * MESSAGES_PER_SESSION,
        sessions,
        fill.as_secs_f64(),
        fill.as_micros() as f64 / commits.max(1) as f64,
    );

    // What a cheap tool turn costs the loop: one commit of a tool call and its short result.
    let append_id = format!("append_{}", Store::new_session_id());
    store
        .create_session(&NewSession {
            id: append_id.clone(),
            source: "cli".into(),
            model: "m".into(),
            provider: "p".into(),
            system_prompt: String::new(),
            parent_id: None,
            cwd: "/tmp".into(),
        })
        .await?;
    let mut times = Vec::with_capacity(RUNS);
    for i in 0..RUNS {
        let call = ToolCall::new(format!("c{i}"), "read_file", r#"{"path":"src/main.rs"}"#);
        let turn = [
            Message::Assistant { content: String::new(), tool_calls: vec![call], reasoning: None, extra: None },
            Message::tool(format!("c{i}"), "read_file", "fn main() {\n    println!(\"hello\");\n}\n"),
        ];
        let t = Instant::now();
        store.append_messages(&append_id, &turn).await?;
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "append of a small tool turn (2 messages): p50 {:.3}ms p99 {:.3}ms",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3
    );

    // Those turns wait to be indexed (no answer ended a turn): the next search catches up.
    let t = Instant::now();
    let caught_up = store.index_pending().await?;
    println!("index {caught_up} waiting messages in one batch: {:.3}ms", t.elapsed().as_secs_f64() * 1e3);

    let rare = vocab.words[15_000].clone();
    let mid = vocab.words[2_000].clone();
    let queries: Vec<(&str, SearchQuery<'_>)> = vec![
        ("rare word", SearchQuery::new(&rare)),
        ("mid-frequency word", SearchQuery::new(&mid)),
        ("common word", SearchQuery::new("docker")),
        ("very common word (the)", SearchQuery::new("the")),
        ("two words", SearchQuery::new("docker timeout")),
        ("phrase", SearchQuery::new("\"docker compose\"")),
        ("prefix", SearchQuery::new("migrat*")),
        ("OR", SearchQuery::new("lisbon OR forecast")),
        ("NOT", SearchQuery::new("docker NOT compose")),
        (
            "role + exclude",
            SearchQuery { role: Some(Role::User), exclude_session: Some("bench_00000"), ..SearchQuery::new("docker") },
        ),
        ("one session", SearchQuery { session_id: Some("bench_00500"), ..SearchQuery::new("docker") }),
        ("substring fallback", SearchQuery::new("rc/docke")),
        ("nothing found", SearchQuery::new("xyzzyplugh")),
        ("CJK, 3+ chars", SearchQuery::new("服务器启动")),
        ("CJK, 2 chars", SearchQuery::new("缓存")),
        ("CJK, 2 chars, rare", SearchQuery::new("漢字")),
    ];
    println!("{:<28} {:>6} {:>10} {:>10}", "query (limit 20)", "hits", "p50", "p99");
    // SEARCH_BENCH_ONLY: only the queries whose name starts with it (`common`, `CJK`).
    let only = std::env::var("SEARCH_BENCH_ONLY").unwrap_or_default();
    for (name, q) in queries.iter().filter(|(name, _)| name.starts_with(only.as_str())) {
        let hits = store.search(q).await?;
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let t = Instant::now();
            std::hint::black_box(store.search(q).await?);
            times.push(t.elapsed());
        }
        times.sort();
        println!(
            "{name:<28} {:>6} {:>8.2}ms {:>8.2}ms",
            hits.len(),
            percentile(&times, 0.5).as_secs_f64() * 1e3,
            percentile(&times, 0.99).as_secs_f64() * 1e3
        );
        if std::env::var_os("SEARCH_BENCH_SHOW").is_some()
            && let Some(h) = hits.first()
        {
            println!("    {} #{} {:?}: {}", h.session_id, h.message_id, h.role, h.snippet.replace('\n', " "));
        }
    }
    Ok(())
}
