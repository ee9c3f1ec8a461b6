//! talaria and the Model Context Protocol: external MCP servers as tools ([`client::Servers`],
//! configured by `[mcp_servers.NAME]`, [`config`]).

pub mod client;
pub mod config;
mod confined;
pub mod server;
