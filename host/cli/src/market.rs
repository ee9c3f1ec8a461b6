//! `talaria plugins install|update|remove|search|verify|trust-key|keys|untrust-key`.
//!
//! The work is talaria-market's; this module parses flags, shows progress on stderr, and asks
//! for consent: on a terminal it asks, otherwise `--grant CAP` (or `--yes`) says what to grant
//! and nothing else is granted.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Args;
use talaria_market::install::consent::{self, GrantFlags, Nobody};
use talaria_market::install::{self, Consent, Options, Report, Target, caps_list};
use talaria_market::sign::{PublicKey, TrustStore};
use talaria_market::source::{FetchOptions, Source};
use talaria_runtime::{Capability, Scope};

use crate::{Ctx, ui};

/// Flags shared by install and update.
#[derive(Args, Debug, Clone, Default)]
pub struct InstallFlags {
    /// Grant a requested capability without asking (repeatable; `all` = everything requested)
    #[arg(long = "grant", value_name = "CAP")]
    pub grants: Vec<String>,
    /// Grant everything requested without asking
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Install a bundle that carries no signature
    #[arg(long)]
    pub allow_unsigned: bool,
    /// Install an older version than the one installed
    #[arg(long)]
    pub allow_downgrade: bool,
    /// The project's scope (<workspace>/.talaria) instead of the user's
    #[arg(long)]
    pub project: bool,
    /// A registry index to look names up in (before the configured ones)
    #[arg(long, value_name = "URL")]
    pub registry: Vec<String>,
    /// Install under the name of a plugin built into talaria, replacing it (the new plugin
    /// starts with none of the bundled one's data)
    #[arg(long)]
    pub replace_bundled: bool,
    /// Accept an update from another publisher (another signing key, or a change between signed
    /// and unsigned); it starts with no grants and no data
    #[arg(long)]
    pub accept_publisher: bool,
}

pub const SOURCE_HELP: &str = "Sources:
  ./dir                      a plugin directory (plugin.toml + component); never signed
  ./hello-1.0.0.tar.gz       a bundle; hello-1.0.0.tar.gz.sig beside it is its signature
  https://host/x.tar.gz      a bundle on the web; <url>.sig is its signature
  NAME, NAME@1.2             the newest matching version in the registry indexes
                             ([marketplace] registries in config.toml, or --registry URL)
  oci://host/repo:tag        an OCI artifact pushed by `talaria plugin publish --oci`

Signed bundles must be signed by a key you trust (`talaria plugins trust-key`); unsigned ones
need --allow-unsigned. On a terminal you are asked which requested capabilities to grant;
otherwise only --grant CAP (or --yes) grants anything.";

impl Ctx {
    fn target(&self, project: bool) -> Target {
        let scope = if project { Scope::Project(self.workspace.clone()) } else { Scope::User };
        Target::new(&self.home, scope)
    }

    /// The scopes that have installed plugins to check: the user's, and the workspace's when it
    /// has a lockfile.
    pub fn installed_scopes(&self) -> Vec<Target> {
        let project = self.target(true);
        let mut scopes = vec![self.target(false)];
        if project.lock_path.exists() {
            scopes.push(project);
        }
        scopes
    }

    fn registries(&self, extra: &[String]) -> Vec<String> {
        extra.iter().chain(&self.config.marketplace.registries).cloned().collect()
    }

    fn bundle_limits(&self) -> talaria_market::bundle::Limits {
        let mut limits = talaria_market::bundle::Limits::default();
        if let Some(mb) = self.config.marketplace.max_bundle_mb {
            limits.max_bundle_bytes = mb * 1024 * 1024;
            limits.max_file_bytes = mb * 1024 * 1024;
            limits.max_unpacked_bytes = limits.max_unpacked_bytes.max(2 * mb * 1024 * 1024);
        }
        limits
    }
}

/// Progress on stderr: one line per step; a download's size updates in place on a terminal.
struct Progress {
    tty: bool,
}

impl Progress {
    fn new() -> Self {
        Self { tty: std::io::stderr().is_terminal() }
    }

    fn step(&self, what: &str) {
        anstream::eprintln!("  {what}…");
    }

    fn bytes(&self, got: u64, total: Option<u64>) {
        if !self.tty {
            return;
        }
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let text = match total {
            Some(t) => format!("  downloading {:.1} / {:.1} MiB", mib(got), mib(t)),
            None => format!("  downloading {:.1} MiB", mib(got)),
        };
        let mut err = std::io::stderr();
        let _ = write!(err, "\r{text}");
        if total == Some(got) {
            let _ = writeln!(err);
        }
    }
}

