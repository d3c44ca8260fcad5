//! `NativeSource`: any byte source the native host can open (local path,
//! `http(s)://`, `s3://`, `redis://`), for `stream_io.open_stream` and for
//! handing to `NativeReader` without re-opening; `upload` and
//! `s3_presign`. Each takes its S3 and TLS settings as one
//! [`RemoteOptions`].

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tensorizer_native::{Intent, Location, RangeSource, open_sink, open_source};

use crate::buffers::Held;
use crate::errors::to_py;
use crate::remote::RemoteOptions;

/// An opened byte source serving positioned reads from any thread.
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub struct NativeSource {
    pub(crate) inner: Arc<dyn RangeSource>,
}

/// Parses a path or URI (a `PathBuf` from Python's `os.fspath`).
fn location(uri: &std::path::Path) -> PyResult<Location> {
    Location::parse(&uri.to_string_lossy()).map_err(to_py)
}

#[pymethods]
impl NativeSource {
    /// Opens `uri`, reaching `s3://` and `https://` objects as `options`
    /// says (None: the environment, `~/.s3cfg`, the system's CAs).
    #[new]
    #[pyo3(signature = (uri, options=None))]
    fn new(
        py: Python<'_>,
        uri: PathBuf,
        options: Option<PyRef<'_, RemoteOptions>>,
    ) -> PyResult<Self> {
        let location = location(&uri)?;
        // Python opens sources to load them: the opening request goes on into the first read.
        let options = RemoteOptions::or_default(options).store_options(Intent::ReadAll)?;
        let inner: Arc<dyn RangeSource> =
            Arc::from(py.detach(|| open_source(&location, &options)).map_err(to_py)?);
        Ok(Self { inner })
    }

    /// Total length in bytes.
    fn __len__(&self) -> usize {
        usize::try_from(self.inner.len()).unwrap_or(usize::MAX)
    }

    /// Length in bytes (also beyond `sys.maxsize`).
    fn size(&self) -> u64 {
        self.inner.len()
    }

    /// The path or URI, as shown in messages.
    fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// Up to `n` bytes at `offset` (fewer only at the end).
    fn read_at<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        n: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let n =
            n.min(usize::try_from(self.inner.len().saturating_sub(offset)).unwrap_or(usize::MAX));
        let mut buf = vec![0u8; n];
        py.detach(|| self.inner.read_exact_at(offset, &mut buf)).map_err(to_py)?;
        Ok(PyBytes::new(py, &buf))
    }

    /// Bytes `begin..end` (exclusive; `None`: to the end) of this source,
    /// as a source of their own: a file stored inside a bigger object.
    #[pyo3(signature = (begin, end=None))]
    pub(crate) fn window(&self, begin: u64, end: Option<u64>) -> PyResult<Self> {
        let window = tensorizer_native::source::Window::new(self.inner.clone(), begin, end)
            .map_err(to_py)?;
        Ok(Self { inner: Arc::new(window) })
    }

    /// Fills as much of the writable `buffer` as the source has at
    /// `offset`; returns the byte count.
    fn readinto_at(
        &self,
        py: Python<'_>,
        offset: u64,
        buffer: Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let mut held = Held::acquire(&[buffer], true)?;
        let mut slices = held.slices_mut();
        let Some(buf) = slices.pop() else { return Ok(0) };
        let n = buf
            .len()
            .min(usize::try_from(self.inner.len().saturating_sub(offset)).unwrap_or(usize::MAX));
        py.detach(|| self.inner.read_exact_at(offset, &mut buf[..n])).map_err(to_py)?;
        Ok(n)
    }
}

/// Why the local file at `path` cannot change while mapped (`"immutable"`,
/// `"fs-verity"`, `"read-only file system"`), or `None` when nothing
/// guarantees it: what `mmap="auto"` asks (spec §23.6).
#[pyfunction]
pub(crate) fn file_frozen(path: std::path::PathBuf) -> PyResult<Option<&'static str>> {
    let file = std::fs::File::open(&path)?;
    Ok(tensorizer_native::source::frozen(&file).map(tensorizer_native::source::Frozen::as_str))
}

/// The `[default]` values of an s3cmd config file's text, as the native
/// S3 store reads them (the one reader of `.s3cfg`): whether the section
/// exists, `host_base`, `access_key`, `secret_key` and `use_https`.
#[pyfunction]
pub(crate) fn s3cfg_values(
    text: &str,
) -> (bool, Option<String>, Option<String>, Option<String>, Option<bool>) {
    let cfg = tensorizer_native::store::s3::parse_s3cfg(text);
    (cfg.has_default, cfg.host_base, cfg.access_key, cfg.secret_key, cfg.use_https)
}

/// A presigned (SigV4 query-string) GET URL for `uri` (`s3://bucket/key`),
/// valid for `expires` seconds, signed as `options` says.
#[pyfunction]
#[pyo3(signature = (uri, expires, options=None))]
pub(crate) fn s3_presign(
    uri: String,
    expires: u64,
    options: Option<PyRef<'_, RemoteOptions>>,
) -> PyResult<String> {
    let options = RemoteOptions::or_default(options).store_options(Intent::ReadAll)?;
    let object = options.s3.resolve_uri(&uri, false).map_err(to_py)?;
    Ok(object.presigned_get_url(expires))
}

/// Uploads the finished local file `path` to `uri` (`s3://`, `gs://`,
/// `az://`, `abfs(s)://`; with `overwrite`, a local path or `redis://`
/// too), reaching it as `options` says: nothing partial is ever visible
/// there.
#[pyfunction]
#[pyo3(signature = (path, uri, options=None, *, overwrite=true))]
pub(crate) fn upload(
    py: Python<'_>,
    path: PathBuf,
    uri: PathBuf,
    options: Option<PyRef<'_, RemoteOptions>>,
    overwrite: bool,
) -> PyResult<()> {
    let location = location(&uri)?;
    let mut options = RemoteOptions::or_default(options).store_options(Intent::ReadAll)?;
    options.overwrite = overwrite;
    let sink = open_sink(&location, &options).map_err(to_py)?;
    py.detach(|| sink.put_file(&path)).map_err(to_py)
}

/// The scheme of a path or URI, parsed once in Rust: `"file"`, `"http"`,
/// `"https"`, `"s3"`, `"gs"`, `"az"` (every Azure form) or `"redis"`.
/// A malformed URI or an unknown scheme raises `ValueError`.
#[pyfunction]
pub(crate) fn location_scheme(uri: PathBuf) -> PyResult<&'static str> {
    Ok(location(&uri)?.scheme())
}

/// Whether `uri` names a Redis key (`redis://`, `rediss://`, or either
/// `+cluster`); false for anything else, malformed URIs included.
#[pyfunction]
pub(crate) fn location_is_redis(uri: PathBuf) -> bool {
    location(&uri).is_ok_and(|l| l.is_redis())
}
