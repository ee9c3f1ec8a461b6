//! Where a home is: the base home, profiles and the one in use.

use std::path::{Path, PathBuf};

use crate::Error;

/// The base home: `$TALARIA_HOME`, else `~/.talaria`. The default profile lives here; every
/// other profile in `profiles/NAME/` below it.
///
/// # Errors
/// Neither is set, or HOME is not a directory (a wrong one would silently start an empty talaria
/// somewhere unexpected).
pub fn base_home() -> Result<PathBuf, Error> {
    if let Some(home) = std::env::var_os("TALARIA_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    // HOME must name a directory that exists: a wrong one would silently create a new,
    // empty talaria somewhere unexpected.
    let base = match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => PathBuf::from(home),
        None => {
            return Err(Error::Home(
                "HOME is not set, so talaria does not know where to keep its state: set HOME to your home directory, or TALARIA_HOME to a directory for talaria".into(),
            ));
        }
    };
    if !base.is_dir() {
        return Err(Error::Home(format!(
            "HOME is {}, which is not a directory: set HOME to your home directory, or TALARIA_HOME to a directory for talaria",
            base.display()
        )));
    }
    Ok(base.join(".talaria"))
}

/// The profile `-p NAME` chose for this process (set once, before anything reads home).
static PROFILE_FLAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The file in the base home naming the profile `talaria profile use` chose.
pub const ACTIVE_PROFILE_FILE: &str = "active_profile";

/// The profile whose home is the base home itself.
pub const DEFAULT_PROFILE: &str = "default";

/// Use profile `name` in this process (`-p NAME`): it comes before `TALARIA_PROFILE` and the
/// profile `talaria profile use` chose. A second call is ignored.
pub fn set_profile(name: &str) {
    let _ = PROFILE_FLAG.set(name.to_string());
}

/// Whether `name` can be a profile's name: 1-64 characters of a-z, 0-9, `-` and `_`, starting
/// with a letter or digit.
///
/// # Errors
/// It cannot; the message says what a name may be.
pub fn check_profile_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "`{name}` is not a profile name: use 1-64 characters of a-z, 0-9, `-` and `_`, starting with a letter or digit"
        )))
    }
}

/// The profile in use and where it was chosen: `-p`, `TALARIA_PROFILE`, `talaria profile use`,
/// else the default.
pub fn profile(base: &Path) -> (String, &'static str) {
    if let Some(name) = PROFILE_FLAG.get() {
        return (name.clone(), "-p");
    }
    if let Some(name) = std::env::var("TALARIA_PROFILE").ok().filter(|n| !n.trim().is_empty()) {
        return (name.trim().to_string(), "TALARIA_PROFILE");
    }
    match std::fs::read_to_string(base.join(ACTIVE_PROFILE_FILE)) {
        Ok(name) if !name.trim().is_empty() => (name.trim().to_string(), "talaria profile use"),
        _ => (DEFAULT_PROFILE.to_string(), "default"),
    }
}

/// The home of profile `name` under `base`.
pub fn profile_home(base: &Path, name: &str) -> PathBuf {
    if name == DEFAULT_PROFILE { base.to_path_buf() } else { base.join("profiles").join(name) }
}

/// Where talaria keeps its state: the home of the profile in use ([`profile`]) under
/// [`base_home`].
///
/// # Errors
/// Home cannot be worked out, or the profile chosen does not exist or has a bad name.
pub fn home() -> Result<PathBuf, Error> {
    let base = base_home()?;
    let (name, chosen_by) = profile(&base);
    check_profile_name(&name)?;
    let home = profile_home(&base, &name);
    if name != DEFAULT_PROFILE && !home.is_dir() {
        return Err(Error::Usage(format!(
            "there is no profile named `{name}` (chosen by {chosen_by}; profiles live in {}): create it with `talaria profile create {name}`, or see `talaria profile list`",
            base.join("profiles").display()
        )));
    }
    Ok(home)
}
