//! Reading the terminal while a turn runs: the line being typed is kept in the footer
//! ([`crate::screen`]) below the streaming answer, never inside it; Enter hands the line over
//! (to be queued, steer the turn, interrupt it, or answer a question); while an approval waits,
//! one key answers it.
//!
//! The line editor is idle during a turn, so a thread reads keys itself with the terminal's echo
//! and line buffering off (signals stay on: Ctrl-C still interrupts). It polls stdin with a short
//! timeout and reads only what is ready, so stopping it never leaves a read pending that would
//! steal the editor's next key. Pastes arrive whole (bracketed paste), newlines and all.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc;

/// The line [`BusyInput`] hands over for Esc pressed alone: stop the reply, as Ctrl-C does.
/// Typed text never holds an escape character, so no line typed is taken for it.
pub const STOP_KEY: &str = "\u{1b}";

/// How long an escape byte waits for the rest of a sequence before it is the Esc key itself.
const ESCAPE_WAIT: Duration = Duration::from_millis(40);

/// Keys that answer an approval by themselves.
const ANSWER_KEYS: &[char] = &['y', 'o', 's', 'a', 'n', 'd'];

/// Lines typed while a turn runs.
pub struct BusyInput {
    stop: Arc<AtomicBool>,
    /// An approval waits: a key from [`ANSWER_KEYS`] (or Enter) answers at once.
    single_key: Arc<AtomicBool>,
    typed: Arc<Mutex<String>>,
    thread: Option<JoinHandle<()>>,
    /// Bracketed paste is on until [`BusyInput::stop`].
    pasting: bool,
    pub lines: mpsc::UnboundedReceiver<String>,
}

impl BusyInput {
    /// Start reading keys, with `typed` already in the line. The terminal is the REPL's
    /// ([`KeysHeld`]): echo and line buffering are already off.
    pub fn start(typed: String, _held: &KeysHeld) -> Self {
        // Ask the terminal to mark pastes (the line editor turned this off when it returned).
        crate::screen::write(b"\x1b[?2004h", false);
        let stop = Arc::new(AtomicBool::new(false));
        let single_key = Arc::new(AtomicBool::new(false));
        crate::screen::update(|f| f.input.clone_from(&typed));
        let typed = Arc::new(Mutex::new(typed));
        let (tx, lines) = mpsc::unbounded_channel();
        let (flag, single, line) = (stop.clone(), single_key.clone(), typed.clone());
        let thread =
            std::thread::Builder::new().name("keys".into()).spawn(move || read_keys(&flag, &single, &line, &tx)).ok();
        Self { stop, single_key, typed, thread, pasting: true, lines }
    }

    /// Set while an approval waits: then one key answers.
    pub fn answer_keys(&self) -> Arc<AtomicBool> {
        self.single_key.clone()
    }

