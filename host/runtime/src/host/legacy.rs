//! The `talaria:plugin@0.1.0` imports: the same checks as 0.2.0, reached by converting the
//! 0.1.0 types to their 0.2.0 twins.

use super::HostState;
use super::bindings::v1::talaria::plugin::{config, kv, log, process, secrets, types};
use super::bindings::v2::talaria::plugin as v2;

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
