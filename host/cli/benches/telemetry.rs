//! What traces cost (issue 42's goal: off costs nothing measurable, on adds under 50 µs a span).
//!
//! - In this process, with the subscriber the binary sets up: the time to open, enter, record
//!   and close one span like a store transaction's, with traces off (the log's filter only) and
//!   on (the OTLP layer, exporting to a local receiver), in rounds small enough that the
//!   exporter's queue never drops one (the receiver's count is printed).
//! - The real release binary: `chat -q "use read_file 20 times"` against an instant mock, with
//!   traces off and on (`[telemetry]` pointing at the receiver), interleaved; the difference per
//!   tool turn and per span exported (the receiver counts them).
//!
//! The receiver decodes each export with the `opentelemetry-proto` crate.
//!
//! Run: `cargo bench -p talaria-cli --bench telemetry`

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prost::Message as _;
use talaria_mock_llm::{Auto, MockLlm, Script};
use talaria_protocol::trace::TARGET;

const RUNS: usize = 15;
/// Spans a round opens in this process: under the exporter's queue of 2,048.
const ROUND: usize = 500;
const ROUNDS: usize = 20;

/// A local OTLP/HTTP receiver: the spans it decoded so far.
fn receiver() -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let spans = Arc::new(AtomicU64::new(0));
    let counted = spans.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let counted = counted.clone();
            std::thread::spawn(move || serve(stream, &counted));
        }
    });
    (port, spans)
}

/// Answer the exports on one connection (kept alive between them).
fn serve(stream: std::net::TcpStream, spans: &AtomicU64) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut out = stream;
    loop {
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().expect("a length");
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).expect("body");
        let request =
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(body.as_slice())
                .expect("an OTLP export");
        let n: usize = request.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
        spans.fetch_add(n as u64, Ordering::SeqCst);
        out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n")
            .expect("answer");
    }
}

/// Nanoseconds per span (median of [`ROUNDS`] rounds of [`ROUND`]), each opened under a turn's
/// span as a store transaction's is, with `dispatch` as the process's subscriber.
fn per_span(dispatch: &tracing::Dispatch, pause: Duration) -> f64 {
    tracing::dispatcher::with_default(dispatch, || {
        let mut rounds = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let turn = tracing::info_span!(target: TARGET, "turn", talaria.source = "bench");
            let _in_turn = turn.enter();
            let start = Instant::now();
            for _ in 0..ROUND {
                let operation = "append_with";
                let span = tracing::info_span!(
                    target: TARGET,
                    "store",
                    otel.name = format!("store {operation}"),
                    otel.kind = "client",
                    db.system.name = "sqlite",
                    db.operation.name = operation,
                    otel.status_code = tracing::field::Empty,
                );
                let entered = span.enter();
                std::hint::black_box(&entered);
                drop(entered);
                span.record("otel.status_code", "OK");
            }
            rounds.push(start.elapsed().as_nanos() as f64 / ROUND as f64);
            drop(_in_turn);
            drop(turn);
            std::thread::sleep(pause);
        }
        median(rounds).0
    })
}

/// The log's layer as the binary has it (its own filter, at `warn`), writing nowhere.
fn log<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    tracing_subscriber::fmt::layer().with_writer(std::io::sink).with_filter(tracing_subscriber::EnvFilter::new("warn"))
}

fn median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (p(0.5), p(0.9))
}

