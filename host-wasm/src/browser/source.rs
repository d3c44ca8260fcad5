//! Asynchronous positioned reads: what the inspector needs from a browser
//! (`Blob.slice().arrayBuffer()` for a local file, `fetch` with `Range`
//! for a URL), with byte counting and a read-ahead window for verification.
//!
//! [`AsyncSource`] is the asynchronous twin of the core's
//! [`RandomAccess`]: a page's main
//! thread may not block, and a `Blob` or a `fetch` answers with a
//! `Promise`, so a read must be awaited. Everything else is the core's: the
//! error ([`ReadError`]), the bounds check ([`span`]) and the length check
//! ([`check_read`]); an in-memory source reads through the core's
//! [`SliceSource`].

use std::future::Future;

use tensorizer_core::source::{RandomAccess, SliceSource, check_read, span};

use crate::error::ValidateError;
use crate::source::ReadError;
use crate::validate::zeroed;

/// A byte source of known length, read asynchronously at any offset.
pub trait AsyncSource {
    /// Total length in bytes.
    fn len(&self) -> u64;

    /// Whether the source is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads exactly `len` bytes at `offset`; fewer is an error.
    fn read(&mut self, offset: u64, len: usize)
    -> impl Future<Output = Result<Vec<u8>, ReadError>>;
}

/// Counts the reads and bytes that pass through to a source.
#[derive(Debug)]
pub struct Counted<S> {
    inner: S,
    /// Reads made.
    pub reads: u64,
    /// Bytes read.
    pub bytes: u64,
}

impl<S> Counted<S> {
    /// Wraps `inner`, with both counters at zero.
    pub fn new(inner: S) -> Self {
        Self { inner, reads: 0, bytes: 0 }
    }
}

impl<S: AsyncSource> AsyncSource for Counted<S> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    async fn read(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, ReadError> {
        let out = self.inner.read(offset, len).await?;
        self.reads = self.reads.saturating_add(1);
        self.bytes = self.bytes.saturating_add(out.len() as u64);
        Ok(out)
    }
}

/// Checks that a source returned exactly the bytes asked for (the core's
/// [`check_read`]).
pub fn check_len(offset: u64, want: usize, got: Vec<u8>) -> Result<Vec<u8>, ReadError> {
    check_read(offset, want, got.len()).map(|()| got)
}

/// Bytes in memory (tests, and pages that already hold a small file).
#[derive(Debug, Clone)]
pub struct MemSource(pub Vec<u8>);

impl AsyncSource for MemSource {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    async fn read(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, ReadError> {
        span(offset, len, self.len())?;
        let mut out = vec![0; len];
        SliceSource::new(&self.0).read_exact_at(offset, &mut out)?;
        Ok(out)
    }
}

/// Reads sequential ranges through one buffer of up to `window` bytes,
/// so many small tensors (header and data each) cost one read per window
/// rather than two reads each. Ranges longer than the window are read
/// directly.
#[derive(Debug)]
pub struct Window<S> {
    /// The source.
    pub src: S,
    window: usize,
    buf: Vec<u8>,
    at: u64,
}

impl<S: AsyncSource> Window<S> {
    /// A window of `window` bytes over `src`.
    pub fn new(src: S, window: usize) -> Self {
        Self { src, window: window.max(1), buf: Vec::new(), at: 0 }
    }

    /// Fills `out` with the bytes at `offset`.
    pub async fn read_into(&mut self, offset: u64, out: &mut [u8]) -> Result<(), ValidateError> {
        let n = out.len();
        let end = span(offset, n, u64::MAX)?;
        let buffered = self.at..self.at.saturating_add(self.buf.len() as u64);
        if offset >= buffered.start && end <= buffered.end {
            let s = (offset - self.at) as usize;
            out.copy_from_slice(&self.buf[s..s + n]);
            return Ok(());
        }
        if n >= self.window {
            let got = self.src.read(offset, n).await?;
            out.copy_from_slice(&check_len(offset, n, got)?);
            return Ok(());
        }
        let len = self.src.len();
        let take = (self.window as u64).min(len.saturating_sub(offset)).max(n as u64) as usize;
        self.buf = Vec::new(); // free the old window before reading the next
        self.buf = check_len(offset, take, self.src.read(offset, take).await?)?;
        self.at = offset;
        out.copy_from_slice(&self.buf[..n]);
        Ok(())
    }

    /// `len` bytes at `offset`, in a new buffer reserved fallibly.
    pub async fn read_vec(
        &mut self,
        offset: u64,
        len: u64,
        what: &str,
    ) -> Result<Vec<u8>, ValidateError> {
        let mut v = crate::validate::zeroed(len, offset, what)?;
        self.read_into(offset, &mut v).await?;
        Ok(v)
    }
}

/// Drives a future whose reads complete at once (a [`MemSource`]) to its
/// end: the tests' executor. Returns `None` if the future ever waits.
pub fn block_on_ready<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// Reads `len` bytes at `offset`, exactly.
pub async fn read_exact<S: AsyncSource>(
    src: &mut S,
    offset: u64,
    len: u64,
    what: &str,
) -> Result<Vec<u8>, ValidateError> {
    let n = usize::try_from(len).map_err(|_| ValidateError::no_memory(offset, what, len))?;
    // Reserve first so that a size we cannot hold is an error, not an abort.
    drop(zeroed(len, offset, what)?);
    Ok(check_len(offset, n, src.read(offset, n).await?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_serves_small_reads_from_one_read() {
        let data: Vec<u8> = (0..=255).cycle().take(10_000).collect();
        let mut w = Window::new(Counted::new(MemSource(data.clone())), 4096);
        let mut out = [0u8; 100];
        for at in [0u64, 100, 3000, 3996] {
            block_on_ready(w.read_into(at, &mut out)).unwrap().unwrap();
            assert_eq!(&out[..], &data[at as usize..at as usize + 100]);
        }
        assert_eq!(w.src.reads, 1);
        // Crossing the window's end starts a new window; a big read goes direct.
        block_on_ready(w.read_into(4000, &mut out)).unwrap().unwrap();
        let mut big = vec![0u8; 5000];
        block_on_ready(w.read_into(1, &mut big)).unwrap().unwrap();
        assert_eq!(&big[..], &data[1..5001]);
        assert_eq!(w.src.reads, 3);
        // Near the end the window shrinks to what is there; past it is an error.
        block_on_ready(w.read_into(9900, &mut out)).unwrap().unwrap();
        assert!(block_on_ready(w.read_into(9950, &mut out)).unwrap().is_err());
    }
}
