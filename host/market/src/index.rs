//! Registry indexes: a JSON document, served over https, listing plugins and their versions.
//!
//! ```json
//! {
//!   "talaria_index": 1,
//!   "plugins": [
//!     {
//!       "name": "weather-plus",
//!       "description": "Forecasts from open-meteo.com",
//!       "versions": [
//!         {
//!           "version": "1.2.0",
//!           "api": "0.2.0",
//!           "kinds": ["tool"],
//!           "capabilities": ["net:api.open-meteo.com"],
//!           "digest": "sha256:…",
//!           "url": "bundles/weather-plus-1.2.0.tar.gz",
//!           "signature": { "key_id": "…", "digest": "sha256:…", "signature": "…" }
//!         }
//!       ]
//!     }
//!   ]
//! }
//! ```
//! `url` may be relative to the index; `signature` may instead be `signature_url`, or absent
//! for an unsigned bundle. `talaria plugin publish --index FILE --url URL BUNDLE` adds a version.

use serde::{Deserialize, Serialize};

use crate::download::{FetchError, get};
use crate::sign::Signature;

/// Largest index accepted.
const MAX_INDEX_BYTES: u64 = 8 * 1024 * 1024;

/// Why an index could not be had: fetched, read, or a URL in it followed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// A URL in (or of) the index is not one.
    #[error("`{url}` is not a URL: {reason}")]
    BadUrl { url: String, reason: String },
    /// The index could not be downloaded.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The document is not a talaria registry index.
    #[error("{from}: not a talaria registry index: {error}")]
    NotAnIndex { from: String, error: serde_json::Error },
    /// A later format than this talaria reads.
    #[error("{from}: index format {format} is newer than this talaria understands (1)")]
    TooNew { from: String, format: u32 },
}

/// Why no version of a listed plugin fits ([`IndexPlugin::pick`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PickError {
    /// Versions match, but the newest of them needs a plugin API this talaria does not have.
    #[error(
        "version {version} needs plugin API {api}, and no matching version fits this talaria (it supports {})",
        talaria_runtime::SUPPORTED_API_VERSIONS.join(", ")
    )]
    NeedsApi { version: semver::Version, api: semver::Version },
    /// No published version matches the requirement.
    #[error("no version matches `{req}`")]
    NoMatch { req: semver::VersionReq },
    /// The plugin is listed with no (unyanked) versions.
    #[error("no versions are published")]
    NoVersions,
}

/// A registry index.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Index {
    pub talaria_index: u32,
    #[serde(default)]
    pub plugins: Vec<IndexPlugin>,
}

/// One plugin in an index.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IndexPlugin {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub versions: Vec<IndexVersion>,
}

/// One published version.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IndexVersion {
    pub version: semver::Version,
    pub api: semver::Version,
    #[serde(default)]
    pub kinds: Vec<String>,
    /// What its manifest requests, as capability strings.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// `sha256:<hex>` of the bundle.
    pub digest: String,
    /// Where the bundle is (absolute, or relative to the index).
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_url: Option<String>,
    /// A version withdrawn by its publisher is never picked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub yanked: bool,
}

/// `relative` resolved against the URL of the document it came from.
///
/// # Errors
/// [`IndexError::BadUrl`]: either is not a URL.
pub fn join_url(base: &str, relative: &str) -> Result<String, IndexError> {
    let bad = |url: &str, reason: String| IndexError::BadUrl { url: url.to_string(), reason };
    let base_url = reqwest::Url::parse(base).map_err(|e| bad(base, e.to_string()))?;
    base_url.join(relative).map(|u| u.to_string()).map_err(|e| bad(relative, e.to_string()))
}

impl IndexVersion {
    /// The bundle's absolute URL.
    ///
    /// # Errors
    /// [`IndexError::BadUrl`]: `url` is malformed.
    pub fn download_url(&self, index_url: &str) -> Result<String, IndexError> {
        join_url(index_url, &self.url)
    }
}

impl Index {
    /// Parse an index document.
    ///
    /// # Errors
    /// [`IndexError::NotAnIndex`], or [`IndexError::TooNew`] for a later format.
    pub fn parse(bytes: &[u8], from: &str) -> Result<Self, IndexError> {
        let index: Index =
            serde_json::from_slice(bytes).map_err(|error| IndexError::NotAnIndex { from: from.to_string(), error })?;
        if index.talaria_index != 1 {
            return Err(IndexError::TooNew { from: from.to_string(), format: index.talaria_index });
        }
        Ok(index)
    }

    /// Download and parse the index at `url`.
    ///
    /// # Errors
    /// [`IndexError::Fetch`] when it cannot be downloaded, else as [`Index::parse`].
    pub async fn fetch(http: &reqwest::Client, url: &str) -> Result<Self, IndexError> {
        let bytes = get(http, url, MAX_INDEX_BYTES, &|_, _| {}).await?;
        Self::parse(&bytes, url)
    }

    pub fn plugin(&self, name: &str) -> Option<&IndexPlugin> {
        self.plugins.iter().find(|p| p.name == name)
    }

