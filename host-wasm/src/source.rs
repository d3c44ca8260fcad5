//! The one thing the validator needs from its host: positioned reads of a
//! byte source of known length. The trait and [`SliceSource`] live in the
//! core ([`tensorizer_core::source`]), which scans through them; this
//! module adds [`FileSource`].
//!
//! The WASI binary reads a preopened file ([`FileSource`]); tests and an
//! in-memory front end read a byte slice ([`SliceSource`]); a browser front
//! end can implement [`RandomAccess`] over a `Blob` (synchronously in a
//! worker with `FileReaderSync`), or drive the step functions of
//! [`crate::validate`] itself when its reads are asynchronous.

use std::io::{Read, Seek, SeekFrom};

pub use tensorizer_core::source::{RandomAccess, ReadError, SliceSource};

/// An open file (on WASI: a file under a preopened directory), read with
/// seek + read. Its length is taken once, when it is opened.
#[derive(Debug)]
pub struct FileSource {
    file: std::fs::File,
    len: u64,
}

impl FileSource {
    /// Opens `path` read-only.
    pub fn open(path: &str) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Err(std::io::Error::other("is a directory"));
        }
        Ok(Self { len: meta.len(), file })
    }
}

impl RandomAccess for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let err = |e: std::io::Error| ReadError { offset, message: e.to_string() };
        self.file.seek(SeekFrom::Start(offset)).map_err(err)?;
        self.file.read_exact(buf).map_err(err)
    }
}
