//! Notes, warnings and errors on stderr, styled only when it is a terminal and NO_COLOR is unset
//! (anstream strips the styles otherwise). The `talaria` binary prints its own with these too.

use owo_colors::OwoColorize as _;

/// `error: MESSAGE` on stderr.
pub fn error(message: &str) {
    putln!(anstream::stderr(), "{} {message}", "error:".red().bold());
}

/// `warning: MESSAGE` on stderr.
pub fn warn(message: &str) {
    putln!(anstream::stderr(), "{} {message}", "warning:".yellow().bold());
}

/// `note: MESSAGE` on stderr.
pub fn note(message: &str) {
    putln!(anstream::stderr(), "{} {message}", "note:".cyan().bold());
}
