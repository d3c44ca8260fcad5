//! `NativeSource`: any byte source the native host can open (local path,
//! `http(s)://`, `s3://`, `redis://`), for `stream_io.open_stream` and for
//! handing to `NativeReader` without re-opening; and `s3_upload`. Both
//! take tensorizer's `CAInfo` fields (`cacert`, `capath`,
//! `allow_untrusted`) for `https://` and S3 endpoints.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tensorizer_native::RangeSource;
use tensorizer_native::http::{self, HttpOptions, HttpSource};
use tensorizer_native::s3::{self, S3Options};
use tensorizer_native::source::TransferLimits;
use tensorizer_native::tls::TlsOptions;

use crate::buffers::Held;
use crate::errors::to_py;

/// An opened byte source serving positioned reads from any thread.
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub struct NativeSource {
    pub(crate) inner: Arc<dyn RangeSource>,
}

/// TLS trust from `CAInfo`'s fields: a CA bundle (`cacert`), a CA
/// directory (`capath`), or no verification (`allow_untrusted`); none of
/// them: the environment, then the system's CAs (see `tensorizer_native::tls`).
fn tls_options(cacert: Option<PathBuf>, capath: Option<PathBuf>, allow_untrusted: bool) -> TlsOptions {
    TlsOptions {
        ca_files: cacert.into_iter().collect(),
        ca_dirs: capath.into_iter().collect(),
        insecure_skip_verify: allow_untrusted,
        ..TlsOptions::default()
    }
}

#[allow(clippy::too_many_arguments)]
fn s3_options(
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    endpoint: Option<String>,
    config_path: Option<PathBuf>,
    region: Option<String>,
    force_http: Option<bool>,
    tls: TlsOptions,
) -> PyResult<S3Options> {
    let mut options = S3Options {
        access_key_id,
        secret_access_key,
        endpoint,
        config_path,
        region,
        force_http,
        ..S3Options::default()
    };
    // The same TZR_MIN_RATE / TZR_DEADLINE overrides as every other remote read.
    options.http.limits = TransferLimits::from_env().map_err(to_py)?;
    options.http.tls = tls;
    Ok(options)
}

#[pymethods]
impl NativeSource {
    /// Opens `uri`. The `s3_*` arguments and `force_http` configure `s3://`
    /// (unset ones come from the environment and `~/.s3cfg`); `cacert`,
    /// `capath` and `allow_untrusted` (tensorizer's `CAInfo`) say which
    /// CAs `https://` and S3 servers must be signed by.
    #[new]
    #[pyo3(signature = (uri, *, s3_access_key_id=None, s3_secret_access_key=None, s3_endpoint=None,
                        s3_config_path=None, s3_region_name=None, force_http=None,
                        cacert=None, capath=None, allow_untrusted=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        uri: PathBuf,
        s3_access_key_id: Option<String>,
        s3_secret_access_key: Option<String>,
        s3_endpoint: Option<String>,
        s3_config_path: Option<PathBuf>,
        s3_region_name: Option<String>,
        force_http: Option<bool>,
        cacert: Option<PathBuf>,
        capath: Option<PathBuf>,
        allow_untrusted: bool,
    ) -> PyResult<Self> {
        let uri = uri.to_string_lossy().into_owned();
        let tls = tls_options(cacert, capath, allow_untrusted);
        let inner: Arc<dyn RangeSource> = if s3::is_s3_uri(&uri) {
            let mut options = s3_options(
                s3_access_key_id,
                s3_secret_access_key,
                s3_endpoint,
                s3_config_path,
                s3_region_name,
                force_http,
                tls,
            )?;
            // Python opens sources to load them: the opening request goes on into the first read.
            options.http.read_all = true;
            Arc::new(py.detach(|| s3::open(&uri, &options)).map_err(to_py)?)
        } else if http::is_http_url(&uri) {
            // As `open_source` would, with the TLS trust given.
            let limits = TransferLimits::from_env().map_err(to_py)?;
            let options = HttpOptions { read_all: true, limits, tls, ..HttpOptions::default() };
            Arc::new(py.detach(|| HttpSource::open(&uri, options)).map_err(to_py)?)
        } else {
            Arc::from(py.detach(|| tensorizer_native::open_source(&uri)).map_err(to_py)?)
        };
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
    fn read_at<'py>(&self, py: Python<'py>, offset: u64, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let n = n.min(usize::try_from(self.inner.len().saturating_sub(offset)).unwrap_or(usize::MAX));
        let mut buf = vec![0u8; n];
        py.detach(|| self.inner.read_exact_at(offset, &mut buf)).map_err(to_py)?;
        Ok(PyBytes::new(py, &buf))
    }

    /// Bytes `begin..end` (exclusive; `None`: to the end) of this source,
    /// as a source of their own: a file stored inside a bigger object.
    #[pyo3(signature = (begin, end=None))]
    fn window(&self, begin: u64, end: Option<u64>) -> PyResult<Self> {
        let window = tensorizer_native::source::Window::new(self.inner.clone(), begin, end).map_err(to_py)?;
        Ok(Self { inner: Arc::new(window) })
    }

    /// Fills as much of the writable `buffer` as the source has at
    /// `offset`; returns the byte count.
    fn readinto_at(&self, py: Python<'_>, offset: u64, buffer: Bound<'_, PyAny>) -> PyResult<usize> {
        let mut held = Held::acquire(&[buffer], true)?;
        let mut slices = held.slices_mut();
        let Some(buf) = slices.pop() else { return Ok(0) };
        let n = buf.len().min(usize::try_from(self.inner.len().saturating_sub(offset)).unwrap_or(usize::MAX));
        py.detach(|| self.inner.read_exact_at(offset, &mut buf[..n])).map_err(to_py)?;
        Ok(n)
    }
}

