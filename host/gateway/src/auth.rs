//! Who the gateway answers. Deny by default; the first rule that matches allows, in the
//! reference's order:
//!
//! 1. the platform answers anyone (`[gateway.platforms.X] allow_all`);
//! 2. the user is paired (`talaria pairing approve`);
//! 3. the user is allowed on the platform (`allowed_users`, or `admins`);
//! 4. the user is allowed everywhere (`[gateway] allowed_users`, as `PLATFORM:USER_ID`);
//! 5. everyone is answered everywhere (`[gateway] allow_all`);
//!
//! else the user is refused: in a direct message they are offered pairing, in a group nothing is
//! said. In groups and channels an allowed user is answered only when they address the bot
//! (mention it or reply to it) unless `require_mention = false`. Only admins answer approvals.

use talaria_core::config::{GatewayToml, GroupSessions, PlatformToml};

use crate::{ChatType, Inbound};

/// What to do with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Answer it; `admin`: the sender may also answer approvals.
    Answer { admin: bool },
    /// A stranger in a direct message: give them a pairing code for the owner to approve.
    OfferPairing,
    /// Say nothing: a stranger in a group, or a group message not addressed to the bot.
    Ignore,
}

/// The decision for `message` under `config`; `paired` says whether the store has its sender
/// paired on its platform.
pub fn authorize(config: &GatewayToml, message: &Inbound, paired: bool) -> Decision {
    let default = PlatformToml::default();
    let platform = config.platforms.get(&message.platform).unwrap_or(&default);
    let user = message.sender_id.as_str();
    let admin = platform.admins.iter().any(|a| a == user);
    let global = format!("{}:{user}", message.platform);
    let allowed = platform.allow_all
        || paired
        || admin
        || platform.allowed_users.iter().any(|u| u == user)
        || config.allowed_users.contains(&global)
        || config.allow_all;
    let group = message.chat_type != ChatType::Dm;
    match (allowed, group) {
        (false, false) => Decision::OfferPairing,
        (false, true) => Decision::Ignore,
        (true, true) if platform.require_mention.unwrap_or(true) && !message.addressed => Decision::Ignore,
        (true, _) => Decision::Answer { admin },
    }
}

/// The session `message` belongs to: `agent:main:PLATFORM:dm:CHAT`, or for groups
/// `agent:main:PLATFORM:group:CHAT[:THREAD][:USER]` (one per user unless the chat shares one).
/// Parts are escaped so that no id can pose as another's (`:` and `%` are percent-encoded).
pub fn session_key(config: &GatewayToml, message: &Inbound) -> String {
    let part = |s: &str| s.replace('%', "%25").replace(':', "%3A");
    let platform = part(&message.platform);
    let chat = part(&message.chat_id);
    if message.chat_type == ChatType::Dm {
        return format!("agent:main:{platform}:dm:{chat}");
    }
    let mut key = format!("agent:main:{platform}:group:{chat}");
    if let Some(thread) = &message.thread_id {
        key.push_str(&format!(":t={}", part(thread)));
    }
    if config.group_sessions == GroupSessions::PerUser {
        key.push_str(&format!(":u={}", part(&message.sender_id)));
    }
    key
}

/// A finding about the `[gateway]` rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Fine, and worth saying.
    Ok(String),
    /// Works, but likely not what an operator wants.
    Warn(String),
    /// Wrong: the gateway would refuse to start with it.
    Fail(String),
}

