//! Approvals in a chat: a turn's request asked of the account's admins (with buttons where the
//! platform has them), and an admin's answer handed to the waiting turn.

use talaria_core::store::inbox::Entry;
use talaria_protocol::{Decision, Op};

use super::{Answer, Worker};
use crate::serve::outbox::{self, Reply};

impl Worker {
    pub(super) async fn on_approval(&mut self, entry: &Entry) {
        let Ok(answer) = serde_json::from_str::<Answer>(&entry.body) else { return };
        let waiting = self.turn.as_ref().and_then(|t| t.approval);
        if waiting != Some(answer.id) {
            return;
        }
        self.conversation.submit(Op::Approve { id: answer.id, decision: answer.decision });
        let verdict = match answer.decision {
            Decision::Deny => "refused it",
            Decision::Session => "allowed it for this session",
            Decision::Once | Decision::Always => "allowed it",
        };
        self.say(
            &format!("{} {verdict}.", answer.by),
            &format!("approved:{}:{}:{}", self.key, self.turn_key(), answer.id),
        )
        .await;
    }

    pub(super) async fn ask_approval(&mut self, a: talaria_protocol::ApprovalNeeded) {
        let Some(message_id) = self.turn.as_ref().map(|t| t.entry.message_id.clone()) else { return };
        let key = format!("approval:{}:{message_id}:{}", self.key, a.id);
        let what = match a.kind {
            talaria_protocol::ApprovalKind::Network => format!("connect to **{}**", a.command),
            talaria_protocol::ApprovalKind::Command => format!("run `{}`", a.command),
            talaria_protocol::ApprovalKind::Schedule => format!("schedule {}", a.command),
            talaria_protocol::ApprovalKind::McpTool => format!("call `{}`", a.command),
            talaria_protocol::ApprovalKind::Skill => a.command.clone(),
        };
        if self.account.admins.is_empty() {
            self.conversation.submit(Op::Approve { id: a.id, decision: Decision::Deny });
            let text = format!(
                "I wanted to {what} ({}), which needs an admin's approval, and no admin is configured for {}; refused.",
                a.reason, self.account.name
            );
            return self.say(&text, &key).await;
        }
        let token = self.gateway.approval_token(&self.key, &self.account.name, &self.chat, a.id).await;
        if let Some(turn) = &mut self.turn {
            turn.approval = Some(a.id);
            turn.tokens.push(token.clone());
        }
        let text = format!(
            "**Approval needed**: {} wants to {what}.\n{}\n\nAn admin can answer with /approve (this once), /approve session or /deny, within {}s.",
            if a.plugin.is_empty() { "the agent".to_string() } else { format!("plugin {}", a.plugin) },
            a.reason,
            a.timeout_secs
        );
        let buttons = match self.account.info() {
            Some(info) if info.buttons => vec![
                ("Allow once".to_string(), format!("ap:{token}:o")),
                ("Allow for this session".to_string(), format!("ap:{token}:s")),
                ("Deny".to_string(), format!("ap:{token}:d")),
            ],
            _ => Vec::new(),
        };
        let reply = Reply { edit: None, reply_to: None, buttons, trace: None };
        let _ = outbox::queue(
            &self.gateway,
            &self.account,
            &self.chat.chat_id,
            self.chat.thread_id.as_deref(),
            &text,
            &reply,
            &key,
        )
        .await;
    }
}
