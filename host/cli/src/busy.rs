//! Reading the terminal while a turn runs: `/stop`, answers to approvals and questions, and
//! messages typed ahead.
//!
//! The line editor is idle during a turn, so a thread reads whole lines (the terminal is in its
//! normal, line-buffered mode). It polls stdin with a short timeout and reads only when a line
//! is ready, so stopping it never leaves a read pending that would steal the editor's next line.
#![allow(unsafe_code)]

use std::io::BufRead as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc;

/// Lines typed while a turn runs.
pub struct BusyInput {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub lines: mpsc::UnboundedReceiver<String>,
}

impl BusyInput {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, lines) = mpsc::unbounded_channel();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                if !readable(Duration::from_millis(50)) {
                    continue;
                }
                let mut line = String::new();
                match std::io::stdin().lock().read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        // Ctrl-D (end of input) while busy: leave once the turn is done, as
                        // the line editor would have.
                        let _ = tx.send("/exit".to_string());
                        break;
                    }
                    Ok(_) => {
                        if tx.send(line.trim_end_matches(['\n', '\r']).to_string()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Self { stop, thread: Some(thread), lines }
    }

    /// Stop reading; lines already read stay in `lines`.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for BusyInput {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether stdin has input within `timeout`.
fn readable(timeout: Duration) -> bool {
    let mut fds = libc::pollfd { fd: libc::STDIN_FILENO, events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd that lives across the call.
    let n = unsafe { libc::poll(&mut fds, 1, ms) };
    n > 0 && fds.revents & (libc::POLLIN | libc::POLLHUP) != 0
}
