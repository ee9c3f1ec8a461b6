//! The egress proxy: the only way out of a confined command's network namespace.
//!
//! A confined command sees only loopback; its `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` name a
//! port there, and each connection made to it reaches the host as an accepted stream. [`serve`]
//! reads one proxy request from such a stream, asks a [`Gate`] whether the command may reach the
//! host it names, and carries the request out:
//! - `CONNECT host:port` opens a tunnel and copies bytes both ways until both sides close. The
//!   proxy does no TLS interception, so it sees the host name and port of an HTTPS connection
//!   and nothing inside it.
//! - A request for an absolute `http://` URL is sent on in origin form (`GET /path?q`), with the
//!   `Host` header set from the URL, `Proxy-*` and `Keep-Alive` headers dropped and
//!   `Connection: close`; other headers and the body pass unchanged. One request per connection:
//!   whatever else the client sends goes to the same host, then the connection closes.
//! - Anything else is answered `400`, a refusal `403` (denied) or `502` (unreachable), each with a
//!   one-line `talaria: ...` body that curl, pip or npm show to the user. No header of an answer
//!   holds text from the request or the refusal, so neither can add header lines.
//!
//! Names are resolved by the gate, on the host, outside the sandbox; the proxy connects to exactly
//! the address the gate returns and never looks a name up again.
//!
//! ```no_run
//! use std::{future::Future, net::SocketAddr, pin::Pin};
//! use talaria_sandbox::proxy::{self, Gate, Refusal};
//!
//! /// Lets commands reach PyPI only; the name is resolved here, on the host.
//! struct PypiOnly;
//!
//! impl Gate for PypiOnly {
//!     fn admit<'a>(&'a self, host: &'a str, port: u16)
//!         -> Pin<Box<dyn Future<Output = Result<SocketAddr, Refusal>> + Send + 'a>> {
//!         Box::pin(async move {
//!             if host != "pypi.org" {
//!                 return Err(Refusal::Denied(format!("{host} is not among the hosts this command may reach")));
//!             }
//!             let found = tokio::net::lookup_host((host, port)).await.ok().and_then(|mut addrs| addrs.next());
//!             found.ok_or_else(|| Refusal::Unreachable(format!("{host} could not be resolved")))
//!         })
//!     }
//! }
//!
//! # async fn run(stream: tokio::net::TcpStream) {
//! match proxy::serve(stream, &PypiOnly).await {
//!     Ok(served) => println!("egress: {served:?}"),
//!     Err(error) => println!("egress failed: {error}"),
//! }
//! # }
//! ```

use std::future::Future;
use std::io;
use std::net::{Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time;

/// The longest request head read, request line and headers together.
const MAX_HEAD: usize = 16 * 1024;
/// The most headers a request head may have.
const MAX_HEADERS: usize = 100;
/// How long a client has to send a complete request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to an admitted address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// The answer to a `CONNECT` whose tunnel is open.
const CONNECTED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";
/// Headers not sent on with a forwarded request (`Host` and `Connection` are set by the proxy).
const DROPPED: [&str; 6] =
    ["Host", "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate"];

/// Decides where a confined command may connect, and resolves the name (DNS happens here,
/// outside the sandbox).
pub trait Gate: Send + Sync {
    /// May the command reach `host:port`? `host` is lower-case, an IPv6 literal without brackets.
    ///
    /// # Errors
    ///
    /// `Ok(addr)`: connect to exactly that address (already checked: no second lookup).
    /// `Err(refusal)`: refused; the refusal's text is shown to the command.
    fn admit<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = Result<SocketAddr, Refusal>> + Send + 'a>>;
}

/// Why a connection was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not allowed (-> 403 Forbidden).
    Denied(String),
    /// The name could not be resolved or the host could not be reached (-> 502 Bad Gateway).
    Unreachable(String),
}

