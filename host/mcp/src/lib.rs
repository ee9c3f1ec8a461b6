//! talaria and the Model Context Protocol: external MCP servers as tools ([`client::Servers`],
//! configured by `[mcp_servers.NAME]`, [`config`]), and `talaria mcp serve`, which serves the
//! plugins' tools to other agents ([`server`]).

pub mod client;
pub mod config;
mod confined;
pub mod server;
