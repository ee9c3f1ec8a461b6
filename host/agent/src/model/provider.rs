//! Providers: which endpoint, which wire format, which model, which key.
//!
//! A [`Provider`] is fully resolved: nothing is looked up when a call is made. Build one from a
//! [`Preset`] name with [`Provider::preset`], or from configuration with [`Provider::resolve`],
//! which applies the selection rules (explicit `api_mode` > the preset's format > the base URL >
//! chat completions) and explains exactly how to fix a missing key or URL.
//!
//! ```
//! use talaria_agent::model::{ApiMode, Provider, ProviderSpec};
//! let spec = ProviderSpec {
//!     provider: Some("anthropic".into()),
//!     model: "claude-sonnet-4-5".into(),
//!     ..ProviderSpec::default()
//! };
//! let env = |name: &str| (name == "ANTHROPIC_API_KEY").then(|| "sk-ant-test".to_string());
//! let provider = Provider::resolve(spec, env).expect("resolves");
//! assert_eq!(provider.api_mode, ApiMode::AnthropicMessages);
//! assert_eq!(provider.base_url, "https://api.anthropic.com/v1");
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiMode {
    /// OpenAI Chat Completions (`/chat/completions`), spoken by almost every endpoint.
    ChatCompletions,
    /// Anthropic Messages (`/messages`).
    AnthropicMessages,
    /// OpenAI Responses (`/responses`); `codex_responses` is accepted as another name.
    #[serde(alias = "codex_responses")]
    Responses,
}

impl ApiMode {
    /// The configuration name (`chat_completions`, `anthropic_messages`, `responses`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ChatCompletions => "chat_completions",
            Self::AnthropicMessages => "anthropic_messages",
            Self::Responses => "responses",
        }
    }

    /// The inverse of [`ApiMode::as_str`], also accepting `codex_responses`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "chat_completions" => Some(Self::ChatCompletions),
            "anthropic_messages" => Some(Self::AnthropicMessages),
            "responses" | "codex_responses" => Some(Self::Responses),
            _ => None,
        }
    }

    /// The format a base URL suggests: hosts or paths naming Anthropic speak Anthropic Messages
    /// (`api.anthropic.com`, `https://api.deepseek.com/anthropic`); anything else chat completions.
    pub fn guess_from_url(base_url: &str) -> Self {
        let rest = base_url.split_once("://").map_or(base_url, |(_, rest)| rest).to_ascii_lowercase();
        let (host, path) = rest.split_once('/').unwrap_or((rest.as_str(), ""));
        if host.contains("anthropic") || path.split('/').any(|segment| segment == "anthropic") {
            Self::AnthropicMessages
        } else {
            Self::ChatCompletions
        }
    }
}

impl fmt::Display for ApiMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApiMode {
    type Err = ProviderError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s).ok_or_else(|| ProviderError::UnknownApiMode(s.to_string()))
    }
}

/// A provider talaria knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    pub name: &'static str,
    /// `None` for `custom`: the user must give one.
    pub base_url: Option<&'static str>,
    /// The environment variable holding the key, if the provider has a conventional one.
    pub key_env: Option<&'static str>,
    /// Whether a call without a key is pointless (hosted APIs) or normal (local servers).
    pub key_required: bool,
    /// `None` for `custom`: the format then follows from the base URL.
    pub api_mode: Option<ApiMode>,
}

/// Every known provider, in the order error messages list them.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "openai",
        base_url: Some("https://api.openai.com/v1"),
        key_env: Some("OPENAI_API_KEY"),
        key_required: true,
        api_mode: Some(ApiMode::ChatCompletions),
    },
    Preset {
        name: "openrouter",
        base_url: Some("https://openrouter.ai/api/v1"),
        key_env: Some("OPENROUTER_API_KEY"),
        key_required: true,
        api_mode: Some(ApiMode::ChatCompletions),
    },
    Preset {
        name: "anthropic",
        base_url: Some("https://api.anthropic.com/v1"),
        key_env: Some("ANTHROPIC_API_KEY"),
        key_required: true,
        api_mode: Some(ApiMode::AnthropicMessages),
    },
    Preset {
        name: "ollama",
        base_url: Some("http://localhost:11434/v1"),
        key_env: None,
        key_required: false,
        api_mode: Some(ApiMode::ChatCompletions),
    },
    Preset { name: "custom", base_url: None, key_env: None, key_required: false, api_mode: None },
];

