//! Where bytes come from: anything that can serve positioned reads
//! concurrently. Local files use `pread`; remote sources plug in here.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{Error, Result, io_err};

/// A byte source that serves concurrent positioned reads.
pub trait RangeSource: Send + Sync {
    /// Total length in bytes.
    fn len(&self) -> u64;

    /// Whether the source is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset`. Reading past the end is an
    /// error.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// A name for messages: a path or a URI.
    fn name(&self) -> &str;

    /// Whether each request costs far more than the bytes it moves (network
    /// sources). The reader then fetches a few long spans, one request per
    /// reader thread, instead of many pieces.
    fn prefers_long_reads(&self) -> bool {
        false
    }

    /// Fills `bufs`, which together cover consecutive bytes starting at
    /// `offset`. Network sources serve this with one request.
    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let mut at = offset;
        for buf in bufs.iter_mut() {
            self.read_exact_at(at, buf)?;
            at += buf.len() as u64;
        }
        Ok(())
    }
}

/// Fails with a `Truncated` format error when `len` bytes at `offset` do
/// not lie inside a source of `total` bytes.
pub(crate) fn check_range(name: &str, total: u64, offset: u64, len: usize) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= total => Ok(()),
        end => Err(Error::format(
            name,
            tensorizer_core::Error::Truncated {
                offset: total.min(offset),
                needed: end.map_or(u64::MAX, |e| e - total),
            },
        )),
    }
}

/// A local file read with `pread`, so any number of threads share one
/// descriptor.
#[derive(Debug)]
pub struct LocalFile {
    file: File,
    len: u64,
    name: String,
}

impl LocalFile {
    /// Opens `path` for reading.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let name = path.as_ref().display().to_string();
        let file = File::open(path.as_ref()).map_err(io_err(&name, 0))?;
        let len = file.metadata().map_err(io_err(&name, 0))?.len();
        Ok(Self { file, len, name })
    }

    /// The underlying file.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl RangeSource for LocalFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(&self.name, self.len, offset, buf.len())?;
        self.file.read_exact_at(buf, offset).map_err(io_err(&self.name, offset))
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// An in-memory source (tests, small files, already-fetched bytes).
#[derive(Debug, Clone)]
pub struct MemorySource {
    bytes: Vec<u8>,
    name: String,
}

impl MemorySource {
    /// Wraps `bytes` under a display name.
    pub fn new(bytes: Vec<u8>, name: impl Into<String>) -> Self {
        Self { bytes, name: name.into() }
    }
}

impl RangeSource for MemorySource {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        match start.checked_add(buf.len()).and_then(|end| self.bytes.get(start..end)) {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => check_range(&self.name, self.len(), offset, buf.len()),
        }
    }

    fn name(&self) -> &str {
        &self.name
    }
}

impl<T: RangeSource + ?Sized> RangeSource for Box<T> {
    fn len(&self) -> u64 {
        (**self).len()
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        (**self).read_exact_at(offset, buf)
    }

    fn name(&self) -> &str {
        (**self).name()
    }

    fn prefers_long_reads(&self) -> bool {
        (**self).prefers_long_reads()
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        (**self).read_vectored_at(offset, bufs)
    }
}

impl<T: RangeSource + ?Sized> RangeSource for std::sync::Arc<T> {
    fn len(&self) -> u64 {
        (**self).len()
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        (**self).read_exact_at(offset, buf)
    }

    fn name(&self) -> &str {
        (**self).name()
    }

    fn prefers_long_reads(&self) -> bool {
        (**self).prefers_long_reads()
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        (**self).read_vectored_at(offset, bufs)
    }
}

/// How much of a source its user means to read. Network sources plan their
/// opening request by it (see [`crate::http::HttpOptions::read_all`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Intent {
    /// Most of it: a load, a copy, a conversion.
    #[default]
    ReadAll,
    /// Its header and index only: an inspection.
    Peek,
}

/// Opens a local path, a `redis://host[:port]/prefix` URI (see
/// [`crate::redis`]) or, with the `http` and `s3` features, an
/// `http(s)://` URL or an `s3://` URI (configured from the environment; see
/// [`crate::s3::S3Options`]), to read most of it.
pub fn open_source(uri: &str) -> Result<Box<dyn RangeSource>> {
    open_source_for(uri, Intent::ReadAll)
}

/// [`open_source`], for reading as much as `intent` says.
#[cfg_attr(not(feature = "http"), allow(unused_variables))]
pub fn open_source_for(uri: &str, intent: Intent) -> Result<Box<dyn RangeSource>> {
    #[cfg(feature = "http")]
    let http = crate::http::HttpOptions { read_all: intent == Intent::ReadAll, ..Default::default() };
    #[cfg(feature = "s3")]
    if crate::s3::is_s3_uri(uri) {
        let options = crate::s3::S3Options { http, ..Default::default() };
        return Ok(Box::new(crate::s3::open(uri, &options)?));
    }
    #[cfg(feature = "http")]
    if crate::http::is_http_url(uri) {
        return Ok(Box::new(crate::http::HttpSource::open(uri, http)?));
    }
    if crate::redis::is_redis_uri(uri) {
        return Ok(Box::new(crate::redis::RedisSource::open(uri, crate::redis::RedisOptions::default())?));
    }
    let lower = uri.to_ascii_lowercase();
    for scheme in ["s3://", "http://", "https://"] {
        if lower.starts_with(scheme) {
            return Err(Error::Invalid(format!("{uri}: {scheme} sources are not supported by this build yet")));
        }
    }
    Ok(Box::new(LocalFile::open(uri)?))
}
