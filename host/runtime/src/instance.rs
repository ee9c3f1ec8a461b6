//! Running a plugin's exports within its limits: a fresh instance per call, or a memory
//! provider's resident instance. Every call gets its own epoch deadline (the guest is stopped
//! at it), an outer deadline (for a call stuck in a host import), and fresh per-call counts;
//! every way it can go wrong becomes a [`Failure`] that names what happened.

use std::sync::Arc;
use std::time::{Duration, Instant};

use talaria_protocol::ToolError;
use wasmtime::component::{Instance, InstancePre};
use wasmtime::{Store, Trap};

use crate::engine::EngineHandle;
use crate::host::api::GuestError;
use crate::host::{HostState, PluginEnv, Site};
use talaria_protocol::PluginError;

/// Limits for one call, after the host's caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    pub memory_bytes: usize,
    pub timeout: Duration,
    pub output_bytes: usize,
}

/// Extra time the host gives a call beyond its deadline before abandoning it from outside
/// (the epoch trap normally fires first; this catches a call stuck in a host import).
const OUTSIDE_GRACE: Duration = Duration::from_millis(150);

/// Longest error message a plugin may hand on.
pub(crate) const MAX_ERROR_CHARS: usize = 16 * 1024;

/// Why a call produced nothing.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The plugin returned an error; `denials` are the requests refused during the call.
    Guest { error: GuestError, denials: Vec<String> },
    /// Stopped at its deadline, by the epoch trap (`trapped`) or from outside.
    Deadline { elapsed: Duration, trapped: bool },
    /// Trapped, panicked or hit its memory cap: what happened, to follow "plugin 'NAME' ".
    Crashed(String),
}

/// A successful call's value and the requests refused during it.
pub(crate) type Done<T> = (T, Vec<String>);

impl Failure {
    /// As a tool call's error.
    pub fn into_tool_error(self, name: &str, limits: CallLimits) -> ToolError {
        let secs = limits.timeout.as_secs_f32();
        match self {
            Failure::Guest { error, denials } => map_guest_error(error, &denials),
            Failure::Deadline { elapsed, trapped: true } => ToolError::Crashed(format!(
                "plugin '{name}' exceeded its {secs}s deadline and was stopped after {:.2}s",
                elapsed.as_secs_f32()
            )),
            Failure::Deadline { trapped: false, .. } => ToolError::Crashed(format!(
                "plugin '{name}' did not finish within its {secs}s deadline and was stopped"
            )),
            Failure::Crashed(what) => ToolError::Crashed(format!("plugin '{name}' {what}")),
        }
    }

    /// As the error of the other kinds: `who` is e.g. "hook plugin 'guard'".
    pub fn into_plugin_error(self, who: &str, limits: CallLimits) -> PluginError {
        match self {
            Failure::Guest { error, denials } => {
                let (GuestError::InvalidArgs(m) | GuestError::UnknownTool(m) | GuestError::Failed(m)) = error;
                let host = if denials.is_empty() { String::new() } else { format!(" [host: {}]", denials.join("; ")) };
                PluginError::Failed(format!("{who} failed: {}{host}", clip(m, MAX_ERROR_CHARS)))
            }
            Failure::Deadline { elapsed, .. } => PluginError::TimedOut(format!(
                "{who} did not answer within {}s and was stopped after {:.2}s",
                limits.timeout.as_secs_f32(),
                elapsed.as_secs_f32()
            )),
            Failure::Crashed(what) => PluginError::Crashed(format!("{who} {what}")),
        }
    }
}

fn map_guest_error(e: GuestError, denials: &[String]) -> ToolError {
    match e {
        GuestError::InvalidArgs(m) => ToolError::InvalidArgs(clip(m, MAX_ERROR_CHARS)),
        GuestError::UnknownTool(m) => ToolError::UnknownTool(clip(m, 256)),
        GuestError::Failed(m) if denials.is_empty() => ToolError::Failed(clip(m, MAX_ERROR_CHARS)),
        GuestError::Failed(m) => {
            ToolError::Failed(format!("{} [host: {}]", clip(m, MAX_ERROR_CHARS), denials.join("; ")))
        }
    }
}

