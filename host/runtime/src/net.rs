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
mod destination;
mod inject;
mod pool;
pub(crate) mod websocket;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http_body_util::BodyExt;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::approval::{Approvals, Caller};
use crate::grant::Grants;
use crate::leak::SecretScan;
use crate::manifest::SecretHeaders;
use crate::record::{Recorder, short};
use crate::secrets::Secrets;
use crate::stub::{HttpStubs, StubAnswer};
use destination::{Destination, Refusal, authorize, no_grant};
use inject::{PLACEHOLDER_OPEN, fill, fill_path, inject_secrets};

pub use address::{AddressKind, internal_kind};
pub(crate) use destination::admit_command;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
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
    send_pinned(request, addr, &dest, options, &egress.plugin).await
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// Send to the checked address (TLS names the original host), on a connection of the plugin's
/// to it that is free (see [`pool`]) or a new one.
async fn send_pinned(
    mut request: http::Request<WasiBody>,
    addr: SocketAddr,
    dest: &Destination,
    options: Option<RequestOptions>,
    plugin: &str,
) -> Result<(http::Response<WasiBody>, ResponseFuture), HttpError> {
    let connect_timeout = options.and_then(|o| o.connect_timeout).unwrap_or(CONNECT_TIMEOUT);
    let first_byte_timeout = options.and_then(|o| o.first_byte_timeout).unwrap_or(FIRST_BYTE_TIMEOUT);
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    *request.uri_mut() =
        http::Uri::builder().path_and_query(path).build().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let key = pool::Key { plugin: plugin.to_string(), addr, tls: dest.tls.then(|| dest.host.clone()) };
    if let Some(mut sender) = pool::take(&key) {
        match tokio::time::timeout(first_byte_timeout, sender.try_send_request(request)).await {
            Err(_) => return Err(HttpError::ConnectionReadTimeout),
            Ok(Ok(response)) => {
                pool::put(key, sender);
                return Ok(answer(response));
            }
            // Closed by its server before the request went out: it goes on a new connection.
            Ok(Err(mut e)) => match e.take_message() {
                Some(unsent) => request = unsent,
                None => return Err(e.into_error().into()),
            },
        }
    }
    let mut sender = connect(addr, dest, connect_timeout).await?;
    let response = tokio::time::timeout(first_byte_timeout, sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)??;
    pool::put(key, sender);
    Ok(answer(response))
}

fn answer(response: http::Response<hyper::body::Incoming>) -> (http::Response<WasiBody>, ResponseFuture) {
    (response.map(|body| body.map_err(HttpError::from).boxed_unsync()), Box::new(async { Ok(()) }))
}

/// A new HTTP/1 connection to the checked address.
async fn connect(
    addr: SocketAddr,
    dest: &Destination,
    connect_timeout: Duration,
) -> Result<hyper::client::conn::http1::SendRequest<WasiBody>, HttpError> {
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
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("plugin HTTP connection ended: {e}");
        }
    });
    Ok(sender)
}

/// What the tests of `destination` and `inject` build their requests and egress from.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::Approver;
    use crate::manifest::Manifest;

    pub(super) fn request(url: &str, headers: &[(&str, &str)]) -> http::Request<WasiBody> {
        let body = http_body_util::Empty::<bytes::Bytes>::new().map_err(|never| match never {}).boxed_unsync();
        let mut b = http::Request::builder().uri(url);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(body).expect("request")
    }

    /// What `plugin 'p'` with this manifest `[capabilities]` body, all of it granted, checks
    /// requests against; `approver` answers the gate.
    pub(super) fn egress(capabilities: &str, approver: Arc<dyn Approver>, always: &[&str]) -> Egress {
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
}
