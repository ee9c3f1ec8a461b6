//! The one wasmtime engine (configured by `talaria-engine`: component model, async, pooling
//! allocator, epoch deadlines) and its epoch ticker.
//!
//! A process has one engine, shared by every [`Runtime`](crate::Runtime) it opens (one per
//! workspace), as wasmtime intends: one pool of instances, one epoch thread, one linker of the
//! host's imports. Making it takes a good part of a millisecond, so a front door that will run
//! plugins calls [`start`] first thing and the engine is made while it does the rest of its work.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::Engine;
use wasmtime::component::Linker;

use crate::host::{self, HostState};

/// The engine and the linker holding every host import.
pub(crate) type Shared = (EngineHandle, Linker<HostState>);

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();

/// The process's engine and linker, made on first use.
///
/// # Errors
/// wasmtime rejects the configuration (e.g. the pool cannot reserve address space), in words.
pub(crate) fn shared() -> Result<&'static Shared, &'static str> {
    SHARED
        .get_or_init(|| {
            let engine = EngineHandle::new().map_err(|e| format!("{e:#}"))?;
            let mut linker = Linker::new(&engine.engine);
            host::add_to_linker(&mut linker).map_err(|e| format!("{e:#}"))?;
            Ok((engine, linker))
        })
        .as_ref()
        .map_err(String::as_str)
}

/// Make the engine on a thread of its own, if it is not made yet; whoever needs it meanwhile
/// waits for that work instead of repeating it.
pub fn start() {
    // Front doors call this early and `Host::open` again; one thread makes it.
    static STARTED: AtomicBool = AtomicBool::new(false);
    if SHARED.get().is_some() || STARTED.swap(true, Ordering::Relaxed) {
        return;
    }
    let spawned = std::thread::Builder::new().name("talaria-engine".into()).spawn(|| {
        let _ = shared();
    });
    if let Err(e) = spawned {
        tracing::debug!("the engine is made on first use: no thread to make it now ({e})");
    }
}

/// How often the epoch advances; a spinning guest overruns its deadline by at most this much.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The engine and the thread that advances its epoch (for as long as the process runs: the
/// engine is shared by the whole process and never dropped).
pub struct EngineHandle {
    pub engine: Engine,
    /// Identifies compiled code this engine can load; part of every compile-cache key.
    pub fingerprint: String,
}

impl EngineHandle {
    /// Build the engine and start its epoch ticker.
    ///
    /// # Errors
    /// wasmtime rejects the configuration (e.g. the pool cannot reserve address space).
    fn new() -> wasmtime::Result<Self> {
        let engine = Engine::new(&talaria_engine::config())?;
        let fingerprint = talaria_engine::fingerprint(&engine);
        let ticker = engine.weak();
        std::thread::Builder::new()
            .name("talaria-epoch".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(EPOCH_TICK);
                    match ticker.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| wasmtime::format_err!("cannot start the epoch thread: {e}"))?;
        Ok(Self { engine, fingerprint })
    }

    /// Epoch ticks for a deadline (rounded up, at least one).
    pub fn ticks(deadline: Duration) -> u64 {
        let tick = EPOCH_TICK.as_micros().max(1);
        u64::try_from(deadline.as_micros().div_ceil(tick)).unwrap_or(u64::MAX).max(1)
    }
}
