//! One loaded plugin, and running its exports in a fresh sandboxed instance.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sha2::Digest;
use talaria_protocol::{ToolError, ToolSpec};
use wasmtime::component::InstancePre;
use wasmtime::{Engine, Store, Trap};

use crate::discovery::WasmSource;
use crate::engine::EngineHandle;
use crate::grant::{Grants, Scope};
use crate::host::bindings::ToolPluginPre;
use crate::host::bindings::talaria::plugin::types as wit;
use crate::host::{HostState, PluginEnv};
use crate::manifest::Manifest;

/// Extra time the host gives a call beyond its deadline before abandoning it from outside
/// (the epoch trap normally fires first; this catches a call stuck in a host import).
const OUTSIDE_GRACE: Duration = Duration::from_millis(150);

/// Limits for one call, after the host's caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    pub memory_bytes: usize,
    pub timeout: Duration,
    pub output_bytes: usize,
}

/// A discovered plugin: manifest, grants, and (once needed) its compiled component.
pub struct Plugin {
    pub manifest: Manifest,
    pub scope: Scope,
    /// Directory it was loaded from, or `bundled:NAME`.
    pub location: String,
    pub grants: Arc<Grants>,
    pub limits: CallLimits,
    /// May its tools replace other plugins' tools of the same name.
    pub allow_override: bool,
    pub(crate) source: WasmSource,
    pub(crate) env: Arc<PluginEnv>,
    sha256: OnceLock<Result<String, String>>,
    pub(crate) pre: OnceLock<Result<ToolPluginPre<HostState>, String>>,
    pub(crate) specs: tokio::sync::OnceCell<Result<Vec<ToolSpec>, ToolError>>,
}

/// A successful call.
#[derive(Debug, Clone)]
pub struct CallOutput {
    pub output: String,
    /// Network requests the host refused during the call (the plugin may have coped).
    pub denials: Vec<String>,
    pub elapsed: Duration,
}

/// What the host tells a tool about a call.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    pub session_id: String,
    pub call_id: String,
    /// The session's working directory (`$WORKSPACE`); absolute.
    pub workspace: std::path::PathBuf,
}

