//! `plugin.toml`: what a plugin is, which API it was built against, and what it asks to touch.
//!
//! A plugin is one or more [`Kind`]s: `tool` (API 0.1.0 and later), `memory`, `context-engine`
//! and `hook` (API 0.2.0 and later). A hook plugin lists the events it wants under
//! `[hook] events`; `enabled = false` keeps a plugin off until the operator sets
//! `[plugins.NAME] enabled = true` in config.toml.
//!
//! Tool plugins may describe each tool under `[tools.NAME]` (`read_only`, `destructive`,
//! `idempotent`, `open_world`, and `paths`: the arguments naming workspace paths it touches),
//! hints the loop uses to run calls side by side and front doors use to show them (see
//! [`talaria_protocol::ToolAnnotations`]).
//!
//! A requested secret names the one host it is sent to and, optionally, the request headers it
//! may be filled into (`headers`, lower-cased; by default [`DEFAULT_SECRET_HEADERS`]). Headers
//! that servers commonly echo back (`origin`, `referer`, `host`, `user-agent`, ...) can never
//! be named.
//!
//! ```
//! let m = talaria_runtime::Manifest::parse(r#"
//!     name = "weather"
//!     version = "0.1.0"
//!     api = "0.1.0"
//!     [capabilities]
//!     network = ["api.weatherapi.com"]
//! "#, "plugin.toml".as_ref()).unwrap();
//! assert_eq!(m.name, "weather");
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use talaria_protocol::{HookKind, ToolAnnotations};

use crate::grant::{Access, Capability, HostPattern};

/// Plugin API versions this host has bindings for.
pub const SUPPORTED_API_VERSIONS: &[&str] = &["0.1.0", "0.2.0", "0.3.0", "0.4.0"];

/// The kinds a plugin can be that this host runs.
pub const SUPPORTED_KINDS: &[&str] = &["tool", "memory", "context-engine", "hook", "platform"];
const KNOWN_KINDS: &[&str] = &["tool", "memory", "context-engine", "hook", "platform"];

/// The headers a secret may be filled into when its request names none.
pub const DEFAULT_SECRET_HEADERS: &[&str] = &["authorization", "x-api-key"];

/// Where a secret with `in_path = true` may also go: the URL path (named like a header, which
/// no header can be).
pub(crate) const PATH_PLACE: &str = ":path";
/// Where a secret with `in_messages = true` may also go: WebSocket messages to its host.
pub(crate) const MESSAGE_PLACE: &str = ":message";

/// How a place a secret may go is named for people: `header authorization`, `the URL path`,
/// `WebSocket messages`.
pub fn place_name(place: &str) -> String {
    match place {
        PATH_PLACE => "the URL path".to_string(),
        MESSAGE_PLACE => "WebSocket messages".to_string(),
        header => format!("header {header}"),
    }
}

/// Headers that servers commonly echo back or log: a secret is never filled into them, and a
/// manifest cannot name them in a secret's `headers`.
pub const REFLECTED_HEADERS: &[&str] = &[
    "origin",
    "referer",
    "host",
    "user-agent",
    "accept",
    "accept-language",
    "content-type",
    "forwarded",
    "via",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-real-ip",
];

/// The first API version with kinds beside `tool` and the `llm` import.
const KINDS_API: semver::Version = semver::Version::new(0, 2, 0);

/// The first API version with platform adapters.
const PLATFORM_API: semver::Version = semver::Version::new(0, 3, 0);

