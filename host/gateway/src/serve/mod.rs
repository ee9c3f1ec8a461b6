//! `talaria gateway run`: every configured account's adapter connected and polled, each chat (and
//! thread) a session of the agent service, replies written back through the delivery ledger.
//!
//! - `account`: one supervisor per account: connect, poll, reconnect with backoff; an adapter
//!   that traps is re-created and the other accounts never notice.
//! - `inbox`: every message taken is kept in the store first, and answered by the process
//!   serving its chat (several gateway processes may share one store, see docs/scale-out.md).
//! - `session`: one worker per active chat session: its conversation, the queue of messages that
//!   came while it worked, streaming by edits, typing, approvals asked of the platform's admins.
//! - `outbox`: the ledger's sender per account: every final message is written to the store
//!   first and retried until the platform took it.
//! - `courier`: scheduled jobs' answers handed to the ledger ([`Ledger`]). The runner of
//!   scheduled jobs ticks beside the accounts when `run` is given one ([`Options::scheduler`]).
//!
//! What arrives from an adapter is the platform's word: the sender is checked against
//! `[gateway]` and the pairings here ([`crate::authorize`]) before anything reaches the agent,
//! and only the platform's configured admins answer approvals.

mod account;
mod courier;
mod inbox;
mod limits;
mod listen;
mod outbox;
mod session;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use talaria_core::Host;
use talaria_core::config::GatewayToml;
use talaria_core::cron::courier::{BoxFuture, Courier};
use talaria_core::listen::limit::Window;
use talaria_core::runtime::adapter::{
    AccountInfo, AccountSpec, Adapter, ButtonPress, ChatType as WireChatType, InboundMessage, PlatformEvent,
};
use talaria_core::runtime::{HostPattern, Secrets};
use talaria_core::store::Store;
use talaria_core::store::pairing::Request as Pairing;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::command::Command;
use crate::{ChatType, Decision, Inbound, authorize, session_key};

pub use courier::Ledger;
pub use listen::{DEFAULT_LISTEN, address as listen_address};
pub use outbox::Reply;

/// Where session keys map to session ids (a key-value space of the store no plugin can name).
pub const SESSIONS_SPACE: &str = "@gateway/sessions";
/// Where approvals waiting for an admin are kept, by the token their buttons carry (and the
/// latest of each chat, by `latest:ACCOUNT:CHAT`), so any gateway process takes the answer.
const APPROVALS_SPACE: &str = "@gateway/approvals";
/// A stranger is told about pairing at most this often.
const PAIRING_REPLY_EVERY: Duration = Duration::from_secs(10 * 60);

/// What `run` is given.
#[derive(Default)]
pub struct Options {
    /// Serve only these accounts (all configured ones when empty).
    pub only: Vec<String>,
    /// The runner of scheduled jobs, to tick beside the gateway while it runs.
    pub scheduler: Option<Scheduler>,
}

/// Starts the runner of scheduled jobs beside the gateway (`talaria gateway run` gives
/// `talaria_scheduler::Runner::serve`): given the gateway's courier for answers to chats
/// ([`Ledger`]) and the token cancelled when the gateway stops, the future that ticks until
/// then and ends once its runs have. The gateway waits for it as for its own tasks.
pub type Scheduler = Box<dyn FnOnce(Arc<dyn Courier>, CancellationToken) -> BoxFuture<'static, ()> + Send>;

/// One account the gateway serves.
pub(crate) struct Account {
    pub name: String,
    pub adapter: Adapter,
    pub info: Mutex<Option<AccountInfo>>,
    /// Turns running in its chats: while any does, polls are short so replies go out at once.
    pub busy: AtomicUsize,
    /// Deliveries queued and not yet tried.
    pub pending: AtomicUsize,
    /// When an event last came in: its turn may not have started yet, but its replies will
    /// want the adapter soon.
    pub last_event: Mutex<Option<Instant>>,
    pub outbox: tokio::sync::Notify,
    pub state: Mutex<String>,
    /// The platform's admins, by user id (`[gateway.platforms.NAME] admins`).
    pub admins: Vec<String>,
    /// The lease whose holder polls the account (named after its credentials).
    pub lease_key: String,
}

impl Account {
    pub fn info(&self) -> Option<AccountInfo> {
        lock(&self.info).clone()
    }

    pub fn set_state(&self, state: impl Into<String>) {
        *lock(&self.state) = state.into();
    }
}

/// An approval a chat was asked, as [`APPROVALS_SPACE`] keeps it under the token its buttons
/// carry.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct PendingApproval {
    session_key: String,
    account: String,
    chat_id: String,
    thread_id: Option<String>,
    id: u64,
}

