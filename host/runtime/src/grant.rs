//! Capabilities, grants and the file that records them.
//!
//! A plugin may use a capability only when its manifest requests it AND the user granted it.
//! Grants are written as short strings, the same in `talaria plugins grant` and in
//! `$TALARIA_HOME/grants.toml`:
//!
//! | capability | meaning |
//! |---|---|
//! | `fs:ro:PATH`, `fs:rw:PATH` | read (or read and write) a directory; `$WORKSPACE` is the session's working directory, `$PLUGIN_DATA` a directory private to the plugin |
//! | `net:HOST[:PORT]` | outgoing HTTP to a host; `*` and `*.example.com` are wildcards |
//! | `secret:NAME@HOST` | the host fills in secret NAME on requests to HOST |
//! | `process` | run shell commands (after the dangerous-command check) |
//! | `kv` | private persistent key-value storage |
//! | `llm` | auxiliary model completions (API 0.2.0) |
//!
//! ```
//! use talaria_runtime::Capability;
//! let c: Capability = "net:*.example.com:443".parse().unwrap();
//! assert!(c.covers(&"net:api.example.com:443".parse().unwrap()));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::fsutil::FileError;
use crate::pins::ProjectPins;

/// Read, or read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Read,
    ReadWrite,
}

/// A host name (or IP) pattern with an optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    /// Lower case; `*` alone, `*.suffix`, or an exact name or IP literal.
    host: String,
    port: Option<u16>,
}

/// One capability, requested or granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capability {
    Fs {
        path: String,
        access: Access,
    },
    Net(HostPattern),
    Secret {
        name: String,
        host: HostPattern,
    },
    Process,
    Kv,
    /// Auxiliary model completions through the host (`talaria:plugin/llm`, API 0.2.0).
    Llm,
}

/// The two path variables a filesystem capability may start with.
pub const WORKSPACE_VAR: &str = "$WORKSPACE";
pub const PLUGIN_DATA_VAR: &str = "$PLUGIN_DATA";

/// Why a filesystem capability's path is refused; the message ends a sentence about the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FsPathError {
    /// Relative, and not under one of the two path variables.
    #[error("must be absolute or start with $WORKSPACE or $PLUGIN_DATA")]
    Unanchored,
    /// It has a `..` component.
    #[error("must not contain `..`")]
    Climbs,
}

/// Why a capability or host pattern was refused. Each message quotes the text given (trimmed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    /// A host pattern with a scheme or a path.
    #[error("`{given}` must be a host with an optional port, without scheme or path")]
    NotAHost { given: String },
    /// `[v6` without its `]`.
    #[error("`{given}`: unclosed `[`")]
    UnclosedBracket { given: String },
    /// The part after the colon is not a port number (nor `*`).
    #[error("`{given}`: `{port}` is not a port number")]
    BadPort { given: String, port: String },
    /// The host part is empty or not a host name, IP address or wildcard.
    #[error("`{given}` is not a host name, IP address or wildcard")]
    BadHost { given: String },
    /// `fs:` without `ro:` or `rw:`.
    #[error("`{given}`: write fs:ro:PATH or fs:rw:PATH")]
    BadAccess { given: String },
    /// A filesystem path a capability may not name.
    #[error("`{given}`: the path {why}")]
    BadPath { given: String, why: FsPathError },
    /// `secret:` without `@HOST`.
    #[error("`{given}`: write secret:NAME@HOST")]
    BadSecret { given: String },
    /// A secret sent to a wildcard host.
    #[error("`{given}`: a secret must name the one host it is sent to")]
    WildcardSecret { given: String },
    /// None of the capability kinds.
    #[error(
        "`{given}` is not a capability; capabilities are fs:ro:PATH, fs:rw:PATH, net:HOST[:PORT], secret:NAME@HOST, process, kv, llm"
    )]
    Unknown { given: String },
}

