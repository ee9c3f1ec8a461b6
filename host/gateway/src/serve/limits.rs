//! What the gateway does at its limits: a chat user over `[gateway.limits]
//! messages_per_minute` is told to slow down, and the owner hears when a `[budget]` limit is
//! reached.

use std::sync::Arc;
use std::time::Duration;

use talaria_core::runtime::adapter::InboundMessage;

use super::{Account, Gateway};

/// Tell the owner in each account's home channel when a spending limit of `[budget]` is
/// reached: once per limit and period, whichever process noticed it (the ledger key is the
/// limit's).
pub(super) async fn budget_reached(gateway: Arc<Gateway>) {
    use talaria_core::cron::target::Target;
    let mut notices = gateway.store.notices().await;
    loop {
        let notice = tokio::select! {
            () = gateway.stop.cancelled() => return,
            notice = notices.recv() => match notice {
                Some(n) => n,
                None => return,
            },
        };
        if notice.topic != talaria_core::budget::BUDGET_REACHED {
            continue;
        }
        let Some((limit, text)) = notice.payload.split_once('\n') else { continue };
        for account in gateway.accounts.values() {
            let home = gateway.config.platforms.get(&account.name).and_then(|p| p.home_channel.as_deref());
            let Some(Ok(Target::Chat { chat, thread, .. })) =
                home.map(|h| format!("{}:{h}", account.name).parse::<Target>())
            else {
                continue;
            };
            let markdown = format!("**A spending limit is reached.** {text}");
            gateway
                .reply(account, &chat, thread.as_deref(), &markdown, &format!("budget:{}:{limit}", account.name))
                .await;
        }
    }
}

impl Gateway {
    /// `m` came over `[gateway.limits] messages_per_minute` from its sender: it is not read,
    /// and they are told once a minute (and the log says so then).
    pub(super) async fn too_fast(&self, account: &Account, m: &InboundMessage, wait: Duration) {
        let key = (account.name.clone(), m.sender_id.clone());
        tracing::debug!(account = %account.name, user = %m.sender_id, message_id = %m.id, "message not read: over the user's messages a minute");
        if self.slowed.take(key).is_err() {
            return;
        }
        let most = self.config.limits.messages_per_minute();
        tracing::warn!(
            account = %account.name,
            user = %m.sender_id,
            "{} sends more than {most} messages a minute; the rest of this minute's are not read",
            m.sender_id
        );
        let text = format!(
            "You are sending messages faster than {most} a minute, so I did not read the last ones. Wait {} s and send again.",
            wait.as_secs().max(1)
        );
        self.reply(
            account,
            &m.chat_id,
            m.thread_id.as_deref(),
            &text,
            &format!("slow:{}:{}:{}", account.name, m.chat_id, m.id),
        )
        .await;
    }
}
