//! Small file-system helpers for files only the user may read or write.

use std::io::Write;
use std::path::Path;

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
/// Unreadable or malformed, with the path.
pub fn load_toml<T: serde::de::DeserializeOwned + Default>(path: &Path) -> Result<T, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Write `value` as TOML after `header` (comment lines), atomically and readable only by the
/// user (see [`write_private`]).
///
/// # Errors
/// It cannot be serialized or written, with the path.
pub fn save_toml<T: serde::Serialize>(path: &Path, header: &str, value: &T) -> Result<(), String> {
    let text = toml::to_string_pretty(value).map_err(|e| e.to_string())?;
    write_private(path, format!("{header}{text}").as_bytes()).map_err(|e| format!("{}: {e}", path.display()))
}