/// A presigned (SigV4 query-string) GET URL for `uri` (`s3://bucket/key`),
/// valid for `expires` seconds; the `s3_*` arguments as for `NativeSource`.
#[pyfunction]
#[pyo3(signature = (uri, expires, *, s3_access_key_id=None, s3_secret_access_key=None, s3_endpoint=None,
                    s3_config_path=None, s3_region_name=None, force_http=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn s3_presign(
    uri: String,
    expires: u64,
    s3_access_key_id: Option<String>,
    s3_secret_access_key: Option<String>,
    s3_endpoint: Option<String>,
    s3_config_path: Option<PathBuf>,
    s3_region_name: Option<String>,
    force_http: Option<bool>,
) -> PyResult<String> {
    let options = s3_options(
        s3_access_key_id,
        s3_secret_access_key,
        s3_endpoint,
        s3_config_path,
        s3_region_name,
        force_http,
        tls_options(None, None, false),
    )?;
    let object = options.resolve(&uri, false).map_err(to_py)?;
    Ok(object.presigned_get_url(expires))
}

/// Uploads the local file `path` to `uri` (`s3://bucket/key`): one PUT or
/// a multipart upload that is aborted on any error. `cacert`, `capath`
/// and `allow_untrusted` as for `NativeSource`.
#[pyfunction]
#[pyo3(signature = (path, uri, *, s3_access_key_id=None, s3_secret_access_key=None, s3_endpoint=None,
                    s3_config_path=None, s3_region_name=None, force_http=None,
                    cacert=None, capath=None, allow_untrusted=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn s3_upload(
    py: Python<'_>,
    path: PathBuf,
    uri: String,
    s3_access_key_id: Option<String>,
    s3_secret_access_key: Option<String>,
    s3_endpoint: Option<String>,
    s3_config_path: Option<PathBuf>,
    s3_region_name: Option<String>,
    force_http: Option<bool>,
    cacert: Option<PathBuf>,
    capath: Option<PathBuf>,
    allow_untrusted: bool,
) -> PyResult<()> {
    if !s3::is_s3_uri(&uri) {
        return Err(PyValueError::new_err(format!("{uri}: not an s3:// URI")));
    }
    let options = s3_options(
        s3_access_key_id,
        s3_secret_access_key,
        s3_endpoint,
        s3_config_path,
        s3_region_name,
        force_http,
        tls_options(cacert, capath, allow_untrusted),
    )?;
    py.detach(|| s3::upload(&path, &uri, &options)).map_err(to_py)
}
