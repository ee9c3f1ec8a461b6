//! Where a plugin comes from, and fetching its bundle (and signature) from there.
//!
//! | written as | source |
//! |---|---|
//! | `./path/to/dir` (holding plugin.toml) | a local directory, packed on the fly (never signed) |
//! | `./hello-1.0.0.tar.gz` | a local bundle; `hello-1.0.0.tar.gz.sig` beside it is its signature |
//! | `https://host/hello-1.0.0.tar.gz` | a bundle on the web; `<url>.sig` is its signature |
//! | `NAME` or `NAME@REQ` | the newest matching version in the configured registry indexes |
//! | `registry+https://host/index.json#NAME` | the same, from one index (how the lockfile records it) |
//! | `oci://host/repo:tag` or `oci://host/repo@sha256:…` | an OCI artifact (see [`crate::oci`]) |
//!
//! Plain `http://` is accepted for loopback hosts only (a registry on this machine).
//!
//! Downloads go through [`crate::download`], which checks every redirect.

// An error is made once per fetch, so its size does not matter; its fields make the messages.
#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bundle::{self, PackError};
pub use crate::download::{FetchError, MAX_REDIRECTS, RedirectRefused, check_redirect, client, get, is_loopback};
use crate::download::{check_url, mib};
use crate::index::{Index, IndexError, IndexVersion, PickError};
use crate::oci::{self, OciError, OciRef};

/// Why a source could not be read or fetched. A message says what its cause said, so the cause
/// is not given again as the error's source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// `registry+...` without `#NAME`.
    #[error("`{spec}`: write registry+INDEX_URL#NAME")]
    BadRegistrySpec { spec: String },
    /// `NAME@REQ` whose REQ is not a version requirement.
    #[error("`{req}` is not a version requirement (like 1.2, ^1.2.0 or =1.2.3): {error}")]
    BadVersionReq { req: String, error: semver::Error },
    /// Not a plugin name.
    #[error("plugin name {0}")]
    BadName(talaria_runtime::NameError),
    /// A path that is not there.
    #[error("{spec}: no such file or directory")]
    Missing { spec: String },
    /// A bare name, with no registry to look it up in.
    #[error(
        "`{spec}` is not a file or directory here, and no registry is configured to look it up in: \
         add `registries = [\"https://…/index.json\"]` under [marketplace] in config.toml, or pass --registry URL"
    )]
    NoRegistry { spec: String },
    /// A local file or directory cannot be read.
    #[error("{}: {error}", path.display())]
    Io { path: PathBuf, error: std::io::Error },
    /// A local bundle over the limit.
    #[error("{}: more than {} MiB, over the {} MiB limit for a plugin bundle", path.display(), mib(*size), mib(*max))]
    TooLarge { path: PathBuf, size: u64, max: u64 },
    /// A local directory cannot be packed.
    #[error(transparent)]
    Pack(#[from] PackError),
    /// A URL refused, or a download that failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// A registry index that cannot be fetched or read, or a URL in it that is not one.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// No configured index lists the name.
    #[error("no plugin named `{name}` in {}", indexes.join(", "))]
    NotListed { name: String, indexes: Vec<String> },
    /// The index lists the plugin, but no version of it fits.
    #[error("{name} in {index}: {error}")]
    NoVersion { name: String, index: String, error: PickError },
    /// An OCI reference that is not one, or a pull that failed.
    #[error(transparent)]
    Oci(#[from] OciError),
}

/// A plugin source, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Dir(PathBuf),
    File(PathBuf),
    Url(String),
    /// A name in a registry index; `index` is `None` until resolved against the configured ones.
    Registry {
        index: Option<String>,
        name: String,
        req: Option<semver::VersionReq>,
    },
    Oci(OciRef),
}

/// What fetching a source brought.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub bundle: Vec<u8>,
    /// The signature document, if the source has one.
    pub signature: Option<Vec<u8>>,
    /// The digest the source pins (a registry index does), checked before anything else.
    pub pinned_digest: Option<String>,
    /// The source as the lockfile records it (enough to fetch it again).
    pub source: String,
    /// What a registry index says of this version.
    pub listed: Option<(String, IndexVersion)>,
    /// Whether it came from this machine (a directory or a file).
    pub local: bool,
}

