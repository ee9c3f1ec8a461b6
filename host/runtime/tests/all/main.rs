//! Runtime tests with real components in the real sandbox: the misbehaving plugin
//! (tests/plugins/evil) tries one escape or failure per test and the exact refusal is asserted;
//! the 0.2.0 probes (tests/plugins/probe-*) exercise hooks, memory providers, context engines and
//! the llm import, legacy-v1 keeps API 0.1.0 honest, and the flood plugin declares and logs too
//! much. `kv` covers the operations several writers need.

mod api;
mod boundary;
mod context;
mod hooks;
mod kv;
mod limits;
mod loading;
mod memory;
mod record;
mod sandbox;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use talaria_protocol::{PluginSession, ToolError};
use talaria_runtime::{
    BoxFuture, CallOutput, LlmBackend, LlmCompletion, LlmRequest, Runtime, RuntimeConfig, Secrets, ToolContext,
    Unattended,
};
use talaria_test_support as support;

/// A home and a workspace, with the evil plugin installed under `name` with `capabilities`.
pub struct Env {
    pub home: tempfile::TempDir,
    pub workspace: tempfile::TempDir,
}

impl Default for Env {
    fn default() -> Self {
        Self { home: tempfile::tempdir().expect("home"), workspace: tempfile::tempdir().expect("workspace") }
    }
}

impl Env {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn ws(&self) -> PathBuf {
        self.workspace.path().canonicalize().expect("canonical workspace")
    }

    /// Install the evil component as user plugin `name`.
    pub fn evil(&self, name: &str, capabilities: &str, grants: &[&str]) -> &Self {
        self.install(name, Path::new(support::EVIL_WASM), &support::manifest(name, capabilities));
        if !grants.is_empty() {
            support::grant(self.home.path(), name, grants);
        }
        self
    }

    pub fn install(&self, name: &str, wasm: &Path, manifest: &str) {
        support::install(self.home.path(), name, wasm, manifest);
    }

    /// Install a 0.2.0 component as user plugin `name` of `kinds`, with more manifest TOML.
    pub fn install_v2(&self, name: &str, wasm: &str, kinds: &[&str], rest: &str) -> &Self {
        self.install(name, Path::new(wasm), &support::manifest_v2(name, kinds, rest));
        self
    }

    pub fn grant(&self, name: &str, caps: &[&str]) -> &Self {
        support::grant(self.home.path(), name, caps);
        self
    }

    /// A runtime from [`Env::config`] changed by `change`.
    pub fn runtime_with(&self, change: impl FnOnce(&mut RuntimeConfig)) -> Runtime {
        let mut config = self.config();
        change(&mut config);
        Runtime::new(config, &[]).expect("runtime")
    }

    /// The session plugin calls are made for: id `s1`, in this workspace.
    pub fn session(&self) -> PluginSession {
        PluginSession {
            session_id: "s1".into(),
            platform: "cli".into(),
            workspace: self.ws().display().to_string(),
            model: "main-model".into(),
        }
    }

    pub fn config(&self) -> RuntimeConfig {
        let mut config = RuntimeConfig::new(self.home.path().to_path_buf(), self.ws());
        config.secrets = Some(Secrets::from_pairs([("WEATHER_API_KEY", "k-123-secret")]));
        config.cache_dir = Some(shared_cache());
        // These tests are about what happens before a command runs (grants, checks,
        // approvals); the OS sandbox itself is tested with the real binary (tests/e2e).
        config.commands = talaria_runtime::process::CommandSandbox::unconfined();
        config
    }

    pub fn runtime(&self) -> Runtime {
        Runtime::new(self.config(), &[]).expect("runtime")
    }

    pub fn runtime_yolo(&self) -> Runtime {
        let mut config = self.config();
        config.approver = Arc::new(Unattended { yolo: true });
        Runtime::new(config, &[]).expect("runtime")
    }
}

/// Held by the tests that let a guest spin until its deadline, so that on a small machine they
/// do not slow each other's deadlines down (each spins a core for its whole deadline).
pub static SPINNING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One compile cache for the whole test binary, so the evil plugin compiles once.
pub fn shared_cache() -> PathBuf {
    std::env::temp_dir().join(format!("talaria-runtime-tests-cache-{}", std::process::id()))
}

pub async fn call(rt: &Runtime, tool: &str, args: serde_json::Value) -> Result<CallOutput, ToolError> {
    rt.call(&ToolContext::new(tool, args)).await
}

/// Call `tool` of a given plugin.
pub async fn call_on(
    rt: &Runtime,
    plugin: &std::sync::Arc<talaria_runtime::Plugin>,
    tool: &str,
    args: serde_json::Value,
) -> Result<CallOutput, ToolError> {
    rt.call_plugin(plugin, &ToolContext::new(tool, args)).await
}

pub fn failed(r: Result<CallOutput, ToolError>) -> String {
    match r {
        Err(ToolError::Failed(m)) => m,
        other => panic!("expected a tool failure, got {other:?}"),
    }
}

pub fn crashed(r: Result<CallOutput, ToolError>) -> String {
    match r {
        Err(ToolError::Crashed(m)) => m,
        other => panic!("expected a crash, got {other:?}"),
    }
}

pub fn ok(r: Result<CallOutput, ToolError>) -> String {
    match r {
        Ok(out) => out.output,
        Err(e) => panic!("expected success, got {e:?}"),
    }
}

/// A model stand-in for the llm import: answers `text` and records every request.
pub struct Canned {
    pub text: String,
    pub seen: Mutex<Vec<(String, LlmRequest)>>,
}

impl Canned {
    pub fn new(text: &str) -> Arc<Self> {
        Arc::new(Self { text: text.to_string(), seen: Mutex::new(Vec::new()) })
    }

    pub fn seen(&self) -> Vec<(String, LlmRequest)> {
        self.seen.lock().expect("lock").clone()
    }
}

impl LlmBackend for Canned {
    fn complete<'a>(&'a self, plugin: &'a str, request: LlmRequest) -> BoxFuture<'a, Result<LlmCompletion, String>> {
        self.seen.lock().expect("lock").push((plugin.to_string(), request));
        Box::pin(async move {
            Ok(LlmCompletion { text: self.text.clone(), model: "canned-1".into(), input_tokens: 12, output_tokens: 1 })
        })
    }
}