/// Decide which newly requested capabilities to grant: `--yes`, `--grant`, or ask on a terminal
/// (with nobody to ask, nothing new is granted).
fn decide(flags: &InstallFlags, consent: &Consent) -> Result<Vec<Capability>, consent::ConsentError> {
    let given = GrantFlags { yes: flags.yes, grants: flags.grants.clone() };
    consent::decide(consent, &given, &Nobody::GrantNothing)
}

pub(crate) use talaria_market::install::consent::ask;

fn print_report(report: &Report, target: &Target) {
    if report.unchanged {
        println!("{} {} is already installed (same digest); nothing to do", report.name, report.version);
        return;
    }
    for note in &report.notes {
        ui::note(note);
    }
    let signed = match &report.signer {
        Some(s) => format!("signed by {s}"),
        None => "unsigned".into(),
    };
    match &report.previous {
        Some(prev) if *prev != report.version => {
            println!("updated {} {prev} → {} ({}, {signed})", report.name, report.version, target.scope.label());
        }
        _ => println!("installed {} {} ({}, {signed})", report.name, report.version, target.scope.label()),
    }
    println!("  granted: {}", caps_list(&report.granted));
    if !report.not_granted.is_empty() {
        ui::warn(&format!(
            "not granted: {} — the plugin runs without them; grant later with `talaria plugins grant {} CAP`",
            caps_list(&report.not_granted),
            report.name
        ));
    }
}

async fn fetch_and_install(
    ctx: &Ctx,
    source: &Source,
    flags: &InstallFlags,
    target: &Target,
) -> anyhow::Result<Report> {
    let progress = Progress::new();
    let registries = ctx.registries(&flags.registry);
    let limits = ctx.bundle_limits();
    progress.step(&format!("fetching {}", source_label(source)));
    let on_bytes = |got, total| progress.bytes(got, total);
    let fetched = source
        .fetch(&FetchOptions {
            registries: &registries,
            max_bundle_bytes: limits.max_bundle_bytes,
            progress: &on_bytes,
        })
        .await?;
    let runtime = ctx.runtime(false)?;
    let check = |manifest: &talaria_runtime::Manifest, wasm: &[u8]| {
        runtime.check_component(manifest, wasm).map(|checked| {
            tracing::info!("{}: {:?} in {:?}", manifest.name, checked.outcome, checked.took);
        })
    };
    let options = Options {
        allow_unsigned: flags.allow_unsigned,
        allow_downgrade: flags.allow_downgrade,
        limits,
        bundled_names: talaria_bundled::PLUGINS.iter().filter_map(|b| manifest_name(b.manifest)).collect(),
        replace_bundled: flags.replace_bundled,
        accept_publisher: flags.accept_publisher,
    };
    let report = install::install(
        &ctx.home,
        target,
        &fetched,
        &options,
        &check,
        &mut |consent| decide(flags, consent),
        &|step| progress.step(step),
    )?;
    Ok(report)
}

/// The `name` of a bundled plugin's manifest.
fn manifest_name(manifest: &str) -> Option<String> {
    talaria_runtime::Manifest::parse(manifest, std::path::Path::new("bundled plugin.toml")).ok().map(|m| m.name)
}

fn source_label(source: &Source) -> String {
    match source {
        Source::Dir(p) | Source::File(p) => p.display().to_string(),
        Source::Url(u) => u.clone(),
        Source::Registry { name, req, .. } => match req {
            Some(r) => format!("{name}@{r} from the registry"),
            None => format!("{name} from the registry"),
        },
        Source::Oci(r) => r.to_string(),
    }
}

pub async fn install_cmd(ctx: &Ctx, spec: &str, flags: &InstallFlags) -> anyhow::Result<ExitCode> {
    let source = Source::parse(spec, &ctx.registries(&flags.registry))?;
    let target = ctx.target(flags.project);
    let report = fetch_and_install(ctx, &source, flags, &target).await?;
    print_report(&report, &target);
    project_changed(ctx, &target, &report.name);
    Ok(ExitCode::SUCCESS)
}

/// After the user changed a project plugin themselves: in a trusted project, pin it again as
/// it is now (they consented to this change); otherwise say that it loads after `talaria trust`.
pub fn project_changed(ctx: &Ctx, target: &Target, name: &str) {
    if let Some(note) = talaria_core::grants::repin(&ctx.home, &target.scope, name) {
        tell(&note);
    }
}

