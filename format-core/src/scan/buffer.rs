//! Buffers the scanner reads into: reserved fallibly, so a length a file
//! merely claims is an error rather than an abort.

use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::source::RandomAccess;

/// Reads `len` bytes at `offset`, reserving the memory fallibly (`what`
/// names it in the error). Callers bound `len` by a limit or by bytes the
/// source has.
pub(crate) fn read_vec<R: RandomAccess + ?Sized>(
    src: &mut R,
    offset: u64,
    len: u64,
    what: &'static str,
) -> Result<Vec<u8>> {
    let mut v = zeroed(len, offset, what)?;
    src.read_exact_at(offset, &mut v)?;
    Ok(v)
}

/// A zero-filled buffer of `len` bytes, or [`Error::OutOfMemory`].
pub fn zeroed(len: u64, offset: u64, what: &'static str) -> Result<Vec<u8>> {
    let no_memory = || Error::OutOfMemory { offset, what, bytes: len };
    let n = usize::try_from(len).map_err(|_| no_memory())?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| no_memory())?;
    v.resize(n, 0);
    Ok(v)
}