/// What became of a connection that sent a well-formed request, for the caller to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// A `CONNECT` tunnel ran until both sides closed: `up` bytes went from the command to the
    /// host, `down` came back (the `CONNECT` exchange itself not counted).
    Tunnel { host: String, port: u16, up: u64, down: u64 },
    /// A plain-HTTP request was forwarded: `up` bytes went to the host (the rewritten head
    /// included), `down` came back.
    Forwarded { host: String, port: u16, method: String, up: u64, down: u64 },
    /// The gate refused, or the admitted address could not be connected to: the command was
    /// answered `status` with `reason` as the body.
    Refused { host: String, port: u16, status: u16, reason: String },
}

/// Why a connection was not served to its end.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The request was not one the proxy carries; it was answered 400.
    #[error("{0}; this proxy only carries `CONNECT host:port` and requests for absolute http:// URLs")]
    BadRequest(String),
    /// The request head was over 16 KiB or 100 headers; it was answered 431.
    #[error("the request head is over 16 KiB or 100 headers")]
    HeadTooLarge,
    /// No complete request head came within 30 s; the connection was closed unanswered.
    #[error("no complete request head within 30 s")]
    HeadTimeout,
    /// The client closed before sending a complete request head.
    #[error("the client closed before sending a complete request head")]
    Closed,
    /// Reading from or writing to the client or the host failed.
    #[error("egress connection failed: {0}")]
    Io(#[from] io::Error),
}

impl ProxyError {
    /// The answer the client gets, if any.
    fn status(&self) -> Option<Status> {
        match self {
            Self::BadRequest(_) => Some(BAD_REQUEST),
            Self::HeadTooLarge => Some(HEAD_TOO_LARGE),
            Self::HeadTimeout | Self::Closed | Self::Io(_) => None,
        }
    }
}

/// Serve one client connection of a confined command: read one proxy request and carry it out.
///
/// # Errors
///
/// [`ProxyError`] when the request is malformed (answered 400 or 431), incomplete, or the
/// connection fails. A refusal is not an error: it is answered and returned as
/// [`Served::Refused`].
pub async fn serve<S>(mut client: S, gate: &dyn Gate) -> Result<Served, ProxyError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let read = time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await.unwrap_or(Err(ProxyError::HeadTimeout));
    let (Target { host, port, kind }, rest) = match read {
        Ok(read) => read,
        Err(error) => {
            if let Some(status) = error.status() {
                answer(&mut client, status, &error.to_string()).await?;
            }
            return Err(error);
        }
    };
    let mut upstream = match connect(gate, &host, port).await {
        Ok(upstream) => upstream,
        Err(refusal) => {
            let (status, reason) = match refusal {
                Refusal::Denied(reason) => (FORBIDDEN, reason),
                Refusal::Unreachable(reason) => (BAD_GATEWAY, reason),
            };
            answer(&mut client, status, &reason).await?;
            return Ok(Served::Refused { host, port, status: status.0, reason });
        }
    };
    match kind {
        Kind::Connect => {
            client.write_all(CONNECTED).await?;
            upstream.write_all(&rest).await?;
            let (up, down) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
            Ok(Served::Tunnel { host, port, up: rest.len() as u64 + up, down })
        }
        Kind::Forward { method, head } => {
            upstream.write_all(&[head.as_slice(), &rest].concat()).await?;
            let (up, down) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
            Ok(Served::Forwarded { host, port, method, up: (head.len() + rest.len()) as u64 + up, down })
        }
    }
}

/// Where a request goes: the host as the gate is asked about it, and what to do once connected.
struct Target {
    host: String,
    port: u16,
    kind: Kind,
}

enum Kind {
    /// Answer 200, then tunnel.
    Connect,
    /// Send `head` (the request rewritten to origin form), then the rest of the client's bytes.
    Forward { method: String, head: Vec<u8> },
}

