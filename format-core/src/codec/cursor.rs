//! A panic-free read cursor over a complete buffer. nom does the decoding;
//! this type turns nom's failures into [`Error::Truncated`] with absolute
//! offsets, so nom types never leave the codec.

use nom::Parser;
use nom::bytes::complete::take;
use nom::number::complete::{le_i32, le_i64, le_u8, le_u16, le_u32, le_u64};

use crate::error::{Error, Result};

type NomError<'a> = nom::error::Error<&'a [u8]>;

/// Sequential reader over `input`, whose first byte sits at absolute `base`.
pub(crate) struct Cursor<'a> {
    input: &'a [u8],
    rest: &'a [u8],
    base: u64,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(input: &'a [u8], base: u64) -> Self {
        Self { input, rest: input, base }
    }

    /// Absolute offset of the next unread byte.
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.position() as u64
    }

    /// Position of the next unread byte relative to the buffer start.
    pub(crate) fn position(&self) -> usize {
        self.input.len() - self.rest.len()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    fn run<T, P>(&mut self, width: u64, mut parser: P) -> Result<T>
    where
        P: Parser<&'a [u8], Output = T, Error = NomError<'a>>,
    {
        match parser.parse(self.rest) {
            Ok((rest, value)) => {
                self.rest = rest;
                Ok(value)
            }
            Err(_) => {
                Err(Error::truncated(self.offset(), width.saturating_sub(self.rest.len() as u64)))
            }
        }
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        self.run(1, le_u8)
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        self.run(2, le_u16)
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        self.run(4, le_u32)
    }

    pub(crate) fn i32(&mut self) -> Result<i32> {
        self.run(4, le_i32)
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        self.run(8, le_u64)
    }

    pub(crate) fn i64(&mut self) -> Result<i64> {
        self.run(8, le_i64)
    }

    /// Takes `len` bytes; a length larger than the buffer is a truncation,
    /// never an allocation.
    pub(crate) fn take(&mut self, len: u64) -> Result<&'a [u8]> {
        let Ok(n) = usize::try_from(len) else {
            return Err(Error::truncated(self.offset(), len));
        };
        self.run(len, take(n))
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let bytes = self.take(N as u64)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }
}

/// Little-endian emitters, the mirror image of [`Cursor`].
pub(crate) trait Emit {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_i32(&mut self, v: i32);
    fn put_u64(&mut self, v: u64);
    fn put(&mut self, bytes: &[u8]);
}

impl Emit for alloc::vec::Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_i32(&mut self, v: i32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_reports_offset_and_missing_bytes() {
        let mut c = Cursor::new(&[1, 0, 7], 100);
        assert_eq!(c.u16().unwrap(), 1);
        assert_eq!(c.u32(), Err(Error::Truncated { offset: 102, needed: 3 }));
        assert_eq!(c.take(u64::MAX), Err(Error::Truncated { offset: 102, needed: u64::MAX - 1 }));
        assert_eq!(c.u8().unwrap(), 7);
    }
}
