//! Why a component would not do. (Why a plugin call gave no answer is the protocol's
//! `ToolError` for tools and `PluginError` for the other kinds.)

use crate::lock::short_digest;

/// Why a component cannot be installed or run: it cannot be read, it is not the one pinned
/// ([`Plugin::sha256`](crate::Plugin::sha256)), or it does not fit its manifest
/// ([`Runtime::check_component`](crate::Runtime::check_component)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComponentError {
    /// The component file cannot be read.
    #[error("{}: {detail}", path.display())]
    Unreadable { path: std::path::PathBuf, detail: String },
    /// It no longer has the digest pinned when it was installed or trusted: such a component
    /// is never compiled or run.
    #[error("its component changed since {since} (sha256 {}, pinned {})", short_digest(sha256), short_digest(pinned))]
    Changed { since: String, sha256: String, pinned: String },
    /// The WebAssembly engine would not start.
    #[error("{0}")]
    Engine(String),
    /// The bytes are not a WebAssembly component wasmtime accepts.
    #[error("not a valid WebAssembly component: {0}")]
    Invalid(String),
    /// The component does not fit its manifest (API version, kinds, exports) or needs imports
    /// this host does not provide.
    #[error("{0}")]
    Mismatch(String),
}
