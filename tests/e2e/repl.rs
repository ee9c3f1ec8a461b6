//! The REPL on a real pseudo-terminal (util-linux `script`), its output collected as it comes,
//! for the tests that type into it.

use std::io::{Read as _, Write as _};
use std::process::{Child, ChildStdin};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Talaria;

/// The pseudo-terminal's size.
pub(crate) const ROWS: u16 = 40;
pub(crate) const COLS: u16 = 100;

pub(crate) struct Repl {
    child: Child,
    input: ChildStdin,
    /// Raw bytes: a character may arrive split across two reads.
    seen: Arc<Mutex<Vec<u8>>>,
    /// How long [`Repl::wait_for`] waits before failing the test.
    limit: Duration,
}

impl Repl {
    pub(crate) fn start(t: &Talaria) -> Self {
        Self::start_colored(t, false)
    }

    /// [`Repl::start`], in colour when `color` (else with `NO_COLOR` set).
    pub(crate) fn start_colored(t: &Talaria, color: bool) -> Self {
        Self::attach(t.spawn_repl_colored(color))
    }

    /// `talaria ARGS` on the pseudo-terminal, without colour.
    pub(crate) fn start_args(t: &Talaria, args: &[&str]) -> Self {
        Self::attach(t.spawn_repl_args(false, args))
    }

    fn attach(mut child: Child) -> Self {
        let mut output = child.stdout.take().expect("stdout");
        let input = child.stdin.take().expect("stdin");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = output.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().expect("lock").extend_from_slice(&buf[..n]);
            }
        });
        Self { child, input, seen, limit: Duration::from_secs(30) }
    }

    /// Fail [`Repl::wait_for`] after `limit` instead of the default 180 s.
    pub(crate) fn within(mut self, limit: Duration) -> Self {
        self.limit = limit;
        self
    }

    /// Everything the REPL printed so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().expect("lock")).into_owned()
    }

    /// What the terminal shows now, as its rows of text (trailing spaces dropped), as a
    /// terminal emulator draws the output so far.
    pub(crate) fn screen(&self) -> Vec<String> {
        let mut parser = vt100::Parser::new(ROWS, COLS, 0);
        parser.process(self.text().as_bytes());
        parser.screen().contents().lines().map(|l| l.trim_end().to_string()).collect()
    }

    /// Wait until the screen's last non-blank row is `row`.
    pub(crate) fn wait_for_last_row(&self, row: &str) {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.iter().rev().find(|r| !r.is_empty()).is_some_and(|r| r == row) {
                return;
            }
            assert!(start.elapsed() < self.limit, "the last row never became {row:?}:\n{screen:#?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until what the terminal shows passes `check`; returns the screen then.
    pub(crate) fn wait_for_screen(&self, what: &str, check: impl Fn(&[String]) -> bool) -> Vec<String> {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if check(&screen) {
                return screen;
            }
            assert!(start.elapsed() < self.limit, "the screen never showed {what}:\n{screen:#?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until `needle` was printed `count` times; returns the output then.
    pub(crate) fn wait_for(&self, needle: &str, count: usize) -> String {
        let start = Instant::now();
        loop {
            let text = self.text();
            if text.matches(needle).count() >= count {
                return text;
            }
            assert!(start.elapsed() < self.limit, "never saw {needle:?} x{count} in:\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Type `line` and Enter.
    pub(crate) fn send(&mut self, line: &str) {
        self.input.write_all(format!("{line}\r").as_bytes()).expect("write");
    }

    /// Send `bytes` as typed, with no Enter.
    pub(crate) fn type_raw(&mut self, bytes: &str) {
        self.input.write_all(bytes.as_bytes()).expect("write");
    }

    /// Press Ctrl-D.
    pub(crate) fn ctrl_d(&mut self) {
        self.input.write_all(b"\x04").expect("ctrl-d");
    }

    /// Ctrl-D, then wait for a clean exit (which waits for background memory work).
    pub(crate) fn close(self) {
        self.close_showing();
    }

    /// [`Repl::close`], returning everything the REPL printed.
    pub(crate) fn close_showing(mut self) -> String {
        self.ctrl_d();
        self.wait_exit()
    }

    /// Wait for a clean exit, returning everything the REPL printed.
    pub(crate) fn wait_exit(mut self) -> String {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "the REPL exits cleanly on Ctrl-D: {status}");
                // What it printed last may still be on its way through the pipe.
                std::thread::sleep(Duration::from_millis(100));
                return self.text();
            }
            assert!(start.elapsed() < Duration::from_secs(60), "the REPL did not exit on Ctrl-D");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Repl {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
