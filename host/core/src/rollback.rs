//! `/rollback [N] [force]` for every front door: list a session's checkpoints, or undo its last
//! N, newest first.

use talaria_agent::checkpoints::{Checkpoint, Checkpoints, RestoreError};
use talaria_protocol::Event;

/// The session's checkpoints, newest first and numbered as `/rollback N` counts them.
pub fn listing(list: &[Checkpoint]) -> String {
    if list.is_empty() {
        return "no checkpoints in this session yet: files are kept before a tool changes them".into();
    }
    let mut lines = vec!["checkpoints, newest first (`/rollback N` undoes the last N):".to_string()];
    for (i, cp) in list.iter().rev().enumerate() {
        let at = jiff::Timestamp::from_millisecond(cp.at)
            .map(|t| t.to_zoned(jiff::tz::TimeZone::system()).strftime("%H:%M:%S").to_string())
            .unwrap_or_default();
        let files = if cp.files.len() == 1 { "1 file".to_string() } else { format!("{} files", cp.files.len()) };
        lines.push(format!("{:>3}  {at}  {}  ({files})", i + 1, cp.what));
    }
    lines.join("\n")
}

/// List (no `steps`) or undo the last `steps` checkpoints of `session`.
pub fn run(store: &Checkpoints, session: &str, steps: Option<u32>, force: bool) -> Event {
    let list = match store.load(session) {
        Ok(list) => list,
        Err(e) => return Event::RolledBack { text: format!("cannot read the checkpoints: {e}"), ok: false },
    };
    let Some(steps) = steps else {
        return Event::RolledBack { text: listing(&list), ok: true };
    };
    let steps = usize::try_from(steps).unwrap_or(usize::MAX);
    if steps == 0 || steps > list.len() {
        let text = if list.is_empty() {
            "there is nothing to roll back: no checkpoints in this session".to_string()
        } else {
            format!("there are {} checkpoints; `/rollback N` takes 1 to {}", list.len(), list.len())
        };
        return Event::RolledBack { text, ok: false };
    }
    let mut lines = Vec::new();
    for cp in list.iter().rev().take(steps) {
        match store.restore(session, cp.n, force) {
            Ok(done) => {
                let mut what = Vec::new();
                if !done.written.is_empty() {
                    what.push(format!("restored {}", done.written.join(", ")));
                }
                if !done.removed.is_empty() {
                    what.push(format!("removed {}", done.removed.join(", ")));
                }
                if what.is_empty() {
                    what.push("nothing had changed".into());
                }
                lines.push(format!("undid `{}`: {}", cp.what, what.join("; ")));
            }
            Err(e @ RestoreError::Changed(_)) => {
                lines.push(format!("stopped at `{}`: {e}", cp.what));
                return Event::RolledBack { text: lines.join("\n"), ok: false };
            }
            Err(e) => {
                lines.push(format!("stopped at `{}`: {e}", cp.what));
                return Event::RolledBack { text: lines.join("\n"), ok: false };
            }
        }
    }
    Event::RolledBack { text: lines.join("\n"), ok: true }
}
