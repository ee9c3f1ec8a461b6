//! A guarded HTTP listener: every HTTP door of talaria (the gateway's webhooks, `mcp serve
//! --http`, and any later one) serves its [`axum::Router`] through [`serve`], so a stranger who
//! opens connections and sends nothing, or a byte at a time, cannot use up the process's files
//! and starve its other work (a gateway's long polls, its store).
//!
//! What [`serve`] enforces, with [`Limits`] (figures from [`Limits::for_process`]):
//! 1. **Headers within [`HEADER_TIMEOUT`]** (10 s), for the first request and for each next one on
//!    a kept-alive connection; then the connection is closed.
//! 2. **Bodies at a minimum rate**: after [`BODY_GRACE`] (10 s) from the first read, a body must
//!    have come at [`MIN_BODY_RATE`] (16 KiB/s) on average, or reading it fails with
//!    [`TooSlow`] (tell it apart with [`too_slow`]; the gateway answers 408).
//! 3. **Connections capped in all and per client address**: a quarter of the process's open-file
//!    limit in all (256 of 1,024; at least 16, at most 4,096), an eighth of that per client
//!    address (an IPv6 /64 counts as one address).
//!    When a new connection finds its address's share, or the whole, taken, the connection
//!    that has waited longest without a request in progress (headers not yet complete, or idle
//!    between requests) is closed to make room: a flood of half-sent headers only ever pushes
//!    out its own kind, and a client that sends a whole request gets in. When every connection
//!    is working on a request, the new one is answered `503 Service Unavailable` with
//!    `Retry-After` and a one-line body, and closed. At most [`REFUSING`] such answers are
//!    written at once (others are closed unanswered), so refusing costs few files too.
//!
//! A door that takes a bearer token checks it with [`auth::Bearer`], which also locks out an
//! address that keeps guessing.
//!
//! The listener itself never holds more than `max_connections + REFUSING` sockets, each
//! reading at most 64 KiB of request head; when `accept` fails for want of files it pauses
//! instead of spinning. What it turned away is logged every 10 s at most, as one warning.
//!
//! # Examples
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8644").await?;
//! let router = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
//! let stop = tokio_util::sync::CancellationToken::new();
//! talaria_listen::serve(listener, router, talaria_listen::Limits::for_process(), stop).await;
//! # Ok(()) }
//! ```

pub mod auth;
mod body;
pub mod limit;
mod table;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use body::{Paced, TooSlow, too_slow};
use table::{Full, Slot, Table};

/// How long a request's headers may take to arrive (and a kept-alive connection may sit idle).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a body may take before [`MIN_BODY_RATE`] applies.
pub const BODY_GRACE: Duration = Duration::from_secs(10);
/// The slowest average rate a body may come at, in bytes a second, once [`BODY_GRACE`] is over.
pub const MIN_BODY_RATE: u64 = 16 * 1024;
/// How many `503` answers are written at once; connections refused beyond that are closed.
pub const REFUSING: usize = 32;
/// What a refused client is told to wait.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);
/// The most a connection's request head may take in memory (hyper's read buffer).
const MAX_HEAD: usize = 64 * 1024;
/// The open-file limit assumed where the process's cannot be read.
const ASSUMED_FILE_LIMIT: u64 = 1024;

/// What a listener allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub header_timeout: Duration,
    pub body_grace: Duration,
    /// Bytes a second, on average, once `body_grace` is over.
    pub min_body_rate: u64,
    /// Connections open at once, in all.
    pub max_connections: usize,
    /// Connections open at once from one client address.
    pub max_per_client: usize,
    pub retry_after: Duration,
}

impl Limits {
    /// The limits for this process: connections from its open-file limit
    /// ([`Limits::for_file_limit`]), the deadlines above.
    pub fn for_process() -> Self {
        Self::for_file_limit(file_limit().unwrap_or(ASSUMED_FILE_LIMIT))
    }

    /// The limits for a process that may open `files` files: a quarter of them as
    /// connections (at least 16, at most 4,096), an eighth of those per client (at least 4).
    pub fn for_file_limit(files: u64) -> Self {
        let total = usize::try_from(files / 4).unwrap_or(usize::MAX).clamp(16, 4096);
        Self {
            header_timeout: HEADER_TIMEOUT,
            body_grace: BODY_GRACE,
            min_body_rate: MIN_BODY_RATE,
            max_connections: total,
            max_per_client: (total / 8).max(4),
            retry_after: RETRY_AFTER,
        }
    }
}

/// The process's soft limit on open files (`RLIMIT_NOFILE`), where the system says (Linux's
/// `/proc/self/limits`); `u64::MAX` when unlimited.
pub fn file_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Max open files"))?;
    match line.split_whitespace().next()? {
        "unlimited" => Some(u64::MAX),
        soft => soft.parse().ok(),
    }
}

