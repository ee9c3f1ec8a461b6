//! API 0.2.0: every plugin kind but platform adapters. The host implements its imports
//! natively (`crate::host`'s `imports`); [`convert`] turns the protocol's types into their WIT
//! twins for the memory, context and hook exports.

pub(crate) mod convert;

use wasmtime::Store;
use wasmtime::component::Instance;

use super::CallInfo;
use crate::host::HostState;
use crate::host::api::GuestError;
use crate::host::api::RawSpec;

wasmtime::component::bindgen!({
    path: "../../wit/v0.2.0",
    // The world that exports every interface; a component exports only some, so exports are
    // looked up one interface at a time.
    world: "host-bindings",
    imports: { default: async },
    exports: { default: async },
});

pub(crate) use exports::talaria::plugin::tools::GuestIndices as ToolsIndices;
use talaria::plugin::types::{CallContext, ToolError};

pub(super) async fn list(
    ix: &ToolsIndices,
    store: &mut Store<HostState>,
    instance: &Instance,
) -> wasmtime::Result<Vec<RawSpec>> {
    let specs = ix.load(&mut *store, instance)?.call_list(&mut *store).await?;
    Ok(specs
        .into_iter()
        .map(|s| RawSpec { name: s.name, description: s.description, parameters: s.parameters })
        .collect())
}

pub(super) async fn call(
    ix: &ToolsIndices,
    store: &mut Store<HostState>,
    instance: &Instance,
    tool: &str,
    args_json: &str,
    info: CallInfo,
) -> wasmtime::Result<Result<String, GuestError>> {
    let ctx = CallContext { session_id: info.session_id, call_id: info.call_id, workspace: info.workspace };
    let out = ix.load(&mut *store, instance)?.call_call(&mut *store, tool, args_json, &ctx).await?;
    Ok(out.map_err(|e| match e {
        ToolError::InvalidArgs(m) => GuestError::InvalidArgs(m),
        ToolError::UnknownTool(m) => GuestError::UnknownTool(m),
        ToolError::Failed(m) => GuestError::Failed(m),
    }))
}