impl Source {
    /// Parse what the user wrote (or what a lockfile recorded).
    ///
    /// # Errors
    /// A malformed URL ([`SourceError::Fetch`]), reference ([`SourceError::Oci`]) or version
    /// requirement, a path that is not there ([`SourceError::Missing`]), or a bare name when no
    /// registry is configured ([`SourceError::NoRegistry`]).
    pub fn parse(spec: &str, registries: &[String]) -> Result<Self, SourceError> {
        let spec = spec.trim();
        if spec.starts_with("oci://") {
            return Ok(Source::Oci(spec.parse::<OciRef>()?));
        }
        if let Some(rest) = spec.strip_prefix("registry+") {
            let (index, name) =
                rest.rsplit_once('#').ok_or_else(|| SourceError::BadRegistrySpec { spec: spec.to_string() })?;
            check_url(index)?;
            let (name, req) = split_name(name)?;
            return Ok(Source::Registry { index: Some(index.to_string()), name, req });
        }
        if spec.starts_with("https://") || spec.starts_with("http://") {
            check_url(spec)?;
            return Ok(Source::Url(spec.to_string()));
        }
        let path = Path::new(spec);
        if path.is_dir() {
            return Ok(Source::Dir(absolute(path)?));
        }
        if path.is_file() {
            return Ok(Source::File(absolute(path)?));
        }
        let looks_like_path = spec.contains('/') || spec.ends_with(".gz") || spec.starts_with('.');
        if looks_like_path {
            return Err(SourceError::Missing { spec: spec.to_string() });
        }
        let (name, req) = split_name(spec)?;
        if registries.is_empty() {
            return Err(SourceError::NoRegistry { spec: spec.to_string() });
        }
        Ok(Source::Registry { index: None, name, req })
    }

    /// The plugin name the source promises, if it names one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Source::Registry { name, .. } => Some(name),
            _ => None,
        }
    }
}

fn absolute(path: &Path) -> Result<PathBuf, SourceError> {
    path.canonicalize().map_err(|error| SourceError::Io { path: path.to_path_buf(), error })
}

/// `NAME` or `NAME@REQ`.
fn split_name(spec: &str) -> Result<(String, Option<semver::VersionReq>), SourceError> {
    let (name, req) = match spec.split_once('@') {
        Some((n, r)) => {
            let req = semver::VersionReq::parse(r)
                .map_err(|error| SourceError::BadVersionReq { req: r.to_string(), error })?;
            (n, Some(req))
        }
        None => (spec, None),
    };
    talaria_runtime::check_name(name).map_err(SourceError::BadName)?;
    Ok((name.to_string(), req))
}

