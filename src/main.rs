//! The `natm` command.
fn main() {}
