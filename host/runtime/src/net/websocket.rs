//! WebSockets for plugins (API 0.3.0, `talaria:plugin/websocket`), checked as HTTP requests are:
//! the host must be granted (and, under a wildcard grant, approved), its addresses pass the same
//! internal-address rules and the connection goes to the address checked; `ws://` is refused
//! except to loopback; a known secret value in the URL, a header or a message is refused; and
//! `{{secret:NAME}}` placeholders are filled in only where an HTTP request to that host would
//! get them (the headers the manifest names, and messages only for a secret with
//! `in_messages = true`).

use std::net::IpAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};

use super::{CONNECT_TIMEOUT, Destination, Egress, NetHooks, Refusal, Stream, authorize, fill, tls_config};
use crate::manifest::MESSAGE_PLACE;

/// The largest message a plugin's WebSocket takes.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// The longest a handshake may take after the TCP connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);

/// An open WebSocket and where it goes.
pub(crate) struct Socket {
    stream: WebSocketStream<Box<dyn Stream>>,
    dest: Destination,
    egress: Egress,
}

/// Why a WebSocket call failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WsFailure {
    /// The host refused; the reason is also kept in the call's denials.
    Denied(String),
    Failed(String),
    Closed,
}

/// One message from the peer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    Text(String),
    Binary(Vec<u8>),
    Close(u16, String),
}

impl NetHooks {
    /// What this instance's requests are checked against.
    pub(super) fn egress(&self) -> Egress {
        Egress {
            plugin: self.plugin.clone(),
            grants: self.grants.clone(),
            secrets: self.secrets.clone(),
            secret_headers: self.secret_headers.clone(),
            approvals: self.approvals.clone(),
            caller: self.caller.clone(),
        }
    }

    fn deny(&self, reason: String) -> WsFailure {
        super::record_denial(&self.plugin, &self.denials, reason.clone());
        WsFailure::Denied(reason)
    }

    /// Open a WebSocket to `url` for this plugin.
    pub(crate) async fn open_websocket(&self, url: &str, headers: Vec<(String, String)>) -> Result<Socket, WsFailure> {
        let plugin = self.plugin.clone();
        let carried = |what: &str, name: &str| {
            format!(
                "plugin '{plugin}': a WebSocket to {url} carries the value of the secret {name} in its {what}, which talaria never lets out; it was not opened"
            )
        };
        if let Some(name) = self.scan.find(url) {
            return Err(self.deny(carried("URL", name)));
        }
        if let Some((header, name)) = headers.iter().find_map(|(h, v)| self.scan.find(v).map(|n| (h, n))) {
            return Err(self.deny(carried(&format!("header {header}"), name)));
        }
        let uri: http::Uri = url.parse().map_err(|e| self.deny(format!("`{url}` is not a WebSocket URL ({e})")))?;
        let tls = match uri.scheme_str() {
            Some("wss") => true,
            Some("ws") => false,
            _ => return Err(self.deny(format!("`{url}` is not a WebSocket URL: it must start with wss:// or ws://"))),
        };
        let authority = uri.authority().ok_or_else(|| self.deny(format!("`{url}` names no host")))?;
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let dest = Destination { host, port, tls };
        let loopback = dest.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) || dest.host == "localhost";
        if !tls && !loopback {
            return Err(self.deny(format!(
                "plugin '{}': a WebSocket to {} must use wss:// (plain ws:// only reaches loopback)",
                self.plugin,
                dest.authority()
            )));
        }
        let egress = self.egress();
        let addr = match authorize(&egress, &dest).await {
            Ok(addr) => addr,
            Err(Refusal::Denied(reason)) => return Err(self.deny(reason)),
            Err(Refusal::Dns(message)) => return Err(WsFailure::Failed(format!("could not resolve {message}"))),
        };
        let mut request = url.into_client_request().map_err(|e| WsFailure::Failed(format!("bad request: {e}")))?;
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            let value = if value.contains(super::PLACEHOLDER_OPEN) {
                match fill(&value, &name, &egress, &dest) {
                    Ok(value) => value,
                    Err(reason) => {
                        super::record_denial(&self.plugin, &self.denials, reason);
                        continue;
                    }
                }
            } else {
                value
            };
            let (Ok(name), Ok(value)) =
                (http::HeaderName::from_bytes(name.as_bytes()), http::HeaderValue::from_str(&value))
            else {
                return Err(WsFailure::Failed(format!("header `{name}` is not a valid header")));
            };
            request.headers_mut().insert(name, value);
        }
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| WsFailure::Failed(format!("connecting to {} timed out", dest.authority())))?
            .map_err(|e| WsFailure::Failed(format!("connecting to {}: {e}", dest.authority())))?;
        let stream: Box<dyn Stream> = if tls {
            let name = match dest.host.parse::<IpAddr>() {
                Ok(ip) => rustls::pki_types::ServerName::from(ip),
                Err(_) => rustls::pki_types::ServerName::try_from(dest.host.clone())
                    .map_err(|e| WsFailure::Failed(format!("{}: {e}", dest.host)))?,
            };
            let tls = tokio_rustls::TlsConnector::from(tls_config())
                .connect(name, tcp)
                .await
                .map_err(|e| WsFailure::Failed(format!("TLS with {}: {e}", dest.authority())))?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        let config = WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE)).max_frame_size(Some(MAX_MESSAGE));
        let (stream, _) = tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            tokio_tungstenite::client_async_with_config(request, stream, Some(config)),
        )
        .await
        .map_err(|_| WsFailure::Failed(format!("the WebSocket handshake with {} timed out", dest.authority())))?
        .map_err(|e| WsFailure::Failed(format!("the WebSocket handshake with {} failed: {e}", dest.authority())))?;
        Ok(Socket { stream, dest, egress })
    }
}