/// Whether `path` is a directory a filesystem capability may name: absolute, or starting with
/// `$WORKSPACE` or `$PLUGIN_DATA`, and without `..`.
pub(crate) fn check_fs_path(path: &str) -> Result<(), FsPathError> {
    let under = |var: &str| path == var || path.starts_with(&format!("{var}/"));
    if !(under(WORKSPACE_VAR) || under(PLUGIN_DATA_VAR) || Path::new(path).is_absolute()) {
        return Err(FsPathError::Unanchored);
    }
    if Path::new(path).components().any(|c| c == std::path::Component::ParentDir) {
        return Err(FsPathError::Climbs);
    }
    Ok(())
}

/// A directory to preopen for a call, after its variable is replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantedDir {
    pub path: PathBuf,
    pub access: Access,
    /// It is the plugin's data directory or inside it (`$PLUGIN_DATA...`): the one place inside
    /// talaria's home a plugin may see.
    pub plugin_data: bool,
}

impl HostPattern {
    /// Parse `host`, `host:port`, `*`, `*:port`, `*.suffix[:port]` or `[v6]:port`.
    ///
    /// # Errors
    /// A scheme, path, empty host or bad port: [`CapabilityError::NotAHost`],
    /// [`CapabilityError::UnclosedBracket`], [`CapabilityError::BadPort`] or
    /// [`CapabilityError::BadHost`].
    pub fn parse(s: &str) -> Result<Self, CapabilityError> {
        let s = s.trim();
        let given = || s.to_string();
        if s.contains("://") || s.contains('/') {
            return Err(CapabilityError::NotAHost { given: given() });
        }
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(|| CapabilityError::UnclosedBracket { given: given() })?;
            (h.to_string(), after.strip_prefix(':'))
        } else if s.matches(':').count() > 1 {
            (s.to_string(), None) // a bare IPv6 address
        } else {
            match s.split_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (s.to_string(), None),
            }
        };
        let port = match port {
            None | Some("*") => None,
            Some(p) => {
                Some(p.parse::<u16>().map_err(|_| CapabilityError::BadPort { given: given(), port: p.to_string() })?)
            }
        };
        let host = host.to_ascii_lowercase();
        let valid_name =
            |h: &str| !h.is_empty() && h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        let ok = host == "*"
            || host.strip_prefix("*.").is_some_and(valid_name)
            || valid_name(&host)
            || host.parse::<IpAddr>().is_ok();
        if !ok {
            return Err(CapabilityError::BadHost { given: given() });
        }
        Ok(Self { host, port })
    }

    /// Whether the host part has a wildcard.
    pub fn is_wildcard(&self) -> bool {
        self.host.starts_with('*')
    }

    /// Whether this names an IP address or localhost (the only grants that reach internal
    /// addresses).
    pub fn names_internal_host(&self) -> bool {
        self.host.parse::<IpAddr>().is_ok() || self.host == "localhost"
    }

    /// Whether a request to `host:port` matches.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        match self.host.strip_prefix('*') {
            Some("") => true,
            Some(suffix) => host.ends_with(suffix) && host.len() > suffix.len(),
            None => self.host == host,
        }
    }

    /// Whether every destination `other` matches is also matched by `self`.
    pub fn covers(&self, other: &HostPattern) -> bool {
        if self.port.is_some() && self.port != other.port {
            return false;
        }
        match (self.host.strip_prefix('*'), other.host.strip_prefix('*')) {
            (Some(""), _) => true,
            (Some(_), Some("")) => false,
            (Some(mine), Some(theirs)) => theirs.ends_with(mine),
            (Some(mine), None) => other.host.ends_with(mine) && other.host.len() > mine.len(),
            (None, _) => self.host == other.host,
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        match self.port {
            Some(p) => write!(f, "{host}:{p}"),
            None => f.write_str(&host),
        }
    }
}

impl Capability {
    /// Whether granting `other` stays within this request: same kind, no wider path, access, host
    /// or port.
    pub fn covers(&self, other: &Capability) -> bool {
        match (self, other) {
            (Capability::Fs { path, access }, Capability::Fs { path: p, access: a }) => {
                a <= access && (p == path || p.starts_with(&format!("{}/", path.trim_end_matches('/'))))
            }
            (Capability::Net(mine), Capability::Net(theirs)) => mine.covers(theirs),
            (Capability::Secret { name, host }, Capability::Secret { name: n, host: h }) => name == n && host.covers(h),
            (Capability::Process, Capability::Process)
            | (Capability::Kv, Capability::Kv)
            | (Capability::Llm, Capability::Llm) => true,
            _ => false,
        }
    }
}

