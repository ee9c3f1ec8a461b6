//! Installing plugins from a marketplace.
//!
//! A plugin travels as a *bundle*: a gzip'd tar holding `plugin.toml`, the component and a few
//! documents. Its digest (`sha256:<hex>` of the bundle's bytes) is what a registry index pins and
//! what a publisher's ed25519 signature covers. Sources: a local directory or bundle, an https
//! URL, a registry index (a JSON document), or an OCI registry.

pub mod oci;
