//! The REPL in a real terminal that is resized while an answer streams (issue 41, finding 1):
//! tmux, which re-wraps its lines on a resize as most terminals do, runs `talaria chat`, is
//! resized between 80 and 120 columns, and its whole history is read back (`capture-pane`,
//! wrapped lines joined).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use talaria_mock_llm::{MockLlm, Reply, Script, Step};

use super::Talaria;

/// A detached tmux session running talaria, on a server of its own.
struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// `talaria chat` in the workspace, on a window `cols` × `rows`, without colour.
    fn chat(t: &Talaria, cols: u16, rows: u16) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let socket = dir.path().join("tmux");
        let command = format!("cd '{}' && exec {} chat", t.ws().display(), env!("CARGO_BIN_EXE_talaria"));
        let tmux = Self { socket, _dir: dir };
        let status = tmux
            .command()
            .args(["new-session", "-d", "-s", "t", "-x", &cols.to_string(), "-y", &rows.to_string(), &command])
            .env("TALARIA_HOME", t.home.path())
            .env("NO_COLOR", "1")
            .env_remove("TALARIA_LOG")
            .status()
            .expect("tmux (Debian's tmux package)");
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    fn command(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-f").arg("/dev/null").arg("-S").arg(&self.socket);
        c
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().expect("tmux");
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Type `text`, then Enter.
    fn send(&self, text: &str) {
        self.run(&["send-keys", "-t", "t", "-l", text]);
        self.run(&["send-keys", "-t", "t", "Enter"]);
    }

    fn resize(&self, cols: u16) {
        self.run(&["resize-window", "-t", "t", "-x", &cols.to_string(), "-y", "40"]);
    }

    /// Everything in the pane's history and on its screen, wrapped lines joined, trailing
    /// blanks dropped.
    fn history(&self) -> Vec<String> {
        self.run(&["capture-pane", "-p", "-J", "-t", "t", "-S", "-", "-E", "-"])
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect()
    }

    /// Wait until the history holds `needle`.
    fn wait_for(&self, needle: &str) -> Vec<String> {
        let start = Instant::now();
        loop {
            let history = self.history();
            if history.iter().any(|l| l.contains(needle)) {
                return history;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "never saw {needle:?} in:\n{}", history.join("\n"));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").status();
    }
}

/// An answer of `n` sections, each a heading and a paragraph long enough to wrap at 80
/// columns, with words found nowhere else at its start and end.
fn sections(n: usize) -> String {
    (1..=n)
        .map(|i| {
            let words = ["the", "reply", "goes", "on", "about", "sizes", "and", "speeds"].repeat(3).join(" ");
            format!("## Comparison {i}\n\nstart{i}x {words} end{i}x\n\n")
        })
        .collect()
}

/// How many lines of `history` contain `needle`.
fn count(history: &[String], needle: &str) -> usize {
    history.iter().filter(|l| l.contains(needle)).count()
}

/// Resized between 80 and 120 columns every 0.6 s while a markdown answer streams: every
/// heading and paragraph is in the history once, and no footer or indicator is left behind.
#[test]
fn resizing_while_an_answer_streams_keeps_every_line_once() {
    let t = Talaria::new();
    let answer = sections(12);
    let mock = MockLlm::start(Script::new([Step::from(Reply::text(&answer).paced(20)).delayed(800)]));
    t.use_mock(&mock, "chat_completions", "");
    let tmux = Tmux::chat(&t, 80, 40);
    tmux.wait_for("Alt-Enter");
    tmux.send("compare them");
    // While it waits for the first byte, then while the answer streams.
    let start = Instant::now();
    let mut wide = false;
    while !tmux.history().iter().any(|l| l.contains("session ") && l.contains(" in, ")) {
        assert!(start.elapsed() < Duration::from_secs(60), "the answer never ended");
        std::thread::sleep(Duration::from_millis(600));
        wide = !wide;
        tmux.resize(if wide { 120 } else { 80 });
    }
    let history = tmux.history();
    let shown = history.join("\n");
    for i in 1..=12 {
        let heading = format!("## Comparison {i}");
        assert_eq!(history.iter().filter(|l| **l == heading).count(), 1, "heading {i} once:\n{shown}");
        assert_eq!(count(&history, &format!("start{i}x")), 1, "paragraph {i} begins once:\n{shown}");
        assert_eq!(count(&history, &format!("end{i}x")), 1, "paragraph {i} ends once:\n{shown}");
    }
    assert_eq!(count(&history, "waiting for"), 0, "no indicator left behind:\n{shown}");
    assert_eq!(count(&history, "Enter stops this reply"), 0, "no footer left behind:\n{shown}");
    assert_eq!(count(&history, "› compare them"), 1, "the message above the answer stays:\n{shown}");
}