impl Capability {
    /// For a filesystem grant that names a protected place itself (`fs:rw:$WORKSPACE/.git`),
    /// which one: such a grant is the only way a plugin reaches it.
    pub fn protected_place(&self) -> Option<&'static str> {
        let Capability::Fs { path, .. } = self else { return None };
        Path::new(path).components().find_map(|c| match c.as_os_str().to_str() {
            Some(".git") => Some(".git"),
            Some(".talaria") => Some(".talaria"),
            _ => None,
        })
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Capability::Fs { path, access: Access::Read } => write!(f, "fs:ro:{path}"),
            Capability::Fs { path, access: Access::ReadWrite } => write!(f, "fs:rw:{path}"),
            Capability::Net(p) => write!(f, "net:{p}"),
            Capability::Secret { name, host } => write!(f, "secret:{name}@{host}"),
            Capability::Process => f.write_str("process"),
            Capability::Kv => f.write_str("kv"),
            Capability::Llm => f.write_str("llm"),
        }
    }
}

impl FromStr for Capability {
    type Err = CapabilityError;

    fn from_str(s: &str) -> Result<Self, CapabilityError> {
        let s = s.trim();
        let given = || s.to_string();
        match s {
            "process" => return Ok(Capability::Process),
            "kv" => return Ok(Capability::Kv),
            "llm" => return Ok(Capability::Llm),
            _ => {}
        }
        if let Some(rest) = s.strip_prefix("fs:") {
            let (access, path) = match rest.split_once(':') {
                Some(("ro", p)) => (Access::Read, p),
                Some(("rw", p)) => (Access::ReadWrite, p),
                _ => return Err(CapabilityError::BadAccess { given: given() }),
            };
            let path = path.trim_end_matches('/');
            let path = if path.is_empty() { "/" } else { path };
            check_fs_path(path).map_err(|why| CapabilityError::BadPath { given: given(), why })?;
            return Ok(Capability::Fs { path: path.to_string(), access });
        }
        if let Some(rest) = s.strip_prefix("net:") {
            return HostPattern::parse(rest).map(Capability::Net);
        }
        if let Some(rest) = s.strip_prefix("secret:") {
            let (name, host) = rest.split_once('@').ok_or_else(|| CapabilityError::BadSecret { given: given() })?;
            let host = HostPattern::parse(host)?;
            if host.is_wildcard() {
                return Err(CapabilityError::WildcardSecret { given: given() });
            }
            return Ok(Capability::Secret { name: name.to_string(), host });
        }
        Err(CapabilityError::Unknown { given: given() })
    }
}

/// Where a plugin was found. Later scopes override earlier ones by plugin name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Compiled into the binary.
    Bundled,
    /// `$TALARIA_HOME/plugins`.
    User,
    /// `<project>/.talaria/plugins`, only for projects the user trusted.
    Project(PathBuf),
}

impl Scope {
    /// The key this scope's grants are filed under.
    pub fn key(&self) -> String {
        match self {
            Scope::Bundled => "bundled".to_string(),
            Scope::User => "user".to_string(),
            Scope::Project(p) => format!("project:{}", p.display()),
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Scope::Bundled => "bundled",
            Scope::User => "user",
            Scope::Project(_) => "project",
        }
    }
}

/// `$TALARIA_HOME/grants.toml`: what the user granted, per scope and plugin, and which
/// projects they trust to bring plugins.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantFile {
    #[serde(default)]
    pub trusted_projects: Vec<PathBuf>,
    /// scope key -> plugin name -> granted capabilities.
    #[serde(default)]
    pub grants: BTreeMap<String, BTreeMap<String, PluginGrants>>,
    /// What the user accepted of each trusted project, by its path (see [`crate::pins`]).
    #[serde(default)]
    pub projects: BTreeMap<String, ProjectPins>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PluginGrants {
    pub granted: Vec<String>,
}

