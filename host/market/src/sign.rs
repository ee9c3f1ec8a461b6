//! Publisher keys, bundle signatures and the user's trust store.
//!
//! A publisher signs a bundle's digest with an ed25519 key; the signature travels beside the
//! bundle (`NAME.tar.gz.sig`, inline in a registry index, or as a layer of the OCI artifact).
//! An install checks it against the keys in `$TALARIA_HOME/trusted-keys.toml`, which only
//! `talaria plugins trust-key` adds to.
//!
//! - A public key is one line: `talaria-ed25519 <base64 of 32 bytes>`; its id is the first 16
//!   hex digits of the sha256 of those bytes.
//! - A secret key file (mode 0600) is one line: `talaria-ed25519-secret <base64 of the 32-byte
//!   seed>`.
//! - A signature is a JSON document: `{"key_id", "digest", "signature"}`, the signature being
//!   over `talaria-plugin-bundle-v1:` followed by the digest (`sha256:<hex>`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::Digest;

const PUBLIC_PREFIX: &str = "talaria-ed25519";
const SECRET_PREFIX: &str = "talaria-ed25519-secret";
const CONTEXT: &str = "talaria-plugin-bundle-v1:";
/// The trust store's file name under `$TALARIA_HOME`.
pub const TRUST_FILE: &str = "trusted-keys.toml";

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Why a key was not read (or made).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("a public key is one line `{PUBLIC_PREFIX} <base64>` (from `talaria plugin keygen`)")]
    NotPublicKey,
    #[error("the public key is not 32 bytes of base64")]
    PublicKeyLength,
    #[error("not a valid ed25519 public key")]
    NotOnCurve,
    #[error("not a talaria secret key (expected `{SECRET_PREFIX} <base64>`)")]
    NotSecretKey,
    #[error("the secret key is not 32 bytes of base64")]
    SecretKeyLength,
    /// The operating system gave no randomness for a new key.
    #[error("no randomness for a key: {0}")]
    NoRandomness(getrandom::Error),
}

/// Why the trust store was not read or written. A message says what its cause said, so the
/// cause is not given again as the error's source.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{}: {error}", path.display())]
    Io { path: PathBuf, error: std::io::Error },
    /// The file is not a trust store.
    #[error("{}: {error}", path.display())]
    Malformed { path: PathBuf, error: toml::de::Error },
    #[error("{0}")]
    Serialize(toml::ser::Error),
}

/// A publisher's public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

/// A publisher's secret key.
pub struct SecretKey(SigningKey);

impl PublicKey {
    /// Parse `talaria-ed25519 <base64>` (anything after the key is a comment).
    ///
    /// # Errors
    /// Not in that form ([`KeyError::NotPublicKey`], [`KeyError::PublicKeyLength`]), or not a
    /// valid ed25519 point ([`KeyError::NotOnCurve`]).
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let mut words = text.split_whitespace();
        let (Some(PUBLIC_PREFIX), Some(key)) = (words.next(), words.next()) else {
            return Err(KeyError::NotPublicKey);
        };
        let bytes: [u8; 32] =
            b64().decode(key).ok().and_then(|b| b.try_into().ok()).ok_or(KeyError::PublicKeyLength)?;
        VerifyingKey::from_bytes(&bytes).map(Self).map_err(|_| KeyError::NotOnCurve)
    }

    /// 16 hex digits naming the key.
    pub fn id(&self) -> String {
        hex::encode(&sha2::Sha256::digest(self.0.as_bytes())[..8])
    }

    pub fn verify(&self, digest: &str, signature: &[u8; 64]) -> bool {
        let sig = ed25519_dalek::Signature::from_bytes(signature);
        self.0.verify_strict(format!("{CONTEXT}{digest}").as_bytes(), &sig).is_ok()
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PUBLIC_PREFIX} {}", b64().encode(self.0.as_bytes()))
    }
}