impl Preset {
    /// The preset called `name` (case-insensitive).
    pub fn find(name: &str) -> Option<&'static Preset> {
        PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(name.trim()))
    }
}

/// The names of all presets, comma-separated, for messages.
fn preset_names() -> String {
    PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

/// Why a provider could not be set up. Every message says what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("unknown provider `{name}`: known providers are {known} (use `custom` with a base_url for any other OpenAI-compatible endpoint)", known = preset_names())]
    UnknownPreset { name: String },
    #[error("no provider chosen: pass --provider (one of {known}) or set `provider` under [model] in config.toml", known = preset_names())]
    MissingProvider,
    #[error("provider `{provider}` needs a model: pass --model NAME or set `model` under [model] in config.toml")]
    MissingModel { provider: String },
    #[error(
        "provider `{provider}` needs a base_url: pass --base-url http://localhost:11434/v1 or set `base_url` under [model] in config.toml"
    )]
    MissingBaseUrl { provider: String },
    #[error(
        "base_url `{url}` of provider `{provider}` is not an http:// or https:// URL: fix --base-url or `base_url` under [model] in config.toml"
    )]
    InvalidBaseUrl { provider: String, url: String },
    #[error(
        "provider `{provider}` needs an API key: set {key_env} in your environment or in $TALARIA_HOME/.env, or set `key_env` under [model] in config.toml"
    )]
    MissingKey { provider: String, key_env: String },
    #[error("unknown api_mode `{0}`: use chat_completions, anthropic_messages or responses")]
    UnknownApiMode(String),
    #[error("unknown tool_choice `{0}`: use auto, required, none or off")]
    UnknownToolChoice(String),
    #[error("{key} = {value} is not a number of seconds above 0: fix `{key}` in config.toml")]
    InvalidTimeout { key: &'static str, value: String },
}

/// What a request says about the tools it offers (sent only when it offers some).
///
/// OpenAI documents `auto` as the default when tools are present, but some servers need it
/// said: llama-cpp-python's server treats a request without `tool_choice` as `none` and never
/// shows the tools to the model. `off` sends no `tool_choice` at all, for servers that reject it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (`"auto"`; Anthropic `{"type": "auto"}`).
    #[default]
    Auto,
    /// The model must call a tool (`"required"`; Anthropic `{"type": "any"}`).
    Required,
    /// The model must not call tools (`"none"`; Anthropic `{"type": "none"}`).
    None,
    /// No `tool_choice` in the request: the server's default applies.
    Off,
}

impl ToolChoice {
    /// The configuration name: `auto`, `required`, `none`, `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Required => "required",
            Self::None => "none",
            Self::Off => "off",
        }
    }

    /// The inverse of [`ToolChoice::as_str`].
    ///
    /// # Errors
    /// [`ProviderError::UnknownToolChoice`] naming the valid values.
    pub fn parse(s: &str) -> Result<Self, ProviderError> {
        match s.trim() {
            "auto" => Ok(Self::Auto),
            "required" => Ok(Self::Required),
            "none" => Ok(Self::None),
            "off" => Ok(Self::Off),
            other => Err(ProviderError::UnknownToolChoice(other.to_string())),
        }
    }
}

/// The phases of a call a timeout can end, each with its configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeoutPhase {
    /// The TCP connection and the TLS handshake.
    Connect,
    /// From sending the request to the first byte of the answer's body.
    FirstByte,
    /// Between two pieces of the answer's body.
    Idle,
    /// The whole call.
    Total,
}

impl TimeoutPhase {
    /// The key under `[model]` (or a `[[fallback_providers]]` entry) that sets this limit.
    pub fn key(self) -> &'static str {
        match self {
            Self::Connect => "connect_timeout_secs",
            Self::FirstByte => "first_byte_timeout_secs",
            Self::Idle => "idle_timeout_secs",
            Self::Total => "request_timeout_secs",
        }
    }
}