const GRANT_FILE_HEADER: &str = "# Capabilities granted to talaria plugins, and projects trusted to bring plugins.\n\
# Managed by `talaria plugins grant|revoke` and `talaria trust`; edits by hand are kept.\n\n";

impl GrantFile {
    /// Read the file; a missing file is an empty one.
    ///
    /// # Errors
    /// Unreadable or malformed, with the path.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        crate::fsutil::load_toml(path)
    }

    /// Write atomically (temp file and rename), readable only by the user.
    ///
    /// # Errors
    /// The directory or file cannot be written.
    pub fn save(&self, path: &Path) -> Result<(), FileError> {
        crate::fsutil::save_toml(path, GRANT_FILE_HEADER, self)
    }

    /// The grants recorded for a plugin, or `None` when the user never changed them.
    pub fn recorded(&self, scope: &Scope, plugin: &str) -> Option<Vec<Capability>> {
        let entry = self.grants.get(&scope.key())?.get(plugin)?;
        Some(entry.granted.iter().filter_map(|s| s.parse().ok()).collect())
    }

    /// Replace a plugin's grants.
    pub fn record(&mut self, scope: &Scope, plugin: &str, caps: &[Capability]) {
        let granted = caps.iter().map(ToString::to_string).collect();
        self.grants.entry(scope.key()).or_default().insert(plugin.to_string(), PluginGrants { granted });
    }

    pub fn is_trusted(&self, project: &Path) -> bool {
        self.trusted_projects.iter().any(|p| p == project)
    }

    /// What the user accepted of a trusted project when they last reviewed it.
    pub fn project_pins(&self, project: &Path) -> Option<&ProjectPins> {
        self.projects.get(&project.display().to_string())
    }

    /// Trust `project` with exactly `pins`.
    pub fn set_project_pins(&mut self, project: &Path, pins: ProjectPins) {
        if !self.is_trusted(project) {
            self.trusted_projects.push(project.to_path_buf());
        }
        self.projects.insert(project.display().to_string(), pins);
    }

    /// Stop trusting `project`.
    pub fn untrust(&mut self, project: &Path) {
        self.trusted_projects.retain(|p| p != project);
        self.projects.remove(&project.display().to_string());
    }
}

/// What a plugin may actually use: the granted capabilities that its manifest requests.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    pub caps: Vec<Capability>,
    /// Recorded grants the manifest no longer requests (ignored; shown by `plugins info`).
    pub ignored: Vec<Capability>,
}

impl Grants {
    /// Intersect what the user granted with what the manifest requests.
    pub fn effective(requested: &[Capability], granted: Vec<Capability>) -> Self {
        let (caps, ignored) = granted.into_iter().partition(|g| requested.iter().any(|r| r.covers(g)));
        Self { caps, ignored }
    }

    pub fn has_process(&self) -> bool {
        self.caps.contains(&Capability::Process)
    }

    /// Whether an instance depends on the workspace it was made for: it has a directory of the
    /// workspace preopened, or its commands run there. An instance of any other plugin serves
    /// every workspace alike.
    pub fn bound_to_workspace(&self) -> bool {
        self.caps.iter().any(|c| match c {
            Capability::Fs { path, .. } => path.starts_with(WORKSPACE_VAR),
            Capability::Process => true,
            Capability::Net(_) | Capability::Secret { .. } | Capability::Kv | Capability::Llm => false,
        })
    }

    pub fn has_kv(&self) -> bool {
        self.caps.contains(&Capability::Kv)
    }

    pub fn has_llm(&self) -> bool {
        self.caps.contains(&Capability::Llm)
    }

    /// Network patterns granted.
    pub fn network(&self) -> impl Iterator<Item = &HostPattern> {
        self.caps.iter().filter_map(|c| match c {
            Capability::Net(p) => Some(p),
            _ => None,
        })
    }