/// Say what a project plugin's change could not do.
pub fn tell(note: &talaria_core::grants::ProjectNote) {
    match note {
        talaria_core::grants::ProjectNote::Untrusted(root) => {
            ui::note(&format!("{} is not trusted yet; its plugins load after `talaria trust`", root.display()));
        }
        talaria_core::grants::ProjectNote::Failed(why) => ui::warn(why),
    }
}

pub async fn update_cmd(ctx: &Ctx, name: Option<&str>, all: bool, flags: &InstallFlags) -> anyhow::Result<ExitCode> {
    let target = ctx.target(flags.project);
    let lock = target.lockfile()?;
    let names: Vec<String> = match (name, all) {
        (Some(n), false) => {
            if lock.get(n).is_none() {
                bail!("`{n}` is not installed in the {} scope; see `talaria plugins list`", target.scope.label());
            }
            vec![n.to_string()]
        }
        (None, true) => lock.plugins.keys().cloned().collect(),
        (Some(_), true) => bail!("give a plugin name or --all, not both"),
        (None, false) => bail!("which plugin? give its name, or --all"),
    };
    if names.is_empty() {
        println!("no plugins installed in the {} scope", target.scope.label());
        return Ok(ExitCode::SUCCESS);
    }
    let registries = ctx.registries(&flags.registry);
    let mut failed = 0;
    for name in names {
        let Some(entry) = lock.get(&name) else { continue };
        let outcome = async {
            let source = Source::parse(&entry.source, &registries)?;
            if let Source::Registry { index, name, .. } = &source {
                let http = talaria_market::source::client()?;
                let (_, latest) =
                    talaria_market::source::resolve(&http, index.as_deref(), &registries, name, None).await?;
                if latest.version <= entry.version && !flags.allow_downgrade {
                    return Ok(None);
                }
            }
            // A plugin installed unsigned was accepted unsigned from this source; one installed
            // signed must stay signed.
            let flags =
                InstallFlags { allow_unsigned: flags.allow_unsigned || entry.signer.is_none(), ..flags.clone() };
            fetch_and_install(ctx, &source, &flags, &target).await.map(Some)
        }
        .await;
        match outcome {
            Ok(Some(report)) if !report.unchanged => {
                print_report(&report, &target);
                project_changed(ctx, &target, &report.name);
            }
            Ok(_) => println!("{name} {} is up to date", entry.version),
            Err(e) => {
                failed += 1;
                ui::error(&format!("{name}: {e:#}"));
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

pub async fn remove_cmd(ctx: &Ctx, name: &str, project: bool, purge: bool) -> anyhow::Result<ExitCode> {
    let target = ctx.target(project);
    match install::remove(&target, name) {
        Ok(entry) => {
            println!("removed {name} {} ({})", entry.version, target.scope.label());
            project_changed(ctx, &target, name);
            let space = talaria_runtime::identity::kv_space(&target.scope, name, Some(&entry.publisher()));
            let data_dir = talaria_runtime::plugin_data_dir(&ctx.home, &space);
            if purge {
                let store = ctx.store().await?;
                let keys = store.kv_clear(&space).await?;
                match std::fs::remove_dir_all(&data_dir) {
                    Ok(()) => println!("  deleted {keys} key-value entries and {}", data_dir.display()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        println!("  deleted {keys} key-value entries")
                    }
                    Err(e) => return Err(anyhow::anyhow!("{}: {e}", data_dir.display())),
                }
            } else {
                println!("  its data stays in {} and its key-value store (`--purge` deletes them)", data_dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(install::InstallError::NotInstalled { .. }) => {
            let runtime = ctx.runtime(false)?;
            match runtime.plugin(name) {
                Some(p) if p.scope == Scope::Bundled => bail!(
                    "`{name}` is built into talaria; turn it off with `enabled = false` under [plugins.{name}] in config.toml"
                ),
                Some(p) if p.installed().is_none() => {
                    bail!("`{name}` was placed by hand in {}; delete that directory to remove it", p.location)
                }
                _ => {
                    bail!("`{name}` is not installed in the {} scope; see `talaria plugins list`", target.scope.label())
                }
            }
        }
        Err(e) => Err(e.into()),
    }
}

pub fn rollback_cmd(ctx: &Ctx, name: &str, project: bool) -> anyhow::Result<ExitCode> {
    let target = ctx.target(project);
    let (from, to) = install::rollback(&target, name)?;
    project_changed(ctx, &target, name);
    println!(
        "rolled back {name} {from} → {to} ({}); `talaria plugins rollback {name}` again returns to {from}",
        target.scope.label()
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn search_cmd(ctx: &Ctx, query: &str, registry: &[String], json: bool) -> anyhow::Result<ExitCode> {
    let registries = ctx.registries(registry);
    if registries.is_empty() {
        bail!(
            "no registry configured: add `registries = [\"https://…/index.json\"]` under [marketplace] in config.toml, or pass --registry URL"
        );
    }
    let hits = talaria_market::source::search(&registries, query).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&hits)?);
        return Ok(ExitCode::SUCCESS);
    }
    if hits.is_empty() {
        println!("no plugins match `{query}`");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = hits
        .iter()
        .map(|h| {
            let caps =
                if h.latest.capabilities.is_empty() { "-".to_string() } else { h.latest.capabilities.join(", ") };
            let signed = if h.latest.signature.is_some() || h.latest.signature_url.is_some() { "yes" } else { "no" };
            vec![
                h.name.clone(),
                h.latest.version.to_string(),
                h.latest.api.to_string(),
                signed.to_string(),
                caps,
                ui::first_line(&h.description, 50),
            ]
        })
        .collect();
    ui::table(&["NAME", "VERSION", "API", "SIGNED", "REQUESTS", "DESCRIPTION"], &rows);
    Ok(ExitCode::SUCCESS)
}

pub fn verify_cmd(ctx: &Ctx, json: bool) -> anyhow::Result<ExitCode> {
    let scopes = ctx.installed_scopes();
    let mut results = Vec::new();
    for target in &scopes {
        for v in install::verify(&ctx.home, target)? {
            results.push((target.scope.label(), v));
        }
    }
    let bad = results.iter().filter(|(_, v)| !v.problems.is_empty()).count();
    if json {
        let items: Vec<serde_json::Value> = results
            .iter()
            .map(|(scope, v)| {
                serde_json::json!({
                    "name": v.name, "scope": scope, "version": v.version.to_string(),
                    "signer": v.signer, "ok": v.problems.is_empty(), "problems": v.problems,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&items)?);
    } else if results.is_empty() {
        println!("no installed plugins to verify (bundled plugins are part of the binary)");
    } else {
        for (scope, v) in &results {
            let signer = v.signer.clone().unwrap_or_else(|| "unsigned".into());
            if v.problems.is_empty() {
                println!("ok      {} {} ({scope}, {signer})", v.name, v.version);
            } else {
                println!("FAILED  {} {} ({scope}, {signer})", v.name, v.version);
                for p in &v.problems {
                    println!("        {p}");
                }
            }
        }
    }
    Ok(if bad == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

pub fn trust_key_cmd(ctx: &Ctx, key: &str, name: &str) -> anyhow::Result<ExitCode> {
    let text = if std::path::Path::new(key).is_file() {
        std::fs::read_to_string(key).with_context(|| format!("reading {key}"))?
    } else {
        key.to_string()
    };
    let public = PublicKey::parse(text.trim())?;
    let mut store = TrustStore::load(&ctx.home)?;
    let id = store.add(&public, name);
    store.save(&ctx.home)?;
    println!("trusting key {id} as `{name}`: plugins it signs can be installed");
    Ok(ExitCode::SUCCESS)
}

pub fn keys_cmd(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let store = TrustStore::load(&ctx.home)?;
    if store.keys.is_empty() {
        println!("no trusted keys; add a publisher's with `talaria plugins trust-key KEY --name NAME`");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> =
        store.keys.iter().map(|(id, k)| vec![id.clone(), k.name.clone(), k.added.clone()]).collect();
    ui::table(&["KEY", "NAME", "ADDED"], &rows);
    Ok(ExitCode::SUCCESS)
}

pub fn untrust_key_cmd(ctx: &Ctx, id: &str) -> anyhow::Result<ExitCode> {
    let mut store = TrustStore::load(&ctx.home)?;
    let Some(key) = store.keys.remove(id) else {
        bail!("no trusted key {id}; see `talaria plugins keys`");
    };
    store.save(&ctx.home)?;
    println!(
        "no longer trusting key {id} ({}); plugins it signed stay installed (`talaria plugins verify` lists them)",
        key.name
    );
    Ok(ExitCode::SUCCESS)
}
