//! The one thing a scan needs from its host: positioned reads of a byte
//! source of known length. The WASI validator reads a preopened file, tests
//! read a byte slice ([`SliceSource`]), `tzr` reads local files and object
//! stores; each implements [`RandomAccess`].

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
        let short = || ReadError { offset, message: "unexpected end of input".into() };
        let start = usize::try_from(offset).map_err(|_| short())?;
        let end = start.checked_add(buf.len()).ok_or_else(short)?;
        buf.copy_from_slice(self.bytes.get(start..end).ok_or_else(short)?);
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
        assert!(s.read_exact_at(u64::MAX, &mut buf).is_err());
        assert_eq!(s.len(), 6);
    }
}