/// A status the proxy answers with itself: code and reason phrase.
#[derive(Debug, Clone, Copy)]
struct Status(u16, &'static str);

const BAD_REQUEST: Status = Status(400, "Bad Request");
const FORBIDDEN: Status = Status(403, "Forbidden");
const HEAD_TOO_LARGE: Status = Status(431, "Request Header Fields Too Large");
const BAD_GATEWAY: Status = Status(502, "Bad Gateway");

/// Reads until a complete request head, returning where it goes and the bytes read after it.
async fn read_head<S: AsyncRead + Unpin>(client: &mut S) -> Result<(Target, Vec<u8>), ProxyError> {
    let mut buf = vec![0; MAX_HEAD];
    let mut filled = 0;
    loop {
        let n = client.read(&mut buf[filled..]).await?;
        if n == 0 {
            return Err(ProxyError::Closed);
        }
        filled += n;
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf[..filled]) {
            Ok(httparse::Status::Complete(len)) => return Ok((target(&request)?, buf[len..filled].to_vec())),
            Ok(httparse::Status::Partial) if filled == MAX_HEAD => return Err(ProxyError::HeadTooLarge),
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(ProxyError::HeadTooLarge),
            Err(error) => return Err(bad(&format!("the request is not HTTP/1.x ({error})"))),
        }
    }
}

