//! The filesystem a plugin sees: WASI's own, with protected places taken out.
//!
//! wasmtime-wasi keeps every path below the directories a plugin was granted. Some places inside a
//! granted directory must still stay out of reach, because what is written there decides what
//! talaria or git run next, or holds what the user never granted:
//! - `.git` (its config and hooks run commands on the next `git status`),
//! - `.talaria` (a project's plugins, lockfile and settings, which talaria loads),
//! - talaria's home (grants, secrets, compiled code), except the plugin's own data directory.
//!
//! A directory granted by naming such a place (`fs:rw:$WORKSPACE/.git`) is reachable through that
//! grant: the operator asked for exactly that. Inside any grant, a path component named `.git` or
//! `.talaria` below the granted directory is protected, at any depth.
//!
//! Every call that takes a path (open, stat, create, link, rename, symlink, unlink, readlink,
//! set-times, metadata-hash) is resolved here before wasmtime-wasi sees it:
//! 1. the parent directory is opened beneath the descriptor the plugin used (`cap-primitives`,
//!    which refuses any step out of it), and where that handle really is (`/proc/self/fd`) is
//!    checked against the protected places;
//! 2. the last component must not be a protected name;
//! 3. when the call follows a link in the last component, the link is read and resolved here, step
//!    by step, each step checked as above;
//! 4. wasmtime-wasi then performs the call relative to the checked parent handle, with link
//!    following off, so nothing the plugin changes in between (a rename, a new link) can redirect
//!    it: a last component swapped for a link makes the call fail, never follow.
//!
//! A refusal reaches the plugin as `not-permitted` and is kept among the call's denials with the
//! reason, so the tool error the model sees says what happened.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use wasmtime::component::{HasData, Resource};
use wasmtime_wasi::filesystem::{Descriptor, Dir, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, ErrorCode, HostDescriptor, HostDirectoryEntryStream, PathFlags,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};
use wasmtime_wasi::p2::{FsError, FsResult};

/// Names that are protected wherever they appear below a granted directory.
const PROTECTED_NAMES: &[(&str, &str)] = &[
    (".git", "`.git` holds git's config and hooks, which run commands"),
    (".talaria", "`.talaria` holds the project's plugins and settings, which talaria loads"),
];

/// Most links followed while resolving one path (as Linux allows).
const MAX_LINKS: usize = 40;

/// What a plugin's calls may not reach, and where refusals are kept.
pub(crate) struct FsGuard {
    pub plugin: String,
    /// The granted directories, as they really are (canonical).
    pub roots: Vec<PathBuf>,
    /// `$TALARIA_HOME`, canonical.
    pub home: PathBuf,
    /// The plugin's own data directory inside it.
    pub data_dir: PathBuf,
    pub denials: Arc<Mutex<Vec<String>>>,
    /// The instance runs on a thread of its own and may block it
    /// ([`Site::own_thread`](super::Site::own_thread)): a directory the guard opens does as
    /// wasmtime-wasi's own do, or its files' opens would each go to a blocking thread and back.
    pub own_thread: bool,
}

impl FsGuard {
    /// Why `dir` (a real directory) joined with `name` is out of reach, if it is.
    fn protected(&self, dir: &Path, name: Option<&str>) -> Option<String> {
        let full = match name {
            Some(name) => dir.join(name),
            None => dir.to_path_buf(),
        };
        if full.starts_with(&self.home) && !full.starts_with(&self.data_dir) {
            return Some(format!("it is inside talaria's home {}", self.home.display()));
        }
        // The deepest granted directory holding it: components below that one count.
        let root = self.roots.iter().filter(|r| full.starts_with(r)).max_by_key(|r| r.components().count());
        let Some(root) = root else {
            return Some("it is not inside any directory granted to the plugin".to_string());
        };
        let rel = full.strip_prefix(root).unwrap_or(&full);
        for part in rel.components() {
            if let Component::Normal(part) = part
                && let Some(&protected) = PROTECTED_NAMES.iter().find(|(n, _)| part == *n)
            {
                return Some(explain(protected));
            }
        }
        None
    }

