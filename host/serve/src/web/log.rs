//! The log page: the last lines of the home's log file (`logs/talaria.log`, where talaria's
//! commands write their warnings), control characters shown as text.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use maud::html;

use super::{Visitor, page};
use crate::Served;

/// Lines shown.
const LINES: usize = 200;
/// Bytes read from the end of the file at most.
const TAIL_BYTES: u64 = 256 * 1024;

/// The last `LINES` lines of the file at `path`, and whether it exists.
fn tail(path: &std::path::Path) -> std::io::Result<Vec<String>> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let from = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    // A cut first line is dropped.
    if from > 0 && !lines.is_empty() {
        lines.remove(0);
    }
    let keep = lines.len().saturating_sub(LINES);
    Ok(lines[keep..].iter().map(|l| talaria_core::runtime::visible(l, 2000)).collect())
}

/// `GET /log`.
pub(crate) async fn show(State(served): State<Arc<Served>>, Extension(visitor): Extension<Visitor>) -> Response {
    let path = served.host.home().join("logs").join("talaria.log");
    let read = tokio::task::spawn_blocking({
        let path = path.clone();
        move || tail(&path)
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
    let body = html! {
        h1 { "Log" }
        p.hint { "The last " (LINES) " lines of " code { (path.display().to_string()) } ". `talaria serve` itself logs to its standard error." }
        p { a href="/log" { "Reload" } }
        @match read {
            Ok(lines) if lines.is_empty() => p { "The log is empty." },
            Ok(lines) => pre #log-lines { @for line in &lines { (line) "\n" } },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => p { "Nothing has been logged yet." },
            Err(e) => p.refused { "The log cannot be read: " (e.to_string()) },
        }
    };
    page(&visitor, "log", "Log", body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_the_last_lines_with_escapes_shown() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("talaria.log");
        let text: String = (0..300).map(|i| format!("line {i}\n")).collect::<String>() + "evil \u{1b}[2J end\n";
        std::fs::write(&path, text).expect("write");
        let lines = tail(&path).expect("tail");
        assert_eq!(lines.len(), LINES);
        assert_eq!(lines[0], "line 101");
        assert_eq!(lines[LINES - 1], "evil \\x1b[2J end");
    }
}
