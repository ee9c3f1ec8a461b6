//! Notes, warnings and errors on stderr, styled only when it is a terminal and NO_COLOR is unset
//! (anstream strips the styles otherwise). The `talaria` binary prints its own with these too.
//! A message often quotes what a plugin, a model or a file said: its control characters are
//! shown, not obeyed ([`talaria_core::runtime::shown`]).

use owo_colors::OwoColorize as _;
use talaria_core::runtime::shown::visible_lines;

/// `error: MESSAGE` on stderr.
pub fn error(message: &str) {
    putln!(anstream::stderr(), "{} {}", "error:".red().bold(), visible_lines(message));
}

/// `warning: MESSAGE` on stderr.
pub fn warn(message: &str) {
    putln!(anstream::stderr(), "{} {}", "warning:".yellow().bold(), visible_lines(message));
}

/// `note: MESSAGE` on stderr.
pub fn note(message: &str) {
    putln!(anstream::stderr(), "{} {}", "note:".cyan().bold(), visible_lines(message));
}
