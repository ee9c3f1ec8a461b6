//! Platform adapters (API 0.3.0): the resident instance that connects one gateway account to its
//! chat platform, and the calls the gateway makes on it.
//!
//! Each configured account gets its own [`Adapter`]: an instance of the adapter plugin whose
//! `config.get` reads the account's settings, kept across calls and re-created after a trap or
//! a missed deadline (the gateway waits between attempts). An account whose platform lives
//! elsewhere than the adapter's default (a self-hosted Bot API server, a homeserver, a test
//! double) names it, and every network and secret grant of that account's instance then names
//! that host instead: the operator chose it, and the adapter reaches nothing else.
//!
//! Whatever the adapter returns is the platform's (or the plugin's) word, never the host's: the
//! gateway checks every sender against its own rules. Texts are capped here.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::Instance;

use crate::Runtime;
use crate::approval::Caller;
use crate::grant::{Capability, Grants, HostPattern};
use crate::host::Site;
use crate::host::api::since_v0_3_0::exports::talaria::plugin0_3_0::adapter as wit;
use crate::host::api::since_v0_4_0::exports::talaria::plugin0_4_0::sender as wit_sender;
use crate::host::{HostState, PluginEnv};
use crate::instance::{self, Resident, ResidentSlot};
use crate::manifest::Kind;
use crate::plugin::Plugin;
use talaria_protocol::PluginError;

/// Longest text of one inbound message kept, in characters.
const MAX_TEXT_CHARS: usize = 32 * 1024;
/// Largest attachment kept in memory; bigger ones arrive without their bytes.
const MAX_ATTACHMENT: usize = 10 * 1024 * 1024;
/// Most events one poll or webhook may hand in.
const MAX_EVENTS: usize = 256;
/// Longest ids and names kept, in characters.
const MAX_ID_CHARS: usize = 256;
/// The longest a poll may wait: the call must answer within its deadline.
pub const MAX_POLL_WAIT: Duration = Duration::from_secs(25);
/// Most instances per account that only send (API 0.4.0 `sender`), beside the connected one.
pub const SENDERS: usize = 16;

/// Where a conversation happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatType {
    Dm,
    Group,
    Channel,
}

/// The markup a platform shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    Plain,
    TelegramHtml,
    MatrixHtml,
    SlackMrkdwn,
    DiscordMarkdown,
}

/// What `connect` found out about the account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountInfo {
    pub bot_id: String,
    pub bot_name: String,
    pub format: TextFormat,
    /// Longest message, in characters (at least 100).
    pub max_length: usize,
    pub can_edit: bool,
    pub edit_interval: Duration,
    pub buttons: bool,
    pub polls: bool,
}

/// A file that came with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub kind: String,
    pub name: String,
    pub mime: String,
    pub size: u64,
    /// Empty when the adapter did not fetch it (or it was over 10 MiB).
    pub data: Vec<u8>,
}

/// A message someone sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundMessage {
    pub id: String,
    pub chat_id: String,
    pub chat_type: ChatType,
    pub chat_name: String,
    pub thread_id: Option<String>,
    pub sender_id: String,
    pub sender_name: String,
    pub text: String,
    pub mentions_bot: bool,
    pub reply_to: Option<String>,
    pub attachments: Vec<Attachment>,
}

/// Someone pressed a button the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ButtonPress {
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub sender_id: String,
    pub sender_name: String,
    pub message_id: String,
    pub data: String,
}

/// Something that happened on the platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlatformEvent {
    Message(InboundMessage),
    Button(ButtonPress),
}

/// A button under a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Button {
    pub label: String,
    pub data: String,
}

/// A message to send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outbound {
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub text: String,
    pub plain: String,
    pub reply_to: Option<String>,
    pub buttons: Vec<Button>,
}

/// A request to one of the account's webhook routes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The HTTP answer to a webhook request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What a webhook request amounted to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookOutcome {
    /// `None`: answer with the reply to the first event.
    pub response: Option<WebhookResponse>,
    pub events: Vec<PlatformEvent>,
}

/// What the platform says about a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatInfo {
    pub id: String,
    pub name: String,
    pub chat_type: ChatType,
}

