//! Write talaria plugins in plain Rust.
//!
//! Five kinds of plugin, each one trait (or a list of functions) and one export macro; the
//! component-model bindings stay inside this crate:
//!
//! | kind | you write | export with | module |
//! |---|---|---|---|
//! | tool | `fn(Args, &Context) -> Result<String, ToolError>` per tool | [`export_tools!`] | this root |
//! | memory provider | `impl` [`memory::MemoryProvider`] (and optional tools) | [`export_memory!`] | [`memory`] |
//! | context engine | `impl` [`context::ContextEngine`] | [`export_context_engine!`] | [`context`] |
//! | hook | `impl` [`hooks::Hooks`] | [`export_hooks!`] | [`hooks`] |
//! | platform adapter (API 0.4.0) | `impl` [`adapter::Adapter`] | [`export_adapter!`] | [`adapter`] |
//!
//! A tool is an ordinary function that takes a serde type (its JSON Schema is derived for the
//! model) and a [`Context`]:
//!
//! ```ignore
//! use talaria_sdk::{Context, JsonSchema, ToolError, export_tools};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct GreetArgs {
//!     /// Who to greet.
//!     name: String,
//! }
//!
//! fn greet(args: GreetArgs, _ctx: &Context) -> Result<String, ToolError> {
//!     Ok(format!("Hello, {}!", args.name))
//! }
//!
//! export_tools! {
//!     /// Greet someone by name.
//!     greet,
//! }
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2` and put the `.wasm` beside a
//! `plugin.toml` (see `sdk/README.md`, and `docs/plugin-kinds.md` for when each kind is called).
//!
//! Host services, each only as far as the user granted it: [`kv`] (plugin-private storage),
//! [`http`] (outgoing requests to granted hosts), [`secrets`] (existence checks and placeholders;
//! values never enter the plugin), [`process`] (shell commands through the host's safety check),
//! [`llm`] (auxiliary model completions), [`config`] (operator settings) and [`log`]. Files are
//! plain `std::fs` on the directories the plugin was granted. The conversation types shared by
//! the kinds are in [`message`].

extern crate self as talaria_sdk;

pub mod adapter;
pub mod config;
pub mod context;
pub mod hooks;
pub mod http;
pub mod kv;
pub mod llm;
pub mod log;
pub mod memory;
pub mod message;
pub mod process;
pub mod secrets;
mod tool;
pub mod websocket;

pub use schemars::JsonSchema;
pub use tool::{Context, ToolError};
#[doc(hidden)]
pub use {serde_json, wit_bindgen as __wit_bindgen};

/// The plugin API version this SDK builds tools, memory providers, context engines and hooks
/// against. Write it as `api` in plugin.toml.
pub const API_VERSION: &str = "0.2.0";

/// The plugin API version of platform adapters ([`adapter`]): 0.4.0, which carries 0.3.0's
/// and 0.2.0's interfaces over unchanged.
pub const ADAPTER_API_VERSION: &str = "0.4.0";

/// What the export macros expand to; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::__bindings::talaria::plugin::types::{ToolError as WitToolError, ToolSpec};
    pub use crate::adapter::AdapterExport;
    pub use crate::context::Engine;
    pub use crate::hooks::HookSet;
    pub use crate::memory::Provider;
    pub use crate::tool::{ToolSet, Tools, invoke, spec, unknown_tool};
}

/// The component-model bindings, one `generate!` per plugin world of `wit/v0.2.0`.
///
/// The imports (`types`, `log`, `config`, `kv`, `secrets`, `process`, `llm`) are generated once,
/// in [`tool`](self::__bindings::tool), and every other world maps them onto those with `with`,
/// so each import is declared once and the SDK's service modules serve every kind.
///
/// The `memory-plugin` world is the one exception to "one `generate!` per world": it exports
/// `tools` as well, and wit-bindgen 0.62 cannot generate two worlds that export the same
/// interface in one crate with public export macros (both define the `#[macro_export]` macro
/// `__export_talaria_plugin_tools_0_2_0_cabi`; bytecodealliance/wit-bindgen#1502). So `memory`
/// generates a world holding only the `memory` export, and `export_memory!` exports `tools`
/// through the `tool-plugin` bindings. The component's type information is the union of the two
/// worlds, which is exactly `memory-plugin`.
#[doc(hidden)]
#[allow(unsafe_code, clippy::all)]
pub mod __bindings {
    pub use self::tool::talaria;

    pub mod tool {
        wit_bindgen::generate!({
            path: "../wit/v0.2.0",
            world: "tool-plugin",
            pub_export_macro: true,
            export_macro_name: "__export_tool_plugin",
            default_bindings_module: "talaria_sdk::__bindings::tool",
            runtime_path: "talaria_sdk::__wit_bindgen::rt",
        });
    }