    /// The host a granted secret may be sent to.
    pub fn secret_host(&self, name: &str) -> Option<&HostPattern> {
        self.caps.iter().find_map(|c| match c {
            Capability::Secret { name: n, host } if n == name => Some(host),
            _ => None,
        })
    }

    /// Every host secret `name` is granted for (a manifest may request one secret for several
    /// hosts: Discord's token goes to its API and to its gateway).
    pub fn secret_hosts<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a HostPattern> + 'a {
        self.caps.iter().filter_map(move |c| match c {
            Capability::Secret { name: n, host } if n == name => Some(host),
            _ => None,
        })
    }

    /// Directories to preopen, with `$WORKSPACE` replaced by `workspace` and `$PLUGIN_DATA` by
    /// `plugin_data`.
    pub fn dirs(&self, workspace: &Path, plugin_data: &Path) -> Vec<GrantedDir> {
        let expand = |root: &Path, rest: &str| match rest.trim_start_matches('/') {
            "" => root.to_path_buf(),
            rest => root.join(rest),
        };
        self.caps
            .iter()
            .filter_map(|c| match c {
                Capability::Fs { path, access } => {
                    let (path, plugin_data) = if let Some(rest) = path.strip_prefix(WORKSPACE_VAR) {
                        (expand(workspace, rest), false)
                    } else if let Some(rest) = path.strip_prefix(PLUGIN_DATA_VAR) {
                        (expand(plugin_data, rest), true)
                    } else {
                        (PathBuf::from(path), false)
                    };
                    Some(GrantedDir { path, access: *access, plugin_data })
                }
                Capability::Net(_)
                | Capability::Secret { .. }
                | Capability::Process
                | Capability::Kv
                | Capability::Llm => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(s: &str) -> Capability {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn capabilities_round_trip_through_text() {
        for s in [
            "fs:ro:/data",
            "fs:rw:$WORKSPACE",
            "net:*",
            "net:*.example.com:443",
            "net:[::1]:8080",
            "secret:KEY@api.x.com",
            "process",
            "kv",
            "llm",
            "fs:rw:$PLUGIN_DATA",
            "fs:ro:$PLUGIN_DATA/index",
        ] {
            assert_eq!(cap(s).to_string(), s);
        }
    }

    #[test]
    fn bad_capabilities_say_why() {
        let err = |s: &str| s.parse::<Capability>().expect_err(s);
        let given = |s: &str| s.to_string();
        let cases = [
            (
                "fs:/data",
                CapabilityError::BadAccess { given: given("fs:/data") },
                "`fs:/data`: write fs:ro:PATH or fs:rw:PATH",
            ),
            (
                "fs:ro:data",
                CapabilityError::BadPath { given: given("fs:ro:data"), why: FsPathError::Unanchored },
                "`fs:ro:data`: the path must be absolute or start with $WORKSPACE or $PLUGIN_DATA",
            ),
            (
                "net:http://x",
                CapabilityError::NotAHost { given: given("http://x") },
                "`http://x` must be a host with an optional port, without scheme or path",
            ),
            (
                "net:x:99999",
                CapabilityError::BadPort { given: given("x:99999"), port: given("99999") },
                "`x:99999`: `99999` is not a port number",
            ),
            ("net:[::1", CapabilityError::UnclosedBracket { given: given("[::1") }, "`[::1`: unclosed `[`"),
            (
                "net:a_b",
                CapabilityError::BadHost { given: given("a_b") },
                "`a_b` is not a host name, IP address or wildcard",
            ),
            (
                "secret:KEY",
                CapabilityError::BadSecret { given: given("secret:KEY") },
                "`secret:KEY`: write secret:NAME@HOST",
            ),
            (
                "secret:KEY@*",
                CapabilityError::WildcardSecret { given: given("secret:KEY@*") },
                "`secret:KEY@*`: a secret must name the one host it is sent to",
            ),
            (
                " root ",
                CapabilityError::Unknown { given: given("root") },
                "`root` is not a capability; capabilities are fs:ro:PATH, fs:rw:PATH, net:HOST[:PORT], secret:NAME@HOST, process, kv, llm",
            ),
            (
                "fs:ro:$PLUGIN_DATAX",
                CapabilityError::BadPath { given: given("fs:ro:$PLUGIN_DATAX"), why: FsPathError::Unanchored },
                "`fs:ro:$PLUGIN_DATAX`: the path must be absolute or start with $WORKSPACE or $PLUGIN_DATA",
            ),
            (
                "fs:ro:$PLUGIN_DATA/../x",
                CapabilityError::BadPath { given: given("fs:ro:$PLUGIN_DATA/../x"), why: FsPathError::Climbs },
                "`fs:ro:$PLUGIN_DATA/../x`: the path must not contain `..`",
            ),
        ];
        for (text, want, message) in cases {
            let got = err(text);
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string(), message, "{text}");
        }
    }

    #[test]
    fn host_patterns_match_destinations() {
        let p = HostPattern::parse("*.example.com").expect("parse");
        assert!(p.matches("api.example.com", 443));
        assert!(!p.matches("example.com", 443));
        assert!(!p.matches("evilexample.com", 443));
        let p = HostPattern::parse("127.0.0.1:8080").expect("parse");
        assert!(p.matches("127.0.0.1", 8080));
        assert!(!p.matches("127.0.0.1", 8081));
        assert!(HostPattern::parse("*").expect("parse").matches("anything", 1));
    }

    #[test]
    fn coverage_never_widens() {
        assert!(cap("net:*").covers(&cap("net:127.0.0.1:80")));
        assert!(cap("net:*.x.com").covers(&cap("net:a.x.com:443")));
        assert!(!cap("net:a.x.com").covers(&cap("net:*.x.com")));
        assert!(!cap("net:a.x.com:443").covers(&cap("net:a.x.com")));
        assert!(cap("fs:rw:$WORKSPACE").covers(&cap("fs:ro:$WORKSPACE/src")));
        assert!(!cap("fs:ro:$WORKSPACE").covers(&cap("fs:rw:$WORKSPACE")));
        assert!(!cap("fs:rw:/data").covers(&cap("fs:rw:/database")));
        assert!(!cap("process").covers(&cap("kv")));
        assert!(cap("llm").covers(&cap("llm")) && !cap("llm").covers(&cap("kv")));
        assert!(cap("fs:rw:$PLUGIN_DATA").covers(&cap("fs:ro:$PLUGIN_DATA/index")));
        assert!(!cap("fs:rw:$PLUGIN_DATA").covers(&cap("fs:rw:$WORKSPACE")));
    }

    #[test]
    fn effective_grants_are_the_intersection() {
        let requested = vec![cap("net:api.x.com"), cap("kv")];
        let g = Grants::effective(&requested, vec![cap("net:api.x.com"), cap("process")]);
        assert_eq!(g.caps, vec![cap("net:api.x.com")]);
        assert_eq!(g.ignored, vec![cap("process")]);
        assert!(!g.has_kv() && !g.has_process());
    }

    #[test]
    fn workspace_dirs_expand() {
        let g = Grants::effective(
            &[cap("fs:rw:$WORKSPACE"), cap("fs:rw:$PLUGIN_DATA"), cap("fs:ro:/data")],
            vec![cap("fs:rw:$WORKSPACE"), cap("fs:ro:$WORKSPACE/docs"), cap("fs:rw:$PLUGIN_DATA"), cap("fs:ro:/data")],
        );
        let dirs: Vec<(PathBuf, Access, bool)> = g
            .dirs(Path::new("/w"), Path::new("/h/plugin-data/p"))
            .into_iter()
            .map(|d| (d.path, d.access, d.plugin_data))
            .collect();
        assert_eq!(
            dirs,
            vec![
                (PathBuf::from("/w"), Access::ReadWrite, false),
                (PathBuf::from("/w/docs"), Access::Read, false),
                (PathBuf::from("/h/plugin-data/p"), Access::ReadWrite, true),
                (PathBuf::from("/data"), Access::Read, false),
            ]
        );
    }
}