/// Why an adapter call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdapterError {
    /// Worth trying again, after `retry_after` when the platform said.
    Transient { message: String, retry_after: Option<Duration> },
    /// Will fail however often it is tried.
    Permanent(String),
    /// The instance trapped, ran out of time or hit a limit; it was dropped and the next call
    /// makes a new one.
    Crashed(String),
}

impl AdapterError {
    /// Whether trying again later may work.
    pub fn is_transient(&self) -> bool {
        !matches!(self, AdapterError::Permanent(_))
    }
}

impl std::fmt::Display for AdapterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdapterError::Transient { message, retry_after: Some(after) } => {
                write!(f, "{message} (try again in {:.1}s)", after.as_secs_f32())
            }
            AdapterError::Transient { message, retry_after: None } => f.write_str(message),
            AdapterError::Permanent(message) | AdapterError::Crashed(message) => f.write_str(message),
        }
    }
}

/// One account to run an adapter for.
#[derive(Debug, Clone, Default)]
pub struct AccountSpec {
    /// The account's name (`[gateway.platforms.NAME]`); its instance reads it as `account`.
    pub name: String,
    /// The settings `config.get` answers from, over the plugin's `[plugins.NAME.config]`.
    pub config: toml::Table,
    /// Where the platform is when not at the adapter's default hosts: every network and secret
    /// grant of this account's instance names this host instead.
    pub host: Option<HostPattern>,
    /// For a secret the adapter asks for by one name, the environment (or `.env`) name holding
    /// this account's value: two accounts of one adapter, two tokens.
    pub secret_names: std::collections::BTreeMap<String, String>,
}

/// The resident instance of an adapter plugin for one account.
pub struct Adapter {
    /// The runtime, plugin and environment the account runs in; [`Adapter::rebind`] replaces
    /// them when the plugins are reloaded.
    bound: std::sync::RwLock<Arc<Bound>>,
    /// What the account was opened with, to bind it again.
    spec: AccountSpec,
    slot: tokio::sync::Mutex<Option<Resident<wit::Guest>>>,
    /// Whether the instance in `slot` has connected: every other call waits for that, so an
    /// instance made again after a crash is never used before its `connect`.
    connected: std::sync::atomic::AtomicBool,
    /// The instance in `slot` belongs to a binding that was replaced: the next call drops it.
    stale: std::sync::atomic::AtomicBool,
    /// Instances that only send, made as concurrent sends need them.
    senders: Senders,
}

/// The instances of an account that only send (`send`, `edit`, `typing`, `chat-info`), for
/// adapters that export `sender` (API 0.4.0): sends for different chats then run side by
/// side, and beside the long poll, instead of one after another on the connected instance.
#[derive(Default)]
struct Senders {
    slots: [tokio::sync::Mutex<Option<Resident<SendGuest>>>; SENDERS],
    /// A sending instance was made ready: sends go to them.
    ready: std::sync::atomic::AtomicBool,
    /// The adapter said it sends only from its connected instance (or exports no `sender`).
    unsupported: std::sync::atomic::AtomicBool,
    /// The instances belong to a binding that was replaced: the next send drops them.
    stale: std::sync::atomic::AtomicBool,
    /// Where the next send waits when every slot is busy.
    next: std::sync::atomic::AtomicUsize,
}

/// A sending instance's exports, and whether its `prepare` succeeded.
#[derive(Clone)]
struct SendGuest {
    adapter: wit::Guest,
    sender: wit_sender::Guest,
    ready: Arc<std::sync::atomic::AtomicBool>,
}

/// Why a sending instance did not make the call.
enum NotSent {
    /// The adapter's own error from the call.
    Adapter(wit::AdapterError),
    /// `prepare` said the adapter sends only from its connected instance.
    Unsupported,
    /// `prepare` failed for now.
    NotReady(String),
}

impl Senders {
    /// Drop every sending instance (after the ones in use finish their call).
    async fn clear(&self) {
        for slot in &self.slots {
            slot.lock().await.take();
        }
    }

    /// A free slot, or (all busy) the next one in turn to wait for.
    async fn take(&self) -> tokio::sync::MutexGuard<'_, Option<Resident<SendGuest>>> {
        for slot in &self.slots {
            if let Ok(guard) = slot.try_lock() {
                return guard;
            }
        }
        let at = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SENDERS;
        self.slots[at].lock().await
    }
}