/// How long one call may take, phase by phase; every limit is named by its key in messages
/// ("no reply from URL within 120 s (first_byte_timeout_secs)"). A connect limit that runs out
/// is retried like any transient failure; the others end a request the server had accepted
/// and may still be working on, so the chain moves on at once unless the provider says
/// [`Provider::retry_timeouts`]. A provider that never answers thus costs one
/// `connect + first_byte` (at most `(retries + 1)` of them, plus the backoff, with
/// `retry_timeouts`) before the chain moves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP connection and TLS handshake (`connect_timeout_secs`, default 10 s).
    pub connect: Duration,
    /// From sending the request to the first byte of the answer (`first_byte_timeout_secs`,
    /// default 120 s): the provider's queue and its reading of the prompt. A streamed answer
    /// starts with its first event; a whole (non-streamed) one arrives only when it is
    /// complete, so then this bounds the generation too.
    pub first_byte: Duration,
    /// Longest silence between two pieces of a streamed answer (`idle_timeout_secs`,
    /// default 60 s). Keep-alive comments count as pieces.
    pub idle: Duration,
    /// The whole call, the streamed answer included (`request_timeout_secs`, default 600 s).
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(120),
            idle: Duration::from_secs(60),
            total: Duration::from_secs(600),
        }
    }
}

impl Timeouts {
    /// The limit for `phase`.
    pub fn of(&self, phase: TimeoutPhase) -> Duration {
        match phase {
            TimeoutPhase::Connect => self.connect,
            TimeoutPhase::FirstByte => self.first_byte,
            TimeoutPhase::Idle => self.idle,
            TimeoutPhase::Total => self.total,
        }
    }

    /// A configured number of seconds (fractions allowed) as a limit for `phase`.
    ///
    /// # Errors
    /// [`ProviderError::InvalidTimeout`] for zero, negative, infinite or NaN values.
    ///
    /// ```
    /// use talaria_agent::model::{TimeoutPhase, Timeouts};
    /// assert_eq!(Timeouts::secs(TimeoutPhase::Idle, 0.5).expect("valid").as_millis(), 500);
    /// assert!(Timeouts::secs(TimeoutPhase::Idle, 0.0).is_err());
    /// ```
    pub fn secs(phase: TimeoutPhase, secs: f64) -> Result<Duration, ProviderError> {
        Duration::try_from_secs_f64(secs)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| ProviderError::InvalidTimeout { key: phase.key(), value: secs.to_string() })
    }
}

/// A duration as messages show it: `120 s`, `0.5 s`.
pub(crate) fn seconds(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs.fract() == 0.0 { format!("{} s", d.as_secs()) } else { format!("{} s", (secs * 1000.0).round() / 1000.0) }
}

/// What configuration says about a provider, before resolution (`[model]` or one entry of
/// `fallback_providers`). Only `model` is required; see [`Provider::resolve`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderSpec {
    /// A preset name; `None` with a `base_url` means `custom`.
    pub provider: Option<String>,
    pub model: String,
    pub base_url: Option<String>,
    pub api_mode: Option<ApiMode>,
    /// The environment variable holding the key, overriding the preset's.
    pub key_env: Option<String>,
    pub max_tokens: Option<u32>,
    /// Limits overriding [`Timeouts::default`], phase by phase.
    pub connect_timeout: Option<Duration>,
    pub first_byte_timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub request_timeout: Option<Duration>,
    /// Default [`ToolChoice::Auto`].
    pub tool_choice: Option<ToolChoice>,
    /// Default `false`; see [`Provider::retry_timeouts`].
    pub retry_timeouts: Option<bool>,
    /// Whether the model takes images; default: [`takes_images`] guesses from its name.
    pub vision: Option<bool>,
}

/// Whether `model` takes images: as `configured` (`[model] vision`) says, else guessed from
/// its name.
pub fn takes_images(model: &str, configured: Option<bool>) -> bool {
    if let Some(v) = configured {
        return v;
    }
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    let known = [
        "gpt-4o",
        "gpt-4.1",
        "gpt-5",
        "o3",
        "o4",
        "claude",
        "gemini",
        "vision",
        "-vl",
        "llava",
        "pixtral",
        "gemma3",
        "llama4",
        "llama-4",
        "minicpm-v",
        "moondream",
    ];
    known.iter().any(|k| name.contains(k))
}