/// One run of the release binary: its wall time.
fn run(home: &Path, workspace: &Path, args: &[&str]) -> Duration {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(args)
        .current_dir(workspace)
        .env("TALARIA_HOME", home)
        .env_remove("TALARIA_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("talaria");
    let wall = start.elapsed();
    assert!(out.status.success(), "talaria {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    wall
}

fn main() {
    let (port, received) = receiver();
    let endpoint = format!("http://127.0.0.1:{port}");

    // In this process.
    // As the binary sets it up: the log's layer with its own filter (at `warn`), and no traces.
    let off = {
        use tracing_subscriber::layer::SubscriberExt as _;
        tracing::Dispatch::new(tracing_subscriber::registry().with(log()))
    };
    let off_ns = per_span(&off, Duration::ZERO);
    let home = tempfile::tempdir().expect("home");
    std::fs::write(home.path().join("config.toml"), format!("[telemetry]\nendpoint = \"{endpoint}\"\n"))
        .expect("config");
    let (layer, tracing) = talaria_core::telemetry::start(home.path(), true).expect("telemetry").expect("on");
    let on = {
        use tracing_subscriber::layer::SubscriberExt as _;
        tracing::Dispatch::new(tracing_subscriber::registry().with(layer).with(log()))
    };
    // A pause after each round lets the exporter send it (it sends 512 at a time, or every 5 s).
    let on_ns = per_span(&on, Duration::from_millis(300));
    drop(on);
    tracing.finish();
    let sent = received.swap(0, Ordering::SeqCst);
    println!("talaria traces: the cost of a span ({ROUNDS} rounds of {ROUND}, median)");
    println!("{:<44} {off_ns:>10.1} ns", "traces off (the log's filter only)");
    println!("{:<44} {:>10.2} µs   (goal: under 50 µs)", "traces on (OTLP to a local receiver)", on_ns / 1e3);
    println!("{:<44} {sent:>10} of {}", "spans the receiver decoded", ROUNDS * (ROUND + 1));

    // The release binary, 20 tool turns a run.
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("small.txt"), "a small file\nwith two lines\n").expect("write");
    let mock = MockLlm::start(Script {
        auto: Some(Auto { tool: "read_file".into(), args: serde_json::json!({"path": "small.txt"}), pace_ms: None }),
        ..Script::default()
    });
    let model = format!(
        "[model]\nprovider = \"custom\"\nname = \"bench\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\n",
        mock.base_url()
    );
    let plain = tempfile::tempdir().expect("home");
    std::fs::write(plain.path().join("config.toml"), &model).expect("config");
    let traced = tempfile::tempdir().expect("home");
    std::fs::write(traced.path().join("config.toml"), format!("{model}\n[telemetry]\nendpoint = \"{endpoint}\"\n"))
        .expect("config");
    let w = workspace.path();
    let args = ["chat", "-q", "use read_file 20 times"];
    for home in [plain.path(), traced.path()] {
        run(home, w, &["tools", "list"]);
        run(home, w, &args);
        mock.forget_requests();
    }
    // Runs of `args` with traces off and on, interleaved: the medians, and spans per run.
    let compare = |args: &[&str]| {
        received.store(0, Ordering::SeqCst);
        let (mut off_runs, mut on_runs) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            off_runs.push(run(plain.path(), w, args).as_secs_f64() * 1e3);
            on_runs.push(run(traced.path(), w, args).as_secs_f64() * 1e3);
            mock.forget_requests();
        }
        let spans = received.load(Ordering::SeqCst) as f64 / RUNS as f64;
        (median(off_runs), median(on_runs), spans)
    };
    println!("\nthe release binary, against an instant mock ({RUNS} runs each, interleaved)");
    let ((off1, _), (on1, _), spans1) = compare(&["chat", "-q", "hello"]);
    println!("{:<44} p50 off {off1:>8.2} ms  on {on1:>8.2} ms  {spans1:>5.0} spans", "chat -q, no tool");
    let ((off, off90), (on, on90), spans) = compare(&args);
    println!("{:<44} p50 off {off:>8.2} ms  on {on:>8.2} ms  {spans:>5.0} spans", "chat -q, 20 read_file turns");
    println!("{:<44} p90 off {off90:>8.2} ms  on {on90:>8.2} ms", "");
    println!("{:<44} {:>8.3} ms", "added per tool turn", ((on - off) - (on1 - off1)) / 20.0);
    println!(
        "{:<44} {:>8.2} µs   (the 20-turn run's added time less the one-shot's, over its added spans)",
        "added per span",
        ((on - off) - (on1 - off1)) * 1e3 / (spans - spans1).max(1.0)
    );
    println!(
        "{:<44} {:>8.2} ms   (the exporter's start and the exit's last export)",
        "added once per process",
        on1 - off1
    );
}
