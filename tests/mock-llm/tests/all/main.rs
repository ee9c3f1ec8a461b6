//! Drives the mock over raw HTTP, route by route, and checks the bytes against the real wire
//! formats.

mod anthropic;
mod bin;
mod chat;
mod responses;
mod script;
mod strict;
mod support;
