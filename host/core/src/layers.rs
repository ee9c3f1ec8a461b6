//! The layers under core, as the front doors see them.
//!
//! A front door (the terminal, ACP, the gateway, the scheduler, `mcp serve`, the plugin
//! author's commands) depends on `talaria-core` and `talaria-protocol` only: what it needs of
//! the layers below comes through these modules, each naming the part of its crate that a front
//! door may use. Core builds the things themselves (the store, the runtime, the MCP clients:
//! [`crate::Host::open`], [`crate::unattended_runtime`]); a front door gets
//! them from core and uses their types from here. `scripts/floors` holds the crate graph to that.
//!
//! A front door that needs something not listed adds it here, in the module of its layer, so
//! what the front doors reach below core stays one list a reviewer can read.

/// The agent loop's tool API: how a front door serves tools of its own (an editor's overlay), and the loop's helpers for showing what a tool did.
pub mod agent {
    pub use talaria_agent::{BoxFuture, Scope, ToolContext, ToolHandler, ToolSource, builtin, history, skills, tools};
}

/// Edits and reads of text files, for a front door that applies them itself (an editor's
/// buffers over ACP).
pub mod edit {
    pub use talaria_edit::{created, past_end, patch, patch_problem, patched, read, written};
}

/// The MCP client's configuration (an editor hands its servers over ACP).
pub mod mcp {
    pub use talaria_mcp::config;
}

/// The plugin runtime's types: plugins, manifests, grants, approvals, messaging adapters.
pub mod runtime {
    pub use talaria_runtime::{
        Access, Approval, ApprovalKind, ApprovalRequest, Approvals, Approver, BoxFuture, CHANGED_STAMP, CacheOutcome,
        Caller, Capability, GrantFile, Grants, HostPattern, HttpStub, HttpStubs, Kind, LlmBackend, LlmCompletion,
        LlmRequest, LockEntry, Lockfile, Manifest, Plugin, RecordedImport, Runtime, Scope, Secrets, ToolContext,
        Unattended, adapter, check_name, fsutil, mark_plugins_changed, process, shown, visible,
    };
}

/// The store's types: sessions, the gateway's inbox and deliveries, pairing, cron jobs and
/// their runs, leases and notices.
pub mod store {
    pub use talaria_store::{
        Error, Leased, ListQuery, Result, SOURCES, SearchQuery, SessionInfo, Store, cron, delivery, inbox, local_time,
        notice, pairing, process, search, turns,
    };
}

/// Scheduled jobs: their targets, the job file, and the courier that delivers their answers.
pub mod cron {
    pub use talaria_cron::{courier, jobs, schedule, target};
}

/// The HTTP listener every served door shares (limits, slow-client handling, bearer tokens with a
/// lockout).
pub mod listen {
    pub use talaria_listen::{Limits, auth, limit, serve, too_slow};
}

/// Plugin bundles, signatures, sources and installing, for the author's `pack`, `sign` and
/// `publish`.
pub mod market {
    pub use talaria_market::{bundle, index, install, install_crypto, oci, sign, source};
}

/// The OS sandbox commands run in, for building plugins confined.
pub mod sandbox {
    pub use talaria_sandbox::{Command, Exit, Policy, Sandbox, sandbox};
}
