//! `tensorizer_rs.convert`: format conversion between torch checkpoints,
//! tensorizer files and safetensors files.

use pyo3::prelude::*;

/// Adds this file's functions and classes to `_native`.
pub(crate) fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