    /// Refuse `path`: keep the reason for the operator and the model.
    fn refuse(&self, path: &Path, why: &str) -> FsError {
        let reason = format!("plugin '{}' may not touch {}: {why}", self.plugin, path.display());
        let mut denials = self.denials.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if denials.len() < 8 && !denials.contains(&reason) {
            tracing::info!(plugin = %self.plugin, "{reason}");
            denials.push(reason);
        }
        ErrorCode::NotPermitted.into()
    }

    /// Resolve `path` below `base`: the checked parent directory and the last component (`.`
    /// when the path names a directory itself). With `follow`, a link in the last component is
    /// resolved here, so the caller must not follow it again.
    fn resolve(&self, base: &std::fs::File, path: &str, follow: bool) -> FsResult<(std::fs::File, String)> {
        let mut path = PathBuf::from(path);
        // A protected name anywhere in the path is refused before anything is opened, so that
        // creating `.talaria/plugins/x/...` fails the same way whether or not its parents exist.
        if let Some(why) = path.components().find_map(|c| match c {
            Component::Normal(part) => PROTECTED_NAMES.iter().find(|(n, _)| part == *n).map(|(n, why)| (*n, *why)),
            _ => None,
        }) {
            let base_real = talaria_beneath::real_path(base).map_err(|e| io_error(&e))?;
            return Err(self.refuse(&crate::process::normalize(&base_real.join(&path)), &explain(why)));
        }
        for _ in 0..=MAX_LINKS {
            if path.is_absolute() {
                return Err(ErrorCode::NotPermitted.into());
            }
            let last = path.components().next_back();
            let (parent_rel, name) = match last {
                Some(Component::Normal(name)) => {
                    let parent = path.parent().unwrap_or(Path::new(""));
                    (parent.to_path_buf(), Some(name.to_string_lossy().into_owned()))
                }
                // `.`, `..` or an empty path: the path names a directory itself.
                _ => (path.clone(), None),
            };
            let parent_rel = if parent_rel.as_os_str().is_empty() { PathBuf::from(".") } else { parent_rel };
            let parent = cap_primitives::fs::open_dir(base, &parent_rel).map_err(|e| io_error(&e))?;
            let real = talaria_beneath::real_path(&parent).map_err(|e| io_error(&e))?;
            if let Some(why) = self.protected(&real, name.as_deref()) {
                let shown = match &name {
                    Some(name) => real.join(name),
                    None => real.clone(),
                };
                return Err(self.refuse(&shown, &why));
            }
            let Some(name) = name else { return Ok((parent, ".".to_string())) };
            if follow
                && let Ok(meta) =
                    cap_primitives::fs::stat(&parent, Path::new(&name), cap_primitives::fs::FollowSymlinks::No)
                && meta.file_type().is_symlink()
            {
                let target =
                    cap_primitives::fs::read_link_contents(&parent, Path::new(&name)).map_err(|e| io_error(&e))?;
                path = parent_rel.join(target);
                continue;
            }
            return Ok((parent, name));
        }
        Err(ErrorCode::Loop.into())
    }
}

/// Why a protected name is out of reach, and how an operator allows it.
fn explain((name, why): (&str, &str)) -> String {
    format!("{why}; an operator can allow it only by granting that directory itself (e.g. `fs:rw:$WORKSPACE/{name}`)")
}

fn io_error(e: &std::io::Error) -> FsError {
    if talaria_beneath::is_escape(e) {
        return ErrorCode::NotPermitted.into();
    }
    ErrorCode::from(e).into()
}

/// The guarded filesystem, for the linker.
pub(crate) struct GuardedFs;

impl HasData for GuardedFs {
    type Data<'a> = GuardedFsView<'a>;
}

/// wasmtime-wasi's filesystem view with the guard in front of it.
pub(crate) struct GuardedFsView<'a> {
    pub inner: WasiFilesystemCtxView<'a>,
    pub guard: &'a FsGuard,
}

