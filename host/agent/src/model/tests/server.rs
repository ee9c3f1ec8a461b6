//! A tiny HTTP/1.1 server for the adapter tests: one canned response per connection, every
//! request recorded (path, headers, JSON body).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the canned body is delivered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Delivery {
    /// With `Content-Length`.
    Whole,
    /// Without a length, ended by closing the connection (a clean end of the body).
    UntilClose,
    /// `Transfer-Encoding: chunked`, closed before the final chunk (a broken body).
    ChunkedCut,
    /// Headers and body, then nothing: waits for the client to close the connection.
    Hang,
    /// No answer at all, not even a status line: waits for the client to close the connection.
    Never,
}

#[derive(Debug, Clone)]
pub(super) struct Canned {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
    pub(super) delivery: Delivery,
}

impl Canned {
    pub(super) fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
            delivery: Delivery::Whole,
        }
    }

    pub(super) fn text(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "text/html".into())],
            body: body.as_bytes().to_vec(),
            delivery: Delivery::Whole,
        }
    }

    /// `data:` events, each a JSON value or a literal string such as `[DONE]`.
    pub(super) fn sse(events: &[Value]) -> Self {
        let mut body = String::new();
        for event in events {
            let data = match event {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            body.push_str(&format!("data: {data}\n\n"));
        }
        Self::sse_body(body)
    }

    /// Named events (`event:` then `data:`), as Anthropic and Responses send them.
    pub(super) fn named(events: &[Value]) -> Self {
        let mut body = String::new();
        for event in events {
            let name = event.get("type").and_then(Value::as_str).unwrap_or("message");
            body.push_str(&format!("event: {name}\ndata: {event}\n\n"));
        }
        Self::sse_body(body)
    }

    pub(super) fn sse_body(body: String) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: body.into_bytes(),
            delivery: Delivery::Whole,
        }
    }

    pub(super) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub(super) fn delivered(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }
}

#[derive(Debug, Clone)]
pub(super) struct Recorded {
    pub(super) path: String,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Value,
}

impl Recorded {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

pub(super) struct Server {
    pub(super) url: String,
    pub(super) requests: Arc<Mutex<Vec<Recorded>>>,
    /// Set when a `Hang` or `Never` response saw the client close the connection.
    pub(super) client_closed: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    /// Serves `responses` in order, one per connection; afterwards every request gets a 599.
    pub(super) async fn start(responses: Vec<Canned>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let client_closed = Arc::new(AtomicBool::new(false));
        let (recorded, closed) = (requests.clone(), client_closed.clone());
        let task = tokio::spawn(async move {
            let mut responses = responses.into_iter();
            loop {
                let Ok((socket, _)) = listener.accept().await else { return };
                let canned = responses.next().unwrap_or_else(|| Canned::text(599, "no canned response left"));
                serve(socket, canned, &recorded, &closed).await;
            }
        });
        Server { url, requests, client_closed, task }
    }

    pub(super) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("lock").clone()
    }
}

async fn serve(mut socket: TcpStream, canned: Canned, recorded: &Mutex<Vec<Recorded>>, closed: &AtomicBool) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let path = lines.next().and_then(|l| l.split(' ').nth(1)).unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    while buf.len() < head_end + length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
    recorded.lock().expect("lock").push(Recorded { path, headers, body });

    if canned.delivery == Delivery::Never {
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut chunk)).await {
            closed.store(true, Ordering::SeqCst);
        }
        return;
    }
    let mut out = format!("HTTP/1.1 {} Canned\r\nconnection: close\r\n", canned.status);
    for (k, v) in &canned.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    match canned.delivery {
        Delivery::Whole => out.push_str(&format!("content-length: {}\r\n\r\n", canned.body.len())),
        // Announce more than is sent, so the client keeps waiting.
        Delivery::Hang => out.push_str(&format!("content-length: {}\r\n\r\n", canned.body.len() + 1_000_000)),
        Delivery::UntilClose => out.push_str("\r\n"),
        Delivery::Never => {}
        Delivery::ChunkedCut => out.push_str("transfer-encoding: chunked\r\n\r\n"),
    }
    let mut bytes = out.into_bytes();
    if canned.delivery == Delivery::ChunkedCut {
        bytes.extend_from_slice(format!("{:x}\r\n", canned.body.len()).as_bytes());
        bytes.extend_from_slice(&canned.body);
        bytes.extend_from_slice(b"\r\n");
    } else {
        bytes.extend_from_slice(&canned.body);
    }
    if socket.write_all(&bytes).await.is_err() {
        return;
    }
    let _ = socket.flush().await;
    if canned.delivery == Delivery::Hang {
        // The client must close the connection when it gives up.
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut chunk)).await {
            closed.store(true, Ordering::SeqCst);
        }
    }
    let _ = socket.shutdown().await;
}