/// An account bound to one runtime's plugin.
struct Bound {
    runtime: Arc<Runtime>,
    plugin: Arc<Plugin>,
    env: Arc<PluginEnv>,
}

/// `grants` with every host replaced by `host`.
fn rehosted(grants: &Grants, host: &HostPattern) -> Grants {
    let caps: Vec<Capability> = grants
        .caps
        .iter()
        .map(|c| match c {
            Capability::Net(_) => Capability::Net(host.clone()),
            Capability::Secret { name, .. } => Capability::Secret { name: name.clone(), host: host.clone() },
            other => other.clone(),
        })
        .collect();
    Grants { caps, ignored: Vec::new() }
}

impl Runtime {
    /// An adapter for `account`, run by the platform plugin `plugin`. Nothing runs until the
    /// first call.
    ///
    /// # Errors
    /// No enabled plugin of that name, or it is not a platform adapter.
    pub fn adapter(self: &Arc<Self>, plugin: &str, account: AccountSpec) -> Result<Adapter, PluginError> {
        let bound = self.bind(plugin, &account)?;
        Ok(Adapter {
            bound: std::sync::RwLock::new(Arc::new(bound)),
            spec: account,
            slot: Default::default(),
            connected: Default::default(),
            stale: Default::default(),
            senders: Senders::default(),
        })
    }

    /// `account` bound to this runtime's plugin `plugin`.
    fn bind(self: &Arc<Self>, plugin: &str, account: &AccountSpec) -> Result<Bound, PluginError> {
        let found = self.plugins.iter().find(|p| p.name() == plugin).cloned().ok_or_else(|| {
            let adapters: Vec<&str> = self.plugins.iter().filter(|p| p.is(Kind::Platform)).map(|p| p.name()).collect();
            PluginError::Unavailable(format!(
                "no plugin named '{plugin}' is installed (platform adapters here: {})",
                if adapters.is_empty() { "none".to_string() } else { adapters.join(", ") }
            ))
        })?;
        Self::check_enabled(&found).map_err(PluginError::Unavailable)?;
        if !found.is(Kind::Platform) {
            let kinds: Vec<&str> = found.kinds().iter().map(|k| k.name()).collect();
            return Err(PluginError::Unavailable(format!(
                "plugin '{plugin}' is not a platform adapter (its kinds: {})",
                kinds.join(", ")
            )));
        }
        let mut config = found.env.config.clone();
        config.extend(account.config.clone());
        config.insert("account".into(), toml::Value::String(account.name.clone()));
        let grants = match &account.host {
            Some(host) => Arc::new(rehosted(&found.env.grants, host)),
            None => found.env.grants.clone(),
        };
        let own_secrets = (!account.secret_names.is_empty()).then(|| {
            let host = found.env.services.secrets.clone();
            let values: Vec<(String, String)> = found
                .manifest
                .secret_headers
                .iter()
                .filter_map(|(name, _)| {
                    let from = account.secret_names.get(name).map_or(name, String::as_str);
                    host.value(from).map(|v| (name.to_string(), v))
                })
                .collect();
            Arc::new(crate::secrets::Secrets::from_pairs(values.iter().map(|(k, v)| (k.as_str(), v.as_str()))))
        });
        let env = Arc::new(found.env.for_account(config, grants, own_secrets));
        Ok(Bound { runtime: self.clone(), plugin: found, env })
    }
}

