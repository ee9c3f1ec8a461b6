//! The waiting indicator: from the moment a model request is sent until the first piece of its
//! answer, one line on stderr says what talaria waits for and for how long
//! (`⠹ waiting for custom/llama… 12s`), redrawn in place by a thread of its own; and while tool
//! calls run, which and for how long (`⠹ terminal running… 4s`).
//!
//! Shown only when stderr is a terminal; with `NO_COLOR` it has no colour. While the REPL's
//! footer is up ([`crate::screen`]) the line is the footer's first. A reply within [`GRACE`] never shows it at all. The renderer stops it
//! before printing anything else, and prints notices (retries) through [`Waiting::interrupt`],
//! so the line never mixes with other output.

use std::io::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use owo_colors::OwoColorize as _;

/// How long a request may take before the indicator appears.
pub const GRACE: Duration = Duration::from_millis(250);
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

#[derive(Debug, Default)]
struct State {
    stop: bool,
    /// The indicator is on the screen (the line must be cleared before other output).
    drawn: bool,
}

/// A running indicator; dropping it stops it and clears its line.
pub struct Waiting {
    state: Arc<Mutex<State>>,
    thread: Option<JoinHandle<()>>,
}

impl Waiting {
    /// Start showing `waiting for LABEL…` with the time since now; `color`: in colour.
    pub fn start(label: String, color: bool) -> Self {
        Self::since(format!("waiting for {label}…"), Instant::now(), color)
    }

    /// Start showing `WHAT` with the time since `started` (shown once [`GRACE`] has passed
    /// since then).
    pub fn since(what: String, started: Instant, color: bool) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("waiting".into())
            .spawn(move || {
                std::thread::park_timeout(GRACE.saturating_sub(started.elapsed()));
                let tick = Duration::from_millis(100);
                let mut frame = 0;
                loop {
                    {
                        let mut state = lock(&shared);
                        if state.stop {
                            break;
                        }
                        let secs = started.elapsed().as_secs();
                        frame = (frame + 1) % SPINNER.len();
                        let line = if color {
                            format!("{} {}", SPINNER[frame].cyan(), format!("{what} {secs}s").dimmed())
                        } else {
                            format!("{} {what} {secs}s", SPINNER[frame])
                        };
                        if crate::screen::is_up() {
                            crate::screen::update(|f| f.status = Some(line));
                        } else {
                            let mut err = std::io::stderr().lock();
                            let _ = write!(err, "\r\x1b[2K{line}");
                            let _ = err.flush();
                        }
                        state.drawn = true;
                    }
                    std::thread::park_timeout(tick);
                }
            })
            .ok();
        Self { state, thread }
    }

    /// Run `print` with the indicator's line cleared and held off (it comes back on the next
    /// line afterwards).
    pub fn interrupt<R>(&self, print: impl FnOnce() -> R) -> R {
        let mut state = lock(&self.state);
        clear(&mut state);
        print()
    }

    /// Stop and clear the line.
    pub fn stop(&mut self) {
        {
            let mut state = lock(&self.state);
            state.stop = true;
            clear(&mut state);
        }
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.stop();
    }
}

fn clear(state: &mut State) {
    if state.drawn {
        if crate::screen::is_up() {
            crate::screen::update(|f| {
                f.status = None;
                f.output.clear();
            });
        } else {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
        state.drawn = false;
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quick_reply_never_draws_and_stopping_is_prompt() {
        let mut waiting = Waiting::start("custom/m".into(), false);
        let started = Instant::now();
        waiting.stop();
        assert!(started.elapsed() < GRACE, "stop wakes the thread instead of waiting out its sleep");
        assert!(!lock(&waiting.state).drawn);
    }
}