/// The store could not be read or written (what failed is logged where it happened).
#[derive(Debug)]
pub(crate) struct StoreDown;

/// The running gateway.
pub(crate) struct Gateway {
    pub host: Arc<Host>,
    pub config: GatewayToml,
    pub store: Arc<Store>,
    /// Sessions' workspaces are made beneath it.
    pub root: PathBuf,
    pub accounts: BTreeMap<String, Arc<Account>>,
    /// Live session workers of this process, by session key: handed an entry kept here, or
    /// (`None`) told to look at their inbox.
    sessions: Mutex<HashMap<String, mpsc::UnboundedSender<Option<Box<talaria_core::store::inbox::Entry>>>>>,
    /// Replies requests of this process wait for, by inbox entry.
    awaited: Mutex<HashMap<i64, Arc<inbox::Awaited>>>,
    /// When each stranger was last told about pairing.
    told: Mutex<HashMap<(String, String), Instant>>,
    /// What chats in full flow keep of their histories between messages, together
    /// (`[gateway] history_mib`).
    kept: Arc<talaria_core::kept::Kept>,
    /// A session was put away since the memory was last tidied ([`tidy`]).
    put_away: std::sync::atomic::AtomicBool,
    /// Messages each chat user (account, user id) sent in the last minute
    /// (`[gateway.limits] messages_per_minute`).
    messages: Window<(String, String)>,
    /// Users told in the last minute that they went too fast (told once a minute).
    slowed: Window<(String, String)>,
    pub stop: CancellationToken,
    pub tasks: tokio_util::task::TaskTracker,
}

const MINUTE: Duration = Duration::from_secs(60);

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The host an account's `base_url` names, as a grant: `host[:port]`.
pub fn base_host(base_url: &str) -> Result<HostPattern, String> {
    let uri: http::Uri = base_url.parse().map_err(|e| format!("`{base_url}` is not a URL ({e})"))?;
    let authority = uri.authority().ok_or_else(|| format!("`{base_url}` names no host"))?;
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    let default_port = if uri.scheme_str() == Some("http") { 80 } else { 443 };
    let port = authority.port_u16().unwrap_or(default_port);
    HostPattern::parse(&format!("{host}:{port}")).map_err(|e| e.to_string())
}

/// Serve every configured account until `shutdown` resolves; then stop taking messages, let
/// running turns end (interrupting those still running after a grace period), send what the
/// ledger holds, and release the accounts.
///
/// Other gateway processes may share the store: each serves every account's webhooks and runs
/// turns; one at a time polls each bot (the account's lease), and one answers each chat.
///
/// # Errors
/// No account is configured, or one names a plugin that is not a platform adapter.
pub async fn run(host: Arc<Host>, options: Options, shutdown: impl Future<Output = ()>) -> Result<(), String> {
    let config = host.config().gateway.clone();
    let store = host.store().clone();
    store.limit_cache(PAGE_CACHE_KIB);
    if let Err(e) = store.checkpoint_in_background() {
        // The writes checkpoint then, as a one-shot chat's do.
        tracing::warn!("cannot checkpoint the database in the background: {e}");
    }
    let root = config.workspaces.clone().unwrap_or_else(|| default_workspaces(host.home()));
    std::fs::create_dir_all(&root).map_err(|e| format!("cannot make {}: {e}", root.display()))?;
    let (plugins, _) = host.plugins(host.workspace()).map_err(|e| e.to_string())?;
    let runtime = plugins.runtime();
    let secrets = Secrets::load(&host.home().join(".env"));
    let mut accounts = BTreeMap::new();
    for (name, platform) in &config.platforms {
        if platform.enabled == Some(false) || (!options.only.is_empty() && !options.only.contains(name)) {
            continue;
        }
        let account = open_account(&runtime, name, platform)?;
        accounts.insert(name.clone(), Arc::new(account));
    }
    if accounts.is_empty() {
        return Err(if config.platforms.is_empty() {
            "no platform is configured: add a [gateway.platforms.NAME] table to config.toml (see docs/gateway.md)"
                .to_string()
        } else {
            "every configured platform is disabled or left out".to_string()
        });
    }
    let names: Vec<String> = accounts.keys().cloned().collect();
    let routes = listen::routes(&config, &secrets, &names)?;
    let metrics_token = listen::metrics_token(&config, &secrets)?;
    let listener = if routes.is_empty() && metrics_token.is_none() {
        None
    } else {
        let addr = listen::address(&config)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr} for webhooks: {e} ([gateway] listen sets the address)"))?;
        tracing::info!(%addr, routes = routes.len(), "listening for webhooks");
        Some(listener)
    };
    let limits = config.limits;
    let kept = talaria_core::kept::Kept::new(config.history_bytes());
    let gateway = Arc::new(Gateway {
        host,
        config,
        store: store.clone(),
        root,
        accounts,
        sessions: Mutex::default(),
        awaited: Mutex::default(),
        told: Mutex::default(),
        kept,
        put_away: std::sync::atomic::AtomicBool::new(false),
        messages: Window::new(limits.messages_per_minute(), MINUTE),
        slowed: Window::new(1, MINUTE),
        stop: CancellationToken::new(),
        tasks: tokio_util::task::TaskTracker::new(),
    });
    for account in gateway.accounts.values() {
        gateway.tasks.spawn(account::supervise(gateway.clone(), account.clone()));
        gateway.tasks.spawn(outbox::send_loop(gateway.clone(), account.clone()));
    }
    if let Some(listener) = listener {
        gateway.tasks.spawn(listen::serve(gateway.clone(), routes, metrics_token, listener));
    }
    gateway.tasks.spawn(inbox::serve(gateway.clone()));
    gateway.tasks.spawn(report(gateway.clone()));
    gateway.tasks.spawn(limits::budget_reached(gateway.clone()));
    gateway.tasks.spawn(tidy(gateway.clone()));
    gateway.tasks.spawn(reload(gateway.clone(), plugins.clone()));
    if let Some(scheduler) = options.scheduler {
        gateway.tasks.spawn(scheduler(Arc::new(Ledger::for_gateway(&gateway)), gateway.stop.clone()));
    }
    tracing::info!(accounts = gateway.accounts.len(), "gateway running");
    shutdown.await;
    tracing::info!("gateway stopping: finishing running turns");
    gateway.stop.cancel();
    gateway.tasks.close();
    gateway.tasks.wait().await;
    gateway.write_status(false).await;
    tracing::info!("gateway stopped");
    Ok(())
}

