//! Where a request may go: its destination ([`Destination`]) is checked against the plugin's
//! network grants, put to the egress gate when only wildcard grants allow it, and resolved to an
//! address the plugin may reach (steps 1 to 4 of [`crate::net`]). A connection a confined
//! command makes through the sandbox's proxy is checked by the same rules ([`admit_command`]).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use wasmtime_wasi_http::{Error as HttpError, WasiBody};

use super::Egress;
use super::address::{AddressKind, internal_kind};
use crate::approval::{Approval, ApprovalKind, ApprovalRequest, Approvals, Caller};
use crate::grant::{Grants, HostPattern};

const DNS_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a request goes.
#[derive(Debug, Clone)]
pub(super) struct Destination {
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
    pub(super) fn authority(&self) -> String {
        format!("{}:{}", self.url_host(), self.port)
    }

    /// The host as the egress gate names it: with its port only when that is not the scheme's
    /// default (`docs.rs`, `docs.rs:8443`).
    fn approval_host(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        if self.port == default { self.url_host() } else { self.authority() }
    }

    pub(super) fn of(request: &http::Request<WasiBody>) -> Result<Self, HttpError> {
        let uri = request.uri();
        let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let authority = uri.authority().ok_or(HttpError::HttpRequestUriInvalid)?;
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(Self { host, port, tls })
    }
}

pub(super) enum Refusal {
    Denied(String),
    Dns(String),
}

/// Check the grant, ask the gate when only a wildcard allows the host, and resolve to an address
/// that is allowed.
pub(super) async fn authorize(egress: &Egress, dest: &Destination) -> Result<SocketAddr, Refusal> {
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

pub(super) fn no_grant(plugin: &str, dest: &Destination) -> String {
    let authority = dest.authority();
    format!(
        "plugin '{plugin}' has no network grant for {authority} (grant it with `talaria plugins grant {plugin} net:{authority}` if its manifest requests it)"
    )
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

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::approval::{Approver, Unattended};
    use crate::net::lock;
    use crate::net::tests::{egress, request};

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
