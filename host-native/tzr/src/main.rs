//! The `tzr` binary: the command line of the `tzr` library.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(tzr::run(std::env::args_os()))
}
