//! The one thing a scan needs from its host: positioned reads of a byte
//! source of known length ([`RandomAccess`], the one synchronous
//! positioned-read trait). The WASI validator reads a preopened file, tests
//! read a byte slice ([`SliceSource`]), `tzr` and the Python package read
//! local files and object stores (host-native's concurrent `RangeSource`,
//! through its `Positioned` adapter). A browser page cannot block on a
//! read, so its inspector has an asynchronous twin (`AsyncSource` in
//! host-wasm) with the same [`ReadError`] and the checks below
//! ([`span`], [`check_read`]).

use alloc::string::String;
use core::fmt;

/// A failed read: where it started and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    /// Absolute offset of the read that failed.
    pub offset: u64,
    /// What the host reported.
    pub message: String,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "read failed at byte {}: {}", self.offset, self.message)
    }
}

impl core::error::Error for ReadError {}

/// The end of the `len` bytes at `offset` of a source of `total` bytes,
/// or the error a read of them is: every source's bounds check.
pub fn span(offset: u64, len: usize, total: u64) -> Result<u64, ReadError> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= total => Ok(end),
        Some(_) => Err(ReadError { offset, message: "unexpected end of input".into() }),
        None => Err(ReadError { offset, message: "offset overflows".into() }),
    }
}

/// Checks that a read of `want` bytes at `offset` returned `got` bytes
/// (sources that hand back a buffer of their own: a network response, a
/// browser `ArrayBuffer`).
pub fn check_read(offset: u64, want: usize, got: usize) -> Result<(), ReadError> {
    if got == want {
        Ok(())
    } else {
        Err(ReadError { offset, message: alloc::format!("asked for {want} bytes, got {got}") })
    }
}

/// A byte source read at arbitrary offsets.
pub trait RandomAccess {
    /// Total length in bytes.
    fn len(&self) -> u64;

    /// Whether the source is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset..offset + buf.len()`; a short
    /// source is an error.
    fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), ReadError>;
}

/// Bytes already in memory.
#[derive(Debug, Clone, Copy)]
pub struct SliceSource<'a> {
    bytes: &'a [u8],
}

impl<'a> SliceSource<'a> {
    /// Wraps `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }
}

impl RandomAccess for SliceSource<'_> {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let end = span(offset, buf.len(), self.len())?;
        // Both fit: `end` is at most the slice's length.
        buf.copy_from_slice(&self.bytes[offset as usize..end as usize]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_reads_are_bounds_checked() {
        let mut s = SliceSource::new(b"abcdef");
        let mut buf = [0u8; 3];
        s.read_exact_at(2, &mut buf).unwrap();
        assert_eq!(&buf, b"cde");
        assert!(s.read_exact_at(4, &mut buf).is_err());
        assert_eq!(s.read_exact_at(u64::MAX, &mut buf).unwrap_err().message, "offset overflows");
        assert_eq!(s.len(), 6);
        assert_eq!(span(3, 3, 6), Ok(6));
        assert!(check_read(0, 3, 2).unwrap_err().message.contains("asked for 3 bytes, got 2"));
    }
}
