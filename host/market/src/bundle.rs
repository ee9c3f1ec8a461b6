//! Bundles: the gzip'd tar a plugin travels in, its digest, and unpacking it without trusting it.
//!
//! A bundle holds `plugin.toml`, the component it names, and optionally a README, LICENSE or
//! CHANGELOG, at its root (or under one top-level directory, as `tar czf x.tar.gz dir/` makes).
//! [`pack`] writes one reproducibly (sorted entries, fixed times, owners and modes), so packing
//! the same directory twice gives the same digest.
//!
//! [`unpack`] refuses anything that could reach outside the directory it unpacks into or fill
//! the disk: absolute paths, `..`, links and devices, more than [`Limits::max_entries`] entries,
//! a file over [`Limits::max_file_bytes`] (the component is the big one), or more than
//! [`Limits::max_unpacked_bytes`] in all.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use talaria_runtime::{Manifest, ManifestError};

/// The documents packed beside plugin.toml and the component, when present.
const DOCUMENTS: &[&str] = &["README.md", "LICENSE", "LICENSE.md", "LICENSE.txt", "CHANGELOG.md"];

const MIB: u64 = 1024 * 1024;

/// Size limits for a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The bundle as downloaded.
    pub max_bundle_bytes: u64,
    /// Any one file in it; the component is the largest (a Python plugin is about 19 MiB).
    pub max_file_bytes: u64,
    /// Everything unpacked.
    pub max_unpacked_bytes: u64,
    pub max_entries: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_bundle_bytes: 64 * MIB, max_file_bytes: 64 * MIB, max_unpacked_bytes: 128 * MIB, max_entries: 256 }
    }
}

/// Why a bundle was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BundleError {
    #[error("bundle entry `{0}` escapes the plugin directory (absolute path or `..`); refusing the bundle")]
    Escape(String),
    #[error("bundle entry `{path}` is a {kind}; a bundle may hold only regular files and directories")]
    NotAFile { path: String, kind: String },
    #[error("bundle entry `{path}` is {} MiB, over the {} MiB limit for one file in a plugin bundle", mib(*size), mib(*limit))]
    FileTooLarge { path: String, size: u64, limit: u64 },
    #[error("the bundle is {} MiB, over the {} MiB limit", mib(*size), mib(*limit))]
    BundleTooLarge { size: u64, limit: u64 },
    #[error("the bundle unpacks to more than {} MiB; refusing it", mib(*limit))]
    UnpackedTooLarge { limit: u64 },
    #[error("the bundle has more than {0} entries; refusing it")]
    TooManyEntries(usize),
    #[error("bundle entry `{0}` appears twice")]
    Duplicate(String),
    #[error("the bundle has no plugin.toml at its root (nor under a single top-level directory)")]
    NoManifest,
    #[error("the bundle has no {0} at its root (nor under a single top-level directory)")]
    NoRoot(String),
    #[error("not a plugin bundle (a .tar.gz): {0}")]
    Format(String),
    #[error("{0}")]
    Io(String),
}

/// Why a directory could not be packed into a bundle. A message says what its cause said, so
/// the cause is not given again as the error's source.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// The directory's plugin.toml is missing or invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A file to pack cannot be read.
    #[error("{}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    /// A file cannot be added to the archive (a name tar cannot hold).
    #[error("packing {name}: {error}")]
    Entry { name: String, error: std::io::Error },
    /// The archive cannot be finished or compressed.
    #[error("{0}")]
    Write(std::io::Error),
}

/// Sizes in MiB with one decimal, for messages.
fn mib(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let m = bytes as f64 / MIB as f64;
    format!("{m:.1}")
}

/// `sha256:<hex>` of a bundle's bytes.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", talaria_runtime::fsutil::sha256_hex(bytes))
}

/// Pack the plugin in `dir` (its plugin.toml, the component it names, and its documents) into
/// a bundle, reproducibly.
///
/// # Errors
/// [`PackError::Manifest`] when the manifest is invalid, else as [`pack_files`].
pub fn pack(dir: &Path) -> Result<(Vec<u8>, Manifest), PackError> {
    let manifest_path = dir.join("plugin.toml");
    let manifest = Manifest::load(&manifest_path)?;
    let mut names = vec!["plugin.toml".to_string(), manifest.wasm.clone()];
    names.extend(DOCUMENTS.iter().filter(|d| dir.join(d).is_file()).map(|d| (*d).to_string()));
    pack_files(dir, names).map(|bytes| (bytes, manifest))
}

