//! Outgoing HTTP for plugins: the grant check, the egress gate, address pinning and secret
//! injection.
//!
//! Every `wasi:http` request a plugin makes comes through [`NetHooks::send_request`]:
//! 1. the destination `host:port` must match a granted network pattern;
//! 2. an address literal or a `localhost` name is checked at once (step 4) — nobody is asked
//!    about a request that is refused anyway;
//! 3. the egress gate: when only wildcard grants (`*`, `*.suffix`) match, the host must have been
//!    approved — "always" in the config (`[approvals] allow = ["net:HOST"]`), or in this
//!    runtime's session — or the runtime's approver is asked, through the same [`Approvals`]
//!    dangerous commands use (key `net:HOST`, with `:PORT` only off the scheme's default port).
//!    The gate comes before any DNS lookup, so an unapproved name never leaves the machine even
//!    as a query. An explicit grant of the host never asks;
//! 4. the host name is resolved here and every address checked (see [`address`]): loopback,
//!    private, link-local and other internal addresses, including IPv6 forms that carry one, are
//!    reached only through an explicit grant of that very address (or `localhost`), so `net:*`
//!    cannot reach `127.0.0.1` or the cloud metadata endpoint;
//! 5. the connection goes to the address that was checked (no second lookup to rebind);
//! 6. `{{secret:NAME}}` placeholders in headers are replaced with the secret's value only in the
//!    headers the manifest names for that secret (default `authorization`, `x-api-key`), only
//!    over https (or to loopback), and only when the destination is the host that secret was
//!    granted for; anywhere else the header is dropped, so a redirect to another host, or a
//!    header an endpoint echoes back, never carries the secret.
//!
//! A refusal reaches the plugin as `HttpRequestDenied`; the reason is kept in the call's denials
//! (the model sees them with the plugin's error). Stubbed requests (`talaria plugin test`) are
//! checked against the grants but never ask and never reach the network.

pub(crate) mod address;
pub(crate) mod websocket;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http_body_util::BodyExt;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::approval::{Approval, ApprovalKind, ApprovalRequest, Approvals, Caller};
use crate::grant::{Grants, HostPattern};
use crate::leak::SecretScan;
use crate::manifest::SecretHeaders;
use crate::record::{Recorder, short};
use crate::secrets::Secrets;
use crate::stub::{HttpStubs, StubAnswer};

pub use address::{AddressKind, internal_kind};

const PLACEHOLDER_OPEN: &str = "{{secret:";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
const DNS_TIMEOUT: Duration = Duration::from_secs(10);
/// Most requests one call may make.
const MAX_REQUESTS_PER_CALL: usize = 256;
/// Most refusals kept per call (the rest are counted), and the longest one kept.
const MAX_DENIALS: usize = 8;
const MAX_DENIAL_CHARS: usize = 600;
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(60);

/// Per-call network state of one plugin instance.
pub(crate) struct NetHooks {
    pub plugin: String,
    pub grants: Arc<Grants>,
    pub secrets: Arc<Secrets>,
    /// The headers each of its secrets may be filled into.
    pub secret_headers: Arc<SecretHeaders>,
    /// The runtime's approvals: new hosts under wildcard grants ask here.
    pub approvals: Arc<Approvals>,
    /// Who the plugin acts for: the session asked.
    pub caller: Caller,
    /// Requests refused during this call, with the reason.
    pub denials: Arc<Mutex<Vec<String>>>,
    /// Requests made during this call.
    pub requests: usize,
    /// Where requests are recorded (`talaria plugin test`); `None`: not recorded.
    pub recorder: Option<Arc<Recorder>>,
    /// Canned answers (`talaria plugin test`); `None`: requests go out.
    pub stubs: Option<Arc<HttpStubs>>,
    /// Known secret values: a request carrying one is refused (see [`crate::leak`]).
    pub scan: Arc<SecretScan>,
}

/// Largest request body the leak scan reads; a larger one is refused.
const MAX_SCANNED_BODY: usize = 64 * 1024 * 1024;

/// Refuse a request that carries a known secret value in its URL, in a header as the plugin
/// wrote it (a placeholder is not a value: the host fills those in later, for their own hosts),
/// or in its body, which is read here, whole, and handed on.
async fn screen(
    request: http::Request<WasiBody>,
    scan: &SecretScan,
    plugin: &str,
) -> Result<http::Request<WasiBody>, String> {
    if scan.is_empty() {
        return Ok(request);
    }
    let (parts, body) = request.into_parts();
    let dest = parts.uri.authority().map_or_else(String::new, ToString::to_string);
    let carried = |what: &str, name: &str| {
        format!(
            "plugin '{plugin}': a request to {dest} carries the value of the secret {name} in its {what}, which talaria never lets out; it was not sent"
        )
    };
    if let Some(name) = scan.find(&parts.uri.to_string()) {
        return Err(carried("URL", name));
    }
    for (header, value) in &parts.headers {
        if let Some(name) = scan.find_bytes(value.as_bytes()) {
            return Err(carried(&format!("header {header}"), name));
        }
    }
    let bytes = http_body_util::Limited::new(body, MAX_SCANNED_BODY)
        .collect()
        .await
        .map_err(|e| {
            format!("plugin '{plugin}': the body of a request to {dest} could not be read ({e}); it was not sent")
        })?
        .to_bytes();
    if let Some(name) = scan.find_bytes(&bytes) {
        return Err(carried("body", name));
    }
    let body = http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed_unsync();
    Ok(http::Request::from_parts(parts, body))
}