impl SecretKey {
    /// A new random key.
    ///
    /// # Errors
    /// [`KeyError::NoRandomness`]: the operating system's random source failed.
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(KeyError::NoRandomness)?;
        Ok(Self(SigningKey::from_bytes(&seed)))
    }

    /// Parse a secret key file's text.
    ///
    /// # Errors
    /// Not a talaria secret key ([`KeyError::NotSecretKey`], [`KeyError::SecretKeyLength`]).
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let mut words = text.split_whitespace();
        let (Some(SECRET_PREFIX), Some(seed)) = (words.next(), words.next()) else {
            return Err(KeyError::NotSecretKey);
        };
        let seed: [u8; 32] =
            b64().decode(seed).ok().and_then(|b| b.try_into().ok()).ok_or(KeyError::SecretKeyLength)?;
        Ok(Self(SigningKey::from_bytes(&seed)))
    }

    /// The text of its file.
    pub fn to_file_text(&self) -> String {
        format!("{SECRET_PREFIX} {}\n", b64().encode(self.0.to_bytes()))
    }

    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// Sign a bundle's digest.
    pub fn sign(&self, digest: &str) -> Signature {
        let sig = self.0.sign(format!("{CONTEXT}{digest}").as_bytes());
        Signature { key_id: self.public().id(), digest: digest.to_string(), signature: b64().encode(sig.to_bytes()) }
    }
}

/// A signature document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    pub key_id: String,
    /// The bundle digest it was made for.
    pub digest: String,
    /// base64 of the 64-byte ed25519 signature.
    pub signature: String,
}

impl Signature {
    /// Parse a signature document.
    ///
    /// # Errors
    /// Not one, with what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Self, SignatureError> {
        serde_json::from_slice(bytes).map_err(|e| SignatureError::Malformed(e.to_string()))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the signature is not a talaria signature document: {0}")]
    Malformed(String),
    #[error(
        "the bundle's digest is {actual} but its signature is for {signed}: the bundle was changed after it was signed; refusing it"
    )]
    OtherBundle { signed: String, actual: String },
    #[error(
        "the bundle is signed by key {key_id}, which is not in your trust store; if you trust its publisher, add their public key with `talaria plugins trust-key \"talaria-ed25519 …\" --name PUBLISHER`"
    )]
    UnknownKey { key_id: String },
    #[error(
        "the signature by key {key_id} ({name}) does not verify: the bundle or its signature was altered, or it was signed by another key; refusing it"
    )]
    Invalid { key_id: String, name: String },
}

/// A key the user trusts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedKey {
    /// Who the user trusts it as.
    pub name: String,
    pub public_key: String,
    #[serde(default)]
    pub added: String,
}

/// `$TALARIA_HOME/trusted-keys.toml`: key id → key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustStore {
    #[serde(default)]
    pub keys: BTreeMap<String, TrustedKey>,
}

/// Who signed a bundle that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    pub key_id: String,
    pub name: String,
}

impl std::fmt::Display for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.key_id, self.name)
    }
}

impl TrustStore {
    /// Read the store; a missing file is an empty store.
    ///
    /// # Errors
    /// [`TrustError::Io`] when unreadable, [`TrustError::Malformed`] when not a trust store.
    pub fn load(home: &Path) -> Result<Self, TrustError> {
        let path = home.join(TRUST_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).map_err(|error| TrustError::Malformed { path, error }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(error) => Err(TrustError::Io { path, error }),
        }
    }

    /// Write the store (0600, atomically).
    ///
    /// # Errors
    /// [`TrustError::Io`]: it cannot be written.
    pub fn save(&self, home: &Path) -> Result<(), TrustError> {
        let header = "# Publisher keys trusted to sign talaria plugins. Managed by `talaria plugins trust-key`.\n\n";
        let text = toml::to_string_pretty(self).map_err(TrustError::Serialize)?;
        let path = home.join(TRUST_FILE);
        talaria_runtime::fsutil::write_private(&path, format!("{header}{text}").as_bytes())
            .map_err(|error| TrustError::Io { path, error })
    }

    /// Trust `key` under `name`; returns its id.
    pub fn add(&mut self, key: &PublicKey, name: &str) -> String {
        let id = key.id();
        let added = jiff::Timestamp::now().to_string();
        self.keys.insert(id.clone(), TrustedKey { name: name.to_string(), public_key: key.to_string(), added });
        id
    }

