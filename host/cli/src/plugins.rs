//! `talaria plugins list|info|grant|revoke` and `talaria trust`; installing is in [`crate::market`].

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use talaria_runtime::{GrantFile, Plugin, Runtime};

use crate::{Ctx, market, ui};

#[derive(Subcommand)]
#[command(defer = true)]
pub enum PluginsCmd {
    /// List plugins: scope, version, capabilities granted, and who shadows whom
    List {
        /// Print as JSON
        #[arg(long)]
        json: bool,
    },
    /// Show one plugin: manifest, what it requests and was granted, limits and tools
    Info { name: String },
    /// Grant capabilities a plugin's manifest requests (`all` = everything it requests)
    #[command(after_help = CAPABILITY_HELP)]
    Grant {
        name: String,
        /// fs:ro:PATH, fs:rw:PATH, net:HOST[:PORT], secret:NAME@HOST, process, kv, llm, or all
        #[arg(required = true)]
        capabilities: Vec<String>,
    },
    /// Take capabilities back (`all` = every grant)
    #[command(after_help = CAPABILITY_HELP)]
    Revoke {
        name: String,
        #[arg(required = true)]
        capabilities: Vec<String>,
    },
    /// Install a plugin from a directory, bundle, URL, registry or OCI registry
    #[command(after_help = market::SOURCE_HELP)]
    Install {
        /// ./dir, ./bundle.tar.gz, https://…, NAME[@VERSION], or oci://HOST/REPO:TAG
        source: String,
        #[command(flatten)]
        flags: market::InstallFlags,
    },
    /// Update installed plugins from where they were installed from
    Update {
        /// The plugin to update
        name: Option<String>,
        /// Update every plugin installed in the scope
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        flags: market::InstallFlags,
    },
    /// Remove an installed plugin (its data is kept unless --purge)
    Remove {
        name: String,
        /// The project's scope instead of the user's
        #[arg(long)]
        project: bool,
        /// Also delete its key-value data and its $PLUGIN_DATA directory
        #[arg(long)]
        purge: bool,
    },
    /// Go back to the version an update replaced
    Rollback {
        name: String,
        /// The project's scope instead of the user's
        #[arg(long)]
        project: bool,
    },
    /// Search the registry indexes
    Search {
        /// Words in the name or description (empty: list everything)
        #[arg(default_value = "")]
        query: String,
        /// A registry index to search (before the configured ones)
        #[arg(long, value_name = "URL")]
        registry: Vec<String>,
        /// Print as JSON
        #[arg(long)]
        json: bool,
    },
    /// Check installed plugins against their lockfile digests and trusted signers
    Verify {
        /// Print as JSON
        #[arg(long)]
        json: bool,
    },
    /// Trust a publisher's public key to sign plugins
    TrustKey {
        /// `talaria-ed25519 …` as printed by `talaria plugin keygen`, or a file holding it
        key: String,
        /// Who the key belongs to
        #[arg(long, required = true)]
        name: String,
    },
    /// List trusted publisher keys
    Keys,
    /// Stop trusting a publisher key
    UntrustKey {
        /// The key's id (see `talaria plugins keys`)
        id: String,
    },
}

const CAPABILITY_HELP: &str = "Capabilities:
  fs:ro:PATH | fs:rw:PATH   read (or read-write) a directory; $WORKSPACE is the working directory,
                            $PLUGIN_DATA the plugin's private directory
  net:HOST[:PORT]           outgoing HTTP; `*` and `*.example.com` are wildcards (never loopback/private)
  secret:NAME@HOST          the host injects secret NAME into requests to HOST
  process                   run shell commands (dangerous ones need approval)
  kv                        private persistent key-value storage
  llm                       completions from the auxiliary model ([auxiliary], else [model])";

pub async fn run(ctx: &Ctx, cmd: PluginsCmd) -> anyhow::Result<ExitCode> {
    let changes = matches!(
        cmd,
        PluginsCmd::Grant { .. }
            | PluginsCmd::Revoke { .. }
            | PluginsCmd::Install { .. }
            | PluginsCmd::Update { .. }
            | PluginsCmd::Remove { .. }
            | PluginsCmd::Rollback { .. }
    );
    let code = commands(ctx, cmd).await?;
    if changes && code == ExitCode::SUCCESS {
        // Running chats and gateways reload their plugins before their next turn.
        if let Err(e) = talaria_runtime::mark_plugins_changed(&ctx.home) {
            tracing::warn!("cannot tell running sessions that plugins changed: {e}");
        }
    }
    Ok(code)
}

