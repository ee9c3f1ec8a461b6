//! Outgoing HTTP for plugins: the grant check, address pinning and secret injection.
//!
//! Every `wasi:http` request a plugin makes comes through [`NetHooks::send_request`]:
//! 1. the destination `host:port` must match a granted network pattern;
//! 2. the host name is resolved here and every address checked: loopback, private, link-local and
//!    other internal addresses are reached only through an explicit (non-wildcard) grant of that
//!    very host, so `net:*` cannot reach `127.0.0.1` or the cloud metadata endpoint;
//! 3. the connection goes to the address that was checked (no second lookup to rebind);
//! 4. `{{secret:NAME}}` placeholders in headers are replaced with the secret's value only when
//!    the destination is the host that secret was granted for; on any other host the header is
//!    dropped, so a redirect to another host never carries the secret.
//!
//! A refusal reaches the plugin as `HttpRequestDenied`; the reason is kept for the operator.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http_body_util::BodyExt;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::grant::Grants;
use crate::record::{Recorder, short};
use crate::secrets::Secrets;
use crate::stub::{HttpStubs, StubAnswer};

const PLACEHOLDER_OPEN: &str = "{{secret:";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
const DNS_TIMEOUT: Duration = Duration::from_secs(10);
/// Most requests one call may make.
const MAX_REQUESTS_PER_CALL: usize = 256;
/// Most refusals kept per call (the rest are counted), and the longest one kept.
const MAX_DENIALS: usize = 8;
const MAX_DENIAL_CHARS: usize = 300;
/// Headers that servers commonly echo back or log; a secret is never put into them.
const REFLECTED_HEADERS: &[&str] = &[
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
];
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(60);

/// Per-call network state of one plugin instance.
pub(crate) struct NetHooks {
    pub plugin: String,
    pub grants: Arc<Grants>,
    pub secrets: Arc<Secrets>,
    /// Requests refused during this call, with the reason.
    pub denials: Arc<Mutex<Vec<String>>>,
    /// Requests made during this call.
    pub requests: usize,
    /// Where requests are recorded (`talaria plugin test`); `None`: not recorded.
    pub recorder: Option<Arc<Recorder>>,
    /// Canned answers (`talaria plugin test`); `None`: requests go out.
    pub stubs: Option<Arc<HttpStubs>>,
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
        let plugin = self.plugin.clone();
        let grants = self.grants.clone();
        let secrets = self.secrets.clone();
        let denials = self.denials.clone();
        let stubs = self.stubs.clone();
        Box::new(async move {
            let mut refusal = None;
            let answer = match &stubs {
                Some(stubs) => stubs.answer(request.method().as_str(), &request.uri().to_string()),
                None => StubAnswer::Network,
            };
            let result = match answer {
                StubAnswer::Network => send_checked(request, options, &plugin, &grants, &secrets, &mut refusal).await,
                stubbed => answer_stubbed(&request, stubbed, &plugin, &grants, &mut refusal),
            };
            if let Some((recorder, method, url)) = recorded {
                let outcome = match (&result, refusal.as_ref()) {
                    (Ok((response, _)), _) => response.status().as_u16().to_string(),
                    (Err(_), Some(reason)) => format!("refused: {reason}"),
                    (Err(e), None) => format!("failed: {e}"),
                };
                recorder.push(&plugin, "http", &method, url, Some(outcome));
            }
            if let Some(reason) = refusal {
                record_denial(&plugin, &denials, reason);
            }
            result
        })
    }
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
    format!(
        "plugin '{plugin}' has no network grant for {}:{} (grant it with `talaria plugins grant {plugin} net:{}:{}` if its manifest requests it)",
        dest.host, dest.port, dest.host, dest.port
    )
}

/// Check, pin and send one request; a refusal's reason is left in `refusal`.
async fn send_checked(
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    plugin: &str,
    grants: &Grants,
    secrets: &Secrets,
    refusal: &mut Option<String>,
) -> Result<(http::Response<WasiBody>, ResponseFuture), HttpError> {
    let dest = Destination::of(&request)?;
    let addr = match authorize(plugin, grants, &dest).await {
        Ok(addr) => addr,
        Err(Refusal::Denied(reason)) => {
            *refusal = Some(reason);
            return Err(HttpError::HttpRequestDenied);
        }
        Err(Refusal::Dns(message)) => {
            return Err(HttpError::DnsError { rcode: Some(message), info_code: None });
        }
    };
    let request = inject_secrets(request, plugin, grants, secrets, &dest);
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

/// Check the grant and resolve to an address that is allowed.
async fn authorize(plugin: &str, grants: &Grants, dest: &Destination) -> Result<SocketAddr, Refusal> {
    let matching: Vec<_> = grants.network().filter(|p| p.matches(&dest.host, dest.port)).collect();
    if matching.is_empty() {
        return Err(Refusal::Denied(no_grant(plugin, dest)));
    }
    // Only a grant naming the address itself (or localhost) reaches internal addresses; a grant
    // of an ordinary name must not, or the name's DNS could point it at 127.0.0.1 or metadata.
    let explicit = matching.iter().any(|p| p.names_internal_host());
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
    if explicit {
        return Ok(addrs[0]);
    }
    match addrs.iter().find(|a| internal_kind(a.ip()).is_none()) {
        Some(addr) => Ok(*addr),
        None => {
            let ip = addrs[0].ip();
            let kind = internal_kind(ip).unwrap_or("internal");
            Err(Refusal::Denied(format!(
                "plugin '{plugin}': {}:{} resolves to {ip}, a {kind} address; only a grant of the address itself reaches loopback, private or link-local addresses (grant `net:{ip}:{}` to allow it)",
                dest.host, dest.port, dest.port
            )))
        }
    }
}

/// Why an address counts as internal, if it does.
pub(crate) fn internal_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_private() || (o[0] == 100 && (64..128).contains(&o[1])) {
                Some("private")
            } else if v4.is_link_local() {
                Some("link-local")
            } else if v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() || o[0] == 0 {
                Some("non-routable")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return internal_kind(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback")
            } else if (first & 0xfe00) == 0xfc00 {
                Some("private")
            } else if (first & 0xffc0) == 0xfe80 {
                Some("link-local")
            } else if v6.is_unspecified() || v6.is_multicast() {
                Some("non-routable")
            } else {
                None
            }
        }
    }
}

