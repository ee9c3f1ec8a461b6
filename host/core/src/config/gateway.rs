//! `[gateway]`: who the messaging gateway answers, its platforms and its webhook routes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::{BusyInput, CommandsMode};

/// `[gateway]`: who the messaging gateway answers, and how chats become sessions. Deny by
/// default: nobody is answered until allowed here or paired (`talaria pairing approve`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayToml {
    /// Answer anyone on every platform (not for a bot strangers can reach).
    #[serde(default)]
    pub allow_all: bool,
    /// Users answered on any platform, as `PLATFORM:USER_ID`.
    #[serde(default)]
    pub allowed_users: Vec<String>,
    /// In groups, one session per user (default) or one shared by the chat.
    #[serde(default)]
    pub group_sessions: GroupSessions,
    /// Per platform: `[gateway.platforms.telegram]`. Each table is an account the gateway
    /// serves with the platform adapter plugin of its name (or `plugin`).
    #[serde(default)]
    pub platforms: BTreeMap<String, PlatformToml>,
    /// Where each chat's session gets its own working directory (default: beside talaria's
    /// home, `~/.talaria-chats`; never inside the home, where plugins are granted nothing).
    pub workspaces: Option<PathBuf>,
    /// What a message arriving while the agent works on the chat's last one does (default
    /// `interrupt`, as in the terminal; `queue` answers it next; `steer` adds it to the turn).
    #[serde(default)]
    pub busy_input: BusyInput,
    /// The toolsets chat sessions get, unless their platform names its own (default: files,
    /// web, todo, clarify and cronjob: no terminal, no child agents, no memory or session search).
    pub toolsets: Option<Vec<String>>,
    /// Where the webhook listener binds (default `127.0.0.1:8644`). Binding anywhere but
    /// loopback needs `listen_public = true`, and then every route must be authenticated.
    pub listen: Option<String>,
    #[serde(default)]
    pub listen_public: bool,
    /// The environment variable (or `.env` entry) holding the bearer token of `/metrics` on the
    /// listener; unset, the listener serves no metrics.
    pub metrics_token: Option<String>,
    /// Let chat sessions share the owner's memory (MEMORY.md, USER.md, the memory provider,
    /// past sessions). Off by default: a gateway serves several people, and what one says must
    /// not reach another. Turn it on for a bot only you talk to.
    #[serde(default)]
    pub memory: bool,
    /// How long a chat's session stays loaded without a message (default 10 minutes). Then
    /// it is put away and its memory returned; its next message reads it back from the store.
    pub idle_minutes: Option<std::num::NonZeroU64>,
    /// What chats in full flow (a message within two seconds of the last answer) keep of their
    /// histories between messages, together, in MiB (default 4). Past it, a chat reads its
    /// history back from the store with each message: the gateway's memory stays bounded
    /// however many chats talk at once.
    pub history_mib: Option<u64>,
    /// How fast strangers and scripts may go.
    #[serde(default)]
    pub limits: LimitsToml,
}

/// `[gateway.limits]`: rates a person never reaches and a script does.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsToml {
    /// Messages one chat user may send a minute (default 20); the rest of that minute's are
    /// not read, and the user is told once.
    pub messages_per_minute: Option<std::num::NonZeroU32>,
    /// Deliveries one webhook route takes a minute (default 120); more are answered `429`.
    pub webhook_per_minute: Option<std::num::NonZeroU32>,
    /// Failed authentications from one address within a minute that lock it out of the
    /// listener for the rest of that minute (default 10).
    pub auth_failures: Option<std::num::NonZeroU32>,
}

impl LimitsToml {
    pub fn messages_per_minute(&self) -> usize {
        self.messages_per_minute.map_or(20, |n| usize::try_from(n.get()).unwrap_or(usize::MAX))
    }

    pub fn webhook_per_minute(&self) -> usize {
        self.webhook_per_minute.map_or(120, |n| usize::try_from(n.get()).unwrap_or(usize::MAX))
    }

    pub fn auth_failures(&self) -> usize {
        self.auth_failures.map_or(10, |n| usize::try_from(n.get()).unwrap_or(usize::MAX))
    }
}

/// The toolsets of chat sessions when nothing else is configured: no terminal, no child agents,
/// and nothing that reads other people's conversations (memory, session search). Jobs a chat
/// schedules (`cronjob`) are made only once a platform admin confirmed them.
pub const GATEWAY_TOOLSETS: &[&str] = &["files", "web", "todo", "clarify", "cronjob", "skills"];

impl GatewayToml {
    /// The toolsets a session on `platform` gets.
    pub fn toolsets_for(&self, platform: &str) -> Vec<String> {
        self.platforms.get(platform).and_then(|p| p.toolsets.clone()).or_else(|| self.toolsets.clone()).unwrap_or_else(
            || {
                let mut sets: Vec<String> = GATEWAY_TOOLSETS.iter().map(|s| (*s).to_string()).collect();
                if self.memory {
                    sets.extend(["memory".to_string(), "session_search".to_string()]);
                }
                sets
            },
        )
    }