/// The output-token limit a whole (non-streamed) reply gets when `max_tokens` is not set: such
/// a reply is paid for in full before the first byte arrives, and a local server does not stop
/// generating when the client gives up on it, so it must not be unbounded.
pub const WHOLE_REPLY_MAX_TOKENS: u32 = 4096;

/// A resolved endpoint: everything one call needs.
#[derive(Clone, PartialEq, Eq)]
pub struct Provider {
    /// The preset name (`openai`, `custom`, ...), used in messages.
    pub name: String,
    pub api_mode: ApiMode,
    /// Without a trailing slash: `https://api.openai.com/v1`.
    pub base_url: String,
    pub model: String,
    /// `None`: no authentication header is sent.
    pub api_key: Option<String>,
    /// Where the key came from, for messages.
    pub key_env: Option<String>,
    /// Maximum output tokens, as configured; [`Provider::output_limit`] says what a request
    /// sends when this is `None`.
    pub max_tokens: Option<u32>,
    /// How long each phase of a call may take.
    pub timeouts: Timeouts,
    /// Send a request again after a first-byte, idle or total limit ran out (`retry_timeouts`,
    /// default `false`). Such a request had been accepted, and a server may go on generating
    /// its answer after the client leaves (llama-cpp-python does), so by default the chain
    /// moves to the next provider instead of queueing the same work again.
    pub retry_timeouts: bool,
    /// What requests that offer tools say about them.
    pub tool_choice: ToolChoice,
    /// Whether the model takes images ([`takes_images`]): images tools returned go to it, or
    /// are named in a note.
    pub vision: bool,
    /// Sent with every request, after the authentication headers.
    pub extra_headers: Vec<(String, String)>,
}

impl fmt::Debug for Provider {
    /// Never prints the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("api_mode", &self.api_mode)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("key_env", &self.key_env)
            .field("max_tokens", &self.max_tokens)
            .field("timeouts", &self.timeouts)
            .field("retry_timeouts", &self.retry_timeouts)
            .field("vision", &self.vision)
            .field("tool_choice", &self.tool_choice)
            .field("extra_headers", &self.extra_headers.iter().map(|(name, _)| name).collect::<Vec<_>>())
            .finish()
    }
}

impl Provider {
    /// A preset with its default key variable read from the process environment.
    ///
    /// # Errors
    /// An unknown preset, no base URL for `custom`, or a hosted provider whose key variable is unset.
    pub fn preset(name: &str, model: &str, base_url_override: Option<&str>) -> Result<Provider, ProviderError> {
        let spec = ProviderSpec {
            provider: Some(name.to_string()),
            model: model.to_string(),
            base_url: base_url_override.map(str::to_string),
            ..ProviderSpec::default()
        };
        Self::resolve(spec, |var| std::env::var(var).ok())
    }

