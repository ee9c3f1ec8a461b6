//! A streamed markdown answer on a terminal: finished blocks are rendered once and left in the
//! scrollback; the block still arriving is re-rendered in place at the bottom of the screen
//! (the live region) as its text grows, so tables, lists and highlighted code look right while
//! they stream and words never break at the edge.
//!
//! A block ends at a blank line outside a code fence once the next line starts at the margin
//! (an indented line may still belong to a list item above it). A live block taller than the
//! screen leaves its top lines behind for good, so the region can always be redrawn; after a
//! resize the rest starts after the words already left behind, wherever the new width breaks
//! the lines. Every draw ends with a line break: the cursor waits at the start of the line below
//! the region (where the footer of [`crate::screen`] goes).

use std::io::Write;
use std::time::{Duration, Instant};

use unicode_width::UnicodeWidthStr as _;

use crate::markdown::{self, Highlights, Look};
use crate::screen::Drawn;

/// Least time between two redraws of the live region while text arrives (a timer draws what
/// came in between).
const REDRAW_EVERY: Duration = Duration::from_millis(33);

pub struct Live {
    /// Text of the block(s) not yet left behind.
    pending: String,
    /// Rendered lines of `pending` already left in the scrollback (a block taller than the
    /// screen), counted at `frozen_width`.
    frozen: usize,
    frozen_width: usize,
    /// Words of `pending` already left in the scrollback: where the live lines start again when
    /// the width changed and the block's lines broke elsewhere.
    frozen_words: usize,
    /// The live region's lines as drawn; the cursor is at the start of the line below them.
    drawn: Drawn,
    /// A block was left behind: a blank line goes before the next.
    gap: bool,
    last_draw: Option<Instant>,
    /// Text arrived that is not drawn yet (it came too soon after the last draw).
    dirty: bool,
    /// How to draw: in colour with what the terminal supports, or only the layout (`NO_COLOR`),
    /// read from the environment once; the width is the terminal's at each draw.
    look: Look,
    /// The code blocks highlighted so far: a redraw highlights only their new lines.
    highlights: Highlights,
}

impl Live {
    pub fn new(color: bool) -> Self {
        let look = if color { Look::terminal(0) } else { Look::plain(0) };
        Self {
            pending: String::new(),
            frozen: 0,
            frozen_width: 0,
            frozen_words: 0,
            drawn: Drawn::NONE,
            gap: false,
            last_draw: None,
            dirty: false,
            look,
            highlights: Highlights::default(),
        }
    }

    /// Add streamed text and bring the screen up to date.
    pub fn push(&mut self, text: &str, out: &mut impl Write, size: (usize, usize)) {
        self.pending.push_str(text);
        while let Some(end) = block_end(&self.pending) {
            let rest = self.pending.split_off(end);
            self.draw(out, size, true);
            self.pending = rest;
        }
        // Redraws are paced, not made per line: a fast model's long code block would otherwise
        // be rendered (and highlighted) again for every line it adds.
        let due = self.last_draw.is_none_or(|t| t.elapsed() >= REDRAW_EVERY);
        if due {
            self.draw(out, size, false);
        } else {
            self.dirty = true;
        }
        let _ = out.flush();
    }

    /// When text is waiting to be drawn, how long until it should be.
    pub fn due_in(&self) -> Option<Duration> {
        self.dirty.then(|| REDRAW_EVERY.saturating_sub(self.last_draw.map_or(REDRAW_EVERY, |t| t.elapsed())))
    }

    /// Draw what arrived since the last draw.
    pub fn tick(&mut self, out: &mut impl Write, size: (usize, usize)) {
        if self.dirty {
            self.draw(out, size, false);
        }
    }

    /// The terminal was resized: draw the live region again at its new width, over the rows it
    /// takes now (what was left behind stays as it was drawn).
    pub fn redraw(&mut self, out: &mut impl Write, size: (usize, usize)) {
        if !self.drawn.is_empty() || self.dirty {
            self.draw(out, size, false);
            let _ = out.flush();
        }
    }

    /// The answer is complete: render what is left and leave it behind.
    pub fn finish(&mut self, out: &mut impl Write, size: (usize, usize)) {
        if !self.pending.trim().is_empty() || !self.drawn.is_empty() {
            self.draw(out, size, true);
        }
        self.pending.clear();
        self.gap = false;
        let _ = out.flush();
    }

