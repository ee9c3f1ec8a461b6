//! The sandbox's helper on its own, for this crate's tests (talaria's own executable serves as
//! the helper everywhere else).

fn main() {
    if std::env::args().nth(1).as_deref() == Some(talaria_sandbox::bwrap::HELPER_ARG) {
        talaria_sandbox::helper::main();
    }
    eprintln!("usage: talaria-sandbox-helper {}", talaria_sandbox::bwrap::HELPER_ARG);
    std::process::exit(2);
}
