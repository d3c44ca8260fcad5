//! Partial tensor reads for `get_slice`: only the bytes (and, for encrypted
//! files, only the chunks) a slice covers.

use pyo3::prelude::*;

/// Adds this file's functions and classes to `_native`.
pub(crate) fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