    /// Whether anything of the current answer is on the screen or waiting.
    #[cfg(test)]
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.drawn.is_empty()
    }

    /// Redraw the live region with `pending` rendered; `done`: the block is finished and stays.
    fn draw(&mut self, out: &mut impl Write, (width, height): (usize, usize), done: bool) {
        self.last_draw = Some(Instant::now());
        self.dirty = false;
        let look = Look { width, ..self.look };
        let mut lines = if self.pending.trim().is_empty() {
            Vec::new()
        } else {
            markdown::render(&self.pending, &look, &mut self.highlights)
        };
        if self.gap && !lines.is_empty() {
            lines.insert(0, String::new());
        }
        if self.frozen > 0 && width != self.frozen_width {
            self.frozen = first_unfrozen(&lines, self.frozen_words);
            // Count from there: a line drawn again is not left behind twice.
            self.frozen_words = lines[..self.frozen].iter().map(|l| words(l)).sum();
        }
        self.frozen_width = width;
        let lines = &lines[self.frozen.min(lines.len())..];
        let mut buf = String::new();
        if !self.drawn.is_empty() {
            buf.push_str(&format!("\x1b[{}A\r\x1b[J", self.drawn.rows(width)));
        }
        let rows = |l: &String| strip_width(l).div_ceil(width.max(1)).max(1);
        let mut keep = lines.len();
        if !done {
            // Leave behind what would not fit, keeping rows for the footer below.
            let room = height.saturating_sub(6).max(1);
            let mut total: usize = lines.iter().map(rows).sum();
            let mut first = 0;
            while total > room && first + 1 < lines.len() {
                total -= rows(&lines[first]);
                first += 1;
            }
            for l in &lines[..first] {
                buf.push_str(l);
                buf.push_str("\r\n");
            }
            self.frozen += first;
            self.frozen_words += lines[..first].iter().map(|l| words(l)).sum::<usize>();
            keep = lines.len() - first;
        }
        let live = &lines[lines.len() - keep..];
        for l in live {
            buf.push_str(l);
            buf.push_str("\r\n");
        }
        self.drawn = Drawn::new(live.iter().map(|l| strip_width(l)).collect(), width);
        if done {
            self.gap |= !self.drawn.is_empty();
            self.drawn = Drawn::NONE;
            self.frozen = 0;
            self.frozen_words = 0;
        }
        let _ = out.write_all(buf.as_bytes());
    }
}

/// Where the first finished block of `text` ends (the start of the line that begins the next),
/// if one has.
fn block_end(text: &str) -> Option<usize> {
    let mut fence: Option<(char, usize)> = None;
    let mut blank_before = false;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let complete = line.ends_with('\n');
        let body = line.trim_end_matches(['\n', '\r']);
        let indent = body.len() - body.trim_start_matches(' ').len();
        let trimmed = body.trim_start();
        if let Some((c, n)) = fence {
            if complete && indent < 4 && trimmed.len() >= n && trimmed.chars().all(|x| x == c) {
                fence = None;
            }
            blank_before = false;
            continue;
        }
        if blank_before && !trimmed.is_empty() && indent == 0 && start > 0 {
            return Some(start);
        }
        if !complete {
            break;
        }
        blank_before = trimmed.is_empty() && !text[..start].trim().is_empty();
        if indent < 4 {
            for c in ['`', '~'] {
                let n = trimmed.chars().take_while(|x| *x == c).count();
                if n >= 3 {
                    fence = Some((c, n));
                }
            }
        }
    }
    None
}

/// Where the lines not yet left behind start, the block rendered at a new width: after the
/// last line whose words were all left behind at the old one. A line that held the last words
/// left behind and the first not is drawn again whole: part of one line repeated, none lost.
fn first_unfrozen(lines: &[String], frozen_words: usize) -> usize {
    let mut seen = 0;
    for (i, line) in lines.iter().enumerate() {
        let here = words(line);
        if here > 0 && seen + here > frozen_words {
            return i;
        }
        seen += here;
    }
    lines.len()
}

/// Words in a rendered line (its escape sequences are not words).
fn words(line: &str) -> usize {
    if line.contains('\x1b') {
        anstream::adapter::strip_str(line).to_string().split_whitespace().count()
    } else {
        line.split_whitespace().count()
    }
}

