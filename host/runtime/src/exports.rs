//! What a compiled component exports, checked against its manifest before it is ever run.
//!
//! A component is built against one API version: every `talaria:plugin/*` interface it exports
//! or imports carries that version, and it must be the manifest's `api`. Each kind the manifest
//! names needs its interface exported (`tool`: `tools`, `memory`: `memory`, `context-engine`:
//! `context`, `hook`: `hooks`), and nothing is exported that the manifest does not declare (a
//! memory provider may export `tools` too). The export indices of each interface are looked up
//! once here, so a component exporting only `hooks` needs nothing else.

use wasmtime::Engine;
use wasmtime::component::{Component, InstancePre};

use crate::host::HostState;
use crate::host::api::since_v0_2_0::exports::talaria::plugin as v2;
use crate::host::api::since_v0_3_0::exports::talaria::plugin0_3_0 as v3;
use crate::host::api::since_v0_4_0::exports::talaria::plugin0_4_0 as v4;
use crate::host::api::{Api, ToolsExport};
use crate::manifest::{Kind, Manifest, SUPPORTED_API_VERSIONS};

const PREFIX: &str = "talaria:plugin/";

/// The names a component exports, and the `talaria:plugin` interfaces it imports: all the
/// checks against the manifest need (cached beside the tool specs, so a cache hit is checked
/// too).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Surface {
    pub exports: Vec<String>,
    pub imports: Vec<String>,
}

impl Surface {
    fn of(engine: &Engine, component: &Component) -> Self {
        let exports = component.component_type().exports(engine).map(|(name, _)| name.to_string()).collect();
        let imports = imports(engine, component).into_iter().filter(|n| n.starts_with(PREFIX)).collect();
        Self { exports, imports }
    }
}

/// Every name a component imports, WASI's included (`talaria:plugin/kv@0.2.0`,
/// `wasi:http/outgoing-handler@0.2.6`, ...).
pub(crate) fn imports(engine: &Engine, component: &Component) -> Vec<String> {
    component.component_type().imports(engine).map(|(name, _)| name.to_string()).collect()
}

/// A component ready to instantiate, with the exports it has.
pub(crate) struct Prepared {
    pub pre: InstancePre<HostState>,
    pub surface: Surface,
    pub tools: Option<ToolsExport>,
    pub memory: Option<v2::memory::GuestIndices>,
    pub context: Option<v2::context::GuestIndices>,
    pub hooks: Option<v2::hooks::GuestIndices>,
    pub adapter: Option<v3::adapter::GuestIndices>,
    /// An adapter's `sender` (API 0.4.0): it may send from several instances.
    pub sender: Option<v4::sender::GuestIndices>,
}

/// The interface a kind exports, and the world a component of that kind targets.
fn interface_of(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Tool => ("tools", "tool-plugin"),
        Kind::Memory => ("memory", "memory-plugin"),
        Kind::ContextEngine => ("context", "context-engine-plugin"),
        Kind::Hook => ("hooks", "hook-plugin"),
        Kind::Platform => ("adapter", "platform-plugin"),
    }
}

/// `talaria:plugin/IFACE@VERSION` names among `names`: (full name, interface, version).
fn ours(names: &[String]) -> Vec<(&str, &str, &str)> {
    names
        .iter()
        .filter_map(|n| {
            let (iface, version) = n.strip_prefix(PREFIX)?.split_once('@')?;
            Some((n.as_str(), iface, version))
        })
        .collect()
}

/// The release line of a version: (major, minor) before 1.0, (major, 0) after.
fn line(v: &semver::Version) -> (u64, u64) {
    if v.major == 0 { (0, v.minor) } else { (v.major, 0) }
}

/// Check `component` against `manifest` and look up its exports.
///
/// # Errors
/// As for [`check`]; and imports this host does not provide.
pub(crate) fn prepare(
    engine: &Engine,
    instance_pre: Result<InstancePre<HostState>, wasmtime::Error>,
    component: &Component,
    manifest: &Manifest,
) -> Result<Prepared, String> {
    let surface = Surface::of(engine, component);
    let api = check(&surface, manifest)?;
    let has = |iface: &str| ours(&surface.exports).iter().any(|(_, i, _)| *i == iface);
    let pre = instance_pre.map_err(|e| format!("the component needs imports this host does not provide: {e:#}"))?;
    let bad = |iface: &str, e: wasmtime::Error| format!("its export {PREFIX}{iface}@{}: {e:#}", api.version());
    let tools = has("tools").then(|| ToolsExport::new(api, &pre).map_err(|e| bad("tools", e))).transpose()?;
    let v2_only = api != Api::V0_1;
    let memory = (v2_only && has("memory"))
        .then(|| v2::memory::GuestIndices::new(&pre).map_err(|e| bad("memory", e)))
        .transpose()?;
    let context = (v2_only && has("context"))
        .then(|| v2::context::GuestIndices::new(&pre).map_err(|e| bad("context", e)))
        .transpose()?;
    let hooks = (v2_only && has("hooks"))
        .then(|| v2::hooks::GuestIndices::new(&pre).map_err(|e| bad("hooks", e)))
        .transpose()?;
    let adapter = (api >= Api::V0_3 && has("adapter"))
        .then(|| v3::adapter::GuestIndices::new(&pre).map_err(|e| bad("adapter", e)))
        .transpose()?;
    let sender = (api >= Api::V0_4 && has("sender"))
        .then(|| v4::sender::GuestIndices::new(&pre).map_err(|e| bad("sender", e)))
        .transpose()?;
    Ok(Prepared { pre, surface, tools, memory, context, hooks, adapter, sender })
}

