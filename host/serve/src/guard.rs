//! What every request passes before a route sees it: its `Host` is one of the server's names,
//! its `Origin` (when a browser sent one) is the server itself, and every answer is marked not
//! to be cached, sniffed, framed or referred from by another site.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use http::{HeaderValue, StatusCode, header};

/// The names a server answers to: `host:port` pairs, lower-case.
#[derive(Debug, Clone)]
pub struct Names {
    allowed: Vec<String>,
}

impl Names {
    /// The names of a server bound at `bound`: that address, loopback's names when it is a
    /// loopback or unspecified address, and `extra` (a name without a port stands for it with
    /// none and on the bound port, as a proxy in front may forward either).
    pub fn new(bound: SocketAddr, extra: &[String]) -> Self {
        let port = bound.port();
        let mut names = vec![bound.to_string()];
        if bound.ip().is_loopback() || bound.ip().is_unspecified() {
            names.extend(["localhost", "127.0.0.1", "[::1]"].map(|name| format!("{name}:{port}")));
        }
        for name in extra.iter().map(|n| n.trim().to_ascii_lowercase()) {
            if !has_port(&name) {
                names.push(format!("{name}:{port}"));
            }
            names.push(name);
        }
        // A browser leaves the port out when it is 80.
        if port == 80 {
            let bare: Vec<String> = names.iter().filter_map(|n| n.strip_suffix(":80")).map(str::to_string).collect();
            names.extend(bare);
        }
        Self { allowed: names }
    }

    /// Whether `host` (a `Host` header's value) names this server.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        self.allowed.contains(&host)
    }
}

/// Whether `name` (`host`, `host:port`, `[v6]` or `[v6]:port`) says its port.
fn has_port(name: &str) -> bool {
    let after = match name.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(_, after)| after),
        None => name,
    };
    after.rsplit_once(':').is_some_and(|(_, port)| port.parse::<u16>().is_ok())
}

/// Refuse a request for another host or from another site; mark what goes out.
pub async fn check(names: Arc<Names>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let mut response = if !names.allows(host) {
        refuse(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this server does not answer to the host name `{}`: use the address it listens on, or start it with --allow-host NAME for the name a proxy forwards",
                shown(host)
            ),
        )
    } else if let Some(origin) = headers.get(header::ORIGIN).map(|v| v.to_str().unwrap_or("?"))
        && !same_site(origin, host)
    {
        refuse(
            StatusCode::FORBIDDEN,
            format!("requests from the page of another site (Origin `{}`) are refused", shown(origin)),
        )
    } else {
        next.run(request).await
    };
    let out = response.headers_mut();
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    out.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // Not `no-referrer`: under it a browser sends its own forms' POSTs with `Origin: null`,
    // which is refused as another site's. `same-origin` still tells other sites nothing.
    out.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    out.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// Whether `origin` is this server as reached at `host` (over HTTP, or HTTPS through a proxy).
fn same_site(origin: &str, host: &str) -> bool {
    let origin = origin.trim().to_ascii_lowercase();
    let host = host.trim().to_ascii_lowercase();
    origin == format!("http://{host}") || origin == format!("https://{host}")
}

/// At most 100 characters of what a client sent, escapes shown as such.
fn shown(text: &str) -> String {
    text.chars().take(100).flat_map(char::escape_default).collect()
}

fn refuse(status: StatusCode, message: String) -> Response {
    crate::openai::error(status, "invalid_request_error", &message).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_server_answers_to_loopback_names_on_its_port_only() {
        let names = Names::new("127.0.0.1:8642".parse().expect("addr"), &[]);
        for host in ["127.0.0.1:8642", "localhost:8642", "LOCALHOST:8642", "[::1]:8642"] {
            assert!(names.allows(host), "{host}");
        }
        for host in ["evil.example:8642", "localhost:8643", "localhost", "127.0.0.1", "", "127.0.0.1:8642.evil"] {
            assert!(!names.allows(host), "{host}");
        }
    }

    #[test]
    fn a_proxy_s_name_is_allowed_with_and_without_a_port() {
        let names = Names::new("127.0.0.1:8642".parse().expect("addr"), &["agent.example.org".into()]);
        assert!(names.allows("agent.example.org"));
        assert!(names.allows("agent.example.org:8642"));
        assert!(!names.allows("other.example.org"));
        let names = Names::new("127.0.0.1:8642".parse().expect("addr"), &["agent.example.org:443".into()]);
        assert!(names.allows("agent.example.org:443"));
        assert!(!names.allows("agent.example.org:444"));
    }

    #[test]
    fn an_origin_is_the_same_site_only_when_it_is_this_host() {
        assert!(same_site("http://127.0.0.1:8642", "127.0.0.1:8642"));
        assert!(same_site("https://agent.example.org", "agent.example.org"));
        assert!(!same_site("http://evil.example", "127.0.0.1:8642"));
        assert!(!same_site("null", "127.0.0.1:8642"));
        assert!(!same_site("http://127.0.0.1:8642.evil.example", "127.0.0.1:8642"));
    }
}
