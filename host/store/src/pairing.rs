//! Pairing chat-platform users with the gateway (table `pairings`): an unknown user who writes to
//! the bot in a direct message gets a short code; the owner approves it with
//! `talaria pairing approve CODE`, and from then on that user is answered.
//!
//! Codes are 8 characters from an alphabet without look-alikes (no 0/O, 1/I), drawn from the
//! operating system's CSPRNG, valid for [`PAIRING_TTL_MS`]. Asking again while a code is valid
//! gets the same code (no new one an hour per user), and at most [`MAX_PENDING`] codes are
//! waiting per platform: strangers cannot flood the owner's list. Revoking removes the pairing.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), talaria_store::Error> {
//! use talaria_store::pairing::Request;
//! let store = talaria_store::Store::open(std::path::Path::new("/tmp/state.db"))?;
//! let code = talaria_store::Store::new_pairing_code();
//! if let Request::New(code) = store.pairing_request("telegram", "4242", "Ana", &code).await? {
//!     // tell the user: "ask the owner to run `talaria pairing approve {code}`"
//! }
//! store.pairing_approve(&code).await?;
//! assert!(store.is_paired("telegram", "4242").await?);
//! # Ok(())
//! # }
//! ```

use crate::{Engine, Result, Store};

/// How long a code can be approved.
pub const PAIRING_TTL_MS: i64 = 60 * 60 * 1000;
/// Codes waiting for approval at once, per platform.
pub const MAX_PENDING: i64 = 20;
/// The code alphabet: 32 characters, none mistaken for another.
const ALPHABET: &[u8; 32] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";

/// What a user asking to pair gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A new code, to pass on to the owner.
    New(String),
    /// The code given earlier, still valid.
    Pending(String),
    /// The user is paired already.
    Approved,
    /// Too many codes are waiting on this platform: try later.
    TooMany,
}

/// A pairing as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    pub platform: String,
    pub user_id: String,
    pub user_name: String,
    /// While waiting for approval.
    pub code: Option<String>,
    pub requested_at: i64,
    /// When the code stops being valid (milliseconds since the epoch).
    pub expires_at: i64,
    pub approved_at: Option<i64>,
}

impl Pairing {
    /// `approved`, `pending`, or `expired` at `now`.
    pub fn state(&self, now: i64) -> &'static str {
        match (self.approved_at, self.expires_at > now) {
            (Some(_), _) => "approved",
            (None, true) => "pending",
            (None, false) => "expired",
        }
    }
}

impl Store {
    /// A fresh pairing code from the operating system's CSPRNG.
    ///
    /// # Panics
    /// When the operating system has no randomness to give (it always has on Linux).
    pub fn new_pairing_code() -> String {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).expect("the operating system's random source");
        // 256 is a multiple of 32: every character is equally likely.
        bytes.iter().map(|b| char::from(ALPHABET[usize::from(*b) % 32])).collect()
    }

    /// `user_id` of `platform` asks to pair: `code` (from [`Store::new_pairing_code`]) is given
    /// unless the user has a valid one already, is paired, or too many are waiting.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn pairing_request(&self, platform: &str, user_id: &str, user_name: &str, code: &str) -> Result<Request> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.pairing_request(platform, user_id, user_name, code),
            Engine::Postgres(pg) => pg.pairing_request(platform, user_id, user_name, code).await,
        }
    }

    /// Approve the pairing waiting under `code` (any letter case); returns it.
    ///
    /// # Errors
    /// [`Error::PairingNotFound`](crate::Error::PairingNotFound) when no valid code matches (unknown,
    /// already used, or expired).
    pub async fn pairing_approve(&self, code: &str) -> Result<Pairing> {
        let code = code.trim().to_ascii_uppercase();
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.pairing_approve(&code),
            Engine::Postgres(pg) => pg.pairing_approve(&code).await,
        }
    }

    /// Remove the pairing (or pending code) of `user_id` on `platform`; whether there was one.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn pairing_revoke(&self, platform: &str, user_id: &str) -> Result<bool> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.pairing_revoke(platform, user_id),
            Engine::Postgres(pg) => pg.pairing_revoke(platform, user_id).await,
        }
    }

    /// Whether `user_id` of `platform` is paired.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn is_paired(&self, platform: &str, user_id: &str) -> Result<bool> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.is_paired(platform, user_id),
            Engine::Postgres(pg) => pg.is_paired(platform, user_id).await,
        }
    }

    /// Every pairing and code, newest request first.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn pairings(&self) -> Result<Vec<Pairing>> {
        match &self.engine {
            Engine::Sqlite(db) => db.queue().await.pairings(),
            Engine::Postgres(pg) => pg.pairings().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_use_the_whole_alphabet_and_nothing_else() {
        let codes: Vec<String> = (0..200).map(|_| Store::new_pairing_code()).collect();
        assert!(codes.iter().all(|c| c.len() == 8 && c.bytes().all(|b| ALPHABET.contains(&b))));
        assert!(codes.iter().all(|c| !c.contains(['0', 'O', '1', 'I'])));
        let distinct: std::collections::HashSet<&String> = codes.iter().collect();
        assert_eq!(distinct.len(), codes.len());
    }
}