/// Pack the files `names` (paths relative to `dir`, `/`-separated) into a bundle, reproducibly:
/// sorted, with fixed times, owners and modes.
///
/// # Errors
/// [`PackError::Read`] when a file cannot be read.
pub fn pack_files(dir: &Path, mut names: Vec<String>) -> Result<Vec<u8>, PackError> {
    names.sort();
    names.dedup();
    let mut tar = tar::Builder::new(Vec::new());
    for name in &names {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).map_err(|error| PackError::Read { path: path.clone(), error })?;
        let mut header = tar::Header::new_ustar();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, name, bytes.as_slice())
            .map_err(|error| PackError::Entry { name: name.clone(), error })?;
    }
    let tar = tar.into_inner().map_err(PackError::Write)?;
    let mut gz = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::best());
    gz.write_all(&tar).and_then(|()| gz.finish()).map_err(PackError::Write)
}

/// A reader that fails once more than `left` bytes have come through.
struct Capped<R> {
    inner: R,
    left: u64,
    limit: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self
            .left
            .checked_sub(n as u64)
            .ok_or_else(|| std::io::Error::other(BundleError::UnpackedTooLarge { limit: self.limit }.to_string()))?;
        Ok(n)
    }
}

/// Unpack `bytes` into the empty directory `into`; returns the plugin's root (`into`, or its
/// single top-level directory).
///
/// # Errors
/// The first thing that makes the bundle unsafe or unreadable; what was written so far stays in
/// `into` for the caller to remove.
pub fn unpack(bytes: &[u8], into: &Path, limits: &Limits) -> Result<PathBuf, BundleError> {
    unpack_rooted(bytes, into, limits, "plugin.toml")
}

/// [`unpack`] for a bundle whose root holds `marker` (a skill's `SKILL.md`).
///
/// # Errors
/// As [`unpack`]; [`BundleError::NoRoot`] when no `marker` is found.
pub fn unpack_rooted(bytes: &[u8], into: &Path, limits: &Limits, marker: &str) -> Result<PathBuf, BundleError> {
    if bytes.len() as u64 > limits.max_bundle_bytes {
        return Err(BundleError::BundleTooLarge { size: bytes.len() as u64, limit: limits.max_bundle_bytes });
    }
    let gz = flate2::read::GzDecoder::new(bytes);
    let capped = Capped { inner: gz, left: limits.max_unpacked_bytes, limit: limits.max_unpacked_bytes };
    let mut archive = tar::Archive::new(capped);
    let io = |e: std::io::Error| {
        let text = e.to_string();
        if text.contains("unpacks to more than") {
            BundleError::UnpackedTooLarge { limit: limits.max_unpacked_bytes }
        } else {
            BundleError::Format(text)
        }
    };
    let mut count = 0usize;
    for entry in archive.entries().map_err(io)? {
        let mut entry = entry.map_err(io)?;
        count += 1;
        if count > limits.max_entries {
            return Err(BundleError::TooManyEntries(limits.max_entries));
        }
        let raw = entry.path().map_err(io)?.into_owned();
        let shown = raw.display().to_string();
        let rel = safe_relative(&raw).ok_or_else(|| BundleError::Escape(shown.clone()))?;
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            if !rel.as_os_str().is_empty() {
                std::fs::create_dir_all(into.join(&rel)).map_err(|e| BundleError::Io(e.to_string()))?;
            }
            continue;
        }
        if !kind.is_file() {
            return Err(BundleError::NotAFile { path: shown, kind: kind_name(kind).to_string() });
        }
        let size = entry.header().size().map_err(io)?;
        if size > limits.max_file_bytes {
            return Err(BundleError::FileTooLarge { path: shown, size, limit: limits.max_file_bytes });
        }
        let target = into.join(&rel);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| BundleError::Io(e.to_string()))?;
        }
        let mut file = match std::fs::OpenOptions::new().write(true).create_new(true).open(&target) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(BundleError::Duplicate(shown)),
            Err(e) => return Err(BundleError::Io(format!("{}: {e}", target.display()))),
        };
        let copied = std::io::copy(&mut (&mut entry).take(limits.max_file_bytes + 1), &mut file).map_err(io)?;
        if copied > limits.max_file_bytes {
            return Err(BundleError::FileTooLarge { path: shown, size: copied, limit: limits.max_file_bytes });
        }
        // On disk before the lockfile can point at it.
        file.sync_all().map_err(|e| BundleError::Io(format!("{}: {e}", target.display())))?;
    }
    root_of(into, marker)
}

