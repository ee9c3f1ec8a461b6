//! Plugin bundles in an OCI registry.
//!
//! A plugin is stored as an OCI artifact: an image manifest with artifact type [`ARTIFACT_TYPE`],
//! a config blob of [`CONFIG_MEDIA_TYPE`] (a small JSON document describing the plugin: name,
//! version, api, kinds, requested capabilities, description), exactly one layer of
//! [`BUNDLE_MEDIA_TYPE`] (the bundle, a gzip'd tar) and at most one of [`SIGNATURE_MEDIA_TYPE`]
//! (the publisher's signature, a small JSON document). Anything else is refused as "not a
//! talaria plugin". The distribution protocol itself is oci-client's.
//!
//! References are written `oci://HOST[:PORT]/PATH/REPO[:TAG]` or `oci://HOST/REPO@sha256:HEX`
//! ([`OciRef`]); the tag defaults to `latest`.
//!
//! - **Protocol**: https, always, except for loopback hosts (`127.x.y.z`, `localhost`, `[::1]`),
//!   which are spoken to in plain http so a registry on this machine (a test registry, a local
//!   cache) works. Nothing else can be reached over http. Server certificates are checked against
//!   the system trust store; the process must have installed a rustls crypto provider.
//! - **Auth**: anonymous, unless both `TALARIA_OCI_USERNAME` and `TALARIA_OCI_PASSWORD` are set:
//!   then HTTP basic auth, or the bearer-token exchange when the registry asks for one (what
//!   Docker Hub, GHCR and most hosted registries do; a personal access token works as the
//!   password). Setting only one of the two is an error.
//! - **Integrity**: every blob is checked against the digest and size its manifest declares, and
//!   the manifest against the `@sha256:` digest of the reference when there is one. A bundle whose
//!   declared size is over the caller's limit is refused before it is downloaded; the config and
//!   signature are limited to [`MAX_CONFIG_BYTES`] and [`MAX_SIGNATURE_BYTES`].
//!
//! oci-client reads a manifest (and a tag list) whole, without a size limit, and reqwest follows
//! redirects (a blob may be served from another host, as registries backed by object storage
//! do); what arrives is still checked against the digests above.
//!
//! ```no_run
//! # async fn example() -> Result<(), talaria_market::oci::OciError> {
//! use talaria_market::oci::{self, OciRef};
//!
//! let reference: OciRef = "oci://ghcr.io/acme/talaria-weather:1.2.0".parse()?;
//! let pulled = oci::pull(&reference, 50 * 1024 * 1024).await?;
//! println!("{} byte bundle, manifest {}", pulled.bundle.len(), pulled.manifest_digest);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use reqwest::Url;
use reqwest::header::HeaderValue;
use sha2::Digest as _;

/// Media type of the bundle layer (a gzip'd tar).
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.talaria.plugin.bundle.v1.tar+gzip";
/// Media type of the optional signature layer (a JSON document).
pub const SIGNATURE_MEDIA_TYPE: &str = "application/vnd.talaria.plugin.signature.v1+json";
/// Media type of the config blob (a JSON document describing the plugin).
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.talaria.plugin.config.v1+json";
/// The manifest's `artifactType` (OCI image spec 1.1).
pub const ARTIFACT_TYPE: &str = "application/vnd.talaria.plugin.v1";

/// The largest config blob [`pull`] accepts.
pub const MAX_CONFIG_BYTES: u64 = 64 * 1024;
/// The largest signature blob [`pull`] accepts.
pub const MAX_SIGNATURE_BYTES: u64 = 64 * 1024;

/// With this and [`PASSWORD_ENV`] set, registries are spoken to with these credentials.
pub const USERNAME_ENV: &str = "TALARIA_OCI_USERNAME";
/// See [`USERNAME_ENV`].
pub const PASSWORD_ENV: &str = "TALARIA_OCI_PASSWORD";

const USER_AGENT: &str = concat!("talaria/", env!("CARGO_PKG_VERSION"));
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Never reserve more than this up front, whatever a manifest declares.
const MAX_PREALLOCATION: u64 = 8 * 1024 * 1024;
/// Tags asked for per page, and the most tags [`tags`] collects.
const TAGS_PER_PAGE: usize = 1000;
const MAX_TAGS: usize = 100_000;

