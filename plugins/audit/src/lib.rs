//! The bundled `audit` hook: appends one JSON line per tool call, ended turn and finished
//! subagent to a file in its private data directory (the lines are described in `record`).
//!
//! ```toml
//! [plugins.audit]
//! enabled = true
//!
//! [plugins.audit.config]
//! file = "audit.jsonl"        # a file name inside the plugin's data directory
//! include_arguments = true    # false: write `"arguments": null`
//! ```
//!
//! **Where the file goes.** The manifest asks for `$PLUGIN_DATA` (read-write), a directory only
//! this plugin sees. The host preopens it at its real absolute path, so the plugin learns that
//! path from the WASI preopen list (`wasi:filesystem/preopens.get-directories`): it takes the
//! preopen whose path ends in `/plugin-data/audit`, or else the only one there is, and then uses
//! plain `std::fs` on `<dir>/<file>`.
//!
//! Auditing never gets in the agent's way: every event is answered with `proceed`, and a line
//! that cannot be written becomes a warning in talaria's log.

mod record;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use talaria_sdk::hooks::{Decision, Event, Hooks};
use talaria_sdk::{config, log};

use crate::record::Options;

/// The file written when the config names none (or names an unusable one).
const DEFAULT_FILE: &str = "audit.jsonl";

/// The preopen this plugin's data directory is expected at.
const DATA_DIR_SUFFIX: &str = "/plugin-data/audit";

struct Audit;

impl Hooks for Audit {
    fn on_event(event: Event) -> Decision {
        let options = Options { include_arguments: include_arguments() };
        if let Some(line) = record::line(&event, &record::rfc3339(now_ms()), options)
            && let Err(e) = append(&line)
        {
            log::warn(&format!("could not record {}: {e}", event.name()));
        }
        Decision::Proceed
    }
}

talaria_sdk::export_hooks!(Audit);

fn append(line: &str) -> Result<(), String> {
    let preopens: Vec<String> =
        wasip2::filesystem::preopens::get_directories().into_iter().map(|(_, path)| path).collect();
    let dir = pick_dir(&preopens)?;
    let path = dir.join(file_name());
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // One write per line, so lines from concurrent calls do not interleave.
    file.write_all(format!("{line}\n").as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The data directory among the preopened ones.
fn pick_dir(preopens: &[String]) -> Result<PathBuf, String> {
    let by_name = preopens.iter().find(|p| p.trim_end_matches('/').ends_with(DATA_DIR_SUFFIX));
    match (by_name, preopens) {
        (Some(dir), _) => Ok(PathBuf::from(dir)),
        (None, [only]) => Ok(PathBuf::from(only)),
        (None, []) => Err("no directory is granted: grant the plugin its data directory \
                           (`filesystem = [{ path = \"$PLUGIN_DATA\", access = \"read-write\" }]`)"
            .into()),
        (None, many) => Err(format!(
            "{} directories are granted and none ends in {DATA_DIR_SUFFIX}: {}",
            many.len(),
            many.join(", ")
        )),
    }
}

/// `[plugins.audit.config] file`, checked: a plain file name, never a path.
fn file_name() -> String {
    match config::get::<serde_json::Value>("file") {
        None => DEFAULT_FILE.to_string(),
        Some(value) => match check_file_name(&value) {
            Ok(name) => name,
            Err(e) => {
                log::error(&format!("[plugins.audit.config] file: {e}; writing {DEFAULT_FILE} instead"));
                DEFAULT_FILE.to_string()
            }
        },
    }
}

fn check_file_name(value: &serde_json::Value) -> Result<String, String> {
    let name = value.as_str().ok_or_else(|| format!("must be a string, not {value}"))?;
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) || name.contains("..") {
        return Err(format!("{name:?} is not a file name inside the data directory (no `/`, no `..`)"));
    }
    Ok(name.to_string())
}

/// `[plugins.audit.config] include_arguments`, default true.
fn include_arguments() -> bool {
    match config::get::<serde_json::Value>("include_arguments") {
        None => true,
        Some(serde_json::Value::Bool(b)) => b,
        Some(other) => {
            log::error(&format!("[plugins.audit.config] include_arguments must be true or false, not {other}"));
            true
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_data_directory_is_found_among_the_preopens() {
        let dirs = |list: &[&str]| list.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        assert_eq!(
            pick_dir(&dirs(&["/w", "/home/u/.talaria/plugin-data/audit"])),
            Ok(PathBuf::from("/home/u/.talaria/plugin-data/audit"))
        );
        assert_eq!(pick_dir(&dirs(&["/srv/audit-data"])), Ok(PathBuf::from("/srv/audit-data")));
        assert!(pick_dir(&[]).is_err_and(|e| e.contains("$PLUGIN_DATA")));
        assert!(pick_dir(&dirs(&["/a", "/b"])).is_err_and(|e| e.contains("2 directories")));
    }

    #[test]
    fn only_plain_file_names_are_accepted() {
        assert_eq!(check_file_name(&json!("audit-2026.jsonl")), Ok("audit-2026.jsonl".into()));
        for bad in [json!("../x"), json!("a/b"), json!(""), json!(".."), json!("a\\b"), json!("/etc/passwd"), json!(3)]
        {
            assert!(check_file_name(&bad).is_err(), "{bad}");
        }
    }
}
