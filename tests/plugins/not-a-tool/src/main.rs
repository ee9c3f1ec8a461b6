//! A WASI command component, not a tool plugin: loading it must fail with a clear message.
fn main() {
    println!("I am a command, not a plugin");
}