/// What a plugin does for the host; a plugin may be several kinds at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Offers tools to the model (export `tools`).
    Tool,
    /// A memory provider (export `memory`, and `tools` optionally).
    Memory,
    /// Decides when to compress the history, and does it (export `context`).
    ContextEngine,
    /// Observes the loop and may block, ask for approval or add context (export `hooks`).
    Hook,
    /// Connects the gateway to a chat platform (export `adapter`, API 0.3.0; and `sender`,
    /// API 0.4.0, to send from several instances at once).
    Platform,
}

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::Tool, Kind::Memory, Kind::ContextEngine, Kind::Hook, Kind::Platform];

    /// The name used in plugin.toml's `kind`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Memory => "memory",
            Kind::ContextEngine => "context-engine",
            Kind::Hook => "hook",
            Kind::Platform => "platform",
        }
    }

    /// The kind named `name` in a manifest.
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A manifest that failed to load: always names the file, and the field where one is at fault.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ManifestError {
    pub path: PathBuf,
    pub message: String,
}

/// A parsed and checked manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub name: String,
    pub version: semver::Version,
    /// The plugin API version it was built against.
    pub api: semver::Version,
    pub kinds: Vec<String>,
    pub description: String,
    pub author: Option<String>,
    pub license: Option<String>,
    /// The component file, relative to the plugin directory.
    pub wasm: String,
    /// Capabilities requested, in manifest order.
    pub requests: Vec<Capability>,
    /// The headers each requested secret may be filled into.
    pub secret_headers: SecretHeaders,
    pub limits: Limits,
    /// Hook plugins: the events they want (`[hook] events`), in manifest order; empty otherwise.
    pub hook_events: Vec<HookKind>,
    /// `enabled = false`: off until the operator enables it in config.toml. Default true.
    pub enabled: bool,
    /// `[tools.NAME]`: what each tool does, by tool name (tools not named get the cautious
    /// defaults).
    pub tools: BTreeMap<String, ToolAnnotations>,
}

impl Manifest {
    /// The kinds, typed (the manifest was checked, so every name is a supported kind).
    pub fn kind_list(&self) -> Vec<Kind> {
        self.kinds.iter().filter_map(|k| Kind::parse(k)).collect()
    }
}

/// The request headers each requested secret may be filled into, lower-case, by secret name;
/// `:path` and `:message` stand for the URL path and WebSocket messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretHeaders(BTreeMap<String, Vec<String>>);

impl SecretHeaders {
    /// The headers secret `name` may go into; `None` when the manifest does not request it.
    pub fn of(&self, name: &str) -> Option<&[String]> {
        self.0.get(name).map(Vec::as_slice)
    }

    /// Every requested secret with its headers, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.0.iter().map(|(name, headers)| (name.as_str(), headers.as_slice()))
    }
}

