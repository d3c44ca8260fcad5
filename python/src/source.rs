//! `NativeSource`: any byte source the native host can open (local path,
//! `http(s)://`, `s3://`, `redis://`), for `stream_io.open_stream` and for
//! handing to `NativeReader` without re-opening; and `s3_upload`. Both
//! take tensorizer's `CAInfo` fields (`cacert`, `capath`,
//! `allow_untrusted`) for `https://` and S3 endpoints.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tensorizer_native::store::s3::S3Options;
use tensorizer_native::store::tls::TlsOptions;
use tensorizer_native::{Intent, Location, RangeSource, StoreOptions, open_sink, open_source};

use crate::buffers::Held;
use crate::errors::to_py;

/// An opened byte source serving positioned reads from any thread.
#[pyclass(module = "tensorizer_rs._native", frozen)]
pub struct NativeSource {
    pub(crate) inner: Arc<dyn RangeSource>,
}

/// TLS trust from `CAInfo`'s fields: a CA bundle (`cacert`), a CA
/// directory (`capath`), or no verification (`allow_untrusted`); none of
/// them: the environment, then the system's CAs (see `tensorizer_native::store::tls`).
fn tls_options(cacert: Option<PathBuf>, capath: Option<PathBuf>, allow_untrusted: bool) -> TlsOptions {
    TlsOptions {
        ca_files: cacert.into_iter().collect(),
        ca_dirs: capath.into_iter().collect(),
        insecure_skip_verify: allow_untrusted,
        ..TlsOptions::default()
    }
}

/// tensorizer's six S3 arguments.
struct S3Args {
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    endpoint: Option<String>,
    config_path: Option<PathBuf>,
    region: Option<String>,
    force_http: Option<bool>,
}

/// The store options for these arguments, with the environment's
/// `TZR_MIN_RATE` / `TZR_DEADLINE` overrides, as every remote read has.
fn store_options(intent: Intent, s3: S3Args, tls: TlsOptions) -> PyResult<StoreOptions> {
    let mut options = StoreOptions::from_env(intent).map_err(to_py)?;
    options.s3 = S3Options {
        access_key_id: s3.access_key_id,
        secret_access_key: s3.secret_access_key,
        endpoint: s3.endpoint,
        config_path: s3.config_path,
        region: s3.region,
        force_http: s3.force_http,
        ..S3Options::default()
    };
    options.http.tls = tls;
    Ok(options)
}

/// Parses a path or URI (a `PathBuf` from Python's `os.fspath`).
fn location(uri: &std::path::Path) -> PyResult<Location> {
    Location::parse(&uri.to_string_lossy()).map_err(to_py)
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
        let location = location(&uri)?;
        let s3 = S3Args {
            access_key_id: s3_access_key_id,
            secret_access_key: s3_secret_access_key,
            endpoint: s3_endpoint,
            config_path: s3_config_path,
            region: s3_region_name,
            force_http,
        };
        // Python opens sources to load them: the opening request goes on into the first read.
        let options = store_options(Intent::ReadAll, s3, tls_options(cacert, capath, allow_untrusted))?;
        let inner: Arc<dyn RangeSource> = Arc::from(py.detach(|| open_source(&location, &options)).map_err(to_py)?);
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
pub(crate) fn s3cfg_values(text: &str) -> (bool, Option<String>, Option<String>, Option<String>, Option<bool>) {
    let cfg = tensorizer_native::store::s3::parse_s3cfg(text);
    (cfg.has_default, cfg.host_base, cfg.access_key, cfg.secret_key, cfg.use_https)
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
    let s3 = S3Args {
        access_key_id: s3_access_key_id,
        secret_access_key: s3_secret_access_key,
        endpoint: s3_endpoint,
        config_path: s3_config_path,
        region: s3_region_name,
        force_http,
    };
    let options = store_options(Intent::ReadAll, s3, TlsOptions::default())?;
    let object = options.s3.resolve(&uri, false).map_err(to_py)?;
    Ok(object.presigned_get_url(expires))
}

/// Uploads the finished local file `path` to `uri` (`s3://`, `gs://`,
/// `az://`, `abfs(s)://`; with `overwrite`, a local path or `redis://`
/// too): nothing partial is ever visible there. The `s3_*` arguments,
/// `cacert`, `capath` and `allow_untrusted` as for `NativeSource`.
#[pyfunction]
#[pyo3(signature = (path, uri, *, s3_access_key_id=None, s3_secret_access_key=None, s3_endpoint=None,
                    s3_config_path=None, s3_region_name=None, force_http=None,
                    cacert=None, capath=None, allow_untrusted=false, overwrite=true))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn upload(
    py: Python<'_>,
    path: PathBuf,
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
    overwrite: bool,
) -> PyResult<()> {
    let location = location(&uri)?;
    let s3 = S3Args {
        access_key_id: s3_access_key_id,
        secret_access_key: s3_secret_access_key,
        endpoint: s3_endpoint,
        config_path: s3_config_path,
        region: s3_region_name,
        force_http,
    };
    let mut options = store_options(Intent::ReadAll, s3, tls_options(cacert, capath, allow_untrusted))?;
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