/// Keep a refusal for the operator, within bounds: a plugin looping on refused requests must
/// not grow the host's memory or flood the log.
fn record_denial(plugin: &str, denials: &Mutex<Vec<String>>, reason: String) {
    let mut d = lock(denials);
    if d.len() < MAX_DENIALS && !d.contains(&reason) {
        tracing::info!(plugin = %plugin, "{reason}");
        let reason = if reason.chars().count() > MAX_DENIAL_CHARS {
            format!("{}...", reason.chars().take(MAX_DENIAL_CHARS).collect::<String>())
        } else {
            reason
        };
        d.push(reason);
    }
}

type ResponseFuture = Box<dyn Future<Output = Result<(), HttpError>> + Send>;
type SendFuture = Box<dyn Future<Output = Result<(http::Response<WasiBody>, ResponseFuture), HttpError>> + Send>;

impl WasiHttpHooks for NetHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: ResponseFuture,
    ) -> SendFuture {
        self.requests += 1;
        // The method and URL as the plugin asked, before any secret is filled in.
        let recorded =
            self.recorder.clone().map(|r| (r, request.method().to_string(), short(&request.uri().to_string())));
        if self.requests > MAX_REQUESTS_PER_CALL {
            let reason = format!("more than {MAX_REQUESTS_PER_CALL} requests in one call");
            if let Some((recorder, method, url)) = recorded {
                recorder.push(&self.plugin, "http", &method, url, Some(format!("refused: {reason}")));
            }
            record_denial(&self.plugin, &self.denials, reason);
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        let egress = self.egress();
        let denials = self.denials.clone();
        let stubs = self.stubs.clone();
        let scan = self.scan.clone();
        Box::new(async move {
            let plugin = egress.plugin.as_str();
            let request = match screen(request, &scan, plugin).await {
                Ok(request) => request,
                Err(reason) => {
                    if let Some((recorder, method, url)) = recorded {
                        recorder.push(plugin, "http", &method, url, Some(format!("refused: {reason}")));
                    }
                    record_denial(plugin, &denials, reason);
                    return Err(HttpError::HttpRequestDenied);
                }
            };
            let mut refusal = None;
            let answer = match &stubs {
                Some(stubs) => stubs.answer(request.method().as_str(), &request.uri().to_string()),
                None => StubAnswer::Network,
            };
            let result = match answer {
                StubAnswer::Network => send_checked(request, options, &egress, &denials, &mut refusal).await,
                stubbed => answer_stubbed(&request, stubbed, plugin, &egress.grants, &mut refusal),
            };
            if let Some((recorder, method, url)) = recorded {
                let outcome = match (&result, refusal.as_ref()) {
                    (Ok((response, _)), _) => response.status().as_u16().to_string(),
                    (Err(_), Some(reason)) => format!("refused: {reason}"),
                    (Err(e), None) => format!("failed: {e}"),
                };
                recorder.push(plugin, "http", &method, url, Some(outcome));
            }
            if let Some(reason) = refusal {
                record_denial(plugin, &denials, reason);
            }
            result
        })
    }
}

/// What one request is checked against: the plugin's grants, secrets and approvals.
struct Egress {
    plugin: String,
    grants: Arc<Grants>,
    secrets: Arc<Secrets>,
    secret_headers: Arc<SecretHeaders>,
    approvals: Arc<Approvals>,
    caller: Caller,
}

/// Answer a request from a stub, after the same grant check a real one gets (no DNS: nothing
/// is sent); a refusal's reason is left in `refusal`.
fn answer_stubbed(
    request: &http::Request<WasiBody>,
    answer: StubAnswer,
    plugin: &str,
    grants: &Grants,
    refusal: &mut Option<String>,
) -> Result<(http::Response<WasiBody>, ResponseFuture), HttpError> {
    let dest = Destination::of(request)?;
    if !grants.network().any(|p| p.matches(&dest.host, dest.port)) {
        *refusal = Some(no_grant(plugin, &dest));
        return Err(HttpError::HttpRequestDenied);
    }
    let StubAnswer::Answer(stub) = answer else {
        *refusal = Some(format!(
            "no stub in plugin-tests.toml answers {} {} (a test with `http` stubs never reaches the network)",
            request.method(),
            request.uri()
        ));
        return Err(HttpError::HttpRequestDenied);
    };
    let mut response = http::Response::builder().status(stub.status);
    for (name, value) in &stub.headers {
        response = response.header(name, value);
    }
    let body = http_body_util::Full::new(bytes::Bytes::from(stub.body)).map_err(|never| match never {}).boxed_unsync();
    let response = response.body(body).map_err(|_| HttpError::HttpProtocolError)?;
    Ok((response, Box::new(async { Ok(()) })))
}