/// Per-call limits a plugin asks for; the host caps them at its own maximums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub memory_mb: Option<u32>,
    pub timeout_secs: Option<u32>,
    pub output_kb: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestToml {
    name: String,
    version: String,
    api: String,
    #[serde(default = "default_kind")]
    kind: Vec<String>,
    #[serde(default)]
    description: String,
    author: Option<String>,
    license: Option<String>,
    #[serde(default = "default_wasm")]
    wasm: String,
    #[serde(default)]
    capabilities: CapabilitiesToml,
    #[serde(default)]
    limits: Limits,
    hook: Option<HookToml>,
    #[serde(default = "default_enabled")]
    enabled: bool,
    #[serde(default)]
    tools: BTreeMap<String, ToolToml>,
    /// Documentation of the plugin's `[plugins.NAME.config]` settings; not interpreted here.
    #[serde(default, rename = "config")]
    _config: Option<toml::Table>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CapabilitiesToml {
    #[serde(default)]
    filesystem: Vec<FsToml>,
    #[serde(default)]
    network: Vec<String>,
    #[serde(default)]
    secrets: Vec<SecretToml>,
    #[serde(default)]
    process: bool,
    #[serde(default)]
    kv: bool,
    #[serde(default)]
    llm: bool,
}

/// `[tools.NAME]`: any field left out takes [`ToolAnnotations`]' default.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolToml {
    read_only: Option<bool>,
    destructive: Option<bool>,
    idempotent: Option<bool>,
    open_world: Option<bool>,
    #[serde(default)]
    paths: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HookToml {
    #[serde(default)]
    events: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FsToml {
    path: String,
    #[serde(default = "default_access")]
    access: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretToml {
    name: String,
    host: String,
    /// The request headers it may be filled into; [`DEFAULT_SECRET_HEADERS`] when absent.
    headers: Option<Vec<String>>,
    /// It may also be filled into the URL path (Telegram's `/bot<TOKEN>/`).
    #[serde(default)]
    in_path: bool,
    /// It may also be filled into WebSocket messages to its host (Discord's identify).
    #[serde(default)]
    in_messages: bool,
}

fn default_kind() -> Vec<String> {
    vec!["tool".to_string()]
}

fn default_enabled() -> bool {
    true
}

fn default_wasm() -> String {
    "plugin.wasm".to_string()
}

fn default_access() -> String {
    "read".to_string()
}

impl Manifest {
    /// Read and check `path`.
    ///
    /// # Errors
    /// The file is unreadable, not TOML, has an unknown field or capability, or a bad value; the
    /// error names the file and the field.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|e| err(path, format!("cannot read: {e}")))?;
        Self::parse(&text, path)
    }

    /// Check manifest `text`; `path` is only used in error messages.
    ///
    /// # Errors
    /// As for [`Manifest::load`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, ManifestError> {
        let raw: ManifestToml = toml::from_str(text).map_err(|e| err(path, e.to_string().trim_end().to_string()))?;
        check_name(&raw.name).map_err(|m| err(path, format!("field `name`: {m}")))?;
        let version = semver::Version::parse(&raw.version)
            .map_err(|e| err(path, format!("field `version`: `{}` is not a semantic version ({e})", raw.version)))?;
        let api = semver::Version::parse(&raw.api)
            .map_err(|e| err(path, format!("field `api`: `{}` is not a semantic version ({e})", raw.api)))?;
        check_api(&api).map_err(|m| err(path, format!("field `api`: {m}")))?;
        if raw.kind.is_empty() {
            return Err(err(path, format!("field `kind`: name at least one kind (known: {})", KNOWN_KINDS.join(", "))));
        }
        for kind in &raw.kind {
            if !KNOWN_KINDS.contains(&kind.as_str()) {
                return Err(err(
                    path,
                    format!("field `kind`: unknown kind `{kind}` (known: {})", KNOWN_KINDS.join(", ")),
                ));
            }
            if !SUPPORTED_KINDS.contains(&kind.as_str()) {
                return Err(err(
                    path,
                    format!(
                        "field `kind`: this talaria cannot run `{kind}` plugins yet (it runs: {})",
                        SUPPORTED_KINDS.join(", ")
                    ),
                ));
            }
        }
        if api < PLATFORM_API && raw.kind.iter().any(|k| k == "platform") {
            return Err(err(
                path,
                format!(
                    "field `kind`: `platform` plugins need api {PLATFORM_API} or later (this manifest says api = \"{api}\")"
                ),
            ));
        }
        if api < KINDS_API
            && let Some(kind) = raw.kind.iter().find(|k| k.as_str() != "tool")
        {
            return Err(err(
                path,
                format!(
                    "field `kind`: `{kind}` plugins need api {KINDS_API} or later (this manifest says api = \"{api}\")"
                ),
            ));
        }
        if api < KINDS_API && raw.capabilities.llm {
            return Err(err(
                path,
                format!(
                    "field `capabilities.llm`: the llm capability needs api {KINDS_API} or later (this manifest says api = \"{api}\")"
                ),
            ));
        }
        let hook_events =
            hook_events(raw.kind.iter().any(|k| k == "hook"), raw.hook.as_ref()).map_err(|m| err(path, m))?;
        if raw.wasm.contains("..") || Path::new(&raw.wasm).is_absolute() {
            return Err(err(path, format!("field `wasm`: `{}` must be a file inside the plugin directory", raw.wasm)));
        }
        let requests = requests(&raw.capabilities).map_err(|m| err(path, m))?;
        let secret_headers = secret_headers(&raw.capabilities.secrets).map_err(|m| err(path, m))?;
        let tools = tool_annotations(raw.tools).map_err(|m| err(path, m))?;
        Ok(Self {
            name: raw.name,
            version,
            api,
            kinds: raw.kind,
            description: raw.description,
            author: raw.author,
            license: raw.license,
            wasm: raw.wasm,
            requests,
            secret_headers,
            limits: raw.limits,
            hook_events,
            enabled: raw.enabled,
            tools,
        })
    }
}

fn err(path: &Path, message: String) -> ManifestError {
    ManifestError { path: path.to_path_buf(), message }
}

/// A plugin name that is not 1-64 characters of a-z, 0-9, `-` or `_` starting with a letter
/// ([`check_name`]). The message starts with the name, so a caller may put what it names
/// first (`plugin name …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` must be 1-64 characters of a-z, 0-9, `-` or `_`, starting with a letter")]
pub struct NameError {
    pub name: String,
}

/// A plugin API version this host cannot run ([`check_api`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "plugin API {api} is not supported: this talaria supports {} (rebuild the plugin against a matching talaria-sdk)",
    SUPPORTED_API_VERSIONS.join(", ")
)]
pub struct ApiError {
    pub api: semver::Version,
}