/// A store for the plugin of `env` at `site`, with its memory cap and epoch traps on.
fn new_store(engine: &EngineHandle, env: &Arc<PluginEnv>, site: Site, limits: CallLimits) -> Store<HostState> {
    let state = HostState::new(env.clone(), site, limits.memory_bytes);
    let mut store = Store::new(&engine.engine, state);
    store.limiter(|s| &mut s.limiter);
    store.epoch_deadline_trap();
    store
}

/// One call on `store` within `limits`.
async fn guarded<T>(
    store: &mut Store<HostState>,
    limits: CallLimits,
    f: impl AsyncFnOnce(&mut Store<HostState>) -> wasmtime::Result<Result<T, GuestError>>,
) -> Result<Done<T>, Failure> {
    store.data_mut().begin_call();
    store.set_epoch_deadline(EngineHandle::ticks(limits.timeout));
    let started = Instant::now();
    let result = tokio::time::timeout(limits.timeout + OUTSIDE_GRACE, f(&mut *store)).await;
    let elapsed = started.elapsed();
    let state = store.data();
    let denials = state.denials.lock().map(|d| d.clone()).unwrap_or_default();
    match result {
        Err(_) => Err(Failure::Deadline { elapsed, trapped: false }),
        Ok(Ok(Ok(value))) => Ok((value, denials)),
        Ok(Ok(Err(error))) => Err(Failure::Guest { error, denials }),
        Ok(Err(trap)) if trap.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => {
            Err(Failure::Deadline { elapsed, trapped: true })
        }
        Ok(Err(trap)) => {
            Err(Failure::Crashed(describe_trap(&trap, state.limiter.refused, limits, &state.stderr.contents())))
        }
    }
}

/// Run `call` from start to finish on a thread of the blocking pool, and wait for it here.
///
/// A plugin's file operations (an open, a stat, a read) each go to a blocking thread and back
/// when the instance runs on the async runtime: two thread wake-ups apiece. On a thread of its
/// own (with [`Site::own_thread`]) they block that thread instead, and the call costs one
/// hand-over each way. What the call awaits (a timer, a socket, an approval) is still driven by
/// the runtime, through its handle.
///
/// The deadline holds from here, outside the thread: a call stuck in a system call (an `open` of
/// a FIFO that no one writes) is abandoned with its thread, as one stuck in a blocking task was
/// before, and never holds up the runtime.
pub(crate) async fn on_own_thread<T: Send + 'static>(
    limits: CallLimits,
    call: impl Future<Output = Result<Done<T>, Failure>> + Send + 'static,
) -> Result<Done<T>, Failure> {
    use tracing::instrument::{Instrument as _, WithSubscriber as _};
    let handle = tokio::runtime::Handle::current();
    let started = Instant::now();
    // What the plugin logs goes where it would have on the caller's thread: to the caller's
    // subscriber (a front door's, or a test's thread-local one), inside the caller's span.
    let call = call.in_current_span().with_current_subscriber();
    let task = tokio::task::spawn_blocking(move || handle.block_on(call));
    match tokio::time::timeout(limits.timeout + 2 * OUTSIDE_GRACE, task).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) if e.is_panic() => Err(Failure::Crashed(format!("made the host's call panic: {}", panic_text(e)))),
        Ok(Err(e)) => Err(Failure::Crashed(format!("was cancelled: {e}"))),
        Err(_) => Err(Failure::Deadline { elapsed: started.elapsed(), trapped: false }),
    }
}