/// The path with `.` dropped, if it is relative and never climbs.
fn safe_relative(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

fn kind_name(kind: tar::EntryType) -> &'static str {
    match kind {
        tar::EntryType::Symlink => "symbolic link",
        tar::EntryType::Link => "hard link",
        tar::EntryType::Char => "character device",
        tar::EntryType::Block => "block device",
        tar::EntryType::Fifo => "named pipe",
        _ => "special entry",
    }
}

/// Where `marker` is: the root, or the one directory at the root.
fn root_of(into: &Path, marker: &str) -> Result<PathBuf, BundleError> {
    if into.join(marker).is_file() {
        return Ok(into.to_path_buf());
    }
    let entries: Vec<PathBuf> =
        std::fs::read_dir(into).map_err(|e| BundleError::Io(e.to_string()))?.flatten().map(|e| e.path()).collect();
    match entries.as_slice() {
        [only] if only.is_dir() && only.join(marker).is_file() => Ok(only.clone()),
        _ if marker == "plugin.toml" => Err(BundleError::NoManifest),
        _ => Err(BundleError::NoRoot(marker.to_string())),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is the test failing
mod tests {
    use super::*;

    /// A gzip'd tar of raw entries: (path written into the header, type, body).
    pub(crate) fn raw_bundle(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, kind, body) in entries {
            let mut header = tar::Header::new_gnu();
            // Write the name bytes directly: `set_path` refuses `..`, which is what we test.
            let name = &mut header.as_gnu_mut().unwrap().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            header.set_entry_type(*kind);
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            if kind.is_symlink() || *kind == tar::EntryType::Link {
                header.set_link_name("/etc/passwd").unwrap();
            }
            header.set_cksum();
            tar.append(&header, *body).unwrap();
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar.into_inner().unwrap()).unwrap();
        gz.finish().unwrap()
    }

    const MANIFEST: &str = "name = \"hello\"\nversion = \"1.0.0\"\napi = \"0.2.0\"\n";

    fn plugin_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plugin.toml"), MANIFEST).unwrap();
        std::fs::write(dir.path().join("plugin.wasm"), b"\0asm not really").unwrap();
        std::fs::write(dir.path().join("README.md"), "# hello").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "not packed").unwrap();
        dir
    }

    #[test]
    fn pack_is_reproducible_and_unpacks_to_the_same_files() {
        let dir = plugin_dir();
        let (a, manifest) = pack(dir.path()).unwrap();
        let (b, _) = pack(dir.path()).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_eq!(manifest.name, "hello");
        let out = tempfile::tempdir().unwrap();
        let root = unpack(&a, out.path(), &Limits::default()).unwrap();
        assert_eq!(root, out.path());
        let mut names: Vec<String> =
            std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["README.md", "plugin.toml", "plugin.wasm"], "only the plugin's files are packed");
        assert_eq!(std::fs::read(root.join("plugin.wasm")).unwrap(), b"\0asm not really");
    }

    #[test]
    fn a_single_top_level_directory_is_the_root() {
        let bytes = raw_bundle(&[
            ("hello/", tar::EntryType::Directory, b""),
            ("hello/plugin.toml", tar::EntryType::Regular, MANIFEST.as_bytes()),
        ]);
        let out = tempfile::tempdir().unwrap();
        assert_eq!(unpack(&bytes, out.path(), &Limits::default()).unwrap(), out.path().join("hello"));
    }

    #[test]
    fn entries_escaping_the_directory_are_refused_before_anything_is_written_outside() {
        let parent = tempfile::tempdir().unwrap();
        let into = parent.path().join("stage");
        std::fs::create_dir(&into).unwrap();
        for path in ["../evil.txt", "a/../../evil.txt", "/tmp/evil.txt"] {
            let bytes = raw_bundle(&[
                ("plugin.toml", tar::EntryType::Regular, MANIFEST.as_bytes()),
                (path, tar::EntryType::Regular, b"gotcha"),
            ]);
            let err = unpack(&bytes, &into, &Limits::default()).unwrap_err();
            assert_eq!(err, BundleError::Escape(path.to_string()));
            assert_eq!(
                err.to_string(),
                format!(
                    "bundle entry `{path}` escapes the plugin directory (absolute path or `..`); refusing the bundle"
                )
            );
            assert!(!parent.path().join("evil.txt").exists());
            std::fs::remove_dir_all(&into).unwrap();
            std::fs::create_dir(&into).unwrap();
        }
    }

    #[test]
    fn links_and_devices_are_refused() {
        for (kind, name) in [
            (tar::EntryType::Symlink, "symbolic link"),
            (tar::EntryType::Link, "hard link"),
            (tar::EntryType::Fifo, "named pipe"),
        ] {
            let bytes = raw_bundle(&[("plugin.wasm", kind, b"")]);
            let out = tempfile::tempdir().unwrap();
            let err = unpack(&bytes, out.path(), &Limits::default()).unwrap_err();
            assert_eq!(err, BundleError::NotAFile { path: "plugin.wasm".into(), kind: name.into() });
        }
    }

    #[test]
    fn size_limits_hold() {
        let big = vec![0u8; 4096];
        let bytes = raw_bundle(&[("plugin.wasm", tar::EntryType::Regular, &big)]);
        let out = tempfile::tempdir().unwrap();
        let limits = Limits { max_file_bytes: 1024, ..Limits::default() };
        assert_eq!(
            unpack(&bytes, out.path(), &limits).unwrap_err(),
            BundleError::FileTooLarge { path: "plugin.wasm".into(), size: 4096, limit: 1024 }
        );
        let out = tempfile::tempdir().unwrap();
        let limits = Limits { max_unpacked_bytes: 2048, ..Limits::default() };
        assert_eq!(unpack(&bytes, out.path(), &limits).unwrap_err(), BundleError::UnpackedTooLarge { limit: 2048 });
        let limits = Limits { max_bundle_bytes: 10, ..Limits::default() };
        assert!(matches!(unpack(&bytes, out.path(), &limits), Err(BundleError::BundleTooLarge { limit: 10, .. })));
        let many: Vec<(String, tar::EntryType, &[u8])> =
            (0..5).map(|i| (format!("f{i}"), tar::EntryType::Regular, &b"x"[..])).collect();
        let refs: Vec<(&str, tar::EntryType, &[u8])> = many.iter().map(|(p, k, b)| (p.as_str(), *k, *b)).collect();
        let out = tempfile::tempdir().unwrap();
        let limits = Limits { max_entries: 3, ..Limits::default() };
        assert_eq!(unpack(&raw_bundle(&refs), out.path(), &limits).unwrap_err(), BundleError::TooManyEntries(3));
    }

    #[test]
    fn garbage_and_missing_manifest_are_clear() {
        let out = tempfile::tempdir().unwrap();
        assert!(matches!(unpack(b"not a tarball", out.path(), &Limits::default()), Err(BundleError::Format(_))));
        let bytes = raw_bundle(&[("plugin.wasm", tar::EntryType::Regular, b"x")]);
        let out = tempfile::tempdir().unwrap();
        assert_eq!(unpack(&bytes, out.path(), &Limits::default()).unwrap_err(), BundleError::NoManifest);
        let bytes = raw_bundle(&[
            ("plugin.toml", tar::EntryType::Regular, MANIFEST.as_bytes()),
            ("plugin.toml", tar::EntryType::Regular, MANIFEST.as_bytes()),
        ]);
        let out = tempfile::tempdir().unwrap();
        assert_eq!(
            unpack(&bytes, out.path(), &Limits::default()).unwrap_err(),
            BundleError::Duplicate("plugin.toml".into())
        );
    }

    /// Fuzzed: any bytes as a bundle unpack or are refused, and nothing is ever written outside
    /// the directory they were unpacked into.
    #[test]
    fn fuzz_bundles() {
        let limits =
            Limits { max_bundle_bytes: 1 << 20, max_file_bytes: 1 << 16, max_unpacked_bytes: 1 << 18, max_entries: 64 };
        talaria_fuzz::bytes("bundle", |bytes| {
            let outer = tempfile::tempdir().unwrap();
            let into = outer.path().join("into");
            std::fs::create_dir(&into).unwrap();
            let _ = unpack(bytes, &into, &limits);
            let beside: Vec<_> =
                std::fs::read_dir(outer.path()).unwrap().filter_map(Result::ok).map(|e| e.file_name()).collect();
            assert_eq!(beside, [std::ffi::OsString::from("into")], "written outside the directory");
        });
    }
}
