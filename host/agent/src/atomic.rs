//! Writing a file so that its readers see the old one or the new one, never half of one (a crash
//! mid-write included): the memory files, the skills the agent writes and their lists.
//!
//! ```ignore
//! crate::atomic::write(&home.join("memories").join("USER.md"), b"Prefers short answers.\n")?;
//! ```

use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::Path;

/// Writes `bytes` to a temporary file beside `path`, syncs it, and renames it over `path`: readers
/// see the old file or the new one, never half of one.
pub(crate) fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent directory"))?;
    fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.{:016x}.tmp", std::process::id(), fastrand::u64(..)));
    let result = File::create_new(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