/// Columns a rendered line takes on the screen (its escape sequences take none).
fn strip_width(line: &str) -> usize {
    if line.contains('\x1b') { anstream::adapter::strip_str(line).to_string().width() } else { line.width() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_ends_at_a_blank_line_once_the_next_starts_at_the_margin() {
        assert_eq!(block_end("para one\n"), None);
        assert_eq!(block_end("para one\n\n"), None);
        assert_eq!(block_end("para one\n\nT"), Some(10));
        assert_eq!(block_end("- item\n\n    more of it\n"), None, "indented: may continue the item");
        assert_eq!(block_end("```\ncode\n\nmore\n"), None, "a blank line inside a fence");
        assert_eq!(block_end("```\ncode\n\nmore\n```\n\nnext"), Some(20));
        assert_eq!(block_end("\n\nfirst"), None, "leading blank lines end nothing");
    }

    #[test]
    fn the_screen_ends_with_each_block_rendered_once() {
        let mut live = Live::new(false);
        let mut out = Vec::new();
        let answer = "| a | b |\n|---|---|\n| 1 | 2 |\n\nafter the table, a paragraph long enough to wrap\n";
        for chunk in answer.as_bytes().chunks(3) {
            live.push(std::str::from_utf8(chunk).unwrap_or_default(), &mut out, (30, 24));
        }
        live.finish(&mut out, (30, 24));
        let mut screen = vt100::Parser::new(24, 30, 0);
        // The terminal turns "\n" into "\r\n" itself; the parser does not.
        screen.process(&out);
        let shown = screen.screen().contents();
        let shown: Vec<&str> = shown.lines().map(str::trim_end).collect();
        assert_eq!(
            shown,
            [
                "┌───┬───┐",
                "│ a │ b │",
                "├───┼───┤",
                "│ 1 │ 2 │",
                "└───┴───┘",
                "",
                "after the table, a paragraph",
                "long enough to wrap",
            ]
        );
        assert!(live.is_idle());
    }

    #[test]
    fn a_block_taller_than_the_screen_leaves_its_top_behind() {
        let mut live = Live::new(false);
        let mut out = Vec::new();
        let code: String = (0..30).map(|i| format!("line {i}\n")).collect();
        let answer = format!("```\n{code}```\n");
        for line in answer.split_inclusive('\n') {
            live.push(line, &mut out, (40, 10));
        }
        live.finish(&mut out, (40, 10));
        let mut screen = vt100::Parser::new(10, 40, 100);
        screen.process(&out);
        let all = every_row(&mut screen);
        for i in 0..30 {
            let want = format!("line {i}");
            assert_eq!(all.iter().filter(|l| **l == want).count(), 1, "{want} shown once: {all:#?}");
        }
        assert_eq!(screen.screen().contents().lines().last().map(str::trim_end), Some("```"));
    }

    /// Every row ever shown: the top row of each view back through the scrollback, then the screen.
    fn every_row(screen: &mut vt100::Parser) -> Vec<String> {
        screen.screen_mut().set_scrollback(usize::MAX);
        let back = screen.screen().scrollback();
        let mut all: Vec<String> = Vec::new();
        for offset in (1..=back).rev() {
            screen.screen_mut().set_scrollback(offset);
            all.extend(screen.screen().contents().lines().next().map(|l| l.trim_end().to_string()));
        }
        screen.screen_mut().set_scrollback(0);
        all.extend(screen.screen().contents().lines().map(|l| l.trim_end().to_string()));
        all
    }

    #[test]
    fn a_tall_block_resized_while_it_arrives_loses_no_word() {
        // A list taller than the screen, its items wrapping: at a new width they break elsewhere,
        // and what was already left behind must not decide how much of the rest is drawn.
        let items: String =
            (0..40).map(|i| format!("- w{i:02}a w{i:02}b w{i:02}c w{i:02}d w{i:02}e w{i:02}f w{i:02}g\n")).collect();
        for (from, to) in [(30, 60), (60, 30)] {
            let mut live = Live::new(false);
            let (mut before, mut after) = (Vec::new(), Vec::new());
            let mut width = from;
            let mut live_rows = 0;
            for (n, line) in items.split_inclusive('\n').enumerate() {
                if n == 20 {
                    width = to;
                    live_rows = live.drawn.rows_as_drawn();
                    live.redraw(&mut after, (width, 12));
                }
                let out = if n < 20 { &mut before } else { &mut after };
                live.push(line, out, (width, 12));
                // Drawn at once, as the timer would after a pause.
                live.tick(out, (width, 12));
            }
            live.finish(&mut after, (width, 12));
            // The rows left at the old width: all but the live region the redraw cleared, as a
            // terminal that keeps its scrollback shows them.
            let mut old = vt100::Parser::new(12, from as u16, 1000);
            old.process(&before);
            let cursor = usize::from(old.screen().cursor_position().0);
            let mut rows = every_row(&mut old);
            old.screen_mut().set_scrollback(usize::MAX);
            let back = old.screen().scrollback();
            rows.truncate(back + cursor - live_rows);
            // The rows drawn at the new width, from where the live region was.
            let mut new = vt100::Parser::new(12, to as u16, 1000);
            new.process(&after);
            rows.extend(every_row(&mut new));
            let all = rows.join(" ");
            let shown: Vec<&str> = all.split_whitespace().filter(|w| w.starts_with('w')).collect();
            let mut repeated = 0;
            for i in 0..40 {
                for c in 'a'..='g' {
                    let word = format!("w{i:02}{c}");
                    let times = shown.iter().filter(|w| **w == word).count();
                    assert!(times >= 1, "{from}→{to}: {word} lost: {all}");
                    repeated += times - 1;
                }
            }
            assert!(repeated <= 7, "{from}→{to}: at most one item's line drawn again, {repeated} words were");
        }
    }

    #[test]
    fn escape_sequences_take_no_columns() {
        assert_eq!(strip_width("\x1b[1mbold\x1b[0m"), 4);
        assert_eq!(strip_width("\x1b]8;;https://x\x1b\\link\x1b]8;;\x1b\\"), 4);
    }
}