/// Account `name` as `[gateway.platforms.NAME]` describes it, its adapter made (not connected
/// yet), its lease named after its plugin and credentials.
pub(crate) fn open_account(
    runtime: &Arc<talaria_core::runtime::Runtime>,
    name: &str,
    platform: &talaria_core::config::PlatformToml,
) -> Result<Account, String> {
    let plugin = platform.plugin.clone().unwrap_or_else(|| name.to_string());
    let mut settings = platform.settings.clone();
    if !platform.routes.is_empty() {
        // The adapter reads each route's settings (never its secret: that is the host's).
        let routes: toml::Table =
            platform.routes.iter().map(|(name, r)| (name.clone(), toml::Value::Table(r.settings.clone()))).collect();
        settings.insert("routes".into(), toml::Value::Table(routes));
    }
    let host_override = match &platform.base_url {
        Some(url) => {
            settings.insert("base_url".into(), toml::Value::String(url.clone()));
            Some(base_host(url).map_err(|e| format!("[gateway.platforms.{name}] base_url: {e}"))?)
        }
        None => None,
    };
    let spec = AccountSpec {
        name: name.to_string(),
        config: settings,
        host: host_override,
        secret_names: platform.secrets.clone(),
    };
    let adapter = runtime.adapter(&plugin, spec).map_err(|e| format!("[gateway.platforms.{name}]: {e}"))?;
    // One gateway per bot: the lease is named after the account's credentials.
    let credentials: Vec<String> = adapter
        .grants()
        .caps
        .iter()
        .filter_map(|c| match c {
            talaria_core::runtime::Capability::Secret { name, .. } => adapter.secret_value(name),
            _ => None,
        })
        .collect();
    let lease_token = format!("{}\n{}", plugin, credentials.join("\n"));
    let account = Account {
        lease_key: crate::lease::account_key(name, &lease_token),
        name: name.to_string(),
        adapter,
        info: Mutex::new(None),
        busy: AtomicUsize::new(0),
        pending: AtomicUsize::new(0),
        last_event: Mutex::new(None),
        outbox: tokio::sync::Notify::new(),
        state: Mutex::new("starting".into()),
        admins: platform.admins.clone(),
    };
    Ok(account)
}

/// Where chat sessions' workspaces go by default: beside talaria's home, never inside it (a
/// plugin is never granted a directory there): `~/.talaria-chats` for `~/.talaria`.
pub fn default_workspaces(home: &std::path::Path) -> PathBuf {
    let name = home.file_name().map_or_else(|| "talaria".into(), |n| n.to_string_lossy().into_owned());
    home.with_file_name(format!("{name}-chats"))
}