/// Where a plugin lives in an OCI registry: `oci://HOST[:PORT]/PATH/REPO[:TAG]` or
/// `oci://HOST[:PORT]/PATH/REPO@sha256:HEX` (a tag defaults to `latest`).
///
/// The first path segment is always the registry host (there is no implicit Docker Hub).
///
/// ```
/// use talaria_market::oci::OciRef;
///
/// let r: OciRef = "oci://127.0.0.1:5000/plugins/weather".parse().unwrap();
/// assert_eq!((r.host(), r.repository(), r.tag()), ("127.0.0.1:5000", "plugins/weather", Some("latest")));
/// assert_eq!(r.scheme(), "http");
/// assert_eq!(r.to_string(), "oci://127.0.0.1:5000/plugins/weather:latest");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OciRef {
    host: String,
    repository: String,
    tag: Option<String>,
    digest: Option<String>,
    loopback: bool,
}

impl OciRef {
    /// The registry, `host[:port]`.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The repository path inside the registry, e.g. `acme/weather`.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag: `latest` unless another was written; `None` for a `@digest` reference without one.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The pinned manifest digest (`sha256:<hex>`), if the reference has one.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// `http` for loopback hosts, `https` for every other.
    pub fn scheme(&self) -> &'static str {
        if self.loopback { "http" } else { "https" }
    }

    /// `oci://HOST/REPO`, without tag or digest.
    fn repository_ref(&self) -> String {
        format!("oci://{}/{}", self.host, self.repository)
    }

    fn to_reference(&self) -> Reference {
        let (host, repository) = (self.host.clone(), self.repository.clone());
        match (&self.tag, &self.digest) {
            (Some(tag), Some(digest)) => Reference::with_tag_and_digest(host, repository, tag.clone(), digest.clone()),
            (None, Some(digest)) => Reference::with_digest(host, repository, digest.clone()),
            (Some(tag), None) => Reference::with_tag(host, repository, tag.clone()),
            (None, None) => Reference::with_tag(host, repository, "latest".to_string()),
        }
    }

    fn protocol(&self) -> ClientProtocol {
        if self.loopback { ClientProtocol::HttpsExcept(vec![self.host.clone()]) } else { ClientProtocol::Https }
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.host, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

const REFERENCE_FORM: &str = "write oci://HOST/REPO[:TAG] or oci://HOST/REPO@sha256:DIGEST";

impl FromStr for OciRef {
    type Err = OciError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let bad = |problem: String| OciError::BadReference { input: input.to_string(), problem };
        let Some(rest) = input.strip_prefix("oci://") else {
            return Err(bad(format!("is not an OCI reference: {REFERENCE_FORM}")));
        };
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() {
            return Err(bad(format!("has no registry host: {REFERENCE_FORM}")));
        }
        let loopback = loopback_host(host).ok_or_else(|| {
            bad(format!(
                "has an invalid registry host `{host}`: a host is NAME, NAME:PORT, an IP address or [IPv6]:PORT"
            ))
        })?;
        // A repository path must have a name before any tag or digest.
        if path.is_empty() || path.starts_with([':', '@']) {
            return Err(bad("has no repository: write oci://HOST/REPO[:TAG]".to_string()));
        }
        // oci-spec's reference grammar checks the path, tag and digest; a placeholder domain keeps
        // its Docker Hub defaults (`library/`, a domain guessed from the path) out of it. Its `\w`
        // in tags is Unicode-aware, hence the ASCII check.
        let parsed = match path.is_ascii() {
            true => Reference::try_from(format!("registry.invalid/{path}")),
            false => Err(oci_client::ParseError::ReferenceInvalidFormat),
        };
        let parsed = parsed.map_err(|e| {
            bad(format!(
                "has an invalid repository, tag or digest ({e}): repository paths are lowercase \
                 [a-z0-9] words joined by `.`, `_`, `-` and `/`; tags are up to 128 of [A-Za-z0-9_.-]; \
                 digests are sha256:<64 hex digits>"
            ))
        })?;
        if parsed.registry() != "registry.invalid" {
            return Err(bad(format!("has an invalid repository: {REFERENCE_FORM}")));
        }
        Ok(OciRef {
            host: host.to_ascii_lowercase(),
            repository: parsed.repository().to_string(),
            tag: parsed.tag().map(str::to_string),
            digest: parsed.digest().map(str::to_string),
            loopback,
        })
    }
}

