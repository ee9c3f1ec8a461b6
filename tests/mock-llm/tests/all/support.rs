//! A raw HTTP/1.1 client over `TcpStream` and an SSE splitter, so the tests see the bytes the
//! mock sends rather than what a client library makes of them.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A response as it came off the wire.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The body ended properly (content length reached, or the terminating chunk seen).
    pub complete: bool,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }

    /// The server-sent events, checked for shape: every event is `event:` (optional) then one
    /// `data:` line.
    pub fn events(&self) -> Vec<Event> {
        assert_eq!(self.header("content-type"), Some("text/event-stream"), "{self:?}");
        sse(&self.body)
    }
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("event data is not JSON ({e}): {}", self.data))
    }
}

pub fn sse(body: &str) -> Vec<Event> {
    assert!(body.is_empty() || body.ends_with("\n\n"), "a stream ends with a blank line: {body:?}");
    body.split("\n\n")
        .filter(|block| !block.is_empty())
        .map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    assert!(name.is_none() && data.is_empty(), "event: comes first, once: {block:?}");
                    name = Some(n.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push(d);
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            assert_eq!(data.len(), 1, "one data line per event: {block:?}");
            Event { name, data: data[0].to_owned() }
        })
        .collect()
}

/// Send a request; `Connection: close` so the response ends with the connection.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect to the mock");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("set a read timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("send the head");
    stream.write_all(body.as_bytes()).expect("send the body");
    stream
}

/// POST `body` and read the whole response.
pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Raw {
    read_response(request(addr, "POST", path, &body.to_string()))
}

pub fn read_response(mut stream: TcpStream) -> Raw {
    let mut bytes = Vec::new();
    let mut buf = [0; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
        }
    }
    parse(&bytes)
}

fn parse(bytes: &[u8]) -> Raw {
    let text = String::from_utf8_lossy(bytes);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no response head in {text:?}"));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let (body, complete) = if chunked {
        dechunk(rest)
    } else {
        let length: Option<usize> =
            headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok());
        (rest.to_owned(), length == Some(rest.len()))
    };
    Raw { status, headers, body, complete }
}

/// The data of a chunked body, and whether the last (empty) chunk arrived.
fn dechunk(mut rest: &str) -> (String, bool) {
    let mut body = String::new();
    loop {
        let Some((size, after)) = rest.split_once("\r\n") else { return (body, false) };
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { return (body, false) };
        if size == 0 {
            return (body, after == "\r\n");
        }
        let Some(chunk) = after.get(..size) else {
            body.push_str(after);
            return (body, false);
        };
        body.push_str(chunk);
        rest = after.get(size + 2..).unwrap_or_default();
    }
}

/// Wait until `check` holds, for up to five seconds.
pub fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
