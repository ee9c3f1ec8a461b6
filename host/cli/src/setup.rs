//! `talaria setup`: choose a provider and model and write them to the `[model]` section of
//! `$TALARIA_HOME/config.toml`, keeping everything else in the file (comments included).
//!
//! On a terminal it asks for whatever the flags did not give, suggesting a default for each
//! answer, and offers to save a missing API key in `$TALARIA_HOME/.env` (mode 0600, typed without
//! echo). With `--yes`, or when standard input is not a terminal, it asks nothing: `--provider`
//! and `--model` (and `--base-url` for `custom`) must then be given, else it exits with code 2.
//!
//! Before writing, it checks the choice the way a chat would use it: `GET {base_url}/models`
//! with the key. A failure is reported with what to fix; on a terminal it asks whether to write
//! anyway, otherwise nothing is written and it exits with code 1 (`--no-check` skips the check).
//!
//! ```text
//! $ talaria setup --provider ollama --model llama3.2 --yes
//! wrote [model] to /home/me/.talaria/config.toml:
//!   provider = "ollama"
//!   name = "llama3.2"
//! ```

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use talaria_agent::model::{PRESETS, Preset};

use crate::chat::{self, ChatArgs};
use crate::config::{self, ConfigToml};
use crate::{Ctx, ui};

/// Exit code for missing or invalid flags when nothing can be asked.
const USAGE: u8 = 2;

#[derive(Args, Debug, Default)]
pub struct SetupArgs {
    /// openai | openrouter | anthropic | ollama | custom (any OpenAI-compatible base URL)
    #[arg(long)]
    pub provider: Option<String>,
    /// The model's name as the provider knows it, e.g. gpt-4.1-mini or llama3.2
    #[arg(short, long)]
    pub model: Option<String>,
    /// The provider's base URL, e.g. http://localhost:8080/v1 (required for custom)
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The environment variable holding the API key [default: the provider's, e.g. OPENAI_API_KEY]
    #[arg(long, value_name = "NAME")]
    pub key_env: Option<String>,
    /// Ask nothing: write what the flags say (--provider and --model are then required)
    #[arg(short, long)]
    pub yes: bool,
    /// Write without first checking that the endpoint answers and accepts the key
    #[arg(long)]
    pub no_check: bool,
}

/// A model each provider is likely to serve.
fn suggested_model(provider: &str) -> Option<&'static str> {
    match provider {
        "openai" => Some("gpt-4.1-mini"),
        "openrouter" => Some("anthropic/claude-sonnet-4.5"),
        "anthropic" => Some("claude-sonnet-4-5"),
        "ollama" => Some("llama3.2"),
        _ => None,
    }
}

/// What will be written under `[model]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Choice {
    provider: &'static Preset,
    model: String,
    /// `None`: the preset's.
    base_url: Option<String>,
    /// `None`: the preset's (or no key).
    key_env: Option<String>,
}

pub async fn run(ctx: &Ctx, args: SetupArgs) -> anyhow::Result<ExitCode> {
    let interactive = !args.yes && std::io::stdin().is_terminal();
    let choice = if interactive {
        ask_choice(ctx, &args)?
    } else {
        match from_flags(&args) {
            Ok(c) => c,
            Err(message) => {
                ui::error(&message);
                return Ok(ExitCode::from(USAGE));
            }
        }
    };
    let key_var = choice.key_env.as_deref().or(choice.provider.key_env);
    if let Some(var) = key_var {
        let secrets = talaria_runtime::Secrets::load(&ctx.home.join(".env"));
        if interactive && secrets.value(var).is_none() && std::env::var_os(var).is_none() {
            offer_key(&ctx.home, var)?;
        }
    }
    if !args.no_check
        && let Err(problem) = check(ctx, &choice).await
    {
        ui::error(&problem);
        if !interactive {
            ui::note("nothing written (--no-check writes it anyway)");
            return Ok(ExitCode::FAILURE);
        }
        if !confirm("Write it anyway?", false)? {
            ui::note("nothing written");
            return Ok(ExitCode::FAILURE);
        }
    }
    if interactive && !confirm(&format!("Write this to {}?", ctx.home.join("config.toml").display()), true)? {
        ui::note("nothing written");
        return Ok(ExitCode::FAILURE);
    }
    write_model(&ctx.home, &choice)?;
    println!("wrote [model] to {}:", ctx.home.join("config.toml").display());
    println!("  provider = \"{}\"", choice.provider.name);
    println!("  name = \"{}\"", choice.model);
    if let Some(url) = &choice.base_url {
        println!("  base_url = \"{url}\"");
    }
    if let Some(env) = &choice.key_env {
        println!("  key_env = \"{env}\"");
    }
    // Resolve what was written the way `chat` will, so a problem shows now rather than later.
    let written =
        Ctx { home: ctx.home.clone(), workspace: ctx.workspace.clone(), config: ConfigToml::load(&ctx.home)? };
    if let Err(e) = chat::chain(&written, &ChatArgs::default()) {
        ui::warn(&format!("{e:#}"));
    }
    println!("next: talaria chat   (and `talaria doctor` checks that the provider answers)");
    Ok(ExitCode::SUCCESS)
}