/// `Some(is_loopback)` for a valid `host[:port]`, `None` for anything else.
fn loopback_host(host: &str) -> Option<bool> {
    if host.contains(|c: char| matches!(c, '@' | '?' | '#' | '\\' | '%') || c.is_whitespace()) {
        return None;
    }
    let url = Url::parse(&format!("https://{host}/")).ok()?;
    if url.path() != "/" || !url.username().is_empty() || url.password().is_some() {
        return None;
    }
    // The parsed form: `127.1` and `0x7f.0.0.1` are `127.0.0.1`, IPv6 keeps its brackets.
    let name = url.host_str()?;
    match name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        Ok(ip) => Some(ip.is_loopback()),
        Err(_) => Some(name == "localhost"),
    }
}

/// A plugin pulled from a registry, every part checked against its digest.
#[derive(Clone, PartialEq, Eq)]
pub struct Pulled {
    /// The bundle (a gzip'd tar).
    pub bundle: Vec<u8>,
    /// The signature document, if the artifact has one.
    pub signature: Option<Vec<u8>>,
    /// The config document (JSON; not interpreted here).
    pub config: Vec<u8>,
    /// The manifest's digest, `sha256:<hex>`: pin it with `oci://HOST/REPO@DIGEST`.
    pub manifest_digest: String,
}

impl fmt::Debug for Pulled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pulled")
            .field("bundle", &format_args!("{} bytes", self.bundle.len()))
            .field("signature", &self.signature.as_ref().map(|s| format!("{} bytes", s.len())))
            .field("config", &String::from_utf8_lossy(&self.config))
            .field("manifest_digest", &self.manifest_digest)
            .finish()
    }
}

/// What went wrong talking to an OCI registry, and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The reference could not be parsed (or cannot be used for this operation).
    #[error("`{input}` {problem}")]
    BadReference { input: String, problem: String },
    /// Only one of the credential variables is set.
    #[error("{set} is set but {missing} is not: set both to log in to registries, or neither to use them anonymously")]
    HalfCredentials { set: &'static str, missing: &'static str },
    /// The HTTPS client could not be built.
    #[error("could not set up the registry client: {0}")]
    Client(String),
    /// The registry could not be reached (connection refused, TLS failure, timeout).
    #[error("{reference}: could not reach the registry over {scheme}: {detail}")]
    Unreachable { reference: String, scheme: &'static str, detail: String },
    /// The repository, tag or digest does not exist.
    #[error("{reference} was not found: check the host, repository and tag (or digest)")]
    NotFound { reference: String },
    /// The registry wants (other) credentials.
    #[error("{reference}: the registry refused access ({detail}); {}", auth_hint(.anonymous))]
    Unauthorized { reference: String, anonymous: bool, detail: String },
    /// The artifact is something other than a talaria plugin.
    #[error(
        "{reference}: not a talaria plugin ({found}); a plugin has one {BUNDLE_MEDIA_TYPE} layer, at most one \
         {SIGNATURE_MEDIA_TYPE} layer and a {CONFIG_MEDIA_TYPE} config"
    )]
    NotAPlugin { reference: String, found: String },
    /// A part is declared larger than allowed; nothing of it was downloaded.
    #[error("{reference}: the {what} is {size} bytes, over the limit of {limit} bytes; it was not downloaded")]
    TooLarge { reference: String, what: &'static str, size: u64, limit: u64 },
    /// A part's content does not match its digest.
    #[error(
        "{reference}: the {what} does not match its digest (expected {expected}, got {actual}): the registry \
         served damaged or tampered content; do not use it"
    )]
    DigestMismatch { reference: String, what: &'static str, expected: String, actual: String },
    /// A part's length differs from the size its manifest declares.
    #[error(
        "{reference}: the {what} should be {declared} bytes (as the manifest says) but the registry sent {received}: \
         damaged or tampered content; do not use it"
    )]
    SizeMismatch { reference: String, what: &'static str, declared: u64, received: u64 },
    /// The config given to [`push`] is not a JSON document.
    #[error(
        "the plugin config is not JSON ({0}): it is a JSON document with name, version, api, kinds, capabilities and description"
    )]
    BadConfig(String),
    /// Any other failure the registry reported.
    #[error("{reference}: {detail}")]
    Registry { reference: String, detail: String },
}

