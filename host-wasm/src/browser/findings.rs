//! "Findings": the core's scanner (spec §22) over the opened file, the
//! same report `tzr scan --json` prints ([`sarif::scan_json`]). The
//! scanner reads synchronously; in the browser it runs in a Web Worker,
//! whose reads (`FileReaderSync`, or synchronous Range requests for a URL)
//! go through [`Blocks`], a read-ahead cache, so a 20,000-tensor index and
//! its tensor headers take a handful of reads, not one per header.

use serde_json::Value;
use tensorizer_core::scan::{ScanOptions, sarif, scan};
use tensorizer_core::{RandomAccess, ReadError};

use crate::error::ValidateError;

/// Bytes each cache miss reads ahead.
pub const BLOCK: usize = 1 << 20;

/// Serves positioned reads from one block of `block` bytes, refilled on a
/// miss; reads of a block or more go straight through.
#[derive(Debug)]
pub struct Blocks<R> {
    inner: R,
    block: usize,
    buf: Vec<u8>,
    at: u64,
    /// Reads passed to `inner`.
    pub reads: u64,
}

impl<R: RandomAccess> Blocks<R> {
    /// A cache of `block` bytes over `inner`.
    pub fn new(inner: R, block: usize) -> Self {
        Self { inner, block: block.max(1), buf: Vec::new(), at: 0, reads: 0 }
    }
}

impl<R: RandomAccess> RandomAccess for Blocks<R> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_exact_at(&mut self, offset: u64, out: &mut [u8]) -> Result<(), ReadError> {
        let n = out.len();
        let end = offset
            .checked_add(n as u64)
            .ok_or(ReadError { offset, message: "offset overflows".into() })?;
        if offset >= self.at && end <= self.at.saturating_add(self.buf.len() as u64) {
            let s = (offset - self.at) as usize;
            out.copy_from_slice(&self.buf[s..s + n]);
            return Ok(());
        }
        self.reads = self.reads.saturating_add(1);
        if n >= self.block || end > self.inner.len() {
            // Large, or past the end (the source reports the short read).
            return self.inner.read_exact_at(offset, out);
        }
        let take = (self.block as u64).min(self.inner.len() - offset) as usize;
        self.buf.clear();
        self.buf.resize(take, 0);
        if let Err(e) = self.inner.read_exact_at(offset, &mut self.buf) {
            self.buf.clear();
            return Err(e);
        }
        self.at = offset;
        out.copy_from_slice(&self.buf[..n]);
        Ok(())
    }
}

/// Scans `src` (a file named `file`: its extension is checked against its
/// bytes) and returns the report `tzr scan --json` prints for it, with
/// `reads`, the reads the scan made, added.
pub fn scan_report<R: RandomAccess>(src: R, file: &str) -> Result<Value, ValidateError> {
    let mut src = Blocks::new(src, BLOCK);
    let scanned = scan(&mut src, &ScanOptions { name: Some(file), ..ScanOptions::default() })?;
    let mut report = sarif::scan_json(file, &scanned);
    if let Value::Object(o) = &mut report {
        o.insert("reads".into(), src.reads.into());
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use tensorizer_core::SliceSource;

    use super::*;

    fn vector(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/../tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    #[test]
    fn the_report_is_the_scanners_and_the_cache_is_transparent() {
        for (name, bytes) in [
            ("v1_flat.tensors", vector("v1_flat.tensors")),
            ("hostile_os_system.pt", vector("torch/hostile_os_system.pt")),
            ("cut.tensors", vector("v1_flat.tensors")[..1000].to_vec()),
        ] {
            let direct = scan(
                &mut SliceSource::new(&bytes),
                &ScanOptions { name: Some(name), ..Default::default() },
            );
            let want = sarif::scan_json(name, &direct.unwrap());
            let got = scan_report(SliceSource::new(&bytes), name).unwrap();
            assert_eq!(got["findings"], want["findings"], "{name}");
            assert_eq!(got["format"], want["format"], "{name}");
            assert!(got["reads"].as_u64().unwrap() <= 3, "{name}: {}", got["reads"]);
        }
        let clean =
            scan_report(SliceSource::new(&vector("v1_flat.tensors")), "v1_flat.tensors").unwrap();
        assert_eq!(clean["valid"], true);
    }
}