    /// Resolves configuration into a provider; `env` looks up environment variables (the process
    /// environment merged with `$TALARIA_HOME/.env`, as the caller sees fit).
    ///
    /// - provider: `spec.provider`; none given with a `base_url` means `custom`.
    /// - base URL: `spec.base_url`, else the preset's; trailing slashes are dropped.
    /// - wire format: `spec.api_mode` > the preset's > [`ApiMode::guess_from_url`] (`custom` only).
    /// - key: the variable named by `spec.key_env`, else the preset's; an empty value counts as
    ///   unset. A missing key is an error for hosted presets and whenever `key_env` was given
    ///   explicitly; `ollama` and `custom` otherwise go without authentication.
    ///
    /// # Errors
    /// A [`ProviderError`] whose message says what to set.
    pub fn resolve(spec: ProviderSpec, env: impl Fn(&str) -> Option<String>) -> Result<Provider, ProviderError> {
        let preset = match (&spec.provider, &spec.base_url) {
            (Some(name), _) => {
                Preset::find(name).ok_or_else(|| ProviderError::UnknownPreset { name: name.trim().to_string() })?
            }
            (None, Some(_)) => Preset::find("custom").ok_or(ProviderError::MissingProvider)?,
            (None, None) => return Err(ProviderError::MissingProvider),
        };
        let name = preset.name.to_string();
        let model = spec.model.trim().to_string();
        if model.is_empty() {
            return Err(ProviderError::MissingModel { provider: name });
        }
        let base_url = spec
            .base_url
            .as_deref()
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .or(preset.base_url)
            .ok_or_else(|| ProviderError::MissingBaseUrl { provider: name.clone() })?
            .trim_end_matches('/')
            .to_string();
        let lower = base_url.to_ascii_lowercase();
        let has_host = lower
            .strip_prefix("https://")
            .or_else(|| lower.strip_prefix("http://"))
            .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
        if !has_host {
            return Err(ProviderError::InvalidBaseUrl { provider: name, url: base_url });
        }
        let api_mode = spec.api_mode.or(preset.api_mode).unwrap_or_else(|| ApiMode::guess_from_url(&base_url));
        let explicit_key_env = spec.key_env.as_deref().map(str::trim).filter(|v| !v.is_empty());
        let key_env = explicit_key_env.or(preset.key_env).map(str::to_string);
        let api_key = key_env.as_deref().and_then(&env).map(|k| k.trim().to_string()).filter(|k| !k.is_empty());
        if api_key.is_none() && (preset.key_required || explicit_key_env.is_some()) {
            let key_env = key_env.unwrap_or_else(|| format!("{}_API_KEY", name.to_ascii_uppercase()));
            return Err(ProviderError::MissingKey { provider: name, key_env });
        }
        let defaults = Timeouts::default();
        let vision = takes_images(&model, spec.vision);
        Ok(Provider {
            name,
            api_mode,
            base_url,
            model,
            api_key,
            key_env,
            max_tokens: spec.max_tokens,
            timeouts: Timeouts {
                connect: spec.connect_timeout.unwrap_or(defaults.connect),
                first_byte: spec.first_byte_timeout.unwrap_or(defaults.first_byte),
                idle: spec.idle_timeout.unwrap_or(defaults.idle),
                total: spec.request_timeout.unwrap_or(defaults.total),
            },
            retry_timeouts: spec.retry_timeouts.unwrap_or(false),
            tool_choice: spec.tool_choice.unwrap_or_default(),
            vision,
            extra_headers: Vec::new(),
        })
    }

    /// The output-token limit a request sends: `max_tokens` when configured; otherwise 8192
    /// for Anthropic Messages (which requires one), [`WHOLE_REPLY_MAX_TOKENS`] for a whole
    /// (non-streamed) reply, and none for a streamed one (the server's default applies; a
    /// streamed reply can be watched and stopped).
    ///
    /// ```
    /// use talaria_agent::model::{Provider, WHOLE_REPLY_MAX_TOKENS};
    /// let mut p = Provider::preset("ollama", "llama3.2", None).expect("preset");
    /// assert_eq!((p.output_limit(true), p.output_limit(false)), (None, Some(WHOLE_REPLY_MAX_TOKENS)));
    /// p.max_tokens = Some(20_000);
    /// assert_eq!((p.output_limit(true), p.output_limit(false)), (Some(20_000), Some(20_000)));
    /// ```
    pub fn output_limit(&self, stream: bool) -> Option<u32> {
        match (self.max_tokens, self.api_mode) {
            (Some(max), _) => Some(max),
            (None, ApiMode::AnthropicMessages) => Some(super::anthropic::DEFAULT_MAX_TOKENS),
            (None, ApiMode::ChatCompletions | ApiMode::Responses) => (!stream).then_some(WHOLE_REPLY_MAX_TOKENS),
        }
    }

