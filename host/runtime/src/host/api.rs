//! The plugin API, one module per version. Each `since_vX_Y_Z` module holds what that version
//! brought: its WIT bindings, its imports where they differ from a newer version's (implemented
//! by converting to the newer ones, so every check against a plugin's grants exists once, in
//! `crate::host`), and the calls into its exports.
//!
//! - [`since_v0_1_0`]: tool plugins only. Its imports convert to 0.2.0's; its `tools` export has
//!   its own types.
//! - [`since_v0_2_0`]: every kind but platform adapters. The host implements these imports
//!   natively (`host/imports.rs`), and [`since_v0_2_0::convert`] turns the protocol's types into
//!   their WIT twins for the memory, context and hook exports.
//! - [`since_v0_3_0`]: the platform adapter export and the WebSocket import. It carries every
//!   0.2.0 interface over unchanged, under its 0.2.0 name.
//! - [`since_v0_4_0`]: the `sender` export, which lets an adapter send from several instances
//!   at once. It carries every 0.3.0 and 0.2.0 interface over unchanged.
//!
//! Adding a version: a `since_vX_Y_Z` module with its bindings, a variant of [`Api`], its line
//! in [`add_to_linker`], and, where an export changed, a variant of that export's enum here (as
//! [`ToolsExport`] has for 0.1.0).

mod since_v0_1_0;
pub(crate) mod since_v0_2_0;
pub(crate) mod since_v0_3_0;
pub(crate) mod since_v0_4_0;

use wasmtime::Store;
use wasmtime::component::{HasSelf, Instance, InstancePre, Linker};

use crate::host::HostState;

/// A tool spec as a plugin listed it, before it is checked.
pub(crate) struct RawSpec {
    pub name: String,
    pub description: String,
    pub parameters: String,
}

/// An error the plugin returned (not a trap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GuestError {
    InvalidArgs(String),
    UnknownTool(String),
    Failed(String),
}

/// The API version a component was built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Api {
    V0_1,
    V0_2,
    V0_3,
    V0_4,
}

impl Api {
    pub const ALL: [Api; 4] = [Api::V0_1, Api::V0_2, Api::V0_3, Api::V0_4];

    pub fn parse(version: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.version() == version)
    }

    pub fn version(self) -> &'static str {
        match self {
            Api::V0_1 => "0.1.0",
            Api::V0_2 => "0.2.0",
            Api::V0_3 => "0.3.0",
            Api::V0_4 => "0.4.0",
        }
    }

    /// The APIs an interface of `version` belongs to: each version from 0.2.0 on carries
    /// every interface of the one before over unchanged, under its old name.
    pub fn including(version: Api) -> &'static [Api] {
        match version {
            Api::V0_1 => &[Api::V0_1],
            Api::V0_2 => &[Api::V0_2, Api::V0_3, Api::V0_4],
            Api::V0_3 => &[Api::V0_3, Api::V0_4],
            Api::V0_4 => &[Api::V0_4],
        }
    }
}

/// Link the `talaria:plugin` imports of every supported version into `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    since_v0_1_0::ToolPlugin::add_to_linker::<_, HasSelf<HostState>>(linker, |s| s)?;
    since_v0_2_0::HostBindings::add_to_linker::<_, HasSelf<HostState>>(linker, |s| s)?;
    since_v0_3_0::HostBindings::add_to_linker::<_, HasSelf<HostState>>(linker, |s| s)?;
    Ok(())
}

/// Who a tool call is for, as every version's `call-context` carries it.
pub(crate) struct CallInfo {
    pub session_id: String,
    pub call_id: String,
    pub workspace: String,
}

/// The `tools` export, in the version the component has (0.3.0 exports 0.2.0's).
pub(crate) enum ToolsExport {
    V0_1(since_v0_1_0::ToolsIndices),
    V0_2(since_v0_2_0::ToolsIndices),
}

impl ToolsExport {
    /// The export of a component built against `api`.
    ///
    /// # Errors
    /// The component does not export `tools` in the shape of that version.
    pub fn new(api: Api, pre: &InstancePre<HostState>) -> wasmtime::Result<Self> {
        Ok(match api {
            Api::V0_1 => Self::V0_1(since_v0_1_0::ToolsIndices::new(pre)?),
            Api::V0_2 | Api::V0_3 | Api::V0_4 => Self::V0_2(since_v0_2_0::ToolsIndices::new(pre)?),
        })
    }

    /// The tools the component lists, unchecked.
    pub async fn list(&self, store: &mut Store<HostState>, instance: &Instance) -> wasmtime::Result<Vec<RawSpec>> {
        match self {
            Self::V0_1(ix) => since_v0_1_0::list(ix, store, instance).await,
            Self::V0_2(ix) => since_v0_2_0::list(ix, store, instance).await,
        }
    }

    /// Call `tool` with `args_json`: the tool's output, or the error the guest returned.
    pub async fn call(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
        tool: &str,
        args_json: &str,
        info: CallInfo,
    ) -> wasmtime::Result<Result<String, GuestError>> {
        match self {
            Self::V0_1(ix) => since_v0_1_0::call(ix, store, instance, tool, args_json, info).await,
            Self::V0_2(ix) => since_v0_2_0::call(ix, store, instance, tool, args_json, info).await,
        }
    }
}
