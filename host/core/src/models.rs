//! Which models a conversation talks to: the main chain (`[model]`, then `[[fallback_providers]]`),
//! resolved from config with a front door's overrides ([`ModelChoice`]), and the auxiliary model
//! for summaries and plugins' `llm` calls (`[auxiliary]`, else the main chain).

use std::path::Path;
use std::time::Duration;

use talaria_agent::model::{ApiMode, Chain, PRESETS, Provider, ProviderSpec};

use crate::Error;
use crate::config::ConfigToml;

/// A front door's choice of model, over `[model]` in config (the `--provider`, `--model`,
/// `--base-url` and `--api-mode` flags; `/model`; an editor's choice).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelChoice {
    /// openai | openrouter | anthropic | ollama | custom
    pub provider: Option<String>,
    pub model: Option<String>,
    pub base_url: Option<String>,
    /// chat_completions | anthropic_messages | responses
    pub api_mode: Option<String>,
}

impl ModelChoice {
    /// `[PROVIDER:]NAME` as `/model` takes it. Without a provider, the model is looked for
    /// where `current` is (same provider, URL and API mode).
    pub fn parse(text: &str, current: Option<&Provider>) -> Self {
        let text = text.trim();
        match text.split_once(':') {
            Some((p, n)) if PRESETS.iter().any(|x| x.name == p) => {
                Self { provider: Some(p.to_string()), model: Some(n.to_string()), ..Self::default() }
            }
            _ => match current {
                Some(cur) => Self {
                    provider: Some(cur.name.clone()),
                    model: Some(text.to_string()),
                    base_url: Some(cur.base_url.clone()),
                    api_mode: Some(cur.api_mode.as_str().to_string()),
                },
                None => Self { model: Some(text.to_string()), ..Self::default() },
            },
        }
    }
}

/// The main model chain from `config` and `choice`.
///
/// # Errors
/// No model configured (with the steps to configure one), or a provider that cannot be used.
/// Fallback providers that cannot be used are left out and reported in `warnings`.
pub fn chain(
    home: &Path,
    config: &ConfigToml,
    choice: &ModelChoice,
    warnings: &mut Vec<String>,
) -> Result<Chain, Error> {
    let m = config.model.clone().unwrap_or_default();
    let provider = choice.provider.clone().or(m.provider.clone());
    let model = choice.model.clone().or(m.name.clone());
    let base_url = choice.base_url.clone().or(if choice.provider.is_some() { None } else { m.base_url.clone() });
    if provider.is_none() && model.is_none() && base_url.is_none() {
        return Err(Error::Model(format!(
            "no model is configured.\n  Run `talaria setup` to choose one, or pass one for this run, e.g.\n    talaria chat --provider ollama --model llama3.2\n    talaria chat --provider custom --base-url http://localhost:8080/v1 --model local\n  or add to {}:\n    [model]\n    provider = \"openai\"   # openai | openrouter | anthropic | ollama | custom\n    name = \"gpt-4.1-mini\"",
            home.join("config.toml").display()
        )));
    }
    let Some(model) = model else {
        return Err(Error::Model(format!(
            "no model name: pass --model NAME, or set `name` under [model] in {}",
            home.join("config.toml").display()
        )));
    };
    let api_mode = match choice.api_mode.as_deref().or(m.api_mode.as_deref()) {
        None => None,
        Some(s) => Some(ApiMode::parse(s).ok_or_else(|| {
            Error::Model(format!("unknown api mode `{s}`: use chat_completions, anthropic_messages or responses"))
        })?),
    };
    let env = env_lookup(home);
    // `vision` describes the model `[model]` names, not one chosen for this run.
    let vision = m.vision.filter(|_| m.name.as_deref() == Some(model.as_str()));
    let spec = ProviderSpec {
        provider,
        model,
        base_url,
        api_mode,
        key_env: if choice.provider.is_some() { None } else { m.key_env.clone() },
        max_tokens: m.max_tokens,
        vision,
        ..ProviderSpec::default()
    };
    let primary =
        m.wire(spec).and_then(|spec| Provider::resolve(spec, &env)).map_err(|e| Error::Model(e.to_string()))?;
    let mut fallbacks = Vec::new();
    for (i, f) in config.fallback_providers.iter().enumerate() {
        let api_mode = f.api_mode.as_deref().and_then(ApiMode::parse);
        match f.spec(api_mode).and_then(|spec| Provider::resolve(spec, &env)) {
            Ok(p) => fallbacks.push(p),
            Err(e) => warnings.push(format!("fallback provider {} is left out: {e}", i + 1)),
        }
    }
    let mut chain = Chain::new(primary).with_fallbacks(fallbacks);
    if let Some(r) = config.agent.retries {
        chain.retries = r;
    }
    if let Some(ms) = config.agent.retry_delay_ms {
        chain.base_delay = Duration::from_millis(ms);
    }
    Ok(chain)
}

/// The model for side tasks: `[auxiliary]`, else the main chain (a problem with `[auxiliary]`
/// is reported in `warnings`).
pub fn auxiliary(home: &Path, config: &ConfigToml, main: &Chain, warnings: &mut Vec<String>) -> Chain {
    let Some(aux) = &config.auxiliary else { return main.clone() };
    let api_mode = aux.api_mode.as_deref().and_then(ApiMode::parse);
    match aux.spec(api_mode).and_then(|spec| Provider::resolve(spec, env_lookup(home))) {
        Ok(p) => Chain::new(p),
        Err(e) => {
            warnings.push(format!("[auxiliary] model is left out, using the main model: {e}"));
            main.clone()
        }
    }
}

/// Environment first, then `$TALARIA_HOME/.env`.
fn env_lookup(home: &Path) -> impl Fn(&str) -> Option<String> {
    let dotenv = talaria_runtime::Secrets::load(&home.join(".env"));
    move |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty()).or_else(|| dotenv.value(name))
}