    /// What chats in full flow keep of their histories, together, in bytes (`history_mib`).
    pub fn history_bytes(&self) -> usize {
        usize::try_from(self.history_mib.unwrap_or(4).saturating_mul(1024 * 1024)).unwrap_or(usize::MAX)
    }

    /// How long a chat's session stays loaded without a message.
    pub fn idle(&self) -> std::time::Duration {
        std::time::Duration::from_secs(60 * self.idle_minutes.map_or(10, std::num::NonZeroU64::get))
    }

    /// Whether commands of this platform's chats run outside the OS sandbox: only when its own
    /// table says `commands = "unconfined"`, never because `[sandbox] commands` does.
    pub fn unconfined(&self, platform: &str) -> bool {
        self.platforms.get(platform).and_then(|p| p.commands) == Some(CommandsMode::Unconfined)
    }
}

/// How a group chat maps to sessions.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupSessions {
    #[default]
    PerUser,
    Shared,
}

/// `[gateway.platforms.NAME]`: one platform's rules.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformToml {
    /// Answer anyone on this platform.
    #[serde(default)]
    pub allow_all: bool,
    /// Users answered here, by their id on the platform.
    #[serde(default)]
    pub allowed_users: Vec<String>,
    /// Users who may answer approvals (dangerous commands, new hosts) from this platform; they
    /// are answered too.
    #[serde(default)]
    pub admins: Vec<String>,
    /// In groups, answer only messages that mention the bot or reply to it (default true).
    pub require_mention: Option<bool>,
    /// The platform adapter plugin (default: the table's name).
    pub plugin: Option<String>,
    /// Where the platform's API is, when not at the adapter's default (a self-hosted server,
    /// a homeserver): the adapter may reach this host and no other, and its token goes there.
    pub base_url: Option<String>,
    /// Settings the adapter reads (see its plugin.toml's `[config]`).
    #[serde(default)]
    pub settings: toml::Table,
    /// Where this account's secrets are, by the name the adapter asks for them: two accounts
    /// of one adapter each with its own token (`{ TELEGRAM_BOT_TOKEN = "WORK_BOT_TOKEN" }`).
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    /// The toolsets of this platform's sessions (over `[gateway] toolsets`).
    pub toolsets: Option<Vec<String>>,
    /// Serve this account (default true).
    pub enabled: Option<bool>,
    /// Its webhook routes, served at `/webhooks/ACCOUNT/ROUTE` by the gateway's listener.
    #[serde(default)]
    pub routes: BTreeMap<String, RouteToml>,
    /// Where scheduled jobs delivering to this account (`--deliver NAME`) send their answers:
    /// a chat id, or `CHAT:THREAD`.
    pub home_channel: Option<String>,
    /// How its chats' commands run: confined in the OS sandbox (the default, whatever
    /// `[sandbox] commands` says) or `"unconfined"`.
    pub commands: Option<CommandsMode>,
}

/// `[gateway.platforms.NAME.routes.ROUTE]`: one webhook route. Every route is authenticated;
/// the adapter reads the route's other settings (a prompt template, where replies go).
#[derive(Debug, Clone, Deserialize)]
pub struct RouteToml {
    /// How requests are signed ([`RouteAuth`]): `hmac`, `slack-v0`, `stripe` or `token`.
    pub auth: RouteAuth,
    /// The header carrying the signature or token (`X-Slack-Signature` for `slack-v0`,
    /// `Stripe-Signature` for `stripe`).
    pub header: String,
    /// `slack-v0` only: the header carrying the signed timestamp (default
    /// `X-Slack-Request-Timestamp`).
    pub timestamp_header: Option<String>,
    /// The environment variable (or `.env` entry) holding the key or token.
    pub secret: String,
    /// Largest body taken, in KiB (default 1024).
    pub max_body_kb: Option<usize>,
    /// The header naming each delivery (`X-GitHub-Delivery`): a delivery seen before is refused.
    pub delivery_header: Option<String>,
    /// Everything else, for the adapter.
    #[serde(flatten)]
    pub settings: toml::Table,
}

/// How a webhook route authenticates, and what it can tell of replays (docs/gateway.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouteAuth {
    /// The header holds the body's HMAC-SHA256 in hex (`sha256=` optional), as GitHub's. Nothing
    /// signed says when: a body seen in the last day is refused as a replay.
    Hmac,
    /// Slack's scheme: `v0=HEX` of HMAC-SHA256 over `v0:TIMESTAMP:BODY`, the timestamp in its
    /// own header. Older than five minutes (or as far ahead) is refused, and so is a signature
    /// seen before.
    SlackV0,
    /// Stripe's scheme: `t=TIMESTAMP,v1=HEX[,v1=HEX]` of HMAC-SHA256 over `TIMESTAMP.BODY`;
    /// stale or seen before is refused, as for `slack-v0`.
    Stripe,
    /// The header holds the secret itself (compared in constant time). It signs nothing, so it
    /// cannot tell a replay from a new request: only `delivery_header` refuses repeats.
    Token,
}
