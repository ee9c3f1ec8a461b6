//! Plugins' HTTP/1 connections kept open between requests, so that a model plugin's next call
//! or an adapter's next send does not pay a TCP connect (and a TLS handshake) again.
//!
//! A connection is kept for the plugin that opened it, the address it was checked and pinned to,
//! and the name its TLS session was made for: it is only reused for a request of the same plugin
//! that passed the same checks to the same address. Every request is still checked in full
//! before it gets here. A connection idle for [`IDLE_FOR`] is closed; at most [`IDLE_PER_KEY`]
//! are kept for one key.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use hyper::client::conn::http1::SendRequest;
use wasmtime_wasi_http::WasiBody;

/// How long an unused connection is kept: shorter than most servers keep theirs open, so a
/// reused connection is seldom one its server is just closing.
pub(super) const IDLE_FOR: Duration = Duration::from_secs(20);
/// Most connections kept for one key.
const IDLE_PER_KEY: usize = 16;
/// Keys kept before the expired ones are swept out.
const SWEEP_AT: usize = 64;

/// Whose connection it is, and where it goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub plugin: String,
    pub addr: SocketAddr,
    /// The server name of its TLS session; `None`: plain HTTP.
    pub tls: Option<String>,
}

struct Idle {
    sender: SendRequest<WasiBody>,
    since: Instant,
}

impl Idle {
    fn usable(&self) -> bool {
        !self.sender.is_closed() && self.since.elapsed() < IDLE_FOR
    }
}

fn pool() -> std::sync::MutexGuard<'static, HashMap<Key, Vec<Idle>>> {
    static POOL: OnceLock<Mutex<HashMap<Key, Vec<Idle>>>> = OnceLock::new();
    POOL.get_or_init(Mutex::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A kept connection for `key` that is ready for a request now, if there is one. One still busy
/// with its last response's body is left for later.
pub(super) fn take(key: &Key) -> Option<SendRequest<WasiBody>> {
    let mut pool = pool();
    let kept = pool.get_mut(key)?;
    kept.retain(Idle::usable);
    let ready = kept.iter().rposition(|idle| idle.sender.is_ready());
    let taken = ready.map(|at| kept.swap_remove(at).sender);
    if kept.is_empty() {
        pool.remove(key);
    }
    taken
}

/// Keep `sender` for the next request to `key` (once its response is read).
pub(super) fn put(key: Key, sender: SendRequest<WasiBody>) {
    if sender.is_closed() {
        return;
    }
    let mut pool = pool();
    if pool.len() >= SWEEP_AT {
        pool.retain(|_, kept| {
            kept.retain(Idle::usable);
            !kept.is_empty()
        });
    }
    let kept = pool.entry(key).or_default();
    if kept.len() >= IDLE_PER_KEY {
        kept.remove(0);
    }
    kept.push(Idle { sender, since: Instant::now() });
}