/// Where the running gateway writes how it stands, for `talaria gateway status`.
pub const STATUS_SPACE: &str = "@gateway/status";
/// How often it does.
const REPORT_EVERY: Duration = Duration::from_secs(2);

/// How a gateway process stands, as `gateway status` reads it (each process writes its own).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Status {
    pub running: bool,
    pub pid: u32,
    /// The machine it runs on.
    #[serde(default)]
    pub host: String,
    /// Milliseconds since the epoch when this was written.
    pub at: i64,
    /// Each account: its state in words.
    pub accounts: BTreeMap<String, String>,
    /// Sessions with a worker now.
    pub active_sessions: usize,
    /// Turns running now.
    pub busy: usize,
}

/// A status older than this is of a process that is gone (it writes every two seconds).
pub const STATUS_STALE_MS: i64 = 10_000;

impl Status {
    /// The status written last by any gateway process sharing `store`, if any.
    pub async fn read(store: &Store) -> Option<Status> {
        Self::read_all(store).await.into_iter().max_by_key(|s| s.at)
    }

    /// Every gateway process's last status, newest first.
    pub async fn read_all(store: &Store) -> Vec<Status> {
        let kept = store.kv_list(STATUS_SPACE, "").await.unwrap_or_default();
        let mut all: Vec<Status> = kept.iter().filter_map(|(_, bytes)| serde_json::from_slice(bytes).ok()).collect();
        all.sort_by_key(|s| std::cmp::Reverse(s.at));
        all
    }

    /// Where its process writes it: `HOST:PID`.
    fn key(&self) -> String {
        format!("{}:{}", self.host, self.pid)
    }

    /// Whether the process was running when it last wrote, wrote lately, and (on this
    /// machine) still runs.
    pub fn live(&self, now_ms: i64) -> bool {
        self.running && now_ms - self.at < STATUS_STALE_MS && !talaria_core::store::process::gone(self.pid, &self.host)
    }
}

/// How often the gateway looks whether its plugins changed on disk.
const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// Reload the plugins when they change on disk (`talaria plugin dev`, `plugins install`, ...):
/// conversations use the new ones from their next call; an account whose adapter plugin changed
/// is bound to the new one and connected again.
async fn reload(gateway: Arc<Gateway>, plugins: Arc<talaria_core::Plugins>) {
    let mut last = plugins.runtime();
    loop {
        tokio::select! {
            () = gateway.stop.cancelled() => return,
            () = tokio::time::sleep(RELOAD_EVERY) => {}
        }
        if let Some(text) = plugins.refresh().await {
            tracing::info!("{text}");
        }
        let now = plugins.runtime();
        if Arc::ptr_eq(&now, &last) {
            continue;
        }
        for account in gateway.accounts.values() {
            let name = account.adapter.plugin();
            let (Some(old), Some(new)) = (last.plugin(&name), now.plugin(&name)) else { continue };
            if !talaria_core::plugins::differs(old, new) {
                continue;
            }
            if let Err(e) = account.adapter.rebind(&now) {
                tracing::warn!(account = %account.name, "the reloaded plugins have no adapter for it ({e}); it keeps the old one");
                continue;
            }
            match account.adapter.connect().await {
                Ok(info) => {
                    tracing::info!(account = %account.name, plugin = %name, "adapter reloaded and connected");
                    account.set_state(format!("connected as {}", info.bot_name));
                    *lock(&account.info) = Some(info);
                    account.adapter.prepare_senders().await;
                }
                Err(e) => account.set_state(format!("reloaded; cannot connect: {e}")),
            }
        }
        last = now;
    }
}

async fn report(gateway: Arc<Gateway>) {
    // Forget processes gone for a day.
    let day_ago = jiff::Timestamp::now().as_millisecond() - 24 * 60 * 60 * 1000;
    for old in Status::read_all(&gateway.store).await.into_iter().filter(|s| s.at < day_ago) {
        let _ = gateway.store.kv_delete(STATUS_SPACE, &old.key()).await;
    }
    loop {
        gateway.write_status(true).await;
        tokio::select! {
            () = gateway.stop.cancelled() => return,
            () = tokio::time::sleep(REPORT_EVERY) => {}
        }
    }
}

/// How often the gateway forgets what it no longer needs and hands freed memory back (every 30 s,
/// the soak's resident memory rose by 14% between two trims: chats past `[gateway] history_mib`
/// read their histories back with each message, and the allocator keeps what they churn).
const TIDY_EVERY: Duration = Duration::from_secs(10);

/// The state database's page cache in a gateway (a CLI keeps the store's 32 MiB). A gateway
/// reads a chat's history again for each message after a pause ([`Start::rest_after`]): over thousands of
/// chats a larger cache only grows towards the whole file, and what falls out of it is in the
/// system's file cache still.
///
/// [`Start::rest_after`]: talaria_core::Start::rest_after
const PAGE_CACHE_KIB: u32 = 8 * 1024;

