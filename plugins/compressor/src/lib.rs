//! The bundled context engine: Hermes' default compressor as a talaria plugin.
//!
//! When the prompt reaches the threshold (half the window by default, never below 64K tokens
//! unless that is above 85% of the window), the host asks for a rewrite: the first messages and
//! a recent tail stay verbatim, large old tool results are cleared, and everything between is
//! replaced by one summary from the auxiliary model, under fixed headings (Goal, Constraints &
//! Preferences, Progress, Key Decisions, Relevant Files, Next Steps, Critical Context). Later
//! passes update that summary. When the model fails, a fixed fallback summary keeps compression
//! working, and the model is left alone for a while (60/300/900 s).
//!
//! Modules: `config` (settings), `plan` (cut points, token estimates), `summary` (prompt,
//! fallback, the summary message), `sanitize` (conversation validity), `backoff`, and
//! `engine` (the steps, over a `engine::Host` seam). This file only connects that
//! seam to the SDK: `llm`, `kv`, the clock and `log`.
//!
//! ```toml
//! [context]
//! engine = "compressor"
//!
//! [plugins.compressor.config]
//! threshold = 0.5        # share of the window
//! min_tokens = 64000     # not before this many tokens (unless above 85% of the window)
//! protect_first_n = 3
//! protect_last_n = 20
//! tail_ratio = 0.2       # the kept tail may fill this share of the window
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

use talaria_sdk::context::{CompressRequest, Compressed, ContextEngine, Status};
use talaria_sdk::llm::{self, Completion, LlmError, Request};
use talaria_sdk::message::Session;
use talaria_sdk::{kv, log};

pub mod backoff;
pub mod config;
pub mod engine;
pub mod plan;
pub mod sanitize;
pub mod summary;

#[cfg(test)]
mod tests;

use config::Config;
use engine::Host;

struct Compressor;

impl ContextEngine for Compressor {
    fn should_compress(status: &Status, _session: &Session) -> bool {
        engine::should_compress(status, &settings(false))
    }

    fn compress(request: CompressRequest) -> Result<Compressed, String> {
        engine::compress(request, &settings(true), &mut SdkHost)
    }

    fn report(status: &Status, session: &Session) -> Vec<(String, String)> {
        engine::report(status, &session.session_id, &settings(true), &mut SdkHost)
    }
}

talaria_sdk::export_context_engine!(Compressor);

/// The operator's settings; warnings about ignored values go to the log when `warn`.
fn settings(warn: bool) -> Config {
    let (config, warnings) = Config::resolve(talaria_sdk::config::get);
    if warn {
        warnings.iter().for_each(|w| log::warn(w));
    }
    config
}

/// The host seam over the real imports. Never used by native tests.
struct SdkHost;

impl Host for SdkHost {
    fn complete(&mut self, request: &Request) -> Result<Completion, LlmError> {
        llm::complete(request)
    }

    fn now(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
    }

    fn kv_get(&mut self, key: &str) -> Option<Vec<u8>> {
        kv::get(key).unwrap_or_else(|e| {
            log::warn(&format!("reading {key}: {e}"));
            None
        })
    }

    fn kv_set(&mut self, key: &str, value: &[u8]) {
        if let Err(e) = kv::set(key, value) {
            log::warn(&format!("writing {key}: {e}"));
        }
    }

    fn kv_delete(&mut self, key: &str) {
        if let Err(e) = kv::delete(key) {
            log::warn(&format!("deleting {key}: {e}"));
        }
    }

    fn warn(&mut self, message: &str) {
        log::warn(message);
    }
}
