//! One discovered plugin: its manifest, grants, limits per kind, and (once needed) its compiled
//! component and, for a memory provider, its resident instance.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use talaria_protocol::{HookKind, ToolError, ToolSpec};

use crate::discovery::{Installed, WasmPin, WasmSource};
use crate::error::ComponentError;
use crate::exports::Prepared;
use crate::grant::{Grants, Scope};
use crate::host::PluginEnv;
use crate::host::api::since_v0_2_0::exports::talaria::plugin::context::Guest as ContextGuest;
use crate::host::api::since_v0_2_0::exports::talaria::plugin::memory::Guest as MemoryGuest;
use crate::instance::{CallLimits, Resident};
use crate::manifest::{Kind, Manifest};

/// A discovered plugin: manifest, grants, and (once needed) its compiled component.
pub struct Plugin {
    pub manifest: Manifest,
    pub scope: Scope,
    /// Directory it was loaded from, or `bundled:NAME`.
    pub location: String,
    pub grants: Arc<Grants>,
    /// Limits of a tool call (see [`Plugin::limits_for`] for the other kinds).
    pub limits: CallLimits,
    /// May its tools replace other plugins' tools of the same name.
    pub allow_override: bool,
    /// False when the manifest says `enabled = false` and the operator did not enable it, or
    /// the operator disabled it: such a plugin is listed but never called.
    pub enabled: bool,
    kinds: Vec<Kind>,
    /// Limits per kind, indexed by `Kind as usize`.
    kind_limits: [CallLimits; 5],
    pub(crate) source: WasmSource,
    /// Its lockfile entry, when it was installed by `talaria plugins install`.
    installed: Option<Installed>,
    /// What its component must hash to (an install's or a project trust's pin).
    wasm_pin: Option<WasmPin>,
    pub(crate) env: Arc<PluginEnv>,
    sha256: OnceLock<Result<String, ComponentError>>,
    pub(crate) pre: OnceLock<Result<Prepared, String>>,
    pub(crate) specs: tokio::sync::OnceCell<Result<Vec<ToolSpec>, ToolError>>,
    /// A memory provider's instance, kept across calls; `None` until the first call and after
    /// a call that trapped or ran out of time.
    pub(crate) resident: tokio::sync::Mutex<Option<Resident<MemoryGuest>>>,
    /// A context engine's instances kept for `should_compress` (asked before every model
    /// call), idle ones only; see [`Runtime::context_should_compress`](crate::Runtime::context_should_compress).
    pub(crate) deciders: std::sync::Mutex<Vec<Resident<ContextGuest>>>,
}

/// A successful call.
#[derive(Debug, Clone)]
pub struct CallOutput {
    pub output: String,
    /// Network requests the host refused during the call (the plugin may have coped).
    pub denials: Vec<String>,
    pub elapsed: Duration,
}

impl Plugin {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        manifest: Manifest,
        scope: Scope,
        location: String,
        source: WasmSource,
        installed: Option<Installed>,
        wasm_pin: Option<WasmPin>,
        env: Arc<PluginEnv>,
        kind_limits: [CallLimits; 5],
        allow_override: bool,
        enabled: bool,
    ) -> Self {
        Self {
            kinds: manifest.kind_list(),
            manifest,
            scope,
            location,
            grants: env.grants.clone(),
            limits: kind_limits[Kind::Tool as usize],
            allow_override,
            enabled,
            kind_limits,
            source,
            installed,
            wasm_pin,
            env,
            sha256: OnceLock::new(),
            pre: OnceLock::new(),
            specs: tokio::sync::OnceCell::new(),
            resident: tokio::sync::Mutex::new(None),
            deciders: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// What the plugin is, from its manifest.
    pub fn kinds(&self) -> &[Kind] {
        &self.kinds
    }

    pub fn is(&self, kind: Kind) -> bool {
        self.kinds.contains(&kind)
    }

    /// Whether it may offer tools: tool plugins, and memory providers (whose `list` may be empty).
    pub(crate) fn may_offer_tools(&self) -> bool {
        self.is(Kind::Tool) || self.is(Kind::Memory)
    }

    /// The space its `kv` data lives in (in the store's plugin key-value table).
    pub fn kv_space(&self) -> &str {
        &self.env.kv_space
    }

    /// A hook plugin's events (`[hook] events`); empty for other kinds.
    pub fn hook_events(&self) -> &[HookKind] {
        &self.manifest.hook_events
    }

    /// Whether it is an enabled hook plugin that wants events of `kind`.
    pub fn wants(&self, kind: HookKind) -> bool {
        self.enabled && self.is(Kind::Hook) && self.manifest.hook_events.contains(&kind)
    }

    /// The limits of a call of `kind`: the manifest's `[limits]`, else the host's default for
    /// that kind (a tool 30 s, a hook 10 s, a memory call 30 s, a context engine 120 s by
    /// default), within the host's caps.
    pub fn limits_for(&self, kind: Kind) -> CallLimits {
        self.kind_limits[kind as usize]
    }

    /// Its lockfile entry (source, signer, pinned digest, grants), if it was installed.
    pub fn installed(&self) -> Option<&Installed> {
        self.installed.as_ref()
    }

    /// sha256 of the component, hex.
    ///
    /// # Errors
    /// The wasm file cannot be read, or (for an installed plugin, or a trusted project's) it no
    /// longer has the digest pinned at install or trust time: such a component is never compiled
    /// or run.
    pub fn sha256(&self) -> Result<&str, ComponentError> {
        self.sha256
            .get_or_init(|| {
                let sha = match &self.source {
                    WasmSource::Embedded { sha256, .. } => (*sha256).to_string(),
                    source => source.read().map(|bytes| crate::fsutil::sha256_hex(&bytes)).map_err(|e| {
                        ComponentError::Unreadable {
                            path: source.path().unwrap_or_default().to_path_buf(),
                            detail: e.to_string(),
                        }
                    })?,
                };
                match &self.wasm_pin {
                    Some(pin) if pin.sha256 != sha => Err(ComponentError::Changed {
                        since: pin.since.clone(),
                        sha256: sha,
                        pinned: pin.sha256.clone(),
                    }),
                    _ => Ok(sha),
                }
            })
            .as_ref()
            .map(String::as_str)
            .map_err(Clone::clone)
    }

    /// The component's bytes, checked against [`Plugin::sha256`] (the file may have been
    /// replaced since it was hashed; compiled code is cached under that digest).
    pub(crate) fn wasm_bytes(&self) -> std::io::Result<Vec<u8>> {
        let bytes = self.source.read()?;
        if let WasmSource::Embedded { .. } = self.source {
            return Ok(bytes);
        }
        let expected = self.sha256().map_err(std::io::Error::other)?;
        if crate::fsutil::sha256_hex(&bytes) != expected {
            let path = self.source.path().unwrap_or_default();
            return Err(std::io::Error::other(format!("{} changed while it was being loaded", path.display())));
        }
        Ok(bytes)
    }

    /// The component's file, if it is not embedded.
    pub fn wasm_path(&self) -> Option<std::path::PathBuf> {
        self.source.path()
    }
}