fn no_grant(plugin: &str, dest: &Destination) -> String {
    let authority = dest.authority();
    format!(
        "plugin '{plugin}' has no network grant for {authority} (grant it with `talaria plugins grant {plugin} net:{authority}` if its manifest requests it)"
    )
}

/// Check, pin and send one request; a refusal's reason is left in `refusal`, secret headers
/// dropped are recorded in `denials`.
async fn send_checked(
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    egress: &Egress,
    denials: &Mutex<Vec<String>>,
    refusal: &mut Option<String>,
) -> Result<(http::Response<WasiBody>, ResponseFuture), HttpError> {
    let dest = Destination::of(&request)?;
    let addr = match authorize(egress, &dest).await {
        Ok(addr) => addr,
        Err(Refusal::Denied(reason)) => {
            *refusal = Some(reason);
            return Err(HttpError::HttpRequestDenied);
        }
        Err(Refusal::Dns(message)) => {
            return Err(HttpError::DnsError { rcode: Some(message), info_code: None });
        }
    };
    let (request, mut dropped) = inject_secrets(request, egress, &dest);
    let request = match fill_path(request, egress, &dest) {
        Ok(request) => request,
        Err(reason) => {
            *refusal = Some(reason);
            return Err(HttpError::HttpRequestDenied);
        }
    };
    for reason in dropped.drain(..) {
        record_denial(&egress.plugin, denials, reason);
    }
    send_pinned(request, addr, &dest, options).await
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where a request goes.
#[derive(Debug, Clone)]
pub(crate) struct Destination {
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

impl Destination {
    /// The host as it is written in a URL: IPv6 addresses in brackets.
    fn url_host(&self) -> String {
        if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() }
    }

    /// `host:port`, IPv6 addresses in brackets.
    fn authority(&self) -> String {
        format!("{}:{}", self.url_host(), self.port)
    }

    /// The host as the egress gate names it: with its port only when that is not the scheme's
    /// default (`docs.rs`, `docs.rs:8443`).
    fn approval_host(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        if self.port == default { self.url_host() } else { self.authority() }
    }

    fn of(request: &http::Request<WasiBody>) -> Result<Self, HttpError> {
        let uri = request.uri();
        let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let authority = uri.authority().ok_or(HttpError::HttpRequestUriInvalid)?;
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(Self { host, port, tls })
    }
}

enum Refusal {
    Denied(String),
    Dns(String),
}

/// Check the grant, ask the gate when only a wildcard allows the host, and resolve to an address
/// that is allowed.
async fn authorize(egress: &Egress, dest: &Destination) -> Result<SocketAddr, Refusal> {
    let plugin = egress.plugin.as_str();
    let matching: Vec<&HostPattern> = egress.grants.network().filter(|p| p.matches(&dest.host, dest.port)).collect();
    if matching.is_empty() {
        return Err(Refusal::Denied(no_grant(plugin, dest)));
    }
    // Only a grant naming the address itself (or localhost) reaches internal addresses; a grant
    // of an ordinary name must not, or the name's DNS could point it at 127.0.0.1 or metadata.
    let explicit = matching.iter().any(|p| p.names_internal_host());
    // Looking up an address literal or a localhost name sends nothing out: check those first.
    let local = dest.host.parse::<IpAddr>().is_ok() || is_localhost_name(&dest.host);
    let early = if local { Some(allowed_address(plugin, dest, explicit, resolve(dest).await?)?) } else { None };
    if matching.iter().all(|p| p.is_wildcard()) {
        ask_to_connect(egress, dest, &matching).await?;
    }
    match early {
        Some(addr) => Ok(addr),
        None => allowed_address(plugin, dest, explicit, resolve(dest).await?),
    }
}

/// `localhost` and names under it resolve to this machine (RFC 6761).
fn is_localhost_name(host: &str) -> bool {
    host == "localhost" || host.ends_with(".localhost")
}

/// The addresses `dest` names (never empty).
async fn resolve(dest: &Destination) -> Result<Vec<SocketAddr>, Refusal> {
    let addrs: Vec<SocketAddr> = match dest.host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, dest.port)],
        Err(_) => tokio::time::timeout(DNS_TIMEOUT, tokio::net::lookup_host((dest.host.as_str(), dest.port)))
            .await
            .map_err(|_| Refusal::Dns(format!("{}: lookup timed out", dest.host)))?
            .map_err(|e| Refusal::Dns(format!("{}: {e}", dest.host)))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(Refusal::Dns(format!("{}: no addresses", dest.host)));
    }
    Ok(addrs)
}