fn auth_hint(anonymous: &bool) -> String {
    if *anonymous {
        format!("if it needs a login, set {USERNAME_ENV} and {PASSWORD_ENV}")
    } else {
        format!("check {USERNAME_ENV} and {PASSWORD_ENV}, and that this account may use the repository")
    }
}

/// Pull the plugin at `reference`: its bundle, signature (if any) and config.
///
/// # Errors
/// [`OciError::NotFound`] if the repository or tag does not exist, [`OciError::NotAPlugin`] if
/// the manifest is not a talaria plugin's, [`OciError::TooLarge`] (before downloading) if the
/// bundle is declared larger than `max_bundle_bytes`, [`OciError::DigestMismatch`] or
/// [`OciError::SizeMismatch`] if what arrives is not what the manifest declares, and the
/// connection and credential errors of [`OciError`].
pub async fn pull(reference: &OciRef, max_bundle_bytes: u64) -> Result<Pulled, OciError> {
    let session = Session::open(reference, RegistryOperation::Pull).await?;
    let (manifest, manifest_digest) =
        session.client.pull_manifest(&session.image, &session.auth).await.map_err(|e| session.error(e))?;
    let manifest = match manifest {
        OciManifest::Image(manifest) => manifest,
        OciManifest::ImageIndex(index) => {
            let found = format!("an image index of {} manifests", index.manifests.len());
            return Err(OciError::NotAPlugin { reference: reference.to_string(), found });
        }
    };
    let parts = Parts::of(reference, &manifest)?;
    // Every limit is checked before anything is downloaded.
    let config_size = session.declared_size(&manifest.config, "config", MAX_CONFIG_BYTES)?;
    let signature_size =
        parts.signature.map(|s| session.declared_size(s, "signature", MAX_SIGNATURE_BYTES)).transpose()?;
    let bundle_size = session.declared_size(parts.bundle, "bundle", max_bundle_bytes)?;

    let config = session.blob(&manifest.config, "config", config_size).await?;
    let signature = match (parts.signature, signature_size) {
        (Some(descriptor), Some(size)) => Some(session.blob(descriptor, "signature", size).await?),
        _ => None,
    };
    let bundle = session.blob(parts.bundle, "bundle", bundle_size).await?;
    Ok(Pulled { bundle, signature, config, manifest_digest })
}