impl Adapter {
    fn bound(&self) -> Arc<Bound> {
        self.bound.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The plugin's name.
    pub fn plugin(&self) -> String {
        self.bound().plugin.name().to_string()
    }

    /// The grants this account's instance runs with.
    pub fn grants(&self) -> Arc<Grants> {
        self.bound().env.grants.clone()
    }

    /// The value of the secret the adapter asks for as `name`, for this account.
    pub fn secret_value(&self, name: &str) -> Option<String> {
        self.bound().env.secrets().value(name)
    }

    /// Run the account on `runtime`'s plugin of the same name from now on (the plugins were
    /// reloaded): a call running finishes on the old instance; the next call drops it and is
    /// refused until the account connects again.
    ///
    /// # Errors
    /// `runtime` has no such enabled platform adapter; the old binding stays.
    pub fn rebind(&self, runtime: &Arc<Runtime>) -> Result<(), PluginError> {
        use std::sync::atomic::Ordering;
        let plugin = self.bound().plugin.name().to_string();
        let bound = runtime.bind(&plugin, &self.spec)?;
        *self.bound.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(bound);
        self.stale.store(true, Ordering::SeqCst);
        self.connected.store(false, Ordering::SeqCst);
        self.senders.stale.store(true, Ordering::SeqCst);
        self.senders.ready.store(false, Ordering::SeqCst);
        self.senders.unsupported.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Whether the instance has connected (and not crashed since).
    pub fn is_connected(&self) -> bool {
        self.connected.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// One call on the resident instance; an adapter error is a value, a trap a crash (which
    /// leaves the adapter to be connected again). Every call but `connect` is refused, as
    /// transient, until the instance has connected.
    async fn call<T>(
        &self,
        what: &str,
        f: impl AsyncFnOnce(&mut Store<HostState>, &wit::Guest) -> wasmtime::Result<Result<T, wit::AdapterError>>,
    ) -> Result<T, AdapterError> {
        use std::sync::atomic::Ordering;
        if what != "connect" && !self.is_connected() {
            return Err(AdapterError::Transient {
                message: format!("platform adapter '{}' (account {}) is not connected", self.plugin(), self.spec.name),
                retry_after: None,
            });
        }
        let result = self.call_instance(what, f).await;
        match (&result, what) {
            (Err(AdapterError::Crashed(_)), _) => self.connected.store(false, Ordering::SeqCst),
            (Ok(_), "connect") => self.connected.store(true, Ordering::SeqCst),
            _ => {}
        }
        result
    }

    async fn call_instance<T>(
        &self,
        what: &str,
        f: impl AsyncFnOnce(&mut Store<HostState>, &wit::Guest) -> wasmtime::Result<Result<T, wit::AdapterError>>,
    ) -> Result<T, AdapterError> {
        let bound = self.bound();
        let who = format!("platform adapter '{}' (account {})", bound.plugin.name(), self.spec.name);
        if self.stale.swap(false, std::sync::atomic::Ordering::SeqCst) {
            // The instance of the binding that was replaced goes; this call makes a new one.
            self.slot.lock().await.take();
        }
        let (prepared, _) = bound.runtime.prepared(&bound.plugin).map_err(AdapterError::Crashed)?;
        let (engine, _) = bound.runtime.engine().map_err(|e| AdapterError::Crashed(e.to_string()))?;
        let indices =
            prepared.adapter.as_ref().ok_or_else(|| AdapterError::Crashed(format!("{who} exports no adapter")))?;
        let limits = bound.plugin.limits_for(Kind::Platform);
        let site = self.site(&bound);
        let result = instance::run_resident(
            engine,
            &bound.env,
            ResidentSlot {
                slot: &mut *self.slot.lock().await,
                pre: &prepared.pre,
                load: |store: &mut Store<HostState>, instance: &Instance| indices.load(store, instance),
            },
            site,
            limits,
            async |store, guest| f(store, guest).await.map(Ok),
        )
        .await;
        let scan = &bound.env.services.scan;
        match result {
            Ok((Ok(value), _)) => Ok(value),
            Ok((Err(e), denials)) => Err(adapter_error(e, &denials, scan)),
            Err(failure) => Err(crash_error(failure, &format!("{who} {what}"), limits, scan)),
        }
    }

    /// Where the account's calls run (the runtime's workspace), and for whom.
    fn site(&self, bound: &Bound) -> Site {
        Site::shared(
            bound.runtime.workspace.clone(),
            Caller { session_id: format!("gateway:{}", self.spec.name), call_id: String::new() },
        )
    }

    /// A call that only sends (`send`, `edit`, `typing`, `chat-info`): on an instance of its
    /// own once [`Adapter::prepare_senders`] found the adapter can send from several (API
    /// 0.4.0 `sender`), else on the connected one. Either way refused, as transient, until the
    /// account has connected. A crash of a sending instance drops that instance only: the
    /// connected one keeps polling.
    async fn call_out<T>(
        &self,
        what: &str,
        f: impl AsyncFnOnce(&mut Store<HostState>, &wit::Guest) -> wasmtime::Result<Result<T, wit::AdapterError>>,
    ) -> Result<T, AdapterError> {
        if !self.sends_apart() || !self.is_connected() {
            return self.call(what, f).await;
        }
        self.call_sender(what, f).await.unwrap_or_else(|| {
            Err(AdapterError::Transient {
                message: format!(
                    "platform adapter '{}' (account {}) no longer sends from several instances; it sends from its connected one from now on",
                    self.plugin(),
                    self.spec.name
                ),
                retry_after: None,
            })
        })
    }

    /// `f` on a sending instance, made ready by `prepare` first if it is new; `None` when the
    /// adapter cannot send from one (it exports no `sender`, or its `prepare` said so), which
    /// is remembered.
    async fn call_sender<T>(
        &self,
        what: &str,
        f: impl AsyncFnOnce(&mut Store<HostState>, &wit::Guest) -> wasmtime::Result<Result<T, wit::AdapterError>>,
    ) -> Option<Result<T, AdapterError>> {
        use std::sync::atomic::Ordering;
        let bound = self.bound();
        let who = format!("platform adapter '{}' (account {}) sending", bound.plugin.name(), self.spec.name);
        if self.senders.stale.swap(false, Ordering::SeqCst) {
            self.senders.clear().await;
        }
        let crashed = |e: String| Some(Err(AdapterError::Crashed(e)));
        let (prepared, _) = match bound.runtime.prepared(&bound.plugin) {
            Ok(p) => p,
            Err(e) => return crashed(e),
        };
        let (Some(adapter), Some(sender)) = (prepared.adapter.as_ref(), prepared.sender.as_ref()) else {
            self.senders.unsupported.store(true, Ordering::SeqCst);
            return None;
        };
        let (engine, _) = match bound.runtime.engine() {
            Ok(e) => e,
            Err(e) => return crashed(e.to_string()),
        };
        let limits = bound.plugin.limits_for(Kind::Platform);
        let site = self.site(&bound);
        let load = |store: &mut Store<HostState>, instance: &Instance| {
            Ok(SendGuest {
                adapter: adapter.load(&mut *store, instance)?,
                sender: sender.load(&mut *store, instance)?,
                ready: Arc::default(),
            })
        };
        let mut slot = self.senders.take().await;
        let result = instance::run_resident(
            engine,
            &bound.env,
            ResidentSlot { slot: &mut slot, pre: &prepared.pre, load },
            site,
            limits,
            async |store, guest: &SendGuest| {
                if !guest.ready.load(Ordering::SeqCst) {
                    match guest.sender.call_prepare(&mut *store).await? {
                        Ok(true) => guest.ready.store(true, Ordering::SeqCst),
                        Ok(false) => return Ok(Ok(Err(NotSent::Unsupported))),
                        Err(text) => return Ok(Ok(Err(NotSent::NotReady(text)))),
                    }
                }
                Ok(Ok(f(store, &guest.adapter).await?.map_err(NotSent::Adapter)))
            },
        )
        .await;
        let scan = &bound.env.services.scan;
        Some(match result {
            Ok((Ok(value), _)) => {
                self.senders.ready.store(true, Ordering::SeqCst);
                Ok(value)
            }
            Ok((Err(NotSent::Unsupported), _)) => {
                slot.take();
                self.senders.unsupported.store(true, Ordering::SeqCst);
                tracing::debug!(plugin = %bound.plugin.name(), "the adapter sends from its connected instance only");
                return None;
            }
            Ok((Err(NotSent::NotReady(text)), denials)) => Err(AdapterError::Transient {
                message: scan.redacted(with_denials(clip(text), &denials)),
                retry_after: None,
            }),
            Ok((Err(NotSent::Adapter(e)), denials)) => Err(adapter_error(e, &denials, scan)),
            Err(failure) => Err(crash_error(failure, &format!("{who} {what}"), limits, scan)),
        })
    }

    /// Log in and find out who the bot is.
    ///
    /// # Errors
    /// The platform refused or failed, or the instance crashed.
    pub async fn connect(&self) -> Result<AccountInfo, AdapterError> {
        let a = self.call("connect", async |store, g| g.call_connect(store).await).await?;
        Ok(AccountInfo {
            bot_id: short(a.bot_id),
            bot_name: short(a.bot_name),
            format: match a.format {
                wit::TextFormat::Plain => TextFormat::Plain,
                wit::TextFormat::TelegramHtml => TextFormat::TelegramHtml,
                wit::TextFormat::MatrixHtml => TextFormat::MatrixHtml,
                wit::TextFormat::SlackMrkdwn => TextFormat::SlackMrkdwn,
                wit::TextFormat::DiscordMarkdown => TextFormat::DiscordMarkdown,
            },
            max_length: (a.max_length as usize).clamp(100, 1 << 20),
            can_edit: a.can_edit,
            edit_interval: Duration::from_millis(a.edit_interval_ms.clamp(250, 60_000).into()),
            buttons: a.buttons,
            polls: a.polls,
        })
    }

    /// New events, waiting at most `wait` (capped at [`MAX_POLL_WAIT`]).
    ///
    /// # Errors
    /// As for [`Adapter::connect`].
    pub async fn poll(&self, wait: Duration) -> Result<Vec<PlatformEvent>, AdapterError> {
        let ms = u32::try_from(wait.min(MAX_POLL_WAIT).as_millis()).unwrap_or(u32::MAX);
        let events = self.call("poll", async |store, g| g.call_poll(store, ms).await).await?;
        Ok(events_of(events))
    }

    /// A request to one of the account's webhook routes (already authenticated by the host).
    ///
    /// # Errors
    /// As for [`Adapter::connect`].
    pub async fn handle_webhook(&self, request: WebhookRequest) -> Result<WebhookOutcome, AdapterError> {
        let req = wit::Request {
            method: request.method,
            path: request.path,
            query: request.query,
            headers: request.headers,
            body: request.body,
        };
        let out = self.call("handle-webhook", async |store, g| g.call_handle_webhook(store, &req).await).await?;
        Ok(WebhookOutcome {
            response: out.response.map(|r| WebhookResponse { status: r.status, headers: r.headers, body: r.body }),
            events: events_of(out.events),
        })
    }

    /// Send a message; its id on the platform.
    ///
    /// # Errors
    /// As for [`Adapter::connect`].
    pub async fn send(&self, message: &Outbound) -> Result<String, AdapterError> {
        let msg = outbound(message);
        self.call_out("send", async |store, g| g.call_send(store, &msg).await).await.map(short)
    }

    /// Replace the text (and buttons) of a message the bot sent.
    ///
    /// # Errors
    /// As for [`Adapter::connect`].
    pub async fn edit(&self, message_id: &str, message: &Outbound) -> Result<(), AdapterError> {
        let msg = outbound(message);
        self.call_out("edit", async |store, g| g.call_edit(store, message_id, &msg).await).await
    }

    /// Show that the bot is writing.
    ///
    /// # Errors
    /// As for [`Adapter::connect`].
    pub async fn typing(&self, chat_id: &str, thread_id: Option<&str>) -> Result<(), AdapterError> {
        let thread = thread_id.map(str::to_string);
        self.call_out("typing", async |store, g| g.call_typing(store, chat_id, thread.as_deref()).await).await
    }

    /// What the platform says about a chat.
    ///
    /// # Errors
    /// As for [`Adapter::connect`].
    pub async fn chat_info(&self, chat_id: &str) -> Result<ChatInfo, AdapterError> {
        let chat = self.call_out("chat-info", async |store, g| g.call_chat_info(store, chat_id).await).await?;
        Ok(ChatInfo { id: short(chat.id), name: short(chat.name), chat_type: chat_type(chat.chat_type) })
    }

    /// Make one instance that only sends ready, when the adapter can send from several (it
    /// exports `sender`, API 0.4.0, and its `prepare` says yes): from then on
    /// [`Adapter::sends_apart`]. An answer of "not now" leaves sends on the connected instance
    /// until asked again.
    pub async fn prepare_senders(&self) -> bool {
        if self.is_connected() && !self.senders.unsupported.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = self.call_sender("prepare", async |_: &mut Store<HostState>, _: &wit::Guest| Ok(Ok(()))).await;
        }
        self.sends_apart()
    }

    /// Whether this account sends from instances of their own, beside the connected one: a
    /// long poll then holds up no reply.
    pub fn sends_apart(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.senders.ready.load(Ordering::SeqCst) && !self.senders.unsupported.load(Ordering::SeqCst)
    }

    /// Drop the instance; the next call makes a new one (and must `connect` first).
    pub async fn reset(&self) {
        self.connected.store(false, std::sync::atomic::Ordering::SeqCst);
        self.slot.lock().await.take();
        self.senders.clear().await;
    }
}

fn outbound(m: &Outbound) -> wit::Outbound {
    wit::Outbound {
        chat_id: m.chat_id.clone(),
        thread_id: m.thread_id.clone(),
        text: m.text.clone(),
        plain: m.plain.clone(),
        reply_to: m.reply_to.clone(),
        buttons: m.buttons.iter().map(|b| wit::Button { label: b.label.clone(), data: b.data.clone() }).collect(),
    }
}

fn chat_type(t: wit::ChatType) -> ChatType {
    match t {
        wit::ChatType::Dm => ChatType::Dm,
        wit::ChatType::Group => ChatType::Group,
        wit::ChatType::Channel => ChatType::Channel,
    }
}

/// The events an adapter handed in, within bounds, without control characters in ids and names.
fn events_of(events: Vec<wit::Event>) -> Vec<PlatformEvent> {
    if events.len() > MAX_EVENTS {
        tracing::warn!("a platform adapter handed in {} events at once; the first {MAX_EVENTS} are kept", events.len());
    }
    events
        .into_iter()
        .take(MAX_EVENTS)
        .map(|e| match e {
            wit::Event::Message(m) => PlatformEvent::Message(InboundMessage {
                id: short(m.id),
                chat_id: short(m.chat_id),
                chat_type: chat_type(m.chat_type),
                chat_name: short(m.chat_name),
                thread_id: m.thread_id.map(short),
                sender_id: short(m.sender_id),
                sender_name: short(m.sender_name),
                text: clip(m.text),
                mentions_bot: m.mentions_bot,
                reply_to: m.reply_to.map(short),
                attachments: m
                    .attachments
                    .into_iter()
                    .map(|a| Attachment {
                        kind: short(a.kind),
                        name: short(a.name),
                        mime: short(a.mime),
                        size: a.size,
                        data: if a.data.len() > MAX_ATTACHMENT { Vec::new() } else { a.data },
                    })
                    .collect(),
            }),
            wit::Event::Button(b) => PlatformEvent::Button(ButtonPress {
                chat_id: short(b.chat_id),
                thread_id: b.thread_id.map(short),
                sender_id: short(b.sender_id),
                sender_name: short(b.sender_name),
                message_id: short(b.message_id),
                data: short(b.data),
            }),
        })
        .collect()
}

/// A call that trapped or missed its deadline, as the gateway sees it.
fn crash_error(
    failure: instance::Failure,
    what: &str,
    limits: instance::CallLimits,
    scan: &crate::leak::SecretScan,
) -> AdapterError {
    AdapterError::Crashed(scan.redacted(failure.into_plugin_error(what, limits).to_string()))
}

/// An adapter's own error, its text capped, with what the host refused it, redacted.
fn adapter_error(e: wit::AdapterError, denials: &[String], scan: &crate::leak::SecretScan) -> AdapterError {
    match e {
        wit::AdapterError::Transient((message, after)) => AdapterError::Transient {
            message: scan.redacted(with_denials(clip(message), denials)),
            retry_after: after.map(|ms| Duration::from_millis(ms.into())),
        },
        wit::AdapterError::Permanent(message) => {
            AdapterError::Permanent(scan.redacted(with_denials(clip(message), denials)))
        }
    }
}

fn with_denials(message: String, denials: &[String]) -> String {
    if denials.is_empty() { message } else { format!("{message} [host: {}]", denials.join("; ")) }
}

/// An id or a name, cut to [`MAX_ID_CHARS`] and stripped of control characters.
fn short(text: String) -> String {
    text.chars().filter(|c| !c.is_control()).take(MAX_ID_CHARS).collect()
}

fn clip(text: String) -> String {
    instance::clip(text, MAX_TEXT_CHARS)
}
