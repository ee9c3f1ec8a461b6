//! The bottom of the terminal while a turn runs: a footer below everything printed, holding
//! the waiting indicator, the messages waiting to be sent, and the line being typed.
//!
//! Output and footer never overwrite each other: every write made while the footer is up goes
//! through [`write`], which takes the footer away, writes, and draws it again below. Output
//! always leaves the cursor at the start of a fresh line (the live answer region ends with a line
//! break), so the footer starts at the cursor and takes itself away by moving up over its own
//! rows. Threads share it: the renderer, the key reader, the waiting indicator.

use std::io::Write as _;
use std::sync::{Mutex, MutexGuard, PoisonError};

use owo_colors::OwoColorize as _;
use unicode_width::UnicodeWidthStr as _;

/// What the footer shows.
#[derive(Debug, Default, Clone)]
pub struct Footer {
    /// The waiting indicator's line.
    pub status: Option<String>,
    /// The last lines a running command printed, under the indicator.
    pub output: Vec<String>,
    /// Messages typed during the turn, waiting, each with what will become of it.
    pub pending: Vec<String>,
    /// The line being typed.
    pub input: String,
    /// Shown in place of an empty input line.
    pub hint: String,
}

struct State {
    up: bool,
    color: bool,
    footer: Footer,
    /// The footer's lines as drawn (empty: not drawn).
    drawn: Drawn,
}

static STATE: Mutex<State> = Mutex::new(State {
    up: false,
    color: false,
    footer: Footer { status: None, output: Vec::new(), pending: Vec::new(), input: String::new(), hint: String::new() },
    drawn: Drawn::NONE,
});

/// Lines drawn at the bottom of the screen, to be taken away again: their display widths and
/// the terminal's width when they were drawn. After the terminal is resized, the rows they take
/// are worked out from these ([`Drawn::rows`]), so a redraw neither leaves a row of them behind
/// nor takes away a row above them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Drawn {
    widths: Vec<usize>,
    width: usize,
}

impl Drawn {
    pub const NONE: Drawn = Drawn { widths: Vec::new(), width: 0 };

    /// Lines of these display widths, drawn `width` columns wide.
    pub fn new(widths: Vec<usize>, width: usize) -> Self {
        Self { widths, width }
    }

    /// The rows the lines take on the screen now that it is `now` columns wide (a terminal that
    /// re-wraps lines on a resize, as most do, wraps each at the new width; one that does not,
    /// xterm or the Linux console, keeps the rows it drew).
    pub fn rows(&self, now: usize) -> usize {
        self.rows_if(now, reflows())
    }

    fn rows_if(&self, now: usize, reflow: bool) -> usize {
        let at = if reflow { now } else { self.width }.max(1);
        self.widths.iter().map(|w| w.div_ceil(at).max(1)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.widths.is_empty()
    }

    /// The rows the lines took when they were drawn.
    #[cfg(test)]
    pub fn rows_as_drawn(&self) -> usize {
        self.rows_if(self.width, false)
    }
}

/// Whether the terminal re-wraps its lines when its width changes: tmux, VTE (GNOME Terminal),
/// kitty, iTerm2, Terminal.app, WezTerm, Alacritty, Konsole, Windows Terminal and foot do; xterm
/// and the Linux console do not.
fn reflows() -> bool {
    static REFLOWS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REFLOWS.get_or_init(|| {
        let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        set("TMUX") || !(set("XTERM_VERSION") || std::env::var("TERM").is_ok_and(|t| t == "linux"))
    })
}

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Put the footer up (`color`: styled), starting with `input` typed already.
pub fn begin(color: bool, hint: &str) {
    let mut s = state();
    s.up = true;
    s.color = color;
    s.footer = Footer { hint: hint.to_string(), ..Footer::default() };
    draw(&mut s);
}

/// Take the footer away for good; returns what it held.
pub fn end() -> Footer {
    let mut s = state();
    erase(&mut s);
    s.up = false;
    std::mem::take(&mut s.footer)
}

/// Whether the footer is up.
pub fn is_up() -> bool {
    state().up
}

/// Change what the footer shows and redraw it (a no-op when it is not up).
pub fn update(change: impl FnOnce(&mut Footer)) {
    let mut s = state();
    if !s.up {
        return;
    }
    let before = s.footer.clone();
    change(&mut s.footer);
    if !same(&before, &s.footer) {
        put(b"\x1b[?2026h");
        erase(&mut s);
        draw(&mut s);
        put(b"\x1b[?2026l");
    }
}

fn same(a: &Footer, b: &Footer) -> bool {
    a.status == b.status && a.output == b.output && a.pending == b.pending && a.input == b.input && a.hint == b.hint
}

/// Write `bytes` to stdout (or stderr) above the footer. Without a footer they go straight out.
pub fn write(bytes: &[u8], stderr: bool) {
    let mut s = state();
    if s.up {
        // Terminals that know synchronized output show the erase, the write and the redraw at
        // once, without flicker; others ignore the mode.
        put(b"\x1b[?2026h");
        erase(&mut s);
    }
    if stderr {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(bytes);
        let _ = err.flush();
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(bytes);
        let _ = out.flush();
    }
    if s.up {
        draw(&mut s);
        put(b"\x1b[?2026l");
    }
}

fn put(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes);
    let _ = out.flush();
}

/// Remove the footer from the screen; the cursor ends where it began.
fn erase(s: &mut State) {
    if s.drawn.is_empty() {
        return;
    }
    let rows = s.drawn.rows(terminal_size().0);
    let mut seq = String::from("\r");
    if rows > 1 {
        seq.push_str(&format!("\x1b[{}A", rows - 1));
    }
    seq.push_str("\x1b[J");
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(seq.as_bytes());
    let _ = out.flush();
    s.drawn = Drawn::NONE;
}

