//! API 0.4.0's own interface: `sender`, which makes an adapter instance ready to send without
//! connecting (`crate::adapter` keeps a few such instances per account). The rest of 0.4.0 is
//! 0.3.0's and 0.2.0's, bound in [`super::since_v0_3_0`] and [`super::since_v0_2_0`].

wasmtime::component::bindgen!({
    path: "../../wit/v0.4.0",
    world: "host-bindings",
    exports: { default: async },
});