    /// Add (or replace) one version of a plugin, keeping versions sorted newest first.
    pub fn upsert(&mut self, name: &str, description: &str, version: IndexVersion) {
        let plugin = match self.plugins.iter().position(|p| p.name == name) {
            Some(i) => &mut self.plugins[i],
            None => {
                self.plugins.push(IndexPlugin {
                    name: name.to_string(),
                    description: String::new(),
                    versions: Vec::new(),
                });
                self.plugins.sort_by(|a, b| a.name.cmp(&b.name));
                let i = self.plugins.iter().position(|p| p.name == name).unwrap_or_default();
                &mut self.plugins[i]
            }
        };
        if !description.is_empty() {
            plugin.description = description.to_string();
        }
        plugin.versions.retain(|v| v.version != version.version);
        plugin.versions.push(version);
        plugin.versions.sort_by(|a, b| b.version.cmp(&a.version));
    }
}

impl IndexPlugin {
    /// The newest version matching `req` that this host can run and that is not yanked.
    ///
    /// # Errors
    /// None fits: [`PickError::NeedsApi`] (only versions for another plugin API),
    /// [`PickError::NoMatch`] or [`PickError::NoVersions`].
    pub fn pick(&self, req: Option<&semver::VersionReq>) -> Result<&IndexVersion, PickError> {
        let matching: Vec<&IndexVersion> =
            self.versions.iter().filter(|v| !v.yanked && req.is_none_or(|r| r.matches(&v.version))).collect();
        let best = matching
            .iter()
            .filter(|v| talaria_runtime::check_api(&v.api).is_ok())
            .max_by(|a, b| a.version.cmp(&b.version));
        match (best, matching.iter().max_by(|a, b| a.version.cmp(&b.version))) {
            (Some(v), _) => Ok(v),
            (None, Some(newest)) => {
                Err(PickError::NeedsApi { version: newest.version.clone(), api: newest.api.clone() })
            }
            (None, None) => Err(match req {
                Some(r) => PickError::NoMatch { req: r.clone() },
                None => PickError::NoVersions,
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is the test failing
mod tests {
    use super::*;

    fn version(v: &str, api: &str) -> IndexVersion {
        IndexVersion {
            version: v.parse().unwrap(),
            api: api.parse().unwrap(),
            kinds: vec!["tool".into()],
            capabilities: vec![],
            digest: "sha256:00".into(),
            url: format!("b/hello-{v}.tar.gz"),
            signature: None,
            signature_url: None,
            yanked: false,
        }
    }

    #[test]
    fn picks_the_newest_runnable_matching_version() {
        let mut plugin = IndexPlugin {
            name: "hello".into(),
            description: String::new(),
            versions: vec![version("1.0.0", "0.2.0"), version("1.2.0", "0.2.0"), version("2.0.0", "0.9.0")],
        };
        assert_eq!(plugin.pick(None).unwrap().version.to_string(), "1.2.0");
        assert_eq!(plugin.pick(Some(&"~1.0".parse().unwrap())).unwrap().version.to_string(), "1.0.0");
        let err = plugin.pick(Some(&"^2".parse().unwrap())).unwrap_err().to_string();
        assert!(err.contains("needs plugin API 0.9.0"), "{err}");
        assert_eq!(plugin.pick(Some(&"^3".parse().unwrap())).unwrap_err().to_string(), "no version matches `^3`");
        plugin.versions[1].yanked = true;
        assert_eq!(plugin.pick(None).unwrap().version.to_string(), "1.0.0", "a yanked version is never picked");
    }

    #[test]
    fn urls_resolve_against_the_index() {
        let v = version("1.0.0", "0.2.0");
        assert_eq!(
            v.download_url("https://r.example/talaria/index.json").unwrap(),
            "https://r.example/talaria/b/hello-1.0.0.tar.gz"
        );
    }

    #[test]
    fn upsert_keeps_versions_newest_first_and_replaces_a_republished_one() {
        let mut index = Index { talaria_index: 1, plugins: vec![] };
        index.upsert("hello", "says hello", version("1.0.0", "0.2.0"));
        index.upsert("hello", "", version("1.1.0", "0.2.0"));
        index.upsert("hello", "", version("1.0.0", "0.2.0"));
        index.upsert("alpha", "", version("0.1.0", "0.2.0"));
        assert_eq!(index.plugins[0].name, "alpha");
        let hello = index.plugin("hello").unwrap();
        assert_eq!(hello.description, "says hello");
        let versions: Vec<String> = hello.versions.iter().map(|v| v.version.to_string()).collect();
        assert_eq!(versions, ["1.1.0", "1.0.0"]);
        let text = serde_json::to_vec(&index).unwrap();
        assert_eq!(Index::parse(&text, "x").unwrap(), index);
        assert!(Index::parse(b"{\"talaria_index\": 2}", "x").unwrap_err().to_string().contains("newer"));
        assert!(Index::parse(b"[]", "x").unwrap_err().to_string().contains("not a talaria registry index"));
    }
}
