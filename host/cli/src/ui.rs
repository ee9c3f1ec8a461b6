//! Terminal output: styled only when stdout/stderr is a terminal and NO_COLOR is unset
//! (anstream strips styles otherwise), errors and warnings on stderr.

use owo_colors::OwoColorize as _;
pub use talaria_author::ui::{error, note, warn};

/// Log to stderr at warn, or more with -v / TALARIA_LOG.
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = std::env::var("TALARIA_LOG").unwrap_or_else(|_| default.to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::env::var_os("NO_COLOR").is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .try_init();
}

/// Rows as aligned columns; the header row is bold.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| if i == last { c.clone() } else { format!("{c:<w$}", w = widths[i]) })
            .collect::<Vec<_>>()
            .join("  ")
    };
    putln!(anstream::stdout(), "{}", line(header.iter().map(|h| h.to_string()).collect()).bold());
    for row in rows {
        putln!(anstream::stdout(), "{}", line(row.clone()));
    }
}

/// The first line of a description, cut to `max` characters.
pub fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > max {
        format!("{}…", line.chars().take(max.saturating_sub(1)).collect::<String>())
    } else {
        line.to_string()
    }
}
