//! Scheduled jobs' answers, sent: the gateway's side of the seam between it and the runner of
//! scheduled jobs ([`talaria_core::cron::courier::Courier`]; the runner, `talaria-scheduler`, takes
//! one). The runner resolves where an answer goes; [`Ledger`] writes
//! it to the delivery ledger, unrendered (the account's sender renders it in the platform's
//! markup), and has it sent: by this process's gateway when it serves the account, by the
//! gateway serving it elsewhere (it finds the answer in the ledger), or, with none, by the
//! account's adapter started here for the send.

use std::sync::Arc;

use talaria_core::Host;
use talaria_core::config::PlatformToml;
use talaria_core::cron::courier::{BoxFuture, Courier, Parcel, Undelivered};

use super::Gateway;

/// The delivery ledger, as the scheduled-job runner's courier.
pub struct Ledger {
    host: Arc<Host>,
    /// The gateway of this process, if it runs one: it sends to the accounts it serves.
    gateway: Option<Arc<Gateway>>,
}

impl Ledger {
    /// A courier for a process that runs no gateway (`talaria cron tick`, `talaria cron run`).
    pub fn new(host: Arc<Host>) -> Self {
        Self { host, gateway: None }
    }

    /// The courier of the gateway running in this process.
    pub(crate) fn for_gateway(gateway: &Arc<Gateway>) -> Self {
        Self { host: gateway.host.clone(), gateway: Some(gateway.clone()) }
    }

    async fn send(&self, parcel: Parcel<'_>) -> Result<String, Undelivered> {
        let account = parcel.account;
        let config = &self.host.config().gateway;
        let Some(platform) = config.platforms.get(account) else {
            return Err(Undelivered::NoAccount(account.to_string()));
        };
        let store = self.host.store();
        super::outbox::queue_markdown(store, account, parcel.chat, parcel.thread, parcel.markdown, parcel.key)
            .await
            .map_err(|e| Undelivered::Ledger(e.to_string()))?;
        // The gateway of this process serves the account: its sender takes it at once.
        if let Some(served) = self.gateway.as_ref().and_then(|g| g.accounts.get(account)) {
            served.outbox.notify_one();
            return Ok("queued".into());
        }
        send_here(&self.host, account, platform, parcel.key).await.map_err(Undelivered::Platform)
    }
}

impl Courier for Ledger {
    fn deliver<'a>(&'a self, parcel: Parcel<'a>) -> BoxFuture<'a, Result<String, Undelivered>> {
        Box::pin(self.send(parcel))
    }
}

/// Send what the ledger holds for `account` (the parts of the delivery `key` among it) and say
/// how they went. A gateway serving the account elsewhere (it holds the account's lease) finds
/// them in the ledger; with none, the account's adapter is started here for the send.
async fn send_here(host: &Host, account: &str, platform: &PlatformToml, key: &str) -> Result<String, String> {
    let (plugins, _) = host.plugins(host.workspace()).map_err(|e| e.to_string())?;
    let opened = super::open_account(&plugins.runtime(), account, platform)?;
    if let Ok(Some(by)) = host.store().lease_holder(&opened.lease_key).await {
        tracing::debug!(account, "{by} serves the account: it sends the answer");
        return Ok("queued".into());
    }
    let info = opened.adapter.connect().await.map_err(|e| format!("cannot connect to {account}: {e}"))?;
    *super::lock(&opened.info) = Some(info);
    super::outbox::send_due_in(host.store(), &opened).await;
    // The markdown entry is done once rendered: its parts (`KEY:N`) say how it went.
    let parts = host.store().deliveries_by_prefix(&format!("{key}:")).await.map_err(|e| e.to_string())?;
    if let Some((_, _, error)) = parts.iter().find(|(_, state, _)| state == "failed") {
        return Err(error.clone().unwrap_or_else(|| "the platform refused it".into()));
    }
    if let Some((_, _, error)) = parts.iter().find(|(_, state, _)| state == "pending") {
        return Ok(format!("queued (will be retried: {})", error.as_deref().unwrap_or("not sent yet")));
    }
    if parts.is_empty() {
        return Ok("queued".into());
    }
    Ok("sent".into())
}