/// Serve `router` on `listener` under `limits` until `stop` is cancelled; then take no more
/// connections, let those with a request in progress finish it, and return once all are closed.
pub async fn serve(listener: TcpListener, router: axum::Router, limits: Limits, stop: CancellationToken) {
    let limits = Arc::new(limits);
    let table = Arc::new(Table::new(limits.max_connections, limits.max_per_client));
    let refusing = Arc::new(Semaphore::new(REFUSING));
    let tasks = TaskTracker::new();
    let mut tally = Tally::default();
    let mut every = tokio::time::interval(Tally::EVERY);
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(
            %addr,
            connections = limits.max_connections,
            per_client = limits.max_per_client,
            "HTTP listener: headers within {} s, bodies at {} B/s after {} s",
            limits.header_timeout.as_secs(),
            limits.min_body_rate,
            limits.body_grace.as_secs()
        );
    }
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            _ = every.tick() => {
                tally.report();
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        let (stream, peer): (TcpStream, SocketAddr) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if out_of_files(&e) => {
                tally.out_of_files += 1;
                tally.report();
                // The backlog waits in the kernel; try again once some connection has closed.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(e) => {
                tracing::debug!("accept failed: {e}");
                continue;
            }
        };
        match table.admit(peer.ip()) {
            Ok((slot, evicted)) => {
                tally.evicted += usize::from(evicted);
                tasks.spawn(connection(stream, peer, slot, router.clone(), limits.clone(), stop.clone()));
            }
            Err(full) => {
                tally.refused += 1;
                if let Ok(permit) = refusing.clone().try_acquire_owned() {
                    tasks.spawn(refuse(stream, full, limits.retry_after, permit));
                }
            }
        }
        tally.report();
    }
    tally.report_now();
    tasks.close();
    tasks.wait().await;
}

/// What the listener turned away, told in the log at most every [`Tally::EVERY`].
#[derive(Default)]
struct Tally {
    evicted: usize,
    refused: usize,
    out_of_files: usize,
    since: Option<Instant>,
}

impl Tally {
    const EVERY: Duration = Duration::from_secs(10);

    fn report(&mut self) {
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() >= Self::EVERY {
            self.report_now();
        }
    }

    fn report_now(&mut self) {
        if self.evicted + self.refused + self.out_of_files > 0 {
            tracing::warn!(
                evicted = self.evicted,
                refused = self.refused,
                out_of_files = self.out_of_files,
                "the HTTP listener is full: {} connections that had sent no whole request were closed to make room, {} were answered 503 (every connection busy), accept failed {} times for want of files",
                self.evicted,
                self.refused,
                self.out_of_files
            );
        }
        *self = Self { since: Some(Instant::now()), ..Self::default() };
    }
}

fn out_of_files(e: &std::io::Error) -> bool {
    // EMFILE (24) and ENFILE (23) on Linux and the BSDs.
    matches!(e.raw_os_error(), Some(23 | 24))
}

/// Serve one connection until it closes, is pushed out to make room, or the listener stops.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    slot: Slot,
    router: axum::Router,
    limits: Arc<Limits>,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let evicted = slot.evicted();
    let state = slot.state();
    let (grace, rate) = (limits.body_grace, limits.min_body_rate);
    let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
        let working = table::Working::begin(state.clone());
        let mut request = request.map(|body| Paced::new(body, grace, rate));
        // Who is at the other end, for the handlers (a lockout counts by it): the connection's
        // address, never a header.
        request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        let mut router = router.clone();
        async move {
            let response = tower_service::Service::call(&mut router, request).await;
            // The connection counts as working until its answer is written.
            response.map(|r| r.map(|body| axum::body::Body::new(body::Finish::new(body, working))))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).max_buf_size(MAX_HEAD);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        done = conn.as_mut() => {
            if let Err(e) = done {
                tracing::debug!("an HTTP connection ended: {e}");
            }
        }
        () = evicted.cancelled() => {}
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                _ = conn.as_mut() => {}
                () = evicted.cancelled() => {}
            }
        }
    }
    drop(slot);
}

/// Answer a connection there is no room for with `503` and close it.
async fn refuse(mut stream: TcpStream, full: Full, retry_after: Duration, _permit: OwnedSemaphorePermit) {
    let secs = retry_after.as_secs().max(1);
    let body = format!("busy: {full}; try again in {secs} s\n");
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nretry-after: {secs}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        // Read what the client sent, so closing does not reset the connection before it has
        // read the answer.
        let mut buf = [0u8; 2048];
        while stream.read(&mut buf).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

#[cfg(test)]
mod tests;
