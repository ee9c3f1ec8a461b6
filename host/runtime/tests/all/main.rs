//! Sandbox tests: a real misbehaving component (tests/plugins/evil) in the real runtime. Each test
//! tries one escape or failure and asserts the exact refusal.

mod loading;
mod sandbox;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_protocol::ToolError;
use talaria_runtime::{CallContext, CallOutput, Runtime, RuntimeConfig, Secrets, Unattended};
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

    pub fn config(&self) -> RuntimeConfig {
        let mut config = RuntimeConfig::new(self.home.path().to_path_buf(), self.ws());
        config.secrets = Some(Secrets::from_pairs([("WEATHER_API_KEY", "k-123-secret")]));
        config.cache_dir = Some(shared_cache());
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

/// One compile cache for the whole test binary, so the evil plugin compiles once.
pub fn shared_cache() -> PathBuf {
    std::env::temp_dir().join(format!("talaria-runtime-tests-cache-{}", std::process::id()))
}

pub async fn call(rt: &Runtime, tool: &str, args: serde_json::Value) -> Result<CallOutput, ToolError> {
    rt.call(tool, &args.to_string(), CallContext::default()).await
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