/// What a panic said.
fn panic_text(e: tokio::task::JoinError) -> String {
    let panic = e.into_panic();
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

/// Run `f` on a fresh instance of the plugin of `env`, dropped after the call.
pub(crate) async fn run_fresh<T>(
    engine: &EngineHandle,
    env: &Arc<PluginEnv>,
    pre: &InstancePre<HostState>,
    site: Site,
    limits: CallLimits,
    f: impl AsyncFnOnce(&mut Store<HostState>, &Instance) -> wasmtime::Result<Result<T, GuestError>>,
) -> Result<Done<T>, Failure> {
    use tracing::Instrument as _;
    let span = plugin_span(env, "fresh");
    let mut store = new_store(engine, env, site, limits);
    let result = guarded(&mut store, limits, async |store| {
        let instance = pre.instantiate_async(&mut *store).await?;
        f(store, &instance).await
    })
    .instrument(span.clone())
    .await;
    ended(&span, env, &result);
    result
}

/// The span of one call on an instance of the plugin of `env` (`instance`: `fresh` or
/// `resident`).
/// Only within a trace ([`talaria_protocol::trace::in_trace`]): an adapter's polls start none.
fn plugin_span(env: &PluginEnv, instance: &'static str) -> tracing::Span {
    use tracing::field::Empty;
    if !talaria_protocol::trace::in_trace() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        target: talaria_protocol::trace::TARGET,
        "plugin",
        otel.name = format!("plugin {}", env.name),
        talaria.plugin = %env.name,
        talaria.plugin.instance = instance,
        talaria.outcome = Empty,
        talaria.denials = Empty,
        talaria.denied = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// Note how a call ended: on its span, and a fault (a deadline, a crash) in [`faults`].
fn ended<T>(span: &tracing::Span, env: &PluginEnv, result: &Result<Done<T>, Failure>) {
    let (outcome, denials) = match result {
        Ok((_, denials)) => ("ok", denials.as_slice()),
        Err(Failure::Guest { denials, .. }) => ("error", denials.as_slice()),
        Err(Failure::Deadline { .. }) => ("deadline", &[][..]),
        Err(Failure::Crashed(_)) => ("crashed", &[][..]),
    };
    if matches!(outcome, "deadline" | "crashed") {
        fault(&env.name, outcome);
    }
    if span.is_disabled() {
        return;
    }
    span.record("talaria.outcome", outcome);
    span.record("talaria.denials", i64::try_from(denials.len()).unwrap_or(i64::MAX));
    if !denials.is_empty() && talaria_protocol::trace::content() {
        span.record("talaria.denied", denials.join("; "));
    }
    if outcome != "ok" {
        span.record("otel.status_code", "ERROR");
        // What a crash says can quote what the plugin printed: text, sent only when allowed.
        if let Err(Failure::Crashed(what)) = result
            && talaria_protocol::trace::content()
        {
            span.record("otel.status_description", what.as_str());
        }
    }
}

/// Rows (plugin and kind) kept by name; faults of plugins past them are counted as `other`.
const FAULT_NAMES: usize = 256;

static FAULTS: std::sync::Mutex<Vec<(String, &'static str, u64)>> = std::sync::Mutex::new(Vec::new());

fn fault(plugin: &str, kind: &'static str) {
    let mut faults = FAULTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(row) = faults.iter_mut().find(|(p, k, _)| p == plugin && *k == kind) {
        row.2 += 1;
        return;
    }
    let name = if faults.len() < FAULT_NAMES { plugin } else { "other" };
    match faults.iter_mut().find(|(p, k, _)| p == name && *k == kind) {
        Some(row) => row.2 += 1,
        None => faults.push((name.to_string(), kind, 1)),
    }
}

/// The plugin instance faults of this process so far: (plugin, `deadline` or `crashed`, count),
/// for the metrics page.
pub fn faults() -> Vec<(String, &'static str, u64)> {
    FAULTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

/// A resident instance (a memory provider's, a platform adapter's), kept across calls, with
/// its exports `G` looked up.
pub(crate) struct Resident<G> {
    store: Store<HostState>,
    guest: G,
}

impl<G> Resident<G> {
    /// Whether it can serve a call in `workspace`: it was made for it, or nothing of it depends
    /// on the workspace ([`Grants::bound_to_workspace`](crate::grant::Grants::bound_to_workspace)).
    pub(crate) fn serves(&self, workspace: &std::path::Path, env: &PluginEnv) -> bool {
        !env.grants.bound_to_workspace() || self.store.data().workspace() == workspace
    }
}

/// Where a resident instance lives (a slot its caller holds locked for the call) and how to
/// make it.
pub(crate) struct ResidentSlot<'a, G, L> {
    pub slot: &'a mut Option<Resident<G>>,
    pub pre: &'a InstancePre<HostState>,
    /// Looks its exports up in a new instance.
    pub load: L,
}

/// Run `f` on the resident instance in `at` (the plugin's of `env`), creating it first if
/// there is none (or it was made for another workspace). A call that traps or runs out of time
/// drops it, and so does a panic (the instance is out of its slot while it runs); the next call
/// makes a new one.
pub(crate) async fn run_resident<T, G: Clone, L>(
    engine: &EngineHandle,
    env: &Arc<PluginEnv>,
    at: ResidentSlot<'_, G, L>,
    site: Site,
    limits: CallLimits,
    f: impl AsyncFnOnce(&mut Store<HostState>, &G) -> wasmtime::Result<Result<T, GuestError>>,
) -> Result<Done<T>, Failure>
where
    L: FnOnce(&mut Store<HostState>, &Instance) -> wasmtime::Result<G>,
{
    let ResidentSlot { slot, pre, load } = at;
    let mut resident = match slot.take() {
        Some(mut r) if r.serves(&site.workspace, env) => {
            r.store.data_mut().act_for(site.caller);
            r
        }
        _ => {
            let mut store = new_store(engine, env, site, limits);
            let (guest, _) = guarded(&mut store, limits, async |store| {
                let instance = pre.instantiate_async(&mut *store).await?;
                load(&mut *store, &instance).map(Ok)
            })
            .await?;
            tracing::debug!(plugin = %env.name, "resident instance created");
            Resident { store, guest }
        }
    };
    let guest = resident.guest.clone();
    let span = plugin_span(env, "resident");
    let result = {
        use tracing::Instrument as _;
        guarded(&mut resident.store, limits, async |store| f(store, &guest).await).instrument(span.clone()).await
    };
    ended(&span, env, &result);
    match &result {
        Ok(_) | Err(Failure::Guest { .. }) => *slot = Some(resident),
        Err(Failure::Deadline { .. } | Failure::Crashed(_)) => {
            tracing::info!(plugin = %env.name, "resident instance dropped; the next call makes a new one");
        }
    }
    result
}

/// `text` cut to `max` characters, with a marker when cut.
pub(crate) fn clip(text: String, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}... [cut at {max} characters]", &text[..at]),
        None => text,
    }
}

/// The refusal when a plugin returned `bytes` bytes, over its output cap.
pub(crate) fn over_cap(who: &str, bytes: usize, limits: CallLimits) -> Option<String> {
    (bytes > limits.output_bytes)
        .then(|| format!("{who} returned {bytes} bytes, over its output cap of {} KiB", limits.output_bytes / 1024))
}

/// What a trap means, to follow "plugin 'NAME' ".
fn describe_trap(trap: &wasmtime::Error, refused_memory: Option<usize>, limits: CallLimits, stderr: &str) -> String {
    const MIB: usize = 1024 * 1024;
    if let Some(desired) = refused_memory {
        return format!(
            "hit its memory limit of {} MiB (it tried to grow to {} MiB) and was stopped",
            limits.memory_bytes / MIB,
            desired.div_ceil(MIB)
        );
    }
    if let Some(exception) = python_exception(stderr) {
        return format!("raised {exception}");
    }
    if let Some(panic) = panic_message(stderr) {
        return format!("panicked: {panic}");
    }
    if let Some(exception) = js_exception(stderr) {
        return format!("threw an uncaught exception: {exception}");
    }
    let kind = trap.downcast_ref::<Trap>().map_or_else(|| format!("{trap:#}"), ToString::to_string);
    format!("trapped: {kind}")
}

/// The exception of an uncaught Python traceback printed to stderr (a componentize-py plugin),
/// with where it was raised: `KeyError: 'x' (File "app.py", line 12, in hello)`.
fn python_exception(stderr: &str) -> Option<String> {
    let start = stderr.rfind("Traceback (most recent call last):")?;
    let lines: Vec<&str> = stderr[start..].lines().skip(1).take_while(|l| !l.starts_with("thread '")).collect();
    let exception = lines.iter().rev().find(|l| !l.trim().is_empty() && !l.starts_with(' '))?.trim();
    let place = lines.iter().rev().find(|l| l.trim_start().starts_with("File \""));
    Some(match place {
        Some(place) => format!("{exception} ({})", place.trim()),
        None => exception.to_string(),
    })
}

/// The uncaught exception a componentize-js plugin printed before it aborted, with where it was
/// thrown: `no table (at list@app.js:39:48)`. StarlingMonkey prints the message, then
/// `Stack:` and one frame per line.
fn js_exception(stderr: &str) -> Option<String> {
    let stack = stderr.rfind("\nStack:\n")?;
    let before = &stderr[..stack];
    // The message may span lines; it starts after the last blank line before the stack.
    let message = before.rsplit_once("\n\n").map_or(before, |(_, m)| m).trim();
    let frame = stderr[stack + "\nStack:\n".len()..].lines().next().map(str::trim).filter(|f| !f.is_empty());
    let message = if message.is_empty() { "an exception" } else { message };
    Some(match frame {
        Some(frame) => format!("{message} (at {frame})"),
        None => message.to_string(),
    })
}

/// The message of a Rust panic printed to stderr, if there is one.
fn panic_message(stderr: &str) -> Option<String> {
    let start = stderr.find("panicked at")?;
    let rest = &stderr[start..];
    // "panicked at src/lib.rs:10:5:\nmessage\nnote: ..."
    let body = rest.split_once('\n').map_or(rest, |(_, b)| b);
    let message: Vec<&str> = body.lines().take_while(|l| !l.starts_with("note:")).collect();
    let message = message.join("\n").trim().to_string();
    Some(if message.is_empty() { rest.lines().next().unwrap_or_default().to_string() } else { message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages_are_extracted() {
        let stderr =
            "\nthread '<unnamed>' panicked at src/lib.rs:10:5:\nboom: it broke\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(panic_message(stderr).as_deref(), Some("boom: it broke"));
        assert_eq!(panic_message("nothing here"), None);
    }

    #[test]
    fn python_exceptions_are_extracted_with_where_they_were_raised() {
        let stderr = "Traceback (most recent call last):\n  File \"/app.py\", line 60, in call\n    return run(args)\n  \
                      File \"/app.py\", line 31, in hello\n    import decimal\nModuleNotFoundError: No module named 'decimal'\n\
                      thread '<unnamed>' panicked at src/lib.rs:1:1:\nPython function threw an unexpected exception\n";
        assert_eq!(
            python_exception(stderr).as_deref(),
            Some("ModuleNotFoundError: No module named 'decimal' (File \"/app.py\", line 31, in hello)")
        );
        assert_eq!(python_exception("thread 'x' panicked at a:1:1:\nboom\n"), None);
    }

    #[test]
    fn javascript_exceptions_are_extracted_with_where_they_were_thrown() {
        let stderr = "list broke: missing table\nStack:\n  list@app.js:39:48\n  export_tools_0_2_0$list@/tmp/x/initializer.js:992:15\n\n\
                      Redirecting call to abort() to mozalloc_abort\n";
        assert_eq!(js_exception(stderr).as_deref(), Some("list broke: missing table (at list@app.js:39:48)"));
        let two = "earlier line\n\nTypeError: x is undefined\nStack:\n  run@app.js:3:1\n";
        assert_eq!(js_exception(two).as_deref(), Some("TypeError: x is undefined (at run@app.js:3:1)"));
        assert_eq!(js_exception("Traceback (most recent call last):\n"), None);
    }

    #[test]
    fn failures_name_the_plugin_and_what_happened() {
        let limits = CallLimits { memory_bytes: 1 << 20, timeout: Duration::from_secs(1), output_bytes: 1024 };
        let late = || Failure::Deadline { elapsed: Duration::from_millis(1004), trapped: true };
        assert_eq!(
            late().into_plugin_error("hook plugin 'guard'", limits).to_string(),
            "hook plugin 'guard' did not answer within 1s and was stopped after 1.00s"
        );
        assert_eq!(
            late().into_tool_error("t", limits),
            ToolError::Crashed("plugin 't' exceeded its 1s deadline and was stopped after 1.00s".into())
        );
        let refused = Failure::Guest { error: GuestError::Failed("no".into()), denials: vec!["net x".into()] };
        assert_eq!(
            refused.into_plugin_error("memory plugin 'm'", limits),
            PluginError::Failed("memory plugin 'm' failed: no [host: net x]".into())
        );
        assert_eq!(
            over_cap("plugin 'p'", 1025, limits).as_deref(),
            Some("plugin 'p' returned 1025 bytes, over its output cap of 1 KiB")
        );
        assert_eq!(over_cap("plugin 'p'", 1024, limits), None);
    }
}