impl Socket {
    /// Send a text message, its secret placeholders filled in where they may go.
    pub(crate) async fn send_text(&mut self, hooks: &NetHooks, text: String) -> Result<(), WsFailure> {
        if let Some(name) = hooks.scan.find(&text) {
            return Err(hooks.deny(format!(
                "plugin '{}': a WebSocket message to {} carries the value of the secret {name}, which talaria never lets out; it was not sent",
                hooks.plugin,
                self.dest.authority()
            )));
        }
        let text = if text.contains(super::PLACEHOLDER_OPEN) {
            fill(&text, MESSAGE_PLACE, &self.egress, &self.dest).map_err(|reason| hooks.deny(reason))?
        } else {
            text
        };
        self.stream.send(Message::text(text)).await.map_err(failure)
    }

    /// The next message, waiting at most `timeout`.
    pub(crate) async fn receive(&mut self, timeout: Duration) -> Result<Option<Frame>, WsFailure> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let next = match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Err(_) => return Ok(None),
                Ok(None) => return Err(WsFailure::Closed),
                Ok(Some(next)) => next.map_err(failure)?,
            };
            match next {
                Message::Text(text) => return Ok(Some(Frame::Text(text.to_string()))),
                Message::Binary(bytes) => return Ok(Some(Frame::Binary(bytes.to_vec()))),
                Message::Close(close) => {
                    let (code, reason) = close.map_or((1005, String::new()), |c| (c.code.into(), c.reason.to_string()));
                    return Ok(Some(Frame::Close(code, reason)));
                }
                // Pings are answered by tungstenite itself; pongs and raw frames mean nothing here.
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
    }

    /// Close the connection, politely.
    pub(crate) async fn close(&mut self, code: u16, reason: String) {
        let frame = tungstenite::protocol::CloseFrame { code: code.into(), reason: reason.into() };
        let _ = tokio::time::timeout(Duration::from_secs(2), self.stream.close(Some(frame))).await;
    }
}