impl GuardedFsView<'_> {
    /// The directory behind descriptor `fd`, with its permissions.
    fn dir_of(&self, fd: &Resource<Descriptor>) -> FsResult<Dir> {
        match self.inner.table.get(fd)? {
            Descriptor::Dir(d) => Ok(d.clone()),
            Descriptor::File(_) => Err(ErrorCode::NotDirectory.into()),
        }
    }

    /// Resolve `path` below `fd` and push the checked parent as a temporary descriptor (with
    /// `fd`'s permissions); the caller deletes it.
    fn checked(
        &mut self,
        fd: &Resource<Descriptor>,
        path: &str,
        follow: bool,
    ) -> FsResult<(Resource<Descriptor>, String)> {
        let dir = self.dir_of(fd)?;
        let (parent, name) = self.guard.resolve(&dir.dir, path, follow)?;
        let parent = Descriptor::Dir(Dir::new(parent, dir.perms, dir.open_mode, self.guard.own_thread));
        Ok((self.inner.table.push(parent)?, name))
    }

    fn release(&mut self, temp: Resource<Descriptor>) {
        let _ = self.inner.table.delete(temp);
    }
}

/// A second handle on the same descriptor, to pass on.
fn handle(r: &Resource<Descriptor>) -> Resource<Descriptor> {
    Resource::new_borrow(r.rep())
}

/// `flags` without link following (the guard already followed the link, if any).
fn no_follow(flags: PathFlags) -> PathFlags {
    flags & !PathFlags::SYMLINK_FOLLOW
}

impl types::Host for GuardedFsView<'_> {
    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<ErrorCode> {
        types::Host::convert_error_code(&mut self.inner, err)
    }

    fn filesystem_error_code(&mut self, err: Resource<wasmtime::Error>) -> wasmtime::Result<Option<ErrorCode>> {
        types::Host::filesystem_error_code(&mut self.inner, err)
    }
}

impl HostDirectoryEntryStream for GuardedFsView<'_> {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<types::DirectoryEntryStream>,
    ) -> FsResult<Option<types::DirectoryEntry>> {
        HostDirectoryEntryStream::read_directory_entry(&mut self.inner, stream).await
    }

    fn drop(&mut self, stream: Resource<types::DirectoryEntryStream>) -> wasmtime::Result<()> {
        HostDirectoryEntryStream::drop(&mut self.inner, stream)
    }
}

