//! Write talaria plugins in plain Rust.
//!
//! A tool is an ordinary function that takes a serde type (its JSON Schema is derived for the
//! model) and a [`Context`], and returns `Result<String, ToolError>`. One macro,
//! [`export_tools!`], turns a list of such functions into a sandboxed WebAssembly component.
//! The component-model bindings stay inside this crate.
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
//! /// Greet someone by name.
//! fn greet(args: GreetArgs, _ctx: &Context) -> Result<String, ToolError> {
//!     Ok(format!("Hello, {}!", args.name))
//! }
//!
//! export_tools!(greet);
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2` and put the `.wasm` beside a
//! `plugin.toml` (see `sdk/README.md`).
//!
//! Host services, each only as far as the user granted it: [`kv`] (plugin-private storage),
//! [`http`] (outgoing requests to granted hosts), [`secrets`] (existence checks and placeholders;
//! values never enter the plugin), [`process`] (shell commands through the host's safety check),
//! [`config`] (operator settings) and [`log`]. Files are plain `std::fs` on the directories the
//! plugin was granted.

extern crate self as talaria_sdk;

pub mod config;
pub mod http;
pub mod kv;
pub mod log;
pub mod process;
pub mod secrets;
mod tool;

pub use schemars::JsonSchema;
pub use tool::{Context, ToolError};
#[doc(hidden)]
pub use {serde_json, wit_bindgen as __wit_bindgen};

/// The plugin API version this SDK builds against. Write it as `api` in plugin.toml.
pub const API_VERSION: &str = "0.1.0";

#[doc(hidden)]
pub mod __private {
    pub use crate::tool::{invoke, spec, unknown_tool};
}

#[doc(hidden)]
#[allow(unsafe_code, clippy::all)]
pub mod __bindings {
    wit_bindgen::generate!({
        path: "../wit/v0.1.0",
        world: "tool-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_tool_plugin",
        default_bindings_module: "talaria_sdk::__bindings",
        runtime_path: "talaria_sdk::__wit_bindgen::rt",
    });
}

/// Export tool functions as the plugin's tools.
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
        #[doc(hidden)]
        struct __TalariaTools;

        impl $crate::__bindings::exports::talaria::plugin::tools::Guest for __TalariaTools {
            fn list() -> ::std::vec::Vec<$crate::__bindings::talaria::plugin::types::ToolSpec> {
                ::std::vec![ $( $crate::__private::spec(stringify!($tool), &[$($doc),*], $tool) ),+ ]
            }

            fn call(
                name: ::std::string::String,
                args: ::std::string::String,
                context: $crate::__bindings::talaria::plugin::types::CallContext,
            ) -> ::std::result::Result<
                ::std::string::String,
                $crate::__bindings::talaria::plugin::types::ToolError,
            > {
                let context = $crate::Context::from(context);
                match name.as_str() {
                    $( stringify!($tool) => $crate::__private::invoke($tool, &args, &context), )+
                    other => ::std::result::Result::Err($crate::__private::unknown_tool(other)),
                }
            }
        }

        $crate::__bindings::__export_tool_plugin!(__TalariaTools with_types_in $crate::__bindings);
    };
}