    pub mod memory {
        wit_bindgen::generate!({
            path: "../wit/v0.2.0",
            inline: "
                package talaria:sdk;

                /// `memory-plugin` without its `tools` export (see the module docs).
                world memory-exports {
                    include talaria:plugin/host-imports@0.2.0;
                    export talaria:plugin/memory@0.2.0;
                }
            ",
            world: "talaria:sdk/memory-exports",
            with: {
                "talaria:plugin/types@0.2.0": super::tool::talaria::plugin::types,
                "talaria:plugin/log@0.2.0": super::tool::talaria::plugin::log,
                "talaria:plugin/config@0.2.0": super::tool::talaria::plugin::config,
                "talaria:plugin/kv@0.2.0": super::tool::talaria::plugin::kv,
                "talaria:plugin/secrets@0.2.0": super::tool::talaria::plugin::secrets,
                "talaria:plugin/process@0.2.0": super::tool::talaria::plugin::process,
                "talaria:plugin/llm@0.2.0": super::tool::talaria::plugin::llm,
            },
            pub_export_macro: true,
            export_macro_name: "__export_memory_plugin",
            default_bindings_module: "talaria_sdk::__bindings::memory",
            runtime_path: "talaria_sdk::__wit_bindgen::rt",
        });
    }

    pub mod context {
        wit_bindgen::generate!({
            path: "../wit/v0.2.0",
            world: "context-engine-plugin",
            with: {
                "talaria:plugin/types@0.2.0": super::tool::talaria::plugin::types,
                "talaria:plugin/log@0.2.0": super::tool::talaria::plugin::log,
                "talaria:plugin/config@0.2.0": super::tool::talaria::plugin::config,
                "talaria:plugin/kv@0.2.0": super::tool::talaria::plugin::kv,
                "talaria:plugin/secrets@0.2.0": super::tool::talaria::plugin::secrets,
                "talaria:plugin/process@0.2.0": super::tool::talaria::plugin::process,
                "talaria:plugin/llm@0.2.0": super::tool::talaria::plugin::llm,
            },
            pub_export_macro: true,
            export_macro_name: "__export_context_engine_plugin",
            default_bindings_module: "talaria_sdk::__bindings::context",
            runtime_path: "talaria_sdk::__wit_bindgen::rt",
        });
    }

    pub mod platform {
        wit_bindgen::generate!({
            path: "../wit/v0.4.0",
            world: "platform-plugin",
            with: {
                "talaria:plugin/websocket@0.3.0": generate,
                "talaria:plugin/types@0.2.0": super::tool::talaria::plugin::types,
                "talaria:plugin/log@0.2.0": super::tool::talaria::plugin::log,
                "talaria:plugin/config@0.2.0": super::tool::talaria::plugin::config,
                "talaria:plugin/kv@0.2.0": super::tool::talaria::plugin::kv,
                "talaria:plugin/secrets@0.2.0": super::tool::talaria::plugin::secrets,
                "talaria:plugin/process@0.2.0": super::tool::talaria::plugin::process,
                "talaria:plugin/llm@0.2.0": super::tool::talaria::plugin::llm,
            },
            pub_export_macro: true,
            export_macro_name: "__export_platform_plugin",
            default_bindings_module: "talaria_sdk::__bindings::platform",
            runtime_path: "talaria_sdk::__wit_bindgen::rt",
        });
    }

    pub mod hook {
        wit_bindgen::generate!({
            path: "../wit/v0.2.0",
            world: "hook-plugin",
            with: {
                "talaria:plugin/types@0.2.0": super::tool::talaria::plugin::types,
                "talaria:plugin/log@0.2.0": super::tool::talaria::plugin::log,
                "talaria:plugin/config@0.2.0": super::tool::talaria::plugin::config,
                "talaria:plugin/kv@0.2.0": super::tool::talaria::plugin::kv,
                "talaria:plugin/secrets@0.2.0": super::tool::talaria::plugin::secrets,
                "talaria:plugin/process@0.2.0": super::tool::talaria::plugin::process,
                "talaria:plugin/llm@0.2.0": super::tool::talaria::plugin::llm,
            },
            pub_export_macro: true,
            export_macro_name: "__export_hook_plugin",
            default_bindings_module: "talaria_sdk::__bindings::hook",
            runtime_path: "talaria_sdk::__wit_bindgen::rt",
        });
    }
}

/// Export tool functions as the plugin's tools (world `tool-plugin`).
///
/// Each function has the shape `fn(Args, &Context) -> Result<String, ToolError>` where `Args`
/// implements `serde::Deserialize` and [`JsonSchema`]. The tool's name is the function's name and
/// its description is the function's doc comment, written in the macro call:
///
/// ```ignore
/// talaria_sdk::export_tools! {
///     /// Read a file.
///     read_file,
///     /// Write a file.
///     write_file,
/// }
/// ```
///
/// A function listed without a doc comment here gets none; the model then sees only its name.
#[macro_export]
macro_rules! export_tools {
    ($( $(#[doc = $doc:literal])* $tool:ident ),+ $(,)?) => {
        $crate::__tool_set!(__TalariaTools { $( $(#[doc = $doc])* $tool ),+ });
        #[doc(hidden)]
        type __TalariaToolsExport = $crate::__private::Tools<__TalariaTools>;
        $crate::__bindings::tool::__export_tool_plugin!(__TalariaToolsExport with_types_in $crate::__bindings::tool);
    };
}
