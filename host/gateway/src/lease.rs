//! One gateway per bot account: a gateway holds a lease on each account it serves, named after a
//! hash of the account's token (the token itself is never stored), so a second gateway given the
//! same token is refused, saying which process holds it, rather than both answering every message.

use std::time::Duration;

use sha2::{Digest as _, Sha256};
use talaria_store::Store;
use talaria_store::lease::Leased;

/// How long a lease lasts unless renewed (a gateway renews it well within).
pub const ACCOUNT_LEASE_TTL: Duration = Duration::from_secs(60);

/// The lease name for the account of `platform` with `token`.
pub fn account_key(platform: &str, token: &str) -> String {
    let digest = Sha256::digest(format!("{platform}\n{token}").as_bytes());
    format!("gateway:{platform}:{}", hex::encode(&digest[..16]))
}

/// Take the account's lease for this process; the lease token to renew and release it with, or
/// a message naming who serves the account already.
///
/// # Errors
/// The message for the operator when another live gateway holds it, or the store's error.
pub fn claim_account(store: &Store, platform: &str, token: &str) -> Result<String, String> {
    match store.try_lease(&account_key(platform, token), "talaria gateway", ACCOUNT_LEASE_TTL) {
        Ok(Leased::Granted(lease)) => Ok(lease),
        Ok(Leased::Held(by)) => Err(format!(
            "another gateway already serves this {platform} bot (pid {} on {}): one token, one gateway; stop it first or give this one another bot",
            by.pid, by.host
        )),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_gateway_per_token_and_the_token_is_never_stored() {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(&dir.path().join("state.db")).expect("store");
        let key = account_key("telegram", "123:SECRET");
        assert!(!key.contains("SECRET") && key.starts_with("gateway:telegram:"), "{key}");
        assert_ne!(key, account_key("telegram", "123:OTHER"));
        assert_ne!(key, account_key("discord", "123:SECRET"));
        let lease = claim_account(&store, "telegram", "123:SECRET").expect("first gateway");
        let refused = claim_account(&store, "telegram", "123:SECRET").expect_err("second gateway");
        assert!(refused.starts_with("another gateway already serves this telegram bot (pid "), "{refused}");
        assert!(claim_account(&store, "telegram", "456:ELSE").is_ok(), "another bot is another lease");
        store.release_lease(&key, &lease).expect("release");
        assert!(claim_account(&store, "telegram", "123:SECRET").is_ok(), "free again once released");
    }
}