/// The first of `addrs` the plugin may reach: any, for an explicit grant of the address; else
/// the first that is not internal.
fn allowed_address(
    plugin: &str,
    dest: &Destination,
    explicit: bool,
    addrs: Vec<SocketAddr>,
) -> Result<SocketAddr, Refusal> {
    let first = addrs[0];
    if explicit {
        return Ok(first);
    }
    match addrs.into_iter().find(|a| internal_kind(a.ip()).is_none()) {
        Some(addr) => Ok(addr),
        None => {
            let kind = internal_kind(first.ip()).map_or("internal", AddressKind::name);
            Err(Refusal::Denied(format!(
                "plugin '{plugin}': {} resolves to {}, a {kind} address; only a grant of the address itself reaches loopback, private or link-local addresses (grant `net:{first}` to allow it)",
                dest.authority(),
                first.ip(),
            )))
        }
    }
}

/// The egress gate: a host that only wildcard grants allow must be approved, "always" (config),
/// for the session, or now.
async fn ask_to_connect(egress: &Egress, dest: &Destination, wildcards: &[&HostPattern]) -> Result<(), Refusal> {
    let plugin = egress.plugin.as_str();
    let host = dest.approval_host();
    let grants = wildcards.iter().map(|p| format!("net:{p}")).collect::<Vec<_>>().join(", ");
    let grants = if wildcards.len() == 1 { format!("grant {grants}") } else { format!("grants {grants}") };
    let request = ApprovalRequest {
        kind: ApprovalKind::Network,
        plugin: plugin.to_string(),
        command: host.clone(),
        key: format!("net:{host}"),
        reason: format!("allowed by its wildcard {grants}"),
        session_id: egress.caller.session_id.clone(),
        call_id: egress.caller.call_id.clone(),
    };
    match egress.approvals.ask(&request).await {
        Approval::Once | Approval::Session | Approval::Always => Ok(()),
        Approval::Deny if egress.approvals.interactive(&request.session_id) => Err(Refusal::Denied(format!(
            "the user did not allow plugin '{plugin}' to connect to {host} (allowed only by its wildcard {grants})"
        ))),
        Approval::Deny => Err(Refusal::Denied(format!(
            "plugin '{plugin}' needs approval to connect to {host} (allowed only by its wildcard {grants}) and no one is here to give it; rerun with --yolo, add \"net:{host}\" to [approvals] allow in config.toml, or grant the host: `talaria plugins grant {plugin} net:{host}`"
        ))),
    }
}

/// The egress gate for a connection a confined command makes through the sandbox's proxy
/// (see [`crate::process`]): the same rules as a plugin's own requests, except that a host no
/// grant names is asked about rather than refused. An explicit grant of the host never asks;
/// a wildcard grant, or none, asks the runtime's approvals (key `net:HOST`); internal addresses
/// are reached only through a grant of the address itself, and are refused before anyone is
/// asked. The name is resolved here, outside the sandbox, and the checked address returned.
///
/// `local_hosts` are names the operator said resolve to an address of their own network (a
/// package mirror, a corporate proxy): their internal addresses are reached once the host is
/// allowed.
pub(crate) async fn admit_command(
    plugin: &str,
    grants: &Grants,
    local_hosts: &[HostPattern],
    approvals: &Approvals,
    caller: &Caller,
    host: &str,
    port: u16,
) -> Result<SocketAddr, talaria_sandbox::proxy::Refusal> {
    use talaria_sandbox::proxy::Refusal as Proxy;
    let dest = Destination { host: host.to_ascii_lowercase(), port, tls: port != 80 };
    let to_proxy = |r: Refusal| match r {
        Refusal::Denied(m) => Proxy::Denied(m),
        Refusal::Dns(m) => Proxy::Unreachable(m),
    };
    let matching: Vec<&HostPattern> = grants.network().filter(|p| p.matches(&dest.host, dest.port)).collect();
    let explicit = matching.iter().any(|p| p.names_internal_host())
        || local_hosts.iter().any(|p| p.matches(&dest.host, dest.port));
    let local = dest.host.parse::<IpAddr>().is_ok() || is_localhost_name(&dest.host);
    let early = if local {
        Some(allowed_address(plugin, &dest, explicit, resolve(&dest).await.map_err(to_proxy)?).map_err(to_proxy)?)
    } else {
        None
    };
    if matching.iter().all(|p| p.is_wildcard()) {
        let host = dest.approval_host();
        let reason = if matching.is_empty() {
            format!("a command of plugin '{plugin}' connects to {host} through the sandbox's proxy")
        } else {
            let grants = matching.iter().map(|p| format!("net:{p}")).collect::<Vec<_>>().join(", ");
            format!("a command of plugin '{plugin}' connects to {host}, allowed by its wildcard grant {grants}")
        };
        let request = ApprovalRequest {
            kind: ApprovalKind::Network,
            plugin: plugin.to_string(),
            command: host.clone(),
            key: format!("net:{host}"),
            reason,
            session_id: caller.session_id.clone(),
            call_id: caller.call_id.clone(),
        };
        match approvals.ask(&request).await {
            Approval::Once | Approval::Session | Approval::Always => {}
            Approval::Deny if approvals.interactive(&request.session_id) => {
                return Err(Proxy::Denied(format!(
                    "the user did not allow a command of plugin '{plugin}' to connect to {host}"
                )));
            }
            Approval::Deny => {
                return Err(Proxy::Denied(format!(
                    "a command of plugin '{plugin}' needs approval to connect to {host} and no one is here to give it; rerun with --yolo, or add \"net:{host}\" to [approvals] allow in config.toml"
                )));
            }
        }
    }
    match early {
        Some(addr) => Ok(addr),
        None => allowed_address(plugin, &dest, explicit, resolve(&dest).await.map_err(to_proxy)?).map_err(to_proxy),
    }
}

