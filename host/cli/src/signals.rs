//! SIGTERM, SIGHUP and a closed terminal end a chat the way Ctrl-C ends a reply: the turn in
//! flight is cancelled (its tools' process groups killed, an "interrupted" result committed for
//! each unfinished call), the session is closed, and talaria exits with 128 + the signal's
//! number (143 for SIGTERM, 129 for SIGHUP), as shells expect.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::exit;

/// Watches SIGTERM and SIGHUP for the whole chat.
#[derive(Clone)]
pub struct Stop {
    inner: Arc<Inner>,
}

struct Inner {
    /// The signal that arrived (0: none yet).
    signal: AtomicI32,
    /// The turn running now, cancelled when a signal arrives.
    turn: Mutex<Option<CancellationToken>>,
    arrived: Notify,
    /// Standard output and error, where they were terminals at the start.
    terminals: Vec<i32>,
}

impl Stop {
    /// Start listening. Without signal support (never on Linux), nothing is ever received.
    pub fn install() -> Self {
        let terminals = [libc::STDOUT_FILENO, libc::STDERR_FILENO].into_iter().filter(|fd| is_terminal(*fd)).collect();
        let inner =
            Arc::new(Inner { signal: AtomicI32::new(0), turn: Mutex::new(None), arrived: Notify::new(), terminals });
        for (kind, number) in [(SignalKind::terminate(), libc::SIGTERM), (SignalKind::hangup(), libc::SIGHUP)] {
            let Ok(mut stream) = signal(kind) else { continue };
            let inner = inner.clone();
            tokio::spawn(async move {
                if stream.recv().await.is_some() {
                    inner.received(number);
                }
            });
        }
        Self { inner }
    }

    /// The signal received so far, if any.
    pub fn signal(&self) -> Option<i32> {
        Some(self.inner.signal.load(Ordering::SeqCst)).filter(|s| *s != 0)
    }

    /// The exit code for the signal received: 128 + its number.
    pub fn exit_code(&self) -> Option<u8> {
        self.signal().map(|s| if s == libc::SIGHUP { exit::HANGUP } else { exit::TERMINATED })
    }

    /// Cancel `token` too when a signal arrives (one turn at a time).
    pub fn watch(&self, token: &CancellationToken) {
        *lock(&self.inner.turn) = Some(token.clone());
        if self.signal().is_some() {
            token.cancel();
        }
    }

    /// Stop watching the turn's token.
    pub fn unwatch(&self) {
        *lock(&self.inner.turn) = None;
    }

    /// Resolves once a signal has arrived.
    pub async fn arrived(&self) {
        let notified = self.inner.arrived.notified();
        if self.signal().is_some() {
            return;
        }
        notified.await;
    }

    /// The terminal went away (a read failed with EIO): treat it as the hangup it is.
    pub fn hang_up(&self) {
        self.inner.received(libc::SIGHUP);
    }
}

impl Inner {
    fn received(&self, number: i32) {
        let _ = self.signal.compare_exchange(0, number, Ordering::SeqCst, Ordering::SeqCst);
        if number == libc::SIGHUP {
            // The terminal is gone: what is still printed on the way out must not fail (a failed
            // print panics, and the session would not be closed).
            silence(&self.terminals);
        }
        if let Some(token) = lock(&self.turn).as_ref() {
            token.cancel();
        }
        self.arrived.notify_waiters();
    }
}

#[allow(unsafe_code)]
fn is_terminal(fd: i32) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// Point each of `fds` at /dev/null.
#[allow(unsafe_code)]
fn silence(fds: &[i32]) {
    let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") else { return };
    for fd in fds {
        // SAFETY: dup2 replaces descriptor `fd` (standard output or error) with /dev/null;
        // both stay valid descriptors, and Rust's stdout handle keeps working on it.
        unsafe {
            libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), *fd);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Leave now without unwinding, after killing every command still running (a second Ctrl-C,
/// or a blocked terminal read that would keep the process alive).
pub fn exit_now(code: u8) -> ! {
    talaria_runtime::process::kill_all();
    crate::busy::restore_terminal();
    let _ = crossterm::terminal::disable_raw_mode();
    std::process::exit(i32::from(code))
}
