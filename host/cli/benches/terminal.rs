//! Figures for the terminal front door (issue: "rendering must not slow the stream"):
//! - rendering a 2,000-line markdown answer with code blocks, tables and lists: once whole, and
//!   streamed through the live region in word-sized pieces as a model sends them (the renderer's
//!   own modules, compiled in here, writing to memory);
//! - keystroke-to-screen latency while an answer streams, and while a command's output streams
//!   into the footer: the real release binary in a pseudo-terminal (util-linux `script`), a mock
//!   model streaming a long answer at 200 words a second (or calling the terminal tool on a
//!   command printing a line every 20 ms), a key typed every 50 ms; the time from writing the
//!   key to the terminal until the footer's input line holding it comes back out (goal: p99
//!   under 16 ms);
//! - a resize while a 2,000-line answer is still arriving as one block (the worst case: a resize
//!   draws again only the block still arriving, and here that is all of it), redrawn at the new
//!   width (goal: under 50 ms).
//!
//! Run: `cargo bench -p talaria-cli --bench terminal`
#![allow(dead_code, unsafe_code)]

// The renderer's own modules; their unit tests are not built here.
#[allow(unused_imports)]
#[path = "../src/live.rs"]
mod live;
#[allow(unused_imports)]
#[path = "../src/markdown.rs"]
mod markdown;
#[allow(unused_imports)]
#[path = "../src/screen.rs"]
mod screen;
#[allow(unused_imports)]
#[path = "../src/wrap.rs"]
mod wrap;

use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use talaria_mock_llm::{MockLlm, Reply, Script, Step};

/// A long answer as models write them: headings, prose, lists, a table, code in three languages.
fn answer(lines: usize) -> String {
    let mut out = String::new();
    let mut n = 0;
    let mut section = 0;
    while n < lines {
        section += 1;
        out.push_str(&format!("## Part {section}: what the code does\n\nThis part explains **step {section}** of the change, with `inline code`, a [link](https://example.test/{section}) and enough words to wrap at the width of an ordinary terminal window.\n\n"));
        out.push_str("- first point, *emphasised*\n- second point with `code`\n  - a nested point\n\n");
        out.push_str(
            "| name | kind | size |\n|---|:---:|---:|\n| main.rs | source | 1200 |\n| lib.rs | source | 88 |\n\n",
        );
        out.push_str("```rust\n");
        for i in 0..12 {
            out.push_str(&format!("fn step_{section}_{i}(x: u64) -> u64 {{ x.wrapping_mul({i}) + 1 }} // note {i}\n"));
        }
        out.push_str("```\n\n```python\n");
        for i in 0..6 {
            out.push_str(&format!("def step_{section}_{i}(x):\n    return x * {i} + 1\n"));
        }
        out.push_str("```\n\n");
        n += 37;
    }
    out
}

/// Word-sized pieces, each with the whitespace before it.
fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() && in_word {
            out.push(&text[start..i]);
            start = i;
            in_word = false;
        } else if !c.is_whitespace() {
            in_word = true;
        }
    }
    out.push(&text[start..]);
    out
}

fn render_figures() {
    let text = answer(2_000);
    let lines = text.lines().count();
    markdown::warm_up();
    let look = markdown::Look { width: 100, color: true, hyperlinks: true, truecolor: true };
    let mut whole = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let rendered = markdown::render(&text, &look, &mut markdown::Highlights::default());
        whole.push(t.elapsed());
        assert!(rendered.len() > lines / 2);
    }
    whole.sort();
    println!("render {lines}-line answer whole: median {:.1} ms", ms(whole[2]));

    let pieces = words(&text);
    let mut totals = Vec::new();
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let mut live = live::Live::new(true);
        let mut sink = Vec::with_capacity(1 << 20);
        let t = Instant::now();
        for piece in &pieces {
            let one = Instant::now();
            live.push(piece, &mut sink, (100, 40));
            worst = worst.max(one.elapsed());
            sink.clear();
        }
        live.finish(&mut sink, (100, 40));
        totals.push(t.elapsed());
    }
    totals.sort();
    let total = totals[2];
    println!(
        "stream {lines}-line answer in {} pieces: median {:.1} ms in all ({:.1} µs a piece), slowest piece {:.2} ms",
        pieces.len(),
        ms(total),
        total.as_secs_f64() * 1e6 / pieces.len() as f64,
        ms(worst)
    );
}