async fn commands(ctx: &Ctx, cmd: PluginsCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginsCmd::List { json } => list(ctx, json),
        PluginsCmd::Info { name } => info(ctx, &name).await,
        PluginsCmd::Grant { name, capabilities } => change(ctx, &name, &capabilities, true),
        PluginsCmd::Revoke { name, capabilities } => change(ctx, &name, &capabilities, false),
        PluginsCmd::Install { source, flags } => market::install_cmd(ctx, &source, &flags).await,
        PluginsCmd::Update { name, all, flags } => market::update_cmd(ctx, name.as_deref(), all, &flags).await,
        PluginsCmd::Remove { name, project, purge } => market::remove_cmd(ctx, &name, project, purge).await,
        PluginsCmd::Rollback { name, project } => market::rollback_cmd(ctx, &name, project),
        PluginsCmd::Search { query, registry, json } => market::search_cmd(ctx, &query, &registry, json).await,
        PluginsCmd::Verify { json } => market::verify_cmd(ctx, json),
        PluginsCmd::TrustKey { key, name } => market::trust_key_cmd(ctx, &key, &name),
        PluginsCmd::Keys => market::keys_cmd(ctx),
        PluginsCmd::UntrustKey { id } => market::untrust_key_cmd(ctx, &id),
    }
}

use talaria_core::grants::caps_text;

fn list(ctx: &Ctx, json: bool) -> anyhow::Result<ExitCode> {
    let runtime = ctx.runtime(false)?;
    let shadows = |p: &Plugin| -> Vec<String> {
        runtime
            .shadowed()
            .iter()
            .filter(|s| s.name == p.name() && s.by == p.scope)
            .map(|s| s.hidden_location.clone())
            .collect()
    };
    if json {
        let items: Vec<serde_json::Value> = runtime
            .plugins()
            .iter()
            .map(|p| {
                serde_json::json!({
                    "name": p.name(),
                    "scope": p.scope.label(),
                    "version": p.manifest.version.to_string(),
                    "api": p.manifest.api.to_string(),
                    "kinds": p.manifest.kinds,
                    "enabled": p.enabled,
                    "location": p.location,
                    "requested": p.manifest.requests.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "granted": p.grants.caps.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "source": p.installed().map(|i| i.source.clone()),
                    "signer": p.installed().and_then(|i| i.signer.clone()),
                    "shadows": shadows(p),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&items)?);
    } else {
        let rows: Vec<Vec<String>> = runtime
            .plugins()
            .iter()
            .map(|p| {
                let pending = p.manifest.requests.len().saturating_sub(p.grants.caps.len());
                let mut granted = caps_text(&p.grants.caps);
                if pending > 0 {
                    granted.push_str(&format!("  ({pending} requested, not granted)"));
                }
                let mut name = p.name().to_string();
                if !shadows(p).is_empty() {
                    name.push_str(" *");
                }
                if !p.enabled {
                    granted = format!("off (enable: [plugins.{}] enabled = true)  {granted}", p.name());
                }
                vec![
                    name,
                    p.manifest.kinds.join(","),
                    p.scope.label().to_string(),
                    p.manifest.version.to_string(),
                    p.manifest.api.to_string(),
                    granted,
                ]
            })
            .collect();
        ui::table(&["NAME", "KIND", "SCOPE", "VERSION", "API", "GRANTED"], &rows);
        for s in runtime.shadowed() {
            println!("* {} ({}) shadows {} ({})", s.name, s.by.label(), s.hidden_location, s.hidden.label());
        }
    }
    report_problems(&runtime);
    Ok(ExitCode::SUCCESS)
}

fn report_problems(runtime: &Runtime) {
    for p in runtime.problems() {
        ui::warn(&p.to_string());
    }
    if let Some(dir) = runtime.untrusted_project() {
        ui::note(&format!(
            "plugins in {} are ignored because this project is not trusted; run `talaria trust` to load them",
            dir.display()
        ));
    }
}

fn find<'r>(runtime: &'r Runtime, name: &str) -> anyhow::Result<&'r std::sync::Arc<Plugin>> {
    runtime.plugin(name).with_context(|| {
        let names: Vec<&str> = runtime.plugins().iter().map(|p| p.name()).collect();
        format!("no plugin named '{name}' (loaded: {})", names.join(", "))
    })
}

