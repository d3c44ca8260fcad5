//! `Window`: a byte range of another source, seen as a whole source. It is
//! how a tensorizer file stored at an offset inside a bigger object (an
//! `open_stream(uri, begin=N)` stream) is read without copying.

use super::{RangeSource, check_range};
use crate::error::{Error, Result};

/// Bytes `begin..end` of `inner`, addressed from 0.
#[derive(Debug)]
pub struct Window<S> {
    inner: S,
    begin: u64,
    len: u64,
    name: String,
}

impl<S: RangeSource> Window<S> {
    /// The bytes of `inner` from `begin` up to `end` (exclusive; `None` or
    /// past the end means to the end). Fails when `begin` lies past the end
    /// or `end` before `begin`.
    pub fn new(inner: S, begin: u64, end: Option<u64>) -> Result<Self> {
        let total = inner.len();
        let end = end.map_or(total, |e| e.min(total));
        if begin > total || end < begin {
            return Err(Error::Invalid(format!(
                "byte range {begin}..{} lies outside {} ({total} bytes)",
                end,
                inner.name()
            )));
        }
        let name = if begin == 0 && end == total {
            inner.name().to_owned()
        } else {
            format!("{} [bytes {begin}..{end}]", inner.name())
        };
        Ok(Self { inner, begin, len: end - begin, name })
    }

    /// Where the window starts in the inner source.
    pub fn begin(&self) -> u64 {
        self.begin
    }
}

impl<S: RangeSource> RangeSource for Window<S> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(&self.name, self.len, offset, buf.len())?;
        // In range of the window, so begin + offset ≤ begin + len ≤ inner length.
        self.inner.read_exact_at(self.begin + offset, buf)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn prefers_long_reads(&self) -> bool {
        self.inner.prefers_long_reads()
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(&self.name, self.len, offset, total)?;
        self.inner.read_vectored_at(self.begin + offset, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemorySource;

    fn source() -> MemorySource {
        MemorySource::new((0u8..100).collect(), "mem")
    }

    #[test]
    fn reads_are_shifted_and_bounded() {
        let w = Window::new(source(), 10, Some(20)).unwrap();
        assert_eq!(w.len(), 10);
        let mut buf = [0u8; 4];
        w.read_exact_at(6, &mut buf).unwrap();
        assert_eq!(buf, [16, 17, 18, 19]);
        assert!(w.read_exact_at(7, &mut buf).is_err(), "past the window's end");
        let (mut a, mut b) = ([0u8; 2], [0u8; 3]);
        w.read_vectored_at(1, &mut [&mut a, &mut b]).unwrap();
        assert_eq!((a, b), ([11, 12], [13, 14, 15]));
        assert_eq!(w.name(), "mem [bytes 10..20]");
    }

    #[test]
    fn open_end_and_clamping() {
        assert_eq!(Window::new(source(), 90, None).unwrap().len(), 10);
        assert_eq!(Window::new(source(), 90, Some(1000)).unwrap().len(), 10);
        let whole = Window::new(source(), 0, None).unwrap();
        assert_eq!(whole.name(), "mem");
        assert!(Window::new(source(), 101, None).is_err());
        assert!(Window::new(source(), 50, Some(40)).is_err());
    }
}
