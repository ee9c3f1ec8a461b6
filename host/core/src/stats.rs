//! What each turn took, kept in the store's `turns` ([`talaria_store::turns`]) for the usage
//! and latency charts. Turns are kept in batches, a second apart at most, so a busy gateway
//! does not pay a transaction per turn for them; a conversation that closes keeps its turns at
//! once (a one-shot `chat -q` loses none). A process killed mid-second loses that second's
//! figures, never a turn.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use talaria_store::Store;
use talaria_store::turns::TurnStat;

/// How long a turn's figures may wait to be kept.
const EVERY: Duration = Duration::from_secs(1);

/// The turns waiting to be kept, and the store they go to.
pub(crate) struct Recorder {
    store: Arc<Store>,
    pending: Mutex<Vec<TurnStat>>,
    started: std::sync::atomic::AtomicBool,
}

impl Recorder {
    pub(crate) fn new(store: Arc<Store>) -> Arc<Self> {
        Arc::new(Self { store, pending: Mutex::default(), started: false.into() })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<TurnStat>> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keep `stat` with the next batch (the first starts the batches' task).
    pub(crate) fn record(self: &Arc<Self>, stat: TurnStat) {
        self.pending().push(stat);
        if !self.started.swap(true, std::sync::atomic::Ordering::Relaxed) {
            let recorder = Arc::downgrade(self);
            tokio::spawn(keep(recorder));
        }
    }

    /// Keep what waits now.
    pub(crate) async fn flush(&self) {
        let batch = std::mem::take(&mut *self.pending());
        if batch.is_empty() {
            return;
        }
        if let Err(e) = self.store.record_turns(&batch).await {
            tracing::warn!(turns = batch.len(), "the turns' figures could not be kept: {e}");
        }
    }
}

/// Keep the batches, a second apart, while the recorder lives.
async fn keep(recorder: Weak<Recorder>) {
    loop {
        tokio::time::sleep(EVERY).await;
        let Some(recorder) = recorder.upgrade() else { return };
        recorder.flush().await;
    }
}