/// Whether `name` is a valid plugin name: 1-64 characters of a-z, 0-9, `-` or `_`, starting
/// with a letter.
///
/// # Errors
/// [`NameError`] when it is not.
pub fn check_name(name: &str) -> Result<(), NameError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok { Ok(()) } else { Err(NameError { name: name.to_string() }) }
}

/// Whether this host can run a plugin built against `api`: same major (and, before 1.0, the
/// same minor) and not newer than what the host knows.
///
/// # Errors
/// [`ApiError`] when it cannot.
pub fn check_api(api: &semver::Version) -> Result<(), ApiError> {
    let supported = SUPPORTED_API_VERSIONS.iter().filter_map(|v| semver::Version::parse(v).ok());
    let compatible = supported.into_iter().any(|host| {
        let same_line =
            if host.major == 0 { api.major == 0 && api.minor == host.minor } else { api.major == host.major };
        same_line && api <= &host
    });
    if compatible { Ok(()) } else { Err(ApiError { api: api.clone() }) }
}

/// `[tools.NAME]` tables as annotations; each `paths` entry must name an argument.
fn tool_annotations(tables: BTreeMap<String, ToolToml>) -> Result<BTreeMap<String, ToolAnnotations>, String> {
    let mut out = BTreeMap::new();
    for (name, t) in tables {
        if let Some(bad) = t.paths.iter().find(|p| p.trim().is_empty() || p.len() > 64) {
            return Err(format!("field `tools.{name}.paths`: `{bad}` is not an argument name (1-64 characters)"));
        }
        let d = ToolAnnotations::default();
        let annotations = ToolAnnotations {
            read_only: t.read_only.unwrap_or(d.read_only),
            // A read-only tool destroys nothing, whatever the default says.
            destructive: t.destructive.unwrap_or(d.destructive && !t.read_only.unwrap_or(false)),
            idempotent: t.idempotent.unwrap_or(d.idempotent),
            open_world: t.open_world.unwrap_or(d.open_world),
            paths: t.paths,
        };
        out.insert(name, annotations);
    }
    Ok(out)
}