/// Whether the chosen endpoint answers and accepts the key: `Ok` with a line saying so, or
/// what failed and what to do.
async fn check(ctx: &Ctx, c: &Choice) -> Result<(), String> {
    let model = config::ModelToml {
        provider: Some(c.provider.name.to_string()),
        name: Some(c.model.clone()),
        base_url: c.base_url.clone(),
        key_env: c.key_env.clone(),
        ..config::ModelToml::default()
    };
    let config = ConfigToml { model: Some(model), ..ConfigToml::default() };
    let mut warnings = Vec::new();
    let chain = talaria_core::models::chain(&ctx.home, &config, &Default::default(), &mut warnings)
        .map_err(|e| format!("{e:#}"))?;
    let Some(provider) = chain.providers.first() else { return Err("no provider to check".into()) };
    let client = talaria_agent::model::Client::try_new().map_err(|e| e.to_string())?;
    match client.models(provider).await {
        Ok(listed) => {
            ui::note(&format!(
                "checked: {} answers{}",
                provider.base_url,
                if provider.api_key.is_some() { " and accepts the key" } else { "" }
            ));
            if let Some(warning) = listed.and_then(|models| unlisted(&c.model, &models)) {
                ui::warn(&warning);
            }
            Ok(())
        }
        Err(talaria_agent::model::ModelError::Http { status: status @ (401 | 403), url, .. }) => {
            let var = provider.key_env.as_deref().unwrap_or("the API key variable");
            let set = if provider.api_key.is_some() { "refused the key in" } else { "wants a key: none is set in" };
            Err(format!(
                "{url} {set} {var} (HTTP {status}): check the key, in {} or your environment",
                ctx.home.join(".env").display()
            ))
        }
        Err(e) => Err(format!("checking {}: {e}", provider.label())),
    }
}

/// What to say when the endpoint lists models and `model` is not one of them (a typo, or a
/// model the account cannot use): the listed names most like it, or a few of them.
fn unlisted(model: &str, listed: &[String]) -> Option<String> {
    if listed.is_empty() || listed.iter().any(|m| m == model) {
        return None;
    }
    let wanted = model.to_ascii_lowercase();
    let stem = wanted.split([':', '-', '/', '.']).next().unwrap_or_default();
    let mut like: Vec<&str> = listed
        .iter()
        .filter(|m| {
            let m = m.to_ascii_lowercase();
            m.contains(&wanted) || wanted.contains(&m) || (!stem.is_empty() && m.contains(stem))
        })
        .map(String::as_str)
        .collect();
    if like.is_empty() {
        like = listed.iter().map(String::as_str).collect();
    }
    let more = like.len().saturating_sub(5);
    like.truncate(5);
    let names = like.iter().map(|m| format!("`{}`", talaria_runtime::visible(m, 80))).collect::<Vec<_>>().join(", ");
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    Some(format!(
        "the endpoint does not list the model `{model}` among its {}: a chat will fail if the name is wrong. \
         Listed: {names}{more}",
        ui::count(listed.len(), "model", "models")
    ))
}

fn known_providers() -> String {
    PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

fn find_provider(name: &str) -> Result<&'static Preset, String> {
    Preset::find(name).ok_or_else(|| format!("unknown provider `{name}`: choose one of {}", known_providers()))
}

/// The choice the flags make, or why they are not enough.
fn from_flags(args: &SetupArgs) -> Result<Choice, String> {
    let mut missing = Vec::new();
    if args.provider.is_none() {
        missing.push("--provider");
    }
    if args.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
        missing.push("--model");
    }
    let provider = args.provider.as_deref().map(find_provider).transpose()?;
    if provider.is_some_and(|p| p.base_url.is_none()) && args.base_url.is_none() {
        missing.push("--base-url");
    }
    if !missing.is_empty() {
        let why = if args.yes { "with --yes" } else { "when standard input is not a terminal" };
        return Err(format!(
            "missing {} ({why} setup asks nothing), e.g.\n  talaria setup --provider ollama --model llama3.2 --yes",
            missing.join(", ")
        ));
    }
    let (Some(provider), Some(model)) = (provider, args.model.as_deref()) else {
        return Err("missing --provider, --model".to_string());
    };
    let choice = Choice {
        provider,
        model: model.trim().to_string(),
        base_url: args.base_url.as_deref().map(str::trim).filter(|u| !u.is_empty()).map(str::to_string),
        key_env: args.key_env.as_deref().map(str::trim).filter(|k| !k.is_empty()).map(str::to_string),
    };
    check_url(choice.base_url.as_deref())?;
    check_env_name(choice.key_env.as_deref())?;
    Ok(choice)
}

