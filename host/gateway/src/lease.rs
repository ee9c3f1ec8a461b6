//! One poller per bot account: of the gateway processes sharing a store, the one holding an
//! account's lease polls its bot (the others stand by, and serve its webhooks and turns). The
//! lease is named after a hash of the account's credentials (the token itself is never
//! stored), so two accounts given the same token share it, and two bots never do.

use std::time::Duration;

use sha2::{Digest as _, Sha256};

/// How long a lease lasts unless renewed (the poller renews it every third of it): a poller
/// that died on another machine leaves its bot unpolled at most this long (on this machine,
/// its pid is checked and the lease taken over at once).
pub const ACCOUNT_LEASE_TTL: Duration = Duration::from_secs(30);

/// The lease name for the account of `platform` with `token`.
pub fn account_key(platform: &str, token: &str) -> String {
    let digest = Sha256::digest(format!("{platform}\n{token}").as_bytes());
    format!("gateway:{platform}:{}", hex::encode(&digest[..16]))
}

#[cfg(test)]
mod tests {
    use talaria_core::store::{Leased, Store};

    use super::*;

    #[tokio::test]
    async fn one_poller_per_token_and_the_token_is_never_stored() {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(&dir.path().join("state.db")).expect("store");
        let key = account_key("telegram", "123:SECRET");
        assert!(!key.contains("SECRET") && key.starts_with("gateway:telegram:"), "{key}");
        assert_ne!(key, account_key("telegram", "123:OTHER"));
        assert_ne!(key, account_key("discord", "123:SECRET"));
        let Ok(Leased::Granted(lease)) = store.try_lease(&key, "gateway", ACCOUNT_LEASE_TTL).await else {
            panic!("the first gateway polls")
        };
        assert!(matches!(store.try_lease(&key, "gateway", ACCOUNT_LEASE_TTL).await, Ok(Leased::Held(_))), "one poller");
        store.release_lease(&key, &lease).await.expect("release");
        assert!(matches!(store.try_lease(&key, "gateway", ACCOUNT_LEASE_TTL).await, Ok(Leased::Granted(_))));
    }
}