/// Where a plugin's commands run and what they reach, for `plugins info`.
fn commands_policy(ctx: &Ctx, grants: &talaria_runtime::Grants) -> Vec<String> {
    use talaria_runtime::process::Confinement;
    let sandbox = ctx.config.command_sandbox(&ctx.home);
    let policy = sandbox.policy(&ctx.workspace, grants);
    let places = |paths: &[std::path::PathBuf]| {
        let shown: Vec<String> = paths.iter().filter(|p| p.exists()).map(|p| ui::tilde(p)).collect();
        if shown.is_empty() { "nothing else".to_string() } else { shown.join(", ") }
    };
    let hosts: Vec<String> = grants.network().map(|h| h.to_string()).collect();
    let mut lines = match (sandbox.confinement, &sandbox.launcher) {
        (Confinement::Unconfined, _) => vec![
            "commands:   UNCONFINED ([sandbox] commands = \"unconfined\"): they run as you, with all your files, processes and network".to_string(),
        ],
        (Confinement::Confined, Err(e)) => vec![format!("commands:   refused here: {e}")],
        (Confinement::Confined, Ok(_)) => vec![
            format!(
                "commands:   in the OS sandbox: the workspace read-write (.git/config, .git/hooks, .talaria read-only), the system read-only"
            ),
            format!("            also read: {}", places(&policy.read)),
            format!("            also write: {}", places(&policy.write)),
            "            never: talaria's home, ~/.ssh, ~/.aws, ~/.config and the rest of your home; other processes".to_string(),
            format!(
                "            network: only through talaria's proxy; {}, any other host asked (net:HOST)",
                if hosts.is_empty() { "no host granted".to_string() } else { format!("granted {}", hosts.join(", ")) }
            ),
            format!(
                "            limits: {} processes, {} MiB per file, {} MiB of /tmp",
                policy.limits.max_processes, policy.limits.max_file_mb, policy.limits.tmp_mb
            ),
        ],
    };
    if ctx.config.gateway.platforms.keys().any(|n| ctx.config.gateway.unconfined(n)) {
        lines.push("            (gateway platforms set unconfined run its commands as you there)".into());
    }
    lines
}