/// `[hook] events`: required and non-empty for a hook plugin, absent for every other.
fn hook_events(is_hook: bool, table: Option<&HookToml>) -> Result<Vec<HookKind>, String> {
    let known = || HookKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ");
    let Some(table) = table else {
        return if is_hook {
            Err(format!("a hook plugin needs `[hook] events`, the events it wants (known: {})", known()))
        } else {
            Ok(Vec::new())
        };
    };
    if !is_hook {
        return Err("field `hook`: only hook plugins (kind = [\"hook\"]) take a [hook] table".to_string());
    }
    if table.events.is_empty() {
        return Err(format!("field `hook.events`: name at least one event (known: {})", known()));
    }
    let unknown: Vec<String> =
        table.events.iter().filter(|e| HookKind::parse(e).is_none()).map(|e| format!("`{e}`")).collect();
    if !unknown.is_empty() {
        let noun = if unknown.len() == 1 { "event" } else { "events" };
        return Err(format!("field `hook.events`: unknown {noun} {} (known: {})", unknown.join(", "), known()));
    }
    let mut events: Vec<HookKind> = Vec::new();
    for kind in table.events.iter().filter_map(|e| HookKind::parse(e)) {
        if !events.contains(&kind) {
            events.push(kind);
        }
    }
    Ok(events)
}

fn requests(caps: &CapabilitiesToml) -> Result<Vec<Capability>, String> {
    let mut out = Vec::new();
    for (i, fs) in caps.filesystem.iter().enumerate() {
        let access = match fs.access.as_str() {
            "read" => Access::Read,
            "read-write" => Access::ReadWrite,
            other => {
                return Err(format!(
                    "field `capabilities.filesystem[{i}].access`: `{other}` is not `read` or `read-write`"
                ));
            }
        };
        crate::grant::check_fs_path(&fs.path)
            .map_err(|why| format!("field `capabilities.filesystem[{i}].path`: `{}` {why}", fs.path))?;
        out.push(Capability::Fs { path: fs.path.clone(), access });
    }
    for (i, net) in caps.network.iter().enumerate() {
        let pattern = HostPattern::parse(net).map_err(|m| format!("field `capabilities.network[{i}]`: {m}"))?;
        out.push(Capability::Net(pattern));
    }
    for (i, s) in caps.secrets.iter().enumerate() {
        if s.name.is_empty() || !s.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "field `capabilities.secrets[{i}].name`: `{}` must be letters, digits and `_`",
                s.name
            ));
        }
        let host = HostPattern::parse(&s.host).map_err(|m| format!("field `capabilities.secrets[{i}].host`: {m}"))?;
        if host.is_wildcard() {
            return Err(format!(
                "field `capabilities.secrets[{i}].host`: a secret must name the one host it is sent to, not `{}`",
                s.host
            ));
        }
        out.push(Capability::Secret { name: s.name.clone(), host });
    }
    if caps.process {
        out.push(Capability::Process);
    }
    if caps.kv {
        out.push(Capability::Kv);
    }
    if caps.llm {
        out.push(Capability::Llm);
    }
    Ok(out)
}