/// What is wrong or risky in `config`'s rules (nothing when there is no `[gateway]` to speak of).
pub fn check(config: &GatewayToml) -> Vec<Finding> {
    let mut out = Vec::new();
    if config.allow_all {
        out.push(Finding::Warn(
            "[gateway] allow_all answers anyone on every platform: whoever finds the bot uses your model and tools"
                .into(),
        ));
    }
    for entry in &config.allowed_users {
        match entry.split_once(':') {
            Some((platform, user)) if !platform.is_empty() && !user.is_empty() => {}
            _ => out.push(Finding::Fail(format!(
                "[gateway] allowed_users entry \"{entry}\" is not PLATFORM:USER_ID (e.g. \"telegram:4242\")"
            ))),
        }
    }
    if let Err(e) = crate::serve::listen_address(config) {
        out.push(Finding::Fail(e));
    } else if config.listen_public {
        out.push(Finding::Warn(format!(
            "[gateway] listen_public: the webhook listener on {} takes requests from other machines (every route is authenticated)",
            config.listen.as_deref().unwrap_or(crate::serve::DEFAULT_LISTEN)
        )));
    }
    if config.memory {
        out.push(Finding::Warn(
            "[gateway] memory = true: chat sessions share your memory and past sessions; keep it for a bot only you talk to".into(),
        ));
    }
    for (name, p) in &config.platforms {
        if let Some(url) = &p.base_url
            && let Err(e) = crate::serve::base_host(url)
        {
            out.push(Finding::Fail(format!("[gateway.platforms.{name}] base_url: {e}")));
        }
        if p.allow_all && !p.routes.is_empty() {
            // A webhook account: its senders are machines, each route's secret authorizes.
            out.push(Finding::Ok(format!(
                "{name}: answers every request its routes authenticate (allow_all; each route's secret is the authorization)"
            )));
        } else if p.allow_all {
            out.push(Finding::Warn(format!(
                "[gateway.platforms.{name}] allow_all answers anyone on {name}: whoever finds the bot uses your model and tools"
            )));
        }
        if p.admins.is_empty() {
            out.push(Finding::Ok(format!(
                "{name}: no admins, so approvals asked from its chats are denied (add your user id to admins)"
            )));
        } else {
            out.push(Finding::Ok(format!(
                "{name}: {} allowed, {} admins",
                p.allowed_users.len() + p.admins.len(),
                p.admins.len()
            )));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn message(chat_type: ChatType, sender: &str, addressed: bool) -> Inbound {
        Inbound {
            platform: "telegram".into(),
            chat_id: "c1".into(),
            chat_type,
            thread_id: None,
            sender_id: sender.into(),
            sender_name: "someone".into(),
            addressed,
            text: "hi".into(),
        }
    }

    fn config(platform: PlatformToml) -> GatewayToml {
        GatewayToml { platforms: BTreeMap::from([("telegram".to_string(), platform)]), ..GatewayToml::default() }
    }

    #[test]
    fn nobody_is_answered_by_default_and_strangers_in_dms_are_offered_pairing() {
        let c = GatewayToml::default();
        assert_eq!(authorize(&c, &message(ChatType::Dm, "9", false), false), Decision::OfferPairing);
        assert_eq!(authorize(&c, &message(ChatType::Group, "9", true), false), Decision::Ignore);
        assert_eq!(authorize(&c, &message(ChatType::Dm, "9", false), true), Decision::Answer { admin: false });
    }

    #[test]
    fn allow_lists_and_admins_each_let_a_user_in() {
        let platform =
            PlatformToml { allowed_users: vec!["7".into()], admins: vec!["1".into()], ..PlatformToml::default() };
        let c = config(platform);
        assert_eq!(authorize(&c, &message(ChatType::Dm, "7", false), false), Decision::Answer { admin: false });
        assert_eq!(authorize(&c, &message(ChatType::Dm, "1", false), false), Decision::Answer { admin: true });
        assert_eq!(authorize(&c, &message(ChatType::Dm, "8", false), false), Decision::OfferPairing);
        let global = GatewayToml { allowed_users: vec!["telegram:8".into()], ..GatewayToml::default() };
        assert_eq!(authorize(&global, &message(ChatType::Dm, "8", false), false), Decision::Answer { admin: false });
        let elsewhere = GatewayToml { allowed_users: vec!["matrix:8".into()], ..GatewayToml::default() };
        assert_eq!(authorize(&elsewhere, &message(ChatType::Dm, "8", false), false), Decision::OfferPairing);
        let open = config(PlatformToml { allow_all: true, ..PlatformToml::default() });
        assert_eq!(authorize(&open, &message(ChatType::Dm, "x", false), false), Decision::Answer { admin: false });
    }

    #[test]
    fn in_groups_an_allowed_user_is_answered_when_addressing_the_bot() {
        let c = config(PlatformToml { allowed_users: vec!["7".into()], ..PlatformToml::default() });
        assert_eq!(authorize(&c, &message(ChatType::Group, "7", false), false), Decision::Ignore);
        assert_eq!(authorize(&c, &message(ChatType::Group, "7", true), false), Decision::Answer { admin: false });
        let chatty = config(PlatformToml {
            allowed_users: vec!["7".into()],
            require_mention: Some(false),
            ..PlatformToml::default()
        });
        assert_eq!(authorize(&chatty, &message(ChatType::Group, "7", false), false), Decision::Answer { admin: false });
    }

    #[test]
    fn the_rules_are_checked_for_mistakes_and_risks() {
        assert!(check(&GatewayToml::default()).is_empty());
        let mut c = config(PlatformToml { allow_all: true, ..PlatformToml::default() });
        c.allowed_users = vec!["4242".into(), "telegram:7".into()];
        let found = check(&c);
        assert!(found.contains(&Finding::Fail(
            "[gateway] allowed_users entry \"4242\" is not PLATFORM:USER_ID (e.g. \"telegram:4242\")".into()
        )));
        assert!(
            found
                .iter()
                .any(|f| matches!(f, Finding::Warn(w) if w.starts_with("[gateway.platforms.telegram] allow_all")))
        );
        assert!(found.iter().any(|f| matches!(f, Finding::Ok(o) if o.contains("no admins"))));
        // A webhook account answers what its routes authenticate: no warning for that.
        let mut hooks = PlatformToml { allow_all: true, ..PlatformToml::default() };
        let route = serde_json::json!({ "auth": "token", "header": "X-Token", "secret": "CI_TOKEN" });
        hooks.routes.insert("ci".into(), serde_json::from_value(route).expect("a route"));
        let found = check(&config(hooks));
        assert!(!found.iter().any(|f| matches!(f, Finding::Warn(_))), "{found:?}");
        assert!(
            found.iter().any(|f| matches!(f, Finding::Ok(o) if o.contains("each route's secret is the authorization")))
        );
        // The listener off loopback, a base URL that is none, shared memory.
        let mut c = config(PlatformToml { base_url: Some("not a url".into()), ..PlatformToml::default() });
        c.listen = Some("0.0.0.0:9000".into());
        c.memory = true;
        let found = check(&c);
        assert!(
            found.iter().any(|f| matches!(f, Finding::Fail(m) if m.contains("set listen_public = true"))),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|f| matches!(f, Finding::Fail(m) if m.starts_with("[gateway.platforms.telegram] base_url:")))
        );
        assert!(found.iter().any(|f| matches!(f, Finding::Warn(m) if m.starts_with("[gateway] memory = true"))));
    }

    #[test]
    fn session_keys_separate_chats_threads_and_users_and_cannot_be_forged() {
        let c = GatewayToml::default();
        assert_eq!(session_key(&c, &message(ChatType::Dm, "7", false)), "agent:main:telegram:dm:c1");
        let mut m = message(ChatType::Group, "7", true);
        assert_eq!(session_key(&c, &m), "agent:main:telegram:group:c1:u=7");
        m.thread_id = Some("42".into());
        assert_eq!(session_key(&c, &m), "agent:main:telegram:group:c1:t=42:u=7");
        let shared = GatewayToml { group_sessions: GroupSessions::Shared, ..GatewayToml::default() };
        assert_eq!(session_key(&shared, &m), "agent:main:telegram:group:c1:t=42");
        // A chat id that tries to look like another chat's user part stays apart.
        let mut forged = message(ChatType::Group, "7", true);
        forged.chat_id = "c1:u=7".into();
        forged.sender_id = "8".into();
        assert_ne!(session_key(&c, &forged), session_key(&c, &message(ChatType::Group, "7", true)));
        assert_eq!(session_key(&c, &forged), "agent:main:telegram:group:c1%3Au=7:u=8");
    }
}
