//! API 0.3.0's own interfaces: the platform adapter export (`crate::adapter` calls it) and the
//! WebSocket import ([`websocket`], its host side). The rest of 0.3.0 is 0.2.0's, bound in
//! [`super::since_v0_2_0`].

pub(crate) mod websocket;

wasmtime::component::bindgen!({
    path: "../../wit/v0.3.0",
    world: "host-bindings",
    imports: { default: async },
    exports: { default: async },
    with: { "talaria:plugin/websocket@0.3.0.connection": crate::host::api::since_v0_3_0::websocket::Connection },
});