/// Push a plugin to `reference` (which must name a tag) and return the manifest's digest
/// (`sha256:<hex>`). Blobs the repository already has are not uploaded again.
///
/// # Errors
/// [`OciError::BadConfig`] if `config` is not JSON, [`OciError::BadReference`] for a `@digest`
/// reference, and the connection, credential and registry errors of [`OciError`].
pub async fn push(
    reference: &OciRef,
    bundle: &[u8],
    signature: Option<&[u8]>,
    config: &[u8],
) -> Result<String, OciError> {
    let described: serde_json::Value =
        serde_json::from_slice(config).map_err(|e| OciError::BadConfig(e.to_string()))?;
    if reference.digest().is_some() {
        return Err(OciError::BadReference {
            input: reference.to_string(),
            problem: "names a digest, and a digest cannot be pushed to: push to a tag (oci://HOST/REPO:TAG)"
                .to_string(),
        });
    }
    let session = Session::open(reference, RegistryOperation::Push).await?;

    let mut layers = vec![ImageLayer::new(bundle.to_vec(), BUNDLE_MEDIA_TYPE.to_string(), None)];
    if let Some(signature) = signature {
        layers.push(ImageLayer::new(signature.to_vec(), SIGNATURE_MEDIA_TYPE.to_string(), None));
    }
    let config = Config::new(config.to_vec(), CONFIG_MEDIA_TYPE.to_string(), None);
    let mut manifest = OciImageManifest::build(&layers, &config, annotations(&described));
    manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_string());
    manifest.artifact_type = Some(ARTIFACT_TYPE.to_string());

    let blobs = layers.iter().map(|l| &l.data).zip(&manifest.layers).chain([(&config.data, &manifest.config)]);
    for (data, descriptor) in blobs {
        let image = &session.image;
        let present = session.client.blob_exists(image, &descriptor.digest).await.map_err(|e| session.error(e))?;
        if !present {
            session.client.push_blob(image, data.clone(), &descriptor.digest).await.map_err(|e| session.error(e))?;
        }
    }

    // Serialised here, not by oci-client, so the digest is of exactly the bytes sent.
    let body = serde_json::to_vec(&manifest).map_err(|e| session.error(e.into()))?;
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&body)));
    session
        .client
        .push_manifest_raw(&session.image, body, HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE))
        .await
        .map_err(|e| session.error(e))?;
    Ok(digest)
}

/// The tags of `reference`'s repository (its own tag or digest is ignored), sorted.
///
/// # Errors
/// [`OciError::NotFound`] if the repository does not exist, and the connection and credential
/// errors of [`OciError`].
pub async fn tags(reference: &OciRef) -> Result<Vec<String>, OciError> {
    let session = Session::open(reference, RegistryOperation::Pull).await?;
    let not_found = |e: OciDistributionError| match session.error(e) {
        OciError::NotFound { .. } => OciError::NotFound { reference: reference.repository_ref() },
        other => other,
    };
    let mut tags: Vec<String> = Vec::new();
    let mut last: Option<String> = None;
    loop {
        let page = session
            .client
            .list_tags(&session.image, &session.auth, Some(TAGS_PER_PAGE), last.as_deref())
            .await
            .map_err(not_found)?;
        let full = page.tags.len() >= TAGS_PER_PAGE;
        let next = page.tags.last().cloned();
        tags.extend(page.tags);
        // A registry that ignores `last` repeats its first page: stop rather than loop.
        if !full || next.is_none() || next == last || tags.len() >= MAX_TAGS {
            break;
        }
        last = next;
    }
    tags.sort();
    tags.dedup();
    Ok(tags)
}

/// The standard `org.opencontainers.image.*` annotations, from the config's name, version and
/// description, so registry UIs show what the artifact is.
fn annotations(config: &serde_json::Value) -> Option<BTreeMap<String, String>> {
    let pairs = [
        ("name", oci_client::annotations::ORG_OPENCONTAINERS_IMAGE_TITLE),
        ("version", oci_client::annotations::ORG_OPENCONTAINERS_IMAGE_VERSION),
        ("description", oci_client::annotations::ORG_OPENCONTAINERS_IMAGE_DESCRIPTION),
    ];
    let found: BTreeMap<String, String> = pairs
        .iter()
        .filter_map(|(field, key)| config.get(field)?.as_str().map(|v| (key.to_string(), v.to_string())))
        .collect();
    (!found.is_empty()).then_some(found)
}

/// A plugin manifest's layers.
struct Parts<'a> {
    bundle: &'a OciDescriptor,
    signature: Option<&'a OciDescriptor>,
}

impl<'a> Parts<'a> {
    fn of(reference: &OciRef, manifest: &'a OciImageManifest) -> Result<Self, OciError> {
        let of_type = |t: &str| manifest.layers.iter().filter(|l| l.media_type == t).collect::<Vec<_>>();
        let (bundles, signatures) = (of_type(BUNDLE_MEDIA_TYPE), of_type(SIGNATURE_MEDIA_TYPE));
        let plugin = bundles.len() == 1
            && signatures.len() <= 1
            && bundles.len() + signatures.len() == manifest.layers.len()
            && manifest.config.media_type == CONFIG_MEDIA_TYPE;
        match (plugin, bundles.first()) {
            (true, Some(bundle)) => Ok(Parts { bundle, signature: signatures.first().copied() }),
            _ => {
                let layers: Vec<&str> = manifest.layers.iter().map(|l| l.media_type.as_str()).collect();
                let layers = if layers.is_empty() { "none".to_string() } else { layers.join(", ") };
                let found = format!("layers: {layers}; config: {}", manifest.config.media_type);
                Err(OciError::NotAPlugin { reference: reference.to_string(), found })
            }
        }
    }
}