/// The signature beside a bundle at `url`, if there is one.
async fn get_signature(http: &reqwest::Client, url: &str) -> Result<Option<Vec<u8>>, FetchError> {
    match get(http, &format!("{url}.sig"), 64 * 1024, &|_, _| {}).await {
        Ok(sig) => Ok(Some(sig)),
        Err(FetchError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Options for fetching.
pub struct FetchOptions<'a> {
    pub registries: &'a [String],
    pub max_bundle_bytes: u64,
    pub progress: &'a (dyn Fn(u64, Option<u64>) + Send + Sync),
}

/// What the lockfile records for a registry source.
pub fn registry_source(index: &str, name: &str) -> String {
    format!("registry+{index}#{name}")
}

impl Source {
    /// Fetch the bundle, its signature and what the source says about it.
    ///
    /// # Errors
    /// Whatever stopped it, naming the source.
    pub async fn fetch(&self, options: &FetchOptions<'_>) -> Result<Fetched, SourceError> {
        let max = options.max_bundle_bytes;
        match self {
            Source::Dir(dir) => {
                let (bytes, _) = bundle::pack(dir)?;
                Ok(Fetched {
                    bundle: bytes,
                    signature: None,
                    pinned_digest: None,
                    source: dir.display().to_string(),
                    listed: None,
                    local: true,
                })
            }
            Source::File(path) => {
                let io = |error| SourceError::Io { path: path.clone(), error };
                let len = std::fs::metadata(path).map_err(io)?.len();
                if len > max {
                    return Err(SourceError::TooLarge { path: path.clone(), size: len, max });
                }
                let bundle = std::fs::read(path).map_err(io)?;
                let sig_path = PathBuf::from(format!("{}.sig", path.display()));
                let signature = match std::fs::read(&sig_path) {
                    Ok(sig) => Some(sig),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(error) => return Err(SourceError::Io { path: sig_path, error }),
                };
                Ok(Fetched {
                    bundle,
                    signature,
                    pinned_digest: None,
                    source: path.display().to_string(),
                    listed: None,
                    local: true,
                })
            }
            Source::Url(url) => {
                let http = client()?;
                let bundle = get(&http, url, max, options.progress).await?;
                let signature = get_signature(&http, url).await?;
                Ok(Fetched { bundle, signature, pinned_digest: None, source: url.clone(), listed: None, local: false })
            }
            Source::Registry { index, name, req } => {
                let http = client()?;
                let (index_url, version) =
                    resolve(&http, index.as_deref(), options.registries, name, req.as_ref()).await?;
                let url = version.download_url(&index_url)?;
                let bundle = get(&http, &url, max, options.progress).await?;
                let signature = match (&version.signature, &version.signature_url) {
                    (Some(inline), _) => Some(inline.to_json().into_bytes()),
                    (None, Some(sig_url)) => {
                        let sig_url = crate::index::join_url(&index_url, sig_url)?;
                        Some(get(&http, &sig_url, 64 * 1024, &|_, _| {}).await?)
                    }
                    (None, None) => None,
                };
                Ok(Fetched {
                    bundle,
                    signature,
                    pinned_digest: Some(version.digest.clone()),
                    source: registry_source(&index_url, name),
                    listed: Some((name.clone(), version)),
                    local: false,
                })
            }
            Source::Oci(reference) => {
                crate::install_crypto();
                let pulled = oci::pull(reference, max).await?;
                Ok(Fetched {
                    bundle: pulled.bundle,
                    signature: pulled.signature,
                    pinned_digest: None,
                    source: reference.to_string(),
                    listed: None,
                    local: false,
                })
            }
        }
    }
}

/// Find `name` in the index (or the first configured index that lists it) and pick its newest
/// version matching `req` that this host can run.
///
/// # Errors
/// An index cannot be fetched or read ([`SourceError::Index`]), no index lists it
/// ([`SourceError::NotListed`]), or no version fits ([`SourceError::NoVersion`]).
pub async fn resolve(
    http: &reqwest::Client,
    index: Option<&str>,
    registries: &[String],
    name: &str,
    req: Option<&semver::VersionReq>,
) -> Result<(String, IndexVersion), SourceError> {
    let candidates: Vec<String> = match index {
        Some(i) => vec![i.to_string()],
        None => registries.to_vec(),
    };
    for index_url in &candidates {
        let parsed = Index::fetch(http, index_url).await?;
        if let Some(entry) = parsed.plugin(name) {
            let version = entry.pick(req).map_err(|error| SourceError::NoVersion {
                name: name.to_string(),
                index: index_url.clone(),
                error,
            })?;
            return Ok((index_url.clone(), version.clone()));
        }
    }
    Err(SourceError::NotListed { name: name.to_string(), indexes: candidates })
}

/// How `talaria plugins search` shows one match.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchHit {
    pub index: String,
    pub name: String,
    pub description: String,
    pub latest: IndexVersion,
}

/// Plugins in the configured indexes whose name or description contains `query` (all of them
/// for an empty query), each with its newest version this host can run.
///
/// # Errors
/// An index cannot be fetched or parsed.
pub async fn search(registries: &[String], query: &str) -> Result<Vec<SearchHit>, SourceError> {
    let http = client()?;
    let query = query.to_lowercase();
    let mut hits = Vec::new();
    for index_url in registries {
        let index = Index::fetch(&http, index_url).await?;
        for plugin in &index.plugins {
            let matches = query.is_empty()
                || plugin.name.to_lowercase().contains(&query)
                || plugin.description.to_lowercase().contains(&query);
            if matches && let Ok(latest) = plugin.pick(None) {
                hits.push(SearchHit {
                    index: index_url.clone(),
                    name: plugin.name.clone(),
                    description: plugin.description.clone(),
                    latest: latest.clone(),
                });
            }
        }
    }
    Ok(hits)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is the test failing
mod tests {
    use super::*;

    #[test]
    fn sources_parse() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.tar.gz");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(
            Source::parse(dir.path().to_str().unwrap(), &[]).unwrap(),
            Source::Dir(dir.path().canonicalize().unwrap())
        );
        assert_eq!(Source::parse(file.to_str().unwrap(), &[]).unwrap(), Source::File(file.canonicalize().unwrap()));
        assert_eq!(
            Source::parse("https://example.com/x.tar.gz", &[]).unwrap(),
            Source::Url("https://example.com/x.tar.gz".into())
        );
        assert!(Source::parse("http://127.0.0.1:8080/x.tar.gz", &[]).is_ok());
        assert!(
            Source::parse("http://example.com/x.tar.gz", &[]).unwrap_err().to_string().contains("only to this machine")
        );
        assert!(Source::parse("ftp://example.com/x", &[]).is_err());
        let regs = vec!["https://plugins.example.com/index.json".to_string()];
        assert_eq!(
            Source::parse("weather@^1.2", &regs).unwrap(),
            Source::Registry { index: None, name: "weather".into(), req: Some("^1.2".parse().unwrap()) }
        );
        let err = |spec: &str, registries: &[String]| Source::parse(spec, registries).unwrap_err().to_string();
        assert!(err("weather", &[]).contains("no registry is configured"));
        // Skills install matches on this to say where skills come from instead.
        assert!(matches!(Source::parse("weather", &[]), Err(SourceError::NoRegistry { .. })));
        assert!(err("Weather!", &regs).contains("plugin name"));
        assert!(err("weather@latest", &regs).contains("not a version requirement"));
        assert!(err("./missing.tar.gz", &regs).contains("no such file"));
        assert_eq!(
            Source::parse("registry+https://r.example/index.json#weather", &[]).unwrap(),
            Source::Registry { index: Some("https://r.example/index.json".into()), name: "weather".into(), req: None }
        );
        assert!(matches!(Source::parse("oci://127.0.0.1:5000/plugins/weather:1.0.0", &[]), Ok(Source::Oci(_))));
    }

    #[test]
    fn every_redirect_hop_is_checked() {
        let url = |s: &str| reqwest::Url::parse(s).unwrap();
        let hop = |origin: &str, from: &str, to: &str| {
            check_redirect(&url(origin), &url(from), &url(to)).map_err(|e| e.to_string())
        };
        let local = "http://127.0.0.1:8080/x";
        let remote = "https://example.org/x";
        assert_eq!(hop(remote, remote, "https://cdn.example.net/x"), Ok(()));
        assert_eq!(hop(local, local, "http://[::1]:9000/y"), Ok(()));
        assert_eq!(hop(local, local, "http://localhost:9000/y"), Ok(()));
        assert_eq!(hop(local, local, "https://cdn.example.net/x"), Ok(()));
        assert_eq!(hop(local, local, "https://10.0.0.7/x"), Ok(()));
        assert_eq!(
            hop(local, local, "http://example.org/x"),
            Err("redirect from http://127.0.0.1:8080/x to http://example.org/x refused: plain http is only allowed to loopback addresses".into())
        );
        assert_eq!(
            hop(local, "https://cdn.example.net/x", "http://10.0.0.7/x"),
            Err("redirect from https://cdn.example.net/x to http://10.0.0.7/x refused: plain http is only allowed to loopback addresses".into())
        );
        assert_eq!(
            hop(remote, remote, "http://example.net/x"),
            Err("redirect from https://example.org/x to http://example.net/x refused: plain http is only allowed to loopback addresses".into())
        );
        for (to, kind) in [
            ("http://127.0.0.1:8080/x", "loopback"),
            ("https://localhost/x", "loopback"),
            ("https://api.localhost/x", "loopback"),
            ("https://[::ffff:7f00:1]/x", "loopback"),
            ("https://[64:ff9b::a9fe:a9fe]/latest", "link-local"),
            ("https://169.254.169.254/latest", "link-local"),
            ("https://192.168.1.1/x", "private"),
            ("https://[2002:a00:1::]/x", "private"),
        ] {
            assert_eq!(
                hop(remote, remote, to),
                Err(format!(
                    "redirect from https://example.org/x to {to} refused: a download from example.org may not be sent to a {kind} address"
                )),
            );
        }
        assert_eq!(
            hop(remote, remote, "ftp://example.org/x"),
            Err("redirect from https://example.org/x to ftp://example.org/x refused: `ftp:` URLs are not followed; only https".into())
        );
    }

    #[tokio::test]
    async fn a_download_from_loopback_is_not_redirected_to_a_plain_http_remote_host() {
        let server = talaria_test_support::FakeServer::start(|req| match req.path.as_str() {
            "/away" => (302, vec![("location".into(), "http://example.org/x.tar.gz".into())], String::new()),
            _ => match req.path.strip_prefix("/hop/").and_then(|n| n.parse::<u32>().ok()) {
                Some(n) => (302, vec![("location".into(), format!("/hop/{}", n + 1))], String::new()),
                None => (404, vec![], String::new()),
            },
        });
        let http = client().unwrap();
        let away = format!("http://{}/away", server.addr);
        let err = get(&http, &away, 1024, &|_, _| {}).await.unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{away}: redirect from {away} to http://example.org/x.tar.gz refused: plain http is only allowed to loopback addresses"
            )
        );
        let hops = format!("http://{}/hop/0", server.addr);
        let err = get(&http, &hops, 1024, &|_, _| {}).await.unwrap_err().to_string();
        let (tenth, eleventh) = (format!("http://{}/hop/10", server.addr), format!("http://{}/hop/11", server.addr));
        assert_eq!(err, format!("{hops}: redirect from {tenth} to {eleventh} refused: more than 10 redirects"));
        assert!(server.received().iter().all(|r| r.path != "/hop/11"), "the eleventh redirect was not followed");

        // Loopback to loopback over plain http is followed.
        let other = talaria_test_support::FakeServer::start(|_| (200, vec![], "from the other".into()));
        let to_other = format!("http://127.0.0.1:{}/bundle", other.addr.port());
        let hop = talaria_test_support::FakeServer::start(move |_| {
            (301, vec![("location".into(), to_other.clone())], String::new())
        });
        let body = get(&http, &format!("http://{}/x", hop.addr), 1024, &|_, _| {}).await.unwrap();
        assert_eq!(body, b"from the other");
    }
}