/// An environment variable name: letters, digits and `_`, not starting with a digit.
fn check_env_name(name: Option<&str>) -> Result<(), String> {
    match name {
        Some(n)
            if n.starts_with(|c: char| c.is_ascii_digit())
                || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            Err(format!("`{n}` is not an environment variable name (letters, digits and _, e.g. OPENAI_API_KEY)"))
        }
        _ => Ok(()),
    }
}

fn check_url(url: Option<&str>) -> Result<(), String> {
    match url {
        Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => {
            Err(format!("base URL `{u}` must start with http:// or https://"))
        }
        _ => Ok(()),
    }
}

/// Ask for what the flags left open; the current `[model]` and the presets give the defaults.
fn ask_choice(ctx: &Ctx, args: &SetupArgs) -> anyhow::Result<Choice> {
    let current = ctx.config.model.clone().unwrap_or_default();
    let provider = match &args.provider {
        Some(name) => find_provider(name).map_err(anyhow::Error::msg)?,
        None => {
            let default = current.provider.clone().unwrap_or_else(|| "openai".to_string());
            loop {
                let answer = ask(&format!("Provider ({})", known_providers()), Some(&default))?;
                match find_provider(&answer) {
                    Ok(p) => break p,
                    Err(e) => ui::warn(&e),
                }
            }
        }
    };
    let same_provider = current.provider.as_deref().is_some_and(|p| p.eq_ignore_ascii_case(provider.name));
    let model = match &args.model {
        Some(m) => m.trim().to_string(),
        None => {
            let default = current
                .name
                .clone()
                .filter(|_| same_provider)
                .or_else(|| suggested_model(provider.name).map(str::to_string));
            loop {
                let answer = ask("Model", default.as_deref())?;
                if !answer.is_empty() {
                    break answer;
                }
            }
        }
    };
    let base_url = match (&args.base_url, provider.base_url) {
        (Some(u), _) => Some(u.trim().to_string()),
        (None, preset_url) if preset_url.is_none() || provider.name == "ollama" => {
            let default = current.base_url.clone().filter(|_| same_provider).or(preset_url.map(str::to_string));
            let answer = loop {
                let answer = ask("Base URL", default.as_deref())?;
                match check_url(Some(&answer)) {
                    Ok(()) if !answer.is_empty() => break answer,
                    Ok(()) => ui::warn("a base URL is needed, e.g. http://localhost:8080/v1"),
                    Err(e) => ui::warn(&e),
                }
            };
            (Some(answer.as_str()) != preset_url).then_some(answer)
        }
        (None, _) => None,
    };
    check_url(base_url.as_deref()).map_err(anyhow::Error::msg)?;
    let key_env = match &args.key_env {
        Some(k) => Some(k.trim().to_string()).filter(|k| !k.is_empty()),
        // Hosted providers need a key; a custom endpoint may; ollama never does.
        None if provider.key_required || provider.base_url.is_none() => {
            let default = current.key_env.clone().filter(|_| same_provider).or(provider.key_env.map(str::to_string));
            let question = if provider.key_required {
                "Environment variable holding the API key"
            } else {
                "Environment variable holding the API key (empty: none)"
            };
            let answer = loop {
                let answer = ask(question, default.as_deref())?;
                match check_env_name(Some(&answer)) {
                    Ok(()) => break answer,
                    Err(e) => ui::warn(&e),
                }
            };
            Some(answer).filter(|a| !a.is_empty() && Some(a.as_str()) != provider.key_env)
        }
        None => None,
    };
    check_env_name(key_env.as_deref()).map_err(anyhow::Error::msg)?;
    Ok(Choice { provider, model, base_url, key_env })
}

/// Print `question [default]: ` on stderr and read one line; empty means the default.
fn ask(question: &str, default: Option<&str>) -> anyhow::Result<String> {
    match default {
        Some(d) if !d.is_empty() => anstream::eprint!("{question} [{d}]: "),
        _ => anstream::eprint!("{question}: "),
    }
    std::io::stderr().flush().ok();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).context("cannot read the answer")? == 0 {
        anyhow::bail!("setup cancelled: nothing was written");
    }
    let answer = line.trim();
    Ok(if answer.is_empty() { default.unwrap_or_default().to_string() } else { answer.to_string() })
}

