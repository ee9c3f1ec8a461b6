//! What the conversations of one front door keep between turns, together. A conversation that
//! rests ([`crate::Start::rest_after`]) keeps its session's history while messages come
//! quickly, so that each turn need not read it back from the store. Over many chats in full
//! flow that adds up without bound (each history grows with its chat): past a [`Kept`]'s limit,
//! a conversation lets go of its history as soon as its turn is done, and its next turn reads
//! it back.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The limit, and what the conversations sharing it hold now (in bytes, as
/// [`talaria_agent::Agent::held_bytes`] counts them).
#[derive(Debug)]
pub struct Kept {
    held: AtomicUsize,
    limit: usize,
}

impl Kept {
    /// Conversations sharing it hold at most `limit` bytes between turns, together.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self { held: AtomicUsize::new(0), limit })
    }

    /// What its conversations hold now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

/// One conversation's part of a [`Kept`]: given back when it rests or ends.
#[derive(Debug)]
pub(crate) struct Share {
    kept: Arc<Kept>,
    bytes: usize,
}

impl Share {
    pub(crate) fn new(kept: Arc<Kept>) -> Self {
        Self { kept, bytes: 0 }
    }

    /// Hold `bytes` instead of what this share held: whether that fits under the limit. When
    /// it does not, the share holds nothing (its conversation is to rest).
    pub(crate) fn hold(&mut self, bytes: usize) -> bool {
        self.release();
        let total = self.kept.held.fetch_add(bytes, Ordering::SeqCst).saturating_add(bytes);
        if total > self.kept.limit {
            self.kept.held.fetch_sub(bytes, Ordering::SeqCst);
            return false;
        }
        self.bytes = bytes;
        true
    }

    /// Hold nothing.
    pub(crate) fn release(&mut self) {
        self.kept.held.fetch_sub(std::mem::take(&mut self.bytes), Ordering::SeqCst);
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_hold_up_to_the_limit_together_and_give_back_when_they_go() {
        let kept = Kept::new(100);
        let (mut a, mut b) = (Share::new(kept.clone()), Share::new(kept.clone()));
        assert!(a.hold(60));
        assert!(!b.hold(50), "60 + 50 is over the limit");
        assert_eq!(kept.held(), 60, "the refused share holds nothing");
        assert!(a.hold(30), "a share grows or shrinks in place");
        assert!(b.hold(70));
        assert_eq!(kept.held(), 100);
        assert!(!a.hold(31));
        assert_eq!(kept.held(), 70, "refused: it gave back what it held");
        drop(b);
        assert_eq!(kept.held(), 0);
        assert!(a.hold(100));
        a.release();
        assert_eq!(kept.held(), 0);
    }
}