fn resize_figures() {
    // One block: a code fence of 2,000 lines, still open.
    let mut text = String::from("```rust\n");
    for i in 0..2_000 {
        text.push_str(&format!(
            "fn step_{i}(x: u64) -> u64 {{ x.wrapping_mul({i}) + 1 }} // a comment long enough to wrap at 80\n"
        ));
    }
    markdown::warm_up();
    let mut times = Vec::new();
    for round in 0..7 {
        let mut live = live::Live::new(true);
        let mut sink = Vec::with_capacity(1 << 20);
        live.push(&text, &mut sink, (120, 40));
        let width = if round % 2 == 0 { 80 } else { 160 };
        let t = Instant::now();
        live.redraw(&mut sink, (width, 40));
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "resize while a 2,000-line block is still arriving, redrawn at the new width: median {:.1} ms, max {:.1} ms (goal < 50 ms)",
        ms(times[3]),
        ms(times[6])
    );
}

fn latency_figures() {
    let text = answer(600);
    let streaming = Script::new([Reply::text(text).paced(5).into()]);
    keystrokes("while an answer streams at 200 words/s", streaming, b"explains");
    // A command printing a line every 20 ms for 10 s: its last lines stream into the footer.
    let command = "for i in $(seq 1 500); do echo out-line-$i; sleep 0.02; done";
    let tool =
        Script::new([Step::tool_call("terminal", serde_json::json!({ "command": command })), Step::text("done")]);
    keystrokes("while a command streams a line every 20 ms", tool, b"out-line-20");
}

/// Keys typed into the footer every 50 ms once `busy` is on the screen, in the real release
/// binary on a pseudo-terminal, the model answering with `script`: the time from writing each
/// key until the input line holding it comes back out.
fn keystrokes(what: &str, script: Script, busy: &[u8]) {
    let mock = MockLlm::start(script);
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    let config = format!(
        "[model]\nprovider = \"custom\"\nname = \"bench\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\n\n[agent]\nauto_title = false\n",
        mock.base_url()
    );
    std::fs::write(home.path().join("config.toml"), config).expect("config");
    let command = format!("stty rows 40 cols 100 && exec {} chat", env!("CARGO_BIN_EXE_talaria"));
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .current_dir(workspace.path())
        .env("TALARIA_HOME", home.path())
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script(1) from util-linux");
    let mut input = child.stdin.take().expect("stdin");
    let mut output = child.stdout.take().expect("stdout");
    let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let sink = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok(n) = output.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().expect("lock").extend_from_slice(&buf[..n]);
        }
    });
    let wait_for = |needle: &[u8], from: usize, limit: Duration| -> Option<Instant> {
        let start = Instant::now();
        loop {
            {
                let seen = seen.lock().expect("lock");
                if seen.len() > from && seen[from..].windows(needle.len()).any(|w| w == needle) {
                    return Some(Instant::now());
                }
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    wait_for(b"Alt-Enter", 0, Duration::from_secs(30)).expect("the REPL started");
    input.write_all(b"explain it all\r").expect("write");
    wait_for(busy, 0, Duration::from_secs(30)).expect("the turn is under way");
    let mut typed = String::new();
    let mut latencies = Vec::new();
    for i in 0..100 {
        // Letters the answer never holds in a row, so the typed line is found unambiguously.
        let key = char::from(b"QZXJKVWY"[i % 8]);
        typed.push(key);
        let from = seen.lock().expect("lock").len();
        let sent = Instant::now();
        input.write_all(key.to_string().as_bytes()).expect("key");
        match wait_for(typed.as_bytes(), from, Duration::from_secs(2)) {
            Some(at) => latencies.push(at - sent),
            None => println!("key {i} never showed"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    latencies.sort();
    if latencies.is_empty() {
        println!("keystroke to screen {what}: no key showed");
        return;
    }
    let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!(
        "keystroke to screen {what} ({} keys): median {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms (goal: p99 < 16 ms)",
        latencies.len(),
        ms(pick(0.5)),
        ms(pick(0.9)),
        ms(pick(0.99)),
        ms(*latencies.last().expect("one"))
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    render_figures();
    resize_figures();
    latency_figures();
}
