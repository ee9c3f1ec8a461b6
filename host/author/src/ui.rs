//! Notes, warnings and errors on stderr, styled only when it is a terminal and NO_COLOR is unset
//! (anstream strips the styles otherwise).

use owo_colors::OwoColorize as _;

pub fn error(message: &str) {
    putln!(anstream::stderr(), "{} {message}", "error:".red().bold());
}

pub fn warn(message: &str) {
    putln!(anstream::stderr(), "{} {message}", "warning:".yellow().bold());
}

pub fn note(message: &str) {
    putln!(anstream::stderr(), "{} {message}", "note:".cyan().bold());
}