/// Fill in secret placeholders where they may go; drop every header carrying one anywhere else.
/// Returns the request and why each dropped header was dropped.
fn inject_secrets(
    mut request: http::Request<WasiBody>,
    egress: &Egress,
    dest: &Destination,
) -> (http::Request<WasiBody>, Vec<String>) {
    let mut dropped = Vec::new();
    let names: Vec<http::HeaderName> = request.headers().keys().cloned().collect();
    for name in names {
        let values: Vec<http::HeaderValue> = request.headers().get_all(&name).iter().cloned().collect();
        if !values
            .iter()
            .any(|v| v.as_bytes().windows(PLACEHOLDER_OPEN.len()).any(|w| w == PLACEHOLDER_OPEN.as_bytes()))
        {
            continue;
        }
        request.headers_mut().remove(&name);
        for value in values {
            let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match fill(&text, name.as_str(), egress, dest) {
                Ok(filled) => match http::HeaderValue::from_str(&filled) {
                    Ok(v) => {
                        request.headers_mut().append(name.clone(), v);
                    }
                    Err(_) => dropped.push(format!("a secret's value is not a valid value for header {name}")),
                },
                Err(reason) => dropped.push(reason),
            }
        }
    }
    (request, dropped)
}

/// Fill in secret placeholders in the URL's path (written as is, or percent-encoded), for
/// secrets the manifest lets go there (`in_path = true`); a placeholder that may not be filled
/// in refuses the request.
fn fill_path(
    mut request: http::Request<WasiBody>,
    egress: &Egress,
    dest: &Destination,
) -> Result<http::Request<WasiBody>, String> {
    let Some(path) = request.uri().path_and_query().map(|p| p.as_str().to_string()) else { return Ok(request) };
    let decoded = path.replace("%7B%7B", "{{").replace("%7b%7b", "{{").replace("%7D%7D", "}}").replace("%7d%7d", "}}");
    if !decoded.contains(PLACEHOLDER_OPEN) {
        return Ok(request);
    }
    let filled = fill(&decoded, crate::manifest::PATH_PLACE, egress, dest)?;
    let mut parts = request.uri().clone().into_parts();
    parts.path_and_query =
        Some(filled.parse().map_err(|_| "a secret's value cannot be written in a URL path".to_string())?);
    *request.uri_mut() = http::Uri::from_parts(parts).map_err(|e| e.to_string())?;
    Ok(request)
}

/// Replace every placeholder in the value of `header`, or say why not.
fn fill(text: &str, header: &str, egress: &Egress, dest: &Destination) -> Result<String, String> {
    let plugin = egress.plugin.as_str();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(PLACEHOLDER_OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + PLACEHOLDER_OPEN.len()..];
        let end = after.find("}}").ok_or("unterminated secret placeholder")?;
        let name = &after[..end];
        let not_granted = || format!("secret {name} is not granted to plugin '{plugin}'");
        let hosts: Vec<&HostPattern> = egress.grants.secret_hosts(name).collect();
        if hosts.is_empty() {
            return Err(not_granted());
        }
        let allowed = egress.secret_headers.of(name).ok_or_else(not_granted)?;
        if !allowed.iter().any(|h| h == header) {
            let places: Vec<String> = allowed.iter().map(|h| crate::manifest::place_name(h)).collect();
            return Err(format!(
                "secret {name} may only be sent in {}, not {}",
                places.join(", "),
                crate::manifest::place_name(header)
            ));
        }
        if !hosts.iter().any(|h| h.matches(&dest.host, dest.port)) {
            let hosts: Vec<String> = hosts.iter().map(ToString::to_string).collect();
            return Err(format!("secret {name} may only be sent to {}, not {}", hosts.join(" or "), dest.authority()));
        }
        let loopback = dest.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if !dest.tls && !loopback {
            return Err(format!("secret {name} is only sent over https (this request is plain http)"));
        }
        let value = egress.secrets.value(name).ok_or_else(|| format!("secret {name} has no value"))?;
        out.push_str(&value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| b.with_root_certificates(roots).with_no_client_auth())
                .unwrap_or_else(|e| panic!("rustls rejected its own default protocol versions: {e}"));
            Arc::new(config)
        })
        .clone()
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin + 'static> Stream for T {}