fn confirm(question: &str, default_yes: bool) -> anyhow::Result<bool> {
    let hint = if default_yes { "Y/n" } else { "y/N" };
    let answer = ask(&format!("{question} [{hint}]"), None)?.to_ascii_lowercase();
    Ok(match answer.as_str() {
        "" => default_yes,
        a => a == "y" || a == "yes",
    })
}

/// Set the `[model]` keys, keeping the decoration (comments) of keys that stay.
fn write_model(home: &Path, c: &Choice) -> Result<(), config::ConfigError> {
    config::edit(home, |doc| {
        if doc.as_table().is_empty() {
            // A file of comments only: keep them above the new section rather than below it.
            let comments = doc.trailing().as_str().unwrap_or_default().to_string();
            doc.set_trailing("");
            let mut table = toml_edit::Table::new();
            table.decor_mut().set_prefix(comments);
            doc.insert("model", toml_edit::Item::Table(table));
        }
        let item = doc.entry("model").or_insert(toml_edit::table());
        let Some(table) = item.as_table_like_mut() else {
            return Err(config::ConfigError::Refused(
                "[model] in config.toml is not a table: fix or remove it, then run setup again".to_string(),
            ));
        };
        let old_provider = table.get("provider").and_then(|v| v.as_str()).map(str::to_string);
        set(table, "provider", Some(c.provider.name));
        set(table, "name", Some(&c.model));
        set(table, "base_url", c.base_url.as_deref());
        set(table, "key_env", c.key_env.as_deref());
        // An api_mode chosen for another provider would be wrong for this one.
        if old_provider.is_some_and(|p| !p.eq_ignore_ascii_case(c.provider.name)) {
            table.remove("api_mode");
        }
        Ok(())
    })
}

/// Set `key` to `value` (removing it for `None`); an existing value keeps its comments.
fn set(table: &mut dyn toml_edit::TableLike, key: &str, value: Option<&str>) {
    let Some(value) = value else {
        table.remove(key);
        return;
    };
    match table.get_mut(key).and_then(|item| item.as_value_mut()) {
        Some(existing) => {
            let decor = existing.decor().clone();
            *existing = toml_edit::Value::from(value);
            *existing.decor_mut() = decor;
        }
        None => {
            table.insert(key, toml_edit::value(value));
        }
    }
}

/// `var` is unset: offer to save the key in `home/.env`, read without echo.
fn offer_key(home: &Path, var: &str) -> anyhow::Result<()> {
    let path = home.join(".env");
    anstream::eprintln!("{var} is not set in your environment or in {}.", path.display());
    anstream::eprint!("Paste the key to save it there (input hidden; empty to skip): ");
    std::io::stderr().flush().ok();
    let key = read_hidden()?;
    anstream::eprintln!();
    let Some(key) = key else {
        anyhow::bail!("setup cancelled while reading the key (the [model] section was already written)");
    };
    let key = key.trim();
    if key.is_empty() {
        ui::note(&format!("no key saved: export {var}, or add `{var}=...` to {}", path.display()));
        return Ok(());
    }
    save_env(&path, var, key).with_context(|| format!("cannot write {}", path.display()))?;
    println!("saved {var} to {} (readable only by you)", path.display());
    Ok(())
}

/// Restores the terminal's cooked mode when dropped.
struct RawMode;

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// One line from the terminal with echo off (raw mode); `None` when Ctrl-C cancels it.
fn read_hidden() -> anyhow::Result<Option<String>> {
    crossterm::terminal::enable_raw_mode().context("cannot switch the terminal to hidden input")?;
    let _guard = RawMode;
    let mut bytes = Vec::new();
    let mut stdin = std::io::stdin().lock();
    let mut byte = [0u8; 1];
    loop {
        if stdin.read(&mut byte).context("cannot read the key")? == 0 {
            break;
        }
        match byte[0] {
            b'\r' | b'\n' | 4 => break,
            3 => return Ok(None),
            8 | 127 => {
                bytes.pop();
            }
            b => bytes.push(b),
        }
    }
    String::from_utf8(bytes).map(Some).context("the key is not valid UTF-8")
}

