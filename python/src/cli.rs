//! `tzr` inside the wheel: the same command line as the `tzr` binary, for
//! the package's `tzr` script and `python -m tensorizer_rs`.

use std::ffi::OsString;

use pyo3::prelude::*;

/// Runs the `tzr` command line with `args` (the program name first) and
/// returns its exit code. The GIL is released for the whole run: `tzr
/// view` serves until the process is interrupted.
#[pyfunction]
pub(crate) fn tzr_main(py: Python<'_>, args: Vec<OsString>) -> u8 {
    py.detach(|| tzr::run(args))
}
