//! Installing plugins from a marketplace.
//!
//! A plugin travels as a *bundle* ([`bundle`]): a gzip'd tar holding `plugin.toml`, the
//! component and a few documents. Its digest (`sha256:<hex>` of the bundle's bytes) is what a
//! registry index pins and what a publisher's ed25519 signature covers ([`sign`]). Sources
//! ([`source`]): a local directory or bundle, an https URL, a registry index ([`index`]), or an
//! OCI registry ([`oci`]). [`install`] stages, verifies, precompiles and then switches versions by
//! rewriting the scope's lockfile, so a failure or a crash leaves the previous version working.
//!
//! Each module says what went wrong in an error of its own, whose variants a caller can match:
//! [`bundle::BundleError`] and [`bundle::PackError`], [`sign::SignatureError`],
//! [`sign::KeyError`] and [`sign::TrustError`], [`download::FetchError`], [`index::IndexError`]
//! and [`index::PickError`], [`oci::OciError`], [`source::SourceError`] (which holds the others a
//! fetch can meet), [`install::InstallError`] and [`install::consent::ConsentError`].

pub mod bundle;
pub mod download;
pub mod index;
pub mod install;
pub mod oci;
pub mod sign;
pub mod source;

/// Make *ring* the process's rustls provider (reqwest and oci-client are built without one).
/// Harmless when one is installed already.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
