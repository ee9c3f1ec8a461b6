//! The `talaria:plugin@0.2.0` imports. The 0.1.0 ones (`crate::api`'s `since_v0_1_0`) call these.

use std::time::{Duration, Instant};

use talaria_protocol::Role;

use super::HostState;
use crate::host::api::since_v0_2_0::talaria::plugin::{config, kv, llm, log, process, secrets, types};
use crate::llm::{LlmRequest, MAX_LLM_CALLS};
use crate::logline::{Admit, MAX_LOG_CHARS, dropped_note};
use crate::process::{CommandError, CommandRequest};
use crate::record::{quoted, short, word};
use crate::shown::visible;

impl types::Host for HostState {}

impl log::Host for HostState {
    /// Log a line of the plugin's, escaped, within its rate (see [`crate::logline`]) and with
    /// known secret values redacted (see [`crate::leak`]).
    async fn log(&mut self, level: log::Level, message: String) {
        let admitted = self.env.log_lines.admit();
        if admitted == Admit::Drop && self.env.recorder.is_none() {
            return;
        }
        // Secret values out first (a line cut in the middle of one would hide it from the scan).
        let line = visible(&self.env.services.scan.redact(&message), MAX_LOG_CHARS);
        self.record("log", level_name(level), || {
            let outcome = match admitted {
                Admit::Pass { .. } => None,
                Admit::Drop => Some("dropped (rate limit)".to_string()),
            };
            (format!("\"{}\"", short(&line)), outcome)
        });
        let plugin = self.env.name.as_str();
        match admitted {
            Admit::Drop => return,
            Admit::Pass { dropped_before: 0 } => {}
            Admit::Pass { dropped_before } => tracing::warn!(plugin, "{}", dropped_note(plugin, dropped_before)),
        }
        match level {
            log::Level::Trace => tracing::trace!(plugin, "{line}"),
            log::Level::Debug => tracing::debug!(plugin, "{line}"),
            log::Level::Info => tracing::info!(plugin, "{line}"),
            log::Level::Warn => tracing::warn!(plugin, "{line}"),
            log::Level::Error => tracing::error!(plugin, "{line}"),
        }
    }
}

impl config::Host for HostState {
    async fn get(&mut self, key: String) -> Option<String> {
        let value = self.env.config.get(&key).and_then(|v| serde_json::to_string(v).ok());
        self.record("config", "get", || (word(&key), Some(value.as_deref().map_or("none".into(), short))));
        value
    }
}

fn level_name(level: log::Level) -> &'static str {
    match level {
        log::Level::Trace => "trace",
        log::Level::Debug => "debug",
        log::Level::Info => "info",
        log::Level::Warn => "warn",
        log::Level::Error => "error",
    }
}

/// The store for a plugin's key-value calls, once it has the grant. Takes the plugin's
/// environment, not the instance's state: what a call awaits must be shareable between threads.
async fn kv_store(env: &crate::host::PluginEnv) -> Result<&talaria_store::Store, String> {
    if !env.grants.has_kv() {
        let name = &env.name;
        return Err(format!(
            "the kv capability is not granted to plugin '{name}' (request `kv = true` in plugin.toml and grant it: `talaria plugins grant {name} kv`)"
        ));
    }
    env.adopt_legacy().await;
    env.services.store().await
}

impl HostState {
    /// A kv call's outcome as recorded: `ok` (or what `done` says of the value), `denied: …`
    /// without the grant, `failed: …` otherwise.
    fn kv_outcome<T>(&self, result: &Result<T, String>, done: impl FnOnce(&T) -> String) -> Option<String> {
        Some(match result {
            Ok(value) => done(value),
            Err(e) if !self.env.grants.has_kv() => format!("denied: {e}"),
            Err(e) => format!("failed: {e}"),
        })
    }
}

