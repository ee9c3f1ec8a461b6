//! `talaria plugin new|build|test|pack|keygen|sign|publish`: the commands, as the `talaria`
//! binary mounts them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use talaria_core::market::bundle;
use talaria_core::market::index::{Index, IndexVersion};
use talaria_core::market::oci::{self, OciRef};
use talaria_core::market::sign::{SecretKey, Signature, TrustStore};

use talaria_core::market::install::consent::GrantFlags;

use crate::build::{BuildOptions, BuildSandbox, Confine};
use crate::{self as author, Place, plugin_test, ui};

/// `talaria plugin ...`.
#[derive(Subcommand)]
#[command(defer = true)]
pub enum PluginCmd {
    /// Start a plugin project of any kind in Rust, JavaScript or Python; it builds, tests and
    /// installs as it is
    New {
        /// The plugin's name (a-z, 0-9, `-`, `_`)
        name: String,
        #[arg(long, value_enum, default_value = "rust")]
        lang: author::Lang,
        /// What it is
        #[arg(long, value_enum, default_value = "tool")]
        kind: author::Starter,
        /// Where to create it [default: ./NAME]
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build, test and install the plugin, then again on every save; running chats and
    /// gateways reload it before their next turn
    Dev {
        /// The plugin project [default: .]
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// The project's language [default: detected from its files]
        #[arg(long, value_enum)]
        lang: Option<author::Lang>,
        /// Install after a good build even when tests fail
        #[arg(long)]
        skip_tests: bool,
        /// One round (build, test, install), then stop
        #[arg(long)]
        once: bool,
        /// Grant a capability plugin.toml requests now, without asking (repeatable; `all` =
        /// everything it requests now). A later plugin.toml that asks for more is asked about
        #[arg(long = "grant", value_name = "CAP")]
        grants: Vec<String>,
        /// Grant everything plugin.toml requests now, without asking
        #[arg(short = 'y', long)]
        yes: bool,
        /// Run the build as you, outside the command sandbox (its build.rs, app.py or module
        /// then reach all your files and network)
        #[arg(long)]
        unconfined_build: bool,
    },
    /// Build the component with the language's toolchain, in the command sandbox
    Build {
        /// The plugin project [default: .]
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// The project's language [default: detected from its files]
        #[arg(long, value_enum)]
        lang: Option<author::Lang>,
        /// Run the build as you, outside the command sandbox (its build.rs, app.py or module
        /// then reach all your files and network)
        #[arg(long)]
        unconfined_build: bool,
    },
    /// Check the component against this talaria and run plugin-tests.toml in the sandbox
    Test {
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Print as JSON
        #[arg(long)]
        json: bool,
    },
    /// Pack plugin.toml, the component and its documents into a bundle (.tar.gz)
    Pack {
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// The bundle to write [default: DIR/dist/NAME-VERSION.tar.gz]
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Make a signing key (kept in $TALARIA_HOME/keys) and print its public key
    Keygen {
        /// The key's name
        #[arg(long, default_value = "default")]
        name: String,
        /// Replace an existing key of that name
        #[arg(long)]
        force: bool,
    },
    /// Sign a bundle: writes BUNDLE.sig
    Sign {
        bundle: PathBuf,
        /// A key name from `plugin keygen`, or a secret key file
        #[arg(long, default_value = "default")]
        key: String,
    },
    /// Push a bundle to an OCI registry, or add it to a registry index file
    #[command(after_help = "Examples:
  talaria plugin publish dist/hello-1.0.0.tar.gz --oci oci://ghcr.io/me/hello
      pushes tags 1.0.0 and latest (or only the tag you write: oci://…/hello:beta)
  talaria plugin publish dist/hello-1.0.0.tar.gz --index site/index.json --url bundles/hello-1.0.0.tar.gz
      adds the version to the index (creating it), with its digest, signature and capabilities;
      upload the bundle to that URL (relative to the index) yourself")]
    Publish {
        bundle: PathBuf,
        #[arg(long, conflicts_with_all = ["index", "url"], help = "oci://HOST/REPO[:TAG]")]
        oci: Option<String>,
        /// The registry index file to add the version to
        #[arg(long, requires = "url")]
        index: Option<PathBuf>,
        /// Where the bundle will be downloaded from (absolute, or relative to the index)
        #[arg(long, requires = "index")]
        url: Option<String>,
    },
}

/// Carry out `cmd` for `ctx`.
///
/// # Errors
/// What went wrong, in words (the binary prints it).
pub async fn run(ctx: &Place<'_>, cmd: PluginCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCmd::New { name, lang, dir, kind } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            author::new_project(&dir, &name, kind, lang)?;
            let what = match kind {
                author::Starter::Tool => "the tool plugin",
                author::Starter::Memory => "the memory provider",
                author::Starter::Context => "the context engine",
                author::Starter::Hook => "the hook",
                author::Starter::Adapter => "the platform adapter",
            };
            println!("created {what} {name} ({lang}) in {}", dir.display());
            println!(
                "next: cd {} && talaria plugin build && talaria plugin test (its README says more)",
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        PluginCmd::Build { dir, lang, unconfined_build } => {
            let dir = if dir == Path::new(".") { ctx.workspace.to_path_buf() } else { ctx.workspace.join(dir) };
            let lang = match lang {
                Some(l) => l,
                None => author::detect(&dir)?,
            };
            let options = BuildOptions { release: true, target_dir: None, confine: confine(ctx, unconfined_build)? };
            // Progress and size are on stderr; stdout has the component's path, for scripts.
            let wasm = tokio::task::spawn_blocking(move || author::build::build_with(&dir, lang, &options)).await??;
            println!("{}", wasm.display());
            Ok(ExitCode::SUCCESS)
        }
        PluginCmd::Test { dir, json } => plugin_test::run(ctx, &dir, json).await,
        PluginCmd::Dev { dir, lang, skip_tests, once, grants, yes, unconfined_build } => {
            let options = author::dev::DevOptions {
                skip_tests,
                once,
                grants: GrantFlags { yes, grants },
                confine: confine(ctx, unconfined_build)?,
            };
            author::dev::run(ctx, &dir, lang, options).await
        }
        PluginCmd::Pack { dir, output } => pack(&dir, output),
        PluginCmd::Keygen { name, force } => keygen(ctx, &name, force),
        PluginCmd::Sign { bundle, key } => sign(ctx, &bundle, &key),
        PluginCmd::Publish { bundle, oci, index, url } => publish(&bundle, oci.as_deref(), index.zip(url)).await,
    }
}

/// Where builds run: in the command sandbox as `[sandbox]` sets it, or as the user when asked.
///
/// # Errors
/// The sandbox cannot start here: why, the fix, and `--unconfined-build`.
fn confine(ctx: &Place<'_>, unconfined: bool) -> anyhow::Result<Confine> {
    if unconfined {
        ui::warn("--unconfined-build: the build runs as you, with all your files and network");
        return Ok(Confine::Unconfined);
    }
    let sandbox = BuildSandbox::new(ctx.config.command_sandbox(ctx.home)).map_err(anyhow::Error::msg)?;
    Ok(Confine::Sandbox(std::sync::Arc::new(sandbox)))
}

fn pack(dir: &Path, output: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let (bytes, manifest) = bundle::pack(dir)?;
    let output =
        output.unwrap_or_else(|| dir.join("dist").join(format!("{}-{}.tar.gz", manifest.name, manifest.version)));
    if let Some(parent) = output.parent() {
        std::fs::create_dir_all(parent).with_context(|| parent.display().to_string())?;
    }
    std::fs::write(&output, &bytes).with_context(|| output.display().to_string())?;
    let stale = PathBuf::from(format!("{}.sig", output.display()));
    if stale.exists() {
        std::fs::remove_file(&stale).with_context(|| stale.display().to_string())?;
        ui::note(&format!("removed {}: it signed the previous bundle", stale.display()));
    }
    println!("packed {} {} into {}", manifest.name, manifest.version, output.display());
    println!("  {} ({:.1} KiB)", bundle::digest(&bytes), bytes.len() as f64 / 1024.0);
    Ok(ExitCode::SUCCESS)
}

fn key_path(ctx: &Place<'_>, name: &str) -> PathBuf {
    ctx.home.join("keys").join(format!("{name}.key"))
}

fn keygen(ctx: &Place<'_>, name: &str, force: bool) -> anyhow::Result<ExitCode> {
    talaria_core::runtime::check_name(name).map_err(|e| anyhow::anyhow!("key name {e}"))?;
    let path = key_path(ctx, name);
    if path.exists() && !force {
        bail!(
            "{} exists; pass --force to replace it (plugins signed with it will no longer match a new key)",
            path.display()
        );
    }
    let key = SecretKey::generate()?;
    talaria_core::runtime::fsutil::write_private(&path, key.to_file_text().as_bytes())
        .with_context(|| path.display().to_string())?;
    let public = key.public();
    let pub_path = path.with_extension("pub");
    std::fs::write(&pub_path, format!("{public}\n")).with_context(|| pub_path.display().to_string())?;
    // You trust your own key, so you can install what you sign.
    let mut store = TrustStore::load(ctx.home)?;
    store.add(&public, &format!("{name} (your key)"));
    store.save(ctx.home)?;
    println!("secret key: {} (keep it private)", path.display());
    println!("public key: {}", pub_path.display());
    println!("{public}");
    println!("key id {}; it is in your trust store. Users add it with:", public.id());
    println!("  talaria plugins trust-key \"{public}\" --name YOUR_NAME");
    Ok(ExitCode::SUCCESS)
}

/// A signing key: a name from `plugin keygen` (in `$TALARIA_HOME/keys`), or a key file.
///
/// # Errors
/// No such key, or not a key.
pub fn load_key(ctx: &Place<'_>, key: &str) -> anyhow::Result<SecretKey> {
    let path = if Path::new(key).is_file() { PathBuf::from(key) } else { key_path(ctx, key) };
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!("no signing key at {}; make one with `talaria plugin keygen --name {key}`", path.display())
    })?;
    SecretKey::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn sign(ctx: &Place<'_>, bundle_path: &Path, key: &str) -> anyhow::Result<ExitCode> {
    let key = load_key(ctx, key)?;
    // Refuse to sign what would not install.
    let (bytes, _manifest) = open_bundle(bundle_path)?;
    let digest = bundle::digest(&bytes);
    let signature = key.sign(&digest);
    let sig_path = PathBuf::from(format!("{}.sig", bundle_path.display()));
    std::fs::write(&sig_path, signature.to_json()).with_context(|| sig_path.display().to_string())?;
    println!("signed {digest} with key {}: {}", signature.key_id, sig_path.display());
    Ok(ExitCode::SUCCESS)
}

/// A bundle to publish: its bytes, manifest and signature.
struct Publishable {
    bytes: Vec<u8>,
    manifest: talaria_core::runtime::Manifest,
    signature: Option<Signature>,
    digest: String,
}

/// A bundle's bytes and manifest, after unpacking it as an install would.
fn open_bundle(bundle_path: &Path) -> anyhow::Result<(Vec<u8>, talaria_core::runtime::Manifest)> {
    let bytes = std::fs::read(bundle_path).with_context(|| bundle_path.display().to_string())?;
    let staged = tempfile::tempdir()?;
    let root = bundle::unpack(&bytes, staged.path(), &bundle::Limits::default())
        .with_context(|| format!("{} is not a plugin bundle", bundle_path.display()))?;
    let manifest = talaria_core::runtime::Manifest::load(&root.join("plugin.toml"))
        .map_err(|e| anyhow::anyhow!("the bundle's plugin.toml: {}", e.message))?;
    Ok((bytes, manifest))
}

fn publishable(bundle_path: &Path) -> anyhow::Result<Publishable> {
    let (bytes, manifest) = open_bundle(bundle_path)?;
    let digest = bundle::digest(&bytes);
    let sig_path = PathBuf::from(format!("{}.sig", bundle_path.display()));
    let signature = match std::fs::read(&sig_path) {
        Ok(sig) => {
            let sig = Signature::parse(&sig).map_err(|e| anyhow::anyhow!("{}: {e}", sig_path.display()))?;
            if sig.digest != digest {
                bail!(
                    "{} signs another bundle ({}); sign this one again with `talaria plugin sign`",
                    sig_path.display(),
                    sig.digest
                );
            }
            Some(sig)
        }
        Err(_) => {
            ui::warn(&format!(
                "{} is not signed (no {}); users will need --allow-unsigned. Sign it with `talaria plugin sign`",
                bundle_path.display(),
                sig_path.display()
            ));
            None
        }
    };
    Ok(Publishable { bytes, manifest, signature, digest })
}

async fn publish(
    bundle_path: &Path,
    oci_ref: Option<&str>,
    index: Option<(PathBuf, String)>,
) -> anyhow::Result<ExitCode> {
    let p = publishable(bundle_path)?;
    let m = &p.manifest;
    let capabilities: Vec<String> = m.requests.iter().map(ToString::to_string).collect();
    match (oci_ref, index) {
        (Some(reference), None) => {
            talaria_core::market::install_crypto();
            let parsed: OciRef = reference.parse()?;
            let explicit_tag = reference.rsplit('/').next().is_some_and(|last| last.contains(':'));
            let tags: Vec<String> = if explicit_tag {
                vec![parsed.tag().unwrap_or("latest").to_string()]
            } else {
                vec![m.version.to_string(), "latest".into()]
            };
            let config = serde_json::json!({
                "name": m.name, "version": m.version.to_string(), "api": m.api.to_string(), "kinds": m.kinds,
                "capabilities": capabilities, "description": m.description, "digest": p.digest,
            });
            let config = serde_json::to_vec(&config)?;
            let sig = p.signature.as_ref().map(|s| s.to_json().into_bytes());
            for tag in &tags {
                let target: OciRef = format!("oci://{}/{}:{tag}", parsed.host(), parsed.repository()).parse()?;
                let digest = oci::push(&target, &p.bytes, sig.as_deref(), &config).await?;
                println!("pushed {} {} to {target} ({digest})", m.name, m.version);
            }
            println!(
                "install with: talaria plugins install oci://{}/{}:{}",
                parsed.host(),
                parsed.repository(),
                tags[0]
            );
        }
        (None, Some((index_path, url))) => {
            let mut index = match std::fs::read(&index_path) {
                Ok(bytes) => Index::parse(&bytes, &index_path.display().to_string())?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index { talaria_index: 1, plugins: Vec::new() },
                Err(e) => return Err(anyhow::anyhow!("{}: {e}", index_path.display())),
            };
            let version = IndexVersion {
                version: m.version.clone(),
                api: m.api.clone(),
                kinds: m.kinds.clone(),
                capabilities,
                digest: p.digest.clone(),
                url,
                signature: p.signature.clone(),
                signature_url: None,
                yanked: false,
            };
            index.upsert(&m.name, &m.description, version.clone());
            let text = serde_json::to_string_pretty(&index)?;
            std::fs::write(&index_path, format!("{text}\n")).with_context(|| index_path.display().to_string())?;
            println!("added {} {} to {}:", m.name, m.version, index_path.display());
            println!("{}", serde_json::to_string_pretty(&version)?);
        }
        _ => bail!("say where to publish: --oci oci://HOST/REPO[:TAG], or --index FILE --url URL"),
    }
    Ok(ExitCode::SUCCESS)
}
