//! The open connections, by client address: who is let in, and who makes room.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

/// Why a connection was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Full {
    #[error("all {0} connections are working on requests")]
    Total(usize),
    #[error("{1} connections from {0} are working on requests already")]
    Client(IpAddr, usize),
}

/// One connection's state, as the table sees it.
#[derive(Debug)]
pub(crate) struct State {
    /// A request is in progress (its headers came, its answer is not written yet).
    working: AtomicBool,
    /// Since when it has had no request in progress.
    idle_since: Mutex<Instant>,
}

/// Marks a connection as working on a request until dropped.
pub(crate) struct Working(Arc<State>);

impl Working {
    pub(crate) fn begin(state: Arc<State>) -> Self {
        state.working.store(true, Ordering::SeqCst);
        Self(state)
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        *lock(&self.0.idle_since) = Instant::now();
        self.0.working.store(false, Ordering::SeqCst);
    }
}

struct Entry {
    ip: IpAddr,
    state: Arc<State>,
    evict: CancellationToken,
}

#[derive(Default)]
struct Open {
    next: u64,
    conns: HashMap<u64, Entry>,
}

impl Open {
    /// The connection with no request in progress that has been idle longest, among those
    /// from `ip` (or all).
    fn longest_idle(&self, ip: Option<IpAddr>) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, e)| ip.is_none_or(|ip| e.ip == ip) && !e.state.working.load(Ordering::SeqCst))
            .min_by_key(|(_, e)| *lock(&e.state.idle_since))
            .map(|(id, _)| *id)
    }

    fn evict(&mut self, id: u64) {
        if let Some(entry) = self.conns.remove(&id) {
            entry.evict.cancel();
        }
    }
}

/// The open connections.
pub(crate) struct Table {
    open: Mutex<Open>,
    total: usize,
    per_client: usize,
}

/// A connection's place in the table, given up when dropped.
pub(crate) struct Slot {
    table: Arc<Table>,
    id: u64,
    state: Arc<State>,
    evict: CancellationToken,
}

impl Slot {
    /// Cancelled when the connection is pushed out to make room.
    pub(crate) fn evicted(&self) -> CancellationToken {
        self.evict.clone()
    }

    pub(crate) fn state(&self) -> Arc<State> {
        self.state.clone()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.table.open).conns.remove(&self.id);
    }
}

impl Table {
    pub(crate) fn new(total: usize, per_client: usize) -> Self {
        Self { open: Mutex::default(), total: total.max(1), per_client: per_client.max(1) }
    }

    /// Let a connection from `ip` in, pushing out the longest idle one (its address's, when
    /// the address has its share; anyone's, when the table is full); whether one was pushed out.
    ///
    /// # Errors
    /// Every connection that would have to make room is working on a request.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<(Slot, bool), Full> {
        let ip = client(ip);
        let mut open = lock(&self.open);
        let mut evicted = false;
        if open.conns.values().filter(|e| e.ip == ip).count() >= self.per_client {
            let id = open.longest_idle(Some(ip)).ok_or(Full::Client(ip, self.per_client))?;
            open.evict(id);
            evicted = true;
        } else if open.conns.len() >= self.total {
            let id = open.longest_idle(None).ok_or(Full::Total(self.total))?;
            open.evict(id);
            evicted = true;
        }
        let id = open.next;
        open.next += 1;
        let state = Arc::new(State { working: AtomicBool::new(false), idle_since: Mutex::new(Instant::now()) });
        let evict = CancellationToken::new();
        open.conns.insert(id, Entry { ip, state: state.clone(), evict: evict.clone() });
        Ok((Slot { table: self.clone(), id, state, evict }, evicted))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.open).conns.len()
    }
}

/// The client an address counts as: an IPv4 address (also when mapped into IPv6), or an IPv6
/// address's /64 network (what one subscriber is usually given), written with zeros after it.
pub(crate) fn client(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_network_counts_as_one_client_and_a_mapped_ipv4_as_itself() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(client(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(client(ip("2001:db8:1:2:bbbb::9")), ip("2001:db8:1:2::"));
        assert_ne!(client(ip("2001:db8:1:3::1")), ip("2001:db8:1:2::"));
        assert_eq!(client(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        let table = Arc::new(Table::new(8, 1));
        let (first, _) = table.admit(ip("2001:db8::1")).expect("room");
        let _working = Working::begin(first.state());
        assert_eq!(table.admit(ip("2001:db8::2")).err(), Some(Full::Client(ip("2001:db8::"), 1)));
        assert!(table.admit(ip("2001:db8:0:1::2")).is_ok());
    }
}