/// Draw the footer again, as the terminal's size is now (after a resize).
pub fn redraw() {
    let mut s = state();
    if !s.up {
        return;
    }
    put(b"\x1b[?2026h");
    erase(&mut s);
    draw(&mut s);
    put(b"\x1b[?2026l");
}

/// The terminal's columns and rows (80×24 when stdout is not one).
pub fn terminal_size() -> (usize, usize) {
    #[allow(unsafe_code)]
    // SAFETY: TIOCGWINSZ fills a winsize struct we own; failure leaves it zeroed.
    let (cols, rows) = unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) == 0 { (ws.ws_col, ws.ws_row) } else { (0, 0) }
    };
    let or = |n: u16, default: usize| if n == 0 { default } else { usize::from(n) };
    (or(cols, 80), or(rows, 24))
}

fn draw(s: &mut State) {
    let (width, _) = terminal_size();
    let lines = lines(&s.footer, s.color, width);
    let text: Vec<&str> = lines.iter().map(|(_, shown)| shown.as_str()).collect();
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.join("\r\n").as_bytes());
    let _ = out.flush();
    s.drawn = Drawn::new(lines.iter().map(|(plain, _)| plain.width()).collect(), width);
}

/// The footer's lines, for a terminal `width` columns wide: each as plain text (to measure) and
/// as shown.
fn lines(f: &Footer, color: bool, width: usize) -> Vec<(String, String)> {
    let style = |plain: String, styled: String| (plain, if color { styled } else { plain_of(&styled) });
    let mut out = Vec::new();
    if let Some(status) = &f.status {
        out.push((plain_of(status), if color { status.clone() } else { plain_of(status) }));
    }
    for line in &f.output {
        // A command's own text, escapes shown, each line cut to one row.
        let line = talaria_runtime::visible(&line.replace('\t', "    "), width.saturating_sub(5).max(10));
        out.push(style(format!("┊   {line}"), format!("┊   {}", line.dimmed())));
    }
    for p in &f.pending {
        let p = talaria_runtime::visible(p, 200);
        out.push(style(p.clone(), p.dimmed().to_string()));
    }
    if f.input.is_empty() {
        // The hint broken at its words, not wherever the terminal cuts it.
        for (i, row) in crate::wrap::wrap_after(&f.hint, width.saturating_sub(1), 2, 2).split('\n').enumerate() {
            if i == 0 {
                out.push(style(format!("› {row}"), format!("{} {}", "›".bold(), row.dimmed())));
            } else {
                let row = row.trim_start();
                out.push(style(format!("  {row}"), format!("  {}", row.dimmed())));
            }
        }
    } else {
        for (i, line) in f.input.split('\n').enumerate() {
            let mark = if i == 0 { "›" } else { "·" };
            let line = talaria_runtime::visible(line, usize::MAX);
            out.push(style(format!("{mark} {line}"), format!("{} {line}", mark.bold())));
        }
    }
    out
}

/// `text` without its style sequences.
fn plain_of(text: &str) -> String {
    anstream::adapter::strip_str(text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_footer_lists_status_pending_and_input() {
        let f = Footer {
            status: Some("⠋ waiting for m… 3s".into()),
            pending: vec!["↳ queued: next".into()],
            input: "two\nlines".into(),
            hint: "hint".into(),
            ..Footer::default()
        };
        let shown: Vec<String> = lines(&f, false, 80).into_iter().map(|(_, s)| s).collect();
        assert_eq!(shown, ["⠋ waiting for m… 3s", "↳ queued: next", "› two", "· lines"]);
        let empty = Footer { hint: "type ahead".into(), ..Footer::default() };
        assert_eq!(lines(&empty, false, 80)[0].1, "› type ahead");
        let long = Footer { hint: "type a message: Enter stops this reply".into(), ..Footer::default() };
        let shown: Vec<String> = lines(&long, false, 30).into_iter().map(|(_, s)| s).collect();
        assert_eq!(shown, ["› type a message: Enter stops", "  this reply"], "the hint breaks at a word");
        let evil = Footer { input: "x\u{1b}[2J".into(), ..Footer::default() };
        assert_eq!(lines(&evil, false, 80)[0].1, "› x\\x1b[2J", "typed escapes are shown, not obeyed");
        let running = Footer {
            status: Some("⠋ terminal running… 4s".into()),
            output: vec!["tick 3\u{1b}[2J".into(), "x".repeat(100)],
            ..Footer::default()
        };
        let shown: Vec<String> = lines(&running, false, 40).into_iter().map(|(_, s)| s).collect();
        assert_eq!(shown[1], "┊   tick 3\\x1b[2J", "a command's escapes are shown, not obeyed");
        assert!(shown[2].width() <= 40, "a long output line is cut to the width: {}", shown[2]);
    }

    #[test]
    fn drawn_lines_take_the_rows_the_terminal_gives_them_after_a_resize() {
        // 30, 100 and 0 columns drawn 120 wide: a row each.
        let drawn = Drawn::new(vec![30, 100, 0], 120);
        assert_eq!(drawn.rows_if(120, true), 3);
        assert_eq!(drawn.rows_if(80, true), 4, "narrowed: re-wrapped, the long line takes two");
        assert_eq!(drawn.rows_if(80, false), 3, "a terminal that cuts lines keeps its rows");
        // A line soft-wrapped at 80 is joined again at 120 where lines re-wrap.
        let wrapped = Drawn::new(vec![150], 80);
        assert_eq!((wrapped.rows_if(80, true), wrapped.rows_if(200, true), wrapped.rows_if(200, false)), (2, 1, 2));
    }
}