    /// `name/model`, as notices show it: `openai/gpt-4o`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.name, self.model)
    }

    /// `base_url` joined with an endpoint path (`chat/completions`).
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base_url.trim_end_matches('/'), path.trim_start_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    fn spec(provider: Option<&str>, model: &str) -> ProviderSpec {
        ProviderSpec { provider: provider.map(str::to_string), model: model.into(), ..ProviderSpec::default() }
    }

    #[test]
    fn api_mode_parses_config_names_and_the_codex_alias() {
        assert_eq!(ApiMode::parse("chat_completions"), Some(ApiMode::ChatCompletions));
        assert_eq!(ApiMode::parse("anthropic_messages"), Some(ApiMode::AnthropicMessages));
        assert_eq!(ApiMode::parse("responses"), Some(ApiMode::Responses));
        assert_eq!(ApiMode::parse("codex_responses"), Some(ApiMode::Responses));
        assert_eq!("codex_responses".parse::<ApiMode>(), Ok(ApiMode::Responses));
        let err = "grpc".parse::<ApiMode>().expect_err("unknown");
        assert!(err.to_string().contains("use chat_completions, anthropic_messages or responses"), "{err}");
        let from_json: ApiMode = serde_json::from_str("\"codex_responses\"").expect("serde alias");
        assert_eq!(from_json, ApiMode::Responses);
        assert_eq!(serde_json::to_string(&ApiMode::AnthropicMessages).expect("json"), "\"anthropic_messages\"");
    }

    #[test]
    fn presets_fill_url_format_and_key() {
        let p =
            Provider::resolve(spec(Some("openai"), "gpt-4o"), env_with(&[("OPENAI_API_KEY", "sk-1")])).expect("openai");
        assert_eq!(p.base_url, "https://api.openai.com/v1");
        assert_eq!(p.api_mode, ApiMode::ChatCompletions);
        assert_eq!(p.api_key.as_deref(), Some("sk-1"));
        assert_eq!(p.key_env.as_deref(), Some("OPENAI_API_KEY"));
        assert_eq!(p.timeouts, Timeouts::default());
        assert_eq!(p.timeouts.total, Duration::from_secs(600));
        assert_eq!(p.tool_choice, ToolChoice::Auto);
        assert_eq!(p.label(), "openai/gpt-4o");
        assert_eq!(p.url("/chat/completions"), "https://api.openai.com/v1/chat/completions");

        let a = Provider::resolve(spec(Some("Anthropic"), "claude"), env_with(&[("ANTHROPIC_API_KEY", "k")]))
            .expect("anthropic");
        assert_eq!(a.api_mode, ApiMode::AnthropicMessages);
        assert_eq!(a.name, "anthropic");

        let o = Provider::resolve(spec(Some("ollama"), "llama3.2"), env_with(&[])).expect("ollama needs no key");
        assert_eq!(o.api_key, None);
        assert_eq!(o.base_url, "http://localhost:11434/v1");
        assert!(!format!("{a:?}").contains("\"k\""), "Debug never shows the key");
    }

    #[test]
    fn selection_order_is_explicit_then_preset_then_url_then_default() {
        let mut s = spec(Some("openai"), "m");
        s.api_mode = Some(ApiMode::Responses);
        let p = Provider::resolve(s, env_with(&[("OPENAI_API_KEY", "k")])).expect("explicit");
        assert_eq!(p.api_mode, ApiMode::Responses);

        // The preset wins over the URL.
        let mut s = spec(Some("openai"), "m");
        s.base_url = Some("https://proxy.anthropic.example/v1/".into());
        let p = Provider::resolve(s, env_with(&[("OPENAI_API_KEY", "k")])).expect("preset");
        assert_eq!(p.api_mode, ApiMode::ChatCompletions);
        assert_eq!(p.base_url, "https://proxy.anthropic.example/v1");

        // custom: the URL decides.
        let mut s = spec(None, "m");
        s.base_url = Some("https://api.deepseek.com/anthropic".into());
        let p = Provider::resolve(s, env_with(&[])).expect("custom by url");
        assert_eq!((p.name.as_str(), p.api_mode), ("custom", ApiMode::AnthropicMessages));

        let mut s = spec(Some("custom"), "m");
        s.base_url = Some("http://127.0.0.1:8080/v1".into());
        let p = Provider::resolve(s, env_with(&[])).expect("custom default");
        assert_eq!(p.api_mode, ApiMode::ChatCompletions);
        assert_eq!(p.api_key, None);
    }

    #[test]
    fn errors_say_how_to_fix_things() {
        let err = Provider::resolve(spec(Some("openai"), "gpt-4o"), env_with(&[])).expect_err("no key");
        assert_eq!(
            err.to_string(),
            "provider `openai` needs an API key: set OPENAI_API_KEY in your environment or in $TALARIA_HOME/.env, \
             or set `key_env` under [model] in config.toml"
        );
        let err = Provider::resolve(spec(Some("openai"), "gpt-4o"), env_with(&[("OPENAI_API_KEY", "  ")]))
            .expect_err("blank key is no key");
        assert!(matches!(err, ProviderError::MissingKey { .. }));

        let err = Provider::resolve(spec(Some("custom"), "m"), env_with(&[])).expect_err("no url");
        assert_eq!(
            err.to_string(),
            "provider `custom` needs a base_url: pass --base-url http://localhost:11434/v1 or set `base_url` under \
             [model] in config.toml"
        );

        let err = Provider::resolve(spec(Some("gemini"), "m"), env_with(&[])).expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown provider `gemini`: known providers are openai, openrouter, anthropic, ollama, custom (use \
             `custom` with a base_url for any other OpenAI-compatible endpoint)"
        );

        let err = Provider::resolve(spec(None, "m"), env_with(&[])).expect_err("nothing");
        assert_eq!(err, ProviderError::MissingProvider);
        let err = Provider::resolve(spec(Some("openai"), " "), env_with(&[])).expect_err("no model");
        assert!(err.to_string().contains("pass --model NAME"), "{err}");

        let mut s = spec(Some("custom"), "m");
        s.base_url = Some("localhost:11434".into());
        let err = Provider::resolve(s, env_with(&[])).expect_err("no scheme");
        assert!(matches!(err, ProviderError::InvalidBaseUrl { .. }), "{err}");

        // A key variable named explicitly must be set, even for a local server.
        let mut s = spec(Some("ollama"), "m");
        s.key_env = Some("MY_OLLAMA_KEY".into());
        let err = Provider::resolve(s, env_with(&[])).expect_err("explicit key_env");
        assert!(err.to_string().contains("set MY_OLLAMA_KEY"), "{err}");
    }

    #[test]
    fn key_env_override_reads_another_variable() {
        let mut s = spec(Some("openrouter"), "x/y");
        s.key_env = Some("WORK_OR_KEY".into());
        s.max_tokens = Some(100);
        let p = Provider::resolve(s, env_with(&[("WORK_OR_KEY", "k2"), ("OPENROUTER_API_KEY", "k1")])).expect("ok");
        assert_eq!(p.api_key.as_deref(), Some("k2"));
        assert_eq!(p.max_tokens, Some(100));
    }

    #[test]
    fn timeouts_and_tool_choice_come_from_the_spec() {
        let mut s = spec(Some("ollama"), "m");
        s.first_byte_timeout = Some(Duration::from_millis(1500));
        s.tool_choice = Some(ToolChoice::Off);
        s.retry_timeouts = Some(true);
        let p = Provider::resolve(s, env_with(&[])).expect("ok");
        assert!(p.retry_timeouts);
        assert!(
            !Provider::resolve(spec(Some("ollama"), "m"), env_with(&[])).expect("ok").retry_timeouts,
            "off by default"
        );
        assert_eq!(p.timeouts.first_byte, Duration::from_millis(1500));
        assert_eq!(p.timeouts.connect, Timeouts::default().connect, "unset phases keep their defaults");
        assert_eq!(p.tool_choice, ToolChoice::Off);
        assert_eq!(seconds(p.timeouts.first_byte), "1.5 s");
        assert_eq!(seconds(p.timeouts.total), "600 s");
        assert_eq!(ToolChoice::parse("required"), Ok(ToolChoice::Required));
        let err = ToolChoice::parse("sometimes").expect_err("unknown");
        assert_eq!(err.to_string(), "unknown tool_choice `sometimes`: use auto, required, none or off");
        let err = Timeouts::secs(TimeoutPhase::FirstByte, -1.0).expect_err("negative");
        assert_eq!(
            err.to_string(),
            "first_byte_timeout_secs = -1 is not a number of seconds above 0: fix `first_byte_timeout_secs` in config.toml"
        );
    }

    #[test]
    fn url_heuristic() {
        assert_eq!(ApiMode::guess_from_url("https://api.anthropic.com/v1"), ApiMode::AnthropicMessages);
        assert_eq!(ApiMode::guess_from_url("https://api.minimax.io/anthropic"), ApiMode::AnthropicMessages);
        assert_eq!(ApiMode::guess_from_url("https://openrouter.ai/api/v1"), ApiMode::ChatCompletions);
        assert_eq!(ApiMode::guess_from_url("http://localhost:11434/v1"), ApiMode::ChatCompletions);
    }
}
