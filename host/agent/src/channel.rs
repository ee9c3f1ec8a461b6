//! An unbounded channel that costs next to nothing while it is empty. Tokio's keeps a block of
//! 32 slots from the moment it is made (about 6 KiB for a stream of events); a gateway holding
//! thousands of conversations that wait for their next message, three channels each, would pay
//! that for every one. This one allocates per message instead.

use futures_util::StreamExt as _;

/// The sending end; cheap to clone.
#[derive(Debug)]
pub struct Sender<T>(futures_channel::mpsc::UnboundedSender<T>);

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Sender<T> {
    /// Queue `value`; it comes back when the receiving end is gone.
    ///
    /// # Errors
    /// The receiver was dropped.
    pub fn send(&self, value: T) -> Result<(), T> {
        self.0.unbounded_send(value).map_err(futures_channel::mpsc::TrySendError::into_inner)
    }
}

/// The receiving end.
#[derive(Debug)]
pub struct Receiver<T>(futures_channel::mpsc::UnboundedReceiver<T>);

impl<T> Receiver<T> {
    /// The next value; `None` once every sender is gone and everything was read. Cancel-safe:
    /// a `select!` that drops it loses nothing.
    pub async fn recv(&mut self) -> Option<T> {
        self.0.next().await
    }

    /// The next value if one is waiting.
    pub fn try_recv(&mut self) -> Option<T> {
        self.0.try_recv().ok()
    }
}

/// A new channel.
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    let (tx, rx) = futures_channel::mpsc::unbounded();
    (Sender(tx), Receiver(rx))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn values_come_in_order_and_the_end_is_told() {
        let (tx, mut rx) = super::unbounded();
        tx.send(1).expect("open");
        tx.clone().send(2).expect("open");
        assert_eq!(rx.try_recv(), Some(1));
        assert_eq!(rx.recv().await, Some(2));
        assert_eq!(rx.try_recv(), None);
        drop(tx);
        assert_eq!(rx.recv().await, None);
        let (tx, rx) = super::unbounded();
        drop(rx);
        assert_eq!(tx.send("lost"), Err("lost"), "a value nobody can read comes back");
    }
}