/// One operation's client, credentials and image reference.
struct Session<'r> {
    reference: &'r OciRef,
    client: Client,
    image: Reference,
    auth: RegistryAuth,
}

impl<'r> Session<'r> {
    async fn open(reference: &'r OciRef, operation: RegistryOperation) -> Result<Session<'r>, OciError> {
        let auth = credentials(std::env::var(USERNAME_ENV).ok(), std::env::var(PASSWORD_ENV).ok())?;
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(OciError::Client(
                "no TLS crypto provider is installed (call rustls::crypto::ring::default_provider().install_default() \
                 at start)"
                    .to_string(),
            ));
        }
        let config = ClientConfig {
            protocol: reference.protocol(),
            // An image index is never a plugin: see it as one rather than pick a platform from it.
            platform_resolver: None,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            user_agent: USER_AGENT,
            ..ClientConfig::default()
        };
        // `Client::new` would fall back to a default configuration on error; refuse instead.
        let client = Client::try_from(config).map_err(|e| OciError::Client(chain(&e)))?;
        let session = Session { reference, client, image: reference.to_reference(), auth };
        // Authenticating up front surfaces bad credentials and unreachable hosts as such
        // (oci-client otherwise swallows them and retries anonymously).
        session.client.auth(&session.image, &session.auth, operation).await.map_err(|e| session.error(e))?;
        Ok(session)
    }

    /// The size `descriptor` declares, if it is within `limit`.
    fn declared_size(&self, descriptor: &OciDescriptor, what: &'static str, limit: u64) -> Result<u64, OciError> {
        let size = u64::try_from(descriptor.size).map_err(|_| OciError::Registry {
            reference: self.reference.to_string(),
            detail: format!("the manifest declares a negative size ({}) for the {what}", descriptor.size),
        })?;
        if size > limit {
            return Err(OciError::TooLarge { reference: self.reference.to_string(), what, size, limit });
        }
        Ok(size)
    }

