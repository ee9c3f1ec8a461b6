//! The one wasmtime engine: component model, async, pooling allocator, epoch deadlines.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; a spinning guest overruns its deadline by at most this much.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Largest linear memory any plugin may be given (per-plugin caps are lower).
pub const MAX_MEMORY_BYTES: usize = 1 << 30;

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
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(64)
            .total_core_instances(512)
            .total_memories(128)
            .total_tables(512)
            .max_memory_size(MAX_MEMORY_BYTES)
            .table_elements(200_000)
            .max_core_instances_per_component(64)
            .max_memories_per_component(8)
            .max_tables_per_component(64)
            .max_component_instance_size(4 << 20)
            .max_core_instance_size(4 << 20);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            // Address maps only serve wasm-offset backtraces; without them compiled files are
            // smaller and faster to verify and load.
            .generate_address_map(false)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;

        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let fingerprint = format!("{:016x}", hasher.finish());

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
