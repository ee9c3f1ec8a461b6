//! The one wasmtime engine (configured by `talaria-engine`: component model, async, pooling
//! allocator, epoch deadlines) and its epoch ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::Engine;

/// How often the epoch advances; a spinning guest overruns its deadline by at most this much.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The engine and the thread that advances its epoch.
pub struct EngineHandle {
    pub engine: Engine,
    /// Identifies compiled code this engine can load; part of every compile-cache key.
    pub fingerprint: String,
    stop: Arc<AtomicBool>,
}

impl EngineHandle {
    /// Build the engine and start its epoch ticker.
    ///
    /// # Errors
    /// wasmtime rejects the configuration (e.g. the pool cannot reserve address space).
    pub fn new() -> wasmtime::Result<Self> {
        let engine = Engine::new(&talaria_engine::config())?;
        let fingerprint = talaria_engine::fingerprint(&engine);

        let stop = Arc::new(AtomicBool::new(false));
        let (ticker, flag) = (engine.weak(), stop.clone());
        std::thread::Builder::new()
            .name("talaria-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match ticker.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| wasmtime::format_err!("cannot start the epoch thread: {e}"))?;
        Ok(Self { engine, fingerprint, stop })
    }

    /// Epoch ticks for a deadline (rounded up, at least one).
    pub fn ticks(deadline: Duration) -> u64 {
        let tick = EPOCH_TICK.as_micros().max(1);
        u64::try_from(deadline.as_micros().div_ceil(tick)).unwrap_or(u64::MAX).max(1)
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