impl kv::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
        let env = self.env.clone();
        let result = match kv_store(&env).await {
            Ok(s) => s.kv_get(&env.kv_space, &key).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        self.record("kv", "get", || {
            let outcome = self.kv_outcome(&result, |v| v.as_ref().map_or("none".into(), |v| bytes(v.len())));
            (word(&key), outcome)
        });
        result
    }

    async fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), String> {
        let env = self.env.clone();
        let result = match kv_store(&env).await {
            Ok(s) => s.kv_set(&env.kv_space, &key, &value).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        self.record("kv", "set", || {
            (format!("{} ({})", word(&key), bytes(value.len())), self.kv_outcome(&result, |()| "ok".into()))
        });
        result
    }

    async fn delete(&mut self, key: String) -> Result<(), String> {
        let env = self.env.clone();
        let result = match kv_store(&env).await {
            Ok(s) => s.kv_delete(&env.kv_space, &key).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        self.record("kv", "delete", || (word(&key), self.kv_outcome(&result, |()| "ok".into())));
        result
    }

    async fn list_keys(&mut self, prefix: String) -> Result<Vec<String>, String> {
        let env = self.env.clone();
        let result = match kv_store(&env).await {
            Ok(s) => s.kv_keys(&env.kv_space, &prefix).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        self.record("kv", "list-keys", || {
            let outcome = self.kv_outcome(&result, |keys| match keys.len() {
                1 => "1 key".into(),
                n => format!("{n} keys"),
            });
            (quoted(&prefix), outcome)
        });
        result
    }

    async fn compare_and_set(
        &mut self,
        key: String,
        expected: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
    ) -> Result<bool, String> {
        let env = self.env.clone();
        let result = match kv_store(&env).await {
            Ok(s) => s
                .kv_compare_and_set(&env.kv_space, &key, expected.as_deref(), new.as_deref())
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        self.record("kv", "compare-and-set", || {
            let side = |v: &Option<Vec<u8>>| v.as_ref().map_or("none".into(), |v| bytes(v.len()));
            let args = format!("{} (expected {}, new {})", word(&key), side(&expected), side(&new));
            (args, self.kv_outcome(&result, |swapped| if *swapped { "swapped" } else { "unchanged" }.into()))
        });
        result
    }

    async fn increment(&mut self, key: String, delta: i64) -> Result<i64, String> {
        let env = self.env.clone();
        let result = match kv_store(&env).await {
            Ok(s) => s.kv_increment(&env.kv_space, &key, delta).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        self.record("kv", "increment", || {
            (format!("{} ({delta:+})", word(&key)), self.kv_outcome(&result, ToString::to_string))
        });
        result
    }

    async fn list_with_values(&mut self, prefix: String) -> Result<Vec<(String, Vec<u8>)>, String> {
        let env = self.env.clone();
        let result = match kv_store(&env).await {
            Ok(s) => s.kv_list(&env.kv_space, &prefix).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        self.record("kv", "list-with-values", || {
            let outcome = self.kv_outcome(&result, |pairs| {
                let total = pairs.iter().map(|(_, v)| v.len()).sum();
                match pairs.len() {
                    1 => format!("1 key, {}", bytes(total)),
                    n => format!("{n} keys, {}", bytes(total)),
                }
            });
            (quoted(&prefix), outcome)
        });
        result
    }
}

/// A value's size as recorded: `1 byte`, `2 bytes`.
fn bytes(n: usize) -> String {
    if n == 1 { "1 byte".into() } else { format!("{n} bytes") }
}

impl secrets::Host for HostState {
    async fn exists(&mut self, name: String) -> bool {
        let granted = self.env.grants.secret_host(&name).is_some();
        let exists = granted && self.env.secrets().value(&name).is_some();
        self.record("secrets", "exists", || {
            let outcome = if granted { exists.to_string() } else { "false (not granted)".into() };
            (word(&name), Some(outcome))
        });
        exists
    }
}

impl process::Host for HostState {
    async fn run(&mut self, cmd: process::Command) -> Result<process::Output, process::ProcessError> {
        let command = self.env.recorder.is_some().then(|| quoted(&cmd.command));
        let result = self.run_command(cmd).await;
        self.record("process", "run", || {
            let outcome = match &result {
                Ok(o) if o.timed_out => "timed out".to_string(),
                Ok(process::Output { exit_code: Some(code), .. }) => format!("exit {code}"),
                Ok(_) => "killed by a signal".to_string(),
                Err(process::ProcessError::Denied(m)) => format!("denied: {m}"),
                Err(process::ProcessError::Failed(m)) => format!("failed: {m}"),
            };
            (command.unwrap_or_default(), Some(outcome))
        });
        result
    }
}

impl HostState {
    async fn run_command(&mut self, cmd: process::Command) -> Result<process::Output, process::ProcessError> {
        let name = &self.env.name;
        if !self.env.grants.has_process() {
            return Err(process::ProcessError::Denied(format!(
                "the process capability is not granted to plugin '{name}' (grant it: `talaria plugins grant {name} process`)"
            )));
        }
        let request = CommandRequest {
            command: cmd.command,
            cwd: cmd.cwd,
            timeout: cmd.timeout_ms.map(|ms| Duration::from_millis(u64::from(ms))),
        };
        match self.env.services.process.run(name, &self.env.grants, &self.workspace, &self.caller, request).await {
            Ok(o) => Ok(process::Output {
                exit_code: o.exit_code,
                stdout: o.stdout,
                stderr: o.stderr,
                truncated: o.truncated,
                timed_out: o.timed_out,
            }),
            Err(CommandError::Denied(m)) => Err(process::ProcessError::Denied(m)),
            Err(CommandError::Failed(m)) => Err(process::ProcessError::Failed(m)),
        }
    }
}

pub(crate) fn role_from_wit(role: types::Role) -> Role {
    match role {
        types::Role::System => Role::System,
        types::Role::User => Role::User,
        types::Role::Assistant => Role::Assistant,
        types::Role::Tool => Role::Tool,
    }
}

impl llm::Host for HostState {
    async fn complete(&mut self, req: llm::Request) -> Result<llm::Completion, llm::LlmError> {
        let summary = self.env.recorder.is_some().then(|| {
            let n = req.messages.len();
            format!("purpose={} ({n} message{})", word(&req.purpose), if n == 1 { "" } else { "s" })
        });
        let result = self.complete_checked(req).await;
        self.record("llm", "complete", || {
            let outcome = match &result {
                Ok(c) => quoted(&c.text),
                Err(llm::LlmError::Denied(m)) => format!("denied: {m}"),
                Err(llm::LlmError::Invalid(m)) => format!("invalid: {m}"),
                Err(llm::LlmError::Failed(m)) => format!("failed: {m}"),
            };
            (summary.unwrap_or_default(), Some(outcome))
        });
        result
    }
}

impl HostState {
    async fn complete_checked(&mut self, req: llm::Request) -> Result<llm::Completion, llm::LlmError> {
        let name = self.env.name.clone();
        if !self.env.grants.has_llm() {
            return Err(llm::LlmError::Denied(format!(
                "the llm capability is not granted to plugin '{name}' (request `llm = true` in plugin.toml and grant it: `talaria plugins grant {name} llm`)"
            )));
        }
        let request = LlmRequest {
            purpose: req.purpose,
            messages: req.messages.into_iter().map(|m| (role_from_wit(m.role), m.content)).collect(),
            max_tokens: req.max_tokens,
            temperature: req.temperature,
        }
        .checked()
        .map_err(|e| llm::LlmError::Invalid(e.to_string()))?;
        let Some(backend) = self.env.services.llm.clone() else {
            return Err(llm::LlmError::Failed(
                "no model is configured, so plugins cannot use llm (configure one with `talaria setup`)".to_string(),
            ));
        };
        if self.llm_calls >= MAX_LLM_CALLS {
            return Err(llm::LlmError::Denied(format!(
                "plugin '{name}' used up its {MAX_LLM_CALLS} llm calls for this call"
            )));
        }
        self.llm_calls += 1;
        let purpose = request.purpose.clone();
        let started = Instant::now();
        match backend.complete(&name, request).await {
            Ok(c) => {
                tracing::info!(
                    plugin = %name,
                    purpose = %purpose,
                    model = %c.model,
                    input_tokens = c.input_tokens,
                    output_tokens = c.output_tokens,
                    elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "plugin llm completion"
                );
                Ok(llm::Completion {
                    text: c.text,
                    model: c.model,
                    input_tokens: c.input_tokens,
                    output_tokens: c.output_tokens,
                })
            }
            Err(e) => {
                tracing::warn!(plugin = %name, purpose = %purpose, "plugin llm completion failed: {e}");
                Err(llm::LlmError::Failed(e))
            }
        }
    }
}
