//! The `tzr` command-line tool.
fn main() {}
