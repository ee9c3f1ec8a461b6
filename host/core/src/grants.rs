//! Granting and revoking a plugin's capabilities, for every front door that offers it (the
//! terminal's `talaria plugins grant|revoke`, the dashboard): a grant only allows what the
//! plugin's manifest requests; an installed plugin's grants are kept in its scope's lockfile,
//! another's in grants.toml; running conversations reload their plugins before their next turn.

use std::path::{Path, PathBuf};

use talaria_runtime::{Capability, GrantFile, Runtime, Scope};

use crate::Error;

/// What a change did.
#[derive(Debug, Clone)]
pub struct Changed {
    /// The capabilities granted (or revoked).
    pub changed: Vec<Capability>,
    /// What the plugin has now.
    pub now: Vec<Capability>,
    /// The plugin's scope, for people (`user`, `project`, `bundled`).
    pub scope: String,
    /// Asked to revoke, but not granted.
    pub not_granted: Vec<Capability>,
    /// What became of the project's record of the plugin, when it is a project's.
    pub project: Option<ProjectNote>,
}

/// What [`repin`] could not do, for people.
#[derive(Debug, Clone)]
pub enum ProjectNote {
    /// The project is not trusted: its plugins load after `talaria trust`.
    Untrusted(PathBuf),
    /// The trusted project's record of the plugin could not be updated: why.
    Failed(String),
}

/// After the user changed a project's plugin `name` themselves (installed, updated, its grants
/// changed): in a trusted project, pin it again as it is now, since they consented to this
/// change. Nothing for another scope; what could not be done otherwise.
pub fn repin(home: &Path, scope: &Scope, name: &str) -> Option<ProjectNote> {
    let Scope::Project(root) = scope else { return None };
    let trusted = GrantFile::load(&home.join("grants.toml")).is_ok_and(|f| f.is_trusted(root));
    if !trusted {
        return Some(ProjectNote::Untrusted(root.clone()));
    }
    let repinned = talaria_runtime::trust::repin(&crate::bundled(), home, root, name);
    repinned.err().map(|e| {
        ProjectNote::Failed(format!("could not record '{name}' for the trusted project {}: {e}", root.display()))
    })
}

/// The capabilities in `caps`, or `-`.
pub fn caps_text(caps: &[Capability]) -> String {
    if caps.is_empty() { "-".to_string() } else { caps.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ") }
}

/// Grant (`grant`) or revoke the capabilities `requested` (or `all`) of `runtime`'s plugin
/// `name`, as the home at `home` keeps them.
///
/// # Errors
/// No such plugin, a capability that does not parse or that its manifest does not request,
/// or the grants cannot be read or saved.
pub fn change(home: &Path, runtime: &Runtime, name: &str, requested: &[String], grant: bool) -> Result<Changed, Error> {
    let Some(p) = runtime.plugin(name) else {
        let names: Vec<&str> = runtime.plugins().iter().map(|p| p.name()).collect();
        return Err(Error::Usage(format!("no plugin named '{name}' (loaded: {})", names.join(", "))));
    };
    let file_error = |e: talaria_runtime::FileError| Error::Usage(e.to_string());
    let path = home.join("grants.toml");
    let mut file = GrantFile::load(&path).map_err(file_error)?;
    let mut current = match p.installed() {
        Some(installed) => installed.granted.clone(),
        None => file.recorded(&p.scope, name).unwrap_or_else(|| match p.scope {
            Scope::Bundled => p.manifest.requests.clone(),
            Scope::User | Scope::Project(_) => Vec::new(),
        }),
    };
    let all = requested.iter().any(|c| c == "all");
    let caps: Vec<Capability> = if all {
        if grant { p.manifest.requests.clone() } else { current.clone() }
    } else {
        requested
            .iter()
            .map(|c| c.parse::<Capability>().map_err(|e| Error::Usage(e.to_string())))
            .collect::<Result<_, _>>()?
    };
    let mut not_granted = Vec::new();
    for cap in &caps {
        if grant {
            if !p.manifest.requests.iter().any(|r| r.covers(cap)) {
                return Err(Error::Usage(format!(
                    "plugin '{name}' does not request {cap} (it requests: {}); a grant can only allow what the manifest asks for",
                    caps_text(&p.manifest.requests)
                )));
            }
            if !current.contains(cap) {
                current.push(cap.clone());
            }
        } else if current.contains(cap) {
            current.retain(|c| c != cap);
        } else {
            not_granted.push(cap.clone());
        }
    }
    let mut project = None;
    if p.installed().is_some() {
        // An installed plugin's grants live in its scope's lockfile.
        let target = talaria_market::install::Target::new(home, p.scope.clone());
        talaria_market::install::set_grants(&target, name, &current).map_err(|e| Error::Usage(e.to_string()))?;
        project = repin(home, &p.scope, name);
    } else {
        file.record(&p.scope, name, &current);
        file.save(&path).map_err(file_error)?;
    }
    // Running conversations and gateways reload their plugins before their next turn.
    if let Err(e) = talaria_runtime::mark_plugins_changed(home) {
        tracing::warn!("cannot tell running sessions that plugins changed: {e}");
    }
    Ok(Changed { changed: caps, now: current, scope: p.scope.label().to_string(), not_granted, project })
}
