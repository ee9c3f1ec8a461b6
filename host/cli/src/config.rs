//! `$TALARIA_HOME/config.toml`: raw TOML (`*Toml`) resolved into the runtime's config.
//!
//! ```toml
//! [sandbox]            # host-wide plugin limits
//! memory_mb = 64
//! timeout_secs = 30
//!
//! [approvals]
//! deny = ["*curl*|*sh*"]      # always refused, even with --yolo
//! allow = ["git-force-push"]  # dangerous-pattern keys approved "always"
//!
//! [plugins.weather]
//! allow_override = false
//! [plugins.weather.config]
//! base_url = "https://api.weatherapi.com/v1"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use serde::Deserialize;
use talaria_runtime::{CommandPolicy, HostLimits, PluginSettings};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigToml {
    #[serde(default)]
    pub sandbox: SandboxToml,
    #[serde(default)]
    pub approvals: ApprovalsToml,
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginToml>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxToml {
    pub memory_mb: Option<u32>,
    pub max_memory_mb: Option<u32>,
    pub timeout_secs: Option<u64>,
    pub max_timeout_secs: Option<u64>,
    pub output_kb: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsToml {
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub allow: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginToml {
    #[serde(default)]
    pub allow_override: bool,
    #[serde(default)]
    pub config: toml::Table,
}

/// Where talaria keeps its state: `$TALARIA_HOME`, else `~/.talaria`.
pub fn home() -> anyhow::Result<PathBuf> {
    if let Some(home) = std::env::var_os("TALARIA_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    let base = etcetera::home_dir().context("cannot find your home directory; set TALARIA_HOME")?;
    Ok(base.join(".talaria"))
}

impl ConfigToml {
    /// Read `home/config.toml`; a missing file means defaults.
    pub fn load(home: &Path) -> anyhow::Result<Self> {
        let path = home.join("config.toml");
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).with_context(|| format!("{} is not valid", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    pub fn limits(&self) -> HostLimits {
        let d = HostLimits::default();
        let s = &self.sandbox;
        HostLimits {
            default_memory_mb: s.memory_mb.unwrap_or(d.default_memory_mb),
            max_memory_mb: s.max_memory_mb.unwrap_or(d.max_memory_mb),
            default_timeout: s.timeout_secs.map_or(d.default_timeout, Duration::from_secs),
            max_timeout: s.max_timeout_secs.map_or(d.max_timeout, Duration::from_secs),
            default_output_kb: s.output_kb.unwrap_or(d.default_output_kb),
            max_output_kb: d.max_output_kb,
        }
    }

    pub fn command_policy(&self, home: &Path) -> CommandPolicy {
        CommandPolicy {
            deny: self.approvals.deny.clone(),
            allow_keys: self.approvals.allow.clone(),
            home: Some(home.to_path_buf()),
        }
    }

    pub fn plugin_settings(&self) -> BTreeMap<String, PluginSettings> {
        self.plugins
            .iter()
            .map(|(name, p)| {
                (name.clone(), PluginSettings { config: p.config.clone(), allow_override: p.allow_override })
            })
            .collect()
    }
}
