//! API 0.1.0: tool plugins only. Its imports are 0.2.0's under other type names: each converts
//! to its 0.2.0 twin and calls it, so the checks exist once. Its `tools` export has its own
//! call context and error types.

use wasmtime::Store;
use wasmtime::component::Instance;

use super::CallInfo;
use super::since_v0_2_0::talaria::plugin as v2;
use crate::host::HostState;
use crate::host::api::GuestError;
use crate::host::api::RawSpec;

wasmtime::component::bindgen!({
    path: "../../wit/v0.1.0",
    world: "tool-plugin",
    imports: { default: async },
    exports: { default: async },
});

pub(super) use exports::talaria::plugin::tools::GuestIndices as ToolsIndices;
use talaria::plugin::{config, kv, log, process, secrets, types};

pub(super) async fn list(
    ix: &ToolsIndices,
    store: &mut Store<HostState>,
    instance: &Instance,
) -> wasmtime::Result<Vec<RawSpec>> {
    let specs = ix.load(&mut *store, instance)?.call_list(&mut *store).await?;
    Ok(specs
        .into_iter()
        .map(|s| RawSpec { name: s.name, description: s.description, parameters: s.parameters })
        .collect())
}

pub(super) async fn call(
    ix: &ToolsIndices,
    store: &mut Store<HostState>,
    instance: &Instance,
    tool: &str,
    args_json: &str,
    info: CallInfo,
) -> wasmtime::Result<Result<String, GuestError>> {
    let ctx = types::CallContext { session_id: info.session_id, call_id: info.call_id, workspace: info.workspace };
    let out = ix.load(&mut *store, instance)?.call_call(&mut *store, tool, args_json, &ctx).await?;
    Ok(out.map_err(|e| match e {
        types::ToolError::InvalidArgs(m) => GuestError::InvalidArgs(m),
        types::ToolError::UnknownTool(m) => GuestError::UnknownTool(m),
        types::ToolError::Failed(m) => GuestError::Failed(m),
    }))
}

impl types::Host for HostState {}

impl log::Host for HostState {
    async fn log(&mut self, level: log::Level, message: String) {
        let level = match level {
            log::Level::Trace => v2::log::Level::Trace,
            log::Level::Debug => v2::log::Level::Debug,
            log::Level::Info => v2::log::Level::Info,
            log::Level::Warn => v2::log::Level::Warn,
            log::Level::Error => v2::log::Level::Error,
        };
        v2::log::Host::log(self, level, message).await;
    }
}

impl config::Host for HostState {
    async fn get(&mut self, key: String) -> Option<String> {
        v2::config::Host::get(self, key).await
    }
}

impl kv::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
        v2::kv::Host::get(self, key).await
    }

    async fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), String> {
        v2::kv::Host::set(self, key, value).await
    }

    async fn delete(&mut self, key: String) -> Result<(), String> {
        v2::kv::Host::delete(self, key).await
    }

    async fn list_keys(&mut self, prefix: String) -> Result<Vec<String>, String> {
        v2::kv::Host::list_keys(self, prefix).await
    }
}

impl secrets::Host for HostState {
    async fn exists(&mut self, name: String) -> bool {
        v2::secrets::Host::exists(self, name).await
    }
}

impl process::Host for HostState {
    async fn run(&mut self, cmd: process::Command) -> Result<process::Output, process::ProcessError> {
        let cmd = v2::process::Command { command: cmd.command, cwd: cmd.cwd, timeout_ms: cmd.timeout_ms };
        match v2::process::Host::run(self, cmd).await {
            Ok(o) => Ok(process::Output {
                exit_code: o.exit_code,
                stdout: o.stdout,
                stderr: o.stderr,
                truncated: o.truncated,
                timed_out: o.timed_out,
            }),
            Err(v2::process::ProcessError::Denied(m)) => Err(process::ProcessError::Denied(m)),
            Err(v2::process::ProcessError::Failed(m)) => Err(process::ProcessError::Failed(m)),
        }
    }
}