    /// Check `signature` over a bundle whose digest is `digest`.
    ///
    /// # Errors
    /// The signature is for another digest, by an unknown key, or does not verify.
    pub fn verify(&self, signature: &Signature, digest: &str) -> Result<Signer, SignatureError> {
        if signature.digest != digest {
            return Err(SignatureError::OtherBundle { signed: signature.digest.clone(), actual: digest.to_string() });
        }
        let trusted = self
            .keys
            .get(&signature.key_id)
            .ok_or_else(|| SignatureError::UnknownKey { key_id: signature.key_id.clone() })?;
        let invalid = || SignatureError::Invalid { key_id: signature.key_id.clone(), name: trusted.name.clone() };
        let key = PublicKey::parse(&trusted.public_key).map_err(|_| invalid())?;
        let bytes: [u8; 64] =
            b64().decode(&signature.signature).ok().and_then(|b| b.try_into().ok()).ok_or_else(invalid)?;
        if key.id() != signature.key_id || !key.verify(digest, &bytes) {
            return Err(invalid());
        }
        Ok(Signer { key_id: signature.key_id.clone(), name: trusted.name.clone() })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is the test failing
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:aaaa";

    fn store_with(key: &SecretKey) -> TrustStore {
        let mut store = TrustStore::default();
        store.add(&key.public(), "acme");
        store
    }

    #[test]
    fn a_signature_by_a_trusted_key_verifies_and_names_the_signer() {
        let key = SecretKey::generate().unwrap();
        let store = store_with(&key);
        let sig = Signature::parse(key.sign(DIGEST).to_json().as_bytes()).unwrap();
        assert_eq!(store.verify(&sig, DIGEST).unwrap(), Signer { key_id: key.public().id(), name: "acme".into() });
    }

    #[test]
    fn keys_round_trip_through_their_text() {
        let key = SecretKey::generate().unwrap();
        let again = SecretKey::parse(&key.to_file_text()).unwrap();
        assert_eq!(again.public(), key.public());
        let public = PublicKey::parse(&format!("{} a comment", key.public())).unwrap();
        assert_eq!(public.id(), key.public().id());
        assert_eq!(public.id().len(), 16);
        assert!(PublicKey::parse("ssh-ed25519 AAAA").unwrap_err().to_string().contains("talaria-ed25519 <base64>"));
        assert!(SecretKey::parse(&key.public().to_string()).is_err(), "a public key is not a secret key");
    }

    #[test]
    fn refusals_say_why() {
        let key = SecretKey::generate().unwrap();
        let store = store_with(&key);
        let sig = key.sign(DIGEST);
        assert_eq!(
            store.verify(&sig, "sha256:bbbb").unwrap_err(),
            SignatureError::OtherBundle { signed: DIGEST.into(), actual: "sha256:bbbb".into() }
        );
        let stranger = SecretKey::generate().unwrap();
        let err = store.verify(&stranger.sign(DIGEST), DIGEST).unwrap_err();
        assert_eq!(err, SignatureError::UnknownKey { key_id: stranger.public().id() });
        assert!(err.to_string().contains("talaria plugins trust-key"), "{err}");
        // A signature made by another key but claiming the trusted key's id.
        let forged = Signature { key_id: key.public().id(), ..stranger.sign(DIGEST) };
        assert_eq!(
            store.verify(&forged, DIGEST).unwrap_err(),
            SignatureError::Invalid { key_id: key.public().id(), name: "acme".into() }
        );
        // A signature over another digest, relabelled with this one.
        let relabelled = Signature { digest: DIGEST.into(), ..key.sign("sha256:cccc") };
        assert!(matches!(store.verify(&relabelled, DIGEST), Err(SignatureError::Invalid { .. })));
        assert!(matches!(Signature::parse(b"{}"), Err(SignatureError::Malformed(_))));
    }

    #[test]
    fn the_store_persists() {
        let home = tempfile::tempdir().unwrap();
        let key = SecretKey::generate().unwrap();
        let store = store_with(&key);
        store.save(home.path()).unwrap();
        assert_eq!(TrustStore::load(home.path()).unwrap(), store);
        assert_eq!(TrustStore::load(&home.path().join("none")).unwrap(), TrustStore::default());
    }
}
