//! Log lines to the host's log, tagged with the plugin's name (`RUST_LOG`/`TALARIA_LOG` show them).

use crate::__bindings::talaria::plugin::log::{Level, log};

pub fn trace(message: &str) {
    log(Level::Trace, message);
}

pub fn debug(message: &str) {
    log(Level::Debug, message);
}

pub fn info(message: &str) {
    log(Level::Info, message);
}

pub fn warn(message: &str) {
    log(Level::Warn, message);
}

pub fn error(message: &str) {
    log(Level::Error, message);
}
