//! What the user accepted of a trusted project's plugins, as grants.toml records it (see
//! [`crate::trust`] for how it is reviewed and [`crate::discovery`] for how it is enforced).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the user accepted of one trusted project.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProjectPins {
    /// When the user last reviewed it (RFC 3339).
    #[serde(default)]
    pub trusted: String,
    /// Plugin name → what it was.
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginPin>,
    /// The digest of its `.talaria/skills` as reviewed (none when it had none): its skills are
    /// read only while they still match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<String>,
}

/// One project plugin as the user reviewed it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PluginPin {
    pub version: String,
    pub manifest_sha256: String,
    pub wasm_sha256: String,
    /// sha256 of its lockfile entry (version, source, digests, signer, grants), when installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_entry_sha256: Option<String>,
    /// The scope (`bundled` or `user`) of the plugin of the same name it was accepted to replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}