    /// Download a blob of `declared` bytes; oci-client checks its digest at the end of the stream.
    async fn blob(&self, descriptor: &OciDescriptor, what: &'static str, declared: u64) -> Result<Vec<u8>, OciError> {
        let size_mismatch =
            |received: u64| OciError::SizeMismatch { reference: self.reference.to_string(), what, declared, received };
        // Only the digest is passed on: a descriptor's `urls` could send oci-client to other hosts.
        let mut stream = self
            .client
            .pull_blob_stream(&self.image, descriptor.digest.as_str())
            .await
            .map_err(|e| self.blob_error(what, e))?;
        if let Some(length) = stream.content_length.filter(|&length| length != declared) {
            return Err(size_mismatch(length));
        }
        let capacity = usize::try_from(declared.min(MAX_PREALLOCATION)).unwrap_or(0);
        let mut data = Vec::with_capacity(capacity);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.stream_error(what, e))?;
            let received = (data.len() + chunk.len()) as u64;
            if received > declared {
                return Err(size_mismatch(received));
            }
            data.extend_from_slice(&chunk);
        }
        if data.len() as u64 != declared {
            return Err(size_mismatch(data.len() as u64));
        }
        Ok(data)
    }

    /// An error of a manifest, tag or auth request.
    fn error(&self, error: OciDistributionError) -> OciError {
        let reference = self.reference.to_string();
        let unauthorized = |detail: String| OciError::Unauthorized {
            reference: reference.clone(),
            anonymous: self.auth == RegistryAuth::Anonymous,
            detail,
        };
        match error {
            OciDistributionError::RegistryError { envelope, url } => {
                let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
                let detail = envelope
                    .errors
                    .iter()
                    .map(|e| format!("{:?}: {}", e.code, e.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                if codes.iter().any(|c| {
                    matches!(c, OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown | OciErrorCode::NotFound)
                }) {
                    OciError::NotFound { reference }
                } else if codes.iter().any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied)) {
                    unauthorized(detail)
                } else {
                    OciError::Registry { reference, detail: format!("the registry answered {detail} (for {url})") }
                }
            }
            OciDistributionError::ServerError { code: 404, .. } => OciError::NotFound { reference },
            OciDistributionError::ServerError { code: code @ (401 | 403), url, .. } => {
                unauthorized(format!("HTTP {code} for {url}"))
            }
            OciDistributionError::UnauthorizedError { url } => unauthorized(format!("HTTP 401 for {url}")),
            OciDistributionError::AuthenticationFailure(message) => unauthorized(message),
            OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout() => {
                OciError::Unreachable { reference, scheme: self.reference.scheme(), detail: chain(&e) }
            }
            OciDistributionError::DigestError(DigestError::VerificationError { expected, actual }) => {
                OciError::DigestMismatch { reference, what: "manifest", expected, actual }
            }
            other => OciError::Registry { reference, detail: chain(&other) },
        }
    }

    /// An error starting a blob download: a missing blob is the registry's fault, not a
    /// missing reference.
    fn blob_error(&self, what: &'static str, error: OciDistributionError) -> OciError {
        let missing = match &error {
            OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
                matches!(e.code, OciErrorCode::BlobUnknown | OciErrorCode::NameUnknown | OciErrorCode::NotFound)
            }),
            OciDistributionError::ServerError { code, .. } => *code == 404,
            _ => false,
        };
        if missing {
            let detail = format!("the registry has lost the {what} (its blob is missing): push the plugin again");
            return OciError::Registry { reference: self.reference.to_string(), detail };
        }
        match self.error(error) {
            OciError::DigestMismatch { reference, expected, actual, .. } => {
                OciError::DigestMismatch { reference, what, expected, actual }
            }
            other => other,
        }
    }

    /// An error while a blob streams in; oci-client reports a digest mismatch as its last item.
    fn stream_error(&self, what: &'static str, error: std::io::Error) -> OciError {
        let reference = self.reference.to_string();
        match error.get_ref().and_then(|e| e.downcast_ref::<DigestError>()) {
            Some(DigestError::VerificationError { expected, actual }) => {
                OciError::DigestMismatch { reference, what, expected: expected.clone(), actual: actual.clone() }
            }
            _ => OciError::Registry { reference, detail: format!("downloading the {what} failed: {}", chain(&error)) },
        }
    }
}

/// Basic credentials if both are set (and not empty), anonymous if neither is.
fn credentials(username: Option<String>, password: Option<String>) -> Result<RegistryAuth, OciError> {
    let (username, password) = (username.filter(|u| !u.is_empty()), password.filter(|p| !p.is_empty()));
    match (username, password) {
        (Some(username), Some(password)) => Ok(RegistryAuth::Basic(username, password)),
        (None, None) => Ok(RegistryAuth::Anonymous),
        (Some(_), None) => Err(OciError::HalfCredentials { set: USERNAME_ENV, missing: PASSWORD_ENV }),
        (None, Some(_)) => Err(OciError::HalfCredentials { set: PASSWORD_ENV, missing: USERNAME_ENV }),
    }
}

/// An error and its sources, `outer: inner: innermost`.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_need_both_variables() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(credentials(None, None).ok(), Some(RegistryAuth::Anonymous));
        assert_eq!(credentials(some(""), some("")).ok(), Some(RegistryAuth::Anonymous));
        assert_eq!(credentials(some("u"), some("p")).ok(), Some(RegistryAuth::Basic("u".into(), "p".into())));
        assert!(matches!(
            credentials(some("u"), None),
            Err(OciError::HalfCredentials { set: USERNAME_ENV, missing: PASSWORD_ENV })
        ));
        assert!(matches!(
            credentials(None, some("p")),
            Err(OciError::HalfCredentials { set: PASSWORD_ENV, missing: USERNAME_ENV })
        ));
    }
}