/// Every [`TIDY_EVERY`]: forget strangers told about pairing long enough ago to be told again,
/// and hand the memory freed since back to the system (the allocator keeps freed memory for
/// itself otherwise: after a burst, or as chats' histories grow, a gateway's RSS would only
/// grow). Once sessions were put away, the database's cached pages go too.
async fn tidy(gateway: Arc<Gateway>) {
    loop {
        tokio::select! {
            () = gateway.stop.cancelled() => return,
            () = tokio::time::sleep(TIDY_EVERY) => {}
        }
        lock(&gateway.told).retain(|_, at| at.elapsed() < PAIRING_REPLY_EVERY);
        if gateway.put_away.swap(false, std::sync::atomic::Ordering::SeqCst) {
            gateway.store.release_memory();
        }
        give_back_memory();
    }
}

/// Return the allocator's free memory to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn give_back_memory() {
    // SAFETY: malloc_trim takes no pointer and only walks glibc's own heaps, under their locks.
    #[allow(unsafe_code)]
    let released = unsafe { libc::malloc_trim(0) };
    tracing::trace!(released, "freed memory returned to the system");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back_memory() {}

/// Keep the allocator to one heap per core (glibc makes up to eight per core, each holding
/// memory freed on it): a service that runs for months stays near what it uses. Called before
/// the service's threads start.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn limit_heaps() {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get).max(2);
    // SAFETY: mallopt takes two integers and only sets one of glibc's tunables.
    #[allow(unsafe_code)]
    let set = unsafe { libc::mallopt(libc::M_ARENA_MAX, i32::try_from(cores).unwrap_or(i32::MAX)) };
    tracing::trace!(set, cores, "allocator heaps limited");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_heaps() {}

fn chat_type(t: WireChatType) -> ChatType {
    match t {
        WireChatType::Dm => ChatType::Dm,
        WireChatType::Group => ChatType::Group,
        WireChatType::Channel => ChatType::Channel,
    }
}

impl Gateway {
    async fn write_status(&self, running: bool) {
        let status = Status {
            running,
            pid: std::process::id(),
            host: talaria_core::store::process::machine(),
            at: i64::try_from(
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis(),
            )
            .unwrap_or(i64::MAX),
            accounts: self.accounts.iter().map(|(name, a)| (name.clone(), lock(&a.state).clone())).collect(),
            active_sessions: lock(&self.sessions).len(),
            busy: self.accounts.values().map(|a| a.busy.load(std::sync::atomic::Ordering::SeqCst)).sum(),
        };
        if let Ok(json) = serde_json::to_vec(&status)
            && let Err(e) = self.store.kv_set(STATUS_SPACE, &status.key(), &json).await
        {
            tracing::warn!("cannot write the gateway's status: {e}");
        }
    }