/// Set `var=value` in the dotenv file at `path` (replacing an earlier line for `var`), written
/// atomically with mode 0600.
fn save_env(path: &Path, var: &str, value: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let old = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let line = format!("{var}={}", quote_env(value));
    let mut replaced = false;
    let mut lines: Vec<String> = Vec::new();
    for l in old.lines() {
        let body = l.trim_start();
        let body = body.strip_prefix("export ").unwrap_or(body);
        if body.split_once('=').is_some_and(|(k, _)| k.trim() == var) {
            if !replaced {
                lines.push(line.clone());
                replaced = true;
            }
        } else {
            lines.push(l.to_string());
        }
    }
    if !replaced {
        lines.push(line);
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".env.{}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.write_all(format!("{}\n", lines.join("\n")).as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// The value as the dotenv reader reads it back: quoted when it holds spaces, `#` or quotes.
fn quote_env(value: &str) -> String {
    if !value.chars().any(|c| c.is_whitespace() || matches!(c, '#' | '"' | '\'')) {
        value.to_string()
    } else if !value.contains('\'') {
        format!("'{value}'")
    } else {
        format!("\"{value}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_the_endpoint_does_not_list_is_named_with_the_listed_ones_most_like_it() {
        let listed: Vec<String> = ["llama3.2:3b", "llama3.1:8b", "qwen2.5"].map(String::from).to_vec();
        assert_eq!(unlisted("qwen2.5", &listed), None);
        assert_eq!(unlisted("anything", &[]), None, "an endpoint listing nothing says nothing");
        let said = unlisted("llama3.3", &listed).expect("warned");
        assert!(
            said.contains("`llama3.3` among its 3 models") && said.contains("`llama3.2:3b`, `llama3.1:8b`"),
            "{said}"
        );
        assert!(!said.contains("qwen"), "only the like ones: {said}");
    }

    #[test]
    fn keys_replace_their_line_and_the_file_is_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(".env");
        std::fs::write(&path, "# mine\nexport OPENAI_API_KEY=old\nOTHER=1\n").expect("write");
        save_env(&path, "OPENAI_API_KEY", "sk-new").expect("save");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "# mine\nOPENAI_API_KEY=sk-new\nOTHER=1\n");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        save_env(&path, "SPACED", "a b").expect("save");
        assert!(std::fs::read_to_string(&path).expect("read").ends_with("SPACED='a b'\n"));
    }

    #[test]
    fn missing_flags_are_named() {
        let err = from_flags(&SetupArgs { yes: true, ..SetupArgs::default() }).expect_err("incomplete");
        assert!(err.starts_with("missing --provider, --model (with --yes"), "{err}");
        let args = SetupArgs { provider: Some("custom".into()), model: Some("m".into()), ..SetupArgs::default() };
        assert!(from_flags(&args).expect_err("no url").starts_with("missing --base-url"));
        let args = SetupArgs {
            provider: Some("openai".into()),
            model: Some("m".into()),
            key_env: Some("MY-KEY".into()),
            ..SetupArgs::default()
        };
        assert!(from_flags(&args).expect_err("bad name").contains("`MY-KEY` is not an environment variable name"));
        let args = SetupArgs { provider: Some("nope".into()), ..SetupArgs::default() };
        assert!(from_flags(&args).expect_err("unknown").contains("unknown provider `nope`"));
    }

    #[test]
    fn a_file_of_comments_keeps_them_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("config.toml"), "# hello\n").expect("write");
        let choice = Choice {
            provider: Preset::find("openai").expect("preset"),
            model: "gpt-4.1-mini".into(),
            base_url: None,
            key_env: None,
        };
        write_model(dir.path(), &choice).expect("write");
        let text = std::fs::read_to_string(dir.path().join("config.toml")).expect("read");
        assert_eq!(text, "# hello\n[model]\nprovider = \"openai\"\nname = \"gpt-4.1-mini\"\n");
    }

    #[test]
    fn existing_comments_and_sections_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("config.toml"),
            "# my settings\n[model]\nprovider = \"openai\" # was openai\napi_mode = \"responses\"\nmax_tokens = 100\n\n[agent]\nmax_turns = 5\n",
        )
        .expect("write");
        let choice = Choice {
            provider: Preset::find("ollama").expect("preset"),
            model: "llama3.2".into(),
            base_url: None,
            key_env: None,
        };
        write_model(dir.path(), &choice).expect("write");
        let text = std::fs::read_to_string(dir.path().join("config.toml")).expect("read");
        assert!(text.starts_with("# my settings\n") && text.contains("provider = \"ollama\" # was openai"), "{text}");
        assert!(!text.contains("api_mode") && text.contains("max_tokens = 100") && text.contains("max_turns = 5"));
        let parsed = ConfigToml::load(dir.path()).expect("valid");
        assert_eq!(parsed.model.and_then(|m| m.name).as_deref(), Some("llama3.2"));
    }
}