impl Plugin {
    pub(crate) fn new(
        manifest: Manifest,
        scope: Scope,
        location: String,
        source: WasmSource,
        env: Arc<PluginEnv>,
        limits: CallLimits,
        allow_override: bool,
    ) -> Self {
        Self {
            manifest,
            scope,
            location,
            grants: env.grants.clone(),
            limits,
            allow_override,
            source,
            env,
            sha256: OnceLock::new(),
            pre: OnceLock::new(),
            specs: tokio::sync::OnceCell::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// sha256 of the component, hex.
    ///
    /// # Errors
    /// The wasm file cannot be read.
    pub fn sha256(&self) -> Result<&str, String> {
        self.sha256
            .get_or_init(|| match &self.source {
                WasmSource::Embedded { sha256, .. } => Ok((*sha256).to_string()),
                WasmSource::File(path) => std::fs::read(path)
                    .map(|bytes| hex::encode(sha2::Sha256::digest(&bytes)))
                    .map_err(|e| format!("{}: {e}", path.display())),
            })
            .as_ref()
            .map(String::as_str)
            .map_err(Clone::clone)
    }

    pub(crate) fn wasm_bytes(&self) -> std::io::Result<Vec<u8>> {
        match &self.source {
            WasmSource::Embedded { wasm, .. } => Ok(wasm.to_vec()),
            WasmSource::File(path) => std::fs::read(path),
        }
    }

    /// The component's file, if it is not embedded.
    pub fn wasm_path(&self) -> Option<&std::path::Path> {
        match &self.source {
            WasmSource::File(p) => Some(p),
            WasmSource::Embedded { .. } => None,
        }
    }
}

/// Check the component is a tool plugin of a supported API and build its pre-instance.
pub(crate) fn pre_instance(
    engine: &Engine,
    instance_pre: Result<InstancePre<HostState>, wasmtime::Error>,
    component: &wasmtime::component::Component,
) -> Result<ToolPluginPre<HostState>, String> {
    let exports: Vec<String> = component.component_type().exports(engine).map(|(name, _)| name.to_string()).collect();
    let wanted = format!("talaria:plugin/tools@{}", crate::manifest::SUPPORTED_API_VERSIONS.join("|"));
    if !exports.iter().any(|e| e.starts_with("talaria:plugin/tools@")) {
        let got = if exports.is_empty() { "nothing".to_string() } else { exports.join(", ") };
        return Err(format!(
            "the component does not export {wanted}: it exports {got}. It was built for another world; a tool plugin targets world `tool-plugin` (talaria-sdk's export_tools! does this)"
        ));
    }
    if let Some(other) = exports.iter().find(|e| {
        e.starts_with("talaria:plugin/tools@")
            && !crate::manifest::SUPPORTED_API_VERSIONS.iter().any(|v| e.ends_with(&format!("@{v}")))
    }) {
        return Err(format!(
            "the component exports {other}, an API version this talaria does not support (it supports {})",
            crate::manifest::SUPPORTED_API_VERSIONS.join(", ")
        ));
    }
    let instance_pre =
        instance_pre.map_err(|e| format!("the component needs imports this host does not provide: {e:#}"))?;
    ToolPluginPre::new(instance_pre).map_err(|e| format!("{e:#}"))
}

/// Run `f` on a fresh instance of `plugin` within its limits, turning every failure into a
/// [`ToolError`] that names what happened.
pub(crate) async fn with_instance<T>(
    engine: &EngineHandle,
    plugin: &Plugin,
    pre: &ToolPluginPre<HostState>,
    workspace: std::path::PathBuf,
    limits: CallLimits,
    f: impl AsyncFnOnce(
        &mut Store<HostState>,
        &crate::host::bindings::ToolPlugin,
    ) -> wasmtime::Result<Result<T, wit::ToolError>>,
) -> Result<(T, Vec<String>), ToolError> {
    let name = plugin.name();
    let mut store = Store::new(&engine.engine, HostState::new(plugin.env.clone(), workspace, limits.memory_bytes));
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(EngineHandle::ticks(limits.timeout));
    store.epoch_deadline_trap();
    let started = Instant::now();
    let result = tokio::time::timeout(limits.timeout + OUTSIDE_GRACE, async {
        let instance = pre.instantiate_async(&mut store).await?;
        f(&mut store, &instance).await
    })
    .await;
    let state = store.data();
    let denials = state.denials.lock().map(|d| d.clone()).unwrap_or_default();
    let result = match result {
        Err(_elapsed) => {
            return Err(ToolError::Crashed(format!(
                "plugin '{name}' did not finish within its {}s deadline and was stopped",
                limits.timeout.as_secs_f32()
            )));
        }
        Ok(r) => r,
    };
    match result {
        Ok(Ok(value)) => Ok((value, denials)),
        Ok(Err(e)) => Err(map_plugin_error(e, &denials)),
        Err(trap) => {
            let stderr = String::from_utf8_lossy(&state.stderr.contents()).into_owned();
            Err(ToolError::Crashed(describe_trap(
                name,
                &trap,
                state.limiter.refused,
                limits,
                &stderr,
                started.elapsed(),
            )))
        }
    }
}

/// Longest error message a plugin may hand the model.
const MAX_ERROR_CHARS: usize = 16 * 1024;

fn map_plugin_error(e: wit::ToolError, denials: &[String]) -> ToolError {
    match e {
        wit::ToolError::InvalidArgs(m) => ToolError::InvalidArgs(clip(m, MAX_ERROR_CHARS)),
        wit::ToolError::UnknownTool(m) => ToolError::UnknownTool(clip(m, 256)),
        wit::ToolError::Failed(m) if denials.is_empty() => ToolError::Failed(clip(m, MAX_ERROR_CHARS)),
        wit::ToolError::Failed(m) => {
            ToolError::Failed(format!("{} [host: {}]", clip(m, MAX_ERROR_CHARS), denials.join("; ")))
        }
    }
}

/// `text` cut to `max` characters, with a marker when cut.
pub(crate) fn clip(text: String, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}... [cut at {max} characters]", &text[..at]),
        None => text,
    }
}

fn describe_trap(
    name: &str,
    trap: &wasmtime::Error,
    refused_memory: Option<usize>,
    limits: CallLimits,
    stderr: &str,
    elapsed: Duration,
) -> String {
    const MIB: usize = 1024 * 1024;
    if trap.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return format!(
            "plugin '{name}' exceeded its {}s deadline and was stopped after {:.2}s",
            limits.timeout.as_secs_f32(),
            elapsed.as_secs_f32()
        );
    }
    if let Some(desired) = refused_memory {
        return format!(
            "plugin '{name}' hit its memory limit of {} MiB (it tried to grow to {} MiB) and was stopped",
            limits.memory_bytes / MIB,
            desired.div_ceil(MIB)
        );
    }
    if let Some(panic) = panic_message(stderr) {
        return format!("plugin '{name}' panicked: {panic}");
    }
    let kind = trap.downcast_ref::<Trap>().map_or_else(|| format!("{trap:#}"), ToString::to_string);
    format!("plugin '{name}' trapped: {kind}")
}

/// The message of a Rust panic printed to stderr, if there is one.
fn panic_message(stderr: &str) -> Option<String> {
    let start = stderr.find("panicked at")?;
    let rest = &stderr[start..];
    // "panicked at src/lib.rs:10:5:\nmessage\nnote: ..."
    let body = rest.split_once('\n').map_or(rest, |(_, b)| b);
    let message: Vec<&str> = body.lines().take_while(|l| !l.starts_with("note:")).collect();
    let message = message.join("\n").trim().to_string();
    Some(if message.is_empty() { rest.lines().next().unwrap_or_default().to_string() } else { message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages_are_extracted() {
        let stderr =
            "\nthread '<unnamed>' panicked at src/lib.rs:10:5:\nboom: it broke\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(panic_message(stderr).as_deref(), Some("boom: it broke"));
        assert_eq!(panic_message("nothing here"), None);
    }
}