/// Where a parsed request goes, with a forwarded request's head rewritten.
fn target(request: &httparse::Request<'_, '_>) -> Result<Target, ProxyError> {
    let (Some(method), Some(uri), Some(minor)) = (request.method, request.path, request.version) else {
        return Err(bad("the request line is incomplete"));
    };
    if method == "CONNECT" {
        let (host, port) = authority(uri, None)?;
        return Ok(Target { host, port, kind: Kind::Connect });
    }
    let scheme = |name: &str| uri.get(..name.len()).is_some_and(|start| start.eq_ignore_ascii_case(name));
    let Some(rest) = uri.get("http://".len()..).filter(|_| scheme("http://")) else {
        return Err(bad(if scheme("https://") {
            "https:// URLs are not forwarded (send CONNECT host:443 and speak TLS through the tunnel)"
        } else if uri.starts_with('/') {
            "the request names a path, not a URL"
        } else {
            "the request target is not an http:// URL"
        }));
    };
    let (authority_text, path) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let (host, port) = authority(authority_text, Some(80))?;
    let path = path.split_once('#').map_or(path, |(path, _fragment)| path);
    let slash = if path.starts_with('/') { "" } else { "/" };
    let bracketed = if host.contains(':') { format!("[{host}]") } else { host.clone() };
    let host_header = if port == 80 { bracketed } else { format!("{bracketed}:{port}") };
    let mut head = format!("{method} {slash}{path} HTTP/1.{minor}\r\nHost: {host_header}\r\n").into_bytes();
    for header in request.headers.iter().filter(|header| !DROPPED.iter().any(|d| header.name.eq_ignore_ascii_case(d))) {
        head.extend_from_slice(header.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(header.value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Target { host, port, kind: Kind::Forward { method: method.to_owned(), head } })
}

/// Splits `host:port` or `[v6]:port` into a lower-case host without brackets and a port.
fn authority(text: &str, default_port: Option<u16>) -> Result<(String, u16), ProxyError> {
    let (host, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (inner, after) = bracketed.split_once(']').ok_or_else(|| bad("an IPv6 host lacks its `]`"))?;
        inner.parse::<Ipv6Addr>().map_err(|_| bad("the host in brackets is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(|| bad("the host is followed by more than a port"))?),
        };
        (inner, port)
    } else {
        let (name, port) = text.split_once(':').map_or((text, None), |(name, port)| (name, Some(port)));
        let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
        if name.is_empty() || name.len() > 255 || !name.bytes().all(allowed) {
            return Err(bad("the host is not a DNS name or an IP address"));
        }
        (name, port)
    };
    let port = match (port, default_port) {
        (Some(port), _) => port
            .parse::<u16>()
            .ok()
            .filter(|&n| n != 0 && port.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?,
        (None, Some(port)) => port,
        (None, None) => return Err(bad("CONNECT needs host:port")),
    };
    Ok((host.to_ascii_lowercase(), port))
}

fn bad(why: &str) -> ProxyError {
    ProxyError::BadRequest(why.to_owned())
}

/// Asks the gate, then connects to the address it returned.
async fn connect(gate: &dyn Gate, host: &str, port: u16) -> Result<TcpStream, Refusal> {
    let addr = gate.admit(host, port).await?;
    match time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(error)) => Err(Refusal::Unreachable(format!("could not connect to {host}:{port} ({addr}): {error}"))),
        Err(_elapsed) => Err(Refusal::Unreachable(format!("no connection to {host}:{port} ({addr}) within 20 s"))),
    }
}

/// Answers `status` with `text` on one body line, then closes the client's side.
async fn answer<S: AsyncWrite + Unpin>(client: &mut S, status: Status, text: &str) -> io::Result<()> {
    let line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let body = format!("talaria: {line}\n");
    let (Status(code, phrase), len) = (status, body.len());
    let reply = format!(
        "HTTP/1.1 {code} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\
         Content-Length: {len}\r\n\r\n{body}"
    );
    client.write_all(reply.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::io::duplex;
    use tokio::net::TcpListener;

    /// Admits the names it holds, each to its address, and records what it was asked.
    /// `nowhere.test` does not resolve; `inject.test` is denied with CR LF in the reason.
    struct TestGate(Vec<(&'static str, SocketAddr)>, Mutex<Vec<(String, u16)>>);

    impl Gate for TestGate {
        fn admit<'a>(
            &'a self,
            host: &'a str,
            port: u16,
        ) -> Pin<Box<dyn Future<Output = Result<SocketAddr, Refusal>> + Send + 'a>> {
            self.1.lock().expect("lock").push((host.to_owned(), port));
            let admitted = self.0.iter().find(|(name, _)| *name == host).map(|&(_, addr)| addr);
            Box::pin(async move {
                match host {
                    "nowhere.test" => Err(Refusal::Unreachable("nowhere.test does not resolve".into())),
                    "inject.test" => Err(Refusal::Denied("no\r\nX-Injected: yes".into())),
                    _ => admitted.ok_or_else(|| Refusal::Denied(format!("{host}:{port} is not allowed"))),
                }
            })
        }
    }

    fn gate(hosts: &[(&'static str, SocketAddr)]) -> TestGate {
        TestGate(hosts.to_vec(), Mutex::default())
    }

    async fn upstream() -> (TcpListener, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        (listener, addr)
    }

    /// Sends `request`, then reads everything the proxy answers until it closes.
    async fn exchange(gate: &TestGate, request: &str) -> (Result<Served, ProxyError>, String) {
        let (mut client, server) = duplex(1 << 16);
        let command = async move {
            client.write_all(request.as_bytes()).await.expect("write request");
            let mut reply = Vec::new();
            client.read_to_end(&mut reply).await.expect("read reply");
            String::from_utf8(reply).expect("utf-8 reply")
        };
        tokio::join!(serve(server, gate), command)
    }

    /// The proxy's own answer with `status_line` and `body`, to the byte.
    fn answer(status_line: &str, body: &str) -> String {
        let headers = "Content-Type: text/plain; charset=utf-8\r\nConnection: close";
        format!("{status_line}\r\n{headers}\r\nContent-Length: {}\r\n\r\n{body}", body.len())
    }

    fn refused(host: &str, port: u16, status: u16, reason: &str) -> Served {
        Served::Refused { host: host.into(), port, status, reason: reason.into() }
    }

    #[tokio::test]
    async fn connect_tunnels_both_ways_including_bytes_sent_with_the_head() {
        let (listener, addr) = upstream().await;
        let host_side = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut ping = [0; 4];
            stream.read_exact(&mut ping).await.expect("read ping");
            stream.write_all(b"pong").await.expect("write pong");
            let mut rest = ping.to_vec();
            stream.read_to_end(&mut rest).await.expect("read rest");
            rest
        });
        let (mut client, server) = duplex(1 << 16);
        let port = addr.port();
        let command = async move {
            let head = format!("CONNECT api.example:{port} HTTP/1.1\r\nHost: api.example:{port}\r\n\r\nping");
            client.write_all(head.as_bytes()).await.expect("write");
            let mut reply = [0; CONNECTED.len() + 4];
            client.read_exact(&mut reply).await.expect("read 200 and pong");
            assert_eq!(&reply, b"HTTP/1.1 200 Connection Established\r\n\r\npong");
            client.write_all(b"bye").await.expect("write bye");
            client.shutdown().await.expect("shutdown");
            assert_eq!(client.read(&mut reply).await.expect("read end"), 0);
        };
        let gate = gate(&[("api.example", addr)]);
        let (served, ()) = tokio::join!(serve(server, &gate), command);
        assert_eq!(served.expect("served"), Served::Tunnel { host: "api.example".into(), port, up: 7, down: 4 });
        assert_eq!(host_side.await.expect("host side"), b"pingbye");
    }

    #[tokio::test]
    async fn refused_connect_gets_403_with_the_reason_and_never_reaches_the_host() {
        let (listener, addr) = upstream().await;
        let port = addr.port();
        let (served, reply) = exchange(&gate(&[]), &format!("CONNECT api.example:{port} HTTP/1.1\r\n\r\n")).await;
        let reason = format!("api.example:{port} is not allowed");
        assert_eq!(reply, answer("HTTP/1.1 403 Forbidden", &format!("talaria: {reason}\n")));
        assert_eq!(served.expect("served"), refused("api.example", port, 403, &reason));
        let accepted = std::future::poll_fn(|cx| std::task::Poll::Ready(listener.poll_accept(cx).is_ready())).await;
        assert!(!accepted, "the host was connected to");
    }

    #[tokio::test]
    async fn unresolvable_or_unreachable_host_gets_502() {
        let (served, reply) = exchange(&gate(&[]), "CONNECT nowhere.test:443 HTTP/1.1\r\n\r\n").await;
        assert_eq!(reply, answer("HTTP/1.1 502 Bad Gateway", "talaria: nowhere.test does not resolve\n"));
        assert_eq!(served.expect("served"), refused("nowhere.test", 443, 502, "nowhere.test does not resolve"));

        let (listener, addr) = upstream().await;
        drop(listener);
        let request = format!("GET http://gone.test:{}/ HTTP/1.1\r\n\r\n", addr.port());
        let (served, reply) = exchange(&gate(&[("gone.test", addr)]), &request).await;
        let Ok(Served::Refused { status: 502, reason, .. }) = served else { panic!("{served:?}") };
        assert!(reason.starts_with(&format!("could not connect to gone.test:{} ({addr}): ", addr.port())));
        assert_eq!(reply, answer("HTTP/1.1 502 Bad Gateway", &format!("talaria: {reason}\n")));
    }

    #[tokio::test]
    async fn absolute_form_post_is_sent_in_origin_form_with_its_body() {
        let (listener, addr) = upstream().await;
        let port = addr.port();
        let expected = format!(
            "POST /submit?x=1 HTTP/1.1\r\nHost: api.example:{port}\r\nUser-Agent: test\r\nContent-Length: 5\r\n\
             Connection: close\r\n\r\nhello"
        );
        let response = "HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        let mut received = vec![0; expected.len()];
        let host_side = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            stream.read_exact(&mut received).await.expect("read request");
            stream.write_all(response.as_bytes()).await.expect("write response");
            received
        });
        let request = format!(
            "POST http://api.example:{port}/submit?x=1 HTTP/1.1\r\nHost: elsewhere.example\r\nUser-Agent: test\r\n\
             Proxy-Authorization: Basic dXNlcjpwYXNz\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\n\
             Content-Length: 5\r\n\r\nhello"
        );
        let (served, reply) = exchange(&gate(&[("api.example", addr)]), &request).await;
        assert_eq!(String::from_utf8(host_side.await.expect("host side")).expect("utf-8"), expected);
        assert_eq!(reply, response);
        let (method, up, down) = ("POST".into(), expected.len() as u64, response.len() as u64);
        assert_eq!(served.expect("served"), Served::Forwarded { host: "api.example".into(), port, method, up, down });
    }

    #[tokio::test]
    async fn requests_the_proxy_does_not_carry_get_400_and_injected_headers_stay_out() {
        let gate = gate(&[]);
        for request in [
            "GET / HTTP/1.1\r\nHost: api.example\r\n\r\n",
            "GET https://api.example/ HTTP/1.1\r\n\r\n",
            "GET http:///path HTTP/1.1\r\n\r\n",
            "GET http://api.example:99999/ HTTP/1.1\r\n\r\n",
            "GET http://api.example:+80/ HTTP/1.1\r\n\r\n",
            "GET http://user@api.example/ HTTP/1.1\r\n\r\n",
            "GET http://evil%0d%0aX-Injected:%20yes/ HTTP/1.1\r\n\r\n",
            "CONNECT evil.test%0d%0aX-Injected:%20yes:443 HTTP/1.1\r\n\r\n",
            "CONNECT api.example HTTP/1.1\r\n\r\n",
            "CONNECT api.example:0 HTTP/1.1\r\n\r\n",
            "CONNECT ::1:443 HTTP/1.1\r\n\r\n",
            "CONNECT [::1]x:443 HTTP/1.1\r\n\r\n",
            "CONNECT api.example:443 HTTP/2.0\r\n\r\n",
            "\x16\x03\x01\x02\x00\x01\x00\x01\x03\x03\r\n\r\n",
        ] {
            let (served, reply) = exchange(&gate, request).await;
            let Err(error @ ProxyError::BadRequest(_)) = served else { panic!("{request:?} was served: {served:?}") };
            assert_eq!(reply, answer("HTTP/1.1 400 Bad Request", &format!("talaria: {error}\n")), "{request:?}");
            assert!(reply.ends_with("only carries `CONNECT host:port` and requests for absolute http:// URLs\n"));
        }
        assert_eq!(*gate.1.lock().expect("lock"), []);
        let (served, reply) = exchange(&gate, "CONNECT inject.test:443 HTTP/1.1\r\n\r\n").await;
        assert_eq!(reply, answer("HTTP/1.1 403 Forbidden", "talaria: no  X-Injected: yes\n"));
        assert_eq!(served.expect("served"), refused("inject.test", 443, 403, "no\r\nX-Injected: yes"));
    }

    #[tokio::test]
    async fn oversize_head_gets_431() {
        let request = format!("GET http://api.example/ HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        let (served, reply) = exchange(&gate(&[]), &request).await;
        assert!(matches!(served, Err(ProxyError::HeadTooLarge)), "{served:?}");
        let body = "talaria: the request head is over 16 KiB or 100 headers\n";
        assert_eq!(reply, answer("HTTP/1.1 431 Request Header Fields Too Large", body));
    }

    #[tokio::test]
    async fn the_gate_is_asked_with_a_lower_case_host_without_brackets() {
        let gate = gate(&[]);
        for request in [
            "CONNECT API.Example:443 HTTP/1.1\r\n\r\n",
            "CONNECT [::1]:8443 HTTP/1.1\r\n\r\n",
            "GET HTTP://Web.Example/ HTTP/1.1\r\n\r\n",
            "GET http://[FE80::1]:8080?q HTTP/1.0\r\n\r\n",
        ] {
            let (served, _) = exchange(&gate, request).await;
            assert!(matches!(served, Ok(Served::Refused { status: 403, .. })), "{request:?}: {served:?}");
        }
        let asked = [("api.example", 443), ("::1", 8443), ("web.example", 80), ("fe80::1", 8080)];
        assert_eq!(*gate.1.lock().expect("lock"), asked.map(|(host, port)| (host.to_owned(), port)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unfinished_head_is_closed_unanswered_after_30_seconds() {
        let started = time::Instant::now();
        let (served, reply) = exchange(&gate(&[]), "CONNECT api.example:443 HTTP/1.1\r\n").await;
        assert!(matches!(served, Err(ProxyError::HeadTimeout)), "{served:?}");
        assert_eq!((reply.as_str(), started.elapsed()), ("", HEAD_TIMEOUT));
    }
}