async fn info(ctx: &Ctx, name: &str) -> anyhow::Result<ExitCode> {
    let runtime = ctx.runtime(false)?;
    let p = find(&runtime, name)?;
    let m = &p.manifest;
    // The manifest's words are the author's: one line each, their controls escaped.
    let one = |text: &str| talaria_runtime::visible(text, 500);
    println!("{} {} ({})", m.name, m.version, p.scope.label());
    if !m.description.is_empty() {
        println!("  {}", one(&m.description));
    }
    println!("location:   {}", p.location);
    if let Some(path) = p.wasm_path() {
        println!("component:  {}", path.display());
    }
    println!("sha256:     {}", p.sha256().unwrap_or("(unreadable)"));
    println!("api:        {}", m.api);
    println!("kinds:      {}", m.kinds.join(", "));
    if let Some(author) = &m.author {
        println!("author:     {}", one(author));
    }
    if let Some(license) = &m.license {
        println!("license:    {}", one(license));
    }
    if let Some(installed) = p.installed() {
        println!("installed:  from {}", one(&installed.source));
        println!(
            "signed by:  {}",
            one(installed.signer.as_deref().unwrap_or("nobody (installed with --allow-unsigned)"))
        );
    }
    println!("requested:  {}", caps_text(&m.requests));
    for (secret, headers) in m.secret_headers.iter() {
        let places: Vec<String> = headers.iter().map(|h| talaria_runtime::manifest::place_name(h)).collect();
        println!("            secret {secret} is sent only in: {}", places.join(", "));
    }
    println!("granted:    {}", caps_text(&p.grants.caps));
    for cap in &p.grants.caps {
        if let Some(place) = cap.protected_place() {
            println!(
                "protected:  {cap} reaches {place}, which no other grant does (what is written there, talaria or git runs)"
            );
        }
    }
    if !p.grants.ignored.is_empty() {
        println!("ignored:    {} (granted but no longer requested)", caps_text(&p.grants.ignored));
    }
    if p.grants.has_process() {
        for line in commands_policy(ctx, &p.grants) {
            println!("{line}");
        }
    }
    println!(
        "limits:     {} MiB memory, {}s per call, {} KiB output",
        p.limits.memory_bytes / (1024 * 1024),
        p.limits.timeout.as_secs(),
        p.limits.output_bytes / 1024
    );
    for s in runtime.shadowed().iter().filter(|s| s.name == name) {
        println!("shadows:    {} ({})", s.hidden_location, s.hidden.label());
    }
    match runtime.plugin_tools(p).await {
        Ok(tools) => {
            println!("tools:");
            for t in tools {
                println!("  {:<16} {}", one(&t.name), ui::first_line(&t.description, 70));
            }
        }
        Err(e) => ui::error(&e.to_string()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Grant (or revoke) capabilities of the active plugin `name`.
fn change(ctx: &Ctx, name: &str, requested: &[String], grant: bool) -> anyhow::Result<ExitCode> {
    let runtime = ctx.runtime(false)?;
    let changed = talaria_core::grants::change(&ctx.home, &runtime, name, requested, grant)?;
    for cap in &changed.not_granted {
        ui::warn(&format!("{cap} was not granted to '{name}'"));
    }
    if let Some(note) = &changed.project {
        crate::market::tell(note);
    }
    let verb = if grant { "granted" } else { "revoked" };
    println!(
        "{verb} {} {} '{name}' ({}); it now has: {}",
        caps_text(&changed.changed),
        if grant { "to" } else { "from" },
        changed.scope,
        caps_text(&changed.now)
    );
    Ok(ExitCode::SUCCESS)
}

/// Show the skills the project brings; their digest, to pin.
fn project_skills(dir: &std::path::Path) -> Option<String> {
    use talaria_agent::skills;
    let skills_dir = skills::project_dir(dir);
    let digest = skills::installed::tree_digest(&skills_dir)?;
    let mut warnings = Vec::new();
    let found = skills::read_project(&skills_dir, &mut warnings);
    println!("{} brings {} skill{}:", skills_dir.display(), found.len(), if found.len() == 1 { "" } else { "s" });
    for s in &found {
        println!("  {} ({}): {}", s.name, s.category, ui::first_line(&s.description, 70));
        let needs: Vec<&str> = s.requires_tools.iter().chain(&s.requires_toolsets).map(String::as_str).collect();
        let files = s.files();
        if !needs.is_empty() || !files.is_empty() {
            println!(
                "    needs: {}; files: {}",
                if needs.is_empty() { "nothing".into() } else { needs.join(", ") },
                if files.is_empty() { "none".into() } else { files.join(", ") }
            );
        }
    }
    for w in &warnings {
        ui::warn(w);
    }
    println!("  (pinned as {digest}: if they change, they are not read until you run `talaria trust` again)");
    Some(digest)
}

/// `talaria trust`: show what the project brings, pin it, and trust it (or `--revoke`).
pub fn trust(ctx: &Ctx, dir: Option<PathBuf>, revoke: bool, replace: &[String]) -> anyhow::Result<ExitCode> {
    let dir = match dir {
        Some(d) => d.canonicalize().with_context(|| format!("{} does not exist", d.display()))?,
        None => ctx.workspace.clone(),
    };
    let path = ctx.home.join("grants.toml");
    let mut file = GrantFile::load(&path)?;
    if revoke {
        file.untrust(&dir);
        file.save(&path)?;
        println!("no longer trusting {}; its project plugins will not load", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let survey = talaria_runtime::trust::survey(&ctx.bundled(), &ctx.home, &dir);
    for p in &survey.problems {
        ui::warn(&p.to_string());
    }
    for name in replace {
        if !survey.plugins.iter().any(|b| &b.name == name && b.replaces.is_some()) {
            bail!("--replace {name}: this project brings no plugin '{name}' that replaces one of yours");
        }
    }
    if survey.plugins.is_empty() {
        println!("{} brings no plugins", dir.display());
    } else {
        println!(
            "{} brings {} plugin{}:",
            dir.display(),
            survey.plugins.len(),
            if survey.plugins.len() == 1 { "" } else { "s" }
        );
    }
    let tty = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let mut accepted: Vec<String> = replace.to_vec();
    for b in &survey.plugins {
        let origin = match &b.source {
            Some((source, Some(signer))) => format!("installed from {source}, signed by {signer}"),
            Some((source, None)) => format!("installed unsigned from {source}"),
            None => "placed by hand".to_string(),
        };
        println!("  {} {} ({origin})", b.name, b.version);
        println!("    location:  {}", b.location);
        match &b.wasm_sha256 {
            Ok(sha) => println!("    sha256:    {sha}"),
            Err(e) => ui::warn(&format!("{}: its component cannot be read ({e}); it will not load", b.name)),
        }
        println!("    requests:  {}", caps_text(&b.requested));
        println!("    granted:   {} (by the project)", caps_text(&b.granted));
        if let Some((scope, location)) = &b.replaces {
            println!("    replaces:  your {} plugin '{}' ({location})", scope.label(), b.name);
            if !accepted.contains(&b.name)
                && tty
                && matches!(
                    crate::market::ask(&format!(
                        "  Let the project's '{}' replace your {} plugin of that name? [y/N] ",
                        b.name,
                        scope.label()
                    ))?
                    .as_str(),
                    "y" | "yes"
                )
            {
                accepted.push(b.name.clone());
            }
            if !accepted.contains(&b.name) {
                println!(
                    "    -> not accepted: it will not load, and yours stays (`talaria trust --replace {}` accepts it)",
                    b.name
                );
            }
        }
    }
    let mut pins = survey.pins(&accepted);
    pins.skills = project_skills(&dir);
    let pinned = pins.plugins.len();
    file.set_project_pins(&dir, pins);
    file.save(&path)?;
    println!(
        "trusting {}: {pinned} plugin{} pinned as shown; they get only what is granted, and any change to them \
         (a new plugin, another component, manifest or lockfile entry) stops them loading until you run \
         `talaria trust` again",
        dir.display(),
        if pinned == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}