/// The headers of every requested secret: lower-cased, checked, the default when none are
/// named. A secret requested twice (for two hosts) may go into the headers of either request.
fn secret_headers(secrets: &[SecretToml]) -> Result<SecretHeaders, String> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, s) in secrets.iter().enumerate() {
        let named: Vec<String> = match &s.headers {
            None => DEFAULT_SECRET_HEADERS.iter().map(|h| (*h).to_string()).collect(),
            Some(list) if list.is_empty() => {
                return Err(format!(
                    "field `capabilities.secrets[{i}].headers`: name at least one header (or leave it out for {})",
                    DEFAULT_SECRET_HEADERS.join(", ")
                ));
            }
            Some(list) => list.iter().map(|h| h.trim().to_ascii_lowercase()).collect(),
        };
        let headers = out.entry(s.name.clone()).or_default();
        for header in named {
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(format!("field `capabilities.secrets[{i}].headers`: `{header}` is not a header name"));
            }
            if REFLECTED_HEADERS.contains(&header.as_str()) {
                return Err(format!(
                    "field `capabilities.secrets[{i}].headers`: `{header}` is a header servers echo back or log; a secret is never sent in it"
                ));
            }
            if !headers.contains(&header) {
                headers.push(header);
            }
        }
        for (wanted, place) in [(s.in_path, PATH_PLACE), (s.in_messages, MESSAGE_PLACE)] {
            if wanted && !headers.iter().any(|h| h == place) {
                headers.push(place.to_string());
            }
        }
    }
    Ok(SecretHeaders(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        name = "demo"
        version = "1.2.3"
        api = "0.1.0"
        [capabilities]
        filesystem = [{ path = "$WORKSPACE", access = "read-write" }]
        network = ["api.example.com", "*.example.org:443"]
        secrets = [{ name = "API_KEY", host = "api.example.com" }]
        process = true
        kv = true
    "#;

    fn parse(text: &str) -> Result<Manifest, String> {
        Manifest::parse(text, Path::new("/p/demo/plugin.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn tools_are_described_per_tool_with_cautious_defaults() {
        let m = parse(&format!(
            "{GOOD}\n[tools.read_file]\nread_only = true\nopen_world = false\npaths = [\"path\"]\n[tools.run]\nidempotent = true\n"
        ))
        .expect("valid");
        let read = &m.tools["read_file"];
        assert!(read.read_only && !read.destructive && !read.open_world && read.paths == ["path"]);
        let run = &m.tools["run"];
        assert!(!run.read_only && run.destructive && run.open_world && run.idempotent);
        assert!(!m.tools.contains_key("other"));
        let typo = parse(&format!("{GOOD}\n[tools.x]\nreadonly = true\n")).expect_err("unknown field");
        assert!(typo.contains("unknown field `readonly`"), "{typo}");
        let empty = parse(&format!("{GOOD}\n[tools.x]\npaths = [\"\"]\n")).expect_err("empty path name");
        assert!(empty.contains("field `tools.x.paths`"), "{empty}");
    }

    #[test]
    fn a_full_manifest_parses() {
        let m = parse(GOOD).expect("parses");
        assert_eq!(m.name, "demo");
        assert_eq!(m.wasm, "plugin.wasm");
        assert_eq!(m.kinds, vec!["tool"]);
        let caps: Vec<String> = m.requests.iter().map(ToString::to_string).collect();
        assert_eq!(
            caps,
            [
                "fs:rw:$WORKSPACE",
                "net:api.example.com",
                "net:*.example.org:443",
                "secret:API_KEY@api.example.com",
                "process",
                "kv"
            ]
        );
    }

    #[test]
    fn an_unknown_capability_names_the_file_and_field() {
        let e = parse(&GOOD.replace("kv = true", "keyvalue = true")).expect_err("refused");
        assert!(e.starts_with("/p/demo/plugin.toml: "), "{e}");
        assert!(e.contains("unknown field `keyvalue`"), "{e}");
    }

    #[test]
    fn a_missing_field_is_named() {
        let e = parse("name = \"x\"\nversion = \"1.0.0\"\n").expect_err("refused");
        assert!(e.contains("missing field `api`"), "{e}");
    }

    #[test]
    fn an_incompatible_api_says_what_is_supported() {
        parse(&GOOD.replace("api = \"0.1.0\"", "api = \"0.2.0\"")).expect("0.2.0 is supported");
        parse(&GOOD.replace("api = \"0.1.0\"", "api = \"0.3.0\"")).expect("0.3.0 is supported");
        parse(&GOOD.replace("api = \"0.1.0\"", "api = \"0.4.0\"")).expect("0.4.0 is supported");
        let e = parse(&GOOD.replace("api = \"0.1.0\"", "api = \"0.5.0\"")).expect_err("refused");
        assert!(
            e.contains(
                "field `api`: plugin API 0.5.0 is not supported: this talaria supports 0.1.0, 0.2.0, 0.3.0, 0.4.0"
            ),
            "{e}"
        );
        let e = parse(&GOOD.replace("api = \"0.1.0\"", "api = \"1.0.0\"")).expect_err("refused");
        assert!(e.contains("plugin API 1.0.0 is not supported"), "{e}");
    }

    #[test]
    fn bad_values_are_named_by_field() {
        let e = parse(&GOOD.replace("read-write", "write")).expect_err("refused");
        assert!(e.contains("field `capabilities.filesystem[0].access`: `write` is not"), "{e}");
        let e = parse(&GOOD.replace("\"api.example.com\", ", "\"http://x\", ")).expect_err("refused");
        assert!(e.contains("field `capabilities.network[0]`"), "{e}");
        let e = parse(&GOOD.replace("host = \"api.example.com\"", "host = \"*\"")).expect_err("refused");
        assert!(e.contains("field `capabilities.secrets[0].host`: a secret must name the one host"), "{e}");
        let e = parse(&GOOD.replace("name = \"demo\"", "name = \"Demo!\"")).expect_err("refused");
        assert!(e.contains("field `name`"), "{e}");
        let e = parse(&format!("kind = [\"platform\"]\n{GOOD}")).expect_err("refused");
        assert!(
            e.contains("field `kind`: `platform` plugins need api 0.3.0 or later (this manifest says api = \"0.1.0\")"),
            "{e}"
        );
        let e = parse(&format!("kind = [\"gadget\"]\n{GOOD}")).expect_err("refused");
        assert!(e.contains("field `kind`: unknown kind `gadget` (known: tool, memory"), "{e}");
        let e = parse(&GOOD.replace("path = \"$WORKSPACE\"", "path = \"$HOME\"")).expect_err("refused");
        assert!(
            e.contains("field `capabilities.filesystem[0].path`: `$HOME` must be absolute or start with $WORKSPACE or $PLUGIN_DATA"),
            "{e}"
        );
    }

    fn v2(body: &str) -> String {
        format!(
            "{}\n{body}",
            GOOD.replace("api = \"0.1.0\"", "api = \"0.2.0\"").replace("[capabilities]", "[capabilities]\nllm = true")
        )
    }

    #[test]
    fn every_kind_but_platform_is_supported_from_api_0_2_0() {
        for kind in ["tool", "memory", "context-engine"] {
            let m = parse(&format!("kind = [\"{kind}\"]\n{}", v2(""))).expect(kind);
            assert_eq!(m.kinds, vec![kind.to_string()]);
            assert_eq!(m.kind_list(), vec![Kind::parse(kind).expect("kind")]);
        }
        let m = parse(&format!("kind = [\"memory\", \"tool\"]\n{}", v2(""))).expect("two kinds");
        assert_eq!(m.kind_list(), vec![Kind::Memory, Kind::Tool]);
        assert!(m.requests.contains(&Capability::Llm), "{:?}", m.requests);
        assert_eq!(m.requests.last().map(ToString::to_string).as_deref(), Some("llm"));
    }

    #[test]
    fn a_non_tool_kind_needs_api_0_2_0() {
        let e =
            parse(&format!("kind = [\"hook\"]\n{GOOD}\n[hook]\nevents = [\"pre_tool_call\"]")).expect_err("refused");
        assert!(
            e.ends_with("field `kind`: `hook` plugins need api 0.2.0 or later (this manifest says api = \"0.1.0\")"),
            "{e}"
        );
        let e = parse(&GOOD.replace("kv = true", "kv = true\nllm = true")).expect_err("refused");
        assert!(e.ends_with("field `capabilities.llm`: the llm capability needs api 0.2.0 or later (this manifest says api = \"0.1.0\")"), "{e}");
    }

    #[test]
    fn hook_events_are_required_for_hooks_and_checked() {
        let hook = |events: &str| parse(&format!("kind = [\"hook\"]\n{}{events}", v2("")));
        let m = hook("[hook]\nevents = [\"pre_tool_call\", \"on_session_end\", \"pre_tool_call\"]").expect("parses");
        assert_eq!(m.hook_events, vec![HookKind::PreToolCall, HookKind::OnSessionEnd]);
        let e = hook("").expect_err("missing");
        assert!(e.contains("a hook plugin needs `[hook] events`, the events it wants (known: pre_tool_call, "), "{e}");
        let e = hook("[hook]\nevents = []").expect_err("empty");
        assert!(e.contains("field `hook.events`: name at least one event (known: pre_tool_call, "), "{e}");
        let e = hook("[hook]\nevents = [\"pre_tool\", \"post_tool_call\", \"later\"]").expect_err("unknown");
        assert!(
            e.contains("field `hook.events`: unknown events `pre_tool`, `later` (known: pre_tool_call, post_tool_call, transform_tool_result, pre_llm_call, post_llm_call, on_session_start, on_session_end, on_session_finalize, on_session_reset, subagent_stop)"),
            "{e}"
        );
        let e = parse(&v2("[hook]\nevents = [\"pre_tool_call\"]")).expect_err("not a hook");
        assert!(e.contains("field `hook`: only hook plugins (kind = [\"hook\"]) take a [hook] table"), "{e}");
        assert!(parse(GOOD).expect("tool").hook_events.is_empty());
    }

    #[test]
    fn enabled_defaults_to_true() {
        assert!(parse(GOOD).expect("parses").enabled);
        assert!(!parse(&format!("enabled = false\n{GOOD}")).expect("parses").enabled);
        let e = parse(&format!("enabled = \"no\"\n{GOOD}")).expect_err("refused");
        assert!(e.contains("enabled"), "{e}");
    }

    #[test]
    fn secret_headers_default_and_are_checked() {
        let m = parse(GOOD).expect("parses");
        assert_eq!(m.secret_headers.of("API_KEY"), Some(&["authorization".to_string(), "x-api-key".to_string()][..]));
        assert_eq!(m.secret_headers.of("OTHER"), None);
        let named = |headers: &str| {
            parse(&GOOD.replace(
                "host = \"api.example.com\" }",
                &format!("host = \"api.example.com\", headers = {headers} }}"),
            ))
        };
        let m = named("[\"Key\", \"x-token\", \"key\"]").expect("parses");
        assert_eq!(m.secret_headers.of("API_KEY"), Some(&["key".to_string(), "x-token".to_string()][..]));
        assert_eq!(m.requests[3].to_string(), "secret:API_KEY@api.example.com");
        let e = named("[]").expect_err("empty");
        assert!(
            e.ends_with("field `capabilities.secrets[0].headers`: name at least one header (or leave it out for authorization, x-api-key)"),
            "{e}"
        );
        let e = named("[\"bad header\"]").expect_err("bad name");
        assert!(e.ends_with("field `capabilities.secrets[0].headers`: `bad header` is not a header name"), "{e}");
        let e = named("[\"X-Forwarded-Host\"]").expect_err("echoed");
        assert!(
            e.ends_with("field `capabilities.secrets[0].headers`: `x-forwarded-host` is a header servers echo back or log; a secret is never sent in it"),
            "{e}"
        );
    }

    #[test]
    fn plugin_data_paths_are_accepted() {
        let m = parse(&GOOD.replace("path = \"$WORKSPACE\"", "path = \"$PLUGIN_DATA\"")).expect("parses");
        assert_eq!(m.requests[0].to_string(), "fs:rw:$PLUGIN_DATA");
        let m = parse(&GOOD.replace("path = \"$WORKSPACE\"", "path = \"$PLUGIN_DATA/index\"")).expect("parses");
        assert_eq!(m.requests[0].to_string(), "fs:rw:$PLUGIN_DATA/index");
        let e = parse(&GOOD.replace("path = \"$WORKSPACE\"", "path = \"$PLUGIN_DATA/../x\"")).expect_err("dotdot");
        assert!(e.contains("must not contain `..`"), "{e}");
    }

    /// Fuzzed: any text as plugin.toml is a manifest or an error, never a panic.
    #[test]
    fn fuzz_plugin_toml() {
        talaria_fuzz::text("plugin-toml", |text| {
            let _ = Manifest::parse(text, Path::new("plugin.toml"));
        });
    }
}
