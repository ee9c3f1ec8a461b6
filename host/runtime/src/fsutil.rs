//! Small file-system helpers for files only the user may read or write, and [`FileError`]: why
//! one of talaria's TOML files (grants.toml, a lockfile) could not be read or written.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why a TOML file could not be read or written. Each message names the file and quotes its
/// cause, so the cause is kept as a field, not given again as the error's source.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// It exists but cannot be read.
    #[error("{}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    /// It is not TOML, or not the TOML expected.
    #[error("{}: {error}", path.display())]
    Malformed { path: PathBuf, error: toml::de::Error },
    /// The value cannot be written as TOML.
    #[error("{0}")]
    Encode(toml::ser::Error),
    /// It (or its directory) cannot be written.
    #[error("{}: {error}", path.display())]
    Write { path: PathBuf, error: std::io::Error },
}

/// Create `dir` (and parents) with mode 0700 where it is created.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Write `bytes` to `path` atomically and durably (a temp file in the same directory, synced,
/// renamed over `path`, then the directory synced), mode 0600.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_private_inner(path, bytes, true)
}

/// [`write_private`] without the two syncs, for what can be made again (a cache): readers see
/// the old file or the new one, never half of one, but after a power cut the file may be
/// missing or empty, and the reader must treat that as no entry.
pub fn write_private_cached(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_private_inner(path, bytes, false)
}

fn write_private_inner(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    private_dir(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.write_all(bytes)?;
    if durable {
        file.sync_all()?;
    }
    drop(file);
    std::fs::rename(&tmp, path)?;
    if durable {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// sha256 of `bytes`, as lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Read a TOML file into `T`; a missing file is `T::default()`.
///
/// # Errors
/// [`FileError::Read`] or [`FileError::Malformed`], with the path.
pub fn load_toml<T: serde::de::DeserializeOwned + Default>(path: &Path) -> Result<T, FileError> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_toml(&text, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(error) => Err(FileError::Read { path: path.to_path_buf(), error }),
    }
}

/// Read TOML `text` into `T`; `path` is only used in the error.
///
/// # Errors
/// [`FileError::Malformed`], with the path.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, FileError> {
    toml::from_str(text).map_err(|error| FileError::Malformed { path: path.to_path_buf(), error })
}

/// Write `value` as TOML after `header` (comment lines), atomically and readable only by the
/// user (see [`write_private`]).
///
/// # Errors
/// [`FileError::Encode`] when it cannot be serialized, [`FileError::Write`] (with the path) when
/// it cannot be written.
pub fn save_toml<T: serde::Serialize>(path: &Path, header: &str, value: &T) -> Result<(), FileError> {
    let text = toml::to_string_pretty(value).map_err(FileError::Encode)?;
    write_private(path, format!("{header}{text}").as_bytes())
        .map_err(|error| FileError::Write { path: path.to_path_buf(), error })
}
