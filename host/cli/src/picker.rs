//! A list to choose from, for a value left out at a terminal (`chat --resume`, `/resume`,
//! `/model`): ↑ and ↓ (or Ctrl-P and Ctrl-N) move, typing narrows the list to the entries that
//! hold the typed text, Enter chooses, Esc or Ctrl-C leaves without a choice. It is drawn below
//! the cursor and taken away afterwards; entries are shown with their escapes made visible (a
//! session's title came from a model).

use std::io::Write as _;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use owo_colors::OwoColorize as _;

/// Entries shown at once; the list scrolls past them.
const SHOWN: usize = 10;

/// One entry: what is shown, and what choosing it gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub label: String,
    pub value: String,
}

/// Where the choice stands: the filter typed, the entries it leaves, the one marked.
#[derive(Debug)]
struct Choosing<'a> {
    entries: &'a [Entry],
    filter: String,
    /// Indexes into `entries` of those the filter leaves.
    kept: Vec<usize>,
    /// Index into `kept`.
    at: usize,
}

/// What a key did.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Go,
    Chosen(String),
    Left,
}

impl<'a> Choosing<'a> {
    fn new(entries: &'a [Entry], at: usize) -> Self {
        Self { entries, filter: String::new(), kept: (0..entries.len()).collect(), at: at.min(entries.len()) }
    }

    fn refilter(&mut self) {
        let wanted = self.filter.to_lowercase();
        self.kept =
            (0..self.entries.len()).filter(|&i| self.entries[i].label.to_lowercase().contains(&wanted)).collect();
        self.at = 0;
    }

    fn key(&mut self, key: KeyEvent) -> Step {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Esc => return Step::Left,
            KeyCode::Char('c' | 'd') if ctrl => return Step::Left,
            KeyCode::Enter => {
                return match self.kept.get(self.at) {
                    Some(&i) => Step::Chosen(self.entries[i].value.clone()),
                    None => Step::Go,
                };
            }
            KeyCode::Up => self.at = self.at.saturating_sub(1),
            KeyCode::Char('p') if ctrl => self.at = self.at.saturating_sub(1),
            KeyCode::Down => self.at = (self.at + 1).min(self.kept.len().saturating_sub(1)),
            KeyCode::Char('n') if ctrl => self.at = (self.at + 1).min(self.kept.len().saturating_sub(1)),
            KeyCode::PageUp => self.at = self.at.saturating_sub(SHOWN),
            KeyCode::PageDown => self.at = (self.at + SHOWN).min(self.kept.len().saturating_sub(1)),
            KeyCode::Backspace => {
                self.filter.pop();
                self.refilter();
            }
            KeyCode::Char(c) if !ctrl => {
                self.filter.push(c);
                self.refilter();
            }
            _ => {}
        }
        Step::Go
    }

    /// The lines to draw, each at most `width` columns.
    fn lines(&self, title: &str, width: usize, color: bool) -> Vec<String> {
        let fit = |text: &str| crate::ui::first_line(text, width.saturating_sub(3).max(10));
        let mut out = vec![fit(title)];
        let first = self.at.saturating_sub(SHOWN - 1);
        for (row, &i) in self.kept.iter().enumerate().skip(first).take(SHOWN) {
            let label = fit(&talaria_runtime::visible(&self.entries[i].label, usize::MAX));
            out.push(match (row == self.at, color) {
                (true, true) => format!("{} {}", "›".cyan().bold(), label.bold()),
                (true, false) => format!("› {label}"),
                (false, _) => format!("  {label}"),
            });
        }
        if self.kept.is_empty() {
            out.push("  (nothing holds the text typed)".to_string());
        }
        let filter = if self.filter.is_empty() {
            String::new()
        } else {
            format!(" · showing those with \"{}\"", talaria_runtime::visible(&self.filter, 40))
        };
        let hint = fit(&format!("↑↓ move · type to narrow · Enter chooses · Esc leaves{filter}"));
        out.push(if color { hint.dimmed().to_string() } else { hint });
        out
    }
}

/// Let the user choose one of `entries` (the one at `at` marked first) under `title`; `None`
/// when they leave, or when the terminal cannot be read key by key.
pub fn pick(title: &str, entries: &[Entry], at: usize) -> Option<String> {
    if entries.is_empty() || crossterm::terminal::enable_raw_mode().is_err() {
        return None;
    }
    let color = crate::ui::color_wanted();
    let mut choosing = Choosing::new(entries, at);
    let mut drawn = 0;
    let chosen = loop {
        let (width, _) = crate::screen::terminal_size();
        drawn = draw(&choosing.lines(title, width, color), drawn);
        let Ok(event) = crossterm::event::read() else { break None };
        if let Event::Key(key) = event
            && key.kind != KeyEventKind::Release
        {
            match choosing.key(key) {
                Step::Go => {}
                Step::Chosen(value) => break Some(value),
                Step::Left => break None,
            }
        }
    };
    draw(&[], drawn);
    let _ = crossterm::terminal::disable_raw_mode();
    chosen
}

/// Take away the `drawn` lines drawn last, draw `lines` in their place; returns how many.
fn draw(lines: &[String], drawn: usize) -> usize {
    let mut seq = String::from("\r");
    if drawn > 1 {
        seq.push_str(&format!("\x1b[{}A", drawn - 1));
    }
    seq.push_str("\x1b[J");
    seq.push_str(&lines.join("\r\n"));
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(seq.as_bytes());
    let _ = out.flush();
    lines.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<Entry> {
        ["alpha plan", "beta deploy", "gamma plan\u{1b}[2J"]
            .iter()
            .enumerate()
            .map(|(i, l)| Entry { label: (*l).to_string(), value: i.to_string() })
            .collect()
    }

    fn press(c: &mut Choosing<'_>, code: KeyCode) -> Step {
        c.key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    #[test]
    fn arrows_move_typing_narrows_and_enter_chooses() {
        let all = entries();
        let mut c = Choosing::new(&all, 0);
        assert_eq!(press(&mut c, KeyCode::Down), Step::Go);
        assert_eq!(press(&mut c, KeyCode::Down), Step::Go);
        assert_eq!(press(&mut c, KeyCode::Down), Step::Go, "the last stays marked");
        assert_eq!(c.lines("Sessions", 80, false)[3], "› gamma plan\\x1b[2J", "escapes are shown, not obeyed");
        for ch in "plan".chars() {
            press(&mut c, KeyCode::Char(ch));
        }
        assert_eq!(c.kept, [0, 2]);
        assert_eq!(press(&mut c, KeyCode::Down), Step::Go);
        assert_eq!(press(&mut c, KeyCode::Enter), Step::Chosen("2".into()));
        assert_eq!(press(&mut c, KeyCode::Esc), Step::Left);
        press(&mut c, KeyCode::Char('z'));
        assert_eq!(press(&mut c, KeyCode::Enter), Step::Go, "nothing left to choose");
        assert!(c.lines("Sessions", 80, false).contains(&"  (nothing holds the text typed)".to_string()));
    }
}