    /// Stop reading and turn bracketed paste off again; returns the line left half typed.
    /// Lines already handed over stay in `lines`.
    pub fn stop(&mut self) -> String {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if std::mem::take(&mut self.pasting) {
            crate::screen::write(b"\x1b[?2004l", false);
        }
        std::mem::take(&mut *self.typed.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for BusyInput {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The REPL's hold on its terminal: echo and line buffering stay off from its start to its end,
/// between turns too. With line buffering on, a Ctrl-D pressed as a turn ends (after the keys
/// thread stopped, before the line editor took the terminal) would become an end-of-line the
/// editor never sees, and the REPL would wait for a key the user already pressed. The line
/// editor saves and restores these attributes around each line it reads.
pub struct KeysHeld {
    saved: Option<libc::termios>,
    /// Bytes typed before the keys were taken, while the terminal was still cooked.
    ahead: Vec<u8>,
}

impl KeysHeld {
    pub fn take() -> Self {
        let saved = cbreak();
        let ahead = if saved.is_some() { pending() } else { Vec::new() };
        Self { saved, ahead }
    }

    /// What was typed before the keys were taken (as talaria started): the lines ended with
    /// Enter, to be sent in order, and what follows the last of them, to be typed on. The
    /// terminal was still cooked then and had made each Enter a line feed, so a line feed
    /// there is Enter, not the Ctrl-J that puts a new line in a message.
    pub fn typed_ahead(&mut self) -> (Vec<String>, String) {
        let cooked: Vec<u8> =
            std::mem::take(&mut self.ahead).into_iter().map(|b| if b == b'\n' { b'\r' } else { b }).collect();
        let (mut lines, mut line) = (Vec::new(), String::new());
        for key in Keys::default().feed(&cooked) {
            match key {
                Key::Enter => lines.push(std::mem::take(&mut line)),
                Key::EndOfInput | Key::Stop => {}
                key => edit(&mut line, key),
            }
        }
        (lines, line)
    }
}

/// The bytes waiting to be read from the terminal, read without waiting for more.
fn pending() -> Vec<u8> {
    let mut ahead = Vec::new();
    let mut buf = [0u8; 1024];
    while readable(Duration::ZERO) {
        // SAFETY: reads into a buffer we own, at most its length.
        let n = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
        match usize::try_from(n) {
            Ok(n) if n > 0 => ahead.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    ahead
}

/// Apply an editing key to the line being typed.
fn edit(line: &mut String, key: Key) {
    match key {
        Key::Text(t) => line.push_str(&t),
        Key::Backspace => {
            line.pop();
        }
        Key::KillLine => line.clear(),
        Key::KillWord => {
            let kept = line.trim_end().rfind(char::is_whitespace).map_or(0, |i| i + 1);
            line.truncate(kept);
        }
        Key::Enter | Key::EndOfInput | Key::Stop => {}
    }
}

impl Drop for KeysHeld {
    fn drop(&mut self) {
        if let Some(saved) = self.saved.take() {
            // SAFETY: restores the attributes read from the same descriptor.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &saved) };
            SAVED.lock().unwrap_or_else(PoisonError::into_inner).take();
        }
    }
}

/// The terminal's attributes before [`cbreak`], for [`restore_terminal`] on an exit that skips
/// the destructors.
static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);

/// Give the terminal back as it was before the REPL took its keys (echo, line buffering, no
/// bracketed paste): for an exit that does not unwind (a second Ctrl-C).
pub fn restore_terminal() {
    if let Some(saved) = SAVED.lock().unwrap_or_else(PoisonError::into_inner).take() {
        // SAFETY: restores attributes read from the same descriptor.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &saved) };
        let mut out = std::io::stdout().lock();
        let _ = std::io::Write::write_all(&mut out, b"\x1b[?2004l\r\n");
        let _ = std::io::Write::flush(&mut out);
    }
}

/// Echo and line buffering off, signals on; returns the attributes to restore.
fn cbreak() -> Option<libc::termios> {
    // SAFETY: tcgetattr fills a termios we own; tcsetattr reads it.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(libc::STDIN_FILENO, &mut t) != 0 {
            return None;
        }
        let saved = t;
        t.c_lflag &= !(libc::ICANON | libc::ECHO);
        // Enter arrives as a carriage return, Ctrl-J as a line feed: told apart, as the line
        // editor tells them apart.
        t.c_iflag &= !libc::ICRNL;
        t.c_cc[libc::VMIN] = 1;
        t.c_cc[libc::VTIME] = 0;
        if libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &t) != 0 {
            return None;
        }
        *SAVED.lock().unwrap_or_else(PoisonError::into_inner) = Some(saved);
        Some(saved)
    }
}

fn read_keys(stop: &AtomicBool, single: &AtomicBool, typed: &Mutex<String>, tx: &mpsc::UnboundedSender<String>) {
    let mut keys = Keys::default();
    let mut buf = [0u8; 1024];
    while !stop.load(Ordering::Relaxed) {
        if !readable(Duration::from_millis(30)) {
            continue;
        }
        // SAFETY: reads into a buffer we own, at most its length.
        let n = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
        let Ok(n) = usize::try_from(n) else { continue };
        if n == 0 {
            // End of input while busy: leave once the turn is done, as the line editor would.
            let _ = tx.send("/exit".to_string());
            break;
        }
        let mut pressed = keys.feed(&buf[..n]);
        if keys.state == KeyState::Escape && !readable(ESCAPE_WAIT) {
            keys.state = KeyState::Ground;
            pressed.push(Key::Stop);
        }
        for key in pressed {
            let mut line = typed.lock().unwrap_or_else(PoisonError::into_inner);
            match key {
                Key::Text(t) if single.load(Ordering::Relaxed) && line.is_empty() && is_answer(&t) => {
                    let _ = tx.send(t);
                }
                Key::Enter => {
                    let _ = tx.send(std::mem::take(&mut *line));
                }
                Key::EndOfInput if line.is_empty() => {
                    let _ = tx.send("/exit".to_string());
                }
                Key::EndOfInput => {}
                Key::Stop => {
                    let _ = tx.send(STOP_KEY.to_string());
                }
                key => edit(&mut line, key),
            }
            let shown = line.clone();
            drop(line);
            crate::screen::update(|f| f.input = shown);
        }
    }
}

fn is_answer(text: &str) -> bool {
    let mut chars = text.chars();
    matches!((chars.next(), chars.next()), (Some(c), None) if ANSWER_KEYS.contains(&c.to_ascii_lowercase()))
}

/// What the keys typed mean.
#[derive(Debug, PartialEq, Eq)]
enum Key {
    Text(String),
    Enter,
    Backspace,
    /// Ctrl-U.
    KillLine,
    /// Ctrl-W.
    KillWord,
    /// Ctrl-D.
    EndOfInput,
    /// Esc alone.
    Stop,
}

/// Turns the bytes a terminal sends into [`Key`]s, across reads.
#[derive(Default)]
struct Keys {
    state: KeyState,
    /// Bytes of a character, an escape sequence or a paste not yet complete.
    held: Vec<u8>,
}

#[derive(Default, PartialEq, Eq)]
enum KeyState {
    #[default]
    Ground,
    Escape,
    Csi,
    /// `ESC O x`: one more byte.
    Ss3,
    Paste,
}

const PASTE_END: &[u8] = b"\x1b[201~";

impl Keys {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Key> {
        let mut out = Vec::new();
        for &b in bytes {
            match self.state {
                KeyState::Paste => {
                    self.held.push(b);
                    if self.held.ends_with(PASTE_END) {
                        let body = &self.held[..self.held.len() - PASTE_END.len()];
                        let text = String::from_utf8_lossy(body).replace("\r\n", "\n").replace('\r', "\n");
                        out.push(Key::Text(text));
                        self.held.clear();
                        self.state = KeyState::Ground;
                    }
                }
                KeyState::Escape => {
                    self.state = match b {
                        b'[' => KeyState::Csi,
                        b'O' => KeyState::Ss3,
                        // Alt-Enter: a new line in the message.
                        b'\r' | b'\n' => {
                            out.push(Key::Text("\n".into()));
                            KeyState::Ground
                        }
                        _ => KeyState::Ground,
                    };
                    self.held.clear();
                }
                KeyState::Csi => {
                    self.held.push(b);
                    if (0x40..=0x7e).contains(&b) {
                        if self.held == b"200~" {
                            self.state = KeyState::Paste;
                        } else {
                            self.state = KeyState::Ground;
                        }
                        self.held.clear();
                    }
                }
                KeyState::Ss3 => self.state = KeyState::Ground,
                KeyState::Ground => match b {
                    0x1b => self.state = KeyState::Escape,
                    b'\r' => out.push(Key::Enter),
                    // Ctrl-J: a new line in the message.
                    b'\n' => out.push(Key::Text("\n".into())),
                    0x7f | 0x08 => out.push(Key::Backspace),
                    0x15 => out.push(Key::KillLine),
                    0x17 => out.push(Key::KillWord),
                    0x04 => out.push(Key::EndOfInput),
                    b'\t' => out.push(Key::Text(" ".into())),
                    0..0x20 => {}
                    _ => {
                        self.held.push(b);
                        match std::str::from_utf8(&self.held) {
                            Ok(s) => {
                                out.push(Key::Text(s.to_string()));
                                self.held.clear();
                            }
                            // Wait for the rest of the character; give up on junk.
                            Err(e) if e.error_len().is_none() && self.held.len() < 4 => {}
                            Err(_) => self.held.clear(),
                        }
                    }
                },
            }
        }
        // Join adjacent text so a burst of typing is one update.
        let mut joined: Vec<Key> = Vec::with_capacity(out.len());
        for key in out {
            match (joined.last_mut(), key) {
                (Some(Key::Text(a)), Key::Text(b)) => a.push_str(&b),
                (_, key) => joined.push(key),
            }
        }
        joined
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_typed_before_the_keys_were_taken_end_at_their_line_feeds() {
        let mut held = KeysHeld { saved: None, ahead: b"say hi\nsecont\x7fd\nhalf a wor\x17line".to_vec() };
        assert_eq!(held.typed_ahead(), (vec!["say hi".to_string(), "second".to_string()], "half a line".to_string()));
        assert_eq!(held.typed_ahead(), (Vec::new(), String::new()), "taken once");
    }

    #[test]
    fn keys_are_read_across_reads_with_pastes_whole() {
        let mut k = Keys::default();
        assert_eq!(k.feed(b"hi \xc3"), [Key::Text("hi ".into())]);
        assert_eq!(k.feed(b"\xa9!\x7f"), [Key::Text("é!".into()), Key::Backspace]);
        assert_eq!(k.feed(b"\x1b[A\x1b[200~one\rtwo\x1b[2"), [], "an arrow is ignored; the paste is not over");
        assert_eq!(k.feed(b"01~\r"), [Key::Text("one\ntwo".into()), Key::Enter]);
        assert_eq!(k.feed(b"a\nb\r"), [Key::Text("a\nb".into()), Key::Enter], "Ctrl-J is a new line, Enter sends");
        assert_eq!(
            k.feed(b"\x1b\r\x15\x17\x04"),
            [Key::Text("\n".into()), Key::KillLine, Key::KillWord, Key::EndOfInput]
        );
    }

    #[test]
    fn only_single_answer_keys_answer() {
        assert!(is_answer("y") && is_answer("S") && is_answer("n"));
        assert!(!is_answer("yes") && !is_answer("x") && !is_answer(""));
    }
}
