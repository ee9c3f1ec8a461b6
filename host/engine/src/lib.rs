//! The one wasmtime [`Config`] talaria compiles and runs components with.
//!
//! The runtime builds its engine from [`config`]; the bundled plugins' build script builds an
//! engine from the same function to precompile them, so a fresh install loads them without
//! compiling. Compiled code only loads into an engine whose configuration (and wasmtime version
//! and CPU features) matches; wasmtime checks that on every load, and a mismatch is a refusal,
//! never a crash, so a precompiled component that does not fit is simply compiled again.

pub use wasmtime;
use wasmtime::{Config, Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Largest linear memory any plugin may be given (per-plugin caps are lower).
pub const MAX_MEMORY_BYTES: usize = 1 << 30;

/// Component instances alive at once in one engine (fresh per call, plus resident memory
/// providers).
pub const MAX_INSTANCES: u32 = 64;

/// How much of a linear memory's slot stays mapped after its instance is gone (see [`config`]).
pub const KEEP_RESIDENT_BYTES: usize = 2 << 20;

/// Component model, async, epoch deadlines, the pooling allocator.
pub fn config() -> Config {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(MAX_INSTANCES)
        // One fiber stack per call in flight, and no call runs without its instance: more
        // stacks than instances would never be used, and each one costs every process that
        // starts a guard-page mapping at start and an unmapping at exit.
        .total_stacks(MAX_INSTANCES)
        .total_core_instances(512)
        .total_memories(128)
        .total_tables(512)
        .max_memory_size(MAX_MEMORY_BYTES)
        .table_elements(200_000)
        .max_core_instances_per_component(64)
        .max_memories_per_component(8)
        .max_tables_per_component(64)
        .max_component_instance_size(4 << 20)
        .max_core_instance_size(4 << 20)
        // Every call gets a new instance, but its slot in the pool is used again (by the same
        // plugin when it can): the pages a call touched are reset in place (copied back from
        // the plugin's initial memory, or zeroed) rather than unmapped and faulted in again by
        // the next call, a few microseconds each. PAGEMAP_SCAN (Linux 6.7+) finds them wherever
        // they are (a guest's stack sits near the top of its first megabyte); without it, the
        // lowest bytes are reset. At most this much stays resident per slot in use.
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(64 << 10)
        .pagemap_scan(Enabled::Auto);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        // Address maps only serve wasm-offset backtraces; without them compiled files are
        // smaller and faster to verify and load.
        .generate_address_map(false)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .with_custom_code_memory(Some(std::sync::Arc::new(InPlace)));
    config
}

/// Makes compiled code executable where it lies, as wasmtime does for code it mapped itself,
/// and also for code it did not map: the bundled plugins' code, run from the pages of the
/// binary that holds it (`Component::deserialize_raw`) instead of copied out first. The code
/// is never writable while executable (W^X): wasmtime made its own mappings read-only before
/// asking, and the binary's are read-only already. One hardening is left out: on aarch64,
/// wasmtime's own path would also mark code compiled with branch-target landing pads as
/// guarded (`PROT_BTI`); these pages run unguarded there.
///
/// Unpublishing changes nothing. wasmtime unpublishes a component's code when it drops it,
/// and the binary's pages are shared: every engine and runtime in the process that loads a
/// bundled plugin runs the same pages, so taking their execute right away would crash the
/// others (a test binary runs many runtimes at once; a long-running process makes a new one
/// when plugins change). wasmtime's own mappings are unmapped right after; talaria never edits
/// published code.
struct InPlace;

impl InPlace {
    fn protect(ptr: *const u8, len: usize, prot: libc::c_int) -> wasmtime::Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: wasmtime passes the page-aligned text range of a code image it holds (its
        // own mapping, or a static the caller promised outlives the code); making it readable
        // and executable touches no other memory and takes no right away from anyone.
        #[allow(unsafe_code)]
        let done = unsafe { libc::mprotect(ptr.cast_mut().cast(), len, prot) };
        if done == 0 { Ok(()) } else { Err(std::io::Error::last_os_error().into()) }
    }
}

impl wasmtime::CustomCodeMemory for InPlace {
    fn required_alignment(&self) -> usize {
        page_size()
    }

    fn publish_executable(&self, ptr: *const u8, len: usize) -> wasmtime::Result<()> {
        Self::protect(ptr, len, libc::PROT_READ | libc::PROT_EXEC)
    }

    fn unpublish_executable(&self, _ptr: *const u8, _len: usize) -> wasmtime::Result<()> {
        Ok(())
    }
}

/// The system's page size: the granularity at which compiled code is made executable.
pub fn page_size() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        // SAFETY: sysconf reads a constant of the system.
        #[allow(unsafe_code)]
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(4096)
    })
}

/// Identifies compiled code an engine of [`config`] can load: equal for engines that accept
/// the same compiled code.
pub fn fingerprint(engine: &wasmtime::Engine) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}