/// Fill in secret placeholders for their own host; drop headers carrying them anywhere else.
fn inject_secrets(
    mut request: http::Request<WasiBody>,
    plugin: &str,
    grants: &Grants,
    secrets: &Secrets,
    dest: &Destination,
) -> http::Request<WasiBody> {
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
        if REFLECTED_HEADERS.contains(&name.as_str()) {
            tracing::warn!(plugin, header = %name, "secrets are never put into this header; header dropped");
            continue;
        }
        for value in values {
            let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match fill(&text, plugin, grants, secrets, dest) {
                Ok(filled) => match http::HeaderValue::from_str(&filled) {
                    Ok(v) => {
                        request.headers_mut().append(name.clone(), v);
                    }
                    Err(_) => {
                        tracing::warn!(plugin, header = %name, "secret value is not a valid header value; header dropped")
                    }
                },
                Err(reason) => tracing::warn!(plugin, header = %name, "header dropped: {reason}"),
            }
        }
    }
    request
}

/// Replace every placeholder in `text`, or say why not.
fn fill(text: &str, plugin: &str, grants: &Grants, secrets: &Secrets, dest: &Destination) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(PLACEHOLDER_OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + PLACEHOLDER_OPEN.len()..];
        let end = after.find("}}").ok_or("unterminated secret placeholder")?;
        let name = &after[..end];
        let host =
            grants.secret_host(name).ok_or_else(|| format!("secret {name} is not granted to plugin '{plugin}'"))?;
        if !host.matches(&dest.host, dest.port) {
            return Err(format!("secret {name} may only be sent to {host}, not {}:{}", dest.host, dest.port));
        }
        let loopback = dest.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if !dest.tls && !loopback {
            return Err(format!("secret {name} is only sent over https (this request is plain http)"));
        }
        let value = secrets.value(name).ok_or_else(|| format!("secret {name} has no value"))?;
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
    use crate::grant::Capability;

    fn request(url: &str, headers: &[(&str, &str)]) -> http::Request<WasiBody> {
        let body = http_body_util::Empty::<bytes::Bytes>::new().map_err(|never| match never {}).boxed_unsync();
        let mut b = http::Request::builder().uri(url);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(body).expect("request")
    }

    fn injected(url: &str, headers: &[(&str, &str)]) -> Vec<(String, String)> {
        let grants = Grants::effective(
            &["secret:KEY@api.example.com".parse::<Capability>().expect("cap")],
            vec!["secret:KEY@api.example.com".parse().expect("cap")],
        );
        let secrets = Secrets::from_pairs([("KEY", "s3cret")]);
        let req = request(url, headers);
        let dest = Destination::of(&req).expect("dest");
        let req = inject_secrets(req, "p", &grants, &secrets, &dest);
        req.headers().iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").to_string())).collect()
    }

    #[test]
    fn secrets_fill_only_safe_headers_over_https_to_their_host() {
        let ph = "Bearer {{secret:KEY}}";
        assert_eq!(
            injected("https://api.example.com/x", &[("authorization", ph)]),
            [("authorization".into(), "Bearer s3cret".into())]
        );
        // Plain http, another host, or a header servers echo back: the header is dropped.
        assert!(injected("http://api.example.com/x", &[("authorization", ph)]).is_empty());
        assert!(injected("https://other.example.com/x", &[("authorization", ph)]).is_empty());
        assert!(injected("https://api.example.com/x", &[("origin", ph), ("referer", ph)]).is_empty());
        // Headers without placeholders pass untouched.
        assert_eq!(injected("https://other.example.com/", &[("x-a", "b")]), [("x-a".into(), "b".into())]);
    }

    #[test]
    fn internal_addresses_are_classified() {
        let kind = |s: &str| internal_kind(s.parse().expect("ip"));
        assert_eq!(kind("127.0.0.1"), Some("loopback"));
        assert_eq!(kind("10.1.2.3"), Some("private"));
        assert_eq!(kind("192.168.0.1"), Some("private"));
        assert_eq!(kind("100.64.0.1"), Some("private"));
        assert_eq!(kind("169.254.169.254"), Some("link-local"));
        assert_eq!(kind("0.0.0.0"), Some("non-routable"));
        assert_eq!(kind("::1"), Some("loopback"));
        assert_eq!(kind("::ffff:127.0.0.1"), Some("loopback"));
        assert_eq!(kind("fd00::1"), Some("private"));
        assert_eq!(kind("fe80::1"), Some("link-local"));
        assert_eq!(kind("93.184.216.34"), None);
        assert_eq!(kind("2606:4700::1111"), None);
    }
}