/// Send to the checked address (TLS names the original host).
async fn send_pinned(
    mut request: http::Request<WasiBody>,
    addr: SocketAddr,
    dest: &Destination,
    options: Option<RequestOptions>,
) -> Result<(http::Response<WasiBody>, ResponseFuture), HttpError> {
    let connect_timeout = options.and_then(|o| o.connect_timeout).unwrap_or(CONNECT_TIMEOUT);
    let first_byte_timeout = options.and_then(|o| o.first_byte_timeout).unwrap_or(FIRST_BYTE_TIMEOUT);
    let tcp = tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => HttpError::ConnectionRefused,
            _ => HttpError::Connect(e),
        })?;
    let stream: Box<dyn Stream> = if dest.tls {
        let name = match dest.host.parse::<IpAddr>() {
            Ok(ip) => rustls::pki_types::ServerName::from(ip),
            Err(_) => {
                rustls::pki_types::ServerName::try_from(dest.host.clone()).map_err(HttpError::InvalidDnsNameError)?
            }
        };
        let tls = tokio_rustls::TlsConnector::from(tls_config()).connect(name, tcp).await.map_err(HttpError::Tls)?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("plugin HTTP connection ended: {e}");
        }
    });
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    *request.uri_mut() =
        http::Uri::builder().path_and_query(path).build().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let response = tokio::time::timeout(first_byte_timeout, sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)??;
    let response = response.map(|body| body.map_err(HttpError::from).boxed_unsync());
    Ok((response, Box::new(async { Ok(()) })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::{Approver, Unattended};
    use crate::manifest::Manifest;
    use std::pin::Pin;

    fn request(url: &str, headers: &[(&str, &str)]) -> http::Request<WasiBody> {
        let body = http_body_util::Empty::<bytes::Bytes>::new().map_err(|never| match never {}).boxed_unsync();
        let mut b = http::Request::builder().uri(url);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(body).expect("request")
    }

    /// What `plugin 'p'` with this manifest `[capabilities]` body, all of it granted, checks
    /// requests against; `approver` answers the gate.
    fn egress(capabilities: &str, approver: Arc<dyn Approver>, always: &[&str]) -> Egress {
        let text = format!("name = \"p\"\nversion = \"1.0.0\"\napi = \"0.2.0\"\n[capabilities]\n{capabilities}");
        let manifest = Manifest::parse(&text, "plugin.toml".as_ref()).expect("manifest");
        let always: Vec<String> = always.iter().map(|s| s.to_string()).collect();
        Egress {
            plugin: "p".into(),
            grants: Arc::new(Grants::effective(&manifest.requests, manifest.requests.clone())),
            secrets: Arc::new(Secrets::from_pairs([("KEY", "s3cret")])),
            secret_headers: Arc::new(manifest.secret_headers),
            approvals: Arc::new(Approvals::new(approver, &always)),
            caller: Caller::default(),
        }
    }

    const SECRET: &str = "secrets = [{ name = \"KEY\", host = \"api.example.com\" }]";

    fn injected(egress: &Egress, url: &str, headers: &[(&str, &str)]) -> (Vec<(String, String)>, Vec<String>) {
        let req = request(url, headers);
        let dest = Destination::of(&req).expect("dest");
        let (req, dropped) = inject_secrets(req, egress, &dest);
        let sent = req.headers().iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").to_string())).collect();
        (sent, dropped)
    }

    #[test]
    fn secrets_fill_only_their_headers_over_https_to_their_host() {
        let e = egress(SECRET, Arc::new(Unattended { yolo: false }), &[]);
        let ph = "Bearer {{secret:KEY}}";
        let (sent, dropped) = injected(&e, "https://api.example.com/x", &[("authorization", ph), ("x-api-key", ph)]);
        assert_eq!(
            sent,
            [("authorization".into(), "Bearer s3cret".into()), ("x-api-key".into(), "Bearer s3cret".into())]
        );
        assert!(dropped.is_empty(), "{dropped:?}");
        // Plain http, or another host: the header is dropped, and the reason kept.
        let (sent, dropped) = injected(&e, "http://api.example.com/x", &[("authorization", ph)]);
        assert_eq!(
            (sent, dropped),
            (vec![], vec!["secret KEY is only sent over https (this request is plain http)".into()])
        );
        let (sent, dropped) = injected(&e, "https://other.example.com/x", &[("authorization", ph)]);
        assert_eq!(
            (sent, dropped),
            (vec![], vec!["secret KEY may only be sent to api.example.com, not other.example.com:443".into()])
        );
        // Any header the manifest does not name for the secret, echoed back or not.
        for header in ["origin", "referer", "cookie", "x-forwarded-host", "x-key"] {
            let (sent, dropped) = injected(&e, "https://api.example.com/x", &[(header, ph), ("x-a", "b")]);
            assert_eq!(sent, [("x-a".to_string(), "b".to_string())], "{header}");
            assert_eq!(
                dropped,
                [format!("secret KEY may only be sent in header authorization, header x-api-key, not header {header}")]
            );
        }
        // Headers without placeholders pass untouched.
        assert_eq!(
            injected(&e, "https://other.example.com/", &[("x-a", "b")]),
            (vec![("x-a".into(), "b".into())], vec![])
        );
    }

    #[test]
    fn a_secret_goes_into_the_headers_its_request_names() {
        let named = SECRET.replace(" }]", ", headers = [\"Key\"] }]");
        let e = egress(&named, Arc::new(Unattended { yolo: false }), &[]);
        let ph = "{{secret:KEY}}";
        assert_eq!(
            injected(&e, "https://api.example.com/", &[("key", ph)]),
            (vec![("key".into(), "s3cret".into())], vec![])
        );
        let (sent, dropped) = injected(&e, "https://api.example.com/", &[("authorization", ph)]);
        assert!(sent.is_empty());
        assert_eq!(dropped, ["secret KEY may only be sent in header key, not header authorization"]);
    }

    #[test]
    fn a_secret_requested_for_two_hosts_goes_to_either_and_nowhere_else() {
        let two = "secrets = [{ name = \"KEY\", host = \"api.example.com\" }, { name = \"KEY\", host = \"gateway.example.com\" }]";
        let e = egress(two, Arc::new(Unattended { yolo: false }), &[]);
        let ph = "Bot {{secret:KEY}}";
        for host in ["api.example.com", "gateway.example.com"] {
            let (sent, dropped) = injected(&e, &format!("https://{host}/x"), &[("authorization", ph)]);
            assert_eq!((sent, dropped), (vec![("authorization".into(), "Bot s3cret".into())], vec![]), "{host}");
        }
        let (sent, dropped) = injected(&e, "https://other.example.com/x", &[("authorization", ph)]);
        assert!(sent.is_empty());
        assert_eq!(
            dropped,
            ["secret KEY may only be sent to api.example.com or gateway.example.com, not other.example.com:443"]
        );
    }

    fn path_filled(egress: &Egress, url: &str) -> Result<String, String> {
        let req = request(url, &[]);
        let dest = Destination::of(&req).expect("dest");
        fill_path(req, egress, &dest).map(|r| r.uri().to_string())
    }

    #[test]
    fn a_secret_goes_into_the_url_path_only_when_its_manifest_says_in_path() {
        let e = egress(SECRET, Arc::new(Unattended { yolo: false }), &[]);
        assert_eq!(
            path_filled(&e, "https://api.example.com/bot%7B%7Bsecret:KEY%7D%7D/getMe"),
            Err("secret KEY may only be sent in header authorization, header x-api-key, not the URL path".into())
        );
        let in_path = SECRET.replace(" }]", ", in_path = true }]");
        let e = egress(&in_path, Arc::new(Unattended { yolo: false }), &[]);
        assert_eq!(
            path_filled(&e, "https://api.example.com/bot%7B%7Bsecret:KEY%7D%7D/getMe?x=1").as_deref(),
            Ok("https://api.example.com/bots3cret/getMe?x=1")
        );
        // Still only to its own host, and only over https.
        assert_eq!(
            path_filled(&e, "https://evil.example.net/bot%7B%7Bsecret:KEY%7D%7D/x"),
            Err("secret KEY may only be sent to api.example.com, not evil.example.net:443".into())
        );
        assert_eq!(
            path_filled(&e, "http://api.example.com/bot%7B%7Bsecret:KEY%7D%7D/x"),
            Err("secret KEY is only sent over https (this request is plain http)".into())
        );
        // A path without placeholders is left alone.
        assert_eq!(path_filled(&e, "https://evil.example.net/x").as_deref(), Ok("https://evil.example.net/x"));
    }

    /// Answers `answer`, keeping every request.
    struct Recording {
        answer: Approval,
        interactive: bool,
        seen: Mutex<Vec<ApprovalRequest>>,
    }

    impl Approver for Recording {
        fn approve<'a>(&'a self, r: &'a ApprovalRequest) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
            lock(&self.seen).push(r.clone());
            Box::pin(async move { self.answer })
        }

        fn interactive(&self, _session_id: &str) -> bool {
            self.interactive
        }
    }

    fn recording(answer: Approval, interactive: bool) -> Arc<Recording> {
        Arc::new(Recording { answer, interactive, seen: Mutex::new(Vec::new()) })
    }

    async fn authorized(e: &Egress, url: &str) -> Result<SocketAddr, String> {
        let dest = Destination::of(&request(url, &[])).expect("dest");
        authorize(e, &dest).await.map_err(|r| match r {
            Refusal::Denied(m) => format!("denied: {m}"),
            Refusal::Dns(m) => format!("dns: {m}"),
        })
    }

    #[tokio::test]
    async fn a_wildcard_grant_asks_before_a_new_host_and_remembers_the_session() {
        let approver = recording(Approval::Session, true);
        let e = egress("network = [\"*\"]", approver.clone(), &[]);
        // Addresses literals need no lookup: what passes the gate is returned, never connected to.
        assert_eq!(authorized(&e, "https://93.184.216.34/a").await, Ok("93.184.216.34:443".parse().expect("addr")));
        assert_eq!(authorized(&e, "http://93.184.216.34/b").await, Ok("93.184.216.34:80".parse().expect("addr")));
        assert_eq!(
            authorized(&e, "https://93.184.216.34:8443/").await,
            Ok("93.184.216.34:8443".parse().expect("addr"))
        );
        assert_eq!(
            authorized(&e, "https://[2606:4700::1111]/").await,
            Ok("[2606:4700::1111]:443".parse().expect("addr"))
        );
        let seen: Vec<(ApprovalKind, String, String, String, String)> = lock(&approver.seen)
            .iter()
            .map(|r| (r.kind, r.plugin.clone(), r.command.clone(), r.key.clone(), r.reason.clone()))
            .collect();
        let asked = |host: &str| {
            (
                ApprovalKind::Network,
                "p".to_string(),
                host.to_string(),
                format!("net:{host}"),
                "allowed by its wildcard grant net:*".to_string(),
            )
        };
        // Ports 443 and 80 are the one key `net:HOST`; another port is a key of its own.
        assert_eq!(seen, [asked("93.184.216.34"), asked("93.184.216.34:8443"), asked("[2606:4700::1111]")]);
    }

    #[tokio::test]
    async fn internal_literals_are_refused_before_anyone_is_asked() {
        let approver = recording(Approval::Once, true);
        let e = egress("network = [\"*\"]", approver.clone(), &[]);
        for (url, shown, ip, kind) in [
            ("http://[64:ff9b::7f00:1]:8080/", "[64:ff9b::7f00:1]:8080", "64:ff9b::7f00:1", "loopback"),
            ("http://169.254.169.254/latest", "169.254.169.254:80", "169.254.169.254", "link-local"),
            ("http://[2002:c0a8:101::]/", "[2002:c0a8:101::]:80", "2002:c0a8:101::", "private"),
        ] {
            let grant = if ip.contains(':') { format!("[{ip}]") } else { ip.to_string() };
            let port = shown.rsplit(':').next().expect("port");
            assert_eq!(
                authorized(&e, url).await,
                Err(format!(
                    "denied: plugin 'p': {shown} resolves to {ip}, a {kind} address; only a grant of the address itself reaches loopback, private or link-local addresses (grant `net:{grant}:{port}` to allow it)"
                ))
            );
        }
        assert!(lock(&approver.seen).is_empty());
    }

    #[tokio::test]
    async fn explicit_grants_and_config_approvals_never_ask() {
        let approver = recording(Approval::Deny, true);
        let e = egress("network = [\"*\", \"93.184.216.34\"]", approver.clone(), &["net:[2606:4700::1111]"]);
        assert!(authorized(&e, "https://93.184.216.34/").await.is_ok());
        assert!(authorized(&e, "https://[2606:4700::1111]/").await.is_ok());
        assert!(lock(&approver.seen).is_empty());
        assert_eq!(
            authorized(&e, "https://1.1.1.1/").await,
            Err("denied: the user did not allow plugin 'p' to connect to 1.1.1.1 (allowed only by its wildcard grant net:*)".into())
        );
    }

    #[tokio::test]
    async fn unattended_refusals_say_how_to_allow_the_host() {
        let e = egress("network = [\"*\", \"*.example.com\"]", Arc::new(Unattended { yolo: false }), &[]);
        assert_eq!(
            authorized(&e, "https://docs.example.com:8443/x").await,
            Err("denied: plugin 'p' needs approval to connect to docs.example.com:8443 (allowed only by its wildcard grants net:*, net:*.example.com) and no one is here to give it; rerun with --yolo, add \"net:docs.example.com:8443\" to [approvals] allow in config.toml, or grant the host: `talaria plugins grant p net:docs.example.com:8443`".into())
        );
        let e = egress("network = [\"*\"]", Arc::new(Unattended { yolo: true }), &[]);
        assert!(authorized(&e, "https://93.184.216.34/").await.is_ok());
    }
}