    /// Handle one event from `account`'s adapter. A message is kept before this returns: while
    /// the store cannot be written it is tried again (the adapter polls nothing meanwhile, so the
    /// platform is not told the message arrived), until it is kept or the gateway stops.
    /// `trace`: the W3C `traceparent` the request that carried the event named (a webhook's).
    pub(crate) async fn dispatch(self: &Arc<Self>, account: &Arc<Account>, event: PlatformEvent, trace: Option<&str>) {
        *lock(&account.last_event) = Some(Instant::now());
        match event {
            PlatformEvent::Message(m) => {
                if let Err(wait) = self.messages.take((account.name.clone(), m.sender_id.clone())) {
                    return self.too_fast(account, &m, wait).await;
                }
                let mut wait = Duration::from_millis(250);
                while self.on_message(account, m.clone(), false, trace).await.is_err() {
                    tracing::warn!(account = %account.name, "the store cannot keep a message; trying again in {wait:?}");
                    tokio::select! {
                        () = self.stop.cancelled() => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
            PlatformEvent::Button(b) => self.on_button(account, b).await,
        }
    }

    /// Handle a message: the inbox entry it went to (its chat's worker answers it there, and
    /// with `respond` its reply is kept there for whoever waits), unless it was ignored or
    /// answered at once (pairing, help, approvals).
    ///
    /// # Errors
    /// The store cannot be read or written: nothing was done with the message.
    ///
    /// In a span of its own (`receive`), which continues `trace` (a webhook's `traceparent`):
    /// the turn that answers the message, and the deliveries of its answer, are its children.
    pub(crate) async fn on_message(
        self: &Arc<Self>,
        account: &Arc<Account>,
        m: InboundMessage,
        respond: bool,
        trace: Option<&str>,
    ) -> Result<Option<i64>, StoreDown> {
        use tracing::Instrument as _;
        let span = tracing::info_span!(
            target: talaria_protocol::trace::TARGET,
            "receive",
            otel.name = format!("receive {}", account.name),
            otel.kind = "consumer",
            messaging.system = %account.name,
            messaging.operation.type = "receive",
            messaging.message.id = %m.id,
        );
        talaria_core::telemetry::set_parent(&span, trace);
        self.on_message_in_span(account, m, respond).instrument(span).await
    }

    async fn on_message_in_span(
        self: &Arc<Self>,
        account: &Arc<Account>,
        m: InboundMessage,
        respond: bool,
    ) -> Result<Option<i64>, StoreDown> {
        let Some(info) = account.info() else { return Ok(None) };
        if m.sender_id == info.bot_id {
            return Ok(None);
        }
        let inbound = Inbound {
            platform: account.name.clone(),
            chat_id: m.chat_id.clone(),
            chat_type: chat_type(m.chat_type),
            thread_id: m.thread_id.clone(),
            sender_id: m.sender_id.clone(),
            sender_name: m.sender_name.clone(),
            addressed: m.mentions_bot,
            text: m.text.clone(),
        };
        let written = crate::command::command_text(&m.text, m.mentions_bot);
        let command = written.and_then(|text| crate::command::parse(text, &info.bot_name));
        // Being paired only ever lets more in: the store is asked only when the rules alone
        // would not answer.
        let mut decision = authorize(&self.config, &inbound, false);
        let mut paired = false;
        if !matches!(decision, Decision::Answer { .. }) {
            paired = self.store.is_paired(&account.name, &m.sender_id).await.map_err(|e| {
                tracing::error!(account = %account.name, "cannot read who is paired: {e}");
                StoreDown
            })?;
            decision = authorize(&self.config, &inbound, paired);
        }
        let heard = |outcome: &str, why: &str| {
            tracing::info!(
                account = %account.name,
                chat = %m.chat_id,
                user = %m.sender_id,
                message_id = %m.id,
                "message {outcome}: {why}"
            );
        };
        let admin = match decision {
            Decision::Ignore => {
                let allowed = authorize(&self.config, &Inbound { addressed: true, ..inbound.clone() }, paired);
                let Decision::Answer { admin } = allowed else {
                    heard("ignored", "a stranger in a group (strangers are answered only in direct messages)");
                    return Ok(None);
                };
                // An answer to the approval this chat waits for needs no mention.
                let answers = matches!(command, Some(Command::Approve { .. } | Command::Deny | Command::Usage(_)));
                if !(answers && self.waiting_approval(account, &m.chat_id).await.is_some()) {
                    heard(
                        "ignored",
                        "not addressed to the bot in a group (mention it or reply to it; require_mention)",
                    );
                    return Ok(None);
                }
                admin
            }
            Decision::OfferPairing => {
                heard("not answered", "a stranger in a direct message; pairing offered");
                self.offer_pairing(account, &m).await;
                return Ok(None);
            }
            Decision::Answer { admin } => admin,
        };
        let key = session_key(&self.config, &inbound);
        if command.is_some() {
            let name = written.unwrap_or_default().split_whitespace().next().unwrap_or_default();
            heard("taken", &format!("the command {name}"));
        } else {
            heard("taken", if admin { "for the agent (from an admin)" } else { "for the agent" });
        }
        let (kind, body) = match command {
            Some(Command::Help) => {
                self.reply(account, &m.chat_id, m.thread_id.as_deref(), &help_text(), &format!("help:{}", m.id)).await;
                return Ok(None);
            }
            Some(Command::Usage(usage)) => {
                let key = format!("usage:{}:{}:{}", account.name, m.chat_id, m.id);
                self.reply(account, &m.chat_id, m.thread_id.as_deref(), usage, &key).await;
                return Ok(None);
            }
            Some(Command::Approve { session }) => {
                let decision =
                    if session { talaria_protocol::Decision::Session } else { talaria_protocol::Decision::Once };
                self.on_approval_command(account, &m, admin, decision).await;
                return Ok(None);
            }
            Some(Command::Deny) => {
                self.on_approval_command(account, &m, admin, talaria_protocol::Decision::Deny).await;
                return Ok(None);
            }
            Some(Command::Rollback { .. }) if !admin => {
                let text = "Only an admin of this bot can roll back file changes.";
                self.reply(account, &m.chat_id, m.thread_id.as_deref(), text, &format!("rollback:{}", m.id)).await;
                return Ok(None);
            }
            Some(_) => (session::Kind::Command, written.unwrap_or_default().to_string()),
            None => {
                (session::Kind::Message, serde_json::to_string(&prompt_of(&m, &inbound.platform)).unwrap_or_default())
            }
        };
        self.enqueue(&inbox::Incoming {
            account,
            session_key: &key,
            chat_id: &m.chat_id,
            thread_id: m.thread_id.as_deref(),
            message_id: &m.id,
            kind,
            body: &body,
            respond,
        })
        .await
        .map(Some)
    }

    async fn offer_pairing(&self, account: &Account, m: &InboundMessage) {
        let code = Store::new_pairing_code();
        let request = match self.store.pairing_request(&account.name, &m.sender_id, &m.sender_name, &code).await {
            Ok(r) => r,
            Err(e) => return tracing::warn!("cannot record a pairing request: {e}"),
        };
        let who = (account.name.clone(), m.sender_id.clone());
        {
            let mut told = lock(&self.told);
            let recently = told.get(&who).is_some_and(|at| at.elapsed() < PAIRING_REPLY_EVERY);
            if recently && !matches!(request, Pairing::New(_)) {
                return;
            }
            told.insert(who, Instant::now());
        }
        let text = match request {
            Pairing::New(code) | Pairing::Pending(code) => {
                tracing::info!(account = %account.name, user = %m.sender_id, name = %m.sender_name, "pairing requested; approve with `talaria pairing approve {code}`");
                format!(
                    "Hi! I only answer people my owner knows. Your pairing code is {code} (valid for an hour), and your user id here is `{}`. Ask the owner to run:\n\ntalaria pairing approve {code}",
                    m.sender_id
                )
            }
            Pairing::Approved => return,
            Pairing::TooMany => "I cannot take more pairing requests right now; please try again later.".to_string(),
        };
        self.reply(account, &m.chat_id, None, &text, &format!("pair:{}:{}", m.chat_id, m.id)).await;
    }

    async fn on_button(self: &Arc<Self>, account: &Arc<Account>, b: ButtonPress) {
        let Some((token, choice)) = b.data.strip_prefix("ap:").and_then(|d| d.split_once(':')) else { return };
        let decision = match choice {
            "o" => talaria_protocol::Decision::Once,
            "s" => talaria_protocol::Decision::Session,
            "d" => talaria_protocol::Decision::Deny,
            _ => return,
        };
        if !account.admins.contains(&b.sender_id) {
            tracing::warn!(account = %account.name, user = %b.sender_id, "a non-admin pressed an approval button; refused");
            let text = format!("{}, only an admin of this bot can answer approvals.", b.sender_name);
            return self
                .reply(
                    account,
                    &b.chat_id,
                    b.thread_id.as_deref(),
                    &text,
                    &format!("refuse:{}:{token}:{}", b.sender_id, b.message_id),
                )
                .await;
        }
        if let Some(pending) = self.pending_approval(token).await {
            self.resolve(account, token, &pending, decision, &b.sender_name).await;
        }
    }

    /// The approval whose buttons carry `token`, while it waits.
    async fn pending_approval(&self, token: &str) -> Option<PendingApproval> {
        let bytes = self.store.kv_get(APPROVALS_SPACE, token).await.ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    /// The approval `chat_id` was asked last, while it waits: its token, and what it is.
    async fn waiting_approval(&self, account: &Account, chat_id: &str) -> Option<(String, PendingApproval)> {
        let latest = self.store.kv_get(APPROVALS_SPACE, &latest_approval(&account.name, chat_id)).await.ok()??;
        let token = String::from_utf8(latest).ok()?;
        let pending = self.pending_approval(&token).await?;
        Some((token, pending))
    }

    /// An admin typed /approve or /deny in a chat: the approval its chat was asked last.
    async fn on_approval_command(
        self: &Arc<Self>,
        account: &Account,
        m: &InboundMessage,
        admin: bool,
        decision: talaria_protocol::Decision,
    ) {
        let key = format!("cmd:{}:{}:{}", account.name, m.chat_id, m.id);
        if !admin {
            return self
                .reply(
                    account,
                    &m.chat_id,
                    m.thread_id.as_deref(),
                    "Only an admin of this bot can answer approvals.",
                    &key,
                )
                .await;
        }
        match self.waiting_approval(account, &m.chat_id).await {
            Some((token, pending)) => self.resolve(account, &token, &pending, decision, &m.sender_name).await,
            None => {
                self.reply(account, &m.chat_id, m.thread_id.as_deref(), "Nothing is waiting for approval here.", &key)
                    .await
            }
        }
    }

    /// Hand an admin's answer to the session that asked (in whichever process serves it):
    /// through its inbox, once per approval however many answer.
    async fn resolve(
        self: &Arc<Self>,
        account: &Account,
        token: &str,
        pending: &PendingApproval,
        decision: talaria_protocol::Decision,
        by: &str,
    ) {
        let answer = session::Answer { id: pending.id, decision, by: by.to_string() };
        let body = serde_json::to_string(&answer).unwrap_or_default();
        // Not kept: the admin's answer is lost, and they see no verdict; they can answer again.
        let _ = self
            .enqueue(&inbox::Incoming {
                account,
                session_key: &pending.session_key,
                chat_id: &pending.chat_id,
                thread_id: pending.thread_id.as_deref(),
                message_id: &format!("approval:{token}"),
                kind: session::Kind::Approval,
                body: &body,
                respond: false,
            })
            .await;
    }

    /// Keep an approval the chat of `session_key` is asked; the token its buttons carry.
    async fn approval_token(&self, session_key: &str, account: &str, chat: &session::Chat, id: u64) -> String {
        let token = Store::new_pairing_code();
        let pending = PendingApproval {
            session_key: session_key.to_string(),
            account: account.to_string(),
            chat_id: chat.chat_id.clone(),
            thread_id: chat.thread_id.clone(),
            id,
        };
        let kept = async {
            let json = serde_json::to_vec(&pending).map_err(|e| e.to_string())?;
            self.store.kv_set(APPROVALS_SPACE, &token, &json).await.map_err(|e| e.to_string())?;
            let latest = latest_approval(account, &chat.chat_id);
            self.store.kv_set(APPROVALS_SPACE, &latest, token.as_bytes()).await.map_err(|e| e.to_string())
        }
        .await;
        if let Err(e) = kept {
            tracing::warn!(session = %session_key, "cannot keep an approval: {e}");
        }
        token
    }

    /// Queue a message to a chat through the ledger (sent once per `key`).
    pub(crate) async fn reply(
        &self,
        account: &Account,
        chat_id: &str,
        thread_id: Option<&str>,
        markdown: &str,
        key: &str,
    ) {
        let _ = outbox::queue(self, account, chat_id, thread_id, markdown, &outbox::Reply::default(), key).await;
    }
}

/// Forget the approval of `token` (its turn ended).
pub(crate) async fn forget_approval(store: &Store, token: &str) {
    let _ = store.kv_delete(APPROVALS_SPACE, token).await;
}

/// Where the latest approval a chat was asked is kept.
fn latest_approval(account: &str, chat_id: &str) -> String {
    format!("latest:{account}:{chat_id}")
}

/// What the agent is given of a message: its text, images (the others named, as the agent
/// cannot open them), and who sent it on `platform` (whose `[budget]` it counts against).
fn prompt_of(m: &InboundMessage, platform: &str) -> session::Prompt {
    use base64::Engine as _;
    let mut text = m.text.clone();
    let mut images = Vec::new();
    for a in &m.attachments {
        if a.kind == "image" && !a.data.is_empty() {
            let media_type = if a.mime.is_empty() { "image/jpeg".to_string() } else { a.mime.clone() };
            images.push(talaria_protocol::Image {
                media_type,
                data: base64::engine::general_purpose::STANDARD.encode(&a.data),
            });
        } else {
            let name = if a.name.is_empty() { a.kind.as_str() } else { a.name.as_str() };
            text.push_str(&format!("\n[the user attached {name} ({}), which you cannot open]", a.mime));
        }
    }
    // The turn continues the message's trace (the span `receive`, when traces are on).
    let trace = talaria_core::telemetry::traceparent(&tracing::Span::current());
    session::Prompt { text, images, sender: Some(format!("{platform}:{}", m.sender_id)), trace }
}

/// The ledger key of the reply to a message.
pub(crate) fn reply_key(account: &str, chat_id: &str, message_id: &str) -> String {
    format!("reply:{account}:{chat_id}:{message_id}")
}

fn help_text() -> String {
    "Commands:\n/new: start a new conversation\n/stop: stop what I am doing\n/status: what I am doing, and this session's usage\n/approve [session]: allow what I asked to do (admins)\n/deny: refuse it (admins)\n/rollback [N] [force]: list or undo my last file changes (admins)\n/help: this list".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_becomes_the_host_the_adapter_may_reach() {
        assert_eq!(base_host("http://127.0.0.1:8081").expect("ok").to_string(), "127.0.0.1:8081");
        assert_eq!(base_host("https://bots.example.com/").expect("ok").to_string(), "bots.example.com:443");
        assert!(base_host("not a url").is_err());
    }
}
