//! The listener against raw TCP clients: what each limit does to them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::*;

fn limits(total: usize, per_client: usize) -> Limits {
    Limits {
        header_timeout: Duration::from_millis(500),
        body_grace: Duration::from_millis(300),
        min_body_rate: 1000,
        max_connections: total,
        max_per_client: per_client,
        retry_after: Duration::from_secs(5),
    }
}

/// A router: `/` answers at once, `/wait` once `gate` is notified, `/body` reads its body
/// (408 when it came too slowly).
fn router(gate: Arc<Notify>) -> axum::Router {
    axum::Router::new()
        .route("/", axum::routing::any(|| async { "hello" }))
        .route(
            "/wait",
            axum::routing::any(move || {
                let gate = gate.clone();
                async move {
                    gate.notified().await;
                    "released"
                }
            }),
        )
        .route(
            "/body",
            axum::routing::post(|body: Body| async move {
                match body.collect().await {
                    Ok(b) => (StatusCode::OK, format!("{} bytes", b.to_bytes().len())),
                    Err(e) if too_slow(&e) => (StatusCode::REQUEST_TIMEOUT, e.to_string()),
                    Err(e) => (StatusCode::BAD_REQUEST, e.to_string()),
                }
            }),
        )
}

async fn start(limits: Limits, gate: Arc<Notify>) -> (SocketAddr, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    tokio::spawn(serve(listener, router(gate), limits, stop.clone()));
    (addr, stop)
}

/// Send `request` on a new connection and read the whole answer (the connection is closed).
async fn exchange(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await.expect("answered").expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
}

/// Whether the server closes `s` within `within` (EOF or reset), having sent nothing or
/// anything.
async fn closed(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// A connection that has sent half its headers.
async fn half_sent(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.expect("write");
    s
}

#[test]
fn the_limits_follow_the_file_limit() {
    let at = |files| {
        let l = Limits::for_file_limit(files);
        (l.max_connections, l.max_per_client)
    };
    assert_eq!(at(1024), (256, 32));
    assert_eq!(at(20_000), (4096, 512));
    assert_eq!(at(40), (16, 4));
    let l = Limits::for_process();
    assert_eq!((l.header_timeout, l.min_body_rate), (Duration::from_secs(10), 16 * 1024));
    if let Some(files) = file_limit() {
        assert_eq!(l.max_connections, Limits::for_file_limit(files).max_connections);
    }
}

#[tokio::test]
async fn headers_that_do_not_come_in_time_close_the_connection() {
    let (addr, _stop) = start(limits(8, 8), Arc::default()).await;
    let mut slow = half_sent(addr).await;
    let start = Instant::now();
    assert!(closed(&mut slow, Duration::from_secs(3)).await, "a half-sent request was kept open");
    assert!(start.elapsed() >= Duration::from_millis(400), "closed before the deadline: {:?}", start.elapsed());
    assert!(exchange(addr, &get("/")).await.ends_with("hello"));
}

#[tokio::test]
async fn a_whole_request_pushes_out_the_longest_waiting_half_sent_one() {
    let (addr, _stop) = start(limits(4, 4), Arc::default()).await;
    let mut slow = Vec::new();
    for _ in 0..4 {
        slow.push(half_sent(addr).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answer = exchange(addr, &get("/")).await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("hello"), "{answer}");
    assert!(closed(&mut slow[0], Duration::from_millis(300)).await, "the oldest half-sent request stayed");
    for s in &mut slow[1..] {
        assert!(!closed(s, Duration::from_millis(50)).await, "a younger one was closed");
    }
}

#[tokio::test]
async fn when_every_connection_works_a_new_one_gets_503_with_retry_after() {
    let gate = Arc::new(Notify::new());
    let (addr, _stop) = start(limits(2, 8), gate.clone()).await;
    let working: Vec<_> = (0..2)
        .map(|_| {
            let request = get("/wait");
            tokio::spawn(async move { exchange(addr, &request).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = exchange(addr, &get("/")).await;
    assert!(answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{answer}");
    assert!(answer.contains("retry-after: 5\r\n"), "{answer}");
    assert!(answer.ends_with("busy: all 2 connections are working on requests; try again in 5 s\n"), "{answer}");
    gate.notify_waiters();
    for w in working {
        assert!(w.await.expect("join").ends_with("released"));
    }
    // Room again.
    assert!(exchange(addr, &get("/")).await.ends_with("hello"));
}

#[tokio::test]
async fn one_address_cannot_take_more_than_its_share() {
    let gate = Arc::new(Notify::new());
    let (addr, _stop) = start(limits(16, 2), gate.clone()).await;
    let working: Vec<_> = (0..2)
        .map(|_| {
            let request = get("/wait");
            tokio::spawn(async move { exchange(addr, &request).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = exchange(addr, &get("/")).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("2 connections from 127.0.0.1 are working on requests already"), "{answer}");
    gate.notify_waiters();
    for w in working {
        w.await.expect("join");
    }
}

#[tokio::test]
async fn a_body_slower_than_the_minimum_rate_fails_and_a_paced_one_passes() {
    let (addr, _stop) = start(limits(8, 8), Arc::default()).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789").await.expect("write");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(read.is_ok(), "a stalled body was waited for: {answer}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("the body came too slowly: 10 bytes in 0 s"), "{answer}");

    // 2,000 bytes at 1,000 a second after the grace: within the rate.
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"POST /body HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2000\r\n\r\n")
        .await
        .expect("w");
    for _ in 0..10 {
        s.write_all(&[b'x'; 200]).await.expect("write");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.expect("read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("2000 bytes"), "{answer}");
}

#[tokio::test]
async fn stopping_closes_idle_connections_and_returns() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let served = tokio::spawn(serve(listener, router(Arc::default()), limits(8, 8), stop.clone()));
    let mut slow = half_sent(addr).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(2), served).await.expect("serve returned").expect("join");
    assert!(closed(&mut slow, Duration::from_millis(200)).await);
}

#[test]
fn the_table_frees_a_place_when_a_slot_is_dropped() {
    let table = Arc::new(Table::new(1, 1));
    let ip = "127.0.0.1".parse().expect("ip");
    let (slot, _) = table.admit(ip).expect("room");
    let _working = table::Working::begin(slot.state());
    assert_eq!(table.admit(ip).err(), Some(Full::Client(ip, 1)));
    drop(slot);
    assert_eq!(table.len(), 0);
    assert!(table.admit(ip).is_ok());
}
