//! talaria's MCP client: external MCP servers as tools ([`client::Servers`], configured by
//! `[mcp_servers.NAME]`, [`config`]), their stdio servers started confined. `talaria-core`
//! builds one [`client::Servers`] per home and joins its tools to the plugins'.
//!
//! What is wrong with a server's table is a [`config::ConfigError`]; why `talaria mcp test` or
//! `/prompt` could not use a server, a [`client::ClientError`]. A tool call's failure is the
//! [`talaria_protocol::ToolError`] the model sees.
//!
//! The other direction, `talaria mcp serve` (talaria's plugin tools served to other agents), is
//! a front door and lives in `talaria-mcp-serve`, so core never depends on a server.

pub mod client;
pub mod config;
mod confined;