/// Check what a component exports and imports against its manifest; the API version it was
/// built against.
///
/// # Errors
/// A sentence saying what does not fit, naming both sides (the manifest's `api` and `kind`,
/// the component's interfaces).
pub(crate) fn check(surface: &Surface, manifest: &Manifest) -> Result<Api, String> {
    let exports = &surface.exports;
    let (our_exports, our_imports) = (ours(exports), ours(&surface.imports));
    let supported = SUPPORTED_API_VERSIONS.join(", ");
    for (verb, list) in [("exports", &our_exports), ("imports", &our_imports)] {
        if let Some((name, _, _)) = list.iter().find(|(_, _, v)| Api::parse(v).is_none()) {
            return Err(format!(
                "the component {verb} {name}, an API version this talaria does not support (it supports {supported})"
            ));
        }
    }
    let wanted_api = manifest.api.to_string();
    let kinds = manifest.kind_list();
    let Some(_) = our_exports.first() else {
        let kind = kinds.first().copied().unwrap_or(Kind::Tool);
        return Err(missing_export(kind, &wanted_api, exports));
    };
    // The APIs every interface it names belongs to.
    let names: Vec<(&str, Api)> =
        our_exports.iter().chain(&our_imports).filter_map(|(n, _, v)| Some((*n, Api::parse(v)?))).collect();
    let fitting: Vec<Api> =
        Api::ALL.into_iter().filter(|a| names.iter().all(|(_, v)| Api::including(*v).contains(a))).collect();
    let Some(&oldest) = fitting.first() else {
        let mut versions: Vec<&str> = names.iter().map(|(_, v)| v.version()).collect();
        versions.sort_unstable();
        versions.dedup();
        let listed: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
        return Err(format!(
            "the component mixes plugin API versions {} ({}); build it against one",
            versions.join(" and "),
            listed.join(", ")
        ));
    };
    let wanted = fitting
        .iter()
        .copied()
        .find(|a| semver::Version::parse(a.version()).is_ok_and(|v| line(&v) == line(&manifest.api)));
    let Some(api) = wanted else {
        let newest = names.iter().map(|(_, v)| *v).max().unwrap_or(oldest);
        return Err(format!(
            "plugin.toml says api = \"{wanted_api}\" but the component was built against API {} (it exports {}); set api = \"{}\" in plugin.toml or rebuild the component against API {wanted_api}",
            newest.version(),
            our_exports.iter().map(|(n, _, _)| *n).collect::<Vec<_>>().join(", "),
            newest.version(),
        ));
    };
    let has = |iface: &str| our_exports.iter().any(|(_, i, _)| *i == iface);
    for &kind in &kinds {
        let (iface, _) = interface_of(kind);
        if !has(iface) {
            return Err(missing_export(kind, api.version(), exports));
        }
    }
    for (name, iface, _) in &our_exports {
        let declared = Kind::ALL.into_iter().find(|k| interface_of(*k).0 == *iface);
        let covered = match declared {
            Some(Kind::Tool) => kinds.contains(&Kind::Tool) || kinds.contains(&Kind::Memory),
            Some(kind) => kinds.contains(&kind),
            None => true, // not an interface of this version: nothing uses it
        };
        if !covered && let Some(kind) = declared {
            let (_, world) = interface_of(kinds.first().copied().unwrap_or(Kind::Tool));
            return Err(format!(
                "the component exports {name} but plugin.toml does not declare kind `{kind}` (it says kind = [{}]); add \"{kind}\" to `kind`, or build the component for world `{world}`",
                manifest.kinds.iter().map(|k| format!("\"{k}\"")).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    Ok(api)
}

fn missing_export(kind: Kind, version: &str, exports: &[String]) -> String {
    let (iface, world) = interface_of(kind);
    let got = if exports.is_empty() { "nothing".to_string() } else { exports.join(", ") };
    let hint = match kind {
        Kind::Tool => " (talaria-sdk's export_tools! does this)",
        Kind::Platform => " (talaria-sdk's export_adapter! does this)",
        Kind::Memory | Kind::ContextEngine | Kind::Hook => "",
    };
    // 0.3.0 added only the adapter and 0.4.0 its sender; the other kinds' interfaces keep
    // their 0.2.0 names.
    let version = match (kind, version) {
        (Kind::Platform, _) => "0.3.0",
        (_, "0.3.0" | "0.4.0") => "0.2.0",
        (_, v) => v,
    };
    format!(
        "the component does not export {PREFIX}{iface}@{version}: it exports {got}. It was built for another world; a {kind} plugin targets world `{world}`{hint}"
    )
}