fn failure(e: tungstenite::Error) -> WsFailure {
    match e {
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => WsFailure::Closed,
        other => WsFailure::Failed(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::approval::{Approvals, Caller, Unattended};
    use crate::grant::Grants;
    use crate::leak::SecretScan;
    use crate::manifest::Manifest;
    use crate::secrets::Secrets;

    /// The network hooks of plugin `p` with this `[capabilities]` body, all of it granted.
    fn hooks(capabilities: &str) -> NetHooks {
        let text = format!(
            "name = \"p\"\nversion = \"1.0.0\"\napi = \"0.3.0\"\nkind = [\"platform\"]\n[capabilities]\n{capabilities}"
        );
        let manifest = Manifest::parse(&text, "plugin.toml".as_ref()).expect("manifest");
        NetHooks {
            plugin: "p".into(),
            grants: Arc::new(Grants::effective(&manifest.requests, manifest.requests.clone())),
            secrets: Arc::new(Secrets::from_pairs([("TOKEN", "tok-s3cret-value")])),
            secret_headers: Arc::new(manifest.secret_headers),
            approvals: Arc::new(Approvals::new(Arc::new(Unattended { yolo: false }), &[])),
            caller: Caller::default(),
            denials: Arc::new(Mutex::new(Vec::new())),
            requests: 0,
            recorder: None,
            stubs: None,
            scan: Arc::new(SecretScan::new([("TOKEN".to_string(), "tok-s3cret-value".to_string())])),
        }
    }

    fn refused(result: Result<Socket, WsFailure>) -> String {
        match result {
            Err(WsFailure::Denied(why)) => why,
            Err(other) => panic!("not refused by the host: {other:?}"),
            Ok(_) => panic!("opened"),
        }
    }

    #[tokio::test]
    async fn a_websocket_goes_only_where_http_may_and_never_carries_a_secret_value() {
        let h = hooks("network = [\"gateway.example.com\"]");
        let why = refused(h.open_websocket("wss://evil.example.net/socket", Vec::new()).await);
        assert!(why.starts_with("plugin 'p' has no network grant for evil.example.net:443"), "{why}");
        let why = refused(h.open_websocket("ws://gateway.example.com/socket", Vec::new()).await);
        assert_eq!(
            why,
            "plugin 'p': a WebSocket to gateway.example.com:80 must use wss:// (plain ws:// only reaches loopback)"
        );
        let why = refused(h.open_websocket("https://gateway.example.com/", Vec::new()).await);
        assert!(why.ends_with("it must start with wss:// or ws://"), "{why}");
        let why = refused(h.open_websocket("wss://gateway.example.com/?t=tok-s3cret-value", Vec::new()).await);
        assert!(why.contains("carries the value of the secret TOKEN in its URL"), "{why}");
        let headers = vec![("x-auth".to_string(), "tok-s3cret-value".to_string())];
        let why = refused(h.open_websocket("wss://gateway.example.com/", headers).await);
        assert!(why.contains("in its header x-auth"), "{why}");
        // Loopback is internal: a grant of a name does not reach it, whatever the name resolves to.
        let why = refused(h.open_websocket("ws://127.0.0.1:9/", Vec::new()).await);
        assert!(why.starts_with("plugin 'p' has no network grant for 127.0.0.1:9"), "{why}");
        assert_eq!(h.denials.lock().expect("denials").len(), 6, "every refusal is kept for the operator");
    }

    #[tokio::test]
    async fn a_secret_goes_into_websocket_messages_only_when_its_manifest_says_so() {
        // A plain loopback WebSocket server that reads one message and says what it got.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..2 {
                let (tcp, _) = listener.accept().await.expect("accept");
                let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("handshake");
                if let Some(Ok(Message::Text(text))) = ws.next().await {
                    got.push(text.to_string());
                }
            }
            got
        });
        let placeholder = "{\"token\": \"{{secret:TOKEN}}\"}".to_string();
        for (in_messages, expected) in [(false, None), (true, Some("{\"token\": \"tok-s3cret-value\"}"))] {
            let caps = format!(
                "network = [\"127.0.0.1:{port}\"]\nsecrets = [{{ name = \"TOKEN\", host = \"127.0.0.1:{port}\", in_messages = {in_messages} }}]"
            );
            let h = hooks(&caps);
            let mut socket = h.open_websocket(&format!("ws://127.0.0.1:{port}/"), Vec::new()).await.expect("open");
            let sent = socket.send_text(&h, placeholder.clone()).await;
            match expected {
                None => {
                    let Err(WsFailure::Denied(why)) = sent else { panic!("sent: {sent:?}") };
                    assert_eq!(
                        why,
                        "secret TOKEN may only be sent in header authorization, header x-api-key, not WebSocket messages"
                    );
                    socket.send_text(&h, "nothing secret".into()).await.expect("sent");
                }
                Some(_) => sent.expect("sent"),
            }
            socket.close(1000, String::new()).await;
        }
        let got = server.await.expect("server");
        assert_eq!(got, ["nothing secret", "{\"token\": \"tok-s3cret-value\"}"]);
    }
}