impl HostDescriptor for GuardedFsView<'_> {
    async fn advise(
        &mut self,
        fd: Resource<Descriptor>,
        offset: types::Filesize,
        len: types::Filesize,
        advice: types::Advice,
    ) -> FsResult<()> {
        HostDescriptor::advise(&mut self.inner, fd, offset, len, advice).await
    }

    async fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        HostDescriptor::sync_data(&mut self.inner, fd).await
    }

    async fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<types::DescriptorFlags> {
        HostDescriptor::get_flags(&mut self.inner, fd).await
    }

    async fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<types::DescriptorType> {
        HostDescriptor::get_type(&mut self.inner, fd).await
    }

    async fn set_size(&mut self, fd: Resource<Descriptor>, size: types::Filesize) -> FsResult<()> {
        HostDescriptor::set_size(&mut self.inner, fd, size).await
    }

    async fn set_times(
        &mut self,
        fd: Resource<Descriptor>,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        HostDescriptor::set_times(&mut self.inner, fd, atim, mtim).await
    }

    async fn read(
        &mut self,
        fd: Resource<Descriptor>,
        len: types::Filesize,
        offset: types::Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        HostDescriptor::read(&mut self.inner, fd, len, offset).await
    }

    async fn write(
        &mut self,
        fd: Resource<Descriptor>,
        buf: Vec<u8>,
        offset: types::Filesize,
    ) -> FsResult<types::Filesize> {
        HostDescriptor::write(&mut self.inner, fd, buf, offset).await
    }

    async fn read_directory(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<types::DirectoryEntryStream>> {
        HostDescriptor::read_directory(&mut self.inner, fd).await
    }

    async fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        HostDescriptor::sync(&mut self.inner, fd).await
    }

    async fn create_directory_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let (dir, name) = self.checked(&fd, &path, false)?;
        let result = HostDescriptor::create_directory_at(&mut self.inner, handle(&dir), name).await;
        self.release(dir);
        result
    }

    async fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<types::DescriptorStat> {
        HostDescriptor::stat(&mut self.inner, fd).await
    }

    async fn stat_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<types::DescriptorStat> {
        let (dir, name) = self.checked(&fd, &path, path_flags.contains(PathFlags::SYMLINK_FOLLOW))?;
        let result = HostDescriptor::stat_at(&mut self.inner, handle(&dir), no_follow(path_flags), name).await;
        self.release(dir);
        result
    }

    async fn set_times_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        let (dir, name) = self.checked(&fd, &path, path_flags.contains(PathFlags::SYMLINK_FOLLOW))?;
        let result =
            HostDescriptor::set_times_at(&mut self.inner, handle(&dir), no_follow(path_flags), name, atim, mtim).await;
        self.release(dir);
        result
    }

    async fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path_flags: PathFlags,
        old_path: String,
        new_descriptor: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let (old_dir, old_name) = self.checked(&fd, &old_path, false)?;
        let new = self.checked(&new_descriptor, &new_path, false);
        let result = match new {
            Ok((new_dir, new_name)) => {
                let r = HostDescriptor::link_at(
                    &mut self.inner,
                    handle(&old_dir),
                    old_path_flags,
                    old_name,
                    handle(&new_dir),
                    new_name,
                )
                .await;
                self.release(new_dir);
                r
            }
            Err(e) => Err(e),
        };
        self.release(old_dir);
        result
    }

    async fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        oflags: types::OpenFlags,
        flags: types::DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        let (dir, name) = self.checked(&fd, &path, path_flags.contains(PathFlags::SYMLINK_FOLLOW))?;
        let result =
            HostDescriptor::open_at(&mut self.inner, handle(&dir), no_follow(path_flags), name, oflags, flags).await;
        self.release(dir);
        result
    }

    fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        HostDescriptor::drop(&mut self.inner, fd)
    }

    async fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        let (dir, name) = self.checked(&fd, &path, false)?;
        let result = HostDescriptor::readlink_at(&mut self.inner, handle(&dir), name).await;
        self.release(dir);
        result
    }

    async fn remove_directory_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let (dir, name) = self.checked(&fd, &path, false)?;
        let result = HostDescriptor::remove_directory_at(&mut self.inner, handle(&dir), name).await;
        self.release(dir);
        result
    }

    async fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let (old_dir, old_name) = self.checked(&fd, &old_path, false)?;
        let new = self.checked(&new_fd, &new_path, false);
        let result = match new {
            Ok((new_dir, new_name)) => {
                let r =
                    HostDescriptor::rename_at(&mut self.inner, handle(&old_dir), old_name, handle(&new_dir), new_name)
                        .await;
                self.release(new_dir);
                r
            }
            Err(e) => Err(e),
        };
        self.release(old_dir);
        result
    }

    async fn symlink_at(&mut self, fd: Resource<Descriptor>, src_path: String, dest_path: String) -> FsResult<()> {
        let (dir, name) = self.checked(&fd, &dest_path, false)?;
        let result = HostDescriptor::symlink_at(&mut self.inner, handle(&dir), src_path, name).await;
        self.release(dir);
        result
    }

    async fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let (dir, name) = self.checked(&fd, &path, false)?;
        let result = HostDescriptor::unlink_file_at(&mut self.inner, handle(&dir), name).await;
        self.release(dir);
        result
    }

    fn read_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynInputStream>> {
        HostDescriptor::read_via_stream(&mut self.inner, fd, offset)
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynOutputStream>> {
        HostDescriptor::write_via_stream(&mut self.inner, fd, offset)
    }

    fn append_via_stream(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<DynOutputStream>> {
        HostDescriptor::append_via_stream(&mut self.inner, fd)
    }

    async fn is_same_object(&mut self, a: Resource<Descriptor>, b: Resource<Descriptor>) -> wasmtime::Result<bool> {
        HostDescriptor::is_same_object(&mut self.inner, a, b).await
    }

    async fn metadata_hash(&mut self, fd: Resource<Descriptor>) -> FsResult<types::MetadataHashValue> {
        HostDescriptor::metadata_hash(&mut self.inner, fd).await
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<types::MetadataHashValue> {
        let (dir, name) = self.checked(&fd, &path, path_flags.contains(PathFlags::SYMLINK_FOLLOW))?;
        let result = HostDescriptor::metadata_hash_at(&mut self.inner, handle(&dir), no_follow(path_flags), name).await;
        self.release(dir);
        result
    }
}
